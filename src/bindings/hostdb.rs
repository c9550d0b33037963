//! The host SQL functions: the native half of `compat/sqlite-adapter.mjs` (a `SqliteDatabase`
//! for the Prisma Streams server on our SQLite library, see [`crate::hostdb`]). Conversion only.
//!
//! The functions are plain `_sql*` functions taking tagged external handles, raw N-API callbacks
//! (handed out by `_sqlFunctions()`): the host runs every INSERT of its ingest
//! through `run`, and napi-rs's wrappers (receiver checks, a borrow scope per call) would cost
//! about as much as SQLite's own work for a small insert.
//!
//! Rows do not come back as JS objects built here (an N-API call per property, plus interning
//! each name). Each call writes the rows' cells into the thread's [`Slots`], an ArrayBuffer the
//! JavaScript side reads through typed arrays: numbers as f64 with kind 0, NULL as kind 1, and
//! anything else (text, blob, an integer beyond 2^53) as kind 2 with its JS value at the same
//! cell index in an array the call returns. The JavaScript side builds each row with a function
//! made once per statement from its column names, so a row of integers costs no N-API call at
//! all. `run` writes `changes` and `lastInsertRowid` there too.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::ptr;

use napi::bindgen_prelude::{JsValue, Object};
use napi::{sys, Env};
use napi_derive::napi;

use super::js::{js_error, js_error_with_message};
use crate::error::Error;
use crate::hostdb::{Connection, Cursor, Statement, ValueRef};

/// Cells (row values) one call can hand back: a call returns at most this many values.
const CELLS: usize = 4096;
/// Header slots (f64) before the cells.
const HEAD: usize = 8;
/// Header slot: rows written by the call.
const H_ROWS: usize = 0;
/// Header slot: 1 when the statement is done (and was reset), 0 when more rows may follow.
const H_DONE: usize = 1;
/// Header slot: columns per row.
const H_COLUMNS: usize = 2;
/// Header slot: how often SQLite re-prepared the statement (a change means: re-read the names).
const H_REPREPARED: usize = 3;
/// Header slot: rows `run` changed.
const H_CHANGES: usize = 4;
/// Header slot: the connection's last insert rowid after `run`, when a safe integer.
const H_ROWID: usize = 5;

const KIND_NUMBER: u8 = 0;
const KIND_NULL: u8 = 1;
const KIND_VALUE: u8 = 2;

/// The thread's result slots, shared with JavaScript as one ArrayBuffer (`_sqlSlots()`):
/// `Float64Array(buf, 0, 8)` head, `Float64Array(buf, 64, CELLS)` numbers,
/// `Uint8Array(buf, 64 + 8 * CELLS, CELLS)` kinds.
#[repr(C)]
struct Slots {
    head: [f64; HEAD],
    nums: [f64; CELLS],
    kinds: [u8; CELLS],
}

const _: () = assert!(std::mem::offset_of!(Slots, nums) == 8 * HEAD);
const _: () = assert!(std::mem::offset_of!(Slots, kinds) == 8 * HEAD + 8 * CELLS);

thread_local! {
    /// This thread's [`Slots`], inside the ArrayBuffer `_sqlSlots()` made (kept alive by a
    /// reference never released, so for as long as the thread's JS environment).
    static SLOTS: Cell<*mut Slots> = const { Cell::new(ptr::null_mut()) };
    /// The environment and the reference of that ArrayBuffer, so that a second copy of the JS
    /// module in the same environment gets the same buffer (with a buffer of its own, the first
    /// copy's typed arrays would read cells the native side no longer writes).
    static SLOTS_REF: Cell<(sys::napi_env, sys::napi_ref)> = const { Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
const MAX_SAFE_I64: i64 = 9_007_199_254_740_991;

const DB_TAG: sys::napi_type_tag = sys::napi_type_tag { lower: 0x6474_686f_7374_6462, upper: 0x636f_6e6e_6563_7431 };
const STMT_TAG: sys::napi_type_tag = sys::napi_type_tag { lower: 0x6474_686f_7374_6462, upper: 0x7374_6174_656d_6e74 };

struct DbHandle {
    conn: Connection,
}

struct StmtHandle {
    stmt: RefCell<Statement>,
}

type Raw = sys::napi_value;
type JsResult<T> = std::result::Result<T, Error>;

/// The connection of a database handle made by `_sqlOpen` (what the adapter's
/// `SqliteDatabase` holds), for a [`crate::store::Store`] that commits on it.
pub(crate) fn connection_of(env: sys::napi_env, value: Raw) -> JsResult<Connection> {
    let call = Call { env, argv: smallvec::smallvec![value] };
    Ok(call.db()?.conn.clone())
}

/// One call's environment and arguments.
struct Call {
    env: sys::napi_env,
    argv: smallvec::SmallVec<[Raw; 16]>,
}

fn napi(status: sys::napi_status) -> JsResult<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::Internal(format!("napi call failed with status {status}")))
    }
}

