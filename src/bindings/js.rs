//! Reading JavaScript arguments and building JavaScript values, with our own error messages.
//!
//! Arguments arrive as untyped values and are checked here, so that a wrong type becomes an
//! `ERR_INVALID_ARGUMENT` rejection naming the argument instead of a generic napi error thrown
//! synchronously. [`js_error`] is the single place an [`Error`] becomes a JS `Error` with `code`.

use std::ffi::c_void;
use std::ptr;

use napi::{sys, Env};

use crate::error::{Error, Result};

/// A JS value and its environment, valid for the current native call on the JS thread.
#[derive(Clone, Copy)]
pub struct Js {
    pub env: sys::napi_env,
    pub raw: sys::napi_value,
}

fn ok(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::Internal(format!("napi call failed with status {status}")))
    }
}

impl Js {
    pub fn new(env: &Env, raw: sys::napi_value) -> Js {
        Js { env: env.raw(), raw }
    }

    pub fn type_of(&self) -> sys::napi_valuetype {
        let mut t = 0;
        unsafe { sys::napi_typeof(self.env, self.raw, &mut t) };
        t
    }

    /// `undefined` or `null` (or a missing argument).
    pub fn is_nullish(&self) -> bool {
        self.raw.is_null() || matches!(self.type_of(), sys::ValueType::napi_undefined | sys::ValueType::napi_null)
    }

