//! One batch of one stream (M3–M15): planning it (M4–M8), reading and processing its rows,
//! feeding the stream's journal and moving its checkpoint. The loop that schedules batches is
//! [`super::process`].
//!
//! Where this differs from the reference it is so that no invalidation is lost
//! (deviations.md): fine touches are paced instead of dropped (B1), every change's fine keys
//! are delivered to the journal whether or not someone waits for them yet (B4), coarsened
//! batches also touch the catch-all key untemplated waiters listen to (B2), restricted batches
//! are not deduplicated against wall-clock buckets (B3), the coalesce window follows the lag
//! left after the batch (B10) and the checkpoint only moves forward (B24).

use std::sync::Arc;
use std::time::Instant;

use crate::engine::hot::hot_limits;
use crate::engine::policy::{adaptive_coalesce_ms, FineTokens, TouchMode};
use crate::engine::records::{BatchRecord, HotCounts};
use crate::engine::wait::catch_all_key_id;
use crate::engine::{profile, Inner};
use crate::error::{Error, Result};
use crate::journal::{wall_ms, Touch as JournalTouch};
use crate::processor::source::{read_active_templates, read_batch_rows};
use crate::processor::{
    process_row_refs_tracked, Granularity, Mode, ProcessRequest, ProcessResult, TouchKind, TouchSettings,
};
use crate::spec::TouchConfig;
use crate::store::{blocking, STREAM_FLAG_DELETED};

/// The least time between two checkpoint writes of a stream (see `Inner::set_checkpoint`).
const CHECKPOINT_PERSIST_MS: i64 = 100;

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
    pub(super) fn process_locked(
        self: &Arc<Self>,
        name: &str,
        cfg: &TouchConfig,
        mem_through: Option<i64>,
        profile_seq: u64,
        now: i64,
    ) -> Result<bool> {
        if self.edge().is_some() {
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
    pub(super) fn persist_checkpoints(&self, wait: bool) -> Result<()> {
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
