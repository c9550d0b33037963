// The HTTP servers with the fan-out over a real nats-server (issue 28, "Running it"): our
// server as a publishing writer (`--nats`) and as an edge (`--edge --nats`) serving touch waits
// and meta with the writer's cursors and answering the rest 307 to the writer; the swapped
// reference server publishing when DURABLE_TOUCH_NATS names the broker. Waits are given
// generous timeouts and awaited, never timed: a busy machine is slower, not wrong.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, tempDir, sleep } from "./harness.mjs";
import { startServer } from "../apps/server/server.mjs";
import { fanoutFromEnv } from "../compat/manager.mjs";
import { natsServerBinary, startNats } from "../testkit/nats-server.mjs";
import { BUN, referenceAvailable } from "./reference.mjs";
import { serverCopies } from "./support/server-copies.mjs";
import { swap } from "../apps/swap/swap.mjs";

const { keys } = dt;
const here = dirname(fileURLToPath(import.meta.url));
const ROOT = join(here, "..");
const CLI = join(ROOT, "bin", "durable-touch.mjs");
const SERVE = join(here, "reference", "swap-serve.ts");

const nats = natsServerBinary();
if (!nats.bin) throw new Error(`the fan-out server tests need nats-server: ${nats.reason}`);

const JSON_HEADERS = { "content-type": "application/json" };
const TEMPLATE = { entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] };
const TABLE = keys.tableKeyId("public.todos");
const insert = (id, tenantId) => ({ type: "public.todos", key: String(id), value: { id: String(id), tenantId }, headers: { operation: "insert" } });
const PROFILE = { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } };

