//! Reading JavaScript arguments ([`Js`]) and building JavaScript values ([`Out`]), with our own
//! error messages.
//!
//! Arguments arrive as untyped values and are checked here, so that a wrong type becomes an
//! `ERR_INVALID_ARGUMENT` rejection naming the argument instead of a generic napi error thrown
//! synchronously.
//!
//! Every `unsafe` block here is an N-API call on the JS thread with the environment of the
//! current call and values of that environment (the [`Js`] lifetime guarantees both), writing
//! its result through pointers to locals of the right type. Blocks that do more say so.

use std::ffi::{c_void, CStr};
use std::marker::PhantomData;
use std::ptr;

use napi::bindgen_prelude::{ToNapiValue, Unknown};
use napi::{sys, Env};

use super::{check, check_napi};
use crate::error::{Error, Result};
use crate::jscompat::json::{Object as JsonObject, Value as JsonValue};
use crate::jscompat::string::{has_lone_surrogate, wtf8_from_utf16, JsString};

/// A raw JS value handle, for values built with [`Out`] and handed straight back to N-API.
pub type RawValue = sys::napi_value;

/// A JS value and its environment, valid for the current native call on the JS thread
/// (`'env` is the borrow of that call's [`Env`]).
#[derive(Clone, Copy)]
pub struct Js<'env> {
    env: sys::napi_env,
    raw: sys::napi_value,
    _call: PhantomData<&'env Env>,
}

impl<'env> Js<'env> {
    pub fn new(env: &'env Env, raw: sys::napi_value) -> Js<'env> {
        Js { env: env.raw(), raw, _call: PhantomData }
    }

    /// Another value of the same call.
    fn sibling(&self, raw: sys::napi_value) -> Js<'env> {
        Js { env: self.env, raw, _call: PhantomData }
    }

    /// The raw value, to hand back to N-API (as an argument of a call, a property value).
    pub fn raw(&self) -> sys::napi_value {
        self.raw
    }

    pub fn env_raw(&self) -> sys::napi_env {
        self.env
    }

    /// The value's type; a missing argument (a null handle) reads as `undefined`.
    #[inline]
    pub fn type_of(&self) -> sys::napi_valuetype {
        if self.raw.is_null() {
            return sys::ValueType::napi_undefined;
        }
        let mut t = sys::ValueType::napi_undefined;
        // SAFETY: see the module doc; `t` is a local of the type N-API writes.
        let status = unsafe { sys::napi_typeof(self.env, self.raw, &mut t) };
        // napi_typeof fails only for an invalid handle; such a value is treated as undefined.
        // (The status is compared here, not through `check`: this runs several times per call
        // on hot paths.)
        if status != sys::Status::napi_ok {
            return sys::ValueType::napi_undefined;
        }
        t
    }

    /// `undefined` or `null` (or a missing argument).
    pub fn is_nullish(&self) -> bool {
        matches!(self.type_of(), sys::ValueType::napi_undefined | sys::ValueType::napi_null)
    }

