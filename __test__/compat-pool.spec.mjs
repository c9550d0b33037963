// durable-touch/compat's TouchProcessorWorkerPool against the reference's real one (under
// Bun, one DB file written by the reference's store): the same requests give the same Result
// values — touches, stats, processedThrough, ids, error kinds and messages — for the P17
// scenarios, malformed template rows, random workloads with tight batch limits, and the
// lifecycle (not started, disabled, stopped with pending requests, restart, process()).
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { rng } from "./support/random-cases.mjs";
import { randomRows, randomTemplates, randomRequest } from "./support/random-records.mjs";
import { P17_ROWS as P17 } from "./support/p17.mjs";

const skip = !referenceAvailable();
const norm = (v) => JSON.parse(JSON.stringify(v, (_, x) => (typeof x === "bigint" ? `${x}n` : x)));

// The P17 scenarios (support/p17.mjs), with payloads as the host driver hands them over.
const P17_ROWS = P17.map(({ tsMs, payload }) => ({ tsMs, payloadBase64: payload.toString("base64") }));
const P17_TEMPLATE = { templateId: "87e41f4a8d440298", entity: "public.posts", fieldsJson: '["authorId","status"]', encodingsJson: '["int64","string"]', activeFromSourceOffset: 0 };

function p17Requests() {
  const touch = (extra = {}) => ({ kind: "state-protocol", touch: { enabled: true, fineTouchBudgetPerBatch: 2000, ...extra } });
  const a = { fromOffset: 0n, toOffset: 7n, maxRows: 500, maxBytes: 4 * 1024 * 1024, profile: touch(), fineTouchBudget: 2000, fineGranularity: "key", processingMode: "full" };
  return [
    a,
    { ...a, profile: touch({ onMissingBefore: "skipBefore" }) },
    { ...a, profile: touch({ onMissingBefore: "error" }) },
    { ...a, fineGranularity: "template", processingMode: "hotTemplatesOnly", fineTouchBudget: 200 },
    { ...a, fineTouchBudget: 2 },
    { ...a, emitFineTouches: false, maxRows: 3 },
    { ...a, filterHotTemplates: true, hotTemplateIds: [] },
    { ...a, fineGranularity: "template" },
    { ...a, profile: touch({ coarseIntervalMs: 1000 }) },
    { ...a, maxBytes: 300 },
    { ...a, fromOffset: 2n, toOffset: 4n },
    { ...a, fromOffset: 20n, toOffset: 30n },
  ];
}

/** Template rows the worker must skip or read oddly, around the valid P17 template. */
function oddTemplates() {
  const t = (templateId, fieldsJson, encodingsJson, extra = {}) => ({ ...P17_TEMPLATE, templateId, fieldsJson, encodingsJson, ...extra });
  return [
    t("0000000000000001", "{not json", '["int64"]'),
    t("0000000000000002", '{"a":1}', '["int64"]'),
    t("0000000000000003", '["authorId"]', '["int64","string"]'),
    t("0000000000000004", "[]", "[]"),
    t("0000000000000005", '["a","b","c","d"]', '["int64","int64","int64","int64"]'),
    t("0000000000000006", '["authorId"]', '["uuid"]'),
    t("ABCDEF0123456789", '["authorId"]', '["int64"]'),
    t("0000000000000007", '["authorId"]', '["int64"]', { entity: "  " }),
    t("0000000000000008", "[1]", '["int64"]'),
    t("0000000000000009", '["title"]', '["string"]', { activeFromSourceOffset: 3 }),
    P17_TEMPLATE,
    t("000000000000000a", '[null, "status"]', '["string","string"]'),
  ];
}

function compareAll(pairs, label) {
  const diffs = [];
  pairs.forEach((p, i) => {
    try {
      assert.deepStrictEqual(norm(p.compat), norm(p.reference));
    } catch {
      diffs.push({ at: `${label} ${i}`, reference: norm(p.reference), compat: norm(p.compat) });
    }
  });
  return diffs;
}

