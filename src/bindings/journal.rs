//! `TouchJournal`: the JS class over [`crate::journal::Journal`], plus `parseTouchCursor` and
//! `formatTouchCursor`. Conversion only: argument checks, JS values, promises and the
//! AbortSignal hook (from [`super::abort`]).

use std::cell::Cell;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use super::abort::{self, AbortHook};
use super::js::{throw, Js};
use super::port::{Port, Ticket};
use crate::error::Error;
use crate::journal::bloom::slot_positions;
use crate::journal::{
    parse_cursor, parse_routing_key, Journal, JournalMeta, JournalOptions, KeyIds, Touch, TouchHit, WaitRequest,
    WaiterId, WakeStats, Waker, WeakJournal, MAX_WAIT_KEYS,
};

/// The journal as the binding uses it: each waiter is resolved through its promise ticket.
type JsJournal = Journal<JsWaiter>;
type JsWeakJournal = WeakJournal<JsWaiter>;

/// A parked `waitForAny`: its promise, and the abort listener to remove once it settles.
/// Stored inline in the journal's waiter slot; a wait with a signal (the rare one) is boxed, so
/// a plain one takes 16 bytes.
enum JsWaiter {
    Plain(Ticket),
    Abortable(Box<(Ticket, AbortHook)>),
}

const _: () = assert!(std::mem::size_of::<JsWaiter>() == 16);

impl Waker for JsWaiter {
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
struct InJsCall(Option<sys::napi_env>);

impl InJsCall {
    fn enter(env: &Env) -> InJsCall {
        InJsCall(JS_CALL.with(|c| c.replace(Some(env.raw()))))
    }
}

impl Drop for InJsCall {
    fn drop(&mut self) {
        JS_CALL.with(|c| c.set(self.0));
    }
}

/// Property `key`, or `None` when absent, undefined or null. (Named lookups intern the name
/// directly, which is cheaper than creating a string value first.)
fn prop(obj: &Js, key: &std::ffi::CStr) -> JsResult<Option<Js>> {
    let mut v = ptr::null_mut();
    raw_ok(unsafe { sys::napi_get_named_property(obj.env, obj.raw, key.as_ptr(), &mut v) })?;
    let js = Js { env: obj.env, raw: v };
    Ok(if js.is_nullish() { None } else { Some(js) })
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

/// A parsed cursor.
#[napi(object, object_from_js = false)]
pub struct ParsedTouchCursor {
    pub epoch: String,
    pub generation: f64,
}

type JsResult<T> = std::result::Result<T, Error>;

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
fn u32_of(n: f64, what: &str) -> JsResult<u32> {
    if n.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&n) {
        Ok(n as u32)
    } else {
        Err(Error::invalid(format!("{what} must be an integer in [0, 4294967295]")))
    }
}

fn u32_value(v: &Js, what: &str) -> JsResult<u32> {
    u32_or(v, || what.to_string())
}

/// A u32 number; `what` names it in the error, and is only built then.
fn u32_or(v: &Js, what: impl FnOnce() -> String) -> JsResult<u32> {
    let mut n = 0f64;
    let st = unsafe { sys::napi_get_value_double(v.env, v.raw, &mut n) };
    if st == sys::Status::napi_ok && n.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&n) {
        return Ok(n as u32);
    }
    let what = what();
    if st != sys::Status::napi_ok {
        Err(Error::invalid(format!("{what} must be a number")))
    } else {
        u32_of(n, &what)
    }
}

/// Key ids from a `Uint32Array` or an array of numbers.
fn key_ids(v: &Js, what: &str) -> JsResult<Vec<u32>> {
    if let Some(s) = v.u32_slice() {
        return Ok(s.to_vec());
    }
    let mut n = 0u32;
    if unsafe { sys::napi_get_array_length(v.env, v.raw, &mut n) } != sys::Status::napi_ok {
        return Err(Error::invalid(format!("{what} must be an array")));
    }
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        out.push(u32_or(&v.element(i)?, || format!("{what}[{i}]"))?);
    }
    Ok(out)
}

