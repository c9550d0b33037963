//! Parked waiters (J11, J12): who waits on which keys, and until when.
//!
//! Every waiter lives in one slot of a slab and is reachable three ways:
//! - through the per-key index (`by_key`) when it has at most `keyIndexMaxKeys` unique keys,
//!   or through the `broad` list (scanned against the bloom at each flush) when it has more;
//! - through the exact-key index (`by_exact`) for its literal routing keys;
//! - through the single deadline heap, whose root arms the journal's one timeout timer.
//!
//! Each membership records its position in the list it sits in, so removing a waiter (woken,
//! timed out or aborted) is O(keys) with no scans: lists use swap-remove and the moved entry's
//! position is fixed up. A removed waiter hands back its [`Resolve`] callback, which the
//! journal calls exactly once, after releasing its lock. Slots carry a tag that changes on every
//! registration, so a stale [`WaiterId`] (an abort arriving after a wake) matches nothing.

use super::hash::IntMap;
use super::TouchHit;

/// Called once with the hit, or `None` for a timeout, an abort or a stop.
pub type Resolve = Box<dyn FnOnce(Option<TouchHit>) + Send>;

/// A resolution decided under the journal lock, to be delivered after it is released.
pub type Settlement = (Resolve, Option<TouchHit>);

const NONE: u32 = u32::MAX;

/// Names one registered waiter, for cancelling it (abort).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaiterId(u64);

impl WaiterId {
    fn new(slot: u32, tag: u32) -> WaiterId {
        WaiterId(((tag as u64) << 32) | slot as u64)
    }
    fn slot(self) -> u32 {
        self.0 as u32
    }
    fn tag(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn to_bits(self) -> u64 {
        self.0
    }
    pub fn from_bits(bits: u64) -> WaiterId {
        WaiterId(bits)
    }
}

/// A membership: the key and where this waiter sits in that key's list.
#[derive(Clone, Copy)]
struct Member<K> {
    key: K,
    pos: u32,
}

struct Waiter {
    after_generation: u32,
    heap_pos: u32,
    /// Position in `broad`, or `NONE` for an indexed waiter.
    broad_pos: u32,
    /// Sorted by key. Indexed waiters sit in `by_key[key]` at `pos`; broad ones only keep keys.
    keys: Box<[Member<u32>]>,
    /// Sorted by key; each sits in `by_exact[key]` at `pos`.
    exact: Box<[Member<u64>]>,
    resolve: Resolve,
}

struct Slot {
    tag: u32,
    next_free: u32,
    waiter: Option<Waiter>,
}

#[derive(Clone, Copy)]
struct HeapEntry {
    deadline: u64,
    slot: u32,
}

/// What to register: unique sorted keys, unique sorted exact keys, and the deadline on the
/// journal's monotonic clock.
pub struct WaiterSpec {
    pub after_generation: u32,
    pub keys: Vec<u32>,
    pub exact: Vec<u64>,
    pub broad: bool,
    pub deadline: u64,
}

#[derive(Default)]
pub struct WaiterRegistry {
    slots: Vec<Slot>,
    free: Option<u32>,
    by_key: IntMap<u32, Vec<u32>>,
    by_exact: IntMap<u64, Vec<u32>>,
    broad: Vec<u32>,
    heap: Vec<HeapEntry>,
    active: usize,
    /// Tag of the next registration. One counter for all slots, so the slab can be released
    /// when idle without an old id ever matching a new waiter.
    next_tag: u32,
}

/// Above this many slots an idle registry releases its memory (B14).
const KEEP_SLOTS: usize = 1024;

impl WaiterRegistry {
    pub fn new() -> WaiterRegistry {
        WaiterRegistry::default()
    }

    /// Waiters registered and not yet resolved.
    pub fn len(&self) -> usize {
        self.active
    }

    pub fn is_empty(&self) -> bool {
        self.active == 0
    }

    pub fn heap_len(&self) -> usize {
        self.heap.len()
    }

    pub fn broad_len(&self) -> usize {
        self.broad.len()
    }

    pub fn has_keyed(&self) -> bool {
        !self.by_key.is_empty()
    }

    pub fn has_exact(&self) -> bool {
        !self.by_exact.is_empty()
    }

    /// The earliest deadline, which the journal's timer is armed for (J12).
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.first().map(|e| e.deadline)
    }

