//! The pending bucket (J6): touches collected since the last flush.
//!
//! Unique key ids are kept in arrival order up to `pendingMaxKeys`; past that the bucket is
//! marked *overflow* (a broadcast to every waiter at flush, J9) and further keys are dropped.
//! Routing keys that are 16 hex characters go to the pending exact set. Unlike the reference,
//! that set is bounded too (B15): it holds at most `pendingMaxKeys` keys, one more marks the
//! bucket overflow, and an overflowed bucket stops collecting them, because neither the exact
//! history (J10 answers "unknown" across an overflow generation) nor waking (a broadcast) ever
//! reads the exact keys of an overflowed bucket.

use super::hash::IntSet;

/// Above this capacity the sets are released after a flush instead of kept for reuse, so a
/// journal that saw one burst does not hold megabytes while idle (B14).
const KEEP_CAPACITY: usize = 4096;

pub struct PendingBucket {
    max_keys: usize,
    keys: IntSet<u32>,
    /// `keys` in arrival order: the waking order of J9 (a keyed waiter's hit names the first
    /// of its keys to arrive).
    order: Vec<u32>,
    exact: IntSet<u64>,
    overflow: bool,
    /// Wall-clock ms of the first touch of the bucket; 0 when empty.
    start_ms: i64,
    /// Largest source offset seen in the bucket; -1 when none.
    max_source_offset: i64,
}

/// What a flush takes out of the bucket.
pub struct FlushedBucket {
    pub keys: Vec<u32>,
    pub exact: Vec<u64>,
    pub overflow: bool,
    pub start_ms: i64,
    pub max_source_offset: i64,
}

impl PendingBucket {
    pub fn new(max_keys: usize) -> PendingBucket {
        PendingBucket {
            max_keys,
            keys: IntSet::default(),
            order: Vec::new(),
            exact: IntSet::default(),
            overflow: false,
            start_ms: 0,
            max_source_offset: -1,
        }
    }

    /// Adds one touch (J6). `routing_key` is an already parsed 16-hex key.
    #[inline]
    pub fn touch(&mut self, key_id: u32, source_offset: Option<i64>, routing_key: Option<u64>, now_ms: i64) {
        if self.order.is_empty() && !self.overflow && self.start_ms <= 0 {
            self.start_ms = now_ms;
        }
        if self.order.len() >= self.max_keys {
            // The reference drops the key even when it is already pending (J6).
            self.set_overflow();
        } else if self.keys.insert(key_id) {
            self.order.push(key_id);
        }
        if let Some(rk) = routing_key {
            if !self.overflow {
                if self.exact.len() >= self.max_keys && !self.exact.contains(&rk) {
                    self.set_overflow(); // B15
                } else {
                    self.exact.insert(rk);
                }
            }
        }
        if let Some(seq) = source_offset {
            if seq > self.max_source_offset {
                self.max_source_offset = seq;
            }
        }
    }

    /// `touch(key, None, None, now_ms)` for each key in order, in one pass: once the bucket
    /// overflows the rest of the keys would be dropped one by one, so they are not looked at.
    pub fn touch_keys(&mut self, keys: &[u32], now_ms: i64) {
        let Some(&first) = keys.first() else { return };
        self.touch(first, None, None, now_ms);
        for &key in &keys[1..] {
            if self.order.len() >= self.max_keys {
                self.set_overflow();
                return;
            }
            if self.keys.insert(key) {
                self.order.push(key);
            }
        }
    }

    fn set_overflow(&mut self) {
        if !self.overflow {
            self.overflow = true;
            self.exact = IntSet::default();
        }
    }

    /// Whether a flush would produce a generation (J8: pending keys or overflow).
    pub fn has_touches(&self) -> bool {
        !self.order.is_empty() || self.overflow
    }

    pub fn pending_keys(&self) -> usize {
        self.order.len()
    }

    pub fn is_overflow(&self) -> bool {
        self.overflow
    }

