//! The bytes of a kept journal: its snapshot file and its log (little-endian throughout).
//!
//! Snapshot: `DTJS`, the format version, a [`Header`], the [`JournalImage`], then the xxh3-64
//! of everything before it. The slots are stored as they are (a full filter), as `(position,
//! generation)` pairs when at most an eighth of them are set, or not at all when the filter was
//! never touched.
//!
//! Log: `DTJL`, the version, a [`Header`] and its xxh3-64; then one frame per flush, each
//! written by one `write`: its payload length (u32), the payload's xxh3-64, the payload (the
//! [`FlushRecord`] and the journal's `covered_through` after it).
//!
//! A reader takes nothing it cannot check: a wrong magic, version, length or checksum, a
//! truncated frame, or bytes after the last frame are a [`Damage`], and the stream's journal
//! starts anew.

use xxhash_rust::xxh3::xxh3_64;

use crate::bytes::{Reader as R, Short, Writer as W};
use crate::journal::{Epoch, FlushRecord, JournalImage};

const SNAPSHOT_MAGIC: &[u8; 4] = b"DTJS";
const LOG_MAGIC: &[u8; 4] = b"DTJL";
const VERSION: u8 = 1;

/// Why a snapshot or a log was not taken up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Not one of our files, or of another format version.
    Format,
    /// Shorter than its contents say (a truncated file).
    Truncated,
    /// A checksum does not match.
    Checksum,
    /// Well formed, but another stream's, another store's or of another filter shape.
    Foreign,
    /// Written by a process that may have lost its tail in an operating-system crash.
    Unclean,
    /// A log record does not follow the snapshot (a generation is missing).
    Gap,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Damage::Format => "not a journal file of this version",
            Damage::Truncated => "truncated",
            Damage::Checksum => "checksum mismatch",
            Damage::Foreign => "another stream's, store's or filter shape's",
            Damage::Unclean => "left by a process of an earlier boot without a clean close",
            Damage::Gap => "a flush is missing",
        })
    }
}

/// What both files say of the journal they hold: checked against the stream before use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub stream: String,
    /// The stream's `created_at_ms` (another stream of the same name is another journal).
    pub incarnation: i64,
    /// The filter's shape, which every answer depends on.
    pub filter_pow2: u8,
    pub k: u8,
    /// The kernel's boot id when the file was written (a crash of the process keeps what it
    /// wrote without an fsync; a crash of the system may not).
    pub boot_id: String,
    /// A snapshot written, and synced, by a clean close.
    pub clean: bool,
}

impl From<Short> for Damage {
    fn from(s: Short) -> Damage {
        match s {
            Short::EndsEarly | Short::LongVarint => Damage::Truncated,
            Short::NotUtf8 => Damage::Format,
        }
    }
}

/// What the journal files add to the byte codec: their header and trailing checksum.
trait WriteFile {
    fn header(&mut self, h: &Header);
    fn checksum(&mut self);
}

impl WriteFile for W {
    fn header(&mut self, h: &Header) {
        self.str(&h.stream);
        self.i64(h.incarnation);
        self.u8(h.filter_pow2);
        self.u8(h.k);
        self.str(&h.boot_id);
        self.u8(u8::from(h.clean));
    }
    fn checksum(&mut self) {
        let sum = xxh3_64(&self.0);
        self.u64(sum);
    }
}

fn read_header(r: &mut R<'_>) -> Result<Header, Damage> {
    Ok(Header {
        stream: r.str()?,
        incarnation: r.i64()?,
        filter_pow2: r.u8()?,
        k: r.u8()?,
        boot_id: r.str()?,
        clean: r.u8()? != 0,
    })
}

/// Splits off and checks the trailing checksum of `bytes`.
fn checked(bytes: &[u8]) -> Result<&[u8], Damage> {
    if bytes.len() < 8 {
        return Err(Damage::Truncated);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
        return Err(Damage::Checksum);
    }
    Ok(body)
}

fn magic(r: &mut R<'_>, want: &[u8; 4]) -> Result<(), Damage> {
    if r.take(4).map_err(|_| Damage::Format)? != want || r.u8().map_err(|_| Damage::Format)? != VERSION {
        return Err(Damage::Format);
    }
    Ok(())
}

const SLOTS_NONE: u8 = 0;
const SLOTS_DENSE: u8 = 1;
const SLOTS_SPARSE: u8 = 2;

