//! The touch engine: the native form of the reference's `TouchProcessorManager`. It joins the
//! store, the processor and the journals into what a server calls — touch config per stream,
//! template activation, the processing loop, waits, meta, stats — without leaving Rust between
//! an append and the wake-up it causes.
//!
//! - [`hot`]: hot interest from active waits (M19);
//! - [`policy`]: per-stream policy state (M5–M7, M11, M13, M16, M17);
//! - [`templates`]: the live templates registry (T1–T12);
//! - [`profile`]: stored profiles and touch state (C5, C6, S14, M22);
//! - [`wait`]: the wait request, its keys and its reply (W1–W6);
//! - [`runtime`]: the in-memory state of each stream;
//! - [`process`]: one processing batch and the loop that schedules them (M1–M18);
//! - this module: [`TouchEngine`], its waits, meta and stats.
//!
//! Processing is event-driven: the engine registers an append hook on the store, so a
//! committed append marks its stream dirty and wakes the loop at once; the interval tick stays
//! as a safety net (for rows written by another process, backoffs and upkeep).

pub mod hot;
pub mod policy;
pub mod process;
pub mod profile;
pub mod runtime;
pub mod templates;
pub mod wait;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::journal::{
    parse_cursor, wall_ms, CheckOrWait, Journal, JournalMeta, KeyIds, TotalStats, WaitRequest, WaiterId,
};
use crate::spec::{validate_state_protocol_profile, StateProtocolProfile, TouchConfig};
use crate::stats::StatsCollector;
use crate::store::{blocking, Reply, Store};
use hot::{HotLease, HotState, InterestMode};
use runtime::{hot_limits, RuntimeTotals, StreamRt};
use templates::{ActivateArgs, ActivateOutcome, LifecycleEvent, TemplateDecl, TemplateLimits, TemplateRegistry};
use wait::{catch_all_key_id, plan_keys, TouchMode, WaitArgs, WaitKind, WaitReply};

/// Engine options (the reference's `DS_TOUCH_*` settings).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Streams processed concurrently per tick (M2).
    pub workers: usize,
    /// The safety-net tick, in ms (M1); 0 disables it.
    pub check_interval_ms: u64,
    pub max_batch_rows: usize,
    pub max_batch_bytes: u64,
    /// Run the background loop. Without it, batches run only through `processBatch`.
    pub auto_process: bool,
    /// M17: `DS_BASE_WAL_GC_INTERVAL_MS` / `DS_BASE_WAL_GC_CHUNK_OFFSETS`.
    pub wal_gc_interval_ms: i64,
    pub wal_gc_chunk_offsets: i64,
    /// For a host that saves profiles in the file itself: how often the loop re-reads every
    /// state-protocol profile (0: never). A notified stream the engine does not know yet has
    /// its profile read at once either way.
    pub profile_poll_ms: u64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4),
            check_interval_ms: 250,
            max_batch_rows: 500,
            max_batch_bytes: 4 * 1024 * 1024,
            auto_process: true,
            wal_gc_interval_ms: 1000,
            wal_gc_chunk_offsets: 1_000_000,
            profile_poll_ms: 0,
        }
    }
}

/// Lifecycle events seen since open, by kind (T11).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LifecycleCounts {
    pub activated: u64,
    pub retired: u64,
    pub evicted: u64,
}

#[derive(Default)]
struct Signal {
    pending: bool,
    stop: bool,
}

/// A `meta(settle: "flush")` request waiting for its stream to settle.
struct Settle {
    stream: String,
    deadline_ms: i64,
    reply: Reply<TouchMetaView>,
}

pub(crate) struct State {
    pub streams: HashMap<String, StreamRt>,
    pub dirty: Vec<String>,
    pub dirty_set: HashSet<String>,
    pub scan_cursor: usize,
    pub journals_created: u64,
    pub lifecycle: LifecycleCounts,
    settles: Vec<Settle>,
    /// With `profile_poll_ms`: when profiles were last re-read, and streams notified that have
    /// no state-protocol profile (not read again until the next poll).
    pub last_profile_poll_ms: i64,
    pub foreign: HashSet<String>,
}

