// The Live HTTP server over real HTTP (Node's http under node, Bun.serve under bun).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, tempDir, sleep, isBun } from "./harness.mjs";
import { startServer } from "../apps/server/server.mjs";
import { encodeOffset } from "../apps/server/offsets.mjs";
import { rng } from "./support/random-cases.mjs";

const { keys } = dt;
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const JSON_HEADERS = { "content-type": "application/json" };
const TEMPLATE = { entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] };
const insert = (id, tenantId) => ({ type: "public.todos", key: String(id), value: { id: String(id), tenantId }, headers: { operation: "insert" } });

async function setup(dataDir = tempDir(), options = {}) {
  const server = await startServer({ port: 0, dataDir, ...options });
  const u = (p) => `${server.url}${p}`;
  return { server, u, dataDir };
}

async function createTouchStream(u, name = "todos") {
  let r = await fetch(u(`/v1/stream/${name}`), { method: "PUT", headers: JSON_HEADERS });
  assert.equal(r.status, 201);
  r = await fetch(u(`/v1/stream/${name}/_profile`), { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ profile: { kind: "state-protocol", touch: { enabled: true } } }) });
  assert.equal(r.status, 200);
  assert.equal((await r.json()).profile.touch.enabled, true);
  r = await fetch(u(`/v1/stream/${name}/touch/templates/activate`), { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ templates: [TEMPLATE] }) });
  assert.equal(r.status, 200);
  const act = await r.json();
  assert.equal(act.activated.length, 1);
  return act.activated[0].templateId;
}

const post = (u, path, body) => fetch(u(path), { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(body) });

test("streams, profile, templates, meta and waits woken by writes over HTTP", async () => {
  const { server, u } = await setup();
  try {
    const tpl = await createTouchStream(u);
    const meta = await (await fetch(u("/v1/stream/todos/touch/meta"))).json();
    assert.match(meta.cursor, /^[0-9a-f]{16}:0$/);

    const table = post(u, "/v1/stream/todos/touch/wait", { cursor: meta.cursor, keyIds: [keys.tableKeyId("public.todos")], interestMode: "coarse", timeoutMs: 5000 });
    const watch = post(u, "/v1/stream/todos/touch/wait", { cursor: meta.cursor, keys: [keys.watchKey(tpl, ["t1"])], templateIdsUsed: [tpl], timeoutMs: 5000 });
    const idsOnly = post(u, "/v1/stream/todos/touch/wait", { cursor: meta.cursor, keyIds: [keys.watchKeyId(tpl, ["t1"])], timeoutMs: 5000 });
    await sleep(50);
    const a = await post(u, "/v1/stream/todos", [insert(1, "t1"), insert(2, "t2")]);
    assert.equal(a.status, 204);
    assert.ok(a.headers.get("stream-next-offset"));
    for (const p of [table, watch, idsOnly]) {
      const r = await p;
      assert.equal(r.status, 200);
      assert.equal((await r.json()).touched, true);
    }
    const read = await fetch(u("/v1/stream/todos?offset=-1"));
    assert.equal(read.status, 200);
    assert.equal(read.headers.get("stream-up-to-date"), "true");
    assert.deepEqual((await read.json()).map((r) => r.key), ["1", "2"]);
    const stats = await (await fetch(u("/v1/stats"))).json();
    assert.ok(stats.engine.reporterLine.startsWith("ingested="));
  } finally {
    await server.close();
  }
});

test("a reader following stream-next-offset over random page sizes reads every row exactly once", async () => {
  const { server, u } = await setup();
  try {
    await followReader(u);
  } finally {
    await server.close();
  }
});

