//! Flush records and mirrors: a journal on another process that answers every wait as the
//! writer's journal does.
//!
//! A journal can report each flush as a [`FlushRecord`] (the key ids in arrival order, the
//! exact routing keys, the overflow flag, the stamps and the generation it became), to a
//! [`FlushObserver`] called under its lock, so records leave in generation order. A *mirror*
//! is a journal that is never touched: it takes the writer's records through
//! [`JournalState::apply_flush`], which runs the very flush the writer ran (same generation,
//! same bloom marks, same exact history, same wake order), so a cursor means the same thing
//! at the writer and at every mirror of the same epoch.
//!
//! A mirror never answers from what it did not see. Each record must be the next generation
//! of the epoch it follows; otherwise:
//! - another epoch (the writer restarted, or its generation wrapped) is adopted: its parked
//!   waiters are woken, and cursors of the old epoch are stale;
//! - a jump within the epoch is a *gap* (records lost while the broker was down, or past its
//!   retention): parked waiters are woken, and cursors older than the gap answer stale;
//! - a record already applied (a replay) is ignored.
//!
//! Either way the mirror takes up the writer's generation, so cursors it hands out afterwards
//! stay valid at the writer and at other mirrors. [`JournalState::floor_generation`] is the
//! oldest generation it can answer for.

use std::sync::Arc;

use super::cursor::Epoch;

/// What one flush did: enough for a mirror to run the same flush.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushRecord {
    pub epoch: Epoch,
    /// The generation the flush produced.
    pub generation: u32,
    /// Captured key ids, in arrival order (written even in overflow, J8 step 7).
    pub keys: Vec<u32>,
    /// Parsed 16-hex routing keys (empty in overflow).
    pub exact: Vec<u64>,
    pub overflow: bool,
    pub bucket_start_ms: i64,
    pub flush_at_ms: i64,
    /// The largest source offset of the bucket, -1 if none.
    pub max_source_offset: i64,
}

/// Told of every flush, under the journal's lock (so in generation order): keep it cheap.
pub type FlushObserver = Arc<dyn Fn(&FlushRecord) + Send + Sync>;

/// What [`JournalState::apply_flush`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The next generation of the epoch followed.
    Next,
    /// A generation already applied (a replay): nothing changed.
    Duplicate,
    /// The first record, or one of another epoch: followed from it on.
    Adopted,
    /// Generations were missed: followed from this record on; older cursors are stale.
    Gap { missed: u32 },
}

