// Bad and hostile input over real HTTP, against the server as `npm start` runs it (a child
// process: Node's http under node, Bun.serve under bun): each case gets a 4xx with a coded
// JSON error, and while a hostile request is in flight the server keeps answering other
// clients (GET /v1/stats within 100 ms).
import assert from "node:assert/strict";
import net from "node:net";
import { spawn } from "node:child_process";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test, tempDir, runtime } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const JSON_HEADERS = { "content-type": "application/json" };

/** The CLI server on a free port; resolves { url, port, stop }. */
async function startChild() {
  const child = spawn(process.execPath, [join(root, "bin", "durable-touch.mjs"), "--port", "0", "--data", tempDir()], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  const url = await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^\s]+)/);
      if (m) resolve(m[1]);
    });
    child.on("exit", (c) => reject(new Error(`server exited early (${c}): ${out}`)));
  });
  const exited = new Promise((r) => child.on("exit", r));
  return {
    url,
    port: Number(new URL(url).port),
    async stop() {
      child.kill("SIGINT");
      await exited;
    },
  };
}

/** One request written as raw bytes; resolves { status, body } or null when the server closed without answering. */
function raw(port, text) {
  return new Promise((resolve, reject) => {
    // Written without a half-close: Bun.serve drops a request whose client has already ended.
    const socket = net.connect(port, "127.0.0.1", () => socket.write(text));
    const chunks = [];
    socket.on("data", (d) => chunks.push(d));
    socket.on("error", reject);
    socket.on("close", () => {
      const all = Buffer.concat(chunks).toString("latin1");
      if (!all) return resolve(null);
      const split = all.indexOf("\r\n\r\n");
      resolve({ status: Number(all.slice(9, 12)), body: all.slice(split + 4) });
    });
  });
}

/**
 * A chunked POST of a body that never ends: `[1]`, then spaces, 1 MiB a chunk, sent until the
 * server answers, the server closes the connection, or `mb` MiB are out; no terminating chunk
 * follows. Every prefix of the body is an append of one row, so a server that stored any of it
 * shows in the stream; and as the body has no end, only a server that counts the bytes as they
 * arrive and refuses them at its limit answers at all (one that waits for the whole body never
 * does). How much was sent before the answer depends on the machine's load, not on the server
 * (on a busy machine the runtime may read the rest ahead of the handler), so it is only
 * reported. Resolves { status, body, sentMb } once a whole answer has arrived, or null when
 * the server closed without one; rejects when nothing came within `waitMs`.
 */