async function call(base, path, { method = "GET", json, redirect = "manual" } = {}) {
  const res = await fetch(base + path, { method, redirect, headers: JSON_HEADERS, body: json === undefined ? undefined : JSON.stringify(json) });
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

/** The edge's meta of `stream` once the writer's beat made it known there. */
const edgeMeta = (base, stream) =>
  eventually(`${stream} known at the edge ${base}`, async () => {
    const r = await call(base, `/v1/stream/${stream}/touch/meta`);
    if (r.status === 200) return r.body;
    assert.ok(r.status === 307 || r.status === 503, JSON.stringify(r.body));
    assert.equal(r.body.error.code, "ERR_EDGE_READ_ONLY");
    return undefined;
  });

/** The edge's meta of `stream` once its cursor is `cursor` (the writer's). */
const edgeAt = (base, stream, cursor) =>
  eventually(`edge ${base} at ${cursor}`, async () => {
    const m = await edgeMeta(base, stream);
    return m.cursor === cursor ? m : undefined;
  });

/** Asserts a 307 to `writer` + `path` with the coded body. */
function assertRedirect(r, writer, path, what) {
  assert.equal(r.status, 307, `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(r.headers.get("location"), writer + path, what);
  assert.equal(r.body.error.code, "ERR_EDGE_READ_ONLY", what);
  assert.equal(r.body.error.writer, writer, what);
  assert.match(r.body.error.message, /waits and meta only/, what);
}

/** Asserts the edge's answer for a stream it has not heard of: 307 to the writer. */
function assertUnheard(r, writer, path, stream) {
  assert.equal(r.status, 307, `${path}: ${JSON.stringify(r.body)}`);
  assert.equal(r.headers.get("location"), writer + path, path);
  assert.equal(r.body.error.code, "ERR_EDGE_READ_ONLY", path);
  assert.equal(r.body.error.writer, writer, path);
  assert.ok(r.body.error.message.includes(`has not heard of stream "${stream}"`), r.body.error.message);
}

/** Starts `node bin/durable-touch.mjs serve …args` (bun under bun); resolves { url, child }. */
async function cli(args) {
  const child = spawn(process.execPath, [CLI, "serve", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  const err = [];
  child.stderr.on("data", (d) => err.push(d));
  const exited = new Promise((r) => child.on("exit", (code, signal) => r(signal ?? code)));
  const url = await new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (d) => {
      buf += d;
      const m = /listening on (http:\/\/\S+)/.exec(buf);
      if (m) resolve(m[1]);
    });
    exited.then((how) => reject(new Error(`durable-touch serve exited ${how}: ${Buffer.concat(err)}`)));
  });
  return { url, child, exited };
}

test("our writer and edges over NATS: meta and waits at the edge are the writer's; the rest is 307 to the writer", async () => {
  const broker = await startNats({ bin: nats.bin, storeDir: join(tempDir("dt-fo-srv-"), "js") });
  const running = [];
  let edgeCli = null;
  try {
    const writer = await startServer({ port: 0, dataDir: tempDir(), nats: broker.url, natsPrefix: "srv" });
    running.push(writer);
    assert.equal(writer.role, "writer");
    // An edge that learns the writer's URL from its beats, and one (the CLI, as `npm start --
    // --edge` runs it) told another URL for the same writer with --writer, which wins.
    const edge = await startServer({ port: 0, nats: broker.url, natsPrefix: "srv", edge: true });
    running.push(edge);
    assert.equal(edge.role, "edge");
    const named = writer.url.replace("127.0.0.1", "localhost");
    edgeCli = await cli(["--port", "0", "--edge", "--nats", broker.url, "--nats-prefix", "srv", "--writer", named]);

    // A stream the edge never heard of: the writer answers (a 404 from the edge would tell a
    // client there is no such stream).
    await eventually("the writer's URL heard at the edge", async () => ((await call(edge.url, "/v1/stats")).body.fanout.writerUrl ? true : undefined));
    let r;
    for (const [path, method, json] of [
      ["/v1/stream/nope/touch/meta", "GET"],
      ["/v1/stream/nope/touch/wait", "POST", { cursor: "now", keyIds: [TABLE], timeoutMs: 100 }],
    ]) {
      r = await call(edge.url, path, { method, json });
      assertUnheard(r, writer.url, path, "nope");
      r = await call(edge.url, path, { method, json, redirect: "follow" });
      assert.equal(r.status, 404, `${path} at the writer`);
      assert.equal(r.body.error.code, "ERR_STREAM_NOT_FOUND");
    }

    assert.equal((await call(writer.url, "/v1/stream/todos", { method: "PUT" })).status, 201);
    assert.equal((await call(writer.url, "/v1/stream/todos/_profile", { method: "POST", json: PROFILE })).status, 200);
    r = await call(writer.url, "/v1/stream/todos/touch/templates/activate", { method: "POST", json: { templates: [TEMPLATE] } });
    assert.equal(r.status, 200);
    const tpl = r.body.activated[0].templateId;

    // The edges' cursors are the writer's.
    const wmeta = (await call(writer.url, "/v1/stream/todos/touch/meta")).body;
    assert.match(wmeta.cursor, /^[0-9a-f]{16}:\d+$/);
    const emeta = await edgeAt(edge.url, "todos", wmeta.cursor);
    assert.equal(emeta.cursor, wmeta.cursor);
    await edgeAt(edgeCli.url, "todos", wmeta.cursor);

    // Waits parked at the edge with the writer's cursor: the table's and a watch key's wake on
    // an append at the writer; another table's does not.
    const wait = (body) => call(edge.url, "/v1/stream/todos/touch/wait", { method: "POST", json: { cursor: wmeta.cursor, timeoutMs: 60_000, ...body } });
    const table = wait({ keyIds: [TABLE], interestMode: "coarse" });
    const watch = wait({ keys: [keys.watchKey(tpl, ["t1"])], templateIdsUsed: [tpl] });
    const other = wait({ keyIds: [keys.tableKeyId("public.other")], interestMode: "coarse", timeoutMs: 1500 });
    // The writer emits fine touches only for keys someone waits on: the edge reports its
    // waits' keys (remote hot interest). Appending before the report reached the writer could
    // leave the watch wait unwoken, so the report is awaited. The three requests reach the
    // edge in any order, so a report may hold some of them: the coarse waits come in a later one.
    await eventually("the edge's fine and coarse waits at the writer", async () => {
      const m = (await call(writer.url, "/v1/stream/todos/touch/meta")).body;
      return m.fineWaitersActive >= 1 && m.hotFineKeysActive >= 1 && m.coarseWaitersActive >= 2 ? m : undefined;
    });

    // An append sent to the edge: 307 to the writer with the coded body …
    const rows = [insert(1, "t1"), insert(2, "t2")];
    r = await call(edge.url, "/v1/stream/todos", { method: "POST", json: rows });
    assertRedirect(r, writer.url, "/v1/stream/todos", "append at the edge");
    assert.equal((await call(writer.url, "/v1/stream/todos?offset=-1")).body.length, 0, "a redirect appends nothing");
    // … which fetch follows with its method and body: the append lands at the writer.
    r = await call(edge.url, "/v1/stream/todos", { method: "POST", json: rows, redirect: "follow" });
    assert.equal(r.status, 204);
    assert.ok(r.headers.get("stream-next-offset"));
    const read = await call(writer.url, "/v1/stream/todos?offset=-1");
    assert.deepEqual(read.body.map((x) => x.key), ["1", "2"]);

    for (const [name, p] of [["table", table], ["watch", watch]]) {
      const w = await p;
      assert.equal(w.status, 200, name);
      assert.equal(w.body.touched, true, `${name}: ${JSON.stringify(w.body)}`);
    }
    const o = await other;
    assert.equal(o.status, 200);
    assert.equal(o.body.touched, false, JSON.stringify(o.body));

    // The edge follows the writer's cursor past the append.
    const after = (await call(writer.url, "/v1/stream/todos/touch/meta")).body.cursor;
    assert.notEqual(after, wmeta.cursor);
    await edgeAt(edge.url, "todos", after);

    // Everything else goes to the writer, path and query kept; the CLI edge names --writer.
    const refused = [
      ["GET", "/v1/stream/todos?offset=-1&limit=5"],
      ["PUT", "/v1/stream/fresh"],
      ["DELETE", "/v1/stream/todos"],
      ["GET", "/v1/stream/todos/_profile"],
      ["POST", "/v1/stream/todos/_profile", PROFILE],
      ["POST", "/v1/stream/todos/touch/templates/activate", { templates: [TEMPLATE] }],
    ];
    for (const [method, path, json] of refused) {
      assertRedirect(await call(edge.url, path, { method, json }), writer.url, path, `${method} ${path}`);
      assertRedirect(await call(edgeCli.url, path, { method, json }), named, path, `${method} ${path} (--writer)`);
    }
    // A wait the edge's engine refuses (it would activate templates) goes to the writer too.
    const declaring = { cursor: after, keyIds: [TABLE], declareTemplates: [TEMPLATE], timeoutMs: 100 };
    assertRedirect(await call(edge.url, "/v1/stream/todos/touch/wait", { method: "POST", json: declaring }), writer.url, "/v1/stream/todos/touch/wait", "wait declaring templates");
    assert.equal((await call(writer.url, "/v1/stream/todos?offset=-1")).body.length, 2, "nothing the edge refused reached the writer");
    assert.equal((await call(writer.url, "/v1/stream/fresh/touch/meta")).body.error.code, "ERR_STREAM_NOT_FOUND");

    // Stats: each side's fan-out counters.
    const es = (await call(edge.url, "/v1/stats")).body;
    assert.equal(es.fanout.role, "edge");
    assert.ok(es.fanout.applied >= 1, JSON.stringify(es.fanout));
    const ws = (await call(writer.url, "/v1/stats")).body;
    assert.equal(ws.fanout.role, "writer");
    assert.ok(ws.fanout.sent >= 1, JSON.stringify(ws.fanout));
  } finally {
    if (edgeCli) {
      edgeCli.child.kill("SIGTERM");
      await edgeCli.exited;
    }
    for (const s of running.reverse()) await s.close();
    await broker.stop();
  }
}, { timeout: 120_000 });

