//! The messages of the fan-out, and their binary form (little-endian, length-prefixed).
//!
//! Writer → edges, in one JetStream stream, in the order the writer sent them:
//! - [`Message::Flush`]: one journal flush of one stream ([`FlushRecord`]) with the shape of
//!   the journal that made it (a mirror builds the same bloom);
//! - [`Message::Beat`]: every touch-enabled stream's position and what `/touch/meta` and a
//!   wait need to know of it (profile, touch mode, checkpoint, templates). A beat is sent after
//!   every record of the generations it names, so a mirror behind it missed records.
//!
//! Edges → writer, on core NATS: [`Interest`], what the edge's waiters wait for, per stream.
//!
//! Writer → writer and edges, in the same stream on its own subject: [`Claim`], a writer taking
//! (or giving up) the prefix. Every writer message travels in an [envelope](envelope) that
//! names the claim it was published under, its *lease*: the stream sequence of that claim.
//! Claims only ever go in at a higher sequence, so an edge drops whatever arrives under a lease
//! lower than the highest it has seen: a deposed writer's messages (issue 34).
//!
//! Every message starts with a kind byte and the format version; a reader refuses what it
//! does not know ([`DecodeError`]) rather than guess.

use super::keyset;
use crate::bytes::{Reader as R, Short, Writer as W};
use crate::journal::{Epoch, FlushRecord, JournalConfig, JournalOptions};

const VERSION: u8 = 5;
const FLUSH: u8 = b'F';
const BEAT: u8 = b'B';
const INTEREST: u8 = b'I';
const CLAIM: u8 = b'W';
const ENVELOPE: u8 = b'E';

/// The journal options a mirror must share with its writer to answer as it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct JournalShape {
    pub filter_pow2: u8,
    pub k: u8,
    pub key_index_max_keys: u32,
    pub bucket_ms: u32,
}

impl JournalShape {
    /// The shape of a journal that runs with `cfg`.
    pub fn of(cfg: &JournalConfig) -> JournalShape {
        JournalShape {
            filter_pow2: cfg.filter_pow2 as u8,
            k: cfg.k as u8,
            key_index_max_keys: cfg.key_index_max_keys.min(u32::MAX as usize) as u32,
            bucket_ms: cfg.bucket_ms.min(u32::MAX as u64) as u32,
        }
    }

    /// The options of a mirror of this shape; the rest are the defaults (a mirror takes whole
    /// flushes, not touches).
    pub fn options(&self) -> JournalOptions {
        JournalOptions {
            bucket_ms: self.bucket_ms as f64,
            filter_pow2: self.filter_pow2 as f64,
            k: self.k as f64,
            key_index_max_keys: self.key_index_max_keys as f64,
            ..JournalOptions::default()
        }
    }
}

/// One stream in a beat.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct StreamBeat {
    pub stream: String,
    pub epoch: u64,
    pub generation: u32,
    /// The state-protocol profile, as JSON text, when it changed since the last beat (or now
    /// and then, or an edge asked for everything); `None`: as last sent.
    pub profile_json: Option<String>,
    /// 0 fine, 1 restricted, 2 coarse only.
    pub touch_mode: u8,
    /// The checkpoint, -1 before any.
    pub processed_through: i64,
    pub lag_source_offsets: i64,
    pub stream_epoch: i64,
    pub active_templates: i64,
    /// The writer journal's flush interval now (`coalesceMs` in meta; it adapts to demand).
    pub coalesce_ms: u32,
    /// Active templates `(id, entity)`, when they changed since the last beat (or now and
    /// then); `None`: as in the last list sent.
    pub templates: Option<Vec<(String, String)>>,
}

/// What goes from the writer to the edges.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Flush { stream: String, shape: JournalShape, record: FlushRecord },
    Beat { writer: u64, writer_url: String, streams: Vec<StreamBeat> },
}

/// One stream's interest at an edge.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct StreamInterest {
    pub stream: String,
    pub fine_waiters: u32,
    pub coarse_waiters: u32,
    pub broad_fine_waiters: u32,
    pub keys: Vec<u32>,
    pub templates: Vec<String>,
    /// Templates the edge's waits named since its last report (`templateIdsUsed`, T8).
    pub templates_used: Vec<String>,
}

