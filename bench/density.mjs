// Parked-wait density (issue 34, item 4): what one parked HTTP long-poll wait costs a server
// process, and how fast a mass wake is answered.
//
//   node bench/density.mjs [--n 10000,max] [--rounds 1] [--targets ours,ours-bun,ours-native,ours-native-bun,reference,floor-node,floor-bun]
//        [--ours-timeout 30000] [--idle-seconds 5] [--emfile 1|0|only] [--emfile-targets ours] [--emfile-limit 1000]
//        [--emfile-conns 1200]
//
// Targets, each a fresh child server process per round and N (127.0.0.1, port 0, a temp dir):
//   ours        node --expose-gc bin/durable-touch.mjs serve (apps/server/ on node:http)
//   ours-bun    the same under node_modules/.bin/bun (apps/server/ on Bun.serve)
//   ours-native, ours-native-bun   the same two with --native-waits (waits answered by the
//               native module's listener, the rest passed to apps/server/ on loopback)
//   reference   bun node_modules/@prisma/streams-server/src/server.ts --object-store local --no-auth
//               (unswapped; DS_ROOT = the temp dir, PORT=0)
//   floor-node  this file --role floor-node: bare node:http, reads each POST's body, keeps its `res`
//               in an array, answers them (res.end(small JSON)) on POST /_wake
//   floor-bun   this file --role floor-bun under node_modules/.bin/bun: Bun.serve, a Promise per
//               request, resolved on POST /_wake
// Every server is started with bench/density-probe.mjs preloaded: "mem" on its stdin → a GC and
// process.memoryUsage() (the JS heap figure). RSS is /proc/<pid>/status VmRSS read right after.
//
// Clients: one client process (this file --role client, forked with IPC) holding one raw `net`
// socket per wait (hand-written HTTP/1.1, keep-alive) spread over source addresses 127.0.0.2-9,
// plus one control socket (setup is done over plain fetch). Every wait is
//   POST /v1/stream/d/touch/wait {cursor, keys: [tableKey("public.common")], interestMode: "coarse", timeoutMs}
// and for 1% of them keys also holds tableKey("public.rare"). An answer that is not a wake
// (timeout, 408) is re-sent at once with the answer's cursor: the reference answers any request
// older than 5 s with 408, so its waits use timeoutMs 4000; ours use --ours-timeout (default
// 30000: at 4000 the re-waits alone, 2,500/s at N = 10,000, keep a core busy on this kind of
// machine and measure request throughput rather than parked waits; `--ours-timeout 4000` gives
// the like-for-like figure). The floors never time out; they get the same request.
//
// Per target x N:
//  1. idle: heap and RSS once the server listens and (ours, reference) stream "d" exists with the
//     state-protocol touch profile;
//  2. park N waits (sockets opened 250 at a time; opening stops after 60 s, for a saturated
//     server); parked = the server's own count reaches them (meta activeWaiters; floors:
//     GET /_count); with re-waits in flight the count may sit just below: after 15 s the
//     highest count seen is taken;
//  3. heap and RSS again: per wait = (parked - idle) / parked;
//  4. idle CPU: utime + stime of the server (/proc/<pid>/stat, all threads) over --idle-seconds
//     while parked (re-waits included), as % of one core;
//  5. wake 1%: the client appends one public.rare row (floors: POST /_wake {"which":"rare"}) on
//     its control socket; latency = from just before that write to each of the 1% sockets'
//     touched answer as read by the client: p50 / p99 / last; the woken ones park again;
//  6. wake 100%: one public.common row (floors: /_wake {"which":"all"}): the same over all N.
// N = "max" is the most that fits the descriptor limit of a process (ulimit -n, minus 1,000).
// At the end (--emfile 1): ours with `ulimit -n --emfile-limit` and --emfile-conns parked waits
// (timeoutMs 30000): does it survive, what does it log and how often, what the clients see, and
// whether it serves again once 300 of them hang up.
//
// Prints one JSON line per target x N (medians over rounds) on stdout and a table on stderr.
import { spawn, fork } from "node:child_process";
import net from "node:net";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { sleep, median, percentile, descriptorLimit, processCpuMs } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const SELF = fileURLToPath(import.meta.url);
const PROBE = join(here, "density-probe.mjs");
const BUN = join(root, "node_modules", ".bin", "bun");
const REFERENCE_SERVER = join(root, "node_modules", "@prisma", "streams-server", "src", "server.ts");
const STREAM = "d";
const TARGETS = ["ours", "ours-bun", "ours-native", "ours-native-bun", "reference", "floor-node", "floor-bun"];
const REF_TIMEOUT_MS = 4000;
const PARK_CAP_MS = 60_000; // opening sockets stops after this (a saturated server): N is what was opened

