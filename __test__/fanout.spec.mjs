// The fan-out over a real NATS JetStream server (issue 28): a writer TouchEngine publishes its
// journals' flushes, edge TouchEngines mirror them and serve waits and meta with the writer's
// cursors; gaps are never silent; the edges' interest reaches the writer.
import assert from "node:assert/strict";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { test, dt, tempDir, rejectsWithCode, sleep } from "./harness.mjs";
import { natsServerBinary, startNats } from "../testkit/nats-server.mjs";

const { Store, TouchEngine, keys } = dt;

const nats = natsServerBinary();
if (!nats.bin) throw new Error(`the fan-out tests need nats-server: ${nats.reason}`);

const POSTS = { entity: "public.posts", fields: [{ name: "authorId", encoding: "int64" }] };
const TABLE = keys.tableKeyId("public.posts");
const rec = (id, authorId, old) => {
  const r = { type: "public.posts", key: String(id), value: { id, authorId }, headers: { operation: old ? "update" : "insert" } };
  if (old) r.old_value = { id, authorId: old };
  return JSON.stringify(r);
};

let prefixes = 0;
const newPrefix = () => `t${process.pid}x${++prefixes}x${Math.floor(Math.random() * 1e6)}`;

async function until(f, what, ms = 20_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A writer on a file store with stream `s` (touch on), publishing under `prefix`. */
async function openWriter(dir, url, prefix, extra = {}, options = {}) {
  const store = Store.open(join(dir, "writer.sqlite"));
  if (!(await store.getStream("s"))) await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, {
    checkIntervalMs: 100,
    fanout: { role: "writer", url, prefix, beatMs: 100, writerUrl: "http://writer.test:8787", ...extra },
    ...options,
  });
  engine.setTouchConfig("s", { enabled: true });
  return { store, engine, close: async () => (await engine.close(), await store.close()) };
}

async function openEdge(url, prefix) {
  const store = Store.open(":memory:");
  const engine = new TouchEngine(store, { fanout: { role: "edge", url, prefix, beatMs: 100 } });
  return { store, engine, close: async () => (await engine.close(), await store.close()) };
}

async function edgeMeta(edge) {
  try {
    return await edge.engine.meta("s");
  } catch (e) {
    if (e.code === "ERR_STREAM_NOT_FOUND") return null;
    throw e;
  }
}

/**
 * Waits until the writer has processed and flushed everything and `edges` show its cursor and
 * its touch mode (which plans waits).
 */
async function settled(writer, ...edges) {
  const { cursor, touchMode } = await writer.engine.meta("s", { settle: "flush", timeoutMs: 10_000 });
  for (const e of edges) {
    await until(async () => {
      const m = await edgeMeta(e);
      return m?.cursor === cursor && m.touchMode === touchMode;
    }, `an edge at ${cursor} (${touchMode})`);
  }
  return cursor;
}

const check = (node, cursor, keyIds) => node.engine.wait({ stream: "s", cursor, keyIds, interestMode: "coarse", timeoutMs: 0 });

async function withNats(fn) {
  const dir = tempDir("dt-fanout-");
  const server = await startNats({ bin: nats.bin, storeDir: join(dir, "jetstream") });
  try {
    await fn(server, dir);
  } finally {
    await server.stop();
  }
}

test("a wait at an edge with the writer's cursor wakes on the flush that holds its key; cursors go between nodes", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    const [a, b] = [await openEdge(server.url, prefix), await openEdge(server.url, prefix)];
    try {
      const cursor = await settled(writer, a, b);
      const wa = a.engine.wait({ stream: "s", cursor, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 10_000 });
      const other = b.engine.wait({ stream: "s", cursor, keyIds: [TABLE + 1], interestMode: "coarse", timeoutMs: 1_500 });
      await sleep(50);
      const ack = await writer.store.append("s", [rec(1, 7)]);
      const ra = await wa;
      assert.equal(ra.touched, true);
      assert.equal(ra.bucketMaxSourceOffsetSeq, String(ack.lastOffset));
      const after = await settled(writer, a, b);
      assert.equal(ra.cursor, after, "the edge's cursor is the writer's");
      const rb = await other;
      assert.equal(rb.touched, false, "an untouched key does not wake at an edge");
      assert.equal(rb.stale, undefined);
      // An edge's cursor is valid at the writer and at the other edge, and means the same.
      for (const node of [writer, a, b]) {
        const before = await check(node, cursor, [TABLE]);
        assert.equal(before.touched, true, "touched since the first cursor");
        const now = await check(node, ra.cursor, [TABLE]);
        assert.deepEqual([now.touched, now.stale], [false, undefined]);
      }
      const m = await a.engine.meta("s");
      const wm = await writer.engine.meta("s");
      assert.equal(m.walScannedThrough, wm.walScannedThrough, "meta carries the writer's checkpoint");
      assert.equal(m.touchMode, wm.touchMode);
      // The writer's flush interval, which adapts to demand, as of its last beat.
      await until(async () => (await a.engine.meta("s")).coalesceMs === (await writer.engine.meta("s")).coalesceMs, "the writer's coalesceMs at the edge");
    } finally {
      await a.close();
      await b.close();
      await writer.close();
    }
  });
});

