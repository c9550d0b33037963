// compat/sqlite-adapter.mjs: the reference server's `sqlite/adapter.ts` on durable-touch's SQLite.
// Every method and value type, transactions, iterate, errors, two connections on one file, a
// worker thread, and a differential run of one script against the reference's own adapter
// (bun:sqlite) under Bun.
import assert from "node:assert/strict";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { test, tempDir } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { runScript } from "./support/sqlite-script.mjs";
import * as adapter from "../compat/sqlite-adapter.mjs";
import * as compat from "../compat/index.mjs";

const { openSqliteDatabase, getSqliteAdapterRuntimeCounts, setSqliteRuntimeOverride } = adapter;

const fresh = (name = "t.sqlite") => openSqliteDatabase(join(tempDir("dt-sqlad-"), name));
const throwsWith = (f, check) => {
  let err;
  try {
    f();
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof Error, "expected a throw");
  for (const [k, v] of Object.entries(check)) {
    if (v instanceof RegExp) assert.match(String(err[k]), v, k);
    else assert.equal(err[k], v, k);
  }
  return err;
};

test("exports what the reference adapter exports at runtime, and hostConnectionOf", () => {
  // The swap's shim re-exports the reference's three names only.
  assert.deepEqual(Object.keys(adapter).sort(), ["getSqliteAdapterRuntimeCounts", "hostConnectionOf", "openSqliteDatabase", "setSqliteRuntimeOverride"]);
  assert.equal(compat.sqliteAdapter.openSqliteDatabase, openSqliteDatabase);
  setSqliteRuntimeOverride("node");
  setSqliteRuntimeOverride("bun");
  setSqliteRuntimeOverride(null);
});

test("a second copy of the module in the same thread reads correct rows", async () => {
  const again = await import(`../compat/sqlite-adapter.mjs?copy=${Date.now()}`);
  assert.notEqual(again.openSqliteDatabase, openSqliteDatabase);
  const a = openSqliteDatabase(":memory:");
  const b = again.openSqliteDatabase(":memory:");
  assert.deepEqual(b.query("SELECT 7 AS v, 'b' AS s").get(), { v: 7, s: "b" });
  assert.deepEqual(a.query("SELECT 8 AS v, 'a' AS s").get(), { v: 8, s: "a" });
  assert.deepEqual(b.query("SELECT 9 AS v").all(), [{ v: 9 }]);
  a.close();
  b.close();
});

test("parameters bind with bun:sqlite's types; rows come back typed", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v)");
  const ins = db.query("INSERT INTO t(v) VALUES (?)");
  const typeOf = db.query("SELECT v, typeof(v) AS t, hex(v) AS h FROM t WHERE id = ?");
  const cases = [
    [1, 1, "integer"],
    [-9007199254740991, -9007199254740991, "integer"],
    [9007199254740992, 9007199254740992, "real"],
    [1.5, 1.5, "real"],
    [-0, -0, "real"],
    [Number.NaN, null, "null"],
    [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, "real"],
    [42n, 42, "integer"],
    [2n ** 62n, 2n ** 62n, "integer"],
    [-(2n ** 63n), -(2n ** 63n), "integer"],
    [-9007199254740993n, -9007199254740993n, "integer"],
    ["é€😀", "é€😀", "text"],
    ["", "", "text"],
    [true, 1, "integer"],
    [false, 0, "integer"],
    [null, null, "null"],
    [undefined, null, "null"],
  ];
  for (const [param, want, type] of cases) {
    const { lastInsertRowid, changes } = ins.run(param);
    assert.equal(changes, 1);
    const row = typeOf.get(lastInsertRowid);
    assert.equal(row.t, type, `typeof for ${String(param)}`);
    if (typeof want === "number" && Number.isNaN(want)) assert.ok(Number.isNaN(row.v));
    else assert.ok(Object.is(row.v, want), `${String(param)} came back as ${String(row.v)}`);
  }
  const blobs = [
    [new Uint8Array([1, 2, 3]), "010203"],
    [Buffer.from("ab"), "6162"],
    [new Uint8Array(0), ""],
    [new Uint16Array([1, 0xff00]), "010000FF"],
    [new DataView(new Uint8Array([9, 8, 7, 6]).buffer, 1, 2), "0807"],
    [new Uint8Array([5, 6, 7]).subarray(1), "0607"],
    [new Uint8Array([4, 5]).buffer, "0405"],
  ];
  for (const [param, hex] of blobs) {
    const { lastInsertRowid } = ins.run(param);
    const row = typeOf.get(lastInsertRowid);
    assert.equal(row.t, "blob");
    assert.equal(row.h, hex);
    assert.equal(row.v.constructor, Uint8Array);
    assert.equal(Buffer.from(row.v).toString("hex").toUpperCase(), hex);
  }
  db.close();
});

