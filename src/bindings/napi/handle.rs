//! Tagged external handles: a Rust value owned by a JS value (an `external` marked with a type
//! tag), freed by the garbage collector's finalizer. Reading one back checks the tag, so an
//! external made by other code (or a handle of another type) is refused, and the reference it
//! yields lives no longer than the JS value's call ([`Js`]'s `'env`).

use std::ffi::c_void;
use std::ptr;

use napi::{sys, Env};

use super::check;
use super::value::{Js, RawValue};
use crate::error::{Error, Result};

/// A type whose values JavaScript holds as tagged externals.
pub trait Handle: Sized + 'static {
    /// Unique per type: marks the externals holding a `Self`.
    const TAG: sys::napi_type_tag;
}

/// A new external owning `value`, tagged `T::TAG`.
pub fn new_handle<T: Handle>(env: &Env, value: T) -> Result<RawValue> {
    let data = Box::into_raw(Box::new(value));
    let mut v = ptr::null_mut();
    // SAFETY: on the JS thread with the current call's environment. `data` is a fresh heap
    // pointer; once the external exists its finalizer (`drop_handle::<T>`) owns it and frees it
    // once, when the external is collected.
    let status =
        unsafe { sys::napi_create_external(env.raw(), data.cast(), Some(drop_handle::<T>), ptr::null_mut(), &mut v) };
    if let Err(e) = check(status) {
        // SAFETY: no external was made, so no finalizer will run: the box is still ours.
        drop(unsafe { Box::from_raw(data) });
        return Err(e);
    }
    // SAFETY: `v` is the external just made, `T::TAG` a static tag. Should tagging fail, the
    // external still owns (and will free) the value; it is just never read back as a `T`.
    check(unsafe { sys::napi_type_tag_object(env.raw(), v, &T::TAG) })?;
    Ok(v)
}

/// The `T` held by `v`, if `v` is an external tagged `T::TAG`.
#[inline]
pub fn handle_ref<'env, T: Handle>(v: Js<'env>) -> Option<&'env T> {
    let data = v.tagged_external(&T::TAG)?;
    // SAFETY: externals tagged `T::TAG` are made by `new_handle::<T>` only and hold a live `T`
    // until their finalizer runs, which cannot happen while `v` is rooted in the current call
    // (`'env`); the `T` is only ever borrowed shared.
    Some(unsafe { &*data.cast::<T>() })
}

/// The finalizer of [`new_handle`]'s externals.
///
/// # Safety
/// `data` must be the `Box<T>` handed to `napi_create_external`; called once, by N-API.
unsafe extern "C" fn drop_handle<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    if !data.is_null() {
        // SAFETY: guaranteed by the caller.
        drop(unsafe { Box::from_raw(data.cast::<T>()) });
    }
}

/// An external holding a plain number (no payload to free), for tagging JS objects with an
/// index (the abort listener's slot). Read back with [`Js::external_word`].
pub fn external_word(env: &Env, word: usize) -> Result<RawValue> {
    let mut v = ptr::null_mut();
    // SAFETY: on the JS thread with the current call's environment; the pointer is a number,
    // never dereferenced, and there is no finalizer.
    check(unsafe { sys::napi_create_external(env.raw(), word as *mut c_void, None, ptr::null_mut(), &mut v) })?;
    Ok(v)
}

impl Js<'_> {
    /// The number held by an external made by [`external_word`] (or any external's pointer as
    /// a number), or `None` for another value.
    pub fn external_word(&self) -> Option<usize> {
        if self.type_of() != sys::ValueType::napi_external {
            return None;
        }
        let mut p = ptr::null_mut();
        // SAFETY: on the JS thread with the value's environment; the value is an external.
        check(unsafe { sys::napi_get_value_external(self.env_raw(), self.raw(), &mut p) }).ok()?;
        Some(p as usize)
    }
}

/// A reference to a JS value (`napi_ref`) of one environment: strong while its count is 1, weak
/// at 0. Deleted with [`Ref::delete`] on the JS thread of its environment. Node does not free a
/// reference nobody deleted, even with its environment: one kept for the life of an
/// environment is deleted by the teardown hook (`napi::on_teardown`).
pub struct Ref {
    env: sys::napi_env,
    raw: sys::napi_ref,
}

impl Ref {
    /// A reference to `v` with `count` (1: strong).
    pub fn new(v: Js<'_>, count: u32) -> Result<Ref> {
        let mut r = ptr::null_mut();
        // SAFETY: on the JS thread with the value's environment.
        check(unsafe { sys::napi_create_reference(v.env_raw(), v.raw(), count, &mut r) })?;
        Ok(Ref { env: v.env_raw(), raw: r })
    }

    /// Whether the reference belongs to `env`.
    pub fn is_of(&self, env: &Env) -> bool {
        self.env == env.raw()
    }

    /// The value, or `None` when it was collected (a weak reference) or the reference belongs
    /// to another environment.
    pub fn value<'env>(&self, env: &'env Env) -> Option<Js<'env>> {
        if !self.is_of(env) {
            return None;
        }
        let mut v = ptr::null_mut();
        // SAFETY: a live reference (not deleted: `delete` consumes it) of this environment.
        check(unsafe { sys::napi_get_reference_value(self.env, self.raw, &mut v) }).ok()?;
        (!v.is_null()).then(|| Js::new(env, v))
    }

    /// Deletes the reference (JS thread of its environment).
    pub fn delete(self, env: &Env) -> Result<()> {
        if !self.is_of(env) {
            return Err(Error::Internal("a reference deleted from another environment".into()));
        }
        // SAFETY: a live reference of this environment, deleted once (consumed).
        check(unsafe { sys::napi_delete_reference(self.env, self.raw) })
    }
}
