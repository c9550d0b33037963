// Drives every raw N-API path of the native module, for memory checkers and crash hunts:
// the fast and the general `waitForAny`, touches, flushes and timeouts; aborts through the
// shared listener (shared and separate signals, already aborted ones); `stop()` / `close()`
// with waits pending; worker threads doing the same; `processRows` with object and packed
// output, `touchMany` from packed columns; detached buffers (the journal's argument buffer, the
// host SQL slots, typed arrays handed in); the host SQL functions (text, blobs, big integers);
// and garbage-collector pressure throughout.
//
//   node --expose-gc scripts/stress.mjs [--iterations N] [--workers N]
//   node_modules/.bin/bun scripts/stress.mjs --iterations 200
//   npm run check:memcheck          # the same under Valgrind memcheck (scripts/memcheck.sh)
//
// Prints one line per iteration group and `stress: ok (...)` at the end; any failed check
// throws (exit 1).
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const dt = require("../index.js");
const internal = require("../lib/internal/native.js");
const { TouchJournal, Store, TouchEngine, processRows } = dt;

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const gc = typeof globalThis.gc === "function" ? globalThis.gc : typeof Bun !== "undefined" ? () => Bun.gc(true) : () => {
  // No exposed collector: make garbage instead.
  let junk = [];
  for (let i = 0; i < 2000; i++) junk.push({ i, s: "x".repeat(64), a: new Uint8Array(128) });
  junk = null;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const detach = (buf) => {
  try {
    structuredClone(buf, { transfer: [buf] });
    return true;
  } catch {
    return false;
  }
};

/** Waits of every shape on one journal; touches, flushes, timeouts, aborts, stop. */
async function journalRound(seed) {
  const j = new TouchJournal({ bucketMs: 5 });
  const ac = new AbortController();
  const waits = [];
  for (let i = 0; i < 40; i++) {
    const keys = [seed + i, seed + i + 1, 7];
    switch (i % 8) {
      case 0: // fast path
        waits.push(j.waitForAny({ keys, timeoutMs: 2000 }));
        break;
      case 1: // general path: typed array
        waits.push(j.waitForAny({ keys: Uint32Array.from(keys), afterGeneration: 0, timeoutMs: 2000 }));
        break;
      case 2: // general path: exact keys
        waits.push(j.waitForAny({ keys, exactKeys: ["00000000000000aa", "nothex"], timeoutMs: 2000 }));
        break;
      case 3: // shared signal, aborted below
        waits.push(j.waitForAny({ keys, timeoutMs: 2000, signal: ac.signal }));
        break;
      case 4: { // own signal, aborted at once after registering
        const own = new AbortController();
        waits.push(j.waitForAny({ keys, timeoutMs: 2000, signal: own.signal }));
        own.abort();
        break;
      }
      case 5: // short timeout (timer thread → completion port)
        waits.push(j.waitForAny({ keys: [999_999], timeoutMs: 1 + (i % 3) }));
        break;
      case 6: // already aborted, and a bad signal
        waits.push(j.waitForAny({ keys, timeoutMs: 10, signal: AbortSignal.abort() }));
        waits.push(j.waitForAny({ keys, timeoutMs: 10, signal: Object.freeze(new AbortController().signal) }).catch((e) => e.code));
        break;
      default: // left for stop()
        waits.push(j.waitForAny({ keys: [123_456_789 + i], timeoutMs: 60_000 }));
    }
  }
  // Detach the fast path's argument buffer: later waits take the general path.
  if (seed % 3 === 0) {
    for (const sym of Object.getOwnPropertySymbols(j)) {
      const buf = j[sym]?.u32?.buffer;
      if (buf) detach(buf);
    }
    waits.push(j.waitForAny({ keys: [seed, 7], timeoutMs: 2000 }));
  }
  j.touch(7, BigInt(seed), "00000000000000AA");
  j.touchMany(Uint32Array.of(seed, seed + 1), BigInt64Array.of(1n, 2n), BigUint64Array.of(0xabn, 0n), Uint8Array.of(1, 0));
  j.touchMany([seed + 2], [3n], ["00000000000000ab"]);
  ac.abort();
  gc();
  await sleep(8); // a timer-driven flush (posted to the JS thread)
  j.flush();
  const stopped = j.stop(); // answers the rest with null
  assert.ok(stopped > 0);
  const hits = await Promise.all(waits);
  assert.ok(hits.some((h) => h && typeof h.generation === "number"));
}

/** processRows with objects and packed output; packed columns fed to a journal. */
async function processRound(seed) {
  const tpl = dt.keys.templateId("public.todos", ["tenantId"]);
  const templates = [{ templateId: tpl, entity: "public.todos", fields: ["tenantId"], encodings: ["string"], activeFromSourceOffset: 0n }];
  const rows = [];
  for (let i = 0; i < 300; i++) {
    const rec = { type: "public.todos", key: String(i), value: { id: String(i), tenantId: `t${(seed + i) % 5}`, title: "é\u{1F600}" }, headers: { operation: i % 3 ? "update" : "insert" } };
    if (i % 3) rec.oldValue = { id: String(i), tenantId: `t${i % 4}` };
    rows.push({ offset: BigInt(i), tsMs: 1000 + i, payload: Buffer.from(JSON.stringify(rec)) });
  }
  rows.push({ offset: 300n, tsMs: 1300, payload: "not a buffer, a string: slow path" });
  const request = { stream: "s", fromOffset: 0n, toOffset: 400n, profile: { kind: "state-protocol", touch: { enabled: true } }, maxRows: 1000, maxBytes: 1e9 };
  const objects = await processRows(rows, request, templates);
  const packed = await processRows(rows.slice(0, 300), { ...request, output: "packed" }, templates);
  assert.equal(packed.packed.count, packed.packed.keyIds.length);
  assert.ok(objects.touches.length > 0);
  const j = new TouchJournal();
  const p = packed.packed;
  j.touchMany(p.keyIds, p.watermarks, p.routingKeys, p.hasRoutingKey);
  // Detach a result column (the journal read it already) and let the GC free the rest.
  detach(p.keyIds.buffer);
  j.flush();
  j.stop();
  await processRows(rows, { ...request, fromOffset: -1n }).catch((e) => assert.equal(e.code, "ERR_INVALID_ARGUMENT"));
  await processRows("nope", request).catch((e) => assert.equal(e.code, "ERR_INVALID_ARGUMENT"));
}

/** Store + engine: waits with signals, close with waits pending. */
async function engineRound(seed, dir) {
  const store = Store.open(seed % 2 ? ":memory:" : join(dir, `s${seed}.sqlite`));
  await store.createStream("todos", { contentType: "application/json" });
  const engine = new TouchEngine(store, { workers: 1, checkIntervalMs: 20 });
  engine.setTouchConfig("todos", { enabled: true });
  const { activated } = engine.activateTemplates("todos", [{ entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] }]);
  const tplId = activated[0].templateId;
  const { cursor } = await engine.meta("todos");
  const ac = new AbortController();
  const waits = [];
  for (let i = 0; i < 12; i++) {
    waits.push(
      engine
        .wait({ stream: "todos", cursor, keys: [dt.keys.watchKey(tplId, [`t${i % 3}`])], templateIdsUsed: [tplId], timeoutMs: 3000, signal: i % 2 ? ac.signal : undefined })
        .catch((e) => e.code),
    );
  }
  const payloads = [];
  for (let i = 0; i < 30; i++) payloads.push(JSON.stringify({ type: "public.todos", key: String(i), value: { id: String(i), tenantId: `t${i % 3}` }, headers: { operation: "insert" } }));
  await store.append("todos", payloads);
  ac.abort();
  const rows = await store.read("todos", { from: 0n, limit: 10 });
  assert.equal(rows.length, 10);
  detach(rows[0].payload.buffer);
  // Left pending for close().
  waits.push(engine.wait({ stream: "todos", cursor: "now", keyIds: [1], timeoutMs: 60_000 }));
  await engine.processBatch({ stream: "todos", fromOffset: 0n, toOffset: 29n, profile: { kind: "state-protocol", touch: { enabled: true } }, maxRows: 100, maxBytes: 1e9, output: seed % 2 ? "packed" : "objects" });
  gc();
  await engine.close();
  const settled = await Promise.all(waits);
  assert.equal(settled.length, 13);
  await store.close();
  await store.append("todos", ["x"]).catch((e) => assert.equal(e.code, "ERR_CLOSED"));
}

