//! The touch journal: where clients wait on key sets (checklist J; reference
//! `touch/touch_journal.ts`).
//!
//! Touches collect in a pending bucket and become visible only when the bucket flushes as a new
//! *generation* (J6–J8); a time-aware bloom filter answers "touched since generation g?"
//! without false negatives (J4, J5), an exact history answers it for literal routing keys
//! (J10), and parked waiters are woken by the flush that concerns them (J9, J11, J12). A client
//! holds a cursor `<epoch>:<generation>`; a new journal (or a generation wrap, B28) is a new
//! epoch.
//!
//! Modules:
//! - [`cursor`]: epochs, cursor parsing and formatting (J1, J3);
//! - [`config`]: constructor options and their clamping (J2);
//! - [`bloom`]: the generation bloom and its slot positions (J4, J5, B14); `slots`: its array;
//! - [`bucket`]: the pending bucket (J6, B15);
//! - [`exact`]: routing keys and the exact history (J10, B15);
//! - [`waiters`]: the waiter indexes and the deadline heap (J11, J12);
//! - [`stats`]: counters and flush intervals (J13, J14);
//! - [`image`]: what a journal keeps across a restart (its image and its flush log);
//! - [`state`]: the single-threaded state machine tying them together (J8, J9, B28, B29);
//! - this module: [`Journal`], the thread-safe handle with clocks and timers (on the crate's
//!   one native timer thread, [`crate::timer`]).
//!
//! ```
//! use durable_touch::journal::{Journal, JournalOptions, KeyIds, WaitRequest};
//! use std::sync::mpsc;
//!
//! let journal = Journal::new(JournalOptions::default());
//! let (tx, rx) = mpsc::channel();
//! let req = WaitRequest { keys: KeyIds::from_slice(&[42]), timeout_ms: 5_000, ..Default::default() };
//! journal.wait_for_any(req, Box::new(move |hit, _| tx.send(hit).unwrap())).unwrap();
//! journal.touch(42, Some(7), None);
//! journal.flush(); // the bucket timer would do this within `coalesceMs`
//! let hit = rx.recv().unwrap().expect("woken by the flush");
//! assert_eq!((hit.generation, hit.key_id, hit.bucket_max_source_offset_seq), (1, 42, 7));
//! ```
//!
//! Waiting is race-free: [`Journal::check_or_wait`] runs the caller's check (bloom, exact
//! history, epoch) and registers the waiter under one lock, so no flush can fall between the two
//! (W6). Resolutions are delivered after the lock is released, exactly once per waiter.
//!
//! Where flushes run: [`Journal::new`] flushes on the timer thread, for owners that only check
//! and wait through [`Journal::check_or_wait`]. A JavaScript caller that checks and then waits
//! in two calls, as the reference's wait route does, relies on no flush happening between
//! them; [`Journal::with_flush_handoff`] gives it that: when the bucket timer fires, the journal
//! asks its owner to run [`Journal::run_due_flush`] on the owner's thread instead.

pub mod bloom;
pub mod bucket;
pub mod config;
pub mod cursor;
pub mod exact;
mod hash;
pub mod image;
pub mod mirror;
mod slots;
pub mod state;
pub mod stats;
pub mod waiters;

#[cfg(test)]
mod model_tests;

use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

pub use config::{JournalConfig, JournalOptions};
pub use cursor::{format_cursor, parse_cursor, Cursor, Epoch};
pub use exact::{format_routing_key, parse_routing_key};
pub use image::{FlushLog, JournalImage};
pub use mirror::{Applied, CaughtUp, FlushObserver, FlushRecord};
pub use state::{JournalMeta, JournalState, WaitRequest, MAX_JOURNAL_WAIT_KEYS, MAX_WAIT_KEYS, MAX_WAIT_TIMEOUT_MS};
pub use stats::{IntervalStats, TotalStats, WakeStats};
pub use waiters::{KeyIds, Resolve, Settlement, Standing, WaiterId, Waker};

use crate::error::Result;
use crate::timer::{self, mono_now, TimerKey, TimerTarget};

/// What a woken waiter receives (J9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TouchHit {
    pub generation: u32,
    /// The touched key for a keyed waiter; 0 for exact, broad and broadcast wakes.
    pub key_id: u32,
    /// The largest source offset of the flushed bucket, -1 if none.
    pub bucket_max_source_offset_seq: i64,
    /// Wall-clock ms of the flush.
    pub flush_at_ms: i64,
    /// Wall-clock ms of the bucket's first touch.
    pub bucket_start_ms: i64,
}

