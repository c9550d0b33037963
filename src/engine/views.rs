//! What `meta()`, `stats()` and `memory()` report: read-only views of the engine's state
//! (M21, X1–X5, the reference manager's `getMemoryStats` / `getTopStreams`).

use super::policy::TouchMode;
use super::runtime::{RuntimeTotals, StreamRt};
use super::wait;
use super::{hot, profile, templates, wall_ms, Inner, LifecycleCounts, Settle, TouchEngine};
use crate::error::{Error, Result};
use crate::journal::{JournalMeta, TotalStats};
use crate::spec::TouchConfig;
use crate::store::{blocking, Reply};

/// `meta()`: the journal's meta plus the stream's runtime (M21, the `/touch/meta` fields).
#[derive(Debug, Clone)]
pub struct TouchMetaView {
    pub journal: JournalMeta,
    pub settled: bool,
    pub coarse_interval_ms: f64,
    pub touch_coalesce_window_ms: f64,
    pub active_templates: i64,
    pub lag_source_offsets: i64,
    pub touch_mode: TouchMode,
    /// `<epoch>-<processedThrough>` style offset of the checkpoint, `None` without a state.
    pub processed_through: Option<i64>,
    pub stream_epoch: i64,
    pub runtime: RuntimeView,
    pub kept: KeptView,
}

/// How the stream's journal is kept across restarts ([`crate::durable`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeptView {
    /// Whether its flushes are kept (journals are kept, and no write failed).
    pub kept: bool,
    /// Wall-clock ms when its epoch started (a restart that kept it does not start one).
    pub epoch_started_ms: i64,
    /// Flushes replayed from the kept log when the engine opened.
    pub replayed_flushes: u64,
    /// The oldest generation a cursor may name and be answered precisely (older: `stale`).
    pub floor_generation: u32,
}

fn kept_view(rt: &StreamRt) -> KeptView {
    let (epoch_started_ms, floor_generation) =
        rt.journal.as_ref().map_or((0, 0), |j| j.read(|s| (s.epoch_started_ms(), s.floor_generation())));
    KeptView {
        kept: rt.kept.as_ref().is_some_and(|k| k.is_keeping()),
        epoch_started_ms,
        replayed_flushes: rt.replayed_flushes,
        floor_generation,
    }
}

/// The hot counts and totals of one stream (M21).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeView {
    pub hot_fine_keys: usize,
    pub hot_templates: usize,
    pub hot_fine_keys_active: usize,
    pub hot_fine_keys_grace: usize,
    pub hot_templates_active: usize,
    pub hot_templates_grace: usize,
    pub fine_waiters_active: u64,
    pub coarse_waiters_active: u64,
    pub broad_fine_waiters_active: u64,
    pub hot_key_filtering_enabled: bool,
    pub hot_template_filtering_enabled: bool,
    pub totals: RuntimeTotals,
    pub journal: TotalStats,
}

/// Memory stats (seed `001`: `getMemoryStats`).
#[derive(Debug, Clone, Default)]
pub struct MemoryView {
    pub dirty_streams: usize,
    pub journals: usize,
    pub journals_created_total: u64,
    pub journal_filter_bytes_total: usize,
    pub fine_lag_coarse_only_streams: usize,
    pub touch_mode_streams: usize,
    pub fine_token_bucket_streams: usize,
    pub hot_fine_streams: usize,
    pub restricted_template_bucket_streams: usize,
    pub runtime_totals_streams: usize,
    pub template_last_seen_entries: usize,
    pub template_dirty_last_seen_entries: usize,
    pub template_rate_state_streams: usize,
}

/// One entry of `getTopStreams`.
#[derive(Debug, Clone)]
pub struct TopStream {
    pub stream: String,
    pub journal_filter_bytes: usize,
    pub dirty: bool,
    pub touch_mode: Option<TouchMode>,
}

