//! The manager's per-stream policy state, as small pure pieces: the touch mode a batch runs in
//! ([`TouchMode`], M8, M21), lag hysteresis (M5), adaptive coalescing (M6), the fine-token
//! bucket with refunds (M7, M11), restricted-mode template coalescing (M13), failure backoff
//! (M16, with B9 fixed) and base WAL GC pacing (M17).

use std::collections::HashSet;

/// The stream's processing mode as the last batch left it (M8, M21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TouchMode {
    Idle,
    Fine,
    Restricted,
    CoarseOnly,
}

impl TouchMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TouchMode::Idle => "idle",
            TouchMode::Fine => "fine",
            TouchMode::Restricted => "restricted",
            TouchMode::CoarseOnly => "coarseOnly",
        }
    }
}

/// M5: whether fine touches are suppressed because the stream lags, with hysteresis.
#[derive(Debug, Default, Clone, Copy)]
pub struct LagHysteresis {
    pub suppressed: bool,
}

impl LagHysteresis {
    pub fn update(&mut self, lag: i64, has_fine_demand: bool, degrade_at: f64, recover_at: f64) -> bool {
        if !has_fine_demand {
            self.suppressed = false;
            return false;
        }
        let degrade = degrade_at.floor().max(0.0) as i64;
        if degrade <= 0 {
            self.suppressed = false;
            return false;
        }
        let recover = degrade.min(recover_at.floor().max(0.0) as i64);
        if !self.suppressed && lag >= degrade {
            self.suppressed = true;
        } else if self.suppressed && lag <= recover {
            self.suppressed = false;
        }
        self.suppressed
    }
}

/// The coalesce window once a stream has caught up and someone waits. The reference waits
/// 10 ms (M6); with the backlog processed, waiting longer only delays the wake (the batch's
/// touches are all in the bucket already), and a busier stream is not affected: its lag is
/// above 0.
pub const CAUGHT_UP_COALESCE_MS: f64 = 2.0;

/// M6: the journal's coalesce window for the next batch.
pub fn adaptive_coalesce_ms(bucket_ms: f64, lag: i64, has_any_waiters: bool) -> f64 {
    let max = bucket_ms.floor().max(1.0);
    if !has_any_waiters {
        return max;
    }
    if lag <= 0 {
        return max.min(CAUGHT_UP_COALESCE_MS);
    }
    if lag <= 5000 {
        return max.min(50.0);
    }
    max
}

/// M7: a per-stream token bucket for fine touches.
#[derive(Debug, Clone, Copy)]
pub struct FineTokens {
    tokens: f64,
    last_refill_ms: i64,
}

/// The outcome of a reservation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenGrant {
    pub granted: u64,
    pub token_limited: bool,
}

impl FineTokens {
    pub fn new(burst: f64, now_ms: i64) -> FineTokens {
        FineTokens { tokens: burst.floor().max(0.0), last_refill_ms: now_ms }
    }

    /// Takes up to `wanted` tokens.
    pub fn reserve(&mut self, wanted: u64, rate_per_s: f64, burst: f64, now_ms: i64) -> TokenGrant {
        let rate = rate_per_s.floor().max(0.0);
        let burst = burst.floor().max(0.0);
        if wanted == 0 {
            return TokenGrant { granted: 0, token_limited: false };
        }
        if rate <= 0.0 || burst <= 0.0 {
            return TokenGrant { granted: 0, token_limited: true };
        }
        let elapsed = (now_ms - self.last_refill_ms).max(0);
        if elapsed > 0 {
            self.tokens = burst.min(self.tokens + elapsed as f64 * rate / 1000.0);
            self.last_refill_ms = now_ms;
        }
        let granted = (wanted as f64).min(self.tokens.floor()).max(0.0) as u64;
        self.tokens = (self.tokens - granted as f64).max(0.0);
        TokenGrant { granted, token_limited: granted < wanted }
    }

    /// M11: gives back what a batch did not use.
    pub fn refund(&mut self, granted: u64, used: u64, burst: f64) {
        if used >= granted {
            return;
        }
        self.tokens = burst.floor().max(0.0).min(self.tokens + (granted - used) as f64);
    }
}

/// M13: drops template touches already seen in the current wall-clock bucket.
#[derive(Debug, Default)]
pub struct RestrictedBucket {
    bucket_id: i64,
    seen: HashSet<u32>,
}

impl RestrictedBucket {
    /// Whether a template touch with this key id may pass in `bucket_id`.
    pub fn admit(&mut self, bucket_id: i64, key_id: u32) -> bool {
        if bucket_id != self.bucket_id {
            self.bucket_id = bucket_id;
            self.seen.clear();
        }
        self.seen.insert(key_id)
    }
}

/// M16 with B9 fixed: exponential backoff after failures that really grows.
///
/// The reference forgets a stream's attempts as soon as its backoff expires, so the next
/// failure starts over at 500 ms. Here the attempt count survives until a success, and the
/// backoff doubles up to 60 s (deviations.md, B9).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct FailureBackoff {
    pub attempts: u32,
    pub until_ms: i64,
}

pub const BACKOFF_BASE_MS: i64 = 500;
pub const BACKOFF_MAX_MS: i64 = 60_000;

impl FailureBackoff {
    pub fn should_skip(&self, now_ms: i64) -> bool {
        self.attempts > 0 && now_ms < self.until_ms
    }

