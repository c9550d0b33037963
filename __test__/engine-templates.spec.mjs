// Template lifecycle through the engine (T1–T12): caps, rate limit, retirement, heartbeats.
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";

const { Store, TouchEngine } = dt;
const decl = (entity, ...names) => ({ entity, fields: names.map((name) => ({ name, encoding: "string" })) });

async function setup(templates) {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, { checkIntervalMs: 20 });
  engine.setTouchConfig("s", { enabled: true, templates });
  return { store, engine };
}

test("per-entity and per-stream caps evict least recently used templates", async () => {
  const { store, engine } = await setup({ maxActiveTemplatesPerEntity: 2, maxActiveTemplatesPerStream: 3 });
  const first = engine.activateTemplates("s", [decl("E", "a"), decl("E", "b")]);
  assert.equal(first.activated.length, 2);
  assert.deepEqual(first.limits, { maxActiveTemplatesPerStream: 3, maxActiveTemplatesPerEntity: 2 });
  await sleep(5);
  // A third template of E evicts the least recently used one of E (not the new one).
  const third = engine.activateTemplates("s", [decl("E", "c")]);
  assert.equal(third.activated.length, 1);
  assert.equal((await engine.meta("s")).activeTemplates, 2);
  // Two templates of F push the stream over 3: the oldest across the stream goes.
  engine.activateTemplates("s", [decl("F", "x"), decl("F", "y")]);
  assert.equal((await engine.meta("s")).activeTemplates, 3);
  assert.ok(engine.stats().templateLifecycle.evicted >= 2);
  // Declaring three at once over the entity cap: the one evicted by its own call is denied
  // with cap_exceeded rather than reported active (B11).
  const burst = engine.activateTemplates("s", [decl("G", "1"), decl("G", "2"), decl("G", "3")]);
  const denied = burst.denied.filter((d) => d.reason === "cap_exceeded");
  assert.equal(burst.activated.length + denied.length, 3);
  assert.ok(denied.length >= 1);
  await engine.close();
  await store.close();
});

test("the activation rate limit denies new templates beyond the per-minute budget", async () => {
  const { store, engine } = await setup({ activationRateLimitPerMinute: 2 });
  const out = engine.activateTemplates("s", [decl("E", "a"), decl("E", "b"), decl("E", "c")]);
  assert.equal(out.activated.length, 2);
  assert.deepEqual(out.denied.map((d) => d.reason), ["rate_limited"]);
  // Re-declaring an active template is free.
  assert.equal(engine.activateTemplates("s", [decl("E", "a")]).activated.length, 1);
  // A template bound to other encodings is invalid.
  const bad = engine.activateTemplates("s", [{ entity: "E", fields: [{ name: "a", encoding: "int64" }] }]);
  assert.deepEqual(bad.denied.map((d) => d.reason), ["invalid"]);
  await engine.close();
  await store.close();
});

test("inactive templates retire after their TTL; heartbeats (templateIdsUsed) keep them alive", async () => {
  const { store, engine } = await setup({ gcIntervalMs: 20, lastSeenPersistIntervalMs: 10 });
  const [kept, dropped] = engine.activateTemplates("s", [decl("E", "kept"), decl("E", "dropped")], { inactivityTtlMs: 300 }).activated.map((a) => a.templateId);
  const deadline = Date.now() + 1500;
  while (Date.now() < deadline) {
    // A fine wait naming `kept` heartbeats it.
    await engine.wait({ stream: "s", cursor: "now", keyIds: [1], templateIdsUsed: [kept], timeoutMs: 20 });
    if ((await engine.meta("s")).activeTemplates === 1) break;
  }
  assert.equal((await engine.meta("s")).activeTemplates, 1, "only the heartbeated template is left");
  assert.ok(engine.stats().templateLifecycle.retired >= 1);
  // The retired one can be declared again.
  assert.deepEqual(engine.activateTemplates("s", [decl("E", "dropped")]).activated.map((a) => a.templateId), [dropped]);
  await engine.close();
  await store.close();
});