    pub fn string(&self, what: &str) -> Result<String> {
        if self.type_of() != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what} must be a string")));
        }
        let mut len = 0usize;
        // SAFETY: see the module doc; with no buffer N-API only reports the length in bytes.
        check(unsafe { sys::napi_get_value_string_utf8(self.env, self.raw, ptr::null_mut(), 0, &mut len) })?;
        let mut buf = vec![0u8; len + 1];
        let mut written = 0usize;
        // SAFETY: `buf` has room for `len + 1` bytes (the text and a NUL), as N-API is told.
        check(unsafe {
            sys::napi_get_value_string_utf8(self.env, self.raw, buf.as_mut_ptr().cast(), len + 1, &mut written)
        })?;
        buf.truncate(written);
        // napi produces valid UTF-8 (lone surrogates become U+FFFD).
        String::from_utf8(buf).map_err(|_| Error::invalid(format!("{what} is not valid text")))
    }

    /// The string as UTF-16 code units, for JS-order comparisons.
    pub fn string_utf16(&self, what: &str) -> Result<Vec<u16>> {
        if self.type_of() != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what} must be a string")));
        }
        let mut len = 0usize;
        // SAFETY: see the module doc; with no buffer N-API only reports the length in units.
        check(unsafe { sys::napi_get_value_string_utf16(self.env, self.raw, ptr::null_mut(), 0, &mut len) })?;
        let mut buf = vec![0u16; len + 1];
        let mut written = 0usize;
        // SAFETY: `buf` has room for `len + 1` units, as N-API is told.
        check(unsafe {
            sys::napi_get_value_string_utf16(self.env, self.raw, buf.as_mut_ptr(), len + 1, &mut written)
        })?;
        buf.truncate(written);
        Ok(buf)
    }

    /// Calls `f` with the string's UTF-8 text, read into a stack buffer of `N` bytes when it
    /// fits (hot paths), else into a heap buffer.
    #[inline]
    pub fn with_utf8<const N: usize, R>(&self, what: &str, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if self.type_of() != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what} must be a string")));
        }
        let mut stack = [0u8; N];
        let mut written = 0usize;
        // SAFETY: N-API writes at most `N` bytes (the last a NUL) into `stack`.
        check(unsafe {
            sys::napi_get_value_string_utf8(self.env, self.raw, stack.as_mut_ptr().cast(), N, &mut written)
        })?;
        if written + 1 < N {
            return Ok(f(&stack[..written]));
        }
        Ok(f(self.string(what)?.as_bytes()))
    }

    /// Calls `f` with the string's text (valid UTF-8), read into a stack buffer when short.
    #[inline]
    pub fn with_str<R>(&self, what: &str, f: impl FnOnce(&str) -> R) -> Result<R> {
        let text =
            |b: &[u8]| std::str::from_utf8(b).map(f).map_err(|_| Error::invalid(format!("{what} is not valid text")));
        // napi writes whole characters only, so a prefix that fits is valid UTF-8.
        self.with_utf8::<64, _>(what, text)?
    }

    pub fn number(&self, what: &str) -> Result<f64> {
        if self.type_of() != sys::ValueType::napi_number {
            return Err(Error::invalid(format!("{what} must be a number")));
        }
        self.try_number().ok_or_else(|| Error::invalid(format!("{what} must be a number")))
    }

    /// The number, or `None` when the value is not a number (one N-API call: no type check
    /// first). Any failing status means "not a number" to the callers, which refuse the
    /// argument.
    pub fn try_number(&self) -> Option<f64> {
        let mut v = 0f64;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_value_double(self.env, self.raw, &mut v) }).ok()?;
        Some(v)
    }

    /// A finite number with an integral value within ±(2^53−1).
    pub fn safe_integer(&self, what: &str) -> Result<i64> {
        let v = self.number(what)?;
        if !v.is_finite() || v.fract() != 0.0 || v.abs() > 9_007_199_254_740_991.0 {
            return Err(Error::invalid(format!("{what} must be a safe integer")));
        }
        Ok(v as i64)
    }

    pub fn boolean(&self, what: &str) -> Result<bool> {
        if self.type_of() != sys::ValueType::napi_boolean {
            return Err(Error::invalid(format!("{what} must be a boolean")));
        }
        let mut v = false;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_value_bool(self.env, self.raw, &mut v) })?;
        Ok(v)
    }

    /// A bigint that fits in i64.
    pub fn bigint(&self, what: &str) -> Result<i64> {
        if self.type_of() != sys::ValueType::napi_bigint {
            return Err(Error::invalid(format!("{what} must be a bigint")));
        }
        let (v, lossless) = self.bigint_i64()?;
        if !lossless {
            return Err(Error::invalid(format!("{what} is out of the 64-bit range")));
        }
        Ok(v)
    }

    /// A bigint's value truncated to i64, and whether that was lossless.
    #[inline]
    pub fn bigint_i64(&self) -> Result<(i64, bool)> {
        let mut v = 0i64;
        let mut lossless = false;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_value_bigint_int64(self.env, self.raw, &mut v, &mut lossless) })?;
        Ok((v, lossless))
    }

    /// `String(v)` (for bigints: their decimal digits).
    pub fn coerce_to_string(&self, what: &str) -> Result<String> {
        let mut s = ptr::null_mut();
        // SAFETY: see the module doc. Coercing a bigint or a primitive runs no JavaScript.
        check(unsafe { sys::napi_coerce_to_string(self.env, self.raw, &mut s) })?;
        self.sibling(s).string(what)
    }

    pub fn is_object(&self) -> bool {
        self.type_of() == sys::ValueType::napi_object
    }

    pub fn is_array(&self) -> bool {
        let mut v = false;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_is_array(self.env, self.raw, &mut v) }).is_ok() && v
    }

    /// Requires a plain value of type object (arrays and null refused).
    pub fn object(&self, what: &str) -> Result<Js<'env>> {
        if !self.is_object() || self.is_array() {
            return Err(Error::invalid(format!("{what} must be an object")));
        }
        Ok(*self)
    }

    /// Property `key`, or `None` when it is absent or `undefined`.
    pub fn get(&self, key: &str) -> Result<Option<Js<'env>>> {
        let mut k = ptr::null_mut();
        // SAFETY: `key` is live for the call; N-API copies it.
        check(unsafe { sys::napi_create_string_utf8(self.env, key.as_ptr().cast(), key.len() as isize, &mut k) })?;
        let v = self.get_by_key(&self.sibling(k))?;
        Ok(if v.type_of() == sys::ValueType::napi_undefined { None } else { Some(v) })
    }

    /// Property `key` (a NUL-terminated name, interned by the engine: cheaper than [`Js::get`]
    /// on hot paths), or `None` when absent, `undefined` or `null`.
    pub fn get_named(&self, key: &CStr) -> Result<Option<Js<'env>>> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc; `key` is NUL-terminated and live for the call.
        check(unsafe { sys::napi_get_named_property(self.env, self.raw, key.as_ptr(), &mut v) })?;
        let v = self.sibling(v);
        Ok(if v.is_nullish() { None } else { Some(v) })
    }

    /// Property `key` when present and not `null`.
    pub fn opt(&self, key: &str) -> Result<Option<Js<'env>>> {
        Ok(self.get(key)?.filter(|v| !v.is_nullish()))
    }

    pub fn get_by_key(&self, key: &Js<'env>) -> Result<Js<'env>> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_property(self.env, self.raw, key.raw, &mut v) })?;
        Ok(self.sibling(v))
    }

    /// Sets property `key` (a NUL-terminated name) to `value`.
    pub fn set_named(&self, key: &CStr, value: RawValue) -> Result<()> {
        // SAFETY: see the module doc; `key` is NUL-terminated and live for the call.
        check(unsafe { sys::napi_set_named_property(self.env, self.raw, key.as_ptr(), value) })
    }

    /// Sets property `key` (any value, a symbol say) to `value`.
    pub fn set_by_key(&self, key: RawValue, value: RawValue) -> Result<()> {
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_set_property(self.env, self.raw, key, value) })
    }

    /// Own enumerable string keys.
    pub fn keys(&self) -> Result<Vec<String>> {
        let mut names = ptr::null_mut();
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_property_names(self.env, self.raw, &mut names) })?;
        self.sibling(names).items("keys")?.map(|k| k?.string("key")).collect()
    }

    pub fn array_len(&self, what: &str) -> Result<u32> {
        if !self.is_array() {
            return Err(Error::invalid(format!("{what} must be an array")));
        }
        self.try_array_len().ok_or_else(|| Error::invalid(format!("{what} must be an array")))
    }

    /// The length of an array, or `None` when the value is not one (one N-API call). Any
    /// failing status means "not an array" to the callers, which refuse the argument.
    pub fn try_array_len(&self) -> Option<u32> {
        let mut n = 0u32;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_array_length(self.env, self.raw, &mut n) }).ok()?;
        Some(n)
    }

    pub fn element(&self, i: u32) -> Result<Js<'env>> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_get_element(self.env, self.raw, i, &mut v) })?;
        Ok(self.sibling(v))
    }

    /// The elements of an array, each read when the iterator reaches it, so a caller that
    /// refuses an element reads no further (and nothing is allocated per element up front).
    /// Sizes before elements: where the core has a cap, check [`Js::array_len`] against it
    /// before reading any; where it refuses a list longer than `max` by its length alone, read
    /// only `.take(max + 1)`.
    pub fn items(&self, what: &str) -> Result<impl Iterator<Item = Result<Js<'env>>> + 'env> {
        let n = self.array_len(what)?;
        let array = *self;
        Ok((0..n).map(move |i| array.element(i)))
    }

    /// A typed array's element kind and its bytes (element bytes, from its offset on), without
    /// copying. `None` for any other value. The bytes are valid until JavaScript runs again
    /// (see the module doc), so callers copy them out or use them before.
    fn typed_array(&self) -> Option<(sys::napi_typedarray_type, &'env [u8])> {
        let mut is_ta = false;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_is_typedarray(self.env, self.raw, &mut is_ta) }).ok()?;
        if !is_ta {
            return None;
        }
        let (mut kind, mut len, mut data) = (0, 0usize, ptr::null_mut());
        // Neither the ArrayBuffer nor the offset is asked for: under Bun (JavaScriptCore) a
        // typed array of fewer than 1,000 elements lives in the GC heap with no ArrayBuffer
        // of its own, and asking for its buffer makes one (a malloc, a copy of the bytes, a
        // new ArrayBuffer object) on every call. The server's append encodes each record into
        // such an array, so that was one allocation and copy per row bound (issue 26).
        // SAFETY: see the module doc; every out-pointer is a local of the type N-API writes,
        // and N-API skips the out-parameters passed as null (all are optional).
        let status = unsafe {
            sys::napi_get_typedarray_info(
                self.env,
                self.raw,
                &mut kind,
                &mut len,
                &mut data,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        check(status).ok()?;
        let bytes = len.checked_mul(element_size(kind))?;
        if bytes == 0 || data.is_null() {
            // Empty, or over a detached buffer (length 0, no data).
            return Some((kind, &[]));
        }
        // SAFETY: N-API reports `data` as the typed array's first element and `len` elements of
        // `element_size(kind)` bytes each behind it, inside its buffer, which the value (rooted
        // for the call) keeps alive; the slice is read before JavaScript runs again.
        Some((kind, unsafe { std::slice::from_raw_parts(data as *const u8, bytes) }))
    }

    /// The bytes behind any typed array (its element bytes), without copying.
    pub fn typed_bytes(&self) -> Option<(sys::napi_typedarray_type, &'env [u8])> {
        self.typed_array()
    }

    /// The bytes of a `Buffer`/`Uint8Array`, without copying.
    pub fn byte_slice(&self) -> Option<&'env [u8]> {
        match self.typed_array()? {
            (sys::TypedarrayType::uint8_array, b) => Some(b),
            _ => None,
        }
    }

    /// The elements of a typed array of element kind `kind` whose elements are `T`s.
    fn typed_slice<T: Copy>(&self, kind: sys::napi_typedarray_type) -> Option<&'env [T]> {
        let (k, bytes) = self.typed_array()?;
        if k != kind {
            return None;
        }
        if bytes.is_empty() {
            return Some(&[]);
        }
        debug_assert_eq!(element_size(kind), std::mem::size_of::<T>());
        if !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: the bytes are the array's elements, `size_of::<T>()` each (the kind's
        // element size), at an address aligned for `T` (checked; typed arrays always are), valid
        // as long as `bytes` is; every bit pattern is a valid u32/i64/u64.
        Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / std::mem::size_of::<T>()) })
    }

    /// The elements of a `Uint32Array`, without copying.
    pub fn u32_slice(&self) -> Option<&'env [u32]> {
        self.typed_slice(sys::TypedarrayType::uint32_array)
    }

    /// The elements of a `BigInt64Array`, without copying.
    pub fn i64_slice(&self) -> Option<&'env [i64]> {
        self.typed_slice(sys::TypedarrayType::bigint64_array)
    }

    /// The elements of a `BigUint64Array`, without copying.
    pub fn u64_slice(&self) -> Option<&'env [u64]> {
        self.typed_slice(sys::TypedarrayType::biguint64_array)
    }

    /// The bytes of a typed array, a DataView or an ArrayBuffer, without copying; `None` for
    /// another value. Valid until JavaScript runs again.
    pub fn any_bytes(&self) -> Result<Option<&'env [u8]>> {
        if let Some((_, b)) = self.typed_array() {
            return Ok(Some(b));
        }
        let mut is = false;
        // SAFETY: see the module doc.
        check(unsafe { sys::napi_is_dataview(self.env, self.raw, &mut is) })?;
        let (data, len) = if is {
            let (mut len, mut data, mut ab, mut off) = (0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
            // SAFETY: see the module doc.
            check(unsafe { sys::napi_get_dataview_info(self.env, self.raw, &mut len, &mut data, &mut ab, &mut off) })?;
            (data, len)
        } else {
            // SAFETY: see the module doc.
            check(unsafe { sys::napi_is_arraybuffer(self.env, self.raw, &mut is) })?;
            if !is {
                return Ok(None);
            }
            let (mut data, mut len) = (ptr::null_mut(), 0usize);
            // SAFETY: see the module doc.
            check(unsafe { sys::napi_get_arraybuffer_info(self.env, self.raw, &mut data, &mut len) })?;
            (data, len)
        };
        if len == 0 || data.is_null() {
            return Ok(Some(&[]));
        }
        // SAFETY: N-API reports `len` bytes at `data`, inside a buffer the value (rooted for the
        // call) keeps alive; read before JavaScript runs again.
        Ok(Some(unsafe { std::slice::from_raw_parts(data as *const u8, len) }))
    }

    /// Whether this is an ArrayBuffer that was detached (transferred away).
    pub fn is_detached_array_buffer(&self) -> bool {
        let mut detached = false;
        // SAFETY: see the module doc. Fails (and is answered `false`) for a value that is not an
        // ArrayBuffer.
        check(unsafe { sys::napi_is_detached_arraybuffer(self.env, self.raw, &mut detached) }).is_ok() && detached
    }

    /// A `Buffer`/`Uint8Array` (copied) or a string (as UTF-8).
    pub fn bytes(&self, what: &str) -> Result<Vec<u8>> {
        self.bytes_of(|| what.to_owned())
    }

    /// [`Js::bytes`] with the value's name made only when a conversion fails (one element of
    /// many, such as `payloads[i]`, costs no string).
    pub fn bytes_of(&self, what: impl Fn() -> String) -> Result<Vec<u8>> {
        if let Some(b) = self.byte_slice() {
            return Ok(b.to_vec());
        }
        if self.type_of() == sys::ValueType::napi_string {
            return Ok(self.string(&what())?.into_bytes());
        }
        Err(Error::invalid(format!("{} must be a Buffer, a Uint8Array or a string", what())))
    }

    /// The string as WTF-8 bytes: exact, lone surrogates included.
    pub fn js_string(&self, what: &str) -> Result<JsString> {
        Ok(JsString::from_wtf8(wtf8_from_utf16(&self.string_utf16(what)?)))
    }

    /// Own enumerable string keys, in JS order (`Object.keys`), as a JS array.
    fn own_key_array(&self) -> Result<Js<'env>> {
        let mut names = ptr::null_mut();
        // SAFETY: see the module doc.
        check(unsafe {
            sys::napi_get_all_property_names(
                self.env,
                self.raw,
                sys::KeyCollectionMode::own_only,
                sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
                sys::KeyConversion::numbers_to_strings,
                &mut names,
            )
        })?;
        Ok(self.sibling(names))
    }

    /// The payload of an external value when it carries `tag`, else `None` (see
    /// [`super::handle`]).
    #[inline]
    pub(super) fn tagged_external(&self, tag: &sys::napi_type_tag) -> Option<*mut c_void> {
        // No type check first (an N-API call per use on hot paths): checking the tag of any
        // other value fails or answers false, and only our externals carry our tags;
        // napi_get_value_external still refuses a value that is not an external.
        let mut ours = false;
        // SAFETY: see the module doc; `tag` is live for the call.
        if check(unsafe { sys::napi_check_object_type_tag(self.env, self.raw, tag, &mut ours) }).is_err() {
            // Node converts the value to an object first, which throws for null and undefined:
            // that exception is this probe's, not the caller's, and must not be what the call
            // throws in place of its own error.
            let _cleared = take_exception(self.env);
            return None;
        }
        if !ours {
            return None;
        }
        let mut data = ptr::null_mut();
        // SAFETY: see the module doc; the value carries our tag, which only our externals do
        // (`handle::new_handle`), and N-API checks that it is an external anyway.
        check(unsafe { sys::napi_get_value_external(self.env, self.raw, &mut data) }).ok()?;
        (!data.is_null()).then_some(data)
    }

    /// Calls this function with `this` = `receiver`; a JS exception is cleared and becomes
    /// `Err` with its message.
    pub fn call(&self, receiver: RawValue, args: &[RawValue]) -> Result<Js<'env>> {
        let mut result = ptr::null_mut();
        // SAFETY: see the module doc; `args` holds `args.len()` values of this environment.
        let status =
            unsafe { sys::napi_call_function(self.env, receiver, self.raw, args.len(), args.as_ptr(), &mut result) };
        if status == sys::Status::napi_ok {
            return Ok(self.sibling(result));
        }
        match take_exception(self.env) {
            Some(exc) => {
                let message = self.sibling(exc).get("message").ok().flatten().and_then(|m| m.string("message").ok());
                Err(Error::Internal(message.unwrap_or_else(|| "JavaScript exception".into())))
            }
            None => Err(check(status).expect_err("status is not ok")),
        }
    }

    /// Calls method `name` of this object; a JS exception is cleared and becomes `Err`.
    pub fn call_method(&self, name: &CStr, args: &[RawValue]) -> Result<()> {
        let f = match self.get_named(name) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(Error::Internal(format!("no method {name:?}"))),
            Err(e) => {
                let _cleared = take_exception(self.env);
                return Err(e);
            }
        };
        f.call(self.raw, args).map(|_| ())
    }
}

