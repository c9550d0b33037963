//! Coalescing online, deferred to the finish, and switching between the two part way
//! ([`Switches`]): on random batches without a fine budget (the only batches that defer), every
//! way must give the same result as staying online, touch for touch and stat for stat. Windows include 0, NaN and negatives (every touch
//! closes its entry), timestamps repeat, go backwards and are non-finite; entities are
//! untrimmed (B19, complete mode); templates mix granularities and hot-template modes.

use proptest::prelude::*;

use super::*;
use crate::processor::{Mode, TouchSettings};

const FIELDS: [&str; 4] = ["x", "y", "z", "w"];

fn field_value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => prop::sample::select(vec!["\"1\"", "\"2\"", "3", "null", "true", "{\"a\":1}", "[1]", "\"\\u0031\""])
            .prop_map(|v| Some(v.to_string())),
        1 => Just(None),
    ]
}

fn image() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => prop::collection::vec(field_value(), FIELDS.len()).prop_map(|vals| {
            let members: Vec<String> =
                FIELDS.iter().zip(vals).filter_map(|(f, v)| v.map(|v| format!("\"{f}\":{v}"))).collect();
            Some(format!("{{{}}}", members.join(",")))
        }),
        1 => Just(Some("null".to_string())),
        1 => Just(None),
    ]
}

fn payload() -> impl Strategy<Value = String> {
    let entity = prop::sample::select(vec!["a", "b", " a", "c"]);
    let op = prop::sample::select(vec!["insert", "update", "delete", "upsert"]);
    (entity, op, image(), image(), 0..12u8).prop_map(|(entity, op, after, before, shape)| match shape {
        0 => "{\"headers\":{\"control\":\"reset\"}}".to_string(),
        1 => "{not json".to_string(),
        _ => {
            let mut s = format!("{{\"type\":\"{entity}\",\"key\":\"k\"");
            if let Some(v) = after {
                s += &format!(",\"value\":{v}");
            }
            if let Some(v) = before {
                s += &format!(",\"old_value\":{v}");
            }
            s + &format!(",\"headers\":{{\"operation\":\"{op}\"}}}}")
        }
    })
}

fn timestamp() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.0..400.0f64,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
    ]
}

fn rows() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec((payload(), timestamp(), 1..3i64, any::<bool>()), 0..40).prop_map(|rows| {
        let (mut offset, mut ts) = (0i64, 1000.0f64);
        rows.into_iter()
            .map(|(payload, dt, gap, backwards)| {
                offset += gap;
                // Mostly ascending time, sometimes back in time or not finite.
                ts = if !dt.is_finite() {
                    ts
                } else if backwards {
                    ts - dt / 4.0
                } else {
                    ts + dt.floor()
                };
                Row { offset, ts_ms: if dt.is_finite() { ts } else { dt }, payload: payload.into_bytes() }
            })
            .collect()
    })
}

fn templates() -> Vec<TemplateRow> {
    let t = |id: &str, entity: &str, fields: &[&str], enc: &[&str], from: i64| TemplateRow {
        template_id: id.into(),
        entity: entity.into(),
        fields: fields.iter().map(|f| (*f).into()).collect(),
        encodings: enc.iter().map(|e| (*e).to_string()).collect(),
        active_from_source_offset: from,
    };
    vec![
        t("00000000000000a1", "a", &["x"], &["string"], 0),
        t("00000000000000a2", "a", &["x", "y"], &["string", "int64"], 5),
        t("00000000000000a3", "a", &["y"], &["bool"], 0),
        t("00000000000000b1", "b", &["z", "x"], &["string", "string"], 0),
        t("00000000000000c1", "c", &["w"], &["string"], 20),
    ]
}

fn window() -> impl Strategy<Value = Option<f64>> {
    prop::sample::select(vec![
        None,
        Some(0.0),
        Some(1.0),
        Some(50.0),
        Some(100.0),
        Some(f64::NAN),
        Some(-5.0),
        Some(1e12),
    ])
}

