//! The single writer thread and its group commit.
//!
//! Every change to the database goes through one thread that owns the write connection.
//! Calls queue up as [`WriteJob`]s; the thread takes whatever is queued (up to a call and byte
//! budget), runs it in **one** `BEGIN IMMEDIATE … COMMIT` (one fsync under
//! `synchronous=FULL`) and only then tells each caller its own result. So many concurrent callers
//! share an fsync while each call keeps its own contiguous offsets and its own all-or-nothing
//! outcome:
//!
//! * an append that fails validation (unknown stream, sequence mismatch, …) is rejected before
//!   it writes anything, and the rest of the group commits;
//! * any other job runs inside a savepoint, so its failure undoes only its own changes;
//! * if SQLite fails in a way that leaves the group's transaction unusable, the group is rolled
//!   back and every job is retried alone in its own transaction (nothing of the group had been
//!   acknowledged yet, so nothing acknowledged is lost);
//! * if a `COMMIT` fails with an I/O error the writer is *poisoned*: it refuses every later write
//!   instead of guessing what reached the disk (the approach of fjall's `Poisoned`).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{Receiver, TryRecvError};
use rusqlite::{params, Connection, OptionalExtension};

use super::model::{now_ms, AppendOutcome, AppendRequest, StoreCounters, StoreOptions, STREAM_FLAG_DELETED};
use crate::error::{Error, Result};

/// How long the writer polls for new work after a commit before it sleeps.
const SPIN_AFTER_COMMIT: std::time::Duration = std::time::Duration::from_micros(200);

/// A callback that receives the outcome of an asynchronous store call, on whatever thread
/// finished it. The binding layer passes one that settles a JavaScript promise.
pub type Reply<T> = Box<dyn FnOnce(Result<T>) + Send>;

/// Why a job did not apply.
pub(crate) enum JobError {
    /// The job was refused and changed nothing; the group goes on.
    Rejected(Error),
    /// SQLite failed in the middle of the job; the group's transaction must be abandoned.
    Storage(Error),
}

impl From<rusqlite::Error> for JobError {
    fn from(e: rusqlite::Error) -> Self {
        JobError::Storage(e.into())
    }
}

/// One unit of work for the writer thread.
pub(crate) trait WriteJob: Send {
    /// Payload bytes, counted against the group's byte budget.
    fn bytes(&self) -> u64 {
        0
    }
    /// Whether the job must run inside its own savepoint (anything but a plain append).
    fn isolated(&self) -> bool {
        true
    }
    /// Applies the job inside the current transaction. May be called again (alone) when its
    /// group had to be retried, so it must not consume its inputs.
    fn apply(&mut self, conn: &Connection, cache: &mut StreamCache) -> std::result::Result<(), JobError>;
    /// Delivers the outcome once the transaction committed (or failed for good).
    fn finish(self: Box<Self>, outcome: Result<()>, counters: &StoreCounters);
}

pub(crate) enum Command {
    Job(Box<dyn WriteJob>),
    /// A read served by the writer connection (only for `:memory:` stores, which have no
    /// reader connections).
    Read(super::reader::ReadJob),
    /// Finish everything queued before, close the connection, then call the reply.
    Close(Box<dyn FnOnce() + Send>),
}

impl Command {
    /// Answers the command without running it (the store is closed).
    pub fn fail(self, err: Error) {
        match self {
            Command::Job(job) => job.finish(Err(err), &StoreCounters::default()),
            Command::Read(read) => read.fail(err),
            Command::Close(reply) => reply(),
        }
    }
}

/// The stream rows a group has touched, with the counters its appends still have to write.
#[derive(Default)]
pub(crate) struct StreamCache {
    streams: HashMap<String, CachedStream>,
}

pub(crate) struct CachedStream {
    next_offset: i64,
    last_append_ms: i64,
    flags: i64,
    expires_at_ms: Option<i64>,
    pub content_type: String,
    added_rows: i64,
    added_bytes: i64,
}

