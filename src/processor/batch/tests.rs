//! The P17 reference vectors and the P-item edge cases, on the pure batch function.

use super::*;
use crate::processor::{Mode, TouchSettings};

const TP: u32 = 3117452744;
const TU: u32 = 485442817;
const TK: u32 = 125756624;
const W42: u32 = 2528729918;
const M42: u32 = 1042752078;
const F42T: u32 = 1617705133;
const W43: u32 = 3556602687;
const M43: u32 = 2231537764;
const F43I: u32 = 2754121421;
const F43T: u32 = 4221432742;

fn img(author: u32, title: &str) -> String {
    format!(r#"{{"id":1,"authorId":{author},"status":"published","title":"{title}"}}"#)
}

/// The eight P17 rows.
pub(crate) fn p17_rows() -> Vec<Row> {
    let payloads = [
        format!(r#"{{"type":"public.posts","key":"1","value":{},"headers":{{"operation":"insert"}}}}"#, img(42, "A")),
        format!(
            r#"{{"type":"public.posts","key":"1","value":{},"old_value":{},"headers":{{"operation":"update"}}}}"#,
            img(42, "B"),
            img(42, "A")
        ),
        format!(
            r#"{{"type":"public.posts","key":"1","value":{},"old_value":{},"headers":{{"operation":"update"}}}}"#,
            img(43, "B"),
            img(42, "B")
        ),
        format!(r#"{{"type":"public.posts","key":"1","value":{},"headers":{{"operation":"update"}}}}"#, img(43, "C")),
        format!(
            r#"{{"type":"public.posts","key":"1","old_value":{},"headers":{{"operation":"delete"}}}}"#,
            img(43, "C")
        ),
        r#"{"headers":{"control":"reset"}}"#.to_string(),
        "{not json".to_string(),
        r#"{"type":"public.users","key":"9","value":{"id":9},"headers":{"operation":"insert"}}"#.to_string(),
    ];
    let ts = [1000.0, 1010.0, 1020.0, 1030.0, 1500.0, 1600.0, 1650.0, 1700.0];
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Row { offset: i as i64, ts_ms: ts[i], payload: p.clone().into_bytes() })
        .collect()
}

pub(crate) fn p17_template() -> TemplateRow {
    TemplateRow {
        template_id: "87e41f4a8d440298".into(),
        entity: "public.posts".into(),
        fields: vec!["authorId".into(), "status".into()],
        encodings: vec!["int64".into(), "string".into()],
        active_from_source_offset: 0,
    }
}

fn settings(on_missing_before: OnMissingBefore, coarse: f64) -> TouchSettings {
    TouchSettings {
        coarse_interval_ms: Some(coarse),
        touch_coalesce_window_ms: Some(100.0),
        on_missing_before,
        fine_touch_budget_per_batch: Some(2000.0),
    }
}

fn request(on_missing_before: OnMissingBefore) -> ProcessRequest {
    let mut r = ProcessRequest::new("s", 0, 7, settings(on_missing_before, 100.0));
    r.max_rows = 500.0;
    r.max_bytes = 4.0 * 1024.0 * 1024.0;
    r
}

/// The request of P17 run A.
pub(crate) fn p17_request() -> ProcessRequest {
    request(OnMissingBefore::Coarse)
}

fn run(req: &ProcessRequest) -> Result<ProcessResult> {
    process_rows(req, &p17_rows(), &[p17_template()])
}

fn ids(r: &ProcessResult) -> Vec<(u32, i64)> {
    r.touches.iter().map(|t| (t.key_id, t.watermark)).collect()
}

#[test]
fn p17_payload_lengths() {
    let lens: Vec<usize> = p17_rows().iter().map(|r| r.payload.len()).collect();
    assert_eq!(lens, [130, 198, 198, 130, 134, 31, 9, 83]);
}

#[test]
fn p17_a_key_granularity_coarse_policy() {
    let r = run(&request(OnMissingBefore::Coarse)).unwrap();
    assert_eq!(
        ids(&r),
        [(TU, 7), (M42, 2), (F42T, 1), (M43, 2), (M43, 4), (W42, 2), (TP, 3), (TP, 4), (W43, 2), (W43, 4)]
    );
    assert_eq!(r.processed_through, 7);
    let s = &r.stats;
    assert_eq!((s.rows_read, s.bytes_read, s.changes, s.touches_emitted), (8.0, 913.0, 6.0, 10.0));
    assert_eq!((s.table_touches_emitted, s.template_touches_emitted, s.max_source_ts_ms), (3.0, 7.0, 1700.0));
    assert!(!s.fine_touches_suppressed_due_to_budget);
    // Table touches carry no routing key; fine ones carry the watch key.
    let tu = &r.touches[0];
    assert_eq!((tu.kind, tu.routing_key, r.entity(tu).to_string()), (TouchKind::Table, None, "public.users".into()));
    let w42 = r.touches.iter().find(|t| t.key_id == W42).unwrap();
    assert_eq!(keys::hex16(w42.routing_key.unwrap()), "47fdf51496b95b3e");
    assert_eq!(r.template_id(w42), Some("87e41f4a8d440298"));
}

#[test]
fn p17_b_skip_before() {
    let r = run(&request(OnMissingBefore::SkipBefore)).unwrap();
    assert_eq!(
        ids(&r),
        [
            (TU, 7),
            (M42, 2),
            (F42T, 1),
            (M43, 3),
            (M43, 4),
            (W42, 2),
            (F43I, 3),
            (TP, 3),
            (TP, 4),
            (W43, 3),
            (W43, 4),
            (F43T, 3)
        ]
    );
}

#[test]
fn p17_c_error_policy() {
    let err = run(&request(OnMissingBefore::Error)).unwrap_err();
    assert_eq!(
        err,
        Error::Processing("missing old_value for update (entity=public.posts, templateId=87e41f4a8d440298)".into())
    );
    assert_eq!(err.code(), "ERR_PROCESSING");
}

#[test]
fn p17_d_template_hot_templates_only() {
    let mut req = request(OnMissingBefore::Coarse);
    req.fine_granularity = Granularity::Template;
    req.processing_mode = Mode::HotTemplatesOnly;
    req.fine_touch_budget = Some(200.0);
    assert_eq!(ids(&run(&req).unwrap()), [(TK, 4), (TU, 7), (TP, 3), (TP, 4)]);
}

#[test]
fn p17_e_budget_of_two() {
    let mut req = request(OnMissingBefore::Coarse);
    req.fine_touch_budget = Some(2.0);
    let r = run(&req).unwrap();
    assert_eq!(ids(&r), [(TU, 7), (M42, 0), (W42, 1), (TP, 3), (TP, 4)]);
    assert_eq!(r.stats.fine_touches_dropped_due_to_budget, 1.0);
    assert!(r.stats.fine_touches_suppressed_due_to_budget);
}

#[test]
fn p17_f_fine_off_max_rows_three() {
    let mut req = request(OnMissingBefore::Coarse);
    req.emit_fine_touches = false;
    req.max_rows = 3.0;
    let r = run(&req).unwrap();
    assert_eq!(ids(&r), [(TP, 2)]);
    assert_eq!(r.processed_through, 2);
    assert_eq!((r.stats.rows_read, r.stats.bytes_read, r.stats.max_source_ts_ms), (3.0, 526.0, 1020.0));
}

#[test]
fn p17_g_empty_hot_set() {
    let mut req = request(OnMissingBefore::Coarse);
    req.filter_hot_templates = true;
    let r = run(&req).unwrap();
    assert_eq!(ids(&r), [(TU, 7), (TP, 3), (TP, 4)]);
    assert_eq!(r.stats.fine_touches_skipped_cold_template, 5.0);
}

#[test]
fn p17_h_template_granularity_full() {
    let mut req = request(OnMissingBefore::Coarse);
    req.fine_granularity = Granularity::Template;
    assert_eq!(ids(&run(&req).unwrap()), [(TK, 3), (TK, 4), (TU, 7), (TP, 3), (TP, 4)]);
}

#[test]
fn p17_i_coarse_interval_1000() {
    let mut req = request(OnMissingBefore::Coarse);
    req.touch = settings(OnMissingBefore::Coarse, 1000.0);
    let r = run(&req).unwrap();
    assert_eq!(ids(&r), [(TU, 7), (M42, 2), (F42T, 1), (M43, 2), (M43, 4), (W42, 2), (TP, 4), (W43, 2), (W43, 4)]);
}

#[test]
fn ranges_limits_and_bad_rows() {
    // Empty range: nothing read, processedThrough = from - 1.
    let mut req = request(OnMissingBefore::Coarse);
    req.from_offset = 5;
    req.to_offset = 4;
    let r = run(&req).unwrap();
    assert_eq!((r.processed_through, r.stats.rows_read, r.touches.len()), (4, 0.0, 0));
    // The first row is always taken, even over maxBytes.
    let mut req = request(OnMissingBefore::Coarse);
    req.max_bytes = 1.0;
    let r = run(&req).unwrap();
    assert_eq!((r.processed_through, r.stats.rows_read), (0, 1.0));
    // Non-finite ts: counted, nothing derived.
    let mut rows = p17_rows();
    rows[0].ts_ms = f64::NAN;
    let r = process_rows(&request(OnMissingBefore::Coarse), &rows[..1], &[p17_template()]).unwrap();
    assert_eq!((r.stats.rows_read, r.stats.changes, r.touches.len(), r.processed_through), (1.0, 0.0, 0, 0));
    // Offsets must ascend.
    let mut rows = p17_rows();
    rows.swap(0, 1);
    assert_eq!(process_rows(&request(OnMissingBefore::Coarse), &rows, &[]).unwrap_err().code(), "ERR_INVALID_ARGUMENT");
}

#[test]
fn bad_templates_are_skipped() {
    let mut bad = vec![p17_template(); 5];
    bad[0].template_id = "87E41F4A8D440298".into();
    bad[1].entity = " ".into();
    bad[2].encodings = vec!["int64".into()];
    bad[3].encodings = vec!["int64".into(), "uuid".into()];
    bad[4].fields = vec![];
    bad[4].encodings = vec![];
    let r = process_rows(&request(OnMissingBefore::Coarse), &p17_rows(), &bad).unwrap();
    assert_eq!(ids(&r), [(TU, 7), (TP, 3), (TP, 4)]);
}

#[test]
fn a_nan_budget_never_runs_out() {
    let mut req = request(OnMissingBefore::Coarse);
    req.fine_touch_budget = Some(f64::NAN);
    assert_eq!(run(&req).unwrap().touches.len(), 10);
    // An unlimited budget (null request budget, no per-batch budget in the profile).
    let mut req = request(OnMissingBefore::Coarse);
    req.touch.fine_touch_budget_per_batch = None;
    assert_eq!(run(&req).unwrap().touches.len(), 10);
}

/// `rows` cut before each index of `cuts`, as [`process_chunks`] receives them.
fn chunked(rows: &[Row], cuts: &[usize]) -> Vec<Result<RowBuffer>> {
    let mut out = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain([&rows.len()]) {
        out.push(Ok(rows[start..end].iter().collect()));
        start = end;
    }
    out
}

#[test]
fn chunks_give_the_batch_that_all_rows_at_once_give() {
    let rows = p17_rows();
    let templates = [p17_template()];
    for policy in [OnMissingBefore::Coarse, OnMissingBefore::SkipBefore, OnMissingBefore::Error] {
        for max_rows in [1.0, 3.0, 5.0, 500.0] {
            let mut req = request(policy);
            req.max_rows = max_rows;
            let whole = process_rows(&req, &rows, &templates);
            // Every way of cutting the eight rows in two or three chunks, empty chunks too.
            for a in 0..=rows.len() {
                for b in a..=rows.len() {
                    let got = process_chunks(&req, rows.len(), chunked(&rows, &[a, b]), &templates);
                    match (&got, &whole) {
                        (Ok(got), Ok(whole)) => assert_eq!(got, whole, "{policy:?} max {max_rows} cut {a} {b}"),
                        (Err(got), Err(whole)) => assert_eq!(got.to_string(), whole.to_string()),
                        _ => panic!("{policy:?} max {max_rows} cut {a} {b}: {got:?} vs {whole:?}"),
                    }
                }
            }
        }
    }
}

#[test]
fn an_input_error_in_any_chunk_fails_the_batch_even_after_it_ended() {
    let rows = p17_rows();
    let templates = [p17_template()];
    let bad = || Err(Error::invalid("rows[6].payload must be a Buffer"));
    let fails_with_input_error = |req: &ProcessRequest, chunks: Vec<Result<RowBuffer>>| {
        let e = process_chunks(req, rows.len(), chunks, &templates).unwrap_err();
        assert_eq!((e.code(), e.to_string().as_str()), ("ERR_INVALID_ARGUMENT", "rows[6].payload must be a Buffer"));
    };
    let mut chunks = chunked(&rows, &[4]);
    chunks.insert(1, bad());
    fails_with_input_error(&p17_request(), chunks);
    // The batch is full after one row (P4), and the error comes later.
    let mut full = p17_request();
    full.max_rows = 1.0;
    let mut chunks = chunked(&rows, &[4]);
    chunks.push(bad());
    fails_with_input_error(&full, chunks);
    // onMissingBefore "error" fails row 3 (an update without old_value); the input error that
    // follows still wins, as when all rows were read before the batch ran.
    let strict = request(OnMissingBefore::Error);
    assert_eq!(process_rows(&strict, &rows, &templates).unwrap_err().code(), "ERR_PROCESSING");
    let mut chunks = chunked(&rows, &[5]);
    chunks.push(bad());
    fails_with_input_error(&strict, chunks);
    // The first input error is the one reported.
    let mut chunks = chunked(&rows, &[2]);
    chunks.insert(1, bad());
    chunks.push(Err(Error::invalid("a later error")));
    fails_with_input_error(&p17_request(), chunks);
}

#[test]
fn offsets_must_ascend_across_chunks() {
    let rows = p17_rows();
    let mut chunks = chunked(&rows[..4], &[]);
    chunks.extend(chunked(&rows[3..], &[]));
    let e = process_chunks(&p17_request(), rows.len(), chunks, &[p17_template()]).unwrap_err();
    assert_eq!(e.to_string(), "rows must have strictly ascending offsets");
}
