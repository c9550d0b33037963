//! The wait request (W1–W6): validation with the reference route's messages, the key ids a
//! wait listens to, the effective wait kind chosen from the stream's touch mode, and the reply.

use crate::engine::hot::InterestMode;
use crate::engine::policy::TouchMode;
use crate::engine::templates::{FieldDecl, TemplateDecl};
use crate::error::{Error, Result};
use crate::jscompat::json::Value;
use crate::jscompat::string::trim_str;
use crate::keys::{key_id, table_key, template_bits, template_key, touch_key_id_from_routing_key};

/// Most keys / key ids per wait (W1): the journal's limit.
pub use crate::journal::MAX_WAIT_KEYS;
/// Most template ids per wait (ours: the reference has no cap, and its dedupe is quadratic).
pub const MAX_TEMPLATE_IDS_USED: usize = 1024;
/// The longest list any wait field may hold. [`WaitArgs::parse`] refuses a longer list by its
/// length alone, before reading an element, so a caller may copy just the first
/// `MAX_WAIT_LIST + 1` elements of each list (the binding does).
pub const MAX_WAIT_LIST: usize = 1024;
const _: () = assert!(
    MAX_WAIT_LIST >= MAX_WAIT_KEYS && MAX_WAIT_LIST >= MAX_TEMPLATE_IDS_USED && MAX_WAIT_LIST >= MAX_DECLARED_TEMPLATES
);
/// Most literal keys on the exact path (W4).
pub const EXACT_MAX_KEYS: usize = 16;
/// Longest wait (W1).
pub const MAX_TIMEOUT_MS: f64 = 120_000.0;
/// Most templates per activation (T13).
pub const MAX_DECLARED_TEMPLATES: usize = 256;

/// Property `key` of a request body (`undefined` when absent or not an object).
fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    static UNDEFINED: Value = Value::Undefined;
    v.as_object().and_then(|o| o.get(key)).unwrap_or(&UNDEFINED)
}

fn as_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_utf8_lossy().into_owned()),
        _ => None,
    }
}

/// A validated wait (W1).
#[derive(Debug, Clone, PartialEq)]
pub struct WaitArgs {
    pub keys: Vec<String>,
    pub key_ids: Vec<u32>,
    pub exact: bool,
    pub cursor: String,
    pub timeout_ms: f64,
    pub template_ids_used: Vec<String>,
    pub interest: InterestMode,
    pub declare_templates: Vec<TemplateDecl>,
    pub inactivity_ttl_ms: Option<f64>,
}

fn bad(msg: &str) -> Error {
    Error::InvalidArgument(msg.to_string())
}

/// The items without repeats, in first-seen order; linear time (a short list is compared
/// pairwise, which allocates nothing).
fn dedupe<T: Eq + std::hash::Hash>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let items: Vec<T> = items.into_iter().collect();
    if items.len() <= 16 {
        let mut out: Vec<T> = Vec::with_capacity(items.len());
        for i in items {
            if !out.contains(&i) {
                out.push(i);
            }
        }
        return out;
    }
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    let keep: Vec<bool> = items.iter().map(|i| seen.insert(i)).collect();
    drop(seen);
    items.into_iter().zip(keep).filter_map(|(i, first)| first.then_some(i)).collect()
}

/// T13's route-level shape checks; any failure rejects the whole list.
pub fn parse_template_decls(raw: &Value, path: &str) -> Result<Vec<TemplateDecl>> {
    let Value::Array(items) = raw else { return Err(bad(&format!("{path} must be a non-empty array"))) };
    if items.is_empty() {
        return Err(bad(&format!("{path} must be a non-empty array")));
    }
    if items.len() > MAX_DECLARED_TEMPLATES {
        return Err(bad(&format!("{path} too large (max 256)")));
    }
    let invalid = || bad(&format!("{path} contains invalid template definitions"));
    let mut out = Vec::with_capacity(items.len());
    for t in items {
        let entity = as_str(get(t, "entity")).unwrap_or_default();
        let entity = trim_str(&entity);
        let Value::Array(fields) = get(t, "fields") else { return Err(invalid()) };
        if entity.is_empty() || fields.is_empty() || fields.len() > 3 {
            return Err(invalid());
        }
        let mut decl = TemplateDecl { entity: entity.to_string(), fields: Vec::new() };
        for f in fields {
            let name = as_str(get(f, "name")).unwrap_or_default();
            let name = trim_str(&name);
            if name.is_empty() {
                return Err(invalid());
            }
            // The encoding is checked by the registry (a bad one is denied as `invalid`).
            let encoding = as_str(get(f, "encoding")).unwrap_or_default();
            decl.fields.push(FieldDecl { name: name.to_string(), encoding });
        }
        out.push(decl);
    }
    Ok(out)
}

