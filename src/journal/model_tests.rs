//! Model-based safety test of the journal: random interleavings of touches, flushes, waits of
//! all three kinds (keyed, exact, broad), timeouts, aborts, overflows, stops and generation
//! wraps, checked after every step against an exact oracle.
//!
//! The property: **no false negative**. A waiter whose key (or exact key) is in the bucket of a
//! generation after its `afterGeneration` is resolved with that generation by that flush (or
//! was resolved before); `maybeTouchedSince` never answers false for a key touched after
//! `since`; `exactTouchedSinceAny` never answers false for a touched key nor true for an
//! untouched one. Also checked: every waiter resolves exactly once, timeouts never fire before
//! their deadline and always fire once it passed, aborts resolve `None`, a keyed hit names the
//! first of the waiter's keys to arrive (J9). False positives (bloom collisions, overflow
//! broadcasts, new-epoch wakes) are allowed and counted.
//!
//! `cargo test` runs 200,000 operations; `DT_NIGHTLY=1 cargo test --release model` runs
//! 2,000,000 (set `DT_MODEL_OPS` to choose).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::config::{JournalConfig, JournalOptions};
use super::cursor::Epoch;
use super::state::{JournalState, WaitRequest};
use super::waiters::{sort_for_delivery, KeyIds, Settlement, WaiterId};
use super::TouchHit;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    ops: u64,
    touches: u64,
    flushes: u64,
    overflow_flushes: u64,
    new_epochs: u64,
    waits: u64,
    broad_waits: u64,
    exact_waits: u64,
    immediate: u64,
    true_wakes: u64,
    fp_wakes_broadcast: u64,
    fp_wakes_bloom: u64,
    fp_wakes_epoch: u64,
    timeouts: u64,
    aborts: u64,
    stops: u64,
    queries: u64,
    query_fp_bloom: u64,
    query_fp_overflow: u64,
    exact_queries: u64,
    exact_unknown: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        macro_rules! sum { ($($f:ident),*) => { $( self.$f += o.$f; )* } }
        sum!(
            ops,
            touches,
            flushes,
            overflow_flushes,
            new_epochs,
            waits,
            broad_waits,
            exact_waits,
            immediate,
            true_wakes,
            fp_wakes_broadcast,
            fp_wakes_bloom,
            fp_wakes_epoch,
            timeouts,
            aborts,
            stops,
            queries,
            query_fp_bloom,
            query_fp_overflow,
            exact_queries,
            exact_unknown
        );
    }
}

struct ModelWaiter {
    id: WaiterId,
    after: u32,
    keys: Vec<u32>,
    exact: Vec<u64>,
    deadline: u64,
    broad: bool,
}

type Log = Arc<Mutex<Vec<(u64, Option<TouchHit>)>>>;

struct Model {
    rng: Rng,
    cfg: JournalConfig,
    state: JournalState,
    log: Log,
    out: Vec<Settlement>,
    now: u64,
    now_ms: i64,
    next_name: u64,
    live: HashMap<u64, ModelWaiter>,
    stale_ids: Vec<WaiterId>,
    resolved: HashSet<u64>,
    // Oracle of the current epoch: the last generation each key / routing key was flushed in.
    last_key_gen: HashMap<u32, u32>,
    last_exact_gen: HashMap<u64, u32>,
    // The open bucket, as the oracle sees it.
    bucket_keys: Vec<u32>,
    bucket_key_set: HashSet<u32>,
    bucket_all_keys: HashSet<u32>,
    bucket_exact: HashSet<u64>,
    /// Every routing key touched in the open bucket, kept or not.
    bucket_exact_truth: HashSet<u64>,
    bucket_overflow: bool,
    universe: Vec<u32>,
    counts: Counts,
}

