// S1–S10: a data file is interchangeable with the reference's SqliteDurableStore, both ways.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test, dt, tempDir } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";

const { Store } = dt;
const skip = !referenceAvailable();

async function dumpOurs(path) {
  const store = Store.open(path);
  const streams = [];
  for (const s of await store.listStreams()) {
    const rows = await store.read(s.name, { from: 0n });
    streams.push({
      name: s.name,
      contentType: s.contentType,
      profile: s.profile,
      nextOffset: s.nextOffset,
      walRows: BigInt(s.walRows),
      walBytes: BigInt(s.walBytes),
      pendingRows: BigInt(s.pendingRows),
      lastAppendMs: BigInt(s.lastAppendMs),
      rows: rows.map((r) => ({
        offset: r.offset,
        tsMs: r.tsMs,
        payload: r.payload.toString("utf8"),
        routingKey: r.routingKey == null ? null : r.routingKey.toString("utf8"),
        contentType: r.contentType,
      })),
    });
  }
  await store.close();
  return streams;
}

test("a file written by durable-touch opens in the reference with the same streams and rows", async () => {
  const path = join(tempDir(), "ours.sqlite");
  const store = Store.open(path);
  await store.createStream("alpha", { contentType: "application/json" });
  await store.createStream("beta");
  await store.append("alpha", ['{"a":1}', '{"a":2}'], { appendMs: 1704067200000, routingKeys: [Buffer.from("k1"), null] });
  await store.append("alpha", ['{"a":3}'], { appendMs: 1704067200005 });
  await store.append("beta", [Buffer.from([1, 2, 3]).toString("latin1")], { appendMs: 1704067200009 });
  await store.close();

  const ours = await dumpOurs(path);
  const ref = await runReference("store-interop", { path, mode: "dump" });
  assert.equal(ref.version, 24);
  assert.deepEqual(ref.streams, ours);
  assert.equal(ref.streams[0].rows.length, 3);
  assert.equal(ref.streams[0].rows[0].routingKey, "k1");
}, { skip, timeout: 60_000 });

test("a file written by the reference opens in durable-touch, and both keep appending", async () => {
  const path = join(tempDir(), "ref.sqlite");
  const ref = await runReference("store-interop", {
    path,
    mode: "write",
    writes: [
      { stream: "gamma", contentType: "application/json", appendMs: 1704067200000, payloads: ['{"x":1}', '{"x":2}'], routingKeys: ["r1", null] },
      { stream: "gamma", contentType: "application/json", appendMs: 1704067200001, payloads: ['{"x":3}'] },
    ],
  });
  const ours = await dumpOurs(path);
  assert.deepEqual(ours, ref.streams);
  assert.equal(ours[0].nextOffset, 3n);

  // durable-touch appends after the reference's rows; the reference sees them.
  const store = Store.open(path);
  const ack = await store.append("gamma", ['{"x":4}'], { appendMs: 1704067200002 });
  assert.equal(ack.firstOffset, 3n);
  await store.close();
  const again = await runReference("store-interop", { path, mode: "write", writes: [{ stream: "gamma", contentType: "application/json", appendMs: 1704067200003, payloads: ['{"x":5}'] }] });
  assert.deepEqual(again.streams[0].rows.map((r) => r.payload), ['{"x":1}', '{"x":2}', '{"x":3}', '{"x":4}', '{"x":5}']);
  assert.deepEqual(await dumpOurs(path), again.streams);
}, { skip, timeout: 60_000 });
