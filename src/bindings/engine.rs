//! `TouchEngine`: the JS class over [`crate::engine::TouchEngine`]. Conversion only.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::engine_journal::EngineJournal;
use super::engine_records::{records_js, EngineRecords};
use super::journal::key_ids;
use super::napi::abort;
use super::napi::helpers::{self, Helper};
use super::napi::value::RawValue;
use super::napi::value::{class_instance, to_js};
use super::napi::{throw, unknown, Js, Out, Port};
use super::processor::{parse_output, parse_request, settle};
use super::store::Store;
use crate::engine::hot::InterestMode;
use crate::engine::interest::parse_interest_mode;
use crate::engine::policy::TouchMode;
use crate::engine::process::TickReport;
use crate::engine::templates::{ActivateOutcome, TemplateLimits};
use crate::engine::wait::{
    parse_inactivity_ttl, parse_template_decls, WaitArgs, WaitControl, WaitKind, WaitReply, MAX_DECLARED_TEMPLATES,
    MAX_WAIT_LIST,
};
use crate::engine::{
    EngineOptions, EngineStatsView, MemoryView, RuntimeView, TopStream, TouchEngine as CoreEngine, TouchMetaView,
};
use crate::error::Error;
use crate::jscompat::json::{Object, Value};
use crate::jscompat::string::JsString;

/// Options of `new TouchEngine(store, options)`.
#[napi(object, object_to_js = false)]
pub struct TouchEngineOptions {
    /// Streams processed concurrently (default: cores, at most 4).
    pub workers: Option<u32>,
    /// Safety-net tick in ms (default 250; 0 = none). Appends wake the loop at once anyway.
    pub check_interval_ms: Option<f64>,
    /// Rows per batch (default 500).
    pub max_batch_rows: Option<u32>,
    /// Payload bytes per batch (default 4 MiB).
    pub max_batch_bytes: Option<f64>,
    /// Run the background processing loop (default true).
    pub auto_process: Option<bool>,
    /// For a host that saves profiles in the file itself: re-read every state-protocol
    /// profile this often, in ms (default 0: never; `setProfile` is then the only way in).
    /// A notified stream the engine does not know has its profile read at once.
    pub profile_poll_ms: Option<f64>,
    /// Keep what each batch did, template lifecycle events, WAL GC deletions and batch
    /// failures for `takeRecords()` (default false: nothing is kept). The queue is bounded
    /// (10,000 batch records and 10,000 lifecycle events; past that, batches fold into their
    /// stream's newest record and lifecycle events are only counted), so a host that turns it
    /// on should drain it every few hundred milliseconds.
    pub records: Option<bool>,
    /// Fan-out over NATS JetStream: a `writer` publishes every journal flush of every
    /// touch-enabled stream and hears the edges' interest; an `edge` (opened over a private
    /// `Store.open(":memory:")`) mirrors a writer's journals and serves waits and meta from
    /// them.
    pub fanout: Option<FanoutConfig>,
    /// Keep every stream's touch journal across restarts, in the folder `<store file>-journals/`
    /// (default true): a cursor handed out before a restart, a crash included, is answered
    /// after it as before, not `stale`. False: a new epoch at every open (the reference's
    /// behaviour). Nothing is kept for an in-memory store or at an edge.
    pub keep_cursors: Option<bool>,
}

/// `options.fanout` of `new TouchEngine`.
#[napi(object, object_to_js = false)]
pub struct FanoutConfig {
    #[napi(ts_type = "'writer' | 'edge'")]
    pub role: String,
    /// `nats://host:port`.
    pub url: String,
    /// Subject prefix; one per writer (default `durable-touch`).
    pub prefix: Option<String>,
    /// Retention of the writer's JetStream stream (defaults 10 minutes, 256 MiB).
    pub max_age_ms: Option<f64>,
    pub max_bytes: Option<f64>,
    /// A writer's beat and an edge's interest report, in ms (default 500).
    pub beat_ms: Option<f64>,
    /// The writer's HTTP URL, named by edges when they refuse a request.
    pub writer_url: Option<String>,
    /// Writer: how long a flush waits for others to share its broker message, in ms (default
    /// 0: at once). Fewer bytes per key reach each edge, this much later.
    pub batch_ms: Option<f64>,
}

/// What `fanoutStats()` reports.
#[napi(object, object_from_js = false, js_name = "FanoutStats")]
pub struct FanoutStatsJs {
    pub role: String,
    pub connected: bool,
    pub sent: f64,
    pub sent_bytes: f64,
    pub dropped: f64,
    pub received: f64,
    pub received_bytes: f64,
    /// The writer's URL as this process names it (an edge: its `writerUrl`, else the one
    /// the writer's beats carry; empty while unknown).
    pub writer_url: String,
    /// Writer: flush records published, and the key ids they carried.
    pub flushes_sent: f64,
    pub keys_sent: f64,
    /// Edge: records applied, replays ignored, gaps found, epochs adopted.
    pub applied: f64,
    pub duplicates: f64,
    pub gaps: f64,
    pub adopted: f64,
    pub bad_messages: f64,
    /// Beats sent (writer) or taken (edge).
    pub beats: f64,
    /// Writer: another writer holds the fan-out's prefix; this one publishes nothing until
    /// that one releases it or falls silent, then publishes as a restarted writer would.
    pub standby: bool,
    /// Writer: the URL of the writer holding the prefix while this one stands by, else "".
    pub prefix_held_by: String,
    /// Edge: writer messages dropped because a newer writer had claimed the prefix (a deposed
    /// writer's).
    pub fenced: f64,
}

/// A template declaration (the body of `/touch/templates/activate`).
#[napi(object, object_to_js = false)]
pub struct TemplateDecl {
    pub entity: String,
    #[napi(ts_type = "Array<{ name: string; encoding: 'string' | 'int64' | 'bool' | 'datetime' | 'bytes' }>")]
    pub fields: Vec<Unknown<'static>>,
}

#[napi(object, object_from_js = false)]
pub struct ActivatedTemplate {
    pub template_id: String,
    #[napi(ts_type = "'active'")]
    pub state: String,
    pub active_from_touch_offset: String,
}

#[napi(object, object_from_js = false)]
pub struct DeniedTemplate {
    pub template_id: String,
    /// `invalid`, `rate_limited`, or `cap_exceeded` (a template evicted by its own call).
    #[napi(ts_type = "'invalid' | 'rate_limited' | 'cap_exceeded'")]
    pub reason: String,
}

#[napi(object, object_from_js = false)]
pub struct TemplateLimitsJs {
    pub max_active_templates_per_stream: f64,
    pub max_active_templates_per_entity: f64,
}

#[napi(object, object_from_js = false)]
pub struct ActivateResult {
    pub activated: Vec<ActivatedTemplate>,
    pub denied: Vec<DeniedTemplate>,
    pub limits: TemplateLimitsJs,
}

/// The request of `wait` (W1); the rules and messages are the reference route's.
#[napi(object, object_to_js = false)]
pub struct WaitRequest {
    pub stream: String,
    /// `"now"` or `<epochHex16>:<generation>`.
    pub cursor: String,
    pub keys: Option<Vec<String>>,
    pub key_ids: Option<Vec<u32>>,
    /// Clamped to [0, 120000]; default 30000.
    pub timeout_ms: Option<f64>,
    pub template_ids_used: Option<Vec<String>>,
    #[napi(ts_type = "'fine' | 'coarse'")]
    pub interest_mode: Option<String>,
    /// Match 1..16 literal 16-hex keys exactly (W4).
    pub exact: Option<bool>,
    #[napi(ts_type = "TemplateDecl[]")]
    pub declare_templates: Option<Vec<Unknown<'static>>>,
    pub inactivity_ttl_ms: Option<f64>,
    /// Aborting rejects the wait with `ERR_ABORTED`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<Unknown<'static>>,
}

