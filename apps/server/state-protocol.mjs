// Ingest-time validation of State Protocol records (checklist C4), with the reference's
// messages: what a state-protocol stream accepts into its log.
import { decodeOffset } from "./offsets.mjs";

const CHANGE_KEYS = ["type", "key", "value", "old_value", "headers"];
const CHANGE_HEADER_KEYS = ["operation", "txid", "timestamp"];
const CONTROL_KEYS = ["headers"];
const CONTROL_HEADER_KEYS = ["control", "offset"];
const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
const isPlainObject = (v) => !!v && typeof v === "object" && !Array.isArray(v);

function unknownKey(obj, allowed, path) {
  for (const k of Object.keys(obj)) if (!allowed.includes(k)) return `${path}.${k} is not supported`;
  return null;
}

function nonEmpty(v, path) {
  return typeof v !== "string" || v.trim() === "" ? `${path} must be a non-empty string` : null;
}

function isDateTimeString(v) {
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/.test(v) && !Number.isNaN(Date.parse(v));
}

/** Returns null when the record is acceptable, else the reference's error message. */
export function validateStateProtocolRecord(record) {
  if (!isPlainObject(record)) return "state-protocol records must be JSON objects";
  const headers = record.headers;
  if (!isPlainObject(headers)) return "state-protocol record.headers must be an object";
  const hasControl = has(headers, "control");
  const hasOperation = has(headers, "operation");
  if (hasControl && hasOperation) return "state-protocol record.headers cannot mix control and operation";
  if (hasControl) {
    const k = unknownKey(record, CONTROL_KEYS, "state-protocol record") ?? unknownKey(headers, CONTROL_HEADER_KEYS, "state-protocol record.headers");
    if (k) return k;
    if (!["snapshot-start", "snapshot-end", "reset"].includes(headers.control)) {
      return "state-protocol record.headers.control must be snapshot-start, snapshot-end, or reset";
    }
    if (has(headers, "offset") && (typeof headers.offset !== "string" || decodeOffset(headers.offset) === null)) {
      return "state-protocol record.headers.offset must be a valid stream offset string";
    }
    return null;
  }
  if (!hasOperation) return "state-protocol record.headers must contain operation or control";
  const k = unknownKey(record, CHANGE_KEYS, "state-protocol record") ?? unknownKey(headers, CHANGE_HEADER_KEYS, "state-protocol record.headers");
  if (k) return k;
  const t = nonEmpty(record.type, "state-protocol record.type") ?? nonEmpty(record.key, "state-protocol record.key");
  if (t) return t;
  const op = headers.operation;
  if (op !== "insert" && op !== "update" && op !== "delete") return "state-protocol record.headers.operation must be insert, update, or delete";
  if ((op === "insert" || op === "update") && !has(record, "value")) return `state-protocol ${op} records must include value`;
  if (has(headers, "txid")) {
    const e = nonEmpty(headers.txid, "state-protocol record.headers.txid");
    if (e) return e;
  }
  if (has(headers, "timestamp") && (typeof headers.timestamp !== "string" || !isDateTimeString(headers.timestamp))) {
    return "state-protocol record.headers.timestamp must be a valid RFC 3339 timestamp";
  }
  return null;
}
