//! The crate's one native timer: one thread, one ordered queue of deadlines.
//!
//! A journal arms at most two timers (its bucket flush, J6, and its earliest waiter deadline,
//! J12); a completion port arms a watchdog while a wake-up of the JS thread is outstanding. The thread sleeps on a condition variable until the earliest entry is due, then calls
//! the targets of every due entry outside its own lock. An armed timer holds its target, so a
//! journal with parked waiters (whose deadline timer is armed) lives until they are resolved,
//! even when its owner let go of it, as a JavaScript timer keeps its closure alive. Nothing here
//! keeps the JavaScript event loop alive.
//! Time is a process-wide monotonic clock ([`mono_now`]), in nanoseconds.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Monotonic nanoseconds since the first use of the clock in this process.
pub fn mono_now() -> u64 {
    let base = *clock_base();
    Instant::now().duration_since(base).as_nanos() as u64
}

fn clock_base() -> &'static Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now)
}

fn instant_of(at: u64) -> Instant {
    let base = *clock_base();
    // About 584 years of nanoseconds always fit; fall back to a far future if not.
    base.checked_add(Duration::from_nanos(at)).unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 30))
}

/// Receives the timers it armed.
pub trait TimerTarget: Send + Sync {
    fn on_timer(&self, token: u64);
}

/// Identifies an armed timer, for cancelling it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimerKey {
    at: u64,
    id: u64,
}

struct Queue {
    entries: BTreeMap<TimerKey, (Arc<dyn TimerTarget>, u64)>,
    next_id: u64,
    running: bool,
}

struct Service {
    queue: Mutex<Queue>,
    wake: Condvar,
}

fn service() -> &'static Service {
    static SERVICE: OnceLock<Service> = OnceLock::new();
    SERVICE.get_or_init(|| Service {
        queue: Mutex::new(Queue { entries: BTreeMap::new(), next_id: 0, running: false }),
        wake: Condvar::new(),
    })
}

/// Calls `target.on_timer(token)` at `at` (monotonic ns), unless cancelled first.
pub fn schedule(at: u64, target: Arc<dyn TimerTarget>, token: u64) -> TimerKey {
    let svc = service();
    let mut q = svc.queue.lock();
    let key = TimerKey { at, id: q.next_id };
    q.next_id += 1;
    let earliest = q.entries.first_key_value().is_none_or(|(k, _)| key < *k);
    q.entries.insert(key, (target, token));
    if !q.running {
        q.running = true;
        std::thread::Builder::new()
            .name("durable-touch-timer".into())
            .spawn(run)
            .expect("cannot start the journal timer thread");
    } else if earliest {
        svc.wake.notify_one();
    }
    key
}

/// Cancels an armed timer; a timer already firing may still call its target once.
pub fn cancel(key: TimerKey) {
    // The target is dropped outside the queue lock: it may be the last handle of a journal.
    let removed = service().queue.lock().entries.remove(&key);
    drop(removed);
}

fn run() {
    let svc = service();
    let mut due: Vec<(Arc<dyn TimerTarget>, u64)> = Vec::new();
    loop {
        {
            let mut q = svc.queue.lock();
            loop {
                let now = mono_now();
                match q.entries.first_key_value() {
                    None => svc.wake.wait(&mut q),
                    Some((k, _)) if k.at > now => {
                        let at = instant_of(k.at);
                        svc.wake.wait_until(&mut q, at);
                    }
                    Some(_) => break,
                }
            }
            let now = mono_now();
            while let Some(entry) = q.entries.first_entry() {
                if entry.key().at > now {
                    break;
                }
                due.push(entry.remove());
            }
        }
        for (target, token) in due.drain(..) {
            // A panic in a journal must not stop the timer of every other journal.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target.on_timer(token)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    struct Probe {
        fired: Mutex<Vec<(u64, u64)>>,
        count: AtomicU64,
    }

    impl TimerTarget for Probe {
        fn on_timer(&self, token: u64) {
            self.fired.lock().push((token, mono_now()));
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn fires_in_order_not_early_and_honours_cancel() {
        let p = Arc::new(Probe { fired: Mutex::new(Vec::new()), count: AtomicU64::new(0) });
        let target: Arc<dyn TimerTarget> = p.clone();
        let t0 = mono_now();
        let ms = 1_000_000;
        schedule(t0 + 30 * ms, target.clone(), 3);
        schedule(t0 + 10 * ms, target.clone(), 1);
        let c = schedule(t0 + 20 * ms, target.clone(), 2);
        cancel(c);
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.count.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(30));
        let fired = p.fired.lock().clone();
        assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), vec![1, 3]);
        assert!(fired[0].1 >= t0 + 10 * ms);
        assert!(fired[1].1 >= t0 + 30 * ms);
    }

    #[test]
    fn an_armed_timer_keeps_its_target_until_it_fires_or_is_cancelled() {
        let p = Arc::new(Probe { fired: Mutex::new(Vec::new()), count: AtomicU64::new(0) });
        let k = schedule(mono_now() + 60_000_000_000, p.clone(), 1);
        assert_eq!(Arc::strong_count(&p), 2);
        cancel(k);
        assert_eq!(Arc::strong_count(&p), 1);
        schedule(mono_now() + 2_000_000, p.clone(), 2);
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.count.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(Arc::strong_count(&p), 1, "released after firing");
    }
}
