//! Native-only journal costs for the B5 shape (no JS): registering 100,000 waiters on 1-4 of
//! 24,000 key ids, then one flush after touching 1,000 of them (~10% of the waiters woken),
//! with waiters that only count their wake.
//!
//!   cargo run --release --example journal_native [-- --runs 5]
//!
//! What the JS binding adds on top of these figures is the promise per waiter.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use durable_touch::journal::{Journal, JournalOptions, KeyIds, Touch, TouchHit, WaitRequest, Waker};

/// The benchmarks' options (bucketMs 100, filterPow2 22, k 4, pendingMaxKeys 100,000,
/// keyIndexMaxKeys 32) are the journal's defaults.
fn bench_options() -> JournalOptions {
    JournalOptions::default()
}

struct Count(Arc<AtomicUsize>);
impl Waker for Count {
    fn wake(self, hit: Option<TouchHit>) {
        if hit.is_some() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The reference bench's mulberry32.
fn mulberry32(mut a: u32) -> impl FnMut() -> f64 {
    move || {
        a = a.wrapping_add(0x6d2b79f5);
        let mut t = a;
        t = (t ^ (t >> 15)).wrapping_mul(t | 1);
        t ^= t.wrapping_add((t ^ (t >> 7)).wrapping_mul(t | 61));
        ((t ^ (t >> 14)) as f64) / 4294967296.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.iter().position(|a| a == "--runs").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(5);
    let mut rnd = mulberry32(1);
    let mut seen = std::collections::HashSet::new();
    let mut universe = Vec::new();
    while universe.len() < 24_000 {
        let k = (rnd() * 4294967296.0) as u32;
        if seen.insert(k) {
            universe.push(k);
        }
    }
    let waiters: Vec<Vec<u32>> = (0..100_000)
        .map(|_| {
            let m = 1 + (rnd() * 4.0) as usize;
            (0..m).map(|_| universe[(rnd() * 24_000.0) as usize]).collect()
        })
        .collect();
    // B4 plain: 1,000,000 random key ids into a fresh journal, then a forced flush.
    let keys: Vec<u32> = (0..1_000_000).map(|_| (rnd() * 4294967296.0) as u32).collect();
    for run in 0..runs {
        let j: Journal<Count> = Journal::with_waker(bench_options());
        let t0 = Instant::now();
        j.touch_many(keys.iter().map(|&k| Touch { key_id: k, source_offset: None, routing_key: None }));
        let touch = t0.elapsed();
        let t1 = Instant::now();
        j.flush();
        let flush = t1.elapsed();
        let t2 = Instant::now();
        j.touch_many(keys.iter().map(|&k| Touch { key_id: k, source_offset: None, routing_key: None }));
        let second = t2.elapsed();
        println!(
            "run {run}: touch {:.0}/s, flush {:.2} ms, second bucket {:.0}/s",
            1e6 / touch.as_secs_f64(),
            flush.as_secs_f64() * 1e3,
            1e6 / second.as_secs_f64()
        );
        j.stop();
    }
    for run in 0..runs {
        let j: Journal<Count> = Journal::with_waker(bench_options());
        let woken = Arc::new(AtomicUsize::new(0));
        let g = j.generation();
        let t0 = Instant::now();
        for keys in &waiters {
            let req = WaitRequest {
                keys: KeyIds::from_slice(keys),
                after_generation: Some(g),
                timeout_ms: 30_000,
                ..Default::default()
            };
            j.wait_for_any(req, Count(woken.clone())).unwrap();
        }
        let reg = t0.elapsed();
        for &k in &universe[..1000] {
            j.touch(k, None, None);
        }
        let t1 = Instant::now();
        j.flush();
        let flush = t1.elapsed();
        println!(
            "run {run}: register {:.1} ms ({:.0}/s), flush {:.2} ms waking {}",
            reg.as_secs_f64() * 1e3,
            100_000.0 / reg.as_secs_f64(),
            flush.as_secs_f64() * 1e3,
            woken.load(Ordering::Relaxed)
        );
        j.stop();
    }
}
