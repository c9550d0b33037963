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
//! Across restarts (`no_lost_invalidation_across_restarts`): the same runs on a SQLite file,
//! the writer appending through a store of its own (as a host does) and telling the engine,
//! which is restarted on the file a few times while the writer goes on: closed cleanly with
//! waits parked, or crashed with or without waits parked, and once as the late template's
//! activation returns ([`Restart`]). A crash is simulated in the process ([`Site::crash`]): the
//! journal's log is cut off at an instant, after which nothing reaches the files, the engine's
//! store closed just before, and the engine dropped without `close`. Each chain goes on from
//! the last cursor it received, on the next engine; no reply may be stale, and the checks
//! above hold for every wait, those whose cursor came from an engine before a restart
//! included. Each seed runs without restarts on the file too, for the share of conservative
//! wakes with and without. `a_crash_as_an_activation_returns_loses_none_of_its_touches` is
//! the crash as an activation returns, made certain.
//!
//! Size: `DT_ORACLE_WAITS` waits in all (default 40,000; `DT_NIGHTLY=1`: 240,000), over
//! `DT_ORACLE_SEEDS` seeds (default 4; nightly 8) from `DT_ORACLE_SEED`. Each of the two
//! losses issue 19 found (a template-key wait deaf to fine batches; a row entering a tuple
//! from a null field) shows in about half the seeds at the default size per seed, and in
//! every nightly run. Across restarts: half the seeds (at least one), each run twice with the
//! same waits per seed, with `DT_ORACLE_RESTARTS` restarts (default 6) and without.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant};

use durable_touch::durable::format::{decode_log, decode_snapshot};
use durable_touch::engine::keep::RestoreReport;
use durable_touch::engine::wait::{WaitArgs, WaitKind, WaitReply};
use durable_touch::engine::{EngineOptions, TouchEngine};
use durable_touch::journal::{format_cursor, WeakJournal};
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
    /// What the reply's cursor covers: its `cursor_through`, or for a wait `close` settled
    /// (which reads -1 there) what the snapshot of that cursor's generation covers.
    through: i64,
    reply: WaitReply,
    /// The cursor the wait sent, and whether it came from an engine before a restart.
    sent: String,
    crossed: bool,
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

impl Tally {
    /// Wakes without a change that concerns the wait, of all wakes.
    fn conservative_share(&self) -> f64 {
        (self.touched - self.touched_with_cause) as f64 / self.touched.max(1) as f64
    }
}

fn append(store: &Store, payloads: Vec<String>) -> Result<i64> {
    let req = AppendRequest {
        stream: STREAM.into(),
        payloads: payloads.into_iter().map(String::into_bytes).collect(),
        ..Default::default()
    };
    Ok(blocking(|r| store.append(req, r))?.first_offset)
}

/// How a run is set up.
#[derive(Clone, Copy, Debug)]
struct Setup {
    /// On a SQLite file in a temporary folder, where the writer appends through a store of its
    /// own and tells the engine (as a host whose appends the engine does not see does), and the
    /// engine has its store; else one in-memory store for both.
    file: bool,
    /// Engine restarts (with `file`), spread evenly over the run's waits.
    restarts: usize,
}

/// How the engine is restarted, on the same file, the writer appending throughout.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Restart {
    /// `close` with the chains' waits parked (it settles them), then its store's close.
    Clean,
    /// A crash ([`Site::crash`]) once every chain's wait came back, when the journal holds
    /// touches it has not flushed: they go with it, and the next engine processes their rows
    /// again.
    CrashIdle,
    /// A crash with the chains' waits parked. The crashed engine's journal answers them later;
    /// a reply whose cursor is past the generation the crash cut the log at is one the process
    /// never gave, and its chain resumes from the cursor it sent.
    CrashParked,
    /// One more crash, with waits parked: the process dies as the late template's activation
    /// returns (the writer cuts the log off then). The keys the activation touched for the rows
    /// processed before it, which the late chains' older cursors need, must survive it.
    CrashAfterActivation,
}

/// What the restarts of a run did.
#[derive(Default, Debug)]
struct Restarts {
    clean: u64,
    crash_idle: u64,
    crash_parked: u64,
    crash_after_activation: u64,
    /// Replies the engine gave after its restart began (settled by `close`, answered by the
    /// crashed journal, before the crash or at its instant); waits it refused then (its store
    /// closed) and waits it never answered or answered after its crash (all retried from the
    /// cursor they sent).
    old_replies: u64,
    refused_by_old: u64,
    unanswered: u64,
    /// Replies `close` settled once the journal was stopped, which say -1 for the last flushed
    /// offset (`bucket_max_source_offset_seq`, `cursor_through`) though their cursor covers the
    /// snapshot's: taken from the snapshot.
    closing_replies_at_minus_one: u64,
    /// What the closed or crashed engines refused waits with.
    old_errors: std::collections::BTreeSet<String>,
    /// Crashes with touches pending in the journal (lost with it), and their keys in all: the
    /// next engine processes their rows again.
    crashes_losing_touches: u64,
    touch_keys_lost: u64,
    /// Rows appended but not in the stored checkpoint when an engine went, in all: the next
    /// engine processes them (again).
    rows_after_checkpoint: i64,
    /// Restarts after which the stored checkpoint was past what the kept journal covers
    /// (`(stored, covered)`), which it never may be.
    checkpoint_ahead: Vec<(i64, i64)>,
    /// Replies that came after their wait was given up (its engine's journal was gone).
    discarded: u64,
    /// What the opens took up (`stats().restored`).
    kept: u64,
    refused: u64,
    replayed_flushes: u64,
    /// Time spent restarting (from the start of a restart to the new engine open), in ms.
    ms: f64,
}