test("integers beyond 2^53 read back as bigints, safe ones as numbers", () => {
  const db = fresh();
  const row = db.query("SELECT 9007199254740991 AS a, 9007199254740992 AS b, -9007199254740992 AS c, 9223372036854775807 AS d, -9223372036854775808 AS e, 1.0 AS f").get();
  assert.deepEqual(row, { a: 9007199254740991, b: 9007199254740992n, c: -9007199254740992n, d: 9223372036854775807n, e: -9223372036854775808n, f: 1 });
  db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY)");
  const r = db.query("INSERT INTO t(id) VALUES (?)").run(2n ** 60n);
  assert.equal(r.lastInsertRowid, 2n ** 60n);
  assert.equal(db.query("INSERT INTO t(id) VALUES (?)").run(5).lastInsertRowid, 5);
  db.close();
});

test("bad parameters are refused with ERR_INVALID_ARGUMENT, the statement stays usable", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(a, b)");
  const ins = db.query("INSERT INTO t VALUES (?, ?)");
  throwsWith(() => ins.run(1), { code: "ERR_INVALID_ARGUMENT", message: "SQLite query expected 2 values, received 1" });
  throwsWith(() => ins.run(1, 2, 3), { code: "ERR_INVALID_ARGUMENT", message: "SQLite query expected 2 values, received 3" });
  throwsWith(() => ins.run({ $a: 1 }, 2), { code: "ERR_INVALID_ARGUMENT", message: /named parameters are not supported/ });
  throwsWith(() => ins.run(1, Symbol("s")), { code: "ERR_INVALID_ARGUMENT", message: /^Binding expected string, TypedArray/ });
  throwsWith(() => ins.run(1, () => 1), { code: "ERR_INVALID_ARGUMENT" });
  throwsWith(() => ins.run(1, [1, 2]), { code: "ERR_INVALID_ARGUMENT" });
  throwsWith(() => ins.run(1, 2n ** 63n), { code: "ERR_INVALID_ARGUMENT", message: /64-bit/ });
  assert.equal(ins.run(1, 2).changes, 1);
  // No arguments: the previous bindings are used again (as bun:sqlite does).
  assert.equal(ins.run().changes, 1);
  assert.deepEqual(db.query("SELECT a, b FROM t").all(), [{ a: 1, b: 2 }, { a: 1, b: 2 }]);
  db.close();
});