/// What an edge reports: its interest in every stream it holds waiters on, valid for `ttl_ms`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Interest {
    pub edge: u64,
    pub ttl_ms: u32,
    /// The edge lacks what beats send only on change (it started, or met a stream it does not
    /// know): the next beat carries every stream's profile and templates.
    pub want_full: bool,
    pub streams: Vec<StreamInterest>,
}

/// A writer's claim on its prefix: published when it takes the prefix, and with `released`
/// when it gives it up (a clean close), so a successor need not wait for its silence.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Claim {
    pub writer: u64,
    /// When the writer's engine started (wall clock, ms).
    pub started_at_ms: i64,
    /// How often the writer beats: the silence after which the prefix is free is counted in
    /// its beats.
    pub beat_ms: u32,
    pub writer_url: String,
    pub released: bool,
}

// ---- writing

/// A message of `kind`: its kind byte and the format version, as [`read_header`] reads them.
fn message(kind: u8) -> W {
    W(vec![kind, VERSION])
}

/// Encodes a writer's message.
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut w = message(match msg {
        Message::Flush { .. } => FLUSH,
        Message::Beat { .. } => BEAT,
    });
    match msg {
        Message::Flush { stream, shape, record } => {
            // A flush is the fan-out's hot message: its key ids as a set (~3.5 bytes a key id,
            // see [`keyset`]), and a header of varints (~30 bytes for a short stream name).
            w.0.reserve(48 + stream.len() + record.keys.len() * 4 + record.exact.len() * 8);
            w.vstr(stream);
            w.u8(shape.filter_pow2);
            w.u8(shape.k);
            w.var(shape.key_index_max_keys as u64);
            w.var(shape.bucket_ms as u64);
            w.u64(record.epoch.0);
            w.var(record.generation as u64);
            w.svar(record.flush_at_ms);
            w.svar(record.flush_at_ms.wrapping_sub(record.bucket_start_ms));
            w.svar(record.max_source_offset);
            w.u8(record.overflow as u8);
            keyset::put(&mut w, &record.keys);
            w.var(record.exact.len() as u64);
            for &k in &record.exact {
                w.u64(k);
            }
        }
        Message::Beat { writer, writer_url, streams } => {
            w.u64(*writer);
            w.str(writer_url);
            w.len(streams.len());
            for s in streams {
                w.str(&s.stream);
                w.u64(s.epoch);
                w.u32(s.generation);
                match &s.profile_json {
                    None => w.u8(0),
                    Some(p) => {
                        w.u8(1);
                        w.str(p);
                    }
                }
                w.u8(s.touch_mode);
                w.i64(s.processed_through);
                w.i64(s.lag_source_offsets);
                w.i64(s.stream_epoch);
                w.i64(s.active_templates);
                w.u32(s.coalesce_ms);
                match &s.templates {
                    None => w.u8(0),
                    Some(list) => {
                        w.u8(1);
                        w.len(list.len());
                        for (id, entity) in list {
                            w.str(id);
                            w.str(entity);
                        }
                    }
                }
            }
        }
    }
    w.0
}

/// Encodes an edge's interest.
pub fn encode_interest(i: &Interest) -> Vec<u8> {
    let mut w = message(INTEREST);
    w.u64(i.edge);
    w.u32(i.ttl_ms);
    w.u8(i.want_full as u8);
    w.len(i.streams.len());
    for s in &i.streams {
        w.str(&s.stream);
        w.u32(s.fine_waiters);
        w.u32(s.coarse_waiters);
        w.u32(s.broad_fine_waiters);
        w.len(s.keys.len());
        for &k in &s.keys {
            w.u32(k);
        }
        for list in [&s.templates, &s.templates_used] {
            w.len(list.len());
            for t in list {
                w.str(t);
            }
        }
    }
    w.0
}

