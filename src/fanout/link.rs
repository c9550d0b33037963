//! The NATS side: one thread running a tokio runtime with the `async-nats` client, for a writer
//! (publishes its messages in order, hears the edges' interest) or an edge (consumes the
//! writer's JetStream stream in order, publishes its interest).
//!
//! The rest of the crate talks to it through channels and callbacks and never waits on it: a
//! writer whose broker is down keeps serving its own waits (its messages are dropped once the
//! queue is full, and edges see the gap), an edge keeps serving what it has mirrored.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy, stream};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::FanoutOptions;
use crate::error::{Error, Result};

/// Most writer messages queued while the broker is slow or away; past that they are dropped
/// (counted in [`LinkStats::dropped`]): edges see the missing generations and answer stale.
const QUEUE_MAX: usize = 65_536;

/// What a link did, for stats.
#[derive(Default)]
pub struct LinkStats {
    pub sent: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub dropped: AtomicU64,
    pub received: AtomicU64,
    pub received_bytes: AtomicU64,
    pub connected: AtomicBool,
}

/// Called on the link's thread with each message's payload.
pub type OnMessage = Box<dyn FnMut(&[u8]) + Send>;

/// A running link; dropping it (or [`Link::close`]) stops its thread.
pub struct Link {
    tx: mpsc::Sender<Vec<u8>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub stats: Arc<LinkStats>,
}

/// The JetStream stream that holds a writer's messages.
pub fn stream_name(prefix: &str) -> String {
    let clean: String =
        prefix.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    format!("{}_TOUCH", clean.to_ascii_uppercase())
}

fn touch_subject(prefix: &str) -> String {
    format!("{prefix}.touch")
}

fn interest_subject(prefix: &str) -> String {
    format!("{prefix}.interest")
}

fn fanout_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Fanout(format!("{what}: {e}"))
}

impl Link {
    /// A writer's link: [`Link::send`] publishes on the JetStream stream (created if missing,
    /// with the options' retention); `on_interest` hears the edges.
    pub fn writer(opts: &FanoutOptions, on_interest: OnMessage) -> Result<Link> {
        Self::start(opts, Role::Writer, on_interest)
    }

    /// An edge's link: `on_message` gets every writer message from the oldest retained on,
    /// in order; [`Link::send`] publishes the edge's interest.
    pub fn edge(opts: &FanoutOptions, on_message: OnMessage) -> Result<Link> {
        Self::start(opts, Role::Edge, on_message)
    }

