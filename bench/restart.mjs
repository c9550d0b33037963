// Restarts and parked clients (issue 33): how many clients must refetch after a server restart,
// against how many had a key truly touched, on our server and on the swapped reference server,
// with the unswapped reference side by side.
//
//   npm run bench:restart                                  # 10,000 clients, 10 streams, 1,000 rows
//   node bench/restart.mjs [--clients 10000] [--streams 10] [--rows 1000] [--rounds 1]
//        [--sides ours,ours-nokeep,swapped,swapped-nokeep,reference] [--scenarios clean,kill]
//        [--tables 100] [--groups 200] [--appenders 4] [--resume-timeout 2000] [--seed 33]
//        [--order append-first | resume-first]
//
// Sides (each a server as its own process on a fresh data dir, started twice per scenario):
//   - ours:            node bin/durable-touch.mjs serve --port 0 --data DIR
//   - ours-nokeep:     the same with --no-keep-cursors (a new epoch at every start)
//   - swapped:         a copy of @prisma/streams-server's src/ swapped by apps/swap/swap.mjs, under Bun
//                      (createApp + Bun.serve, as __test__/reference/swap-serve.ts; SIGTERM closes
//                      the app cleanly)
//   - swapped-nokeep:  the same with DURABLE_TOUCH_KEEP_CURSORS=0
//   - reference:       an unswapped copy (the reference itself)
// Scenarios: clean (the first half of the rows is appended, then SIGTERM, wait for the exit,
// start again) and kill (SIGKILL while the appenders run, once half of the rows are acknowledged).
//
// Workload: `--streams` touch streams; each has `--tables` tables `public.t<j>` and one activated
// template on `public.items` (field `group`, string; `--groups` values `g<j>`). Clients are
// split evenly over the streams; on each, every other client waits on one table key (coarse)
// or on one watch key of the template (fine, templateIdsUsed), chosen at random (seeded, so
// every side gets the same clients and rows). `--rows` rows are planned per stream, half table
// inserts and half item inserts, in two halves; within a half no key is written twice (while
// the half is larger than the tables or groups it wraps), so a client woken before the restart
// by its key has no second write of that half to be confused with. A few rows are written
// before the first cursor (written before it: never a reason to wake). Rows are appended one
// per POST by `--appenders` concurrent appenders.
//
// Flow per side x scenario: start, set up the streams, take a settled cursor per stream, park
// every client with it (its stream's activeWaiters in meta reach its clients), append the first
// half (clients woken meanwhile refetch and park again from the cursor they were answered),
// restart (clean or kill), append the rest (the rows not acknowledged before the restart), let
// the server settle (meta ?settle=flush), then every client waits again from its last cursor
// with `--resume-timeout` (a client whose wait was cut by the restart retries with the same
// cursor): that "resume" wait's answer is counted. A client answered stale or touched
// refetches and parks again from the answer's cursor. With `--order resume-first` the clients
// come back as soon as the server listens and the rest is appended meanwhile: a client is then
// counted by every answer it had after the restart (stale if any was, else touched if any was)
// until the rest is settled, 300 ms have passed and every resume wait is answered. Clients wait with timeoutMs 30000 on our
// server and 4000 on the reference hosts (they answer any request older than 5 s with 408).
//
// Truth: the rows stored in each stream are read back after the restart (so a row in flight
// when the process was killed counts if and only if it was stored), each with the time its
// POST was sent. What a cursor covers, L: every answer carrying a cursor (waits, meta) gives
// with its bucketMaxSourceOffsetSeq an offset that cursor covers at least (a touched answer's
// is the touching bucket's; our server's close answers say -1), and within an epoch coverage
// grows with the generation, so L is the highest offset reported at or below the cursor's
// generation. A client's resume cursor was received at time R. Its key is truly touched if a
// stored row of its key has offset > L and was sent after R (the cursor cannot cover it);
// "maybe" if such rows were all sent before R (the cursor may or may not cover them); not
// touched otherwise. A false negative is a truly touched client that was answered neither
// stale nor touched: there must be none (the script says so loudly).
//
// Reported per side x scenario (medians over rounds; each round runs every side, the order of
// sides flipping every round): stale, touched, refetch (stale + touched), truly touched, maybe,
// false negatives, spurious (refetched though nothing was written after its cursor); times in
// ms: startup (spawn to listening, the restart's), restartToParked (the restart's spawn to
// every client parked again: start-up, appending the rest, settling and the re-wait burst;
// "parked" = each stream's meta showed activeWaiters >= its clients, taken when that meta
// answer arrived, pollRttMs its round trip), rewaitToParked (from the re-wait's start; with
// the server's and this driver's CPU over it: both share the machine), appendRest, stopMs
// (signal to exit); from our
// server's /v1/stats engine.keptJournals (kept, refused, restoreMs, replayedFlushes); from meta
// after the restart: streams whose epoch was kept, journalKept, replayedFlushes; CPU of the
// server process (/proc/<pid>/stat utime+stime, all threads) over appending the rest and
// settling, per flush (meta journalFlushesTotal over the same window) and per row. "Extra CPU
// per flush" is the keep side's figure minus the nokeep side's (same rows, same flushes; it is
// within the noise of the HTTP work around it: for the log's own cost, set JOURNAL_KEEP_OUT to a
// file holding the output of `cargo run --release --example journal_keep`, which this script
// quotes but never runs).
//
// Prints one JSON line per side x scenario on stdout and a table on stderr. The machine's
// descriptor limit bounds --clients (each client holds a socket in this process and one in the
// server's): the script lowers it to what fits and says so.
import http from "node:http";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { REFERENCE, referenceCopies } from "./reference-copies.mjs";
import { mulberry32 } from "../testkit/gen-workload.mjs";
import { arg, sleep, median, descriptorLimit, processCpuMs } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const require = createRequire(import.meta.url);
const { keys: K } = require("../index.js");
const BIN = join(root, "bin", "durable-touch.mjs");
const BUN = join(root, "node_modules", ".bin", "bun");