async function followReader(u) {
  let r = await fetch(u("/v1/stream/rows"), { method: "PUT", headers: JSON_HEADERS });
  assert.equal(r.status, 201);
  const rand = rng(19);
  const total = 300;
  for (let next = 0; next < total; ) {
    const n = Math.min(total - next, 1 + rand.int(40));
    r = await post(u, "/v1/stream/rows", Array.from({ length: n }, (_, i) => next + i));
    assert.equal(r.status, 204);
    next += n;
  }
  // The case: after [0,1,2], the next page starts at 3.
  r = await fetch(u("/v1/stream/rows?offset=-1&limit=3"));
  assert.deepEqual(await r.json(), [0, 1, 2]);
  r = await fetch(u(`/v1/stream/rows?offset=${r.headers.get("stream-next-offset")}&limit=3`));
  assert.deepEqual(await r.json(), [3, 4, 5]);
  for (let round = 0; round < 5; round++) {
    const seen = [];
    let offset = "-1";
    for (let pages = 0; ; pages++) {
      assert.ok(pages <= total, "the reader makes progress");
      r = await fetch(u(`/v1/stream/rows?offset=${offset}&limit=${1 + rand.int(round === 0 ? 3 : 50)}`));
      assert.equal(r.status, 200);
      seen.push(...(await r.json()));
      offset = r.headers.get("stream-next-offset");
      if (r.headers.get("stream-up-to-date") === "true") break;
    }
    assert.deepEqual(seen, Array.from({ length: total }, (_, i) => i), `round ${round}`);
    assert.equal(offset, r.headers.get("stream-end-offset"));
  }
}

test("bad requests get a JSON error with a code", async () => {
  const { server, u } = await setup();
  try {
    await createTouchStream(u);
    const cases = [
      [fetch(u("/v1/stream/todos"), { method: "POST", headers: JSON_HEADERS, body: "{not json" }), 400, "ERR_INVALID_ARGUMENT"],
      [post(u, "/v1/stream/todos", { type: "public.todos", key: "1", headers: {} }), 400, "ERR_INVALID_ARGUMENT"],
      [post(u, "/v1/stream/nope", insert(1, "t")), 404, "ERR_STREAM_NOT_FOUND"],
      [fetch(u("/v1/stream/todos"), { method: "PATCH" }), 405, "ERR_METHOD_NOT_ALLOWED"],
      [fetch(u("/v1/stream/todos/touch/wait"), { method: "GET" }), 405, "ERR_METHOD_NOT_ALLOWED"],
      [post(u, "/v1/stream/todos/touch/wait", { cursor: "now" }), 400, "ERR_INVALID_ARGUMENT"],
      [post(u, "/v1/stream/todos/touch/wait", { cursor: "bad", keyIds: [1] }), 400, "ERR_INVALID_CURSOR"],
      [fetch(u("/v1/stream/todos/touch/meta?settle=soon")), 400, "ERR_INVALID_ARGUMENT"],
      [fetch(u("/v1/stream/todos"), { method: "POST", headers: JSON_HEADERS, body: "x".repeat(11 * 1024 * 1024) }), 413, "ERR_PAYLOAD_TOO_LARGE"],
      [fetch(u("/v1/stream/todos"), { method: "POST", headers: { ...JSON_HEADERS, "stream-expected-offset": "99" }, body: JSON.stringify(insert(1, "t")) }), 409, "ERR_SEQ_MISMATCH"],
      [fetch(u("/v1/stream/todos"), { method: "PUT", headers: { "content-type": "text/plain" } }), 409, "ERR_STREAM_EXISTS"],
      [fetch(u("/v1/nothing")), 404, "ERR_NOT_FOUND"],
    ];
    for (const [p, status, code] of cases) {
      const r = await p;
      assert.equal(r.status, status);
      const body = await r.json();
      assert.equal(body.error.code, code, body.error.message);
      if (code === "ERR_SEQ_MISMATCH") assert.equal(r.headers.get("stream-expected-offset"), "0");
    }
    // An expected offset past any a stream reaches is a mismatch (it was a 400 naming an
    // internal option).
    const past = await fetch(u("/v1/stream/todos"), { method: "POST", headers: { ...JSON_HEADERS, "stream-expected-offset": "18446744073709551615" }, body: JSON.stringify(insert(1, "t")) });
    assert.equal(past.status, 409);
    assert.equal((await past.json()).error.code, "ERR_SEQ_MISMATCH");
    assert.equal(past.headers.get("stream-expected-offset"), "0");
    // An offset past any a stream reaches reads nothing, as any offset past the tail.
    const far = encodeOffset(0, 1n << 63n);
    const r = await fetch(u(`/v1/stream/todos?offset=${far}`));
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), []);
    assert.equal(r.headers.get("stream-next-offset"), far);
    assert.equal(r.headers.get("stream-up-to-date"), "true");
  } finally {
    await server.close();
  }
});

