//! `processRows(rows, request, templates)`: the touch processor for hosts that own their
//! SQLite. Conversion only: the request is read into [`ProcessRequest`] (the JS-value rules of
//! P1 — `!== false`, `=== "template"`, `??` — are applied while reading), the work runs on
//! the processor pool ([`crate::processor::pool`]) and the result is built on the JS thread.

use std::cell::RefCell;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use super::napi::helpers::{self, Helper};
use super::napi::{unknown, Js, Out, Port, RawValue, Ticket};
use crate::error::{Error, Result};
use crate::jscompat::json::Value;
use crate::jscompat::string::JsString;
use crate::processor::packed::PackedResult;
use crate::processor::{
    pool, Granularity, Mode, ProcessRequest, ProcessResult, RowBuffer, TemplateRow, TouchKind, TouchSettings,
    MAX_TEMPLATE_FIELDS,
};

thread_local! {
    /// One completion port per JS thread (main thread or worker) for the free functions.
    static PORT: RefCell<Option<Port>> = const { RefCell::new(None) };
}

fn port(env: &Env) -> napi::Result<Port> {
    PORT.with(|p| {
        let mut p = p.borrow_mut();
        if let Some(port) = p.as_ref() {
            return Ok(port.clone());
        }
        let port = Port::new(env)?;
        *p = Some(port.clone());
        Ok(port)
    })
}

/// An offset: a bigint, or a number holding a safe integer.
fn offset(v: Js, what: &str) -> Result<i64> {
    if v.type_of() == sys::ValueType::napi_number {
        return v.safe_integer(what);
    }
    v.bigint(what)
}

fn opt_number(obj: &Js, key: &str) -> Result<f64> {
    match obj.get(key)? {
        None => Ok(f64::NAN),
        Some(v) => v.number(&format!("request.{key}")),
    }
}

/// `String(v ?? "")`.
fn js_text(v: Option<Js>, what: &str) -> Result<JsString> {
    match v.map(|v| v.to_value(what)).transpose()?.flatten() {
        None | Some(Value::Null) | Some(Value::Undefined) => Ok(JsString::default()),
        Some(v) => v.to_js_string().ok_or_else(|| Error::invalid(format!("{what} cannot be read as a string"))),
    }
}

pub(crate) fn parse_request(request: Js) -> Result<ProcessRequest> {
    let r = request.object("request")?;
    let stream =
        r.get("stream")?.ok_or_else(|| Error::invalid("request.stream is required"))?.string("request.stream")?;
    let from = offset(
        r.get("fromOffset")?.ok_or_else(|| Error::invalid("request.fromOffset is required"))?,
        "request.fromOffset",
    )?;
    let to =
        offset(r.get("toOffset")?.ok_or_else(|| Error::invalid("request.toOffset is required"))?, "request.toOffset")?;
    if from < 0 {
        return Err(Error::invalid("request.fromOffset must be >= 0"));
    }
    let profile =
        r.get("profile")?.map(|p| p.to_value("request.profile")).transpose()?.flatten().unwrap_or(Value::Undefined);
    let touch = TouchSettings::from_profile(&profile)?;
    let mut req = ProcessRequest::new(stream, from, to, touch);
    req.max_rows = opt_number(&r, "maxRows")?;
    req.max_bytes = opt_number(&r, "maxBytes")?;
    req.emit_fine_touches = !matches!(r.get("emitFineTouches")?, Some(v) if v.type_of() == sys::ValueType::napi_boolean && !v.boolean("request.emitFineTouches")?);
    req.fine_touch_budget = match r.opt("fineTouchBudget")? {
        None => None,
        Some(v) => Some(v.to_value("request.fineTouchBudget")?.map_or(f64::NAN, |v| v.to_number())),
    };
    let exactly = |key: &str, want: &str| -> Result<bool> {
        Ok(match r.get(key)? {
            Some(v) if v.type_of() == sys::ValueType::napi_string => v.string(key)? == want,
            _ => false,
        })
    };
    if exactly("fineGranularity", "template")? {
        req.fine_granularity = Granularity::Template;
    }
    if exactly("processingMode", "hotTemplatesOnly")? {
        req.processing_mode = Mode::HotTemplatesOnly;
    }
    req.filter_hot_templates = matches!(r.get("filterHotTemplates")?, Some(v) if v.type_of() == sys::ValueType::napi_boolean && v.boolean("request.filterHotTemplates")?);
    if req.filter_hot_templates {
        if let Some(ids) = r.opt("hotTemplateIds")? {
            // No cap: the processor takes any number of hot ids (other values are skipped).
            for id in ids.items("request.hotTemplateIds")? {
                let id = id?;
                if id.type_of() == sys::ValueType::napi_string {
                    req.hot_template_ids.push(id.string("request.hotTemplateIds[]")?);
                }
            }
        }
    }
    Ok(req)
}

