//! The journal's state machine, single-threaded and clock-free: touching, flushing and waking
//! (J6–J9), queries (J5, J10), registration and expiry of waiters (J11, J12), stop (J15, B29)
//! and the generation wrap (B28).
//!
//! Callers pass the time in (`now_ms` wall clock for the stamps a hit carries, `now` on the
//! journal's monotonic nanosecond clock for deadlines), and resolutions come back as
//! [`Settlement`]s to deliver once the caller's lock is released. [`super::Journal`] wraps this
//! with a lock, clocks and timers; the model-based tests drive it directly.

use std::time::Instant;

use super::bloom::GenerationBloom;
use super::bucket::{FlushedBucket, PendingBucket};
use super::config::JournalConfig;
use super::cursor::{format_cursor, Epoch};
use super::exact::ExactHistory;
use super::image::{FlushLog, JournalImage};
use super::mirror::{Applied, CaughtUp, FlushObserver, FlushRecord};
use super::stats::{IntervalStats, JournalStats, TotalStats};
use super::waiters::{KeyIds, Resolve, Settlement, Standing, WaiterId, WaiterRegistry, WaiterSpec, Waker};
use super::TouchHit;
use crate::error::{Error, Result};

/// Most keys, and most exact keys, one `TouchJournal.waitForAny` may name (the reference's
/// wait route limit).
pub const MAX_WAIT_KEYS: usize = 1024;

/// Most keys, and most exact keys, the journal itself takes in one wait: the engine's waits
/// add to a route's 1,024 keys the template key of each template used (up to 1,024) and the
/// catch-all key.
pub const MAX_JOURNAL_WAIT_KEYS: usize = 4 * MAX_WAIT_KEYS;

/// Longest accepted wait, in ms (2^31 − 1, JavaScript's timer limit).
pub const MAX_WAIT_TIMEOUT_MS: u64 = 2_147_483_647;

/// One `waitForAny` (J11).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WaitRequest {
    /// Key ids; duplicates are allowed and dropped.
    pub keys: KeyIds,
    /// Parsed 16-hex routing keys; duplicates are allowed and dropped.
    pub exact_keys: Vec<u64>,
    /// Wake only for generations after this one; `None` = the generation current when the
    /// waiter is registered (what the wait route does, W6).
    pub after_generation: Option<u32>,
    /// 0 resolves `None` at once.
    pub timeout_ms: u64,
}

impl WaitRequest {
    /// Checks the limits of `TouchJournal.waitForAny`: at most [`MAX_WAIT_KEYS`] keys and
    /// exact keys, a timeout of at most [`MAX_WAIT_TIMEOUT_MS`].
    pub fn validate(&self) -> Result<()> {
        self.validate_within(MAX_WAIT_KEYS)
    }

    /// Checks the limits with at most `max_keys` keys and exact keys.
    pub fn validate_within(&self, max_keys: usize) -> Result<()> {
        Self::check_counts(self.keys.len(), self.exact_keys.len(), max_keys)?;
        if self.timeout_ms > MAX_WAIT_TIMEOUT_MS {
            return Err(Error::invalid(format!("timeoutMs must be at most {MAX_WAIT_TIMEOUT_MS}")));
        }
        Ok(())
    }

    /// The key-count limits on the lists' lengths alone (with the errors
    /// [`WaitRequest::validate_within`] gives): a binding checks them before it reads any
    /// element, so a huge or sparse array is refused unread.
    pub fn check_counts(keys: usize, exact_keys: usize, max_keys: usize) -> Result<()> {
        if keys > max_keys {
            return Err(Error::invalid(format!("keys: at most {max_keys} keys per wait")));
        }
        if exact_keys > max_keys {
            return Err(Error::invalid(format!("exactKeys: at most {max_keys} keys per wait")));
        }
        Ok(())
    }

    /// A JavaScript `timeoutMs`: finite, not negative, at most [`MAX_WAIT_TIMEOUT_MS`], floored.
    pub fn timeout_from_number(ms: f64) -> Result<u64> {
        if !ms.is_finite() || ms < 0.0 || ms > MAX_WAIT_TIMEOUT_MS as f64 {
            return Err(Error::invalid(format!("timeoutMs must be a number in [0, {MAX_WAIT_TIMEOUT_MS}]")));
        }
        Ok(ms.floor() as u64)
    }
}

/// `getMeta()` (J13).
#[derive(Clone, Debug, PartialEq)]
pub struct JournalMeta {
    pub cursor: String,
    pub epoch: String,
    pub generation: u32,
    pub bucket_ms: u64,
    pub coalesce_ms: u64,
    pub filter_size: usize,
    pub k: u32,
    pub pending_keys: usize,
    pub overflow_buckets: u64,
    pub active_waiters: usize,
    /// The largest source offset ever flushed; -1 before any.
    pub bucket_max_source_offset_seq: i64,
    pub last_flush_at_ms: i64,
    pub flush_interval_ms_max_last_10s: i64,
    pub flush_interval_ms_p95_last_10s: i64,
}

