//! The JavaScript functions the native side calls where building or reading many JS values is
//! far cheaper in JIT-compiled code than through one N-API call per property: they live in
//! `lib/internal/helpers.js` and are handed over once per environment by
//! `lib/internal/native.js` (`_setHelpers`), which every entry point of the package loads.

use std::cell::RefCell;

use napi::Env;

use super::handle::Ref;
use super::value::{Js, Out, RawValue};
use crate::error::{Error, Result};

/// One helper of `lib/internal/helpers.js`.
#[derive(Clone, Copy, Debug)]
pub enum Helper {
    /// `makeHit(generation, keyId, bucketMaxSourceOffsetSeq, flushAtMs, bucketStartMs)`: a
    /// frozen hit object.
    MakeHit,
    /// `packRows(rows, start, end)`: one chunk of `processRows`'s rows as columns.
    PackRows,
    /// `buildTouches(n, keyIds, …)`: a batch's touch objects from its columns.
    BuildTouches,
    /// `makeWaitReply(touched, cursor, kind, bucketMaxSourceOffsetSeq, flushAtMs,
    /// bucketStartMs)`: the reply object of a `TouchEngine.wait` that is not stale.
    MakeWaitReply,
}

const NAMES: [(&std::ffi::CStr, Helper); 4] = [
    (c"makeHit", Helper::MakeHit),
    (c"packRows", Helper::PackRows),
    (c"buildTouches", Helper::BuildTouches),
    (c"makeWaitReply", Helper::MakeWaitReply),
];

thread_local! {
    /// This JS thread's helpers (strong references of its environment), by [`Helper`] index.
    static HELPERS: RefCell<Option<Vec<Ref>>> = const { RefCell::new(None) };
}

/// Takes the helpers from `obj` (`{ makeHit, packRows, buildTouches, makeWaitReply }`) for this
/// environment.
pub fn install(env: &Env, obj: Js<'_>) -> Result<()> {
    let mut refs = Vec::with_capacity(NAMES.len());
    for (name, _) in NAMES {
        let f = obj.get_named(name)?.filter(|f| f.type_of() == napi::sys::ValueType::napi_function);
        let f = f.ok_or_else(|| Error::invalid(format!("helpers.{} must be a function", name.to_string_lossy())))?;
        refs.push(Ref::new(f, 1)?);
    }
    let old = HELPERS.with(|h| h.replace(Some(refs)));
    let first_in_env = old.as_ref().is_none_or(|refs| refs.first().is_none_or(|r| !r.is_of(env)));
    for r in old.into_iter().flatten() {
        // Ours (a second install) are deleted here; another environment's were released by its
        // teardown hook.
        if r.is_of(env) {
            let _deleted = r.delete(env);
        }
    }
    if first_in_env {
        // Once per environment (N-API refuses the same hook twice).
        super::on_teardown(env)?;
    }
    Ok(())
}

/// Deletes this thread's helper references if they belong to `env` (its teardown).
pub(super) fn forget(env: &Env) {
    let refs = HELPERS.with(|h| {
        let mut h = h.borrow_mut();
        if h.as_ref().is_some_and(|refs| refs.first().is_some_and(|r| r.is_of(env))) {
            h.take()
        } else {
            None
        }
    });
    for r in refs.into_iter().flatten() {
        // A live reference of this environment: deleting cannot fail.
        let _deleted = r.delete(env);
    }
}

/// Calls `helper(args…)` with `this` = `undefined`; a JS exception becomes `Err(message)`.
pub fn call<'env>(env: &'env Env, helper: Helper, args: &[RawValue]) -> Result<Js<'env>> {
    let f = HELPERS.with(|h| h.borrow().as_ref().and_then(|refs| refs[helper as usize].value(env)));
    let f = f.ok_or_else(|| {
        Error::Internal("durable-touch: the native module was loaded without lib/internal/native.js".into())
    })?;
    let undefined = Out::new(env).undefined().map_err(super::from_napi)?;
    f.call(undefined, args)
}
