// The native wait listener (`nativeWaits`): a touch wait sent to it gets the same answer, byte
// for byte, as the JS server behind it gives the same request; everything else it passes on
// gives the JS server's answer; and the waits it parks behave as the server's (a touch wakes
// them, a client hanging up aborts them, close answers them).
import assert from "node:assert/strict";
import net from "node:net";
import { test, dt, tempDir, sleep, isBun } from "./harness.mjs";
import { startServer } from "../apps/server/server.mjs";

const { keys } = dt;
const TEMPLATE = { entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] };
const insert = (id, tenantId) => ({ type: "public.todos", key: String(id), value: { id: String(id), tenantId }, headers: { operation: "insert" } });

async function setup() {
  const server = await startServer({ dataDir: tempDir(), port: 0, nativeWaits: true });
  const u = (p) => `${server.handlerUrl}${p}`;
  const json = { "content-type": "application/json" };
  for (const name of ["todos", "plain"]) assert.equal((await fetch(u(`/v1/stream/${name}`), { method: "PUT", headers: json })).status, 201);
  const profile = { profile: { kind: "state-protocol", touch: { enabled: true } } };
  assert.equal((await fetch(u("/v1/stream/todos/_profile"), { method: "POST", headers: json, body: JSON.stringify(profile) })).status, 200);
  const act = await (await fetch(u("/v1/stream/todos/touch/templates/activate"), { method: "POST", headers: json, body: JSON.stringify({ templates: [TEMPLATE] }) })).json();
  const tpl = act.activated[0].templateId;
  const { cursor } = await (await fetch(u("/v1/stream/todos/touch/meta"))).json();
  const native = server.listener.port;
  const js = Number(new URL(server.handlerUrl).port);
  assert.notEqual(native, js);
  return { server, u, tpl, cursor, native, js };
}

/**
 * Sends `bytes` on a new connection; resolves with the responses read (status, headers, body
 * as text) once `count` are complete, the connection closes, or (with `quietMs`) nothing more
 * arrived for that long.
 */
function raw(port, bytes, { count = 1, onOpen, quietMs = 0 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    let buf = Buffer.alloc(0);
    const out = [];
    let quiet = null;
    const done = () => {
      clearTimeout(quiet);
      sock.destroy();
      resolve(out);
    };
    const rearm = () => {
      if (!quietMs) return;
      clearTimeout(quiet);
      quiet = setTimeout(done, quietMs);
    };
    rearm();
    const parse = () => {
      for (;;) {
        const i = buf.indexOf("\r\n\r\n");
        if (i < 0) return;
        const [line, ...lines] = buf.subarray(0, i).toString("latin1").split("\r\n");
        const headers = {};
        for (const h of lines) headers[h.slice(0, h.indexOf(":")).trim().toLowerCase()] = h.slice(h.indexOf(":") + 1).trim();
        const status = Number(line.split(" ")[1]);
        let rest = buf.subarray(i + 4);
        let body;
        if (status < 200) {
          body = "";
        } else if (headers["transfer-encoding"] === "chunked") {
          const parts = [];
          let at = 0;
          for (;;) {
            const eol = rest.indexOf("\r\n", at);
            if (eol < 0) return;
            const size = parseInt(rest.subarray(at, eol).toString(), 16);
            if (rest.length < eol + 2 + size + 2) return;
            if (size === 0) {
              const end = rest.indexOf("\r\n\r\n", eol);
              if (end < 0) return;
              rest = rest.subarray(end + 4);
              break;
            }
            parts.push(rest.subarray(eol + 2, eol + 2 + size));
            at = eol + 2 + size + 2;
          }
          body = Buffer.concat(parts).toString();
        } else {
          const len = Number(headers["content-length"] ?? 0);
          if (rest.length < len) return;
          body = rest.subarray(0, len).toString();
          rest = rest.subarray(len);
        }
        out.push({ status, headers, body });
        buf = rest;
        if (out.length >= count) return done();
      }
    };
    sock.on("data", (d) => {
      rearm();
      buf = Buffer.concat([buf, d]);
      parse();
    });
    sock.on("close", done);
    sock.on("error", () => {});
    sock.on("connect", () => onOpen?.(sock));
    sock.write(bytes);
  });
}

/** What a client reads of a response: status, type, location and body. */
const seen = (r) => ({ status: r.status, type: r.headers["content-type"], location: r.headers.location, body: r.body });

