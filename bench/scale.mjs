// Scale-out (issue 28): waits served in the writer's own process vs by an edge that mirrors the
// writer's journals over NATS JetStream, all on this machine, in the same run.
//
//   npm run bench:scale                                  # --rounds 1 --seconds 5 (~2-3 min)
//   npm run bench:scale -- --rounds 3                    # the figures of docs/scale-out.md
//   node bench/scale.mjs [--rounds 1] [--seconds 5] [--rate 5000] [--batch 50] [--tables 256]
//        [--chains 1000] [--steps 1000,2000,4000,6000,8000,12000,16000,24000,32000] [--stepSeconds 3]
//        [--p99Limit 50] [--beatMs 500] [--batchMs 0] [--fanEdges 4] [--fanWriterChains 10] [--reportKeys 64]
//        [--reports 10x40,100x40,1000x2,1000x40] [--only latency,cpu,reports,fan]
//
// Processes: a nats-server 2.15.1 with JetStream (testkit/nats-server.mjs, started once
// per run; NATS_SERVER_BIN to use another binary), and per side fresh processes of
// bench/scale-worker.mjs (child_process.fork), each with a fresh store and subject prefix.
//
// Workload: one touch-enabled stream "scale"; a writer appends `--rate` rows/s in
// `Store.append` calls of `--batch` rows, open loop (batch b starts at t0 + b * batch/rate,
// late ones catch up, at most 16 in flight); each row is an insert into one of `--tables`
// tables (`public.t<j>`, j uniform), so a flush carries many table keys. A wait chain is on
// one table's key (chain i on table i % tables): wait({ keyIds: [tableKeyId], interestMode:
// "coarse", timeoutMs: 1000 }), then again from the cursor its reply gave, until stopped.
//
// Sides, alternating in each round (the order flips every round):
//   - writer: the chains run in the writer's process; its engine has no fan-out;
//   - edge:   the writer's engine publishes (`fanout: { role: "writer", beatMs }`) and only
//             writes; the same chains run in one edge process (`fanout: { role: "edge" }`).
// Each side, on its own fresh processes:
//   1. latency: `--chains` chains, `--seconds` of writing. Wake latency of a reply = the time
//      the wait resolved in the waiter's process minus the time the append holding r* resolved
//      in the writer's process, where r* = the first row after the chain's watermark (the
//      bucketMaxSourceOffsetSeq of its previous touched reply) in its table; a touched reply
//      whose bucketMaxSourceOffsetSeq is below r*'s offset is counted `early`, not timed; a
//      chain's first reply (no watermark yet) is not timed. Times on both sides are
//      `performance.timeOrigin + performance.now()` (the machine's clock, sub-ms): the
//      processes share it; `clockSkewMs` is the largest difference seen between a worker's
//      clock and this process's over an IPC round trip (an upper bound on skew + half RTT).
//      CPU: process.cpuUsage() of each process over the writing window (all threads), nats-
//      server's from /proc; per 1,000 wakes = waiter process CPU / touched replies * 1000.
//      Writer fan-out counters over the window: flushes/s, bytes per flush and per key id
//      (`sentBytes / keysSent`, beats included), interest reports received per second.
//   2. ramp: `--steps` chains, `--stepSeconds` of writing each, until a step's p99 passes
//      `--p99Limit` ms: waits/s served (touched replies during the window / window) and p99.
//      The highest step within the limit is reported (and whether the writer kept its rate).
// Then (not sides; `--only` picks parts):
//   3. cpu: a writer without fan-out and one with, same rate, no edge: cores used by the writer
//      process, and by nats-server; the difference is the cost of publishing. Without waiters
//      (the journal flushes every ~100 ms), and (with part 5) with `--fanWriterChains` chains
//      at the writer (a flush per batch).
//   4. reports: the publishing writer, no waiters, while this process plays edges on core NATS
//      (`--reports EDGESxHZ,...`: EDGES simulated edges, each sending an interest report of
//      `--reportKeys` fine keys HZ times a second, ttl 2 s, as an edge's report thread does:
//      every beat when idle, every 25 ms while new waits park): the writer's extra CPU per
//      report over the no-report window of part 3 (the report's decode and set_remote, and the
//      union of every edge's keys that each batch's hot snapshot builds).
//   5. fan: the publishing writer with `--fanEdges` real edges that hold no waits, and
//      `--fanWriterChains` chains at the writer (with waits parked and the stream caught up, the
//      writer flushes every batch: the flush rate of a busy system): each edge's CPU per
//      applied flush (a consumer's cost with nothing to wake), the bytes each edge received,
//      nats-server's CPU with the edges and then without them (same writer, same chains).
//
// Prints a table on stderr and, on stdout, one JSON line per round and a summary line (medians
// over rounds); all appended to bench/out/results.jsonl. Goals are reported, not asserted:
// edge wake p50 <= writer's + 3 ms; bytes per key <= 5 (the fan-out's messages; on the wire,
// NATS protocol lines included, from `ss -tinp` of each process's socket to nats-server, is
// reported beside it for what the writer sends and what each edge receives).
import { fork, spawnSync } from "node:child_process";
import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import { natsServerBinary, startNats, NATS_VERSION } from "../testkit/nats-server.mjs";
import { numArg, listArg, sleep, median, percentile, processCpuSeconds } from "./common.mjs";

