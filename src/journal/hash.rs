//! A fast, seeded hasher for the journal's integer-keyed tables (pending keys, waiter indexes,
//! exact routing keys).
//!
//! Keys are 32-bit key ids or 64-bit routing keys, hashed millions of times per second, so the
//! standard SipHash is too slow. The hasher is a folded 64×64→128 multiply of the key xor a
//! per-process random seed: cheap, and both halves of the product feed the bucket index, so ids
//! that differ only in their high bits do not collide.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

fn process_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| RandomState::new().hash_one(0x5eed_u64) | 1)
}

/// Builds [`IntHasher`]s sharing the process seed.
#[derive(Clone, Copy)]
pub struct IntHash {
    seed: u64,
}

impl Default for IntHash {
    fn default() -> Self {
        IntHash { seed: process_seed() }
    }
}

impl BuildHasher for IntHash {
    type Hasher = IntHasher;
    fn build_hasher(&self) -> IntHasher {
        IntHasher { state: self.seed }
    }
}

/// Hasher for integer keys; other input is folded in 8 bytes at a time.
pub struct IntHasher {
    state: u64,
}

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let full = (a as u128).wrapping_mul(b as u128);
    (full as u64) ^ ((full >> 64) as u64)
}

impl Hasher for IntHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.state = fold(self.state ^ n, MULTIPLIER);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
}

pub type IntMap<K, V> = HashMap<K, V, IntHash>;
pub type IntSet<K> = HashSet<K, IntHash>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_bit_only_keys_spread_over_buckets() {
        let b = IntHash::default();
        let mask = 1023u64;
        let buckets: IntSet<u64> = (0..1024u32).map(|i| b.hash_one(i << 22) & mask).collect();
        assert!(buckets.len() > 500, "only {} distinct buckets", buckets.len());
    }
}