/// How a batch result carries its touches: `touches` objects (the reference's shape, the
/// default) or `packed` typed arrays ([`packed_result_js`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Output {
    #[default]
    Objects,
    Packed,
}

/// `request.output`: absent, null, `"objects"` or `"packed"`; anything else is rejected (the
/// field is ours, so a typo should not silently fall back to objects).
pub(crate) fn parse_output(request: &Js) -> Result<Output> {
    let r = request.object("request")?;
    match r.opt("output")? {
        None => Ok(Output::Objects),
        Some(v) if v.type_of() == sys::ValueType::napi_string => match v.string("request.output")?.as_str() {
            "objects" => Ok(Output::Objects),
            "packed" => Ok(Output::Packed),
            _ => Err(Error::invalid("request.output must be \"objects\" or \"packed\"")),
        },
        Some(_) => Err(Error::invalid("request.output must be \"objects\" or \"packed\"")),
    }
}

/// Settles `ticket` with a batch result in the requested form. Called where the batch ran:
/// the packed columns are built there, off the JS thread.
pub(crate) fn settle(ticket: Ticket, r: Result<ProcessResult>, output: Output) {
    match output {
        Output::Objects => ticket.settle_with(r.map(ObjectsResult::new), objects_result_js),
        Output::Packed => ticket.settle_with(r.map(PackedResult::new), packed_result_js),
    }
}

/// Rows of the first chunk: it starts the batch on the pool while the next ones are read, so
/// it is small (the pool waits for it, ~50 µs).
const FIRST_CHUNK_ROWS: u32 = 256;
/// Rows of the largest chunk. Each chunk after the first holds twice the rows of the one
/// before, up to this: reading a chunk takes about half as long per row as processing it, so
/// the pool, busy with one chunk, finds the next one read.
const CHUNK_ROWS: u32 = 2048;

/// The row ranges `processRows` reads as chunks, for `n` rows: 256, 512, 1,024, then 2,048 at
/// a time. An empty array still has its one (empty) first chunk.
fn chunk_ranges(n: u32) -> impl Iterator<Item = (u32, u32)> {
    let mut next = Some((0u32, FIRST_CHUNK_ROWS));
    std::iter::from_fn(move || {
        let (start, size) = next?;
        let end = start.saturating_add(size);
        next = (end < n).then(|| (end, (size * 2).min(CHUNK_ROWS)));
        Some((start, end))
    })
}

