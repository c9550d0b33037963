//! Waits (W1–W6): the request ([`request`]: validation, keys, kind, reply) and the plumbing
//! that plans a wait, checks its cursor and parks it in the stream's journal atomically with
//! flushes ([`TouchEngine::wait`], `park`), and lets its caller abort it ([`WaitControl`]).

pub mod request;

pub use request::*;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::hot::{hot_limits, HotLease, HotState, InterestMode};
use super::interest::release_lease;
use super::policy::TouchMode;
use super::{templates, wall_ms, TouchEngine};
use crate::error::{Error, Result};
use crate::journal::{parse_cursor, CheckOrWait, Journal, KeyIds, WaitRequest, WaiterId};
use crate::spec::TouchConfig;
use crate::store::{blocking, Reply};

/// Controls one wait: lets its caller abort it.
#[derive(Default)]
pub struct WaitControl {
    aborted: AtomicBool,
    parked: Mutex<Option<(Journal, WaiterId)>>,
}

impl WaitControl {
    /// Aborts the wait: it resolves with [`Error::Aborted`] if it has not resolved yet.
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        if let Some((journal, id)) = self.parked.lock().take() {
            journal.cancel(id);
        }
    }

    /// Whether the wait is parked in its stream's journal. From then on it is answered with a
    /// reply (touched, timed out, or the engine closing) or [`Error::Aborted`], never another
    /// error: a caller that keeps the request to answer errors another way may drop it.
    pub fn is_parked(&self) -> bool {
        self.parked.lock().is_some()
    }

    /// The journal the wait is parked on, if it is.
    #[cfg(test)]
    pub(crate) fn parked_on(&self) -> Option<Journal> {
        self.parked.lock().as_ref().map(|(j, _)| j.clone())
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

impl TouchEngine {
    /// A wait (W1–W6). `reply` is called exactly once: with the reply, or with an error
    /// ([`Error::Aborted`] after [`WaitControl::abort`]).
    pub fn wait(&self, stream: &str, args: WaitArgs, reply: Reply<WaitReply>) -> Arc<WaitControl> {
        let control = Arc::new(WaitControl::default());
        self.wait_with(stream, args, control.clone(), reply);
        control
    }

    /// [`TouchEngine::wait`] under a control the caller made first (to hand an abort hook
    /// before the wait starts). A control aborted before the wait parks resolves it with
    /// [`Error::Aborted`].
    pub fn wait_with(&self, stream: &str, args: WaitArgs, control: Arc<WaitControl>, reply: Reply<WaitReply>) {
        if let Err(e) = self.check_open() {
            reply(Err(e));
            return;
        }
        let cfg = match self.touch_config(stream) {
            Ok(c) => c,
            Err(e) => {
                reply(Err(e));
                return;
            }
        };
        let engine = self.clone();
        let stream = stream.to_string();
        let ctl = control;
        // Activation and entity lookups touch SQLite; the common path does not and runs here.
        if !args.declare_templates.is_empty() {
            if let Err(e) = self.writer_only() {
                return reply(Err(e));
            }
        }
        // An edge answers from its mirrors and the writer's beats: it never reads its store.
        let needs_store = self.inner.edge().is_none()
            && (!args.declare_templates.is_empty()
                || (!args.template_ids_used.is_empty()
                    && (args.interest == InterestMode::Coarse || self.touch_mode(&stream) == TouchMode::CoarseOnly)));
        if needs_store {
            std::thread::spawn(move || engine.wait_inner(&stream, cfg, args, ctl, reply));
        } else {
            engine.wait_inner(&stream, cfg, args, ctl, reply);
        }
    }

    fn touch_mode(&self, stream: &str) -> TouchMode {
        self.inner.state.lock().streams.get(stream).map(|rt| rt.runtime_touch_mode()).unwrap_or(TouchMode::Fine)
    }

    fn wait_inner(
        &self,
        stream: &str,
        cfg: TouchConfig,
        args: WaitArgs,
        control: Arc<WaitControl>,
        reply: Reply<WaitReply>,
    ) {
        let planned = (|| -> Result<request::WaitPlan> {
            if args.interest == InterestMode::Fine && !args.template_ids_used.is_empty() {
                self.heartbeat(stream, &cfg, &args.template_ids_used);
            }
            if !args.declare_templates.is_empty() {
                self.activate_inner(stream, &cfg, args.declare_templates.clone(), args.inactivity_ttl_ms)?;
            }
            let mode = self.touch_mode(stream);
            let kind = request::choose_kind(&args, mode);
            let entities = if kind != WaitKind::TableKey || args.template_ids_used.is_empty() {
                Vec::new()
            } else if let Some(edge) = self.inner.edge() {
                edge.entities(&self.inner, stream, &args.template_ids_used)
            } else {
                let ids = args.template_ids_used.clone();
                let name = stream.to_string();
                blocking(|r| self.inner.store.query(move |c| templates::entities_for_templates(c, &name, &ids), r))?
            };
            let mut plan = plan_keys(&args, mode, &entities)?;
            // Ours: untemplated fine waits also hear the catch-all key (deviations.md, B1–B5).
            if plan.kind == WaitKind::FineKey
                && args.interest == InterestMode::Fine
                && args.template_ids_used.is_empty()
            {
                plan.exact_fallback_key_ids.push(catch_all_key_id());
                if plan.exact_keys.is_empty() {
                    plan.wait_key_ids.push(catch_all_key_id());
                }
            }
            Ok(plan)
        })();
        match planned {
            Ok(plan) => self.park(stream, &cfg, &args, plan, control, reply),
            Err(e) => reply(Err(e)),
        }
    }
}

/// Runs a closure at most once, from whichever path gets there first.
struct Once(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Once {
    fn new(f: impl FnOnce() + Send + 'static) -> Arc<Once> {
        Arc::new(Once(Mutex::new(Some(Box::new(f)))))
    }
    fn run(&self) {
        if let Some(f) = self.0.lock().take() {
            f();
        }
    }
}

/// An answer decided inside the journal's lock.
enum Early {
    Stale { cursor: String, epoch: String, generation: u32, bucket: (i64, i64, i64) },
    Touched { cursor: String, bucket: (i64, i64, i64) },
    Timeout { cursor: String, bucket: (i64, i64, i64) },
}

fn bucket_fields(s: &crate::journal::JournalState) -> (i64, i64, i64) {
    s.standing().bucket()
}

impl TouchEngine {
    pub(crate) fn heartbeat(&self, stream: &str, cfg: &TouchConfig, ids: &[String]) {
        let now = wall_ms();
        if let Some(edge) = self.inner.edge() {
            // An edge's templates live at the writer: it hears of the heartbeat in a report.
            return edge.note_templates_used(stream, ids);
        }
        self.inner.registry.heartbeat(stream, ids, now);
        let interval = cfg.templates.last_seen_persist_interval_ms;
        if self.inner.registry.has_due_last_seen(now, interval) {
            let inner = self.inner.clone();
            self.inner.store.write(move |conn| inner.registry.flush_last_seen(conn, now, interval), Box::new(|_| {}));
        }
    }

    /// Counts a wait's outcome (`"touched"`, `"timeout"` or `"stale"`) in the stream's totals
    /// (M21), as the reference's `recordWaitMetrics` does.
    pub fn record_wait(&self, stream: &str, outcome: &str) {
        if let Some(rt) = self.inner.state.lock().streams.get_mut(stream) {
            match outcome {
                "touched" => rt.totals.wait_touched += 1.0,
                "timeout" => rt.totals.wait_timeout += 1.0,
                _ => rt.totals.wait_stale += 1.0,
            }
        }
    }

    /// W5/W6: hot interest, the cursor check and the registration, atomic with flushes.
    fn park(
        &self,
        stream: &str,
        cfg: &TouchConfig,
        args: &WaitArgs,
        plan: request::WaitPlan,
        control: Arc<WaitControl>,
        reply: Reply<WaitReply>,
    ) {
        let now = wall_ms();
        let limits = hot_limits(cfg);
        let (journal, lease): (Journal, HotLease) = {
            let mut st = self.inner.state.lock();
            let Some(rt) = st.streams.get_mut(stream) else {
                drop(st);
                return reply(Err(Error::TouchNotEnabled("touch not enabled".into())));
            };
            let (j, created) = rt.journal(cfg);
            let j = j.clone();
            let shape = rt.hot.as_ref().map(HotState::interest_shape);
            let lease = rt.hot.get_or_insert_with(HotState::default).begin(
                args.interest,
                &plan.hot_key_ids,
                &args.template_ids_used,
                &limits,
                now,
            );
            if let Some(edge) = self.inner.edge() {
                if shape != rt.hot.as_ref().map(HotState::interest_shape) {
                    edge.interest_changed();
                }
            }
            if created {
                st.journals_created += 1;
            }
            (j, lease)
        };
        // Rows the loop left unprocessed while nobody listened are processed now.
        self.inner.poke_if_deferred(stream);
        let release = {
            let inner = self.inner.clone();
            let name = stream.to_string();
            Once::new(move || release_lease(&inner.state, &name, &lease, &limits))
        };
        let since = if args.cursor == "now" {
            None
        } else {
            match parse_cursor(&args.cursor) {
                Some(c) => Some(c),
                None => {
                    release.run();
                    return reply(Err(Error::InvalidCursor(
                        "wait.cursor must be in the form <epochHex>:<generation> or 'now'".into(),
                    )));
                }
            }
        };
        let kind = plan.kind;
        let use_exact = !plan.exact_keys.is_empty();
        let wait_keys = plan.wait_key_ids.clone();
        let exact_keys = plan.exact_keys.clone();
        let fallback = plan.exact_fallback_key_ids.clone();
        let timeout_ms = args.timeout_ms.floor().max(0.0) as u64;
        let req = WaitRequest {
            keys: KeyIds::from_slice(if use_exact { &fallback } else { &wait_keys }),
            exact_keys: if use_exact { exact_keys.clone() } else { Vec::new() },
            after_generation: None,
            timeout_ms,
        };
        let reply = Arc::new(Mutex::new(Some(reply)));
        let send = {
            let reply = reply.clone();
            move |r: Result<WaitReply>| {
                if let Some(f) = reply.lock().take() {
                    f(r)
                }
            }
        };
        let resolve = {
            let engine = self.clone();
            let journal = journal.clone();
            let control = control.clone();
            let release = release.clone();
            let name = stream.to_string();
            let send = send.clone();
            Box::new(move |hit: Option<crate::journal::TouchHit>, at: Option<crate::journal::Standing>| {
                release.run();
                if control.is_aborted() {
                    return send(Err(Error::Aborted));
                }
                // A touched waiter's client reads afresh, so a later cursor is as good; one that
                // timed out answers where the journal stood as it expired ([`Standing`]).
                let at = at.filter(|_| hit.is_none()).unwrap_or_else(|| journal.read(|s| s.standing()));
                let (cursor, bucket) = (at.cursor(), at.bucket());
                let reply = match hit {
                    Some(h) => {
                        engine.record_wait(&name, "touched");
                        WaitReply {
                            touched: true,
                            stale: false,
                            cursor,
                            epoch: None,
                            generation: None,
                            effective_wait_kind: kind,
                            bucket_max_source_offset_seq: h.bucket_max_source_offset_seq,
                            flush_at_ms: h.flush_at_ms,
                            bucket_start_ms: h.bucket_start_ms,
                            cursor_through: bucket.0,
                            parked: true,
                        }
                    }
                    None => {
                        engine.record_wait(&name, "timeout");
                        WaitReply {
                            touched: false,
                            stale: false,
                            cursor,
                            epoch: None,
                            generation: None,
                            effective_wait_kind: kind,
                            bucket_max_source_offset_seq: bucket.0,
                            flush_at_ms: bucket.1,
                            bucket_start_ms: bucket.2,
                            cursor_through: bucket.0,
                            parked: true,
                        }
                    }
                };
                send(Ok(reply));
            }) as crate::journal::Resolve
        };
        let check = |s: &crate::journal::JournalState| -> Option<Early> {
            let current = s.generation();
            let since_gen = match &since {
                None => current,
                Some(c) => {
                    // A mirror cannot answer for generations before it joined or missed.
                    if c.epoch != s.epoch() || c.generation < s.floor_generation() as f64 {
                        return Some(Early::Stale {
                            cursor: s.cursor(),
                            epoch: s.epoch().to_string(),
                            generation: current,
                            bucket: bucket_fields(s),
                        });
                    }
                    c.generation_at_most(current)
                }
            };
            let touched = if use_exact {
                match s.exact_touched_since_any(&exact_keys, since_gen) {
                    Some(true) => true,
                    exact => {
                        (!fallback.is_empty() && s.maybe_touched_since_any(&fallback, since_gen))
                            || (exact.is_none() && s.maybe_touched_since_any(&wait_keys, since_gen))
                    }
                }
            } else {
                s.maybe_touched_since_any(&wait_keys, since_gen)
            };
            if touched {
                return Some(Early::Touched { cursor: s.cursor(), bucket: bucket_fields(s) });
            }
            if timeout_ms == 0 {
                return Some(Early::Timeout { cursor: s.cursor(), bucket: bucket_fields(s) });
            }
            None
        };
        if control.is_aborted() {
            release.run();
            return send(Err(Error::Aborted));
        }
        match journal.check_or_wait(check, req, resolve) {
            Err(e) => {
                release.run();
                send(Err(e));
            }
            Ok(CheckOrWait::Answered(early, _unused)) => {
                release.run();
                let mk =
                    |touched: bool, stale: bool, cursor: String, epoch, generation, b: (i64, i64, i64)| WaitReply {
                        touched,
                        stale,
                        cursor,
                        epoch,
                        generation,
                        effective_wait_kind: kind,
                        bucket_max_source_offset_seq: b.0,
                        flush_at_ms: b.1,
                        bucket_start_ms: b.2,
                        cursor_through: b.0,
                        parked: false,
                    };
                let r = match early {
                    Early::Stale { cursor, epoch, generation, bucket } => {
                        self.record_wait(stream, "stale");
                        mk(false, true, cursor, Some(epoch), Some(generation), bucket)
                    }
                    Early::Touched { cursor, bucket } => {
                        self.record_wait(stream, "touched");
                        mk(true, false, cursor, None, None, bucket)
                    }
                    Early::Timeout { cursor, bucket } => {
                        self.record_wait(stream, "timeout");
                        mk(false, false, cursor, None, None, bucket)
                    }
                };
                send(Ok(r));
            }
            Ok(CheckOrWait::Resolved) => {}
            Ok(CheckOrWait::Waiting(id)) => {
                *control.parked.lock() = Some((journal.clone(), id));
                if control.is_aborted() {
                    if let Some((j, id)) = control.parked.lock().take() {
                        j.cancel(id);
                    }
                }
            }
        }
    }
}