/// Routing keys from an array of strings: 16-hex ones parsed, others dropped (J10, J11).
fn routing_keys(v: &Js, what: &str) -> JsResult<Vec<u64>> {
    let n = v.array_len(what)?;
    let mut out = Vec::with_capacity(n as usize);
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

fn arg(env: &Env, v: &Option<Unknown>) -> Option<Js> {
    v.as_ref().map(|u| Js::new(env, u.raw()))
}

fn raw_ok(status: sys::napi_status) -> JsResult<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::Internal(format!("napi call failed with status {status}")))
    }
}

/// Hit objects of the latest flush delivered on this JS thread, by hit.
///
/// Hits are frozen, and every waiter one flush wakes through the same key shares one object: a
/// flush waking 10,000 waiters builds about as many objects as it touched keys. Waiters are
/// delivered in registration order (not grouped by key), hence a map. It holds one flush at a
/// time: a hit of another flush (or another env) empties it first, so it never outgrows the
/// keys of one bucket, and at most [`HIT_CACHE_MAX`] of those.
struct HitCache {
    env: sys::napi_env,
    /// The flush the cached hits belong to (its hit with key id 0).
    flush: Option<TouchHit>,
    refs: rustc_hash::FxHashMap<TouchHit, sys::napi_ref>,
}

const HIT_CACHE_MAX: usize = 65_536;

impl HitCache {
    fn clear(&mut self) {
        for (_, r) in self.refs.drain() {
            unsafe { sys::napi_delete_reference(self.env, r) };
        }
        self.flush = None;
    }
}

thread_local! {
    static HITS: std::cell::RefCell<HitCache> = std::cell::RefCell::new(HitCache {
        env: ptr::null_mut(),
        flush: None,
        refs: rustc_hash::FxHashMap::default(),
    });
}

/// `{ generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs }` or null.
fn hit_js(env: &Env, hit: Option<TouchHit>) -> JsResult<sys::napi_value> {
    let raw = env.raw();
    let Some(h) = hit else {
        let mut v = ptr::null_mut();
        raw_ok(unsafe { sys::napi_get_null(raw, &mut v) })?;
        return Ok(v);
    };
    let flush = TouchHit { key_id: 0, ..h };
    HITS.with(|cache| {
        let mut c = cache.borrow_mut();
        if c.env != raw || c.flush != Some(flush) || c.refs.len() >= HIT_CACHE_MAX {
            if c.env == raw {
                c.clear();
            } else {
                // Another env on this thread (a worker that ended, say): its references are not
                // ours to delete.
                c.refs.clear();
            }
            c.env = raw;
            c.flush = Some(flush);
        }
        if let Some(&r) = c.refs.get(&h) {
            let mut v = ptr::null_mut();
            if unsafe { sys::napi_get_reference_value(raw, r, &mut v) } == sys::Status::napi_ok && !v.is_null() {
                return Ok(v);
            }
        }
        let v = new_hit(env, &h)?;
        let mut r = ptr::null_mut();
        raw_ok(unsafe { sys::napi_create_reference(raw, v, 1, &mut r) })?;
        if let Some(old) = c.refs.insert(h, r) {
            unsafe { sys::napi_delete_reference(raw, old) };
        }
        Ok(v)
    })
}

/// A new frozen hit object, built by a small JS function: one call instead of an object, five
/// interned property names and a freeze through N-API.
fn new_hit(env: &Env, h: &TouchHit) -> JsResult<sys::napi_value> {
    const MAKE_HIT: &str = "(function (generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs) {\n  \"use strict\";\n  return Object.freeze({ generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs });\n})";
    let raw = env.raw();
    let mut values = [ptr::null_mut(); 5];
    unsafe {
        raw_ok(sys::napi_create_uint32(raw, h.generation, &mut values[0]))?;
        raw_ok(sys::napi_create_uint32(raw, h.key_id, &mut values[1]))?;
        raw_ok(sys::napi_create_bigint_int64(raw, h.bucket_max_source_offset_seq, &mut values[2]))?;
        raw_ok(sys::napi_create_double(raw, h.flush_at_ms as f64, &mut values[3]))?;
        raw_ok(sys::napi_create_double(raw, h.bucket_start_ms as f64, &mut values[4]))?;
    }
    let make = super::js::script_fn(env, MAKE_HIT).map_err(|e| Error::Internal(e.reason.clone()))?;
    super::js::call(env, make, &values).map_err(Error::Internal)
}