    pub fn string(&self, what: &str) -> Result<String> {
        if self.type_of() != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what} must be a string")));
        }
        let mut len = 0usize;
        ok(unsafe { sys::napi_get_value_string_utf8(self.env, self.raw, ptr::null_mut(), 0, &mut len) })?;
        let mut buf = vec![0u8; len + 1];
        let mut written = 0usize;
        ok(unsafe {
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
        ok(unsafe { sys::napi_get_value_string_utf16(self.env, self.raw, ptr::null_mut(), 0, &mut len) })?;
        let mut buf = vec![0u16; len + 1];
        let mut written = 0usize;
        ok(unsafe { sys::napi_get_value_string_utf16(self.env, self.raw, buf.as_mut_ptr(), len + 1, &mut written) })?;
        buf.truncate(written);
        Ok(buf)
    }

    pub fn number(&self, what: &str) -> Result<f64> {
        if self.type_of() != sys::ValueType::napi_number {
            return Err(Error::invalid(format!("{what} must be a number")));
        }
        let mut v = 0f64;
        ok(unsafe { sys::napi_get_value_double(self.env, self.raw, &mut v) })?;
        Ok(v)
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
        ok(unsafe { sys::napi_get_value_bool(self.env, self.raw, &mut v) })?;
        Ok(v)
    }

    /// A bigint that fits in i64.
    pub fn bigint(&self, what: &str) -> Result<i64> {
        if self.type_of() != sys::ValueType::napi_bigint {
            return Err(Error::invalid(format!("{what} must be a bigint")));
        }
        let mut v = 0i64;
        let mut lossless = false;
        ok(unsafe { sys::napi_get_value_bigint_int64(self.env, self.raw, &mut v, &mut lossless) })?;
        if !lossless {
            return Err(Error::invalid(format!("{what} is out of the 64-bit range")));
        }
        Ok(v)
    }

    pub fn is_object(&self) -> bool {
        self.type_of() == sys::ValueType::napi_object
    }

    pub fn is_array(&self) -> bool {
        let mut v = false;
        unsafe { sys::napi_is_array(self.env, self.raw, &mut v) };
        v
    }

    /// Requires a plain value of type object (arrays and null refused).
    pub fn object(&self, what: &str) -> Result<Js> {
        if !self.is_object() || self.is_array() {
            return Err(Error::invalid(format!("{what} must be an object")));
        }
        Ok(*self)
    }

    /// Property `key`, or `None` when it is absent or `undefined`.
    pub fn get(&self, key: &str) -> Result<Option<Js>> {
        let mut k = ptr::null_mut();
        ok(unsafe { sys::napi_create_string_utf8(self.env, key.as_ptr().cast(), key.len() as isize, &mut k) })?;
        let mut v = ptr::null_mut();
        ok(unsafe { sys::napi_get_property(self.env, self.raw, k, &mut v) })?;
        let js = Js { env: self.env, raw: v };
        Ok(if js.type_of() == sys::ValueType::napi_undefined { None } else { Some(js) })
    }

    /// Property `key` when present and not `null`.
    pub fn opt(&self, key: &str) -> Result<Option<Js>> {
        Ok(self.get(key)?.filter(|v| !v.is_nullish()))
    }

    /// Own enumerable string keys.
    pub fn keys(&self) -> Result<Vec<String>> {
        let mut names = ptr::null_mut();
        ok(unsafe { sys::napi_get_property_names(self.env, self.raw, &mut names) })?;
        let names = Js { env: self.env, raw: names };
        names.elements("keys")?.iter().map(|k| k.string("key")).collect()
    }

    pub fn array_len(&self, what: &str) -> Result<u32> {
        if !self.is_array() {
            return Err(Error::invalid(format!("{what} must be an array")));
        }
        let mut n = 0u32;
        ok(unsafe { sys::napi_get_array_length(self.env, self.raw, &mut n) })?;
        Ok(n)
    }

    pub fn element(&self, i: u32) -> Result<Js> {
        let mut v = ptr::null_mut();
        ok(unsafe { sys::napi_get_element(self.env, self.raw, i, &mut v) })?;
        Ok(Js { env: self.env, raw: v })
    }

    pub fn elements(&self, what: &str) -> Result<Vec<Js>> {
        let n = self.array_len(what)?;
        (0..n).map(|i| self.element(i)).collect()
    }

    /// The bytes of a `Buffer`/`Uint8Array`, without copying. Valid during the current call.
    pub fn byte_slice(&self) -> Option<&[u8]> {
        let mut is_ta = false;
        unsafe { sys::napi_is_typedarray(self.env, self.raw, &mut is_ta) };
        if !is_ta {
            return None;
        }
        let mut kind = 0;
        let mut len = 0usize;
        let mut data = ptr::null_mut();
        let mut ab = ptr::null_mut();
        let mut offset = 0usize;
        let st = unsafe {
            sys::napi_get_typedarray_info(self.env, self.raw, &mut kind, &mut len, &mut data, &mut ab, &mut offset)
        };
        if st != sys::Status::napi_ok || kind != sys::TypedarrayType::uint8_array {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        Some(unsafe { std::slice::from_raw_parts(data as *const u8, len) })
    }

    /// The data of a typed array of element kind `kind` (`sys::TypedarrayType::*`).
    fn typed_raw(&self, kind: sys::napi_typedarray_type) -> Option<(*const std::ffi::c_void, usize)> {
        let mut is_ta = false;
        unsafe { sys::napi_is_typedarray(self.env, self.raw, &mut is_ta) };
        if !is_ta {
            return None;
        }
        let (mut k, mut len, mut data, mut ab, mut offset) = (0, 0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
        let st = unsafe {
            sys::napi_get_typedarray_info(self.env, self.raw, &mut k, &mut len, &mut data, &mut ab, &mut offset)
        };
        if st != sys::Status::napi_ok || k != kind {
            return None;
        }
        Some((data as *const std::ffi::c_void, len))
    }

    /// The elements of a `Uint32Array`, without copying. Valid during the current call.
    pub fn u32_slice(&self) -> Option<&[u32]> {
        let (data, len) = self.typed_raw(sys::TypedarrayType::uint32_array)?;
        // Typed array data is aligned to its element size.
        Some(if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data as *const u32, len) } })
    }

    /// The elements of a `BigInt64Array`, without copying. Valid during the current call.
    pub fn i64_slice(&self) -> Option<&[i64]> {
        let (data, len) = self.typed_raw(sys::TypedarrayType::bigint64_array)?;
        Some(if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data as *const i64, len) } })
    }

    /// The elements of a `BigUint64Array`, without copying. Valid during the current call.
    pub fn u64_slice(&self) -> Option<&[u64]> {
        let (data, len) = self.typed_raw(sys::TypedarrayType::biguint64_array)?;
        Some(if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data as *const u64, len) } })
    }

    /// Calls `f` with the string's UTF-8 text, read into a stack buffer when short (hot paths).
    pub fn with_str<R>(&self, what: &str, f: impl FnOnce(&str) -> R) -> Result<R> {
        if self.type_of() != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what} must be a string")));
        }
        let mut buf = [0u8; 64];
        let mut written = 0usize;
        ok(unsafe {
            sys::napi_get_value_string_utf8(self.env, self.raw, buf.as_mut_ptr().cast(), buf.len(), &mut written)
        })?;
        if written + 1 < buf.len() {
            // napi writes whole characters only, so the prefix is valid UTF-8.
            let s = std::str::from_utf8(&buf[..written])
                .map_err(|_| Error::invalid(format!("{what} is not valid text")))?;
            return Ok(f(s));
        }
        Ok(f(&self.string(what)?))
    }

    /// A `Buffer`/`Uint8Array` (copied) or a string (as UTF-8).
    pub fn bytes(&self, what: &str) -> Result<Vec<u8>> {
        if let Some(b) = self.byte_slice() {
            return Ok(b.to_vec());
        }
        if self.type_of() == sys::ValueType::napi_string {
            return Ok(self.string(what)?.into_bytes());
        }
        Err(Error::invalid(format!("{what} must be a Buffer, a Uint8Array or a string")))
    }
}

