//! The engine's side of the fan-out ([`crate::fanout`]).
//!
//! A *writer* engine gives every touch-enabled stream a journal whose flushes are published
//! ([`Fanout::observer`]), sends a beat every `beat_ms` (each stream's position, profile, touch
//! mode, checkpoint and active templates), and takes the edges' interest as remote hot
//! interest ([`super::hot::HotState::set_remote`]) and template heartbeats.
//!
//! An *edge* engine (over a private, empty store, without a processing loop) mirrors the
//! writer's journals: flushes are applied as they come ([`crate::journal::mirror`]), beats
//! create and update its streams (profile, touch mode, what `/touch/meta` reports) and reveal
//! records that never arrived. Its waits run the engine's own wait path on the mirrors; what
//! only the writer can do (activations, profiles) is refused with the writer's URL. Its waits'
//! hot interest goes back to the writer in reports.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::hot::RemoteInterest;
use super::policy::TouchMode;
use super::runtime::journal_options;
use super::{templates, Inner, TouchEngine};
use crate::error::{Error, Result};
use crate::fanout::link::{Link, LinkStats};
use crate::fanout::wire::{self, Interest, JournalShape, Message, StreamBeat, StreamInterest};
use crate::fanout::{FanoutOptions, Role};
use crate::journal::{wall_ms, Epoch, FlushObserver, FlushRecord, Journal, JournalConfig, JournalOptions};
use crate::jscompat::json;
use crate::spec::validate_state_protocol_profile;
use crate::store::blocking;

/// The writer's view of a stream, as an edge last heard it in a beat.
#[derive(Clone, Debug, Default)]
pub struct MirrorInfo {
    pub touch_mode: Option<TouchMode>,
    pub processed_through: i64,
    pub lag_source_offsets: i64,
    pub stream_epoch: i64,
    pub active_templates: i64,
    /// Active template id → entity.
    pub templates: HashMap<String, String>,
}

/// Beats between two full copies of a stream's profile and templates when they did not
/// change (an edge that lacks them asks for them sooner, `Interest::want_full`).
const FULL_EVERY: u32 = 20;

/// How long a writer keeps an edge's reported interest: a few of the edge's reports.
fn interest_ttl_ms(opts: &FanoutOptions) -> u32 {
    (opts.beat_ms.saturating_mul(4)).clamp(1_000, 60_000) as u32
}

/// Counters of the fan-out, for stats.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FanoutStats {
    pub role: &'static str,
    pub connected: bool,
    pub sent: u64,
    pub sent_bytes: u64,
    pub dropped: u64,
    pub received: u64,
    pub received_bytes: u64,
    /// The writer's URL as an edge names it (its option, else the writer's beats).
    pub writer_url: String,
    /// Writer: flush records published and the key ids they carried (bytes per touched key
    /// = `sent_bytes / keys_sent`, beats included).
    pub flushes_sent: u64,
    pub keys_sent: u64,
    /// Edge: records applied, replays ignored, gaps found (by a record or a beat), epochs
    /// adopted.
    pub applied: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub adopted: u64,
    pub bad_messages: u64,
    /// Beats sent (writer) or taken (edge).
    pub beats: u64,
    /// Writer: another writer holds the prefix (its URL in `prefix_held_by`); this one
    /// publishes nothing until it is gone.
    pub standby: bool,
    pub prefix_held_by: String,
    /// Edge: writer messages dropped because they came from a deposed writer.
    pub fenced: u64,
}

#[derive(Default)]
struct Counters {
    flushes_sent: u64,
    keys_sent: u64,
    applied: u64,
    duplicates: u64,
    gaps: u64,
    adopted: u64,
    bad: u64,
    beats: u64,
}