/// Whether a JS exception is pending (false if the environment cannot tell: it is tearing
/// down, and nothing can be thrown any more).
pub(super) fn exception_pending(env: sys::napi_env) -> bool {
    let mut pending = false;
    // SAFETY: an N-API call on the JS thread with the current call's environment.
    check(unsafe { sys::napi_is_exception_pending(env, &mut pending) }).is_ok() && pending
}

/// Clears the pending JS exception, if any, and returns it.
pub(super) fn take_exception(env: sys::napi_env) -> Option<RawValue> {
    if !exception_pending(env) {
        return None;
    }
    let mut exc = ptr::null_mut();
    // SAFETY: an N-API call on the JS thread with the current call's environment.
    check(unsafe { sys::napi_get_and_clear_last_exception(env, &mut exc) }).ok()?;
    Some(exc)
}

/// The bytes per element of a typed array kind.
pub fn element_size(kind: sys::napi_typedarray_type) -> usize {
    use sys::TypedarrayType as T;
    match kind {
        T::int8_array | T::uint8_array | T::uint8_clamped_array => 1,
        T::int16_array | T::uint16_array => 2,
        T::int32_array | T::uint32_array | T::float32_array => 4,
        _ => 8,
    }
}

// ---------------------------------------------------------------- JS values as the cores see them

