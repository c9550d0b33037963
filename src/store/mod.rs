//! The durable SQLite log: streams, WAL append with contiguous offsets, range reads, WAL GC,
//! and generic read/write jobs for the modules built on top (touch state, live templates,
//! profiles).
//!
//! [`Store`] is pure Rust. Every asynchronous call takes a [`Reply`] that is invoked exactly
//! once, on a store thread, with the call's outcome; the binding layer turns that into a
//! JavaScript promise. Writes run on the single writer thread ([`writer`], group commit);
//! reads run on reader connections ([`reader`]). An acknowledged append has been committed
//! with `synchronous=FULL` in WAL mode, so it survives a `kill -9` (and a power cut, as far as
//! the disk honours fsync).
//!
//! ```
//! use durable_touch::store::{Store, StoreOptions, AppendRequest, blocking};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("data.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
//! blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
//! let out = blocking(|r| store.append(AppendRequest { stream: "s".into(), payloads: vec![b"{}".to_vec()], ..Default::default() }, r)).unwrap();
//! assert_eq!((out.first_offset, out.next_offset), (0, 1));
//! blocking(|r| store.close(r)).unwrap();
//! ```

pub mod model;
mod reader;
pub mod schema;
mod writer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

pub use model::*;
pub use writer::Reply;

use crate::error::{catch_panic, Error, Result};
use reader::ReaderPool;
use writer::{AppendJob, Command, FnJob, Writer, WriterConn};

/// Called on the writer thread after an append committed: `(stream, outcome, payload bytes)`.
pub type AppendHook = Arc<dyn Fn(&str, &AppendOutcome, u64) + Send + Sync>;

/// Longest accepted stream name, in bytes.
pub const MAX_STREAM_NAME_BYTES: usize = 1024;

/// Statements the writer keeps prepared: its own writes plus the seven shapes of the WAL
/// insert (rusqlite's default of 16 would evict some of them on every group).
pub(crate) const WRITER_STATEMENT_CACHE: usize = 64;

/// A handle to an open store. Cheap to clone; all clones share one writer and one reader pool.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    path: String,
    in_memory: bool,
    options: StoreOptions,
    counters: Arc<StoreCounters>,
    closed: AtomicBool,
    writer_tx: Mutex<Option<Sender<Command>>>,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Option<ReaderPool>>,
    append_hooks: RwLock<Vec<AppendHook>>,
}

/// File sizes and counters, for `stats()`.
#[derive(Debug, Clone)]
pub struct StoreStats {
    pub path: String,
    pub closed: bool,
    pub db_file_bytes: u64,
    pub wal_file_bytes: u64,
    pub counters: StoreCountersSnapshot,
}

impl Store {
    /// Opens (creating if needed) the database at `path` with the reference's pragmas and
    /// schema. `":memory:"` opens a private in-memory database (reads then go through the
    /// writer thread).
    pub fn open(path: &str, options: StoreOptions) -> Result<Store> {
        Store::open_with(path, options, None)
    }

    /// [`Store::open`] inside a host program that has `path` open on `host` (a connection of
    /// this module's SQLite library, [`crate::hostdb`]): the store reads on connections of its
    /// own but commits on the host's, between the host's transactions. A commit from another
    /// connection makes the host's next write fail with `SQLITE_BUSY_SNAPSHOT` whenever the host
    /// still holds an open read statement (as the Prisma Streams server's segmenter does across
    /// its yields); commits on the host's own connection never do.
    pub fn open_on_host(path: &str, options: StoreOptions, host: crate::hostdb::Connection) -> Result<Store> {
        if path == ":memory:" {
            return Err(Error::invalid("a store on a host's connection needs a file path"));
        }
        Store::open_with(path, options, Some(host))
    }

