// Feeds the server's `LiveMetricsV2` (`touch/live_metrics.ts`, whose `live.metrics` stream
// summarises touch processing) what the engine did, as the reference manager feeds it while it
// processes: `recordProcessorBatch` per batch, `emitLifecycle` for template activations,
// retirements and evictions, `recordBaseWalGc` per WAL deletion, `recordProcessorError` per
// failed batch. The engine keeps these natively (`TouchEngine.takeRecords()`, with
// `records: true`); the manager drains them every few hundred milliseconds and hands them here.
//
// A batch record carries touch counts, not touches (touches never cross into JavaScript).
// `recordProcessorBatch` derives its touch counters from a `touches` array, so it gets an empty
// one and the counts are added to the counters it keeps (`counters`, a Map by stream in the
// 0.1.11 class the swap supports). A `LiveMetricsV2` without that Map still gets every call;
// only its `touch.touchesEmitted` / `uniqueKeysTouched` / `tableTouchesEmitted` /
// `templateTouchesEmitted` (and the extra counts of folded records) stay 0, and one warning says
// so.

/** `recordProcessorBatch`'s `touches`: the counts go to the counters directly. */
const NO_TOUCHES = Object.freeze([]);

let warned = false;

/** The per-stream counters of a 0.1.11 `LiveMetricsV2`, or null with a warning (once). */
function countersOf(lm) {
  const m = lm?.counters;
  if (m instanceof Map) return m;
  if (!warned) {
    warned = true;
    console.warn("durable-touch: this LiveMetricsV2 keeps no `counters` Map; live.metrics touch counts stay 0");
  }
  return null;
}

/** The counters of `stream` in the shape 0.1.11 keeps them, made if need be; else null. */
function streamCounters(lm, counters, stream, touchCfg) {
  if (counters === null) return null;
  // A public call that creates the stream's counters and counts nothing.
  if (!counters.has(stream)) lm.recordActivationDenied(stream, touchCfg, 0);
  const c = counters.get(stream);
  const ok =
    typeof c?.touch?.touchesEmitted === "number" &&
    typeof c?.processor?.scannedBatches === "number" &&
    typeof c?.templates?.activated === "number" &&
    typeof c?.gc?.baseWalGcCalls === "number";
  return ok ? c : null;
}

/** A lifecycle record as the reference's `TemplateLifecycleEvent` (its fields, its order). */
export function lifecycleEvent(r) {
  const head = { type: r.type, ts: r.ts, stream: r.stream, templateId: r.templateId };
  if (r.type === "live.template_activated") {
    return {
      ...head,
      entity: r.entity,
      fields: r.fields,
      encodings: r.encodings,
      reason: r.reason,
      activeFromTouchOffset: r.activeFromTouchOffset,
      inactivityTtlMs: r.inactivityTtlMs,
    };
  }
  if (r.type === "live.template_retired") {
    return {
      ...head,
      entity: r.entity,
      fields: r.fields,
      encodings: r.encodings,
      lastSeenAt: r.lastSeenAt,
      inactiveForMs: r.inactiveForMs,
      reason: r.reason,
    };
  }
  return { ...head, reason: r.reason, cap: r.cap };
}

/**
 * Hands `records` (what `TouchEngine.takeRecords()` returned) to `lm`. `touchCfgOf(stream)`
 * is the stream's touch config (null when the engine has none any more).
 */
