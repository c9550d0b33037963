// The local runtime `prisma dev` embeds (@prisma/streams-local 0.1.11), unswapped and swapped,
// each in its own process (bench/local-server.mjs), driven over HTTP from this process, sides
// alternating in the same run.
//
//   npm run bench:compare -- local [--rounds 3] [--rates 1000,5000] [--seconds 5] [--wakes 100]
//   node bench/local.mjs [--rounds 1] [--sides unswapped-bun,swapped-bun,swapped-node] ...
//
// Sides: `<unswapped|swapped>-<bun|node|node22>`: the runtime is Bun, this Node (the unswapped
// package needs Node 22's node:sqlite, so not on Node 20), or Node 22 from the npm registry's
// `node` package, as the tests use it (testkit/node-binary.mjs: cached in
// node_modules/.cache/durable-touch/node-22, installed there first if missing). By default
// every side but `unswapped-node` (which needs the bench itself on Node 22). Each round starts
// every side once, on a fresh data dir, in rotating order, and measures, one after the other:
//
// - wake p50 / p99: `--wakes` table-key wakes in a row on one stream (a wait parked, 30 ms later
//   a one-row append: ms from the append's request to the wait's reply; each next wait from the
//   cursor the last one returned), as __test__/support/local-driver.mjs times them;
// - idle CPU: the runtime process's CPU (/proc/<pid>/stat, all its threads) over `--idle`
//   seconds with nothing to do but that one touch stream, in % of one core;
// - first append to wake: `--first` new streams (touch profile, no rows yet); on each, a
//   table-key wait from the stream's first cursor, then the stream's first append 100 ms later:
//   ms from the append's request to the wait's reply (the cold path: a stream the runtime has
//   never processed; median);
// - keeping up at each of `--rates` rows/s for `--seconds`: a paced writer (one append every
//   20 ms, at most 4 in flight) of State Protocol inserts on a stream with a template active
//   and two waiter chains (one table key, one watch key) woken as it goes; rows/s acknowledged,
//   append ack p50 / p99, the processor's lag behind the acknowledged tail (meta's
//   walScannedThrough every 200 ms while writing: p50 and max, rows), ms from the last ack
//   until everything is processed (meta polled every 10 ms from the last ack), processed rows/s
//   (acknowledged rows over writing time plus that catch-up), and the process's CPU while
//   writing (cores).
//
// Prints one JSON line: per side the median of each metric over the rounds, the median of the
// per-round ratios against `unswapped-bun` (> 1: that side is better; not for lags and wake
// counts), and the goals as reported, not asserted: wake p50 ≤ 15 ms, idle CPU ≤ 3% of
// a core, and keeping up at 5,000 rows/s (≥ 95% acknowledged, and everything processed within
// a second of the last ack). Also appended to bench/out/results.jsonl.
import { spawn } from "node:child_process";
import { appendFileSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { swap } from "../apps/swap/swap.mjs";
import { decodeOffset } from "../apps/server/offsets.mjs";
import { nodeBinary } from "../testkit/node-binary.mjs";
import { arg, sleep, median, processCpuSeconds } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const { keys } = createRequire(import.meta.url)("../index.js");
const ROUNDS = Math.max(1, Number(arg("rounds", 1)) || 1);
const RATES = String(arg("rates", "1000,5000")).split(",").map(Number).filter((n) => n > 0);
const SECONDS = Number(arg("seconds", 5));
const WAKES = Math.max(1, Math.floor(Number(arg("wakes", 100))));
const FIRST = Math.max(1, Math.floor(Number(arg("first", 5))));
const IDLE_SECONDS = Number(arg("idle", 5));
const SIDES = String(arg("sides", "unswapped-bun,swapped-bun,swapped-node,unswapped-node22,swapped-node22")).split(",");
const BASELINE = "unswapped-bun";
const BUN = join(root, "node_modules", ".bin", "bun");
const LOCAL_PACKAGE = join(root, "node_modules", "@prisma", "streams-local");
const ENTITY = "public.posts";
const JSON_HEADERS = { "content-type": "application/json" };
const now = () => performance.now();

let NODE22 = null;
for (const side of SIDES) {
  const [kind, runtime] = side.split("-");
  if (!["unswapped", "swapped"].includes(kind) || !["bun", "node", "node22"].includes(runtime)) throw new Error(`unknown side ${side}`);
  if (runtime === "node22" && NODE22 === null) {
    const n = nodeBinary(22);
    if (!n.bin) throw new Error(`${side}: no Node 22 (${n.reason})`);
    NODE22 = n.bin;
  }
  if (side === `unswapped-node` && Number(process.versions.node.split(".")[0]) < 22) throw new Error(`${side}: the unswapped package needs Node 22 (node:sqlite); this is ${process.version}`);
}
if (!SIDES.includes(BASELINE)) SIDES.unshift(BASELINE);

/** A temp folder with an unswapped and a swapped project, each holding a copy of the package. */
function projects() {
  const dir = mkdtempSync(join(tmpdir(), "dt-local-bench-"));
  const out = {};
  for (const kind of ["unswapped", "swapped"]) {
    const project = join(dir, kind);
    const modules = join(project, "node_modules");
    mkdirSync(join(modules, "@prisma"), { recursive: true });
    for (const e of readdirSync(join(root, "node_modules"))) {
      if (e === "@prisma" || e.startsWith(".")) continue;
      symlinkSync(realpathSync(join(root, "node_modules", e)), join(modules, e));
    }
    symlinkSync(root, join(modules, "durable-touch"));
    cpSync(LOCAL_PACKAGE, join(modules, "@prisma", "streams-local"), { recursive: true });
    copyFileSync(join(here, "local-server.mjs"), join(project, "server.mjs"));
    if (kind === "swapped") swap(project);
    out[kind] = project;
  }
  return { dir, ...out };
}

/** Starts one side's runtime on a fresh data dir; resolves { url, pid, stop }. */
async function start(dirs, side) {
  const [kind, runtime] = side.split("-");
  const bin = runtime === "bun" ? BUN : runtime === "node22" ? NODE22 : process.execPath;
  const data = mkdtempSync(join(dirs.dir, `data-${side}-`));
  const child = spawn(bin, [join(dirs[kind], "server.mjs")], {
    cwd: dirs[kind],
    env: { ...process.env, DS_LOCAL_DATA_ROOT: data, NODE_NO_WARNINGS: "1" },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise((r) => child.on("exit", r));
  const info = await new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (d) => {
      buf += d;
      const nl = buf.indexOf("\n");
      if (nl >= 0) resolve(JSON.parse(buf.slice(0, nl)));
    });
    child.on("exit", (code) => reject(new Error(`${side} exited ${code} before listening`)));
  });
  if (info.swapped !== (kind === "swapped")) throw new Error(`${side}: the runtime's connections say swapped=${info.swapped}`);
  return {
    ...info,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
      rmSync(data, { recursive: true, force: true });
    },
  };
}