test("get, all, run and exec behave as bun:sqlite's", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE audit(x); CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO audit VALUES (new.id); END;");
  const ins = db.query("INSERT INTO t(name) VALUES (?)");
  assert.deepEqual(ins.run("a"), { changes: 2, lastInsertRowid: 1 }, "changes count the trigger's rows");
  assert.deepEqual(ins.run("b"), { changes: 2, lastInsertRowid: 2 });
  assert.deepEqual(db.query("SELECT name FROM t").run(), { changes: 0, lastInsertRowid: 2 });
  assert.equal(db.query("SELECT * FROM t WHERE id = ?").get(99), null);
  assert.deepEqual(db.query("SELECT * FROM t WHERE id = ?").all(99), []);
  assert.deepEqual(db.query("SELECT id, name FROM t ORDER BY id").all(), [{ id: 1, name: "a" }, { id: 2, name: "b" }]);
  assert.deepEqual(db.query("SELECT 1 AS x, 2 AS x, 3 AS y").get(), { x: 2, y: 3 });
  const proto = db.query(`SELECT 1 AS "__proto__", 2 AS "constructor"`).get();
  assert.equal(Object.getPrototypeOf(proto), Object.prototype);
  assert.deepEqual(Object.keys(proto), ["__proto__", "constructor"]);
  assert.equal(Object.getOwnPropertyDescriptor(proto, "__proto__").value, 1);
  assert.deepEqual(db.query("INSERT INTO t(name) VALUES (?) RETURNING id, name").get("c"), { id: 3, name: "c" });
  assert.deepEqual(db.query("UPDATE t SET name = name || '!' RETURNING name").all(), [{ name: "a!" }, { name: "b!" }, { name: "c!" }]);
  assert.equal(db.query("INSERT INTO t(name) VALUES ('d')").get(), null);
  assert.deepEqual(db.query("SELECT ?2 AS b, ?1 AS a").get("one", "two"), { b: "two", a: "one" });
  db.exec("INSERT INTO t(name) VALUES ('e'); INSERT INTO t(name) VALUES ('f');\n-- trailing comment\n");
  assert.equal(db.query("SELECT count(*) AS n FROM t").get().n, 6);
  throwsWith(() => db.query(""), { code: "ERR_INVALID_ARGUMENT", message: "SQL query cannot be empty." });
  // Large results cross several native calls.
  const n = 5000;
  const rows = db.query("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) SELECT i, 'r' || i AS s, x'ff' AS b FROM c").all(n);
  assert.equal(rows.length, n);
  for (let i = 0; i < n; i++) assert.equal(rows[i].i, i + 1);
  assert.equal(rows[n - 1].s, `r${n}`);
  assert.deepEqual(Array.from(rows[1234].b), [255]);
  db.close();
});

test("rows follow a schema change under the same statement", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(a); INSERT INTO t VALUES (1);");
  const star = db.query("SELECT * FROM t");
  assert.deepEqual(star.get(), { a: 1 });
  db.exec("ALTER TABLE t ADD COLUMN b DEFAULT 'two'");
  assert.deepEqual(star.get(), { a: 1, b: "two" });
  assert.deepEqual(star.all(), [{ a: 1, b: "two" }]);
  db.close();
});

test("iterate steps lazily, resets on an early break, and the statement is reusable", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(i INTEGER PRIMARY KEY, p BLOB); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1000) INSERT INTO t SELECT i, randomblob(100) FROM c;");
  const s = db.query("SELECT i, p FROM t WHERE i > ? ORDER BY i");
  const it = s.iterate(0);
  assert.equal(typeof it[Symbol.iterator], "function");
  assert.equal(it[Symbol.iterator](), it);
  let seen = 0;
  for (const row of it) {
    assert.equal(row.i, ++seen);
    assert.equal(row.p.byteLength, 100);
    if (seen === 50) break;
  }
  // The break reset the statement: nothing holds the table, so it can be dropped... after the
  // statement is used again in full.
  assert.equal([...s.iterate(0)].length, 1000);
  assert.equal(s.all(990).length, 10);
  assert.deepEqual(s.get(998).i, 999);
  const partial = s.iterate(0);
  partial.next();
  partial.return();
  assert.deepEqual(partial.next(), { value: undefined, done: true });
  s.finalize();
  db.exec("DROP TABLE t"); // would fail with "database table is locked" if a read were open
  // Errors in parameters surface at the first step, as with bun:sqlite's generator.
  db.exec("CREATE TABLE u(x)");
  const u = db.query("SELECT x FROM u WHERE x = ?");
  const bad = u.iterate(1, 2);
  throwsWith(() => bad.next(), { code: "ERR_INVALID_ARGUMENT" });
  assert.deepEqual(bad.next(), { value: undefined, done: true });
  db.close();
});

