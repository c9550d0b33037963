// compat/live-metrics.mjs against the reference's own `LiveMetricsV2` (0.1.11): the counters it
// keeps after our feed of engine records (touch counts, folded records, lifecycle events and
// their overflow counts, WAL GC, failures) against those after the calls the reference manager
// makes itself for the same batches (with their touch arrays) and events. Prints both sides.
import { Result } from "better-result";
import { SRC, output } from "./common.ts";
import { feedLiveMetrics } from "../../compat/live-metrics.mjs";

const { LiveMetricsV2 } = await import(`${SRC}/touch/live_metrics.ts`);

const touchCfg = { enabled: true, coarseIntervalMs: 100, touchCoalesceWindowMs: 100 };
function make() {
  const appended: any[] = [];
  const ingest = {
    appendInternal: async (args: any) => {
      for (const r of args.rows) appended.push(JSON.parse(new TextDecoder().decode(r.payload)));
      return Result.ok({ lastOffset: 0n });
    },
  };
  const lm = new LiveMetricsV2({} as any, ingest as any, {} as any, {});
  return { lm, appended };
}
/** The counters as JSON (histograms as their counts). */
const counters = (lm: any) =>
  JSON.parse(JSON.stringify(Object.fromEntries(lm.counters), (k, v) => (v && typeof v === "object" && Array.isArray(v.counts) ? v.counts : v)));

// Three batches of stream s: [touches as (keyId, kind)], rows, commit lag.
const batches = [
  { touches: [[1, "table"], [2, "template"], [2, "template"], [3, "template"]], rows: 4, lag: 12, mode: "idle", delta: 4, hot: 0 },
  { touches: [], rows: 2, lag: 30, mode: "fine", delta: 2, hot: 3, emitted0: true },
  { touches: [[1, "table"], [9, "template"]], rows: 5, lag: 7, mode: "coarseOnly", delta: 6, hot: 1, suppressedLag: true },
];
const refArgs = (b: any) => ({
  stream: "s",
  touchCfg,
  rowsRead: b.rows,
  changes: b.rows,
  touches: b.touches.map(([keyId, kind]: any) => ({ keyId, kind })),
  lagSourceOffsets: b.rows,
  commitLagMs: b.lag,
  fineTouchesDroppedDueToBudget: 0,
  fineTouchesSkippedColdTemplate: 1,
  fineTouchesSkippedColdKey: 0,
  fineTouchesSkippedTemplateBucket: 0,
  fineTouchesSuppressedDueToLag: !!b.suppressedLag,
  fineTouchesSuppressedDueToLagMs: b.suppressedLag ? 5 : 0,
  fineTouchesSuppressedDueToBudget: false,
  touchMode: b.mode,
  hotFineKeys: b.hot,
  hotTemplates: 0,
  hotFineKeysActive: b.hot,
  hotFineKeysGrace: 0,
  hotTemplatesActive: 0,
  hotTemplatesGrace: 0,
  fineWaitersActive: b.hot,
  coarseWaitersActive: 0,
  broadFineWaitersActive: 0,
  scannedButEmitted0: !!b.emitted0,
  noInterestFastForward: false,
  processedThroughDelta: b.delta,
  touchesEmittedDelta: b.touches.length,
});
const record = (b: any) => ({
  stream: "s",
  batches: 1,
  rowsRead: b.rows,
  changes: b.rows,
  touchesEmitted: b.touches.length,
  tableTouches: b.touches.filter((t: any) => t[1] === "table").length,
  templateTouches: b.touches.filter((t: any) => t[1] === "template").length,
  uniqueKeys: new Set(b.touches.map((t: any) => t[0])).size,
  lagSourceOffsets: b.rows,
  touchMode: b.mode,
  hotFineKeys: b.hot,
  hotTemplates: 0,
  hotFineKeysActive: b.hot,
  hotFineKeysGrace: 0,
  hotTemplatesActive: 0,
  hotTemplatesGrace: 0,
  fineWaitersActive: b.hot,
  coarseWaitersActive: 0,
  broadFineWaitersActive: 0,
  commitLagMs: b.lag,
  fineTouchesDroppedDueToBudget: 0,
  fineTouchesSkippedColdTemplate: 1,
  fineTouchesSkippedColdKey: 0,
  fineTouchesSkippedTemplateBucket: 0,
  fineTouchesSuppressedBatchesDueToLag: b.suppressedLag ? 1 : 0,
  fineTouchesSuppressedDueToLagMs: b.suppressedLag ? 5 : 0,
  fineTouchesSuppressedBatchesDueToBudget: 0,
  scannedButEmitted0Batches: b.emitted0 ? 1 : 0,
  processedThroughDelta: b.delta,
});
/** As the engine folds records past its cap (records.rs `BatchRecord::fold`). */
const fold = (rs: any[]) =>
  rs.reduce((a, r) => ({
    ...a,
    batches: a.batches + r.batches,
    rowsRead: a.rowsRead + r.rowsRead,
    changes: a.changes + r.changes,
    touchesEmitted: a.touchesEmitted + r.touchesEmitted,
    tableTouches: a.tableTouches + r.tableTouches,
    templateTouches: a.templateTouches + r.templateTouches,
    uniqueKeys: a.uniqueKeys + r.uniqueKeys,
    lagSourceOffsets: Math.max(a.lagSourceOffsets, r.lagSourceOffsets),
    touchMode: r.touchMode,
    hotFineKeys: Math.max(a.hotFineKeys, r.hotFineKeys),
    hotFineKeysActive: Math.max(a.hotFineKeysActive, r.hotFineKeysActive),
    fineWaitersActive: Math.max(a.fineWaitersActive, r.fineWaitersActive),
    commitLagMs: Math.max(a.commitLagMs, r.commitLagMs),
    fineTouchesSkippedColdTemplate: a.fineTouchesSkippedColdTemplate + r.fineTouchesSkippedColdTemplate,
    fineTouchesSuppressedBatchesDueToLag: a.fineTouchesSuppressedBatchesDueToLag + r.fineTouchesSuppressedBatchesDueToLag,
    fineTouchesSuppressedDueToLagMs: a.fineTouchesSuppressedDueToLagMs + r.fineTouchesSuppressedDueToLagMs,
    scannedButEmitted0Batches: a.scannedButEmitted0Batches + r.scannedButEmitted0Batches,
    processedThroughDelta: a.processedThroughDelta + r.processedThroughDelta,
  }));

