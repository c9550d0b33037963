// durable-touch/compat without the reference: the journal's waits beyond the native 1024-key
// limit, and the pool's reading and scheduling through a host driver handed in as
// `openDatabase` (runs under Node, which has no bun:sqlite): the reference's queries, reading
// stopped at the batch limits, results equal to processRows on the same rows, FIFO with
// `workerCount` batches at a time, stop() answering requests already running; and the
// subpath's declarations type-check a use shaped like the reference's (strict, isolatedModules).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test, dt, isBun, sleep, tempDir } from "./harness.mjs";
import { ROOT } from "./reference.mjs";
import { TouchJournal, TouchProcessorWorkerPool, parseTouchCursor, formatTouchCursor } from "durable-touch/compat";
import { ACTIVE_TEMPLATES_SQL } from "../compat/host-sqlite.mjs";

test("compat TouchJournal is the native journal; waits on more than 1024 keys work", async () => {
  assert.equal(parseTouchCursor, dt.parseTouchCursor);
  assert.equal(formatTouchCursor, dt.formatTouchCursor);
  const j = new TouchJournal({ bucketMs: 20, filterPow2: 22, k: 4, pendingMaxKeys: 100_000, keyIndexMaxKeys: 32 });
  assert.ok(j instanceof dt.TouchJournal);
  const keys = Array.from({ length: 2500 }, (_, i) => 10 + i);
  const woken = j.waitForAny({ keys, afterGeneration: j.getGeneration(), timeoutMs: 5000 });
  assert.equal(j.getActiveWaiters(), 3, "three native waits");
  j.touch(2400, 9n);
  const hit = await woken;
  assert.equal(hit.bucketMaxSourceOffsetSeq, 9n);
  assert.equal(j.getActiveWaiters(), 0, "the other parts are released");
  const t0 = Date.now();
  assert.equal(await j.waitForAny({ keys, afterGeneration: j.getGeneration(), timeoutMs: 150 }), null);
  assert.ok(Date.now() - t0 >= 145);
  const ac = new AbortController();
  const aborted = j.waitForAny({ keys, afterGeneration: j.getGeneration(), timeoutMs: 5000, signal: ac.signal });
  ac.abort();
  assert.equal(await aborted, null);
  const exact = Array.from({ length: 1500 }, (_, i) => (0xabc0000000000000n + BigInt(i)).toString(16));
  const byExact = j.waitForAny({ keys: [], exactKeys: exact, afterGeneration: j.getGeneration(), timeoutMs: 5000 });
  j.touch(77, 11n, exact[1400]);
  assert.equal((await byExact).bucketMaxSourceOffsetSeq, 11n);
  // Duplicates fold before splitting: 2000 copies of 3 keys are one native wait.
  const few = j.waitForAny({ keys: Array.from({ length: 2000 }, (_, i) => i % 3), afterGeneration: j.getGeneration(), timeoutMs: 5000 });
  assert.equal(j.getActiveWaiters(), 1);
  j.touch(2);
  assert.notEqual(await few, null);
  // An omitted generation is read as the reference's `u32(undefined)` (0): later flushes wake.
  const omitted = j.waitForAny({ keys, timeoutMs: 2000 });
  j.touch(12);
  assert.ok((await omitted).generation > 0);
  j.stop();
});

const rec = (i, authorId, op = "insert") => ({ type: "public.posts", key: String(i), value: { id: i, authorId }, ...(op === "update" ? { old_value: { id: i, authorId: authorId - 1 } } : {}), headers: { operation: op } });
const WAL = Array.from({ length: 40 }, (_, i) => ({ offset: BigInt(i), ts_ms: BigInt(1000 + 10 * i), payload: Buffer.from(JSON.stringify(rec(i, 40 + (i % 4), i % 2 ? "update" : "insert"))) }));
const TEMPLATE_ID = dt.keys.templateId("public.posts", ["authorId"]);
const TEMPLATES = [
  { template_id: TEMPLATE_ID, entity: "public.posts", fields_json: '["authorId"]', encodings_json: '["int64"]', active_from_source_offset: 0n },
  { template_id: "0000000000000001", entity: "public.posts", fields_json: "{bad", encodings_json: "[]", active_from_source_offset: 0n },
];

