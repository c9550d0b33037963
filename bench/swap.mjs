// The swap, end to end: the reference's own B6 benchmark (bench/reference/b6-e2e.ts, part
// "main": 1,000 fine waiters on 24 templates, appends over HTTP, in process) against an
// unswapped and a swapped copy of @prisma/streams-server, alternating, in the same run.
//
//   npm run bench:compare -- swap [--rounds 3] [--rates 1000,5000] [--seconds 10] [--waiters 1000] [--batch 50]
//   node bench/swap.mjs [--rounds 1] ...
//
// Both copies are made from node_modules/@prisma/streams-server (never swapped in place, so the
// "unswapped" side is the real reference) in a temp folder whose node_modules resolves
// `durable-touch` to this checkout; the swapped one goes through `apps/swap/swap.mjs`. Each round
// runs both sides at each rate, in alternating order. Prints, per rate, each side's median of
// wake p50/p99, rows/s achieved, appends answered 408, wakes, wakes before their record, CPU
// ms per 1,000 wakes and per 1,000 rows (the whole process: server, writer and waiters), and
// the median of the per-round ratios (> 1: swapped better). `--waiters 0` measures the write
// path alone: what processing costs when nobody listens.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, appendFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { referenceCopies } from "./reference-copies.mjs";
import { arg, median } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const ROUNDS = Math.max(1, Number(arg("rounds", 1)) || 1);
const RATES = String(arg("rates", "1000,5000")).split(",").map(Number).filter((n) => n > 0);
const SECONDS = Number(arg("seconds", 10));
const WAITERS = Math.max(0, Math.floor(Number(arg("waiters", 1000))));
const BATCH = Math.max(1, Math.floor(Number(arg("batch", 50))));
const bun = join(root, "node_modules", ".bin", "bun");

function run(anchor, rate) {
  const args = [join(here, "reference", "b6-e2e.ts"), "--runs", "1", "--only", "main", "--rate", String(rate), "--seconds", String(SECONDS), "--waiters", String(WAITERS), "--batch", String(BATCH)];
  process.stderr.write(`$ ANCHOR_REPO=${anchor} bun ${args.join(" ")}\n`);
  const r = spawnSync(bun, args, { cwd: root, env: { ...process.env, ANCHOR_REPO: anchor }, stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`b6-e2e.ts against ${anchor} exited with ${r.status}`);
  const line = r.stdout.toString().trim().split("\n").filter((l) => l.startsWith("{")).pop();
  const run0 = JSON.parse(line).results.main.runs[0];
  return {
    p50Ms: run0.latencyMs.p50,
    p99Ms: run0.latencyMs.p99,
    achievedRowsPerSec: run0.achievedRowsPerSec,
    appends408: run0.appendBatches408,
    wakes: run0.woken,
    wakesBeforeRecord: run0.wokenBeforeRecordProcessed,
    cpuMsPer1000Wakes: Math.round(((run0.cpuSeconds * 1e6) / Math.max(1, run0.woken)) * 100) / 100,
    cpuMsPer1000Rows: Math.round(((run0.cpuSeconds * 1e6) / Math.max(1, run0.achievedRowsPerSec * run0.writerSeconds)) * 100) / 100,
    cpuCores: run0.cpuCores,
    kinds: run0.wokenByKind,
    endMode: run0.metaEnd?.touchMode,
  };
}

/** Which way is better per metric (ratio > 1 means the swapped side is better). */
const BETTER = { p50Ms: "lower", p99Ms: "lower", achievedRowsPerSec: "higher", cpuMsPer1000Wakes: "lower", cpuMsPer1000Rows: "lower", wakes: "higher" };

const { dir } = referenceCopies("dt-swap-bench-");
try {
  const perRate = Object.fromEntries(RATES.map((r) => [r, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const rate of RATES) {
      const order = round % 2 === 0 ? ["unswapped", "swapped"] : ["swapped", "unswapped"];
      const sides = {};
      for (const side of order) sides[side] = run(join(dir, side), rate);
      perRate[rate].push(sides);
    }
  }
  for (const rate of RATES) {
    const rounds = perRate[rate];
    const side = (name) => Object.fromEntries(Object.keys(rounds[0][name]).map((k) => [k, typeof rounds[0][name][k] === "number" ? median(rounds.map((r) => r[name][k])) : rounds[rounds.length - 1][name][k]]));
    const ratios = Object.fromEntries(
      Object.entries(BETTER).map(([k, better]) => {
        const per = rounds.map((r) => (better === "lower" ? r.unswapped[k] / r.swapped[k] : r.swapped[k] / r.unswapped[k]));
        const m = median(per);
        return [k, m === null ? null : Math.round(m * 100) / 100];
      })
    );
    const line = { bench: `B6-swap-${rate}`, date: new Date().toISOString(), rateRowsPerSec: rate, seconds: SECONDS, waiters: WAITERS, batch: BATCH, rounds: ROUNDS, unswapped: side("unswapped"), swapped: side("swapped"), ratios };
    console.log(JSON.stringify(line));
    mkdirSync(join(here, "out"), { recursive: true });
    appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify(line) + "\n");
  }
} finally {
  if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
}
