// TouchJournal basics: options (J2), cursors (J1, J3), generations only at flush (J6–J8),
// the bloom (J5), exact history (J10), meta and stats (J13, J14), the native flush timer,
// and a lazily allocated filter (B14).
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";

const { TouchJournal, parseTouchCursor, formatTouchCursor } = dt;

test("defaults and clamped options match the reference (J2)", () => {
  const m = new TouchJournal().getMeta();
  assert.equal(m.mode, "memory");
  assert.deepEqual([m.bucketMs, m.coalesceMs, m.filterSize, m.k], [100, 100, 1 << 22, 4]);
  const c = new TouchJournal({ bucketMs: 0.5, filterPow2: 99, k: 0, pendingMaxKeys: -1, keyIndexMaxKeys: 0 }).getMeta();
  assert.deepEqual([c.bucketMs, c.coalesceMs, c.filterSize, c.k], [1, 1, 1 << 30, 1]);
  assert.equal(new TouchJournal({ filterPow2: 2, k: 20.7 }).getMeta().filterSize, 1024);
  assert.equal(new TouchJournal({ filterPow2: 2, k: 20.7 }).getMeta().k, 8);
});

test("epochs are random 16-hex, cursors are <epoch>:<generation> (J1, J3)", () => {
  const a = new TouchJournal();
  const b = new TouchJournal();
  assert.match(a.getEpoch(), /^[0-9a-f]{16}$/);
  assert.notEqual(a.getEpoch(), b.getEpoch());
  assert.equal(a.getCursor(), `${a.getEpoch()}:0`);
  assert.deepEqual(parseTouchCursor(` ${a.getEpoch().toUpperCase()}:12 `), { epoch: a.getEpoch(), generation: 12 });
  assert.deepEqual(parseTouchCursor("0123456789abcdef:99999999999999999999"), { epoch: "0123456789abcdef", generation: 1e20 });
  for (const bad of ["now", "", ":1", "0123456789abcdef", "0123456789abcdef:", "0123456789abcdef:1:2", "0123456789abcdeg:1", "0123456789abcdef:-1", "0123456789abcdef:1.5"]) {
    assert.equal(parseTouchCursor(bad), null, bad);
  }
  assert.equal(formatTouchCursor("0123456789abcdef", 7.9), "0123456789abcdef:7");
  assert.equal(formatTouchCursor("0123456789abcdef", -3), "0123456789abcdef:0");
});

test("touches become visible only when their bucket flushes (J5–J8)", () => {
  const j = new TouchJournal();
  j.touch(42, 10n, "00000000000000AA");
  j.touch(42, 7n);
  j.touch(43);
  assert.equal(j.getGeneration(), 0);
  assert.equal(j.getMeta().pendingKeys, 2);
  assert.equal(j.maybeTouchedSince(42, 0), false);
  assert.equal(j.flush(), true);
  assert.equal(j.flush(), false, "an empty bucket is no generation");
  assert.equal(j.getGeneration(), 1);
  assert.equal(j.maybeTouchedSince(42, 0), true);
  assert.equal(j.maybeTouchedSince(42, 1), false);
  assert.equal(j.maybeTouchedSince(44, 0), false);
  assert.equal(j.maybeTouchedSinceAny([44, 43], 0), true);
  assert.equal(j.maybeTouchedSinceAny(new Uint32Array([44, 45]), 0), false);
  assert.equal(j.exactTouchedSinceAny(["00000000000000aa"], 0), true);
  assert.equal(j.exactTouchedSinceAny([" 00000000000000AA "], 0), true);
  assert.equal(j.exactTouchedSinceAny(["00000000000000ab"], 0), false);
  assert.equal(j.exactTouchedSinceAny(["nothex"], 0), false);
  assert.equal(j.exactTouchedSinceAny(["00000000000000aa"], 1), false);
  assert.equal(j.getLastFlushedSourceOffsetSeq(), 10n);
  const m = j.getMeta();
  assert.equal(m.bucketMaxSourceOffsetSeq, "10");
  assert.equal(m.cursor, `${j.getEpoch()}:1`);
  assert.ok(m.lastFlushAtMs > 0 && Math.abs(m.lastFlushAtMs - Date.now()) < 5000);
  assert.equal(j.getTotalStats().flushes, 1);
});

