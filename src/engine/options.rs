//! The engine's options: what each one means, its default, its [`bounds`], and
//! [`EngineOptions::validate`], which holds options to them however they were built (the
//! binding's `options` object, a host's settings, a Rust caller's struct literal).
//!
//! Options are refused outside their bounds, never moved into them; within them, a 0 that
//! would stop the engine (no worker, a batch of no rows or bytes) counts as 1 where it is used.

use std::fmt::Display;
use std::ops::RangeInclusive;

use crate::error::{Error, Result};
use crate::fanout::FanoutOptions;

/// Engine options (the reference's `DS_TOUCH_*` settings).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Streams processed concurrently per tick (M2); 0 counts as 1.
    pub workers: usize,
    /// The safety-net tick, in ms (M1); 0 disables it.
    pub check_interval_ms: u64,
    /// Rows read per batch; 0 counts as 1.
    pub max_batch_rows: usize,
    /// Payload bytes read per batch; 0 counts as 1.
    pub max_batch_bytes: u64,
    /// Run the background loop. Without it, batches run only through `processBatch`.
    pub auto_process: bool,
    /// M17: `DS_BASE_WAL_GC_INTERVAL_MS` / `DS_BASE_WAL_GC_CHUNK_OFFSETS`. Any value: an
    /// interval of 0 or less runs the GC at every pass, a chunk of 0 or less deletes all that
    /// is due at once.
    pub wal_gc_interval_ms: i64,
    pub wal_gc_chunk_offsets: i64,
    /// For a host that saves profiles in the file itself: how often the loop re-reads every
    /// state-protocol profile (0: never). A notified stream the engine does not know yet has
    /// its profile read at once either way.
    pub profile_poll_ms: u64,
    /// Keep a bounded queue of what each batch did, the template lifecycle events, WAL GC
    /// deletions and batch failures, for [`super::TouchEngine::take_records`] (a host that
    /// reports them, as the swapped server's `live.metrics` does). Off: nothing is kept.
    pub records: bool,
    /// Publish flushes to edges over NATS JetStream (a writer), or mirror a writer's (an edge:
    /// open it over a private empty store; it runs no processing loop).
    pub fanout: Option<FanoutOptions>,
    /// Keep touch journals across restarts ([`crate::durable`], in `<store file>-journals/`),
    /// so that every cursor handed out stays valid (default). Off: a new epoch at every open,
    /// as the reference. Not for an in-memory store, nor at an edge (its journals are mirrors
    /// of the writer's).
    pub keep_cursors: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4),
            check_interval_ms: 250,
            max_batch_rows: 500,
            max_batch_bytes: 4 * 1024 * 1024,
            auto_process: true,
            wal_gc_interval_ms: 1000,
            wal_gc_chunk_offsets: 1_000_000,
            profile_poll_ms: 0,
            records: false,
            fanout: None,
            keep_cursors: true,
        }
    }
}

/// The bounds [`EngineOptions::validate`] holds the engine's integer options to (inclusive).
/// The boolean options, and the WAL GC's, take any value.
pub mod bounds {
    use std::ops::RangeInclusive;

    pub const WORKERS: RangeInclusive<usize> = 0..=64;
    /// An hour.
    pub const CHECK_INTERVAL_MS: RangeInclusive<u64> = 0..=3_600_000;
    pub const MAX_BATCH_ROWS: RangeInclusive<usize> = 0..=1_000_000;
    /// A terabyte.
    pub const MAX_BATCH_BYTES: RangeInclusive<u64> = 0..=1_000_000_000_000;
    /// An hour.
    pub const PROFILE_POLL_MS: RangeInclusive<u64> = 0..=3_600_000;
}

/// The refusal of the integer option `name` (as the binding's `options` object spells it) for
/// a value that is not a whole number within `bounds` (`ERR_INVALID_ARGUMENT`).
pub fn out_of_bounds<T: Display>(name: &str, bounds: &RangeInclusive<T>) -> Error {
    Error::invalid(format!("options.{name} must be an integer in [{}, {}]", bounds.start(), bounds.end()))
}

impl EngineOptions {
    /// Refuses options outside [`bounds`] (and a fan-out outside its own,
    /// [`FanoutOptions::validate`]), naming the option as the binding's `options` object
    /// spells it. [`super::TouchEngine::open`] checks its options with it.
    pub fn validate(&self) -> Result<()> {
        fn within<T: PartialOrd + Display>(v: T, r: RangeInclusive<T>, name: &str) -> Result<()> {
            if r.contains(&v) {
                Ok(())
            } else {
                Err(out_of_bounds(name, &r))
            }
        }
        within(self.workers, bounds::WORKERS, "workers")?;
        within(self.check_interval_ms, bounds::CHECK_INTERVAL_MS, "checkIntervalMs")?;
        within(self.max_batch_rows, bounds::MAX_BATCH_ROWS, "maxBatchRows")?;
        within(self.max_batch_bytes, bounds::MAX_BATCH_BYTES, "maxBatchBytes")?;
        within(self.profile_poll_ms, bounds::PROFILE_POLL_MS, "profilePollMs")?;
        match &self.fanout {
            Some(f) => f.validate(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds_are_accepted() {
        assert!(EngineOptions::default().validate().is_ok());
        let zeros = EngineOptions {
            workers: 0,
            check_interval_ms: 0,
            max_batch_rows: 0,
            max_batch_bytes: 0,
            profile_poll_ms: 0,
            wal_gc_interval_ms: -1,
            wal_gc_chunk_offsets: 0,
            ..Default::default()
        };
        assert!(zeros.validate().is_ok());
        let tops = EngineOptions {
            workers: 64,
            check_interval_ms: 3_600_000,
            max_batch_rows: 1_000_000,
            max_batch_bytes: 1_000_000_000_000,
            profile_poll_ms: 3_600_000,
            wal_gc_interval_ms: i64::MAX,
            wal_gc_chunk_offsets: i64::MAX,
            ..Default::default()
        };
        assert!(tops.validate().is_ok());
    }

    #[test]
    fn options_past_their_bounds_are_refused_by_name_not_moved_into_them() {
        let ok = EngineOptions::default;
        let refused = [
            (EngineOptions { workers: 65, ..ok() }, "options.workers must be an integer in [0, 64]"),
            (
                EngineOptions { check_interval_ms: 3_600_001, ..ok() },
                "options.checkIntervalMs must be an integer in [0, 3600000]",
            ),
            (
                EngineOptions { max_batch_rows: 1_000_001, ..ok() },
                "options.maxBatchRows must be an integer in [0, 1000000]",
            ),
            (
                EngineOptions { max_batch_bytes: 1_000_000_000_001, ..ok() },
                "options.maxBatchBytes must be an integer in [0, 1000000000000]",
            ),
            (
                EngineOptions { profile_poll_ms: 3_600_001, ..ok() },
                "options.profilePollMs must be an integer in [0, 3600000]",
            ),
        ];
        for (o, says) in refused {
            let e = o.validate().unwrap_err();
            assert_eq!(e.code(), "ERR_INVALID_ARGUMENT");
            assert_eq!(e.to_string(), says);
        }
    }

    #[test]
    fn a_fanout_is_held_to_its_own_bounds() {
        let fanout = FanoutOptions { beat_ms: 5, ..Default::default() };
        let e = EngineOptions { fanout: Some(fanout), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.to_string(), "options.fanout.beatMs must be an integer in [10, 60000], got 5");
        let fanout = FanoutOptions::default();
        assert!(EngineOptions { fanout: Some(fanout), ..Default::default() }.validate().is_ok());
    }
}