/// A promise already resolved with `null`.
fn resolved_null(env: &Env) -> napi::Result<sys::napi_value> {
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    let mut null = ptr::null_mut();
    unsafe {
        sys::napi_create_promise(env.raw(), &mut deferred, &mut promise);
        sys::napi_get_null(env.raw(), &mut null);
        sys::napi_resolve_deferred(env.raw(), deferred, null);
    }
    Ok(promise)
}

fn wait_parsed<'env>(
    env: &'env Env,
    journal: &JsJournal,
    port: &Port,
    parsed: JsResult<(WaitRequest, Option<Js>)>,
) -> napi::Result<Unknown<'env>> {
    let wrap = |v: sys::napi_value| Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), v) });
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
            Ok(true) => return wrap(resolved_null(env)?),
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
    let waiter = match hook {
        None => JsWaiter::Plain(ticket),
        Some(h) => JsWaiter::Abortable(Box::new((ticket, h))),
    };
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

// ---- the JavaScript `waitForAny` and `touch`
//
// A `#[napi]` method pays ~0.3 µs per call in napi-rs's receiver checks (unwrapping `this`,
// its type tag, the native-borrow registry) before any work, and reading an argument object's
// fields through N-API costs as much again: together about half of what registering a waiter
// costs, and most of a single touch. So the public `waitForAny` and `touch` are small
// JavaScript functions, installed on `TouchJournal.prototype` when the module loads: they read
// the fields in JIT-compiled code and call plain functions (`_waitForAny`, `_touch`) with an
// external handle made once per journal (kept on the instance under a private symbol). Same
// checks, same errors, same results as the native methods, which stay as the fallback and the
// typed declarations.

/// What the JavaScript methods hold per journal.
struct JournalHandle {
    journal: JsJournal,
    port: Port,
    args: Arc<FastArgsCell>,
}

/// The arguments of a plain `waitForAny` (u32 key ids in an array, numbers, no exact keys), as
/// the JavaScript method writes them through typed arrays over this memory (an external
/// ArrayBuffer, see [`wait_args_buffer`]) before calling `_waitArgs` with the journal's handle:
/// they reach the core without one N-API call per key or field. Shared by the handle and the
/// buffer, freed when both are gone. Only the JS thread writes (JavaScript) or reads
/// (`_waitArgs`, while no JavaScript runs).
#[repr(C)]
struct FastArgs {
    keys: [u32; MAX_WAIT_KEYS],
    /// How many of `keys` this wait names.
    n: u32,
    /// 1 when `after_generation` holds the wait's `afterGeneration`, 0 when it had none.
    has_after: u32,
    after_generation: f64,
    timeout_ms: f64,
}

/// Byte offset of the f64 fields (the JavaScript side makes its Float64Array there).
const FAST_ARGS_F64_AT: usize = std::mem::offset_of!(FastArgs, after_generation);
// The JavaScript side's Uint32Array reaches `n` and `has_after` as elements MAX_WAIT_KEYS and
// MAX_WAIT_KEYS + 1, and its Float64Array `timeout_ms` as element 1.
const _: () = assert!(std::mem::offset_of!(FastArgs, n) == 4 * MAX_WAIT_KEYS);
const _: () = assert!(std::mem::offset_of!(FastArgs, has_after) == 4 * MAX_WAIT_KEYS + 4);
const _: () = assert!(std::mem::offset_of!(FastArgs, timeout_ms) == FAST_ARGS_F64_AT + 8);

struct FastArgsCell(std::cell::UnsafeCell<FastArgs>);