/// Builders for result values.
pub struct Out<'a> {
    pub env: &'a Env,
}

impl<'a> Out<'a> {
    pub fn new(env: &'a Env) -> Self {
        Out { env }
    }

    fn raw(&self) -> sys::napi_env {
        self.env.raw()
    }

    pub fn object(&self) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_object(self.raw(), &mut v) })?;
        Ok(v)
    }

    pub fn set(&self, obj: sys::napi_value, key: &str, value: sys::napi_value) -> napi::Result<()> {
        let mut k = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_string_utf8(self.raw(), key.as_ptr().cast(), key.len() as isize, &mut k) })?;
        napi_ok(unsafe { sys::napi_set_property(self.raw(), obj, k, value) })
    }

    pub fn str(&self, s: &str) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_string_utf8(self.raw(), s.as_ptr().cast(), s.len() as isize, &mut v) })?;
        Ok(v)
    }

    pub fn num(&self, n: f64) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_double(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn u32(&self, n: u32) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_uint32(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn bigint(&self, n: i64) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_bigint_int64(self.raw(), n, &mut v) })?;
        Ok(v)
    }

    pub fn bool(&self, b: bool) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_get_boolean(self.raw(), b, &mut v) })?;
        Ok(v)
    }

    pub fn null(&self) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_get_null(self.raw(), &mut v) })?;
        Ok(v)
    }

    pub fn undefined(&self) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_get_undefined(self.raw(), &mut v) })?;
        Ok(v)
    }

    /// A `Buffer` holding a copy of `bytes`.
    pub fn buffer(&self, bytes: &[u8]) -> napi::Result<sys::napi_value> {
        let mut data = ptr::null_mut();
        let mut v = ptr::null_mut();
        napi_ok(unsafe {
            sys::napi_create_buffer_copy(self.raw(), bytes.len(), bytes.as_ptr().cast(), &mut data, &mut v)
        })?;
        Ok(v)
    }

    pub fn array(&self, items: Vec<sys::napi_value>) -> napi::Result<sys::napi_value> {
        let mut arr = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_array_with_length(self.raw(), items.len(), &mut arr) })?;
        for (i, item) in items.into_iter().enumerate() {
            napi_ok(unsafe { sys::napi_set_element(self.raw(), arr, i as u32, item) })?;
        }
        Ok(arr)
    }

    pub fn opt_str(&self, s: Option<&str>) -> napi::Result<sys::napi_value> {
        match s {
            Some(s) => self.str(s),
            None => self.null(),
        }
    }
}