test("an edge refuses what only the writer does, naming the writer; it knows no other stream", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    const edge = await openEdge(server.url, prefix);
    try {
      await settled(writer, edge);
      let err;
      try {
        edge.engine.activateTemplates("s", [POSTS]);
      } catch (e) {
        err = e;
      }
      assert.equal(err?.code, "ERR_EDGE_READ_ONLY");
      assert.equal(err.writer, "http://writer.test:8787");
      const e2 = await rejectsWithCode(
        edge.engine.wait({ stream: "s", cursor: "now", keys: ["0000000000000001"], declareTemplates: [POSTS], timeoutMs: 100 }),
        "ERR_EDGE_READ_ONLY",
      );
      assert.equal(e2.writer, "http://writer.test:8787");
      await rejectsWithCode(edge.engine.wait({ stream: "nope", cursor: "now", keyIds: [1], timeoutMs: 10 }), "ERR_STREAM_NOT_FOUND");
      // What would process or re-read profiles from the edge's own (empty) store leaves the
      // mirrored stream alone.
      const before = (await edge.engine.meta("s")).cursor;
      const parked = edge.engine.wait({ stream: "s", cursor: before, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 20_000 });
      await edge.engine.tick();
      edge.engine.reloadProfiles();
      const early = await Promise.race([parked.then(() => "answered"), sleep(300).then(() => "parked")]);
      assert.equal(early, "parked", "the wait was not answered as if the stream were gone");
      await writer.store.append("s", [rec(1, 2)]);
      assert.equal((await parked).touched, true);
    } finally {
      await edge.close();
      await writer.close();
    }
  });
});

test("interest flows back: a fine wait held only at an edge gets fine-key wakes from the writer", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    const edge = await openEdge(server.url, prefix);
    try {
      const tpl = writer.engine.activateTemplates("s", [POSTS]).activated[0].templateId;
      await writer.store.append("s", [rec(1, 7), rec(2, 8)]);
      let cursor = await settled(writer, edge);
      const k7 = keys.watchKey(tpl, ["7"]);
      // Without any waiter the writer touches templates, not tuples: a wait on author 7 would
      // wake for a change of author 8's post. Held at the edge, the wait makes author 7's key
      // hot at the writer, which then touches tuple keys only.
      const w = edge.engine.wait({ stream: "s", cursor, keys: [k7], templateIdsUsed: [tpl], timeoutMs: 20_000 });
      await until(() => writer.engine.runtime("s").hotFineKeys >= 1, "the edge's interest at the writer");
      const hot = writer.engine.runtime("s");
      assert.ok(hot.fineWaitersActive >= 1, "the edge's waiter is counted at the writer");
      await writer.store.append("s", [rec(2, 9, 8)]);
      cursor = await settled(writer, edge);
      const early = await Promise.race([w.then(() => "woken"), sleep(300).then(() => "waiting")]);
      assert.equal(early, "waiting", "a change of another tuple does not wake the fine wait");
      await writer.store.append("s", [rec(1, 10, 7)]);
      const r = await w;
      assert.equal(r.touched, true);
      assert.equal(r.effectiveWaitKind, "fineKey");
    } finally {
      await edge.close();
      await writer.close();
    }
  });
});