// SAFETY: the contents are only touched on the JS thread (see above); another thread may only
// drop the last `Arc` (a runtime running a finalizer elsewhere).
unsafe impl Sync for FastArgsCell {}
unsafe impl Send for FastArgsCell {}

impl FastArgsCell {
    fn new() -> Arc<FastArgsCell> {
        Arc::new(FastArgsCell(std::cell::UnsafeCell::new(FastArgs {
            keys: [0; MAX_WAIT_KEYS],
            n: 0,
            has_after: 0,
            after_generation: 0.0,
            timeout_ms: 0.0,
        })))
    }

    /// The request the JavaScript side wrote, checked as the general path checks the same values.
    fn request(&self) -> JsResult<WaitRequest> {
        // SAFETY: called on the JS thread during a native call, when no JavaScript can write.
        let a = unsafe { &*self.0.get() };
        let keys = a.keys.get(..a.n as usize).ok_or_else(|| Error::invalid("keys: too many keys"))?;
        let after_generation = match a.has_after {
            0 => None,
            _ => Some(u32_of(a.after_generation, "afterGeneration")?),
        };
        wait_request(KeyIds::from_slice(keys), Vec::new(), after_generation, a.timeout_ms)
    }
}

unsafe extern "C" fn drop_fast_args(_env: sys::napi_env, _data: *mut std::ffi::c_void, hint: *mut std::ffi::c_void) {
    if !hint.is_null() {
        drop(unsafe { Arc::from_raw(hint.cast::<FastArgsCell>()) });
    }
}

/// `_waitArgsBuffer(handle)`: the ArrayBuffer over the [`FastArgs`] of the journal behind
/// `handle`, or `undefined` where the runtime refuses external buffers (the JavaScript
/// `waitForAny` then always takes the general path).
#[napi(js_name = "_waitArgsBuffer", skip_typescript)]
pub fn wait_args_buffer<'env>(env: &'env Env, handle: Unknown) -> napi::Result<Unknown<'env>> {
    let h = handle_of(&Js::new(env, handle.raw())).map_err(|e| throw(env, e))?;
    let raw = env.raw();
    let hint = Arc::into_raw(h.args.clone());
    let mut ab = ptr::null_mut();
    let st = unsafe {
        sys::napi_create_external_arraybuffer(
            raw,
            (*hint).0.get().cast(),
            std::mem::size_of::<FastArgs>(),
            Some(drop_fast_args),
            hint as *mut std::ffi::c_void,
            &mut ab,
        )
    };
    if st != sys::Status::napi_ok {
        drop(unsafe { Arc::from_raw(hint) }); // not taken: no finalizer will run
        unsafe { sys::napi_get_undefined(raw, &mut ab) };
    }
    Ok(unsafe { Unknown::from_raw_unchecked(raw, ab) })
}

/// `_waitArgs(handle, signal?)`: `waitForAny` with the request the JavaScript side wrote into the
/// handle's [`FastArgs`]. A raw N-API callback: napi-rs's wrapper allocates a borrow scope per
/// call, and this is the hottest registration path.
unsafe extern "C" fn wait_args_cb(raw: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let env = Env::from_raw(raw);
    let mut argv = [ptr::null_mut(); 2];
    let mut argc = argv.len();
    let st =
        unsafe { sys::napi_get_cb_info(raw, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()) };
    let result = if st != sys::Status::napi_ok {
        Err(napi::Error::from_reason("cannot read the arguments"))
    } else {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let h = handle_of(&Js::new(&env, argv[0])).map_err(|e| throw(&env, e))?;
            let signal = Some(Js::new(&env, argv[1])).filter(|v| !v.is_nullish());
            let parsed = h.args.request().map(|req| (req, signal));
            wait_parsed(&env, &h.journal, &h.port, parsed).map(|v| v.raw())
        }))
        .unwrap_or_else(|_| Err(throw(&env, Error::Internal("waitForAny panicked".into()))))
    };
    match result {
        Ok(v) => v,
        Err(e) => {
            unsafe { napi::JsError::from(e).throw_into(raw) };
            ptr::null_mut()
        }
    }
}

