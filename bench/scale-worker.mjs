// One process of bench/scale.mjs (forked by it, driven over IPC): a writer (a file Store with a
// touch-enabled stream, its TouchEngine with or without `fanout: { role: "writer" }`) or an
// edge (`Store.open(":memory:")`, `fanout: { role: "edge" }`). Either can host wait chains.
//
// Messages from the parent: { id, cmd, ...args }; every one is answered { id, ok, ... }.
//   init   { role, dir, fanout }        opens the store and engine
//   ready  {}                           until the stream is known here (an edge: from a beat)
//   settle { cursor? }                  writer: until processed and flushed; edge: until its
//                                       cursor is the writer's `cursor`
//   write  { rate, seconds, batch, tables, seed }
//                                       paced appends; answers with every row's offset, table and
//                                       the time its append resolved
//   chains { n, tables, timeoutMs }     starts n wait chains (chain i on table i % tables)
//   stop   {}                           ends the chains (each ends at its next reply) and answers
//                                       with their samples
//   usage  {}                           process.cpuUsage(), fanoutStats(), memory; a writer's
//                                       processed batches and hot keys (runtime())
//   close  {}                           closes engine and store, then exits
//
// Times are `performance.timeOrigin + performance.now()` (ms since the epoch, sub-ms
// resolution): the processes share the machine's clock.
import { createRequire } from "node:module";
import { join } from "node:path";
import { mulberry32 } from "../testkit/gen-workload.mjs";
import { sleep } from "./common.mjs";

const require = createRequire(import.meta.url);
const { Store, TouchEngine, keys } = require("../index.js");

const STREAM = "scale";
const now = () => performance.timeOrigin + performance.now();

/** @type {any} */ let store = null;
/** @type {any} */ let engine = null;
let role = "";

const tableName = (j) => `public.t${j}`;

async function init({ role: r, dir, fanout }) {
  role = r;
  if (role === "writer") {
    store = Store.open(join(dir, "writer.sqlite"));
    await store.createStream(STREAM, { contentType: "application/json" });
    engine = new TouchEngine(store, fanout ? { fanout: { role: "writer", ...fanout } } : {});
    engine.setTouchConfig(STREAM, { enabled: true });
  } else {
    store = Store.open(":memory:");
    engine = new TouchEngine(store, { fanout: { role: "edge", ...fanout } });
  }
  return { pid: process.pid, now: now() };
}

async function ready() {
  const until = Date.now() + 30_000;
  for (;;) {
    try {
      const m = await engine.meta(STREAM);
      if (m.cursor) return { cursor: m.cursor };
    } catch (e) {
      if (e?.code !== "ERR_STREAM_NOT_FOUND" || Date.now() > until) throw e;
    }
    await sleep(20);
  }
}

/** Open-loop paced appends: batch b is started at t0 + b * interval (late ones catch up). */
async function write({ rate, seconds, batch, tables, seed, maxInFlight = 16 }) {
  const interval = (batch / rate) * 1000;
  const batches = Math.max(1, Math.floor((rate * seconds) / batch));
  const rnd = mulberry32(seed);
  const offsets = [];
  const tableOf = [];
  const ackAt = [];
  let inFlight = 0;
  let failed = null;
  const pending = new Set();
  let late = 0;
  const t0 = now();
  let rowId = Math.floor(rnd() * 1e9);
  for (let b = 0; b < batches && !failed; b++) {
    const due = t0 + b * interval;
    const ahead = due - now();
    if (ahead > 1) await sleep(ahead);
    else if (ahead < -interval) late++;
    while (inFlight >= maxInFlight) await Promise.race(pending);
    const ts = new Array(batch);
    const payloads = new Array(batch);
    for (let i = 0; i < batch; i++) {
      const j = Math.floor(rnd() * tables);
      ts[i] = j;
      const id = rowId++;
      payloads[i] = JSON.stringify({ type: tableName(j), key: String(id), value: { id, g: id % 64 }, headers: { operation: "insert" } });
    }
    inFlight++;
    const p = store.append(STREAM, payloads).then(
      (ack) => {
        const t = now();
        const first = Number(ack.firstOffset);
        for (let i = 0; i < batch; i++) {
          offsets.push(first + i);
          tableOf.push(ts[i]);
          ackAt.push(t);
        }
      },
      (e) => {
        failed = e;
      },
    );
    pending.add(p);
    p.finally(() => {
      inFlight--;
      pending.delete(p);
    });
  }
  await Promise.all(pending);
  const t1 = now();
  if (failed) throw failed;
  return { rows: offsets.length, writeMs: t1 - t0, lateBatches: late, offsets: Float64Array.from(offsets), tables: Uint16Array.from(tableOf), ackAt: Float64Array.from(ackAt) };
}