    /// Queues a message (a writer's to the edges, an edge's interest to the writer); never
    /// blocks. Returns false when it was dropped.
    pub fn send(&self, bytes: Vec<u8>) -> bool {
        match self.tx.try_send(bytes) {
            Ok(()) => true,
            Err(_) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Stops the thread after it has handed what is queued to the client (bounded wait).
    pub fn close(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn start(opts: &FanoutOptions, role: Role, on_message: OnMessage) -> Result<Link> {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let stats = Arc::new(LinkStats::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fanout_err("cannot start the fan-out runtime", e))?;
        let (opts, st) = (opts.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name(format!("dt-fanout-{}", role.name()))
            .spawn(move || rt.block_on(run(opts, role, rx, stop_rx, on_message, st)))
            .map_err(|e| fanout_err("cannot start the fan-out thread", e))?;
        Ok(Link { tx, stop: Some(stop_tx), thread: Some(thread), stats })
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Writer,
    Edge,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Edge => "edge",
        }
    }
}

async fn connect(
    opts: &FanoutOptions,
    stats: &Arc<LinkStats>,
    connected: mpsc::UnboundedSender<()>,
) -> std::result::Result<async_nats::Client, String> {
    let st = stats.clone();
    async_nats::ConnectOptions::new()
        .name(format!("durable-touch {}", opts.prefix))
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(|attempt| Duration::from_millis((50 * attempt as u64).min(500)))
        .event_callback(move |event| {
            let (st, connected) = (st.clone(), connected.clone());
            async move {
                match event {
                    async_nats::Event::Connected => {
                        st.connected.store(true, Ordering::Relaxed);
                        let _ = connected.send(());
                    }
                    async_nats::Event::Disconnected => st.connected.store(false, Ordering::Relaxed),
                    _ => {}
                }
            }
        })
        .connect(opts.url.as_str())
        .await
        .map_err(|e| e.to_string())
}

async fn run(
    opts: FanoutOptions,
    role: Role,
    mut rx: mpsc::Receiver<Vec<u8>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    mut on_message: OnMessage,
    stats: Arc<LinkStats>,
) {
    // Every (re)connection: a writer makes sure its stream exists (a broker may have come back
    // without its store).
    let (connected_tx, mut connected) = mpsc::unbounded_channel();
    let client = tokio::select! {
        c = connect(&opts, &stats, connected_tx) => match c {
            Ok(c) => c,
            Err(e) => {
                eprintln!("durable-touch fan-out: cannot connect to {}: {e}", opts.url);
                return;
            }
        },
        _ = &mut stop => return,
    };
    let js = jetstream::new(client.clone());
    let (out_subject, in_subject) = match role {
        Role::Writer => (touch_subject(&opts.prefix), interest_subject(&opts.prefix)),
        Role::Edge => (interest_subject(&opts.prefix), touch_subject(&opts.prefix)),
    };
    // Incoming: the edges' interest (core NATS) or the writer's stream (an ordered consumer).
    let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let reconnected = Arc::new(tokio::sync::Notify::new());
    let reader = match role {
        Role::Writer => {
            let client = client.clone();
            tokio::spawn(async move {
                let Ok(mut sub) = client.subscribe(in_subject).await else { return };
                while let Some(m) = sub.next().await {
                    if in_tx.send(m.payload.to_vec()).is_err() {
                        return;
                    }
                }
            })
        }
        Role::Edge => {
            let (js, opts, again) = (js.clone(), opts.clone(), reconnected.clone());
            tokio::spawn(async move { consume(js, opts, in_tx, again).await })
        }
    };
    // Making the stream retries while the broker is away or refuses it: a stop ends that too.
    let stopped = role == Role::Writer
        && tokio::select! {
            biased;
            _ = &mut stop => true,
            _ = ensure_stream(&js, &opts) => false,
        };
    if !stopped {
        loop {
            tokio::select! {
                biased;
                _ = &mut stop => break,
                Some(()) = connected.recv() => {
                    match role {
                        Role::Writer => tokio::select! {
                            biased;
                            _ = &mut stop => break,
                            _ = ensure_stream(&js, &opts) => {}
                        },
                        // The consumer would notice a broker that came back only when its pull
                        // expires (seconds): it starts again at once from where it was.
                        Role::Edge => reconnected.notify_one(),
                    }
                }
                Some(bytes) = rx.recv() => {
                    let n = bytes.len() as u64;
                    if client.publish(out_subject.clone(), bytes.into()).await.is_ok() {
                        stats.sent.fetch_add(1, Ordering::Relaxed);
                        stats.sent_bytes.fetch_add(n, Ordering::Relaxed);
                    } else {
                        stats.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Some(bytes) = in_rx.recv() => {
                    stats.received.fetch_add(1, Ordering::Relaxed);
                    stats.received_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    on_message(&bytes);
                }
            }
        }
    }
    reader.abort();
    // What was queued before the stop goes out (bounded: a broker that is away drops it).
    while let Ok(bytes) = rx.try_recv() {
        let _ = client.publish(out_subject.clone(), bytes.into()).await;
    }
    let _ = tokio::time::timeout(Duration::from_millis(500), client.flush()).await;
}

/// Creates the writer's JetStream stream if missing (retention by age and bytes), or sets the
/// retention of the one there when it differs (a writer restarted with other limits; the rest
/// of its config, such as replicas an operator set, is kept), retrying while the broker is away.
async fn ensure_stream(js: &jetstream::Context, opts: &FanoutOptions) {
    let config = stream::Config {
        name: stream_name(&opts.prefix),
        subjects: vec![touch_subject(&opts.prefix)],
        max_age: Duration::from_millis(opts.max_age_ms),
        max_bytes: opts.max_bytes,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    for attempt in 0u64.. {
        let ensured = async {
            let stream = js.get_or_create_stream(config.clone()).await.map_err(|e| e.to_string())?;
            let mut current = stream.cached_info().config.clone();
            if current.max_age != config.max_age || current.max_bytes != config.max_bytes {
                current.max_age = config.max_age;
                current.max_bytes = config.max_bytes;
                // JetStream refuses a duplicates window longer than the age limit (it sets
                // one no longer when it creates a stream).
                current.duplicate_window = current.duplicate_window.min(config.max_age);
                js.update_stream(current).await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        match ensured.await {
            Ok(()) => return,
            Err(e) => {
                if attempt == 0 {
                    eprintln!("durable-touch fan-out: cannot create the JetStream stream yet ({e}); retrying");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// An edge's ordered consumer of the writer's stream, from the oldest message retained; made
/// again whenever it fails (the broker restarted, the stream was not there yet).
async fn consume(
    js: jetstream::Context,
    opts: FanoutOptions,
    out: mpsc::UnboundedSender<Vec<u8>>,
    reconnected: Arc<tokio::sync::Notify>,
) {
    let name = stream_name(&opts.prefix);
    let mut next: Option<u64> = None;
    loop {
        let started = async {
            let mut stream = js.get_stream(&name).await.map_err(|e| e.to_string())?;
            let last = stream.info().await.map_err(|e| e.to_string())?.state.last_sequence;
            let deliver_policy = match next {
                // A stream made anew (the broker lost its store) numbers from 1 again: read it
                // all; the mirrors see the writer's generations jump.
                Some(seq) if last + 1 >= seq => DeliverPolicy::ByStartSequence { start_sequence: seq },
                _ => DeliverPolicy::All,
            };
            let consumer = stream
                .create_consumer(OrderedConfig { deliver_policy, ..Default::default() })
                .await
                .map_err(|e| e.to_string())?;
            consumer.messages().await.map_err(|e| e.to_string())
        };
        if let Ok(mut messages) = started.await {
            loop {
                let m = tokio::select! {
                    m = messages.next() => m,
                    _ = reconnected.notified() => break,
                };
                let Some(Ok(m)) = m else { break };
                if let Ok(info) = m.info() {
                    next = Some(info.stream_sequence + 1);
                }
                if out.send(m.payload.to_vec()).is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
