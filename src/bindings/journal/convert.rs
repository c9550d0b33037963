//! Conversions for `TouchJournal` and `EngineJournal`: their options and arguments read from
//! JS (key ids, routing keys, `waitForAny`'s argument), and the core's hits, meta and stats as
//! JS values and the objects of [`super::types`] (hits through a per-flush cache of frozen
//! objects).

use napi::bindgen_prelude::*;
use napi::sys;

use super::types::{TouchJournalIntervalStats, TouchJournalMeta, TouchJournalTotalStats};
use crate::bindings::napi::handle::Ref;
use crate::bindings::napi::helpers::{self, Helper};
use crate::bindings::napi::{Cleanup, Js, Out, RawValue};
use crate::error::Error;
use crate::journal::{
    parse_routing_key, Journal, JournalMeta, JournalOptions, KeyIds, TouchHit, WaitRequest, WakeStats, Waker,
    MAX_WAIT_KEYS,
};

pub(crate) type JsResult<T> = std::result::Result<T, Error>;

fn opt_number(o: &Js, key: &str) -> JsResult<Option<f64>> {
    match o.opt(key)? {
        None => Ok(None),
        Some(v) => {
            let n = v.number(&format!("options.{key}"))?;
            if !n.is_finite() {
                return Err(Error::invalid(format!("options.{key} must be a finite number")));
            }
            Ok(Some(n))
        }
    }
}

pub(super) fn parse_options(options: Option<Js>) -> JsResult<JournalOptions> {
    let mut o = JournalOptions::default();
    let Some(opts) = options.filter(|v| !v.is_nullish()) else { return Ok(o) };
    let opts = opts.object("options")?;
    if let Some(n) = opt_number(&opts, "bucketMs")? {
        o.bucket_ms = n;
    }
    if let Some(n) = opt_number(&opts, "filterPow2")? {
        o.filter_pow2 = n;
    }
    if let Some(n) = opt_number(&opts, "k")? {
        o.k = n;
    }
    if let Some(n) = opt_number(&opts, "pendingMaxKeys")? {
        o.pending_max_keys = n;
    }
    if let Some(n) = opt_number(&opts, "keyIndexMaxKeys")? {
        o.key_index_max_keys = n;
    }
    if let Some(v) = opts.opt("initialGeneration")? {
        o.initial_generation = u32_value(&v, "options.initialGeneration")?;
    }
    Ok(o)
}

/// A number that is an integer in [0, 2^32).
pub(crate) fn u32_of(n: f64, what: &str) -> JsResult<u32> {
    if n.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&n) {
        Ok(n as u32)
    } else {
        Err(Error::invalid(format!("{what} must be an integer in [0, 4294967295]")))
    }
}

pub(crate) fn u32_value(v: &Js, what: &str) -> JsResult<u32> {
    u32_or(v, || what.to_string())
}

/// A u32 number; `what` names it in the error, and is only built then.
fn u32_or(v: &Js, what: impl FnOnce() -> String) -> JsResult<u32> {
    let n = v.try_number();
    if let Some(n) = n.filter(|n| n.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(n)) {
        return Ok(n as u32);
    }
    let what = what();
    match n {
        None => Err(Error::invalid(format!("{what} must be a number"))),
        Some(n) => u32_of(n, &what),
    }
}

/// The most elements a list reader reserves room for before reading them: a list with no cap
/// (`touchMany`'s key ids, say) may be a sparse array of 2^31 holes, refused at its first.
const RESERVE_MAX: usize = 65_536;

/// How many key ids `v` holds (a `Uint32Array` or an array), without reading any.
fn key_count(v: &Js, what: &str) -> JsResult<usize> {
    if let Some(s) = v.u32_slice() {
        return Ok(s.len());
    }
    let n = v.try_array_len().ok_or_else(|| Error::invalid(format!("{what} must be an array")))?;
    Ok(n as usize)
}

/// Key ids from a `Uint32Array` or an array of numbers, read in order up to the first one
/// refused.
pub(crate) fn key_ids(v: &Js, what: &str) -> JsResult<Vec<u32>> {
    if let Some(s) = v.u32_slice() {
        return Ok(s.to_vec());
    }
    let n = v.try_array_len().ok_or_else(|| Error::invalid(format!("{what} must be an array")))?;
    let mut out = Vec::with_capacity((n as usize).min(RESERVE_MAX));
    for i in 0..n {
        out.push(u32_or(&v.element(i)?, || format!("{what}[{i}]"))?);
    }
    Ok(out)
}

/// Routing keys from an array of strings: 16-hex ones parsed, others dropped (J10, J11). Read
/// in order up to the first element refused.
pub(super) fn routing_keys(v: &Js, what: &str) -> JsResult<Vec<u64>> {
    let n = v.array_len(what)?;
    let mut out = Vec::with_capacity((n as usize).min(RESERVE_MAX));
    for i in 0..n {
        let item = v.element(i)?;
        if item.type_of() != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what}[{i}] must be a string")));
        }
        if let Some(k) = item.with_str(what, parse_routing_key)? {
            out.push(k);
        }
    }
    Ok(out)
}

