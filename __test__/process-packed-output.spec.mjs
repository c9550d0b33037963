// `output: "packed"`: the same batch results as the default touch objects (same touches, same
// order, same stats), as typed arrays; `unpackTouches` rebuilds the objects; the arrays feed
// TouchJournal.touchMany directly.
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";
import { unpackTouches, routingKeyHex } from "../lib/packed.mjs";
import { workloadRows, activeTemplates, requestBase } from "../testkit/process-workload.mjs";
import { rng } from "./support/random-cases.mjs";
import { randomRows, randomTemplates, randomRequest } from "./support/random-records.mjs";
import { P17_ROWS, P17_TEMPLATE, p17Requests } from "./support/p17.mjs";

/** Both outputs of one request: `{ objects, packed }` results, or `{ error }` for both. */
async function both(rows, request, templates) {
  const run = (output) => dt.processRows(rows, { ...request, output }, templates).then((ok) => ({ ok }), (e) => ({ error: `${e.code}: ${e.message}` }));
  const [objects, packed] = await Promise.all([run(undefined), run("packed")]);
  return { objects, packed };
}

/** Checks the packed columns against the touch objects one by one (not through unpackTouches). */
function assertColumns(p, touches) {
  assert.equal(p.count, touches.length);
  for (const [name, Type] of [["keyIds", Uint32Array], ["watermarks", BigInt64Array], ["routingKeys", BigUint64Array], ["hasRoutingKey", Uint8Array], ["kinds", Uint8Array], ["entityIndex", Uint32Array], ["templateIndex", Uint32Array]]) {
    assert.ok(p[name] instanceof Type, `${name} is a ${Type.name}`);
    assert.equal(p[name].length, touches.length, `${name}.length`);
  }
  touches.forEach((t, i) => {
    const got = {
      keyId: p.keyIds[i],
      routingKey: p.hasRoutingKey[i] ? p.routingKeys[i].toString(16).padStart(16, "0") : undefined,
      watermark: p.watermarks[i].toString(),
      entity: p.entities[p.entityIndex[i]],
      kind: ["table", "template"][p.kinds[i]],
      templateId: p.templateIndex[i] === 0xffffffff ? undefined : p.templateIds[p.templateIndex[i]],
    };
    assert.deepEqual(got, { ...t }, `touch ${i}`);
    if (!p.hasRoutingKey[i]) assert.equal(p.routingKeys[i], 0n, `touch ${i}: 0 where there is no routing key`);
  });
}

/** Same outcome both ways; returns the number of touches compared. */
function assertSame(name, { objects, packed }) {
  if (objects.error !== undefined || packed.error !== undefined) {
    assert.equal(packed.error, objects.error, name);
    return 0;
  }
  const { touches, ...rest } = objects.ok;
  const { packed: p, ...packedRest } = packed.ok;
  assert.equal(packed.ok.touches, undefined, `${name}: no touch objects in packed output`);
  assert.deepStrictEqual(packedRest, rest, `${name}: stream, processedThrough, stats`);
  assert.deepStrictEqual(unpackTouches(p), touches, `${name}: unpackTouches`);
  assertColumns(p, touches);
  return touches.length;
}

test("B3 workload: packed output carries the same touches in the same order as the objects", async () => {
  const N = 20_000;
  const rows = workloadRows(N);
  const templates = activeTemplates();
  let from = 0n;
  let touches = 0;
  let tableAndTemplate = [0, 0];
  while (from < BigInt(N)) {
    const r = await both(rows, { ...requestBase("fine"), fromOffset: from, toOffset: BigInt(N - 1) }, templates);
    touches += assertSame(`batch from ${from}`, r);
    const k = r.packed.ok.packed.kinds;
    tableAndTemplate[0] += k.filter((x) => x === 0).length;
    tableAndTemplate[1] += k.filter((x) => x === 1).length;
    from = r.objects.ok.processedThrough + 1n;
  }
  assert.ok(touches > 100_000, `${touches} touches`);
  assert.ok(tableAndTemplate[0] > 0 && tableAndTemplate[1] > 0, "both kinds seen");
  // B2's coarse requests too (table touches only, no routing keys).
  const coarse = await both(rows.slice(0, 10_000), { ...requestBase("coarse"), fromOffset: 0n, toOffset: 9_999n }, []);
  assert.ok(assertSame("coarse", coarse) > 0);
  assert.ok(coarse.packed.ok.packed.hasRoutingKey.every((h) => h === 0));
}, { timeout: 120_000 });

test("P17 scenarios and random workloads: packed == objects request by request", async () => {
  const p17 = { rows: P17_ROWS, templates: [P17_TEMPLATE], requests: Object.values(p17Requests()) };
  const r = rng(99);
  const scenarios = [p17];
  for (let s = 0; s < 24; s++) {
    const n = 40 + r.int(260);
    const rows = randomRows(r, n);
    const templates = randomTemplates(r, dt.keys);
    scenarios.push({ rows, templates, requests: [...Array(5)].map(() => randomRequest(r, n, templates.map((t) => t.templateId))) });
  }
  let touches = 0;
  let errors = 0;
  let withRoutingKey = 0;
  for (const [si, s] of scenarios.entries()) {
    const rows = s.rows.map((row, i) => ({ offset: BigInt(i), tsMs: row.tsMs, payload: row.payload }));
    for (const [ri, req] of s.requests.entries()) {
      const res = await both(rows, { ...req, stream: `s${si}` }, s.templates);
      const n = assertSame(`scenario ${si} request ${ri}`, res);
      touches += n;
      if (res.objects.error !== undefined) errors++;
      else withRoutingKey += res.packed.ok.packed.hasRoutingKey.reduce((a, h) => a + h, 0);
    }
  }
  assert.ok(touches > 1000, `only ${touches} touches compared`);
  assert.ok(errors > 0, "error outcomes compared too");
  assert.ok(withRoutingKey > 0 && withRoutingKey < touches, "touches with and without routing keys");
}, { timeout: 120_000 });

