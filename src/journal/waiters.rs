//! Parked waiters (J11, J12): who waits on which keys, and until when.
//!
//! Every waiter lives in one slot of a slab and is reachable three ways:
//! - through the per-key index (`by_key`) when it has at most `keyIndexMaxKeys` unique keys,
//!   or through the `broad` list (scanned against the bloom at each flush) when it has more;
//! - through the exact-key index (`by_exact`) for its literal routing keys;
//! - through the single deadline heap, whose root arms the journal's one timeout timer.
//!
//! Index entries name a slot *and* the tag of the registration that put them there, and are
//! removed lazily: taking a waiter out (woken, timed out, aborted) only empties its slot, which
//! makes all its entries stale at once. Stale entries are skipped and dropped whenever a list is
//! read (a wake) or about to grow, and all indexes are compacted when they hold more than twice
//! the live entries, so memory stays proportional to the parked waiters and waking 10,000 of
//! 100,000 waiters touches only the lists of the touched keys. Tags also make a stale
//! [`WaiterId`] (an abort arriving after a wake) match nothing.
//!
//! A removed waiter hands back its [`Waker`], which the journal calls exactly once, after
//! releasing its lock. The waker is stored inline in the slot (the JS binding's is a promise
//! ticket), and so are up to four key ids, so parking a small waiter allocates nothing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use smallvec::SmallVec;

/// A waiter's key ids: up to four inline (most waits name one to four keys).
pub type KeyIds = SmallVec<[u32; 4]>;

use super::hash::IntMap;
use super::{Epoch, TouchHit};

/// Where the journal stood when it settled a waiter without a touch (its deadline passed, or
/// the journal stopped): the answer reports this, not what the journal holds by the time the
/// answer is delivered. Delivery runs after the lock is released, and a flush from another
/// thread (an activation's, a tick's) may come in between; a timeout answered with that later
/// cursor would tell its client it had heard a flush its waiter never took part in, and the
/// client's next wait, from that cursor, would miss what the flush held for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    pub epoch: Epoch,
    pub generation: u32,
    pub last_flushed_source_offset: i64,
    pub last_flush_at_ms: i64,
    pub last_bucket_start_ms: i64,
}

impl Standing {
    /// The cursor a client gets: `epoch:generation`.
    pub fn cursor(&self) -> String {
        super::format_cursor(self.epoch, self.generation)
    }

    /// The last flush's fields a wait's answer carries: (bucket max source offset, flush ms,
    /// bucket start ms).
    pub fn bucket(&self) -> (i64, i64, i64) {
        (self.last_flushed_source_offset, self.last_flush_at_ms, self.last_bucket_start_ms)
    }
}

/// What resolves a waiter: called once with the hit, or `None` for a timeout, an abort or a
/// stop.
pub trait Waker: Send + 'static {
    fn wake(self, hit: Option<TouchHit>);

    /// [`Waker::wake`], told where the journal stood if it settled the waiter without a touch
    /// ([`Standing`]); a waker that answers with the journal's cursor answers with that one.
    fn settle(self, hit: Option<TouchHit>, at: Option<Standing>)
    where
        Self: Sized,
    {
        let _ = at;
        self.wake(hit)
    }

    /// Hints that this waker is woken soon (delivery calls it a few waiters ahead), so it can
    /// start loading what waking it reads.
    #[inline]
    fn prefetch(&self) {}
}

/// The general-purpose waker: a boxed callback, given where the journal stood when it settled
/// the waiter without a touch.
pub type Resolve = Box<dyn FnOnce(Option<TouchHit>, Option<Standing>) + Send>;

impl Waker for Resolve {
    fn wake(self, hit: Option<TouchHit>) {
        self(hit, None)
    }

    fn settle(self, hit: Option<TouchHit>, at: Option<Standing>) {
        self(hit, at)
    }
}

