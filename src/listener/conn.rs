//! One client connection of the wait listener. Its requests are read in turn: a touch wait the
//! engine takes is answered here; any other request (and a wait the engine refuses) is passed
//! to the JS server by itself, its response copied back; a request whose framing the listener
//! does not follow hands the rest of the connection to the JS server as it is.
//!
//! A parked wait holds its socket, the bytes of its request (to pass it on should the engine
//! answer with an error) and the engine's waiter; nothing else.

use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::request::{self, Chunks, Kind, Parsed, ResponseEnd, MAX_HEAD};
use super::Shared;
use crate::engine::wait::WaitControl;
use crate::error::Error;

/// How long an idle keep-alive connection is kept (`keepAliveTimeout` of the Node server).
const KEEP_ALIVE: Duration = Duration::from_secs(130);
/// How long a request's head may take to arrive in all, from its first byte (`headersTimeout`
/// of the Node server): the default of [`super::ListenOptions::head_timeout`].
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(140);

/// Serves `client` until it closes, a request closes it, or the listener closes while it is
/// idle (`closing`).
pub(super) async fn serve(mut client: TcpStream, shared: Arc<Shared>, mut closing: watch::Receiver<bool>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // When the head's first byte was here: the head's deadline counts from it, whatever
        // the reads in between (a client trickling a byte at a time is closed all the same).
        let mut head_began: Option<Instant> = None;
        let head = loop {
            if !buf.is_empty() {
                if let Parsed::Complete(h) = request::head(&buf) {
                    break h;
                }
            }
            let deadline = if buf.is_empty() {
                Instant::now() + KEEP_ALIVE
            } else {
                *head_began.get_or_insert_with(Instant::now) + shared.head_timeout
            };
            tokio::select! {
                n = read_some(&mut client, &mut buf) => if n == 0 { return },
                _ = closing.wait_for(|c| *c), if buf.is_empty() => return,
                _ = tokio::time::sleep_until(deadline) => return,
            }
        };
        let body = match head.kind {
            Kind::Wait { body, .. } | Kind::Pass { body, .. } => body,
            // Boxed, as is `pass` below: a parked wait's task is only as large as `answer`.
            Kind::Hand => return Box::pin(hand_over(client, buf, &shared)).await,
        };
        let total = head.len + body;
        while buf.len() < total {
            if read_some(&mut client, &mut buf).await == 0 {
                return;
            }
        }
        let rest = buf.split_off(total);
        let mut req = std::mem::replace(&mut buf, rest);
        req.shrink_to_fit();
        let keep = match head.kind {
            Kind::Wait { stream, .. } => {
                match answer(&mut client, &mut buf, &shared, &stream, &mut req, head.len, head.close).await {
                    Answer::Sent => true,
                    Answer::Gone => return,
                    Answer::Pass if req.is_empty() => {
                        internal_error(&mut client).await;
                        false
                    }
                    Answer::Pass => Box::pin(pass(&mut client, &req, false, &shared)).await,
                }
            }
            Kind::Pass { head_method, .. } => Box::pin(pass(&mut client, &req, head_method, &shared)).await,
            Kind::Hand => unreachable!("handed over above"),
        };
        if !keep || head.close {
            let _ = client.shutdown().await;
            return;
        }
        if buf.is_empty() {
            // An idle keep-alive connection holds no buffer.
            buf = Vec::new();
        }
    }
}

/// Reads what the socket has into `buf`; 0 at its end (or on an error).
async fn read_some(sock: &mut TcpStream, buf: &mut Vec<u8>) -> usize {
    if buf.capacity() - buf.len() < 512 {
        buf.reserve(1024.max(buf.len()));
    }
    sock.read_buf(buf).await.unwrap_or(0)
}

enum Answer {
    /// The reply was written.
    Sent,
    /// The client is gone (or the engine answered that the wait was aborted).
    Gone,
    /// The JS server answers this request: the body is not a wait the engine takes, or the
    /// engine answered with an error (the JS server says it as the route does).
    Pass,
}

/// A wait in progress: counted in `waiting`, and aborted when dropped before it settled (the
/// client went away, or the listener was shut down with the wait still parked).
struct Waiting<'a> {
    control: Arc<WaitControl>,
    settled: bool,
    shared: &'a Shared,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared.waiting.fetch_sub(1, Ordering::Relaxed);
        if !self.settled {
            self.control.abort();
        }
    }
}

