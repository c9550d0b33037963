// Vendored from shared/bench/gen-workload.mjs (the workload shared with the reference baseline);
// keep byte-identical apart from this header so fixtures stay comparable.

// Deterministic State Protocol change-record workload for benchmarks.
//
// Plain ES module, no dependencies; runs unchanged on Node >= 20 and Bun.
//
//   import { generateRecords, templateDecls, walTsMs } from "./gen-workload.mjs";
//   const lines = generateRecords({ n: 200000, seed: 1 }); // array of JSON strings
//
//   node gen-workload.mjs --n 200000 --seed 1 > workload.jsonl
//
// The same (n, seed) always yields byte-identical output, and the first k
// records of generateRecords({n, seed}) equal generateRecords({n: k, seed}).
// See README.md next to this file for the record format.

export const ENTITY_COUNT = 8;
export const ENTITIES = Array.from({ length: ENTITY_COUNT }, (_, i) => `public.e${i}`);
export const STATUSES = ["open", "done", "archived"];
export const TENANT_COUNT = 100; // "t0".."t99"
export const USER_COUNT = 10000; // "u0".."u9999"
export const MAX_PRIORITY = 5; // priority is an integer 0..5

/** Epoch of record 0: 2024-01-01T00:00:00.000Z. Record i is stamped T0_MS + i. */
export const T0_MS = 1704067200000;

/**
 * WAL row timestamp convention shared by the benchmarks: the record at stream
 * offset i is appended with ts_ms = T0_MS + i (1 ms apart). The touch
 * processor's 100 ms coalescing windows depend on ts_ms, so any
 * implementation compared against fixtures must use the same convention.
 */
export function walTsMs(offset) {
  return T0_MS + Number(offset);
}

/** mulberry32: 32-bit state, returns floats in [0, 1). */
export function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TITLE_ALPHABET = "abcdefghijklmnopqrstuvwxyz ";

function makeRng(seed) {
  const r = mulberry32(seed);
  return {
    float: r,
    /** integer in [0, n) */
    int(n) {
      return Math.floor(r() * n);
    },
  };
}

function randomTitle(rng) {
  const len = 30 + rng.int(21); // 30..50
  let s = "";
  for (let i = 0; i < len; i++) s += TITLE_ALPHABET[rng.int(TITLE_ALPHABET.length)];
  // Keep titles free of leading/trailing spaces.
  if (s[0] === " ") s = "x" + s.slice(1);
  if (s[s.length - 1] === " ") s = s.slice(0, -1) + "x";
  return s;
}

function pickOther(rng, current, count, prefix) {
  // Uniformly pick a value different from `current` among prefix0..prefix{count-1}.
  const cur = Number(current.slice(prefix.length));
  const k = rng.int(count - 1);
  return prefix + String(k >= cur ? k + 1 : k);
}

function pickOtherStatus(rng, current) {
  const idx = STATUSES.indexOf(current);
  const k = rng.int(STATUSES.length - 1);
  return STATUSES[k >= idx ? k + 1 : k];
}

// Row objects are always built with this key order so JSON.stringify output is stable.
function makeRow(id, tenantId, status, userId, title, priority, updatedAt) {
  return { id, tenantId, status, userId, title, priority, updatedAt };
}

/** Per-entity live-row set with O(1) random pick and removal (swap-remove). */
class LiveRows {
  constructor() {
    this.rows = [];
  }
  get size() {
    return this.rows.length;
  }
  add(row) {
    this.rows.push(row);
  }
  pickIndex(rng) {
    return rng.int(this.rows.length);
  }
  removeAt(i) {
    const last = this.rows.length - 1;
    const row = this.rows[i];
    this.rows[i] = this.rows[last];
    this.rows.pop();
    return row;
  }
}

/**
 * Generate `n` State Protocol change records as JSON strings.
 *
 * PRNG draw order per record (all from one mulberry32(seed) stream):
 *   1. transaction boundary (when the current tx is exhausted): tx size 1..4
 *   2. entity index 0..7
 *   3. operation draw u in [0,1): u < 0.5 insert, u < 0.9 update, else delete
 *      (update/delete on an entity with no live rows becomes an insert)
 *   4. operation-specific draws (see code)
 */
