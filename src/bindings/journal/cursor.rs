//! The cursor functions `parseTouchCursor` and `formatTouchCursor` (J3), over the one cursor
//! parser and formatter, [`crate::journal::cursor`].

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::types::ParsedTouchCursor;
use crate::bindings::napi::{throw, Js};
use crate::error::Error;
use crate::journal::parse_cursor;

/// J3: `{ epoch, generation }` for `<epochHex16>:<digits>` (trimmed; epoch lowercased), else null.
#[napi(ts_args_type = "raw: string", ts_return_type = "ParsedTouchCursor | null")]
pub fn parse_touch_cursor(env: &Env, raw: Unknown) -> napi::Result<Option<ParsedTouchCursor>> {
    let s = Js::new(env, raw.raw()).string("raw").map_err(|e| throw(env, e))?;
    Ok(parse_cursor(&s).map(|c| ParsedTouchCursor { epoch: c.epoch.to_string(), generation: c.generation }))
}

/// J3: `<epoch>:<generation>` with the generation floored and at least 0 (a NaN generation is
/// refused: the reference would format `e:NaN`, which its own parser refuses).
#[napi(ts_args_type = "epoch: string, generation: number")]
pub fn format_touch_cursor(env: &Env, epoch: Unknown, generation: Unknown) -> napi::Result<String> {
    let r = (|| {
        let e = Js::new(env, epoch.raw()).string("epoch")?;
        let g = Js::new(env, generation.raw()).number("generation")?;
        crate::journal::cursor::format_cursor_js(&e, g).ok_or_else(|| Error::invalid("generation must be a number"))
    })();
    r.map_err(|e| throw(env, e))
}