/** The host SQL functions behind compat/sqlite-adapter.mjs, with a detached slots buffer. */
function sqlRound(seed, dir) {
  const f = internal._sqlFunctions();
  const slots = f._sqlSlots();
  const db = f._sqlOpen(join(dir, `h${seed}.sqlite`));
  f._sqlExec(db, "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, s TEXT, b BLOB, n INTEGER)");
  const ins = f._sqlPrepare(db, "INSERT INTO t (s, b, n) VALUES (?, ?, ?)", true);
  for (let i = 0; i < 50; i++) f._sqlRun(ins, `row ${i} ${"é".repeat(i % 7)}`, new Uint8Array([i, 1, 2]), i % 2 ? 2n ** 60n + BigInt(i) : i);
  if (seed % 2 === 0) {
    // Detached: the native side keeps writing its own memory; this copy reads nothing more.
    detach(slots);
    gc();
  }
  const sel = f._sqlPrepare(db, "SELECT id, s, b, n FROM t WHERE id > ?", false);
  const vals = f._sqlAll(sel, 0);
  assert.ok(Array.isArray(vals));
  f._sqlIterate(sel, 3, 10);
  f._sqlMore(sel, 1000);
  f._sqlReset(sel);
  f._sqlGet(sel, 5);
  f._sqlColumns(sel);
  assert.throws(() => f._sqlRun(ins, 1, 2), /expected 3 values/);
  assert.throws(() => f._sqlRun({}, 1), /statement handle/);
  f._sqlFinalize(sel);
  f._sqlFinalize(ins);
  f._sqlClose(db);
  assert.throws(() => f._sqlGet(sel), /finalized/);
}

async function iteration(i, dir) {
  await journalRound(i);
  await processRound(i);
  await engineRound(i, dir);
  sqlRound(i, dir);
  gc();
}

async function main() {
  const iterations = arg("--iterations", 3);
  const workers = arg("--workers", 2);
  const dir = mkdtempSync(join(tmpdir(), "dt-stress-"));
  try {
    const started = Date.now();
    const running = [];
    for (let w = 0; w < workers; w++) {
      running.push(
        new Promise((resolve, reject) => {
          const worker = new Worker(new URL(import.meta.url), { workerData: { iterations: Math.max(1, iterations >> 2), dir, id: w } });
          worker.once("error", reject);
          worker.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`worker exited with ${code}`))));
        }),
      );
    }
    for (let i = 0; i < iterations; i++) {
      await iteration(i, dir);
      if ((i + 1) % 10 === 0 || i + 1 === iterations) console.log(`stress: ${i + 1}/${iterations} iterations`);
    }
    await Promise.all(running);
    console.log(`stress: ok (${iterations} iterations, ${workers} workers, ${Date.now() - started} ms)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (isMainThread) {
  await main();
} else {
  const { iterations, dir, id } = workerData;
  for (let i = 0; i < iterations; i++) await iteration(1000 * (id + 1) + i, dir);
  parentPort?.postMessage("done");
}
