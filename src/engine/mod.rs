//! The touch engine: the native form of the reference's `TouchProcessorManager`. It joins the
//! store, the processor and the journals into what a server calls — touch config per stream,
//! template activation, the processing loop, waits, meta, stats — without leaving Rust between
//! an append and the wake-up it causes.
//!
//! - [`hot`]: hot interest from active waits (M19);
//! - [`interest`]: hot interest and template heartbeats held by callers outside a wait;
//! - [`policy`]: per-stream policy state (M5–M7, M11, M13, M16, M17);
//! - [`templates`]: the live templates registry (T1–T12);
//! - [`profile`]: stored profiles and touch state (C5, C6, S14, M22);
//! - [`wait`]: waits (W1–W6): the request, its keys and its reply, and parking it in the
//!   stream's journal;
//! - [`views`]: what `meta()`, `stats()` and `memory()` report;
//! - [`stats`]: the stats collector and the reporter line (X1–X5);
//! - [`records`]: per-batch records, lifecycle events, WAL GC and failures for a host's
//!   metrics (`EngineOptions::records`);
//! - [`fanout`]: the engine's role in the fan-out: a writer's flushes and beats for edges, or
//!   an edge's mirrors of them;
//! - [`options`]: the engine's options, their defaults and bounds;
//! - [`keep`]: journals taken up at open and kept at close ([`crate::durable`]);
//! - [`runtime`]: the in-memory state of each stream;
//! - [`process`]: the processing loop that schedules batches, and a pass on demand (M1, M2,
//!   M16–M18);
//! - [`batch`]: one processing batch of one stream (M3–M15);
//! - this module: [`TouchEngine`]: opening, profiles, templates and closing.
//!
//! Processing is event-driven: the engine registers an append hook on the store, so a
//! committed append marks its stream dirty and wakes the loop at once; the interval tick stays
//! as a safety net (for rows written by another process, backoffs and upkeep).

mod batch;
pub mod fanout;
pub mod hot;
pub mod interest;
pub mod keep;
pub mod options;
pub mod policy;
pub mod process;
pub mod profile;
pub mod records;
pub mod runtime;
pub mod stats;
pub mod templates;
pub mod views;
pub mod wait;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use rusqlite::OptionalExtension;

use crate::durable::JournalDir;
use crate::error::{Error, Result};
use crate::journal::{wall_ms, Journal};
use crate::spec::{validate_state_protocol_profile, StateProtocolProfile, TouchConfig};
use crate::store::{blocking, Reply, Store};
use fanout::Fanout;
pub use options::EngineOptions;
use runtime::{Source, StreamRt};
use stats::StatsCollector;
use templates::{ActivateArgs, ActivateOutcome, LifecycleEvent, TemplateDecl, TemplateLimits, TemplateRegistry};
pub use views::{EngineStatsView, MemoryView, RuntimeView, TopStream, TouchMetaView};
use wait::catch_all_key_id;
pub use wait::WaitControl;

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
    /// Numbers profile adoptions ([`StreamRt::profile_seq`]).
    pub profile_seq: u64,
    /// Adoptions that changed a stream's profile or added a stream.
    pub profiles_changed: u64,
    /// Dirty streams the last tick left for later because nobody listens to them (idle), and
    /// when the first of them is due (`Inner::tick`).
    pub deferred: HashSet<String>,
    pub deferred_until: Option<std::time::Instant>,
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
    pub records: records::RecordQueue,
    signal: Mutex<Signal>,
    wake: Condvar,
    pub closed: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    opened_at_ms: i64,
    last_report_ms: Mutex<i64>,
    leases: Mutex<interest::Leases>,
    /// `tick()` calls waiting for a pass, and whether a pass's thread runs (one at a time).
    ticks: Mutex<TickQueue>,
    /// Without the loop: whether the thread answering `meta(settle)` runs.
    settle_poller: AtomicBool,
    /// The engine's role in the fan-out, if it has one.
    pub fanout: Option<Fanout>,
    /// Where journals are kept across restarts ([`EngineOptions::keep_cursors`]).
    pub kept: Option<JournalDir>,
    /// What taking the kept journals up did at open.
    pub restored: keep::RestoreReport,
}

#[derive(Default)]
struct TickQueue {
    pending: Vec<Reply<process::TickReport>>,
    running: bool,
}

/// The engine. Cheap to clone.
#[derive(Clone)]
pub struct TouchEngine {
    inner: Arc<Inner>,
}

