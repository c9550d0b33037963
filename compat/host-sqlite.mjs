// The compat pool's only contact with the host's SQLite file: it opens the file with the host
// runtime's own binding (`bun:sqlite` under Bun, `node:sqlite` under Node where it exists, or
// a driver the host passes in) and never with durable-touch's native SQLite — two SQLite
// copies in one process break each other's POSIX locks (sqlite.org, "How To Corrupt An
// SQLite Database File", 2.2.1).
//
// What it reads is exactly what the reference worker (`touch/processor_worker.ts`) reads for
// one batch: the stream's active templates (its query, unchanged, no ORDER BY) with their JSON
// columns parsed, and the WAL rows of the range up to the batch limits. Everything else (which
// templates count, budgets, keys, coalescing) is the native processor's business.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** The reference's `DEFAULT_PRAGMAS_SQL` (db/schema.ts), which its workers apply too. */
const PRAGMAS = `
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
PRAGMA foreign_keys = ON;
PRAGMA busy_timeout = 5000;
PRAGMA temp_store = MEMORY;
`;

/** The reference worker's template query, character for character. */
export const ACTIVE_TEMPLATES_SQL = `SELECT template_id, entity, fields_json, encodings_json, active_from_source_offset
           FROM live_templates
           WHERE stream=? AND state='active';`;

/** The reference's WAL range read (`iterWalRange`), reduced to the columns the worker uses. */
export const WAL_RANGE_SQL = "SELECT offset, ts_ms, payload FROM wal WHERE stream=? AND offset>=? AND offset<=? ORDER BY offset";

export const isBun = typeof globalThis.Bun !== "undefined" || Boolean(process.versions?.bun);

/**
 * Opens `path` with the host runtime's binding. Returns a database with `exec(sql)`,
 * `prepare(sql)` → statement (`all(...)`, `iterate(...)`) and `close()`; integers come back
 * as bigints. `open`, when given, is the host's own opener with that shape.
 */
export function openHostDatabase(path, open) {
  if (typeof open === "function") return open(path);
  if (isBun) {
    const { Database } = require("bun:sqlite");
    return new Database(path, { safeIntegers: true });
  }
  const sqlite = loadNodeSqlite();
  if (!sqlite) {
    throw new Error(
      "durable-touch/compat: the host runtime has no SQLite binding (bun:sqlite under Bun, node:sqlite under Node >= 22.13); " +
        "pass { openDatabase } to TouchProcessorWorkerPool"
    );
  }
  const db = new sqlite.DatabaseSync(path);
  const prepare = db.prepare.bind(db);
  db.prepare = (sql) => {
    const stmt = prepare(sql);
    if (typeof stmt.setReadBigInts === "function") stmt.setReadBigInts(true);
    return stmt;
  };
  return db;
}

function loadNodeSqlite() {
  try {
    return process.getBuiltinModule?.("node:sqlite") ?? require("node:sqlite");
  } catch {
    return null;
  }
}

/** One open connection on the host's file, with the reference worker's settings. */
export class HostReader {
  /** `cacheBytes`: the reference's `workerSqliteCacheBytes` (a `cache_size` pragma). */
  constructor(path, { cacheBytes = 0, open } = {}) {
    this.db = openHostDatabase(path, open);
    try {
      this.db.exec(PRAGMAS);
      if (cacheBytes && cacheBytes > 0) this.db.exec(`PRAGMA cache_size = -${Math.max(1, Math.floor(cacheBytes / 1024))};`);
    } catch (e) {
      this.close();
      throw e;
    }
    this.templates = null;
  }

  /**
   * The stream's active templates as `processRows` takes them. Like the worker: a row whose
   * JSON columns do not parse to arrays is skipped, elements go through `String()`, and a
   * table that cannot be read means "no templates". The worker reads the whole list inside
   * one try block, so an `active_from_source_offset` that `BigInt()` rejects ends the list
   * there (the rows before it stay).
   */
  activeTemplates(stream) {
    const out = [];
    let rows;
    try {
      this.templates ??= this.db.prepare(ACTIVE_TEMPLATES_SQL);
      rows = this.templates.all(stream);
    } catch {
      this.templates = null;
      return out;
    }
    for (const row of rows) {
      let fields;
      let encodings;
      try {
        fields = JSON.parse(String(row.fields_json ?? "[]"));
        encodings = JSON.parse(String(row.encodings_json ?? "[]"));
      } catch {
        continue;
      }
      if (!Array.isArray(fields) || !Array.isArray(encodings)) continue;
      let activeFromSourceOffset;
      try {
        const raw = row.active_from_source_offset;
        activeFromSourceOffset = typeof raw === "bigint" ? raw : BigInt(raw ?? 0);
      } catch {
        break;
      }
      out.push({
        templateId: String(row.template_id ?? ""),
        entity: String(row.entity ?? ""),
        fields: fields.map(String),
        encodings: encodings.map(String),
        activeFromSourceOffset,
      });
    }
    return out;
  }

  /**
   * The WAL rows `fromOffset..=toOffset` the batch will take: reading stops where the worker
   * stops (`rowsRead > 0 && (rowsRead >= maxRows || bytesRead + len > maxBytes)`).
   */
  walRows(stream, fromOffset, toOffset, maxRows, maxBytes) {
    const rows = [];
    let bytes = 0;
    // A statement per batch, finalized after, as the reference's `iterWalRange` does (a Bun
    // statement left mid-iteration fails its next use).
    const stmt = this.db.prepare(WAL_RANGE_SQL);
    try {
      const iter = typeof stmt.iterate === "function" ? stmt.iterate(stream, fromOffset, toOffset) : stmt.all(stream, fromOffset, toOffset);
      for (const row of iter) {
        const payload = row.payload;
        const len = payload?.byteLength ?? 0;
        if (rows.length > 0 && (rows.length >= maxRows || bytes + len > maxBytes)) break;
        rows.push({ offset: row.offset, tsMs: Number(row.ts_ms), payload: payload ?? new Uint8Array(0) });
        bytes += len;
      }
    } finally {
      try {
        stmt.finalize?.();
      } catch {
        // ignore
      }
    }
    return rows;
  }

  close() {
    try {
      this.db?.close();
    } catch {
      // ignore: closing is best effort, as in the reference worker
    }
    this.db = null;
  }
}
