//! The native halves of the JavaScript `waitForAny` and `touch` (`lib/internal/journal-methods.js`).
//!
//! A `#[napi]` method pays ~0.3 µs per call in napi-rs's receiver checks (unwrapping `this`,
//! its type tag, the native-borrow registry) before any work, and reading an argument object's
//! fields through N-API costs as much again: together about half of what registering a waiter
//! costs, and most of a single touch. So the public `waitForAny` and `touch` are small
//! JavaScript functions, installed on `TouchJournal.prototype` when the package loads: they
//! read the fields in JIT-compiled code and call plain functions (`_waitForAny`, `_touch`) with
//! a handle made once per journal (`_journalHandle`, kept on the instance under a private
//! symbol). Same checks, same errors, same results as the native methods, which stay as the
//! fallback and the typed declarations.
//!
//! The common wait (a plain array of u32 key ids, number fields) is written in JavaScript into
//! the handle's argument buffer ([`WaitArgsBuffer`], typed arrays over native memory) and
//! started by `_waitArgs(handle, signal)`, a raw N-API callback (no napi-rs wrapper, whose
//! borrow scope allocates per call): no N-API call per key or field; the native side checks the
//! numbers as the general path does. (A per-journal native function with the journal as its
//! data, freed by `napi_add_finalizer`, measured no faster; tagged externals and external
//! buffers are the lifetimes both runtimes have run on in CI.)

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use super::journal::convert::{check_wait_args, parse_wait_fields, u32_of, wait_request, JsResult};
use super::journal::{js_waiter, touch_args, wait_parsed, JsJournal, TouchJournal};
use super::napi::callback::{self, CallInfo};
use super::napi::handle::{handle_ref, new_handle, Handle};
use super::napi::shared::{WaitArgsBuffer, WAIT_ARGS_F64_AT};
use super::napi::{js_error, throw, unknown, Js, Port, RawValue};
use crate::error::Error;
use crate::journal::{KeyIds, WaitRequest, MAX_WAIT_KEYS};

/// `_maxWaitKeys`: most key ids (and exact keys) one native wait takes, for `compat/journal.mjs`,
/// which splits a longer wait into several.
/// (A function: napi-rs ignores `js_name` on a constant.)
#[napi(js_name = "_maxWaitKeys", skip_typescript)]
pub fn max_wait_keys() -> u32 {
    MAX_WAIT_KEYS as u32
}

/// What the JavaScript methods hold per journal.
struct JournalHandle {
    journal: JsJournal,
    port: Port,
    args: WaitArgsBuffer,
}

impl Handle for JournalHandle {
    const TAG: sys::napi_type_tag = sys::napi_type_tag { lower: 0x6475_7261_626c_6574, upper: 0x7761_6974_6861_6e64 };
}

/// The journal behind a handle from `_journalHandle`, for as long as the handle's call lasts.
fn handle_of<'env>(v: Js<'env>) -> JsResult<&'env JournalHandle> {
    handle_ref::<JournalHandle>(v).ok_or_else(|| Error::invalid("not a TouchJournal handle"))
}

/// `_journalHandle(journal)`: the handle the JavaScript methods pass to the plain functions.
#[napi(js_name = "_journalHandle", skip_typescript)]
pub fn journal_handle<'env>(env: &'env Env, journal: &TouchJournal) -> napi::Result<Unknown<'env>> {
    let handle =
        JournalHandle { journal: journal.journal.clone(), port: journal.port.clone(), args: WaitArgsBuffer::new() };
    let v = new_handle(env, handle).map_err(|e| throw(env, e))?;
    Ok(unknown(env, v))
}

/// `_waitArgsBuffer(handle)`: the ArrayBuffer over the wait arguments of the journal behind
/// `handle`, or `undefined` where the runtime refuses external buffers (the JavaScript
/// `waitForAny` then always takes the general path).
#[napi(js_name = "_waitArgsBuffer", skip_typescript)]
pub fn wait_args_buffer<'env>(env: &'env Env, handle: Unknown) -> napi::Result<Unknown<'env>> {
    let h = handle_of(Js::new(env, handle.raw())).map_err(|e| throw(env, e))?;
    match h.args.array_buffer(env).map_err(|e| throw(env, e))? {
        Some(ab) => Ok(unknown(env, ab)),
        None => Ok(unknown(env, super::napi::Out::new(env).undefined()?)),
    }
}

