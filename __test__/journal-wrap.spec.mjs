// The generation wrap (B28): past generation 4294967295 the journal starts a new epoch instead
// of wrapping to 0, so no cursor silently goes backwards and no parked waiter misses a wake.
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";

const { TouchJournal, parseTouchCursor } = dt;
const MAX = 4294967295;

test("a journal near the wrap starts a new epoch, wakes every waiter, and old cursors go stale", async () => {
  const j = new TouchJournal({ initialGeneration: MAX - 1 });
  const epoch0 = j.getEpoch();
  j.touch(1);
  j.flush();
  assert.equal(j.getGeneration(), MAX);
  assert.equal(j.maybeTouchedSince(1, MAX - 1), true);
  const cursor = j.getCursor();
  // Parked at the last generation of the epoch: one on an untouched key, one on a key the next
  // bucket touches, one with an exact key.
  const untouched = j.waitForAny({ keys: [500], afterGeneration: MAX, timeoutMs: 60_000 });
  const touched = j.waitForAny({ keys: [2], afterGeneration: MAX, timeoutMs: 60_000 });
  const exact = j.waitForAny({ keys: [], exactKeys: ["00000000000000ee"], afterGeneration: MAX, timeoutMs: 60_000 });
  j.touch(2);
  j.flush();
  const hits = await Promise.all([untouched, touched, exact]);
  assert.ok(hits.every((h) => h && h.generation === 1), "every waiter woken by the epoch change");
  assert.notEqual(j.getEpoch(), epoch0);
  assert.equal(j.getGeneration(), 1);
  assert.equal(parseTouchCursor(cursor).epoch, epoch0, "the old cursor names the old epoch: the route answers stale");
  assert.equal(j.getCursor(), `${j.getEpoch()}:1`);
  // The new epoch starts clean and keeps working.
  assert.equal(j.maybeTouchedSince(2, 0), true);
  assert.equal(j.maybeTouchedSince(1, 0), false);
  const next = j.waitForAny({ keys: [3], timeoutMs: 60_000 });
  j.touch(3);
  j.flush();
  assert.equal((await next).generation, 2);
  await sleep(1);
  j.stop();
});
