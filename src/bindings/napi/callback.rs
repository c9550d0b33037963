//! Raw N-API callbacks: functions made with `napi_create_function` and no napi-rs wrapper, for
//! the hottest entry points (a wrapper's receiver checks and per-call borrow scope cost as much
//! as the work of a small call). [`entry`] reads the arguments, catches panics and throws
//! errors; the body sees only a [`CallInfo`].

use std::ptr;

use napi::{sys, Env};
use smallvec::SmallVec;

use super::check;
use super::value::{Js, Out, RawValue};
use crate::error::{Error, Result};

/// The signature N-API calls.
pub type RawCallback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// One call's environment, receiver and arguments (at most 16 read without allocating).
pub struct CallInfo<'env> {
    pub env: &'env Env,
    this: RawValue,
    argv: SmallVec<[RawValue; 16]>,
}

impl<'env> CallInfo<'env> {
    /// Argument `i` (`undefined` when missing).
    pub fn arg(&self, i: usize) -> Js<'env> {
        Js::new(self.env, self.argv.get(i).copied().unwrap_or(ptr::null_mut()))
    }

    /// How many arguments were passed.
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }

    /// The receiver (`this`).
    pub fn this(&self) -> Js<'env> {
        Js::new(self.env, self.this)
    }

    pub fn out(&self) -> Out<'env> {
        Out::new(self.env)
    }
}

/// Runs the body of a raw callback: reads the receiver and the arguments, catches panics, and
/// turns an `Err` into a thrown JS error (built by `error_value`).
///
/// # Safety
/// `env` and `info` must be the ones N-API passed to the running callback.
pub unsafe fn entry(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&CallInfo<'_>) -> Result<RawValue>,
    error_value: fn(&Env, &Error) -> Result<RawValue>,
) -> sys::napi_value {
    // SAFETY: guaranteed by the caller.
    unsafe { entry_expecting::<16>(env, info, body, error_value) }
}

/// [`entry`] for a callback that usually gets `N` arguments (at most 16): N-API is asked for
/// `N` first (it fills every slot it is given, so asking for fewer costs less on hot paths),
/// and for all of them only when more were passed.
///
/// # Safety
/// `env` and `info` must be the ones N-API passed to the running callback.
pub unsafe fn entry_expecting<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&CallInfo<'_>) -> Result<RawValue>,
    error_value: fn(&Env, &Error) -> Result<RawValue>,
) -> sys::napi_value {
    const { assert!(N <= 16) };
    let js_env = Env::from_raw(env);
    let mut call =
        CallInfo { env: &js_env, this: ptr::null_mut(), argv: SmallVec::from_buf_and_len([ptr::null_mut(); 16], N) };
    let mut argc = N;
    // SAFETY: guaranteed by the caller for `env`/`info`; `argv` has room for `argc` values and
    // N-API reports the real count in `argc`.
    let mut status =
        unsafe { sys::napi_get_cb_info(env, info, &mut argc, call.argv.as_mut_ptr(), &mut call.this, ptr::null_mut()) };
    if status == sys::Status::napi_ok && argc > call.argv.len() {
        call.argv.resize(argc, ptr::null_mut());
        // SAFETY: as above, with room for every argument.
        status = unsafe {
            sys::napi_get_cb_info(env, info, &mut argc, call.argv.as_mut_ptr(), &mut call.this, ptr::null_mut())
        };
    }
    call.argv.truncate(argc);
    let result = match check(status) {
        Err(_) => Err(Error::Internal("cannot read the arguments".into())),
        Ok(()) => crate::error::catch_panic(|| body(&call)),
    };
    match result {
        Ok(v) => v,
        Err(e) => {
            throw_value(&js_env, error_value(&js_env, &e));
            ptr::null_mut()
        }
    }
}

/// Throws `value` (or, if it could not be built, a plain error naming why). N-API reads the
/// callback's null return as "an exception is pending".
fn throw_value(env: &Env, value: Result<RawValue>) {
    let status = match value {
        // SAFETY: on the JS thread in a callback, with a value of its environment.
        Ok(v) => unsafe { sys::napi_throw(env.raw(), v) },
        // SAFETY: as above; the message is a static NUL-terminated string.
        Err(_) => unsafe {
            sys::napi_throw_error(env.raw(), c"ERR_INTERNAL".as_ptr(), c"cannot build the error".as_ptr())
        },
    };
    // Throwing fails only when an exception is already pending, which then propagates instead.
    let _pending = check(status);
}

/// A JS function calling `cb` (no data pointer: a callback finds its state through its
/// arguments).
pub fn function(env: &Env, name: &str, cb: RawCallback) -> Result<RawValue> {
    let mut f = ptr::null_mut();
    // SAFETY: on the JS thread with the current call's environment; `name` is live for the call
    // (N-API copies it), `cb` has the signature N-API calls.
    check(unsafe {
        sys::napi_create_function(
            env.raw(),
            name.as_ptr().cast(),
            name.len() as isize,
            Some(cb),
            ptr::null_mut(),
            &mut f,
        )
    })?;
    Ok(f)
}
