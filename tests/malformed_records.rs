//! Property tests of the record → change → keys path on malformed and adversarial input:
//! arbitrary bytes, JSON-alphabet soup, generated records with odd shapes, deep nesting.
//!
//! Three independent readers must agree: the processor's shallow reader
//! (`changes::read_record`), the full `JSON.parse` port (`jscompat::json::parse` +
//! `changes::derive_change`), and serde_json as an outside oracle for JSON validity (where
//! its documented limits — depth 128, f64 overflow, lone surrogates — do not apply). And no
//! input may panic or overflow the stack anywhere, including a whole batch.

use durable_touch::changes::{decode_payload, derive_change, read_record, Field, Image, Record};
use durable_touch::jscompat::json::{self, Scalar, Value};
use durable_touch::processor::{process_rows, ProcessRequest, Row, TemplateRow, TouchSettings};
use durable_touch::spec::OnMissingBefore;
use proptest::prelude::*;

fn scalar_matches(fast: Field<'_>, full: Option<&Value>) -> bool {
    match (fast, full) {
        (Field::Undefined, None) => true,
        (Field::Value(Scalar::Null), Some(Value::Null)) => true,
        (Field::Value(Scalar::Bool(a)), Some(Value::Bool(b))) => a == *b,
        (Field::Value(Scalar::Number(t)), Some(Value::Number(n))) => {
            let v = json::number_value(t);
            v == *n && v.is_sign_negative() == n.is_sign_negative()
        }
        (Field::Value(Scalar::String(s)), Some(Value::String(j))) => *s.decode() == *j.as_bytes(),
        (Field::Value(Scalar::Object), Some(Value::Object(_))) => true,
        (Field::Value(Scalar::Array), Some(Value::Array(_))) => true,
        _ => false,
    }
}

fn image_matches(fast: &Image<'_>, full: Option<&Value>) -> bool {
    match (fast, full) {
        (Image::Absent, None) => true,
        (Image::NotObject, Some(v)) => !v.is_plain_object(),
        (Image::Object(_), Some(Value::Object(o))) => {
            // Same own keys in the same (JS) order, with the same values.
            let entries = fast.own_entries();
            let keys = o.keys();
            entries.len() == keys.len()
                && entries.iter().zip(&keys).all(|((n, _), k)| **n == *k.as_bytes())
                && keys.iter().all(|k| scalar_matches(fast.get(k.as_bytes()).unwrap(), o.get_bytes(k.as_bytes())))
        }
        _ => false,
    }
}

/// The fast reader agrees with JSON.parse + deriveStateProtocolChanges on `text`.
fn readers_agree(text: &str) -> Result<(), TestCaseError> {
    let fast = read_record(text, true);
    match json::parse(text) {
        Err(_) => prop_assert_eq!(fast, Record::NotJson, "full parser rejects, fast accepts: {:?}", text),
        Ok(v) => match (derive_change(&v), &fast) {
            (None, Record::NoChange) => {}
            (Some(c), Record::Change(f)) => {
                prop_assert_eq!(&*f.entity, c.entity.as_bytes());
                prop_assert_eq!(f.op, c.op);
                prop_assert!(image_matches(&f.before, c.before), "before differs for {:?}", text);
                prop_assert!(image_matches(&f.after, c.after), "after differs for {:?}", text);
            }
            (full, fast) => prop_assert!(false, "full {:?} vs fast {:?} for {:?}", full, fast, text),
        },
    }
    Ok(())
}

/// serde_json's verdict where it is a valid oracle for JSON.parse.
fn serde_agrees(text: &str) -> Result<(), TestCaseError> {
    let ours = json::parse(text).is_ok();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(_) => prop_assert!(ours, "serde accepts, we reject: {:?}", text),
        Err(e) => {
            let limits = e.to_string().contains("out of range")
                || e.to_string().contains("surrogate")
                || e.to_string().contains("hex escape")
                || e.to_string().contains("recursion limit");
            if !limits {
                prop_assert!(!ours, "serde rejects ({}), we accept: {:?}", e, text);
            }
        }
    }
    Ok(())
}

