//! The engine's in-memory state per stream: its validated profile, its journal (M20) and
//! where that journal's flushes come from and go ([`Source`]), its policy state and its
//! runtime totals (M21).

use std::collections::HashMap;
use std::sync::Arc;

use crate::durable::{JournalDir, StreamLog};
use crate::engine::hot::{HotLimits, HotSnapshot, HotState};
use crate::engine::policy::{FailureBackoff, FineTokens, LagHysteresis, RestrictedBucket, TouchMode, WalGcPacer};
use crate::fanout::wire::JournalShape;
use crate::journal::{wall_ms, FlushObserver, Journal, JournalConfig, JournalOptions, JournalState};
use crate::processor::tuples::TupleMemory;
use crate::spec::{StateProtocolProfile, TouchConfig};

/// Where a stream's journal gets its flushes, and where they go: one source per stream, set
/// when its runtime is made (by the engine's fan-out role, [`crate::engine::fanout`]).
pub enum Source {
    /// The engine's own batches touch it.
    Local,
    /// As `Local`, and every flush is published (a writer's): the hook for a journal of the
    /// stream that runs with a config.
    Published(Publish),
    /// A mirror of a writer's journal (an edge's): it takes the writer's flushes, never a
    /// touch, and beside it is the writer's view of the stream from its last beat.
    Mirror(MirrorInfo),
}

/// Makes the observer that publishes the flushes of a stream's journal, given its config.
pub type Publish = Arc<dyn Fn(&JournalConfig) -> FlushObserver + Send + Sync>;

/// The writer's view of a stream, as an edge last heard it in a beat, beyond what the stream's
/// runtime holds for any stream (its touch mode, processed-through and lag, which the beat
/// sets there).
#[derive(Clone, Debug, Default)]
pub struct MirrorInfo {
    pub stream_epoch: i64,
    pub active_templates: i64,
    /// Active template id → entity.
    pub templates: HashMap<String, String>,
}

