// TouchEngine end to end through the JS API: append → wait wakes, on every kind of key.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test, dt, tempDir, rejectsWithCode, sleep } from "./harness.mjs";

const { Store, TouchEngine, keys } = dt;

const POSTS = { entity: "public.posts", fields: [{ name: "authorId", encoding: "int64" }, { name: "status", encoding: "string" }] };
const rec = (op, value, oldValue) => {
  const r = { type: "public.posts", key: String((value ?? oldValue).id) };
  if (value !== undefined) r.value = value;
  if (oldValue !== undefined) r.old_value = oldValue;
  r.headers = { operation: op };
  return JSON.stringify(r);
};

async function open(path = ":memory:", config = { enabled: true }) {
  const store = Store.open(path);
  await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, { checkIntervalMs: 100 });
  engine.setTouchConfig("s", config);
  return { store, engine };
}

async function closeAll({ store, engine }) {
  await engine.close();
  await store.close();
}

test("a coarse wait on the table key wakes on append; cursor 'now' works", async () => {
  const ctx = await open();
  const { store, engine } = ctx;
  const table = keys.tableKeyId("public.posts");
  const w = engine.wait({ stream: "s", cursor: "now", keyIds: [table], interestMode: "coarse", timeoutMs: 5000 });
  await sleep(20);
  const ack = await store.append("s", [rec("insert", { id: 1, authorId: 42, status: "published" })]);
  const r = await w;
  assert.equal(r.touched, true);
  assert.equal(r.effectiveWaitKind, "tableKey");
  assert.equal(r.bucketMaxSourceOffsetSeq, String(ack.lastOffset));
  assert.match(r.cursor, /^[0-9a-f]{16}:[1-9][0-9]*$/);
  await closeAll(ctx);
});

test("watch, membership and projected-field keys wake fine waiters after template activation", async () => {
  const ctx = await open();
  const { store, engine } = ctx;
  const act = engine.activateTemplates("s", [POSTS]);
  assert.equal(act.denied.length, 0);
  const tpl = act.activated[0].templateId;
  assert.equal(tpl, keys.templateId("public.posts", ["authorId", "status"]));
  const before = { id: 1, authorId: 42, status: "published", title: "A" };
  await store.append("s", [rec("insert", before)]);
  let { cursor } = await engine.meta("s", { settle: "flush", timeoutMs: 5000 });

  // Same tuple, title changes: the projected field key of `title` fires (and the watch key).
  const fld = keys.projectedFieldKey(tpl, "title", ["42", "published"]);
  const w1 = engine.wait({ stream: "s", cursor, keys: [fld], templateIdsUsed: [tpl], timeoutMs: 5000 });
  await store.append("s", [rec("update", { ...before, title: "B" }, before)]);
  const r1 = await w1;
  assert.equal(r1.touched, true);
  cursor = r1.cursor;

  // The tuple moves: membership keys of both tuples fire.
  const mem43 = keys.membershipKey(tpl, ["43", "published"]);
  const w2 = engine.wait({ stream: "s", cursor, keys: [mem43], timeoutMs: 5000 });
  await store.append("s", [rec("update", { ...before, title: "B", authorId: 43 }, { ...before, title: "B" })]);
  const r2 = await w2;
  assert.equal(r2.touched, true);

  // An unrelated key does not wake (it times out).
  const other = keys.watchKey(tpl, ["7", "draft"]);
  const r3 = await engine.wait({ stream: "s", cursor: r2.cursor, keys: [other], templateIdsUsed: [tpl], timeoutMs: 300 });
  assert.equal(r3.touched, false);
  await closeAll(ctx);
});

