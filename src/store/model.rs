//! Plain data carried in and out of the store: stream rows, WAL rows, append requests and
//! results, store options and counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bit 0 of `streams.stream_flags`: the stream was deleted (S2).
pub const STREAM_FLAG_DELETED: i64 = 1;
/// Bit 1 of `streams.stream_flags`: an internal touch companion stream (S2).
pub const STREAM_FLAG_TOUCH: i64 = 2;

/// The content type a stream gets when none is given (S6).
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
/// The profile a stream gets when none is given (S6).
pub const DEFAULT_PROFILE: &str = "generic";

/// One row of the `streams` table (the columns durable-touch exposes).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRow {
    pub stream: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub content_type: String,
    pub profile: Option<String>,
    pub epoch: i64,
    pub next_offset: i64,
    pub sealed_through: i64,
    pub uploaded_through: i64,
    pub pending_rows: i64,
    pub pending_bytes: i64,
    pub logical_size_bytes: i64,
    pub wal_rows: i64,
    pub wal_bytes: i64,
    pub last_append_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub stream_flags: i64,
}

impl StreamRow {
    /// Columns in the order [`StreamRow::from_row`] reads them.
    pub const COLUMNS: &'static str = "stream, created_at_ms, updated_at_ms, content_type, profile, epoch, \
        next_offset, sealed_through, uploaded_through, pending_rows, pending_bytes, logical_size_bytes, \
        wal_rows, wal_bytes, last_append_ms, expires_at_ms, stream_flags";

    pub fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(StreamRow {
            stream: r.get(0)?,
            created_at_ms: r.get(1)?,
            updated_at_ms: r.get(2)?,
            content_type: r.get(3)?,
            profile: r.get(4)?,
            epoch: r.get(5)?,
            next_offset: r.get(6)?,
            sealed_through: r.get(7)?,
            uploaded_through: r.get(8)?,
            pending_rows: r.get(9)?,
            pending_bytes: r.get(10)?,
            logical_size_bytes: r.get(11)?,
            wal_rows: r.get(12)?,
            wal_bytes: r.get(13)?,
            last_append_ms: r.get(14)?,
            expires_at_ms: r.get(15)?,
            stream_flags: r.get(16)?,
        })
    }

    pub fn is_deleted(&self) -> bool {
        self.stream_flags & STREAM_FLAG_DELETED != 0
    }
}

/// One row of the `wal` table, as read back (S10).
#[derive(Debug, Clone, PartialEq)]
pub struct WalRow {
    pub offset: i64,
    pub ts_ms: i64,
    pub payload: Vec<u8>,
    pub routing_key: Option<Vec<u8>>,
    pub content_type: Option<String>,
}

/// A request to append rows to one stream.
#[derive(Debug, Clone, Default)]
pub struct AppendRequest {
    pub stream: String,
    pub payloads: Vec<Vec<u8>>,
    /// One routing key (or none) per payload; `None` means no routing keys at all.
    pub routing_keys: Option<Vec<Option<Vec<u8>>>>,
    /// Content type stored on each row; defaults to the stream's content type.
    pub content_type: Option<String>,
    /// Reject with [`crate::Error::SeqMismatch`] unless the stream's next offset equals this.
    pub expected_offset: Option<i64>,
    /// `ts_ms` of every row. When absent the writer uses the wall clock, kept strictly
    /// increasing per stream as the reference's ingest path does (S9).
    pub append_ms: Option<i64>,
}

impl AppendRequest {
    pub fn payload_bytes(&self) -> u64 {
        self.payloads.iter().map(|p| p.len() as u64).sum()
    }
}

/// The offsets an acknowledged append occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    pub first_offset: i64,
    pub last_offset: i64,
    pub next_offset: i64,
}

/// What [`crate::store::Store::delete_wal_through`] removed (S11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalGcOutcome {
    pub deleted_rows: i64,
    pub deleted_bytes: i64,
}

/// A range read request (S10).
#[derive(Debug, Clone)]
pub struct ReadRequest {
    pub stream: String,
    pub from: i64,
    /// Inclusive upper bound; `None` reads to the tail.
    pub to: Option<i64>,
    pub limit: usize,
    pub max_bytes: u64,
}