impl MirrorInfo {
    /// The entities of templates `ids` (sorted, once each); ids the writer did not list have
    /// none.
    pub fn entities(&self, ids: &[String]) -> Vec<String> {
        let mut out: Vec<String> = ids.iter().filter_map(|id| self.templates.get(id.trim()).cloned()).collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Counters since the engine opened (M15, M21; the reference's `StreamRuntimeTotals`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RuntimeTotals {
    pub scan_rows: f64,
    pub scan_batches: f64,
    pub scanned_but_emitted0_batches: f64,
    pub processed_through_delta: f64,
    pub touches_emitted: f64,
    pub touches_table: f64,
    pub touches_template: f64,
    pub fine_touches_dropped_due_to_budget: f64,
    pub fine_touches_skipped_cold_template: f64,
    pub fine_touches_skipped_cold_key: f64,
    pub fine_touches_skipped_template_bucket: f64,
    pub wait_touched: f64,
    pub wait_timeout: f64,
    pub wait_stale: f64,
    /// Ours: catch-all and template-key touches added so that no invalidation is lost.
    pub compensation_touches: f64,
    /// Ours: batches cut short to stay within the fine budget instead of dropping touches.
    pub batches_split_for_budget: f64,
}

/// Everything the engine keeps about one stream with a state-protocol profile.
pub struct StreamRt {
    pub profile: StateProtocolProfile,
    pub journal: Option<Journal>,
    pub hot: Option<HotState>,
    pub lag: LagHysteresis,
    pub tokens: Option<FineTokens>,
    pub restricted: RestrictedBucket,
    pub backoff: FailureBackoff,
    pub gc: WalGcPacer,
    pub totals: RuntimeTotals,
    pub touch_mode: Option<TouchMode>,
    pub lag_source_offsets: i64,
    pub zero_row_streak: u32,
    pub last_template_gc_ms: i64,
    /// The in-memory checkpoint; `None` until read from `stream_touch_state`.
    pub processed_through: Option<i64>,
    /// `created_at_ms` of the stream the checkpoint and the row memory belong to (see
    /// [`StreamRt::adopt_incarnation`]).
    pub incarnation: Option<i64>,
    /// Which adoption of a profile (counted engine-wide, an unchanged profile included) this
    /// is: a batch that found its stream gone removes the runtime only if no profile was
    /// adopted since it began (the stream may have been created again and configured).
    pub profile_seq: u64,
    /// When the checkpoint was last written, and one reached since and not written yet.
    pub checkpoint_written_ms: i64,
    pub checkpoint_unwritten: Option<i64>,
    /// A batch for this stream is running.
    pub busy: bool,
    /// An activation waits to hold the stream ([`crate::engine::Inner::hold_stream`]): no
    /// new batch starts.
    pub hold_wanted: bool,
    /// Fine touches per row seen lately, to size batches within the fine budget.
    pub fine_per_row: f64,
    /// The tuples the stream's rows were last seen in (complete mode, B5).
    pub tuples: TupleMemory,
    /// Where the journal's flushes come from and go.
    pub source: Source,
    /// Where a new journal of the stream is kept across restarts, and the stream's name.
    pub(crate) keep: Option<(JournalDir, String)>,
    /// The journal's kept files ([`crate::durable`]), while they are kept.
    pub kept: Option<StreamLog>,
    /// Flushes taken up from the kept log when the engine opened (0 for a new journal).
    pub replayed_flushes: u64,
    /// Until then (wall ms), batches run fine whatever the hot interest: the journal was kept
    /// across a restart and its clients are coming back ([`crate::engine::keep`]).
    pub resume_fine_until_ms: i64,
    /// Those flushes, until a writer has published them again ([`crate::engine::keep`]).
    pub republish: Vec<crate::journal::FlushRecord>,
    /// The last checkpoint written short of the one reached, because the journal's flushes
    /// covered no further ([`StreamRt::kept_covered_through`]).
    pub checkpoint_capped_at: i64,
    /// When the stream was first notified of rows no batch has processed yet (wall ms): an
    /// idle stream's batch waits until IDLE_DEFER_MS after it (see `Inner::tick`).
    pub dirty_since_ms: Option<i64>,
}

/// The options of a stream's journal, from `touch.memory` (M20); the hot-interest fields of
/// `touch.memory` (M19) are not among them.
pub fn journal_options(cfg: &TouchConfig) -> JournalOptions {
    let m = &cfg.memory;
    JournalOptions {
        bucket_ms: m.bucket_ms,
        filter_pow2: m.filter_pow2,
        k: m.k,
        pending_max_keys: m.pending_max_keys,
        key_index_max_keys: m.key_index_max_keys,
        ..JournalOptions::default()
    }
}

/// The shape of the journal a stream with `cfg` runs with: a mirror's must be its writer's.
pub fn journal_shape(cfg: &TouchConfig) -> JournalShape {
    JournalShape::of(&JournalConfig::from_options(&journal_options(cfg)))
}

impl StreamRt {
    pub fn new(profile: StateProtocolProfile, source: Source) -> StreamRt {
        StreamRt {
            profile,
            source,
            journal: None,
            hot: None,
            lag: LagHysteresis::default(),
            tokens: None,
            restricted: RestrictedBucket::default(),
            backoff: FailureBackoff::default(),
            gc: WalGcPacer::default(),
            totals: RuntimeTotals::default(),
            touch_mode: None,
            lag_source_offsets: 0,
            zero_row_streak: 0,
            last_template_gc_ms: 0,
            processed_through: None,
            incarnation: None,
            profile_seq: 0,
            checkpoint_written_ms: 0,
            checkpoint_unwritten: None,
            busy: false,
            hold_wanted: false,
            fine_per_row: 0.0,
            tuples: TupleMemory::default(),
            keep: None,
            kept: None,
            replayed_flushes: 0,
            resume_fine_until_ms: 0,
            republish: Vec::new(),
            checkpoint_capped_at: -1,
            dirty_since_ms: None,
        }
    }

    /// Makes the checkpoint and what is remembered of rows belong to the stream as a batch
    /// reads it: created at `created_at_ms`, `next_offset` its next offset, `stored_through`
    /// the checkpoint in `stream_touch_state`. A stream deleted and created again under the
    /// same name is another stream whose offsets restart at 0: when the creation time differs,
    /// or the checkpoint is past the stream's end while the stored one is not, the old
    /// checkpoint (with a write still held back), the rows' tuples and the WAL GC pacing are
    /// dropped, and the batch starts from the stored checkpoint. Returns whether they were.
    pub fn adopt_incarnation(&mut self, created_at_ms: i64, next_offset: i64, stored_through: Option<i64>) -> bool {
        let recreated = self.incarnation.is_some_and(|c| c != created_at_ms)
            || (self.processed_through.is_some_and(|p| p >= next_offset)
                && stored_through.is_none_or(|s| s < next_offset));
        if recreated {
            self.processed_through = None;
            self.checkpoint_unwritten = None;
            self.tuples = TupleMemory::default();
            self.gc = WalGcPacer::default();
        }
        self.incarnation = Some(created_at_ms);
        recreated
    }

    /// The enabled touch config, if any (C6).
    pub fn touch(&self) -> Option<&TouchConfig> {
        self.profile.enabled_touch()
    }

    /// M20: the stream's journal, created on first use from `touch.memory` (B14: its filter is
    /// allocated only when first touched). Returns whether it was created now. A mirror's is
    /// made with the shape `cfg` gives its writer's journal, for the writer's flushes to reach.
    pub fn journal(&mut self, cfg: &TouchConfig) -> (&Journal, bool) {
        let created = self.journal.is_none();
        if created && self.is_mirror() {
            self.mirror(journal_shape(cfg));
        } else if created {
            let options = journal_options(cfg);
            let config = JournalConfig::from_options(&options);
            let mut state = JournalState::new(config, crate::journal::Epoch::random());
            state.set_epoch_started_ms(wall_ms());
            if let Some((dir, name)) = &self.keep {
                let log = dir.start(name, self.incarnation, &mut state);
                state.set_log(Some(Box::new(log.clone())));
                self.kept = Some(log);
            }
            self.replayed_flushes = 0;
            self.install(state);
        }
        (self.journal.as_ref().expect("journal"), created)
    }

    /// Makes `state` the stream's journal, published to edges at a writer.
    pub fn install(&mut self, state: JournalState) {
        let config = *state.config();
        let journal = Journal::from_state(state, None);
        if let Source::Published(publish) = &self.source {
            journal.set_observer(Some(publish(&config)));
        }
        self.journal = Some(journal);
    }

    /// Whether the journal is a mirror of a writer's.
    pub fn is_mirror(&self) -> bool {
        matches!(self.source, Source::Mirror(_))
    }

    /// The writer's view of the stream, for a mirror.
    pub fn mirror_info(&self) -> Option<&MirrorInfo> {
        match &self.source {
            Source::Mirror(info) => Some(info),
            _ => None,
        }
    }

    pub fn mirror_info_mut(&mut self) -> Option<&mut MirrorInfo> {
        match &mut self.source {
            Source::Mirror(info) => Some(info),
            _ => None,
        }
    }

    /// A mirror's journal, of its writer's `shape`: the one it has, or a new one when it has
    /// none or one of another shape (the writer's journal was made anew with other options).
    /// The journal replaced is returned: stopping it answers its waiters, which must be done
    /// outside the engine's lock.
    pub fn mirror(&mut self, shape: JournalShape) -> (Journal, Option<Journal>) {
        let options = shape.options();
        let config = JournalConfig::from_options(&options);
        match &self.journal {
            Some(j) if j.read(|s| *s.config()) == config => (j.clone(), None),
            _ => {
                let journal = Journal::new(options);
                (journal.clone(), self.journal.replace(journal))
            }
        }
    }

    /// How far the stored checkpoint may go: with a kept journal, the last row whose touches
    /// its files hold (a restart processes the rows after it again, so none is lost); with
    /// none, anywhere.
    pub fn kept_covered_through(&self) -> i64 {
        match (&self.kept, &self.journal) {
            (Some(_), Some(j)) => j.read(|s| s.logged_through()),
            _ => i64::MAX,
        }
    }

    /// Forgets the stream's kept journal (its journal is replaced, or the stream is gone).
    pub fn forget_kept(&mut self) {
        if let Some(kept) = self.kept.take() {
            kept.remove();
        }
    }

    /// M19 snapshot (after a sweep that may drop an empty state).
    pub fn hot_snapshot(&mut self, limits: &HotLimits, now_ms: i64) -> HotSnapshot {
        match &mut self.hot {
            Some(h) => {
                if h.sweep(limits, now_ms, false) {
                    h.snapshot()
                } else {
                    self.hot = None;
                    HotSnapshot::empty()
                }
            }
            None => HotSnapshot::empty(),
        }
    }

    /// M21: before any batch, `coarseOnly` if the lag flag is set, else `fine`.
    pub fn runtime_touch_mode(&self) -> TouchMode {
        self.touch_mode.unwrap_or(if self.lag.suppressed { TouchMode::CoarseOnly } else { TouchMode::Fine })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_incarnation_drops_the_checkpoint_and_the_row_memory() {
        let mut rt = StreamRt::new(StateProtocolProfile { touch: None }, Source::Local);
        assert!(!rt.adopt_incarnation(100, 0, None), "the first stream seen");
        rt.processed_through = Some(4);
        rt.checkpoint_unwritten = Some(4);
        rt.gc.last_through = 3;
        assert!(!rt.adopt_incarnation(100, 5, Some(2)), "the same stream");
        assert_eq!(rt.processed_through, Some(4));
        // Another creation time: another stream, whatever its length.
        assert!(rt.adopt_incarnation(101, 50, Some(-1)));
        assert_eq!((rt.processed_through, rt.checkpoint_unwritten, rt.gc.last_through), (None, None, -1));
        assert_eq!(rt.incarnation, Some(101));
        // The same creation time but shorter than the checkpoint: created again in the same
        // millisecond.
        rt.processed_through = Some(9);
        assert!(rt.adopt_incarnation(101, 3, Some(-1)));
        assert_eq!(rt.processed_through, None);
        // A stored checkpoint past the end as well is no restart (and must not loop).
        rt.processed_through = Some(9);
        assert!(!rt.adopt_incarnation(101, 3, Some(9)));
        assert_eq!(rt.processed_through, Some(9));
    }
}
