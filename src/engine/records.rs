//! What the engine did, kept for a host that reports it: one record per processed batch, the
//! template lifecycle events (T11), WAL GC deletions (M17) and batch failures (M16). The
//! reference manager hands these to its `LiveMetricsV2` as they happen (`recordProcessorBatch`,
//! `emitLifecycle`, `recordBaseWalGc`, `recordProcessorError`), which its `live.metrics` stream
//! summarises; the swapped server's manager drains them from here (`TouchEngine.takeRecords`)
//! every few hundred milliseconds and feeds its own `LiveMetricsV2` the same calls. Touches
//! stay native: a batch record carries touch counts, never the touches.
//!
//! Only an engine opened with `EngineOptions::records` collects anything. The queue is bounded
//! by [`MAX_BATCH_RECORDS`] batch records and [`MAX_LIFECYCLE_EVENTS`] lifecycle events, plus
//! at most one entry per stream for what does not fit:
//!
//! - a batch record past the cap is folded into the newest queued record of its stream (sums
//!   added, maxima kept, the latest mode; `batches` says how many it stands for), or queued as
//!   that stream's first record when it has none: no count is lost;
//! - a lifecycle event past the cap is counted by stream and kind (`lifecycle_overflow`): the
//!   counts are kept, the event's own row is not;
//! - WAL GC deletions and failures are always folded per stream (they are rare: GC runs at most
//!   once per stream per `wal_gc_interval_ms`, a failing stream backs off).

use std::collections::HashMap;

use parking_lot::Mutex;

use super::policy::TouchMode;
use super::templates::LifecycleEvent;
use super::LifecycleCounts;

/// Batch records queued before later ones are folded into them.
pub const MAX_BATCH_RECORDS: usize = 10_000;
/// Lifecycle events queued before later ones are only counted.
pub const MAX_LIFECYCLE_EVENTS: usize = 10_000;

/// The hot state a batch was planned with (M19; the reference's `hotFine` snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HotCounts {
    pub hot_fine_keys: u64,
    pub hot_templates: u64,
    pub hot_fine_keys_active: u64,
    pub hot_fine_keys_grace: u64,
    pub hot_templates_active: u64,
    pub hot_templates_grace: u64,
    pub fine_waiters_active: u64,
    pub coarse_waiters_active: u64,
    pub broad_fine_waiters_active: u64,
}

impl HotCounts {
    fn max(&mut self, o: &HotCounts) {
        self.hot_fine_keys = self.hot_fine_keys.max(o.hot_fine_keys);
        self.hot_templates = self.hot_templates.max(o.hot_templates);
        self.hot_fine_keys_active = self.hot_fine_keys_active.max(o.hot_fine_keys_active);
        self.hot_fine_keys_grace = self.hot_fine_keys_grace.max(o.hot_fine_keys_grace);
        self.hot_templates_active = self.hot_templates_active.max(o.hot_templates_active);
        self.hot_templates_grace = self.hot_templates_grace.max(o.hot_templates_grace);
        self.fine_waiters_active = self.fine_waiters_active.max(o.fine_waiters_active);
        self.coarse_waiters_active = self.coarse_waiters_active.max(o.coarse_waiters_active);
        self.broad_fine_waiters_active = self.broad_fine_waiters_active.max(o.broad_fine_waiters_active);
    }
}

/// One processed batch, with what the reference's `recordProcessorBatch` takes (touch counts
/// instead of its touch array); or several batches of one stream folded into one record.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecord {
    pub stream: String,
    /// How many batches this record stands for (1 unless folded).
    pub batches: u64,
    pub rows_read: f64,
    pub changes: f64,
    /// The batch's touches (table and template keys; the catch-all and other compensation
    /// touches of deviations.md are not counted, as in the runtime totals).
    pub touches_emitted: f64,
    pub table_touches: f64,
    pub template_touches: f64,
    /// Distinct key ids among the touches, summed over folded batches (the reference sums
    /// each batch's count too).
    pub unique_keys: f64,
    /// The backlog the batch left (the real one, as `/touch/meta` reports it); the largest
    /// when folded.
    pub lag_source_offsets: i64,
    /// The latest batch's mode.
    pub touch_mode: TouchMode,
    /// The largest of each count when folded.
    pub hot: HotCounts,
    /// Wall time now minus the newest row's `ts`, when a row had one; the largest when folded.
    pub commit_lag_ms: Option<f64>,
    pub fine_touches_dropped_due_to_budget: f64,
    pub fine_touches_skipped_cold_template: f64,
    pub fine_touches_skipped_cold_key: f64,
    pub fine_touches_skipped_template_bucket: f64,
    /// Batches among `batches` whose fine touches were restricted for lag (M5), and the time
    /// they took.
    pub suppressed_due_to_lag_batches: u64,
    pub suppressed_due_to_lag_ms: f64,
    /// Batches among `batches` held back by the fine budget or its tokens (M9–M11).
    pub suppressed_due_to_budget_batches: u64,
    /// Batches among `batches` that read rows and emitted no touch.
    pub scanned_but_emitted0_batches: u64,
    pub processed_through_delta: f64,
}

