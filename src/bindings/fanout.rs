//! `_encodeInterest`: an edge's interest report as the wire lays it out, for benches that
//! simulate many edges without starting them (`bench/scale.mjs`). The layout's one home is
//! [`crate::fanout::wire`]; this only converts.

use napi::bindgen_prelude::Buffer;
use napi::Env;
use napi_derive::napi;

use super::napi::throw;
use crate::error::Error;
use crate::fanout::wire::{encode_interest, Interest, StreamInterest};

/// `_encodeInterest(edge, ttlMs, stream, fineWaiters, keyIds)`: the message of an edge (`edge`,
/// a u64 in decimal) reporting `fineWaiters` fine waiters on `keyIds` of one stream.
#[napi(js_name = "_encodeInterest", skip_typescript)]
pub fn encode_interest_js(
    env: &Env,
    edge: String,
    ttl_ms: u32,
    stream: String,
    fine_waiters: u32,
    key_ids: Vec<u32>,
) -> napi::Result<Buffer> {
    let edge = edge
        .parse::<u64>()
        .map_err(|_| throw(env, Error::invalid(format!("edge must be a u64 in decimal, got {edge}"))))?;
    let interest = Interest {
        edge,
        ttl_ms,
        want_full: false,
        streams: vec![StreamInterest { stream, fine_waiters, keys: key_ids, ..Default::default() }],
    };
    Ok(encode_interest(&interest).into())
}
