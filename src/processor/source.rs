//! Reading a batch from the native store: the active templates (P3's query, in the order
//! SQLite returns them, B23) and the WAL rows of the range up to the batch limits (S10, P4),
//! then processing on the pool. This is what `TouchEngine.processBatch` runs.

use std::sync::Arc;

use parking_lot::Mutex;
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
    let mut all = RowBuffer::default();
    read_batch_chunks(conn, request, usize::MAX, |chunk| {
        all = chunk;
        true
    })?;
    Ok(all)
}

/// [`read_batch_rows`] in chunks of up to `chunk_rows` rows, each handed to `send` as soon as
/// it is read; stops early when `send` returns false.
pub fn read_batch_chunks(
    conn: &Connection,
    request: &ProcessRequest,
    chunk_rows: usize,
    mut send: impl FnMut(RowBuffer) -> bool,
) -> Result<()> {
    let limits = request.plan()?.limits;
    let mut stmt = conn.prepare_cached(
        "SELECT offset, ts_ms, payload FROM wal WHERE stream = ?1 AND offset >= ?2 AND offset <= ?3 ORDER BY offset ASC",
    )?;
    let mut rows = stmt.query(params![request.stream, request.from_offset, request.to_offset])?;
    let mut chunk = RowBuffer::with_spare_bytes();
    let (mut count, mut bytes) = (0f64, 0f64);
    while let Some(r) = rows.next()? {
        let payload: &[u8] = match r.get_ref(2)? {
            ValueRef::Blob(b) | ValueRef::Text(b) => b,
            _ => &[],
        };
        let len = payload.len() as f64;
        if !limits.admits(count, bytes, len) {
            break;
        }
        count += 1.0;
        bytes += len;
        let ts_ms = match r.get_ref(1)? {
            ValueRef::Integer(i) => i as f64,
            ValueRef::Real(f) => f,
            _ => f64::NAN,
        };
        chunk.push(r.get(0)?, ts_ms, payload);
        if chunk.len() >= chunk_rows && !send(std::mem::replace(&mut chunk, RowBuffer::with_spare_bytes())) {
            return Ok(());
        }
    }
    if !chunk.is_empty() {
        send(chunk);
    }
    Ok(())
}

/// Rows per chunk of a store-backed batch.
const CHUNK_ROWS: usize = 2048;

/// Reads the batch on a store reader and processes it on the processor pool, chunk by chunk:
/// the batch starts on the first 2,048 rows while the reader reads on. A read error after the
/// batch started reaches it as its next chunk and fails it.
pub fn process_from_store(store: &Store, request: ProcessRequest, reply: Reply<ProcessResult>) {
    let plan = match request.plan() {
        Ok(p) => p,
        Err(e) => return reply(Err(e)),
    };
    let stream = request.stream.clone();
    // The reply goes to the batch once it starts; a read that fails before that answers.
    let unstarted = Arc::new(Mutex::new(Some(reply)));
    let batch_reply = unstarted.clone();
    store.query(
        move |conn| {
            let templates = if plan.emit_fine { read_active_templates(conn, &stream)? } else { Vec::new() };
            let Some(reply) = batch_reply.lock().take() else { return Ok(()) };
            let range = request.to_offset.saturating_sub(request.from_offset).saturating_add(1);
            let expected = (range.max(0) as f64).min(plan.limits.max_rows).min(65_536.0) as usize;
            let (chunks, received) = std::sync::mpsc::channel();
            pool::process_stream(request.clone(), expected, templates, received, reply);
            if let Err(e) = read_batch_chunks(conn, &request, CHUNK_ROWS, |chunk| chunks.send(Ok(chunk)).is_ok()) {
                let _ = chunks.send(Err(e));
            }
            Ok(())
        },
        Box::new(move |read: Result<()>| {
            if let Err(e) = read {
                let reply = unstarted.lock().take();
                if let Some(reply) = reply {
                    reply(Err(e));
                }
            }
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::batch::tests::{p17_request, p17_rows, p17_template};
    use crate::processor::Row;
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

    #[test]
    fn a_batch_of_many_chunks_is_the_batch_of_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("c.sqlite").to_str().unwrap(), StoreOptions::default()).unwrap();
        blocking(|r| store.create_stream("s".into(), Some("application/json".into()), None, r)).unwrap();
        let p17 = p17_rows();
        let n = 3 * CHUNK_ROWS + 17;
        let payloads: Vec<Vec<u8>> = (0..n).map(|i| p17[i % p17.len()].payload.clone()).collect();
        let req = AppendRequest {
            stream: "s".into(),
            payloads: payloads.clone(),
            append_ms: Some(1000),
            ..Default::default()
        };
        blocking(|r| store.append(req, r)).unwrap();
        let rows: Vec<Row> = payloads
            .into_iter()
            .enumerate()
            .map(|(i, payload)| Row { offset: i as i64, ts_ms: 1000.0, payload })
            .collect();
        for (max_rows, max_bytes) in [(1e9, 1e12), (2.0 * CHUNK_ROWS as f64 + 5.0, 1e12), (1e9, 300_000.0)] {
            let mut request = p17_request();
            (request.to_offset, request.max_rows, request.max_bytes) = (n as i64 - 1, max_rows, max_bytes);
            request.touch.on_missing_before = crate::spec::OnMissingBefore::SkipBefore;
            let from_store = blocking(|r| process_from_store(&store, request.clone(), r)).unwrap();
            let from_rows = crate::processor::process_rows(&request, &rows, &[]).unwrap();
            assert_eq!(from_store, from_rows, "maxRows {max_rows}, maxBytes {max_bytes}");
            assert!(from_store.stats.rows_read > CHUNK_ROWS as f64);
        }
        // A stream with no rows in the range is an empty batch.
        let mut request = p17_request();
        (request.from_offset, request.to_offset) = (n as i64 + 10, n as i64 + 20);
        let empty = blocking(|r| process_from_store(&store, request, r)).unwrap();
        assert_eq!((empty.stats.rows_read, empty.processed_through), (0.0, n as i64 + 9));
        blocking(|r| store.close(r)).unwrap();
    }
}
