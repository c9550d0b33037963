// The host SQLite adapter: the Prisma Streams server's own hot SQLite patterns through its
// reference adapter (`sqlite/adapter.ts` → bun:sqlite) and through ours
// (`compat/sqlite-adapter.mjs` → the SQLite inside durable-touch), alternated in one run.
//
//   node_modules/.bin/bun bench/sqlite-adapter.mjs [--rounds 3] [--rows 20000] [--sync OFF]
//        [--payload 1024] [--fresh]
//
// Bun only (the reference adapter needs bun:sqlite). Each round runs both sides, in alternating
// order, each on a fresh file with the server's schema (`initSchema` from its db/schema.ts,
// which applies its pragmas: WAL, foreign_keys, busy_timeout 5000) and then `PRAGMA synchronous`
// = --sync (OFF by default, so the figures measure the adapters rather than this VM's fsync).
// The statements are the server's (db/db.ts, ingest.ts):
//   ingest   appendWalRows: per transaction getStream + 100 × insertWal (1 KB payload Uint8Array,
//            bigint offset and time, null routing key, content type) + updateStreamAppend;
//            --payload sets the payload's bytes, --fresh encodes a new payload per row (as the
//            server's append does, `TextEncoder.encode` of each record: under Bun a payload
//            of fewer than 1,000 bytes is then a typed array with no ArrayBuffer of its own)
//   get      getStream: the 26-column point SELECT by primary key
//   iterate  iterWalRange: prepare, iterate every WAL row of the stream (5 columns), finalize
//   update   a one-row UPDATE (setStreamLogicalSizeBytes) by run()
// Prints a table of medians (ops/s) and ours/bun ratios, and one JSON line.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { arg, median } from "./common.mjs";

if (typeof globalThis.Bun === "undefined") {
  console.error("bench/sqlite-adapter.mjs runs under Bun (the reference adapter is bun:sqlite)");
  process.exit(2);
}

const here = dirname(fileURLToPath(import.meta.url));
const REF = join(here, "..", "node_modules", "@prisma", "streams-server", "src");
const ROUNDS = Number(arg("rounds", 3));
const ROWS = Number(arg("rows", 20_000));
const SYNC = String(arg("sync", "OFF"));
const PAYLOAD = Math.max(1, Number(arg("payload", 1024)));
const FRESH = process.argv.includes("--fresh");
const PER_TX = 100;

const reference = await import(join(REF, "sqlite", "adapter.ts"));
const { initSchema } = await import(join(REF, "db", "schema.ts"));
const ours = await import(join(here, "..", "compat", "sqlite-adapter.mjs"));
const SIDES = { bun: reference.openSqliteDatabase, ours: ours.openSqliteDatabase };

const GET_STREAM = `SELECT stream, created_at_ms, updated_at_ms,
                content_type, profile, stream_seq, closed, closed_producer_id, closed_producer_epoch, closed_producer_seq, ttl_seconds,
                epoch, next_offset, sealed_through, uploaded_through, uploaded_segment_count,
                pending_rows, pending_bytes, logical_size_bytes, wal_rows, wal_bytes, last_append_ms, last_segment_cut_ms, segment_in_progress,
                expires_at_ms, stream_flags
         FROM streams WHERE stream = ? LIMIT 1;`;
const INSERT_WAL = `INSERT INTO wal(stream, offset, ts_ms, payload, payload_len, routing_key, content_type, flags)
         VALUES(?, ?, ?, ?, ?, ?, ?, ?);`;
const UPDATE_APPEND = `UPDATE streams
         SET next_offset = ?, updated_at_ms = ?, last_append_ms = ?,
             pending_rows = pending_rows + ?, pending_bytes = pending_bytes + ?,
             logical_size_bytes = logical_size_bytes + ?,
             wal_rows = wal_rows + ?, wal_bytes = wal_bytes + ?
         WHERE stream = ? AND (stream_flags & ?) = 0;`;
const WAL_RANGE = `SELECT offset, ts_ms, routing_key, content_type, payload
           FROM wal
           WHERE stream = ? AND offset >= ? AND offset <= ?
           ORDER BY offset ASC;`;
const SET_SIZE = `UPDATE streams SET logical_size_bytes=?, updated_at_ms=? WHERE stream=?;`;
const INSERT_STREAM = `INSERT INTO streams(stream, created_at_ms, updated_at_ms, content_type, profile, stream_seq, closed,
  closed_producer_id, closed_producer_epoch, closed_producer_seq, ttl_seconds, epoch, next_offset, sealed_through,
  uploaded_through, uploaded_segment_count, pending_rows, pending_bytes, logical_size_bytes, wal_rows, wal_bytes,
  last_append_ms, last_segment_cut_ms, segment_in_progress, expires_at_ms, stream_flags)
  VALUES(?, ?, ?, 'application/json', NULL, NULL, 0, NULL, NULL, NULL, NULL, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, ?, ?, 0, NULL, 0);`;

