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

test("a signal that is not an AbortSignal is refused", async () => {
  const j = new TouchJournal();
  for (const signal of [{}, 5, { aborted: false }, { aborted: 1, addEventListener() {} }]) {
    await assert.rejects(j.waitForAny({ keys: [1], timeoutMs: 10, signal }), (e) => e.code === "ERR_INVALID_ARGUMENT");
  }
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
  const ac = new AbortController();
  const e = engine.wait({ stream: "s", cursor: "now", keyIds: [1], interestMode: "coarse", timeoutMs: 60_000, signal: ac.signal });
  const w = j.waitForAny({ keys: [1], timeoutMs: 60_000, signal: ac.signal });
  if (!isBun) assert.equal(listeners(ac.signal), 1, "one listener serves both");
  await sleep(10);
  ac.abort();
  assert.equal(await w, null);
  await assert.rejects(e, (err) => err.code === "ERR_ABORTED");
  if (!isBun) assert.equal(listeners(ac.signal), 0);
  await engine.close();
  await store.close();
});