// --- Small shared helpers ---
function parseArgs(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith("--")) continue;
    const [k, v] = argv[i].slice(2).split("=", 2);
    opts[k] = v ?? (argv[i + 1] !== undefined && !argv[i + 1].startsWith("--") ? argv[++i] : "1");
  }
  return opts;
}
const now = () => performance.now();
const progress = (m) => process.stderr.write(`[density ${new Date().toISOString().slice(11, 19)}] ${m}\n`);
const round = (x, d = 1) => (typeof x === "number" && Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : x ?? null);
function latencySummary(times) {
  const s = Float64Array.from(times).sort();
  return { n: s.length, p50: round(percentile(s, 50), 2), p99: round(percentile(s, 99), 2), last: round(s.length ? s[s.length - 1] : null, 2) };
}
/** The descriptor limit, an unlimited one counted as 2^20. */
const fdLimit = () => Math.min(descriptorLimit(), 1 << 20);
function procRssKb(pid) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : null;
}
const touchKeys = () => createRequire(import.meta.url)("../index.js").keys;

// --- Raw HTTP/1.1 client connection (used by the client role) ---
/** Decodes a whole chunked body at the start of `s`: { body, rest } or null if incomplete. */
function decodeChunked(s) {
  let body = "";
  let i = 0;
  for (;;) {
    const nl = s.indexOf("\r\n", i);
    if (nl < 0) return null;
    const size = parseInt(s.slice(i, nl), 16);
    if (size === 0) {
      const end = s.indexOf("\r\n\r\n", nl); // no trailers expected
      return end < 0 ? null : { body, rest: s.slice(end + 4) };
    }
    if (s.length < nl + 2 + size + 2) return null;
    body += s.slice(nl + 2, nl + 2 + size);
    i = nl + 2 + size + 2;
  }
}

