//! What a journal keeps across a restart: its [`JournalImage`] (taken at a clean close and now
//! and then) and a [`FlushLog`] of the flushes since, written under the journal's lock before
//! anyone can learn of them. [`JournalState::restore`](super::JournalState::restore) takes an
//! image up; the flushes logged after it are applied as a mirror applies its writer's, so the
//! journal answers every cursor it handed out as it did before. Where the files live and what
//! they look like is [`crate::durable`]'s.

use super::cursor::Epoch;
use super::mirror::FlushRecord;

/// One journal's state, enough to answer every cursor as it did (no waiter, nothing pending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalImage {
    pub epoch: Epoch,
    pub generation: u32,
    /// The oldest generation a cursor may name.
    pub floor_generation: u32,
    pub last_overflow_generation: u32,
    pub overflow_buckets: u64,
    pub last_flushed_source_offset: i64,
    pub last_flush_at_ms: i64,
    pub last_bucket_start_ms: i64,
    /// Every source row at or below this offset has its touches in a generation of the image
    /// (-1: none known).
    pub covered_through: i64,
    /// Wall-clock ms when the epoch started (0: not known).
    pub epoch_started_ms: i64,
    /// The bloom's slots; `None` while the journal was never touched (B14).
    pub slots: Option<Vec<u32>>,
    /// The exact history, oldest first: `(generation, overflow, routing keys)`.
    pub exact: Vec<(u32, bool, Vec<u64>)>,
}

/// Told of every flush under the journal's lock, before the observer and before any waiter
/// it wakes is resolved: a record written here is one no client can have seen before it was.
/// `covered_through` is the journal's [`covered_through`](super::JournalState::covered_through)
/// after the flush.
pub trait FlushLog: Send {
    /// Writes the flush; true asks for [`FlushLog::rebase`] with the journal's image now (the
    /// log has grown long enough that a snapshot is cheaper to take up than its replay).
    fn flushed(&mut self, record: &FlushRecord, covered_through: i64) -> bool;

    /// Makes `image` the base the log's later records follow.
    fn rebase(&mut self, image: &JournalImage);
}