/// `inactivityTtlMs`: a finite number ≥ 0, floored (T13).
pub fn parse_inactivity_ttl(raw: &Value, path: &str) -> Result<Option<f64>> {
    match raw {
        Value::Undefined => Ok(None),
        Value::Number(n) if n.is_finite() && *n >= 0.0 => Ok(Some(n.floor())),
        _ => Err(bad(&format!("{path} must be a non-negative number (ms)"))),
    }
}

/// Each item as a trimmed string, or `message` if one is not a string or trims to nothing.
fn trimmed_strings(items: &[Value], message: &str) -> Result<Vec<String>> {
    items
        .iter()
        .map(|v| match as_str(v) {
            Some(s) if !trim_str(&s).is_empty() => Ok(trim_str(&s).to_string()),
            _ => Err(bad(message)),
        })
        .collect()
}

impl WaitArgs {
    /// Every request field [`WaitArgs::parse`] reads (the binding copies only these).
    pub const FIELDS: &'static [&'static str] = &[
        "keys",
        "keyIds",
        "exact",
        "cursor",
        "timeoutMs",
        "templateIdsUsed",
        "interestMode",
        "declareTemplates",
        "inactivityTtlMs",
    ];

    /// W1, in the route's order and with its messages. Every list is refused by its length
    /// before any element is read (the reference caps `keys` after its dedupe, and
    /// `templateIdsUsed` not at all).
    pub fn parse(body: &Value) -> Result<WaitArgs> {
        let keys = match get(body, "keys") {
            Value::Undefined => Vec::new(),
            Value::Array(items) if items.len() > MAX_WAIT_KEYS => return Err(bad("wait.keys too large (max 1024)")),
            Value::Array(items) => {
                dedupe(trimmed_strings(items, "wait.keys must be a non-empty string array when provided")?)
            }
            _ => return Err(bad("wait.keys must be a non-empty string array when provided")),
        };
        let key_ids = match get(body, "keyIds") {
            Value::Array(items) if items.len() > MAX_WAIT_KEYS => return Err(bad("wait.keyIds too large (max 1024)")),
            Value::Array(items) if !items.is_empty() => {
                let mut out = Vec::with_capacity(items.len());
                for v in items {
                    let n = v.to_number();
                    if !(n.is_finite() && n.fract() == 0.0 && (0.0..=4_294_967_295.0).contains(&n)) {
                        return Err(bad("wait.keyIds must be a non-empty uint32 array when provided"));
                    }
                    out.push(n as u32);
                }
                let out = dedupe(out);
                if out.len() != items.len() {
                    // The reference compares the deduplicated count with the raw one.
                    return Err(bad("wait.keyIds must be a non-empty uint32 array when provided"));
                }
                out
            }
            _ => Vec::new(),
        };
        if keys.is_empty() && key_ids.is_empty() {
            return Err(bad("wait requires keys or keyIds"));
        }
        let exact = match get(body, "exact") {
            Value::Undefined => false,
            Value::Bool(b) => *b,
            _ => return Err(bad("wait.exact must be a boolean when provided")),
        };
        let cursor = match as_str(get(body, "cursor")) {
            Some(c) if !trim_str(&c).is_empty() => trim_str(&c).to_string(),
            _ => return Err(bad("wait.cursor must be a non-empty string")),
        };
        let timeout_ms = match get(body, "timeoutMs") {
            Value::Undefined => 30_000.0,
            Value::Number(n) if n.is_finite() => n.clamp(0.0, MAX_TIMEOUT_MS),
            _ => return Err(bad("wait.timeoutMs must be a number (ms)")),
        };
        let template_ids_used = match get(body, "templateIdsUsed") {
            Value::Array(items) if items.len() > MAX_TEMPLATE_IDS_USED => {
                return Err(bad("wait.templateIdsUsed too large (max 1024)"))
            }
            Value::Array(items) => dedupe(trimmed_strings(items, "wait.templateIdsUsed must be a string array")?),
            _ => Vec::new(),
        };
        let interest = match as_str(get(body, "interestMode")).as_deref() {
            None if matches!(get(body, "interestMode"), Value::Undefined) => InterestMode::Fine,
            Some("fine") => InterestMode::Fine,
            Some("coarse") => InterestMode::Coarse,
            _ => return Err(bad("wait.interestMode must be 'fine' or 'coarse'")),
        };
        let declare_templates = match get(body, "declareTemplates") {
            Value::Array(items) if !items.is_empty() => {
                parse_template_decls(get(body, "declareTemplates"), "wait.declareTemplates")?
            }
            _ => Vec::new(),
        };
        let inactivity_ttl_ms = if declare_templates.is_empty() {
            None
        } else {
            parse_inactivity_ttl(get(body, "inactivityTtlMs"), "wait.inactivityTtlMs")?
        };
        // B16: template ids that `BigInt("0x" + id)` would reject are refused up front (the
        // reference answers 500).
        if template_ids_used.iter().any(|t| template_bits(t).is_none()) {
            return Err(bad("wait.templateIdsUsed must contain hex template ids"));
        }
        Ok(WaitArgs {
            keys,
            key_ids,
            exact,
            cursor,
            timeout_ms,
            template_ids_used,
            interest,
            declare_templates,
            inactivity_ttl_ms,
        })
    }

    /// W2: the fine key ids — `keyIds` when given, else each key through K14.
    pub fn raw_fine_key_ids(&self) -> Vec<u32> {
        if !self.key_ids.is_empty() {
            return self.key_ids.clone();
        }
        self.keys.iter().map(|k| touch_key_id_from_routing_key(k)).collect()
    }

    /// W2: the template key ids of `templateIdsUsed` (K8), without duplicates.
    pub fn template_key_ids(&self) -> Vec<u32> {
        dedupe(self.template_ids_used.iter().filter_map(|t| template_bits(t)).map(|bits| key_id(template_key(bits))))
    }

    /// W4: the literal 16-hex keys of an exact wait (1..=16 of them), lowercased; empty when
    /// the keys do not qualify.
    pub fn exact_keys(&self) -> Vec<u64> {
        if self.keys.is_empty() || self.keys.len() > EXACT_MAX_KEYS {
            return Vec::new();
        }
        let normalized = dedupe(self.keys.iter().map(|k| trim_str(k).to_ascii_lowercase()));
        let parsed: Option<Vec<u64>> = normalized
            .iter()
            .map(|k| {
                (k.len() == 16 && k.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
                    .then(|| u64::from_str_radix(k, 16).ok())
                    .flatten()
            })
            .collect();
        parsed.unwrap_or_default()
    }
}

