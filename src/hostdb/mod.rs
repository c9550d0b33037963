//! Host SQL connections: a synchronous SQLite connection and its prepared statements, for a
//! host program that runs its own SQL through the SQLite library built into this module.
//!
//! The Prisma Streams server reaches SQLite only through its `sqlite/adapter.ts`;
//! `compat/sqlite-adapter.mjs` replaces that module with one backed by this core, so that every
//! connection in the process (the host's main thread, its worker threads, and our own
//! [`crate::store`]) uses one SQLite library. Two SQLite libraries opening the same file in one
//! process break SQLite's POSIX lock bookkeeping: one library's `close()` drops the other's locks.
//!
//! This module owns: opening a connection (with `busy_timeout` 5000 ms, since our store writes
//! the same file concurrently; every other setting is left to the caller's PRAGMAs), `exec` of
//! several statements, `prepare` → a [`Statement`] that can be bound, stepped row by row across
//! calls, reset and finalized, `changes`, `last_insert_rowid`, column names, and SQLite values
//! as [`Value`] / [`ValueRef`]. It knows nothing of JavaScript.
//!
//! A statement lives independently of any Rust borrow of its connection (the JS side holds it
//! across calls), so this works on raw `sqlite3` / `sqlite3_stmt` handles (`rusqlite::ffi`)
//! instead of `rusqlite::Statement`. A [`Connection`] and its statements share one `Arc`ed
//! [`Shared`]: the connection stays open while any of them is alive.
//!
//! **Threads and locking.** The connection is opened `SQLITE_OPEN_NOMUTEX` (no SQLite mutex per
//! API call) and every use of it or of one of its statements holds the connection's reentrant
//! lock instead: one lock per JS call rather than one per SQLite call. The lock is reentrant
//! because a JS runtime may run a garbage-collection finalizer (dropping some other
//! [`Statement`], which finalizes it under the lock) in the middle of one of our calls on the same
//! thread, for instance while a row's values are being turned into JS values. A finalizer on
//! another thread simply waits for the lock.
//!
//! **Closing.** [`Connection::close`] finalizes every statement of the connection and closes it
//! at once, so the file and its locks are released now rather than whenever the last statement
//! is garbage collected. A statement whose connection was closed reports
//! [`Error::Closed`]`("statement")`, like a finalized one.

mod statement;

use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;
use std::sync::Arc;

use parking_lot::ReentrantMutex;
use rusqlite::ffi;

pub use statement::{Cursor, Statement};

use crate::error::{Error, Result};

// `sqlite3_close_v2` is part of the bundled library but missing from libsqlite3-sys's bindings.
extern "C" {
    fn sqlite3_close_v2(db: *mut ffi::sqlite3) -> c_int;
}

/// How long a statement waits on another connection's lock before failing with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT_MS: c_int = 5000;

/// A SQLite value, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    /// Text as SQLite stored it, made valid UTF-8 (invalid bytes become U+FFFD).
    Text(String),
    Blob(Vec<u8>),
}

/// A SQLite value borrowed from a row or from a caller's argument. Text is the UTF-8 bytes
/// SQLite holds (not checked: SQLite does not guarantee valid UTF-8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

impl ValueRef<'_> {
    pub fn to_owned(&self) -> Value {
        match *self {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(v) => Value::Integer(v),
            ValueRef::Real(v) => Value::Real(v),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }
}

impl Value {
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(v) => ValueRef::Integer(*v),
            Value::Real(v) => ValueRef::Real(*v),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

/// The connection handle, behind the connection's lock. Null once closed.
struct ConnCell {
    db: Cell<*mut ffi::sqlite3>,
}

// SAFETY: the handle is only read or used while the owning `Shared::lock` is held, so at most
// one thread uses the connection at a time, which is what SQLITE_OPEN_NOMUTEX requires.
unsafe impl Send for ConnCell {}

/// What a connection and its statements share.
pub(crate) struct Shared {
    lock: ReentrantMutex<ConnCell>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let cell = self.lock.get_mut();
        let db = cell.db.replace(ptr::null_mut());
        if !db.is_null() {
            // SAFETY: no `Statement` is alive (each holds an `Arc<Shared>`), so nothing else can
            // use `db`; close_v2 never fails on a valid handle and defers the close should some
            // statement not have been finalized.
            unsafe { sqlite3_close_v2(db) };
        }
    }
}