/// Encodes a writer's claim.
pub fn encode_claim(c: &Claim) -> Vec<u8> {
    let mut w = message(CLAIM);
    w.u64(c.writer);
    w.i64(c.started_at_ms);
    w.u32(c.beat_ms);
    w.str(&c.writer_url);
    w.u8(c.released as u8);
    w.0
}

/// Wraps writer messages published under the claim at stream sequence `lease`. Each message
/// after the first is written as the bytes it shares with the one before it (a count) and the
/// rest: flushes of one stream in a row share their kind, stream, shape and epoch, about 20
/// bytes of their header.
pub fn envelope(lease: u64, messages: &[&[u8]]) -> Vec<u8> {
    let mut w = message(ENVELOPE);
    w.0.reserve(12 + messages.iter().map(|m| m.len() + 4).sum::<usize>());
    w.var(lease);
    w.var(messages.len() as u64);
    let mut before: &[u8] = &[];
    for m in messages {
        let shared = before.iter().zip(m.iter()).take_while(|(a, b)| a == b).count();
        w.var(shared as u64);
        w.var((m.len() - shared) as u64);
        w.0.extend_from_slice(&m[shared..]);
        before = m;
    }
    w.0
}

// ---- reading

/// Why a fan-out message could not be read. Whoever reads one counts it (`badMessages` of
/// `fanoutStats()`) or skips it, and goes on: no decode error reaches a caller of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("a fan-out message ends early")]
    EndsEarly,
    #[error("a fan-out string is not UTF-8")]
    NotUtf8,
    #[error("a fan-out varint is too long")]
    LongVarint,
    /// Bits no writer spells in a flush's key ids ([`keyset::Bad::Spelling`]).
    #[error("a flush's key ids are misspelled")]
    KeysMisspelled,
    #[error("unexpected fan-out message kind {0}")]
    Kind(u8),
    #[error("fan-out format version {0}; this build reads {VERSION}")]
    Version(u8),
    #[error("trailing bytes after a fan-out message")]
    Trailing,
    /// An envelope's message said it shares more bytes with the one before it than that holds.
    #[error("an envelope's message shares more than the one before it holds")]
    Overshared,
}

/// What reading a message gives.
pub type Decoded<T> = std::result::Result<T, DecodeError>;

impl From<Short> for DecodeError {
    fn from(s: Short) -> DecodeError {
        match s {
            Short::EndsEarly => DecodeError::EndsEarly,
            Short::NotUtf8 => DecodeError::NotUtf8,
            Short::LongVarint => DecodeError::LongVarint,
        }
    }
}

impl From<keyset::Bad> for DecodeError {
    fn from(bad: keyset::Bad) -> DecodeError {
        match bad {
            keyset::Bad::Short(s) => s.into(),
            keyset::Bad::Spelling => DecodeError::KeysMisspelled,
        }
    }
}

/// A message's kind byte and format version.
fn read_header(r: &mut R<'_>, kind: u8) -> Decoded<()> {
    let (k, v) = (r.u8()?, r.u8()?);
    if k != kind {
        return Err(DecodeError::Kind(k));
    }
    if v != VERSION {
        return Err(DecodeError::Version(v));
    }
    Ok(())
}

/// Nothing may follow a message.
fn end(r: R<'_>) -> Decoded<()> {
    if r.b.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::Trailing)
    }
}

