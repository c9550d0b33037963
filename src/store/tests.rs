use super::*;

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sqlite");
    let store = Store::open(path.to_str().unwrap(), StoreOptions::default()).unwrap();
    (dir, store)
}

fn append(store: &Store, stream: &str, payloads: &[&str]) -> Result<AppendOutcome> {
    let req = AppendRequest {
        stream: stream.into(),
        payloads: payloads.iter().map(|p| p.as_bytes().to_vec()).collect(),
        ..Default::default()
    };
    blocking(|r| store.append(req, r))
}

fn read_all(store: &Store, stream: &str) -> Vec<WalRow> {
    blocking(|r| {
        store.read(
            ReadRequest { stream: stream.into(), from: 0, to: None, limit: usize::MAX / 2, max_bytes: u64::MAX },
            r,
        )
    })
    .unwrap()
}

#[test]
fn create_stream_sets_reference_defaults() {
    let (_d, store) = temp_store();
    let row = blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    assert_eq!(row.content_type, "application/octet-stream");
    assert_eq!(row.profile.as_deref(), Some("generic"));
    assert_eq!((row.epoch, row.next_offset, row.sealed_through, row.uploaded_through), (0, 0, -1, -1));
    assert_eq!((row.pending_rows, row.wal_rows, row.wal_bytes, row.stream_flags), (0, 0, 0, 0));
    // Idempotent: same row back, content type unchanged.
    let again = blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    assert_eq!(again.created_at_ms, row.created_at_ms);
    let err = blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap_err();
    assert_eq!(err.code(), "ERR_STREAM_EXISTS");
}

#[test]
fn appends_are_contiguous_and_counted() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let a = append(&store, "s", &["a", "bb"]).unwrap();
    assert_eq!((a.first_offset, a.last_offset, a.next_offset), (0, 1, 2));
    let b = append(&store, "s", &["ccc"]).unwrap();
    assert_eq!((b.first_offset, b.last_offset, b.next_offset), (2, 2, 3));
    let row = blocking(|r| store.get_stream("s".into(), r)).unwrap().unwrap();
    assert_eq!((row.next_offset, row.wal_rows, row.wal_bytes, row.pending_rows, row.pending_bytes), (3, 3, 6, 3, 6));
    assert_eq!(row.logical_size_bytes, 6);
    let rows = read_all(&store, "s");
    assert_eq!(rows.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(rows[2].payload, b"ccc");
    assert_eq!(rows[0].content_type.as_deref(), Some("application/json"));
    // S9: one ts per call, strictly increasing per stream.
    assert_eq!(rows[0].ts_ms, rows[1].ts_ms);
    assert!(rows[2].ts_ms > rows[1].ts_ms);
}

#[test]
fn seq_mismatch_reports_expected_next_and_writes_nothing() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    append(&store, "s", &["x"]).unwrap();
    let req = AppendRequest {
        stream: "s".into(),
        payloads: vec![b"y".to_vec()],
        expected_offset: Some(5),
        ..Default::default()
    };
    let err = blocking(|r| store.append(req, r)).unwrap_err();
    assert_eq!(err, Error::SeqMismatch { stream: "s".into(), expected: 5, expected_next: 1 });
    let ok = AppendRequest {
        stream: "s".into(),
        payloads: vec![b"y".to_vec()],
        expected_offset: Some(1),
        ..Default::default()
    };
    assert_eq!(blocking(|r| store.append(ok, r)).unwrap().first_offset, 1);
    assert_eq!(read_all(&store, "s").len(), 2);
}

#[test]
fn unknown_stream_and_bad_requests_are_rejected() {
    let (_d, store) = temp_store();
    assert_eq!(append(&store, "nope", &["x"]).unwrap_err().code(), "ERR_STREAM_NOT_FOUND");
    assert_eq!(append(&store, "", &["x"]).unwrap_err().code(), "ERR_INVALID_ARGUMENT");
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    assert_eq!(append(&store, "s", &[]).unwrap_err().code(), "ERR_INVALID_ARGUMENT");
    let keys = AppendRequest {
        stream: "s".into(),
        payloads: vec![b"a".to_vec(), b"b".to_vec()],
        routing_keys: Some(vec![None]),
        ..Default::default()
    };
    assert_eq!(blocking(|r| store.append(keys, r)).unwrap_err().code(), "ERR_INVALID_ARGUMENT");
    let big = AppendRequest { stream: "s".into(), payloads: vec![vec![0u8; 9 * 1024 * 1024]], ..Default::default() };
    assert_eq!(blocking(|r| store.append(big, r)).unwrap_err().code(), "ERR_PAYLOAD_TOO_LARGE");
    let read =
        blocking(|r| store.read(ReadRequest { stream: "nope".into(), from: 0, to: None, limit: 10, max_bytes: 10 }, r));
    assert_eq!(read.unwrap_err().code(), "ERR_STREAM_NOT_FOUND");
}