const STREAM = "bench-stream";
const payloads = Array.from({ length: 64 }, (_, i) => {
  const p = new Uint8Array(PAYLOAD);
  for (let j = 0; j < p.length; j++) p[j] = 32 + ((i * 31 + j * 7) % 90);
  return p;
});
const texts = payloads.map((p) => new TextDecoder().decode(p));
const encoder = new TextEncoder();

const now = () => Bun.nanoseconds() / 1e6;

function runSide(open) {
  const dir = mkdtempSync(join(tmpdir(), "dt-sqlbench-"));
  const db = open(join(dir, "bench.sqlite"));
  try {
    initSchema(db);
    db.exec(`PRAGMA synchronous = ${SYNC};`);
    const t0 = BigInt(Date.now());
    db.query(INSERT_STREAM).run(STREAM, t0, t0, t0, t0);
    const out = {};

    // ingest
    const getStream = db.query(GET_STREAM);
    const insertWal = db.query(INSERT_WAL);
    const updateAppend = db.query(UPDATE_APPEND);
    let offset = 0n;
    let start = now();
    for (let done = 0; done < ROWS; done += PER_TX) {
      const tx = db.transaction(() => {
        const st = getStream.get(STREAM);
        if (!st) throw new Error("stream missing");
        let bytes = 0n;
        const n = Math.min(PER_TX, ROWS - done);
        for (let i = 0; i < n; i++) {
          const p = FRESH ? encoder.encode(texts[(done + i) & 63]) : payloads[(done + i) & 63];
          bytes += BigInt(p.byteLength);
          insertWal.run(STREAM, offset, t0 + offset, p, p.byteLength, null, "application/json", 0);
          offset += 1n;
        }
        updateAppend.run(offset, t0, t0, BigInt(n), bytes, bytes, BigInt(n), bytes, STREAM, 2);
      });
      tx();
    }
    out.ingest = ROWS / ((now() - start) / 1000);

    // get
    start = now();
    let sum = 0;
    for (let i = 0; i < ROWS; i++) sum += Number(getStream.get(STREAM).next_offset);
    out.get = ROWS / ((now() - start) / 1000);
    if (sum !== ROWS * ROWS) throw new Error(`get: wrong next_offset (${sum})`);

    // iterate
    start = now();
    const stmt = db.prepare(WAL_RANGE);
    let rows = 0;
    let bytes = 0;
    for (const row of stmt.iterate(STREAM, 0, ROWS - 1)) {
      rows++;
      bytes += row.payload.byteLength;
    }
    stmt.finalize();
    out.iterate = rows / ((now() - start) / 1000);
    if (rows !== ROWS || bytes !== ROWS * PAYLOAD) throw new Error(`iterate: ${rows} rows, ${bytes} bytes`);

    // update
    const setSize = db.query(SET_SIZE);
    start = now();
    for (let i = 0; i < ROWS; i++) setSize.run(i, t0, STREAM);
    out.update = ROWS / ((now() - start) / 1000);
    return out;
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const PATTERNS = ["ingest", "get", "iterate", "update"];
const results = { bun: [], ours: [] };
runSide(SIDES.bun); // warm up both (JIT, page cache) before the timed rounds
runSide(SIDES.ours);
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? ["bun", "ours"] : ["ours", "bun"];
  for (const side of order) results[side].push(runSide(SIDES[side]));
  Bun.gc(true);
}
const fmt = (x) => Math.round(x).toLocaleString("en-US");
const summary = {};
console.log(`host SQLite adapter, Bun ${Bun.version}, ${ROWS} rows, synchronous=${SYNC}, medians of ${ROUNDS} rounds (ops/s)`);
console.log("pattern   bun:sqlite    ours          ours/bun");
for (const p of PATTERNS) {
  const b = median(results.bun.map((x) => x[p]));
  const o = median(results.ours.map((x) => x[p]));
  summary[p] = { bun: Math.round(b), ours: Math.round(o), ratio: Math.round((o / b) * 100) / 100 };
  console.log(`${p.padEnd(9)} ${fmt(b).padStart(11)}   ${fmt(o).padStart(11)}   ${(o / b).toFixed(2).padStart(8)}`);
}
console.log(JSON.stringify({ bench: "sqlite-adapter", rows: ROWS, synchronous: SYNC, rounds: ROUNDS, results: summary }));
