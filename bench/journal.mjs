// B4 and B5 for durable-touch's TouchJournal, as bench/reference/b4-journal-touch.ts and
// b5-waiters.ts run them on the reference, printing the same JSON fields.
//
//   npm run bench -- journal                 # ours: one JSON line each for B4 and B5
//   npm run bench:compare -- journal         # plus the reference in the same run, and ratios
//   node bench/journal.mjs --only b5 --runs 1 --waiters 20000
//
// Flags as the reference scripts: --runs (3), --seed (1), --touches (1,000,000), --waiters
// (100,000), --timeoutWaiters (10,000), --universe (24,000), --touched (1,000); --only b4|b5.
// Every measured run is a fresh child process (`--child b4|b5`), started with --expose-gc
// under Node (Bun.gc under Bun), so memory deltas are not polluted by earlier runs.
//
// B4 (touch throughput, forced flush). Each variant runs through two APIs:
//   - `touchMany(keyIds, offsets?, routingKeys?)`, typed arrays in one call: how our engine feeds
//     the journal (a processed batch at a time, no JS on the hot path). `results.plain`,
//     `results.bounded` and `results.managerStyle` report this API, and say so in `api`.
//   - `touch(keyId, BigInt(offset), hex16RoutingKey)` once per touch, exactly as the reference's
//     TouchManager calls its journal: `results.perCall.{plain,bounded,managerStyle}`.
// The forced flush is `flush()` (ours cancels the bucket timer and flushes, as the reference
// script's clearTimeout + flushBucket()). One unreported warm-up of every variant first.
//
// B5 (waiters): 100,000 waitForAny({keys: 1-4 ids, afterGeneration, timeoutMs: 30000}), memory =
// RSS / heap delta around registration after full GCs; touch() the first 1,000 universe ids and
// flush(); latency = when each matching waiter's .then runs, from just before flush(); then
// 10,000 waiters with timeoutMs 1000 and no touches, lateness = .then time - (call time + 1000).

import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { mulberry32 } from "../testkit/gen-workload.mjs";
import { arg, numArg, log, sleep, median, percentile, machine, runChild } from "./common.mjs";

const require = createRequire(import.meta.url);
const isBun = typeof globalThis.Bun !== "undefined";

const RUNS = numArg("runs", 3);
const SEED = numArg("seed", 1);
const TOUCHES = numArg("touches", 1_000_000);
const WAITERS = numArg("waiters", 100_000);
const TIMEOUT_WAITERS = numArg("timeoutWaiters", 10_000);
const UNIVERSE = numArg("universe", 24_000);
const TOUCHED = numArg("touched", 1_000);
const CHILD = arg("child", null);
const ONLY = arg("only", null);
const OPTS = { bucketMs: 100, filterPow2: 22, k: 4, pendingMaxKeys: 100_000, keyIndexMaxKeys: 32 };

const round = (x, d = 3) => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : x);

function gcNow() {
  if (typeof globalThis.gc === "function") globalThis.gc();
  else if (isBun) Bun.gc(true);
}

function loadDt() {
  const dt = require("../index.js");
  return dt;
}

// ---------------------------------------------------------------- B4

function b4Workload() {
  // Same draws, in the same order, as the reference script.
  const rnd = mulberry32(SEED);
  const keys = new Uint32Array(TOUCHES);
  for (let i = 0; i < TOUCHES; i++) keys[i] = Math.floor(rnd() * 4294967296) >>> 0;
  const keys2 = new Uint32Array(TOUCHES);
  for (let i = 0; i < TOUCHES; i++) keys2[i] = Math.floor(rnd() * 4294967296) >>> 0;
  const BOUNDED_UNIVERSE = 50_000;
  const universe = new Uint32Array(BOUNDED_UNIVERSE);
  for (let i = 0; i < BOUNDED_UNIVERSE; i++) universe[i] = Math.floor(rnd() * 4294967296) >>> 0;
  const boundedKeys = new Uint32Array(TOUCHES);
  for (let i = 0; i < TOUCHES; i++) boundedKeys[i] = universe[Math.floor(rnd() * BOUNDED_UNIVERSE)];
  const routingKeys = new Array(TOUCHES);
  const routingKeys64 = new BigUint64Array(TOUCHES);
  for (let i = 0; i < TOUCHES; i++) {
    const hi = Math.floor(rnd() * 4294967296) >>> 0;
    routingKeys[i] = hi.toString(16).padStart(8, "0") + keys[i].toString(16).padStart(8, "0");
    routingKeys64[i] = BigInt(`0x${routingKeys[i]}`);
  }
  const watermarks = new Array(TOUCHES);
  const watermarks64 = new BigInt64Array(TOUCHES);
  for (let i = 0; i < TOUCHES; i++) {
    watermarks[i] = BigInt(i);
    watermarks64[i] = BigInt(i);
  }
  return { keys, keys2, boundedKeys, universe, routingKeys, routingKeys64, watermarks, watermarks64, distinct: new Set(keys).size, boundedDistinct: new Set(boundedKeys).size };
}