impl BatchRecord {
    /// Adds a later record of the same stream into this one.
    fn fold(&mut self, o: BatchRecord) {
        self.batches += o.batches;
        self.rows_read += o.rows_read;
        self.changes += o.changes;
        self.touches_emitted += o.touches_emitted;
        self.table_touches += o.table_touches;
        self.template_touches += o.template_touches;
        self.unique_keys += o.unique_keys;
        self.lag_source_offsets = self.lag_source_offsets.max(o.lag_source_offsets);
        self.touch_mode = o.touch_mode;
        self.hot.max(&o.hot);
        self.commit_lag_ms = match (self.commit_lag_ms, o.commit_lag_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.fine_touches_dropped_due_to_budget += o.fine_touches_dropped_due_to_budget;
        self.fine_touches_skipped_cold_template += o.fine_touches_skipped_cold_template;
        self.fine_touches_skipped_cold_key += o.fine_touches_skipped_cold_key;
        self.fine_touches_skipped_template_bucket += o.fine_touches_skipped_template_bucket;
        self.suppressed_due_to_lag_batches += o.suppressed_due_to_lag_batches;
        self.suppressed_due_to_lag_ms += o.suppressed_due_to_lag_ms;
        self.suppressed_due_to_budget_batches += o.suppressed_due_to_budget_batches;
        self.scanned_but_emitted0_batches += o.scanned_but_emitted0_batches;
        self.processed_through_delta += o.processed_through_delta;
    }
}

/// The WAL GC deletions of one stream since the last drain (the reference's
/// `recordBaseWalGc`, one call per deletion, folded).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WalGcRecord {
    pub stream: String,
    /// Deletions that removed rows.
    pub calls: u64,
    pub deleted_rows: f64,
    pub deleted_bytes: f64,
    pub ms_sum: f64,
    pub ms_max: f64,
}

/// What [`RecordQueue::take`] drains.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    /// In the order the batches ran (a folded record sits where its stream's newest was).
    pub batches: Vec<BatchRecord>,
    /// In the order they happened.
    pub lifecycle: Vec<LifecycleEvent>,
    /// Lifecycle events past the cap, counted by stream (sorted by name).
    pub lifecycle_overflow: Vec<(String, LifecycleCounts)>,
    /// Sorted by stream.
    pub wal_gc: Vec<WalGcRecord>,
    /// Failed batches by stream (sorted by name).
    pub failures: Vec<(String, u64)>,
    /// Batch records folded into an earlier one since the last drain.
    pub batches_folded: u64,
}

impl Records {
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
            && self.lifecycle.is_empty()
            && self.lifecycle_overflow.is_empty()
            && self.wal_gc.is_empty()
            && self.failures.is_empty()
    }
}

#[derive(Default)]
struct Queue {
    batches: Vec<BatchRecord>,
    /// The index in `batches` of each stream's newest record.
    newest: HashMap<String, usize>,
    batches_folded: u64,
    lifecycle: Vec<LifecycleEvent>,
    lifecycle_overflow: HashMap<String, LifecycleCounts>,
    wal_gc: HashMap<String, WalGcRecord>,
    failures: HashMap<String, u64>,
}

/// The engine's queue of records: a no-op unless enabled.
pub struct RecordQueue {
    enabled: bool,
    caps: (usize, usize),
    queue: Mutex<Queue>,
}

impl RecordQueue {
    pub fn new(enabled: bool) -> RecordQueue {
        RecordQueue::with_caps(enabled, MAX_BATCH_RECORDS, MAX_LIFECYCLE_EVENTS)
    }

    /// A queue with other caps (for tests).
    pub fn with_caps(enabled: bool, max_batches: usize, max_lifecycle: usize) -> RecordQueue {
        RecordQueue { enabled, caps: (max_batches, max_lifecycle), queue: Mutex::new(Queue::default()) }
    }

