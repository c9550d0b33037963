// Timeouts (J11, J12): concurrent waits with no writer resolve null on the native deadline
// timer, never before their deadline and within a generous bound after it.
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";

const { TouchJournal } = dt;

test("2,000 concurrent 1 s waits with no writer resolve null, not early, not much late", async () => {
  const j = new TouchJournal();
  const N = 2000;
  const started = new Float64Array(N);
  const lateness = new Float64Array(N);
  const waits = [];
  for (let i = 0; i < N; i++) {
    started[i] = performance.now();
    const args = i % 3 === 0
      ? { keys: [], exactKeys: [(i + 1).toString(16).padStart(16, "0")], timeoutMs: 1000 }
      : { keys: i % 3 === 1 ? [i] : Array.from({ length: 40 }, (_, k) => i * 40 + k), timeoutMs: 1000 };
    waits.push(
      j.waitForAny(args).then((hit) => {
        lateness[i] = performance.now() - (started[i] + 1000);
        return hit;
      }),
    );
  }
  assert.equal(j.getActiveWaiters(), N);
  const hits = await Promise.all(waits);
  assert.ok(hits.every((h) => h === null), "every wait timed out with null");
  const sorted = Float64Array.from(lateness).sort();
  assert.ok(sorted[0] >= -1, `a wait resolved ${-sorted[0]} ms before its deadline`);
  assert.ok(sorted[N - 1] < 1000, `a wait resolved ${sorted[N - 1]} ms after its deadline`);
  assert.equal(j.getActiveWaiters(), 0);
  const t = j.getTotalStats();
  assert.equal(t.timeoutsFired, N);
  assert.ok(t.timeoutSweeps >= 1 && t.timeoutSweeps <= N);
  assert.equal(j.snapshotAndResetIntervalStats().heapSize, 0);
});

test("each wait keeps its own deadline; waking or aborting the earliest re-arms the timer (J12)", async () => {
  const j = new TouchJournal();
  const t0 = performance.now();
  const ac = new AbortController();
  const early = j.waitForAny({ keys: [1], timeoutMs: 100, signal: ac.signal });
  const woken = j.waitForAny({ keys: [2], timeoutMs: 150 });
  const late = j.waitForAny({ keys: [3], timeoutMs: 400 });
  ac.abort();
  j.touch(2);
  j.flush();
  assert.equal(await early, null);
  assert.equal((await woken).keyId, 2);
  assert.ok(performance.now() - t0 < 100, "abort and wake resolve without waiting for a deadline");
  assert.equal(await late, null);
  const waited = performance.now() - t0;
  assert.ok(waited >= 399 && waited < 2000, `the 400 ms wait resolved after ${waited} ms`);
});

test("every wait settles while other journals come and go (no lost wake-up of the JS thread)", async () => {
  // Bun 1.3 can lose a threadsafe call made while the previous one is being dispatched; the
  // completion port's watchdog calls again. Without it this stalled in about 1 run in 2.
  const gc = () => (globalThis.Bun ? Bun.gc(true) : globalThis.gc?.());
  for (let round = 0; round < 20; round++) {
    let idle = Array.from({ length: 200 }, () => new TouchJournal());
    for (const j of idle) j.waitForAny({ keys: [1], timeoutMs: 0 });
    idle = null;
    if (round % 2) gc();
    const j = new TouchJournal();
    const waits = Array.from({ length: 2000 }, (_, i) => j.waitForAny({ keys: [i], timeoutMs: 30 }));
    const all = Promise.all(waits).then(() => "settled");
    const outcome = await Promise.race([all, new Promise((r) => setTimeout(() => r("stalled"), 5000))]);
    assert.equal(outcome, "settled", `round ${round}: ${j.getActiveWaiters()} parked, not every promise settled`);
  }
}, { timeout: 120_000 });

test("a deadline never overtakes a bucket flush due before it, however late the JS thread gets to them", async () => {
  // The reference's flush and deadlines are JS timers, run in due order: a flush due at 10 ms
  // wakes a wait whose deadline is at 10–40 ms, even when the thread was busy past both. A
  // timeout delivered first would be read with the flushed cursor, and the touch lost.
  const { TouchJournal: CompatJournal } = await import("../compat/journal.mjs");
  for (const [name, J] of [["TouchJournal", TouchJournal], ["compat TouchJournal", CompatJournal]]) {
    for (const timeoutMs of [10, 12, 25, 40]) {
      const j = new J({ bucketMs: 10 });
      const g0 = j.getGeneration();
      j.touch(7, 1n);
      const woken = j.waitForAny({ keys: [7], afterGeneration: g0, timeoutMs }).then((hit) => ({ hit, generation: j.getGeneration() }));
      const other = j.waitForAny({ keys: [8], afterGeneration: g0, timeoutMs });
      const until = performance.now() + 100;
      while (performance.now() < until); // busy past the flush and the deadline
      const { hit, generation } = await woken;
      assert.ok(hit !== null, `${name}, timeout ${timeoutMs} ms: timed out with the cursor at generation ${generation}`);
      assert.deepEqual([hit.generation, hit.keyId, hit.bucketMaxSourceOffsetSeq], [1, 7, 1n]);
      assert.equal(await other, null, "a wait on another key still times out");
      j.stop();
    }
  }
});
