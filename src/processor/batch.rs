//! The batch algorithm (P3–P12): rows + request + active templates → touches and stats.
//!
//! A faithful port of the reference worker's `handleProcess`, including its JS number
//! semantics (budgets and windows are f64: a NaN budget never runs out, a NaN window never
//! coalesces), its `Map` insertion orders (a re-opened coalescing entry keeps its place) and
//! its stable output sort. Only the data structures differ: keys are u64/u32 instead of
//! strings, rows are read without building a JSON tree (see [`crate::changes`]), and a batch
//! without a fine budget whose touches are mostly new keys coalesces at the end, by sorting,
//! instead of a `Map` lookup per touch (see `Coalescing`).

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::tuples::{row_id, Known, RowTuples, TupleMemory, TupleView};
use super::{
    Granularity, Plan, ProcessRequest, ProcessResult, ProcessStats, Row, RowBuffer, RowRef, TemplateRow, Touch,
    TouchKind, MAX_TEMPLATE_FIELDS,
};
use crate::changes::{
    decode_payload, fields_equal, is_projected_field_value, read_record, read_record_raw, Entries, Field, Image, Op,
    Record, RowChange,
};
use crate::error::{Error, Result};
use crate::jscompat::json::{number_value, Scalar};
use crate::jscompat::string::{is_blank, trim, JsString};
use crate::keys::{self, encode_template_arg, ArgValue, Encoding, KeyHasher};
use crate::spec::OnMissingBefore;

/// An active template after P3's checks.
struct ActiveTemplate {
    index: u32,
    bits: u64,
    template_key_id: u32,
    fields: Vec<JsString>,
    encodings: Vec<Encoding>,
    active_from: i64,
}

/// Per-entity state: its output index, table key id, templates and cold-template count.
struct EntityInfo {
    index: u32,
    table_key_id: u32,
    templates: Vec<usize>,
    cold: f64,
}

type Args<'a> = SmallVec<[Cow<'a, [u8]>; 3]>;

enum Slot<'m> {
    Routing(std::collections::hash_map::VacantEntry<'m, u64, usize>),
    Id(std::collections::hash_map::VacantEntry<'m, u32, usize>),
}

/// Keys of one kind for one template, deduplicated by key id; a repeated id keeps its place
/// and takes the new routing key (a JS `Map.set`).
#[derive(Default)]
struct KeySet(SmallVec<[(u32, u64); 4]>);

impl KeySet {
    fn set(&mut self, key: u64) {
        let id = keys::key_id(key);
        match self.0.iter_mut().find(|(k, _)| *k == id) {
            Some(slot) => slot.1 = key,
            None => self.0.push((id, key)),
        }
    }

    fn set_opt(&mut self, key: Option<u64>) {
        if let Some(k) = key {
            self.set(k);
        }
    }
}

struct Batch<'p> {
    plan: &'p Plan,
    templates: Vec<ActiveTemplate>,
    template_ids: Vec<String>,
    /// Entity name -> index into `infos` (and `entity_names`).
    entities: FxHashMap<Vec<u8>, u32>,
    infos: Vec<EntityInfo>,
    entity_names: Vec<JsString>,
    co: Coalescer,
    coalescing: Coalescing,
    switches: Switches,
    /// Touches queued while online.
    queued_online: usize,
    remaining: Option<f64>,
    exhausted: bool,
    stats: ProcessStats,
    hasher: KeyHasher,
    /// Complete mode with a memory: the tuples rows were last seen in, and this batch's.
    tuples: Option<TupleView<'p>>,
}

/// Runs one batch over `rows` (ascending offsets; rows outside the request's range are
/// ignored, as a range read would not return them) with the stream's active `templates` in
/// the order the store returns them (B23).
pub fn process_rows(request: &ProcessRequest, rows: &[Row], templates: &[TemplateRow]) -> Result<ProcessResult> {
    process_row_refs(request, rows.len(), rows.iter().map(Row::as_ref), templates)
}

/// [`process_rows`] over borrowed rows (a [`RowBuffer`](super::RowBuffer)'s, say); `count` is
/// how many there are (for reserving).
pub fn process_row_refs<'r>(
    request: &ProcessRequest,
    count: usize,
    rows: impl IntoIterator<Item = RowRef<'r>>,
    templates: &[TemplateRow],
) -> Result<ProcessResult> {
    process_with(request, count, rows, templates, None)
}

