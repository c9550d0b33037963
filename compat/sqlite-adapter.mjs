// durable-touch/compat/sqlite-adapter: the Prisma Streams server's `sqlite/adapter.ts`
// (`openSqliteDatabase`, `getSqliteAdapterRuntimeCounts`, `setSqliteRuntimeOverride`) backed by
// the SQLite library inside durable-touch's native module, under Bun and Node alike.
//
// Why: with this module in place of the server's adapter, every SQLite connection in the
// server process (its main thread's, its segmenter worker's, and durable-touch's own Store) is
// the same SQLite library. Two libraries opening one file in one process break SQLite's POSIX
// lock bookkeeping (one library's close() drops the other's locks).
//
// Behaviour follows the reference adapter: the open-connection / prepared-statement counts,
// `query()`'s statement cache per SQL text, `transaction()` with BEGIN/COMMIT/ROLLBACK outermost
// and SAVEPOINTs inside (as its NodeDatabaseAdapter), `close()` finalizing the cached statements.
// Values follow bun:sqlite: rows are plain objects keyed by column name (the last of duplicate
// names wins), INTEGER → number, or bigint beyond 2^53 (bun:sqlite loses precision there), REAL →
// number, TEXT → string, BLOB → Uint8Array, NULL → null; parameters bind by position (numbers:
// integral and safe → INTEGER, else REAL; bigint → INTEGER; boolean → 1/0; typed arrays,
// DataViews and ArrayBuffers → BLOB; null/undefined → NULL). SQLite errors carry SQLite's own
// message, `code: "ERR_STORAGE"`, `sqliteCode`, and `errno` (the extended result code, as
// bun:sqlite's `errno`). Differences from bun:sqlite are listed in docs/deviations.md.
//
// How rows come back: each native call writes a batch of rows' cells into a per-thread
// ArrayBuffer (numbers as f64, a kind byte per cell) and returns an array holding only the
// other values (strings, Uint8Arrays, big integers) at their cell index; a function compiled
// once per column list builds the row objects (the native half: the `HostDb` class).
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
// The private `_sql*` functions live on the internal native module, not on the public API.
const native = require("../lib/internal/native.js");

const {
  _sqlOpen,
  _sqlClose,
  _sqlExec,
  _sqlPrepare,
  _sqlColumns,
  _sqlRun,
  _sqlGet,
  _sqlAll,
  _sqlIterate,
  _sqlMore,
  _sqlReset,
  _sqlFinalize,
  _sqlSlots,
} = native._sqlFunctions();

const slots = _sqlSlots();
const HEAD_BYTES = 64;
const CELLS = (slots.byteLength - HEAD_BYTES) / 9;
const head = new Float64Array(slots, 0, HEAD_BYTES / 8);
const nums = new Float64Array(slots, HEAD_BYTES, CELLS);
const kinds = new Uint8Array(slots, HEAD_BYTES + 8 * CELLS, CELLS);
const H_ROWS = 0;
const H_DONE = 1;
const H_COLUMNS = 2;
const H_REPREPARED = 3;
const H_CHANGES = 4;
const H_ROWID = 5;

/** `iterate()` reads this many rows per native call at first, doubling up to ITERATE_MAX_ROWS. */
const ITERATE_FIRST_ROWS = 16;
const ITERATE_MAX_ROWS = 256;

// Row builders by column list, shared by every statement with the same columns (the server
// prepares its WAL range reads afresh for each read).
const builders = new Map();

/**
 * A function `(values, base) => row` for `names`: the row's cells start at `base`; kind 0 is a
 * number in `nums`, 1 is null, 2 is `values[cell]`. An object literal, so duplicate names keep
 * the last value (as bun:sqlite) and `__proto__` is an own property (a computed key).
 */
function builderFor(names) {
  const key = names.join("\u0000");
  let build = builders.get(key);
  if (build === undefined) {
    const props = names.map((name, i) => {
      const k = name === "__proto__" ? '["__proto__"]' : JSON.stringify(name);
      const c = i === 0 ? "b" : `b + ${i}`;
      return `${k}: (k[${c}] === 0 ? n[${c}] : k[${c}] === 1 ? null : o[${c}])`;
    });
    build = new Function("n", "k", `"use strict"; return function row(o, b) { return { ${props.join(", ")} }; };`)(nums, kinds);
    builders.set(key, build);
  }
  return build;
}

const IteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));

