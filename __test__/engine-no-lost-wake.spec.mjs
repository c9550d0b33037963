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
