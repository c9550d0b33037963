// Differential test: the same touch / flush / wait sequence on our TouchJournal and on the
// reference's (run under Bun) gives the same answers: maybeTouchedSince(Any) (so the same bloom
// slots and false positives), exactTouchedSinceAny, meta counters, the hits of parked waiters
// (generation, keyId, bucketMaxSourceOffsetSeq), and the slot positions of single keys (J4).
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";

const { TouchJournal } = dt;

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const hex8 = (n) => (n >>> 0).toString(16).padStart(8, "0");

/** A random scenario. Routing keys are tied to key ids (as the processor makes them), so a
 *  bucket never holds more distinct routing keys than key ids (see B15 in docs/deviations.md). */
function scenario(seed, opts, n) {
  const rnd = mulberry32(seed);
  const int = (m) => Math.floor(rnd() * m);
  const universe = Array.from({ length: 300 }, () => Math.floor(rnd() * 4294967296) >>> 0);
  universe.push(0, 1, 2, 4294967295);
  const key = () => universe[int(universe.length)];
  const rkOf = (k) => hex8(k ^ 0x5a5a5a5a) + hex8(k);
  const ops = [];
  let gen = 0;
  let waitId = 0;
  let pending = false;
  for (let i = 0; i < n; i++) {
    const r = int(100);
    if (r < 40) {
      const k = key();
      const seq = int(3) === 0 ? null : { $bigint: String(int(1_000_000)) };
      const rk = int(2) === 0 ? null : int(10) === 0 ? rkOf(k).toUpperCase() : int(20) === 0 ? "not-hex" : rkOf(k);
      ops.push(["touch", k, seq, rk]);
      pending = true;
    } else if (r < 52) {
      ops.push(["flush"]);
      if (pending) gen++;
      pending = false;
    } else if (r < 68) {
      ops.push(["maybe", key(), Math.max(0, gen - int(6))]);
    } else if (r < 76) {
      ops.push(["maybeAny", Array.from({ length: 1 + int(4) }, key), Math.max(0, gen - int(6))]);
    } else if (r < 84) {
      const ks = Array.from({ length: int(4) }, () => rkOf(key()));
      if (int(5) === 0) ks.push("  " + rkOf(key()).toUpperCase() + " ", "zz");
      ops.push(["exact", ks, Math.max(0, gen - int(20))]);
    } else if (r < 96) {
      const nk = int(10) === 0 ? 40 + int(20) : int(4);
      const keys = Array.from({ length: nk }, key);
      const exact = int(4) === 0 ? [rkOf(key()), rkOf(key())] : null;
      ops.push(["wait", String(waitId++), keys, exact, Math.max(0, gen - int(3))]);
    } else if (r < 98) {
      ops.push(["coalesce", int(300) - 50]);
    } else {
      ops.push(["meta"]);
    }
  }
  ops.push(["flush"], ["meta"]);
  return { opts, ops };
}

async function runOurs({ opts, ops }) {
  const j = new TouchJournal(opts);
  const answers = [];
  const hits = {};
  for (const op of ops) {
    switch (op[0]) {
      case "touch":
        j.touch(op[1], op[2] ? BigInt(op[2].$bigint) : undefined, op[3] ?? undefined);
        break;
      case "flush":
        j.flush();
        break;
      case "coalesce":
        j.setCoalesceMs(op[1]);
        break;
      case "maybe":
        answers.push(j.maybeTouchedSince(op[1], op[2]));
        break;
      case "maybeAny":
        answers.push(j.maybeTouchedSinceAny(op[1], op[2]));
        break;
      case "exact":
        answers.push(j.exactTouchedSinceAny(op[1], op[2]));
        break;
      case "wait": {
        const id = op[1];
        j.waitForAny({ keys: op[2], exactKeys: op[3], afterGeneration: op[4], timeoutMs: 60_000 }).then((hit) => {
          hits[id] = hit && { generation: hit.generation, keyId: hit.keyId, bucketMaxSourceOffsetSeq: hit.bucketMaxSourceOffsetSeq };
        });
        break;
      }
      case "meta": {
        const m = j.getMeta();
        answers.push({
          generation: m.generation,
          pendingKeys: m.pendingKeys,
          overflowBuckets: m.overflowBuckets,
          activeWaiters: m.activeWaiters,
          bucketMaxSourceOffsetSeq: m.bucketMaxSourceOffsetSeq,
          filterSize: m.filterSize,
          k: m.k,
          bucketMs: m.bucketMs,
          coalesceMs: m.coalesceMs,
          cursorGeneration: Number(j.getCursor().split(":")[1]),
        });
        break;
      }
    }
  }
  await sleep(50);
  // Waits still parked now stay pending in the reference (B29); ours resolve null at stop.
  const resolved = { ...hits };
  const parked = j.getActiveWaiters();
  assert.equal(j.stop(), parked);
  return { answers, hits: resolved };
}

const cases = [
  // A tiny filter: collisions make the answers depend on the exact slot positions.
  { seed: 1, opts: { bucketMs: 100, filterPow2: 10, k: 4, pendingMaxKeys: 100_000, keyIndexMaxKeys: 32 }, n: 3000 },
  { seed: 2, opts: { bucketMs: 100, filterPow2: 10, k: 2, pendingMaxKeys: 25, keyIndexMaxKeys: 3 }, n: 3000 },
  { seed: 3, opts: { bucketMs: 40, filterPow2: 11, k: 7, pendingMaxKeys: 12, keyIndexMaxKeys: 1 }, n: 3000 },
  // The server defaults.
  { seed: 4, opts: { bucketMs: 100, filterPow2: 22, k: 4, pendingMaxKeys: 100_000, keyIndexMaxKeys: 32 }, n: 2000 },
  // Clamped options (J2).
  { seed: 5, opts: { bucketMs: 0.2, filterPow2: 3, k: 11.5, pendingMaxKeys: 0, keyIndexMaxKeys: -4 }, n: 800 },
];

test(
  "the same touch sequence gives the reference's answers, hits and slot positions",
  async () => {
    if (!referenceAvailable()) throw new Error("the reference is not installed (npm install)");
    const rnd = mulberry32(99);
    const slotCases = [];
    for (const key of [3117452744, 2528729918, 0, 1, 4294967295]) slotCases.push({ key, filterPow2: 22, k: 4 });
    for (let i = 0; i < 12; i++) {
      slotCases.push({ key: Math.floor(rnd() * 4294967296) >>> 0, filterPow2: 10 + Math.floor(rnd() * 13), k: 1 + Math.floor(rnd() * 8) });
    }
    for (const c of cases) {
      const input = scenario(c.seed, c.opts, c.n);
      const [ref, ours] = await Promise.all([runReference("journal", { ...input, slotCases }), runOurs(input)]);
      assert.equal(ours.answers.length, ref.answers.length);
      for (let i = 0; i < ref.answers.length; i++) {
        assert.deepEqual(ours.answers[i], ref.answers[i], `seed ${c.seed}: answer ${i} differs`);
      }
      const parked = Object.keys(ref.hits).length;
      assert.ok(parked > 0, "some waits were woken");
      assert.deepEqual(ours.hits, ref.hits, `seed ${c.seed}: hits differ`);
      if (c.seed === 1) {
        const ourSlots = slotCases.map(({ key, filterPow2, k }) =>
          [...new Set(TouchJournal.slotPositions(key, filterPow2, k))].sort((a, b) => a - b),
        );
        assert.deepEqual(ourSlots, ref.slots);
      }
    }
  },
  { timeout: 120_000 },
);
