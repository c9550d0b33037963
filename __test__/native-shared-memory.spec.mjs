// Native memory shared with JavaScript as ArrayBuffers (src/bindings/napi/shared.rs): the host
// SQL result slots and the journal's wait arguments. Whoever detaches such a buffer (transfers
// it away) or lets its transferred copy be collected must not free what the native side keeps
// writing: the memory is the native side's, and a detached slots buffer is replaced by a new one
// over the same memory. (Under Valgrind, `npm run check:memcheck`, the old V8-allocated slots
// buffer gave invalid writes in our library after exactly this.)
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { join } from "node:path";
import { test, dt, tempDir } from "./harness.mjs";

const internal = createRequire(import.meta.url)("../lib/internal/native.js");
const collect = async () => {
  if (typeof globalThis.gc === "function") globalThis.gc();
  else if (typeof Bun !== "undefined") Bun.gc(true);
  // Let finalizers of collected buffers run.
  await new Promise((r) => setTimeout(r, 10));
};

test("a detached host SQL slots buffer frees nothing the native side writes; the next is new", async () => {
  const f = internal._sqlFunctions();
  const first = f._sqlSlots();
  const size = first.byteLength;
  assert.equal(f._sqlSlots(), first, "the same buffer while it is attached");
  // Bun detaches the buffer (its copy is garbage at once); Node does not transfer memory it
  // does not own (the buffer stays attached and the clone is a copy). Either way the native
  // side's writes below must land in memory it still owns.
  structuredClone(first, { transfer: [first] });
  const detached = first.byteLength === 0;
  await collect();
  const db = f._sqlOpen(join(tempDir("dt-shared-"), "h.sqlite"));
  f._sqlExec(db, "CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, n INTEGER)");
  const ins = f._sqlPrepare(db, "INSERT INTO t (s, n) VALUES (?, ?)", true);
  for (let i = 0; i < 2000; i++) f._sqlRun(ins, `row ${i}`, i); // each writes the head slots
  const sel = f._sqlPrepare(db, "SELECT id, s, n FROM t ORDER BY id", false);
  f._sqlAll(sel); // writes up to 4096 cells
  await collect();
  const slots = f._sqlSlots();
  if (detached) assert.notEqual(slots, first, "a detached buffer is replaced");
  else assert.equal(slots, first, "an attached buffer is kept");
  assert.equal(slots.byteLength, size);
  const head = new Float64Array(slots, 0, 8);
  const nums = new Float64Array(slots, 64, (size - 64) / 9);
  f._sqlRun(ins, "last", 7);
  assert.equal(head[4], 1, "changes of the last run, written where the new buffer reads");
  const values = f._sqlGet(f._sqlPrepare(db, "SELECT n, s FROM t WHERE s = ?", false), "last");
  assert.equal(head[0], 1);
  assert.equal(nums[0], 7);
  assert.equal(values[1], "last");
  f._sqlClose(db);
});

test("a detached journal argument buffer only costs the fast path, under GC", async () => {
  const j = new dt.TouchJournal();
  await j.waitForAny({ keys: [1], timeoutMs: 1 }); // makes the handle and its buffer
  for (const sym of Object.getOwnPropertySymbols(j)) {
    const buf = j[sym]?.u32?.buffer;
    if (buf) structuredClone(buf, { transfer: [buf] });
  }
  await collect();
  const waits = [];
  for (let i = 0; i < 200; i++) waits.push(j.waitForAny({ keys: [i, 1000 + i], timeoutMs: 5000 }));
  j.touch(1050);
  j.flush();
  j.stop(); // the others resolve with null
  const hits = await Promise.all(waits);
  assert.equal(hits[50].keyId, 1050);
  assert.equal(hits.filter((h) => h !== null).length, 1);
});
