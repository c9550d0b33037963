// AbortSignal (J11): already aborted, aborted mid-wait, aborted after resolution; exactly one
// resolution, listeners removed, a user's own handlers untouched.
import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { test, dt, isBun, sleep } from "./harness.mjs";

const { TouchJournal } = dt;
const listeners = (signal) => (isBun ? null : getEventListeners(signal, "abort").length);

test("an already aborted signal resolves null at once and registers nothing", async () => {
  const j = new TouchJournal();
  const signal = AbortSignal.abort();
  const p = j.waitForAny({ keys: [1], timeoutMs: 60_000, signal });
  assert.equal(j.getActiveWaiters(), 0);
  assert.equal(await p, null);
  j.touch(1);
  j.flush();
  assert.equal(j.getTotalStats().notifyWakeups, 0);
});

test("aborting mid-wait resolves null once; a later touch does not resolve it again", async () => {
  const j = new TouchJournal();
  const ac = new AbortController();
  let userHandler = 0;
  ac.signal.onabort = () => userHandler++;
  let settled = 0;
  const p = j.waitForAny({ keys: [1], exactKeys: ["00000000000000aa"], timeoutMs: 60_000, signal: ac.signal }).then((v) => {
    settled++;
    return v;
  });
  assert.equal(j.getActiveWaiters(), 1);
  if (!isBun) assert.equal(listeners(ac.signal), 2, "ours plus the onabort handler");
  await sleep(20);
  ac.abort();
  assert.equal(j.getActiveWaiters(), 0, "cancelled synchronously by the abort");
  assert.equal(await p, null);
  assert.equal(userHandler, 1, "the user's onabort still fires");
  j.touch(1, 5n, "00000000000000aa");
  j.flush();
  await sleep(20);
  assert.equal(settled, 1);
  assert.equal(j.getTotalStats().notifyWakeups, 0);
  if (!isBun) assert.equal(listeners(ac.signal), 1, "our listener is gone");
});

test("aborting after the wait resolved changes nothing", async () => {
  const j = new TouchJournal();
  const ac = new AbortController();
  const p = j.waitForAny({ keys: [9], timeoutMs: 60_000, signal: ac.signal });
  j.touch(9, 3n);
  j.flush();
  const hit = await p;
  assert.equal(hit.keyId, 9);
  if (!isBun) assert.equal(listeners(ac.signal), 0, "the listener was removed on resolution");
  ac.abort();
  await sleep(10);
  assert.equal(j.getActiveWaiters(), 0);
  // A new wait reusing the slot of the old one is not cancelled by the old signal.
  const ac2 = new AbortController();
  const q = j.waitForAny({ keys: [10], timeoutMs: 60_000, signal: ac2.signal });
  ac.abort();
  assert.equal(j.getActiveWaiters(), 1);
  j.touch(10);
  j.flush();
  assert.equal((await q).keyId, 10);
});

test("one signal shared by many waits: listeners do not pile up, one abort resolves all", async () => {
  const j = new TouchJournal();
  const shared = new AbortController();
  for (let round = 0; round < 3; round++) {
    const ps = Array.from({ length: 500 }, (_, i) => j.waitForAny({ keys: [i], timeoutMs: 30, signal: shared.signal }));
    assert.ok((await Promise.all(ps)).every((v) => v === null));
  }
  await sleep(10);
  if (!isBun) assert.equal(listeners(shared.signal), 0);
  const ps = Array.from({ length: 500 }, (_, i) => j.waitForAny({ keys: [i], timeoutMs: 60_000, signal: shared.signal }));
  shared.abort();
  assert.equal(j.getActiveWaiters(), 0);
  assert.ok((await Promise.all(ps)).every((v) => v === null));
});

/** Signals whose getters or `addEventListener` throw: each is refused with a rejection. */
const hostileSignals = () => {
  const real = new AbortController().signal;
  return [
    new Proxy(real, { get() { throw new Error("trap"); } }),
    { get aborted() { throw new Error("getter"); }, addEventListener() {} },
    { aborted: false, get addEventListener() { throw new Error("accessor"); } },
    { aborted: false, addEventListener() { throw new Error("method"); }, removeEventListener() {} },
  ];
};

/** `call()` returns a promise and does not throw; the promise, in a box (not to be awaited here). */
function neverThrows(call, what) {
  let p;
  assert.doesNotThrow(() => (p = call()), what);
  assert.ok(p instanceof Promise, what);
  return { p };
}

test("a signal that is not an AbortSignal is refused", async () => {
  const j = new TouchJournal();
  for (const [i, signal] of [{}, 5, { aborted: false }, { aborted: 1, addEventListener() {} }, ...hostileSignals()].entries()) {
    const { p } = neverThrows(() => j.waitForAny({ keys: [1], timeoutMs: 10, signal }), `signal ${i}`);
    await assert.rejects(p, (e) => e.code === "ERR_INVALID_ARGUMENT");
  }
  assert.equal(j.getActiveWaiters(), 0);
  // A transparent Proxy of a real signal: Node reads its getter through the proxy, Bun's
  // getter refuses the proxy as its receiver. Either way a promise, never a throw.
  const ac = new AbortController();
  const { p } = neverThrows(() => j.waitForAny({ keys: [1], timeoutMs: 10, signal: new Proxy(ac.signal, {}) }), "proxy");
  await p.then((v) => assert.equal(v, null), (e) => assert.equal(e.code, "ERR_INVALID_ARGUMENT"));
  assert.equal(await j.waitForAny({ keys: [1], timeoutMs: 10, signal: null }), null);
});

