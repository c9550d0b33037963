//! The live templates registry (T1–T12): activation with field canonicalization, caps with
//! LRU eviction, the per-minute activation rate limit, heartbeats, batched last-seen
//! persistence and inactivity retirement, over the reference's `live_templates` table.
//!
//! SQL runs inside store jobs (the caller passes the connection); the in-memory parts (last
//! seen, dirty set, rate buckets) live here behind one mutex.

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::Result;
use crate::jscompat::date::to_iso_string;
use crate::jscompat::string::trim_str;
use crate::keys::{canonicalize_template_fields, hex16, template_id, Encoding};

/// The id reported for a declaration that failed validation (T1).
pub const INVALID_TEMPLATE_ID: &str = "0000000000000000";
/// Rows examined per retirement sweep (T10).
pub const GC_BATCH: i64 = 1000;

/// A declared field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDecl {
    pub name: String,
    /// As given; validated against the five encodings.
    pub encoding: String,
}

/// A declared template (the body of `/touch/templates/activate`).
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateDecl {
    pub entity: String,
    pub fields: Vec<FieldDecl>,
}

/// Caps and rate (T3, T7; defaults M23). The caps may be fractional (B21).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TemplateLimits {
    pub max_active_per_stream: f64,
    pub max_active_per_entity: f64,
    pub activation_rate_per_minute: f64,
}

impl Default for TemplateLimits {
    fn default() -> Self {
        TemplateLimits {
            max_active_per_stream: 2048.0,
            max_active_per_entity: 256.0,
            activation_rate_per_minute: 100.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Activated {
    pub template_id: String,
    pub active_from_touch_offset: String,
    /// It was active before this call (which only refreshed it): every batch since its
    /// activation has emitted its keys, so there is nothing to catch up (not part of the JS
    /// result).
    pub was_active: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Denied {
    pub template_id: String,
    /// `invalid`, `rate_limited`, or `cap_exceeded` (ours: see deviations.md, B11).
    pub reason: &'static str,
}

/// Lifecycle events (T11), emitted to the engine's stats and to hosts.
#[derive(Debug, Clone, PartialEq)]
pub enum LifecycleEvent {
    Activated {
        ts: String,
        stream: String,
        template_id: String,
        entity: String,
        fields: Vec<String>,
        encodings: Vec<String>,
        reason: &'static str,
        active_from_touch_offset: String,
        inactivity_ttl_ms: f64,
    },
    Retired {
        ts: String,
        stream: String,
        template_id: String,
        entity: String,
        fields: Vec<String>,
        encodings: Vec<String>,
        last_seen_at: String,
        inactive_for_ms: f64,
        reason: &'static str,
    },
    Evicted {
        ts: String,
        stream: String,
        template_id: String,
        reason: &'static str,
        cap: f64,
    },
}

impl LifecycleEvent {
    pub fn stream(&self) -> &str {
        match self {
            LifecycleEvent::Activated { stream, .. }
            | LifecycleEvent::Retired { stream, .. }
            | LifecycleEvent::Evicted { stream, .. } => stream,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            LifecycleEvent::Activated { .. } => "live.template_activated",
            LifecycleEvent::Retired { .. } => "live.template_retired",
            LifecycleEvent::Evicted { .. } => "live.template_evicted",
        }
    }
}

/// The outcome of one activation call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActivateOutcome {
    pub activated: Vec<Activated>,
    pub denied: Vec<Denied>,
    pub lifecycle: Vec<LifecycleEvent>,
}

/// An active template as the processor needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveTemplate {
    pub template_id: String,
    pub entity: String,
    pub fields: Vec<String>,
    pub encodings: Vec<String>,
    pub last_seen_at_ms: i64,
    pub active_from_source_offset: i64,
}

#[derive(Debug, Clone, Copy)]
struct LastSeen {
    last_seen_ms: i64,
    last_persist_ms: i64,
}

#[derive(Debug, Clone, Copy)]
struct RateState {
    tokens: f64,
    last_refill_ms: i64,
}

#[derive(Default)]
struct Memory {
    last_seen: HashMap<(String, String), LastSeen>,
    dirty: HashSet<(String, String)>,
    rate: HashMap<String, RateState>,
}

/// Sizes of the in-memory parts (for `getMemoryStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RegistryMemory {
    pub last_seen_entries: usize,
    pub dirty_last_seen_entries: usize,
    pub rate_state_streams: usize,
}

/// Arguments of [`TemplateRegistry::activate`].
pub struct ActivateArgs<'a> {
    pub stream: &'a str,
    pub templates: &'a [TemplateDecl],
    pub inactivity_ttl_ms: f64,
    pub limits: TemplateLimits,
    /// The journal cursor at request time (T6).
    pub active_from_touch_offset: &'a str,
    /// `active_from_source_offset` for new or reactivated templates (T5).
    pub active_from_source_offset: i64,
    pub now_ms: i64,
}