/// The reply of `wait`, with the reference route's fields: `touched` (and the cursor to use
/// next), or `stale: true` with the journal's current cursor, epoch and generation.
#[napi(object, object_from_js = false)]
pub struct WaitResult {
    pub touched: bool,
    pub stale: Option<bool>,
    pub cursor: String,
    pub epoch: Option<String>,
    pub generation: Option<u32>,
    #[napi(ts_type = "'fineKey' | 'templateKey' | 'tableKey'")]
    pub effective_wait_kind: String,
    /// Decimal source offset of the bucket that woke the wait (`"-1"` before any flush).
    pub bucket_max_source_offset_seq: String,
    pub flush_at_ms: f64,
    pub bucket_start_ms: f64,
    #[napi(ts_type = "{ code: 'stale'; message: string }")]
    pub error: Option<StaleError>,
}

#[napi(object, object_from_js = false)]
pub struct StaleError {
    pub code: String,
    pub message: String,
}

/// Options of `meta`.
#[napi(object, object_to_js = false)]
pub struct MetaOptions {
    /// `"flush"`: wait until the stream's backlog is processed and its bucket flushed.
    #[napi(ts_type = "'flush'")]
    pub settle: Option<String>,
    /// Bound for `settle`, clamped to [0, 120000] (default 30000).
    pub timeout_ms: Option<f64>,
}

/// `/touch/meta` (M21): the journal's meta and the stream's runtime.
#[napi(object, object_from_js = false)]
pub struct TouchMeta {
    pub mode: String,
    pub cursor: String,
    pub epoch: String,
    pub generation: u32,
    pub bucket_ms: f64,
    pub coalesce_ms: f64,
    pub filter_size: f64,
    pub k: u32,
    pub pending_keys: f64,
    pub overflow_buckets: f64,
    pub active_waiters: f64,
    pub bucket_max_source_offset_seq: String,
    pub last_flush_at_ms: f64,
    #[napi(js_name = "flushIntervalMsMaxLast10s")]
    pub flush_interval_ms_max_last10s: f64,
    #[napi(js_name = "flushIntervalMsP95Last10s")]
    pub flush_interval_ms_p95_last10s: f64,
    pub settled: bool,
    pub coarse_interval_ms: f64,
    pub touch_coalesce_window_ms: f64,
    pub active_templates: f64,
    /// Offsets appended but not processed yet.
    pub lag_source_offsets: f64,
    #[napi(ts_type = "'idle' | 'fine' | 'restricted' | 'coarseOnly'")]
    pub touch_mode: String,
    /// The checkpoint as a stream offset (`encodeOffset(epoch, processedThrough)`), or null.
    pub wal_scanned_through: Option<String>,
    pub hot_fine_keys: f64,
    pub hot_templates: f64,
    pub hot_fine_keys_active: f64,
    pub hot_fine_keys_grace: f64,
    pub hot_templates_active: f64,
    pub hot_templates_grace: f64,
    pub fine_waiters_active: f64,
    pub coarse_waiters_active: f64,
    pub broad_fine_waiters_active: f64,
    pub hot_key_filtering_enabled: bool,
    pub hot_template_filtering_enabled: bool,
    pub scan_rows_total: f64,
    pub scan_batches_total: f64,
    pub scanned_but_emitted0_batches_total: f64,
    pub processed_through_delta_total: f64,
    pub touches_emitted_total: f64,
    pub touches_table_total: f64,
    pub touches_template_total: f64,
    pub fine_touches_dropped_due_to_budget_total: f64,
    pub fine_touches_skipped_cold_template_total: f64,
    pub fine_touches_skipped_cold_key_total: f64,
    pub fine_touches_skipped_template_bucket_total: f64,
    pub wait_touched_total: f64,
    pub wait_timeout_total: f64,
    pub wait_stale_total: f64,
    pub journal_flushes_total: f64,
    pub journal_notify_wakeups_total: f64,
    pub journal_notify_wake_ms_total: f64,
    pub journal_notify_wake_ms_max: f64,
    pub journal_timeouts_fired_total: f64,
    pub journal_timeout_sweep_ms_total: f64,
    /// Ours: touches added so that coarsened or uncovered changes still wake their waiters.
    pub compensation_touches_total: f64,
    /// Ours: batches cut short to keep fine touches within the budget.
    pub batches_split_for_budget_total: f64,
    /// Ours: whether the journal is kept across restarts (its cursors stay valid).
    pub journal_kept: bool,
    /// Ours: wall-clock ms when the journal's epoch started (0 when not known, at an edge).
    pub epoch_started_at_ms: f64,
    /// Ours: flushes replayed from the kept log when the engine opened.
    pub replayed_flushes: f64,
    /// Ours: the oldest generation a cursor may name and be answered precisely (older cursors
    /// of the epoch answer `stale`).
    pub floor_generation: f64,
}

/// The stats collector's window (X1, X3).
#[napi(object, object_from_js = false)]
pub struct CollectorStats {
    pub ingested_bytes: f64,
    pub wal_bytes: f64,
    pub sealed_payload_bytes: f64,
    pub sealed_bytes: f64,
    pub uploaded_bytes: f64,
    pub segments_sealed: f64,
    pub backpressure_over_ms: f64,
    pub active_streams: f64,
}

/// `getMemoryStats` (seed 001).
#[napi(object, object_from_js = false)]
pub struct EngineMemoryStats {
    pub dirty_streams: f64,
    pub journals: f64,
    pub journals_created_total: f64,
    pub journal_filter_bytes_total: f64,
    /// Streams whose lag keeps fine touches degraded (M7).
    pub fine_lag_coarse_only_streams: f64,
    pub touch_mode_streams: f64,
    pub fine_token_bucket_streams: f64,
    pub hot_fine_streams: f64,
    pub runtime_totals_streams: f64,
    pub template_last_seen_entries: f64,
    pub template_dirty_last_seen_entries: f64,
    pub template_rate_state_streams: f64,
}

/// `getTopStreams` entries.
#[napi(object, object_from_js = false)]
pub struct TopStreamEntry {
    pub stream: String,
    pub journal_filter_bytes: f64,
    pub dirty: bool,
    #[napi(ts_type = "'idle' | 'fine' | 'restricted' | 'coarseOnly' | null")]
    pub touch_mode: Option<String>,
}

/// `memoryStats()`: the memory counters and the top streams, without resetting anything.
#[napi(object, object_from_js = false)]
pub struct EngineMemoryReport {
    pub memory: EngineMemoryStats,
    pub top_streams: Vec<TopStreamEntry>,
}

/// What `tick()` did: the touch-enabled streams it looked at, the batches it ran and the
/// streams whose batch failed (left to the loop's backoff).
#[napi(object, object_from_js = false)]
pub struct TickResult {
    pub streams: f64,
    pub batches: f64,
    pub failed: Vec<TickFailure>,
}

#[napi(object, object_from_js = false)]
pub struct TickFailure {
    pub stream: String,
    pub code: String,
    pub message: String,
}

/// The reference manager's `getTouchRuntimeSnapshot`: the touch mode, the lag the last batch
/// left, the hot state (swept first) and the stream's totals.
#[napi(object, object_from_js = false)]
pub struct TouchRuntime {
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
    pub hot_key_filtering_enabled: bool,
    pub hot_template_filtering_enabled: bool,
    pub scan_rows_total: f64,
    pub scan_batches_total: f64,
    pub scanned_but_emitted0_batches_total: f64,
    pub processed_through_delta_total: f64,
    pub touches_emitted_total: f64,
    pub touches_table_total: f64,
    pub touches_template_total: f64,
    pub fine_touches_dropped_due_to_budget_total: f64,
    pub fine_touches_skipped_cold_template_total: f64,
    pub fine_touches_skipped_cold_key_total: f64,
    pub fine_touches_skipped_template_bucket_total: f64,
    pub wait_touched_total: f64,
    pub wait_timeout_total: f64,
    pub wait_stale_total: f64,
    pub journal_flushes_total: f64,
    pub journal_notify_wakeups_total: f64,
    pub journal_notify_wake_ms_total: f64,
    pub journal_notify_wake_ms_max: f64,
    pub journal_timeouts_fired_total: f64,
    pub journal_timeout_sweep_ms_total: f64,
}

