//! The processor pool: batches run on a dedicated rayon pool, off the JS thread, several at
//! once (one per core), each in its own panic boundary so a failure rejects only its batch.

use std::sync::OnceLock;

use super::{
    process_chunks, process_row_refs, process_rows, ProcessRequest, ProcessResult, Row, RowBuffer, TemplateRow,
};
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

/// Processes one batch on the pool. The rows are freed after the reply, so the caller does not
/// wait for that.
pub fn process(request: ProcessRequest, rows: Vec<Row>, templates: Vec<TemplateRow>, reply: Reply<ProcessResult>) {
    pool().spawn(move || {
        reply(catch_panic(|| process_rows(&request, &rows, &templates)));
        drop((rows, templates));
    });
}

/// [`process`] for rows that arrive in chunks while the batch runs (`count` rows in all, for
/// reserving): the batch takes each chunk as it comes ([`process_chunks`]) and ends when the
/// sender is dropped. The pool thread waits for chunks, so the sender must never wait for the
/// pool (the channel is unbounded, and its senders — the JS thread reading `processRows`'
/// rows, a store reader — only read and send), or a full pool could deadlock.
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

/// [`process`] for rows in one buffer.
pub fn process_buffer(
    request: ProcessRequest,
    rows: RowBuffer,
    templates: Vec<TemplateRow>,
    reply: Reply<ProcessResult>,
) {
    pool().spawn(move || {
        reply(catch_panic(|| process_row_refs(&request, rows.len(), rows.iter(), &templates)));
        drop((rows, templates));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::batch::tests::{p17_request, p17_rows, p17_template};
    use crate::store::blocking;

    #[test]
    fn batches_run_in_parallel_and_fail_alone() {
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..8 {
            let tx = tx.clone();
            let mut req = p17_request();
            if i == 3 {
                req.touch.on_missing_before = crate::spec::OnMissingBefore::Error;
            }
            process(req, p17_rows(), vec![p17_template()], Box::new(move |r| tx.send((i, r)).unwrap()));
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
    fn rows_in_one_buffer_give_the_same_batch() {
        let rows = p17_rows();
        let mut ends = Vec::new();
        let mut bytes = Vec::new();
        for r in &rows {
            bytes.extend_from_slice(&r.payload);
            ends.push(bytes.len());
        }
        let buffer = RowBuffer::new(
            rows.iter().map(|r| r.offset).collect(),
            rows.iter().map(|r| r.ts_ms).collect(),
            ends,
            bytes,
        )
        .unwrap();
        let from_rows = blocking(|reply| process(p17_request(), rows, vec![p17_template()], reply)).unwrap();
        let from_buffer = blocking(|reply| process_buffer(p17_request(), buffer, vec![p17_template()], reply)).unwrap();
        assert_eq!(from_rows.touches.len(), 10);
        assert_eq!(from_buffer, from_rows);
    }

    #[test]
    fn a_panic_rejects_only_its_batch() {
        let r: crate::Result<()> = blocking(|reply| spawn(|| panic!("boom"), reply));
        assert_eq!(r.unwrap_err().code(), "ERR_INTERNAL");
        let ok = blocking(|reply| process(p17_request(), p17_rows(), vec![p17_template()], reply)).unwrap();
        assert_eq!(ok.processed_through, 7);
    }
}