impl TouchEngine {
    /// Opens the engine over `store`: checks `opts` ([`EngineOptions::validate`]), loads every
    /// state-protocol profile, seeds the touch state of touch-enabled streams (M22), hooks
    /// appends and starts the loop.
    pub fn open(store: Store, mut opts: EngineOptions) -> Result<TouchEngine> {
        opts.validate()?;
        if store.is_closed() {
            return Err(Error::Closed("Store"));
        }
        let fanout = opts.fanout.clone().map(Fanout::new);
        if let Some(edge) = fanout.as_ref().and_then(Fanout::as_edge) {
            edge.restrict(&mut opts);
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
        let folder = JournalDir::of_store(store.path()).filter(|_| opts.keep_cursors);
        let kept = match folder {
            Some(path) => match open_journal_dir(&path) {
                Ok(dir) => Some(dir),
                Err(e) => {
                    eprintln!(
                        "durable-touch: cannot open the journal folder {} ({e}): cursors will be stale after a restart",
                        path.display()
                    );
                    None
                }
            },
            None => None,
        };
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
            let rt = new_stream_rt(fanout.as_ref(), &kept, &s, p);
            streams.insert(s, rt);
        }
        let restored = match &kept {
            Some(dir) => keep::restore_all(&store, dir, &mut streams)?,
            None => keep::RestoreReport::default(),
        };
        let records = records::RecordQueue::new(opts.records);
        let inner = Arc::new(Inner {
            store: store.clone(),
            opts,
            records,
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
                profile_seq: 0,
                profiles_changed: 0,
                deferred: HashSet::new(),
                deferred_until: None,
            }),
            registry: TemplateRegistry::default(),
            stats: StatsCollector::new(None),
            signal: Mutex::new(Signal::default()),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            thread: Mutex::new(None),
            opened_at_ms: now,
            last_report_ms: Mutex::new(0),
            leases: Mutex::new(interest::Leases::default()),
            ticks: Mutex::new(TickQueue::default()),
            settle_poller: AtomicBool::new(false),
            fanout,
            kept,
            restored,
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
        // The fan-out's link exists before the first batch can flush: a writer's edges get
        // every flush, those replayed from a kept log first (the kill may have kept them from
        // being published; an edge ignores what it has applied).
        if let Some(f) = &inner.fanout {
            if let Err(e) = f.start(&inner) {
                inner.closed.store(true, Ordering::Release);
                return Err(e);
            }
        }
        keep::republish(&inner);
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
        self.writer_only()?;
        let profile = validate_state_protocol_profile(raw, "profile").map_err(Error::InvalidTouchConfig)?;
        let p = profile.clone();
        let name = stream.to_string();
        crate::store::validate_stream_name(stream)?;
        blocking(|r| self.inner.store.write(move |conn| profile::persist_profile(conn, &name, &p), r))?;
        self.inner.adopt_profile(stream, profile.clone());
        self.inner.notify(stream);
        self.inner.beat_now();
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

    /// The journal of a touch-enabled stream (M20), created if `create` (the reference's
    /// `getOrCreateJournal`), else `None` until a wait, meta read or batch created it
    /// (`getJournalIfExists`). Touches and waits through it reach the engine's own waiters.
    pub fn journal(&self, stream: &str, create: bool) -> Result<Option<Journal>> {
        self.check_open()?;
        let cfg = self.touch_config(stream)?;
        let mut st = self.inner.state.lock();
        let rt = st.streams.get_mut(stream).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
        if !create {
            return Ok(rt.journal.clone());
        }
        let (j, created) = rt.journal(&cfg);
        let j = j.clone();
        if created {
            st.journals_created += 1;
        }
        Ok(Some(j))
    }

    /// One processing pass now, whether or not the loop runs (the reference manager's
    /// `tick()`): see [`Inner::tick_now`]. `reply` is called on the pass's thread once every
    /// row committed before the call is processed and its touches are in the journals. One
    /// pass runs at a time: calls made while one runs are answered together by the next.
    pub fn tick(&self, reply: Reply<process::TickReport>) {
        if let Err(e) = self.check_open() {
            return reply(Err(e));
        }
        let start = {
            let mut q = self.inner.ticks.lock();
            q.pending.push(reply);
            !std::mem::replace(&mut q.running, true)
        };
        if !start {
            return; // the running pass's thread takes it up after that pass
        }
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new().name("dt-touch-tick".into()).spawn(move || loop {
            // Every tick asked for before this pass starts is answered by it.
            let replies = {
                let mut q = inner.ticks.lock();
                if q.pending.is_empty() {
                    q.running = false;
                    return;
                }
                std::mem::take(&mut q.pending)
            };
            let r = crate::error::catch_panic(|| inner.tick_now());
            for reply in replies {
                reply(r.clone());
            }
        });
        if let Err(e) = spawned {
            let replies = {
                let mut q = self.inner.ticks.lock();
                q.running = false;
                std::mem::take(&mut q.pending)
            };
            for reply in replies {
                reply(Err(Error::Internal(format!("cannot start a tick thread: {e}"))));
            }
        }
    }

    /// Drains the records kept since the last call (nothing unless opened with
    /// `EngineOptions::records`; see [`records`]). Works after `close` too.
    pub fn take_records(&self) -> records::Records {
        self.inner.records.take()
    }

    /// Activates templates (T1–T7, T13's TTL rules) and returns what the route returns.
    pub fn activate_templates(
        &self,
        stream: &str,
        templates: &[TemplateDecl],
        inactivity_ttl_ms: Option<f64>,
    ) -> Result<(ActivateOutcome, TemplateLimits)> {
        self.check_open()?;
        self.writer_only()?;
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
        // No batch of the stream runs until the activation has committed (or failed): the rows
        // processed before it are covered inside its transaction, and every batch after it
        // reads the new templates.
        let hold = self.inner.hold_stream(stream);
        let processed = hold.as_ref().and_then(StreamHold::processed);
        let out = blocking(|r| {
            self.inner.store.write(
                move |conn| {
                    // T5 (B4): a new template covers every row not yet processed, not only rows
                    // appended after now, so that a change racing the activation is not missed.
                    // The stream may have been deleted since the config was read.
                    let next: i64 = conn
                        .query_row(
                            "SELECT next_offset FROM streams WHERE stream=?1 AND (stream_flags & ?2) = 0",
                            rusqlite::params![&name, crate::store::STREAM_FLAG_DELETED],
                            |r| r.get(0),
                        )
                        .optional()?
                        .ok_or_else(|| Error::StreamNotFound { stream: name.clone() })?;
                    let processed_stored =
                        profile::get_touch_state(conn, &name)?.map(|s| s.processed_through + 1).unwrap_or(next);
                    let active_from = processed_stored.min(next);
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
                    if let Some((journal, through)) = &processed {
                        cover_activation(journal, *through, &out, active_from);
                    }
                    Ok(out)
                },
                r,
            )
        })?;
        drop(hold);
        self.inner.count_lifecycle(&out.lifecycle);
        if out.activated.iter().any(|a| !a.was_active) {
            self.inner.beat_now();
        }
        Ok(out)
    }
}

/// A batch processes rows with the templates it read when it began; rows processed before an
/// activation, from its `active_from_source_offset` on (the checkpoint in memory, `through`,
/// runs ahead of the stored one that offset comes from), emitted none of the new templates'
/// keys, and a client that took its cursor before them would miss their changes. They get the
/// new templates' keys and the catch-all, flushed (and logged, with kept journals) inside the
/// activation's transaction while the stream is held ([`Inner::hold_stream`]): a crash after
/// the commit finds them in the journal, and no batch ran between. A template that was active
/// already needs none of this.
fn cover_activation(journal: &Journal, through: i64, out: &ActivateOutcome, active_from: i64) {
    let keys: Vec<u32> = out
        .activated
        .iter()
        .filter(|a| !a.was_active)
        .filter_map(|a| crate::keys::template_bits(&a.template_id))
        .map(|bits| crate::keys::key_id(crate::keys::template_key(bits)))
        .collect();
    if keys.is_empty() || through < active_from {
        return;
    }
    journal.touch_many(late_template_touches(&keys, through));
    journal.flush();
}

/// A stream held by an activation ([`Inner::hold_stream`]): no batch of it starts until this
/// is dropped, which hands the stream back to the loop.
pub(crate) struct StreamHold<'a> {
    inner: &'a Inner,
    stream: String,
}

