// A randomized oracle through the HTTP routes of one copy of the reference server (its src/ at
// $APP_SRC, swapped or not; or the local runtime of $LOCAL_PROJECT: swap-server.ts), after
// tests/engine_oracle.rs, smaller.
//
// A writer appends State Protocol records for rows it keeps in memory (inserts, updates,
// deletes; some without `old_value`; some with null, unencodable or missing template fields),
// in bursts, trickles and pauses. Meanwhile chains of waiters wait on watch and membership keys
// of three templates (as keys or key ids, with or without `templateIdsUsed`), each next wait
// from the cursor the last one returned, as a client does.
//
// What a cursor covers: a timed-out reply's `bucketMaxSourceOffsetSeq` (the last flushed
// offset, read together with its cursor). A chain starts with a `timeoutMs: 0` wait; each wait
// that times out must not have missed a change that concerns one of its keys and whose source
// offset lies after what its start cursor covered and at or before what its reply's cursor
// covers. A touched reply's `bucketMaxSourceOffsetSeq` is the touching bucket's, so after one
// the chain starts afresh with a `timeoutMs: 0` wait (whose window is not checked).
//
// Input: { seed, writeMs, chains }. Output: counts, and the first misses in detail.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { input, output } from "./common.ts";
import { rng } from "../support/random-cases.mjs";
import { K, SRC, append, exit, ok, sleep, startServer, touchStream } from "./swap-server.ts";

const { parseOffset } = await import(`${SRC}/offset.ts`);
const { seed = 1, writeMs = 20_000, chains: CHAINS = 50 } = input<{ seed?: number; writeMs?: number; chains?: number }>();

const R = rng(seed);

const S = "o";
const ENTITY = "public.todos";
type Enc = "string" | "int64";
type Tpl = { id: string; fields: Array<[string, Enc]> };
const TEMPLATES: Tpl[] = [
  [["tenant", "string"]],
  [["owner", "int64"]],
  [["status", "string"], ["tenant", "string"]],
].map((fields) => ({ id: K.templateIdFor(ENTITY, fields.map((f) => f[0])), fields: fields as Array<[string, Enc]> }));

// Common values, and probe values that few changes take (a wait on a probe tuple times out,
// so a change it missed shows; a busy key is woken by the next change and hides the loss).
const TENANTS = ["t0", "t1", "t2", "t3"];
const PROBE_TENANTS = ["p0", "p1", "p2"];
const OWNERS = [1, 2, 3, 4];
const PROBE_OWNERS = [100, 101, 102];
const STATUSES = ["a", "b"];

type Row = Record<string, unknown>;
/** The args a client derives for the row's tuple of `t`, or null (no tuple a client can name). */
function tuple(t: Tpl, row: Row | undefined): string[] | null {
  if (!row) return null;
  const args: string[] = [];
  for (const [name, enc] of t.fields) {
    const v = K.encodeTemplateArg(row[name], enc);
    if (v === null) return null;
    args.push(v);
  }
  return args;
}
/** The watch and membership keys a change concerns (projected-field keys are not watched). */
function concerned(before: Row | undefined, after: Row | undefined): string[] {
  const out: string[] = [];
  for (const t of TEMPLATES) {
    const b = tuple(t, before);
    const a = tuple(t, after);
    for (const args of [b, a]) if (args) out.push(K.watchKeyFor(t.id, args));
    if (JSON.stringify(b) !== JSON.stringify(a)) for (const args of [b, a]) if (args) out.push(K.membershipKeyFor(t.id, args));
  }
  return out;
}

// --- the writer ---------------------------------------------------------------------------

const rows = new Map<string, Row>();
let nextId = 0;
/** Key → source offsets of the changes that concern it, ascending. */
const byKey = new Map<string, number[]>();
const payloadAt: string[] = [];
let written = 0; // rows appended so far (a single writer: offsets are 0, 1, 2, …)
const counts = { inserts: 0, updates: 0, deletes: 0, noOldValue: 0, messy: 0, appends: 0, bursts: 0, pauses: 0 };

/** This phase's odds of a messy template field (null, unencodable, missing) and of an update or
 * delete without `old_value`. Clean phases are where a lost fine key shows: a change the
 * engine cannot key touches template keys and the catch-all, which wake every waiter. */
