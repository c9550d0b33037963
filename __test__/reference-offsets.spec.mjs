// Differential test: stream offsets (the `offset` query parameter and `stream-next-offset`)
// against the reference's offset.ts, on a few thousand random offsets: ours decode to the same
// epoch and seq, refuse the same texts, and encode the same text.
import assert from "node:assert/strict";
import { test } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { rng } from "./support/random-cases.mjs";
import { encodeOffset, decodeOffset } from "../apps/server/offsets.mjs";

const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const ALIASES = "OoIiLlabcdefghjkmnpqrstvwxyz";

function randomSeq(r) {
  switch (r.int(5)) {
    case 0: return BigInt(r.int(40)) - 1n;
    case 1: return BigInt(r.int(2 ** 31));
    case 2: return (BigInt(r.int(2 ** 32)) << 32n) | BigInt(r.int(2 ** 32));
    case 3: return r.pick([2n ** 63n - 1n, 2n ** 64n - 2n, 2n ** 64n - 1n, 2n ** 32n - 1n, 2n ** 32n]);
    default: return BigInt(r.int(1000));
  }
}

function randomText(r) {
  const chars = (n, from) => Array.from({ length: n }, () => from[r.int(from.length)]).join("");
  switch (r.int(8)) {
    case 0: return chars(26, ALPHABET);
    case 1: return chars(26, ALPHABET + ALIASES);
    case 2: return chars(r.pick([0, 1, 25, 27, 52]), ALPHABET);
    case 3: {
      const t = chars(26, ALPHABET).split("");
      t[r.int(26)] = r.pick(["U", "u", "-", " ", "\u00e9", "*", "\0"]);
      return t.join("");
    }
    case 4: return chars(24, ALPHABET) + "😀";
    case 5: return r.pick(["-1", "", " -1", "-1 ", "-2", "0", "now"]);
    default: {
      const text = encodeOffset(r.int(2 ** 32), randomSeq(r) < -1n ? -1n : randomSeq(r));
      return r.chance(0.3) ? text.toLowerCase() : text;
    }
  }
}

test("offsets decode and encode exactly as the reference's", async () => {
  const r = rng(19);
  const decode = Array.from({ length: 3000 }, () => randomText(r));
  const encode = Array.from({ length: 2000 }, () => {
    const seq = randomSeq(r);
    return [r.pick([0, 1, 7, 2 ** 31, 2 ** 32 - 1, r.int(2 ** 32)]), seq < -1n ? -1n : seq, 0];
  });
  // The in-block index: encoded by the reference, ignored when reading.
  for (let i = 0; i < 200; i++) encode.push([r.int(2 ** 32), BigInt(r.int(1e6)), 1 + r.int(2 ** 32 - 1)]);
  const ref = await runReference("offsets", { decode, encode }, { retries: 2 });
  let refused = 0;
  decode.forEach((text, i) => {
    const want = ref.decode[i];
    const got = decodeOffset(text);
    if (want.error !== undefined) {
      refused++;
      assert.equal(got, null, `${JSON.stringify(text)}: the reference refuses it (${want.error})`);
    } else if (want.start) {
      assert.deepEqual(got, { epoch: 0, seq: -1n }, JSON.stringify(text));
    } else {
      assert.deepEqual(got, { epoch: want.epoch, seq: want.seq }, JSON.stringify(text));
    }
  });
  assert.ok(refused > 300 && refused < 2000, `a mix of valid and invalid texts (${refused} refused)`);
  encode.forEach(([epoch, seq, inBlock], i) => {
    if (inBlock === 0) assert.equal(encodeOffset(epoch, seq), ref.encode[i], `encode(${epoch}, ${seq})`);
    // What a client reads back from an offset with an in-block index is its row.
    assert.deepEqual(decodeOffset(ref.encode[i]), { epoch, seq: ((seq + 1n) & (2n ** 64n - 1n)) - 1n }, `decode(encode(${epoch}, ${seq}, ${inBlock}))`);
  });
}, { skip: !referenceAvailable(), timeout: 60_000 });

test("every offset we write reads back as itself", () => {
  const r = rng(7);
  for (let i = 0; i < 5000; i++) {
    const epoch = r.int(2 ** 32);
    const seq = randomSeq(r);
    if (seq < -1n || seq >= 2n ** 64n - 1n) continue;
    assert.deepEqual(decodeOffset(encodeOffset(epoch, seq)), { epoch, seq });
  }
});
