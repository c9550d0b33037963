//! The engine's promise — no lost invalidation — checked against an oracle that knows every
//! row's true images, whatever the records say of them.
//!
//! A writer appends State Protocol records for rows it keeps in memory: inserts, updates and
//! deletes whose `old_value` is full, partial, null or absent, rows moving in and out of
//! tuples through null, unencodable and missing template fields, untrimmed types, another
//! entity, malformed records and resets; in bursts (which push the stream into `restricted`
//! mode), trickles and pauses, under touch configs that change from phase to phase (lag
//! marks, tiny fine budgets, tiny token buckets: `coarseOnly`). Meanwhile chains of waiters
//! wait on watch, membership, projected-field and table keys (as keys, key ids or exact keys;
//! with or without `templateIdsUsed`; fine or coarse interest), each next wait starting from
//! the cursor the last one returned, as a client does.
//!
//! A wait that times out must not have missed a change that concerns one of its keys and was
//! flushed after its cursor: one whose source offset lies after what its start cursor covered
//! and within what its reply cursor covers (`WaitReply::cursor_through`). A wait that parked
//! and was woken must have been woken by the first flush that held such a change: a later
//! wake means that flush did not announce it, though a busier key hid the loss (flush
//! boundaries are the last-flushed offsets seen in replies and in `meta`). Wakes without such
//! a change (conservative wakes) are allowed and counted.
//!
//! Size: `DT_ORACLE_WAITS` waits in all (default 40,000; `DT_NIGHTLY=1`: 240,000), over
//! `DT_ORACLE_SEEDS` seeds (default 4; nightly 8) from `DT_ORACLE_SEED`. Each of the two
//! losses issue 19 found (a template-key wait deaf to fine batches; a row entering a tuple
//! from a null field) shows in about half the seeds at the default size per seed, and in
//! every nightly run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use durable_touch::engine::wait::{WaitArgs, WaitKind, WaitReply};
use durable_touch::engine::{EngineOptions, TouchEngine};
use durable_touch::jscompat::json::parse;
use durable_touch::keys::{
    encode_template_arg, hex16, key_id, membership_key, projected_field_key, table_key, template_id, watch_key,
    ArgValue, Encoding,
};
use durable_touch::store::{blocking, AppendRequest, Store, StoreOptions};
use durable_touch::Result;
use serde_json::{json, Map, Value as J};

const STREAM: &str = "s";
const ENTITY: &str = "public.items";
const OTHER: &str = "public.logs";

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// The templates active from the start; the last one is activated during the run.
const EARLY: usize = 4;
/// Chains on the early templates, and on the late one (started once it is active).
const CHAINS: usize = 200;
const LATE_CHAINS: usize = 40;

/// A template: fields in canonical (sorted) order with their encodings.
struct Tpl {
    bits: u64,
    id: String,
    fields: Vec<(&'static str, Encoding, &'static str)>,
}

fn templates() -> Vec<Tpl> {
    let decls: [&[(&str, &str)]; 5] = [
        &[("tenant", "string")],
        &[("status", "string"), ("tenant", "string")],
        &[("rank", "int64")],
        &[("flag", "bool"), ("rank", "int64")],
        // Activated in the middle of the run, while a burst is being processed.
        &[("rank", "int64"), ("tenant", "string")],
    ];
    decls
        .iter()
        .map(|fields| {
            let names: Vec<&str> = fields.iter().map(|f| f.0).collect();
            let bits = template_id(ENTITY.as_bytes(), &names);
            Tpl {
                bits,
                id: hex16(bits),
                fields: fields.iter().map(|&(n, e)| (n, Encoding::parse(e).unwrap(), e)).collect(),
            }
        })
        .collect()
}

/// The args a client would derive for the row's tuple (K13 on each field), `None` when the
/// row is in no tuple a client can name.
fn tuple(tpl: &Tpl, row: &J) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    for &(name, enc, _) in &tpl.fields {
        let text;
        let value = match row.get(name)? {
            J::Null => ArgValue::Null,
            J::Bool(b) => ArgValue::Bool(*b),
            J::Number(n) => ArgValue::Number(n.as_f64().unwrap()),
            J::String(s) => {
                text = s.clone();
                ArgValue::String(text.as_bytes())
            }
            _ => ArgValue::Other,
        };
        args.push(encode_template_arg(value, enc)?.into_owned());
    }
    Some(args)
}

