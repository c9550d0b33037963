//! `validateTouchConfig` and `validateStateProtocolProfile`: the reference's touch config
//! validation for JS callers (C5, C7). Conversion only; the rules live in [`crate::spec`].

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::napi::{throw, unknown, Js, Out};
use crate::error::Error;
use crate::jscompat::json::Value;

fn raw_and_path(env: &Env, raw: &Unknown, path: &Option<Unknown>, default: &str) -> napi::Result<(Value, String)> {
    let value = Js::new(env, raw.raw()).to_value("raw").map_err(|e| throw(env, e))?.unwrap_or(Value::Undefined);
    let path = match path.as_ref().map(|p| Js::new(env, p.raw())).filter(|p| !p.is_nullish()) {
        Some(p) => p.string("path").map_err(|e| throw(env, e))?,
        None => default.to_string(),
    };
    Ok((value, path))
}

/// Validates a touch config like the reference (`validateTouchConfigResult`) and returns the
/// normalised config (defaults filled in, numbers coerced). Throws `ERR_INVALID_TOUCH_CONFIG`
/// with the reference's message, e.g. `touch.coarseIntervalMs must be > 0`.
#[napi(ts_args_type = "raw: unknown, path?: string | undefined | null", ts_return_type = "TouchConfig")]
pub fn validate_touch_config<'env>(env: &'env Env, raw: Unknown, path: Option<Unknown>) -> napi::Result<Unknown<'env>> {
    let (value, path) = raw_and_path(env, &raw, &path, "touch")?;
    let cfg =
        crate::spec::validate_touch_config(&value, &path).map_err(|m| throw(env, Error::InvalidTouchConfig(m)))?;
    Ok(unknown(env, Out::new(env).value(&cfg.to_value())?))
}

/// Validates a state-protocol profile (`validateStateProtocolProfileResult`, C5) and returns
/// it normalised. Throws `ERR_INVALID_TOUCH_CONFIG` with the reference's message.
#[napi(
    ts_args_type = "raw: unknown, path?: string | undefined | null",
    ts_return_type = "{ kind: 'state-protocol'; touch?: TouchConfig }"
)]
pub fn validate_state_protocol_profile<'env>(
    env: &'env Env,
    raw: Unknown,
    path: Option<Unknown>,
) -> napi::Result<Unknown<'env>> {
    let (value, path) = raw_and_path(env, &raw, &path, "profile")?;
    let profile = crate::spec::validate_state_protocol_profile(&value, &path)
        .map_err(|m| throw(env, Error::InvalidTouchConfig(m)))?;
    Ok(unknown(env, Out::new(env).value(&profile.to_value())?))
}

/// `touch.memory` of a normalised [`TouchConfig`].
#[napi(object, object_from_js = false)]
pub struct TouchMemoryConfig {
    pub bucket_ms: f64,
    pub filter_pow2: f64,
    pub k: f64,
    pub pending_max_keys: f64,
    pub key_index_max_keys: f64,
    pub hot_key_ttl_ms: f64,
    pub hot_template_ttl_ms: f64,
    pub hot_max_keys: f64,
    pub hot_max_templates: f64,
}

/// `touch.templates` of a normalised [`TouchConfig`].
#[napi(object, object_from_js = false)]
pub struct TouchTemplatesConfig {
    pub default_inactivity_ttl_ms: f64,
    pub last_seen_persist_interval_ms: f64,
    pub gc_interval_ms: f64,
    pub max_active_templates_per_entity: f64,
    pub max_active_templates_per_stream: f64,
    pub activation_rate_limit_per_minute: f64,
}

/// A normalised touch config: `{ enabled: false }`, or every field with its default filled in.
#[napi(object, object_from_js = false)]
pub struct TouchConfig {
    pub enabled: bool,
    pub coarse_interval_ms: Option<f64>,
    pub touch_coalesce_window_ms: Option<f64>,
    #[napi(ts_type = "'coarse' | 'skipBefore' | 'error'")]
    pub on_missing_before: Option<String>,
    pub lag_degrade_fine_touches_at_source_offsets: Option<f64>,
    pub lag_recover_fine_touches_at_source_offsets: Option<f64>,
    pub fine_touch_budget_per_batch: Option<f64>,
    pub fine_tokens_per_second: Option<f64>,
    pub fine_burst_tokens: Option<f64>,
    pub lag_reserved_fine_touch_budget_per_batch: Option<f64>,
    pub memory: Option<TouchMemoryConfig>,
    pub templates: Option<TouchTemplatesConfig>,
}

// The structs above only describe the returned values in index.d.ts.
#[allow(dead_code)]
fn _typing_only(_: TouchConfig) {}