test("a client disconnect aborts its wait; a restart keeps cursors, and with keepCursors: false makes them stale", async () => {
  const dataDir = tempDir();
  const first = await setup(dataDir);
  let second = null;
  try {
    await createTouchStream(first.u);
    const { cursor } = await (await fetch(first.u("/v1/stream/todos/touch/meta"))).json();
    const ac = new AbortController();
    const p = post(first.u, "/v1/stream/todos/touch/wait", { cursor, keyIds: [7], timeoutMs: 60000 }).catch(() => null);
    await sleep(100);
    let meta = await (await fetch(first.u("/v1/stream/todos/touch/meta"))).json();
    assert.equal(meta.activeWaiters, 1);
    const q = fetch(first.u("/v1/stream/todos/touch/wait"), { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ cursor, keyIds: [8], timeoutMs: 60000 }), signal: ac.signal }).catch(() => null);
    await sleep(100);
    ac.abort();
    await q;
    for (let i = 0; i < 50; i++) {
      meta = await (await fetch(first.u("/v1/stream/todos/touch/meta"))).json();
      if (meta.activeWaiters === 1) break;
      await sleep(20);
    }
    assert.equal(meta.activeWaiters, 1, "the disconnected client's wait was aborted; the other one remains");
    await first.server.close();
    const answered = await p;
    assert.equal(answered.status, 200);
    assert.equal((await answered.json()).touched, false, "close answered the pending wait");

    second = await setup(dataDir);
    let r = await (await post(second.u, "/v1/stream/todos/touch/wait", { cursor, keyIds: [7], timeoutMs: 300 })).json();
    assert.deepEqual([r.stale === true, r.touched, r.cursor], [false, false, cursor], "the cursor is kept across the restart");
    await second.server.close();

    second = await setup(dataDir, { keepCursors: false });
    r = await (await post(second.u, "/v1/stream/todos/touch/wait", { cursor, keyIds: [7], timeoutMs: 1000 })).json();
    assert.equal(r.stale, true, "the reference's behaviour: a new epoch at every start");
  } finally {
    // close() is idempotent: a server the test already closed is not closed twice.
    await first.server.close();
    await second?.server.close();
  }
});

test("500 concurrent waits and a writer: every waiter whose key was written wakes", async () => {
  const { server, u } = await setup();
  try {
    const tpl = await createTouchStream(u);
    const { cursor } = await (await fetch(u("/v1/stream/todos/touch/meta"))).json();
    const tenants = Array.from({ length: 500 }, (_, i) => `tenant-${i}`);
    const written = new Set(tenants.filter((_, i) => i % 2 === 0));
    const waits = tenants.map((t) =>
      post(u, "/v1/stream/todos/touch/wait", { cursor, keys: [keys.watchKey(tpl, [t])], templateIdsUsed: [tpl], timeoutMs: written.has(t) ? 10000 : 1500 }).then(async (r) => ({ t, body: await r.json() }))
    );
    await sleep(100);
    let id = 0;
    const batch = [...written];
    for (let i = 0; i < batch.length; i += 25) {
      const r = await post(u, "/v1/stream/todos", batch.slice(i, i + 25).map((t) => insert(id++, t)));
      assert.equal(r.status, 204);
    }
    const results = await Promise.all(waits);
    for (const { t, body } of results) if (written.has(t)) assert.equal(body.touched, true, `${t} was written but its waiter did not wake`);
  } finally {
    await server.close();
  }
}, { timeout: 60_000 });

test("SIGINT closes the server cleanly: pending waits are answered and the process exits", async () => {
  const dataDir = tempDir();
  const child = spawn(process.execPath, [join(root, "bin", "durable-touch.mjs"), "--port", "0", "--data", dataDir], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    let out = "";
    const url = await new Promise((resolve, reject) => {
      child.stdout.on("data", (d) => {
        out += d;
        const m = out.match(/listening on (http:\/\/[^\s]+)/);
        if (m) resolve(m[1]);
      });
      child.on("exit", (c) => reject(new Error(`server exited early (${c}): ${out}`)));
    });
    const u = (p) => `${url}${p}`;
    await createTouchStream(u);
    const pending = post(u, "/v1/stream/todos/touch/wait", { cursor: "now", keyIds: [1], timeoutMs: 60000 });
    await sleep(100);
    const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
    child.kill("SIGINT");
    const r = await pending;
    assert.equal(r.status, 200);
    assert.equal((await r.json()).touched, false);
    assert.deepEqual(await exited, { code: 0, signal: null });
  } finally {
    // A failure before the SIGINT (or a child that ignored it) must not leave it running.
    if (child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once("exit", r));
      child.kill("SIGKILL");
      await gone;
    }
  }
}, { timeout: 30_000 });