/// One touch, for [`Journal::touch_many`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch {
    pub key_id: u32,
    pub source_offset: Option<i64>,
    /// A parsed 16-hex routing key ([`parse_routing_key`]).
    pub routing_key: Option<u64>,
}

/// The outcome of [`Journal::check_or_wait`].
pub enum CheckOrWait<T, W = Resolve> {
    /// The check answered; the waiter was not registered and its waker is handed back.
    Answered(T, W),
    /// Parked until a touch, its deadline, a cancel or stop.
    Waiting(WaiterId),
    /// Resolved with `None` at once (no keys, or a zero timeout), J11.
    Resolved,
}

/// Wall-clock milliseconds (`Date.now()`).
pub fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

const FLUSH_TIMER: u64 = 0;
const DEADLINE_TIMER: u64 = 1;

struct Armed {
    key: TimerKey,
    token: u64,
    at: u64,
}

/// Asked, from the timer thread, to have [`Journal::run_due_flush`] called on the owner's
/// thread.
pub type FlushHandoff<W = Resolve> = Box<dyn Fn(WeakJournal<W>) + Send + Sync>;

struct Core<W: Waker> {
    state: JournalState<W>,
    flush_timer: Option<Armed>,
    deadline_timer: Option<Armed>,
    next_token: u64,
    /// The bucket timer fired and the flush was handed to the owner, which has not run it yet.
    flush_due: bool,
    /// A deadline came due while a flush due before it was handed off: the owner expires the
    /// waiters after running the flush ([`Journal::run_due_flush`]), and the deadline timer
    /// stays unarmed until then.
    expire_after_flush: bool,
}

struct Inner<W: Waker> {
    core: Mutex<Core<W>>,
    this: Weak<Inner<W>>,
    handoff: Option<FlushHandoff<W>>,
}

/// A journal, shareable between threads (clones are handles to the same journal). `W` is
/// what resolves a waiter: a boxed callback by default, a promise ticket in the JS binding.
pub struct Journal<W: Waker = Resolve> {
    inner: Arc<Inner<W>>,
}

impl<W: Waker> Clone for Journal<W> {
    fn clone(&self) -> Self {
        Journal { inner: self.inner.clone() }
    }
}

/// A handle that does not keep the journal alive (an abort listener holds one).
pub struct WeakJournal<W: Waker = Resolve> {
    inner: Weak<Inner<W>>,
}

impl<W: Waker> Clone for WeakJournal<W> {
    fn clone(&self) -> Self {
        WeakJournal { inner: self.inner.clone() }
    }
}

impl<W: Waker> WeakJournal<W> {
    pub fn upgrade(&self) -> Option<Journal<W>> {
        self.inner.upgrade().map(|inner| Journal { inner })
    }
}

/// How many waiters ahead delivery tells a waker it comes next ([`Waker::prefetch`]).
const PREFETCH_AHEAD: usize = 8;

/// Calls each callback outside any lock, in registration order; a panicking callback does not
/// stop the others. Each waker is told to prefetch [`PREFETCH_AHEAD`] waiters before its turn:
/// waking 10,000 JS waiters is bound by cache misses on their promises, not by work.
fn deliver<W: Waker>(mut out: Vec<Settlement<W>>) {
    waiters::sort_for_delivery(&mut out);
    let mut rest = out.into_iter();
    while let Some(Settlement { waker, hit, at, .. }) = rest.next() {
        if let Some(ahead) = rest.as_slice().get(PREFETCH_AHEAD - 1) {
            ahead.waker.prefetch();
        }
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || waker.settle(hit, at)));
    }
}

impl Journal {
    /// A journal with boxed-callback waiters whose bucket timer flushes on the timer thread.
    pub fn new(options: JournalOptions) -> Journal {
        Self::build(options, None)
    }
}

impl<W: Waker> Journal<W> {
    /// A journal whose bucket timer flushes on the timer thread.
    pub fn with_waker(options: JournalOptions) -> Self {
        Self::build(options, None)
    }

    /// A journal whose bucket timer hands the flush to its owner (see the module docs).
    pub fn with_flush_handoff(options: JournalOptions, handoff: FlushHandoff<W>) -> Self {
        Self::build(options, Some(handoff))
    }