let messyRate = 0;
let noOldRate = 0;
function value(field: string, messy: boolean): unknown {
  const probe = R.chance(0.06);
  if (messy) {
    counts.messy++;
    return R.pick(field === "owner" ? [null, 2.5, "n/a", { o: 1 }, undefined] : [null, { o: 1 }, undefined]);
  }
  if (field === "tenant") return R.pick(probe ? PROBE_TENANTS : TENANTS);
  if (field === "owner") return R.pick(probe ? PROBE_OWNERS : OWNERS);
  return R.pick(STATUSES);
}
function newRow(id: string): Row {
  const row: Row = { id, title: `t${R.int(1000)}` };
  for (const f of ["tenant", "owner", "status"]) {
    const v = value(f, R.chance(messyRate));
    if (v !== undefined) row[f] = v;
  }
  return row;
}
/** One random change: the record, and the row's true before and after images. */
function change(): { record: unknown; before?: Row; after?: Row } {
  const ids = [...rows.keys()];
  const op = ids.length < 20 || R.chance(0.35) ? "insert" : R.chance(0.8) ? "update" : "delete";
  if (op === "insert") {
    const id = String(nextId++);
    const after = newRow(id);
    rows.set(id, after);
    counts.inserts++;
    return { record: { type: ENTITY, key: id, value: after, headers: { operation: "insert" } }, after };
  }
  const id = R.pick(ids);
  const before = rows.get(id)!;
  const withOld = !R.chance(noOldRate);
  if (!withOld) counts.noOldValue++;
  if (op === "delete") {
    rows.delete(id);
    counts.deletes++;
    return { record: { type: ENTITY, key: id, ...(withOld ? { old_value: before } : {}), headers: { operation: "delete" } }, before };
  }
  const after: Row = { ...before };
  for (let n = R.range(1, 2); n > 0; n--) {
    const f = R.pick(["tenant", "owner", "status", "title"]);
    if (f === "title") after.title = `t${R.int(1000)}`;
    else {
      const v = value(f, R.chance(messyRate));
      if (v === undefined) delete after[f];
      else after[f] = v;
    }
  }
  rows.set(id, after);
  counts.updates++;
  return { record: { type: ENTITY, key: id, value: after, ...(withOld ? { old_value: before } : {}), headers: { operation: "update" } }, before, after };
}

async function appendBatch(n: number) {
  const batch = Array.from({ length: n }, change);
  const first = written;
  written += n;
  await append(srv, S, batch.map((c) => c.record));
  counts.appends++;
  batch.forEach((c, i) => {
    const offset = first + i;
    payloadAt[offset] = JSON.stringify(c.record);
    for (const k of new Set(concerned(c.before, c.after))) {
      let list = byKey.get(k);
      if (!list) byKey.set(k, (list = []));
      list.push(offset);
    }
  });
}

async function writer(until: number) {
  while (performance.now() < until) {
    const phase = R.int(10);
    messyRate = R.pick([0, 0, 0.02, 0.1]);
    noOldRate = R.pick([0, 0.3]);
    if (phase < 3) {
      counts.bursts++;
      for (let i = R.range(3, 10); i > 0; i--) await appendBatch(R.range(20, 150));
    } else if (phase < 7) {
      for (let i = R.range(5, 20); i > 0; i--) {
        await appendBatch(R.range(1, 3));
        await sleep(R.range(5, 40));
      }
    } else {
      counts.pauses++;
      await sleep(R.range(200, 900));
    }
  }
}

// --- the waiters --------------------------------------------------------------------------

type Spec = { keys: string[]; keyIds: boolean; templates: string[] };
type Window = { chain: number; after: number; through: number };
const windows: Window[] = [];
// `resolverTimeouts`: waits the host answered 408 (it answers any request still running after
// 5 s, as on a starved machine); the chain starts afresh from its cursor, as a client retries.
const replies = { timedOut: 0, touched: 0, fresh: 0, freshTouched: 0, stale: 0, resolverTimeouts: [] as string[], errors: [] as string[] };

function randomSpec(): Spec {
  const t = R.pick(TEMPLATES);
  const probe = R.chance(0.5);
  const args = t.fields.map(([f]) => String(f === "tenant" ? R.pick(probe ? PROBE_TENANTS : TENANTS) : f === "owner" ? R.pick(probe ? PROBE_OWNERS : OWNERS) : R.pick(STATUSES)));
  const kind = R.int(3);
  const keys = kind === 0 ? [K.watchKeyFor(t.id, args)] : kind === 1 ? [K.membershipKeyFor(t.id, args)] : [K.watchKeyFor(t.id, args), K.membershipKeyFor(t.id, args)];
  return { keys, keyIds: R.chance(0.3), templates: R.chance(0.5) ? [t.id] : [] };
}

async function wait(spec: Spec, cursor: string, timeoutMs: number) {
  const body: Record<string, unknown> = { cursor, timeoutMs };
  if (spec.keyIds) body.keyIds = spec.keys.map((k) => Number.parseInt(k.slice(8), 16) >>> 0);
  else body.keys = spec.keys;
  if (spec.templates.length > 0) body.templateIdsUsed = spec.templates;
  const t0 = performance.now();
  const r = await srv.call(`/v1/stream/${S}/touch/wait`, "POST", body);
  const about = `timeoutMs ${timeoutMs}, answered after ${Math.round(performance.now() - t0)} ms, ${Math.round(t0 - started)} ms into the run`;
  if (r.status === 408 && r.body?.error?.code === "request_timeout") {
    replies.resolverTimeouts.push(about);
    return null;
  }
  if (r.status !== 200) throw new Error(`wait (${about}): ${r.status} ${r.text}`);
  if (r.body.stale) throw new Error(`wait: stale ${r.text}`);
  return r.body as { touched: boolean; cursor: string; bucketMaxSourceOffsetSeq: string };
}