const int = (name, dflt, min = 1) => Math.max(min, Math.floor(Number(arg(name, dflt)) || dflt));
const ALL_SIDES = ["ours", "ours-nokeep", "swapped", "swapped-nokeep", "reference"];
const SIDES = String(arg("sides", ALL_SIDES.join(","))).split(",").filter(Boolean);
for (const s of SIDES) if (!ALL_SIDES.includes(s)) throw new Error(`unknown side ${s}; known: ${ALL_SIDES.join(", ")}`);
const SCENARIOS = String(arg("scenarios", "clean,kill")).split(",").filter(Boolean);
for (const s of SCENARIOS) if (s !== "clean" && s !== "kill") throw new Error(`unknown scenario ${s}; known: clean, kill`);
const STREAMS = int("streams", 10);
const ROWS = int("rows", 1000, 2);
const ROUNDS = int("rounds", 1);
const TABLES = int("tables", 100);
const GROUPS = int("groups", 200);
const APPENDERS = int("appenders", 4);
const RESUME_TIMEOUT = int("resume-timeout", 2000);
const SEED = int("seed", 33, 0);
const ORDER = String(arg("order", "append-first"));
if (ORDER !== "append-first" && ORDER !== "resume-first") throw new Error(`--order append-first | resume-first`);
const PRE_ROWS = 5; // per stream, before the first cursor
const OURS_TIMEOUT = 30_000;
const REF_TIMEOUT = 4_000; // the reference hosts answer requests older than 5 s with 408
const PARK_CAP_MS = 90_000;

// --- Descriptors: each client is a socket here and one in the server. ---
const FD_LIMIT = descriptorLimit();
const wantClients = int("clients", 10_000);
const CLIENTS_MAX = Math.max(STREAMS, Math.floor(FD_LIMIT - 1024));
let CLIENTS = Math.min(wantClients, CLIENTS_MAX);
CLIENTS -= CLIENTS % STREAMS || 0;
if (CLIENTS !== wantClients) process.stderr.write(`--clients ${wantClients}: ${CLIENTS} (descriptor limit ${FD_LIMIT}, ${STREAMS} streams)\n`);
const PER_STREAM = CLIENTS / STREAMS;

const now = () => performance.now();
const round1 = (x) => (typeof x === "number" && Number.isFinite(x) ? Math.round(x * 10) / 10 : x);

// --- HTTP: one keep-alive agent per scenario; at most 128 connections being opened at once
// (a listen backlog overflowing costs a 1 s SYN retransmit, which would be measured). ---
function makeHttp() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1 << 20, keepAliveMsecs: 30_000 });
  let opening = 0;
  const queue = [];
  const acquire = () => (opening < 128 ? (opening++, Promise.resolve()) : new Promise((r) => queue.push(r)));
  const release = () => {
    const next = queue.shift();
    if (next) next();
    else opening--;
  };
  async function request(base, method, path, body) {
    await acquire();
    return new Promise((resolve, reject) => {
      let held = true;
      const free = () => {
        if (held) {
          held = false;
          release();
        }
      };
      const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
      const url = new URL(path, base);
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname + url.search,
          method,
          agent,
          headers: data ? { "content-type": "application/json", "content-length": data.length } : { "content-type": "application/json" },
        },
        (res) => {
          free();
          const chunks = [];
          res.on("data", (c) => chunks.push(c));
          res.on("error", reject);
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString();
            let json = null;
            try {
              json = text ? JSON.parse(text) : null;
            } catch {
              json = null;
            }
            resolve({ status: res.statusCode, body: json, text, headers: res.headers });
          });
        }
      );
      req.on("socket", (s) => {
        if (s.connecting) {
          s.once("connect", free);
          s.once("close", free);
        } else free();
      });
      req.on("error", (e) => {
        free();
        reject(e);
      });
      req.end(data ?? undefined);
    });
  }
  return { request, destroy: () => agent.destroy() };
}

// --- Servers ---
const REF_SERVE = `// Written by bench/restart.mjs: a copy of the reference server (its src/ at $APP_SRC, swapped
// or not) on $DATA_DIR, as __test__/reference/swap-serve.ts, plus a clean close on SIGTERM.
const APP = process.env.APP_SRC!;
const { createApp } = await import(\`\${APP}/app.ts\`);
const { loadConfig } = await import(\`\${APP}/config.ts\`);
const { MockR2Store } = await import(\`\${APP}/objectstore/mock_r2.ts\`);
const root = process.env.DATA_DIR!;
const cfg = { ...loadConfig(), rootDir: root, dbPath: \`\${root}/wal.sqlite\`, port: 0 };
const app = createApp(cfg, new MockR2Store());
const server = Bun.serve({ hostname: "127.0.0.1", port: 0, idleTimeout: 120, fetch: app.fetch });
process.stdout.write(JSON.stringify({ port: server.port }) + "\\n");
let closing = false;
process.on("SIGTERM", async () => {
  if (closing) return;
  closing = true;
  server.stop(true);
  await app.close();
  process.stdout.write("closed\\n", () => process.exit(0));
});
`;

/** The reference copies (bench/reference-copies.mjs) and the serve script beside them. */
function copiesWithServe() {
  const { dir, unswapped, swapped } = referenceCopies("dt-restart-bench-");
  writeFileSync(join(dir, "restart-serve.ts"), REF_SERVE);
  return { dir, unswapped: join(unswapped, "src"), swapped: join(swapped, "src"), serve: join(dir, "restart-serve.ts") };
}

