//! A prepared statement that outlives any borrow of its connection, and the [`Cursor`] through
//! which it is bound, stepped and read while the connection's lock is held.

use std::ffi::{c_int, CStr};
use std::ptr;
use std::sync::Arc;

use parking_lot::ReentrantMutexGuard;
use rusqlite::ffi;

use super::{db_error, statement_closed, storage_error, ConnCell, Shared, ValueRef};
use crate::error::Result;

/// A prepared statement. Finalized by [`finalize`](Self::finalize), when it is dropped, or when
/// its connection is closed.
pub struct Statement {
    shared: Arc<Shared>,
    /// Null once finalized.
    raw: *mut ffi::sqlite3_stmt,
}

// SAFETY: the statement handle is only used while its connection's lock is held (see `lock`
// and `Drop`), so moving a `Statement` to another thread (a runtime dropping it from a
// finalizer there) cannot race with its connection's other users.
unsafe impl Send for Statement {}

impl Statement {
    pub(super) fn new(shared: Arc<Shared>, raw: *mut ffi::sqlite3_stmt) -> Statement {
        Statement { shared, raw }
    }

    /// Takes the connection's lock for a sequence of operations on this statement.
    /// [`Error::Closed`]`("statement")` once the statement is finalized or its connection closed.
    pub fn lock(&mut self) -> Result<Cursor<'_>> {
        let guard = self.shared.lock.lock();
        let db = guard.db.get();
        if db.is_null() || self.raw.is_null() {
            return Err(statement_closed());
        }
        Ok(Cursor { _guard: guard, db, stmt: self.raw })
    }

    /// Whether the statement can no longer be used (finalized, or its connection closed).
    pub fn is_finalized(&self) -> bool {
        self.raw.is_null() || self.shared.lock.lock().db.get().is_null()
    }

    /// Releases the statement now. Idempotent.
    pub fn finalize(&mut self) {
        let guard = self.shared.lock.lock();
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        if !raw.is_null() && !guard.db.get().is_null() {
            // SAFETY: `raw` belongs to the open connection, whose lock is held; it was not
            // finalized (a closed connection would have done it, and nulled `db`), and the field
            // is null from now on, so it is finalized exactly once. The return code repeats the
            // last step's error, which that step reported already.
            unsafe { ffi::sqlite3_finalize(raw) };
        }
    }
}

impl Drop for Statement {
    fn drop(&mut self) {
        self.finalize();
    }
}

/// A statement with its connection locked: bind, step, read the current row, reset.
pub struct Cursor<'s> {
    _guard: ReentrantMutexGuard<'s, ConnCell>,
    db: *mut ffi::sqlite3,
    stmt: *mut ffi::sqlite3_stmt,
}