/// Nesting accepted when copying a JS value into a [`JsonValue`] (cycles end here too).
const MAX_VALUE_DEPTH: usize = 256;
/// Most values (of any kind, at any depth) one copy holds: bounds what a huge argument costs
/// before the core that reads it can refuse it.
const MAX_VALUE_NODES: usize = 1 << 16;

/// The bounds of one copy into a [`JsonValue`].
struct CopyBudget {
    /// Arrays longer than this are copied as their first `max_items + 1` elements.
    max_items: u32,
    nodes_left: usize,
}

impl CopyBudget {
    fn capped(max_items: usize) -> CopyBudget {
        CopyBudget { max_items: u32::try_from(max_items).unwrap_or(u32::MAX), nodes_left: MAX_VALUE_NODES }
    }

    /// Whether `n` more values fit.
    fn check(&self, n: u32, what: &str) -> Result<()> {
        if n as usize > self.nodes_left {
            return Err(Error::invalid(format!("{what} is too large (more than {MAX_VALUE_NODES} values)")));
        }
        Ok(())
    }

    /// Counts `n` values copied.
    fn take(&mut self, n: u32, what: &str) -> Result<()> {
        self.check(n, what)?;
        self.nodes_left -= n as usize;
        Ok(())
    }
}

impl<'env> Js<'env> {
    /// A copy of a JSON-like JS value: what the cores read configs and profiles from.
    /// `undefined` (as a property value) is kept as [`JsonValue::Undefined`]; a bigint becomes
    /// the number `Number(v)` gives; functions and symbols count as objects.
    /// At most [`MAX_VALUE_NODES`] values are copied (`{what} is too large` beyond).
    pub fn to_value(self, what: &str) -> Result<Option<JsonValue>> {
        self.to_value_at(what, 0, &mut CopyBudget { max_items: u32::MAX, nodes_left: MAX_VALUE_NODES })
    }