/// Everything `stats()` reports.
#[derive(Debug, Clone)]
pub struct EngineStatsView {
    pub collector: super::stats::StatsSnapshot,
    pub report_line: String,
    pub window_ms: f64,
    pub memory: MemoryView,
    pub top_streams: Vec<TopStream>,
    pub streams: Vec<(String, TouchMode, i64, RuntimeView)>,
    pub lifecycle: LifecycleCounts,
    pub store: crate::store::StoreStats,
    /// What taking the kept journals up did when the engine opened.
    pub restored: super::keep::RestoreReport,
}

impl TouchEngine {
    /// `/touch/meta` (M21); with `settle`, waits until the stream has no backlog and no
    /// pending bucket, or until `timeout_ms`.
    pub fn meta(&self, stream: &str, settle: bool, timeout_ms: f64, reply: Reply<TouchMetaView>) {
        if let Err(e) = self.check_open() {
            return reply(Err(e));
        }
        let cfg = match self.touch_config(stream) {
            Ok(c) => c,
            Err(e) => return reply(Err(e)),
        };
        if let Err(e) = self.cursor(stream) {
            return reply(Err(e));
        }
        let engine = self.clone();
        let name = stream.to_string();
        let deadline_ms = wall_ms() + timeout_ms.clamp(0.0, wait::MAX_TIMEOUT_MS) as i64;
        std::thread::spawn(move || {
            let view = engine.inner.meta_view(&name, &cfg);
            match view {
                Ok(v) if settle && !v.settled && wall_ms() < deadline_ms => {
                    let mut st = engine.inner.state.lock();
                    st.settles.push(Settle { stream: name, deadline_ms, reply });
                    drop(st);
                    if engine.inner.opts.auto_process {
                        engine.inner.poke();
                    } else {
                        // No loop checks settles: one poller does, as the reference route does.
                        engine.inner.poll_settles_without_loop();
                    }
                }
                other => reply(other),
            }
        });
    }

    /// The reference manager's `getTouchRuntimeSnapshot`, without reading the file: the
    /// touch mode, the lag the last batch left (M21) and the stream's runtime, its hot state
    /// swept first.
    pub fn runtime(&self, stream: &str) -> Result<(TouchMode, i64, RuntimeView)> {
        self.check_open()?;
        let cfg = self.touch_config(stream)?;
        let mut st = self.inner.state.lock();
        let rt = st.streams.get_mut(stream).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
        let view = runtime_view(rt, &cfg, wall_ms());
        Ok((rt.runtime_touch_mode(), rt.lag_source_offsets, view))
    }

    /// The reference manager's `getTouchRuntimeSnapshot` for a stream it holds no runtime state
    /// for (touch not enabled, or no engine): mode `fine`, no lag, nothing hot (key filtering
    /// on, as [`hot::HotSnapshot::empty`]) and every total 0, as a stream reads before its
    /// first batch, touch, wait or hot interest.
    pub fn empty_runtime() -> (TouchMode, i64, RuntimeView) {
        let view = RuntimeView::new(&hot::HotSnapshot::empty(), RuntimeTotals::default(), TotalStats::default());
        (TouchMode::Fine, 0, view)
    }

    /// Stats: the collector's window (reset), the reporter line, memory and per-stream totals.
    pub fn stats(&self) -> EngineStatsView {
        let now = wall_ms();
        let window_ms = {
            let mut last = self.inner.last_report_ms.lock();
            let w = if *last == 0 { (now - self.inner.opened_at_ms).max(1) } else { (now - *last).max(1) };
            *last = now;
            w as f64
        };
        let collector = self.inner.stats.snapshot_and_reset();
        let store = self.inner.store.stats();
        let (memory, top_streams) = self.memory(5);
        let mut st = self.inner.state.lock();
        let mut streams = Vec::new();
        for (name, rt) in st.streams.iter_mut() {
            if let Some(cfg) = rt.touch().cloned() {
                let view = runtime_view(rt, &cfg, now);
                streams.push((name.clone(), rt.runtime_touch_mode(), rt.lag_source_offsets, view));
            }
        }
        streams.sort_by(|a, b| a.0.cmp(&b.0));
        let ctx = super::stats::ReportContext {
            window_ms,
            total_streams: st.streams.len() as u64,
            segments_waiting: 0,
            wal_db_bytes: store.wal_file_bytes as f64,
            meta_db_bytes: store.db_file_bytes as f64,
            reject_active_ms: 0.0,
            max_rss_bytes: None,
        };
        let report_line = super::stats::report_line(&collector, &ctx);
        EngineStatsView {
            collector,
            report_line,
            window_ms,
            memory,
            top_streams,
            streams,
            lifecycle: st.lifecycle,
            store,
            restored: self.inner.restored.clone(),
        }
    }