/// W3's effective wait kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    FineKey,
    TemplateKey,
    TableKey,
}

impl WaitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::FineKey => "fineKey",
            WaitKind::TemplateKey => "templateKey",
            WaitKind::TableKey => "tableKey",
        }
    }
}

/// The kind a wait takes before its keys are known (W3, first part).
pub fn choose_kind(args: &WaitArgs, mode: TouchMode) -> WaitKind {
    let has_templates = !args.template_ids_used.is_empty();
    match args.interest {
        InterestMode::Coarse => WaitKind::TableKey,
        InterestMode::Fine if mode == TouchMode::Restricted && has_templates => WaitKind::TemplateKey,
        InterestMode::Fine if mode == TouchMode::CoarseOnly && has_templates => WaitKind::TableKey,
        InterestMode::Fine => WaitKind::FineKey,
    }
}

/// The key sets of one wait (W3, W4).
#[derive(Debug, Clone, PartialEq)]
pub struct WaitPlan {
    pub kind: WaitKind,
    /// Keys checked in the bloom and registered (unless the exact path is used).
    pub wait_key_ids: Vec<u32>,
    /// Hot interest keys (M19).
    pub hot_key_ids: Vec<u32>,
    /// The exact path: literal routing keys and the template keys checked beside them.
    pub exact_keys: Vec<u64>,
    pub exact_fallback_key_ids: Vec<u32>,
}

/// The key id every engine wait without template ids also listens to: the engine touches it
/// when it could not emit the fine keys a change concerns (deviations.md, B1–B5).
pub fn catch_all_key_id() -> u32 {
    key_id(crate::keys::hash64(b"durable-touch\0catch-all"))
}

