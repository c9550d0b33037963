//! Hot interest (M19): which fine keys and templates clients are waiting on right now, per
//! stream, with grace periods after the last waiter leaves and caps on how much is tracked
//! ([`HotLimits`], read from `touch.memory` by [`hot_limits`]).
//!
//! The processor uses the snapshot to decide whether fine touches are worth emitting at all
//! (M4, M8), which templates to expand (hot template filtering, P3) and which fine keys to keep
//! (hot key filtering, M12).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::Hash;

use crate::spec::TouchConfig;

/// A fine wait with more key ids than this is *broad*: it is counted, but its keys are not
/// tracked (M19).
pub const BROAD_WAIT_MAX_KEYS: usize = 64;

/// Caps and grace periods, from `touch.memory` (M19).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HotLimits {
    pub key_grace_ms: i64,
    pub template_grace_ms: i64,
    pub max_keys: usize,
    pub max_templates: usize,
}

impl Default for HotLimits {
    fn default() -> Self {
        HotLimits { key_grace_ms: 10_000, template_grace_ms: 10_000, max_keys: 1_000_000, max_templates: 4096 }
    }
}

/// M19's limits from `touch.memory`.
pub fn hot_limits(cfg: &TouchConfig) -> HotLimits {
    let m = &cfg.memory;
    HotLimits {
        key_grace_ms: m.hot_key_ttl_ms.floor().max(1.0) as i64,
        template_grace_ms: m.hot_template_ttl_ms.floor().max(1.0) as i64,
        max_keys: m.hot_max_keys.floor().max(1.0) as usize,
        max_templates: m.hot_max_templates.floor().max(1.0) as usize,
    }
}

/// Whether a wait is fine-grained (keys, templates) or coarse (table keys only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterestMode {
    Fine,
    Coarse,
}

/// Entries in their grace period, with an expiry queue so a sweep costs what expires, not
/// what is held. Every wait's begin and release ends with a forced sweep (M19), so a sweep
/// that scanned the whole set made a stream with many waiters quadratic (closing 200,000 waits
/// took seconds). Re-acquired or re-released entries leave stale queue items; the map's expiry
/// tells them apart.
#[derive(Debug)]
struct GraceSet<K: Hash + Eq + Ord + Clone> {
    expiry: HashMap<K, i64>,
    queue: BinaryHeap<Reverse<(i64, K)>>,
}

impl<K: Hash + Eq + Ord + Clone> Default for GraceSet<K> {
    fn default() -> Self {
        GraceSet { expiry: HashMap::new(), queue: BinaryHeap::new() }
    }
}

impl<K: Hash + Eq + Ord + Clone> GraceSet<K> {
    fn len(&self) -> usize {
        self.expiry.len()
    }

    fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }

    fn insert(&mut self, k: K, expires_at_ms: i64) {
        self.expiry.insert(k.clone(), expires_at_ms);
        self.queue.push(Reverse((expires_at_ms, k)));
    }

    fn remove<Q>(&mut self, k: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.expiry.remove(k);
    }

    fn keys(&self) -> impl Iterator<Item = &K> {
        self.expiry.keys()
    }

    /// Drops the entries whose expiry is ≤ `now_ms`.
    fn expire(&mut self, now_ms: i64) {
        while let Some(Reverse((at, _))) = self.queue.peek() {
            if *at > now_ms {
                break;
            }
            let Some(Reverse((at, k))) = self.queue.pop() else { break };
            if self.expiry.get(&k) == Some(&at) {
                self.expiry.remove(&k);
            }
        }
        if self.expiry.is_empty() {
            self.queue.clear();
        }
    }
}

/// Interest reported by an edge for this stream (issue 28): its waiters' counts, hot keys and
/// templates, held until `expires_at_ms` unless a newer report replaces it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteInterest {
    pub expires_at_ms: i64,
    pub fine_waiters: u64,
    pub coarse_waiters: u64,
    pub broad_fine_waiters: u64,
    pub keys: Vec<u32>,
    pub templates: Vec<String>,
}

