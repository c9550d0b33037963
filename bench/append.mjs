// B1 append: durable-touch Store.append throughput on the shared workload (seed 1).
//
//   node bench/append.mjs [--runs 3] [--seed 1] [--n1 20000] [--n64 200000] [--n1024 200000]
//
// Prints one JSON line shaped like bench/reference/b1-append.ts. Per run and case: a fresh temp
// dir and a fresh Store (WAL, synchronous=FULL: every acknowledged call is durable), stream
// "bench" (application/json), payloads = the workload's JSON bytes, encoded before timing.
//   batch1         20,000 single-row calls, each awaited before the next (one commit each)
//   concurrent1000 the same 20,000 single-row calls with 1,000 in flight (group commit)
//   batch64        200,000 rows in calls of 64, awaited one at a time (as the reference does)
//   batch1024      200,000 rows in calls of 1,024, awaited one at a time
//   batch64x8      calls of 64 with 8 in flight (what a server with concurrent writers sees)
import { mkdtempSync, rmSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { generateRecords, walTsMs } from "../testkit/gen-workload.mjs";
import { numArg, log, median, machine } from "./common.mjs";

const require = createRequire(import.meta.url);
const { Store } = require("../index.js");

const RUNS = numArg("runs", 3);
const SEED = numArg("seed", 1);
const N1 = numArg("n1", 20_000);
const N64 = numArg("n64", 200_000);
const N1024 = numArg("n1024", 200_000);
const round = (x, d = 3) => Math.round(x * 10 ** d) / 10 ** d;
const size = (p) => (existsSync(p) ? statSync(p).size : 0);

const maxN = Math.max(N1, N64, N1024);
log(`generating ${maxN} records (seed ${SEED})`);
const payloads = generateRecords({ n: maxN, seed: SEED }).map((s) => Buffer.from(s));
const prefixBytes = new Float64Array(payloads.length + 1);
for (let i = 0; i < payloads.length; i++) prefixBytes[i + 1] = prefixBytes[i] + payloads[i].length;

const CASES = [
  { name: "batch1", batch: 1, records: N1, inflight: 1 },
  { name: "concurrent1000", batch: 1, records: N1, inflight: 1000 },
  { name: "batch64", batch: 64, records: N64, inflight: 1 },
  { name: "batch1024", batch: 1024, records: N1024, inflight: 1 },
  { name: "batch64x8", batch: 64, records: N64, inflight: 8 },
];

async function runOne({ batch, records, inflight }) {
  const root = mkdtempSync(join(tmpdir(), "dt-b1-"));
  const path = join(root, "wal.sqlite");
  try {
    const store = Store.open(path);
    await store.createStream("bench", { contentType: "application/json" });
    const calls = [];
    for (let off = 0; off < records; off += batch) calls.push(off);
    let next = 0;
    const t0 = performance.now();
    async function worker() {
      while (next < calls.length) {
        const off = calls[next++];
        const end = Math.min(records, off + batch);
        await store.append("bench", payloads.slice(off, end), { appendMs: walTsMs(off) });
      }
    }
    await Promise.all(Array.from({ length: Math.min(inflight, calls.length) }, worker));
    const seconds = (performance.now() - t0) / 1000;
    const info = await store.getStream("bench");
    if (info.nextOffset !== BigInt(records)) throw new Error(`nextOffset ${info.nextOffset} != ${records}`);
    const stats = store.stats();
    await store.close();
    return {
      seconds: round(seconds, 4),
      rowsPerSec: round(records / seconds, 1),
      mbPerSec: round(prefixBytes[records] / 1e6 / seconds, 3),
      commits: stats.groupCommits,
      maxGroupCalls: stats.maxGroupCalls,
      dbFileBytes: size(path),
      walFileBytes: size(`${path}-wal`),
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const perCase = Object.fromEntries(CASES.map((c) => [c.name, []]));
for (let r = 0; r < RUNS; r++) {
  for (const c of CASES) {
    const res = await runOne(c);
    log(`run ${r + 1}/${RUNS} ${c.name}: ${res.rowsPerSec} rows/s, ${res.mbPerSec} MB/s, ${res.commits} commits (${res.seconds}s)`);
    perCase[c.name].push(res);
  }
}

const results = {};
for (const c of CASES) {
  const rs = perCase[c.name];
  results[c.name] = {
    records: c.records,
    batch: c.batch,
    inflight: c.inflight,
    avgPayloadBytes: round(prefixBytes[c.records] / c.records, 1),
    medianRowsPerSec: round(median(rs.map((x) => x.rowsPerSec)), 1),
    medianMBPerSec: round(median(rs.map((x) => x.mbPerSec)), 3),
    medianSeconds: round(median(rs.map((x) => x.seconds)), 4),
    medianCommits: median(rs.map((x) => x.commits)),
    runs: rs,
  };
}

console.log(
  JSON.stringify({
    bench: "B1-append",
    calls: "durable-touch Store.append (group commit; each call acknowledged once durable)",
    units: { mbPerSec: "payload bytes / 1e6 / s" },
    workload: { generator: "testkit/gen-workload.mjs", seed: SEED, tsMs: "T0_MS + offset of the call's first row" },
    runs: RUNS,
    env: machine(),
    results,
  })
);