    fn build(options: JournalOptions, handoff: Option<FlushHandoff<W>>) -> Self {
        let mut state = JournalState::new(JournalConfig::from_options(&options), Epoch::random());
        state.set_epoch_started_ms(wall_ms());
        Self::from_state(state, handoff)
    }

    /// A journal on `state` (one taken up after a restart, [`JournalState::restore`]).
    pub fn from_state(state: JournalState<W>, handoff: Option<FlushHandoff<W>>) -> Self {
        let core = Core {
            state,
            flush_timer: None,
            deadline_timer: None,
            next_token: 0,
            flush_due: false,
            expire_after_flush: false,
        };
        Journal { inner: Arc::new_cyclic(|this| Inner { core: Mutex::new(core), this: this.clone(), handoff }) }
    }

    /// Runs the flush the bucket timer handed off, if it is still due (a manual flush or a stop
    /// in between cancels it), then the deadlines that came due while it waited. Returns
    /// whether a generation was produced.
    pub fn run_due_flush(&self) -> bool {
        let now = wall_ms();
        let mut out = Vec::new();
        let flushed = {
            let mut core = self.inner.core.lock();
            if !core.flush_due {
                return false;
            }
            self.inner.flush_locked(&mut core, now, &mut out)
        };
        deliver(out);
        flushed
    }

    /// Whether both handles are the same journal.
    pub fn same_as(&self, other: &Journal<W>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub fn downgrade(&self) -> WeakJournal<W> {
        WeakJournal { inner: Arc::downgrade(&self.inner) }
    }

    /// Runs `f` on the locked core, keeps the timers in step, then delivers the settlements.
    fn with_core<R>(&self, f: impl FnOnce(&mut JournalState<W>, &mut Vec<Settlement<W>>) -> R) -> R {
        let mut out = Vec::new();
        let r = {
            let mut core = self.inner.core.lock();
            let r = f(&mut core.state, &mut out);
            self.inner.sync_timers(&mut core);
            r
        };
        deliver(out);
        r
    }

    /// J6: `touch(keyId, sourceOffset?, routingKey?)`.
    pub fn touch(&self, key_id: u32, source_offset: Option<i64>, routing_key: Option<u64>) {
        self.touching(|state, now| state.touch(key_id, source_offset, routing_key, now));
    }

    /// Many touches under one lock (how the engine feeds a processed batch).
    pub fn touch_many(&self, touches: impl IntoIterator<Item = Touch>) {
        self.touching(|state, now| {
            for t in touches {
                state.touch(t.key_id, t.source_offset, t.routing_key, now);
            }
        });
    }

    /// [`Journal::touch_many`] of key ids alone (no offsets, no routing keys).
    pub fn touch_keys(&self, keys: &[u32]) {
        self.touching(|state, now| state.touch_keys(keys, now));
    }

    /// Touches the state with `f` (given the wall clock) under the lock, then arms the flush
    /// timer if none is.
    fn touching(&self, f: impl FnOnce(&mut JournalState<W>, i64)) {
        let now = wall_ms();
        let mut core = self.inner.core.lock();
        f(&mut core.state, now);
        if core.flush_timer.is_none() {
            self.inner.sync_timers(&mut core);
        }
    }

    /// J7.
    pub fn set_coalesce_ms(&self, ms: f64) {
        self.inner.core.lock().state.set_coalesce_ms(ms);
    }

    /// J7, then (unlike the reference, which keeps an armed timer's delay) brings an armed
    /// bucket timer forward to `now + coalesce` when that is sooner. The engine uses this so
    /// that a stream that caught up flushes within the short window (deviations.md, M6/J7).
    pub fn set_coalesce_ms_sooner(&self, ms: f64) {
        let mut core = self.inner.core.lock();
        core.state.set_coalesce_ms(ms);
        let at = mono_now().saturating_add(core.state.coalesce_ms().saturating_mul(1_000_000));
        if core.flush_timer.as_ref().is_some_and(|armed| armed.at > at) {
            if let Some(armed) = core.flush_timer.take() {
                timer::cancel(armed.key);
            }
            core.flush_timer = Some(self.inner.arm(&mut core, at, FLUSH_TIMER));
        }
    }

    /// Flushes the pending bucket now (tests, benchmarks, `settle: "flush"`), cancelling the
    /// armed flush timer. Returns whether a generation was produced.
    pub fn flush(&self) -> bool {
        let now = wall_ms();
        let mut out = Vec::new();
        let flushed = {
            let mut core = self.inner.core.lock();
            if let Some(armed) = core.flush_timer.take() {
                timer::cancel(armed.key);
            }
            self.inner.flush_locked(&mut core, now, &mut out)
        };
        deliver(out);
        flushed
    }

    /// Many touches under one lock, for the source rows after `from` up to `through`, which
    /// they cover ([`JournalState::note_from`], [`JournalState::note_through`]): how the engine
    /// feeds a processed batch.
    pub fn touch_many_through(&self, touches: impl IntoIterator<Item = Touch>, from: i64, through: i64) {
        self.touching(|state, now| {
            state.note_from(from);
            for t in touches {
                state.touch(t.key_id, t.source_offset, t.routing_key, now);
            }
            state.note_through(through);
        });
    }

    /// Runs `f` on the locked state, for what the read-only views cannot do (its image, its
    /// log); the timers are not touched.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut JournalState<W>) -> R) -> R {
        f(&mut self.inner.core.lock().state)
    }

