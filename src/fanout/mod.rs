//! The fan-out of touches beyond one process: a writer's journal flushes go out over NATS
//! JetStream to *edge* processes that mirror the journals and serve waits and meta with the
//! writer's answers; the edges' interest comes back, so the writer emits fine touches for
//! waits it does not hold (issue 28).
//!
//! - [`wire`]: the messages and their binary form (pure), a flush's key ids as a set
//!   ([`keyset`]);
//! - [`link`]: the NATS client on its own runtime thread (publish in order, consume in order);
//! - `engine::fanout` (in the engine): what a writer publishes (flush records, beats) and how
//!   an edge's engine applies them (mirrors, gaps, the writer's view of each stream).
//!
//! The mirrors themselves are journals ([`crate::journal::mirror`]): an edge's cursor is the
//! writer's cursor, and a gap is never silent (older cursors answer `stale`, parked waiters
//! are woken).

pub mod keyset;
pub mod lease;
pub mod link;
pub mod wire;

/// Which side of the fan-out a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Processes appends, publishes its flushes and beats, hears the edges' interest.
    Writer,
    /// Mirrors a writer's journals and serves waits and meta from them.
    Edge,
}

/// How to reach the broker, and the retention of the writer's stream.
#[derive(Clone, Debug, PartialEq)]
pub struct FanoutOptions {
    pub role: Role,
    /// `nats://host:port`.
    pub url: String,
    /// Subjects are `<prefix>.touch` and `<prefix>.interest`; the JetStream stream is
    /// `<PREFIX>_TOUCH`. One prefix per writer.
    pub prefix: String,
    /// Retention of the writer's stream by age (ms) and size (bytes).
    pub max_age_ms: u64,
    pub max_bytes: i64,
    /// How often a writer sends its beat (every stream's position), and an edge its interest.
    pub beat_ms: u64,
    /// Where the writer serves HTTP: edges name it when they refuse a request.
    pub writer_url: String,
    /// Writer: how long a message waits for others to share its broker message (0: it goes at
    /// once, with only what is queued already). Fewer, larger messages cost the broker less
    /// per edge and put fewer bytes on the wire per key, at this much latency.
    pub batch_ms: u64,
}

impl Default for FanoutOptions {
    fn default() -> Self {
        FanoutOptions {
            role: Role::Writer,
            url: "nats://127.0.0.1:4222".into(),
            prefix: "durable-touch".into(),
            max_age_ms: 10 * 60 * 1000,
            max_bytes: 256 * 1024 * 1024,
            beat_ms: 500,
            writer_url: String::new(),
            batch_ms: 0,
        }
    }
}
