// The Live HTTP server on the native core: a subset of the reference server's routes, backed by
// Store + TouchEngine on an embedded SQLite file. Runs on Node's `http` or on Bun.serve.
//
//   PUT  /v1/stream/:name                          create (Content-Type sets the stream's type)
//   POST /v1/stream/:name                          append a JSON record or an array of them
//                                                  (Stream-Expected-Offset: n → 409 on mismatch)
//   GET  /v1/stream/:name?offset=&limit=           read rows after `offset` ("-1" = start)
//   DELETE /v1/stream/:name                        delete
//   GET|POST /v1/stream/:name/_profile             the stream profile (state-protocol + touch)
//   POST /v1/stream/:name/touch/templates/activate
//   GET  /v1/stream/:name/touch/meta[?settle=flush&timeoutMs=]
//   POST /v1/stream/:name/touch/wait
//   GET  /v1/stats
//
// Errors are JSON `{ error: { code, message } }` with the native error code (ERR_*); a client
// that disconnects aborts its wait; close() answers pending waits and closes the store.
//
// Fan-out over NATS JetStream (issue 28; `nats` option): a *writer* is this server with its
// engine publishing its journals' flushes and beats; an *edge* (`edge: true`) holds no data
// (a TouchEngine over Store.open(":memory:") mirroring the writer's journals) and serves the
// touch wait and meta routes (and its own /v1/stats) with the writer's cursors. Every other
// request, and a wait the engine refuses (declareTemplates), is answered 307 to the writer
// (Location: the writer's URL + the same path and query, so a client following redirects
// resends it there with its method and body), with `{ error: { code: "ERR_EDGE_READ_ONLY",
// message, writer } }`; 503 with that code while the writer's URL is not known.
//
// With `nativeWaits`, the port is the native module's (`WaitListener`): it answers touch waits
// itself, without entering JavaScript, and passes every other request (and a wait the engine
// refuses, which this handler then answers) to this server, listening on loopback.
import { createRequire } from "node:module";
import { mkdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { encodeOffset, decodeOffset } from "./offsets.mjs";
import { validateStateProtocolRecord } from "./state-protocol.mjs";
import { MAX_JSON_DEPTH, scanJson } from "./json-body.mjs";
import { switchedOff } from "../../lib/settings.mjs";

const require = createRequire(import.meta.url);
const { Store, TouchEngine, WaitListener } = require("../../index.js");

const STATUS = {
  ERR_INVALID_ARGUMENT: 400,
  ERR_INVALID_TOUCH_CONFIG: 400,
  ERR_INVALID_CURSOR: 400,
  ERR_STREAM_NOT_FOUND: 404,
  ERR_TOUCH_NOT_ENABLED: 404,
  ERR_STREAM_EXPIRED: 404,
  ERR_STREAM_EXISTS: 409,
  ERR_SEQ_MISMATCH: 409,
  ERR_PAYLOAD_TOO_LARGE: 413,
  ERR_CLOSED: 503,
  // An edge's refusal: 307 to the writer, or this while its URL is unknown (see readOnly).
  ERR_EDGE_READ_ONLY: 503,
};

class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** JSON text, bigints as strings. */
const jsonText = (body) => JSON.stringify(body, (_, v) => (typeof v === "bigint" ? v.toString() : v));

/**
 * A reply as plain data (`{ status, body, headers }`, body a string or null): what the Node wait
 * path writes without fetch objects; `toResponse` makes the Fetch API's of it.
 */
const reply = (status, body, headers = {}) => ({ status, body: jsonText(body), headers: { "content-type": "application/json", ...headers } });
const toResponse = (r) => new Response(r.body, { status: r.status, headers: r.headers });
const json = (status, body, headers = {}) => toResponse(reply(status, body, headers));

/**
 * An edge's answer to what only the writer serves: 307 to `writer` + the request's path and
 * query (a temporary redirect keeps the method and body: `fetch` and `curl -L` resend the
 * request there), or 503 while the writer's URL is unknown. Both carry ERR_EDGE_READ_ONLY and
 * `writer` (null when unknown).
 */
function readOnlyReply(url, writer, unheard = null) {
  const why = unheard === null ? "this edge serves touch waits and meta only" : `this edge has not heard of stream ${JSON.stringify(unheard)} from its writer yet`;
  if (!writer) {
    const message = `${why}, and does not know the writer's URL yet (no beat from it heard, no --writer given)`;
    return reply(503, { error: { code: "ERR_EDGE_READ_ONLY", message, writer: null } });
  }
  const base = writer.replace(/\/+$/, "");
  const message = `${why}; send this to the writer at ${base}`;
  return reply(307, { error: { code: "ERR_EDGE_READ_ONLY", message, writer: base } }, { location: `${base}${url.pathname}${url.search}` });
}

const readOnly = (url, writer, unheard = null) => toResponse(readOnlyReply(url, writer, unheard));

function errorReply(e) {
  const headers = e?.code === "ERR_SEQ_MISMATCH" && e.expectedNext !== undefined ? { "stream-expected-offset": String(e.expectedNext) } : {};
  if (e instanceof HttpError) return reply(e.status, { error: { code: e.code, message: e.message } }, headers);
  const status = STATUS[e?.code] ?? 500;
  const code = status === 500 ? (e?.code ?? "ERR_INTERNAL") : e.code;
  return reply(status, { error: { code, message: String(e?.message ?? e) } }, headers);
}

const errorResponse = (e) => toResponse(errorReply(e));

/**
 * The most payload bytes one read answers (at least one row), the reference's
 * `DS_READ_MAX_BYTES` default: a reader pages on through `stream-next-offset`, and concurrent
 * readers of large rows cannot make the server hold pages of the store's 64 MiB read cap.
 */
const READ_MAX_BYTES = 1024 * 1024;

/** The largest offset a stream holds (SQLite's 64-bit integers). */
const MAX_OFFSET = (1n << 63n) - 1n;

const badRequest = (message) => new HttpError(400, "ERR_INVALID_ARGUMENT", message);

function normalizeContentType(v) {
  if (!v) return null;
  const base = v.split(";")[0]?.trim().toLowerCase();
  return base || null;
}

/** The body a Node request arrived with, handed to the handler as is (see serveNode). */
const NODE_BODY = Symbol("durable-touch.nodeBody");

async function readBody(req, limit) {
  const tooLarge = () => new HttpError(413, "ERR_PAYLOAD_TOO_LARGE", `body too large (max ${limit})`);
  const declared = req.headers.get("content-length");
  if (Number(declared ?? "0") > limit) throw tooLarge();
  let buf = req[NODE_BODY];
  if (buf === undefined) {
    // A declared length bounds what the runtime reads; a chunked body is counted as it
    // arrives and refused at the limit (`arrayBuffer()` would first buffer all of it).
    buf = declared !== null || req.body === null ? new Uint8Array(await req.arrayBuffer()) : await readCapped(req.body, limit, tooLarge);
  }
  if (buf.byteLength > limit) throw tooLarge();
  return buf;
}

/** Reads `stream` whole, or throws `tooLarge()` (and cancels it) once it passes `limit` bytes. */
async function readCapped(stream, limit, tooLarge) {
  const reader = stream.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    // Runtimes' own servers give Uint8Arrays; a Request built by an embedder may carry any
    // stream.
    const bytes = ArrayBuffer.isView(value)
      ? new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
      : value instanceof ArrayBuffer
        ? new Uint8Array(value)
        : null;
    if (bytes === null) {
      reader.cancel().catch(() => {});
      throw badRequest("request body chunks must be bytes");
    }
    size += bytes.byteLength;
    if (size > limit) {
      reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(bytes);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/**
 * Most JSON values in the body of a wait, an activation or a profile update (the largest valid
 * wait holds about 6,000): parsing more would hold the event loop for tens of milliseconds.
 */
const MAX_REQUEST_VALUES = 65_536;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A JSON body, checked before it is parsed, so that none of these costs a parse: a top-level
 * array of more than `maxItems` elements is a 413 (`tooMany(n)` is the message), so is a body
 * of more than `maxValues` values; nesting deeper than MAX_JSON_DEPTH is a 400. Invalid UTF-8
 * and invalid JSON are 400s.
 */
async function parseJson(bytes, what, { maxItems = Infinity, tooMany = null, maxValues = Infinity } = {}) {
  if (bytes.length > MAX_JSON_DEPTH) {
    const over = (c) => c.items > maxItems || c.values > maxValues || c.depth > MAX_JSON_DEPTH;
    const c = await scanJson(bytes, { stop: over });
    if (c.items > maxItems) throw new HttpError(413, "ERR_PAYLOAD_TOO_LARGE", tooMany(c.complete ? c.items : `more than ${maxItems}`));
    if (c.values > maxValues) throw new HttpError(413, "ERR_PAYLOAD_TOO_LARGE", `${what} is too large (more than ${maxValues} JSON values)`);
    if (c.depth > MAX_JSON_DEPTH) throw badRequest(`${what} is nested too deeply (max ${MAX_JSON_DEPTH} levels)`);
  }
  let text;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw badRequest(`${what} must be valid UTF-8`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw badRequest(`${what} must be valid JSON`);
  }
}

/** The JSON body of a wait, an activation or a profile update. */
async function readJson(req, limit, what) {
  return parseJson(await readBody(req, limit), what, { maxValues: MAX_REQUEST_VALUES });
}

// host [":" port], host being a bracketed IP literal or an RFC 3986 reg-name / IPv4 address.
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]+)(?::[0-9]*)?$/;

/** A Host header that is absent, empty or well-formed (no spaces, credentials or paths). */
function validHost(host) {
  return host == null || host === "" || HOST.test(host);
}

/**
 * What an edge's engine answers for a stream no beat of the writer has named yet (just created
 * there, or the edge just started): not a 404, which a client reads as "no such stream", but a
 * 307 to the writer, which knows.
 */
const UNHEARD = new Set(["ERR_STREAM_NOT_FOUND", "ERR_TOUCH_NOT_ENABLED"]);

/** How long a starting edge waits for its writer's first beat before it listens. */
const EDGE_FIRST_BEAT_MS = 2_000;

/** Methods the Fetch API refuses to carry (a Request cannot be made with them). */
const FORBIDDEN_METHODS = new Set(["CONNECT", "TRACE", "TRACK"]);

/**
 * The request handler (Fetch API). With `edge` (an edge's engine and store), only the touch
 * wait and meta routes and /v1/stats are served; the rest is refused with `readOnly`, naming
 * `edge.writer` if given, else the URL the writer's beats carry (`fanoutStats().writerUrl`).
 */
export function createHandler({ store, engine, bodyLimit = 10 * 1024 * 1024, edge = null }) {
  /**
   * The writer an edge sends clients to: `edge.writer`, else the engine's (its `writerUrl`
   * option, else the writer's beats): `e.writer` of an engine refusal, or its fan-out stats'.
   */
  function writerOf(e) {
    if (edge.writer) return edge.writer;
    if (e?.code === "ERR_EDGE_READ_ONLY") return e.writer || null;
    return engine.fanoutStats()?.writerUrl || null;
  }

  async function tail(name) {
    const info = await store.getStream(name);
    if (!info) throw new HttpError(404, "ERR_STREAM_NOT_FOUND", `stream not found: ${name}`);
    return info;
  }

  /**
   * A touch wait on stream `name` with the JSON body `bytes`, as a plain reply: the route's, and
   * the Node server's own path for waits (`waitReply`), which makes no fetch objects.
   */
  async function wait(name, bytes, signal, url) {
    const body = await parseJson(bytes, "wait body", { maxValues: MAX_REQUEST_VALUES });
    if (!body || typeof body !== "object" || Array.isArray(body)) throw badRequest("wait body must be a JSON object");
    try {
      return reply(200, await engine.wait({ ...body, stream: name, signal }));
    } catch (e) {
      if (e?.code === "ERR_ABORTED") return { status: 204, body: null, headers: {} };
      if (edge && UNHEARD.has(e?.code)) return readOnlyReply(url(), writerOf(null), name);
      throw e;
    }
  }

  async function route(req) {
    if (FORBIDDEN_METHODS.has(req.method)) throw new HttpError(405, "ERR_METHOD_NOT_ALLOWED", "unsupported method");
    if (!validHost(req.headers.get("host"))) throw badRequest("invalid Host header");
    let url;
    try {
      url = new URL(req.url, "http://localhost");
    } catch {
      throw badRequest("invalid request URL");
    }
    const path = url.pathname;
    if (path === "/v1/stats") {
      if (req.method !== "GET") throw new HttpError(405, "ERR_METHOD_NOT_ALLOWED", "unsupported method");
      const fanout = engine.fanoutStats();
      return json(200, fanout ? { engine: engine.stats(), store: store.stats(), fanout } : { engine: engine.stats(), store: store.stats() });
    }
    if (!path.startsWith("/v1/stream/")) throw new HttpError(404, "ERR_NOT_FOUND", "not found");
    const segments = path.slice("/v1/stream/".length).replace(/\/+$/, "").split("/");
    let sub = null;
    const last = segments.length;
    if (last >= 3 && segments[last - 3] === "touch" && segments[last - 2] === "templates" && segments[last - 1] === "activate") {
      sub = "activate";
      segments.splice(last - 3, 3);
    } else if (last >= 2 && segments[last - 2] === "touch" && (segments[last - 1] === "meta" || segments[last - 1] === "wait")) {
      sub = segments[last - 1];
      segments.splice(last - 2, 2);
    } else if (segments[last - 1] === "_profile") {
      sub = "profile";
      segments.pop();
    }
    const rawName = segments.join("/");
    if (!rawName) throw badRequest("missing stream name");
    let name;
    try {
      name = decodeURIComponent(rawName);
    } catch {
      throw badRequest("invalid stream name");
    }
    const method = req.method;
    const only = (m) => {
      if (method !== m) throw new HttpError(405, "ERR_METHOD_NOT_ALLOWED", "unsupported method");
    };
    // An edge holds no rows, profiles or templates: the writer answers the rest.
    if (edge && sub !== "wait" && sub !== "meta") return readOnly(url, writerOf(null));

    if (sub === "wait") {
      only("POST");
      return toResponse(await wait(name, await readBody(req, bodyLimit), req.signal, () => url));
    }
    if (sub === "meta") {
      only("GET");
      const settle = url.searchParams.get("settle");
      const t = url.searchParams.get("timeoutMs");
      const timeoutMs = t == null || t.trim() === "" ? undefined : Number(t);
      if (timeoutMs !== undefined && !Number.isFinite(timeoutMs)) throw badRequest("meta.timeoutMs must be a number (ms)");
      if (settle !== null && settle !== "flush") throw badRequest("meta.settle must be 'flush' when provided");
      try {
        return json(200, await engine.meta(name, { settle: settle ?? undefined, timeoutMs }));
      } catch (e) {
        if (edge && UNHEARD.has(e?.code)) return readOnly(url, writerOf(null), name);
        throw e;
      }
    }
    if (sub === "activate") {
      only("POST");
      const body = await readJson(req, bodyLimit, "activate body");
      const options = body && typeof body === "object" && body.inactivityTtlMs !== undefined ? { inactivityTtlMs: body.inactivityTtlMs } : undefined;
      if (options && (typeof options.inactivityTtlMs !== "number" || !(options.inactivityTtlMs >= 0))) {
        throw badRequest("activate.inactivityTtlMs must be a non-negative number (ms)");
      }
      return json(200, engine.activateTemplates(name, body?.templates, options));
    }
    if (sub === "profile") {
      if (method === "GET") {
        await tail(name);
        const touch = engine.getTouchConfig(name);
        const profile = touch ? { kind: "state-protocol", touch } : { kind: (await tail(name)).profile ?? "generic" };
        return json(200, { apiVersion: "durable.streams/profile/v1", profile });
      }
      only("POST");
      const body = await readJson(req, bodyLimit, "profile update");
      if (!body || typeof body !== "object" || Array.isArray(body)) throw badRequest("profile update must be a JSON object");
      for (const k of Object.keys(body)) if (k !== "apiVersion" && k !== "profile") throw badRequest(`profileUpdate.${k} is not supported`);
      if (body.apiVersion !== undefined && body.apiVersion !== "durable.streams/profile/v1") throw badRequest("invalid profile apiVersion");
      if (!Object.prototype.hasOwnProperty.call(body, "profile")) throw badRequest("missing profile");
      await tail(name);
      const profile = engine.setProfile(name, body.profile);
      return json(200, { apiVersion: "durable.streams/profile/v1", profile });
    }

    if (method === "PUT") {
      const contentType = normalizeContentType(req.headers.get("content-type")) ?? "application/octet-stream";
      const existing = await store.getStream(name);
      if (existing) {
        if (normalizeContentType(existing.contentType) !== contentType) throw new HttpError(409, "ERR_STREAM_EXISTS", "stream config mismatch");
        return new Response(null, { status: 200, headers: { "stream-next-offset": encodeOffset(existing.epoch, existing.nextOffset - 1n) } });
      }
      const info = await store.createStream(name, { contentType });
      return new Response(null, { status: 201, headers: { "stream-next-offset": encodeOffset(info.epoch, info.nextOffset - 1n), location: req.url } });
    }
    if (method === "DELETE") {
      if (!(await store.deleteStream(name))) throw new HttpError(404, "ERR_STREAM_NOT_FOUND", `stream not found: ${name}`);
      // The engine drops the stream at once and answers the waits parked on it.
      engine.notify(name);
      return new Response(null, { status: 204 });
    }
    if (method === "POST") {
      const info = await tail(name);
      const buf = await readBody(req, bodyLimit);
      if (buf.byteLength === 0) throw badRequest("empty body");
      const isJson = normalizeContentType(info.contentType) === "application/json";
      let payloads;
      if (isJson) {
        // The row cap is checked on the body's bytes: a huge array is refused unparsed.
        const { maxAppendRows } = store.limits;
        const tooMany = (n) => `append of ${n} rows exceeds the limit of ${maxAppendRows} rows per call`;
        const value = await parseJson(buf, "append body", { maxItems: maxAppendRows, tooMany });
        const records = Array.isArray(value) ? value : [value];
        if (records.length === 0) throw badRequest("empty JSON array");
        if (records.length > maxAppendRows) throw new HttpError(413, "ERR_PAYLOAD_TOO_LARGE", tooMany(records.length));
        if (info.profile === "state-protocol") {
          for (const r of records) {
            const err = validateStateProtocolRecord(r);
            if (err) throw badRequest(err);
          }
        }
        payloads = records.map((r) => JSON.stringify(r));
      } else {
        payloads = [buf];
      }
      const options = {};
      const expected = req.headers.get("stream-expected-offset");
      if (expected != null) {
        if (!/^(0|[1-9][0-9]*)$/.test(expected.trim())) throw badRequest("invalid Stream-Expected-Offset");
        options.expectedOffset = BigInt(expected.trim());
        // Past any offset a stream can reach: the mismatch the store would report.
        if (options.expectedOffset > MAX_OFFSET) {
          const e = new HttpError(409, "ERR_SEQ_MISMATCH", `sequence mismatch on stream ${name}: expected offset ${options.expectedOffset}, stream is at ${info.nextOffset}`);
          e.expectedNext = info.nextOffset;
          throw e;
        }
      }
      const ack = await store.append(name, payloads, options);
      return new Response(null, { status: 204, headers: { "stream-next-offset": encodeOffset(info.epoch, ack.lastOffset) } });
    }
    if (method === "GET") {
      const info = await tail(name);
      const offsetParam = url.searchParams.get("offset") ?? "-1";
      const after = decodeOffset(offsetParam.trim());
      if (!after) throw badRequest("invalid offset");
      const limitParam = url.searchParams.get("limit");
      const limit = limitParam == null ? 1000 : Number(limitParam);
      if (!Number.isInteger(limit) || limit < 1 || limit > 100000) throw badRequest("invalid limit");
      // An offset past any a stream can reach reads nothing, as any offset past the tail.
      const rows = after.seq >= MAX_OFFSET ? [] : await store.read(name, { from: after.seq + 1n, limit, maxBytes: READ_MAX_BYTES });
      const lastSeen = rows.length ? rows[rows.length - 1].offset : after.seq;
      const headers = { "stream-next-offset": encodeOffset(info.epoch, lastSeen), "stream-end-offset": encodeOffset(info.epoch, info.nextOffset - 1n) };
      if (lastSeen >= info.nextOffset - 1n) headers["stream-up-to-date"] = "true";
      if (normalizeContentType(info.contentType) === "application/json") {
        const body = `[${rows.map((r) => r.payload.toString("utf8")).join(",")}]`;
        return new Response(body, { status: 200, headers: { "content-type": "application/json", ...headers } });
      }
      return new Response(Buffer.concat(rows.map((r) => r.payload)), { status: 200, headers: { "content-type": info.contentType, ...headers } });
    }
    throw new HttpError(405, "ERR_METHOD_NOT_ALLOWED", "unsupported method");
  }

  return {
    /**
     * A touch wait (`POST /v1/stream/:name/touch/wait`) as the Node server's own path serves it,
     * without fetch objects: the answer `fetch` gives, as a plain reply. `rawName` is the name
     * as the path has it (percent-encoded), `rawUrl` the request's URL.
     */
    async waitReply(rawName, bytes, signal, rawUrl) {
      const url = () => new URL(rawUrl, "http://localhost");
      try {
        let name;
        try {
          name = decodeURIComponent(rawName);
        } catch {
          throw badRequest("invalid stream name");
        }
        return await wait(name, bytes, signal, url);
      } catch (e) {
        if (edge && e?.code === "ERR_EDGE_READ_ONLY") {
          try {
            return readOnlyReply(url(), writerOf(e));
          } catch (e2) {
            return errorReply(e2);
          }
        }
        return errorReply(e);
      }
    },
    async fetch(req) {
      try {
        return await route(req);
      } catch (e) {
        // An edge's engine refuses what only the writer does (a wait declaring templates).
        if (edge && e?.code === "ERR_EDGE_READ_ONLY") {
          try {
            return readOnly(new URL(req.url, "http://localhost"), writerOf(e));
          } catch (e2) {
            return errorResponse(e2);
          }
        }
        return errorResponse(e);
      }
    },
  };
}

/** A whole HTTP/1.1 error response, for a socket that has no ServerResponse. */
function rawError(http, status, code, message) {
  const body = JSON.stringify({ error: { code, message } });
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
  );
}