/// Every key a change concerns: the entity's table key, and per template the watch keys of
/// the tuples the row leaves and enters, their membership keys when it moves, and a
/// projected-field key per changed field when it stays.
fn concerned(tpls: &[Tpl], entity: &str, before: Option<&J>, after: Option<&J>) -> Vec<u64> {
    let mut out = vec![table_key(entity.as_bytes())];
    if entity != ENTITY {
        return out;
    }
    for t in tpls {
        let b = before.and_then(|r| tuple(t, r));
        let a = after.and_then(|r| tuple(t, r));
        out.extend(b.iter().chain(&a).map(|args| watch_key(t.bits, args)));
        if b != a {
            out.extend(b.iter().chain(&a).map(|args| membership_key(t.bits, args)));
        } else if let (Some(args), Some(before), Some(after)) = (&a, before, after) {
            for f in ["title", "tags", "tenant", "status", "rank", "flag"] {
                if !t.fields.iter().any(|x| x.0 == f) && before.get(f) != after.get(f) {
                    out.push(projected_field_key(t.bits, f.as_bytes(), args));
                }
            }
        }
    }
    out
}

/// What one chain of waits listens to.
#[derive(Clone, Debug)]
struct Spec {
    keys: Vec<u64>,
    /// Templates named in `templateIdsUsed` (empty: none).
    templates: Vec<String>,
    coarse: bool,
    form: Form,
    /// Whether a reset concerns it (keys of templates and their entity's table key).
    templated_keys: bool,
    /// The first offset its keys can be announced from (a template's
    /// `active_from_source_offset`); earlier changes do not count.
    since: i64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    Keys,
    KeyIds,
    Exact,
}

const TENANTS: [&str; 7] = ["t0", "t1", "t2", "t3", "t4", "t5", "2.5"];
const STATUSES: [&str; 2] = ["a", "b"];
const RANKS: [&str; 5] = ["1", "2", "3", "4", "5"];
const FLAGS: [&str; 2] = ["1", "0"];
/// Tenants and ranks only the probe rows take: their keys are touched rarely, so a wait on
/// them times out (and shows a lost change) where a busy key would be woken by the next
/// change and hide it.
const PROBE_TENANTS: [&str; 6] = ["p0", "p1", "p2", "p3", "p4", "p5"];
const PROBE_RANKS: [&str; 6] = ["100", "101", "102", "103", "104", "105"];

fn client_args(rng: &mut Rng, tpl: &Tpl, probe: bool) -> Vec<&'static str> {
    tpl.fields
        .iter()
        .map(|f| match f.0 {
            "tenant" if probe => *rng.pick(&PROBE_TENANTS),
            "rank" if probe => *rng.pick(&PROBE_RANKS),
            "tenant" => *rng.pick(&TENANTS),
            "status" => *rng.pick(&STATUSES),
            "rank" => *rng.pick(&RANKS),
            _ => *rng.pick(&FLAGS),
        })
        .collect()
}

fn random_spec(rng: &mut Rng, tpls: &[Tpl]) -> Spec {
    let t = rng.below(tpls.len());
    let tpl = &tpls[t];
    let probe = rng.chance(0.4);
    let args = client_args(rng, tpl, probe);
    let mut templates = Vec::new();
    let (keys, templated_keys) = match rng.below(10) {
        0..=3 => (vec![watch_key(tpl.bits, &args)], true),
        4..=5 => (vec![membership_key(tpl.bits, &args)], true),
        6 => {
            let f = *rng.pick(&["title", "tags"]);
            (vec![projected_field_key(tpl.bits, f.as_bytes(), &args), membership_key(tpl.bits, &args)], true)
        }
        7 => {
            // Several tuples of several templates.
            let mut keys = vec![watch_key(tpl.bits, &args)];
            let u = &tpls[rng.below(tpls.len())];
            let other = watch_key(u.bits, &client_args(rng, u, probe));
            if other != keys[0] {
                // (keyIds must not repeat an id)
                keys.push(other);
            }
            if u.id != tpl.id {
                templates.push(u.id.clone());
            }
            (keys, true)
        }
        8 => {
            let entity = *rng.pick(&[ENTITY, OTHER]);
            return Spec {
                keys: vec![table_key(entity.as_bytes())],
                templates: Vec::new(),
                coarse: true,
                form: if rng.chance(0.5) { Form::Keys } else { Form::KeyIds },
                templated_keys: entity == ENTITY,
                since: i64::MIN,
            };
        }
        _ => (vec![watch_key(tpl.bits, &args), membership_key(tpl.bits, &args)], true),
    };
    if rng.chance(0.5) {
        templates.insert(0, tpl.id.clone());
    } else {
        templates.clear();
    }
    // Coarse interest listens at table granularity: to the table keys of the templates it
    // names (W3). Without templates its keys are taken as table keys, so fine keys there
    // are a client's mistake, not a promise (deviations.md).
    let coarse = !templates.is_empty() && rng.chance(0.15);
    let form = match rng.below(10) {
        0..=5 => Form::Keys,
        6..=7 => Form::KeyIds,
        _ if !coarse => Form::Exact,
        _ => Form::Keys,
    };
    Spec { keys, templates, coarse, form, templated_keys, since: i64::MIN }
}

