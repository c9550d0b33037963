//! The fan-out of touches beyond one process: a writer's journal flushes go out over NATS
//! JetStream to *edge* processes that mirror the journals and serve waits and meta with the
//! writer's answers; the edges' interest comes back, so the writer emits fine touches for
//! waits it does not hold (issue 28).
//!
//! - [`wire`]: the messages and their binary form (pure), a flush's key ids as a set
//!   ([`keyset`]), and why a message could not be read ([`wire::DecodeError`]);
//! - [`link`]: the NATS client on its own runtime thread (publish in order, consume in order);
//! - `engine::fanout` (in the engine): the role an engine plays, a writer (what it publishes:
//!   flush records, beats) or an edge (how it applies them: mirrors, gaps, the writer's view of
//!   each stream);
//! - this module: the [`Role`] and the [`FanoutOptions`], with their [`defaults`] and
//!   [`bounds`] ([`FanoutOptions::validate`]).
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

/// The defaults of [`FanoutOptions`], the one place they are written: the native module
/// exports them to JS (`fanoutDefaults`) for what builds fan-out options there.
pub mod defaults {
    /// The subjects' prefix when none is given.
    pub const PREFIX: &str = "durable-touch";
    /// The broker a Rust caller reaches when it names none (JS callers must name one).
    pub const URL: &str = "nats://127.0.0.1:4222";
    /// Ten minutes.
    pub const MAX_AGE_MS: u64 = 10 * 60 * 1000;
    /// 256 MiB.
    pub const MAX_BYTES: i64 = 256 * 1024 * 1024;
    pub const BEAT_MS: u64 = 500;
    /// Each flush goes at once.
    pub const BATCH_MS: u64 = 0;
}

/// The bounds [`FanoutOptions::validate`] holds options to, however they were built (the
/// engine's `fanout` option, the server's `--nats-*` flags, a swap's environment); exported
/// to JS as `fanoutBounds`.
pub mod bounds {
    use std::ops::RangeInclusive;

    /// A prefix: 1 to 64 of `[A-Za-z0-9_-]` (it names subjects and the JetStream stream).
    pub const PREFIX_LEN: RangeInclusive<usize> = 1..=64;
    /// Retention by age: a second to a year.
    pub const MAX_AGE_MS: RangeInclusive<u64> = 1_000..=365 * 86_400_000;
    /// Retention by size: 64 KiB up.
    pub const MAX_BYTES: RangeInclusive<i64> = 65_536..=1_000_000_000_000_000;
    pub const BEAT_MS: RangeInclusive<u64> = 10..=60_000;
    pub const BATCH_MS: RangeInclusive<u64> = 0..=1_000;
}

impl FanoutOptions {
    /// Refuses options outside [`bounds`] (`ERR_INVALID_ARGUMENT`, naming the option as the
    /// engine's `fanout` option spells it), rather than moving them into range.
    pub fn validate(&self) -> crate::Result<()> {
        use crate::Error;
        fn within<T: PartialOrd + std::fmt::Display>(
            v: T,
            r: std::ops::RangeInclusive<T>,
            what: &str,
        ) -> crate::Result<()> {
            if r.contains(&v) {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "options.fanout.{what} must be an integer in [{}, {}], got {v}",
                    r.start(),
                    r.end()
                )))
            }
        }
        if self.url.trim().is_empty() {
            return Err(Error::invalid("options.fanout.url is required"));
        }
        let p = &self.prefix;
        if !bounds::PREFIX_LEN.contains(&p.len())
            || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Error::invalid("options.fanout.prefix must be 1-64 of [A-Za-z0-9_-]"));
        }
        within(self.max_age_ms, bounds::MAX_AGE_MS, "maxAgeMs")?;
        within(self.max_bytes, bounds::MAX_BYTES, "maxBytes")?;
        within(self.beat_ms, bounds::BEAT_MS, "beatMs")?;
        within(self.batch_ms, bounds::BATCH_MS, "batchMs")
    }
}

impl Default for FanoutOptions {
    fn default() -> Self {
        FanoutOptions {
            role: Role::Writer,
            url: defaults::URL.into(),
            prefix: defaults::PREFIX.into(),
            max_age_ms: defaults::MAX_AGE_MS,
            max_bytes: defaults::MAX_BYTES,
            beat_ms: defaults::BEAT_MS,
            writer_url: String::new(),
            batch_ms: defaults::BATCH_MS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_refused_outside_their_bounds_not_moved_into_them() {
        let ok = FanoutOptions::default();
        assert!(ok.validate().is_ok());
        let at_bounds = [
            FanoutOptions { max_age_ms: 1_000, max_bytes: 65_536, beat_ms: 10, batch_ms: 0, ..ok.clone() },
            FanoutOptions { max_age_ms: 365 * 86_400_000, beat_ms: 60_000, batch_ms: 1_000, ..ok.clone() },
            FanoutOptions { prefix: "a".repeat(64), ..ok.clone() },
            FanoutOptions { prefix: "A-z_9".into(), ..ok.clone() },
        ];
        for o in at_bounds {
            assert!(o.validate().is_ok(), "{o:?}");
        }
        let refused = [
            (
                FanoutOptions { max_age_ms: 999, ..ok.clone() },
                "maxAgeMs must be an integer in [1000, 31536000000], got 999",
            ),
            (FanoutOptions { max_bytes: 65_535, ..ok.clone() }, "maxBytes"),
            (FanoutOptions { beat_ms: 9, ..ok.clone() }, "beatMs"),
            (FanoutOptions { beat_ms: 60_001, ..ok.clone() }, "beatMs"),
            (FanoutOptions { batch_ms: 1_001, ..ok.clone() }, "batchMs"),
            (FanoutOptions { prefix: String::new(), ..ok.clone() }, "prefix"),
            (FanoutOptions { prefix: "a".repeat(65), ..ok.clone() }, "prefix"),
            (FanoutOptions { prefix: "a.b".into(), ..ok.clone() }, "prefix"),
            (FanoutOptions { url: " ".into(), ..ok.clone() }, "url"),
        ];
        for (o, says) in refused {
            let e = o.validate().unwrap_err();
            assert_eq!(e.code(), "ERR_INVALID_ARGUMENT");
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
