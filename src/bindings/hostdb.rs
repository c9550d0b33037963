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

use std::cell::RefCell;

use napi::bindgen_prelude::{JsValue, Object};
use napi::{sys, Env};
use napi_derive::napi;

use super::napi::callback::{self, CallInfo};
use super::napi::handle::{handle_ref, new_handle, Handle, Ref};
use super::napi::shared::{SqlSlots, CELLS};
use super::napi::{js_error, js_error_with_message, Cleanup, Js, Out, RawValue};
use crate::error::Error;
use crate::hostdb::{Connection, Cursor, Statement, ValueRef};

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

thread_local! {
    /// This thread's result slots and the ArrayBuffer `_sqlSlots()` made over them (a reference
    /// kept for as long as the thread's JS environment, deleted by its teardown hook): a second copy of the JS
    /// module in the same environment gets the same buffer (with a buffer of its own, the first
    /// copy's typed arrays would read cells the native side no longer writes).
    static SLOTS: RefCell<Option<(Ref, SqlSlots)>> = const { RefCell::new(None) };
}

/// [`forget_slots`], run by every environment's teardown once `_sqlSlots()` was called.
static FORGET_SLOTS: Cleanup = Cleanup::new(forget_slots);

/// Deletes this thread's slots reference if it belongs to `env` (its teardown, see
/// [`super::napi::on_teardown`]).
fn forget_slots(env: &Env) {
    let old = SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        if s.as_ref().is_some_and(|(r, _)| r.is_of(env)) {
            s.take()
        } else {
            None
        }
    });
    if let Some((r, _)) = old {
        // A live reference of this environment: deleting cannot fail.
        let _deleted = r.delete(env);
    }
}

const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
const MAX_SAFE_I64: i64 = 9_007_199_254_740_991;

struct DbHandle {
    conn: Connection,
}

impl Handle for DbHandle {
    const TAG: sys::napi_type_tag = sys::napi_type_tag { lower: 0x6474_686f_7374_6462, upper: 0x636f_6e6e_6563_7431 };
}

struct StmtHandle {
    stmt: RefCell<Statement>,
}

impl Handle for StmtHandle {
    const TAG: sys::napi_type_tag = sys::napi_type_tag { lower: 0x6474_686f_7374_6462, upper: 0x7374_6174_656d_6e74 };
}

type Raw = RawValue;
type JsResult<T> = std::result::Result<T, Error>;

/// The connection of a database handle made by `_sqlOpen` (what the adapter's
/// `SqliteDatabase` holds), for a [`crate::store::Store`] that commits on it.
pub(crate) fn connection_of(value: Js<'_>) -> JsResult<Connection> {
    Ok(handle_ref::<DbHandle>(value).ok_or_else(|| Error::invalid("not a database handle"))?.conn.clone())
}

/// One call's environment and arguments.
struct Call<'a, 'env> {
    info: &'a CallInfo<'env>,
}

fn from_napi(e: napi::Error) -> Error {
    super::napi::from_napi(e)
}