/// Reads `rows[start..end)` into one buffer (`packRows` in `lib/internal/helpers.js`: one pass
/// of JIT code instead of several N-API calls per row; or row by row when a payload is not a
/// Uint8Array). An empty range still checks that `rows` is an array.
fn read_chunk(env: &Env, rows: Js, start: u32, end: u32) -> Result<RowBuffer> {
    let out = Out::new(env);
    let range = |n: u32| out.u32(n).map_err(super::napi::from_napi);
    // A TypeError thrown by packRows (rows not an array, a bad offset) is the caller's mistake.
    let packed =
        helpers::call(env, Helper::PackRows, &[rows.raw(), range(start)?, range(end)?]).map_err(|e| match e {
            Error::Internal(m) => Error::invalid(m),
            e => e,
        })?;
    if packed.is_nullish() {
        return read_chunk_slowly(rows, start, end);
    }
    let words = |v: Js| -> Vec<[u8; 8]> {
        let bytes = v.typed_bytes().map(|(_, b)| b).unwrap_or_default();
        bytes.chunks_exact(8).map(|w| w.try_into().unwrap_or([0; 8])).collect()
    };
    let offsets: Vec<i64> = words(packed.element(0)?).into_iter().map(i64::from_ne_bytes).collect();
    let ts: Vec<f64> = words(packed.element(1)?).into_iter().map(f64::from_ne_bytes).collect();
    let bytes = packed.element(3)?;
    if bytes.is_nullish() {
        // Too big to pack in JS: each payload is copied from its own array.
        let payloads = packed.element(2)?;
        let mut out = RowBuffer::default();
        for (i, (&offset, &ts_ms)) in offsets.iter().zip(&ts).enumerate() {
            let payload = payloads.element(i as u32)?;
            out.push(offset, ts_ms, payload.byte_slice().unwrap_or_default());
        }
        return Ok(out);
    }
    // All payloads in one buffer: copied once, the rows keep ranges into it.
    let all = bytes.byte_slice().unwrap_or_default();
    let mut start = 0usize;
    let ends: Vec<usize> = words(packed.element(4)?)
        .into_iter()
        .map(|w| {
            start = (f64::from_ne_bytes(w) as usize).clamp(start, all.len());
            start
        })
        .collect();
    let mut payloads = crate::processor::spare_bytes(start);
    payloads.extend_from_slice(&all[..start]);
    RowBuffer::new(offsets, ts, ends, payloads).ok_or_else(|| Error::Internal("rows were packed inconsistently".into()))
}

fn read_chunk_slowly(rows: Js, start: u32, end: u32) -> Result<RowBuffer> {
    let end = end.min(rows.array_len("rows")?);
    let mut out = RowBuffer::default();
    for i in start..end {
        let row = rows.element(i)?.object("rows[]")?;
        let offset =
            offset(row.get("offset")?.ok_or_else(|| Error::invalid("rows[].offset is required"))?, "rows[].offset")?;
        let ts_ms = match row.get("tsMs")? {
            Some(v) if v.type_of() == sys::ValueType::napi_number => v.number("rows[].tsMs")?,
            Some(v) => v.to_value("rows[].tsMs")?.map_or(f64::NAN, |v| v.to_number()),
            None => f64::NAN,
        };
        let payload =
            row.get("payload")?.ok_or_else(|| Error::invalid("rows[].payload is required"))?.bytes("rows[].payload")?;
        out.push(offset, ts_ms, &payload);
    }
    Ok(out)
}

fn parse_templates(templates: Option<Js>) -> Result<Vec<TemplateRow>> {
    let Some(templates) = templates.filter(|t| !t.is_nullish()) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    // No cap on the number of templates (the processor takes them all).
    for t in templates.items("templates")? {
        let t = t?.object("templates[]")?;
        // A row with more than MAX_TEMPLATE_FIELDS fields (or encodings) is skipped by its
        // length alone (P3), so at most one more element is read: a huge list costs nothing.
        let strings = |key: &str| -> Result<Vec<JsString>> {
            let what = format!("templates[].{key}");
            let list = t.get(key)?.ok_or_else(|| Error::invalid(format!("{what} must be an array")))?;
            list.items(&what)?.take(MAX_TEMPLATE_FIELDS + 1).map(|v| js_text(Some(v?), &what)).collect()
        };
        let active_from = match t.opt("activeFromSourceOffset")? {
            Some(v) => offset(v, "templates[].activeFromSourceOffset")?,
            None => 0,
        };
        out.push(TemplateRow {
            template_id: js_text(t.get("templateId")?, "templates[].templateId")?.to_utf8_lossy().into_owned(),
            entity: js_text(t.get("entity")?, "templates[].entity")?,
            fields: strings("fields")?,
            encodings: strings("encodings")?.into_iter().map(|e| e.to_utf8_lossy().into_owned()).collect(),
            active_from_source_offset: active_from,
        });
    }
    Ok(out)
}

