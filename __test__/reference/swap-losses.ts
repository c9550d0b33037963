// The invalidations the reference server loses (docs/deviations.md, Engine table), each driven
// through a copy of the server's HTTP routes (its src/ at $APP_SRC, swapped or not; or the local
// runtime of $LOCAL_PROJECT, swapped or not: swap-server.ts): one
// stream per scenario with its own touch config, a template on `tenant`, waits parked on the
// keys the change concerns, then the change. Output: per scenario, what each wait answered.
//
// - B1: a fine budget of 3 per batch, 40 waiters on 40 tenants, one append of 40 inserts;
// - B2: a lag of 600 rows with restricted mode from 50; an untemplated waiter on one row's key;
// - B3: restricted mode (from a lag of 50, back to fine only at 0) and `memory.bucketMs` of a
//   day, so that one wall-clock bucket of the reference's restricted template-touch dedupe
//   (`coalesceRestrictedTemplateTouches`) spans two batches. A templated wait is woken by the
//   first restricted batch (100 rows); from the cursor it got back, the next wait (templated,
//   planned `templateKey` since the stream is restricted) watches the tenant of one row
//   appended next. Its batch is restricted too and touches the same template key, which the
//   reference drops as sent in this bucket (it was, in a generation the waiter had already
//   seen; `fineTouchesSkippedTemplateBucketTotal` counts it). With the default 100 ms bucket
//   the same loss needs two restricted batches in one 100 ms bucket with a flush (50 ms under
//   lag) between them. The scenario checks that the row was processed by the time the wait
//   answered, and waits for the next day's bucket if this one ends within 30 s;
// - B4: a change processed while nobody waits, then a wait from a cursor taken before it;
// - B5: an update without old_value that moves a row out of the watched tenant, and a delete
//   without old_value;
// - B6: a same-tuple update of an array field, watched by its projected-field key;
// - B7: the stored profile (`stream_profiles.profile_json`) is made unreadable for a while by
//   the test, through the server's own SQLite library (`Server.openSqlite`: bun:sqlite
//   unswapped, durable-touch's swapped; a second library on the file in this process would
//   break its POSIX locks). Just before, two waits (untemplated, templated) are
//   parked on the tenant of the last of 3,000 rows appended; the reference processes at most
//   500 rows a batch, so a later batch meets the bad profile and deletes the stream's touch
//   state (`processOne`). The bad profile is held until the touch state is gone or the waits
//   have answered, and at least 1.2 s (the swapped engine re-reads profiles every second), then
//   restored. While it is bad, both servers refuse appends and touch routes on the stream (the
//   swapped engine's poll keeps the config it had: no 404, no new epoch once it is good
//   again). Right after the restore, two more waits, from a cursor taken now, watch one new
//   row. The reference processes the stream no more (no touch
//   state until its profile is saved again or the server restarts): all four time out.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { output } from "./common.ts";
import { K, startServer } from "./swap-server.ts";

const root = mkdtempSync(join(tmpdir(), "dt-swap-losses-"));
const srv = await startServer(root);
const base = srv.base;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const WAIT_MS = 3500;

async function call(path: string, method = "GET", json?: unknown): Promise<any> {
  const headers = { "content-type": "application/json" };
  const init: RequestInit = json === undefined ? { method, headers } : { method, headers, body: JSON.stringify(json) };
  const res = await fetch(base + path, init);
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text === "" ? null : JSON.parse(text);
}

const ENTITY = "public.todos";
const templateId = K.templateIdFor(ENTITY, ["tenant"]);
const row = (i: number, tenant: string, extra: Record<string, unknown> = {}) => ({ id: String(i), tenant, title: `t${i}`, ...extra });
const insert = (r: any) => ({ type: ENTITY, key: r.id, value: r, headers: { operation: "insert" } });

/** A stream with a touch profile and the template on `tenant`; resolves its current cursor. */
async function stream(name: string, touch: Record<string, unknown>) {
  await call(`/v1/stream/${name}`, "PUT");
  await call(`/v1/stream/${name}/_profile`, "POST", { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true, ...touch } } });
  await call(`/v1/stream/${name}/touch/templates/activate`, "POST", { templates: [{ entity: ENTITY, fields: [{ name: "tenant", encoding: "string" }] }] });
  const meta = await call(`/v1/stream/${name}/touch/meta?settle=flush&timeoutMs=3000`);
  return meta.cursor as string;
}

