// What a host without the engine's loop uses (the reference manager's whole surface): a
// processing pass on demand (`tick`), the stream's journal inside the engine, hot interest
// held by the caller, template heartbeats, the runtime snapshot and wait totals.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { test, dt, sleep, bound } from "./harness.mjs";

const { Store, TouchEngine, EngineJournal, keys } = dt;

const row = (id) =>
  JSON.stringify({ type: "public.posts", key: String(id), value: { id, authorId: 7 }, headers: { operation: "insert" } });
const GRACE_MS = 40;

async function open() {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  await store.createStream("plain", { contentType: "application/json" });
  const engine = new TouchEngine(store, { autoProcess: false, maxBatchRows: 2 });
  engine.setTouchConfig("s", { enabled: true, memory: { hotKeyTtlMs: GRACE_MS, hotTemplateTtlMs: GRACE_MS } });
  return { store, engine };
}

async function within(ctx, fn) {
  try {
    await fn(ctx);
  } finally {
    await ctx.engine.close();
    await ctx.store.close();
  }
}

test("without the loop a wait hears nothing until tick(), which processes every row before it", async () => {
  const ctx = await open();
  await within(ctx, async ({ store, engine }) => {
    const table = keys.tableKeyId("public.posts");
    const { cursor } = await engine.meta("s");
    const w = engine.wait({ stream: "s", cursor, keyIds: [table], interestMode: "coarse", timeoutMs: 5000 });
    await store.append("s", [row(1), row(2), row(3), row(4), row(5)]);
    const early = await Promise.race([w, sleep(300).then(() => "waiting")]);
    assert.equal(early, "waiting", "no loop: nothing is processed by itself");
    const r = await engine.tick();
    assert.deepEqual(r, { streams: 1, batches: 3, failed: [] }, "five rows in batches of two, one stream");
    assert.equal((await w).touched, true);
    const meta = await engine.meta("s");
    assert.equal(meta.lagSourceOffsets, 0);
    assert.equal(meta.scanRowsTotal, 5);
    assert.equal(engine.memoryStats().memory.dirtyStreams, 0);
    const settled = await engine.meta("s", { settle: "flush", timeoutMs: 2000 });
    assert.equal(settled.settled, true, "settles without the loop");
  });
});

test("the engine's journal of a stream: waits on it wake on batches, touches on it wake engine waits", async () => {
  const ctx = await open();
  await within(ctx, async ({ store, engine }) => {
    assert.equal(engine.journal("s", { create: false }), null, "none until something creates it");
    const j = engine.journal("s");
    assert.ok(j instanceof EngineJournal);
    assert.equal(engine.journal("s", { create: false }).getEpoch(), j.getEpoch(), "the same journal");
    assert.throws(() => new EngineJournal(), "made only by the engine");
    const table = keys.tableKeyId("public.posts");
    const hit = j.waitForAny({ keys: [table], afterGeneration: j.getGeneration(), timeoutMs: 5000 });
    await store.append("s", [row(1)]);
    await engine.tick();
    const h = await hit;
    assert.ok(h !== null && h.bucketMaxSourceOffsetSeq === 0n, "woken by the batch's flush");
    // A touch through the journal reaches a wait registered through the engine.
    const { cursor } = await engine.meta("s");
    const w = engine.wait({ stream: "s", cursor, keyIds: [0xbeef], timeoutMs: 5000 });
    await sleep(20);
    j.touch(0xbeef);
    assert.equal((await w).touched, true);
    // An aborted journal wait resolves null; the reference's checks apply.
    const ac = new AbortController();
    const aborted = j.waitForAny({ keys: [1], timeoutMs: 5000, signal: ac.signal });
    ac.abort();
    assert.equal(await aborted, null);
    assert.throws(() => j.setCoalesceMs(NaN), { code: "ERR_INVALID_ARGUMENT" });
    await assert.rejects(j.waitForAny({ keys: [1] }), { code: "ERR_INVALID_ARGUMENT" });
    assert.equal(typeof j.getMeta().generation, "number");
    assert.equal(j.getTotalStats().flushes >= 1, true);
    assert.throws(() => engine.journal("plain"), { code: "ERR_TOUCH_NOT_ENABLED" });
    assert.throws(() => engine.journal("none"), { code: "ERR_STREAM_NOT_FOUND" });
  });
});