/// Marks externals made by [`TouchJournal::handle`], so `_waitForAny` never reads another
/// external as one of ours.
const HANDLE_TAG: sys::napi_type_tag =
    sys::napi_type_tag { lower: 0x6475_7261_626c_6574, upper: 0x7761_6974_6861_6e64 };

unsafe extern "C" fn drop_handle(_env: sys::napi_env, data: *mut std::ffi::c_void, _hint: *mut std::ffi::c_void) {
    if !data.is_null() {
        drop(unsafe { Box::from_raw(data.cast::<JournalHandle>()) });
    }
}

/// The journal behind a handle from [`TouchJournal::handle`].
fn handle_of<'a>(v: &Js) -> JsResult<&'a JournalHandle> {
    let mut ours = false;
    let st = unsafe { sys::napi_check_object_type_tag(v.env, v.raw, &HANDLE_TAG, &mut ours) };
    let mut data = ptr::null_mut();
    if st != sys::Status::napi_ok
        || !ours
        || unsafe { sys::napi_get_value_external(v.env, v.raw, &mut data) } != sys::Status::napi_ok
        || data.is_null()
    {
        return Err(Error::invalid("not a TouchJournal handle"));
    }
    // SAFETY: tagged externals hold a live `JournalHandle` until their finalizer runs, which cannot
    // happen while the value is on this call's stack.
    Ok(unsafe { &*data.cast::<JournalHandle>() })
}

/// `waitForAny` with the argument's fields read by the JavaScript caller.
#[napi(js_name = "_waitForAny", skip_typescript)]
#[allow(clippy::too_many_arguments)]
pub fn wait_for_any_fields<'env>(
    env: &'env Env,
    handle: Unknown,
    args: Unknown,
    keys: Unknown,
    exact_keys: Unknown,
    after_generation: Unknown,
    timeout_ms: Unknown,
    signal: Unknown,
) -> napi::Result<Unknown<'env>> {
    let h = handle_of(&Js::new(env, handle.raw())).map_err(|e| throw(env, e))?;
    let field = |u: &Unknown| Some(Js::new(env, u.raw())).filter(|v| !v.is_nullish());
    let parsed = check_wait_args(&Js::new(env, args.raw())).and_then(|()| {
        parse_wait_fields([
            field(&keys),
            field(&exact_keys),
            field(&after_generation),
            field(&timeout_ms),
            field(&signal),
        ])
    });
    wait_parsed(env, &h.journal, &h.port, parsed)
}

/// `touch` through a journal handle.
#[napi(js_name = "_touch", skip_typescript)]
pub fn touch_with_handle(
    env: &Env,
    handle: Unknown,
    key_id: Unknown,
    source_offset_seq: Unknown,
    routing_key: Unknown,
) -> napi::Result<()> {
    let h = handle_of(&Js::new(env, handle.raw())).map_err(|e| throw(env, e))?;
    touch_args(env, &h.journal, key_id, Some(source_offset_seq), Some(routing_key))
}