/** A client's wait at an edge: a 307 is followed (as fetch does), counted in `redirected`. */
async function clientWait(edgeUrl, stream, body, redirected) {
  const path = `/v1/stream/${stream}/touch/wait`;
  const r = await call(edgeUrl, path, { method: "POST", json: body });
  if (r.status !== 307) return r;
  redirected.n += 1;
  return call(r.headers.get("location").replace(path, ""), path, { method: "POST", json: body });
}

test("a client driving a writer and an edge over HTTP, as clients do: no 404 for a new stream, and a fine wait right after an activation is planned fine", async () => {
  const broker = await startNats({ bin: nats.bin, storeDir: join(tempDir("dt-fo-srv-"), "js") });
  const running = [];
  try {
    const writer = await startServer({ port: 0, dataDir: tempDir(), nats: broker.url, natsPrefix: "cli" });
    running.push(writer);
    const edge = await startServer({ port: 0, nats: broker.url, natsPrefix: "cli", edge: true });
    running.push(edge);

    // New streams, each waited on at the edge the moment the writer's cursor is in hand: never
    // a 404, and every wait is woken by the append that follows, wherever it was parked.
    const redirected = { n: 0 };
    const rounds = 20;
    for (let i = 0; i < rounds; i++) {
      const stream = `fresh-${i}`;
      assert.equal((await call(writer.url, `/v1/stream/${stream}`, { method: "PUT" })).status, 201);
      assert.equal((await call(writer.url, `/v1/stream/${stream}/_profile`, { method: "POST", json: PROFILE })).status, 200);
      const cursor = (await call(writer.url, `/v1/stream/${stream}/touch/meta`)).body.cursor;
      const waiting = clientWait(edge.url, stream, { cursor, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 30_000 }, redirected);
      // The append comes once the wait is parked somewhere (the writer counts the edge's waits).
      await eventually(`round ${i}: the wait parked`, async () => ((await call(writer.url, `/v1/stream/${stream}/touch/meta`)).body.coarseWaitersActive >= 1 ? true : undefined));
      assert.equal((await call(writer.url, `/v1/stream/${stream}`, { method: "POST", json: [insert(i, "t1")] })).status, 204);
      const w = await waiting;
      assert.equal(w.status, 200, `round ${i}: ${JSON.stringify(w.body)}`);
      assert.equal(w.body.touched, true, `round ${i}: ${JSON.stringify(w.body)}`);
      assert.notEqual(w.body.stale, true, `round ${i}`);
    }
    console.log(`  ${rounds} new streams waited on at the edge at once: ${rounds - redirected.n} parked at the edge, ${redirected.n} sent to the writer, 0 404s`);

    // Activations at the writer, each followed 50 ms later by a fine wait at the edge and a
    // control wait on another tuple of the same template: the edge knows the template (the
    // writer published it as the activation returned), so the wait is planned fine, is woken
    // by its own tuple's key, and the control stays quiet.
    assert.equal((await call(writer.url, "/v1/stream/todos", { method: "PUT" })).status, 201);
    assert.equal((await call(writer.url, "/v1/stream/todos/_profile", { method: "POST", json: PROFILE })).status, 200);
    const fields = ["tenantId", "ownerId", "listId"];
    for (const [i, field] of fields.entries()) {
      const template = { entity: "public.todos", fields: [{ name: field, encoding: "string" }] };
      const r = await call(writer.url, "/v1/stream/todos/touch/templates/activate", { method: "POST", json: { templates: [template] } });
      assert.equal(r.status, 200);
      const tpl = r.body.activated[0].templateId;
      const cursor = (await call(writer.url, "/v1/stream/todos/touch/meta")).body.cursor;
      await sleep(50);
      const wait = (value, timeoutMs) =>
        call(edge.url, "/v1/stream/todos/touch/wait", { method: "POST", json: { cursor, keys: [keys.watchKey(tpl, [value])], templateIdsUsed: [tpl], timeoutMs } });
      const fine = wait(`v${i}`, 30_000);
      const control = wait(`other${i}`, 2_000);
      await eventually(`activation ${i}: the edge's fine waits at the writer`, async () => {
        const m = (await call(writer.url, "/v1/stream/todos/touch/meta")).body;
        return m.fineWaitersActive >= 2 ? m : undefined;
      });
      const row = { type: "public.todos", key: `r${i}`, value: { id: `r${i}`, [field]: `v${i}` }, headers: { operation: "insert" } };
      assert.equal((await call(writer.url, "/v1/stream/todos", { method: "POST", json: [row] })).status, 204);
      const f = await fine;
      assert.equal(f.status, 200, JSON.stringify(f.body));
      assert.equal(f.body.touched, true, `activation ${i}: ${JSON.stringify(f.body)}`);
      assert.equal(f.body.effectiveWaitKind, "fineKey", `activation ${i}: planned ${f.body.effectiveWaitKind} at the edge`);
      const c = await control;
      assert.equal(c.status, 200);
      assert.equal(c.body.touched, false, `activation ${i}: the control was woken: ${JSON.stringify(c.body)}`);
    }
  } finally {
    for (const s of running.reverse()) await s.close();
    await broker.stop();
  }
}, { timeout: 180_000 });