#[test]
fn concurrent_appends_share_commits_and_keep_their_ranges() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let calls = 2000;
    for i in 0..calls {
        let tx = tx.clone();
        let n = 1 + (i % 3);
        let req = AppendRequest {
            stream: "s".into(),
            payloads: (0..n).map(|k| format!("{i}:{k}").into_bytes()).collect(),
            ..Default::default()
        };
        store.append(req, Box::new(move |r| tx.send((i, n, r)).unwrap()));
    }
    drop(tx);
    let mut ranges: Vec<(i64, i64, usize, usize)> = rx
        .iter()
        .map(|(i, n, r)| {
            let o = r.unwrap();
            assert_eq!((o.last_offset - o.first_offset + 1) as usize, n);
            (o.first_offset, o.last_offset, i, n)
        })
        .collect();
    assert_eq!(ranges.len(), calls);
    ranges.sort();
    let mut next = 0;
    for (first, last, _, _) in &ranges {
        assert_eq!(*first, next, "ranges must tile the log without gaps");
        next = last + 1;
    }
    // Every call's rows are its own payloads, in order.
    let rows = read_all(&store, "s");
    for (first, _, i, n) in &ranges {
        for k in 0..*n {
            assert_eq!(rows[(*first as usize) + k].payload, format!("{i}:{k}").into_bytes());
        }
    }
    let stats = store.stats().counters;
    assert_eq!(stats.append_calls, calls as u64);
    assert!(stats.group_commits < calls as u64, "calls were grouped: {} commits", stats.group_commits);
}

#[test]
fn a_rejected_call_does_not_fail_its_group() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..300 {
        let tx = tx.clone();
        let stream = if i % 10 == 0 { "missing" } else { "s" };
        let req = AppendRequest { stream: stream.into(), payloads: vec![vec![b'x']], ..Default::default() };
        store.append(req, Box::new(move |r| tx.send((i, r)).unwrap()));
    }
    drop(tx);
    for (i, r) in rx.iter() {
        assert_eq!(r.is_err(), i % 10 == 0);
    }
    assert_eq!(read_all(&store, "s").len(), 270);
}

#[test]
fn rows_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sqlite");
    let path = path.to_str().unwrap();
    {
        let store = Store::open(path, StoreOptions::default()).unwrap();
        blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
        append(&store, "s", &["1", "2", "3"]).unwrap();
        blocking(|r| store.close(r)).unwrap();
    }
    let store = Store::open(path, StoreOptions::default()).unwrap();
    assert_eq!(read_all(&store, "s").len(), 3);
    assert_eq!(append(&store, "s", &["4"]).unwrap().first_offset, 3);
}

#[test]
fn read_limits_and_ranges() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    append(&store, "s", &["aaaa", "bbbb", "cccc", "dddd", "eeee"]).unwrap();
    let read = |from, to, limit, max_bytes| {
        blocking(|r| store.read(ReadRequest { stream: "s".into(), from, to, limit, max_bytes }, r))
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect::<Vec<_>>()
    };
    assert_eq!(read(1, Some(3), 100, 1000), [1, 2, 3]);
    assert_eq!(read(0, None, 2, 1000), [0, 1]);
    assert_eq!(read(0, None, 100, 9), [0, 1]);
    assert_eq!(read(0, None, 100, 1), [0], "the first row is always returned");
    assert_eq!(read(4, Some(2), 100, 1000), Vec::<i64>::new());
    assert_eq!(read(10, None, 100, 1000), Vec::<i64>::new());
}

#[test]
fn wal_gc_deletes_through_and_lowers_counters() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    append(&store, "s", &["aa", "bb", "cc", "dd"]).unwrap();
    let out = blocking(|r| store.delete_wal_through("s".into(), 1, r)).unwrap();
    assert_eq!(out, WalGcOutcome { deleted_rows: 2, deleted_bytes: 4 });
    let row = blocking(|r| store.get_stream("s".into(), r)).unwrap().unwrap();
    assert_eq!((row.wal_rows, row.wal_bytes, row.next_offset), (2, 4, 4));
    assert_eq!(blocking(|r| store.delete_wal_through("s".into(), -1, r)).unwrap(), WalGcOutcome::default());
    assert_eq!(read_all(&store, "s").iter().map(|r| r.offset).collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn delete_stream_removes_everything() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    append(&store, "s", &["a"]).unwrap();
    assert!(blocking(|r| store.delete_stream("s".into(), r)).unwrap());
    assert!(!blocking(|r| store.delete_stream("s".into(), r)).unwrap());
    assert!(blocking(|r| store.get_stream("s".into(), r)).unwrap().is_none());
    let row = blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    assert_eq!(row.next_offset, 0);
}