    /// Memory counters and the `top` streams by journal filter bytes (the reference's
    /// `getMemoryStats` / `getTopStreams`); unlike [`TouchEngine::stats`], resets nothing.
    pub fn memory(&self, top: usize) -> (MemoryView, Vec<TopStream>) {
        let st = self.inner.state.lock();
        let mut memory = MemoryView {
            dirty_streams: st.dirty.len(),
            journals_created_total: st.journals_created,
            ..Default::default()
        };
        let mut tops = Vec::new();
        for (name, rt) in &st.streams {
            if let Some(j) = &rt.journal {
                memory.journals += 1;
                memory.journal_filter_bytes_total += j.filter_bytes();
                tops.push(TopStream {
                    stream: name.clone(),
                    journal_filter_bytes: j.filter_bytes(),
                    dirty: st.dirty_set.contains(name),
                    touch_mode: rt.touch_mode,
                });
            }
            memory.fine_lag_coarse_only_streams += usize::from(rt.lag.suppressed);
            memory.touch_mode_streams += usize::from(rt.touch_mode.is_some());
            memory.fine_token_bucket_streams += usize::from(rt.tokens.is_some());
            memory.hot_fine_streams += usize::from(rt.hot.is_some());
            memory.runtime_totals_streams += 1;
        }
        drop(st);
        let reg = self.inner.registry.memory();
        memory.template_last_seen_entries = reg.last_seen_entries;
        memory.template_dirty_last_seen_entries = reg.dirty_last_seen_entries;
        memory.template_rate_state_streams = reg.rate_state_streams;
        tops.sort_by(|a, b| b.journal_filter_bytes.cmp(&a.journal_filter_bytes).then_with(|| a.stream.cmp(&b.stream)));
        tops.truncate(top);
        (memory, tops)
    }
}

/// The stream's runtime as the reference's `getTouchRuntimeSnapshot` reads it: the hot state is
/// swept first (M19's paced sweep), so keys and templates whose grace has passed are gone
/// whether or not a batch or a wait ran since.
fn runtime_view(rt: &mut StreamRt, cfg: &TouchConfig, now_ms: i64) -> RuntimeView {
    let snap = rt.hot_snapshot(&hot::hot_limits(cfg), now_ms);
    let journal = rt.journal.as_ref().map(|j| j.total_stats()).unwrap_or_default();
    RuntimeView::new(&snap, rt.totals, journal)
}

impl RuntimeView {
    fn new(snap: &hot::HotSnapshot, totals: RuntimeTotals, journal: TotalStats) -> RuntimeView {
        RuntimeView {
            hot_fine_keys: snap.hot_key_count(),
            hot_templates: snap.hot_template_count(),
            hot_fine_keys_active: snap.hot_key_active,
            hot_fine_keys_grace: snap.hot_key_grace,
            hot_templates_active: snap.hot_template_active,
            hot_templates_grace: snap.hot_template_grace,
            fine_waiters_active: snap.fine_waiters,
            coarse_waiters_active: snap.coarse_waiters,
            broad_fine_waiters_active: snap.broad_fine_waiters,
            hot_key_filtering_enabled: snap.key_filtering,
            hot_template_filtering_enabled: snap.template_filtering,
            totals,
            journal,
        }
    }
}

