//! What the wait listener reads in a request and writes back, without sockets: which requests
//! it answers itself (a touch wait it can answer byte for byte as `apps/server/` would), the
//! wait such a request asks for, and the bytes of its reply. Anything else is passed on whole.

use crate::engine::wait::{WaitArgs, WaitReply, STALE_MESSAGE};
use crate::jscompat::json::{self, Value};

/// Most bytes of a request line and headers (Node's default `maxHeaderSize`). A longer head is
/// passed on to the JS server, which answers it 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most headers a request the listener reads may have; more, and it is passed on.
const MAX_HEADERS: usize = 64;
/// The largest wait body the listener answers itself; a larger one is passed on. A wait of
/// 1,024 keys of 40 characters is ~45 KiB. A body this size cannot hold more JSON values than
/// the server refuses (each value it counts takes a byte at least), so only depth is checked.
pub const MAX_NATIVE_BODY: usize = 64 * 1024;
/// `MAX_REQUEST_VALUES` of `apps/server/request.mjs`.
const MAX_REQUEST_VALUES: usize = 65_536;
const _: () = assert!(MAX_NATIVE_BODY <= MAX_REQUEST_VALUES);
/// `MAX_JSON_DEPTH` of `apps/server/json-body.mjs`.
const MAX_JSON_DEPTH: usize = 1000;

/// A complete request head, classified.
#[derive(Debug, PartialEq)]
pub struct Head {
    /// Bytes of the request line and headers, the blank line included.
    pub len: usize,
    pub kind: Kind,
    /// The client asked to close the connection after this request.
    pub close: bool,
}

/// What to do with a request.
#[derive(Debug, PartialEq)]
pub enum Kind {
    /// A touch wait on the stream named (decoded), with a body of `body` bytes: answered here
    /// if its body is a wait the engine takes, else passed on.
    Wait { stream: String, body: usize },
    /// Any other request with a body of `body` bytes (0 for none), passed on by itself.
    Pass { body: usize, head_method: bool },
    /// A request whose framing the listener does not follow (chunked or unknown length, an
    /// upgrade, `Expect`, HTTP/1.0, a head the parser refuses): from here the connection is
    /// handed to the JS server as it is.
    Hand,
}

/// What a buffer holding the start of a connection's next request says.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    Complete(Head),
    /// More bytes are needed (and the buffer is still below [`MAX_HEAD`]).
    Partial,
}

/// Reads the head at the start of `buf`.
pub fn head(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        _ => return Parsed::Complete(Head { len: 0, kind: Kind::Hand, close: true }),
    };
    let hand = Parsed::Complete(Head { len, kind: Kind::Hand, close: true });
    if req.version != Some(1) {
        return hand;
    }
    let (mut length, mut lengths, mut hosts, mut host_ok, mut close) = (0usize, 0, 0, true, false);
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            match decimal(h.value) {
                Some(n) => length = n,
                None => return hand,
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            return hand;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    return hand;
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            host_ok = valid_host(h.value);
        }
    }
    let method = req.method.unwrap_or("");
    if lengths > 1 || method == "CONNECT" {
        return hand;
    }
    let target = req.path.unwrap_or("");
    let stream =
        (method == "POST" && hosts <= 1 && host_ok && length <= MAX_NATIVE_BODY).then(|| wait_stream(target)).flatten();
    let kind = match stream {
        Some(stream) => Kind::Wait { stream, body: length },
        None => Kind::Pass { body: length, head_method: method == "HEAD" },
    };
    Parsed::Complete(Head { len, kind, close })
}

