// The fan-out (issue 28) from a swapped `prisma dev` runtime: @prisma/streams-local 0.1.11,
// swapped with `durable-touch swap`, started with `startLocalDurableStreamsServer` in its own
// process (support/local-serve.mjs, copied into the project) under the runtime running this
// file (Bun, or Node, where the swapped package needs no node:sqlite), whose environment
// names a real nats-server (DURABLE_TOUCH_NATS, read by compat/manager.mjs `fanoutFromEnv`),
// publishes its touches over NATS JetStream with no code change, and an edge of ours
// (apps/server/) mirrors it: cursors, waits woken by the runtime's appends, the edge's fine
// interest reaching the runtime's engine, and writes sent to DURABLE_TOUCH_WRITER_URL. Waits
// are given generous timeouts and awaited, never timed: a busy machine is slower, not wrong.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, tempDir, runtime, sleep } from "./harness.mjs";
import { startServer } from "../apps/server/server.mjs";
import { swap } from "../apps/swap/swap.mjs";
import { SUPPORTED } from "../apps/swap/swap-local.mjs";
import { referenceAvailable } from "./reference.mjs";
import { LOCAL_PACKAGE_DIR, npmProject } from "./support/local-copies.mjs";
import { natsServerBinary, startNats } from "../testkit/nats-server.mjs";

const { keys } = dt;
const here = dirname(fileURLToPath(import.meta.url));
const SERVE = join(here, "support", "local-serve.mjs");

// As the other local-swap tests: skipped without Bun, the reference or the package's chunk.
const available = referenceAvailable() && existsSync(join(LOCAL_PACKAGE_DIR, SUPPORTED[0].chunk));
// As the other fan-out tests: nats-server is required, never mocked.
/** @type {{ bin: string | null, reason?: string } | null} */
const nats = available ? natsServerBinary() : null;
if (nats && !nats.bin) throw new Error(`the local runtime's fan-out test needs nats-server: ${nats.reason}`);

const JSON_HEADERS = { "content-type": "application/json" };
const TEMPLATE = { entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] };
const TABLE = keys.tableKeyId("public.todos");
const OTHER = keys.tableKeyId("public.other");
const insert = (id, tenantId) => ({ type: "public.todos", key: String(id), value: { id: String(id), tenantId }, headers: { operation: "insert" } });
const PROFILE = { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } };

/**
 * @param {string} base
 * @param {string} path
 * @param {{ method?: string, json?: unknown }} [opts]
 */
async function call(base, path, { method = "GET", json } = {}) {
  const res = await fetch(base + path, { method, redirect: "manual", headers: JSON_HEADERS, body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : JSON.parse(text), headers: res.headers };
}

/** Polls `fn` until it returns something other than undefined (a liveness bound, not a timing check). */
async function eventually(what, fn, ms = 60_000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(50);
  }
}

/** The touch meta of `stream` at `base` (200 asserted). */
async function meta(base, stream) {
  const r = await call(base, `/v1/stream/${stream}/touch/meta`);
  assert.equal(r.status, 200, `${base} meta: ${JSON.stringify(r.body)}`);
  return r.body;
}

/**
 * The cursor of `stream` once the edge's meta answers the writer's (read just before): the
 * edge knows the stream from the writer's beats and has applied its flushes up to it.
 */
const mirrored = (writer, edge, stream) =>
  eventually(`${stream} at the edge ${edge} as at ${writer}`, async () => {
    const w = await meta(writer, stream);
    const r = await call(edge, `/v1/stream/${stream}/touch/meta`);
    if (r.status === 404 && r.body?.error?.code === "ERR_STREAM_NOT_FOUND") return undefined;
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.cursor === w.cursor ? w.cursor : undefined;
  });

/** Asserts a 307 to `writer` + `path` with the coded body. */
function assertRedirect(r, writer, path, what) {
  assert.equal(r.status, 307, `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(r.headers.get("location"), writer + path, what);
  assert.equal(r.body.error.code, "ERR_EDGE_READ_ONLY", what);
  assert.equal(r.body.error.writer, writer, what);
}

/**
 * Starts the local runtime of `project` under this file's runtime (local-serve.mjs: its
 * `startLocalDurableStreamsServer` on 127.0.0.1, a port of its own) with `env`; resolves
 * { base, child, exited, runtime }.
 */
async function serveLocal(project, env) {
  copyFileSync(SERVE, join(project, "serve.mjs"));
  const child = spawn(process.execPath, [join(project, "serve.mjs")], {
    cwd: project,
    env: { ...process.env, DS_LOCAL_DATA_ROOT: tempDir("dt-fo-local-data-"), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise((r) => child.on("exit", (code, signal) => r(signal ?? code)));
  const err = [];
  child.stderr.on("data", (d) => err.push(d));
  try {
    const ready = await new Promise((resolve, reject) => {
      let buf = "";
      child.stdout.on("data", (d) => {
        buf += d;
        const i = buf.indexOf("\n");
        if (i >= 0) resolve(JSON.parse(buf.slice(0, i)));
      });
      exited.then((how) => reject(new Error(`the local runtime exited ${how}: ${Buffer.concat(err)}`)));
    });
    return { base: `http://127.0.0.1:${ready.port}`, child, exited, runtime: ready.runtime };
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  }
}