impl StreamCache {
    fn get<'a>(&'a mut self, conn: &Connection, stream: &str) -> rusqlite::Result<Option<&'a mut CachedStream>> {
        if !self.streams.contains_key(stream) {
            let row = conn
                .prepare_cached(
                    "SELECT next_offset, last_append_ms, stream_flags, expires_at_ms, content_type \
                     FROM streams WHERE stream = ?1",
                )?
                .query_row([stream], |r| {
                    Ok(CachedStream {
                        next_offset: r.get(0)?,
                        last_append_ms: r.get(1)?,
                        flags: r.get(2)?,
                        expires_at_ms: r.get(3)?,
                        content_type: r.get(4)?,
                        added_rows: 0,
                        added_bytes: 0,
                    })
                })
                .optional()?;
            match row {
                Some(c) => {
                    self.streams.insert(stream.to_string(), c);
                }
                None => return Ok(None),
            }
        }
        Ok(self.streams.get_mut(stream))
    }

    /// Writes the accumulated append counters to the `streams` rows (S8) and forgets them.
    fn flush(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let now = now_ms();
        for (name, c) in self.streams.drain() {
            if c.added_rows == 0 {
                continue;
            }
            conn.prepare_cached(
                "UPDATE streams SET next_offset = ?1, updated_at_ms = ?2, last_append_ms = ?3, \
                 pending_rows = pending_rows + ?4, pending_bytes = pending_bytes + ?5, \
                 logical_size_bytes = logical_size_bytes + ?5, \
                 wal_rows = wal_rows + ?4, wal_bytes = wal_bytes + ?5 \
                 WHERE stream = ?6 AND (stream_flags & ?7) = 0",
            )?
            .execute(params![
                c.next_offset,
                now,
                c.last_append_ms,
                c.added_rows,
                c.added_bytes,
                name,
                STREAM_FLAG_DELETED
            ])?;
        }
        Ok(())
    }
}

/// The most rows one `INSERT INTO wal` statement carries. One statement of many rows costs
/// SQLite less per row than a statement per row (parsing the bindings, the VDBE program's
/// start and end, the b-tree seek); 64 rows bind 259 parameters, well under SQLite's limit.
const MAX_ROWS_PER_INSERT: usize = 64;

/// How many of `remaining` rows the next statement takes: the largest power of two not above
/// either, so that at most seven statement shapes exist (and stay in the statement cache).
fn insert_chunk(remaining: usize) -> usize {
    let cap = remaining.min(MAX_ROWS_PER_INSERT);
    1 << (usize::BITS - 1 - cap.leading_zeros())
}

/// `INSERT INTO wal … VALUES` for `rows` rows (a power of two up to [`MAX_ROWS_PER_INSERT`]):
/// `?1` stream, `?2` time, `?3` content type shared by the rows; from `?4` on four per row
/// (offset, payload, payload length, routing key).
fn insert_sql(rows: usize) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        (0..=MAX_ROWS_PER_INSERT.trailing_zeros())
            .map(|p| {
                let mut sql = String::from(
                    "INSERT INTO wal(stream, offset, ts_ms, payload, payload_len, routing_key, content_type, flags) VALUES ",
                );
                for r in 0..1usize << p {
                    let at = 4 + 4 * r;
                    if r > 0 {
                        sql.push(',');
                    }
                    sql.push_str(&format!("(?1, ?{at}, ?2, ?{}, ?{}, ?{}, ?3, 0)", at + 1, at + 2, at + 3));
                }
                sql
            })
            .collect()
    });
    debug_assert!(rows.is_power_of_two() && rows <= MAX_ROWS_PER_INSERT);
    &all[rows.trailing_zeros() as usize]
}

/// An append of one call (S8), applied without a savepoint: all checks happen before the
/// first insert.
pub(crate) struct AppendJob {
    pub req: AppendRequest,
    pub reply: Option<Reply<AppendOutcome>>,
    pub outcome: Option<AppendOutcome>,
}

impl WriteJob for AppendJob {
    fn bytes(&self) -> u64 {
        self.req.payload_bytes()
    }

    fn isolated(&self) -> bool {
        false
    }

