// B6 e2e: append -> wake latency of durable-touch, driven in process through the JS API.
//
//   node bench/e2e.mjs [--runs 3] [--seed 1] [--rate 5000] [--seconds 20] [--waiters 1000]
//        [--batch 50] [--only main|simple] [--timeoutMs 30000] [--drainMs 2000]
//        [--simpleSamples 50] [--simpleIntervalMs 200] [--checkIntervalMs N] [--workers N]
//
// The same scenario, parameters, target choice and attribution as bench/reference/b6-e2e.ts,
// without HTTP: the writer calls Store.append, the waiters call TouchEngine.wait, both in this
// process (the reference is driven in process too, through app.fetch(Request)). Store and
// engine use their defaults (a file-backed store in a fresh temp dir; engine tick, workers and
// batch sizes as `new TouchEngine(store)` chooses them) unless --checkIntervalMs / --workers.
// Each run of each part is a fresh child process (`--child main|simple`).
//
// Part "main" (per run):
//  1. stream "e2e" (application/json); setTouchConfig("e2e", {enabled: true}); activateTemplates
//     with the 24 templateDecls() (all must be activated, else exit 1); first cursor and
//     watermark from engine.meta("e2e"); 600 ms idle.
//  2. Writer: records 0..N-1 (seed 1, N = rate * seconds rounded down to whole batches) in
//     Store.append calls of `batch` payloads, open loop: batch b is called at
//     t0 + b * batch/rate*1000 ms (late calls catch up, none skipped). ack = when the append
//     promise resolves; its result gives the offsets.
//  3. `waiters` loops, each: target r >= records sent + 50 + U[0,250) (same mulberry32 stream as
//     the reference), key K = watch key of the [tenantId] template of r's entity for the
//     tenantId of value (insert/update) or old_value (delete); updates without old_value are
//     skipped. Among up to 200 candidates the first whose K is not touched between the loop's
//     watermark W and r is taken ("clean"), else the first candidate. wait({stream, cursor,
//     keys: [K], templateIdsUsed: [tpl], interestMode: "fine", timeoutMs: 30000, signal});
//     the next wait uses the returned cursor, W = its bucketMaxSourceOffsetSeq.
//  4. When every batch is sent no new waits start; open waits get drainMs (2 s), then are
//     aborted with their AbortSignal (they reject with ERR_ABORTED: pendingAtEnd).
//  5. The stream is read back (store.read) to map offsets to records (headers.timestamp =
//     T0_MS + index); offsetsInSendOrder says whether the mapping was the identity.
//  Attribution (as the reference): for a wait with watermark W on key K, r* = the first record
//  with offset > W whose fine touches include K. A touched response with
//  bucketMaxSourceOffsetSeq >= offset(r*) is attributed: latency = response time - ack time of
//  the append holding r*. A touched response with a smaller bucketMaxSourceOffsetSeq counts as
//  wokenBeforeRecordProcessed (no latency).
//  CPU = process.cpuUsage() (all threads: JS, store writer, engine loop, timer, pool) from the
//  writer's start to the end of the drain. meta("e2e") is sampled once per second.
//  Extra (ours only), to see where the time goes:
//  - latencyBreakdownMs: attributed latencies split with the wake's own timestamps
//    (bucketStartMs = first touch of the bucket, flushAtMs = flush; wall-clock ms):
//    ack -> bucket start, bucket start -> flush (the coalesce window), flush -> response in JS;
//  - wakeBursts: responses grouped by generation (one flush each): size, spread from the first
//    to the last response in JS, observed coalesce window per flush;
//  - latencyFromAppendCallMs (from the append call instead of its ack), waitCallSyncSeconds
//    (JS time inside engine.wait itself), eventLoopDelayMs, gcPauses (Node);
//  - after the drain, if waits are still open, whether the engine answers at all (meta with a
//    5 s bound): if it does not, the run fails (exit 1) instead of hanging.
//
// Part "simple" (per run): stream "simple", same config, no templates; one waiter loops on
// wait({cursor, keys: [tableKey("public.e0")], interestMode: "coarse", timeoutMs: 30000}); one
// public.e0 record of the workload appended every 200 ms: 1 warm-up, then 50 measured. Latency
// of append k = time of the first touched response with bucketMaxSourceOffsetSeq >= offset(k)
// minus the time append k resolved.
//
// Prints one JSON line shaped like the reference's (bench "B6-e2e"); progress goes to stderr.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { monitorEventLoopDelay, PerformanceObserver } from "node:perf_hooks";
import { generateRecords, templateDecls, mulberry32, ENTITIES, T0_MS } from "../testkit/gen-workload.mjs";
import { arg, numArg, log, sleep, median, percentile, machine, runChild } from "./common.mjs";

const require = createRequire(import.meta.url);
const { Store, TouchEngine, keys } = require("../index.js");

const RUNS = numArg("runs", 3);
const SEED = numArg("seed", 1);
const RATE = numArg("rate", 5000);
const SECONDS = numArg("seconds", 20);
const WAITERS = numArg("waiters", 1000);
const BATCH = numArg("batch", 50);
const TIMEOUT_MS = numArg("timeoutMs", 30_000);
const DRAIN_MS = numArg("drainMs", 2000);
const MIN_LEAD = numArg("minLead", 50);
const LEAD_SPAN = numArg("leadSpan", 250);
const MAX_TRIES = numArg("maxTries", 200);
const SIMPLE_SAMPLES = numArg("simpleSamples", 50);
const SIMPLE_INTERVAL_MS = numArg("simpleIntervalMs", 200);
const CHECK_INTERVAL_MS = numArg("checkIntervalMs", undefined);
const WORKERS = numArg("workers", undefined);
const ONLY = arg("only", "both");
const CHILD = arg("child", null);
const RUN = numArg("run", 0);