/// The hot state of one stream.
#[derive(Debug, Default)]
pub struct HotState {
    /// Edges' interest, by edge id.
    remote: HashMap<u64, RemoteInterest>,
    key_active: HashMap<u32, u32>,
    key_grace: GraceSet<u32>,
    template_active: HashMap<String, u32>,
    template_grace: GraceSet<String>,
    pub fine_waiters: u64,
    pub coarse_waiters: u64,
    pub broad_fine_waiters: u64,
    next_sweep_at_ms: i64,
    keys_over_capacity: bool,
    templates_over_capacity: bool,
}

/// What one wait registered, so that releasing it undoes exactly that.
#[derive(Debug, Clone)]
pub struct HotLease {
    mode: InterestMode,
    broad: bool,
    keys: Vec<u32>,
    templates: Vec<String>,
}

/// A point-in-time view used by one processing batch (M4, M8, M12).
#[derive(Debug, Clone, Default)]
pub struct HotSnapshot {
    pub fine_waiters: u64,
    pub coarse_waiters: u64,
    pub broad_fine_waiters: u64,
    pub hot_key_active: usize,
    pub hot_key_grace: usize,
    pub hot_template_active: usize,
    pub hot_template_grace: usize,
    pub template_filtering: bool,
    pub key_filtering: bool,
}

/// The hot template and key ids themselves ([`HotState::hot_ids`]): what an edge reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HotIds {
    /// Active ∪ grace template ids, when template filtering is on.
    pub template_ids: Option<Vec<String>>,
    /// Active ∪ grace key ids, when key filtering is on.
    pub keys: Option<HashSet<u32>>,
}

impl HotSnapshot {
    /// The snapshot of a stream without hot state: key filtering on, template filtering off.
    pub fn empty() -> HotSnapshot {
        HotSnapshot { key_filtering: true, ..Default::default() }
    }

    pub fn hot_key_count(&self) -> usize {
        self.hot_key_active + self.hot_key_grace
    }

    pub fn hot_template_count(&self) -> usize {
        self.hot_template_active + self.hot_template_grace
    }

    pub fn has_any_waiters(&self) -> bool {
        self.fine_waiters + self.coarse_waiters > 0
    }

    /// M4: fine waiters, broad waiters, or anything hot.
    pub fn has_fine_demand(&self) -> bool {
        self.fine_waiters > 0
            || self.broad_fine_waiters > 0
            || self.hot_key_count() > 0
            || self.hot_template_count() > 0
    }
}