fn touch_args(
    env: &Env,
    journal: &JsJournal,
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

/// Installs the JavaScript `waitForAny` and `touch` over the native methods when the module loads.
/// Best effort: should a runtime refuse (no `napi_run_script`, say), the native methods stay in
/// place, with the same behaviour at a higher cost per call, rather than the module failing to
/// load. (`journal-js-methods.spec.mjs` checks that both runtimes we test take the JS methods.)
#[napi(module_exports)]
pub fn install_js_methods(exports: Object, env: Env) -> napi::Result<()> {
    let _ = try_install_js_methods(&env, Js::new(&env, exports.raw()));
    Ok(())
}

fn try_install_js_methods(env: &Env, exports: Js) -> napi::Result<()> {
    const SOURCE: &str = r#"(function (proto, handleOf, waitFast, touchFast, argsBufferOf, waitArgs, maxKeys, f64At) {
  "use strict";
  const slot = Symbol("durable-touch.journalHandle");
  // Per journal: the native handle and, where the runtime allows, typed arrays over the
  // handle's argument buffer (key ids, then n and has-after; afterGeneration and timeoutMs),
  // which `waitArgs` reads.
  function handleFor(journal) {
    let r = journal === null || journal === undefined ? undefined : journal[slot];
    if (r === undefined) {
      const h = handleOf.call(journal);
      const buf = argsBufferOf(h);
      r = buf === undefined
        ? { h, u32: null, f64: null, calls: 0 }
        : { h, u32: new Uint32Array(buf, 0, maxKeys + 2), f64: new Float64Array(buf, f64At, 2), calls: 0 };
      try {
        Object.defineProperty(journal, slot, { value: r });
      } catch {}
    }
    return r;
  }
  const method = (value) => ({ configurable: true, writable: true, enumerable: true, value });
  Object.defineProperty(proto, "waitForAny", method(function waitForAny(args) {
    const r = handleFor(this);
    if (typeof args !== "object" || args === null) return waitFast(r.h, args);
    const keys = args.keys, exactKeys = args.exactKeys;
    const afterGeneration = args.afterGeneration, timeoutMs = args.timeoutMs, signal = args.signal;
    const s = r.u32;
    // Plain arrays of u32 ids with number fields (the common wait) are written to the buffer
    // here; anything else, and every error, takes the general path. So does a copy during which
    // another call used the buffer (an element getter that waits on the same journal), or into
    // a buffer someone detached. The native side checks the numbers as the general path does.
    if (s !== null && (exactKeys === undefined || exactKeys === null) && Array.isArray(keys) && keys.length <= maxKeys && typeof timeoutMs === "number") {
      const noAfter = afterGeneration === undefined || afterGeneration === null;
      if (noAfter || typeof afterGeneration === "number") {
        const n = keys.length;
        const mark = (r.calls = (r.calls + 1) | 0);
        let i = 0;
        for (; i < n; i++) {
          const k = keys[i];
          if (k >>> 0 !== k) break;
          s[i] = k;
        }
        if (i === n && r.calls === mark && s.length === maxKeys + 2) {
          const f = r.f64;
          s[maxKeys] = n;
          s[maxKeys + 1] = noAfter ? 0 : 1;
          f[0] = noAfter ? 0 : afterGeneration;
          f[1] = timeoutMs;
          return waitArgs(r.h, signal);
        }
      }
    }
    return waitFast(r.h, args, keys, exactKeys, afterGeneration, timeoutMs, signal);
  }));
  Object.defineProperty(proto, "touch", method(function touch(keyId, sourceOffsetSeq, routingKey) {
    touchFast(handleFor(this).h, keyId, sourceOffsetSeq, routingKey);
  }));
})"#;
    let get = |obj: &Js, name: &str| -> napi::Result<Js> {
        obj.get(name)
            .ok()
            .flatten()
            .ok_or_else(|| napi::Error::from_reason(format!("durable-touch: {name} missing at load")))
    };
    let class = get(&exports, "TouchJournal")?;
    let proto = get(&class, "prototype")?;
    let handle_of = get(&proto, "_handle")?;
    let wait = get(&exports, "_waitForAny")?;
    let touch = get(&exports, "_touch")?;
    let args_buffer = get(&exports, "_waitArgsBuffer")?;
    let raw = env.raw();
    let mut wait_args = ptr::null_mut();
    let name = "_waitArgs";
    super::js::napi_ok(unsafe {
        sys::napi_create_function(
            raw,
            name.as_ptr().cast(),
            name.len() as isize,
            Some(wait_args_cb),
            ptr::null_mut(),
            &mut wait_args,
        )
    })?;
    let (mut max_keys, mut f64_at) = (ptr::null_mut(), ptr::null_mut());
    super::js::napi_ok(unsafe { sys::napi_create_uint32(raw, MAX_WAIT_KEYS as u32, &mut max_keys) })?;
    super::js::napi_ok(unsafe { sys::napi_create_uint32(raw, FAST_ARGS_F64_AT as u32, &mut f64_at) })?;
    let install = super::js::script_fn(env, SOURCE)?;
    super::js::call(
        env,
        install,
        &[proto.raw, handle_of.raw, wait.raw, touch.raw, args_buffer.raw, wait_args, max_keys, f64_at],
    )
    .map_err(napi::Error::from_reason)?;
    Ok(())
}