test("keyIds-only waits and exact waits on literal routing keys", async () => {
  const ctx = await open();
  const { store, engine } = ctx;
  const tpl = engine.activateTemplates("s", [POSTS]).activated[0].templateId;
  const { cursor } = await engine.meta("s");
  const watchId = keys.watchKeyId(tpl, ["5", "open"]);
  const watchHex = keys.watchKey(tpl, ["5", "open"]);
  const byId = engine.wait({ stream: "s", cursor, keyIds: [watchId], templateIdsUsed: [tpl], timeoutMs: 5000 });
  const exact = engine.wait({ stream: "s", cursor, keys: [watchHex.toUpperCase()], exact: true, timeoutMs: 5000 });
  await store.append("s", [rec("insert", { id: 9, authorId: 5, status: "open" })]);
  assert.equal((await byId).touched, true);
  assert.equal((await exact).touched, true);
  // From the old cursor, the exact history answers at once.
  const again = await engine.wait({ stream: "s", cursor, keys: [watchHex], exact: true, timeoutMs: 5000 });
  assert.equal(again.touched, true);
  await closeAll(ctx);
});

test("restarting the engine over the same file keeps old cursors (keepCursors: false: stale)", async () => {
  const path = join(tempDir(), "restart.sqlite");
  const first = await open(path);
  const { cursor } = await first.engine.meta("s");
  await closeAll(first);
  let store = Store.open(path);
  let engine = new TouchEngine(store);
  assert.deepEqual(engine.getTouchConfig("s").enabled, true, "the touch config was persisted");
  const kept = await engine.wait({ stream: "s", cursor, keyIds: [1], timeoutMs: 200 });
  assert.deepEqual([kept.stale === true, kept.touched, kept.cursor], [false, false, cursor]);
  const meta = await engine.meta("s");
  assert.deepEqual([meta.journalKept, meta.replayedFlushes, meta.floorGeneration], [true, 0, 0]);
  assert.ok(meta.epochStartedAtMs > 0 && meta.epochStartedAtMs <= Date.now());
  assert.equal(engine.stats().keptJournals.kept, 1);
  await engine.close();
  await store.close();

  store = Store.open(path);
  engine = new TouchEngine(store, { keepCursors: false });
  const r = await engine.wait({ stream: "s", cursor, keyIds: [1], timeoutMs: 5000 });
  assert.equal(r.stale, true);
  assert.equal(r.error.code, "stale");
  assert.notEqual(r.epoch, cursor.split(":")[0]);
  assert.equal(r.cursor, `${r.epoch}:${r.generation}`);
  assert.equal((await engine.meta("s")).journalKept, false);
  assert.equal(engine.stats().keptJournals.folder, undefined);
  await engine.close();
  await store.close();
});

test("settle: flush gives a cursor after the caller's own write (no conservative wake)", async () => {
  const ctx = await open();
  const { store, engine } = ctx;
  const table = keys.tableKeyId("public.posts");
  const { cursor: before } = await engine.meta("s");
  await store.append("s", [rec("insert", { id: 1, authorId: 1, status: "x" })]);
  const settled = await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  assert.equal(settled.settled, true);
  assert.equal(settled.lagSourceOffsets, 0);
  assert.equal(settled.pendingKeys, 0);
  // From the settled cursor our own write is history: the wait does not wake for it.
  const quiet = await engine.wait({ stream: "s", cursor: settled.cursor, keyIds: [table], interestMode: "coarse", timeoutMs: 200 });
  assert.equal(quiet.touched, false);
  // From the cursor before the write, it wakes at once.
  const loud = await engine.wait({ stream: "s", cursor: before, keyIds: [table], interestMode: "coarse", timeoutMs: 5000 });
  assert.equal(loud.touched, true);
  await closeAll(ctx);
});

