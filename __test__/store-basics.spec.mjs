import assert from "node:assert/strict";
import { join } from "node:path";
import { test, dt, tempDir, rejectsWithCode } from "./harness.mjs";

const { Store } = dt;

test("append returns contiguous bigint offsets and read returns the rows in order", async () => {
  const store = Store.open(join(tempDir(), "basic.sqlite"));
  const info = await store.createStream("s", { contentType: "application/json" });
  assert.equal(info.name, "s");
  assert.equal(info.nextOffset, 0n);
  const a = await store.append("s", [Buffer.from("a"), new Uint8Array([98]), "c"]);
  assert.deepEqual(a, { firstOffset: 0n, lastOffset: 2n, nextOffset: 3n });
  const b = await store.append("s", ["d"], { appendMs: 1704067200000, routingKeys: [Buffer.from("rk")] });
  assert.deepEqual(b, { firstOffset: 3n, lastOffset: 3n, nextOffset: 4n });
  const rows = await store.read("s", { from: 0n });
  assert.deepEqual(rows.map((r) => r.offset), [0n, 1n, 2n, 3n]);
  assert.deepEqual(rows.map((r) => r.payload.toString()), ["a", "b", "c", "d"]);
  assert.equal(rows[3].tsMs, 1704067200000);
  assert.equal(rows[3].routingKey.toString(), "rk");
  assert.equal(rows[0].routingKey, null);
  assert.equal(rows[0].contentType, "application/json");
  const st = await store.getStream("s");
  assert.equal(st.nextOffset, 4n);
  assert.equal(st.walRows, 4);
  await store.close();
  await rejectsWithCode(store.append("s", ["x"]), "ERR_CLOSED");
});

test("a sequence mismatch carries expectedNext", async () => {
  const store = Store.open(":memory:");
  await store.createStream("s");
  await store.append("s", ["x", "y"]);
  const err = await rejectsWithCode(store.append("s", ["z"], { expectedOffset: 0n }), "ERR_SEQ_MISMATCH");
  assert.equal(err.expectedNext, 2n);
  assert.deepEqual(await store.append("s", ["z"], { expectedOffset: 2n }), { firstOffset: 2n, lastOffset: 2n, nextOffset: 3n });
  await store.close();
});
