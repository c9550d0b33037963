// A randomized end-to-end check of "no false negative": an oracle that knows every row's true
// before and after image decides which waits a batch of changes concerns; every concerned
// wait must come back touched. Changes include updates and deletes without old_value, which
// the reference cannot turn into fine keys (B5); false positives are allowed and counted.
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";
import { mulberry32 } from "../testkit/gen-workload.mjs";

const { Store, TouchEngine, keys } = dt;
const ENTITY = "public.items";
const TEMPLATES = [
  { entity: ENTITY, fields: [{ name: "tenantId", encoding: "string" }] },
  { entity: ENTITY, fields: [{ name: "status", encoding: "string" }, { name: "tenantId", encoding: "string" }] },
];

test("every wait a change concerns is woken (randomized, with an exact oracle)", async () => {
  const rnd = mulberry32(20261202);
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, { checkIntervalMs: 50 });
  engine.setTouchConfig("s", { enabled: true });
  const act = engine.activateTemplates("s", TEMPLATES);
  const ids = act.activated.map((a) => a.templateId);
  // Field order of each template's args (canonical: sorted names).
  const argsOf = [(r) => [r.tenantId], (r) => [r.status, r.tenantId]];
  const tenants = ["t0", "t1", "t2", "t3", "t4"];
  const statuses = ["a", "b", "c"];

  const live = new Map();
  let nextId = 1;
  let concernedTotal = 0;
  let falsePositives = 0;
  let unconcernedTotal = 0;

  for (let round = 0; round < 25; round++) {
    // 1. A set of waits on random keys, half of them naming their template.
    const { cursor } = await engine.meta("s");
    const specs = Array.from({ length: 16 }, () => {
      const t = Math.floor(rnd() * 2);
      const row = { tenantId: pick(tenants), status: pick(statuses) };
      const kind = pick(["watch", "membership"]);
      const key = kind === "watch" ? keys.watchKey(ids[t], argsOf[t](row)) : keys.membershipKey(ids[t], argsOf[t](row));
      return { key, templated: rnd() < 0.5, t };
    });

    // 2. The changes of this round and the keys they concern (true images).
    const changes = [];
    const concerned = new Set();
    const concern = (before, after) => {
      for (let t = 0; t < 2; t++) {
        const b = before && argsOf[t](before);
        const a = after && argsOf[t](after);
        if (b) concerned.add(keys.watchKey(ids[t], b));
        if (a) concerned.add(keys.watchKey(ids[t], a));
        const same = b && a && JSON.stringify(b) === JSON.stringify(a);
        if (!same) {
          if (b) concerned.add(keys.membershipKey(ids[t], b));
          if (a) concerned.add(keys.membershipKey(ids[t], a));
        }
      }
    };
    const n = 1 + Math.floor(rnd() * 6);
    for (let i = 0; i < n; i++) {
      const op = live.size === 0 ? "insert" : pick(["insert", "update", "update", "delete"]);
      if (op === "insert") {
        const row = { id: String(nextId++), tenantId: pick(tenants), status: pick(statuses) };
        live.set(row.id, row);
        changes.push({ type: ENTITY, key: row.id, value: row, headers: { operation: "insert" } });
        concern(null, row);
      } else if (op === "update") {
        const before = pick([...live.values()]);
        const after = { ...before, status: rnd() < 0.6 ? pick(statuses) : before.status, tenantId: rnd() < 0.4 ? pick(tenants) : before.tenantId };
        live.set(after.id, after);
        const rec = { type: ENTITY, key: after.id, value: after, headers: { operation: "update" } };
        if (rnd() < 0.7) rec.old_value = before;
        changes.push(rec);
        concern(before, after);
      } else {
        const before = pick([...live.values()]);
        live.delete(before.id);
        const rec = { type: ENTITY, key: before.id, headers: { operation: "delete" } };
        if (rnd() < 0.7) rec.old_value = before;
        changes.push(rec);
        concern(before, null);
      }
    }

    const waits = specs.map((s) => {
      const req = { stream: "s", cursor, keys: [s.key], timeoutMs: concerned.has(s.key) ? 5000 : 150 };
      if (s.templated) req.templateIdsUsed = [ids[s.t]];
      return engine.wait(req).then((r) => ({ ...s, r }));
    });
    await sleep(5);
    // Half the rounds append change by change, half in one call.
    if (rnd() < 0.5) {
      for (const c of changes) await store.append("s", [JSON.stringify(c)]);
    } else {
      await store.append("s", changes.map((c) => JSON.stringify(c)));
    }
    for (const w of await Promise.all(waits)) {
      if (concerned.has(w.key)) {
        concernedTotal++;
        assert.equal(w.r.touched, true, `round ${round}: a wait on a concerned key (${w.templated ? "templated" : "untemplated"}) was not woken`);
      } else {
        unconcernedTotal++;
        if (w.r.touched) falsePositives++;
      }
    }
    await engine.meta("s", { settle: "flush", timeoutMs: 5000 });
  }
  assert.ok(concernedTotal > 50, `only ${concernedTotal} concerned waits`);
  console.log(`oracle: ${concernedTotal} concerned waits all woken; ${falsePositives}/${unconcernedTotal} unconcerned waits woken (false positives)`);
  await engine.close();
  await store.close();
}, { timeout: 120_000 });