const STREAM = "e2e";
const TENANTS = 100;
const DRIVER = "in-process: Store.append (writer) and TouchEngine.wait (waiters) through the JS API, no HTTP";
const RUNTIME = typeof Bun !== "undefined" ? `bun ${Bun.version}` : `node ${process.version}`;

const round = (x, d = 3) => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : x);
const cpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
/** Wall-clock ms of a performance.now() reading (for the engine's Date-based timestamps). */
const epochOf = (perfMs) => performance.timeOrigin + perfMs;

function pct(xs) {
  const s = Float64Array.from(xs);
  s.sort();
  const n = s.length;
  let sum = 0;
  for (const x of s) sum += x;
  return {
    n,
    p50: round(percentile(s, 50), 2),
    p90: round(percentile(s, 90), 2),
    p99: round(percentile(s, 99), 2),
    max: round(n ? s[n - 1] : NaN, 2),
    min: round(n ? s[0] : NaN, 2),
    mean: round(n ? sum / n : NaN, 2),
  };
}

/** Index of the first element > x in sorted a (a.length if none). */
function upperBound(a, x) {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (a[m] <= x) lo = m + 1;
    else hi = m;
  }
  return lo;
}

/** The sequence number of a reference protocol offset (26 chars of Crockford base32), or null. */
function offsetSeq(encoded) {
  if (typeof encoded !== "string" || encoded.length !== 26) return null;
  const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  let n = 0n;
  for (const ch of encoded) {
    const v = ALPHABET.indexOf(ch);
    if (v < 0) return null;
    n = (n << 5n) | BigInt(v);
  }
  n >>= 2n; // 130 bits, two zero bits of padding on the right
  return Number((n >> 32n) & 0xffffffffffffffffn) - 1;
}

function engineOptions() {
  const o = {};
  if (CHECK_INTERVAL_MS !== undefined) o.checkIntervalMs = CHECK_INTERVAL_MS;
  if (WORKERS !== undefined) o.workers = WORKERS;
  return o;
}

/** Temp dirs to remove if a child fails before closing its store. */
const tempRoots = new Set();

/** A fresh file-backed store and engine in a temp dir; `close()` ends both and removes it. */
async function openEngine(prefix) {
  const root = mkdtempSync(join(tmpdir(), prefix));
  tempRoots.add(root);
  const store = Store.open(join(root, "wal.sqlite"));
  const engine = new TouchEngine(store, engineOptions());
  let closed = false;
  return {
    store,
    engine,
    close: async () => {
      if (closed) return;
      closed = true;
      try {
        await engine.close();
      } finally {
        try {
          await store.close();
        } finally {
          rmSync(root, { recursive: true, force: true });
          tempRoots.delete(root);
        }
      }
    },
  };
}

function fail(msg) {
  throw new Error(msg);
}

/** `promise`, or a loud failure naming `what` when it takes longer than `ms`. */
async function within(promise, ms, what, detail = () => "") {
  let t;
  const timeout = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms ${detail()}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(t);
  }
}

// ------------------------------------------------------------------ main part

