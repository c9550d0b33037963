// Every public member of the server's `TouchProcessorManager` (`app.deps.touch`), driven the way
// the server's own tests and tools drive it: `touchCheckIntervalMs: 0` (no processing loop),
// appends over HTTP, then `notify(stream)` and `await tick()` by hand. Run on an unswapped and a
// swapped copy of the server ($APP_SRC); prints what each member answered, reduced to what
// both must agree on (cursors and epochs differ per process, so they are checked for shape).
import { append, exit, ok, sleep, startServer, touchStream, K } from "./swap-server.ts";

const root = `${process.env.REF_TMP}/data`;
const srv = await startServer(root, { touchCheckIntervalMs: 0, touchWorkers: 1 });
const touch = srv.app.deps.touch;
const S = "surface";
const GRACE_MS = 120;
const touchCfg = { enabled: true, memory: { hotKeyTtlMs: GRACE_MS, hotTemplateTtlMs: GRACE_MS } };
await touchStream(srv, S, touchCfg);

const out: Record<string, unknown> = {};
/** Answers where the swapped server deliberately differs (deviations.md); the spec checks them. */
const kinds: Record<string, unknown> = {};
/** Members this script called (the spec checks it covers the reference class's list). */
const covered = new Set<string>();
const call = (name: string) => {
  covered.add(name);
  return touch[name].bind(touch);
};
const CURSOR = /^[0-9a-f]{16}:\d+$/;
const row = (id: string, tenantId: string) => ({
  type: "public.todos",
  key: id,
  value: { id, tenantId, title: `todo ${id}` },
  headers: { operation: "insert" },
});
const tableKey = K.tableKeyFor("public.todos");
const tableKeyId = K.tableKeyIdFor("public.todos");
const snapshot = () => call("getTouchRuntimeSnapshot")({ stream: S, touchCfg });
const hot = () => {
  const r = snapshot();
  return [r.hotFineKeys, r.hotTemplates, r.fineWaitersActive, r.coarseWaitersActive, r.broadFineWaitersActive, r.hotFineKeysGrace, r.hotTemplatesGrace];
};
const meta = async () => ok(await srv.call(`/v1/stream/${S}/touch/meta`), "meta").body;
const wait = (body: Record<string, unknown>) => srv.call(`/v1/stream/${S}/touch/wait`, "POST", { timeoutMs: 3000, ...body });

