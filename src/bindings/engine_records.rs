//! What `TouchEngine.takeRecords()` returns: the engine's records (`crate::engine::records`)
//! as plain objects. Conversion only.

use napi_derive::napi;

use crate::engine::records::{BatchRecord, Records};
use crate::engine::templates::LifecycleEvent;

/// One processed batch (several of one stream when the queue was full and they were folded):
/// the arguments of the reference's `LiveMetricsV2.recordProcessorBatch`, with touch counts in
/// place of its `touches` array.
#[napi(object, object_from_js = false, js_name = "BatchRecord")]
pub struct BatchRecordJs {
    pub stream: String,
    /// How many batches the record stands for (1 unless folded).
    pub batches: f64,
    pub rows_read: f64,
    pub changes: f64,
    pub touches_emitted: f64,
    pub table_touches: f64,
    pub template_touches: f64,
    /// Distinct key ids among each batch's touches, summed over folded batches.
    pub unique_keys: f64,
    pub lag_source_offsets: f64,
    #[napi(ts_type = "'idle' | 'fine' | 'restricted' | 'coarseOnly'")]
    pub touch_mode: String,
    pub hot_fine_keys: f64,
    pub hot_templates: f64,
    pub hot_fine_keys_active: f64,
    pub hot_fine_keys_grace: f64,
    pub hot_templates_active: f64,
    pub hot_templates_grace: f64,
    pub fine_waiters_active: f64,
    pub coarse_waiters_active: f64,
    pub broad_fine_waiters_active: f64,
    /// Now minus the newest row's append time, when a row had one.
    pub commit_lag_ms: Option<f64>,
    pub fine_touches_dropped_due_to_budget: f64,
    pub fine_touches_skipped_cold_template: f64,
    pub fine_touches_skipped_cold_key: f64,
    pub fine_touches_skipped_template_bucket: f64,
    /// Batches (of `batches`) whose fine touches were restricted for lag, and their time.
    pub fine_touches_suppressed_batches_due_to_lag: f64,
    pub fine_touches_suppressed_due_to_lag_ms: f64,
    /// Batches (of `batches`) held back by the fine budget or its tokens.
    pub fine_touches_suppressed_batches_due_to_budget: f64,
    /// Batches (of `batches`) that read rows and emitted no touch.
    pub scanned_but_emitted0_batches: f64,
    pub processed_through_delta: f64,
}

/// A template lifecycle event with the reference's fields (`TemplateLifecycleEvent`); the
/// fields of the other kinds are absent.
#[napi(object, object_from_js = false, js_name = "LifecycleRecord")]
pub struct LifecycleRecordJs {
    #[napi(
        js_name = "type",
        ts_type = "'live.template_activated' | 'live.template_retired' | 'live.template_evicted'"
    )]
    pub kind: String,
    pub ts: String,
    pub stream: String,
    pub template_id: String,
    pub entity: Option<String>,
    pub fields: Option<Vec<String>>,
    pub encodings: Option<Vec<String>>,
    pub reason: String,
    pub active_from_touch_offset: Option<String>,
    pub inactivity_ttl_ms: Option<f64>,
    pub last_seen_at: Option<String>,
    pub inactive_for_ms: Option<f64>,
    pub cap: Option<f64>,
}

/// Lifecycle events of a stream that did not fit the queue: counted, not kept.
#[napi(object, object_from_js = false, js_name = "LifecycleOverflow")]
pub struct LifecycleOverflowJs {
    pub stream: String,
    pub activated: f64,
    pub retired: f64,
    pub evicted: f64,
}

/// A stream's WAL GC deletions since the last drain (the reference's `recordBaseWalGc`, one
/// call per deletion).
#[napi(object, object_from_js = false, js_name = "WalGcRecord")]
pub struct WalGcRecordJs {
    pub stream: String,
    pub calls: f64,
    pub deleted_rows: f64,
    pub deleted_bytes: f64,
    pub ms_sum: f64,
    pub ms_max: f64,
}

#[napi(object, object_from_js = false, js_name = "FailureRecord")]
pub struct FailureRecordJs {
    pub stream: String,
    /// Failed batches since the last drain.
    pub count: f64,
}

/// `takeRecords()`: everything kept since the previous call (empty unless the engine was
/// opened with `records: true`).
#[napi(object, object_from_js = false)]
pub struct EngineRecords {
    pub batches: Vec<BatchRecordJs>,
    pub lifecycle: Vec<LifecycleRecordJs>,
    pub lifecycle_overflow: Vec<LifecycleOverflowJs>,
    pub wal_gc: Vec<WalGcRecordJs>,
    pub failures: Vec<FailureRecordJs>,
    /// Batch records folded into an earlier one of their stream (the queue was full).
    pub batches_folded: f64,
}