function chunkedPost(port, path, mb, waitMs = 60_000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    const got = [];
    let sent = 0;
    let settled = false;
    const settle = (answer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(answer && { ...answer, sentMb: sent >> 20 });
    };
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      socket.destroy();
      reject(new Error(`no answer within ${waitMs} ms of a never-ending chunked body (${sent >> 20} MiB sent)`));
    }, waitMs);
    socket.on("data", (d) => {
      got.push(d);
      const answer = parseAnswer(Buffer.concat(got));
      if (answer?.complete) settle(answer);
    });
    // A reset may follow the answer; what arrived before it is judged on close.
    socket.on("error", () => {});
    socket.on("close", () => settle(got.length ? parseAnswer(Buffer.concat(got)) : null));
    socket.on("connect", () => {
      socket.write(`POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
      const spaces = Buffer.alloc(1 << 20, 0x20);
      const first = Buffer.from(spaces);
      first.write("[1]");
      const more = () => {
        while (!settled && !socket.destroyed && sent < mb << 20) {
          const chunk = sent === 0 ? first : spaces;
          sent += chunk.length;
          socket.write(`${chunk.length.toString(16)}\r\n`);
          socket.write(chunk);
          if (!socket.write("\r\n")) return socket.once("drain", more);
        }
      };
      more();
    });
  });
}

/** An HTTP/1.1 answer read off a socket: { status, body, complete }, or null before its head is in. */
function parseAnswer(bytes) {
  const text = bytes.toString("latin1");
  const split = text.indexOf("\r\n\r\n");
  if (split < 0) return null;
  const head = text.slice(0, split);
  let body = text.slice(split + 4);
  const status = Number(text.slice(9, 12));
  const length = /\r\ncontent-length: *(\d+)/i.exec(head);
  let complete = status === 204 || status === 304 || (length !== null && body.length >= Number(length[1]));
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
    let plain = "";
    for (let at = 0; ; ) {
      const eol = body.indexOf("\r\n", at);
      if (eol < 0) break;
      const size = parseInt(body.slice(at, eol), 16);
      if (size === 0) complete = true;
      if (!(size > 0) || body.length < eol + 2 + size) break;
      plain += body.slice(eol + 2, eol + 2 + size);
      at = eol + 4 + size;
    }
    body = plain;
  }
  return { status, body, complete };
}

/** What a stream holds: its end offset and its rows. */
async function contents(u, name) {
  const r = await fetch(u(`/v1/stream/${name}?offset=-1&limit=100000`));
  assert.equal(r.status, 200);
  return { end: r.headers.get("stream-end-offset"), rows: await r.json() };
}

const rawGet = (method, path, host = "localhost") => `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;

async function setup(u) {
  let r = await fetch(u("/v1/stream/todos"), { method: "PUT", headers: JSON_HEADERS });
  assert.ok(r.status === 201 || r.status === 200);
  r = await fetch(u("/v1/stream/todos/_profile"), { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ profile: { kind: "state-protocol", touch: { enabled: true } } }) });
  assert.equal(r.status, 200);
  for (const name of ["plain", "strings", "slow"]) {
    r = await fetch(u(`/v1/stream/${name}`), { method: "PUT", headers: JSON_HEADERS });
    assert.ok(r.status === 201 || r.status === 200);
  }
}

const deepArray = (n) => "[".repeat(n) + "]".repeat(n);
const deepObject = (n) => '{"a":'.repeat(n) + "1" + "}".repeat(n);
const keys = (n) => Array.from({ length: n }, (_, i) => `k${i}`);
const hex = (n) => Array.from({ length: n }, (_, i) => i.toString(16).padStart(16, "0"));
const TEMPLATE = { entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] };

