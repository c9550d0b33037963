// B2 (process-coarse) and B3 (process-fine): touch processor throughput through processRows,
// on one thread (one batch in flight at a time, like the reference's single worker) and on
// all cores (every batch of the pass in flight at once; the native pool runs one per core).
//
//   node bench/process.mjs [--runs 3] [--n 200000] [--nFine 100000] [--seed 1]
//
// Same workload and requests as bench/reference/b2-process-coarse.ts / b3-process-fine.ts:
// the first n records of gen-workload.mjs, ts_ms = T0 + offset, batches of maxRows 10,000
// (maxBytes 64 MiB); B2 with emitFineTouches=false and budget 0, B3 with the 24 templates,
// key granularity and an unlimited budget. Rows are prepared before timing; each request
// gets the rows of its range (what a host's WAL range read returns). Time includes reading
// the rows from JS, processing and building the touch objects on the JS thread. "One thread"
// is one batch in flight: the batch runs on one pool thread, which starts on the first 256
// rows while the JS thread reads the rest of them (as the reference's main thread and worker
// are two threads). Prints one JSON line per benchmark.
//
// Two output forms are timed, alternately in each run: touch objects (the default, the
// reference's reply; the headline `results.medianRowsPerSec` and `results.allCores`) and
// `output: "packed"` (the same touches as typed arrays, `results.packed`). Each pass folds the
// results into counters; the packed pass reads `packed.count` and never builds objects.
//
// `results.objectFloor` times what no implementation of the default output avoids: allocating
// the touch objects of the pass in JS (with their strings made beforehand), so rows divided by
// it is a ceiling on the objects output's rows/s in this runtime, whatever the processing costs.
//
// `results.storeBacked` runs the same batches through `TouchEngine.processBatch`, which reads
// the rows and the active templates from the native Store (SQLite), as the reference's worker
// reads its SQLite (a store reader thread reads while one pool thread processes, chunk by
// chunk; one batch in flight): the WAL is written first (one append per record, with
// appendMs = T0 + offset; the 24 templates activated before the first row for B3), then timed
// one batch at a time, both outputs (skipped with --no-store).
//
// `results.native` adds the native core alone (examples/process_native.rs, built with
// `cargo --release`; skipped with --no-native or without cargo): the same batches without the
// JS side (rows handed in, touch objects built), which is what the engine's store-backed
// batches cost before the journal.
import { cpus, loadavg, tmpdir } from "node:os";
import { spawnSync } from "node:child_process";
import { writeFileSync, rmSync, mkdtempSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { generateRecords, templateDecls } from "../testkit/gen-workload.mjs";
import { createRequire } from "node:module";
import { workloadRows, activeTemplates, requestBase, canonicalSha } from "../testkit/process-workload.mjs";
import { unpackTouches } from "../lib/packed.mjs";
import { numArg, median } from "./common.mjs";

const dt = createRequire(import.meta.url)("../index.js");
const REFERENCE_SHA_20K = "0ada709b038b9664d18d07338b107faa64120f1f3eef7c32b5bfb4a5b819892c";

const RUNS = numArg("runs", 3);
const N = numArg("n", 200_000);
const N_FINE = numArg("nFine", 100_000);
const SEED = numArg("seed", 1);
const BATCH = 10_000;

const round = (x, d = 1) => Math.round(x * 10 ** d) / 10 ** d;
const log = (m) => process.stderr.write(`[process] ${m}\n`);

function env() {
  return { runtime: typeof Bun !== "undefined" ? `bun ${Bun.version}` : `node ${process.version}`, cpus: cpus().length, cpuModel: cpus()[0]?.model, loadavg: loadavg().map((x) => round(x, 2)), processorThreads: dt.processorThreads?.() };
}

/** One pass over [0, n-1]: sequential batches, or all batches in flight at once; through
 *  processRows, or with `engine` through TouchEngine.processBatch (rows read from its Store).
 *  `each` (if given) sees every batch result. */
async function pass(rows, base, templates, { parallel, capture = 0, packed = false, engine = null, each = null }) {
  const n = rows.length;
  const toOffset = BigInt(n - 1);
  const request = packed ? { ...base, output: "packed" } : base;
  const one = engine
    ? (from) => engine.processBatch({ ...request, fromOffset: BigInt(from), toOffset })
    : (from) => dt.processRows(rows.slice(from, from + BATCH), { ...request, fromOffset: BigInt(from), toOffset }, templates);
  // Results are folded into counters as they arrive (touches are not kept, except the
  // captured ones), as the reference bench does.
  const acc = { batches: 0, rowsRead: 0, bytesRead: 0, changes: 0, touches: 0, tableTouches: 0, templateTouches: 0, dropped: 0 };
  const captured = capture ? [] : null;
  const fold = (r) => {
    acc.batches++;
    acc.rowsRead += r.stats.rowsRead;
    acc.bytesRead += r.stats.bytesRead;
    acc.changes += r.stats.changes;
    acc.touches += packed ? r.packed.count : r.touches.length;
    acc.tableTouches += r.stats.tableTouchesEmitted;
    acc.templateTouches += r.stats.templateTouchesEmitted;
    acc.dropped += r.stats.fineTouchesDroppedDueToBudget;
    if (captured && r.processedThrough < BigInt(capture)) for (const t of packed ? unpackTouches(r.packed) : r.touches) captured.push(t);
    each?.(r);
    return r.processedThrough;
  };
  const t0 = performance.now();
  if (parallel) {
    const starts = [];
    for (let f = 0; f < n; f += BATCH) starts.push(f);
    await Promise.all(starts.map((f) => one(f).then(fold)));
  } else {
    let from = 0;
    while (from < n) from = Number(fold(await one(from))) + 1;
  }
  const seconds = (performance.now() - t0) / 1000;
  if (acc.rowsRead !== n) throw new Error(`rowsRead ${acc.rowsRead} != ${n}`);
  return { seconds: round(seconds, 4), rowsPerSec: round(n / seconds), ...acc, captured };
}

/** The native core's rates (one thread, all cores) for B2 and B3, or null. */
function nativeRates() {
  if (process.argv.includes("--no-native")) return null;
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const file = join(tmpdir(), `dt-process-native-${process.pid}.jsonl`);
  writeFileSync(file, generateRecords({ n: N, seed: SEED }).join("\n") + "\n");
  try {
    log("native core: cargo run --release --example process_native (builds on first use)");
    const r = spawnSync("cargo", ["run", "--release", "--quiet", "--example", "process_native", "--", file, "--json", "--runs", String(RUNS)], {
      cwd: root,
      stdio: ["ignore", "pipe", "inherit"],
      encoding: "utf8",
    });
    if (r.status !== 0) {
      log(`native core skipped (cargo exited ${r.status ?? r.error?.message})`);
      return null;
    }
    return JSON.parse(r.stdout.trim().split("\n").pop());
  } finally {
    rmSync(file, { force: true });
  }
}

/** The floor under the default output: the time to allocate the touch objects alone, for the
 *  batches of one pass, with every value they hold made beforehand (strings interned, so a
 *  repeated routing key or watermark is one string) and no native call. Whatever builds
 *  them, the objects output cannot run faster than this. */
async function objectFloor(rows, base, templates) {
  const batches = [];
  const intern = new Map();
  const one = (v) => {
    if (v === undefined) return v;
    let s = intern.get(v);
    if (s === undefined) intern.set(v, (s = v));
    return s;
  };
  // The batches of an untimed packed pass, each touch's values made once.
  const prepared = await pass(rows, base, templates, {
    parallel: false,
    packed: true,
    each: (r) => {
      const ts = unpackTouches(r.packed);
      batches.push({
        n: ts.length,
        keyIds: r.packed.keyIds,
        routingKey: ts.map((t) => one(t.routingKey)),
        watermark: ts.map((t) => one(t.watermark)),
        entity: ts.map((t) => one(t.entity)),
        kind: ts.map((t) => one(t.kind)),
        templateId: ts.map((t) => one(t.templateId)),
      });
    },
  });
  const touches = prepared.touches;
  const timed = () => {
    let table = 0;
    const t0 = performance.now();
    for (const b of batches) {
      const out = new Array(b.n);
      for (let i = 0; i < b.n; i++) {
        out[i] = { keyId: b.keyIds[i], routingKey: b.routingKey[i], watermark: b.watermark[i], entity: b.entity[i], kind: b.kind[i], templateId: b.templateId[i] };
      }
      for (const t of out) table += t.kind === "table" ? 1 : 0;
    }
    const seconds = (performance.now() - t0) / 1000;
    // The fold keeps the objects in use (and checks them).
    if (table !== prepared.tableTouches) throw new Error(`objects floor: ${table} table touches, expected ${prepared.tableTouches}`);
    return seconds;
  };
  timed(); // warm-up
  const seconds = [];
  for (let i = 0; i < RUNS; i++) seconds.push(timed());
  const s = median(seconds);
  log(`objects floor: ${round(s * 1000, 1)} ms to allocate ${touches} touch objects (runs: ${seconds.map((x) => round(x * 1000, 1)).join(", ")} ms)`);
  return {
    driver: "pure JS: new Array(n) and one 6-property object per touch from prepared values (no native call, no string made), the fold of the passes",
    touches,
    medianSeconds: round(s, 4),
    rowsPerSecCeiling: round(rows.length / s),
  };
}

/** Store-backed passes: TouchEngine.processBatch over a WAL of the same rows. */
async function storeBacked(rows, kind, base) {
  if (process.argv.includes("--no-store")) return null;
  const dir = mkdtempSync(join(tmpdir(), "dt-process-store-"));
  const store = dt.Store.open(join(dir, "wal.sqlite"));
  // checkIntervalMs 0: no safety-net tick; the engine's own loop processes the appends once
  // (settled below) and then idles while the batches are timed.
  const engine = new dt.TouchEngine(store, { checkIntervalMs: 0 });
  try {
    await store.createStream(base.stream, { contentType: "application/json" });
    engine.setTouchConfig(base.stream, { enabled: true });
    if (kind === "fine") engine.activateTemplates(base.stream, templateDecls());
    // One append per row, all in flight: offsets follow the calls, each row keeps its tsMs.
    await Promise.all(rows.map((r) => store.append(base.stream, [r.payload], { appendMs: r.tsMs })));
    await engine.meta(base.stream, { settle: "flush" });
    await pass(rows, base, [], { parallel: false, engine }); // warm-up
    const objects = [];
    const packed = [];
    for (let i = 0; i < RUNS; i++) {
      objects.push(await pass(rows, base, [], { parallel: false, engine }));
      packed.push(await pass(rows, base, [], { parallel: false, packed: true, engine }));
      log(`${kind} store-backed run ${i + 1}/${RUNS}: objects ${objects[i].rowsPerSec} rows/s, packed ${packed[i].rowsPerSec} rows/s`);
    }
    return { objects, packed };
  } finally {
    await engine.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function bench(name, n, kind, templates, native) {
  log(`${name}: generating ${n} records`);
  const rows = workloadRows(n, SEED);
  const payloadBytes = rows.reduce((a, r) => a + r.payload.length, 0);
  const base = requestBase(kind);
  await pass(rows.slice(0, BATCH), base, templates, { parallel: false }); // warm-up
  await pass(rows.slice(0, BATCH), base, templates, { parallel: false, packed: true });
  const single = [];
  const multi = [];
  const singlePacked = [];
  const multiPacked = [];
  let fixture = null;
  const capture = (i) => (kind === "fine" && i === 0 ? 20_000 : 0);
  const fixtureOf = (p) => ({ firstRecords: 20_000, touches: p.captured.length, sha256Canonical: canonicalSha(p.captured) });
  // The packed path's fixture comes from an untimed pass (rebuilding objects costs time).
  const fixturePacked = kind === "fine" ? fixtureOf(await pass(rows.slice(0, 20_000), base, templates, { parallel: false, capture: 20_000, packed: true })) : null;
  for (let i = 0; i < RUNS; i++) {
    const p = await pass(rows, base, templates, { parallel: false, capture: capture(i) });
    if (p.captured) fixture = fixtureOf(p);
    delete p.captured;
    log(`${name} run ${i + 1}/${RUNS} one thread, objects: ${p.rowsPerSec} rows/s (${p.seconds}s, ${p.touches} touches)`);
    single.push(p);
    const pp = await pass(rows, base, templates, { parallel: false, packed: true });
    delete pp.captured;
    log(`${name} run ${i + 1}/${RUNS} one thread, packed: ${pp.rowsPerSec} rows/s (${pp.seconds}s, ${pp.touches} touches)`);
    singlePacked.push(pp);
    const q = await pass(rows, base, templates, { parallel: true });
    delete q.captured;
    log(`${name} run ${i + 1}/${RUNS} all cores, objects: ${q.rowsPerSec} rows/s`);
    multi.push(q);
    const qp = await pass(rows, base, templates, { parallel: true, packed: true });
    delete qp.captured;
    log(`${name} run ${i + 1}/${RUNS} all cores, packed: ${qp.rowsPerSec} rows/s`);
    multiPacked.push(qp);
  }
  const first = single[0];
  for (const [a, b] of [[single, singlePacked], [multi, multiPacked]]) {
    a.forEach((p, i) => {
      if (p.touches !== b[i].touches) throw new Error(`packed pass emitted ${b[i].touches} touches, objects ${p.touches}`);
    });
  }
  if (fixture) {
    fixture.matchesReference = fixture.sha256Canonical === REFERENCE_SHA_20K;
    fixture.packedMatchesReference = fixturePacked?.sha256Canonical === REFERENCE_SHA_20K;
  }
  const threads = env().processorThreads ?? cpus().length;
  const summary = (one, all) => ({
    medianRowsPerSec: round(median(one.map((p) => p.rowsPerSec))),
    medianMBPerSec: round(median(one.map((p) => payloadBytes / 1e6 / p.seconds)), 3),
    medianSeconds: round(median(one.map((p) => p.seconds)), 4),
    runs: one.map((p) => ({ rowsPerSec: p.rowsPerSec, seconds: p.seconds, touches: p.touches })),
    allCores: {
      threads,
      medianRowsPerSec: round(median(all.map((p) => p.rowsPerSec))),
      medianSeconds: round(median(all.map((p) => p.seconds)), 4),
      runs: all.map((p) => ({ rowsPerSec: p.rowsPerSec, seconds: p.seconds, touches: p.touches })),
    },
  });
  const line = {
    bench: name,
    driver:
      "durable-touch processRows (native rayon pool); one thread = one batch in flight, all cores = every batch in flight. " +
      "results.medianRowsPerSec / results.allCores: the default output, one TouchRow object per touch (the reference's reply). " +
      'results.packed: output: "packed", the same touches as typed arrays (no touch objects built).',
    request: { maxRows: BATCH, maxBytes: base.maxBytes, emitFineTouches: base.emitFineTouches, fineTouchBudget: base.fineTouchBudget, fineGranularity: base.fineGranularity, processingMode: base.processingMode },
    workload: { generator: "testkit/gen-workload.mjs", n, seed: SEED, payloadBytes, tsMs: "T0_MS + offset", templates: templates.length },
    runs: RUNS,
    env: env(),
    results: {
      medianRowsPerSec: round(median(single.map((p) => p.rowsPerSec))),
      medianMBPerSec: round(median(single.map((p) => payloadBytes / 1e6 / p.seconds)), 3),
      medianSeconds: round(median(single.map((p) => p.seconds)), 4),
      batches: first.batches,
      rowsRead: first.rowsRead,
      changes: first.changes,
      touches: first.touches,
      tableTouches: first.tableTouches,
      templateTouches: first.templateTouches,
      fineTouchesDroppedDueToBudget: first.dropped,
      runs: single.map((p) => ({ rowsPerSec: p.rowsPerSec, seconds: p.seconds, touches: p.touches })),
      allCores: {
        threads: env().processorThreads ?? cpus().length,
        medianRowsPerSec: round(median(multi.map((p) => p.rowsPerSec))),
        medianSeconds: round(median(multi.map((p) => p.seconds)), 4),
        runs: multi.map((p) => ({ rowsPerSec: p.rowsPerSec, seconds: p.seconds, touches: p.touches })),
      },
    },
  };
  line.results.packed = { output: "packed", ...summary(singlePacked, multiPacked) };
  line.results.objectFloor = await objectFloor(rows, base, templates);
  const fromStore = await storeBacked(rows, kind, base);
  if (fromStore) {
    for (const p of [...fromStore.objects, ...fromStore.packed]) {
      if (p.touches !== first.touches) throw new Error(`store-backed pass emitted ${p.touches} touches, processRows ${first.touches}`);
    }
    line.results.storeBacked = {
      driver: "TouchEngine.processBatch (rows and templates read from the native Store), one batch in flight",
      medianRowsPerSec: round(median(fromStore.objects.map((p) => p.rowsPerSec))),
      packed: { medianRowsPerSec: round(median(fromStore.packed.map((p) => p.rowsPerSec))) },
    };
  }
  if (native) line.results.native = { driver: "examples/process_native.rs (no JS)", n: native.rows, medianRowsPerSec: native.medianRowsPerSec, allCores: native.allCores };
  if (fixture) line.fixture = fixture;
  console.log(JSON.stringify(line));
}

const native = nativeRates();
await bench("B2-process-coarse", N, "coarse", [], native?.coarse);
await bench("B3-process-fine", N_FINE, "fine", activeTemplates(), native?.fine);
