//! The single place an [`Error`] becomes a JS `Error`: `message`, `code`, and the structured
//! details (`expectedNext`, `stream`, `sqliteCode`, …).

use std::ffi::CStr;
use std::ptr;

use napi::{sys, Env};

use super::check;
use super::value::exception_pending;
use super::value::{unknown, Out, RawValue};
use crate::error::{Error, Result};

/// Builds the JS `Error` for `err`: message, `code`, and the structured details.
pub fn js_error(env: &Env, err: &Error) -> Result<RawValue> {
    js_error_with_message(env, err, &err.to_string())
}

/// [`js_error`] with another message (the host SQL binding passes SQLite's own message).
pub fn js_error_with_message(env: &Env, err: &Error, message: &str) -> Result<RawValue> {
    let out = Out::new(env);
    let s = |text: &str| out.str(text).map_err(super::from_napi);
    let (code, message) = (s(err.code())?, s(message)?);
    let mut e = ptr::null_mut();
    // SAFETY: an N-API call on the JS thread with the current call's environment and two
    // strings just made in it; `e` is a local of the type N-API writes.
    check(unsafe { sys::napi_create_error(env.raw(), code, message, &mut e) })?;
    let error = out.js(e);
    let set =
        |key: &CStr, v: napi::Result<RawValue>| -> Result<()> { error.set_named(key, v.map_err(super::from_napi)?) };
    match err {
        Error::SeqMismatch { expected_next, stream, .. } => {
            set(c"expectedNext", out.bigint(*expected_next))?;
            set(c"stream", out.str(stream))?;
        }
        Error::StreamNotFound { stream } | Error::StreamExists { stream, .. } | Error::StreamExpired { stream } => {
            set(c"stream", out.str(stream))?;
        }
        Error::EdgeReadOnly { writer } => {
            set(c"writer", out.str(writer))?;
        }
        Error::Storage { code, extended_code, .. } => {
            set(c"sqliteCode", out.str(code))?;
            set(c"sqliteExtendedCode", out.i32(*extended_code))?;
        }
        _ => {}
    }
    Ok(e)
}

/// A `napi::Error` that throws the JS error built by [`js_error`] (for synchronous calls).
/// Should the error object itself fail to build, napi-rs throws a plain error with the message.
///
/// When a JS exception is already pending (a user's getter or Proxy trap threw while an
/// argument was read), that exception is what the call throws, as it would be in JavaScript:
/// `err` (the failed read) is dropped.
pub fn throw(env: &Env, err: Error) -> napi::Error {
    if exception_pending(env.raw()) {
        return napi::Error::new(napi::Status::PendingException, err.to_string());
    }
    match js_error(env, &err) {
        Ok(value) => napi::Error::from(unknown(env, value)),
        Err(_) => napi::Error::from_reason(format!("{}: {err}", err.code())),
    }
}