/// The engine of the moment; the writer, the mode watcher and the waiters reach it through
/// the slot, which is empty while it restarts.
struct Live {
    engine: TouchEngine,
    /// Numbers the engines opened on the file, from 0.
    incarnation: u32,
}

type Slot = Arc<RwLock<Option<Live>>>;

fn with<R>(slot: &Slot, f: impl FnOnce(&Live) -> R) -> Option<R> {
    slot.read().unwrap().as_ref().map(f)
}

/// Where a run's engines live.
struct Site {
    /// The SQLite file (in `_dir`); `None` in memory.
    path: Option<String>,
    _dir: Option<tempfile::TempDir>,
    /// The writer's store, and the engine's (the same in memory).
    host: Store,
    store: Store,
    opts: EngineOptions,
    slot: Slot,
    incarnation: u32,
    cuts: Cuts,
}

impl Site {
    fn new(file: bool, opts: EngineOptions) -> Site {
        let (dir, path) = if file {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("oracle.sqlite").to_str().unwrap().to_string();
            (Some(dir), Some(path))
        } else {
            (None, None)
        };
        let host = Store::open(path.as_deref().unwrap_or(":memory:"), StoreOptions::default()).unwrap();
        blocking(|r| host.create_stream(STREAM.into(), Some("application/json".into()), None, r)).unwrap();
        let store = match &path {
            Some(p) => Store::open(p, StoreOptions::default()).unwrap(),
            None => host.clone(),
        };
        let engine = TouchEngine::open(store.clone(), opts.clone()).unwrap();
        let slot = Arc::new(RwLock::new(Some(Live { engine, incarnation: 0 })));
        Site { path, _dir: dir, host, store, opts, slot, incarnation: 0, cuts: Default::default() }
    }

    fn engine(&self) -> TouchEngine {
        with(&self.slot, |l| l.engine.clone()).expect("an engine runs")
    }

    /// Stops the engine as `kind` says: [`Restart::Clean`] closes it (and its store), the
    /// others crash it ([`Site::crash`]). An engine the writer cut off as the late template's
    /// activation returned died then, whatever was due: that crash ends.
    fn stop(&mut self, kind: Restart) -> Stopped {
        let live = self.slot.write().unwrap().take().expect("an engine runs");
        let cut = self.cuts.lock().unwrap().get(&live.incarnation).copied();
        match (kind, cut) {
            (Restart::Clean, None) => Stopped::Closed(self.close(live)),
            (_, Some(cut)) => Stopped::Crashed(Restart::CrashAfterActivation, self.crash(live, false, Some(cut))),
            _ => Stopped::Crashed(kind, self.crash(live, kind == Restart::CrashIdle, None)),
        }
    }