#[test]
fn close_finishes_queued_work_then_refuses() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..100 {
        let tx = tx.clone();
        store.append(
            AppendRequest { stream: "s".into(), payloads: vec![b"x".to_vec()], ..Default::default() },
            Box::new(move |r| tx.send(r.is_ok()).unwrap()),
        );
    }
    blocking(|r| store.close(r)).unwrap();
    drop(tx);
    assert_eq!(rx.iter().filter(|ok| *ok).count(), 100, "appends queued before close are committed");
    assert_eq!(append(&store, "s", &["x"]).unwrap_err().code(), "ERR_CLOSED");
    assert_eq!(blocking(|r| store.get_stream("s".into(), r)).unwrap_err().code(), "ERR_CLOSED");
    blocking(|r| store.close(r)).unwrap();
}

#[test]
fn in_memory_store_works_without_readers() {
    let store = Store::open(":memory:", StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    append(&store, "s", &["a", "b"]).unwrap();
    assert_eq!(read_all(&store, "s").len(), 2);
    blocking(|r| store.close(r)).unwrap();
}

#[test]
fn a_file_that_is_not_sqlite_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.sqlite");
    std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
    let err = Store::open(path.to_str().unwrap(), StoreOptions::default()).err().unwrap();
    assert_eq!(err.code(), "ERR_STORAGE");
}

#[test]
fn a_path_with_nul_is_an_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/a\0b.sqlite", dir.path().to_str().unwrap());
    let err = Store::open(&path, StoreOptions::default()).err().unwrap();
    assert_eq!((err.code(), err.to_string()), ("ERR_INVALID_ARGUMENT", "store path must not contain NUL".into()));
}

#[test]
fn precheck_refuses_what_append_refuses_first_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sqlite");
    let store =
        Store::open(path.to_str().unwrap(), StoreOptions { max_append_rows: 10, ..Default::default() }).unwrap();
    assert_eq!(store.precheck_append("s", 10, Some(10)), Ok(()));
    let rows = store.precheck_append("s", 1 << 31, None).unwrap_err();
    assert_eq!(rows.code(), "ERR_PAYLOAD_TOO_LARGE");
    let payloads = vec![b"x".to_vec(); 11];
    let req = AppendRequest { stream: "s".into(), payloads, ..Default::default() };
    let refused = store.precheck_append("s", 11, None).unwrap_err();
    assert_eq!(blocking(|r| store.append(req, r)).unwrap_err(), refused);
    let payloads = vec![b"x".to_vec(); 2];
    let keys = AppendRequest { stream: "s".into(), payloads, routing_keys: Some(vec![None]), ..Default::default() };
    let refused = store.precheck_append("s", 2, Some(1)).unwrap_err();
    assert_eq!(blocking(|r| store.append(keys, r)).unwrap_err(), refused);
    assert_eq!(store.precheck_append("a\0b", 1, None).unwrap_err().code(), "ERR_INVALID_ARGUMENT");
    assert_eq!(store.stats().counters.append_errors, 6);
}

#[test]
fn write_jobs_roll_back_alone() {
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t1 = tx.clone();
    store.append(
        AppendRequest { stream: "s".into(), payloads: vec![b"a".to_vec()], ..Default::default() },
        Box::new(move |r| t1.send(r.map(|_| ())).unwrap()),
    );
    let t2 = tx.clone();
    store.write(
        |conn| {
            conn.execute("INSERT INTO stream_touch_state VALUES ('s', 1, 1)", [])?;
            Err::<(), _>(Error::invalid("boom"))
        },
        Box::new(move |r| t2.send(r).unwrap()),
    );
    let t3 = tx.clone();
    store.append(
        AppendRequest { stream: "s".into(), payloads: vec![b"b".to_vec()], ..Default::default() },
        Box::new(move |r| t3.send(r.map(|_| ())).unwrap()),
    );
    drop(tx);
    let results: Vec<_> = rx.iter().collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
    let n: i64 =
        blocking(|r| store.query(|c| Ok(c.query_row("SELECT COUNT(*) FROM stream_touch_state", [], |r| r.get(0))?), r))
            .unwrap();
    assert_eq!(n, 0, "the failed job's insert was rolled back");
    let row = blocking(|r| store.get_stream("s".into(), r)).unwrap().unwrap();
    assert_eq!((row.next_offset, row.wal_rows), (2, 2), "both appends' counters survived the rollback");
}

