//! The SQLite ceiling for B1: the fastest a single connection can insert WAL rows with the
//! reference's schema and pragmas (S1–S5), with no JS and no threads — one transaction per
//! batch, rows inserted three ways, alternating within each run so drift hits them alike:
//!
//! - `Naive`: one `INSERT INTO wal` per row (the store's way until multi-row inserts);
//! - `MultiRow(64)`: `INSERT … VALUES (…), (…), …` of up to 64 rows per statement — the
//!   ceiling the store is judged against;
//! - `StoreLike`: what the store's writer does in SQL, minus its thread: `BEGIN IMMEDIATE`,
//!   the stream row read, the multi-row inserts, the stream row's counters updated.
//!
//! ```text
//! cargo run --release --example append_ceiling -- [--rows 200000] [--payload 361] [--runs 3]
//!     [--insert naive|storelike|multirow(64)] [--full-only]
//! ```
//!
//! Prints rows/s per batch size with `synchronous=FULL` (what every acknowledged append pays)
//! and, for comparison, `synchronous=OFF` (no fsync at all). The payload size defaults to the
//! B1 workload's average (361 bytes).
use std::time::Instant;

use durable_touch::store::schema;
use rusqlite::{params, Connection};

fn arg(args: &[String], name: &str, def: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(def)
}

/// How rows go into SQLite.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Insert {
    /// One `INSERT` per row, every parameter bound per row (`Statement::execute`).
    Naive,
    /// `INSERT … VALUES (…), (…), …` of up to this many rows per statement, raw binds.
    MultiRow(usize),
    /// What `Store::append` does: `BEGIN IMMEDIATE`, the stream row read, `MultiRow(64)`
    /// inserts, the stream row's counters updated.
    StoreLike,
}

const INSERT_ONE: &str =
    "INSERT INTO wal(stream, offset, ts_ms, payload, payload_len, routing_key, content_type, flags) \
                          VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, 0)";

/// `INSERT` of `n` rows: `(?1, ?k, ?2, ?k+1, ?k+2, NULL, ?3, 0)` per row (stream, ts and content
/// type shared).
fn insert_many(n: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO wal(stream, offset, ts_ms, payload, payload_len, routing_key, content_type, flags) VALUES ",
    );
    for r in 0..n {
        let k = 4 + 3 * r;
        if r > 0 {
            sql.push(',');
        }
        sql.push_str(&format!("(?1, ?{k}, ?2, ?{}, ?{}, NULL, ?3, 0)", k + 1, k + 2));
    }
    sql
}

/// Inserts rows `off..end` in statements of up to `k` rows.
fn insert_multi(tx: &Connection, bodies: &[Vec<u8>], off: usize, end: usize, k: usize, ts: i64, payload: usize) {
    let mut o = off;
    while o < end {
        let n = (end - o).min(k);
        let mut insert = tx.prepare_cached(&insert_many(n)).unwrap();
        insert.raw_bind_parameter(1, "bench").unwrap();
        insert.raw_bind_parameter(2, ts + off as i64).unwrap();
        insert.raw_bind_parameter(3, "application/json").unwrap();
        for r in 0..n {
            let at = 4 + 3 * r;
            insert.raw_bind_parameter(at, (o + r) as i64).unwrap();
            insert.raw_bind_parameter(at + 1, &bodies[o + r]).unwrap();
            insert.raw_bind_parameter(at + 2, payload as i64).unwrap();
        }
        insert.raw_execute().unwrap();
        o += n;
    }
}