const activated = {
  type: "live.template_activated",
  ts: "2024-01-01T00:00:00.000Z",
  stream: "s",
  templateId: "0123456789abcdef",
  entity: "public.posts",
  fields: ["authorId"],
  encodings: ["int64"],
  reason: "declared",
  activeFromTouchOffset: "00000000000000ab:3",
  inactivityTtlMs: 1000,
};
const retired = {
  type: "live.template_retired",
  ts: "2024-01-01T00:00:01.000Z",
  stream: "s",
  templateId: "0123456789abcdef",
  entity: "public.posts",
  fields: ["authorId"],
  encodings: ["int64"],
  lastSeenAt: "2024-01-01T00:00:00.000Z",
  inactiveForMs: 1000,
  reason: "inactivity",
};
const evicted = { type: "live.template_evicted", ts: "2024-01-01T00:00:00.000Z", stream: "t", templateId: "fedcba9876543210", reason: "cap_exceeded", cap: 2 };
// The engine's lifecycle records: every field as one flat object, in no particular order.
const flat = (e: any) => Object.fromEntries(Object.entries(e).reverse());
const empty = { batches: [], lifecycle: [], lifecycleOverflow: [], walGc: [], failures: [], batchesFolded: 0 };
const cfgOf = () => touchCfg;

// The reference manager's calls.
const ref = make();
for (const b of batches) ref.lm.recordProcessorBatch(refArgs(b));
await ref.lm.emitLifecycle([activated, evicted, retired]);
ref.lm.recordBaseWalGc("s", { deletedRows: 10, deletedBytes: 100, durationMs: 3 });
ref.lm.recordBaseWalGc("s", { deletedRows: 5, deletedBytes: 50, durationMs: 7 });
ref.lm.recordProcessorError("s", touchCfg);
ref.lm.recordProcessorError("s", touchCfg);

// Ours, one record per batch.
const ours = make();
feedLiveMetrics(ours.lm, { ...empty, batches: batches.map(record) }, cfgOf);
feedLiveMetrics(ours.lm, { ...empty, lifecycle: [activated, evicted, retired].map(flat) }, cfgOf);
feedLiveMetrics(ours.lm, { ...empty, walGc: [{ stream: "s", calls: 2, deletedRows: 15, deletedBytes: 150, msSum: 10, msMax: 7 }], failures: [{ stream: "s", count: 2 }] }, cfgOf);
await new Promise((r) => setTimeout(r, 10));

// Ours, the three batches folded into one record, and the lifecycle events past the cap
// (counted only).
const folded = make();
feedLiveMetrics(folded.lm, { ...empty, batches: [fold(batches.map(record))], lifecycleOverflow: [{ stream: "s", activated: 1, retired: 1, evicted: 0 }, { stream: "t", activated: 0, retired: 0, evicted: 1 }] }, cfgOf);

// A LiveMetricsV2 without the counters Map: every public call still made.
const calls: string[] = [];
const bare = {
  recordProcessorBatch: (a: any) => calls.push(`batch ${a.stream} ${a.rowsRead} ${a.touches.length}`),
  emitLifecycle: async (es: any[]) => calls.push(`lifecycle ${es.length}`),
  recordBaseWalGc: (s: string) => calls.push(`gc ${s}`),
  recordProcessorError: (s: string) => calls.push(`error ${s}`),
  recordActivationDenied: () => calls.push("denied"),
};
const warnings: string[] = [];
const warn = console.warn;
console.warn = (...a: any[]) => warnings.push(a.join(" "));
feedLiveMetrics(bare, { ...empty, batches: [record(batches[0])], lifecycle: [flat(activated)], walGc: [{ stream: "s", calls: 2, deletedRows: 1, deletedBytes: 1, msSum: 2, msMax: 1 }], failures: [{ stream: "s", count: 1 }] }, cfgOf);
feedLiveMetrics(bare, { ...empty, batches: [record(batches[1])] }, cfgOf);
console.warn = warn;

output({
  ref: { counters: counters(ref.lm), appended: ref.appended },
  ours: { counters: counters(ours.lm), appended: ours.appended },
  folded: counters(folded.lm),
  bare: { calls, warnings: warnings.length },
});