    /// Empties the bucket, returning its content (J8 step 9 resets the seq to -1).
    pub fn take(&mut self) -> FlushedBucket {
        let keys = std::mem::take(&mut self.order);
        let exact: Vec<u64> = self.exact.iter().copied().collect();
        if self.keys.capacity() > KEEP_CAPACITY {
            self.keys = IntSet::default();
        } else {
            self.keys.clear();
        }
        if self.exact.capacity() > KEEP_CAPACITY {
            self.exact = IntSet::default();
        } else {
            self.exact.clear();
        }
        let out = FlushedBucket {
            keys,
            exact,
            overflow: self.overflow,
            start_ms: self.start_ms,
            max_source_offset: self.max_source_offset,
        };
        self.overflow = false;
        self.start_ms = 0;
        self.max_source_offset = -1;
        out
    }

    /// Drops everything pending (stop).
    pub fn clear(&mut self) {
        drop(self.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_unique_keys_in_arrival_order_and_the_largest_offset() {
        let mut b = PendingBucket::new(10);
        b.touch(5, Some(3), Some(0xaa), 1000);
        b.touch(2, Some(9), None, 1001);
        b.touch(5, Some(4), Some(0xaa), 1002);
        b.touch(7, None, Some(0xbb), 1003);
        assert_eq!(b.pending_keys(), 3);
        let f = b.take();
        assert_eq!(f.keys, vec![5, 2, 7]);
        let mut exact = f.exact;
        exact.sort();
        assert_eq!(exact, vec![0xaa, 0xbb]);
        assert_eq!((f.start_ms, f.max_source_offset, f.overflow), (1000, 9, false));
        assert!(!b.has_touches());
        let f = b.take();
        assert_eq!((f.start_ms, f.max_source_offset, f.keys.len()), (0, -1, 0));
    }

    #[test]
    fn a_full_key_set_overflows_and_drops_even_known_keys() {
        let mut b = PendingBucket::new(2);
        b.touch(1, None, Some(1), 5);
        b.touch(2, None, Some(2), 6);
        assert!(!b.is_overflow());
        b.touch(1, None, Some(3), 7);
        assert!(b.is_overflow());
        b.touch(9, Some(4), Some(4), 8);
        let f = b.take();
        assert_eq!(f.keys, vec![1, 2]);
        assert!(f.overflow);
        assert!(f.exact.is_empty(), "an overflowed bucket keeps no exact keys (B15)");
        assert_eq!(f.max_source_offset, 4);
        assert_eq!(f.start_ms, 5);
    }

    #[test]
    fn touch_keys_is_one_touch_per_key() {
        let mut rng = 0x9e37_79b9_u32;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng
        };
        for max_keys in [0, 1, 3, 50, 1000] {
            for len in [0, 1, 2, 7, 60, 400, 3000] {
                let keys: Vec<u32> = (0..len).map(|_| next() % 90).collect();
                let (mut one, mut many) = (PendingBucket::new(max_keys), PendingBucket::new(max_keys));
                // Start from a bucket that already holds something half the time.
                if len % 2 == 1 {
                    one.touch(5, Some(9), None, 1);
                    many.touch(5, Some(9), None, 1);
                }
                for &k in &keys {
                    one.touch(k, None, None, 77);
                }
                many.touch_keys(&keys, 77);
                assert_eq!(one.is_overflow(), many.is_overflow(), "{max_keys} {len}");
                let (a, b) = (one.take(), many.take());
                assert_eq!(
                    (a.keys, a.overflow, a.start_ms, a.max_source_offset),
                    (b.keys, b.overflow, b.start_ms, b.max_source_offset)
                );
            }
        }
    }

    #[test]
    fn too_many_routing_keys_overflow_the_bucket() {
        let mut b = PendingBucket::new(3);
        b.touch(1, None, Some(10), 1);
        b.touch(1, None, Some(11), 1);
        b.touch(1, None, Some(12), 1);
        b.touch(1, None, Some(12), 1);
        assert!(!b.is_overflow());
        b.touch(1, None, Some(13), 1);
        assert!(b.is_overflow());
        // Keys are still collected after an exact overflow while there is room.
        b.touch(2, None, None, 1);
        let f = b.take();
        assert_eq!(f.keys, vec![1, 2]);
        assert!(f.overflow);
    }
}