async function childMain() {
  const N = Math.floor((RATE * SECONDS) / BATCH) * BATCH;
  const nBatches = N / BATCH;
  const intervalMs = (BATCH / RATE) * 1000;
  if (!(N > 0)) fail(`no records: rate ${RATE} x seconds ${SECONDS} / batch ${BATCH}`);

  // ---- workload + key tables (outside timing)
  const lines = generateRecords({ n: N, seed: SEED });
  const tplByEntity = ENTITIES.map((e) => keys.templateId(e, ["tenantId"]));
  const nKeys = ENTITIES.length * TENANTS;
  const keyHex = new Array(nKeys);
  const keyTpl = new Array(nKeys);
  for (let e = 0; e < ENTITIES.length; e++)
    for (let t = 0; t < TENANTS; t++) {
      keyHex[e * TENANTS + t] = keys.watchKey(tplByEntity[e], [`t${t}`]);
      keyTpl[e * TENANTS + t] = tplByEntity[e];
    }
  const targetKey = new Int32Array(N).fill(-1);
  const touchA = new Int32Array(N).fill(-1);
  const touchB = new Int32Array(N).fill(-1);
  // The keys each record truly concerns (ours only): an update without old_value leaves the
  // tenant its row was in, which the records before it say (rows by entity and key).
  const trueA = new Int32Array(N).fill(-1);
  const trueB = new Int32Array(N).fill(-1);
  const lastRow = new Map();
  const counts = new Int32Array(nKeys);
  let noFine = 0;
  for (let i = 0; i < N; i++) {
    const rec = JSON.parse(lines[i]);
    const e = ENTITIES.indexOf(rec.type);
    const op = rec.headers.operation;
    const k = (row) => e * TENANTS + Number(String(row.tenantId).slice(1));
    const rowKey = `${e}:${rec.key}`;
    const before = op === "insert" ? null : (rec.old_value ?? lastRow.get(rowKey) ?? null);
    const after = op === "delete" ? null : rec.value;
    if (before) trueA[i] = k(before);
    if (after && (!before || k(after) !== trueA[i])) trueB[i] = k(after);
    if (after) lastRow.set(rowKey, after);
    else lastRow.delete(rowKey);
    if (op === "insert") {
      touchA[i] = k(rec.value);
      targetKey[i] = touchA[i];
    } else if (op === "delete") {
      touchA[i] = k(rec.old_value);
      targetKey[i] = touchA[i];
    } else if (rec.old_value) {
      touchA[i] = k(rec.old_value);
      const after = k(rec.value);
      if (after !== touchA[i]) touchB[i] = after;
      targetKey[i] = after;
    } else {
      noFine++;
    }
    if (touchA[i] >= 0) counts[touchA[i]]++;
    if (touchB[i] >= 0) counts[touchB[i]]++;
  }
  const byKey = Array.from({ length: nKeys }, (_, j) => new Int32Array(counts[j]));
  const fillIdx = new Int32Array(nKeys);
  for (let i = 0; i < N; i++) {
    if (touchA[i] >= 0) byKey[touchA[i]][fillIdx[touchA[i]]++] = i;
    if (touchB[i] >= 0) byKey[touchB[i]][fillIdx[touchB[i]]++] = i;
  }
  const bodies = new Array(nBatches);
  for (let b = 0; b < nBatches; b++) bodies[b] = lines.slice(b * BATCH, (b + 1) * BATCH).map((s) => Buffer.from(s));

  // ---- store, engine, stream setup (any failure exits non-zero)
  const ctx = await openEngine("dt-b6-");
  const { store, engine } = ctx;
  // Never hang: a hard deadline for the whole child.
  const hardMs = (SECONDS + 60) * 1000 + DRAIN_MS + TIMEOUT_MS;
  const hard = setTimeout(() => {
    log(`main: hard deadline of ${hardMs} ms passed; exiting`);
    for (const root of tempRoots) rmSync(root, { recursive: true, force: true });
    process.exit(3);
  }, hardMs);
  hard.unref();

  await store.createStream(STREAM, { contentType: "application/json" });
  const touchConfig = engine.setTouchConfig(STREAM, { enabled: true });
  const act = engine.activateTemplates(STREAM, templateDecls());
  if (act.activated.length !== 24 || act.denied.length !== 0)
    fail(`activate: ${act.activated.length} activated, ${act.denied.length} denied ${JSON.stringify(act.denied)}`);
  for (const t of tplByEntity) if (!act.activated.some((a) => a.templateId === t)) fail(`template ${t} not activated`);
  const meta0 = await engine.meta(STREAM);
  if (typeof meta0.cursor !== "string") fail(`meta: no cursor ${JSON.stringify(meta0)}`);
  await sleep(600);

  // ---- shared state
  const rnd = mulberry32(SEED * 7919 + 17);
  let sentRecords = 0;
  let stopNew = false;
  const sendT = new Float64Array(nBatches).fill(NaN);
  const ackT = new Float64Array(nBatches).fill(NaN);
  const firstOff = new Float64Array(nBatches).fill(NaN);
  const lastOff = new Float64Array(nBatches).fill(NaN);
  let appendErrors = 0;
  let harnessMs = 0;
  let waitCallMs = 0; // time spent inside the synchronous part of engine.wait (request parsing, registration)

  const wTarget = [];
  const wKey = [];
  const wW = [];
  const wClean = [];
  const wSend = [];
  const wResp = [];
  const wOutcome = []; // 0 touched, 1 timeout, 2 stale, 3 aborted, 4 error
  const wKind = []; // 0 fineKey, 1 templateKey, 2 tableKey, -1 n/a
  const wBucketMax = [];
  const wFlushAt = [];
  const wBucketStart = [];
  const wGen = [];
  const kindCode = { fineKey: 0, templateKey: 1, tableKey: 2 };
  const controllers = new Set();
  let lastResp = 0; // when the latest wait response reached JS
  let waitErrorsLogged = 0;

  const timeline = [];
  let eld = null;
  try {
    eld = monitorEventLoopDelay({ resolution: 5 });
    eld.enable();
  } catch {
    eld = null; // not every runtime has it
  }
  // GC pauses of the JS heap (Node; null where the runtime has no "gc" entries).
  const gc = { count: 0, totalMs: 0, maxMs: 0, over20Ms: 0 };
  let gcObs = null;
  try {
    gcObs = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        gc.count++;
        gc.totalMs += e.duration;
        if (e.duration > gc.maxMs) gc.maxMs = e.duration;
        if (e.duration > 20) gc.over20Ms++;
      }
    });
    gcObs.observe({ entryTypes: ["gc"] });
  } catch {
    gcObs = null;
  }
  const t0 = performance.now();
  const cpu0 = cpuSeconds();

  // ---- writer (open loop)
  const writerPromise = new Promise((resolve) => {
    let b = 0;
    let outstanding = 0;
    const pump = () => {
      const now = performance.now();
      while (b < nBatches && t0 + b * intervalMs <= now) {
        const bi = b++;
        sendT[bi] = performance.now();
        sentRecords = (bi + 1) * BATCH;
        outstanding++;
        store
          .append(STREAM, bodies[bi])
          .then((res) => {
            ackT[bi] = performance.now();
            firstOff[bi] = Number(res.firstOffset);
            lastOff[bi] = Number(res.lastOffset);
          })
          .catch((e) => {
            appendErrors++;
            if (appendErrors <= 3) log(`append batch ${bi} failed: ${e?.code ?? ""} ${e?.message ?? e}`);
          })
          .finally(() => {
            outstanding--;
            if (b >= nBatches && outstanding === 0) resolve();
          });
      }
      if (b < nBatches) setTimeout(pump, Math.max(0, t0 + b * intervalMs - performance.now()));
    };
    pump();
  });

  // ---- waiter loops
  const loop = async () => {
    let cursor = meta0.cursor;
    let W = Number(meta0.bucketMaxSourceOffsetSeq);
    while (!stopNew) {
      const h0 = performance.now();
      const start = sentRecords + MIN_LEAD + Math.floor(rnd() * LEAD_SPAN);
      let r = -1;
      let clean = 0;
      const tries = start - W > 10_000 ? 1 : MAX_TRIES;
      for (let c = start; c < N && c < start + tries; c++) {
        const K = targetKey[c];
        if (K < 0) continue;
        if (r < 0) r = c;
        const list = byKey[K];
        const idx = upperBound(list, W);
        if (idx < list.length && list[idx] === c) {
          r = c;
          clean = 1;
          break;
        }
      }
      if (r < 0) break;
      const K = targetKey[r];
      const Wsent = W;
      const ac = new AbortController();
      controllers.add(ac);
      const req = {
        stream: STREAM,
        cursor,
        keys: [keyHex[K]],
        templateIdsUsed: [keyTpl[K]],
        interestMode: "fine",
        timeoutMs: TIMEOUT_MS,
        signal: ac.signal,
      };
      const tSend = performance.now();
      harnessMs += tSend - h0;
      let outcome = 4;
      let kind = -1;
      let bmax = NaN;
      let tResp = NaN;
      let flushAt = NaN;
      let bucketStart = NaN;
      let gen = -1;
      try {
        const pending = engine.wait(req);
        waitCallMs += performance.now() - tSend;
        const j = await pending;
        tResp = performance.now();
        lastResp = tResp;
        kind = kindCode[j.effectiveWaitKind] ?? -1;
        bmax = Number(j.bucketMaxSourceOffsetSeq);
        flushAt = j.flushAtMs;
        bucketStart = j.bucketStartMs;
        outcome = j.stale ? 2 : j.touched ? 0 : 1;
        cursor = j.cursor;
        W = bmax;
        gen = Number(cursor.slice(cursor.indexOf(":") + 1));
      } catch (e) {
        tResp = performance.now();
        if (e?.code === "ERR_ABORTED") outcome = 3;
        else {
          outcome = 4;
          if (waitErrorsLogged++ < 3) log(`wait failed: ${e?.code ?? ""} ${e?.message ?? e}`);
        }
      } finally {
        controllers.delete(ac);
      }
      wTarget.push(r);
      wKey.push(K);
      wW.push(Wsent);
      wClean.push(clean);
      wSend.push(tSend);
      wResp.push(tResp);
      wOutcome.push(outcome);
      wKind.push(kind);
      wBucketMax.push(bmax);
      wFlushAt.push(flushAt);
      wBucketStart.push(bucketStart);
      wGen.push(gen);
      if (outcome === 3 || outcome === 4) break;
    }
  };

  // ---- timeline sampler
  let sampling = true;
  let wakeSampler = null;
  const sampler = (async () => {
    while (sampling) {
      await new Promise((r) => {
        const t = setTimeout(r, 1000);
        wakeSampler = () => {
          clearTimeout(t);
          r();
        };
      });
      if (!sampling) break;
      try {
        const m = await engine.meta(STREAM);
        const info = await store.getStream(STREAM);
        const committed = Number(info?.nextOffset ?? 0n);
        const scanned = offsetSeq(m.walScannedThrough) ?? -1;
        timeline.push({
          t: round((performance.now() - t0) / 1000, 1),
          sentRecords,
          committedRecords: committed,
          walScannedThrough: scanned,
          touchBacklog: committed - 1 - scanned,
          touchMode: m.touchMode,
          lagSourceOffsets: m.lagSourceOffsets,
          coalesceMs: m.coalesceMs,
          activeWaiters: m.activeWaiters,
          generation: m.generation,
        });
      } catch (e) {
        log(`meta sample failed: ${e?.message ?? e}`);
      }
    }
  })();

  log(`main: N=${N} records in ${nBatches} batches of ${BATCH} every ${intervalMs} ms; ${WAITERS} waiters; ${RUNTIME}`);
  const loops = Array.from({ length: WAITERS }, () => loop());
  await writerPromise;
  const writerEnd = performance.now();
  stopNew = true;
  log(`writer done after ${((writerEnd - t0) / 1000).toFixed(2)} s; draining ${DRAIN_MS} ms`);
  const drainDeadline = writerEnd + DRAIN_MS;
  while (controllers.size > 0 && performance.now() < drainDeadline) await sleep(20);
  const pendingAtEnd = controllers.size;
  const tEnd = performance.now();
  const cpu1 = cpuSeconds();
  eld?.disable();
  gcObs?.disconnect();
  const gcPauses = gcObs ? { count: gc.count, totalMs: round(gc.totalMs, 1), maxMs: round(gc.maxMs, 2), over20Ms: gc.over20Ms } : null;
  const eventLoopDelayMs = eld
    ? { p50: round(eld.percentile(50) / 1e6, 2), p99: round(eld.percentile(99) / 1e6, 2), max: round(eld.max / 1e6, 2), mean: round(eld.mean / 1e6, 2) }
    : null;
  if (controllers.size > 0) {
    // Diagnostics: is the engine still answering at all?
    const lastWake = round((lastResp - t0) / 1000, 3);
    const info = await within(store.getStream(STREAM), 10_000, "store.getStream after the drain");
    let m;
    try {
      m = await within(engine.meta(STREAM), 5000, "engine.meta after the drain");
    } catch (e) {
      const st = engine.stats().streams.find((x) => x.stream === STREAM);
      fail(
        `${e.message}: the engine settles no promise any more (${controllers.size} waits open, last wake delivered at ` +
          `t=${lastWake} s; the store still answers, nextOffset ${info?.nextOffset}; engine.stats(): ${JSON.stringify(st)})`
      );
    }
    log(
      `after the drain: ${controllers.size} waits open (last wake delivered at t=${lastWake} s); meta activeWaiters ${m.activeWaiters}, ` +
        `lag ${m.lagSourceOffsets}, bucketMaxSourceOffsetSeq ${m.bucketMaxSourceOffsetSeq}, pendingKeys ${m.pendingKeys}, touchMode ${m.touchMode}`
    );
  }
  log(`drain over: ${pendingAtEnd} waits outstanding; aborting them`);
  for (const ac of controllers) ac.abort();
  let loopsDone = 0;
  await within(
    Promise.all(loops.map((l) => l.then(() => loopsDone++))),
    10_000,
    "waiter loops after abort",
    () => `(${loopsDone}/${WAITERS} loops done, ${controllers.size} waits still unsettled)`
  );
  sampling = false;
  wakeSampler?.();
  await within(sampler, 10_000, "meta sampler");
  const metaEnd = await within(engine.meta(STREAM), 10_000, "engine.meta at end");
  const statsEnd = engine.stats();
  const storeStats = store.stats();
  const info = await within(store.getStream(STREAM), 10_000, "store.getStream at end");
  const finalNext = Number(info?.nextOffset ?? -1n);

  // ---- read the stream back: offset -> workload record (headers.timestamp = T0_MS + index)
  const recOfOffset = new Int32Array(Math.max(1, finalNext)).fill(-1);
  {
    let pos = 0;
    while (pos < finalNext) {
      const rows = await within(store.read(STREAM, { from: BigInt(pos), limit: 10_000 }), 30_000, "store.read");
      if (rows.length === 0) break;
      for (const row of rows) {
        if (Number(row.offset) !== pos) fail(`read-back: offset ${row.offset} at position ${pos}`);
        recOfOffset[pos++] = Date.parse(JSON.parse(row.payload.toString("utf8")).headers.timestamp) - T0_MS;
      }
    }
    if (pos !== finalNext) fail(`read-back: ${pos} records, nextOffset ${finalNext}`);
  }
  clearTimeout(hard);
  await within(ctx.close(), 30_000, "engine and store close");

  // ---- analysis
  let inOrder = true;
  for (let o = 0; o < finalNext; o++) if (recOfOffset[o] !== o) inOrder = false;
  const offOfRec = new Float64Array(N).fill(NaN);
  for (let o = 0; o < finalNext; o++) if (recOfOffset[o] >= 0) offOfRec[recOfOffset[o]] = o;
  let okBatches = 0;
  let offsetsMatchResults = true;
  for (let b = 0; b < nBatches; b++) {
    if (!Number.isFinite(ackT[b])) continue;
    okBatches++;
    if (offOfRec[b * BATCH] !== firstOff[b] || offOfRec[(b + 1) * BATCH - 1] !== lastOff[b]) offsetsMatchResults = false;
  }
  const byKeyTrueOff = Array.from({ length: nKeys }, () => []);
  for (let i = 0; i < N; i++) {
    if (!Number.isFinite(offOfRec[i])) continue;
    if (trueA[i] >= 0) byKeyTrueOff[trueA[i]].push(offOfRec[i]);
    if (trueB[i] >= 0) byKeyTrueOff[trueB[i]].push(offOfRec[i]);
  }
  for (const list of byKeyTrueOff) list.sort((a, b) => a - b);
  const byKeyOff = byKey.map((list) => {
    const a = Float64Array.from(list, (i) => offOfRec[i]).filter((x) => Number.isFinite(x));
    a.sort();
    return a;
  });

  const latAll = [];
  const latClean = [];
  const latFineKind = [];
  const latFromSend = [];
  const ackToBucketStart = [];
  const bucketStartToFlush = [];
  const flushToResponse = [];
  const ackToFlush = [];
  let touched = 0;
  let timedOut = 0;
  let stale = 0;
  let aborted = 0;
  let errors = 0;
  let attributed = 0;
  let early = 0;
  let withoutCause = 0;
  let noRecord = 0;
  let cleanWaits = 0;
  let rStarAckedBeforeSend = 0;
  let unackedRecord = 0;
  let negativeLatency = 0;
  const byKind = { fineKey: 0, templateKey: 0, tableKey: 0 };
  const earlyByKind = { fineKey: 0, templateKey: 0, tableKey: 0 };
  const kindName = ["fineKey", "templateKey", "tableKey"];
  for (let i = 0; i < wOutcome.length; i++) {
    const o = wOutcome[i];
    if (wClean[i]) cleanWaits++;
    if (o === 1) timedOut++;
    else if (o === 2) stale++;
    else if (o === 3) aborted++;
    else if (o === 4) errors++;
    if (o !== 0) continue;
    touched++;
    const kn = kindName[wKind[i]];
    if (kn) byKind[kn]++;
    {
      const listT = byKeyTrueOff[wKey[i]];
      const j = upperBound(listT, wW[i]);
      if (!(j < listT.length && listT[j] <= wBucketMax[i])) withoutCause++;
    }
    const list = byKeyOff[wKey[i]];
    const idx = upperBound(list, wW[i]);
    if (idx >= list.length) {
      noRecord++;
      if (kn) earlyByKind[kn]++;
      continue;
    }
    const off = list[idx];
    if (wBucketMax[i] < off) {
      early++;
      if (kn) earlyByKind[kn]++;
      continue;
    }
    const rec = recOfOffset[off];
    const ack = ackT[Math.floor(rec / BATCH)];
    if (!Number.isFinite(ack)) {
      unackedRecord++;
      continue;
    }
    const lat = wResp[i] - ack;
    latFromSend.push(wResp[i] - sendT[Math.floor(rec / BATCH)]);
    attributed++;
    if (lat < 0) negativeLatency++;
    latAll.push(lat);
    if (wKind[i] === 0) latFineKind.push(lat);
    if (wClean[i] && rec === wTarget[i]) latClean.push(lat);
    if (ack < wSend[i]) rStarAckedBeforeSend++;
    const ackEpoch = epochOf(ack);
    ackToBucketStart.push(wBucketStart[i] - ackEpoch);
    bucketStartToFlush.push(wFlushAt[i] - wBucketStart[i]);
    flushToResponse.push(epochOf(wResp[i]) - wFlushAt[i]);
    ackToFlush.push(wFlushAt[i] - ackEpoch);
  }

  // Wakes delivered by the same flush (same generation) reach JS as one burst: the spread is
  // the time from the first to the last response of the burst (each response's continuation
  // also issues the loop's next wait).
  const bursts = new Map();
  for (let i = 0; i < wOutcome.length; i++) {
    if (wOutcome[i] !== 0 || wGen[i] < 0) continue;
    const b = bursts.get(wGen[i]);
    if (!b) bursts.set(wGen[i], { n: 1, first: wResp[i], last: wResp[i], flushAt: wFlushAt[i], bucketStart: wBucketStart[i] });
    else {
      b.n++;
      if (wResp[i] < b.first) b.first = wResp[i];
      if (wResp[i] > b.last) b.last = wResp[i];
    }
  }
  const burstSizes = [];
  const burstSpread = [];
  const burstFirstAfterFlush = [];
  const flushCoalesce = []; // flushAtMs - bucketStartMs of each flush that woke someone
  const coalesceHist = { le15: 0, le55: 0, gt55: 0 };
  let longAfterFullBurst = 0; // flushes coalesced > 55 ms right after a flush that woke >= 90% of the waiters
  const gens = [...bursts.keys()].sort((a, b) => a - b);
  for (let gi = 0; gi < gens.length; gi++) {
    const b = bursts.get(gens[gi]);
    burstSizes.push(b.n);
    burstSpread.push(b.last - b.first);
    burstFirstAfterFlush.push(epochOf(b.first) - b.flushAt);
    const c = b.flushAt - b.bucketStart;
    flushCoalesce.push(c);
    if (c <= 15) coalesceHist.le15++;
    else if (c <= 55) coalesceHist.le55++;
    else {
      coalesceHist.gt55++;
      const prev = gi > 0 ? bursts.get(gens[gi - 1]) : null;
      if (prev && prev.n >= 0.9 * WAITERS) longAfterFullBurst++;
    }
  }

  const ackLat = [];
  const slip = [];
  for (let b = 0; b < nBatches; b++) {
    if (Number.isFinite(ackT[b])) ackLat.push(ackT[b] - sendT[b]);
    slip.push(sendT[b] - (t0 + b * intervalMs));
  }
  const writerSeconds = (writerEnd - t0) / 1000;
  const wall = (tEnd - t0) / 1000;
  const cpu = cpu1 - cpu0;
  const L = pct(latAll);
  const streamStats = statsEnd.streams.find((s) => s.stream === STREAM) ?? null;
  const out = {
    part: "main",
    driver: DRIVER,
    runtime: RUNTIME,
    settings: { engineOptions: engineOptions(), storeOpenOptions: {} },
    profileTouch: touchConfig,
    records: N,
    batches: nBatches,
    updatesWithoutOldValue: noFine,
    writerSeconds: round(writerSeconds, 3),
    sentRowsPerSec: round(N / writerSeconds, 1),
    achievedRowsPerSec: round((okBatches * BATCH) / writerSeconds, 1),
    appendBatchesOk: okBatches,
    appendErrors,
    offsetsInSendOrder: inOrder,
    offsetsMatchAppendResults: offsetsMatchResults,
    finalNextOffset: finalNext,
    appendAckMs: pct(ackLat),
    sendSlipMs: pct(slip),
    waitsIssued: wOutcome.length,
    woken: touched,
    timedOut,
    stale,
    pendingAtEnd,
    abortedAtEnd: aborted,
    errors,
    wokenByKind: byKind,
    attributed,
    wokenBeforeRecordProcessed: early,
    // Ours: touched replies whose window (cursor watermark, waking bucket] holds no record that
    // truly concerns the key (true images, not the reference's keys): wakes without a cause.
    wokenWithoutCause: withoutCause,
    wokenWithNoMatchingRecord: noRecord,
    wokenForRecordWithoutAck: unackedRecord,
    attributedWithNegativeLatency: negativeLatency,
    unattributedByKind: earlyByKind,
    cleanWaits,
    attributedWhereRecordAckedBeforeWaitSent: rStarAckedBeforeSend,
    latencyMs: L,
    latencyCleanMs: pct(latClean),
    latencyFineKeyModeMs: pct(latFineKind),
    latencyFromAppendCallMs: pct(latFromSend),
    latencyBreakdownMs: {
      note: "attributed wakes; engine timestamps are wall-clock ms (1 ms resolution)",
      ackToBucketStart: pct(ackToBucketStart),
      bucketStartToFlush: pct(bucketStartToFlush),
      ackToFlush: pct(ackToFlush),
      flushToResponse: pct(flushToResponse),
    },
    wakeBursts: {
      note: "touched responses grouped by generation (one journal flush each)",
      flushes: bursts.size,
      size: pct(burstSizes),
      spreadMs: pct(burstSpread),
      firstResponseAfterFlushMs: pct(burstFirstAfterFlush),
      coalesceMs: pct(flushCoalesce),
      coalesceHistogram: coalesceHist,
      longCoalesceRightAfterFullBurst: longAfterFullBurst,
    },
    eventLoopDelayMs,
    gcPauses,
    p50: L.p50,
    p90: L.p90,
    p99: L.p99,
    max: L.max,
    cpuSeconds: round(cpu, 3),
    wallSeconds: round(wall, 3),
    cpuCores: round(cpu / wall, 3),
    harnessSyncSeconds: round(harnessMs / 1000, 3),
    waitCallSyncSeconds: round(waitCallMs / 1000, 3),
    metaEnd: {
      touchMode: metaEnd.touchMode,
      lagSourceOffsets: metaEnd.lagSourceOffsets,
      walScannedThrough: offsetSeq(metaEnd.walScannedThrough),
      scanRowsTotal: metaEnd.scanRowsTotal,
      scanBatchesTotal: metaEnd.scanBatchesTotal,
      touchesTableTotal: metaEnd.touchesTableTotal,
      touchesTemplateTotal: metaEnd.touchesTemplateTotal,
      fineTouchesDroppedDueToBudgetTotal: metaEnd.fineTouchesDroppedDueToBudgetTotal,
      fineTouchesSkippedColdKeyTotal: metaEnd.fineTouchesSkippedColdKeyTotal,
      fineTouchesSkippedColdTemplateTotal: metaEnd.fineTouchesSkippedColdTemplateTotal,
      fineTouchesSkippedTemplateBucketTotal: metaEnd.fineTouchesSkippedTemplateBucketTotal,
      compensationTouchesTotal: metaEnd.compensationTouchesTotal,
      batchesSplitForBudgetTotal: metaEnd.batchesSplitForBudgetTotal,
      waitTouchedTotal: metaEnd.waitTouchedTotal,
      waitTimeoutTotal: metaEnd.waitTimeoutTotal,
      waitStaleTotal: metaEnd.waitStaleTotal,
      journalFlushesTotal: metaEnd.journalFlushesTotal,
      journalNotifyWakeupsTotal: metaEnd.journalNotifyWakeupsTotal,
      journalNotifyWakeMsTotal: metaEnd.journalNotifyWakeMsTotal,
      journalNotifyWakeMsMax: metaEnd.journalNotifyWakeMsMax,
      flushIntervalMsP95Last10s: metaEnd.flushIntervalMsP95Last10s,
      overflowBuckets: metaEnd.overflowBuckets,
      coalesceMs: metaEnd.coalesceMs,
      touchCoalesceWindowMs: metaEnd.touchCoalesceWindowMs,
    },
    engineStreamTotals: streamStats,
    store: { appendCalls: storeStats.appendCalls, groupCommits: storeStats.groupCommits, maxGroupCalls: storeStats.maxGroupCalls },
    timeline,
  };
  console.log(JSON.stringify(out));
}