test("compat pool = reference pool: P17 scenarios, odd template rows, batch limits", async () => {
  const requests = p17Requests();
  const bigint = (n) => BigInt(n);
  const scenarios = [
    { rows: P17_ROWS, templates: [P17_TEMPLATE], requests },
    { rows: P17_ROWS, templates: oddTemplates(), requests },
    // A REAL active_from_source_offset makes the worker's BigInt() throw: the rows read so far stay.
    { rows: P17_ROWS, templates: [P17_TEMPLATE, { ...P17_TEMPLATE, templateId: "00000000000000ff", fieldsJson: '["title"]', encodingsJson: '["string"]', activeFromSourceOffset: 1.5 }, { ...P17_TEMPLATE, templateId: "00000000000000fe", fieldsJson: '["id"]', encodingsJson: '["int64"]' }], requests: requests.slice(0, 2) },
    { rows: [], templates: [], requests: [requests[0]] },
  ];
  const out = await runReference("compat-pool", { scenarios }, { retries: 2 });
  const pairs = out.scenarios.flat();
  assert.equal(pairs.length, requests.length * 2 + 2 + 1);
  assert.deepEqual(compareAll(pairs, "request"), []);
  // The comparisons are not vacuous: results carry touches, errors carry the worker's message.
  const a = out.scenarios[0][0].compat;
  assert.equal(a.status, "ok");
  assert.equal(a.value.type, "result");
  assert.equal(a.value.processedThrough, bigint(7));
  assert.equal(a.value.touches.length, 10);
  assert.deepEqual(out.scenarios[0][2].compat, { status: "error", error: { kind: "worker_pool_failure", message: "missing old_value for update (entity=public.posts, templateId=87e41f4a8d440298)" } });
  assert.equal(out.scenarios[0][5].compat.value.processedThrough, 2n);
  assert.ok(out.scenarios[0][9].compat.value.stats.rowsRead < 8, "maxBytes cut the batch");
  assert.ok(out.scenarios[1][0].compat.value.touches.some((t) => t.templateId === "0000000000000009"), "the odd list still has usable templates");
  const truncated = out.scenarios[2][0].compat.value.touches.map((t) => t.templateId).filter(Boolean);
  assert.ok(truncated.includes(P17_TEMPLATE.templateId) && !truncated.includes("00000000000000fe"), "templates after the bad row are dropped, as by the worker");
  assert.equal(out.scenarios[3][0].compat.value.processedThrough, -1n);
}, { timeout: 120_000, skip });

test("compat pool = reference pool: random workloads with malformed records", async () => {
  const r = rng(6006);
  const scenarios = [];
  for (let s = 0; s < 10; s++) {
    const n = 40 + r.int(200);
    const rows = randomRows(r, n).map((x) => ({ tsMs: x.tsMs, payloadBase64: x.payload.toString("base64") }));
    const templates = randomTemplates(r, dt.keys).map((t) => ({ templateId: t.templateId, entity: t.entity, fieldsJson: JSON.stringify(t.fields), encodingsJson: JSON.stringify(t.encodings), activeFromSourceOffset: Number(t.activeFromSourceOffset) }));
    const requests = [...Array(5)].map(() => randomRequest(r, n, templates.map((t) => t.templateId)));
    scenarios.push({ rows, templates, requests });
  }
  const out = await runReference("compat-pool", { scenarios }, { retries: 2 });
  const pairs = out.scenarios.flat();
  assert.deepEqual(compareAll(pairs, "request").slice(0, 3), []);
  const ok = pairs.filter((p) => p.reference.status === "ok");
  assert.ok(ok.length > pairs.length / 2 && ok.length < pairs.length, `${ok.length} of ${pairs.length} ok`);
  assert.ok(ok.reduce((n, p) => n + p.reference.value.touches.length, 0) > 200);
}, { timeout: 120_000, skip });

test("compat pool lifecycle = reference pool: not started, disabled, stop with pending, restart, process()", async () => {
  const out = await runReference("compat-pool", { lifecycle: true }, { retries: 2 });
  assert.deepEqual(compareAll(out.lifecycle, "step").map((d) => ({ ...d, step: out.lifecycle[Number(d.at.split(" ")[1])].step })), []);
  const step = (name) => out.lifecycle.find((s) => s.step === name).compat;
  assert.deepEqual(step("not started"), { status: "error", error: { kind: "worker_pool_unavailable", message: "worker pool not started" } });
  assert.deepEqual(step("not started, process()").thrown, { name: "DurableStreamsError", tag: "DurableStreamsError", message: "worker pool not started", isError: true });
  assert.deepEqual(step("disabled"), { status: "error", error: { kind: "worker_pool_unavailable", message: "worker pool disabled" } });
  assert.deepEqual(step("touch not enabled"), { status: "error", error: { kind: "worker_pool_failure", message: "touch not enabled for profile" } });
  const stopped = step("stopped with pending requests").value;
  assert.equal(stopped.length, 5);
  for (const r of stopped) assert.deepEqual(r.error, { kind: "worker_pool_failure", message: "worker pool stopped" });
  assert.equal(step("restart from stopped").status, "ok");
  assert.deepEqual(step("restart while pending").value.pending.error, { kind: "worker_pool_failure", message: "worker pool stopped" });
  assert.equal(step("restart while pending").value.after.status, "ok");
  assert.equal(step("process() ok").returned.type, "result");
  assert.deepEqual(step("two workers, eight concurrent requests").value.map((r) => r.status), ["ok", "ok", "error", "ok", "ok", "error", "ok", "ok"]);
}, { timeout: 120_000, skip });