    /// A clean close; the cursor of the snapshot it kept and what that covers.
    fn close(&mut self, live: Live) -> Option<(String, i64)> {
        blocking(|r| live.engine.close(r)).unwrap();
        drop(live);
        blocking(|r| self.store.close(r)).unwrap();
        let folder = format!("{}-journals", self.path.as_ref()?);
        let snap = std::fs::read_dir(folder)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "snap"))?;
        let (_, image) = decode_snapshot(&std::fs::read(snap).ok()?).ok()?;
        Some((format_cursor(image.epoch, image.generation), image.last_flushed_source_offset))
    }

    /// A crash. Its instant is when the journal's log is cut off (under the journal's lock):
    /// nothing the engine does after it reaches the files, as nothing a killed process would
    /// do could. Before it, the engine's store is closed (no more row read, no checkpoint
    /// written); with `at_pending`, once the journal holds touches it has not flushed (within
    /// 500 ms), which go with it. Then the engine is dropped: its loop stops after the batch
    /// it runs, and its journal lives on while waits are parked on it, answering them (a reply
    /// whose cursor is past the generation of the cut is one the process never gave). The
    /// crash is over when the journal goes (and with the engine the lock on its folder).
    ///
    /// `cut`: the crash's instant came already ([`journal_cut`], which returned the generation
    /// and the pending keys given); the rest of the crash follows.
    fn crash(&mut self, live: Live, at_pending: bool, cut: Option<(u32, usize)>) -> Crashed {
        let journal = live.engine.journal(STREAM, false).unwrap().expect("chains waited");
        let weak: WeakJournal = journal.downgrade();
        let until = Instant::now() + Duration::from_millis(500);
        while cut.is_none() && at_pending && journal.meta().pending_keys == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_micros(100));
        }
        blocking(|r| self.store.close(r)).unwrap();
        let (generation, pending_keys) = cut.unwrap_or_else(|| journal_cut(&journal, &self.cuts, live.incarnation).0);
        drop(journal);
        drop(live);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut gone = true;
        while weak.upgrade().is_some() {
            if Instant::now() > deadline {
                gone = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Crashed { gone, pending_keys, generation }
    }

    /// With no engine up: what the kept journal covers and its last generation (its
    /// snapshot's, or its log's last flush's), the stored checkpoint and the stream's last
    /// offset.
    fn kept(&self) -> Kept {
        let folder = format!("{}-journals", self.path.as_ref().expect("a file"));
        let (mut covered, mut generation) = (-1, 0);
        for path in std::fs::read_dir(folder).unwrap().flatten().map(|e| e.path()) {
            match path.extension().and_then(|e| e.to_str()) {
                Some("snap") => {
                    let (_, image) = decode_snapshot(&std::fs::read(&path).unwrap()).unwrap();
                    covered = covered.max(image.covered_through);
                    generation = generation.max(image.generation);
                }
                Some("log") => {
                    let (_, frames) = decode_log(&std::fs::read(&path).unwrap()).unwrap();
                    for (record, through) in frames {
                        covered = covered.max(through);
                        generation = generation.max(record.generation);
                    }
                }
                _ => {}
            }
        }
        let (stored, last) = blocking(|r| {
            self.host.query(
                |c| {
                    Ok(c.query_row(
                        "SELECT (SELECT processed_through FROM stream_touch_state WHERE stream=?1), \
                         (SELECT next_offset - 1 FROM streams WHERE stream=?1)",
                        [STREAM],
                        |r| Ok((r.get::<_, Option<i64>>(0)?.unwrap_or(-1), r.get(1)?)),
                    )?)
                },
                r,
            )
        })
        .unwrap();
        Kept { covered, generation, stored, last }
    }

    /// A new engine on the file.
    fn reopen(&mut self) -> RestoreReport {
        let path = self.path.as_ref().expect("restarts need a file");
        self.store = Store::open(path, StoreOptions::default()).unwrap();
        let engine = TouchEngine::open(self.store.clone(), self.opts.clone()).unwrap();
        let restored = engine.stats().restored;
        self.incarnation += 1;
        *self.slot.write().unwrap() = Some(Live { engine, incarnation: self.incarnation });
        restored
    }

    fn finish(self) {
        let live = self.slot.write().unwrap().take().expect("an engine runs");
        blocking(|r| live.engine.close(r)).unwrap();
        drop(live);
        blocking(|r| self.store.close(r)).unwrap();
        if self.path.is_some() {
            blocking(|r| self.host.close(r)).unwrap();
        }
    }
}

/// A wait's reply: its chain, the incarnation of the engine it was sent to, the reply.
type Msg = (usize, u32, Result<WaitReply>);

fn send_wait(slot: &Slot, tx: &mpsc::Sender<Msg>, spec: &Spec, chain: usize, cursor: &str, timeout_ms: u64) {
    let args = WaitArgs::parse(&parse(&wait_body(spec, cursor, timeout_ms)).unwrap()).unwrap();
    let tx = tx.clone();
    with(slot, |l| {
        let incarnation = l.incarnation;
        l.engine.wait(STREAM, args, Box::new(move |r| drop(tx.send((chain, incarnation, r)))));
    })
    .expect("an engine runs");
}

/// Incarnation → the generation at which its journal's log was cut off (it crashed), and the
/// keys pending then.
type Cuts = Arc<std::sync::Mutex<HashMap<u32, (u32, usize)>>>;

/// A crash's instant: the journal's log is cut off (nothing reaches the files after it), and
/// the generation noted in `cuts` under the journal's lock, so that a reply read after it is
/// known to come after it. Returns that generation and the keys pending then, and what the
/// journal had flushed through.
fn journal_cut(journal: &durable_touch::journal::Journal, cuts: &Cuts, incarnation: u32) -> ((u32, usize), i64) {
    journal.with_state(|s| {
        drop(s.take_log());
        cuts.lock().unwrap().insert(incarnation, (s.generation(), s.pending_keys()));
        ((s.generation(), s.pending_keys()), s.last_flushed_source_offset())
    })
}

/// What [`Site::crash`] saw: whether the journal went (within 5 s), and its generation and
/// the keys it had pending when its log was cut off.
struct Crashed {
    gone: bool,
    pending_keys: usize,
    generation: u32,
}

/// How [`Site::stop`] stopped the engine: closed (with what [`Site::close`] returns), or
/// crashed (how, and what [`Site::crash`] saw).
enum Stopped {
    Closed(Option<(String, i64)>),
    Crashed(Restart, Crashed),
}

/// What [`Site::kept`] read.
struct Kept {
    covered: i64,
    generation: u32,
    stored: i64,
    last: i64,
}

/// What a run counted.
struct Outcome {
    tally: Tally,
    /// The waits whose cursor came from an engine before a restart (each chain's first after one).
    across: Tally,
    restarts: Restarts,
}