    pub fn insert(&mut self, spec: WaiterSpec, resolve: Resolve) -> WaiterId {
        let slot = match self.free {
            Some(s) => {
                self.free = match self.slots[s as usize].next_free {
                    NONE => None,
                    n => Some(n),
                };
                s
            }
            None => {
                self.slots.push(Slot { tag: 0, next_free: NONE, waiter: None });
                (self.slots.len() - 1) as u32
            }
        };
        let tag = self.next_tag;
        self.next_tag = self.next_tag.wrapping_add(1);
        let mut keys: Box<[Member<u32>]> = spec.keys.iter().map(|&key| Member { key, pos: NONE }).collect();
        let mut exact: Box<[Member<u64>]> = spec.exact.iter().map(|&key| Member { key, pos: NONE }).collect();
        let broad_pos = if spec.broad {
            self.broad.push(slot);
            (self.broad.len() - 1) as u32
        } else {
            for m in keys.iter_mut() {
                let list = self.by_key.entry(m.key).or_default();
                m.pos = list.len() as u32;
                list.push(slot);
            }
            NONE
        };
        for m in exact.iter_mut() {
            let list = self.by_exact.entry(m.key).or_default();
            m.pos = list.len() as u32;
            list.push(slot);
        }
        let heap_pos = self.heap.len() as u32;
        self.heap.push(HeapEntry { deadline: spec.deadline, slot });
        let s = &mut self.slots[slot as usize];
        s.tag = tag;
        s.waiter = Some(Waiter { after_generation: spec.after_generation, heap_pos, broad_pos, keys, exact, resolve });
        let id = WaiterId::new(slot, tag);
        self.sift_up(heap_pos as usize);
        self.active += 1;
        id
    }

    /// Removes the waiter if it is still registered (an abort), handing back its callback.
    pub fn cancel(&mut self, id: WaiterId) -> Option<Resolve> {
        let s = self.slots.get(id.slot() as usize)?;
        if s.tag != id.tag() || s.waiter.is_none() {
            return None;
        }
        let r = self.remove(id.slot());
        self.release_if_idle();
        Some(r)
    }

    /// Wakes the indexed waiters of `key` that wait for generations before `hit.generation`.
    pub fn wake_key(&mut self, key: u32, hit: TouchHit, out: &mut Vec<Settlement>) -> usize {
        let mut woken = 0;
        let mut i = 0;
        loop {
            let slot = match self.by_key.get(&key) {
                Some(list) if i < list.len() => list[i],
                _ => break,
            };
            if hit.generation > self.waiter(slot).after_generation {
                // Swap-remove moves another waiter to `i`: look at `i` again.
                out.push((self.remove(slot), Some(hit)));
                woken += 1;
            } else {
                i += 1;
            }
        }
        self.release_if_idle();
        woken
    }

    /// Wakes the waiters on the exact key `key` (J9: with key id 0 in `hit`).
    pub fn wake_exact(&mut self, key: u64, hit: TouchHit, out: &mut Vec<Settlement>) -> usize {
        let mut woken = 0;
        let mut i = 0;
        loop {
            let slot = match self.by_exact.get(&key) {
                Some(list) if i < list.len() => list[i],
                _ => break,
            };
            if hit.generation > self.waiter(slot).after_generation {
                out.push((self.remove(slot), Some(hit)));
                woken += 1;
            } else {
                i += 1;
            }
        }
        self.release_if_idle();
        woken
    }

    /// Wakes the broad waiters with a key for which `touched(key, after_generation)` holds.
    pub fn wake_broad(
        &mut self,
        hit: TouchHit,
        touched: impl Fn(u32, u32) -> bool,
        out: &mut Vec<Settlement>,
    ) -> usize {
        let mut woken = 0;
        let mut i = 0;
        while i < self.broad.len() {
            let slot = self.broad[i];
            let w = self.waiter(slot);
            let qualifies =
                hit.generation > w.after_generation && w.keys.iter().any(|m| touched(m.key, w.after_generation));
            if qualifies {
                out.push((self.remove(slot), Some(hit)));
                woken += 1;
            } else {
                i += 1;
            }
        }
        self.release_if_idle();
        woken
    }