// ------------------------------------------------------------------ simple part

async function childSimple() {
  const entity = "public.e0";
  const recs = generateRecords({ n: 2000, seed: SEED })
    .filter((l) => JSON.parse(l).type === entity)
    .slice(0, SIMPLE_SAMPLES + 1);
  if (recs.length < SIMPLE_SAMPLES + 1) fail("not enough records");
  const tableKey = keys.tableKey(entity);

  const ctx = await openEngine("dt-b6s-");
  const { store, engine } = ctx;
  const hardMs = SIMPLE_INTERVAL_MS * (SIMPLE_SAMPLES + 1) + TIMEOUT_MS + 60_000;
  const hard = setTimeout(() => {
    log(`simple: hard deadline of ${hardMs} ms passed; exiting`);
    for (const root of tempRoots) rmSync(root, { recursive: true, force: true });
    process.exit(3);
  }, hardMs);
  hard.unref();
  await store.createStream("simple", { contentType: "application/json" });
  engine.setTouchConfig("simple", { enabled: true });
  const meta0 = await engine.meta("simple");
  await sleep(600);

  const resp = [];
  let stop = false;
  let ac = null;
  const waiter = (async () => {
    let cursor = meta0.cursor;
    while (!stop) {
      ac = new AbortController();
      try {
        const j = await engine.wait({ stream: "simple", cursor, keys: [tableKey], interestMode: "coarse", timeoutMs: TIMEOUT_MS, signal: ac.signal });
        const t = performance.now();
        resp.push({ t, touched: !!j.touched, bmax: Number(j.bucketMaxSourceOffsetSeq), kind: j.effectiveWaitKind, flushAtMs: j.flushAtMs, bucketStartMs: j.bucketStartMs });
        cursor = j.cursor;
      } catch (e) {
        if (e?.code !== "ERR_ABORTED") log(`simple wait failed: ${e?.code ?? ""} ${e?.message ?? e}`);
        break;
      }
    }
  })();

  const acks = [];
  const cpu0 = cpuSeconds();
  const t0 = performance.now();
  for (let k = 0; k < recs.length; k++) {
    const due = t0 + k * SIMPLE_INTERVAL_MS;
    const w = due - performance.now();
    if (w > 0) await sleep(w);
    const res = await store.append("simple", [recs[k]]);
    acks.push({ t: performance.now(), off: Number(res.lastOffset) });
  }
  const lastOffset = acks[acks.length - 1].off;
  const deadline = performance.now() + 3000;
  while (performance.now() < deadline && !resp.some((r) => r.touched && r.bmax >= lastOffset)) await sleep(10);
  const tEnd = performance.now();
  const cpu = cpuSeconds() - cpu0;
  stop = true;
  ac?.abort();
  await within(waiter, 10_000, "simple waiter after abort");
  clearTimeout(hard);
  await within(ctx.close(), 30_000, "engine and store close");

  const lat = [];
  const ackToFlush = [];
  const flushToResponse = [];
  let missed = 0;
  for (let k = 1; k < acks.length; k++) {
    const a = acks[k];
    const r = resp.find((x) => x.touched && x.bmax >= a.off);
    if (!r) {
      missed++;
      continue;
    }
    lat.push(r.t - a.t);
    ackToFlush.push(r.flushAtMs - epochOf(a.t));
    flushToResponse.push(epochOf(r.t) - r.flushAtMs);
  }
  const L = pct(lat);
  console.log(
    JSON.stringify({
      part: "simple",
      driver: DRIVER,
      runtime: RUNTIME,
      settings: { engineOptions: engineOptions() },
      samples: acks.length - 1,
      warmupAppends: 1,
      wakeResponses: resp.length,
      touchedResponses: resp.filter((r) => r.touched).length,
      effectiveWaitKinds: Array.from(new Set(resp.map((r) => r.kind))),
      missed,
      latencyMs: L,
      latencyBreakdownMs: { ackToFlush: pct(ackToFlush), flushToResponse: pct(flushToResponse) },
      p50: L.p50,
      p99: L.p99,
      max: L.max,
      min: L.min,
      cpuSeconds: round(cpu, 3),
      wallSeconds: round((tEnd - t0) / 1000, 3),
    })
  );
}