fn decimal(v: &[u8]) -> Option<usize> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 15 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// `validHost` of `apps/server/request.mjs`: empty, or host[:port] with host a bracketed IP literal or
/// an RFC 3986 reg-name / IPv4 address.
fn valid_host(v: &[u8]) -> bool {
    if v.is_empty() {
        return true;
    }
    let (host, port) = match v.iter().rposition(|b| *b == b':') {
        // The colon of a bracketed literal is not a port's.
        Some(i) if !v[i..].contains(&b']') => (&v[..i], &v[i + 1..]),
        _ => (v, &b""[..]),
    };
    if !port.iter().all(u8::is_ascii_digit) {
        return false;
    }
    if let Some(inner) = host.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]")) {
        return !inner.is_empty() && inner.iter().all(|b| b.is_ascii_hexdigit() || *b == b':' || *b == b'.');
    }
    !host.is_empty() && host.iter().all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(b))
}

/// The stream a touch wait's request target names (`/v1/stream/<name>/touch/wait`, trailing
/// slashes and a query allowed, as `waitPath` of `apps/server/http.mjs`), decoded as
/// `decodeURIComponent` does; `None` for any other target, and for those the listener leaves
/// to the JS server's URL parser (dot segments, backslashes, bytes outside printable ASCII).
pub fn wait_stream(target: &str) -> Option<String> {
    if target.contains('#') || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let raw = path.strip_prefix("/v1/stream/")?.trim_end_matches('/').strip_suffix("/touch/wait")?;
    if raw.is_empty() || raw.contains('\\') {
        return None;
    }
    let dots = |s: &str| {
        let s = s.to_ascii_lowercase().replace("%2e", ".");
        s == "." || s == ".."
    };
    if raw.split('/').any(dots) {
        return None;
    }
    percent_decode(raw)
}

/// `decodeURIComponent`: every `%XX` decoded, the result valid UTF-8; `None` where it throws.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The wait a body asks for, when the JS server would pass the same request to the engine:
/// UTF-8 (one leading BOM dropped, as `TextDecoder` does), JSON within the server's depth, an
/// object, and a wait [`WaitArgs::parse`] takes. `None` otherwise: the JS server answers it.
pub fn wait_args(body: &[u8]) -> Option<WaitArgs> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let text = std::str::from_utf8(body).ok()?;
    if depth(body) > MAX_JSON_DEPTH {
        return None;
    }
    let value = json::parse(text).ok()?;
    if !matches!(value, Value::Object(_)) {
        return None;
    }
    WaitArgs::parse(&value).ok()
}

/// The deepest nesting of arrays and objects in JSON bytes (as `scanJson` counts it).
fn depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &c in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The route's JSON for a wait's reply: `makeWaitReply`'s fields, then a stale reply's (in the
/// order the binding's `WaitResult` sets them: its optional fields last).
pub fn reply_json(r: &WaitReply) -> String {
    use std::fmt::Write;
    let text = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut out = String::with_capacity(192);
    let _ = write!(
        out,
        "{{\"touched\":{},\"cursor\":{},\"effectiveWaitKind\":\"{}\",\"bucketMaxSourceOffsetSeq\":\"{}\",\"flushAtMs\":{},\"bucketStartMs\":{}",
        r.touched,
        text(&r.cursor),
        r.effective_wait_kind.as_str(),
        r.bucket_max_source_offset_seq,
        r.flush_at_ms,
        r.bucket_start_ms
    );
    if r.stale {
        out.push_str(",\"stale\":true");
    }
    if let Some(epoch) = &r.epoch {
        let _ = write!(out, ",\"epoch\":{}", text(epoch));
    }
    if let Some(g) = r.generation {
        let _ = write!(out, ",\"generation\":{g}");
    }
    if r.stale {
        let _ = write!(out, ",\"error\":{{\"code\":\"stale\",\"message\":{}}}", text(STALE_MESSAGE));
    }
    out.push('}');
    out
}

/// A whole `200` response carrying `json`.
pub fn reply_bytes(json: &str, close: bool) -> Vec<u8> {
    let connection = if close { "connection: close\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{connection}\r\n",
        json.len()
    )
    .into_bytes();
    out.extend_from_slice(json.as_bytes());
    out
}

/// How a response the JS server sent ends.
#[derive(Debug, PartialEq)]
pub enum ResponseEnd {
    /// After this many body bytes past the head; then whether the server asked to close.
    Length { head: usize, body: usize, close: bool },
    /// Chunked: the end is found by [`Chunks`].
    Chunked { head: usize, close: bool },
    /// When the server closes the connection (no length, or an interim or upgrade response).
    Eof,
}

/// Reads a response head at the start of `buf` (`None`: more bytes needed). `head_request`:
/// the request was a HEAD, whose response has no body whatever its headers say.
pub fn response_head(buf: &[u8], head_request: bool) -> Option<ResponseEnd> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut headers);
    let head = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return None,
        _ => return Some(ResponseEnd::Eof),
    };
    let status = res.code.unwrap_or(0);
    if status < 200 {
        return Some(ResponseEnd::Eof);
    }
    let (mut length, mut chunked, mut close) = (None, false, false);
    for h in res.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            match decimal(h.value) {
                Some(n) if length.is_none() || length == Some(n) => length = Some(n),
                _ => return Some(ResponseEnd::Eof),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Some(ResponseEnd::Eof);
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= h.value.split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
    }
    if head_request || status == 204 || status == 304 {
        return Some(ResponseEnd::Length { head, body: 0, close });
    }
    match (chunked, length) {
        (true, _) => Some(ResponseEnd::Chunked { head, close }),
        (false, Some(body)) => Some(ResponseEnd::Length { head, body, close }),
        (false, None) => Some(ResponseEnd::Eof),
    }
}

