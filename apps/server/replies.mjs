// What the server answers with: a reply as plain data (what the Node wait path writes as it
// is) or as a Fetch API Response, the HTTP errors its routes throw, and the status each native
// error code (ERR_*) is answered with. Errors are JSON `{ error: { code, message } }`.

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
  // An edge's refusal: 307 to the writer, or this while its URL is unknown (routes.mjs, readOnlyReply).
  ERR_EDGE_READ_ONLY: 503,
};

export class HttpError extends Error {
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
export const reply = (status, body, headers = {}) => ({ status, body: jsonText(body), headers: { "content-type": "application/json", ...headers } });
export const toResponse = (r) => new Response(r.body, { status: r.status, headers: r.headers });
export const json = (status, body, headers = {}) => toResponse(reply(status, body, headers));

export function errorReply(e) {
  const headers = e?.code === "ERR_SEQ_MISMATCH" && e.expectedNext !== undefined ? { "stream-expected-offset": String(e.expectedNext) } : {};
  if (e instanceof HttpError) return reply(e.status, { error: { code: e.code, message: e.message } }, headers);
  const status = STATUS[e?.code] ?? 500;
  const code = status === 500 ? (e?.code ?? "ERR_INTERNAL") : e.code;
  return reply(status, { error: { code, message: String(e?.message ?? e) } }, headers);
}

export const errorResponse = (e) => toResponse(errorReply(e));

export const badRequest = (message) => new HttpError(400, "ERR_INVALID_ARGUMENT", message);