/// W3/W4: the keys a wait listens to, given its kind and (for table-key waits with template
/// ids) the entities of those templates.
pub fn plan_keys(args: &WaitArgs, mode: TouchMode, template_entities: &[String]) -> Result<WaitPlan> {
    let raw_fine = args.raw_fine_key_ids();
    let template_keys = args.template_key_ids();
    let mut kind = choose_kind(args, mode);
    let mut wait_keys = match kind {
        // A template-key wait also hears its own fine keys: it may outlive the restricted
        // batches it was planned for, and a fine batch announces a change by its fine keys
        // only (deviations.md, B2).
        WaitKind::TemplateKey => dedupe(template_keys.iter().chain(&raw_fine).copied()),
        WaitKind::TableKey if !args.template_ids_used.is_empty() => {
            dedupe(template_entities.iter().map(|e| key_id(table_key(e.as_bytes()))))
        }
        _ => raw_fine.clone(),
    };
    if args.exact && (args.interest != InterestMode::Fine || kind != WaitKind::FineKey) {
        return Err(bad("wait.exact requires fine interest while runtime is in fine-key mode"));
    }
    let exact_keys = if args.exact { args.exact_keys() } else { Vec::new() };
    if args.exact && exact_keys.is_empty() {
        return Err(bad("wait.exact requires 1 to 16 literal 64-bit routing keys"));
    }
    let fine_kind = args.interest == InterestMode::Fine && kind == WaitKind::FineKey;
    let exact_fallback = if fine_kind && !template_keys.is_empty() { template_keys.clone() } else { Vec::new() };
    if fine_kind && !template_keys.is_empty() && exact_keys.is_empty() {
        for k in &template_keys {
            if !wait_keys.contains(k) {
                wait_keys.push(*k);
            }
        }
    }
    if wait_keys.is_empty() {
        wait_keys = raw_fine.clone();
        kind = WaitKind::FineKey;
    }
    let hot = if args.interest == InterestMode::Fine { raw_fine } else { wait_keys.clone() };
    Ok(WaitPlan { kind, wait_key_ids: wait_keys, hot_key_ids: hot, exact_keys, exact_fallback_key_ids: exact_fallback })
}

/// The `error.message` of a stale reply (W6).
pub const STALE_MESSAGE: &str = "cursor epoch mismatch; rerun/re-subscribe and start from cursor";

