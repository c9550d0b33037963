// Differential test: key derivation against the reference (live_keys.ts, touch_key_id.ts,
// touch_journal.ts) run under Bun, on >= 10,000 random cases (K1-K18, J3).
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { rng, randomString, randomName, randomEntity, randomArgValue, randomDateString } from "./support/random-cases.mjs";

const { keys } = dt;
const ENCODINGS = ["string", "int64", "bool", "datetime", "bytes"];

function revive(v) {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    if ("$special" in v) return { undefined: undefined, "-0": -0, NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity }[v.$special];
    const o = {};
    for (const k of Object.keys(v)) o[k] = revive(v[k]);
    return o;
  }
  if (Array.isArray(v)) return v.map(revive);
  return v;
}

function randomTemplateId(r) {
  const hex16 = () => [...Array(16)].map(() => "0123456789abcdef"[r.int(16)]).join("");
  switch (r.int(8)) {
    case 0: return hex16().toUpperCase();
    case 1: return hex16().slice(0, 1 + r.int(15));
    case 2: return hex16() + hex16().slice(0, r.int(8));
    case 3: return hex16() + r.pick([" ", "\n", "\u00A0", "\uFEFF"]);
    case 4: return r.pick(["", " abc", "xyz", "0x12", "12g4", "-1"]);
    default: return hex16();
  }
}

function randomArgs(r) {
  const n = r.int(4);
  const out = [];
  for (let i = 0; i < n; i++) out.push(r.chance(0.3) ? String(r.int(1000)) : randomString(r, 10));
  return out;
}

function buildCases(seed) {
  const r = rng(seed);
  const cases = [];
  for (let i = 0; i < 1500; i++) {
    const e = randomEntity(r);
    cases.push(["tableKey", e], ["tableKeyId", e]);
  }
  for (let i = 0; i < 1500; i++) {
    const names = [...Array(1 + r.int(3))].map(() => randomName(r)).sort();
    cases.push(["templateId", randomEntity(r), names]);
  }
  for (let i = 0; i < 400; i++) {
    const t = randomTemplateId(r);
    cases.push(["templateKey", t], ["templateKeyId", t]);
  }
  for (let i = 0; i < 3000; i++) cases.push(["encodeTemplateArg", randomArgValue(r), r.pick(ENCODINGS)]);
  for (let i = 0; i < 1500; i++) cases.push(["encodeTemplateArg", randomDateString(r), "datetime"]);
  for (let i = 0; i < 600; i++) {
    const t = randomTemplateId(r);
    const a = randomArgs(r);
    const f = randomName(r);
    cases.push(["watchKey", t, a], ["watchKeyId", t, a], ["membershipKey", t, a], ["membershipKeyId", t, a]);
    cases.push(["projectedFieldKey", t, f, a], ["projectedFieldKeyId", t, f, a]);
  }
  for (let i = 0; i < 800; i++) {
    let k;
    switch (r.int(4)) {
      case 0: k = keys.tableKey(randomEntity(r)); break;
      case 1: k = r.pick(["  ", "\t", ""]) + keys.tableKey(randomEntity(r)).toUpperCase() + r.pick(["", " ", "\u3000"]); break;
      case 2: k = randomString(r, 20); break;
      default: k = randomTemplateId(r);
    }
    cases.push(["touchKeyIdFromRoutingKey", k]);
  }
  for (let i = 0; i < 300; i++) {
    const fields = [...Array(r.int(5))].map(() => ({ name: randomName(r), encoding: r.pick(ENCODINGS) }));
    cases.push(["canonicalizeTemplateFields", fields]);
  }
  for (let i = 0; i < 300; i++) {
    const epoch = [...Array(16)].map(() => "0123456789abcdefABCDEF"[r.int(22)]).join("");
    const raw = r.pick([
      `${epoch}:${r.int(1e6)}`,
      ` ${epoch}:${"9".repeat(1 + r.int(30))} `,
      `${epoch.slice(1)}:1`,
      `${epoch}:-1`,
      `${epoch}:1.5`,
      `:${r.int(9)}`,
      `${epoch}:`,
      randomString(r, 20),
      `${epoch}:0${r.int(99)}`,
    ]);
    cases.push(["parseTouchCursor", raw]);
    cases.push(["formatTouchCursor", epoch, r.pick([0, 1.9, -3, 2 ** 53, 1e21, r.int(1e9)])]);
  }
  return cases;
}