impl Call {
    fn arg(&self, i: usize) -> Raw {
        self.argv.get(i).copied().unwrap_or(ptr::null_mut())
    }

    fn type_of(&self, v: Raw) -> sys::napi_valuetype {
        if v.is_null() {
            return sys::ValueType::napi_undefined;
        }
        let mut t = 0;
        // SAFETY: `v` is a value of this call's environment.
        unsafe { sys::napi_typeof(self.env, v, &mut t) };
        t
    }

    fn undefined(&self) -> JsResult<Raw> {
        let mut v = ptr::null_mut();
        // SAFETY: plain N-API call on this call's environment.
        napi(unsafe { sys::napi_get_undefined(self.env, &mut v) })?;
        Ok(v)
    }

    fn string(&self, v: Raw, what: &str) -> JsResult<String> {
        let mut out = String::new();
        self.with_utf8(v, what, |b| out = String::from_utf8_lossy(b).into_owned())?;
        Ok(out)
    }

    /// Calls `f` with the UTF-8 bytes of the string `v` (short strings through a stack buffer).
    fn with_utf8<R>(&self, v: Raw, what: &str, f: impl FnOnce(&[u8]) -> R) -> JsResult<R> {
        if self.type_of(v) != sys::ValueType::napi_string {
            return Err(Error::invalid(format!("{what} must be a string")));
        }
        let mut stack = [0u8; 512];
        let mut written = 0usize;
        // SAFETY: `v` is a string of this environment; N-API writes at most `stack.len()` bytes
        // (the last a NUL) into `stack` and the count, without it, into `written`.
        napi(unsafe {
            sys::napi_get_value_string_utf8(self.env, v, stack.as_mut_ptr().cast(), stack.len(), &mut written)
        })?;
        if written + 1 < stack.len() {
            return Ok(f(&stack[..written]));
        }
        let mut len = 0usize;
        // SAFETY: as above; with no buffer N-API only reports the length in bytes.
        napi(unsafe { sys::napi_get_value_string_utf8(self.env, v, ptr::null_mut(), 0, &mut len) })?;
        let mut heap = vec![0u8; len + 1];
        // SAFETY: as above, into a buffer one byte longer than the text.
        napi(unsafe { sys::napi_get_value_string_utf8(self.env, v, heap.as_mut_ptr().cast(), len + 1, &mut written) })?;
        Ok(f(&heap[..written]))
    }

    /// The handle of type `T` (marked with `tag`) in argument `i`.
    fn handle<T>(&self, i: usize, tag: &sys::napi_type_tag, what: &str) -> JsResult<&T> {
        let v = self.arg(i);
        let bad = || Error::invalid(format!("not a {what} handle"));
        if self.type_of(v) != sys::ValueType::napi_external {
            return Err(bad());
        }
        let mut ours = false;
        // SAFETY: `v` is an external of this environment.
        napi(unsafe { sys::napi_check_object_type_tag(self.env, v, tag, &mut ours) })?;
        if !ours {
            return Err(bad());
        }
        let mut data = ptr::null_mut();
        // SAFETY: as above.
        napi(unsafe { sys::napi_get_value_external(self.env, v, &mut data) })?;
        if data.is_null() {
            return Err(bad());
        }
        // SAFETY: externals tagged `tag` are made by `new_handle::<T>` only and hold a live `T`
        // until their finalizer runs, which cannot happen while the value is an argument of the
        // current call.
        Ok(unsafe { &*data.cast::<T>() })
    }

    fn db(&self) -> JsResult<&DbHandle> {
        self.handle(0, &DB_TAG, "database")
    }