impl<'env> Call<'_, 'env> {
    fn arg(&self, i: usize) -> Js<'env> {
        self.info.arg(i)
    }

    fn out(&self) -> Out<'env> {
        self.info.out()
    }

    fn undefined(&self) -> JsResult<Raw> {
        self.out().undefined().map_err(from_napi)
    }

    fn string(&self, v: Js<'env>, what: &str) -> JsResult<String> {
        v.with_utf8::<512, _>(what, |b| String::from_utf8_lossy(b).into_owned())
    }

    /// The handle of type `T` in argument 0.
    fn handle<T: Handle>(&self, what: &str) -> JsResult<&'env T> {
        handle_ref::<T>(self.arg(0)).ok_or_else(|| Error::invalid(format!("not a {what} handle")))
    }

    fn db(&self) -> JsResult<&'env DbHandle> {
        self.handle("database")
    }

    fn stmt(&self) -> JsResult<&'env StmtHandle> {
        self.handle("statement")
    }

    /// Binds arguments `from..` to the statement's parameters, as bun:sqlite does: none keeps
    /// the previous bindings, otherwise their number must be the statement's parameter count.
    fn bind_args(&self, cur: &mut Cursor<'_>, from: usize) -> JsResult<()> {
        cur.reset();
        let given = self.info.len().saturating_sub(from);
        if given == 0 {
            return Ok(());
        }
        let expected = cur.parameter_count();
        if given != expected {
            return Err(Error::invalid(format!("SQLite query expected {expected} values, received {given}")));
        }
        for i in 0..given {
            self.bind_one(cur, i + 1, self.arg(from + i))?;
        }
        Ok(())
    }

    /// Binds one JS value (read and bound at once: SQLite copies text and blobs before any
    /// other JS value is touched, so borrowed typed-array memory cannot change in between).
    fn bind_one(&self, cur: &mut Cursor<'_>, index: usize, v: Js<'env>) -> JsResult<()> {
        match v.type_of() {
            // The type is known: read without checking it again (one N-API call per value).
            sys::ValueType::napi_number => {
                cur.bind(index, number_value(v.try_number().ok_or_else(|| Error::invalid("parameter"))?))
            }
            sys::ValueType::napi_string => {
                v.with_utf8::<512, _>("parameter", |b| cur.bind(index, ValueRef::Text(b)))?
            }
            sys::ValueType::napi_undefined | sys::ValueType::napi_null => cur.bind(index, ValueRef::Null),
            sys::ValueType::napi_boolean => cur.bind(index, ValueRef::Integer(v.boolean("parameter")? as i64)),
            sys::ValueType::napi_bigint => {
                let (n, lossless) = v.bigint_i64()?;
                if !lossless {
                    return Err(Error::invalid(format!(
                        "parameter {index}: BigInt value is out of the 64-bit integer range"
                    )));
                }
                cur.bind(index, ValueRef::Integer(n))
            }
            sys::ValueType::napi_object => match v.any_bytes()? {
                Some(b) => cur.bind(index, ValueRef::Blob(b)),
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

    /// The JS value of one SQLite value of kind [`KIND_VALUE`].
    fn js_value(&self, v: ValueRef<'_>) -> JsResult<Raw> {
        let out = self.out();
        match v {
            // Invalid UTF-8 becomes U+FFFD.
            ValueRef::Text(t) => out.str_lossy(t),
            ValueRef::Blob(b) => out.uint8_array(b),
            ValueRef::Integer(n) => out.bigint(n),
            ValueRef::Real(n) => out.num(n),
            ValueRef::Null => out.null(),
        }
        .map_err(from_napi)
    }

    /// Steps up to `max_rows` rows (0: as many as the cells hold) into the thread's slots.
    /// Returns the array of kind-2 values (or `undefined` when there is none). With `single`,
    /// the statement is reset after the first row (`get`). When the statement is done, it is
    /// reset, so it holds no read transaction between calls.
    fn fill(&self, cur: &mut Cursor<'_>, max_rows: usize, single: bool) -> JsResult<Raw> {
        let slots = slots(self.info.env)?;
        let out = self.out();
        // The column count is read after a step: the first step of an execution may re-prepare
        // the statement after a schema change, and its columns with it.
        let mut columns = cur.column_count();
        let mut limit = 1;
        let mut values: Option<Raw> = None;
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
                // cell < CELLS since rows * columns + c < limit * columns <= CELLS.
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
                    let arr = match values {
                        Some(a) => a,
                        None => *values.insert(out.array_of_len(0).map_err(from_napi)?),
                    };
                    out.set_element(arr, cell as u32, js).map_err(from_napi)?;
                }
                slots.set_cell(cell, kind, num);
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
        slots.set_head(H_ROWS, rows as f64);
        slots.set_head(H_DONE, if done { 1.0 } else { 0.0 });
        slots.set_head(H_COLUMNS, columns as f64);
        slots.set_head(H_REPREPARED, cur.reprepare_count() as f64);
        match values {
            Some(v) => Ok(v),
            None => self.undefined(),
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

/// This environment's result slots.
fn slots(env: &Env) -> JsResult<SqlSlots> {
    SLOTS.with(|s| match s.borrow().as_ref() {
        Some((r, slots)) if r.is_of(env) => Ok(slots.clone()),
        _ => Err(Error::Internal("host SQL: _sqlSlots() was not called on this thread".into())),
    })
}

/// The JS error for `err`: SQLite failures carry SQLite's own message (as bun:sqlite's do) and
/// `errno` = the extended result code (bun:sqlite's `errno`, which the host's busy checks read);
/// a finalized statement and a closed database say so in bun:sqlite's words, which the host
/// looks for in messages.
fn sql_error(env: &Env, err: &Error) -> JsResult<Raw> {
    match err {
        Error::Storage { message, extended_code, .. } => {
            let e = js_error_with_message(env, err, message)?;
            let out = Out::new(env);
            out.js(e).set_named(c"errno", out.i32(*extended_code).map_err(from_napi)?)?;
            Ok(e)
        }
        Error::Closed("statement") => js_error_with_message(env, err, "Statement has finalized"),
        Error::Closed("database") => js_error_with_message(env, err, "Database has closed"),
        _ => js_error(env, err),
    }
}

macro_rules! callbacks {
    ($($name:ident => $js:literal),* $(,)?) => {
        $(
            unsafe extern "C" fn $name(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
                // SAFETY: N-API's own arguments to this callback.
                unsafe { callback::entry(env, info, |info| imp::$name(&Call { info }), sql_error) }
            }
        )*
        const CALLBACKS: &[(&str, callback::RawCallback)] = &[$(($js, $name)),*];
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

    /// `_sqlSlots()`: the environment's result slots, as an ArrayBuffer over native memory (see
    /// [`SqlSlots`]): detaching or dropping the buffer cannot free what the native side writes.
    /// Every call gives the same buffer, unless it was detached: then a new one over the same
    /// memory.
    pub fn slots_cb(c: &Call) -> JsResult<Raw> {
        let env = c.info.env;
        let existing = SLOTS.with(|s| match s.borrow().as_ref() {
            Some((r, slots)) if r.is_of(env) => Some((r.value(env).map(|v| v.raw()), slots.clone())),
            _ => None,
        });
        let slots = match existing {
            Some((Some(ab), _)) if !c.out().js(ab).is_detached_array_buffer() => return Ok(ab),
            Some((_, slots)) => slots,
            None => SqlSlots::new(),
        };
        let ab = slots.array_buffer(env)?;
        // Before SLOTS holds a reference of `env`.
        FORGET_SLOTS.register();
        let r = Ref::new(c.out().js(ab), 1)?;
        let old = SLOTS.with(|s| s.replace(Some((r, slots))));
        if let Some((old_ref, _)) = old {
            // Ours (the detached buffer's) is deleted; another environment's was deleted by its
            // teardown hook.
            if old_ref.is_of(env) {
                old_ref.delete(env)?;
            }
        }
        Ok(ab)
    }

    /// `_sqlOpen(path)` → database handle.
    pub fn open_cb(c: &Call) -> JsResult<Raw> {
        let path = c.string(c.arg(0), "path")?;
        let conn = Connection::open(&path)?;
        new_handle(c.info.env, DbHandle { conn })
    }

    /// `_sqlClose(db)`: finalizes every statement and closes.
    pub fn close_cb(c: &Call) -> JsResult<Raw> {
        c.db()?.conn.close()?;
        c.undefined()
    }

    /// `_sqlExec(db, sql)`.
    pub fn exec_cb(c: &Call) -> JsResult<Raw> {
        let db = c.db()?;
        c.arg(1).with_utf8::<512, _>("sql", |sql| db.conn.exec(&String::from_utf8_lossy(sql)))??;
        c.undefined()
    }

    /// `_sqlPrepare(db, sql, persistent)` → statement handle.
    pub fn prepare_cb(c: &Call) -> JsResult<Raw> {
        let db = c.db()?;
        let persistent = c.arg(2).type_of() == sys::ValueType::napi_boolean && c.arg(2).boolean("persistent")?;
        let stmt =
            c.arg(1).with_utf8::<512, _>("sql", |sql| db.conn.prepare(&String::from_utf8_lossy(sql), persistent))??;
        new_handle(c.info.env, StmtHandle { stmt: RefCell::new(stmt) })
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
        let out = c.out();
        let arr = out.array_of_len(names.len()).map_err(from_napi)?;
        for (i, name) in names.iter().enumerate() {
            out.set_element(arr, i as u32, out.str_lossy(name.as_bytes()).map_err(from_napi)?).map_err(from_napi)?;
        }
        Ok(arr)
    }

    /// `_sqlRun(stmt, ...params)`: runs to the end; `changes` and `lastInsertRowid` go to the
    /// slots' head, except a rowid beyond 2^53, returned as a bigint (else `undefined`).
    pub fn run_cb(c: &Call) -> JsResult<Raw> {
        let slots = slots(c.info.env)?;
        let (changes, rowid) = with_cursor(c, |cur| {
            c.bind_args(cur, 1)?;
            let before = cur.total_changes();
            while cur.step()? {}
            cur.reset();
            Ok((cur.total_changes() - before, cur.last_insert_rowid()))
        })?;
        slots.set_head(H_CHANGES, changes as f64);
        slots.set_head(H_ROWID, rowid as f64);
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
        if c.arg(i).type_of() != sys::ValueType::napi_number {
            return Err(Error::invalid("maxRows must be a number"));
        }
        let n = c.arg(i).number("maxRows")?;
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
    let out = Object::new(env)?;
    for (name, cb) in CALLBACKS {
        let f = callback::function(env, name, *cb).map_err(super::napi::internal)?;
        let key = std::ffi::CString::new(*name).map_err(|_| napi::Error::from_reason("bad function name"))?;
        Js::new(env, out.raw()).set_named(&key, f).map_err(super::napi::internal)?;
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
}
