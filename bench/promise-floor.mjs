// The runtime's own floor for B5's wake latency: the same 100,000 waiters (same seed, same
// 9,958 matching ones) as plain JavaScript promises, with no journal at all. "Flush" resolves
// the matching waiters' promises from JavaScript, in registration order, with one shared frozen
// hit (the cheapest order and value there are). Everything else is B5's harness as it is
// (bench/journal.mjs, b5-waiters.ts): the same `.then` handler on every promise, and the same
// `await Promise.all(matching.map(...))` right after the flush, whose synchronous setup (a
// `.then` per matching promise) runs before any handler and so is part of every latency B5
// reports. Whatever a journal does, its p99 cannot beat this on the same machine.
//
//   node bench/promise-floor.mjs [--runs 3] [--waiters 100000]
//   node_modules/.bin/bun bench/promise-floor.mjs
//
// Prints one JSON line (`bench` = `B5-promise-floor`): medians over runs of the synchronous
// resolve time and the p50/p99 wake latency. Each run is a fresh child process.

import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { mulberry32 } from "../testkit/gen-workload.mjs";
import { numArg } from "./common.mjs";

const RUNS = numArg("runs", 3);
const WAITERS = numArg("waiters", 100_000);
const UNIVERSE = 24_000;
const TOUCHED = 1_000;
const isBun = typeof globalThis.Bun !== "undefined";
const gcNow = () => (typeof globalThis.gc === "function" ? globalThis.gc() : isBun ? Bun.gc(true) : undefined);
const round = (x) => Math.round(x * 1000) / 1000;

async function child() {
  // The B5 workload (bench/journal.mjs, b5-waiters.ts): which waiters match the touched ids.
  const rnd = mulberry32(1);
  const seen = new Set();
  const universe = [];
  while (universe.length < UNIVERSE) {
    const k = Math.floor(rnd() * 4294967296) >>> 0;
    if (seen.has(k)) continue;
    seen.add(k);
    universe.push(k);
  }
  const touched = new Set(universe.slice(0, TOUCHED));
  const matching = [];
  for (let i = 0; i < WAITERS; i++) {
    const m = 1 + Math.floor(rnd() * 4);
    let hit = false;
    for (let j = 0; j < m; j++) hit = touched.has(universe[Math.floor(rnd() * UNIVERSE)]) || hit;
    if (hit) matching.push(i);
  }

  const resolvers = new Array(WAITERS);
  const proms = new Array(WAITERS);
  gcNow();
  for (let i = 0; i < WAITERS; i++) proms[i] = new Promise((r) => (resolvers[i] = r));
  gcNow();
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
  const hit = Object.freeze({ generation: 1, keyId: 0, bucketMaxSourceOffsetSeq: -1n, flushAtMs: 0, bucketStartMs: 0 });
  tFlush = performance.now();
  for (const i of matching) resolvers[i](hit);
  const syncMs = performance.now() - tFlush;
  await Promise.all(matching.map((i) => proms[i]));
  await new Promise((r) => setTimeout(r, 20));
  if (resolved !== matching.length || hits !== matching.length) throw new Error("wake mismatch");
  const l = Float64Array.from(matching.map((i) => lat[i])).sort();
  if (l.some(Number.isNaN)) throw new Error("a matching waiter did not resolve");
  const pct = (p) => l[Math.min(l.length - 1, Math.floor((p / 100) * l.length))];
  console.log(JSON.stringify({ matching: matching.length, syncMs: round(syncMs), p50: round(pct(50)), p99: round(pct(99)) }));
}

if (process.argv.includes("--child")) {
  await child();
} else {
  const runs = [];
  for (let r = 0; r < RUNS; r++) {
    const args = isBun ? [] : ["--expose-gc"];
    const out = spawnSync(process.execPath, [...args, fileURLToPath(import.meta.url), "--child", "--waiters", String(WAITERS)]);
    if (out.status !== 0) throw new Error(`child failed: ${out.stderr}`);
    runs.push(JSON.parse(out.stdout.toString().trim().split("\n").pop()));
  }
  const med = (k) => [...runs.map((r) => r[k])].sort((a, b) => a - b)[runs.length >> 1];
  console.log(
    JSON.stringify({
      bench: "B5-promise-floor",
      runtime: isBun ? `bun ${Bun.version}` : `node ${process.version}`,
      waiters: WAITERS,
      matchingWaiters: runs[0].matching,
      results: { median_resolveSyncMs: med("syncMs"), median_wakeLatencyP50Ms: med("p50"), median_wakeLatencyP99Ms: med("p99") },
      runs,
    }),
  );
}