    /// Sets (or removes) the observer told of each flush ([`mirror`]).
    pub fn set_observer(&self, observer: Option<FlushObserver>) {
        self.inner.core.lock().state.set_observer(observer);
    }

    /// A mirror takes its writer's flush ([`mirror`]); the waiters it wakes are delivered.
    pub fn apply_flush(&self, rec: &FlushRecord) -> Applied {
        self.with_core(|state, out| state.apply_flush(rec, out))
    }

    /// A mirror takes its writer's latest position ([`mirror`]).
    pub fn catch_up(&self, epoch: Epoch, generation: u32) -> CaughtUp {
        self.with_core(|state, out| state.catch_up(epoch, generation, out))
    }

    /// J5.
    pub fn maybe_touched_since(&self, key_id: u32, since: u32) -> bool {
        self.inner.core.lock().state.maybe_touched_since(key_id, since)
    }

    /// J5 over several keys.
    pub fn maybe_touched_since_any(&self, keys: &[u32], since: u32) -> bool {
        self.inner.core.lock().state.maybe_touched_since_any(keys, since)
    }

    /// J10 over parsed routing keys.
    pub fn exact_touched_since_any(&self, keys: &[u64], since: u32) -> Option<bool> {
        self.inner.core.lock().state.exact_touched_since_any(keys, since)
    }

    /// J11: parks a waiter; `resolve` is called exactly once, with the hit or `None`.
    /// Returns the waiter's id, or `None` when it was resolved at once.
    pub fn wait_for_any(&self, req: WaitRequest, resolve: W) -> Result<Option<WaiterId>> {
        match self.check_or_wait(|_| None::<()>, req, resolve)? {
            CheckOrWait::Waiting(id) => Ok(Some(id)),
            _ => Ok(None),
        }
    }

    /// W6: runs `check` and, unless it answers, registers the waiter — under one lock, so no
    /// flush falls between the check and the registration. With `after_generation: None` the
    /// waiter waits for generations after the one `check` saw.
    ///
    /// Fails only when `req` names more than [`MAX_JOURNAL_WAIT_KEYS`] keys or exact keys or
    /// has too long a timeout ([`WaitRequest::validate_within`]); `resolve` is then dropped
    /// without being called, so callers that must always call it validate first.
    pub fn check_or_wait<T>(
        &self,
        check: impl FnOnce(&JournalState<W>) -> Option<T>,
        req: WaitRequest,
        resolve: W,
    ) -> Result<CheckOrWait<T, W>> {
        req.validate_within(MAX_JOURNAL_WAIT_KEYS)?;
        Ok(self.with_core(|state, out| {
            if let Some(answer) = check(state) {
                return CheckOrWait::Answered(answer, resolve);
            }
            match state.register(req, mono_now(), resolve, out) {
                Some(id) => CheckOrWait::Waiting(id),
                None => CheckOrWait::Resolved,
            }
        }))
    }

    /// An abort: resolves the waiter with `None` if it is still parked. Returns whether it was.
    pub fn cancel(&self, id: WaiterId) -> bool {
        self.with_core(|state, out| state.cancel(id, out))
    }

    /// Reads a consistent snapshot of the journal.
    pub fn read<R>(&self, f: impl FnOnce(&JournalState<W>) -> R) -> R {
        f(&self.inner.core.lock().state)
    }