test("hot interest held by the caller counts until released, then expires with its grace", async () => {
  const ctx = await open();
  await within(ctx, async ({ engine }) => {
    const tpl = "0123456789abcdef";
    const id = engine.beginHotInterest("s", { keyIds: [1, 2, 2], templateIdsUsed: [tpl, "nope"], interestMode: "fine" });
    let r = engine.runtime("s");
    assert.deepEqual([r.hotFineKeys, r.hotTemplates, r.fineWaitersActive, r.touchMode], [2, 1, 1, "fine"]);
    const coarse = engine.beginHotInterest("s", { keyIds: new Uint32Array([9]), interestMode: "coarse" });
    assert.equal(engine.runtime("s").coarseWaitersActive, 1);
    assert.equal(engine.releaseHotInterest(id), true);
    assert.equal(engine.releaseHotInterest(id), false, "released once");
    assert.equal(engine.releaseHotInterest(coarse), true);
    r = engine.runtime("s");
    assert.deepEqual([r.hotFineKeysGrace, r.hotTemplatesGrace, r.fineWaitersActive, r.coarseWaitersActive], [2, 1, 0, 0]);
    await sleep(400); // past the grace and the paced sweep (M19: at least 250 ms apart)
    r = engine.runtime("s");
    assert.deepEqual([r.hotFineKeys, r.hotTemplates], [0, 0]);
    const meta = await engine.meta("s");
    assert.deepEqual([meta.hotFineKeys, meta.hotTemplates], [0, 0]);
    assert.throws(() => engine.beginHotInterest("s", { keyIds: [1], interestMode: "loud" }), { code: "ERR_INVALID_ARGUMENT" });
    assert.throws(() => engine.beginHotInterest("s", { keyIds: Object.assign([], { length: 2 ** 31 }) }), {
      code: "ERR_INVALID_ARGUMENT",
    });
    assert.throws(() => engine.beginHotInterest("plain", { keyIds: [] }), { code: "ERR_TOUCH_NOT_ENABLED" });
  });
});

test("heartbeats and wait totals", async () => {
  const ctx = await open();
  await within(ctx, async ({ engine }) => {
    const { activated } = engine.activateTemplates("s", [{ entity: "public.posts", fields: [{ name: "authorId", encoding: "int64" }] }]);
    assert.equal(engine.heartbeatTemplates("s", [activated[0].templateId, "junk"]), undefined);
    assert.throws(() => engine.heartbeatTemplates("s", "x"), { code: "ERR_INVALID_ARGUMENT" });
    engine.recordWait("s", "stale");
    engine.recordWait("s", "timeout");
    engine.recordWait("s", "touched");
    const r = engine.runtime("s");
    assert.deepEqual([r.waitStaleTotal, r.waitTimeoutTotal, r.waitTouchedTotal], [1, 1, 1]);
    assert.throws(() => engine.recordWait("s", "maybe"), { code: "ERR_INVALID_ARGUMENT" });
  });
});

/** Threads of this process (Linux), to see that waiting calls do not each hold one. */
const threads = () => readdirSync("/proc/self/task").length;

test("tick() ends at the rows committed before it, whatever a faster writer appends meanwhile", async () => {
  const ctx = await open();
  await within(ctx, async ({ store, engine }) => {
    const many = (n, from) => Array.from({ length: n }, (_, i) => row(from + i));
    const { lastOffset } = await store.append("s", many(400, 0));
    let stop = false;
    let next = 400;
    const writer = (async () => {
      // Appends 200 rows at a time until the tick returns (each pass batch takes 2 rows).
      while (!stop) await store.append("s", many(200, (next += 200)));
    })();
    const t = engine.tick();
    const r = await Promise.race([t, bound(60_000).then(() => null)]);
    stop = true;
    await writer;
    assert.ok(r !== null, "the tick returned while the writer kept appending");
    const meta = await engine.meta("s");
    assert.ok(meta.scanRowsTotal >= Number(lastOffset) + 1, "every row before the call was processed");
  });
});

test("concurrent tick() calls share passes, and meta(settle) calls share one poller", async () => {
  const ctx = await open();
  await within(ctx, async ({ store, engine }) => {
    await store.append("s", [row(1), row(2), row(3)]);
    const before = threads();
    const settles = Array.from({ length: 100 }, () => engine.meta("s", { settle: "flush", timeoutMs: 400 }));
    await sleep(100);
    assert.ok(threads() - before < 10, `${threads() - before} more threads for 100 pending settles`);
    const answered = await Promise.all(settles);
    assert.ok(answered.every((m) => m.settled === false), "unprocessed rows: none settles");
    const base = threads();
    const pending = Array.from({ length: 200 }, () => engine.tick());
    assert.ok(threads() - base < 10, `${threads() - base} more threads for 200 pending ticks`);
    const ticks = await Promise.all(pending);
    assert.ok(ticks.every((t) => t.streams === 1 && t.failed.length === 0));
    assert.equal((await engine.meta("s", { settle: "flush", timeoutMs: 2000 })).settled, true);
  });
});
