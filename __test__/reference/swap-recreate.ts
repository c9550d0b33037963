// A stream's life after it is deleted and created again, or has touch turned off and on,
// through a copy of the server's HTTP routes (its src/ at $APP_SRC, swapped or not). The
// swapped engine keeps a stream's checkpoint and touch config in memory and re-reads profiles
// once a second; the reference reads both from the file on every tick. Scenarios:
//
// - recreate: 5 rows processed, then DELETE, PUT and the profile again at once; then three
//   rounds of a coarse table-key wait parked from meta's cursor and one append. The new
//   stream's offsets restart at 0, below the old checkpoint.
// - recreate-after-poll: the same with 1.2 s between DELETE and PUT (the swapped engine's poll
//   has dropped the stream): activate, meta and a wait right after the new profile, then a
//   templated watch-key wait woken by one append.
// - toggle: touch turned off and on again through `/_profile` at once; meta and a wait
//   right after, then a table-key wait woken by one append.
// - offAppendOn: the same with a row appended while touch is off.
//
// Output: per scenario, the statuses of the touch routes and what each parked wait answered.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { output } from "./common.ts";
import { K, append, exit, ok, processed, sleep, startServer, touchStream } from "./swap-server.ts";

const root = mkdtempSync(join(tmpdir(), "dt-swap-recreate-"));
const srv = await startServer(root);
const ENTITY = "public.todos";
const TABLE = K.tableKeyFor(ENTITY);
const TEMPLATE = { entity: ENTITY, fields: [{ name: "tenant", encoding: "string" }] };
const templateId = K.templateIdFor(ENTITY, ["tenant"]);
let id = 0;
const insert = (tenant: string) => {
  id++;
  return { type: ENTITY, key: String(id), value: { id: String(id), tenant }, headers: { operation: "insert" } };
};
const PROFILE = (enabled: boolean) => ({
  apiVersion: "durable.streams/profile/v1",
  profile: { kind: "state-protocol", touch: { enabled } },
});

async function cursorOf(stream: string): Promise<string> {
  return ok(await srv.call(`/v1/stream/${stream}/touch/meta`), `meta ${stream}`).body.cursor;
}

/** Parks a wait on `body`'s keys from meta's cursor, appends one row, resolves `touched`. */
async function wokenByAppend(stream: string, body: Record<string, unknown>, tenant: string): Promise<boolean> {
  const cursor = await cursorOf(stream);
  const waiting = srv.call(`/v1/stream/${stream}/touch/wait`, "POST", { cursor, timeoutMs: 3000, ...body });
  await sleep(50);
  await append(srv, stream, [insert(tenant)]);
  const r = ok(await waiting, `wait ${stream}`);
  return r.body.touched === true;
}

/** The statuses of activate, meta and a zero-timeout wait, right now. */
async function routeStatuses(stream: string): Promise<number[]> {
  const activate = await srv.call(`/v1/stream/${stream}/touch/templates/activate`, "POST", { templates: [TEMPLATE] });
  const meta = await srv.call(`/v1/stream/${stream}/touch/meta`);
  const wait = await srv.call(`/v1/stream/${stream}/touch/wait`, "POST", { keys: [TABLE], cursor: "now", timeoutMs: 0 });
  return [activate.status, meta.status, wait.status];
}

async function recreate(stream: string, gapMs: number) {
  await touchStream(srv, stream);
  const next = await append(srv, stream, [1, 2, 3, 4, 5].map(() => insert("a")));
  await processed(srv, stream, next);
  ok(await srv.call(`/v1/stream/${stream}`, "DELETE"), `delete ${stream}`);
  if (gapMs > 0) await sleep(gapMs);
  await touchStream(srv, stream);
  const statuses = await routeStatuses(stream);
  const coarse: boolean[] = [];
  for (let i = 0; i < 3; i++) coarse.push(await wokenByAppend(stream, { keys: [TABLE], interestMode: "coarse" }, "b"));
  const watch = K.watchKeyFor(templateId, ["c"]);
  const fine = await wokenByAppend(stream, { keys: [watch], templateIdsUsed: [templateId] }, "c");
  return { statuses, coarse, fine };
}

async function toggle(stream: string) {
  await touchStream(srv, stream);
  const first = await wokenByAppend(stream, { keys: [TABLE], interestMode: "coarse" }, "a");
  ok(await srv.call(`/v1/stream/${stream}/_profile`, "POST", PROFILE(false)), "disable");
  ok(await srv.call(`/v1/stream/${stream}/_profile`, "POST", PROFILE(true)), "enable");
  const statuses = await routeStatuses(stream);
  const after = await wokenByAppend(stream, { keys: [TABLE], interestMode: "coarse" }, "b");
  return { statuses, coarse: [first, after] };
}

/** Touch off, a row appended while it is off (the swapped engine adopts the profile without
 * touch), touch on again. */
async function offAppendOn(stream: string) {
  ok(await srv.call(`/v1/stream/${stream}`, "PUT"), `create ${stream}`);
  ok(await srv.call(`/v1/stream/${stream}/_profile`, "POST", PROFILE(false)), "off");
  await append(srv, stream, [insert("a")]);
  await sleep(100);
  ok(await srv.call(`/v1/stream/${stream}/_profile`, "POST", PROFILE(true)), "on");
  const statuses = await routeStatuses(stream);
  const after = await wokenByAppend(stream, { keys: [TABLE], interestMode: "coarse" }, "b");
  return { statuses, coarse: [after] };
}

try {
  output({
    recreate: await recreate("re", 0),
    recreateAfterPoll: await recreate("re2", 1200),
    toggle: await toggle("tg"),
    offAppendOn: await offAppendOn("oa"),
  });
} finally {
  await srv.close();
  rmSync(root, { recursive: true, force: true });
}
exit();