const native = createRequire(import.meta.url)("../lib/internal/native.js");

const here = dirname(fileURLToPath(import.meta.url));

const ROUNDS = Math.max(1, numArg("rounds", 1) || 1);
const SECONDS = numArg("seconds", 5);
const RATE = numArg("rate", 5000);
const BATCH = numArg("batch", 50);
const TABLES = numArg("tables", 256);
const CHAINS = numArg("chains", 1000);
const STEPS = listArg("steps", "1000,2000,4000,6000,8000,12000,16000,24000,32000").map(Number);
const STEP_SECONDS = numArg("stepSeconds", 3);
const P99_LIMIT = numArg("p99Limit", 50);
const BEAT_MS = numArg("beatMs", 500);
/** The writer's fan-out batching window (`fanout.batchMs`). */
const BATCH_MS = numArg("batchMs", 0);
const FAN_EDGES = numArg("fanEdges", 4);
const FAN_WRITER_CHAINS = numArg("fanWriterChains", 10);
const REPORT_KEYS = numArg("reportKeys", 64);
const REPORTS = listArg("reports", "10x40,100x40,1000x2,1000x40").map((s) => {
  const [e, hz] = s.split("x").map(Number);
  return { edges: e, hz };
});
const ONLY = listArg("only", "latency,cpu,reports,fan");
const WAIT_TIMEOUT_MS = 1000;
const STREAM = "scale";

const log = (m) => process.stderr.write(`[${new Date().toISOString().slice(11, 23)}] ${m}\n`);
const now = () => performance.timeOrigin + performance.now();
const round = (x, d = 2) => (typeof x === "number" && Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : null);

// ---------------------------------------------------------------- processes

/** nats-server's pid, found by its port among this user's processes. */
function natsPid(port) {
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
      if (cmd[0].endsWith("nats-server") && cmd.includes(String(port))) return Number(d);
    } catch {}
  }
  return null;
}

/**
 * TCP payload bytes each process has sent to and received from nats-server on `port` (every
 * NATS protocol line and header included: what crosses the wire above TCP), by pid, from
 * `ss -tinp` (Linux; null where ss is missing).
 */
function natsSocketBytes(port) {
  const r = spawnSync("ss", ["-tinpH", "state", "established", `( dport = :${port} )`], { encoding: "utf8" });
  if (r.status !== 0) return null;
  const out = new Map();
  let pid = null;
  for (const line of r.stdout.split("\n")) {
    const p = /pid=(\d+)/.exec(line);
    if (p) pid = Number(p[1]);
    const sent = /bytes_sent:(\d+)/.exec(line);
    const recv = /bytes_received:(\d+)/.exec(line);
    if (pid !== null && (sent || recv)) {
      const t = out.get(pid) ?? { sent: 0, received: 0 };
      t.sent += Number(sent?.[1] ?? 0);
      t.received += Number(recv?.[1] ?? 0);
      out.set(pid, t);
      pid = null;
    }
  }
  return out;
}