/**
 * The stream name (percent-encoded) of a touch wait's URL, or null. Paths with dot segments or
 * backslashes are left to the general path, whose URL parser normalizes them.
 */
function waitPath(url) {
  const m = /^\/v1\/stream\/([^?#]+)\/touch\/wait\/*(?:\?[^#]*)?$/.exec(url);
  if (m === null || /(?:^|\/)(?:\.|%2e){1,2}(?:\/|$)|\\/i.test(m[1])) return null;
  return m[1];
}

/** Writes a plain reply (see `reply`) unless the client is gone. */
function writeReply(res, r) {
  if (res.destroyed) return;
  res.writeHead(r.status, r.headers);
  if (r.body === null) res.end();
  else res.end(r.body);
}

/**
 * A touch wait on Node: the body read from the request's events, the handler's plain reply
 * written back. A parked wait is what a server holds most of, so this path makes none of the
 * general path's per-request objects (a fetch Request and Response, an async iterator over the
 * body, the Response's body read back out); it answers as `fetch` does.
 */
function serveWait(handler, req, res, name, bodyLimit) {
  const ac = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) ac.abort();
  });
  const chunks = [];
  let size = 0;
  req.on("data", (c) => {
    size += c.length;
    if (size <= bodyLimit) chunks.push(c);
  });
  req.on("end", () => {
    if (size > bodyLimit) return writeReply(res, errorReply(new HttpError(413, "ERR_PAYLOAD_TOO_LARGE", `body too large (max ${bodyLimit})`)));
    const bytes = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    handler.waitReply(name, bytes, ac.signal, req.url).then(
      (r) => writeReply(res, r),
      (e) => writeReply(res, errorReply(e)),
    );
  });
}

