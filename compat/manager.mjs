// The Prisma Streams server's `TouchProcessorManager` (`touch/manager.ts`) on the native
// engine. Same constructor, and every public member of the reference class, with its
// arguments, return shapes and errors (`__test__/compat-manager-surface.spec.mjs` reads the
// member list from the reference's source and runs each one on both classes):
//
// - `start`, `stop`, `notify`, `tick` (one processing pass now: `TouchEngine.tick`);
// - `getMemoryStats`, `getTopStreams` (`TouchEngine.memoryStats`);
// - `activateTemplates`, `heartbeatTemplates` (the engine's template registry);
// - `beginHotWaitInterest` (`TouchEngine.beginHotInterest` / `releaseHotInterest`);
// - `getTouchRuntimeSnapshot` (`TouchEngine.runtime`, hot state swept as the reference does);
// - `recordWaitMetrics` (`live.metrics` and `TouchEngine.recordWait`);
//   `live.metrics` also gets what the engine did (batches, template lifecycle events, WAL GC,
//   failures: `TouchEngine.takeRecords`, drained every RECORDS_DRAIN_MS, see live-metrics.mjs);
// - `resolveTemplateEntitiesForWait` (the reference's query, on the server's connection);
// - `getOrCreateJournal`, `getJournalIfExists` (`TouchEngine.journal`: the engine's own
//   journal of the stream, so touches and waits through it reach the engine's waiters).
//
// The touch routes (compat/routes.mjs, swapped in with it) reach the engine through `engine`,
// `withProfile`, `recordRouteWait` and `recordActivation`.
//
// The engine opens the server's own SQLite file with our `Store`. That is sound only because
// the swap also replaces the server's SQLite binding (`sqlite/adapter.ts`) with ours
// (compat/sqlite-adapter.mjs): every connection in the process is then one SQLite library,
// whose locks the connections share. A second library on the same file would not see them
// (one library's close() drops the other's POSIX locks), so the manager refuses to start on
// a server whose adapter is not ours. The store reads on its own connections and commits on
// the server's (between the server's transactions), so the server never finds its snapshot
// overtaken by another connection's commit.
//
// What the engine keeps in the server's tables: the checkpoint (`stream_touch_state`), the
// templates (`live_templates`, with last-seen times) and the WAL it deletes once processed and
// uploaded; profiles are the server's (`/_profile` writes them), which the engine re-reads
// once a second and at once for a stream it does not know. Processing is event-driven: the
// server calls `notify(stream)` after each committed append and the engine's loop runs at
// once; the configured tick is its safety net.
//
// The fan-out (issue 28) is turned on by the environment, so a deployment adds edges without
// code changes: with DURABLE_TOUCH_NATS=nats://host:port the engine is a writer publishing its
// journals' flushes and beats there (prefix DURABLE_TOUCH_NATS_PREFIX, default the engine's,
// `fanoutDefaults.prefix`; retention DURABLE_TOUCH_NATS_MAX_AGE_MS and DURABLE_TOUCH_NATS_MAX_BYTES),
// and its edges send clients to DURABLE_TOUCH_WRITER_URL (default the
// server's own http://host:port from its config, when that names a port and a host an edge can
// use; else none, and edges need their own --writer). See `fanoutFromEnv`.
import { createRequire } from "node:module";
import { engineBounds, Store, TouchEngine } from "../index.js";
import { bridgeWaitForAny, TouchJournal } from "./journal.mjs";
import { hostConnectionOf } from "./sqlite-adapter.mjs";
import { feedLiveMetrics } from "./live-metrics.mjs";
import { switchedOff } from "../lib/settings.mjs";

const native = createRequire(import.meta.url)("../lib/internal/native.js");

/** Set on what durable-touch puts in place of the server's own (the swap's tests look). */
const NATIVE = Symbol.for("durable-touch.native");

/** How often the engine re-reads the server's profiles (ms). */
const PROFILE_POLL_MS = 1000;

/** The shortest safety-net tick of the engine's loop (ms). */
const SAFETY_NET_MS = 250;

