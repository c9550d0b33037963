// Looking at a JSON request body before parsing it: how deep it nests, how many elements its
// top-level array has, about how many values it holds. The server refuses a body whose counts
// are over its limits without parsing it (JSON.parse of a 10 MB body holds the event loop for
// hundreds of milliseconds, and JSON.stringify of a deeply nested value overflows the stack).

/** Deepest JSON body the server accepts: far below where JSON.stringify overflows (~4,000 on Node). */
export const MAX_JSON_DEPTH = 1000;

/** Bytes scanned between two turns of the event loop. */
const SCAN_SLICE = 256 * 1024;

/**
 * Scans bytes [from, to) of a JSON body into the running state `s`. Structural characters are
 * ASCII, and no byte of a multi-byte UTF-8 sequence is, so the bytes are scanned directly.
 */
function scanSlice(s, bytes, from, to) {
  let { depth, maxDepth, commas, allCommas, containers, inString, first, topNonEmpty } = s;
  let i = from + s.skip;
  for (; i < to; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === 0x5c) i++; // the escaped byte may lie in the next slice (`skip`)
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
    if (first === -1) first = c;
    else if (depth === 1 && c !== 0x5d) topNonEmpty = true;
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      containers++;
      if (++depth > maxDepth) maxDepth = depth;
    } else if (c === 0x5d || c === 0x7d) depth--;
    else if (c === 0x2c) {
      allCommas++;
      if (depth === 1) commas++;
    }
  }
  Object.assign(s, { depth, maxDepth, commas, allCommas, containers, inString, first, topNonEmpty, skip: i - to });
}

/**
 * The counts of a JSON body, read from its bytes without parsing it:
 * - `depth`: the deepest nesting of arrays and objects (0 for a scalar);
 * - `items`: the number of elements of the top-level array, or -1 when the body is not one;
 * - `values`: the number of values, counting an empty array or object twice.
 * Between slices of 256 KiB the scan lets other work run. It stops once `stop(counts)` is true
 * (`complete: false`; the counts so far are lower bounds). On invalid JSON the counts are
 * rough; JSON.parse refuses such a body anyway.
 */
export async function scanJson(bytes, { stop = () => false, slice = SCAN_SLICE } = {}) {
  const s = { depth: 0, maxDepth: 0, commas: 0, allCommas: 0, containers: 0, inString: false, skip: 0, first: -1, topNonEmpty: false };
  const counts = () => ({
    depth: s.maxDepth,
    items: s.first === 0x5b ? (s.topNonEmpty ? s.commas + 1 : 0) : -1,
    values: s.allCommas + s.containers + (s.first === -1 ? 0 : 1),
  });
  for (let from = 0; from < bytes.length; from += slice) {
    if (from > 0) await new Promise((r) => setImmediate(r));
    scanSlice(s, bytes, from, Math.min(from + slice, bytes.length));
    const c = counts();
    if (from + slice < bytes.length && stop(c)) return { ...c, complete: false };
  }
  return { ...counts(), complete: true };
}