test("an iterator whose statement was run again stops with an error", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(i); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 100) INSERT INTO t SELECT i FROM c;");
  const s = db.query("SELECT i FROM t ORDER BY i");
  const it = s.iterate();
  assert.equal(it.next().value.i, 1);
  assert.equal(s.get().i, 1);
  throwsWith(() => it.next(), { code: "ERR_CLOSED", message: /run again/ });
  assert.equal(s.all().length, 100);
  const it2 = s.iterate();
  it2.next();
  s.finalize();
  throwsWith(() => it2.next(), { code: "ERR_CLOSED" });
  db.close();
});

test("transactions: BEGIN/COMMIT outermost, savepoints inside, rollback on throw", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(name TEXT UNIQUE)");
  const ins = db.query("INSERT INTO t VALUES (?)");
  const names = () => db.query("SELECT name FROM t ORDER BY name").all().map((r) => r.name);
  assert.equal(db.transaction((a, b) => a + b)(2, 3), 5);
  const boom = new Error("boom");
  const err = throwsWith(
    () =>
      db.transaction(() => {
        ins.run("rolled-back");
        throw boom;
      })(),
    { message: "boom" }
  );
  assert.equal(err, boom);
  assert.deepEqual(names(), []);
  const out = db.transaction(() => {
    ins.run("outer");
    const inner = db.transaction(() => {
      ins.run("inner");
      db.transaction(() => ins.run("innermost"))();
      throw new Error("inner fails");
    });
    assert.throws(() => inner(), /inner fails/);
    db.transaction(() => ins.run("second"))();
    return "done";
  })();
  assert.equal(out, "done");
  assert.deepEqual(names(), ["outer", "second"]);
  // A constraint error inside rolls the whole transaction back; the connection stays usable.
  throwsWith(
    () =>
      db.transaction(() => {
        ins.run("third");
        ins.run("outer");
      })(),
    { code: "ERR_STORAGE", message: "UNIQUE constraint failed: t.name", errno: 2067 }
  );
  assert.deepEqual(names(), ["outer", "second"]);
  const tx = db.transaction(() => ins.run("again"));
  tx();
  assert.deepEqual(names(), ["again", "outer", "second"]);
  db.close();
});

test("SQLite errors carry SQLite's message, errno and sqliteCode; the connection stays usable", () => {
  const db = fresh();
  db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, b TEXT NOT NULL UNIQUE)");
  throwsWith(() => db.query("SELEC 1"), { code: "ERR_STORAGE", message: 'near "SELEC": syntax error', errno: 1, sqliteCode: "SQLITE_ERROR" });
  throwsWith(() => db.exec("SELECT * FROM nope"), { code: "ERR_STORAGE", message: "no such table: nope", errno: 1 });
  const ins = db.query("INSERT INTO t(b) VALUES (?)");
  ins.run("x");
  throwsWith(() => ins.run("x"), { code: "ERR_STORAGE", message: "UNIQUE constraint failed: t.b", errno: 2067, sqliteCode: "SQLITE_CONSTRAINT", sqliteExtendedCode: 2067 });
  throwsWith(() => ins.run(null), { message: "NOT NULL constraint failed: t.b", errno: 1299 });
  assert.equal(ins.run("y").changes, 1);
  assert.equal(db.query("SELECT count(*) AS n FROM t").get().n, 2);
  db.close();
});

