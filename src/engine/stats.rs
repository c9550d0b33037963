//! The stats collector (X1–X4) and the reporter's one-line summary (X5).
//!
//! Counters accumulate between snapshots; [`StatsCollector::snapshot_and_reset`] returns them
//! and starts a new window, as the reference's `StatsCollector` does. durable-touch has no
//! segmenter or uploader, so the sealed/uploaded counters stay zero unless a host records them.

use std::collections::HashSet;

use parking_lot::Mutex;

/// The counters of one window (X1, X3).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    pub ingested_bytes: f64,
    pub wal_bytes: f64,
    pub sealed_payload_bytes: f64,
    pub sealed_bytes: f64,
    pub uploaded_bytes: f64,
    pub segments_sealed: f64,
    pub backpressure_over_ms: f64,
    pub active_streams: usize,
}

#[derive(Default)]
struct Window {
    snap: StatsSnapshot,
    active: HashSet<String>,
}

/// Thread-safe collector (X2).
pub struct StatsCollector {
    backpressure_budget_ms: f64,
    window: Mutex<Window>,
}

impl Default for StatsCollector {
    fn default() -> Self {
        StatsCollector::new(None)
    }
}

impl StatsCollector {
    /// X4: the budget is the given value if finite (at least 0), else 1.
    pub fn new(backpressure_budget_ms: Option<f64>) -> StatsCollector {
        let raw = backpressure_budget_ms.unwrap_or(1.0);
        let budget = if raw.is_finite() { raw.max(0.0) } else { 1.0 };
        StatsCollector { backpressure_budget_ms: budget, window: Mutex::new(Window::default()) }
    }

    pub fn backpressure_budget_ms(&self) -> f64 {
        self.backpressure_budget_ms
    }

    pub fn record_ingested(&self, bytes: f64) {
        self.window.lock().snap.ingested_bytes += bytes;
    }

    pub fn record_wal_commit_bytes(&self, bytes: f64) {
        if bytes > 0.0 {
            self.window.lock().snap.wal_bytes += bytes;
        }
    }

    pub fn record_segment_sealed(&self, payload_bytes: f64, segment_bytes: f64) {
        let mut w = self.window.lock();
        w.snap.sealed_payload_bytes += payload_bytes;
        w.snap.sealed_bytes += segment_bytes;
        w.snap.segments_sealed += 1.0;
    }

    pub fn record_uploaded_bytes(&self, bytes: f64) {
        self.window.lock().snap.uploaded_bytes += bytes;
    }

    /// Values ≤ 0 are ignored.
    pub fn record_backpressure_over_ms(&self, ms: f64) {
        if ms > 0.0 {
            self.window.lock().snap.backpressure_over_ms += ms;
        }
    }

    /// A stream received data (not a touch invalidation).
    pub fn record_stream_touched(&self, stream: &str) {
        let mut w = self.window.lock();
        if !w.active.contains(stream) {
            w.active.insert(stream.to_string());
        }
    }

    /// X3: the window's counters, then zero.
    pub fn snapshot_and_reset(&self) -> StatsSnapshot {
        let mut w = self.window.lock();
        let mut snap = std::mem::take(&mut w.snap);
        snap.active_streams = w.active.len();
        w.active.clear();
        snap
    }
}

/// What the reporter line needs besides the collector's window.
#[derive(Debug, Clone, Default)]
pub struct ReportContext {
    pub window_ms: f64,
    pub total_streams: u64,
    pub segments_waiting: u64,
    pub wal_db_bytes: f64,
    pub meta_db_bytes: f64,
    pub reject_active_ms: f64,
    pub max_rss_bytes: Option<f64>,
}

/// X5: the reporter's one-line summary, field for field.
pub fn report_line(snap: &StatsSnapshot, ctx: &ReportContext) -> String {
    let window = ctx.window_ms.max(1.0);
    let stored = snap.wal_bytes + snap.sealed_bytes;
    let compression = if snap.sealed_bytes > 0.0 {
        format!("{}x", to_fixed(snap.sealed_payload_bytes / snap.sealed_bytes, 2))
    } else {
        "n/a".to_string()
    };
    let queue_pct = if snap.backpressure_over_ms > 0.0 { snap.backpressure_over_ms / window * 100.0 } else { 0.0 };
    let reject_pct = if ctx.reject_active_ms > 0.0 { ctx.reject_active_ms / window * 100.0 } else { 0.0 };
    let backpressure = queue_pct.max(reject_pct).min(100.0);
    let avg_segment = if snap.segments_sealed > 0.0 {
        format_bytes(snap.sealed_bytes / snap.segments_sealed)
    } else {
        "n/a".to_string()
    };
    let mut line = format!(
        "ingested={} stored={} compression={} uploaded={} streams-touched={}/{} segments-sealed={} segments-waiting={} \
         avg-segment-size={} wal-size={} meta-size={} backpressure={}%",
        format_bytes(snap.ingested_bytes),
        format_bytes(stored),
        compression,
        format_bytes(snap.uploaded_bytes),
        snap.active_streams,
        ctx.total_streams,
        snap.segments_sealed,
        ctx.segments_waiting,
        avg_segment,
        format_bytes(ctx.wal_db_bytes),
        format_bytes(ctx.meta_db_bytes),
        to_fixed(backpressure, 1),
    );
    if let Some(rss) = ctx.max_rss_bytes {
        line.push_str(&format!(" max-rss={}", format_bytes(rss)));
    }
    line
}