pub struct JournalState<W: Waker = Resolve> {
    cfg: JournalConfig,
    epoch: Epoch,
    generation: u32,
    coalesce_ms: u64,
    bloom: GenerationBloom,
    bucket: PendingBucket,
    exact: ExactHistory,
    waiters: WaiterRegistry<W>,
    stats: JournalStats,
    last_overflow_generation: u32,
    overflow_buckets: u64,
    last_flushed_source_offset: i64,
    last_flush_at_ms: i64,
    last_bucket_start_ms: i64,
    epochs_started: u64,
    /// Told of each flush ([`super::mirror`]).
    observer: Option<FlushObserver>,
    /// The oldest generation a cursor may name: 0, except at a mirror that joined its writer
    /// late or missed records (older cursors are stale there, [`super::mirror`]).
    floor_generation: u32,
    /// A mirror that applied a record: it follows its writer's epoch.
    following: bool,
    /// Written before the observer is told of a flush (a journal kept across restarts).
    log: Option<Box<dyn FlushLog>>,
    /// The largest `through` noted with the touches in the pending bucket
    /// ([`JournalState::note_through`]), -1 if none.
    pending_through: i64,
    /// Every source row at or below this offset has its touches in a flushed generation.
    covered_through: i64,
    /// `covered_through` as the log last wrote it (a row with no touch moves `covered_through`
    /// without a write).
    logged_through: i64,
    /// Wall-clock ms when the epoch started (0: not known; the owner sets it).
    epoch_started_ms: i64,
    /// While records are replayed into a journal being taken up: the bloom marks, written at
    /// once in address order by [`JournalState::end_replay`].
    deferred_marks: Option<Vec<(u32, u32)>>,
}

/// Deadlines are rounded up to this many nanoseconds (J12).
pub const DEADLINE_GRANULARITY_NS: u64 = 250_000;

/// J12: `now + timeout`, rounded up to a multiple of [`DEADLINE_GRANULARITY_NS`] of the
/// monotonic clock, so a wait never resolves early and waiters registered close together expire
/// in one sweep.
pub fn deadline_after(now: u64, timeout_ms: u64) -> u64 {
    let exact = now.saturating_add(timeout_ms.saturating_mul(1_000_000));
    exact.div_ceil(DEADLINE_GRANULARITY_NS).saturating_mul(DEADLINE_GRANULARITY_NS)
}

fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

impl<W: Waker> JournalState<W> {
    pub fn new(cfg: JournalConfig, epoch: Epoch) -> Self {
        JournalState {
            epoch,
            generation: cfg.initial_generation,
            coalesce_ms: cfg.bucket_ms,
            bloom: GenerationBloom::new(cfg.filter_pow2, cfg.k),
            bucket: PendingBucket::new(cfg.pending_max_keys),
            exact: ExactHistory::new(cfg.exact_history_generations),
            waiters: WaiterRegistry::new(),
            stats: JournalStats::default(),
            last_overflow_generation: 0,
            overflow_buckets: 0,
            last_flushed_source_offset: -1,
            last_flush_at_ms: 0,
            last_bucket_start_ms: 0,
            epochs_started: 1,
            observer: None,
            floor_generation: 0,
            following: false,
            log: None,
            pending_through: -1,
            covered_through: -1,
            logged_through: -1,
            epoch_started_ms: 0,
            deferred_marks: None,
            cfg,
        }
    }

    /// A journal taken up from `image` (what [`JournalState::image`] saved before a restart):
    /// the same epoch, generation, bloom and exact history, so every cursor handed out before
    /// means the same thing. No waiter, nothing pending. `None` when the image's filter is not
    /// of `cfg`'s size.
    pub fn restore(cfg: JournalConfig, image: JournalImage) -> Option<Self> {
        let mut s = JournalState::new(cfg, image.epoch);
        s.generation = image.generation;
        s.floor_generation = image.floor_generation.min(image.generation);
        s.last_overflow_generation = image.last_overflow_generation;
        s.overflow_buckets = image.overflow_buckets;
        s.last_flushed_source_offset = image.last_flushed_source_offset;
        s.last_flush_at_ms = image.last_flush_at_ms;
        s.last_bucket_start_ms = image.last_bucket_start_ms;
        s.covered_through = image.covered_through;
        s.epoch_started_ms = image.epoch_started_ms;
        if !s.bloom.load(image.slots) {
            return None;
        }
        for (generation, overflow, keys) in image.exact {
            s.exact.push(generation, keys, overflow);
        }
        // Records that follow the image are applied as the next generations of its epoch.
        s.following = true;
        Some(s)
    }

    /// What [`JournalState::restore`] needs to answer as this journal does. Pending touches
    /// are not part of it (flush first).
    pub fn image(&mut self) -> JournalImage {
        JournalImage {
            epoch: self.epoch,
            generation: self.generation,
            floor_generation: self.floor_generation,
            last_overflow_generation: self.last_overflow_generation,
            overflow_buckets: self.overflow_buckets,
            last_flushed_source_offset: self.last_flushed_source_offset,
            last_flush_at_ms: self.last_flush_at_ms,
            last_bucket_start_ms: self.last_bucket_start_ms,
            covered_through: self.covered_through,
            epoch_started_ms: self.epoch_started_ms,
            slots: self.bloom.to_vec(),
            exact: self.exact.entries(),
        }
    }

    /// Sets (or removes) the log written before each flush becomes visible.
    /// The files behind a log hold the journal as it is now (a snapshot was written, or the
    /// log was replayed).
    pub fn set_log(&mut self, log: Option<Box<dyn FlushLog>>) {
        self.log = log;
        self.logged_through = self.covered_through;
    }

