// `ErrorCode`: every code the module's errors carry, one enum (typed in index.d.ts). Errors
// raised by real operations carry a code from it: every test that checks a code through
// `rejectsWithCode` checks it is one of these (see harness.mjs).
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
  await rejectsWithCode(store.append("nope", ["{}"]), dt.ErrorCode.StreamNotFound);
  await rejectsWithCode(store.append("s", ["{}"], { expectedOffset: 7n }), dt.ErrorCode.SeqMismatch);
  const engine = new dt.TouchEngine(store);
  await rejectsWithCode(engine.wait({ stream: "s", cursor: "now", keys: ["k"], timeoutMs: 10 }), dt.ErrorCode.TouchNotEnabled);
  engine.setTouchConfig("s", { enabled: true });
  await rejectsWithCode(engine.wait({ stream: "s", cursor: "not a cursor", keys: ["k"], timeoutMs: 10 }), dt.ErrorCode.InvalidCursor);
  const ac = new AbortController();
  const parked = engine.wait({ stream: "s", cursor: "now", keys: ["k"], timeoutMs: 10_000, signal: ac.signal });
  ac.abort();
  await rejectsWithCode(parked, dt.ErrorCode.Aborted);
  await engine.close();
  await store.close();
  await rejectsWithCode(store.append("s", ["{}"]), dt.ErrorCode.Closed);
});