// ------------------------------------------------------------------ parent

const runPart = (part, run) => runChild(fileURLToPath(import.meta.url), part, run, { timeout: (SECONDS + 180) * 1000 + TIMEOUT_MS });

async function parent() {
  if (!["both", "main", "simple"].includes(ONLY)) fail(`--only must be main or simple, not ${ONLY}`);
  const main = [];
  const simple = [];
  for (let r = 0; r < RUNS; r++) {
    if (ONLY === "both" || ONLY === "main") {
      const m = runPart("main", r);
      log(
        `main run ${r + 1}/${RUNS}: acked ${m.achievedRowsPerSec} rows/s, woken ${m.woken} (attributed ${m.attributed}, before-record ${m.wokenBeforeRecordProcessed}, without cause ${m.wokenWithoutCause}), ` +
          `timeout ${m.timedOut}, stale ${m.stale}, pending ${m.pendingAtEnd}, errors ${m.errors}; latency p50 ${m.p50} p90 ${m.p90} p99 ${m.p99} max ${m.max} ms; ` +
          `clean p50 ${m.latencyCleanMs.p50} (${m.latencyCleanMs.n}); kinds ${JSON.stringify(m.wokenByKind)}; ack p50 ${m.appendAckMs.p50} p99 ${m.appendAckMs.p99} ms; ` +
          `cpu ${m.cpuSeconds}s/${m.wallSeconds}s; end mode ${m.metaEnd.touchMode}, lag ${m.metaEnd.lagSourceOffsets}`
      );
      main.push(m);
    }
    if (ONLY === "both" || ONLY === "simple") {
      const s = runPart("simple", r);
      log(`simple run ${r + 1}/${RUNS}: p50 ${s.p50} p99 ${s.p99} max ${s.max} min ${s.min} ms (${s.latencyMs.n} samples, missed ${s.missed})`);
      simple.push(s);
    }
  }
  const med = (xs, f) => round(median(xs.map(f)), 2);
  const results = {};
  if (main.length) {
    results.main = {
      median_sentRowsPerSec: med(main, (x) => x.sentRowsPerSec),
      median_achievedRowsPerSec: med(main, (x) => x.achievedRowsPerSec),
      median_latencyP50Ms: med(main, (x) => x.p50),
      median_latencyP90Ms: med(main, (x) => x.p90),
      median_latencyP99Ms: med(main, (x) => x.p99),
      median_latencyMaxMs: med(main, (x) => x.max),
      median_cleanLatencyP50Ms: med(main, (x) => x.latencyCleanMs.p50),
      median_cleanLatencyP99Ms: med(main, (x) => x.latencyCleanMs.p99),
      median_waitsIssued: med(main, (x) => x.waitsIssued),
      median_woken: med(main, (x) => x.woken),
      median_attributed: med(main, (x) => x.attributed),
      median_wokenBeforeRecordProcessed: med(main, (x) => x.wokenBeforeRecordProcessed),
      median_wokenWithoutCause: med(main, (x) => x.wokenWithoutCause),
      median_timedOut: med(main, (x) => x.timedOut),
      median_stale: med(main, (x) => x.stale),
      median_pendingAtEnd: med(main, (x) => x.pendingAtEnd),
      median_cpuSeconds: med(main, (x) => x.cpuSeconds),
      median_cpuCores: med(main, (x) => x.cpuCores),
      median_harnessSyncSeconds: med(main, (x) => x.harnessSyncSeconds),
      median_wallSeconds: med(main, (x) => x.wallSeconds),
      median_appendAckP50Ms: med(main, (x) => x.appendAckMs.p50),
      median_appendAckP99Ms: med(main, (x) => x.appendAckMs.p99),
      median_ackToFlushP50Ms: med(main, (x) => x.latencyBreakdownMs.ackToFlush.p50),
      median_flushToResponseP50Ms: med(main, (x) => x.latencyBreakdownMs.flushToResponse.p50),
      runs: main,
    };
  }
  if (simple.length) {
    results.simple = {
      median_p50Ms: med(simple, (x) => x.p50),
      median_p99Ms: med(simple, (x) => x.p99),
      median_maxMs: med(simple, (x) => x.max),
      median_minMs: med(simple, (x) => x.min),
      runs: simple,
    };
  }
  console.log(
    JSON.stringify({
      bench: "B6-e2e",
      calls:
        "durable-touch: Store.open(temp file), createStream, TouchEngine(store), setTouchConfig({enabled:true}), activateTemplates(24); " +
        "writer Store.append(50 payloads), waiters TouchEngine.wait (fine, keys=[tenantId watch key], templateIdsUsed), meta",
      driver: DRIVER,
      isolation: "each run of each part in a fresh child process",
      workload: {
        generator: "testkit/gen-workload.mjs",
        seed: SEED,
        rateRowsPerSec: RATE,
        seconds: SECONDS,
        batch: BATCH,
        waiters: WAITERS,
        timeoutMs: TIMEOUT_MS,
        drainMs: DRAIN_MS,
        lead: `${MIN_LEAD}+U[0,${LEAD_SPAN}) records, up to ${MAX_TRIES} candidates`,
        simple: { samples: SIMPLE_SAMPLES, intervalMs: SIMPLE_INTERVAL_MS, entity: "public.e0", interestMode: "coarse" },
      },
      runs: RUNS,
      env: machine(),
      results,
    })
  );
}

try {
  if (CHILD === "main") await childMain();
  else if (CHILD === "simple") await childSimple();
  else if (CHILD === null) await parent();
  else fail(`--child must be main or simple, not ${CHILD}`);
} catch (e) {
  log(`e2e ${CHILD ?? "parent"} failed: ${e?.stack ?? e}`);
  for (const root of tempRoots) rmSync(root, { recursive: true, force: true });
  process.exit(1);
}
process.exit(0);