    pub fn has_log(&self) -> bool {
        self.log.is_some()
    }

    /// Takes the log out (to write a snapshot beside it, or to close it).
    pub fn take_log(&mut self) -> Option<Box<dyn FlushLog>> {
        self.log.take()
    }

    /// Notes that every source row at or below `through` has its touches in this journal:
    /// pending ones are covered once they are flushed, and with nothing pending they are now.
    pub fn note_through(&mut self, through: i64) {
        if self.bucket.has_touches() {
            self.pending_through = self.pending_through.max(through);
        } else {
            self.covered_through = self.covered_through.max(through);
        }
    }

    /// A journal that covers nothing yet starts covering at `from`: rows at or below it were
    /// processed before its first batch (their touches are not this journal's to keep).
    pub fn note_from(&mut self, from: i64) {
        if self.covered_through < 0 && self.pending_through < 0 && !self.bucket.has_touches() {
            self.covered_through = from;
        }
    }

    /// Every source row at or below this offset has its touches in a flushed generation.
    pub fn covered_through(&self) -> i64 {
        self.covered_through
    }

    /// How far a restart after a crash finds the journal covering: `covered_through` as of
    /// the last record its log wrote; with no log, `covered_through`.
    pub fn logged_through(&self) -> i64 {
        if self.log.is_some() {
            self.logged_through
        } else {
            self.covered_through
        }
    }

    /// Wall-clock ms when the epoch started (0: not known).
    pub fn epoch_started_ms(&self) -> i64 {
        self.epoch_started_ms
    }

    pub fn set_epoch_started_ms(&mut self, ms: i64) {
        self.epoch_started_ms = ms;
    }

    /// Forgets the counters (a journal taken up counts from its restart, not its replay).
    pub fn clear_stats(&mut self) {
        self.stats = JournalStats::default();
    }

    pub fn config(&self) -> &JournalConfig {
        &self.cfg
    }

    // ---- touching and flushing

    /// J6. `routing_key` is already parsed (only 16-hex keys reach the exact set).
    #[inline]
    pub fn touch(&mut self, key_id: u32, source_offset: Option<i64>, routing_key: Option<u64>, now_ms: i64) {
        self.bloom.ensure_allocated();
        self.bucket.touch(key_id, source_offset, routing_key, now_ms);
    }

    /// [`JournalState::touch`] for each key id, without offsets or routing keys.
    pub fn touch_keys(&mut self, keys: &[u32], now_ms: i64) {
        if keys.is_empty() {
            return;
        }
        self.bloom.ensure_allocated();
        self.bucket.touch_keys(keys, now_ms);
    }

    /// J7: clamped to [1, bucketMs]; an armed flush timer keeps its delay.
    pub fn set_coalesce_ms(&mut self, ms: f64) {
        let floored = ms.floor();
        self.coalesce_ms = if floored.is_nan() || floored < 1.0 {
            1
        } else if floored >= self.cfg.bucket_ms as f64 {
            self.cfg.bucket_ms
        } else {
            floored as u64
        };
    }

    pub fn coalesce_ms(&self) -> u64 {
        self.coalesce_ms
    }

    /// Whether a flush would produce a generation.
    pub fn has_pending(&self) -> bool {
        self.bucket.has_touches()
    }

    /// J8 and J9: closes the bucket as a new generation and wakes the waiters it concerns.
    /// Returns false (and does nothing) when nothing is pending.
    pub fn flush(&mut self, now_ms: i64, out: &mut Vec<Settlement<W>>) -> bool {
        if !self.bucket.has_touches() {
            return false;
        }
        let bucket = self.bucket.take();
        let through = std::mem::replace(&mut self.pending_through, -1);
        self.flush_bucket(bucket, through, now_ms, out);
        true
    }

    /// Sets (or removes) the observer told of each flush.
    pub fn set_observer(&mut self, observer: Option<FlushObserver>) {
        self.observer = observer;
    }

