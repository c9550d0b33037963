//! JavaScript-compatible primitives the reference relies on implicitly.
//!
//! The reference is TypeScript: its keys and touches depend on how a JS engine parses JSON,
//! orders object keys, compares and trims strings, formats numbers and parses dates. These
//! modules reproduce exactly those behaviours so the pure cores ([`crate::keys`],
//! [`crate::changes`], [`crate::spec`], [`crate::processor`]) can be bit-exact:
//!
//! - [`string`]: JS strings as WTF-8 bytes (lone surrogates survive), UTF-16 order, `trim`,
//!   UTF-8 as `TextEncoder` writes it;
//! - [`number`]: `Number.prototype.toString`, `Number(string)`, `Math.max`;
//! - [`date`]: the `Date` string parser (V8/Bun legacy + ES5 forms) and `toISOString`;
//! - [`json`]: `JSON.parse` (any depth, duplicate keys, JS own-key order) into [`json::Value`].

pub mod date;
pub mod json;
pub mod number;
pub mod string;