function forceFlush(j) {
  const t0 = performance.now();
  j.flush();
  const ms = performance.now() - t0;
  const meta = j.getMeta();
  return { ms, generation: meta.generation, overflowBuckets: meta.overflowBuckets };
}

function b4Child() {
  const { TouchJournal } = loadDt();
  const w = b4Workload();
  const { keys, keys2, boundedKeys, routingKeys, routingKeys64, watermarks, watermarks64 } = w;
  const n = TOUCHES;
  const apis = {
    batch: {
      plain: (j, ks) => j.touchMany(ks),
      manager: (j) => j.touchMany(keys, watermarks64, routingKeys64),
    },
    perCall: {
      plain: (j, ks) => {
        for (let i = 0; i < n; i++) j.touch(ks[i]);
      },
      manager: (j) => {
        for (let i = 0; i < n; i++) j.touch(keys[i], watermarks[i], routingKeys[i]);
      },
    },
  };
  const measure = (j, fn) => {
    const t0 = performance.now();
    fn();
    const s = (performance.now() - t0) / 1000;
    const pending = j.getMeta().pendingKeys;
    const overflow = pending >= OPTS.pendingMaxKeys;
    const f = forceFlush(j);
    return { touchesPerSec: round(n / s, 1), touchSeconds: round(s, 4), pendingKeysBeforeFlush: pending, overflow, flushMs: round(f.ms, 3), generationAfter: f.generation, overflowBuckets: f.overflowBuckets };
  };
  const out = {};
  for (const [name, api] of Object.entries(apis)) {
    const runPlain = () => {
      const j = new TouchJournal(OPTS);
      gcNow();
      const a = measure(j, () => api.plain(j, keys));
      if (j.getMeta().pendingKeys !== 0) throw new Error("flush left pending keys");
      const b = measure(j, () => api.plain(j, keys2));
      j.stop();
      return { ...a, generationAfter: b.generationAfter, secondBucketTouchesPerSec: b.touchesPerSec, secondFlushMs: b.flushMs };
    };
    const runBounded = () => {
      const j = new TouchJournal(OPTS);
      gcNow();
      const r = measure(j, () => api.plain(j, boundedKeys));
      j.stop();
      return r;
    };
    const runManager = () => {
      const j = new TouchJournal(OPTS);
      gcNow();
      const r = measure(j, () => api.manager(j));
      j.stop();
      return r;
    };
    // Warm-up (JIT, page faults of the allocator), not reported.
    runPlain();
    runBounded();
    runManager();
    out[name] = { plain: runPlain(), bounded: runBounded(), managerStyle: runManager() };
  }
  console.log(JSON.stringify({ distinct: w.distinct, boundedDistinct: w.boundedDistinct, ...out }));
}

function summarizeB4(rs) {
  return {
    medianTouchesPerSec: round(median(rs.map((x) => x.touchesPerSec)), 1),
    medianTouchSeconds: round(median(rs.map((x) => x.touchSeconds)), 4),
    medianFlushMs: round(median(rs.map((x) => x.flushMs)), 3),
    pendingKeysBeforeFlush: rs[0].pendingKeysBeforeFlush,
    overflow: rs[0].overflow,
    ...(rs[0].secondFlushMs !== undefined
      ? {
          medianSecondBucketTouchesPerSec: round(median(rs.map((x) => x.secondBucketTouchesPerSec)), 1),
          medianSecondFlushMs: round(median(rs.map((x) => x.secondFlushMs)), 3),
        }
      : {}),
    runs: rs.map((x) => ({ touchesPerSec: x.touchesPerSec, flushMs: x.flushMs, secondFlushMs: x.secondFlushMs })),
  };
}

// ---------------------------------------------------------------- B5

