//! Native memory shared with JavaScript as an ArrayBuffer, so that arguments and results cross
//! without an N-API call per value: the journal's wait arguments ([`WaitArgsBuffer`], written
//! by the JavaScript `waitForAny`, read by `_waitArgs`) and the host SQL result slots
//! ([`SqlSlots`], written by the `_sql*` calls, read by `compat/sqlite-adapter.mjs`).
//!
//! The memory is Rust's ([`SharedMemory`]: reference-counted, held by the native owner and by
//! each external ArrayBuffer made over it, through its finalizer), so nothing JavaScript does
//! can free it under the native side: a buffer that is detached (transferred away) or collected
//! only drops its share. Both sides use it on the JS thread only, one at a time: JavaScript
//! between native calls, the native side during a call, through raw-pointer reads and writes
//! (no Rust reference to the memory outlives a single read or write), so JavaScript running in
//! between (a getter, a GC finalizer) never aliases a Rust reference.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use napi::{sys, Env};

use super::check;
use super::value::RawValue;
use crate::error::{Error, Result};
use crate::journal::MAX_WAIT_KEYS;

struct Cell<T>(UnsafeCell<T>);

// SAFETY: the contents are only read or written on the JS thread (see the module doc); another
// thread may only drop the last `Arc` (a runtime running a buffer's finalizer elsewhere), and
// `T` is plain data.
unsafe impl<T: Send> Sync for Cell<T> {}

/// Memory shared with JavaScript (see the module doc).
pub struct SharedMemory<T> {
    cell: Arc<Cell<T>>,
}

impl<T> Clone for SharedMemory<T> {
    fn clone(&self) -> Self {
        SharedMemory { cell: self.cell.clone() }
    }
}

impl<T: Send + 'static> SharedMemory<T> {
    fn new(value: T) -> SharedMemory<T> {
        SharedMemory { cell: Arc::new(Cell(UnsafeCell::new(value))) }
    }

    fn as_ptr(&self) -> *mut T {
        self.cell.0.get()
    }

    /// A new ArrayBuffer over the memory, holding a share of it until collected. `Ok(None)`
    /// where the runtime refuses external buffers.
    fn array_buffer(&self, env: &Env) -> Result<Option<RawValue>> {
        let hint = Arc::into_raw(self.cell.clone());
        let mut ab = ptr::null_mut();
        // SAFETY: on the JS thread with the current call's environment. The buffer covers the
        // `size_of::<T>()` bytes of the value, which stay put and alive while `hint` (a share
        // of the `Arc`) is held; the finalizer `drop_share::<T>` releases that share once, when
        // the buffer is collected.
        let status = unsafe {
            sys::napi_create_external_arraybuffer(
                env.raw(),
                self.as_ptr().cast(),
                std::mem::size_of::<T>(),
                Some(drop_share::<T>),
                hint as *mut c_void,
                &mut ab,
            )
        };
        if status == sys::Status::napi_no_external_buffers_allowed {
            // SAFETY: not taken, so no finalizer will run: the share is still ours.
            drop(unsafe { Arc::from_raw(hint) });
            return Ok(None);
        }
        if let Err(e) = check(status) {
            // SAFETY: as above.
            drop(unsafe { Arc::from_raw(hint) });
            return Err(e);
        }
        Ok(Some(ab))
    }
}

/// The finalizer of [`SharedMemory::array_buffer`]'s buffers.
///
/// # Safety
/// `hint` must be the share handed to `napi_create_external_arraybuffer`; called once.
unsafe extern "C" fn drop_share<T>(_env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    if !hint.is_null() {
        // SAFETY: guaranteed by the caller.
        drop(unsafe { Arc::from_raw(hint.cast::<Cell<T>>()) });
    }
}

// ---------------------------------------------------------------- the journal's wait arguments

/// The arguments of a plain `waitForAny` (u32 key ids in an array, numbers, no exact keys), as
/// the JavaScript method writes them through typed arrays over this memory before calling
/// `_waitArgs` with the journal's handle: they reach the core without one N-API call per key or
/// field.
#[repr(C)]
struct WaitArgs {
    keys: [u32; MAX_WAIT_KEYS],
    /// How many of `keys` this wait names.
    n: u32,
    /// 1 when `after_generation` holds the wait's `afterGeneration`, 0 when it had none.
    has_after: u32,
    after_generation: f64,
    timeout_ms: f64,
}

/// Byte offset of the f64 fields (the JavaScript side makes its Float64Array there).
pub const WAIT_ARGS_F64_AT: usize = std::mem::offset_of!(WaitArgs, after_generation);
// The JavaScript side's Uint32Array reaches `n` and `has_after` as elements MAX_WAIT_KEYS and
// MAX_WAIT_KEYS + 1, and its Float64Array `timeout_ms` as element 1.
const _: () = assert!(std::mem::offset_of!(WaitArgs, n) == 4 * MAX_WAIT_KEYS);
const _: () = assert!(std::mem::offset_of!(WaitArgs, has_after) == 4 * MAX_WAIT_KEYS + 4);
const _: () = assert!(std::mem::offset_of!(WaitArgs, timeout_ms) == WAIT_ARGS_F64_AT + 8);

