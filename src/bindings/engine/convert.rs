//! Conversions for `TouchEngine`: its options and arguments read from JS, and the core's
//! replies and views as the objects of [`super::types`].

use std::fmt::Display;
use std::ops::RangeInclusive;

use napi::bindgen_prelude::*;

use super::types::runtime_fields;
use super::types::{
    ActivateResult, ActivatedTemplate, CollectorStats, DeniedTemplate, EngineMemoryStats, EngineStats,
    KeptJournalStats, LifecycleStats, StaleError, StreamRuntimeStats, TemplateLimitsJs, TickFailure, TickResult,
    TopStreamEntry, TouchMeta, TouchRuntime, WaitResult,
};
use crate::bindings::napi::abort;
use crate::bindings::napi::helpers::{self, Helper};
use crate::bindings::napi::value::{to_js, RawValue};
use crate::bindings::napi::{Js, Out};
use crate::engine::options::{bounds, out_of_bounds};
use crate::engine::policy::TouchMode;
use crate::engine::process::TickReport;
use crate::engine::templates::{ActivateOutcome, TemplateLimits};
use crate::engine::wait::{WaitKind, WaitReply, MAX_WAIT_LIST, STALE_MESSAGE};
use crate::engine::{EngineOptions, EngineStatsView, MemoryView, RuntimeView, TopStream, TouchMetaView};
use crate::error::Error;
use crate::fanout::{FanoutOptions, Role};
use crate::jscompat::json::Value;

fn opt_num(o: &Js, key: &str) -> crate::Result<Option<f64>> {
    o.opt(key)?.map(|v| v.number(&format!("options.{key}"))).transpose()
}

/// `Number.MAX_SAFE_INTEGER`: the largest whole number a JS number holds exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// `options.<key>` as a whole number of the option's type; a number that is not one is
/// refused as the core refuses the option `name` outside `bounds` (which the core checks).
fn opt_int<T: TryFrom<u64> + Display>(
    o: &Js,
    key: &str,
    name: &str,
    bounds: &RangeInclusive<T>,
) -> crate::Result<Option<T>> {
    let whole = |v: f64| v.is_finite() && v.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&v);
    opt_num(o, key)?
        .map(|v| whole(v).then(|| T::try_from(v as u64).ok()).flatten().ok_or_else(|| out_of_bounds(name, bounds)))
        .transpose()
}

/// `new TouchEngine(store, options)`'s options as the core's, checked by the core
/// ([`EngineOptions::validate`]); what is not given keeps its default.
pub(super) fn parse_options(options: Option<Js>) -> crate::Result<EngineOptions> {
    let mut o = EngineOptions::default();
    let Some(opts) = options.filter(|v| !v.is_nullish()) else { return Ok(o) };
    let opts = opts.object("options")?;
    if let Some(v) = opt_int(&opts, "workers", "workers", &bounds::WORKERS)? {
        o.workers = v;
    }
    if let Some(v) = opt_int(&opts, "checkIntervalMs", "checkIntervalMs", &bounds::CHECK_INTERVAL_MS)? {
        o.check_interval_ms = v;
    }
    if let Some(v) = opt_int(&opts, "maxBatchRows", "maxBatchRows", &bounds::MAX_BATCH_ROWS)? {
        o.max_batch_rows = v;
    }
    if let Some(v) = opt_int(&opts, "maxBatchBytes", "maxBatchBytes", &bounds::MAX_BATCH_BYTES)? {
        o.max_batch_bytes = v;
    }
    if let Some(v) = opts.opt("autoProcess")? {
        o.auto_process = v.boolean("options.autoProcess")?;
    }
    if let Some(v) = opt_int(&opts, "profilePollMs", "profilePollMs", &bounds::PROFILE_POLL_MS)? {
        o.profile_poll_ms = v;
    }
    if let Some(v) = opts.opt("records")? {
        o.records = v.boolean("options.records")?;
    }
    if let Some(v) = opts.opt("keepCursors")? {
        o.keep_cursors = v.boolean("options.keepCursors")?;
    }
    if let Some(f) = opts.opt("fanout")?.filter(|v| !v.is_nullish()) {
        o.fanout = Some(parse_fanout(f.object("options.fanout")?)?);
    }
    o.validate()?;
    Ok(o)
}

