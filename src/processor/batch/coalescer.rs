//! The coalescer of a batch (P8): entries by key in `Map` insertion order, their windows, and
//! the deferred mode that records touches and coalesces them at the finish by one sort.

use rustc_hash::FxHashMap;

use super::*;

#[derive(Clone, Copy)]
pub(super) struct Pending {
    pub(super) touch: Touch,
    pub(super) window_start: f64,
}

/// How a batch coalesces (P8) at the moment; every way gives the same touches.
///
/// A batch starts online. Without a fine budget, a batch whose touches are mostly new keys
/// (fewer than [`MAX_REPEATS`] touches per entry when it has [`DEFER_AT`] entries, or twice
/// as many, and so on) defers the rest to the finish, where one sort costs less than a hash
/// probe per touch (B3's batches defer after a few hundred rows); a batch that touches the
/// same keys again and again stays online, where a repeat costs an update in place.
/// Recording costs memory per touch where entries cost it per key, so a deferred batch that
/// has recorded [`RECORD_LIMIT`] touches goes online again, for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coalescing {
    /// Entries live in hash maps while rows are read: needed when a fine budget charges
    /// each new entry as it opens (P9).
    Online,
    /// Without a budget nothing depends on the entries while rows are read: every queued
    /// touch is recorded in order, and [`Batch::finish`] groups them by one sort (which
    /// P11's output order needs anyway) and runs the windows group by group.
    AtFinish,
}

/// Open entries at which an online batch without a budget first considers deferring.
pub(super) const DEFER_AT: usize = 1 << 10;
/// Touches per open entry below which it defers.
pub(super) const MAX_REPEATS: usize = 2;
/// Touches a deferred batch records (56 MiB) before it goes online again.
pub(super) const RECORD_LIMIT: usize = 1 << 20;

/// When a batch changes its [`Coalescing`] (tests set small values).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Switches {
    /// Open entries at which an online batch without a budget next considers deferring;
    /// `usize::MAX`: never.
    pub defer_at: usize,
    /// It defers when it has queued fewer than this many touches per open entry.
    pub max_repeats: usize,
    /// Touches a deferred batch records before it goes online for good.
    pub record_limit: usize,
}

/// The coalescing state of a batch (P8). Kept per thread between batches so that its
/// buffers (megabytes for a fine batch) are reused instead of faulted in again.
#[derive(Default)]
pub(super) struct Coalescer {
    /// Open entries in `Map` insertion order; deferred ([`Coalescing::AtFinish`]): the
    /// records, in queue order (see [`Batch::defer`]).
    pub(super) pending: Vec<Pending>,
    pub(super) by_routing: FxHashMap<u64, usize>,
    pub(super) by_id: FxHashMap<u32, usize>,
    /// Entries closed by a new window, in emission order.
    pub(super) flushed: Vec<Touch>,
    /// Sort scratch.
    pub(super) order: Vec<u64>,
    pub(super) order_tmp: Vec<u64>,
    /// [`Coalescing::AtFinish`]: the records in key-id order, copied out of `pending`.
    pub(super) gathered: Vec<Pending>,
}

impl Coalescer {
    pub(super) fn clear(&mut self) {
        self.pending.clear();
        self.by_routing.clear();
        self.by_id.clear();
        self.flushed.clear();
        self.order.clear();
        self.order_tmp.clear();
        self.gathered.clear();
    }
}

impl Coalescer {
    /// P11's order starts with a stable sort by key id: `order` gets each touch of `ids` as
    /// `key id << 32 | index`, sorted by a stable LSD radix sort on the key id (three 11-bit
    /// digits) over one flat array, so equal ids keep their index order.
    pub(super) fn order_by_key_id(&mut self, ids: impl Iterator<Item = u32>) {
        let order = &mut self.order;
        order.clear();
        order.extend(ids.enumerate().map(|(i, id)| (u64::from(id) << 32) | i as u64));
        let n = order.len();
        self.order_tmp.resize(n, 0);
        pub(super) const DIGITS: [u32; 3] = [32, 43, 54];
        let mut counts = [[0usize; 2049]; 3];
        for &p in order.iter() {
            for (d, shift) in DIGITS.iter().enumerate() {
                counts[d][((p >> shift) & 0x7FF) as usize + 1] += 1;
            }
        }
        for (d, shift) in DIGITS.iter().enumerate() {
            let counts = &mut counts[d];
            if counts[1..].contains(&n) {
                continue; // every touch has the same digit: this pass would not move anything
            }
            for b in 1..2049 {
                counts[b] += counts[b - 1];
            }
            for &p in order.iter() {
                let b = ((p >> shift) & 0x7FF) as usize;
                self.order_tmp[counts[b]] = p;
                counts[b] += 1;
            }
            std::mem::swap(order, &mut self.order_tmp);
        }
    }

