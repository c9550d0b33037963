// Types of durable-touch/compat/sqlite-adapter: the Prisma Streams server's `sqlite/adapter.ts`
// (@prisma/streams-server 0.1.11) on durable-touch's SQLite.

/** A prepared statement. Parameters bind by position (see compat/sqlite-adapter.mjs). */
export interface SqliteStatement {
  /** The first row, or null. */
  get(...params: any[]): any;
  /** Every row, as plain objects keyed by column name. */
  all(...params: any[]): any[];
  /** Runs to the end: rows changed (triggers included) and the connection's last insert rowid. */
  run(...params: any[]): { changes: number | bigint; lastInsertRowid: number | bigint };
  /** The rows, read from the statement as the loop advances; an early exit resets it. */
  iterate(...params: any[]): Iterable<any>;
  finalize?(): void;
}

/** A synchronous SQLite connection. */
export interface SqliteDatabase {
  exec(sql: string): void;
  /** A statement cached per SQL text (finalize() takes it out of the cache). */
  query(sql: string): SqliteStatement;
  prepare(sql: string): SqliteStatement;
  /** BEGIN/COMMIT outermost, SAVEPOINT inside another transaction; a throw rolls back. */
  transaction<T>(fn: () => T): () => T;
  close(): void;
}

/** Connections open and statements alive in this thread (the reference's counts). */
export declare function getSqliteAdapterRuntimeCounts(): { open_connections: number; prepared_statements: number };
/** Accepted for compatibility; the adapter is the same under Bun and Node. */
export declare function setSqliteRuntimeOverride(runtime: "bun" | "node" | null): void;
/** Opens (creating if needed) the database at `path` (busy_timeout 5000 ms). */
export declare function openSqliteDatabase(path: string): SqliteDatabase;
/**
 * The native connection behind a database `openSqliteDatabase` made, for
 * `Store.open(path, { hostConnection })` (a store that commits on the host's own connection);
 * undefined for anything else.
 */
export declare function hostConnectionOf(db: SqliteDatabase): unknown;