impl State {
    pub fn mark_dirty(&mut self, stream: &str) {
        if self.dirty_set.insert(stream.to_string()) {
            self.dirty.push(stream.to_string());
        }
    }
}

pub(crate) struct Inner {
    pub store: Store,
    pub opts: EngineOptions,
    pub state: Mutex<State>,
    pub registry: TemplateRegistry,
    pub stats: StatsCollector,
    signal: Mutex<Signal>,
    wake: Condvar,
    pub closed: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    opened_at_ms: i64,
    last_report_ms: Mutex<i64>,
}

/// The engine. Cheap to clone.
#[derive(Clone)]
pub struct TouchEngine {
    inner: Arc<Inner>,
}

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

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

/// `meta()`: the journal's meta plus the stream's runtime (M21, the `/touch/meta` fields).
#[derive(Debug, Clone)]
pub struct TouchMetaView {
    pub journal: JournalMeta,
    pub settled: bool,
    pub coarse_interval_ms: f64,
    pub touch_coalesce_window_ms: f64,
    pub active_templates: i64,
    pub lag_source_offsets: i64,
    pub touch_mode: TouchMode,
    /// `<epoch>-<processedThrough>` style offset of the checkpoint, `None` without a state.
    pub processed_through: Option<i64>,
    pub stream_epoch: i64,
    pub runtime: RuntimeView,
}

/// The hot counts and totals of one stream (M21).
#[derive(Debug, Clone, Default)]
pub struct RuntimeView {
    pub hot_fine_keys: usize,
    pub hot_templates: usize,
    pub hot_fine_keys_active: usize,
    pub hot_fine_keys_grace: usize,
    pub hot_templates_active: usize,
    pub hot_templates_grace: usize,
    pub fine_waiters_active: u64,
    pub coarse_waiters_active: u64,
    pub broad_fine_waiters_active: u64,
    pub hot_key_filtering_enabled: bool,
    pub hot_template_filtering_enabled: bool,
    pub totals: RuntimeTotals,
    pub journal: TotalStats,
}

/// Memory stats (seed `001`: `getMemoryStats`).
#[derive(Debug, Clone, Default)]
pub struct MemoryView {
    pub dirty_streams: usize,
    pub journals: usize,
    pub journals_created_total: u64,
    pub journal_filter_bytes_total: usize,
    pub fine_lag_coarse_only_streams: usize,
    pub touch_mode_streams: usize,
    pub fine_token_bucket_streams: usize,
    pub hot_fine_streams: usize,
    pub restricted_template_bucket_streams: usize,
    pub runtime_totals_streams: usize,
    pub template_last_seen_entries: usize,
    pub template_dirty_last_seen_entries: usize,
    pub template_rate_state_streams: usize,
}

/// One entry of `getTopStreams`.
#[derive(Debug, Clone)]
pub struct TopStream {
    pub stream: String,
    pub journal_filter_bytes: usize,
    pub dirty: bool,
    pub touch_mode: Option<TouchMode>,
}

/// Everything `stats()` reports.
#[derive(Debug, Clone)]
pub struct EngineStatsView {
    pub collector: crate::stats::StatsSnapshot,
    pub report_line: String,
    pub window_ms: f64,
    pub memory: MemoryView,
    pub top_streams: Vec<TopStream>,
    pub streams: Vec<(String, TouchMode, i64, RuntimeView)>,
    pub lifecycle: LifecycleCounts,
    pub store: crate::store::StoreStats,
}