    /// [`Coalescing::Online`]: the closed entries (in closing order) and the open ones (in
    /// `Map` order) in P11's order: a stable sort by key id, then routing key ("" first),
    /// then watermark.
    pub(super) fn online_output(&mut self) -> Vec<Touch> {
        let (flushed, pending) = (std::mem::take(&mut self.flushed), std::mem::take(&mut self.pending));
        self.order_by_key_id(flushed.iter().chain(pending.iter().map(|p| &p.touch)).map(|t| t.key_id));
        let at = |i: u32| -> Touch {
            let i = i as usize;
            if i < flushed.len() {
                flushed[i]
            } else {
                pending[i - flushed.len()].touch
            }
        };
        let order = &mut self.order;
        for_each_run(
            order,
            |p| (p >> 32) as u32,
            |run| {
                // A run is usually one key's touches, already in watermark order: checking that
                // reads each touch once, where even a sort of sorted input reads it twice.
                let key = |p: &u64| {
                    let t = at(*p as u32);
                    (t.routing_key.is_some(), t.routing_key.unwrap_or(0), t.watermark)
                };
                if !run.is_sorted_by_key(key) {
                    run.sort_by_key(key);
                }
            },
        );
        let touches = order.iter().map(|&p| at(p as u32)).collect();
        (self.flushed, self.pending) = (flushed, pending);
        touches
    }

    /// [`Coalescing::AtFinish`]: `pending` holds every queued touch in queue order. Sorted
    /// stably by (key id, routing key), the touches of one `Map` entry (one routing key, or
    /// one key id without one) are adjacent and in queue order, where the windows run as
    /// `queue` would run them (each touch with its kind's window, [`Plan::window_ms`]). An
    /// entry's emitted touches come out in queue order, which is also their emission order in
    /// the online run (closed ones in closing order, the open one last), so a stable sort by
    /// watermark (a no-op unless an entry mixes table and template touches) completes P11's
    /// order.
    pub(super) fn coalesce_at_finish(&mut self, plan: &Plan) -> Vec<Touch> {
        let raw = std::mem::take(&mut self.pending);
        self.order_by_key_id(raw.iter().map(|p| p.touch.key_id));
        // The records in key-id order, copied out once: the runs below read each of them
        // several times, and reading them through `order` made each first read a cache miss
        // (a fine batch records megabytes). The copy knows its reads ahead, so it prefetches.
        let (order, sorted) = (&self.order, &mut self.gathered);
        sorted.clear();
        sorted.reserve(order.len());
        for (i, &p) in order.iter().enumerate() {
            if let Some(&ahead) = order.get(i + GATHER_AHEAD) {
                crate::prefetch::prefetch(raw.as_ptr().wrapping_add(ahead as u32 as usize));
            }
            sorted.push(raw[p as u32 as usize]);
        }
        let mut out: Vec<Touch> = Vec::with_capacity(sorted.len());
        let entry = |p: &Pending| (p.touch.routing_key.is_some(), p.touch.routing_key.unwrap_or(0));
        for_each_run(
            sorted,
            |p| p.touch.key_id,
            |run| {
                if run.len() > 1 && !run.is_sorted_by_key(entry) {
                    run.sort_by_key(entry);
                }
                let mut rest = &run[..];
                while let Some((first, tail)) = rest.split_first() {
                    let key = entry(first);
                    let len = tail.iter().take_while(|p| entry(p) == key).count();
                    let from = out.len();
                    let mut open = *first;
                    for next in &tail[..len] {
                        if next.window_start - open.window_start < plan.window_ms(next.touch.kind) {
                            open.touch.watermark = next.touch.watermark;
                        } else {
                            out.push(open.touch);
                            open = *next;
                        }
                    }
                    out.push(open.touch);
                    let group = &mut out[from..];
                    if !group.is_sorted_by_key(|t| t.watermark) {
                        group.sort_by_key(|t| t.watermark);
                    }
                    rest = &tail[len..];
                }
            },
        );
        self.pending = raw;
        out
    }
}

/// How many records ahead [`Coalescer::coalesce_at_finish`]'s copy prefetches.
const GATHER_AHEAD: usize = 16;

/// Calls `f` on each run of equal key ids of `items`, sorted by key id (`key_id` reads it).
pub(super) fn for_each_run<T>(items: &mut [T], key_id: impl Fn(&T) -> u32, mut f: impl FnMut(&mut [T])) {
    let mut rest = items;
    while let Some(first) = rest.first() {
        let k = key_id(first);
        let len = rest.iter().position(|p| key_id(p) != k).unwrap_or(rest.len());
        let (run, tail) = std::mem::take(&mut rest).split_at_mut(len);
        f(run);
        rest = tail;
    }
}

thread_local! {
    pub(super) static COALESCER: std::cell::RefCell<Coalescer> = std::cell::RefCell::new(Coalescer::default());
}
