// Under load: 2,000 concurrent engine waits time out on schedule while a writer appends to
// other streams (behaviour with generous bounds, not a timing benchmark).
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";

const { Store, TouchEngine, keys } = dt;

test("2,000 waits with a 1 s timeout resolve touched:false on schedule while other streams are written", async () => {
  const store = Store.open(":memory:");
  for (const s of ["quiet", "busy1", "busy2"]) await store.createStream(s, { contentType: "application/json" });
  const engine = new TouchEngine(store);
  for (const s of ["quiet", "busy1", "busy2"]) engine.setTouchConfig(s, { enabled: true });
  const { cursor } = await engine.meta("quiet");
  let writing = true;
  const writer = (async () => {
    let i = 0;
    while (writing) {
      const stream = i % 2 ? "busy1" : "busy2";
      await store.append(stream, Array.from({ length: 20 }, (_, k) => JSON.stringify({ type: "public.t", key: String(i * 20 + k), value: { id: i }, headers: { operation: "insert" } })));
      i++;
    }
    return i;
  })();
  const t0 = Date.now();
  const waits = Array.from({ length: 2000 }, (_, i) => {
    const start = Date.now();
    return engine.wait({ stream: "quiet", cursor, keyIds: [keys.tableKeyId(`public.q${i}`)], interestMode: "coarse", timeoutMs: 1000 }).then((r) => ({ r, start, end: Date.now() }));
  });
  const results = await Promise.all(waits);
  writing = false;
  const batches = await writer;
  assert.ok(batches > 5, "the writer kept appending meanwhile");
  let maxLate = 0;
  for (const { r, start, end } of results) {
    assert.equal(r.touched, false);
    assert.ok(end - start >= 999, `resolved ${end - start} ms after the call, before its 1 s deadline`);
    maxLate = Math.max(maxLate, end - start - 1000);
  }
  assert.ok(maxLate < 1500, `the last wait resolved ${maxLate} ms late`);
  assert.ok(Date.now() - t0 < 5000);
  const meta = await engine.meta("quiet");
  assert.equal(meta.activeWaiters, 0);
  assert.equal(meta.waitTimeoutTotal, 2000);
  await engine.close();
  await store.close();
}, { timeout: 60_000 });

test("close() with 100,000 pending fine waits on distinct keys settles every one with touched:false", async () => {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store);
  engine.setTouchConfig("s", { enabled: true });
  const tpl = engine.activateTemplates("s", [{ entity: "public.t", fields: [{ name: "a", encoding: "int64" }] }]).activated[0].templateId;
  const { cursor } = await engine.meta("s");
  const N = 100_000;
  const waits = [];
  for (let i = 0; i < N; i++) {
    waits.push(engine.wait({ stream: "s", cursor, keys: [keys.watchKey(tpl, [String(i)])], templateIdsUsed: [tpl], interestMode: "fine", timeoutMs: 600_000 }));
  }
  const meta = await engine.meta("s");
  assert.equal(meta.activeWaiters, N);
  assert.equal(meta.hotFineKeys, N, "every wait's key is hot");
  // Every release puts its key into grace and ends with a forced hot-state sweep (M19).
  await engine.close();
  const results = await Promise.all(waits);
  assert.equal(results.length, N);
  assert.ok(results.every((r) => r.touched === false && r.stale !== true));
  await store.close();
}, { timeout: 120_000 });