test("an edge restarted within retention replays and answers its old cursors precisely", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    let edge = await openEdge(server.url, prefix);
    try {
      await writer.store.append("s", [rec(1, 7)]);
      const cursor = await settled(writer, edge);
      await edge.close();
      await writer.store.append("s", [rec(1, 8, 7)]);
      const after = await settled(writer);
      edge = await openEdge(server.url, prefix);
      await settled(writer, edge);
      const touched = await check(edge, cursor, [TABLE]);
      assert.deepEqual([touched.touched, touched.stale], [true, undefined], "the change after the old cursor is known");
      const none = await check(edge, cursor, [TABLE + 12345]);
      assert.deepEqual([none.touched, none.stale], [false, undefined], "and nothing else is invented");
      assert.equal((await check(edge, after, [TABLE])).touched, false);
    } finally {
      await edge.close();
      await writer.close();
    }
  });
});

test("past retention an edge's old cursors answer stale, never a silent miss; then it follows again", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix, { maxAgeMs: 1_000 });
    let edge = await openEdge(server.url, prefix);
    try {
      const cursor = await settled(writer, edge);
      await edge.close();
      await writer.store.append("s", [rec(1, 7)]);
      await settled(writer);
      await sleep(2_500); // the flush is past the stream's 1 s retention
      edge = await openEdge(server.url, prefix);
      const now = await settled(writer, edge);
      const r = await check(edge, cursor, [TABLE + 999]);
      assert.equal(r.stale, true, "a cursor older than what the edge could see is stale, even for an untouched key");
      assert.equal(r.cursor, now);
      // The writer itself still answers it precisely.
      assert.equal((await check(writer, cursor, [TABLE])).touched, true);
      const w = edge.engine.wait({ stream: "s", cursor: now, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 10_000 });
      await writer.store.append("s", [rec(2, 7)]);
      assert.equal((await w).touched, true, "the edge follows again");
    } finally {
      await edge.close();
      await writer.close();
    }
  });
});

test("a writer restarted with a shorter retention sets it on its JetStream stream", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    let writer = await openWriter(dir, server.url, prefix); // the default: 10 minutes
    await writer.store.append("s", [rec(1, 7)]);
    await settled(writer);
    await writer.close();
    writer = await openWriter(dir, server.url, prefix, { maxAgeMs: 1_000 });
    let edge = null;
    try {
      const cursor = (await writer.engine.meta("s", { settle: "flush", timeoutMs: 10_000 })).cursor;
      await writer.store.append("s", [rec(2, 7)]);
      await settled(writer);
      await sleep(2_500); // past the new retention, well within the old one
      edge = await openEdge(server.url, prefix);
      const now = await settled(writer, edge);
      const r = await check(edge, cursor, [TABLE + 999]);
      assert.equal(r.stale, true, `the flush after the cursor is gone from the broker: ${JSON.stringify(r)}`);
      assert.equal(r.cursor, now);
    } finally {
      await edge?.close();
      await writer.close();
    }
  });
}, { timeout: 60_000 });

