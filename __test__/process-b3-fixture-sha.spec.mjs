// The B3 fidelity check: the touches of the first 20,000 records of the seed-1 workload, with
// all 24 templates active, unlimited budget, key granularity, in two batches of 10,000 rows,
// must hash to the reference's canonical SHA-256 (bench/reference/README.md).
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";
import { workloadRows, activeTemplates, requestBase, canonicalSha } from "../testkit/process-workload.mjs";

const REFERENCE_SHA = "0ada709b038b9664d18d07338b107faa64120f1f3eef7c32b5bfb4a5b819892c";
const N = 20_000;

test("B3: the first 20,000 seed-1 records give the reference's touches (canonical sha256)", async () => {
  const rows = workloadRows(N);
  const templates = activeTemplates();
  assert.equal(new Set(templates.map((t) => t.templateId)).size, 24);
  const touches = [];
  let from = 0n;
  let batches = 0;
  while (from < BigInt(N)) {
    const r = await dt.processRows(rows, { ...requestBase("fine"), fromOffset: from, toOffset: BigInt(N - 1) }, templates);
    assert.equal(r.stats.fineTouchesDroppedDueToBudget, 0);
    assert.equal(r.stats.rowsRead, 10_000);
    touches.push(...r.touches);
    from = r.processedThrough + 1n;
    batches++;
  }
  assert.equal(batches, 2);
  assert.equal(canonicalSha(touches), REFERENCE_SHA);
}, { timeout: 120_000 });
