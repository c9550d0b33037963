use super::*;
use crate::store::schema;

fn db() -> Connection {
    let mut c = Connection::open_in_memory().unwrap();
    schema::init(&mut c).unwrap();
    c
}

fn decl(entity: &str, fields: &[(&str, &str)]) -> TemplateDecl {
    TemplateDecl {
        entity: entity.into(),
        fields: fields.iter().map(|(n, e)| FieldDecl { name: (*n).into(), encoding: (*e).into() }).collect(),
    }
}

fn activate(
    reg: &TemplateRegistry,
    c: &Connection,
    templates: &[TemplateDecl],
    limits: TemplateLimits,
    now_ms: i64,
) -> ActivateOutcome {
    reg.activate(
        c,
        &ActivateArgs {
            stream: "s",
            templates,
            inactivity_ttl_ms: 3_600_000.0,
            limits,
            active_from_touch_offset: "0123456789abcdef:0",
            active_from_source_offset: 7,
            now_ms,
        },
    )
    .unwrap()
}

#[test]
fn activation_canonicalizes_fields_and_stores_the_reference_row() {
    let c = db();
    let reg = TemplateRegistry::default();
    let out = activate(
        &reg,
        &c,
        &[decl(" public.posts ", &[("status", "string"), (" authorId", "int64")])],
        TemplateLimits::default(),
        1000,
    );
    assert_eq!(
        out.activated,
        vec![Activated {
            template_id: "87e41f4a8d440298".into(),
            active_from_touch_offset: "0123456789abcdef:0".into(),
            was_active: false,
        }]
    );
    let row: (String, String, String, String, i64, i64, i64) = c
        .query_row(
            "SELECT entity, fields_json, encodings_json, state, created_at_ms, last_seen_at_ms, active_from_source_offset FROM live_templates",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "public.posts".into(),
            r#"["authorId","status"]"#.into(),
            r#"["int64","string"]"#.into(),
            "active".into(),
            1000,
            1000,
            7
        )
    );
    assert_eq!(out.lifecycle[0].kind(), "live.template_activated");
    assert_eq!(active_count(&c, "s"), 1);
    let active = list_active_for_processing(&c, "s").unwrap();
    assert_eq!(active[0].fields, ["authorId", "status"]);
}

#[test]
fn invalid_declarations_are_denied_with_the_zero_id() {
    let c = db();
    let reg = TemplateRegistry::default();
    let bad = [
        decl("  ", &[("a", "string")]),
        decl("E", &[]),
        decl("E", &[("a", "string"), ("b", "string"), ("c", "string"), ("d", "string")]),
        decl("E", &[("a", "float")]),
        decl("E", &[(" ", "string")]),
        decl("E", &[("a", "string"), (" a", "int64")]),
    ];
    let out = activate(&reg, &c, &bad, TemplateLimits::default(), 0);
    assert!(out.activated.is_empty());
    assert_eq!(out.denied.len(), 6);
    assert!(out.denied.iter().all(|d| d.template_id == INVALID_TEMPLATE_ID && d.reason == "invalid"));
}

#[test]
fn t14_caps_rate_limit_and_rebinding() {
    let c = db();
    let reg = TemplateRegistry::default();
    let limits =
        TemplateLimits { max_active_per_stream: 100.0, max_active_per_entity: 2.0, activation_rate_per_minute: 100.0 };
    let three = [decl("E", &[("f1", "string")]), decl("E", &[("f2", "string")]), decl("E", &[("f3", "string")])];
    let out = activate(&reg, &c, &three, limits, 1000);
    let ids: Vec<_> = out.activated.iter().map(|a| a.template_id.as_str()).collect();
    // The reference reports all three as activated and evicts 5a5f… in the same call (B11);
    // we report the evicted one as denied instead.
    assert_eq!(ids, ["c438d92ad1ae224b", "e804f8a66c8ca5e0"]);
    assert_eq!(out.denied, vec![Denied { template_id: "5a5f6fd48ba9c64d".into(), reason: "cap_exceeded" }]);
    assert!(out.lifecycle.iter().any(|e| matches!(e, LifecycleEvent::Evicted { template_id, cap, .. } if template_id == "5a5f6fd48ba9c64d" && *cap == 2.0)));
    assert_eq!(active_count(&c, "s"), 2);

    // Rate 2/min: the third new declaration is rate limited.
    let c2 = db();
    let reg2 = TemplateRegistry::default();
    let slow = TemplateLimits { activation_rate_per_minute: 2.0, ..TemplateLimits::default() };
    let out = activate(&reg2, &c2, &three, slow, 1000);
    assert_eq!(out.activated.len(), 2);
    assert_eq!(out.denied, vec![Denied { template_id: "5a5f6fd48ba9c64d".into(), reason: "rate_limited" }]);
    // Re-declaring an active template costs no token.
    assert_eq!(activate(&reg2, &c2, &three[..1], slow, 1001).activated.len(), 1);
    // After 30 s one token is back.
    assert_eq!(activate(&reg2, &c2, &three[2..], slow, 31_000).activated.len(), 1);

    // An id stays bound to its first encodings (T4).
    let out = activate(&reg, &c, &[decl("E", &[("f1", "int64")])], limits, 2000);
    assert_eq!(out.denied, vec![Denied { template_id: "c438d92ad1ae224b".into(), reason: "invalid" }]);
}