test("a signal-like object whose listener is called without `this` still aborts through event.target", async () => {
  const j = new TouchJournal();
  const added = [];
  const removed = [];
  const sig = {
    aborted: false,
    addEventListener: (type, fn) => added.push([type, fn]),
    removeEventListener: (type, fn) => removed.push([type, fn]),
  };
  const p = j.waitForAny({ keys: [3], timeoutMs: 60_000, signal: sig });
  const q = j.waitForAny({ keys: [4], timeoutMs: 60_000, signal: sig });
  assert.equal(added.length, 1, "one listener for both waits");
  assert.equal(added[0][0], "abort");
  sig.aborted = true;
  added[0][1].call(undefined, { type: "abort", target: sig });
  assert.equal(j.getActiveWaiters(), 0);
  assert.deepEqual(await Promise.all([p, q]), [null, null]);
  assert.equal(removed.length, 1);
  assert.equal(removed[0][1], added[0][1]);
});

test("a frozen signal is refused with a coded error; a signal shared by the engine and a journal aborts both", async () => {
  const j = new TouchJournal();
  const frozen = Object.freeze({ aborted: false, addEventListener() {}, removeEventListener() {} });
  await assert.rejects(j.waitForAny({ keys: [1], timeoutMs: 10, signal: frozen }), (e) => e.code === "ERR_INVALID_ARGUMENT");
  assert.equal(j.getActiveWaiters(), 0);

  const store = dt.Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new dt.TouchEngine(store);
  engine.setTouchConfig("s", { enabled: true });
  const refused = engine.wait({ stream: "s", cursor: "now", keyIds: [1], interestMode: "coarse", timeoutMs: 60_000, signal: frozen });
  await assert.rejects(refused, (err) => err.code === "ERR_INVALID_ARGUMENT", "the same refusal as the journal's");
  const ac = new AbortController();
  const e = engine.wait({ stream: "s", cursor: "now", keyIds: [1], interestMode: "coarse", timeoutMs: 60_000, signal: ac.signal });
  const e2 = engine.wait({ stream: "s", cursor: "now", keyIds: [2], interestMode: "coarse", timeoutMs: 60_000, signal: ac.signal });
  const w = j.waitForAny({ keys: [1], timeoutMs: 60_000, signal: ac.signal });
  // The engine's waits listen from JavaScript (lib/internal/engine-methods.js), the journal's
  // natively: one listener each, however many waits.
  if (!isBun) assert.equal(listeners(ac.signal), 2, "one listener for the engine's waits, one for the journal's");
  await sleep(10);
  ac.abort();
  assert.equal(await w, null);
  await assert.rejects(e, (err) => err.code === "ERR_ABORTED");
  await assert.rejects(e2, (err) => err.code === "ERR_ABORTED");
  if (!isBun) assert.equal(listeners(ac.signal), 0);
  await engine.close();
  await store.close();
});

async function openEngine() {
  const store = dt.Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new dt.TouchEngine(store);
  engine.setTouchConfig("s", { enabled: true });
  return { store, engine, close: async () => (await engine.close(), await store.close()) };
}
const coarse = (signal, timeoutMs = 60_000, keyIds = [1]) => ({ stream: "s", cursor: "now", keyIds, interestMode: "coarse", timeoutMs, signal });

test("engine waits: one listener per signal, gone once the last wait settles; an abort rejects the rest", async () => {
  const { engine, close } = await openEngine();
  const shared = new AbortController();
  for (let round = 0; round < 3; round++) {
    const ps = Array.from({ length: 200 }, (_, i) => engine.wait(coarse(shared.signal, 30, [i])));
    if (!isBun) assert.equal(listeners(shared.signal), 1, "one listener, not one per wait");
    for (const r of await Promise.all(ps)) assert.equal(r.touched, false);
    if (!isBun) assert.equal(listeners(shared.signal), 0, "removed with the last wait");
  }
  const early = engine.wait(coarse(shared.signal, 20));
  const late = Array.from({ length: 50 }, (_, i) => engine.wait(coarse(shared.signal, 60_000, [i])));
  assert.equal((await early).touched, false);
  await sleep(5);
  shared.abort();
  for (const p of late) await assert.rejects(p, (e) => e.code === "ERR_ABORTED");
  if (!isBun) assert.equal(listeners(shared.signal), 0);
  // Aborting after a wait settled changes nothing.
  const ac = new AbortController();
  const done = await engine.wait(coarse(ac.signal, 10));
  ac.abort();
  assert.equal(done.touched, false);
  await close();
});

test("engine waits: aborted and look-alike signals, and a bad request with a live one", async () => {
  const { engine, close } = await openEngine();
  await assert.rejects(engine.wait(coarse(AbortSignal.abort())), (e) => e.code === "ERR_ABORTED");
  for (const [i, signal] of [{}, 5, { aborted: false }, { aborted: 1, addEventListener() {} }, ...hostileSignals()].entries()) {
    const { p } = neverThrows(() => engine.wait(coarse(signal)), `signal ${i}`);
    await assert.rejects(p, (e) => e.code === "ERR_INVALID_ARGUMENT", `signal ${i}`);
  }
  // A look-alike takes the native path: its listener aborts the wait.
  const added = [];
  const like = { aborted: false, addEventListener: (type, fn) => added.push(fn), removeEventListener() {} };
  const p = engine.wait(coarse(like));
  assert.equal(added.length, 1);
  like.aborted = true;
  added[0].call(like, { type: "abort", target: like });
  await assert.rejects(p, (e) => e.code === "ERR_ABORTED");
  // A bad request with a live signal rejects and leaves no listener behind.
  const bad = new AbortController();
  await assert.rejects(engine.wait({ ...coarse(bad.signal), timeoutMs: "soon" }), (e) => e.code === "ERR_INVALID_ARGUMENT");
  if (!isBun) assert.equal(listeners(bad.signal), 0);
  await close();
});
