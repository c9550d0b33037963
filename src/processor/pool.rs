//! The processor pool: batches run on a dedicated rayon pool, off the JS thread, several at
//! once (one per core), each in its own panic boundary so a failure rejects only its batch.

use std::sync::OnceLock;

use super::{process_chunks, ProcessRequest, ProcessResult, RowBuffer, TemplateRow};
use crate::error::catch_panic;
use crate::store::Reply;

fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("dt-processor-{i}"))
            .build()
            .unwrap_or_else(|e| panic!("cannot start the processor pool: {e}"))
    })
}

/// Threads in the processor pool.
pub fn threads() -> usize {
    pool().current_num_threads()
}

/// Runs `job` on the pool and hands its outcome to `reply` (exactly once, on a pool thread).
/// A panic becomes [`Error::Internal`].
pub fn spawn<T: Send + 'static>(job: impl FnOnce() -> crate::Result<T> + Send + 'static, reply: Reply<T>) {
    pool().spawn(move || reply(catch_panic(job)));
}

/// Processes one batch on the pool, its rows arriving in chunks while it runs (`count` rows
/// in all, for reserving): the batch takes each chunk as it comes ([`process_chunks`]) and
/// ends when the sender is dropped. The pool thread waits for chunks, so the sender must
/// never wait for the pool (the channel is unbounded, and its senders — the JS thread reading
/// `processRows`' rows, a store reader — only read and send), or a full pool could deadlock.
pub fn process_stream(
    request: ProcessRequest,
    count: usize,
    templates: Vec<TemplateRow>,
    chunks: std::sync::mpsc::Receiver<crate::Result<RowBuffer>>,
    reply: Reply<ProcessResult>,
) {
    pool().spawn(move || {
        reply(catch_panic(|| process_chunks(&request, count, chunks.iter(), &templates)));
        drop(templates);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::batch::tests::{p17_request, p17_rows, p17_template};
    use crate::processor::{process_rows, Row};
    use crate::store::blocking;

    /// `rows` as chunks of `per_chunk` rows, sent before the batch starts.
    fn stream(request: ProcessRequest, rows: &[Row], per_chunk: usize, reply: Reply<ProcessResult>) {
        let (chunks, received) = std::sync::mpsc::channel();
        for part in rows.chunks(per_chunk) {
            chunks.send(Ok(part.iter().collect())).unwrap();
        }
        process_stream(request, rows.len(), vec![p17_template()], received, reply);
    }

    #[test]
    fn batches_run_in_parallel_and_fail_alone() {
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..8 {
            let tx = tx.clone();
            let mut req = p17_request();
            if i == 3 {
                req.touch.on_missing_before = crate::spec::OnMissingBefore::Error;
            }
            stream(req, &p17_rows(), 8, Box::new(move |r| tx.send((i, r)).unwrap()));
        }
        drop(tx);
        let mut results: Vec<_> = rx.iter().collect();
        results.sort_by_key(|(i, _)| *i);
        assert_eq!(results.len(), 8);
        for (i, r) in results {
            if i == 3 {
                assert_eq!(r.unwrap_err().code(), "ERR_PROCESSING");
            } else {
                assert_eq!(r.unwrap().touches.len(), 10);
            }
        }
    }

    #[test]
    fn rows_in_chunks_give_the_same_batch() {
        let rows = p17_rows();
        let from_rows = process_rows(&p17_request(), &rows, &[p17_template()]).unwrap();
        assert_eq!(from_rows.touches.len(), 10);
        for per_chunk in [1, 3, 8] {
            let streamed = blocking(|reply| stream(p17_request(), &rows, per_chunk, reply)).unwrap();
            assert_eq!(streamed, from_rows, "{per_chunk} rows per chunk");
        }
    }

    #[test]
    fn a_panic_rejects_only_its_batch() {
        let r: crate::Result<()> = blocking(|reply| spawn(|| panic!("boom"), reply));
        assert_eq!(r.unwrap_err().code(), "ERR_INTERNAL");
        let ok = blocking(|reply| stream(p17_request(), &p17_rows(), 8, reply)).unwrap();
        assert_eq!(ok.processed_through, 7);
    }
}
