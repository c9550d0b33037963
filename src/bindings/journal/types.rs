//! The plain objects `TouchJournal` takes and returns (`#[napi(object)]`): its options,
//! `waitForAny`'s argument and hit, `getMeta()`, the total and interval stats, and the parsed
//! cursor of `parseTouchCursor`.

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Options of `new TouchJournal(...)`; defaults are the reference server's (J2).
#[napi(object, object_to_js = false)]
pub struct TouchJournalOptions {
    /// Bucket length in ms (default 100); the flush timer never waits longer.
    pub bucket_ms: Option<f64>,
    /// The bloom has 2^filterPow2 slots (default 22, clamped to [10, 30]).
    pub filter_pow2: Option<f64>,
    /// Slots per key (default 4, clamped to [1, 8]).
    pub k: Option<f64>,
    /// Unique keys per bucket before it overflows into a broadcast (default 100,000).
    pub pending_max_keys: Option<f64>,
    /// Waiters with more unique keys are scanned at each flush instead of indexed (default 32).
    pub key_index_max_keys: Option<f64>,
    /// The generation to start at (default 0). For tests of the generation wrap.
    pub initial_generation: Option<u32>,
}

/// What `waitForAny` resolves with when a touch woke it.
#[napi(object, object_from_js = false, js_name = "TouchHit")]
pub struct TouchHitJs {
    pub generation: u32,
    /// The touched key for a keyed waiter; 0 for exact, broad and broadcast wakes.
    pub key_id: u32,
    pub bucket_max_source_offset_seq: i64n,
    pub flush_at_ms: f64,
    pub bucket_start_ms: f64,
}

/// Arguments of `waitForAny`.
#[napi(object, object_to_js = false)]
pub struct WaitForAnyArgs {
    /// Key ids (u32), at most 1024.
    #[napi(ts_type = "number[] | Uint32Array")]
    pub keys: Vec<u32>,
    /// 16-hex routing keys to match exactly (others are ignored), at most 1024.
    #[napi(ts_type = "string[] | null")]
    pub exact_keys: Option<Vec<String>>,
    /// Wake only for generations after this one (default: the current generation).
    pub after_generation: Option<u32>,
    /// 0 resolves null at once; at most 2^31 - 1.
    pub timeout_ms: f64,
    #[napi(ts_type = "AbortSignal | null")]
    pub signal: Option<Unknown<'static>>,
}

/// `getMeta()` (J13).
#[napi(object, object_from_js = false)]
pub struct TouchJournalMeta {
    #[napi(ts_type = "'memory'")]
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
    /// The largest source offset ever flushed, as a decimal string ("-1" before any).
    pub bucket_max_source_offset_seq: String,
    pub last_flush_at_ms: f64,
    #[napi(js_name = "flushIntervalMsMaxLast10s")]
    pub flush_interval_ms_max_last10s: f64,
    #[napi(js_name = "flushIntervalMsP95Last10s")]
    pub flush_interval_ms_p95_last10s: f64,
}

/// `getTotalStats()` (J14).
#[napi(object, object_from_js = false)]
pub struct TouchJournalTotalStats {
    pub timeouts_fired: f64,
    pub timeout_sweeps: f64,
    pub timeout_sweep_ms_sum: f64,
    pub timeout_sweep_ms_max: f64,
    pub notify_wakeups: f64,
    pub notify_flushes: f64,
    pub notify_wake_ms_sum: f64,
    pub notify_wake_ms_max: f64,
    pub flushes: f64,
}

/// `snapshotAndResetIntervalStats()` (J14).
#[napi(object, object_from_js = false)]
pub struct TouchJournalIntervalStats {
    pub timeouts_fired: f64,
    pub timeout_sweeps: f64,
    pub timeout_sweep_ms_sum: f64,
    pub timeout_sweep_ms_max: f64,
    pub notify_wakeups: f64,
    pub notify_flushes: f64,
    pub notify_wake_ms_sum: f64,
    pub notify_wake_ms_max: f64,
    pub heap_size: f64,
}

/// A parsed touch cursor: the epoch (16 lowercase hex) and the generation (a non-negative
/// integer, not capped: past 2^53 it is rounded, as in JavaScript).
#[napi(object, object_from_js = false)]
pub struct ParsedTouchCursor {
    pub epoch: String,
    pub generation: f64,
}

// Silence "never constructed" for the typing-only structs.
#[allow(dead_code)]
fn _typing_only(_: TouchJournalOptions, _: TouchHitJs, _: WaitForAnyArgs) {}