/** Any other request on Node: made a fetch Request for the handler, its Response written back. */
async function serveGeneral(handler, req, res, bodyLimit) {
  const ac = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) ac.abort();
  });
  try {
    const chunks = [];
    let size = 0;
    let tooLarge = false;
    for await (const c of req) {
      size += c.length;
      if (size > bodyLimit) {
        tooLarge = true;
        break;
      }
      chunks.push(c);
    }
    let response;
    if (tooLarge) {
      response = errorResponse(new HttpError(413, "ERR_PAYLOAD_TOO_LARGE", `body too large (max ${bodyLimit})`));
    } else if (FORBIDDEN_METHODS.has(req.method)) {
      // What Bun.serve passes on to the handler, which refuses it; a Request cannot carry it.
      response = errorResponse(new HttpError(405, "ERR_METHOD_NOT_ALLOWED", "unsupported method"));
    } else if (!validHost(req.headers.host)) {
      response = errorResponse(badRequest("invalid Host header"));
    } else {
      const hasBody = req.method !== "GET" && req.method !== "HEAD";
      let request;
      try {
        request = new Request(`http://${req.headers.host || "localhost"}${req.url}`, { method: req.method, headers: req.headers, signal: ac.signal });
        // The body goes to the handler as it came, not through the Request's stream (which
        // copies it twice more on the event loop).
        if (hasBody && size > 0) request[NODE_BODY] = Buffer.concat(chunks);
      } catch (e) {
        request = null;
        response = errorResponse(badRequest(`malformed request: ${e?.message ?? e}`));
      }
      if (request) response = await handler.fetch(request);
    }
    if (res.destroyed) return;
    res.statusCode = response.status;
    response.headers.forEach((v, k) => res.setHeader(k, v));
    const body = response.body ? Buffer.from(await response.arrayBuffer()) : null;
    res.end(body);
  } catch (e) {
    if (!res.headersSent && !res.destroyed) {
      res.statusCode = 500;
      res.end(JSON.stringify({ error: { code: "ERR_INTERNAL", message: String(e?.message ?? e) } }));
    }
  }
}

