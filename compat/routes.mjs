// The Prisma Streams server's state-protocol touch routes (`profiles/stateProtocol/routes.ts`:
// `touch/templates/activate`, `touch/meta`, `touch/wait`) answered by the native engine of the
// swapped `TouchProcessorManager` (compat/manager.mjs).
//
// The reference route validates a wait, picks its kind and keys, checks its cursor and then
// registers it on the journal in two separate JS calls. `TouchEngine.wait` does all of that
// (W1–W6) atomically under the journal's lock, and adds the keys that make up for changes the
// engine could not key (the catch-all key, deviations.md B1–B5), so the route hands it the
// body as it came. Replies, statuses and error bodies are the reference route's.
//
// `createStateProtocolTouchRoute(host)` takes the server's own helpers (the swapped module
// imports them): `getStateProtocolTouchConfig(profile)` from `./validation`.
import { createRequire } from "node:module";

const native = createRequire(import.meta.url)("../lib/internal/native.js");

/** Maps an engine error to the route's response; rethrows what the route would not catch. */
function errorResponse(e, respond) {
  switch (e?.code) {
    case "ERR_INVALID_ARGUMENT":
      return respond.badRequest(e.message);
    case "ERR_INVALID_CURSOR":
      // The engine's message carries a prefix ("invalid touch cursor: …"); the route's is bare.
      return respond.badRequest(String(e.message).replace(/^invalid touch cursor: /, ""));
    case "ERR_TOUCH_NOT_ENABLED":
      return respond.notFound("touch not enabled");
    case "ERR_STREAM_NOT_FOUND":
      return respond.notFound("not_found");
    default:
      throw e;
  }
}

/** Resolves with `promise`'s value, or with `onAbort()` once `signal` aborts. */
function unlessAborted(promise, signal, onAbort) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.resolve(onAbort());
  return new Promise((resolve, reject) => {
    const abort = () => resolve(onAbort());
    signal.addEventListener("abort", abort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener("abort", abort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", abort);
        reject(e);
      },
    );
  });
}

const NO_CONTENT = () => new Response(null, { status: 204 });

/**
 * The request fields `/touch/wait` reads (the rest of the body is ignored, as by the reference):
 * the engine's own list (`WaitArgs::FIELDS`), in its order.
 */
const WAIT_FIELDS = Object.freeze(native._waitFields());

async function readJson(req) {
  try {
    return { ok: true, body: await req.json() };
  } catch {
    return { ok: false };
  }
}

async function handleActivate(args, touchCfg) {
  const { req, stream, touchManager, respond } = args;
  if (req.method !== "POST") return respond.badRequest("unsupported method");
  const parsed = await readJson(req);
  if (!parsed.ok) return respond.badRequest("activate body must be valid JSON");
  const body = parsed.body;
  // The reference takes only a number here; anything else gets its message from the engine as
  // NaN does, without the binding copying the value (an array of 70,000 numbers would be
  // refused as "too large" instead).
  const ttl = body?.inactivityTtlMs;
  const options = ttl === undefined ? undefined : { inactivityTtlMs: typeof ttl === "number" ? ttl : NaN };
  let res;
  try {
    res = touchManager.withProfile(stream, () => touchManager.engine.activateTemplates(stream, body?.templates, options));
  } catch (e) {
    return errorResponse(e, respond);
  }
  touchManager.recordActivation(stream, touchCfg, res);
  const limits = {
    maxActiveTemplatesPerStream: res.limits.maxActiveTemplatesPerStream,
    maxActiveTemplatesPerEntity: res.limits.maxActiveTemplatesPerEntity,
  };
  return respond.json(200, { activated: res.activated, denied: res.denied, limits });
}

/** `/touch/meta`'s payload: the reference's fields in its order (the engine's own totals,
 * `compensationTouchesTotal` and `batchesSplitForBudgetTotal`, stay in `TouchEngine.meta`). */
function metaPayload(m) {
  return {
    mode: m.mode,
    cursor: m.cursor,
    epoch: m.epoch,
    generation: m.generation,
    bucketMs: m.bucketMs,
    coalesceMs: m.coalesceMs,
    filterSize: m.filterSize,
    k: m.k,
    pendingKeys: m.pendingKeys,
    overflowBuckets: m.overflowBuckets,
    activeWaiters: m.activeWaiters,
    bucketMaxSourceOffsetSeq: m.bucketMaxSourceOffsetSeq,
    lastFlushAtMs: m.lastFlushAtMs,
    flushIntervalMsMaxLast10s: m.flushIntervalMsMaxLast10s,
    flushIntervalMsP95Last10s: m.flushIntervalMsP95Last10s,
    settled: m.settled,
    coarseIntervalMs: m.coarseIntervalMs,
    touchCoalesceWindowMs: m.touchCoalesceWindowMs,
    activeTemplates: m.activeTemplates,
    lagSourceOffsets: m.lagSourceOffsets,
    touchMode: m.touchMode,
    walScannedThrough: m.walScannedThrough ?? null,
    hotFineKeys: m.hotFineKeys,
    hotTemplates: m.hotTemplates,
    hotFineKeysActive: m.hotFineKeysActive,
    hotFineKeysGrace: m.hotFineKeysGrace,
    hotTemplatesActive: m.hotTemplatesActive,
    hotTemplatesGrace: m.hotTemplatesGrace,
    fineWaitersActive: m.fineWaitersActive,
    coarseWaitersActive: m.coarseWaitersActive,
    broadFineWaitersActive: m.broadFineWaitersActive,
    hotKeyFilteringEnabled: m.hotKeyFilteringEnabled,
    hotTemplateFilteringEnabled: m.hotTemplateFilteringEnabled,
    scanRowsTotal: m.scanRowsTotal,
    scanBatchesTotal: m.scanBatchesTotal,
    scannedButEmitted0BatchesTotal: m.scannedButEmitted0BatchesTotal,
    processedThroughDeltaTotal: m.processedThroughDeltaTotal,
    touchesEmittedTotal: m.touchesEmittedTotal,
    touchesTableTotal: m.touchesTableTotal,
    touchesTemplateTotal: m.touchesTemplateTotal,
    fineTouchesDroppedDueToBudgetTotal: m.fineTouchesDroppedDueToBudgetTotal,
    fineTouchesSkippedColdTemplateTotal: m.fineTouchesSkippedColdTemplateTotal,
    fineTouchesSkippedColdKeyTotal: m.fineTouchesSkippedColdKeyTotal,
    fineTouchesSkippedTemplateBucketTotal: m.fineTouchesSkippedTemplateBucketTotal,
    waitTouchedTotal: m.waitTouchedTotal,
    waitTimeoutTotal: m.waitTimeoutTotal,
    waitStaleTotal: m.waitStaleTotal,
    journalFlushesTotal: m.journalFlushesTotal,
    journalNotifyWakeupsTotal: m.journalNotifyWakeupsTotal,
    journalNotifyWakeMsTotal: m.journalNotifyWakeMsTotal,
    journalNotifyWakeMsMax: m.journalNotifyWakeMsMax,
    journalTimeoutsFiredTotal: m.journalTimeoutsFiredTotal,
    journalTimeoutSweepMsTotal: m.journalTimeoutSweepMsTotal,
  };
}

