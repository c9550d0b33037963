// A worker thread for compat-sqlite-adapter.spec.mjs: opens the file it is given with the
// adapter, writes rows, reads what the main thread wrote, and reports.
import { parentPort, workerData } from "node:worker_threads";
import { openSqliteDatabase, getSqliteAdapterRuntimeCounts } from "../../compat/sqlite-adapter.mjs";

const { path, rows } = workerData;
const db = openSqliteDatabase(path);
try {
  db.exec("PRAGMA journal_mode = WAL;");
  const ins = db.query("INSERT INTO t(who, n, data) VALUES (?, ?, ?)");
  db.transaction(() => {
    for (let i = 0; i < rows; i++) ins.run("worker", i, new Uint8Array([i & 255, 7]));
  })();
  const seen = db.query("SELECT who, count(*) AS n FROM t GROUP BY who ORDER BY who").all();
  const last = db.query("SELECT data FROM t WHERE who = 'worker' ORDER BY n DESC LIMIT 1").get();
  const counts = getSqliteAdapterRuntimeCounts();
  parentPort.postMessage({ seen, last: Array.from(last.data), counts });
} catch (e) {
  parentPort.postMessage({ error: String(e?.message ?? e) });
} finally {
  db.close();
}