test("the broker killed mid-load and restarted: no wait hangs, every edge answer matches the writer's or is stale", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    const edge = await openEdge(server.url, prefix);
    try {
      const cursors = [await settled(writer, edge)];
      let writing = true;
      let n = 0;
      const writes = (async () => {
        while (writing) {
          const id = n++ % 20;
          await writer.store.append("s", [JSON.stringify({ type: `t${id}`, key: "1", value: { id: n }, headers: { operation: "insert" } })]);
          if (n % 5 === 0) cursors.push((await writer.engine.meta("s")).cursor);
          await sleep(10);
        }
      })();
      // Wait chains at the edge: each re-waits from the cursor its reply gave, until stopped.
      // The stop is an AbortController's flag, read through its getter: under Bun (1.3.6, long
      // loaded processes, 2 runs in 14) chains were seen still starting waits 30 s after a
      // captured `let chains = false`, each wait answered in time.
      const stop = new AbortController();
      const current = new Map();
      const chain = async (table) => {
        let cursor = cursors[0];
        let replies = 0;
        let afterStop = 0;
        while (!stop.signal.aborted) {
          if (stopped !== null) afterStop++;
          current.set(table, { cursor, since: Date.now(), afterStop });
          const r = await edge.engine.wait({ stream: "s", cursor, keyIds: [keys.tableKeyId(table)], interestMode: "coarse", timeoutMs: 1_000 });
          cursor = r.cursor;
          replies++;
        }
        current.delete(table);
        return replies;
      };
      /** @type {number | null} */
      let stopped = null;
      const running = ["t1", "t2", "t3", "t19"].map(chain);
      await sleep(500);
      await server.kill();
      await sleep(5_000);
      await server.start();
      await sleep(1_000);
      writing = false;
      await writes;
      await settled(writer, edge);
      stopped = performance.now();
      stop.abort();
      // 30 s on the clock (not one 30 s timer, which could fire early under Bun); it stops
      // ticking once the replies are in, so it does not hold the file open.
      let answered = false;
      const budget = new Promise((resolve) => {
        const tick = () => {
          if (answered) return;
          if (performance.now() - /** @type {number} */ (stopped) >= 30_000) resolve(null);
          else setTimeout(tick, 50);
        };
        tick();
      });
      const all = Promise.all(running).finally(() => (answered = true));
      const replies = await Promise.race([all, budget]);
      if (!replies) {
        // Where a hung wait is: still parked in the edge's journal past its deadline, or
        // answered natively and never settled in JavaScript.
        const hung = [...current].map(([t, w]) => ({ table: t, ...w, ageMs: Date.now() - w.since }));
        const waitedMs = Math.round(performance.now() - stopped);
        const m = await edge.engine.meta("s").catch((e) => e.code);
        assert.fail(`a wait chain hangs: ${JSON.stringify({ waitedMs, hung, activeWaiters: m.activeWaiters, cursor: m.cursor, fanout: edge.engine.fanoutStats() })}`);
      }
      assert.ok(replies.every((r) => r > 0));
      let stale = 0;
      let compared = 0;
      for (const c of cursors) {
        for (let t = 0; t < 20; t++) {
          const k = [keys.tableKeyId(`t${t}`)];
          const [w, e] = [await check(writer, c, k), await check(edge, c, k)];
          if (e.stale) {
            stale++;
            continue;
          }
          compared++;
          assert.equal(e.touched, w.touched, `cursor ${c}, table t${t}: edge ${e.touched}, writer ${w.touched}`);
        }
      }
      assert.ok(compared > 0, `some answers compared (${stale} stale)`);
    } finally {
      await edge.close();
      await writer.close();
    }
  });
}, { timeout: 90_000 });

test("the broker restarted without its store: the edge's older cursors answer stale, then it follows", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    const edge = await openEdge(server.url, prefix);
    try {
      const before = await settled(writer, edge);
      await server.kill();
      rmSync(join(dir, "jetstream"), { recursive: true, force: true });
      await writer.store.append("s", [rec(1, 7)]);
      await writer.engine.meta("s", { settle: "flush", timeoutMs: 10_000 });
      await server.start();
      await writer.store.append("s", [rec(2, 7)]);
      const now = await settled(writer, edge);
      const stats = edge.engine.fanoutStats();
      const r = await check(edge, before, [TABLE + 999]);
      if (stats.gaps > 0) assert.equal(r.stale, true, "a cursor from before the lost records is stale at the edge");
      else assert.deepEqual([r.touched, r.stale], [false, undefined], "nothing was lost: answered as the writer does");
      assert.equal((await check(writer, before, [TABLE])).touched, true);
      const e = await check(edge, before, [TABLE]);
      assert.ok(e.stale || e.touched, "the change is never missed");
      const w = edge.engine.wait({ stream: "s", cursor: now, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 10_000 });
      await writer.store.append("s", [rec(3, 7)]);
      assert.equal((await w).touched, true, "the edge follows the new stream");
    } finally {
      await edge.close();
      await writer.close();
    }
  });
}, { timeout: 90_000 });