pub(super) fn opt_routing_key(v: Option<Js>, what: &str) -> JsResult<Option<u64>> {
    match v.filter(|v| !v.is_nullish()) {
        None => Ok(None),
        Some(v) => v.with_str(what, parse_routing_key),
    }
}

pub(super) fn opt_offset(v: Option<Js>, what: &str) -> JsResult<Option<i64>> {
    match v.filter(|v| !v.is_nullish()) {
        None => Ok(None),
        Some(v) => v.bigint(what).map(Some),
    }
}

pub(crate) fn arg<'env>(env: &'env Env, v: &Option<Unknown>) -> Option<Js<'env>> {
    v.as_ref().map(|u| Js::new(env, u.raw()))
}

/// Hit objects of the latest flush delivered on this JS thread, by hit.
///
/// Hits are frozen, and every waiter one flush wakes through the same key shares one object: a
/// flush waking 10,000 waiters builds about as many objects as it touched keys. Waiters are
/// delivered in registration order (not grouped by key), hence a map. It holds one flush at a
/// time: a hit of another flush (or another env) empties it first, so it never outgrows the
/// keys of one bucket, and at most [`HIT_CACHE_MAX`] of those.
struct HitCache {
    /// The environment the references belong to.
    env: sys::napi_env,
    /// The flush the cached hits belong to (its hit with key id 0).
    flush: Option<TouchHit>,
    refs: rustc_hash::FxHashMap<TouchHit, Ref>,
}

const HIT_CACHE_MAX: usize = 65_536;

impl HitCache {
    /// Forgets every cached hit and starts over for `env`: the references of `env` are
    /// deleted; those of an environment that ended were deleted by its teardown hook.
    fn reset(&mut self, env: &Env, flush: TouchHit) {
        // Before the cache holds a reference of `env`.
        FORGET_HITS.register();
        for (_, r) in self.refs.drain() {
            if r.is_of(env) {
                // A live reference of this environment: deleting cannot fail.
                let _deleted = r.delete(env);
            }
        }
        self.env = env.raw();
        self.flush = Some(flush);
    }
}

/// [`forget_hits`], run by every environment's teardown once a hit was cached.
static FORGET_HITS: Cleanup = Cleanup::new(forget_hits);

/// Deletes this thread's cached hits if they belong to `env` (its teardown, see
/// [`crate::bindings::napi::on_teardown`]).
fn forget_hits(env: &Env) {
    HITS.with(|cache| {
        let mut c = cache.borrow_mut();
        if c.env == env.raw() {
            for (_, r) in c.refs.drain() {
                // A live reference of this environment: deleting cannot fail.
                let _deleted = r.delete(env);
            }
            c.env = std::ptr::null_mut();
            c.flush = None;
        }
    });
}

thread_local! {
    static HITS: std::cell::RefCell<HitCache> = std::cell::RefCell::new(HitCache {
        env: std::ptr::null_mut(),
        flush: None,
        refs: rustc_hash::FxHashMap::default(),
    });
}

/// `{ generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs }` or null.
pub(super) fn hit_js(env: &Env, hit: Option<TouchHit>) -> JsResult<RawValue> {
    let Some(h) = hit else {
        return Out::new(env).null().map_err(crate::bindings::napi::from_napi);
    };
    let flush = TouchHit { key_id: 0, ..h };
    HITS.with(|cache| {
        let mut c = cache.borrow_mut();
        if c.env != env.raw() || c.flush != Some(flush) || c.refs.len() >= HIT_CACHE_MAX {
            c.reset(env, flush);
        }
        if let Some(v) = c.refs.get(&h).and_then(|r| r.value(env)) {
            return Ok(v.raw());
        }
        let v = new_hit(env, &h)?;
        if let Some(old) = c.refs.insert(h, Ref::new(v, 1)?) {
            // Replaced (its value was gone): a live reference of this environment.
            let _deleted = old.delete(env);
        }
        Ok(v.raw())
    })
}

/// A new frozen hit object, built by `makeHit` (`lib/internal/helpers.js`): one call instead of
/// an object, five interned property names and a freeze through N-API.
fn new_hit<'env>(env: &'env Env, h: &TouchHit) -> JsResult<Js<'env>> {
    let out = Out::new(env);
    let values = (|| {
        Ok::<_, napi::Error>([
            out.u32(h.generation)?,
            out.u32(h.key_id)?,
            out.bigint(h.bucket_max_source_offset_seq)?,
            out.num(h.flush_at_ms as f64)?,
            out.num(h.bucket_start_ms as f64)?,
        ])
    })()
    .map_err(crate::bindings::napi::from_napi)?;
    helpers::call(env, Helper::MakeHit, &values)
}