// [label, (ctx) => Promise<{ status, body }>, status, code, message?]. `body` is text;
// `code` null = no JSON error expected (a 2xx), "empty" = no body at all.
function cases() {
  const post = (path, body, headers = JSON_HEADERS) => (c) => fetch(c.u(path), { method: "POST", headers, body });
  const wait = (body) => post("/v1/stream/todos/touch/wait", JSON.stringify({ cursor: "now", timeoutMs: 0, ...body }));
  const viaRaw = (text) => (c) => raw(c.port, text);
  const tinyRecords = "[" + new Array(5_000_000).fill("0").join(",") + "]";
  const bun = runtime === "bun";
  return [
    // B2: size checks before per-element work.
    ["a wait with 50,000 keys", wait({ keys: keys(50_000) }), 400, "ERR_INVALID_ARGUMENT", "wait.keys too large (max 1024)"],
    ["a wait with 40,000 templateIdsUsed", wait({ keys: ["a"], templateIdsUsed: hex(40_000) }), 400, "ERR_INVALID_ARGUMENT", "wait.templateIdsUsed too large (max 1024)"],
    ["a wait with 1,000 declared templates", wait({ keys: ["a"], declareTemplates: Array(1000).fill(TEMPLATE) }), 400, "ERR_INVALID_ARGUMENT", "wait.declareTemplates too large (max 256)"],
    ["an activation of 1,000 templates", post("/v1/stream/todos/touch/templates/activate", JSON.stringify({ templates: Array(1000).fill(TEMPLATE) })), 400, "ERR_INVALID_ARGUMENT", "activate.templates too large (max 256)"],
    // Bodies of more values than any valid request holds are refused before they are parsed.
    ["a wait with 100,000 declared templates", wait({ keys: ["a"], declareTemplates: Array(100_000).fill(TEMPLATE) }), 413, "ERR_PAYLOAD_TOO_LARGE", "wait body is too large (more than 65536 JSON values)"],
    ["a profile update with 1M values", post("/v1/stream/todos/_profile", JSON.stringify({ profile: { kind: "state-protocol", touch: { enabled: true } }, x: new Array(1_000_000).fill(0) })), 413, "ERR_PAYLOAD_TOO_LARGE"],
    ["a 10 MB body of 5M tiny records", post("/v1/stream/plain", tinyRecords), 413, "ERR_PAYLOAD_TOO_LARGE", "append of more than 100000 rows exceeds the limit of 100000 rows per call"],
    ["100,001 records", post("/v1/stream/plain", JSON.stringify(new Array(100_001).fill(1))), 413, "ERR_PAYLOAD_TOO_LARGE", "append of 100001 rows exceeds the limit of 100000 rows per call"],
    // Brackets, commas and escaped quotes inside strings are not structure (the 9 spaces put
    // an escape's backslash on the last byte of the scanner's first 256 KiB slice).
    ["30,000 records of strings full of brackets and escapes", post("/v1/stream/strings", `[${" ".repeat(9)}${new Array(30_000).fill('"\\\\\\"[{,"').join(",")}]`), 204, null],
    // B4: exactly 1,024 keys is within the cap.
    ["a wait with exactly 1,024 keys", wait({ keys: keys(1024) }), 200, null],
    ["a wait with 1,024 keys and a template id", wait({ keys: keys(1024), templateIdsUsed: hex(1) }), 200, null],
    // B3: client mistakes that were 500s.
    ["JSON nested 6,000 levels (arrays)", post("/v1/stream/plain", deepArray(6000)), 400, "ERR_INVALID_ARGUMENT", "append body is nested too deeply (max 1000 levels)"],
    ["JSON nested 6,000 levels (objects)", post("/v1/stream/todos", deepObject(6000)), 400, "ERR_INVALID_ARGUMENT", "append body is nested too deeply (max 1000 levels)"],
    ["JSON nested 5M levels (10 MB)", post("/v1/stream/plain", deepArray(5_000_000)), 400, "ERR_INVALID_ARGUMENT"],
    ["a wait body nested 6,000 levels", post("/v1/stream/todos/touch/wait", `{"keys":["a"],"cursor":"now","x":${deepArray(6000)}}`), 400, "ERR_INVALID_ARGUMENT", "wait body is nested too deeply (max 1000 levels)"],
    ["TRACE", viaRaw(rawGet("TRACE", "/v1/stream/todos")), 405, "ERR_METHOD_NOT_ALLOWED"],
    ["CONNECT", viaRaw(rawGet("CONNECT", "/v1/stats")), 405, "ERR_METHOD_NOT_ALLOWED"],
    // Bun's parser closes the connection on a method it does not know, before any handler.
    ["TRACK", viaRaw(rawGet("TRACK", "/v1/stats")), bun ? null : 405, bun ? "closed" : "ERR_METHOD_NOT_ALLOWED"],
    ["Host: a b c", viaRaw(rawGet("GET", "/v1/stats", "a b c")), 400, "ERR_INVALID_ARGUMENT", "invalid Host header"],
    ["Host: [::1", viaRaw(rawGet("GET", "/v1/stats", "[::1")), 400, "ERR_INVALID_ARGUMENT", "invalid Host header"],
    ["Host: user@host", viaRaw(rawGet("GET", "/v1/stats", "u@x")), 400, "ERR_INVALID_ARGUMENT", "invalid Host header"],
    ["a good Host with a port", viaRaw(rawGet("GET", "/v1/stats", "127.0.0.1:8787")), 200, null],
    // B4: smaller ones.
    ["invalid UTF-8 in a JSON append", post("/v1/stream/plain", Buffer.from([0x5b, 0x22, 0xff, 0x22, 0x5d])), 400, "ERR_INVALID_ARGUMENT", "append body must be valid UTF-8"],
    ["invalid UTF-8 in a wait body", post("/v1/stream/todos/touch/wait", Buffer.from('{"keys":["\xc3\x28"],"cursor":"now"}', "latin1")), 400, "ERR_INVALID_ARGUMENT", "wait body must be valid UTF-8"],
    ["memory.bucketMs: 1e308", async (c) => {
      // Accepted as the reference accepts it; the journal runs with a bucket of a minute.
      const profile = { kind: "state-protocol", touch: { enabled: true, memory: { bucketMs: 1e308 } } };
      const r = await fetch(c.u("/v1/stream/slow/_profile"), { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ profile }) });
      assert.equal(r.status, 200);
      assert.equal((await r.json()).profile.touch.memory.bucketMs, 1e308);
      const meta = await fetch(c.u("/v1/stream/slow/touch/meta"));
      assert.equal((await meta.clone().json()).bucketMs, 60_000);
      return meta;
    }, 200, null],
    // A body without a declared length is counted as it arrives and refused at the limit,
    // not buffered whole first (Bun's `arrayBuffer()` would read up to its own cap): a body
    // that never ends is answered with the limit's 413, and none of it is stored.
    ["a chunked 200 MB append", async (c) => {
      const before = await contents(c.u, "plain");
      const r = await chunkedPost(c.port, "/v1/stream/plain", 200);
      assert.deepEqual(await contents(c.u, "plain"), before, `the refused body was stored (${r?.sentMb} MiB sent)`);
      return r;
    }, 413, "ERR_PAYLOAD_TOO_LARGE", "body too large (max 10485760)"],
    ["a 4 KB stream name", (c) => fetch(c.u(`/v1/stream/${"n".repeat(4096)}`), { method: "PUT", headers: JSON_HEADERS }), 400, "ERR_INVALID_ARGUMENT", "stream name is longer than 1024 bytes"],
    // Both runtimes' HTTP parsers refuse a request line this long before any handler runs;
    // Node lets us answer it (clientError), Bun answers itself with an empty body.
    ["a 100 KB stream name", (c) => fetch(c.u(`/v1/stream/${"n".repeat(100_000)}`), { method: "PUT", headers: JSON_HEADERS }), 431, bun ? "empty" : "ERR_HEADERS_TOO_LARGE"],
  ];
}