impl Model {
    fn new(seed: u64) -> Model {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let near_wrap = rng.chance(30);
        let opts = JournalOptions {
            bucket_ms: 100.0,
            filter_pow2: 10.0,
            k: (1 + rng.below(4)) as f64,
            pending_max_keys: (12 + rng.below(70)) as f64,
            key_index_max_keys: (2 + rng.below(5)) as f64,
            initial_generation: if near_wrap { u32::MAX - rng.below(300) as u32 } else { 0 },
        };
        let cfg = JournalConfig::from_options(&opts);
        // A small universe (collisions in a 1024-slot filter) plus a few random ids.
        let mut universe: Vec<u32> = (0..150).map(|_| rng.next() as u32).collect();
        universe.extend(0..20);
        Model {
            state: JournalState::new(cfg, Epoch(seed)),
            cfg,
            rng,
            log: Arc::default(),
            out: Vec::new(),
            now: 1_000_000,
            now_ms: 1_700_000_000_000,
            next_name: 0,
            live: HashMap::new(),
            stale_ids: Vec::new(),
            resolved: HashSet::new(),
            last_key_gen: HashMap::new(),
            last_exact_gen: HashMap::new(),
            bucket_keys: Vec::new(),
            bucket_key_set: HashSet::new(),
            bucket_all_keys: HashSet::new(),
            bucket_exact: HashSet::new(),
            bucket_exact_truth: HashSet::new(),
            bucket_overflow: false,
            universe,
            counts: Counts::default(),
        }
    }

    fn key(&mut self) -> u32 {
        if self.rng.chance(90) {
            self.universe[self.rng.below(self.universe.len() as u64) as usize]
        } else {
            self.rng.next() as u32
        }
    }

    fn routing_key(&mut self) -> u64 {
        0x1000 + self.rng.below(48)
    }

    /// Delivers the settlements of the last step and returns them by waiter name.
    fn deliver(&mut self) -> Vec<(u64, Option<TouchHit>)> {
        sort_for_delivery(&mut self.out);
        for s in self.out.drain(..) {
            (s.waker)(s.hit, s.at);
        }
        let got: Vec<_> = std::mem::take(&mut *self.log.lock().unwrap());
        for (name, _) in &got {
            assert!(self.resolved.insert(*name), "waiter {name} resolved twice");
        }
        got
    }

    fn step(&mut self) {
        self.counts.ops += 1;
        match self.rng.below(100) {
            0..=34 => self.touch(),
            35..=44 => self.flush(),
            45..=64 => self.wait(),
            65..=69 => self.abort(),
            70..=79 => self.advance_time(),
            80..=91 => self.query(),
            92..=97 => self.exact_query(),
            98 if self.rng.chance(10) => self.stop(),
            _ => self.flush(),
        }
        if self.counts.ops.is_multiple_of(128) {
            self.state.check_invariants();
        }
    }

    fn touch(&mut self) {
        let burst = self.rng.chance(5);
        let n = 1 + self.rng.below(if burst { 60 } else { 6 });
        for _ in 0..n {
            let key = self.key();
            let seq = if self.rng.chance(70) { Some(self.rng.below(1_000_000) as i64) } else { None };
            let rk = if self.rng.chance(50) { Some(self.routing_key()) } else { None };
            self.state.touch(key, seq, rk, self.now_ms);
            self.counts.touches += 1;
            // The oracle's view of the same bucket rules (J6, B15).
            self.bucket_all_keys.insert(key);
            if self.bucket_keys.len() >= self.cfg.pending_max_keys {
                self.bucket_overflow = true;
            } else if self.bucket_key_set.insert(key) {
                self.bucket_keys.push(key);
            }
            if let Some(rk) = rk {
                if !self.bucket_overflow {
                    if self.bucket_exact.len() >= self.cfg.pending_max_keys && !self.bucket_exact.contains(&rk) {
                        self.bucket_overflow = true;
                    } else {
                        self.bucket_exact.insert(rk);
                    }
                }
                // Truth: the routing key was touched, whether the bucket keeps it or not.
                self.bucket_exact_truth.insert(rk);
            }
        }
        assert_eq!(self.state.pending_keys(), self.bucket_keys.len());
    }