    /// Flushes `bucket` as the next generation: the bloom, the waking and the history.
    /// `through`: the source offset every row at or below has its touches in this bucket or
    /// before (-1 if not known).
    fn flush_bucket(&mut self, bucket: FlushedBucket, through: i64, now_ms: i64, out: &mut Vec<Settlement<W>>) {
        self.bloom.arrive(false);
        // B28: the generation never wraps within an epoch. Past u32::MAX a new epoch starts,
        // every cursor handed out so far becomes stale, and every parked waiter is woken.
        let new_epoch = self.generation == u32::MAX;
        if new_epoch {
            self.start_new_epoch();
            self.epoch_started_ms = now_ms;
        }
        self.generation += 1;
        let generation = self.generation;
        if bucket.max_source_offset > self.last_flushed_source_offset {
            self.last_flushed_source_offset = bucket.max_source_offset;
        }
        self.stats.record_flush(now_ms, self.last_flush_at_ms);
        let bucket_start_ms = if bucket.start_ms > 0 { bucket.start_ms } else { now_ms };
        self.last_flush_at_ms = now_ms;
        self.last_bucket_start_ms = bucket_start_ms;
        if bucket.overflow {
            self.overflow_buckets += 1;
            self.last_overflow_generation = generation;
        }
        // J8 step 7: the captured keys are written even in overflow.
        if let Some(deferred) = &mut self.deferred_marks {
            deferred.extend(bucket.keys.iter().map(|&key| (key, generation)));
        } else {
            self.bloom.reserve(bucket.keys.len());
            for &key in &bucket.keys {
                self.bloom.mark(key, generation);
            }
        }

        let hit = TouchHit {
            generation,
            key_id: 0,
            bucket_max_source_offset_seq: bucket.max_source_offset,
            flush_at_ms: now_ms,
            bucket_start_ms,
        };
        let started = Instant::now();
        let mut woken = 0;
        if !self.waiters.is_empty() {
            if new_epoch {
                woken += self.waiters.wake_all(hit, true, out);
            } else if bucket.overflow {
                woken += self.waiters.wake_all(hit, false, out);
            } else {
                // J9, in the reference's order: exact waiters, keyed waiters by key arrival,
                // then broad waiters against the bloom.
                if self.waiters.has_exact() {
                    for &rk in &bucket.exact {
                        woken += self.waiters.wake_exact(rk, hit, out);
                    }
                }
                if self.waiters.has_keyed() {
                    for &key in &bucket.keys {
                        woken += self.waiters.wake_key(key, TouchHit { key_id: key, ..hit }, out);
                    }
                }
                if self.waiters.broad_len() > 0 {
                    let (bloom, last_overflow) = (&self.bloom, self.last_overflow_generation);
                    woken += self.waiters.wake_broad(
                        hit,
                        |key, after| after < last_overflow || bloom.touched_after(key, after),
                        out,
                    );
                }
            }
        }
        self.stats.record_wake(woken, elapsed_ms(started));
        self.covered_through = self.covered_through.max(through);
        if self.log.is_some() || self.observer.is_some() {
            let record = FlushRecord {
                epoch: self.epoch,
                generation,
                keys: bucket.keys,
                exact: bucket.exact.clone(),
                overflow: bucket.overflow,
                bucket_start_ms,
                flush_at_ms: now_ms,
                max_source_offset: bucket.max_source_offset,
            };
            // The log first: what a waiter, a meta reader or an edge learns of this flush is
            // delivered after this lock is released, so after the record is written.
            let rebase = self.log.as_mut().is_some_and(|log| log.flushed(&record, self.covered_through));
            self.logged_through = self.covered_through;
            if let Some(observer) = &self.observer {
                observer(&record);
            }
            // J8 step 6 first: the image holds this generation's exact keys.
            self.exact.push(generation, bucket.exact, bucket.overflow);
            if rebase {
                let image = self.image();
                if let Some(log) = &mut self.log {
                    log.rebase(&image);
                }
            }
            return;
        }
        // J8 step 6 (done last: waking does not read the history).
        self.exact.push(generation, bucket.exact, bucket.overflow);
    }

    // ---- mirrors (see [`super::mirror`])

    /// Runs the flush a writer's journal reported, as the same generation.
    pub fn apply_flush(&mut self, rec: &FlushRecord, out: &mut Vec<Settlement<W>>) -> Applied {
        let applied = if !self.following || rec.epoch != self.epoch {
            self.adopt(rec.epoch, rec.generation.saturating_sub(1), out);
            Applied::Adopted
        } else if rec.generation <= self.generation {
            return Applied::Duplicate;
        } else if rec.generation > self.generation + 1 {
            let missed = rec.generation - self.generation - 1;
            self.skip_to(rec.generation - 1, out);
            Applied::Gap { missed }
        } else {
            Applied::Next
        };
        let bucket = FlushedBucket {
            keys: rec.keys.clone(),
            exact: rec.exact.clone(),
            overflow: rec.overflow,
            start_ms: rec.bucket_start_ms,
            max_source_offset: rec.max_source_offset,
        };
        self.flush_bucket(bucket, -1, rec.flush_at_ms, out);
        applied
    }

    /// Records applied from now until [`JournalState::end_replay`] write their bloom marks
    /// then, all at once: for a journal being taken up after a restart, which no waiter and no
    /// reader sees until then (its bloom answers nothing meanwhile).
    pub fn begin_replay(&mut self) {
        debug_assert!(self.waiters.is_empty(), "a journal being taken up has no waiter");
        self.deferred_marks = Some(Vec::new());
    }

    /// Writes the marks of the records applied since [`JournalState::begin_replay`].
    pub fn end_replay(&mut self) {
        if let Some(marks) = self.deferred_marks.take() {
            self.bloom.mark_all(&marks);
        }
    }

    /// Takes the writer's latest `(epoch, generation)` (a heartbeat sent after every record
    /// of that generation): a mirror behind it missed records.
    pub fn catch_up(&mut self, epoch: Epoch, generation: u32, out: &mut Vec<Settlement<W>>) -> CaughtUp {
        if !self.following || epoch != self.epoch {
            self.adopt(epoch, generation, out);
            CaughtUp::Adopted
        } else if generation > self.generation {
            let missed = generation - self.generation;
            self.skip_to(generation, out);
            CaughtUp::Gap { missed }
        } else {
            CaughtUp::InStep
        }
    }

    /// The oldest generation a cursor may name here (see [`super::mirror`]).
    pub fn floor_generation(&self) -> u32 {
        self.floor_generation
    }