fn batch_js(b: BatchRecord) -> BatchRecordJs {
    let h = b.hot;
    BatchRecordJs {
        stream: b.stream,
        batches: b.batches as f64,
        rows_read: b.rows_read,
        changes: b.changes,
        touches_emitted: b.touches_emitted,
        table_touches: b.table_touches,
        template_touches: b.template_touches,
        unique_keys: b.unique_keys,
        lag_source_offsets: b.lag_source_offsets as f64,
        touch_mode: b.touch_mode.as_str().into(),
        hot_fine_keys: h.hot_fine_keys as f64,
        hot_templates: h.hot_templates as f64,
        hot_fine_keys_active: h.hot_fine_keys_active as f64,
        hot_fine_keys_grace: h.hot_fine_keys_grace as f64,
        hot_templates_active: h.hot_templates_active as f64,
        hot_templates_grace: h.hot_templates_grace as f64,
        fine_waiters_active: h.fine_waiters_active as f64,
        coarse_waiters_active: h.coarse_waiters_active as f64,
        broad_fine_waiters_active: h.broad_fine_waiters_active as f64,
        commit_lag_ms: b.commit_lag_ms,
        fine_touches_dropped_due_to_budget: b.fine_touches_dropped_due_to_budget,
        fine_touches_skipped_cold_template: b.fine_touches_skipped_cold_template,
        fine_touches_skipped_cold_key: b.fine_touches_skipped_cold_key,
        fine_touches_skipped_template_bucket: b.fine_touches_skipped_template_bucket,
        fine_touches_suppressed_batches_due_to_lag: b.suppressed_due_to_lag_batches as f64,
        fine_touches_suppressed_due_to_lag_ms: b.suppressed_due_to_lag_ms,
        fine_touches_suppressed_batches_due_to_budget: b.suppressed_due_to_budget_batches as f64,
        scanned_but_emitted0_batches: b.scanned_but_emitted0_batches as f64,
        processed_through_delta: b.processed_through_delta,
    }
}

fn lifecycle_js(e: LifecycleEvent) -> LifecycleRecordJs {
    let kind = e.kind().to_string();
    let none = |kind: String, ts: String, stream: String, template_id: String, reason: &str| LifecycleRecordJs {
        kind,
        ts,
        stream,
        template_id,
        entity: None,
        fields: None,
        encodings: None,
        reason: reason.into(),
        active_from_touch_offset: None,
        inactivity_ttl_ms: None,
        last_seen_at: None,
        inactive_for_ms: None,
        cap: None,
    };
    match e {
        LifecycleEvent::Activated {
            ts,
            stream,
            template_id,
            entity,
            fields,
            encodings,
            reason,
            active_from_touch_offset,
            inactivity_ttl_ms,
        } => LifecycleRecordJs {
            entity: Some(entity),
            fields: Some(fields),
            encodings: Some(encodings),
            active_from_touch_offset: Some(active_from_touch_offset),
            inactivity_ttl_ms: Some(inactivity_ttl_ms),
            ..none(kind, ts, stream, template_id, reason)
        },
        LifecycleEvent::Retired {
            ts,
            stream,
            template_id,
            entity,
            fields,
            encodings,
            last_seen_at,
            inactive_for_ms,
            reason,
        } => LifecycleRecordJs {
            entity: Some(entity),
            fields: Some(fields),
            encodings: Some(encodings),
            last_seen_at: Some(last_seen_at),
            inactive_for_ms: Some(inactive_for_ms),
            ..none(kind, ts, stream, template_id, reason)
        },
        LifecycleEvent::Evicted { ts, stream, template_id, reason, cap } => {
            LifecycleRecordJs { cap: Some(cap), ..none(kind, ts, stream, template_id, reason) }
        }
    }
}

pub(crate) fn records_js(r: Records) -> EngineRecords {
    EngineRecords {
        batches: r.batches.into_iter().map(batch_js).collect(),
        lifecycle: r.lifecycle.into_iter().map(lifecycle_js).collect(),
        lifecycle_overflow: r
            .lifecycle_overflow
            .into_iter()
            .map(|(stream, c)| LifecycleOverflowJs {
                stream,
                activated: c.activated as f64,
                retired: c.retired as f64,
                evicted: c.evicted as f64,
            })
            .collect(),
        wal_gc: r
            .wal_gc
            .into_iter()
            .map(|g| WalGcRecordJs {
                stream: g.stream,
                calls: g.calls as f64,
                deleted_rows: g.deleted_rows,
                deleted_bytes: g.deleted_bytes,
                ms_sum: g.ms_sum,
                ms_max: g.ms_max,
            })
            .collect(),
        failures: r.failures.into_iter().map(|(stream, n)| FailureRecordJs { stream, count: n as f64 }).collect(),
        batches_folded: r.batches_folded as f64,
    }
}