    /// Wakes every waiter waiting for a generation before `hit.generation` (overflow, J9), or
    /// every waiter at all when `unconditional` (a new epoch, B28).
    pub fn wake_all(&mut self, hit: TouchHit, unconditional: bool, out: &mut Vec<Settlement>) -> usize {
        let mut woken = 0;
        for slot in 0..self.slots.len() as u32 {
            let qualifies = matches!(&self.slots[slot as usize].waiter,
                Some(w) if unconditional || hit.generation > w.after_generation);
            if qualifies {
                out.push((self.remove(slot), Some(hit)));
                woken += 1;
            }
        }
        self.release_if_idle();
        woken
    }

    /// Removes every waiter whose deadline is at or before `now` (J12), in deadline order.
    pub fn expire(&mut self, now: u64, out: &mut Vec<Settlement>) -> usize {
        let mut expired = 0;
        while let Some(&HeapEntry { deadline, slot }) = self.heap.first() {
            if deadline > now {
                break;
            }
            out.push((self.remove(slot), None));
            expired += 1;
        }
        self.release_if_idle();
        expired
    }

    /// Removes every waiter (stop, B29; a new epoch, B28), each with `None`.
    pub fn take_all(&mut self, out: &mut Vec<Settlement>) -> usize {
        let n = self.active;
        for s in self.slots.drain(..) {
            if let Some(w) = s.waiter {
                out.push((w.resolve, None));
            }
        }
        let next_tag = self.next_tag;
        *self = WaiterRegistry { next_tag, ..WaiterRegistry::default() };
        n
    }

    /// Gives back the memory of a registry that has no waiters left after a burst.
    fn release_if_idle(&mut self) {
        if self.active == 0 && self.slots.capacity() > KEEP_SLOTS {
            let next_tag = self.next_tag;
            *self = WaiterRegistry { next_tag, ..WaiterRegistry::default() };
        }
    }

    fn waiter(&self, slot: u32) -> &Waiter {
        self.slots[slot as usize].waiter.as_ref().expect("indexed slot holds a waiter")
    }

    fn waiter_mut(&mut self, slot: u32) -> &mut Waiter {
        self.slots[slot as usize].waiter.as_mut().expect("indexed slot holds a waiter")
    }

    fn remove(&mut self, slot: u32) -> Resolve {
        let s = &mut self.slots[slot as usize];
        let w = s.waiter.take().expect("removing a live waiter");
        s.next_free = self.free.unwrap_or(NONE);
        self.free = Some(slot);
        self.active -= 1;

        if w.broad_pos == NONE {
            for m in w.keys.iter() {
                self.unlink_key(m.key, m.pos);
            }
        } else {
            let pos = w.broad_pos as usize;
            self.broad.swap_remove(pos);
            if let Some(&moved) = self.broad.get(pos) {
                self.waiter_mut(moved).broad_pos = pos as u32;
            }
        }
        for m in w.exact.iter() {
            self.unlink_exact(m.key, m.pos);
        }
        self.heap_remove(w.heap_pos as usize);
        w.resolve
    }

    fn unlink_key(&mut self, key: u32, pos: u32) {
        let list = self.by_key.get_mut(&key).expect("indexed key has a list");
        list.swap_remove(pos as usize);
        match list.get(pos as usize) {
            Some(&moved) => {
                let w = self.slots[moved as usize].waiter.as_mut().expect("listed waiter");
                let i = w.keys.binary_search_by_key(&key, |m| m.key).expect("member of its key");
                w.keys[i].pos = pos;
            }
            None if list.is_empty() => {
                self.by_key.remove(&key);
            }
            None => {}
        }
    }

    fn unlink_exact(&mut self, key: u64, pos: u32) {
        let list = self.by_exact.get_mut(&key).expect("indexed exact key has a list");
        list.swap_remove(pos as usize);
        match list.get(pos as usize) {
            Some(&moved) => {
                let w = self.slots[moved as usize].waiter.as_mut().expect("listed waiter");
                let i = w.exact.binary_search_by_key(&key, |m| m.key).expect("member of its exact key");
                w.exact[i].pos = pos;
            }
            None if list.is_empty() => {
                self.by_exact.remove(&key);
            }
            None => {}
        }
    }

    // ---- the deadline heap (a binary min-heap; each waiter knows its position)