    fn apply(&mut self, conn: &Connection, cache: &mut StreamCache) -> std::result::Result<(), JobError> {
        let req = &self.req;
        let not_found = || JobError::Rejected(Error::StreamNotFound { stream: req.stream.clone() });
        let st = cache.get(conn, &req.stream)?.ok_or_else(not_found)?;
        if st.flags & STREAM_FLAG_DELETED != 0 {
            return Err(not_found());
        }
        let now = now_ms();
        if st.expires_at_ms.is_some_and(|exp| now > exp) {
            return Err(JobError::Rejected(Error::StreamExpired { stream: req.stream.clone() }));
        }
        if let Some(expected) = req.expected_offset {
            if expected != st.next_offset {
                return Err(JobError::Rejected(Error::SeqMismatch {
                    stream: req.stream.clone(),
                    expected,
                    expected_next: st.next_offset,
                }));
            }
        }
        // S9: without an explicit time, rows get the wall clock, strictly increasing per stream.
        let ts = req.append_ms.unwrap_or_else(|| now.max(st.last_append_ms.saturating_add(1)));
        let content_type: &str = req.content_type.as_deref().unwrap_or(&st.content_type);
        let first = st.next_offset;
        let mut bytes = 0i64;
        let mut done = 0usize;
        while done < req.payloads.len() {
            let rows = insert_chunk(req.payloads.len() - done);
            let mut insert = conn.prepare_cached(insert_sql(rows))?;
            insert.raw_bind_parameter(1, &req.stream)?;
            insert.raw_bind_parameter(2, ts)?;
            insert.raw_bind_parameter(3, content_type)?;
            for r in 0..rows {
                let i = done + r;
                let payload = &req.payloads[i];
                let at = 4 + 4 * r;
                insert.raw_bind_parameter(at, first + i as i64)?;
                insert.raw_bind_parameter(at + 1, payload)?;
                insert.raw_bind_parameter(at + 2, payload.len() as i64)?;
                insert.raw_bind_parameter(at + 3, req.routing_keys.as_ref().and_then(|k| k[i].as_deref()))?;
                bytes += payload.len() as i64;
            }
            insert.raw_execute()?;
            done += rows;
        }
        let n = req.payloads.len() as i64;
        st.next_offset = first + n;
        st.last_append_ms = ts;
        st.added_rows += n;
        st.added_bytes += bytes;
        self.outcome = Some(AppendOutcome { first_offset: first, last_offset: first + n - 1, next_offset: first + n });
        Ok(())
    }

    fn finish(mut self: Box<Self>, outcome: Result<()>, counters: &StoreCounters) {
        let result =
            outcome.and_then(|()| self.outcome.ok_or_else(|| Error::Internal("append without outcome".into())));
        match &result {
            Ok(_) => {
                StoreCounters::add(&counters.append_calls, 1);
                StoreCounters::add(&counters.append_rows, self.req.payloads.len() as u64);
                StoreCounters::add(&counters.append_bytes, self.req.payload_bytes());
            }
            Err(_) => StoreCounters::add(&counters.append_errors, 1),
        }
        if let Some(reply) = self.reply.take() {
            reply(result);
        }
    }
}

/// Any other write: a closure over the connection, run inside a savepoint.
pub(crate) struct FnJob<T, F> {
    pub f: F,
    pub value: Option<T>,
    pub reply: Option<Reply<T>>,
}

impl<T, F> WriteJob for FnJob<T, F>
where
    T: Send,
    F: FnMut(&Connection) -> Result<T> + Send,
{
    fn apply(&mut self, conn: &Connection, _cache: &mut StreamCache) -> std::result::Result<(), JobError> {
        self.value = Some((self.f)(conn).map_err(JobError::Rejected)?);
        Ok(())
    }

    fn finish(mut self: Box<Self>, outcome: Result<()>, counters: &StoreCounters) {
        StoreCounters::add(&counters.write_jobs, 1);
        let result =
            outcome.and_then(|()| self.value.take().ok_or_else(|| Error::Internal("job without value".into())));
        if let Some(reply) = self.reply.take() {
            reply(result);
        }
    }
}

/// The connection the writer commits on: its own, or the host program's (see
/// [`crate::store::Store::open_on_host`]).
pub(crate) enum WriterConn {
    Own(Connection),
    Host(crate::hostdb::Connection),
}