/// Arguments of `beginHotInterest` (the reference manager's `beginHotWaitInterest`).
#[napi(object, object_to_js = false)]
pub struct HotInterest {
    /// The wait's fine key ids; a fine wait with more than 64 is broad (not tracked by key).
    #[napi(ts_type = "number[] | Uint32Array")]
    pub key_ids: Vec<u32>,
    /// Template ids the wait's query uses (16 hex; others are ignored).
    pub template_ids_used: Option<Vec<String>>,
    #[napi(ts_type = "'fine' | 'coarse'")]
    pub interest_mode: String,
}

/// Per-stream runtime totals (M21).
#[napi(object, object_from_js = false)]
pub struct StreamRuntimeStats {
    pub stream: String,
    pub touch_mode: String,
    pub lag_source_offsets: f64,
    pub scan_rows_total: f64,
    pub scan_batches_total: f64,
    pub touches_emitted_total: f64,
    pub touches_table_total: f64,
    pub touches_template_total: f64,
    pub compensation_touches_total: f64,
    pub wait_touched_total: f64,
    pub wait_timeout_total: f64,
    pub wait_stale_total: f64,
    pub fine_waiters_active: f64,
    pub coarse_waiters_active: f64,
    pub journal_flushes_total: f64,
}

#[napi(object, object_from_js = false)]
pub struct LifecycleStats {
    pub activated: f64,
    pub retired: f64,
    pub evicted: f64,
}

/// `stats()`: the collector's window since the previous call (then reset), the reporter's
/// one-line summary, memory, the top streams by journal bytes and per-stream totals.
#[napi(object, object_from_js = false)]
pub struct EngineStats {
    pub collector: CollectorStats,
    pub reporter_line: String,
    pub window_ms: f64,
    pub memory: EngineMemoryStats,
    pub top_streams: Vec<TopStreamEntry>,
    pub streams: Vec<StreamRuntimeStats>,
    pub template_lifecycle: LifecycleStats,
    /// Ours: the journals kept across restarts, as taken up when the engine opened.
    pub kept_journals: KeptJournalStats,
}

/// `stats().keptJournals`.
#[napi(object, object_from_js = false)]
pub struct KeptJournalStats {
    /// The folder journals are kept in; absent when they are not (`keepCursors: false`, an
    /// in-memory store, an edge).
    pub folder: Option<String>,
    /// Journals taken up at open (their cursors answered as before the restart).
    pub kept: f64,
    /// Kept journals refused at open (damaged, another store's, or left before an OS restart
    /// without a clean close): those streams started a new epoch.
    pub refused: f64,
    /// Flushes replayed from the logs at open (0 after a clean close).
    pub replayed_flushes: f64,
    /// Time taken to take them up, in ms.
    pub restore_ms: f64,
}

/// Processing, waits, policy and stats over a [`Store`].
#[napi]
pub struct TouchEngine {
    engine: CoreEngine,
    port: Port,
    /// The waits `lib/internal/engine-methods.js` listens to an AbortSignal for, by the cancel
    /// id it gave them (see `_engineCancel`); each leaves when it settles.
    cancels: Arc<Mutex<FxHashMap<u64, Arc<WaitControl>>>>,
}

fn opt_num(o: &Js, key: &str) -> crate::Result<Option<f64>> {
    o.opt(key)?.map(|v| v.number(&format!("options.{key}"))).transpose()
}

fn parse_options(options: Option<Js>) -> crate::Result<EngineOptions> {
    let mut o = EngineOptions::default();
    let Some(opts) = options.filter(|v| !v.is_nullish()) else { return Ok(o) };
    let opts = opts.object("options")?;
    let count = |v: f64, what: &str, max: f64| -> crate::Result<f64> {
        if !v.is_finite() || v.fract() != 0.0 || v < 0.0 || v > max {
            return Err(Error::invalid(format!("options.{what} must be an integer in [0, {max}]")));
        }
        Ok(v)
    };
    if let Some(v) = opt_num(&opts, "workers")? {
        o.workers = count(v, "workers", 64.0)?.max(1.0) as usize;
    }
    if let Some(v) = opt_num(&opts, "checkIntervalMs")? {
        o.check_interval_ms = count(v, "checkIntervalMs", 3_600_000.0)? as u64;
    }
    if let Some(v) = opt_num(&opts, "maxBatchRows")? {
        o.max_batch_rows = count(v, "maxBatchRows", 1_000_000.0)?.max(1.0) as usize;
    }
    if let Some(v) = opt_num(&opts, "maxBatchBytes")? {
        o.max_batch_bytes = count(v, "maxBatchBytes", 1e12)?.max(1.0) as u64;
    }
    if let Some(v) = opts.opt("autoProcess")? {
        o.auto_process = v.boolean("options.autoProcess")?;
    }
    if let Some(v) = opt_num(&opts, "profilePollMs")? {
        o.profile_poll_ms = count(v, "profilePollMs", 3_600_000.0)? as u64;
    }
    if let Some(v) = opts.opt("records")? {
        o.records = v.boolean("options.records")?;
    }
    if let Some(v) = opts.opt("keepCursors")? {
        o.keep_cursors = v.boolean("options.keepCursors")?;
    }
    if let Some(f) = opts.opt("fanout")?.filter(|v| !v.is_nullish()) {
        let f = f.object("options.fanout")?;
        let mut fo = crate::fanout::FanoutOptions {
            role: match f.opt("role")?.map(|v| v.string("options.fanout.role")).transpose()?.as_deref() {
                Some("writer") => crate::fanout::Role::Writer,
                Some("edge") => crate::fanout::Role::Edge,
                _ => return Err(Error::invalid("options.fanout.role must be 'writer' or 'edge'")),
            },
            ..Default::default()
        };
        fo.url = f
            .opt("url")?
            .ok_or_else(|| Error::invalid("options.fanout.url is required"))?
            .string("options.fanout.url")?;
        if let Some(v) = f.opt("prefix")?.filter(|v| !v.is_nullish()) {
            let p = v.string("options.fanout.prefix")?;
            if p.is_empty() || p.len() > 64 || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(Error::invalid("options.fanout.prefix must be 1-64 of [A-Za-z0-9_-]"));
            }
            fo.prefix = p;
        }
        if let Some(v) = opt_num(&f, "maxAgeMs")? {
            fo.max_age_ms = count(v, "fanout.maxAgeMs", 365.0 * 86_400_000.0)?.max(1_000.0) as u64;
        }
        if let Some(v) = opt_num(&f, "maxBytes")? {
            fo.max_bytes = count(v, "fanout.maxBytes", 1e15)?.max(65_536.0) as i64;
        }
        if let Some(v) = opt_num(&f, "beatMs")? {
            fo.beat_ms = count(v, "fanout.beatMs", 60_000.0)?.max(10.0) as u64;
        }
        if let Some(v) = opt_num(&f, "batchMs")? {
            fo.batch_ms = count(v, "fanout.batchMs", 1_000.0)? as u64;
        }
        if let Some(v) = f.opt("writerUrl")?.filter(|v| !v.is_nullish()) {
            fo.writer_url = v.string("options.fanout.writerUrl")?;
        }
        o.fanout = Some(fo);
    }
    Ok(o)
}

