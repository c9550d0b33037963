//! `Store`: the JS class over [`crate::store::Store`]. Conversion only.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::napi::value::to_js;
use super::napi::{throw, unknown, Js, Out, Port, RawValue, Ticket};
use crate::error::Error;
use crate::store::{
    AppendOutcome, AppendRequest, ReadRequest, Store as CoreStore, StoreOptions, StreamRow, WalGcOutcome, WalRow,
};

/// Options of `Store.open`.
#[napi(object, object_to_js = false)]
pub struct StoreOpenOptions {
    /// SQLite page cache per connection, in bytes.
    pub cache_bytes: Option<f64>,
    /// Reader connections (default 2; 0 serves reads on the writer thread).
    pub readers: Option<u32>,
    /// Largest accepted payload in bytes (default 8 MiB).
    pub max_payload_bytes: Option<f64>,
    /// Largest accepted append call in bytes (default 64 MiB).
    pub max_append_bytes: Option<f64>,
    /// Most rows in one append call (default 100,000).
    pub max_append_rows: Option<u32>,
    /// A host program's connection to the same file, from `durable-touch/compat/sqlite-adapter`
    /// (`hostConnectionOf(db)`): the store commits on it, between the host's transactions, and
    /// reads on connections of its own (see `Store::open_on_host`).
    #[napi(ts_type = "unknown")]
    pub host_connection: Option<Unknown<'static>>,
}

/// `Store.limits`: what one append may hold (`ERR_PAYLOAD_TOO_LARGE` beyond).
#[napi(object, object_from_js = false)]
pub struct StoreLimits {
    pub max_payload_bytes: f64,
    pub max_append_bytes: f64,
    pub max_append_rows: u32,
}

/// A stream as stored in the `streams` table.
#[napi(object, object_from_js = false)]
pub struct StreamInfo {
    pub name: String,
    pub content_type: String,
    pub profile: Option<String>,
    pub created_at_ms: f64,
    pub updated_at_ms: f64,
    pub epoch: f64,
    /// The next offset to be assigned; the tail is `nextOffset - 1n`.
    pub next_offset: i64n,
    pub sealed_through: i64n,
    pub uploaded_through: i64n,
    pub wal_rows: f64,
    pub wal_bytes: f64,
    pub pending_rows: f64,
    pub pending_bytes: f64,
    pub logical_size_bytes: f64,
    pub last_append_ms: f64,
    pub expires_at_ms: Option<f64>,
    pub flags: u32,
}

/// Result of `append`.
#[napi(object, object_from_js = false)]
pub struct AppendResult {
    pub first_offset: i64n,
    pub last_offset: i64n,
    pub next_offset: i64n,
}

/// Options of `append`.
#[napi(object, object_to_js = false)]
pub struct AppendOptions {
    /// Reject with `ERR_SEQ_MISMATCH` unless the stream's next offset is this.
    pub expected_offset: Option<BigInt>,
    /// One routing key (or null) per payload.
    #[napi(ts_type = "Array<Buffer | Uint8Array | null>")]
    pub routing_keys: Option<Vec<Buffer>>,
    /// Content type stored on each row (default: the stream's).
    pub content_type: Option<String>,
    /// `ts_ms` of the rows (default: now, strictly increasing per stream).
    pub append_ms: Option<f64>,
}

/// Options of `read`.
#[napi(object, object_to_js = false)]
pub struct ReadOptions {
    pub from: BigInt,
    /// Inclusive; default: the tail.
    pub to: Option<BigInt>,
    /// Most rows returned (default 10,000).
    pub limit: Option<u32>,
    /// Stop before exceeding this many payload bytes; the first row is always returned (default 64 MiB).
    pub max_bytes: Option<f64>,
}

/// A WAL row.
#[napi(object, object_from_js = false, js_name = "WalRow")]
pub struct WalRowJs {
    pub offset: i64n,
    pub ts_ms: f64,
    pub payload: Buffer,
    #[napi(ts_type = "Buffer | null")]
    pub routing_key: Option<Buffer>,
    #[napi(ts_type = "string | null")]
    pub content_type: Option<String>,
}

