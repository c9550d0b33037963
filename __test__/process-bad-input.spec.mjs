// Bad input to processRows: every malformed row gives a clear result (it counts, yields no
// change) and every malformed request a coded rejection; a failing batch rejects alone.
import assert from "node:assert/strict";
import { test, dt, rejectsWithCode } from "./harness.mjs";

const PROFILE = { kind: "state-protocol", touch: { enabled: true } };
const TEMPLATE = { templateId: dt.keys.templateId("public.e0", ["tenantId"]), entity: "public.e0", fields: ["tenantId"], encodings: ["string"], activeFromSourceOffset: 0n };
const rec = (value, extra = {}) => JSON.stringify({ type: "public.e0", key: "1", value, headers: { operation: "insert" }, ...extra });
const rows = (payloads) => payloads.map((p, i) => ({ offset: BigInt(i), tsMs: 1000 + i, payload: Buffer.isBuffer(p) ? p : Buffer.from(p) }));
const req = (n, extra = {}) => ({ stream: "s", fromOffset: 0n, toOffset: BigInt(n - 1), profile: PROFILE, maxRows: 1000, maxBytes: 64 << 20, ...extra });
/** All `n` rows in one batch, every touch its own (no coalescing window). */
const wholeBatch = (n) => req(n, { maxRows: n, profile: { kind: "state-protocol", touch: { enabled: true, touchCoalesceWindowMs: 0 } } });

test("malformed rows count as read and yield no change", async () => {
  const payloads = [
    "{not json",
    "",
    "\u00ff\u00fe",
    Buffer.from([0xc3, 0x28, 0xff]),
    "[1,2,3]",
    "42",
    "null",
    '{"type":"public.e0","key":"1","headers":{"operation":"upsert"}}',
    '{"type":"public.e0","key":"1","headers":[]}',
    '{"headers":{"control":"reset"}}',
    rec({ tenantId: "t1" }) + "x",
  ];
  const r = await dt.processRows(rows(payloads), req(payloads.length), [TEMPLATE]);
  assert.equal(r.stats.rowsRead, payloads.length);
  assert.equal(r.stats.changes, 0);
  assert.equal(r.touches.length, 0);
  assert.equal(r.processedThrough, BigInt(payloads.length - 1));
});

test("deep nesting, huge rows, big numbers, invalid UTF-8 and a BOM are processed like JSON.parse reads them", async () => {
  const deep = "[".repeat(50_000) + "1" + "]".repeat(50_000);
  const payloads = [
    rec({ tenantId: "t1", deep: "__DEEP__" }).replace('"__DEEP__"', deep),
    rec({ tenantId: "t2", title: "x".repeat(4 << 20) }),
    rec({ tenantId: 9007199254740993 }).replace("9007199254740992", "9007199254740993"),
    Buffer.concat([Buffer.from(rec({ tenantId: "t3" }).slice(0, -2)), Buffer.from([0xff]), Buffer.from("}}")]),
    Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(rec({ tenantId: "t4" }))]),
    Buffer.from(rec({ tenantId: "t\udc00" })),
  ];
  const r = await dt.processRows(rows(payloads), req(payloads.length), [TEMPLATE]);
  assert.equal(r.stats.rowsRead, 6);
  // Row 3 has a raw 0xff byte outside any string: after lossy decoding that is U+FFFD
  // between tokens, which is not JSON.
  assert.equal(r.stats.changes, 5);
  const watch = (arg) => dt.keys.watchKey(TEMPLATE.templateId, [arg]);
  const keys = new Set(r.touches.map((t) => t.routingKey));
  for (const arg of ["t1", "t2", "9007199254740992", "t4", "t\ufffd"]) assert.ok(keys.has(watch(arg)), arg);
});

