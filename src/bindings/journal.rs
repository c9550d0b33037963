//! `TouchJournal`: the JS class over [`crate::journal::Journal`], plus `parseTouchCursor` and
//! `formatTouchCursor`. Conversion only: argument checks, JS values, promises and the
//! AbortSignal hook (from [`super::napi::abort`]). The native halves of the JavaScript
//! `waitForAny` and `touch` are in [`super::journal_fast`].

use std::cell::Cell;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use super::napi::abort::{self, AbortHook};
use super::napi::handle::Ref;
use super::napi::helpers::{self, Helper};
use super::napi::{throw, unknown, Cleanup, Js, Out, Port, RawValue, Ticket};
use crate::error::Error;
use crate::journal::bloom::slot_positions;
use crate::journal::{
    parse_cursor, parse_routing_key, Journal, JournalMeta, JournalOptions, KeyIds, Touch, TouchHit, WaitRequest,
    WaiterId, WakeStats, Waker, WeakJournal, MAX_WAIT_KEYS,
};

/// The journal as the binding uses it: each waiter is resolved through its promise ticket.
pub(crate) type JsJournal = Journal<JsWaiter>;
type JsWeakJournal = WeakJournal<JsWaiter>;

/// A parked `waitForAny`: its promise, and the abort listener to remove once it settles.
/// Stored inline in the journal's waiter slot; a wait with a signal (the rare one) is boxed, so
/// a plain one takes 16 bytes.
pub(crate) enum JsWaiter {
    Plain(Ticket),
    Abortable(Box<(Ticket, AbortHook)>),
}

const _: () = assert!(std::mem::size_of::<JsWaiter>() == 16);

impl Waker for JsWaiter {
    #[inline]
    fn prefetch(&self) {
        match self {
            JsWaiter::Plain(t) => t.prefetch(),
            JsWaiter::Abortable(b) => b.0.prefetch(),
        }
    }

    fn wake(self, hit: Option<TouchHit>) {
        let (ticket, abort) = match self {
            JsWaiter::Plain(t) => (t, None),
            JsWaiter::Abortable(b) => {
                let (t, hook) = *b;
                (t, Some(hook))
            }
        };
        let outcome = move |env: &Env| {
            if let Some(hook) = abort {
                hook.release(env);
            }
            hit_js(env, hit)
        };
        // Woken by a call from JS (flush, stop, abort): resolve now, as the reference does
        // inside the same call (no allocation per waiter). Woken on the timer thread: through
        // the port.
        match JS_CALL.with(Cell::get) {
            Some(env) => ticket.settle_now(&Env::from_raw(env), outcome),
            None => ticket.settle(Box::new(outcome)),
        }
    }
}

thread_local! {
    /// Set while a call from JavaScript into a journal may wake waiters on this thread.
    static JS_CALL: Cell<Option<sys::napi_env>> = const { Cell::new(None) };
}

/// Marks the current thread as inside a JS call for the lifetime of the guard.
pub(crate) struct InJsCall(Option<sys::napi_env>);

impl InJsCall {
    pub(crate) fn enter(env: &Env) -> InJsCall {
        InJsCall(JS_CALL.with(|c| c.replace(Some(env.raw()))))
    }
}

impl Drop for InJsCall {
    fn drop(&mut self) {
        JS_CALL.with(|c| c.set(self.0));
    }
}

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