    fn flush(&mut self) {
        self.now_ms += 1 + self.rng.below(200) as i64;
        let before_epoch = self.state.epoch();
        let had = !self.bucket_all_keys.is_empty();
        let flushed = self.state.flush(self.now_ms, &mut self.out);
        assert_eq!(flushed, had, "a flush happens exactly when touches are pending");
        let got = self.deliver();
        if !flushed {
            assert!(got.is_empty());
            return;
        }
        self.counts.flushes += 1;
        let g = self.state.generation();
        let new_epoch = self.state.epoch() != before_epoch;
        let overflow = self.state.last_overflow_generation() == g && g != 0;
        assert_eq!(overflow, self.bucket_overflow, "overflow decided by the bucket rules");
        if overflow {
            self.counts.overflow_flushes += 1;
        }
        if new_epoch {
            self.counts.new_epochs += 1;
            assert_eq!(g, 1);
            self.last_key_gen.clear();
            self.last_exact_gen.clear();
        }
        // The oracle learns this generation's truth.
        for &k in &self.bucket_all_keys {
            self.last_key_gen.insert(k, g);
        }
        for &rk in &self.bucket_exact_truth {
            self.last_exact_gen.insert(rk, g);
        }
        let woken: HashMap<u64, TouchHit> = got
            .into_iter()
            .map(|(name, hit)| (name, hit.expect("a flush never resolves a waiter with null")))
            .collect();
        for (name, hit) in &woken {
            assert_eq!(hit.generation, g);
            let w = self.live.remove(name).expect("woken waiter was live");
            if !new_epoch {
                assert!(g > w.after, "woken only for generations after its cursor");
            }
            let exact_hit = w.exact.iter().any(|rk| self.bucket_exact_truth.contains(rk));
            let truly = exact_hit
                || w.keys.iter().any(|k| self.last_key_gen.get(k).is_some_and(|&lg| lg > w.after) && !new_epoch)
                || w.keys.iter().any(|k| self.bucket_all_keys.contains(k));
            if truly {
                self.counts.true_wakes += 1;
            } else if new_epoch {
                self.counts.fp_wakes_epoch += 1;
            } else if overflow {
                self.counts.fp_wakes_broadcast += 1;
            } else {
                assert!(w.broad, "only broad waiters are woken through the bloom");
                self.counts.fp_wakes_bloom += 1;
            }
            // J9: a keyed hit names the first of the waiter's keys to arrive in the bucket.
            if !overflow && !new_epoch && !w.broad && !w.exact.iter().any(|rk| self.bucket_exact.contains(rk)) {
                let first = self.bucket_keys.iter().find(|k| w.keys.contains(k)).copied();
                assert_eq!(Some(hit.key_id), first, "hit key of a keyed waiter");
            } else {
                assert_eq!(hit.key_id, 0);
            }
            self.stale_ids.push(w.id);
        }
        // No false negative: every live waiter concerned by this generation was woken.
        for (name, w) in &self.live {
            assert!(!new_epoch, "a new epoch wakes every waiter (waiter {name} left)");
            if g <= w.after {
                continue;
            }
            let concerned = w.keys.iter().any(|k| self.bucket_all_keys.contains(k))
                || w.exact.iter().any(|rk| self.bucket_exact_truth.contains(rk));
            assert!(!concerned, "FALSE NEGATIVE: waiter {name} (after {}) missed generation {g}", w.after);
        }
        self.bucket_keys.clear();
        self.bucket_key_set.clear();
        self.bucket_all_keys.clear();
        self.bucket_exact.clear();
        self.bucket_exact_truth.clear();
        self.bucket_overflow = false;
    }