impl Inner {
    pub(crate) fn meta_view(&self, stream: &str, cfg: &TouchConfig) -> Result<TouchMetaView> {
        if let Some(view) = self.mirrored_meta_view(stream, cfg) {
            return Ok(view);
        }
        let name = stream.to_string();
        let (active, state, stream_row) = blocking(|r| {
            self.store.query(
                move |c| {
                    Ok((
                        templates::active_count(c, &name),
                        profile::get_touch_state(c, &name)?,
                        crate::store::query_stream(c, &name)?,
                    ))
                },
                r,
            )
        })?;
        let stream_row = stream_row.ok_or_else(|| Error::StreamNotFound { stream: stream.into() })?;
        let mut st = self.state.lock();
        let rt = st.streams.get_mut(stream).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
        let (j, _) = rt.journal(cfg);
        let journal = j.meta();
        // Until a batch adopts a stream created again under the name, its checkpoint is the
        // stored one (StreamRt::adopt_incarnation).
        let mem = rt.processed_through.filter(|_| rt.incarnation.is_none_or(|c| c == stream_row.created_at_ms));
        let processed = mem.or(state.map(|s| s.processed_through));
        let lag = processed.map(|p| (stream_row.next_offset - 1 - p).max(0)).unwrap_or(0);
        let runtime = runtime_view(rt, cfg, wall_ms());
        Ok(TouchMetaView {
            settled: journal.pending_keys == 0 && lag == 0 && !rt.busy,
            journal,
            coarse_interval_ms: cfg.coarse_interval_ms,
            touch_coalesce_window_ms: cfg.touch_coalesce_window_ms,
            active_templates: active,
            lag_source_offsets: lag,
            touch_mode: rt.runtime_touch_mode(),
            processed_through: state.map(|_| processed.unwrap_or(-1)),
            stream_epoch: stream_row.epoch,
            runtime,
            kept: kept_view(rt),
        })
    }

    /// A mirror's meta (at an edge): its journal and the writer's view of the stream from its
    /// last beat. `None` when the stream's journal is not a mirror: the engine's own store
    /// knows the stream.
    fn mirrored_meta_view(&self, stream: &str, cfg: &TouchConfig) -> Option<TouchMetaView> {
        let mut st = self.state.lock();
        let rt = st.streams.get_mut(stream)?;
        let (active_templates, stream_epoch) = rt.mirror_info().map(|i| (i.active_templates, i.stream_epoch))?;
        let journal = rt.journal(cfg).0.meta();
        let runtime = runtime_view(rt, cfg, wall_ms());
        Some(TouchMetaView {
            settled: journal.pending_keys == 0 && rt.lag_source_offsets == 0,
            journal,
            coarse_interval_ms: cfg.coarse_interval_ms,
            touch_coalesce_window_ms: cfg.touch_coalesce_window_ms,
            active_templates,
            lag_source_offsets: rt.lag_source_offsets,
            touch_mode: rt.runtime_touch_mode(),
            // Before its first beat, a mirror has heard of nothing processed: 0.
            processed_through: Some(rt.processed_through.unwrap_or(0)),
            stream_epoch,
            runtime,
            kept: kept_view(rt),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::runtime::Source;
    use crate::spec::StateProtocolProfile;

    #[test]
    fn the_empty_runtime_is_a_new_streams() {
        // compat/manager.mjs answers `getTouchRuntimeSnapshot` with the empty runtime for a
        // stream the engine holds no state for; a stream it has just taken up reads the same.
        let cfg = TouchConfig { enabled: true, ..TouchConfig::default() };
        let mut rt = StreamRt::new(StateProtocolProfile { touch: Some(cfg.clone()) }, Source::Local);
        let view = runtime_view(&mut rt, &cfg, wall_ms());
        assert_eq!(TouchEngine::empty_runtime(), (rt.runtime_touch_mode(), rt.lag_source_offsets, view));
    }
}