// ---- the class

/// An in-memory touch journal (the reference's `TouchJournal`): touches flush in buckets as
/// generations, a time-aware bloom answers "touched since?", and waits are promises.
#[napi]
pub struct TouchJournal {
    journal: JsJournal,
    port: Port,
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

fn meta_js(m: JournalMeta) -> TouchJournalMeta {
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

impl TouchJournal {
    fn parse_wait(&self, args: &Js) -> JsResult<(WaitRequest, Option<Js>)> {
        check_wait_args(args)?;
        let fields = [c"keys", c"exactKeys", c"afterGeneration", c"timeoutMs", c"signal"];
        let mut values = [None; 5];
        for (v, name) in values.iter_mut().zip(fields) {
            *v = prop(args, name)?;
        }
        parse_wait_fields(values)
    }
}

fn check_wait_args(args: &Js) -> JsResult<()> {
    if args.type_of() != sys::ValueType::napi_object || args.is_array() {
        return Err(Error::invalid("args must be an object"));
    }
    Ok(())
}

/// The fields of `waitForAny`'s argument, each `None` when absent, undefined or null:
/// `[keys, exactKeys, afterGeneration, timeoutMs, signal]`.
fn parse_wait_fields([keys, exact, after, timeout, signal]: [Option<Js>; 5]) -> JsResult<(WaitRequest, Option<Js>)> {
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
    let mut ms = 0f64;
    if unsafe { sys::napi_get_value_double(timeout.env, timeout.raw, &mut ms) } != sys::Status::napi_ok {
        return Err(Error::invalid("timeoutMs must be a number"));
    }
    Ok((wait_request(keys, exact_keys, after_generation, ms)?, signal))
}

/// The request from checked fields and the timeout as the number given (both paths of
/// `waitForAny` end here, so they refuse the same values with the same errors).
fn wait_request(
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
            let seqs_js = arg(env, &source_offset_seqs).filter(|v| !v.is_nullish());
            let owned_seqs;
            let seqs: Option<&[i64]> = match &seqs_js {
                None => None,
                Some(v) => match v.i64_slice() {
                    Some(s) => Some(s),
                    None => {
                        let items = v.elements("sourceOffsetSeqs")?;
                        owned_seqs = items
                            .iter()
                            .enumerate()
                            .map(|(i, x)| x.bigint(&format!("sourceOffsetSeqs[{i}]")))
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
                        let items = v.elements("routingKeys")?;
                        owned_rks = items
                            .iter()
                            .enumerate()
                            .map(|(i, x)| opt_routing_key(Some(*x), &format!("routingKeys[{i}]")))
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
                return Err(Error::invalid("keyIds, sourceOffsetSeqs and routingKeys must have the same length"));
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
        let ms = Js::new(env, ms.raw()).number("ms").and_then(|n| {
            if n.is_nan() {
                Err(Error::invalid("ms must be a number"))
            } else {
                Ok(n)
            }
        });
        self.journal.set_coalesce_ms(ms.map_err(|e| throw(env, e))?);
        Ok(())
    }

    /// J5: false means the key was certainly not flushed after `sinceGeneration`.
    #[napi(ts_args_type = "keyId: number, sinceGeneration: number")]
    pub fn maybe_touched_since(&self, env: &Env, key_id: Unknown, since: Unknown) -> napi::Result<bool> {
        let parsed = (|| {
            Ok((
                u32_value(&Js::new(env, key_id.raw()), "keyId")?,
                u32_value(&Js::new(env, since.raw()), "sinceGeneration")?,
            ))
        })();
        let (key, since) = parsed.map_err(|e| throw(env, e))?;
        Ok(self.journal.maybe_touched_since(key, since))
    }

    /// J5 for any of `keyIds`.
    #[napi(ts_args_type = "keyIds: number[] | Uint32Array, sinceGeneration: number")]
    pub fn maybe_touched_since_any(&self, env: &Env, key_ids_arg: Unknown, since: Unknown) -> napi::Result<bool> {
        let parsed = (|| {
            let keys = key_ids(&Js::new(env, key_ids_arg.raw()), "keyIds")?;
            Ok((keys, u32_value(&Js::new(env, since.raw()), "sinceGeneration")?))
        })();
        let (keys, since) = parsed.map_err(|e| throw(env, e))?;
        Ok(self.journal.maybe_touched_since_any(&keys, since))
    }

    /// J10: true / false from the exact history, or null when it cannot tell.
    #[napi(ts_args_type = "routingKeys: string[], sinceGeneration: number", ts_return_type = "boolean | null")]
    pub fn exact_touched_since_any(&self, env: &Env, keys: Unknown, since: Unknown) -> napi::Result<Option<bool>> {
        let parsed = (|| {
            let keys = routing_keys(&Js::new(env, keys.raw()), "routingKeys")?;
            Ok((keys, u32_value(&Js::new(env, since.raw()), "sinceGeneration")?))
        })();
        let (keys, since) = parsed.map_err(|e| throw(env, e))?;
        Ok(self.journal.exact_touched_since_any(&keys, since))
    }

    /// J11: resolves with the hit when a flush after `afterGeneration` touches one of the keys,
    /// or null on timeout, abort or `stop()`. Exactly once.
    #[napi(ts_args_type = "args: WaitForAnyArgs", ts_return_type = "Promise<TouchHit | null>")]
    pub fn wait_for_any<'env>(&self, env: &'env Env, args: Unknown) -> napi::Result<Unknown<'env>> {
        let parsed = self.parse_wait(&Js::new(env, args.raw()));
        wait_parsed(env, &self.journal, &self.port, parsed)
    }

    /// The handle the JavaScript `waitForAny` and `touch` pass to the plain functions (see
    /// [`install_js_methods`]).
    #[napi(js_name = "_handle", skip_typescript)]
    pub fn handle<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        let handle = Box::new(JournalHandle {
            journal: self.journal.clone(),
            port: self.port.clone(),
            args: FastArgsCell::new(),
        });
        let raw = env.raw();
        let data = Box::into_raw(handle);
        let mut v = ptr::null_mut();
        let st = unsafe { sys::napi_create_external(raw, data.cast(), Some(drop_handle), ptr::null_mut(), &mut v) };
        if st != sys::Status::napi_ok {
            drop(unsafe { Box::from_raw(data) });
            return Err(napi::Error::from_reason("cannot create the journal handle"));
        }
        if unsafe { sys::napi_type_tag_object(raw, v, &HANDLE_TAG) } != sys::Status::napi_ok {
            return Err(napi::Error::from_reason("cannot tag the journal handle"));
        }
        Ok(unsafe { Unknown::from_raw_unchecked(raw, v) })
    }

    /// Flushes the pending bucket now (tests and benchmarks). Returns whether a generation was
    /// produced.
    #[napi]
    pub fn flush(&self, env: &Env) -> bool {
        let _js = InJsCall::enter(env);
        self.journal.flush()
    }

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

    /// The largest source offset flushed so far (-1n before any).
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
    pub fn get_meta(&self) -> TouchJournalMeta {
        meta_js(self.journal.meta())
    }

    #[napi]
    pub fn get_total_stats(&self) -> TouchJournalTotalStats {
        let t = self.journal.total_stats();
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

    #[napi]
    pub fn snapshot_and_reset_interval_stats(&self) -> TouchJournalIntervalStats {
        let i = self.journal.take_interval_stats();
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

    /// Bytes of bloom memory held: 0 until the first touch, then 4 × filterSize (B14).
    #[napi]
    pub fn get_filter_bytes(&self) -> f64 {
        self.journal.filter_bytes() as f64
    }

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

/// `<epoch>:<generation>` with the generation floored and at least 0.
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