    pub fn epoch(&self) -> Epoch {
        self.read(|s| s.epoch())
    }

    pub fn generation(&self) -> u32 {
        self.read(|s| s.generation())
    }

    pub fn cursor(&self) -> String {
        self.read(|s| s.cursor())
    }

    pub fn meta(&self) -> JournalMeta {
        let now = wall_ms();
        self.inner.core.lock().state.meta(now)
    }

    pub fn total_stats(&self) -> TotalStats {
        self.read(|s| s.total_stats())
    }

    pub fn take_interval_stats(&self) -> IntervalStats {
        self.inner.core.lock().state.take_interval_stats()
    }

    /// Bytes of filter memory held (0 until the first touch, B14).
    pub fn filter_bytes(&self) -> usize {
        self.read(|s| s.filter_bytes())
    }

    pub fn active_waiters(&self) -> usize {
        self.read(|s| s.active_waiters())
    }

    /// J15 with B29 fixed: cancels the timers and resolves every parked waiter with `None`.
    /// The journal stays usable, as the reference's does.
    pub fn stop(&self) -> usize {
        let mut out = Vec::new();
        let n = {
            let mut core = self.inner.core.lock();
            if let Some(a) = core.flush_timer.take() {
                timer::cancel(a.key);
            }
            if let Some(a) = core.deadline_timer.take() {
                timer::cancel(a.key);
            }
            core.flush_due = false;
            core.expire_after_flush = false;
            core.state.stop(&mut out)
        };
        deliver(out);
        n
    }
}

impl<W: Waker> Inner<W> {
    /// Flushes the pending bucket (a handed-off flush is done with), then expires the deadlines
    /// that waited for it, and keeps the timers in step. Returns whether a generation was
    /// produced.
    fn flush_locked(&self, core: &mut Core<W>, now: i64, out: &mut Vec<Settlement<W>>) -> bool {
        core.flush_due = false;
        let flushed = core.state.flush(now, out);
        if std::mem::take(&mut core.expire_after_flush) {
            core.state.expire(mono_now(), out);
        }
        self.sync_timers(core);
        flushed
    }

    /// The bucket timer's flush, due now: handed to the owner (then `true`: call the handoff
    /// once the lock is released) or run here.
    fn fire_flush(&self, core: &mut Core<W>, out: &mut Vec<Settlement<W>>) -> bool {
        if self.handoff.is_some() {
            core.flush_due = true;
            true
        } else {
            core.state.flush(wall_ms(), out);
            false
        }
    }

    fn arm(&self, core: &mut Core<W>, at: u64, kind: u64) -> Armed {
        core.next_token += 1;
        let token = (core.next_token << 1) | kind;
        // Never fails: `self` is alive, so is the Arc it lives in.
        let target: Arc<dyn TimerTarget> = self.this.upgrade().expect("an armed journal is alive");
        Armed { key: timer::schedule(at, target, token), token, at }
    }

    /// Arms the flush timer when touches are pending (J6) and points the deadline timer at the
    /// heap root (J12).
    fn sync_timers(&self, core: &mut Core<W>) {
        if core.flush_timer.is_none() && !core.flush_due && core.state.has_pending() {
            let at = mono_now().saturating_add(core.state.coalesce_ms().saturating_mul(1_000_000));
            core.flush_timer = Some(self.arm(core, at, FLUSH_TIMER));
        }
        let next = core.state.next_deadline().filter(|_| !core.expire_after_flush);
        if core.deadline_timer.as_ref().map(|a| a.at) != next {
            if let Some(a) = core.deadline_timer.take() {
                timer::cancel(a.key);
            }
            if let Some(at) = next {
                core.deadline_timer = Some(self.arm(core, at, DEADLINE_TIMER));
            }
        }
    }
}