#[test]
fn retired_templates_reactivate_from_the_new_source_offset() {
    let c = db();
    let reg = TemplateRegistry::default();
    activate(&reg, &c, &[decl("E", &[("a", "string")])], TemplateLimits::default(), 0);
    let retired = reg.gc_retire_expired(&c, "s", 3_600_000).unwrap();
    assert!(retired.is_empty(), "last seen (0) + ttl is not < now yet");
    let retired = reg.gc_retire_expired(&c, "s", 3_600_001).unwrap();
    assert_eq!(retired.len(), 1);
    match &retired[0] {
        LifecycleEvent::Retired { inactive_for_ms, last_seen_at, .. } => {
            assert_eq!(*inactive_for_ms, 3_600_001.0);
            assert_eq!(last_seen_at, "1970-01-01T00:00:00.000Z");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(active_count(&c, "s"), 0);
    let again = reg
        .activate(
            &c,
            &ActivateArgs {
                stream: "s",
                templates: &[decl("E", &[("a", "string")])],
                inactivity_ttl_ms: 1000.0,
                limits: TemplateLimits::default(),
                active_from_touch_offset: "x:1",
                active_from_source_offset: 42,
                now_ms: 4_000_000,
            },
        )
        .unwrap();
    assert_eq!(again.activated.len(), 1);
    let (from, reason): (i64, Option<String>) = c
        .query_row("SELECT active_from_source_offset, retired_reason FROM live_templates", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((from, reason), (42, None));
}

#[test]
fn heartbeats_keep_templates_alive_and_persist_in_batches() {
    let c = db();
    let reg = TemplateRegistry::default();
    let out = activate(&reg, &c, &[decl("E", &[("a", "string")])], TemplateLimits::default(), 0);
    let id = out.activated[0].template_id.clone();
    reg.heartbeat("s", &[format!(" {id} "), "NOT-HEX".into()], 3_000_000);
    assert!(reg.has_due_last_seen(3_000_000, 1000.0));
    assert_eq!(reg.flush_last_seen(&c, 3_000_000, 1000.0).unwrap(), 1);
    let seen: i64 = c.query_row("SELECT last_seen_at_ms FROM live_templates", [], |r| r.get(0)).unwrap();
    assert_eq!(seen, 3_000_000);
    reg.heartbeat("s", std::slice::from_ref(&id), 3_000_500);
    assert_eq!(reg.flush_last_seen(&c, 3_000_500, 1000.0).unwrap(), 0, "persisted less than the interval ago");
    // Not yet expired thanks to the in-memory heartbeat, even though the DB value is older.
    assert!(reg.gc_retire_expired(&c, "s", 6_600_400).unwrap().is_empty());
    let seen: i64 = c.query_row("SELECT last_seen_at_ms FROM live_templates", [], |r| r.get(0)).unwrap();
    assert_eq!(seen, 3_000_500, "GC refreshed the stored last seen from memory");
    assert_eq!(reg.memory().last_seen_entries, 1);
}

#[test]
fn entities_for_templates_only_counts_active_ones() {
    let c = db();
    let reg = TemplateRegistry::default();
    let out = activate(
        &reg,
        &c,
        &[decl("A", &[("x", "string")]), decl("B", &[("y", "string")])],
        TemplateLimits::default(),
        0,
    );
    let ids: Vec<String> = out.activated.iter().map(|a| a.template_id.clone()).collect();
    let mut entities = entities_for_templates(&c, "s", &[ids[0].clone(), ids[1].clone(), "zzz".into()]).unwrap();
    entities.sort();
    assert_eq!(entities, ["A", "B"]);
}