fn wake_stats(w: &WakeStats) -> [f64; 8] {
    [
        w.timeouts_fired as f64,
        w.timeout_sweeps as f64,
        w.timeout_sweep_ms_sum,
        w.timeout_sweep_ms_max,
        w.notify_wakeups as f64,
        w.notify_flushes as f64,
        w.notify_wake_ms_sum,
        w.notify_wake_ms_max,
    ]
}

pub(crate) fn total_stats_js<W: Waker>(journal: &Journal<W>) -> TouchJournalTotalStats {
    let t = journal.total_stats();
    let w = wake_stats(&t.wake);
    TouchJournalTotalStats {
        timeouts_fired: w[0],
        timeout_sweeps: w[1],
        timeout_sweep_ms_sum: w[2],
        timeout_sweep_ms_max: w[3],
        notify_wakeups: w[4],
        notify_flushes: w[5],
        notify_wake_ms_sum: w[6],
        notify_wake_ms_max: w[7],
        flushes: t.flushes as f64,
    }
}

pub(crate) fn interval_stats_js<W: Waker>(journal: &Journal<W>) -> TouchJournalIntervalStats {
    let i = journal.take_interval_stats();
    let w = wake_stats(&i.wake);
    TouchJournalIntervalStats {
        timeouts_fired: w[0],
        timeout_sweeps: w[1],
        timeout_sweep_ms_sum: w[2],
        timeout_sweep_ms_max: w[3],
        notify_wakeups: w[4],
        notify_flushes: w[5],
        notify_wake_ms_sum: w[6],
        notify_wake_ms_max: w[7],
        heap_size: i.heap_size as f64,
    }
}

pub(crate) fn meta_js(m: JournalMeta) -> TouchJournalMeta {
    TouchJournalMeta {
        mode: "memory".into(),
        cursor: m.cursor,
        epoch: m.epoch,
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
    }
}

/// `waitForAny`'s argument object, read field by field.
pub(crate) fn parse_wait<'env>(args: &Js<'env>) -> JsResult<(WaitRequest, Option<Js<'env>>)> {
    check_wait_args(args)?;
    let fields = [c"keys", c"exactKeys", c"afterGeneration", c"timeoutMs", c"signal"];
    let mut values = [None; 5];
    for (v, name) in values.iter_mut().zip(fields) {
        // Named lookups intern the name directly: cheaper than making a string value first.
        *v = args.get_named(name)?;
    }
    parse_wait_fields(values)
}

pub(crate) fn check_wait_args(args: &Js) -> JsResult<()> {
    if args.type_of() != sys::ValueType::napi_object || args.is_array() {
        return Err(Error::invalid("args must be an object"));
    }
    Ok(())
}

/// The fields of `waitForAny`'s argument, each `None` when absent, undefined or null:
/// `[keys, exactKeys, afterGeneration, timeoutMs, signal]`.
pub(crate) fn parse_wait_fields<'env>(
    [keys, exact, after, timeout, signal]: [Option<Js<'env>>; 5],
) -> JsResult<(WaitRequest, Option<Js<'env>>)> {
    // Sizes before elements: more keys than a wait takes are refused by the lists' lengths,
    // before any key is read (a huge or sparse array costs nothing to make).
    let key_count = keys.as_ref().map(|v| key_count(v, "keys")).transpose()?.unwrap_or(0);
    let exact_count = exact.as_ref().map(|v| v.array_len("exactKeys")).transpose()?.unwrap_or(0);
    WaitRequest::check_counts(key_count, exact_count as usize, MAX_WAIT_KEYS)?;
    let keys = match keys {
        Some(v) => key_ids(&v, "keys")?.into(),
        None => KeyIds::new(),
    };
    let exact_keys = match exact {
        Some(v) => routing_keys(&v, "exactKeys")?,
        None => Vec::new(),
    };
    let after_generation = match after {
        Some(v) => Some(u32_value(&v, "afterGeneration")?),
        None => None,
    };
    let timeout = timeout.ok_or_else(|| Error::invalid("timeoutMs is required"))?;
    let ms = timeout.try_number().ok_or_else(|| Error::invalid("timeoutMs must be a number"))?;
    Ok((wait_request(keys, exact_keys, after_generation, ms)?, signal))
}

/// The request from checked fields and the timeout as the number given (both paths of
/// `waitForAny` end here, so they refuse the same values with the same errors).
pub(crate) fn wait_request(
    keys: KeyIds,
    exact_keys: Vec<u64>,
    after_generation: Option<u32>,
    timeout_ms: f64,
) -> JsResult<WaitRequest> {
    let timeout_ms = WaitRequest::timeout_from_number(timeout_ms)?;
    let req = WaitRequest { keys, exact_keys, after_generation, timeout_ms };
    req.validate()?;
    Ok(req)
}
