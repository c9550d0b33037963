//! The napi layer: one file per JS class, conversion only.
//!
//! - [`js`]: argument checking and value building, and the one `Error` → JS error mapping;
//! - [`port`]: the completion port that settles promises from native threads;
//! - [`store`]: the `Store` class;
//! - [`keys`]: the `keys` namespace (key derivation);
//! - [`spec`]: the `validateTouchConfig` and `validateStateProtocolProfile` functions;
//! - [`processor`]: the `processRows` function;
//! - [`journal`]: the `TouchJournal` class and the cursor functions;
//! - [`engine`]: the `TouchEngine` class;
//! - [`abort`]: AbortSignal listeners for promise-returning methods;
//! - [`hostdb`]: the `_sql*` functions behind `compat/sqlite-adapter.mjs` (host SQL).
//!
//! No policy lives here: if a function in this module grows an `if` about touches, it belongs
//! in a core module.

// napi_env / napi_value are opaque engine handles handed straight back to N-API and never
// dereferenced here, so functions taking them need not be `unsafe`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod abort;
pub mod engine;
pub mod hostdb;
pub mod journal;
pub mod js;
pub mod keys;
pub mod port;
pub mod processor;
pub mod spec;
pub mod store;
