//! Complete mode (the engine's, deviations.md B5, B6, B19): what it adds to the reference's
//! touches, and that without it nothing changes.

use super::*;
use crate::keys::{hex16, key_id, table_key, template_key};
use crate::processor::batch::tests::{p17_request, p17_template};

const TK: u32 = 125_756_624; // template key of 87e41f4a8d440298 (K17)

fn row(offset: i64, payload: &str) -> Row {
    Row { offset, ts_ms: 1000.0 + offset as f64, payload: payload.as_bytes().to_vec() }
}

fn run(rows: &[Row], complete: bool) -> ProcessResult {
    let mut req = p17_request();
    req.complete = complete;
    req.from_offset = rows[0].offset;
    req.to_offset = rows[rows.len() - 1].offset;
    process_rows(&req, rows, &[p17_template()]).unwrap()
}

fn has_key(r: &ProcessResult, key: u32) -> bool {
    r.touches.iter().any(|t| t.key_id == key)
}

#[test]
fn b5_changes_without_usable_images_get_the_template_key() {
    let cases = [
        r#"{"type":"public.posts","key":"1","headers":{"operation":"delete"}}"#,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"headers":{"operation":"update"}}"#,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"old_value":{"authorId":1},"headers":{"operation":"update"}}"#,
        r#"{"type":"public.posts","key":"1","old_value":null,"headers":{"operation":"delete"}}"#,
        // Values the template's encodings refuse: the tuple cannot be told.
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"old_value":{"authorId":2.5,"status":"a"},"headers":{"operation":"update"}}"#,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":{"x":1}},"old_value":{"authorId":1,"status":"a"},"headers":{"operation":"update"}}"#,
        r#"{"type":"public.posts","key":"1","value":{"authorId":"n/a","status":"a"},"headers":{"operation":"insert"}}"#,
    ];
    for c in cases {
        let rows = [row(0, c)];
        let reference = run(&rows, false);
        assert!(!has_key(&reference, TK), "the reference emits no fine key here: {c}");
        let complete = run(&rows, true);
        assert!(has_key(&complete, TK), "complete mode adds the template key: {c}");
        assert_eq!(complete.stats.uncovered_changes, 1.0);
    }
    // A full change is covered: nothing is added.
    let full = [row(
        0,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"old_value":{"authorId":2,"status":"a"},"headers":{"operation":"update"}}"#,
    )];
    assert_eq!(run(&full, true).touches, run(&full, false).touches);
    // A null field names no tuple: an insert with it concerns no waiter.
    let null = [row(
        0,
        r#"{"type":"public.posts","key":"1","value":{"authorId":null,"status":"a"},"headers":{"operation":"insert"}}"#,
    )];
    assert_eq!(run(&null, true).stats.uncovered_changes, 0.0);
    // A row moving from a null member into a tuple enters it: its watch and membership keys
    // fire (the reference emits only the table key), and nothing else is needed.
    let enters = [row(
        0,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"old_value":{"authorId":null,"status":"a"},"headers":{"operation":"update"}}"#,
    )];
    let bits = 0x87e4_1f4a_8d44_0298;
    let (watch, member) =
        (key_id(crate::keys::watch_key(bits, &["1", "a"])), key_id(crate::keys::membership_key(bits, &["1", "a"])));
    let reference = run(&enters, false);
    assert!(!has_key(&reference, watch) && !has_key(&reference, member));
    let complete = run(&enters, true);
    assert!(has_key(&complete, watch) && has_key(&complete, member));
    assert!(!has_key(&complete, TK));
    assert_eq!(complete.stats.uncovered_changes, 0.0);
    // And leaving a tuple for a null member fires the tuple left, as the reference does.
    let leaves = [row(
        0,
        r#"{"type":"public.posts","key":"1","value":{"authorId":null,"status":"a"},"old_value":{"authorId":1,"status":"a"},"headers":{"operation":"update"}}"#,
    )];
    let complete = run(&leaves, true);
    assert!(has_key(&complete, watch) && has_key(&complete, member));
    assert_eq!(complete.stats.uncovered_changes, 0.0);
}

