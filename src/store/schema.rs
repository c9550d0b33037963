//! The on-disk format: pragmas and the reference server's schema at version 24 (S1–S5).
//!
//! A file created here must open in the reference's `SqliteDurableStore` without a migration,
//! and a file the reference created must open here, so the tables, columns, defaults and
//! indexes are the reference's, column for column. durable-touch only *uses* `streams`, `wal`,
//! `manifests`, `stream_segment_meta`, `stream_profiles`, `stream_touch_state` and
//! `live_templates`; the other tables exist so that the reference finds the schema it expects.

use rusqlite::{Connection, OptionalExtension};

use crate::error::{Error, Result};

/// The reference's schema version (S1).
pub const SCHEMA_VERSION: i64 = 24;

/// Pragmas applied to every connection, writer and readers alike (S1).
pub const PRAGMAS: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
PRAGMA foreign_keys = ON;
PRAGMA busy_timeout = 5000;
PRAGMA temp_store = MEMORY;
";

/// Tables and indexes of a fresh version-24 database, in the reference's order.
const CREATE_ALL: &str = "
CREATE TABLE IF NOT EXISTS streams (
  stream TEXT PRIMARY KEY,
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  content_type TEXT NOT NULL,
  profile TEXT NULL,
  stream_seq TEXT NULL,
  closed INTEGER NOT NULL DEFAULT 0,
  closed_producer_id TEXT NULL,
  closed_producer_epoch INTEGER NULL,
  closed_producer_seq INTEGER NULL,
  ttl_seconds INTEGER NULL,
  epoch INTEGER NOT NULL,
  next_offset INTEGER NOT NULL,
  sealed_through INTEGER NOT NULL,
  uploaded_through INTEGER NOT NULL,
  uploaded_segment_count INTEGER NOT NULL DEFAULT 0,
  pending_rows INTEGER NOT NULL,
  pending_bytes INTEGER NOT NULL,
  logical_size_bytes INTEGER NOT NULL DEFAULT 0,
  wal_rows INTEGER NOT NULL DEFAULT 0,
  wal_bytes INTEGER NOT NULL DEFAULT 0,
  last_append_ms INTEGER NOT NULL,
  last_segment_cut_ms INTEGER NOT NULL,
  segment_in_progress INTEGER NOT NULL,
  expires_at_ms INTEGER NULL,
  stream_flags INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS streams_pending_bytes_idx ON streams(pending_bytes);
CREATE INDEX IF NOT EXISTS streams_last_cut_idx ON streams(last_segment_cut_ms);
CREATE INDEX IF NOT EXISTS streams_inprog_pending_idx ON streams(segment_in_progress, pending_bytes, last_segment_cut_ms);

CREATE TABLE IF NOT EXISTS wal (
  id INTEGER PRIMARY KEY,
  stream TEXT NOT NULL,
  offset INTEGER NOT NULL,
  ts_ms INTEGER NOT NULL,
  payload BLOB NOT NULL,
  payload_len INTEGER NOT NULL,
  routing_key BLOB NULL,
  content_type TEXT NULL,
  flags INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS wal_stream_offset_uniq ON wal(stream, offset);
CREATE INDEX IF NOT EXISTS wal_ts_idx ON wal(ts_ms);

CREATE TABLE IF NOT EXISTS segments (
  segment_id TEXT PRIMARY KEY,
  stream TEXT NOT NULL,
  segment_index INTEGER NOT NULL,
  start_offset INTEGER NOT NULL,
  end_offset INTEGER NOT NULL,
  block_count INTEGER NOT NULL,
  last_append_ms INTEGER NOT NULL,
  payload_bytes INTEGER NOT NULL DEFAULT 0,
  size_bytes INTEGER NOT NULL,
  local_path TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  uploaded_at_ms INTEGER NULL,
  r2_etag TEXT NULL
);
CREATE TABLE IF NOT EXISTS stream_segment_meta (
  stream TEXT PRIMARY KEY,
  segment_count INTEGER NOT NULL,
  segment_offsets BLOB NOT NULL,
  segment_blocks BLOB NOT NULL,
  segment_last_ts BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS segments_stream_index_uniq ON segments(stream, segment_index);
CREATE INDEX IF NOT EXISTS segments_stream_start_idx ON segments(stream, start_offset);
CREATE INDEX IF NOT EXISTS segments_pending_upload_idx ON segments(uploaded_at_ms);

CREATE TABLE IF NOT EXISTS manifests (
  stream TEXT PRIMARY KEY,
  generation INTEGER NOT NULL,
  uploaded_generation INTEGER NOT NULL,
  last_uploaded_at_ms INTEGER NULL,
  last_uploaded_etag TEXT NULL,
  last_uploaded_size_bytes INTEGER NULL
);
CREATE TABLE IF NOT EXISTS schemas (
  stream TEXT PRIMARY KEY,
  schema_json TEXT NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  uploaded_size_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS stream_profiles (
  stream TEXT PRIMARY KEY,
  profile_json TEXT NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS producer_state (
  stream TEXT NOT NULL,
  producer_id TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  last_seq INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY (stream, producer_id)
);
CREATE TABLE IF NOT EXISTS stream_touch_state (
  stream TEXT PRIMARY KEY,
  processed_through INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS live_templates (
  stream TEXT NOT NULL,
  template_id TEXT NOT NULL,
  entity TEXT NOT NULL,
  fields_json TEXT NOT NULL,
  encodings_json TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  last_seen_at_ms INTEGER NOT NULL,
  inactivity_ttl_ms INTEGER NOT NULL,
  active_from_source_offset INTEGER NOT NULL,
  retired_at_ms INTEGER NULL,
  retired_reason TEXT NULL,
  PRIMARY KEY (stream, template_id)
);
CREATE INDEX IF NOT EXISTS live_templates_stream_entity_state_last_seen_idx
  ON live_templates(stream, entity, state, last_seen_at_ms);
CREATE INDEX IF NOT EXISTS live_templates_stream_state_last_seen_idx
  ON live_templates(stream, state, last_seen_at_ms);

CREATE TABLE IF NOT EXISTS index_state (
  stream TEXT PRIMARY KEY,
  index_secret BLOB NOT NULL,
  indexed_through INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS index_runs (
  run_id TEXT PRIMARY KEY,
  stream TEXT NOT NULL,
  level INTEGER NOT NULL,
  start_segment INTEGER NOT NULL,
  end_segment INTEGER NOT NULL,
  object_key TEXT NOT NULL,
  size_bytes INTEGER NOT NULL DEFAULT 0,
  filter_len INTEGER NOT NULL,
  record_count INTEGER NOT NULL,
  retired_gen INTEGER NULL,
  retired_at_ms INTEGER NULL
);
CREATE INDEX IF NOT EXISTS index_runs_stream_idx ON index_runs(stream, level, start_segment);

CREATE TABLE IF NOT EXISTS secondary_index_state (
  stream TEXT NOT NULL,
  index_name TEXT NOT NULL,
  index_secret BLOB NOT NULL,
  config_hash TEXT NOT NULL,
  indexed_through INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY (stream, index_name)
);
CREATE TABLE IF NOT EXISTS secondary_index_runs (
  run_id TEXT PRIMARY KEY,
  stream TEXT NOT NULL,
  index_name TEXT NOT NULL,
  level INTEGER NOT NULL,
  start_segment INTEGER NOT NULL,
  end_segment INTEGER NOT NULL,
  object_key TEXT NOT NULL,
  size_bytes INTEGER NOT NULL DEFAULT 0,
  filter_len INTEGER NOT NULL,
  record_count INTEGER NOT NULL,
  retired_gen INTEGER NULL,
  retired_at_ms INTEGER NULL
);
CREATE INDEX IF NOT EXISTS secondary_index_runs_stream_idx
  ON secondary_index_runs(stream, index_name, level, start_segment);

CREATE TABLE IF NOT EXISTS lexicon_index_state (
  stream TEXT NOT NULL,
  source_kind TEXT NOT NULL,
  source_name TEXT NOT NULL,
  indexed_through INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY (stream, source_kind, source_name)
);
CREATE TABLE IF NOT EXISTS lexicon_index_runs (
  run_id TEXT PRIMARY KEY,
  stream TEXT NOT NULL,
  source_kind TEXT NOT NULL,
  source_name TEXT NOT NULL,
  level INTEGER NOT NULL,
  start_segment INTEGER NOT NULL,
  end_segment INTEGER NOT NULL,
  object_key TEXT NOT NULL,
  size_bytes INTEGER NOT NULL DEFAULT 0,
  record_count INTEGER NOT NULL,
  retired_gen INTEGER NULL,
  retired_at_ms INTEGER NULL
);
CREATE INDEX IF NOT EXISTS lexicon_index_runs_stream_idx
  ON lexicon_index_runs(stream, source_kind, source_name, level, start_segment);

CREATE TABLE IF NOT EXISTS search_companion_plans (
  stream TEXT PRIMARY KEY,
  generation INTEGER NOT NULL,
  plan_hash TEXT NOT NULL,
  plan_json TEXT NOT NULL,
  updated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS search_segment_companions (
  stream TEXT NOT NULL,
  segment_index INTEGER NOT NULL,
  object_key TEXT NOT NULL,
  plan_generation INTEGER NOT NULL,
  sections_json TEXT NOT NULL,
  section_sizes_json TEXT NOT NULL DEFAULT '{}',
  size_bytes INTEGER NOT NULL DEFAULT 0,
  primary_timestamp_min_ms INTEGER NULL,
  primary_timestamp_max_ms INTEGER NULL,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY (stream, segment_index)
);
CREATE INDEX IF NOT EXISTS search_segment_companions_stream_plan_idx
  ON search_segment_companions(stream, plan_generation, segment_index);

CREATE TABLE IF NOT EXISTS objectstore_request_counts (
  stream_hash TEXT NOT NULL,
  artifact TEXT NOT NULL,
  op TEXT NOT NULL,
  count INTEGER NOT NULL DEFAULT 0,
  bytes INTEGER NOT NULL DEFAULT 0,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY (stream_hash, artifact, op)
);
CREATE INDEX IF NOT EXISTS objectstore_request_counts_stream_hash_idx
  ON objectstore_request_counts(stream_hash, updated_at_ms);
";

/// Tables durable-touch reads or writes; a version-24 file missing one of them is refused.
const REQUIRED_TABLES: &[&str] =
    &["streams", "wal", "manifests", "stream_segment_meta", "stream_profiles", "stream_touch_state", "live_templates"];

/// Applies the pragmas (and the cache size when given) to a freshly opened connection.
pub fn apply_pragmas(conn: &Connection, cache_bytes: Option<u64>) -> Result<()> {
    conn.execute_batch(PRAGMAS)?;
    if let Some(bytes) = cache_bytes.filter(|b| *b > 0) {
        let kib = (bytes / 1024).max(1);
        conn.execute_batch(&format!("PRAGMA cache_size = -{kib};"))?;
    }
    Ok(())
}

/// Creates the schema on a fresh database, or checks that an existing one is at version 24.
///
/// Older versions are refused rather than migrated: the reference's own opener migrates them,
/// and durable-touch does not want to own twenty migrations it cannot test against real files.
pub fn init(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);")?;
    let version: Option<i64> =
        tx.query_row("SELECT version FROM schema_version LIMIT 1", [], |r| r.get(0)).optional()?;
    match version {
        None => {
            tx.execute_batch(CREATE_ALL)?;
            tx.execute("INSERT INTO schema_version(version) VALUES (?1)", [SCHEMA_VERSION])?;
        }
        Some(SCHEMA_VERSION) => {
            for table in REQUIRED_TABLES {
                let found: Option<String> = tx
                    .query_row("SELECT name FROM sqlite_master WHERE type='table' AND name=?1", [table], |r| r.get(0))
                    .optional()?;
                if found.is_none() {
                    return Err(schema_error(format!("schema version {SCHEMA_VERSION} but table {table} is missing")));
                }
            }
        }
        Some(other) => {
            return Err(schema_error(format!(
                "unsupported schema version {other}: durable-touch reads version {SCHEMA_VERSION}; \
                 open the file once with the reference server to migrate it"
            )));
        }
    }
    tx.commit()?;
    Ok(())
}

fn schema_error(message: String) -> Error {
    Error::Storage { code: "SQLITE_SCHEMA".into(), extended_code: 17, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_columns(conn: &Connection, table: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})")).unwrap();
        stmt.query_map([], |r| r.get::<_, String>(1)).unwrap().map(|r| r.unwrap()).collect()
    }

    #[test]
    fn fresh_database_gets_version_24_and_all_tables() {
        let mut conn = Connection::open_in_memory().unwrap();
        init(&mut conn).unwrap();
        let v: i64 = conn.query_row("SELECT version FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, 24);
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type='table'", [], |r| r.get(0)).unwrap();
        // 19 reference tables + schema_version.
        assert_eq!(n, 20);
        assert_eq!(table_columns(&conn, "stream_touch_state"), ["stream", "processed_through", "updated_at_ms"]);
        assert_eq!(table_columns(&conn, "streams").len(), 26);
        assert_eq!(table_columns(&conn, "wal").len(), 9);
    }

    #[test]
    fn init_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        init(&mut conn).unwrap();
        init(&mut conn).unwrap();
        let rows: i64 = conn.query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 1);
    }

    #[test]
    fn older_versions_are_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (13);",
        )
        .unwrap();
        let err = init(&mut conn).unwrap_err();
        assert_eq!(err.code(), "ERR_STORAGE");
        assert!(err.to_string().contains("unsupported schema version 13"));
    }

    #[test]
    fn version_24_without_tables_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (24);",
        )
        .unwrap();
        assert!(init(&mut conn).unwrap_err().to_string().contains("table streams is missing"));
    }
}