/// Result of `deleteWalThrough`.
#[napi(object, object_from_js = false)]
pub struct WalGcResult {
    pub deleted_rows: f64,
    pub deleted_bytes: f64,
}

/// `Store.stats()`: counters since open and file sizes.
#[napi(object, object_from_js = false)]
pub struct StoreStats {
    pub path: String,
    pub closed: bool,
    pub db_file_bytes: f64,
    pub wal_file_bytes: f64,
    pub append_calls: f64,
    pub append_rows: f64,
    pub append_bytes: f64,
    pub append_errors: f64,
    /// Transactions committed by the writer (one fsync each).
    pub group_commits: f64,
    /// Most calls merged into one commit.
    pub max_group_calls: f64,
    /// Groups retried call by call after a storage error.
    pub group_fallbacks: f64,
    pub write_jobs: f64,
    pub read_calls: f64,
    pub read_rows: f64,
    pub read_bytes: f64,
    pub wal_gc_rows: f64,
    pub wal_gc_bytes: f64,
}

/// The durable SQLite log.
#[napi]
pub struct Store {
    pub(crate) store: CoreStore,
    port: Port,
}

fn stream_info(r: StreamRow) -> StreamInfo {
    StreamInfo {
        name: r.stream,
        content_type: r.content_type,
        profile: r.profile,
        created_at_ms: r.created_at_ms as f64,
        updated_at_ms: r.updated_at_ms as f64,
        epoch: r.epoch as f64,
        next_offset: i64n(r.next_offset),
        sealed_through: i64n(r.sealed_through),
        uploaded_through: i64n(r.uploaded_through),
        wal_rows: r.wal_rows as f64,
        wal_bytes: r.wal_bytes as f64,
        pending_rows: r.pending_rows as f64,
        pending_bytes: r.pending_bytes as f64,
        logical_size_bytes: r.logical_size_bytes as f64,
        last_append_ms: r.last_append_ms as f64,
        expires_at_ms: r.expires_at_ms.map(|v| v as f64),
        flags: r.stream_flags as u32,
    }
}

fn wal_rows_js(env: &Env, rows: Vec<WalRow>) -> napi::Result<RawValue> {
    let out = Out::new(env);
    let mut items = Vec::with_capacity(rows.len());
    for r in rows {
        let o = out.object()?;
        out.set(o, "offset", out.bigint(r.offset)?)?;
        out.set(o, "tsMs", out.num(r.ts_ms as f64)?)?;
        out.set(o, "payload", out.buffer(&r.payload)?)?;
        let rk = match &r.routing_key {
            Some(k) => out.buffer(k)?,
            None => out.null()?,
        };
        out.set(o, "routingKey", rk)?;
        out.set(o, "contentType", out.opt_str(r.content_type.as_deref())?)?;
        items.push(o);
    }
    out.array(items)
}

/// A positive finite number option, as u64.
fn opt_u64(obj: &Js, key: &str, what: &str) -> crate::Result<Option<u64>> {
    match obj.opt(key)? {
        None => Ok(None),
        Some(v) => {
            let n = v.number(what)?;
            if !n.is_finite() || n < 0.0 || n.fract() != 0.0 || n > 9_007_199_254_740_991.0 {
                return Err(Error::invalid(format!("{what} must be a non-negative integer")));
            }
            Ok(Some(n as u64))
        }
    }
}

fn parse_open_options(options: Option<Js>) -> crate::Result<StoreOptions> {
    let mut o = StoreOptions::default();
    let Some(opts) = options.filter(|v| !v.is_nullish()) else { return Ok(o) };
    let opts = opts.object("options")?;
    o.cache_bytes = opt_u64(&opts, "cacheBytes", "options.cacheBytes")?;
    if let Some(n) = opt_u64(&opts, "readers", "options.readers")? {
        if n > 64 {
            return Err(Error::invalid("options.readers must be at most 64"));
        }
        o.readers = n as usize;
    }
    if let Some(n) = opt_u64(&opts, "maxPayloadBytes", "options.maxPayloadBytes")? {
        o.max_payload_bytes = n.max(1);
    }
    if let Some(n) = opt_u64(&opts, "maxAppendBytes", "options.maxAppendBytes")? {
        o.max_append_bytes = n.max(1);
    }
    if let Some(n) = opt_u64(&opts, "maxAppendRows", "options.maxAppendRows")? {
        o.max_append_rows = n.clamp(1, 10_000_000) as usize;
    }
    Ok(o)
}

