// `TouchEngine.takeRecords()` (`records: true`): what the engine did, for a host's metrics (the
// swapped server's `live.metrics`): one record per batch with touch counts, the template
// lifecycle events with the reference's fields, and a bounded queue whose overflow loses no
// count.
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";

const { Store, TouchEngine } = dt;

const row = (id) =>
  JSON.stringify({ type: "public.posts", key: String(id), value: { id, authorId: id % 3 }, headers: { operation: "insert" } });
const decl = (field) => ({ entity: "public.posts", fields: [{ name: field, encoding: "int64" }] });

async function open(options) {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  await store.createStream("t", { contentType: "application/json" });
  const engine = new TouchEngine(store, { autoProcess: false, ...options });
  for (const s of ["s", "t"]) engine.setTouchConfig(s, { enabled: true, templates: { gcIntervalMs: 1 } });
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

test("records are off unless asked for, and `records` must be a boolean", async () => {
  const ctx = await open({});
  await within(ctx, async ({ store, engine }) => {
    engine.activateTemplates("s", [decl("authorId")]);
    await store.append("s", [row(1)]);
    await engine.tick();
    assert.deepEqual(engine.takeRecords(), { batches: [], lifecycle: [], lifecycleOverflow: [], walGc: [], failures: [], batchesFolded: 0 });
    assert.throws(() => new TouchEngine(store, { records: "yes" }), { code: "ERR_INVALID_ARGUMENT", message: /options\.records/ });
  });
});

test("each batch's record and each lifecycle event, drained once", async () => {
  const ctx = await open({ records: true, maxBatchRows: 2 });
  await within(ctx, async ({ store, engine }) => {
    const { activated } = engine.activateTemplates("s", [decl("authorId"), decl("id")], { inactivityTtlMs: 1 });
    await store.append("s", [row(1), row(2), row(3)]);
    await new Promise((r) => setTimeout(r, 5));
    await engine.tick();
    const r = engine.takeRecords();
    assert.equal(r.batches.length, 2, "three rows in batches of two");
    assert.deepEqual(
      r.batches.map((b) => [b.stream, b.batches, b.rowsRead, b.changes, b.processedThroughDelta, b.lagSourceOffsets, b.touchMode]),
      [
        ["s", 1, 2, 2, 2, 1, "idle"],
        ["s", 1, 1, 1, 1, 0, "idle"],
      ],
    );
    for (const b of r.batches) {
      // With no one listening: the table key and each template's key, once each.
      assert.deepEqual([b.touchesEmitted, b.tableTouches, b.templateTouches, b.uniqueKeys], [3, 1, 2, 3]);
      assert.ok(b.commitLagMs >= 0 && b.commitLagMs < 60_000, `commit lag ${b.commitLagMs}`);
      assert.equal(b.scannedButEmitted0Batches, 0);
    }
    // Activations, then (TTL 1 ms, GC every 1 ms) retirements at the tick's upkeep.
    assert.deepEqual(
      r.lifecycle.map((e) => [e.type, e.stream, e.reason]),
      [
        ["live.template_activated", "s", "declared"],
        ["live.template_activated", "s", "declared"],
        ["live.template_retired", "s", "inactivity"],
        ["live.template_retired", "s", "inactivity"],
      ],
    );
    const [act, , ret] = r.lifecycle;
    assert.deepEqual(Object.keys(act).sort(), ["activeFromTouchOffset", "encodings", "entity", "fields", "inactivityTtlMs", "reason", "stream", "templateId", "ts", "type"]);
    assert.equal(act.templateId, activated[0].templateId);
    assert.deepEqual([act.entity, act.fields, act.encodings, act.inactivityTtlMs], ["public.posts", ["authorId"], ["int64"], 1]);
    assert.equal(act.activeFromTouchOffset, activated[0].activeFromTouchOffset);
    assert.ok(!Number.isNaN(Date.parse(act.ts)));
    assert.deepEqual(Object.keys(ret).sort(), ["encodings", "entity", "fields", "inactiveForMs", "lastSeenAt", "reason", "stream", "templateId", "ts", "type"]);
    assert.ok(ret.inactiveForMs >= 1 && !Number.isNaN(Date.parse(ret.lastSeenAt)));
    assert.deepEqual(engine.takeRecords().batches, [], "drained");
    assert.deepEqual(engine.stats().templateLifecycle, { activated: 2, retired: 2, evicted: 0 });
  });
});

test("past 10,000 batch records a stream's batches fold into its newest record, losing no count", async () => {
  const ctx = await open({ records: true, maxBatchRows: 1 });
  await within(ctx, async ({ store, engine }) => {
    const n = 10_050;
    await store.append("s", Array.from({ length: n }, (_, i) => row(i)));
    await store.append("t", [row(1), row(2), row(3)]);
    // One row per batch: 10,050 batches of s, then 3 of t (streams in name order).
    assert.equal((await engine.tick()).batches, n + 3);
    const r = engine.takeRecords();
    // s filled the queue; its last 50 went into its newest record. t had none queued: its first
    // is queued past the cap (one per stream at most), its next two fold into it.
    assert.equal(r.batches.length, 10_001);
    assert.equal(r.batchesFolded, 52);
    const s = r.batches.filter((b) => b.stream === "s");
    assert.equal(s.reduce((a, b) => a + b.batches, 0), n);
    assert.equal(s.reduce((a, b) => a + b.rowsRead, 0), n);
    assert.equal(s.reduce((a, b) => a + b.processedThroughDelta, 0), n);
    assert.equal(s.reduce((a, b) => a + b.touchesEmitted, 0), n, "one table touch per row");
    assert.deepEqual([s[s.length - 1].batches, s[s.length - 1].rowsRead, s[s.length - 1].touchesEmitted, s[s.length - 1].uniqueKeys], [51, 51, 51, 51]);
    assert.deepEqual(
      r.batches.filter((b) => b.stream === "t").map((b) => [b.batches, b.rowsRead]),
      [[3, 3]],
    );
    // Drained: the queue takes records one by one again.
    await store.append("t", [row(4)]);
    await engine.tick();
    assert.deepEqual(engine.takeRecords().batches.map((b) => [b.stream, b.batches]), [["t", 1]]);
  });
}, { timeout: 120_000 });