const specs: Spec[] = [];
let started = 0;
async function chain(i: number, until: () => boolean, startCursor: string) {
  const spec = randomSpec();
  specs[i] = spec;
  const rand = rng(seed * 1000 + i);
  let cursor = startCursor;
  let covered: number | null = null;
  try {
    while (!until()) {
      if (covered === null) {
        // A fresh start: a timeoutMs 0 wait tells what its cursor covers.
        const r = await wait(spec, cursor, 0);
        if (!r) continue;
        replies.fresh++;
        cursor = r.cursor;
        if (r.touched) replies.freshTouched++;
        else covered = Number(r.bucketMaxSourceOffsetSeq);
        continue;
      }
      const r = await wait(spec, cursor, rand.range(150, 1200));
      if (!r) {
        covered = null; // what this wait's window held is unknown: start afresh
        continue;
      }
      cursor = r.cursor;
      if (r.touched) {
        replies.touched++;
        covered = null;
      } else {
        replies.timedOut++;
        const through = Number(r.bucketMaxSourceOffsetSeq);
        windows.push({ chain: i, after: covered, through });
        covered = through;
      }
      if (rand.chance(0.1)) await sleep(rand.range(1, 50)); // a client's work between waits
    }
  } catch (e) {
    replies.errors.push(String(e));
  }
}

// --- the run ------------------------------------------------------------------------------

const root = mkdtempSync(join(tmpdir(), "dt-swap-oracle-"));
const srv = await startServer(root);
await touchStream(srv, S);
ok(
  await srv.call(`/v1/stream/${S}/touch/templates/activate`, "POST", {
    templates: TEMPLATES.map((t) => ({ entity: ENTITY, fields: t.fields.map(([name, encoding]) => ({ name, encoding })) })),
  }),
  "activate"
);
const cursor0 = ok(await srv.call(`/v1/stream/${S}/touch/meta?settle=flush&timeoutMs=3000`), "meta").body.cursor;
const t0 = performance.now();
started = t0;
let writing = true;
const waiters = Array.from({ length: CHAINS }, (_, i) => chain(i, () => !writing, cursor0));
await writer(t0 + writeMs);
// Let the last changes be processed and flushed, and the chains see them, then stop.
const settled = ok(await srv.call(`/v1/stream/${S}/touch/meta?settle=flush&timeoutMs=10000`), "meta").body;
await sleep(1500);
writing = false;
await Promise.all(waiters);
const meta = ok(await srv.call(`/v1/stream/${S}/touch/meta`), "meta").body;
await srv.close();
rmSync(root, { recursive: true, force: true });

// --- the check ----------------------------------------------------------------------------

function firstIn(list: number[] | undefined, after: number, through: number): number | null {
  if (!list) return null;
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid] <= after) lo = mid + 1;
    else hi = mid;
  }
  return lo < list.length && list[lo] <= through ? list[lo] : null;
}
const misses: any[] = [];
for (const w of windows) {
  const spec = specs[w.chain];
  const hits = spec.keys.map((k) => firstIn(byKey.get(k), w.after, w.through)).filter((o): o is number => o !== null);
  if (hits.length === 0) continue;
  const offset = Math.min(...hits);
  misses.push({ chain: w.chain, spec, window: [w.after, w.through], offset, record: payloadAt[offset] });
}
output({
  seed,
  written,
  counts,
  replies,
  windows: windows.length,
  emptyWindows: windows.filter((w) => w.through <= w.after).length,
  misses: misses.length,
  missedChains: new Set(misses.map((m) => m.chain)).size,
  // What the missed changes were: operation, and whether the record had its old_value.
  missKinds: misses.reduce((acc: Record<string, number>, m) => {
    const r = JSON.parse(m.record);
    const kind = `${r.headers.operation}${r.headers.operation === "insert" ? "" : "old_value" in r ? " with old_value" : " without old_value"}`;
    acc[kind] = (acc[kind] ?? 0) + 1;
    return acc;
  }, {}),
  firstMisses: misses.slice(0, 5),
  // The writer's offsets are the stream's: its last row is the last scanned one.
  lastOffsetSeq: Number(parseOffset(settled.walScannedThrough).seq),
  settled: { walScannedThrough: settled.walScannedThrough, bucketMaxSourceOffsetSeq: settled.bucketMaxSourceOffsetSeq, settled: settled.settled },
  touchMode: meta.touchMode,
  wallMs: Math.round(performance.now() - t0),
});
exit();