/// Decodes a writer's message.
pub fn decode(bytes: &[u8]) -> Decoded<Message> {
    let mut r = R { b: bytes };
    let kind = *bytes.first().ok_or(DecodeError::EndsEarly)?;
    let msg = match kind {
        FLUSH => {
            read_header(&mut r, FLUSH)?;
            let stream = r.vstr()?;
            let shape = JournalShape {
                filter_pow2: r.u8()?,
                k: r.u8()?,
                key_index_max_keys: u32::try_from(r.var()?).map_err(|_| DecodeError::EndsEarly)?,
                bucket_ms: u32::try_from(r.var()?).map_err(|_| DecodeError::EndsEarly)?,
            };
            let epoch = Epoch(r.u64()?);
            let generation = u32::try_from(r.var()?).map_err(|_| DecodeError::EndsEarly)?;
            let flush_at_ms = r.svar()?;
            let bucket_start_ms = flush_at_ms.wrapping_sub(r.svar()?);
            let max_source_offset = r.svar()?;
            let overflow = r.u8()? != 0;
            let keys = keyset::take(&mut r)?;
            let n = r.vcount(8)?;
            let exact = (0..n).map(|_| r.u64()).collect::<std::result::Result<Vec<_>, Short>>()?;
            let record = FlushRecord {
                epoch,
                generation,
                keys,
                exact,
                overflow,
                bucket_start_ms,
                flush_at_ms,
                max_source_offset,
            };
            Message::Flush { stream, shape, record }
        }
        BEAT => {
            read_header(&mut r, BEAT)?;
            let writer = r.u64()?;
            let writer_url = r.str()?;
            let n = r.count(42)?;
            let mut streams = Vec::with_capacity(n);
            for _ in 0..n {
                let stream = r.str()?;
                let epoch = r.u64()?;
                let generation = r.u32()?;
                let profile_json = if r.u8()? == 0 { None } else { Some(r.str()?) };
                let touch_mode = r.u8()?;
                let processed_through = r.i64()?;
                let lag_source_offsets = r.i64()?;
                let stream_epoch = r.i64()?;
                let active_templates = r.i64()?;
                let coalesce_ms = r.u32()?;
                let templates = if r.u8()? == 0 {
                    None
                } else {
                    let n = r.count(8)?;
                    Some((0..n).map(|_| Ok((r.str()?, r.str()?))).collect::<std::result::Result<Vec<_>, Short>>()?)
                };
                streams.push(StreamBeat {
                    stream,
                    epoch,
                    generation,
                    profile_json,
                    touch_mode,
                    processed_through,
                    lag_source_offsets,
                    stream_epoch,
                    active_templates,
                    coalesce_ms,
                    templates,
                });
            }
            Message::Beat { writer, writer_url, streams }
        }
        k => return Err(DecodeError::Kind(k)),
    };
    end(r)?;
    Ok(msg)
}

/// Decodes an edge's interest.
pub fn decode_interest(bytes: &[u8]) -> Decoded<Interest> {
    let mut r = R { b: bytes };
    read_header(&mut r, INTEREST)?;
    let edge = r.u64()?;
    let ttl_ms = r.u32()?;
    let want_full = r.u8()? != 0;
    let n = r.count(28)?;
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let stream = r.str()?;
        let (fine_waiters, coarse_waiters, broad_fine_waiters) = (r.u32()?, r.u32()?, r.u32()?);
        let nk = r.count(4)?;
        let keys = (0..nk).map(|_| r.u32()).collect::<std::result::Result<Vec<_>, Short>>()?;
        let nt = r.count(4)?;
        let templates = (0..nt).map(|_| r.str()).collect::<std::result::Result<Vec<_>, Short>>()?;
        let nu = r.count(4)?;
        let templates_used = (0..nu).map(|_| r.str()).collect::<std::result::Result<Vec<_>, Short>>()?;
        streams.push(StreamInterest {
            stream,
            fine_waiters,
            coarse_waiters,
            broad_fine_waiters,
            keys,
            templates,
            templates_used,
        });
    }
    end(r)?;
    Ok(Interest { edge, ttl_ms, want_full, streams })
}

/// Decodes a writer's claim.
pub fn decode_claim(bytes: &[u8]) -> Decoded<Claim> {
    let mut r = R { b: bytes };
    read_header(&mut r, CLAIM)?;
    let claim = Claim {
        writer: r.u64()?,
        started_at_ms: r.i64()?,
        beat_ms: r.u32()?,
        writer_url: r.str()?,
        released: r.u8()? != 0,
    };
    end(r)?;
    Ok(claim)
}