fn value_of(v: Option<Js>, what: &str) -> crate::Result<Value> {
    Ok(v.map(|v| v.to_value(what)).transpose()?.flatten().unwrap_or(Value::Undefined))
}

/// `WaitKind`'s index in `WAIT_KINDS` of `lib/internal/helpers.js`.
fn kind_code(kind: WaitKind) -> u32 {
    match kind {
        WaitKind::FineKey => 0,
        WaitKind::TemplateKey => 1,
        WaitKind::TableKey => 2,
    }
}

/// The JS reply of a wait: built by `makeWaitReply` (`lib/internal/helpers.js`) unless stale,
/// which carries more fields and is rare.
fn wait_reply_js(env: &Env, r: WaitReply) -> crate::Result<RawValue> {
    if r.stale || r.epoch.is_some() || r.generation.is_some() {
        return to_js(env, wait_reply(r)).map_err(|e| Error::Internal(e.reason));
    }
    let out = Out::new(env);
    let values = (|| {
        Ok::<_, napi::Error>([
            out.bool(r.touched)?,
            // Both are ASCII: a cursor is hex, a colon and digits.
            out.latin1(r.cursor.as_bytes())?,
            out.u32(kind_code(r.effective_wait_kind))?,
            out.latin1(r.bucket_max_source_offset_seq.to_string().as_bytes())?,
            out.num(r.flush_at_ms as f64)?,
            out.num(r.bucket_start_ms as f64)?,
        ])
    })()
    .map_err(|e| Error::Internal(e.reason))?;
    helpers::call(env, Helper::MakeWaitReply, &values).map(|v| v.raw())
}

fn wait_reply(r: WaitReply) -> WaitResult {
    WaitResult {
        touched: r.touched,
        stale: r.stale.then_some(true),
        cursor: r.cursor,
        epoch: r.epoch,
        generation: r.generation,
        effective_wait_kind: r.effective_wait_kind.as_str().into(),
        bucket_max_source_offset_seq: r.bucket_max_source_offset_seq.to_string(),
        flush_at_ms: r.flush_at_ms as f64,
        bucket_start_ms: r.bucket_start_ms as f64,
        error: r.stale.then(|| StaleError {
            code: "stale".into(),
            message: "cursor epoch mismatch; rerun/re-subscribe and start from cursor".into(),
        }),
    }
}

fn meta_js(v: TouchMetaView) -> TouchMeta {
    let m = &v.journal;
    let r: &RuntimeView = &v.runtime;
    let t = &r.totals;
    let w = &r.journal.wake;
    TouchMeta {
        mode: "memory".into(),
        cursor: m.cursor.clone(),
        epoch: m.epoch.clone(),
        generation: m.generation,
        bucket_ms: m.bucket_ms as f64,
        coalesce_ms: m.coalesce_ms as f64,
        filter_size: m.filter_size as f64,
        k: m.k,
        pending_keys: m.pending_keys as f64,
        overflow_buckets: m.overflow_buckets as f64,
        active_waiters: m.active_waiters as f64,
        bucket_max_source_offset_seq: m.bucket_max_source_offset_seq.to_string(),
        last_flush_at_ms: m.last_flush_at_ms as f64,
        flush_interval_ms_max_last10s: m.flush_interval_ms_max_last_10s as f64,
        flush_interval_ms_p95_last10s: m.flush_interval_ms_p95_last_10s as f64,
        settled: v.settled,
        coarse_interval_ms: v.coarse_interval_ms,
        touch_coalesce_window_ms: v.touch_coalesce_window_ms,
        active_templates: v.active_templates as f64,
        lag_source_offsets: v.lag_source_offsets as f64,
        touch_mode: v.touch_mode.as_str().into(),
        wal_scanned_through: v.processed_through.map(|p| crate::store::encode_offset(v.stream_epoch as u32, p)),
        hot_fine_keys: r.hot_fine_keys as f64,
        hot_templates: r.hot_templates as f64,
        hot_fine_keys_active: r.hot_fine_keys_active as f64,
        hot_fine_keys_grace: r.hot_fine_keys_grace as f64,
        hot_templates_active: r.hot_templates_active as f64,
        hot_templates_grace: r.hot_templates_grace as f64,
        fine_waiters_active: r.fine_waiters_active as f64,
        coarse_waiters_active: r.coarse_waiters_active as f64,
        broad_fine_waiters_active: r.broad_fine_waiters_active as f64,
        hot_key_filtering_enabled: r.hot_key_filtering_enabled,
        hot_template_filtering_enabled: r.hot_template_filtering_enabled,
        scan_rows_total: t.scan_rows,
        scan_batches_total: t.scan_batches,
        scanned_but_emitted0_batches_total: t.scanned_but_emitted0_batches,
        processed_through_delta_total: t.processed_through_delta,
        touches_emitted_total: t.touches_emitted,
        touches_table_total: t.touches_table,
        touches_template_total: t.touches_template,
        fine_touches_dropped_due_to_budget_total: t.fine_touches_dropped_due_to_budget,
        fine_touches_skipped_cold_template_total: t.fine_touches_skipped_cold_template,
        fine_touches_skipped_cold_key_total: t.fine_touches_skipped_cold_key,
        fine_touches_skipped_template_bucket_total: t.fine_touches_skipped_template_bucket,
        wait_touched_total: t.wait_touched,
        wait_timeout_total: t.wait_timeout,
        wait_stale_total: t.wait_stale,
        journal_flushes_total: r.journal.flushes as f64,
        journal_notify_wakeups_total: w.notify_wakeups as f64,
        journal_notify_wake_ms_total: w.notify_wake_ms_sum,
        journal_notify_wake_ms_max: w.notify_wake_ms_max,
        journal_timeouts_fired_total: w.timeouts_fired as f64,
        journal_timeout_sweep_ms_total: w.timeout_sweep_ms_sum,
        compensation_touches_total: t.compensation_touches,
        batches_split_for_budget_total: t.batches_split_for_budget,
        journal_kept: v.kept.kept,
        epoch_started_at_ms: v.kept.epoch_started_ms as f64,
        replayed_flushes: v.kept.replayed_flushes as f64,
        floor_generation: v.kept.floor_generation as f64,
    }
}

fn runtime_js(mode: TouchMode, lag: i64, r: &RuntimeView) -> TouchRuntime {
    let t = &r.totals;
    let w = &r.journal.wake;
    TouchRuntime {
        lag_source_offsets: lag as f64,
        touch_mode: mode.as_str().into(),
        hot_fine_keys: r.hot_fine_keys as f64,
        hot_templates: r.hot_templates as f64,
        hot_fine_keys_active: r.hot_fine_keys_active as f64,
        hot_fine_keys_grace: r.hot_fine_keys_grace as f64,
        hot_templates_active: r.hot_templates_active as f64,
        hot_templates_grace: r.hot_templates_grace as f64,
        fine_waiters_active: r.fine_waiters_active as f64,
        coarse_waiters_active: r.coarse_waiters_active as f64,
        broad_fine_waiters_active: r.broad_fine_waiters_active as f64,
        hot_key_filtering_enabled: r.hot_key_filtering_enabled,
        hot_template_filtering_enabled: r.hot_template_filtering_enabled,
        scan_rows_total: t.scan_rows,
        scan_batches_total: t.scan_batches,
        scanned_but_emitted0_batches_total: t.scanned_but_emitted0_batches,
        processed_through_delta_total: t.processed_through_delta,
        touches_emitted_total: t.touches_emitted,
        touches_table_total: t.touches_table,
        touches_template_total: t.touches_template,
        fine_touches_dropped_due_to_budget_total: t.fine_touches_dropped_due_to_budget,
        fine_touches_skipped_cold_template_total: t.fine_touches_skipped_cold_template,
        fine_touches_skipped_cold_key_total: t.fine_touches_skipped_cold_key,
        fine_touches_skipped_template_bucket_total: t.fine_touches_skipped_template_bucket,
        wait_touched_total: t.wait_touched,
        wait_timeout_total: t.wait_timeout,
        wait_stale_total: t.wait_stale,
        journal_flushes_total: r.journal.flushes as f64,
        journal_notify_wakeups_total: w.notify_wakeups as f64,
        journal_notify_wake_ms_total: w.notify_wake_ms_sum,
        journal_notify_wake_ms_max: w.notify_wake_ms_max,
        journal_timeouts_fired_total: w.timeouts_fired as f64,
        journal_timeout_sweep_ms_total: w.timeout_sweep_ms_sum,
    }
}