test("counts, the query cache, finalize and close", () => {
  const base = getSqliteAdapterRuntimeCounts();
  const db = fresh();
  const counts = () => {
    const c = getSqliteAdapterRuntimeCounts();
    return [c.open_connections - base.open_connections, c.prepared_statements - base.prepared_statements];
  };
  assert.deepEqual(counts(), [1, 0]);
  const q1 = db.query("SELECT 1 AS v");
  assert.equal(db.query("SELECT 1 AS v"), q1, "query() caches per SQL text");
  const p1 = db.prepare("SELECT 1 AS v");
  const p2 = db.prepare("SELECT 1 AS v");
  assert.notEqual(p1, p2);
  assert.deepEqual(counts(), [1, 3]);
  assert.throws(() => db.query("SELEC"));
  assert.deepEqual(counts(), [1, 3], "a failed prepare is not counted");
  p1.finalize();
  p1.finalize();
  assert.deepEqual(counts(), [1, 2]);
  throwsWith(() => p1.get(), { code: "ERR_CLOSED", message: "Statement has finalized" });
  q1.finalize();
  assert.deepEqual(counts(), [1, 1]);
  const q2 = db.query("SELECT 1 AS v");
  assert.notEqual(q2, q1, "a finalized cached statement leaves the cache");
  assert.deepEqual(q2.get(), { v: 1 });
  const other = fresh("other.sqlite");
  assert.deepEqual(counts(), [2, 2]);
  db.close();
  db.close();
  assert.deepEqual(counts(), [1, 0]);
  p2.finalize(); // after close: no double count
  assert.deepEqual(counts(), [1, 0]);
  throwsWith(() => q2.get(), { code: "ERR_CLOSED", message: "Statement has finalized" });
  throwsWith(() => db.query("SELECT 2"), { name: "RangeError", code: "ERR_CLOSED", message: "Cannot use a closed database" });
  throwsWith(() => db.prepare("SELECT 2"), { message: "Cannot use a closed database" });
  throwsWith(() => db.exec("SELECT 2"), { code: "ERR_CLOSED", message: "Database has closed" });
  other.close();
  assert.deepEqual(counts(), [0, 0]);
});

test("two connections on one WAL file see each other's commits; a held lock is SQLITE_BUSY", () => {
  const dir = tempDir("dt-sqlad-");
  const a = openSqliteDatabase(join(dir, "shared.sqlite"));
  const b = openSqliteDatabase(join(dir, "shared.sqlite"));
  assert.deepEqual(a.query("PRAGMA busy_timeout").get(), { timeout: 5000 });
  a.exec("PRAGMA journal_mode = WAL; CREATE TABLE t(x);");
  a.query("INSERT INTO t VALUES (?)").run(1);
  assert.equal(b.query("SELECT sum(x) AS s FROM t").get().s, 1);
  b.transaction(() => b.query("INSERT INTO t VALUES (?)").run(2))();
  assert.equal(a.query("SELECT sum(x) AS s FROM t").get().s, 3);
  a.exec("BEGIN IMMEDIATE");
  b.exec("PRAGMA busy_timeout = 0");
  throwsWith(() => b.query("INSERT INTO t VALUES (?)").run(3), { code: "ERR_STORAGE", errno: 5, message: "database is locked", sqliteCode: "SQLITE_BUSY" });
  a.exec("COMMIT");
  b.query("INSERT INTO t VALUES (?)").run(3);
  assert.equal(a.query("SELECT sum(x) AS s FROM t").get().s, 6);
  a.close();
  b.close();
});

test("a connection in a worker thread shares the file with the main thread", async () => {
  const dir = tempDir("dt-sqlad-");
  const path = join(dir, "worker.sqlite");
  const db = openSqliteDatabase(path);
  db.exec("PRAGMA journal_mode = WAL; CREATE TABLE t(who TEXT, n INTEGER, data BLOB);");
  db.transaction(() => {
    for (let i = 0; i < 100; i++) db.query("INSERT INTO t VALUES ('main', ?, NULL)").run(i);
  })();
  const before = getSqliteAdapterRuntimeCounts();
  const worker = new Worker(new URL("./support/sqlite-adapter-worker.mjs", import.meta.url), { workerData: { path, rows: 300 } });
  const msg = await new Promise((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
  });
  await new Promise((resolve) => (worker.threadId === -1 ? resolve() : worker.once("exit", resolve)));
  assert.equal(msg.error, undefined, msg.error);
  assert.deepEqual(msg.seen, [{ who: "main", n: 100 }, { who: "worker", n: 300 }]);
  assert.deepEqual(msg.last, [299 & 255, 7]);
  assert.equal(msg.counts.open_connections, 1, "each thread counts its own connections");
  assert.deepEqual(getSqliteAdapterRuntimeCounts(), before);
  assert.equal(db.query("SELECT count(*) AS n FROM t WHERE who = 'worker'").get().n, 300);
  db.close();
});