/// Runs the wait the body of `req` (past its `head` bytes) asks for on `stream` and writes its
/// reply. Once the wait is parked, `req` is emptied: only a reply or an abort can follow (see
/// [`WaitControl::is_parked`]), and a parked wait keeps no more than it needs. While it is
/// parked, bytes the client sends (its next request) are kept in `pending`; the client's end
/// aborts the wait.
#[allow(clippy::too_many_arguments)]
async fn answer(
    client: &mut TcpStream,
    pending: &mut Vec<u8>,
    shared: &Shared,
    stream: &str,
    req: &mut Vec<u8>,
    head: usize,
    close: bool,
) -> Answer {
    let (Some(engine), Some(args)) = (shared.engine.get(), request::wait_args(&req[head..])) else {
        return Answer::Pass;
    };
    let (tx, mut rx) = oneshot::channel();
    let control = engine.wait(
        stream,
        args,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    if control.is_parked() {
        *req = Vec::new();
    }
    shared.waiting.fetch_add(1, Ordering::Relaxed);
    let mut waiting = Waiting { control, settled: false, shared };
    let reply = loop {
        tokio::select! {
            r = &mut rx => break r,
            ready = client.readable(), if pending.len() < MAX_HEAD => {
                if ready.is_err() {
                    return Answer::Gone;
                }
                if pending.capacity() == pending.len() {
                    pending.reserve(1024);
                }
                match client.try_read_buf(pending) {
                    Ok(0) => return Answer::Gone,
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return Answer::Gone,
                }
            }
        }
    };
    waiting.settled = true;
    drop(waiting);
    match reply {
        Ok(Ok(r)) => {
            let bytes = request::reply_bytes(&request::reply_json(&r), close);
            if client.write_all(&bytes).await.is_ok() {
                shared.answered.fetch_add(1, Ordering::Relaxed);
                Answer::Sent
            } else {
                Answer::Gone
            }
        }
        Ok(Err(Error::Aborted)) => Answer::Gone,
        Ok(Err(_)) | Err(_) => Answer::Pass,
    }
}

/// Writes a whole JSON error response and asks the client to close.
async fn error_reply(client: &mut TcpStream, status: &str, code: &str, message: &str) {
    let body = format!(r#"{{"error":{{"code":"{code}","message":"{message}"}}}}"#);
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = client.write_all(head.as_bytes()).await;
    let _ = client.write_all(body.as_bytes()).await;
}

/// For a wait the engine answered with an error after it parked (which it does not).
async fn internal_error(client: &mut TcpStream) {
    error_reply(client, "500 Internal Server Error", "ERR_INTERNAL", "a parked wait was answered with an error").await
}

/// For a request the JS server could not be reached for (it is closing, or this process is out
/// of descriptors).
async fn unreachable_reply(client: &mut TcpStream) {
    error_reply(client, "502 Bad Gateway", "ERR_INTERNAL", "the server behind the wait listener could not be reached")
        .await
}

/// Passes one request (`req`, head and body) to the JS server, on a kept connection of the
/// listener's ([`super::Upstreams`]) or a new one, and copies its response back. Whether the
/// client's connection can carry another request.
async fn pass(client: &mut TcpStream, req: &[u8], head_request: bool, shared: &Shared) -> bool {
    shared.passed.fetch_add(1, Ordering::Relaxed);
    let mut up = match shared.upstreams.take() {
        Some(s) => s,
        None => match TcpStream::connect(shared.upstream).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                s
            }
            Err(_) => {
                unreachable_reply(client).await;
                return false;
            }
        },
    };
    if up.write_all(req).await.is_err() {
        unreachable_reply(client).await;
        return false;
    }
    let (keep, reusable) = relay(client, &mut up, head_request).await;
    if reusable {
        shared.upstreams.put(up);
    }
    keep
}

/// Copies the JS server's response to one request from `up` to `client`: whether the client's
/// connection can carry another request, and whether `up` can (it ended exactly where the
/// response did, and the server did not ask to close).
async fn relay(client: &mut TcpStream, up: &mut TcpStream, head_request: bool) -> (bool, bool) {
    let mut got: Vec<u8> = Vec::with_capacity(4096);
    let end = loop {
        if let Some(end) = request::response_head(&got, head_request) {
            break end;
        }
        if read_some(up, &mut got).await == 0 {
            if got.is_empty() {
                unreachable_reply(client).await;
            } else {
                let _ = client.write_all(&got).await;
            }
            return (false, false);
        }
    };
    match end {
        ResponseEnd::Length { head, body, close } => {
            let mut left = head + body;
            loop {
                let take = got.len().min(left);
                if client.write_all(&got[..take]).await.is_err() {
                    return (false, false);
                }
                left -= take;
                if left == 0 {
                    return (!close, !close && take == got.len());
                }
                got.clear();
                if read_some(up, &mut got).await == 0 {
                    return (false, false);
                }
            }
        }
        ResponseEnd::Chunked { head, close } => {
            if client.write_all(&got[..head]).await.is_err() {
                return (false, false);
            }
            let mut chunks = Chunks::default();
            let mut from = head;
            loop {
                if let Some(n) = chunks.feed(&got[from..]) {
                    let ok = client.write_all(&got[from..from + n]).await.is_ok() && !close && !chunks.bad();
                    return (ok, ok && from + n == got.len());
                }
                if client.write_all(&got[from..]).await.is_err() {
                    return (false, false);
                }
                got.clear();
                from = 0;
                if read_some(up, &mut got).await == 0 {
                    return (false, false);
                }
            }
        }
        ResponseEnd::Eof => {
            if client.write_all(&got).await.is_ok() {
                let _ = tokio::io::copy(up, client).await;
            }
            (false, false)
        }
    }
}

/// Hands the rest of the connection (`buf`: what was read of it and not yet answered) to the
/// JS server: bytes are copied both ways until either side closes.
async fn hand_over(mut client: TcpStream, buf: Vec<u8>, shared: &Shared) {
    shared.handed.fetch_add(1, Ordering::Relaxed);
    let Ok(mut up) = TcpStream::connect(shared.upstream).await else {
        unreachable_reply(&mut client).await;
        return;
    };
    let _ = up.set_nodelay(true);
    if up.write_all(&buf).await.is_ok() {
        drop(buf);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
    }
}