/// Opens an [`envelope`]: its lease and the messages it holds.
pub fn open_envelope(bytes: &[u8]) -> Decoded<(u64, Vec<Vec<u8>>)> {
    let mut r = R { b: bytes };
    read_header(&mut r, ENVELOPE)?;
    let lease = r.var()?;
    let n = r.vcount(2)?;
    let mut messages: Vec<Vec<u8>> = Vec::with_capacity(n);
    for _ in 0..n {
        let shared = usize::try_from(r.var()?).map_err(|_| DecodeError::EndsEarly)?;
        let before = messages.last().map_or(&[][..], |m| &m[..]);
        if shared > before.len() {
            return Err(DecodeError::Overshared);
        }
        let len = usize::try_from(r.var()?).map_err(|_| DecodeError::EndsEarly)?;
        let rest = r.take(len)?;
        let mut m = Vec::with_capacity(shared + rest.len());
        m.extend_from_slice(&before[..shared]);
        m.extend_from_slice(rest);
        messages.push(m);
    }
    end(r)?;
    Ok((lease, messages))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn flush(keys: Vec<u32>, exact: Vec<u64>) -> Message {
        Message::Flush {
            stream: "orders/é".into(),
            shape: JournalShape { filter_pow2: 22, k: 4, key_index_max_keys: 32, bucket_ms: 100 },
            record: FlushRecord {
                epoch: Epoch(0xdead_beef),
                generation: 7,
                keys,
                exact,
                overflow: false,
                bucket_start_ms: 1_700_000_000_000,
                flush_at_ms: 1_700_000_000_100,
                max_source_offset: -1,
            },
        }
    }

    proptest! {
        #[test]
        fn flushes_round_trip(keys in prop::collection::vec(any::<u32>(), 0..200), exact in prop::collection::vec(any::<u64>(), 0..20)) {
            let m = flush(keys, exact);
            // The key ids come back as a set, in key order.
            let Message::Flush { stream, shape, mut record } = m.clone() else { unreachable!() };
            record.keys.sort_unstable();
            prop_assert_eq!(decode(&encode(&m)).unwrap(), Message::Flush { stream, shape, record });
        }

        #[test]
        fn no_prefix_or_corruption_is_misread_as_a_message(keys in prop::collection::vec(any::<u32>(), 0..50), cut in 0usize..400, flip in any::<(usize, u8)>()) {
            let bytes = encode(&flush(keys, vec![1, 2]));
            // Every proper prefix is refused.
            let cut = cut % bytes.len();
            prop_assert!(decode(&bytes[..cut]).is_err());
            // A changed byte is refused or read as some message: never a panic.
            let mut b = bytes.clone();
            let i = flip.0 % b.len();
            b[i] ^= flip.1 | 1;
            let _ = decode(&b);
            let _ = decode_interest(&b);
        }
    }

    #[test]
    fn beats_and_interest_round_trip() {
        let beat = Message::Beat {
            writer: 9,
            writer_url: "http://127.0.0.1:8787".into(),
            streams: vec![
                StreamBeat {
                    stream: "a".into(),
                    epoch: 3,
                    generation: 4,
                    profile_json: Some("{\"kind\":\"state-protocol\"}".into()),
                    touch_mode: 1,
                    processed_through: 99,
                    lag_source_offsets: 2,
                    stream_epoch: 0,
                    active_templates: 1,
                    coalesce_ms: 7,
                    templates: Some(vec![("0123456789abcdef".into(), "users".into())]),
                },
                StreamBeat { stream: "b".into(), templates: None, ..Default::default() },
            ],
        };
        assert_eq!(decode(&encode(&beat)).unwrap(), beat);
        let interest = Interest {
            edge: 5,
            ttl_ms: 3000,
            want_full: true,
            streams: vec![StreamInterest {
                stream: "a".into(),
                fine_waiters: 2,
                coarse_waiters: 1,
                broad_fine_waiters: 0,
                keys: vec![1, 2, 3],
                templates: vec!["0123456789abcdef".into()],
                templates_used: vec!["0123456789abcdef".into()],
            }],
        };
        assert_eq!(decode_interest(&encode_interest(&interest)).unwrap(), interest);
        assert_eq!(decode(&encode_interest(&interest)).unwrap_err(), DecodeError::Kind(INTEREST));
    }

    #[test]
    fn claims_round_trip() {
        let a = Claim { writer: 9, started_at_ms: 1_000, beat_ms: 500, writer_url: "http://a".into(), released: false };
        assert_eq!(decode_claim(&encode_claim(&a)).unwrap(), a);
        let gone = Claim { released: true, ..a.clone() };
        assert_eq!(decode_claim(&encode_claim(&gone)).unwrap(), gone);
        assert!(decode(&encode_claim(&a)).is_err() && decode_claim(&encode_interest(&Interest::default())).is_err());
    }

    #[test]
    fn envelopes_hold_their_lease_and_messages_and_cost_a_few_bytes() {
        let (one, two) = (encode(&flush(vec![1, 2], vec![])), encode(&flush(vec![3], vec![9])));
        let e = envelope(300, &[&one, &two]);
        let (lease, got) = open_envelope(&e).unwrap();
        assert_eq!((lease, got), (300, vec![one.clone(), two.clone()]));
        assert!(envelope(300, &[&one]).len() <= one.len() + 8);
        // The second flush of the stream costs what differs from the first, not its header.
        assert!(e.len() <= envelope(300, &[&one]).len() + two.len() - 20, "{} bytes", e.len());
        let other = encode(&Message::Beat { writer: 1, writer_url: String::new(), streams: vec![] });
        let (_, got) = open_envelope(&envelope(1, &[&one, &other, &two, &two])).unwrap();
        assert_eq!(got, vec![one.clone(), other, two.clone(), two.clone()]);
        assert!(open_envelope(&one).is_err() && decode(&e).is_err());
        for cut in 0..e.len() {
            assert!(open_envelope(&e[..cut]).is_err(), "cut at {cut}");
        }
        // The first message shares nothing; a later one no more than the one before it holds.
        let mut w = message(ENVELOPE);
        w.var(300);
        w.var(1);
        w.var(1);
        w.var(0);
        assert_eq!(open_envelope(&w.0), Err(DecodeError::Overshared));
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        let bytes = encode(&flush(vec![1, 2, 3], vec![]));
        assert_eq!(decode(&bytes[..bytes.len() - 1]), Err(DecodeError::EndsEarly));
        assert_eq!(decode(&[bytes.clone(), vec![0]].concat()), Err(DecodeError::Trailing));
        assert_eq!(decode(&[]), Err(DecodeError::EndsEarly));
        assert_eq!(decode(b"Z"), Err(DecodeError::Kind(b'Z')));
        // A key set's own refusals fold into the message's.
        assert_eq!(DecodeError::from(keyset::Bad::Spelling), DecodeError::KeysMisspelled);
        assert_eq!(DecodeError::from(keyset::Bad::Short(Short::NotUtf8)), DecodeError::NotUtf8);
        assert_eq!(DecodeError::KeysMisspelled.to_string(), "a flush's key ids are misspelled");
    }

    #[test]
    fn another_version_is_refused_by_name() {
        let mut b = encode(&flush(vec![1], vec![]));
        b[1] = 1;
        let e = decode(&b).unwrap_err();
        assert_eq!(e, DecodeError::Version(1));
        assert_eq!(e.to_string(), format!("fan-out format version 1; this build reads {VERSION}"));
    }

    #[test]
    fn a_huge_count_is_refused_without_allocating_it() {
        let mut b = encode(&flush(vec![], vec![]));
        // The key and exact counts are the last two bytes (two empty varints).
        let at = b.len() - 2;
        b.truncate(at);
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
        assert!(decode(&b).is_err());
        let mut b = encode(&flush(vec![], vec![]));
        b.truncate(at + 1);
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode(&b).is_err());
    }

    #[test]
    fn a_flush_header_is_small_and_key_ids_cost_under_four_bytes() {
        let none = encode(&flush(vec![], vec![])).len();
        assert!(none <= 40, "header of {none} bytes");
        // 46 ids spread over 32 bits (a busy flush of hashed keys).
        let keys: Vec<u32> = (0..46u32).map(|i| i.wrapping_mul(0x9e37_79b9).rotate_left(7)).collect();
        let with = encode(&flush(keys, vec![])).len();
        assert!(with - none <= 46 * 375 / 100, "{} bytes for 46 key ids", with - none);
    }
}