async function check(label, res, status, code, message) {
  if (code === "closed") return assert.equal(res, null, `${label}: the connection is closed without an answer`);
  assert.ok(res, `${label}: no answer`);
  const text = typeof res.text === "function" ? await res.text() : res.body;
  assert.equal(res.status, status, `${label}: ${text.slice(0, 200)}`);
  if (code === null) return;
  if (code === "empty") return assert.equal(text, "", label);
  const body = JSON.parse(text);
  assert.equal(body.error.code, code, `${label}: ${text.slice(0, 200)}`);
  if (message) assert.equal(body.error.message, message, label);
}

test("bad and hostile requests get 4xx answers with coded JSON errors, and the server keeps serving others", async () => {
  const server = await startChild();
  const c = { port: server.port, u: (p) => `${server.url}${p}` };
  try {
    await setup(c.u);
    for (const [label, send, status, code, message] of cases()) {
      // Other clients are answered while the request is in flight.
      let done = false;
      const sent = send(c).finally(() => (done = true));
      let slowest = 0;
      let polls = 0;
      while (!done || polls === 0) {
        const t0 = performance.now();
        const r = await fetch(c.u("/v1/stats"));
        assert.equal(r.status, 200);
        await r.arrayBuffer();
        slowest = Math.max(slowest, performance.now() - t0);
        polls++;
        await new Promise((r) => setTimeout(r, 5));
      }
      await check(label, await sent, status, code, message);
      // Blocked, the server would answer only once the hostile request ends (seconds for the
      // large ones); the bound is loose so that a loaded machine's pauses do not count.
      assert.ok(slowest < 1500, `${label}: GET /v1/stats took ${slowest.toFixed(0)} ms while it was in flight`);
    }
    // The server is intact: it still takes a normal write and read.
    const r = await fetch(c.u("/v1/stream/plain"), { method: "POST", headers: JSON_HEADERS, body: "[1,2,3]" });
    assert.equal(r.status, 204);
    assert.deepEqual(await (await fetch(c.u("/v1/stream/plain?offset=-1"))).json(), [1, 2, 3]);
    const strings = await (await fetch(c.u("/v1/stream/strings?offset=-1&limit=100000"))).json();
    assert.deepEqual([strings.length, new Set(strings).size, strings[0]], [30_000, 1, '\\"[{,']);
  } finally {
    await server.stop();
  }
}, { timeout: 120_000 });
