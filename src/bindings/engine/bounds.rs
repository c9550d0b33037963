//! The defaults and bounds of `TouchEngine`'s options as module constants (`engineBounds`,
//! `fanoutDefaults`, `fanoutBounds`), for JS that builds those options from flags or an
//! environment and checks them before it opens an engine. Their one home is the core
//! ([`crate::engine::options::bounds`], [`crate::fanout::defaults`], [`crate::fanout::bounds`]).
#![allow(non_upper_case_globals)]

use std::ops::RangeInclusive;

use napi_derive::napi;

use crate::engine::options::bounds as engine;
use crate::fanout::{bounds as fanout, defaults};

/// An integer option's bounds, both included.
#[napi(object, object_from_js = false)]
pub struct OptionBounds {
    pub min: f64,
    pub max: f64,
}

const fn usize_bounds(r: RangeInclusive<usize>) -> OptionBounds {
    OptionBounds { min: *r.start() as f64, max: *r.end() as f64 }
}

const fn u64_bounds(r: RangeInclusive<u64>) -> OptionBounds {
    OptionBounds { min: *r.start() as f64, max: *r.end() as f64 }
}

const fn i64_bounds(r: RangeInclusive<i64>) -> OptionBounds {
    OptionBounds { min: *r.start() as f64, max: *r.end() as f64 }
}

/// What `new TouchEngine` accepts of its integer options; anything else is refused
/// (`ERR_INVALID_ARGUMENT`).
#[napi(object, object_from_js = false)]
pub struct EngineBounds {
    /// 0 counts as 1.
    pub workers: OptionBounds,
    pub check_interval_ms: OptionBounds,
    /// 0 counts as 1.
    pub max_batch_rows: OptionBounds,
    /// 0 counts as 1.
    pub max_batch_bytes: OptionBounds,
    pub profile_poll_ms: OptionBounds,
}

/// What `options.fanout` of `new TouchEngine` accepts; anything else is refused
/// (`ERR_INVALID_ARGUMENT`).
#[napi(object, object_from_js = false)]
pub struct FanoutBounds {
    /// The prefix's length; its characters are `[A-Za-z0-9_-]`.
    pub prefix_length: OptionBounds,
    pub max_age_ms: OptionBounds,
    pub max_bytes: OptionBounds,
    pub beat_ms: OptionBounds,
    pub batch_ms: OptionBounds,
}

/// What `options.fanout` of `new TouchEngine` takes for what it is not given.
#[napi(object, object_from_js = false)]
pub struct FanoutDefaults {
    pub prefix: &'static str,
    pub max_age_ms: f64,
    pub max_bytes: f64,
    pub beat_ms: f64,
    pub batch_ms: f64,
}

/// The bounds of `TouchEngine`'s integer options.
#[napi]
pub const engineBounds: EngineBounds = EngineBounds {
    workers: usize_bounds(engine::WORKERS),
    check_interval_ms: u64_bounds(engine::CHECK_INTERVAL_MS),
    max_batch_rows: usize_bounds(engine::MAX_BATCH_ROWS),
    max_batch_bytes: u64_bounds(engine::MAX_BATCH_BYTES),
    profile_poll_ms: u64_bounds(engine::PROFILE_POLL_MS),
};

/// The bounds of `options.fanout`.
#[napi]
pub const fanoutBounds: FanoutBounds = FanoutBounds {
    prefix_length: usize_bounds(fanout::PREFIX_LEN),
    max_age_ms: u64_bounds(fanout::MAX_AGE_MS),
    max_bytes: i64_bounds(fanout::MAX_BYTES),
    beat_ms: u64_bounds(fanout::BEAT_MS),
    batch_ms: u64_bounds(fanout::BATCH_MS),
};

/// The defaults of `options.fanout`.
#[napi]
pub const fanoutDefaults: FanoutDefaults = FanoutDefaults {
    prefix: defaults::PREFIX,
    max_age_ms: defaults::MAX_AGE_MS as f64,
    max_bytes: defaults::MAX_BYTES as f64,
    beat_ms: defaults::BEAT_MS as f64,
    batch_ms: defaults::BATCH_MS as f64,
};