/// X5 byte units: b/kb/mb/gb in powers of 1024, 0 decimals for b and 1 otherwise.
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 4] = ["b", "kb", "mb", "gb"];
    let mut value = bytes;
    let mut idx = 0;
    while value >= 1024.0 && idx < UNITS.len() - 1 {
        value /= 1024.0;
        idx += 1;
    }
    format!("{}{}", to_fixed(value, if idx == 0 { 0 } else { 1 }), UNITS[idx])
}

/// `Number.prototype.toFixed` for the magnitudes stats use: the exact value of the double is
/// rounded to `digits` decimals with ties going up (Rust's formatter rounds ties to even).
pub fn to_fixed(x: f64, digits: usize) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "NaN".into()
        } else if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    // Print with enough digits to see the exact tie, then round half up by hand.
    let wide = format!("{:.*}", digits + 30, x.abs());
    let (int_part, frac_part) = wide.split_once('.').unwrap_or((&wide, ""));
    let keep = &frac_part[..digits];
    let rest = &frac_part[digits..];
    let round_up = rest.as_bytes().first().is_some_and(|d| *d >= b'5');
    let mut digits_vec: Vec<u8> = format!("{int_part}{keep}").into_bytes();
    if round_up {
        let mut i = digits_vec.len();
        loop {
            if i == 0 {
                digits_vec.insert(0, b'1');
                break;
            }
            i -= 1;
            if digits_vec[i] == b'9' {
                digits_vec[i] = b'0';
            } else {
                digits_vec[i] += 1;
                break;
            }
        }
    }
    let s = String::from_utf8(digits_vec).unwrap_or_default();
    let (i, f) = s.split_at(s.len() - digits);
    let body = if digits == 0 { i.to_string() } else { format!("{i}.{f}") };
    if x < 0.0 && body.bytes().any(|b| b != b'0' && b != b'.') {
        format!("-{body}")
    } else {
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_fixed_rounds_ties_up_like_js() {
        assert_eq!(to_fixed(1.25, 1), "1.3");
        assert_eq!(to_fixed(0.05, 1), "0.1"); // 0.05 is slightly above 0.05 in binary
        assert_eq!(to_fixed(2.5, 0), "3");
        assert_eq!(to_fixed(9.96, 1), "10.0");
        assert_eq!(to_fixed(0.0, 1), "0.0");
        assert_eq!(to_fixed(123.456, 2), "123.46");
        assert_eq!(to_fixed(1.005, 2), "1.00"); // 1.005 is below the tie in binary
    }

    #[test]
    fn bytes_use_1024_units() {
        assert_eq!(format_bytes(0.0), "0b");
        assert_eq!(format_bytes(1023.0), "1023b");
        assert_eq!(format_bytes(1280.0), "1.3kb");
        assert_eq!(format_bytes(5.0 * 1024.0 * 1024.0), "5.0mb");
        assert_eq!(format_bytes(3.0 * 1024f64.powi(4)), "3072.0gb");
    }

    #[test]
    fn snapshot_resets_the_window() {
        let s = StatsCollector::new(None);
        s.record_ingested(100.0);
        s.record_wal_commit_bytes(-5.0);
        s.record_wal_commit_bytes(50.0);
        s.record_backpressure_over_ms(0.0);
        s.record_backpressure_over_ms(7.0);
        s.record_stream_touched("a");
        s.record_stream_touched("a");
        s.record_stream_touched("b");
        let snap = s.snapshot_and_reset();
        assert_eq!(
            (snap.ingested_bytes, snap.wal_bytes, snap.backpressure_over_ms, snap.active_streams),
            (100.0, 50.0, 7.0, 2)
        );
        assert_eq!(s.snapshot_and_reset(), StatsSnapshot::default());
        assert_eq!(StatsCollector::new(Some(f64::NAN)).backpressure_budget_ms(), 1.0);
        assert_eq!(StatsCollector::new(Some(-3.0)).backpressure_budget_ms(), 0.0);
    }

    #[test]
    fn report_line_has_the_reference_fields_in_order() {
        let snap = StatsSnapshot {
            ingested_bytes: 2048.0,
            wal_bytes: 1024.0,
            active_streams: 1,
            backpressure_over_ms: 600.0,
            ..Default::default()
        };
        let ctx = ReportContext {
            window_ms: 60_000.0,
            total_streams: 3,
            wal_db_bytes: 4096.0,
            meta_db_bytes: 512.0,
            ..Default::default()
        };
        assert_eq!(
            report_line(&snap, &ctx),
            "ingested=2.0kb stored=1.0kb compression=n/a uploaded=0b streams-touched=1/3 segments-sealed=0 \
             segments-waiting=0 avg-segment-size=n/a wal-size=4.0kb meta-size=512b backpressure=1.0%"
        );
        let sealed = StatsSnapshot {
            sealed_payload_bytes: 300.0,
            sealed_bytes: 100.0,
            segments_sealed: 2.0,
            ..Default::default()
        };
        let line = report_line(&sealed, &ReportContext { max_rss_bytes: Some(1024.0 * 1024.0), ..Default::default() });
        assert!(line.contains("compression=3.00x"), "{line}");
        assert!(line.contains("avg-segment-size=50b"), "{line}");
        assert!(line.ends_with("backpressure=0.0% max-rss=1.0mb"), "{line}");
    }
}