/// The append request. The row cap and the routing keys' count are checked on the arrays'
/// lengths before any element is read, so a huge or sparse array is refused at once.
fn parse_append(store: &CoreStore, stream: Js, payloads: Js, options: Option<Js>) -> crate::Result<AppendRequest> {
    let stream = stream.string("stream")?;
    let n = payloads.array_len("payloads")?;
    let opts = match options.filter(|v| !v.is_nullish()) {
        Some(o) => Some(o.object("options")?),
        None => None,
    };
    let routing_keys = match &opts {
        Some(o) => o.opt("routingKeys")?,
        None => None,
    };
    let routing_len = routing_keys.as_ref().map(|v| v.array_len("options.routingKeys")).transpose()?;
    store.precheck_append(&stream, n as usize, routing_len.map(|k| k as usize))?;
    let mut req = AppendRequest { stream, payloads: Vec::with_capacity(n as usize), ..Default::default() };
    for i in 0..n {
        req.payloads.push(payloads.element(i)?.bytes_of(|| format!("payloads[{i}]"))?);
    }
    if let Some(v) = routing_keys {
        // Its length was checked above (`precheck_append`).
        let mut out = Vec::with_capacity(routing_len.unwrap_or(0) as usize);
        for (i, k) in v.items("options.routingKeys")?.enumerate() {
            let k = k?;
            out.push(if k.is_nullish() { None } else { Some(k.bytes_of(|| format!("options.routingKeys[{i}]"))?) });
        }
        req.routing_keys = Some(out);
    }
    if let Some(opts) = opts {
        if let Some(v) = opts.opt("expectedOffset")? {
            req.expected_offset = Some(v.bigint("options.expectedOffset")?);
        }
        if let Some(v) = opts.opt("contentType")? {
            req.content_type = Some(v.string("options.contentType")?);
        }
        if let Some(v) = opts.opt("appendMs")? {
            req.append_ms = Some(v.safe_integer("options.appendMs")?);
        }
    }
    Ok(req)
}

fn parse_read(stream: Js, options: Js) -> crate::Result<ReadRequest> {
    let stream = stream.string("stream")?;
    let opts = options.object("options")?;
    let from = opts.get("from")?.ok_or_else(|| Error::invalid("options.from is required"))?.bigint("options.from")?;
    let to = match opts.opt("to")? {
        Some(v) => Some(v.bigint("options.to")?),
        None => None,
    };
    let limit = match opts.opt("limit")? {
        Some(v) => {
            let n = v.safe_integer("options.limit")?;
            if !(0..=1_000_000).contains(&n) {
                return Err(Error::invalid("options.limit must be in [0, 1000000]"));
            }
            n as usize
        }
        None => 10_000,
    };
    let max_bytes = opt_u64(&opts, "maxBytes", "options.maxBytes")?.unwrap_or(64 * 1024 * 1024);
    Ok(ReadRequest { stream, from, to, limit, max_bytes })
}

fn arg<'env>(env: &'env Env, v: &Option<Unknown>) -> Option<Js<'env>> {
    v.as_ref().map(|u| Js::new(env, u.raw()))
}

impl Store {
    /// Returns a promise settled by `start`'s reply, or one already rejected when the
    /// arguments did not parse (no work is started then).
    fn promise<'env, T>(
        &self,
        env: &'env Env,
        parsed: crate::Result<T>,
        start: impl FnOnce(T, Ticket),
    ) -> napi::Result<Unknown<'env>> {
        let value = match parsed {
            Ok(v) => v,
            Err(e) => return Ok(unknown(env, Port::rejected(env, &e)?)),
        };
        let (ticket, promise) = self.port.promise(env)?;
        start(value, ticket);
        Ok(unknown(env, promise))
    }
}

