// Differential test: touch config and state-protocol profile validation against the
// reference (C5, C7, B21): the same normalised config or the same error message.
import assert from "node:assert/strict";
import { test, dt } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { rng, randomString } from "./support/random-cases.mjs";

const TOP = ["enabled", "coarseIntervalMs", "touchCoalesceWindowMs", "onMissingBefore", "lagDegradeFineTouchesAtSourceOffsets", "lagRecoverFineTouchesAtSourceOffsets", "fineTouchBudgetPerBatch", "fineTokensPerSecond", "fineBurstTokens", "lagReservedFineTouchBudgetPerBatch"];
const MEMORY = ["bucketMs", "filterPow2", "k", "pendingMaxKeys", "keyIndexMaxKeys", "hotKeyTtlMs", "hotTemplateTtlMs", "hotMaxKeys", "hotMaxTemplates"];
const TEMPLATES = ["defaultInactivityTtlMs", "lastSeenPersistIntervalMs", "gcIntervalMs", "maxActiveTemplatesPerEntity", "maxActiveTemplatesPerStream", "activationRateLimitPerMinute"];

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

function randomValue(r) {
  switch (r.int(14)) {
    case 0: return r.pick([0, -1, 1, 2, 9, 10, 30, 31, 8, 1024, 1025, 100, 5000, 0.5, 1.5, -0.5, 1e21, 2 ** 53]);
    case 1: return r.int(100000);
    case 2: return r.pick(["100", " 5 ", "abc", "", "0x10", "1e3", "-0", "Infinity", "1_0", ".5", "5.", "\u00a07\n"]);
    case 3: return r.chance(0.5);
    case 4: return null;
    case 5: return r.pick([[], [5], [1, 2], ["7"], [[3]], [null]]);
    case 6: return { a: 1 };
    case 7: return { $special: r.pick(["undefined", "NaN", "Infinity", "-Infinity", "-0"]) };
    case 8: return r.pick(["coarse", "skipBefore", "error", "Coarse", " error"]);
    case 9: return randomString(r, 4);
    default: return r.int(2000) - 20;
  }
}

function randomSection(r, names) {
  if (r.chance(0.1)) return randomValue(r);
  const o = {};
  for (const n of names) if (r.chance(0.3)) o[n] = randomValue(r);
  if (r.chance(0.08)) o[r.pick(["zzz", "5", "bucketms", "0"])] = 1;
  return o;
}

function randomConfig(r) {
  if (r.chance(0.04)) return randomValue(r);
  const o = {};
  const enabled = r.pick([true, true, true, true, false, 1, 0, "x", "", null, { $special: "undefined" }, "absent"]);
  if (enabled !== "absent") o.enabled = enabled;
  for (const n of TOP.slice(1)) if (r.chance(0.25)) o[n] = r.chance(0.2) && n === "onMissingBefore" ? r.pick(["coarse", "skipBefore", "error"]) : randomValue(r);
  if (r.chance(0.4)) o.memory = randomSection(r, MEMORY);
  if (r.chance(0.4)) o.templates = randomSection(r, TEMPLATES);
  if (r.chance(0.05)) o[r.pick(["storage", "10", "derivedStream", "Enabled"])] = 1;
  return o;
}

function buildCases(seed) {
  const r = rng(seed);
  const cases = [];
  for (let i = 0; i < 3000; i++) cases.push({ kind: "touch", raw: randomConfig(r), path: r.pick(["touch", "profile.touch", "x"]) });
  for (let i = 0; i < 600; i++) {
    let raw;
    if (r.chance(0.05)) raw = randomValue(r);
    else {
      raw = { kind: r.pick(["state-protocol", "state-protocol", "state-protocol", "generic", " state-protocol", 5]) };
      if (r.chance(0.7)) raw.touch = randomConfig(r);
      if (r.chance(0.05)) raw.extra = 1;
    }
    cases.push({ kind: "profile", raw, path: "profile" });
  }
  return cases;
}

function ours(c) {
  try {
    const fn = c.kind === "touch" ? dt.validateTouchConfig : dt.validateStateProtocolProfile;
    return { ok: fn(revive(c.raw), c.path) };
  } catch (e) {
    if (e.code !== "ERR_INVALID_TOUCH_CONFIG") return { unexpected: `${e.code}: ${e.message}` };
    return { error: e.message };
  }
}

test("touch config validation matches the reference on random valid and invalid configs", async () => {
  const cases = buildCases(7);
  const expected = await runReference("touch-config", { cases });
  const mismatches = [];
  let ok = 0;
  for (let i = 0; i < cases.length; i++) {
    const got = ours(cases[i]);
    if (expected[i].ok) ok++;
    if (JSON.stringify(got) !== JSON.stringify(expected[i])) mismatches.push({ case: cases[i], ours: got, reference: expected[i] });
  }
  assert.deepEqual(mismatches.slice(0, 10), [], `${mismatches.length} of ${cases.length} differ`);
  // Both outcomes are well represented.
  assert.ok(ok > 300 && cases.length - ok > 300, `valid ${ok} / invalid ${cases.length - ok}`);
}, { timeout: 120_000, skip: !referenceAvailable() });

test("validateTouchConfig returns the defaults and throws ERR_INVALID_TOUCH_CONFIG", () => {
  const cfg = dt.validateTouchConfig({ enabled: true, coarseIntervalMs: "250" });
  assert.equal(cfg.coarseIntervalMs, 250);
  assert.equal(cfg.memory.filterPow2, 22);
  assert.equal(cfg.templates.activationRateLimitPerMinute, 100);
  assert.deepEqual(dt.validateTouchConfig({ enabled: false, coarseIntervalMs: -1 }), { enabled: false });
  assert.throws(() => dt.validateTouchConfig({ enabled: true, memory: { k: 9 } }), (e) => e.code === "ERR_INVALID_TOUCH_CONFIG" && e.message === "touch.memory.k must be an integer in [1,8]");
  assert.throws(() => dt.validateTouchConfig(null, "profile.touch"), (e) => e.message === "profile.touch must be an object");
  assert.throws(() => dt.validateTouchConfig({ enabled: true, nope: undefined }), (e) => e.message === "touch.nope is not supported");
  const cyclic = { enabled: true };
  cyclic.memory = cyclic;
  assert.throws(() => dt.validateTouchConfig(cyclic), (e) => e.code === "ERR_INVALID_ARGUMENT");
});