    fn stmt(&self) -> JsResult<&StmtHandle> {
        self.handle(0, &STMT_TAG, "statement")
    }

    /// A tagged external owning `value`.
    fn new_handle<T>(&self, value: T, tag: &sys::napi_type_tag) -> JsResult<Raw> {
        let data = Box::into_raw(Box::new(value));
        let mut v = ptr::null_mut();
        // SAFETY: `data` is a fresh heap pointer; on success its finalizer (`drop_boxed::<T>`)
        // owns it, on failure it is freed here.
        let st =
            unsafe { sys::napi_create_external(self.env, data.cast(), Some(drop_boxed::<T>), ptr::null_mut(), &mut v) };
        if st != sys::Status::napi_ok {
            // SAFETY: not taken by an external, so still ours.
            drop(unsafe { Box::from_raw(data) });
            return Err(Error::Internal("cannot create a handle".into()));
        }
        // SAFETY: `v` is the external just made.
        napi(unsafe { sys::napi_type_tag_object(self.env, v, tag) })?;
        Ok(v)
    }

    /// Binds arguments `from..` to the statement's parameters, as bun:sqlite does: none keeps
    /// the previous bindings, otherwise their number must be the statement's parameter count.
    fn bind_args(&self, cur: &mut Cursor<'_>, from: usize) -> JsResult<()> {
        cur.reset();
        let given = self.argv.len().saturating_sub(from);
        if given == 0 {
            return Ok(());
        }
        let expected = cur.parameter_count();
        if given != expected {
            return Err(Error::invalid(format!("SQLite query expected {expected} values, received {given}")));
        }
        for i in 0..given {
            self.bind_one(cur, i + 1, self.argv[from + i])?;
        }
        Ok(())
    }

    /// Binds one JS value (read and bound at once: SQLite copies text and blobs before any
    /// other JS value is touched, so borrowed typed-array memory cannot move in between).
    fn bind_one(&self, cur: &mut Cursor<'_>, index: usize, v: Raw) -> JsResult<()> {
        let env = self.env;
        match self.type_of(v) {
            sys::ValueType::napi_number => {
                let mut n = 0f64;
                // SAFETY: `v` is a number of this environment.
                napi(unsafe { sys::napi_get_value_double(env, v, &mut n) })?;
                cur.bind(index, number_value(n))
            }
            sys::ValueType::napi_string => self.with_utf8(v, "parameter", |b| cur.bind(index, ValueRef::Text(b)))?,
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => cur.bind(index, ValueRef::Null),
            sys::ValueType::napi_boolean => {
                let mut b = false;
                // SAFETY: `v` is a boolean of this environment.
                napi(unsafe { sys::napi_get_value_bool(env, v, &mut b) })?;
                cur.bind(index, ValueRef::Integer(b as i64))
            }
            sys::ValueType::napi_bigint => {
                let (mut n, mut lossless) = (0i64, false);
                // SAFETY: `v` is a bigint of this environment.
                napi(unsafe { sys::napi_get_value_bigint_int64(env, v, &mut n, &mut lossless) })?;
                if !lossless {
                    return Err(Error::invalid(format!(
                        "parameter {index}: BigInt value is out of the 64-bit integer range"
                    )));
                }
                cur.bind(index, ValueRef::Integer(n))
            }
            sys::ValueType::napi_object => match self.bytes_of(v)? {
                // SAFETY: the bytes belong to the JS object `v`, alive for this call; no JS runs
                // and nothing is allocated between reading them and SQLite copying them.
                Some((p, n)) => cur.bind(index, ValueRef::Blob(unsafe { bytes(p, n) })),
                None => Err(Error::invalid(format!(
                    "Binding expected string, TypedArray, boolean, number, bigint or null (parameter {index} is an \
                     object; named parameters are not supported)"
                ))),
            },
            _ => Err(Error::invalid(format!(
                "Binding expected string, TypedArray, boolean, number, bigint or null (parameter {index})"
            ))),
        }
    }