/** This process's limit on open descriptors (Linux: /proc/self/limits), or null. */
function descriptorLimit() {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync("/proc/self/limits", "utf8"));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/**
 * At its descriptor limit a Node server survives, but says nothing: libuv accepts each new
 * connection and closes it at once (clients see the connection closed, no answer). This says
 * so on stderr, once each time the connections come within 64 of the limit (again only after
 * they fell below 90% of it). Returns the interval to clear.
 */
function watchDescriptors(server, everyMs = 2_000) {
  const limit = descriptorLimit();
  if (limit === null) return undefined;
  let warned = false;
  const t = setInterval(() => {
    server.getConnections((err, n) => {
      if (err) return;
      if (!warned && n >= limit - 64) {
        warned = true;
        console.error(
          `durable-touch: ${n} connections open, at this process's limit of ${limit} descriptors: new connections are closed unanswered ` +
            `until some close (raise the limit, ulimit -n, or spread clients over more processes)`,
        );
      } else if (warned && n < limit * 0.9) {
        warned = false;
      }
    });
  }, everyMs);
  t.unref?.();
  return t;
}

/** Serves `handler` with Node's http module; a closed client connection aborts its request. */
async function serveNode(handler, { port, host, bodyLimit }) {
  const http = await import("node:http");
  const server = http.createServer((req, res) => {
    const wait = req.method === "POST" && typeof handler.waitReply === "function" ? waitPath(req.url) : null;
    if (wait !== null && validHost(req.headers.host)) serveWait(handler, req, res, wait, bodyLimit);
    else serveGeneral(handler, req, res, bodyLimit);
  });
  // Requests Node's parser refuses never reach the handler: answer them with a coded JSON
  // error too (Node's own answer has an empty body).
  server.on("clientError", (err, socket) => {
    if (err.code === "ECONNRESET" || !socket.writable || socket._httpMessage?.headersSent) return socket.destroy();
    let reply;
    if (err.code === "HPE_HEADER_OVERFLOW") {
      reply = rawError(http, 431, "ERR_HEADERS_TOO_LARGE", `request line and headers too large (max ${http.maxHeaderSize} bytes)`);
    } else if (err.code === "HPE_INVALID_METHOD") {
      reply = rawError(http, 405, "ERR_METHOD_NOT_ALLOWED", "unsupported method");
    } else if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") {
      reply = rawError(http, 408, "ERR_REQUEST_TIMEOUT", "request timed out");
    } else {
      reply = rawError(http, 400, "ERR_INVALID_ARGUMENT", `malformed HTTP request (${err.code ?? "parse error"})`);
    }
    socket.end(reply);
  });
  // CONNECT is not routed to the request handler; without a listener Node drops the socket.
  server.on("connect", (_req, socket) => socket.end(rawError(http, 405, "ERR_METHOD_NOT_ALLOWED", "unsupported method")));
  server.keepAliveTimeout = 130_000;
  server.requestTimeout = 0;
  server.headersTimeout = 140_000;
  await new Promise((r) => server.listen(port, host, r));
  const address = server.address();
  const watch = watchDescriptors(server);
  return {
    port: address.port,
    async close() {
      clearInterval(watch);
      await new Promise((r) => {
        server.close(() => r());
        // Idle keep-alive connections go now; busy ones get a moment to finish their answer.
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 500);
      });
    },
  };
}