/// Runs one processor batch over `rows` (the WAL rows of the stream, ascending offsets;
/// rows outside `fromOffset..=toOffset` are ignored) with the stream's active `templates`,
/// off the JS thread. Resolves `{ stream, processedThrough, touches, stats }` exactly as the
/// reference worker replies; rejects with `ERR_TOUCH_NOT_ENABLED`, `ERR_PROCESSING`
/// (`onMissingBefore: "error"`) or `ERR_INVALID_ARGUMENT`.
///
/// With `request.output: "packed"` it resolves `{ stream, processedThrough, packed, stats }`
/// instead: the same touches in the same order as typed arrays (`PackedTouches`), with no
/// object per touch. `unpackTouches` (`durable-touch/packed`) rebuilds the objects.
#[napi(
    ts_generic_types = "R extends ProcessRequest = ProcessRequest",
    ts_args_type = "rows: Array<{ offset: bigint | number; tsMs: number; payload: Buffer | Uint8Array | string }>, request: R, templates?: Array<ActiveTemplate> | undefined | null",
    ts_return_type = "Promise<R extends { output: 'packed' } ? PackedProcessResult : ProcessResult>"
)]
pub fn process_rows<'env>(
    env: &'env Env,
    rows: Unknown,
    request: Unknown,
    templates: Option<Unknown>,
) -> napi::Result<Unknown<'env>> {
    let rows = Js::new(env, rows.raw());
    let parsed = (|| {
        let req = parse_request(Js::new(env, request.raw()))?;
        let output = parse_output(&Js::new(env, request.raw()))?;
        let first = read_chunk(env, rows, 0, FIRST_CHUNK_ROWS)?;
        let templates = parse_templates(templates.as_ref().map(|t| Js::new(env, t.raw())))?;
        Ok((req, output, first, templates, rows.array_len("rows")?))
    })();
    let (req, output, first, templates, n) = match parsed {
        Ok(v) => v,
        Err(e) => return Ok(unknown(env, Port::rejected(env, &e)?)),
    };
    let (ticket, promise) = port(env)?.promise(env)?;
    let reply = Box::new(move |r| settle(ticket, r, output));
    // The first chunk starts the batch on the pool while the others are read here; an error
    // in a later row reaches the batch as its chunk, and rejects it.
    let (chunks, batch) = std::sync::mpsc::channel();
    let _ = chunks.send(Ok(first));
    pool::process_stream(req, n as usize, templates, batch, reply);
    for (start, end) in chunk_ranges(n).skip(1) {
        let chunk = read_chunk(env, rows, start, end);
        let failed = chunk.is_err();
        if chunks.send(chunk).is_err() || failed {
            break;
        }
    }
    Ok(unknown(env, promise))
}

/// The columns [`BUILD_TOUCHES`] reads, prepared where the batch ran (off the JS thread).
pub(crate) struct ObjectColumns {
    key_ids: Vec<u32>,
    /// 16 hex digits per routing key that is not a repeat of the touch before's.
    routing: Vec<u8>,
    flags: Vec<u8>,
    wm_idx: Vec<u32>,
    /// The distinct watermarks in decimal, back to back, and where each one ends.
    wm_text: Vec<u8>,
    wm_ends: Vec<u32>,
    ent_idx: Vec<u32>,
    tpl_idx: Vec<u32>,
}

