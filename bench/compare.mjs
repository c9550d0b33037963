// Which reference scripts each benchmark is compared with, and how ratios are computed.
// A ratio > 1 means durable-touch is better (higher throughput or lower latency/memory).
import { median } from "./common.mjs";

const get = (obj, path) => path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
const byBench = (lines, bench) => lines.find((l) => l.bench === bench);
/** A metric computed from each run of `part` (median over runs), for a path that is a function. */
const perRun = (part, f) => (line) => {
  const v = median((get(line, `results.${part}.runs`) ?? []).map(f));
  return v === null ? undefined : Math.round(v * 1000) / 1000;
};

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
      // output: "packed" (the same touches as typed arrays instead of objects); the two lines
      // above are the default object output.
      ["coarse rows/s, packed one thread vs one worker", "B2-process-coarse", "results.packed.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["coarse rows/s, packed all cores vs one worker", "B2-process-coarse", "results.packed.allCores.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, packed one thread vs one worker", "B3-process-fine", "results.packed.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, packed all cores vs one worker", "B3-process-fine", "results.packed.allCores.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      // TouchEngine.processBatch: rows read from the native Store, as the reference's worker
      // reads its SQLite.
      ["coarse rows/s, store-backed one thread vs one worker", "B2-process-coarse", "results.storeBacked.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, store-backed one thread vs one worker", "B3-process-fine", "results.storeBacked.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, store-backed packed one thread vs one worker", "B3-process-fine", "results.storeBacked.packed.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["coarse rows/s, native core one thread vs one worker", "B2-process-coarse", "results.native.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["coarse rows/s, native core all cores vs one worker", "B2-process-coarse", "results.native.allCores.medianRowsPerSec", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, native core one thread vs one worker", "B3-process-fine", "results.native.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      // Not a measurement of ours: rows over the time JS takes to allocate the touch objects
      // alone (bench/process.mjs objectFloor), the ceiling of the default output's ratio.
      ["coarse rows/s, object-allocation ceiling vs one worker", "B2-process-coarse", "results.objectFloor.rowsPerSecCeiling", "B2-process-coarse", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, object-allocation ceiling vs one worker", "B3-process-fine", "results.objectFloor.rowsPerSecCeiling", "B3-process-fine", "results.medianRowsPerSec", "higher"],
      ["fine rows/s, native core all cores vs one worker", "B3-process-fine", "results.native.allCores.medianRowsPerSec", "B3-process-fine", "results.medianRowsPerSec", "higher"],
    ],
  },
  e2e: {
    // ~2 min: main (5,000 rows/s x 20 s, 1,000 waiters) + simple, 3 runs each, under Bun.
    reference: [{ script: "b6-e2e.ts" }],
    metrics: [
      ["main append->wake p50 ms", "B6-e2e", "results.main.median_latencyP50Ms", "B6-e2e", "results.main.median_latencyP50Ms", "lower"],
      ["main append->wake p99 ms", "B6-e2e", "results.main.median_latencyP99Ms", "B6-e2e", "results.main.median_latencyP99Ms", "lower"],
      ["main clean-wait p50 ms", "B6-e2e", "results.main.median_cleanLatencyP50Ms", "B6-e2e", "results.main.median_cleanLatencyP50Ms", "lower"],
      ["simple append->wake p50 ms", "B6-e2e", "results.simple.median_p50Ms", "B6-e2e", "results.simple.median_p50Ms", "lower"],
      ["simple append->wake p99 ms", "B6-e2e", "results.simple.median_p99Ms", "B6-e2e", "results.simple.median_p99Ms", "lower"],
      ["main CPU cores", "B6-e2e", "results.main.median_cpuCores", "B6-e2e", "results.main.median_cpuCores", "lower"],
      ["main achieved rows/s", "B6-e2e", "results.main.median_achievedRowsPerSec", "B6-e2e", "results.main.median_achievedRowsPerSec", "higher"],
      // The two sides do very different amounts of work in the same 20 s (the reference wakes
      // far fewer waits and processes only part of the stream), so CPU is also given per unit.
      ["main CPU ms per 1,000 wakes", "B6-e2e", perRun("main", (r) => (r.cpuSeconds * 1e6) / r.woken), "B6-e2e", perRun("main", (r) => (r.cpuSeconds * 1e6) / r.woken), "lower"],
      ["main CPU us per processed row", "B6-e2e", perRun("main", (r) => (r.cpuSeconds * 1e6) / r.metaEnd.scanRowsTotal), "B6-e2e", perRun("main", (r) => (r.cpuSeconds * 1e6) / r.metaEnd.scanRowsTotal), "lower"],
    ],
  },
  // bench/swap.mjs runs the reference's own B6 against an unswapped and a swapped copy of the
  // server itself (alternating, with --rounds) and prints the ratios: no reference script here.
  swap: { selfCompared: true, reference: [], metrics: [] },
  // bench/local.mjs runs @prisma/streams-local (what `prisma dev` embeds) unswapped and swapped,
  // each in its own process, alternating, and prints the ratios itself.
  local: { selfCompared: true, reference: [], metrics: [] },
  // bench/scale.mjs compares waits served in the writer's process with waits served by an edge
  // over NATS JetStream (issue 28), both sides in the same run, and prints its own table.
  scale: { selfCompared: true, reference: [], metrics: [] },
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
    const pick = (line, path) => (typeof path === "function" ? (line ? path(line) : undefined) : get(line, path));
    const o = pick(byBench(ours, ob), op);
    const r = pick(byBench(refs, rb), rp);
    out[label] = { ours: o ?? null, reference: r ?? null, ratio: ratio(o, r, better) };
  }
  return out;
}

/** Per-metric medians over rounds of `compare` results: of each side's figure, and of the
 *  per-round ratios (not the ratio of the medians, so each ratio pairs figures of one round). */
export function medianRatios(rounds) {
  const out = {};
  for (const label of Object.keys(rounds[0])) {
    const col = (k) => rounds.map((r) => r[label]?.[k]);
    const r = median(col("ratio"));
    out[label] = { ours: median(col("ours")), reference: median(col("reference")), ratio: r === null ? null : Math.round(r * 100) / 100 };
  }
  return out;
}
