// What the server reads of a request: its body, refused past the server's limit (a Node
// request's body is handed over as it arrived, see http.mjs), a JSON body counted before it is
// parsed (json-body.mjs: a body over a limit costs no parse), the Host header, and the methods
// a Fetch API Request cannot carry.
import { HttpError, badRequest } from "./replies.mjs";
import { MAX_JSON_DEPTH, scanJson } from "./json-body.mjs";

/** The body a Node request arrived with, handed to the handler as is (see serveNode). */
export const NODE_BODY = Symbol("durable-touch.nodeBody");

export async function readBody(req, limit) {
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
export const MAX_REQUEST_VALUES = 65_536;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A JSON body, checked before it is parsed, so that none of these costs a parse: a top-level
 * array of more than `maxItems` elements is a 413 (`tooMany(n)` is the message), so is a body
 * of more than `maxValues` values; nesting deeper than MAX_JSON_DEPTH is a 400. Invalid UTF-8
 * and invalid JSON are 400s.
 */
export async function parseJson(bytes, what, { maxItems = Infinity, tooMany = null, maxValues = Infinity } = {}) {
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
export async function readJson(req, limit, what) {
  return parseJson(await readBody(req, limit), what, { maxValues: MAX_REQUEST_VALUES });
}

// host [":" port], host being a bracketed IP literal or an RFC 3986 reg-name / IPv4 address.
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]+)(?::[0-9]*)?$/;

/** A Host header that is absent, empty or well-formed (no spaces, credentials or paths). */
export function validHost(host) {
  return host == null || host === "" || HOST.test(host);
}

/** Methods the Fetch API refuses to carry (a Request cannot be made with them). */
export const FORBIDDEN_METHODS = new Set(["CONNECT", "TRACE", "TRACK"]);