test("an aborted wait rejects with ERR_ABORTED; close settles pending waits with touched: false", async () => {
  const ctx = await open();
  const { engine } = ctx;
  const pre = new AbortController();
  pre.abort();
  await rejectsWithCode(engine.wait({ stream: "s", cursor: "now", keyIds: [1], timeoutMs: 5000, signal: pre.signal }), "ERR_ABORTED");
  const mid = new AbortController();
  const p = engine.wait({ stream: "s", cursor: "now", keyIds: [1], timeoutMs: 60000, signal: mid.signal });
  setTimeout(() => mid.abort(), 30);
  await rejectsWithCode(p, "ERR_ABORTED");
  const pending = Array.from({ length: 50 }, (_, i) => engine.wait({ stream: "s", cursor: "now", keyIds: [i], timeoutMs: 60000 }));
  await sleep(20);
  assert.equal((await engine.meta("s")).activeWaiters, 50);
  await engine.close();
  for (const r of await Promise.all(pending)) assert.equal(r.touched, false);
  await rejectsWithCode(engine.wait({ stream: "s", cursor: "now", keyIds: [1], timeoutMs: 10 }), "ERR_CLOSED");
  await ctx.store.close();
});

test("wait lists are refused by their length before an element is read; 1,024 of each is fine", async () => {
  const ctx = await open();
  const { engine } = ctx;
  let reads = 0;
  const counted = (n, item) => {
    const a = new Array(n);
    for (let i = 0; i < n; i++) Object.defineProperty(a, i, { get: () => (reads++, item(i)), enumerable: true });
    return a;
  };
  const refused = [
    ["keys", { keys: counted(50_000, (i) => `k${i}`) }, "wait.keys too large (max 1024)"],
    ["keyIds", { keyIds: counted(50_000, (i) => i) }, "wait.keyIds too large (max 1024)"],
    ["templateIdsUsed", { keys: ["a"], templateIdsUsed: counted(40_000, (i) => i.toString(16).padStart(16, "0")) }, "wait.templateIdsUsed too large (max 1024)"],
    ["declareTemplates", { keys: ["a"], declareTemplates: counted(50_000, () => POSTS) }, "wait.declareTemplates too large (max 256)"],
  ];
  for (const [label, body, message] of refused) {
    reads = 0;
    const err = await rejectsWithCode(engine.wait({ stream: "s", cursor: "now", timeoutMs: 0, ...body }), "ERR_INVALID_ARGUMENT");
    assert.equal(err.message, message, label);
    assert.ok(reads <= 1025, `${label}: ${reads} elements read`);
  }
  // At the cap itself (as the reference's `> 1024`), with a template id or the engine's own
  // catch-all key added to the keys the journal registers.
  const n = (k, f) => Array.from({ length: k }, (_, i) => f(i));
  const { activated } = engine.activateTemplates("s", [POSTS]);
  for (const body of [
    { keys: n(1024, (i) => `k${i}`) },
    { keyIds: n(1024, (i) => i) },
    { keys: n(1024, (i) => `k${i}`), templateIdsUsed: [activated[0].templateId] },
    { keys: ["a"], templateIdsUsed: n(1024, (i) => i.toString(16).padStart(16, "0")) },
  ]) {
    const r = await engine.wait({ stream: "s", cursor: "now", timeoutMs: 0, ...body });
    assert.equal(r.touched, false);
  }
  await closeAll(ctx);
});

test("bucketMs: any integer > 0 is a valid config, as in the reference; the journal caps it at a minute", async () => {
  const ctx = await open(":memory:", { enabled: true, memory: { bucketMs: 1e308 } });
  const { store, engine } = ctx;
  assert.equal(engine.getTouchConfig("s").memory.bucketMs, 1e308);
  await store.append("s", [rec("insert", { id: 1, authorId: 1, status: "a" })]);
  const meta = await engine.meta("s");
  assert.equal(meta.bucketMs, 60_000, "so the stream's touches are flushed within a minute");
  assert.ok(meta.coalesceMs <= 60_000);
  assert.equal(new dt.TouchJournal({ bucketMs: 1e308 }).getMeta().bucketMs, 60_000);
  await closeAll(ctx);
});

