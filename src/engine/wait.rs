//! The wait request (W1–W6): validation with the reference route's messages, the key ids a
//! wait listens to, the effective wait kind chosen from the stream's touch mode, and the reply.

use crate::engine::hot::InterestMode;
use crate::engine::templates::{FieldDecl, TemplateDecl};
use crate::error::{Error, Result};
use crate::jscompat::string::trim_str;
use crate::keys::{key_id, table_key, template_bits, template_key, touch_key_id_from_routing_key};

/// Most keys / key ids per wait (W1).
pub const MAX_WAIT_KEYS: usize = 1024;
/// Most literal keys on the exact path (W4).
pub const EXACT_MAX_KEYS: usize = 16;
/// Longest wait (W1).
pub const MAX_TIMEOUT_MS: f64 = 120_000.0;
/// Most templates per activation (T13).
pub const MAX_DECLARED_TEMPLATES: usize = 256;

/// A field of a JSON-like request value, as the binding hands it over.
#[derive(Debug, Clone, PartialEq)]
pub enum Loose {
    Absent,
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Loose>),
    Object(Vec<(String, Loose)>),
    Other,
}

impl Loose {
    pub fn get(&self, key: &str) -> &Loose {
        match self {
            Loose::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or(&Loose::Absent),
            _ => &Loose::Absent,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Loose::String(s) => Some(s),
            _ => None,
        }
    }

