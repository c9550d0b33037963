// What a caller's own code throws while we read its arguments (a getter, a Proxy trap, an array
// element accessor) comes back to it unchanged: a promise-returning method rejects with that
// very exception and never throws; a synchronous method throws it. Never an ERR_INTERNAL in its
// place, and nothing is left registered.
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";

/** Hostile values whose reading throws `thrown`, as each argument shape meets them. */
function hostile(thrown) {
  const fail = () => {
    throw thrown;
  };
  const trap = new Proxy({}, { get: fail, has: fail, ownKeys: fail, getOwnPropertyDescriptor: fail });
  const getters = (...names) => Object.defineProperties({}, Object.fromEntries(names.map((n) => [n, { get: fail, enumerable: true }])));
  // A real array whose first element is an accessor (a Proxy of an array is not an array to
  // N-API: it is refused as bad input before any element is read).
  const array = Object.defineProperty([1, 2], 0, { get: fail });
  return { trap, getters, array };
}

/** `call()` rejects with exactly `thrown`, without throwing. */
async function rejectsWithIt(call, thrown, what) {
  let p;
  assert.doesNotThrow(() => (p = call()), what);
  assert.ok(p instanceof Promise, what);
  await assert.rejects(p, (e) => e === thrown, what);
}

/** `call()` throws exactly `thrown`. */
function throwsIt(call, thrown, what) {
  assert.throws(call, (e) => e === thrown, what);
}

test("promise-returning methods reject with the caller's own exception", async () => {
  const thrown = new Error("the caller's own");
  const { trap, getters, array } = hostile(thrown);
  const store = dt.Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new dt.TouchEngine(store);
  engine.setTouchConfig("s", { enabled: true });
  const journal = new dt.TouchJournal();
  const payload = [Buffer.from("{}")];
  const calls = {
    "Store.createStream options (trap)": () => store.createStream("t", trap),
    "Store.createStream options (getters)": () => store.createStream("t", getters("contentType", "profile")),
    "Store.append options (trap)": () => store.append("s", payload, trap),
    "Store.append options (getters)": () => store.append("s", payload, getters("appendMs", "expectedNext", "producer")),
    "Store.read options (trap)": () => store.read("s", trap),
    "TouchEngine.wait request (trap)": () => engine.wait(trap),
    "TouchEngine.wait request (getters)": () => engine.wait(getters("stream", "cursor", "keyIds", "timeoutMs")),
    "TouchEngine.wait keyIds (elements)": () => engine.wait({ stream: "s", cursor: "now", keyIds: array, interestMode: "coarse", timeoutMs: 10 }),
    "TouchEngine.meta options (trap)": () => engine.meta("s", trap),
    "TouchJournal.waitForAny args (trap)": () => journal.waitForAny(trap),
    "TouchJournal.waitForAny args (getters)": () => journal.waitForAny(getters("keys", "timeoutMs")),
    "TouchJournal.waitForAny keys (elements)": () => journal.waitForAny({ keys: array, timeoutMs: 10 }),
  };
  for (const [what, call] of Object.entries(calls)) await rejectsWithIt(call, thrown, what);
  assert.equal(journal.getActiveWaiters(), 0);
  assert.equal((await store.getStream("s")).nextOffset, 0n, "nothing was appended");
  assert.equal(await store.getStream("t"), null, "no stream was created");
  // Still fully usable.
  const hit = journal.waitForAny({ keys: [7], timeoutMs: 5000 });
  journal.touch(7);
  journal.flush();
  assert.equal((await hit).keyId, 7);
  journal.stop();
  await engine.close();
  await store.close();
});

test("synchronous methods throw the caller's own exception", async () => {
  const thrown = new Error("the caller's own");
  const { trap, getters, array } = hostile(thrown);
  const store = dt.Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new dt.TouchEngine(store);
  const journal = new dt.TouchJournal();
  const calls = {
    "new TouchJournal options (trap)": () => new dt.TouchJournal(trap),
    "new TouchJournal options (getters)": () => new dt.TouchJournal(getters("bucketMs", "k")),
    "TouchEngine.setTouchConfig (trap)": () => engine.setTouchConfig("s", trap),
    "TouchEngine.setTouchConfig (getters)": () => engine.setTouchConfig("s", getters("enabled", "coarseIntervalMs")),
    "TouchEngine.activateTemplates templates (trap)": () => engine.activateTemplates("s", trap),
    "TouchEngine.activateTemplates templates (elements)": () => engine.activateTemplates("s", array),
    "validateTouchConfig (getters)": () => dt.validateTouchConfig(getters("enabled")),
    "TouchJournal.maybeTouchedSinceAny keys (elements)": () => journal.maybeTouchedSinceAny(array, 0),
  };
  for (const [what, call] of Object.entries(calls)) throwsIt(call, thrown, what);
  assert.equal(engine.getTouchConfig("s"), null, "no config was set");
  journal.stop();
  await engine.close();
  await store.close();
});
