//! The wait listener: a native HTTP/1.1 front for a server, on its own thread, that answers
//! touch waits (`POST /v1/stream/:name/touch/wait`) from the engine without entering
//! JavaScript, and passes every other request to the JS server behind it (`upstream`, on
//! loopback). A parked HTTP wait is what a live-query server holds most of; through Node's
//! `http` module each costs ~11 KB and a mass wake ~50 µs of JS a reply, here neither.
//!
//! - [`request`]: which requests are answered here, the wait they ask for, the reply's bytes
//!   (pure; the JS server's answers are the contract, `__test__/server-listener.spec.mjs`);
//! - `conn`: one client connection (answer, pass on, or hand over);
//! - this module: the socket, the accept loop and the thread, and closing.

mod conn;
pub mod request;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::net::TcpSocket;
use tokio::sync::{watch, Notify};

use crate::engine::TouchEngine;
use crate::error::{Error, Result};

/// How long [`WaitListener::close`] lets connections with a request in hand finish it.
const CLOSE_GRACE: Duration = Duration::from_millis(500);
/// Connections the kernel queues before the accept loop takes them (Node's default is 511; a
/// burst of thousands of clients opening at once overflows a short queue into retries).
const BACKLOG: u32 = 4096;

/// Where the listener listens and whom it passes requests to.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    pub host: String,
    /// 0: any free port ([`WaitListener::port`] says which).
    pub port: u16,
    /// The JS server that answers everything but the waits the engine takes.
    pub upstream: SocketAddr,
    /// How long a request's head may take in all, from its first byte ([`HEAD_TIMEOUT`], the
    /// Node server's `headersTimeout`): a client that trickles its head is closed at this.
    pub head_timeout: Duration,
}

pub use conn::HEAD_TIMEOUT;

/// Connections to the JS server kept open between passed requests: a passed request costs no
/// connect, and needs no new descriptor (which matters at the process's limit).
#[derive(Default)]
struct Upstreams(parking_lot::Mutex<Vec<(tokio::net::TcpStream, Instant)>>);

impl Upstreams {
    /// Most connections kept.
    const MAX: usize = 32;
    /// A kept connection idle longer is closed, not used: well under the Node server's
    /// `keepAliveTimeout` (130 s), so a request never meets the server closing it.
    const IDLE: Duration = Duration::from_secs(60);

    fn take(&self) -> Option<tokio::net::TcpStream> {
        let mut kept = self.0.lock();
        kept.retain(|(_, at)| at.elapsed() < Self::IDLE);
        kept.pop().map(|(s, _)| s)
    }

    fn put(&self, s: tokio::net::TcpStream) {
        let mut kept = self.0.lock();
        if kept.len() < Self::MAX {
            kept.push((s, Instant::now()));
        }
    }
}

/// What every connection shares.
struct Shared {
    upstreams: Upstreams,
    /// Until it is set ([`WaitListener::serve`]), every request is passed on.
    engine: OnceLock<TouchEngine>,
    upstream: SocketAddr,
    head_timeout: Duration,
    /// Connections being served; `idle` is notified when it reaches 0.
    live: AtomicUsize,
    idle: Notify,
    /// Waits parked here now.
    waiting: AtomicUsize,
    answered: AtomicU64,
    passed: AtomicU64,
    handed: AtomicU64,
}

/// What a listener has done, for `/v1/stats` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerStats {
    /// Connections open now.
    pub connections: usize,
    /// Waits parked now.
    pub waiting: usize,
    /// Waits answered here.
    pub answered: u64,
    /// Requests passed to the JS server one by one (waits the engine refused included).
    pub passed: u64,
    /// Connections handed to the JS server whole.
    pub handed: u64,
}