function sideSpec(name, copies) {
  switch (name) {
    case "ours":
      return { name, kind: "ours", keep: true, waitTimeout: OURS_TIMEOUT };
    case "ours-nokeep":
      return { name, kind: "ours", keep: false, waitTimeout: OURS_TIMEOUT };
    case "swapped":
      return { name, kind: "ref", src: copies.swapped, env: {}, keep: true, waitTimeout: REF_TIMEOUT };
    case "swapped-nokeep":
      return { name, kind: "ref", src: copies.swapped, env: { DURABLE_TOUCH_KEEP_CURSORS: "0" }, keep: false, waitTimeout: REF_TIMEOUT };
    case "reference":
      return { name, kind: "ref", src: copies.unswapped, env: {}, keep: false, waitTimeout: REF_TIMEOUT };
  }
  throw new Error(name);
}

const children = new Set();
function startServer(side, dataDir, copies) {
  const t0 = now();
  const child =
    side.kind === "ours"
      ? spawn(process.execPath, [BIN, "serve", "--port", "0", "--data", dataDir, ...(side.keep ? [] : ["--no-keep-cursors"])], { stdio: ["ignore", "pipe", "pipe"] })
      : spawn(BUN, ["--no-install", copies.serve], { env: { ...process.env, APP_SRC: side.src, DATA_DIR: dataDir, ...side.env }, stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  const exited = new Promise((r) => child.on("exit", (code, signal) => (children.delete(child), r({ code, signal }))));
  let err = "";
  child.stderr.on("data", (d) => {
    if (err.length < 20_000) err += d;
  });
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.length > 100_000) out = out.slice(-10_000);
      const m = side.kind === "ours" ? out.match(/listening on (http:\/\/[^\s]+)/) : out.match(/\{"port":(\d+)\}/);
      if (m) {
        const base = side.kind === "ours" ? m[1] : `http://127.0.0.1:${m[1]}`;
        resolve({ child, pid: child.pid, base, startupMs: now() - t0, spawnedAt: t0, exited, stderr: () => err });
        out = "";
      }
    });
    exited.then((how) => reject(new Error(`${side.name} exited before listening (${JSON.stringify(how)}): ${err.slice(-2000)}`)));
  });
}