    /// Follows `epoch` from `generation` on: nothing of another epoch is kept, parked waiters
    /// are woken (their cursors are stale now).
    fn adopt(&mut self, epoch: Epoch, generation: u32, out: &mut Vec<Settlement<W>>) {
        if self.following {
            self.epochs_started += 1;
        }
        self.wake_everyone(generation, out);
        self.following = true;
        self.epoch = epoch;
        self.epoch_started_ms = 0;
        self.bloom.clear();
        self.exact.clear();
        self.last_overflow_generation = 0;
        self.generation = generation;
        self.floor_generation = generation;
    }

    /// Jumps over generations that never arrived: parked waiters are woken (any of them may
    /// have been touched) and older cursors become stale.
    fn skip_to(&mut self, generation: u32, out: &mut Vec<Settlement<W>>) {
        self.wake_everyone(generation, out);
        self.generation = generation;
        self.floor_generation = generation;
    }

    fn wake_everyone(&mut self, generation: u32, out: &mut Vec<Settlement<W>>) {
        if self.waiters.is_empty() {
            return;
        }
        let hit = TouchHit {
            generation,
            key_id: 0,
            bucket_max_source_offset_seq: self.last_flushed_source_offset,
            flush_at_ms: self.last_flush_at_ms,
            bucket_start_ms: self.last_bucket_start_ms,
        };
        self.waiters.wake_all(hit, true, out);
    }

    fn start_new_epoch(&mut self) {
        self.epoch = Epoch::random();
        self.epochs_started += 1;
        self.generation = 0;
        self.bloom.clear();
        self.exact.clear();
        self.last_overflow_generation = 0;
    }

    // ---- queries (J5, J10)

    /// J5.
    #[inline]
    pub fn maybe_touched_since(&self, key_id: u32, since: u32) -> bool {
        since < self.last_overflow_generation || self.bloom.touched_after(key_id, since)
    }

    /// J5, any of `keys`.
    pub fn maybe_touched_since_any(&self, keys: &[u32], since: u32) -> bool {
        since < self.last_overflow_generation || keys.iter().any(|&k| self.bloom.touched_after(k, since))
    }

    /// J10 over parsed routing keys.
    pub fn exact_touched_since_any(&self, keys: &[u64], since: u32) -> Option<bool> {
        self.exact.touched_since_any(keys, since, self.generation, self.last_overflow_generation)
    }

    // ---- waiters (J11, J12)

    /// Registers a waiter, or resolves it with `None` at once when it names no key or has a
    /// zero timeout (J11). `now` is the monotonic clock in ns; the deadline is `now + timeout`.
    pub fn register(
        &mut self,
        req: WaitRequest,
        now: u64,
        resolve: W,
        out: &mut Vec<Settlement<W>>,
    ) -> Option<WaiterId> {
        let WaitRequest { mut keys, exact_keys: mut exact, after_generation, timeout_ms } = req;
        if (keys.is_empty() && exact.is_empty()) || timeout_ms == 0 {
            out.push(Settlement::immediate(resolve, None).at(self.standing()));
            return None;
        }
        keys.sort_unstable();
        keys.dedup();
        exact.sort_unstable();
        exact.dedup();
        let spec = WaiterSpec {
            after_generation: after_generation.unwrap_or(self.generation),
            broad: keys.len() > self.cfg.key_index_max_keys,
            keys,
            exact,
            deadline: deadline_after(now, timeout_ms),
        };
        Some(self.waiters.insert(spec, resolve))
    }

    /// An abort: resolves the waiter with `None` if it is still parked.
    pub fn cancel(&mut self, id: WaiterId, out: &mut Vec<Settlement<W>>) -> bool {
        match self.waiters.cancel(id) {
            Some(resolve) => {
                out.push(Settlement::immediate(resolve, None).at(self.standing()));
                true
            }
            None => false,
        }
    }

    /// J12: resolves every waiter whose deadline is at or before `now` with `None`.
    pub fn expire(&mut self, now: u64, out: &mut Vec<Settlement<W>>) -> usize {
        let started = Instant::now();
        let from = out.len();
        let expired = self.waiters.expire(now, out);
        self.stamp(&mut out[from..]);
        self.stats.record_sweep(expired, elapsed_ms(started));
        expired
    }

    /// The earliest waiter deadline (monotonic ns).
    pub fn next_deadline(&self) -> Option<u64> {
        self.waiters.next_deadline()
    }

    pub fn active_waiters(&self) -> usize {
        self.waiters.len()
    }

    /// J15 with B29 fixed: every parked waiter is resolved with `None`; pending touches, the
    /// exact history and the flush bookkeeping are dropped. The epoch, generation and bloom stay
    /// (as in the reference), so cursors handed out remain comparable.
    pub fn stop(&mut self, out: &mut Vec<Settlement<W>>) -> usize {
        // Not stamped: nothing flushes after a stop, and a stopped journal's answers read as
        // the reference's do (its bucket fields reset).
        let n = self.waiters.take_all(out);
        self.bucket.clear();
        self.pending_through = -1;
        self.exact.clear();
        self.stats.clear_flush_intervals();
        self.last_flushed_source_offset = -1;
        self.last_flush_at_ms = 0;
        self.last_bucket_start_ms = 0;
        n
    }

