//! End-to-end tests of the engine in Rust: append → process → journal → wake.

use std::sync::mpsc;
use std::time::Duration;

use super::policy::TouchMode;
use super::wait::{WaitArgs, WaitReply};
use super::*;
use crate::jscompat::json::parse;
use crate::keys::{hex16, key_id, table_key, template_id, watch_key};
use crate::store::{AppendRequest, StoreOptions, STREAM_FLAG_DELETED};

fn setup() -> (tempfile::TempDir, Store, TouchEngine) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("e.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let engine =
        TouchEngine::open(store.clone(), EngineOptions { check_interval_ms: 50, ..Default::default() }).unwrap();
    engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    (dir, store, engine)
}

fn append(store: &Store, payloads: &[&str]) {
    let req = AppendRequest {
        stream: "s".into(),
        payloads: payloads.iter().map(|p| p.as_bytes().to_vec()).collect(),
        ..Default::default()
    };
    blocking(|r| store.append(req, r)).unwrap();
}

fn wait(engine: &TouchEngine, body: &str) -> mpsc::Receiver<Result<WaitReply>> {
    let args = WaitArgs::parse(&parse(body).unwrap()).unwrap();
    let (tx, rx) = mpsc::channel();
    engine.wait("s", args, Box::new(move |r| tx.send(r).unwrap()));
    rx
}

const ROW: &str = r#"{"type":"public.posts","key":"1","value":{"id":1,"authorId":42,"status":"published"},"headers":{"operation":"insert"}}"#;

