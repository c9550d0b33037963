//! The touch processor (P1–P17): WAL rows of State Protocol records → touches, exactly as the
//! reference worker (`processor_worker.ts` `handleProcess`) computes them.
//!
//! - this module: the request, the template rows and the result, and how the request is
//!   normalised (P1, P2);
//! - [`batch`]: the batch algorithm itself (P3–P12), pure and synchronous;
//! - [`pool`]: the rayon pool that runs batches off the JS thread, several in parallel, each
//!   failing alone (P13, P14);
//! - [`source`]: reading a batch's rows and active templates from the native [`Store`]
//!   (P3's query, S10's range read).
//! - [`packed`]: a result's touches as columns (the bindings' `output: "packed"`);
//! - [`tuples`]: the tuples rows were last seen in, which complete mode reads to name the
//!   tuple a change leaves when its record does not.
//!
//! [`Store`]: crate::store::Store

pub mod batch;
pub mod packed;
pub mod pool;
pub mod source;
pub mod tuples;

use crate::error::{Error, Result};
use crate::jscompat::json::{self, Value};
use crate::jscompat::number::js_max;
use crate::jscompat::string::JsString;
use crate::spec::{OnMissingBefore, TouchConfig};

pub use batch::{process_chunks, process_row_refs, process_row_refs_tracked, process_rows};

/// One WAL row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub offset: i64,
    /// The row's `ts_ms` (append time); a non-finite value makes the row count but yield
    /// nothing (P4).
    pub ts_ms: f64,
    pub payload: Vec<u8>,
}

impl Row {
    pub fn as_ref(&self) -> RowRef<'_> {
        RowRef { offset: self.offset, ts_ms: self.ts_ms, payload: &self.payload }
    }
}

/// A borrowed WAL row: what the batch algorithm reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowRef<'a> {
    pub offset: i64,
    pub ts_ms: f64,
    pub payload: &'a [u8],
}

/// Rows with all payloads in one buffer (one allocation for a whole batch instead of one per
/// row): row `i` is `offsets[i]`, `ts_ms[i]` and `bytes[ends[i - 1]..ends[i]]`.
///
/// The payload buffer is recycled: a dropped `RowBuffer` leaves it to the next one made with
/// [`RowBuffer::with_spare_bytes`] or [`spare_bytes`] (see [`Spares`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowBuffer {
    offsets: Vec<i64>,
    ts_ms: Vec<f64>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

/// The rows, their payloads copied into one buffer.
impl<'r> FromIterator<&'r Row> for RowBuffer {
    fn from_iter<I: IntoIterator<Item = &'r Row>>(rows: I) -> RowBuffer {
        let mut out = RowBuffer::default();
        for r in rows {
            out.push(r.offset, r.ts_ms, &r.payload);
        }
        out
    }
}

/// Payload buffers kept for reuse. A chunk's payloads are about a megabyte: allocated fresh,
/// glibc maps new pages for them (a page fault and a zeroed page per 4 KiB, on the thread
/// that reads the chunk) and unmaps them when the pool thread drops the chunk. Reused, the
/// copy writes into pages already mapped. At most `count` buffers of at most `max_bytes`
/// each are kept.
pub(crate) struct Spares {
    buffers: parking_lot::Mutex<Vec<Vec<u8>>>,
    count: usize,
    max_bytes: usize,
}

impl Spares {
    pub(crate) const fn new(count: usize, max_bytes: usize) -> Spares {
        Spares { buffers: parking_lot::Mutex::new(Vec::new()), count, max_bytes }
    }

    /// Keeps `bytes` for reuse, unless it is empty, too big, or enough are kept.
    pub(crate) fn put(&self, bytes: Vec<u8>) {
        if bytes.capacity() == 0 || bytes.capacity() > self.max_bytes {
            return;
        }
        let mut buffers = self.buffers.lock();
        if buffers.len() < self.count {
            buffers.push(bytes);
        }
    }

    /// An empty buffer with room for `len` bytes: a kept one if there is one.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut bytes = self.buffers.lock().pop().unwrap_or_default();
        bytes.clear();
        bytes.reserve(len);
        bytes
    }
}