export function generateRecords({ n, seed = 1 } = {}) {
  const count = Math.max(0, Math.floor(Number(n)));
  if (!Number.isFinite(count)) throw new Error("generateRecords: n must be a finite number");
  const rng = makeRng(Number(seed) >>> 0);
  const live = ENTITIES.map(() => new LiveRows());
  const nextId = ENTITIES.map(() => 1);
  const out = new Array(count);

  let txid = 0;
  let txLeft = 0;

  for (let i = 0; i < count; i++) {
    if (txLeft === 0) {
      txid += 1;
      txLeft = 1 + rng.int(4);
    }
    txLeft -= 1;

    const e = rng.int(ENTITY_COUNT);
    const type = ENTITIES[e];
    const timestamp = new Date(T0_MS + i).toISOString();
    const headersBase = { txid: String(txid), timestamp };
    const rows = live[e];

    const u = rng.float();
    let op = u < 0.5 ? "insert" : u < 0.9 ? "update" : "delete";
    if (op !== "insert" && rows.size === 0) op = "insert";

    let rec;
    if (op === "insert") {
      const id = String(nextId[e]++);
      const row = makeRow(
        id,
        "t" + rng.int(TENANT_COUNT),
        STATUSES[rng.int(STATUSES.length)],
        "u" + rng.int(USER_COUNT),
        randomTitle(rng),
        rng.int(MAX_PRIORITY + 1),
        timestamp
      );
      rows.add(row);
      rec = { type, key: id, value: row, headers: { operation: "insert", ...headersBase } };
    } else if (op === "update") {
      const idx = rows.pickIndex(rng);
      const before = rows.rows[idx];
      // Which indexed columns change. At least one of status / userId / tenantId always changes.
      const m = rng.float();
      let chStatus = false;
      let chUser = false;
      let chTenant = false;
      if (m < 0.4) chStatus = true;
      else if (m < 0.6) chUser = true;
      else if (m < 0.7) chTenant = true;
      else if (m < 0.9) {
        chStatus = true;
        chUser = true;
      } else {
        chStatus = true;
        chTenant = true;
      }
      const status = chStatus ? pickOtherStatus(rng, before.status) : before.status;
      const userId = chUser ? pickOther(rng, before.userId, USER_COUNT, "u") : before.userId;
      const tenantId = chTenant ? pickOther(rng, before.tenantId, TENANT_COUNT, "t") : before.tenantId;
      const title = rng.float() < 0.2 ? randomTitle(rng) : before.title;
      const priority = rng.float() < 0.3 ? rng.int(MAX_PRIORITY + 1) : before.priority;
      const after = makeRow(before.id, tenantId, status, userId, title, priority, timestamp);
      rows.rows[idx] = after;
      const withOld = rng.float() < 0.9;
      rec = withOld
        ? { type, key: before.id, value: after, old_value: before, headers: { operation: "update", ...headersBase } }
        : { type, key: before.id, value: after, headers: { operation: "update", ...headersBase } };
    } else {
      const idx = rows.pickIndex(rng);
      const before = rows.removeAt(idx);
      rec = { type, key: before.id, old_value: before, headers: { operation: "delete", ...headersBase } };
    }
    out[i] = JSON.stringify(rec);
  }
  return out;
}

/**
 * Live-query templates used by the fine-touch benchmark: for every entity,
 * fields [tenantId], [status, tenantId], [userId], all encoding "string"
 * (24 templates). Shape matches the server's /touch/templates/activate body.
 */
export function templateDecls() {
  const out = [];
  for (const entity of ENTITIES) {
    for (const names of [["tenantId"], ["status", "tenantId"], ["userId"]]) {
      out.push({ entity, fields: names.map((name) => ({ name, encoding: "string" })) });
    }
  }
  return out;
}

// ---------------------------------------------------------------- CLI

function parseArgs(argv) {
  const args = { n: 200000, seed: 1 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const eq = a.indexOf("=");
    const name = eq >= 0 ? a.slice(0, eq) : a;
    const val = eq >= 0 ? a.slice(eq + 1) : argv[i + 1];
    if (name === "--n" || name === "--seed") {
      if (val === undefined) throw new Error(`${name} needs a value`);
      const num = Number(val);
      if (!Number.isFinite(num) || num < 0 || !Number.isInteger(num)) throw new Error(`${name} must be a non-negative integer`);
      args[name.slice(2)] = num;
      if (eq < 0) i++;
    } else if (name === "--help" || name === "-h") {
      args.help = true;
    } else {
      throw new Error(`unknown argument: ${a}`);
    }
  }
  return args;
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`gen-workload: ${e.message}\nusage: gen-workload.mjs [--n 200000] [--seed 1] > out.jsonl\n`);
    process.exit(2);
  }
  if (args.help) {
    process.stdout.write("usage: gen-workload.mjs [--n 200000] [--seed 1] > out.jsonl\n");
    return;
  }
  const lines = generateRecords({ n: args.n, seed: args.seed });
  const CHUNK = 4096;
  for (let i = 0; i < lines.length; i += CHUNK) {
    const part = lines.slice(i, i + CHUNK).join("\n") + "\n";
    if (!process.stdout.write(part)) await new Promise((r) => process.stdout.once("drain", r));
  }
}

async function isMainModule() {
  if (typeof import.meta.main === "boolean") return import.meta.main; // Bun, Node >= 24
  if (typeof process === "undefined" || !Array.isArray(process.argv) || !process.argv[1]) return false;
  const { pathToFileURL } = await import("node:url");
  const { realpathSync } = await import("node:fs");
  try {
    return pathToFileURL(realpathSync(process.argv[1])).href === import.meta.url;
  } catch {
    return false;
  }
}

if (await isMainModule()) await main();
