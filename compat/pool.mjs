// `TouchProcessorWorkerPool` for the reference server (`touch/worker_pool.ts`): the same
// constructor, lifecycle and `Result` values, with the native processor in place of the
// worker threads. A request reads its batch from the host's SQLite file through the host's
// own binding (./host-sqlite.mjs, on the JS thread, as the worker would read it), then the
// native `processRows` computes the touches off the JS thread.
//
// Requests run in arrival order, at most `workerCount` at a time (the reference's worker
// slots); `stop()` answers every pending request with the reference's "worker pool stopped"
// error and waits for batches already handed to the native pool.
import { createRequire } from "node:module";
import { Result, TaggedError } from "better-result";
import { HostReader } from "./host-sqlite.mjs";

const require = createRequire(import.meta.url);
const { processRows } = require("../index.js");

/** `dsError` of the reference (util/ds_error.ts): a tagged `DurableStreamsError`. */
class DurableStreamsError extends TaggedError("DurableStreamsError")() {}

const unavailable = (message) => Result.err({ kind: "worker_pool_unavailable", message });
const failure = (message) => Result.err({ kind: "worker_pool_failure", message });

export class TouchProcessorWorkerPool {
  #cfg;
  #workerCount;
  #open;
  #started = false;
  #generation = 0;
  #nextId = 1;
  /** id → resolve, for every request not answered yet (queued or running). */
  #pending = new Map();
  #queue = [];
  #running = 0;
  /** Native batches in flight (their promises never reject). */
  #inFlight = new Set();
  #reader = null;

  /**
   * `cfg`: the reference's `Config` (`dbPath`, `workerSqliteCacheBytes` are read).
   * `options.openDatabase(path)`: the host's SQLite opener, for hosts without `bun:sqlite` or
   * `node:sqlite` (see ./host-sqlite.mjs for the shape).
   */
  constructor(cfg, workerCount, options = {}) {
    this.#cfg = cfg;
    this.#workerCount = Math.max(0, Math.floor(workerCount));
    this.#open = options.openDatabase;
  }

  start() {
    if (this.#started) return;
    this.#started = true;
    this.#generation += 1;
    this.#running = 0;
  }

  async stop() {
    if (!this.#started) return;
    this.#started = false;
    this.#generation += 1;
    this.#queue.length = 0;
    for (const [id, resolve] of this.#pending) {
      this.#pending.delete(id);
      resolve(failure("worker pool stopped"));
    }
    const reader = this.#reader;
    this.#reader = null;
    // Like the reference, which awaits worker termination: nothing of this generation runs
    // once stop() has resolved.
    await Promise.all([...this.#inFlight]);
    reader?.close();
  }

  async restart() {
    await this.stop();
    this.start();
  }

  async processResult(req) {
    if (!this.#started) return unavailable("worker pool not started");
    if (this.#workerCount === 0) return unavailable("worker pool disabled");
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      this.#queue.push({ ...req, id });
      this.#pump();
    });
  }

  async process(req) {
    const res = await this.processResult(req);
    if (Result.isError(res)) throw new DurableStreamsError({ message: res.error.message });
    return res.value;
  }

  #pump() {
    while (this.#started && this.#running < this.#workerCount && this.#queue.length > 0) {
      const next = this.#queue.shift();
      this.#running += 1;
      const generation = this.#generation;
      const task = this.#run(next).then((outcome) => {
        this.#inFlight.delete(task);
        if (generation !== this.#generation) return;
        this.#running -= 1;
        const resolve = this.#pending.get(next.id);
        if (resolve) {
          this.#pending.delete(next.id);
          resolve(outcome);
        }
        this.#pump();
      });
      this.#inFlight.add(task);
    }
  }

  /** One batch: read it through the host's binding, process it natively. Never rejects. */
  async #run(req) {
    try {
      this.#reader ??= new HostReader(this.#cfg.dbPath, { cacheBytes: this.#cfg.workerSqliteCacheBytes, open: this.#open });
      const templates = this.#reader.activeTemplates(req.stream);
      const rows = this.#reader.walRows(req.stream, req.fromOffset, req.toOffset, req.maxRows, req.maxBytes);
      const res = await processRows(rows, request(req), templates);
      return Result.ok({ type: "result", id: req.id, stream: res.stream, processedThrough: res.processedThrough, touches: res.touches, stats: res.stats });
    } catch (e) {
      return failure(String(e?.message ?? e));
    }
  }
}

/** The fields the reference pool forwards to its worker (`pump()`), nothing else. */
function request(q) {
  return {
    stream: q.stream,
    fromOffset: q.fromOffset,
    toOffset: q.toOffset,
    profile: q.profile,
    maxRows: q.maxRows,
    maxBytes: q.maxBytes,
    emitFineTouches: q.emitFineTouches,
    fineTouchBudget: q.fineTouchBudget,
    fineGranularity: q.fineGranularity,
    processingMode: q.processingMode,
    filterHotTemplates: q.filterHotTemplates,
    hotTemplateIds: q.hotTemplateIds,
  };
}
