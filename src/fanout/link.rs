//! The NATS side: one thread running a tokio runtime with the `async-nats` client, for a writer
//! (publishes its messages in order, hears the edges' interest) or an edge (consumes the
//! writer's JetStream stream in order, publishes its interest).
//!
//! The rest of the crate talks to it through channels and callbacks and never waits on it: a
//! writer whose broker is down keeps serving its own waits (its messages are dropped once the
//! queue is full, and edges see the gap), an edge keeps serving what it has mirrored.
//!
//! Nor does [`Link::close`] wait on the broker, whatever it is doing (down, restarting,
//! refusing, slow): every await of the link's task races the stop (a publish waits for room in
//! the client's command queue, which nothing drains while the client reconnects or the broker
//! reads nothing), what was queued goes out best effort for [`CLOSE_DRAIN`], and `close` waits
//! for the thread at most [`CLOSE_WAIT`] (issue 34).
//!
//! One writer per prefix ([`super::lease`]): a writer publishes only under a claim the broker
//! stored, each message in an envelope naming that claim; an edge drops what a deposed writer
//! publishes. A writer that stands by publishes nothing until the holder releases the prefix
//! or falls silent; then the edges adopt it as they adopt a restarted writer.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy, stream};
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use super::lease::{Facts, Lease, State, Step};
use super::wire::{self, Claim};
use super::FanoutOptions;
use crate::error::{Error, Result};
use crate::journal::wall_ms;

/// Most writer messages queued while the broker is slow or away; past that they are dropped
/// (counted in [`LinkStats::dropped`]): edges see the missing generations and answer stale.
const QUEUE_MAX: usize = 65_536;

/// How long a stopping link spends handing what was queued to the client and flushing it;
/// what a broker that is away or slow has not taken by then is dropped.
pub const CLOSE_DRAIN: Duration = Duration::from_millis(750);

/// The longest [`Link::close`] waits for the link's thread; past that it leaves it behind
/// (it ends on its own, or with the process).
pub const CLOSE_WAIT: Duration = Duration::from_millis(1_500);

/// What a link did, for stats.
#[derive(Default)]
pub struct LinkStats {
    pub sent: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub dropped: AtomicU64,
    pub received: AtomicU64,
    pub received_bytes: AtomicU64,
    pub connected: AtomicBool,
    /// Writer: another writer holds the prefix; this one publishes nothing.
    pub standby: AtomicBool,
    /// Writer: the URL of the writer it stands by for.
    pub held_by: parking_lot::Mutex<String>,
    /// Writer: it stopped standing by; the engine's next beat carries everything.
    pub resumed: AtomicBool,
    /// Edge: writer messages dropped because a newer writer had claimed the prefix.
    pub fenced: AtomicU64,
}

/// Called on the link's thread with each message's payload.
pub type OnMessage = Box<dyn FnMut(&[u8]) + Send>;

/// A running link; dropping it (or [`Link::close`]) stops its thread.
pub struct Link {
    tx: mpsc::Sender<Vec<u8>>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Disconnected once the thread is done (its sender is dropped as it ends).
    done: std::sync::mpsc::Receiver<()>,
    role: Role,
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

fn claim_subject(prefix: &str) -> String {
    format!("{prefix}.writer")
}

fn fanout_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Fanout(format!("{what}: {e}"))
}

impl Link {
    /// A writer's link: [`Link::send`] publishes on the JetStream stream (created if missing,
    /// with the options' retention) unless another writer holds the prefix; `on_interest`
    /// hears the edges.
    pub fn writer(opts: &FanoutOptions, claim: Claim, on_interest: OnMessage) -> Result<Link> {
        Self::start(opts, Some(claim), on_interest)
    }

    /// An edge's link: `on_message` gets every writer message from the oldest retained on,
    /// in order; [`Link::send`] publishes the edge's interest.
    pub fn edge(opts: &FanoutOptions, on_message: OnMessage) -> Result<Link> {
        Self::start(opts, None, on_message)
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

    /// Stops the thread after it has handed what is queued to the client, best effort: returns
    /// within [`CLOSE_WAIT`] whatever the broker is doing.
    pub fn close(&mut self) {
        let _ = self.stop.send(true);
        let Some(thread) = self.thread.take() else { return };
        match self.done.recv_timeout(CLOSE_WAIT) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => eprintln!(
                "durable-touch fan-out: the {} link did not stop within {CLOSE_WAIT:?}; closing without it",
                self.role.name()
            ),
            _ => {
                let _ = thread.join();
            }
        }
    }