    /// The bytes of a typed array, DataView or ArrayBuffer, or `None` for another object.
    fn bytes_of(&self, v: Raw) -> JsResult<Option<(*const u8, usize)>> {
        let env = self.env;
        let mut is = false;
        // SAFETY: N-API queries on an object of this environment (here and below); the pointers
        // they report stay valid while the object is alive and no JS runs.
        napi(unsafe { sys::napi_is_typedarray(env, v, &mut is) })?;
        if is {
            let (mut kind, mut len, mut data, mut ab, mut off) = (0, 0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
            // SAFETY: see above.
            napi(unsafe { sys::napi_get_typedarray_info(env, v, &mut kind, &mut len, &mut data, &mut ab, &mut off) })?;
            return Ok(Some((data as *const u8, len * element_size(kind))));
        }
        // SAFETY: see above.
        napi(unsafe { sys::napi_is_dataview(env, v, &mut is) })?;
        if is {
            let (mut len, mut data, mut ab, mut off) = (0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
            // SAFETY: see above.
            napi(unsafe { sys::napi_get_dataview_info(env, v, &mut len, &mut data, &mut ab, &mut off) })?;
            return Ok(Some((data as *const u8, len)));
        }
        // SAFETY: see above.
        napi(unsafe { sys::napi_is_arraybuffer(env, v, &mut is) })?;
        if is {
            let (mut data, mut len) = (ptr::null_mut(), 0usize);
            // SAFETY: see above.
            napi(unsafe { sys::napi_get_arraybuffer_info(env, v, &mut data, &mut len) })?;
            return Ok(Some((data as *const u8, len)));
        }
        Ok(None)
    }

    /// The JS value of one SQLite value of kind [`KIND_VALUE`].
    fn js_value(&self, v: ValueRef<'_>) -> JsResult<Raw> {
        let env = self.env;
        let mut out = ptr::null_mut();
        match v {
            ValueRef::Text(t) => {
                // SAFETY: `t` is live for the call; N-API copies it (invalid UTF-8 becomes U+FFFD).
                napi(unsafe { sys::napi_create_string_utf8(env, t.as_ptr().cast(), t.len() as isize, &mut out) })?
            }
            ValueRef::Blob(b) => {
                let (mut data, mut ab) = (ptr::null_mut::<c_void>(), ptr::null_mut());
                // SAFETY: N-API allocates `b.len()` bytes and reports where; they are filled
                // before any JS can see the buffer.
                napi(unsafe { sys::napi_create_arraybuffer(env, b.len(), &mut data, &mut ab) })?;
                if !b.is_empty() {
                    // SAFETY: `data` holds `b.len()` bytes (above) and does not overlap `b`.
                    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), data.cast::<u8>(), b.len()) };
                }
                // SAFETY: a Uint8Array over the whole new buffer.
                napi(unsafe {
                    sys::napi_create_typedarray(env, sys::TypedarrayType::uint8_array, b.len(), ab, 0, &mut out)
                })?
            }
            // SAFETY: plain N-API value creation.
            ValueRef::Integer(n) => napi(unsafe { sys::napi_create_bigint_int64(env, n, &mut out) })?,
            // SAFETY: plain N-API value creation.
            ValueRef::Real(n) => napi(unsafe { sys::napi_create_double(env, n, &mut out) })?,
            // SAFETY: plain N-API value creation.
            ValueRef::Null => napi(unsafe { sys::napi_get_null(env, &mut out) })?,
        }
        Ok(out)
    }

    /// Steps up to `max_rows` rows (0: as many as the cells hold) into the thread's slots.
    /// Returns the array of kind-2 values (or `undefined` when there is none). With `single`,
    /// the statement is reset after the first row (`get`). When the statement is done, it is
    /// reset, so it holds no read transaction between calls.
    fn fill(&self, cur: &mut Cursor<'_>, max_rows: usize, single: bool) -> JsResult<Raw> {
        let slots = slots()?;
        // The column count is read after a step: the first step of an execution may re-prepare
        // the statement after a schema change, and its columns with it.
        let mut columns = cur.column_count();
        let mut limit = 1;
        let mut values: Raw = ptr::null_mut();
        let mut rows = 0usize;
        let mut done = false;
        while rows < limit {
            if !cur.step()? {
                done = true;
                break;
            }
            if rows == 0 {
                columns = cur.column_count();
                let fit = CELLS.checked_div(columns).unwrap_or(usize::MAX).max(1);
                limit = if single {
                    1
                } else if max_rows == 0 {
                    fit
                } else {
                    max_rows.min(fit)
                };
            }
            let base = rows * columns;
            for c in 0..columns {
                let cell = base + c;
                let (kind, num, other) = match cur.value(c)? {
                    ValueRef::Integer(n) if (-MAX_SAFE_I64..=MAX_SAFE_I64).contains(&n) => {
                        (KIND_NUMBER, n as f64, None)
                    }
                    ValueRef::Real(n) => (KIND_NUMBER, n, None),
                    ValueRef::Null => (KIND_NULL, 0.0, None),
                    other => (KIND_VALUE, 0.0, Some(other)),
                };
                if let Some(v) = other {
                    let js = self.js_value(v)?;
                    if values.is_null() {
                        // SAFETY: plain N-API value creation.
                        napi(unsafe { sys::napi_create_array(self.env, &mut values) })?;
                    }
                    // SAFETY: `values` is the array just made; `cell` < CELLS fits a u32.
                    napi(unsafe { sys::napi_set_element(self.env, values, cell as u32, js) })?;
                }
                // SAFETY: `slots` points at this thread's live `Slots` (see `slots()`), written
                // only here on the JS thread while no JS runs; `cell` < CELLS since
                // rows * columns + c < limit * columns <= CELLS.
                unsafe {
                    (*slots).kinds[cell] = kind;
                    (*slots).nums[cell] = num;
                }
            }
            rows += 1;
        }
        if single || done {
            cur.reset();
            done = true;
        }
        if rows == 0 {
            columns = cur.column_count();
        }
        let reprepared = cur.reprepare_count();
        // SAFETY: as above.
        unsafe {
            let head = &mut (*slots).head;
            head[H_ROWS] = rows as f64;
            head[H_DONE] = if done { 1.0 } else { 0.0 };
            head[H_COLUMNS] = columns as f64;
            head[H_REPREPARED] = reprepared as f64;
        }
        if values.is_null() {
            self.undefined()
        } else {
            Ok(values)
        }
    }
}

