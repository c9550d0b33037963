// Bad input through the JS API: every case gets a coded rejection (or a coded throw for the
// synchronous Store.open); none crashes or hangs, and nothing acknowledged before is lost.
import assert from "node:assert/strict";
import { join } from "node:path";
import { writeFileSync } from "node:fs";
import { test, dt, tempDir, rejectsWithCode } from "./harness.mjs";

const { Store } = dt;

function throwsWithCode(fn, code) {
  let err;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof Error, `expected a throw with ${code}`);
  assert.equal(err.code, code, err.message);
  return err;
}

test("Store.open rejects bad arguments, unwritable paths and non-SQLite files with codes", () => {
  const dir = tempDir();
  const junk = join(dir, "junk.sqlite");
  writeFileSync(junk, Buffer.alloc(8192, 0x42));
  const cases = [
    [() => Store.open(123), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(""), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(join(dir, "x.sqlite"), "fast"), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(join(dir, "x.sqlite"), { readers: -1 }), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(join(dir, "x.sqlite"), { readers: 1000 }), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(join(dir, "x.sqlite"), { cacheBytes: "big" }), "ERR_INVALID_ARGUMENT"],
    [() => Store.open(join(dir, "a\0b.sqlite")), "ERR_INVALID_ARGUMENT"],
    [() => Store.open("\0"), "ERR_INVALID_ARGUMENT"],
    [() => Store.open("/proc/definitely/not/writable/x.sqlite"), "ERR_STORAGE"],
    [() => Store.open(dir), "ERR_STORAGE"],
    [() => Store.open(junk), "ERR_STORAGE"],
  ];
  for (const [fn, code] of cases) throwsWithCode(fn, code);
  const err = throwsWithCode(() => Store.open(junk), "ERR_STORAGE");
  assert.equal(err.sqliteCode, "SQLITE_NOTADB");
});

test("append checks its arrays' lengths before reading an element (huge and sparse arrays)", async () => {
  const store = Store.open(":memory:", { maxAppendRows: 10 });
  assert.deepEqual(store.limits, { maxPayloadBytes: 8 * 1024 * 1024, maxAppendBytes: 64 * 1024 * 1024, maxAppendRows: 10 });
  await store.createStream("s");
  let reads = 0;
  const watched = (n) => {
    const a = [];
    a.length = n;
    Object.defineProperty(a, 0, { get: () => (reads++, "x") });
    return a;
  };
  const sparse = watched(2 ** 31);
  let err = await rejectsWithCode(store.append("s", sparse), "ERR_PAYLOAD_TOO_LARGE");
  assert.equal(err.message, "append of 2147483648 rows exceeds the limit of 10 rows per call");
  err = await rejectsWithCode(store.append("s", ["a", "b"], { routingKeys: watched(2 ** 31) }), "ERR_INVALID_ARGUMENT");
  assert.equal(err.message, "routingKeys has 2147483648 entries but there are 2 payloads");
  await rejectsWithCode(store.append("", watched(11)), "ERR_INVALID_ARGUMENT");
  assert.equal(reads, 0);
  assert.equal(store.stats().appendErrors, 3);
  // The default cap: 100,000 rows.
  const big = Store.open(":memory:");
  await big.createStream("s");
  assert.equal(big.limits.maxAppendRows, 100_000);
  await rejectsWithCode(big.append("s", watched(2 ** 32 - 1)), "ERR_PAYLOAD_TOO_LARGE");
  assert.equal(reads, 0);
  await big.close();
  await store.close();
});

