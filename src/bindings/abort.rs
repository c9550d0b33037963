//! AbortSignal support for promise-returning methods (`TouchEngine.wait`,
//! `TouchJournal.waitForAny`): check `signal.aborted`, attach an `abort` listener (with
//! `addEventListener`, so a user's `onabort` is left alone), and remove it once the operation
//! settled. JS thread only.

use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;

use napi::{sys, Env};

use super::js::{Js, Out};
use crate::error::{Error, Result};

/// What to do when the signal fires (runs at most once, on the JS thread).
pub type OnAbort = Box<dyn FnOnce(&Env)>;

/// Owned by the listener function; freed by its finalizer.
struct Ctx {
    on_abort: RefCell<Option<OnAbort>>,
}

/// The signal and listener references of one operation, released by [`AbortHook::release`].
pub struct AbortHook {
    signal: sys::napi_ref,
    listener: sys::napi_ref,
}

// SAFETY: the references are created and released on the JS thread only; the hook merely
// travels with the operation's outcome to the settlement, which runs on the JS thread.
unsafe impl Send for AbortHook {}

fn ok(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::Internal(format!("napi call failed with status {status}")))
    }
}

unsafe extern "C" fn on_abort(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let mut data: *mut c_void = ptr::null_mut();
    let mut argc = 0usize;
    unsafe { sys::napi_get_cb_info(env, info, &mut argc, ptr::null_mut(), ptr::null_mut(), &mut data) };
    if !data.is_null() {
        let ctx = unsafe { &*(data as *const Ctx) };
        let f = ctx.on_abort.borrow_mut().take();
        if let Some(f) = f {
            let env = Env::from_raw(env);
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&env)));
        }
    }
    ptr::null_mut()
}

unsafe extern "C" fn free_ctx(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    if !data.is_null() {
        drop(unsafe { Box::from_raw(data as *mut Ctx) });
    }
}

fn call_method(
    env: sys::napi_env,
    obj: sys::napi_value,
    name: &std::ffi::CStr,
    args: &[sys::napi_value],
) -> Result<()> {
    let mut f = ptr::null_mut();
    ok(unsafe { sys::napi_get_named_property(env, obj, name.as_ptr(), &mut f) })?;
    let mut result = ptr::null_mut();
    ok(unsafe { sys::napi_call_function(env, obj, f, args.len(), args.as_ptr(), &mut result) })
}

/// Checks that `signal` looks like an AbortSignal; returns whether it is already aborted.
pub fn is_aborted(signal: &Js) -> Result<bool> {
    let bad = || Error::invalid("signal must be an AbortSignal");
    if !signal.is_object() {
        return Err(bad());
    }
    let add = signal.get("addEventListener")?.ok_or_else(bad)?;
    if add.type_of() != sys::ValueType::napi_function {
        return Err(bad());
    }
    match signal.get("aborted")? {
        Some(v) if v.type_of() == sys::ValueType::napi_boolean => v.boolean("signal.aborted"),
        _ => Err(bad()),
    }
}

/// Attaches `on_abort` to the signal's `abort` event (once).
pub fn listen(env: &Env, signal: &Js, on_abort_fn: OnAbort) -> Result<AbortHook> {
    let hook = listener(env, signal, on_abort_fn)?;
    if let Err(e) = hook.attach(env) {
        hook.release(env);
        return Err(e);
    }
    Ok(hook)
}

/// Creates the listener for `signal` without attaching it yet, for callers that must store the
/// hook before the operation it cancels exists; [`AbortHook::attach`] then adds it.
pub fn listener(env: &Env, signal: &Js, on_abort_fn: OnAbort) -> Result<AbortHook> {
    let raw = env.raw();
    let ctx = Box::into_raw(Box::new(Ctx { on_abort: RefCell::new(Some(on_abort_fn)) }));
    let mut listener = ptr::null_mut();
    if unsafe { sys::napi_create_function(raw, c"onAbort".as_ptr(), 7, Some(on_abort), ctx.cast(), &mut listener) }
        != sys::Status::napi_ok
    {
        drop(unsafe { Box::from_raw(ctx) });
        return Err(Error::Internal("cannot create the abort listener".into()));
    }
    ok(unsafe {
        sys::napi_add_finalizer(raw, listener, ctx.cast(), Some(free_ctx), ptr::null_mut(), ptr::null_mut())
    })?;
    let (mut signal_ref, mut listener_ref) = (ptr::null_mut(), ptr::null_mut());
    ok(unsafe { sys::napi_create_reference(raw, signal.raw, 1, &mut signal_ref) })?;
    ok(unsafe { sys::napi_create_reference(raw, listener, 1, &mut listener_ref) })?;
    Ok(AbortHook { signal: signal_ref, listener: listener_ref })
}

impl AbortHook {
    fn values(&self, raw: sys::napi_env) -> (sys::napi_value, sys::napi_value) {
        let (mut signal, mut listener) = (ptr::null_mut(), ptr::null_mut());
        unsafe {
            sys::napi_get_reference_value(raw, self.signal, &mut signal);
            sys::napi_get_reference_value(raw, self.listener, &mut listener);
        }
        (signal, listener)
    }

    /// Adds the listener to the signal's `abort` event (once).
    pub fn attach(&self, env: &Env) -> Result<()> {
        let (signal, listener) = self.values(env.raw());
        if signal.is_null() || listener.is_null() {
            return Err(Error::Internal("the abort listener is gone".into()));
        }
        let out = Out::new(env);
        let conv = |e: napi::Error| Error::Internal(e.reason.clone());
        let opts = out.object().map_err(conv)?;
        out.set(opts, "once", out.bool(true).map_err(conv)?).map_err(conv)?;
        let abort = out.str("abort").map_err(conv)?;
        call_method(env.raw(), signal, c"addEventListener", &[abort, listener, opts])
    }

    /// Removes the listener and drops the references (JS thread, once the operation settled).
    pub fn release(self, env: &Env) {
        let raw = env.raw();
        let (signal, listener) = self.values(raw);
        if !signal.is_null() && !listener.is_null() {
            if let Ok(abort) = Out::new(env).str("abort") {
                if call_method(raw, signal, c"removeEventListener", &[abort, listener]).is_err() {
                    // A throwing removeEventListener must not turn the settlement into an error.
                    let mut exc = ptr::null_mut();
                    unsafe { sys::napi_get_and_clear_last_exception(raw, &mut exc) };
                }
            }
        }
        unsafe {
            sys::napi_delete_reference(raw, self.signal);
            sys::napi_delete_reference(raw, self.listener);
        }
    }
}
