//! Touch journals kept across restarts: the files that let a restarted engine answer every
//! cursor it handed out before as it would have (no `stale`, no refetch storm).
//!
//! Each touch stream's journal has two files in the store's journal folder
//! (`<store file>-journals/`, named by a hash of the stream's name): a snapshot of the journal
//! ([`crate::journal::JournalImage`]) and a log of the flushes since. A flush is written to the
//! log under the journal's lock, before any waiter it wakes is resolved and before a meta
//! reader or an edge can see it ([`crate::journal::FlushLog`]), with one `write` and no
//! `fsync`: the page cache keeps it through a crash of the process (`kill -9`), and no client
//! can hold a cursor that is not in the log. When the log has grown past [`REBASE_BYTES`] the
//! journal's image becomes the new snapshot and the log starts again; a clean close writes the
//! final snapshot with an `fsync` and removes the log.
//!
//! On open, [`JournalDir::restore`] takes the snapshot up and applies the log's flushes after
//! it, as a mirror applies its writer's. Anything it cannot vouch for is refused, and that
//! stream's journal starts anew (its old cursors answer `stale`, as without this module): a
//! damaged file ([`format::Damage`]), another store's or another stream's, another filter
//! shape, or files a process left without a clean close before the machine restarted (an
//! operating-system crash may have lost a tail the clients saw). Nothing else is lost either
//! way.
//!
//! Why files beside the database rather than tables inside it: a flush must be durable before
//! it is visible, under the journal's lock, at every flush of every stream. A `write` to a file
//! of our own costs microseconds and takes no lock another writer holds; a row in the store's
//! file would wait behind the single writer (the host's own appends, in a swapped server) and
//! its `synchronous=FULL` commit, on the path of every wake.

pub mod format;

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::journal::{FlushLog, FlushRecord, JournalConfig, JournalImage, JournalState};
use format::{Damage, Header};

/// A log this long (bytes) is folded into a new snapshot: ~10,800 flushes of 8 keys. A crash
/// leaves at most this much to replay; 50 full 16 MiB filters, each with a log this long, are
/// taken up in 0.55–0.7 s (`examples/journal_keep.rs`, docs/perf-notes.md).
pub const REBASE_BYTES: u64 = 1 << 20;

/// The kernel's boot id (empty where there is none).
fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The folder of a store's kept journals.
#[derive(Clone, Debug)]
pub struct JournalDir {
    path: PathBuf,
    boot_id: String,
    /// A random id of the folder, in every file's header: a file copied in from another
    /// store's folder is refused.
    store_id: String,
    /// The folder's `lock` file, locked (`flock`) while an engine keeps journals in it: two
    /// engines on one store, in one process or two, would write each other's files.
    lock: Arc<Mutex<Option<File>>>,
}

/// What [`JournalDir::restore`] found for a stream.
pub enum Restored {
    /// No kept journal.
    Nothing,
    /// A kept journal that could not be taken up; its files are removed.
    Refused(Damage),
    /// The journal as it was, with its log open for the flushes to come, and the flushes
    /// replayed from the log.
    Kept { state: Box<JournalState>, replayed: Vec<FlushRecord>, log: StreamLog },
}

impl JournalDir {
    /// The journal folder of the store at `store_path`; `None` for an in-memory store.
    pub fn of_store(store_path: &str) -> Option<PathBuf> {
        if store_path == ":memory:" || store_path.is_empty() || store_path.starts_with("file:") {
            return None;
        }
        Some(PathBuf::from(format!("{store_path}-journals")))
    }

    /// Opens (creating) the folder and locks it; fails with `WouldBlock` while another engine
    /// holds it.
    pub fn open(path: PathBuf) -> std::io::Result<JournalDir> {
        fs::create_dir_all(&path)?;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(path.join("lock"))?;
        lock.try_lock().map_err(|e| match e {
            fs::TryLockError::WouldBlock => std::io::Error::new(
                ErrorKind::WouldBlock,
                "another engine keeps its journals there (two engines on one store)",
            ),
            fs::TryLockError::Error(e) => e,
        })?;
        let id_path = path.join("store-id");
        let store_id = match fs::read_to_string(&id_path) {
            Ok(s) if s.trim().len() == 16 => s.trim().to_string(),
            _ => {
                let id = crate::journal::Epoch::random().to_string();
                write_synced(&id_path, id.as_bytes())?;
                File::open(&path)?.sync_all()?;
                id
            }
        };
        Ok(JournalDir { path, boot_id: boot_id(), store_id, lock: Arc::new(Mutex::new(Some(lock))) })
    }