function serveBun(handler, { port, host }) {
  const server = globalThis.Bun.serve({ port, hostname: host, idleTimeout: 0, fetch: (req) => handler.fetch(req) });
  return {
    port: server.port,
    async close() {
      await server.stop(false);
    },
  };
}

/** The fan-out options of a server (null without `nats`), checked before anything starts. */
function fanoutOptions(opts) {
  const nats = opts.nats === undefined || opts.nats === null || opts.nats === "" ? null : String(opts.nats);
  const edge = opts.edge === true || opts.edge === "true";
  if (!nats && edge) throw new Error("an edge needs the writer's NATS server (--nats nats://host:port)");
  if (opts.writer && !edge) throw new Error("--writer is for an edge (--edge --nats …)");
  if (opts.publicUrl && (edge || !nats)) throw new Error("--public-url is for a writer (--nats without --edge)");
  const retention = (v, flag, min) => {
    if (v === undefined || v === null || v === "") return undefined;
    if (edge || !nats) throw new Error(`${flag} is for a writer (--nats without --edge): it sets the retention of the writer's JetStream stream`);
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) throw new Error(`${flag} must be an integer >= ${min}, got ${v}`);
    return n;
  };
  const maxAgeMs = retention(opts.natsMaxAgeMs, "--nats-max-age-ms", 1_000);
  const maxBytes = retention(opts.natsMaxBytes, "--nats-max-bytes", 65_536);
  let batchMs;
  if (opts.natsBatchMs !== undefined && opts.natsBatchMs !== null && opts.natsBatchMs !== "") {
    if (edge || !nats) throw new Error("--nats-batch-ms is for a writer (--nats without --edge)");
    batchMs = Number(opts.natsBatchMs);
    if (!Number.isSafeInteger(batchMs) || batchMs < 0 || batchMs > 1_000) throw new Error(`--nats-batch-ms must be an integer from 0 to 1000, got ${opts.natsBatchMs}`);
  }
  if (!nats) return null;
  const prefix = opts.natsPrefix === undefined || opts.natsPrefix === "" ? "durable-touch" : String(opts.natsPrefix);
  const url = (v, what) => {
    if (v === undefined || v === null || v === "") return undefined;
    let u;
    try {
      u = new URL(String(v));
    } catch {
      throw new Error(`${what} must be an http(s) URL, got ${v}`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`${what} must be an http(s) URL, got ${v}`);
    return String(v).replace(/\/+$/, "");
  };
  return {
    url: nats,
    prefix,
    edge,
    writer: edge ? url(opts.writer, "--writer") : undefined,
    publicUrl: edge ? undefined : url(opts.publicUrl, "--public-url"),
    beatMs: opts.natsBeatMs === undefined ? undefined : Number(opts.natsBeatMs),
    maxAgeMs,
    maxBytes,
    batchMs,
  };
}