/// The payload buffers of dropped [`RowBuffer`]s (4 of up to 16 MiB).
static SPARE_BYTES: Spares = Spares::new(4, 16 << 20);

impl Drop for RowBuffer {
    fn drop(&mut self) {
        SPARE_BYTES.put(std::mem::take(&mut self.bytes));
    }
}

/// An empty payload buffer with room for `len` bytes, for a [`RowBuffer`]: a dropped
/// `RowBuffer`'s if one is kept.
pub fn spare_bytes(len: usize) -> Vec<u8> {
    SPARE_BYTES.take(len)
}

impl RowBuffer {
    /// An empty buffer whose payload buffer is a spare one (see [`spare_bytes`]).
    pub fn with_spare_bytes() -> RowBuffer {
        RowBuffer { offsets: Vec::new(), ts_ms: Vec::new(), ends: Vec::new(), bytes: spare_bytes(0) }
    }

    /// `None` unless the three columns have the same length and `ends` ascend within `bytes`.
    pub fn new(offsets: Vec<i64>, ts_ms: Vec<f64>, ends: Vec<usize>, bytes: Vec<u8>) -> Option<RowBuffer> {
        let ok = offsets.len() == ts_ms.len()
            && offsets.len() == ends.len()
            && ends.windows(2).all(|w| w[0] <= w[1])
            && ends.last().is_none_or(|&e| e <= bytes.len());
        ok.then_some(RowBuffer { offsets, ts_ms, ends, bytes })
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Appends a row (its payload copied into the shared buffer).
    pub fn push(&mut self, offset: i64, ts_ms: f64, payload: &[u8]) {
        self.bytes.extend_from_slice(payload);
        self.offsets.push(offset);
        self.ts_ms.push(ts_ms);
        self.ends.push(self.bytes.len());
    }

    /// Keeps the first `n` rows.
    pub fn truncate(&mut self, n: usize) {
        if n < self.len() {
            self.offsets.truncate(n);
            self.ts_ms.truncate(n);
            self.ends.truncate(n);
            self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = RowRef<'_>> + '_ {
        (0..self.len()).map(move |i| RowRef {
            offset: self.offsets[i],
            ts_ms: self.ts_ms[i],
            payload: &self.bytes[if i == 0 { 0 } else { self.ends[i - 1] }..self.ends[i]],
        })
    }
}

/// Most fields a template has (P3): a [`TemplateRow`] with more is skipped.
pub const MAX_TEMPLATE_FIELDS: usize = 3;

/// A live template as stored in `live_templates` (fields and encodings already read from
/// their JSON columns). Rows that break P3's rules are skipped, not rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRow {
    pub template_id: String,
    pub entity: JsString,
    pub fields: Vec<JsString>,
    pub encodings: Vec<String>,
    pub active_from_source_offset: i64,
}

impl TemplateRow {
    /// A row of `live_templates` as the reference reads it: the JSON columns must parse to
    /// arrays, whose elements are taken through `String(x)` (P3). `None` means "skip".
    pub fn from_stored(
        template_id: String,
        entity: JsString,
        fields_json: &str,
        encodings_json: &str,
        active_from_source_offset: i64,
    ) -> Option<TemplateRow> {
        let strings = |text: &str| -> Option<Vec<JsString>> {
            match &json::parse(text).ok()? {
                Value::Array(items) => items.iter().map(Value::to_js_string).collect(),
                _ => None,
            }
        };
        let fields = strings(fields_json)?;
        let encodings = strings(encodings_json)?.into_iter().map(|e| e.to_utf8_lossy().into_owned()).collect();
        Some(TemplateRow { template_id, entity, fields, encodings, active_from_source_offset })
    }
}

/// The touch settings the worker reads from the stream profile (P1).
#[derive(Debug, Clone, PartialEq)]
pub struct TouchSettings {
    /// `touch.coarseIntervalMs` through `Number()`, `None` when nullish.
    pub coarse_interval_ms: Option<f64>,
    /// `touch.touchCoalesceWindowMs`, likewise.
    pub touch_coalesce_window_ms: Option<f64>,
    pub on_missing_before: OnMissingBefore,
    /// `touch.fineTouchBudgetPerBatch`, `None` when nullish (then an absent request budget
    /// means "no limit", as B3's requests rely on).
    pub fine_touch_budget_per_batch: Option<f64>,
}

impl TouchSettings {
    /// Reads a profile value as the worker does: touch must be enabled on a
    /// `state-protocol` profile, else `touch not enabled for profile` (P2). Other fields are
    /// used raw, without validation.
    pub fn from_profile(profile: &Value) -> Result<TouchSettings> {
        let not_enabled = || Error::TouchNotEnabled("touch not enabled for profile".into());
        let p = profile.as_object().ok_or_else(not_enabled)?;
        if p.get("kind").and_then(Value::as_str_bytes) != Some(b"state-protocol") {
            return Err(not_enabled());
        }
        let touch = p.get("touch").and_then(Value::as_object).ok_or_else(not_enabled)?;
        if !touch.get("enabled").is_some_and(Value::truthy) {
            return Err(not_enabled());
        }
        let number = |key: &str| touch.get(key).filter(|v| !v.is_nullish()).map(Value::to_number);
        Ok(TouchSettings {
            coarse_interval_ms: number("coarseIntervalMs"),
            touch_coalesce_window_ms: number("touchCoalesceWindowMs"),
            on_missing_before: OnMissingBefore::from_raw(touch.get("onMissingBefore")),
            fine_touch_budget_per_batch: number("fineTouchBudgetPerBatch"),
        })
    }

    /// From a validated config (which always carries a per-batch budget).
    pub fn from_config(cfg: &TouchConfig) -> Result<TouchSettings> {
        if !cfg.enabled {
            return Err(Error::TouchNotEnabled("touch not enabled for profile".into()));
        }
        Ok(TouchSettings {
            coarse_interval_ms: Some(cfg.coarse_interval_ms),
            touch_coalesce_window_ms: Some(cfg.touch_coalesce_window_ms),
            on_missing_before: cfg.on_missing_before,
            fine_touch_budget_per_batch: Some(cfg.fine_touch_budget_per_batch),
        })
    }
}

/// Fine touch granularity: `Template` only when exactly `"template"` was requested (P1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Granularity {
    #[default]
    Key,
    Template,
}

/// Processing mode: `HotTemplatesOnly` only when exactly that was requested (P1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Full,
    HotTemplatesOnly,
}