/** A host driver over arrays, recording what the pool asks of it. */
function fakeHost() {
  const log = { opened: [], exec: [], prepared: [], pulled: 0, reads: [], closed: 0 };
  const open = (path) => {
    log.opened.push(path);
    return {
      exec: (sql) => log.exec.push(sql),
      prepare: (sql) => {
        log.prepared.push(sql);
        return {
          all: (stream) => (sql === ACTIVE_TEMPLATES_SQL && stream === "s" ? TEMPLATES : []),
          *iterate(stream, from, to) {
            log.reads.push({ stream, from, to });
            for (const r of WAL) {
              if (r.offset < from || r.offset > to) continue;
              log.pulled++;
              yield r;
            }
          },
          finalize() {},
        };
      },
      close: () => log.closed++,
    };
  };
  return { log, open };
}

const request = (extra = {}) => ({ stream: "s", fromOffset: 0n, toOffset: 39n, maxRows: 500, maxBytes: 1 << 22, profile: { kind: "state-protocol", touch: { enabled: true } }, ...extra });

test("compat pool reads through the host driver with the reference's queries and limits, and returns processRows' result", async () => {
  const host = fakeHost();
  const pool = new TouchProcessorWorkerPool({ dbPath: "/host/wal.sqlite", workerSqliteCacheBytes: 8 << 20 }, 1, { openDatabase: host.open });
  pool.start();
  const res = await pool.processResult(request());
  assert.equal(res.status, "ok");
  assert.deepEqual(host.log.opened, ["/host/wal.sqlite"]);
  assert.match(host.log.exec.join("\n"), /journal_mode = WAL[\s\S]*busy_timeout = 5000/);
  assert.ok(host.log.exec.includes("PRAGMA cache_size = -8192;"));
  assert.ok(host.log.prepared.includes(ACTIVE_TEMPLATES_SQL));
  assert.ok(host.log.prepared.includes("SELECT offset, ts_ms, payload FROM wal WHERE stream=? AND offset>=? AND offset<=? ORDER BY offset"));
  const rows = WAL.map((r) => ({ offset: r.offset, tsMs: Number(r.ts_ms), payload: r.payload }));
  const templates = [{ templateId: TEMPLATE_ID, entity: "public.posts", fields: ["authorId"], encodings: ["int64"], activeFromSourceOffset: 0n }];
  const direct = await dt.processRows(rows, request(), templates);
  assert.deepEqual(res.value, { type: "result", id: 1, ...direct });
  assert.ok(direct.stats.templateTouchesEmitted > 0);

  // Reading stops where the batch stops: maxRows, then maxBytes (the first row always fits).
  host.log.pulled = 0;
  const five = await pool.processResult(request({ fromOffset: 10n, maxRows: 5 }));
  assert.equal(five.value.processedThrough, 14n);
  assert.equal(host.log.pulled, 6, "five rows taken, the sixth seen and left");
  host.log.pulled = 0;
  const tiny = await pool.processResult(request({ maxBytes: 1 }));
  assert.equal(tiny.value.stats.rowsRead, 1);
  assert.equal(host.log.pulled, 2);
  assert.deepEqual(host.log.reads.at(-2), { stream: "s", from: 10n, to: 39n });

  await pool.stop();
  assert.equal(host.log.closed, 1, "stop() closes the connection");
});

test("compat pool: FIFO, workerCount batches at a time, stop() answers running and queued requests", async () => {
  const host = fakeHost();
  const pool = new TouchProcessorWorkerPool({ dbPath: "db" }, 2, { openDatabase: host.open });
  pool.start();
  const froms = [0n, 5n, 10n, 15n, 20n];
  const all = froms.map((f) => pool.processResult(request({ fromOffset: f })));
  assert.deepEqual(host.log.reads.map((r) => r.from), [0n, 5n], "two batches read at once, in order");
  const results = await Promise.all(all);
  assert.deepEqual(host.log.reads.map((r) => r.from), froms, "then the rest, in arrival order");
  assert.deepEqual(results.map((r) => r.value.id), [1, 2, 3, 4, 5]);
  assert.deepEqual(results.map((r) => r.value.stats.rowsRead), [40, 35, 30, 25, 20]);

  const pending = froms.map((f) => pool.processResult(request({ fromOffset: f })));
  const stopped = pool.stop();
  for (const r of await Promise.all(pending)) assert.deepEqual({ status: r.status, error: r.error }, { status: "error", error: { kind: "worker_pool_failure", message: "worker pool stopped" } });
  await stopped;
  assert.deepEqual(await pool.processResult(request()).then((r) => r.error), { kind: "worker_pool_unavailable", message: "worker pool not started" });
  await pool.restart();
  const again = await pool.processResult(request());
  assert.equal(again.value.id, 11, "ids continue across restarts, as the reference's");
  assert.equal(host.log.opened.length, 2, "a new connection after the restart");
  await pool.stop();
});