test("a writer restarted keeps its epoch at its edges (no gap, waits stay); with keepCursors: false it is a new epoch they adopt", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    let writer = await openWriter(dir, server.url, prefix);
    const edge = await openEdge(server.url, prefix);
    try {
      const old = await settled(writer, edge);
      const parked = edge.engine.wait({ stream: "s", cursor: old, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 20_000 });
      const quiet = edge.engine.wait({ stream: "s", cursor: old, keyIds: [TABLE + 1], interestMode: "coarse", timeoutMs: 20_000 });
      await writer.close();
      writer = await openWriter(dir, server.url, prefix);
      assert.equal((await writer.engine.meta("s")).cursor, old, "the same epoch and generation");
      await writer.store.append("s", [rec(3, 1)]);
      const woken = await parked;
      assert.deepEqual([woken.stale === true, woken.touched], [false, true], JSON.stringify(woken));
      const now = await settled(writer, edge);
      assert.equal(now.split(":")[0], old.split(":")[0]);
      assert.equal(await Promise.race([quiet.then(() => "answered"), sleep(200).then(() => "parked")]), "parked");
      const r = await check(edge, old, [TABLE + 1]);
      assert.deepEqual([r.stale === true, r.touched], [false, false], JSON.stringify(r));
      const stats = edge.engine.fanoutStats();
      assert.deepEqual([stats.gaps, stats.adopted], [0, 1], JSON.stringify(stats));

      // The reference's behaviour on request: a new epoch, which the edge adopts.
      await writer.close();
      writer = await openWriter(dir, server.url, prefix, {}, { keepCursors: false });
      const fresh = await settled(writer, edge);
      assert.notEqual(fresh.split(":")[0], old.split(":")[0], "a new epoch");
      const q = await quiet;
      assert.ok(q.stale === true || q.touched === true, `the parked wait is answered by the new epoch: ${JSON.stringify(q)}`);
      const stale = await check(edge, old, [TABLE]);
      assert.equal(stale.stale, true);
      assert.equal(stale.cursor, fresh);
      const w = edge.engine.wait({ stream: "s", cursor: fresh, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 10_000 });
      await writer.store.append("s", [rec(4, 1)]);
      assert.equal((await w).touched, true);
    } finally {
      await edge.close();
      await writer.close();
    }
  });
});

test("a second writer on a taken prefix stands by until the first is gone; the edges follow one writer", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    for (const d of ["a", "b"]) mkdirSync(join(dir, d));
    const first = await openWriter(join(dir, "a"), server.url, prefix, { writerUrl: "http://first.test" });
    const edge = await openEdge(server.url, prefix);
    let second;
    try {
      const cursor = await settled(first, edge);
      // Parked at the edge on the first writer's stream, with a key nothing touches.
      const parked = edge.engine.wait({ stream: "s", cursor, keyIds: [TABLE + 1], interestMode: "coarse", timeoutMs: 20_000 });
      // Another deployment, same broker and prefix, its own store and another stream.
      second = await openWriter(join(dir, "b"), server.url, prefix, { writerUrl: "http://second.test" });
      await second.store.createStream("other", { contentType: "application/json" });
      second.engine.setTouchConfig("other", { enabled: true });
      await until(() => second.engine.fanoutStats().standby, "the second writer standing by");
      assert.equal(second.engine.fanoutStats().prefixHeldBy, "http://first.test");
      assert.equal(first.engine.fanoutStats().standby, false);
      // Many of the second writer's beats later: the edge still follows the first writer only.
      await sleep(1_000);
      const early = await Promise.race([parked.then((r) => r), sleep(10).then(() => "parked")]);
      assert.equal(early, "parked", "the edge's wait was answered by another writer's beat");
      await rejectsWithCode(edge.engine.meta("other"), "ERR_STREAM_NOT_FOUND");
      assert.equal((await edge.engine.meta("s")).cursor, (await first.engine.meta("s")).cursor);
      assert.equal(edge.engine.fanoutStats().writerUrl, "http://first.test");
      await first.store.append("s", [rec(1, 2)]);
      const woken = edge.engine.wait({ stream: "s", cursor, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 10_000 });
      assert.equal((await woken).touched, true);
      // The first writer goes: the second takes the prefix over, as a writer restart would.
      await first.close();
      await until(() => !second.engine.fanoutStats().standby, "the second writer publishing", 10_000);
      const c2 = await until(async () => {
        try {
          return (await edge.engine.meta("other")).cursor;
        } catch {
          return null;
        }
      }, "the edge following the second writer");
      const w = edge.engine.wait({ stream: "other", cursor: c2, keyIds: [TABLE], interestMode: "coarse", timeoutMs: 10_000 });
      await second.store.append("other", [rec(2, 3)]);
      const rw = await w;
      assert.equal(rw.touched, true, JSON.stringify(rw));
      assert.equal(edge.engine.fanoutStats().writerUrl, "http://second.test");
      // Its own stream "s" is another epoch: the wait parked on the first writer's is answered.
      const [e1, e2] = [(await edge.engine.meta("s")).cursor, (await second.engine.meta("s")).cursor].map((c) => c.split(":")[0]);
      assert.equal(e1, e2);
      const r = await parked;
      assert.ok(r.stale === true || r.touched === true, `answered at the takeover: ${JSON.stringify(r)}`);
    } finally {
      await edge.close();
      await second?.close();
      await first.close().catch(() => {});
    }
  });
});