impl<W: Waker> TimerTarget for Inner<W> {
    fn on_timer(&self, token: u64) {
        let mut out = Vec::new();
        let mut hand_off = false;
        {
            let mut core = self.core.lock();
            if token & 1 == FLUSH_TIMER {
                if core.flush_timer.as_ref().is_some_and(|a| a.token == token) {
                    core.flush_timer = None;
                    hand_off = self.fire_flush(&mut core, &mut out);
                }
            } else if let Some(deadline) = core.deadline_timer.take_if(|a| a.token == token) {
                // Timers run in due order, as the reference's JS timers do: a flush due no later
                // than this deadline runs first, so a waiter its bucket wakes is not timed out
                // (a timeout's callback would read the flushed cursor and miss the touch).
                if let Some(f) = core.flush_timer.take_if(|f| f.at <= deadline.at) {
                    timer::cancel(f.key);
                    hand_off = self.fire_flush(&mut core, &mut out);
                }
                if core.flush_due {
                    core.expire_after_flush = true;
                } else {
                    core.state.expire(mono_now(), &mut out);
                }
            }
            self.sync_timers(&mut core);
        }
        deliver(out);
        if let (true, Some(handoff)) = (hand_off, &self.handoff) {
            handoff(WeakJournal { inner: self.this.clone() });
        }
    }
}

impl<W: Waker> Drop for Inner<W> {
    /// Parked waiters keep their journal alive (their deadline timer holds it), so this runs
    /// with none left; anything still registered is resolved with `None` all the same.
    fn drop(&mut self) {
        let core = self.core.get_mut();
        for a in [core.flush_timer.take(), core.deadline_timer.take()].into_iter().flatten() {
            timer::cancel(a.key);
        }
        let mut out = Vec::new();
        core.state.stop(&mut out);
        deliver(out);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    fn channel_resolve() -> (Resolve, mpsc::Receiver<Option<TouchHit>>) {
        let (tx, rx) = mpsc::channel();
        (Box::new(move |hit, _| tx.send(hit).unwrap()), rx)
    }

    #[test]
    fn the_bucket_timer_flushes_after_coalesce_ms() {
        let j = Journal::new(JournalOptions { bucket_ms: 20.0, ..Default::default() });
        let (r, rx) = channel_resolve();
        j.wait_for_any(WaitRequest { keys: KeyIds::from_slice(&[9]), timeout_ms: 5_000, ..Default::default() }, r)
            .unwrap();
        let t0 = Instant::now();
        j.touch(9, None, None);
        let hit = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(19), "flushed after {:?}", t0.elapsed());
        assert_eq!(hit.generation, 1);
        assert_eq!(j.generation(), 1);
    }

    #[test]
    fn deadlines_fire_on_the_native_timer_and_not_early() {
        let j = Journal::new(JournalOptions::default());
        let mut rxs = Vec::new();
        let t0 = Instant::now();
        for i in 0..50u64 {
            let (r, rx) = channel_resolve();
            let req = WaitRequest {
                keys: KeyIds::from_slice(&[i as u32]),
                timeout_ms: 20 + (i % 5) * 10,
                ..Default::default()
            };
            j.wait_for_any(req, r).unwrap();
            rxs.push((20 + (i % 5) * 10, rx));
        }
        for (ms, rx) in rxs {
            assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
            assert!(t0.elapsed() >= Duration::from_millis(ms));
        }
        assert_eq!(j.active_waiters(), 0);
        assert_eq!(j.total_stats().wake.timeouts_fired, 50);
    }

    #[test]
    fn check_or_wait_answers_or_parks() {
        let j = Journal::new(JournalOptions::default());
        j.touch(5, None, None);
        j.flush();
        let (r, _rx) = channel_resolve();
        let req = WaitRequest { keys: KeyIds::from_slice(&[5]), timeout_ms: 1_000, ..Default::default() };
        match j.check_or_wait(|s| s.maybe_touched_since(5, 0).then_some("touched"), req.clone(), r).unwrap() {
            CheckOrWait::Answered(a, resolve) => {
                assert_eq!(a, "touched");
                resolve(None, None);
            }
            _ => panic!("expected an answer"),
        }
        let (r, rx) = channel_resolve();
        let id = match j.check_or_wait(|s| s.maybe_touched_since(5, 1).then_some(()), req, r).unwrap() {
            CheckOrWait::Waiting(id) => id,
            _ => panic!("expected a parked waiter"),
        };
        assert!(j.cancel(id));
        assert!(!j.cancel(id));
        assert_eq!(rx.recv().unwrap(), None);
        assert!(rx.try_recv().is_err(), "exactly once");
    }