#[napi]
impl Store {
    /// Opens (or creates) the SQLite file at `path` with the reference's pragmas and schema.
    /// `":memory:"` opens a private in-memory store.
    #[napi(factory, ts_args_type = "path: string, options?: StoreOpenOptions | undefined | null")]
    pub fn open(env: &Env, path: Unknown, options: Option<Unknown>) -> napi::Result<Store> {
        let parsed = (|| {
            let path = Js::new(env, path.raw()).string("path")?;
            let given = arg(env, &options).filter(|v| !v.is_nullish());
            let opts = parse_open_options(given)?;
            let host = match given.map(|o| o.object("options")).transpose()? {
                Some(o) => o.opt("hostConnection")?,
                None => None,
            };
            match host {
                Some(h) => CoreStore::open_on_host(&path, opts, super::hostdb::connection_of(h)?),
                None => CoreStore::open(&path, opts),
            }
        })();
        let store = parsed.map_err(|e| throw(env, e))?;
        Ok(Store { store, port: Port::new(env)? })
    }

    /// Creates the stream if missing (idempotent, S6).
    #[napi(
        ts_args_type = "name: string, options?: { contentType?: string; profile?: string } | undefined | null",
        ts_return_type = "Promise<StreamInfo>"
    )]
    pub fn create_stream<'env>(
        &self,
        env: &'env Env,
        name: Unknown,
        options: Option<Unknown>,
    ) -> napi::Result<Unknown<'env>> {
        let parsed = (|| {
            let name = Js::new(env, name.raw()).string("name")?;
            let (mut content_type, mut profile) = (None, None);
            if let Some(o) = arg(env, &options).filter(|v| !v.is_nullish()) {
                let o = o.object("options")?;
                if let Some(v) = o.opt("contentType")? {
                    content_type = Some(v.string("options.contentType")?);
                }
                if let Some(v) = o.opt("profile")? {
                    profile = Some(v.string("options.profile")?);
                }
            }
            Ok((name, content_type, profile))
        })();
        self.promise(env, parsed, |(name, content_type, profile), ticket| {
            self.store.create_stream(
                name,
                content_type,
                profile,
                Box::new(move |r| ticket.settle_with(r, |env, row| to_js(env, stream_info(row)))),
            );
        })
    }

    /// The stream, or null when it does not exist.
    #[napi(ts_args_type = "name: string", ts_return_type = "Promise<StreamInfo | null>")]
    pub fn get_stream<'env>(&self, env: &'env Env, name: Unknown) -> napi::Result<Unknown<'env>> {
        self.promise(env, Js::new(env, name.raw()).string("name"), |name, ticket| {
            self.store.get_stream(
                name,
                Box::new(move |r| ticket.settle_with(r, |env, row| to_js(env, row.map(stream_info)))),
            );
        })
    }

    /// Every stream, ordered by name.
    #[napi(ts_return_type = "Promise<StreamInfo[]>")]
    pub fn list_streams<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        self.promise(env, Ok(()), |(), ticket| {
            self.store.list_streams(Box::new(move |r| {
                ticket.settle_with(r, |env, rows| to_js(env, rows.into_iter().map(stream_info).collect::<Vec<_>>()))
            }));
        })
    }

    /// Deletes the stream and all its rows. Resolves whether it existed.
    #[napi(ts_args_type = "name: string", ts_return_type = "Promise<boolean>")]
    pub fn delete_stream<'env>(&self, env: &'env Env, name: Unknown) -> napi::Result<Unknown<'env>> {
        self.promise(env, Js::new(env, name.raw()).string("name"), |name, ticket| {
            self.store.delete_stream(name, Box::new(move |r| ticket.settle_with(r, to_js)));
        })
    }

    /// Appends payloads at contiguous offsets; resolves once durable (group commit).
    #[napi(
        ts_args_type = "stream: string, payloads: Array<Buffer | Uint8Array | string>, options?: AppendOptions | undefined | null",
        ts_return_type = "Promise<AppendResult>"
    )]
    pub fn append<'env>(
        &self,
        env: &'env Env,
        stream: Unknown,
        payloads: Unknown,
        options: Option<Unknown>,
    ) -> napi::Result<Unknown<'env>> {
        let req =
            parse_append(&self.store, Js::new(env, stream.raw()), Js::new(env, payloads.raw()), arg(env, &options));
        self.promise(env, req, |req, ticket| {
            self.store.append(
                req,
                Box::new(move |r| ticket.settle_with(r, |env, o: AppendOutcome| to_js(env, append_result(o)))),
            );
        })
    }

    /// Reads rows `from..=to` in offset order.
    #[napi(ts_args_type = "stream: string, options: ReadOptions", ts_return_type = "Promise<WalRow[]>")]
    pub fn read<'env>(&self, env: &'env Env, stream: Unknown, options: Unknown) -> napi::Result<Unknown<'env>> {
        let req = parse_read(Js::new(env, stream.raw()), Js::new(env, options.raw()));
        self.promise(env, req, |req, ticket| {
            self.store.read(req, Box::new(move |r| ticket.settle_with(r, wal_rows_js)));
        })
    }

    /// Deletes WAL rows with `offset <= through` (S11).
    #[napi(ts_args_type = "stream: string, through: bigint", ts_return_type = "Promise<WalGcResult>")]
    pub fn delete_wal_through<'env>(
        &self,
        env: &'env Env,
        stream: Unknown,
        through: Unknown,
    ) -> napi::Result<Unknown<'env>> {
        let parsed = Js::new(env, stream.raw())
            .string("stream")
            .and_then(|s| Ok((s, Js::new(env, through.raw()).bigint("through")?)));
        self.promise(env, parsed, |(stream, through), ticket| {
            self.store.delete_wal_through(
                stream,
                through,
                Box::new(move |r| {
                    ticket.settle_with(r, |env, o: WalGcOutcome| {
                        to_js(
                            env,
                            WalGcResult { deleted_rows: o.deleted_rows as f64, deleted_bytes: o.deleted_bytes as f64 },
                        )
                    })
                }),
            );
        })
    }

    /// Counters since open and current file sizes.
    #[napi]
    pub fn stats(&self) -> StoreStats {
        let s = self.store.stats();
        let c = s.counters;
        StoreStats {
            path: s.path,
            closed: s.closed,
            db_file_bytes: s.db_file_bytes as f64,
            wal_file_bytes: s.wal_file_bytes as f64,
            append_calls: c.append_calls as f64,
            append_rows: c.append_rows as f64,
            append_bytes: c.append_bytes as f64,
            append_errors: c.append_errors as f64,
            group_commits: c.group_commits as f64,
            max_group_calls: c.group_calls_max as f64,
            group_fallbacks: c.group_fallbacks as f64,
            write_jobs: c.write_jobs as f64,
            read_calls: c.read_calls as f64,
            read_rows: c.read_rows as f64,
            read_bytes: c.read_bytes as f64,
            wal_gc_rows: c.wal_gc_rows as f64,
            wal_gc_bytes: c.wal_gc_bytes as f64,
        }
    }

    /// Waits for queued work, closes the file; later calls reject with `ERR_CLOSED`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        self.promise(env, Ok(()), |(), ticket| {
            self.store.close(Box::new(move |r| ticket.settle_with(r, |env, ()| Out::new(env).undefined())));
        })
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// The size limits of one append, as opened.
    #[napi(getter)]
    pub fn limits(&self) -> StoreLimits {
        let o = self.store.options();
        StoreLimits {
            max_payload_bytes: o.max_payload_bytes as f64,
            max_append_bytes: o.max_append_bytes as f64,
            max_append_rows: o.max_append_rows as u32,
        }
    }
}

fn append_result(o: AppendOutcome) -> AppendResult {
    AppendResult {
        first_offset: i64n(o.first_offset),
        last_offset: i64n(o.last_offset),
        next_offset: i64n(o.next_offset),
    }
}

// Silence "never constructed" for the typing-only option structs.
#[allow(dead_code)]
fn _typing_only(_: StoreOpenOptions, _: AppendOptions, _: ReadOptions, _: WalRowJs) {}
