//! What keeping journals across restarts costs (no JS, no SQLite): the log write per flush,
//! the bytes per flush, and the time to take up 50 journals with full 16 MiB filters.
//!
//!   cargo run --release --example journal_keep [-- --streams 50 --flushes 20000 --keys 8]
//!
//! - per flush: `--flushes` flushes of `--keys` touched keys each on one journal, with and
//!   without its log, alternating in rounds (median of 5); the difference is the log's cost;
//! - start-up: `--streams` journals whose filters are full (every slot set, so their snapshots
//!   are stored dense: 16 MiB each), closed cleanly, then taken up in parallel as the engine
//!   does at open (first from the page cache, as after a restart; the figure for a cold disk
//!   is the files' size over its read rate);
//! - after a crash: the same with each log at its longest (just short of
//!   [`REBASE_BYTES`](durable_touch::durable::REBASE_BYTES)) to replay per stream instead.
use std::time::Instant;

use durable_touch::durable::{format, JournalDir, Restored, REBASE_BYTES};
use durable_touch::journal::{Epoch, FlushLog, JournalConfig, JournalOptions, JournalState};
use rayon::prelude::*;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn flushes(state: &mut JournalState, n: usize, keys: usize, seed: u32) {
    let mut out = Vec::new();
    let mut k = seed;
    for i in 0..n {
        for _ in 0..keys {
            k = k.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state.touch(k, Some(i as i64), None, 1);
        }
        state.note_through(i as i64);
        state.flush(2, &mut out);
    }
}

/// CPU time this process has used, ms (Linux; 0 elsewhere).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    ticks * 10.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let streams = arg("--streams", 50);
    let n = arg("--flushes", 20_000);
    let keys = arg("--keys", 8);
    let tmp = tempfile::tempdir().unwrap();
    let dir = JournalDir::open(tmp.path().join("j")).unwrap();
    let cfg = JournalConfig::from_options(&JournalOptions::default());

    // Per flush, with and without the log, alternating (a log that reaches REBASE_BYTES is
    // folded into a snapshot meanwhile, as in service).
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..5 {
        for logged in [true, false] {
            let mut s = JournalState::new(cfg, Epoch::random());
            if logged {
                let log = dir.start("per-flush", None, &mut s);
                s.set_log(Some(Box::new(log)));
            }
            let t = Instant::now();
            flushes(&mut s, n, keys, round);
            let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
            if logged {
                with.push(us);
            } else {
                without.push(us);
            }
        }
    }
    // Bytes per flush: a log short of its first fold.
    let log_bytes = || {
        let path = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "log"));
        path.map_or(0, |p| std::fs::metadata(p).unwrap().len())
    };
    dir.remove_all_but(std::iter::empty());
    let sample = 1_000;
    let mut s = JournalState::new(cfg, Epoch::random());
    let log = dir.start("bytes", None, &mut s);
    s.set_log(Some(Box::new(log)));
    flushes(&mut s, 1, keys, 9);
    let header = log_bytes();
    flushes(&mut s, sample, keys, 9);
    let per_flush = (log_bytes() - header) as f64 / sample as f64;
    dir.remove_all_but(std::iter::empty());
    let (w, wo) = (median(with), median(without));
    println!(
        "per flush of {keys} keys: {w:.2} µs with the log, {wo:.2} µs without: +{:.2} µs; {per_flush:.1} bytes per flush ({:.1} per key)",
        w - wo,
        per_flush / keys as f64
    );

    // Start-up with full filters, after a clean close and after a crash with each log at its
    // longest.
    let longest = arg("--replay", (REBASE_BYTES as f64 / per_flush) as usize - 1);
    for crash in [false, true] {
        let names: Vec<String> = (0..streams).map(|i| format!("stream-{i}")).collect();
        names.par_iter().for_each(|name| {
            let mut s = JournalState::new(cfg, Epoch::random());
            let mut log = dir.start(name, Some(1), &mut s);
            // Every slot set: 2^22 slots from 2^20 keys of k = 4.
            let mut out = Vec::new();
            for base in (0..(1u32 << 22)).step_by(1 << 16) {
                for key in base..base + (1 << 16) {
                    s.touch(key, None, None, 1);
                }
                s.flush(2, &mut out);
            }
            let image = s.image();
            if crash {
                // A snapshot taken mid-way, then a log to replay.
                log.rebase(&image);
                s.set_log(Some(Box::new(log.clone())));
                flushes(&mut s, longest, keys, 7);
            } else {
                log.close(&image);
            }
        });
        let bytes: u64 = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.metadata().unwrap().len()).sum();
        // Written back first, as files written before a restart are by then: ~800 MiB of dirty
        // pages written back during the restore would be timed with it.
        let _ = std::process::Command::new("sync").status();
        let (t, cpu) = (Instant::now(), cpu_ms());
        let kept: usize = names
            .par_iter()
            .map(|name| match dir.restore(name, 1, &cfg) {
                Restored::Kept { .. } => 1,
                _ => 0,
            })
            .sum();
        let (ms, cpu) = (t.elapsed().as_secs_f64() * 1000.0, cpu_ms() - cpu);
        assert_eq!(kept, streams);
        // What of that is reading and decoding the files (the rest is taking up the images and
        // replaying the logs).
        let files: Vec<std::path::PathBuf> =
            std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).collect();
        let t = Instant::now();
        files.par_iter().for_each(|p| match p.extension().and_then(|e| e.to_str()) {
            Some("snap") => drop(format::decode_snapshot(&std::fs::read(p).unwrap()).unwrap()),
            Some("log") => drop(format::decode_log(&std::fs::read(p).unwrap()).unwrap()),
            _ => {}
        });
        let decode_ms = t.elapsed().as_secs_f64() * 1000.0;
        let what = if crash { format!("crash ({longest} flushes replayed each)") } else { "clean close".into() };
        println!(
            "start-up after a {what}: {streams} journals with full 16 MiB filters ({:.0} MiB on disk) taken up in {ms:.0} ms, {cpu:.0} ms of CPU (reading and decoding the files alone: {decode_ms:.0} ms)",
            bytes as f64 / (1 << 20) as f64
        );
        dir.remove_all_but(std::iter::empty());
    }
}
