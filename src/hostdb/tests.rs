use super::*;

fn mem() -> Connection {
    Connection::open(":memory:").unwrap()
}

fn storage(e: Error) -> (String, i32, String) {
    match e {
        Error::Storage { code, extended_code, message } => (code, extended_code, message),
        other => panic!("expected a storage error, got {other:?}"),
    }
}

#[test]
fn values_round_trip_with_their_types() {
    let c = mem();
    c.exec("CREATE TABLE t(v)").unwrap();
    let values = [
        Value::Null,
        Value::Integer(0),
        Value::Integer(i64::MIN),
        Value::Integer(i64::MAX),
        Value::Integer(9_007_199_254_740_993),
        Value::Real(1.5),
        Value::Real(-0.0),
        Value::Real(1e300),
        Value::Text(String::new()),
        Value::Text("é€😀 \u{0}inner nul".into()),
        Value::Blob(Vec::new()),
        Value::Blob(vec![0, 1, 2, 255]),
    ];
    let mut ins = c.prepare("INSERT INTO t(v) VALUES (?)", true).unwrap();
    for v in &values {
        let mut cur = ins.lock().unwrap();
        cur.bind_all([v.as_ref()]).unwrap();
        assert!(!cur.step().unwrap());
    }
    let rows = c.query_all("SELECT v, typeof(v) FROM t ORDER BY rowid", &[]).unwrap();
    let got: Vec<Value> = rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(got.len(), values.len());
    for (g, v) in got.iter().zip(&values) {
        match (g, v) {
            (Value::Real(a), Value::Real(b)) => assert_eq!(a.to_bits(), b.to_bits()),
            _ => assert_eq!(g, v),
        }
    }
    let types: Vec<Value> = rows.iter().map(|r| r[1].clone()).collect();
    let t = |s: &str| Value::Text(s.into());
    assert_eq!(types[0], t("null"));
    assert_eq!(types[8], t("text"), "an empty string is text, not NULL");
    assert_eq!(types[10], t("blob"), "an empty blob is a blob, not NULL");
}

#[test]
fn exec_runs_every_statement_and_stops_at_the_first_error() {
    let c = mem();
    c.exec("CREATE TABLE u(x); INSERT INTO u VALUES (1);\n -- a comment\n INSERT INTO u VALUES (2);  ").unwrap();
    let err = c.exec("INSERT INTO u VALUES (3); SELEC; INSERT INTO u VALUES (4);").unwrap_err();
    let (code, ext, msg) = storage(err);
    assert_eq!((code.as_str(), ext, msg.as_str()), ("SQLITE_ERROR", 1, "near \"SELEC\": syntax error"));
    let rows = c.query_all("SELECT x FROM u ORDER BY x", &[]).unwrap();
    assert_eq!(rows, vec![vec![Value::Integer(1)], vec![Value::Integer(2)], vec![Value::Integer(3)]]);
    c.exec("").unwrap();
    c.exec("SELECT 1; SELECT 2").unwrap();
}

#[test]
fn prepare_reports_sqlite_messages_and_refuses_empty_sql() {
    let c = mem();
    let (code, _, msg) = storage(c.prepare("SELEC 1", false).err().unwrap());
    assert_eq!(code, "SQLITE_ERROR");
    assert_eq!(msg, "near \"SELEC\": syntax error");
    let (_, _, msg) = storage(c.prepare("SELECT * FROM nope", false).err().unwrap());
    assert_eq!(msg, "no such table: nope");
    assert!(matches!(c.prepare("  -- only a comment\n", false).err().unwrap(), Error::InvalidArgument(_)));
    // Only the first statement is prepared, as bun:sqlite does.
    let mut s = c.prepare("SELECT 1 AS a; SELECT 2 AS b", false).unwrap();
    assert_eq!(s.lock().unwrap().column_names().unwrap(), vec!["a"]);
}

