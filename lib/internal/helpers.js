// @ts-check
"use strict";
// The JavaScript halves of the native module's conversions: functions the native side calls
// where building or reading many JS values is far cheaper in JIT-compiled code than through
// one N-API call per property (the napi layer's `helpers` module). `lib/internal/native.js` hands
// them to the native module once per environment.

/**
 * A frozen hit object of `waitForAny` (one call instead of an object, five interned property
 * names and a freeze through N-API).
 * @param {number} generation
 * @param {number} keyId
 * @param {bigint} bucketMaxSourceOffsetSeq
 * @param {number} flushAtMs
 * @param {number} bucketStartMs
 */
function makeHit(generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs) {
  return Object.freeze({ generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs });
}

/** `effectiveWaitKind` by the engine's code for it (`kind_code` of the engine binding). */
const WAIT_KINDS = ["fineKey", "templateKey", "tableKey"];

/**
 * The reply of a `TouchEngine.wait` that is not stale, with the fields (and their order) of
 * the native `WaitResult`: one call instead of an object and six interned property names
 * through N-API, on a path every wake takes.
 * @param {boolean} touched
 * @param {string} cursor
 * @param {number} kind index into WAIT_KINDS
 * @param {string} bucketMaxSourceOffsetSeq
 * @param {number} flushAtMs
 * @param {number} bucketStartMs
 */
function makeWaitReply(touched, cursor, kind, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs) {
  return { touched, cursor, effectiveWaitKind: WAIT_KINDS[kind], bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs };
}

/**
 * Reads `rows[start..end)` of `processRows` in one pass: returns `[offsets, tsMs, payloads,
 * bytes, ends]`, or null when a payload is not a Uint8Array (strings then take the native slow
 * path). `bytes` holds the payloads back to back and `ends` where each one ends; past 256 MiB
 * in all they are null and the payloads are read one by one.
 */
const packRows = (function () {
  // The payload buffer is reused across calls (Rust copies out of it before returning) up
  // to 16 MiB; bigger batches get their own. So are the offset, tsMs and end columns.
  let scratch = new Uint8Array(0);
  let offsets = new BigInt64Array(0);
  let ts = new Float64Array(0);
  let ends = new Float64Array(0);
  /**
   * @param {unknown} rows
   * @param {number} start
   * @param {number} end
   */
  function packRows(rows, start, end) {
    if (!Array.isArray(rows)) throw new TypeError("rows must be an array");
    const n = Math.max(0, Math.min(end, rows.length) - start);
    if (offsets.length < n) {
      offsets = new BigInt64Array(n);
      ts = new Float64Array(n);
      ends = new Float64Array(n);
    }
    const payloads = new Array(n);
    let total = 0;
    for (let i = 0; i < n; i++) {
      const r = rows[start + i];
      if (r === null || typeof r !== "object") throw new TypeError("rows[" + (start + i) + "] must be an object");
      const p = r.payload;
      if (!(p instanceof Uint8Array)) return null;
      const o = r.offset;
      if (typeof o === "bigint") {
        if (o < -9223372036854775808n || o > 9223372036854775807n) throw new TypeError("rows[" + (start + i) + "].offset is out of the 64-bit range");
        offsets[i] = o;
      } else if (Number.isSafeInteger(o)) offsets[i] = BigInt(o);
      else throw new TypeError("rows[" + (start + i) + "].offset must be a bigint");
      const t = r.tsMs;
      ts[i] = typeof t === "number" ? t : Number(t);
      payloads[i] = p;
      total += p.length;
    }
    const o = offsets.subarray(0, n);
    const t = ts.subarray(0, n);
    if (total > 268435456) return [o, t, payloads, null, null];
    let bytes = scratch;
    if (bytes.length < total) {
      bytes = new Uint8Array(Math.max(total, Math.min(2 * bytes.length, 16777216)));
      if (bytes.length <= 16777216) scratch = bytes;
    }
    let at = 0;
    for (let i = 0; i < n; i++) {
      const p = payloads[i];
      bytes.set(p, at);
      at += p.length;
      ends[i] = at;
    }
    return [o, t, payloads, bytes, ends.subarray(0, n)];
  }
  return packRows;
})();

/**
 * The touch objects of a batch from its columns (far cheaper than six N-API property sets per
 * touch). The distinct watermarks come as one decimal text and where each one ends. `flags`:
 * bit 0 = has a routing key, bit 1 = kind "template", bit 2 = the same routing key as the touch
 * before (sorted by key id, a key's touches are adjacent): `routing` holds the 16 hex digits of
 * the others only, in order, and the repeats share one string. Absent routing keys and template
 * ids are own properties holding `undefined`, as in the reference's messages.
 */
function buildTouches(n, keyIds, routing, flags, wmIdx, wmText, wmEnds, entIdx, ent, tplIdx, tpl) {
  const wm = new Array(wmEnds.length);
  for (let j = 0, s = 0; j < wmEnds.length; j++) {
    const e = wmEnds[j];
    wm[j] = wmText.substring(s, e);
    s = e;
  }
  const out = new Array(n);
  let rk = undefined;
  let r = 0;
  for (let i = 0; i < n; i++) {
    const f = flags[i];
    const t = tplIdx[i];
    if ((f & 5) === 1) {
      rk = routing.substring(r, r + 16);
      r += 16;
    }
    out[i] = {
      keyId: keyIds[i],
      routingKey: (f & 1) !== 0 ? rk : undefined,
      watermark: wm[wmIdx[i]],
      entity: ent[entIdx[i]],
      kind: (f & 2) !== 0 ? "template" : "table",
      templateId: t === 4294967295 ? undefined : tpl[t],
    };
  }
  return out;
}

module.exports = { makeHit, packRows, buildTouches, makeWaitReply };