test("bad requests get coded errors", async () => {
  const ctx = await open();
  const { store, engine } = ctx;
  await store.createStream("plain", { contentType: "application/json" });
  const cases = [
    [{ stream: "nope", cursor: "now", keyIds: [1] }, "ERR_STREAM_NOT_FOUND"],
    [{ stream: "plain", cursor: "now", keyIds: [1] }, "ERR_TOUCH_NOT_ENABLED"],
    [{ stream: "s", cursor: "now" }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keys: Array.from({ length: 1025 }, (_, i) => `k${i}`) }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [-1] }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], templateIdsUsed: ["not-hex!"] }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "garbage", keyIds: [1] }, "ERR_INVALID_CURSOR"],
    [{ stream: "s", cursor: "0123456789abcdef:x", keyIds: [1] }, "ERR_INVALID_CURSOR"],
    [{ stream: "s", cursor: "", keyIds: [1] }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], timeoutMs: "soon" }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], interestMode: "loud" }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keys: ["a"], exact: true }, "ERR_INVALID_ARGUMENT"],
    [{ stream: 5, cursor: "now", keyIds: [1] }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], signal: {} }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keys: Array.from({ length: 50_000 }, (_, i) => `k${i}`) }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: Array.from({ length: 1025 }, (_, i) => i) }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], templateIdsUsed: Array.from({ length: 40_000 }, (_, i) => i.toString(16)) }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], declareTemplates: Array.from({ length: 100_000 }, () => POSTS) }, "ERR_INVALID_ARGUMENT"],
    [{ stream: "s", cursor: "now", keyIds: [1], declareTemplates: [{ ...POSTS, junk: Object.fromEntries(Array.from({ length: 70_000 }, (_, i) => [`k${i}`, i])) }] }, "ERR_INVALID_ARGUMENT"],
  ];
  for (const [req, code] of cases) {
    let p;
    assert.doesNotThrow(() => (p = engine.wait(req)));
    await rejectsWithCode(p, code).catch((e) => {
      throw new Error(`${JSON.stringify(req).slice(0, 80)}: ${e.message}`);
    });
  }
  await rejectsWithCode(engine.wait(null), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(engine.meta("nope"), "ERR_STREAM_NOT_FOUND");
  await rejectsWithCode(engine.meta("s", { settle: "soon" }), "ERR_INVALID_ARGUMENT");
  assert.throws(() => engine.setTouchConfig("s", { enabled: true, coarseIntervalMs: 0 }), (e) => e.code === "ERR_INVALID_TOUCH_CONFIG" && e.message === "profile.touch.coarseIntervalMs must be > 0");
  assert.throws(() => engine.setTouchConfig("nope", { enabled: true }), (e) => e.code === "ERR_STREAM_NOT_FOUND");
  await store.createStream("bin");
  assert.throws(() => engine.setTouchConfig("bin", { enabled: true }), (e) => e.message === "state-protocol profile requires application/json stream content-type");
  assert.throws(() => engine.activateTemplates("s", []), (e) => e.code === "ERR_INVALID_ARGUMENT" && e.message === "activate.templates must be a non-empty array");
  assert.throws(() => new TouchEngine({}), (e) => e.code === "ERR_INVALID_ARGUMENT");
  await closeAll(ctx);
});

test("engine options outside engineBounds are refused by name; a 0 worker, row or byte counts as 1", async () => {
  const { engineBounds } = dt;
  assert.ok(Object.isFrozen(engineBounds) && Object.isFrozen(engineBounds.workers));
  const store = Store.open(":memory:");
  try {
    for (const [name, { min, max }] of Object.entries(engineBounds)) {
      const says = `options.${name} must be an integer in [${min}, ${max}]`;
      for (const v of [max + 1, min - 1, 2.5, Infinity]) {
        assert.throws(() => new TouchEngine(store, { [name]: v }), (e) => e.code === "ERR_INVALID_ARGUMENT" && e.message === says, `${name}: ${v}`);
      }
    }
    assert.deepEqual(engineBounds.workers, { min: 0, max: 64 });
    await store.createStream("s", { contentType: "application/json" });
    const engine = new TouchEngine(store, { workers: 0, maxBatchRows: 0, maxBatchBytes: 0, checkIntervalMs: 100 });
    engine.setTouchConfig("s", { enabled: true });
    const { cursor } = await engine.meta("s");
    const w = engine.wait({ stream: "s", cursor, keyIds: [keys.tableKeyId("public.posts")], interestMode: "coarse", timeoutMs: 5000 });
    await store.append("s", [rec("insert", { id: 1, authorId: 1, status: "draft" }), rec("insert", { id: 2, authorId: 1, status: "draft" })]);
    assert.equal((await w).touched, true);
    await engine.close();
  } finally {
    await store.close();
  }
});

