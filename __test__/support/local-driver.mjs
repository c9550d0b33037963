// Drives @prisma/streams-local as `prisma dev` embeds it: imported in process by its package
// name (this file is copied into a project whose node_modules holds it), started with
// `startLocalDurableStreamsServer({ name, hostname, port: 0 })` (its data under
// $DS_LOCAL_DATA_ROOT), then used over HTTP: a stream, a touch-enabled state-protocol profile,
// State Protocol appends, touch/meta, a table-key wait woken by an append (and a control that
// times out), a template activation and a watch-key wait woken by an update (and a control),
// and the stream read back. With DRIVER_WAKES=n, also n table-key wakes in a row, timed.
// Prints one JSON document: { ok, uses, steps, wakeMs } or { ok: false, error }.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const JSON_HEADERS = { "content-type": "application/json" };
const ENTITY = "public.posts";

const runtime = typeof globalThis.Bun !== "undefined" ? "bun" : "node";
const print = (doc) => new Promise((r) => process.stdout.write(JSON.stringify({ runtime, version: process.versions.bun ?? process.versions.node, ...doc }) + "\n", r));

let server;
try {
  ({ startLocalDurableStreamsServer: server } = await import("@prisma/streams-local"));
  server = await server({ name: "driver", hostname: "127.0.0.1", port: 0 });
} catch (e) {
  await print({ ok: false, error: String(e?.message ?? e), code: e?.code ?? null });
  process.exit(0);
}

const { keys } = require("durable-touch");
// The same module instance the swapped chunk imports (both resolve through this project).
const adapter = await import("durable-touch/compat/sqlite-adapter");
const base = server.exports.http.url;
const steps = [];

async function call(name, path, method = "GET", json) {
  const t0 = performance.now();
  const res = await fetch(base + path, { method, headers: JSON_HEADERS, body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  const elapsedMs = performance.now() - t0;
  let body = text;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {}
  const step = { name, status: res.status, body, elapsedMs, nextOffset: res.headers.get("stream-next-offset") };
  if (name) steps.push(step);
  return step;
}

const post = (i, authorId, op = "insert") => ({
  type: ENTITY,
  key: String(i),
  value: { id: i, authorId, title: `t${i}` },
  ...(op === "update" ? { old_value: { id: i, authorId: authorId + 1, title: `t${i}` } } : {}),
  headers: { operation: op, timestamp: new Date(1_700_000_000_000 + i).toISOString() },
});
const wait = (name, body) => call(name, "/v1/stream/x/touch/wait", "POST", body);

/** Appends, then waits until the touch processor has scanned through the append. */
async function append(name, records) {
  const step = await call(name, "/v1/stream/x", "POST", records);
  for (let i = 0; i < 400; i++) {
    const meta = await call(null, "/v1/stream/x/touch/meta");
    if (meta.body?.walScannedThrough === step.nextOffset) return step;
    await sleep(10);
  }
  throw new Error(`${name}: the touch processor did not reach ${step.nextOffset}`);
}

/** Starts a wait, appends `records` after 300 ms; resolves the wait's step, with `wokenMs` since the append was sent. */
async function wakeBy(name, body, records, delayMs = 300) {
  const w = wait(name, body);
  await sleep(delayMs);
  const t0 = performance.now();
  await call(name ? `${name}: write` : null, "/v1/stream/x", "POST", records);
  const step = await w;
  step.wokenMs = performance.now() - t0;
  return step;
}

let out;
try {
  await call("create stream", "/v1/stream/x", "PUT");
  await call("install profile", "/v1/stream/x/_profile", "POST", {
    apiVersion: "durable.streams/profile/v1",
    profile: { kind: "state-protocol", touch: { enabled: true } },
  });
  await append("append first records", [post(1, 42), post(2, 7)]);
  const meta0 = await call("touch/meta", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");

  const table = keys.tableKey(ENTITY);
  const otherTable = keys.tableKey("public.comments");
  await Promise.all([
    wakeBy("table-key wait", { cursor: meta0.body.cursor, keys: [table], interestMode: "coarse", timeoutMs: 4000 }, [post(3, 42)]),
    wait("other table-key wait (control)", { cursor: meta0.body.cursor, keys: [otherTable], interestMode: "coarse", timeoutMs: 1000 }),
  ]);

  await call("activate template", "/v1/stream/x/touch/templates/activate", "POST", {
    templates: [{ entity: ENTITY, fields: [{ name: "authorId", encoding: "int64" }] }],
  });
  const templateId = keys.templateId(ENTITY, ["authorId"]);
  const meta1 = await call("touch/meta after activation", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");
  const fine = (key, timeoutMs) => ({ cursor: meta1.body.cursor, keys: [key], interestMode: "fine", timeoutMs });
  await Promise.all([
    wakeBy("watch-key wait", fine(keys.watchKey(templateId, ["42"]), 4000), [post(4, 42, "update")]),
    wait("other watch-key wait (control)", fine(keys.watchKey(templateId, ["99"]), 1000)),
  ]);
  await call("read the stream back", "/v1/stream/x?offset=-1");

  // Table-key wakes in a row, timed from the append's request to the wait's reply.
  const wakeMs = [];
  let cursor = (await call(null, "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000")).body.cursor;
  for (let i = 0; i < Number(process.env.DRIVER_WAKES ?? 0); i++) {
    const s = await wakeBy(null, { cursor, keys: [table], interestMode: "coarse", timeoutMs: 4000 }, [post(100 + i, 1)], 30);
    if (s.body?.touched !== true) throw new Error(`wake ${i}: ${JSON.stringify(s.body)}`);
    wakeMs.push(s.wokenMs);
    cursor = s.body.cursor;
  }
  out = {
    ok: true,
    // The server's connections are durable-touch's when the swap is in (its SQLite adapter).
    uses: { nativeSqliteConnections: adapter.getSqliteAdapterRuntimeCounts().open_connections },
    templateId,
    steps,
    wakeMs,
  };
} catch (e) {
  out = { ok: false, error: String(e?.stack ?? e), steps };
}
await server.close();
await print(out);
process.exit(0);