/// Options for [`crate::store::Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// SQLite page cache per connection, in bytes (S1 `cache_size`). `None` leaves SQLite's default.
    pub cache_bytes: Option<u64>,
    /// Reader connections serving `read`/`getStream`/`listStreams` off the JS thread.
    pub readers: usize,
    /// Largest accepted payload, in bytes.
    pub max_payload_bytes: u64,
    /// Largest accepted append call (sum of its payloads), in bytes.
    pub max_append_bytes: u64,
    /// Most rows accepted in one append call.
    pub max_append_rows: usize,
    /// Upper bound of calls merged into one group commit.
    pub max_group_calls: usize,
    /// Upper bound of payload bytes merged into one group commit.
    pub max_group_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_bytes: None,
            readers: 2,
            max_payload_bytes: 8 * 1024 * 1024,
            max_append_bytes: 64 * 1024 * 1024,
            max_append_rows: 100_000,
            max_group_calls: 4096,
            max_group_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Counters since the store was opened (all monotonic).
#[derive(Debug, Default)]
pub struct StoreCounters {
    pub append_calls: AtomicU64,
    pub append_rows: AtomicU64,
    pub append_bytes: AtomicU64,
    pub append_errors: AtomicU64,
    pub group_commits: AtomicU64,
    pub group_calls_max: AtomicU64,
    pub group_fallbacks: AtomicU64,
    pub write_jobs: AtomicU64,
    pub read_calls: AtomicU64,
    pub read_rows: AtomicU64,
    pub read_bytes: AtomicU64,
    pub wal_gc_rows: AtomicU64,
    pub wal_gc_bytes: AtomicU64,
}

impl StoreCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StoreCountersSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StoreCountersSnapshot {
            append_calls: g(&self.append_calls),
            append_rows: g(&self.append_rows),
            append_bytes: g(&self.append_bytes),
            append_errors: g(&self.append_errors),
            group_commits: g(&self.group_commits),
            group_calls_max: g(&self.group_calls_max),
            group_fallbacks: g(&self.group_fallbacks),
            write_jobs: g(&self.write_jobs),
            read_calls: g(&self.read_calls),
            read_rows: g(&self.read_rows),
            read_bytes: g(&self.read_bytes),
            wal_gc_rows: g(&self.wal_gc_rows),
            wal_gc_bytes: g(&self.wal_gc_bytes),
        }
    }
}

/// A copy of [`StoreCounters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCountersSnapshot {
    pub append_calls: u64,
    pub append_rows: u64,
    pub append_bytes: u64,
    pub append_errors: u64,
    pub group_commits: u64,
    pub group_calls_max: u64,
    pub group_fallbacks: u64,
    pub write_jobs: u64,
    pub read_calls: u64,
    pub read_rows: u64,
    pub read_bytes: u64,
    pub wal_gc_rows: u64,
    pub wal_gc_bytes: u64,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The reference's protocol offset (`encodeOffset`): epoch (u32), `seq + 1` (u64) and an
/// in-block index (0) as 16 big-endian bytes, in fixed 26-character Crockford base32.
pub fn encode_offset(epoch: u32, seq: i64) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let raw = (seq as i128 + 1) as u128 & u64::MAX as u128;
    let n: u128 = ((epoch as u128) << 96) | (raw << 32);
    // 128 bits padded with two zero bits on the left: 26 groups of 5 bits.
    let mut out = String::with_capacity(26);
    for i in 0..26u32 {
        let shift = 5 * (25 - i) as i32 - 2;
        let idx = if shift >= 0 { (n >> shift) & 31 } else { (n << (-shift)) & 31 };
        out.push(ALPHABET[idx as usize] as char);
    }
    out
}

#[cfg(test)]
mod offset_tests {
    use super::encode_offset;

    #[test]
    fn encodes_like_the_reference() {
        // Computed with the reference's encodeOffset under Bun.
        assert_eq!(encode_offset(0, -1), "00000000000000000000000000");
        assert_eq!(encode_offset(0, 0), "0000000000000000000G000000");
        assert_eq!(encode_offset(1, 41), "000000800000000000N0000000");
        assert_eq!(encode_offset(7, 123456789012), "000001R00001SFMS38AG000000");
    }
}
