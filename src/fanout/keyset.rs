//! A flush's key ids on the wire, as a set: sorted, the gaps between them Rice-coded.
//!
//! Key ids are hashes, spread evenly over 32 bits, so n of them in arrival order carry 32 bits
//! each and no code does better than 4 bytes a key. As a set they carry less: the gaps between
//! n sorted ids are near-geometric with mean 2³²/n, and a Rice code (the low `k` bits as they
//! are, the rest in unary) spends about `log2(2³²/n) + 2` bits on one: 3.5 bytes a key for the
//! ~46 keys of a busy flush, 3.1 for 500. The order of arrival is not kept: a mirror marks
//! its bloom and wakes its keyed waiters in key order instead, which nothing observes (a
//! wait's answer names the flush, not the key that woke it).
//!
//! Layout: `var n`; for n > 0 the smallest key as a varint; for n > 1 `u8 k`, `var bytes`, and
//! the bits of the n − 1 gaps, least significant first within a byte; the unused bits of the
//! last byte are zero. A reader refuses any other
//! spelling, a gap that runs past 32 bits and a count the bytes cannot hold.

use crate::bytes::{Reader, Short, Writer};

/// Why a key set could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    Short(Short),
    /// Bits that no writer spells: a key past 32 bits, a `k` over 31, stray bits or bytes.
    Spelling,
}

impl From<Short> for Bad {
    fn from(s: Short) -> Bad {
        Bad::Short(s)
    }
}

/// Writes `keys` (any order, duplicates kept) as a set.
pub fn put(w: &mut Writer, keys: &[u32]) {
    w.var(keys.len() as u64);
    if keys.is_empty() {
        return;
    }
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    let (first, rest) = sorted.split_first().expect("not empty");
    w.var(u64::from(*first));
    if rest.is_empty() {
        return;
    }
    let k = best_k(*first, rest);
    let mut bits = Bits { out: Vec::with_capacity(rest.len() * 4), acc: 0, used: 0 };
    let mut prev = *first;
    for &key in rest {
        let gap = key - prev;
        prev = key;
        bits.unary(gap >> k);
        bits.low(gap, k);
    }
    let bytes = bits.finish();
    w.u8(k as u8);
    w.var(bytes.len() as u64);
    w.0.extend_from_slice(&bytes);
}

/// Reads what [`put`] wrote: the keys, ascending.
pub fn take(r: &mut Reader<'_>) -> Result<Vec<u32>, Bad> {
    let count = usize::try_from(r.var()?).map_err(|_| Short::EndsEarly)?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let first = u32::try_from(r.var()?).map_err(|_| Bad::Spelling)?;
    if count == 1 {
        return Ok(vec![first]);
    }
    let n = count - 1;
    let k = u32::from(r.u8()?);
    if k > 31 {
        return Err(Bad::Spelling);
    }
    let len = r.vcount(1)?;
    let bytes = r.take(len)?;
    // Every key spends at least one bit (its unary stop) and k more: no more keys than that.
    if n.saturating_mul(k as usize + 1) > len * 8 {
        return Err(Short::EndsEarly.into());
    }
    let mut bits = Read { b: bytes, at: 0 };
    let mut keys = Vec::with_capacity(count);
    keys.push(first);
    let mut prev = u64::from(first);
    for _ in 0..n {
        let high = bits.unary()?;
        let gap = (high << k) | bits.low(k)?;
        prev += gap;
        if prev > u64::from(u32::MAX) {
            return Err(Bad::Spelling);
        }
        keys.push(prev as u32);
    }
    // Canonical: the bits end in the last byte, and what is left of it is zero.
    if bits.at.div_ceil(8) != bytes.len() || (!bits.at.is_multiple_of(8) && bytes[bits.at / 8] >> (bits.at % 8) != 0) {
        return Err(Bad::Spelling);
    }
    Ok(keys)
}

/// The `k` that spends the fewest bits on the gaps from `first` through `rest`: near log2 of
/// the mean gap, so the three around it are tried.
fn best_k(first: u32, rest: &[u32]) -> u32 {
    let n = rest.len() as u64;
    let mean = (u64::from(*rest.last().expect("not empty") - first) + 1) / n;
    let guess = 63u32.saturating_sub(mean.max(1).leading_zeros()).min(31);
    let cost = |k: u32| {
        let mut prev = first;
        let mut bits = n * u64::from(k + 1);
        for &key in rest {
            bits += u64::from((key - prev) >> k);
            prev = key;
        }
        bits
    };
    [guess.saturating_sub(1), guess, (guess + 1).min(31)].into_iter().min_by_key(|&k| cost(k)).expect("three")
}

/// Bits being written, least significant first.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    used: u32,
}

impl Bits {
    /// The low `n` (≤ 32) bits of `v`.
    fn push(&mut self, v: u64, n: u32) {
        self.acc |= (v & ((1u64 << n) - 1)) << self.used;
        self.used += n;
        while self.used >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.used -= 8;
        }
    }
    /// `q` ones, then a zero.
    fn unary(&mut self, mut q: u32) {
        while q >= 32 {
            self.push(u64::from(u32::MAX), 32);
            q -= 32;
        }
        self.push((1u64 << q) - 1, q + 1);
    }
    fn low(&mut self, v: u32, k: u32) {
        self.push(u64::from(v), k);
    }
    fn finish(mut self) -> Vec<u8> {
        if self.used > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// Bits being read, least significant first.
struct Read<'a> {
    b: &'a [u8],
    /// Bits read so far.
    at: usize,
}