/** A forked bench/scale-worker.mjs; `call(cmd, args)` resolves its answer. */
function worker(name) {
  const child = fork(join(here, "scale-worker.mjs"), [], { serialization: "advanced", stdio: ["ignore", "inherit", "inherit", "ipc"], env: { ...process.env, NODE_NO_WARNINGS: "1" } });
  let seq = 0;
  const waiting = new Map();
  child.on("message", (m) => {
    const w = waiting.get(m.id);
    if (!w) return;
    waiting.delete(m.id);
    if (m.ok) w.resolve(m);
    else w.reject(Object.assign(new Error(`${name}: ${m.error}`), { code: m.code }));
  });
  const exited = new Promise((r) => child.on("exit", r));
  child.on("exit", (code) => {
    for (const w of waiting.values()) w.reject(new Error(`${name} exited ${code}`));
    waiting.clear();
  });
  const call = (cmd, args = {}) =>
    new Promise((resolve, reject) => {
      const id = ++seq;
      waiting.set(id, { resolve, reject });
      child.send({ id, cmd, ...args });
    });
  return {
    name,
    pid: child.pid,
    call,
    close: async () => {
      try {
        await Promise.race([call("close"), sleep(15_000)]);
      } catch {}
      if (child.exitCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/** Largest |worker clock - this clock| over a few IPC round trips (minus nothing: an upper bound). */
async function clockSkew(w) {
  let best = Infinity;
  for (let i = 0; i < 5; i++) {
    const t0 = now();
    const { now: t } = await w.call("ping");
    const t1 = now();
    const mid = (t0 + t1) / 2;
    best = Math.min(best, Math.abs(t - mid) + (t1 - t0) / 2);
  }
  return best;
}

// ---------------------------------------------------------------- a minimal core-NATS publisher

/** Core NATS over TCP (text protocol: CONNECT, PUB, PING/PONG), enough to play edges. */
async function natsPublisher(port) {
  const sock = connect(port, "127.0.0.1");
  sock.setNoDelay(true);
  let buf = "";
  let onPong = null;
  sock.on("data", (d) => {
    buf += d.toString("latin1");
    let i;
    while ((i = buf.indexOf("\r\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (line === "PING") sock.write("PONG\r\n");
      else if (line === "PONG") onPong?.();
      else if (line.startsWith("-ERR")) process.stderr.write(`nats: ${line}\n`);
    }
  });
  await new Promise((resolve, reject) => {
    sock.once("connect", resolve);
    sock.once("error", reject);
  });
  const flush = () =>
    new Promise((resolve) => {
      onPong = resolve;
      sock.write("PING\r\n");
    });
  sock.write(`CONNECT {"verbose":false,"pedantic":false,"name":"scale-bench fake edges"}\r\n`);
  await flush();
  return {
    /** Publishes every payload in `msgs` on `subject` in one write. */
    publish(subject, msgs) {
      const parts = [];
      for (const m of msgs) parts.push(Buffer.from(`PUB ${subject} ${m.length}\r\n`), m, Buffer.from("\r\n"));
      return sock.write(Buffer.concat(parts));
    },
    flush,
    close: () => new Promise((r) => sock.end(r)),
  };
}

/**
 * An edge's interest report as the native module lays it out (`_encodeInterest`, over
 * src/fanout/wire.rs `encode_interest`): the simulated edges below send these.
 */
const interestReport = (edgeId, ttlMs, stream, fineWaiters, keyIds) =>
  native._encodeInterest(String(edgeId), ttlMs, stream, fineWaiters, keyIds.map((k) => k >>> 0));

// ---------------------------------------------------------------- measurement

/** Wake latencies of `samples` against the writer's `rows` (see the header). */
function attribute(rows, samples) {
  // Per table, the offsets of its rows in order, and each row's ack time by offset.
  const byTable = new Map();
  const ackByOffset = new Map();
  for (let i = 0; i < rows.offsets.length; i++) {
    const t = rows.tables[i];
    let a = byTable.get(t);
    if (!a) byTable.set(t, (a = []));
    a.push(rows.offsets[i]);
    ackByOffset.set(rows.offsets[i], rows.ackAt[i]);
  }
  for (const a of byTable.values()) a.sort((x, y) => x - y);
  const lat = [];
  let early = 0;
  let unmatched = 0;
  let touched = 0;
  let notTouched = 0;
  let stale = 0;
  let first = 0;
  for (let i = 0; i < samples.kind.length; i++) {
    const k = samples.kind[i];
    if (k === 2) {
      stale++;
      continue;
    }
    if (k === 0) {
      notTouched++;
      continue;
    }
    touched++;
    const w = samples.watermark[i];
    if (w < 0) {
      first++;
      continue;
    }
    const a = byTable.get(samples.table[i]);
    if (!a) {
      unmatched++;
      continue;
    }
    let lo = 0;
    let hi = a.length;
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if (a[m] > w) hi = m;
      else lo = m + 1;
    }
    if (lo >= a.length) {
      unmatched++;
      continue;
    }
    const off = a[lo];
    if (samples.bmso[i] < off) {
      early++;
      continue;
    }
    lat.push(samples.at[i] - ackByOffset.get(off));
  }
  lat.sort((x, y) => x - y);
  return { lat, touched, notTouched, stale, early, unmatched, first };
}

function cpuWindow(procs, natsPidNow, natsPort) {
  const t = now();
  return Promise.all(procs.map((p) => p.call("usage"))).then((us) => ({ t, us, nats: natsPidNow ? processCpuSeconds(natsPidNow) : null, wire: natsPort ? natsSocketBytes(natsPort) : null }));
}

/** Settles the writer (everything processed and flushed) and the waiter side on its cursor. */
async function settle(writer, waiterSide) {
  const { cursor } = await writer.call("settle");
  if (waiterSide !== writer) {
    const r = await waiterSide.call("settle", { cursor });
    if (!r.reached) log(`  the edge did not reach the writer's cursor ${cursor} (at ${r.cursor})`);
  }
}

/** One measured window: chains on `waiterSide` while `writer` writes for `seconds`. */
async function window(ctx, { writer, waiterSide, chains, seconds, seed, extra = [] }) {
  await settle(writer, waiterSide);
  if (chains > 0) await waiterSide.call("chains", { n: chains, tables: TABLES, timeoutMs: WAIT_TIMEOUT_MS });
  await sleep(chains > 0 ? 300 + chains / 100 : 100);
  const procs = waiterSide === writer ? [writer] : [writer, waiterSide];
  const all = [...procs, ...extra];
  const a = await cpuWindow(all, ctx.natsPid, ctx.nats.port);
  const rows = await writer.call("write", { rate: RATE, seconds, batch: BATCH, tables: TABLES, seed });
  if (extra.length) await sleep(100); // the last flushes reach the edges
  const b = await cpuWindow(all, ctx.natsPid, ctx.nats.port);
  const samples = chains > 0 ? await waiterSide.call("stop") : null;
  const secs = (b.t - a.t) / 1000;
  const cores = procs.map((p, i) => (b.us[i].cpuUs - a.us[i].cpuUs) / 1e6 / secs);
  const out = {
    chains,
    seconds: round(secs, 3),
    achievedRowsPerSec: Math.round(rows.rows / (rows.writeMs / 1000)),
    lateBatches: rows.lateBatches,
    writerCores: round(cores[0], 3),
    natsCores: ctx.natsPid ? round((b.nats - a.nats) / secs, 3) : null,
  };
  if (procs.length > 1) out.edgeCores = round(cores[1], 3);
  out.writerBatchesPerSec = round((b.us[0].runtime.batches - a.us[0].runtime.batches) / secs, 1);
  out.writerHotFineKeys = b.us[0].runtime.hotFineKeys;
  const wf0 = a.us[0].fanout;
  const wf1 = b.us[0].fanout;
  if (wf0 && wf1) {
    const flushes = wf1.flushesSent - wf0.flushesSent;
    const keysSent = wf1.keysSent - wf0.keysSent;
    const bytes = wf1.sentBytes - wf0.sentBytes;
    out.fanout = {
      flushesPerSec: round(flushes / secs, 1),
      messagesPerSec: round((wf1.sent - wf0.sent) / secs, 1),
      bytesPerSec: Math.round(bytes / secs),
      bytesPerFlush: round(bytes / flushes, 1),
      keysPerFlush: round(keysSent / flushes, 1),
      bytesPerKey: round(bytes / keysSent, 3),
      dropped: wf1.dropped - wf0.dropped,
      reportsReceivedPerSec: round((wf1.received - wf0.received) / secs, 1),
      reportBytesReceivedPerSec: Math.round((wf1.receivedBytes - wf0.receivedBytes) / secs),
    };
    // On the wire: the writer's socket to nats-server (its PUB lines and payloads, beats and
    // its pings; the edges' reports come in) and each other process's (the MSG lines JetStream
    // delivers, with their reply subjects, flow control and heartbeats), per key id published.
    const wire = (pid, dir) => {
      const [x, y] = [a.wire?.get(pid), b.wire?.get(pid)];
      return x && y ? round((y[dir] - x[dir]) / keysSent, 3) : null;
    };
    out.fanout.wireBytesPerKeyPublished = wire(procs[0].pid, "sent");
    if (procs.length > 1) out.fanout.wireBytesPerKeyDelivered = wire(procs[1].pid, "received");
    if (extra.length) out.fanout.wireBytesPerKeyDeliveredPerEdge = extra.map((e) => wire(e.pid, "received"));
  }
  if (procs.length > 1 && a.us[1].fanout && b.us[1].fanout) {
    const e0 = a.us[1].fanout;
    const e1 = b.us[1].fanout;
    out.edgeFanout = { applied: e1.applied - e0.applied, gaps: e1.gaps - e0.gaps, receivedBytesPerSec: Math.round((e1.receivedBytes - e0.receivedBytes) / secs), reportsSentPerSec: round((e1.sent - e0.sent) / secs, 1) };
  }
  if (extra.length) {
    out.extra = extra.map((_, k) => {
      const [u0, u1] = [a.us[procs.length + k], b.us[procs.length + k]];
      return { cores: (u1.cpuUs - u0.cpuUs) / 1e6 / secs, applied: u1.fanout.applied - u0.fanout.applied, gaps: u1.fanout.gaps - u0.fanout.gaps, receivedBytesPerSec: (u1.fanout.receivedBytes - u0.fanout.receivedBytes) / secs };
    });
  }
  if (samples) {
    const r = attribute(rows, samples);
    const wakes = r.touched;
    Object.assign(out, {
      waitsPerSec: Math.round(wakes / secs),
      wakeP50Ms: round(percentile(r.lat, 50)),
      wakeP90Ms: round(percentile(r.lat, 90)),
      wakeP99Ms: round(percentile(r.lat, 99)),
      wakeMaxMs: round(r.lat[r.lat.length - 1]),
      timed: r.lat.length,
      early: r.early,
      notTouched: r.notTouched,
      stale: r.stale,
      unmatched: r.unmatched,
      waiterCpuMsPer1000Wakes: round((cores[procs.length - 1] * secs * 1e6) / wakes, 1),
    });
  }
  return out;
}

async function openSide(ctx, side, tag) {
  const dir = mkdtempSync(join(ctx.tmp, `${side}-`));
  const prefix = `scale${process.pid}x${tag}`;
  const writer = worker(`${side}-writer`);
  const fanout = side === "edge" ? { url: ctx.nats.url, prefix, beatMs: BEAT_MS, batchMs: BATCH_MS } : null;
  await writer.call("init", { role: "writer", dir, fanout });
  const procs = [writer];
  let waiterSide = writer;
  if (side === "edge") {
    waiterSide = worker("edge");
    await waiterSide.call("init", { role: "edge", dir, fanout: { url: ctx.nats.url, prefix, beatMs: BEAT_MS } });
    procs.push(waiterSide);
  }
  // A first flush, so the edge hears of the stream.
  await writer.call("write", { rate: 1000, seconds: 0.2, batch: 10, tables: TABLES, seed: 7 });
  await settle(writer, waiterSide);
  const skew = Math.max(...(await Promise.all(procs.map(clockSkew))));
  return { writer, waiterSide, procs, skew, close: () => Promise.all(procs.map((p) => p.close())) };
}

async function runSide(ctx, side, round_) {
  log(`round ${round_ + 1}: side ${side}`);
  const s = await openSide(ctx, side, `${round_}${side}`);
  try {
    const out = { clockSkewMs: round(s.skew, 3) };
    out.latency = await window(ctx, { writer: s.writer, waiterSide: s.waiterSide, chains: CHAINS, seconds: SECONDS, seed: 100 + round_ });
    log(`  ${side} latency: p50 ${out.latency.wakeP50Ms} ms, p99 ${out.latency.wakeP99Ms} ms, ${out.latency.waitsPerSec} waits/s`);
    out.ramp = [];
    for (const n of STEPS) {
      const st = await window(ctx, { writer: s.writer, waiterSide: s.waiterSide, chains: n, seconds: STEP_SECONDS, seed: 1000 + n });
      out.ramp.push(st);
      log(`  ${side} ramp ${n} chains: ${st.waitsPerSec} waits/s, p99 ${st.wakeP99Ms} ms, ${st.achievedRowsPerSec} rows/s`);
      if (!(st.wakeP99Ms <= P99_LIMIT)) break;
    }
    const within = out.ramp.filter((st) => st.wakeP99Ms <= P99_LIMIT);
    const best = within.reduce((b, st) => (b && b.waitsPerSec >= st.waitsPerSec ? b : st), null);
    out.rampBest = best ? { chains: best.chains, waitsPerSec: best.waitsPerSec, wakeP99Ms: best.wakeP99Ms, achievedRowsPerSec: best.achievedRowsPerSec } : null;
    return out;
  } finally {
    await s.close();
  }
}

/** Parts 3-5 on one publishing writer (and a non-publishing one first). */
async function runCost(ctx, round_) {
  const out = {};
  if (ONLY.includes("cpu")) {
    log(`round ${round_ + 1}: writer cpu without fan-out`);
    const plain = await openSide(ctx, "writer", `${round_}plain`);
    try {
      out.writerPlain = await window(ctx, { writer: plain.writer, waiterSide: plain.writer, chains: 0, seconds: SECONDS, seed: 5 });
      if (ONLY.includes("fan")) out.writerPlainChains = await window(ctx, { writer: plain.writer, waiterSide: plain.writer, chains: FAN_WRITER_CHAINS, seconds: SECONDS, seed: 9 });
    } finally {
      await plain.close();
    }
  }
  if (!ONLY.some((p) => ["cpu", "reports", "fan"].includes(p))) return out;
  const dir = mkdtempSync(join(ctx.tmp, `pub-`));
  const prefix = `scale${process.pid}x${round_}pub`;
  const writer = worker("pub-writer");
  try {
    await writer.call("init", { role: "writer", dir, fanout: { url: ctx.nats.url, prefix, beatMs: BEAT_MS, batchMs: BATCH_MS } });
    await writer.call("write", { rate: 1000, seconds: 0.2, batch: 10, tables: TABLES, seed: 7 });
    log(`round ${round_ + 1}: writer cpu with fan-out`);
    out.writerPublishing = await window(ctx, { writer, waiterSide: writer, chains: 0, seconds: SECONDS, seed: 5 });
    if (out.writerPlain) out.publishCostCores = round(out.writerPublishing.writerCores - out.writerPlain.writerCores, 3);
    if (ONLY.includes("reports")) {
      out.reports = [];
      const pub = await natsPublisher(ctx.nats.port);
      try {
        for (const spec of REPORTS) {
          log(`round ${round_ + 1}: ${spec.edges} simulated edges x ${spec.hz} reports/s, ${REPORT_KEYS} keys`);
          let seedKey = 0x9e3779b1 * (round_ + 1);
          const nextKey = () => (seedKey = (Math.imul(seedKey ^ (seedKey >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0);
          const msgs = [];
          for (let e = 0; e < spec.edges; e++) {
            const keyIds = Array.from({ length: REPORT_KEYS }, nextKey);
            msgs.push(interestReport(BigInt(e + 1) * 0x100000001n + BigInt(round_), 2000, STREAM, 4, keyIds));
          }
          const perSec = spec.edges * spec.hz;
          let stopping = false;
          let sent = 0;
          const t0 = now();
          const loop = (async () => {
            let e = 0;
            while (!stopping) {
              await sleep(10);
              const due = Math.floor(((now() - t0) / 1000) * perSec) - sent;
              if (due <= 0) continue;
              const batch = [];
              for (let i = 0; i < due; i++) {
                batch.push(msgs[e]);
                e = (e + 1) % msgs.length;
              }
              pub.publish(`${prefix}.interest`, batch);
              sent += due;
            }
          })();
          await sleep(1000); // every simulated edge has reported
          const w = await window(ctx, { writer, waiterSide: writer, chains: 0, seconds: SECONDS, seed: 6 });
          stopping = true;
          await loop;
          await pub.flush();
          const reportsPerSec = w.fanout.reportsReceivedPerSec;
          const extra = w.writerCores - out.writerPublishing.writerCores;
          out.reports.push({
            edges: spec.edges,
            hz: spec.hz,
            keysPerReport: REPORT_KEYS,
            reportBytes: msgs[0].length,
            reportsPerSec,
            writerCores: w.writerCores,
            writerBatchesPerSec: w.writerBatchesPerSec,
            writerHotFineKeys: w.writerHotFineKeys,
            extraWriterCores: round(extra, 3),
            writerUsPerReport: round((extra * 1e6) / reportsPerSec, 2),
            natsCores: w.natsCores,
            achievedRowsPerSec: w.achievedRowsPerSec,
            lateBatches: w.lateBatches,
          });
          log(`  ${spec.edges}x${spec.hz}: ${reportsPerSec} reports/s, writer ${w.writerCores} cores (+${round(extra, 3)}), ${round((extra * 1e6) / reportsPerSec, 2)} us/report`);
          await sleep(2500); // the simulated edges' interest expires (ttl 2 s)
          const bad = (await writer.call("usage", {})).fanout?.badMessages ?? 0;
          if (bad > 0) throw new Error(`the writer could not read ${bad} simulated reports: the simulated reports are not what the writer reads`);
        }
      } finally {
        await pub.close();
      }
    }
    if (ONLY.includes("fan") && FAN_EDGES > 0) {
      log(`round ${round_ + 1}: ${FAN_EDGES} edges mirroring, no waiters there; ${FAN_WRITER_CHAINS} chains at the writer`);
      const edges = [];
      try {
        for (let i = 0; i < FAN_EDGES; i++) {
          const e = worker(`fan-edge-${i}`);
          edges.push(e);
          await e.call("init", { role: "edge", dir, fanout: { url: ctx.nats.url, prefix, beatMs: BEAT_MS } });
        }
        const { cursor } = await writer.call("settle");
        for (const e of edges) await e.call("settle", { cursor });
        const w = await window(ctx, { writer, waiterSide: writer, chains: FAN_WRITER_CHAINS, seconds: SECONDS, seed: 8, extra: edges });
        const per = w.extra.map((x) => ({ cores: x.cores, usPerFlush: (x.cores * w.seconds * 1e6) / x.applied, applied: x.applied, receivedBytesPerSec: x.receivedBytesPerSec, gaps: x.gaps }));
        out.fan = {
          edges: FAN_EDGES,
          writerChains: FAN_WRITER_CHAINS,
          achievedRowsPerSec: w.achievedRowsPerSec,
          writerCores: w.writerCores,
          flushesPerSec: w.fanout.flushesPerSec,
          bytesPerSec: w.fanout.bytesPerSec,
          bytesPerFlush: w.fanout.bytesPerFlush,
          keysPerFlush: w.fanout.keysPerFlush,
          bytesPerKey: w.fanout.bytesPerKey,
          wireBytesPerKeyPublished: w.fanout.wireBytesPerKeyPublished,
          wireBytesPerKeyDeliveredPerEdge: median((w.fanout.wireBytesPerKeyDeliveredPerEdge ?? []).filter((x) => x != null)),
          edgeCores: round(median(per.map((p) => p.cores)), 4),
          edgeUsPerAppliedFlush: round(median(per.map((p) => p.usPerFlush)), 1),
          edgeAppliedPerSec: round(median(per.map((p) => p.applied)) / w.seconds, 1),
          edgeReceivedBytesPerSec: Math.round(median(per.map((p) => p.receivedBytesPerSec))),
          edgeGaps: per.reduce((s, p) => s + p.gaps, 0),
          natsCores: w.natsCores,
        };
        log(`  fan: ${out.fan.flushesPerSec} flushes/s; edge ${out.fan.edgeCores} cores, ${out.fan.edgeUsPerAppliedFlush} us/flush; nats ${out.fan.natsCores} cores`);
      } finally {
        await Promise.all(edges.map((e) => e.close()));
      }
      // The same writer and chains with no edge: what the edges add at the broker; against the
      // writer without fan-out and the same chains: the cost of publishing a flush per batch.
      const w0 = await window(ctx, { writer, waiterSide: writer, chains: FAN_WRITER_CHAINS, seconds: SECONDS, seed: 9 });
      out.writerPublishingChains = w0;
      out.fan.natsCoresNoEdge = w0.natsCores;
      out.fan.natsExtraCoresPerEdge = round((out.fan.natsCores - w0.natsCores) / FAN_EDGES, 4);
      if (out.writerPlainChains) out.publishCostCoresBusy = round(w0.writerCores - out.writerPlainChains.writerCores, 3);
    }
  } finally {
    await writer.close();
  }
  return out;
}

// ---------------------------------------------------------------- main

function summarize(rounds) {
  const get = (o, path) => path.split(".").reduce((x, k) => (x == null ? undefined : x[k]), o);
  const med = (path) => round(median(rounds.map((r) => get(r, path))), 3);
  const side = (s) => ({
    wakeP50Ms: med(`${s}.latency.wakeP50Ms`),
    wakeP99Ms: med(`${s}.latency.wakeP99Ms`),
    waitsPerSec: med(`${s}.latency.waitsPerSec`),
    writerCores: med(`${s}.latency.writerCores`),
    edgeCores: med(`${s}.latency.edgeCores`),
    waiterCpuMsPer1000Wakes: med(`${s}.latency.waiterCpuMsPer1000Wakes`),
    natsCores: med(`${s}.latency.natsCores`),
    achievedRowsPerSec: med(`${s}.latency.achievedRowsPerSec`),
    rampBestWaitsPerSec: med(`${s}.rampBest.waitsPerSec`),
    rampBestChains: med(`${s}.rampBest.chains`),
    clockSkewMs: med(`${s}.clockSkewMs`),
  });
  const out = { writer: side("writer"), edge: side("edge") };
  // The writer side's process also writes and processes: its CPU for the waits alone is over
  // the same writer without waiters (part 3), per round.
  out.writer.waitCpuMsPer1000WakesOverPlain = round(
    median(rounds.map((r) => (r.writer && r.cost?.writerPlain ? ((r.writer.latency.writerCores - r.cost.writerPlain.writerCores) * 1e6) / r.writer.latency.waitsPerSec : null))),
    1,
  );
  out.fanout = {
    flushesPerSec: med("edge.latency.fanout.flushesPerSec"),
    bytesPerFlush: med("edge.latency.fanout.bytesPerFlush"),
    keysPerFlush: med("edge.latency.fanout.keysPerFlush"),
    bytesPerKey: med("edge.latency.fanout.bytesPerKey"),
    wireBytesPerKeyPublished: med("edge.latency.fanout.wireBytesPerKeyPublished"),
    wireBytesPerKeyDelivered: med("edge.latency.fanout.wireBytesPerKeyDelivered"),
    bytesPerSec: med("edge.latency.fanout.bytesPerSec"),
    reportsReceivedPerSec: med("edge.latency.fanout.reportsReceivedPerSec"),
  };
  out.cost = {
    writerPlainCores: med("cost.writerPlain.writerCores"),
    writerPublishingCores: med("cost.writerPublishing.writerCores"),
    publishCostCores: med("cost.publishCostCores"),
    writerPlainChainsCores: med("cost.writerPlainChains.writerCores"),
    writerPublishingChainsCores: med("cost.writerPublishingChains.writerCores"),
    publishingChainsFlushesPerSec: med("cost.writerPublishingChains.fanout.flushesPerSec"),
    publishCostCoresBusy: med("cost.publishCostCoresBusy"),
    natsCoresPublishing: med("cost.writerPublishing.natsCores"),
    publishingBytesPerKey: med("cost.writerPublishing.fanout.bytesPerKey"),
    publishingFlushesPerSec: med("cost.writerPublishing.fanout.flushesPerSec"),
    publishingBytesPerFlush: med("cost.writerPublishing.fanout.bytesPerFlush"),
  };
  out.reports = REPORTS.map((spec, i) => ({
    edges: spec.edges,
    hz: spec.hz,
    reportsPerSec: med(`cost.reports.${i}.reportsPerSec`),
    extraWriterCores: med(`cost.reports.${i}.extraWriterCores`),
    writerUsPerReport: med(`cost.reports.${i}.writerUsPerReport`),
    achievedRowsPerSec: med(`cost.reports.${i}.achievedRowsPerSec`),
    writerBatchesPerSec: med(`cost.reports.${i}.writerBatchesPerSec`),
    writerHotFineKeys: med(`cost.reports.${i}.writerHotFineKeys`),
  }));
  out.fan = {
    edges: FAN_EDGES,
    flushesPerSec: med("cost.fan.flushesPerSec"),
    bytesPerKey: med("cost.fan.bytesPerKey"),
    wireBytesPerKeyPublished: med("cost.fan.wireBytesPerKeyPublished"),
    wireBytesPerKeyDeliveredPerEdge: med("cost.fan.wireBytesPerKeyDeliveredPerEdge"),
    edgeCores: med("cost.fan.edgeCores"),
    edgeUsPerAppliedFlush: med("cost.fan.edgeUsPerAppliedFlush"),
    edgeAppliedPerSec: med("cost.fan.edgeAppliedPerSec"),
    edgeReceivedBytesPerSec: med("cost.fan.edgeReceivedBytesPerSec"),
    natsCores: med("cost.fan.natsCores"),
    natsCoresNoEdge: med("cost.fan.natsCoresNoEdge"),
    natsExtraCoresPerEdge: med("cost.fan.natsExtraCoresPerEdge"),
  };
  out.goals = {
    edgeP50WithinWriterPlus3Ms: out.edge.wakeP50Ms != null && out.writer.wakeP50Ms != null ? out.edge.wakeP50Ms <= out.writer.wakeP50Ms + 3 : null,
    bytesPerKeyAtMost5: out.fanout.bytesPerKey != null ? out.fanout.bytesPerKey <= 5 : null,
  };
  return out;
}

function table(sum) {
  const rows = [];
  const line = (k, a, b = "") => rows.push(`  ${k.padEnd(44)} ${String(a ?? "-").padStart(12)} ${String(b ?? "-").padStart(12)}`);
  rows.push(`  ${"".padEnd(44)} ${"writer".padStart(12)} ${"edge".padStart(12)}`);
  for (const [k, label] of [
    ["wakeP50Ms", "wake p50 ms"],
    ["wakeP99Ms", "wake p99 ms"],
    ["waitsPerSec", `waits/s served (${CHAINS} chains)`],
    ["waiterCpuMsPer1000Wakes", "waiter process CPU ms / 1,000 wakes"],
    ["waitCpuMsPer1000WakesOverPlain", "  writer's, less its CPU without waiters"],
    ["writerCores", "writer process cores"],
    ["edgeCores", "edge process cores"],
    ["natsCores", "nats-server cores"],
    ["achievedRowsPerSec", "rows/s achieved"],
    ["rampBestWaitsPerSec", `max waits/s at p99 <= ${P99_LIMIT} ms`],
    ["rampBestChains", "  at chains"],
  ])
    line(label, sum.writer[k], sum.edge[k]);
  rows.push("");
  const f = sum.fanout;
  line("flushes/s published", f.flushesPerSec);
  line("bytes / flush (beats included)", f.bytesPerFlush);
  line("key ids / flush", f.keysPerFlush);
  line("bytes / key id (goal <= 5)", f.bytesPerKey);
  line("  on the wire, writer -> nats-server", f.wireBytesPerKeyPublished);
  line("  on the wire, nats-server -> the edge", f.wireBytesPerKeyDelivered);
  line("bytes/s published", f.bytesPerSec);
  line("interest reports/s from the busy edge", f.reportsReceivedPerSec);
  const c = sum.cost;
  line("writer cores, no fan-out, no waiters", c.writerPlainCores);
  line("writer cores, publishing, no waiters", c.writerPublishingCores);
  line("  cost of publishing (cores)", c.publishCostCores);
  line("  nats-server cores (stream ingest only)", c.natsCoresPublishing);
  line(`writer cores, no fan-out, ${FAN_WRITER_CHAINS} chains`, c.writerPlainChainsCores);
  line(`writer cores, publishing, ${FAN_WRITER_CHAINS} chains`, c.writerPublishingChainsCores, c.publishingChainsFlushesPerSec == null ? null : `${c.publishingChainsFlushesPerSec} fl/s`);
  line("  cost of publishing a flush per batch (cores)", c.publishCostCoresBusy);
  for (const r of sum.reports) {
    if (r.reportsPerSec == null) continue;
    line(`${r.edges} sim. edges x ${r.hz}/s: writer +cores`, r.extraWriterCores, `${r.reportsPerSec}/s`);
    line(`  us / report; hot keys at the writer`, r.writerUsPerReport, r.writerHotFineKeys);
  }
  const fan = sum.fan;
  line(`fan: ${fan.edges} edges without waits, flushes/s`, fan.flushesPerSec);
  line("  bytes / key id", fan.bytesPerKey);
  line("  on the wire: published; delivered to each edge", fan.wireBytesPerKeyPublished, fan.wireBytesPerKeyDeliveredPerEdge);
  line("  edge cores each", fan.edgeCores);
  line("  edge us per applied flush", fan.edgeUsPerAppliedFlush);
  line("  nats-server extra cores per edge", fan.natsExtraCoresPerEdge);
  return rows.join("\n");
}

async function main() {
  const nats = natsServerBinary();
  if (!nats.bin) throw new Error(`the scale bench needs nats-server: ${nats.reason}`);
  const tmp = mkdtempSync(join(tmpdir(), "dt-scale-bench-"));
  const server = await startNats({ bin: nats.bin, storeDir: join(tmp, "jetstream") });
  const ctx = { tmp, nats: server, natsPid: natsPid(server.port) };
  const load0 = loadavg().map((x) => round(x, 2));
  const params = { rounds: ROUNDS, seconds: SECONDS, rate: RATE, batch: BATCH, tables: TABLES, chains: CHAINS, steps: STEPS, stepSeconds: STEP_SECONDS, p99LimitMs: P99_LIMIT, beatMs: BEAT_MS, batchMs: BATCH_MS, fanEdges: FAN_EDGES, reportKeys: REPORT_KEYS, reports: REPORTS, only: ONLY, waitTimeoutMs: WAIT_TIMEOUT_MS };
  const env = { runtime: `node ${process.version}`, cpus: cpus().length, cpuModel: cpus()[0]?.model, nats: NATS_VERSION, clock: "performance.timeOrigin + performance.now() in each process" };
  mkdirSync(join(here, "out"), { recursive: true });
  const rounds = [];
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const res = { round: r + 1, loadavgStart: loadavg().map((x) => round(x, 2)) };
      if (ONLY.includes("latency")) {
        const order = r % 2 === 0 ? ["writer", "edge"] : ["edge", "writer"];
        for (const side of order) res[side] = await runSide(ctx, side, r);
      }
      res.cost = await runCost(ctx, r);
      res.loadavgEnd = loadavg().map((x) => round(x, 2));
      rounds.push(res);
      const line = { bench: "scale-round", date: new Date().toISOString(), ...res };
      console.log(JSON.stringify(line));
      appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify(line) + "\n");
    }
  } finally {
    await server.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  const sum = summarize(rounds);
  const line = { bench: "scale", date: new Date().toISOString(), env, params, loadavgStart: load0, loadavgEnd: loadavg().map((x) => round(x, 2)), ...sum };
  process.stderr.write(`\nscale (${ROUNDS} round(s), medians; load ${load0.join(" ")} -> ${line.loadavgEnd.join(" ")})\n${table(sum)}\n\n`);
  console.log(JSON.stringify(line));
  appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify(line) + "\n");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