test("differential: one script through the reference adapter (bun:sqlite) and ours", async () => {
  const theirs = await runReference("sqlite-adapter", {}, { retries: 2 });
  const ours = runScript(openSqliteDatabase, tempDir("dt-sqlad-"));
  assert.equal(ours.length, theirs.length);
  let bigints = 0;
  // Equal, except where bun:sqlite returns a lossy number for an integer beyond 2^53 and we a
  // bigint (docs/deviations.md): then the bigint must round to their number.
  const same = (a, b, path) => {
    if (a && typeof a === "object" && "$bigint" in a && typeof b === "number") {
      const big = BigInt(a.$bigint);
      assert.ok(big > 9007199254740991n || big < -9007199254740991n, `${path}: a safe integer came back as a bigint`);
      assert.equal(Number(big), b, path);
      bigints++;
      return;
    }
    if (a && b && typeof a === "object" && typeof b === "object") {
      assert.deepEqual(Object.keys(a), Object.keys(b), path);
      for (const k of Object.keys(a)) same(a[k], b[k], `${path}.${k}`);
      return;
    }
    assert.deepEqual(a, b, path);
  };
  for (let i = 0; i < ours.length; i++) {
    assert.equal(ours[i][0], theirs[i][0]);
    same(ours[i][1], theirs[i][1], ours[i][0]);
  }
  assert.ok(bigints >= 3, `the script reads integers beyond 2^53 (${bigints} seen)`);
}, { skip: !referenceAvailable(), timeout: 120_000 });

test("a Store opened on the host's connection commits on it, between the host's own statements", async () => {
  const { Store } = await import("../index.js");
  const path = join(tempDir("dt-sqlad-host-"), "h.sqlite");
  // The file and its schema first (as the server's initSchema makes them), then the host.
  await Store.open(path).close();
  const db = openSqliteDatabase(path);
  const handle = adapter.hostConnectionOf(db);
  assert.ok(handle !== undefined);
  assert.equal(adapter.hostConnectionOf({}), undefined);
  assert.equal(adapter.hostConnectionOf(null), undefined);
  const store = Store.open(path, { hostConnection: handle });
  try {
    await store.createStream("s", { contentType: "application/json" });
    // The host holds a read open across the store's commit (more rows than one native read
    // takes), then writes: no SQLITE_BUSY_SNAPSHOT.
    db.exec("CREATE TABLE host_t (v INTEGER); INSERT INTO host_t SELECT value FROM json_each('[" + Array.from({ length: 500 }, (_, i) => i).join(",") + "]');");
    const it = db.query("SELECT v FROM host_t").iterate();
    assert.equal(it.next().value.v, 0);
    await store.append("s", ["1", "2"]);
    db.transaction(() => db.query("UPDATE streams SET updated_at_ms = updated_at_ms + 1 WHERE stream = ?").run("s"))();
    it.return();
    assert.equal(db.query("SELECT COUNT(*) AS n FROM wal WHERE stream = 's'").get().n, 2, "the host reads the store's rows");
    assert.throws(() => Store.open(path, { hostConnection: {} }), { code: "ERR_INVALID_ARGUMENT" });
    assert.throws(() => Store.open(":memory:", { hostConnection: handle }), { code: "ERR_INVALID_ARGUMENT" });
  } finally {
    await store.close();
    db.close();
  }
});