/**
 * How often the engine's records go to `live.metrics` (ms): well within its 1 s flush, and
 * often enough that the engine's queue (10,000 batch records) does not fill.
 */
const RECORDS_DRAIN_MS = 200;

/** A fine wait with more keys than this is broad: counted, its keys not tracked (M19). */
const HOT_INTEREST_MAX_KEYS = 64;

const TEMPLATE_ID = /^[0-9a-f]{16}$/;

/** Engine errors for a stream the engine has no touch config for (or does not know). */
const noTouch = (e) => e?.code === "ERR_TOUCH_NOT_ENABLED" || e?.code === "ERR_STREAM_NOT_FOUND";
/** … or once the manager stopped (the reference's members keep answering then). */
const noEngine = (e) => noTouch(e) || e?.code === "ERR_CLOSED";

/**
 * The reference's snapshot of a stream it holds no runtime state for: the native core's
 * (`TouchEngine::empty_runtime`), with `runtime()`'s fields in its order.
 */
const EMPTY_RUNTIME = Object.freeze(native._emptyRuntime());

/** Hosts that name every interface, not one an edge could send a client to. */
const WILDCARD_HOSTS = new Set(["0.0.0.0", "::", "[::]", ""]);

/**
 * Whether journals are kept across restarts: yes, unless DURABLE_TOUCH_KEEP_CURSORS is `0`,
 * `false` or `no` (then every start is a new epoch and old cursors answer stale, as in the
 * reference).
 */
export function keepCursorsFromEnv(env = process.env) {
  return !switchedOff(env.DURABLE_TOUCH_KEEP_CURSORS);
}

/**
 * The engine's `fanout` option from the environment (undefined without DURABLE_TOUCH_NATS):
 * a writer on that NATS URL, with DURABLE_TOUCH_NATS_PREFIX, DURABLE_TOUCH_NATS_MAX_AGE_MS,
 * DURABLE_TOUCH_NATS_MAX_BYTES and DURABLE_TOUCH_WRITER_URL, the
 * writer URL defaulting to `http://<cfg.host>:<cfg.port>` when the server's config names a
 * port (not 0, which picks one the config never learns) and a host that is not a wildcard.
 */
export function fanoutFromEnv(cfg, env = process.env) {
  const url = env.DURABLE_TOUCH_NATS?.trim();
  if (!url) return undefined;
  const fanout = { role: "writer", url };
  const prefix = env.DURABLE_TOUCH_NATS_PREFIX?.trim();
  if (prefix) fanout.prefix = prefix;
  // Retention of the flushes (what an edge started anew replays); the engine checks the values.
  for (const [name, key] of [["DURABLE_TOUCH_NATS_MAX_AGE_MS", "maxAgeMs"], ["DURABLE_TOUCH_NATS_MAX_BYTES", "maxBytes"]]) {
    const v = env[name]?.trim();
    if (v) fanout[key] = Number(v);
  }
  const explicit = env.DURABLE_TOUCH_WRITER_URL?.trim();
  const host = typeof cfg?.host === "string" ? cfg.host.trim() : "";
  const port = Number(cfg?.port);
  if (explicit) fanout.writerUrl = explicit.replace(/\/+$/, "");
  else if (Number.isInteger(port) && port > 0 && !WILDCARD_HOSTS.has(host)) {
    fanout.writerUrl = `http://${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${port}`;
  }
  return fanout;
}

/** Unique 16-hex template ids of a list, as the reference reads `templateIdsUsed`. */
const templateIds = (list) => [...new Set(Array.from(list ?? [], (x) => String(x).trim()).filter((x) => TEMPLATE_ID.test(x)))];

/**
 * The manager class for a server whose modules `host` names: `openSqliteDatabase` (its
 * `sqlite/adapter.ts`, which must be ours) and, optionally, `LiveMetricsV2`
 * (`touch/live_metrics.ts`) to keep its `live.metrics` stream.
 */