    /// `Number(x)` for the values a JSON body can hold.
    fn to_number(&self) -> f64 {
        match self {
            Loose::Number(n) => *n,
            Loose::Bool(b) => f64::from(u8::from(*b)),
            Loose::Null => 0.0,
            Loose::String(s) => crate::jscompat::number::string_to_number(s.as_bytes()),
            Loose::Array(a) if a.is_empty() => 0.0,
            Loose::Array(a) if a.len() == 1 => a[0].to_number(),
            _ => f64::NAN,
        }
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

fn dedupe<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// T13's route-level shape checks; any failure rejects the whole list.
pub fn parse_template_decls(raw: &Loose, path: &str) -> Result<Vec<TemplateDecl>> {
    let Loose::Array(items) = raw else { return Err(bad(&format!("{path} must be a non-empty array"))) };
    if items.is_empty() {
        return Err(bad(&format!("{path} must be a non-empty array")));
    }
    if items.len() > MAX_DECLARED_TEMPLATES {
        return Err(bad(&format!("{path} too large (max 256)")));
    }
    let invalid = || bad(&format!("{path} contains invalid template definitions"));
    let mut out = Vec::with_capacity(items.len());
    for t in items {
        let entity = t.get("entity").as_str().map(trim_str).unwrap_or("");
        let Loose::Array(fields) = t.get("fields") else { return Err(invalid()) };
        if entity.is_empty() || fields.is_empty() || fields.len() > 3 {
            return Err(invalid());
        }
        let mut decl = TemplateDecl { entity: entity.to_string(), fields: Vec::new() };
        for f in fields {
            let name = f.get("name").as_str().map(trim_str).unwrap_or("");
            if name.is_empty() {
                return Err(invalid());
            }
            // The encoding is checked by the registry (a bad one is denied as `invalid`).
            let encoding = f.get("encoding").as_str().unwrap_or("").to_string();
            decl.fields.push(FieldDecl { name: name.to_string(), encoding });
        }
        out.push(decl);
    }
    Ok(out)
}

/// `inactivityTtlMs`: a finite number ≥ 0, floored (T13).
pub fn parse_inactivity_ttl(raw: &Loose, path: &str) -> Result<Option<f64>> {
    match raw {
        Loose::Absent => Ok(None),
        Loose::Number(n) if n.is_finite() && *n >= 0.0 => Ok(Some(n.floor())),
        _ => Err(bad(&format!("{path} must be a non-negative number (ms)"))),
    }
}

impl WaitArgs {
    /// W1, in the route's order and with its messages.
    pub fn parse(body: &Loose) -> Result<WaitArgs> {
        let keys = match body.get("keys") {
            Loose::Absent => Vec::new(),
            Loose::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for k in items {
                    match k.as_str() {
                        Some(s) if !trim_str(s).is_empty() => out.push(trim_str(s).to_string()),
                        _ => return Err(bad("wait.keys must be a non-empty string array when provided")),
                    }
                }
                dedupe(out)
            }
            _ => return Err(bad("wait.keys must be a non-empty string array when provided")),
        };
        if keys.len() > MAX_WAIT_KEYS {
            return Err(bad("wait.keys too large (max 1024)"));
        }
        let key_ids = match body.get("keyIds") {
            Loose::Array(items) if !items.is_empty() => {
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
        if key_ids.len() > MAX_WAIT_KEYS {
            return Err(bad("wait.keyIds too large (max 1024)"));
        }
        let exact = match body.get("exact") {
            Loose::Absent => false,
            Loose::Bool(b) => *b,
            _ => return Err(bad("wait.exact must be a boolean when provided")),
        };
        let cursor = match body.get("cursor").as_str().map(trim_str) {
            Some(c) if !c.is_empty() => c.to_string(),
            _ => return Err(bad("wait.cursor must be a non-empty string")),
        };
        let timeout_ms = match body.get("timeoutMs") {
            Loose::Absent => 30_000.0,
            Loose::Number(n) if n.is_finite() => n.clamp(0.0, MAX_TIMEOUT_MS),
            _ => return Err(bad("wait.timeoutMs must be a number (ms)")),
        };
        let template_ids_used = match body.get("templateIdsUsed") {
            Loose::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for t in items {
                    match t.as_str() {
                        Some(s) if !trim_str(s).is_empty() => out.push(trim_str(s).to_string()),
                        _ => return Err(bad("wait.templateIdsUsed must be a string array")),
                    }
                }
                dedupe(out)
            }
            _ => Vec::new(),
        };
        let interest = match body.get("interestMode") {
            Loose::Absent => InterestMode::Fine,
            Loose::String(s) if s == "fine" => InterestMode::Fine,
            Loose::String(s) if s == "coarse" => InterestMode::Coarse,
            _ => return Err(bad("wait.interestMode must be 'fine' or 'coarse'")),
        };
        let declare_templates = match body.get("declareTemplates") {
            Loose::Array(items) if !items.is_empty() => {
                parse_template_decls(body.get("declareTemplates"), "wait.declareTemplates")?
            }
            _ => Vec::new(),
        };
        let inactivity_ttl_ms = if declare_templates.is_empty() {
            None
        } else {
            parse_inactivity_ttl(body.get("inactivityTtlMs"), "wait.inactivityTtlMs")?
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

/// The stream's processing mode as the last batch left it (M8, M21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TouchMode {
    Idle,
    Fine,
    Restricted,
    CoarseOnly,
}

impl TouchMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TouchMode::Idle => "idle",
            TouchMode::Fine => "fine",
            TouchMode::Restricted => "restricted",
            TouchMode::CoarseOnly => "coarseOnly",
        }
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
        WaitKind::TemplateKey => template_keys.clone(),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(entries: Vec<(&str, Loose)>) -> Loose {
        Loose::Object(entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }
    fn s(x: &str) -> Loose {
        Loose::String(x.into())
    }
    fn arr(items: Vec<Loose>) -> Loose {
        Loose::Array(items)
    }

    fn err(body: Loose) -> String {
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
            err(obj(vec![("keyIds", arr(vec![Loose::Number(-1.0)]))])),
            "wait.keyIds must be a non-empty uint32 array when provided"
        );
        assert_eq!(
            err(obj(vec![("keyIds", arr(vec![Loose::Number(1.5)]))])),
            "wait.keyIds must be a non-empty uint32 array when provided"
        );
        assert_eq!(err(obj(vec![("keys", arr(vec![s("a")]))])), "wait.cursor must be a non-empty string");
        let base = |extra: (&str, Loose)| obj(vec![("keys", arr(vec![s("a")])), ("cursor", s("now")), extra]);
        assert_eq!(err(base(("timeoutMs", s("5")))), "wait.timeoutMs must be a number (ms)");
        assert_eq!(err(base(("exact", s("yes")))), "wait.exact must be a boolean when provided");
        assert_eq!(err(base(("interestMode", s("medium")))), "wait.interestMode must be 'fine' or 'coarse'");
        assert_eq!(
            err(base(("templateIdsUsed", arr(vec![Loose::Number(1.0)])))),
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

    #[test]
    fn w1_normalisation() {
        let a = WaitArgs::parse(&obj(vec![
            ("keys", arr(vec![s(" a "), s("a"), s("b")])),
            ("keyIds", arr(vec![Loose::Number(7.0), s("8")])),
            ("cursor", s(" now ")),
            ("timeoutMs", Loose::Number(1e9)),
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
        assert_eq!((restricted.kind, restricted.wait_key_ids.clone()), (WaitKind::TemplateKey, vec![125756624]));
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
            ("exact", Loose::Bool(true)),
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
}
