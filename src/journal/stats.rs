//! The journal's counters (J13, J14): wake and timeout statistics, flush intervals.

use std::collections::VecDeque;

/// Flush intervals are kept for this long (J13).
const FLUSH_INTERVAL_WINDOW_MS: i64 = 10_000;

/// Counters of wake passes and timeout sweeps. Durations are in milliseconds (fractional: we
/// measure with a monotonic clock where the reference differences `Date.now()`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WakeStats {
    pub timeouts_fired: u64,
    pub timeout_sweeps: u64,
    pub timeout_sweep_ms_sum: f64,
    pub timeout_sweep_ms_max: f64,
    pub notify_wakeups: u64,
    pub notify_flushes: u64,
    pub notify_wake_ms_sum: f64,
    pub notify_wake_ms_max: f64,
}

impl WakeStats {
    fn add_sweep(&mut self, expired: usize, ms: f64) {
        self.timeouts_fired += expired as u64;
        self.timeout_sweeps += 1;
        self.timeout_sweep_ms_sum += ms;
        self.timeout_sweep_ms_max = self.timeout_sweep_ms_max.max(ms);
    }

    fn add_wake(&mut self, woken: usize, ms: f64) {
        self.notify_wakeups += woken as u64;
        self.notify_flushes += 1;
        self.notify_wake_ms_sum += ms;
        self.notify_wake_ms_max = self.notify_wake_ms_max.max(ms);
    }
}

/// `snapshotAndResetIntervalStats()`: the interval counters plus the heap size when taken.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IntervalStats {
    pub wake: WakeStats,
    pub heap_size: usize,
}

/// `getTotalStats()`: the counters since creation plus the flush count.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TotalStats {
    pub wake: WakeStats,
    pub flushes: u64,
}

#[derive(Default)]
pub struct JournalStats {
    interval: WakeStats,
    totals: WakeStats,
    flushes: u64,
    /// (flush time, interval since the previous flush), both wall-clock ms.
    flush_intervals: VecDeque<(i64, i64)>,
}

impl JournalStats {
    /// A sweep that expired at least one waiter (J14).
    pub fn record_sweep(&mut self, expired: usize, ms: f64) {
        if expired > 0 {
            self.interval.add_sweep(expired, ms);
            self.totals.add_sweep(expired, ms);
        }
    }

    /// A wake pass that woke at least one waiter (J14).
    pub fn record_wake(&mut self, woken: usize, ms: f64) {
        if woken > 0 {
            self.interval.add_wake(woken, ms);
            self.totals.add_wake(woken, ms);
        }
    }

    /// A flush at `now_ms`; `previous_ms` is the last flush time (0 = none yet) (J8 step 3).
    pub fn record_flush(&mut self, now_ms: i64, previous_ms: i64) {
        self.flushes += 1;
        if previous_ms > 0 && now_ms >= previous_ms {
            self.flush_intervals.push_back((now_ms, now_ms - previous_ms));
            self.prune(now_ms);
        }
    }

    fn prune(&mut self, now_ms: i64) {
        let cutoff = now_ms - FLUSH_INTERVAL_WINDOW_MS;
        while self.flush_intervals.front().is_some_and(|&(at, _)| at < cutoff) {
            self.flush_intervals.pop_front();
        }
    }

    /// (max, p95) of the flush intervals of the last 10 s (J13; p95 = sorted[floor((n-1)·0.95)]).
    pub fn flush_interval_max_p95(&mut self, now_ms: i64) -> (i64, i64) {
        self.prune(now_ms);
        if self.flush_intervals.is_empty() {
            return (0, 0);
        }
        let mut v: Vec<i64> = self.flush_intervals.iter().map(|&(_, i)| i).collect();
        v.sort_unstable();
        let idx = ((v.len() - 1) as f64 * 0.95).floor() as usize;
        (*v.last().unwrap_or(&0), v[idx.min(v.len() - 1)])
    }

    pub fn take_interval(&mut self, heap_size: usize) -> IntervalStats {
        IntervalStats { wake: std::mem::take(&mut self.interval), heap_size }
    }

    pub fn totals(&self) -> TotalStats {
        TotalStats { wake: self.totals, flushes: self.flushes }
    }

    /// Stop forgets the flush intervals (J15); counters stay.
    pub fn clear_flush_intervals(&mut self) {
        self.flush_intervals.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_passes_are_not_counted() {
        let mut s = JournalStats::default();
        s.record_wake(0, 5.0);
        s.record_sweep(0, 5.0);
        assert_eq!(s.totals(), TotalStats::default());
        s.record_wake(3, 2.0);
        s.record_wake(1, 4.0);
        s.record_sweep(2, 1.5);
        let t = s.totals();
        assert_eq!((t.wake.notify_wakeups, t.wake.notify_flushes), (4, 2));
        assert_eq!((t.wake.notify_wake_ms_sum, t.wake.notify_wake_ms_max), (6.0, 4.0));
        assert_eq!((t.wake.timeouts_fired, t.wake.timeout_sweeps), (2, 1));
        let i = s.take_interval(7);
        assert_eq!(i.heap_size, 7);
        assert_eq!(i.wake, t.wake);
        assert_eq!(s.take_interval(0).wake, WakeStats::default());
        assert_eq!(s.totals().wake, t.wake);
    }

    #[test]
    fn flush_intervals_window_and_percentile() {
        let mut s = JournalStats::default();
        s.record_flush(1000, 0);
        assert_eq!(s.flush_interval_max_p95(1000), (0, 0));
        let mut at = 1000;
        for i in 1..=20 {
            let next = at + i * 10;
            s.record_flush(next, at);
            at = next;
        }
        // 20 intervals 10..200: p95 index floor(19*0.95)=18 → 190.
        assert_eq!(s.flush_interval_max_p95(at), (200, 190));
        assert_eq!(s.totals().flushes, 21);
        assert_eq!(s.flush_interval_max_p95(at + 20_000), (0, 0));
    }
}