test("bad template ids and shapes are skipped, as the reference skips such rows", async () => {
  const bad = [
    { ...TEMPLATE, templateId: TEMPLATE.templateId.toUpperCase() },
    { ...TEMPLATE, templateId: "xyz" },
    { ...TEMPLATE, entity: "  " },
    { ...TEMPLATE, fields: [], encodings: [] },
    { ...TEMPLATE, fields: ["a", "b", "c", "d"], encodings: ["string", "string", "string", "string"] },
    { ...TEMPLATE, encodings: ["uuid"] },
    { ...TEMPLATE, encodings: ["string", "string"] },
  ];
  const r = await dt.processRows(rows([rec({ tenantId: "t1" })]), req(1), bad);
  assert.deepEqual(r.touches.map((t) => t.kind), ["table"]);
});

test("ranges: fromOffset > toOffset is an empty batch; rows outside the range are ignored", async () => {
  const rs = rows([rec({ tenantId: "t1" }), rec({ tenantId: "t2" }), rec({ tenantId: "t3" })]);
  const empty = await dt.processRows(rs, req(3, { fromOffset: 2n, toOffset: 1n }), [TEMPLATE]);
  assert.deepEqual([empty.processedThrough, empty.stats.rowsRead, empty.touches.length], [1n, 0, 0]);
  const mid = await dt.processRows(rs, req(3, { fromOffset: 1n, toOffset: 1n }), [TEMPLATE]);
  assert.deepEqual([mid.processedThrough, mid.stats.rowsRead], [1n, 1]);
});

