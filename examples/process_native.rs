//! Native-only processor timing (no JS): `cargo run --release --example process_native -- <workload.jsonl>`
//! where the file comes from `node bench/gen-workload.mjs --n 100000`. Runs the B2 (coarse) and
//! B3 (24 templates, key granularity, unlimited budget) requests in batches of 10,000 rows.
use std::time::Instant;

use durable_touch::keys;
use durable_touch::processor::{process_rows, ProcessRequest, Row, TemplateRow, TouchSettings};
use durable_touch::spec::OnMissingBefore;

fn main() {
    let path = std::env::args().nth(1).expect("usage: process_native <workload.jsonl>");
    let text = std::fs::read_to_string(path).expect("read workload");
    let rows: Vec<Row> = text
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
    let settings = |budget| TouchSettings {
        coarse_interval_ms: Some(100.0),
        touch_coalesce_window_ms: Some(100.0),
        on_missing_before: OnMissingBefore::Coarse,
        fine_touch_budget_per_batch: budget,
    };
    let only = std::env::args().nth(2);
    for (name, fine) in [("coarse", false), ("fine", true)] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        for _ in 0..3 {
            let t0 = Instant::now();
            let mut touches = 0;
            for chunk in rows.chunks(10_000) {
                let mut req = ProcessRequest::new("bench", chunk[0].offset, rows.len() as i64 - 1, settings(None));
                req.max_rows = 10_000.0;
                req.max_bytes = 64.0 * 1024.0 * 1024.0;
                if !fine {
                    req.emit_fine_touches = false;
                    req.fine_touch_budget = Some(0.0);
                }
                let r = process_rows(&req, chunk, if fine { &templates } else { &[] }).unwrap();
                touches += r.touches.len();
            }
            let s = t0.elapsed().as_secs_f64();
            println!("{name}: {:.0} rows/s ({touches} touches, {:.3}s)", rows.len() as f64 / s, s);
        }
    }
}