fn run(seed: u64, target_waits: u64, setup: Setup) -> Outcome {
    let mut rng = Rng(seed);
    let opts = EngineOptions {
        workers: 1 + rng.below(2),
        check_interval_ms: 20,
        max_batch_rows: *rng.pick(&[3, 7, 40, 500]),
        ..Default::default()
    };
    let max_batch_rows = opts.max_batch_rows;
    let mut site = Site::new(setup.file, opts);
    let slot = site.slot.clone();
    let engine = site.engine();
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
    drop(engine);
    let mut ids: Vec<String> = out.activated.iter().map(|a| a.template_id.clone()).collect();
    ids.sort();
    let mut expected: Vec<String> = tpls[..EARLY].iter().map(|t| t.id.clone()).collect();
    expected.sort();
    assert_eq!(ids, expected, "the templates are active under the ids a client derives");

    let mut chains: Vec<Spec> = (0..CHAINS).map(|_| random_spec(&mut rng, &tpls[..EARLY])).collect();
    chains.extend((0..LATE_CHAINS).map(|_| random_spec(&mut rng, &tpls[EARLY..])));
    let late_decl = decl(&tpls[EARLY]);
    // The late template's activation: its `active_from_source_offset`, and a cursor taken
    // before it (what that cursor covers, the cursor and its engine's incarnation), as a
    // client that declares templates with its wait holds one.
    // With restarts, the process dies as the activation returns: the crash's instant (its cut)
    // comes with them.
    type Late = (i64, i64, String, u32, i64, bool);
    let (late_tx, late_rx) = mpsc::channel::<Late>();
    let done_waits = Arc::new(AtomicU64::new(0));
    let stop_writing = Arc::new(AtomicBool::new(false));

    // The writer: phases of bursts, trickles and pauses under changing touch configs. It
    // appends whether an engine runs or not.
    let writer = {
        let store = site.host.clone();
        let slot = slot.clone();
        let notify = setup.file;
        let crash_at_activation = setup.restarts > 0;
        let cuts = site.cuts.clone();
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
                if done_waits.load(Ordering::Relaxed) > target_waits / 3 && late.is_some() {
                    // (The engine stays up for the activation; one restarting is waited for.)
                    let guard = loop {
                        let guard = slot.read().unwrap();
                        if guard.is_some() || stop.load(Ordering::Relaxed) {
                            break guard;
                        }
                        drop(guard);
                        std::thread::sleep(Duration::from_millis(1));
                    };
                    if let Some(live) = guard.as_ref() {
                        let engine = &live.engine;
                        let (decl, tx) = late.take().unwrap();
                        // A cursor, a burst, then the activation while its batches run.
                        let probe = WaitArgs::parse(&parse(r#"{"cursor":"now","keyIds":[1],"timeoutMs":0}"#).unwrap());
                        let before = blocking(|r| {
                            engine.wait(STREAM, probe.unwrap(), r);
                        })
                        .unwrap();
                        let batch: Vec<(String, Option<Vec<u64>>)> = (0..200).map(|_| w.record(false)).collect();
                        let first = append(&store, batch.iter().map(|b| b.0.clone()).collect()).unwrap();
                        truth.record(first, batch);
                        if notify {
                            engine.notify(STREAM);
                        }
                        let (out, _) = engine.activate_templates(STREAM, &[decl], None).unwrap();
                        // What was flushed when the activation returned: flushes up to here came
                        // before the template existed and cannot have announced its keys.
                        let (cut, flushed) = if crash_at_activation {
                            let journal = engine.journal(STREAM, false).unwrap().unwrap();
                            let (cut, flushed) = journal_cut(&journal, &cuts, live.incarnation);
                            (Some(cut), flushed)
                        } else {
                            let probe =
                                WaitArgs::parse(&parse(r#"{"cursor":"now","keyIds":[1],"timeoutMs":0}"#).unwrap());
                            let flushed = blocking(|r| {
                                engine.wait(STREAM, probe.unwrap(), r);
                            });
                            (None, flushed.unwrap().cursor_through)
                        };
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
                        tx.send((from, before.cursor_through, before.cursor, live.incarnation, flushed, cut.is_some()))
                            .unwrap();
                        drop(guard);
                        // Quiet, so that a later change does not wake a chain the burst's
                        // changes should have woken.
                        std::thread::sleep(Duration::from_millis(300));
                    }
                }
                if w.rng.chance(0.5) {
                    let profile = parse(&touch_profile(&mut w.rng)).unwrap();
                    with(&slot, |l| l.engine.set_profile(STREAM, &profile).unwrap());
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
                    if notify {
                        with(&slot, |l| l.engine.notify(STREAM));
                    }
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
        let slot = slot.clone();
        let stop = stop_writing.clone();
        let cuts = site.cuts.clone();
        std::thread::spawn(move || {
            let mut seen: HashMap<(&'static str, &'static str), u64> = HashMap::new();
            let mut boundaries = Vec::new();
            let mut last = "idle";
            while !stop.load(Ordering::Relaxed) {
                let meta = with(&slot, |l| (l.incarnation, blocking(|r| l.engine.meta(STREAM, false, 0.0, r))));
                if let Some((incarnation, Ok(m))) = meta {
                    // Not what an engine flushed after its crash (no client ever saw that).
                    if !cuts.lock().unwrap().contains_key(&incarnation) {
                        boundaries.push(m.journal.bucket_max_source_offset_seq);
                    }
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
    // The waiters: each chain waits again from the cursor its last wait returned, on whichever
    // engine runs then.
    let (tx, rx) = mpsc::channel::<Msg>();
    // A first wait of timeout 0 from "now" gives each chain a cursor and what it covers.
    let start = |spec: &Spec| {
        let spec = Spec { form: Form::Keys, ..spec.clone() };
        let args = WaitArgs::parse(&parse(&wait_body(&spec, "now", 0)).unwrap()).unwrap();
        let engine = site.engine();
        let r = blocking(|reply| {
            engine.wait(STREAM, args, reply);
        })
        .unwrap();
        (r.cursor_through, r.cursor)
    };
    let (mut from, mut cursors): (Vec<i64>, Vec<String>) = chains.iter().map(start).unzip();
    // The incarnation each chain's cursor came from, and that of the engine its outstanding
    // wait was sent to.
    let mut cursor_inc = vec![0u32; chains.len()];
    let mut pending: Vec<Option<u32>> = vec![None; chains.len()];
    let mut outstanding = 0usize;
    let mut wrng = Rng(seed ^ 0xa11);
    macro_rules! issue {
        ($c:expr) => {{
            let c: usize = $c;
            debug_assert!(pending[c].is_none());
            pending[c] = Some(site.incarnation);
            outstanding += 1;
            send_wait(&slot, &tx, &chains[c], c, &cursors[c], wrng.range(10, 150));
        }};
    }
    for c in 0..CHAINS {
        issue!(c);
    }
    // The restarts: when, and how (each kind in turn, from a seed-chosen one).
    let kinds = [Restart::Clean, Restart::CrashIdle, Restart::CrashParked];
    let first_kind = Rng(seed ^ 0x7e57).below(kinds.len());
    let schedule: Vec<(u64, Restart)> = (0..setup.restarts)
        .map(|k| (target_waits * (k as u64 + 1) / (setup.restarts as u64 + 1), kinds[(first_kind + k) % kinds.len()]))
        .collect();
    let mut next_restart = 0;
    let mut quiescing = false;
    // The writer cut the engine off as the late template's activation returned: its crash is due.
    let mut crash_after_activation = false;
    let mut restarts = Restarts::default();
    let mut kind_of: Vec<Option<Restart>> = vec![None];
    // Cursor → what it covers, for the replies `close` settled.
    let mut snapshot_covers: HashMap<String, i64> = HashMap::new();
    let cuts = site.cuts.clone();
    let mut inbox: std::collections::VecDeque<Msg> = Default::default();
    let mut stale: Vec<String> = Vec::new();

    let mut logged: Vec<Logged> = Vec::new();
    let mut tally = Tally::default();
    let mut retry: Vec<(Instant, usize)> = Vec::new();
    let mut late_since = None;
    let mut flushed_at_activation = i64::MAX;
    let mut draining_since: Option<Instant> = None;
    let started = Instant::now();
    while outstanding > 0 || !retry.is_empty() {
        // A restart due: a crash of an idle engine waits until every chain's wait is back.
        let due = if crash_after_activation {
            Some(Restart::CrashAfterActivation)
        } else if quiescing {
            (outstanding == 0).then_some(Restart::CrashIdle)
        } else if schedule.get(next_restart).is_some_and(|s| done_waits.load(Ordering::Relaxed) >= s.0) {
            next_restart += 1;
            match schedule[next_restart - 1].1 {
                Restart::CrashIdle => {
                    quiescing = true;
                    None
                }
                kind => Some(kind),
            }
        } else {
            None
        };
        if let Some(due) = due {
            quiescing &= due != Restart::CrashIdle;
            crash_after_activation = false;
            let began = Instant::now();
            let old = site.incarnation;
            let mut crashed_at = None;
            let kind = match site.stop(due) {
                Stopped::Closed(snapshot) => {
                    restarts.clean += 1;
                    if let Some((cursor, through)) = snapshot {
                        snapshot_covers.insert(cursor, through);
                    }
                    Restart::Clean
                }
                Stopped::Crashed(kind, crashed) => {
                    match kind {
                        Restart::CrashIdle => restarts.crash_idle += 1,
                        Restart::CrashParked => restarts.crash_parked += 1,
                        _ => restarts.crash_after_activation += 1,
                    }
                    // Else the next engine would find the journal folder locked and keep nothing.
                    assert!(
                        crashed.gone,
                        "seed {seed:#x}: the engine dropped at a crash did not go within 5 s (its loop still runs)"
                    );
                    crashed_at = Some(crashed);
                    // The replies the crashed journal gave before it went are in (those after
                    // the crash are told apart below); a wait it did not answer never will be.
                    inbox.extend(rx.try_iter());
                    for (c, p) in pending.iter_mut().enumerate() {
                        if *p == Some(old) && !inbox.iter().any(|m| m.0 == c && m.1 == old) {
                            *p = None;
                            outstanding -= 1;
                            restarts.unanswered += 1;
                            retry.push((Instant::now(), c));
                        }
                    }
                    kind
                }
            };
            let kept = site.kept();
            // (After a crash at the activation, the engine ran on between the cut and its store's
            // close: it may have written a checkpoint from flushes no file has.)
            if kept.stored > kept.covered && kind != Restart::CrashAfterActivation {
                restarts.checkpoint_ahead.push((kept.stored, kept.covered));
            }
            restarts.rows_after_checkpoint += kept.last - kept.stored;
            if let Some(c) = crashed_at.take() {
                assert_eq!(kept.generation, c.generation, "nothing reached the files after the crash");
                // Touches pending at the crash: lost with the process.
                restarts.crashes_losing_touches += u64::from(c.pending_keys > 0);
                restarts.touch_keys_lost += c.pending_keys as u64;
            }
            let report = site.reopen();
            kind_of.push(Some(kind));
            restarts.kept += report.kept;
            restarts.refused += report.refused;
            restarts.replayed_flushes += report.replayed_flushes;
            restarts.ms += began.elapsed().as_secs_f64() * 1000.0;
        }
        let now = Instant::now();
        if draining_since.is_none() && writer.is_finished() {
            draining_since = Some(now);
        }
        // After the writer stops, chains keep waiting for 400 ms so the last changes are
        // flushed and seen, then no new wait starts.
        let issuing = !quiescing && draining_since.is_none_or(|t| now.duration_since(t) < Duration::from_millis(400));
        if let Ok((since, covered_then, cursor, inc, flushed, cut)) = late_rx.try_recv() {
            // The late template is active: its chains start from the cursor taken before.
            late_since = Some(since);
            flushed_at_activation = flushed;
            for c in CHAINS..chains.len() {
                (from[c], cursors[c], cursor_inc[c]) = (covered_then, cursor.clone(), inc);
                retry.push((now, c));
            }
            // (Unless a restart took the engine since, which was that crash.)
            if cut && inc == site.incarnation {
                crash_after_activation = true;
                continue;
            }
        }
        if !quiescing {
            let (due, later): (Vec<_>, Vec<_>) = retry.drain(..).partition(|(at, _)| *at <= now);
            retry = later;
            for (_, c) in due {
                if issuing {
                    issue!(c);
                }
            }
        }
        let msg = match inbox.pop_front() {
            Some(m) => m,
            None => match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(m) => m,
                Err(_) => continue,
            },
        };
        let (c, inc, r) = msg;
        if pending[c] != Some(inc) {
            // Given up when its crashed engine's journal went.
            restarts.discarded += 1;
            continue;
        }
        pending[c] = None;
        outstanding -= 1;
        let mut again_in = Duration::ZERO;
        let after_crash = |reply: &WaitReply| {
            let generation = reply.cursor.rsplit(':').next().and_then(|g| g.parse::<u32>().ok());
            cuts.lock().unwrap().get(&inc).is_some_and(|&(cut, _)| generation.is_none_or(|g| g > cut))
        };
        match r {
            // Given by the crashed engine after its crash: never received.
            Ok(reply) if after_crash(&reply) => restarts.unanswered += 1,
            Ok(reply) => {
                restarts.old_replies += u64::from(inc < site.incarnation);
                let through = match snapshot_covers.get(&reply.cursor) {
                    Some(&through) if reply.cursor_through < 0 => {
                        restarts.closing_replies_at_minus_one += 1;
                        through
                    }
                    _ => reply.cursor_through,
                };
                if reply.stale {
                    stale.push(format!(
                        "chain {c} {:?}: cursor {} (from engine #{}, covering through {}) sent to engine #{inc} \
                         (opened after a {:?} restart); it answered {reply:?}",
                        chains[c], cursors[c], cursor_inc[c], from[c], kind_of[inc as usize]
                    ));
                }
                tally.waits += 1;
                done_waits.fetch_add(1, Ordering::Relaxed);
                if reply.effective_wait_kind == WaitKind::TemplateKey {
                    tally.template_key_replies += 1;
                    tally.template_key_timeouts += u64::from(!reply.touched);
                }
                if reply.effective_wait_kind == WaitKind::TableKey && !chains[c].coarse {
                    tally.table_key_replies_of_fine_waits += 1;
                }
                let sent = std::mem::replace(&mut cursors[c], reply.cursor.clone());
                let crossed = cursor_inc[c] < inc;
                cursor_inc[c] = inc;
                logged.push(Logged { chain: c, from: from[c], through, reply, sent, crossed });
                from[c] = through;
            }
            // A wait sent to an engine that restarted since may be refused by it (its store is
            // closed): the client tries again from the same cursor.
            Err(e) if inc < site.incarnation && !e.to_string().contains("wait.exact") => {
                restarts.refused_by_old += 1;
                restarts.old_errors.insert(e.to_string());
            }
            Err(e) => {
                // An exact wait is refused outside fine mode; try again a little later.
                assert!(e.to_string().contains("wait.exact"), "unexpected wait error: {e}");
                tally.refused += 1;
                again_in = Duration::from_millis(20);
            }
        }
        if issuing && again_in.is_zero() {
            issue!(c);
        } else if issuing || quiescing {
            retry.push((Instant::now() + again_in, c));
        }
        assert!(started.elapsed() < Duration::from_secs(900), "the run did not finish");
    }
    stop_writing.store(true, Ordering::Relaxed);
    let (truth, records) = writer.join().unwrap();
    let (modes, mut boundaries) = modes.join().unwrap();
    for l in &logged {
        boundaries.push(l.through);
        if l.reply.touched {
            boundaries.push(l.reply.bucket_max_source_offset_seq);
        }
    }
    boundaries.sort_unstable();
    boundaries.dedup();
    site.finish();

    let since = late_since.expect("the late template was activated");
    for spec in &mut chains[CHAINS..] {
        spec.since = since;
    }
    let mut misses = Vec::new();
    let mut late = Vec::new();
    let mut across = Tally::default();
    for l in &logged {
        let spec = &chains[l.chain];
        let cause = truth.concerning(spec, l.from, l.through);
        if l.crossed {
            across.waits += 1;
            across.touched += u64::from(l.reply.touched);
            across.touched_with_cause += u64::from(l.reply.touched && cause.is_some());
            across.timeouts += u64::from(!l.reply.touched);
        }
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
        "oracle seed {seed:#x} ({setup:?}): {records} records, max batch rows {max_batch_rows}, {:.1} s; {tally:?}",
        started.elapsed().as_secs_f64()
    );
    eprintln!("  mode transitions seen: {modes:?}");
    if setup.restarts > 0 {
        eprintln!("  restarts: {restarts:?}; waits from a cursor of an engine before: {across:?}");
    }
    if !stale.is_empty() {
        for s in stale.iter().take(8) {
            eprintln!("STALE: {s}");
        }
        panic!("{} replies were stale (seed {seed:#x}, {setup:?}, {restarts:?})", stale.len());
    }
    if !misses.is_empty() {
        for (l, offset) in misses.iter().take(8) {
            eprintln!(
                "MISSED: chain {:?}, waited from cursor {} over ({}, {}], kind {:?}, cursor from before a restart: \
                 {}; change at {offset}: {}",
                chains[l.chain],
                l.sent,
                l.from,
                l.through,
                l.reply.effective_wait_kind,
                l.crossed,
                truth.payloads[offset]
            );
        }
        panic!(
            "{} of {} timed-out waits missed a change that concerns them (seed {seed:#x}, {setup:?})",
            misses.len(),
            tally.timeouts
        );
    }
    if !late.is_empty() {
        for (l, offset, flushed) in late.iter().take(8) {
            eprintln!(
                "LATE: chain {:?}, waited from {} (cursor {}, from before a restart: {}), kind {:?}; change at \
                 {offset} flushed by {flushed}, woken by the bucket of {}: {}",
                chains[l.chain],
                l.from,
                l.sent,
                l.crossed,
                l.reply.effective_wait_kind,
                l.reply.bucket_max_source_offset_seq,
                truth.payloads[offset]
            );
        }
        panic!(
            "{} parked waits were not woken by the flush of a change that concerns them (seed {seed:#x}, {setup:?})",
            late.len()
        );
    }
    assert!(tally.waits >= target_waits, "only {} waits", tally.waits);
    assert!(tally.touched_with_cause > tally.waits / 20, "too few concerned waits to mean anything: {tally:?}");
    assert!(tally.template_key_replies > 0, "no wait ran in restricted mode: {tally:?}");
    if setup.restarts > 0 {
        assert_eq!(next_restart, setup.restarts, "every restart ran");
        assert_eq!(restarts.refused, 0, "{restarts:?}");
        assert!(
            restarts.checkpoint_ahead.is_empty(),
            "the stored checkpoint ran ahead of the kept journal: {restarts:?}"
        );
        assert!(across.waits > 0, "no wait crossed a restart: {restarts:?}");
    }
    Outcome { tally, across, restarts }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// (waits per seed, seeds, first seed) from `DT_ORACLE_WAITS`, `DT_ORACLE_SEEDS`, `DT_ORACLE_SEED`.
fn size() -> (u64, u64, u64) {
    let nightly = std::env::var("DT_NIGHTLY").is_ok_and(|v| v == "1");
    let waits = env("DT_ORACLE_WAITS").unwrap_or(if nightly { 240_000 } else { 40_000 });
    let seeds = env("DT_ORACLE_SEEDS").unwrap_or(if nightly { 8 } else { 4 }).max(1);
    let base = env("DT_ORACLE_SEED").unwrap_or(0x2026_1203);
    (waits.div_ceil(seeds), seeds, base)
}

fn seed_at(base: u64, s: u64) -> u64 {
    base.wrapping_add(s.wrapping_mul(0x9e37_79b9))
}

#[test]
fn no_wait_misses_a_change_that_concerns_it() {
    let (per_seed, seeds, base) = size();
    for s in 0..seeds {
        run(seed_at(base, s), per_seed, Setup { file: false, restarts: 0 });
    }
}

/// The same promise across restarts of the engine on its file, clean and crashed: each chain
/// resumes from the last cursor it got, and no reply is stale. Half the seeds (at least one),
/// each run twice on a file with the same waits per seed: without restarts and with
/// `DT_ORACLE_RESTARTS` of them (default 6), for the share of conservative wakes with and
/// without.
#[test]
fn no_lost_invalidation_across_restarts() {
    let (per_seed, seeds, base) = size();
    let restarts = env("DT_ORACLE_RESTARTS").unwrap_or(6) as usize;
    let mut shares = Vec::new();
    let share = |v: &[(u64, u64)]| {
        let (touched, with_cause) = v.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        (100.0 * (touched - with_cause) as f64 / touched.max(1) as f64, touched)
    };
    for s in 0..seeds.div_ceil(2) {
        let seed = seed_at(base, s);
        let without = run(seed, per_seed, Setup { file: true, restarts: 0 });
        let restarted = run(seed, per_seed, Setup { file: true, restarts });
        shares.push((seed, without.tally, restarted.tally, restarted.across, restarted.restarts));
    }
    for (seed, without, with, across, r) in &shares {
        eprintln!(
            "conservative wakes, seed {seed:#x}: without restarts {:.1}% of {} wakes; with {} restarts ({} clean, {} \
             crashed idle, {} crashed with waits parked, {} crashed after the activation; {:.0} ms in all) {:.1}% \
             of {} wakes, and {:.1}% of the {} wakes of waits from a cursor of an engine before",
            100.0 * without.conservative_share(),
            without.touched,
            r.clean + r.crash_idle + r.crash_parked + r.crash_after_activation,
            r.clean,
            r.crash_idle,
            r.crash_parked,
            r.crash_after_activation,
            r.ms,
            100.0 * with.conservative_share(),
            with.touched,
            100.0 * across.conservative_share(),
            across.touched,
        );
    }
    let sum = |f: fn(&(u64, Tally, Tally, Tally, Restarts)) -> &Tally| {
        share(&shares.iter().map(f).map(|t| (t.touched, t.touched_with_cause)).collect::<Vec<_>>())
    };
    let (without, with, across) = (sum(|s| &s.1), sum(|s| &s.2), sum(|s| &s.3));
    eprintln!(
        "conservative wakes over {} seeds: without restarts {:.1}% of {} wakes, with {:.1}% of {}, and {:.1}% of the \
         {} wakes of waits from a cursor of an engine before",
        shares.len(),
        without.0,
        without.1,
        with.0,
        with.1,
        across.0,
        across.1
    );
}

/// The crash [`Restart::CrashAfterActivation`] brings in a randomized run, made certain: rows
/// of a tuple are processed and flushed before their template is active; the activation (from
/// the stored checkpoint, held back until a full tick) touches the template's key for them, and
/// the process dies as it returns. A client that took its cursor before those rows and waits on
/// the tuple with the template must be woken by the next engine.
#[test]
fn a_crash_as_an_activation_returns_loses_none_of_its_touches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.sqlite").to_str().unwrap().to_string();
    // No full tick but the first: the stored checkpoint stays where it is.
    let opts = EngineOptions { check_interval_ms: 60_000, ..Default::default() };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    blocking(|r| store.create_stream(STREAM.into(), Some("application/json".into()), None, r)).unwrap();
    let engine = TouchEngine::open(store.clone(), opts.clone()).unwrap();
    engine.set_profile(STREAM, &parse(r#"{"kind":"state-protocol","touch":{"enabled":true}}"#).unwrap()).unwrap();
    let settled = |e: &TouchEngine| blocking(|r| e.meta(STREAM, true, 5_000.0, r)).unwrap().journal;
    let insert = |id: u32, tenant: &str| {
        let value = json!({ "id": format!("r{id}"), "tenant": tenant });
        json!({ "type": ENTITY, "key": format!("r{id}"), "value": value, "headers": { "operation": "insert" } })
            .to_string()
    };
    append(&store, vec![insert(0, "t9")]).unwrap();
    let cursor = settled(&engine).cursor;
    append(&store, (1..=20).map(|i| insert(i, "t1")).collect()).unwrap();
    let flushed = settled(&engine).bucket_max_source_offset_seq;
    let tpl = &templates()[0];
    let decl = durable_touch::engine::templates::TemplateDecl {
        entity: ENTITY.into(),
        fields: vec![durable_touch::engine::templates::FieldDecl { name: "tenant".into(), encoding: "string".into() }],
    };
    engine.activate_templates(STREAM, &[decl], None).unwrap();
    let journal = engine.journal(STREAM, false).unwrap().unwrap();
    let ((generation, pending), _) = journal_cut(&journal, &Cuts::default(), 0);
    let gone = journal.downgrade();
    drop(journal);
    blocking(|r| store.close(r)).unwrap();
    drop(engine);
    while gone.upgrade().is_some() {
        std::thread::sleep(Duration::from_millis(1));
    }

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let engine = TouchEngine::open(store.clone(), opts).unwrap();
    let key = hex16(watch_key(tpl.bits, &[b"t1".to_vec()]));
    let body = format!(r#"{{"cursor":"{cursor}","keys":["{key}"],"templateIdsUsed":["{}"],"timeoutMs":500}}"#, tpl.id);
    let reply = blocking(|r| {
        engine.wait(STREAM, WaitArgs::parse(&parse(&body).unwrap()).unwrap(), r);
    })
    .unwrap();
    blocking(|r| engine.close(r)).unwrap();
    blocking(|r| store.close(r)).unwrap();
    assert!(
        reply.touched && !reply.stale,
        "rows 1..=20 (flushed through {flushed} before the activation) entered tenant t1 after cursor {cursor}; the \
         process died as the activation returned, at generation {generation} with {pending} keys pending; the next \
         engine answered {reply:?}"
    );
}