    /// Whether records are collected (callers skip building one otherwise).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn batch(&self, r: BatchRecord) {
        if !self.enabled {
            return;
        }
        let mut q = self.queue.lock();
        if q.batches.len() >= self.caps.0 {
            if let Some(&i) = q.newest.get(&r.stream) {
                q.batches[i].fold(r);
                q.batches_folded += 1;
                return;
            }
        }
        let i = q.batches.len();
        q.newest.insert(r.stream.clone(), i);
        q.batches.push(r);
    }

    pub fn lifecycle(&self, events: &[LifecycleEvent]) {
        if !self.enabled || events.is_empty() {
            return;
        }
        let mut q = self.queue.lock();
        for e in events {
            if q.lifecycle.len() < self.caps.1 {
                q.lifecycle.push(e.clone());
                continue;
            }
            let c = q.lifecycle_overflow.entry(e.stream().to_string()).or_default();
            match e {
                LifecycleEvent::Activated { .. } => c.activated += 1,
                LifecycleEvent::Retired { .. } => c.retired += 1,
                LifecycleEvent::Evicted { .. } => c.evicted += 1,
            }
        }
    }

    /// A WAL GC deletion that removed rows (`deleted_rows` or `deleted_bytes` above 0).
    pub fn wal_gc(&self, stream: &str, deleted_rows: f64, deleted_bytes: f64, ms: f64) {
        if !self.enabled {
            return;
        }
        let mut q = self.queue.lock();
        let g = q
            .wal_gc
            .entry(stream.to_string())
            .or_insert_with(|| WalGcRecord { stream: stream.into(), ..Default::default() });
        g.calls += 1;
        g.deleted_rows += deleted_rows;
        g.deleted_bytes += deleted_bytes;
        g.ms_sum += ms;
        g.ms_max = g.ms_max.max(ms);
    }

    pub fn failure(&self, stream: &str) {
        if !self.enabled {
            return;
        }
        *self.queue.lock().failures.entry(stream.to_string()).or_insert(0) += 1;
    }

    /// Everything queued since the last call, in the order it happened (see [`Records`]).
    pub fn take(&self) -> Records {
        if !self.enabled {
            return Records::default();
        }
        let q = std::mem::take(&mut *self.queue.lock());
        let mut lifecycle_overflow: Vec<_> = q.lifecycle_overflow.into_iter().collect();
        lifecycle_overflow.sort_by(|a, b| a.0.cmp(&b.0));
        let mut wal_gc: Vec<_> = q.wal_gc.into_values().collect();
        wal_gc.sort_by(|a, b| a.stream.cmp(&b.stream));
        let mut failures: Vec<_> = q.failures.into_iter().collect();
        failures.sort();
        Records {
            batches: q.batches,
            lifecycle: q.lifecycle,
            lifecycle_overflow,
            wal_gc,
            failures,
            batches_folded: q.batches_folded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(stream: &str, rows: f64) -> BatchRecord {
        BatchRecord {
            stream: stream.into(),
            batches: 1,
            rows_read: rows,
            changes: rows,
            touches_emitted: 2.0,
            table_touches: 1.0,
            template_touches: 1.0,
            unique_keys: 2.0,
            lag_source_offsets: rows as i64,
            touch_mode: TouchMode::Idle,
            hot: HotCounts { fine_waiters_active: rows as u64, ..Default::default() },
            commit_lag_ms: Some(rows),
            fine_touches_dropped_due_to_budget: 0.0,
            fine_touches_skipped_cold_template: 1.0,
            fine_touches_skipped_cold_key: 0.0,
            fine_touches_skipped_template_bucket: 0.0,
            suppressed_due_to_lag_batches: 0,
            suppressed_due_to_lag_ms: 0.0,
            suppressed_due_to_budget_batches: 1,
            scanned_but_emitted0_batches: 0,
            processed_through_delta: rows,
        }
    }

    fn activated(stream: &str) -> LifecycleEvent {
        LifecycleEvent::Activated {
            ts: "1970-01-01T00:00:00.000Z".into(),
            stream: stream.into(),
            template_id: "0123456789abcdef".into(),
            entity: "e".into(),
            fields: vec!["a".into()],
            encodings: vec!["string".into()],
            reason: "declared",
            active_from_touch_offset: "c".into(),
            inactivity_ttl_ms: 1.0,
        }
    }

    #[test]
    fn a_disabled_queue_keeps_nothing() {
        let q = RecordQueue::new(false);
        q.batch(rec("s", 1.0));
        q.lifecycle(&[activated("s")]);
        q.wal_gc("s", 1.0, 1.0, 1.0);
        q.failure("s");
        assert!(q.take().is_empty());
    }

    #[test]
    fn records_come_out_once_in_order() {
        let q = RecordQueue::new(true);
        q.batch(rec("a", 1.0));
        q.batch(rec("b", 2.0));
        q.lifecycle(&[activated("a"), activated("b")]);
        q.wal_gc("b", 3.0, 30.0, 2.0);
        q.wal_gc("b", 1.0, 10.0, 5.0);
        q.failure("a");
        q.failure("a");
        let r = q.take();
        assert_eq!(r.batches.iter().map(|b| b.stream.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(r.lifecycle.iter().map(|e| e.stream()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            r.wal_gc,
            [WalGcRecord {
                stream: "b".into(),
                calls: 2,
                deleted_rows: 4.0,
                deleted_bytes: 40.0,
                ms_sum: 7.0,
                ms_max: 5.0
            }]
        );
        assert_eq!(r.failures, [("a".to_string(), 2)]);
        assert_eq!(r.batches_folded, 0);
        assert!(q.take().is_empty(), "drained");
    }

    #[test]
    fn past_the_cap_batches_fold_into_their_streams_newest_record_and_lose_no_count() {
        let q = RecordQueue::with_caps(true, 3, 10);
        for (s, rows) in [("a", 1.0), ("b", 2.0), ("a", 3.0)] {
            q.batch(rec(s, rows));
        }
        // Full: a's go into the newest a (index 2), b's into b; c has none and is queued.
        let mut late = rec("a", 10.0);
        late.touch_mode = TouchMode::Fine;
        late.commit_lag_ms = None;
        late.scanned_but_emitted0_batches = 1;
        q.batch(late);
        q.batch(rec("b", 20.0));
        q.batch(rec("c", 5.0));
        q.batch(rec("c", 6.0));
        let r = q.take();
        assert_eq!(r.batches_folded, 3);
        let got: Vec<_> = r.batches.iter().map(|b| (b.stream.as_str(), b.batches, b.rows_read)).collect();
        assert_eq!(got, [("a", 1, 1.0), ("b", 2, 22.0), ("a", 2, 13.0), ("c", 2, 11.0)]);
        let a = &r.batches[2];
        assert_eq!(a.touch_mode, TouchMode::Fine, "the latest mode");
        assert_eq!(a.lag_source_offsets, 10, "the largest lag");
        assert_eq!(a.hot.fine_waiters_active, 10, "the largest hot counts");
        assert_eq!(a.commit_lag_ms, Some(3.0), "the largest commit lag of those that had one");
        assert_eq!((a.touches_emitted, a.unique_keys, a.table_touches, a.template_touches), (4.0, 4.0, 2.0, 2.0));
        assert_eq!((a.scanned_but_emitted0_batches, a.suppressed_due_to_budget_batches), (1, 2));
        assert_eq!((a.processed_through_delta, a.changes, a.fine_touches_skipped_cold_template), (13.0, 13.0, 2.0));
        // Every count of the seven batches is there.
        assert_eq!(r.batches.iter().map(|b| b.batches).sum::<u64>(), 7);
        assert_eq!(r.batches.iter().map(|b| b.rows_read).sum::<f64>(), 47.0);
        // Drained: the cap applies afresh.
        q.batch(rec("a", 1.0));
        assert_eq!(q.take().batches.len(), 1);
    }

    #[test]
    fn lifecycle_events_past_the_cap_are_counted_by_stream_and_kind() {
        let q = RecordQueue::with_caps(true, 10, 2);
        let evicted = |s: &str| LifecycleEvent::Evicted {
            ts: "t".into(),
            stream: s.into(),
            template_id: "0123456789abcdef".into(),
            reason: "cap_exceeded",
            cap: 1.0,
        };
        q.lifecycle(&[activated("a"), activated("b"), activated("b"), evicted("b"), evicted("a")]);
        let r = q.take();
        assert_eq!(r.lifecycle.len(), 2);
        assert_eq!(
            r.lifecycle_overflow,
            [
                ("a".to_string(), LifecycleCounts { activated: 0, retired: 0, evicted: 1 }),
                ("b".to_string(), LifecycleCounts { activated: 1, retired: 0, evicted: 1 }),
            ]
        );
    }
}