// --- The plan: clients and rows (the same for every side). ---
function makePlan() {
  const rnd = mulberry32(SEED);
  const pick = (n) => Math.floor(rnd() * n);
  const shuffled = (n) => {
    const a = Array.from({ length: n }, (_, i) => i);
    for (let i = n - 1; i > 0; i--) {
      const j = pick(i + 1);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  };
  const clients = [];
  for (let s = 0; s < STREAMS; s++) {
    for (let q = 0; q < PER_STREAM; q++) clients.push({ stream: s, kind: q % 2 === 0 ? "table" : "watch", j: q % 2 === 0 ? pick(TABLES) : pick(GROUPS) });
  }
  const perStream = (s) => Math.floor(ROWS / STREAMS) + (s < ROWS % STREAMS ? 1 : 0);
  const halfRows = (s, n) => {
    const t = shuffled(TABLES);
    const g = shuffled(GROUPS);
    const rows = [];
    for (let i = 0; i < n; i++) rows.push(i % 2 === 0 ? { stream: s, kind: "table", j: t[(i >> 1) % TABLES] } : { stream: s, kind: "watch", j: g[(i >> 1) % GROUPS] });
    return rows;
  };
  const pre = [];
  const halves = [[], []];
  const byStream = Array.from({ length: STREAMS }, (_, s) => {
    const n = perStream(s);
    return [halfRows(s, n >> 1), halfRows(s, n - (n >> 1))];
  });
  for (let s = 0; s < STREAMS; s++) for (let i = 0; i < PRE_ROWS; i++) pre.push({ stream: s, kind: "table", j: pick(TABLES) });
  // Interleaved over the streams.
  for (const h of [0, 1]) {
    const longest = Math.max(...byStream.map((b) => b[h].length));
    for (let i = 0; i < longest; i++) for (let s = 0; s < STREAMS; s++) if (i < byStream[s][h].length) halves[h].push(byStream[s][h][i]);
  }
  return { clients, pre, first: halves[0], second: halves[1] };
}

const streamName = (s) => `rs${s}`;
const tableEntity = (j) => `public.t${j}`;

// --- One side x scenario ---
async function runScenario(side, scenario, plan, copies) {
  const dataDir = mkdtempSync(join(tmpdir(), "dt-restart-data-"));
  const net = makeHttp();
  const state = { gen: 0, base: null, down: false, up: null, upResolve: null, stopping: false };
  let srv = null;
  const call = async (method, path, body) => {
    const r = await net.request(state.base, method, path, body);
    if (r.status < 200 || r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${r.text.slice(0, 300)}`);
    return r;
  };
  // What a cursor covers: every answer that carries a cursor says, with its
  // bucketMaxSourceOffsetSeq, a source offset its cursor covers at least (a touched answer's is
  // the touching bucket's, a timeout's or meta's the last flushed one's; our close answers say
  // -1). Within an epoch coverage only grows with the generation, so a cursor covers at least
  // the highest offset any answer at or below its generation reported.
  const points = new Map(); // `${stream}|${epoch}` -> [[generation, offset], ...]
  const note = (s, cursor, offset) => {
    if (typeof cursor !== "string" || offset === undefined || offset === null) return;
    const i = cursor.lastIndexOf(":");
    const k = `${s}|${cursor.slice(0, i)}`;
    if (!points.has(k)) points.set(k, []);
    points.get(k).push([Number(cursor.slice(i + 1)), BigInt(offset)]);
  };
  let coverage = null;
  const covered = (s, cursor) => {
    if (!coverage) {
      coverage = new Map();
      for (const [k, list] of points) {
        list.sort((a, b) => a[0] - b[0]);
        let best = -1n;
        coverage.set(k, list.map(([g, o]) => [g, (best = o > best ? o : best)]));
      }
    }
    const i = cursor.lastIndexOf(":");
    const list = coverage.get(`${s}|${cursor.slice(0, i)}`) ?? [];
    const g = Number(cursor.slice(i + 1));
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid][0] <= g) lo = mid + 1;
      else hi = mid;
    }
    return lo === 0 ? -1n : list[lo - 1][1];
  };
  const metaOf = (s, query = "") =>
    call("GET", `/v1/stream/${streamName(s)}/touch/meta${query}`).then((r) => {
      note(s, r.body?.cursor, r.body?.bucketMaxSourceOffsetSeq);
      return r.body;
    });
  const metaAll = () => Promise.all(Array.from({ length: STREAMS }, (_, s) => metaOf(s)));
  const settleAll = () => Promise.all(Array.from({ length: STREAMS }, (_, s) => metaOf(s, "?settle=flush&timeoutMs=4000")));

  // Every POST of a row is an attempt with its own id (in the row), sent at a known time.
  const attempts = [];
  const rowBody = (row) => {
    const a = attempts.length;
    attempts.push({ row, sentAt: 0 });
    const value = row.kind === "table" ? { id: a, a } : { id: a, a, group: `g${row.j}` };
    return { a, record: { type: row.kind === "table" ? tableEntity(row.j) : "public.items", key: String(a), value, headers: { operation: "insert" } } };
  };
  /** Appends `rows` with APPENDERS concurrent appenders; returns the rows not acknowledged.
   * `onAck(count)` may stop it early (return true). */
  async function appendRows(rows, onAck) {
    let next = 0;
    let acked = 0;
    const failed = new Set();
    let halted = false;
    const worker = async () => {
      while (!halted && next < rows.length) {
        const i = next++;
        const { a, record } = rowBody(rows[i]);
        attempts[a].sentAt = now();
        try {
          const r = await net.request(state.base, "POST", `/v1/stream/${streamName(rows[i].stream)}`, [record]);
          if (r.status !== 200 && r.status !== 204) throw new Error(`append: ${r.status} ${r.text.slice(0, 200)}`);
          acked++;
          if (onAck && onAck(acked)) halted = true;
        } catch (e) {
          failed.add(i);
          if (!state.down) throw e;
          halted = true;
        }
      }
    };
    await Promise.all(Array.from({ length: APPENDERS }, worker));
    const rest = [];
    for (let i = 0; i < rows.length; i++) if (failed.has(i) || i >= next) rest.push(rows[i]);
    return { acked, rest };
  }

  try {
    srv = await startServer(side, dataDir, copies);
    state.base = srv.base;
    const firstStartupMs = srv.startupMs;

    // Streams, profiles, one template each, a few rows, a settled cursor.
    const streams = [];
    for (let s = 0; s < STREAMS; s++) {
      const name = streamName(s);
      await call("PUT", `/v1/stream/${name}`);
      await call("POST", `/v1/stream/${name}/_profile`, { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } });
      const act = await call("POST", `/v1/stream/${name}/touch/templates/activate`, { templates: [{ entity: "public.items", fields: [{ name: "group", encoding: "string" }] }] });
      const templateId = act.body?.activated?.[0]?.templateId;
      if (!templateId) throw new Error(`${name}: no template activated: ${act.text}`);
      streams.push({ name, templateId, clients: 0 });
    }
    await appendRows(plan.pre);
    await settleAll();
    await sleep(150);
    const metas0 = await settleAll();
    const c0At = now();
    for (let s = 0; s < STREAMS; s++) Object.assign(streams[s], { c0: metas0[s].cursor, epoch0: metas0[s].epoch });

    const clients = plan.clients.map((p, i) => {
      const st = streams[p.stream];
      st.clients++;
      const key = p.kind === "table" ? K.tableKey(tableEntity(p.j)) : K.watchKey(st.templateId, [`g${p.j}`]);
      return {
        i,
        ...p,
        key,
        truthKey: `${p.stream}|${p.kind}|${p.j}`,
        cursor: st.c0,
        recvAt: c0At,
        pre: { touched: 0, stale: 0, timeout: 0 },
        cut: 0,
        errors: 0,
        resume: null,
        post: { touched: 0, stale: 0, timeout: 0 },
        resumeDone: false,
      };
    });
    let resumeReplies = 0;
    let onResumeReply = null;
    const statusCounts = {};
    const waitBody = (c, timeoutMs) =>
      c.kind === "table"
        ? { cursor: c.cursor, keys: [c.key], interestMode: "coarse", timeoutMs }
        : { cursor: c.cursor, keys: [c.key], templateIdsUsed: [streams[c.stream].templateId], timeoutMs };
    const loop = async (c) => {
      for (;;) {
        if (state.stopping) return;
        if (state.down) {
          await state.up;
          continue;
        }
        const gen = state.gen;
        const isResume = gen === 1 && c.resume === null;
        if (isResume) c.resume = { cursor: c.cursor, recvAt: c.recvAt, sentAt: now(), outcome: null };
        const timeoutMs = gen === 0 ? side.waitTimeout : isResume ? RESUME_TIMEOUT : side.waitTimeout;
        let r;
        try {
          r = await net.request(state.base, "POST", `/v1/stream/${streams[c.stream].name}/touch/wait`, waitBody(c, timeoutMs));
        } catch {
          if (state.stopping) return;
          if (isResume) c.resume = null;
          if (state.down || gen !== state.gen) c.cut++;
          else {
            c.errors++;
            await sleep(50);
          }
          continue;
        }
        if (r.status !== 200 || !r.body || typeof r.body !== "object") {
          statusCounts[r.status] = (statusCounts[r.status] ?? 0) + 1;
          if (isResume) c.resume = null;
          if (!state.down && gen === state.gen) await sleep(r.status === 408 ? 0 : 50);
          continue;
        }
        const b = r.body;
        const outcome = b.stale === true ? "stale" : b.touched === true ? "touched" : "timeout";
        if (gen === 0) c.pre[outcome]++;
        else c.post[outcome]++;
        if (typeof b.cursor === "string") {
          note(c.stream, b.cursor, b.bucketMaxSourceOffsetSeq);
          c.cursor = b.cursor;
          c.recvAt = now();
        }
        if (isResume) {
          c.resume.outcome = outcome;
          c.resume.kind = b.effectiveWaitKind;
          resumeReplies++;
          onResumeReply?.();
        }
      }
    };

    /** Resolves once every stream's meta has shown activeWaiters >= its clients (each stream
     * once, not necessarily at the same poll); the time of the last one, from `from`. */
    async function allParked(from, label) {
      const cpu0 = processCpuMs(srv.pid);
      const own0 = process.cpuUsage();
      const r = await allParkedPoll(from, label);
      const own = process.cpuUsage(own0);
      return r && { ...r, serverCpuMs: processCpuMs(srv.pid) - cpu0, driverCpuMs: Math.round((own.user + own.system) / 1000) };
    }
    async function allParkedPoll(from, label) {
      const reached = new Array(STREAMS).fill(null);
      const rtt = new Array(STREAMS).fill(0);
      const rttAt = new Array(STREAMS).fill(0);
      let maxSeen = new Array(STREAMS).fill(0);
      const until = now() + PARK_CAP_MS;
      while (reached.some((x) => x === null)) {
        if (now() > until) {
          process.stderr.write(`  ${label}: not every client parked after ${PARK_CAP_MS} ms (max activeWaiters per stream ${maxSeen.join(",")}, of ${PER_STREAM})\n`);
          return null;
        }
        await Promise.all(
          streams.map(async (st, s) => {
            if (reached[s] !== null) return;
            const sent = now();
            const m = (await net.request(state.base, "GET", `/v1/stream/${st.name}/touch/meta`)).body;
            const t = now();
            note(s, m?.cursor, m?.bucketMaxSourceOffsetSeq);
            rtt[s] = t - sent;
            const active = Number(m?.activeWaiters ?? 0);
            maxSeen[s] = Math.max(maxSeen[s], active);
            if (active >= st.clients) {
              reached[s] = t;
              rttAt[s] = rtt[s];
            }
          })
        );
        await sleep(20);
      }
      // The last stream's meta answer that showed it: the clients were parked when the server
      // read it, somewhere within that request's round trip (reported as pollRttMs).
      const last = reached.indexOf(Math.max(...reached));
      return { ms: reached[last] - from, pollRttMs: rttAt[last] };
    }

    // Park everyone.
    const tPark = now();
    const loops = clients.map((c) => loop(c));
    const parkMs = await allParked(tPark, "initial park");

    // The first half, then the restart.
    let stopMs = null;
    let restSource;
    let cpuPre = null;
    const flushesOf = (metas) => metas.reduce((a, m) => a + Number(m?.journalFlushesTotal ?? 0), 0);
    const goingDown = () => {
      state.down = true;
      state.up = new Promise((r) => (state.upResolve = r));
    };
    if (scenario === "clean") {
      const f0 = flushesOf(await metaAll());
      const c0 = processCpuMs(srv.pid);
      const t = now();
      const { rest } = await appendRows(plan.first);
      const metas = await settleAll();
      cpuPre = { ms: processCpuMs(srv.pid) - c0, flushes: flushesOf(metas) - f0, rows: plan.first.length, wallMs: now() - t };
      restSource = [...rest, ...plan.second];
      await sleep(200); // the wakes of the last flush are answered
      goingDown();
      const t0 = now();
      srv.child.kill("SIGTERM");
      const how = await srv.exited;
      stopMs = now() - t0;
      if (how.code !== 0) process.stderr.write(`  ${side.name}: SIGTERM exit ${JSON.stringify(how)}: ${srv.stderr().slice(-500)}\n`);
    } else {
      const all = [...plan.first, ...plan.second];
      let killed = false;
      const { rest } = await appendRows(all, (acked) => {
        if (!killed && acked >= plan.first.length) {
          killed = true;
          goingDown();
          srv.child.kill("SIGKILL");
          return true;
        }
        return false;
      });
      await srv.exited;
      restSource = rest;
    }
    const preWoken = clients.filter((c) => c.pre.touched > 0).length;
    // Let every wait cut by the restart fail (their sockets close with the process).
    await sleep(100);

    // The restart.
    srv = await startServer(side, dataDir, copies);
    const startupMs = srv.startupMs;
    const spawnedAt = srv.spawnedAt;
    state.base = srv.base;
    const metasAfter = await metaAll();
    let kept = null;
    if (side.kind === "ours") kept = (await call("GET", "/v1/stats")).body?.engine?.keptJournals ?? null;
    const epochsKept = metasAfter.filter((m, s) => m.epoch === streams[s].epoch0).length;
    // Fields our engine's meta has (the swapped hosts' compat meta and the reference's do not).
    const replayedFlushes = metasAfter.some((m) => "replayedFlushes" in m) ? metasAfter.reduce((a, m) => a + Number(m.replayedFlushes ?? 0), 0) : null;
    const journalKept = metasAfter.some((m) => "journalKept" in m) ? metasAfter.filter((m) => m.journalKept === true).length : null;

    // Append the rest and settle, then every client waits again from its last cursor
    // (--order resume-first: the clients come back at once, while the rest is appended).
    const allResumed = new Promise((r) => {
      onResumeReply = () => resumeReplies === CLIENTS && r();
    });
    let tRewait = null;
    const resumeClients = () => {
      tRewait = now();
      state.gen = 1;
      state.down = false;
      state.upResolve();
    };
    if (ORDER === "resume-first") resumeClients();
    const f0 = flushesOf(metasAfter);
    const cpu0 = processCpuMs(srv.pid);
    const tAppend = now();
    const restRows = restSource;
    const appending = appendRows(restRows).then(async ({ rest }) => {
      if (rest.length) throw new Error(`${rest.length} rows not acknowledged after the restart`);
      const appendMs = now() - tAppend;
      const settled = await settleAll();
      return { appendMs, cpu: { ms: processCpuMs(srv.pid) - cpu0, flushes: flushesOf(settled) - f0, rows: restRows.length, wallMs: now() - tAppend } };
    });
    if (ORDER === "append-first") {
      await appending;
      resumeClients();
    }
    const parked = await allParked(tRewait, "parked again");
    const { appendMs: appendRestMs, cpu: cpuPost } = await appending;
    // Every wait the rest touched has been woken (parked ones at the settle's flush).
    if (ORDER === "resume-first") await sleep(300);
    await Promise.race([allResumed, sleep(RESUME_TIMEOUT + 30_000)]);
    const resumedMs = now() - tRewait;
    const parkedAgain = parked?.ms ?? null;
    const restartToParkedMs = parked === null ? null : tRewait + parked.ms - spawnedAt;

    // The truth: the rows stored, each with the time its POST was sent.
    const writes = new Map();
    let storedRows = 0;
    for (const st of streams) {
      let offset = "-1";
      let seq = 0n;
      for (let page = 0; page < 1000; page++) {
        const r = await call("GET", `/v1/stream/${st.name}?offset=${encodeURIComponent(offset)}&limit=1000`);
        const rows = Array.isArray(r.body) ? r.body : [];
        for (const row of rows) {
          const a = row?.value?.a ?? row?.a;
          const at = attempts[a];
          if (at) {
            const k = `${at.row.stream}|${at.row.kind}|${at.row.j}`;
            if (!writes.has(k)) writes.set(k, []);
            writes.get(k).push({ seq, sentAt: at.sentAt });
          }
          seq++;
          storedRows++;
        }
        offset = r.headers["stream-next-offset"];
        if (rows.length === 0 || r.headers["stream-up-to-date"] === "true") break;
      }
    }

    state.stopping = true;
    srv.child.kill("SIGKILL");
    await srv.exited;
    await Promise.all(loops);

    // Per client, what it was answered after the restart (the resume wait and any after it).
    const counts = { stale: 0, touched: 0, timeout: 0, none: 0, truly: 0, maybe: 0, falseNegatives: 0, falseNegativesMaybe: 0, spurious: 0, refetchTable: 0, refetchWatch: 0, trulyTable: 0, trulyWatch: 0 };
    const examples = [];
    for (const c of clients) {
      const res = c.resume;
      const outcome = c.post.stale > 0 ? "stale" : c.post.touched > 0 ? "touched" : res?.outcome ? "timeout" : "none";
      counts[outcome]++;
      const L = res ? covered(c.stream, res.cursor) : null;
      const ws = res ? (writes.get(c.truthKey) ?? []).filter((w) => w.seq > L) : [];
      const truly = ws.some((w) => w.sentAt > res.recvAt);
      const maybe = !truly && ws.length > 0;
      if (truly) counts.truly++;
      if (maybe) counts.maybe++;
      if (truly) counts[c.kind === "table" ? "trulyTable" : "trulyWatch"]++;
      const refetch = outcome === "stale" || outcome === "touched";
      if (refetch) counts[c.kind === "table" ? "refetchTable" : "refetchWatch"]++;
      if (truly && !refetch) {
        counts.falseNegatives++;
        if (examples.length < 5) examples.push({ client: c.i, stream: c.stream, kind: c.kind, j: c.j, outcome, cursor: res?.cursor, covered: String(L), writes: ws.map((w) => String(w.seq)) });
      }
      if (maybe && !refetch) counts.falseNegativesMaybe++;
      if (refetch && !truly && !maybe) counts.spurious++;
    }
    const result = {
      clients: CLIENTS,
      stale: counts.stale,
      touched: counts.touched,
      refetch: counts.stale + counts.touched,
      trulyTouched: counts.truly,
      maybeTouched: counts.maybe,
      falseNegatives: counts.falseNegatives,
      falseNegativesMaybe: counts.falseNegativesMaybe,
      spurious: counts.spurious,
      timedOut: counts.timeout,
      noResume: counts.none,
      refetchTable: counts.refetchTable,
      trulyTable: counts.trulyTable,
      refetchWatch: counts.refetchWatch,
      trulyWatch: counts.trulyWatch,
      touchedReplies: clients.reduce((a, c) => a + c.post.touched, 0),
      resumeKinds: clients.reduce((o, c) => ((o[c.resume?.kind ?? "none"] = (o[c.resume?.kind ?? "none"] ?? 0) + 1), o), {}),
      wokenBeforeRestart: preWoken,
      cutByRestart: clients.filter((c) => c.cut > 0).length,
      waitErrors: clients.reduce((a, c) => a + c.errors, 0),
      waitStatuses: statusCounts,
      storedRows,
      rowsPlanned: plan.pre.length + plan.first.length + plan.second.length,
      rowsAppendedAfterRestart: restRows.length,
      firstStartupMs: round1(firstStartupMs),
      initialParkMs: round1(parkMs?.ms ?? null),
      initialParkPollRttMs: round1(parkMs?.pollRttMs ?? null),
      initialParkServerCpuMs: parkMs?.serverCpuMs ?? null,
      initialParkDriverCpuMs: parkMs?.driverCpuMs ?? null,
      stopMs: round1(stopMs),
      startupMs: round1(startupMs),
      appendRestMs: round1(appendRestMs),
      restartToParkedMs: round1(restartToParkedMs),
      rewaitToParkedMs: round1(parkedAgain),
      parkedPollRttMs: round1(parked?.pollRttMs ?? null),
      parkedServerCpuMs: parked?.serverCpuMs ?? null,
      parkedDriverCpuMs: parked?.driverCpuMs ?? null,
      allResumeRepliesMs: round1(resumedMs),
      epochsKept,
      journalKept,
      replayedFlushes,
      keptJournals: kept,
      restoreMs: kept?.restoreMs ?? null,
      cpuAfterRestart: { cpuMs: cpuPost.ms, flushes: cpuPost.flushes, rows: cpuPost.rows, wallMs: round1(cpuPost.wallMs) },
      cpuUsPerFlush: cpuPost.flushes > 0 ? round1((cpuPost.ms * 1000) / cpuPost.flushes) : null,
      cpuUsPerRow: round1((cpuPost.ms * 1000) / cpuPost.rows),
      cpuBeforeRestart: cpuPre && { cpuMs: cpuPre.ms, flushes: cpuPre.flushes, rows: cpuPre.rows, wallMs: round1(cpuPre.wallMs) },
      cpuUsPerFlushBefore: cpuPre && cpuPre.flushes > 0 ? round1((cpuPre.ms * 1000) / cpuPre.flushes) : null,
      falseNegativeExamples: examples,
    };
    if (counts.falseNegatives > 0) {
      process.stderr.write(`\n  !!! ${side.name}/${scenario}: ${counts.falseNegatives} FALSE NEGATIVES (truly touched, resume wait timed out): ${JSON.stringify(examples)}\n\n`);
    }
    return result;
  } finally {
    state.stopping = true;
    if (srv && srv.child.exitCode === null && srv.child.signalCode === null) {
      srv.child.kill("SIGKILL");
      await srv.exited;
    }
    state.upResolve?.();
    net.destroy();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// --- Main ---
function journalKeepFigure() {
  const path = process.env.JOURNAL_KEEP_OUT;
  if (!path) return null;
  try {
    const text = existsSync(path) ? readFileSync(path, "utf8") : path;
    const m = text.match(/per flush of (\d+) keys: ([\d.]+) µs with the log, ([\d.]+) µs without: \+([\d.-]+) µs; ([\d.]+) bytes per flush/);
    return m ? { keysPerFlush: Number(m[1]), usWithLog: Number(m[2]), usWithout: Number(m[3]), extraUsPerFlush: Number(m[4]), bytesPerFlush: Number(m[5]) } : { unparsed: text.slice(0, 300) };
  } catch (e) {
    return { error: String(e) };
  }
}

const needRef = SIDES.some((s) => s !== "ours" && s !== "ours-nokeep");
if (needRef && !(existsSync(BUN) && existsSync(join(REFERENCE, "src", "touch")))) throw new Error("the reference sides need Bun and @prisma/streams-server in node_modules (npm install)");
const copies = needRef ? copiesWithServe() : null;
const cleanup = () => {
  for (const c of children) c.kill("SIGKILL");
  if (copies) rmSync(copies.dir, { recursive: true, force: true });
};
process.on("SIGINT", () => (cleanup(), process.exit(130)));
process.on("SIGTERM", () => (cleanup(), process.exit(143)));

const plan = makePlan();
process.stderr.write(
  `restart bench: ${CLIENTS} clients on ${STREAMS} streams (${PER_STREAM} each: half table keys, half watch keys), ${plan.pre.length} rows before the cursor, ${plan.first.length} + ${plan.second.length} rows across the restart; ${ROUNDS} round(s); ${ORDER}; sides ${SIDES.join(", ")}; scenarios ${SCENARIOS.join(", ")}\n`
);
const results = {}; // `${side}/${scenario}` -> [round results]
const started = now();
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? SIDES : [...SIDES].reverse();
    for (const name of order) {
      for (const scenario of SCENARIOS) {
        const side = sideSpec(name, copies);
        const t = now();
        process.stderr.write(`round ${round + 1}: ${name} / ${scenario} ...`);
        const r = await runScenario(side, scenario, plan, copies);
        process.stderr.write(
          ` ${((now() - t) / 1000).toFixed(1)} s: stale ${r.stale}, touched ${r.touched}, truly ${r.trulyTouched} (+${r.maybeTouched} maybe), FN ${r.falseNegatives}, startup ${r.startupMs} ms, restart->parked ${r.restartToParkedMs} ms\n`
        );
        (results[`${name}/${scenario}`] ??= []).push(r);
      }
    }
  }
} finally {
  cleanup();
}

const NUMERIC = [
  "stale", "touched", "refetch", "trulyTouched", "maybeTouched", "falseNegatives", "falseNegativesMaybe", "spurious", "timedOut", "noResume", "touchedReplies",
  "refetchTable", "trulyTable", "refetchWatch", "trulyWatch", "wokenBeforeRestart", "cutByRestart", "waitErrors", "storedRows", "rowsAppendedAfterRestart",
  "firstStartupMs", "initialParkMs", "initialParkPollRttMs", "initialParkServerCpuMs", "initialParkDriverCpuMs", "stopMs", "startupMs", "appendRestMs", "restartToParkedMs", "rewaitToParkedMs", "parkedPollRttMs", "parkedServerCpuMs", "parkedDriverCpuMs", "allResumeRepliesMs",
  "epochsKept", "journalKept", "replayedFlushes", "restoreMs", "cpuUsPerFlush", "cpuUsPerRow", "cpuUsPerFlushBefore",
];
const summary = {};
const journalKeep = journalKeepFigure();
for (const [key, rounds] of Object.entries(results)) {
  const [side, scenario] = key.split("/");
  const line = { bench: "restart", date: new Date().toISOString(), side, scenario, clients: CLIENTS, streams: STREAMS, rows: ROWS, rounds: rounds.length, order: ORDER, resumeTimeoutMs: RESUME_TIMEOUT };
  for (const k of NUMERIC) line[k] = round1(median(rounds.map((r) => r[k])));
  // Counts that must hold in every round are summed over the rounds, not taken as a median.
  line.falseNegativesAllRounds = rounds.reduce((a, r) => a + r.falseNegatives, 0);
  const last = rounds[rounds.length - 1];
  Object.assign(line, { resumeKinds: last.resumeKinds, waitStatuses: last.waitStatuses, keptJournals: last.keptJournals, cpuAfterRestart: last.cpuAfterRestart, cpuBeforeRestart: last.cpuBeforeRestart });
  if (rounds.length > 1) line.perRound = rounds.map((r) => ({ stale: r.stale, touched: r.touched, trulyTouched: r.trulyTouched, falseNegatives: r.falseNegatives, startupMs: r.startupMs, restartToParkedMs: r.restartToParkedMs, cpuUsPerFlush: r.cpuUsPerFlush }));
  if (last.falseNegativeExamples.length) line.falseNegativeExamples = last.falseNegativeExamples;
  summary[key] = line;
}
// Extra CPU per flush: keep minus nokeep, per scenario.
for (const scenario of SCENARIOS) {
  for (const [keep, off] of [["ours", "ours-nokeep"], ["swapped", "swapped-nokeep"]]) {
    const a = results[`${keep}/${scenario}`];
    const b = results[`${off}/${scenario}`];
    if (!a || !b) continue;
    const n = Math.min(a.length, b.length);
    const per = Array.from({ length: n }, (_, i) => (a[i].cpuUsPerFlush ?? NaN) - (b[i].cpuUsPerFlush ?? NaN));
    summary[`${keep}/${scenario}`].extraCpuUsPerFlush = round1(median(per));
    const before = Array.from({ length: n }, (_, i) => (a[i].cpuUsPerFlushBefore ?? NaN) - (b[i].cpuUsPerFlushBefore ?? NaN));
    summary[`${keep}/${scenario}`].extraCpuUsPerFlushBefore = round1(median(before));
  }
}
for (const line of Object.values(summary)) {
  if (journalKeep) line.journalKeepExample = journalKeep;
  console.log(JSON.stringify(line));
}

// The table.
const cols = [
  ["side/scenario", (l) => `${l.side}/${l.scenario}`],
  ["stale", (l) => l.stale],
  ["touched", (l) => l.touched],
  ["refetch", (l) => l.refetch],
  ["truly", (l) => l.trulyTouched],
  ["maybe", (l) => l.maybeTouched],
  ["FN", (l) => l.falseNegativesAllRounds],
  ["spurious", (l) => l.spurious],
  ["tbl r/t", (l) => `${l.refetchTable}/${l.trulyTable}`],
  ["watch r/t", (l) => `${l.refetchWatch}/${l.trulyWatch}`],
  ["startup ms", (l) => l.startupMs],
  ["stop ms", (l) => l.stopMs ?? "-"],
  ["restart->parked ms", (l) => l.restartToParkedMs],
  ["rewait->parked ms", (l) => l.rewaitToParkedMs],
  ["epochs kept", (l) => `${l.epochsKept}/${STREAMS}`],
  ["restore ms", (l) => l.restoreMs ?? "-"],
  ["replayed", (l) => l.replayedFlushes ?? "-"],
  ["cpu us/flush before|after", (l) => `${l.cpuUsPerFlushBefore ?? "-"}|${l.cpuUsPerFlush ?? "-"}`],
  ["extra us/flush before|after", (l) => `${l.extraCpuUsPerFlushBefore ?? "-"}|${l.extraCpuUsPerFlush ?? "-"}`],
];
const rows = Object.values(summary).map((l) => cols.map(([, f]) => String(f(l) ?? "-")));
const widths = cols.map(([h], i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const fmt = (cells) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
process.stderr.write(`\n${CLIENTS} clients, ${STREAMS} streams, ${ROWS} rows across the restart, ${ORDER}, ${ROUNDS} round(s) (medians; FN summed over rounds), ${((now() - started) / 1000).toFixed(0)} s\n`);
process.stderr.write(fmt(cols.map(([h]) => h)) + "\n" + rows.map(fmt).join("\n") + "\n");
if (journalKeep) process.stderr.write(`journal_keep example: ${JSON.stringify(journalKeep)}\n`);
const fnTotal = Object.values(summary).reduce((a, l) => a + l.falseNegativesAllRounds, 0);
if (fnTotal > 0) process.stderr.write(`\n!!! ${fnTotal} FALSE NEGATIVES in total: see falseNegativeExamples in the JSON lines\n`);