const wait = (name: string, body: Record<string, unknown>) =>
  call(`/v1/stream/${name}/touch/wait`, "POST", { timeoutMs: WAIT_MS, ...body }).then((r) => (process.env.DEBUG ? console.error(name, JSON.stringify(r)) : 0, Boolean(r.touched)));
/** Appends; resolves the `stream-next-offset` the server answered. */
async function append(name: string, records: unknown[]): Promise<string> {
  const res = await fetch(`${base}/v1/stream/${name}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(records) });
  await res.text();
  if (res.status >= 300) throw new Error(`append ${name}: ${res.status}`);
  return res.headers.get("stream-next-offset")!;
}

/** Resolves once the touch processor has scanned through `nextOffset` (meta's walScannedThrough). */
async function processed(name: string, nextOffset: string) {
  for (let i = 0; i < 500; i++) {
    if ((await call(`/v1/stream/${name}/touch/meta`)).walScannedThrough === nextOffset) return;
    await sleep(10);
  }
  throw new Error(`${name}: not processed through ${nextOffset}`);
}

/** Inserts `rows` while a wait on `keys` is parked, so they are processed with fine demand and
 * flushed; resolves the cursor that wait returns (it covers the inserts). */
async function seeded(name: string, cursor: string, rows: any[], keys: string[]) {
  const w = call(`/v1/stream/${name}/touch/wait`, "POST", { cursor, keys, templateIdsUsed: [templateId], timeoutMs: WAIT_MS });
  await sleep(100);
  await append(name, rows.map(insert));
  const r = await w;
  if (!r.touched) throw new Error(`${name}: the seeding inserts did not wake their wait`);
  return r.cursor as string;
}
const watch = (tenant: string) => K.watchKeyFor(templateId, [tenant]);

async function b1() {
  const cursor = await stream("b1", { fineTouchBudgetPerBatch: 3 });
  const tenants = Array.from({ length: 40 }, (_, i) => `tenant-${i}`);
  const waits = tenants.map((t) => wait("b1", { cursor, keys: [watch(t)], templateIdsUsed: [templateId] }));
  await sleep(100);
  await append("b1", tenants.map((t, i) => insert(row(i, t))));
  return Promise.all(waits);
}

async function b2() {
  const cursor = await stream("b2", { lagDegradeFineTouchesAtSourceOffsets: 50, lagRecoverFineTouchesAtSourceOffsets: 10 });
  const w = wait("b2", { cursor, keys: [watch("t-target")] });
  await sleep(100);
  await append("b2", Array.from({ length: 600 }, (_, i) => insert(row(i, i === 300 ? "t-target" : `t${i % 7}`))));
  return [await w];
}

async function b4() {
  const cursor = await stream("b4", {});
  await processed("b4", await append("b4", [insert(row(1, "t-early"))]));
  await sleep(300); // and flushed
  return Promise.all([
    wait("b4", { cursor, keys: [watch("t-early")] }),
    wait("b4", { cursor, keys: [watch("t-early")], templateIdsUsed: [templateId] }),
  ]);
}

async function b5() {
  const cursor0 = await stream("b5", {});
  const cursor = await seeded("b5", cursor0, [row(1, "t-a"), row(2, "t-d")], [watch("t-a"), watch("t-d")]);
  const moved = [wait("b5", { cursor, keys: [watch("t-a")] }), wait("b5", { cursor, keys: [watch("t-a")], templateIdsUsed: [templateId] })];
  const deleted = [wait("b5", { cursor, keys: [watch("t-d")] }), wait("b5", { cursor, keys: [watch("t-d")], templateIdsUsed: [templateId] })];
  await sleep(100);
  await append("b5", [
    { type: ENTITY, key: "1", value: row(1, "t-b"), headers: { operation: "update" } },
    { type: ENTITY, key: "2", headers: { operation: "delete" } },
  ]);
  return Promise.all([...moved, ...deleted]);
}

async function b6() {
  const cursor0 = await stream("b6", {});
  const cursor = await seeded("b6", cursor0, [row(1, "t-p", { tags: ["x"] })], [watch("t-p")]);
  const key = K.projectedFieldKeyFor(templateId, "tags", ["t-p"]);
  const w = wait("b6", { cursor, keys: [key], templateIdsUsed: [templateId] });
  await sleep(100);
  await append("b6", [{ type: ENTITY, key: "1", value: row(1, "t-p", { tags: ["x", "y"] }), old_value: row(1, "t-p", { tags: ["x"] }), headers: { operation: "update" } }]);
  return [await w];
}

const DAY_MS = 86_400_000;

async function b3() {
  // The dedupe's bucket is floor(Date.now() / bucketMs): keep both batches inside one.
  const left = DAY_MS - (Date.now() % DAY_MS);
  if (left < 30_000) await sleep(left + 10);
  const cursor0 = await stream("b3", { lagDegradeFineTouchesAtSourceOffsets: 50, lagRecoverFineTouchesAtSourceOffsets: 0, memory: { bucketMs: DAY_MS } });
  const first = call(`/v1/stream/b3/touch/wait`, "POST", { cursor: cursor0, keys: [watch("t-a")], templateIdsUsed: [templateId], timeoutMs: 4500 });
  await sleep(100);
  await append("b3", Array.from({ length: 100 }, (_, i) => insert(row(i, i === 0 ? "t-a" : `t${i % 7}`))));
  const r = await first;
  if (!r.touched) throw new Error("b3: the first (restricted) batch did not wake its wait");
  const w = wait("b3", { cursor: r.cursor, keys: [watch("t-b")], templateIdsUsed: [templateId], timeoutMs: 4500 });
  await sleep(100);
  const next = await append("b3", [insert(row(100, "t-b"))]);
  const touched = await w;
  const meta = await call(`/v1/stream/b3/touch/meta`);
  if (process.env.DEBUG) console.error("b3 meta", meta.touchMode, meta.fineTouchesSkippedTemplateBucketTotal, meta.walScannedThrough, next);
  if (meta.walScannedThrough !== next) throw new Error(`b3: the row was not processed by the time the wait answered (${meta.walScannedThrough}, ${next})`);
  return [touched];
}

async function b7() {
  const cursor = await stream("b7", {});
  const sql = srv.openSqlite();
  sql.exec("PRAGMA busy_timeout=5000;");
  const saved = sql.query("SELECT profile_json FROM stream_profiles WHERE stream=?").get("b7");
  const setProfile = (json: string) => sql.query("UPDATE stream_profiles SET profile_json=?, updated_at_ms=updated_at_ms+1 WHERE stream=?").run(json, "b7");
  let answered = 0;
  const parked = [
    wait("b7", { cursor, keys: [watch("t-7")], timeoutMs: 4500 }),
    wait("b7", { cursor, keys: [watch("t-7")], templateIdsUsed: [templateId], timeoutMs: 4500 }),
  ].map((p) => p.finally(() => answered++));
  await sleep(100);
  await append("b7", Array.from({ length: 3000 }, (_, i) => insert(row(i, i === 2999 ? "t-7" : `t${i % 7}`))));
  setProfile('{"kind":"state-protocol","touch":');
  const since = Date.now();
  for (;;) {
    await sleep(50);
    const gone = !sql.query("SELECT 1 AS x FROM stream_touch_state WHERE stream=?").get("b7");
    if ((gone || answered === parked.length) && Date.now() - since >= 1200) break;
    if (Date.now() - since >= 8000) break;
  }
  setProfile(saved.profile_json);
  const cursor2 = (await call(`/v1/stream/b7/touch/meta`)).cursor;
  const later = [
    wait("b7", { cursor: cursor2, keys: [watch("t-8")] }),
    wait("b7", { cursor: cursor2, keys: [watch("t-8")], templateIdsUsed: [templateId] }),
  ];
  await sleep(100);
  await append("b7", [insert(row(3000, "t-8"))]);
  const out = await Promise.all([...parked, ...later]);
  if (process.env.DEBUG) console.error("b7 touch state", sql.query("SELECT processed_through FROM stream_touch_state WHERE stream=?").get("b7"));
  sql.close();
  return out;
}

const [B1, B2, B3, B4, B5, B6, B7] = await Promise.all([b1(), b2(), b3(), b4(), b5(), b6(), b7()]);
await srv.close();
rmSync(root, { recursive: true, force: true });
output({ B1, B2, B3, B4, B5, B6, B7 });
process.stdout.write("", () => process.exit(0));