/**
 * Starts the server. Options (env fallbacks): dataDir (DATA_DIR, "./data"), port (PORT, 8787),
 * host (HOST, "127.0.0.1"), workers (TOUCH_WORKERS), bodyLimit (10 MiB), keepCursors (KEEP_CURSORS,
 * true: touch journals are kept across restarts in `<data>/durable-touch.sqlite-journals/`, so
 * cursors handed out before a restart stay valid; false: a new epoch at every start); the fan-out over NATS
 * JetStream (no env fallbacks): nats (the broker's URL: this server publishes its touches as
 * a writer), natsPrefix ("durable-touch", one per writer), natsMaxAgeMs / natsMaxBytes (a
 * writer's retention of its flushes: 10 minutes, 256 MiB; what an edge started anew can replay),
 * natsBatchMs (a writer's batching window: 0, each flush at once; more: fewer bytes per key to
 * each edge, that much later),
 * publicUrl (the URL a writer's edges send clients to; default its own URL), edge (serve waits and meta as an edge of the writer
 * publishing on `nats`/`natsPrefix`; no data dir), writer (an edge's writer URL, which takes
 * precedence over the one the writer's beats carry); nativeWaits (NATIVE_WAITS; default true
 * for an edge, else false: touch waits answered by the native module's listener on the port,
 * without entering JavaScript; the rest passed to this server on loopback).
 */
