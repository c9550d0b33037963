//! The bloom's slot array: zeroed u32s, backed by transparent huge pages when large.
//!
//! A 16 MiB filter written at random positions touches every 4 KiB page within its first few
//! thousand keys; on a virtual machine those ~4,000 page faults cost several milliseconds,
//! which the first flush of a journal would pay (the array is allocated lazily, B14). On Linux
//! an array of 2 MiB or more is mapped directly, 2 MiB-aligned, with `MADV_HUGEPAGE`, so it is
//! faulted in a few 2 MiB pages instead, and it is faulted in when created (the journal
//! creates it at its first touch, a coalescing window before the first flush, so the flush that
//! wakes waiters does not pay for it). Smaller arrays, other systems, or a failed mapping use a
//! zeroed `Vec`, faulted in as written.

use std::ops::{Deref, DerefMut};

pub struct SlotArray {
    storage: Storage,
}

enum Storage {
    Heap(Box<[u32]>),
    #[cfg(target_os = "linux")]
    Mapped(mapped::Mapping),
}

impl SlotArray {
    /// `len` zeroed slots.
    pub fn zeroed(len: usize) -> SlotArray {
        #[cfg(target_os = "linux")]
        if len * 4 >= mapped::HUGE_PAGE {
            if let Some(m) = mapped::Mapping::new(len) {
                return SlotArray { storage: Storage::Mapped(m) };
            }
        }
        SlotArray { storage: Storage::Heap(vec![0u32; len].into_boxed_slice()) }
    }
}

impl Deref for SlotArray {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match &self.storage {
            Storage::Heap(b) => b,
            #[cfg(target_os = "linux")]
            Storage::Mapped(m) => m.as_slice(),
        }
    }
}

impl DerefMut for SlotArray {
    fn deref_mut(&mut self) -> &mut [u32] {
        match &mut self.storage {
            Storage::Heap(b) => b,
            #[cfg(target_os = "linux")]
            Storage::Mapped(m) => m.as_mut_slice(),
        }
    }
}

#[cfg(target_os = "linux")]
mod mapped {
    use std::ffi::c_void;

    pub const HUGE_PAGE: usize = 2 << 20;
    const PROT_READ: i32 = 1;
    const PROT_WRITE: i32 = 2;
    const MAP_PRIVATE: i32 = 0x02;
    const MAP_ANONYMOUS: i32 = 0x20;
    const MADV_HUGEPAGE: i32 = 14;

    extern "C" {
        fn mmap(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut c_void;
        fn munmap(addr: *mut c_void, len: usize) -> i32;
        fn madvise(addr: *mut c_void, len: usize, advice: i32) -> i32;
    }

    /// An anonymous private mapping (zero-filled by the kernel), over-allocated by one huge
    /// page so the slots start on a 2 MiB boundary.
    pub struct Mapping {
        base: *mut c_void,
        mapped_len: usize,
        slots: *mut u32,
        len: usize,
    }

    // SAFETY: the mapping is owned exclusively by this value, like a Box.
    unsafe impl Send for Mapping {}
    unsafe impl Sync for Mapping {}

    impl Mapping {
        pub fn new(len: usize) -> Option<Mapping> {
            let bytes = len.checked_mul(4)?;
            let mapped_len = bytes.checked_add(HUGE_PAGE)?;
            // SAFETY: a fresh anonymous mapping; checked for failure below.
            let base = unsafe {
                mmap(std::ptr::null_mut(), mapped_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            };
            if base as isize == -1 || base.is_null() {
                return None;
            }
            let aligned = (base as usize).next_multiple_of(HUGE_PAGE);
            // Advisory only: without transparent huge pages this is a plain mapping.
            unsafe { madvise(aligned as *mut c_void, bytes, MADV_HUGEPAGE) };
            let mut m = Mapping { base, mapped_len, slots: aligned as *mut u32, len };
            // Fault the pages in now (one write per 4 KiB; a single fault per huge page).
            let s = m.as_mut_slice();
            for i in (0..len).step_by(1024) {
                // SAFETY: in bounds; volatile so the writes of zeros are not elided.
                unsafe { std::ptr::write_volatile(s.as_mut_ptr().add(i), 0) };
            }
            Some(m)
        }

        pub fn as_slice(&self) -> &[u32] {
            // SAFETY: `len` u32s inside the live mapping, aligned to 2 MiB.
            unsafe { std::slice::from_raw_parts(self.slots, self.len) }
        }

        pub fn as_mut_slice(&mut self) -> &mut [u32] {
            // SAFETY: as above, and `&mut self` is exclusive.
            unsafe { std::slice::from_raw_parts_mut(self.slots, self.len) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly what `new` mapped.
            unsafe { munmap(self.base, self.mapped_len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_small_and_large_arrays_read_and_write() {
        for len in [1024usize, 1 << 22] {
            let mut a = SlotArray::zeroed(len);
            assert_eq!(a.len(), len);
            assert!(a.iter().step_by(4099).all(|&v| v == 0));
            a[len - 1] = 7;
            a[0] = 3;
            assert_eq!((a[0], a[len - 1], a[len / 2]), (3, 7, 0));
        }
    }
}
