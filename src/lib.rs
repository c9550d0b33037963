//! durable-touch: the native core of a live-query-invalidation server.
//!
//! A server keeps a durable log (a *stream*) of State Protocol change records. durable-touch
//! stores that log in SQLite ([`store`]), derives *touches* (32-bit key ids for tables, query
//! templates and watched tuples) from new rows, keeps them in an in-memory touch journal where
//! clients wait on key sets, and decides per stream how fine the touches are. The pure Rust
//! cores know nothing of JavaScript; [`bindings`] is the thin napi layer that converts types,
//! maps [`Error`]s to JS errors with a stable `code` and turns replies into promises.
//!
//! Module map:
//! - [`error`]: the one error type;
//! - [`store`]: schema, group-commit writer, readers (the reference's SQLite layout);
//! - [`hostdb`]: synchronous connections and prepared statements for the host's own SQL (the
//!   reference server's `sqlite/adapter.ts`, on our SQLite library);
//! - [`jscompat`]: the JavaScript semantics the reference depends on (JSON.parse, number
//!   formatting, Date parsing, UTF-16 string order);
//! - [`keys`]: key derivation;
//! - [`changes`]: State Protocol record → canonical change;
//! - [`spec`]: touch config and state-protocol profile validation;
//! - [`processor`]: the touch processor (batches of WAL rows → touches, on a rayon pool);
//! - [`journal`]: the in-memory touch journal where clients wait on key sets;
//! - [`durable`]: touch journals kept on disk across restarts (snapshot and flush log);
//! - [`engine`]: the manager policy, hot interest, templates, waits by stream, stats;
//! - [`listener`]: a native HTTP/1.1 front answering touch waits without JavaScript;
//! - [`prefetch`]: the cache prefetch hint the journal's hot loops use;
//! - [`timer`]: the one native timer thread (journal timers, completion-port watchdog);
//! - [`bindings`]: the napi classes and functions (conversion only).

pub mod bindings;
pub mod bytes;
pub mod changes;
pub mod durable;
pub mod engine;
pub mod error;
pub mod fanout;
pub mod hostdb;
pub mod journal;
pub mod jscompat;
pub mod keys;
pub mod listener;
pub mod prefetch;
pub mod processor;
pub mod spec;
pub mod store;
pub mod timer;

pub use error::{Error, Result};