function request(path, body, { method = "POST", headers = {}, host = "127.0.0.1" } = {}) {
  const bytes = body === null ? Buffer.alloc(0) : Buffer.isBuffer(body) ? body : Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
  const lines = [`${method} ${path} HTTP/1.1`, ...(host === null ? [] : [`Host: ${host}`]), ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  if (body !== null) lines.push(`Content-Length: ${bytes.length}`);
  return Buffer.concat([Buffer.from(lines.join("\r\n") + "\r\n\r\n"), bytes]);
}

test("a wait gets the same answer from the native listener as from the JS server, whoever answers it", async () => {
  const { server, tpl, cursor, native, js } = await setup();
  try {
    const tk = keys.tableKey("public.todos");
    const wk = keys.watchKey(tpl, ["t1"]);
    const W = "/v1/stream/todos/touch/wait";
    const cases = [
      // Answered by the engine through the listener.
      [W, { cursor, keys: [tk], timeoutMs: 0 }],
      [W, { cursor: "now", keys: [tk, tk, wk], templateIdsUsed: [tpl], timeoutMs: 0 }],
      [W, { cursor, keyIds: [1, 2, 3], exact: false, timeoutMs: 0, interestMode: "coarse" }],
      [W, { cursor: `${"f".repeat(16)}:0`, keys: [tk], timeoutMs: 0 }],
      [W, { cursor, keys: [tk], timeoutMs: -5, stream: "other", signal: 1 }],
      [W, Buffer.from("\uFEFF" + JSON.stringify({ cursor, keys: [tk], timeoutMs: 0 }))],
      ["/v1/stream/tod%6Fs/touch/wait//?x=1", { cursor, keys: [tk], timeoutMs: 0 }],
      [W, `{"cursor":"${cursor}","keys":["${tk}"],"timeoutMs":0,"x":${"[".repeat(999)}${"]".repeat(999)}}`],
      // Refused by the engine or the route: the JS server answers.
      [W, { cursor: "zzz", keys: [tk], timeoutMs: 0 }],
      [W, { cursor, keys: [], timeoutMs: 0 }],
      [W, { cursor, keyIds: [1, 1], timeoutMs: 0 }],
      [W, { cursor, keys: [tk], interestMode: "x" }],
      [W, { cursor, keys: [tk], timeoutMs: "1" }],
      [W, []],
      [W, null],
      [W, "{"],
      [W, ""],
      [W, Buffer.from([0xff, 0x7b, 0x7d])],
      [W, `{"cursor":"${cursor}","keys":["${tk}"],"timeoutMs":0,"x":${"[".repeat(1001)}${"]".repeat(1001)}}`],
      [W, Buffer.from("\uFEFF\uFEFF" + JSON.stringify({ cursor, keys: [tk], timeoutMs: 0 }))],
      ["/v1/stream/nope/touch/wait", { cursor, keys: [tk], timeoutMs: 0 }],
      ["/v1/stream/plain/touch/wait", { cursor, keys: [tk], timeoutMs: 0 }],
      ["/v1/stream/todos/%2e%2e/todos/touch/wait", { cursor, keys: [tk], timeoutMs: 0 }],
      ["/v1/stream/%E0%A4%A/touch/wait", { cursor, keys: [tk], timeoutMs: 0 }],
      [W, { cursor, keys: [tk], timeoutMs: 0 }, { host: "a b" }],
      [W, { cursor, keys: [tk], timeoutMs: 0 }, { method: "PUT" }],
      [W, null, { method: "GET" }],
      // Larger than the listener reads itself: passed on whole, still answered.
      [W, `{"cursor":"${cursor}","keys":["${tk}"],"timeoutMs":0}${" ".repeat(70_000)}`],
      ["/v1/stream/todos/touch/meta", null, { method: "GET" }],
      ["/v1/nothing", null, { method: "GET" }],
    ];
    const before = server.listener.stats();
    for (const [path, body, opts] of cases) {
      const bytes = request(path, body, opts);
      const [a] = await raw(native, bytes);
      const [b] = await raw(js, bytes);
      assert.ok(a && b, `${path} ${String(body).slice(0, 80)}: an answer from both`);
      assert.deepEqual(seen(a), seen(b), `${path} ${JSON.stringify(body)?.slice(0, 120)}`);
    }
    const after = server.listener.stats();
    // The first eight were answered natively; the rest passed on.
    assert.equal(after.answered - before.answered, 8);
    assert.equal(after.passed - before.passed, cases.length - 8);
  } finally {
    await server.close();
  }
});

test("requests the listener does not read itself reach the JS server as they were sent", async () => {
  const { server, cursor, native, js } = await setup();
  try {
    const tk = keys.tableKey("public.todos");
    const body = JSON.stringify({ cursor, keys: [tk], timeoutMs: 0 });
    const chunked = `POST /v1/stream/todos/touch/wait HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const expect = `POST /v1/stream/todos/touch/wait HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const http10 = `POST /v1/stream/todos/touch/wait HTTP/1.0\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const big = `GET /v1/stats HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`;
    // (Bun.serve answers some of these by closing the connection: then both do.)
    for (const bytes of [chunked, expect, http10, "GARBAGE\r\n\r\n", big]) {
      const count = bytes === expect ? 2 : 1;
      const a = await raw(native, bytes, { count, quietMs: 1000 });
      const b = await raw(js, bytes, { count, quietMs: 1000 });
      assert.deepEqual(
        a.map((r) => seen(r)),
        b.map((r) => seen(r)),
        bytes.slice(0, 60),
      );
      if (!isBun) assert.ok(a.length >= 1, bytes.slice(0, 60));
    }
    // Pipelined on one connection, in order: a wait, a meta read, a wait passed on, a wait.
    const wait = request("/v1/stream/todos/touch/wait", { cursor, keys: [tk], timeoutMs: 0 });
    const meta = request("/v1/stream/todos/touch/meta", null, { method: "GET" });
    const bad = request("/v1/stream/todos/touch/wait", { cursor: "zzz", keys: [tk] });
    const all = Buffer.concat([wait, meta, bad, wait]);
    const a = await raw(native, all, { count: 4 });
    const b = await raw(js, all, { count: 4 });
    assert.equal(a.length, 4);
    // The meta read counts the waits before it (which differ between the two runs): its
    // cursor is compared, not its counters.
    const strip = (r) => (r.body.includes('"mode"') ? { ...seen(r), body: JSON.parse(r.body).cursor } : seen(r));
    // Our server on Bun.serve sometimes closes a connection that pipelines these four without
    // answering any; the listener answers them (statuses below) on both runtimes.
    if (!isBun) assert.deepEqual(a.map(strip), b.map(strip));
    assert.deepEqual(
      a.map((r) => r.status),
      [200, 200, 400, 200],
    );
  } finally {
    await server.close();
  }
});

test("waits parked at the listener wake on a touch, abort when their client hangs up, and are answered at close", async () => {
  const { server, u, tpl, cursor, native } = await setup();
  const wk = keys.watchKey(tpl, ["t1"]);
  const waiters = async () => (await (await fetch(u("/v1/stream/todos/touch/meta"))).json()).activeWaiters;
  try {
    // A touch wakes a parked wait; its reply is the one the JS path gives (same flush).
    const body = { cursor, keys: [wk], templateIdsUsed: [tpl], timeoutMs: 20_000 };
    const woken = raw(native, request("/v1/stream/todos/touch/wait", body));
    const viaJs = fetch(u("/v1/stream/todos/touch/wait"), { method: "POST", body: JSON.stringify(body) }).then((r) => r.text());
    for (let i = 0; i < 200 && (await waiters()) < 2; i++) await sleep(10);
    assert.equal(server.listener.stats().waiting, 1);
    await fetch(u("/v1/stream/todos"), { method: "POST", body: JSON.stringify(insert(1, "t1")) });
    const [reply] = await woken;
    assert.equal(reply.status, 200);
    assert.equal(JSON.parse(reply.body).touched, true);
    assert.equal(reply.body, await viaJs);

    // A client that hangs up aborts its wait: the engine no longer holds it.
    const next = JSON.parse(reply.body).cursor;
    const socket = await new Promise((resolve) => {
      raw(native, request("/v1/stream/todos/touch/wait", { ...body, cursor: next }), { onOpen: resolve });
    });
    for (let i = 0; i < 200 && server.listener.stats().waiting < 1; i++) await sleep(10);
    assert.equal(await waiters(), 1);
    socket.destroy();
    for (let i = 0; i < 200 && (await waiters()) > 0; i++) await sleep(10);
    assert.equal(await waiters(), 0);
    assert.equal(server.listener.stats().waiting, 0);

    // close answers a parked wait (touched: false) before the listener closes.
    const parked = raw(native, request("/v1/stream/todos/touch/wait", { ...body, cursor: next }));
    for (let i = 0; i < 200 && (await waiters()) < 1; i++) await sleep(10);
    await server.close();
    const [last] = await parked;
    assert.equal(last?.status, 200);
    assert.equal(JSON.parse(last.body).touched, false);
  } finally {
    await server.close();
  }
});
