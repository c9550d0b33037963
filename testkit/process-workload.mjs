// The processor workload shared by bench/process.mjs and the B3 fidelity test: the 24
// templates of templateDecls() as the activation route stores them, the validated profile
// that makes a null budget unlimited, and the canonical touch hash of
// bench/reference/README.md (fixture-sha.mjs).
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { generateRecords, templateDecls, walTsMs } from "./gen-workload.mjs";

const dt = createRequire(import.meta.url)("../index.js");

/** WAL rows of the first `n` seed records, `ts_ms = T0 + offset`. */
export function workloadRows(n, seed = 1) {
  return generateRecords({ n, seed }).map((line, i) => ({ offset: BigInt(i), tsMs: walTsMs(i), payload: Buffer.from(line) }));
}

/** The 24 templates, canonical field order (K12), active from offset 0. */
export function activeTemplates() {
  return templateDecls().map((d) => {
    const fields = dt.keys.canonicalizeTemplateFields(d.fields);
    const names = fields.map((f) => f.name);
    return { templateId: dt.keys.templateId(d.entity, names), entity: d.entity, fields: names, encodings: fields.map((f) => f.encoding), activeFromSourceOffset: 0n };
  });
}

/** The validated state-protocol profile; with `unlimited`, minus fineTouchBudgetPerBatch. */
export function profile({ unlimited = false } = {}) {
  const touch = dt.validateTouchConfig({ enabled: true });
  if (unlimited) delete touch.fineTouchBudgetPerBatch;
  return { kind: "state-protocol", touch };
}

/** The canonical SHA-256 of a list of touches. */
export function canonicalSha(touches) {
  const rows = touches.map((t) => ({ keyId: t.keyId >>> 0, watermark: t.watermark, kind: t.kind, templateId: t.templateId ?? "" }));
  rows.sort((a, b) => {
    if (a.keyId !== b.keyId) return a.keyId - b.keyId;
    const aw = BigInt(a.watermark);
    const bw = BigInt(b.watermark);
    if (aw !== bw) return aw < bw ? -1 : 1;
    if (a.kind !== b.kind) return a.kind < b.kind ? -1 : 1;
    return a.templateId < b.templateId ? -1 : a.templateId > b.templateId ? 1 : 0;
  });
  return createHash("sha256").update(rows.map((t) => `${t.keyId}\t${t.watermark}\t${t.kind}\t${t.templateId}\n`).join("")).digest("hex");
}

/** B2 (coarse) and B3 (fine) request bases, as bench/reference/b2/b3 send them. */
export function requestBase(kind) {
  const common = { stream: "bench", maxRows: 10_000, maxBytes: 64 * 1024 * 1024, fineGranularity: "key", processingMode: "full" };
  if (kind === "coarse") return { ...common, profile: profile(), emitFineTouches: false, fineTouchBudget: 0 };
  return { ...common, profile: profile({ unlimited: true }), emitFineTouches: true, fineTouchBudget: null, filterHotTemplates: false, hotTemplateIds: null };
}
