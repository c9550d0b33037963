//! The engine's side of kept journals ([`crate::durable`]): taking every touch stream's
//! journal up when the engine opens, and keeping it when the engine closes.
//!
//! A journal taken up answers its old cursors as before; what it had not flushed when the
//! process stopped is not in it, so the stream is processed from the last row whose touches it
//! holds (its `covered_through`), whichever side of it the stored checkpoint is: rows after it
//! reach the journal (and wake the waits they concern) as if they were new, rows before it are
//! not touched twice. Until its clients are back ([`RESUME_FINE_MS`]), its batches run fine.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::durable::{JournalDir, Restored, StreamLog};
use crate::engine::profile;
use crate::engine::runtime::{journal_options, Publish, Source, StreamRt};
use crate::engine::Inner;
use crate::error::Result;
use crate::journal::{Journal, JournalConfig};
use crate::store::{blocking, Store};

/// How long after a restart a kept journal's batches run fine whatever the hot interest: the
/// time its clients take to come back and wait again (10,000 of them re-wait in ~15 s over
/// HTTP here, `npm run bench:restart`). Rows processed meanwhile touch their fine keys, so a
/// client that comes back is woken only if its own keys changed.
pub const RESUME_FINE_MS: i64 = 30_000;

/// What taking the kept journals up did when the engine opened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RestoreReport {
    /// The journal folder; `None` when journals are not kept.
    pub folder: Option<String>,
    /// Journals taken up, and refused (those streams started a new epoch).
    pub kept: u64,
    pub refused: u64,
    /// Flushes replayed from the logs.
    pub replayed_flushes: u64,
    /// How long it took, in ms.
    pub ms: f64,
}

/// Takes up the kept journal of every touch-enabled stream in `streams` (in parallel: a full
/// filter is 16 MiB to read), and removes the kept files of streams that have none.
pub(crate) fn restore_all(
    store: &Store,
    dir: &JournalDir,
    streams: &mut HashMap<String, StreamRt>,
) -> Result<RestoreReport> {
    let started = std::time::Instant::now();
    let mut report = RestoreReport { folder: Some(dir.path().display().to_string()), ..Default::default() };
    let names: Vec<String> = streams.iter().filter(|(_, rt)| rt.touch().is_some()).map(|(n, _)| n.clone()).collect();
    let query_names = names.clone();
    // (created_at_ms, stored checkpoint) of each stream still live.
    let rows: Vec<Option<(i64, Option<i64>)>> = blocking(|r| {
        store.query(
            move |conn| {
                query_names
                    .iter()
                    .map(|n| {
                        let row = crate::store::query_stream(conn, n)?
                            .filter(|r| r.stream_flags & crate::store::STREAM_FLAG_DELETED == 0);
                        let through = profile::get_touch_state(conn, n)?.map(|s| s.processed_through);
                        Ok(row.map(|r| (r.created_at_ms, through)))
                    })
                    .collect()
            },
            r,
        )
    })?;
    let jobs: Vec<(String, i64, Option<i64>, JournalConfig)> = names
        .into_iter()
        .zip(rows)
        .filter_map(|(name, row)| {
            let (created, through) = row?;
            let cfg = JournalConfig::from_options(&journal_options(streams[&name].touch()?));
            Some((name, created, through, cfg))
        })
        .collect();
    dir.remove_all_but(jobs.iter().map(|j| j.0.as_str()));
    let restored: Vec<(String, i64, Option<i64>, Restored)> = jobs
        .into_par_iter()
        .map(|(name, created, through, cfg)| {
            let r = dir.restore(&name, created, &cfg);
            (name, created, through, r)
        })
        .collect();
    for (name, created, through, restored) in restored {
        let Some(rt) = streams.get_mut(&name) else { continue };
        match restored {
            Restored::Nothing => {}
            Restored::Refused(damage) => {
                report.refused += 1;
                eprintln!(
                    "durable-touch: the kept journal of stream {name:?} was not taken up ({damage}): its cursors answer stale"
                )
            }
            Restored::Kept { mut state, replayed, log } => {
                report.kept += 1;
                report.replayed_flushes += replayed.len() as u64;
                let covered = state.covered_through();
                state.set_log(Some(Box::new(log.clone())));
                rt.kept = Some(log);
                rt.replayed_flushes = replayed.len() as u64;
                rt.republish = replayed;
                rt.incarnation = Some(created);
                rt.install(*state);
                rt.resume_fine_until_ms = crate::journal::wall_ms() + RESUME_FINE_MS;
                // Processing resumes after the last row whose touches the journal holds: rows
                // processed but never flushed are processed again (the stored checkpoint may be
                // past them), rows flushed already are not (it may be behind them: their
                // clients would be woken twice).
                if covered >= 0 && through.is_some() {
                    rt.processed_through = Some(covered);
                }
            }
        }
    }
    report.ms = started.elapsed().as_secs_f64() * 1000.0;
    Ok(report)
}