export function feedLiveMetrics(lm, records, touchCfgOf) {
  const configs = new Map();
  const cfg = (stream) => {
    let c = configs.get(stream);
    if (c === undefined) {
      c = touchCfgOf(stream) ?? { enabled: true };
      configs.set(stream, c);
    }
    return c;
  };
  const { batches, lifecycle, lifecycleOverflow, walGc, failures } = records;
  const counters = batches.length + lifecycleOverflow.length + walGc.length > 0 ? countersOf(lm) : null;

  for (const b of batches) {
    const touchCfg = cfg(b.stream);
    lm.recordProcessorBatch({
      stream: b.stream,
      touchCfg,
      rowsRead: b.rowsRead,
      changes: b.changes,
      touches: NO_TOUCHES,
      lagSourceOffsets: b.lagSourceOffsets,
      commitLagMs: b.commitLagMs,
      fineTouchesDroppedDueToBudget: b.fineTouchesDroppedDueToBudget,
      fineTouchesSkippedColdTemplate: b.fineTouchesSkippedColdTemplate,
      fineTouchesSkippedColdKey: b.fineTouchesSkippedColdKey,
      fineTouchesSkippedTemplateBucket: b.fineTouchesSkippedTemplateBucket,
      fineTouchesSuppressedDueToLag: b.fineTouchesSuppressedBatchesDueToLag > 0,
      fineTouchesSuppressedDueToLagMs: b.fineTouchesSuppressedDueToLagMs,
      fineTouchesSuppressedDueToBudget: b.fineTouchesSuppressedBatchesDueToBudget > 0,
      touchMode: b.touchMode,
      hotFineKeys: b.hotFineKeys,
      hotTemplates: b.hotTemplates,
      hotFineKeysActive: b.hotFineKeysActive,
      hotFineKeysGrace: b.hotFineKeysGrace,
      hotTemplatesActive: b.hotTemplatesActive,
      hotTemplatesGrace: b.hotTemplatesGrace,
      fineWaitersActive: b.fineWaitersActive,
      coarseWaitersActive: b.coarseWaitersActive,
      broadFineWaitersActive: b.broadFineWaitersActive,
      scannedButEmitted0: b.scannedButEmitted0Batches > 0,
      noInterestFastForward: false,
      processedThroughDelta: b.processedThroughDelta,
      touchesEmittedDelta: b.touchesEmitted,
    });
    const c = streamCounters(lm, counters, b.stream, touchCfg);
    if (c === null) continue;
    c.touch.touchesEmitted += b.touchesEmitted;
    c.touch.uniqueKeysTouched += b.uniqueKeys;
    c.touch.tableTouchesEmitted += b.tableTouches;
    c.touch.templateTouchesEmitted += b.templateTouches;
    // A folded record stands for `batches` batches; the call above counted one of each.
    const more = (n) => Math.max(0, n - 1);
    c.processor.scannedBatches += more(b.batches);
    c.processor.scannedButEmitted0Batches += more(b.scannedButEmitted0Batches);
    c.touch.fineTouchesSuppressedBatchesDueToLag += more(b.fineTouchesSuppressedBatchesDueToLag);
    c.touch.fineTouchesSuppressedBatchesDueToBudget += more(b.fineTouchesSuppressedBatchesDueToBudget);
  }

  // Past the engine's queue, lifecycle events were only counted: the counts, without rows.
  for (const o of lifecycleOverflow) {
    const c = streamCounters(lm, counters, o.stream, cfg(o.stream));
    if (c === null) continue;
    c.templates.activated += o.activated;
    c.templates.retired += o.retired;
    c.templates.evicted += o.evicted;
  }
  if (lifecycle.length > 0) {
    // Appends the events to `live.metrics` and counts them; best-effort, as the reference's.
    Promise.resolve(lm.emitLifecycle(lifecycle.map(lifecycleEvent))).catch(() => {});
  }

  for (const g of walGc) {
    lm.recordBaseWalGc(g.stream, { deletedRows: g.deletedRows, deletedBytes: g.deletedBytes, durationMs: g.msMax });
    if (g.calls <= 1) continue;
    const c = streamCounters(lm, counters, g.stream, cfg(g.stream));
    if (c === null) continue;
    c.gc.baseWalGcCalls += g.calls - 1;
    c.gc.baseWalGcMsSum += g.msSum - g.msMax;
  }

  for (const f of failures) {
    const touchCfg = cfg(f.stream);
    for (let i = 0; i < f.count; i++) lm.recordProcessorError(f.stream, touchCfg);
  }
}
