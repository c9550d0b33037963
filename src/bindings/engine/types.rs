//! The plain objects `TouchEngine` takes and returns (`#[napi(object)]`): its options, wait
//! and meta requests and replies, template activation, stats, runtime and fan-out counters.

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Options of `new TouchEngine(store, options)`. An integer option outside its bounds
/// (`engineBounds`) is refused (`ERR_INVALID_ARGUMENT`), not moved into them.
#[napi(object, object_to_js = false)]
pub struct TouchEngineOptions {
    /// Streams processed concurrently (default: cores, at most 4). From 0 to 64
    /// (`engineBounds`), 0 counting as 1; `autoProcess: false` processes nothing.
    pub workers: Option<u32>,
    /// Safety-net tick in ms (default 250; 0 = none; at most an hour). Appends wake the loop
    /// at once anyway.
    pub check_interval_ms: Option<f64>,
    /// Rows per batch (default 500; at most 1,000,000, 0 counting as 1).
    pub max_batch_rows: Option<u32>,
    /// Payload bytes per batch (default 4 MiB; at most 10^12, 0 counting as 1).
    pub max_batch_bytes: Option<f64>,
    /// Run the background processing loop (default true).
    pub auto_process: Option<bool>,
    /// For a host that saves profiles in the file itself: re-read every state-protocol
    /// profile this often, in ms (default 0: never; `setProfile` is then the only way in; at
    /// most an hour). A notified stream the engine does not know has its profile read at once.
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

/// `options.fanout` of `new TouchEngine`: what is not given is `fanoutDefaults`'s, and a
/// value outside `fanoutBounds` is refused (`ERR_INVALID_ARGUMENT`).
#[napi(object, object_to_js = false)]
pub struct FanoutConfig {
    #[napi(ts_type = "'writer' | 'edge'")]
    pub role: String,
    /// `nats://host:port`.
    pub url: String,
    /// Subject prefix; one per writer (default `durable-touch`): 1 to 64 of `[A-Za-z0-9_-]`.
    pub prefix: Option<String>,
    /// Retention of the writer's JetStream stream (defaults 10 minutes, 256 MiB; from 1,000 ms to
    /// a year, and from 64 KiB). Values outside the bounds are refused (`ERR_INVALID_ARGUMENT`).
    pub max_age_ms: Option<f64>,
    pub max_bytes: Option<f64>,
    /// A writer's beat and an edge's interest report, in ms (default 500; 10 to 60,000).
    pub beat_ms: Option<f64>,
    /// The writer's HTTP URL, named by edges when they refuse a request.
    pub writer_url: Option<String>,
    /// Writer: how long a flush waits for others to share its broker message, in ms (default
    /// 0: at once; at most 1,000). Fewer bytes per key reach each edge, this much later.
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

/// The stream runtime fields `TouchMeta` and `TouchRuntime` both report, in their JS order,
/// each with how it is read from a [`crate::engine::RuntimeView`] `r` (`t`: its totals, `w`:
/// its journal's wake stats). This list is the one place they are named: it is handed, after
/// `$args`, to the macro `$then`, which declares an object with them (`runtime_object` below)
/// or fills one (`runtime_object_js` in `convert.rs`).
macro_rules! runtime_fields {
    ($then:ident! { $($args:tt)* }) => {
        $then! { $($args)* ; |r, t, w| {
            hot_fine_keys: f64 = r.hot_fine_keys as f64,
            hot_templates: f64 = r.hot_templates as f64,
            hot_fine_keys_active: f64 = r.hot_fine_keys_active as f64,
            hot_fine_keys_grace: f64 = r.hot_fine_keys_grace as f64,
            hot_templates_active: f64 = r.hot_templates_active as f64,
            hot_templates_grace: f64 = r.hot_templates_grace as f64,
            fine_waiters_active: f64 = r.fine_waiters_active as f64,
            coarse_waiters_active: f64 = r.coarse_waiters_active as f64,
            broad_fine_waiters_active: f64 = r.broad_fine_waiters_active as f64,
            hot_key_filtering_enabled: bool = r.hot_key_filtering_enabled,
            hot_template_filtering_enabled: bool = r.hot_template_filtering_enabled,
            scan_rows_total: f64 = t.scan_rows,
            scan_batches_total: f64 = t.scan_batches,
            scanned_but_emitted0_batches_total: f64 = t.scanned_but_emitted0_batches,
            processed_through_delta_total: f64 = t.processed_through_delta,
            touches_emitted_total: f64 = t.touches_emitted,
            touches_table_total: f64 = t.touches_table,
            touches_template_total: f64 = t.touches_template,
            fine_touches_dropped_due_to_budget_total: f64 = t.fine_touches_dropped_due_to_budget,
            fine_touches_skipped_cold_template_total: f64 = t.fine_touches_skipped_cold_template,
            fine_touches_skipped_cold_key_total: f64 = t.fine_touches_skipped_cold_key,
            fine_touches_skipped_template_bucket_total: f64 = t.fine_touches_skipped_template_bucket,
            wait_touched_total: f64 = t.wait_touched,
            wait_timeout_total: f64 = t.wait_timeout,
            wait_stale_total: f64 = t.wait_stale,
            journal_flushes_total: f64 = r.journal.flushes as f64,
            journal_notify_wakeups_total: f64 = w.notify_wakeups as f64,
            journal_notify_wake_ms_total: f64 = w.notify_wake_ms_sum,
            journal_notify_wake_ms_max: f64 = w.notify_wake_ms_max,
            journal_timeouts_fired_total: f64 = w.timeouts_fired as f64,
            journal_timeout_sweep_ms_total: f64 = w.timeout_sweep_ms_sum,
        } }
    };
}
pub(super) use runtime_fields;

/// Declares the returned object `$name`: its `$head` fields, the runtime fields, then its
/// `$tail` fields. Types are taken as identifiers, which reach `#[napi(object)]` as written, so
/// index.d.ts reads as if the fields were spelled out. Docs in its input are written
/// `#[doc = " …"]`: a `///` comment passed through `macro_rules!` becomes a raw string
/// (`r" …"`), and napi-derive would copy its `r"` into index.d.ts.
macro_rules! runtime_object {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident { $($head:tt)* } { $($tail:tt)* };
        |$r:ident, $t:ident, $w:ident| { $($field:ident: $ty:ident = $value:expr,)* }
    ) => {
        $(#[doc = $doc])*
        #[napi(object, object_from_js = false)]
        pub struct $name {
            $($head)*
            $(pub $field: $ty,)*
            $($tail)*
        }
    };
}

runtime_fields! { runtime_object! {
    #[doc = " `/touch/meta` (M21): the journal's meta and the stream's runtime."]
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
        #[doc = " Offsets appended but not processed yet."]
        pub lag_source_offsets: f64,
        #[napi(ts_type = "'idle' | 'fine' | 'restricted' | 'coarseOnly'")]
        pub touch_mode: String,
        #[doc = " The checkpoint as a stream offset (`encodeOffset(epoch, processedThrough)`), or null."]
        pub wal_scanned_through: Option<String>,
    } {
        #[doc = " Ours: touches added so that coarsened or uncovered changes still wake their waiters."]
        pub compensation_touches_total: f64,
        #[doc = " Ours: batches cut short to keep fine touches within the budget."]
        pub batches_split_for_budget_total: f64,
        #[doc = " Ours: whether the journal is kept across restarts (its cursors stay valid)."]
        pub journal_kept: bool,
        #[doc = " Ours: wall-clock ms when the journal's epoch started (0 when not known, at an edge)."]
        pub epoch_started_at_ms: f64,
        #[doc = " Ours: flushes replayed from the kept log when the engine opened."]
        pub replayed_flushes: f64,
        #[doc = " Ours: the oldest generation a cursor may name and be answered precisely (older cursors"]
        #[doc = " of the epoch answer `stale`)."]
        pub floor_generation: f64,
    }
} }

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

runtime_fields! { runtime_object! {
    #[doc = " The reference manager's `getTouchRuntimeSnapshot`: the touch mode, the lag the last batch"]
    #[doc = " left, the hot state (swept first) and the stream's totals."]
    pub struct TouchRuntime {
        pub lag_source_offsets: f64,
        #[napi(ts_type = "'idle' | 'fine' | 'restricted' | 'coarseOnly'")]
        pub touch_mode: String,
    } {}
} }

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