fn tick_js(r: TickReport) -> TickResult {
    TickResult {
        streams: r.streams as f64,
        batches: r.batches as f64,
        failed: r
            .failed
            .into_iter()
            .map(|(stream, e)| TickFailure { stream, code: e.code().into(), message: e.to_string() })
            .collect(),
    }
}

/// A list argument of at most `MAX_WAIT_LIST` elements, its length checked before any is read.
fn capped<'env>(v: Js<'env>, what: &str) -> crate::Result<Js<'env>> {
    if let Some(n) = v.try_array_len() {
        if n as usize > MAX_WAIT_LIST {
            return Err(Error::invalid(format!("{what} too large (max {MAX_WAIT_LIST})")));
        }
    }
    Ok(v)
}

/// A list of at most `MAX_WAIT_LIST` strings, its length checked before any is read.
fn capped_strings(v: Js, what: &str) -> crate::Result<Vec<String>> {
    capped(v, what)?.items(what)?.enumerate().map(|(i, s)| s?.string(&format!("{what}[{i}]"))).collect()
}

fn stats_js(s: EngineStatsView) -> EngineStats {
    let c = &s.collector;
    EngineStats {
        collector: CollectorStats {
            ingested_bytes: c.ingested_bytes,
            wal_bytes: c.wal_bytes,
            sealed_payload_bytes: c.sealed_payload_bytes,
            sealed_bytes: c.sealed_bytes,
            uploaded_bytes: c.uploaded_bytes,
            segments_sealed: c.segments_sealed,
            backpressure_over_ms: c.backpressure_over_ms,
            active_streams: c.active_streams as f64,
        },
        reporter_line: s.report_line,
        window_ms: s.window_ms,
        memory: memory_js(&s.memory),
        top_streams: top_js(s.top_streams),
        streams: s
            .streams
            .into_iter()
            .map(|(stream, mode, lag, r)| StreamRuntimeStats {
                stream,
                touch_mode: mode.as_str().into(),
                lag_source_offsets: lag as f64,
                scan_rows_total: r.totals.scan_rows,
                scan_batches_total: r.totals.scan_batches,
                touches_emitted_total: r.totals.touches_emitted,
                touches_table_total: r.totals.touches_table,
                touches_template_total: r.totals.touches_template,
                compensation_touches_total: r.totals.compensation_touches,
                wait_touched_total: r.totals.wait_touched,
                wait_timeout_total: r.totals.wait_timeout,
                wait_stale_total: r.totals.wait_stale,
                fine_waiters_active: r.fine_waiters_active as f64,
                coarse_waiters_active: r.coarse_waiters_active as f64,
                journal_flushes_total: r.journal.flushes as f64,
            })
            .collect(),
        template_lifecycle: LifecycleStats {
            activated: s.lifecycle.activated as f64,
            retired: s.lifecycle.retired as f64,
            evicted: s.lifecycle.evicted as f64,
        },
        kept_journals: KeptJournalStats {
            folder: s.restored.folder.clone(),
            kept: s.restored.kept as f64,
            refused: s.restored.refused as f64,
            replayed_flushes: s.restored.replayed_flushes as f64,
            restore_ms: s.restored.ms,
        },
    }
}

fn memory_js(m: &MemoryView) -> EngineMemoryStats {
    EngineMemoryStats {
        dirty_streams: m.dirty_streams as f64,
        journals: m.journals as f64,
        journals_created_total: m.journals_created_total as f64,
        journal_filter_bytes_total: m.journal_filter_bytes_total as f64,
        fine_lag_coarse_only_streams: m.fine_lag_coarse_only_streams as f64,
        touch_mode_streams: m.touch_mode_streams as f64,
        fine_token_bucket_streams: m.fine_token_bucket_streams as f64,
        hot_fine_streams: m.hot_fine_streams as f64,
        runtime_totals_streams: m.runtime_totals_streams as f64,
        template_last_seen_entries: m.template_last_seen_entries as f64,
        template_dirty_last_seen_entries: m.template_dirty_last_seen_entries as f64,
        template_rate_state_streams: m.template_rate_state_streams as f64,
    }
}

fn top_js(top: Vec<TopStream>) -> Vec<TopStreamEntry> {
    top.into_iter()
        .map(|t| TopStreamEntry {
            stream: t.stream,
            journal_filter_bytes: t.journal_filter_bytes as f64,
            dirty: t.dirty,
            touch_mode: t.touch_mode.map(|m| m.as_str().to_string()),
        })
        .collect()
}

fn activate_js(out: ActivateOutcome, limits: TemplateLimits) -> ActivateResult {
    ActivateResult {
        activated: out
            .activated
            .into_iter()
            .map(|a| ActivatedTemplate {
                template_id: a.template_id,
                state: "active".into(),
                active_from_touch_offset: a.active_from_touch_offset,
            })
            .collect(),
        denied: out
            .denied
            .into_iter()
            .map(|d| DeniedTemplate { template_id: d.template_id, reason: d.reason.into() })
            .collect(),
        limits: TemplateLimitsJs {
            max_active_templates_per_stream: limits.max_active_per_stream,
            max_active_templates_per_entity: limits.max_active_per_entity,
        },
    }
}

fn arg<'env>(env: &'env Env, v: &Option<Unknown>) -> Option<Js<'env>> {
    v.as_ref().map(|u| Js::new(env, u.raw()))
}

impl TouchEngine {
    fn promise<'env, T>(
        &self,
        env: &'env Env,
        parsed: crate::Result<T>,
        start: impl FnOnce(T, super::napi::Ticket),
    ) -> napi::Result<Unknown<'env>> {
        let value = match parsed {
            Ok(v) => v,
            Err(e) => return Ok(unknown(env, Port::rejected(env, &e)?)),
        };
        let (ticket, promise) = self.port.promise(env)?;
        start(value, ticket);
        Ok(unknown(env, promise))
    }
}

/// `request.stream` and `request.signal` of a wait: the stream name, and the signal unless it
/// is absent (a signal already aborted refuses the wait before anything else is read).
fn wait_stream_and_signal<'env>(
    stream: Option<Js<'env>>,
    signal: Option<Js<'env>>,
) -> crate::Result<(String, Option<Js<'env>>)> {
    let stream = stream.ok_or_else(|| Error::invalid("request.stream is required"))?.string("request.stream")?;
    let signal = signal.filter(|s| !s.is_nullish());
    if let Some(s) = &signal {
        if abort::is_aborted(s)? {
            return Err(Error::Aborted);
        }
    }
    Ok((stream, signal))
}