#[test]
fn a_table_key_wait_wakes_on_append() {
    let (_d, store, engine) = setup();
    let cursor = engine.cursor("s").unwrap();
    let table = key_id(table_key(b"public.posts"));
    let rx = wait(
        &engine,
        &format!(r#"{{"cursor":"{cursor}","keyIds":[{table}],"interestMode":"coarse","timeoutMs":5000}}"#),
    );
    append(&store, &[ROW]);
    let reply = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(reply.touched);
    assert_eq!(reply.bucket_max_source_offset_seq, 0);
    // A second wait from the old cursor answers at once.
    let rx = wait(
        &engine,
        &format!(r#"{{"cursor":"{cursor}","keyIds":[{table}],"interestMode":"coarse","timeoutMs":5000}}"#),
    );
    assert!(rx.recv_timeout(Duration::from_secs(1)).unwrap().unwrap().touched);
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn a_watch_key_wait_wakes_after_template_activation() {
    let (_d, store, engine) = setup();
    let decl = templates::TemplateDecl {
        entity: "public.posts".into(),
        fields: vec![
            templates::FieldDecl { name: "authorId".into(), encoding: "int64".into() },
            templates::FieldDecl { name: "status".into(), encoding: "string".into() },
        ],
    };
    let (out, _) = engine.activate_templates("s", &[decl], None).unwrap();
    let tpl = out.activated[0].template_id.clone();
    let bits = template_id(b"public.posts", &["authorId", "status"]);
    assert_eq!(hex16(bits), tpl);
    let watch = hex16(watch_key(bits, &["42", "published"]));
    let cursor = engine.cursor("s").unwrap();
    let rx = wait(
        &engine,
        &format!(r#"{{"cursor":"{cursor}","keys":["{watch}"],"templateIdsUsed":["{tpl}"],"timeoutMs":5000}}"#),
    );
    let other = wait(
        &engine,
        &format!(r#"{{"cursor":"{cursor}","keys":["0000000000000001"],"templateIdsUsed":["{tpl}"],"timeoutMs":300}}"#),
    );
    append(&store, &[ROW]);
    let reply = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(reply.touched, "{reply:?}");
    assert_eq!(reply.effective_wait_kind.as_str(), "fineKey");
    assert!(!other.recv_timeout(Duration::from_secs(5)).unwrap().unwrap().touched, "an unrelated key times out");
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn stale_cursor_close_and_abort() {
    let (_d, _store, engine) = setup();
    let rx = wait(&engine, r#"{"cursor":"0123456789abcdef:3","keyIds":[1],"timeoutMs":5000}"#);
    let stale = rx.recv_timeout(Duration::from_secs(1)).unwrap().unwrap();
    assert!(stale.stale);
    let args = WaitArgs::parse(&parse(r#"{"cursor":"now","keyIds":[1],"timeoutMs":60000}"#).unwrap()).unwrap();
    let (tx, aborted) = mpsc::channel();
    let ctl = engine.wait("s", args, Box::new(move |r| tx.send(r).unwrap()));
    ctl.abort();
    assert_eq!(aborted.recv_timeout(Duration::from_secs(1)).unwrap().unwrap_err(), Error::Aborted);
    let pending = wait(&engine, r#"{"cursor":"now","keyIds":[1],"timeoutMs":60000}"#);
    blocking(|r| engine.close(r)).unwrap();
    let r = pending.recv_timeout(Duration::from_secs(1)).unwrap().unwrap();
    assert!(!r.touched, "close settles pending waits with touched: false");
}

#[test]
fn an_activation_holds_the_stream_and_covers_the_rows_processed_before_it() {
    // A batch processes rows with the templates it read when it began. The rows processed
    // before an activation, from its `active_from_source_offset` on, get the new template's key
    // and the catch-all inside the activation, while no batch runs.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.sqlite");
    let store = Store::open(path.to_str().unwrap(), StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let engine = TouchEngine::open(store.clone(), EngineOptions { auto_process: false, ..Default::default() }).unwrap();
    engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    let decl = |field: &str| templates::TemplateDecl {
        entity: "public.posts".into(),
        fields: vec![templates::FieldDecl { name: field.into(), encoding: "string".into() }],
    };
    let tkey = |out: &ActivateOutcome| {
        key_id(crate::keys::template_key(crate::keys::template_bits(&out.activated[0].template_id).unwrap()))
    };
    let journal = || engine.inner.state.lock().streams["s"].journal.clone().unwrap();
    let touched_since = |g: u32, key: u32| {
        let j = journal();
        j.flush();
        j.maybe_touched_since_any(&[key], g) && j.maybe_touched_since_any(&[catch_all_key_id()], g)
    };
    engine.cursor("s").unwrap();
    let set_processed = |p: i64| engine.inner.state.lock().streams.get_mut("s").unwrap().processed_through = Some(p);

    // A batch is running: the activation waits for it to end, and no new batch starts meanwhile.
    set_processed(-1);
    engine.inner.state.lock().streams.get_mut("s").unwrap().busy = true;
    std::thread::scope(|scope| {
        let activation = scope.spawn(|| engine.activate_templates("s", &[decl("status")], None).unwrap());
        std::thread::sleep(Duration::from_millis(150));
        assert!(!activation.is_finished(), "the activation waits for the running batch");
        assert!(engine.inner.state.lock().streams["s"].hold_wanted, "and keeps new batches out");
        engine.inner.end_batch("s");
        let (a, _) = activation.join().unwrap();
        // Nothing was processed from its `active_from`: nothing to cover.
        assert!(!touched_since(0, tkey(&a)));
    });
    assert!(!engine.inner.state.lock().streams["s"].busy, "the stream is handed back");

    // The checkpoint in memory passed rows the template covers: covered before it returns.
    set_processed(5);
    let g1 = journal().read(|s| s.generation());
    let (b, _) = engine.activate_templates("s", &[decl("tenant")], None).unwrap();
    assert!(journal().read(|s| s.generation()) > g1, "flushed before the activation returned");
    assert!(touched_since(g1, tkey(&b)));

    // Inside its transaction: a reader that sees the template active sees the cover flushed.
    let reader = rusqlite::Connection::open(&path).unwrap();
    let active = || -> i64 {
        reader
            .query_row("SELECT COUNT(*) FROM live_templates WHERE stream='s' AND state='active'", [], |r| r.get(0))
            .unwrap()
    };
    for (round, field) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().enumerate() {
        let (before, g) = (active(), journal().read(|s| s.generation()));
        std::thread::scope(|scope| {
            let activation = scope.spawn(|| engine.activate_templates("s", &[decl(field)], None).unwrap());
            loop {
                if active() > before {
                    let now = journal().read(|s| s.generation());
                    assert!(now > g, "round {round}: the template was visible before its cover was flushed");
                    break;
                }
                assert!(!activation.is_finished() || active() > before, "round {round}: never committed");
            }
        });
    }

    // Activating a template that is active already (a client's heartbeat) only refreshes it:
    // every batch since its activation emitted its keys, so nothing is touched (its template
    // key and the catch-all would wake every waiter of the template).
    let j = journal();
    j.flush();
    let g3 = j.read(|s| s.generation());
    let (again, _) = engine.activate_templates("s", &[decl("tenant")], None).unwrap();
    assert_eq!(tkey(&again), tkey(&b));
    j.flush();
    assert!(!j.maybe_touched_since_any(&[tkey(&b)], g3) && !j.maybe_touched_since_any(&[catch_all_key_id()], g3));
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn a_stored_profile_that_stops_validating_leaves_the_stream_as_it_was() {
    // A host rewriting its profile row (or a corrupt row) must not switch touch off: the
    // stream keeps its config, journal and cursors until a valid profile is read again.
    let (_d, store, engine) = setup();
    let before = engine.cursor("s").unwrap();
    blocking(|r| {
        store.write(
            |conn| {
                conn.execute("UPDATE stream_profiles SET profile_json = '{not json' WHERE stream = 's'", [])?;
                Ok(())
            },
            r,
        )
    })
    .unwrap();
    engine.reload_profiles(None).unwrap();
    assert_eq!(engine.cursor("s").unwrap(), before, "the stream keeps its journal and cursor");
    append(&store, &[r#"{"type":"public.t","key":"1","value":{"id":1},"headers":{"operation":"insert"}}"#]);
    let rx = wait(
        &engine,
        &format!(r#"{{"cursor":"{before}","keys":["{}"],"timeoutMs":3000}}"#, hex16(table_key(b"public.t"))),
    );
    let reply = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(reply.touched, "a change after the bad read still wakes: {reply:?}");
}

/// Appends `n` rows touching `public.t` and waits until the engine has processed them.
fn append_settled(store: &Store, engine: &TouchEngine, n: usize) {
    let row = r#"{"type":"public.t","key":"1","value":{"id":1},"headers":{"operation":"insert"}}"#;
    append(store, &vec![row; n]);
    let meta = blocking(|r| engine.meta("s", true, 5000.0, r)).unwrap();
    assert!(meta.settled, "{meta:?}");
}

#[test]
fn a_stream_deleted_and_created_again_is_processed_from_its_own_start() {
    // The engine keeps the checkpoint in memory; a stream deleted and created again under
    // the same name restarts its offsets at 0, and its first rows must not be taken for rows
    // of the old stream the checkpoint already covers.
    let (_d, store, engine) = setup();
    append_settled(&store, &engine, 5);
    let table = hex16(table_key(b"public.t"));
    blocking(|r| store.delete_stream("s".into(), r)).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    for i in 0..3 {
        let cursor = engine.cursor("s").unwrap();
        let rx = wait(&engine, &format!(r#"{{"cursor":"{cursor}","keys":["{table}"],"timeoutMs":3000}}"#));
        append(&store, &[r#"{"type":"public.t","key":"2","value":{"id":2},"headers":{"operation":"insert"}}"#]);
        let reply = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
        assert!(reply.touched, "append {i} to the new stream: {reply:?}");
    }
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn a_deleted_stream_answers_its_parked_waits_at_once_and_its_cursors_are_stale_after() {
    let (_d, store, engine) = setup();
    append_settled(&store, &engine, 2);
    let before = engine.cursor("s").unwrap();
    let table = hex16(table_key(b"public.t"));
    let body = format!(r#"{{"cursor":"{before}","keys":["{table}"],"timeoutMs":30000}}"#);
    let parked = wait(&engine, &body);
    blocking(|r| store.delete_stream("s".into(), r)).unwrap();
    engine.notify("s");
    let reply = parked.recv_timeout(Duration::from_secs(5)).expect("answered at once, not at its timeout").unwrap();
    assert!(!reply.touched && !reply.stale, "{reply:?}");
    assert_eq!(engine.cursor("s").unwrap_err().code(), "ERR_STREAM_NOT_FOUND");
    // The name created again and configured: a cursor of the old stream is stale.
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    let reply = wait(&engine, &body).recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(reply.stale, "{reply:?}");
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn a_stream_the_host_marks_deleted_is_dropped_by_the_profile_poll() {
    // A host that deletes streams itself (the swapped server marks them deleted, then removes
    // them when the name is created again) tells the engine nothing: its profile poll finds
    // the stream gone, drops it and answers the waits parked on it.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("e.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let engine = TouchEngine::open(
        store.clone(),
        EngineOptions { check_interval_ms: 0, profile_poll_ms: 20, ..Default::default() },
    )
    .unwrap();
    engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    let parked = wait(&engine, r#"{"cursor":"now","keyIds":[1],"timeoutMs":30000}"#);
    blocking(|r| {
        store.write(
            |c| {
                c.execute(
                    "UPDATE streams SET stream_flags = stream_flags | ?1 WHERE stream = 's'",
                    [STREAM_FLAG_DELETED],
                )?;
                Ok(())
            },
            r,
        )
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    engine.notify("t"); // any notify runs the loop, whose poll is then due
    let reply = parked.recv_timeout(Duration::from_secs(5)).expect("answered by the poll").unwrap();
    assert!(!reply.touched);
    assert!(engine.profile("s").is_none(), "the runtime is gone");
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn an_activation_on_a_stream_deleted_behind_the_engines_back_is_not_found() {
    // The engine learns of a delete at its next batch; an activation in between found no
    // stream row and failed as a storage error (a 500 over HTTP).
    let (_d, store, engine) = setup();
    blocking(|r| store.delete_stream("s".into(), r)).unwrap();
    let decl = templates::TemplateDecl {
        entity: "public.posts".into(),
        fields: vec![templates::FieldDecl { name: "status".into(), encoding: "string".into() }],
    };
    let err = engine.activate_templates("s", &[decl], None).unwrap_err();
    assert_eq!(err.code(), "ERR_STREAM_NOT_FOUND", "{err}");
    blocking(|r| engine.close(r)).unwrap();
}

/// An engine without the loop, as a host with `touchCheckIntervalMs: 0` runs it.
fn setup_without_loop() -> (tempfile::TempDir, Store, TouchEngine) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("e.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let engine = TouchEngine::open(
        store.clone(),
        EngineOptions { auto_process: false, max_batch_rows: 2, ..Default::default() },
    )
    .unwrap();
    let profile =
        r#"{"kind":"state-protocol","touch":{"enabled":true,"memory":{"hotKeyTtlMs":40,"hotTemplateTtlMs":40}}}"#;
    engine.set_profile("s", &parse(profile).unwrap()).unwrap();
    (dir, store, engine)
}

#[test]
fn without_the_loop_nothing_is_processed_until_a_tick_which_processes_every_row_before_it() {
    let (_d, store, engine) = setup_without_loop();
    let table = key_id(table_key(b"public.posts"));
    let journal = engine.journal("s", true).unwrap().unwrap();
    let generation = journal.generation();
    append(&store, &[ROW, ROW, ROW, ROW, ROW]);
    std::thread::sleep(Duration::from_millis(50));
    journal.flush();
    assert!(!journal.maybe_touched_since(table, generation), "no loop: nothing processed yet");
    let report = blocking(|r| engine.tick(r)).unwrap();
    // Five rows in batches of at most two: three batches, every row before the call.
    assert_eq!((report.streams, report.batches, report.failed.len()), (1, 3, 0));
    assert!(journal.read(|s| s.pending_keys()) > 0, "the touches are in the journal when the tick returns");
    journal.flush();
    assert!(journal.maybe_touched_since(table, generation));
    let meta = blocking(|r| engine.meta("s", false, 0.0, r)).unwrap();
    assert_eq!((meta.lag_source_offsets, meta.processed_through), (0, Some(4)));
    assert_eq!(engine.memory(5).0.dirty_streams, 0, "a tick leaves no stream dirty");
    // Nothing new: one batch that finds nothing.
    assert_eq!(blocking(|r| engine.tick(r)).unwrap().batches, 1);
    blocking(|r| engine.close(r)).unwrap();
    assert_eq!(blocking(|r| engine.tick(r)).unwrap_err().code(), "ERR_CLOSED");
}

#[test]
fn meta_settles_without_the_loop() {
    let (_d, store, engine) = setup_without_loop();
    append(&store, &[ROW]);
    blocking(|r| engine.tick(r)).unwrap();
    let meta = blocking(|r| engine.meta("s", true, 2000.0, r)).unwrap();
    assert!(meta.settled, "the pending bucket flushes and no lag is left");
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn hot_interest_leases_count_until_released_and_meta_sweeps_them_after_the_grace() {
    let (_d, _store, engine) = setup_without_loop();
    let tpl = "0123456789abcdef".to_string();
    let id =
        engine.begin_hot_interest("s", hot::InterestMode::Fine, &[1, 2, 2], &[tpl.clone(), "nope".into()]).unwrap();
    let (_, _, v) = engine.runtime("s").unwrap();
    assert_eq!((v.hot_fine_keys, v.hot_templates, v.fine_waiters_active), (2, 1, 1));
    assert!(engine.release_hot_interest(id));
    assert!(!engine.release_hot_interest(id), "a lease is released once");
    let (_, _, v) = engine.runtime("s").unwrap();
    assert_eq!((v.hot_fine_keys_grace, v.hot_templates_grace, v.fine_waiters_active), (2, 1, 0));
    // The sweep is paced (at least 250 ms apart, M19) and meta reads through it.
    std::thread::sleep(Duration::from_millis(400));
    let meta = blocking(|r| engine.meta("s", false, 0.0, r)).unwrap();
    assert_eq!((meta.runtime.hot_fine_keys, meta.runtime.hot_templates), (0, 0));
    assert_eq!(engine.memory(5).0.hot_fine_streams, 0, "the empty hot state is dropped");
    let err = engine.begin_hot_interest("none", hot::InterestMode::Coarse, &[], &[]).unwrap_err();
    assert_eq!(err.code(), "ERR_STREAM_NOT_FOUND");
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn with_no_one_listening_batches_touch_templates_not_tuples_and_an_older_cursor_still_wakes() {
    let (_d, store, engine) = setup();
    let decl = templates::TemplateDecl {
        entity: "public.posts".into(),
        fields: vec![templates::FieldDecl { name: "authorId".into(), encoding: "int64".into() }],
    };
    let (out, _) = engine.activate_templates("s", &[decl], None).unwrap();
    let tpl = out.activated[0].template_id.clone();
    let bits = template_id(b"public.posts", &["authorId"]);
    let cursor = engine.cursor("s").unwrap();
    let row = |id: usize, author: usize| {
        format!(
            r#"{{"type":"public.posts","key":"{id}","value":{{"id":{id},"authorId":{author}}},"headers":{{"operation":"insert"}}}}"#
        )
    };
    let rows: Vec<String> = (0..40).map(|i| row(i, 100 + i)).collect();
    append(&store, &rows.iter().map(String::as_str).collect::<Vec<_>>());
    let meta = blocking(|r| engine.meta("s", true, 5000.0, r)).unwrap();
    assert!(meta.settled);
    assert_eq!(meta.touch_mode, TouchMode::Idle);
    // 40 rows, 40 tuples: with no fine demand the batch touched the template's key, not 40
    // watch keys.
    let emitted = meta.runtime.totals.touches_template;
    assert!(emitted > 0.0 && emitted < 5.0, "template touches: {emitted}");
    // Waits from the cursor before those rows hear them: a templated one through its template
    // key, an untemplated one through the catch-all.
    let watch = hex16(watch_key(bits, &["105"]));
    for body in [
        format!(r#"{{"cursor":"{cursor}","keys":["{watch}"],"templateIdsUsed":["{tpl}"],"timeoutMs":2000}}"#),
        format!(r#"{{"cursor":"{cursor}","keys":["{watch}"],"timeoutMs":2000}}"#),
    ] {
        let r = wait(&engine, &body).recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
        assert!(r.touched && !r.parked, "{body}: {r:?}");
    }
    // A fine waiter makes its key hot: the batches after it emit watch keys again.
    let now = engine.cursor("s").unwrap();
    let other = hex16(watch_key(bits, &["999"]));
    let parked = wait(
        &engine,
        &format!(r#"{{"cursor":"{now}","keys":["{other}"],"templateIdsUsed":["{tpl}"],"timeoutMs":1500}}"#),
    );
    std::thread::sleep(Duration::from_millis(50));
    append(&store, &[&row(50, 7)]);
    let r = parked.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(!r.touched, "a precise batch does not wake another tuple's waiter");
    let meta = blocking(|r| engine.meta("s", true, 5000.0, r)).unwrap();
    assert_eq!(meta.touch_mode, TouchMode::Fine);
    let seven = hex16(watch_key(bits, &["7"]));
    let r = wait(
        &engine,
        &format!(r#"{{"cursor":"{now}","keys":["{seven}"],"templateIdsUsed":["{tpl}"],"timeoutMs":2000}}"#),
    )
    .recv_timeout(Duration::from_secs(5))
    .unwrap()
    .unwrap();
    assert!(r.touched && r.effective_wait_kind == super::wait::WaitKind::FineKey);
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn with_records_on_the_engine_keeps_what_each_batch_did_and_every_lifecycle_event_gc_and_failure() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("e.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let opts = EngineOptions {
        auto_process: false,
        max_batch_rows: 2,
        wal_gc_interval_ms: 0,
        records: true,
        ..Default::default()
    };
    let engine = TouchEngine::open(store.clone(), opts).unwrap();
    let profile = r#"{"kind":"state-protocol","touch":{"enabled":true,"templates":{"gcIntervalMs":1}}}"#;
    engine.set_profile("s", &parse(profile).unwrap()).unwrap();
    let decl = |field: &str| templates::TemplateDecl {
        entity: "public.posts".into(),
        fields: vec![templates::FieldDecl { name: field.into(), encoding: "int64".into() }],
    };
    // Two activations, one refreshed: three `live.template_activated` events, as the reference
    // counts them; one with a TTL short enough to retire at the next upkeep.
    engine.activate_templates("s", &[decl("authorId"), decl("id")], None).unwrap();
    engine.activate_templates("s", &[decl("authorId")], Some(1.0)).unwrap();
    append(&store, &[ROW, ROW, ROW, ROW, ROW]);
    // The rows are uploaded, so the upkeep deletes them once processed (M17).
    blocking(|r| store.write(|c| Ok(c.execute("UPDATE streams SET uploaded_through=100", [])?), r)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    blocking(|r| engine.tick(r)).unwrap();
    let r = engine.take_records();
    // Five rows in batches of at most two.
    assert_eq!(r.batches.len(), 3, "{:?}", r.batches);
    assert_eq!(r.batches.iter().map(|b| b.rows_read).sum::<f64>(), 5.0);
    assert_eq!(r.batches.iter().map(|b| b.changes).sum::<f64>(), 5.0);
    assert_eq!(r.batches.iter().map(|b| b.processed_through_delta).sum::<f64>(), 5.0);
    assert_eq!(r.batches.iter().map(|b| b.lag_source_offsets).collect::<Vec<_>>(), [3, 1, 0]);
    for b in &r.batches {
        assert_eq!((b.stream.as_str(), b.batches, b.touch_mode), ("s", 1, TouchMode::Idle));
        // No fine demand: the table key and the two template keys, each once.
        assert_eq!((b.touches_emitted, b.table_touches, b.template_touches, b.unique_keys), (3.0, 1.0, 2.0, 3.0));
        assert!(b.commit_lag_ms.is_some_and(|l| (0.0..60_000.0).contains(&l)), "{b:?}");
        assert_eq!(b.scanned_but_emitted0_batches, 0);
    }
    let kinds: Vec<_> = r.lifecycle.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        ["live.template_activated", "live.template_activated", "live.template_activated", "live.template_retired"]
    );
    assert!(matches!(&r.lifecycle[3], templates::LifecycleEvent::Retired { reason: "inactivity", .. }));
    assert_eq!(r.wal_gc.len(), 1);
    assert_eq!((r.wal_gc[0].calls, r.wal_gc[0].deleted_rows), (1, 5.0));
    assert!(r.wal_gc[0].deleted_bytes > 0.0);
    assert!(r.failures.is_empty() && r.lifecycle_overflow.is_empty());
    assert!(engine.take_records().is_empty(), "drained");
    // The engine's own lifecycle totals agree.
    let l = engine.stats().lifecycle;
    assert_eq!((l.activated, l.retired, l.evicted), (3, 1, 0));
    // A failed batch: the rows' stream row is gone from under the checkpoint's reader.
    blocking(|r| store.write(|c| Ok(c.execute_batch("ALTER TABLE wal RENAME TO wal_gone")?), r)).unwrap();
    append_raw_ignore(&store);
    let report = blocking(|r| engine.tick(r)).unwrap();
    assert_eq!(report.failed.len(), 1);
    assert_eq!(engine.take_records().failures, [("s".to_string(), 1)]);
    blocking(|r| engine.close(r)).unwrap();
    assert!(engine.take_records().is_empty());
}

/// Moves the stream's next offset on without a WAL row (the WAL table is gone).
fn append_raw_ignore(store: &Store) {
    blocking(|r| store.write(|c| Ok(c.execute("UPDATE streams SET next_offset=next_offset+1", [])?), r)).unwrap();
}

#[test]
fn without_records_the_engine_keeps_none() {
    let (_d, store, engine) = setup_without_loop();
    append(&store, &[ROW]);
    blocking(|r| engine.tick(r)).unwrap();
    assert!(engine.take_records().is_empty());
    blocking(|r| engine.close(r)).unwrap();
}

#[test]
fn an_idle_streams_deferred_rows_are_processed_without_a_tick_and_wake_a_wait_that_starts_meanwhile() {
    // No safety-net tick: only the loop's own deadline for a deferred stream processes it.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("e.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let engine =
        TouchEngine::open(store.clone(), EngineOptions { check_interval_ms: 0, ..Default::default() }).unwrap();
    engine.set_profile("s", &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    let cursor = engine.cursor("s").unwrap();
    let through = |engine: &TouchEngine| engine.inner.state.lock().streams.get("s").and_then(|rt| rt.processed_through);
    // Nobody listens: the rows wait IDLE_DEFER_MS, then the loop processes them on its own.
    for _ in 0..3 {
        append(&store, &[ROW]);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while through(&engine) != Some(2) {
        assert!(std::time::Instant::now() < deadline, "idle rows never processed: {:?}", through(&engine));
        std::thread::sleep(Duration::from_millis(5));
    }
    // A wait from before them hears them.
    let table = key_id(table_key(b"public.posts"));
    let body = format!(r#"{{"cursor":"{cursor}","keyIds":[{table}],"interestMode":"coarse","timeoutMs":5000}}"#);
    assert!(wait(&engine, &body).recv_timeout(Duration::from_secs(5)).unwrap().unwrap().touched);
    // Rows appended while nobody listens, then a wait from before them: it is woken by them.
    let cursor = engine.cursor("s").unwrap();
    append(&store, &[ROW]);
    let body = format!(r#"{{"cursor":"{cursor}","keyIds":[{table}],"interestMode":"coarse","timeoutMs":5000}}"#);
    let reply = wait(&engine, &body).recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert!(reply.touched);
    assert_eq!(reply.bucket_max_source_offset_seq, 3);
    blocking(|r| engine.close(r)).unwrap();
}