/// A snapshot file's bytes.
pub fn encode_snapshot(h: &Header, image: &JournalImage) -> Vec<u8> {
    let set = image.slots.as_ref().map_or(0, |s| s.iter().filter(|&&g| g != 0).count());
    let mut w = W(Vec::with_capacity(64 + image.slots.as_ref().map_or(0, |s| (s.len() * 4).min(set * 8))));
    w.0.extend_from_slice(SNAPSHOT_MAGIC);
    w.u8(VERSION);
    w.header(h);
    w.u64(image.epoch.0);
    w.u32(image.generation);
    w.u32(image.floor_generation);
    w.u32(image.last_overflow_generation);
    w.u64(image.overflow_buckets);
    w.i64(image.last_flushed_source_offset);
    w.i64(image.last_flush_at_ms);
    w.i64(image.last_bucket_start_ms);
    w.i64(image.covered_through);
    w.i64(image.epoch_started_ms);
    match &image.slots {
        None => w.u8(SLOTS_NONE),
        Some(slots) if set <= slots.len() / 8 => {
            w.u8(SLOTS_SPARSE);
            w.u32(slots.len() as u32);
            w.u32(set as u32);
            for (pos, &g) in slots.iter().enumerate().filter(|(_, &g)| g != 0) {
                w.u32(pos as u32);
                w.u32(g);
            }
        }
        Some(slots) => {
            w.u8(SLOTS_DENSE);
            w.u32(slots.len() as u32);
            w.0.reserve(slots.len() * 4);
            for &g in slots {
                w.u32(g);
            }
        }
    }
    w.u32(image.exact.len() as u32);
    for (generation, overflow, keys) in &image.exact {
        w.u32(*generation);
        w.u8(u8::from(*overflow));
        w.u32(keys.len() as u32);
        for &k in keys {
            w.u64(k);
        }
    }
    w.checksum();
    w.0
}

/// Reads a snapshot file's bytes.
pub fn decode_snapshot(bytes: &[u8]) -> Result<(Header, JournalImage), Damage> {
    let mut r = R { b: bytes };
    magic(&mut r, SNAPSHOT_MAGIC)?;
    let mut r = R { b: checked(bytes)? };
    magic(&mut r, SNAPSHOT_MAGIC)?;
    let h = read_header(&mut r)?;
    let mut image = JournalImage {
        epoch: Epoch(r.u64()?),
        generation: r.u32()?,
        floor_generation: r.u32()?,
        last_overflow_generation: r.u32()?,
        overflow_buckets: r.u64()?,
        last_flushed_source_offset: r.i64()?,
        last_flush_at_ms: r.i64()?,
        last_bucket_start_ms: r.i64()?,
        covered_through: r.i64()?,
        epoch_started_ms: r.i64()?,
        slots: None,
        exact: Vec::new(),
    };
    let len_of = |r: &mut R<'_>| -> Result<usize, Damage> {
        let len = r.u32()? as usize;
        if len != 1usize << h.filter_pow2.min(30) {
            return Err(Damage::Foreign);
        }
        Ok(len)
    };
    image.slots = match r.u8()? {
        SLOTS_NONE => None,
        SLOTS_DENSE => {
            let len = len_of(&mut r)?;
            let raw = r.take(len.checked_mul(4).ok_or(Damage::Truncated)?)?;
            Some(raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
        }
        SLOTS_SPARSE => {
            let len = len_of(&mut r)?;
            let n = r.count(8)?;
            let mut slots = vec![0u32; len];
            for _ in 0..n {
                let pos = r.u32()? as usize;
                let g = r.u32()?;
                *slots.get_mut(pos).ok_or(Damage::Format)? = g;
            }
            Some(slots)
        }
        _ => return Err(Damage::Format),
    };
    for _ in 0..r.count(9)? {
        let generation = r.u32()?;
        let overflow = r.u8()? != 0;
        let n = r.count(8)?;
        let keys = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        image.exact.push((generation, overflow, keys));
    }
    if !r.b.is_empty() {
        return Err(Damage::Format);
    }
    Ok((h, image))
}

/// A log file's first bytes.
pub fn encode_log_header(h: &Header) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(64));
    w.0.extend_from_slice(LOG_MAGIC);
    w.u8(VERSION);
    w.header(h);
    w.checksum();
    w.0
}

/// One flush, framed as it is appended to a log.
pub fn encode_frame(rec: &FlushRecord, covered_through: i64) -> Vec<u8> {
    let mut p = W(Vec::with_capacity(64 + rec.keys.len() * 4 + rec.exact.len() * 8));
    p.u64(rec.epoch.0);
    p.u32(rec.generation);
    p.u8(u8::from(rec.overflow));
    p.i64(rec.bucket_start_ms);
    p.i64(rec.flush_at_ms);
    p.i64(rec.max_source_offset);
    p.i64(covered_through);
    p.u32(rec.keys.len() as u32);
    for &k in &rec.keys {
        p.u32(k);
    }
    p.u32(rec.exact.len() as u32);
    for &k in &rec.exact {
        p.u64(k);
    }
    let mut frame = W(Vec::with_capacity(12 + p.0.len()));
    frame.u32(p.0.len() as u32);
    frame.u64(xxh3_64(&p.0));
    frame.0.extend_from_slice(&p.0);
    frame.0
}

