// The swapped server's touch routes next to the unswapped server's (both under Bun), on what a
// client gets wrong: a table of bad requests on `touch/wait`, `touch/meta` and
// `touch/templates/activate`, and activations beyond the template caps and the activation rate
// limit. Every answer must be the same, except where docs/deviations.md says otherwise; those
// differences are listed here, each with the deviation it follows from.
import assert from "node:assert/strict";
import { test } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { serverCopies } from "./support/server-copies.mjs";
import { swap } from "../apps/swap/swap.mjs";

const bad = (message) => ({ status: 400, error: { code: "bad_request", message }, fields: ["error"] });
const internal = { status: 500, error: { code: "internal", message: "internal server error" }, fields: ["error"] };
const timedOut = {
  status: 200,
  fields: ["touched", "cursor", "effectiveWaitKind", "bucketMaxSourceOffsetSeq", "flushAtMs", "bucketStartMs"],
  touched: false,
  effectiveWaitKind: "fineKey",
  cursorForm: true,
};

/** Case → [what the unswapped server answers, what the swapped one answers]. */
const EXPECTED_DIFFERENCES = {
  // deviations.md, Engine B16 and compat "Wait route": template ids that `BigInt("0x" + id)`
  // rejects are a 400 up front; the reference throws while planning the wait (500), even
  // before it looks at the cursor.
  "wait: templateIdsUsed non-hex": [internal, bad("wait.templateIdsUsed must contain hex template ids")],
  "wait: templateIdsUsed non-hex, coarse": [internal, bad("wait.templateIdsUsed must contain hex template ids")],
  "wait: templateIdsUsed 0x-prefixed": [internal, bad("wait.templateIdsUsed must contain hex template ids")],
  "wait: templateIdsUsed non-hex and cursor malformed": [internal, bad("wait.templateIdsUsed must contain hex template ids")],
  // deviations.md, Engine W1: `keys` over 1,024 are refused by their raw length (the reference
  // caps after its dedupe).
  "wait: keys 1,025 that dedupe to 1,000": [timedOut, bad("wait.keys too large (max 1024)")],
  // W1: `keyIds` over 1,024 are refused by length before the reference would report invalid
  // or repeated ids.
  "wait: keyIds 1,025 with duplicates": [bad("wait.keyIds must be a non-empty uint32 array when provided"), bad("wait.keyIds too large (max 1024)")],
  "wait: keyIds 50,000 with an invalid one first": [bad("wait.keyIds must be a non-empty uint32 array when provided"), bad("wait.keyIds too large (max 1024)")],
  // W1: `templateIdsUsed` over 1,024 are refused (the reference has no cap).
  "wait: templateIdsUsed 1,025": [timedOut, bad("wait.templateIdsUsed too large (max 1024)")],
};

const seen = (c) => {
  const { elapsedMs, ...rest } = c;
  return rest;
};