#[test]
fn constraint_errors_carry_extended_codes_and_leave_the_connection_usable() {
    let c = mem();
    c.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, b TEXT UNIQUE)").unwrap();
    let mut ins = c.prepare("INSERT INTO t(b) VALUES (?)", false).unwrap();
    let mut run = |b: &str| -> Result<bool> {
        let mut cur = ins.lock()?;
        cur.bind_all([ValueRef::Text(b.as_bytes())])?;
        cur.step()
    };
    run("x").unwrap();
    let (code, ext, msg) = storage(run("x").unwrap_err());
    assert_eq!((code.as_str(), ext, msg.as_str()), ("SQLITE_CONSTRAINT", 2067, "UNIQUE constraint failed: t.b"));
    run("y").unwrap();
    assert_eq!(c.query_all("SELECT count(*) FROM t", &[]).unwrap(), vec![vec![Value::Integer(2)]]);
}

#[test]
fn a_statement_steps_across_locks_and_restarts_after_reset() {
    let c = mem();
    c.exec("CREATE TABLE t(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<10) INSERT INTO t SELECT i FROM n;")
        .unwrap();
    let mut s = c.prepare("SELECT x FROM t WHERE x > ? ORDER BY x", true).unwrap();
    let read = |s: &mut Statement, n: usize| -> Vec<i64> {
        let mut cur = s.lock().unwrap();
        let mut out = Vec::new();
        while out.len() < n && cur.step().unwrap() {
            match cur.value(0).unwrap() {
                ValueRef::Integer(v) => out.push(v),
                other => panic!("{other:?}"),
            }
        }
        out
    };
    s.lock().unwrap().bind_all([ValueRef::Integer(3)]).unwrap();
    assert_eq!(read(&mut s, 2), vec![4, 5]);
    // Another statement runs in between; the first goes on where it was.
    assert_eq!(c.query_all("SELECT count(*) FROM t", &[]).unwrap(), vec![vec![Value::Integer(10)]]);
    assert_eq!(read(&mut s, 2), vec![6, 7]);
    s.lock().unwrap().reset();
    assert_eq!(read(&mut s, 100), vec![4, 5, 6, 7, 8, 9, 10], "reset keeps the bindings");
    let mut cur = s.lock().unwrap();
    cur.clear_bindings().unwrap();
    assert!(!cur.step().unwrap(), "x > NULL matches nothing");
}

#[test]
fn changes_and_rowids_follow_the_connection() {
    let c = mem();
    c.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, a); CREATE TABLE z(x);").unwrap();
    c.exec("CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO z VALUES (new.id); END;").unwrap();
    let mut ins = c.prepare("INSERT INTO t(a) VALUES (?)", false).unwrap();
    let mut cur = ins.lock().unwrap();
    let before = cur.total_changes();
    cur.bind_all([ValueRef::Integer(7)]).unwrap();
    assert!(!cur.step().unwrap());
    assert_eq!(cur.total_changes() - before, 2, "the trigger's insert counts too");
    assert_eq!(cur.last_insert_rowid(), 1);
    drop(cur);
    assert_eq!(c.changes().unwrap(), 1);
    assert_eq!(c.last_insert_rowid().unwrap(), 1);
    assert_eq!(c.total_changes().unwrap(), 2);
}

#[test]
fn column_names_follow_aliases_and_schema_changes() {
    let c = mem();
    c.exec("CREATE TABLE t(a, b); INSERT INTO t VALUES (1, 2);").unwrap();
    let mut s = c.prepare("SELECT 1 AS x, 2 AS x, b FROM t", false).unwrap();
    assert_eq!(s.lock().unwrap().column_names().unwrap(), vec!["x", "x", "b"]);
    let mut star = c.prepare("SELECT * FROM t", true).unwrap();
    {
        let mut cur = star.lock().unwrap();
        assert!(cur.step().unwrap());
        assert_eq!(cur.column_count(), 2);
        cur.reset();
    }
    let before = star.lock().unwrap().reprepare_count();
    c.exec("ALTER TABLE t ADD COLUMN c DEFAULT 3").unwrap();
    let mut cur = star.lock().unwrap();
    assert!(cur.step().unwrap());
    assert_eq!(cur.column_names().unwrap(), vec!["a", "b", "c"]);
    assert!(cur.reprepare_count() > before);
    assert!(cur.column_name(3).is_err());
}

