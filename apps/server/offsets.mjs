// Stream offsets as the reference server writes them in HTTP headers: epoch (u32), seq + 1
// (u64) and an in-block index (u32), 16 big-endian bytes in fixed 26-character Crockford
// base32; "-1" is the position before the first row.

const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const DECODE = new Map();
for (let i = 0; i < ALPHABET.length; i++) {
  DECODE.set(ALPHABET[i], i);
  DECODE.set(ALPHABET[i].toLowerCase(), i);
}
for (const [alias, v] of [["O", 0], ["o", 0], ["I", 1], ["i", 1], ["L", 1], ["l", 1]]) DECODE.set(alias, v);

/** encodeOffset(epoch, seq): seq is a bigint >= -1. */
export function encodeOffset(epoch, seq) {
  if (typeof seq !== "bigint" || seq < -1n) throw new Error("invalid offset");
  const raw = (seq + 1n) & 0xffffffffffffffffn;
  let n = (BigInt(epoch >>> 0) << 96n) | (raw << 32n);
  n <<= 2n;
  let out = "";
  for (let i = 0; i < 26; i++) out += ALPHABET[Number((n >> (5n * BigInt(25 - i))) & 31n)];
  return out;
}

/**
 * The last offset a client has seen: "-1", a 26-character offset, or null when invalid. Decodes
 * exactly as the reference's `parseOffsetResult` does: the 130 bits lose the two padding bits
 * `encodeOffset` added (so any top bits past 128 are dropped, not refused), and the in-block
 * index (the last 32 bits) is ignored.
 */
export function decodeOffset(text) {
  if (text === "-1") return { epoch: 0, seq: -1n };
  if (typeof text !== "string" || text.length !== 26) return null;
  let n = 0n;
  for (const ch of text) {
    const v = DECODE.get(ch);
    if (v === undefined) return null;
    n = (n << 5n) | BigInt(v);
  }
  n = (n >> 2n) & ((1n << 128n) - 1n);
  const epoch = Number(n >> 96n);
  const raw = (n >> 32n) & 0xffffffffffffffffn;
  return { epoch, seq: raw - 1n };
}