pub(crate) struct Fanout {
    pub opts: FanoutOptions,
    /// This process's id in the fan-out (a writer's in its messages, an edge's in its reports).
    pub id: u64,
    /// When it started (wall clock, ms): the elder of two writers on a prefix holds it.
    started_at_ms: i64,
    link: Mutex<Option<Link>>,
    link_stats: Mutex<Option<Arc<LinkStats>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stop: Mutex<bool>,
    stopped: Condvar,
    counters: Mutex<Counters>,
    /// Edge: the mirrors, by stream, with the shape they were built with.
    mirrors: Mutex<HashMap<String, (JournalShape, Journal)>>,
    /// Edge: the writer's URL, from its beats (or the options).
    writer_url: Mutex<String>,
    /// Edge: templates named by waits since the last report.
    used: Mutex<HashMap<String, HashSet<String>>>,
    /// Edge: a wait brought interest the writer has not heard yet.
    pub interest_dirty: AtomicBool,
    /// Edge: ask the writer for a full beat (it started, or met a stream it lacks).
    want_full: AtomicBool,
    /// Writer: per stream, what the last beats sent of its profile and templates.
    sent: Mutex<HashMap<String, Sent>>,
    /// Writer: an edge asked for a full beat.
    full_next: AtomicBool,
    /// Writer: held while a beat is built and queued, so beats leave in the order they were
    /// built (the loop's, and those sent at once after a change).
    beating: Mutex<()>,
}

/// What a writer's beats last sent of a stream (hashes) and how many beats ago.
#[derive(Clone, Copy)]
struct Sent {
    profile: u64,
    templates: u64,
    beats: u32,
}

pub fn shape_of(cfg: &JournalConfig) -> JournalShape {
    JournalShape {
        filter_pow2: cfg.filter_pow2 as u8,
        k: cfg.k as u8,
        key_index_max_keys: cfg.key_index_max_keys.min(u32::MAX as usize) as u32,
        bucket_ms: cfg.bucket_ms.min(u32::MAX as u64) as u32,
    }
}

fn options_of(shape: &JournalShape) -> JournalOptions {
    JournalOptions {
        bucket_ms: shape.bucket_ms as f64,
        filter_pow2: shape.filter_pow2 as f64,
        k: shape.k as f64,
        key_index_max_keys: shape.key_index_max_keys as f64,
        ..JournalOptions::default()
    }
}

fn mode_byte(m: Option<TouchMode>) -> u8 {
    match m {
        None => 255,
        Some(TouchMode::Idle) => 3,
        Some(TouchMode::Fine) => 0,
        Some(TouchMode::Restricted) => 1,
        Some(TouchMode::CoarseOnly) => 2,
    }
}

fn mode_of(b: u8) -> Option<TouchMode> {
    match b {
        0 => Some(TouchMode::Fine),
        1 => Some(TouchMode::Restricted),
        2 => Some(TouchMode::CoarseOnly),
        3 => Some(TouchMode::Idle),
        _ => None,
    }
}

fn random_id() -> u64 {
    Epoch::random().0
}

impl Fanout {
    pub fn new(opts: FanoutOptions) -> Arc<Fanout> {
        Arc::new(Fanout {
            writer_url: Mutex::new(opts.writer_url.clone()),
            opts,
            id: random_id(),
            started_at_ms: wall_ms(),
            link: Mutex::new(None),
            link_stats: Mutex::new(None),
            thread: Mutex::new(None),
            stop: Mutex::new(false),
            stopped: Condvar::new(),
            counters: Mutex::new(Counters::default()),
            mirrors: Mutex::new(HashMap::new()),
            used: Mutex::new(HashMap::new()),
            // An edge's first report (asking for a full beat) goes out at once.
            interest_dirty: AtomicBool::new(true),
            want_full: AtomicBool::new(true),
            sent: Mutex::new(HashMap::new()),
            full_next: AtomicBool::new(false),
            beating: Mutex::new(()),
        })
    }

    pub fn is_edge(&self) -> bool {
        self.opts.role == Role::Edge
    }

    /// Wakes the beat loop: a writer's next beat goes out now.
    fn beat_soon(&self) {
        self.stopped.notify_all();
    }

    /// The error an edge answers for what only the writer does.
    pub fn read_only(&self) -> Error {
        Error::EdgeReadOnly { writer: self.writer_url.lock().clone() }
    }

    fn send(&self, bytes: Vec<u8>) {
        if let Some(link) = &*self.link.lock() {
            link.send(bytes);
        }
    }

    /// Writer: what publishes a journal's flushes for `stream` (called under the journal's
    /// lock, so records are queued in generation order).
    pub fn observer(self: &Arc<Self>, stream: &str, cfg: &JournalConfig) -> FlushObserver {
        let (me, stream, shape) = (self.clone(), stream.to_string(), shape_of(cfg));
        Arc::new(move |record: &FlushRecord| {
            let msg = Message::Flush { stream: stream.clone(), shape, record: record.clone() };
            me.send(wire::encode(&msg));
            let mut c = me.counters.lock();
            c.flushes_sent += 1;
            c.keys_sent += record.keys.len() as u64;
        })
    }

