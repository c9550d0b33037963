// Which reference scripts each benchmark is compared with, and how ratios are computed.
// A ratio > 1 means durable-touch is better (higher throughput or lower latency/memory).

const get = (obj, path) => path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
const byBench = (lines, bench) => lines.find((l) => l.bench === bench);

/** higher-is-better ratio ours/ref, lower-is-better ratio ref/ours. */
function ratio(ours, ref, kind) {
  if (typeof ours !== "number" || typeof ref !== "number" || ours <= 0 || ref <= 0) return null;
  const r = kind === "lower" ? ref / ours : ours / ref;
  return Math.round(r * 100) / 100;
}

export const BENCHES = {
  append: {
    reference: [{ script: "b1-append.ts" }],
    metrics: [
      // [label, our bench, our path, reference bench, reference path, better]
      ["batch1 rows/s", "B1-append", "results.batch1.medianRowsPerSec", "B1-append", "results.batch1.medianRowsPerSec", "higher"],
      ["concurrent1000 rows/s vs reference batch1", "B1-append", "results.concurrent1000.medianRowsPerSec", "B1-append", "results.batch1.medianRowsPerSec", "higher"],
      ["batch64 rows/s", "B1-append", "results.batch64.medianRowsPerSec", "B1-append", "results.batch64.medianRowsPerSec", "higher"],
      ["batch1024 rows/s", "B1-append", "results.batch1024.medianRowsPerSec", "B1-append", "results.batch1024.medianRowsPerSec", "higher"],
    ],
  },
  journal: {
    reference: [{ script: "b4-journal-touch.ts" }, { script: "b5-waiters.ts" }],
    metrics: [
      // Ours through touchMany (one call per bucket, as the engine feeds the journal) and through
      // touch() per key (as the reference's TouchManager calls its journal).
      ["managerStyle touches/s (touchMany)", "B4-journal-touch", "results.managerStyle.medianTouchesPerSec", "B4-journal-touch", "results.managerStyle.medianTouchesPerSec", "higher"],
      ["managerStyle touches/s (touch() per key)", "B4-journal-touch", "results.perCall.managerStyle.medianTouchesPerSec", "B4-journal-touch", "results.managerStyle.medianTouchesPerSec", "higher"],
      ["managerStyle forced flush ms", "B4-journal-touch", "results.managerStyle.medianFlushMs", "B4-journal-touch", "results.managerStyle.medianFlushMs", "lower"],
      ["plain touches/s (touchMany)", "B4-journal-touch", "results.plain.medianTouchesPerSec", "B4-journal-touch", "results.plain.medianTouchesPerSec", "higher"],
      ["plain touches/s (touch() per key)", "B4-journal-touch", "results.perCall.plain.medianTouchesPerSec", "B4-journal-touch", "results.plain.medianTouchesPerSec", "higher"],
      ["registration waiters/s", "B5-waiters", "results.median_registrationsPerSec", "B5-waiters", "results.median_registrationsPerSec", "higher"],
      ["RSS bytes per waiter", "B5-waiters", "results.median_rssBytesPerWaiter", "B5-waiters", "results.median_rssBytesPerWaiter", "lower"],
      ["wake latency p99 ms (~10k woken)", "B5-waiters", "results.median_wakeLatencyP99Ms", "B5-waiters", "results.median_wakeLatencyP99Ms", "lower"],
      ["timeout lateness p99 ms", "B5-waiters", "results.median_timeoutLatenessP99Ms", "B5-waiters", "results.median_timeoutLatenessP99Ms", "lower"],
    ],
  },
};

export function compare(name, ours, refs) {
  const spec = BENCHES[name];
  const out = {};
  for (const [label, ob, op, rb, rp, better] of spec.metrics) {
    const o = get(byBench(ours, ob), op);
    const r = get(byBench(refs, rb), rp);
    out[label] = { ours: o ?? null, reference: r ?? null, ratio: ratio(o, r, better) };
  }
  return out;
}