test("an overflowing bucket answers 'maybe' for every key and wakes everyone (J6, J9)", async () => {
  const j = new TouchJournal({ pendingMaxKeys: 3 });
  const w = j.waitForAny({ keys: [999], timeoutMs: 5000 });
  for (let k = 1; k <= 5; k++) j.touch(k);
  assert.equal(j.getMeta().pendingKeys, 3);
  j.flush();
  const hit = await w;
  assert.equal(hit.keyId, 0);
  assert.equal(hit.generation, 1);
  assert.equal(j.getMeta().overflowBuckets, 1);
  assert.equal(j.maybeTouchedSince(123456, 0), true);
  assert.equal(j.exactTouchedSinceAny(["00000000000000aa"], 0), null);
});

test("the native flush timer closes a bucket after coalesceMs (J6, J7)", async () => {
  const j = new TouchJournal({ bucketMs: 200 });
  j.setCoalesceMs(20);
  assert.equal(j.getMeta().coalesceMs, 20);
  const t0 = performance.now();
  const w = j.waitForAny({ keys: [5], timeoutMs: 5000 });
  j.touch(5);
  const hit = await w;
  const dt = performance.now() - t0;
  assert.equal(hit.generation, 1);
  assert.ok(dt >= 19 && dt < 2000, `flushed after ${dt} ms`);
  j.setCoalesceMs(10_000);
  assert.equal(j.getMeta().coalesceMs, 200, "clamped to bucketMs");
  j.setCoalesceMs(-5);
  assert.equal(j.getMeta().coalesceMs, 1);
});

test("one flush resolves its waiters in registration order; waiters woken by the same key share one hit", async () => {
  const j = new TouchJournal();
  const order = [];
  const hits = [];
  const waits = [];
  for (let i = 0; i < 60; i++) {
    // Keys interleave, so the waiters of one key are not registered together.
    const key = 100 + (i % 3);
    waits.push(
      j.waitForAny({ keys: [key], afterGeneration: 0, timeoutMs: 5000 }).then((hit) => {
        order.push(i);
        hits[i] = hit;
      })
    );
  }
  j.touch(102);
  j.touch(100);
  j.touch(101);
  j.flush();
  await Promise.all(waits);
  assert.deepEqual(order, [...Array(60).keys()], "resolved (and so observed) in registration order");
  for (let i = 0; i < 60; i++) {
    assert.equal(hits[i].keyId, 100 + (i % 3), `waiter ${i} names the key that woke it`);
    assert.equal(hits[i], hits[i % 3], `waiter ${i} shares the hit of its key`);
  }
  assert.notEqual(hits[0], hits[1]);
  // The next flush builds new hits.
  const again = j.waitForAny({ keys: [100], timeoutMs: 5000 });
  j.touch(100);
  j.flush();
  const h2 = await again;
  assert.equal(h2.generation, 2);
  assert.notEqual(h2, hits[0]);
  j.stop();
});

test("hits carry the bucket's offsets and stamps; keyed hits name the first key touched (J9)", async () => {
  const j = new TouchJournal();
  const w = j.waitForAny({ keys: [7, 8], afterGeneration: 0, timeoutMs: 5000 });
  const before = Date.now();
  j.touch(8, 3n);
  j.touch(7, 90n);
  j.flush();
  const hit = await w;
  assert.ok(Object.isFrozen(hit), "hits are frozen (and may be shared by waiters woken by the same key)");
  assert.equal(hit.keyId, 8);
  assert.equal(hit.generation, 1);
  assert.equal(hit.bucketMaxSourceOffsetSeq, 90n);
  assert.ok(hit.bucketStartMs >= before - 1 && hit.bucketStartMs <= hit.flushAtMs);
  assert.equal(j.getLastBucketStartMs(), hit.bucketStartMs);
  assert.equal(j.getLastFlushAtMs(), hit.flushAtMs);
  const s = j.snapshotAndResetIntervalStats();
  assert.equal(s.notifyWakeups, 1);
  assert.equal(s.notifyFlushes, 1);
  assert.equal(s.heapSize, 0);
  assert.equal(j.snapshotAndResetIntervalStats().notifyWakeups, 0);
  assert.equal(j.getTotalStats().notifyWakeups, 1);
});