test("packed arrays feed TouchJournal.touchMany and wake a waiter on one of the keys", async () => {
  const rows = P17_ROWS.map((row, i) => ({ offset: BigInt(i), tsMs: row.tsMs, payload: row.payload }));
  const res = await dt.processRows(rows, { ...p17Requests().A, stream: "s", output: "packed" }, [P17_TEMPLATE]);
  const p = res.packed;
  const fine = p.hasRoutingKey.indexOf(1);
  const table = p.kinds.indexOf(0);
  assert.ok(fine >= 0 && table >= 0);
  const j = new dt.TouchJournal();
  const byKey = j.waitForAny({ keys: [p.keyIds[table]], afterGeneration: j.getGeneration(), timeoutMs: 10_000 });
  const byRoutingKey = j.waitForAny({ keys: [], exactKeys: [routingKeyHex(p.routingKeys[fine])], afterGeneration: j.getGeneration(), timeoutMs: 10_000 });
  j.touchMany(p.keyIds, p.watermarks, p.routingKeys, p.hasRoutingKey);
  assert.equal(j.getMeta().pendingKeys, new Set(p.keyIds).size);
  j.flush();
  const [a, b] = await Promise.all([byKey, byRoutingKey]);
  assert.equal(a?.generation, 1);
  assert.equal(b?.generation, 1);
  assert.equal(j.getLastFlushedSourceOffsetSeq(), p.watermarks.reduce((m, w) => (w > m ? w : m), -1n));
  // Only the touches that have one add a routing key: 0, the filler, is not in the history.
  assert.equal(j.exactTouchedSinceAny([routingKeyHex(0n)], 0), false);
  j.stop();
});

test("hasRoutingKey: 0 drops routingKeys[i]; bad masks are rejected", () => {
  const j = new dt.TouchJournal();
  j.touchMany(new Uint32Array([1, 2]), null, new BigUint64Array([0xaan, 0xbbn]), new Uint8Array([1, 0]));
  j.flush();
  assert.equal(j.exactTouchedSinceAny(["00000000000000aa"], 0), true);
  assert.equal(j.exactTouchedSinceAny(["00000000000000bb"], 0), false);
  assert.equal(j.maybeTouchedSinceAny([2], 0), true);
  const code = (f) => {
    try {
      f();
    } catch (e) {
      return e.code;
    }
    return "no error";
  };
  assert.equal(code(() => j.touchMany([1], null, new BigUint64Array([1n]), new Uint8Array(2))), "ERR_INVALID_ARGUMENT");
  assert.equal(code(() => j.touchMany([1], null, new BigUint64Array([1n]), [1])), "ERR_INVALID_ARGUMENT");
  assert.equal(code(() => j.touchMany([1], null, ["0000000000000001"], new Uint8Array(1))), "ERR_INVALID_ARGUMENT");
  j.stop();
});

test("output must be \"objects\" or \"packed\"; the default stays objects", async () => {
  const rows = P17_ROWS.map((row, i) => ({ offset: BigInt(i), tsMs: row.tsMs, payload: row.payload }));
  const req = { ...p17Requests().A, stream: "s" };
  for (const output of ["Packed", "", 1, true]) {
    await assert.rejects(dt.processRows(rows, { ...req, output }, [P17_TEMPLATE]), (e) => e.code === "ERR_INVALID_ARGUMENT" && /request\.output/.test(e.message));
  }
  for (const output of [undefined, null, "objects"]) {
    const r = await dt.processRows(rows, { ...req, output }, [P17_TEMPLATE]);
    assert.ok(Array.isArray(r.touches) && r.packed === undefined, String(output));
  }
});

test("TouchEngine.processBatch: packed == objects on a store-backed batch", async () => {
  const store = dt.Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new dt.TouchEngine(store, { checkIntervalMs: 60_000 });
  try {
    await store.append("s", P17_ROWS.map((r) => r.payload));
    const profile = { kind: "state-protocol", touch: { enabled: true, fineTouchBudgetPerBatch: 2000 } };
    engine.setTouchConfig("s", { enabled: true });
    engine.activateTemplates("s", [{ entity: "public.posts", fields: [{ name: "authorId", encoding: "int64" }, { name: "status", encoding: "string" }] }]);
    const req = { stream: "s", fromOffset: 0n, toOffset: 7n, maxRows: 500, maxBytes: 1 << 22, profile };
    const [objects, packed] = await Promise.all([engine.processBatch(req), engine.processBatch({ ...req, output: "packed" })]);
    assert.ok(objects.touches.length > 0);
    assert.equal(assertSame("processBatch", { objects: { ok: objects }, packed: { ok: packed } }), objects.touches.length);
    await assert.rejects(engine.processBatch({ ...req, output: "nope" }), (e) => e.code === "ERR_INVALID_ARGUMENT");
  } finally {
    await engine.close();
    await store.close();
  }
});
