// Differential test: processRows against the reference's real TouchProcessorWorkerPool (under
// Bun, temp DB): the nine P17 scenarios, then random workloads with malformed records, odd
// templates and every request option (P1-P17).
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { rng } from "./support/random-cases.mjs";
import { randomRows, randomTemplates, randomRequest } from "./support/random-records.mjs";
import { P17_ROWS, P17_TEMPLATE, p17Requests } from "./support/p17.mjs";

/** Our side of one scenario: the same rows, templates and requests through processRows. */
async function ours(scenario, si) {
  const rows = scenario.rows.map((r, i) => ({ offset: BigInt(i), tsMs: r.tsMs, payload: r.payload }));
  const out = [];
  for (const req of scenario.requests) {
    try {
      const res = await dt.processRows(rows, { ...req, stream: `s${si}` }, scenario.templates);
      out.push({ ok: res });
    } catch (e) {
      out.push({ error: e.message, code: e.code });
    }
  }
  return out;
}

function forReference(scenarios) {
  return {
    scenarios: scenarios.map((s) => ({
      rows: s.rows.map((r) => ({ tsMs: r.tsMs, payloadBase64: r.payload.toString("base64") })),
      templates: s.templates.map((t) => ({ templateId: t.templateId, entity: t.entity, fieldsJson: JSON.stringify(t.fields), encodingsJson: JSON.stringify(t.encodings), activeFromSourceOffset: Number(t.activeFromSourceOffset) })),
      requests: s.requests,
    })),
  };
}

/** JSON form, as a message would carry it (undefined properties dropped). */
const norm = (v) => JSON.parse(JSON.stringify(v, (_, x) => (typeof x === "bigint" ? `${x}n` : x)));

function compare(name, mine, theirs, mismatches) {
  if (theirs.error !== undefined) {
    if (mine.error !== theirs.error) mismatches.push({ name, ours: mine, reference: theirs });
    return;
  }
  if (mine.error !== undefined) {
    mismatches.push({ name, ours: mine, reference: { ok: "(result)" } });
    return;
  }
  const a = norm(mine.ok);
  const b = norm(theirs.ok);
  try {
    assert.deepStrictEqual(a, b);
  } catch {
    const i = a.touches.findIndex((t, k) => JSON.stringify(t) !== JSON.stringify(b.touches[k]));
    mismatches.push({ name, stats: [a.stats, b.stats], processedThrough: [a.processedThrough, b.processedThrough], counts: [a.touches.length, b.touches.length], firstDiff: i, ours: a.touches[i], reference: b.touches[i] });
  }
}

test("P17: the nine reference scenarios give identical results", async () => {
  const reqs = p17Requests();
  const scenario = { rows: P17_ROWS, templates: [P17_TEMPLATE], requests: Object.values(reqs) };
  const [expected] = await runReference("process", forReference([scenario]), { retries: 4 });
  const mine = await ours(scenario, 0);
  const mismatches = [];
  Object.keys(reqs).forEach((name, i) => compare(name, mine[i], expected[i], mismatches));
  assert.deepEqual(mismatches, []);
  // The checklist's vectors, spelled out (run A and the error of C).
  const a = mine[0].ok;
  assert.deepEqual(a.touches.map((t) => `${t.keyId}@${t.watermark}`), ["485442817@7", "1042752078@2", "1617705133@1", "2231537764@2", "2231537764@4", "2528729918@2", "3117452744@3", "3117452744@4", "3556602687@2", "3556602687@4"]);
  assert.equal(a.processedThrough, 7n);
  assert.deepEqual(mine[2], { error: "missing old_value for update (entity=public.posts, templateId=87e41f4a8d440298)", code: "ERR_PROCESSING" });
  assert.equal(mine[5].ok.processedThrough, 2n);
  assert.equal(mine[6].ok.stats.fineTouchesSkippedColdTemplate, 5);
  // Table touches carry routingKey/templateId as undefined own properties, like the worker's.
  assert.ok("routingKey" in a.touches[0] && a.touches[0].routingKey === undefined);
}, { timeout: 120_000, skip: !referenceAvailable() });

test("random workloads with malformed records match the reference request by request", async () => {
  const r = rng(99);
  const scenarios = [];
  for (let s = 0; s < 24; s++) {
    const n = 40 + r.int(260);
    const rows = randomRows(r, n);
    const templates = randomTemplates(r, dt.keys);
    const requests = [...Array(5)].map(() => randomRequest(r, n, templates.map((t) => t.templateId)));
    scenarios.push({ rows, templates, requests });
  }
  const expected = await runReference("process", forReference(scenarios), { retries: 4 });
  const mismatches = [];
  let compared = 0;
  let touches = 0;
  let errors = 0;
  for (let s = 0; s < scenarios.length; s++) {
    const mine = await ours(scenarios[s], s);
    for (let i = 0; i < mine.length; i++) {
      compare(`scenario ${s} request ${i}`, mine[i], expected[s][i], mismatches);
      compared++;
      if (expected[s][i].ok) touches += expected[s][i].ok.touches.length;
      else errors++;
    }
  }
  assert.deepEqual(mismatches.slice(0, 5), [], `${mismatches.length} of ${compared} requests differ`);
  assert.ok(touches > 1000, `only ${touches} touches compared`);
  assert.ok(errors > 0 && errors < compared / 2, `${errors} errors`);
}, { timeout: 180_000, skip: !referenceAvailable() });