impl StreamHold<'_> {
    /// The stream's journal and the last row its batches processed, which stay as they are
    /// while it is held.
    fn processed(&self) -> Option<(Journal, i64)> {
        let st = self.inner.state.lock();
        let rt = st.streams.get(&self.stream)?;
        Some((rt.journal.clone()?, rt.processed_through?))
    }
}

impl Drop for StreamHold<'_> {
    fn drop(&mut self) {
        if let Some(rt) = self.inner.state.lock().streams.get_mut(&self.stream) {
            rt.busy = false;
        }
        // Rows appended meanwhile found the stream held: process them now.
        self.inner.notify(&self.stream);
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
    /// Waits for the stream's running batch to end, then keeps any other from starting until
    /// the returned hold is dropped; `None` if the stream has no runtime. A batch does not
    /// start while a hold waits, so a backlog cannot keep an activation waiting.
    pub(crate) fn hold_stream(&self, stream: &str) -> Option<StreamHold<'_>> {
        loop {
            {
                let mut st = self.state.lock();
                let rt = st.streams.get_mut(stream)?;
                if !rt.busy {
                    rt.busy = true;
                    rt.hold_wanted = false;
                    return Some(StreamHold { inner: self, stream: stream.to_string() });
                }
                rt.hold_wanted = true;
            }
            std::thread::sleep(process::BUSY_POLL);
        }
    }

    pub fn notify(&self, stream: &str) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        {
            let mut st = self.state.lock();
            if let Some(rt) = st.streams.get_mut(stream) {
                rt.dirty_since_ms.get_or_insert_with(wall_ms);
            }
            st.mark_dirty(stream);
            // An idle stream the loop deferred: the loop wakes at its deadline (or when someone
            // starts listening, `poke_if_deferred`), not at every append.
            if st.deferred.contains(stream) {
                return;
            }
        }
        let mut s = self.signal.lock();
        s.pending = true;
        self.wake.notify_one();
    }

    /// Wakes the loop if it deferred `stream` as idle: a waiter (or a settle) now listens, so
    /// its rows are processed at once.
    pub(crate) fn poke_if_deferred(&self, stream: &str) {
        if self.state.lock().deferred.contains(stream) {
            self.poke();
        }
    }

    fn stop_loop(&self) {
        let mut s = self.signal.lock();
        s.stop = true;
        self.wake.notify_all();
    }

    fn count_lifecycle(&self, events: &[LifecycleEvent]) {
        self.records.lifecycle(events);
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

/// The touches of [`cover_activation`]: each key and the catch-all at `through`.
pub(crate) fn late_template_touches(keys: &[u32], through: i64) -> impl Iterator<Item = crate::journal::Touch> + '_ {
    let touch = move |key_id| crate::journal::Touch { key_id, source_offset: Some(through), routing_key: None };
    keys.iter().copied().chain((!keys.is_empty()).then(catch_all_key_id)).map(touch)
}