test("two writers started together on one prefix: one publishes, the other stands by", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    for (const d of ["a", "b"]) mkdirSync(join(dir, d));
    const [a, b] = await Promise.all(["a", "b"].map((d) => openWriter(join(dir, d), server.url, prefix, { writerUrl: `http://${d}.test` })));
    try {
      await until(() => a.engine.fanoutStats().standby !== b.engine.fanoutStats().standby, "one of them standing by", 5_000);
      const [held, by] = a.engine.fanoutStats().standby ? [a, b] : [b, a];
      assert.equal(held.engine.fanoutStats().prefixHeldBy, by === a ? "http://a.test" : "http://b.test");
      // It stays so: the elder keeps claiming the prefix.
      await sleep(500);
      assert.equal(held.engine.fanoutStats().standby, true);
      assert.equal(by.engine.fanoutStats().standby, false);
      const sent = held.engine.fanoutStats().sent;
      await held.store.append("s", [rec(1, 2)]);
      await held.engine.meta("s", { settle: "flush", timeoutMs: 5_000 });
      await sleep(300);
      assert.equal(held.engine.fanoutStats().sent, sent, "a writer standing by publishes nothing");
    } finally {
      await a.close();
      await b.close();
    }
  });
});

test("randomized: cursors carried between the writer and two edges answer alike over 100,000 waits, in every touch mode", async () => {
  await withNats(async (server, dir) => {
    const prefix = newPrefix();
    const writer = await openWriter(dir, server.url, prefix);
    const edges = [await openEdge(server.url, prefix), await openEdge(server.url, prefix)];
    const nodes = [writer, ...edges];
    let seed = 12345;
    const rand = (n) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    // Phases: fine; restricted by lag (bursts over a low degrade mark); fine tokens run out
    // (coarse only). The config goes to the writer; the edges take it from its beats.
    const phases = [
      { enabled: true },
      { enabled: true, lagDegradeFineTouchesAtSourceOffsets: 20, lagRecoverFineTouchesAtSourceOffsets: 5 },
      { enabled: true, fineTouchBudgetPerBatch: 2, fineTokensPerSecond: 1, fineBurstTokens: 1 },
    ];
    /** @type {Promise<unknown> | null} */
    let parked = null;
    let closing = false;
    try {
      const tpl = writer.engine.activateTemplates("s", [POSTS]).activated[0].templateId;
      const pool = [await settled(writer, ...edges)];
      // Key sets as a coarse wait names them (ids) and as a fine one does (16-hex keys).
      const keySets = [];
      for (let t = 0; t < 30; t++) keySets.push({ ids: [keys.tableKeyId(`t${t}`)], hex: [keys.tableKey(`t${t}`)] });
      for (let a = 0; a < 30; a++) keySets.push({ ids: [keys.watchKeyId(tpl, [String(a)])], hex: [keys.watchKey(tpl, [String(a)])] });
      // A fine waiter parked at an edge all along, so the writer's batches are never idle. A
      // coarsened batch wakes it through its template's key (W3): it parks again at once.
      const park = (cursor) => {
        parked = edges[0].engine
          .wait({ stream: "s", cursor, keys: [keys.watchKey(tpl, ["-1"])], templateIdsUsed: [tpl], timeoutMs: 120_000 })
          .then((r) => (closing ? r : park(r.cursor)), (e) => assert.ok(closing, `the parked wait failed: ${e}`));
        return parked;
      };
      park(pool[0]);
      await until(async () => (await writer.engine.meta("s")).fineWaitersActive >= 1, "the edge's fine waiter at the writer");
      let waits = 0;
      const modes = new Set();
      for (let round = 0; round < 15; round++) {
        if (round % 5 === 0) writer.engine.setTouchConfig("s", phases[(round / 5) % phases.length]);
        const rows = [];
        for (let i = 0, m = 1 + rand(round % 5 === 1 ? 200 : 40); i < m; i++) {
          rows.push(rand(2) ? JSON.stringify({ type: `t${rand(30)}`, key: String(rand(5)), value: { v: i }, headers: { operation: "insert" } }) : rec(rand(50), rand(30), rand(30)));
        }
        await writer.store.append("s", rows);
        pool.push(await settled(writer, ...edges));
        modes.add((await writer.engine.meta("s")).touchMode);
        // A cursor handed out by one node, asked of another.
        for (let q = 0; q < 2500; q++) {
          const cursor = pool[rand(pool.length)];
          const ks = keySets[rand(keySets.length)];
          const fine = rand(2) === 0;
          const ask = (node) =>
            fine
              ? node.engine.wait({ stream: "s", cursor, keys: ks.hex, templateIdsUsed: [tpl], timeoutMs: 0 })
              : node.engine.wait({ stream: "s", cursor, keyIds: ks.ids, interestMode: "coarse", timeoutMs: 0 });
          const answers = await Promise.all(nodes.map(ask));
          waits += answers.length;
          const [w, ...es] = answers;
          for (const e of es) {
            assert.equal(e.stale, undefined, `an edge that saw every record answers every cursor (${cursor})`);
            assert.equal(e.touched, w.touched, `round ${round}, cursor ${cursor}, keys ${ks.hex}, mode ${[...modes].pop()}`);
            assert.equal(e.effectiveWaitKind, w.effectiveWaitKind);
            assert.equal(e.cursor, w.cursor);
          }
        }
      }
      assert.ok(waits >= 100_000, `${waits} waits`);
      for (const e of edges) assert.equal(e.engine.fanoutStats().gaps, 0);
      assert.ok(modes.size >= 2, `the phases ran in more than one touch mode: ${[...modes]}`);
    } finally {
      closing = true;
      for (const e of edges) await e.close();
      await writer.close();
      await parked;
    }
  });
}, { timeout: 180_000 });