/// A batch result ready to become touch objects (`result.touches` moved into `columns`).
pub(crate) struct ObjectsResult {
    result: ProcessResult,
    columns: ObjectColumns,
}

impl ObjectsResult {
    pub(crate) fn new(mut r: ProcessResult) -> ObjectsResult {
        let touches = std::mem::take(&mut r.touches);
        let n = touches.len();
        let mut c = ObjectColumns {
            key_ids: Vec::with_capacity(n),
            routing: Vec::with_capacity(n * 16),
            flags: Vec::with_capacity(n),
            wm_idx: Vec::with_capacity(n),
            wm_text: Vec::new(),
            wm_ends: Vec::new(),
            ent_idx: Vec::with_capacity(n),
            tpl_idx: Vec::with_capacity(n),
        };
        // Watermarks are the offsets of the batch's rows: index them densely from the smallest.
        let lo = touches.iter().map(|t| t.watermark).min().unwrap_or(0);
        let hi = touches.iter().map(|t| t.watermark).max().unwrap_or(0);
        let dense = hi.saturating_sub(lo) < (4 * n as i64).max(1 << 16);
        let mut watermarks: Vec<i64> = Vec::new();
        let mut wm_slot: Vec<u32> = if dense { vec![u32::MAX; (hi - lo + 1) as usize] } else { Vec::new() };
        let mut wm_index: rustc_hash::FxHashMap<i64, u32> = rustc_hash::FxHashMap::default();
        let mut hex = [b'0'; 16];
        let mut previous: Option<u64> = None;
        for t in &touches {
            c.key_ids.push(t.key_id);
            let repeat = t.routing_key.is_some() && t.routing_key == previous;
            if let (Some(k), false) = (t.routing_key, repeat) {
                hex16_into(k, &mut hex);
                c.routing.extend_from_slice(&hex);
            }
            previous = t.routing_key;
            c.flags.push(
                t.routing_key.is_some() as u8 | (((t.kind == TouchKind::Template) as u8) << 1) | ((repeat as u8) << 2),
            );
            let w = if dense {
                let slot = &mut wm_slot[(t.watermark - lo) as usize];
                if *slot == u32::MAX {
                    watermarks.push(t.watermark);
                    *slot = (watermarks.len() - 1) as u32;
                }
                *slot
            } else {
                *wm_index.entry(t.watermark).or_insert_with(|| {
                    watermarks.push(t.watermark);
                    (watermarks.len() - 1) as u32
                })
            };
            c.wm_idx.push(w);
            c.ent_idx.push(t.entity);
            c.tpl_idx.push(t.template.unwrap_or(u32::MAX));
        }
        let mut decimal = itoa_buf();
        c.wm_text.reserve(watermarks.len() * 8);
        c.wm_ends.reserve(watermarks.len());
        for w in &watermarks {
            c.wm_text.extend_from_slice(decimal.format(*w));
            c.wm_ends.push(c.wm_text.len() as u32);
        }
        ObjectsResult { result: r, columns: c }
    }
}

/// Builds the touch objects in JS (`buildTouches` in `lib/internal/helpers.js`) from columns:
/// far cheaper than six N-API property sets per touch.
fn touches_js(env: &Env, r: &ProcessResult, c: ObjectColumns) -> napi::Result<RawValue> {
    let out = Out::new(env);
    let n = c.key_ids.len();
    let ent = r.entities.iter().map(|e| out.js_str(e.as_bytes())).collect::<napi::Result<Vec<_>>>()?;
    let tpl = r.template_ids.iter().map(|t| out.str(t)).collect::<napi::Result<Vec<_>>>()?;
    use sys::TypedarrayType as T;
    let args = [
        out.num(n as f64)?,
        out.typed_array_from_vec(T::uint32_array, c.key_ids)?,
        out.latin1(&c.routing)?,
        out.typed_array_from_vec(T::uint8_array, c.flags)?,
        out.typed_array_from_vec(T::uint32_array, c.wm_idx)?,
        out.latin1(&c.wm_text)?,
        out.typed_array_from_vec(T::uint32_array, c.wm_ends)?,
        out.typed_array_from_vec(T::uint32_array, c.ent_idx)?,
        out.array(ent)?,
        out.typed_array_from_vec(T::uint32_array, c.tpl_idx)?,
        out.array(tpl)?,
    ];
    helpers::call(env, Helper::BuildTouches, &args).map(|v| v.raw()).map_err(super::napi::internal)
}