/// A host connection holding a read statement open (as the Prisma Streams server's segmenter
/// does across its yields), and a write it makes after `commit` ran: fine when the store
/// commits on the host's connection, `SQLITE_BUSY_SNAPSHOT` when it commits on its own.
fn host_write_after(on_host: bool) -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let path = path.to_str().unwrap();
    // The host creates the file and the schema (our store does it the same way).
    drop(Store::open(path, StoreOptions::default()).unwrap());
    let host = crate::hostdb::Connection::open(path).unwrap();
    host.exec("PRAGMA journal_mode = WAL; CREATE TABLE IF NOT EXISTS host_t (v INTEGER);").unwrap();
    host.exec("INSERT INTO host_t VALUES (1), (2), (3);").unwrap();
    let store = if on_host {
        Store::open_on_host(path, StoreOptions::default(), host.clone()).unwrap()
    } else {
        Store::open(path, StoreOptions::default()).unwrap()
    };
    blocking(|r| store.create_stream("s".into(), None, None, r)).unwrap();
    let mut reading = host.prepare("SELECT v FROM host_t", false).unwrap();
    // The host is in the middle of a read (the statement stays stepped between its calls, and
    // the connection's lock is free, as between two JS calls).
    assert!(reading.lock().unwrap().step().unwrap());
    // The store commits while the host's read is open; then the host writes.
    append(&store, "s", &["x"]).unwrap();
    let host_write = host.exec("BEGIN IMMEDIATE; INSERT INTO host_t VALUES (4); COMMIT;");
    reading.lock().unwrap().reset();
    if let Err(e) = host_write {
        let _ = host.exec("ROLLBACK");
        blocking(|r| store.close(r)).unwrap();
        return Err(e);
    }
    // And the store waits for a host transaction to end before it commits.
    host.exec("BEGIN IMMEDIATE; INSERT INTO host_t VALUES (5);").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let req = AppendRequest { stream: "s".into(), payloads: vec![b"y".to_vec()], ..Default::default() };
    store.append(req, Box::new(move |r| tx.send(r.map(|o| o.first_offset)).unwrap()));
    if on_host {
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(),
            "no commit inside the host's transaction"
        );
    }
    host.exec("COMMIT;").unwrap();
    assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap().unwrap(), 1);
    assert_eq!(read_all(&store, "s").len(), 2);
    blocking(|r| store.close(r)).unwrap();
    host.close().unwrap();
    Ok(())
}

#[test]
fn a_store_on_the_hosts_connection_never_overtakes_the_hosts_open_read() {
    let err = host_write_after(false).unwrap_err();
    assert!(err.to_string().contains("locked") || err.to_string().contains("BUSY"), "{err}");
    host_write_after(true).unwrap();
}

#[test]
fn calls_of_every_size_land_row_by_row_in_order() {
    // Appends go in multi-row statements of up to 64 rows in power-of-two chunks: sizes around
    // each chunk boundary, with and without routing keys, must each land as their own rows.
    let (_d, store) = temp_store();
    blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
    let mut expected: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for (call, n) in [1usize, 2, 3, 7, 63, 64, 65, 127, 128, 129, 200, 1000].into_iter().enumerate() {
        let payloads: Vec<Vec<u8>> = (0..n).map(|i| format!("{{\"c\":{call},\"i\":{i}}}").into_bytes()).collect();
        let routing_keys = (call % 2 == 1).then(|| {
            (0..n).map(|i| (i % 3 != 0).then(|| format!("{:016x}", call * 10_000 + i).into_bytes())).collect::<Vec<_>>()
        });
        let req = AppendRequest {
            stream: "s".into(),
            payloads: payloads.clone(),
            routing_keys: routing_keys.clone(),
            ..Default::default()
        };
        let first = expected.len() as i64;
        let out = blocking(|r| store.append(req, r)).unwrap();
        assert_eq!((out.first_offset, out.next_offset), (first, first + n as i64));
        for (i, p) in payloads.into_iter().enumerate() {
            expected.push((p, routing_keys.as_ref().and_then(|k| k[i].clone())));
        }
    }
    let rows = read_all(&store, "s");
    assert_eq!(rows.len(), expected.len());
    for (o, (row, (payload, rk))) in rows.iter().zip(&expected).enumerate() {
        assert_eq!(row.offset, o as i64);
        assert_eq!(&row.payload, payload, "payload at offset {o}");
        assert_eq!(&row.routing_key, rk, "routing key at offset {o}");
    }
    let bytes: i64 = expected.iter().map(|(p, _)| p.len() as i64).sum();
    let st = blocking(|r| store.get_stream("s".into(), r)).unwrap().unwrap();
    assert_eq!((st.next_offset, st.wal_rows, st.wal_bytes), (expected.len() as i64, expected.len() as i64, bytes));
}