/// `TouchEngine.prototype.wait` as `lib/internal/engine-methods.js` calls it: the request's
/// fields read in JavaScript (`stream`, `signal`, then `WaitArgs::FIELDS` in order) and passed
/// as they are, so that no property is looked up through N-API. Same checks and replies as
/// the native `wait`.
#[napi(js_name = "_engineWait", skip_typescript)]
#[allow(clippy::too_many_arguments)]
pub fn engine_wait_fields<'env>(
    env: &'env Env,
    engine: Unknown,
    stream: Unknown,
    signal: Unknown,
    keys: Unknown,
    key_ids: Unknown,
    exact: Unknown,
    cursor: Unknown,
    timeout_ms: Unknown,
    template_ids_used: Unknown,
    interest_mode: Unknown,
    declare_templates: Unknown,
    inactivity_ttl_ms: Unknown,
    cancel_id: Unknown,
) -> napi::Result<Unknown<'env>> {
    let this = engine_of(env, &engine)?;
    let present = |v: &Unknown| {
        let v = Js::new(env, v.raw());
        (v.type_of() != napi::sys::ValueType::napi_undefined).then_some(v)
    };
    let cancel_id = present(&cancel_id).map(|v| v.safe_integer("cancelId")).transpose().map_err(|e| throw(env, e))?;
    let parsed = (|| -> crate::Result<(String, WaitArgs, Option<Js>)> {
        let (stream, signal) = wait_stream_and_signal(present(&stream), present(&signal))?;
        let fields = [
            &keys,
            &key_ids,
            &exact,
            &cursor,
            &timeout_ms,
            &template_ids_used,
            &interest_mode,
            &declare_templates,
            &inactivity_ttl_ms,
        ]
        .map(present);
        let body = Js::picked("request", WaitArgs::FIELDS, &fields, MAX_WAIT_LIST)?;
        Ok((stream, WaitArgs::parse(&body)?, signal))
    })();
    this.wait_parsed(env, parsed, cancel_id.map(|id| id as u64))
}

/// The `TouchEngine` the JS halves pass as their first argument.
fn engine_of<'env>(env: &'env Env, engine: &Unknown) -> napi::Result<ClassInstance<'env, TouchEngine>> {
    class_instance::<TouchEngine>(Js::new(env, engine.raw()))
        .ok_or_else(|| throw(env, Error::invalid("this must be a TouchEngine")))
}

/// Aborts the wait `lib/internal/engine-methods.js` registered under `id` (its AbortSignal
/// fired). A wait that already settled is no longer registered: nothing happens.
#[napi(js_name = "_engineCancel", skip_typescript)]
pub fn engine_cancel(env: &Env, engine: Unknown, id: Unknown) -> napi::Result<()> {
    let this = engine_of(env, &engine)?;
    let id = Js::new(env, id.raw()).safe_integer("id").map_err(|e| throw(env, e))?;
    let control = this.cancels.lock().remove(&(id as u64));
    if let Some(control) = control {
        control.abort();
    }
    Ok(())
}

#[napi]
impl TouchEngine {
    /// Opens the engine over `store`: loads touch profiles, seeds touch state (M22), hooks the
    /// store's appends and starts the processing loop.
    #[napi(constructor, ts_args_type = "store: Store, options?: TouchEngineOptions | undefined | null")]
    pub fn new(env: &Env, store: Unknown, options: Option<Unknown>) -> napi::Result<TouchEngine> {
        let opts = parse_options(arg(env, &options)).map_err(|e| throw(env, e))?;
        let instance = class_instance::<Store>(Js::new(env, store.raw()))
            .ok_or_else(|| throw(env, Error::invalid("store must be a Store")))?;
        let engine = CoreEngine::open(instance.store.clone(), opts).map_err(|e| throw(env, e))?;
        Ok(TouchEngine { engine, port: Port::new(env)?, cancels: Default::default() })
    }