impl TouchEngine {
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
            // Pending touches are flushed (and published, and logged) before the journals are
            // kept and stopped: their rows' checkpoint may be written already.
            let (journals, settles): (Vec<(Journal, Option<crate::durable::StreamLog>)>, Vec<Settle>) = {
                let mut st = inner.state.lock();
                let journals =
                    st.streams.values_mut().filter_map(|rt| Some((rt.journal.clone()?, rt.kept.take()))).collect();
                (journals, std::mem::take(&mut st.settles))
            };
            for (j, _) in &journals {
                j.flush();
            }
            if let Some(f) = &inner.fanout {
                f.close();
            }
            keep::close_all(inner.kept.as_ref(), &journals);
            for (j, _) in journals {
                j.stop();
            }
            let _ = inner.persist_checkpoints(true);
            if let Some(dir) = &inner.kept {
                dir.release();
            }
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

/// Opens the store's journal folder, waiting up to [`JOURNAL_DIR_WAIT`] for an engine closing
/// (or a handle dropped without close, whose journals' timers still hold it) to let it go.
fn open_journal_dir(path: &std::path::Path) -> std::io::Result<JournalDir> {
    let until = std::time::Instant::now() + JOURNAL_DIR_WAIT;
    loop {
        match JournalDir::open(path.to_path_buf()) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// How long [`open_journal_dir`] waits for another engine to let the folder go.
const JOURNAL_DIR_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A stream's runtime: its journal's source is the fan-out role's (a writer's publishes its
/// flushes, an edge's is a mirror), and it is kept when journals are kept.
fn new_stream_rt(
    fanout: Option<&Fanout>,
    kept: &Option<JournalDir>,
    stream: &str,
    profile: StateProtocolProfile,
) -> StreamRt {
    let source = fanout.map_or(Source::Local, |f| f.source(stream));
    let mut rt = StreamRt::new(profile, source);
    if let Some(dir) = kept {
        rt.keep = Some((dir.clone(), stream.to_string()));
    }
    rt
}

impl Inner {
    /// Takes `profile` as the stream's (already saved), keeping its runtime state.
    pub(crate) fn adopt_profile(&self, stream: &str, profile: StateProtocolProfile) {
        self.adopt_profile_in(&mut self.state.lock(), stream, profile)
    }

    /// [`Inner::adopt_profile`] under the lock the caller holds (an edge gives the stream its
    /// mirror in the same critical section).
    pub(crate) fn adopt_profile_in(&self, st: &mut State, stream: &str, profile: StateProtocolProfile) {
        st.profile_seq += 1;
        let seq = st.profile_seq;
        if st.streams.get(stream).is_none_or(|rt| rt.profile != profile) {
            st.profiles_changed += 1;
        }
        match st.streams.get_mut(stream) {
            Some(rt) => {
                rt.profile_seq = seq;
                if rt.profile == profile {
                    return;
                }
                // Only what the journal is built from: hot-interest settings (M19) change
                // nothing a cursor depends on.
                let journal_reset =
                    rt.touch().map(runtime::journal_options) != profile.enabled_touch().map(runtime::journal_options);
                if profile.enabled_touch().is_none() {
                    rt.processed_through = None;
                }
                rt.profile = profile;
                // A mirror is made anew by its writer's shape, not here (StreamRt::mirror).
                if journal_reset && !rt.is_mirror() && rt.journal.as_ref().is_some_and(|j| j.active_waiters() == 0) {
                    // B14: new `touch.memory` settings take effect with a new journal
                    // (its cursor is new: clients see `stale`).
                    if let Some(j) = rt.journal.take() {
                        j.stop();
                    }
                    rt.forget_kept();
                }
            }
            None => {
                let mut rt = new_stream_rt(self.fanout.as_ref(), &self.kept, stream, profile);
                rt.profile_seq = seq;
                st.streams.insert(stream.to_string(), rt);
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
        if self.edge().is_some() {
            // An edge's profiles come with the writer's beats.
            return Ok(());
        }
        let before = self.state.lock().profiles_changed;
        let r = self.reload_profiles_from_file(streams);
        if self.state.lock().profiles_changed != before {
            self.beat_now();
        }
        r
    }

    fn reload_profiles_from_file(&self, streams: Option<Vec<String>>) -> Result<()> {
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
            // Streams with touch no longer listed: deleted, or no longer state-protocol.
            let gone: Vec<(String, u64)> = {
                let st = self.state.lock();
                st.streams
                    .iter()
                    .filter(|(n, rt)| rt.touch().is_some() && !listed.contains(*n))
                    .map(|(n, rt)| (n.clone(), rt.profile_seq))
                    .collect()
            };
            if gone.is_empty() {
                return Ok(());
            }
            let names: Vec<String> = gone.iter().map(|(n, _)| n.clone()).collect();
            let live: Vec<bool> = blocking(|r| {
                self.store.query(move |conn| names.iter().map(|n| crate::store::stream_is_live(conn, n)).collect(), r)
            })?;
            for ((stream, seq), live) in gone.into_iter().zip(live) {
                if live {
                    self.adopt_profile(&stream, StateProtocolProfile { touch: None });
                } else {
                    self.drop_gone_stream(&stream, seq);
                }
            }
        }
        Ok(())
    }

    /// M3: the stream is gone (deleted, or marked deleted). Its runtime goes, unless a profile
    /// with touch was adopted since `profile_seq` was read (the stream created again and
    /// configured meanwhile); its journal answers the waits parked on it at once (their
    /// cursors are stale on a stream created later); its touch state goes unless the name
    /// holds a stream again.
    pub(crate) fn drop_gone_stream(&self, name: &str, profile_seq: u64) {
        let removed = {
            let mut st = self.state.lock();
            let current = st.streams.get(name).is_some_and(|rt| rt.profile_seq == profile_seq || rt.touch().is_none());
            if current {
                st.streams.remove(name)
            } else {
                None
            }
        };
        if let Some(mut rt) = removed {
            rt.forget_kept();
            if let Some(journal) = rt.journal {
                journal.stop();
            }
        }
        let n = name.to_string();
        self.store.write(move |c| profile::delete_touch_state_of_gone(c, &n), Box::new(|_| {}));
    }

    /// Wakes the loop without marking a stream dirty.
    fn poke(&self) {
        let mut s = self.signal.lock();
        s.pending = true;
        self.wake.notify_one();
    }
}