fn is_template_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl HotState {
    /// Registers a wait (M19 *Begin*) and sweeps.
    pub fn begin(
        &mut self,
        mode: InterestMode,
        key_ids: &[u32],
        template_ids: &[String],
        limits: &HotLimits,
        now_ms: i64,
    ) -> HotLease {
        let mut lease = HotLease { mode, broad: false, keys: Vec::new(), templates: Vec::new() };
        match mode {
            InterestMode::Coarse => self.coarse_waiters += 1,
            InterestMode::Fine => {
                self.fine_waiters += 1;
                if key_ids.len() > BROAD_WAIT_MAX_KEYS {
                    lease.broad = true;
                    self.broad_fine_waiters += 1;
                } else {
                    let mut seen = HashSet::new();
                    for &k in key_ids {
                        if seen.insert(k) && self.acquire_key(k, limits.max_keys) {
                            lease.keys.push(k);
                        }
                    }
                }
                let mut seen = HashSet::new();
                for raw in template_ids {
                    let id = raw.trim();
                    if is_template_id(id)
                        && seen.insert(id.to_string())
                        && self.acquire_template(id, limits.max_templates)
                    {
                        lease.templates.push(id.to_string());
                    }
                }
            }
        }
        self.sweep(limits, now_ms, true);
        lease
    }

    /// What an edge's report says of this state, save the keys and templates in grace: it
    /// changes when a wait brings a key or template not active yet or the first waiter of a
    /// kind (an edge then reports at once, not at its next beat).
    pub fn interest_shape(&self) -> (usize, usize, bool, bool, bool) {
        (
            self.key_active.len(),
            self.template_active.len(),
            self.fine_waiters > 0,
            self.coarse_waiters > 0,
            self.broad_fine_waiters > 0,
        )
    }

    /// Takes an edge's latest report for this stream (replacing its previous one).
    pub fn set_remote(&mut self, edge: u64, interest: RemoteInterest) {
        self.remote.insert(edge, interest);
    }

    /// Releases a wait (M19 *Release*). Keys and templates whose count reaches zero enter
    /// their grace period.
    pub fn release(&mut self, lease: &HotLease, limits: &HotLimits, now_ms: i64) {
        match lease.mode {
            InterestMode::Fine => self.fine_waiters = self.fine_waiters.saturating_sub(1),
            InterestMode::Coarse => self.coarse_waiters = self.coarse_waiters.saturating_sub(1),
        }
        if lease.broad {
            self.broad_fine_waiters = self.broad_fine_waiters.saturating_sub(1);
        }
        for &k in &lease.keys {
            self.release_key(k, now_ms, limits);
        }
        for t in &lease.templates {
            self.release_template(t, now_ms, limits);
        }
        self.sweep(limits, now_ms, true);
    }

    fn acquire_key(&mut self, k: u32, max: usize) -> bool {
        if let Some(c) = self.key_active.get_mut(&k) {
            *c += 1;
            self.key_grace.remove(&k);
            return true;
        }
        if self.key_active.len() + self.key_grace.len() >= max {
            self.keys_over_capacity = true;
            return false;
        }
        self.key_active.insert(k, 1);
        self.key_grace.remove(&k);
        true
    }

    fn acquire_template(&mut self, id: &str, max: usize) -> bool {
        if let Some(c) = self.template_active.get_mut(id) {
            *c += 1;
            self.template_grace.remove(id);
            return true;
        }
        if self.template_active.len() + self.template_grace.len() >= max {
            self.templates_over_capacity = true;
            return false;
        }
        self.template_active.insert(id.to_string(), 1);
        self.template_grace.remove(id);
        true
    }

    fn release_key(&mut self, k: u32, now_ms: i64, limits: &HotLimits) {
        let Some(c) = self.key_active.get_mut(&k) else { return };
        if *c > 1 {
            *c -= 1;
            return;
        }
        self.key_active.remove(&k);
        if self.key_active.len() + self.key_grace.len() >= limits.max_keys {
            self.keys_over_capacity = true;
            return;
        }
        self.key_grace.insert(k, now_ms + limits.key_grace_ms);
    }

    fn release_template(&mut self, id: &str, now_ms: i64, limits: &HotLimits) {
        let Some(c) = self.template_active.get_mut(id) else { return };
        if *c > 1 {
            *c -= 1;
            return;
        }
        self.template_active.remove(id);
        if self.template_active.len() + self.template_grace.len() >= limits.max_templates {
            self.templates_over_capacity = true;
            return;
        }
        self.template_grace.insert(id.to_string(), now_ms + limits.template_grace_ms);
    }

    /// Drops expired grace entries and clears over-capacity once there is room again.
    /// Returns `false` when the state is empty and can be deleted.
    pub fn sweep(&mut self, limits: &HotLimits, now_ms: i64, force: bool) -> bool {
        if !force && now_ms < self.next_sweep_at_ms {
            return true;
        }
        self.key_grace.expire(now_ms);
        self.template_grace.expire(now_ms);
        self.remote.retain(|_, r| r.expires_at_ms > now_ms);
        if self.key_active.len() + self.key_grace.len() < limits.max_keys {
            self.keys_over_capacity = false;
        }
        if self.template_active.len() + self.template_grace.len() < limits.max_templates {
            self.templates_over_capacity = false;
        }
        if self.is_empty() {
            return false;
        }
        let every = limits.key_grace_ms.min(limits.template_grace_ms).clamp(250, 2000);
        self.next_sweep_at_ms = now_ms + every;
        true
    }

    fn is_empty(&self) -> bool {
        self.remote.is_empty()
            && self.key_active.is_empty()
            && self.key_grace.is_empty()
            && self.template_active.is_empty()
            && self.template_grace.is_empty()
            && self.fine_waiters == 0
            && self.coarse_waiters == 0
            && self.broad_fine_waiters == 0
    }

    /// M19 *Snapshot*: this process's waits and the edges' reports together.
    pub fn snapshot(&self) -> HotSnapshot {
        let remote = self.remote.values();
        let remote_templates = remote.clone().map(|r| r.templates.len()).sum::<usize>();
        let remote_keys = remote.clone().map(|r| r.keys.len()).sum::<usize>();
        let remote_broad = remote.clone().map(|r| r.broad_fine_waiters).sum::<u64>();
        let template_filtering = !self.templates_over_capacity
            && self.template_active.len() + self.template_grace.len() + remote_templates > 0;
        let broad_fine_waiters = self.broad_fine_waiters + remote_broad;
        let key_filtering = !self.keys_over_capacity && broad_fine_waiters == 0;
        HotSnapshot {
            fine_waiters: self.fine_waiters + remote.clone().map(|r| r.fine_waiters).sum::<u64>(),
            coarse_waiters: self.coarse_waiters + remote.clone().map(|r| r.coarse_waiters).sum::<u64>(),
            broad_fine_waiters,
            hot_key_active: self.key_active.len() + remote_keys,
            hot_key_grace: self.key_grace.len(),
            hot_template_active: self.template_active.len() + remote_templates,
            hot_template_grace: self.template_grace.len(),
            template_filtering,
            key_filtering,
        }
    }

    /// The hot ids behind [`HotState::snapshot`]'s counts. Batches need only the counts (B4:
    /// fine demand delivers every fine key); building the union of every edge's keys for
    /// each batch cost a writer with 1,000 edges' reports (64,000 keys) ~0.6 of a core.
    pub fn hot_ids(&self) -> HotIds {
        let snap = self.snapshot();
        HotIds {
            template_ids: snap.template_filtering.then(|| {
                let mut ids: Vec<String> = self
                    .template_active
                    .keys()
                    .chain(self.template_grace.keys())
                    .chain(self.remote.values().flat_map(|r| r.templates.iter()))
                    .cloned()
                    .collect();
                ids.sort();
                ids.dedup();
                ids
            }),
            keys: snap.key_filtering.then(|| {
                self.key_active
                    .keys()
                    .chain(self.key_grace.keys())
                    .chain(self.remote.values().flat_map(|r| r.keys.iter()))
                    .copied()
                    .collect()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: HotLimits = HotLimits { key_grace_ms: 1000, template_grace_ms: 1000, max_keys: 4, max_templates: 2 };
    const T1: &str = "0123456789abcdef";
    const T2: &str = "fedcba9876543210";

    #[test]
    fn fine_waits_track_keys_and_templates_until_grace_expires() {
        let mut h = HotState::default();
        let lease = h.begin(InterestMode::Fine, &[1, 2, 2], &[T1.into(), "nope".into()], &L, 0);
        let s = h.snapshot();
        assert_eq!((s.fine_waiters, s.hot_key_active, s.hot_template_active), (1, 2, 1));
        assert!(s.template_filtering && s.key_filtering);
        assert_eq!(h.hot_ids().template_ids, Some(vec![T1.to_string()]));
        h.release(&lease, &L, 100);
        let s = h.snapshot();
        assert_eq!((s.fine_waiters, s.hot_key_active, s.hot_key_grace, s.hot_template_grace), (0, 0, 2, 1));
        assert!(s.has_fine_demand(), "grace entries still count as demand");
        assert!(h.sweep(&L, 1099, true));
        assert!(!h.sweep(&L, 1100, true), "everything expired: the state can go");
    }

    #[test]
    fn coarse_waits_add_no_keys_and_broad_waits_disable_key_filtering() {
        let mut h = HotState::default();
        let c = h.begin(InterestMode::Coarse, &[1, 2, 3], &[T1.into()], &L, 0);
        let s = h.snapshot();
        assert_eq!((s.coarse_waiters, s.hot_key_count(), s.hot_template_count()), (1, 0, 0));
        assert!(!s.has_fine_demand() && s.has_any_waiters());
        let many: Vec<u32> = (0..65).collect();
        let b = h.begin(InterestMode::Fine, &many, &[], &L, 0);
        let s = h.snapshot();
        assert_eq!((s.broad_fine_waiters, s.hot_key_count()), (1, 0));
        assert!(!s.key_filtering);
        h.release(&b, &L, 0);
        h.release(&c, &L, 0);
        assert!(h.snapshot().key_filtering);
    }

    #[test]
    fn caps_set_over_capacity_which_turns_filtering_off() {
        let mut h = HotState::default();
        let _a =
            h.begin(InterestMode::Fine, &[1, 2, 3, 4, 5], &[T1.into(), T2.into(), "aaaaaaaaaaaaaaaa".into()], &L, 0);
        let s = h.snapshot();
        assert_eq!((s.hot_key_active, s.hot_template_active), (4, 2));
        assert!(!s.key_filtering, "a key could not be tracked, so filtering by keys would lose it");
        assert!(!s.template_filtering);
    }

    #[test]
    fn counts_are_per_waiter() {
        let mut h = HotState::default();
        let a = h.begin(InterestMode::Fine, &[7], &[], &L, 0);
        let b = h.begin(InterestMode::Fine, &[7], &[], &L, 0);
        h.release(&a, &L, 10);
        assert_eq!(h.snapshot().hot_key_active, 1);
        h.release(&b, &L, 20);
        let s = h.snapshot();
        assert_eq!((s.hot_key_active, s.hot_key_grace), (0, 1));
        assert!(h.hot_ids().keys.unwrap().contains(&7));
    }

    #[test]
    fn a_key_released_again_keeps_its_later_grace() {
        let mut h = HotState::default();
        let a = h.begin(InterestMode::Fine, &[7, 8], &[T1.into()], &L, 0);
        h.release(&a, &L, 0); // grace until 1000
        let b = h.begin(InterestMode::Fine, &[7], &[T1.into()], &L, 500);
        h.release(&b, &L, 600); // 7 and T1: grace until 1600; 8 still until 1000
        assert!(h.sweep(&L, 1000, true));
        let s = h.snapshot();
        assert_eq!((s.hot_key_grace, s.hot_template_grace), (1, 1), "8 expired; 7 and T1 were renewed");
        assert!(h.hot_ids().keys.unwrap().contains(&7));
        assert!(h.sweep(&L, 1599, true));
        assert!(!h.sweep(&L, 1600, true));
    }

    #[test]
    fn many_waits_released_at_once_all_enter_grace_and_expire_together() {
        let mut h = HotState::default();
        let limits = HotLimits { max_keys: 1_000_000, ..L };
        let leases: Vec<_> = (0..50_000u32).map(|k| h.begin(InterestMode::Fine, &[k], &[], &limits, 0)).collect();
        for l in &leases {
            h.release(l, &limits, 10);
        }
        assert_eq!(h.snapshot().hot_key_grace, 50_000);
        assert!(!h.sweep(&limits, 1010, true));
    }
}
