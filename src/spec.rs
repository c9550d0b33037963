//! Touch configuration (C5–C7): validation with the reference's defaults, coercions and
//! exact error messages, and the state-protocol profile that carries it.
//!
//! Numeric fields go through `Number(v)` (B21: `"100"` and `true` are accepted), "number"
//! fields must be finite and pass their test, "integer" fields must also be integral. A
//! disabled config is just `{enabled:false}`: nothing else is validated or kept, apart from
//! the unknown-key check of the top level (C7).

use crate::jscompat::json::{Object, Value};
use crate::jscompat::string::JsString;

/// `onMissingBefore` (P6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissingBefore {
    Coarse,
    SkipBefore,
    Error,
}

impl OnMissingBefore {
    pub fn as_str(self) -> &'static str {
        match self {
            OnMissingBefore::Coarse => "coarse",
            OnMissingBefore::SkipBefore => "skipBefore",
            OnMissingBefore::Error => "error",
        }
    }

    /// What the processor does with a raw profile value: exactly `"error"` or `"skipBefore"`,
    /// anything else behaves as `coarse` (P6).
    pub fn from_raw(v: Option<&Value>) -> OnMissingBefore {
        match v.and_then(Value::as_str_bytes) {
            Some(b"error") => OnMissingBefore::Error,
            Some(b"skipBefore") => OnMissingBefore::SkipBefore,
            _ => OnMissingBefore::Coarse,
        }
    }
}

/// `touch.memory` (journal parameters).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
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

/// `touch.templates` (template lifecycle limits).
#[derive(Debug, Clone, PartialEq)]
pub struct TemplatesConfig {
    pub default_inactivity_ttl_ms: f64,
    pub last_seen_persist_interval_ms: f64,
    pub gc_interval_ms: f64,
    pub max_active_templates_per_entity: f64,
    pub max_active_templates_per_stream: f64,
    pub activation_rate_limit_per_minute: f64,
}

/// A validated touch config with every default filled in. When `enabled` is false the other
/// fields hold the defaults and are not part of the normalised value ([`TouchConfig::to_value`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TouchConfig {
    pub enabled: bool,
    pub coarse_interval_ms: f64,
    pub touch_coalesce_window_ms: f64,
    pub on_missing_before: OnMissingBefore,
    pub lag_degrade_fine_touches_at_source_offsets: f64,
    pub lag_recover_fine_touches_at_source_offsets: f64,
    pub fine_touch_budget_per_batch: f64,
    pub fine_tokens_per_second: f64,
    pub fine_burst_tokens: f64,
    pub lag_reserved_fine_touch_budget_per_batch: f64,
    pub memory: MemoryConfig,
    pub templates: TemplatesConfig,
}

impl Default for TouchConfig {
    /// The defaults table of C7 (with `enabled: false`).
    fn default() -> Self {
        TouchConfig {
            enabled: false,
            coarse_interval_ms: 100.0,
            touch_coalesce_window_ms: 100.0,
            on_missing_before: OnMissingBefore::Coarse,
            lag_degrade_fine_touches_at_source_offsets: 5000.0,
            lag_recover_fine_touches_at_source_offsets: 1000.0,
            fine_touch_budget_per_batch: 2000.0,
            fine_tokens_per_second: 200_000.0,
            fine_burst_tokens: 400_000.0,
            lag_reserved_fine_touch_budget_per_batch: 200.0,
            memory: MemoryConfig {
                bucket_ms: 100.0,
                filter_pow2: 22.0,
                k: 4.0,
                pending_max_keys: 100_000.0,
                key_index_max_keys: 32.0,
                hot_key_ttl_ms: 10_000.0,
                hot_template_ttl_ms: 10_000.0,
                hot_max_keys: 1_000_000.0,
                hot_max_templates: 4096.0,
            },
            templates: TemplatesConfig {
                default_inactivity_ttl_ms: 3_600_000.0,
                last_seen_persist_interval_ms: 300_000.0,
                gc_interval_ms: 60_000.0,
                max_active_templates_per_entity: 256.0,
                max_active_templates_per_stream: 2048.0,
                activation_rate_limit_per_minute: 100.0,
            },
        }
    }
}

fn num(v: f64) -> Value {
    Value::Number(v)
}

