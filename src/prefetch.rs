//! Cache prefetch hints: where a loop knows which memory it reads a few steps ahead (waiter
//! slots while waking a key's list, promises while delivering a flush), asking for it early
//! overlaps the cache misses instead of paying them one after another.

/// Asks the CPU to start loading the cache line at `p`. A hint only: nothing is read that Rust
/// could observe, and any address is allowed (dangling, null or out of bounds).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` never faults and has no effect the program can observe, whatever
    // the address; SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
