// The nine processor scenarios of P17 (reference-behaviour.md): eight rows (one malformed),
// one template, requests A-I.
const img = (author, title) => ({ id: 1, authorId: author, status: "published", title });
export const P17_ROWS = [
  [1000, { type: "public.posts", key: "1", value: img(42, "A"), headers: { operation: "insert" } }],
  [1010, { type: "public.posts", key: "1", value: img(42, "B"), old_value: img(42, "A"), headers: { operation: "update" } }],
  [1020, { type: "public.posts", key: "1", value: img(43, "B"), old_value: img(42, "B"), headers: { operation: "update" } }],
  [1030, { type: "public.posts", key: "1", value: img(43, "C"), headers: { operation: "update" } }],
  [1500, { type: "public.posts", key: "1", old_value: img(43, "C"), headers: { operation: "delete" } }],
  [1600, { headers: { control: "reset" } }],
  [1650, "{not json"],
  [1700, { type: "public.users", key: "9", value: { id: 9 }, headers: { operation: "insert" } }],
].map(([tsMs, v]) => ({ tsMs, payload: Buffer.from(typeof v === "string" ? v : JSON.stringify(v)) }));
export const P17_TEMPLATE = { templateId: "87e41f4a8d440298", entity: "public.posts", fields: ["authorId", "status"], encodings: ["int64", "string"], activeFromSourceOffset: 0 };

export function p17Requests() {
  const touch = (extra = {}) => ({ kind: "state-protocol", touch: { enabled: true, fineTouchBudgetPerBatch: 2000, ...extra } });
  const a = { fromOffset: 0n, toOffset: 7n, maxRows: 500, maxBytes: 4 * 1024 * 1024, profile: touch(), fineTouchBudget: 2000, fineGranularity: "key", processingMode: "full" };
  return {
    A: a,
    B: { ...a, profile: touch({ onMissingBefore: "skipBefore" }) },
    C: { ...a, profile: touch({ onMissingBefore: "error" }) },
    D: { ...a, fineGranularity: "template", processingMode: "hotTemplatesOnly", fineTouchBudget: 200 },
    E: { ...a, fineTouchBudget: 2 },
    F: { ...a, emitFineTouches: false, maxRows: 3 },
    G: { ...a, filterHotTemplates: true, hotTemplateIds: [] },
    H: { ...a, fineGranularity: "template" },
    I: { ...a, profile: touch({ coarseIntervalMs: 1000 }) },
  };
}
