//! Journal options and their clamping (J2).

/// Generations of exact history are sized to cover this long (J2).
const EXACT_HISTORY_WINDOW_MS: f64 = 15_000.0;

/// Longest bucket (ours; the reference takes any `bucketMs` ≥ 1). A bucket is a coalescing
/// window (100 ms by default): a much longer one leaves a stream's touches unflushed, and its
/// cursor still, for as long (with `1e308`, forever), while its meta never settles.
pub const MAX_BUCKET_MS: u64 = 60_000;

/// The constructor options, as JavaScript numbers (J2 floors and clamps them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JournalOptions {
    pub bucket_ms: f64,
    pub filter_pow2: f64,
    pub k: f64,
    pub pending_max_keys: f64,
    pub key_index_max_keys: f64,
    /// The generation a new journal starts at (0). Only tests of the wrap (B28) change it.
    pub initial_generation: u32,
}

impl Default for JournalOptions {
    /// The reference's defaults (J2 table, M20).
    fn default() -> Self {
        JournalOptions {
            bucket_ms: 100.0,
            filter_pow2: 22.0,
            k: 4.0,
            pending_max_keys: 100_000.0,
            key_index_max_keys: 32.0,
            initial_generation: 0,
        }
    }
}

/// The clamped configuration a journal runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    pub bucket_ms: u64,
    pub filter_pow2: u32,
    pub k: u32,
    pub pending_max_keys: usize,
    pub key_index_max_keys: usize,
    pub exact_history_generations: usize,
    pub initial_generation: u32,
}

/// `max(lo, floor(x))` as an integer; the options are finite (checked at the boundary).
fn at_least(x: f64, lo: u64) -> u64 {
    let f = x.floor();
    if f.is_nan() || f < lo as f64 {
        lo
    } else {
        f as u64 // saturates above u64::MAX
    }
}

impl JournalConfig {
    /// J2: bucketMs in [1, [`MAX_BUCKET_MS`]], filterPow2 in [10, 30], k in [1, 8], the key
    /// limits ≥ 1; exact history of max(16, ceil(15000 / bucketMs)) generations.
    pub fn from_options(o: &JournalOptions) -> JournalConfig {
        let bucket_ms = at_least(o.bucket_ms, 1).min(MAX_BUCKET_MS);
        JournalConfig {
            bucket_ms,
            filter_pow2: at_least(o.filter_pow2, 10).min(30) as u32,
            k: at_least(o.k, 1).min(8) as u32,
            pending_max_keys: at_least(o.pending_max_keys, 1).min(usize::MAX as u64) as usize,
            key_index_max_keys: at_least(o.key_index_max_keys, 1).min(usize::MAX as u64) as usize,
            exact_history_generations: (EXACT_HISTORY_WINDOW_MS / bucket_ms as f64).ceil().max(16.0) as usize,
            initial_generation: o.initial_generation,
        }
    }
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig::from_options(&JournalOptions::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_clamped_as_j2() {
        let c = JournalConfig::default();
        assert_eq!(
            (c.bucket_ms, c.filter_pow2, c.k, c.pending_max_keys, c.key_index_max_keys),
            (100, 22, 4, 100_000, 32)
        );
        assert_eq!(c.exact_history_generations, 150);
        let o = JournalOptions {
            bucket_ms: 0.5,
            filter_pow2: 40.0,
            k: 0.0,
            pending_max_keys: -3.0,
            key_index_max_keys: 2.9,
            initial_generation: 0,
        };
        let c = JournalConfig::from_options(&o);
        assert_eq!((c.bucket_ms, c.filter_pow2, c.k, c.pending_max_keys, c.key_index_max_keys), (1, 30, 1, 1, 2));
        assert_eq!(c.exact_history_generations, 15_000);
        let c = JournalConfig::from_options(&JournalOptions { bucket_ms: 2000.0, filter_pow2: 3.0, k: 99.0, ..o });
        assert_eq!((c.filter_pow2, c.k, c.exact_history_generations), (10, 8, 16));
        for huge in [60_001.0, 2f64.powi(31), 1e300, f64::MAX] {
            let c = JournalConfig::from_options(&JournalOptions { bucket_ms: huge, ..o });
            assert_eq!((c.bucket_ms, c.exact_history_generations), (MAX_BUCKET_MS, 16), "{huge}");
        }
        let c = JournalConfig::from_options(&JournalOptions { bucket_ms: 60_000.9, ..o });
        assert_eq!(c.bucket_ms, 60_000);
    }
}