#[test]
fn b6_object_fields_fire_their_projected_key() {
    let rows = [row(
        0,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a","tags":["x","y"]},"old_value":{"authorId":1,"status":"a","tags":["x"]},"headers":{"operation":"update"}}"#,
    )];
    let bits = 0x87e4_1f4a_8d44_0298;
    let tags = key_id(crate::keys::projected_field_key(bits, b"tags", &["1", "a"]));
    assert!(!has_key(&run(&rows, false), tags), "the reference never keys object fields (B6)");
    assert!(has_key(&run(&rows, true), tags));
}

#[test]
fn b19_untrimmed_types_match_templates_and_table_keys_of_the_trimmed_entity() {
    let rows = [row(
        0,
        r#"{"type":" public.posts ","key":"1","value":{"authorId":42,"status":"published"},"headers":{"operation":"insert"}}"#,
    )];
    let trimmed_table = key_id(table_key(b"public.posts"));
    let reference = run(&rows, false);
    assert!(!has_key(&reference, trimmed_table));
    assert_eq!(reference.stats.template_touches_emitted, 0.0);
    let complete = run(&rows, true);
    assert!(has_key(&complete, trimmed_table));
    assert!(has_key(&complete, 2_528_729_918), "the watch key of (42, published), K17");
}

#[test]
fn control_records_are_counted_only_in_complete_mode() {
    let rows = [row(0, r#"{"headers":{"control":"reset"}}"#), row(1, r#"{"headers":{"control":"snapshot-end"}}"#)];
    assert_eq!(run(&rows, false).stats.control_records, 0.0);
    assert_eq!(run(&rows, true).stats.control_records, 2.0);
    assert_eq!(hex16(template_key(0)).len(), 16);
}

#[test]
fn the_tuple_memory_names_the_tuple_a_row_leaves_when_the_record_does_not() {
    use crate::processor::tuples::TupleMemory;
    let bits = 0x87e4_1f4a_8d44_0298;
    let watch = |a: &str, s: &str| key_id(crate::keys::watch_key(bits, &[a, s]));
    let member = |a: &str, s: &str| key_id(crate::keys::membership_key(bits, &[a, s]));
    let mut memory = TupleMemory::new(1000);
    let batch = |rows: &[Row], memory: &mut TupleMemory| {
        let mut req = p17_request();
        req.complete = true;
        req.from_offset = rows[0].offset;
        req.to_offset = rows[rows.len() - 1].offset;
        let mut r = process_row_refs_tracked(&req, rows.len(), rows.iter().map(Row::as_ref), &[p17_template()], memory)
            .unwrap();
        memory.apply(r.tuples.take().unwrap());
        r
    };
    batch(
        &[row(
            0,
            r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"headers":{"operation":"insert"}}"#,
        )],
        &mut memory,
    );
    assert_eq!(memory.len(), 1);
    // An update without old_value: the memory says the row was in (1, a).
    let moved = batch(
        &[row(
            1,
            r#"{"type":"public.posts","key":"1","value":{"authorId":2,"status":"a"},"headers":{"operation":"update"}}"#,
        )],
        &mut memory,
    );
    for k in [watch("1", "a"), member("1", "a"), watch("2", "a"), member("2", "a")] {
        assert!(has_key(&moved, k), "{k}");
    }
    assert!(!has_key(&moved, TK), "no template key");
    assert_eq!(moved.stats.uncovered_changes, 0.0);
    // Within one batch: the second update without old_value sees the first's after tuple,
    // and a same-tuple update fires projected keys for the fields it holds.
    let two = batch(
        &[
            row(
                2,
                r#"{"type":"public.posts","key":"1","value":{"authorId":3,"status":"a"},"headers":{"operation":"update"}}"#,
            ),
            row(
                3,
                r#"{"type":"public.posts","key":"1","value":{"authorId":3,"status":"a","title":"x"},"headers":{"operation":"update"}}"#,
            ),
        ],
        &mut memory,
    );
    assert!(has_key(&two, watch("2", "a")) && has_key(&two, watch("3", "a")) && !has_key(&two, TK));
    assert!(has_key(&two, key_id(crate::keys::projected_field_key(bits, b"title", &["3", "a"]))));
    // A delete without old_value leaves the tuple it names; the row is forgotten after.
    let deleted =
        batch(&[row(4, r#"{"type":"public.posts","key":"1","headers":{"operation":"delete"}}"#)], &mut memory);
    assert!(has_key(&deleted, watch("3", "a")) && has_key(&deleted, member("3", "a")) && !has_key(&deleted, TK));
    assert!(memory.is_empty());
    // A row the memory does not know, and any row after a reset: the template key.
    let unknown = batch(
        &[row(
            5,
            r#"{"type":"public.posts","key":"9","value":{"authorId":1,"status":"a"},"headers":{"operation":"update"}}"#,
        )],
        &mut memory,
    );
    assert!(has_key(&unknown, TK));
    batch(
        &[row(
            6,
            r#"{"type":"public.posts","key":"7","value":{"authorId":1,"status":"a"},"headers":{"operation":"insert"}}"#,
        )],
        &mut memory,
    );
    let reset = batch(
        &[
            row(7, r#"{"headers":{"control":"reset"}}"#),
            row(
                8,
                r#"{"type":"public.posts","key":"7","value":{"authorId":2,"status":"a"},"headers":{"operation":"update"}}"#,
            ),
        ],
        &mut memory,
    );
    assert!(has_key(&reset, TK), "forgotten by the reset");
    // Without complete mode the memory is not read (the reference's output).
    let mut req = p17_request();
    req.from_offset = 9;
    req.to_offset = 9;
    let rows = [row(
        9,
        r#"{"type":"public.posts","key":"7","value":{"authorId":3,"status":"a"},"headers":{"operation":"update"}}"#,
    )];
    let plain = process_row_refs_tracked(&req, 1, rows.iter().map(Row::as_ref), &[p17_template()], &memory).unwrap();
    assert_eq!(plain.touches, run(&rows, false).touches);
    assert!(plain.tuples.is_none());
}

#[test]
fn a_row_changed_in_a_coarsened_batch_is_forgotten() {
    use crate::processor::tuples::TupleMemory;
    let mut memory = TupleMemory::new(1000);
    let insert = [row(
        0,
        r#"{"type":"public.posts","key":"1","value":{"authorId":1,"status":"a"},"headers":{"operation":"insert"}}"#,
    )];
    let mut req = p17_request();
    req.complete = true;
    req.from_offset = 0;
    req.to_offset = 0;
    let mut r = process_row_refs_tracked(&req, 1, insert.iter().map(Row::as_ref), &[p17_template()], &memory).unwrap();
    memory.apply(r.tuples.take().unwrap());
    assert_eq!(memory.len(), 1);
    // The same row changes while the stream is restricted: its new tuple is not computed.
    let update = [row(
        1,
        r#"{"type":"public.posts","key":"1","value":{"authorId":2,"status":"a"},"old_value":{"authorId":1,"status":"a"},"headers":{"operation":"update"}}"#,
    )];
    let mut req = p17_request();
    req.complete = true;
    req.from_offset = 1;
    req.to_offset = 1;
    req.fine_granularity = Granularity::Template;
    let mut r = process_row_refs_tracked(&req, 1, update.iter().map(Row::as_ref), &[p17_template()], &memory).unwrap();
    memory.apply(r.tuples.take().unwrap());
    assert!(memory.is_empty(), "a stale tuple would name the wrong one later");
}