    /// Validates a touch config like the reference (as `profile.touch`), saves it as the
    /// stream's state-protocol profile and returns the normalised config. Throws
    /// `ERR_INVALID_TOUCH_CONFIG` with the reference's message.
    #[napi(ts_args_type = "stream: string, config: unknown", ts_return_type = "TouchConfig")]
    pub fn set_touch_config<'env>(
        &self,
        env: &'env Env,
        stream: Unknown,
        config: Unknown,
    ) -> napi::Result<Unknown<'env>> {
        let stream = Js::new(env, stream.raw()).string("stream").map_err(|e| throw(env, e))?;
        let touch = value_of(Some(Js::new(env, config.raw())), "config").map_err(|e| throw(env, e))?;
        let mut profile = Object::new();
        profile.insert(JsString::from("kind"), Value::String(JsString::from("state-protocol")));
        profile.insert(JsString::from("touch"), touch);
        let saved = self.engine.set_profile(&stream, &Value::Object(profile)).map_err(|e| throw(env, e))?;
        let cfg = saved.touch.map(|t| t.to_value()).unwrap_or(Value::Undefined);
        Ok(unknown(env, Out::new(env).value(&cfg)?))
    }

    /// Saves a whole state-protocol profile (`{ kind: "state-protocol", touch? }`).
    #[napi(
        ts_args_type = "stream: string, profile: unknown",
        ts_return_type = "{ kind: 'state-protocol'; touch?: TouchConfig }"
    )]
    pub fn set_profile<'env>(&self, env: &'env Env, stream: Unknown, profile: Unknown) -> napi::Result<Unknown<'env>> {
        let stream = Js::new(env, stream.raw()).string("stream").map_err(|e| throw(env, e))?;
        let raw = value_of(Some(Js::new(env, profile.raw())), "profile").map_err(|e| throw(env, e))?;
        let saved = self.engine.set_profile(&stream, &raw).map_err(|e| throw(env, e))?;
        Ok(unknown(env, Out::new(env).value(&saved.to_value())?))
    }

    /// The stream's touch config, or null when it has none.
    #[napi(ts_args_type = "stream: string", ts_return_type = "TouchConfig | null")]
    pub fn get_touch_config<'env>(&self, env: &'env Env, stream: Unknown) -> napi::Result<Unknown<'env>> {
        let stream = Js::new(env, stream.raw()).string("stream").map_err(|e| throw(env, e))?;
        let out = Out::new(env);
        match self.engine.profile(&stream).and_then(|p| p.touch) {
            Some(t) => Ok(unknown(env, out.value(&t.to_value())?)),
            None => Ok(unknown(env, out.null()?)),
        }
    }

    /// Activates templates (T1–T7, T13). Denied declarations say why.
    #[napi(
        ts_args_type = "stream: string, templates: TemplateDecl[], options?: { inactivityTtlMs?: number } | undefined | null",
        ts_return_type = "ActivateResult"
    )]
    pub fn activate_templates(
        &self,
        env: &Env,
        stream: Unknown,
        templates: Unknown,
        options: Option<Unknown>,
    ) -> napi::Result<ActivateResult> {
        let run = || -> crate::Result<ActivateResult> {
            let stream = Js::new(env, stream.raw()).string("stream")?;
            let templates = Js::new(env, templates.raw()).to_value_capped("templates", MAX_DECLARED_TEMPLATES)?;
            let decls = parse_template_decls(&templates.unwrap_or(Value::Undefined), "activate.templates")?;
            let ttl = match arg(env, &options).filter(|o| !o.is_nullish()) {
                Some(o) => {
                    let o = o.object("options")?;
                    parse_inactivity_ttl(
                        &value_of(o.get("inactivityTtlMs")?, "options.inactivityTtlMs")?,
                        "activate.inactivityTtlMs",
                    )?
                }
                None => None,
            };
            let (out, limits) = self.engine.activate_templates(&stream, &decls, ttl)?;
            Ok(activate_js(out, limits))
        };
        run().map_err(|e| throw(env, e))
    }

    /// Runs one batch exactly as the reference worker would (no side effects).
    /// `request.output: "packed"` gives the touches as typed arrays (see `processRows`).
    #[napi(
        ts_generic_types = "R extends ProcessRequest = ProcessRequest",
        ts_args_type = "request: R",
        ts_return_type = "Promise<R extends { output: 'packed' } ? PackedProcessResult : ProcessResult>"
    )]
    pub fn process_batch<'env>(&self, env: &'env Env, request: Unknown) -> napi::Result<Unknown<'env>> {
        let parsed = (|| {
            let req = Js::new(env, request.raw());
            Ok((parse_request(req)?, parse_output(&req)?))
        })();
        let store = self.engine.store().clone();
        self.promise(env, parsed, move |(req, output), ticket| {
            crate::processor::source::process_from_store(&store, req, Box::new(move |r| settle(ticket, r, output)));
        })
    }

    /// Re-reads the state-protocol profiles of `streams` (every one when absent) from the
    /// file: for a host that saves profiles itself (see `profilePollMs`).
    #[napi(ts_args_type = "streams?: string[] | undefined | null")]
    pub fn reload_profiles(&self, env: &Env, streams: Option<Unknown>) -> napi::Result<()> {
        let run = || -> crate::Result<()> {
            let list = match arg(env, &streams).filter(|v| !v.is_nullish()) {
                // No cap (any number of streams); the first name refused ends the reading.
                Some(v) => {
                    Some(v.items("streams")?.map(|s| s?.string("streams[]")).collect::<crate::Result<Vec<_>>>()?)
                }
                None => None,
            };
            self.engine.reload_profiles(list)
        };
        run().map_err(|e| throw(env, e))
    }

    /// Marks a stream dirty (appends through the engine's store do this themselves).
    #[napi(ts_args_type = "stream: string")]
    pub fn notify(&self, env: &Env, stream: Unknown) -> napi::Result<()> {
        let stream = Js::new(env, stream.raw()).string("stream").map_err(|e| throw(env, e))?;
        self.engine.notify(&stream);
        Ok(())
    }

    /// Waits for a touch of any of the keys after `cursor` (W1–W6).
    #[napi(ts_args_type = "request: WaitRequest", ts_return_type = "Promise<WaitResult>")]
    pub fn wait<'env>(&self, env: &'env Env, request: Unknown) -> napi::Result<Unknown<'env>> {
        let parsed = (|| -> crate::Result<(String, WaitArgs, Option<Js>)> {
            let r = Js::new(env, request.raw()).object("request")?;
            let (stream, signal) = wait_stream_and_signal(r.get("stream")?, r.opt("signal")?)?;
            let body = r.pick("request", WaitArgs::FIELDS, MAX_WAIT_LIST)?;
            Ok((stream, WaitArgs::parse(&body)?, signal))
        })();
        self.wait_parsed(env, parsed, None)
    }

    /// Starts a parsed wait: it listens to `signal` through N-API (a signal that refuses the
    /// listener rejects the wait), or, given a `cancel_id`, is registered for `_engineCancel`
    /// until it settles.
    fn wait_parsed<'env>(
        &self,
        env: &'env Env,
        parsed: crate::Result<(String, WaitArgs, Option<Js>)>,
        cancel_id: Option<u64>,
    ) -> napi::Result<Unknown<'env>> {
        let engine = self.engine.clone();
        let (ticket, promise) = match parsed {
            Ok(p) => {
                let (ticket, promise) = self.port.promise(env)?;
                (Some((p, ticket)), promise)
            }
            Err(e) => (None, Port::rejected(env, &e)?),
        };
        if let Some(((stream, args, signal), ticket)) = ticket {
            // The signal is listened to before the wait starts, so a signal that refuses the
            // listener (its `addEventListener` throws) rejects the wait as bad input, as a
            // journal wait does.
            let control = Arc::new(WaitControl::default());
            let hook = match signal {
                None => None,
                Some(signal) => {
                    let ctl = control.clone();
                    match abort::listen(env, &signal, Box::new(move |_: &Env| ctl.abort())) {
                        Ok(h) => Some(h),
                        Err(e) => {
                            ticket.settle_now(env, |_| Err(e));
                            return Ok(unknown(env, promise));
                        }
                    }
                }
            };
            let cancel = cancel_id.map(|id| (self.cancels.clone(), id));
            engine.wait_with(
                &stream,
                args,
                control.clone(),
                Box::new(move |r| {
                    // The outcome runs on the JS thread at a later drain, never inside this
                    // call: the wait is in `cancels` (below) before it leaves it here.
                    ticket.settle(Box::new(move |env| {
                        if let Some(h) = hook {
                            h.release(env);
                        }
                        if let Some((cancels, id)) = cancel {
                            cancels.lock().remove(&id);
                        }
                        wait_reply_js(env, r?)
                    }))
                }),
            );
            if let Some(id) = cancel_id {
                self.cancels.lock().insert(id, control);
            }
        }
        Ok(unknown(env, promise))
    }

    /// `/touch/meta` (M21); `settle: "flush"` waits for zero lag and a flushed bucket.
    #[napi(
        ts_args_type = "stream: string, options?: MetaOptions | undefined | null",
        ts_return_type = "Promise<TouchMeta>"
    )]
    pub fn meta<'env>(&self, env: &'env Env, stream: Unknown, options: Option<Unknown>) -> napi::Result<Unknown<'env>> {
        let parsed = (|| -> crate::Result<(String, bool, f64)> {
            let stream = Js::new(env, stream.raw()).string("stream")?;
            let (mut settle, mut timeout) = (false, 30_000.0);
            if let Some(o) = arg(env, &options).filter(|o| !o.is_nullish()) {
                let o = o.object("options")?;
                if let Some(s) = o.opt("settle")? {
                    if s.string("options.settle")? != "flush" {
                        return Err(Error::invalid("meta.settle must be 'flush' when provided"));
                    }
                    settle = true;
                }
                if let Some(t) = o.opt("timeoutMs")? {
                    let n = t.number("options.timeoutMs")?;
                    if !n.is_finite() {
                        return Err(Error::invalid("meta.timeoutMs must be a number (ms)"));
                    }
                    timeout = n.floor().clamp(0.0, 120_000.0);
                }
            }
            Ok((stream, settle, timeout))
        })();
        let engine = self.engine.clone();
        self.promise(env, parsed, move |(stream, settle, timeout), ticket| {
            engine.meta(
                &stream,
                settle,
                timeout,
                Box::new(move |r| ticket.settle_with(r, |env, v| to_js(env, meta_js(v)))),
            );
        })
    }

    /// One processing pass now, whether or not the loop runs (the reference manager's
    /// `tick()`): resolves once every row of every touch-enabled stream committed before the
    /// call is processed and its touches are in the stream's journal (pending or flushed),
    /// checkpoints written. A failing stream does not reject it: it is listed in `failed`.
    #[napi(ts_return_type = "Promise<TickResult>")]
    pub fn tick<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        let engine = self.engine.clone();
        self.promise(env, Ok(()), move |(), ticket| {
            engine.tick(Box::new(move |r| ticket.settle_with(r, |env, v| to_js(env, tick_js(v)))));
        })
    }

    /// The stream's journal, the one the engine's batches touch and its waits park in (the
    /// reference manager's `getOrCreateJournal`); with `create: false`, null until something
    /// created it (`getJournalIfExists`). Throws `ERR_TOUCH_NOT_ENABLED` /
    /// `ERR_STREAM_NOT_FOUND` for a stream without touch.
    #[napi(
        ts_args_type = "stream: string, options?: { create?: boolean } | undefined | null",
        ts_return_type = "EngineJournal | null"
    )]
    pub fn journal(&self, env: &Env, stream: Unknown, options: Option<Unknown>) -> napi::Result<Option<EngineJournal>> {
        let parsed = (|| -> crate::Result<(String, bool)> {
            let stream = Js::new(env, stream.raw()).string("stream")?;
            let mut create = true;
            if let Some(o) = arg(env, &options).filter(|o| !o.is_nullish()) {
                if let Some(c) = o.object("options")?.opt("create")? {
                    create = c.boolean("options.create")?;
                }
            }
            Ok((stream, create))
        })();
        let (stream, create) = parsed.map_err(|e| throw(env, e))?;
        match self.engine.journal(&stream, create).map_err(|e| throw(env, e))? {
            Some(j) => Ok(Some(EngineJournal::new(env, j)?)),
            None => Ok(None),
        }
    }

    /// Hot interest for a wait the caller runs itself (the reference manager's
    /// `beginHotWaitInterest`, M19): counts the waiter and makes its keys and templates hot,
    /// so batches emit the fine touches it waits for. Returns the lease's id for
    /// `releaseHotInterest`.
    #[napi(ts_args_type = "stream: string, interest: HotInterest")]
    pub fn begin_hot_interest(&self, env: &Env, stream: Unknown, interest: Unknown) -> napi::Result<f64> {
        let parsed = (|| -> crate::Result<(String, InterestMode, Vec<u32>, Vec<String>)> {
            let stream = Js::new(env, stream.raw()).string("stream")?;
            let o = Js::new(env, interest.raw()).object("interest")?;
            let keys = match o.opt("keyIds")? {
                Some(v) => key_ids(&capped(v, "interest.keyIds")?, "interest.keyIds")?,
                None => Vec::new(),
            };
            let templates = match o.opt("templateIdsUsed")? {
                Some(v) => capped_strings(v, "interest.templateIdsUsed")?,
                None => Vec::new(),
            };
            let mode = match o.opt("interestMode")? {
                Some(m) => parse_interest_mode(&m.string("interest.interestMode")?),
                None => Some(InterestMode::Fine),
            }
            .ok_or_else(|| Error::invalid("interest.interestMode must be 'fine' or 'coarse'"))?;
            Ok((stream, mode, keys, templates))
        })();
        let (stream, mode, keys, templates) = parsed.map_err(|e| throw(env, e))?;
        let id = self.engine.begin_hot_interest(&stream, mode, &keys, &templates).map_err(|e| throw(env, e))?;
        Ok(id as f64)
    }

    /// Releases a lease of `beginHotInterest`: its keys and templates enter their grace
    /// period. False for an id already released.
    #[napi(ts_args_type = "id: number")]
    pub fn release_hot_interest(&self, env: &Env, id: Unknown) -> napi::Result<bool> {
        let id = Js::new(env, id.raw()).safe_integer("id").map_err(|e| throw(env, e))?;
        Ok(id >= 0 && self.engine.release_hot_interest(id as u64))
    }

    /// T8: marks the templates as used now, as a fine wait naming them does (the reference
    /// manager's `heartbeatTemplates`).
    #[napi(ts_args_type = "stream: string, templateIdsUsed: string[]")]
    pub fn heartbeat_templates(&self, env: &Env, stream: Unknown, template_ids: Unknown) -> napi::Result<()> {
        let parsed = (|| -> crate::Result<(String, Vec<String>)> {
            let stream = Js::new(env, stream.raw()).string("stream")?;
            let ids = capped_strings(Js::new(env, template_ids.raw()), "templateIdsUsed")?;
            Ok((stream, ids))
        })();
        let (stream, ids) = parsed.map_err(|e| throw(env, e))?;
        self.engine.heartbeat_templates(&stream, &ids).map_err(|e| throw(env, e))
    }

    /// The reference manager's `getTouchRuntimeSnapshot`, read without touching the file: the
    /// hot state is swept first, so expired keys and templates are gone.
    #[napi(ts_args_type = "stream: string")]
    pub fn runtime(&self, env: &Env, stream: Unknown) -> napi::Result<TouchRuntime> {
        let stream = Js::new(env, stream.raw()).string("stream").map_err(|e| throw(env, e))?;
        let (mode, lag, view) = self.engine.runtime(&stream).map_err(|e| throw(env, e))?;
        Ok(runtime_js(mode, lag, &view))
    }

    /// Counts a wait's outcome in the stream's totals (`waitTouchedTotal`, …), for waits the
    /// caller ran itself (the engine's own waits count themselves).
    #[napi(ts_args_type = "stream: string, outcome: 'touched' | 'timeout' | 'stale'")]
    pub fn record_wait(&self, env: &Env, stream: Unknown, outcome: Unknown) -> napi::Result<()> {
        let parsed = (|| -> crate::Result<(String, String)> {
            let stream = Js::new(env, stream.raw()).string("stream")?;
            let outcome = Js::new(env, outcome.raw()).string("outcome")?;
            if !matches!(outcome.as_str(), "touched" | "timeout" | "stale") {
                return Err(Error::invalid("outcome must be 'touched', 'timeout' or 'stale'"));
            }
            Ok((stream, outcome))
        })();
        let (stream, outcome) = parsed.map_err(|e| throw(env, e))?;
        self.engine.record_wait(&stream, &outcome);
        Ok(())
    }

    /// Drains what the engine kept since the previous call with `records: true`: one record
    /// per processed batch (touch counts, not touches), template lifecycle events with the
    /// reference's fields, WAL GC deletions and failed batches per stream. Empty without
    /// `records`; works after `close()`.
    #[napi]
    pub fn take_records(&self) -> EngineRecords {
        records_js(self.engine.take_records())
    }

    /// The stats snapshot (the collector's window resets on each call).
    #[napi]
    pub fn stats(&self) -> EngineStats {
        stats_js(self.engine.stats())
    }

    /// The fan-out's counters (`options.fanout`), or null without one.
    #[napi]
    pub fn fanout_stats(&self) -> Option<FanoutStatsJs> {
        self.engine.fanout_stats().map(|s| FanoutStatsJs {
            role: s.role.to_string(),
            connected: s.connected,
            sent: s.sent as f64,
            sent_bytes: s.sent_bytes as f64,
            dropped: s.dropped as f64,
            received: s.received as f64,
            received_bytes: s.received_bytes as f64,
            writer_url: s.writer_url,
            flushes_sent: s.flushes_sent as f64,
            keys_sent: s.keys_sent as f64,
            applied: s.applied as f64,
            duplicates: s.duplicates as f64,
            gaps: s.gaps as f64,
            adopted: s.adopted as f64,
            bad_messages: s.bad_messages as f64,
            beats: s.beats as f64,
            standby: s.standby,
            prefix_held_by: s.prefix_held_by,
            fenced: s.fenced as f64,
        })
    }

    /// Memory counters and the `topLimit` streams with the largest journal filters (default
    /// 5, at most 1000): the reference manager's `getMemoryStats` / `getTopStreams`. Resets
    /// nothing.
    #[napi(ts_args_type = "topLimit?: number | undefined | null")]
    pub fn memory_stats(&self, env: &Env, top_limit: Option<Unknown>) -> napi::Result<EngineMemoryReport> {
        let limit = match arg(env, &top_limit).filter(|v| !v.is_nullish()) {
            Some(v) => {
                let n = v.number("topLimit").map_err(|e| throw(env, e))?;
                if !n.is_finite() {
                    return Err(throw(env, Error::invalid("topLimit must be a finite number")));
                }
                n.floor().clamp(0.0, 1000.0) as usize
            }
            None => 5,
        };
        let (memory, top) = self.engine.memory(limit);
        Ok(EngineMemoryReport { memory: memory_js(&memory), top_streams: top_js(top) })
    }

    /// Stops the loop, settles every pending wait (`touched: false`) and flushes template
    /// last-seen times. The store stays open.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        let engine = self.engine.clone();
        self.promise(env, Ok(()), move |(), ticket| {
            engine.close(Box::new(move |r| ticket.settle_with(r, |env, ()| Out::new(env).undefined())));
        })
    }
}

#[allow(dead_code)]
fn _typing_only(
    _: FanoutConfig,
    _: TouchEngineOptions,
    _: TemplateDecl,
    _: WaitRequest,
    _: MetaOptions,
    _: HotInterest,
) {
}
