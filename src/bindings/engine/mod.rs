//! `TouchEngine`: the JS class over [`crate::engine::TouchEngine`]. Conversion only.
//!
//! - [`types`]: the plain objects its methods take and return;
//! - [`convert`]: reading its options and arguments, and converting the core's replies and
//!   views to those objects;
//! - [`bounds`]: the module constants `engineBounds`, `fanoutBounds` and `fanoutDefaults`;
//! - this module: the class, the native halves `_engineWait` and `_engineCancel` of
//!   `lib/internal/engine-methods.js`, and `_emptyRuntime` and `_waitFields` for `compat/`.

pub mod bounds;
mod convert;
pub mod types;

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::engine_journal::EngineJournal;
use super::engine_records::{records_js, EngineRecords};
use super::journal::convert::key_ids;
use super::napi::abort;
use super::napi::value::{class_instance, to_js};
use super::napi::{throw, unknown, Js, Out, Port};
use super::processor::{parse_output, parse_request, settle};
use super::store::Store;
use crate::engine::hot::InterestMode;
use crate::engine::interest::parse_interest_mode;
use crate::engine::wait::{
    parse_inactivity_ttl, parse_template_decls, WaitArgs, WaitControl, MAX_DECLARED_TEMPLATES, MAX_WAIT_LIST,
};
use crate::engine::TouchEngine as CoreEngine;
use crate::error::Error;
use crate::jscompat::json::{Object, Value};
use crate::jscompat::string::JsString;
use convert::{
    activate_js, arg, capped, capped_strings, memory_js, meta_js, parse_options, runtime_js, stats_js, tick_js, top_js,
    value_of, wait_reply_js, wait_stream_and_signal,
};
use types::{ActivateResult, EngineMemoryReport, EngineStats, FanoutStatsJs, TouchRuntime};

/// Processing, waits, policy and stats over a [`Store`].
#[napi]
pub struct TouchEngine {
    engine: CoreEngine,
    port: Port,
    /// The waits `lib/internal/engine-methods.js` listens to an AbortSignal for, by the cancel
    /// id it gave them (see `_engineCancel`); each leaves when it settles.
    cancels: Arc<Mutex<FxHashMap<u64, Arc<WaitControl>>>>,
}

impl TouchEngine {
    /// The core engine (for the classes that serve it, such as `WaitListener`).
    pub(crate) fn core(&self) -> &CoreEngine {
        &self.engine
    }

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

/// `_emptyRuntime`: what `runtime()` reports for a stream the engine holds no state for (the
/// reference's snapshot then), for `compat/manager.mjs` to answer `getTouchRuntimeSnapshot`
/// with when there is no engine or the stream's touch is not enabled.
#[napi(js_name = "_emptyRuntime", skip_typescript)]
pub fn empty_runtime() -> TouchRuntime {
    let (mode, lag, view) = CoreEngine::empty_runtime();
    runtime_js(mode, lag, &view)
}

/// `_waitFields`: the request fields a wait reads ([`WaitArgs::FIELDS`]), in order, for
/// `compat/routes.mjs` to copy out of a `/touch/wait` body.
#[napi(js_name = "_waitFields", skip_typescript)]
pub fn wait_fields() -> Vec<&'static str> {
    WaitArgs::FIELDS.to_vec()
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
