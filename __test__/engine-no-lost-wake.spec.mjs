// No lost invalidation (deviations.md B1, B2, B4, B5): when the policy coarsens or paces fine
// touches, every parked waiter the change concerns is still woken.
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";

const { Store, TouchEngine, keys } = dt;
const TEMPLATE = { entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] };
const todo = (i, tenant) => ({ id: String(i), tenantId: tenant, title: `t${i}` });
const insert = (row) => JSON.stringify({ type: "public.todos", key: row.id, value: row, headers: { operation: "insert" } });

async function setup(touch) {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, { checkIntervalMs: 50 });
  engine.setTouchConfig("s", { enabled: true, ...touch });
  const tpl = engine.activateTemplates("s", [TEMPLATE]).activated[0].templateId;
  const { cursor } = await engine.meta("s");
  return { store, engine, tpl, cursor };
}

/** One templated and one untemplated fine waiter on the watch key of `tenant`. */
function waiters(engine, tpl, cursor, tenant) {
  const key = keys.watchKey(tpl, [tenant]);
  return {
    templated: engine.wait({ stream: "s", cursor, keys: [key], templateIdsUsed: [tpl], timeoutMs: 4000 }),
    untemplated: engine.wait({ stream: "s", cursor, keys: [key], timeoutMs: 4000 }),
  };
}

test("B2: a batch coarsened by lag (restricted) still wakes templated and untemplated fine waiters", async () => {
  const { store, engine, tpl, cursor } = await setup({ lagDegradeFineTouchesAtSourceOffsets: 50, lagRecoverFineTouchesAtSourceOffsets: 10 });
  const w = waiters(engine, tpl, cursor, "t-target");
  await sleep(20);
  // One append of 600 rows: the first batch sees a lag of 600 >= 50 and runs restricted.
  const rows = Array.from({ length: 600 }, (_, i) => insert(todo(i, i === 300 ? "t-target" : `t${i % 7}`)));
  await store.append("s", rows);
  const [a, b] = await Promise.all([w.templated, w.untemplated]);
  assert.equal(a.touched, true, "templated waiter");
  assert.equal(b.touched, true, "untemplated waiter (the reference never wakes it: B2)");
  const meta = await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  assert.ok(meta.compensationTouchesTotal > 0, "the engine added catch-all touches");
  await engine.close();
  await store.close();
});

test("B1: a tiny fine budget paces batches instead of dropping touches", async () => {
  const { store, engine, tpl, cursor } = await setup({ fineTouchBudgetPerBatch: 3 });
  const tenants = Array.from({ length: 40 }, (_, i) => `tenant-${i}`);
  const all = tenants.map((t) => engine.wait({ stream: "s", cursor, keys: [keys.watchKey(tpl, [t])], templateIdsUsed: [tpl], timeoutMs: 4000 }));
  await sleep(20);
  await store.append("s", tenants.map((t, i) => insert(todo(i, t))));
  const results = await Promise.all(all);
  assert.equal(results.filter((r) => r.touched).length, tenants.length, "every waiter woke (the reference drops all but ~3 keys per batch: B1)");
  const meta = await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  assert.equal(meta.fineTouchesDroppedDueToBudgetTotal, 0);
  assert.ok(meta.batchesSplitForBudgetTotal > 0 || meta.scanBatchesTotal > 1, "the budget cut batches short");
  await engine.close();
  await store.close();
});

test("B1/B2: out of fine tokens, the batch is coarsened, not dropped (coarseOnly)", async () => {
  const { store, engine, tpl, cursor } = await setup({ fineTokensPerSecond: 1, fineBurstTokens: 1 });
  const w = waiters(engine, tpl, cursor, "t-late");
  await sleep(20);
  await store.append("s", [insert(todo(1, "t-first"))]);
  await store.append("s", Array.from({ length: 20 }, (_, i) => insert(todo(100 + i, i === 10 ? "t-late" : `x${i}`))));
  const [a, b] = await Promise.all([w.templated, w.untemplated]);
  assert.equal(a.touched, true);
  assert.equal(b.touched, true);
  await engine.close();
  await store.close();
});