    fn open_with(path: &str, options: StoreOptions, host: Option<crate::hostdb::Connection>) -> Result<Store> {
        if path.is_empty() {
            return Err(Error::invalid("store path must be a non-empty string"));
        }
        if path.contains('\0') {
            return Err(Error::invalid("store path must not contain NUL"));
        }
        let in_memory = path == ":memory:";
        let open_conn = |flags: OpenFlags| -> Result<Connection> {
            let conn =
                if in_memory { Connection::open_in_memory()? } else { Connection::open_with_flags(path, flags)? };
            schema::apply_pragmas(&conn, options.cache_bytes)?;
            Ok(conn)
        };
        let rw_flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let mut conn = open_conn(rw_flags)?;
        conn.set_prepared_statement_cache_capacity(WRITER_STATEMENT_CACHE);
        schema::init(&mut conn)?;

        let readers = if in_memory || options.readers == 0 {
            None
        } else {
            Some(ReaderPool::start(options.readers, || {
                let c = open_conn(
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
                )?;
                c.execute_batch("PRAGMA query_only = 1;")?;
                Ok(c)
            })?)
        };

        let conn = match host {
            // The schema was checked on our own connection, which closes here.
            Some(h) => WriterConn::Host(h),
            None => WriterConn::Own(conn),
        };
        let counters = Arc::new(StoreCounters::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        let writer = Writer::new(conn, rx, options.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("dt-writer".into())
            .spawn(move || {
                if let Some(on_close) = writer.run() {
                    on_close();
                }
            })
            .map_err(|e| Error::Internal(format!("cannot start writer thread: {e}")))?;

        Ok(Store {
            inner: Arc::new(StoreInner {
                path: path.to_string(),
                in_memory,
                options,
                counters,
                closed: AtomicBool::new(false),
                writer_tx: Mutex::new(Some(tx)),
                writer_thread: Mutex::new(Some(thread)),
                readers: Mutex::new(readers),
                append_hooks: RwLock::new(Vec::new()),
            }),
        })
    }

    pub fn path(&self) -> &str {
        &self.inner.path
    }

    pub fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Registers a hook run after every committed append (used by the touch engine to mark a
    /// stream dirty the moment its rows are durable).
    pub fn add_append_hook(&self, hook: AppendHook) {
        self.inner.append_hooks.write().push(hook);
    }

    /// Creates the stream if it does not exist (S6) and returns its row. An existing stream is
    /// returned unchanged, unless `content_type` is given and differs from its own
    /// ([`Error::StreamExists`]). A stream that was deleted is replaced by a fresh one.
    pub fn create_stream(
        &self,
        name: String,
        content_type: Option<String>,
        profile: Option<String>,
        reply: Reply<StreamRow>,
    ) {
        if let Err(e) = validate_stream_name(&name) {
            return reply(Err(e));
        }
        self.write(
            move |conn| {
                if let Some(existing) = query_stream(conn, &name)? {
                    if !existing.is_deleted() {
                        if let Some(ct) = &content_type {
                            if *ct != existing.content_type {
                                return Err(Error::StreamExists {
                                    stream: name.clone(),
                                    detail: format!("content type is {}, not {ct}", existing.content_type),
                                });
                            }
                        }
                        return Ok(existing);
                    }
                    hard_delete_stream(conn, &name)?;
                }
                insert_stream(
                    conn,
                    &name,
                    content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE),
                    profile.as_deref().unwrap_or(DEFAULT_PROFILE),
                )?;
                query_stream(conn, &name)?.ok_or_else(|| Error::Internal("stream row vanished".into()))
            },
            reply,
        );
    }

    /// The stream's row, or `None` when it does not exist or was deleted.
    pub fn get_stream(&self, name: String, reply: Reply<Option<StreamRow>>) {
        self.query(move |conn| Ok(query_stream(conn, &name)?.filter(|s| !s.is_deleted())), reply);
    }

    /// Every visible stream (not deleted, not a touch companion, not expired), ordered by name.
    pub fn list_streams(&self, reply: Reply<Vec<StreamRow>>) {
        self.query(
            |conn| {
                let sql = format!(
                    "SELECT {} FROM streams WHERE (stream_flags & ?1) = 0 AND (expires_at_ms IS NULL OR expires_at_ms > ?2) ORDER BY stream",
                    StreamRow::COLUMNS
                );
                let mut stmt = conn.prepare_cached(&sql)?;
                let rows = stmt
                    .query_map(params![STREAM_FLAG_DELETED | STREAM_FLAG_TOUCH, now_ms()], StreamRow::from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            },
            reply,
        );
    }

    /// Deletes the stream and everything stored for it (WAL rows, touch state, templates,
    /// profile, …) in one transaction. Returns whether it existed.
    pub fn delete_stream(&self, name: String, reply: Reply<bool>) {
        self.write(
            move |conn| {
                let existed = query_stream(conn, &name)?.is_some_and(|s| !s.is_deleted());
                hard_delete_stream(conn, &name)?;
                Ok(existed)
            },
            reply,
        );
    }

    /// Appends the request's payloads at the stream's next offsets (S8). The reply comes once
    /// the group commit holding this call is durable.
    pub fn append(&self, req: AppendRequest, reply: Reply<AppendOutcome>) {
        if let Err(e) = self.validate_append(&req) {
            StoreCounters::add(&self.inner.counters.append_errors, 1);
            return reply(Err(e));
        }
        let hooks: Vec<AppendHook> = self.inner.append_hooks.read().clone();
        let reply: Reply<AppendOutcome> = if hooks.is_empty() {
            reply
        } else {
            let stream = req.stream.clone();
            let bytes = req.payload_bytes();
            Box::new(move |r: Result<AppendOutcome>| {
                if let Ok(out) = &r {
                    for hook in &hooks {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&stream, out, bytes)));
                    }
                }
                reply(r)
            })
        };
        self.send(Command::Job(Box::new(AppendJob { req, reply: Some(reply), outcome: None })));
    }