/// A synchronous connection. Clones share the connection.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

/// The error SQLite reports for `rc` on `db`, with SQLite's own message.
///
/// # Safety
/// `db` must be a valid, open connection handle used by this thread only for the call.
pub(crate) unsafe fn db_error(db: *mut ffi::sqlite3, rc: c_int) -> Error {
    // SAFETY: the caller guarantees `db` is valid; sqlite3_errmsg returns a NUL-terminated
    // string owned by the connection (never null for a valid handle), copied out right away.
    let message = unsafe {
        let m = ffi::sqlite3_errmsg(db);
        if m.is_null() {
            String::from("unknown error")
        } else {
            CStr::from_ptr(m).to_string_lossy().into_owned()
        }
    };
    storage_error(rc, message)
}

/// [`Error::Storage`] for the (extended) result code `rc`.
pub(crate) fn storage_error(rc: c_int, message: String) -> Error {
    Error::from(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), Some(message)))
}

fn statement_closed() -> Error {
    Error::Closed("statement")
}

fn database_closed() -> Error {
    Error::Closed("database")
}

/// The SQL text as SQLite takes it: a pointer and a length in bytes.
fn sql_len(sql: &str) -> Result<c_int> {
    c_int::try_from(sql.len()).map_err(|_| storage_error(ffi::SQLITE_TOOBIG, "string or blob too big".into()))
}

impl Connection {
    /// Opens (creating if needed) the database at `path` (`:memory:` for a private in-memory
    /// database), with `busy_timeout` = [`BUSY_TIMEOUT_MS`] and extended result codes.
    pub fn open(path: &str) -> Result<Connection> {
        let c_path = CString::new(path).map_err(|_| Error::invalid("the database path contains a NUL character"))?;
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE | ffi::SQLITE_OPEN_NOMUTEX;
        let mut db = ptr::null_mut();
        // SAFETY: `c_path` is a NUL-terminated string alive for the call; `db` receives a handle
        // (possibly non-null even on failure, closed below).
        let rc = unsafe { ffi::sqlite3_open_v2(c_path.as_ptr(), &mut db, flags, ptr::null()) };
        if rc != ffi::SQLITE_OK {
            let err = if db.is_null() {
                storage_error(rc, "unable to open database file".into())
            } else {
                // SAFETY: open_v2 handed back a handle that carries the error; nothing else uses
                // it, and it is closed right after reading the message.
                let e = unsafe { db_error(db, rc) };
                // SAFETY: as above; closing a failed open's handle is what SQLite asks for.
                unsafe { sqlite3_close_v2(db) };
                e
            };
            return Err(err);
        }
        // From here on the handle is owned by `Shared`, whose drop closes it.
        let conn =
            Connection { shared: Arc::new(Shared { lock: ReentrantMutex::new(ConnCell { db: Cell::new(db) }) }) };
        // SAFETY: `db` is the open handle just made, used by this thread only.
        let rc = unsafe { ffi::sqlite3_extended_result_codes(db, 1) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: as above.
            return Err(unsafe { db_error(db, rc) });
        }
        // SAFETY: as above.
        let rc = unsafe { ffi::sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: as above.
            return Err(unsafe { db_error(db, rc) });
        }
        Ok(conn)
    }