// Every `unsafe` block below relies on the same invariant, established by `Statement::lock`:
// `db` is the open connection, locked for the cursor's lifetime, and `stmt` a live statement of
// it, not finalized while the cursor exists (finalizing needs `&mut Statement`, which the cursor
// borrows; closing the connection needs the lock, which this thread holds, and nothing running
// on this thread during a cursor's life closes it).
impl Cursor<'_> {
    /// `?` parameters the statement has (the largest index, for `?NNN`).
    pub fn parameter_count(&self) -> usize {
        // SAFETY: see the invariant above.
        unsafe { ffi::sqlite3_bind_parameter_count(self.stmt) as usize }
    }

    /// Sets every parameter back to NULL.
    pub fn clear_bindings(&mut self) -> Result<()> {
        // SAFETY: see the invariant above.
        self.check(unsafe { ffi::sqlite3_clear_bindings(self.stmt) })
    }

    /// Binds `value` to parameter `index` (1-based). SQLite copies text and blobs.
    pub fn bind(&mut self, index: usize, value: ValueRef<'_>) -> Result<()> {
        let i =
            c_int::try_from(index).map_err(|_| storage_error(ffi::SQLITE_RANGE, "column index out of range".into()))?;
        // SAFETY: see the invariant above. Text and blob pointers come from live slices (never
        // null, even when empty: an empty slice's pointer is dangling but non-null, so SQLite
        // binds an empty value, not NULL) and SQLITE_TRANSIENT makes SQLite copy them before
        // returning.
        let rc = unsafe {
            match value {
                ValueRef::Null => ffi::sqlite3_bind_null(self.stmt, i),
                ValueRef::Integer(v) => ffi::sqlite3_bind_int64(self.stmt, i, v),
                ValueRef::Real(v) => ffi::sqlite3_bind_double(self.stmt, i, v),
                ValueRef::Text(t) => ffi::sqlite3_bind_text64(
                    self.stmt,
                    i,
                    t.as_ptr().cast(),
                    t.len() as u64,
                    ffi::SQLITE_TRANSIENT(),
                    ffi::SQLITE_UTF8 as u8,
                ),
                ValueRef::Blob(b) => {
                    ffi::sqlite3_bind_blob64(self.stmt, i, b.as_ptr().cast(), b.len() as u64, ffi::SQLITE_TRANSIENT())
                }
            }
        };
        self.check(rc)
    }

    /// Resets the statement, then binds `values` to parameters 1, 2, …; parameters past them
    /// keep their previous values (clear them with [`clear_bindings`](Self::clear_bindings)).
    pub fn bind_all<'v>(&mut self, values: impl IntoIterator<Item = ValueRef<'v>>) -> Result<()> {
        self.reset();
        for (i, v) in values.into_iter().enumerate() {
            self.bind(i + 1, v)?;
        }
        Ok(())
    }

    /// Advances to the next row: `true` when a row is available, `false` when the statement is
    /// done. On an error the statement is reset (so it holds no lock) and the error returned.
    pub fn step(&mut self) -> Result<bool> {
        // SAFETY: see the invariant above.
        match unsafe { ffi::sqlite3_step(self.stmt) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            rc => {
                // SAFETY: see the invariant above; the message is read before the reset.
                let err = unsafe { db_error(self.db, rc) };
                self.reset();
                Err(err)
            }
        }
    }

    /// Rewinds the statement (bindings are kept) and ends its read or write, if any. The return
    /// code of `sqlite3_reset` repeats the last step's error, which [`step`](Self::step) has
    /// reported already, so there is nothing to return.
    pub fn reset(&mut self) {
        // SAFETY: see the invariant above.
        unsafe { ffi::sqlite3_reset(self.stmt) };
    }

    /// Columns of the result (0 for a statement that returns no rows).
    pub fn column_count(&self) -> usize {
        // SAFETY: see the invariant above.
        unsafe { ffi::sqlite3_column_count(self.stmt) as usize }
    }

    /// The name of column `i` (its `AS` alias if any).
    pub fn column_name(&self, i: usize) -> Result<String> {
        if i >= self.column_count() {
            return Err(storage_error(ffi::SQLITE_RANGE, "column index out of range".into()));
        }
        // SAFETY: see the invariant above; `i` is in range; the name is a NUL-terminated string
        // owned by the statement, copied out before anything else runs on it.
        let name = unsafe { ffi::sqlite3_column_name(self.stmt, i as c_int) };
        if name.is_null() {
            return Err(storage_error(ffi::SQLITE_NOMEM, "out of memory".into()));
        }
        // SAFETY: non-null and NUL-terminated (above).
        Ok(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }

    /// The names of every column.
    pub fn column_names(&self) -> Result<Vec<String>> {
        (0..self.column_count()).map(|i| self.column_name(i)).collect()
    }

    /// Column `i` of the current row (after [`step`](Self::step) returned `true`). Text and
    /// blobs borrow SQLite's buffers, valid until the next step or reset.
    pub fn value(&self, i: usize) -> Result<ValueRef<'_>> {
        let i = i as c_int;
        // SAFETY: see the invariant above. SQLite checks `i` (API armor) and reads NULL for an
        // out-of-range column. For text and blobs the pointer is read before the length, as
        // SQLite requires; a null pointer means an empty value, or a failed allocation, which
        // the connection's error code tells apart. The slices borrow `self`, so they cannot
        // outlive the row.
        unsafe {
            Ok(match ffi::sqlite3_column_type(self.stmt, i) {
                ffi::SQLITE_INTEGER => ValueRef::Integer(ffi::sqlite3_column_int64(self.stmt, i)),
                ffi::SQLITE_FLOAT => ValueRef::Real(ffi::sqlite3_column_double(self.stmt, i)),
                ffi::SQLITE_TEXT => ValueRef::Text(self.bytes(ffi::sqlite3_column_text(self.stmt, i), i)?),
                ffi::SQLITE_BLOB => ValueRef::Blob(self.bytes(ffi::sqlite3_column_blob(self.stmt, i).cast(), i)?),
                _ => ValueRef::Null,
            })
        }
    }

    /// The bytes at `p` (just returned by `sqlite3_column_text`/`_blob` for column `i`).
    ///
    /// # Safety
    /// `p` must come from `sqlite3_column_text` or `sqlite3_column_blob` on this cursor's current
    /// row, called just before.
    unsafe fn bytes(&self, p: *const u8, i: c_int) -> Result<&[u8]> {
        // SAFETY: see the invariant above and the caller's guarantee.
        let n = unsafe { ffi::sqlite3_column_bytes(self.stmt, i) };
        if p.is_null() {
            // SAFETY: see the invariant above.
            if unsafe { ffi::sqlite3_errcode(self.db) } == ffi::SQLITE_NOMEM {
                return Err(storage_error(ffi::SQLITE_NOMEM, "out of memory".into()));
            }
            return Ok(&[]);
        }
        // SAFETY: SQLite's buffer holds `n` bytes and stays valid until the next step, reset or
        // type conversion of this column, none of which can happen while `&self` is borrowed.
        Ok(unsafe { std::slice::from_raw_parts(p, n.max(0) as usize) })
    }

    /// Rows changed since the connection was opened (triggers included): the difference across a
    /// run is what that run changed, as `bun:sqlite` reports it.
    pub fn total_changes(&self) -> i64 {
        // SAFETY: see the invariant above.
        unsafe { ffi::sqlite3_total_changes64(self.db) }
    }

    /// The rowid of the connection's most recent successful INSERT (0 if none).
    pub fn last_insert_rowid(&self) -> i64 {
        // SAFETY: see the invariant above.
        unsafe { ffi::sqlite3_last_insert_rowid(self.db) }
    }

    /// How many times SQLite re-prepared the statement (after a schema change): its columns may
    /// have changed since they were last read.
    pub fn reprepare_count(&self) -> u32 {
        // SAFETY: see the invariant above.
        unsafe { ffi::sqlite3_stmt_status(self.stmt, ffi::SQLITE_STMTSTATUS_REPREPARE, 0) as u32 }
    }

    fn check(&self, rc: c_int) -> Result<()> {
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            // SAFETY: see the invariant above.
            Err(unsafe { db_error(self.db, rc) })
        }
    }
}