    /// What [`Store::append`] checks on the stream name and the lengths alone (the row cap, one
    /// routing key per payload), for a caller that still holds the payloads and routing keys
    /// in another form (the binding: JS arrays), so that it reads none of them when the call
    /// is refused anyway. A refusal counts as a failed append.
    pub fn precheck_append(&self, stream: &str, rows: usize, routing_keys: Option<usize>) -> Result<()> {
        let checked = validate_stream_name(stream)
            .and_then(|()| self.check_append_rows(rows))
            .and_then(|()| routing_keys.map_or(Ok(()), |keys| check_routing_keys(keys, rows)));
        if checked.is_err() {
            StoreCounters::add(&self.inner.counters.append_errors, 1);
        }
        checked
    }

    /// S8's cap on the rows of one append call.
    fn check_append_rows(&self, rows: usize) -> Result<()> {
        let max = self.inner.options.max_append_rows;
        if rows > max {
            return Err(Error::PayloadTooLarge(format!(
                "append of {rows} rows exceeds the limit of {max} rows per call"
            )));
        }
        Ok(())
    }

    fn validate_append(&self, req: &AppendRequest) -> Result<()> {
        validate_stream_name(&req.stream)?;
        let o = &self.inner.options;
        if req.payloads.is_empty() {
            return Err(Error::invalid("append needs at least one payload"));
        }
        self.check_append_rows(req.payloads.len())?;
        if let Some((i, p)) = req.payloads.iter().enumerate().find(|(_, p)| p.len() as u64 > o.max_payload_bytes) {
            return Err(Error::PayloadTooLarge(format!(
                "payload {i} is {} bytes, over the limit of {} bytes",
                p.len(),
                o.max_payload_bytes
            )));
        }
        let total = req.payload_bytes();
        if total > o.max_append_bytes {
            return Err(Error::PayloadTooLarge(format!(
                "append of {total} bytes exceeds the limit of {} bytes per call",
                o.max_append_bytes
            )));
        }
        if let Some(keys) = &req.routing_keys {
            check_routing_keys(keys.len(), req.payloads.len())?;
        }
        if let Some(e) = req.expected_offset {
            if e < 0 {
                return Err(Error::invalid("expectedOffset must be >= 0"));
            }
        }
        Ok(())
    }

    /// Reads rows `from ..= to` in offset order (S10), stopping after `limit` rows or once
    /// `max_bytes` of payload would be exceeded (the first row is always returned).
    pub fn read(&self, req: ReadRequest, reply: Reply<Vec<WalRow>>) {
        if let Err(e) = validate_stream_name(&req.stream) {
            return reply(Err(e));
        }
        if req.from < 0 {
            return reply(Err(Error::invalid("read.from must be >= 0")));
        }
        let counters = self.inner.counters.clone();
        self.query(
            move |conn| {
                if !stream_is_live(conn, &req.stream)? {
                    return Err(Error::StreamNotFound { stream: req.stream.clone() });
                }
                let rows = read_wal(conn, &req)?;
                StoreCounters::add(&counters.read_calls, 1);
                StoreCounters::add(&counters.read_rows, rows.len() as u64);
                StoreCounters::add(&counters.read_bytes, rows.iter().map(|r| r.payload.len() as u64).sum());
                Ok(rows)
            },
            reply,
        );
    }