    fn set_heap_pos(&mut self, i: usize) {
        let slot = self.heap[i].slot;
        self.waiter_mut(slot).heap_pos = i as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i].deadline >= self.heap[parent].deadline {
                break;
            }
            self.heap.swap(i, parent);
            self.set_heap_pos(i);
            i = parent;
        }
        self.set_heap_pos(i);
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right].deadline < self.heap[left].deadline { right } else { left };
            if self.heap[child].deadline >= self.heap[i].deadline {
                break;
            }
            self.heap.swap(i, child);
            self.set_heap_pos(i);
            i = child;
        }
        self.set_heap_pos(i);
    }

    /// Removes the entry at `i`, whose waiter has already left its slot.
    fn heap_remove(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        self.heap.swap_remove(i);
        if i < last {
            self.sift_down(i);
            self.sift_up(i);
        }
        if self.heap.capacity() > 1024 && self.heap.len() < self.heap.capacity() / 4 {
            self.heap.shrink_to(self.heap.len() * 2);
        }
    }

    /// Checks every index against the slab (tests).
    #[cfg(test)]
    pub fn check_invariants(&self) {
        let mut live = 0;
        for (slot, s) in self.slots.iter().enumerate() {
            let Some(w) = &s.waiter else { continue };
            live += 1;
            let slot = slot as u32;
            assert_eq!(self.heap[w.heap_pos as usize].slot, slot);
            if w.broad_pos == NONE {
                for m in w.keys.iter() {
                    assert_eq!(self.by_key[&m.key][m.pos as usize], slot);
                }
            } else {
                assert_eq!(self.broad[w.broad_pos as usize], slot);
            }
            for m in w.exact.iter() {
                assert_eq!(self.by_exact[&m.key][m.pos as usize], slot);
            }
        }
        assert_eq!(live, self.active);
        assert_eq!(self.heap.len(), self.active);
        for i in 1..self.heap.len() {
            assert!(self.heap[(i - 1) / 2].deadline <= self.heap[i].deadline, "heap order");
        }
        let indexed: usize = self.by_key.values().map(Vec::len).sum();
        let expected: usize = self
            .slots
            .iter()
            .filter_map(|s| s.waiter.as_ref())
            .filter(|w| w.broad_pos == NONE)
            .map(|w| w.keys.len())
            .sum();
        assert_eq!(indexed, expected);
        assert!(self.by_key.values().all(|l| !l.is_empty()));
        assert!(self.by_exact.values().all(|l| !l.is_empty()));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    type Log = Arc<Mutex<Vec<(u32, Option<TouchHit>)>>>;

    fn resolve(log: &Log, name: u32) -> Resolve {
        let log = log.clone();
        Box::new(move |hit| log.lock().unwrap().push((name, hit)))
    }

    fn spec(after: u32, keys: &[u32], exact: &[u64], deadline: u64) -> WaiterSpec {
        WaiterSpec { after_generation: after, keys: keys.to_vec(), exact: exact.to_vec(), broad: false, deadline }
    }

    fn hit(generation: u32, key_id: u32) -> TouchHit {
        TouchHit { generation, key_id, bucket_max_source_offset_seq: -1, flush_at_ms: 0, bucket_start_ms: 0 }
    }

    fn deliver(out: Vec<Settlement>) {
        for (r, h) in out {
            r(h);
        }
    }

    #[test]
    fn wake_by_key_respects_after_generation_and_unlinks_everywhere() {
        let log: Log = Default::default();
        let mut reg = WaiterRegistry::new();
        reg.insert(spec(0, &[1, 2], &[], 100), resolve(&log, 0));
        reg.insert(spec(5, &[2], &[], 50), resolve(&log, 1));
        reg.insert(spec(0, &[2, 3], &[9], 70), resolve(&log, 2));
        reg.check_invariants();
        let mut out = Vec::new();
        assert_eq!(reg.wake_key(2, hit(3, 2), &mut out), 2);
        deliver(out);
        reg.check_invariants();
        assert_eq!(reg.len(), 1);
        let mut names: Vec<u32> = log.lock().unwrap().iter().map(|x| x.0).collect();
        names.sort();
        assert_eq!(names, vec![0, 2]);
        // Waiter 1 waits for generations after 5.
        let mut out = Vec::new();
        assert_eq!(reg.wake_key(2, hit(5, 2), &mut out), 0);
        assert_eq!(reg.wake_key(2, hit(6, 2), &mut out), 1);
        assert!(reg.is_empty());
        reg.check_invariants();
        assert_eq!(reg.next_deadline(), None);
    }

    #[test]
    fn cancel_is_exactly_once_and_stale_ids_match_nothing() {
        let log: Log = Default::default();
        let mut reg = WaiterRegistry::new();
        let a = reg.insert(spec(0, &[1], &[], 10), resolve(&log, 0));
        assert!(reg.cancel(a).is_some());
        assert!(reg.cancel(a).is_none());
        // The slot is reused with a new tag: the old id does not cancel the new waiter.
        let b = reg.insert(spec(0, &[1], &[], 10), resolve(&log, 1));
        assert_ne!(a, b);
        assert!(reg.cancel(a).is_none());
        assert_eq!(reg.len(), 1);
        assert!(reg.cancel(b).is_some());
        reg.check_invariants();
    }

    #[test]
    fn expiry_pops_in_deadline_order_and_only_due_waiters() {
        let log: Log = Default::default();
        let mut reg = WaiterRegistry::new();
        for (i, d) in [50u64, 10, 40, 20, 30, 60].into_iter().enumerate() {
            reg.insert(spec(0, &[i as u32], &[], d), resolve(&log, i as u32));
        }
        assert_eq!(reg.next_deadline(), Some(10));
        let mut out = Vec::new();
        assert_eq!(reg.expire(35, &mut out), 3);
        deliver(out);
        assert_eq!(log.lock().unwrap().iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3, 4]);
        assert!(log.lock().unwrap().iter().all(|x| x.1.is_none()));
        assert_eq!(reg.next_deadline(), Some(40));
        reg.check_invariants();
    }

    #[test]
    fn broad_and_exact_waiters() {
        let log: Log = Default::default();
        let mut reg = WaiterRegistry::new();
        let mut s = spec(0, &[1, 2, 3], &[], 10);
        s.broad = true;
        reg.insert(s, resolve(&log, 0));
        let mut s = spec(0, &[4, 5, 6], &[77], 10);
        s.broad = true;
        reg.insert(s, resolve(&log, 1));
        reg.insert(spec(0, &[], &[77, 78], 10), resolve(&log, 2));
        reg.check_invariants();
        assert_eq!(reg.broad_len(), 2);
        let mut out = Vec::new();
        assert_eq!(reg.wake_exact(77, hit(1, 0), &mut out), 2);
        reg.check_invariants();
        assert_eq!(reg.broad_len(), 1);
        assert_eq!(reg.wake_broad(hit(1, 0), |k, _| k == 9, &mut out), 0);
        assert_eq!(reg.wake_broad(hit(1, 0), |k, _| k == 3, &mut out), 1);
        assert!(reg.is_empty());
        reg.check_invariants();
    }

    #[test]
    fn randomized_indexes_stay_consistent() {
        let log: Log = Default::default();
        let mut reg = WaiterRegistry::new();
        let mut ids = Vec::new();
        let mut x: u64 = 12345;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..4000u64 {
            match next() % 5 {
                0 | 1 => {
                    let n = 1 + next() as usize % 5;
                    let mut keys: Vec<u32> = (0..n).map(|_| (next() % 20) as u32).collect();
                    keys.sort();
                    keys.dedup();
                    let mut exact: Vec<u64> = (0..next() % 3).map(|_| next() % 6).collect();
                    exact.sort();
                    exact.dedup();
                    let mut s = spec((next() % 4) as u32, &keys, &exact, round + next() % 50);
                    s.broad = next() % 4 == 0;
                    ids.push(reg.insert(s, resolve(&log, round as u32)));
                }
                2 => {
                    if !ids.is_empty() {
                        let i = next() as usize % ids.len();
                        reg.cancel(ids.swap_remove(i));
                    }
                }
                3 => {
                    let mut out = Vec::new();
                    reg.wake_key((next() % 20) as u32, hit((next() % 6) as u32, 0), &mut out);
                    reg.wake_exact(next() % 6, hit((next() % 6) as u32, 0), &mut out);
                }
                _ => {
                    let mut out = Vec::new();
                    reg.expire(round, &mut out);
                }
            }
            reg.check_invariants();
        }
        let mut out = Vec::new();
        let left = reg.len();
        assert_eq!(reg.take_all(&mut out), left);
        assert_eq!(out.len(), left);
        assert!(reg.is_empty());
    }
}