/// A JS number as SQLite takes it: integral and safe → INTEGER (but -0 stays REAL, as in
/// bun:sqlite), anything else → REAL (NaN becomes NULL in SQLite).
fn number_value(n: f64) -> ValueRef<'static> {
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE && !(n == 0.0 && n.is_sign_negative()) {
        ValueRef::Integer(n as i64)
    } else {
        ValueRef::Real(n)
    }
}

fn element_size(kind: sys::napi_typedarray_type) -> usize {
    use sys::TypedarrayType as T;
    match kind {
        T::int8_array | T::uint8_array | T::uint8_clamped_array => 1,
        T::int16_array | T::uint16_array => 2,
        T::int32_array | T::uint32_array | T::float32_array => 4,
        T::float64_array | T::bigint64_array | T::biguint64_array => 8,
        _ => 1,
    }
}

/// # Safety
/// `p` must point at `n` readable bytes (or `n` be 0) that stay valid for the borrow.
unsafe fn bytes<'a>(p: *const u8, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

fn slots() -> JsResult<*mut Slots> {
    let p = SLOTS.with(Cell::get);
    if p.is_null() {
        return Err(Error::Internal("host SQL: _sqlSlots() was not called on this thread".into()));
    }
    Ok(p)
}

unsafe extern "C" fn drop_boxed<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    if !data.is_null() {
        // SAFETY: `data` is the `Box<T>` handed to napi_create_external by `new_handle::<T>`,
        // whose finalizer this is, run once.
        drop(unsafe { Box::from_raw(data.cast::<T>()) });
    }
}

/// The JS error for `err`: SQLite failures carry SQLite's own message (as bun:sqlite's do) and
/// `errno` = the extended result code (bun:sqlite's `errno`, which the host's busy checks read);
/// a finalized statement and a closed database say so in bun:sqlite's words, which the host
/// looks for in messages.
fn sql_error(env: sys::napi_env, err: &Error) -> Raw {
    match err {
        Error::Storage { message, extended_code, .. } => {
            let e = js_error_with_message(env, err, message);
            let mut n = ptr::null_mut();
            // SAFETY: plain N-API calls on a fresh error object of this environment.
            unsafe {
                sys::napi_create_int32(env, *extended_code, &mut n);
                sys::napi_set_named_property(env, e, c"errno".as_ptr(), n);
            }
            e
        }
        Error::Closed("statement") => js_error_with_message(env, err, "Statement has finalized"),
        Error::Closed("database") => js_error_with_message(env, err, "Database has closed"),
        _ => js_error(env, err),
    }
}