    /// Deletes every WAL row of the stream with `offset <= through` (S11). A negative
    /// `through` deletes nothing.
    pub fn delete_wal_through(&self, stream: String, through: i64, reply: Reply<WalGcOutcome>) {
        if let Err(e) = validate_stream_name(&stream) {
            return reply(Err(e));
        }
        let counters = self.inner.counters.clone();
        self.write(
            move |conn| {
                if !stream_is_live(conn, &stream)? {
                    return Err(Error::StreamNotFound { stream: stream.clone() });
                }
                let out = delete_wal_through(conn, &stream, through, None)?;
                StoreCounters::add(&counters.wal_gc_rows, out.deleted_rows as u64);
                StoreCounters::add(&counters.wal_gc_bytes, out.deleted_bytes as u64);
                Ok(out)
            },
            reply,
        );
    }

    /// Runs `f` in the writer's transaction (inside a savepoint) and replies with its value
    /// once committed. `f` may run twice if its group has to be retried.
    pub fn write<T, F>(&self, f: F, reply: Reply<T>)
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> Result<T> + Send + 'static,
    {
        let mut f = f;
        let guarded = move |conn: &Connection| catch_panic(|| f(conn));
        self.send(Command::Job(Box::new(FnJob { f: guarded, value: None, reply: Some(reply) })));
    }

    /// Runs `f` on a reader connection (or on the writer for in-memory stores) and replies
    /// with its value.
    pub fn query<T, F>(&self, f: F, reply: Reply<T>)
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let job: reader::ReadJob = Box::new(reader::FnRead { f, reply });
        if self.is_closed() {
            return job.fail(Error::Closed("Store"));
        }
        let readers = self.inner.readers.lock();
        match readers.as_ref() {
            Some(pool) => {
                if let Err(err) = pool.tx.send(job) {
                    err.into_inner().fail(Error::Closed("Store"));
                }
            }
            None => {
                drop(readers);
                self.send(Command::Read(job));
            }
        }
    }

    fn send(&self, cmd: Command) {
        if self.is_closed() {
            return cmd.fail(Error::Closed("Store"));
        }
        let tx = self.inner.writer_tx.lock();
        match tx.as_ref() {
            Some(tx) => {
                if let Err(err) = tx.send(cmd) {
                    err.into_inner().fail(Error::Closed("Store"));
                }
            }
            None => cmd.fail(Error::Closed("Store")),
        }
    }

    /// Stops accepting calls, waits for everything already queued, closes the connections and
    /// then replies. Calling it again replies at once.
    pub fn close(&self, reply: Reply<()>) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            // Already closing: wait for the writer thread in the background.
            let inner = self.inner.clone();
            std::thread::spawn(move || {
                if let Some(t) = inner.writer_thread.lock().take() {
                    let _ = t.join();
                }
                reply(Ok(()));
            });
            return;
        }
        let readers = self.inner.readers.lock().take();
        let inner = self.inner.clone();
        let on_close: Box<dyn FnOnce() + Send> = Box::new(move || {
            if let Some(pool) = readers {
                let ReaderPool { tx, threads } = pool;
                drop(tx);
                for t in threads {
                    let _ = t.join();
                }
            }
            drop(inner);
            reply(Ok(()));
        });
        let tx = self.inner.writer_tx.lock().take();
        match tx {
            Some(tx) => {
                if let Err(err) = tx.send(Command::Close(on_close)) {
                    err.into_inner().fail(Error::Closed("Store"));
                }
            }
            None => on_close(),
        }
    }

    /// Counters since open and the current file sizes.
    pub fn stats(&self) -> StoreStats {
        let size = |p: &str| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let (db, wal) = if self.inner.in_memory {
            (0, 0)
        } else {
            (size(&self.inner.path), size(&format!("{}-wal", self.inner.path)))
        };
        StoreStats {
            path: self.inner.path.clone(),
            closed: self.is_closed(),
            db_file_bytes: db,
            wal_file_bytes: wal,
            counters: self.inner.counters.snapshot(),
        }
    }
}