function closedError(message, ErrorClass = Error) {
  const e = new ErrorClass(message);
  e.code = "ERR_CLOSED";
  return e;
}

const counts = { open_connections: 0, prepared_statements: 0 };

/** The reference's `getSqliteAdapterRuntimeCounts()`: connections open, statements alive. */
export function getSqliteAdapterRuntimeCounts() {
  return { ...counts };
}

/**
 * The reference chooses bun:sqlite or node:sqlite by runtime; this adapter is the same under
 * both, so the override is accepted and has no effect.
 */
export function setSqliteRuntimeOverride(runtime) {
  void runtime;
}

/** Opens (creating if needed) the SQLite database at `path` (`:memory:` for an in-memory one). */
export function openSqliteDatabase(path) {
  return new SqliteDatabaseImpl(_sqlOpen(path));
}
/**
 * The connection behind a database this module opened, for `Store.open(path, { hostConnection })`
 * (a store that commits on the host's connection); undefined for anything else.
 */
export function hostConnectionOf(db) {
  return SqliteDatabaseImpl.handleOf(db);
}

// Marks the opener as durable-touch's: the swapped touch manager opens the server's file with
// our Store only when the server's connections are ours too (one SQLite library per process).
openSqliteDatabase[Symbol.for("durable-touch.native")] = true;

class SqliteStatementImpl {
  #h;
  #onFinalize;
  #finalized = false;
  /** Bumped by every execution; an iterator stops when the statement ran for someone else. */
  #epoch = 0;
  #row = null;
  #columns = -1;
  #reprepared = -1;

  constructor(handle, onFinalize) {
    this.#h = handle;
    this.#onFinalize = onFinalize;
  }