/// A batch request (the reference's `ProcessRequest`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRequest {
    pub stream: String,
    /// First offset (inclusive). `processedThrough` starts at `from_offset - 1`.
    pub from_offset: i64,
    /// Last offset (inclusive); below `from_offset` the range is empty.
    pub to_offset: i64,
    pub touch: TouchSettings,
    /// Row limit (compared as JS numbers: NaN means no limit).
    pub max_rows: f64,
    /// Payload byte limit, likewise.
    pub max_bytes: f64,
    /// False only when the request said exactly `false`.
    pub emit_fine_touches: bool,
    /// The request's `fineTouchBudget`, `None` when nullish.
    pub fine_touch_budget: Option<f64>,
    pub fine_granularity: Granularity,
    pub processing_mode: Mode,
    /// True only when the request said exactly `true`.
    pub filter_hot_templates: bool,
    /// The string elements of `hotTemplateIds`.
    pub hot_template_ids: Vec<String>,
    /// Ours, off for `processRows` (which must match the reference): also emit what a waiter
    /// needs when the reference would emit nothing it listens to — a template-key touch for a
    /// change whose images cannot be turned into fine keys (B5), projected keys for changed
    /// object and array fields (B6), the trimmed entity's keys (B19) — and count control
    /// records. The engine sets it (deviations.md).
    pub complete: bool,
}

impl ProcessRequest {
    /// A request with the reference defaults for everything but the range and settings.
    pub fn new(stream: impl Into<String>, from_offset: i64, to_offset: i64, touch: TouchSettings) -> Self {
        ProcessRequest {
            stream: stream.into(),
            from_offset,
            to_offset,
            touch,
            max_rows: f64::NAN,
            max_bytes: f64::NAN,
            emit_fine_touches: true,
            fine_touch_budget: None,
            fine_granularity: Granularity::Key,
            processing_mode: Mode::Full,
            filter_hot_templates: false,
            hot_template_ids: Vec::new(),
            complete: false,
        }
    }

