//! The processing loop (M1, M2) and one batch of one stream (M3–M15), plus the upkeep each
//! safety-net tick runs (M17 base WAL GC, M18 templates) and `meta(settle)` polling.
//!
//! Where this differs from the reference it is so that no invalidation is lost
//! (deviations.md): fine touches are paced instead of dropped (B1), every change's fine keys
//! are delivered to the journal whether or not someone waits for them yet (B4), coarsened
//! batches also touch the catch-all key untemplated waiters listen to (B2), restricted batches
//! are not deduplicated against wall-clock buckets (B3), the coalesce window follows the lag
//! left after the batch (B10) and the checkpoint only moves forward (B24).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::hot::hot_limits;
use crate::engine::policy::{adaptive_coalesce_ms, FineTokens, TouchMode};
use crate::engine::records::{BatchRecord, HotCounts};
use crate::engine::wait::catch_all_key_id;
use crate::engine::{profile, templates, Inner};
use crate::error::{Error, Result};
use crate::journal::{wall_ms, Touch as JournalTouch};
use crate::processor::source::{read_active_templates, read_batch_rows};
use crate::processor::{
    process_row_refs_tracked, Granularity, Mode, ProcessRequest, ProcessResult, TouchKind, TouchSettings,
};
use crate::spec::TouchConfig;
use crate::store::{blocking, STREAM_FLAG_DELETED};

/// How often `meta(settle)` requests are re-checked.
pub(crate) const SETTLE_POLL: Duration = Duration::from_millis(2);
/// The least time between two checkpoint writes of a stream (see `Inner::set_checkpoint`).
const CHECKPOINT_PERSIST_MS: i64 = 100;

/// How long the loop leaves an idle stream's rows unprocessed (see `Inner::tick`): a batch per
/// append costs two reader round trips and a wake of every thread involved, which at 10,000
/// rows/s in 50-row appends cost more than the rows' processing (issue 26). Half the default
/// coalesce window of an idle journal, which holds its touches that long anyway.
const IDLE_DEFER_MS: i64 = 50;

/// How long whoever waits for a stream's running batch to end (`tick_now`, an activation's
/// [`Inner::hold_stream`]) sleeps between looks.
pub(crate) const BUSY_POLL: Duration = Duration::from_millis(1);

/// What [`Inner::try_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batch {
    /// Another batch of the stream is running; nothing was done.
    Busy,
    /// A batch ran and rows remain after it.
    RowsRemain,
    /// The stream has no rows left to process (a batch may have run).
    CaughtUp,
}

/// What a processing pass on demand did ([`Inner::tick_now`]).
#[derive(Debug, Default, Clone)]
pub struct TickReport {
    /// Touch-enabled streams looked at.
    pub streams: usize,
    /// Batches run (a stream with nothing new counts one).
    pub batches: usize,
    /// Streams whose batch failed, with the error.
    pub failed: Vec<(String, Error)>,
}

/// What one batch decided, before it ran.
#[derive(Clone)]
struct BatchPlan {
    granularity: Granularity,
    budget: Option<f64>,
    grant: u64,
    mode: TouchMode,
    /// Waiters now, or keys and templates still in their grace period (M19): the coalesce
    /// window stays short across the moment a burst of woken waiters has not re-registered.
    recent_interest: bool,
    max_rows: usize,
    /// For the batch's record: the hot state it was planned with, whether the lag guard
    /// restricted fine touches (M5) and whether the fine tokens granted less than wanted (M11).
    hot: HotCounts,
    suppressed_for_lag: bool,
    token_limited: bool,
}