    /// Makes the renames and removals of clean closes ([`StreamLog::close`]) durable: one
    /// `fsync` of the folder for all of them.
    pub fn sync(&self) -> std::io::Result<()> {
        File::open(&self.path)?.sync_all()
    }

    /// Unlocks the folder (the engine closed): another engine may keep its journals there.
    pub fn release(&self) {
        self.lock.lock().take();
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stem(&self, stream: &str) -> PathBuf {
        let h = xxhash_rust::xxh3::xxh3_64(stream.as_bytes());
        self.path.join(format!("{h:016x}"))
    }

    fn header(&self, stream: &str, incarnation: i64, cfg: &JournalConfig, clean: bool) -> Header {
        Header {
            stream: stream.to_string(),
            incarnation,
            filter_pow2: cfg.filter_pow2 as u8,
            k: cfg.k as u8,
            boot_id: format!("{}/{}", self.store_id, self.boot_id),
            clean,
        }
    }

    /// Takes up the stream's kept journal, if any and sound. `incarnation` is the stream's
    /// `created_at_ms`; `cfg` the journal config its profile asks for now.
    pub fn restore(&self, stream: &str, incarnation: i64, cfg: &JournalConfig) -> Restored {
        let stem = self.stem(stream);
        let (snap, log) = (stem.with_extension("snap"), stem.with_extension("log"));
        let snap_bytes = match read(&snap) {
            Ok(Some(b)) => b,
            Ok(None) => {
                let _ = fs::remove_file(&log);
                return Restored::Nothing;
            }
            Err(_) => return self.refuse(stream, Damage::Truncated),
        };
        match self.take_up(stream, incarnation, cfg, &snap_bytes, &log) {
            Ok((state, replayed, mut log_bytes)) => {
                if replayed.is_empty() {
                    // Nothing after the snapshot: the next flush starts a log of this boot.
                    let _ = fs::remove_file(&log);
                    log_bytes = 0;
                }
                let files = LogFiles {
                    dir: self.clone(),
                    stream: stream.to_string(),
                    stem,
                    header: self.header(stream, incarnation, cfg, false),
                    log: None,
                    log_bytes,
                    broken: false,
                };
                Restored::Kept { state: Box::new(state), replayed, log: StreamLog(Arc::new(Mutex::new(files))) }
            }
            Err(d) => self.refuse(stream, d),
        }
    }

    fn take_up(
        &self,
        stream: &str,
        incarnation: i64,
        cfg: &JournalConfig,
        snap: &[u8],
        log: &Path,
    ) -> Result<(JournalState, Vec<FlushRecord>, u64), Damage> {
        let (h, image) = format::decode_snapshot(snap)?;
        let ours = self.header(stream, incarnation, cfg, h.clean);
        let (store, boot) = h.boot_id.split_once('/').unwrap_or((&h.boot_id, ""));
        if h.stream != stream
            || store != self.store_id
            || (h.incarnation != -1 && h.incarnation != incarnation)
            || (h.filter_pow2, h.k) != (ours.filter_pow2, ours.k)
        {
            return Err(Damage::Foreign);
        }
        let log_bytes = read(log).map_err(|_| Damage::Truncated)?;
        if !h.clean && boot != self.boot_id {
            return Err(Damage::Unclean);
        }
        let mut state = JournalState::restore(*cfg, image).ok_or(Damage::Foreign)?;
        let mut replayed = Vec::new();
        let len = log_bytes.as_ref().map_or(0, |b| b.len() as u64);
        if let Some(bytes) = log_bytes {
            let (lh, records) = format::decode_log(&bytes)?;
            let (lstore, lboot) = lh.boot_id.split_once('/').unwrap_or((&lh.boot_id, ""));
            if lh.stream != stream || lstore != self.store_id || (lh.filter_pow2, lh.k) != (h.filter_pow2, h.k) {
                return Err(Damage::Foreign);
            }
            let mut out = Vec::new();
            state.begin_replay();
            for (rec, covered) in records {
                if rec.epoch == state.epoch() && rec.generation <= state.generation() {
                    continue; // folded into the snapshot already
                }
                if lboot != self.boot_id {
                    return Err(Damage::Unclean);
                }
                if rec.epoch == state.epoch() && rec.generation != state.generation() + 1 {
                    return Err(Damage::Gap);
                }
                state.apply_flush(&rec, &mut out);
                state.note_through(covered);
                replayed.push(rec);
            }
            state.end_replay();
            debug_assert!(out.is_empty(), "a journal taken up has no waiter");
        }
        state.clear_stats();
        Ok((state, replayed, len))
    }

    fn refuse(&self, stream: &str, d: Damage) -> Restored {
        self.remove(stream);
        Restored::Refused(d)
    }

    /// The log of a new journal: its snapshot (the journal as it starts) is written now, so a
    /// cursor handed out before the first flush is kept too.
    pub fn start(&self, stream: &str, incarnation: Option<i64>, state: &mut JournalState) -> StreamLog {
        let cfg = *state.config();
        let mut files = LogFiles {
            dir: self.clone(),
            stream: stream.to_string(),
            stem: self.stem(stream),
            header: self.header(stream, incarnation.unwrap_or(-1), &cfg, false),
            log: None,
            log_bytes: 0,
            broken: false,
        };
        files.rebase(&state.image());
        StreamLog(Arc::new(Mutex::new(files)))
    }

    /// Removes the kept journals of every stream but `streams` (streams deleted, or whose
    /// touch was disabled, while no engine ran).
    pub fn remove_all_but<'a>(&self, streams: impl Iterator<Item = &'a str>) {
        let keep: std::collections::HashSet<String> = streams
            .map(|s| self.stem(s).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            .collect();
        let Ok(entries) = fs::read_dir(&self.path) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let stem = path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if matches!(ext, "snap" | "log" | "snap-tmp") && !keep.contains(&stem) {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// Removes a stream's kept journal (the stream is gone, or its journal was replaced).
    pub fn remove(&self, stream: &str) {
        let stem = self.stem(stream);
        let _ = fs::remove_file(stem.with_extension("log"));
        let _ = fs::remove_file(stem.with_extension("snap"));
    }
}

/// Reads a whole file; `None` if it does not exist.
fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match File::open(path) {
        Ok(mut f) => {
            let mut b = Vec::with_capacity(f.metadata().map_or(0, |m| m.len() as usize));
            f.read_to_end(&mut b)?;
            Ok(Some(b))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` through a temporary file renamed over it, synced; the rename is
/// durable once the folder is synced too ([`JournalDir::sync`]).
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    fs::rename(&tmp, path)
}

/// A stream's kept journal, as its journal's [`FlushLog`] and for the engine (its clean
/// close, its removal). Lock order: the journal's lock, then this one.
#[derive(Clone)]
pub struct StreamLog(Arc<Mutex<LogFiles>>);

struct LogFiles {
    dir: JournalDir,
    stream: String,
    stem: PathBuf,
    header: Header,
    log: Option<File>,
    log_bytes: u64,
    /// A write failed: nothing more is written and the files are gone, so a restart starts
    /// this journal anew rather than take up a log missing a flush a client saw.
    broken: bool,
}

impl LogFiles {
    fn fail(&mut self, what: &str, e: std::io::Error) {
        if !self.broken {
            eprintln!(
                "durable-touch: cannot {what} the kept journal of stream {:?} ({e}); its cursors will be stale after a restart",
                self.stream
            );
        }
        self.broken = true;
        self.log = None;
        self.dir.remove(&self.stream);
    }

    fn append(&mut self, frame: &[u8]) -> std::io::Result<()> {
        if self.log.is_none() {
            let path = self.stem.with_extension("log");
            let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
            if f.metadata()?.len() == 0 {
                let head = format::encode_log_header(&self.header);
                f.write_all(&head)?;
                self.log_bytes = head.len() as u64;
            } else {
                self.log_bytes = f.metadata()?.len();
            }
            self.log = Some(f);
        }
        self.log.as_mut().expect("opened above").write_all(frame)?;
        self.log_bytes += frame.len() as u64;
        Ok(())
    }

    /// Folds the log into a new snapshot, not synced (a crash of the process keeps it as it
    /// keeps the log; a crash of the system refuses this boot's files anyway).
    fn rebase(&mut self, image: &JournalImage) {
        if self.broken {
            return;
        }
        if let Err(e) = self.write_snapshot(image, false) {
            self.fail("write", e);
        }
    }

    /// `image` becomes the snapshot (written beside it, synced if `synced`, then renamed over
    /// it), then the log starts again after it: a crash between the two leaves records the
    /// snapshot holds already, which a restore skips.
    fn write_snapshot(&mut self, image: &JournalImage, synced: bool) -> std::io::Result<()> {
        let bytes = format::encode_snapshot(&self.header, image);
        let tmp = self.stem.with_extension("snap-tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        if synced {
            f.sync_data()?;
        }
        drop(f);
        fs::rename(&tmp, self.stem.with_extension("snap"))?;
        self.log = None;
        self.log_bytes = 0;
        match fs::remove_file(self.stem.with_extension("log")) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl FlushLog for StreamLog {
    fn flushed(&mut self, record: &FlushRecord, covered_through: i64) -> bool {
        let mut files = self.0.lock();
        if files.broken {
            return false;
        }
        if let Err(e) = files.append(&format::encode_frame(record, covered_through)) {
            files.fail("append to", e);
            return false;
        }
        files.log_bytes >= REBASE_BYTES
    }

    fn rebase(&mut self, image: &JournalImage) {
        self.0.lock().rebase(image);
    }
}

impl StreamLog {
    /// The stream's `created_at_ms`, once known (written with the next snapshot).
    pub fn set_incarnation(&self, incarnation: i64) {
        self.0.lock().header.incarnation = incarnation;
    }

    /// A clean close: `image` (taken after a last flush, with the log detached from the
    /// journal) is written as a synced snapshot marked clean, and the log is removed (durable
    /// once the folder is synced, [`JournalDir::sync`]).
    pub fn close(&self, image: &JournalImage) {
        let mut files = self.0.lock();
        if files.broken {
            return;
        }
        files.header.clean = true;
        if let Err(e) = files.write_snapshot(image, true) {
            files.fail("close", e);
        }
        files.broken = true; // closed: nothing more is written
    }

    /// Forgets the kept journal: its files go, nothing more is written.
    pub fn remove(&self) {
        let mut files = self.0.lock();
        files.broken = true;
        files.log = None;
        let (dir, stream) = (files.dir.clone(), files.stream.clone());
        dir.remove(&stream);
    }

    /// Whether it still keeps the journal (no write failed, not closed or removed).
    pub fn is_keeping(&self) -> bool {
        !self.0.lock().broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Epoch, JournalOptions};

    fn cfg() -> JournalConfig {
        JournalConfig::from_options(&JournalOptions { filter_pow2: 10.0, ..Default::default() })
    }

    /// A journal of `stream` kept cleanly in `dir`, touched once; returns its epoch.
    fn keep(dir: &JournalDir, stream: &str) -> Epoch {
        let mut s = JournalState::new(cfg(), Epoch::random());
        let log = dir.start(stream, Some(5), &mut s);
        s.set_log(Some(Box::new(log.clone())));
        s.touch(7, Some(1), None, 1);
        s.note_through(1);
        s.flush(2, &mut Vec::new());
        s.take_log();
        log.close(&s.image());
        s.epoch()
    }

    #[test]
    fn a_kept_journal_is_taken_up_by_its_own_store_and_stream_only() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (JournalDir::open(tmp.path().join("a")).unwrap(), JournalDir::open(tmp.path().join("b")).unwrap());
        let epoch = keep(&a, "s");
        match a.restore("s", 5, &cfg()) {
            Restored::Kept { state, .. } => {
                assert_eq!((state.epoch(), state.generation(), state.covered_through()), (epoch, 1, 1));
                assert!(state.maybe_touched_since(7, 0));
            }
            _ => panic!("not kept"),
        }
        // Another incarnation of the stream (deleted and created again while stopped).
        keep(&a, "s");
        assert!(matches!(a.restore("s", 6, &cfg()), Restored::Refused(Damage::Foreign)));
        // Another store's file copied in, under the name this store would give it.
        keep(&a, "s");
        let name = a.stem("s").with_extension("snap");
        fs::copy(&name, b.stem("s").with_extension("snap")).unwrap();
        assert!(matches!(b.restore("s", 5, &cfg()), Restored::Refused(Damage::Foreign)));
        // Another filter shape (`touch.memory` changed while stopped).
        keep(&a, "s");
        let other = JournalConfig::from_options(&JournalOptions { filter_pow2: 11.0, ..Default::default() });
        assert!(matches!(a.restore("s", 5, &other), Restored::Refused(Damage::Foreign)));
        // Refused files are gone: the next open finds nothing.
        assert!(matches!(a.restore("s", 5, &cfg()), Restored::Nothing));
    }

    #[test]
    fn a_folder_is_kept_by_one_engine_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let first = JournalDir::open(tmp.path().join("j")).unwrap();
        let second = JournalDir::open(tmp.path().join("j")).unwrap_err();
        assert_eq!(second.kind(), ErrorKind::WouldBlock);
        first.release();
        assert!(JournalDir::open(tmp.path().join("j")).is_ok());
    }
}