/// Follows a chunked body byte by byte to find where it ends (trailers included).
#[derive(Debug, Default)]
pub struct Chunks {
    state: ChunkState,
    size: u64,
    /// Bytes of the current line (a size line or a trailer), to tell an empty one.
    line: usize,
}

#[derive(Debug, Default, PartialEq, Clone, Copy)]
enum ChunkState {
    #[default]
    Size,
    SizeExt,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    Trailer,
    TrailerLf,
    Done,
    Bad,
}

impl Chunks {
    /// Reads `bytes`; returns how many of them belong to the body when its end is among them.
    /// A malformed body ends at once (the caller closes the connection).
    pub fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        use ChunkState::*;
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            match self.state {
                Size => match c {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' if self.line < 16 => {
                        self.size = self.size * 16 + (c as char).to_digit(16).unwrap_or(0) as u64;
                        self.line += 1;
                    }
                    b';' | b' ' | b'\t' if self.line > 0 => self.state = SizeExt,
                    b'\r' if self.line > 0 => self.state = SizeLf,
                    _ => self.state = Bad,
                },
                SizeExt => {
                    if c == b'\r' {
                        self.state = SizeLf;
                    }
                }
                SizeLf => {
                    self.line = 0;
                    self.state = match (c, self.size) {
                        (b'\n', 0) => Trailer,
                        (b'\n', _) => Data,
                        _ => Bad,
                    };
                }
                Data => {
                    let take = (bytes.len() - i).min(self.size as usize);
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr => self.state = if c == b'\r' { DataLf } else { Bad },
                DataLf => self.state = if c == b'\n' { Size } else { Bad },
                Trailer => {
                    if c == b'\r' {
                        self.state = TrailerLf;
                    } else {
                        self.line += 1;
                    }
                }
                TrailerLf => {
                    if c != b'\n' {
                        self.state = Bad;
                    } else if self.line == 0 {
                        self.state = Done;
                    } else {
                        self.line = 0;
                        self.state = Trailer;
                    }
                }
                Done | Bad => {}
            }
            i += 1;
            if matches!(self.state, Done | Bad) {
                return Some(i);
            }
        }
        None
    }

    /// Whether the body was malformed (its connection cannot carry another response).
    pub fn bad(&self) -> bool {
        self.state == ChunkState::Bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(req: &str) -> Kind {
        match head(req.as_bytes()) {
            Parsed::Complete(h) => h.kind,
            Parsed::Partial => panic!("partial: {req:?}"),
        }
    }

    const WAIT: &str =
        "POST /v1/stream/todos/touch/wait HTTP/1.1\r\nHost: 127.0.0.1:8787\r\ncontent-length: 2\r\n\r\n{}";

    #[test]
    fn a_wait_is_answered_here_and_anything_else_passed_on() {
        assert_eq!(kind(WAIT), Kind::Wait { stream: "todos".into(), body: 2 });
        let h = match head(WAIT.as_bytes()) {
            Parsed::Complete(h) => h,
            _ => unreachable!(),
        };
        assert_eq!(h.len, WAIT.len() - 2);
        assert!(!h.close);
        let other = "GET /v1/stream/todos/touch/meta HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(kind(other), Kind::Pass { body: 0, head_method: false });
        let head_req = "HEAD /v1/stats HTTP/1.1\r\n\r\n";
        assert_eq!(kind(head_req), Kind::Pass { body: 0, head_method: true });
        assert_eq!(head(b"POST /v1/stream/a/touch/wait HTTP/1.1\r\nHost: x\r\n"), Parsed::Partial);
    }

    #[test]
    fn framing_the_listener_does_not_follow_hands_the_connection_over() {
        for req in [
            "POST /v1/stream/a/touch/wait HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            "POST /v1/stream/a/touch/wait HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
            "GET / HTTP/1.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n",
            "POST /v1/stream/a/touch/wait HTTP/1.0\r\ncontent-length: 2\r\n\r\n",
            "POST /v1/stream/a/touch/wait HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n",
            "POST /v1/stream/a/touch/wait HTTP/1.1\r\ncontent-length: -2\r\n\r\n",
            "CONNECT x:1 HTTP/1.1\r\n\r\n",
            "BAD\0 / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(kind(req), Kind::Hand, "{req:?}");
        }
        let huge = format!("GET / HTTP/1.1\r\nx: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(kind(&huge), Kind::Hand);
    }

    #[test]
    fn a_wait_the_js_server_would_refuse_or_normalize_is_passed_on() {
        let pass = |req: &str| matches!(kind(req), Kind::Pass { .. });
        assert!(pass("POST /v1/stream/a/touch/wait HTTP/1.1\r\nHost: a b\r\ncontent-length: 2\r\n\r\n"));
        assert!(pass("POST /v1/stream/a/touch/wait HTTP/1.1\r\nHost: a\r\nHost: b\r\ncontent-length: 2\r\n\r\n"));
        assert!(pass("GET /v1/stream/a/touch/wait HTTP/1.1\r\n\r\n"));
        let big = format!("POST /v1/stream/a/touch/wait HTTP/1.1\r\ncontent-length: {}\r\n\r\n", MAX_NATIVE_BODY + 1);
        assert!(pass(&big));
        assert!(matches!(kind("POST /v1/stream/a/touch/wait HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), Kind::Wait { .. }));
    }

    #[test]
    fn the_stream_of_a_wait_target_is_read_as_the_server_reads_it() {
        assert_eq!(wait_stream("/v1/stream/a/touch/wait").as_deref(), Some("a"));
        assert_eq!(wait_stream("/v1/stream/a/touch/wait//?x=1").as_deref(), Some("a"));
        assert_eq!(wait_stream("/v1/stream/a%2Fb%20c/touch/wait").as_deref(), Some("a/b c"));
        assert_eq!(wait_stream("/v1/stream/x/touch/wait/touch/wait").as_deref(), Some("x/touch/wait"));
        assert_eq!(wait_stream("/v1/stream/%C3%A9/touch/wait").as_deref(), Some("é"));
        for t in [
            "/v1/stream//touch/wait",
            "/v1/stream/a/touch/wait#f",
            "/v1/stream/a/touch/meta",
            "/v1/stream/../touch/wait",
            "/v1/stream/a/%2E%2e/touch/wait",
            "/v1/stream/a\\b/touch/wait",
            "/v1/stream/%G1/touch/wait",
            "/v1/stream/%C3/touch/wait",
            "/v1/stream/%ED%A0%80/touch/wait",
            "/v2/stream/a/touch/wait",
        ] {
            assert_eq!(wait_stream(t), None, "{t}");
        }
    }

    #[test]
    fn hosts_as_valid_host_reads_them() {
        for h in ["", "localhost", "127.0.0.1:8787", "[::1]:80", "[::1]", "a.b-c_d~e:", "x%41"] {
            assert!(valid_host(h.as_bytes()), "{h}");
        }
        for h in ["a b", "u@h", "h/p", "[]", "[::1", "h:8x", ":80", "[g::1]"] {
            assert!(!valid_host(h.as_bytes()), "{h}");
        }
    }

    #[test]
    fn only_bodies_the_engine_takes_are_waits() {
        let w = wait_args(br#"{"cursor":"now","keys":["a"],"timeoutMs":10}"#).expect("a wait");
        assert_eq!((w.cursor.as_str(), w.timeout_ms), ("now", 10.0));
        assert!(wait_args(b"\xEF\xBB\xBF{\"cursor\":\"now\",\"keys\":[\"a\"]}").is_some());
        for bad in [
            &b"[]"[..],
            b"null",
            b"{",
            b"{\"cursor\":\"now\"}",
            b"{\"cursor\":\"now\",\"keys\":[\"a\"]}x",
            b"\xFF{}",
            b"\xEF\xBB\xBF\xEF\xBB\xBF{\"cursor\":\"now\",\"keys\":[\"a\"]}",
        ] {
            assert!(wait_args(bad).is_none(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = format!(r#"{{"cursor":"now","keys":["a"],"x":{}1{}}}"#, "[".repeat(1001), "]".repeat(1001));
        assert!(wait_args(deep.as_bytes()).is_none());
        let ok = format!(r#"{{"cursor":"now","keys":["a"],"x":{}1{}}}"#, "[".repeat(998), "]".repeat(998));
        assert!(wait_args(ok.as_bytes()).is_some());
        assert_eq!(depth(br#"{"a":"[[[\"[","b":[1]}"#), 2);
    }

    #[test]
    fn response_ends_as_their_headers_say() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(response_head(r, false), Some(ResponseEnd::Length { head: r.len() - 5, body: 5, close: false }));
        assert_eq!(response_head(r, true), Some(ResponseEnd::Length { head: r.len() - 5, body: 0, close: false }));
        let c = b"HTTP/1.1 307 Temporary Redirect\r\nConnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(response_head(c, false), Some(ResponseEnd::Chunked { head: c.len(), close: true }));
        assert_eq!(response_head(b"HTTP/1.1 200 OK\r\n\r\n", false), Some(ResponseEnd::Eof));
        assert_eq!(response_head(b"HTTP/1.1 100 Continue\r\n\r\n", false), Some(ResponseEnd::Eof));
        assert_eq!(
            response_head(b"HTTP/1.1 204 No Content\r\n\r\n", false)
                .map(|e| matches!(e, ResponseEnd::Length { body: 0, .. })),
            Some(true)
        );
        assert_eq!(response_head(b"HTTP/1.1 200 OK\r\ncontent-le", false), None);
    }

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers() {
        let body = b"5\r\nhello\r\nA;ext=1\r\n0123456789\r\n0\r\nx-t: 1\r\n\r\nNEXT";
        let end = body.len() - 4;
        // Fed whole, and fed a byte at a time.
        assert_eq!(Chunks::default().feed(body), Some(end));
        let mut c = Chunks::default();
        let at = (0..body.len()).find_map(|i| c.feed(&body[i..i + 1]).map(|_| i + 1));
        assert_eq!(at, Some(end));
        assert!(!c.bad());
        let mut c = Chunks::default();
        assert_eq!(c.feed(b"0\r\n\r\n"), Some(5));
        let mut c = Chunks::default();
        assert!(c.feed(b"zz\r\n").is_some() && c.bad());
    }
}