/// Builds `{ stream, processedThrough, touches, stats }` on the JS thread from columns
/// prepared where the batch ran.
pub(crate) fn objects_result_js(env: &Env, o: ObjectsResult) -> napi::Result<RawValue> {
    let ObjectsResult { result: r, columns } = o;
    let touches = touches_js(env, &r, columns)?;
    batch_result_js(&Out::new(env), &r, "touches", touches)
}

/// `{ stream, processedThrough, <touches>: value, stats }`, the envelope of both output forms.
fn batch_result_js(out: &Out, r: &ProcessResult, touches: &str, value: RawValue) -> napi::Result<RawValue> {
    let result = out.object()?;
    out.set(result, "stream", out.str(&r.stream)?)?;
    out.set(result, "processedThrough", out.bigint(r.processed_through)?)?;
    out.set(result, touches, value)?;
    out.set(result, "stats", stats_js(out, &r.stats)?)?;
    Ok(result)
}

fn stats_js(out: &Out, s: &crate::processor::ProcessStats) -> napi::Result<RawValue> {
    let stats = out.object()?;
    for (name, v) in [
        ("rowsRead", s.rows_read),
        ("bytesRead", s.bytes_read),
        ("changes", s.changes),
        ("touchesEmitted", s.touches_emitted),
        ("tableTouchesEmitted", s.table_touches_emitted),
        ("templateTouchesEmitted", s.template_touches_emitted),
        ("maxSourceTsMs", s.max_source_ts_ms),
        ("fineTouchesDroppedDueToBudget", s.fine_touches_dropped_due_to_budget),
    ] {
        out.set(stats, name, out.num(v)?)?;
    }
    out.set(stats, "fineTouchesSuppressedDueToBudget", out.bool(s.fine_touches_suppressed_due_to_budget)?)?;
    out.set(stats, "fineTouchesSkippedColdTemplate", out.num(s.fine_touches_skipped_cold_template)?)?;
    Ok(stats)
}

/// Builds `{ stream, processedThrough, packed, stats }` (see [`PackedTouches`]): the columns
/// become typed arrays over their own memory (nothing is copied) beside two small string
/// tables, whatever the number of touches.
pub fn packed_result_js(env: &Env, p: PackedResult) -> napi::Result<RawValue> {
    let out = Out::new(env);
    let PackedResult { result: r, columns: c } = p;
    use sys::TypedarrayType as T;
    let packed = out.object()?;
    out.set(packed, "count", out.num(c.len() as f64)?)?;
    out.set(packed, "keyIds", out.typed_array_from_vec(T::uint32_array, c.key_ids)?)?;
    out.set(packed, "watermarks", out.typed_array_from_vec(T::bigint64_array, c.watermarks)?)?;
    out.set(packed, "routingKeys", out.typed_array_from_vec(T::biguint64_array, c.routing_keys)?)?;
    out.set(packed, "hasRoutingKey", out.typed_array_from_vec(T::uint8_array, c.has_routing_key)?)?;
    out.set(packed, "kinds", out.typed_array_from_vec(T::uint8_array, c.kinds)?)?;
    let ent = r.entities.iter().map(|e| out.js_str(e.as_bytes())).collect::<napi::Result<Vec<_>>>()?;
    out.set(packed, "entities", out.array(ent)?)?;
    out.set(packed, "entityIndex", out.typed_array_from_vec(T::uint32_array, c.entity_index)?)?;
    let tpl = r.template_ids.iter().map(|t| out.str(t)).collect::<napi::Result<Vec<_>>>()?;
    out.set(packed, "templateIds", out.array(tpl)?)?;
    out.set(packed, "templateIndex", out.typed_array_from_vec(T::uint32_array, c.template_index)?)?;
    batch_result_js(&out, &r, "packed", packed)
}

