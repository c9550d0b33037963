// Serving a handler over HTTP: on Node's `http` module (with its own path for touch waits, which
// makes no fetch objects, coded JSON answers to requests Node's parser refuses, and a warning
// when connections near the process's descriptor limit) or on Bun.serve. A client that closes
// its connection aborts its request.
import { readFileSync } from "node:fs";
import { HttpError, errorReply, errorResponse, badRequest } from "./replies.mjs";
import { NODE_BODY, validHost, FORBIDDEN_METHODS } from "./request.mjs";

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
export async function serveNode(handler, { port, host, bodyLimit }) {
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

export function serveBun(handler, { port, host }) {
  const server = globalThis.Bun.serve({ port, hostname: host, idleTimeout: 0, fetch: (req) => handler.fetch(req) });
  return {
    port: server.port,
    async close() {
      await server.stop(false);
    },
  };
}