function ours([op, ...args]) {
  try {
    const a = args.map(revive);
    const v = (keys[op] ?? dt[op])(...a);
    return v === undefined ? { $special: "undefined" } : v;
  } catch (e) {
    return { $error: String(e?.message ?? e) };
  }
}

test("key derivation matches the reference on >= 10,000 random cases", async () => {
  const cases = buildCases(20261202);
  assert.ok(cases.length >= 10_000, `only ${cases.length} cases`);
  const expected = await runReference("keys", { cases }, { env: { TZ: "UTC" } });
  assert.equal(expected.length, cases.length);
  const mismatches = [];
  const byOp = {};
  for (let i = 0; i < cases.length; i++) {
    const got = ours(cases[i]);
    const want = expected[i];
    const op = cases[i][0];
    byOp[op] = (byOp[op] ?? 0) + 1;
    // Both sides refusing (a SyntaxError there, ERR_INVALID_ARGUMENT here) counts as agreement.
    const same = want && want.$error !== undefined ? got && got.$error !== undefined : JSON.stringify(got) === JSON.stringify(want);
    if (!same) mismatches.push({ case: cases[i], ours: got, reference: want });
  }
  assert.deepEqual(mismatches.slice(0, 20), [], `${mismatches.length} of ${cases.length} cases differ`);
  // Every operation was exercised.
  assert.equal(Object.keys(byOp).length, 16);
}, { timeout: 120_000, skip: !referenceAvailable() });

test("worked examples K16-K18 hold through the JS API", () => {
  assert.equal(keys.tableKey("public.posts"), "0266aa40b9d08dc8");
  assert.equal(keys.tableKeyId("public.posts"), 3117452744);
  const fields = keys.canonicalizeTemplateFields([{ name: "status", encoding: "string" }, { name: "authorId", encoding: "int64" }]);
  assert.deepEqual(fields, [{ name: "authorId", encoding: "int64" }, { name: "status", encoding: "string" }]);
  const id = keys.templateId("public.posts", fields.map((f) => f.name));
  assert.equal(id, "87e41f4a8d440298");
  assert.equal(keys.templateKeyId(id), 125756624);
  const args = [keys.encodeTemplateArg(42, "int64"), keys.encodeTemplateArg("published", "string")];
  assert.deepEqual(args, ["42", "published"]);
  assert.equal(keys.watchKey(id, args), "47fdf51496b95b3e");
  assert.equal(keys.membershipKeyId(id, args), 1042752078);
  assert.equal(keys.projectedFieldKey(id, "title", args), "033f9c07606c38ad");
  assert.equal(keys.touchKeyIdFromRoutingKey("  47FDF51496B95B3E "), 2528729918);
  assert.equal(keys.touchKeyIdFromRoutingKey("  User:42 "), 4132429719);
  assert.equal(keys.encodeTemplateArg("\ud800x", "string"), "\ud800x");
  assert.equal(keys.encodeTemplateArg(1e21, "int64"), "1e+21");
  assert.throws(() => keys.templateKey("xyz"), (e) => e.code === "ERR_INVALID_ARGUMENT");
  assert.throws(() => keys.encodeTemplateArg(1, "uuid"), (e) => e.code === "ERR_INVALID_ARGUMENT");
  assert.deepEqual(dt.parseTouchCursor(" 0123456789ABCDEF:7 "), { epoch: "0123456789abcdef", generation: 7 });
  assert.equal(dt.parseTouchCursor("nope"), null);
  assert.equal(dt.formatTouchCursor("0123456789abcdef", 3.9), "0123456789abcdef:3");
  // One implementation: the cursor functions are not duplicated under `keys`.
  assert.equal(keys.parseTouchCursor, undefined);
});