async function b5Child() {
  const { TouchJournal } = loadDt();
  const rnd = mulberry32(SEED);
  const universeSet = new Set();
  const universe = [];
  while (universe.length < UNIVERSE) {
    const k = Math.floor(rnd() * 4294967296) >>> 0;
    if (universeSet.has(k)) continue;
    universeSet.add(k);
    universe.push(k);
  }
  const waiterKeys = new Array(WAITERS);
  let keySlots = 0;
  for (let i = 0; i < WAITERS; i++) {
    const m = 1 + Math.floor(rnd() * 4);
    const ks = [];
    for (let j = 0; j < m; j++) ks.push(universe[Math.floor(rnd() * UNIVERSE)]);
    waiterKeys[i] = ks;
    keySlots += m;
  }
  const touched = universe.slice(0, TOUCHED);
  const touchedSet = new Set(touched);
  const matching = [];
  for (let i = 0; i < WAITERS; i++) if (waiterKeys[i].some((k) => touchedSet.has(k))) matching.push(i);

  // ---- registration + memory
  const j = new TouchJournal(OPTS);
  const gen0 = j.getGeneration();
  let proms = new Array(WAITERS);
  gcNow();
  gcNow();
  const m0 = process.memoryUsage();
  const t0 = performance.now();
  for (let i = 0; i < WAITERS; i++) {
    proms[i] = j.waitForAny({ keys: waiterKeys[i], afterGeneration: gen0, timeoutMs: 30_000 });
  }
  const regSeconds = (performance.now() - t0) / 1000;
  gcNow();
  gcNow();
  const m1 = process.memoryUsage();
  const activeWaiters = j.getActiveWaiters();

  // ---- wake latency
  const lat = new Float64Array(WAITERS).fill(NaN);
  let tFlush = 0;
  let resolved = 0;
  let hits = 0;
  for (let i = 0; i < WAITERS; i++) {
    const idx = i;
    proms[i].then((hit) => {
      lat[idx] = performance.now() - tFlush;
      resolved++;
      if (hit) hits++;
    });
  }
  for (const k of touched) j.touch(k);
  tFlush = performance.now();
  j.flush();
  const flushSyncMs = performance.now() - tFlush;
  await Promise.all(matching.map((i) => proms[i]));
  await sleep(20);
  if (resolved !== matching.length || hits !== matching.length) {
    throw new Error(`wake mismatch: resolved=${resolved} hits=${hits} expected=${matching.length}`);
  }
  const matchLat = Float64Array.from(matching.map((i) => lat[i])).sort();
  j.stop();
  await Promise.all(proms);
  proms = [];

  // ---- timeout accuracy
  gcNow();
  const j2 = new TouchJournal(OPTS);
  const reg = new Float64Array(TIMEOUT_WAITERS);
  const late = new Float64Array(TIMEOUT_WAITERS);
  let nonNull = 0;
  const tps = new Array(TIMEOUT_WAITERS);
  const tr0 = performance.now();
  for (let i = 0; i < TIMEOUT_WAITERS; i++) {
    const idx = i;
    reg[i] = performance.now();
    tps[i] = j2.waitForAny({ keys: waiterKeys[i], afterGeneration: j2.getGeneration(), timeoutMs: 1000 }).then((hit) => {
      late[idx] = performance.now() - (reg[idx] + 1000);
      if (hit !== null) nonNull++;
    });
  }
  const timeoutRegMs = performance.now() - tr0;
  await Promise.all(tps);
  const totals = j2.getTotalStats();
  j2.stop();
  if (nonNull !== 0) throw new Error(`${nonNull} timeout waiters resolved with a hit`);
  const lateSorted = late.sort();

  console.log(
    JSON.stringify({
      waiters: WAITERS,
      avgKeysPerWaiter: round(keySlots / WAITERS, 3),
      activeWaitersAfterRegistration: activeWaiters,
      registrationSeconds: round(regSeconds, 4),
      registrationsPerSec: round(WAITERS / regSeconds, 1),
      heapUsedDeltaBytes: m1.heapUsed - m0.heapUsed,
      rssDeltaBytes: m1.rss - m0.rss,
      heapBytesPerWaiter: round((m1.heapUsed - m0.heapUsed) / WAITERS, 1),
      rssBytesPerWaiter: round((m1.rss - m0.rss) / WAITERS, 1),
      touchedKeys: TOUCHED,
      matchingWaiters: matching.length,
      matchingFraction: round(matching.length / WAITERS, 4),
      flushSyncMs: round(flushSyncMs, 3),
      wakeLatencyP50Ms: round(percentile(matchLat, 50), 3),
      wakeLatencyP99Ms: round(percentile(matchLat, 99), 3),
      wakeLatencyMaxMs: round(matchLat[matchLat.length - 1], 3),
      timeoutWaiters: TIMEOUT_WAITERS,
      timeoutRegistrationMs: round(timeoutRegMs, 3),
      timeoutLatenessMinMs: round(lateSorted[0], 3),
      timeoutLatenessP50Ms: round(percentile(lateSorted, 50), 3),
      timeoutLatenessP99Ms: round(percentile(lateSorted, 99), 3),
      timeoutLatenessMaxMs: round(lateSorted[lateSorted.length - 1], 3),
      timeoutSweeps: totals.timeoutSweeps,
      timeoutsFired: totals.timeoutsFired,
    }),
  );
}

// ---------------------------------------------------------------- parent

const runPart = (kind, run) => runChild(fileURLToPath(import.meta.url), kind, run, { runtimeFlags: isBun ? [] : ["--expose-gc"] });