async function call(base, path, method = "GET", json) {
  const res = await fetch(base + path, { method, headers: JSON_HEADERS, body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  let body = text;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {}
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return { body, next: res.headers.get("stream-next-offset") };
}

const post = (i, authorId) => ({
  type: ENTITY,
  key: String(i),
  value: { id: i, authorId, title: `title ${i}` },
  headers: { operation: "insert", timestamp: new Date(1_700_000_000_000 + i).toISOString() },
});
const TABLE = keys.tableKey(ENTITY);
const TEMPLATE = keys.templateId(ENTITY, ["authorId"]);

async function touchStream(base, name, { template = false } = {}) {
  await call(base, `/v1/stream/${name}`, "PUT");
  await call(base, `/v1/stream/${name}/_profile`, "POST", { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } });
  if (template) await call(base, `/v1/stream/${name}/touch/templates/activate`, "POST", { templates: [{ entity: ENTITY, fields: [{ name: "authorId", encoding: "int64" }] }] });
  return (await call(base, `/v1/stream/${name}/touch/meta?settle=flush&timeoutMs=3000`)).body.cursor;
}

/** A wait parked on the table key, then an append `delayMs` later: ms from the append's request to the reply. */
async function wake(base, name, cursor, record, delayMs) {
  const w = call(base, `/v1/stream/${name}/touch/wait`, "POST", { cursor, keys: [TABLE], interestMode: "coarse", timeoutMs: 4000 });
  await sleep(delayMs);
  const t0 = now();
  await call(base, `/v1/stream/${name}`, "POST", [record]);
  const r = await w;
  const ms = now() - t0;
  if (r.body?.touched !== true) throw new Error(`${name}: the wait was not woken by the append: ${JSON.stringify(r.body)}`);
  return { ms, cursor: r.body.cursor };
}

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const round = (x, d = 1) => (x === null || x === undefined ? null : Math.round(x * 10 ** d) / 10 ** d);

/** A waiter chain on `keys` until `stop()`: counts its wakes. */
async function chain(base, name, cursor, body, stop) {
  let wakes = 0;
  while (!stop()) {
    const r = await call(base, `/v1/stream/${name}/touch/wait`, "POST", { cursor, timeoutMs: 2000, ...body });
    cursor = r.body.cursor;
    if (r.body.touched) wakes++;
  }
  return wakes;
}

/** `rate` rows/s for SECONDS through a paced writer; see the header. */
async function keepUp(srv, rate) {
  const base = srv.url;
  const name = `load${rate}`;
  const cursor = await touchStream(base, name, { template: true });
  let done = false;
  const chains = [
    chain(base, name, cursor, { keys: [TABLE], interestMode: "coarse" }, () => done),
    chain(base, name, cursor, { keys: [keys.watchKey(TEMPLATE, ["7"])], templateIdsUsed: [TEMPLATE], interestMode: "fine" }, () => done),
  ];
  await sleep(200);
  const INTERVAL = 20;
  const batch = Math.max(1, Math.round((rate * INTERVAL) / 1000));
  const acks = [];
  let ackedRows = 0;
  let ackedSeq = -1n;
  let ackedNext = null;
  let id = 0;
  const lags = [];
  let writing = true;
  const sampler = (async () => {
    while (writing) {
      await sleep(200);
      if (!writing) break;
      const m = await call(base, `/v1/stream/${name}/touch/meta`);
      const scanned = decodeOffset(m.body.walScannedThrough)?.seq ?? -1n;
      if (writing) lags.push(Number(ackedSeq - scanned > 0n ? ackedSeq - scanned : 0n));
    }
  })();
  const cpu0 = processCpuSeconds(srv.pid);
  const t0 = now();
  const end = t0 + SECONDS * 1000;
  const pending = new Set();
  for (let k = 0; ; k++) {
    const due = t0 + k * INTERVAL;
    if (due >= end) break;
    if (due > now()) await sleep(due - now());
    while (pending.size >= 4) await Promise.race(pending);
    const records = Array.from({ length: batch }, () => post(id, id++ % 1000));
    const sent = now();
    const p = call(base, `/v1/stream/${name}`, "POST", records).then((r) => {
      acks.push(now() - sent);
      ackedRows += records.length;
      const seq = decodeOffset(r.next).seq;
      if (seq > ackedSeq) {
        ackedSeq = seq;
        ackedNext = r.next;
      }
    });
    pending.add(p);
    p.finally(() => pending.delete(p));
  }
  await Promise.all(pending);
  const writeEnd = now();
  const cpu1 = processCpuSeconds(srv.pid);
  writing = false;
  // Polled from the last ack on (not after the sampler's pending sleep, which would add up to
  // 200 ms of the bench's own to the catch-up): resolution ~10 ms plus a meta round trip.
  let catchUpMs = null;
  for (;;) {
    const m = await call(base, `/v1/stream/${name}/touch/meta`);
    if (m.body.walScannedThrough === ackedNext) {
      catchUpMs = now() - writeEnd;
      break;
    }
    if (now() - writeEnd > 30_000) break;
    await sleep(10);
  }
  await sampler;
  done = true;
  const wakes = await Promise.all(chains);
  const writeSeconds = (writeEnd - t0) / 1000;
  return {
    achievedRowsPerSec: Math.round(ackedRows / writeSeconds),
    processedRowsPerSec: catchUpMs === null ? null : Math.round(ackedRows / (writeSeconds + catchUpMs / 1000)),
    catchUpMs: round(catchUpMs),
    lagP50Rows: quantile(lags, 0.5),
    lagMaxRows: lags.length ? Math.max(...lags) : null,
    ackP50Ms: round(quantile(acks, 0.5)),
    ackP99Ms: round(quantile(acks, 0.99)),
    cpuCores: round((cpu1 - cpu0) / writeSeconds, 3),
    chainWakes: wakes[0] + wakes[1],
  };
}

/** One side, once: every measurement, flat. */
async function measure(dirs, side) {
  const srv = await start(dirs, side);
  try {
    const base = srv.url;
    const out = { runtime: `${srv.runtime} ${srv.version}` };
    // Wakes in a row.
    let cursor = await touchStream(base, "w");
    await call(base, "/v1/stream/w", "POST", [post(0, 1)]);
    cursor = (await wake(base, "w", cursor, post(1, 1), 30)).cursor;
    const wakes = [];
    for (let i = 0; i < WAKES; i++) {
      const r = await wake(base, "w", cursor, post(2 + i, 1), 30);
      wakes.push(r.ms);
      cursor = r.cursor;
    }
    out.wakeP50Ms = round(quantile(wakes, 0.5));
    out.wakeP99Ms = round(quantile(wakes, 0.99));
    // Idle, with the one touch stream.
    await sleep(1000);
    const c0 = processCpuSeconds(srv.pid);
    const t0 = now();
    await sleep(IDLE_SECONDS * 1000);
    out.idleCpuPct = round(((processCpuSeconds(srv.pid) - c0) / ((now() - t0) / 1000)) * 100, 2);
    // First append to wake, on streams the runtime has never processed.
    const first = [];
    for (let i = 0; i < FIRST; i++) {
      const cursor = await touchStream(base, `first${i}`);
      first.push((await wake(base, `first${i}`, cursor, post(0, 1), 100)).ms);
    }
    out.firstWakeMs = round(median(first));
    // Keeping up.
    for (const rate of RATES) {
      for (const [k, v] of Object.entries(await keepUp(srv, rate))) out[`rows${rate}.${k}`] = v;
    }
    return out;
  } finally {
    await srv.stop();
  }
}

/** Which way is better per metric (a ratio > 1 means the side beats the baseline). */
function better(metric) {
  if (/achievedRowsPerSec|processedRowsPerSec/.test(metric)) return "higher";
  if (/Ms$|Pct$|cpuCores/.test(metric)) return "lower";
  return null; // lags (often 0) and wake counts: reported, not compared
}

const dirs = projects();
try {
  const perRound = [];
  for (let r = 0; r < ROUNDS; r++) {
    const order = SIDES.map((_, i) => SIDES[(i + r) % SIDES.length]);
    const results = {};
    for (const side of order) {
      process.stderr.write(`round ${r + 1}/${ROUNDS}: ${side}\n`);
      results[side] = await measure(dirs, side);
      process.stderr.write(`  ${JSON.stringify(results[side])}\n`);
    }
    perRound.push(results);
  }
  const metrics = Object.keys(perRound[0][BASELINE]).filter((k) => k !== "runtime");
  const sides = Object.fromEntries(
    SIDES.map((side) => [side, { runtime: perRound[0][side].runtime, ...Object.fromEntries(metrics.map((k) => [k, median(perRound.map((p) => p[side][k]))])) }])
  );
  const ratios = Object.fromEntries(
    SIDES.filter((s) => s !== BASELINE).map((side) => [
      side,
      Object.fromEntries(
        metrics
          .filter((k) => better(k))
          .map((k) => {
            const per = perRound.map((p) => {
              const a = p[BASELINE][k];
              const b = p[side][k];
              if (typeof a !== "number" || typeof b !== "number" || a <= 0 || b <= 0) return null;
              return better(k) === "lower" ? a / b : b / a;
            });
            return [k, round(median(per), 2)];
          })
      ),
    ])
  );
  const goals = Object.fromEntries(
    SIDES.map((side) => {
      const s = sides[side];
      const rows5000 = s["rows5000.achievedRowsPerSec"];
      return [
        side,
        {
          "wake p50 <= 15 ms": s.wakeP50Ms !== null && s.wakeP50Ms <= 15,
          "idle CPU <= 3% of a core": s.idleCpuPct !== null && s.idleCpuPct <= 3,
          "keeps up at 5,000 rows/s": rows5000 === undefined ? null : rows5000 >= 4750 && s["rows5000.catchUpMs"] !== null && s["rows5000.catchUpMs"] <= 1000,
        },
      ];
    })
  );
  const line = { bench: "local", date: new Date().toISOString(), rounds: ROUNDS, rates: RATES, seconds: SECONDS, wakes: WAKES, first: FIRST, idleSeconds: IDLE_SECONDS, sides, ratios, goals };
  console.log(JSON.stringify(line));
  mkdirSync(join(here, "out"), { recursive: true });
  appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify(line) + "\n");
} finally {
  rmSync(dirs.dir, { recursive: true, force: true });
}
