// Types of durable-touch/compat: the reference server's touch journal and worker pool modules
// (`touch/touch_journal.ts`, `touch/worker_pool.ts` of @prisma/streams-server 0.1.11), typed
// after the reference's shapes; fields the native core does not look into are `unknown`.
import type { Result } from "better-result";
import { TouchJournal as NativeTouchJournal } from "../index.js";
import type {
  EngineJournal,
  Store,
  TemplateDecl,
  TouchEngine,
  TouchJournalIntervalStats,
  TouchJournalMeta,
  TouchJournalOptions,
  TouchJournalTotalStats,
  TouchHit,
  TouchRow,
  TouchRuntime,
} from "../index.js";

export type { TouchJournalIntervalStats, TouchJournalMeta, TouchJournalOptions, TouchJournalTotalStats, TouchHit, TouchRow };

/** What the reference's wait route answers (its `TouchWaitResult`). */
export type TouchWaitResult =
  | { stale: true; cursor: string; epoch: string; generation: number }
  | { stale: false; touched: boolean; cursor: string };

/** J3: `{ epoch, generation }` for `<epochHex16>:<digits>`, else null. */
export declare function parseTouchCursor(raw: string): { epoch: string; generation: number } | null;
/** `<epoch>:<generation>` with the generation floored and at least 0. */
export declare function formatTouchCursor(epoch: string, generation: number): string;

/**
 * The native touch journal with the reference's constructor options and methods. Waits on
 * more than 1024 keys (the native limit per wait) are split into several native waits.
 */
export declare class TouchJournal extends NativeTouchJournal {
  constructor(options?: TouchJournalOptions | null);
}

/** The reference's `WorkerPoolProcessError`. */
export type WorkerPoolProcessError = {
  kind: "worker_pool_unavailable" | "worker_pool_failure";
  message: string;
};

/** The reference's `ProcessRequest` without `type` and `id`. */
export type ProcessRequest = {
  stream: string;
  fromOffset: bigint;
  toOffset: bigint;
  /** The stream profile (`{ kind: "state-protocol", touch: { enabled: true, … } }`). */
  profile: unknown;
  maxRows: number;
  maxBytes: number;
  emitFineTouches?: boolean;
  fineTouchBudget?: number | null;
  fineGranularity?: "key" | "template";
  processingMode?: "full" | "hotTemplatesOnly";
  filterHotTemplates?: boolean;
  hotTemplateIds?: string[] | null;
};

/** The reference worker's result message. */
export type ProcessResult = {
  type: "result";
  id: number;
  stream: string;
  processedThrough: bigint;
  touches: TouchRow[];
  stats: {
    rowsRead: number;
    bytesRead: number;
    changes: number;
    touchesEmitted: number;
    tableTouchesEmitted: number;
    templateTouchesEmitted: number;
    maxSourceTsMs?: number;
    fineTouchesDroppedDueToBudget?: number;
    fineTouchesSuppressedDueToBudget?: boolean;
    fineTouchesSkippedColdTemplate?: number;
  };
};

/** A SQLite statement of the host's driver (integers read as bigints). */
export interface HostStatement {
  all(...params: unknown[]): Array<Record<string, unknown>>;
  iterate?(...params: unknown[]): Iterable<Record<string, unknown>>;
}

/** A SQLite connection of the host's driver. */
export interface HostDatabase {
  exec(sql: string): unknown;
  prepare(sql: string): HostStatement;
  close(): unknown;
}

export type TouchProcessorWorkerPoolOptions = {
  /** Opens the host's SQLite file with the host's driver (default: bun:sqlite / node:sqlite). */
  openDatabase?: (path: string) => HostDatabase;
};

/**
 * The reference's `TouchProcessorWorkerPool` on the native processor. It reads batches from
 * `cfg.dbPath` through the host runtime's own SQLite binding, never with a second SQLite.
 */
export declare class TouchProcessorWorkerPool {
  constructor(cfg: { dbPath: string; workerSqliteCacheBytes?: number }, workerCount: number, options?: TouchProcessorWorkerPoolOptions);
  start(): void;
  /** Answers pending requests with `worker pool stopped`; resolves once no batch runs. */
  stop(): Promise<void>;
  restart(): Promise<void>;
  processResult(req: ProcessRequest): Promise<Result<ProcessResult, WorkerPoolProcessError>>;
  /** `processResult`, throwing a `DurableStreamsError` on error. */
  process(req: ProcessRequest): Promise<ProcessResult>;
}

/** What the swapped manager takes of a stream's touch config (the server's `TouchConfig`). */
export type HostTouchConfig = Record<string, unknown>;

/**
 * The reference's `TouchProcessorManager` (`touch/manager.ts` 0.1.11) on the native engine:
 * the same constructor and every public member of the reference class.
 */
export declare class TouchProcessorManager {
  constructor(cfg: Record<string, any>, db: any, ingest: any, notifier: any, profiles: any, backpressure?: any);
  readonly engine: TouchEngine;
  readonly store: Store;
  start(): void;
  stop(): Promise<void>;
  notify(stream: string): void;
  /** One processing pass now: every row committed before the call is processed and touched. */
  tick(): Promise<void>;
  getMemoryStats(): Record<string, number>;
  getTopStreams(limit?: number): Array<{ stream: string; journal_filter_bytes: number; dirty: boolean; touch_mode: "idle" | "fine" | "restricted" | "coarseOnly" | null }>;
  activateTemplates(args: {
    stream: string;
    touchCfg: HostTouchConfig;
    baseStreamNextOffset?: bigint;
    activeFromTouchOffset?: string;
    templates: TemplateDecl[];
    inactivityTtlMs?: number;
  }): { activated: Array<{ templateId: string; state: "active"; activeFromTouchOffset: string }>; denied: Array<{ templateId: string; reason: string }> };
  heartbeatTemplates(args: { stream: string; touchCfg: HostTouchConfig; templateIdsUsed: string[] }): void;
  beginHotWaitInterest(args: {
    stream: string;
    touchCfg: HostTouchConfig;
    keyIds: number[];
    templateIdsUsed: string[];
    interestMode: "fine" | "coarse";
  }): () => void;
  getTouchRuntimeSnapshot(args: { stream: string; touchCfg: HostTouchConfig }): TouchRuntime;
  recordWaitMetrics(args: { stream: string; touchCfg: HostTouchConfig; keysCount: number; outcome: "touched" | "timeout" | "stale"; latencyMs: number }): void;
  resolveTemplateEntitiesForWait(args: { stream: string; templateIdsUsed: string[] }): string[];
  /** The engine's own journal of the stream (its batches touch it, its waits park in it). */
  getOrCreateJournal(stream: string, touchCfg?: HostTouchConfig): EngineJournal;
  getJournalIfExists(stream: string): EngineJournal | null;
}

/**
 * The manager class for a server whose modules `host` names: `openSqliteDatabase` (its
 * `sqlite/adapter.ts`, which must be ours) and, optionally, `LiveMetricsV2`.
 */
export declare function createTouchProcessorManager(host?: { openSqliteDatabase?: unknown; LiveMetricsV2?: unknown }): typeof TouchProcessorManager;

/** The server's SQLite adapter (`sqlite/adapter.ts`) on durable-touch's SQLite; also `durable-touch/compat/sqlite-adapter`. */
export * as sqliteAdapter from "./sqlite-adapter.mjs";