test("an embedder's request body stream of any byte chunks is read as it is, anything else refused", async () => {
  // createHandler() serves Requests an embedder builds: their bodies may be streams of views
  // other than Uint8Array (read as the bytes they view), or of non-bytes (a 400, not a store
  // of zeros or an unbounded read).
  const { createHandler } = await import("../apps/server/server.mjs");
  const store = dt.Store.open(":memory:");
  const engine = new dt.TouchEngine(store, {});
  try {
    const handler = createHandler({ store, engine, bodyLimit: 16 });
    const headers = { "content-type": "application/octet-stream" };
    const post = (chunks) =>
      handler.fetch(
        new Request("http://x/v1/stream/b", {
          method: "POST",
          headers,
          duplex: "half",
          body: new ReadableStream({
            start(c) {
              for (const x of chunks) c.enqueue(x);
              c.close();
            },
          }),
        }),
      );
    assert.equal((await handler.fetch(new Request("http://x/v1/stream/b", { method: "PUT", headers }))).status, 201);
    const bytes = new Uint8Array([0, 1, 2, 3, 4, 5, 6, 7]);
    assert.equal((await post([new DataView(bytes.buffer, 2, 3), bytes.subarray(5)])).status, 204);
    assert.equal((await post([bytes.buffer.slice(0, 2)])).status, 204);
    const refused = await post(["abc"]);
    assert.equal(refused.status, 400);
    assert.equal((await refused.json()).error.message, "request body chunks must be bytes");
    assert.equal((await post([new Uint8Array(10), new Uint8Array(10)])).status, 413);
    const rows = await store.read("b", { from: 0n, limit: 10 });
    assert.deepEqual(rows.map((r) => [...r.payload]), [[2, 3, 4, 5, 6, 7], [0, 1]]);
  } finally {
    await engine.close();
    await store.close();
  }
});

test("a read page holds at most 1 MiB of payloads (at least one row); following the offsets reads every row", async () => {
  const { server, u } = await setup();
  try {
    const headers = { "content-type": "application/octet-stream" };
    assert.equal((await fetch(u("/v1/stream/big"), { method: "PUT", headers })).status, 201);
    const sizes = [300_000, 300_000, 300_000, 300_000, 2_000_000, 10];
    for (const [i, n] of sizes.entries()) {
      const r = await fetch(u("/v1/stream/big"), { method: "POST", headers, body: new Uint8Array(n).fill(i + 1) });
      assert.equal(r.status, 204);
    }
    const pages = [];
    let offset = "-1";
    for (let guard = 0; guard < 10; guard++) {
      const r = await fetch(u(`/v1/stream/big?offset=${offset}&limit=100`));
      const body = new Uint8Array(await r.arrayBuffer());
      pages.push(body.length);
      offset = r.headers.get("stream-next-offset");
      if (r.headers.get("stream-up-to-date") === "true") break;
    }
    // Three rows of 300,000 fit in 1 MiB, a fourth does not; a 2 MB row comes alone.
    assert.deepEqual(pages, [900_000, 300_000, 2_000_000, 10]);
  } finally {
    await server.close();
  }
});

