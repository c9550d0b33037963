//! `TouchJournal`: the JS class over [`crate::journal::Journal`]. Conversion only: argument
//! checks, JS values, promises and the AbortSignal hook (from [`super::napi::abort`]).
//!
//! - [`types`]: the plain objects its methods take and return;
//! - [`convert`]: reading its options and arguments, and converting the core's hits, meta and
//!   stats to JS values and those objects;
//! - [`cursor`]: the functions `parseTouchCursor` and `formatTouchCursor`;
//! - this module: the class, its waker (`JsWaiter`), the method bodies it shares with
//!   `EngineJournal` (generic over the journal's waker) and the getters both classes share
//!   (`journal_getters!`).
//!
//! The native halves of the JavaScript `waitForAny` and `touch` are in
//! [`super::journal_fast`].

pub(super) mod convert;
pub mod cursor;
pub mod types;

use std::cell::Cell;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use super::napi::abort::{self, AbortHook};
use super::napi::{throw, unknown, Js, Out, Port, RawValue, Ticket};
use crate::error::Error;
use crate::journal::bloom::slot_positions;
use crate::journal::{Journal, Touch, TouchHit, WaitRequest, WaiterId, Waker, WeakJournal};
use convert::{
    arg, hit_js, key_ids, opt_offset, opt_routing_key, parse_options, parse_wait, routing_keys, u32_value, JsResult,
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

/// An in-memory touch journal (the reference's `TouchJournal`): touches flush in buckets as
/// generations, a time-aware bloom answers "touched since?", and waits are promises.
#[napi]
pub struct TouchJournal {
    pub(crate) journal: JsJournal,
    pub(crate) port: Port,
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
            pub fn get_meta(&self) -> $crate::bindings::journal::types::TouchJournalMeta {
                $crate::bindings::journal::convert::meta_js(self.journal.meta())
            }

            #[napi]
            pub fn get_total_stats(&self) -> $crate::bindings::journal::types::TouchJournalTotalStats {
                $crate::bindings::journal::convert::total_stats_js(&self.journal)
            }

            #[napi]
            pub fn snapshot_and_reset_interval_stats(
                &self,
            ) -> $crate::bindings::journal::types::TouchJournalIntervalStats {
                $crate::bindings::journal::convert::interval_stats_js(&self.journal)
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