#[test]
fn finalize_and_close_end_statements() {
    let c = mem();
    let mut a = c.prepare("SELECT 1", false).unwrap();
    let mut b = c.prepare("SELECT 2", false).unwrap();
    a.finalize();
    a.finalize();
    assert!(a.is_finalized());
    assert_eq!(a.lock().err().unwrap(), Error::Closed("statement"));
    assert!(!b.is_finalized());
    c.close().unwrap();
    c.close().unwrap();
    assert!(c.is_closed());
    assert!(b.is_finalized());
    assert_eq!(b.lock().err().unwrap(), Error::Closed("statement"));
    assert_eq!(c.exec("SELECT 1").unwrap_err(), Error::Closed("database"));
    assert_eq!(c.prepare("SELECT 1", false).err().unwrap(), Error::Closed("database"));
    b.finalize(); // no double finalize after close
    drop(b);
}

#[test]
fn the_connection_lives_while_a_statement_does() {
    let c = mem();
    c.exec("CREATE TABLE t(x); INSERT INTO t VALUES (42);").unwrap();
    let mut s = c.prepare("SELECT x FROM t", false).unwrap();
    drop(c);
    let mut cur = s.lock().unwrap();
    assert!(cur.step().unwrap());
    assert_eq!(cur.value(0).unwrap(), ValueRef::Integer(42));
}

#[test]
fn statements_may_be_dropped_on_another_thread() {
    let c = mem();
    c.exec("CREATE TABLE t(x)").unwrap();
    let stmts: Vec<Statement> = (0..50).map(|_| c.prepare("INSERT INTO t VALUES (1)", false).unwrap()).collect();
    let dropper = std::thread::spawn(move || drop(stmts));
    for _ in 0..200 {
        c.exec("INSERT INTO t VALUES (2)").unwrap();
    }
    dropper.join().unwrap();
    assert_eq!(c.query_all("SELECT count(*) FROM t", &[]).unwrap(), vec![vec![Value::Integer(200)]]);
}

#[test]
fn two_connections_share_a_wal_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.sqlite");
    let path = path.to_str().unwrap();
    let a = Connection::open(path).unwrap();
    let b = Connection::open(path).unwrap();
    assert_eq!(a.query_all("PRAGMA busy_timeout", &[]).unwrap(), vec![vec![Value::Integer(5000)]]);
    a.exec("PRAGMA journal_mode = WAL; CREATE TABLE t(x);").unwrap();
    a.exec("INSERT INTO t VALUES (1)").unwrap();
    assert_eq!(b.query_all("SELECT count(*) FROM t", &[]).unwrap(), vec![vec![Value::Integer(1)]]);
    // A writer holding the write lock makes the other's write wait, then fail with SQLITE_BUSY.
    a.exec("BEGIN IMMEDIATE; INSERT INTO t VALUES (2);").unwrap();
    b.exec("PRAGMA busy_timeout = 0").unwrap();
    let (code, ext, msg) = storage(b.exec("INSERT INTO t VALUES (3)").unwrap_err());
    assert_eq!((code.as_str(), ext, msg.as_str()), ("SQLITE_BUSY", 5, "database is locked"));
    a.exec("COMMIT").unwrap();
    b.exec("INSERT INTO t VALUES (3)").unwrap();
    assert_eq!(a.query_all("SELECT sum(x) FROM t", &[]).unwrap(), vec![vec![Value::Integer(6)]]);
}

#[test]
fn bad_paths_fail_with_sqlite_errors() {
    let (code, _, _) = storage(Connection::open("/nonexistent-dir/x/y.sqlite").err().unwrap());
    assert_eq!(code, "SQLITE_CANTOPEN");
    assert!(matches!(Connection::open("a\0b").err().unwrap(), Error::InvalidArgument(_)));
}

#[test]
fn binding_past_the_parameters_is_a_range_error() {
    let c = mem();
    let mut s = c.prepare("SELECT ?", false).unwrap();
    let mut cur = s.lock().unwrap();
    assert_eq!(cur.parameter_count(), 1);
    let (code, ext, _) = storage(cur.bind(2, ValueRef::Integer(1)).unwrap_err());
    assert_eq!((code.as_str(), ext), ("SQLITE_RANGE", 25));
}