/// A running listener; [`WaitListener::close`] (or dropping it) stops it.
pub struct WaitListener {
    port: u16,
    shared: Arc<Shared>,
    stop: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl WaitListener {
    /// Binds the socket (errors such as a port in use are returned here) and starts serving
    /// on a thread of its own: waits from `engine`, or, without one, nothing until
    /// [`WaitListener::serve`] names it (a server that must know its port to make its engine).
    pub fn start(engine: Option<TouchEngine>, opts: ListenOptions) -> Result<WaitListener> {
        let listen_error = |e: std::io::Error| Error::Listen(format!("{}:{}: {e}", opts.host, opts.port));
        let addr = (opts.host.as_str(), opts.port)
            .to_socket_addrs()
            .map_err(listen_error)?
            .next()
            .ok_or_else(|| Error::Listen(format!("{}: no address", opts.host)))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("listener runtime: {e}")))?;
        let listener = {
            // The socket registers with the runtime's I/O driver, which it may do from here.
            let _entered = runtime.enter();
            let socket =
                if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(listen_error)?;
            socket.set_reuseaddr(true).map_err(listen_error)?;
            socket.bind(addr).map_err(listen_error)?;
            socket.listen(BACKLOG).map_err(listen_error)?
        };
        let port = listener.local_addr().map_err(listen_error)?.port();
        let (stop, closing) = watch::channel(false);
        let shared = Arc::new(Shared {
            engine: engine.map(OnceLock::from).unwrap_or_default(),
            upstream: opts.upstream,
            head_timeout: opts.head_timeout,
            upstreams: Upstreams::default(),
            live: AtomicUsize::new(0),
            idle: Notify::new(),
            waiting: AtomicUsize::new(0),
            answered: AtomicU64::new(0),
            passed: AtomicU64::new(0),
            handed: AtomicU64::new(0),
        });
        let shared_handle = shared.clone();
        let thread = std::thread::Builder::new()
            .name("dt-listener".into())
            .spawn(move || runtime.block_on(run(listener, shared, closing)))
            .map_err(|e| Error::Internal(format!("listener thread: {e}")))?;
        Ok(WaitListener { port, shared: shared_handle, stop: Some(stop), thread: Some(thread) })
    }

    /// Answers waits from `engine` from now on; refused if it already serves one.
    pub fn serve(&self, engine: TouchEngine) -> Result<()> {
        self.shared.engine.set(engine).map_err(|_| Error::invalid("the listener already serves an engine"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn stats(&self) -> ListenerStats {
        let s = &self.shared;
        ListenerStats {
            connections: s.live.load(Ordering::Relaxed),
            waiting: s.waiting.load(Ordering::Relaxed),
            answered: s.answered.load(Ordering::Relaxed),
            passed: s.passed.load(Ordering::Relaxed),
            handed: s.handed.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, closes idle connections, lets those with a request in hand finish it
    /// for up to [`CLOSE_GRACE`], then drops the rest (their parked waits are aborted). Blocks
    /// until the thread has ended; idempotent.
    pub fn close(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for WaitListener {
    fn drop(&mut self) {
        self.close();
    }
}

/// The accept loop, then the grace of [`WaitListener::close`].
async fn run(listener: tokio::net::TcpListener, shared: Arc<Shared>, closing: watch::Receiver<bool>) {
    let mut warned: Option<Instant> = None;
    let mut stop = closing.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    let _ = socket.set_nodelay(true);
                    shared.live.fetch_add(1, Ordering::AcqRel);
                    let shared = shared.clone();
                    let closing = closing.clone();
                    tokio::spawn(async move {
                        conn::serve(socket, shared.clone(), closing).await;
                        if shared.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                            shared.idle.notify_waiters();
                        }
                    });
                }
                Err(e) => {
                    // Out of descriptors (EMFILE, ENFILE) or a connection reset before it was
                    // taken: the listener keeps going; the first of the former is said once a
                    // minute at most.
                    if matches!(e.raw_os_error(), Some(24) | Some(23)) && warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        warned = Some(Instant::now());
                        eprintln!(
                            "durable-touch: wait listener out of descriptors ({e}): new connections wait in the kernel's queue until some close \
                             (raise the limit, ulimit -n, or spread clients over more processes)"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = stop.wait_for(|c| *c) => break,
        }
    }
    drop(listener);
    let all_done = async {
        loop {
            let notified = shared.idle.notified();
            if shared.live.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, all_done).await;
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// A client that sends the start of a head and then trickles it a byte at a time is closed
    /// at the head's deadline, counted from its first byte, not from each read.
    #[test]
    fn a_trickled_head_is_closed_at_its_deadline() {
        let head_timeout = Duration::from_millis(400);
        let opts =
            ListenOptions { host: "127.0.0.1".into(), port: 0, upstream: "127.0.0.1:9".parse().unwrap(), head_timeout };
        let mut listener = WaitListener::start(None, opts).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", listener.port())).unwrap();
        client.set_read_timeout(Some(Duration::from_millis(40))).unwrap();
        let began = Instant::now();
        client.write_all(b"POST /v1/stream/s/touch/wait HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
        let mut closed_after = None;
        while began.elapsed() < Duration::from_secs(4) {
            let mut reply = [0u8; 256];
            match client.read(&mut reply) {
                Ok(0) => {
                    closed_after = Some(began.elapsed());
                    break;
                }
                Ok(n) => panic!("a reply to a head never finished: {:?}", String::from_utf8_lossy(&reply[..n])),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => {
                    closed_after = Some(began.elapsed());
                    break;
                }
            }
            if client.write_all(b"a").is_err() {
                closed_after = Some(began.elapsed());
                break;
            }
        }
        let closed_after = closed_after.expect("a client trickling its head was kept for 4 s");
        assert!(closed_after >= head_timeout, "closed after {closed_after:?}, before the deadline");
        assert!(closed_after < head_timeout * 3, "closed after {closed_after:?}");
        assert_eq!(listener.stats().passed + listener.stats().handed, 0, "nothing reached the JS server");
        listener.close();
    }
}