fn request() -> impl Strategy<Value = ProcessRequest> {
    let on_missing =
        prop::sample::select(vec![OnMissingBefore::Coarse, OnMissingBefore::SkipBefore, OnMissingBefore::Error]);
    (window(), window(), on_missing, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>())
        .prop_map(|(coarse, fine, on_missing_before, template, hot_only, filter, complete, emit_fine)| {
            let touch = TouchSettings {
                coarse_interval_ms: coarse,
                touch_coalesce_window_ms: fine,
                on_missing_before,
                fine_touch_budget_per_batch: None,
            };
            let mut r = ProcessRequest::new("s", 0, 1000, touch);
            r.emit_fine_touches = emit_fine;
            r.fine_granularity = if template { Granularity::Template } else { Granularity::Key };
            r.processing_mode = if hot_only { Mode::HotTemplatesOnly } else { Mode::Full };
            r.filter_hot_templates = filter;
            r.hot_template_ids = vec!["00000000000000a1".into(), "00000000000000b1".into()];
            r.complete = complete;
            r
        })
}

const ONLINE: Switches = Switches { defer_at: usize::MAX, max_repeats: 0, record_limit: usize::MAX };
/// Deferred from the first touch on.
const AT_FINISH: Switches = Switches { defer_at: 1, max_repeats: usize::MAX, record_limit: usize::MAX };

fn run(req: &ProcessRequest, rows: &[Row], switches: Switches) -> Result<ProcessResult> {
    process_with(req, rows.len(), rows.iter().map(Row::as_ref), &templates(), Some(switches))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn coalescing_at_finish_matches_online(
        req in request(),
        rows in rows(),
        defer_at in 1..40usize,
        max_repeats in 1..4usize,
        record_limit in 1..80usize,
    ) {
        prop_assert!(req.plan().unwrap().budget.is_none());
        let online = run(&req, &rows, ONLINE);
        // All at finish; deferred part way; deferred and back online part way; deferred
        // (or not) by the repeat rule.
        let part_way = Switches { defer_at, max_repeats: usize::MAX, record_limit: usize::MAX };
        let back = Switches { record_limit, ..part_way };
        let by_rule = Switches { defer_at, max_repeats, record_limit };
        for at_finish in [run(&req, &rows, AT_FINISH), run(&req, &rows, part_way), run(&req, &rows, back), run(&req, &rows, by_rule)] {
            match (&online, at_finish) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, &b),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "online {:?} vs at finish {:?}", a.as_ref().map(|r| r.touches.len()), b.map(|r| r.touches.len())),
            }
        }
    }
}

/// Both modes on the same rows: a window that closes on every touch, and one that never does.
#[test]
fn windows_close_alike() {
    let rows: Vec<Row> = (0..6)
        .map(|i| Row {
            offset: i,
            ts_ms: 1000.0 + (i / 2) as f64,
            payload: format!(
                r#"{{"type":"a","key":"k","value":{{"x":"{}"}},"headers":{{"operation":"insert"}}}}"#,
                i % 2
            )
            .into_bytes(),
        })
        .collect();
    for window in [0.0, 1e9] {
        let touch = TouchSettings {
            coarse_interval_ms: Some(window),
            touch_coalesce_window_ms: Some(window),
            on_missing_before: OnMissingBefore::Coarse,
            fine_touch_budget_per_batch: None,
        };
        let req = ProcessRequest::new("s", 0, 10, touch);
        let online = run(&req, &rows, ONLINE).unwrap();
        let at_finish = run(&req, &rows, AT_FINISH).unwrap();
        assert_eq!(online, at_finish);
        // Window 0 is floored to 1 ms (P1): rows 2 apart in time never share a window; a huge
        // window folds everything into one touch per key (table, x=0, x=1: 3 keys × 2 kinds).
        let table = online.touches.iter().filter(|t| t.kind == TouchKind::Table).count();
        assert_eq!(table, if window == 0.0 { 3 } else { 1 });
    }
}