fn json_soup() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[\[\]{}":,0-9eE+\-. truefalsnbu\\/\t\n\r\u{e9}\u{1F600}]{0,48}"#).unwrap()
}

/// A JSON value of bounded depth whose strings exercise escapes and unicode.
fn json_value() -> impl Strategy<Value = String> {
    let string = prop_oneof![
        Just("\"\"".to_string()),
        "[a-zA-Z0-9 _]{0,6}".prop_map(|s| format!("\"{s}\"")),
        Just("\"\\u0074enantId\"".to_string()),
        Just("\"\\ud800\\udc00x\\ud800\"".to_string()),
        Just("\"tab\\t\\\"q\\\" \\/ é😀\"".to_string()),
    ];
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("-0".to_string()),
        Just("1e400".to_string()),
        Just("9007199254740993".to_string()),
        (-1000i64..1000).prop_map(|n| n.to_string()),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
        string.clone(),
    ];
    leaf.prop_recursive(4, 32, 6, move |inner| {
        let key = prop_oneof![
            Just("\"type\"".to_string()),
            Just("\"key\"".to_string()),
            Just("\"value\"".to_string()),
            Just("\"old_value\"".to_string()),
            Just("\"headers\"".to_string()),
            Just("\"operation\"".to_string()),
            Just("\"control\"".to_string()),
            Just("\"tenantId\"".to_string()),
            Just("\"1\"".to_string()),
            Just("\"0\"".to_string()),
            string.clone(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key, inner), 0..6).prop_map(|kv| format!(
                "{{{}}}",
                kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(",")
            )),
        ]
    })
}

/// State Protocol-shaped records with random members, values and operations.
fn record() -> impl Strategy<Value = String> {
    let op = prop_oneof![Just("\"insert\""), Just("\"update\""), Just("\"delete\""), Just("\"upsert\""), Just("1")];
    let image = prop_oneof![
        json_value(),
        prop::collection::vec(
            (prop_oneof![Just("tenantId"), Just("status"), Just("id"), Just("1"), Just("b")], json_value()),
            0..6
        )
        .prop_map(|kv| format!(
            "{{{}}}",
            kv.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect::<Vec<_>>().join(",")
        )),
    ];
    (
        prop_oneof![Just("\"public.e0\""), Just("\" public.e0 \""), Just("\"\""), Just("5"), Just("\"\\u00e9\"")],
        op,
        proptest::option::of(image.clone()),
        proptest::option::of(image),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(ty, op, value, old, control, dup)| {
            let mut parts = vec![format!("\"type\":{ty}"), "\"key\":\"k\"".to_string()];
            if let Some(v) = value {
                parts.push(format!("\"value\":{v}"));
            }
            if let Some(v) = old {
                parts.push(format!("\"old_value\":{v}"));
            }
            let control = if control { ",\"control\":\"reset\"" } else { "" };
            parts.push(format!("\"headers\":{{\"operation\":{op}{control}}}"));
            if dup {
                parts.push("\"type\":\"public.e1\"".to_string());
            }
            format!("{{{}}}", parts.join(","))
        })
}

fn templates() -> Vec<TemplateRow> {
    let t = |id: &str, entity: &str, fields: &[&str], enc: &[&str]| TemplateRow {
        template_id: id.into(),
        entity: entity.into(),
        fields: fields.iter().map(|f| (*f).into()).collect(),
        encodings: enc.iter().map(|e| (*e).to_string()).collect(),
        active_from_source_offset: 0,
    };
    vec![
        t("0123456789abcdef", "public.e0", &["tenantId"], &["string"]),
        t("1123456789abcdef", "public.e0", &["id", "status"], &["int64", "bool"]),
        t("2123456789abcdef", "public.e1", &["tenantId"], &["datetime"]),
        t("3123456789abcdef", " public.e0 ", &["1"], &["bytes"]),
    ]
}