/** A wait at `base` answered at once (timeoutMs 0): { touched, stale, cursor }. */
async function probe(base, stream, cursor, keyIds) {
  const r = await call(base, `/v1/stream/${stream}/touch/wait`, { method: "POST", json: { cursor, keyIds, interestMode: "coarse", timeoutMs: 0 } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

test("an edge process killed with SIGKILL and started again: within retention its old cursors are answered precisely, past it they are stale", async () => {
  const broker = await startNats({ bin: nats.bin, storeDir: join(tempDir("dt-fo-srv-"), "js") });
  const running = [];
  const edges = [];
  const edgeProcess = async (prefix) => {
    const e = await cli(["--port", "0", "--edge", "--nats", broker.url, "--nats-prefix", prefix]);
    edges.push(e);
    return e;
  };
  const kill9 = async (e) => {
    e.child.kill("SIGKILL");
    assert.equal(await e.exited, "SIGKILL");
  };
  // One writer keeps its flushes 10 minutes (the default), one 1 s (--nats-max-age-ms).
  const scenario = async (prefix, writerOpts, afterKill) => {
    const writer = await startServer({ port: 0, dataDir: tempDir(), nats: broker.url, natsPrefix: prefix, ...writerOpts });
    running.push(writer);
    assert.equal((await call(writer.url, "/v1/stream/todos", { method: "PUT" })).status, 201);
    assert.equal((await call(writer.url, "/v1/stream/todos/_profile", { method: "POST", json: PROFILE })).status, 200);
    assert.equal((await call(writer.url, "/v1/stream/todos", { method: "POST", json: [insert(1, "t1")] })).status, 204);
    const first = await edgeProcess(prefix);
    // The cursor a client got from the first edge process, and a wait it holds there.
    const before = (await call(writer.url, "/v1/stream/todos/touch/meta?settle=flush")).body.cursor;
    const cursor = (await edgeAt(first.url, "todos", before)).cursor;
    const held = call(first.url, "/v1/stream/todos/touch/wait", { method: "POST", json: { cursor, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 60_000 } });
    const settledHeld = held.then(() => "answered", (e) => `failed: ${e.cause?.code ?? e.message}`);
    await sleep(100);
    await kill9(first);
    // The client's connection ends with the process: an error, not an answer and not a hang.
    assert.match(await settledHeld, /^failed/);
    // Written while no edge runs.
    assert.equal((await call(writer.url, "/v1/stream/todos", { method: "POST", json: [insert(2, "t2")] })).status, 204);
    const now = (await call(writer.url, "/v1/stream/todos/touch/meta?settle=flush")).body.cursor;
    assert.notEqual(now, cursor);
    await afterKill();
    const second = await edgeProcess(prefix);
    await edgeAt(second.url, "todos", now);
    return { writer, second, cursor, now };
  };

  try {
    // Within retention: the new process replays every flush and knows what changed after the
    // old cursor, and what did not.
    const kept = await scenario("k9kept", {}, async () => {});
    let r = await probe(kept.second.url, "todos", kept.cursor, [TABLE]);
    assert.deepEqual([r.touched, r.stale], [true, undefined], `the change after the old cursor: ${JSON.stringify(r)}`);
    r = await probe(kept.second.url, "todos", kept.cursor, [keys.tableKeyId("public.other")]);
    assert.deepEqual([r.touched, r.stale], [false, undefined], `no change invented: ${JSON.stringify(r)}`);
    r = await probe(kept.second.url, "todos", kept.now, [TABLE]);
    assert.deepEqual([r.touched, r.stale, r.cursor], [false, undefined, kept.now]);
    const w = await probe(kept.writer.url, "todos", kept.cursor, [TABLE]);
    assert.equal(w.touched, true, "the writer answers the killed edge's cursor alike");

    // Past retention: the flush after the old cursor is gone from the broker, so the new
    // process cannot know what it held: stale (never a silent `false`), then it follows.
    const lost = await scenario("k9lost", { natsMaxAgeMs: 1_000 }, () => sleep(2_500));
    r = await probe(lost.second.url, "todos", lost.cursor, [keys.tableKeyId("public.other")]);
    assert.equal(r.stale, true, `an old cursor past retention: ${JSON.stringify(r)}`);
    assert.equal(r.cursor, lost.now);
    const waiting = call(lost.second.url, "/v1/stream/todos/touch/wait", { method: "POST", json: { cursor: lost.now, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 60_000 } });
    await sleep(100);
    assert.equal((await call(lost.writer.url, "/v1/stream/todos", { method: "POST", json: [insert(3, "t3")] })).status, 204);
    const followed = await waiting;
    assert.equal(followed.body.touched, true, `the new edge process follows: ${JSON.stringify(followed.body)}`);
  } finally {
    for (const e of edges) {
      if (e.child.exitCode === null && e.child.signalCode === null) e.child.kill("SIGKILL");
      await e.exited;
    }
    for (const s of running.reverse()) await s.close();
    await broker.stop();
  }
}, { timeout: 120_000 });

test("a writer process killed with SIGKILL and started again on its data: the same epoch goes on, the edge keeps its mirror and parked waits, and it publishes at once", async () => {
  const broker = await startNats({ bin: nats.bin, storeDir: join(tempDir("dt-fo-srv-"), "js") });
  const data = tempDir("dt-fo-k9w-");
  const procs = [];
  const writerProcess = async () => {
    const w = await cli(["--port", "0", "--data", data, "--nats", broker.url, "--nats-prefix", "k9w"]);
    procs.push(w);
    return w;
  };
  let edge = null;
  try {
    const first = await writerProcess();
    edge = await startServer({ port: 0, nats: broker.url, natsPrefix: "k9w", edge: true });
    assert.equal((await call(first.url, "/v1/stream/todos", { method: "PUT" })).status, 201);
    assert.equal((await call(first.url, "/v1/stream/todos/_profile", { method: "POST", json: PROFILE })).status, 200);
    assert.equal((await call(first.url, "/v1/stream/todos", { method: "POST", json: [insert(1, "t1")] })).status, 204);
    const old = (await call(first.url, "/v1/stream/todos/touch/meta?settle=flush")).body.cursor;
    await edgeAt(edge.url, "todos", old);
    // Waits parked at the edge across the kill: one on the table the next append writes, one
    // on a table nothing writes.
    const wait = (table) => call(edge.url, "/v1/stream/todos/touch/wait", { method: "POST", json: { cursor: old, keyIds: [table], interestMode: "coarse", timeoutMs: 60_000 } });
    const held = wait(TABLE);
    const quiet = wait(keys.tableKeyId("public.other"));
    await sleep(100);
    first.child.kill("SIGKILL");
    assert.equal(await first.exited, "SIGKILL");

    // Started again at once on the same data: it is not held off by its dead self's claim on
    // the prefix, and its journal is the one it kept: the same epoch, the same generation.
    const second = await writerProcess();
    const now = (await call(second.url, "/v1/stream/todos/touch/meta")).body.cursor;
    assert.equal(now.split(":")[0], old.split(":")[0], "a restarted writer keeps its epoch");
    const ws = (await call(second.url, "/v1/stats")).body.fanout;
    assert.equal(ws.standby, false, JSON.stringify(ws));
    // Its next flush reaches the edge as the next generation: the parked wait on its table
    // wakes (touched, not stale), the other stays parked and its cursor stays good.
    assert.equal((await call(second.url, "/v1/stream/todos", { method: "POST", json: [insert(2, "t2")] })).status, 204);
    const h = await held;
    assert.deepEqual([h.status, h.body.stale === true, h.body.touched], [200, false, true], JSON.stringify(h.body));
    const after = (await call(second.url, "/v1/stream/todos/touch/meta?settle=flush")).body.cursor;
    await edgeAt(edge.url, "todos", after);
    const still = await Promise.race([quiet.then(() => "answered"), sleep(300).then(() => "parked")]);
    assert.equal(still, "parked", "a wait on an untouched table stays parked at the edge across the writer's restart");
    const r = await probe(edge.url, "todos", old, [keys.tableKeyId("public.other")]);
    assert.deepEqual([r.stale === true, r.touched], [false, false], `a cursor of the killed writer: ${JSON.stringify(r)}`);
    const es = (await call(edge.url, "/v1/stats")).body.fanout;
    assert.equal(es.gaps, 0, `the edge saw no gap: ${JSON.stringify(es)}`);
  } finally {
    for (const p of procs) {
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
      await p.exited;
    }
    await edge?.close();
    await broker.stop();
  }
}, { timeout: 120_000 });

test("an edge that has heard no writer answers 503 ERR_EDGE_READ_ONLY; a server without --nats has no fan-out", async () => {
  const broker = await startNats({ bin: nats.bin, storeDir: join(tempDir("dt-fo-srv-"), "js") });
  let edge = null;
  let plain = null;
  try {
    edge = await startServer({ port: 0, nats: broker.url, natsPrefix: "nobody-writes-here", edge: true });
    const r = await call(edge.url, "/v1/stream/todos", { method: "POST", json: [insert(1, "t1")] });
    assert.equal(r.status, 503);
    assert.equal(r.body.error.code, "ERR_EDGE_READ_ONLY");
    assert.equal(r.body.error.writer, null);
    assert.equal(r.headers.get("location"), null);
    // A stream it has not heard of: not a 404 (it cannot know), the same 503.
    const m = await call(edge.url, "/v1/stream/todos/touch/meta");
    assert.equal(m.status, 503);
    assert.equal(m.body.error.code, "ERR_EDGE_READ_ONLY");
    assert.match(m.body.error.message, /has not heard of stream "todos"/);

    plain = await startServer({ port: 0, dataDir: tempDir() });
    assert.equal(plain.role, null);
    assert.equal(plain.engine.fanoutStats(), null);
    assert.equal((await call(plain.url, "/v1/stats")).body.fanout, undefined);
  } finally {
    await edge?.close();
    await plain?.close();
    await broker.stop();
  }
  // Flags that make no sense alone are refused before anything starts.
  await assert.rejects(startServer({ port: 0, edge: true }), /an edge needs the writer's NATS server/);
  await assert.rejects(startServer({ port: 0, dataDir: tempDir(), writer: "http://127.0.0.1:1" }), /--writer is for an edge/);
  await assert.rejects(startServer({ port: 0, nats: "nats://127.0.0.1:1", edge: true, writer: "ftp://x" }), /--writer must be an http\(s\) URL/);
  await assert.rejects(startServer({ port: 0, nats: "nats://127.0.0.1:1", edge: true, publicUrl: "http://x" }), /--public-url is for a writer/);
  await assert.rejects(startServer({ port: 0, nats: "nats://127.0.0.1:1", edge: true, natsMaxAgeMs: 5000 }), /--nats-max-age-ms is for a writer/);
  await assert.rejects(startServer({ port: 0, dataDir: tempDir(), natsMaxBytes: 1e6 }), /--nats-max-bytes is for a writer/);
  await assert.rejects(startServer({ port: 0, dataDir: tempDir(), nats: "nats://127.0.0.1:1", natsMaxAgeMs: "10s" }), /--nats-max-age-ms must be an integer from 1000 to /);
  await assert.rejects(startServer({ port: 0, nats: "nats://127.0.0.1:1", edge: true, natsBatchMs: 5 }), /--nats-batch-ms is for a writer/);
  await assert.rejects(startServer({ port: 0, dataDir: tempDir(), nats: "nats://127.0.0.1:1", natsBatchMs: 1001 }), /--nats-batch-ms must be an integer from 0 to 1000/);
}, { timeout: 60_000 });

test("DURABLE_TOUCH_NATS: the swapped reference's fan-out option from the environment", () => {
  assert.equal(fanoutFromEnv({ host: "127.0.0.1", port: 8080 }, {}), undefined);
  assert.equal(fanoutFromEnv({ host: "127.0.0.1", port: 8080 }, { DURABLE_TOUCH_NATS: "  " }), undefined);
  assert.deepEqual(fanoutFromEnv({ host: "127.0.0.1", port: 8080 }, { DURABLE_TOUCH_NATS: "nats://n:4222" }), { role: "writer", url: "nats://n:4222", writerUrl: "http://127.0.0.1:8080" });
  assert.deepEqual(fanoutFromEnv({ host: "::1", port: 8080 }, { DURABLE_TOUCH_NATS: "nats://n:4222", DURABLE_TOUCH_NATS_PREFIX: "app1" }), { role: "writer", url: "nats://n:4222", prefix: "app1", writerUrl: "http://[::1]:8080" });
  // A wildcard host or port 0 names no URL an edge could send a client to.
  assert.deepEqual(fanoutFromEnv({ host: "0.0.0.0", port: 8080 }, { DURABLE_TOUCH_NATS: "nats://n:4222" }), { role: "writer", url: "nats://n:4222" });
  assert.deepEqual(fanoutFromEnv({ host: "127.0.0.1", port: 0 }, { DURABLE_TOUCH_NATS: "nats://n:4222" }), { role: "writer", url: "nats://n:4222" });
  const explicit = { DURABLE_TOUCH_NATS: "nats://n:4222", DURABLE_TOUCH_WRITER_URL: "https://streams.example.com/" };
  assert.equal(fanoutFromEnv({ host: "0.0.0.0", port: 0 }, explicit).writerUrl, "https://streams.example.com");
  const kept = { DURABLE_TOUCH_NATS: "nats://n:4222", DURABLE_TOUCH_NATS_MAX_AGE_MS: "60000", DURABLE_TOUCH_NATS_MAX_BYTES: " 1048576 " };
  assert.deepEqual(fanoutFromEnv({ host: "0.0.0.0", port: 0 }, kept), { role: "writer", url: "nats://n:4222", maxAgeMs: 60_000, maxBytes: 1_048_576 });
});

/** Starts the swapped reference copy (swap-serve.ts, under Bun) with `env`; resolves { base, child, exited }. */
async function serveSwapped(copy, env) {
  const child = spawn(BUN, ["--no-install", SERVE], { env: { ...process.env, APP_SRC: copy, DATA_DIR: tempDir("dt-fo-ref-"), ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise((r) => child.on("exit", (code, signal) => r(signal ?? code)));
  const err = [];
  child.stderr.on("data", (d) => err.push(d));
  try {
    const port = await new Promise((resolve, reject) => {
      let buf = "";
      child.stdout.on("data", (d) => {
        buf += d;
        const i = buf.indexOf("\n");
        if (i >= 0) resolve(JSON.parse(buf.slice(0, i)).port);
      });
      exited.then((how) => reject(new Error(`swap-serve exited ${how}: ${Buffer.concat(err)}`)));
    });
    return { base: `http://127.0.0.1:${port}`, child, exited };
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  }
}

test("the swapped reference server publishes with DURABLE_TOUCH_NATS: an edge of ours mirrors it and wakes on its appends", async () => {
  const { swapped } = serverCopies("swapped");
  swap(swapped);
  const broker = await startNats({ bin: nats.bin, storeDir: join(tempDir("dt-fo-srv-"), "js") });
  let ref = null;
  let edge = null;
  try {
    // Its own port is picked at start (0), so what edges name comes from the environment.
    const named = "http://streams-writer.invalid:8080";
    ref = await serveSwapped(swapped, { DURABLE_TOUCH_NATS: broker.url, DURABLE_TOUCH_NATS_PREFIX: "ref", DURABLE_TOUCH_WRITER_URL: named });
    edge = await startServer({ port: 0, nats: broker.url, natsPrefix: "ref", edge: true });

    assert.ok((await call(ref.base, "/v1/stream/items", { method: "PUT" })).status < 300);
    assert.equal((await call(ref.base, "/v1/stream/items/_profile", { method: "POST", json: PROFILE })).status, 200);
    const rmeta = (await call(ref.base, "/v1/stream/items/touch/meta")).body;
    assert.match(rmeta.cursor, /^[0-9a-f]{16}:\d+$/);
    await edgeAt(edge.url, "items", rmeta.cursor);

    const waiting = call(edge.url, "/v1/stream/items/touch/wait", { method: "POST", json: { cursor: rmeta.cursor, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 60_000 } });
    const r = await call(ref.base, "/v1/stream/items", { method: "POST", json: [insert(1, "t1")] });
    assert.ok(r.status === 200 || r.status === 204, `append: ${r.status} ${JSON.stringify(r.body)}`);
    const w = await waiting;
    assert.equal(w.status, 200);
    assert.equal(w.body.touched, true, JSON.stringify(w.body));

    // The edge sends writes to the URL the environment named.
    assertRedirect(await call(edge.url, "/v1/stream/items", { method: "POST", json: [insert(2, "t1")] }), named, "/v1/stream/items", "append at the edge");
  } finally {
    await edge?.close();
    if (ref) {
      ref.child.kill("SIGTERM");
      await ref.exited;
    }
    await broker.stop();
  }
}, { timeout: 120_000, skip: !referenceAvailable() });
