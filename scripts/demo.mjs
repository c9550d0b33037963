// The main job for now: open an embedded SQLite file under ./data, create a stream, append
// State Protocol records (the shared benchmark workload), read them back and print stats.
//
//   npm start                # 20,000 records into ./data/demo.sqlite
//   node scripts/demo.mjs --n 100000 --data ./somewhere
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { createRequire } from "node:module";
import { generateRecords, walTsMs } from "../testkit/gen-workload.mjs";

const require = createRequire(import.meta.url);
const { Store } = require("../index.js");

const argv = process.argv.slice(2);
const flag = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && argv[i + 1] !== undefined ? argv[i + 1] : (process.env[name.toUpperCase()] ?? def);
};
const n = Number(flag("n", 20000));
const dataDir = resolve(flag("data", process.env.DATA_DIR ?? "./data"));
mkdirSync(dataDir, { recursive: true });
const path = join(dataDir, "demo.sqlite");

const store = Store.open(path);
const stream = `demo-${Date.now()}`;
await store.createStream(stream, { contentType: "application/json" });
const lines = generateRecords({ n, seed: 1 });

const t0 = performance.now();
const BATCH = 256;
const inflight = [];
for (let i = 0; i < n; i += BATCH) {
  const payloads = lines.slice(i, i + BATCH).map((l) => Buffer.from(l));
  inflight.push(store.append(stream, payloads, { appendMs: walTsMs(i) }));
}
const acks = await Promise.all(inflight);
const appendMs = performance.now() - t0;

let read = 0;
let bytes = 0;
let from = 0n;
const t1 = performance.now();
for (;;) {
  const rows = await store.read(stream, { from, limit: 5000 });
  if (rows.length === 0) break;
  for (const r of rows) {
    JSON.parse(r.payload.toString("utf8"));
    bytes += r.payload.length;
  }
  read += rows.length;
  from = rows[rows.length - 1].offset + 1n;
}
const readMs = performance.now() - t1;

const info = await store.getStream(stream);
const stats = store.stats();
await store.close();

const last = acks[acks.length - 1];
console.log(`durable-touch demo: ${path}`);
console.log(`stream ${stream}: ${n} State Protocol records appended in ${acks.length} calls (${(n / (appendMs / 1000)).toFixed(0)} rows/s), last offset ${last.lastOffset}`);
console.log(`read back ${read} rows, ${(bytes / 1e6).toFixed(1)} MB (${(read / (readMs / 1000)).toFixed(0)} rows/s); next offset ${info.nextOffset}, wal_rows ${info.walRows}`);
console.log(`store stats: ${JSON.stringify(stats, null, 2)}`);
if (read !== n || info.nextOffset !== BigInt(n)) {
  console.error("demo failed: rows read back do not match rows appended");
  process.exit(1);
}