function parentB4() {
  const perRun = [];
  for (let r = 0; r < RUNS; r++) {
    const res = runPart("b4", r);
    const b = res.batch;
    const c = res.perCall;
    log(
      `B4 run ${r + 1}/${RUNS}: touchMany plain ${b.plain.touchesPerSec}/s (flush ${b.plain.flushMs} ms), bounded ${b.bounded.touchesPerSec}/s, managerStyle ${b.managerStyle.touchesPerSec}/s (flush ${b.managerStyle.flushMs} ms); ` +
        `touch() plain ${c.plain.touchesPerSec}/s, bounded ${c.bounded.touchesPerSec}/s, managerStyle ${c.managerStyle.touchesPerSec}/s`,
    );
    perRun.push(res);
  }
  const pick = (api, v) => perRun.map((x) => x[api][v]);
  const batchApi = "touchMany(Uint32Array keyIds[, BigInt64Array offsets, BigUint64Array routingKeys]) once per bucket";
  console.log(
    JSON.stringify({
      bench: "B4-journal-touch",
      calls:
        "new TouchJournal(defaults); touches of one bucket through touchMany (results.*) and through touch() per key (results.perCall.*); flush() (cancels the bucket timer, flushes)",
      options: OPTS,
      workload: { touches: TOUCHES, distinctKeys: perRun[0].distinct, keyGen: "mulberry32(seed) * 2^32 >>> 0", seed: SEED },
      runs: RUNS,
      isolation: "each run in a fresh child process",
      env: machine(),
      results: {
        plain: { api: batchApi, ...summarizeB4(pick("batch", "plain")) },
        bounded: { api: batchApi, keys: `${TOUCHES} touches drawn uniformly from 50000 random uint32 keys (${perRun[0].boundedDistinct} distinct used)`, ...summarizeB4(pick("batch", "bounded")) },
        managerStyle: { api: batchApi, calls: "touchMany(keyIds, BigInt64Array(offset), BigUint64Array(hex16RoutingKey))", ...summarizeB4(pick("batch", "managerStyle")) },
        perCall: {
          plain: { api: "touch(keyId)", ...summarizeB4(pick("perCall", "plain")) },
          bounded: { api: "touch(keyId)", ...summarizeB4(pick("perCall", "bounded")) },
          managerStyle: { api: "touch(keyId, BigInt(offset), hex16RoutingKey)", ...summarizeB4(pick("perCall", "managerStyle")) },
        },
      },
    }),
  );
}

function parentB5() {
  const perRun = [];
  for (let r = 0; r < RUNS; r++) {
    const res = runPart("b5", r);
    log(
      `B5 run ${r + 1}/${RUNS}: ${res.registrationsPerSec} reg/s, heap ${res.heapBytesPerWaiter} B/waiter, rss ${res.rssBytesPerWaiter} B/waiter, ` +
        `flush ${res.flushSyncMs} ms, wake p50 ${res.wakeLatencyP50Ms} ms p99 ${res.wakeLatencyP99Ms} ms max ${res.wakeLatencyMaxMs} ms (${res.matchingWaiters} matching), ` +
        `timeout lateness p50 ${res.timeoutLatenessP50Ms} p99 ${res.timeoutLatenessP99Ms} max ${res.timeoutLatenessMaxMs} ms`,
    );
    perRun.push(res);
  }
  const keys = [
    "registrationsPerSec",
    "registrationSeconds",
    "heapBytesPerWaiter",
    "rssBytesPerWaiter",
    "flushSyncMs",
    "wakeLatencyP50Ms",
    "wakeLatencyP99Ms",
    "wakeLatencyMaxMs",
    "timeoutLatenessMinMs",
    "timeoutLatenessP50Ms",
    "timeoutLatenessP99Ms",
    "timeoutLatenessMaxMs",
  ];
  const results = {};
  for (const k of keys) results[`median_${k}`] = round(median(perRun.map((x) => x[k])), 3);
  console.log(
    JSON.stringify({
      bench: "B5-waiters",
      calls:
        "TouchJournal.waitForAny x100k (timeoutMs 30000); touch() x1000 + flush(); memory via full GC + process.memoryUsage(); then 10k waitForAny (timeoutMs 1000) without touches",
      options: OPTS,
      workload: { waiters: WAITERS, keysPerWaiter: "1-4 uniform", universe: UNIVERSE, touched: TOUCHED, timeoutWaiters: TIMEOUT_WAITERS, seed: SEED },
      runs: RUNS,
      isolation: "each run in a fresh child process",
      env: machine(),
      results: { ...results, matchingWaiters: perRun[0]?.matchingWaiters, avgKeysPerWaiter: perRun[0]?.avgKeysPerWaiter, runs: perRun },
    }),
  );
}

if (CHILD === "b4") b4Child();
else if (CHILD === "b5") await b5Child();
else {
  if (ONLY !== "b5") parentB4();
  if (ONLY !== "b4") parentB5();
}
