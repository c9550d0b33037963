//! The time-aware bloom filter (J4, J5): `2^pow2` u32 slots, each holding the last generation
//! that set it.
//!
//! A key sets `k` slots when its bucket flushes; "touched since generation g" is answered by the
//! smallest generation among the key's slots being greater than g. Slots only grow (within an
//! epoch), so there are no false negatives; collisions give false positives. Slot positions are
//! the reference's, so the same touch sequence gives the same answers.
//!
//! The slot array is allocated on the journal's first touch (B14): a journal that was never
//! touched holds no filter memory, and reads before that see all slots at generation 0, which is what a
//! freshly allocated array would answer.

use super::slots::SlotArray;

/// Used as the stride when the mixed key is 0, so a key never maps all k positions to one slot.
const ZERO_STRIDE: u32 = 0x9e37_79b9;

/// murmur3's 32-bit finaliser (J4).
#[inline]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The k slot positions of `key_id` in a filter of `mask + 1` slots (J4).
#[inline]
pub fn slot_positions(key_id: u32, k: u32, mask: u32) -> impl Iterator<Item = u32> {
    let h1 = key_id;
    let h2 = match fmix32(h1) {
        0 => ZERO_STRIDE,
        h => h,
    };
    (0..k).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & mask)
}

pub struct GenerationBloom {
    k: u32,
    mask: u32,
    /// `None` until the first key is written (B14).
    slots: Option<SlotArray>,
}

impl GenerationBloom {
    /// `pow2` and `k` are already clamped (J2).
    pub fn new(pow2: u32, k: u32) -> GenerationBloom {
        GenerationBloom { k, mask: (1u32 << pow2) - 1, slots: None }
    }

    /// Configured slot count (whether allocated or not).
    pub fn slot_count(&self) -> usize {
        self.mask as usize + 1
    }

    pub fn k(&self) -> u32 {
        self.k
    }

    /// Bytes held by the slot array: 0 until the first write.
    pub fn allocated_bytes(&self) -> usize {
        self.slots.as_ref().map_or(0, |s| s.len() * 4)
    }

    /// Allocates the slot array if it is not yet (the journal does so at its first touch).
    #[inline]
    pub fn ensure_allocated(&mut self) {
        if self.slots.is_none() {
            self.slots = Some(SlotArray::zeroed(self.mask as usize + 1));
        }
    }

    /// Records that `key_id` was touched in `generation`.
    #[inline]
    pub fn mark(&mut self, key_id: u32, generation: u32) {
        let (k, mask) = (self.k, self.mask);
        // Zeroed allocation: pages are only backed once written.
        let slots = self.slots.get_or_insert_with(|| SlotArray::zeroed(mask as usize + 1));
        for pos in slot_positions(key_id, k, mask) {
            slots[pos as usize] = generation;
        }
    }

    /// The smallest generation among the key's slots: an upper bound of the key's last touch.
    #[inline]
    pub fn min_generation(&self, key_id: u32) -> u32 {
        let Some(slots) = &self.slots else { return 0 };
        slot_positions(key_id, self.k, self.mask).map(|pos| slots[pos as usize]).min().unwrap_or(0)
    }

    /// J5 without the overflow shortcut (the journal applies it).
    #[inline]
    pub fn touched_after(&self, key_id: u32, since: u32) -> bool {
        self.min_generation(key_id) > since
    }

    /// Forgets everything (new epoch, B28) and releases the slot array.
    pub fn clear(&mut self) {
        self.slots = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(key: u32) -> Vec<u32> {
        slot_positions(key, 4, (1 << 22) - 1).collect()
    }

    #[test]
    fn positions_match_the_reference_examples() {
        assert_eq!(fmix32(3_117_452_744), 0x65e1_7510);
        assert_eq!(slots(3_117_452_744), vec![1_084_872, 3_277_528, 1_275_880, 3_468_536]);
        assert_eq!(fmix32(2_528_729_918), 0x54b7_a9a1);
        assert_eq!(slots(2_528_729_918), vec![3_758_910, 3_212_511, 2_666_112, 2_119_713]);
        assert_eq!(fmix32(0), 0);
        assert_eq!(slots(0), vec![0, 3_635_641, 3_076_978, 2_518_315]);
    }

    #[test]
    fn unallocated_until_written_and_same_answers_after() {
        let mut b = GenerationBloom::new(22, 4);
        assert_eq!(b.allocated_bytes(), 0);
        assert_eq!(b.slot_count(), 1 << 22);
        assert!(!b.touched_after(7, 0));
        assert_eq!(b.min_generation(7), 0);
        b.mark(7, 3);
        assert_eq!(b.allocated_bytes(), 16 << 20);
        assert!(b.touched_after(7, 2));
        assert!(!b.touched_after(7, 3));
        assert!(!b.touched_after(8, 0));
        b.clear();
        assert_eq!(b.allocated_bytes(), 0);
        assert!(!b.touched_after(7, 0));
    }

    #[test]
    fn the_smallest_slot_decides() {
        // A tiny filter: many keys share slots, so a key is "touched" only once all its slots are.
        let mut b = GenerationBloom::new(10, 4);
        b.mark(1, 5);
        let first: Vec<u32> = slot_positions(1, 4, 1023).collect();
        // Another key sharing no slot with key 1 is untouched.
        let other = (2..10_000).find(|&k| slot_positions(k, 4, 1023).all(|p| !first.contains(&p))).unwrap();
        assert!(!b.touched_after(other, 0));
        b.mark(other, 6);
        assert_eq!(b.min_generation(1), 5);
        assert_eq!(b.min_generation(other), 6);
    }
}
