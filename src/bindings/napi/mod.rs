//! The one home for raw N-API: every `napi_*` call and every `unsafe` block of the binding
//! layer is in this module, behind small safe wrappers. The per-class files beside it
//! (`store.rs`, `journal/`, …) only convert types and call the cores.
//!
//! - [`value`]: reading JS values ([`Js`]) and building them ([`Out`]), typed arrays and
//!   external buffers, calling JS functions;
//! - [`error`]: the one `Error` → JS error mapping ([`js_error`], [`throw`]);
//! - [`port`]: the completion port that settles promises from native threads (one threadsafe
//!   function per owning object);
//! - [`abort`]: the shared AbortSignal listener;
//! - [`handle`]: tagged external handles (a Rust value owned by a JS value);
//! - [`shared`]: native memory shared with JavaScript as an ArrayBuffer (the journal's wait
//!   arguments, the host SQL result slots);
//! - [`callback`]: raw N-API callbacks (no napi-rs wrapper) for the hottest entry points;
//! - [`helpers`]: the JavaScript functions (`lib/internal/helpers.js`) the native side calls.
//!
//! # Invariants every wrapper relies on
//!
//! - A [`Js`] value and every reference derived from it (a handle's payload, a typed array's
//!   bytes) is valid only during the native call that received or made it, on the JS thread:
//!   its lifetime `'env` is the borrow of that call's [`napi::Env`], so it cannot be stored.
//!   During the call the value is rooted in the call's handle scope, so the garbage collector
//!   cannot free it, nor an external's payload.
//! - Typed-array bytes are read while no JavaScript runs: a getter or a callback could detach
//!   or shrink the buffer. Readers copy out (or hand the bytes to SQLite, which copies) before
//!   running JavaScript again.
//! - Every N-API status is checked with [`check`] (the one status → error helper). Where a
//!   failure cannot be reported (a finalizer, a listener's cleanup after the operation settled),
//!   the wrapper says why it is dropped and clears any exception it left.
//! - Only the JS thread makes N-API calls, except `napi_call_threadsafe_function` and
//!   `napi_release_threadsafe_function` ([`port`]), which N-API allows from any thread.

// napi_env / napi_value are opaque engine handles handed straight back to N-API and never
// dereferenced here, so functions taking them need not be `unsafe`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod abort;
pub mod callback;
pub mod error;
pub mod handle;
pub mod helpers;
pub mod port;
pub mod shared;
pub mod value;

pub use error::{js_error, js_error_with_message, throw};
pub use port::{Port, Ticket};
pub use value::{unknown, Js, Out, RawValue};

use std::sync::Once;

use napi::sys;
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Registers, once per environment, the hook that releases the references this thread keeps
/// for `env` when the environment is torn down (a worker thread ending, the process exiting):
/// the helpers, the abort registry, and whatever the per-class files keep per environment
/// (the journal's hit cache, the host SQL slots), which they register as [`Cleanup`]s. Node
/// does not free a reference nobody deleted: without this, each ended worker leaked them
/// (Valgrind: "definitely lost").
pub fn on_teardown(env: &napi::Env) -> Result<()> {
    // SAFETY: on the JS thread of `env`; the hook is a plain function and its argument the
    // environment's own pointer, valid until the hook has run (it runs during the teardown).
    check(unsafe { sys::napi_add_env_cleanup_hook(env.raw(), Some(teardown), env.raw().cast()) })
}

/// A per-environment cleanup of a per-class file: it deletes the references that file keeps
/// in a thread-local for `env`, if they belong to `env` (and does nothing otherwise). The file
/// keeps it in a `static` and calls [`Cleanup::register`] before it first stores such a
/// reference; every environment's teardown then runs it. So this module runs the per-class
/// files' cleanups without naming those files (they depend on it, not it on them).
pub struct Cleanup {
    run: fn(&napi::Env),
    registered: Once,
}

/// Every [`Cleanup`] registered in this process, in registration order.
static CLEANUPS: Mutex<Vec<&'static Cleanup>> = Mutex::new(Vec::new());

impl Cleanup {
    pub const fn new(run: fn(&napi::Env)) -> Cleanup {
        Cleanup { run, registered: Once::new() }
    }

    /// Adds this cleanup to the ones every environment's teardown runs (the first call; later
    /// ones cost an atomic load). A teardown on any thread after this returns runs it.
    pub fn register(&'static self) {
        self.registered.call_once(|| CLEANUPS.lock().push(self));
    }
}

/// Runs on the environment's thread while it is torn down (no JavaScript runs any more).
///
/// # Safety
/// `arg` must be the `napi_env` given to [`on_teardown`], called by N-API during its teardown.
unsafe extern "C" fn teardown(arg: *mut std::ffi::c_void) {
    let env = napi::Env::from_raw(arg.cast());
    let _panicked = std::panic::catch_unwind(|| {
        helpers::forget(&env);
        abort::forget(&env);
        // A copy, so the lock is not held while they run.
        let cleanups = CLEANUPS.lock().clone();
        for cleanup in cleanups {
            (cleanup.run)(&env);
        }
    });
}

/// The one N-API status → error helper: `Ok` for `napi_ok`, else `ERR_INTERNAL` naming the
/// status.
#[inline]
pub fn check(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(failed(status))
    }
}

#[cold]
#[inline(never)]
fn failed(status: sys::napi_status) -> Error {
    Error::Internal(format!("napi call failed with status {status} ({})", status_name(status)))
}

/// [`check`] for code that returns napi-rs's `Result` (conversion callbacks, `#[napi]` bodies).
#[inline]
pub fn check_napi(status: sys::napi_status) -> napi::Result<()> {
    check(status).map_err(internal)
}

/// An [`Error`] as a napi-rs error (the message only; use [`throw`] for the JS error with `code`).
pub fn internal(e: Error) -> napi::Error {
    napi::Error::from_reason(e.to_string())
}

/// A napi-rs error as ours (`ERR_INTERNAL`).
pub fn from_napi(e: napi::Error) -> Error {
    Error::Internal(e.reason.clone())
}

fn status_name(status: sys::napi_status) -> &'static str {
    use sys::Status as S;
    match status {
        S::napi_invalid_arg => "invalid_arg",
        S::napi_object_expected => "object_expected",
        S::napi_string_expected => "string_expected",
        S::napi_name_expected => "name_expected",
        S::napi_function_expected => "function_expected",
        S::napi_number_expected => "number_expected",
        S::napi_boolean_expected => "boolean_expected",
        S::napi_array_expected => "array_expected",
        S::napi_generic_failure => "generic_failure",
        S::napi_pending_exception => "pending_exception",
        S::napi_cancelled => "cancelled",
        S::napi_escape_called_twice => "escape_called_twice",
        S::napi_handle_scope_mismatch => "handle_scope_mismatch",
        S::napi_callback_scope_mismatch => "callback_scope_mismatch",
        S::napi_queue_full => "queue_full",
        S::napi_closing => "closing",
        S::napi_bigint_expected => "bigint_expected",
        S::napi_date_expected => "date_expected",
        S::napi_arraybuffer_expected => "arraybuffer_expected",
        S::napi_detachable_arraybuffer_expected => "detachable_arraybuffer_expected",
        S::napi_would_deadlock => "would_deadlock",
        S::napi_no_external_buffers_allowed => "no_external_buffers_allowed",
        S::napi_cannot_run_js => "cannot_run_js",
        _ => "unknown",
    }
}