test("a wait answers the same through the server (Node's own wait path) as through the handler", async () => {
  const { server, u } = await setup();
  const { createHandler } = await import("../apps/server/server.mjs");
  const handler = createHandler({ store: server.store, engine: server.engine });
  try {
    await createTouchStream(u);
    const { cursor } = await (await fetch(u("/v1/stream/todos/touch/meta"))).json();
    const table = keys.tableKeyId("public.todos");
    const cases = [
      ["/v1/stream/todos/touch/wait", { cursor, keyIds: [table], interestMode: "coarse", timeoutMs: 1 }],
      ["/v1/stream/todos/touch/wait/?ignored=1", { cursor, keyIds: [table], timeoutMs: 1 }],
      ["/v1/stream/todos/touch/wait", { cursor: "not-a-cursor", keyIds: [table], timeoutMs: 1 }],
      ["/v1/stream/todos/touch/wait", { cursor, timeoutMs: 1 }],
      ["/v1/stream/todos/touch/wait", [1, 2]],
      ["/v1/stream/todos/touch/wait", "{not json"],
      ["/v1/stream/todos/touch/wait", ""],
      ["/v1/stream/todos/touch/wait", new Uint8Array([0x7b, 0xff, 0x7d])],
      ["/v1/stream/nope/touch/wait", { cursor, keyIds: [table], timeoutMs: 1 }],
      ["/v1/stream/a%2Fb/touch/wait", { cursor, keyIds: [table], timeoutMs: 1 }],
      ["/v1/stream/%E0%A4%A/touch/wait", { cursor, keyIds: [table], timeoutMs: 1 }],
      ["/v1/stream/todos/x/../touch/wait", { cursor, keyIds: [table], timeoutMs: 1 }],
      ["/v1/stream/todos/touch/wait", { cursor, keys: Array.from({ length: 70_000 }, (_, i) => String(i)), timeoutMs: 1 }],
    ];
    for (const [path, body] of cases) {
      const bytes = typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body);
      const viaServer = await fetch(u(path), { method: "POST", headers: JSON_HEADERS, body: bytes });
      const viaHandler = await handler.fetch(new Request(`http://localhost${path}`, { method: "POST", headers: JSON_HEADERS, body: bytes }));
      const [a, b] = [await viaServer.text(), await viaHandler.text()];
      const what = `${path} ${String(bytes).slice(0, 40)}`;
      assert.equal(viaServer.status, viaHandler.status, `${what}: ${a} / ${b}`);
      assert.equal(viaServer.headers.get("content-type"), viaHandler.headers.get("content-type"), what);
      assert.deepEqual(JSON.parse(a), JSON.parse(b), what);
    }
    // Too large: refused before it is read whole.
    const huge = await fetch(u("/v1/stream/todos/touch/wait"), { method: "POST", headers: JSON_HEADERS, body: " ".repeat(10 * 1024 * 1024 + 1) });
    assert.equal(huge.status, 413);
    assert.equal((await huge.json()).error.code, "ERR_PAYLOAD_TOO_LARGE");
  } finally {
    await server.close();
  }
});

test("at its descriptor limit the Node server keeps serving what it holds, and says so once", async () => {
  const net = await import("node:net");
  const { spawn: spawnChild } = await import("node:child_process");
  const data = tempDir();
  const child = spawnChild("bash", ["-c", `ulimit -n 256 && exec "${process.execPath}" bin/durable-touch.mjs serve --port 0 --data "${data}"`], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  const sockets = [];
  try {
    const url = await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no URL: ${out} ${err}`)), 20_000);
      child.stdout.on("data", () => {
        const m = /listening on (http:\/\/[^ ]+)/.exec(out);
        if (m) {
          clearTimeout(t);
          resolve(m[1]);
        }
      });
    });
    const u = (p) => `${url}${p}`;
    await createTouchStream(u);
    const { cursor } = await (await fetch(u("/v1/stream/todos/touch/meta"))).json();
    const body = JSON.stringify({ cursor, keyIds: [keys.tableKeyId("public.todos")], interestMode: "coarse", timeoutMs: 30_000 });
    const { port } = new URL(url);
    const closed = [];
    for (let i = 0; i < 300; i++) {
      const s = net.connect(Number(port), "127.0.0.1");
      s.on("error", () => {});
      s.on("close", () => closed.push(i));
      s.write(`POST /v1/stream/todos/touch/wait HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      sockets.push(s);
    }
    // The watch looks every 2 s.
    const deadline = Date.now() + 10_000;
    while (!/descriptors/.test(err) && Date.now() < deadline) await sleep(100);
    assert.match(err, /at this process's limit of 256 descriptors/);
    assert.ok(closed.length > 0, "past the limit, connections are closed unanswered");
    await sleep(2_500);
    assert.equal(err.match(/descriptors/g).length, 1, `said once: ${err}`);
    // Connections go: it serves again.
    for (const s of sockets.splice(0, 150)) s.destroy();
    await sleep(200);
    const meta = await fetch(u("/v1/stream/todos/touch/meta"));
    assert.equal(meta.status, 200);
    assert.ok((await meta.json()).activeWaiters > 0, "the waits it held are still parked");
  } finally {
    for (const s of sockets) s.destroy();
    child.kill("SIGKILL");
  }
}, { skip: isBun, timeout: 60_000 });