    fn wait(&mut self) {
        let name = self.next_name;
        self.next_name += 1;
        let nkeys = if self.rng.chance(15) { 4 + self.rng.below(30) } else { self.rng.below(5) };
        let keys: Vec<u32> = (0..nkeys).map(|_| self.key()).collect();
        let nexact = if self.rng.chance(25) { 1 + self.rng.below(3) } else { 0 };
        let exact: Vec<u64> = (0..nexact).map(|_| self.routing_key()).collect();
        let current = self.state.generation();
        let after = if self.rng.chance(80) {
            None
        } else if self.rng.chance(80) {
            Some(current.saturating_sub(self.rng.below(5) as u32))
        } else {
            Some(current.saturating_add(self.rng.below(3) as u32))
        };
        let timeout_ms = if self.rng.chance(3) { 0 } else { 1 + self.rng.below(80) };
        let req = WaitRequest {
            keys: KeyIds::from_slice(&keys),
            exact_keys: exact.clone(),
            after_generation: after,
            timeout_ms,
        };
        let log = self.log.clone();
        let resolve = Box::new(move |hit, _| log.lock().unwrap().push((name, hit)));
        let id = self.state.register(req, self.now, resolve, &mut self.out);
        let got = self.deliver();
        let immediate = (keys.is_empty() && exact.is_empty()) || timeout_ms == 0;
        assert_eq!(id.is_none(), immediate);
        if immediate {
            assert_eq!(got, vec![(name, None)]);
            self.counts.immediate += 1;
            return;
        }
        assert!(got.is_empty());
        self.counts.waits += 1;
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        let broad = unique.len() > self.cfg.key_index_max_keys;
        self.counts.broad_waits += broad as u64;
        self.counts.exact_waits += !exact.is_empty() as u64;
        self.live.insert(
            name,
            ModelWaiter {
                id: id.unwrap(),
                after: after.unwrap_or(current),
                keys: unique,
                exact,
                deadline: super::state::deadline_after(self.now, timeout_ms),
                broad,
            },
        );
    }

    fn abort(&mut self) {
        if self.rng.chance(20) && !self.stale_ids.is_empty() {
            let id = self.stale_ids[self.rng.below(self.stale_ids.len() as u64) as usize];
            assert!(!self.state.cancel(id, &mut self.out), "a stale id cancels nothing");
            assert!(self.deliver().is_empty());
            return;
        }
        let pick = self.rng.below(self.live.len() as u64) as usize;
        let Some(&name) = self.live.keys().nth(pick) else { return };
        let w = self.live.remove(&name).unwrap();
        assert!(self.state.cancel(w.id, &mut self.out));
        assert_eq!(self.deliver(), vec![(name, None)]);
        self.stale_ids.push(w.id);
        self.counts.aborts += 1;
    }

    fn advance_time(&mut self) {
        self.now += self.rng.below(30_000_000);
        let now = self.now;
        self.state.expire(now, &mut self.out);
        let got = self.deliver();
        for (name, hit) in &got {
            assert_eq!(*hit, None, "timeouts resolve null");
            let w = self.live.remove(name).expect("expired waiter was live");
            assert!(w.deadline <= now, "timeout fired before its deadline");
            self.stale_ids.push(w.id);
        }
        self.counts.timeouts += got.len() as u64;
        assert!(self.live.values().all(|w| w.deadline > now), "a due waiter was not expired");
        if self.stale_ids.len() > 10_000 {
            self.stale_ids.drain(..5_000);
        }
    }

    fn query(&mut self) {
        let current = self.state.generation();
        let since = current.saturating_sub(self.rng.below(8) as u32);
        let keys: Vec<u32> = (0..1 + self.rng.below(3)).map(|_| self.key()).collect();
        let answer = if keys.len() == 1 {
            self.state.maybe_touched_since(keys[0], since)
        } else {
            self.state.maybe_touched_since_any(&keys, since)
        };
        let truth = keys.iter().any(|k| self.last_key_gen.get(k).is_some_and(|&g| g > since));
        self.counts.queries += 1;
        if truth {
            assert!(answer, "FALSE NEGATIVE: maybeTouchedSince({keys:?}, {since}) at generation {current}");
        } else if answer {
            if since < self.state.last_overflow_generation() {
                self.counts.query_fp_overflow += 1;
            } else {
                self.counts.query_fp_bloom += 1;
            }
        }
    }