test("replies have the route's fields, in its order, for every kind and outcome", async () => {
  const ctx = await open();
  const { store, engine } = ctx;
  const base = ["touched", "cursor", "effectiveWaitKind", "bucketMaxSourceOffsetSeq", "flushAtMs", "bucketStartMs"];
  const table = keys.tableKeyId("public.posts");
  let cursor = (await engine.meta("s")).cursor;
  const kinds = [
    [{ keyIds: [table], interestMode: "coarse" }, "tableKey"],
    [{ keyIds: [table], interestMode: "fine" }, "fineKey"],
  ];
  for (const [req, kind] of kinds) {
    const w = engine.wait({ stream: "s", cursor, ...req, timeoutMs: 5000 });
    await sleep(10);
    const ack = await store.append("s", [rec("insert", { id: 1, authorId: 42, status: "published" })]);
    const r = await w;
    cursor = r.cursor;
    assert.deepEqual(Object.keys(r), base);
    assert.equal(r.touched, true);
    assert.equal(r.effectiveWaitKind, kind);
    assert.equal(typeof r.cursor, "string");
    assert.ok(BigInt(r.bucketMaxSourceOffsetSeq) >= BigInt(ack.firstOffset));
    assert.ok(Number.isInteger(r.flushAtMs) && r.flushAtMs >= r.bucketStartMs);
  }
  const timedOut = await engine.wait({ stream: "s", cursor, keyIds: [table], timeoutMs: 10 });
  assert.deepEqual(Object.keys(timedOut), base);
  assert.equal(timedOut.touched, false);
  const stale = await engine.wait({ stream: "s", cursor: "0000000000000000:1", keyIds: [table], timeoutMs: 10 });
  assert.deepEqual(Object.keys(stale), [...base, "stale", "epoch", "generation", "error"]);
  assert.equal(stale.stale, true);
  assert.equal(stale.error.code, "stale");
  await closeAll(ctx);
});

test("wait reads each field of its request once, in a fixed order, in JavaScript", async () => {
  const ctx = await open();
  const { engine } = ctx;
  assert.match(String(TouchEngine.prototype.wait), /waitFields\(/, "the installed JS method");
  const reads = [];
  const request = {};
  const table = keys.tableKeyId("public.posts");
  for (const [name, value] of [
    ["stream", "s"],
    ["signal", undefined],
    ["keys", undefined],
    ["keyIds", [table]],
    ["exact", undefined],
    ["cursor", "now"],
    ["timeoutMs", 10],
    ["templateIdsUsed", undefined],
    ["interestMode", "coarse"],
    ["declareTemplates", undefined],
    ["inactivityTtlMs", undefined],
  ]) {
    Object.defineProperty(request, name, {
      enumerable: true,
      get() {
        reads.push(name);
        return value;
      },
    });
  }
  const r = await engine.wait(request);
  assert.equal(r.touched, false);
  assert.deepEqual(reads, ["stream", "signal", "keys", "keyIds", "exact", "cursor", "timeoutMs", "templateIdsUsed", "interestMode", "declareTemplates", "inactivityTtlMs"]);
  // What is not a request object takes the native method and its errors.
  for (const bad of [undefined, null, 5, "s"]) await rejectsWithCode(engine.wait(bad), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(engine.wait({ keyIds: [table], timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
  assert.throws(() => TouchEngine.prototype.wait.call({}, { stream: "s", keyIds: [table] }), (e) => e.code === "ERR_INVALID_ARGUMENT");
  await closeAll(ctx);
});
