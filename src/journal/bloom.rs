//! The time-aware bloom filter (J4, J5): `2^pow2` u32 slots, each holding the last generation
//! that set it.
//!
//! A key sets `k` slots when its bucket flushes; "touched since generation g" is answered by the
//! smallest generation among the key's slots being greater than g. Slots only grow (within an
//! epoch), so there are no false negatives; collisions give false positives. Slot positions are
//! the reference's, so the same touch sequence gives the same answers.
//!
//! The slot array is requested on the journal's first touch (B14): a journal that was never
//! touched holds no filter memory, and reads before that see all slots at generation 0, which is
//! what a freshly allocated array would answer. A large array is zeroed on a background thread
//! ([`SlotArray::zeroed_in_background`]); until it arrives, writes go to a sparse map of the
//! same slots, read exactly as the array would be, and are copied into the array when it does.
//! The answers are the same either way.

use super::hash::IntMap;
use super::slots::{PendingArray, SlotArray};

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
    slots: Slots,
}

/// Arrays at least this large are zeroed in the background.
const BACKGROUND_BYTES: usize = 2 << 20;

/// Past this many sparse writes (an eighth of the slots) the map costs more than the array.
fn sparse_limit(mask: u32) -> usize {
    (mask as usize + 1) / 8
}

enum Slots {
    /// Never touched (B14): every slot reads 0.
    Unallocated,
    /// The array is being zeroed; `sparse` holds the slots written meanwhile (absent = 0).
    Arriving {
        array: PendingArray,
        sparse: IntMap<u32, u32>,
    },
    Dense(SlotArray),
}

impl GenerationBloom {
    /// `pow2` and `k` are already clamped (J2).
    pub fn new(pow2: u32, k: u32) -> GenerationBloom {
        GenerationBloom { k, mask: (1u32 << pow2) - 1, slots: Slots::Unallocated }
    }

    /// Configured slot count (whether allocated or not).
    pub fn slot_count(&self) -> usize {
        self.mask as usize + 1
    }

    pub fn k(&self) -> u32 {
        self.k
    }

    /// Bytes of the slot array: 0 until the first touch, the array's size from then on (also
    /// while it is being zeroed).
    pub fn allocated_bytes(&self) -> usize {
        match self.slots {
            Slots::Unallocated => 0,
            Slots::Arriving { .. } | Slots::Dense(_) => self.slot_count() * 4,
        }
    }

    /// Requests the slot array if it is not yet (the journal does so at its first touch, a
    /// coalescing window before the first write).
    #[inline]
    pub fn ensure_allocated(&mut self) {
        if let Slots::Unallocated = self.slots {
            let len = self.slot_count();
            self.slots = if len * 4 >= BACKGROUND_BYTES {
                Slots::Arriving { array: SlotArray::zeroed_in_background(len), sparse: IntMap::default() }
            } else {
                Slots::Dense(SlotArray::zeroed(len))
            };
        }
    }

    /// Switches to the array once it has arrived (waiting for it if `block`), with the sparse
    /// writes copied in. The journal polls at every flush.
    pub fn arrive(&mut self, block: bool) {
        let Slots::Arriving { array, sparse } = &self.slots else { return };
        let Some(mut dense) = (if block { Some(array.wait()) } else { array.try_take() }) else { return };
        for (&pos, &generation) in sparse {
            dense[pos as usize] = generation;
        }
        self.slots = Slots::Dense(dense);
    }

    /// Makes room for `keys` more marks (a flush calls it with its bucket's size), so a sparse
    /// map grows once rather than rehashing as it fills.
    pub fn reserve(&mut self, keys: usize) {
        if let Slots::Arriving { sparse, .. } = &mut self.slots {
            let want = (sparse.len() + keys * self.k as usize).min(sparse_limit(self.mask));
            sparse.reserve(want.saturating_sub(sparse.len()));
        }
    }

    /// Records that `key_id` was touched in `generation`.
    #[inline]
    pub fn mark(&mut self, key_id: u32, generation: u32) {
        let (k, mask) = (self.k, self.mask);
        self.ensure_allocated();
        if let Slots::Arriving { sparse, .. } = &self.slots {
            // Past an eighth of the slots the map costs more than the array: wait for it.
            if sparse.len() >= sparse_limit(mask) {
                self.arrive(true);
            }
        }
        match &mut self.slots {
            Slots::Dense(slots) => {
                for pos in slot_positions(key_id, k, mask) {
                    slots[pos as usize] = generation;
                }
            }
            Slots::Arriving { sparse, .. } => {
                for pos in slot_positions(key_id, k, mask) {
                    sparse.insert(pos, generation);
                }
            }
            Slots::Unallocated => unreachable!("allocated above"),
        }
    }