fn parse_options(options: Option<Js>) -> JsResult<JournalOptions> {
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
fn routing_keys(v: &Js, what: &str) -> JsResult<Vec<u64>> {
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

fn opt_routing_key(v: Option<Js>, what: &str) -> JsResult<Option<u64>> {
    match v.filter(|v| !v.is_nullish()) {
        None => Ok(None),
        Some(v) => v.with_str(what, parse_routing_key),
    }
}

fn opt_offset(v: Option<Js>, what: &str) -> JsResult<Option<i64>> {
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
/// [`super::napi::on_teardown`]).
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
fn hit_js(env: &Env, hit: Option<TouchHit>) -> JsResult<RawValue> {
    let Some(h) = hit else {
        return Out::new(env).null().map_err(super::napi::from_napi);
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
    .map_err(super::napi::from_napi)?;
    helpers::call(env, Helper::MakeHit, &values)
}

/// A parked wait of either journal class: its promise, and its abort hook if it has a signal.
pub(crate) fn js_waiter(ticket: Ticket, hook: Option<AbortHook>) -> JsWaiter {
    match hook {
        None => JsWaiter::Plain(ticket),
        Some(h) => JsWaiter::Abortable(Box::new((ticket, h))),
    }
}

/// `waitForAny` of either journal class once its argument is read: `waiter` makes the
/// journal's waker from the promise's ticket and the abort hook.
pub(crate) fn wait_parsed<'env, W: Waker>(
    env: &'env Env,
    journal: &Journal<W>,
    port: &Port,
    parsed: JsResult<(WaitRequest, Option<Js>)>,
    waiter: impl FnOnce(Ticket, Option<AbortHook>) -> W,
) -> napi::Result<Unknown<'env>> {
    let wrap = |v: RawValue| Ok(unknown(env, v));
    let (req, signal) = match parsed {
        Ok(v) => v,
        Err(e) => return wrap(Port::rejected(env, &e)?),
    };
    // The waiter owns its abort hook; the listener learns the waiter id once registered
    // (no JS runs in between, so the signal cannot fire before). Without a signal nothing
    // is allocated for it.
    let mut waiter_id: Option<Rc<Cell<Option<WaiterId>>>> = None;
    let hook = match &signal {
        None => None,
        Some(sig) => match abort::is_aborted(sig) {
            Err(e) => return wrap(Port::rejected(env, &e)?),
            Ok(true) => return wrap(Port::resolved(env, Out::new(env).null()?)?),
            Ok(false) => {
                let id = waiter_id.insert(Rc::default()).clone();
                let journal = journal.downgrade();
                let on_abort: abort::OnAbort = Box::new(move |env: &Env| {
                    if let (Some(id), Some(journal)) = (id.take(), journal.upgrade()) {
                        let _js = InJsCall::enter(env);
                        journal.cancel(id);
                    }
                });
                match abort::listen(env, sig, on_abort) {
                    Ok(h) => Some(h),
                    Err(e) => return wrap(Port::rejected(env, &e)?),
                }
            }
        },
    };
    let (ticket, promise) = match port.promise(env) {
        Ok(p) => p,
        Err(e) => {
            if let Some(h) = hook {
                h.release(env);
            }
            return Err(e);
        }
    };
    let waiter = waiter(ticket, hook);
    let _js = InJsCall::enter(env); // an immediate null resolves now
    match journal.wait_for_any(req, waiter) {
        Ok(Some(id)) => {
            if let Some(cell) = waiter_id {
                cell.set(Some(id));
            }
        }
        Ok(None) => {}
        // Validated above; unreachable in practice.
        Err(e) => return Err(throw(env, e)),
    }
    wrap(promise)
}

pub(crate) fn touch_args<W: Waker>(
    env: &Env,
    journal: &Journal<W>,
    key_id: Unknown,
    source_offset_seq: Option<Unknown>,
    routing_key: Option<Unknown>,
) -> napi::Result<()> {
    let parsed = (|| {
        let key = u32_value(&Js::new(env, key_id.raw()), "keyId")?;
        let seq = opt_offset(arg(env, &source_offset_seq), "sourceOffsetSeq")?;
        let rk = opt_routing_key(arg(env, &routing_key), "routingKey")?;
        Ok((key, seq, rk))
    })();
    let (key, seq, rk) = parsed.map_err(|e| throw(env, e))?;
    journal.touch(key, seq, rk);
    Ok(())
}

// ---- the class

/// An in-memory touch journal (the reference's `TouchJournal`): touches flush in buckets as
/// generations, a time-aware bloom answers "touched since?", and waits are promises.
#[napi]
pub struct TouchJournal {
    pub(crate) journal: JsJournal,
    pub(crate) port: Port,
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

/// J7's `setCoalesceMs(ms)` of either journal class.
pub(crate) fn set_coalesce_args<W: Waker>(env: &Env, journal: &Journal<W>, ms: Unknown) -> napi::Result<()> {
    let ms = Js::new(env, ms.raw()).number("ms").and_then(|n| {
        if n.is_nan() {
            Err(Error::invalid("ms must be a number"))
        } else {
            Ok(n)
        }
    });
    journal.set_coalesce_ms(ms.map_err(|e| throw(env, e))?);
    Ok(())
}

/// J5's `maybeTouchedSince(keyId, sinceGeneration)` of either journal class.
pub(crate) fn maybe_touched_since_args<W: Waker>(
    env: &Env,
    journal: &Journal<W>,
    key_id: Unknown,
    since: Unknown,
) -> napi::Result<bool> {
    let parsed = (|| {
        Ok((
            u32_value(&Js::new(env, key_id.raw()), "keyId")?,
            u32_value(&Js::new(env, since.raw()), "sinceGeneration")?,
        ))
    })();
    let (key, since) = parsed.map_err(|e| throw(env, e))?;
    Ok(journal.maybe_touched_since(key, since))
}

/// J5's `maybeTouchedSinceAny(keyIds, sinceGeneration)` of either journal class.
pub(crate) fn maybe_touched_since_any_args<W: Waker>(
    env: &Env,
    journal: &Journal<W>,
    key_ids_arg: Unknown,
    since: Unknown,
) -> napi::Result<bool> {
    let parsed = (|| {
        let keys = key_ids(&Js::new(env, key_ids_arg.raw()), "keyIds")?;
        Ok((keys, u32_value(&Js::new(env, since.raw()), "sinceGeneration")?))
    })();
    let (keys, since) = parsed.map_err(|e| throw(env, e))?;
    Ok(journal.maybe_touched_since_any(&keys, since))
}

/// J10's `exactTouchedSinceAny(routingKeys, sinceGeneration)` of either journal class.
pub(crate) fn exact_touched_since_any_args<W: Waker>(
    env: &Env,
    journal: &Journal<W>,
    keys: Unknown,
    since: Unknown,
) -> napi::Result<Option<bool>> {
    let parsed = (|| {
        let keys = routing_keys(&Js::new(env, keys.raw()), "routingKeys")?;
        Ok((keys, u32_value(&Js::new(env, since.raw()), "sinceGeneration")?))
    })();
    let (keys, since) = parsed.map_err(|e| throw(env, e))?;
    Ok(journal.exact_touched_since_any(&keys, since))
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

/// The read-only members `TouchJournal` and `EngineJournal` share, as one `#[napi] impl`
/// block of `$class` (which holds its journal as `journal`). Each class invokes it between its
/// own blocks, where these members stand in its index.d.ts. Docs are written `#[doc = " …"]`:
/// a `///` comment in a `macro_rules!` reaches napi-derive as a raw string, whose `r"` it would
/// copy into index.d.ts.
macro_rules! journal_getters {
    ($class:ident) => {
        #[napi]
        impl $class {
            #[napi]
            pub fn get_cursor(&self) -> String {
                self.journal.cursor()
            }

            #[napi]
            pub fn get_epoch(&self) -> String {
                self.journal.epoch().to_string()
            }

            #[napi]
            pub fn get_generation(&self) -> u32 {
                self.journal.generation()
            }

            #[doc = " The largest source offset flushed so far (-1n before any)."]
            #[napi]
            pub fn get_last_flushed_source_offset_seq(&self) -> i64n {
                i64n(self.journal.read(|s| s.last_flushed_source_offset()))
            }

            #[napi]
            pub fn get_last_flush_at_ms(&self) -> f64 {
                self.journal.read(|s| s.last_flush_at_ms()) as f64
            }

            #[napi]
            pub fn get_last_bucket_start_ms(&self) -> f64 {
                self.journal.read(|s| s.last_bucket_start_ms()) as f64
            }

            #[napi]
            pub fn get_active_waiters(&self) -> f64 {
                self.journal.active_waiters() as f64
            }

            #[napi]
            pub fn get_meta(&self) -> $crate::bindings::journal::TouchJournalMeta {
                $crate::bindings::journal::meta_js(self.journal.meta())
            }

            #[napi]
            pub fn get_total_stats(&self) -> $crate::bindings::journal::TouchJournalTotalStats {
                $crate::bindings::journal::total_stats_js(&self.journal)
            }

            #[napi]
            pub fn snapshot_and_reset_interval_stats(&self) -> $crate::bindings::journal::TouchJournalIntervalStats {
                $crate::bindings::journal::interval_stats_js(&self.journal)
            }

            #[doc = " Bytes of bloom memory held: 0 until the first touch, then 4 × filterSize (B14)."]
            #[napi]
            pub fn get_filter_bytes(&self) -> f64 {
                self.journal.filter_bytes() as f64
            }
        }
    };
}
pub(crate) use journal_getters;

#[napi]
impl TouchJournal {
    #[napi(constructor, ts_args_type = "options?: TouchJournalOptions | undefined | null")]
    pub fn new(env: &Env, options: Option<Unknown>) -> napi::Result<Self> {
        let opts = parse_options(arg(env, &options)).map_err(|e| throw(env, e))?;
        let port = Port::new(env)?;
        // Timer-driven flushes run on the JS thread, between JS tasks, as the reference's do:
        // JS code that checks and then waits in two calls sees no flush in between (W6).
        let jobs = port.clone();
        let handoff = Box::new(move |journal: JsWeakJournal| {
            jobs.post_job(Box::new(move |env: &Env| {
                if let Some(j) = journal.upgrade() {
                    let _js = InJsCall::enter(env);
                    j.run_due_flush();
                }
            }))
        });
        Ok(TouchJournal { journal: Journal::with_flush_handoff(opts, handoff), port })
    }

    /// Adds a touch to the pending bucket (J6). `routingKey`, when 16 hex, also feeds the exact
    /// history.
    #[napi(ts_args_type = "keyId: number, sourceOffsetSeq?: bigint | null, routingKey?: string | null")]
    pub fn touch(
        &self,
        env: &Env,
        key_id: Unknown,
        source_offset_seq: Option<Unknown>,
        routing_key: Option<Unknown>,
    ) -> napi::Result<()> {
        touch_args(env, &self.journal, key_id, source_offset_seq, routing_key)
    }

    /// Many touches in one call: `keyIds[i]` with `sourceOffsetSeqs[i]` and `routingKeys[i]`
    /// (a `BigUint64Array` holds routing keys as the numbers their 16 hex digits spell).
    /// `hasRoutingKey` (a `Uint8Array`, only with a `BigUint64Array`) says which touches have a
    /// routing key: where it is 0, `routingKeys[i]` is ignored. A packed batch result feeds it
    /// as `touchMany(p.keyIds, p.watermarks, p.routingKeys, p.hasRoutingKey)`.
    #[napi(
        ts_args_type = "keyIds: Uint32Array | number[], sourceOffsetSeqs?: BigInt64Array | bigint[] | null, routingKeys?: BigUint64Array | Array<string | null> | null, hasRoutingKey?: Uint8Array | null"
    )]
    pub fn touch_many(
        &self,
        env: &Env,
        key_ids_arg: Unknown,
        source_offset_seqs: Option<Unknown>,
        routing_keys_arg: Option<Unknown>,
        has_routing_key_arg: Option<Unknown>,
    ) -> napi::Result<()> {
        let r = (|| {
            let keys_js = Js::new(env, key_ids_arg.raw());
            let owned_keys;
            let keys: &[u32] = match keys_js.u32_slice() {
                Some(s) => s,
                None => {
                    owned_keys = key_ids(&keys_js, "keyIds")?;
                    &owned_keys
                }
            };
            let n = keys.len();
            // The other lists must have keyIds' length: checked before their elements are read.
            let same_length = || Error::invalid("keyIds, sourceOffsetSeqs and routingKeys must have the same length");
            let check_length = |v: &Js, what: &str| -> JsResult<()> {
                if v.array_len(what)? as usize == n {
                    Ok(())
                } else {
                    Err(same_length())
                }
            };
            let seqs_js = arg(env, &source_offset_seqs).filter(|v| !v.is_nullish());
            let owned_seqs;
            let seqs: Option<&[i64]> = match &seqs_js {
                None => None,
                Some(v) => match v.i64_slice() {
                    Some(s) => Some(s),
                    None => {
                        check_length(v, "sourceOffsetSeqs")?;
                        owned_seqs = v
                            .items("sourceOffsetSeqs")?
                            .enumerate()
                            .map(|(i, x)| x?.bigint(&format!("sourceOffsetSeqs[{i}]")))
                            .collect::<JsResult<Vec<i64>>>()?;
                        Some(&owned_seqs)
                    }
                },
            };
            let rks_js = arg(env, &routing_keys_arg).filter(|v| !v.is_nullish());
            let owned_rks;
            let rks: Option<&[Option<u64>]>;
            let rks_raw: Option<&[u64]>;
            match &rks_js {
                None => {
                    rks = None;
                    rks_raw = None;
                }
                Some(v) => match v.u64_slice() {
                    Some(s) => {
                        rks = None;
                        rks_raw = Some(s);
                    }
                    None => {
                        check_length(v, "routingKeys")?;
                        owned_rks = v
                            .items("routingKeys")?
                            .enumerate()
                            .map(|(i, x)| opt_routing_key(Some(x?), &format!("routingKeys[{i}]")))
                            .collect::<JsResult<Vec<Option<u64>>>>()?;
                        rks = Some(&owned_rks);
                        rks_raw = None;
                    }
                },
            }
            if seqs.is_some_and(|s| s.len() != n)
                || rks.is_some_and(|s| s.len() != n)
                || rks_raw.is_some_and(|s| s.len() != n)
            {
                return Err(same_length());
            }
            let mask_js = arg(env, &has_routing_key_arg).filter(|v| !v.is_nullish());
            let mask: Option<&[u8]> = match &mask_js {
                None => None,
                Some(v) => {
                    let bytes = match v.typed_bytes() {
                        Some((sys::TypedarrayType::uint8_array, b)) => b,
                        _ => return Err(Error::invalid("hasRoutingKey must be a Uint8Array")),
                    };
                    if rks_raw.is_none() {
                        return Err(Error::invalid("hasRoutingKey needs routingKeys as a BigUint64Array"));
                    }
                    if bytes.len() != n {
                        return Err(Error::invalid("hasRoutingKey must have the length of keyIds"));
                    }
                    Some(bytes)
                }
            };
            if seqs.is_none() && rks.is_none() && rks_raw.is_none() {
                self.journal.touch_keys(keys);
                return Ok(());
            }
            self.journal.touch_many((0..n).map(|i| Touch {
                key_id: keys[i],
                source_offset: seqs.map(|s| s[i]),
                routing_key: match (rks, rks_raw) {
                    (Some(r), _) => r[i],
                    (_, Some(r)) if mask.is_none_or(|m| m[i] != 0) => Some(r[i]),
                    _ => None,
                },
            }));
            Ok(())
        })();
        r.map_err(|e| throw(env, e))
    }

    /// J7: the flush delay for the next bucket, clamped to [1, bucketMs].
    #[napi(ts_args_type = "ms: number")]
    pub fn set_coalesce_ms(&self, env: &Env, ms: Unknown) -> napi::Result<()> {
        set_coalesce_args(env, &self.journal, ms)
    }

    /// J5: false means the key was certainly not flushed after `sinceGeneration`.
    #[napi(ts_args_type = "keyId: number, sinceGeneration: number")]
    pub fn maybe_touched_since(&self, env: &Env, key_id: Unknown, since: Unknown) -> napi::Result<bool> {
        maybe_touched_since_args(env, &self.journal, key_id, since)
    }

    /// J5 for any of `keyIds`.
    #[napi(ts_args_type = "keyIds: number[] | Uint32Array, sinceGeneration: number")]
    pub fn maybe_touched_since_any(&self, env: &Env, key_ids_arg: Unknown, since: Unknown) -> napi::Result<bool> {
        maybe_touched_since_any_args(env, &self.journal, key_ids_arg, since)
    }

    /// J10: true / false from the exact history, or null when it cannot tell.
    #[napi(ts_args_type = "routingKeys: string[], sinceGeneration: number", ts_return_type = "boolean | null")]
    pub fn exact_touched_since_any(&self, env: &Env, keys: Unknown, since: Unknown) -> napi::Result<Option<bool>> {
        exact_touched_since_any_args(env, &self.journal, keys, since)
    }

    /// J11: resolves with the hit when a flush after `afterGeneration` touches one of the keys,
    /// or null on timeout, abort or `stop()`. Exactly once.
    #[napi(ts_args_type = "args: WaitForAnyArgs", ts_return_type = "Promise<TouchHit | null>")]
    pub fn wait_for_any<'env>(&self, env: &'env Env, args: Unknown) -> napi::Result<Unknown<'env>> {
        let parsed = parse_wait(&Js::new(env, args.raw()));
        wait_parsed(env, &self.journal, &self.port, parsed, js_waiter)
    }

    /// Flushes the pending bucket now (tests and benchmarks). Returns whether a generation was
    /// produced.
    #[napi]
    pub fn flush(&self, env: &Env) -> bool {
        let _js = InJsCall::enter(env);
        self.journal.flush()
    }
}