/// One entry can hold a table touch and a template touch when their key ids collide (32-bit
/// ids: entity "e8434"'s table key and template 00000000002d3aae's template key, found by a
/// birthday search). hotTemplatesOnly queues template touches after all rows, with an older
/// watermark, so the entry's touches are not in watermark order and P11's sort must reorder
/// them in both modes.
#[test]
fn an_entry_shared_by_table_and_template_touches_sorts_by_watermark() {
    let table = keys::key_id(keys::table_key(b"e8434"));
    let template = TemplateRow {
        template_id: "00000000002d3aae".into(),
        entity: "a".into(),
        fields: vec!["x".into()],
        encodings: vec!["string".into()],
        active_from_source_offset: 0,
    };
    assert_eq!(table, keys::key_id(keys::template_key(keys::template_bits(&template.template_id).unwrap())));
    let row = |offset: i64, ts: f64, entity: &str| Row {
        offset,
        ts_ms: ts,
        payload: format!(r#"{{"type":"{entity}","key":"k","value":{{"x":"1"}},"headers":{{"operation":"insert"}}}}"#)
            .into_bytes(),
    };
    let rows = [row(1, 1000.0, "a"), row(5, 1000.0, "e8434"), row(6, 1010.0, "e8434")];
    let touch = TouchSettings {
        coarse_interval_ms: Some(1.0),
        touch_coalesce_window_ms: Some(100.0),
        on_missing_before: OnMissingBefore::Coarse,
        fine_touch_budget_per_batch: None,
    };
    let mut req = ProcessRequest::new("s", 0, 10, touch);
    req.fine_granularity = Granularity::Template;
    req.processing_mode = Mode::HotTemplatesOnly;
    let results = [ONLINE, AT_FINISH].map(|c| {
        process_with(&req, rows.len(), rows.iter().map(Row::as_ref), std::slice::from_ref(&template), Some(c)).unwrap()
    });
    assert_eq!(results[0], results[1]);
    // Table touch @5 closed by @6; the open entry (@6) takes the template touch's watermark 1.
    let shared: Vec<i64> = results[1].touches.iter().filter(|t| t.key_id == table).map(|t| t.watermark).collect();
    assert_eq!(shared, [1, 5]);
}

/// Two watch keys whose key ids collide (the low 32 bits: template 00000000000000a1 with x =
/// "5158" and with x = "23805", found by a birthday search) share one key-id run, interleaved
/// in queue order. P11 orders the run by routing key and each routing key is its own entry,
/// coalesced on its own: both modes must give one touch per watch key, in routing-key order.
#[test]
fn colliding_watch_keys_are_separate_entries_in_routing_key_order() {
    let template = templates().remove(0);
    let bits = keys::template_bits(&template.template_id).unwrap();
    let [low, high] = [keys::watch_key(bits, &[b"5158"]), keys::watch_key(bits, &[b"23805"])];
    assert_eq!(keys::key_id(low), keys::key_id(high));
    assert!(low < high);
    let row = |offset: i64, x: &str| Row {
        offset,
        ts_ms: 1000.0 + offset as f64,
        payload: format!(r#"{{"type":"a","key":"k","value":{{"x":"{x}"}},"headers":{{"operation":"insert"}}}}"#)
            .into_bytes(),
    };
    // The higher routing key is queued first, and the two alternate.
    let rows = [row(1, "23805"), row(2, "5158"), row(3, "23805"), row(4, "5158")];
    let touch = TouchSettings {
        coarse_interval_ms: Some(1.0),
        touch_coalesce_window_ms: Some(1e9),
        on_missing_before: OnMissingBefore::Coarse,
        fine_touch_budget_per_batch: None,
    };
    let req = ProcessRequest::new("s", 0, 10, touch);
    let results = [ONLINE, AT_FINISH].map(|c| {
        process_with(&req, rows.len(), rows.iter().map(Row::as_ref), std::slice::from_ref(&template), Some(c)).unwrap()
    });
    assert_eq!(results[0], results[1]);
    let shared: Vec<(Option<u64>, i64)> = results[1]
        .touches
        .iter()
        .filter(|t| t.key_id == keys::key_id(low))
        .map(|t| (t.routing_key, t.watermark))
        .collect();
    assert_eq!(shared, [(Some(low), 4), (Some(high), 3)]);
}
