//! Native-only processor throughput (no JS): what the engine's store-backed batches cost
//! before any touch becomes a JS object.
//!
//!   cargo run --release --example process_native -- <workload.jsonl> [--json] [--runs 3] [--only coarse|fine|hot|rich]
//!
//! The file is `node testkit/gen-workload.mjs --n N` output. Runs B2 (coarse) and B3 (24
//! templates, key granularity, unlimited budget) and "hot" (B3 on rows that repeat the same
//! 50 records) and "rich" (B2 on records whose title holds non-ASCII text and escaped quotes)
//! in batches of 10,000 rows, on one thread
//! (batches one after another) and on all cores (batches spread over the processor pool's
//! threads), and prints rows/s (medians with `--json`; bench/process.mjs reads that).
use std::time::Instant;

use durable_touch::keys;
use durable_touch::processor::{process_rows, ProcessRequest, Row, TemplateRow, TouchSettings};
use durable_touch::spec::OnMissingBefore;
use rayon::prelude::*;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: process_native <workload.jsonl> [--json] [--runs N]");
    let json = args.iter().any(|a| a == "--json");
    let runs: usize =
        args.iter().position(|a| a == "--runs").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(3);
    // `--only coarse|fine|hot|rich` runs one workload (for profiling).
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let text = std::fs::read_to_string(path).expect("read workload");
    let all_rows: Vec<Row> = text
        .lines()
        .enumerate()
        .map(|(i, l)| Row { offset: i as i64, ts_ms: 1704067200000.0 + i as f64, payload: l.as_bytes().to_vec() })
        .collect();
    let mut templates = Vec::new();
    for e in 0..8 {
        let entity = format!("public.e{e}");
        for names in [vec!["tenantId"], vec!["status", "tenantId"], vec!["userId"]] {
            templates.push(TemplateRow {
                template_id: keys::hex16(keys::template_id(entity.as_bytes(), &names)),
                entity: entity.as_str().into(),
                fields: names.iter().map(|n| (*n).into()).collect(),
                encodings: names.iter().map(|_| "string".to_string()).collect(),
                active_from_source_offset: 0,
            });
        }
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
    let mut out = Vec::new();
    // "hot": B3's settings on rows that touch the same keys again and again (the first 50
    // records, repeated to 100,000 rows at new offsets), where coalescing stays online.
    let hot_rows: Vec<Row> = (0..all_rows.len().min(100_000))
        .map(|i| Row { offset: i as i64, ts_ms: 1704067200000.0 + i as f64, payload: all_rows[i % 50].payload.clone() })
        .collect();
    // "rich": B2's settings on the same records with `Zoë "x" ` (escaped quotes, a two-byte
    // character) at the start of each title, as text fields often hold.
    let rich_rows: Vec<Row> = if !wanted("rich") {
        Vec::new()
    } else {
        all_rows
            .iter()
            .map(|r| {
                let text = String::from_utf8_lossy(&r.payload).replacen(r#""title":""#, r#""title":"Zoë \"x\" "#, 1);
                Row { payload: text.into_bytes(), ..r.clone() }
            })
            .collect()
    };
    let workloads = [
        ("coarse", false, &all_rows[..]),
        ("rich", false, &rich_rows[..]),
        ("fine", true, &all_rows[..all_rows.len().min(100_000)]),
        ("hot", true, &hot_rows[..]),
    ];
    for (name, fine, rows) in workloads {
        if !wanted(name) {
            continue;
        }
        let n = rows.len();
        let batch = |chunk: &[Row]| {
            let settings = TouchSettings {
                coarse_interval_ms: Some(100.0),
                touch_coalesce_window_ms: Some(100.0),
                on_missing_before: OnMissingBefore::Coarse,
                fine_touch_budget_per_batch: if fine { None } else { Some(2000.0) },
            };
            let mut req = ProcessRequest::new("bench", chunk[0].offset, n as i64 - 1, settings);
            req.max_rows = 10_000.0;
            req.max_bytes = 64.0 * 1024.0 * 1024.0;
            if !fine {
                req.emit_fine_touches = false;
                req.fine_touch_budget = Some(0.0);
            }
            process_rows(&req, chunk, if fine { &templates } else { &[] }).expect("batch").touches.len()
        };
        let (mut one, mut all) = (Vec::new(), Vec::new());
        for _ in 0..runs + 1 {
            let t0 = Instant::now();
            let touches: usize = rows.chunks(10_000).map(batch).sum();
            one.push(n as f64 / t0.elapsed().as_secs_f64());
            let t0 = Instant::now();
            let touches_all: usize = pool.install(|| rows.par_chunks(10_000).with_max_len(1).map(batch).sum());
            all.push(n as f64 / t0.elapsed().as_secs_f64());
            assert_eq!(touches, touches_all);
            if !json {
                println!(
                    "{name}: one thread {:.0} rows/s, all cores {:.0} rows/s ({touches} touches)",
                    one.last().unwrap(),
                    all.last().unwrap()
                );
            }
        }
        // The first pass warms up.
        one.remove(0);
        all.remove(0);
        out.push(format!(
            "\"{name}\":{{\"rows\":{n},\"medianRowsPerSec\":{:.1},\"allCores\":{{\"threads\":{threads},\"medianRowsPerSec\":{:.1}}}}}",
            median(one),
            median(all)
        ));
    }
    if json {
        println!("{{{}}}", out.join(","));
    }
}