/// One journal handle's wait arguments.
#[derive(Clone)]
pub struct WaitArgsBuffer(SharedMemory<WaitArgs>);

/// What [`WaitArgsBuffer::read`] found: the key ids (`None` when `n` is out of range), the
/// `afterGeneration` if given, and `timeoutMs`.
pub struct WaitArgsRead<K> {
    pub keys: Option<K>,
    pub after_generation: Option<f64>,
    pub timeout_ms: f64,
}

impl WaitArgsBuffer {
    pub fn new() -> WaitArgsBuffer {
        WaitArgsBuffer(SharedMemory::new(WaitArgs {
            keys: [0; MAX_WAIT_KEYS],
            n: 0,
            has_after: 0,
            after_generation: 0.0,
            timeout_ms: 0.0,
        }))
    }

    /// A new ArrayBuffer over the arguments (`None` where external buffers are refused).
    pub fn array_buffer(&self, env: &Env) -> Result<Option<RawValue>> {
        self.0.array_buffer(env)
    }

    /// Reads what the JavaScript side wrote; the key ids go through `keys` (which copies them).
    pub fn read<K>(&self, keys: fn(&[u32]) -> K) -> WaitArgsRead<K> {
        let p = self.0.as_ptr();
        // SAFETY: `p` is the live value (held by `self`); JS thread, during a native call. The
        // fields are plain data, read by value through the raw pointer.
        let (n, has_after, after_generation, timeout_ms) = unsafe {
            (
                ptr::addr_of!((*p).n).read(),
                ptr::addr_of!((*p).has_after).read(),
                ptr::addr_of!((*p).after_generation).read(),
                ptr::addr_of!((*p).timeout_ms).read(),
            )
        };
        let keys = (n as usize <= MAX_WAIT_KEYS).then(|| {
            // SAFETY: the first `n` (checked ≤ MAX_WAIT_KEYS) keys of the live value, borrowed
            // only while `keys` (a plain function: it cannot call into JavaScript) copies them.
            let slice = unsafe { std::slice::from_raw_parts(ptr::addr_of!((*p).keys).cast::<u32>(), n as usize) };
            keys(slice)
        });
        WaitArgsRead { keys, after_generation: (has_after != 0).then_some(after_generation), timeout_ms }
    }
}

impl Default for WaitArgsBuffer {
    fn default() -> Self {
        Self::new()
    }
}

// ---------------------------------------------------------------- the host SQL result slots

/// Cells (row values) one call can hand back: a call returns at most this many values.
pub const CELLS: usize = 4096;
/// Header slots (f64) before the cells.
pub const HEAD: usize = 8;

/// The result slots, shared with JavaScript as one ArrayBuffer: `Float64Array(buf, 0, 8)` head,
/// `Float64Array(buf, 64, CELLS)` numbers, `Uint8Array(buf, 64 + 8 * CELLS, CELLS)` kinds.
#[repr(C)]
struct Slots {
    head: [f64; HEAD],
    nums: [f64; CELLS],
    kinds: [u8; CELLS],
}

const _: () = assert!(std::mem::offset_of!(Slots, nums) == 8 * HEAD);
const _: () = assert!(std::mem::offset_of!(Slots, kinds) == 8 * HEAD + 8 * CELLS);
const _: () = assert!(std::mem::size_of::<Slots>() == 8 * HEAD + 9 * CELLS);

/// One environment's host SQL result slots.
#[derive(Clone)]
pub struct SqlSlots(SharedMemory<Slots>);

impl SqlSlots {
    pub fn new() -> SqlSlots {
        SqlSlots(SharedMemory::new(Slots { head: [0.0; HEAD], nums: [0.0; CELLS], kinds: [0; CELLS] }))
    }

    /// A new ArrayBuffer over the slots (an error where external buffers are refused).
    pub fn array_buffer(&self, env: &Env) -> Result<RawValue> {
        self.0.array_buffer(env)?.ok_or_else(|| Error::Internal("host SQL needs external ArrayBuffers".into()))
    }

    /// Writes cell `cell` (< [`CELLS`]).
    pub fn set_cell(&self, cell: usize, kind: u8, num: f64) {
        assert!(cell < CELLS, "cell {cell} out of range");
        let p = self.0.as_ptr();
        // SAFETY: `p` is the live value (held by `self`), `cell` in range; JS thread, during a
        // native call; plain-data writes through the raw pointer.
        unsafe {
            ptr::addr_of_mut!((*p).kinds).cast::<u8>().add(cell).write(kind);
            ptr::addr_of_mut!((*p).nums).cast::<f64>().add(cell).write(num);
        }
    }

    /// Writes header slot `slot` (< [`HEAD`]).
    pub fn set_head(&self, slot: usize, value: f64) {
        assert!(slot < HEAD, "head slot {slot} out of range");
        let p = self.0.as_ptr();
        // SAFETY: as in `set_cell`.
        unsafe { ptr::addr_of_mut!((*p).head).cast::<f64>().add(slot).write(value) };
    }
}

impl Default for SqlSlots {
    fn default() -> Self {
        Self::new()
    }
}