/// Runs one batch; when it succeeds, checks what holds for any batch (every row read, touches
/// in order). Returns the outcome for callers that expect one.
fn batch(
    payloads: Vec<Vec<u8>>,
    on_missing_before: OnMissingBefore,
    budget: Option<f64>,
) -> durable_touch::Result<durable_touch::processor::ProcessResult> {
    let rows: Vec<Row> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, p)| Row { offset: i as i64, ts_ms: (i * 7) as f64, payload: p })
        .collect();
    let settings = TouchSettings {
        coarse_interval_ms: Some(10.0),
        touch_coalesce_window_ms: Some(10.0),
        on_missing_before,
        fine_touch_budget_per_batch: budget,
    };
    let n = rows.len() as i64;
    let req = ProcessRequest::new("s", 0, n - 1, settings);
    let result = process_rows(&req, &rows, &templates());
    if let Ok(r) = &result {
        assert_eq!(r.stats.rows_read as i64, n);
        let key = |t: &durable_touch::processor::Touch| {
            (t.key_id, t.routing_key.map_or(0u128, |r| r as u128 + 1), t.watermark)
        };
        assert!(r.touches.windows(2).all(|w| key(&w[0]) <= key(&w[1])));
    }
    result
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_readers_agree(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let text = decode_payload(&bytes);
        readers_agree(&text)?;
    }

    #[test]
    fn json_alphabet_soup_matches_serde_validity(text in json_soup()) {
        serde_agrees(&text)?;
        readers_agree(&text)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn generated_values_parse_identically(text in json_value()) {
        prop_assert!(json::parse(&text).is_ok(), "{}", text);
        serde_agrees(&text)?;
        readers_agree(&text)?;
    }

    #[test]
    fn generated_records_agree_and_process(recs in prop::collection::vec(record(), 1..12), mode in 0u8..3, budget in proptest::option::of(0f64..5.0)) {
        for r in &recs {
            readers_agree(r)?;
        }
        let policy = [OnMissingBefore::Coarse, OnMissingBefore::SkipBefore, OnMissingBefore::Error][mode as usize];
        // Arbitrary records may be refused (onMissingBefore: error); no panic either way.
        let _either = batch(recs.into_iter().map(String::into_bytes).collect(), policy, budget);
    }

    #[test]
    fn mutated_records_never_panic(rec in record(), cut in 0usize..200, byte in any::<u8>(), at in 0usize..200) {
        let mut b = rec.into_bytes();
        let at = at.min(b.len());
        b.insert(at, byte);
        b.truncate(cut.max(1).min(b.len()));
        readers_agree(&decode_payload(&b))?;
        let _either = batch(vec![b], OnMissingBefore::SkipBefore, None);
    }
}

#[test]
fn deep_nesting_is_a_change_not_a_crash() {
    for depth in [127, 128, 129, 1_000, 100_000] {
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let text = format!(
            r#"{{"type":"public.e0","key":"k","value":{{"tenantId":"t1","deep":{deep}}},"headers":{{"operation":"insert"}}}}"#
        );
        let Record::Change(c) = read_record(&text, true) else { panic!("depth {depth}") };
        assert_eq!(c.after.get(b"deep"), Some(Field::Value(Scalar::Array)));
        readers_agree(&text).unwrap();
        let _either = batch(vec![text.into_bytes()], OnMissingBefore::Coarse, None);
        // Unbalanced: not JSON.
        let broken = format!("{{\"value\":{}1{}}}", "[".repeat(depth), "]".repeat(depth - 1));
        assert_eq!(read_record(&broken, true), Record::NotJson);
    }
}

#[test]
fn huge_rows_are_processed() {
    let title = "x".repeat(8 << 20);
    let text = format!(
        r#"{{"type":"public.e0","key":"k","value":{{"tenantId":"t1","title":"{title}"}},"headers":{{"operation":"insert"}}}}"#
    );
    let r = batch(vec![text.into_bytes(); 3], OnMissingBefore::Coarse, None).expect("huge rows are processed");
    assert_eq!(r.stats.rows_read, 3.0);
    assert_eq!(r.stats.changes, 3.0, "each 8 MiB row is a change");
    assert!(r.stats.bytes_read >= 3.0 * (8 << 20) as f64);
    assert!(r.stats.touches_emitted > 0.0, "the changes touch their table");
}
