// The swapped server's `live.metrics` stream says what the unswapped one says about touch
// processing: the per-batch `processor.*` and `touch.*` counters of its `live.tick` records and
// the template lifecycle (`templates.activated` / `retired` / `evicted` and the
// `live.template_*` event rows). `reference/swap-live-metrics.ts` runs one scenario (templates
// activated over HTTP, one refreshed, one evicted, one declared by a wait; rows processed by
// the loop; every template retired by its TTL) on an unswapped and a swapped copy of the
// server and sums each stream's ticks.
import assert from "node:assert/strict";
import { test } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { swap } from "../apps/swap/swap.mjs";
import { serverCopies } from "./support/server-copies.mjs";

test("live.metrics reports processing and the template lifecycle as the unswapped server does", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const [{ streams: a }, { streams: b }] = await Promise.all([
    runReference("swap-live-metrics", {}, { env: { APP_SRC: plain }, retries: 2 }),
    runReference("swap-live-metrics", {}, { env: { APP_SRC: swapped }, retries: 2 }),
  ]);
  // What the reference reports, so that two copies cannot agree on nothing.
  assert.deepEqual(a.m.templates, { activated: 5, retired: 3, evicted: 1, activationDenied: 0 });
  assert.equal(a.m.processor.eventsIn, 152);
  assert.equal(a.n.processor.eventsIn, 30);
  for (const s of ["m", "n"]) {
    const [ref, ours] = [a[s], b[s]];
    assert.ok(ours.ticks > 0, `${s}: live.tick records`);
    // Exact: the lifecycle (both count every activation, refreshes included, each eviction
    // and each retirement, and append one row per event with the same fields) ...
    assert.deepEqual(ours.templates, ref.templates, `${s}: templates.*`);
    assert.deepEqual(ours.events, ref.events, `${s}: live.template_* rows`);
    // ... rows read, changes, how far the checkpoint moved, errors, waits and the mode the
    // stream was left in (both read every row once).
    for (const k of ["eventsIn", "changesOut", "processedThroughDelta", "errors", "lastMode"]) {
      assert.equal(ours.processor[k], ref.processor[k], `${s}: processor.${k}`);
    }
    assert.equal(ours.wait.calls, ref.wait.calls, `${s}: wait.calls`);
    // Both > 0 where the batching legitimately differs: the engine runs a batch as soon as an
    // append commits and sizes it by its own rules, so the batch counts differ; it touches the
    // template keys of a batch with no fine waiter where the reference touches only table
    // keys (deviations.md B2/B4), so the touch counts differ. (`scannedButEmitted0Batches` is 0
    // on both: every batch read rows that touch their table key.)
    for (const k of ["scannedBatches", "touchesEmittedDelta", "commitLagTicks"]) {
      assert.ok(ref.processor[k] > 0 && ours.processor[k] > 0, `${s}: processor.${k} ${ref.processor[k]} / ${ours.processor[k]}`);
    }
    assert.equal(ours.processor.scannedButEmitted0Batches, ref.processor.scannedButEmitted0Batches);
    for (const k of ["touchesEmitted", "uniqueKeysTouched", "tableTouchesEmitted"]) {
      assert.ok(ref.touch[k] > 0 && ours.touch[k] > 0, `${s}: touch.${k} ${ref.touch[k]} / ${ours.touch[k]}`);
    }
    // Per batch, touch.touchesEmitted is processor.touchesEmittedDelta, and table + template.
    for (const x of [ref, ours]) {
      assert.equal(x.touch.touchesEmitted, x.processor.touchesEmittedDelta);
      assert.equal(x.touch.touchesEmitted, x.touch.tableTouchesEmitted + x.touch.templateTouchesEmitted);
    }
  }
}, { timeout: 60_000, skip: !referenceAvailable() });

test("the engine's records give the reference's LiveMetricsV2 the counters its own calls give it", async () => {
  const { ref, ours, folded, bare } = await runReference("live-metrics-feed", {});
  // Touch counts instead of touch arrays, one record per batch, lifecycle records, WAL GC and
  // failures folded per stream: the same counters and the same `live.template_*` rows.
  assert.deepEqual(ours.counters, ref.counters);
  assert.deepEqual(ours.appended, ref.appended);
  assert.equal(ref.counters.s.touch.touchesEmitted, 6);
  assert.equal(ref.counters.s.touch.uniqueKeysTouched, 5);
  assert.equal(ref.counters.s.gc.baseWalGcCalls, 2);
  assert.deepEqual(Object.keys(ref.appended[0]).slice(0, 10), ["type", "ts", "stream", "templateId", "entity", "fields", "encodings", "reason", "activeFromTouchOffset", "inactivityTtlMs"]);
  // Past the engine's cap, three batches folded into one record and lifecycle events counted
  // only: the same counts, but one commit-lag sample (the largest) for the three batches.
  const { commitLagSamples, commitLagMsSum, commitLagHist, ...processor } = folded.s.processor;
  const { commitLagSamples: n, commitLagMsSum: _sum, commitLagHist: _hist, ...refProcessor } = ref.counters.s.processor;
  assert.deepEqual({ ...processor, errors: 0 }, { ...refProcessor, errors: 0 });
  assert.deepEqual([commitLagSamples, commitLagMsSum, n], [1, 30, 3]);
  assert.equal(commitLagHist.reduce((a, b) => a + b, 0), 1);
  assert.deepEqual(folded.s.touch, ref.counters.s.touch);
  assert.deepEqual(folded.s.templates, ref.counters.s.templates);
  assert.deepEqual(folded.t.templates, ref.counters.t.templates);
  // A LiveMetricsV2 without the 0.1.11 counters: every call made, touch counts not added, one
  // warning.
  assert.deepEqual(bare.calls, ["batch s 4 0", "lifecycle 1", "gc s", "error s", "batch s 2 0"]);
  assert.equal(bare.warnings, 1);
}, { timeout: 60_000, skip: !referenceAvailable() });