/// [`process_row_refs`] with other [`Switches`] than the default (tests compare them).
pub(crate) fn process_with<'r>(
    request: &ProcessRequest,
    count: usize,
    rows: impl IntoIterator<Item = RowRef<'r>>,
    templates: &[TemplateRow],
    switches: Option<Switches>,
) -> Result<ProcessResult> {
    run(request, count, templates, switches, None, |take| {
        for row in rows {
            if !take(row)? {
                break;
            }
        }
        Ok(())
    })
}

/// [`process_row_refs`] in complete mode with the stream's [`TupleMemory`]: a change whose
/// record does not name the tuple a row leaves gets that tuple's keys when the memory knows
/// it. The result's `tuples` says what the batch saw, for the caller to apply to the memory
/// if it keeps the batch.
pub fn process_row_refs_tracked<'r>(
    request: &ProcessRequest,
    count: usize,
    rows: impl IntoIterator<Item = RowRef<'r>>,
    templates: &[TemplateRow],
    memory: &TupleMemory,
) -> Result<ProcessResult> {
    run(request, count, templates, None, Some(memory), |take| {
        for row in rows {
            if !take(row)? {
                break;
            }
        }
        Ok(())
    })
}

/// [`process_row_refs`] over rows that arrive in chunks (each chunk's rows ascend after the
/// last chunk's). A chunk that is an error ends the batch with that error, even when the rows
/// before it already ended the batch (P4's limits) or failed it: every chunk is received, so
/// an error in the input always wins, as when the rows are all read before the batch starts.
pub fn process_chunks(
    request: &ProcessRequest,
    count: usize,
    chunks: impl IntoIterator<Item = Result<RowBuffer>>,
    templates: &[TemplateRow],
) -> Result<ProcessResult> {
    let mut chunks = chunks.into_iter();
    let mut input_error = None;
    let result = run(request, count, templates, None, None, |take| {
        for chunk in chunks.by_ref() {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    input_error = Some(e);
                    return Ok(());
                }
            };
            for row in chunk.iter() {
                if !take(row)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    });
    // The rest of the input, read for its first error only.
    if input_error.is_none() {
        input_error = chunks.find_map(|chunk| chunk.err());
    }
    match input_error {
        Some(e) => Err(e),
        None => result,
    }
}