export function createTouchProcessorManager(host = {}) {
  const { openSqliteDatabase, LiveMetricsV2 } = host;

  return class TouchProcessorManager {
    static [NATIVE] = true;

    constructor(cfg, db, ingest, notifier, profiles, _backpressure) {
      if (openSqliteDatabase?.[NATIVE] !== true) {
        throw new Error(
          "durable-touch: the touch manager is swapped but the SQLite adapter is not; " +
            "run `npx durable-touch swap <server src>` again (one SQLite library per file per process)",
        );
      }
      this.cfg = cfg;
      this.db = db;
      this.profiles = profiles;
      this.known = new Set();
      this.journals = new Map();
      this.detached = new Map();
      this.detachedCreated = 0;
      this.stopped = false;
      const workers = Math.floor(Number(cfg.touchWorkers ?? 1));
      const interval = Math.floor(Number(cfg.touchCheckIntervalMs ?? 250));
      // The engine reads on connections of its own and commits on the server's: a commit from
      // another connection would make the server's next write fail (SQLITE_BUSY_SNAPSHOT) while
      // it holds a read statement open, as its segmenter does across its yields.
      const hostConnection = hostConnectionOf(db?.db);
      if (hostConnection === undefined) throw new Error("durable-touch: the server's database is not on durable-touch's SQLite adapter");
      const metrics = typeof LiveMetricsV2 === "function";
      const fanout = fanoutFromEnv(cfg);
      this.store = Store.open(cfg.dbPath, { hostConnection });
      this.engine = new TouchEngine(this.store, {
        workers: Math.max(1, Math.min(engineBounds.workers.max, workers)),
        // Processing follows `notify` at once, so the host's tick is only the safety net (rows
        // written by another process, backoffs, upkeep): at least SAFETY_NET_MS, whatever the
        // host passes (the local runtime passes 5 ms, which kept a core ~8% busy idle).
        checkIntervalMs: Math.max(SAFETY_NET_MS, interval),
        maxBatchRows: Math.max(1, Math.floor(Number(cfg.touchMaxBatchRows ?? 500))),
        maxBatchBytes: Math.max(1, Math.floor(Number(cfg.touchMaxBatchBytes ?? 4 * 1024 * 1024))),
        // The reference processes nothing with no workers or no tick.
        autoProcess: workers > 0 && interval > 0,
        profilePollMs: PROFILE_POLL_MS,
        // What `live.metrics` reports of processing (`drainRecords`).
        records: metrics,
        // Publishing to edges over NATS JetStream, when the environment asks for it.
        ...(fanout ? { fanout } : {}),
        // Journals are kept across restarts (`<dbPath>-journals/`) unless the environment
        // asks for the reference's new epoch at every start.
        keepCursors: keepCursorsFromEnv(),
      });
      this.recordsTimer = null;
      this.liveMetrics = metrics
        ? new LiveMetricsV2(db, ingest, profiles, {
            getTouchJournal: (stream) => {
              const j = this.getJournalIfExists(stream);
              return j ? { meta: j.getMeta(), interval: j.snapshotAndResetIntervalStats() } : null;
            },
            onAppended: ({ lastOffset, stream }) => {
              notifier?.notify?.(stream, lastOffset);
              notifier?.notifyDetailsChanged?.(stream);
            },
          })
        : null;
    }

    start() {
      if (this.started) return;
      this.started = true;
      if (!this.liveMetrics) return;
      // Fed whether or not its stream could be made, as the reference feeds its own.
      this.recordsTimer = setInterval(() => this.drainRecords(), RECORDS_DRAIN_MS);
      this.recordsTimer.unref?.();
      const ensured = this.liveMetrics.ensureStreamResult();
      if (ensured?.status === "error") {
        console.error("live metrics disabled", ensured.error);
        return;
      }
      this.liveMetrics.start();
    }

    async stop() {
      if (this.stopped) return;
      this.stopped = true;
      if (this.recordsTimer !== null) clearInterval(this.recordsTimer);
      this.recordsTimer = null;
      this.drainRecords();
      this.liveMetrics?.stop();
      for (const j of this.detached.values()) j.stop();
      this.detached.clear();
      await this.engine.close();
      await this.store.close();
    }

    /** Called by the server after each committed append: processing starts at once. */
    notify(stream) {
      if (!this.stopped) this.engine.notify(stream);
    }

    /**
     * One processing pass now, as the reference's `tick()` (which the server's tests call with
     * `touchCheckIntervalMs: 0`, i.e. no loop): resolves once every row committed before the
     * call is processed and its touches are in the stream's journal. Nothing with no touch
     * workers or once stopped; a stream whose batch fails is logged, as by the reference.
     */
    async tick() {
      if (this.stopped || !(Number(this.cfg.touchWorkers) > 0)) return;
      let r;
      try {
        r = await this.engine.tick();
      } catch (e) {
        if (e?.code === "ERR_CLOSED" && this.stopped) return;
        throw e;
      }
      for (const f of r.failed) console.error("touch processor failed", f.stream, f.message);
      // What the pass did is in `live.metrics` when it resolves, as with the reference's tick.
      this.drainRecords();
    }

    /**
     * Hands what the engine did since the last call (batches, template lifecycle events, WAL
     * GC deletions, failures) to the server's `LiveMetricsV2`, as the reference manager calls
     * it while it processes. Runs every RECORDS_DRAIN_MS, after `tick()`, after an activation
     * and on `stop()`.
     */
    drainRecords() {
      const lm = this.liveMetrics;
      if (!lm) return;
      const records = this.engine.takeRecords();
      try {
        feedLiveMetrics(lm, records, (stream) => {
          try {
            return this.engine.getTouchConfig(stream);
          } catch {
            return null;
          }
        });
      } catch (e) {
        // Metrics are best-effort; they never fail processing (as in the reference).
        console.error("live metrics update failed", e);
      }
    }

    /**
     * Makes sure the engine has touch on for a stream the server's profile says has it:
     * re-reads the stream's profile unless it did so before, or when `again` (the engine
     * answered `ERR_TOUCH_NOT_ENABLED`: it adopted a profile with touch off since).
     */
    syncProfile(stream, again = false) {
      if (!again && this.known.has(stream)) return;
      const enabled = () => this.engine.getTouchConfig(stream)?.enabled === true;
      if (again || !enabled()) this.engine.reloadProfiles([stream]);
      if (enabled()) this.known.add(stream);
      else this.known.delete(stream);
    }

    /**
     * Runs `call()` (an engine call for `stream`, whose profile the server says has touch) and
     * returns what it returns, a promise or a value. The engine may have dropped the stream's
     * touch config since `syncProfile` last saw it (the stream was deleted and created again,
     * or touch turned off and on, within the engine's profile poll): then the engine re-reads
     * the profile and `call()` runs once more.
     */
    withProfile(stream, call) {
      this.syncProfile(stream);
      const again = (e) => {
        if (e?.code !== "ERR_TOUCH_NOT_ENABLED") throw e;
        this.syncProfile(stream, true);
        return call();
      };
      let out;
      try {
        out = call();
      } catch (e) {
        return again(e);
      }
      return typeof out?.then === "function" ? out.then(undefined, again) : out;
    }

    getMemoryStats() {
      const m = this.engine.memoryStats(0).memory;
      let detachedBytes = 0;
      for (const j of this.detached.values()) detachedBytes += j.getFilterBytes();
      return {
        dirtyStreams: m.dirtyStreams,
        journals: m.journals + this.detached.size,
        journalsCreatedTotal: m.journalsCreatedTotal + this.detachedCreated,
        journalFilterBytesTotal: m.journalFilterBytesTotal + detachedBytes,
        fineLagCoarseOnlyStreams: m.fineLagCoarseOnlyStreams,
        touchModeStreams: m.touchModeStreams,
        fineTokenBucketStreams: m.fineTokenBucketStreams,
        hotFineStreams: m.hotFineStreams,
        lagSourceOffsetStreams: m.runtimeTotalsStreams,
        restrictedTemplateBucketStreams: 0,
        runtimeTotalsStreams: m.runtimeTotalsStreams,
        zeroRowBacklogStreakStreams: 0,
        templateLastSeenEntries: m.templateLastSeenEntries,
        templateDirtyLastSeenEntries: m.templateDirtyLastSeenEntries,
        templateRateStateStreams: m.templateRateStateStreams,
        liveMetricsCounterStreams: this.liveMetrics?.getMemoryStats?.().counterStreams ?? 0,
      };
    }

    getTopStreams(limit = 5) {
      // As the reference's `slice(0, max(0, floor(limit)))`: NaN gives none, Infinity all
      // (the engine lists at most 1,000).
      const n = Math.max(0, Math.floor(Number(limit)));
      const max = Number.isNaN(n) ? 0 : Math.min(n, 1000);
      const rows = this.engine.memoryStats(max).topStreams.map((t) => ({
        stream: t.stream,
        journal_filter_bytes: t.journalFilterBytes,
        dirty: t.dirty,
        touch_mode: t.touchMode ?? null,
      }));
      for (const [stream, j] of this.detached) {
        rows.push({ stream, journal_filter_bytes: j.getFilterBytes(), dirty: false, touch_mode: null });
      }
      return rows
        .sort((a, b) => b.journal_filter_bytes - a.journal_filter_bytes || a.stream.localeCompare(b.stream))
        .slice(0, max);
    }

    /**
     * The reference's `activateTemplates`: `baseStreamNextOffset` and `activeFromTouchOffset`
     * are read by the engine itself, under its lock with the activation (T5).
     */
    activateTemplates({ stream, touchCfg, templates, inactivityTtlMs }) {
      const options = inactivityTtlMs === undefined ? undefined : { inactivityTtlMs };
      const res = this.withProfile(stream, () => this.engine.activateTemplates(stream, templates, options));
      this.recordActivation(stream, touchCfg, res);
      return { activated: res.activated, denied: res.denied };
    }

    /** T8: the templates a fine wait uses are seen now (their inactivity TTL restarts). */
    heartbeatTemplates({ stream, templateIdsUsed }) {
      const ids = Array.from(templateIdsUsed ?? [], String);
      try {
        this.withProfile(stream, () => {
          for (let i = 0; i < ids.length; i += 1024) this.engine.heartbeatTemplates(stream, ids.slice(i, i + 1024));
        });
      } catch (e) {
        if (!noEngine(e)) throw e;
      }
    }

    /**
     * M19 for a wait the caller runs itself: returns the function that releases it (once;
     * later calls do nothing). A stream without touch holds no interest.
     */
    beginHotWaitInterest({ stream, keyIds, templateIdsUsed, interestMode }) {
      const fine = interestMode === "fine";
      // A coarse wait's keys are not tracked, and a broad one (over 64 keys) is only counted:
      // its first 65 keys are enough to say it is broad.
      const count = fine ? Number(keyIds?.length ?? 0) : 0;
      const keys =
        count > HOT_INTEREST_MAX_KEYS
          ? Array.from({ length: HOT_INTEREST_MAX_KEYS + 1 }, (_, i) => Number(keyIds[i]) >>> 0)
          : fine
            ? Array.from(keyIds ?? [], (raw) => Number(raw) >>> 0)
            : [];
      const interest = {
        keyIds: keys,
        templateIdsUsed: fine ? templateIds(templateIdsUsed) : [],
        interestMode: fine ? "fine" : "coarse",
      };
      let id;
      try {
        id = this.withProfile(stream, () => this.engine.beginHotInterest(stream, interest));
      } catch (e) {
        if (!noEngine(e)) throw e;
        return () => {};
      }
      return () => {
        if (id === undefined) return;
        this.engine.releaseHotInterest(id);
        id = undefined;
      };
    }

    /** M21: hot counts (swept first), the touch mode, the last batch's lag and the totals. */
    getTouchRuntimeSnapshot({ stream }) {
      try {
        return this.withProfile(stream, () => this.engine.runtime(stream));
      } catch (e) {
        if (!noEngine(e)) throw e;
        return { ...EMPTY_RUNTIME };
      }
    }

    /** The reference's `recordWaitMetrics`: `live.metrics` and the stream's wait totals. */
    recordWaitMetrics(args) {
      this.recordRouteWait(args);
      const { stream, outcome } = args;
      this.engine.recordWait(stream, outcome === "touched" || outcome === "timeout" ? outcome : "stale");
    }

    /** Wait outcomes of the swapped routes for `live.metrics` (`TouchEngine.wait` counts its own). */
    recordRouteWait({ stream, touchCfg, keysCount, outcome, latencyMs }) {
      this.liveMetrics?.recordWait(stream, touchCfg, keysCount, outcome, latencyMs);
    }

    /** The entities of the stream's active templates among `templateIdsUsed` (W3's table keys). */
    resolveTemplateEntitiesForWait({ stream, templateIdsUsed }) {
      const ids = templateIds(templateIdsUsed);
      if (ids.length === 0) return [];
      const entities = new Set();
      for (let i = 0; i < ids.length; i += 200) {
        const chunk = ids.slice(i, i + 200);
        const placeholders = chunk.map(() => "?").join(",");
        const rows = this.db.db
          .query(`SELECT DISTINCT entity FROM live_templates WHERE stream=? AND state='active' AND template_id IN (${placeholders});`)
          .all(stream, ...chunk);
        for (const row of rows) {
          const entity = String(row?.entity ?? "").trim();
          if (entity !== "") entities.add(entity);
        }
      }
      return Array.from(entities);
    }

    /**
     * The stream's journal in the engine (M20), created if need be: the one its batches touch
     * and its waits park in. The same object while the engine keeps that journal.
     */
    getOrCreateJournal(stream, touchCfg) {
      let native;
      try {
        native = this.withProfile(stream, () => this.engine.journal(stream));
      } catch (e) {
        if (!noEngine(e)) throw e;
        // The reference hands out a journal for any stream; one the engine does not touch
        // (no touch config, or stopped) is a journal of its own, as the reference's would be.
        return this.#detached(stream, touchCfg);
      }
      return this.#journal(stream, native);
    }

    /** The stream's journal if one was created (by a wait, a meta read, a batch), else null. */
    getJournalIfExists(stream) {
      let native;
      try {
        native = this.engine.journal(stream, { create: false });
      } catch (e) {
        if (noTouch(e) || e?.code === "ERR_CLOSED") return null;
        throw e;
      }
      return native === null ? null : this.#journal(stream, native);
    }

    /** A journal outside the engine for `stream`, made once (see `getOrCreateJournal`). */
    #detached(stream, touchCfg) {
      const known = this.detached.get(stream);
      if (known !== undefined) return known;
      const mem = touchCfg?.memory ?? {};
      const j = new TouchJournal({
        bucketMs: mem.bucketMs ?? 100,
        filterPow2: mem.filterPow2 ?? 22,
        k: mem.k ?? 4,
        pendingMaxKeys: mem.pendingMaxKeys ?? 100_000,
        keyIndexMaxKeys: mem.keyIndexMaxKeys ?? 32,
      });
      this.detached.set(stream, j);
      this.detachedCreated += 1;
      return j;
    }

    /** One wrapper per engine journal: the reference journal's `waitForAny` contract on it. */
    #journal(stream, native) {
      const known = this.journals.get(stream);
      if (known !== undefined && known.getEpoch() === native.getEpoch()) return known;
      Object.defineProperty(native, "waitForAny", { value: bridgeWaitForAny(native.waitForAny.bind(native)) });
      this.journals.set(stream, native);
      return native;
    }

    /** After an activation (this class's or the route's): denials and lifecycle events. */
    recordActivation(stream, touchCfg, res) {
      const limited = res.denied.filter((d) => d.reason === "rate_limited").length;
      if (limited > 0) this.liveMetrics?.recordActivationDenied(stream, touchCfg, limited);
      this.drainRecords();
    }
  };
}