fn hex16_into(k: u64, out: &mut [u8; 16]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in out.iter_mut().enumerate() {
        *b = HEX[((k >> (60 - 4 * i)) & 0xF) as usize];
    }
}

/// A small decimal formatter for watermarks (ASCII output).
struct Decimal([u8; 20]);

fn itoa_buf() -> Decimal {
    Decimal([0; 20])
}

impl Decimal {
    fn format(&mut self, v: i64) -> &[u8] {
        let mut n = v.unsigned_abs();
        let mut i = self.0.len();
        loop {
            i -= 1;
            self.0[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if v < 0 {
            i -= 1;
            self.0[i] = b'-';
        }
        &self.0[i..]
    }
}

/// The request of `processRows` (the reference worker's `ProcessRequest`).
#[napi(object, object_to_js = false, js_name = "ProcessRequest")]
pub struct ProcessRequestJs {
    pub stream: String,
    pub from_offset: BigInt,
    pub to_offset: BigInt,
    /// The stream profile, e.g. `{ kind: "state-protocol", touch: { enabled: true, ... } }`.
    #[napi(ts_type = "{ kind: string; touch?: Record<string, unknown> }")]
    pub profile: serde_json::Value,
    pub max_rows: f64,
    pub max_bytes: f64,
    pub emit_fine_touches: Option<bool>,
    #[napi(ts_type = "number | null")]
    pub fine_touch_budget: Option<f64>,
    #[napi(ts_type = "'key' | 'template'")]
    pub fine_granularity: Option<String>,
    #[napi(ts_type = "'full' | 'hotTemplatesOnly'")]
    pub processing_mode: Option<String>,
    pub filter_hot_templates: Option<bool>,
    #[napi(ts_type = "string[] | null")]
    pub hot_template_ids: Option<Vec<String>>,
    /// Ours (not the reference's): `"packed"` resolves a `PackedProcessResult` (touches as
    /// typed arrays) instead of touch objects; absent, null or `"objects"` keeps the default.
    #[napi(ts_type = "'objects' | 'packed' | null")]
    pub output: Option<String>,
}

// Silence "unused" for the typing-only structs.
#[allow(dead_code)]
fn _typing_only(
    _: ProcessRequestJs,
    _: ActiveTemplate,
    _: TouchRow,
    _: ProcessStatsJs,
    _: ProcessResultJs,
    _: PackedTouches,
    _: PackedProcessResult,
) {
}

/// An active template of the stream (a `live_templates` row with its JSON columns read).
#[napi(object, object_to_js = false)]
pub struct ActiveTemplate {
    pub template_id: String,
    pub entity: String,
    pub fields: Vec<String>,
    pub encodings: Vec<String>,
    #[napi(ts_type = "bigint | number")]
    pub active_from_source_offset: Option<BigInt>,
}

/// A touch (the reference's `TouchRow`).
#[napi(object, object_from_js = false)]
pub struct TouchRow {
    pub key_id: u32,
    pub routing_key: Option<String>,
    /// The source offset as a decimal string.
    pub watermark: String,
    pub entity: String,
    #[napi(ts_type = "'table' | 'template'")]
    pub kind: String,
    pub template_id: Option<String>,
}

/// Batch statistics.
#[napi(object, object_from_js = false, js_name = "ProcessStats")]
pub struct ProcessStatsJs {
    pub rows_read: f64,
    pub bytes_read: f64,
    pub changes: f64,
    pub touches_emitted: f64,
    pub table_touches_emitted: f64,
    pub template_touches_emitted: f64,
    pub max_source_ts_ms: f64,
    pub fine_touches_dropped_due_to_budget: f64,
    pub fine_touches_suppressed_due_to_budget: bool,
    pub fine_touches_skipped_cold_template: f64,
}

/// The result of `processRows`.
#[napi(object, object_from_js = false, js_name = "ProcessResult")]
pub struct ProcessResultJs {
    pub stream: String,
    pub processed_through: i64n,
    pub touches: Vec<TouchRow>,
    pub stats: ProcessStatsJs,
}

/// The touches of a batch as columns, in emitted order: touch `i` is `keyIds[i]`,
/// `watermarks[i]` (the source offset; the object form's decimal `watermark`),
/// `routingKeys[i]` when `hasRoutingKey[i]` is 1 (the 64-bit number its 16 hex digits spell;
/// 0 where there is none), `kinds[i]` (0 table, 1 template), `entities[entityIndex[i]]`, and
/// `templateIds[templateIndex[i]]` (`templateIndex[i]` is 0xFFFFFFFF where there is none).
/// Feed a journal with `journal.touchMany(p.keyIds, p.watermarks, p.routingKeys,
/// p.hasRoutingKey)`; `unpackTouches(p)` (`durable-touch/packed`) rebuilds the `TouchRow`s.
#[napi(object, object_from_js = false)]
pub struct PackedTouches {
    pub count: u32,
    #[napi(ts_type = "Uint32Array")]
    pub key_ids: Vec<u32>,
    #[napi(ts_type = "BigInt64Array")]
    pub watermarks: Vec<u32>,
    #[napi(ts_type = "BigUint64Array")]
    pub routing_keys: Vec<u32>,
    #[napi(ts_type = "Uint8Array")]
    pub has_routing_key: Vec<u32>,
    #[napi(ts_type = "Uint8Array")]
    pub kinds: Vec<u32>,
    pub entities: Vec<String>,
    #[napi(ts_type = "Uint32Array")]
    pub entity_index: Vec<u32>,
    pub template_ids: Vec<String>,
    #[napi(ts_type = "Uint32Array")]
    pub template_index: Vec<u32>,
}

/// The result of `processRows` / `processBatch` with `output: "packed"`.
#[napi(object, object_from_js = false)]
pub struct PackedProcessResult {
    pub stream: String,
    pub processed_through: i64n,
    pub packed: PackedTouches,
    pub stats: ProcessStatsJs,
}

/// Threads in the native processor pool (batches run in parallel up to this many).
#[napi]
pub fn processor_threads() -> u32 {
    pool::threads() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_start_small_double_and_cover_every_row_once() {
        let ranges = |n| chunk_ranges(n).collect::<Vec<_>>();
        assert_eq!(ranges(0), [(0, 256)]);
        assert_eq!(ranges(256), [(0, 256)]);
        assert_eq!(ranges(257), [(0, 256), (256, 768)]);
        assert_eq!(
            ranges(10_000),
            [(0, 256), (256, 768), (768, 1792), (1792, 3840), (3840, 5888), (5888, 7936), (7936, 9984), (9984, 12032)]
        );
        for n in [1, 255, 767, 768, 769, 4000, 65_537] {
            let r = ranges(n);
            assert!(r.windows(2).all(|w| w[0].1 == w[1].0), "{n}: contiguous");
            assert!(
                r.last().unwrap().1 >= n && r.last().unwrap().0 < n.max(1),
                "{n}: the last range holds the last row"
            );
            assert!(r.iter().all(|(s, e)| e - s <= CHUNK_ROWS));
        }
        // No overflow at the top of the range.
        assert_eq!(chunk_ranges(u32::MAX).last(), Some((u32::MAX - (u32::MAX - 1792) % 2048, u32::MAX)));
    }
}