/// A resolution decided under the journal lock, to be delivered after it is released.
pub struct Settlement<W = Resolve> {
    pub waker: W,
    pub hit: Option<TouchHit>,
    /// Set by the journal for a waiter settled without a touch ([`Standing`]).
    pub at: Option<Standing>,
    /// The waiter's registration order (its tag), so a flush can resolve the waiters it woke
    /// in the order they were registered rather than by key: see [`sort_for_delivery`].
    order: u32,
}

impl<W> Settlement<W> {
    /// A resolution of a waiter that was never parked (resolved at registration or refused).
    pub fn immediate(waker: W, hit: Option<TouchHit>) -> Self {
        Settlement { waker, hit, at: None, order: u32::MAX }
    }

    /// This settlement, marked with where the journal stands ([`Standing`]).
    pub fn at(self, at: Standing) -> Self {
        Settlement { at: Some(at), ..self }
    }
}

/// Puts settlements into registration order before they are delivered.
///
/// A flush finds its waiters key by key, which scatters them over the registry: with 10,000 of
/// 100,000 waiters woken, delivering in that order makes every resolution a cache (and TLB)
/// miss on the waker and on whatever the waker resolves (a JS promise and its handle). Waiters
/// registered one after another were allocated one after another, so registration order walks
/// that memory forwards: under Node this made delivering the B5 flush about 1.4× faster. Which
/// waiters are woken and with which hit is decided before (J9); only the delivery order changes.
pub fn sort_for_delivery<W>(out: &mut [Settlement<W>]) {
    if out.len() > 1 {
        out.sort_unstable_by_key(|s| s.order);
    }
}

/// Above this many slots an idle registry releases its memory (B14).
const KEEP_SLOTS: usize = 1024;

/// Indexes are compacted when they hold this many entries more than twice the live ones.
const COMPACT_SLACK: usize = 4096;

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

/// An index entry: the registration (slot and tag) it was made for. Same bits as [`WaiterId`].
type Entry = u64;

struct Waiter<W> {
    /// The registration's tag (its [`WaiterId`] with the slot number); also its delivery order.
    tag: u32,
    after_generation: u32,
    /// `data[..keys]` are the key ids; the rest are the exact keys as (low, high) u32 pairs.
    keys: u32,
    broad: bool,
    /// Inline for up to four key ids and no exact key (most waits): parking such a waiter
    /// allocates nothing, and waking it frees nothing.
    data: KeyIds,
    waker: W,
}

impl<W> Waiter<W> {
    fn key_ids(&self) -> &[u32] {
        &self.data[..self.keys as usize]
    }

    #[cfg(test)]
    fn exact_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.data[self.keys as usize..].chunks_exact(2).map(|p| p[0] as u64 | ((p[1] as u64) << 32))
    }

    /// Index entries this waiter owns.
    fn entries(&self) -> usize {
        let exact = (self.data.len() - self.keys as usize) / 2;
        exact + if self.broad { 1 } else { self.keys as usize }
    }
}

/// A slab slot: the waiter parked there, if any (56 bytes for a JS waiter without a signal).
type Slot<W> = Option<Waiter<W>>;

/// (deadline, slot, tag): the entry is live while the slot holds that registration.
type HeapEntry = Reverse<(u64, u32, u32)>;

/// What to register: unique keys, unique exact keys, and the deadline on the journal's
/// monotonic clock.
pub struct WaiterSpec {
    pub after_generation: u32,
    pub keys: KeyIds,
    pub exact: Vec<u64>,
    pub broad: bool,
    pub deadline: u64,
}

pub struct WaiterRegistry<W = Resolve> {
    slots: Vec<Slot<W>>,
    /// Empty slots, reused last-freed first.
    free: Vec<u32>,
    by_key: IntMap<u32, Vec<Entry>>,
    by_exact: IntMap<u64, Vec<Entry>>,
    broad: Vec<Entry>,
    heap: BinaryHeap<HeapEntry>,
    active: usize,
    /// Entries the live waiters own, and entries stored in the three indexes (live or stale).
    live_entries: usize,
    stored_entries: usize,
    /// Tag of the next registration. One counter for all slots, so the slab can be released
    /// when idle without an old id ever matching a new waiter.
    next_tag: u32,
}

