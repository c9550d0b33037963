// Group commit: many concurrent callers share transactions, yet each call keeps its own
// contiguous range and its own all-or-nothing result.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test, dt, tempDir, rejectsWithCode } from "./harness.mjs";

const { Store } = dt;

test("1,000 concurrent appends over 3 streams get disjoint contiguous ranges in fewer commits", async () => {
  const store = Store.open(join(tempDir(), "group.sqlite"));
  const streams = ["a", "b", "c"];
  for (const s of streams) await store.createStream(s);
  const before = store.stats().groupCommits;
  const calls = Array.from({ length: 1000 }, (_, i) => {
    const stream = streams[i % 3];
    const n = 1 + (i % 4);
    const payloads = Array.from({ length: n }, (_, k) => `${i}/${k}`);
    return store.append(stream, payloads).then((ack) => ({ i, stream, n, ack }));
  });
  const results = await Promise.all(calls);
  const commits = store.stats().groupCommits - before;
  assert.ok(commits < 1000, `expected grouping, got ${commits} commits for 1000 calls`);

  for (const s of streams) {
    const mine = results.filter((r) => r.stream === s).sort((x, y) => (x.ack.firstOffset < y.ack.firstOffset ? -1 : 1));
    let next = 0n;
    for (const r of mine) {
      assert.equal(r.ack.firstOffset, next, "ranges tile the stream");
      assert.equal(r.ack.lastOffset - r.ack.firstOffset + 1n, BigInt(r.n));
      assert.equal(r.ack.nextOffset, r.ack.lastOffset + 1n);
      next = r.ack.nextOffset;
    }
    const rows = await store.read(s, { from: 0n });
    assert.equal(BigInt(rows.length), next);
    for (const r of mine) {
      for (let k = 0; k < r.n; k++) assert.equal(rows[Number(r.ack.firstOffset) + k].payload.toString(), `${r.i}/${k}`);
    }
    assert.equal((await store.getStream(s)).nextOffset, next);
  }
  await store.close();
});

test("a failing call in a group is rejected alone; expectedOffset chains within a group", async () => {
  const store = Store.open(join(tempDir(), "mixed.sqlite"));
  await store.createStream("s");
  const p = [
    store.append("s", ["0"], { expectedOffset: 0n }),
    store.append("s", ["1"], { expectedOffset: 1n }),
    store.append("s", ["bad"], { expectedOffset: 0n }),
    store.append("missing", ["x"]),
    store.append("s", ["2"], { expectedOffset: 2n }),
  ];
  const settled = await Promise.allSettled(p);
  assert.deepEqual(settled.map((s) => s.status), ["fulfilled", "fulfilled", "rejected", "rejected", "fulfilled"]);
  assert.equal(settled[2].reason.code, "ERR_SEQ_MISMATCH");
  assert.equal(settled[2].reason.expectedNext, 2n);
  assert.equal(settled[3].reason.code, "ERR_STREAM_NOT_FOUND");
  const rows = await store.read("s", { from: 0n });
  assert.deepEqual(rows.map((r) => r.payload.toString()), ["0", "1", "2"]);
  await store.close();
});

test("close() waits for appends in flight; they are durable after reopening", async () => {
  const path = join(tempDir(), "close.sqlite");
  const store = Store.open(path);
  await store.createStream("s");
  const inflight = Array.from({ length: 500 }, (_, i) => store.append("s", [`${i}`]));
  const closed = store.close();
  const acks = await Promise.all(inflight);
  await closed;
  assert.equal(acks.length, 500);
  await rejectsWithCode(store.append("s", ["late"]), "ERR_CLOSED");
  const again = Store.open(path);
  const rows = await again.read("s", { from: 0n });
  assert.equal(rows.length, 500);
  assert.deepEqual(new Set(rows.map((r) => r.payload.toString())).size, 500);
  await again.close();
});

test("deleteWalThrough removes the prefix and lowers the counters (S11)", async () => {
  const store = Store.open(":memory:");
  await store.createStream("s");
  await store.append("s", ["aa", "bb", "cc", "dd"]);
  assert.deepEqual(await store.deleteWalThrough("s", 1n), { deletedRows: 2, deletedBytes: 4 });
  assert.deepEqual(await store.deleteWalThrough("s", -1n), { deletedRows: 0, deletedBytes: 0 });
  const info = await store.getStream("s");
  assert.equal(info.walRows, 2);
  assert.equal(info.walBytes, 4);
  assert.equal(info.nextOffset, 4n);
  assert.deepEqual((await store.read("s", { from: 0n })).map((r) => r.offset), [2n, 3n]);
  assert.equal(await store.deleteStream("s"), true);
  assert.equal(await store.getStream("s"), null);
  assert.deepEqual(await store.listStreams(), []);
  await store.close();
});