  /** The row builder for the rows the last native call wrote (re-read after a re-prepare). */
  #builder() {
    if (head[H_COLUMNS] !== this.#columns || head[H_REPREPARED] !== this.#reprepared || this.#row === null) {
      const columns = head[H_COLUMNS];
      const reprepared = head[H_REPREPARED];
      this.#row = builderFor(_sqlColumns(this.#h));
      this.#columns = columns;
      this.#reprepared = reprepared;
    }
    return this.#row;
  }

  /** The rows the last native call wrote, appended to `out`. */
  #collect(values, out) {
    const rows = head[H_ROWS];
    if (rows === 0) return out;
    const row = this.#builder();
    const columns = head[H_COLUMNS];
    for (let r = 0; r < rows; r++) out.push(row(values, r * columns));
    return out;
  }

  get(...params) {
    this.#epoch++;
    const values = _sqlGet(this.#h, ...params);
    if (head[H_ROWS] === 0) return null;
    return this.#builder()(values, 0);
  }

  all(...params) {
    this.#epoch++;
    const out = [];
    let values = _sqlAll(this.#h, ...params);
    for (;;) {
      this.#collect(values, out);
      // A call that read no row is the end too (the native side says done then as well).
      if (head[H_DONE] === 1 || head[H_ROWS] === 0) return out;
      values = _sqlMore(this.#h, 0);
    }
  }

  run(...params) {
    this.#epoch++;
    const bigRowid = _sqlRun(this.#h, ...params);
    return { changes: head[H_CHANGES], lastInsertRowid: bigRowid === undefined ? head[H_ROWID] : bigRowid };
  }

  /**
   * An iterator over the rows, read from the statement a few rows per native call as the loop
   * advances (the first read happens at the first `next()`). Leaving the loop early (`return()`)
   * resets the statement. Running the statement again while an iterator reads it ends that
   * iterator with an error at its next step.
   */
  iterate(...params) {
    const epoch = ++this.#epoch;
    const h = this.#h;
    let buffered = [];
    let at = 0;
    let state = 0; // 0: not started, 1: reading, 2: every row read (statement reset)
    let chunk = ITERATE_FIRST_ROWS;
    const read = () => {
      if (this.#epoch !== epoch) {
        state = 2;
        buffered = [];
        throw closedError("the statement was run again while an iterator was reading its rows");
      }
      let values;
      try {
        values = state === 0 ? _sqlIterate(h, chunk, ...params) : _sqlMore(h, chunk);
      } catch (e) {
        state = 2;
        buffered = [];
        throw e;
      }
      params = null;
      state = head[H_DONE] === 1 || head[H_ROWS] === 0 ? 2 : 1;
      buffered = this.#collect(values, []);
      at = 0;
      if (chunk < ITERATE_MAX_ROWS) chunk *= 2;
    };
    const it = Object.create(IteratorPrototype);
    it.next = () => {
      // The statement ran for someone else, or was finalized: read() throws.
      if (state === 1 && (this.#epoch !== epoch || this.#finalized)) read();
      while (at >= buffered.length) {
        if (state === 2) return { value: undefined, done: true };
        read();
      }
      return { value: buffered[at++], done: false };
    };
    it.return = (value) => {
      if (state === 1 && this.#epoch === epoch && !this.#finalized) _sqlReset(h);
      state = 2;
      buffered = [];
      return { value, done: true };
    };
    return it;
  }

  finalize() {
    if (this.#finalized) return;
    this.#finalized = true;
    try {
      _sqlFinalize(this.#h);
    } finally {
      this.#onFinalize?.();
    }
  }
}

class SqliteDatabaseImpl {
  #h;
  #closed = false;
  #txDepth = 0;
  #txCounter = 0;
  #preparedStatementCount = 0;
  #statementCache = new Map();

  constructor(handle) {
    this.#h = handle;
    counts.open_connections += 1;
  }

  /** The native connection handle of a database this module opened, else undefined. */
  static handleOf(db) {
    return db !== null && typeof db === "object" && #h in db ? db.#h : undefined;
  }

  #trackStatement() {
    let released = false;
    this.#preparedStatementCount += 1;
    counts.prepared_statements += 1;
    return () => {
      if (released) return;
      released = true;
      // close() already took every statement of this connection off the counts.
      if (this.#closed) return;
      this.#preparedStatementCount = Math.max(0, this.#preparedStatementCount - 1);
      counts.prepared_statements = Math.max(0, counts.prepared_statements - 1);
    };
  }

  #open() {
    if (this.#closed) throw closedError("Cannot use a closed database", RangeError);
  }

  exec(sql) {
    _sqlExec(this.#h, sql);
  }

  prepare(sql) {
    this.#open();
    const handle = _sqlPrepare(this.#h, sql, false);
    return new SqliteStatementImpl(handle, this.#trackStatement());
  }

  query(sql) {
    const cached = this.#statementCache.get(sql);
    if (cached) return cached;
    this.#open();
    const handle = _sqlPrepare(this.#h, sql, true);
    const release = this.#trackStatement();
    const stmt = new SqliteStatementImpl(handle, () => {
      if (this.#statementCache.get(sql) === stmt) this.#statementCache.delete(sql);
      release();
    });
    this.#statementCache.set(sql, stmt);
    return stmt;
  }

  /**
   * `fn` inside a transaction: BEGIN/COMMIT for the outermost call, a SAVEPOINT inside another
   * transaction; a throw rolls back (to the savepoint) and rethrows.
   */
  transaction(fn) {
    return (...args) => {
      const nested = this.#txDepth > 0;
      const savepoint = `ds_tx_${++this.#txCounter}`;
      this.#txDepth += 1;
      try {
        if (nested) _sqlExec(this.#h, `SAVEPOINT ${savepoint};`);
        else _sqlExec(this.#h, "BEGIN;");
        const out = fn(...args);
        if (nested) _sqlExec(this.#h, `RELEASE SAVEPOINT ${savepoint};`);
        else _sqlExec(this.#h, "COMMIT;");
        return out;
      } catch (err) {
        try {
          if (nested) {
            _sqlExec(this.#h, `ROLLBACK TO SAVEPOINT ${savepoint};`);
            _sqlExec(this.#h, `RELEASE SAVEPOINT ${savepoint};`);
          } else {
            _sqlExec(this.#h, "ROLLBACK;");
          }
        } catch {
          // A failed rollback (none in progress, or the connection closed) hides nothing: the
          // original error is rethrown.
        }
        throw err;
      } finally {
        this.#txDepth = Math.max(0, this.#txDepth - 1);
      }
    };
  }

  close() {
    if (this.#closed) return;
    this.#closed = true;
    const cachedStatements = Array.from(this.#statementCache.values());
    this.#statementCache.clear();
    for (const stmt of cachedStatements) {
      try {
        stmt.finalize();
      } catch {
        // Closing goes on: the connection's close below finalizes every statement anyway.
      }
    }
    while (this.#preparedStatementCount > 0) {
      this.#preparedStatementCount -= 1;
      counts.prepared_statements = Math.max(0, counts.prepared_statements - 1);
    }
    try {
      _sqlClose(this.#h);
    } finally {
      counts.open_connections = Math.max(0, counts.open_connections - 1);
    }
  }
}