test("B4: a change processed before anyone waits is still seen by a wait from an older cursor", async () => {
  const { store, engine, tpl, cursor } = await setup({});
  // No waiter at all while the change is processed (the reference emits no fine touch then).
  await store.append("s", [insert(todo(1, "t-early"))]);
  await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  const r = await engine.wait({ stream: "s", cursor, keys: [keys.watchKey(tpl, ["t-early"])], templateIdsUsed: [tpl], timeoutMs: 2000 });
  assert.equal(r.touched, true);
  await engine.close();
  await store.close();
});

const update = (before, after) =>
  JSON.stringify({ type: "public.todos", key: after.id, value: after, old_value: before, headers: { operation: "update" } });

test("a wait registered in restricted mode hears a change processed back in fine mode", async () => {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, { workers: 1, maxBatchRows: 7, checkIntervalMs: 50 });
  engine.setTouchConfig("s", { enabled: true, lagDegradeFineTouchesAtSourceOffsets: 10, lagRecoverFineTouchesAtSourceOffsets: 3 });
  const tpl = engine.activateTemplates("s", [TEMPLATE]).activated[0].templateId;
  // A waiter elsewhere, so that coarsened batches run as `restricted` (not idle): held as hot
  // interest, as a host that runs its own wait holds it. A parked wait would be woken by the
  // first coarsened flush (its template's key), and the batches after it would run idle.
  const elsewhere = engine.beginHotInterest("s", { keyIds: [keys.watchKeyId(tpl, ["nobody"])], templateIdsUsed: [tpl], interestMode: "fine" });
  const target = todo(0, "t1");
  await store.append("s", [insert(target), ...Array.from({ length: 300 }, (_, i) => insert(todo(i + 1, "other")))]);
  const settled = await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  assert.equal(settled.touchMode, "restricted", "the burst left the stream restricted");
  const w = engine.wait({ stream: "s", cursor: settled.cursor, keys: [keys.watchKey(tpl, ["t1"])], templateIdsUsed: [tpl], timeoutMs: 3000 });
  await sleep(20);
  // A small append: the lag is back under the recovery mark, so this batch runs fine.
  await store.append("s", [update(target, { ...target, title: "changed" })]);
  const r = await w;
  assert.equal(r.effectiveWaitKind, "templateKey");
  assert.equal(r.touched, true, "the update of the watched row was announced");
  const after = await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  assert.equal(after.touchMode, "fine", "the update ran as a fine batch");
  assert.equal(engine.releaseHotInterest(elsewhere), true);
  await engine.close();
  await store.close();
});

for (const [label, before] of [
  ["null", null],
  ["an unencodable number", 2.5],
  ["an object", { nested: true }],
]) {
  test(`a row moving from ${label} into a watched tuple wakes its waiters`, async () => {
    // Templates on a string and an int64 field, so that 2.5 is unencodable for one of them.
    const store = Store.open(":memory:");
    await store.createStream("s", { contentType: "application/json" });
    const engine = new TouchEngine(store, { checkIntervalMs: 50 });
    engine.setTouchConfig("s", { enabled: true });
    const [str, int] = engine
      .activateTemplates("s", [TEMPLATE, { entity: "public.todos", fields: [{ name: "rank", encoding: "int64" }] }])
      .activated.map((a) => a.templateId);
    const row = { id: "1", tenantId: before, rank: before, title: "x" };
    await store.append("s", [insert(row)]);
    await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
    const { cursor: c1 } = await engine.meta("s");
    const waits = [
      [str, "t1"],
      [int, "7"],
    ].flatMap(([tpl, arg]) => [
      engine.wait({ stream: "s", cursor: c1, keys: [keys.watchKey(tpl, [arg])], templateIdsUsed: [tpl], timeoutMs: 3000 }),
      engine.wait({ stream: "s", cursor: c1, keys: [keys.watchKey(tpl, [arg])], timeoutMs: 3000 }),
      engine.wait({ stream: "s", cursor: c1, keys: [keys.membershipKey(tpl, [arg])], timeoutMs: 3000 }),
    ]);
    await sleep(20);
    await store.append("s", [update(row, { ...row, tenantId: "t1", rank: 7 })]);
    const replies = await Promise.all(waits);
    assert.deepEqual(replies.map((r) => r.touched), replies.map(() => true));
    await engine.close();
    await store.close();
  });
}
