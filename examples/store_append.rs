//! `Store::append` from Rust, one call awaited at a time, without JS: B1's batch shapes (1, 64
//! and 1,024 rows per call) on the store's own writer thread. Set against `append_ceiling`
//! (the same SQL on one thread) it shows what the writer thread costs, and with `--spin`
//! (the caller spins for its reply instead of sleeping) how much of that is the wake-up of a
//! sleeping caller, which a JS caller waiting in its event loop always pays.
//!
//!   cargo run --release --example store_append -- [--runs 3] [--spin]
use std::sync::mpsc::{sync_channel, TryRecvError};
use std::time::Instant;

use durable_touch::store::{blocking, AppendRequest, Store, StoreOptions};

fn append(store: &Store, req: AppendRequest, spin: bool) {
    if !spin {
        blocking(|r| store.append(req, r)).unwrap();
        return;
    }
    let (tx, rx) = sync_channel(1);
    store.append(
        req,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    loop {
        match rx.try_recv() {
            Ok(r) => {
                r.unwrap();
                return;
            }
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
            Err(TryRecvError::Disconnected) => panic!("the store dropped a reply"),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.iter().position(|a| a == "--runs").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(3);
    let spin = args.iter().any(|a| a == "--spin");
    let body: Vec<u8> = (0..361).map(|i| b'a' + (i % 26) as u8).collect();
    for batch in [1usize, 64, 1024] {
        let rows = if batch == 1 { 20_000 } else { 200_000 };
        let payloads: Vec<Vec<u8>> = (0..rows)
            .map(|o| {
                let mut p = body.clone();
                p[..8].copy_from_slice(&(o as u64).to_le_bytes());
                p
            })
            .collect();
        let mut rates = Vec::new();
        for _ in 0..runs {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path().join("w.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
            blocking(|r| store.create_stream("bench".into(), Some("application/json".into()), None, r)).unwrap();
            let t0 = Instant::now();
            for chunk in payloads.chunks(batch) {
                let req = AppendRequest { stream: "bench".into(), payloads: chunk.to_vec(), ..Default::default() };
                append(&store, req, spin);
            }
            rates.push(rows as f64 / t0.elapsed().as_secs_f64());
            blocking(|r| store.close(r)).unwrap();
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "{{\"batch\":{batch},\"spin\":{spin},\"rows\":{rows},\"medianRowsPerSec\":{:.0}}}",
            rates[rates.len() / 2]
        );
    }
}