test("compat pool: a host without a SQLite binding gets a worker_pool_failure, not a second SQLite", async () => {
  const pool = new TouchProcessorWorkerPool({ dbPath: "/nonexistent/dir/wal.sqlite" }, 1);
  pool.start();
  const r = await pool.processResult(request());
  assert.equal(r.status, "error");
  assert.equal(r.error.kind, "worker_pool_failure");
  const hasNodeSqlite = !isBun && typeof process.getBuiltinModule === "function" && process.getBuiltinModule("node:sqlite");
  if (!isBun && !hasNodeSqlite) assert.match(r.error.message, /no SQLite binding[\s\S]*openDatabase/);
  else assert.match(r.error.message, /unable to open database file/);
  await pool.stop();
  await sleep(0);
});

test("compat/index.d.ts types the reference's use of the journal and the pool (tsc strict, isolatedModules)", () => {
  const dir = tempDir("dt-compat-tsc-");
  mkdirSync(join(dir, "node_modules"));
  symlinkSync(ROOT, join(dir, "node_modules", "durable-touch"));
  for (const dep of ["better-result", "@types"]) symlinkSync(realpathSync(join(ROOT, "node_modules", dep)), join(dir, "node_modules", dep));
  writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module" }));
  writeFileSync(
    join(dir, "t.ts"),
    `import { Result } from "better-result";
import { TouchJournal, TouchProcessorWorkerPool, parseTouchCursor, formatTouchCursor, type TouchJournalMeta, type TouchJournalIntervalStats, type WorkerPoolProcessError, type TouchWaitResult } from "durable-touch/compat";
const j = new TouchJournal({ bucketMs: 100, filterPow2: 22, k: 4, pendingMaxKeys: 100_000, keyIndexMaxKeys: 32 });
const meta: TouchJournalMeta = j.getMeta();
const interval: TouchJournalIntervalStats = j.snapshotAndResetIntervalStats();
const cursor: string = formatTouchCursor(meta.epoch, j.getGeneration());
const parsed: { epoch: string; generation: number } | null = parseTouchCursor(cursor);
j.setCoalesceMs(10);
j.touch(1, 5n, undefined);
const hit = await j.waitForAny({ keys: [1], exactKeys: null, afterGeneration: 0, timeoutMs: 1, signal: new AbortController().signal });
const seq: bigint | undefined = hit?.bucketMaxSourceOffsetSeq;
const last: bigint = j.getLastFlushedSourceOffsetSeq();
const pool = new TouchProcessorWorkerPool({ dbPath: "x", workerSqliteCacheBytes: 0 }, 1);
pool.start();
const r = await pool.processResult({ stream: "s", fromOffset: 0n, toOffset: 1n, profile: { kind: "state-protocol" }, maxRows: 1, maxBytes: 1, emitFineTouches: true, fineTouchBudget: null, fineGranularity: "key", processingMode: "full", filterHotTemplates: false, hotTemplateIds: null });
if (Result.isError(r)) {
  const e: WorkerPoolProcessError = r.error;
  console.log(e.kind === "worker_pool_failure", e.message);
} else {
  const through: bigint = r.value.processedThrough;
  console.log(through, r.value.touches.map((t) => t.keyId >>> 0), r.value.stats.rowsRead);
}
await pool.restart();
await pool.stop();
const w: TouchWaitResult = { stale: false, touched: true, cursor };
console.log(parsed, seq, last, interval.heapSize, w);
`
  );
  const tsc = join(ROOT, "node_modules", "typescript", "bin", "tsc");
  const r = spawnSync("node", [tsc, "--noEmit", "--strict", "--isolatedModules", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--types", "node", "t.ts"], { cwd: dir, encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
