// An engine over a file whose profiles a host saves itself (the swapped Prisma Streams
// server's): it learns them from the file (`reloadProfiles`, `profilePollMs`), and its memory
// report (`memoryStats`) resets nothing.
import assert from "node:assert/strict";
import { test, dt, sleep } from "./harness.mjs";

const { Store, TouchEngine } = dt;

async function eventually(what, check, ms = 3000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return;
    await sleep(20);
  }
  assert.fail(`${what} within ${ms} ms`);
}

test("an engine with profilePollMs adopts profiles saved by someone else, and drops them", async () => {
  const store = Store.open(":memory:");
  await store.createStream("s", { contentType: "application/json" });
  // The "host": another engine on the same store saves the profiles.
  const host = new TouchEngine(store, { autoProcess: false });
  const engine = new TouchEngine(store, { profilePollMs: 100, checkIntervalMs: 20 });
  const polling = new TouchEngine(store, { autoProcess: false });
  try {
    assert.equal(engine.getTouchConfig("s"), null);
    host.setTouchConfig("s", { enabled: true, coarseIntervalMs: 7 });
    await eventually("the poll picks up the new profile", () => engine.getTouchConfig("s")?.coarseIntervalMs === 7);
    // Without a poll, reloadProfiles reads it at once.
    assert.equal(polling.getTouchConfig("s"), null);
    polling.reloadProfiles(["s"]);
    assert.equal(polling.getTouchConfig("s").coarseIntervalMs, 7);
    // A changed config and a disabled touch are picked up the same way.
    host.setTouchConfig("s", { enabled: true, coarseIntervalMs: 9 });
    await eventually("the poll picks up the change", () => engine.getTouchConfig("s")?.coarseIntervalMs === 9);
    host.setProfile("s", { kind: "state-protocol" });
    await eventually("the poll sees touch disabled", () => engine.getTouchConfig("s") === null);
    polling.reloadProfiles();
    assert.equal(polling.getTouchConfig("s"), null);
    assert.throws(() => polling.reloadProfiles("s"), { code: "ERR_INVALID_ARGUMENT" });
  } finally {
    await Promise.all([host.close(), engine.close(), polling.close()]);
    await store.close();
  }
});

test("memoryStats reports journals and top streams without resetting the stats window", async () => {
  const store = Store.open(":memory:");
  const engine = new TouchEngine(store, { checkIntervalMs: 20 });
  try {
    for (const s of ["a", "b", "c"]) {
      await store.createStream(s, { contentType: "application/json" });
      engine.setTouchConfig(s, { enabled: true });
    }
    await engine.meta("a");
    await engine.meta("b");
    const rec = JSON.stringify({ type: "public.t", key: "1", value: { id: "1" }, headers: { operation: "insert" } });
    await store.append("a", [rec]);
    await engine.meta("a", { settle: "flush", timeoutMs: 3000 });
    engine.stats();
    const first = engine.memoryStats();
    assert.equal(first.memory.journals, 2);
    assert.equal(first.topStreams.length, 2);
    assert.equal(first.topStreams[0].stream, "a", "the touched journal has its filter");
    assert.ok(first.topStreams[0].journalFilterBytes > first.topStreams[1].journalFilterBytes);
    assert.equal(engine.memoryStats(1).topStreams.length, 1);
    assert.equal(engine.memoryStats(0).topStreams.length, 0);
    assert.deepEqual(engine.memoryStats().memory, first.memory, "nothing reset");
    assert.throws(() => engine.memoryStats(Number.NaN), { code: "ERR_INVALID_ARGUMENT" });
  } finally {
    await engine.close();
    await store.close();
  }
});