/// How long the writer waits for the host's connection to leave a transaction.
const HOST_IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl WriterConn {
    /// Runs `f` on the connection. On the host's, `f` runs under its lock when no transaction
    /// of the host is open, with a statement cache of its own that is gone before the lock is
    /// released (the host finalizes every statement of its connection when it closes it).
    fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> Result<T> {
        let host = match self {
            WriterConn::Own(c) => return Ok(f(c)),
            WriterConn::Host(h) => h,
        };
        let started = std::time::Instant::now();
        let mut f = Some(f);
        loop {
            // SAFETY: the wrapper below uses the handle only inside the closure, on this thread,
            // under the host connection's lock; every job commits or rolls back its transaction
            // before returning; and the wrapper's prepared statements are finalized (its cache
            // flushed) and the wrapper dropped, without closing the handle it does not own,
            // before the closure returns.
            let out = unsafe {
                host.with_idle_handle(|db| {
                    let conn = Connection::from_handle(db)?;
                    conn.set_prepared_statement_cache_capacity(super::WRITER_STATEMENT_CACHE);
                    let out = (f.take().expect("runs once"))(&conn);
                    conn.flush_prepared_statement_cache();
                    drop(conn);
                    Ok::<T, rusqlite::Error>(out)
                })
            }?;
            match out {
                Some(out) => return out.map_err(Error::from),
                None if started.elapsed() < HOST_IDLE_WAIT => std::thread::sleep(std::time::Duration::from_millis(1)),
                None => {
                    return Err(Error::Storage {
                        code: "SQLITE_BUSY".into(),
                        extended_code: 5,
                        message: "the host's connection stayed inside a transaction".into(),
                    })
                }
            }
        }
    }
}

pub(crate) struct Writer {
    pub conn: WriterConn,
    pub rx: Receiver<Command>,
    pub options: StoreOptions,
    pub counters: Arc<StoreCounters>,
    /// Set after a failed commit; every later job is refused with this error.
    poisoned: Option<Error>,
}

impl Writer {
    pub fn new(conn: WriterConn, rx: Receiver<Command>, options: StoreOptions, counters: Arc<StoreCounters>) -> Self {
        Writer { conn, rx, options, counters, poisoned: None }
    }

    /// The thread's main loop: returns when the store closes or every sender is gone.
    pub fn run(mut self) -> Option<Box<dyn FnOnce() + Send>> {
        let mut on_close = None;
        while on_close.is_none() {
            let first = match self.next_command() {
                Some(c) => c,
                None => break,
            };
            let mut jobs: Vec<Box<dyn WriteJob>> = Vec::new();
            let mut reads: Vec<super::reader::ReadJob> = Vec::new();
            let mut bytes = 0u64;
            let mut next = Some(first);
            while let Some(cmd) = next.take() {
                match cmd {
                    Command::Job(j) => {
                        bytes += j.bytes();
                        jobs.push(j);
                    }
                    Command::Read(r) => reads.push(r),
                    Command::Close(reply) => {
                        on_close = Some(reply);
                        break;
                    }
                }
                if jobs.len() >= self.options.max_group_calls || bytes >= self.options.max_group_bytes {
                    break;
                }
                next = match self.rx.try_recv() {
                    Ok(c) => Some(c),
                    Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => None,
                };
            }
            if !jobs.is_empty() {
                self.commit_group(jobs);
            }
            for read in reads {
                let _ = self.conn.with(|conn| std::panic::catch_unwind(AssertUnwindSafe(|| read.run(conn))));
            }
        }
        // Close the connection before telling anyone: closing checkpoints the WAL file (the
        // host's connection is the host's to close).
        let Writer { conn, .. } = self;
        drop(conn);
        on_close
    }

    /// Waits for the next command. Right after a commit the writer spins for a short while
    /// before sleeping: a caller that awaits each append issues the next one within tens of
    /// microseconds, and waking a sleeping thread costs about as much again on a VM.
    fn next_command(&self) -> Option<Command> {
        let spin_until = std::time::Instant::now() + SPIN_AFTER_COMMIT;
        loop {
            match self.rx.try_recv() {
                Ok(c) => return Some(c),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {}
            }
            if std::time::Instant::now() >= spin_until {
                return self.rx.recv().ok();
            }
            std::thread::yield_now();
        }
    }

