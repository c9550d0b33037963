// The server's look at a JSON body before parsing it (apps/server/json-body.mjs): on random JSON, with
// escapes, brackets and commas inside strings and keys, and slices as small as one byte (so
// every escape meets a slice boundary), the counts are the parsed value's.
import assert from "node:assert/strict";
import { test } from "./harness.mjs";
import { scanJson } from "../apps/server/json-body.mjs";
import { rng } from "./support/random-cases.mjs";

const CHARS = ["a", "Z", "0", " ", "\\", '"', "[", "]", "{", "}", ",", ":", "\n", "\u0001", "é", "中", "😀", "\u2028", "\\u005c"];

function randomString(r) {
  let s = "";
  for (let n = r.int(6); n > 0; n--) s += r.pick(CHARS);
  return s;
}

function randomValue(r, depth) {
  const k = depth >= 6 ? r.int(4) : r.int(7);
  if (k === 0) return r.int(1000) - 500;
  if (k === 1) return randomString(r);
  if (k === 2) return r.pick([true, false, null, 1.5e-7]);
  if (k === 3) return "";
  if (k <= 4) return Array.from({ length: r.int(4) }, () => randomValue(r, depth + 1));
  return Object.fromEntries(Array.from({ length: r.int(4) }, () => [randomString(r), randomValue(r, depth + 1)]));
}

/** What scanJson promises: nesting depth, top-level array length, values + empty containers. */
function expected(v) {
  let values = 0;
  const walk = (x, d) => {
    values++;
    if (x === null || typeof x !== "object") return d;
    const children = Array.isArray(x) ? x : Object.values(x);
    if (children.length === 0) values++;
    return Math.max(d + 1, ...children.map((c) => walk(c, d + 1)));
  };
  const depth = walk(v, 0);
  return { depth, items: Array.isArray(v) ? v.length : -1, values };
}

test("scanJson counts depth, top-level items and values of random JSON, whatever the slice size", async () => {
  const r = rng(2024);
  for (let i = 0; i < 400; i++) {
    const v = randomValue(r, 0);
    const text = JSON.stringify(v, null, r.pick([0, 0, 1, "\t"]));
    const bytes = new TextEncoder().encode(text);
    const want = { ...expected(v), complete: true };
    for (const slice of [1, 2, 3, 7, 64, undefined]) {
      assert.deepEqual(await scanJson(bytes, { slice }), want, `slice ${slice}: ${text}`);
    }
  }
  assert.deepEqual(await scanJson(new Uint8Array()), { depth: 0, items: -1, values: 0, complete: true });
});

test("scanJson stops at the first slice where `stop` holds", async () => {
  const bytes = new TextEncoder().encode(`[${new Array(10_000).fill('"a\\\\,[{"').join(",")}]`);
  const c = await scanJson(bytes, { slice: 100, stop: (x) => x.items > 50 });
  assert.equal(c.complete, false);
  assert.ok(c.items > 50 && c.items < 70, `stopped near the limit (${c.items} items)`);
  assert.deepEqual(await scanJson(bytes, { slice: 100 }), { depth: 1, items: 10_000, values: 10_001, complete: true });
  const deep = new TextEncoder().encode("[".repeat(100_000) + "]".repeat(100_000));
  const d = await scanJson(deep, { slice: 4096, stop: (x) => x.depth > 1000 });
  assert.deepEqual([d.complete, d.depth], [false, 4096]);
});
