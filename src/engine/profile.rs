//! Stream profiles and touch state, stored the way the reference stores them (C5, C6, S14,
//! M22): `streams.profile` holds the kind, `stream_profiles.profile_json` the validated
//! profile, and `stream_touch_state` the processing checkpoint of every touch-enabled stream.
//!
//! All functions take a connection and run inside store jobs.

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Error, Result};
use crate::jscompat::json::{parse, stringify};
use crate::spec::{validate_state_protocol_profile, StateProtocolProfile};
use crate::store::{model::now_ms, STREAM_FLAG_DELETED};

/// The profile kind that carries touch (the only touch-capable kind, M22).
pub const STATE_PROTOCOL: &str = "state-protocol";

/// A stream's touch checkpoint (S4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchState {
    pub processed_through: i64,
    pub updated_at_ms: i64,
}

/// C6: the content type's media type, trimmed and lowercased.
pub fn normalize_content_type(ct: &str) -> String {
    ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Saves a validated state-protocol profile for a live stream and syncs its touch state (C6).
/// Returns the stream's `next_offset`.
pub fn persist_profile(conn: &Connection, stream: &str, profile: &StateProtocolProfile) -> Result<i64> {
    let row: Option<(String, i64, i64)> = conn
        .prepare_cached("SELECT content_type, stream_flags, next_offset FROM streams WHERE stream=?1")?
        .query_row([stream], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((content_type, _, next_offset)) = row.filter(|r| r.1 & STREAM_FLAG_DELETED == 0) else {
        return Err(Error::StreamNotFound { stream: stream.into() });
    };
    if normalize_content_type(&content_type) != "application/json" {
        return Err(Error::InvalidTouchConfig(
            "state-protocol profile requires application/json stream content-type".into(),
        ));
    }
    let now = now_ms();
    conn.prepare_cached("UPDATE streams SET profile=?1, updated_at_ms=?2 WHERE stream=?3")?.execute(params![
        STATE_PROTOCOL,
        now,
        stream
    ])?;
    conn.prepare_cached(
        "INSERT INTO stream_profiles(stream, profile_json, updated_at_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT(stream) DO UPDATE SET profile_json=excluded.profile_json, updated_at_ms=excluded.updated_at_ms",
    )?
    .execute(params![stream, stringify(&profile.to_value()), now])?;
    sync_touch_state(conn, stream, profile)?;
    Ok(next_offset)
}

/// `syncState`: a touch state row exists exactly when touch is enabled (S14, C6).
pub fn sync_touch_state(conn: &Connection, stream: &str, profile: &StateProtocolProfile) -> Result<()> {
    if profile.enabled_touch().is_some() {
        ensure_touch_state(conn, stream)
    } else {
        delete_touch_state(conn, stream)
    }
}

/// Reads and validates the stored profile of a stream with kind `state-protocol`.
/// `Ok(None)` when the stream has another kind or no stored row; `Err` when the stored JSON
/// does not validate (the message says why).
pub fn read_profile(
    conn: &Connection,
    stream: &str,
) -> Result<Option<std::result::Result<StateProtocolProfile, String>>> {
    let kind: Option<Option<String>> = conn
        .prepare_cached("SELECT profile FROM streams WHERE stream=?1")?
        .query_row([stream], |r| r.get(0))
        .optional()?;
    if kind.flatten().as_deref() != Some(STATE_PROTOCOL) {
        return Ok(None);
    }
    let json: Option<String> = conn
        .prepare_cached("SELECT profile_json FROM stream_profiles WHERE stream=?1")?
        .query_row([stream], |r| r.get(0))
        .optional()?;
    Ok(Some(match json {
        // The reference reads a missing row as the default profile (no touch).
        None => Ok(StateProtocolProfile { touch: None }),
        Some(j) => match parse(&j) {
            Ok(v) => validate_state_protocol_profile(&v, "profile"),
            Err(_) => Err("stored profile is not valid JSON".to_string()),
        },
    }))
}

/// Every stream with kind `state-protocol` that is not marked deleted, ordered by name (M22
/// `listStreamsByProfile`; a stream the host marked deleted keeps its row until it is created
/// again, and is no longer processed).
pub fn list_state_protocol_streams(conn: &Connection) -> Result<Vec<String>> {
    Ok(conn
        .prepare_cached("SELECT stream FROM streams WHERE profile=?1 AND (stream_flags & ?2) = 0 ORDER BY stream ASC")?
        .query_map(params![STATE_PROTOCOL, STREAM_FLAG_DELETED], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

/// Inserts the touch state only if missing, at `next_offset - 1` (history is not replayed).
pub fn ensure_touch_state(conn: &Connection, stream: &str) -> Result<()> {
    let next: Option<i64> = conn
        .prepare_cached("SELECT next_offset FROM streams WHERE stream=?1")?
        .query_row([stream], |r| r.get(0))
        .optional()?;
    conn.prepare_cached(
        "INSERT INTO stream_touch_state(stream, processed_through, updated_at_ms) VALUES (?1, ?2, ?3) ON CONFLICT(stream) DO NOTHING",
    )?
    .execute(params![stream, next.map(|n| n - 1).unwrap_or(-1), now_ms()])?;
    Ok(())
}

/// Moves the checkpoint, but only forward and only if the row still exists (B24: the
/// reference's upsert can resurrect a deleted state or move it backwards). With
/// `created_at_ms`, only while the stream is the one created then: a checkpoint of a stream
/// that was deleted and created again under its name says nothing about the new one.
pub fn advance_touch_state(
    conn: &Connection,
    stream: &str,
    processed_through: i64,
    created_at_ms: Option<i64>,
) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE stream_touch_state SET processed_through=?1, updated_at_ms=?2 WHERE stream=?3 AND processed_through < ?1 \
             AND (?4 IS NULL OR EXISTS (SELECT 1 FROM streams WHERE stream=?3 AND created_at_ms=?4))",
        )?
        .execute(params![processed_through, now_ms(), stream, created_at_ms])?;
    Ok(n > 0)
}

/// Deletes the touch state of a stream that is gone (deleted, or marked deleted), not that of
/// one created again under its name since.
pub fn delete_touch_state_of_gone(conn: &Connection, stream: &str) -> Result<()> {
    conn.prepare_cached(
        "DELETE FROM stream_touch_state WHERE stream=?1 \
         AND NOT EXISTS (SELECT 1 FROM streams WHERE stream=?1 AND (stream_flags & ?2) = 0)",
    )?
    .execute(params![stream, STREAM_FLAG_DELETED])?;
    Ok(())
}

pub fn delete_touch_state(conn: &Connection, stream: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM stream_touch_state WHERE stream=?1")?.execute([stream])?;
    Ok(())
}

pub fn get_touch_state(conn: &Connection, stream: &str) -> Result<Option<TouchState>> {
    Ok(conn
        .prepare_cached("SELECT processed_through, updated_at_ms FROM stream_touch_state WHERE stream=?1")?
        .query_row([stream], |r| Ok(TouchState { processed_through: r.get(0)?, updated_at_ms: r.get(1)? }))
        .optional()?)
}

/// All touch states, ordered by stream (S14).
pub fn list_touch_states(conn: &Connection) -> Result<Vec<(String, TouchState)>> {
    Ok(conn
        .prepare_cached("SELECT stream, processed_through, updated_at_ms FROM stream_touch_state ORDER BY stream ASC")?
        .query_map([], |r| Ok((r.get(0)?, TouchState { processed_through: r.get(1)?, updated_at_ms: r.get(2)? })))?
        .collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TouchConfig;
    use crate::store::schema;

    fn db_with_stream(ct: &str, next_offset: i64) -> Connection {
        let mut c = Connection::open_in_memory().unwrap();
        schema::init(&mut c).unwrap();
        c.execute(
            "INSERT INTO streams(stream, created_at_ms, updated_at_ms, content_type, profile, epoch, next_offset, sealed_through, \
             uploaded_through, pending_rows, pending_bytes, last_append_ms, last_segment_cut_ms, segment_in_progress) \
             VALUES ('s', 0, 0, ?1, 'generic', 0, ?2, -1, -1, 0, 0, 0, 0, 0)",
            params![ct, next_offset],
        )
        .unwrap();
        c
    }

    fn enabled() -> StateProtocolProfile {
        StateProtocolProfile { touch: Some(TouchConfig { enabled: true, ..TouchConfig::default() }) }
    }

    #[test]
    fn persisting_an_enabled_profile_seeds_touch_state_at_the_tail() {
        let c = db_with_stream("application/json; charset=utf-8", 10);
        persist_profile(&c, "s", &enabled()).unwrap();
        assert_eq!(get_touch_state(&c, "s").unwrap().unwrap().processed_through, 9);
        let kind: String = c.query_row("SELECT profile FROM streams", [], |r| r.get(0)).unwrap();
        assert_eq!(kind, "state-protocol");
        let back = read_profile(&c, "s").unwrap().unwrap().unwrap();
        assert_eq!(back, enabled());
        // Re-persisting does not move the checkpoint (M22).
        advance_touch_state(&c, "s", 12, None).unwrap();
        persist_profile(&c, "s", &enabled()).unwrap();
        assert_eq!(get_touch_state(&c, "s").unwrap().unwrap().processed_through, 12);
        // Disabling deletes it.
        persist_profile(&c, "s", &StateProtocolProfile { touch: None }).unwrap();
        assert!(get_touch_state(&c, "s").unwrap().is_none());
        assert_eq!(list_state_protocol_streams(&c).unwrap(), ["s"]);
        c.execute("UPDATE streams SET stream_flags = ?1", [STREAM_FLAG_DELETED]).unwrap();
        assert!(list_state_protocol_streams(&c).unwrap().is_empty(), "a stream marked deleted is not listed");
    }

    #[test]
    fn the_content_type_must_be_json() {
        let c = db_with_stream("application/octet-stream", 0);
        let err = persist_profile(&c, "s", &enabled()).unwrap_err();
        assert_eq!(err.to_string(), "state-protocol profile requires application/json stream content-type");
        assert_eq!(persist_profile(&c, "nope", &enabled()).unwrap_err().code(), "ERR_STREAM_NOT_FOUND");
    }

    #[test]
    fn the_checkpoint_only_moves_forward_and_is_not_resurrected() {
        let c = db_with_stream("application/json", 5);
        ensure_touch_state(&c, "s").unwrap();
        assert!(advance_touch_state(&c, "s", 7, None).unwrap());
        assert!(!advance_touch_state(&c, "s", 6, None).unwrap());
        assert!(advance_touch_state(&c, "s", 8, Some(0)).unwrap(), "the stream created at 0");
        assert!(!advance_touch_state(&c, "s", 9, Some(1)).unwrap(), "a stream of that name created at 1 is gone");
        assert_eq!(get_touch_state(&c, "s").unwrap().unwrap().processed_through, 8);
        delete_touch_state(&c, "s").unwrap();
        assert!(!advance_touch_state(&c, "s", 9, None).unwrap(), "B24: a deleted state stays deleted");
        // The state of a stream that is gone goes; that of one created again under the name stays.
        ensure_touch_state(&c, "s").unwrap();
        delete_touch_state_of_gone(&c, "s").unwrap();
        assert!(get_touch_state(&c, "s").unwrap().is_some(), "the stream is there");
        c.execute("UPDATE streams SET stream_flags = ?1", [STREAM_FLAG_DELETED]).unwrap();
        delete_touch_state_of_gone(&c, "s").unwrap();
        assert!(get_touch_state(&c, "s").unwrap().is_none(), "the stream is marked deleted");
        assert!(list_touch_states(&c).unwrap().is_empty());
    }
}