/// `options.fanout` as the core's [`FanoutOptions`] (checked with the engine's options).
fn parse_fanout(f: Js) -> crate::Result<FanoutOptions> {
    let mut fo = FanoutOptions {
        role: match f.opt("role")?.map(|v| v.string("options.fanout.role")).transpose()?.as_deref() {
            Some("writer") => Role::Writer,
            Some("edge") => Role::Edge,
            _ => return Err(Error::invalid("options.fanout.role must be 'writer' or 'edge'")),
        },
        ..Default::default()
    };
    fo.url =
        f.opt("url")?.ok_or_else(|| Error::invalid("options.fanout.url is required"))?.string("options.fanout.url")?;
    if let Some(v) = f.opt("prefix")?.filter(|v| !v.is_nullish()) {
        fo.prefix = v.string("options.fanout.prefix")?;
    }
    // Whole numbers here; their bounds are the options' own (`FanoutOptions::validate`).
    const WHOLE: RangeInclusive<u64> = 0..=MAX_SAFE_INTEGER as u64;
    if let Some(v) = opt_int(&f, "maxAgeMs", "fanout.maxAgeMs", &WHOLE)? {
        fo.max_age_ms = v;
    }
    if let Some(v) = opt_int(&f, "maxBytes", "fanout.maxBytes", &WHOLE)? {
        fo.max_bytes = v as i64;
    }
    if let Some(v) = opt_int(&f, "beatMs", "fanout.beatMs", &WHOLE)? {
        fo.beat_ms = v;
    }
    if let Some(v) = opt_int(&f, "batchMs", "fanout.batchMs", &WHOLE)? {
        fo.batch_ms = v;
    }
    if let Some(v) = f.opt("writerUrl")?.filter(|v| !v.is_nullish()) {
        fo.writer_url = v.string("options.fanout.writerUrl")?;
    }
    Ok(fo)
}

pub(super) fn value_of(v: Option<Js>, what: &str) -> crate::Result<Value> {
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
pub(super) fn wait_reply_js(env: &Env, r: WaitReply) -> crate::Result<RawValue> {
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
        error: r.stale.then(|| StaleError { code: "stale".into(), message: STALE_MESSAGE.into() }),
    }
}

/// Fills the object `$name` declared by `runtime_object`: its `$head` and `$tail` fields as
/// given, the runtime fields read from `$view` (a `&RuntimeView`) as `runtime_fields` says.
macro_rules! runtime_object_js {
    (
        $name:ident, $view:expr, { $($head:tt)* } { $($tail:tt)* };
        |$r:ident, $t:ident, $w:ident| { $($field:ident: $ty:ident = $value:expr,)* }
    ) => {{
        let $r: &RuntimeView = $view;
        let $t = &$r.totals;
        let $w = &$r.journal.wake;
        $name { $($head)* $($field: $value,)* $($tail)* }
    }};
}

pub(super) fn meta_js(v: TouchMetaView) -> TouchMeta {
    let m = &v.journal;
    let totals = &v.runtime.totals;
    runtime_fields! { runtime_object_js! {
        TouchMeta, &v.runtime, {
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
            wal_scanned_through: v
                .processed_through
                .map(|p| crate::store::encode_offset(v.stream_epoch as u32, p)),
        } {
            compensation_touches_total: totals.compensation_touches,
            batches_split_for_budget_total: totals.batches_split_for_budget,
            journal_kept: v.kept.kept,
            epoch_started_at_ms: v.kept.epoch_started_ms as f64,
            replayed_flushes: v.kept.replayed_flushes as f64,
            floor_generation: v.kept.floor_generation as f64,
        }
    } }
}

pub(super) fn runtime_js(mode: TouchMode, lag: i64, r: &RuntimeView) -> TouchRuntime {
    runtime_fields! { runtime_object_js! {
        TouchRuntime, r, {
            lag_source_offsets: lag as f64,
            touch_mode: mode.as_str().into(),
        } {}
    } }
}

pub(super) fn tick_js(r: TickReport) -> TickResult {
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
pub(super) fn capped<'env>(v: Js<'env>, what: &str) -> crate::Result<Js<'env>> {
    if let Some(n) = v.try_array_len() {
        if n as usize > MAX_WAIT_LIST {
            return Err(Error::invalid(format!("{what} too large (max {MAX_WAIT_LIST})")));
        }
    }
    Ok(v)
}

/// A list of at most `MAX_WAIT_LIST` strings, its length checked before any is read.
pub(super) fn capped_strings(v: Js, what: &str) -> crate::Result<Vec<String>> {
    capped(v, what)?.items(what)?.enumerate().map(|(i, s)| s?.string(&format!("{what}[{i}]"))).collect()
}

pub(super) fn stats_js(s: EngineStatsView) -> EngineStats {
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

pub(super) fn memory_js(m: &MemoryView) -> EngineMemoryStats {
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

pub(super) fn top_js(top: Vec<TopStream>) -> Vec<TopStreamEntry> {
    top.into_iter()
        .map(|t| TopStreamEntry {
            stream: t.stream,
            journal_filter_bytes: t.journal_filter_bytes as f64,
            dirty: t.dirty,
            touch_mode: t.touch_mode.map(|m| m.as_str().to_string()),
        })
        .collect()
}

pub(super) fn activate_js(out: ActivateOutcome, limits: TemplateLimits) -> ActivateResult {
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

pub(super) fn arg<'env>(env: &'env Env, v: &Option<Unknown>) -> Option<Js<'env>> {
    v.as_ref().map(|u| Js::new(env, u.raw()))
}

/// `request.stream` and `request.signal` of a wait: the stream name, and the signal unless it
/// is absent (a signal already aborted refuses the wait before anything else is read).
pub(super) fn wait_stream_and_signal<'env>(
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
