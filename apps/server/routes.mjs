// The server's routes, as one Fetch API handler (`createHandler`): a subset of the reference
// server's, backed by a Store and a TouchEngine.
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
// Errors are JSON `{ error: { code, message } }` with the native error code (ERR_*); a wait
// ends with the request's signal (its client gone: 204).
//
// An edge's handler (`edge`) holds no data: it serves the touch wait and meta routes (and its
// own /v1/stats) with the writer's cursors. Every other request, and a wait the engine refuses
// (declareTemplates), is answered 307 to the writer (Location: the writer's URL + the same path
// and query, so a client following redirects resends it there with its method and body), with
// `{ error: { code: "ERR_EDGE_READ_ONLY", message, writer } }`; 503 with that code while the
// writer's URL is not known.
import { encodeOffset, decodeOffset } from "./offsets.mjs";
import { validateStateProtocolRecord } from "./state-protocol.mjs";
import { HttpError, reply, toResponse, json, errorReply, errorResponse, badRequest } from "./replies.mjs";
import { readBody, parseJson, readJson, MAX_REQUEST_VALUES, validHost, FORBIDDEN_METHODS } from "./request.mjs";

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

/**
 * The most payload bytes one read answers (at least one row), the reference's
 * `DS_READ_MAX_BYTES` default: a reader pages on through `stream-next-offset`, and concurrent
 * readers of large rows cannot make the server hold pages of the store's 64 MiB read cap.
 */
const READ_MAX_BYTES = 1024 * 1024;

/** The largest offset a stream holds (SQLite's 64-bit integers). */
const MAX_OFFSET = (1n << 63n) - 1n;

function normalizeContentType(v) {
  if (!v) return null;
  const base = v.split(";")[0]?.trim().toLowerCase();
  return base || null;
}

/**
 * The stream a `/v1/stream/…` path names (percent-decoded) and its sub-route: "wait", "meta",
 * "activate", "profile", or null for the stream itself.
 */
function streamRoute(path) {
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
  return { sub, name };
}

/**
 * What an edge's engine answers for a stream no beat of the writer has named yet (just created
 * there, or the edge just started): not a 404, which a client reads as "no such stream", but a
 * 307 to the writer, which knows.
 */
const UNHEARD = new Set(["ERR_STREAM_NOT_FOUND", "ERR_TOUCH_NOT_ENABLED"]);

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

  /** GET …/touch/meta[?settle=flush&timeoutMs=] */
  async function meta(url, name) {
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

  /** POST …/touch/templates/activate */
  async function activate(req, name) {
    const body = await readJson(req, bodyLimit, "activate body");
    const options = body && typeof body === "object" && body.inactivityTtlMs !== undefined ? { inactivityTtlMs: body.inactivityTtlMs } : undefined;
    if (options && (typeof options.inactivityTtlMs !== "number" || !(options.inactivityTtlMs >= 0))) {
      throw badRequest("activate.inactivityTtlMs must be a non-negative number (ms)");
    }
    return json(200, engine.activateTemplates(name, body?.templates, options));
  }

  /** GET …/_profile */
  async function getProfile(name) {
    await tail(name);
    const touch = engine.getTouchConfig(name);
    const profile = touch ? { kind: "state-protocol", touch } : { kind: (await tail(name)).profile ?? "generic" };
    return json(200, { apiVersion: "durable.streams/profile/v1", profile });
  }

  /** POST …/_profile */
  async function setProfile(req, name) {
    const body = await readJson(req, bodyLimit, "profile update");
    if (!body || typeof body !== "object" || Array.isArray(body)) throw badRequest("profile update must be a JSON object");
    for (const k of Object.keys(body)) if (k !== "apiVersion" && k !== "profile") throw badRequest(`profileUpdate.${k} is not supported`);
    if (body.apiVersion !== undefined && body.apiVersion !== "durable.streams/profile/v1") throw badRequest("invalid profile apiVersion");
    if (!Object.prototype.hasOwnProperty.call(body, "profile")) throw badRequest("missing profile");
    await tail(name);
    const profile = engine.setProfile(name, body.profile);
    return json(200, { apiVersion: "durable.streams/profile/v1", profile });
  }

  /** PUT /v1/stream/:name */
  async function create(req, name) {
    const contentType = normalizeContentType(req.headers.get("content-type")) ?? "application/octet-stream";
    const existing = await store.getStream(name);
    if (existing) {
      if (normalizeContentType(existing.contentType) !== contentType) throw new HttpError(409, "ERR_STREAM_EXISTS", "stream config mismatch");
      return new Response(null, { status: 200, headers: { "stream-next-offset": encodeOffset(existing.epoch, existing.nextOffset - 1n) } });
    }
    const info = await store.createStream(name, { contentType });
    return new Response(null, { status: 201, headers: { "stream-next-offset": encodeOffset(info.epoch, info.nextOffset - 1n), location: req.url } });
  }

  /** DELETE /v1/stream/:name */
  async function remove(name) {
    if (!(await store.deleteStream(name))) throw new HttpError(404, "ERR_STREAM_NOT_FOUND", `stream not found: ${name}`);
    // The engine drops the stream at once and answers the waits parked on it.
    engine.notify(name);
    return new Response(null, { status: 204 });
  }

  /** POST /v1/stream/:name */
  async function append(req, name) {
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

  /** GET /v1/stream/:name?offset=&limit= */
  async function read(url, name) {
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

  /** The answer to `req`; what it refuses it throws (an HttpError, or the store's or engine's error) for `fetch` to answer. */
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
    const { sub, name } = streamRoute(path);
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
      return meta(url, name);
    }
    if (sub === "activate") {
      only("POST");
      return activate(req, name);
    }
    if (sub === "profile") {
      if (method === "GET") return getProfile(name);
      only("POST");
      return setProfile(req, name);
    }
    if (method === "PUT") return create(req, name);
    if (method === "DELETE") return remove(name);
    if (method === "POST") return append(req, name);
    if (method === "GET") return read(url, name);
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