    /// [`GenerationBloom::mark`] for each `(key_id, generation)`, given in the order they were
    /// touched (generations not decreasing), writing the slots in address order: a full
    /// filter written at random positions misses the caches at nearly every write (~10 µs a
    /// flush of 8 keys replayed into a 16 MiB filter), in order it streams.
    pub fn mark_all(&mut self, marks: &[(u32, u32)]) {
        let (k, mask) = (self.k, self.mask);
        let Slots::Dense(slots) = &mut self.slots else {
            for &(key, generation) in marks {
                self.mark(key, generation);
            }
            return;
        };
        let mut writes: Vec<(u32, u32)> = Vec::with_capacity(marks.len() * k as usize);
        for &(key, generation) in marks {
            writes.extend(slot_positions(key, k, mask).map(|pos| (pos, generation)));
        }
        // By slot, then generation: the last write to a slot is its latest generation, as when
        // marked one by one.
        writes.sort_unstable();
        for (pos, generation) in writes {
            slots[pos as usize] = generation;
        }
    }

    /// The smallest generation among the key's slots: an upper bound of the key's last touch.
    #[inline]
    pub fn min_generation(&self, key_id: u32) -> u32 {
        match &self.slots {
            Slots::Unallocated => 0,
            Slots::Dense(slots) => {
                slot_positions(key_id, self.k, self.mask).map(|pos| slots[pos as usize]).min().unwrap_or(0)
            }
            Slots::Arriving { sparse, .. } => slot_positions(key_id, self.k, self.mask)
                .map(|pos| sparse.get(&pos).copied().unwrap_or(0))
                .min()
                .unwrap_or(0),
        }
    }

    #[inline]
    pub fn touched_after(&self, key_id: u32, since: u32) -> bool {
        self.min_generation(key_id) > since
    }

    /// A copy of the slots (`None` while unallocated), waiting for an arriving array.
    pub fn to_vec(&mut self) -> Option<Vec<u32>> {
        self.arrive(true);
        match &self.slots {
            Slots::Dense(slots) => Some(slots.to_vec()),
            _ => None,
        }
    }

    /// Takes up slots saved by [`GenerationBloom::to_vec`]; false (and nothing changes) unless
    /// they are as many as this filter's.
    pub fn load(&mut self, slots: Option<Vec<u32>>) -> bool {
        self.slots = match slots {
            Some(s) if s.len() == self.slot_count() => Slots::Dense(SlotArray::from_slots(s)),
            None => Slots::Unallocated,
            Some(_) => return false,
        };
        true
    }

    /// Back to unallocated (a new epoch). An array still arriving is freed when it does.
    pub fn clear(&mut self) {
        self.slots = Slots::Unallocated;
    }

    /// Whether the array has arrived (tests).
    #[cfg(test)]
    fn is_dense(&self) -> bool {
        matches!(self.slots, Slots::Dense(_))
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
    fn marks_written_in_address_order_leave_the_slots_marking_one_by_one_does() {
        // Keys that share slots across generations (a small filter), in touch order.
        let marks: Vec<(u32, u32)> = (1..=2_000u32).map(|g| (g.wrapping_mul(2_654_435_761) % 500, 1 + g / 3)).collect();
        for dense_first in [true, false] {
            let (mut one, mut all) = (GenerationBloom::new(10, 4), GenerationBloom::new(10, 4));
            if dense_first {
                // A filter taken up from a snapshot is dense: the ordered path.
                assert!(one.load(Some(vec![0; 1 << 10])) && all.load(Some(vec![0; 1 << 10])));
            }
            for &(key, generation) in &marks {
                one.mark(key, generation);
            }
            all.mark_all(&marks);
            assert_eq!(one.to_vec(), all.to_vec(), "dense before: {dense_first}");
        }
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
    fn sparse_writes_answer_as_the_array_does_and_are_copied_into_it() {
        let mut dense = GenerationBloom::new(22, 4);
        dense.ensure_allocated();
        dense.arrive(true);
        assert!(dense.is_dense());
        let mut sparse = GenerationBloom::new(22, 4);
        sparse.ensure_allocated();
        assert_eq!(sparse.allocated_bytes(), 16 << 20, "counted from the request on");
        let mut x = 0x1234_5678u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let keys: Vec<u32> = (0..50_000).map(|_| next()).collect();
        for (i, &k) in keys.iter().enumerate() {
            let generation = 1 + (i / 1000) as u32;
            dense.mark(k, generation);
            sparse.mark(k, generation);
        }
        assert!(!sparse.is_dense(), "50,000 keys stay below an eighth of the slots");
        let probes: Vec<u32> = keys.iter().copied().step_by(7).chain((0..20_000).map(|_| next())).collect();
        for &k in &probes {
            assert_eq!(sparse.min_generation(k), dense.min_generation(k), "key {k}");
        }
        sparse.arrive(true);
        assert!(sparse.is_dense());
        for &k in &probes {
            assert_eq!(sparse.min_generation(k), dense.min_generation(k), "key {k} after arrival");
        }
        // Past an eighth of the slots the bloom waits for its array.
        let mut big = GenerationBloom::new(22, 4);
        big.ensure_allocated();
        for _ in 0..140_000 {
            big.mark(next(), 1);
        }
        assert!(big.is_dense());
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