/// What [`JournalState::catch_up`] did with the writer's latest generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaughtUp {
    /// The mirror holds that generation already.
    InStep,
    /// The writer is past what the mirror holds: a gap, handled as by `apply_flush`.
    Gap { missed: u32 },
    /// Another epoch: adopted.
    Adopted,
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use proptest::prelude::*;

    use super::*;
    use crate::journal::config::{JournalConfig, JournalOptions};
    use crate::journal::state::{JournalState, WaitRequest};
    use crate::journal::waiters::{KeyIds, Resolve, Settlement};
    use crate::journal::TouchHit;

    type Log = Arc<Mutex<Vec<(u32, Option<TouchHit>)>>>;

    fn opts() -> JournalOptions {
        JournalOptions { filter_pow2: 10.0, k: 3.0, pending_max_keys: 6.0, ..Default::default() }
    }

    fn writer(records: Arc<Mutex<Vec<FlushRecord>>>) -> JournalState {
        let mut s = JournalState::new(JournalConfig::from_options(&opts()), Epoch(7));
        s.set_observer(Some(Arc::new(move |r: &FlushRecord| records.lock().unwrap().push(r.clone()))));
        s
    }

    fn mirror() -> JournalState {
        JournalState::new(JournalConfig::from_options(&opts()), Epoch::random())
    }

    fn resolve(log: &Log, name: u32) -> Resolve {
        let log = log.clone();
        Box::new(move |hit, _| log.lock().unwrap().push((name, hit)))
    }

    fn deliver(out: &mut Vec<Settlement>) {
        for s in out.drain(..) {
            (s.waker)(s.hit, s.at);
        }
    }

    fn wait(keys: &[u32], exact: &[u64], after: u32) -> WaitRequest {
        WaitRequest {
            keys: KeyIds::from_slice(keys),
            exact_keys: exact.to_vec(),
            after_generation: Some(after),
            timeout_ms: 60_000,
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Touch(u32, Option<u64>),
        Flush,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                4 => (0u32..24, prop::option::of(0u64..6)).prop_map(|(k, r)| Op::Touch(k, r)),
                1 => Just(Op::Flush),
            ],
            1..120,
        )
    }

    proptest! {
        /// A mirror fed the writer's records answers every question the writer answers, for
        /// every key, exact key and cursor, and wakes the same waiters with the same hits.
        #[test]
        fn a_mirror_answers_as_its_writer(ops in ops()) {
            let records = Arc::new(Mutex::new(Vec::new()));
            let mut w = writer(records.clone());
            let mut m = mirror();
            let (wlog, mlog): (Log, Log) = Default::default();
            let mut out = Vec::new();
            let mut now = 1_000;
            for (i, op) in ops.iter().enumerate() {
                now += 1;
                match op {
                    Op::Touch(k, r) => w.touch(*k, Some(i as i64), *r, now),
                    Op::Flush => {
                        // A waiter on each side, registered at the same generation.
                        let g = w.generation();
                        if g == m.generation() && g > 0 {
                            let key = (i as u32) % 24;
                            w.register(wait(&[key], &[], g), 0, resolve(&wlog, i as u32), &mut out);
                            m.register(wait(&[key], &[], g), 0, resolve(&mlog, i as u32), &mut out);
                        }
                        w.flush(now, &mut out);
                        deliver(&mut out);
                        for rec in records.lock().unwrap().drain(..) {
                            let applied = m.apply_flush(&rec, &mut out);
                            prop_assert!(matches!(applied, Applied::Next | Applied::Adopted));
                            deliver(&mut out);
                        }
                    }
                }
            }
            prop_assert_eq!(m.epoch(), if w.generation() > 0 { w.epoch() } else { m.epoch() });
            if w.generation() == 0 {
                return Ok(());
            }
            prop_assert_eq!(m.generation(), w.generation());
            let floor = m.floor_generation();
            for since in floor..=w.generation() {
                for key in 0..24 {
                    prop_assert_eq!(m.maybe_touched_since(key, since), w.maybe_touched_since(key, since));
                }
                for rk in 0..6u64 {
                    let (a, b) = (m.exact_touched_since_any(&[rk], since), w.exact_touched_since_any(&[rk], since));
                    // The mirror's history starts at its floor: where it knows, it agrees.
                    if let Some(a) = a {
                        prop_assert_eq!(Some(a), b);
                    }
                }
            }
            prop_assert_eq!(m.last_flushed_source_offset(), w.last_flushed_source_offset());
            prop_assert_eq!(m.last_overflow_generation(), w.last_overflow_generation());
            let (mut wl, mut ml) = (wlog.lock().unwrap().clone(), mlog.lock().unwrap().clone());
            wl.sort_by_key(|e| e.0);
            ml.sort_by_key(|e| e.0);
            prop_assert_eq!(wl, ml);
        }
    }

    fn record(epoch: u64, generation: u32, keys: &[u32]) -> FlushRecord {
        FlushRecord {
            epoch: Epoch(epoch),
            generation,
            keys: keys.to_vec(),
            exact: Vec::new(),
            overflow: false,
            bucket_start_ms: 1,
            flush_at_ms: 2,
            max_source_offset: generation as i64,
        }
    }

    #[test]
    fn replays_are_ignored_and_gaps_wake_everyone_and_raise_the_floor() {
        let mut m = mirror();
        let log: Log = Default::default();
        let mut out = Vec::new();
        assert_eq!(m.apply_flush(&record(9, 5, &[1]), &mut out), Applied::Adopted);
        assert_eq!((m.epoch(), m.generation(), m.floor_generation()), (Epoch(9), 5, 4));
        assert!(m.maybe_touched_since(1, 4));
        assert_eq!(m.apply_flush(&record(9, 6, &[2]), &mut out), Applied::Next);
        assert_eq!(m.apply_flush(&record(9, 5, &[1]), &mut out), Applied::Duplicate);
        assert_eq!(m.apply_flush(&record(9, 6, &[2]), &mut out), Applied::Duplicate);
        assert_eq!(m.generation(), 6);
        // A waiter on a key the gap's lost generations may have touched.
        m.register(wait(&[3], &[], 6), 0, resolve(&log, 1), &mut out);
        assert_eq!(m.apply_flush(&record(9, 9, &[4]), &mut out), Applied::Gap { missed: 2 });
        deliver(&mut out);
        assert_eq!(log.lock().unwrap().len(), 1, "woken by the gap, not left waiting");
        assert_eq!((m.generation(), m.floor_generation()), (9, 8));
        assert!(m.maybe_touched_since(4, 8));
        assert!(!m.maybe_touched_since(3, 8));
    }

    #[test]
    fn another_epoch_is_adopted_and_the_writers_latest_generation_reveals_a_silent_gap() {
        let mut m = mirror();
        let log: Log = Default::default();
        let mut out = Vec::new();
        m.apply_flush(&record(9, 1, &[1]), &mut out);
        m.apply_flush(&record(9, 2, &[2]), &mut out);
        assert_eq!(m.catch_up(Epoch(9), 2, &mut out), CaughtUp::InStep);
        assert_eq!(m.catch_up(Epoch(9), 1, &mut out), CaughtUp::InStep, "an older heartbeat");
        m.register(wait(&[5], &[], 2), 0, resolve(&log, 1), &mut out);
        // The writer says it is at 4: generations 3 and 4 never arrived.
        assert_eq!(m.catch_up(Epoch(9), 4, &mut out), CaughtUp::Gap { missed: 2 });
        deliver(&mut out);
        assert_eq!(log.lock().unwrap().len(), 1);
        assert_eq!((m.generation(), m.floor_generation()), (4, 4));
        // Generation 5 follows.
        assert_eq!(m.apply_flush(&record(9, 5, &[5]), &mut out), Applied::Next);
        // The writer restarted: a new epoch.
        m.register(wait(&[6], &[], 5), 0, resolve(&log, 2), &mut out);
        assert_eq!(m.apply_flush(&record(11, 1, &[6]), &mut out), Applied::Adopted);
        deliver(&mut out);
        assert_eq!(log.lock().unwrap().len(), 2);
        assert_eq!((m.epoch(), m.generation(), m.floor_generation()), (Epoch(11), 1, 0));
        assert!(m.maybe_touched_since(6, 0));
        assert!(!m.maybe_touched_since(1, 0), "nothing of the old epoch is kept");
        assert_eq!(m.catch_up(Epoch(12), 3, &mut out), CaughtUp::Adopted);
        assert_eq!((m.epoch(), m.generation(), m.floor_generation()), (Epoch(12), 3, 3));
    }
}