    pub fn record_failure(&mut self, now_ms: i64) -> i64 {
        self.attempts = self.attempts.saturating_add(1);
        let exp = (self.attempts - 1).min(20);
        let backoff = (BACKOFF_BASE_MS << exp).min(BACKOFF_MAX_MS);
        self.until_ms = now_ms + backoff;
        backoff
    }

    pub fn record_success(&mut self) {
        *self = FailureBackoff::default();
    }
}

/// M17: pacing of base WAL GC for one stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WalGcPacer {
    pub last_at_ms: i64,
    pub last_through: i64,
}

impl Default for WalGcPacer {
    fn default() -> Self {
        WalGcPacer { last_at_ms: 0, last_through: -1 }
    }
}

impl WalGcPacer {
    /// The offset to delete through now, if any. `interval_ms` and `chunk` are the
    /// `DS_BASE_WAL_GC_*` settings.
    pub fn plan(
        &mut self,
        processed_through: i64,
        uploaded_through: i64,
        now_ms: i64,
        interval_ms: i64,
        chunk: i64,
    ) -> Option<i64> {
        let target = processed_through.min(uploaded_through);
        if target < 0 {
            return None;
        }
        if now_ms - self.last_at_ms < interval_ms {
            return None;
        }
        if target <= self.last_through {
            self.last_at_ms = now_ms;
            return None;
        }
        let cap = if chunk > 0 { self.last_through.saturating_add(chunk) } else { target };
        Some(target.min(cap))
    }

    pub fn done(&mut self, through: i64, now_ms: i64) {
        self.last_at_ms = now_ms;
        self.last_through = through;
    }

    pub fn failed(&mut self, now_ms: i64) {
        self.last_at_ms = now_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_hysteresis_degrades_at_degrade_and_recovers_at_recover() {
        let mut h = LagHysteresis::default();
        assert!(!h.update(4999, true, 5000.0, 1000.0));
        assert!(h.update(5000, true, 5000.0, 1000.0));
        assert!(h.update(1001, true, 5000.0, 1000.0), "stays degraded between the thresholds");
        assert!(!h.update(1000, true, 5000.0, 1000.0));
        assert!(!h.update(100_000, false, 5000.0, 1000.0), "no fine demand: never suppressed");
        assert!(!h.update(100_000, true, 0.0, 0.0), "degrade 0 turns the feature off");
        // recover > degrade is clamped to degrade (B21).
        assert!(h.update(10, true, 10.0, 50.0));
        assert!(!h.update(10, true, 10.0, 50.0));
    }

    #[test]
    fn adaptive_coalesce_follows_m6() {
        assert_eq!(adaptive_coalesce_ms(100.0, 10, false), 100.0);
        assert_eq!(adaptive_coalesce_ms(100.0, 0, true), CAUGHT_UP_COALESCE_MS);
        assert_eq!(adaptive_coalesce_ms(100.0, 5000, true), 50.0);
        assert_eq!(adaptive_coalesce_ms(100.0, 5001, true), 100.0);
        assert_eq!(adaptive_coalesce_ms(20.0, 1, true), 20.0);
    }

    #[test]
    fn tokens_refill_fractionally_and_refunds_are_capped() {
        let mut t = FineTokens::new(1000.0, 0);
        assert_eq!(t.reserve(600, 100.0, 1000.0, 0), TokenGrant { granted: 600, token_limited: false });
        assert_eq!(t.reserve(600, 100.0, 1000.0, 0), TokenGrant { granted: 400, token_limited: true });
        assert_eq!(t.reserve(10, 100.0, 1000.0, 15), TokenGrant { granted: 1, token_limited: true });
        t.refund(1, 0, 1000.0);
        assert_eq!(t.reserve(10, 100.0, 1000.0, 15).granted, 1);
        t.refund(5000, 0, 1000.0);
        assert_eq!(t.reserve(5000, 100.0, 1000.0, 15).granted, 1000);
        assert_eq!(t.reserve(10, 0.0, 1000.0, 20), TokenGrant { granted: 0, token_limited: true });
    }

    #[test]
    fn restricted_bucket_resets_per_bucket() {
        let mut b = RestrictedBucket::default();
        assert!(b.admit(5, 1));
        assert!(!b.admit(5, 1));
        assert!(b.admit(5, 2));
        assert!(b.admit(6, 1));
    }

    #[test]
    fn backoff_grows_across_expiries_until_success() {
        let mut f = FailureBackoff::default();
        assert!(!f.should_skip(0));
        assert_eq!(f.record_failure(0), 500);
        assert!(f.should_skip(499));
        assert!(!f.should_skip(500));
        // B9: the reference would start over at 500 here.
        assert_eq!(f.record_failure(600), 1000);
        assert_eq!(f.record_failure(2000), 2000);
        for _ in 0..10 {
            f.record_failure(3000);
        }
        assert_eq!(f.record_failure(4000), 60_000);
        f.record_success();
        assert_eq!(f.record_failure(5000), 500);
    }

    #[test]
    fn wal_gc_is_bounded_by_both_marks_paced_and_chunked() {
        let mut p = WalGcPacer::default();
        assert_eq!(p.plan(-1, 100, 5000, 1000, 10), None);
        assert_eq!(p.plan(50, 100, 5000, 1000, 10), Some(9));
        p.done(9, 5000);
        assert_eq!(p.plan(50, 100, 5500, 1000, 10), None, "paced");
        assert_eq!(p.plan(50, 100, 6000, 1000, 100), Some(50));
        p.done(50, 6000);
        assert_eq!(p.plan(40, 100, 7000, 1000, 100), None);
        assert_eq!(p.last_at_ms, 7000);
    }
}