/** `timeoutMs` of the meta query string, as the reference reads it. */
function metaTimeout(raw) {
  if (raw == null || raw.trim() === "") return 30_000;
  const n = Number(raw);
  if (!Number.isFinite(n)) return null;
  return Math.max(0, Math.min(120_000, Math.floor(n)));
}

async function handleMeta(args) {
  const { req, stream, touchManager, respond } = args;
  if (req.method !== "GET") return respond.badRequest("unsupported method");
  const url = new URL(req.url);
  const settle = url.searchParams.get("settle");
  if (settle !== null && settle !== "flush") return respond.badRequest("meta.settle must be 'flush' when provided");
  const timeoutMs = metaTimeout(url.searchParams.get("timeoutMs"));
  if (timeoutMs == null) return respond.badRequest("meta.timeoutMs must be a number (ms)");
  try {
    const options = settle === "flush" ? { settle: "flush", timeoutMs } : undefined;
    const meta = touchManager.withProfile(stream, () => touchManager.engine.meta(stream, options));
    const m = await unlessAborted(meta, settle === "flush" ? req.signal : null, () => null);
    if (m === null) return NO_CONTENT();
    return respond.json(200, metaPayload(m));
  } catch (e) {
    return errorResponse(e, respond);
  }
}

async function handleWait(args, touchCfg) {
  const { req, stream, touchManager, respond } = args;
  if (req.method !== "POST") return respond.badRequest("unsupported method");
  const startedMs = Date.now();
  const parsed = await readJson(req);
  if (!parsed.ok) return respond.badRequest("wait body must be valid JSON");
  const body = parsed.body;
  const request = { stream, signal: req.signal };
  if (body !== null && typeof body === "object") {
    for (const f of WAIT_FIELDS) if (body[f] !== undefined) request[f] = body[f];
  }
  let r;
  try {
    r = await touchManager.withProfile(stream, () => touchManager.engine.wait(request));
  } catch (e) {
    if (e?.code === "ERR_ABORTED") return NO_CONTENT();
    return errorResponse(e, respond);
  }
  const outcome = r.stale ? "stale" : r.touched ? "touched" : "timeout";
  const keysCount = Array.isArray(body?.keyIds) && body.keyIds.length > 0 ? body.keyIds.length : Array.isArray(body?.keys) ? body.keys.length : 0;
  touchManager.recordRouteWait({ stream, touchCfg, keysCount, outcome, latencyMs: Date.now() - startedMs });
  const tail = {
    effectiveWaitKind: r.effectiveWaitKind,
    bucketMaxSourceOffsetSeq: r.bucketMaxSourceOffsetSeq,
    flushAtMs: r.flushAtMs,
    bucketStartMs: r.bucketStartMs,
  };
  if (r.stale) {
    return respond.json(200, { stale: true, cursor: r.cursor, epoch: r.epoch, generation: r.generation, ...tail, error: r.error });
  }
  return respond.json(200, { touched: r.touched, cursor: r.cursor, ...tail });
}

/**
 * `handleStateProtocolTouchRoute` for the swapped server. `host.getStateProtocolTouchConfig`
 * is the server's own (`profiles/stateProtocol/validation.ts`).
 */
export function createStateProtocolTouchRoute(host) {
  const { getStateProtocolTouchConfig } = host;
  if (typeof getStateProtocolTouchConfig !== "function") {
    throw new TypeError("createStateProtocolTouchRoute needs the server's getStateProtocolTouchConfig");
  }
  const handleStateProtocolTouchRoute = async function handleStateProtocolTouchRoute(args) {
    const { route, profile, respond, touchManager } = args;
    const touchCfg = getStateProtocolTouchConfig(profile);
    if (!touchCfg) return respond.notFound("touch not enabled");
    if (typeof touchManager?.withProfile !== "function") {
      throw new Error("the touch routes are swapped but touch/manager.ts is not: run `npx durable-touch swap` again");
    }
    if (route.kind === "templates_activate") return handleActivate(args, touchCfg);
    if (route.kind === "meta") return handleMeta(args);
    return handleWait(args, touchCfg);
  };
  handleStateProtocolTouchRoute[Symbol.for("durable-touch.native")] = true;
  return handleStateProtocolTouchRoute;
}