fn object(entries: Vec<(&str, Value)>) -> Value {
    let mut o = Object::new();
    for (k, v) in entries {
        o.insert(JsString::from(k), v);
    }
    Value::Object(o)
}

impl TouchConfig {
    /// The normalised config as the reference returns it (same keys, same order).
    pub fn to_value(&self) -> Value {
        if !self.enabled {
            return object(vec![("enabled", Value::Bool(false))]);
        }
        let m = &self.memory;
        let t = &self.templates;
        object(vec![
            ("enabled", Value::Bool(true)),
            ("coarseIntervalMs", num(self.coarse_interval_ms)),
            ("touchCoalesceWindowMs", num(self.touch_coalesce_window_ms)),
            ("onMissingBefore", Value::String(JsString::from(self.on_missing_before.as_str()))),
            ("lagDegradeFineTouchesAtSourceOffsets", num(self.lag_degrade_fine_touches_at_source_offsets)),
            ("lagRecoverFineTouchesAtSourceOffsets", num(self.lag_recover_fine_touches_at_source_offsets)),
            ("fineTouchBudgetPerBatch", num(self.fine_touch_budget_per_batch)),
            ("fineTokensPerSecond", num(self.fine_tokens_per_second)),
            ("fineBurstTokens", num(self.fine_burst_tokens)),
            ("lagReservedFineTouchBudgetPerBatch", num(self.lag_reserved_fine_touch_budget_per_batch)),
            (
                "memory",
                object(vec![
                    ("bucketMs", num(m.bucket_ms)),
                    ("filterPow2", num(m.filter_pow2)),
                    ("k", num(m.k)),
                    ("pendingMaxKeys", num(m.pending_max_keys)),
                    ("keyIndexMaxKeys", num(m.key_index_max_keys)),
                    ("hotKeyTtlMs", num(m.hot_key_ttl_ms)),
                    ("hotTemplateTtlMs", num(m.hot_template_ttl_ms)),
                    ("hotMaxKeys", num(m.hot_max_keys)),
                    ("hotMaxTemplates", num(m.hot_max_templates)),
                ]),
            ),
            (
                "templates",
                object(vec![
                    ("defaultInactivityTtlMs", num(t.default_inactivity_ttl_ms)),
                    ("lastSeenPersistIntervalMs", num(t.last_seen_persist_interval_ms)),
                    ("gcIntervalMs", num(t.gc_interval_ms)),
                    ("maxActiveTemplatesPerEntity", num(t.max_active_templates_per_entity)),
                    ("maxActiveTemplatesPerStream", num(t.max_active_templates_per_stream)),
                    ("activationRateLimitPerMinute", num(t.activation_rate_limit_per_minute)),
                ]),
            ),
        ])
    }
}

const TOP_KEYS: &[&str] = &[
    "enabled",
    "coarseIntervalMs",
    "touchCoalesceWindowMs",
    "onMissingBefore",
    "lagDegradeFineTouchesAtSourceOffsets",
    "lagRecoverFineTouchesAtSourceOffsets",
    "fineTouchBudgetPerBatch",
    "fineTokensPerSecond",
    "fineBurstTokens",
    "lagReservedFineTouchBudgetPerBatch",
    "memory",
    "templates",
];
const TEMPLATE_KEYS: &[&str] = &[
    "defaultInactivityTtlMs",
    "lastSeenPersistIntervalMs",
    "gcIntervalMs",
    "maxActiveTemplatesPerEntity",
    "maxActiveTemplatesPerStream",
    "activationRateLimitPerMinute",
];
const MEMORY_KEYS: &[&str] = &[
    "bucketMs",
    "filterPow2",
    "k",
    "pendingMaxKeys",
    "keyIndexMaxKeys",
    "hotKeyTtlMs",
    "hotTemplateTtlMs",
    "hotMaxKeys",
    "hotMaxTemplates",
];

/// The first own key (JS order) not in `allowed`, as `<path>.<key> is not supported`.
fn reject_unknown_keys(obj: &Object, allowed: &[&str], path: &str) -> Result<(), String> {
    for k in obj.keys() {
        if !allowed.iter().any(|a| a.as_bytes() == k.as_bytes()) {
            return Err(format!("{path}.{k} is not supported"));
        }
    }
    Ok(())
}