impl TouchEngine {
    /// Opens the engine over `store`: loads every state-protocol profile, seeds the touch state
    /// of touch-enabled streams (M22), hooks appends and starts the loop.
    pub fn open(store: Store, opts: EngineOptions) -> Result<TouchEngine> {
        if store.is_closed() {
            return Err(Error::Closed("Store"));
        }
        let loaded: Vec<(String, StateProtocolProfile)> = blocking(|r| {
            store.query(
                |conn| {
                    let mut out = Vec::new();
                    for s in profile::list_state_protocol_streams(conn)? {
                        // A profile that no longer validates is skipped (the reference logs it).
                        if let Some(Ok(p)) = profile::read_profile(conn, &s)? {
                            out.push((s, p));
                        }
                    }
                    Ok(out)
                },
                r,
            )
        })?;
        let enabled: Vec<(String, StateProtocolProfile)> =
            loaded.iter().filter(|(_, p)| p.enabled_touch().is_some()).cloned().collect();
        if !enabled.is_empty() {
            blocking(|r| {
                store.write(
                    move |conn| {
                        for (s, p) in &enabled {
                            profile::sync_touch_state(conn, s, p)?;
                        }
                        Ok(())
                    },
                    r,
                )
            })?;
        }
        let now = wall_ms();
        let mut streams = HashMap::new();
        for (s, p) in loaded {
            streams.insert(s, StreamRt::new(p));
        }
        let inner = Arc::new(Inner {
            store: store.clone(),
            opts,
            state: Mutex::new(State {
                streams,
                dirty: Vec::new(),
                dirty_set: HashSet::new(),
                scan_cursor: 0,
                journals_created: 0,
                lifecycle: LifecycleCounts::default(),
                settles: Vec::new(),
                last_profile_poll_ms: now,
                foreign: HashSet::new(),
            }),
            registry: TemplateRegistry::default(),
            stats: StatsCollector::new(None),
            signal: Mutex::new(Signal::default()),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            thread: Mutex::new(None),
            opened_at_ms: now,
            last_report_ms: Mutex::new(0),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        store.add_append_hook(Arc::new(move |stream, _out, bytes| {
            if let Some(inner) = weak.upgrade() {
                inner.stats.record_ingested(bytes as f64);
                inner.stats.record_wal_commit_bytes(bytes as f64);
                inner.stats.record_stream_touched(stream);
                inner.notify(stream);
            }
        }));
        if inner.opts.auto_process {
            let loop_inner = inner.clone();
            let handle = std::thread::Builder::new()
                .name("dt-touch-engine".into())
                .spawn(move || loop_inner.run_loop())
                .map_err(|e| Error::Internal(format!("cannot start the engine loop: {e}")))?;
            *inner.thread.lock() = Some(handle);
            // Catch up with whatever was appended while no engine ran.
            let names: Vec<String> = inner.state.lock().streams.keys().cloned().collect();
            for n in names {
                inner.notify(&n);
            }
        }
        Ok(TouchEngine { inner })
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Marks the stream dirty and wakes the loop (M1; appends through the engine's store do
    /// this themselves).
    pub fn notify(&self, stream: &str) {
        self.inner.notify(stream);
    }

    /// Validates and saves a state-protocol profile (C5, C6) and syncs touch state.
    pub fn set_profile(&self, stream: &str, raw: &crate::jscompat::json::Value) -> Result<StateProtocolProfile> {
        self.check_open()?;
        let profile = validate_state_protocol_profile(raw, "profile").map_err(Error::InvalidTouchConfig)?;
        let p = profile.clone();
        let name = stream.to_string();
        crate::store::validate_stream_name(stream)?;
        blocking(|r| self.inner.store.write(move |conn| profile::persist_profile(conn, &name, &p), r))?;
        self.inner.adopt_profile(stream, profile.clone());
        self.inner.notify(stream);
        Ok(profile)
    }

    /// Re-reads the profiles of `streams` (every state-protocol stream when `None`) from the
    /// file and adopts them, for a host that saves profiles itself.
    pub fn reload_profiles(&self, streams: Option<Vec<String>>) -> Result<()> {
        self.check_open()?;
        self.inner.reload_profiles(streams)
    }

    /// The stream's profile as last saved, `None` when it has no state-protocol profile.
    pub fn profile(&self, stream: &str) -> Option<StateProtocolProfile> {
        self.inner.state.lock().streams.get(stream).map(|rt| rt.profile.clone())
    }

    /// The stream's enabled touch config (or an error saying why there is none).
    fn touch_config(&self, stream: &str) -> Result<TouchConfig> {
        let st = self.inner.state.lock();
        match st.streams.get(stream) {
            Some(rt) => rt.touch().cloned().ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into())),
            None => {
                drop(st);
                // Distinguish an unknown stream from one without touch.
                let exists = blocking(|r| {
                    let name = stream.to_string();
                    self.inner.store.get_stream(name, r)
                })?
                .is_some();
                if exists {
                    Err(Error::TouchNotEnabled("touch not enabled".into()))
                } else {
                    Err(Error::StreamNotFound { stream: stream.into() })
                }
            }
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed("TouchEngine"))
        } else {
            Ok(())
        }
    }

    /// The journal cursor of a touch-enabled stream (creating its journal, M20).
    pub fn cursor(&self, stream: &str) -> Result<String> {
        let cfg = self.touch_config(stream)?;
        let mut st = self.inner.state.lock();
        let rt = st.streams.get_mut(stream).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
        let (j, created) = rt.journal(&cfg);
        let c = j.cursor();
        if created {
            st.journals_created += 1;
        }
        Ok(c)
    }

    /// Activates templates (T1–T7, T13's TTL rules) and returns what the route returns.
    pub fn activate_templates(
        &self,
        stream: &str,
        templates: &[TemplateDecl],
        inactivity_ttl_ms: Option<f64>,
    ) -> Result<(ActivateOutcome, TemplateLimits)> {
        self.check_open()?;
        let cfg = self.touch_config(stream)?;
        let out = self.activate_inner(stream, &cfg, templates.to_vec(), inactivity_ttl_ms)?;
        let limits = TemplateLimits {
            max_active_per_stream: cfg.templates.max_active_templates_per_stream,
            max_active_per_entity: cfg.templates.max_active_templates_per_entity,
            activation_rate_per_minute: cfg.templates.activation_rate_limit_per_minute,
        };
        Ok((out, limits))
    }

    fn activate_inner(
        &self,
        stream: &str,
        cfg: &TouchConfig,
        templates: Vec<TemplateDecl>,
        ttl: Option<f64>,
    ) -> Result<ActivateOutcome> {
        let cursor = self.cursor(stream)?;
        let limits = TemplateLimits {
            max_active_per_stream: cfg.templates.max_active_templates_per_stream,
            max_active_per_entity: cfg.templates.max_active_templates_per_entity,
            activation_rate_per_minute: cfg.templates.activation_rate_limit_per_minute,
        };
        let ttl = ttl.unwrap_or(cfg.templates.default_inactivity_ttl_ms);
        let inner = self.inner.clone();
        let name = stream.to_string();
        let (out, active_from) = blocking(|r| {
            self.inner.store.write(
                move |conn| {
                    // T5 (B4): a new template covers every row not yet processed, not only rows
                    // appended after now, so that a change racing the activation is not missed.
                    let next: i64 =
                        conn.query_row("SELECT next_offset FROM streams WHERE stream=?1", [&name], |r| r.get(0))?;
                    let processed =
                        profile::get_touch_state(conn, &name)?.map(|s| s.processed_through + 1).unwrap_or(next);
                    let active_from = processed.min(next);
                    let out = inner.registry.activate(
                        conn,
                        &ActivateArgs {
                            stream: &name,
                            templates: &templates,
                            inactivity_ttl_ms: ttl,
                            limits,
                            active_from_touch_offset: &cursor,
                            active_from_source_offset: active_from,
                            now_ms: wall_ms(),
                        },
                    )?;
                    Ok((out, active_from))
                },
                r,
            )
        })?;
        self.inner.count_lifecycle(&out.lifecycle);
        self.cover_activation(stream, &out, active_from);
        Ok(out)
    }

    /// A batch that read the stream's templates before an activation committed, but processes
    /// rows from the new templates' `active_from_source_offset`, emits none of their keys; a
    /// client that took its cursor before those touches were flushed would miss its changes.
    /// Such rows get the new templates' keys and the catch-all instead: now, if a batch
    /// already moved the checkpoint past them, or when the running batch ends.
    fn cover_activation(&self, stream: &str, out: &ActivateOutcome, active_from: i64) {
        let keys: Vec<u32> = out
            .activated
            .iter()
            .filter_map(|a| crate::keys::template_bits(&a.template_id))
            .map(|bits| crate::keys::key_id(crate::keys::template_key(bits)))
            .collect();
        if keys.is_empty() {
            return;
        }
        let now = {
            let mut st = self.inner.state.lock();
            let Some(rt) = st.streams.get_mut(stream) else { return };
            if rt.busy {
                rt.late_templates.extend(keys.iter().map(|&k| (k, active_from)));
                return;
            }
            match (rt.processed_through, &rt.journal) {
                (Some(p), Some(j)) if p >= active_from => (j.clone(), p),
                _ => return,
            }
        };
        touch_late_templates(&now.0, &keys, now.1);
    }

    /// A wait (W1–W6). `reply` is called exactly once: with the reply, or with an error
    /// ([`Error::Aborted`] after [`WaitControl::abort`]).
    pub fn wait(&self, stream: &str, args: WaitArgs, reply: Reply<WaitReply>) -> Arc<WaitControl> {
        let control = Arc::new(WaitControl::default());
        if let Err(e) = self.check_open() {
            reply(Err(e));
            return control;
        }
        let cfg = match self.touch_config(stream) {
            Ok(c) => c,
            Err(e) => {
                reply(Err(e));
                return control;
            }
        };
        let engine = self.clone();
        let stream = stream.to_string();
        let ctl = control.clone();
        // Activation and entity lookups touch SQLite; the common path does not and runs here.
        let needs_store = !args.declare_templates.is_empty()
            || (!args.template_ids_used.is_empty()
                && (args.interest == InterestMode::Coarse || self.touch_mode(&stream) == TouchMode::CoarseOnly));
        if needs_store {
            std::thread::spawn(move || engine.wait_inner(&stream, cfg, args, ctl, reply));
        } else {
            engine.wait_inner(&stream, cfg, args, ctl, reply);
        }
        control
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
        let planned = (|| -> Result<wait::WaitPlan> {
            if args.interest == InterestMode::Fine && !args.template_ids_used.is_empty() {
                self.heartbeat(stream, &cfg, &args.template_ids_used);
            }
            if !args.declare_templates.is_empty() {
                self.activate_inner(stream, &cfg, args.declare_templates.clone(), args.inactivity_ttl_ms)?;
            }
            let mode = self.touch_mode(stream);
            let kind = wait::choose_kind(&args, mode);
            let entities = if kind == WaitKind::TableKey && !args.template_ids_used.is_empty() {
                let ids = args.template_ids_used.clone();
                let name = stream.to_string();
                blocking(|r| self.inner.store.query(move |c| templates::entities_for_templates(c, &name, &ids), r))?
            } else {
                Vec::new()
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

impl Drop for TouchEngine {
    fn drop(&mut self) {
        // The last handle: stop the loop without waiting (close() is the orderly way).
        if Arc::strong_count(&self.inner) == 2 && self.inner.thread.lock().is_some() {
            self.inner.stop_loop();
        }
    }
}

impl Inner {
    pub fn notify(&self, stream: &str) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.state.lock().mark_dirty(stream);
        let mut s = self.signal.lock();
        s.pending = true;
        self.wake.notify_one();
    }

    fn stop_loop(&self) {
        let mut s = self.signal.lock();
        s.stop = true;
        self.wake.notify_all();
    }

    fn count_lifecycle(&self, events: &[LifecycleEvent]) {
        let mut st = self.state.lock();
        for e in events {
            match e {
                LifecycleEvent::Activated { .. } => st.lifecycle.activated += 1,
                LifecycleEvent::Retired { .. } => st.lifecycle.retired += 1,
                LifecycleEvent::Evicted { .. } => st.lifecycle.evicted += 1,
            }
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

/// The template keys of templates activated during a batch, and the catch-all, at the
/// checkpoint the batch reached (see `TouchEngine::cover_activation`).
pub(crate) fn touch_late_templates(journal: &Journal, keys: &[u32], through: i64) {
    let touch = |key_id| crate::journal::Touch { key_id, source_offset: Some(through), routing_key: None };
    journal.touch_many(keys.iter().copied().chain([catch_all_key_id()]).map(touch));
}

fn bucket_fields(s: &crate::journal::JournalState) -> (i64, i64, i64) {
    (s.last_flushed_source_offset(), s.last_flush_at_ms(), s.last_bucket_start_ms())
}

impl TouchEngine {
    fn heartbeat(&self, stream: &str, cfg: &TouchConfig, ids: &[String]) {
        let now = wall_ms();
        self.inner.registry.heartbeat(stream, ids, now);
        let interval = cfg.templates.last_seen_persist_interval_ms;
        if self.inner.registry.has_due_last_seen(now, interval) {
            let inner = self.inner.clone();
            self.inner.store.write(move |conn| inner.registry.flush_last_seen(conn, now, interval), Box::new(|_| {}));
        }
    }

    fn record_wait(&self, stream: &str, outcome: &'static str) {
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
        plan: wait::WaitPlan,
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
            let lease = rt.hot.get_or_insert_with(HotState::default).begin(
                args.interest,
                &plan.hot_key_ids,
                &args.template_ids_used,
                &limits,
                now,
            );
            if created {
                st.journals_created += 1;
            }
            (j, lease)
        };
        let release = {
            let inner = self.inner.clone();
            let name = stream.to_string();
            Once::new(move || {
                let mut st = inner.state.lock();
                if let Some(rt) = st.streams.get_mut(&name) {
                    if let Some(h) = &mut rt.hot {
                        h.release(&lease, &limits, wall_ms());
                        if !h.sweep(&limits, wall_ms(), true) {
                            rt.hot = None;
                        }
                    }
                }
            })
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
            Box::new(move |hit: Option<crate::journal::TouchHit>| {
                release.run();
                if control.is_aborted() {
                    return send(Err(Error::Aborted));
                }
                let (cursor, bucket) = journal.read(|s| (s.cursor(), bucket_fields(s)));
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
                    if c.epoch != s.epoch() {
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

    /// `/touch/meta` (M21); with `settle`, waits until the stream has no backlog and no
    /// pending bucket, or until `timeout_ms`.
    pub fn meta(&self, stream: &str, settle: bool, timeout_ms: f64, reply: Reply<TouchMetaView>) {
        if let Err(e) = self.check_open() {
            return reply(Err(e));
        }
        let cfg = match self.touch_config(stream) {
            Ok(c) => c,
            Err(e) => return reply(Err(e)),
        };
        if let Err(e) = self.cursor(stream) {
            return reply(Err(e));
        }
        let engine = self.clone();
        let name = stream.to_string();
        let deadline_ms = wall_ms() + timeout_ms.clamp(0.0, wait::MAX_TIMEOUT_MS) as i64;
        std::thread::spawn(move || {
            let view = engine.inner.meta_view(&name, &cfg);
            match view {
                Ok(v) if settle && !v.settled && wall_ms() < deadline_ms => {
                    let mut st = engine.inner.state.lock();
                    st.settles.push(Settle { stream: name, deadline_ms, reply });
                    drop(st);
                    engine.inner.poke();
                }
                other => reply(other),
            }
        });
    }

    /// Stats: the collector's window (reset), the reporter line, memory and per-stream totals.
    pub fn stats(&self) -> EngineStatsView {
        let now = wall_ms();
        let window_ms = {
            let mut last = self.inner.last_report_ms.lock();
            let w = if *last == 0 { (now - self.inner.opened_at_ms).max(1) } else { (now - *last).max(1) };
            *last = now;
            w as f64
        };
        let collector = self.inner.stats.snapshot_and_reset();
        let store = self.inner.store.stats();
        let (memory, top_streams) = self.memory(5);
        let st = self.inner.state.lock();
        let mut streams = Vec::new();
        for (name, rt) in &st.streams {
            if let Some(cfg) = rt.touch() {
                streams.push((name.clone(), rt.runtime_touch_mode(), rt.lag_source_offsets, runtime_view(rt, cfg)));
            }
        }
        streams.sort_by(|a, b| a.0.cmp(&b.0));
        let ctx = crate::stats::ReportContext {
            window_ms,
            total_streams: st.streams.len() as u64,
            segments_waiting: 0,
            wal_db_bytes: store.wal_file_bytes as f64,
            meta_db_bytes: store.db_file_bytes as f64,
            reject_active_ms: 0.0,
            max_rss_bytes: None,
        };
        let report_line = crate::stats::report_line(&collector, &ctx);
        EngineStatsView {
            collector,
            report_line,
            window_ms,
            memory,
            top_streams,
            streams,
            lifecycle: st.lifecycle,
            store,
        }
    }

    /// Memory counters and the `top` streams by journal filter bytes (the reference's
    /// `getMemoryStats` / `getTopStreams`); unlike [`TouchEngine::stats`], resets nothing.
    pub fn memory(&self, top: usize) -> (MemoryView, Vec<TopStream>) {
        let st = self.inner.state.lock();
        let mut memory = MemoryView {
            dirty_streams: st.dirty.len(),
            journals_created_total: st.journals_created,
            ..Default::default()
        };
        let mut tops = Vec::new();
        for (name, rt) in &st.streams {
            if let Some(j) = &rt.journal {
                memory.journals += 1;
                memory.journal_filter_bytes_total += j.filter_bytes();
                tops.push(TopStream {
                    stream: name.clone(),
                    journal_filter_bytes: j.filter_bytes(),
                    dirty: st.dirty_set.contains(name),
                    touch_mode: rt.touch_mode,
                });
            }
            memory.fine_lag_coarse_only_streams += usize::from(rt.lag.suppressed);
            memory.touch_mode_streams += usize::from(rt.touch_mode.is_some());
            memory.fine_token_bucket_streams += usize::from(rt.tokens.is_some());
            memory.hot_fine_streams += usize::from(rt.hot.is_some());
            memory.runtime_totals_streams += 1;
        }
        drop(st);
        let reg = self.inner.registry.memory();
        memory.template_last_seen_entries = reg.last_seen_entries;
        memory.template_dirty_last_seen_entries = reg.dirty_last_seen_entries;
        memory.template_rate_state_streams = reg.rate_state_streams;
        tops.sort_by(|a, b| b.journal_filter_bytes.cmp(&a.journal_filter_bytes).then_with(|| a.stream.cmp(&b.stream)));
        tops.truncate(top);
        (memory, tops)
    }

    /// Stops the loop, settles every pending wait (`touched: false`), flushes template
    /// last-seen times, then replies. The store stays open (the engine does not own it).
    pub fn close(&self, reply: Reply<()>) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return reply(Ok(()));
        }
        self.inner.stop_loop();
        let inner = self.inner.clone();
        std::thread::spawn(move || {
            if let Some(t) = inner.thread.lock().take() {
                let _ = t.join();
            }
            let (journals, settles): (Vec<Journal>, Vec<Settle>) = {
                let mut st = inner.state.lock();
                (st.streams.values().filter_map(|rt| rt.journal.clone()).collect(), std::mem::take(&mut st.settles))
            };
            for j in journals {
                j.stop();
            }
            let _ = inner.persist_checkpoints(true);
            for s in settles {
                (s.reply)(Err(Error::Closed("TouchEngine")));
            }
            let registry_inner = inner.clone();
            let now = wall_ms();
            let _ = blocking(|r| {
                inner.store.write(move |conn| registry_inner.registry.flush_last_seen(conn, now, 0.0).map(|_| ()), r)
            });
            reply(Ok(()));
        });
    }
}

fn runtime_view(rt: &StreamRt, cfg: &TouchConfig) -> RuntimeView {
    let snap = match &rt.hot {
        Some(h) => h.snapshot(),
        None => hot::HotSnapshot::empty(),
    };
    let _ = cfg;
    RuntimeView {
        hot_fine_keys: snap.hot_key_count(),
        hot_templates: snap.hot_template_count(),
        hot_fine_keys_active: snap.hot_key_active,
        hot_fine_keys_grace: snap.hot_key_grace,
        hot_templates_active: snap.hot_template_active,
        hot_templates_grace: snap.hot_template_grace,
        fine_waiters_active: snap.fine_waiters,
        coarse_waiters_active: snap.coarse_waiters,
        broad_fine_waiters_active: snap.broad_fine_waiters,
        hot_key_filtering_enabled: snap.key_filtering,
        hot_template_filtering_enabled: snap.template_filtering,
        totals: rt.totals,
        journal: rt.journal.as_ref().map(|j| j.total_stats()).unwrap_or_default(),
    }
}

impl Inner {
    /// Takes `profile` as the stream's (already saved), keeping its runtime state.
    pub(crate) fn adopt_profile(&self, stream: &str, profile: StateProtocolProfile) {
        let mut st = self.state.lock();
        match st.streams.get_mut(stream) {
            Some(rt) => {
                if rt.profile == profile {
                    return;
                }
                let journal_reset =
                    rt.touch().map(|t| t.memory.clone()) != profile.enabled_touch().map(|t| t.memory.clone());
                if profile.enabled_touch().is_none() {
                    rt.processed_through = None;
                }
                rt.profile = profile;
                if journal_reset && rt.journal.as_ref().is_some_and(|j| j.active_waiters() == 0) {
                    // B14: new `touch.memory` settings take effect with a new journal
                    // (its cursor is new: clients see `stale`).
                    if let Some(j) = rt.journal.take() {
                        j.stop();
                    }
                }
            }
            None => {
                st.streams.insert(stream.to_string(), StreamRt::new(profile));
            }
        }
    }

    /// Reads the profiles of `streams` (every state-protocol stream when `None`) from the file
    /// and adopts them: for a host that saves profiles itself (`EngineOptions::profile_poll_ms`).
    /// A listed stream that is no longer state-protocol keeps no touch config. A stored profile
    /// that does not validate (a host mid-way through rewriting it, a corrupt row) is not
    /// adopted: the stream keeps the config it has, so its routes keep answering and its
    /// journal and cursors survive until a valid profile is read (deviations.md, B7).
    pub(crate) fn reload_profiles(&self, streams: Option<Vec<String>>) -> Result<()> {
        let all = streams.is_none();
        let read: Vec<(String, Option<std::result::Result<StateProtocolProfile, String>>)> = blocking(|r| {
            self.store.query(
                move |conn| {
                    let names = match streams {
                        Some(list) => list,
                        None => profile::list_state_protocol_streams(conn)?,
                    };
                    let mut out = Vec::with_capacity(names.len());
                    for s in names {
                        let p = profile::read_profile(conn, &s)?;
                        out.push((s, p));
                    }
                    Ok(out)
                },
                r,
            )
        })?;
        let listed: HashSet<String> = read.iter().map(|(s, _)| s.clone()).collect();
        for (stream, p) in read {
            match p {
                Some(Ok(p)) => self.adopt_profile(&stream, p),
                Some(Err(_)) => {}
                None if self.state.lock().streams.contains_key(&stream) => {
                    self.adopt_profile(&stream, StateProtocolProfile { touch: None })
                }
                None => {}
            }
        }
        if all {
            let gone: Vec<String> = {
                let st = self.state.lock();
                st.streams
                    .iter()
                    .filter(|(n, rt)| rt.touch().is_some() && !listed.contains(*n))
                    .map(|(n, _)| n.clone())
                    .collect()
            };
            for stream in gone {
                self.adopt_profile(&stream, StateProtocolProfile { touch: None });
            }
        }
        Ok(())
    }

    pub(crate) fn meta_view(&self, stream: &str, cfg: &TouchConfig) -> Result<TouchMetaView> {
        let name = stream.to_string();
        let (active, state, stream_row) = blocking(|r| {
            self.store.query(
                move |c| {
                    Ok((
                        templates::active_count(c, &name),
                        profile::get_touch_state(c, &name)?,
                        crate::store::query_stream(c, &name)?,
                    ))
                },
                r,
            )
        })?;
        let stream_row = stream_row.ok_or_else(|| Error::StreamNotFound { stream: stream.into() })?;
        let mut st = self.state.lock();
        let rt = st.streams.get_mut(stream).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
        let (j, _) = rt.journal(cfg);
        let journal = j.meta();
        let processed = rt.processed_through.or(state.map(|s| s.processed_through));
        let lag = processed.map(|p| (stream_row.next_offset - 1 - p).max(0)).unwrap_or(0);
        let runtime = runtime_view(rt, cfg);
        Ok(TouchMetaView {
            settled: journal.pending_keys == 0 && lag == 0 && !rt.busy,
            journal,
            coarse_interval_ms: cfg.coarse_interval_ms,
            touch_coalesce_window_ms: cfg.touch_coalesce_window_ms,
            active_templates: active,
            lag_source_offsets: lag,
            touch_mode: rt.runtime_touch_mode(),
            processed_through: state.map(|_| processed.unwrap_or(-1)),
            stream_epoch: stream_row.epoch,
            runtime,
        })
    }

    /// Wakes the loop without marking a stream dirty.
    fn poke(&self) {
        let mut s = self.signal.lock();
        s.pending = true;
        self.wake.notify_one();
    }
}