impl Inner {
    /// The loop thread: waits for a dirty stream, a settle to check or the interval, then runs
    /// a tick. Returns when the engine stops.
    pub(crate) fn run_loop(self: &Arc<Self>) {
        let interval = (self.opts.check_interval_ms > 0).then(|| Duration::from_millis(self.opts.check_interval_ms));
        let mut last_full = Instant::now();
        let mut first = true;
        loop {
            {
                let (settles, deferred_until) = {
                    let st = self.state.lock();
                    (!st.settles.is_empty(), st.deferred_until)
                };
                let mut sig = self.signal.lock();
                while !sig.pending && !sig.stop {
                    let until_full = interval.map(|i| i.saturating_sub(last_full.elapsed()));
                    let wait = match (settles, until_full) {
                        (true, Some(u)) => u.min(SETTLE_POLL),
                        (true, None) => SETTLE_POLL,
                        (false, Some(u)) => u,
                        (false, None) => Duration::from_secs(3600),
                    };
                    let wait = match deferred_until {
                        Some(d) => wait.min(d.saturating_duration_since(Instant::now())),
                        None => wait,
                    };
                    if wait.is_zero() || self.wake.wait_for(&mut sig, wait).timed_out() {
                        break;
                    }
                }
                if sig.stop {
                    return;
                }
                sig.pending = false;
            }
            let full = first || interval.is_some_and(|i| last_full.elapsed() >= i);
            if full {
                last_full = Instant::now();
                first = false;
            }
            let more = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.tick(full))).unwrap_or(false);
            self.check_settles();
            if more {
                self.poke();
            }
        }
    }

    /// M2: picks up to `workers` streams (dirty first, streams with waiters first, round
    /// robin), processes them concurrently, then runs upkeep on full ticks. Returns whether
    /// work remains.
    fn tick(self: &Arc<Self>, full: bool) -> bool {
        let now = wall_ms();
        if self.opts.profile_poll_ms > 0 {
            self.poll_profiles(now);
        }
        let selected: Vec<String> = {
            let mut st = self.state.lock();
            let dirty = std::mem::take(&mut st.dirty);
            st.dirty_set.clear();
            let mut enabled: Vec<String> =
                st.streams.iter().filter(|(_, rt)| rt.touch().is_some()).map(|(n, _)| n.clone()).collect();
            enabled.sort();
            let mut ordered: Vec<String> = dirty.iter().filter(|d| enabled.contains(d)).cloned().collect();
            // Idle streams wait: a dirty stream nobody listens to (no waiter, nothing hot, no
            // settle) is processed IDLE_DEFER_MS after its first unprocessed append, in one
            // batch, instead of one batch per append. Its touches reach the journal later; a
            // wait that starts meanwhile wakes the loop (`poke_if_deferred`) and finds them
            // processed then, so no touch is lost, only delayed while no one hears it. A full
            // tick processes every stream anyway.
            st.deferred.clear();
            st.deferred_until = None;
            if !full {
                let settling: Vec<String> = st.settles.iter().map(|s| s.stream.clone()).collect();
                let loop_now = Instant::now();
                let st = &mut *st;
                ordered.retain(|n| {
                    let Some(rt) = st.streams.get_mut(n) else { return true };
                    let since = *rt.dirty_since_ms.get_or_insert(now);
                    let age = now.saturating_sub(since).max(0);
                    if age >= IDLE_DEFER_MS || rt.busy || settling.contains(n) {
                        return true;
                    }
                    let limits = rt.touch().map(hot_limits).unwrap_or_default();
                    let hot = rt.hot_snapshot(&limits, now);
                    let listened = hot.has_any_waiters()
                        || hot.has_fine_demand()
                        || rt.journal.as_ref().is_some_and(|j| j.active_waiters() > 0);
                    if listened {
                        return true;
                    }
                    let due = loop_now + Duration::from_millis((IDLE_DEFER_MS - age) as u64);
                    st.deferred_until = Some(st.deferred_until.map_or(due, |d| d.min(due)));
                    st.deferred.insert(n.clone());
                    false
                });
            }
            if full {
                for e in &enabled {
                    if !ordered.contains(e) {
                        ordered.push(e.clone());
                    }
                }
            }
            // M2.5: streams with active waiters first, keeping their order.
            let (mut hot, cold): (Vec<String>, Vec<String>) = ordered.into_iter().partition(|n| {
                st.streams.get_mut(n).is_some_and(|rt| {
                    let limits = rt.touch().map(hot_limits).unwrap_or_default();
                    rt.hot_snapshot(&limits, now).has_any_waiters()
                })
            });
            hot.extend(cold);
            let total = hot.len();
            let mut picked = Vec::new();
            if total > 0 {
                let start = st.scan_cursor % total;
                for i in 0..total {
                    let name = &hot[(start + i) % total];
                    let rt = st.streams.get(name).expect("listed");
                    if picked.len() >= self.opts.workers.max(1) || rt.busy || rt.backoff.should_skip(now) {
                        continue;
                    }
                    picked.push(name.clone());
                }
                st.scan_cursor = (start + picked.len().max(1)) % total;
                // Dirty streams not picked stay dirty.
                for d in &dirty {
                    if !picked.contains(d) && st.streams.contains_key(d) {
                        st.mark_dirty(d);
                    }
                }
            }
            for d in dirty {
                if st.deferred.contains(&d) {
                    st.mark_dirty(&d);
                }
            }
            picked
        };
        let results: Vec<(String, Result<bool>)> = if selected.len() <= 1 {
            selected
                .into_iter()
                .map(|s| {
                    let r = crate::error::catch_panic(|| self.process_one(&s));
                    (s, r)
                })
                .collect()
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = selected
                    .into_iter()
                    .map(|s| {
                        scope.spawn(move || {
                            let r = crate::error::catch_panic(|| self.process_one(&s));
                            (s, r)
                        })
                    })
                    .collect();
                handles.into_iter().filter_map(|h| h.join().ok()).collect()
            })
        };
        let mut more = false;
        {
            let mut st = self.state.lock();
            for (name, r) in results {
                let Some(rt) = st.streams.get_mut(&name) else { continue };
                match r {
                    Ok(m) => {
                        rt.backoff.record_success();
                        // Caught up: the next append starts a new wait. Rows remain: the
                        // next batch is due at once.
                        rt.dirty_since_ms = if m { Some(0) } else { None };
                        if m {
                            st.mark_dirty(&name);
                            more = true;
                        }
                    }
                    Err(_) => {
                        // M16 (B9 fixed): the backoff grows until a success.
                        rt.backoff.record_failure(wall_ms());
                        self.records.failure(&name);
                    }
                }
            }
            more |= st.dirty.iter().any(|d| !st.deferred.contains(d));
        }
        if full {
            let _ = self.persist_checkpoints(false);
            self.upkeep(now);
        }
        more
    }

    /// With `profile_poll_ms` (a host saves the profiles): adopts the profile of notified
    /// streams the engine does not know yet, and re-reads every profile when the poll is due.
    fn poll_profiles(&self, now: i64) {
        let (unknown, due) = {
            let mut st = self.state.lock();
            let due = now - st.last_profile_poll_ms >= self.opts.profile_poll_ms as i64;
            if due {
                st.last_profile_poll_ms = now;
                st.foreign.clear();
            }
            let unknown: Vec<String> =
                st.dirty.iter().filter(|d| !st.streams.contains_key(*d) && !st.foreign.contains(*d)).cloned().collect();
            (unknown, due)
        };
        if !unknown.is_empty() && self.reload_profiles(Some(unknown.clone())).is_ok() {
            let mut st = self.state.lock();
            for u in unknown {
                if !st.streams.contains_key(&u) {
                    st.foreign.insert(u);
                }
            }
        }
        if due {
            let _ = self.reload_profiles(None);
        }
    }

    /// One batch for one stream (M3–M15). Returns whether rows remain after it.
    fn process_one(self: &Arc<Self>, name: &str) -> Result<bool> {
        Ok(self.try_batch(name)? == Batch::RowsRemain)
    }

    /// One batch for one stream, unless another batch of the stream is running.
    fn try_batch(self: &Arc<Self>, name: &str) -> Result<Batch> {
        let now = wall_ms();
        let (cfg, mem_through, profile_seq) = {
            let mut st = self.state.lock();
            let Some(rt) = st.streams.get_mut(name) else { return Ok(Batch::CaughtUp) };
            let Some(cfg) = rt.touch().cloned() else { return Ok(Batch::CaughtUp) };
            if rt.busy || rt.hold_wanted {
                return Ok(Batch::Busy);
            }
            rt.busy = true;
            (cfg, rt.processed_through, rt.profile_seq)
        };
        let result = self.process_locked(name, &cfg, mem_through, profile_seq, now);
        self.end_batch(name);
        Ok(if result? { Batch::RowsRemain } else { Batch::CaughtUp })
    }

    /// A processing pass on demand (the reference manager's `tick()`), whether or not the loop
    /// runs: re-reads the host's profiles (with `profile_poll_ms`), then runs batches of every
    /// touch-enabled stream until it has processed every row committed before the call (a
    /// batch the loop is running is waited for), then the upkeep of a full tick (checkpoints
    /// written, M17, M18). Every touch of those rows is in its journal when this returns. A
    /// stream whose batch fails is counted in `failed` and left to the loop's backoff (M16).
    pub(crate) fn tick_now(self: &Arc<Self>) -> Result<TickReport> {
        if self.opts.profile_poll_ms > 0 {
            self.reload_profiles(None)?;
        }
        let mut streams: Vec<String> = {
            // Every stream is processed up to now, so none stays dirty (a later append marks
            // its stream again).
            let mut st = self.state.lock();
            st.dirty.clear();
            st.dirty_set.clear();
            st.streams.iter().filter(|(_, rt)| rt.touch().is_some()).map(|(n, _)| n.clone()).collect()
        };
        streams.sort();
        // What "committed before the call" means: each stream's last offset now. Rows appended
        // while the pass runs are left to the loop (or the next tick), so a writer faster than
        // processing cannot keep the pass from ending.
        let targets: Vec<Option<i64>> = {
            let names = streams.clone();
            blocking(|r| {
                self.store.query(
                    move |c| {
                        names
                            .iter()
                            .map(|n| Ok(crate::store::query_stream(c, n)?.map(|row| row.next_offset - 1)))
                            .collect()
                    },
                    r,
                )
            })?
        };
        let mut report = TickReport { streams: streams.len(), ..TickReport::default() };
        for (name, target) in streams.iter().zip(targets) {
            // At least one batch of ours runs (it adopts a stream created again under the
            // name, whose offsets restart below the checkpoint in memory).
            let mut ran = false;
            loop {
                if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(Error::Closed("TouchEngine"));
                }
                let through = self.state.lock().streams.get(name).and_then(|rt| rt.processed_through);
                if ran && matches!((target, through), (Some(t), Some(p)) if p >= t) {
                    break;
                }
                match crate::error::catch_panic(|| self.try_batch(name)) {
                    Ok(Batch::Busy) => std::thread::sleep(BUSY_POLL),
                    Ok(done) => {
                        if let Some(rt) = self.state.lock().streams.get_mut(name) {
                            rt.backoff.record_success();
                        }
                        report.batches += 1;
                        ran = true;
                        if done == Batch::CaughtUp {
                            break;
                        }
                    }
                    Err(e) => {
                        if let Some(rt) = self.state.lock().streams.get_mut(name) {
                            rt.backoff.record_failure(wall_ms());
                        }
                        self.records.failure(name);
                        report.failed.push((name.clone(), e));
                        break;
                    }
                }
            }
        }
        self.persist_checkpoints(true)?;
        self.upkeep(wall_ms());
        self.check_settles();
        Ok(report)
    }

    /// The stream is no longer busy.
    pub(crate) fn end_batch(&self, name: &str) {
        if let Some(rt) = self.state.lock().streams.get_mut(name) {
            rt.busy = false;
        }
    }

    fn process_locked(
        self: &Arc<Self>,
        name: &str,
        cfg: &TouchConfig,
        mem_through: Option<i64>,
        profile_seq: u64,
        now: i64,
    ) -> Result<bool> {
        if self.is_edge() {
            // An edge's streams live in the writer's file, not in its own store.
            return Ok(false);
        }
        let n = name.to_string();
        let (row, state) = blocking(|r| {
            self.store.query(move |c| Ok((crate::store::query_stream(c, &n)?, profile::get_touch_state(c, &n)?)), r)
        })?;
        // M3: the stream is gone.
        let Some(row) = row.filter(|r| r.stream_flags & STREAM_FLAG_DELETED == 0) else {
            self.drop_gone_stream(name, profile_seq);
            return Ok(false);
        };
        let recreated = self.state.lock().streams.get_mut(name).is_some_and(|rt| {
            let recreated =
                rt.adopt_incarnation(row.created_at_ms, row.next_offset, state.map(|s| s.processed_through));
            if let Some(kept) = &rt.kept {
                kept.set_incarnation(row.created_at_ms);
            }
            recreated
        });
        if recreated {
            // The old stream's profile went with it: the new one is processed (from its own
            // checkpoint) under the profile stored for it, if any, from the next batch on. The
            // journal stays, as the reference's does: waits parked on the name hear the new
            // stream's changes.
            self.reload_profiles(Some(vec![name.to_string()]))?;
            return Ok(true);
        }
        let through = match mem_through.or(state.map(|s| s.processed_through)) {
            Some(t) => t,
            None => {
                // A touch-enabled stream without a state (M22): start at the tail.
                let n = name.to_string();
                blocking(|r| self.store.write(move |c| profile::ensure_touch_state(c, &n), r))?;
                row.next_offset - 1
            }
        };
        let next = row.next_offset;
        if next <= 0 || through + 1 > next - 1 {
            self.set_checkpoint(name, through, None);
            return Ok(false);
        }
        let (from, to) = (through + 1, next - 1);
        let lag = to - through;
        let plan = self.plan_batch(name, cfg, lag, now);

        // Rows and templates in one read.
        let n = name.to_string();
        let read_req = self.request(name, cfg, from, to, &plan, plan.max_rows);
        let (templates_rows, mut rows) = blocking(|r| {
            self.store.query(move |c| Ok((read_active_templates(c, &n)?, read_batch_rows(c, &read_req)?)), r)
        })?;
        if rows.is_empty() {
            // Nothing stored in the range (a gap, or rows removed): skip to the first row.
            let n = name.to_string();
            let first: Option<i64> = blocking(|r| {
                self.store.query(
                    move |c| {
                        Ok(c.query_row(
                            "SELECT MIN(offset) FROM wal WHERE stream=?1 AND offset>=?2 AND offset<=?3",
                            (&n, from, to),
                            |r| r.get(0),
                        )?)
                    },
                    r,
                )
            })?;
            let new_through = first.map(|f| f - 1).unwrap_or(to);
            if let Some(rt) = self.state.lock().streams.get_mut(name) {
                rt.zero_row_streak += 1;
                // No row, no touch: the journal covers them as soon as what it holds is flushed.
                if let Some(j) = &rt.journal {
                    j.with_state(|s| {
                        s.note_from(through);
                        s.note_through(new_through)
                    });
                }
            }
            self.set_checkpoint(name, new_through, Some(through));
            return Ok(new_through < to);
        }

        // The tuples the stream's rows were last seen in (B5 without the template key): taken
        // while the batch runs (the stream is busy, so no other batch reads it), given back with
        // what the kept batch saw. On an error it is lost, which is safe: a row not remembered
        // falls back to the template key.
        let memory =
            self.state.lock().streams.get_mut(name).map(|rt| std::mem::take(&mut rt.tuples)).unwrap_or_default();

        // B1: run the batch within the fine budget, cutting it short rather than dropping.
        let started = Instant::now();
        let mut result;
        let mut split = false;
        loop {
            let req = self.request(name, cfg, from, to, &plan, rows.len());
            result = process_row_refs_tracked(&req, rows.len(), rows.iter(), &templates_rows, &memory)?;
            if !(plan.granularity == Granularity::Key && result.stats.fine_touches_suppressed_due_to_budget) {
                break;
            }
            if rows.len() > 1 {
                let keep = rows.len() / 2;
                rows.truncate(keep);
                split = true;
                continue;
            }
            // One row alone exceeds the budget: coarsen just that row to its templates' keys
            // (which templated waiters hear) and the catch-all key (which the others hear).
            let mut coarse = plan.clone();
            coarse.granularity = Granularity::Template;
            coarse.budget = None;
            let req = self.request(name, cfg, from, to, &coarse, 1);
            result = process_row_refs_tracked(&req, rows.len(), rows.iter(), &templates_rows, &memory)?;
            result.stats.fine_touches_suppressed_due_to_budget = true;
            break;
        }
        let batch_ms = started.elapsed().as_secs_f64() * 1000.0;
        let mut memory = memory;
        if let Some(changes) = result.tuples.take() {
            memory.apply(changes);
        }
        if let Some(rt) = self.state.lock().streams.get_mut(name) {
            rt.tuples = memory;
        }
        let processed_through = result.processed_through;
        let remaining = (to - processed_through).max(0);
        let coarsened = plan.granularity == Granularity::Template || result.stats.fine_touches_suppressed_due_to_budget;

        // Feed the journal (M14), after setting the coalesce window for the lag that remains
        // (M6 with B10 fixed).
        let (journal, catch_all_needed) = {
            let mut st = self.state.lock();
            let rt = st.streams.get_mut(name).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
            if let Some(tokens) = &mut rt.tokens {
                // M11: give back what the batch did not use.
                tokens.refund(plan.grant, result.stats.template_touches_emitted.max(0.0) as u64, cfg.fine_burst_tokens);
            }
            let (j, created) = rt.journal(cfg);
            let j = j.clone();
            if created {
                st.journals_created += 1;
            }
            let uncovered = result.stats.uncovered_changes > 0.0 || result.stats.control_records > 0.0;
            (j, (coarsened && !result.touches.is_empty()) || uncovered)
        };
        journal.set_coalesce_ms_sooner(adaptive_coalesce_ms(cfg.memory.bucket_ms, remaining, plan.recent_interest));
        let mut compensation = 0.0;
        let touches = journal_touches(&result);
        let catch_all = catch_all_needed.then(|| JournalTouch {
            key_id: catch_all_key_id(),
            source_offset: Some(processed_through),
            routing_key: None,
        });
        if catch_all.is_some() {
            compensation += 1.0;
        }
        // A control record (reset, snapshot) may change any query: touch every template key
        // and every template entity's table key as well.
        let mut reset_touches = Vec::new();
        if result.stats.control_records > 0.0 {
            for t in &templates_rows {
                let Some(bits) = crate::keys::template_bits(&t.template_id) else { continue };
                reset_touches.push(JournalTouch {
                    key_id: crate::keys::key_id(crate::keys::template_key(bits)),
                    source_offset: Some(processed_through),
                    routing_key: None,
                });
                reset_touches.push(JournalTouch {
                    key_id: crate::keys::key_id(crate::keys::table_key(crate::jscompat::string::trim(
                        t.entity.as_bytes(),
                    ))),
                    source_offset: Some(processed_through),
                    routing_key: None,
                });
            }
            compensation += reset_touches.len() as f64;
        }
        journal.touch_many_through(
            touches.into_iter().chain(catch_all).chain(reset_touches),
            through,
            processed_through,
        );

        // Totals (M15), mode, checkpoint.
        {
            let mut st = self.state.lock();
            if let Some(rt) = st.streams.get_mut(name) {
                let t = &mut rt.totals;
                t.scan_batches += 1.0;
                t.scan_rows += result.stats.rows_read;
                if result.stats.rows_read > 0.0 && result.touches.is_empty() {
                    t.scanned_but_emitted0_batches += 1.0;
                }
                t.processed_through_delta += (processed_through - through).max(0) as f64;
                t.touches_emitted += result.touches.len() as f64;
                t.touches_table += result.stats.table_touches_emitted;
                t.touches_template += result.stats.template_touches_emitted;
                t.fine_touches_skipped_cold_template += result.stats.fine_touches_skipped_cold_template;
                t.compensation_touches += compensation;
                t.batches_split_for_budget += f64::from(u8::from(split));
                rt.touch_mode = Some(plan.mode);
                rt.lag_source_offsets = remaining;
                rt.zero_row_streak = 0;
                if result.stats.rows_read > 0.0 {
                    let per_row = result.stats.template_touches_emitted / result.stats.rows_read;
                    rt.fine_per_row =
                        if rt.fine_per_row == 0.0 { per_row } else { 0.7 * rt.fine_per_row + 0.3 * per_row };
                }
            }
        }
        if self.records.enabled() {
            self.records.batch(batch_record(name, &plan, &result, remaining, processed_through - through, batch_ms));
        }
        self.set_checkpoint(name, processed_through, Some(through));
        Ok(processed_through < to)
    }

    /// M4–M8 as this engine applies them.
    fn plan_batch(&self, name: &str, cfg: &TouchConfig, lag: i64, now: i64) -> BatchPlan {
        let mut st = self.state.lock();
        let rt = st.streams.get_mut(name).expect("stream");
        let limits = hot_limits(cfg);
        let hot = rt.hot_snapshot(&limits, now);
        let has_waiters = hot.has_any_waiters();
        // A journal kept across a restart: its clients are coming back to wait on the keys
        // they waited on before, which no wait has made hot yet; fine touches until they are
        // back keep their wakes precise (template keys would wake every one of them).
        let fine_demand = hot.has_fine_demand() || now < rt.resume_fine_until_ms;
        let recent_interest = has_waiters || fine_demand;
        let hot_counts = HotCounts {
            hot_fine_keys: hot.hot_key_count() as u64,
            hot_templates: hot.hot_template_count() as u64,
            hot_fine_keys_active: hot.hot_key_active as u64,
            hot_fine_keys_grace: hot.hot_key_grace as u64,
            hot_templates_active: hot.hot_template_active as u64,
            hot_templates_grace: hot.hot_template_grace as u64,
            fine_waiters_active: hot.fine_waiters,
            coarse_waiters_active: hot.coarse_waiters,
            broad_fine_waiters_active: hot.broad_fine_waiters,
        };
        // B4: fine touches are computed whether or not a waiter is parked yet, so the lag
        // guard applies regardless of demand.
        let suppressed = rt.lag.update(
            lag,
            true,
            cfg.lag_degrade_fine_touches_at_source_offsets,
            cfg.lag_recover_fine_touches_at_source_offsets,
        );
        let max_rows_cfg = self.opts.max_batch_rows.max(1);
        // A batch coarsened to template keys plus the catch-all, in `mode` when waiters exist.
        let coarsened = |mode: TouchMode, suppressed_for_lag: bool, token_limited: bool| BatchPlan {
            granularity: Granularity::Template,
            budget: None,
            grant: 0,
            mode: if has_waiters { mode } else { TouchMode::Idle },
            recent_interest,
            max_rows: max_rows_cfg,
            hot: hot_counts,
            suppressed_for_lag,
            token_limited,
        };
        if !fine_demand {
            // No fine waiter, and no key or template in its grace: no fine key can be heard
            // now. The batch emits what every later wait from an older cursor hears instead,
            // as a coarsened one does: the template keys of the entities it saw (templated
            // waits merge them, W3) and the catch-all (untemplated ones listen to it, B2), at
            // a cost per template rather than per row and template. The first fine wait
            // makes its keys hot, and the batches after it are fine again (M4, with B4's
            // guarantee kept by the coarse keys).
            return coarsened(TouchMode::CoarseOnly, false, false);
        }
        if suppressed {
            return coarsened(TouchMode::Restricted, true, false);
        }
        let wanted = cfg.fine_touch_budget_per_batch.floor().max(0.0) as u64;
        let tokens = rt.tokens.get_or_insert_with(|| FineTokens::new(cfg.fine_burst_tokens, now));
        let grant = tokens.reserve(wanted, cfg.fine_tokens_per_second, cfg.fine_burst_tokens, now);
        if wanted > 0 && grant.granted == 0 {
            // Out of tokens: coarsen to template keys plus the catch-all (never drop).
            return coarsened(TouchMode::CoarseOnly, false, true);
        }
        let budget = if wanted == 0 { None } else { Some(grant.granted as f64) };
        // Size the batch so its fine touches should fit the budget.
        let max_rows = match budget {
            Some(b) if rt.fine_per_row > 0.0 => ((b / rt.fine_per_row).floor() as usize).clamp(1, max_rows_cfg),
            _ => max_rows_cfg,
        };
        BatchPlan {
            granularity: Granularity::Key,
            budget,
            grant: grant.granted,
            mode: if has_waiters { TouchMode::Fine } else { TouchMode::Idle },
            recent_interest,
            max_rows,
            hot: hot_counts,
            suppressed_for_lag: false,
            token_limited: grant.granted < wanted,
        }
    }

    fn request(
        &self,
        name: &str,
        cfg: &TouchConfig,
        from: i64,
        to: i64,
        plan: &BatchPlan,
        max_rows: usize,
    ) -> ProcessRequest {
        let mut settings = TouchSettings::from_config(cfg).unwrap_or(TouchSettings {
            coarse_interval_ms: Some(cfg.coarse_interval_ms),
            touch_coalesce_window_ms: Some(cfg.touch_coalesce_window_ms),
            on_missing_before: cfg.on_missing_before,
            fine_touch_budget_per_batch: None,
        });
        settings.fine_touch_budget_per_batch = None;
        let mut req = ProcessRequest::new(name, from, to, settings);
        req.max_rows = max_rows.max(1) as f64;
        req.max_bytes = self.opts.max_batch_bytes.max(1) as f64;
        req.emit_fine_touches = true;
        req.fine_touch_budget = plan.budget;
        req.fine_granularity = plan.granularity;
        req.processing_mode =
            if plan.granularity == Granularity::Template { Mode::HotTemplatesOnly } else { Mode::Full };
        req.complete = true;
        req
    }

    /// Moves the in-memory checkpoint forward and persists it (B24: forward only).
    ///
    /// Writes are paced: at most one per stream per [`CHECKPOINT_PERSIST_MS`]; a checkpoint
    /// reached in between waits for the next tick ([`Inner::persist_checkpoints`]). Each write
    /// is a durable commit, and inside a host whose own writes share the file (the swapped
    /// server) a commit per batch kept its appends waiting for the write lock. A checkpoint
    /// written late only means a restart processes a few rows again.
    fn set_checkpoint(&self, name: &str, through: i64, previous: Option<i64>) {
        let now = wall_ms();
        let (write, incarnation) = {
            let mut st = self.state.lock();
            let Some(rt) = st.streams.get_mut(name) else { return };
            if rt.processed_through.is_none_or(|p| through > p) {
                rt.processed_through = Some(through);
            }
            if previous.is_none_or(|p| through <= p) {
                return;
            }
            if now - rt.checkpoint_written_ms < CHECKPOINT_PERSIST_MS || rt.kept_covered_through() < through {
                // Paced, or (journals kept) rows whose touches are not flushed yet: a restart
                // must process them again, so the stored checkpoint waits for the flush.
                rt.checkpoint_unwritten = Some(rt.checkpoint_unwritten.map_or(through, |u| u.max(through)));
                return;
            }
            rt.checkpoint_written_ms = now;
            rt.checkpoint_unwritten = None;
            (through, rt.incarnation)
        };
        let n = name.to_string();
        self.store
            .write(move |c| profile::advance_touch_state(c, &n, write, incarnation).map(|_| ()), Box::new(|_| {}));
    }

    /// Writes the checkpoints [`Inner::set_checkpoint`] held back, in one commit; `Ok(())` once
    /// it is durable when `wait` is set.
    pub(crate) fn persist_checkpoints(&self, wait: bool) -> Result<()> {
        let now = wall_ms();
        let due: Vec<(String, i64, Option<i64>)> = {
            let mut st = self.state.lock();
            st.streams
                .iter_mut()
                .filter_map(|(name, rt)| {
                    let through = rt.checkpoint_unwritten.take()?;
                    // With journals kept, only as far as the journal's flushes cover; the rest
                    // waits for a later pass.
                    let covered = rt.kept_covered_through();
                    if covered < through {
                        rt.checkpoint_unwritten = Some(through);
                        if covered <= rt.checkpoint_capped_at {
                            return None;
                        }
                        rt.checkpoint_capped_at = covered;
                        return Some((name.clone(), covered, rt.incarnation));
                    }
                    rt.checkpoint_written_ms = now;
                    Some((name.clone(), through, rt.incarnation))
                })
                .collect()
        };
        if due.is_empty() {
            return Ok(());
        }
        // One write job: the writer runs it in one transaction.
        let job = move |c: &rusqlite::Connection| {
            for (n, through, incarnation) in &due {
                profile::advance_touch_state(c, n, *through, *incarnation)?;
            }
            Ok(())
        };
        if wait {
            blocking(|r| self.store.write(job, r))
        } else {
            self.store.write(job, Box::new(|_| {}));
            Ok(())
        }
    }

    /// M17 and M18.
    fn upkeep(self: &Arc<Self>, now: i64) {
        struct Due {
            name: String,
            gc_through: Option<i64>,
            incarnation: Option<i64>,
            template_gc: bool,
        }
        let mut min_persist = f64::INFINITY;
        let due: Vec<Due> = {
            let mut st = self.state.lock();
            st.streams
                .iter_mut()
                .filter_map(|(name, rt)| {
                    let cfg = rt.touch()?.clone();
                    min_persist = min_persist.min(cfg.templates.last_seen_persist_interval_ms);
                    let template_gc = (now - rt.last_template_gc_ms) as f64 >= cfg.templates.gc_interval_ms;
                    if template_gc {
                        rt.last_template_gc_ms = now;
                    }
                    let gc_through = rt.processed_through.and_then(|p| {
                        // uploaded_through is read in the job; plan with the checkpoint only.
                        rt.gc.plan(p, i64::MAX, now, self.opts.wal_gc_interval_ms, self.opts.wal_gc_chunk_offsets)
                    });
                    Some(Due { name: name.clone(), gc_through, incarnation: rt.incarnation, template_gc })
                })
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let inner = self.clone();
        let flush_interval = min_persist;
        /// A stream's GC target reached, with what it deleted and how long it took (ms).
        type Gc = Option<(i64, crate::store::WalGcOutcome, f64)>;
        type Upkept = Vec<(String, Gc, Vec<templates::LifecycleEvent>)>;
        let events: Result<Upkept> = blocking(|r| {
            self.store.write(
                move |conn| {
                    if flush_interval.is_finite() {
                        inner.registry.flush_last_seen(conn, now, flush_interval)?;
                    }
                    let mut out = Vec::new();
                    for d in &due {
                        let mut gc_done = None;
                        if let Some(target) = d.gc_through {
                            // Not on a stream created again under the name since the checkpoint.
                            let uploaded: i64 = conn
                                .query_row(
                                    "SELECT uploaded_through FROM streams WHERE stream=?1 \
                                     AND (?2 IS NULL OR created_at_ms=?2)",
                                    rusqlite::params![&d.name, d.incarnation],
                                    |r| r.get(0),
                                )
                                .unwrap_or(-1);
                            let through = target.min(uploaded);
                            if through >= 0 {
                                let started = Instant::now();
                                let deleted = crate::store::delete_wal_through(conn, &d.name, through, None)?;
                                gc_done = Some((through, deleted, started.elapsed().as_secs_f64() * 1000.0));
                            }
                        }
                        let events = if d.template_gc {
                            inner.registry.gc_retire_expired(conn, &d.name, now)?
                        } else {
                            Vec::new()
                        };
                        out.push((d.name.clone(), gc_done, events));
                    }
                    Ok(out)
                },
                r,
            )
        });
        if let Ok(list) = events {
            let mut all = Vec::new();
            {
                let mut st = self.state.lock();
                for (name, gc, ev) in list {
                    if let Some((t, deleted, ms)) = gc {
                        if let Some(rt) = st.streams.get_mut(&name) {
                            rt.gc.done(t, now);
                        }
                        // M17: the reference records a deletion that removed something.
                        if deleted.deleted_rows > 0 || deleted.deleted_bytes > 0 {
                            self.records.wal_gc(&name, deleted.deleted_rows as f64, deleted.deleted_bytes as f64, ms);
                        }
                    }
                    all.extend(ev);
                }
            }
            self.count_lifecycle(&all);
        }
    }

    /// Without the loop, one thread (started here if none runs) re-checks the `meta(settle)`
    /// requests every [`SETTLE_POLL`] until none is left; `close()` answers the rest.
    pub(crate) fn poll_settles_without_loop(self: &Arc<Self>) {
        if self.settle_poller.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.clone();
        let spawned = std::thread::Builder::new().name("dt-touch-settle".into()).spawn(move || loop {
            inner.check_settles();
            if inner.state.lock().settles.is_empty() {
                inner.settle_poller.store(false, Ordering::Release);
                // A request added since the check found no poller running: take it up.
                if inner.state.lock().settles.is_empty() || inner.settle_poller.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            std::thread::sleep(SETTLE_POLL);
        });
        if let Err(e) = spawned {
            self.settle_poller.store(false, Ordering::Release);
            for s in std::mem::take(&mut self.state.lock().settles) {
                (s.reply)(Err(Error::Internal(format!("cannot start the settle poller: {e}"))));
            }
        }
    }

    /// Answers `meta(settle)` requests whose stream settled or whose time ran out.
    fn check_settles(self: &Arc<Self>) {
        let pending = std::mem::take(&mut self.state.lock().settles);
        if pending.is_empty() {
            return;
        }
        let mut keep = Vec::new();
        // One view per stream per round, however many requests wait on it.
        let mut views: std::collections::HashMap<String, Result<super::TouchMetaView>> = Default::default();
        for s in pending {
            let view = match views.get(&s.stream) {
                Some(v) => v.clone(),
                None => {
                    let cfg = self.state.lock().streams.get(&s.stream).and_then(|rt| rt.touch().cloned());
                    let v = match cfg {
                        Some(cfg) => self.meta_view(&s.stream, &cfg),
                        None => Err(Error::TouchNotEnabled("touch not enabled".into())),
                    };
                    views.insert(s.stream.clone(), v.clone());
                    v
                }
            };
            match view {
                Ok(v) if !v.settled && wall_ms() < s.deadline_ms => keep.push(s),
                other => (s.reply)(other),
            }
        }
        self.state.lock().settles.extend(keep);
    }
}

/// The batch's touches as journal touches, in output order (M14).
fn journal_touches(result: &ProcessResult) -> Vec<JournalTouch> {
    result
        .touches
        .iter()
        .map(|t| JournalTouch { key_id: t.key_id, source_offset: Some(t.watermark), routing_key: t.routing_key })
        .collect()
}

/// The record of one batch (`EngineOptions::records`): what the reference's manager passes to
/// `recordProcessorBatch`, with touch counts in place of its touch array. `delta` is how far the
/// checkpoint moved, `remaining` the backlog left, `batch_ms` the time the batch took.
fn batch_record(
    name: &str,
    plan: &BatchPlan,
    result: &ProcessResult,
    remaining: i64,
    delta: i64,
    batch_ms: f64,
) -> BatchRecord {
    let s = &result.stats;
    let mut keys: rustc_hash::FxHashSet<u32> = rustc_hash::FxHashSet::default();
    keys.reserve(result.touches.len());
    let mut table = 0.0;
    for t in &result.touches {
        keys.insert(t.key_id);
        if t.kind == TouchKind::Table {
            table += 1.0;
        }
    }
    let touches = result.touches.len() as f64;
    let now = wall_ms() as f64;
    BatchRecord {
        stream: name.to_string(),
        batches: 1,
        rows_read: s.rows_read,
        changes: s.changes,
        touches_emitted: touches,
        table_touches: table,
        template_touches: touches - table,
        unique_keys: keys.len() as f64,
        lag_source_offsets: remaining,
        touch_mode: plan.mode,
        hot: plan.hot,
        // The reference's `commitLagMs`: now minus the newest row's `ts`, when one had it.
        commit_lag_ms: (s.max_source_ts_ms > 0.0).then(|| (now - s.max_source_ts_ms).max(0.0)),
        fine_touches_dropped_due_to_budget: s.fine_touches_dropped_due_to_budget.max(0.0),
        fine_touches_skipped_cold_template: s.fine_touches_skipped_cold_template.max(0.0),
        // B4 and B3: no fine key is filtered by heat, no restricted template touch deduplicated.
        fine_touches_skipped_cold_key: 0.0,
        fine_touches_skipped_template_bucket: 0.0,
        suppressed_due_to_lag_batches: u64::from(plan.suppressed_for_lag),
        suppressed_due_to_lag_ms: if plan.suppressed_for_lag { batch_ms } else { 0.0 },
        suppressed_due_to_budget_batches: u64::from(s.fine_touches_suppressed_due_to_budget || plan.token_limited),
        scanned_but_emitted0_batches: u64::from(s.rows_read > 0.0 && result.touches.is_empty()),
        processed_through_delta: delta.max(0) as f64,
    }
}