test("fanoutDefaults and fanoutBounds are the core's: the bounds it enforces, read-only", () => {
  const { fanoutDefaults, fanoutBounds } = dt;
  assert.equal(fanoutDefaults.prefix, "durable-touch");
  assert.deepEqual({ ...fanoutDefaults }, { prefix: "durable-touch", maxAgeMs: 600_000, maxBytes: 268_435_456, beatMs: 500, batchMs: 0 });
  assert.ok(Object.isFrozen(fanoutDefaults) && Object.isFrozen(fanoutBounds) && Object.isFrozen(fanoutBounds.beatMs));
  const store = Store.open(":memory:");
  try {
    const base = { role: "edge", url: "nats://127.0.0.1:9" };
    for (const [name, { min, max }] of Object.entries(fanoutBounds)) {
      if (name === "prefixLength") {
        for (const prefix of ["a".repeat(max + 1), ...(min > 0 ? ["a".repeat(min - 1)] : [])]) {
          assert.throws(() => new TouchEngine(store, { fanout: { ...base, prefix } }), /options\.fanout\.prefix must be 1-64/);
        }
        continue;
      }
      for (const v of [max + 1, ...(min > 0 ? [min - 1] : [])]) {
        assert.throws(
          () => new TouchEngine(store, { fanout: { ...base, [name]: v } }),
          (e) => e.code === "ERR_INVALID_ARGUMENT" && e.message === `options.fanout.${name} must be an integer in [${min}, ${max}], got ${v}`,
          `${name}: ${v}`,
        );
      }
    }
  } finally {
    store.close();
  }
});

test("fan-out options outside their bounds are refused, not moved into them", () => {
  const store = Store.open(":memory:");
  try {
    const base = { role: "edge", url: "nats://127.0.0.1:9" };
    for (const [extra, says] of [
      [{ beatMs: 5 }, "options.fanout.beatMs must be an integer in [10, 60000], got 5"],
      [{ maxAgeMs: 500 }, "options.fanout.maxAgeMs must be an integer in [1000, 31536000000], got 500"],
      [{ maxBytes: 1024 }, "options.fanout.maxBytes must be an integer in [65536, 1000000000000000], got 1024"],
      [{ batchMs: 1001 }, "options.fanout.batchMs must be an integer in [0, 1000], got 1001"],
      [{ prefix: "a.b" }, "options.fanout.prefix must be 1-64 of [A-Za-z0-9_-]"],
      [{ beatMs: 2.5 }, "options.fanout.beatMs must be an integer in [0, 9007199254740991]"],
    ]) {
      assert.throws(
        () => new TouchEngine(store, { fanout: { ...base, ...extra } }),
        (e) => e.code === "ERR_INVALID_ARGUMENT" && e.message === says,
        JSON.stringify(extra),
      );
    }
  } finally {
    store.close();
  }
});