test("bad requests are coded rejections, never throws or crashes", async () => {
  const rs = rows([rec({ tenantId: "t1" })]);
  await rejectsWithCode(dt.processRows(rs, req(1, { fromOffset: -1n }), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows(rs, req(1, { fromOffset: "0" }), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows(rs, req(1, { toOffset: 2n ** 64n }), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows(rs, { ...req(1), stream: undefined }, []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows("rows", req(1), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows([{ offset: 0n, tsMs: 1 }], req(1), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows([{ offset: 1.5, tsMs: 1, payload: Buffer.from("{}") }], req(1), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows([...rs, ...rs], req(1), []), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows(rs, req(1), "templates"), "ERR_INVALID_ARGUMENT");
  const e = await rejectsWithCode(dt.processRows(rs, req(1, { profile: { kind: "state-protocol", touch: { enabled: false } } }), []), "ERR_TOUCH_NOT_ENABLED");
  assert.equal(e.message, "touch not enabled for profile");
  await rejectsWithCode(dt.processRows(rs, req(1, { profile: { kind: "generic", touch: { enabled: true } } }), []), "ERR_TOUCH_NOT_ENABLED");
  // String payloads and number offsets take the slow path and give the same result.
  const slow = await dt.processRows([{ offset: 0, tsMs: 1000, payload: rec({ tenantId: "t1" }) }], req(1), [TEMPLATE]);
  const fast = await dt.processRows(rs, req(1), [TEMPLATE]);
  assert.deepEqual(slow, fast);
});

test("a failing batch rejects only its own promise while others run in parallel", async () => {
  const update = rows([JSON.stringify({ type: "public.e0", key: "1", value: { tenantId: "t1" }, headers: { operation: "update" } })]);
  const failing = { ...req(1), profile: { kind: "state-protocol", touch: { enabled: true, onMissingBefore: "error" } } };
  const all = await Promise.allSettled([...Array(12)].map((_, i) => dt.processRows(update, i % 4 === 0 ? failing : req(1), [TEMPLATE])));
  all.forEach((s, i) => {
    if (i % 4 === 0) {
      assert.equal(s.status, "rejected");
      assert.equal(s.reason.code, "ERR_PROCESSING");
      assert.equal(s.reason.message, `missing old_value for update (entity=public.e0, templateId=${TEMPLATE.templateId})`);
    } else {
      assert.equal(s.status, "fulfilled");
      assert.equal(s.value.stats.changes, 1);
    }
  });
  assert.ok(dt.processorThreads() >= 1);
});

// processRows hands rows to the batch in chunks (256 rows, then 512, 1,024, then 2,048 at a
// time) while it reads the rest: a row that cannot be read anywhere in the array still rejects
// the call, whatever the batch did first.
test("a bad row in a later chunk rejects the batch, even one that was full or failing", async () => {
  const n = 5000;
  const good = () => rows([...Array(n)].map((_, i) => rec({ tenantId: `t${i % 7}` })));
  const bad = good();
  bad[4100] = { offset: 4100n, tsMs: 1, payload: 7 };
  const e = await rejectsWithCode(dt.processRows(bad, req(n, { maxRows: n }), [TEMPLATE]), "ERR_INVALID_ARGUMENT");
  assert.match(e.message, /payload/);
  // Full after 10 rows (P4): the rows after are still read, as before any chunking.
  await rejectsWithCode(dt.processRows(bad, req(n, { maxRows: 10 }), [TEMPLATE]), "ERR_INVALID_ARGUMENT");
  const thrown = good();
  thrown[2500] = { get offset() { throw new Error("boom"); }, tsMs: 1, payload: Buffer.from("{}") };
  const t = await rejectsWithCode(dt.processRows(thrown, req(n, { maxRows: n }), [TEMPLATE]), "ERR_INVALID_ARGUMENT");
  assert.match(t.message, /boom/);
  // An update without old_value fails row 0 with onMissingBefore "error"; the bad row wins.
  const strict = { ...req(n, { maxRows: n }), profile: { kind: "state-protocol", touch: { enabled: true, onMissingBefore: "error" } } };
  const updates = bad.map((r, i) => (i === 4100 ? r : { ...r, payload: Buffer.from(JSON.stringify({ type: "public.e0", key: "1", value: { tenantId: "t1" }, headers: { operation: "update" } })) }));
  await rejectsWithCode(dt.processRows(updates, strict, [TEMPLATE]), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(dt.processRows(updates.slice(0, 4000), strict, [TEMPLATE]), "ERR_PROCESSING");
  // Offsets must ascend across chunk edges too (and on either side of them).
  for (const at of [255, 256, 257, 768, 1792, 2048, 3840]) {
    const back = good();
    back[at] = { ...back[at], offset: BigInt(at - 1) };
    const b = await rejectsWithCode(dt.processRows(back, req(n, { maxRows: n }), [TEMPLATE]), "ERR_INVALID_ARGUMENT");
    assert.equal(b.message, "rows must have strictly ascending offsets", `row ${at}`);
  }
});

test("a chunk of string payloads in the middle reads like the Buffers it replaces", async () => {
  const n = 6000;
  const buffers = rows([...Array(n)].map((_, i) => rec({ tenantId: `t${i % 11}` })));
  const mixed = buffers.map((r, i) => (i >= 2048 && i < 4096 && i % 2 === 0 ? { ...r, payload: r.payload.toString() } : r));
  const options = wholeBatch(n);
  const [a, b] = await Promise.all([dt.processRows(buffers, options, [TEMPLATE]), dt.processRows(mixed, options, [TEMPLATE])]);
  assert.deepEqual(b, a);
  assert.equal(a.stats.rowsRead, n);
  assert.ok(a.touches.length > 11, `${a.touches.length} touches`);
});

test("a batch reads the same after a bigger one (the row columns are reused between calls)", async () => {
  const small = rows([...Array(300)].map((_, i) => rec({ tenantId: `s${i % 7}` })));
  const before = await dt.processRows(small, wholeBatch(small.length), [TEMPLATE]);
  // 5,000 rows with other offsets, times and tenants fill the columns past the small batch.
  const big = [...Array(5000)].map((_, i) => ({ offset: BigInt(10_000 + i), tsMs: 900_000 + i, payload: Buffer.from(rec({ tenantId: `b${i % 13}`, pad: "x".repeat(i % 50) })) }));
  const bigResult = await dt.processRows(big, { ...wholeBatch(big.length), fromOffset: 10_000n, toOffset: 14_999n }, [TEMPLATE]);
  assert.equal(bigResult.stats.rowsRead, 5000);
  const after = await dt.processRows(small, wholeBatch(small.length), [TEMPLATE]);
  assert.deepEqual(after, before);
  assert.equal(after.processedThrough, 299n);
  assert.ok(after.touches.every((t) => BigInt(t.watermark) < 300n));
});