    // ---- read-only views

    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// How many epochs this journal has had (1 + the number of wraps, B28).
    pub fn epochs_started(&self) -> u64 {
        self.epochs_started
    }

    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Where the journal stands now ([`Standing`]).
    pub fn standing(&self) -> Standing {
        Standing {
            epoch: self.epoch,
            generation: self.generation,
            last_flushed_source_offset: self.last_flushed_source_offset,
            last_flush_at_ms: self.last_flush_at_ms,
            last_bucket_start_ms: self.last_bucket_start_ms,
        }
    }

    /// Marks `settled` (waiters settled without a touch just now) with where the journal stands.
    fn stamp(&self, settled: &mut [Settlement<W>]) {
        let at = self.standing();
        for s in settled {
            s.at = Some(at);
        }
    }

    pub fn cursor(&self) -> String {
        format_cursor(self.epoch, self.generation)
    }

    pub fn last_flushed_source_offset(&self) -> i64 {
        self.last_flushed_source_offset
    }

    pub fn last_flush_at_ms(&self) -> i64 {
        self.last_flush_at_ms
    }

    pub fn last_bucket_start_ms(&self) -> i64 {
        self.last_bucket_start_ms
    }

    pub fn last_overflow_generation(&self) -> u32 {
        self.last_overflow_generation
    }

    pub fn pending_keys(&self) -> usize {
        self.bucket.pending_keys()
    }

    /// Bytes of the bloom's slot array actually allocated (0 until the first touch, B14).
    pub fn filter_bytes(&self) -> usize {
        self.bloom.allocated_bytes()
    }

    pub fn filter_size(&self) -> usize {
        self.bloom.slot_count()
    }

    pub fn exact_history_len(&self) -> usize {
        self.exact.len()
    }

    pub fn meta(&mut self, now_ms: i64) -> JournalMeta {
        let (max, p95) = self.stats.flush_interval_max_p95(now_ms);
        JournalMeta {
            cursor: self.cursor(),
            epoch: self.epoch.to_string(),
            generation: self.generation,
            bucket_ms: self.cfg.bucket_ms,
            coalesce_ms: self.coalesce_ms,
            filter_size: self.bloom.slot_count(),
            k: self.bloom.k(),
            pending_keys: self.bucket.pending_keys(),
            overflow_buckets: self.overflow_buckets,
            active_waiters: self.waiters.len(),
            bucket_max_source_offset_seq: self.last_flushed_source_offset,
            last_flush_at_ms: self.last_flush_at_ms,
            flush_interval_ms_max_last_10s: max,
            flush_interval_ms_p95_last_10s: p95,
        }
    }

    pub fn total_stats(&self) -> TotalStats {
        self.stats.totals()
    }

    pub fn take_interval_stats(&mut self) -> IntervalStats {
        let heap = self.waiters.heap_len();
        self.stats.take_interval(heap)
    }

    #[cfg(test)]
    pub fn check_invariants(&self) {
        self.waiters.check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::journal::config::JournalOptions;

    type Log = Arc<Mutex<Vec<(u32, Option<TouchHit>)>>>;

    fn resolve(log: &Log, name: u32) -> Resolve {
        let log = log.clone();
        Box::new(move |hit, _| log.lock().unwrap().push((name, hit)))
    }

    fn deliver(out: &mut Vec<Settlement>) {
        for s in out.drain(..) {
            (s.waker)(s.hit, s.at);
        }
    }

    fn journal(o: JournalOptions) -> JournalState {
        JournalState::new(JournalConfig::from_options(&o), Epoch(0xabc))
    }

    fn wait(keys: &[u32], exact: &[u64], after: Option<u32>) -> WaitRequest {
        WaitRequest {
            keys: KeyIds::from_slice(keys),
            exact_keys: exact.to_vec(),
            after_generation: after,
            timeout_ms: 1000,
        }
    }

    #[test]
    fn generations_advance_only_at_flush_and_hits_carry_the_bucket() {
        let mut j = journal(JournalOptions::default());
        let log: Log = Default::default();
        let mut out = Vec::new();
        j.register(wait(&[5, 6], &[], None), 0, resolve(&log, 1), &mut out);
        j.register(wait(&[7], &[], None), 0, resolve(&log, 2), &mut out);
        assert!(out.is_empty());
        assert!(!j.flush(10, &mut out), "an empty bucket does not flush");
        j.touch(6, Some(40), None, 1_000);
        j.touch(5, Some(12), None, 1_001);
        assert_eq!(j.generation(), 0);
        assert!(!j.maybe_touched_since(6, 0), "not visible before the flush");
        assert!(j.flush(1_050, &mut out));
        deliver(&mut out);
        assert_eq!(j.generation(), 1);
        assert!(j.maybe_touched_since(6, 0));
        assert!(!j.maybe_touched_since(6, 1));
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 1);
        let hit = log[0].1.unwrap();
        assert_eq!(log[0].0, 1);
        // The first of the waiter's keys to arrive in the bucket names the hit.
        assert_eq!(
            hit,
            TouchHit {
                generation: 1,
                key_id: 6,
                bucket_max_source_offset_seq: 40,
                flush_at_ms: 1_050,
                bucket_start_ms: 1_000
            }
        );
        assert_eq!(j.last_flushed_source_offset(), 40);
        assert_eq!(j.active_waiters(), 1);
        let m = j.meta(1_050);
        assert_eq!((m.generation, m.pending_keys, m.active_waiters, m.bucket_max_source_offset_seq), (1, 0, 1, 40));
        assert_eq!(j.total_stats().wake.notify_wakeups, 1);
        assert_eq!(j.total_stats().flushes, 1);
    }