test("bad requests on the touch routes get the same answers from the swapped server as from the unswapped one (except documented deviations)", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const [a, b] = await Promise.all([
    runReference("swap-bad-input", {}, { env: { APP_SRC: plain }, retries: 1 }),
    runReference("swap-bad-input", {}, { env: { APP_SRC: swapped }, retries: 1 }),
  ]);
  assert.deepEqual(b.cases.map((c) => c.name), a.cases.map((c) => c.name));
  assert.ok(a.cases.length > 150, `${a.cases.length} cases`);
  const names = new Set(a.cases.map((c) => c.name));
  for (const name of Object.keys(EXPECTED_DIFFERENCES)) assert.ok(names.has(name), `case ${name} exists`);
  for (let i = 0; i < a.cases.length; i++) {
    const [p, s] = [seen(a.cases[i]), seen(b.cases[i])];
    const expected = EXPECTED_DIFFERENCES[p.name];
    if (expected) {
      assert.deepEqual(p, { name: p.name, ...expected[0] }, `unswapped: ${p.name}`);
      assert.deepEqual(s, { name: s.name, ...expected[1] }, `swapped: ${s.name}`);
    } else {
      assert.deepEqual(s, p, `swapped vs unswapped: ${p.name}`);
    }
  }
  // The table covers what it means to: some answers of each kind.
  const byName = Object.fromEntries(a.cases.map((c) => [c.name, c]));
  assert.equal(byName["wait: cursor xyz"].status, 400);
  assert.equal(byName["wait: cursor of another epoch"].stale, true);
  assert.equal(byName["wait: timeoutMs 1e12, touched at once"].touched, true);
  assert.equal(byName["wait: timeoutMs 1e12, parked"].status, "parked");
  assert.equal(byName["wait: 1,024 keys and 1,024 templateIdsUsed, parked"].status, "parked");
  assert.equal(byName["meta?settle=nope"].status, 400);
  assert.equal(byName["activate: 256 templates (rate limit 100/min)"].activated.length, 100);
  assert.equal(byName["activate: the same template with another encoding"].denied[0].reason, "invalid");
  // Both servers still process and wake afterwards.
  for (const r of [a, b]) assert.deepEqual(r.afterwards, { status: 200, touched: true });
}, { timeout: 60_000, skip: !referenceAvailable() });

test("activations beyond the template caps and the rate limit: the same activated / denied / active templates (except B11)", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const [a, b] = await Promise.all([
    runReference("swap-activation-caps", {}, { env: { APP_SRC: plain }, retries: 1 }),
    runReference("swap-activation-caps", {}, { env: { APP_SRC: swapped }, retries: 1 }),
  ]);
  assert.deepEqual(Object.keys(b), Object.keys(a));

  // deviations.md, Engine B11: a template evicted by the caps of its own call is `denied` with
  // `cap_exceeded`; the reference reports it `activated` (and has evicted it). With the three
  // templates of one call sharing their last-seen time, the eviction takes the smallest id.
  const b11 = (p) => {
    const evicted = [...p.activated].sort()[0];
    return { ...p, activated: p.activated.filter((id) => id !== evicted), denied: [{ templateId: evicted, reason: "cap_exceeded" }] };
  };
  const EXPECTED = {
    "caps:b1, b2, b3 in one call": b11,
    "stream-cap:p, q, r in one call": b11,
    // deviations.md (B12, B13, B21, B23 row): with a fractional cap (1.5, which the profile
    // accepts) the reference evicts nothing, its `LIMIT 0.5` query failing inside a `try`;
    // the engine rounds the excess up and evicts one.
    "fractional:meta": (p, i) => (i === 2 ? { ...p, activeTemplates: 1 } : p),
  };
  for (const scenario of Object.keys(a)) {
    assert.equal(b[scenario].length, a[scenario].length, scenario);
    a[scenario].forEach((p, i) => {
      const expect = EXPECTED[`${scenario}:${p.call}`];
      assert.deepEqual(b[scenario][i], expect ? expect(p, i) : p, `${scenario}: step ${i} (${p.call})`);
    });
  }
  // The scenarios do what they say (in the reference).
  const step = (scenario, call) => a[scenario].find((s) => s.call === call);
  assert.equal(step("caps", "b1, b2, b3 in one call").activated.length, 3);
  assert.deepEqual(Object.values(a.caps.find((s) => s.call === "probe").states).sort(), ["active", "active", "active", "rate_limited", "rate_limited", "rate_limited"]);
  assert.equal(step("caps", "a1 again (tokens spent)").denied[0].reason, "rate_limited");
  assert.deepEqual(step("rate", "f3, f4, f5 (one token left)").denied.map((d) => d.reason), ["rate_limited", "rate_limited"]);
  assert.deepEqual(step("rate", "f1 again (active: no token)").denied, []);
  assert.equal(a["stream-cap"][1].activeTemplates, 2);
}, { timeout: 60_000, skip: !referenceAvailable() });