impl Drop for StoreInner {
    fn drop(&mut self) {
        // Last handle gone without close(): let the writer drain and exit on its own.
        self.writer_tx.get_mut().take();
        if let Some(pool) = self.readers.get_mut().take() {
            drop(pool.tx);
        }
    }
}

/// Runs an asynchronous store call and waits for its reply (for Rust callers and tests).
pub fn blocking<T: Send + 'static>(call: impl FnOnce(Reply<T>)) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    call(Box::new(move |r| {
        let _ = tx.send(r);
    }));
    rx.recv().unwrap_or_else(|_| Err(Error::Internal("store dropped a reply".into())))
}

/// One routing key (or null) per payload.
fn check_routing_keys(keys: usize, payloads: usize) -> Result<()> {
    if keys != payloads {
        return Err(Error::invalid(format!("routingKeys has {keys} entries but there are {payloads} payloads")));
    }
    Ok(())
}

/// Stream names: 1..=1024 bytes, no NUL.
pub fn validate_stream_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("stream name must be a non-empty string"));
    }
    if name.len() > MAX_STREAM_NAME_BYTES {
        return Err(Error::invalid(format!("stream name is longer than {MAX_STREAM_NAME_BYTES} bytes")));
    }
    if name.contains('\0') {
        return Err(Error::invalid("stream name must not contain NUL"));
    }
    Ok(())
}

/// The stream's row, deleted or not.
pub fn query_stream(conn: &Connection, name: &str) -> Result<Option<StreamRow>> {
    let sql = format!("SELECT {} FROM streams WHERE stream = ?1", StreamRow::COLUMNS);
    Ok(conn.prepare_cached(&sql)?.query_row([name], StreamRow::from_row).optional()?)
}