export async function startServer(opts = {}) {
  const dataDir = resolve(opts.dataDir ?? process.env.DATA_DIR ?? "./data");
  const port = Number(opts.port ?? process.env.PORT ?? 8787);
  const host = opts.host ?? process.env.HOST ?? "127.0.0.1";
  const workersRaw = opts.workers ?? process.env.TOUCH_WORKERS;
  const workers = workersRaw === undefined || workersRaw === "" ? undefined : Number(workersRaw);
  const bodyLimit = opts.bodyLimit ?? 10 * 1024 * 1024;
  const keepCursors = !switchedOff(opts.keepCursors ?? process.env.KEEP_CURSORS);
  const fo = fanoutOptions(opts);
  // An edge serves waits, so its listener is on unless switched off; elsewhere it is asked for.
  const nativeWaitsRaw = opts.nativeWaits ?? process.env.NATIVE_WAITS;
  const nativeWaits =
    nativeWaitsRaw === undefined || nativeWaitsRaw === "" ? fo?.edge === true : !switchedOff(nativeWaitsRaw);
  const fanout = (role, writerUrl) => ({
    role,
    url: fo.url,
    prefix: fo.prefix,
    ...(fo.beatMs === undefined ? {} : { beatMs: fo.beatMs }),
    ...(fo.maxAgeMs === undefined ? {} : { maxAgeMs: fo.maxAgeMs }),
    ...(fo.maxBytes === undefined ? {} : { maxBytes: fo.maxBytes }),
    ...(fo.batchMs === undefined ? {} : { batchMs: fo.batchMs }),
    ...(writerUrl ? { writerUrl } : {}),
  });
  let store;
  let engine;
  let handler = null;
  const open = (writerUrl) => {
    if (fo?.edge) {
      // An edge keeps nothing: its streams and cursors are the writer's, from NATS.
      store = Store.open(":memory:");
      engine = new TouchEngine(store, { ...(workers === undefined ? {} : { workers }), fanout: fanout("edge", fo.writer) });
    } else {
      mkdirSync(dataDir, { recursive: true });
      store = Store.open(join(dataDir, "durable-touch.sqlite"));
      const options = { ...(workers === undefined ? {} : { workers }), keepCursors };
      engine = new TouchEngine(store, fo ? { ...options, fanout: fanout("writer", writerUrl) } : options);
    }
    handler = createHandler({ store, engine, bodyLimit, edge: fo?.edge ? { writer: fo.writer } : null });
  };
  // A writer names its own URL to its edges, which is known once it listens (port 0 picks
  // one): it listens first and answers 503 until its engine is made (moments later).
  const late = fo !== null && !fo.edge && fo.publicUrl === undefined;
  if (!late) open(fo?.publicUrl);
  // An edge listens once it has heard its writer's first beat (its streams and the writer's
  // URL; the writer answers a new edge at once), so its first clients are served, not sent
  // away; with no writer heard within EDGE_FIRST_BEAT_MS it listens anyway (and answers 503).
  if (fo?.edge) {
    const until = Date.now() + EDGE_FIRST_BEAT_MS;
    while (!(engine.fanoutStats()?.beats > 0) && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
  }
  const starting = () => errorReply(new HttpError(503, "ERR_STARTING", "the server is starting"));
  const front = {
    fetch: (req) => (handler ? handler.fetch(req) : Promise.resolve(toResponse(starting()))),
    waitReply: (...args) => (handler ? handler.waitReply(...args) : Promise.resolve(starting())),
  };
  let http;
  let listener = null;
  try {
    // With native waits this server listens on loopback behind the listener.
    const at = nativeWaits ? { port: 0, host: "127.0.0.1" } : { port, host };
    http = typeof globalThis.Bun !== "undefined" ? serveBun(front, at) : await serveNode(front, { ...at, bodyLimit });
    if (nativeWaits) {
      try {
        listener = new WaitListener(engine ?? null, { host, port, upstreamPort: http.port });
      } catch (e) {
        await http.close();
        throw e;
      }
    }
  } catch (e) {
    await engine?.close();
    await store?.close();
    throw e;
  }
  const url = `http://${host}:${listener ? listener.port : http.port}`;
  if (late) {
    try {
      open(url);
      listener?.serve(engine);
    } catch (e) {
      await listener?.close();
      await http.close();
      await store?.close();
      throw e;
    }
  }
  let closing = null;
  return {
    url,
    port: listener ? listener.port : http.port,
    /** The native wait listener on `port` (`nativeWaits`), else null. */
    listener,
    /** The JS server's URL: `url`, or with `nativeWaits` the loopback one behind the listener. */
    handlerUrl: `http://${nativeWaits ? "127.0.0.1" : host}:${http.port}`,
    store,
    engine,
    /** "writer" or "edge" with a fan-out, else null. */
    role: fo ? (fo.edge ? "edge" : "writer") : null,
    /** Answers pending waits (touched: false), stops listening and closes the store. */
    close() {
      closing ??= (async () => {
        await engine.close();
        await listener?.close();
        await http.close();
        await store.close();
      })();
      return closing;
    },
  };
}
