// Under load (J9, J11, J12): 100,000 concurrent waiters; one flush wakes exactly those whose
// keys it touched (about 10%) with a hit, the rest time out with null.
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";

const { TouchJournal } = dt;

test("100,000 waiters: one flush wakes the 10% it concerns, the rest time out", async () => {
  const j = new TouchJournal();
  const N = 100_000;
  const TIMEOUT = 5000; // long enough to register 100,000 waiters even in a debug build
  // Waiter i waits on keys 10·i .. 10·i+k (k in 1..3); every 10th waiter shares key 7 with
  // others touched below. Exact-key waiters and broad waiters are mixed in.
  const expectWoken = new Uint8Array(N);
  const results = new Array(N);
  const started = new Float64Array(N);
  const waits = new Array(N);
  for (let i = 0; i < N; i++) {
    const touched = i % 10 === 3;
    expectWoken[i] = touched ? 1 : 0;
    const base = 10 * i;
    let args;
    if (i % 1000 === 1) args = { keys: Array.from({ length: 40 }, (_, k) => 4_000_000_000 - 40 * i - k), timeoutMs: TIMEOUT }; // broad, untouched
    else if (i % 1000 === 3) args = { keys: Array.from({ length: 40 }, (_, k) => base + k), timeoutMs: TIMEOUT }; // broad, touched (key base)
    else if (i % 7 === 0 && !touched) args = { keys: [], exactKeys: [(base + 1).toString(16).padStart(16, "0")], timeoutMs: TIMEOUT };
    else args = { keys: [base, base + 1, base + 2].slice(0, 1 + (i % 3)), timeoutMs: TIMEOUT };
    started[i] = performance.now();
    waits[i] = j.waitForAny(args).then((hit) => {
      results[i] = { hit, at: performance.now() };
    });
  }
  assert.equal(j.getActiveWaiters(), N);
  // Touch the first key of every "touched" waiter, with routing keys of untouched exact waiters
  // left alone.
  let touches = 0;
  for (let i = 3; i < N; i += 10) {
    j.touch(10 * i, BigInt(i));
    touches++;
  }
  assert.equal(j.getMeta().pendingKeys, touches);
  const tFlush = performance.now();
  j.flush();
  await Promise.all(waits);
  let woken = 0;
  let wakeLatencyMax = 0;
  for (let i = 0; i < N; i++) {
    const r = results[i];
    if (expectWoken[i]) {
      assert.ok(r.hit, `waiter ${i} should have been woken`);
      assert.equal(r.hit.generation, 1);
      assert.equal(r.hit.bucketMaxSourceOffsetSeq, BigInt(N - 7));
      woken++;
      wakeLatencyMax = Math.max(wakeLatencyMax, r.at - tFlush);
    } else {
      assert.equal(r.hit, null, `waiter ${i} should have timed out`);
      assert.ok(r.at - started[i] >= TIMEOUT - 1, `waiter ${i} timed out early`);
    }
  }
  assert.equal(woken, N / 10);
  assert.ok(wakeLatencyMax < TIMEOUT, `woken waiters resolved ${wakeLatencyMax} ms after the flush`);
  const t = j.getTotalStats();
  assert.equal(t.notifyWakeups, N / 10);
  assert.equal(t.timeoutsFired, N - N / 10);
  assert.equal(j.getActiveWaiters(), 0);
}, { timeout: 60_000 });
