// What a host-fed engine would cost the JS thread: the swap's design choice between (a) the
// engine reading rows and templates through the server's own SQLite binding on the JS thread,
// and (b) replacing that binding with ours so the engine reads natively (docs/swap.md, "The SQLite
// library"). Measures, under Bun, the JS-thread time to read the B6 workload's rows in
// 500-row batches (the server's `touchMaxBatchRows`) with the compat pool's reader (the
// reference worker's queries) through bun:sqlite, plus `processRows` handing them to the
// native processor (its synchronous part), per 1,000 rows. Under (b) the JS thread does none
// of it: the server calls `notify(stream)` once per append.
//
//   node_modules/.bin/bun bench/host-read.mjs [--rows 20000] [--rounds 3]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Store, processRows } from "../index.js";
import { HostReader } from "../compat/host-sqlite.mjs";
import { generateRecords } from "../testkit/gen-workload.mjs";
import { numArg, median } from "./common.mjs";

const ROWS = numArg("rows", 20_000);
const ROUNDS = numArg("rounds", 3);
const BATCH = 500;

const dir = mkdtempSync(join(tmpdir(), "dt-host-read-"));
const path = join(dir, "wal.sqlite");
const store = Store.open(path);
await store.createStream("s", { contentType: "application/json" });
const records = generateRecords({ n: ROWS, seed: 1 }).map((r) => JSON.stringify(r));
for (let i = 0; i < records.length; i += 1000) await store.append("s", records.slice(i, i + 1000));
await store.close();

const reader = new HostReader(path);
const request = (from, to) => ({
  stream: "s",
  fromOffset: BigInt(from),
  toOffset: BigInt(to),
  profile: { kind: "state-protocol", touch: { enabled: true } },
  maxRows: BATCH,
  maxBytes: 4 * 1024 * 1024,
  emitFineTouches: true,
  output: "packed",
});
const read = [];
const hand = [];
for (let round = 0; round < ROUNDS; round++) {
  let readMs = 0;
  let handMs = 0;
  const pending = [];
  for (let from = 0; from < ROWS; from += BATCH) {
    const to = Math.min(ROWS, from + BATCH) - 1;
    let t = performance.now();
    const templates = reader.activeTemplates("s");
    const rows = reader.walRows("s", BigInt(from), BigInt(to), BATCH, 4 * 1024 * 1024);
    readMs += performance.now() - t;
    t = performance.now();
    pending.push(processRows(rows, request(from, to), templates));
    handMs += performance.now() - t;
  }
  await Promise.all(pending);
  read.push((readMs / ROWS) * 1000);
  hand.push((handMs / ROWS) * 1000);
}
reader.close();
rmSync(dir, { recursive: true, force: true });
const out = {
  bench: "host-read",
  runtime: typeof Bun !== "undefined" ? `bun ${Bun.version}` : `node ${process.version}`,
  rows: ROWS,
  batchRows: BATCH,
  rounds: ROUNDS,
  jsMsPer1000Rows: { read: +median(read).toFixed(3), processRowsCall: +median(hand).toFixed(3), total: +(median(read) + median(hand)).toFixed(3) },
};
console.log(JSON.stringify(out));