/// One batch: `feed` hands the rows in order to `take`, until `take` returns `Ok(false)` (the
/// batch is full) or an error; then the batch finishes.
fn run(
    request: &ProcessRequest,
    count: usize,
    templates: &[TemplateRow],
    switches: Option<Switches>,
    memory: Option<&TupleMemory>,
    feed: impl FnOnce(&mut dyn FnMut(RowRef<'_>) -> Result<bool>) -> Result<()>,
) -> Result<ProcessResult> {
    let plan = request.plan()?;
    let mut batch = Batch::new(&plan, if plan.emit_fine { templates } else { &[] });
    if plan.complete {
        batch.tuples = memory.map(|memory| TupleView { memory, changes: Default::default() });
    }
    if let Some(s) = switches {
        batch.switches = Switches { defer_at: s.defer_at.max(1), record_limit: s.record_limit.max(1), ..s };
    }
    batch.reserve(count);
    let mut processed_through = request.from_offset - 1;
    let mut last_offset: Option<i64> = None;
    // Template-key touches of hotTemplatesOnly mode, per entity in first-seen order:
    // (entity index, offset, ts) of the highest offset (P5, P10).
    let mut template_only: Vec<(u32, i64, f64)> = Vec::new();
    let capture_images = plan.emit_fine && !batch.templates.is_empty();

    feed(&mut |row: RowRef<'_>| {
        if let Some(prev) = last_offset {
            if row.offset <= prev {
                return Err(Error::invalid("rows must have strictly ascending offsets"));
            }
        }
        last_offset = Some(row.offset);
        if row.offset < request.from_offset || row.offset > request.to_offset {
            return Ok(true);
        }
        // P4.
        let len = row.payload.len() as f64;
        if !plan.limits.admits(batch.stats.rows_read, batch.stats.bytes_read, len) {
            return Ok(false);
        }
        batch.stats.rows_read += 1.0;
        batch.stats.bytes_read += len;
        processed_through = row.offset;
        let ts = row.ts_ms;
        if !ts.is_finite() {
            return Ok(true);
        }
        if ts > batch.stats.max_source_ts_ms {
            batch.stats.max_source_ts_ms = ts;
        }
        let text;
        let record = match read_record_raw(row.payload, capture_images) {
            Some(record) => record,
            None => {
                text = decode_payload(row.payload);
                read_record(&text, capture_images)
            }
        };
        let change = match record {
            Record::Change(change) => change,
            Record::NoChange if plan.complete && is_control_record(&decode_payload(row.payload)) => {
                batch.stats.control_records += 1.0;
                if let Some(t) = &mut batch.tuples {
                    t.changes.clear();
                }
                return Ok(true);
            }
            _ => return Ok(true),
        };
        batch.stats.changes += 1.0;
        batch.change(&change, row.offset, ts, &mut template_only)?;
        Ok(true)
    })?;

    // P10.
    if plan.emit_fine && plan.hot_templates_only && !batch.exhausted && !template_only.is_empty() {
        for (entity, offset, ts) in std::mem::take(&mut template_only) {
            if batch.exhausted {
                break;
            }
            let name = batch.entity_names[entity as usize].as_bytes().to_vec();
            let tpls =
                batch.entities.get(&name).map(|&e| batch.infos[e as usize].templates.clone()).unwrap_or_default();
            for t in tpls {
                if batch.exhausted {
                    break;
                }
                let tpl = &batch.templates[t];
                if offset < tpl.active_from {
                    continue;
                }
                let touch = Touch {
                    key_id: tpl.template_key_id,
                    routing_key: None,
                    watermark: offset,
                    entity,
                    kind: TouchKind::Template,
                    template: Some(tpl.index),
                };
                batch.queue(touch, ts);
            }
        }
    }
    Ok(batch.finish(request.stream.clone(), processed_through))
}

impl<'p> Batch<'p> {
    fn new(plan: &'p Plan, rows: &[TemplateRow]) -> Batch<'p> {
        let mut b = Batch {
            plan,
            templates: Vec::new(),
            template_ids: Vec::new(),
            entities: FxHashMap::default(),
            infos: Vec::new(),
            entity_names: Vec::new(),
            co: COALESCER.with(|c| std::mem::take(&mut *c.borrow_mut())),
            coalescing: Coalescing::Online,
            switches: Switches {
                defer_at: if plan.budget.is_none() { DEFER_AT } else { usize::MAX },
                max_repeats: MAX_REPEATS,
                record_limit: RECORD_LIMIT,
            },
            queued_online: 0,
            remaining: plan.budget,
            exhausted: plan.budget.is_some_and(|b| b <= 0.0),
            stats: ProcessStats::default(),
            hasher: KeyHasher::default(),
            tuples: None,
        };
        // P3.
        for row in rows {
            if !super::is_lower_hex16(&row.template_id) || is_blank(row.entity.as_bytes()) {
                continue;
            }
            if row.fields.len() != row.encodings.len()
                || row.fields.is_empty()
                || row.fields.len() > MAX_TEMPLATE_FIELDS
            {
                continue;
            }
            let Some(encodings) = row.encodings.iter().map(|e| Encoding::parse(e)).collect::<Option<Vec<_>>>() else {
                continue;
            };
            let entity = row.entity.as_bytes();
            if let Some(hot) = &plan.hot_ids {
                if !hot.contains(&row.template_id) {
                    b.entity(entity).cold += 1.0;
                    continue;
                }
            }
            let bits = keys::template_bits(&row.template_id).unwrap_or(0);
            let index = b.template_ids.len() as u32;
            b.template_ids.push(row.template_id.clone());
            b.templates.push(ActiveTemplate {
                index,
                bits,
                template_key_id: keys::key_id(keys::template_key(bits)),
                fields: row.fields.clone(),
                encodings,
                active_from: row.active_from_source_offset,
            });
            let t = b.templates.len() - 1;
            b.entity(entity).templates.push(t);
        }
        b
    }

    /// Room for the touches of `rows` rows (about one per template per row, plus tables).
    fn reserve(&mut self, rows: usize) {
        let per_row = if self.templates.is_empty() { 0 } else { 8 };
        let expected = (rows * per_row).min(1 << 20);
        self.co.pending.reserve(expected);
        self.co.by_routing.reserve(expected.min(self.switches.defer_at.saturating_mul(4)));
        self.co.flushed.reserve(expected / 4);
    }

    fn entity(&mut self, name: &[u8]) -> &mut EntityInfo {
        let slot = self.entity_slot(name);
        &mut self.infos[slot]
    }

    /// The index of an entity's [`EntityInfo`], created on first sight.
    fn entity_slot(&mut self, name: &[u8]) -> usize {
        if let Some(&i) = self.entities.get(name) {
            return i as usize;
        }
        let index = self.entity_names.len() as u32;
        self.entity_names.push(JsString::from_wtf8(name.to_vec()));
        self.infos.push(EntityInfo {
            index,
            table_key_id: keys::key_id(keys::table_key(name)),
            templates: Vec::new(),
            cold: 0.0,
        });
        self.entities.insert(name.to_vec(), index);
        index as usize
    }

    /// P8 + P9: queue a touch, coalescing by routing key (or key id) within its kind's window
    /// ([`Plan::window_ms`]) of the entry's first row, and charging new fine entries to the
    /// budget.
    fn queue(&mut self, touch: Touch, ts: f64) {
        if self.coalescing == Coalescing::AtFinish {
            // No budget, so nothing to charge.
            debug_assert!(self.plan.budget.is_none());
            self.co.pending.push(Pending { touch, window_start: ts });
            if self.co.pending.len() >= self.switches.record_limit {
                self.go_online();
            }
            return;
        }
        self.queued_online += 1;
        self.queue_online(touch, ts);
        let entries = self.co.pending.len();
        if entries >= self.switches.defer_at {
            if self.queued_online < entries.saturating_mul(self.switches.max_repeats) {
                self.defer();
            } else {
                self.switches.defer_at = self.switches.defer_at.saturating_mul(2);
            }
        }
    }

    /// Online → [`Coalescing::AtFinish`]: the entries so far become the first records, each
    /// entry's closed touches (with a NaN window start, which no later touch falls within,
    /// so they come out as they are) before its open one (with its real start), which is
    /// where an entry's touches are in queue order.
    #[cold]
    fn defer(&mut self) {
        debug_assert!(self.plan.budget.is_none());
        let co = &mut self.co;
        self.coalescing = Coalescing::AtFinish;
        // In place, so that `pending` keeps the room `reserve` made.
        co.pending.splice(0..0, co.flushed.drain(..).map(|touch| Pending { touch, window_start: f64::NAN }));
        co.by_routing.clear();
        co.by_id.clear();
    }

    /// [`Coalescing::AtFinish`] → online, for good: queueing the records again, online, gives
    /// the entries an online run would have (a NaN-started record is closed by the next
    /// record of its entry, as it was).
    #[cold]
    fn go_online(&mut self) {
        self.coalescing = Coalescing::Online;
        self.switches.defer_at = usize::MAX;
        let recorded = std::mem::take(&mut self.co.pending);
        for p in &recorded {
            self.queue_online(p.touch, p.window_start);
        }
    }

    fn queue_online(&mut self, touch: Touch, ts: f64) {
        let window = self.plan.window_ms(touch.kind);
        let co = &mut self.co;
        let next = co.pending.len();
        // One probe: find the entry, or reserve its slot (dropped again if the budget says no).
        let (prev, slot) = match touch.routing_key {
            Some(r) => match co.by_routing.entry(r) {
                std::collections::hash_map::Entry::Occupied(e) => (Some(*e.get()), None),
                std::collections::hash_map::Entry::Vacant(e) => (None, Some(Slot::Routing(e))),
            },
            None => match co.by_id.entry(touch.key_id) {
                std::collections::hash_map::Entry::Occupied(e) => (Some(*e.get()), None),
                std::collections::hash_map::Entry::Vacant(e) => (None, Some(Slot::Id(e))),
            },
        };
        if touch.kind != TouchKind::Table && prev.is_none() && self.plan.budget.is_some() {
            if !self.exhausted {
                let remaining = self.remaining.unwrap_or(0.0);
                if remaining <= 0.0 {
                    self.exhausted = true;
                    self.stats.fine_touches_suppressed_due_to_budget = true;
                    self.stats.fine_touches_dropped_due_to_budget += 1.0;
                    return;
                }
                self.remaining = Some(remaining - 1.0);
            } else {
                self.stats.fine_touches_suppressed_due_to_budget = true;
                self.stats.fine_touches_dropped_due_to_budget += 1.0;
                return;
            }
        }
        match prev {
            None => {
                match slot {
                    Some(Slot::Routing(e)) => {
                        e.insert(next);
                    }
                    Some(Slot::Id(e)) => {
                        e.insert(next);
                    }
                    None => {}
                }
                co.pending.push(Pending { touch, window_start: ts });
            }
            Some(i) => {
                let p = &mut co.pending[i];
                if ts - p.window_start < window {
                    p.touch.watermark = touch.watermark;
                } else {
                    co.flushed.push(p.touch);
                    *p = Pending { touch, window_start: ts };
                }
            }
        }
    }

    /// P5–P7 for one change.
    fn change(
        &mut self,
        ch: &RowChange<'_>,
        offset: i64,
        ts: f64,
        template_only: &mut Vec<(u32, i64, f64)>,
    ) -> Result<()> {
        let plan = self.plan;
        let mut slot = self.entity_slot(&ch.entity[..]);
        let info = &self.infos[slot];
        let (mut entity, table_key_id, mut cold) = (info.index, info.table_key_id, info.cold);
        let mut has_templates = !info.templates.is_empty();
        self.queue(
            Touch {
                key_id: table_key_id,
                routing_key: None,
                watermark: offset,
                entity,
                kind: TouchKind::Table,
                template: None,
            },
            ts,
        );
        // Complete mode, B19: templates are declared with trimmed entities, so a change whose
        // `type` has surrounding spaces is matched (and table-touched) as the trimmed entity too.
        let trimmed = trim(&ch.entity[..]);
        if plan.complete && trimmed.len() != ch.entity.len() {
            slot = self.entity_slot(trimmed);
            let info = &self.infos[slot];
            (entity, cold, has_templates) = (info.index, info.cold, !info.templates.is_empty());
            let key_id = info.table_key_id;
            self.queue(
                Touch { key_id, routing_key: None, watermark: offset, entity, kind: TouchKind::Table, template: None },
                ts,
            );
        }
        if !plan.emit_fine || self.exhausted || !has_templates || plan.hot_templates_only {
            // The change's tuples are not computed: whatever the memory knew of the row is stale.
            self.forget_row(entity, ch);
        }
        if !plan.emit_fine || self.exhausted {
            return Ok(());
        }
        if plan.hot_ids.is_some() {
            self.stats.fine_touches_skipped_cold_template += cold;
        }
        if !has_templates {
            return Ok(());
        }
        if plan.hot_templates_only {
            match template_only.iter_mut().find(|(e, _, _)| *e == entity) {
                Some(slot) => {
                    if offset > slot.1 {
                        *slot = (entity, offset, ts);
                    }
                }
                None => template_only.push((entity, offset, ts)),
            }
            return Ok(());
        }
        let tpls = std::mem::take(&mut self.infos[slot].templates);
        let result = self.templates_for_change(ch, &tpls, entity, offset, ts);
        self.infos[slot].templates = tpls;
        result
    }

    /// Complete mode with a memory: what the memory knew of the change's row no longer holds.
    fn forget_row(&mut self, entity: u32, ch: &RowChange<'_>) {
        if let Some(view) = &mut self.tuples {
            let row = row_id(self.entity_names[entity as usize].as_bytes(), &ch.key);
            view.changes.set(row, None);
        }
    }

    fn templates_for_change<'a>(
        &mut self,
        ch: &RowChange<'a>,
        tpls: &[usize],
        entity: u32,
        offset: i64,
        ts: f64,
    ) -> Result<()> {
        // The changed fields of a same-tuple update, computed once for all templates (P7).
        let mut changed: Option<Vec<Cow<'a, [u8]>>> = None;
        // Complete mode with a memory: the row, and its tuples after this change (all of them
        // known only if every template's keys were computed).
        let row = self.tuples.is_some().then(|| row_id(self.entity_names[entity as usize].as_bytes(), &ch.key));
        let mut after: RowTuples = RowTuples::new();
        let mut all_computed = true;
        for &t in tpls {
            if self.exhausted {
                all_computed = false;
                break;
            }
            let tpl = &self.templates[t];
            if offset < tpl.active_from {
                continue;
            }
            let (tpl_index, template_key_id) = (tpl.index, tpl.template_key_id);
            let template_touch = |key_id: u32, routing_key: Option<u64>| Touch {
                key_id,
                routing_key,
                watermark: offset,
                entity,
                kind: TouchKind::Template,
                template: Some(tpl_index),
            };
            if self.plan.granularity == Granularity::Template {
                all_computed = false;
                self.queue(template_touch(template_key_id, None), ts);
                if self.exhausted {
                    break;
                }
                continue;
            }
            let bits = tpl.bits;
            let remembered = match (&self.tuples, row) {
                (Some(view), Some(row)) => view.known(row, bits),
                _ => None,
            };
            let mut watch = KeySet::default();
            let mut membership = KeySet::default();
            let mut projected = KeySet::default();
            let keyed =
                self.keys_for_template(ch, t, remembered, &mut watch, &mut membership, &mut projected, &mut changed)?;
            if let Some(known) = keyed.after_known {
                after.push((bits, known));
            }
            if self.plan.complete && !keyed.covers(ch.op) {
                // B5: the change concerns tuples its images do not name (an image is missing,
                // lacks a field, or holds a null or unencodable value there); the template key
                // reaches every waiter of this template (the engine adds the catch-all key).
                self.stats.uncovered_changes += 1.0;
                self.queue(template_touch(template_key_id, None), ts);
                if self.exhausted {
                    break;
                }
            }
            for set in [&watch, &membership, &projected] {
                for &(id, key) in set.0.iter() {
                    self.queue(template_touch(id, Some(key)), ts);
                    if self.exhausted {
                        break;
                    }
                }
            }
        }
        if let (Some(view), Some(row)) = (&mut self.tuples, row) {
            let known = all_computed && !self.exhausted && ch.op != Op::Delete;
            view.changes.set(row, known.then_some(after));
        }
        Ok(())
    }

    /// P6: the watch, membership and projected-field keys one template derives from a change;
    /// returns which images had args for the template. Complete mode: `remembered` is what the
    /// row's last change left it as (the tuple memory), used when the record does not name the
    /// tuple the row leaves.
    #[allow(clippy::too_many_arguments)]
    fn keys_for_template<'a>(
        &mut self,
        ch: &RowChange<'a>,
        t: usize,
        remembered: Option<Known>,
        watch: &mut KeySet,
        membership: &mut KeySet,
        projected: &mut KeySet,
        changed: &mut Option<Vec<Cow<'a, [u8]>>>,
    ) -> Result<Keyed> {
        let tpl = &self.templates[t];
        let h = &mut self.hasher;
        let after_args = compute_args(&ch.after, tpl);
        let before_args = compute_args(&ch.before, tpl);
        let after_keys = after_args.as_ref().map(|a| h.watch_and_membership(tpl.bits, a));
        let before_keys = before_args.as_ref().map(|a| h.watch_and_membership(tpl.bits, a));
        let (watch_after, member_after) = (after_keys.map(|k| k.0), after_keys.map(|k| k.1));
        let complete = self.plan.complete;
        let mut keyed = Keyed {
            before: Tuple::of(&ch.before, tpl, before_args.is_some(), complete),
            after: Tuple::of(&ch.after, tpl, after_args.is_some(), complete),
            after_known: match (after_keys, Tuple::of(&ch.after, tpl, after_args.is_some(), complete)) {
                (Some((w, m)), _) => Some(Known::Keys { watch: w, membership: m }),
                (None, Tuple::None) => Some(Known::NoTuple),
                _ => None,
            },
        };
        // The record does not name the tuple the row leaves; the memory may (not when the
        // stream demands old_value: that error is the stream's configuration).
        let mut before_keys = before_keys;
        let mut from_memory = false;
        if keyed.before == Tuple::Unknown && self.plan.on_missing_before != OnMissingBefore::Error {
            match remembered {
                Some(Known::Keys { watch, membership }) => {
                    (before_keys, keyed.before, from_memory) = (Some((watch, membership)), Tuple::Args, true);
                }
                Some(Known::NoTuple) => keyed.before = Tuple::None,
                None => {}
            }
        }
        let (watch_before, member_before) = (before_keys.map(|k| k.0), before_keys.map(|k| k.1));
        match ch.op {
            Op::Insert => {
                watch.set_opt(watch_after);
                membership.set_opt(member_after);
            }
            Op::Delete => {
                watch.set_opt(watch_before);
                membership.set_opt(member_before);
            }
            Op::Update => {
                if let Some(wb) = watch_before {
                    watch.set(wb);
                    watch.set_opt(watch_after);
                    match (member_before, member_after) {
                        (Some(mb), Some(ma)) => {
                            if mb != ma {
                                membership.set(mb);
                                membership.set(ma);
                            } else if watch_after == Some(wb) {
                                // Same tuple: one projected key per changed field (P7).
                                if let Some(args) = &after_args {
                                    if from_memory {
                                        // The fields' old values are not known: every field.
                                        for (name, _) in ch.after.own_entries() {
                                            if !tpl.fields.iter().any(|f| f.as_bytes() == &*name) {
                                                projected.set(h.projected(tpl.bits, &name, args));
                                            }
                                        }
                                    } else {
                                        let changed = changed.get_or_insert_with(|| {
                                            changed_projected_field_names(&ch.before, &ch.after, self.plan.complete)
                                        });
                                        for name in changed.iter() {
                                            if !tpl.fields.iter().any(|f| f.as_bytes() == &**name) {
                                                projected.set(h.projected(tpl.bits, name, args));
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        (mb, ma) => {
                            membership.set_opt(mb);
                            membership.set_opt(ma);
                        }
                    }
                } else {
                    match self.plan.on_missing_before {
                        OnMissingBefore::Error => {
                            let entity = JsString::from_wtf8(ch.entity.to_vec());
                            let id = &self.template_ids[tpl.index as usize];
                            return Err(Error::Processing(if matches!(ch.before, Image::Absent) {
                                format!("missing old_value for update (entity={entity}, templateId={id})")
                            } else {
                                format!(
                                    "old_value missing required fields for update (entity={entity}, templateId={id})"
                                )
                            }));
                        }
                        OnMissingBefore::SkipBefore => {
                            watch.set_opt(watch_after);
                            membership.set_opt(member_after);
                            if let Some(args) = &after_args {
                                for (name, value) in ch.after.own_entries() {
                                    if tpl.fields.iter().any(|f| f.as_bytes() == &*name) {
                                        continue;
                                    }
                                    if is_projected_field_value(Field::Value(value)) {
                                        projected.set(h.projected(tpl.bits, &name, args));
                                    }
                                }
                            }
                        }
                        // Complete mode: a row that was in no tuple enters the after one.
                        OnMissingBefore::Coarse if keyed.before == Tuple::None => {
                            watch.set_opt(watch_after);
                            membership.set_opt(member_after);
                        }
                        OnMissingBefore::Coarse => {}
                    }
                }
            }
        }
        Ok(keyed)
    }

    fn finish(mut self, stream: String, processed_through: i64) -> ProcessResult {
        let co = &mut self.co;
        let touches = match self.coalescing {
            Coalescing::Online => co.online_output(),
            Coalescing::AtFinish => co.coalesce_at_finish(self.plan),
        };
        let table_touches = touches.iter().filter(|t| t.kind == TouchKind::Table).count();
        let mut co = std::mem::take(&mut self.co);
        co.clear();
        COALESCER.with(|c| *c.borrow_mut() = co);
        let mut stats = self.stats;
        stats.touches_emitted = touches.len() as f64;
        stats.table_touches_emitted = table_touches as f64;
        stats.template_touches_emitted = stats.touches_emitted - stats.table_touches_emitted;
        ProcessResult {
            stream,
            processed_through,
            touches,
            entities: self.entity_names,
            template_ids: self.template_ids,
            stats,
            tuples: self.tuples.map(|view| view.changes),
        }
    }
}

fn is_structured(f: Field<'_>) -> bool {
    matches!(f, Field::Value(Scalar::Object | Scalar::Array))
}

/// What an image says of a row's tuple for one template (P6).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tuple {
    /// It yielded args: the row is in that tuple.
    Args,
    /// Complete mode: a plain object with every template field, one of them null. A client
    /// cannot encode a null arg (K13), so no waiter watches a tuple with a null member: the
    /// row is in no tuple at all.
    None,
    /// Missing, not an object, lacking a template field, or holding a value the template's
    /// encoding refuses: the tuple cannot be told, and a waiter may watch it (a client's args
    /// are strings; it may watch `"2.5"` or `"n/a"` on an int64 field).
    Unknown,
}

impl Tuple {
    fn of(image: &Image<'_>, tpl: &ActiveTemplate, has_args: bool, complete: bool) -> Tuple {
        if has_args {
            return Tuple::Args;
        }
        if !complete {
            return Tuple::Unknown;
        }
        let mut fields = tpl.fields.iter().map(|f| image.get(f.as_bytes()));
        let present = image.is_object() && fields.clone().all(|f| matches!(f, Some(Field::Value(_))));
        if present && fields.any(|f| matches!(f, Some(Field::Value(Scalar::Null)))) {
            Tuple::None
        } else {
            Tuple::Unknown
        }
    }
}

/// What a change's images (or the tuple memory) say of its tuples for one template.
#[derive(Clone, Copy)]
struct Keyed {
    before: Tuple,
    after: Tuple,
    /// The row's tuple after the change, for the tuple memory (`None`: cannot be told).
    after_known: Option<Known>,
}

impl Keyed {
    /// Complete mode: whether the keys derived name every tuple the change concerns: each
    /// image the operation needs (insert: after; delete: before; update: both) names its
    /// tuple, or names none.
    fn covers(self, op: Op) -> bool {
        let told = |t: Tuple| t != Tuple::Unknown;
        match op {
            Op::Insert => told(self.after),
            Op::Delete => told(self.before),
            Op::Update => told(self.before) && told(self.after),
        }
    }
}

/// Complete mode: whether a payload that is not a change is a State Protocol control record.
fn is_control_record(text: &str) -> bool {
    let Ok(v) = crate::jscompat::json::parse(text) else { return false };
    let control =
        v.as_object().and_then(|o| o.get("headers")).and_then(|h| h.as_object()).and_then(|h| h.get("control"));
    matches!(control.and_then(|c| c.as_str_bytes()), Some(b"reset" | b"snapshot-start" | b"snapshot-end"))
}

/// The template's args from a plain-object image (P6): each field encoded with K13; any
/// null makes the whole image have no args.
fn compute_args<'a>(image: &Image<'a>, tpl: &ActiveTemplate) -> Option<Args<'a>> {
    if !image.is_object() {
        return None;
    }
    let mut args = Args::new();
    for (name, enc) in tpl.fields.iter().zip(&tpl.encodings) {
        let field = image.get(name.as_bytes())?;
        args.push(encode_field(field, *enc)?);
    }
    Some(args)
}

fn encode_field<'a>(field: Field<'a>, enc: Encoding) -> Option<Cow<'a, [u8]>> {
    let value = match field {
        Field::Undefined => return None,
        Field::Value(v) => v,
    };
    match value {
        Scalar::String(s) if !s.escaped => encode_template_arg(ArgValue::String(s.raw), enc),
        Scalar::String(s) => {
            let decoded = s.decode();
            encode_template_arg(ArgValue::String(&decoded), enc).map(|c| Cow::Owned(c.into_owned()))
        }
        Scalar::Null => None,
        Scalar::Bool(b) => encode_template_arg(ArgValue::Bool(b), enc).map(|c| Cow::Owned(c.into_owned())),
        Scalar::Number(n) => {
            encode_template_arg(ArgValue::Number(number_value(n)), enc).map(|c| Cow::Owned(c.into_owned()))
        }
        Scalar::Object | Scalar::Array => None,
    }
}

/// `changedProjectedFieldNames` (P7) before the template's own fields are left out: own keys
/// of before, then of after, without duplicates, whose values are both eligible and differ.
/// Leaving a template's fields out afterwards keeps the order, so one list serves every
/// template of the change.
///
/// With `complete` (B6), a field holding an object or an array on either side counts as
/// changed: its content is not compared, so it may fire without a change, but never stays
/// silent when it did change.
fn changed_projected_field_names<'a>(before: &Image<'a>, after: &Image<'a>, complete: bool) -> Vec<Cow<'a, [u8]>> {
    let (before, after) = (before.own_entries(), after.own_entries());
    // `image[name]` from an image's own entries (names are unique there, values the last).
    let field = |entries: &Entries<'a>, name: &[u8]| -> Field<'a> {
        entries.iter().find(|(n, _)| **n == *name).map_or(Field::Undefined, |(_, v)| Field::Value(*v))
    };
    let changed = |b: Field<'a>, a: Field<'a>| -> bool {
        if complete && (is_structured(b) || is_structured(a)) {
            return true;
        }
        is_projected_field_value(b) && is_projected_field_value(a) && !fields_equal(b, a)
    };
    let mut names: Vec<Cow<'a, [u8]>> = Vec::new();
    for (name, b) in &before {
        if changed(Field::Value(*b), field(&after, name)) {
            names.push(name.clone());
        }
    }
    for (name, a) in &after {
        if field(&before, name) == Field::Undefined && changed(Field::Undefined, Field::Value(*a)) {
            names.push(name.clone());
        }
    }
    names
}

mod coalescer;
use coalescer::*;

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod complete_tests;

#[cfg(test)]
mod coalescing_tests;