journal_getters!(TouchJournal);

#[napi]
impl TouchJournal {
    /// Cancels the timers and resolves every pending wait with null (B29). Returns how many.
    #[napi]
    pub fn stop(&self, env: &Env) -> f64 {
        let _js = InJsCall::enter(env);
        self.journal.stop() as f64
    }

    /// The bloom slots of a key (J4), for diagnostics and differential tests.
    #[napi(ts_args_type = "keyId: number, filterPow2?: number, k?: number")]
    pub fn slot_positions(
        env: &Env,
        key_id: Unknown,
        filter_pow2: Option<u32>,
        k: Option<u32>,
    ) -> napi::Result<Vec<u32>> {
        let key = u32_value(&Js::new(env, key_id.raw()), "keyId").map_err(|e| throw(env, e))?;
        let pow2 = filter_pow2.unwrap_or(22).clamp(10, 30);
        let k = k.unwrap_or(4).clamp(1, 8);
        Ok(slot_positions(key, k, (1u32 << pow2) - 1).collect())
    }
}

/// J3: `{ epoch, generation }` for `<epochHex16>:<digits>` (trimmed; epoch lowercased), else null.
#[napi(ts_args_type = "raw: string", ts_return_type = "ParsedTouchCursor | null")]
pub fn parse_touch_cursor(env: &Env, raw: Unknown) -> napi::Result<Option<ParsedTouchCursor>> {
    let s = Js::new(env, raw.raw()).string("raw").map_err(|e| throw(env, e))?;
    Ok(parse_cursor(&s).map(|c| ParsedTouchCursor { epoch: c.epoch.to_string(), generation: c.generation }))
}

/// J3: `<epoch>:<generation>` with the generation floored and at least 0 (a NaN generation is
/// refused: the reference would format `e:NaN`, which its own parser refuses).
#[napi(ts_args_type = "epoch: string, generation: number")]
pub fn format_touch_cursor(env: &Env, epoch: Unknown, generation: Unknown) -> napi::Result<String> {
    let r = (|| {
        let e = Js::new(env, epoch.raw()).string("epoch")?;
        let g = Js::new(env, generation.raw()).number("generation")?;
        crate::journal::cursor::format_cursor_js(&e, g).ok_or_else(|| Error::invalid("generation must be a number"))
    })();
    r.map_err(|e| throw(env, e))
}

// Silence "never constructed" for the typing-only structs.
#[allow(dead_code)]
fn _typing_only(_: TouchJournalOptions, _: TouchHitJs, _: WaitForAnyArgs) {}