/// A present, non-undefined member.
fn member<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !matches!(v, Value::Undefined))
}

/// `parseNumberField` / `parseIntegerField`: `Number(v)` (or the default when undefined),
/// finite, integral when asked, and passing `ok`.
fn field(
    obj: &Object,
    key: &str,
    default: f64,
    integer: bool,
    message: String,
    ok: impl Fn(f64) -> bool,
) -> Result<f64, String> {
    let n = member(obj, key).map_or(default, Value::to_number);
    if !n.is_finite() || (integer && n.trunc() != n) || !ok(n) {
        return Err(message);
    }
    Ok(n)
}

/// `validateTouchConfigResult(raw, path)` (C7). The error is the reference's message.
pub fn validate_touch_config(raw: &Value, path: &str) -> Result<TouchConfig, String> {
    let Value::Object(raw) = raw else { return Err(format!("{path} must be an object")) };
    reject_unknown_keys(raw, TOP_KEYS, path)?;
    if !raw.get("enabled").is_some_and(Value::truthy) {
        return Ok(TouchConfig::default());
    }
    let mut cfg = TouchConfig { enabled: true, ..TouchConfig::default() };
    let number = |o: &Object, key: &str, default: f64, suffix: &str, ok: fn(f64) -> bool, prefix: &str| {
        field(o, key, default, false, format!("{prefix}.{key} must be {suffix}"), ok)
    };
    let integer = |o: &Object, key: &str, default: f64, suffix: &str, ok: fn(f64) -> bool, prefix: &str| {
        field(o, key, default, true, format!("{prefix}.{key} must be {suffix}"), ok)
    };
    let positive: fn(f64) -> bool = |n| n > 0.0;
    let non_negative: fn(f64) -> bool = |n| n >= 0.0;

    cfg.coarse_interval_ms = number(raw, "coarseIntervalMs", 100.0, "> 0", positive, path)?;
    cfg.touch_coalesce_window_ms = number(raw, "touchCoalesceWindowMs", 100.0, "> 0", positive, path)?;
    cfg.on_missing_before = match member(raw, "onMissingBefore") {
        None => OnMissingBefore::Coarse,
        Some(v) => match v.as_str_bytes() {
            Some(b"coarse") => OnMissingBefore::Coarse,
            Some(b"skipBefore") => OnMissingBefore::SkipBefore,
            Some(b"error") => OnMissingBefore::Error,
            _ => return Err(format!("{path}.onMissingBefore must be coarse|skipBefore|error")),
        },
    };

    let empty = Object::new();
    let tpath = format!("{path}.templates");
    let templates = match member(raw, "templates") {
        None => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(format!("{tpath} must be an object")),
    };
    reject_unknown_keys(templates, TEMPLATE_KEYS, &tpath)?;
    let t = &mut cfg.templates;
    t.default_inactivity_ttl_ms =
        number(templates, "defaultInactivityTtlMs", 3_600_000.0, ">= 0", non_negative, &tpath)?;
    t.last_seen_persist_interval_ms =
        number(templates, "lastSeenPersistIntervalMs", 300_000.0, "> 0", positive, &tpath)?;
    t.gc_interval_ms = number(templates, "gcIntervalMs", 60_000.0, "> 0", positive, &tpath)?;
    t.max_active_templates_per_entity =
        number(templates, "maxActiveTemplatesPerEntity", 256.0, "> 0", positive, &tpath)?;
    t.max_active_templates_per_stream =
        number(templates, "maxActiveTemplatesPerStream", 2048.0, "> 0", positive, &tpath)?;
    t.activation_rate_limit_per_minute =
        number(templates, "activationRateLimitPerMinute", 100.0, ">= 0", non_negative, &tpath)?;

    let mpath = format!("{path}.memory");
    let memory = match member(raw, "memory") {
        None => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(format!("{mpath} must be an object")),
    };
    reject_unknown_keys(memory, MEMORY_KEYS, &mpath)?;
    let m = &mut cfg.memory;
    m.bucket_ms = integer(memory, "bucketMs", 100.0, "an integer > 0", positive, &mpath)?;
    m.filter_pow2 =
        integer(memory, "filterPow2", 22.0, "an integer in [10,30]", |n| (10.0..=30.0).contains(&n), &mpath)?;
    m.k = integer(memory, "k", 4.0, "an integer in [1,8]", |n| (1.0..=8.0).contains(&n), &mpath)?;
    m.pending_max_keys = integer(memory, "pendingMaxKeys", 100_000.0, "an integer > 0", positive, &mpath)?;
    m.key_index_max_keys =
        integer(memory, "keyIndexMaxKeys", 32.0, "an integer in [1,1024]", |n| (1.0..=1024.0).contains(&n), &mpath)?;
    m.hot_key_ttl_ms = integer(memory, "hotKeyTtlMs", 10_000.0, "an integer > 0", positive, &mpath)?;
    m.hot_template_ttl_ms = integer(memory, "hotTemplateTtlMs", 10_000.0, "an integer > 0", positive, &mpath)?;
    m.hot_max_keys = integer(memory, "hotMaxKeys", 1_000_000.0, "an integer > 0", positive, &mpath)?;
    m.hot_max_templates = integer(memory, "hotMaxTemplates", 4096.0, "an integer > 0", positive, &mpath)?;

    cfg.lag_degrade_fine_touches_at_source_offsets =
        integer(raw, "lagDegradeFineTouchesAtSourceOffsets", 5000.0, "an integer >= 0", non_negative, path)?;
    cfg.lag_recover_fine_touches_at_source_offsets =
        integer(raw, "lagRecoverFineTouchesAtSourceOffsets", 1000.0, "an integer >= 0", non_negative, path)?;
    cfg.fine_touch_budget_per_batch =
        integer(raw, "fineTouchBudgetPerBatch", 2000.0, "an integer >= 0", non_negative, path)?;
    cfg.fine_tokens_per_second = integer(raw, "fineTokensPerSecond", 200_000.0, "an integer >= 0", non_negative, path)?;
    cfg.fine_burst_tokens = integer(raw, "fineBurstTokens", 400_000.0, "an integer >= 0", non_negative, path)?;
    cfg.lag_reserved_fine_touch_budget_per_batch =
        integer(raw, "lagReservedFineTouchBudgetPerBatch", 200.0, "an integer >= 0", non_negative, path)?;
    Ok(cfg)
}