    /// Runs `f` with the open handle under the connection's lock.
    fn with_db<T>(&self, f: impl FnOnce(*mut ffi::sqlite3) -> Result<T>) -> Result<T> {
        let guard = self.shared.lock.lock();
        let db = guard.db.get();
        if db.is_null() {
            return Err(database_closed());
        }
        f(db)
    }

    /// Runs `f` with the open handle under the connection's lock, when no transaction is open
    /// on it (autocommit): `Ok(None)` while one is, `Err` once the connection is closed. For
    /// [`crate::store`]'s writer, which commits on the host's connection so that the host's
    /// open read statements never meet a commit from another connection (`SQLITE_BUSY_SNAPSHOT`).
    ///
    /// # Safety
    /// `f` may use the handle only while it runs, from this thread, and must leave no
    /// transaction open and no statement of its own unfinalized on it.
    pub unsafe fn with_idle_handle<T>(&self, f: impl FnOnce(*mut ffi::sqlite3) -> T) -> Result<Option<T>> {
        self.with_db(|db| {
            // SAFETY: `db` is open and locked.
            if unsafe { ffi::sqlite3_get_autocommit(db) } == 0 {
                return Ok(None);
            }
            Ok(Some(f(db)))
        })
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.lock.lock().db.get().is_null()
    }

    /// Runs every statement of `sql` in order, each to completion (rows are discarded). Stops at
    /// the first error; the statements before it stay done.
    pub fn exec(&self, sql: &str) -> Result<()> {
        sql_len(sql)?;
        self.with_db(|db| {
            let mut rest = sql.as_bytes();
            while !rest.is_empty() {
                let mut stmt = ptr::null_mut();
                let mut tail: *const c_char = ptr::null();
                // SAFETY: `rest` is a live byte range of `sql` whose length fits a c_int (checked
                // above); `db` is open and locked; SQLite writes the statement and tail pointers.
                let rc = unsafe {
                    ffi::sqlite3_prepare_v2(db, rest.as_ptr().cast(), rest.len() as c_int, &mut stmt, &mut tail)
                };
                if rc != ffi::SQLITE_OK {
                    // SAFETY: `db` is open and locked.
                    return Err(unsafe { db_error(db, rc) });
                }
                let consumed = if tail.is_null() {
                    rest.len()
                } else {
                    // SAFETY: SQLite sets the tail inside (or at the end of) the range it was given.
                    (unsafe { tail.cast::<u8>().offset_from(rest.as_ptr()) }) as usize
                };
                if !stmt.is_null() {
                    // SAFETY: `stmt` was just prepared on `db` and is finalized right here.
                    let step = unsafe { run_to_completion(db, stmt) };
                    // SAFETY: as above; the step's outcome is already in `step`, so finalize's
                    // return code (which repeats the last step's error) adds nothing.
                    unsafe { ffi::sqlite3_finalize(stmt) };
                    step?;
                }
                if consumed == 0 {
                    break; // a NUL byte ends the SQL text, as it does for sqlite3_exec
                }
                rest = &rest[consumed.min(rest.len())..];
            }
            Ok(())
        })
    }

    /// Prepares the first statement of `sql` (the rest, if any, is ignored). `persistent` tells
    /// SQLite the statement will be kept and reused (`SQLITE_PREPARE_PERSISTENT`).
    pub fn prepare(&self, sql: &str, persistent: bool) -> Result<Statement> {
        let len = sql_len(sql)?;
        let raw = self.with_db(|db| {
            let mut stmt = ptr::null_mut();
            let flags = if persistent { ffi::SQLITE_PREPARE_PERSISTENT } else { 0 };
            // SAFETY: `sql` is live for the call with `len` bytes; `db` is open and locked.
            let rc =
                unsafe { ffi::sqlite3_prepare_v3(db, sql.as_ptr().cast(), len, flags, &mut stmt, ptr::null_mut()) };
            if rc != ffi::SQLITE_OK {
                // SAFETY: `db` is open and locked.
                return Err(unsafe { db_error(db, rc) });
            }
            if stmt.is_null() {
                return Err(Error::invalid("SQL query cannot be empty."));
            }
            Ok(stmt)
        })?;
        Ok(Statement::new(self.shared.clone(), raw))
    }