impl Read<'_> {
    fn bit(&mut self) -> Result<u64, Short> {
        let byte = *self.b.get(self.at / 8).ok_or(Short::EndsEarly)?;
        let v = (byte >> (self.at % 8)) & 1;
        self.at += 1;
        Ok(u64::from(v))
    }
    /// Ones up to the first zero (bounded by the bytes: at most 8 per byte left).
    fn unary(&mut self) -> Result<u64, Short> {
        let mut q = 0;
        while self.bit()? == 1 {
            q += 1;
        }
        Ok(q)
    }
    fn low(&mut self, k: u32) -> Result<u64, Short> {
        let mut v = 0u64;
        let mut got = 0u32;
        while got < k {
            let byte = *self.b.get(self.at / 8).ok_or(Short::EndsEarly)?;
            let offset = (self.at % 8) as u32;
            let n = (8 - offset).min(k - got);
            v |= u64::from((byte >> offset) & ((1u16 << n) - 1) as u8) << got;
            got += n;
            self.at += n as usize;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn bytes(keys: &[u32]) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        put(&mut w, keys);
        w.0
    }

    fn read(b: &[u8]) -> Result<Vec<u32>, Bad> {
        let mut r = Reader { b };
        let keys = take(&mut r)?;
        if !r.b.is_empty() {
            return Err(Bad::Spelling);
        }
        Ok(keys)
    }

    /// An even spread of 32-bit ids, as hashed keys are (a fixed xorshift, so runs agree).
    fn spread(n: usize, seed: u64) -> Vec<u32> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u32
            })
            .collect()
    }

    proptest! {
        #[test]
        fn any_keys_come_back_as_their_sorted_set(keys in prop::collection::vec(any::<u32>(), 0..300)) {
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            prop_assert_eq!(read(&bytes(&keys)).unwrap(), sorted);
        }

        #[test]
        fn clustered_keys_and_extremes_come_back(base in any::<u32>(), steps in prop::collection::vec(0u32..4, 1..100)) {
            let mut keys: Vec<u32> = steps.iter().scan(base, |k, s| { *k = k.saturating_add(*s); Some(*k) }).collect();
            keys.extend([0, u32::MAX]);
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            prop_assert_eq!(read(&bytes(&keys)).unwrap(), sorted);
        }

        #[test]
        fn no_prefix_is_read_and_no_change_panics(keys in prop::collection::vec(any::<u32>(), 1..60), flip in any::<(usize, u8)>()) {
            let b = bytes(&keys);
            for cut in 0..b.len() {
                prop_assert!(read(&b[..cut]).is_err(), "cut at {}", cut);
            }
            let mut c = b.clone();
            let i = flip.0 % c.len();
            c[i] ^= flip.1 | 1;
            let _ = read(&c);
        }
    }

    #[test]
    fn a_busy_flush_spends_about_three_and_a_half_bytes_a_key() {
        for (n, at_most) in [(46usize, 3.75), (500, 3.3), (5000, 2.9)] {
            let per_key = (0..20).map(|seed| bytes(&spread(n, seed + 1)).len()).sum::<usize>() as f64 / (20 * n) as f64;
            assert!(per_key <= at_most, "{n} keys: {per_key:.3} bytes a key");
        }
        // Dense keys (a run of ids, or duplicates) cost two bits or one.
        assert!(bytes(&(1000..2000).collect::<Vec<_>>()).len() <= 260);
        assert!(bytes(&[7; 100]).len() <= 20);
    }

    #[test]
    fn stray_bits_a_key_past_32_bits_and_a_huge_count_are_refused() {
        let mut b = bytes(&[1, 2]);
        *b.last_mut().unwrap() |= 0x80;
        assert_eq!(read(&b), Err(Bad::Spelling));
        let mut extra = bytes(&[5, 9]);
        extra[3] += 1;
        extra.push(0);
        assert_eq!(read(&extra), Err(Bad::Spelling));
        // A key of 2 and a gap of u32::MAX after it (k = 31, high part 1) runs past 32 bits.
        let mut w = Bits { out: vec![], acc: 0, used: 0 };
        w.unary(1);
        w.low(u32::MAX >> 1, 31);
        let bits = w.finish();
        let mut over = Writer(vec![]);
        over.var(2);
        over.var(2);
        over.u8(31);
        over.var(bits.len() as u64);
        over.0.extend_from_slice(&bits);
        assert_eq!(read(&over.0), Err(Bad::Spelling));
        let mut huge = Writer(vec![]);
        huge.var(u64::from(u32::MAX));
        huge.var(0);
        huge.u8(0);
        huge.var(1);
        huge.u8(0);
        assert!(matches!(read(&huge.0), Err(Bad::Short(_))));
    }
}
