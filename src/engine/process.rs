//! The processing loop (M1, M2): it picks the streams whose rows to process, runs a batch of
//! each ([`super::batch`]) and backs off a stream whose batch failed (M16), plus the upkeep
//! each safety-net tick runs (M17 base WAL GC, M18 templates), a processing pass on demand
//! (`tick_now`) and `meta(settle)` polling.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::hot::hot_limits;
use crate::engine::{templates, Inner};
use crate::error::{Error, Result};
use crate::journal::wall_ms;
use crate::store::blocking;

/// How often `meta(settle)` requests are re-checked.
pub(crate) const SETTLE_POLL: Duration = Duration::from_millis(2);

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
