//! The napi layer: one file per JS class, conversion only, over [`napi`], the one home for raw
//! N-API calls and `unsafe`.
//!
//! - [`napi`]: reading and building JS values, errors, the completion port, the shared abort
//!   listener, tagged handles, shared buffers and raw callbacks (see its module doc for the
//!   invariants);
//! - [`store`]: the `Store` class;
//! - [`error_code`]: the `ErrorCode` enum (every error's `code`);
//! - [`keys`]: the `keys` namespace (key derivation);
//! - [`spec`]: the `validateTouchConfig` and `validateStateProtocolProfile` functions;
//! - [`processor`]: the `processRows` function;
//! - [`journal`]: the `TouchJournal` class (its plain objects in `types`, conversions in
//!   `convert`) and the cursor functions (`cursor`);
//! - [`journal_fast`]: the native halves of the JavaScript `waitForAny` and `touch`
//!   (`lib/internal/journal-methods.js`);
//! - [`engine`]: the `TouchEngine` class;
//! - [`engine_journal`]: the `EngineJournal` class (a stream's journal inside an engine);
//! - [`engine_records`]: what `TouchEngine.takeRecords()` returns;
//! - [`listener`]: the `WaitListener` class;
//! - [`fanout`]: `_encodeInterest`, an edge's report as the wire lays it out (for benches);
//! - [`hostdb`]: the `_sql*` functions behind `compat/sqlite-adapter.mjs` (host SQL);
//! - [`internal`]: what `lib/internal/native.js` hands the native module at load.
//!
//! No policy lives here: if a function in this module grows an `if` about touches, it belongs
//! in a core module.

pub mod engine;
pub mod engine_journal;
pub mod engine_records;
pub mod error_code;
pub mod fanout;
pub mod hostdb;
pub mod internal;
pub mod journal;
pub mod journal_fast;
pub mod keys;
pub mod listener;
pub mod napi;
pub mod processor;
pub mod spec;
pub mod store;
