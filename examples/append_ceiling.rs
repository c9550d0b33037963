//! The SQLite ceiling for B1: the fastest a single connection can insert WAL rows with the
//! reference's schema and pragmas (S1–S5), with no JS, no threads and no stream-row upkeep —
//! one `INSERT INTO wal` per row, one transaction per batch, as `Store::append` does.
//!
//!   cargo run --release --example append_ceiling -- [--rows 200000] [--payload 361] [--runs 3]
//!
//! Prints rows/s per batch size with `synchronous=FULL` (what every acknowledged append pays)
//! and, for comparison, `synchronous=OFF` (no fsync at all). The payload size defaults to the
//! B1 workload's average (361 bytes). Used to judge how far above the reference an append
//! path on SQLite can go: the reference's batch-64/1024 rates are set against this ceiling in
//! the issue note.
use std::time::Instant;

use durable_touch::store::schema;
use rusqlite::{params, Connection};

fn arg(args: &[String], name: &str, def: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(def)
}

fn run(rows: usize, payload: usize, batch: usize, sync_full: bool) -> f64 {
    let dir = std::env::temp_dir().join(format!("dt-ceiling-{}-{batch}-{sync_full}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut conn = Connection::open(dir.join("wal.sqlite")).unwrap();
    schema::apply_pragmas(&conn, None).unwrap();
    schema::init(&mut conn).unwrap();
    if !sync_full {
        conn.execute_batch("PRAGMA synchronous = OFF;").unwrap();
    }
    // Payloads differ per row (as workload records do) so SQLite cannot share pages.
    let body: Vec<u8> = (0..payload).map(|i| b'a' + (i % 26) as u8).collect();
    let t0 = Instant::now();
    let mut off = 0usize;
    while off < rows {
        let end = (off + batch).min(rows);
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO wal(stream, offset, ts_ms, payload, payload_len, routing_key, content_type, flags) \
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL, 'application/json', 0)",
                )
                .unwrap();
            let mut p = body.clone();
            for o in off..end {
                p[..8].copy_from_slice(&(o as u64).to_le_bytes());
                insert.execute(params!["bench", o as i64, 1_704_067_200_000i64 + o as i64, p, payload as i64]).unwrap();
            }
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
    for sync_full in [true, false] {
        for batch in [1usize, 64, 1024] {
            let n = if batch == 1 { rows / 10 } else { rows };
            let mut rates: Vec<f64> = (0..runs).map(|_| run(n, payload, batch, sync_full)).collect();
            rates.sort_by(f64::total_cmp);
            let sync = if sync_full { "FULL" } else { "OFF" };
            println!(
                "{{\"synchronous\":\"{sync}\",\"batch\":{batch},\"rows\":{n},\"medianRowsPerSec\":{:.0}}}",
                rates[rates.len() / 2]
            );
        }
    }
}