    /// [`Js::to_value`] for a parser that refuses, by its length alone, every list longer than
    /// `max_items` (`WaitArgs::parse`, `parse_template_decls`): each array is copied as at most
    /// its first `max_items + 1` elements, which that parser answers as it would the whole.
    pub fn to_value_capped(self, what: &str, max_items: usize) -> Result<Option<JsonValue>> {
        self.to_value_at(what, 0, &mut CopyBudget::capped(max_items))
    }

    /// Copies just the named properties of an object (own or inherited; absent and `undefined`
    /// ones are left out) into a [`JsonValue::Object`]: for request bodies whose parser reads
    /// known fields only, so that other properties (an AbortSignal, say) are never walked.
    /// Lists are cut as [`Js::to_value_capped`] cuts them.
    pub fn pick(self, what: &str, names: &[&str], max_items: usize) -> Result<JsonValue> {
        let mut values = Vec::with_capacity(names.len());
        for name in names {
            values.push(self.get(name)?);
        }
        Js::picked(what, names, &values, max_items)
    }

    /// What [`Js::pick`] makes of an object whose properties `names` hold `values` (`None`
    /// for absent or `undefined`), for a caller that read them in JavaScript.
    pub fn picked(what: &str, names: &[&str], values: &[Option<Js<'env>>], max_items: usize) -> Result<JsonValue> {
        let mut budget = CopyBudget::capped(max_items);
        let mut obj = JsonObject::new();
        for (name, v) in names.iter().zip(values) {
            if let Some(v) = v {
                if let Some(v) = v.to_value_at(what, 1, &mut budget)? {
                    obj.insert((*name).into(), v);
                }
            }
        }
        Ok(JsonValue::Object(obj))
    }

    fn to_value_at(self, what: &str, depth: usize, budget: &mut CopyBudget) -> Result<Option<JsonValue>> {
        if depth > MAX_VALUE_DEPTH {
            return Err(Error::invalid(format!("{what} is nested too deeply (or cyclic)")));
        }
        budget.take(1, what)?;
        if self.raw.is_null() {
            return Ok(None);
        }
        Ok(Some(match self.type_of() {
            sys::ValueType::napi_undefined if depth == 0 => return Ok(None),
            sys::ValueType::napi_undefined => JsonValue::Undefined,
            sys::ValueType::napi_null => JsonValue::Null,
            sys::ValueType::napi_boolean => JsonValue::Bool(self.boolean(what)?),
            sys::ValueType::napi_number => JsonValue::Number(self.number(what)?),
            sys::ValueType::napi_string => JsonValue::String(self.js_string(what)?),
            sys::ValueType::napi_bigint => {
                JsonValue::Number(self.coerce_to_string(what)?.parse::<f64>().unwrap_or(0.0))
            }
            sys::ValueType::napi_object if self.is_array() => {
                let n = self.array_len(what)?.min(budget.max_items.saturating_add(1));
                // Refused before any element is read when the elements alone would not fit.
                budget.check(n, what)?;
                let mut items = Vec::with_capacity(n as usize);
                for i in 0..n {
                    items.push(self.element(i)?.to_value_at(what, depth + 1, budget)?.unwrap_or(JsonValue::Undefined));
                }
                JsonValue::Array(items)
            }
            sys::ValueType::napi_object => {
                let mut obj = JsonObject::new();
                let keys = self.own_key_array()?;
                let n = keys.array_len(what)?;
                budget.check(n, what)?;
                for i in 0..n {
                    let key = keys.element(i)?;
                    let name = key.js_string(what)?;
                    if let Some(v) = self.get_by_key(&key)?.to_value_at(what, depth + 1, budget)? {
                        obj.insert(name, v);
                    }
                }
                JsonValue::Object(obj)
            }
            _ => JsonValue::Object(JsonObject::new()),
        }))
    }
}

// ---------------------------------------------------------------- building values

/// Builders for result values (JS thread, inside a call or a drain of the completion port).
pub struct Out<'env> {
    pub env: &'env Env,
}