fn wait_body(spec: &Spec, cursor: &str, timeout_ms: u64) -> String {
    let mut body = Map::new();
    body.insert("cursor".into(), json!(cursor));
    match spec.form {
        Form::KeyIds => {
            body.insert("keyIds".into(), json!(spec.keys.iter().map(|k| key_id(*k)).collect::<Vec<_>>()));
        }
        Form::Keys | Form::Exact => {
            body.insert("keys".into(), json!(spec.keys.iter().map(|k| hex16(*k)).collect::<Vec<_>>()));
        }
    }
    if spec.form == Form::Exact {
        body.insert("exact".into(), json!(true));
    }
    if !spec.templates.is_empty() {
        body.insert("templateIdsUsed".into(), json!(spec.templates));
    }
    if spec.coarse {
        body.insert("interestMode".into(), json!("coarse"));
    }
    body.insert("timeoutMs".into(), json!(timeout_ms));
    J::Object(body).to_string()
}

/// The rows and what each appended record concerned.
#[derive(Default)]
struct Truth {
    /// Key → source offsets of the changes that concern it, ascending.
    by_key: HashMap<u64, Vec<i64>>,
    /// Offsets of reset records (they concern every templated key).
    resets: Vec<i64>,
    /// Offset → payload, for the failure report.
    payloads: HashMap<i64, String>,
}

impl Truth {
    fn record(&mut self, first: i64, batch: Vec<(String, Option<Vec<u64>>)>) {
        for (i, (payload, keys)) in batch.into_iter().enumerate() {
            let offset = first + i as i64;
            match keys {
                None => self.resets.push(offset),
                Some(keys) => {
                    for k in keys {
                        self.by_key.entry(k).or_default().push(offset);
                    }
                }
            }
            self.payloads.insert(offset, payload);
        }
    }

    fn first_in(list: &[i64], after: i64, through: i64) -> Option<i64> {
        let i = list.partition_point(|&o| o <= after);
        list.get(i).copied().filter(|&o| o <= through)
    }

    /// The first change in `(after, through]` that concerns `spec`.
    fn concerning(&self, spec: &Spec, after: i64, through: i64) -> Option<i64> {
        let after = after.max(spec.since.saturating_sub(1));
        let keys =
            spec.keys.iter().filter_map(|k| self.by_key.get(k)).filter_map(|l| Self::first_in(l, after, through));
        let reset = spec.templated_keys.then(|| Self::first_in(&self.resets, after, through)).flatten();
        keys.chain(reset).min()
    }
}

struct Writer {
    rng: Rng,
    tpls: Vec<Tpl>,
    live: Vec<(String, J)>,
    next_id: u64,
    /// This phase's odds of a messy field value (null, unencodable, missing) and of a record
    /// whose `old_value` is not the full before image: clean phases are where a lost fine key
    /// shows (a messy change touches the template key, which wakes everyone anyway).
    messy: f64,
    partial_old: f64,
    /// The probe rows (ids `p0`…), which alone take the probe values, and whether this phase
    /// changes them (their messy changes touch template keys, which would hide a template-key
    /// wait that misses a clean change).
    probes: Vec<J>,
    probing: bool,
}

impl Writer {
    fn value(&mut self, field: &str) -> Option<J> {
        let messy = self.rng.chance(self.messy);
        Some(match field {
            "tenant" if messy => match self.rng.below(4) {
                0 => J::Null,
                1 => json!(2.5),
                2 => json!({ "o": 1 }),
                _ => return None,
            },
            "tenant" => json!(*self.rng.pick(&TENANTS[..6])),
            "status" => json!(*self.rng.pick(&STATUSES)),
            "rank" if messy => match self.rng.below(4) {
                0 => J::Null,
                1 => json!(2.5),
                2 => json!("n/a"),
                _ => json!("2"),
            },
            "rank" => json!(self.rng.range(1, 5)),
            "flag" if messy => {
                if self.rng.chance(0.5) {
                    J::Null
                } else {
                    json!("yes")
                }
            }
            "flag" => json!(self.rng.chance(0.5)),
            "title" => json!(format!("x{}", self.rng.below(4))),
            _ => {
                if self.rng.chance(0.5) {
                    json!(["a", self.rng.below(3)])
                } else {
                    return None;
                }
            }
        })
    }

    fn row(&mut self, id: &str) -> J {
        let mut m = Map::new();
        m.insert("id".into(), json!(id));
        for f in ["tenant", "status", "rank", "flag", "title", "tags"] {
            if let Some(v) = self.value(f) {
                m.insert(f.into(), v);
            }
        }
        J::Object(m)
    }