test(`the swapped local runtime (prisma dev, under ${runtime}) publishes with DURABLE_TOUCH_NATS: an edge of ours mirrors it, wakes on its appends, and its fine interest reaches the runtime`, async () => {
  const { project } = npmProject(join(tempDir("dt-fo-local-"), "project"));
  swap(project);
  const broker = await startNats({ bin: /** @type {string} */ (nats?.bin), storeDir: join(tempDir("dt-fo-local-js-"), "js") });
  let local = null;
  let edge = null;
  try {
    // Its port is picked at start (0), so what edges name comes from the environment.
    const named = "http://prisma-dev.invalid:51214";
    local = await serveLocal(project, { DURABLE_TOUCH_NATS: broker.url, DURABLE_TOUCH_NATS_PREFIX: "local", DURABLE_TOUCH_WRITER_URL: named });
    assert.equal(local.runtime, runtime, "the local runtime runs under this file's runtime");
    edge = await startServer({ port: 0, nats: broker.url, natsPrefix: "local", edge: true });
    assert.equal(edge.role, "edge");

    assert.equal((await call(local.base, "/v1/stream/todos", { method: "PUT" })).status, 201);
    assert.equal((await call(local.base, "/v1/stream/todos/_profile", { method: "POST", json: PROFILE })).status, 200);
    let r = await call(local.base, "/v1/stream/todos/touch/templates/activate", { method: "POST", json: { templates: [TEMPLATE] } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const tpl = r.body.activated[0].templateId;

    // The edge's cursor is the local runtime's.
    const cursor = await mirrored(local.base, edge.url, "todos");
    assert.match(cursor, /^[0-9a-f]{16}:\d+$/);

    // Waits parked at the edge with that cursor: the table's and a watch key's wake on an
    // append at the local runtime; another table's does not.
    const wait = (body) => call(edge.url, "/v1/stream/todos/touch/wait", { method: "POST", json: { cursor, timeoutMs: 60_000, ...body } });
    const table = wait({ keyIds: [TABLE], interestMode: "coarse" });
    const watch = wait({ keys: [keys.watchKey(tpl, ["t1"])], templateIdsUsed: [tpl] });
    const other = wait({ keyIds: [OTHER], interestMode: "coarse", timeoutMs: 3000 });
    // The runtime emits fine touches only for keys someone waits on: the edge's wait, held
    // nowhere else, reaches the runtime's engine as remote hot interest (its meta counts it).
    // Appending before then could leave the watch wait unwoken, so it is awaited.
    const interest = await eventually("the edge's fine wait at the local runtime", async () => {
      const m = await meta(local.base, "todos");
      return m.fineWaitersActive >= 1 && m.hotFineKeysActive >= 1 ? m : undefined;
    });
    assert.equal(interest.activeWaiters, 0, "no wait is parked at the local runtime itself");

    r = await call(local.base, "/v1/stream/todos", { method: "POST", json: [insert(1, "t1"), insert(2, "t2")] });
    assert.ok(r.status === 200 || r.status === 204, `append: ${r.status} ${JSON.stringify(r.body)}`);

    for (const [name, p, kind] of /** @type {const} */ ([["table", table, "tableKey"], ["watch", watch, "fineKey"]])) {
      const w = await p;
      assert.equal(w.status, 200, `${name}: ${JSON.stringify(w.body)}`);
      assert.equal(w.body.touched, true, `${name}: ${JSON.stringify(w.body)}`);
      assert.equal(w.body.effectiveWaitKind, kind, `${name}: ${JSON.stringify(w.body)}`);
    }
    const o = await other;
    assert.equal(o.status, 200, JSON.stringify(o.body));
    assert.equal(o.body.touched, false, JSON.stringify(o.body));

    // The edge follows the runtime's cursor past the append; from the cursor before it, the
    // table is touched at once and the other table is not (its wait times out untouched).
    const after = await mirrored(local.base, edge.url, "todos");
    assert.notEqual(after, cursor);
    const again = await wait({ keyIds: [TABLE], interestMode: "coarse", timeoutMs: 30_000 });
    assert.equal(again.body.touched, true, JSON.stringify(again.body));
    const untouched = await wait({ keyIds: [OTHER], interestMode: "coarse", timeoutMs: 1000 });
    assert.equal(untouched.status, 200, JSON.stringify(untouched.body));
    assert.equal(untouched.body.touched, false, JSON.stringify(untouched.body));

    // The edge sends writes to the URL the environment named; it appends nothing.
    assertRedirect(await call(edge.url, "/v1/stream/todos", { method: "POST", json: [insert(3, "t1")] }), named, "/v1/stream/todos", "append at the edge");
    assert.deepEqual((await call(local.base, "/v1/stream/todos?offset=-1")).body.map((x) => x.key), ["1", "2"]);

    const es = (await call(edge.url, "/v1/stats")).body;
    assert.equal(es.fanout.role, "edge");
    assert.ok(es.fanout.applied >= 1, JSON.stringify(es.fanout));
  } finally {
    await edge?.close();
    if (local) {
      local.child.kill("SIGTERM");
      await local.exited;
    }
    await broker.stop();
  }
}, { timeout: 120_000, skip: !available });
