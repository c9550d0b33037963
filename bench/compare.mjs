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
  process: {
    // --capture 0: the reference B3 script would otherwise write its fixture next to the
    // installed reference (inside node_modules).
    reference: [{ script: "b2-process-coarse.ts" }, { script: "b3-process-fine.ts", args: ["--capture", "0"] }],
    metrics: [
      ["coarse rows/s, one thread vs one worker", "B2-process-coarse", "results.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["coarse rows/s, all cores vs one worker", "B2-process-coarse", "results.allCores.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, one thread vs one worker", "B3-process-fine", "results.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, all cores vs one worker", "B3-process-fine", "results.allCores.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["coarse rows/s, native core one thread vs one worker", "B2-process-coarse", "results.native.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["coarse rows/s, native core all cores vs one worker", "B2-process-coarse", "results.native.allCores.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, native core one thread vs one worker", "B3-process-fine", "results.native.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, native core all cores vs one worker", "B3-process-fine", "results.native.allCores.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
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