    /// The normalised parameters of P1.
    pub fn plan(&self) -> Result<Plan> {
        if self.from_offset == i64::MIN {
            return Err(Error::invalid("fromOffset is out of range"));
        }
        let budget = self.fine_touch_budget.or(self.touch.fine_touch_budget_per_batch).map(|b| js_max(0.0, b.floor()));
        let hot_templates_only =
            self.fine_granularity == Granularity::Template && self.processing_mode == Mode::HotTemplatesOnly;
        let emit_fine = self.emit_fine_touches && budget != Some(0.0);
        let hot_ids = self.filter_hot_templates.then(|| {
            self.hot_template_ids
                .iter()
                .filter(|id| is_lower_hex16(id))
                .cloned()
                .collect::<rustc_hash::FxHashSet<String>>()
        });
        Ok(Plan {
            budget,
            granularity: self.fine_granularity,
            hot_templates_only,
            emit_fine,
            hot_ids,
            coarse_window_ms: js_max(1.0, self.touch.coarse_interval_ms.unwrap_or(100.0).floor()),
            fine_window_ms: js_max(1.0, self.touch.touch_coalesce_window_ms.unwrap_or(100.0).floor()),
            on_missing_before: self.touch.on_missing_before,
            limits: Limits { max_rows: self.max_rows, max_bytes: self.max_bytes },
            complete: self.complete,
        })
    }
}

/// `^[0-9a-f]{16}$`.
pub fn is_lower_hex16(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The batch row limits (P4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_rows: f64,
    pub max_bytes: f64,
}

impl Limits {
    /// Whether the next row (of `len` bytes) is taken after `rows` rows and `bytes` bytes:
    /// the first row always is (P4).
    pub fn admits(&self, rows: f64, bytes: f64, len: f64) -> bool {
        rows == 0.0 || !(rows >= self.max_rows || bytes + len > self.max_bytes)
    }
}

/// A request after P1's normalisation.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The fine budget (`None` = no limit); a JS number, so NaN is possible and never runs out.
    pub budget: Option<f64>,
    pub granularity: Granularity,
    pub hot_templates_only: bool,
    pub emit_fine: bool,
    /// The hot template ids when hot filtering is on.
    pub hot_ids: Option<rustc_hash::FxHashSet<String>>,
    pub coarse_window_ms: f64,
    pub fine_window_ms: f64,
    pub on_missing_before: OnMissingBefore,
    pub limits: Limits,
    pub complete: bool,
}

impl Plan {
    /// The coalescing window of a touch (P8): table touches coalesce over the coarse
    /// interval, template touches over the fine window.
    pub fn window_ms(&self, kind: TouchKind) -> f64 {
        match kind {
            TouchKind::Table => self.coarse_window_ms,
            TouchKind::Template => self.fine_window_ms,
        }
    }
}

/// Touch kinds (P11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TouchKind {
    Table,
    Template,
}

impl TouchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TouchKind::Table => "table",
            TouchKind::Template => "template",
        }
    }
}

/// One emitted touch. `entity` and `template` index [`ProcessResult::entities`] and
/// [`ProcessResult::template_ids`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch {
    pub key_id: u32,
    /// The 64-bit routing key (its 16-hex form is the reference's `routingKey`).
    pub routing_key: Option<u64>,
    /// The source offset (the reference's decimal `watermark`).
    pub watermark: i64,
    pub entity: u32,
    pub kind: TouchKind,
    pub template: Option<u32>,
}

/// Batch statistics (P12).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
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
    /// Complete mode only: changes some active template could not turn into fine keys
    /// (they got a template-key touch instead).
    pub uncovered_changes: f64,
    /// Complete mode only: control records (`reset`, `snapshot-start`, `snapshot-end`).
    pub control_records: f64,
}