impl<'env> Out<'env> {
    pub fn new(env: &'env Env) -> Self {
        Out { env }
    }

    fn raw(&self) -> sys::napi_env {
        self.env.raw()
    }

    /// A [`Js`] over a value this builder made.
    pub fn js(&self, v: RawValue) -> Js<'env> {
        Js::new(self.env, v)
    }

    pub fn object(&self) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_create_object(self.raw(), &mut v) })?;
        Ok(v)
    }

    pub fn set(&self, obj: RawValue, key: &str, value: RawValue) -> napi::Result<()> {
        let k = self.str(key)?;
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_set_property(self.raw(), obj, k, value) })
    }

    pub fn str(&self, s: &str) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: `s` is live for the call; N-API copies it.
        check_napi(unsafe { sys::napi_create_string_utf8(self.raw(), s.as_ptr().cast(), s.len() as isize, &mut v) })?;
        Ok(v)
    }

    /// A string from bytes that may not be valid UTF-8 (invalid sequences become U+FFFD).
    pub fn str_lossy(&self, s: &[u8]) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: `s` is live for the call; N-API copies it and replaces invalid sequences.
        check_napi(unsafe { sys::napi_create_string_utf8(self.raw(), s.as_ptr().cast(), s.len() as isize, &mut v) })?;
        Ok(v)
    }

    /// A string of Latin-1 bytes (ASCII here).
    pub fn latin1(&self, s: &[u8]) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: `s` is live for the call; N-API copies it.
        check_napi(unsafe { sys::napi_create_string_latin1(self.raw(), s.as_ptr().cast(), s.len() as isize, &mut v) })?;
        Ok(v)
    }

    pub fn num(&self, n: f64) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_create_double(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn u32(&self, n: u32) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_create_uint32(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn i32(&self, n: i32) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_create_int32(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn bigint(&self, n: i64) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_create_bigint_int64(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn bool(&self, b: bool) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_get_boolean(self.raw(), b, &mut v) })?;
        Ok(v)
    }

    pub fn null(&self) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_get_null(self.raw(), &mut v) })?;
        Ok(v)
    }

    pub fn undefined(&self) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_get_undefined(self.raw(), &mut v) })?;
        Ok(v)
    }

    pub fn global(&self) -> napi::Result<RawValue> {
        let mut v = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_get_global(self.raw(), &mut v) })?;
        Ok(v)
    }

    /// A `Buffer` holding a copy of `bytes`.
    pub fn buffer(&self, bytes: &[u8]) -> napi::Result<RawValue> {
        let mut data = ptr::null_mut();
        let mut v = ptr::null_mut();
        // SAFETY: `bytes` is live for the call; N-API copies `bytes.len()` bytes from it.
        check_napi(unsafe {
            sys::napi_create_buffer_copy(self.raw(), bytes.len(), bytes.as_ptr().cast(), &mut data, &mut v)
        })?;
        Ok(v)
    }

    /// An empty array of length `n`, for [`Out::set_element`].
    pub fn array_of_len(&self, n: usize) -> napi::Result<RawValue> {
        let mut arr = ptr::null_mut();
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_create_array_with_length(self.raw(), n, &mut arr) })?;
        Ok(arr)
    }

    pub fn set_element(&self, arr: RawValue, i: u32, item: RawValue) -> napi::Result<()> {
        // SAFETY: see the module doc.
        check_napi(unsafe { sys::napi_set_element(self.raw(), arr, i, item) })
    }

    pub fn array(&self, items: Vec<RawValue>) -> napi::Result<RawValue> {
        let arr = self.array_of_len(items.len())?;
        for (i, item) in items.into_iter().enumerate() {
            self.set_element(arr, i as u32, item)?;
        }
        Ok(arr)
    }

    pub fn opt_str(&self, s: Option<&str>) -> napi::Result<RawValue> {
        match s {
            Some(s) => self.str(s),
            None => self.null(),
        }
    }

    /// A JS string from WTF-8 bytes (lone surrogates restored).
    pub fn js_str(&self, s: &[u8]) -> napi::Result<RawValue> {
        if !has_lone_surrogate(s) {
            if let Ok(text) = std::str::from_utf8(s) {
                return self.str(text);
            }
        }
        let units = JsString::from_wtf8(s.to_vec()).to_utf16();
        let mut v = ptr::null_mut();
        // SAFETY: `units` is live for the call; N-API copies it.
        check_napi(unsafe { sys::napi_create_string_utf16(self.raw(), units.as_ptr(), units.len() as isize, &mut v) })?;
        Ok(v)
    }

    /// A JS value from a [`JsonValue`] (objects keep their key order).
    pub fn value(&self, v: &JsonValue) -> napi::Result<RawValue> {
        match v {
            JsonValue::Null => self.null(),
            JsonValue::Undefined => self.undefined(),
            JsonValue::Bool(b) => self.bool(*b),
            JsonValue::Number(n) => self.num(*n),
            JsonValue::String(s) => self.js_str(s.as_bytes()),
            JsonValue::Array(items) => {
                let items = items.iter().map(|i| self.value(i)).collect::<napi::Result<Vec<_>>>()?;
                self.array(items)
            }
            JsonValue::Object(o) => {
                let obj = self.object()?;
                for k in o.keys() {
                    if let Some(item) = o.get_bytes(k.as_bytes()) {
                        let key = self.js_str(k.as_bytes())?;
                        let value = self.value(item)?;
                        // SAFETY: see the module doc.
                        check_napi(unsafe { sys::napi_set_property(self.raw(), obj, key, value) })?;
                    }
                }
                Ok(obj)
            }
        }
    }

    /// A typed array of `kind` holding a copy of `bytes` (`len` elements).
    pub fn typed_array(&self, kind: sys::napi_typedarray_type, len: usize, bytes: &[u8]) -> napi::Result<RawValue> {
        debug_assert_eq!(len * element_size(kind), bytes.len());
        let mut data = ptr::null_mut();
        let mut ab = ptr::null_mut();
        // SAFETY: see the module doc; N-API allocates `bytes.len()` bytes and reports where.
        check_napi(unsafe { sys::napi_create_arraybuffer(self.raw(), bytes.len(), &mut data, &mut ab) })?;
        if !bytes.is_empty() {
            // SAFETY: `data` holds `bytes.len()` fresh bytes (above), not overlapping `bytes`,
            // filled before any JavaScript can see the buffer.
            unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), data as *mut u8, bytes.len()) };
        }
        let mut ta = ptr::null_mut();
        // SAFETY: see the module doc; `ab` holds `len` elements of `kind`.
        check_napi(unsafe { sys::napi_create_typedarray(self.raw(), kind, len, ab, 0, &mut ta) })?;
        Ok(ta)
    }

    /// A `Uint8Array` holding a copy of `bytes`.
    pub fn uint8_array(&self, bytes: &[u8]) -> napi::Result<RawValue> {
        self.typed_array(sys::TypedarrayType::uint8_array, bytes.len(), bytes)
    }

    /// A typed array of `kind` over `data` itself: an external ArrayBuffer that frees the
    /// vector when collected, so nothing is copied. Where the runtime refuses external buffers
    /// (and for an empty vector) the elements are copied instead.
    pub fn typed_array_from_vec<T: Copy + Send + 'static>(
        &self,
        kind: sys::napi_typedarray_type,
        data: Vec<T>,
    ) -> napi::Result<RawValue> {
        debug_assert_eq!(element_size(kind), std::mem::size_of::<T>());
        let len = data.len();
        if len == 0 {
            return self.typed_array(kind, 0, &[]);
        }
        let byte_len = std::mem::size_of_val(data.as_slice());
        let data = Box::new(data);
        let ptr = data.as_ptr() as *mut c_void;
        let hint = Box::into_raw(data);
        let mut ab = ptr::null_mut();
        // SAFETY: `ptr` points at the vector's `byte_len` bytes, which stay put (the vector is
        // boxed and never touched again) until the finalizer `drop_boxed_vec::<T>` frees the box
        // `hint`, once, when the buffer is collected. On failure no finalizer runs and the box is
        // taken back below.
        let status = unsafe {
            sys::napi_create_external_arraybuffer(
                self.raw(),
                ptr,
                byte_len,
                Some(drop_boxed_vec::<T>),
                hint as *mut c_void,
                &mut ab,
            )
        };
        if check(status).is_err() {
            // Not taken (external buffers refused): the box is still ours; copy instead.
            // SAFETY: `hint` came from `Box::into_raw` above and was not handed over.
            let data = unsafe { Box::from_raw(hint) };
            // SAFETY: the vector's elements as bytes (`byte_len` of them), read while it lives.
            let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, byte_len) };
            return self.typed_array(kind, len, bytes);
        }
        let mut ta = ptr::null_mut();
        // SAFETY: see the module doc; `ab` holds `len` elements of `kind`.
        check_napi(unsafe { sys::napi_create_typedarray(self.raw(), kind, len, ab, 0, &mut ta) })?;
        Ok(ta)
    }
}