    fn commit_group(&mut self, mut jobs: Vec<Box<dyn WriteJob>>) {
        if let Some(err) = &self.poisoned {
            for job in jobs {
                job.finish(Err(err.clone()), &self.counters);
            }
            return;
        }
        let n = jobs.len() as u64;
        let grouped = match self
            .conn
            .with(|conn| std::panic::catch_unwind(AssertUnwindSafe(|| Self::try_group(conn, &mut jobs))))
        {
            Ok(g) => g,
            Err(err) => Ok(Err(GroupFailure::Commit(err))),
        };
        match grouped {
            Ok(Ok(outcomes)) => {
                StoreCounters::add(&self.counters.group_commits, 1);
                self.counters.group_calls_max.fetch_max(n, Ordering::Relaxed);
                for (job, outcome) in jobs.into_iter().zip(outcomes) {
                    job.finish(outcome, &self.counters);
                }
            }
            Ok(Err(GroupFailure::Commit(err))) => {
                self.poison_if_fatal(&err);
                for job in jobs {
                    job.finish(Err(err.clone()), &self.counters);
                }
            }
            Ok(Err(GroupFailure::Abandoned)) | Err(_) => {
                // Nothing of the group is acknowledged: retry every job on its own.
                let _ = self.conn.with(|conn| conn.execute_batch("ROLLBACK"));
                StoreCounters::add(&self.counters.group_fallbacks, 1);
                for mut job in jobs {
                    let outcome = self.run_alone(job.as_mut());
                    job.finish(outcome, &self.counters);
                }
            }
        }
    }

    /// Runs a whole group in one transaction. On success returns each job's own outcome.
    fn try_group(
        conn: &Connection,
        jobs: &mut [Box<dyn WriteJob>],
    ) -> std::result::Result<Vec<Result<()>>, GroupFailure> {
        conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| GroupFailure::Commit(e.into()))?;
        let mut cache = StreamCache::default();
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs.iter_mut() {
            if job.isolated() {
                // The job must see the stream rows as the group's earlier appends left them,
                // and rolling back its savepoint must not undo those appends' counters.
                cache.flush(conn).map_err(|_| GroupFailure::Abandoned)?;
                conn.execute_batch("SAVEPOINT job").map_err(|_| GroupFailure::Abandoned)?;
                match job.apply(conn, &mut cache) {
                    Ok(()) => {
                        conn.execute_batch("RELEASE job").map_err(|_| GroupFailure::Abandoned)?;
                        outcomes.push(Ok(()));
                    }
                    Err(JobError::Rejected(e)) | Err(JobError::Storage(e)) => {
                        conn.execute_batch("ROLLBACK TO job; RELEASE job").map_err(|_| GroupFailure::Abandoned)?;
                        outcomes.push(Err(e));
                    }
                }
            } else {
                match job.apply(conn, &mut cache) {
                    Ok(()) => outcomes.push(Ok(())),
                    Err(JobError::Rejected(e)) => outcomes.push(Err(e)),
                    Err(JobError::Storage(_)) => return Err(GroupFailure::Abandoned),
                }
            }
        }
        cache.flush(conn).map_err(|_| GroupFailure::Abandoned)?;
        if let Err(e) = conn.execute_batch("COMMIT") {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(GroupFailure::Commit(e.into()));
        }
        Ok(outcomes)
    }

    /// Runs one job in a transaction of its own.
    fn run_alone(&mut self, job: &mut dyn WriteJob) -> Result<()> {
        if let Some(err) = &self.poisoned {
            return Err(err.clone());
        }
        let result = self.conn.with(|conn| Self::alone(conn, job)).and_then(|r| r);
        if let Err(e) = &result {
            self.poison_if_fatal(e);
        }
        result
    }

    fn alone(conn: &Connection, job: &mut dyn WriteJob) -> Result<()> {
        let attempt = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<()> {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let mut cache = StreamCache::default();
            let applied = match job.apply(conn, &mut cache) {
                Ok(()) => cache.flush(conn).map_err(Error::from),
                Err(JobError::Rejected(e)) | Err(JobError::Storage(e)) => Err(e),
            };
            if let Err(e) = applied {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
            conn.execute_batch("COMMIT").map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                Error::from(e)
            })
        }));
        attempt.unwrap_or_else(|p| {
            let _ = conn.execute_batch("ROLLBACK");
            Err(Error::from_panic(p))
        })
    }

    fn poison_if_fatal(&mut self, err: &Error) {
        if let Error::Storage { code, .. } = err {
            if matches!(code.as_str(), "SQLITE_IOERR" | "SQLITE_CORRUPT" | "SQLITE_NOTADB" | "SQLITE_FULL") {
                self.poisoned = Some(Error::Storage {
                    code: code.clone(),
                    extended_code: 0,
                    message: format!("store refuses writes after a failed commit ({err}); reopen it"),
                });
            }
        }
    }
}

enum GroupFailure {
    /// BEGIN or COMMIT failed: nothing of the group is durable.
    Commit(Error),
    /// The transaction is unusable; retry jobs alone.
    Abandoned,
}
