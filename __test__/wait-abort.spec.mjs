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