    #[test]
    fn waiters_only_wake_for_later_generations() {
        let mut j = journal(JournalOptions::default());
        let log: Log = Default::default();
        let mut out = Vec::new();
        j.register(wait(&[1], &[], Some(1)), 0, resolve(&log, 1), &mut out);
        j.touch(1, None, None, 1);
        j.flush(2, &mut out); // generation 1: not after 1
        assert!(out.is_empty());
        j.touch(1, None, None, 3);
        j.flush(4, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn overflow_broadcasts_and_marks_the_generation() {
        let mut j = journal(JournalOptions { pending_max_keys: 2.0, ..Default::default() });
        let log: Log = Default::default();
        let mut out = Vec::new();
        j.register(wait(&[100], &[], None), 0, resolve(&log, 1), &mut out);
        j.register(wait(&[], &[0xfeed], None), 0, resolve(&log, 2), &mut out);
        let many: Vec<u32> = (200..300).collect();
        j.register(wait(&many, &[], None), 0, resolve(&log, 3), &mut out);
        j.register(wait(&[100], &[], Some(5)), 0, resolve(&log, 4), &mut out);
        for k in 1..=3 {
            j.touch(k, Some(k as i64), Some(k as u64), 10);
        }
        assert!(j.flush(20, &mut out));
        deliver(&mut out);
        let mut names: Vec<u32> = log.lock().unwrap().iter().map(|x| x.0).collect();
        names.sort();
        assert_eq!(names, vec![1, 2, 3], "every waiter before the generation, key id 0");
        assert!(log.lock().unwrap().iter().all(|x| x.1.unwrap().key_id == 0));
        assert_eq!(j.last_overflow_generation(), 1);
        assert!(j.maybe_touched_since(999, 0), "J5 overflow shortcut");
        assert!(!j.maybe_touched_since(999, 1));
        assert!(j.maybe_touched_since_any(&[999], 0));
        assert_eq!(j.exact_touched_since_any(&[1], 0), None);
        assert_eq!(j.meta(20).overflow_buckets, 1);
    }

    #[test]
    fn exact_and_broad_waiters() {
        let mut j = journal(JournalOptions { key_index_max_keys: 2.0, ..Default::default() });
        let log: Log = Default::default();
        let mut out = Vec::new();
        j.register(wait(&[1, 2, 3], &[], None), 0, resolve(&log, 1), &mut out); // broad
        j.register(wait(&[9], &[0xaa], None), 0, resolve(&log, 2), &mut out);
        j.register(wait(&[4, 5, 6], &[], None), 0, resolve(&log, 3), &mut out); // broad, untouched
        j.touch(3, None, None, 1);
        j.touch(8, None, Some(0xaa), 1);
        j.flush(2, &mut out);
        deliver(&mut out);
        let log = log.lock().unwrap();
        let mut names: Vec<(u32, u32)> = log.iter().map(|x| (x.0, x.1.unwrap().key_id)).collect();
        names.sort();
        assert_eq!(names, vec![(1, 0), (2, 0)]);
        assert_eq!(j.exact_touched_since_any(&[0xaa], 0), Some(true));
        assert_eq!(j.exact_touched_since_any(&[0xab], 0), Some(false));
        assert_eq!(j.active_waiters(), 1);
    }

    #[test]
    fn immediate_cases_and_expiry() {
        let mut j = journal(JournalOptions::default());
        let log: Log = Default::default();
        let mut out = Vec::new();
        assert!(j.register(wait(&[], &[], None), 0, resolve(&log, 1), &mut out).is_none());
        let mut zero = wait(&[1], &[], None);
        zero.timeout_ms = 0;
        assert!(j.register(zero, 0, resolve(&log, 2), &mut out).is_none());
        assert_eq!(out.len(), 2);
        deliver(&mut out);
        let id = j.register(wait(&[1], &[], None), 5, resolve(&log, 3), &mut out).unwrap();
        // Rounded up to the next quarter millisecond.
        assert_eq!(j.next_deadline(), Some(1_000_250_000));
        assert_eq!(j.expire(1_000_249_999, &mut out), 0);
        assert_eq!(j.expire(1_000_250_000, &mut out), 1);
        deliver(&mut out);
        assert!(!j.cancel(id, &mut out));
        assert_eq!(j.total_stats().wake.timeouts_fired, 1);
        assert_eq!(j.take_interval_stats().wake.timeout_sweeps, 1);
        assert!(log.lock().unwrap().iter().all(|x| x.1.is_none()));
    }

    /// A timed-out waiter's answer must not take in a flush it did not take part in: the
    /// settlement carries the generation at its expiry, however late it is delivered.
    #[test]
    fn a_waiter_settled_without_a_touch_carries_where_the_journal_stood() {
        let mut j = journal(JournalOptions::default());
        let log: Log = Default::default();
        let mut out = Vec::new();
        j.register(wait(&[1], &[], None), 5, resolve(&log, 1), &mut out).unwrap();
        let before = j.standing();
        assert_eq!(j.expire(1_000_250_000, &mut out), 1);
        // A flush on another thread, of the waiter's key, before the answer is delivered.
        let mut late = Vec::new();
        j.touch(1, Some(42), None, 0);
        assert!(j.flush(10, &mut late));
        assert!(late.is_empty(), "the waiter was settled already");
        assert_eq!(j.generation(), before.generation + 1);
        let at = out[0].at.expect("stamped at expiry");
        assert_eq!(at, before);
        assert_eq!(format_cursor(at.epoch, at.generation), format_cursor(Epoch(0xabc), before.generation));
        deliver(&mut out);
        assert_eq!(log.lock().unwrap().as_slice(), &[(1, None)]);
    }

    #[test]
    fn stop_resolves_every_waiter() {
        let mut j = journal(JournalOptions::default());
        let log: Log = Default::default();
        let mut out = Vec::new();
        for i in 0..100 {
            j.register(wait(&[i], &[i as u64], None), 0, resolve(&log, i), &mut out);
        }
        j.touch(1, Some(5), None, 1);
        assert_eq!(j.stop(&mut out), 100);
        deliver(&mut out);
        assert_eq!(log.lock().unwrap().len(), 100);
        assert!(log.lock().unwrap().iter().all(|x| x.1.is_none()));
        assert_eq!(j.active_waiters(), 0);
        assert!(!j.has_pending());
        assert_eq!(j.next_deadline(), None);
    }

    #[test]
    fn the_generation_wrap_starts_a_new_epoch_and_wakes_everyone() {
        let start = u32::MAX - 2;
        let mut j = journal(JournalOptions { initial_generation: start, ..Default::default() });
        let log: Log = Default::default();
        let mut out = Vec::new();
        let epoch0 = j.epoch();
        j.touch(1, None, None, 1);
        j.flush(1, &mut out);
        j.touch(1, None, None, 1);
        j.flush(1, &mut out);
        assert_eq!(j.generation(), u32::MAX);
        assert!(j.maybe_touched_since(1, u32::MAX - 1));
        // Parked at the last generation of the epoch, on a key that the next bucket misses.
        j.register(wait(&[7], &[], None), 0, resolve(&log, 1), &mut out);
        j.register(wait(&[8], &[], Some(u32::MAX)), 0, resolve(&log, 2), &mut out);
        j.touch(2, None, None, 1);
        j.flush(3, &mut out);
        deliver(&mut out);
        assert_ne!(j.epoch(), epoch0);
        assert_eq!(j.epochs_started(), 2);
        assert_eq!(j.generation(), 1);
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2, "every waiter is woken when the epoch changes");
        assert!(log.iter().all(|x| x.1.unwrap().generation == 1));
        // The new epoch starts from a clean filter.
        assert!(j.maybe_touched_since(2, 0));
        assert!(!j.maybe_touched_since(1, 0));
        assert_eq!(j.cursor(), format!("{}:1", j.epoch()));
    }

    #[test]
    fn coalesce_is_clamped_to_the_bucket() {
        let mut j = journal(JournalOptions { bucket_ms: 50.0, ..Default::default() });
        assert_eq!(j.coalesce_ms(), 50);
        j.set_coalesce_ms(10.7);
        assert_eq!(j.coalesce_ms(), 10);
        j.set_coalesce_ms(0.0);
        assert_eq!(j.coalesce_ms(), 1);
        j.set_coalesce_ms(1e9);
        assert_eq!(j.coalesce_ms(), 50);
        // A bucket of 1e308 ms still flushes: within a minute (MAX_BUCKET_MS).
        let mut j = journal(JournalOptions { bucket_ms: 1e308, ..Default::default() });
        assert_eq!(j.coalesce_ms(), crate::journal::config::MAX_BUCKET_MS);
        j.set_coalesce_ms(1e308);
        assert_eq!(j.coalesce_ms(), crate::journal::config::MAX_BUCKET_MS);
    }

    #[test]
    fn wait_limits() {
        let mut r =
            WaitRequest { keys: KeyIds::from_elem(1, 1024), timeout_ms: MAX_WAIT_TIMEOUT_MS, ..Default::default() };
        assert!(r.validate().is_ok());
        r.keys.push(1);
        assert_eq!(r.validate().unwrap_err().code(), "ERR_INVALID_ARGUMENT");
        assert!(r.validate_within(MAX_JOURNAL_WAIT_KEYS).is_ok());
        // The same limits on lengths alone (what a binding checks before reading a key).
        assert_eq!(WaitRequest::check_counts(1025, 0, MAX_WAIT_KEYS), r.validate());
        assert!(WaitRequest::check_counts(1024, 1024, MAX_WAIT_KEYS).is_ok());
        let exact = WaitRequest::check_counts(0, 1 << 31, MAX_WAIT_KEYS).unwrap_err();
        assert_eq!(exact.to_string(), "exactKeys: at most 1024 keys per wait");
        assert!(WaitRequest::timeout_from_number(-1.0).is_err());
        assert!(WaitRequest::timeout_from_number(f64::NAN).is_err());
        assert!(WaitRequest::timeout_from_number(f64::INFINITY).is_err());
        assert!(WaitRequest::timeout_from_number(3e9).is_err());
        assert_eq!(WaitRequest::timeout_from_number(2.9).unwrap(), 2);
    }
}