    /// Finalizes every statement of this connection and closes it. Idempotent.
    pub fn close(&self) -> Result<()> {
        let guard = self.shared.lock.lock();
        let db = guard.db.get();
        if db.is_null() {
            return Ok(());
        }
        loop {
            // SAFETY: `db` is open and locked; next_stmt(db, null) yields a statement of `db`
            // not yet finalized, or null when none is left.
            let stmt = unsafe { ffi::sqlite3_next_stmt(db, ptr::null_mut()) };
            if stmt.is_null() {
                break;
            }
            // SAFETY: `stmt` belongs to `db`. Its `Statement` (if any) checks `db` under this
            // lock before touching its handle, and `db` is nulled below before the lock is
            // released, so the handle is never used or finalized again.
            unsafe { ffi::sqlite3_finalize(stmt) };
        }
        guard.db.set(ptr::null_mut());
        // SAFETY: every statement is finalized, so sqlite3_close releases the file now. Should
        // it still refuse (an open blob handle or backup: we make none), close_v2 defers the
        // close until they finish; either way the handle is never used again.
        let rc = unsafe { ffi::sqlite3_close(db) };
        if rc != ffi::SQLITE_OK {
            // SAFETY: as above.
            unsafe { sqlite3_close_v2(db) };
        }
        Ok(())
    }

    /// Rows changed by the most recent INSERT, UPDATE or DELETE of this connection.
    pub fn changes(&self) -> Result<i64> {
        // SAFETY: `db` is open and locked.
        self.with_db(|db| Ok(unsafe { ffi::sqlite3_changes64(db) }))
    }

    /// Rows changed since the connection was opened (triggers included).
    pub fn total_changes(&self) -> Result<i64> {
        // SAFETY: `db` is open and locked.
        self.with_db(|db| Ok(unsafe { ffi::sqlite3_total_changes64(db) }))
    }

    /// The rowid of the most recent successful INSERT of this connection (0 if none).
    pub fn last_insert_rowid(&self) -> Result<i64> {
        // SAFETY: `db` is open and locked.
        self.with_db(|db| Ok(unsafe { ffi::sqlite3_last_insert_rowid(db) }))
    }

    /// Prepares, binds `params` and steps `sql` to the end, returning every row (tests, tools).
    pub fn query_all(&self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>> {
        let mut stmt = self.prepare(sql, false)?;
        let mut cur = stmt.lock()?;
        cur.bind_all(params.iter().map(Value::as_ref))?;
        let mut rows = Vec::new();
        while cur.step()? {
            rows.push((0..cur.column_count()).map(|i| cur.value(i).map(|v| v.to_owned())).collect::<Result<_>>()?);
        }
        Ok(rows)
    }
}

/// Steps `stmt` until SQLITE_DONE, discarding rows; on an error, the statement is reset.
///
/// # Safety
/// `stmt` must be a valid statement of `db`, and `db` open and locked by the caller.
unsafe fn run_to_completion(db: *mut ffi::sqlite3, stmt: *mut ffi::sqlite3_stmt) -> Result<()> {
    loop {
        // SAFETY: guaranteed by the caller.
        match unsafe { ffi::sqlite3_step(stmt) } {
            ffi::SQLITE_ROW => continue,
            ffi::SQLITE_DONE => return Ok(()),
            rc => {
                // SAFETY: guaranteed by the caller; the message is read before the reset.
                let err = unsafe { db_error(db, rc) };
                // SAFETY: as above; reset's code repeats the step's error, reported already.
                unsafe { ffi::sqlite3_reset(stmt) };
                return Err(err);
            }
        }
    }
}

#[cfg(test)]
mod tests;