#[derive(Default)]
pub struct TemplateRegistry {
    mem: Mutex<Memory>,
}

fn is_template_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn json_strings(raw: &str) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(raw).ok()?;
    let arr = v.as_array()?;
    Some(
        arr.iter()
            .map(|x| match x {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
    )
}

/// T1: the shape checks; `None` means invalid.
fn validate_decl(t: &TemplateDecl) -> Option<(String, Vec<(String, Encoding)>)> {
    let entity = trim_str(&t.entity).to_string();
    if entity.is_empty() || t.fields.is_empty() || t.fields.len() > 3 {
        return None;
    }
    let mut fields = Vec::with_capacity(t.fields.len());
    let mut seen = HashSet::new();
    for f in &t.fields {
        let name = trim_str(&f.name).to_string();
        let enc = Encoding::parse(&f.encoding)?;
        if name.is_empty() || !seen.insert(name.clone()) {
            return None;
        }
        fields.push((name, enc));
    }
    Some((entity, fields))
}

impl TemplateRegistry {
    pub fn memory(&self) -> RegistryMemory {
        let m = self.mem.lock();
        RegistryMemory {
            last_seen_entries: m.last_seen.len(),
            dirty_last_seen_entries: m.dirty.len(),
            rate_state_streams: m.rate.len(),
        }
    }

    /// T3: one token per activation of a template that is not already active.
    fn allow_activation(m: &mut Memory, stream: &str, now_ms: i64, per_minute: f64) -> bool {
        if per_minute <= 0.0 {
            return true;
        }
        let st = m.rate.entry(stream.to_string()).or_insert(RateState { tokens: per_minute, last_refill_ms: now_ms });
        let elapsed = (now_ms - st.last_refill_ms).max(0) as f64;
        st.tokens = per_minute.min(st.tokens + elapsed * per_minute / 60_000.0);
        st.last_refill_ms = now_ms;
        if st.tokens < 1.0 {
            return false;
        }
        st.tokens -= 1.0;
        true
    }

    fn mark_seen(m: &mut Memory, stream: &str, id: &str, now_ms: i64) {
        let key = (stream.to_string(), id.to_string());
        let e = m.last_seen.entry(key.clone()).or_insert(LastSeen { last_seen_ms: 0, last_persist_ms: 0 });
        if now_ms > e.last_seen_ms {
            e.last_seen_ms = now_ms;
        }
        m.dirty.insert(key);
    }

    fn forget(m: &mut Memory, stream: &str, id: &str) {
        let key = (stream.to_string(), id.to_string());
        m.last_seen.remove(&key);
        m.dirty.remove(&key);
    }

    /// T1–T7. Runs inside a write job.
    pub fn activate(&self, conn: &Connection, a: &ActivateArgs<'_>) -> Result<ActivateOutcome> {
        let mut out = ActivateOutcome::default();
        let mut protected: Vec<String> = Vec::new();
        let mut m = self.mem.lock();
        for t in a.templates {
            let Some((entity, mut fields)) = validate_decl(t) else {
                out.denied.push(Denied { template_id: INVALID_TEMPLATE_ID.into(), reason: "invalid" });
                continue;
            };
            canonicalize_template_fields(&mut fields);
            let names: Vec<String> = fields.iter().map(|f| f.0.clone()).collect();
            let encodings: Vec<String> = fields.iter().map(|f| f.1.as_str().to_string()).collect();
            let id = hex16(template_id(entity.as_bytes(), &names));

            let existing: Option<(String, String, String, String)> = conn
                .prepare_cached(
                    "SELECT entity, fields_json, encodings_json, state FROM live_templates WHERE stream=?1 AND template_id=?2",
                )?
                .query_row(params![a.stream, id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()?;
            let already_active = existing.as_ref().is_some_and(|e| e.3 == "active");
            // T3 / B12: the token is spent before the checks of T4.
            if !already_active
                && !Self::allow_activation(&mut m, a.stream, a.now_ms, a.limits.activation_rate_per_minute)
            {
                out.denied.push(Denied { template_id: id, reason: "rate_limited" });
                continue;
            }
            match existing {
                Some((stored_entity, fields_json, encodings_json, state)) => {
                    // T4: an id stays bound to its first definition.
                    let matches = stored_entity == entity
                        && json_strings(&fields_json).is_some_and(|f| f == names)
                        && json_strings(&encodings_json).is_some_and(|e| e == encodings);
                    if !matches {
                        out.denied.push(Denied { template_id: id, reason: "invalid" });
                        continue;
                    }
                    if state == "active" {
                        conn.prepare_cached(
                            "UPDATE live_templates SET last_seen_at_ms=?1, inactivity_ttl_ms=?2 WHERE stream=?3 AND template_id=?4",
                        )?
                        .execute(params![a.now_ms, a.inactivity_ttl_ms as i64, a.stream, id])?;
                    } else {
                        conn.prepare_cached(
                            "UPDATE live_templates SET state='active', last_seen_at_ms=?1, inactivity_ttl_ms=?2, \
                             active_from_source_offset=?3, retired_at_ms=NULL, retired_reason=NULL \
                             WHERE stream=?4 AND template_id=?5",
                        )?
                        .execute(params![
                            a.now_ms,
                            a.inactivity_ttl_ms as i64,
                            a.active_from_source_offset,
                            a.stream,
                            id
                        ])?;
                    }
                }
                None => {
                    conn.prepare_cached(
                        "INSERT INTO live_templates(stream, template_id, entity, fields_json, encodings_json, state, \
                         created_at_ms, last_seen_at_ms, inactivity_ttl_ms, active_from_source_offset, retired_at_ms, retired_reason) \
                         VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?6, ?7, ?8, NULL, NULL)",
                    )?
                    .execute(params![
                        a.stream,
                        id,
                        entity,
                        serde_json::to_string(&names).unwrap_or_default(),
                        serde_json::to_string(&encodings).unwrap_or_default(),
                        a.now_ms,
                        a.inactivity_ttl_ms as i64,
                        a.active_from_source_offset
                    ])?;
                }
            }
            if !protected.contains(&id) {
                protected.push(id.clone());
            }
            out.activated.push(Activated {
                template_id: id.clone(),
                active_from_touch_offset: a.active_from_touch_offset.into(),
                was_active: already_active,
            });
            out.lifecycle.push(LifecycleEvent::Activated {
                ts: to_iso_string(a.now_ms as f64),
                stream: a.stream.into(),
                template_id: id.clone(),
                entity,
                fields: names,
                encodings,
                reason: "declared",
                active_from_touch_offset: a.active_from_touch_offset.into(),
                inactivity_ttl_ms: a.inactivity_ttl_ms,
            });
            Self::mark_seen(&mut m, a.stream, &id, a.now_ms);
        }
        let evicted = self.evict_to_caps(conn, &mut m, a.stream, a.now_ms, &a.limits, &protected)?;
        // B11: a template evicted in the same call is not reported as activated; the client
        // learns it is not active (deviations.md).
        for e in &evicted {
            if let LifecycleEvent::Evicted { template_id, .. } = e {
                if let Some(pos) = out.activated.iter().position(|x| &x.template_id == template_id) {
                    out.activated.remove(pos);
                    out.denied.push(Denied { template_id: template_id.clone(), reason: "cap_exceeded" });
                }
            }
        }
        out.lifecycle.extend(evicted);
        Ok(out)
    }

    /// T7: per-entity caps, then the per-stream cap, evicting least recently used first and
    /// protected (just declared) templates last.
    fn evict_to_caps(
        &self,
        conn: &Connection,
        m: &mut Memory,
        stream: &str,
        now_ms: i64,
        limits: &TemplateLimits,
        protected: &[String],
    ) -> Result<Vec<LifecycleEvent>> {
        let mut out = Vec::new();
        let entities: Vec<(String, i64)> = conn
            .prepare_cached(
                "SELECT entity, COUNT(*) FROM live_templates WHERE stream=?1 AND state='active' GROUP BY entity",
            )?
            .query_map([stream], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (entity, count) in entities {
            if count as f64 <= limits.max_active_per_entity {
                continue;
            }
            let extra = (count as f64 - limits.max_active_per_entity).ceil() as i64;
            out.extend(self.evict_lru(
                conn,
                m,
                stream,
                now_ms,
                extra,
                Some(&entity),
                limits.max_active_per_entity,
                protected,
            )?);
        }
        let active: i64 = conn
            .prepare_cached("SELECT COUNT(*) FROM live_templates WHERE stream=?1 AND state='active'")?
            .query_row([stream], |r| r.get(0))?;
        if active as f64 > limits.max_active_per_stream {
            let extra = (active as f64 - limits.max_active_per_stream).ceil() as i64;
            out.extend(self.evict_lru(
                conn,
                m,
                stream,
                now_ms,
                extra,
                None,
                limits.max_active_per_stream,
                protected,
            )?);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn evict_lru(
        &self,
        conn: &Connection,
        m: &mut Memory,
        stream: &str,
        now_ms: i64,
        count: i64,
        entity: Option<&str>,
        cap: f64,
        protected: &[String],
    ) -> Result<Vec<LifecycleEvent>> {
        if count <= 0 {
            return Ok(Vec::new());
        }
        let candidates: Vec<String> = {
            let sql = if entity.is_some() {
                "SELECT template_id FROM live_templates WHERE stream=?1 AND state='active' AND entity=?2 \
                 ORDER BY last_seen_at_ms ASC, template_id ASC"
            } else {
                "SELECT template_id FROM live_templates WHERE stream=?1 AND state='active' AND ?2 IS NULL \
                 ORDER BY last_seen_at_ms ASC, template_id ASC"
            };
            conn.prepare_cached(sql)?
                .query_map(params![stream, entity], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?
        };
        let mut victims: Vec<String> =
            candidates.iter().filter(|id| !protected.contains(id)).take(count as usize).cloned().collect();
        if (victims.len() as i64) < count {
            for id in &candidates {
                if victims.len() as i64 >= count {
                    break;
                }
                if !victims.contains(id) {
                    victims.push(id.clone());
                }
            }
        }
        let mut out = Vec::with_capacity(victims.len());
        for id in victims {
            conn.prepare_cached(
                "UPDATE live_templates SET state='retired', retired_reason='cap_exceeded', retired_at_ms=?1 \
                 WHERE stream=?2 AND template_id=?3 AND state='active'",
            )?
            .execute(params![now_ms, stream, id])?;
            Self::forget(m, stream, &id);
            out.push(LifecycleEvent::Evicted {
                ts: to_iso_string(now_ms as f64),
                stream: stream.into(),
                template_id: id,
                reason: "cap_exceeded",
                cap,
            });
        }
        Ok(out)
    }

    /// T8: marks each well-formed id as seen (existence is not checked, B13).
    pub fn heartbeat(&self, stream: &str, template_ids: &[String], now_ms: i64) {
        let mut m = self.mem.lock();
        for raw in template_ids {
            let id = trim_str(raw);
            if is_template_id(id) {
                Self::mark_seen(&mut m, stream, id, now_ms);
            }
        }
    }

    /// Whether [`flush_last_seen`](Self::flush_last_seen) has anything to write now.
    pub fn has_due_last_seen(&self, now_ms: i64, interval_ms: f64) -> bool {
        let m = self.mem.lock();
        m.dirty.iter().any(|k| m.last_seen.get(k).is_none_or(|e| (now_ms - e.last_persist_ms) as f64 >= interval_ms))
    }

    /// T9: persists dirty last-seen times whose last persist is at least `interval_ms` old.
    pub fn flush_last_seen(&self, conn: &Connection, now_ms: i64, interval_ms: f64) -> Result<usize> {
        let mut m = self.mem.lock();
        let keys: Vec<(String, String)> = m.dirty.iter().cloned().collect();
        let mut written = 0;
        for key in keys {
            let Some(e) = m.last_seen.get(&key).copied() else {
                m.dirty.remove(&key);
                continue;
            };
            if ((now_ms - e.last_persist_ms) as f64) < interval_ms {
                continue;
            }
            conn.prepare_cached(
                "UPDATE live_templates SET last_seen_at_ms=?1 WHERE stream=?2 AND template_id=?3 AND state='active'",
            )?
            .execute(params![e.last_seen_ms, key.0, key.1])?;
            if let Some(e) = m.last_seen.get_mut(&key) {
                e.last_persist_ms = now_ms;
            }
            m.dirty.remove(&key);
            written += 1;
        }
        Ok(written)
    }

    /// T10: retires active templates not seen within their TTL (memory counts as seen).
    pub fn gc_retire_expired(&self, conn: &Connection, stream: &str, now_ms: i64) -> Result<Vec<LifecycleEvent>> {
        type Row = (String, String, String, String, i64, i64);
        let rows: Vec<Row> = conn
            .prepare_cached(
                "SELECT template_id, entity, fields_json, encodings_json, last_seen_at_ms, inactivity_ttl_ms FROM live_templates \
                 WHERE stream=?1 AND state='active' AND (last_seen_at_ms + inactivity_ttl_ms) < ?2 \
                 ORDER BY last_seen_at_ms ASC LIMIT ?3",
            )?
            .query_map(params![stream, now_ms, GC_BATCH], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut m = self.mem.lock();
        let mut out = Vec::new();
        for (id, entity, fields_json, encodings_json, db_last_seen, ttl) in rows {
            let key = (stream.to_string(), id.clone());
            let mem_last_seen = m.last_seen.get(&key).map(|e| e.last_seen_ms).unwrap_or(0);
            let last_seen = db_last_seen.max(mem_last_seen);
            if last_seen + ttl >= now_ms {
                if mem_last_seen > db_last_seen {
                    conn.prepare_cached(
                        "UPDATE live_templates SET last_seen_at_ms=?1 WHERE stream=?2 AND template_id=?3 AND state='active'",
                    )?
                    .execute(params![mem_last_seen, stream, id])?;
                    if let Some(e) = m.last_seen.get_mut(&key) {
                        e.last_persist_ms = now_ms;
                    }
                    m.dirty.remove(&key);
                }
                continue;
            }
            conn.prepare_cached(
                "UPDATE live_templates SET state='retired', retired_reason='inactivity', retired_at_ms=?1 \
                 WHERE stream=?2 AND template_id=?3 AND state='active'",
            )?
            .execute(params![now_ms, stream, id])?;
            Self::forget(&mut m, stream, &id);
            out.push(LifecycleEvent::Retired {
                ts: to_iso_string(now_ms as f64),
                stream: stream.into(),
                template_id: id,
                entity,
                fields: json_strings(&fields_json).unwrap_or_default(),
                encodings: json_strings(&encodings_json).unwrap_or_default(),
                last_seen_at: to_iso_string(last_seen as f64),
                inactive_for_ms: (now_ms - last_seen).max(0) as f64,
                reason: "inactivity",
            });
        }
        Ok(out)
    }

    /// Drops every in-memory entry of a stream (when the stream is deleted).
    pub fn forget_stream(&self, stream: &str) {
        let mut m = self.mem.lock();
        m.last_seen.retain(|k, _| k.0 != stream);
        m.dirty.retain(|k| k.0 != stream);
        m.rate.remove(stream);
    }
}

/// T12: the number of active templates (0 on error).
pub fn active_count(conn: &Connection, stream: &str) -> i64 {
    conn.prepare_cached("SELECT COUNT(*) FROM live_templates WHERE stream=?1 AND state='active'")
        .and_then(|mut s| s.query_row([stream], |r| r.get(0)))
        .unwrap_or(0)
}

/// The active templates' `(template_id, entity)`, by id (what an edge needs to plan waits).
pub fn list_active_entities(conn: &Connection, stream: &str) -> Result<Vec<(String, String)>> {
    let rows = conn
        .prepare_cached(
            "SELECT template_id, entity FROM live_templates WHERE stream=?1 AND state='active' ORDER BY template_id",
        )?
        .query_map([stream], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The active templates in the order the reference's processor query returns them (P3: the
/// `(stream, state, last_seen_at_ms)` index, i.e. last-seen ascending; B23 names the order).
pub fn list_active_for_processing(conn: &Connection, stream: &str) -> Result<Vec<ActiveTemplate>> {
    let rows = conn
        .prepare_cached(
            "SELECT template_id, entity, fields_json, encodings_json, last_seen_at_ms, active_from_source_offset \
             FROM live_templates INDEXED BY live_templates_stream_state_last_seen_idx \
             WHERE stream=?1 AND state='active' ORDER BY last_seen_at_ms ASC",
        )?
        .query_map([stream], |r| {
            let fields: String = r.get(2)?;
            let encodings: String = r.get(3)?;
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                fields,
                encodings,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .map(|(template_id, entity, f, e, last_seen_at_ms, active_from_source_offset)| ActiveTemplate {
            template_id,
            entity,
            fields: json_strings(&f).unwrap_or_default(),
            encodings: json_strings(&e).unwrap_or_default(),
            last_seen_at_ms,
            active_from_source_offset,
        })
        .collect())
}

/// The distinct entities of the given active templates (M24), in chunks of 200.
pub fn entities_for_templates(conn: &Connection, stream: &str, template_ids: &[String]) -> Result<Vec<String>> {
    let mut ids: Vec<&str> = template_ids.iter().map(|s| trim_str(s)).filter(|s| is_template_id(s)).collect();
    ids.sort();
    ids.dedup();
    let mut out: Vec<String> = Vec::new();
    for chunk in ids.chunks(200) {
        let placeholders = vec!["?"; chunk.len()].join(",");
        let sql = format!(
            "SELECT DISTINCT entity FROM live_templates WHERE stream=? AND state='active' AND template_id IN ({placeholders})"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut p: Vec<&dyn rusqlite::ToSql> = vec![&stream];
        for id in chunk {
            p.push(id);
        }
        let rows = stmt.query_map(p.as_slice(), |r| r.get::<_, String>(0))?;
        for e in rows {
            let e = e?;
            let t = trim_str(&e).to_string();
            if !t.is_empty() && !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
