//! Reading a batch from the native store: the active templates (P3's query, in the order
//! SQLite returns them, B23) and the WAL rows of the range up to the batch limits (S10, P4),
//! then processing on the pool. This is what `TouchEngine.processBatch` runs.

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection};

use super::{pool, ProcessRequest, ProcessResult, RowBuffer, TemplateRow};
use crate::error::Result;
use crate::jscompat::number::format_number;
use crate::jscompat::string::JsString;
use crate::store::{Reply, Store};

/// The reference's template query, unchanged so SQLite picks the same plan (P3, B23).
const ACTIVE_TEMPLATES: &str = "SELECT template_id, entity, fields_json, encodings_json, active_from_source_offset
           FROM live_templates
           WHERE stream=? AND state='active';";

/// `String(value)` of a column as the reference's SQLite binding returns it.
fn column_text(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(i) => Some(i.to_string()),
        ValueRef::Real(f) => Some(format_number(f)),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    }
}

/// The stream's active templates (rows that cannot be read are skipped, as P3 does).
pub fn read_active_templates(conn: &Connection, stream: &str) -> Result<Vec<TemplateRow>> {
    let mut stmt = match conn.prepare(ACTIVE_TEMPLATES) {
        Ok(s) => s,
        // "If the table cannot be read, the batch runs with no templates" (P3).
        Err(_) => return Ok(Vec::new()),
    };
    let mut rows = stmt.query(params![stream])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let id = column_text(r.get_ref(0)?).unwrap_or_default();
        let entity = column_text(r.get_ref(1)?).unwrap_or_default();
        let fields = column_text(r.get_ref(2)?).unwrap_or_else(|| "[]".into());
        let encodings = column_text(r.get_ref(3)?).unwrap_or_else(|| "[]".into());
        let active_from = match r.get_ref(4)? {
            ValueRef::Integer(i) => i,
            ValueRef::Null => 0,
            ValueRef::Real(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => f as i64,
            _ => continue,
        };
        if let Some(t) = TemplateRow::from_stored(id, JsString::from(entity), &fields, &encodings, active_from) {
            out.push(t);
        }
    }
    Ok(out)
}

/// The rows `from..=to` of the stream's WAL that the batch will take (P4's limits), with
/// their payloads in one buffer.
pub fn read_batch_rows(conn: &Connection, request: &ProcessRequest) -> Result<RowBuffer> {
    let limits = request.plan()?.limits;
    let mut stmt = conn.prepare_cached(
        "SELECT offset, ts_ms, payload FROM wal WHERE stream = ?1 AND offset >= ?2 AND offset <= ?3 ORDER BY offset ASC",
    )?;
    let mut rows = stmt.query(params![request.stream, request.from_offset, request.to_offset])?;
    let mut out = RowBuffer::default();
    let mut bytes = 0f64;
    while let Some(r) = rows.next()? {
        let payload: &[u8] = match r.get_ref(2)? {
            ValueRef::Blob(b) | ValueRef::Text(b) => b,
            _ => &[],
        };
        let len = payload.len() as f64;
        if !limits.admits(out.len() as f64, bytes, len) {
            break;
        }
        bytes += len;
        let ts_ms = match r.get_ref(1)? {
            ValueRef::Integer(i) => i as f64,
            ValueRef::Real(f) => f,
            _ => f64::NAN,
        };
        out.push(r.get(0)?, ts_ms, payload);
    }
    Ok(out)
}

/// Reads the batch on a store reader, then processes it on the processor pool.
pub fn process_from_store(store: &Store, request: ProcessRequest, reply: Reply<ProcessResult>) {
    let plan = match request.plan() {
        Ok(p) => p,
        Err(e) => return reply(Err(e)),
    };
    let stream = request.stream.clone();
    store.query(
        move |conn| {
            let templates = if plan.emit_fine { read_active_templates(conn, &stream)? } else { Vec::new() };
            let rows = read_batch_rows(conn, &request)?;
            Ok((request, rows, templates))
        },
        Box::new(move |read| match read {
            Ok((request, rows, templates)) => pool::process_buffer(request, rows, templates, reply),
            Err(e) => reply(Err(e)),
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::batch::tests::{p17_request, p17_rows, p17_template};
    use crate::store::{blocking, AppendRequest, StoreOptions};

    #[test]
    fn processes_a_batch_from_the_store_like_from_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("p.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
        blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
        for row in p17_rows() {
            let req = AppendRequest {
                stream: "s".into(),
                payloads: vec![row.payload.clone()],
                append_ms: Some(row.ts_ms as i64),
                ..Default::default()
            };
            blocking(|r| store.append(req, r)).unwrap();
        }
        let t = p17_template();
        blocking(|r| {
            store.write(
                move |conn| {
                    conn.execute(
                        "INSERT INTO live_templates(stream, template_id, entity, fields_json, encodings_json, state,
                           created_at_ms, last_seen_at_ms, inactivity_ttl_ms, active_from_source_offset)
                         VALUES ('s', ?1, ?2, '[\"authorId\",\"status\"]', '[\"int64\",\"string\"]', 'active', 0, 0, 0, 0)",
                        params![t.template_id, t.entity.to_string()],
                    )?;
                    Ok(())
                },
                r,
            )
        })
        .unwrap();
        let from_store = blocking(|r| process_from_store(&store, p17_request(), r)).unwrap();
        let from_rows = crate::processor::process_rows(&p17_request(), &p17_rows(), &[p17_template()]).unwrap();
        assert_eq!(from_store, from_rows);
        assert_eq!(from_store.touches.len(), 10);
        // Limits apply while reading.
        let mut req = p17_request();
        req.max_rows = 3.0;
        req.emit_fine_touches = false;
        let r = blocking(|r| process_from_store(&store, req, r)).unwrap();
        assert_eq!((r.processed_through, r.stats.rows_read), (2, 3.0));
        blocking(|r| store.close(r)).unwrap();
    }
}