/// The finalizer of [`Out::typed_array_from_vec`]'s buffers.
///
/// # Safety
/// `hint` must be the `Box<Vec<T>>` handed to `napi_create_external_arraybuffer`; called once.
unsafe extern "C" fn drop_boxed_vec<T>(_env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    // SAFETY: guaranteed by the caller (N-API runs each finalizer once, with its hint).
    drop(unsafe { Box::from_raw(hint as *mut Vec<T>) });
}

/// Wraps a raw value as the `Unknown` a `#[napi]` function returns.
pub fn unknown<'env>(env: &'env Env, v: RawValue) -> Unknown<'env> {
    // SAFETY: `v` is a value of `env`, made during the current call; `Unknown` only carries it
    // back to napi-rs, which returns it to JavaScript.
    unsafe { Unknown::from_raw_unchecked(env.raw(), v) }
}

/// A napi-rs value (an `#[napi(object)]` struct, a `Vec`, …) as a JS value.
pub fn to_js<T: ToNapiValue>(env: &Env, v: T) -> napi::Result<RawValue> {
    // SAFETY: `env` is the environment of the current call on the JS thread.
    unsafe { T::to_napi_value(env.raw(), v) }
}

/// The instance of the `#[napi]` class `T` that `v` is, or `None` for any other value.
pub fn class_instance<'env, T: 'env + napi::bindgen_prelude::MaybeTypeTag>(
    v: Js<'env>,
) -> Option<napi::bindgen_prelude::ClassInstance<'env, T>> {
    use napi::bindgen_prelude::FromNapiValue;
    // SAFETY: `v` is a value of its call's environment; napi-rs checks that it wraps a `T`
    // (by type tag) before reading it, and fails otherwise.
    unsafe { napi::bindgen_prelude::ClassInstance::<'env, T>::from_napi_value(v.env, v.raw) }.ok()
}
