//! An edge (over a private, empty store, without a processing loop): its streams are the
//! writer's. Each stream's journal is a mirror of the writer's, kept in the stream's runtime
//! with the writer's view of the stream beside it ([`crate::engine::runtime::Source::Mirror`]):
//! flushes are applied as they come ([`crate::journal::mirror`]); beats make and update the
//! streams (profile, touch mode, what `/touch/meta` reports), reveal records that never arrived
//! and drop the streams the writer no longer lists. Its waits run the engine's own wait path on
//! the mirrors; what only the writer can do (activations, profiles) is refused with the
//! writer's URL. Its waits' hot interest goes back to the writer in reports.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::{mode_of, FanoutStats, Node};
use crate::engine::hot::hot_limits;
use crate::engine::runtime::journal_shape;
use crate::engine::{EngineOptions, Inner};
use crate::error::{Error, Result};
use crate::fanout::link::Link;
use crate::fanout::wire::{self, Interest, JournalShape, Message, StreamBeat, StreamInterest};
use crate::fanout::FanoutOptions;
use crate::journal::{wall_ms, Applied, CaughtUp, Epoch, FlushRecord};
use crate::jscompat::json;
use crate::spec::validate_state_protocol_profile;

pub(crate) struct Edge {
    pub(super) node: Node,
    /// The writer's URL, from its beats (or the options).
    writer_url: Mutex<String>,
    mirrored: Mutex<Mirrored>,
    /// Templates named by waits since the last report.
    used: Mutex<HashMap<String, HashSet<String>>>,
    /// A wait brought interest the writer has not heard yet.
    interest_dirty: AtomicBool,
    /// Ask the writer for a full beat (it started, or met a stream it lacks).
    want_full: AtomicBool,
}

/// What the mirrors made of the writer's records and beats.
#[derive(Default)]
struct Mirrored {
    applied: u64,
    duplicates: u64,
    gaps: u64,
    adopted: u64,
}

/// How long a writer keeps an edge's reported interest: a few of the edge's reports.
fn interest_ttl_ms(opts: &FanoutOptions) -> u32 {
    (opts.beat_ms.saturating_mul(4)).clamp(1_000, 60_000) as u32
}

impl Edge {
    pub fn new(opts: FanoutOptions) -> Arc<Edge> {
        Arc::new(Edge {
            writer_url: Mutex::new(opts.writer_url.clone()),
            node: Node::new(opts),
            mirrored: Mutex::new(Mirrored::default()),
            used: Mutex::new(HashMap::new()),
            // The first report (asking for a full beat) goes out at once.
            interest_dirty: AtomicBool::new(true),
            want_full: AtomicBool::new(true),
        })
    }

    /// An edge's engine does not process its own store (its streams are the writer's), nor
    /// keep its journals (they are mirrors of the writer's).
    pub fn restrict(&self, opts: &mut EngineOptions) {
        opts.auto_process = false;
        opts.profile_poll_ms = 0;
        opts.keep_cursors = false;
    }

    /// The error an edge answers for what only the writer does.
    pub fn read_only(&self) -> Error {
        Error::EdgeReadOnly { writer: self.writer_url.lock().clone() }
    }

    /// Records a heartbeat of templates for the next report (templates live at the writer).
    pub fn note_templates_used(&self, stream: &str, ids: &[String]) {
        let mut used = self.used.lock();
        let set = used.entry(stream.to_string()).or_default();
        let before = set.len();
        set.extend(ids.iter().cloned());
        if set.len() != before {
            self.interest_dirty.store(true, Ordering::Release);
        }
    }

    /// The entities of templates: they live at the writer, and come with its beats.
    pub fn entities(&self, inner: &Inner, stream: &str, ids: &[String]) -> Vec<String> {
        let st = inner.state.lock();
        let info = st.streams.get(stream).and_then(|rt| rt.mirror_info());
        info.map(|i| i.entities(ids)).unwrap_or_default()
    }

    /// A wait changed what the edge's waiters wait for: the writer hears of it soon.
    pub fn interest_changed(&self) {
        self.interest_dirty.store(true, Ordering::Release);
    }