/// Whether the stream exists and is not marked deleted.
pub(crate) fn stream_is_live(conn: &Connection, name: &str) -> Result<bool> {
    let flags: Option<i64> = conn
        .prepare_cached("SELECT stream_flags FROM streams WHERE stream = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?;
    Ok(flags.is_some_and(|f| f & STREAM_FLAG_DELETED == 0))
}

/// Inserts a new stream row with the reference's initial values, plus its manifest and
/// segment-meta rows (S6).
fn insert_stream(conn: &Connection, name: &str, content_type: &str, profile: &str) -> Result<()> {
    let now = now_ms();
    conn.prepare_cached(
        "INSERT INTO streams(stream, created_at_ms, updated_at_ms, content_type, profile, stream_seq, closed, \
         closed_producer_id, closed_producer_epoch, closed_producer_seq, ttl_seconds, epoch, next_offset, \
         sealed_through, uploaded_through, uploaded_segment_count, pending_rows, pending_bytes, logical_size_bytes, \
         last_append_ms, last_segment_cut_ms, segment_in_progress, expires_at_ms, stream_flags) \
         VALUES (?1, ?2, ?2, ?3, ?4, NULL, 0, NULL, NULL, NULL, NULL, 0, 0, -1, -1, 0, 0, 0, 0, ?2, ?2, 0, NULL, 0)",
    )?
    .execute(params![name, now, content_type, profile])?;
    conn.prepare_cached(
        "INSERT INTO manifests(stream, generation, uploaded_generation, last_uploaded_at_ms, last_uploaded_etag, last_uploaded_size_bytes) \
         VALUES (?1, 0, 0, NULL, NULL, NULL) \
         ON CONFLICT(stream) DO UPDATE SET generation=excluded.generation, uploaded_generation=excluded.uploaded_generation, \
         last_uploaded_at_ms=NULL, last_uploaded_etag=NULL, last_uploaded_size_bytes=NULL",
    )?
    .execute([name])?;
    conn.prepare_cached(
        "INSERT INTO stream_segment_meta(stream, segment_count, segment_offsets, segment_blocks, segment_last_ts) \
         VALUES (?1, 0, x'', x'', x'') ON CONFLICT(stream) DO NOTHING",
    )?
    .execute([name])?;
    Ok(())
}

/// Removes every row stored for the stream, across the reference's tables.
fn hard_delete_stream(conn: &Connection, name: &str) -> Result<()> {
    const TABLES: &[&str] = &[
        "wal",
        "segments",
        "manifests",
        "schemas",
        "stream_profiles",
        "stream_touch_state",
        "live_templates",
        "producer_state",
        "index_state",
        "index_runs",
        "secondary_index_state",
        "secondary_index_runs",
        "lexicon_index_state",
        "lexicon_index_runs",
        "search_companion_plans",
        "search_segment_companions",
        "stream_segment_meta",
        "streams",
    ];
    for table in TABLES {
        conn.prepare_cached(&format!("DELETE FROM {table} WHERE stream = ?1"))?.execute([name])?;
    }
    Ok(())
}

fn read_wal(conn: &Connection, req: &ReadRequest) -> Result<Vec<WalRow>> {
    let to = req.to.unwrap_or(i64::MAX);
    if req.limit == 0 || to < req.from {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT offset, ts_ms, payload, routing_key, content_type FROM wal \
         WHERE stream = ?1 AND offset >= ?2 AND offset <= ?3 ORDER BY offset ASC LIMIT ?4",
    )?;
    let mut rows = stmt.query(params![req.stream, req.from, to, req.limit as i64])?;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    while let Some(r) = rows.next()? {
        let payload: Vec<u8> = r.get(2)?;
        if !out.is_empty() && bytes + payload.len() as u64 > req.max_bytes {
            break;
        }
        bytes += payload.len() as u64;
        out.push(WalRow {
            offset: r.get(0)?,
            ts_ms: r.get(1)?,
            payload,
            routing_key: r.get(3)?,
            content_type: r.get(4)?,
        });
    }
    Ok(out)
}

/// Deletes the lowest rows `<= through` (at most `max_rows` of them when given) and lowers
/// the stream's WAL counters (S11, S12). Counts are capped at 2^53−1.
pub fn delete_wal_through(
    conn: &Connection,
    stream: &str,
    through: i64,
    max_rows: Option<i64>,
) -> Result<WalGcOutcome> {
    if through < 0 {
        return Ok(WalGcOutcome::default());
    }
    let (rows, bytes): (i64, i64) = match max_rows {
        None => conn
            .prepare_cached(
                "SELECT COUNT(*), COALESCE(SUM(payload_len), 0) FROM wal WHERE stream = ?1 AND offset <= ?2",
            )?
            .query_row(params![stream, through], |r| Ok((r.get(0)?, r.get(1)?)))?,
        Some(max) => conn
            .prepare_cached(
                "SELECT COUNT(*), COALESCE(SUM(payload_len), 0) FROM \
                 (SELECT payload_len FROM wal WHERE stream = ?1 AND offset <= ?2 ORDER BY offset ASC LIMIT ?3)",
            )?
            .query_row(params![stream, through, max.max(1)], |r| Ok((r.get(0)?, r.get(1)?)))?,
    };
    if rows == 0 {
        return Ok(WalGcOutcome::default());
    }
    match max_rows {
        None => conn
            .prepare_cached("DELETE FROM wal WHERE stream = ?1 AND offset <= ?2")?
            .execute(params![stream, through])?,
        Some(max) => conn
            .prepare_cached(
                "DELETE FROM wal WHERE rowid IN (SELECT rowid FROM wal WHERE stream = ?1 AND offset <= ?2 ORDER BY offset ASC LIMIT ?3)",
            )?
            .execute(params![stream, through, max.max(1)])?,
    };
    conn.prepare_cached(
        "UPDATE streams SET wal_bytes = CASE WHEN wal_bytes >= ?1 THEN wal_bytes - ?1 ELSE 0 END, \
         wal_rows = CASE WHEN wal_rows >= ?2 THEN wal_rows - ?2 ELSE 0 END, updated_at_ms = ?3 WHERE stream = ?4",
    )?
    .execute(params![bytes, rows, now_ms(), stream])?;
    const MAX_SAFE: i64 = (1i64 << 53) - 1;
    Ok(WalGcOutcome { deleted_rows: rows.min(MAX_SAFE), deleted_bytes: bytes.min(MAX_SAFE) })
}

#[cfg(test)]
mod tests;