try {
  out.start = call("start")();

  // Journals: created on demand, the same object each time, null for a stream without one.
  out.journalBefore = call("getJournalIfExists")(S) === null;
  const j = call("getOrCreateJournal")(S, touchCfg);
  out.journal = {
    same: call("getOrCreateJournal")(S, touchCfg) === j && call("getJournalIfExists")(S) === j,
    missing: call("getJournalIfExists")("no-such-stream"),
    cursor: CURSOR.test(j.getCursor()),
    epochIsCursors: j.getCursor().startsWith(`${j.getEpoch()}:`),
    methods: ["touch", "waitForAny", "getCursor", "getEpoch", "getGeneration", "getMeta", "getTotalStats", "getActiveWaiters", "maybeTouchedSince", "maybeTouchedSinceAny", "exactTouchedSinceAny", "setCoalesceMs", "getLastFlushedSourceOffsetSeq", "getLastFlushAtMs", "getLastBucketStartMs", "snapshotAndResetIntervalStats", "getFilterBytes", "stop"].filter((m) => typeof j[m] !== "function"),
  };

  // notify + tick: every row committed before the tick is processed and touched.
  const cursor0 = (await meta()).cursor;
  const gen0 = j.getGeneration();
  const tableWait = wait({ cursor: cursor0, keys: [tableKey], interestMode: "coarse" });
  const journalWait = j.waitForAny({ keys: [tableKeyId], afterGeneration: gen0, timeoutMs: 3000 });
  await sleep(50);
  const next = await append(srv, S, [row("1", "t1"), row("2", "t2")]);
  out.notify = call("notify")(S);
  out.tick = await call("tick")();
  const m1 = await meta();
  out.afterTick = { walScannedThrough: m1.walScannedThrough === next, lag: m1.lagSourceOffsets, scanRows: snapshot().scanRowsTotal };
  out.tableWait = (await tableWait).body.touched;
  const hit = await journalWait;
  out.journalWait = hit !== null && hit.generation > gen0;
  out.tickIdle = await call("tick")();

  // A touch through the manager's journal wakes a wait parked through the routes.
  const k = 0x5eed;
  const parked = wait({ cursor: (await meta()).cursor, keyIds: [k] });
  await sleep(50);
  j.touch(k);
  out.journalTouch = (await parked).body.touched;

  // Hot interest: begin, release (grace), release again (nothing), sweep after the grace, as
  // /touch/meta reports it with no processing loop.
  const tpl = K.templateIdFor("public.todos", ["tenantId"]);
  const release = call("beginHotWaitInterest")({ stream: S, touchCfg, keyIds: [1, 2, 2], templateIdsUsed: [tpl, "not-a-template"], interestMode: "fine" });
  out.hotBegun = hot();
  release();
  out.hotReleased = hot();
  release();
  out.hotReleasedTwice = hot();
  await sleep(GRACE_MS * 2 + 300);
  const m2 = await meta();
  out.hotExpired = [...hot(), m2.hotTemplates, m2.hotFineKeys, m2.fineWaitersActive];
  const coarse = call("beginHotWaitInterest")({ stream: S, touchCfg, keyIds: [7], templateIdsUsed: [tpl], interestMode: "coarse" });
  const broad = call("beginHotWaitInterest")({ stream: S, touchCfg, keyIds: Array.from({ length: 65 }, (_, i) => i), templateIdsUsed: [], interestMode: "fine" });
  out.hotCoarseBroad = hot();
  coarse();
  broad();

  // Templates: activation, entities for a wait, heartbeats.
  const activated = call("activateTemplates")({
    stream: S,
    touchCfg,
    baseStreamNextOffset: 0n,
    activeFromTouchOffset: j.getCursor(),
    templates: [{ entity: "public.todos", fields: [{ name: "tenantId", encoding: "string" }] }],
    inactivityTtlMs: 3_600_000,
  });
  out.activate = {
    ids: activated.activated.map((a: any) => [a.templateId, a.state, typeof a.activeFromTouchOffset]),
    denied: activated.denied,
    keys: Object.keys(activated).sort(),
  };
  out.entities = call("resolveTemplateEntitiesForWait")({ stream: S, templateIdsUsed: [tpl, ` ${tpl} `, "zz", "0123456789abcdef"] });
  out.heartbeat = call("heartbeatTemplates")({ stream: S, touchCfg, templateIdsUsed: [tpl] });

  // A fine wait through the routes after notify + tick: the watch key of the new row.
  const watch = K.watchKeyFor(tpl, [K.encodeTemplateArg("t9", "string")]);
  const fine = wait({ cursor: (await meta()).cursor, keys: [watch], templateIdsUsed: [tpl] });
  await sleep(50);
  await append(srv, S, [row("9", "t9")]);
  call("notify")(S);
  await call("tick")();
  const fineReply = (await fine).body;
  // The last batch found a coarse waiter and no fine demand (`coarseOnly`, M8): the wait is
  // answered at table granularity.
  out.fineWait = [fineReply.touched, fineReply.effectiveWaitKind];

  // Wait metrics: the totals count what the caller records.
  const before = snapshot();
  out.recordWaitMetrics = call("recordWaitMetrics")({ stream: S, touchCfg, keysCount: 1, outcome: "stale", latencyMs: 3 });
  call("recordWaitMetrics")({ stream: S, touchCfg, keysCount: 2, outcome: "timeout", latencyMs: 4 });
  const after = snapshot();
  out.waitTotals = [after.waitStaleTotal - before.waitStaleTotal, after.waitTimeoutTotal - before.waitTimeoutTotal];
  out.snapshotKeys = Object.keys(after).sort();
  out.snapshotTypes = Object.fromEntries(Object.entries(after).map(([key, v]) => [key, typeof v]));
  out.snapshotUnknown = call("getTouchRuntimeSnapshot")({ stream: "no-such-stream", touchCfg });

  // A stream without touch: the reference hands out a journal for it all the same.
  ok(await srv.call(`/v1/stream/plain`, "PUT"), "create plain");
  const pj = call("getOrCreateJournal")("plain", touchCfg);
  out.plainJournal = [CURSOR.test(pj.getCursor()), call("getOrCreateJournal")("plain", touchCfg) === pj];
  out.plainHot = typeof call("beginHotWaitInterest")({ stream: "plain", touchCfg, keyIds: [1], templateIdsUsed: [], interestMode: "fine" });
  // A coarse wait's keys are never read; a broad fine one is only counted.
  const huge = Object.assign([], { length: 2 ** 31 });
  const hugeCoarse = call("beginHotWaitInterest")({ stream: S, touchCfg, keyIds: huge, templateIdsUsed: [], interestMode: "coarse" });
  // The waiter counts only: whether the fine wait's key above is still in its grace here
  // depends on how long the routes took, not on what this checks.
  out.hugeCoarse = hot().slice(2, 5);
  hugeCoarse();

  // Memory stats and top streams.
  const mem = call("getMemoryStats")();
  out.memory = { keys: Object.keys(mem).sort(), journals: mem.journals, dirtyStreams: mem.dirtyStreams };
  const top = call("getTopStreams")(5);
  // Sorted by name: the order is by filter bytes, and an idle journal of ours holds none (B14).
  out.top = top.map((t: any) => [t.stream, t.dirty, typeof t.journal_filter_bytes]).sort();
  out.topNone = call("getTopStreams")(0);
  out.topNaN = call("getTopStreams")(NaN);

  // Stop: a tick after it does nothing. A wait parked on the journal is left pending by the
  // reference (B29) and answered null by ours (deviations.md): the spec checks each.
  const pending = j.waitForAny({ keys: [424242], timeoutMs: 10_000 });
  out.stop = await call("stop")();
  kinds.pendingAfterStop = await Promise.race([pending, sleep(300).then(() => "pending")]);
  out.tickAfterStop = await call("tick")();
  // After stop the reference's members keep answering.
  const released = call("beginHotWaitInterest")({ stream: S, touchCfg, keyIds: [1], templateIdsUsed: [], interestMode: "fine" });
  out.afterStop = {
    release: typeof released,
    snapshot: typeof call("getTouchRuntimeSnapshot")({ stream: S, touchCfg }).touchMode,
    heartbeat: call("heartbeatTemplates")({ stream: S, touchCfg, templateIdsUsed: [tpl] }),
  };
  // The reference still counts interest after stop (nothing processes it); ours holds none.
  kinds.afterStopHotKeys = call("getTouchRuntimeSnapshot")({ stream: S, touchCfg }).hotFineKeys;
  released();
} finally {
  await srv.close().catch(() => {});
}
out.covered = [...covered].sort();
process.stdout.write(JSON.stringify({ out, kinds }, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
exit();