class RawConn {
  constructor({ port, localAddress, onResponse, onClose }) {
    this.port = port;
    this.localAddress = localAddress;
    this.onResponse = onResponse;
    this.onClose = onClose;
    this.buf = "";
    this.need = -1; // -1: reading a head; -2: chunked body; n: body bytes
    this.status = 0;
    this.open = false;
  }
  connect() {
    return new Promise((resolve) => {
      const sock = net.connect({ host: "127.0.0.1", port: this.port, localAddress: this.localAddress });
      this.sock = sock;
      sock.setNoDelay(true);
      sock.setEncoding("latin1");
      sock.once("connect", () => {
        this.open = true;
        resolve(null);
      });
      sock.on("data", (d) => this.feed(d, now()));
      sock.on("error", (e) => {
        this.error = e.code ?? String(e);
        if (!this.open) resolve(e);
      });
      sock.on("close", () => {
        const was = this.open;
        this.open = false;
        if (!was) resolve(new Error(this.error ?? "closed before connect"));
        this.onClose?.(this, was);
      });
    });
  }
  send(method, path, body = "") {
    this.sock.write(`${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${this.port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  }
  feed(d, t) {
    this.buf += d;
    for (;;) {
      if (this.need === -1) {
        const h = this.buf.indexOf("\r\n\r\n");
        if (h < 0) return;
        const head = this.buf.slice(0, h);
        this.buf = this.buf.slice(h + 4);
        this.status = Number(head.slice(9, 12));
        const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        this.need = cl ? Number(cl[1]) : /\r\ntransfer-encoding:\s*chunked/i.test(head) ? -2 : 0;
      }
      let body;
      if (this.need === -2) {
        const c = decodeChunked(this.buf);
        if (!c) return;
        body = c.body;
        this.buf = c.rest;
      } else {
        if (this.buf.length < this.need) return;
        body = this.buf.slice(0, this.need);
        this.buf = this.buf.slice(this.need);
      }
      this.need = -1;
      this.onResponse(this, this.status, body, t);
    }
  }
}

// --- Role: client (forked; all waits, the control socket, the triggers) ---
async function clientRole() {
  let cfg = null;
  let conns = [];
  let ctl = null;
  let ctlQueue = [];
  let win = null; // the wake being measured
  const counts = { timeouts: 0, statuses: {}, spurious: 0, closedByServer: 0, closedHow: {}, closedBeforeAnswer: 0, connectErrors: {}, reconnects: 0, answered: 0 };
  const sendWait = (c) => {
    if (!c.raw.open) return;
    c.raw.send("POST", `/v1/stream/${STREAM}/touch/wait`, JSON.stringify({ cursor: c.cursor, keys: c.keys, interestMode: "coarse", timeoutMs: cfg.timeoutMs }));
    c.inFlight = true;
  };
  const onResponse = (raw, status, body, t) => {
    const c = raw.owner;
    c.inFlight = false;
    counts.answered++;
    let j = null;
    try {
      j = JSON.parse(body);
    } catch {}
    if (typeof j?.cursor === "string") c.cursor = j.cursor;
    const woke = status === 200 && (j?.touched === true || j?.woken === true);
    if (woke) {
      if (win && win.expects(c) && !c.counted) {
        c.counted = true;
        c.held = true; // not re-sent until the measurement ends
        win.times.push(t - win.t0);
        if (win.times.length === win.expected) win.done();
        return;
      }
      counts.spurious++;
    } else if (status === 200) counts.timeouts++;
    else counts.statuses[status] = (counts.statuses[status] ?? 0) + 1;
    if (status === 200 || status === 408) sendWait(c);
    else setTimeout(() => sendWait(c), 100);
  };
  const onClose = (raw, wasOpen) => {
    const c = raw.owner;
    if (!wasOpen || cfg.stopping) return;
    counts.closedByServer++;
    const how = raw.error ?? "FIN";
    counts.closedHow[how] = (counts.closedHow[how] ?? 0) + 1;
    if (c.inFlight) counts.closedBeforeAnswer++;
    c.inFlight = false;
    if (cfg.reconnect) {
      counts.reconnects++;
      setTimeout(() => open(c).then(() => !c.held && sendWait(c)), 50);
    }
  };
  const open = async (c) => {
    c.raw = new RawConn({ port: cfg.port, localAddress: `127.0.0.${2 + (c.i % 8)}`, onResponse, onClose });
    c.raw.owner = c;
    const err = await c.raw.connect();
    if (err) {
      const code = err.code ?? err.message;
      counts.connectErrors[code] = (counts.connectErrors[code] ?? 0) + 1;
    }
    return err;
  };
  /** One request on the control socket; resolves { status, body, t0, t }. */
  const call = async (method, path, body) => {
    if (!ctl.open) await openCtl(); // the server closed it: a new one (answers owed on the old one are lost)
    return new Promise((resolve) => {
      const t0 = now();
      ctlQueue.push((status, text, t) => resolve({ status, body: text, t0, t }));
      ctl.send(method, path, body === undefined ? "" : typeof body === "string" ? body : JSON.stringify(body));
    });
  };
  const openCtl = async () => {
    for (const r of ctlQueue.splice(0)) r(0, "", now());
    ctl = new RawConn({ port: cfg.port, localAddress: "127.0.0.1", onResponse: (_r, s, b, t) => ctlQueue.shift()?.(s, b, t) });
    ctl.onClose = () => {
      for (const r of ctlQueue.splice(0)) r(0, "", now());
    };
    return ctl.connect();
  };

  const handlers = {
    async park(m) {
      cfg = { ...m, stopping: false };
      const ctlErr = await openCtl();
      if (ctlErr) return { error: `control socket: ${ctlErr.message ?? ctlErr}` };
      conns = Array.from({ length: m.n }, (_, i) => ({ i, cursor: m.cursor, keys: i % 100 === 0 ? [m.commonKey, m.rareKey] : [m.commonKey], rare: i % 100 === 0, held: false, counted: false, inFlight: false }));
      const t0 = now();
      const BATCH = 250;
      let failed = 0;
      let i = 0;
      for (; i < conns.length && now() - t0 < m.capMs; i += BATCH) {
        const errs = await Promise.all(conns.slice(i, i + BATCH).map(async (c) => {
          const err = await open(c);
          if (!err) sendWait(c);
          return err;
        }));
        failed += errs.filter(Boolean).length;
      }
      const opened = Math.min(i, conns.length);
      conns = conns.slice(0, opened); // past the cap: the rest are never opened
      return { openedMs: round(now() - t0), opened, failed, counts };
    },
    async get(m) {
      const r = await Promise.race([call("GET", m.path), sleep(m.timeoutMs ?? 10_000).then(() => ({ status: 0, body: "" }))]);
      return { status: r.status, body: r.body };
    },
    /** Trigger a wake and time the expected answers. */
    async wake(m) {
      for (const c of conns) c.counted = false;
      const expects = m.which === "rare" ? (c) => c.rare : () => true;
      const expected = conns.filter((c) => expects(c) && c.raw.open).length;
      const finished = new Promise((resolve) => {
        win = { expects, expected, times: [], t0: 0, done: resolve };
      });
      win.t0 = now(); // just before the trigger's write (call writes synchronously)
      const trigger = cfg.kind === "floor"
        ? call("POST", "/_wake", { which: m.which })
        : call("POST", `/v1/stream/${STREAM}`, [{ type: m.which === "rare" ? "public.rare" : "public.common", key: `k${m.which}`, value: { id: `k${m.which}` }, headers: { operation: "insert" } }]);
      const ack = await Promise.race([trigger, sleep(m.deadlineMs).then(() => ({ status: 0, t: NaN }))]);
      const timedOut = await Promise.race([finished.then(() => false), sleep(m.deadlineMs).then(() => true)]);
      const w = win;
      win = null;
      const summary = { ...latencySummary(w.times), expected, missing: expected - w.times.length, timedOut, triggerStatus: ack.status, triggerAckMs: round(ack.t - w.t0, 2) };
      if (m.repark) for (const c of conns) if (c.held) (c.held = false), sendWait(c);
      return summary;
    },
    /** Hang up the first `count` wait sockets (the EMFILE check). */
    async hangUp(m) {
      cfg.stopping = true;
      for (const c of conns.slice(0, m.count)) c.raw.sock.destroy();
      await sleep(200);
      cfg.stopping = false;
      return {};
    },
    /** A fresh connection's GET (does the server accept new connections?). */
    async freshGet(m) {
      const r = new RawConn({ port: cfg.port, localAddress: "127.0.0.1", onResponse: (_r, s, b) => r.done?.({ status: s, body: b }) });
      const err = await r.connect();
      if (err) return { error: err.code ?? err.message };
      const got = new Promise((res) => (r.done = res));
      r.send("GET", m.path);
      const closed = new Promise((res) => r.sock.once("close", () => res({ closed: true })));
      const out = await Promise.race([got, closed, sleep(m.timeoutMs ?? 3000).then(() => ({ timedOut: true }))]);
      r.sock.destroy();
      return out;
    },
    async state() {
      const open = conns.filter((c) => c.raw?.open).length;
      const waiting = conns.filter((c) => c.raw?.open && c.inFlight).length;
      return { open, waiting, counts };
    },
    async exit() {
      cfg && (cfg.stopping = true);
      for (const c of conns) c.raw?.sock?.destroy();
      ctl?.sock?.destroy();
      setTimeout(() => process.exit(0), 50);
      return {};
    },
  };
  process.on("disconnect", () => process.exit(0)); // the driver is gone
  process.on("message", async (m) => {
    const result = await handlers[m.cmd](m);
    process.send({ ...result, id: m.id });
  });
}

/** The client process, with a promise-returning `cmd(name, args)`. */
function startClient() {
  const child = fork(SELF, ["--role", "client"], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let seq = 0;
  const waiting = new Map();
  child.on("message", ({ id, ...m }) => {
    waiting.get(id)?.(m);
    waiting.delete(id);
  });
  const cmd = (name, args = {}) =>
    new Promise((resolve) => {
      const id = ++seq;
      waiting.set(id, resolve);
      child.send({ cmd: name, id, ...args });
    });
  return { child, cmd, exit: () => cmd("exit").catch(() => {}) };
}

// --- Roles: the floors ---
const FLOOR_REPLY = '{"woken":true}';

function floorNodeRole() {
  return import("node:http").then(({ default: http }) => {
    const rareKey = process.env.DENSITY_RARE_KEY;
    let parked = []; // { res, rare }
    const server = http.createServer((req, res) => {
      if (req.method === "GET" && req.url === "/_count") return res.end(JSON.stringify({ parked: parked.length }));
      let body = "";
      req.setEncoding("latin1");
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        if (req.url !== "/_wake") return void parked.push({ res, rare: body.includes(rareKey) });
        const all = body.includes('"all"');
        const keep = [];
        let woken = 0;
        for (const p of parked) {
          if (all || p.rare) {
            p.res.end(FLOOR_REPLY);
            woken++;
          } else keep.push(p);
        }
        parked = keep;
        res.end(JSON.stringify({ woken }));
      });
    });
    server.keepAliveTimeout = 600_000;
    server.headersTimeout = 600_000;
    server.requestTimeout = 0;
    server.listen(0, "127.0.0.1", () => console.log(`floor-node listening on 127.0.0.1:${server.address().port}`));
  });
}

function floorBunRole() {
  const rareKey = process.env.DENSITY_RARE_KEY;
  let parked = []; // { resolve, rare }
  const server = globalThis.Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const path = req.url.slice(req.url.indexOf("/", 8));
      if (req.method === "GET" && path === "/_count") return new Response(JSON.stringify({ parked: parked.length }));
      const body = await req.text();
      if (path !== "/_wake") return new Promise((resolve) => parked.push({ resolve, rare: body.includes(rareKey) }));
      const all = body.includes('"all"');
      const keep = [];
      let woken = 0;
      for (const p of parked) {
        if (all || p.rare) {
          p.resolve(new Response(FLOOR_REPLY, { headers: { "content-type": "application/json" } }));
          woken++;
        } else keep.push(p);
      }
      parked = keep;
      return new Response(JSON.stringify({ woken }));
    },
  });
  console.log(`floor-bun listening on 127.0.0.1:${server.port}`);
}

// --- Servers under measurement ---
const servers = new Set(); // killed if the driver is interrupted
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    for (const c of servers) c.kill("SIGKILL");
    process.exit(130);
  });
}
/** Spawns a target; `fdLimit` (optional) runs it under `bash -c 'ulimit -n L; exec …'`. */
function startTarget(target, { dataDir, rareKey, fdLimit: limit } = {}) {
  let cmd;
  let args;
  const env = { ...process.env, DENSITY_RARE_KEY: rareKey };
  switch (target) {
    case "ours":
      [cmd, args] = [process.execPath, ["--expose-gc", "--import", PROBE, join(root, "bin", "durable-touch.mjs"), "serve", "--port", "0", "--data", dataDir]];
      break;
    case "ours-bun":
      [cmd, args] = [BUN, ["--no-install", "--preload", PROBE, join(root, "bin", "durable-touch.mjs"), "serve", "--port", "0", "--data", dataDir]];
      break;
    case "ours-native":
      [cmd, args] = [process.execPath, ["--expose-gc", "--import", PROBE, join(root, "bin", "durable-touch.mjs"), "serve", "--port", "0", "--data", dataDir, "--native-waits"]];
      break;
    case "ours-native-bun":
      [cmd, args] = [BUN, ["--no-install", "--preload", PROBE, join(root, "bin", "durable-touch.mjs"), "serve", "--port", "0", "--data", dataDir, "--native-waits"]];
      break;
    case "reference":
      [cmd, args] = [BUN, ["--no-install", "--preload", PROBE, REFERENCE_SERVER, "--object-store", "local", "--no-auth"]];
      Object.assign(env, { DS_ROOT: dataDir, PORT: "0" });
      break;
    case "floor-node":
      [cmd, args] = [process.execPath, ["--expose-gc", "--import", PROBE, SELF, "--role", "floor-node"]];
      break;
    case "floor-bun":
      [cmd, args] = [BUN, ["--no-install", "--preload", PROBE, SELF, "--role", "floor-bun"]];
      break;
    default:
      throw new Error(`unknown target ${target}; known: ${TARGETS.join(", ")}`);
  }
  if (limit) [cmd, args] = ["bash", ["-c", `ulimit -n ${limit} && exec "$@"`, "bash", cmd, ...args]];
  const child = spawn(cmd, args, { cwd: dataDir, env, stdio: ["pipe", "pipe", "pipe"] });
  servers.add(child);
  child.on("exit", () => servers.delete(child));
  const srv = { target, child, pid: child.pid, stdout: [], stderr: [], memWaiters: [], exit: null };
  const lines = (stream, into, onLine) => {
    let rest = "";
    stream.setEncoding("utf8");
    stream.on("data", (d) => {
      rest += d;
      let nl;
      while ((nl = rest.indexOf("\n")) >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        onLine?.(line);
        if (!line.startsWith("DENSITY-MEM ")) into.push({ t: now(), line });
      }
    });
  };
  srv.exited = new Promise((r) => child.on("exit", (code, signal) => r((srv.exit = { code, signal }))));
  lines(child.stderr, srv.stderr);
  srv.ready = new Promise((resolve, reject) => {
    lines(child.stdout, srv.stdout, (line) => {
      if (line.startsWith("DENSITY-MEM ")) return srv.memWaiters.shift()?.(JSON.parse(line.slice(12)));
      const m = line.match(/listening on (?:http:\/\/)?127\.0\.0\.1:(\d+)/);
      if (m && !srv.port) resolve((srv.port = Number(m[1])));
    });
    srv.exited.then((how) => reject(new Error(`${target} exited before listening (${JSON.stringify(how)}): ${srv.stderr.map((l) => l.line).join("\n").slice(-2000)}`)));
  });
  srv.base = () => `http://127.0.0.1:${srv.port}`;
  return srv;
}

/** GC + heap of the server (the probe), then its RSS. */
async function memory(srv) {
  const mem = await Promise.race([new Promise((r) => (srv.memWaiters.push(r), srv.child.stdin.write("mem\n"))), sleep(15_000).then(() => null)]);
  await sleep(200);
  return { heapUsed: mem?.heapUsed ?? null, rssKb: procRssKb(srv.pid) };
}

async function stopTarget(srv) {
  if (srv.exit) return;
  srv.child.kill("SIGTERM");
  if (await Promise.race([srv.exited.then(() => true), sleep(3000).then(() => false)])) return;
  srv.child.kill("SIGKILL");
  await srv.exited;
}

/** Stream "d" with the state-protocol touch profile; its first cursor. */
async function setupStream(srv) {
  const u = (p) => `${srv.base()}${p}`;
  const headers = { "content-type": "application/json" };
  let r = await fetch(u(`/v1/stream/${STREAM}`), { method: "PUT", headers });
  if (r.status !== 201) throw new Error(`PUT stream: ${r.status} ${await r.text()}`);
  r = await fetch(u(`/v1/stream/${STREAM}/_profile`), { method: "POST", headers, body: JSON.stringify({ apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } }) });
  if (r.status !== 200) throw new Error(`profile: ${r.status} ${await r.text()}`);
  const meta = await (await fetch(u(`/v1/stream/${STREAM}/touch/meta`))).json();
  return meta.cursor;
}

/** The server's count of parked waits (over the client's control socket). */
async function parkedCount(client, kind) {
  const r = await client.cmd("get", { path: kind === "floor" ? "/_count" : `/v1/stream/${STREAM}/touch/meta` });
  try {
    const j = JSON.parse(r.body);
    return Number(kind === "floor" ? j.parked : j.activeWaiters) || 0;
  } catch {
    return 0;
  }
}

/** Polls until the count reaches n (or, after `graceMs` more, takes the highest seen). */
async function waitParked(client, kind, n, { graceMs = 15_000 } = {}) {
  const t0 = now();
  let best = 0;
  for (;;) {
    const c = await parkedCount(client, kind);
    best = Math.max(best, c);
    if (c >= n || now() - t0 > graceMs) return { parked: best, ms: round(now() - t0) };
    await sleep(100);
  }
}

// --- One measurement: a target at N ---
async function measure(target, n, opts) {
  const kind = target.startsWith("floor") ? "floor" : "stream";
  const K = touchKeys();
  const commonKey = K.tableKey("public.common");
  const rareKey = K.tableKey("public.rare");
  const dataDir = mkdtempSync(join(tmpdir(), `dt-density-${target}-`));
  const srv = startTarget(target, { dataDir, rareKey });
  const client = startClient();
  try {
    await srv.ready;
    const cursor = kind === "stream" ? await setupStream(srv) : "0";
    await sleep(500);
    const idle = await memory(srv);
    const timeoutMs = target === "reference" ? REF_TIMEOUT_MS : target.startsWith("ours") ? opts.oursTimeout : 0;
    progress(`${target} N=${n}: listening, idle RSS ${round(idle.rssKb / 1024)} MB; parking`);
    const park = await client.cmd("park", { port: srv.port, n, cursor, commonKey, rareKey, timeoutMs, kind, reconnect: true, capMs: PARK_CAP_MS });
    if (park.error) throw new Error(park.error);
    if (park.opened < n) progress(`${target} N=${n}: only ${park.opened} sockets opened within ${PARK_CAP_MS / 1000} s`);
    const parked = await waitParked(client, kind, park.opened);
    const full = await memory(srv);
    progress(`${target} N=${n}: ${parked.parked} parked (sockets opened in ${round(park.openedMs / 1000)} s), RSS ${round(full.rssKb / 1024)} MB; idle CPU`);
    const cpu0 = processCpuMs(srv.pid);
    const tc = now();
    await sleep(opts.idleSeconds * 1000);
    const idleCpuPct = ((processCpuMs(srv.pid) - cpu0) / (now() - tc)) * 100;
    progress(`${target} N=${n}: idle CPU ${round(idleCpuPct)}%; wake 1%`);
    const rare = await client.cmd("wake", { which: "rare", deadlineMs: 30_000, repark: true });
    const reparked = await waitParked(client, kind, park.opened);
    progress(`${target} N=${n}: wake 1% last ${rare.last} ms; ${reparked.parked} parked again; wake 100%`);
    const all = await client.cmd("wake", { which: "all", deadlineMs: 30_000, repark: false });
    progress(`${target} N=${n}: wake 100% last ${all.last} ms (${all.missing} missing)`);
    const st = await client.cmd("state");
    const perWait = (a, b) => (a === null || b === null || !parked.parked ? null : (b - a) / parked.parked);
    return {
      target,
      n,
      opened: park.opened,
      waitTimeoutMs: timeoutMs || null,
      parked: parked.parked,
      parkMs: round(park.openedMs),
      rssIdleMb: round(idle.rssKb / 1024),
      rssParkedMb: round(full.rssKb / 1024),
      rssPerWaitKb: round(perWait(idle.rssKb, full.rssKb), 2),
      heapIdleMb: round(idle.heapUsed / 2 ** 20),
      heapParkedMb: round(full.heapUsed / 2 ** 20),
      heapPerWaitB: round(perWait(idle.heapUsed, full.heapUsed), 0),
      idleCpuPct: round(idleCpuPct),
      wake1: rare,
      wake100: all,
      reparked: reparked.parked,
      client: { failedConnects: park.failed, ...st.counts },
      serverStderrLines: srv.stderr.length,
    };
  } finally {
    await client.exit();
    await stopTarget(srv);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// --- EMFILE: ours with a low descriptor limit and more waits than fit ---
async function emfileCheck(target, opts) {
  const kind = target.startsWith("floor") ? "floor" : "stream";
  const K = touchKeys();
  const dataDir = mkdtempSync(join(tmpdir(), "dt-density-emfile-"));
  const srv = startTarget(target, { dataDir, rareKey: K.tableKey("public.rare"), fdLimit: opts.emfileLimit });
  const client = startClient();
  const fds = () => {
    try {
      return readdirSync(`/proc/${srv.pid}/fd`).length;
    } catch {
      return null;
    }
  };
  try {
    await srv.ready;
    const cursor = kind === "stream" ? await setupStream(srv) : "0";
    const fdsIdle = fds();
    const stderrBefore = srv.stderr.length;
    const t0 = now();
    const park = await client.cmd("park", { capMs: PARK_CAP_MS, port: srv.port, n: opts.emfileConns, cursor, commonKey: K.tableKey("public.common"), rareKey: K.tableKey("public.rare"), timeoutMs: target === "reference" ? REF_TIMEOUT_MS : 30_000, kind, reconnect: false });
    await sleep(3000);
    const cpu0 = processCpuMs(srv.pid);
    const tc = now();
    await sleep(5000);
    const cpu1 = processCpuMs(srv.pid);
    const cpuPct = cpu0 === null || cpu1 === null || srv.exit ? null : ((cpu1 - cpu0) / (now() - tc)) * 100;
    const alive = srv.exit === null;
    const activeWaiters = alive ? await parkedCount(client, kind) : null;
    const st = await client.cmd("state");
    const probePath = kind === "floor" ? "/_count" : `/v1/stream/${STREAM}/touch/meta`;
    const fresh = alive ? await client.cmd("freshGet", { path: probePath, timeoutMs: 3000 }) : null;
    const fdsFull = alive ? fds() : null;
    // Hang up 300 parked waits: does a new connection get served again?
    let after = null;
    if (alive) {
      await client.cmd("hangUp", { count: 300 });
      await sleep(1000);
      const fresh2 = await client.cmd("freshGet", { path: probePath, timeoutMs: 3000 });
      after = { freshConnection: summarizeGet(fresh2), parked: await parkedCount(client, kind), alive: srv.exit === null };
    }
    const logged = srv.stderr.slice(stderrBefore).concat(srv.stdout.filter((l) => l.t >= t0));
    const distinct = new Map();
    for (const { line } of logged) {
      const k = line.replace(/\d+/g, "#").slice(0, 160);
      distinct.set(k, (distinct.get(k) ?? 0) + 1);
    }
    return {
      bench: "density-emfile",
      target,
      fdLimit: opts.emfileLimit,
      conns: opts.emfileConns,
      serverFdsIdle: fdsIdle,
      serverFdsWithWaits: fdsFull,
      alive,
      exit: srv.exit,
      parked: activeWaiters,
      serverCpuPctWhileOverLimit: round(cpuPct),
      client: { connected: opts.emfileConns - park.failed, failedConnects: park.failed, stillOpen: st.open, stillWaiting: st.waiting, ...st.counts },
      freshConnectionWhileFull: summarizeGet(fresh),
      afterHangingUp300: after,
      logLines: logged.length,
      logDistinct: [...distinct].map(([line, count]) => ({ count, line })).slice(0, 10),
      logTail: srv.exit ? logged.slice(-15).map((l) => l.line) : undefined,
    };
  } finally {
    await client.exit();
    await stopTarget(srv);
    rmSync(dataDir, { recursive: true, force: true });
  }
}
function summarizeGet(r) {
  if (!r) return null;
  if (r.status) return { status: r.status };
  return r;
}

// --- Main ---
function printTable(rows) {
  const cols = [
    ["target", (r) => r.target],
    ["N", (r) => r.n],
    ["parked", (r) => r.parked],
    ["RSS idle MB", (r) => r.rssIdleMb],
    ["RSS parked MB", (r) => r.rssParkedMb],
    ["RSS/wait KB", (r) => r.rssPerWaitKb],
    ["heap/wait B", (r) => r.heapPerWaitB],
    ["idle CPU %", (r) => r.idleCpuPct],
    ["1% p50/p99/last ms", (r) => `${r.wake1.p50}/${r.wake1.p99}/${r.wake1.last}${r.wake1.missing ? ` (${r.wake1.missing} missing)` : ""}`],
    ["100% p50/p99/last ms", (r) => `${r.wake100.p50}/${r.wake100.p99}/${r.wake100.last}${r.wake100.missing ? ` (${r.wake100.missing} missing)` : ""}`],
  ];
  const cells = [cols.map(([h]) => h), ...rows.map((r) => cols.map(([, f]) => String(f(r))))];
  const widths = cols.map((_, i) => Math.max(...cells.map((c) => c[i].length)));
  for (const c of cells) process.stderr.write(c.map((x, i) => x.padEnd(widths[i])).join("  ") + "\n");
}

/** Medians over rounds of every numeric field (nested one level). */
function medianOf(runs) {
  const out = { ...runs[runs.length - 1] };
  for (const [k, v] of Object.entries(out)) {
    if (typeof v === "number") out[k] = median(runs.map((r) => r[k]));
    else if (v && typeof v === "object" && (k === "wake1" || k === "wake100")) out[k] = Object.fromEntries(Object.entries(v).map(([k2, v2]) => [k2, typeof v2 === "number" ? median(runs.map((r) => r[k][k2])) : v2]));
  }
  return out;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const maxN = Math.floor((fdLimit() - 1000) / 1000) * 1000;
  const ns = String(opts.n ?? "10000,max").split(",").map((x) => (x === "max" ? maxN : Math.floor(Number(x)))).filter((x) => x > 0);
  for (const n of ns) if (n > maxN) throw new Error(`--n ${n}: more than fits the descriptor limit (${fdLimit()}, so at most ${maxN})`);
  const targets = String(opts.targets ?? TARGETS.join(",")).split(",").filter(Boolean);
  for (const t of targets) if (!TARGETS.includes(t)) throw new Error(`unknown target ${t}; known: ${TARGETS.join(", ")}`);
  const cfg = {
    rounds: Math.max(1, Number(opts.rounds ?? 1) || 1),
    oursTimeout: Number(opts["ours-timeout"] ?? 30_000),
    idleSeconds: Number(opts["idle-seconds"] ?? 5),
    emfileLimit: Number(opts["emfile-limit"] ?? 1000),
    emfileConns: Number(opts["emfile-conns"] ?? 1200),
  };
  const results = [];
  for (const n of opts.emfile === "only" ? [] : ns) {
    const runs = Object.fromEntries(targets.map((t) => [t, []]));
    for (let r = 0; r < cfg.rounds; r++) {
      const order = r % 2 ? [...targets].reverse() : targets;
      for (const t of order) {
        progress(`round ${r + 1}/${cfg.rounds}: ${t} at N=${n}`);
        try {
          const one = await measure(t, n, cfg);
          runs[t].push(one);
          if (cfg.rounds > 1) progress(JSON.stringify(one));
        } catch (e) {
          progress(`${t} at N=${n} failed: ${e.stack ?? e}`);
        }
      }
    }
    for (const t of targets) {
      if (!runs[t].length) continue;
      const line = { bench: "density", date: new Date().toISOString(), rounds: runs[t].length, idleSeconds: cfg.idleSeconds, ...medianOf(runs[t]) };
      console.log(JSON.stringify(line));
      results.push(line);
    }
  }
  if (results.length) printTable(results);
  if (opts.emfile !== "0") {
    for (const t of String(opts["emfile-targets"] ?? "ours").split(",").filter(Boolean)) {
      if (!TARGETS.includes(t)) throw new Error(`unknown target ${t}; known: ${TARGETS.join(", ")}`);
      progress(`EMFILE check: ${t} under ulimit -n ${cfg.emfileLimit}, ${cfg.emfileConns} parked waits`);
      console.log(JSON.stringify(await emfileCheck(t, cfg)));
    }
  }
}

const role = parseArgs(process.argv.slice(2)).role;
if (role === "client") clientRole();
else if (role === "floor-node") floorNodeRole();
else if (role === "floor-bun") floorBunRole();
else await main();