test("exact waiters wake on their routing key only; broad waiters through the bloom (J9, J11)", async () => {
  const j = new TouchJournal({ keyIndexMaxKeys: 2 });
  const exact = j.waitForAny({ keys: [], exactKeys: ["00000000000000AA", "bogus"], timeoutMs: 5000 });
  const broad = j.waitForAny({ keys: [1, 2, 3], timeoutMs: 5000 });
  const other = j.waitForAny({ keys: [], exactKeys: ["00000000000000bb"], timeoutMs: 300 });
  j.touch(3, null, "00000000000000aa");
  j.flush();
  assert.equal((await exact).keyId, 0);
  assert.equal((await broad).keyId, 0);
  assert.equal(await other, null);
  assert.equal(await j.waitForAny({ keys: [], exactKeys: ["bogus"], timeoutMs: 5000 }), null, "no valid key: null at once");
  assert.equal(await j.waitForAny({ keys: [1], timeoutMs: 0 }), null, "zero timeout: null at once");
});

test("an idle journal holds no filter memory; it is allocated on the first touch (B14)", () => {
  const rss0 = process.memoryUsage().rss;
  const idle = Array.from({ length: 200 }, () => new TouchJournal({ filterPow2: 22 }));
  for (const j of idle) {
    assert.equal(j.getFilterBytes(), 0);
    j.waitForAny({ keys: [1], timeoutMs: 0 });
    assert.equal(j.maybeTouchedSince(1, 0), false);
  }
  const grown = process.memoryUsage().rss - rss0;
  assert.ok(grown < 64 * 1024 * 1024, `200 idle journals grew RSS by ${grown} bytes`);
  const j = idle[0];
  assert.equal(j.maybeTouchedSince(1, 0), false);
  j.touch(1);
  assert.equal(j.getFilterBytes(), 16 * 1024 * 1024, "allocated at the first touch");
  assert.equal(j.maybeTouchedSince(1, 0), false, "still not touched before the flush");
  j.flush();
  assert.equal(j.maybeTouchedSince(1, 0), true);
  for (const x of idle) x.stop();
});

test("touchMany takes typed arrays or plain arrays", () => {
  const j = new TouchJournal();
  j.touchMany(new Uint32Array([1, 2, 3]), new BigInt64Array([5n, 9n, 2n]), new BigUint64Array([0xaan, 0xbbn, 0xccn]));
  j.touchMany([4], [1n], ["00000000000000dd"]);
  j.touchMany([5]);
  assert.equal(j.getMeta().pendingKeys, 5);
  j.flush();
  assert.equal(j.getLastFlushedSourceOffsetSeq(), 9n);
  assert.equal(j.maybeTouchedSinceAny([5], 0), true);
  assert.equal(j.exactTouchedSinceAny(["00000000000000bb", "00000000000000ee"], 0), true);
  assert.equal(j.exactTouchedSinceAny(["00000000000000dd"], 0), true);
  assert.equal(j.exactTouchedSinceAny(["00000000000000ee"], 0), false);
});

test("a timer-driven flush never lands inside synchronous JS code, so check-then-wait is safe (W6)", async () => {
  const j = new TouchJournal({ bucketMs: 1 });
  j.touch(77);
  const t0 = performance.now();
  while (performance.now() - t0 < 30); // the 1 ms bucket timer fires meanwhile
  // The reference route's pattern: check the bloom, then register at the current generation.
  assert.equal(j.maybeTouchedSince(77, 0), false);
  const w = j.waitForAny({ keys: [77], afterGeneration: j.getGeneration(), timeoutMs: 5000 });
  assert.equal(j.getGeneration(), 0);
  const hit = await w;
  assert.equal(hit.generation, 1, "the flush ran after the synchronous block and woke the waiter");
});
