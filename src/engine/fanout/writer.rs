//! A writer: every touch-enabled stream's journal publishes its flushes ([`Writer::publisher`],
//! the source its runtime is given), a beat goes out every `beat_ms` (each stream's position,
//! profile, touch mode, checkpoint and active templates) and at once after what an edge must
//! know first, and the edges' interest comes back as remote hot interest
//! ([`crate::engine::hot::HotState::set_remote`]) and template heartbeats.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::{mode_byte, FanoutStats, Node};
use crate::engine::hot::RemoteInterest;
use crate::engine::runtime::Publish;
use crate::engine::{templates, Inner, TouchEngine};
use crate::error::Result;
use crate::fanout::link::Link;
use crate::fanout::wire::{self, JournalShape, Message, StreamBeat};
use crate::fanout::FanoutOptions;
use crate::journal::{wall_ms, FlushObserver, FlushRecord, JournalConfig};
use crate::jscompat::json;
use crate::store::blocking;

/// Beats between two full copies of a stream's profile and templates when they did not
/// change (an edge that lacks them asks for them sooner, `Interest::want_full`).
const FULL_EVERY: u32 = 20;

pub(crate) struct Writer {
    pub(super) node: Node,
    /// When it started (wall clock, ms): the elder of two writers on a prefix holds it.
    started_at_ms: i64,
    published: Mutex<Published>,
    /// Per stream, what the last beats sent of its profile and templates.
    sent: Mutex<HashMap<String, Sent>>,
    /// An edge asked for a full beat.
    full_next: AtomicBool,
    /// Held while a beat is built and queued, so beats leave in the order they were built
    /// (the loop's, and those sent at once after a change).
    beating: Mutex<()>,
}

/// Flush records published and the key ids they carried.
#[derive(Default)]
struct Published {
    flushes: u64,
    keys: u64,
}

/// What a writer's beats last sent of a stream (hashes) and how many beats ago.
#[derive(Clone, Copy)]
struct Sent {
    profile: u64,
    templates: u64,
    beats: u32,
}

impl Writer {
    pub fn new(opts: FanoutOptions) -> Arc<Writer> {
        Arc::new(Writer {
            node: Node::new(opts),
            started_at_ms: wall_ms(),
            published: Mutex::new(Published::default()),
            sent: Mutex::new(HashMap::new()),
            full_next: AtomicBool::new(false),
            beating: Mutex::new(()),
        })
    }

    /// What publishes the flushes of `stream`'s journal, whatever config it is made with.
    pub fn publisher(self: &Arc<Self>, stream: &str) -> Publish {
        let (me, stream) = (self.clone(), stream.to_string());
        Arc::new(move |cfg: &JournalConfig| me.observer(&stream, cfg))
    }

    /// What publishes a journal's flushes for `stream` (called under the journal's lock, so
    /// records are queued in generation order).
    fn observer(self: &Arc<Self>, stream: &str, cfg: &JournalConfig) -> FlushObserver {
        let (me, stream, shape) = (self.clone(), stream.to_string(), JournalShape::of(cfg));
        Arc::new(move |record: &FlushRecord| {
            let msg = Message::Flush { stream: stream.clone(), shape, record: record.clone() };
            me.node.send(wire::encode(&msg));
            let mut p = me.published.lock();
            p.flushes += 1;
            p.keys += record.keys.len() as u64;
        })
    }

    /// Starts the link, claiming the prefix, and the beat thread.
    pub(super) fn start(self: &Arc<Self>, inner: &Arc<Inner>) -> Result<()> {
        let opts = &self.node.opts;
        let claim = wire::Claim {
            writer: self.node.id,
            started_at_ms: self.started_at_ms,
            beat_ms: opts.beat_ms.min(u32::MAX as u64) as u32,
            writer_url: opts.writer_url.clone(),
            released: false,
        };
        let (me, weak) = (Arc::downgrade(self), Arc::downgrade(inner));
        let link = Link::writer(
            opts,
            claim,
            Box::new(move |bytes| {
                if let (Some(me), Some(inner)) = (me.upgrade(), weak.upgrade()) {
                    me.take_interest(&inner, bytes);
                }
            }),
        )?;
        let (me, weak) = (self.clone(), Arc::downgrade(inner));
        self.node.start(link, "dt-fanout-beat", move || me.run(weak))
    }

    /// The beat loop, until the node is closed.
    fn run(self: Arc<Self>, inner: Weak<Inner>) {
        let beat = Duration::from_millis(self.node.opts.beat_ms.max(10));
        while self.node.pause(beat) {
            let Some(inner) = inner.upgrade() else { return };
            self.beat_now(&inner);
        }
    }

    /// Builds and queues a beat. Besides the loop's, one goes out at once after what an edge
    /// must know before a client can use it there: a stream given touch, a profile changed, a
    /// template activated. Edges then plan a wait that follows at once as the writer would.
    pub fn beat_now(&self, inner: &Inner) {
        let _order = self.beating.lock();
        if let Some(msg) = self.beat(inner) {
            self.node.send(wire::encode(&msg));
            self.node.count_beat();
        }
    }

    /// The beat. Every touch-enabled stream gets its journal (so its flushes are published),
    /// and its position is read after the records before it were queued.
    fn beat(&self, inner: &Inner) -> Option<Message> {
        let mut streams = Vec::new();
        {
            let mut st = inner.state.lock();
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
            inner.store.query(
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
        let resumed = self.node.link_stats().is_some_and(|l| l.resumed.swap(false, Ordering::AcqRel));
        let full = self.full_next.swap(false, Ordering::AcqRel) | resumed;
        let mut sent = self.sent.lock();
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
        Some(Message::Beat { writer: self.node.id, writer_url: self.node.opts.writer_url.clone(), streams })
    }

    /// An edge's interest report.
    fn take_interest(&self, inner: &Arc<Inner>, bytes: &[u8]) {
        let report = match wire::decode_interest(bytes) {
            Ok(r) => r,
            Err(_) => return self.node.count_bad(),
        };
        if report.want_full {
            // An edge that just started (or lacks a stream) hears everything now, not at the
            // next beat due.
            self.full_next.store(true, Ordering::Release);
            self.node.wake();
        }
        let now = wall_ms();
        let (mut heartbeats, mut reported) = (Vec::new(), Vec::new());
        {
            let mut st = inner.state.lock();
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
            inner.poke_if_deferred(stream);
        }
        let engine = TouchEngine { inner: inner.clone() };
        for (stream, ids) in heartbeats {
            let _ = engine.heartbeat_templates(&stream, &ids);
        }
    }

    pub(super) fn stats(&self) -> FanoutStats {
        let p = self.published.lock();
        FanoutStats {
            flushes_sent: p.flushes,
            keys_sent: p.keys,
            writer_url: self.node.opts.writer_url.clone(),
            ..self.node.stats("writer")
        }
    }
}

fn hash_of(v: &impl Hash) -> u64 {
    // DefaultHasher::new() has fixed keys: equal values hash equal from beat to beat.
    let mut h = std::hash::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}