/// `_journalFastPath()`: `{ waitArgs, maxKeys, f64At }`: the raw `_waitArgs` function and the
/// layout of the argument buffer, for `lib/internal/journal-methods.js`.
#[napi(js_name = "_journalFastPath", skip_typescript)]
pub fn journal_fast_path(env: &Env) -> napi::Result<Object<'_>> {
    let wait_args = callback::function(env, "_waitArgs", wait_args_cb).map_err(|e| throw(env, e))?;
    let mut o = Object::new(env)?;
    o.set_named_property("waitArgs", unknown(env, wait_args))?;
    o.set_named_property("maxKeys", MAX_WAIT_KEYS as u32)?;
    o.set_named_property("f64At", WAIT_ARGS_F64_AT as u32)?;
    Ok(o)
}

/// The request the JavaScript side wrote into a handle's buffer, checked as the general path
/// checks the same values.
fn fast_request(args: &WaitArgsBuffer) -> JsResult<WaitRequest> {
    let a = args.read(KeyIds::from_slice);
    let keys = a.keys.ok_or_else(|| Error::invalid("keys: too many keys"))?;
    let after_generation = a.after_generation.map(|g| u32_of(g, "afterGeneration")).transpose()?;
    wait_request(keys, Vec::new(), after_generation, a.timeout_ms)
}

/// `_waitArgs(handle, signal?)`: `waitForAny` with the request the JavaScript side wrote into
/// the handle's buffer. A raw N-API callback: this is the hottest registration path.
unsafe extern "C" fn wait_args_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: N-API's own arguments to this callback.
    unsafe { callback::entry_expecting::<2>(env, info, wait_args_body, js_error) }
}

fn wait_args_body(call: &CallInfo<'_>) -> crate::Result<RawValue> {
    let env = call.env;
    let h = handle_of(call.arg(0))?;
    let signal = Some(call.arg(1)).filter(|v| !v.is_nullish());
    let parsed = fast_request(&h.args).map(|req| (req, signal));
    // napi-rs errors here are already thrown JS errors (or plain failures): rethrown as they are.
    wait_parsed(env, &h.journal, &h.port, parsed, js_waiter).map(|v| v.raw()).map_err(super::napi::from_napi)
}

/// `waitForAny` with the argument's fields read by the JavaScript caller.
#[napi(js_name = "_waitForAny", skip_typescript)]
#[allow(clippy::too_many_arguments)]
pub fn wait_for_any_fields<'env>(
    env: &'env Env,
    handle: Unknown,
    args: Unknown,
    keys: Unknown,
    exact_keys: Unknown,
    after_generation: Unknown,
    timeout_ms: Unknown,
    signal: Unknown,
) -> napi::Result<Unknown<'env>> {
    let h = handle_of(Js::new(env, handle.raw())).map_err(|e| throw(env, e))?;
    let field = |u: &Unknown| Some(Js::new(env, u.raw())).filter(|v| !v.is_nullish());
    let parsed = check_wait_args(&Js::new(env, args.raw())).and_then(|()| {
        parse_wait_fields([
            field(&keys),
            field(&exact_keys),
            field(&after_generation),
            field(&timeout_ms),
            field(&signal),
        ])
    });
    wait_parsed(env, &h.journal, &h.port, parsed, js_waiter)
}

/// `touch` through a journal handle.
#[napi(js_name = "_touch", skip_typescript)]
pub fn touch_with_handle(
    env: &Env,
    handle: Unknown,
    key_id: Unknown,
    source_offset_seq: Unknown,
    routing_key: Unknown,
) -> napi::Result<()> {
    let h = handle_of(Js::new(env, handle.raw())).map_err(|e| throw(env, e))?;
    touch_args(env, &h.journal, key_id, Some(source_offset_seq), Some(routing_key))
}