/// A log's header and its flushes with the `covered_through` after each.
pub type Log = (Header, Vec<(FlushRecord, i64)>);

/// Reads a whole log file.
pub fn decode_log(bytes: &[u8]) -> Result<Log, Damage> {
    let mut r = R { b: bytes };
    magic(&mut r, LOG_MAGIC)?;
    let h = read_header(&mut r)?;
    let header_len = bytes.len() - r.b.len();
    let sum = r.u64()?;
    if xxh3_64(&bytes[..header_len]) != sum {
        return Err(Damage::Checksum);
    }
    let mut records = Vec::new();
    while !r.b.is_empty() {
        let len = r.u32()? as usize;
        let sum = r.u64()?;
        let payload = r.take(len)?;
        if xxh3_64(payload) != sum {
            return Err(Damage::Checksum);
        }
        let mut p = R { b: payload };
        let mut rec = FlushRecord {
            epoch: Epoch(p.u64()?),
            generation: p.u32()?,
            overflow: p.u8()? != 0,
            bucket_start_ms: p.i64()?,
            flush_at_ms: p.i64()?,
            max_source_offset: p.i64()?,
            keys: Vec::new(),
            exact: Vec::new(),
        };
        let covered = p.i64()?;
        let n = p.count(4)?;
        rec.keys = (0..n).map(|_| p.u32()).collect::<Result<_, _>>()?;
        let n = p.count(8)?;
        rec.exact = (0..n).map(|_| p.u64()).collect::<Result<_, _>>()?;
        if !p.b.is_empty() {
            return Err(Damage::Format);
        }
        records.push((rec, covered));
    }
    Ok((h, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header { stream: "s/ü".into(), incarnation: 17, filter_pow2: 10, k: 3, boot_id: "b".into(), clean: true }
    }

    fn image(slots: Option<Vec<u32>>) -> JournalImage {
        JournalImage {
            epoch: Epoch(0xfeed),
            generation: 9,
            floor_generation: 2,
            last_overflow_generation: 4,
            overflow_buckets: 1,
            last_flushed_source_offset: 88,
            last_flush_at_ms: 1000,
            last_bucket_start_ms: 990,
            covered_through: 90,
            epoch_started_ms: 5,
            slots,
            exact: vec![(8, false, vec![1, 2]), (9, true, vec![])],
        }
    }

    fn record(generation: u32) -> FlushRecord {
        FlushRecord {
            epoch: Epoch(3),
            generation,
            keys: vec![5, 6, 7],
            exact: vec![0xab],
            overflow: false,
            bucket_start_ms: 1,
            flush_at_ms: 2,
            max_source_offset: 40,
        }
    }

    #[test]
    fn snapshots_round_trip_in_each_slot_form() {
        let mut sparse = vec![0u32; 1024];
        sparse[3] = 7;
        sparse[1023] = 9;
        let dense: Vec<u32> = (0..1024).collect();
        for slots in [None, Some(sparse), Some(dense)] {
            let img = image(slots);
            let bytes = encode_snapshot(&header(), &img);
            assert_eq!(decode_snapshot(&bytes), Ok((header(), img)));
        }
    }

    #[test]
    fn a_damaged_snapshot_is_refused() {
        let bytes = encode_snapshot(&header(), &image(Some(vec![1; 1024])));
        assert_eq!(decode_snapshot(&bytes[..bytes.len() - 1]), Err(Damage::Checksum));
        assert_eq!(decode_snapshot(&bytes[..3]), Err(Damage::Format));
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        assert_eq!(decode_snapshot(&flipped), Err(Damage::Checksum));
        let mut other = bytes.clone();
        other[4] = VERSION + 1;
        assert_eq!(decode_snapshot(&other), Err(Damage::Format));
        // A filter of another size than its header says.
        let wrong = encode_snapshot(&Header { filter_pow2: 11, ..header() }, &image(Some(vec![1; 1024])));
        assert_eq!(decode_snapshot(&wrong), Err(Damage::Foreign));
    }

    #[test]
    fn logs_round_trip_and_refuse_a_torn_or_flipped_frame() {
        let mut bytes = encode_log_header(&header());
        assert_eq!(decode_log(&bytes), Ok((header(), vec![])));
        bytes.extend(encode_frame(&record(1), 10));
        bytes.extend(encode_frame(&record(2), 20));
        assert_eq!(decode_log(&bytes), Ok((header(), vec![(record(1), 10), (record(2), 20)])));
        assert_eq!(decode_log(&bytes[..bytes.len() - 1]), Err(Damage::Truncated));
        let mut flipped = bytes.clone();
        let at = bytes.len() - 5;
        flipped[at] ^= 0x10;
        assert_eq!(decode_log(&flipped), Err(Damage::Checksum));
        let mut head = bytes.clone();
        head[7] ^= 1;
        assert!(decode_log(&head).is_err());
    }
}