impl<W> Default for WaiterRegistry<W> {
    fn default() -> Self {
        WaiterRegistry {
            slots: Vec::new(),
            free: Vec::new(),
            by_key: IntMap::default(),
            by_exact: IntMap::default(),
            broad: Vec::new(),
            heap: BinaryHeap::new(),
            active: 0,
            live_entries: 0,
            stored_entries: 0,
            next_tag: 0,
        }
    }
}

fn entry_slot(e: Entry) -> u32 {
    e as u32
}

impl<W: Waker> WaiterRegistry<W> {
    pub fn new() -> Self {
        WaiterRegistry::default()
    }

    /// Waiters registered and not yet resolved.
    pub fn len(&self) -> usize {
        self.active
    }

    pub fn is_empty(&self) -> bool {
        self.active == 0
    }

    /// Live entries of the deadline heap (one per waiter), as the reference's `heapSize`.
    pub fn heap_len(&self) -> usize {
        self.active
    }

    /// Entries of the broad list (stale ones included until the next scan drops them).
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
        self.heap.peek().map(|e| e.0 .0)
    }

    /// Stored index entries whose waiter is gone (each live waiter's entries are stored once).
    fn stale_entries(&self) -> usize {
        self.stored_entries - self.live_entries
    }

    pub fn insert(&mut self, spec: WaiterSpec, waker: W) -> WaiterId {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        let tag = self.next_tag;
        self.next_tag = self.next_tag.wrapping_add(1);
        let id = WaiterId::new(slot, tag);
        let entry: Entry = id.0;

        let keys = spec.keys.len() as u32;
        let mut data = spec.keys; // the common case (no exact keys) moves, inline
        if !spec.exact.is_empty() {
            data.reserve_exact(2 * spec.exact.len());
            for &rk in &spec.exact {
                data.push(rk as u32);
                data.push((rk >> 32) as u32);
            }
        }
        let waiter = Waiter { tag, after_generation: spec.after_generation, keys, broad: spec.broad, data, waker };
        if spec.broad {
            let stale = self.stale_entries();
            self.stored_entries -= purge_if_full(&self.slots, &mut self.broad, stale);
            self.broad.push(entry);
        } else {
            for &key in waiter.key_ids() {
                let stale = self.stale_entries();
                let list = self.by_key.entry(key).or_default();
                self.stored_entries -= purge_if_full(&self.slots, list, stale);
                list.push(entry);
            }
        }
        for &rk in &spec.exact {
            let stale = self.stale_entries();
            let list = self.by_exact.entry(rk).or_default();
            self.stored_entries -= purge_if_full(&self.slots, list, stale);
            list.push(entry);
        }
        let owned = waiter.entries();
        self.live_entries += owned;
        self.stored_entries += owned;
        self.heap.push(Reverse((spec.deadline, slot, tag)));
        self.slots[slot as usize] = Some(waiter);
        self.active += 1;
        if self.stored_entries > 2 * self.live_entries + COMPACT_SLACK {
            self.compact_indexes();
        }
        id
    }

    /// Removes the waiter if it is still registered (an abort), handing back its waker.
    pub fn cancel(&mut self, id: WaiterId) -> Option<W> {
        if !self.slots.get(id.slot() as usize).is_some_and(|_| is_live(&self.slots, id.0)) {
            return None;
        }
        let w = self.remove(id.slot());
        self.tidy();
        Some(w)
    }

    /// Wakes the indexed waiters of `key` that wait for generations before `hit.generation`.
    pub fn wake_key(&mut self, key: u32, hit: TouchHit, out: &mut Vec<Settlement<W>>) -> usize {
        let Some(list) = self.by_key.remove(&key) else { return 0 };
        let (woken, kept) = self.wake_list(list, hit, out);
        if !kept.is_empty() {
            self.by_key.insert(key, kept);
        }
        self.tidy();
        woken
    }

    /// Wakes the waiters on the exact key `key` (J9: with key id 0 in `hit`).
    pub fn wake_exact(&mut self, key: u64, hit: TouchHit, out: &mut Vec<Settlement<W>>) -> usize {
        let Some(list) = self.by_exact.remove(&key) else { return 0 };
        let (woken, kept) = self.wake_list(list, hit, out);
        if !kept.is_empty() {
            self.by_exact.insert(key, kept);
        }
        self.tidy();
        woken
    }

    /// Wakes, in registration order, the live waiters of `list` that wait for generations
    /// before `hit.generation`; returns how many and the entries that stay (stale ones dropped).
    fn wake_list(&mut self, mut list: Vec<Entry>, hit: TouchHit, out: &mut Vec<Settlement<W>>) -> (usize, Vec<Entry>) {
        self.stored_entries -= list.len();
        // Each entry's slot is a cache miss (a key's waiters are spread over the slab): ask
        // for all of them first, so the misses overlap.
        for &e in &list {
            crate::prefetch::prefetch(self.slots.as_ptr().wrapping_add(entry_slot(e) as usize));
        }
        let mut woken = 0;
        let mut kept = 0;
        for i in 0..list.len() {
            let e = list[i];
            if !is_live(&self.slots, e) {
                continue;
            }
            let slot = entry_slot(e);
            if hit.generation > self.waiter(slot).after_generation {
                out.push(self.settle(slot, Some(hit)));
                woken += 1;
            } else {
                list[kept] = e;
                kept += 1;
            }
        }
        list.truncate(kept);
        self.stored_entries += kept;
        (woken, list)
    }

    /// Wakes the broad waiters with a key for which `touched(key, after_generation)` holds.
    pub fn wake_broad(
        &mut self,
        hit: TouchHit,
        touched: impl Fn(u32, u32) -> bool,
        out: &mut Vec<Settlement<W>>,
    ) -> usize {
        let list = std::mem::take(&mut self.broad);
        self.stored_entries -= list.len();
        let mut kept = Vec::with_capacity(list.len());
        let mut woken = 0;
        for e in list {
            if !is_live(&self.slots, e) {
                continue;
            }
            let slot = entry_slot(e);
            let w = self.waiter(slot);
            let after = w.after_generation;
            if hit.generation > after && w.key_ids().iter().any(|&k| touched(k, after)) {
                out.push(self.settle(slot, Some(hit)));
                woken += 1;
            } else {
                kept.push(e);
            }
        }
        self.stored_entries += kept.len();
        self.broad = kept;
        self.tidy();
        woken
    }

    /// Wakes every waiter waiting for a generation before `hit.generation` (overflow, J9), or
    /// every waiter at all when `unconditional` (a new epoch, B28).
    pub fn wake_all(&mut self, hit: TouchHit, unconditional: bool, out: &mut Vec<Settlement<W>>) -> usize {
        let mut woken = 0;
        for slot in 0..self.slots.len() as u32 {
            let qualifies = matches!(&self.slots[slot as usize],
                Some(w) if unconditional || hit.generation > w.after_generation);
            if qualifies {
                out.push(self.settle(slot, Some(hit)));
                woken += 1;
            }
        }
        self.tidy();
        woken
    }

    /// Removes every waiter whose deadline is at or before `now` (J12), in deadline order.
    pub fn expire(&mut self, now: u64, out: &mut Vec<Settlement<W>>) -> usize {
        let mut expired = 0;
        while let Some(&Reverse((deadline, slot, tag))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if is_live(&self.slots, WaiterId::new(slot, tag).0) {
                out.push(self.settle(slot, None));
                expired += 1;
            }
        }
        self.tidy();
        expired
    }

    /// Removes every waiter (stop, B29), each with `None`.
    pub fn take_all(&mut self, out: &mut Vec<Settlement<W>>) -> usize {
        let n = self.active;
        for w in self.slots.drain(..).flatten() {
            out.push(Settlement { waker: w.waker, hit: None, at: None, order: w.tag });
        }
        let next_tag = self.next_tag;
        *self = WaiterRegistry { next_tag, ..WaiterRegistry::default() };
        n
    }

    fn waiter(&self, slot: u32) -> &Waiter<W> {
        self.slots[slot as usize].as_ref().expect("a live slot holds a waiter")
    }

    /// Empties the slot; the waiter's index entries become stale.
    fn remove(&mut self, slot: u32) -> W {
        self.take(slot).0
    }

    /// Empties the slot and hands back the waker with its registration's tag.
    fn take(&mut self, slot: u32) -> (W, u32) {
        let w = self.slots[slot as usize].take().expect("removing a live waiter");
        self.free.push(slot);
        self.active -= 1;
        self.live_entries -= w.entries();
        (w.waker, w.tag)
    }

    /// Empties the slot into a settlement with `hit`.
    fn settle(&mut self, slot: u32, hit: Option<TouchHit>) -> Settlement<W> {
        let (waker, order) = self.take(slot);
        Settlement { waker, hit, at: None, order }
    }

    /// Drops stale entries from every index.
    fn compact_indexes(&mut self) {
        let slots = &self.slots;
        let mut stored = 0;
        self.by_key.retain(|_, list| {
            list.retain(|&e| is_live(slots, e));
            stored += list.len();
            !list.is_empty()
        });
        self.by_exact.retain(|_, list| {
            list.retain(|&e| is_live(slots, e));
            stored += list.len();
            !list.is_empty()
        });
        self.broad.retain(|&e| is_live(slots, e));
        stored += self.broad.len();
        self.stored_entries = stored;
    }

    /// After removals: drops dead entries from the heap's root (so the timer is armed for a
    /// live deadline), compacts a heap or indexes that are mostly dead, and gives back the
    /// memory of a registry left with no waiters after a burst.
    fn tidy(&mut self) {
        if self.active == 0 {
            let next_tag = self.next_tag;
            if self.slots.capacity() > KEEP_SLOTS {
                *self = WaiterRegistry { next_tag, ..WaiterRegistry::default() };
            } else {
                self.heap.clear();
                self.by_key.clear();
                self.by_exact.clear();
                self.broad.clear();
                self.stored_entries = 0;
            }
            return;
        }
        if self.heap.len() > 2 * self.active + COMPACT_SLACK {
            let slots = &self.slots;
            self.heap.retain(|&Reverse((_, slot, tag))| is_live(slots, WaiterId::new(slot, tag).0));
        }
        while let Some(&Reverse((_, slot, tag))) = self.heap.peek() {
            if is_live(&self.slots, WaiterId::new(slot, tag).0) {
                break;
            }
            self.heap.pop();
        }
        if self.stored_entries > 2 * self.live_entries + COMPACT_SLACK {
            self.compact_indexes();
        }
    }

    /// Checks every index against the slab (tests).
    #[cfg(test)]
    pub fn check_invariants(&self) {
        let mut live = 0;
        let mut owned = 0;
        let count = |list: Option<&Vec<Entry>>, e: Entry| list.map_or(0, |l| l.iter().filter(|&&x| x == e).count());
        for (slot, s) in self.slots.iter().enumerate() {
            let Some(w) = s else { continue };
            live += 1;
            owned += w.entries();
            let e = WaiterId::new(slot as u32, w.tag).0;
            let in_heap = self.heap.iter().filter(|x| x.0 .1 == slot as u32 && x.0 .2 == w.tag).count();
            assert_eq!(in_heap, 1, "one heap entry per waiter");
            if w.broad {
                assert_eq!(count(Some(&self.broad), e), 1);
            } else {
                for k in w.key_ids() {
                    assert_eq!(count(self.by_key.get(k), e), 1, "indexed under each key");
                }
            }
            for rk in w.exact_keys() {
                assert_eq!(count(self.by_exact.get(&rk), e), 1, "indexed under each exact key");
            }
        }
        assert_eq!(live, self.active);
        assert_eq!(owned, self.live_entries);
        let stored: usize = self.by_key.values().map(Vec::len).sum::<usize>()
            + self.by_exact.values().map(Vec::len).sum::<usize>()
            + self.broad.len();
        assert_eq!(stored, self.stored_entries);
        assert!(stored <= 2 * self.live_entries + COMPACT_SLACK + 64, "indexes are compacted");
        assert!(self.heap.len() <= 2 * self.active + COMPACT_SLACK + 1, "the heap is compacted");
        if let Some(Reverse((_, slot, tag))) = self.heap.peek() {
            assert!(is_live(&self.slots, WaiterId::new(*slot, *tag).0), "the root is live");
        }
    }
}

