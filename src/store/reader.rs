//! Reader connections: a few threads, each owning one read-only-by-use connection, serving
//! queries off the JavaScript thread. In WAL mode they read committed data concurrently with
//! the writer.

use std::panic::AssertUnwindSafe;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use crate::error::Result;

/// A query to run on some reader connection. It owns its reply: `run` answers with the
/// query's outcome, `fail` with an error when the query cannot run at all.
pub(crate) trait ReadTask: Send {
    fn run(self: Box<Self>, conn: &Connection);
    fn fail(self: Box<Self>, err: crate::Error);
}

pub(crate) type ReadJob = Box<dyn ReadTask>;

/// The [`ReadTask`] of a closure and its reply.
pub(crate) struct FnRead<T, F> {
    pub f: F,
    pub reply: crate::store::Reply<T>,
}

impl<T, F> ReadTask for FnRead<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T> + Send,
{
    fn run(self: Box<Self>, conn: &Connection) {
        let FnRead { f, reply } = *self;
        reply(crate::error::catch_panic(|| f(conn)));
    }

    fn fail(self: Box<Self>, err: crate::Error) {
        (self.reply)(Err(err));
    }
}

pub(crate) struct ReaderPool {
    pub tx: Sender<ReadJob>,
    pub threads: Vec<JoinHandle<()>>,
}

impl ReaderPool {
    /// Starts one thread per connection. `open` is called once per reader, on the caller's
    /// thread, so a failure to open is reported by [`crate::store::Store::open`].
    pub fn start(count: usize, mut open: impl FnMut() -> Result<Connection>) -> Result<ReaderPool> {
        let (tx, rx) = crossbeam_channel::unbounded::<ReadJob>();
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let conn = open()?;
            let rx: Receiver<ReadJob> = rx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("dt-reader-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        // Jobs catch their own panics; this is only a last line of defence.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job.run(&conn)));
                    }
                })
                .map_err(|e| crate::Error::Internal(format!("cannot start reader thread: {e}")))?;
            threads.push(handle);
        }
        Ok(ReaderPool { tx, threads })
    }
}