    fn exact_query(&mut self) {
        let current = self.state.generation();
        let since = current.saturating_sub(self.rng.below(8) as u32);
        let keys: Vec<u64> = (0..self.rng.below(3)).map(|_| self.routing_key()).collect();
        let answer = self.state.exact_touched_since_any(&keys, since);
        let truth = keys.iter().any(|k| self.last_exact_gen.get(k).is_some_and(|&g| g > since));
        self.counts.exact_queries += 1;
        match answer {
            Some(a) => assert_eq!(a, truth, "exactTouchedSinceAny({keys:?}, {since}) at generation {current}"),
            None => self.counts.exact_unknown += 1,
        }
    }

    fn stop(&mut self) {
        let n = self.state.stop(&mut self.out);
        let got = self.deliver();
        assert_eq!(n, self.live.len());
        assert_eq!(got.len(), self.live.len());
        assert!(got.iter().all(|(name, hit)| hit.is_none() && self.live.contains_key(name)));
        self.live.clear();
        self.bucket_keys.clear();
        self.bucket_key_set.clear();
        self.bucket_all_keys.clear();
        self.bucket_exact.clear();
        self.bucket_exact_truth.clear();
        self.bucket_overflow = false;
        self.counts.stops += 1;
    }

    fn finish(mut self) -> Counts {
        // Every waiter still parked resolves exactly once at stop.
        let names: HashSet<u64> = self.live.keys().copied().collect();
        self.state.stop(&mut self.out);
        let got = self.deliver();
        assert_eq!(got.iter().map(|x| x.0).collect::<HashSet<_>>(), names);
        assert_eq!(self.resolved.len() as u64, self.next_name, "every waiter resolved exactly once");
        self.counts
    }
}

fn total_ops() -> u64 {
    if let Some(n) = std::env::var("DT_MODEL_OPS").ok().and_then(|v| v.parse().ok()) {
        return n;
    }
    if std::env::var("DT_NIGHTLY").is_ok_and(|v| v == "1") {
        2_000_000
    } else {
        200_000
    }
}

#[test]
fn model_no_false_negatives() {
    let total = total_ops();
    let per_run = 6_000;
    let mut counts = Counts::default();
    let mut seed = 1;
    while counts.ops < total {
        let mut m = Model::new(seed);
        for _ in 0..per_run {
            m.step();
        }
        counts.add(&m.finish());
        seed += 1;
    }
    let c = counts;
    eprintln!(
        "journal model: {} ops over {} runs; {} touches, {} flushes ({} overflow, {} new epochs), \
         {} waits ({} broad, {} with exact keys, {} immediate), {} true wakes, false-positive wakes: \
         {} broadcast + {} bloom + {} new-epoch; {} timeouts, {} aborts, {} stops; queries {} \
         (false positives {} bloom + {} overflow), exact queries {} ({} unknown); false negatives 0",
        c.ops,
        seed - 1,
        c.touches,
        c.flushes,
        c.overflow_flushes,
        c.new_epochs,
        c.waits,
        c.broad_waits,
        c.exact_waits,
        c.immediate,
        c.true_wakes,
        c.fp_wakes_broadcast,
        c.fp_wakes_bloom,
        c.fp_wakes_epoch,
        c.timeouts,
        c.aborts,
        c.stops,
        c.queries,
        c.query_fp_bloom,
        c.query_fp_overflow,
        c.exact_queries,
        c.exact_unknown
    );
    // The run must have exercised what it claims to check.
    assert!(c.ops >= total);
    assert!(c.overflow_flushes > 0 && c.new_epochs > 0 && c.broad_waits > 0 && c.exact_waits > 0);
    assert!(c.timeouts > 0 && c.aborts > 0 && c.true_wakes > 0 && c.query_fp_bloom > 0);
}