/// A wait's answer (W6), as the reference's `/touch/wait` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitReply {
    pub touched: bool,
    pub stale: bool,
    pub cursor: String,
    /// Set on stale replies.
    pub epoch: Option<String>,
    pub generation: Option<u32>,
    pub effective_wait_kind: WaitKind,
    pub bucket_max_source_offset_seq: i64,
    pub flush_at_ms: i64,
    pub bucket_start_ms: i64,
    /// The highest source offset whose touches the reply's `cursor` already covers (the last
    /// flushed bucket's, read with the cursor). Not part of the route's reply; a touched
    /// reply's `bucket_max_source_offset_seq` is the touching bucket's, which may be older.
    pub cursor_through: i64,
    /// Whether the wait was registered and answered later (by a flush, its timeout or
    /// `close`), rather than at once. Not part of the route's reply either.
    pub parked: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::jscompat::json::Object;

    #[test]
    fn fields_lists_every_property_parse_reads() {
        // The binding copies only WaitArgs::FIELDS out of the JS request; a field read here but
        // missing there would silently read as absent.
        let src = include_str!("request.rs");
        let needle = ["get(bo", "dy, \""].concat();
        let mut read: Vec<&str> = src
            .match_indices(&needle)
            .map(|(i, _)| {
                let rest = &src[i + needle.len()..];
                &rest[..rest.find('"').unwrap()]
            })
            .collect();
        read.sort();
        read.dedup();
        assert!(read.len() >= 9, "found {read:?}");
        for f in read {
            assert!(WaitArgs::FIELDS.contains(&f), "WaitArgs::FIELDS lacks {f:?}");
        }
    }
    use crate::jscompat::string::JsString;

    fn obj(entries: Vec<(&str, Value)>) -> Value {
        let mut o = Object::new();
        for (k, v) in entries {
            o.insert(JsString::from(k), v);
        }
        Value::Object(o)
    }
    fn s(x: &str) -> Value {
        Value::String(JsString::from(x))
    }
    fn arr(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    fn err(body: Value) -> String {
        WaitArgs::parse(&body).unwrap_err().to_string()
    }

    #[test]
    fn w1_messages() {
        assert_eq!(err(obj(vec![("cursor", s("now"))])), "wait requires keys or keyIds");
        assert_eq!(
            err(obj(vec![("keys", arr(vec![s(" ")]))])),
            "wait.keys must be a non-empty string array when provided"
        );
        assert_eq!(
            err(obj(vec![("keyIds", arr(vec![Value::Number(-1.0)]))])),
            "wait.keyIds must be a non-empty uint32 array when provided"
        );
        assert_eq!(
            err(obj(vec![("keyIds", arr(vec![Value::Number(1.5)]))])),
            "wait.keyIds must be a non-empty uint32 array when provided"
        );
        assert_eq!(err(obj(vec![("keys", arr(vec![s("a")]))])), "wait.cursor must be a non-empty string");
        let base = |extra: (&str, Value)| obj(vec![("keys", arr(vec![s("a")])), ("cursor", s("now")), extra]);
        assert_eq!(err(base(("timeoutMs", s("5")))), "wait.timeoutMs must be a number (ms)");
        assert_eq!(err(base(("exact", s("yes")))), "wait.exact must be a boolean when provided");
        assert_eq!(err(base(("interestMode", s("medium")))), "wait.interestMode must be 'fine' or 'coarse'");
        assert_eq!(
            err(base(("templateIdsUsed", arr(vec![Value::Number(1.0)])))),
            "wait.templateIdsUsed must be a string array"
        );
        assert_eq!(
            err(base(("templateIdsUsed", arr(vec![s("xyz")])))),
            "wait.templateIdsUsed must contain hex template ids"
        );
        assert_eq!(
            err(base(("declareTemplates", arr(vec![obj(vec![("entity", s("E")), ("fields", arr(vec![]))])])))),
            "wait.declareTemplates contains invalid template definitions"
        );
        let many = arr((0..1025).map(|i| s(&format!("k{i}"))).collect());
        assert_eq!(err(obj(vec![("keys", many), ("cursor", s("now"))])), "wait.keys too large (max 1024)");
    }

    fn list(n: usize, item: impl Fn(usize) -> Value) -> Value {
        arr((0..n).map(item).collect())
    }

    #[test]
    fn w1_lists_are_capped_by_length_before_their_elements_are_read() {
        let with = |field: &str, v: Value| obj(vec![("keys", arr(vec![s("a")])), ("cursor", s("now")), (field, v)]);
        // 1,024 is the cap, so 1,024 distinct keys (or key ids, or template ids) are fine.
        let ok = WaitArgs::parse(&obj(vec![
            ("keys", list(1024, |i| s(&format!("k{i}")))),
            ("keyIds", list(1024, |i| Value::Number(i as f64))),
            ("templateIdsUsed", list(1024, |i| s(&format!("{i:016x}")))),
            ("cursor", s("now")),
        ]))
        .unwrap();
        assert_eq!((ok.keys.len(), ok.key_ids.len(), ok.template_ids_used.len()), (1024, 1024, 1024));
        // A longer list is refused by its length, whatever its elements: a number at the end
        // (or repeats that would dedupe below the cap) does not change the answer.
        let junk_end = |n: usize, good: &dyn Fn(usize) -> Value| {
            list(n, |i| if i == n - 1 { Value::Number(1.5) } else { good(i) })
        };
        let key = |i: usize| s(&format!("k{i}"));
        assert_eq!(
            err(obj(vec![("keys", junk_end(50_000, &key)), ("cursor", s("now"))])),
            "wait.keys too large (max 1024)"
        );
        assert_eq!(
            err(obj(vec![("keys", list(1025, |_| s("same"))), ("cursor", s("now"))])),
            "wait.keys too large (max 1024)"
        );
        assert_eq!(
            err(obj(vec![("keyIds", junk_end(1025, &|i| Value::Number(i as f64))), ("cursor", s("now"))])),
            "wait.keyIds too large (max 1024)"
        );
        assert_eq!(
            err(with("templateIdsUsed", junk_end(40_000, &|i| s(&format!("{i:016x}"))))),
            "wait.templateIdsUsed too large (max 1024)"
        );
        let decl = |_| obj(vec![("entity", s("e")), ("fields", arr(vec![obj(vec![("name", s("f"))])]))]);
        assert_eq!(err(with("declareTemplates", list(257, decl))), "wait.declareTemplates too large (max 256)");
    }

    #[test]
    fn w1_a_list_cut_after_max_wait_list_plus_one_parses_as_the_whole_list() {
        // The binding copies at most MAX_WAIT_LIST + 1 elements of any list; the answer must
        // be the one the whole list would get.
        let cut = |v: &Value| -> Value {
            fn go(v: &Value) -> Value {
                match v {
                    Value::Array(items) => Value::Array(items.iter().take(MAX_WAIT_LIST + 1).map(go).collect()),
                    Value::Object(o) => {
                        let mut out = Object::new();
                        for k in o.keys() {
                            out.insert(k.clone(), go(o.get_bytes(k.as_bytes()).unwrap()));
                        }
                        Value::Object(out)
                    }
                    other => other.clone(),
                }
            }
            go(v)
        };
        let field = obj(vec![("name", s("f")), ("encoding", s("string"))]);
        let long_fields = obj(vec![("entity", s("e")), ("fields", list(3000, |_| field.clone()))]);
        let short_fields = obj(vec![("entity", s("e")), ("fields", list(2, |_| field.clone()))]);
        let bodies = [
            obj(vec![("keys", list(3000, |i| s(&format!("k{i}")))), ("cursor", s("now"))]),
            obj(vec![("keys", list(3000, |_| Value::Null)), ("cursor", s("now"))]),
            obj(vec![("keyIds", list(3000, |i| Value::Number(i as f64))), ("cursor", s("now"))]),
            obj(vec![("keyIds", list(3000, |_| Value::Number(-1.0))), ("cursor", s("now"))]),
            obj(vec![("keys", arr(vec![s("a")])), ("cursor", s("now")), ("templateIdsUsed", list(3000, |_| s("zz")))]),
            obj(vec![
                ("keys", arr(vec![s("a")])),
                ("cursor", s("now")),
                ("declareTemplates", list(1100, |_| short_fields.clone())),
            ]),
            obj(vec![
                ("keys", arr(vec![s("a")])),
                ("cursor", s("now")),
                ("declareTemplates", arr(vec![long_fields.clone()])),
            ]),
            obj(vec![("keys", arr(vec![s("a")])), ("cursor", list(3000, |_| s("now")))]),
            obj(vec![("keys", arr(vec![s("a")])), ("cursor", s("now")), ("exact", list(3000, |_| Value::Bool(true)))]),
        ];
        for body in bodies {
            assert_eq!(WaitArgs::parse(&cut(&body)), WaitArgs::parse(&body));
            assert!(WaitArgs::parse(&body).is_err());
        }
    }

    #[test]
    fn dedupe_keeps_first_seen_order_for_short_and_long_lists() {
        assert_eq!(dedupe([3, 1, 3, 2, 1]), [3, 1, 2]);
        let long: Vec<u32> = (0..10_000).map(|i| (i * 7919) % 5000).collect();
        let want: Vec<u32> = (0..5000).map(|i| (i * 7919) % 5000).collect();
        assert_eq!(dedupe(long), want);
        let strings = dedupe((0..40).map(|i| format!("s{}", i % 20)));
        assert_eq!(strings, (0..20).map(|i| format!("s{i}")).collect::<Vec<_>>());
    }

    #[test]
    fn w1_normalisation() {
        let a = WaitArgs::parse(&obj(vec![
            ("keys", arr(vec![s(" a "), s("a"), s("b")])),
            ("keyIds", arr(vec![Value::Number(7.0), s("8")])),
            ("cursor", s(" now ")),
            ("timeoutMs", Value::Number(1e9)),
            ("templateIdsUsed", arr(vec![s("87e41f4a8d440298"), s(" 87e41f4a8d440298 ")])),
        ]))
        .unwrap();
        assert_eq!(a.keys, ["a", "b"]);
        assert_eq!(a.key_ids, [7, 8]);
        assert_eq!(a.cursor, "now");
        assert_eq!(a.timeout_ms, 120_000.0);
        assert_eq!(a.template_ids_used.len(), 1);
        assert_eq!(a.raw_fine_key_ids(), [7, 8], "keyIds win over keys");
        assert_eq!(a.template_key_ids(), [125756624], "K17: template key of 87e41f4a8d440298");
    }

    #[test]
    fn w3_kinds_and_keys() {
        let args = WaitArgs::parse(&obj(vec![
            ("keys", arr(vec![s("47fdf51496b95b3e")])),
            ("cursor", s("now")),
            ("templateIdsUsed", arr(vec![s("87e41f4a8d440298")])),
        ]))
        .unwrap();
        let fine = plan_keys(&args, TouchMode::Fine, &[]).unwrap();
        assert_eq!(fine.kind, WaitKind::FineKey);
        assert_eq!(fine.wait_key_ids, [2528729918, 125756624], "fine id (K17 watch key) plus the template key");
        let restricted = plan_keys(&args, TouchMode::Restricted, &[]).unwrap();
        assert_eq!(
            (restricted.kind, restricted.wait_key_ids.clone()),
            (WaitKind::TemplateKey, vec![125756624, 2528729918]),
            "the template key, and the fine id for batches that run fine again"
        );
        assert_eq!(restricted.hot_key_ids, [2528729918]);
        let coarse_only = plan_keys(&args, TouchMode::CoarseOnly, &["public.posts".into()]).unwrap();
        assert_eq!((coarse_only.kind, coarse_only.wait_key_ids.clone()), (WaitKind::TableKey, vec![3117452744]));
        // No entity resolved: fall back to the fine ids.
        let fallback = plan_keys(&args, TouchMode::CoarseOnly, &[]).unwrap();
        assert_eq!((fallback.kind, fallback.wait_key_ids), (WaitKind::FineKey, vec![2528729918]));
    }

    #[test]
    fn w4_exact_rules() {
        let exact = WaitArgs::parse(&obj(vec![
            ("keys", arr(vec![s("47FDF51496B95B3E")])),
            ("cursor", s("now")),
            ("exact", Value::Bool(true)),
        ]))
        .unwrap();
        let plan = plan_keys(&exact, TouchMode::Fine, &[]).unwrap();
        assert_eq!(plan.exact_keys, [0x47fdf51496b95b3e]);
        assert_eq!(
            plan_keys(&exact, TouchMode::Restricted, &[]).map(|_| ()),
            Ok(()),
            "without template ids the kind stays fineKey in restricted mode (B2)"
        );
        let not_hex = WaitArgs { keys: vec!["user:1".into()], ..exact.clone() };
        assert_eq!(
            plan_keys(&not_hex, TouchMode::Fine, &[]).unwrap_err().to_string(),
            "wait.exact requires 1 to 16 literal 64-bit routing keys"
        );
        let coarse = WaitArgs { interest: InterestMode::Coarse, ..exact };
        assert_eq!(
            plan_keys(&coarse, TouchMode::Fine, &[]).unwrap_err().to_string(),
            "wait.exact requires fine interest while runtime is in fine-key mode"
        );
    }

    #[test]
    fn the_js_wait_and_the_route_pass_the_fields_in_this_order() {
        // lib/internal/engine-methods.js reads the request's fields into locals (`stream`
        // and `signal` first, then WaitArgs::FIELDS in order) and passes them to
        // `_engineWait` positionally; the binding names them by WaitArgs::FIELDS.
        let js = include_str!("../../../lib/internal/engine-methods.js");
        let body = &js[js.find("function wait(request)").expect("the method")..];
        let call_at = body.find("waitFields(").expect("the call");
        let call = &body[call_at + "waitFields(".len()..];
        let call = &call[..call.find(");").expect("its end")];
        let reads: Vec<String> = body[..call_at]
            .split("request.")
            .skip(1)
            .map(|s| s.split([',', ';']).next().unwrap().trim().to_string())
            .collect();
        assert_eq!(reads[..2], ["stream", "signal"]);
        assert_eq!(&reads[2..], WaitArgs::FIELDS);
        let args: Vec<&str> = call.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
        assert_eq!(args[..3], ["this", "stream", "listen ? undefined : signal"]);
        assert_eq!(&args[3..3 + WaitArgs::FIELDS.len()], WaitArgs::FIELDS);
        assert_eq!(args[3 + WaitArgs::FIELDS.len()..], ["cancelId"]);
        // compat/routes.mjs copies these fields from the body, inherited ones included (an
        // array body's `keys` is Array.prototype.keys, as the reference reads it): this very
        // list, exported by the binding as `_waitFields()`, not a copy of its own.
        let routes = include_str!("../../../compat/routes.mjs");
        assert!(routes.contains("const WAIT_FIELDS = Object.freeze(native._waitFields());"));
    }
}