pub fn napi_ok(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::from_reason(format!("napi call failed with status {status}")))
    }
}

/// Builds the JS `Error` for `err`: message, `code`, and the structured details.
pub fn js_error(env: sys::napi_env, err: &Error) -> sys::napi_value {
    js_error_with_message(env, err, &err.to_string())
}

/// [`js_error`] with another message (the host SQL binding passes SQLite's own message).
pub fn js_error_with_message(env: sys::napi_env, err: &Error, message: &str) -> sys::napi_value {
    let mk_str = |s: &str| {
        let mut v = ptr::null_mut();
        unsafe { sys::napi_create_string_utf8(env, s.as_ptr().cast(), s.len() as isize, &mut v) };
        v
    };
    let set = |obj: sys::napi_value, key: &str, value: sys::napi_value| {
        let k = mk_str(key);
        unsafe { sys::napi_set_property(env, obj, k, value) };
    };
    let mut e = ptr::null_mut();
    unsafe { sys::napi_create_error(env, mk_str(err.code()), mk_str(message), &mut e) };
    match err {
        Error::SeqMismatch { expected_next, stream, .. } => {
            let mut v = ptr::null_mut();
            unsafe { sys::napi_create_bigint_int64(env, *expected_next, &mut v) };
            set(e, "expectedNext", v);
            set(e, "stream", mk_str(stream));
        }
        Error::StreamNotFound { stream } | Error::StreamExists { stream, .. } | Error::StreamExpired { stream } => {
            set(e, "stream", mk_str(stream));
        }
        Error::Storage { code, extended_code, .. } => {
            set(e, "sqliteCode", mk_str(code));
            let mut v = ptr::null_mut();
            unsafe { sys::napi_create_int32(env, *extended_code, &mut v) };
            set(e, "sqliteExtendedCode", v);
        }
        _ => {}
    }
    e
}

/// A `napi::Error` that throws the JS error built by [`js_error`] (for synchronous calls).
pub fn throw(env: &Env, err: Error) -> napi::Error {
    let value = js_error(env.raw(), &err);
    napi::Error::from(unsafe { napi::bindgen_prelude::Unknown::from_raw_unchecked(env.raw(), value) })
}

// ---------------------------------------------------------------- JS values as the cores see them

use crate::jscompat::json::{Object as JsonObject, Value as JsonValue};
use crate::jscompat::string::{has_lone_surrogate, wtf8_from_utf16, JsString};

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

impl Js {
    /// The string as WTF-8 bytes: exact, lone surrogates included.
    pub fn js_string(&self, what: &str) -> Result<JsString> {
        Ok(JsString::from_wtf8(wtf8_from_utf16(&self.string_utf16(what)?)))
    }

    /// Own enumerable string keys, in JS order (`Object.keys`), as a JS array.
    fn own_key_array(&self) -> Result<Js> {
        let mut names = ptr::null_mut();
        ok(unsafe {
            sys::napi_get_all_property_names(
                self.env,
                self.raw,
                sys::KeyCollectionMode::own_only,
                sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
                sys::KeyConversion::numbers_to_strings,
                &mut names,
            )
        })?;
        Ok(Js { env: self.env, raw: names })
    }

