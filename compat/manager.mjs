// The Prisma Streams server's `TouchProcessorManager` (`touch/manager.ts`) on the native
// engine. Same constructor, and every member the server calls (`start`, `stop`, `notify`,
// `getMemoryStats`, `getTopStreams`); the touch routes (compat/routes.mjs, swapped in with it)
// reach the engine through `engine`, `withProfile`, `recordWaitMetrics` and
// `recordActivation`.
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
import { Store, TouchEngine } from "../index.js";
import { hostConnectionOf } from "./sqlite-adapter.mjs";

/** Set on what durable-touch puts in place of the server's own (the swap's tests look). */
const NATIVE = Symbol.for("durable-touch.native");

/** How often the engine re-reads the server's profiles (ms). */
const PROFILE_POLL_MS = 1000;

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
      this.stopped = false;
      const workers = Math.floor(Number(cfg.touchWorkers ?? 1));
      const interval = Math.floor(Number(cfg.touchCheckIntervalMs ?? 250));
      // The engine reads on connections of its own and commits on the server's: a commit from
      // another connection would make the server's next write fail (SQLITE_BUSY_SNAPSHOT) while
      // it holds a read statement open, as its segmenter does across its yields.
      const hostConnection = hostConnectionOf(db?.db);
      if (hostConnection === undefined) throw new Error("durable-touch: the server's database is not on durable-touch's SQLite adapter");
      this.store = Store.open(cfg.dbPath, { hostConnection });
      this.engine = new TouchEngine(this.store, {
        workers: Math.max(1, Math.min(64, workers)),
        checkIntervalMs: Math.max(0, interval),
        maxBatchRows: Math.max(1, Math.floor(Number(cfg.touchMaxBatchRows ?? 500))),
        maxBatchBytes: Math.max(1, Math.floor(Number(cfg.touchMaxBatchBytes ?? 4 * 1024 * 1024))),
        // The reference processes nothing with no workers or no tick.
        autoProcess: workers > 0 && interval > 0,
        profilePollMs: PROFILE_POLL_MS,
      });
      this.liveMetrics =
        typeof LiveMetricsV2 === "function"
          ? new LiveMetricsV2(db, ingest, profiles, {
              getTouchJournal: () => null,
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
      this.liveMetrics?.stop();
      await this.engine.close();
      await this.store.close();
    }

    /** Called by the server after each committed append: processing starts at once. */
    notify(stream) {
      if (!this.stopped) this.engine.notify(stream);
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
      return {
        dirtyStreams: m.dirtyStreams,
        journals: m.journals,
        journalsCreatedTotal: m.journalsCreatedTotal,
        journalFilterBytesTotal: m.journalFilterBytesTotal,
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
      const n = Math.max(0, Math.floor(Number(limit)));
      return this.engine.memoryStats(Number.isFinite(n) ? n : 5).topStreams.map((t) => ({
        stream: t.stream,
        journal_filter_bytes: t.journalFilterBytes,
        dirty: t.dirty,
        touch_mode: t.touchMode ?? null,
      }));
    }

    /** The reference manager's activation member, for any caller other than the routes. */
    activateTemplates({ stream, touchCfg, templates, inactivityTtlMs }) {
      const options = inactivityTtlMs === undefined ? undefined : { inactivityTtlMs };
      const res = this.withProfile(stream, () => this.engine.activateTemplates(stream, templates, options));
      this.recordActivation(stream, touchCfg, res);
      return { activated: res.activated, denied: res.denied };
    }

    /** Wait outcomes for `live.metrics` (the engine counts them for `meta` itself). */
    recordWaitMetrics({ stream, touchCfg, keysCount, outcome, latencyMs }) {
      this.liveMetrics?.recordWait(stream, touchCfg, keysCount, outcome, latencyMs);
    }

    recordActivation(stream, touchCfg, res) {
      const limited = res.denied.filter((d) => d.reason === "rate_limited").length;
      if (limited > 0) this.liveMetrics?.recordActivationDenied(stream, touchCfg, limited);
    }
  };
}