/// Runs one `_sql*` callback: reads the arguments, catches panics, throws errors.
///
/// # Safety
/// `env` and `info` must be the ones N-API passed to the callback.
unsafe fn entry(env: sys::napi_env, info: sys::napi_callback_info, f: fn(&Call) -> JsResult<Raw>) -> Raw {
    let mut call = Call { env, argv: smallvec::SmallVec::new() };
    let mut argc = 16usize;
    call.argv.resize(16, ptr::null_mut());
    // SAFETY: `argv` has room for `argc` values; N-API reports the real count in `argc`.
    let mut st = unsafe {
        sys::napi_get_cb_info(env, info, &mut argc, call.argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut())
    };
    if st == sys::Status::napi_ok && argc > call.argv.len() {
        call.argv.resize(argc, ptr::null_mut());
        // SAFETY: as above, with room for every argument.
        st = unsafe {
            sys::napi_get_cb_info(env, info, &mut argc, call.argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut())
        };
    }
    call.argv.truncate(argc);
    let result = if st != sys::Status::napi_ok {
        Err(Error::Internal("cannot read the arguments".into()))
    } else {
        crate::error::catch_panic(|| f(&call))
    };
    match result {
        Ok(v) => v,
        Err(e) => {
            let js = sql_error(env, &e);
            // SAFETY: throwing the error object just made; the callback then returns null,
            // which N-API reads as "an exception is pending".
            unsafe { sys::napi_throw(env, js) };
            ptr::null_mut()
        }
    }
}

macro_rules! callbacks {
    ($($name:ident => $js:literal),* $(,)?) => {
        $(
            unsafe extern "C" fn $name(env: sys::napi_env, info: sys::napi_callback_info) -> Raw {
                // SAFETY: N-API's own arguments to this callback.
                unsafe { entry(env, info, imp::$name) }
            }
        )*
        const CALLBACKS: &[(&str, unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> Raw)] =
            &[$(($js, $name)),*];
    };
}

callbacks! {
    slots_cb => "_sqlSlots",
    open_cb => "_sqlOpen",
    close_cb => "_sqlClose",
    exec_cb => "_sqlExec",
    prepare_cb => "_sqlPrepare",
    columns_cb => "_sqlColumns",
    run_cb => "_sqlRun",
    get_cb => "_sqlGet",
    all_cb => "_sqlAll",
    iterate_cb => "_sqlIterate",
    more_cb => "_sqlMore",
    reset_cb => "_sqlReset",
    finalize_cb => "_sqlFinalize",
}

/// The callbacks' bodies.
mod imp {
    use super::*;

    /// `_sqlSlots()`: the thread's result slots, as an ArrayBuffer (see [`Slots`]).
    pub fn slots_cb(c: &Call) -> JsResult<Raw> {
        let (env, r) = SLOTS_REF.with(Cell::get);
        if env == c.env && !r.is_null() {
            let mut ab = ptr::null_mut();
            // SAFETY: `r` is a strong reference made below in this same environment, never
            // released, so its value is the live buffer.
            napi(unsafe { sys::napi_get_reference_value(c.env, r, &mut ab) })?;
            if !ab.is_null() {
                return Ok(ab);
            }
        }
        let (mut data, mut ab) = (ptr::null_mut::<c_void>(), ptr::null_mut());
        // SAFETY: N-API allocates a zeroed buffer of the given size and reports where.
        napi(unsafe { sys::napi_create_arraybuffer(c.env, std::mem::size_of::<Slots>(), &mut data, &mut ab) })?;
        if data.is_null() || !(data as usize).is_multiple_of(std::mem::align_of::<Slots>()) {
            return Err(Error::Internal("host SQL: the slots buffer is not aligned".into()));
        }
        let mut r = ptr::null_mut();
        // SAFETY: a strong reference, never released: the buffer (and so `data`) lives as long
        // as the environment, and only this thread's calls write through the pointer.
        napi(unsafe { sys::napi_create_reference(c.env, ab, 1, &mut r) })?;
        SLOTS.with(|s| s.set(data.cast()));
        SLOTS_REF.with(|s| s.set((c.env, r)));
        Ok(ab)
    }