    /// Edge: the mirror of `stream`, made with `shape`; a writer's journal made anew with other
    /// options is mirrored anew too (the old mirror's waiters are answered).
    fn mirror(&self, stream: &str, shape: JournalShape) -> Journal {
        let (journal, replaced) = {
            let mut mirrors = self.mirrors.lock();
            let (s, j) = mirrors.entry(stream.to_string()).or_insert_with(|| (shape, Journal::new(options_of(&shape))));
            let replaced = (*s != shape).then(|| {
                *s = shape;
                std::mem::replace(j, Journal::new(options_of(&shape)))
            });
            (j.clone(), replaced)
        };
        // Stopped outside the lock: answering the waiters runs their replies.
        if let Some(old) = replaced {
            old.stop();
        }
        journal
    }

    /// Edge: records a heartbeat of templates for the next report.
    pub fn note_templates_used(&self, stream: &str, ids: &[String]) {
        let mut used = self.used.lock();
        let set = used.entry(stream.to_string()).or_default();
        let before = set.len();
        set.extend(ids.iter().cloned());
        if set.len() != before {
            self.interest_dirty.store(true, Ordering::Release);
        }
    }

    pub fn stats(&self) -> FanoutStats {
        let c = self.counters.lock();
        let mut s = FanoutStats {
            role: if self.is_edge() { "edge" } else { "writer" },
            flushes_sent: c.flushes_sent,
            keys_sent: c.keys_sent,
            applied: c.applied,
            duplicates: c.duplicates,
            gaps: c.gaps,
            adopted: c.adopted,
            bad_messages: c.bad,
            beats: c.beats,
            writer_url: self.writer_url.lock().clone(),
            ..Default::default()
        };
        if let Some(l) = &*self.link_stats.lock() {
            s.connected = l.connected.load(Ordering::Relaxed);
            s.sent = l.sent.load(Ordering::Relaxed);
            s.sent_bytes = l.sent_bytes.load(Ordering::Relaxed);
            s.dropped = l.dropped.load(Ordering::Relaxed);
            s.received = l.received.load(Ordering::Relaxed);
            s.received_bytes = l.received_bytes.load(Ordering::Relaxed);
            s.standby = l.standby.load(Ordering::Relaxed);
            s.prefix_held_by = l.held_by.lock().clone();
            s.fenced = l.fenced.load(Ordering::Relaxed);
        }
        s
    }