fn run(rows: usize, payload: usize, batch: usize, sync_full: bool, how: Insert) -> f64 {
    let dir = std::env::temp_dir().join(format!("dt-ceiling-{}-{batch}-{sync_full}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut conn = Connection::open(dir.join("wal.sqlite")).unwrap();
    schema::apply_pragmas(&conn, None).unwrap();
    schema::init(&mut conn).unwrap();
    conn.execute(
        "INSERT INTO streams(stream, created_at_ms, updated_at_ms, content_type, profile, stream_seq, closed, \
         epoch, next_offset, sealed_through, uploaded_through, uploaded_segment_count, pending_rows, pending_bytes, \
         last_append_ms, last_segment_cut_ms, segment_in_progress, stream_flags) \
         VALUES ('bench', 0, 0, 'application/json', 'generic', NULL, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0)",
        [],
    )
    .unwrap();
    if !sync_full {
        conn.execute_batch("PRAGMA synchronous = OFF;").unwrap();
    }
    // Payloads differ per row (as workload records do) so SQLite cannot share pages.
    let body: Vec<u8> = (0..payload).map(|i| b'a' + (i % 26) as u8).collect();
    let bodies: Vec<Vec<u8>> = (0..rows)
        .map(|o| {
            let mut p = body.clone();
            p[..8].copy_from_slice(&(o as u64).to_le_bytes());
            p
        })
        .collect();
    let ts = 1_704_067_200_000i64;
    let t0 = Instant::now();
    let mut off = 0usize;
    while off < rows {
        let end = (off + batch).min(rows);
        let tx = if how == Insert::StoreLike {
            conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap()
        } else {
            conn.transaction().unwrap()
        };
        match how {
            Insert::StoreLike => {
                let _: i64 = tx
                    .prepare_cached("SELECT next_offset FROM streams WHERE stream = ?1")
                    .unwrap()
                    .query_row(["bench"], |r| r.get(0))
                    .unwrap_or(0);
                insert_multi(&tx, &bodies, off, end, 64, ts, payload);
                tx.prepare_cached(
                    "UPDATE streams SET next_offset = ?1, updated_at_ms = ?2, last_append_ms = ?3, \
                     pending_rows = pending_rows + ?4, pending_bytes = pending_bytes + ?5, \
                     logical_size_bytes = logical_size_bytes + ?5, wal_rows = wal_rows + ?4, \
                     wal_bytes = wal_bytes + ?5 WHERE stream = ?6",
                )
                .unwrap()
                .execute(params![end as i64, ts, ts, (end - off) as i64, 1000i64, "bench"])
                .unwrap();
            }
            Insert::Naive => {
                let mut insert = tx.prepare_cached(INSERT_ONE).unwrap();
                for (o, body) in bodies.iter().enumerate().take(end).skip(off) {
                    let row = params!["bench", o as i64, ts + o as i64, body, payload as i64, "application/json"];
                    insert.execute(row).unwrap();
                }
            }
            Insert::MultiRow(k) => insert_multi(&tx, &bodies, off, end, k, ts, payload),
        }
        tx.commit().unwrap();
        off = end;
    }
    let secs = t0.elapsed().as_secs_f64();
    drop(conn);
    let _ = std::fs::remove_dir_all(&dir);
    rows as f64 / secs
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = arg(&args, "--rows", 200_000);
    let payload = arg(&args, "--payload", 361).max(8);
    let runs = arg(&args, "--runs", 3).max(1);
    let all = [Insert::Naive, Insert::StoreLike, Insert::MultiRow(64)];
    let only = args.iter().position(|a| a == "--insert").and_then(|i| args.get(i + 1)).cloned();
    let ways: Vec<Insert> =
        all.into_iter().filter(|w| only.as_deref().is_none_or(|o| format!("{w:?}").eq_ignore_ascii_case(o))).collect();
    let syncs: &[bool] = if args.iter().any(|a| a == "--full-only") { &[true] } else { &[true, false] };
    for &sync_full in syncs {
        for batch in [1usize, 64, 1024] {
            let n = if batch == 1 { rows / 10 } else { rows };
            // Ways alternate within each run, so drift hits them alike.
            let mut rates: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
            for _ in 0..runs {
                for (w, how) in ways.iter().enumerate() {
                    rates[w].push(run(n, payload, batch, sync_full, *how));
                }
            }
            for (how, mut r) in ways.iter().zip(rates) {
                r.sort_by(f64::total_cmp);
                let sync = if sync_full { "FULL" } else { "OFF" };
                println!(
                    "{{\"synchronous\":\"{sync}\",\"batch\":{batch},\"insert\":\"{how:?}\",\"rows\":{n},\"medianRowsPerSec\":{:.0}}}",
                    r[r.len() / 2]
                );
            }
        }
    }
}