    pub fn get_by_key(&self, key: &Js) -> Result<Js> {
        let mut v = ptr::null_mut();
        ok(unsafe { sys::napi_get_property(self.env, self.raw, key.raw, &mut v) })?;
        Ok(Js { env: self.env, raw: v })
    }

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
        let mut budget = CopyBudget::capped(max_items);
        let mut obj = JsonObject::new();
        for name in names {
            if let Some(v) = self.get(name)? {
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
                let mut v = 0f64;
                let mut coerced = ptr::null_mut();
                ok(unsafe { sys::napi_coerce_to_string(self.env, self.raw, &mut coerced) })?;
                let s = Js { env: self.env, raw: coerced }.string(what)?;
                if let Ok(n) = s.parse::<f64>() {
                    v = n;
                }
                JsonValue::Number(v)
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

impl<'a> Out<'a> {
    /// A JS string from WTF-8 bytes (lone surrogates restored).
    pub fn js_str(&self, s: &[u8]) -> napi::Result<sys::napi_value> {
        if !has_lone_surrogate(s) {
            if let Ok(text) = std::str::from_utf8(s) {
                return self.str(text);
            }
        }
        let units = JsString::from_wtf8(s.to_vec()).to_utf16();
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_string_utf16(self.raw(), units.as_ptr(), units.len() as isize, &mut v) })?;
        Ok(v)
    }

    /// A JS value from a [`JsonValue`] (objects keep their key order).
    pub fn value(&self, v: &JsonValue) -> napi::Result<sys::napi_value> {
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
                        napi_ok(unsafe { sys::napi_set_property(self.raw(), obj, key, self.value(item)?) })?;
                    }
                }
                Ok(obj)
            }
        }
    }
}

/// Wraps a raw value as the `Unknown` a `#[napi]` function returns.
pub fn unknown<'env>(env: &'env Env, v: sys::napi_value) -> napi::bindgen_prelude::Unknown<'env> {
    unsafe { napi::bindgen_prelude::Unknown::from_raw_unchecked(env.raw(), v) }
}

// ---------------------------------------------------------------- small JS helpers

thread_local! {
    /// Functions compiled with `napi_run_script`, per JS thread (one environment each).
    static SCRIPTS: std::cell::RefCell<Vec<(&'static str, sys::napi_ref)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A JS function compiled once per thread from `source` (an expression evaluating to a
/// function). Used where building or reading many JS objects is far cheaper in JIT-compiled
/// JS than through one N-API call per property.
pub fn script_fn(env: &Env, source: &'static str) -> napi::Result<sys::napi_value> {
    let raw = env.raw();
    let cached = SCRIPTS.with(|s| s.borrow().iter().find(|(src, _)| std::ptr::eq(*src, source)).map(|(_, r)| *r));
    if let Some(r) = cached {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_get_reference_value(raw, r, &mut v) })?;
        if !v.is_null() {
            return Ok(v);
        }
    }
    let out = Out::new(env);
    let code = out.str(source)?;
    let mut f = ptr::null_mut();
    napi_ok(unsafe { sys::napi_run_script(raw, code, &mut f) })?;
    let mut r = ptr::null_mut();
    napi_ok(unsafe { sys::napi_create_reference(raw, f, 1, &mut r) })?;
    SCRIPTS.with(|s| s.borrow_mut().push((source, r)));
    Ok(f)
}

/// Calls `f(args…)`; a JS exception becomes `Err(message)` (and is cleared).
pub fn call(env: &Env, f: sys::napi_value, args: &[sys::napi_value]) -> std::result::Result<sys::napi_value, String> {
    let raw = env.raw();
    let mut global = ptr::null_mut();
    unsafe { sys::napi_get_global(raw, &mut global) };
    let mut result = ptr::null_mut();
    let status = unsafe { sys::napi_call_function(raw, global, f, args.len(), args.as_ptr(), &mut result) };
    if status == sys::Status::napi_ok {
        return Ok(result);
    }
    let mut pending = false;
    unsafe { sys::napi_is_exception_pending(raw, &mut pending) };
    if !pending {
        return Err(format!("napi call failed with status {status}"));
    }
    let mut exc = ptr::null_mut();
    unsafe { sys::napi_get_and_clear_last_exception(raw, &mut exc) };
    let js = Js { env: raw, raw: exc };
    let message = js.get("message").ok().flatten().and_then(|m| m.string("message").ok());
    Err(message.unwrap_or_else(|| "JavaScript exception".into()))
}

