// `ErrorCode`: every code the module's errors carry, one enum (typed in index.d.ts). Errors
// raised by real operations carry a code from it; every test that checks a code through
// `rejectsWithCode` checks it is one of these too (see harness.mjs).
import assert from "node:assert/strict";
import { test, dt, rejectsWithCode, tempDir } from "./harness.mjs";
import { join } from "node:path";

test("ErrorCode names every code once, and real failures carry codes from it", async () => {
  const codes = Object.values(dt.ErrorCode);
  assert.ok(codes.length >= 17, `only ${codes.length} codes`);
  assert.equal(new Set(codes).size, codes.length, "a code listed twice");
  for (const c of codes) assert.match(c, /^ERR_[A-Z_]+$/);
  assert.ok(Object.isFrozen(dt.ErrorCode));

  const store = dt.Store.open(join(tempDir(), "codes.sqlite"));
  await store.createStream("s", { contentType: "application/json" });
  const seen = [];
  const code = async (what, p) => {
    const e = await p.then(
      () => assert.fail(`${what}: resolved`),
      (e) => e
    );
    seen.push(e.code);
    return e.code;
  };
  assert.equal(await code("a missing stream", store.append("nope", ["{}"])), dt.ErrorCode.StreamNotFound);
  assert.equal(await code("a wrong expected offset", store.append("s", ["{}"], { expectedOffset: 7n })), dt.ErrorCode.SeqMismatch);
  const engine = new dt.TouchEngine(store);
  assert.equal(await code("a wait without touch", engine.wait({ stream: "s", cursor: "now", keys: ["k"], timeoutMs: 10 })), dt.ErrorCode.TouchNotEnabled);
  engine.setTouchConfig("s", { enabled: true });
  assert.equal(await code("a bad cursor", engine.wait({ stream: "s", cursor: "not a cursor", keys: ["k"], timeoutMs: 10 })), dt.ErrorCode.InvalidCursor);
  const ac = new AbortController();
  const parked = engine.wait({ stream: "s", cursor: "now", keys: ["k"], timeoutMs: 10_000, signal: ac.signal });
  ac.abort();
  assert.equal(await code("an aborted wait", parked), dt.ErrorCode.Aborted);
  await engine.close();
  await store.close();
  await rejectsWithCode(store.append("s", ["{}"]), dt.ErrorCode.Closed);
  for (const c of seen) assert.ok(codes.includes(c), `${c} is not in ErrorCode`);
});