    /// `_sqlOpen(path)` → database handle.
    pub fn open_cb(c: &Call) -> JsResult<Raw> {
        let path = c.string(c.arg(0), "path")?;
        let conn = Connection::open(&path)?;
        c.new_handle(DbHandle { conn }, &DB_TAG)
    }

    /// `_sqlClose(db)`: finalizes every statement and closes.
    pub fn close_cb(c: &Call) -> JsResult<Raw> {
        c.db()?.conn.close()?;
        c.undefined()
    }

    /// `_sqlExec(db, sql)`.
    pub fn exec_cb(c: &Call) -> JsResult<Raw> {
        let db = c.db()?;
        c.with_utf8(c.arg(1), "sql", |sql| db.conn.exec(&String::from_utf8_lossy(sql)))??;
        c.undefined()
    }

    /// `_sqlPrepare(db, sql, persistent)` → statement handle.
    pub fn prepare_cb(c: &Call) -> JsResult<Raw> {
        let db = c.db()?;
        let mut persistent = false;
        if c.type_of(c.arg(2)) == sys::ValueType::napi_boolean {
            // SAFETY: a boolean of this environment.
            napi(unsafe { sys::napi_get_value_bool(c.env, c.arg(2), &mut persistent) })?;
        }
        let stmt = c.with_utf8(c.arg(1), "sql", |sql| db.conn.prepare(&String::from_utf8_lossy(sql), persistent))??;
        c.new_handle(StmtHandle { stmt: RefCell::new(stmt) }, &STMT_TAG)
    }