/// A batch result (the reference's `ProcessResult` without the message envelope).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessResult {
    pub stream: String,
    pub processed_through: i64,
    /// In output order (P11).
    pub touches: Vec<Touch>,
    pub entities: Vec<JsString>,
    pub template_ids: Vec<String>,
    pub stats: ProcessStats,
    /// With a [`tuples::TupleMemory`] ([`process_row_refs_tracked`]): what the batch saw of
    /// its rows' tuples, for the memory if the batch is kept.
    pub tuples: Option<tuples::TupleChanges>,
}

impl ProcessResult {
    pub fn entity(&self, t: &Touch) -> &JsString {
        &self.entities[t.entity as usize]
    }

    pub fn template_id(&self, t: &Touch) -> Option<&str> {
        t.template.map(|i| self.template_ids[i as usize].as_str())
    }
}

#[cfg(test)]
mod row_buffer_tests {
    use super::*;

    #[test]
    fn spare_buffers_come_back_empty_with_their_room_and_only_a_few_are_kept() {
        let spares = Spares::new(2, 1024);
        let mut a = Vec::with_capacity(512);
        a.extend_from_slice(b"payload");
        let a_ptr = a.as_ptr();
        spares.put(a);
        let again = spares.take(100);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), a_ptr, "the kept buffer is the one handed out");
        assert!(again.capacity() >= 512);
        // Too big, or empty: not kept.
        spares.put(Vec::with_capacity(2048));
        spares.put(Vec::new());
        assert_eq!(spares.take(0).capacity(), 0);
        // At most `count` are kept; a taken one has room for what was asked.
        for _ in 0..3 {
            spares.put(Vec::with_capacity(64));
        }
        assert_eq!(spares.buffers.lock().len(), 2);
        assert!(spares.take(4096).capacity() >= 4096);
    }

    #[test]
    fn a_dropped_row_buffer_leaves_its_rows_behind() {
        let mut b = RowBuffer::with_spare_bytes();
        b.push(1, 0.0, b"first");
        drop(b);
        // Whatever buffer comes next (this one or another test's), it starts empty.
        let mut c = RowBuffer::with_spare_bytes();
        assert!(c.is_empty());
        c.push(2, 0.0, b"x");
        assert_eq!(c.iter().map(|r| r.payload).collect::<Vec<_>>(), vec![&b"x"[..]]);
    }

    #[test]
    fn a_row_buffer_yields_its_rows() {
        let b = RowBuffer::new(vec![4, 7, 9], vec![1.0, 2.0, f64::NAN], vec![2, 2, 5], b"abcde".to_vec()).unwrap();
        let rows: Vec<(i64, &[u8])> = b.iter().map(|r| (r.offset, r.payload)).collect();
        assert_eq!(rows, vec![(4, &b"ab"[..]), (7, &b""[..]), (9, &b"cde"[..])]);
        assert!(b.iter().nth(2).unwrap().ts_ms.is_nan());
        assert_eq!(b.len(), 3);
        assert!(RowBuffer::new(vec![], vec![], vec![], vec![]).unwrap().is_empty());
    }

    #[test]
    fn a_row_buffer_grows_and_shrinks_by_rows() {
        let mut b = RowBuffer::default();
        b.push(4, 1.0, b"ab");
        b.push(7, 2.0, b"");
        b.push(9, 3.0, b"cde");
        assert_eq!(b, RowBuffer::new(vec![4, 7, 9], vec![1.0, 2.0, 3.0], vec![2, 2, 5], b"abcde".to_vec()).unwrap());
        b.truncate(5);
        assert_eq!(b.len(), 3);
        b.truncate(1);
        assert_eq!(b, RowBuffer::new(vec![4], vec![1.0], vec![2], b"ab".to_vec()).unwrap());
        b.truncate(0);
        assert_eq!(b, RowBuffer::default());
    }

    #[test]
    fn a_bad_row_buffer_is_refused() {
        assert!(RowBuffer::new(vec![1], vec![], vec![1], b"a".to_vec()).is_none());
        assert!(RowBuffer::new(vec![1, 2], vec![0.0, 0.0], vec![2, 1], b"ab".to_vec()).is_none());
        assert!(RowBuffer::new(vec![1], vec![0.0], vec![3], b"ab".to_vec()).is_none());
    }
}