    fn start(opts: &FanoutOptions, claim: Option<Claim>, on_message: OnMessage) -> Result<Link> {
        let role = if claim.is_some() { Role::Writer } else { Role::Edge };
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let stats = Arc::new(LinkStats::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fanout_err("cannot start the fan-out runtime", e))?;
        let (opts, st) = (opts.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name(format!("dt-fanout-{}", role.name()))
            .spawn(move || {
                rt.block_on(run(opts, claim, rx, stop_rx, on_message, st));
                // Tasks are dropped; a blocking one (a name lookup) is not waited for.
                rt.shutdown_timeout(Duration::from_millis(100));
                drop(done_tx);
            })
            .map_err(|e| fanout_err("cannot start the fan-out thread", e))?;
        Ok(Link { tx, stop: stop_tx, thread: Some(thread), done, role, stats })
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

/// Resolves once the link is told to stop (or its [`Link`] is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}

/// `work`'s output, or `None` once the link is told to stop first. Every await of the link's
/// task that involves the broker goes through this: the client's calls wait for it (a publish
/// for room in the client's queue, which nothing drains while the broker is away or reads
/// nothing), and a stop must end them.
async fn or_stop<F: Future>(stop: &mut watch::Receiver<bool>, work: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = stopped(stop) => None,
        out = work => Some(out),
    }
}

async fn run(
    opts: FanoutOptions,
    claim: Option<Claim>,
    rx: mpsc::Receiver<Vec<u8>>,
    mut stop: watch::Receiver<bool>,
    on_message: OnMessage,
    stats: Arc<LinkStats>,
) {
    let (connected_tx, connected) = mpsc::unbounded_channel();
    let client = match or_stop(&mut stop, connect(&opts, &stats, connected_tx)).await {
        None => return,
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            eprintln!("durable-touch fan-out: cannot connect to {}: {e}", opts.url);
            return;
        }
    };
    let mut link = Running { opts, js: jetstream::new(client.clone()), client, rx, stop, stats, connected };
    match claim {
        Some(claim) => link.writer(Lease::new(claim), on_message).await,
        None => link.edge(on_message).await,
    }
}

/// A link's task once connected.
struct Running {
    opts: FanoutOptions,
    client: async_nats::Client,
    js: jetstream::Context,
    rx: mpsc::Receiver<Vec<u8>>,
    stop: watch::Receiver<bool>,
    stats: Arc<LinkStats>,
    /// Every (re)connection.
    connected: mpsc::UnboundedReceiver<()>,
}

/// The most bytes of queued messages a writer puts in one envelope (the broker's default
/// largest message is 1 MiB).
const BATCH_BYTES: usize = 64 * 1024;

/// How long one look at the stream, or a claim waiting for its ack, may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(2);

impl Running {
    /// A writer: publishes under its lease what the engine queues ([`super::lease`]), hears
    /// the edges' interest while it holds the prefix.
    async fn writer(&mut self, mut lease: Lease, mut on_interest: OnMessage) {
        let prefix = self.opts.prefix.clone();
        let interest = self.hear(interest_subject(&prefix));
        // Another writer's claim: look at once rather than at the next beat.
        let (claims_tx, mut claims) = mpsc::unbounded_channel::<Vec<u8>>();
        let heard_claims = {
            let client = self.client.clone();
            let subject = claim_subject(&prefix);
            tokio::spawn(async move {
                let Ok(mut sub) = client.subscribe(subject).await else { return };
                while let Some(m) = sub.next().await {
                    if claims_tx.send(m.payload.to_vec()).is_err() {
                        return;
                    }
                }
            })
        };
        let (mut interest_rx, interest_task) = interest;
        // Making the stream retries while the broker is away or refuses it: a stop ends that too.
        let mut stopped_early = or_stop(&mut self.stop, ensure_stream(&self.js, &self.opts)).await.is_none();
        let mut look_every = tokio::time::interval(Duration::from_millis(self.opts.beat_ms.clamp(10, 500)));
        // Messages waiting while the writer seeks the prefix, in order.
        let mut waiting: VecDeque<Vec<u8>> = VecDeque::new();
        while !stopped_early {
            // No arm awaits the client but through `or_stop`: while the broker is away, a
            // publish waits for room in the client's queue, and would wait past a stop.
            tokio::select! {
                biased;
                _ = stopped(&mut self.stop) => break,
                Some(()) = self.connected.recv() => {
                    if or_stop(&mut self.stop, ensure_stream(&self.js, &self.opts)).await.is_none() {
                        break;
                    }
                }
                _ = look_every.tick() => {
                    if !self.look(&mut lease, &mut waiting).await {
                        stopped_early = true;
                    }
                }
                Some(bytes) = claims.recv() => {
                    let other = wire::decode_claim(&bytes).is_ok_and(|c| c.writer != lease.mine().writer);
                    // Stored by the broker after (or before) this copy reaches us: look a little later.
                    if other && !self.look_after(&mut lease, &mut waiting, Duration::from_millis(20)).await {
                        stopped_early = true;
                    }
                }
                Some(bytes) = self.rx.recv() => {
                    match lease.state() {
                        State::Held(at) => {
                            // What else is queued already goes in the same envelope: one
                            // message for the broker to store and deliver, no wait added.
                            let (mut batch, mut size) = (vec![bytes], 0);
                            while size < BATCH_BYTES {
                                let Ok(more) = self.rx.try_recv() else { break };
                                size += more.len();
                                batch.push(more);
                            }
                            // With a batching window, what comes within it joins them.
                            let until = tokio::time::Instant::now() + Duration::from_millis(self.opts.batch_ms);
                            let mut stopping = false;
                            while self.opts.batch_ms > 0 && size < BATCH_BYTES {
                                let next = tokio::time::timeout_at(until, self.rx.recv());
                                match or_stop(&mut self.stop, next).await {
                                    Some(Ok(Some(more))) => {
                                        size += more.len();
                                        batch.push(more);
                                    }
                                    Some(_) => break,
                                    None => {
                                        stopping = true;
                                        break;
                                    }
                                }
                            }
                            if stopping {
                                // The batch goes out first in the drain.
                                waiting.extend(batch);
                                break;
                            }
                            if let Err(unsent) = self.publish(at, batch).await {
                                waiting.extend(unsent);
                                break;
                            }
                        }
                        State::Seeking if waiting.len() < QUEUE_MAX => waiting.push_back(bytes),
                        _ => {
                            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Some(bytes) = interest_rx.recv() => {
                    // While another writer holds the prefix, the edges' interest is its business.
                    if lease.state() == State::StandingBy {
                        continue;
                    }
                    self.stats.received.fetch_add(1, Ordering::Relaxed);
                    self.stats.received_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    on_interest(&bytes);
                }
            }
        }
        interest_task.abort();
        heard_claims.abort();
        // What was queued before the stop goes out, best effort, then the prefix is released:
        // a writer that follows need not wait out this one's lease.
        let stats = self.stats.clone();
        let mut unsent = waiting.len() as u64;
        let drain = async {
            let State::Held(at) = lease.state() else { return };
            let mut next: Vec<Vec<u8>> = waiting.drain(..).collect();
            while let Ok(bytes) = self.rx.try_recv() {
                next.push(bytes);
            }
            unsent = next.len() as u64;
            for chunk in next.chunks(64) {
                let payload = wire::envelope(at, &chunk.iter().map(|m| &m[..]).collect::<Vec<_>>());
                let n = payload.len() as u64;
                if self.client.publish(touch_subject(&self.opts.prefix), payload.into()).await.is_err() {
                    return;
                }
                unsent -= chunk.len() as u64;
                stats.sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                stats.sent_bytes.fetch_add(n, Ordering::Relaxed);
            }
            let release = Claim { released: true, ..lease.mine().clone() };
            let _ = self.claim(&release, at).await;
            let _ = self.client.flush().await;
        };
        let _ = tokio::time::timeout(CLOSE_DRAIN, drain).await;
        self.rx.close();
        self.stats.dropped.fetch_add(self.rx.len() as u64 + unsent, Ordering::Relaxed);
    }

    /// Publishes `messages` under the lease at `at`, in one envelope. Once stopped, hands them
    /// back unsent: they go out in the drain with what else was queued before the stop.
    async fn publish(&mut self, at: u64, messages: Vec<Vec<u8>>) -> std::result::Result<(), Vec<Vec<u8>>> {
        let payload = wire::envelope(at, &messages.iter().map(|m| &m[..]).collect::<Vec<_>>());
        let n = payload.len() as u64;
        let (client, subject) = (self.client.clone(), touch_subject(&self.opts.prefix));
        match or_stop(&mut self.stop, client.publish(subject, payload.into())).await {
            Some(Ok(())) => {
                self.stats.sent.fetch_add(messages.len() as u64, Ordering::Relaxed);
                self.stats.sent_bytes.fetch_add(n, Ordering::Relaxed);
                Ok(())
            }
            Some(Err(_)) => {
                self.stats.dropped.fetch_add(messages.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            None => Err(messages),
        }
    }

    /// Publishes `claim`, expecting the claim subject's last sequence to be `expect`: the
    /// sequence it was stored at, `Ok(None)` when another claim went in first.
    async fn claim(&self, claim: &Claim, expect: u64) -> std::result::Result<Option<u64>, String> {
        let publish =
            PublishMessage::build().payload(wire::encode_claim(claim).into()).expected_last_subject_sequence(expect);
        let ack = async {
            let ack = self.js.send_publish(claim_subject(&self.opts.prefix), publish).await?;
            ack.await
        };
        match tokio::time::timeout(LOOK_TIMEOUT, ack).await {
            Err(_) => Err("no answer".into()),
            Ok(Ok(ack)) => Ok(Some(ack.sequence)),
            Ok(Err(e)) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(None),
            Ok(Err(e)) => Err(e.to_string()),
        }
    }

    async fn look_after(&mut self, lease: &mut Lease, waiting: &mut VecDeque<Vec<u8>>, delay: Duration) -> bool {
        if or_stop(&mut self.stop, tokio::time::sleep(delay)).await.is_none() {
            return false;
        }
        self.look(lease, waiting).await
    }

    /// Looks at the stream and does what the lease says; false once stopped.
    async fn look(&mut self, lease: &mut Lease, waiting: &mut VecDeque<Vec<u8>>) -> bool {
        let facts = {
            let (js, prefix) = (self.js.clone(), self.opts.prefix.clone());
            match or_stop(&mut self.stop, tokio::time::timeout(LOOK_TIMEOUT, facts(&js, &prefix))).await {
                None => return false,
                Some(Ok(Ok(f))) => f,
                // The broker is away or slow: look again at the next beat.
                Some(_) => return true,
            }
        };
        let step = lease.observe(&facts, Instant::now());
        match step {
            Step::Nothing => {}
            Step::StandBy => {
                let dropped = waiting.len() as u64;
                waiting.clear();
                self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
            }
            Step::Claim { expect } => {
                let mine = lease.mine().clone();
                let claimed = {
                    let work = self.claim(&mine, expect);
                    match or_stop(&mut self.stop.clone(), work).await {
                        None => return false,
                        Some(c) => c,
                    }
                };
                match claimed {
                    Ok(Some(at)) => {
                        if lease.claimed(at) {
                            self.stats.resumed.store(true, Ordering::Release);
                            eprintln!("durable-touch fan-out: the writer that held the prefix is gone; this writer publishes now");
                        }
                        while !waiting.is_empty() {
                            let chunk: Vec<Vec<u8>> = waiting.drain(..waiting.len().min(64)).collect();
                            if let Err(unsent) = self.publish(at, chunk).await {
                                for m in unsent.into_iter().rev() {
                                    waiting.push_front(m);
                                }
                                return false;
                            }
                        }
                    }
                    Ok(None) => lease.refused(),
                    Err(_) => {}
                }
            }
        }
        let standing_by = lease.state() == State::StandingBy;
        if standing_by != self.stats.standby.swap(standing_by, Ordering::Relaxed) && standing_by {
            let url = lease.held_by.as_ref().map(|c| c.writer_url.clone()).unwrap_or_default();
            eprintln!(
                "durable-touch fan-out: the prefix \"{}\" is held by the writer at {}; this writer publishes nothing until it is gone (give each writer its own prefix)",
                self.opts.prefix,
                if url.is_empty() { "(no URL)" } else { &url }
            );
        }
        *self.stats.held_by.lock() = if standing_by {
            lease.held_by.as_ref().map(|c| c.writer_url.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        true
    }

    /// A core NATS subscription on `subject`, its payloads on a channel.
    fn hear(&self, subject: String) -> (mpsc::UnboundedReceiver<Vec<u8>>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            let Ok(mut sub) = client.subscribe(subject).await else { return };
            while let Some(m) = sub.next().await {
                if tx.send(m.payload.to_vec()).is_err() {
                    return;
                }
            }
        });
        (rx, task)
    }

    /// An edge: hands each of the writer's messages to `on_message` in order, publishes what
    /// the engine queues (its interest) on core NATS.
    async fn edge(&mut self, mut on_message: OnMessage) {
        let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let reconnected = Arc::new(tokio::sync::Notify::new());
        let reader = {
            let (js, opts, again, stats) =
                (self.js.clone(), self.opts.clone(), reconnected.clone(), self.stats.clone());
            tokio::spawn(async move { consume(js, opts, in_tx, again, stats).await })
        };
        let subject = interest_subject(&self.opts.prefix);
        let mut unsent: Option<Vec<u8>> = None;
        loop {
            tokio::select! {
                biased;
                _ = stopped(&mut self.stop) => break,
                // The consumer would notice a broker that came back only when its pull
                // expires (seconds): it starts again at once from where it was.
                Some(()) = self.connected.recv() => reconnected.notify_one(),
                Some(bytes) = self.rx.recv() => {
                    let n = bytes.len() as u64;
                    match or_stop(&mut self.stop, self.client.publish(subject.clone(), bytes.clone().into())).await {
                        Some(Ok(())) => {
                            self.stats.sent.fetch_add(1, Ordering::Relaxed);
                            self.stats.sent_bytes.fetch_add(n, Ordering::Relaxed);
                        }
                        Some(Err(_)) => {
                            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        None => {
                            unsent = Some(bytes);
                            break;
                        }
                    }
                }
                Some(bytes) = in_rx.recv() => {
                    self.stats.received.fetch_add(1, Ordering::Relaxed);
                    self.stats.received_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    on_message(&bytes);
                }
            }
        }
        reader.abort();
        // The last report goes out, best effort.
        let drain = async {
            let mut next = unsent.take();
            loop {
                let payload = match next.take() {
                    Some(p) => p,
                    None => match self.rx.try_recv() {
                        Ok(bytes) => bytes,
                        Err(_) => break,
                    },
                };
                if self.client.publish(subject.clone(), payload.into()).await.is_err() {
                    break;
                }
            }
            let _ = self.client.flush().await;
        };
        let _ = tokio::time::timeout(CLOSE_DRAIN, drain).await;
        self.rx.close();
    }
}

/// What the writer's stream shows now ([`Facts`]). The last claim is read first, so the
/// stream's last sequence read after it is never older.
async fn facts(js: &jetstream::Context, prefix: &str) -> std::result::Result<Facts, String> {
    let mut stream = js.get_stream(stream_name(prefix)).await.map_err(|e| e.to_string())?;
    let claim = match stream.get_last_raw_message_by_subject(&claim_subject(prefix)).await {
        Ok(m) => wire::decode_claim(&m.payload).ok().map(|c| (m.sequence, c)),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => None,
        Err(e) => return Err(e.to_string()),
    };
    let state = stream.info().await.map_err(|e| e.to_string())?.state.clone();
    let last_age = (state.last_sequence > 0).then(|| {
        let stored_ms = (state.last_timestamp.unix_timestamp_nanos() / 1_000_000) as i64;
        Duration::from_millis(wall_ms().saturating_sub(stored_ms).max(0) as u64)
    });
    Ok(Facts { last_seq: state.last_sequence, last_age, claim })
}

/// Creates the writer's JetStream stream if missing (its messages and its claims, retention by
/// age and bytes), or sets the subjects and retention of the one there when they differ (a writer restarted with other limits; the rest
/// of its config, such as replicas an operator set, is kept), retrying while the broker is away.
async fn ensure_stream(js: &jetstream::Context, opts: &FanoutOptions) {
    let config = stream::Config {
        name: stream_name(&opts.prefix),
        subjects: vec![touch_subject(&opts.prefix), claim_subject(&opts.prefix)],
        max_age: Duration::from_millis(opts.max_age_ms),
        max_bytes: opts.max_bytes,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    for attempt in 0u64.. {
        let ensured = async {
            let stream = js.get_or_create_stream(config.clone()).await.map_err(|e| e.to_string())?;
            let mut current = stream.cached_info().config.clone();
            if current.max_age != config.max_age
                || current.max_bytes != config.max_bytes
                || config.subjects.iter().any(|s| !current.subjects.contains(s))
            {
                current.max_age = config.max_age;
                current.max_bytes = config.max_bytes;
                for s in &config.subjects {
                    if !current.subjects.contains(s) {
                        current.subjects.push(s.clone());
                    }
                }
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
    stats: Arc<LinkStats>,
) {
    let (name, claims) = (stream_name(&opts.prefix), claim_subject(&opts.prefix));
    let mut next: Option<u64> = None;
    // The highest lease seen, claims included: what comes under a lower one was published by
    // a writer another one had deposed ([`super::lease`]).
    let mut lease_hi = 0u64;
    loop {
        let started = async {
            let mut stream = js.get_stream(&name).await.map_err(|e| e.to_string())?;
            let last = stream.info().await.map_err(|e| e.to_string())?.state.last_sequence;
            let (deliver_policy, anew) = match next {
                Some(seq) if last + 1 >= seq => (DeliverPolicy::ByStartSequence { start_sequence: seq }, false),
                // A stream made anew (the broker lost its store) numbers from 1 again: read it
                // all; the mirrors see the writer's generations jump.
                _ => (DeliverPolicy::All, true),
            };
            let consumer = stream
                .create_consumer(OrderedConfig { deliver_policy, ..Default::default() })
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((consumer.messages().await.map_err(|e| e.to_string())?, anew))
        };
        if let Ok((mut messages, anew)) = started.await {
            if anew {
                lease_hi = 0;
            }
            loop {
                let m = tokio::select! {
                    m = messages.next() => m,
                    _ = reconnected.notified() => break,
                };
                let Some(Ok(m)) = m else { break };
                let seq = m.info().map(|i| i.stream_sequence).unwrap_or(0);
                next = Some(seq + 1);
                if m.subject.as_str() == claims {
                    lease_hi = lease_hi.max(seq);
                    continue;
                }
                let Ok((lease, inner)) = wire::open_envelope(&m.payload) else {
                    // Not ours to judge here: the engine counts what it cannot read.
                    if out.send(m.payload.to_vec()).is_err() {
                        return;
                    }
                    continue;
                };
                if lease < lease_hi {
                    stats.fenced.fetch_add(inner.len() as u64, Ordering::Relaxed);
                    continue;
                }
                lease_hi = lease;
                for msg in inner {
                    if out.send(msg).is_err() {
                        return;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Links against a real nats-server (the one `testkit/nats-server.mjs` installs,
/// `NATS_SERVER_BIN`, or one on PATH; skipped without one): `close()` whatever the broker is
/// doing, and one writer per prefix.
#[cfg(test)]
mod broker_tests {
    use std::io::{BufRead, BufReader};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};

    use super::*;
    use crate::fanout::Role as Side;

    /// What `close()` may take (issue 34); a test gives up on a hung close after `HUNG`.
    const BOUND: Duration = Duration::from_secs(2);
    const HUNG: Duration = Duration::from_secs(10);

    /// The broker; `None` skips the test, unless `DT_REQUIRE_NATS` is set (`npm test` installs
    /// the broker first and sets it, so these tests cannot pass by not running).
    fn nats_bin() -> Option<PathBuf> {
        let works = |p: &Path| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success());
        let cached = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("node_modules/.cache/durable-touch/nats-server-2.15.1/nats-server");
        let found = std::env::var_os("NATS_SERVER_BIN")
            .map(PathBuf::from)
            .into_iter()
            .chain([cached, "nats-server".into()])
            .find(|p| works(p));
        assert!(found.is_some() || std::env::var_os("DT_REQUIRE_NATS").is_none(), "DT_REQUIRE_NATS: no nats-server");
        found
    }

    /// `nats-server -js` on a port and a store of its own, killed (SIGKILL), started again on
    /// them, or paused (SIGSTOP: a broker that holds its connections and reads nothing).
    struct Broker {
        bin: PathBuf,
        port: u16,
        store: tempfile::TempDir,
        child: Option<Child>,
    }

    impl Broker {
        fn start(bin: PathBuf) -> Broker {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut b = Broker { bin, port, store: tempfile::tempdir().unwrap(), child: None };
            b.restart();
            b
        }

        fn url(&self) -> String {
            format!("nats://127.0.0.1:{}", self.port)
        }

        fn restart(&mut self) {
            let mut child = Command::new(&self.bin)
                .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
                .arg(self.store.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let err = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                    if line.contains("Server is ready") {
                        let _ = tx.send(());
                    }
                }
            });
            rx.recv_timeout(Duration::from_secs(20)).expect("nats-server did not start");
            self.child = Some(child);
        }

        fn signal(&self, sig: &str) {
            let pid = self.child.as_ref().unwrap().id().to_string();
            assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
        }

        fn kill(&mut self) {
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    impl Drop for Broker {
        fn drop(&mut self) {
            self.kill();
        }
    }

    fn options(side: Side, url: &str) -> FanoutOptions {
        FanoutOptions { role: side, url: url.into(), prefix: "closing".into(), beat_ms: 100, ..Default::default() }
    }

    /// A writer and an edge on `url`, each sent a 1 KB message every 100 µs (a writer
    /// under load, flushing; the edge's reports), as the engine sends them: without waiting.
    struct Pair {
        links: Arc<parking_lot::Mutex<Vec<Link>>>,
        stop: Arc<AtomicBool>,
        pump: Option<std::thread::JoinHandle<()>>,
    }

    impl Pair {
        fn start(url: &str) -> Pair {
            let claim = Claim { writer: 1, beat_ms: 100, writer_url: "http://writer".into(), ..Default::default() };
            let writer = Link::writer(&options(Side::Writer, url), claim, Box::new(|_| {})).unwrap();
            let edge = Link::edge(&options(Side::Edge, url), Box::new(|_| {})).unwrap();
            let links = Arc::new(parking_lot::Mutex::new(vec![writer, edge]));
            let stop = Arc::new(AtomicBool::new(false));
            let (l, s) = (links.clone(), stop.clone());
            let pump = std::thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    for link in l.lock().iter() {
                        link.send(vec![7; 1_000]);
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            Pair { links, stop, pump: Some(pump) }
        }

        /// A broker and a pair on it, connected and publishing for 300 ms.
        fn busy_on_a_new_broker(bin: PathBuf) -> (Broker, Pair) {
            let broker = Broker::start(bin);
            let pair = Pair::start(&broker.url());
            pair.wait_connected();
            std::thread::sleep(Duration::from_millis(300));
            (broker, pair)
        }

        fn wait_connected(&self) {
            let until = Instant::now() + Duration::from_secs(10);
            while !self.links.lock().iter().all(|l| l.stats.connected.load(Ordering::Relaxed)) {
                assert!(Instant::now() < until, "the links never connected");
                std::thread::sleep(Duration::from_millis(10));
            }
        }

        /// Closes the writer and the edge at once, each on a thread of its own: how long each
        /// took (`None`: still closing after `HUNG`).
        fn close(mut self) -> Vec<Option<Duration>> {
            self.stop.store(true, Ordering::Relaxed);
            self.pump.take().unwrap().join().unwrap();
            let closing: Vec<_> = std::mem::take(&mut *self.links.lock())
                .into_iter()
                .map(|mut link| {
                    let (tx, rx) = std::sync::mpsc::channel();
                    std::thread::spawn(move || {
                        let t = Instant::now();
                        link.close();
                        let _ = tx.send(t.elapsed());
                    });
                    rx
                })
                .collect();
            let until = Instant::now() + HUNG;
            closing
                .into_iter()
                .map(|rx| rx.recv_timeout(until.saturating_duration_since(Instant::now())).ok())
                .collect()
        }
    }

    fn assert_prompt(what: &str, took: Vec<Option<Duration>>) {
        eprintln!("{what}: close took {:?} (writer), {:?} (edge)", took[0], took[1]);
        for (side, t) in ["writer", "edge"].iter().zip(&took) {
            match t {
                None => panic!("{what}: the {side}'s close() was still running after {HUNG:?}"),
                Some(t) => assert!(*t < BOUND, "{what}: the {side}'s close() took {t:?}"),
            }
        }
    }

    /// Issue 34: the broker killed, restarted on its store 2.5 s later, killed again; then
    /// close(). It used to wait forever: the link's task was stuck in a publish into the
    /// client's full command queue, which no reconnection would ever drain.
    #[test]
    fn close_returns_within_2s_after_the_broker_died_came_back_and_died_again() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let (mut broker, pair) = Pair::busy_on_a_new_broker(bin);
        broker.kill();
        std::thread::sleep(Duration::from_millis(2_500));
        broker.restart();
        pair.wait_connected();
        std::thread::sleep(Duration::from_millis(500));
        broker.kill();
        std::thread::sleep(Duration::from_millis(500));
        assert_prompt("died, came back, died", pair.close());
    }

    /// The broker gone for good (connections refused) while the links are busy.
    #[test]
    fn close_returns_within_2s_while_the_broker_is_down() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let (mut broker, pair) = Pair::busy_on_a_new_broker(bin);
        broker.kill();
        std::thread::sleep(Duration::from_millis(1_000));
        assert_prompt("down", pair.close());
    }

    /// A broker that stops reading (SIGSTOP): the connections stay up, nothing moves.
    #[test]
    fn close_returns_within_2s_while_the_broker_is_stalled() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let (broker, pair) = Pair::busy_on_a_new_broker(bin);
        broker.signal("-STOP");
        std::thread::sleep(Duration::from_millis(4_000));
        let took = pair.close();
        broker.signal("-CONT");
        assert_prompt("stalled", took);
    }

    /// A healthy broker: close is quick and still hands over what was queued (best effort,
    /// which here is everything).
    #[test]
    fn close_hands_what_was_queued_to_a_healthy_broker() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let broker = Broker::start(bin);
        let claim = Claim { writer: 1, beat_ms: 100, writer_url: "http://writer".into(), ..Default::default() };
        let mut writer = Link::writer(&options(Side::Writer, &broker.url()), claim, Box::new(|_| {})).unwrap();
        // The first message out: the writer holds the prefix (a writer that closes while it
        // still seeks it has nothing to hand over).
        assert!(writer.send(0u64.to_le_bytes().to_vec()));
        until("the first message out", Duration::from_secs(10), || writer.stats.sent.load(Ordering::Relaxed) == 1);
        const N: u64 = 5_000;
        for i in 1..N {
            assert!(writer.send(i.to_le_bytes().to_vec()));
        }
        let t = Instant::now();
        writer.close();
        let took = t.elapsed();
        eprintln!("healthy: close took {took:?}");
        assert!(took < BOUND, "close took {took:?}");
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        let mut edge = Link::edge(
            &options(Side::Edge, &broker.url()),
            Box::new(move |m| {
                assert_eq!(m, g.fetch_add(1, Ordering::Relaxed).to_le_bytes(), "in order");
            }),
        )
        .unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while got.load(Ordering::Relaxed) < N && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(got.load(Ordering::Relaxed), N, "what was queued before close reached the stream");
        edge.close();
    }

    /// The last resort: a link's thread that does not end (here a callback that takes 5 s) is
    /// left behind after CLOSE_WAIT.
    #[test]
    fn close_stops_waiting_for_a_thread_that_does_not_end() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let broker = Broker::start(bin);
        let claim = Claim { writer: 1, beat_ms: 100, writer_url: "http://writer".into(), ..Default::default() };
        let mut writer = Link::writer(&options(Side::Writer, &broker.url()), claim, Box::new(|_| {})).unwrap();
        let busy = Arc::new(AtomicBool::new(false));
        let b = busy.clone();
        let mut edge = Link::edge(
            &options(Side::Edge, &broker.url()),
            Box::new(move |_| {
                b.store(true, Ordering::Relaxed);
                std::thread::sleep(Duration::from_secs(5));
            }),
        )
        .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !busy.load(Ordering::Relaxed) {
            assert!(Instant::now() < until, "the edge never heard the writer");
            writer.send(vec![1]);
            std::thread::sleep(Duration::from_millis(50));
        }
        let t = Instant::now();
        edge.close();
        let took = t.elapsed();
        eprintln!("busy callback: close took {took:?}");
        assert!(took >= CLOSE_WAIT && took < BOUND, "close took {took:?}");
        writer.close();
    }

    /// Something that accepts connections and never says a word (no INFO): the links are
    /// still connecting when they are closed.
    #[test]
    fn close_returns_within_2s_while_the_broker_never_answers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("nats://{}", listener.local_addr().unwrap());
        let held = std::thread::spawn(move || listener.incoming().take(2).map_while(|c| c.ok()).collect::<Vec<_>>());
        let pair = Pair::start(&url);
        std::thread::sleep(Duration::from_millis(1_000));
        assert_prompt("silent", pair.close());
        drop(held);
    }

    fn writer_on(url: &str, prefix: &str, id: u64) -> Link {
        let opts = FanoutOptions { prefix: prefix.into(), ..options(Side::Writer, url) };
        let claim = Claim { writer: id, beat_ms: 100, writer_url: format!("http://w{id}"), ..Default::default() };
        Link::writer(&opts, claim, Box::new(|_| {})).unwrap()
    }

    /// What an edge gets from `prefix`'s stream: `expect` messages (then 100 ms more, for any
    /// beyond), or what came within 10 s; and how many it fenced.
    fn edge_reads(url: &str, prefix: &str, expect: usize) -> (Vec<Vec<u8>>, u64) {
        let got = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let g = got.clone();
        let opts = FanoutOptions { prefix: prefix.into(), ..options(Side::Edge, url) };
        let mut edge = Link::edge(&opts, Box::new(move |m| g.lock().push(m.to_vec()))).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while got.lock().len() < expect && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        let fenced = edge.stats.fenced.load(Ordering::Relaxed);
        edge.close();
        let got = std::mem::take(&mut *got.lock());
        (got, fenced)
    }

    fn until(what: &str, within: Duration, ok: impl Fn() -> bool) {
        let end = Instant::now() + within;
        while !ok() {
            assert!(Instant::now() < end, "{what}: not within {within:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Issue 34: two writers started at the same instant on one prefix, 50 times: one takes it,
    /// the other stands by, and the stream (what every edge reads) holds one writer's messages.
    #[test]
    fn two_writers_started_together_never_both_publish() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let broker = Broker::start(bin);
        let mut wins = [0; 2];
        for round in 0..50u64 {
            let prefix = format!("pair{round}");
            let pair = [writer_on(&broker.url(), &prefix, 1), writer_on(&broker.url(), &prefix, 2)];
            // Both send from the start, as engines beat and flush from the start.
            let t = Instant::now();
            let mut n = 0u8;
            while t.elapsed() < Duration::from_millis(250) {
                for (i, link) in pair.iter().enumerate() {
                    link.send(vec![i as u8, n]);
                }
                n = n.wrapping_add(1);
                std::thread::sleep(Duration::from_millis(2));
            }
            let standby: Vec<bool> = pair.iter().map(|l| l.stats.standby.load(Ordering::Relaxed)).collect();
            assert!(standby[0] != standby[1], "round {round}: standby {standby:?}");
            let holder = standby.iter().position(|s| !s).unwrap();
            let other = 1 - holder;
            wins[holder] += 1;
            assert_eq!(pair[other].stats.sent.load(Ordering::Relaxed), 0, "round {round}: the standby published");
            assert_eq!(*pair[other].stats.held_by.lock(), format!("http://w{}", holder + 1));
            // The standby closes first: it publishes nothing, not even as it goes.
            let [mut a, mut b] = pair;
            let (first, second) = if other == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
            first.close();
            second.close();
            let sent = second.stats.sent.load(Ordering::Relaxed) as usize;
            let (got, fenced) = edge_reads(&broker.url(), &prefix, sent);
            assert_eq!(got.len(), sent, "round {round}");
            assert!(got.iter().all(|m| m[0] == holder as u8), "round {round}: the edge read {got:?}");
            assert_eq!(fenced, 0);
        }
        eprintln!("50 paired starts: writer 1 took the prefix {} times, writer 2 {} times", wins[0], wins[1]);
    }

    /// A writer paused past its lease (here: silent), then publishing what it had queued before
    /// it looks again, as a process woken from a long GC or SIGSTOP does: its messages are in
    /// the stream after the successor's claim, and no edge takes them. It then stands by.
    #[test]
    fn a_deposed_writers_messages_reach_no_edge() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let broker = Broker::start(bin);
        let url = broker.url();
        let a = writer_on(&url, "deposed", 1);
        a.send(b"a-0".to_vec());
        until("the first writer publishing", Duration::from_secs(10), || a.stats.sent.load(Ordering::Relaxed) == 1);
        let mut b = writer_on(&url, "deposed", 2);
        // The holder keeps publishing (as its beats do): the second stands by.
        until("the second standing by", Duration::from_secs(10), || {
            a.send(b"a-1".to_vec());
            std::thread::sleep(Duration::from_millis(20));
            b.stats.standby.load(Ordering::Relaxed)
        });
        // The holder falls silent for more than three beats: the second takes over.
        until("the second taking over", Duration::from_secs(10), || !b.stats.standby.load(Ordering::Relaxed));
        b.send(b"b-0".to_vec());
        until("the second publishing", Duration::from_secs(10), || b.stats.sent.load(Ordering::Relaxed) == 1);
        // The first writer's claim went in first, at sequence 1: what it publishes on waking,
        // before it looks at the stream again, goes out under that lease.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let client = async_nats::connect(&url).await.unwrap();
            let js = jetstream::new(client.clone());
            let first = js.get_stream(stream_name("deposed")).await.unwrap().get_raw_message(1).await.unwrap();
            assert_eq!(wire::decode_claim(&first.payload).unwrap().writer, 1);
            client.publish(touch_subject("deposed"), wire::envelope(1, &[b"a-late"]).into()).await.unwrap();
            client.flush().await.unwrap();
        });
        b.send(b"b-1".to_vec());
        until("the first standing by", Duration::from_secs(10), || a.stats.standby.load(Ordering::Relaxed));
        assert_eq!(*a.stats.held_by.lock(), "http://w2");
        until("the second's last message out", Duration::from_secs(10), || b.stats.sent.load(Ordering::Relaxed) == 2);
        b.close();
        let sent = (a.stats.sent.load(Ordering::Relaxed) + 2) as usize;
        let (got, fenced) = edge_reads(&url, "deposed", sent);
        let got: Vec<String> = got.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect();
        assert_eq!(got.first().map(String::as_str), Some("a-0"));
        let from_b: Vec<&str> = got.iter().map(String::as_str).skip_while(|m| m.starts_with("a-")).collect();
        assert_eq!(from_b, ["b-0", "b-1"], "the edge read {got:?}");
        assert_eq!(fenced, 1, "the deposed writer's late message is fenced");
    }

    /// A clean close releases the prefix: the standby takes it over at its next look, not after
    /// the lapse.
    #[test]
    fn a_closed_writer_hands_the_prefix_over_at_once() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let broker = Broker::start(bin);
        let mut a = writer_on(&broker.url(), "handover", 1);
        let b = writer_on(&broker.url(), "handover", 2);
        until("the second standing by", Duration::from_secs(10), || {
            a.send(vec![0]);
            std::thread::sleep(Duration::from_millis(20));
            b.stats.standby.load(Ordering::Relaxed)
        });
        a.close();
        let t = Instant::now();
        until("the second taking over", Duration::from_secs(10), || !b.stats.standby.load(Ordering::Relaxed));
        let took = t.elapsed();
        eprintln!("handover after a clean close: {took:?}");
        assert!(took < crate::fanout::lease::lapse(100), "took {took:?}, as long as a lapse");
        assert!(b.stats.resumed.load(Ordering::Acquire), "its next beat carries everything");
    }

    /// With a batching window, flushes sent within it share one broker message; without, each
    /// goes at once. An edge gets every one, in order, either way.
    #[test]
    fn a_batching_window_puts_what_comes_within_it_in_one_message() {
        let Some(bin) = nats_bin() else { return eprintln!("skipped: no nats-server") };
        let broker = Broker::start(bin);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let stored = |prefix: &str| {
            rt.block_on(async {
                let js = jetstream::new(async_nats::connect(broker.url()).await.unwrap());
                let mut s = js.get_stream(stream_name(prefix)).await.unwrap();
                s.info().await.unwrap().state.messages
            })
        };
        for (prefix, batch_ms) in [("unbatched", 0), ("batched", 200)] {
            let opts = FanoutOptions { prefix: prefix.into(), batch_ms, ..options(Side::Writer, &broker.url()) };
            let claim = Claim { writer: 1, beat_ms: 100, ..Default::default() };
            let mut w = Link::writer(&opts, claim, Box::new(|_| {})).unwrap();
            w.send(vec![0]);
            until("the first message out", Duration::from_secs(10), || w.stats.sent.load(Ordering::Relaxed) == 1);
            for i in 1..=8u8 {
                std::thread::sleep(Duration::from_millis(10));
                w.send(vec![i]);
            }
            until("all out", Duration::from_secs(10), || w.stats.sent.load(Ordering::Relaxed) == 9);
            w.close();
            // The claim, its release, and the envelopes.
            let envelopes = stored(prefix) - 2;
            eprintln!("{prefix}: 9 messages in {envelopes} broker messages");
            if batch_ms == 0 {
                assert!(envelopes >= 8, "{envelopes}");
            } else {
                assert_eq!(envelopes, 2, "the first alone, the 8 sent within 80 ms together");
            }
            let (got, _) = edge_reads(&broker.url(), prefix, 9);
            assert_eq!(got, (0..=8u8).map(|i| vec![i]).collect::<Vec<_>>());
        }
    }
}