    /// Starts the link, following the writer's messages, and the report thread.
    pub(super) fn start(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<()> {
        let (me, weak) = (Arc::downgrade(self), Arc::downgrade(inner));
        let link = Link::edge(
            &self.node.opts,
            Box::new(move |bytes| {
                if let (Some(me), Some(inner)) = (me.upgrade(), weak.upgrade()) {
                    me.take_message(&inner, bytes);
                }
            }),
        )?;
        let (me, weak) = (self.clone(), Arc::downgrade(inner));
        self.node.start(link, "dt-fanout-report", move || me.run(weak))
    }

    /// The report loop, until the node is closed: a report every `beat_ms`, and soon after a
    /// wait brought new interest.
    fn run(self: Arc<Self>, inner: Weak<Inner>) {
        let every = Duration::from_millis(self.node.opts.beat_ms.max(10));
        // New interest is looked for often, so a new fine wait is heard within ~25 ms.
        let step = Duration::from_millis(25).min(every);
        let mut since = Duration::ZERO;
        while self.node.pause(step) {
            let Some(inner) = inner.upgrade() else { return };
            since += step;
            if since >= every || self.interest_dirty.swap(false, Ordering::AcqRel) {
                since = Duration::ZERO;
                let report = self.interest_report(&inner);
                // Nothing to say: the writer lets what it holds expire.
                if !report.streams.is_empty() || report.want_full {
                    self.node.send(wire::encode_interest(&report));
                }
            }
        }
    }

    /// A writer's message.
    fn take_message(&self, inner: &Inner, bytes: &[u8]) {
        match wire::decode(bytes) {
            Ok(Message::Flush { stream, shape, record }) => self.take_flush(inner, &stream, shape, &record),
            Ok(Message::Beat { writer_url, streams, .. }) => {
                self.take_beat(inner, writer_url, streams);
                self.node.count_beat();
            }
            Err(_) => self.node.count_bad(),
        }
    }

    /// A flush, applied to its stream's mirror. A stream no beat has brought yet has none:
    /// the beat that brings it makes its mirror, which takes up the writer's position then.
    fn take_flush(&self, inner: &Inner, stream: &str, shape: JournalShape, record: &FlushRecord) {
        let (journal, replaced) = {
            let mut st = inner.state.lock();
            let Some(rt) = st.streams.get_mut(stream) else { return };
            rt.mirror(shape)
        };
        // Stopped outside the lock: answering the waiters runs their replies.
        if let Some(old) = replaced {
            old.stop();
        }
        let applied = journal.apply_flush(record);
        let mut m = self.mirrored.lock();
        match applied {
            Applied::Next => m.applied += 1,
            Applied::Duplicate => m.duplicates += 1,
            Applied::Adopted => {
                m.applied += 1;
                m.adopted += 1
            }
            Applied::Gap { .. } => {
                m.applied += 1;
                m.gaps += 1
            }
        }
    }

    fn take_beat(&self, inner: &Inner, writer_url: String, streams: Vec<StreamBeat>) {
        // The edge's own option wins: a writer often knows itself by a loopback URL.
        if !writer_url.is_empty() && self.node.opts.writer_url.is_empty() {
            *self.writer_url.lock() = writer_url;
        }
        let mut positions = Vec::new();
        let listed: HashSet<String> = streams.iter().map(|s| s.stream.clone()).collect();
        for b in streams {
            let profile = match &b.profile_json {
                Some(text) => {
                    let Ok(raw) = json::parse(text) else { continue };
                    let Ok(profile) = validate_state_protocol_profile(&raw, "profile") else { continue };
                    if profile.enabled_touch().is_none() {
                        continue;
                    }
                    Some(profile)
                }
                None => None,
            };
            // The runtime takes the profile and its mirror in one critical section: a wait or
            // a meta read finds the stream with the journal the writer's flushes reach.
            let mut st = inner.state.lock();
            if let Some(profile) = profile {
                inner.adopt_profile_in(&mut st, &b.stream, profile);
            }
            let Some((cfg, rt)) = st.streams.get_mut(&b.stream).and_then(|rt| Some((rt.touch()?.clone(), rt))) else {
                // A stream this edge has no profile for: the next report asks for it.
                self.want_full.store(true, Ordering::Release);
                self.interest_dirty.store(true, Ordering::Release);
                continue;
            };
            let (journal, replaced) = rt.mirror(journal_shape(&cfg));
            // What meta reports; a mirror's buckets are the writer's flushes, not its own.
            journal.set_coalesce_ms(b.coalesce_ms as f64);
            rt.touch_mode = mode_of(b.touch_mode);
            rt.processed_through = Some(b.processed_through);
            rt.lag_source_offsets = b.lag_source_offsets;
            if let Some(info) = rt.mirror_info_mut() {
                info.stream_epoch = b.stream_epoch;
                info.active_templates = b.active_templates;
                if let Some(list) = b.templates {
                    info.templates = list.into_iter().collect();
                }
            }
            drop(st);
            // Stopped outside the lock: answering the waiters runs their replies.
            if let Some(old) = replaced {
                old.stop();
            }
            positions.push((journal, Epoch(b.epoch), b.generation));
        }
        // Streams the writer no longer lists were deleted or lost touch: as the writer does,
        // their waits are answered and their runtimes dropped.
        let gone: Vec<_> = {
            let mut st = inner.state.lock();
            let names: Vec<String> = st.streams.keys().filter(|k| !listed.contains(*k)).cloned().collect();
            names.iter().filter_map(|n| st.streams.remove(n)).collect()
        };
        // Stopped outside the lock, as above.
        for rt in gone {
            if let Some(j) = &rt.journal {
                j.stop();
            }
        }
        // Outside every lock: catching up wakes waiters, whose replies call into the engine.
        for (journal, epoch, generation) in positions {
            let caught = journal.catch_up(epoch, generation);
            let mut m = self.mirrored.lock();
            match caught {
                CaughtUp::InStep => {}
                CaughtUp::Gap { .. } => m.gaps += 1,
                CaughtUp::Adopted => m.adopted += 1,
            }
        }
    }

    /// What its waiters wait for, per stream.
    fn interest_report(&self, inner: &Inner) -> Interest {
        let now = wall_ms();
        let mut used = std::mem::take(&mut *self.used.lock());
        let mut streams = Vec::new();
        {
            let mut st = inner.state.lock();
            for (name, rt) in st.streams.iter_mut() {
                let Some(cfg) = rt.touch().cloned() else { continue };
                let snap = rt.hot_snapshot(&hot_limits(&cfg), now);
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
        let want_full = self.want_full.swap(false, Ordering::AcqRel);
        Interest { edge: self.node.id, ttl_ms: interest_ttl_ms(&self.node.opts), want_full, streams }
    }

    pub(super) fn stats(&self) -> FanoutStats {
        let m = self.mirrored.lock();
        FanoutStats {
            applied: m.applied,
            duplicates: m.duplicates,
            gaps: m.gaps,
            adopted: m.adopted,
            writer_url: self.writer_url.lock().clone(),
            ..self.node.stats("edge")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    use super::*;
    use crate::engine::wait::{WaitArgs, WaitControl, WaitReply};
    use crate::engine::TouchEngine;
    use crate::fanout::Role;
    use crate::journal::Journal;
    use crate::store::{blocking, Store, StoreOptions};

    /// An edge over an empty store, its broker unreachable (the link retries in the
    /// background): messages are handed to it directly.
    fn edge() -> (TouchEngine, Arc<Edge>) {
        let store = Store::open(":memory:", StoreOptions::default()).unwrap();
        let fanout = FanoutOptions { role: Role::Edge, url: "nats://127.0.0.1:1".into(), ..Default::default() };
        let engine = TouchEngine::open(store, EngineOptions { fanout: Some(fanout), ..Default::default() }).unwrap();
        let edge = engine.inner.edge().unwrap().clone();
        (engine, edge)
    }

    fn beat(stream: &str, generation: u32) -> Vec<u8> {
        wire::encode(&Message::Beat {
            writer: 1,
            writer_url: String::new(),
            streams: vec![StreamBeat {
                stream: stream.into(),
                epoch: 7,
                generation,
                profile_json: Some(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#.into()),
                ..Default::default()
            }],
        })
    }

    /// The shape of the writer's journal in [`beat`]'s profile.
    fn shape() -> JournalShape {
        let profile = json::parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap();
        journal_shape(validate_state_protocol_profile(&profile, "profile").unwrap().enabled_touch().unwrap())
    }

    fn flush(stream: &str, shape: JournalShape, generation: u32, key: u32) -> Vec<u8> {
        let record = FlushRecord {
            epoch: Epoch(7),
            generation,
            keys: vec![key],
            exact: Vec::new(),
            overflow: false,
            bucket_start_ms: 0,
            flush_at_ms: 0,
            max_source_offset: -1,
        };
        wire::encode(&Message::Flush { stream: stream.into(), shape, record })
    }

    /// The stream's journal: at an edge, its mirror.
    fn mirror(engine: &TouchEngine, stream: &str) -> Option<Journal> {
        engine.inner.state.lock().streams.get(stream).and_then(|rt| rt.journal.clone())
    }

    fn wait(engine: &TouchEngine, stream: &str, key: u32) -> (Arc<WaitControl>, mpsc::Receiver<Result<WaitReply>>) {
        let text = format!(r#"{{"cursor":"now","keyIds":[{key}],"timeoutMs":60000}}"#);
        let args = WaitArgs::parse(&json::parse(&text).unwrap()).unwrap();
        let (tx, rx) = mpsc::channel();
        (engine.wait(stream, args, Box::new(move |r| drop(tx.send(r)))), rx)
    }

    /// A wait racing the beat that brings its stream, many times over: before the runtime got
    /// its mirror with its profile, about one race in a thousand parked on a journal of its
    /// own (and missed every wake until its timeout). The journal it parks on is the one the
    /// writer's next flush reaches.
    #[test]
    fn a_wait_on_a_stream_an_edge_just_heard_of_parks_on_its_mirror() {
        const ROUNDS: usize = 5_000;
        let (engine, edge) = edge();
        let inner = engine.inner.clone();
        let (mut own, parked) = (0, AtomicUsize::new(0));
        for i in 0..ROUNDS {
            let name = format!("s{i}");
            std::thread::scope(|scope| {
                // Waits from the moment the stream exists, while its beat is being taken.
                let waiter = scope.spawn(|| loop {
                    let (control, rx) = wait(&engine, &name, 1);
                    if rx.try_recv().is_err() {
                        parked.fetch_add(1, Ordering::Relaxed);
                        return control;
                    }
                });
                edge.take_message(&inner, &beat(&name, 0));
                let control = waiter.join().unwrap();
                let journal = control.parked_on().expect("parked");
                edge.take_message(&inner, &flush(&name, shape(), 1, 1));
                let reached = mirror(&engine, &name).unwrap();
                if !journal.same_as(&reached) || reached.read(|s| s.generation()) != 1 {
                    own += 1;
                }
                control.abort();
            });
        }
        assert_eq!(parked.load(Ordering::Relaxed), ROUNDS);
        assert_eq!(own, 0, "waits parked on a journal no flush reaches");
        assert_eq!(edge.stats().applied, ROUNDS as u64);
        blocking(|r| engine.close(r)).unwrap();
    }

    /// A stream's mirror is made by the beat that brings the stream: flushes before it are
    /// left to it (the mirror takes up the writer's position), those after it follow.
    #[test]
    fn flushes_before_a_streams_first_beat_are_left_to_it() {
        let (engine, edge) = edge();
        let inner = engine.inner.clone();
        edge.take_message(&inner, &flush("s", shape(), 3, 1));
        assert!(mirror(&engine, "s").is_none(), "no stream without a beat");
        edge.take_message(&inner, &beat("s", 3));
        let journal = mirror(&engine, "s").unwrap();
        assert_eq!(journal.read(|s| (s.epoch(), s.generation())), (Epoch(7), 3));
        edge.take_message(&inner, &flush("s", shape(), 4, 1));
        assert!(mirror(&engine, "s").unwrap().same_as(&journal));
        assert_eq!(journal.read(|s| s.generation()), 4);
        let s = edge.stats();
        assert_eq!((s.applied, s.adopted, s.gaps, s.beats), (1, 1, 0, 1));
        blocking(|r| engine.close(r)).unwrap();
    }

    /// A writer's journal made anew with other options is mirrored anew: the old mirror's
    /// waiters are answered, and the stream keeps one journal, the new mirror.
    #[test]
    fn a_flush_of_another_shape_makes_the_mirror_anew() {
        let (engine, edge) = edge();
        let inner = engine.inner.clone();
        edge.take_message(&inner, &beat("s", 0));
        let old = mirror(&engine, "s").unwrap();
        let (_control, rx) = wait(&engine, "s", 2);
        assert!(rx.try_recv().is_err(), "parked");
        let other = JournalShape { filter_pow2: shape().filter_pow2 - 1, ..shape() };
        edge.take_message(&inner, &flush("s", other, 1, 1));
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok(), "the old mirror's waiter is answered");
        let new = mirror(&engine, "s").unwrap();
        assert!(!new.same_as(&old));
        assert_eq!(JournalShape::of(&new.read(|s| *s.config())), other);
        assert_eq!(new.read(|s| s.generation()), 1);
        blocking(|r| engine.close(r)).unwrap();
    }

    /// A stream the writer no longer lists is dropped, and its waits answered.
    #[test]
    fn a_stream_the_writer_no_longer_lists_is_dropped() {
        let (engine, edge) = edge();
        let inner = engine.inner.clone();
        edge.take_message(&inner, &beat("s", 0));
        let (_control, rx) = wait(&engine, "s", 2);
        assert!(rx.try_recv().is_err(), "parked");
        edge.take_message(
            &inner,
            &wire::encode(&Message::Beat { writer: 1, writer_url: String::new(), streams: Vec::new() }),
        );
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok(), "its waiter is answered");
        assert!(!engine.inner.state.lock().streams.contains_key("s"));
        blocking(|r| engine.close(r)).unwrap();
    }
}