fn is_live<W>(slots: &[Slot<W>], e: Entry) -> bool {
    let id = WaiterId(e);
    slots.get(id.slot() as usize).and_then(Option::as_ref).is_some_and(|w| w.tag == id.tag())
}

/// Before a list grows past its capacity, drops its stale entries (so a list never holds much
/// more than twice its live entries). Returns how many were dropped. `stale` counts the stale
/// entries across all indexes: every live waiter's entries are stored exactly once, so at 0
/// there is nothing to drop and a burst of registrations never walks a full list.
fn purge_if_full<W>(slots: &[Slot<W>], list: &mut Vec<Entry>, stale: usize) -> usize {
    if stale == 0 || list.len() < list.capacity() || list.len() < 8 {
        return 0;
    }
    let before = list.len();
    list.retain(|&e| is_live(slots, e));
    before - list.len()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    type Log = Arc<Mutex<Vec<(u32, Option<TouchHit>)>>>;

    fn resolve(log: &Log, name: u32) -> Resolve {
        let log = log.clone();
        Box::new(move |hit, _| log.lock().unwrap().push((name, hit)))
    }

    fn spec(after: u32, keys: &[u32], exact: &[u64], deadline: u64) -> WaiterSpec {
        WaiterSpec {
            after_generation: after,
            keys: KeyIds::from_slice(keys),
            exact: exact.to_vec(),
            broad: false,
            deadline,
        }
    }

    fn hit(generation: u32, key_id: u32) -> TouchHit {
        TouchHit { generation, key_id, bucket_max_source_offset_seq: -1, flush_at_ms: 0, bucket_start_ms: 0 }
    }

    fn deliver(out: Vec<Settlement>) {
        for s in out {
            (s.waker)(s.hit, s.at);
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
    fn woken_waiters_are_delivered_in_registration_order_with_their_own_hits() {
        let log: Log = Default::default();
        let mut reg = WaiterRegistry::new();
        // 100 waiters alternating over three keys; freeing and reusing slots on the way so that
        // slot order differs from registration order.
        let mut ids = Vec::new();
        for name in 0..100u32 {
            ids.push(reg.insert(spec(0, &[name % 3], &[], 1_000), resolve(&log, name)));
            if name % 10 == 9 {
                // Cancel an earlier one: its slot is reused by the next registration.
                let victim = ids[(name - 5) as usize];
                assert!(reg.cancel(victim).is_some());
            }
        }
        let mut out = Vec::new();
        // Found key by key (2, then 0, then 1) ...
        for key in [2, 0, 1] {
            reg.wake_key(key, hit(1, key), &mut out);
        }
        sort_for_delivery(&mut out);
        deliver(out);
        // ... delivered in registration order, each with the hit of the key that woke it (J9).
        let got = log.lock().unwrap().clone();
        let cancelled: Vec<u32> = (0..10).map(|i| i * 10 + 4).collect();
        let expected: Vec<u32> = (0..100).filter(|n| !cancelled.contains(n)).collect();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), expected);
        for (name, h) in got {
            assert_eq!(h, Some(hit(1, name % 3)), "waiter {name}");
        }
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