    #[test]
    fn stop_and_drop_resolve_parked_waiters() {
        let j = Journal::new(JournalOptions::default());
        let (r1, rx1) = channel_resolve();
        let (r2, rx2) = channel_resolve();
        j.wait_for_any(WaitRequest { keys: KeyIds::from_slice(&[1]), timeout_ms: 60_000, ..Default::default() }, r1)
            .unwrap();
        assert_eq!(j.stop(), 1);
        assert_eq!(rx1.recv().unwrap(), None);
        j.wait_for_any(WaitRequest { keys: KeyIds::from_slice(&[1]), timeout_ms: 50, ..Default::default() }, r2)
            .unwrap();
        // Dropping the last handle does not abandon the waiter: its armed deadline keeps the
        // journal alive until it resolves.
        let t0 = Instant::now();
        drop(j);
        assert_eq!(rx2.recv_timeout(Duration::from_secs(5)).unwrap(), None);
        assert!(t0.elapsed() >= Duration::from_millis(45));
    }

    #[test]
    fn a_handed_off_flush_runs_only_on_the_owners_call() {
        let (tx, rx) = mpsc::channel::<WeakJournal>();
        let tx = std::sync::Mutex::new(tx);
        let j = Journal::with_flush_handoff(
            JournalOptions { bucket_ms: 5.0, ..Default::default() },
            Box::new(move |w| tx.lock().unwrap().send(w).unwrap()),
        );
        j.touch(1, None, None);
        let handle = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(j.generation(), 0, "the timer thread did not flush");
        j.touch(2, None, None);
        assert!(rx.try_recv().is_err(), "no second timer while a flush is due");
        assert!(handle.upgrade().unwrap().run_due_flush());
        assert_eq!(j.generation(), 1);
        assert!(j.maybe_touched_since(2, 0));
        assert!(!j.run_due_flush(), "ran once");
        // A manual flush cancels a due one.
        j.touch(3, None, None);
        let handle = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(j.flush());
        assert!(!handle.upgrade().unwrap().run_due_flush());
        assert_eq!(j.generation(), 2);
    }

    #[test]
    fn a_deadline_waits_for_a_flush_due_before_it() {
        // The reference's timers run in due order: a bucket flush due before a waiter's
        // deadline wakes the waiter even when the owner's thread was busy past both. The
        // timeout must not come first (its callback would see the flushed cursor and never
        // the touch).
        let (tx, rx) = mpsc::channel::<WeakJournal>();
        let tx = std::sync::Mutex::new(tx);
        let j = Journal::with_flush_handoff(
            JournalOptions { bucket_ms: 10.0, ..Default::default() },
            Box::new(move |w| tx.lock().unwrap().send(w).unwrap()),
        );
        j.touch(7, Some(3), None);
        let (r, hits) = channel_resolve();
        let req = WaitRequest {
            keys: KeyIds::from_slice(&[7]),
            after_generation: Some(0),
            timeout_ms: 30,
            ..Default::default()
        };
        j.wait_for_any(req, r).unwrap();
        let (r, other) = channel_resolve();
        let req = WaitRequest {
            keys: KeyIds::from_slice(&[8]),
            after_generation: Some(0),
            timeout_ms: 30,
            ..Default::default()
        };
        j.wait_for_any(req, r).unwrap();
        let handle = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // The owner is busy well past the deadline.
        std::thread::sleep(Duration::from_millis(100));
        assert!(hits.try_recv().is_err(), "no timeout before the flush due before it ran");
        assert!(other.try_recv().is_err());
        assert!(handle.upgrade().unwrap().run_due_flush());
        let hit = hits.recv_timeout(Duration::from_secs(1)).unwrap().expect("woken by the flush");
        assert_eq!((hit.generation, hit.bucket_max_source_offset_seq), (1, 3));
        assert_eq!(other.recv_timeout(Duration::from_secs(1)).unwrap(), None, "the other one timed out after it");
        assert_eq!(j.active_waiters(), 0);
    }

    #[test]
    fn bad_requests_are_refused() {
        let j = Journal::new(JournalOptions::default());
        let (r, _rx) = channel_resolve();
        let req =
            WaitRequest { keys: KeyIds::from_elem(0, MAX_JOURNAL_WAIT_KEYS + 1), timeout_ms: 10, ..Default::default() };
        assert_eq!(j.wait_for_any(req, r).unwrap_err().code(), "ERR_INVALID_ARGUMENT");
        // More than a TouchJournal wait may name (the engine adds template keys and its
        // catch-all key to a route's 1,024 keys) is fine.
        let (r, _rx) = channel_resolve();
        let req = WaitRequest { keys: (0..1025).collect(), timeout_ms: 10, ..Default::default() };
        assert!(j.wait_for_any(req, r).unwrap().is_some());
    }
}