test("async methods reject (never throw) with the right code, and acknowledged rows survive", async () => {
  const store = Store.open(join(tempDir(), "bad.sqlite"), { maxPayloadBytes: 1024, maxAppendRows: 10 });
  await store.createStream("s", { contentType: "application/json" });
  const acked = [];
  for (let i = 0; i < 5; i++) {
    const ack = await store.append("s", [`{"i":${i}}`]);
    acked.push([ack.firstOffset, `{"i":${i}}`]);
  }

  const cases = [
    // [label, () => promise, code]
    ["createStream(number)", () => store.createStream(42), "ERR_INVALID_ARGUMENT"],
    ["createStream('')", () => store.createStream(""), "ERR_INVALID_ARGUMENT"],
    ["createStream(NUL)", () => store.createStream("a\0b"), "ERR_INVALID_ARGUMENT"],
    ["createStream(2000 chars)", () => store.createStream("x".repeat(2000)), "ERR_INVALID_ARGUMENT"],
    ["createStream contentType number", () => store.createStream("t", { contentType: 5 }), "ERR_INVALID_ARGUMENT"],
    ["createStream options string", () => store.createStream("t", "json"), "ERR_INVALID_ARGUMENT"],
    ["createStream other content type", () => store.createStream("s", { contentType: "text/plain" }), "ERR_STREAM_EXISTS"],
    ["getStream(undefined)", () => store.getStream(undefined), "ERR_INVALID_ARGUMENT"],
    ["deleteStream({})", () => store.deleteStream({}), "ERR_INVALID_ARGUMENT"],
    ["append unknown stream", () => store.append("nope", ["x"]), "ERR_STREAM_NOT_FOUND"],
    ["append stream number", () => store.append(7, ["x"]), "ERR_INVALID_ARGUMENT"],
    ["append payloads not array", () => store.append("s", "x"), "ERR_INVALID_ARGUMENT"],
    ["append payloads missing", () => store.append("s"), "ERR_INVALID_ARGUMENT"],
    ["append empty array", () => store.append("s", []), "ERR_INVALID_ARGUMENT"],
    ["append number payload", () => store.append("s", [123]), "ERR_INVALID_ARGUMENT"],
    ["append object payload", () => store.append("s", [{ a: 1 }]), "ERR_INVALID_ARGUMENT"],
    ["append null payload", () => store.append("s", [null]), "ERR_INVALID_ARGUMENT"],
    ["append Uint16Array payload", () => store.append("s", [new Uint16Array(2)]), "ERR_INVALID_ARGUMENT"],
    ["append payload over max", () => store.append("s", [Buffer.alloc(1025)]), "ERR_PAYLOAD_TOO_LARGE"],
    ["append too many rows", () => store.append("s", Array.from({ length: 11 }, () => "x")), "ERR_PAYLOAD_TOO_LARGE"],
    ["append options string", () => store.append("s", ["x"], "opts"), "ERR_INVALID_ARGUMENT"],
    ["expectedOffset number", () => store.append("s", ["x"], { expectedOffset: 5 }), "ERR_INVALID_ARGUMENT"],
    ["expectedOffset negative", () => store.append("s", ["x"], { expectedOffset: -1n }), "ERR_INVALID_ARGUMENT"],
    ["expectedOffset 2^64", () => store.append("s", ["x"], { expectedOffset: 2n ** 64n }), "ERR_INVALID_ARGUMENT"],
    ["expectedOffset mismatch", () => store.append("s", ["x"], { expectedOffset: 99n }), "ERR_SEQ_MISMATCH"],
    ["routingKeys length", () => store.append("s", ["x", "y"], { routingKeys: [null] }), "ERR_INVALID_ARGUMENT"],
    ["routingKeys not array", () => store.append("s", ["x"], { routingKeys: "k" }), "ERR_INVALID_ARGUMENT"],
    ["routingKeys number entry", () => store.append("s", ["x"], { routingKeys: [5] }), "ERR_INVALID_ARGUMENT"],
    ["appendMs NaN", () => store.append("s", ["x"], { appendMs: NaN }), "ERR_INVALID_ARGUMENT"],
    ["appendMs fractional", () => store.append("s", ["x"], { appendMs: 1.5 }), "ERR_INVALID_ARGUMENT"],
    ["appendMs huge", () => store.append("s", ["x"], { appendMs: 1e300 }), "ERR_INVALID_ARGUMENT"],
    ["contentType number", () => store.append("s", ["x"], { contentType: 1 }), "ERR_INVALID_ARGUMENT"],
    ["read without options", () => store.read("s"), "ERR_INVALID_ARGUMENT"],
    ["read null options", () => store.read("s", null), "ERR_INVALID_ARGUMENT"],
    ["read missing from", () => store.read("s", {}), "ERR_INVALID_ARGUMENT"],
    ["read from number", () => store.read("s", { from: 0 }), "ERR_INVALID_ARGUMENT"],
    ["read from negative", () => store.read("s", { from: -1n }), "ERR_INVALID_ARGUMENT"],
    ["read to number", () => store.read("s", { from: 0n, to: 3 }), "ERR_INVALID_ARGUMENT"],
    ["read limit negative", () => store.read("s", { from: 0n, limit: -1 }), "ERR_INVALID_ARGUMENT"],
    ["read limit absurd", () => store.read("s", { from: 0n, limit: 1e12 }), "ERR_INVALID_ARGUMENT"],
    ["read maxBytes NaN", () => store.read("s", { from: 0n, maxBytes: NaN }), "ERR_INVALID_ARGUMENT"],
    ["read unknown stream", () => store.read("nope", { from: 0n }), "ERR_STREAM_NOT_FOUND"],
    ["deleteWalThrough number", () => store.deleteWalThrough("s", 5), "ERR_INVALID_ARGUMENT"],
    ["deleteWalThrough unknown", () => store.deleteWalThrough("nope", 5n), "ERR_STREAM_NOT_FOUND"],
  ];
  assert.ok(cases.length >= 30);
  for (const [label, call, code] of cases) {
    let p;
    assert.doesNotThrow(() => {
      p = call();
    }, `${label} threw synchronously`);
    assert.equal(typeof p?.then, "function", `${label} did not return a promise`);
    const err = await rejectsWithCode(p, code).catch((e) => {
      throw new Error(`${label}: ${e.message}`);
    });
    assert.ok(err.message.length > 0, label);
  }

  // Nothing acknowledged was lost, and the store still works.
  const rows = await store.read("s", { from: 0n });
  assert.deepEqual(rows.map((r) => [r.offset, r.payload.toString()]), acked);
  assert.equal((await store.append("s", ["ok"])).firstOffset, 5n);

  await store.close();
  for (const [label, call] of [
    ["append", () => store.append("s", ["x"])],
    ["read", () => store.read("s", { from: 0n })],
    ["createStream", () => store.createStream("t")],
    ["getStream", () => store.getStream("s")],
    ["listStreams", () => store.listStreams()],
    ["deleteStream", () => store.deleteStream("s")],
    ["deleteWalThrough", () => store.deleteWalThrough("s", 1n)],
  ]) {
    await rejectsWithCode(call(), "ERR_CLOSED").catch((e) => {
      throw new Error(`${label} after close: ${e.message}`);
    });
  }
  // close() twice is fine.
  await store.close();
  // The file is intact after close: reopen and check.
  const again = Store.open(store.stats().path);
  assert.equal((await again.read("s", { from: 0n })).length, 6);
  await again.close();
});
