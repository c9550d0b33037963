// Bad input gets a coded error, never a silently coerced value: non-u32 key ids and
// generations, negative / NaN / huge timeouts, more than 1024 keys, malformed options,
// offsets that are not bigints. waitForAny rejects; the synchronous methods throw.
import assert from "node:assert/strict";
import { test, dt, rejectsWithCode } from "./harness.mjs";

const { TouchJournal, parseTouchCursor, formatTouchCursor } = dt;

const throwsCode = (fn, code) =>
  assert.throws(fn, (e) => {
    assert.ok(e instanceof Error);
    assert.equal(e.code, code, e.message);
    return true;
  });

test("waitForAny rejects bad arguments with ERR_INVALID_ARGUMENT", async () => {
  const j = new TouchJournal();
  const bad = [
    undefined,
    null,
    [1],
    { keys: [1] }, // no timeout
    { keys: [1], timeoutMs: -1 },
    { keys: [1], timeoutMs: NaN },
    { keys: [1], timeoutMs: Infinity },
    { keys: [1], timeoutMs: 2 ** 31 },
    { keys: [1], timeoutMs: "100" },
    { keys: [-1], timeoutMs: 10 },
    { keys: [1.5], timeoutMs: 10 },
    { keys: [2 ** 32], timeoutMs: 10 },
    { keys: [NaN], timeoutMs: 10 },
    { keys: ["1"], timeoutMs: 10 },
    { keys: 5, timeoutMs: 10 },
    { keys: Array.from({ length: 1025 }, (_, i) => i), timeoutMs: 10 },
    { keys: [], exactKeys: Array.from({ length: 1025 }, (_, i) => i.toString(16).padStart(16, "0")), timeoutMs: 10 },
    { keys: [], exactKeys: [42], timeoutMs: 10 },
    { keys: [1], afterGeneration: -1, timeoutMs: 10 },
    { keys: [1], afterGeneration: 2 ** 32, timeoutMs: 10 },
    { keys: [1], afterGeneration: 0.5, timeoutMs: 10 },
  ];
  for (const args of bad) {
    await rejectsWithCode(j.waitForAny(args), "ERR_INVALID_ARGUMENT");
  }
  assert.equal(j.getActiveWaiters(), 0);
  // The limits themselves are accepted.
  const ok = j.waitForAny({ keys: Array.from({ length: 1024 }, (_, i) => i), afterGeneration: 4294967295, timeoutMs: 2 ** 31 - 1 });
  assert.equal(j.getActiveWaiters(), 1);
  j.stop();
  assert.equal(await ok, null);
});

test("the synchronous methods throw coded errors", () => {
  const j = new TouchJournal();
  for (const key of [-1, 1.5, 2 ** 32, NaN, "1", undefined, 1n]) {
    throwsCode(() => j.touch(key), "ERR_INVALID_ARGUMENT");
    throwsCode(() => j.maybeTouchedSince(key, 0), "ERR_INVALID_ARGUMENT");
  }
  throwsCode(() => j.touch(1, 5), "ERR_INVALID_ARGUMENT"); // offsets are bigint
  throwsCode(() => j.touch(1, 2n ** 64n), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.touch(1, 1n, 42), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.maybeTouchedSince(1, -1), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.maybeTouchedSinceAny([1, -2], 0), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.maybeTouchedSinceAny("1", 0), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.exactTouchedSinceAny([1], 0), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.exactTouchedSinceAny(["00000000000000aa"], 1.5), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.setCoalesceMs(NaN), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.setCoalesceMs("5"), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.touchMany([1, 2], new BigInt64Array(1)), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.touchMany([1, -2]), "ERR_INVALID_ARGUMENT");
  assert.equal(j.getMeta().pendingKeys, 0, "nothing was half applied");
  // Ignored, as in the reference: a routing key that is not 16 hex.
  j.touch(1, null, "not-a-routing-key");
  j.flush();
  assert.equal(j.exactTouchedSinceAny(["not-a-routing-key"], 0), false);
});

test("constructor options and cursor helpers refuse what they cannot use", () => {
  for (const opts of [5, "x", { bucketMs: NaN }, { filterPow2: Infinity }, { k: "4" }, { initialGeneration: -1 }, { initialGeneration: 2 ** 32 }]) {
    throwsCode(() => new TouchJournal(opts), "ERR_INVALID_ARGUMENT");
  }
  throwsCode(() => parseTouchCursor(5), "ERR_INVALID_ARGUMENT");
  throwsCode(() => formatTouchCursor("e", NaN), "ERR_INVALID_ARGUMENT");
  throwsCode(() => TouchJournal.slotPositions(-3), "ERR_INVALID_ARGUMENT");
  // Malformed cursors parse to null (the wait route turns that into ERR_INVALID_CURSOR).
  assert.equal(parseTouchCursor("abc:1"), null);
});