    /// The image a record gives of `before`: full, partial, null or absent.
    fn old_value(&mut self, before: &J, delete: bool) -> Option<J> {
        if !self.rng.chance(self.partial_old) {
            return Some(before.clone());
        }
        match self.rng.below(10) {
            0..=4 => None,
            5..=7 if !delete => {
                let mut b = before.clone();
                let f = *self.rng.pick(&["tenant", "status", "rank", "flag", "title"]);
                b.as_object_mut().unwrap().remove(f);
                Some(b)
            }
            _ => Some(J::Null),
        }
    }

    /// One record and the keys it concerns (`None` for a reset).
    /// One record; probe changes come in trickles only, where they are alone in their bucket
    /// more often than not.
    fn record(&mut self, trickle: bool) -> (String, Option<Vec<u64>>) {
        if trickle && self.probing && self.rng.chance(0.3) {
            return self.probe();
        }
        let r = self.rng.below(1000);
        if r < 8 {
            let bad =
                *self.rng.pick(&["not json", r#"{"type":"public.items"}"#, r#"{"type":"public.items","key":"1""#]);
            return (bad.to_string(), Some(Vec::new()));
        }
        if r < 11 {
            return (r#"{"headers":{"control":"reset"}}"#.to_string(), None);
        }
        if r < 60 {
            let row = json!({ "id": "l", "n": r });
            let rec = json!({ "type": OTHER, "key": "l", "value": row, "headers": { "operation": "insert" } });
            return (rec.to_string(), Some(concerned(&self.tpls, OTHER, None, Some(&row))));
        }
        let ty = if self.rng.chance(0.04) { format!(" {ENTITY} ") } else { ENTITY.to_string() };
        let op = if self.live.len() < 8 { 0 } else { self.rng.below(10) };
        match op {
            0..=2 => {
                let id = format!("r{}", self.next_id);
                self.next_id += 1;
                let row = self.row(&id);
                self.live.push((id.clone(), row.clone()));
                let rec = json!({ "type": ty, "key": id, "value": row, "headers": { "operation": "insert" } });
                (rec.to_string(), Some(concerned(&self.tpls, ENTITY, None, Some(&row))))
            }
            3..=8 => {
                let i = self.rng.below(self.live.len());
                let (id, before) = self.live[i].clone();
                let mut after = before.clone();
                // Often a row whose template field is null, unencodable or missing gets a
                // clean value: it enters a tuple from none.
                let messy: Vec<&str> = ["tenant", "rank", "flag"]
                    .into_iter()
                    .filter(|f| {
                        !matches!((*f, before.get(*f)), ("tenant", Some(J::String(_))) | ("flag", Some(J::Bool(_))))
                            && !before.get(*f).is_some_and(|v| v.as_u64().is_some() || v == "2")
                    })
                    .collect();
                if !messy.is_empty() && self.rng.chance(0.5) {
                    let f = *self.rng.pick(&messy);
                    let saved = self.messy;
                    self.messy = 0.0;
                    let v = self.value(f).unwrap();
                    self.messy = saved;
                    after.as_object_mut().unwrap().insert(f.into(), v);
                }
                let n = self.rng.range(0, 2);
                for _ in 0..n {
                    let f = *self.rng.pick(&["tenant", "status", "rank", "flag", "title", "tags"]);
                    match self.value(f) {
                        Some(v) => after.as_object_mut().unwrap().insert(f.into(), v),
                        None => after.as_object_mut().unwrap().remove(f),
                    };
                }
                self.live[i].1 = after.clone();
                let mut rec = json!({ "type": ty, "key": id, "value": after, "headers": { "operation": "update" } });
                if let Some(old) = self.old_value(&before, false) {
                    rec["old_value"] = old;
                }
                (rec.to_string(), Some(concerned(&self.tpls, ENTITY, Some(&before), Some(&after))))
            }
            _ => {
                let i = self.rng.below(self.live.len());
                let (id, before) = self.live.swap_remove(i);
                let mut rec = json!({ "type": ty, "key": id, "headers": { "operation": "delete" } });
                if let Some(old) = self.old_value(&before, true) {
                    rec["old_value"] = old;
                }
                (rec.to_string(), Some(concerned(&self.tpls, ENTITY, Some(&before), None)))
            }
        }
    }
}

impl Writer {
    /// A probe row enters, leaves or moves between probe tuples, through null, unencodable
    /// and missing values, mostly with a full `old_value`.
    fn probe(&mut self) -> (String, Option<Vec<u64>>) {
        if self.probes.len() < 3 {
            let id = format!("p{}", self.probes.len());
            let row = json!({ "id": id, "tenant": PROBE_TENANTS[0], "status": "a", "rank": 100, "flag": true });
            self.probes.push(row.clone());
            let rec = json!({ "type": ENTITY, "key": id, "value": row, "headers": { "operation": "insert" } });
            return (rec.to_string(), Some(concerned(&self.tpls, ENTITY, None, Some(&row))));
        }
        let i = self.rng.below(self.probes.len());
        let before = self.probes[i].clone();
        let mut after = before.clone();
        let f = *self.rng.pick(&["tenant", "rank", "tenant", "rank", "status", "flag"]);
        let v = match self.rng.below(10) {
            0..=5 => match f {
                "tenant" => Some(json!(*self.rng.pick(&PROBE_TENANTS))),
                "rank" => Some(json!(self.rng.range(100, 105))),
                "status" => Some(json!(*self.rng.pick(&STATUSES))),
                _ => Some(json!(self.rng.chance(0.5))),
            },
            6 => Some(J::Null),
            7 => Some(json!(2.5)),
            8 => Some(if f == "tenant" { json!({ "o": 1 }) } else { json!("n/a") }),
            _ => None,
        };
        match v {
            Some(v) => after.as_object_mut().unwrap().insert(f.into(), v),
            None => after.as_object_mut().unwrap().remove(f),
        };
        self.probes[i] = after.clone();
        let id = before["id"].clone();
        let mut rec = json!({ "type": ENTITY, "key": id, "value": after, "headers": { "operation": "update" } });
        let old = if self.rng.chance(0.8) { Some(before.clone()) } else { self.old_value(&before, false) };
        if let Some(old) = old {
            rec["old_value"] = old;
        }
        (rec.to_string(), Some(concerned(&self.tpls, ENTITY, Some(&before), Some(&after))))
    }
}

fn touch_profile(rng: &mut Rng) -> String {
    let mut touch = Map::new();
    touch.insert("enabled".into(), json!(true));
    if rng.chance(0.85) {
        let degrade = rng.range(8, 40);
        touch.insert("lagDegradeFineTouchesAtSourceOffsets".into(), json!(degrade));
        touch.insert("lagRecoverFineTouchesAtSourceOffsets".into(), json!(rng.range(1, 5)));
    }
    if rng.chance(0.35) {
        touch.insert("fineTouchBudgetPerBatch".into(), json!(rng.range(1, 6)));
    }
    if rng.chance(0.3) {
        touch.insert("fineTokensPerSecond".into(), json!(rng.range(1, 40)));
        touch.insert("fineBurstTokens".into(), json!(rng.range(1, 20)));
    }
    if rng.chance(0.3) {
        touch.insert("onMissingBefore".into(), json!("skipBefore"));
    }
    if rng.chance(0.4) {
        // Hot interest that lapses within milliseconds of its last waiter: batches between a
        // chain's waits find no fine demand and run at template granularity (M4), and the next
        // wait comes back with a cursor from before them.
        touch.insert("memory".into(), json!({ "hotKeyTtlMs": rng.range(1, 30), "hotTemplateTtlMs": rng.range(1, 30) }));
    }
    json!({ "kind": "state-protocol", "touch": touch }).to_string()
}

struct Logged {
    chain: usize,
    from: i64,
    reply: WaitReply,
}

#[derive(Default, Debug)]
struct Tally {
    waits: u64,
    late_wakes_checked: u64,
    timeouts: u64,
    touched: u64,
    touched_with_cause: u64,
    refused: u64,
    template_key_replies: u64,
    template_key_timeouts: u64,
    table_key_replies_of_fine_waits: u64,
}

fn append(store: &Store, payloads: Vec<String>) -> Result<i64> {
    let req = AppendRequest {
        stream: STREAM.into(),
        payloads: payloads.into_iter().map(String::into_bytes).collect(),
        ..Default::default()
    };
    Ok(blocking(|r| store.append(req, r))?.first_offset)
}

fn run_seed(seed: u64, target_waits: u64) {
    let mut rng = Rng(seed);
    let store = Store::open(":memory:", StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream(STREAM.into(), Some("application/json".into()), None, r)).unwrap();
    let opts = EngineOptions {
        workers: 1 + rng.below(2),
        check_interval_ms: 20,
        max_batch_rows: *rng.pick(&[3, 7, 40, 500]),
        ..Default::default()
    };
    let max_batch_rows = opts.max_batch_rows;
    let engine = TouchEngine::open(store.clone(), opts).unwrap();
    engine.set_profile(STREAM, &parse(&touch_profile(&mut rng)).unwrap()).unwrap();
    let tpls = templates();
    let decl = |t: &Tpl| durable_touch::engine::templates::TemplateDecl {
        entity: ENTITY.into(),
        fields: t
            .fields
            .iter()
            .map(|f| durable_touch::engine::templates::FieldDecl { name: f.0.into(), encoding: f.2.into() })
            .collect(),
    };
    let (out, _) =
        engine.activate_templates(STREAM, &tpls[..EARLY].iter().map(decl).collect::<Vec<_>>(), None).unwrap();
    let mut ids: Vec<String> = out.activated.iter().map(|a| a.template_id.clone()).collect();
    ids.sort();
    let mut expected: Vec<String> = tpls[..EARLY].iter().map(|t| t.id.clone()).collect();
    expected.sort();
    assert_eq!(ids, expected, "the templates are active under the ids a client derives");

    let mut chains: Vec<Spec> = (0..CHAINS).map(|_| random_spec(&mut rng, &tpls[..EARLY])).collect();
    chains.extend((0..LATE_CHAINS).map(|_| random_spec(&mut rng, &tpls[EARLY..])));
    let late_decl = decl(&tpls[EARLY]);
    // The late template's activation: its `active_from_source_offset`, and a cursor taken
    // before it (what that cursor covers, and the cursor), as a client that declares
    // templates with its wait holds one.
    let (late_tx, late_rx) = mpsc::channel::<(i64, i64, String, i64)>();
    let done_waits = Arc::new(AtomicU64::new(0));
    let stop_writing = Arc::new(AtomicBool::new(false));

    // The writer: phases of bursts, trickles and pauses under changing touch configs.
    let writer = {
        let store = store.clone();
        let engine = engine.clone();
        let done_waits = done_waits.clone();
        let stop = stop_writing.clone();
        let mut late = Some((late_decl, late_tx));
        let mut w = Writer {
            rng: Rng(seed ^ 0x5eed),
            tpls: templates(),
            live: Vec::new(),
            next_id: 0,
            messy: 0.0,
            partial_old: 0.0,
            probes: Vec::new(),
            probing: false,
        };
        std::thread::spawn(move || {
            let mut truth = Truth::default();
            let mut records = 0u64;
            while done_waits.load(Ordering::Relaxed) < target_waits && !stop.load(Ordering::Relaxed) {
                if done_waits.load(Ordering::Relaxed) > target_waits / 3 {
                    if let Some((decl, tx)) = late.take() {
                        // A cursor, a burst, then the activation while its batches run.
                        let probe = WaitArgs::parse(&parse(r#"{"cursor":"now","keyIds":[1],"timeoutMs":0}"#).unwrap());
                        let before = blocking(|r| {
                            engine.wait(STREAM, probe.unwrap(), r);
                        })
                        .unwrap();
                        let batch: Vec<(String, Option<Vec<u64>>)> = (0..200).map(|_| w.record(false)).collect();
                        let first = append(&store, batch.iter().map(|b| b.0.clone()).collect()).unwrap();
                        truth.record(first, batch);
                        let (out, _) = engine.activate_templates(STREAM, &[decl], None).unwrap();
                        // What was flushed when the activation returned: flushes up to here came
                        // before the template existed and cannot have announced its keys.
                        let probe = WaitArgs::parse(&parse(r#"{"cursor":"now","keyIds":[1],"timeoutMs":0}"#).unwrap());
                        let flushed = blocking(|r| {
                            engine.wait(STREAM, probe.unwrap(), r);
                        })
                        .unwrap()
                        .cursor_through;
                        let id = out.activated[0].template_id.clone();
                        let from: i64 = blocking(|r| {
                            store.query(
                                move |c| {
                                    Ok(c.query_row(
                                        "SELECT active_from_source_offset FROM live_templates WHERE template_id=?1",
                                        [&id],
                                        |r| r.get(0),
                                    )?)
                                },
                                r,
                            )
                        })
                        .unwrap();
                        tx.send((from, before.cursor_through, before.cursor, flushed)).unwrap();
                        // Quiet, so that a later change does not wake a chain the burst's
                        // changes should have woken.
                        std::thread::sleep(Duration::from_millis(300));
                    }
                }
                if w.rng.chance(0.5) {
                    engine.set_profile(STREAM, &parse(&touch_profile(&mut w.rng)).unwrap()).unwrap();
                }
                // Half the phases are clean (their changes need no compensation touch, which
                // would wake everyone and hide a lost key); probe rows stay messy throughout.
                let clean = w.rng.chance(0.6);
                w.messy = if clean { 0.0 } else { *w.rng.pick(&[0.02, 0.05, 0.2]) };
                w.partial_old = if clean { 0.0 } else { *w.rng.pick(&[0.05, 0.2, 0.4]) };
                w.probing = !clean || w.rng.chance(0.4);
                for _ in 0..w.rng.range(10, 40) {
                    let n = match w.rng.below(10) {
                        0 => w.rng.range(40, 400) as usize,
                        1..=5 => 1,
                        6..=8 => w.rng.range(2, 4) as usize,
                        _ => {
                            std::thread::sleep(Duration::from_millis(w.rng.range(10, 60)));
                            continue;
                        }
                    };
                    let batch: Vec<(String, Option<Vec<u64>>)> = (0..n).map(|_| w.record(n < 5)).collect();
                    let first = append(&store, batch.iter().map(|b| b.0.clone()).collect()).unwrap();
                    truth.record(first, batch);
                    records += n as u64;
                    // After a burst, often a pause: the stream drains in its coarsened mode and
                    // waiters park again before the next change, which runs fine.
                    let pause = if n >= 40 && w.rng.chance(0.6) { w.rng.range(40, 120) } else { w.rng.range(1, 6) };
                    std::thread::sleep(Duration::from_millis(pause));
                }
            }
            (truth, records)
        })
    };

    // Mode transitions as `meta` sees them (the run must exercise them).
    let modes = {
        let engine = engine.clone();
        let stop = stop_writing.clone();
        std::thread::spawn(move || {
            let mut seen: HashMap<(&'static str, &'static str), u64> = HashMap::new();
            let mut boundaries = Vec::new();
            let mut last = "idle";
            while !stop.load(Ordering::Relaxed) {
                if let Ok(m) = blocking(|r| engine.meta(STREAM, false, 0.0, r)) {
                    boundaries.push(m.journal.bucket_max_source_offset_seq);
                    let mode = m.touch_mode.as_str();
                    if mode != last {
                        *seen.entry((last, mode)).or_default() += 1;
                        last = mode;
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            (seen, boundaries)
        })
    };
    // The waiters: each chain waits again from the cursor its last wait returned.
    let (tx, rx) = mpsc::channel::<(usize, Result<WaitReply>)>();
    let issue = |chain: usize, cursor: &str, timeout_ms: u64| {
        let args = WaitArgs::parse(&parse(&wait_body(&chains[chain], cursor, timeout_ms)).unwrap()).unwrap();
        let tx = tx.clone();
        engine.wait(STREAM, args, Box::new(move |r| drop(tx.send((chain, r)))));
    };
    // A first wait of timeout 0 from "now" gives each chain a cursor and what it covers.
    let start = |spec: &Spec| {
        let spec = Spec { form: Form::Keys, ..spec.clone() };
        let args = WaitArgs::parse(&parse(&wait_body(&spec, "now", 0)).unwrap()).unwrap();
        let r = blocking(|reply| {
            engine.wait(STREAM, args, reply);
        })
        .unwrap();
        (r.cursor_through, r.cursor)
    };
    let (mut from, mut cursors): (Vec<i64>, Vec<String>) = chains.iter().map(start).unzip();
    let mut wrng = Rng(seed ^ 0xa11);
    for (c, cursor) in cursors.iter().enumerate().take(CHAINS) {
        issue(c, cursor, wrng.range(10, 150));
    }
    let mut logged: Vec<Logged> = Vec::new();
    let mut tally = Tally::default();
    let mut retry: Vec<(Instant, usize)> = Vec::new();
    let mut outstanding = CHAINS;
    let mut late_since = None;
    let mut flushed_at_activation = i64::MAX;
    let mut draining_since: Option<Instant> = None;
    let started = Instant::now();
    while outstanding > 0 || !retry.is_empty() {
        let now = Instant::now();
        if draining_since.is_none() && writer.is_finished() {
            draining_since = Some(now);
        }
        // After the writer stops, chains keep waiting for 400 ms so the last changes are
        // flushed and seen, then no new wait starts.
        let issuing = draining_since.is_none_or(|t| now.duration_since(t) < Duration::from_millis(400));
        if let Ok((since, covered, cursor, flushed)) = late_rx.try_recv() {
            // The late template is active: its chains start from the cursor taken before.
            late_since = Some(since);
            flushed_at_activation = flushed;
            for c in CHAINS..chains.len() {
                (from[c], cursors[c]) = (covered, cursor.clone());
                issue(c, &cursors[c], wrng.range(10, 150));
                outstanding += 1;
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = retry.drain(..).partition(|(at, _)| *at <= now);
        retry = later;
        for (_, c) in due {
            if issuing {
                issue(c, &cursors[c], wrng.range(10, 150));
                outstanding += 1;
            }
        }
        let Ok((c, r)) = rx.recv_timeout(Duration::from_millis(5)) else { continue };
        outstanding -= 1;
        let refused = r.is_err();
        match r {
            Ok(reply) => {
                assert!(!reply.stale, "no journal is rebuilt in this run");
                tally.waits += 1;
                done_waits.fetch_add(1, Ordering::Relaxed);
                if reply.effective_wait_kind == WaitKind::TemplateKey {
                    tally.template_key_replies += 1;
                    tally.template_key_timeouts += u64::from(!reply.touched);
                }
                if reply.effective_wait_kind == WaitKind::TableKey && !chains[c].coarse {
                    tally.table_key_replies_of_fine_waits += 1;
                }
                let next = reply.cursor_through;
                cursors[c] = reply.cursor.clone();
                logged.push(Logged { chain: c, from: from[c], reply });
                from[c] = next;
            }
            Err(e) => {
                // An exact wait is refused outside fine mode; try again a little later.
                assert!(e.to_string().contains("wait.exact"), "unexpected wait error: {e}");
                tally.refused += 1;
            }
        }
        if issuing {
            if refused {
                retry.push((Instant::now() + Duration::from_millis(20), c));
            } else {
                issue(c, &cursors[c], wrng.range(10, 150));
                outstanding += 1;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(900), "the run did not finish");
    }
    stop_writing.store(true, Ordering::Relaxed);
    let (truth, records) = writer.join().unwrap();
    let (modes, mut boundaries) = modes.join().unwrap();
    for l in &logged {
        boundaries.push(l.reply.cursor_through);
        if l.reply.touched {
            boundaries.push(l.reply.bucket_max_source_offset_seq);
        }
    }
    boundaries.sort_unstable();
    boundaries.dedup();
    blocking(|r| engine.close(r)).unwrap();

    let since = late_since.expect("the late template was activated");
    for spec in &mut chains[CHAINS..] {
        spec.since = since;
    }
    let mut misses = Vec::new();
    let mut late = Vec::new();
    for l in &logged {
        let spec = &chains[l.chain];
        let cause = truth.concerning(spec, l.from, l.reply.cursor_through);
        if l.reply.touched {
            tally.touched += 1;
            tally.touched_with_cause += u64::from(cause.is_some());
            // A parked wait is woken by the first flush that holds a change concerning it:
            // no flush boundary may lie between that change and the waking bucket's. For the
            // late template, the first flush that can announce a change is one after its
            // activation returned.
            let hit = l.reply.bucket_max_source_offset_seq;
            if let (true, Some(c)) = (l.reply.parked, truth.concerning(spec, l.from, hit)) {
                tally.late_wakes_checked += 1;
                let first = if l.chain >= CHAINS { c.max(flushed_at_activation.saturating_add(1)) } else { c };
                let i = boundaries.partition_point(|&b| b < first);
                if boundaries.get(i).is_some_and(|&b| b < hit) {
                    late.push((l, c, boundaries[i]));
                }
            }
        } else {
            tally.timeouts += 1;
            if let Some(offset) = cause {
                misses.push((l, offset));
            }
        }
    }
    eprintln!(
        "oracle seed {seed:#x}: {records} records, max batch rows {max_batch_rows}, {:.1} s; {tally:?}",
        started.elapsed().as_secs_f64()
    );
    eprintln!("  mode transitions seen: {modes:?}");
    if !misses.is_empty() {
        for (l, offset) in misses.iter().take(8) {
            eprintln!(
                "MISSED: chain {:?}, waited over ({}, {}], kind {:?}; change at {offset}: {}",
                chains[l.chain], l.from, l.reply.cursor_through, l.reply.effective_wait_kind, truth.payloads[offset]
            );
        }
        panic!(
            "{} of {} timed-out waits missed a change that concerns them (seed {seed:#x})",
            misses.len(),
            tally.timeouts
        );
    }
    if !late.is_empty() {
        for (l, offset, flushed) in late.iter().take(8) {
            eprintln!(
                "LATE: chain {:?}, waited from {}, kind {:?}; change at {offset} flushed by {flushed}, woken by the \
                 bucket of {}: {}",
                chains[l.chain],
                l.from,
                l.reply.effective_wait_kind,
                l.reply.bucket_max_source_offset_seq,
                truth.payloads[offset]
            );
        }
        panic!(
            "{} parked waits were not woken by the flush of a change that concerns them (seed {seed:#x})",
            late.len()
        );
    }
    assert!(tally.waits >= target_waits, "only {} waits", tally.waits);
    assert!(tally.touched_with_cause > tally.waits / 20, "too few concerned waits to mean anything: {tally:?}");
    assert!(tally.template_key_replies > 0, "no wait ran in restricted mode: {tally:?}");
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn no_wait_misses_a_change_that_concerns_it() {
    let nightly = std::env::var("DT_NIGHTLY").is_ok_and(|v| v == "1");
    let waits = env("DT_ORACLE_WAITS").unwrap_or(if nightly { 240_000 } else { 40_000 });
    let seeds = env("DT_ORACLE_SEEDS").unwrap_or(if nightly { 8 } else { 4 });
    let base = env("DT_ORACLE_SEED").unwrap_or(0x2026_1203);
    for s in 0..seeds {
        run_seed(base.wrapping_add(s.wrapping_mul(0x9e37_79b9)), waits.div_ceil(seeds));
    }
}