/// A validated state-protocol profile (C5).
#[derive(Debug, Clone, PartialEq)]
pub struct StateProtocolProfile {
    /// Present only when the raw profile had `touch`.
    pub touch: Option<TouchConfig>,
}

impl StateProtocolProfile {
    pub fn to_value(&self) -> Value {
        let mut entries = vec![("kind", Value::String(JsString::from("state-protocol")))];
        if let Some(t) = &self.touch {
            entries.push(("touch", t.to_value()));
        }
        object(entries)
    }

    /// The touch config when touch is enabled (C6).
    pub fn enabled_touch(&self) -> Option<&TouchConfig> {
        self.touch.as_ref().filter(|t| t.enabled)
    }
}

/// `validateStateProtocolProfileResult(raw, path)` (C5).
pub fn validate_state_protocol_profile(raw: &Value, path: &str) -> Result<StateProtocolProfile, String> {
    let Value::Object(obj) = raw else { return Err(format!("{path} must be an object")) };
    if obj.get("kind").and_then(Value::as_str_bytes) != Some(b"state-protocol") {
        return Err(format!("{path}.kind must be state-protocol"));
    }
    reject_unknown_keys(obj, &["kind", "touch"], path)?;
    let touch = match member(obj, "touch") {
        None => None,
        Some(t) => Some(validate_touch_config(t, &format!("{path}.touch"))?),
    };
    Ok(StateProtocolProfile { touch })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jscompat::json::{parse, stringify};

    fn v(text: &str) -> Value {
        parse(text).unwrap()
    }

    #[test]
    fn defaults_when_enabled() {
        let cfg = validate_touch_config(&v(r#"{"enabled":true}"#), "touch").unwrap();
        assert_eq!(cfg, TouchConfig { enabled: true, ..TouchConfig::default() });
        assert_eq!(
            stringify(&cfg.to_value()),
            r#"{"enabled":true,"coarseIntervalMs":100,"touchCoalesceWindowMs":100,"onMissingBefore":"coarse","lagDegradeFineTouchesAtSourceOffsets":5000,"lagRecoverFineTouchesAtSourceOffsets":1000,"fineTouchBudgetPerBatch":2000,"fineTokensPerSecond":200000,"fineBurstTokens":400000,"lagReservedFineTouchBudgetPerBatch":200,"memory":{"bucketMs":100,"filterPow2":22,"k":4,"pendingMaxKeys":100000,"keyIndexMaxKeys":32,"hotKeyTtlMs":10000,"hotTemplateTtlMs":10000,"hotMaxKeys":1000000,"hotMaxTemplates":4096},"templates":{"defaultInactivityTtlMs":3600000,"lastSeenPersistIntervalMs":300000,"gcIntervalMs":60000,"maxActiveTemplatesPerEntity":256,"maxActiveTemplatesPerStream":2048,"activationRateLimitPerMinute":100}}"#
        );
    }

    #[test]
    fn disabled_configs_skip_validation_but_not_the_top_level_key_check() {
        let cfg = validate_touch_config(&v(r#"{"enabled":0,"coarseIntervalMs":-1,"memory":{"zzz":1}}"#), "t").unwrap();
        assert_eq!(stringify(&cfg.to_value()), r#"{"enabled":false}"#);
        assert_eq!(validate_touch_config(&v(r#"{"nope":1}"#), "touch").unwrap_err(), "touch.nope is not supported");
    }

    #[test]
    fn messages_and_coercion() {
        let err = |t: &str| validate_touch_config(&v(t), "touch").unwrap_err();
        assert_eq!(err("[]"), "touch must be an object");
        assert_eq!(err(r#"{"enabled":true,"b":1,"7":1}"#), "touch.7 is not supported");
        assert_eq!(err(r#"{"enabled":true,"coarseIntervalMs":0}"#), "touch.coarseIntervalMs must be > 0");
        assert_eq!(
            err(r#"{"enabled":true,"onMissingBefore":"x"}"#),
            "touch.onMissingBefore must be coarse|skipBefore|error"
        );
        assert_eq!(err(r#"{"enabled":true,"memory":5}"#), "touch.memory must be an object");
        assert_eq!(err(r#"{"enabled":true,"memory":{"k":9}}"#), "touch.memory.k must be an integer in [1,8]");
        assert_eq!(
            err(r#"{"enabled":true,"memory":{"bucketMs":1.5}}"#),
            "touch.memory.bucketMs must be an integer > 0"
        );
        assert_eq!(err(r#"{"enabled":true,"templates":{"x":1}}"#), "touch.templates.x is not supported");
        assert_eq!(
            err(r#"{"enabled":true,"fineTouchBudgetPerBatch":"abc"}"#),
            "touch.fineTouchBudgetPerBatch must be an integer >= 0"
        );
        // B21: Number() coercion.
        let cfg = validate_touch_config(&v(r#"{"enabled":"yes","coarseIntervalMs":"250","fineTouchBudgetPerBatch":true,"templates":{"maxActiveTemplatesPerEntity":0.5}}"#), "touch").unwrap();
        assert_eq!(cfg.coarse_interval_ms, 250.0);
        assert_eq!(cfg.fine_touch_budget_per_batch, 1.0);
        assert_eq!(cfg.templates.max_active_templates_per_entity, 0.5);
    }

    #[test]
    fn state_protocol_profiles() {
        let p = validate_state_protocol_profile(&v(r#"{"kind":"state-protocol"}"#), "profile").unwrap();
        assert_eq!(stringify(&p.to_value()), r#"{"kind":"state-protocol"}"#);
        let p = validate_state_protocol_profile(&v(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#), "profile")
            .unwrap();
        assert!(p.enabled_touch().is_some());
        let err = |t: &str| validate_state_protocol_profile(&v(t), "profile").unwrap_err();
        assert_eq!(err("1"), "profile must be an object");
        assert_eq!(err(r#"{"kind":"generic"}"#), "profile.kind must be state-protocol");
        assert_eq!(err(r#"{"kind":"state-protocol","x":1}"#), "profile.x is not supported");
        assert_eq!(
            err(r#"{"kind":"state-protocol","touch":{"enabled":true,"k":1}}"#),
            "profile.touch.k is not supported"
        );
    }
}
