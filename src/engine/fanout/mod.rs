//! The engine's side of the fan-out ([`crate::fanout`]), with the role as a type: an engine
//! with a fan-out is a [`Writer`] or an [`Edge`] ([`Fanout`]), and what a role keeps lives in
//! its role.
//!
//! - [`writer`]: a writer publishes its journals' flushes, beats every `beat_ms` and takes
//!   the edges' interest;
//! - [`edge`]: an edge mirrors the writer's journals, takes its beats and reports its waits'
//!   interest;
//! - this module: the [`Node`] both roles stand on (options, id, link to the broker, the
//!   thread that beats or reports), the stats, and the touch mode as the wire writes it.
//!
//! The role gives each stream's journal its source when the stream's runtime is made
//! ([`Fanout::source`]): a writer's is published, an edge's is a mirror, which lives in the
//! stream's runtime with the writer's view of the stream beside it
//! ([`crate::engine::runtime::Source`]).

pub(crate) mod edge;
pub(crate) mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub(crate) use edge::Edge;
pub(crate) use writer::Writer;

use super::policy::TouchMode;
use super::runtime::{MirrorInfo, Source};
use super::{Inner, TouchEngine};
use crate::error::{Error, Result};
use crate::fanout::link::{Link, LinkStats};
use crate::fanout::{FanoutOptions, Role};
use crate::journal::Epoch;

/// The role an engine plays in the fan-out.
pub(crate) enum Fanout {
    Writer(Arc<Writer>),
    Edge(Arc<Edge>),
}

impl Fanout {
    pub fn new(opts: FanoutOptions) -> Fanout {
        match opts.role {
            Role::Writer => Fanout::Writer(Writer::new(opts)),
            Role::Edge => Fanout::Edge(Edge::new(opts)),
        }
    }

    pub fn as_writer(&self) -> Option<&Arc<Writer>> {
        match self {
            Fanout::Writer(w) => Some(w),
            Fanout::Edge(_) => None,
        }
    }

    pub fn as_edge(&self) -> Option<&Arc<Edge>> {
        match self {
            Fanout::Edge(e) => Some(e),
            Fanout::Writer(_) => None,
        }
    }

    /// The source of the journal of `stream`, whose runtime is made now.
    pub fn source(&self, stream: &str) -> Source {
        match self {
            Fanout::Writer(w) => Source::Published(w.publisher(stream)),
            Fanout::Edge(_) => Source::Mirror(MirrorInfo::default()),
        }
    }

    /// Starts the link and the beat (writer) or report (edge) thread for `inner`.
    pub fn start(&self, inner: &Arc<Inner>) -> Result<()> {
        match self {
            Fanout::Writer(w) => w.start(inner),
            Fanout::Edge(e) => e.start(inner),
        }
    }

    /// Stops the thread and the link (what is queued is handed to the broker first).
    pub fn close(&self) {
        self.node().close();
    }

    pub fn stats(&self) -> FanoutStats {
        match self {
            Fanout::Writer(w) => w.stats(),
            Fanout::Edge(e) => e.stats(),
        }
    }

    fn node(&self) -> &Node {
        match self {
            Fanout::Writer(w) => &w.node,
            Fanout::Edge(e) => &e.node,
        }
    }
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

/// What both roles stand on: the options, this process's id in the fan-out (a writer's in its
/// messages, an edge's in its reports), the link to the broker and the thread that beats
/// (writer) or reports (edge) until [`Node::close`].
pub(crate) struct Node {
    opts: FanoutOptions,
    id: u64,
    link: Mutex<Option<Link>>,
    link_stats: Mutex<Option<Arc<LinkStats>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stop: Mutex<bool>,
    stopped: Condvar,
    /// Beats sent (writer) or taken (edge), and messages that did not decode.
    beats: AtomicU64,
    bad: AtomicU64,
}

impl Node {
    fn new(opts: FanoutOptions) -> Node {
        Node {
            opts,
            id: Epoch::random().0,
            link: Mutex::new(None),
            link_stats: Mutex::new(None),
            thread: Mutex::new(None),
            stop: Mutex::new(false),
            stopped: Condvar::new(),
            beats: AtomicU64::new(0),
            bad: AtomicU64::new(0),
        }
    }

    /// Takes up `link` and runs `body` on a thread named `name`.
    fn start(&self, link: Link, name: &str, body: impl FnOnce() + Send + 'static) -> Result<()> {
        *self.link_stats.lock() = Some(link.stats.clone());
        *self.link.lock() = Some(link);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .map_err(|e| Error::Fanout(format!("cannot start the fan-out thread: {e}")))?;
        *self.thread.lock() = Some(handle);
        Ok(())
    }

    /// Waits `step`, or less when woken ([`Node::wake`]); `false` once closed.
    fn pause(&self, step: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.stopped.wait_for(&mut stop, step);
        }
        !*stop
    }

    /// Ends the thread's pause now.
    fn wake(&self) {
        self.stopped.notify_all();
    }

    fn send(&self, bytes: Vec<u8>) {
        if let Some(link) = &*self.link.lock() {
            link.send(bytes);
        }
    }

    fn link_stats(&self) -> Option<Arc<LinkStats>> {
        self.link_stats.lock().clone()
    }

    fn count_beat(&self) {
        self.beats.fetch_add(1, Ordering::Relaxed);
    }

    fn count_bad(&self) {
        self.bad.fetch_add(1, Ordering::Relaxed);
    }

    /// Stops the thread and the link (what is queued is handed to the broker first).
    fn close(&self) {
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

    /// The stats both roles share: the link's, beats and bad messages.
    fn stats(&self, role: &'static str) -> FanoutStats {
        let mut s = FanoutStats {
            role,
            beats: self.beats.load(Ordering::Relaxed),
            bad_messages: self.bad.load(Ordering::Relaxed),
            ..Default::default()
        };
        if let Some(l) = self.link_stats() {
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
}

/// A touch mode as a beat carries it.
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

impl Inner {
    /// The engine's role when it is a writer.
    pub(crate) fn writer(&self) -> Option<&Arc<Writer>> {
        self.fanout.as_ref()?.as_writer()
    }

    /// The engine's role when it is an edge.
    pub(crate) fn edge(&self) -> Option<&Arc<Edge>> {
        self.fanout.as_ref()?.as_edge()
    }

    /// A writer's beat now, not at the next one due ([`Writer::beat_now`]); nothing elsewhere.
    pub(crate) fn beat_now(&self) {
        if let Some(w) = self.writer() {
            w.beat_now(self);
        }
    }
}

impl TouchEngine {
    /// The fan-out's counters, `None` without one.
    pub fn fanout_stats(&self) -> Option<FanoutStats> {
        self.inner.fanout.as_ref().map(Fanout::stats)
    }

    /// Refuses at an edge what only the writer does.
    pub(crate) fn writer_only(&self) -> Result<()> {
        match self.inner.edge() {
            Some(edge) => Err(edge.read_only()),
            None => Ok(()),
        }
    }
}