    /// Starts the link and the beat (writer) or report (edge) thread for `inner`.
    pub fn start(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<()> {
        let weak = Arc::downgrade(inner);
        let link = match self.opts.role {
            Role::Writer => {
                let w = weak.clone();
                let claim = wire::Claim {
                    writer: self.id,
                    started_at_ms: self.started_at_ms,
                    beat_ms: self.opts.beat_ms.min(u32::MAX as u64) as u32,
                    writer_url: self.opts.writer_url.clone(),
                    released: false,
                };
                Link::writer(
                    &self.opts,
                    claim,
                    Box::new(move |bytes| {
                        if let Some(inner) = w.upgrade() {
                            inner.take_interest(bytes);
                        }
                    }),
                )?
            }
            Role::Edge => {
                let w = weak.clone();
                Link::edge(
                    &self.opts,
                    Box::new(move |bytes| {
                        if let Some(inner) = w.upgrade() {
                            inner.take_message(bytes);
                        }
                    }),
                )?
            }
        };
        *self.link_stats.lock() = Some(link.stats.clone());
        *self.link.lock() = Some(link);
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name(format!("dt-fanout-{}", if self.is_edge() { "report" } else { "beat" }))
            .spawn(move || me.run(weak))
            .map_err(|e| Error::Fanout(format!("cannot start the fan-out thread: {e}")))?;
        *self.thread.lock() = Some(handle);
        Ok(())
    }

    /// The beat (writer) or report (edge) loop, until [`Fanout::close`].
    fn run(self: Arc<Self>, inner: Weak<Inner>) {
        let beat = Duration::from_millis(self.opts.beat_ms.max(10));
        // An edge looks for new interest often, so a new fine wait is heard within ~25 ms.
        let step = if self.is_edge() { Duration::from_millis(25).min(beat) } else { beat };
        let mut since_full = Duration::ZERO;
        loop {
            {
                let mut stop = self.stop.lock();
                if !*stop {
                    self.stopped.wait_for(&mut stop, step);
                }
                if *stop {
                    return;
                }
            }
            let Some(inner) = inner.upgrade() else { return };
            since_full += step;
            if self.is_edge() {
                if since_full >= beat || self.interest_dirty.swap(false, Ordering::AcqRel) {
                    since_full = Duration::ZERO;
                    let report = inner.interest_report(&self);
                    // Nothing to say: the writer lets what it holds expire.
                    if !report.streams.is_empty() || report.want_full {
                        self.send(wire::encode_interest(&report));
                    }
                }
            } else {
                since_full = Duration::ZERO;
                inner.publish_beat(&self);
            }
        }
    }

    /// Stops the thread and the link (what is queued is handed to the broker first).
    pub fn close(&self) {
        *self.stop.lock() = true;
        self.stopped.notify_all();
        // Taken out first: the guards must not be held while the threads finish (a flush's
        // observer, on any thread, takes the link's lock to queue its record).
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        let link = self.link.lock().take();
        if let Some(mut link) = link {
            link.close();
        }
    }
}

fn hash_of(v: &impl Hash) -> u64 {
    // DefaultHasher::new() has fixed keys: equal values hash equal from beat to beat.
    let mut h = std::hash::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

impl Inner {
    pub(crate) fn is_edge(&self) -> bool {
        self.fanout.as_ref().is_some_and(|f| f.is_edge())
    }

    /// Writer: builds and queues a beat.
    fn publish_beat(&self, fanout: &Fanout) {
        let _order = fanout.beating.lock();
        if let Some(msg) = self.beat(fanout) {
            fanout.send(wire::encode(&msg));
            fanout.counters.lock().beats += 1;
        }
    }

    /// Writer: a beat now, not at the next one due, after what an edge must know before a
    /// client can use it there: a stream given touch, a profile changed, a template activated.
    /// Edges then plan a wait that follows at once as the writer would.
    pub(crate) fn beat_now(&self) {
        if let Some(fanout) = self.fanout.as_ref().filter(|f| !f.is_edge()) {
            self.publish_beat(fanout);
        }
    }

    /// Writer: the beat. Every touch-enabled stream gets its journal (so its flushes are
    /// published), and its position is read after the records before it were queued.
    fn beat(&self, fanout: &Fanout) -> Option<Message> {
        let mut streams = Vec::new();
        {
            let mut st = self.state.lock();
            let mut created = 0;
            for (name, rt) in st.streams.iter_mut() {
                let Some(cfg) = rt.touch().cloned() else { continue };
                let (j, new) = rt.journal(&cfg);
                created += new as u64;
                let (epoch, generation, coalesce_ms) = j.read(|s| (s.epoch().0, s.generation(), s.coalesce_ms()));
                let profile = json::stringify(&rt.profile.to_value());
                streams.push(StreamBeat {
                    stream: name.clone(),
                    epoch,
                    generation,
                    profile_json: Some(profile),
                    touch_mode: mode_byte(rt.touch_mode),
                    processed_through: rt.processed_through.unwrap_or(-1),
                    lag_source_offsets: rt.lag_source_offsets,
                    coalesce_ms: coalesce_ms.min(u32::MAX as u64) as u32,
                    ..Default::default()
                });
            }
            st.journals_created += created;
        }
        let names: Vec<String> = streams.iter().map(|s| s.stream.clone()).collect();
        let facts = blocking(|r| {
            self.store.query(
                move |c| {
                    let mut out = Vec::with_capacity(names.len());
                    for n in &names {
                        let list = templates::list_active_entities(c, n).unwrap_or_default();
                        let epoch = crate::store::query_stream(c, n)?.map(|s| s.epoch).unwrap_or(0);
                        out.push((list, epoch));
                    }
                    Ok(out)
                },
                r,
            )
        })
        .ok()?;
        // Profiles and template lists go out when they change, every FULL_EVERY beats, or
        // when an edge asked (the rest of a beat is small and always sent).
        // A writer that stood by for another starts over with everything.
        let resumed = fanout.link_stats.lock().as_ref().is_some_and(|l| l.resumed.swap(false, Ordering::AcqRel));
        let full = fanout.full_next.swap(false, Ordering::AcqRel) | resumed;
        let mut sent = fanout.sent.lock();
        for (s, (list, epoch)) in streams.iter_mut().zip(facts) {
            s.stream_epoch = epoch;
            s.active_templates = list.len() as i64;
            let (p, t) = (hash_of(&s.profile_json), hash_of(&list));
            let last = sent.get(&s.stream).copied();
            let due = full || last.is_none_or(|l| l.beats >= FULL_EVERY);
            if !due && last.is_some_and(|l| l.profile == p) {
                s.profile_json = None;
            }
            if due || last.is_none_or(|l| l.templates != t) {
                s.templates = Some(list);
            }
            let beats = if due { 0 } else { last.map_or(0, |l| l.beats + 1) };
            sent.insert(s.stream.clone(), Sent { profile: p, templates: t, beats });
        }
        sent.retain(|k, _| streams.iter().any(|s| &s.stream == k));
        Some(Message::Beat { writer: fanout.id, writer_url: fanout.opts.writer_url.clone(), streams })
    }

    /// Writer: an edge's interest report.
    fn take_interest(self: &Arc<Self>, bytes: &[u8]) {
        let Some(fanout) = &self.fanout else { return };
        let report = match wire::decode_interest(bytes) {
            Ok(r) => r,
            Err(_) => {
                fanout.counters.lock().bad += 1;
                return;
            }
        };
        if report.want_full {
            // An edge that just started (or lacks a stream) hears everything now, not at the
            // next beat due.
            fanout.full_next.store(true, Ordering::Release);
            fanout.beat_soon();
        }
        let now = wall_ms();
        let (mut heartbeats, mut reported) = (Vec::new(), Vec::new());
        {
            let mut st = self.state.lock();
            for si in report.streams {
                let Some(rt) = st.streams.get_mut(&si.stream) else { continue };
                if rt.touch().is_none() {
                    continue;
                }
                rt.hot.get_or_insert_with(Default::default).set_remote(
                    report.edge,
                    RemoteInterest {
                        expires_at_ms: now + report.ttl_ms as i64,
                        fine_waiters: si.fine_waiters as u64,
                        coarse_waiters: si.coarse_waiters as u64,
                        broad_fine_waiters: si.broad_fine_waiters as u64,
                        keys: si.keys,
                        templates: si.templates,
                    },
                );
                if !si.templates_used.is_empty() {
                    heartbeats.push((si.stream.clone(), si.templates_used));
                }
                reported.push(si.stream);
            }
        }
        // Rows left for later while nobody listened are processed now: an edge listens.
        for stream in &reported {
            self.poke_if_deferred(stream);
        }
        let engine = TouchEngine { inner: self.clone() };
        for (stream, ids) in heartbeats {
            let _ = engine.heartbeat_templates(&stream, &ids);
        }
    }

    /// Edge: a writer's message.
    fn take_message(&self, bytes: &[u8]) {
        let Some(fanout) = &self.fanout else { return };
        match wire::decode(bytes) {
            Ok(Message::Flush { stream, shape, record, .. }) => {
                let journal = fanout.mirror(&stream, shape);
                self.attach_mirror(&stream, &journal);
                let applied = journal.apply_flush(&record);
                let mut c = fanout.counters.lock();
                match applied {
                    crate::journal::Applied::Next => c.applied += 1,
                    crate::journal::Applied::Duplicate => c.duplicates += 1,
                    crate::journal::Applied::Adopted => {
                        c.applied += 1;
                        c.adopted += 1
                    }
                    crate::journal::Applied::Gap { .. } => {
                        c.applied += 1;
                        c.gaps += 1
                    }
                }
            }
            Ok(Message::Beat { writer_url, streams, .. }) => {
                self.take_beat(fanout, writer_url, streams);
                fanout.counters.lock().beats += 1;
            }
            Err(_) => fanout.counters.lock().bad += 1,
        }
    }

    /// Edge: the stream's runtime uses the mirror (when the stream is known from a beat).
    fn attach_mirror(&self, stream: &str, journal: &Journal) {
        let mut st = self.state.lock();
        if let Some(rt) = st.streams.get_mut(stream) {
            if !rt.journal.as_ref().is_some_and(|j| j.same_as(journal)) {
                rt.journal = Some(journal.clone());
            }
        }
    }

    fn take_beat(&self, fanout: &Fanout, writer_url: String, streams: Vec<StreamBeat>) {
        // The edge's own option wins: a writer often knows itself by a loopback URL.
        if !writer_url.is_empty() && fanout.opts.writer_url.is_empty() {
            *fanout.writer_url.lock() = writer_url;
        }
        let mut positions = Vec::new();
        let listed: HashSet<String> = streams.iter().map(|s| s.stream.clone()).collect();
        for b in streams {
            let (profile, cfg) = match &b.profile_json {
                Some(text) => {
                    let Ok(raw) = json::parse(text) else { continue };
                    let Ok(profile) = validate_state_protocol_profile(&raw, "profile") else { continue };
                    let Some(cfg) = profile.enabled_touch().cloned() else { continue };
                    (Some(profile), cfg)
                }
                None => match self.state.lock().streams.get(&b.stream).and_then(|rt| rt.touch().cloned()) {
                    Some(cfg) => (None, cfg),
                    None => {
                        // A stream this edge has no profile for: the next report asks for it.
                        fanout.want_full.store(true, Ordering::Release);
                        fanout.interest_dirty.store(true, Ordering::Release);
                        continue;
                    }
                },
            };
            let shape = shape_of(&JournalConfig::from_options(&journal_options(&cfg)));
            let journal = fanout.mirror(&b.stream, shape);
            // The runtime gets its mirror as it takes the profile: a wait or a meta read in
            // between would otherwise make it a journal of its own, which no flush reaches.
            if let Some(profile) = profile {
                self.adopt_profile_with(&b.stream, profile, Some(&journal));
            }
            // What meta reports; a mirror's buckets are the writer's flushes, not its own.
            journal.set_coalesce_ms(b.coalesce_ms as f64);
            let mut st = self.state.lock();
            if let Some(rt) = st.streams.get_mut(&b.stream) {
                rt.journal = Some(journal.clone());
                rt.touch_mode = mode_of(b.touch_mode);
                rt.processed_through = Some(b.processed_through);
                rt.lag_source_offsets = b.lag_source_offsets;
                let info = rt.mirror.get_or_insert_with(MirrorInfo::default);
                info.touch_mode = mode_of(b.touch_mode);
                info.processed_through = b.processed_through;
                info.lag_source_offsets = b.lag_source_offsets;
                info.stream_epoch = b.stream_epoch;
                info.active_templates = b.active_templates;
                if let Some(list) = b.templates {
                    info.templates = list.into_iter().collect();
                }
            }
            drop(st);
            positions.push((journal, Epoch(b.epoch), b.generation));
        }
        // Streams the writer no longer lists were deleted or lost touch: as the writer does,
        // their waits are answered and their runtimes dropped.
        let gone: Vec<String> = {
            let st = self.state.lock();
            st.streams.keys().filter(|k| !listed.contains(*k)).cloned().collect()
        };
        for name in gone {
            let rt = self.state.lock().streams.remove(&name);
            // Stopped outside the lock: answering the waiters runs their replies.
            let mirror = fanout.mirrors.lock().remove(&name).map(|(_, j)| j);
            if let Some(j) = mirror {
                j.stop();
            }
            drop(rt);
        }
        // Outside every lock: catching up wakes waiters, whose replies call into the engine.
        for (journal, epoch, generation) in positions {
            let caught = journal.catch_up(epoch, generation);
            let mut c = fanout.counters.lock();
            match caught {
                crate::journal::CaughtUp::InStep => {}
                crate::journal::CaughtUp::Gap { .. } => c.gaps += 1,
                crate::journal::CaughtUp::Adopted => c.adopted += 1,
            }
        }
    }

    /// Edge: what its waiters wait for, per stream.
    fn interest_report(&self, fanout: &Fanout) -> Interest {
        let now = wall_ms();
        let mut used = std::mem::take(&mut *fanout.used.lock());
        let mut streams = Vec::new();
        {
            let mut st = self.state.lock();
            for (name, rt) in st.streams.iter_mut() {
                let Some(cfg) = rt.touch().cloned() else { continue };
                let snap = rt.hot_snapshot(&super::hot::hot_limits(&cfg), now);
                let templates_used: Vec<String> =
                    used.remove(name).map(|s| s.into_iter().collect()).unwrap_or_default();
                if !snap.has_any_waiters()
                    && snap.hot_key_count() == 0
                    && snap.hot_template_count() == 0
                    && templates_used.is_empty()
                {
                    continue;
                }
                let broad = snap.broad_fine_waiters + (!snap.key_filtering && snap.fine_waiters > 0) as u64;
                let ids = rt.hot.as_ref().map(|h| h.hot_ids()).unwrap_or_default();
                streams.push(StreamInterest {
                    stream: name.clone(),
                    fine_waiters: snap.fine_waiters as u32,
                    coarse_waiters: snap.coarse_waiters as u32,
                    broad_fine_waiters: broad as u32,
                    keys: ids.keys.map(|k| k.into_iter().collect()).unwrap_or_default(),
                    templates: ids.template_ids.unwrap_or_default(),
                    templates_used,
                });
            }
        }
        let want_full = fanout.want_full.swap(false, Ordering::AcqRel);
        Interest { edge: fanout.id, ttl_ms: interest_ttl_ms(&fanout.opts), want_full, streams }
    }
}

impl TouchEngine {
    /// The fan-out's counters, `None` without one.
    pub fn fanout_stats(&self) -> Option<FanoutStats> {
        self.inner.fanout.as_ref().map(|f| f.stats())
    }

    /// Edge: the entities of templates, as the writer's last beat listed them.
    pub(crate) fn mirrored_entities(&self, stream: &str, ids: &[String]) -> Vec<String> {
        let st = self.inner.state.lock();
        let Some(info) = st.streams.get(stream).and_then(|rt| rt.mirror.as_ref()) else { return Vec::new() };
        let mut out: Vec<String> = ids.iter().filter_map(|id| info.templates.get(id.trim()).cloned()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Edge: refuses what only the writer does.
    pub(crate) fn writer_only(&self) -> Result<()> {
        match &self.inner.fanout {
            Some(f) if f.is_edge() => Err(f.read_only()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::engine::wait::WaitArgs;
    use crate::engine::EngineOptions;
    use crate::store::{Store, StoreOptions};

    /// An edge over an empty store, its broker unreachable (the link retries in the
    /// background): messages are handed to it directly.
    fn edge() -> TouchEngine {
        let store = Store::open(":memory:", StoreOptions::default()).unwrap();
        let fanout = FanoutOptions { role: Role::Edge, url: "nats://127.0.0.1:1".into(), ..Default::default() };
        TouchEngine::open(store, EngineOptions { fanout: Some(fanout), ..Default::default() }).unwrap()
    }

    fn beat(stream: &str) -> Vec<u8> {
        wire::encode(&Message::Beat {
            writer: 1,
            writer_url: String::new(),
            streams: vec![StreamBeat {
                stream: stream.into(),
                epoch: 7,
                generation: 0,
                profile_json: Some(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#.into()),
                ..Default::default()
            }],
        })
    }

    /// A wait racing the beat that brings its stream, many times over: before the runtime got
    /// its mirror with its profile, about one race in a thousand parked on a journal of its
    /// own (and missed every wake until its timeout).
    #[test]
    fn a_wait_on_a_stream_an_edge_just_heard_of_parks_on_its_mirror() {
        const ROUNDS: usize = 5_000;
        let engine = edge();
        let inner = engine.inner.clone();
        let fanout = inner.fanout.clone().unwrap();
        let (mut own, parked) = (0, AtomicUsize::new(0));
        for i in 0..ROUNDS {
            let name = format!("s{i}");
            std::thread::scope(|scope| {
                // Waits from the moment the stream exists, while its beat is being taken.
                let waiter = scope.spawn(|| loop {
                    let args =
                        WaitArgs::parse(&json::parse(r#"{"cursor":"now","keyIds":[1],"timeoutMs":60000}"#).unwrap())
                            .unwrap();
                    let (tx, rx) = std::sync::mpsc::channel();
                    let control = engine.wait(&name, args, Box::new(move |r| drop(tx.send(r))));
                    if rx.try_recv().is_err() {
                        parked.fetch_add(1, Ordering::Relaxed);
                        return control;
                    }
                });
                inner.take_message(&beat(&name));
                let control = waiter.join().unwrap();
                let journal = control.parked_on().expect("parked");
                let mirror = fanout.mirrors.lock().get(&name).map(|(_, j)| j.clone()).unwrap();
                if !journal.same_as(&mirror) {
                    own += 1;
                }
                control.abort();
            });
        }
        assert_eq!(parked.load(Ordering::Relaxed), ROUNDS);
        assert_eq!(own, 0, "waits parked on a journal of the edge's own, which no flush reaches");
        blocking(|r| engine.close(r)).unwrap();
    }
}
