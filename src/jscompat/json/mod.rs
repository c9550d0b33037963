//! `JSON.parse` as a JS engine does it, and the values it produces.
//!
//! Differences from serde_json that matter for fidelity:
//! - any nesting depth is accepted (JS engines parse iteratively); parsing and dropping are
//!   iterative here too, so deep input cannot overflow the stack;
//! - numbers are f64 (`1e400` is `Infinity`, integers above 2^53 are rounded, `-0` stays);
//! - strings are [`JsString`] (WTF-8): `"\ud800"` is accepted and kept;
//! - duplicate keys: the last value wins, at the position of the first occurrence;
//! - [`Object::keys`] lists own keys in JS order: array indexes ascending, then the rest in
//!   insertion order (P7, C7's "first unknown key").
//!
//! [`Scanner`] exposes the lexer so the processor can validate a record and pick out the
//! few members it needs without building a tree (see [`crate::changes`]).
//!
//! - [`value`]: the values (`Value`, `Object`) and `stringify`;
//! - [`scanner`]: the lexer, plain and indexed (the SSE2 index of quotes and special bytes);
//! - [`parse`]: `JSON.parse` into a [`Value`], and the number and payload decoding it shares.

mod parse;
mod scanner;
mod value;

pub use parse::{decode_text, number_value, parse};
pub use scanner::{RawStr, Scalar, Scanner, SyntaxError};
pub use value::{stringify, Object, Value};

#[cfg(test)]
mod tests;