    fn with_cursor<R>(c: &Call, f: impl FnOnce(&mut Cursor<'_>) -> JsResult<R>) -> JsResult<R> {
        let h = c.stmt()?;
        let mut stmt = h.stmt.try_borrow_mut().map_err(|_| Error::Internal("statement in use".into()))?;
        let mut cur = stmt.lock()?;
        f(&mut cur)
    }

    /// `_sqlColumns(stmt)` → the column names.
    pub fn columns_cb(c: &Call) -> JsResult<Raw> {
        let names = with_cursor(c, |cur| cur.column_names())?;
        let mut arr = ptr::null_mut();
        // SAFETY: plain N-API value creation.
        napi(unsafe { sys::napi_create_array_with_length(c.env, names.len(), &mut arr) })?;
        for (i, name) in names.iter().enumerate() {
            let mut s = ptr::null_mut();
            // SAFETY: `name` is live for the call; N-API copies it.
            napi(unsafe { sys::napi_create_string_utf8(c.env, name.as_ptr().cast(), name.len() as isize, &mut s) })?;
            // SAFETY: `arr` is the array just made.
            napi(unsafe { sys::napi_set_element(c.env, arr, i as u32, s) })?;
        }
        Ok(arr)
    }

    /// `_sqlRun(stmt, ...params)`: runs to the end; `changes` and `lastInsertRowid` go to the
    /// slots' head, except a rowid beyond 2^53, returned as a bigint (else `undefined`).
    pub fn run_cb(c: &Call) -> JsResult<Raw> {
        let slots = slots()?;
        let (changes, rowid) = with_cursor(c, |cur| {
            c.bind_args(cur, 1)?;
            let before = cur.total_changes();
            while cur.step()? {}
            cur.reset();
            Ok((cur.total_changes() - before, cur.last_insert_rowid()))
        })?;
        // SAFETY: this thread's live slots (see `slots()`), written while no JS runs.
        unsafe {
            (*slots).head[H_CHANGES] = changes as f64;
            (*slots).head[H_ROWID] = rowid as f64;
        }
        if (-MAX_SAFE_I64..=MAX_SAFE_I64).contains(&rowid) {
            c.undefined()
        } else {
            c.js_value(ValueRef::Integer(rowid))
        }
    }

    /// `_sqlGet(stmt, ...params)`: the first row (if any) into the slots; the statement is reset.
    pub fn get_cb(c: &Call) -> JsResult<Raw> {
        with_cursor(c, |cur| {
            c.bind_args(cur, 1)?;
            c.fill(cur, 1, true)
        })
    }

    /// `_sqlAll(stmt, ...params)`: as many rows as the slots hold; `_sqlMore` continues.
    pub fn all_cb(c: &Call) -> JsResult<Raw> {
        with_cursor(c, |cur| {
            c.bind_args(cur, 1)?;
            c.fill(cur, 0, false)
        })
    }

    fn max_rows(c: &Call, i: usize) -> JsResult<usize> {
        let mut n = 0f64;
        if c.type_of(c.arg(i)) != sys::ValueType::napi_number {
            return Err(Error::invalid("maxRows must be a number"));
        }
        // SAFETY: a number of this environment.
        napi(unsafe { sys::napi_get_value_double(c.env, c.arg(i), &mut n) })?;
        Ok(if n.is_finite() && n >= 0.0 { n as usize } else { 0 })
    }

    /// `_sqlIterate(stmt, maxRows, ...params)`: the first `maxRows` rows.
    pub fn iterate_cb(c: &Call) -> JsResult<Raw> {
        let max = max_rows(c, 1)?;
        with_cursor(c, |cur| {
            c.bind_args(cur, 2)?;
            c.fill(cur, max, false)
        })
    }

    /// `_sqlMore(stmt, maxRows)`: the next rows of a statement being read.
    pub fn more_cb(c: &Call) -> JsResult<Raw> {
        let max = max_rows(c, 1)?;
        with_cursor(c, |cur| c.fill(cur, max, false))
    }

    /// `_sqlReset(stmt)`: ends a read early.
    pub fn reset_cb(c: &Call) -> JsResult<Raw> {
        with_cursor(c, |cur| {
            cur.reset();
            Ok(())
        })?;
        c.undefined()
    }

    /// `_sqlFinalize(stmt)`. Idempotent.
    pub fn finalize_cb(c: &Call) -> JsResult<Raw> {
        let h = c.stmt()?;
        h.stmt.try_borrow_mut().map_err(|_| Error::Internal("statement in use".into()))?.finalize();
        c.undefined()
    }
}

/// `_sqlFunctions()`: an object holding the `_sql*` functions (raw N-API callbacks; see the
/// module doc). `compat/sqlite-adapter.mjs` calls it once when it loads.
#[napi(js_name = "_sqlFunctions", skip_typescript)]
pub fn sql_functions(env: &Env) -> napi::Result<Object<'_>> {
    let raw = env.raw();
    let out = Object::new(env)?;
    for (name, cb) in CALLBACKS {
        let mut f = ptr::null_mut();
        // SAFETY: `name` is live for the call; `cb` is one of the callbacks above.
        super::js::napi_ok(unsafe {
            sys::napi_create_function(
                raw,
                name.as_ptr().cast(),
                name.len() as isize,
                Some(*cb),
                ptr::null_mut(),
                &mut f,
            )
        })?;
        let key = std::ffi::CString::new(*name).map_err(|_| napi::Error::from_reason("bad function name"))?;
        // SAFETY: `out` is the object just made, `f` the function just made.
        super::js::napi_ok(unsafe { sys::napi_set_named_property(raw, out.raw(), key.as_ptr(), f) })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_bind_as_bun_sqlite_binds_them() {
        assert_eq!(number_value(1.0), ValueRef::Integer(1));
        assert_eq!(number_value(-9_007_199_254_740_991.0), ValueRef::Integer(-9_007_199_254_740_991));
        assert_eq!(number_value(9_007_199_254_740_992.0), ValueRef::Real(9_007_199_254_740_992.0));
        assert_eq!(number_value(1.5), ValueRef::Real(1.5));
        assert!(matches!(number_value(-0.0), ValueRef::Real(z) if z == 0.0 && z.is_sign_negative()));
        assert!(matches!(number_value(f64::NAN), ValueRef::Real(n) if n.is_nan()));
        assert_eq!(number_value(f64::INFINITY), ValueRef::Real(f64::INFINITY));
    }

    #[test]
    fn slots_layout_matches_the_javascript_views() {
        assert_eq!(std::mem::size_of::<Slots>(), 8 * HEAD + 9 * CELLS);
        assert_eq!(std::mem::align_of::<Slots>(), 8);
    }
}