impl<'a> Out<'a> {
    /// A typed array of `kind` holding a copy of `bytes` (`len` elements).
    pub fn typed_array(
        &self,
        kind: sys::napi_typedarray_type,
        len: usize,
        bytes: &[u8],
    ) -> napi::Result<sys::napi_value> {
        let mut data = ptr::null_mut();
        let mut ab = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_arraybuffer(self.raw(), bytes.len(), &mut data, &mut ab) })?;
        if !bytes.is_empty() {
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data as *mut u8, bytes.len()) };
        }
        let mut ta = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_typedarray(self.raw(), kind, len, ab, 0, &mut ta) })?;
        Ok(ta)
    }

    /// A typed array of `kind` over `data` itself: an external ArrayBuffer that frees the
    /// vector when collected, so nothing is copied. Where the runtime refuses external buffers
    /// (and for an empty vector) the elements are copied instead.
    pub fn typed_array_from_vec<T: Copy + Send + 'static>(
        &self,
        kind: sys::napi_typedarray_type,
        data: Vec<T>,
    ) -> napi::Result<sys::napi_value> {
        let len = data.len();
        let byte_len = std::mem::size_of_val(data.as_slice());
        if len > 0 {
            let data = Box::new(data);
            let ptr = data.as_ptr() as *mut c_void;
            let hint = Box::into_raw(data);
            let mut ab = ptr::null_mut();
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
            if status == sys::Status::napi_ok {
                let mut ta = ptr::null_mut();
                napi_ok(unsafe { sys::napi_create_typedarray(self.raw(), kind, len, ab, 0, &mut ta) })?;
                return Ok(ta);
            }
            // Not taken (no finalizer will run): copy it.
            let data = unsafe { Box::from_raw(hint) };
            let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, byte_len) };
            return self.typed_array(kind, len, bytes);
        }
        self.typed_array(kind, 0, &[])
    }

    /// A string of Latin-1 bytes (ASCII here).
    pub fn latin1(&self, s: &[u8]) -> napi::Result<sys::napi_value> {
        let mut v = ptr::null_mut();
        napi_ok(unsafe { sys::napi_create_string_latin1(self.raw(), s.as_ptr().cast(), s.len() as isize, &mut v) })?;
        Ok(v)
    }
}

impl Js {
    /// The bytes behind any typed array (its element bytes), without copying.
    pub fn typed_bytes(&self) -> Option<(sys::napi_typedarray_type, &[u8])> {
        let mut is_ta = false;
        unsafe { sys::napi_is_typedarray(self.env, self.raw, &mut is_ta) };
        if !is_ta {
            return None;
        }
        let (mut kind, mut len, mut data, mut ab, mut offset) = (0, 0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
        let st = unsafe {
            sys::napi_get_typedarray_info(self.env, self.raw, &mut kind, &mut len, &mut data, &mut ab, &mut offset)
        };
        if st != sys::Status::napi_ok {
            return None;
        }
        let width = match kind {
            sys::TypedarrayType::int8_array
            | sys::TypedarrayType::uint8_array
            | sys::TypedarrayType::uint8_clamped_array => 1,
            sys::TypedarrayType::int16_array | sys::TypedarrayType::uint16_array => 2,
            sys::TypedarrayType::int32_array
            | sys::TypedarrayType::uint32_array
            | sys::TypedarrayType::float32_array => 4,
            _ => 8,
        };
        if len == 0 {
            return Some((kind, &[]));
        }
        Some((kind, unsafe { std::slice::from_raw_parts(data as *const u8, len * width) }))
    }
}

/// The finalizer of [`Out::typed_array_from_vec`]'s buffers.
unsafe extern "C" fn drop_boxed_vec<T>(_env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    drop(unsafe { Box::from_raw(hint as *mut Vec<T>) });
}