/// A writer's edges get the flushes replayed from the kept logs again: a process killed
/// between logging a flush and publishing it would leave them a gap (an edge ignores a flush it
/// has applied already). Only a published journal's flushes ([`Source::Published`]) have
/// anywhere to go.
pub(crate) fn republish(inner: &Inner) {
    let due: Vec<(Publish, JournalConfig, Vec<crate::journal::FlushRecord>)> = {
        let mut st = inner.state.lock();
        st.streams
            .values_mut()
            .filter(|rt| !rt.republish.is_empty())
            .filter_map(|rt| {
                let Source::Published(publish) = &rt.source else { return None };
                let cfg = rt.journal.as_ref()?.read(|s| *s.config());
                Some((publish.clone(), cfg, std::mem::take(&mut rt.republish)))
            })
            .collect()
    };
    for (publish, cfg, records) in due {
        let observer = publish(&cfg);
        for r in &records {
            observer(r);
        }
    }
}

/// Keeps every journal for the next open (a clean close): each image is written as a clean,
/// synced snapshot (in parallel: each is an `fsync`), then the folder is synced once. The
/// journals write nothing more to their logs afterwards.
pub(crate) fn close_all(dir: Option<&JournalDir>, journals: &[(Journal, Option<StreamLog>)]) {
    journals.par_iter().for_each(|(journal, kept)| {
        if let Some(kept) = kept {
            let image = journal.with_state(|s| {
                s.take_log();
                s.image()
            });
            kept.close(&image);
        }
    });
    if let Some(dir) = dir {
        if let Err(e) = dir.sync() {
            eprintln!("durable-touch: cannot sync the journal folder {} ({e})", dir.path().display());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::engine::wait::{WaitArgs, WaitReply};
    use crate::engine::{EngineOptions, TouchEngine};
    use crate::error::Result;
    use crate::jscompat::json::parse;
    use crate::keys::{key_id, table_key};
    use crate::store::{blocking, AppendRequest, Store, StoreOptions};

    const POSTS: &str = r#"{"type":"public.posts","key":"1","value":{"id":1},"headers":{"operation":"insert"}}"#;

    fn open(path: &str, opts: EngineOptions) -> (Store, TouchEngine) {
        let store = Store::open(path, StoreOptions::default()).unwrap();
        blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
        let engine = TouchEngine::open(store.clone(), EngineOptions { check_interval_ms: 20, ..opts }).unwrap();
        engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
        (store, engine)
    }

    fn append(store: &Store, n: usize) {
        let req = AppendRequest {
            stream: "s".into(),
            payloads: (0..n).map(|_| POSTS.as_bytes().to_vec()).collect(),
            ..Default::default()
        };
        blocking(|r| store.append(req, r)).unwrap();
    }

    fn settled_cursor(engine: &TouchEngine) -> String {
        blocking(|r| engine.meta("s", true, 5_000.0, r)).unwrap().journal.cursor
    }

    fn wait(engine: &TouchEngine, cursor: &str, table: &str, timeout_ms: u32) -> mpsc::Receiver<Result<WaitReply>> {
        let key = key_id(table_key(table.as_bytes()));
        let body =
            format!(r#"{{"cursor":"{cursor}","keyIds":[{key}],"interestMode":"coarse","timeoutMs":{timeout_ms}}}"#);
        let (tx, rx) = mpsc::channel();
        engine.wait("s", WaitArgs::parse(&parse(&body).unwrap()).unwrap(), Box::new(move |r| tx.send(r).unwrap()));
        rx
    }

    fn reply(rx: mpsc::Receiver<Result<WaitReply>>) -> WaitReply {
        rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap()
    }

    fn close(store: &Store, engine: &TouchEngine) {
        blocking(|r| engine.close(r)).unwrap();
        blocking(|r| store.close(r)).unwrap();
    }

    #[test]
    fn a_clean_restart_keeps_every_cursor_and_wakes_for_rows_appended_while_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.sqlite").to_str().unwrap().to_string();
        let (store, engine) = open(&path, EngineOptions::default());
        let c0 = settled_cursor(&engine);
        append(&store, 3);
        let c1 = settled_cursor(&engine);
        assert_ne!(c0, c1);
        close(&store, &engine);

        // Rows appended while no engine runs.
        let (store, engine) = open(&path, EngineOptions::default());
        assert_eq!(engine.cursor("s").unwrap(), c1, "the same epoch and generation");
        let stats = engine.stats().restored;
        assert_eq!((stats.kept, stats.refused, stats.replayed_flushes), (1, 0, 0));
        // A cursor from before the rows: touched at once; an untouched table: parked.
        let touched = reply(wait(&engine, &c0, "public.posts", 5_000));
        assert!(touched.touched && !touched.stale, "{touched:?}");
        let quiet = reply(wait(&engine, &c0, "public.users", 200));
        assert!(!quiet.touched && !quiet.stale, "{quiet:?}");
        let parked = wait(&engine, &c1, "public.posts", 5_000);
        append(&store, 1);
        assert!(reply(parked).touched);
        close(&store, &engine);
    }

    #[test]
    fn a_restart_without_close_replays_the_log_and_loses_no_touch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.sqlite").to_str().unwrap().to_string();
        let (store, engine) = open(&path, EngineOptions::default());
        append(&store, 2);
        let c1 = settled_cursor(&engine);
        append(&store, 2);
        let c2 = settled_cursor(&engine);
        // A crash: no clean close, nothing flushed at close, no snapshot written.
        drop(engine);
        let (store2, engine) = open(&path, EngineOptions::default());
        assert_eq!(engine.cursor("s").unwrap(), c2);
        let stats = engine.stats().restored;
        assert_eq!(stats.kept, 1);
        assert!(stats.replayed_flushes >= 2, "{stats:?}");
        assert!(reply(wait(&engine, &c1, "public.posts", 5_000)).touched);
        let quiet = reply(wait(&engine, &c1, "public.users", 200));
        assert!(!quiet.touched && !quiet.stale);
        close(&store2, &engine);
        blocking(|r| store.close(r)).unwrap();
    }

    #[test]
    fn after_a_restart_rows_touch_fine_keys_until_clients_are_back() {
        use crate::engine::templates::{FieldDecl, TemplateDecl};
        use crate::keys::{hex16, template_id, watch_key};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.sqlite").to_str().unwrap().to_string();
        let (store, engine) = open(&path, EngineOptions::default());
        let decl = TemplateDecl {
            entity: "public.posts".into(),
            fields: vec![FieldDecl { name: "id".into(), encoding: "int64".into() }],
        };
        let (out, _) = engine.activate_templates("s", &[decl], None).unwrap();
        let tpl = out.activated[0].template_id.clone();
        let bits = template_id(b"public.posts", &["id"]);
        let c1 = settled_cursor(&engine);
        close(&store, &engine);

        // Written while no engine ran (id 1, POSTS); processed by the next one before any
        // client is back, with no hot interest.
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        append(&store, 1);
        blocking(|r| store.close(r)).unwrap();
        let (store, engine) = open(&path, EngineOptions::default());
        let _ = settled_cursor(&engine);
        let watch = |id: &str, timeout: u32| {
            let key = hex16(watch_key(bits, &[id]));
            let body =
                format!(r#"{{"cursor":"{c1}","keys":["{key}"],"templateIdsUsed":["{tpl}"],"timeoutMs":{timeout}}}"#);
            let (tx, rx) = mpsc::channel();
            engine.wait("s", WaitArgs::parse(&parse(&body).unwrap()).unwrap(), Box::new(move |r| tx.send(r).unwrap()));
            reply(rx)
        };
        let written = watch("1", 5_000);
        assert!(written.touched && !written.stale, "{written:?}");
        let other = watch("2", 300);
        assert!(!other.touched && !other.stale, "a tuple nobody wrote is not woken: {other:?}");
        close(&store, &engine);
    }

    #[test]
    fn a_second_engine_on_the_same_store_keeps_nothing_while_the_first_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.sqlite").to_str().unwrap().to_string();
        let (store, engine) = open(&path, EngineOptions::default());
        let second = TouchEngine::open(store.clone(), EngineOptions::default()).unwrap();
        assert_eq!(second.stats().restored.folder, None, "the folder is the first engine's");
        assert!(engine.stats().restored.folder.is_some());
        blocking(|r| second.close(r)).unwrap();
        close(&store, &engine);
        // Closed: the next engine keeps its journals there again.
        let (store, engine) = open(&path, EngineOptions::default());
        assert!(engine.stats().restored.folder.is_some());
        close(&store, &engine);
    }

    #[test]
    fn without_keep_cursors_a_restart_is_a_new_epoch_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.sqlite").to_str().unwrap().to_string();
        let off = EngineOptions { keep_cursors: false, ..Default::default() };
        let (store, engine) = open(&path, off.clone());
        append(&store, 1);
        let c1 = settled_cursor(&engine);
        close(&store, &engine);
        let (store, engine) = open(&path, off);
        assert!(reply(wait(&engine, &c1, "public.users", 1_000)).stale);
        assert_eq!(engine.stats().restored.folder, None);
        close(&store, &engine);

        // Kept, then the snapshot damaged: refused, a new epoch, and the engine serves.
        let (store, engine) = open(&path, EngineOptions::default());
        append(&store, 1);
        let c2 = settled_cursor(&engine);
        close(&store, &engine);
        let folder = format!("{path}-journals");
        let snap = std::fs::read_dir(&folder)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "snap"))
            .unwrap();
        let mut bytes = std::fs::read(&snap).unwrap();
        let last = bytes.len() - 20;
        bytes[last] ^= 0xff;
        std::fs::write(&snap, &bytes).unwrap();
        let (store, engine) = open(&path, EngineOptions::default());
        assert_eq!(engine.stats().restored.refused, 1);
        assert!(reply(wait(&engine, &c2, "public.users", 1_000)).stale);
        close(&store, &engine);
    }
}
