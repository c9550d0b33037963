// `waitForAny` and `touch` are small JavaScript functions installed over the native methods at
// load (they read the arguments in JIT-compiled code and hand them to the native core with a
// per-journal handle); these tests pin that they behave as the native methods did: each field
// read once, in order, the same checks and codes, any receiver shape.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test, dt, rejectsWithCode } from "./harness.mjs";
import { rng } from "./support/random-cases.mjs";

const { TouchJournal } = dt;
// The private entry points the JS methods call: on the internal native module only.
const internal = createRequire(import.meta.url)("../lib/internal/native.js");

test("the package exposes none of the private entry points", () => {
  for (const name of ["_waitForAny", "_touch", "_waitArgs", "_waitArgsBuffer", "_journalHandle", "_journalFastPath", "_sqlFunctions", "_setHelpers"]) {
    assert.equal(name in dt, false, name);
  }
  assert.equal("_handle" in TouchJournal.prototype, false);
  assert.deepEqual(Object.keys(dt).filter((k) => k.startsWith("_")), []);
  assert.equal(typeof internal._waitForAny, "function");
});

test("both runtimes take the JavaScript methods (installed at load)", () => {
  assert.match(String(TouchJournal.prototype.waitForAny), /handleFor\(this\)/, "waitForAny is the installed JS method");
  assert.match(String(TouchJournal.prototype.touch), /touchSlow\(this/, "touch is the installed JS method");
  // ... and the fast path: typed arrays over the journal's argument buffer.
  const j = new TouchJournal();
  j.touch(1);
  const [record] = Object.getOwnPropertySymbols(j).map((s) => j[s]);
  assert.ok(record.u32 instanceof Uint32Array && record.f64 instanceof Float64Array);
  j.stop();
});

test("each field of the argument is read exactly once, in a fixed order", async () => {
  const j = new TouchJournal();
  const reads = [];
  const args = {};
  for (const [name, value] of [
    ["keys", [5]],
    ["exactKeys", null],
    ["afterGeneration", 0],
    ["timeoutMs", 5000],
    ["signal", undefined],
  ]) {
    Object.defineProperty(args, name, {
      get() {
        reads.push(name);
        return value;
      },
    });
  }
  const p = j.waitForAny(args);
  assert.deepEqual(reads, ["keys", "exactKeys", "afterGeneration", "timeoutMs", "signal"]);
  j.touch(5);
  j.flush();
  assert.equal((await p).keyId, 5);
  j.stop();
});

test("a frozen journal, a subclass and a method taken off the prototype all wait", async () => {
  const frozen = Object.freeze(new TouchJournal());
  class Sub extends TouchJournal {}
  const sub = new Sub();
  const { waitForAny } = TouchJournal.prototype;
  const plain = new TouchJournal();
  const waits = [
    frozen.waitForAny({ keys: [1], afterGeneration: 0, timeoutMs: 5000 }),
    frozen.waitForAny({ keys: [1], afterGeneration: 0, timeoutMs: 5000 }),
    sub.waitForAny({ keys: [1], afterGeneration: 0, timeoutMs: 5000 }),
    waitForAny.call(plain, { keys: [1], afterGeneration: 0, timeoutMs: 5000 }),
  ];
  for (const j of [frozen, sub, plain]) {
    j.touch(1);
    j.flush();
  }
  for (const hit of await Promise.all(waits)) assert.equal(hit.keyId, 1);
  // Each journal answers only for its own waiters.
  const other = new TouchJournal();
  const mine = plain.waitForAny({ keys: [2], timeoutMs: 50 });
  other.touch(2);
  other.flush();
  assert.equal(await mine, null);
  for (const j of [frozen, sub, plain, other]) j.stop();
});

test("a receiver that is not a TouchJournal throws; bad arguments reject with codes", async () => {
  const { waitForAny } = TouchJournal.prototype;
  for (const receiver of [undefined, null, {}, 7, new Map()]) {
    assert.throws(() => waitForAny.call(receiver, { keys: [1], timeoutMs: 10 }), Error, String(receiver));
  }
  // touch() too, whether or not some journal is staging touches at the time.
  const { touch } = TouchJournal.prototype;
  const staging = new TouchJournal();
  for (const stage of [false, true]) {
    if (stage) staging.touch(1);
    for (const receiver of [undefined, null, {}, 7, new Map()]) {
      assert.throws(() => touch.call(receiver, 1), /TouchJournal/, `${String(receiver)}, staging: ${stage}`);
    }
  }
  staging.stop();
  const j = new TouchJournal();
  for (const bad of [undefined, null, 5, "x", [1, 2], () => {}]) {
    await rejectsWithCode(j.waitForAny(bad), "ERR_INVALID_ARGUMENT");
  }
  await rejectsWithCode(j.waitForAny({ keys: [1] }), "ERR_INVALID_ARGUMENT"); // timeoutMs required
  await rejectsWithCode(j.waitForAny({ keys: [-1], timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(j.waitForAny({ keys: "1", timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(j.waitForAny({ keys: [1], timeoutMs: 10, signal: {} }), "ERR_INVALID_ARGUMENT");
  // The internal entry point refuses anything but a journal's own handle.
  for (const handle of [{}, null, 1, j]) {
    assert.throws(() => internal._waitForAny(handle, { keys: [1], timeoutMs: 10 }, [1], null, 0, 10, null), /TouchJournal handle/);
    assert.throws(() => internal._touch(handle, 1), /TouchJournal handle/);
  }
  j.stop();
});

test("touch checks its arguments as before and feeds the journal it is called on", async () => {
  const j = Object.freeze(new TouchJournal());
  const throwsCode = (f, code) =>
    assert.throws(f, (e) => e.code === code, `expected ${code}`);
  throwsCode(() => j.touch(-1), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.touch(1.5), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.touch("1"), "ERR_INVALID_ARGUMENT");
  throwsCode(() => j.touch(1, 5), "ERR_INVALID_ARGUMENT"); // offsets are bigint
  throwsCode(() => j.touch(1, 5n, 7), "ERR_INVALID_ARGUMENT");
  assert.throws(() => TouchJournal.prototype.touch.call({}, 1));
  assert.equal(j.getMeta().pendingKeys, 0, "refused touches add nothing");
  const w = j.waitForAny({ keys: [9], afterGeneration: 0, timeoutMs: 5000 });
  const exact = j.waitForAny({ keys: [], exactKeys: ["00000000000000aa"], afterGeneration: 0, timeoutMs: 5000 });
  j.touch(9, 41n, "00000000000000AA");
  j.touch(10); // optional arguments may be left out
  j.touch(11, undefined, null);
  assert.equal(j.getMeta().pendingKeys, 3);
  j.flush();
  const [hit, exactHit] = await Promise.all([w, exact]);
  assert.equal(hit.keyId, 9);
  assert.equal(hit.bucketMaxSourceOffsetSeq, 41n);
  assert.equal(exactHit.keyId, 0, "exact waiters are woken by the routing key (J9)");
  assert.equal(j.getLastFlushedSourceOffsetSeq(), 41n);
  j.stop();
});

test("plain arrays of u32 ids are copied in JavaScript; every other key list takes the general path", async () => {
  const j = new TouchJournal();
  // Accepted on the copy path: the edges of the u32 range, -0, duplicates, an empty list.
  const edge = j.waitForAny({ keys: [0xffffffff, -0, 7, 7], afterGeneration: 0, timeoutMs: 5000 });
  const empty = j.waitForAny({ keys: [], afterGeneration: 0, timeoutMs: 5000 });
  assert.equal(await empty, null, "no key: resolved at once (J11)");
  // A long list (the copy buffer is reused, so a shorter wait after it must not see its tail).
  const long = Array.from({ length: 1024 }, (_, i) => 100_000 + i);
  const wLong = j.waitForAny({ keys: long, afterGeneration: 0, timeoutMs: 5000 });
  const wShort = j.waitForAny({ keys: [55], afterGeneration: 0, timeoutMs: 5000 });
  // Key lists the copy path refuses behave as the native parser says.
  for (const keys of [[1, 1.5], [1, -1], [1, 2 ** 32], [1, "2"], [1, , 3], [1, null], new Array(1025).fill(1)]) {
    await rejectsWithCode(j.waitForAny({ keys, afterGeneration: 0, timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
  }
  const typed = j.waitForAny({ keys: Uint32Array.of(66), afterGeneration: 0, timeoutMs: 5000 });
  const mixed = j.waitForAny({ keys: [77], exactKeys: ["00000000000000bb"], afterGeneration: 0, timeoutMs: 5000 });
  // Bad afterGeneration / timeoutMs / signal on the copy path keep their codes.
  await rejectsWithCode(j.waitForAny({ keys: [1], afterGeneration: -1, timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(j.waitForAny({ keys: [1], timeoutMs: NaN }), "ERR_INVALID_ARGUMENT");
  await rejectsWithCode(j.waitForAny({ keys: [1], timeoutMs: 10, signal: 5 }), "ERR_INVALID_ARGUMENT");
  assert.equal(j.getActiveWaiters(), 5);
  // Only the long list's last key: only that waiter wakes (a broad one: keyId 0, J9).
  j.touch(100_000 + 1023);
  j.flush();
  assert.deepEqual(await wLong, { ...(await wLong), keyId: 0, generation: 1 });
  assert.equal(j.getActiveWaiters(), 4);
  for (const k of [0, 66, 77]) j.touch(k);
  j.flush();
  const hits = await Promise.all([edge, typed, mixed]);
  assert.deepEqual(hits.map((h) => [h.keyId, h.generation]), [[0, 2], [66, 2], [77, 2]]);
  assert.equal(j.getActiveWaiters(), 1, "the one-key wait did not inherit the long list's keys");
  j.touch(0xffffffff);
  j.touch(55);
  j.flush();
  assert.equal((await wShort).keyId, 55);
  // The fast path's buffer accessor refuses anything but a journal's own handle.
  for (const handle of [{}, null, 1, j]) assert.throws(() => internal._waitArgsBuffer(handle), /TouchJournal handle/);
  j.stop();
});

test("worker threads each get their own JS methods, handles and key buffers, and exit on their own", async () => {
  const { Worker } = await import("node:worker_threads");
  const { waitScenario } = await import("./support/journal-worker.mjs");
  const url = new URL("./support/journal-worker.mjs", import.meta.url);
  const run = (w) =>
    new Promise((resolve, reject) => {
      let message = null;
      w.on("message", (m) => (message = m));
      w.once("error", reject);
      w.once("exit", (code) => resolve({ message, code }));
    });
  const workers = [0, 1, 2].map(() => run(new Worker(url)));
  assert.equal(await waitScenario(), "");
  // A worker whose journals are stopped has nothing left to keep it alive: it exits with 0.
  assert.deepEqual(await Promise.all(workers), Array(3).fill({ message: "", code: 0 }));
});

test("an element getter that waits on the same journal mid-copy does not mix up the key lists", async () => {
  const j = new TouchJournal();
  let inner;
  const keys = [1, 2, 3];
  Object.defineProperty(keys, 1, {
    get() {
      inner ??= j.waitForAny({ keys: [900, 901, 902, 903], afterGeneration: 0, timeoutMs: 5000 });
      return 2;
    },
  });
  const outer = j.waitForAny({ keys, afterGeneration: 0, timeoutMs: 5000 });
  assert.equal(j.getActiveWaiters(), 2);
  j.touch(1); // the outer list's first key, overwritten by the inner list's first if mixed up
  j.flush();
  assert.equal((await outer).keyId, 1);
  assert.equal(j.getActiveWaiters(), 1);
  j.touch(903);
  j.flush();
  assert.equal((await inner).keyId, 903);
  j.stop();
});

test("a detached key buffer (transferred away by whoever found it) only costs the fast path", async () => {
  const j = new TouchJournal();
  await j.waitForAny({ keys: [1], afterGeneration: 0, timeoutMs: 1 }); // makes the handle
  for (const sym of Object.getOwnPropertySymbols(j)) {
    const buf = j[sym]?.u32?.buffer;
    if (buf) structuredClone(buf, { transfer: [buf] }); // detaches it where the runtime allows
  }
  const w = j.waitForAny({ keys: [77, 78], afterGeneration: 0, timeoutMs: 5000 });
  j.touch(78);
  j.flush();
  assert.equal((await w).keyId, 78);
  j.stop();
});

test("the fast path checks afterGeneration and timeoutMs exactly as the general path does", async () => {
  const j = new TouchJournal();
  const outcome = async (p) => {
    try {
      const v = await p;
      return v === null ? "null" : `hit ${v.keyId}`;
    } catch (e) {
      return `${e.code}: ${e.message}`;
    }
  };
  const cases = [
    [{}, { timeoutMs: 0 }],
    [{ afterGeneration: -1 }, { afterGeneration: 1.5 }, { afterGeneration: 2 ** 32 }, { afterGeneration: NaN }],
    [{ afterGeneration: "1" }, { afterGeneration: 1n }, { afterGeneration: null }, { afterGeneration: undefined }],
    [{ timeoutMs: -1 }, { timeoutMs: NaN }, { timeoutMs: Infinity }, { timeoutMs: 2 ** 31 }, { timeoutMs: 1.5 }],
    [{ timeoutMs: "10" }, { timeoutMs: null }, { timeoutMs: 10n }],
  ].flat();
  for (const extra of cases) {
    const args = (keys) => ({ keys, afterGeneration: 0, timeoutMs: 1, ...extra });
    // Array keys take the fast path (when the fields are numbers); a Uint32Array the general one.
    const fast = await outcome(j.waitForAny(args([5])));
    const general = await outcome(j.waitForAny(args(Uint32Array.of(5))));
    assert.equal(fast, general, JSON.stringify(extra, (_, v) => (typeof v === "bigint" ? `${v}n` : v)));
  }
  j.stop();
});

test("staged touches reach the journal exactly as one native call per touch would", async () => {
  // touch() stages what it can in typed arrays and hands it over with touchMany; a second
  // journal takes every touch through the native entry point, one call each. After every step
  // both must answer the same: pending keys, overflow, the exact (routing-key) history, the
  // bloom filter, the highest offset, and waiters. Two such pairs take the touches in runs
  // (the stage follows one journal at a time), and some steps cross a full stage (4,096).
  // The second pair's bucket holds every key of a big step, so a touch lost shows in its count.
  const opts = [40, 30_000].map((pendingMaxKeys) => ({ bucketMs: 60_000, filterPow2: 12, k: 3, pendingMaxKeys, keyIndexMaxKeys: 8 }));
  const rnd = rng(1).next;
  const pairs = opts.map((o) => {
    const native = new TouchJournal(o);
    const h = internal._journalHandle(native);
    return { staged: new TouchJournal(o), native, nativeTouch: (keyId, seq, rk) => internal._touch(h, keyId, seq, rk) };
  });
  const rkOf = (i) => i.toString(16).padStart(16, "0");
  const arg = (plain, keys, bad) => {
    const r = rnd();
    if (r < plain) return [Math.floor(rnd() * keys)];
    if (r < plain + (1 - plain) * (bad ? 0.4 : 0.6)) return [Math.floor(rnd() * 60), BigInt(Math.floor(rnd() * 1000))];
    if (!bad || r < plain + (1 - plain) * 0.7) return [Math.floor(rnd() * 60), rnd() < 0.5 ? null : BigInt(Math.floor(rnd() * 1000)), rkOf(Math.floor(rnd() * 50))];
    // Inputs the stage does not take: trimmed or bad routing keys, odd key ids and offsets.
    return [
      [1.5, -1, 2 ** 32, "7", 1n, 3][Math.floor(rnd() * 6)],
      [undefined, 2n ** 63n, -(2n ** 63n) - 1n, 5, 9n, null][Math.floor(rnd() * 6)],
      [" 00000000000000aa", "zz", "00000000000000AB", 17, undefined, null][Math.floor(rnd() * 6)],
    ];
  };
  const answer = (j) => {
    const m = j.getMeta();
    const g = j.getGeneration();
    return {
      pending: m.pendingKeys,
      overflow: m.overflowBuckets,
      generation: g,
      maxSeq: j.getLastFlushedSourceOffsetSeq(),
      maybe: Array.from({ length: 60 }, (_, k) => j.maybeTouchedSince(k, Math.max(0, g - 1))),
      exact: Array.from({ length: 52 }, (_, i) => j.exactTouchedSinceAny([rkOf(i === 51 ? 0xaa : i === 50 ? 0xab : i)], Math.max(0, g - 1))),
    };
  };
  for (let step = 0; step < 60; step++) {
    const big = step % 5 === 2;
    const n = big ? 4_200 + Math.floor(rnd() * 9_000) : 1 + Math.floor(rnd() * 30);
    // Half the big steps are plain key ids only: their stages fill up through touch()'s
    // shortest path; in the others a few offsets and routing keys go along.
    const plain = big ? (step % 10 === 2 ? 1 : 0.9995) : 0.5;
    const watched = Math.floor(rnd() * 60);
    const waits = pairs.flatMap(({ staged, native }) => [staged, native].map((j) => j.waitForAny({ keys: [watched], timeoutMs: 60_000 })));
    let p = pairs[step & 1];
    for (let i = 0; i < n; i++) {
      if (rnd() < (big ? 0.0005 : 0.2)) p = pairs[Math.floor(rnd() * 2)];
      const a = arg(plain, big ? 2 ** 20 : 60, !big);
      let se, ne;
      try {
        p.staged.touch(...a);
      } catch (e) {
        se = e.code;
      }
      try {
        p.nativeTouch(...a);
      } catch (e) {
        ne = e.code;
      }
      assert.equal(se, ne, `touch(${a.map(String)}) throws alike`);
    }
    for (const [k, { staged, native }] of pairs.entries()) {
      assert.deepEqual(answer(staged), answer(native), `step ${step}, pair ${k}, before the flush`);
      staged.flush();
      native.flush();
      assert.deepEqual(answer(staged), answer(native), `step ${step}, pair ${k}, after the flush`);
    }
    const hits = await Promise.race([Promise.all(waits), new Promise((r) => setTimeout(() => r(waits.map(() => "pending")), 20))]);
    assert.deepEqual(hits[0]?.keyId, hits[1]?.keyId);
    assert.deepEqual(hits[2]?.keyId, hits[3]?.keyId);
  }
  for (const { staged, native } of pairs) {
    staged.stop();
    native.stop();
  }
});

test("staged touches reach the journal by the end of the job, so its bucket flushes on time", async () => {
  const j = new TouchJournal({ bucketMs: 20 });
  const p = j.waitForAny({ keys: [3], timeoutMs: 2000 });
  for (let i = 0; i < 10; i++) j.touch(i);
  const t0 = Date.now();
  const hit = await p;
  assert.equal(hit?.keyId, 3);
  assert.ok(Date.now() - t0 < 1000, "woken by the bucket's own timer");
  j.stop();
});
