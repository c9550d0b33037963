//! The bloom's slot array: zeroed u32s, backed by transparent huge pages when large.
//!
//! A 16 MiB filter written at random positions touches every 4 KiB page within its first few
//! thousand keys; on a virtual machine those ~4,000 page faults cost several milliseconds,
//! which the first flush of a journal would pay (the array is allocated lazily, B14). On Linux
//! an array of 2 MiB or more is mapped directly, 2 MiB-aligned, with `MADV_HUGEPAGE`, so it is
//! faulted in a few 2 MiB pages where the kernel has them, and it is faulted in when created.
//! Smaller arrays, other systems, or a failed mapping use a zeroed `Vec`, faulted in as written.
//!
//! Faulting in 16 MiB still means zeroing 16 MiB of fresh memory: 5 to 40 ms on this project's
//! virtual machines. [`SlotArray::zeroed_in_background`] does it on one shared background
//! thread, so the thread that touches a journal first (the JavaScript thread, for a
//! `TouchJournal` used from JS) is not stalled; the bloom keeps its writes sparse meanwhile.

use std::ops::{Deref, DerefMut};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Mutex, OnceLock};

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

    /// The slots given (a journal taken up after a restart).
    pub fn from_slots(slots: Vec<u32>) -> SlotArray {
        SlotArray { storage: Storage::Heap(slots.into_boxed_slice()) }
    }
}

/// An array being zeroed on the background thread.
pub struct PendingArray {
    len: usize,
    rx: Receiver<SlotArray>,
}

type Job = (usize, SyncSender<SlotArray>);

/// The background allocator's queue; `None` if its thread could not be started.
fn allocator() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static QUEUE: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("durable-touch-filter".into())
                .spawn(move || {
                    for (len, reply) in rx {
                        // A journal that went away meanwhile drops its receiver: the array is
                        // freed here.
                        let _ = reply.send(SlotArray::zeroed(len));
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

impl SlotArray {
    /// Starts zeroing an array of `len` slots on the background thread.
    pub fn zeroed_in_background(len: usize) -> PendingArray {
        let (reply, rx) = mpsc::sync_channel(1);
        if let Some(queue) = allocator() {
            let sent = queue.lock().map(|q| q.send((len, reply.clone())).is_ok()).unwrap_or(false);
            if sent {
                return PendingArray { len, rx };
            }
        }
        // No background thread: zero it here.
        let _ = reply.send(SlotArray::zeroed(len));
        PendingArray { len, rx }
    }
}

impl PendingArray {
    /// The array if it is ready, without waiting.
    pub fn try_take(&self) -> Option<SlotArray> {
        match self.rx.try_recv() {
            Ok(a) => Some(a),
            Err(TryRecvError::Empty) => None,
            // The allocator is gone (it cannot be, short of a panic there): zero it here.
            Err(TryRecvError::Disconnected) => Some(SlotArray::zeroed(self.len)),
        }
    }

    /// The array, waiting for the background thread if need be.
    pub fn wait(&self) -> SlotArray {
        self.rx.recv().unwrap_or_else(|_| SlotArray::zeroed(self.len))
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
    // SAFETY: as above: shared access only reads (`as_slice`), like `&Box<[u32]>`.
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
            // Advisory only: without transparent huge pages this is a plain mapping, so a failure
            // changes nothing.
            // SAFETY: `aligned..aligned + bytes` lies inside the mapping just made (it was
            // over-allocated by one huge page).
            let _advisory = unsafe { madvise(aligned as *mut c_void, bytes, MADV_HUGEPAGE) };
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

    #[test]
    fn background_arrays_arrive_zeroed() {
        let pending: Vec<PendingArray> = (0..3).map(|_| SlotArray::zeroed_in_background(1 << 20)).collect();
        let mut it = pending.into_iter();
        let first = it.next().unwrap().wait();
        assert_eq!(first.len(), 1 << 20);
        assert!(first.iter().all(|&v| v == 0));
        let second = it.next().unwrap();
        let a = loop {
            if let Some(a) = second.try_take() {
                break a;
            }
            std::thread::yield_now();
        };
        assert_eq!(a.len(), 1 << 20);
        drop(it); // the third is dropped unreceived: the allocator frees it
        let again = SlotArray::zeroed_in_background(16).wait();
        assert_eq!(&again[..], &[0u32; 16][..]);
    }
}