// ---- wait chains

let chainsOn = false;
let running = [];
/** Samples: table, watermark before the wait, reply time, reply's bucketMaxSourceOffsetSeq; touched / stale. */
let sTable = [];
let sWatermark = [];
let sAt = [];
let sBmso = [];
let sKind = []; // 1 touched, 0 not touched, 2 stale
let waitsStarted = 0;

async function chain(table, cursor, timeoutMs) {
  const keyIds = [keys.tableKeyId(tableName(table))];
  let watermark = -1; // unknown until the first reply
  while (chainsOn) {
    waitsStarted++;
    const r = await engine.wait({ stream: STREAM, cursor, keyIds, interestMode: "coarse", timeoutMs });
    const at = now();
    const bmso = Number(r.bucketMaxSourceOffsetSeq);
    sTable.push(table);
    sWatermark.push(watermark);
    sAt.push(at);
    sBmso.push(bmso);
    sKind.push(r.stale ? 2 : r.touched ? 1 : 0);
    cursor = r.cursor;
    if (r.touched && bmso > watermark) watermark = bmso;
  }
}

async function chains({ n, tables, timeoutMs }) {
  const { cursor } = await ready();
  sTable = [];
  sWatermark = [];
  sAt = [];
  sBmso = [];
  sKind = [];
  waitsStarted = 0;
  chainsOn = true;
  running = [];
  for (let i = 0; i < n; i++) running.push(chain(i % tables, cursor, timeoutMs));
  await sleep(0);
  return { started: n, at: now() };
}

async function stop() {
  chainsOn = false;
  await Promise.all(running);
  running = [];
  const out = {
    waitsStarted,
    table: Uint16Array.from(sTable),
    watermark: Float64Array.from(sWatermark),
    at: Float64Array.from(sAt),
    bmso: Float64Array.from(sBmso),
    kind: Uint8Array.from(sKind),
  };
  sTable = sWatermark = sAt = sBmso = sKind = [];
  return out;
}

function usage() {
  const u = process.cpuUsage();
  let runtime = null;
  if (role === "writer") {
    const rt = engine.runtime(STREAM);
    runtime = { batches: rt.scanBatchesTotal, hotFineKeys: rt.hotFineKeys, fineWaitersActive: rt.fineWaitersActive };
  }
  return { cpuUs: u.user + u.system, at: now(), fanout: engine?.fanoutStats() ?? null, runtime, rss: process.memoryUsage().rss };
}

async function close() {
  chainsOn = false;
  await engine?.close();
  await store?.close();
  return {};
}

/** Writer: waits until everything is processed and flushed. Edge: until it shows `cursor`. */
async function settle({ cursor }) {
  if (!cursor) {
    const m = await engine.meta(STREAM, { settle: "flush", timeoutMs: 20_000 });
    return { cursor: m.cursor };
  }
  const until = Date.now() + 20_000;
  for (;;) {
    const m = await ready();
    if (m.cursor === cursor || Date.now() > until) return { cursor: m.cursor, reached: m.cursor === cursor };
    await sleep(10);
  }
}

const handlers = { init, ready, settle, write, chains, stop, usage, close, ping: async () => ({ now: now() }) };

process.on("message", async (msg) => {
  const { id, cmd } = msg;
  try {
    const out = await handlers[cmd](msg);
    process.send({ id, ok: true, ...out });
    if (cmd === "close") setTimeout(() => process.exit(0), 10);
  } catch (e) {
    process.send({ id, ok: false, error: String(e?.stack ?? e), code: e?.code });
  }
});
process.on("disconnect", () => process.exit(0));
