//! State Protocol record → canonical change (C1–C3), and the processor's view of the before
//! and after images.
//!
//! Two entry points with the same rules:
//! - [`read_record`]: the processor's hot path. It validates the whole payload as `JSON.parse`
//!   would (any depth, without building a tree) and keeps only what touches depend on: the
//!   entity, the operation and the top-level members of `value` / `old_value` (scalars, or
//!   "an object/array" for nested containers, which never yield keys, B6).
//!   [`read_record_raw`] is the same reader on the raw payload bytes, for payloads that
//!   decode to themselves (it gives up on any other, which is then decoded first).
//! - [`derive_change`]: the same rules on an already parsed [`Value`].
//!
//! A record yields no change when it is not an object, `headers` is not an object,
//! `headers.control` is a string (control records, C3/B5), `headers.operation` is not
//! `insert`/`update`/`delete`, or `type`/`key` are not strings with non-blank content (C1).
//! The entity is the untrimmed `type` (C2, B19).

use std::borrow::Cow;

use crate::jscompat::json::{decode_text, number_value, RawStr, Scalar, Scanner, SyntaxError, Value};
use crate::jscompat::string::{array_index, is_blank, JsString};

/// A change operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert,
    Update,
    Delete,
}

impl Op {
    fn from_bytes(b: &[u8]) -> Option<Op> {
        match b {
            b"insert" => Some(Op::Insert),
            b"update" => Some(Op::Update),
            b"delete" => Some(Op::Delete),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// One own member of an image object, as written (duplicates possible; the last one wins).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Member<'a> {
    pub name: RawStr<'a>,
    pub value: Scalar<'a>,
}

/// `before` (`old_value`) or `after` (`value`) of a change.
#[derive(Debug, Clone, PartialEq)]
pub enum Image<'a> {
    /// The record has no such own property (`undefined`).
    Absent,
    /// Present but not a plain object (null, a scalar or an array): it has no args.
    NotObject,
    /// A plain object and its own members in text order.
    Object(Vec<Member<'a>>),
}

/// A field value of an image as JS sees it: `Undefined` when the member is missing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    Undefined,
    Value(Scalar<'a>),
}

impl<'a> Image<'a> {
    /// `image[name]` for a plain object (the last member with that name), else `None`.
    pub fn get(&self, name: &[u8]) -> Option<Field<'a>> {
        match self {
            Image::Object(members) => Some(
                members
                    .iter()
                    .rev()
                    .find(|m| m.name.eq_bytes(name))
                    .map_or(Field::Undefined, |m| Field::Value(m.value)),
            ),
            _ => None,
        }
    }

    pub fn is_object(&self) -> bool {
        matches!(self, Image::Object(_))
    }

    /// `Object.keys(image)` with each key's (last) value: array indexes ascending first, then
    /// the other keys in first-appearance order (P7).
    pub fn own_entries(&self) -> Entries<'a> {
        let Image::Object(members) = self else { return Entries::new() };
        let mut out = Entries::with_capacity(members.len());
        let mut any_index = false;
        for m in members {
            let name = m.name.decode();
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = m.value,
                None => {
                    any_index = any_index || array_index(&name).is_some();
                    out.push((name, m.value))
                }
            }
        }
        if any_index {
            let (mut indexes, rest): (Entries<'a>, Entries<'a>) =
                out.into_iter().partition(|(n, _)| array_index(n).is_some());
            indexes.sort_by_key(|(n, _)| array_index(n));
            indexes.extend(rest);
            out = indexes;
        }
        out
    }
}

/// An image's own entries (see [`Image::own_entries`]); inline for the usual handful.
pub type Entries<'a> = smallvec::SmallVec<[(Cow<'a, [u8]>, Scalar<'a>); 8]>;

/// The canonical change of one WAL row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange<'a> {
    /// `type`, untrimmed, decoded (WTF-8).
    pub entity: Cow<'a, [u8]>,
    /// `key`, decoded (WTF-8).
    pub key: Cow<'a, [u8]>,
    pub op: Op,
    pub before: Image<'a>,
    pub after: Image<'a>,
}

/// What a payload is to the processor.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<'a> {
    /// `JSON.parse` would throw: the row is skipped (P4).
    NotJson,
    /// Valid JSON that is not a change (control records, wrong shapes): zero changes.
    NoChange,
    Change(RowChange<'a>),
}

/// Headers as far as C1 needs them.
enum Headers<'a> {
    Absent,
    NotObject,
    Object { control: Option<Scalar<'a>>, operation: Option<Scalar<'a>> },
}

/// Reads a decoded payload (see [`decode_payload`]). With `capture_images` false the images
/// are validated but not kept (coarse-only batches), and are reported as [`Image::NotObject`]
/// when present.
pub fn read_record(text: &str, capture_images: bool) -> Record<'_> {
    let mut sc = Scanner::indexed(text);
    match read_top(&mut sc, capture_images) {
        Ok(r) => r,
        Err(SyntaxError) => Record::NotJson,
    }
}

/// [`read_record`] on a raw payload that decodes to itself (all ASCII, or valid UTF-8 without
/// a leading byte order mark), read in place. `None` for any other payload: decode it
/// ([`decode_payload`]) and read the text.
pub fn read_record_raw(payload: &[u8], capture_images: bool) -> Option<Record<'_>> {
    let mut sc = Scanner::indexed_raw(payload)?;
    Some(read_top(&mut sc, capture_images).unwrap_or(Record::NotJson))
}

/// The payload as `TextDecoder` decodes it (lossy UTF-8, leading BOM dropped).
pub fn decode_payload(payload: &[u8]) -> Cow<'_, str> {
    decode_text(payload)
}

fn read_top<'a>(sc: &mut Scanner<'a>, capture_images: bool) -> Result<Record<'a>, SyntaxError> {
    sc.ws();
    if sc.peek() != Some(b'{') {
        sc.skip_value()?;
        return if sc.at_end() { Ok(Record::NoChange) } else { Err(SyntaxError) };
    }
    sc.expect(b'{')?;
    let mut ty: Option<Scalar<'a>> = None;
    let mut key: Option<Scalar<'a>> = None;
    let mut headers = Headers::Absent;
    let mut before = Image::Absent;
    let mut after = Image::Absent;
    sc.ws();
    if !sc.eat(b'}') {
        loop {
            sc.ws();
            let name = sc.string()?;
            sc.ws();
            sc.expect(b':')?;
            sc.ws();
            let n = name.decode();
            match &*n {
                b"type" => ty = Some(sc.scalar()?),
                b"key" => key = Some(sc.scalar()?),
                b"headers" => headers = read_headers(sc)?,
                b"value" => after = read_image(sc, capture_images)?,
                b"old_value" => before = read_image(sc, capture_images)?,
                _ => sc.skip_value()?,
            }
            sc.ws();
            if sc.eat(b',') {
                continue;
            }
            sc.expect(b'}')?;
            break;
        }
    }
    if !sc.at_end() {
        return Err(SyntaxError);
    }
    // C1.
    let Headers::Object { control, operation } = headers else { return Ok(Record::NoChange) };
    if matches!(control, Some(Scalar::String(_))) {
        return Ok(Record::NoChange);
    }
    let Some(Scalar::String(op)) = operation else { return Ok(Record::NoChange) };
    let Some(op) = Op::from_bytes(&op.decode()) else { return Ok(Record::NoChange) };
    let Some(Scalar::String(ty)) = ty else { return Ok(Record::NoChange) };
    let Some(Scalar::String(key)) = key else { return Ok(Record::NoChange) };
    let entity = ty.decode();
    let key = key.decode();
    if is_blank(&entity) || is_blank(&key) {
        return Ok(Record::NoChange);
    }
    Ok(Record::Change(RowChange { entity, key, op, before, after }))
}

fn read_headers<'a>(sc: &mut Scanner<'a>) -> Result<Headers<'a>, SyntaxError> {
    if sc.peek() != Some(b'{') {
        sc.skip_value()?;
        return Ok(Headers::NotObject);
    }
    let mut control = None;
    let mut operation = None;
    sc.members(|name, value| {
        if name.eq_bytes(b"control") {
            control = Some(value);
        } else if name.eq_bytes(b"operation") {
            operation = Some(value);
        }
    })?;
    Ok(Headers::Object { control, operation })
}

fn read_image<'a>(sc: &mut Scanner<'a>, capture: bool) -> Result<Image<'a>, SyntaxError> {
    if !capture || sc.peek() != Some(b'{') {
        sc.skip_value()?;
        return Ok(Image::NotObject);
    }
    let mut members = Vec::with_capacity(8);
    sc.members(|name, value| members.push(Member { name, value }))?;
    Ok(Image::Object(members))
}

/// A canonical change of a parsed record (C2).
#[derive(Debug, Clone, PartialEq)]
pub struct Change<'v> {
    pub entity: &'v JsString,
    pub key: &'v JsString,
    pub op: Op,
    /// `old_value` when it is an own property (JSON null stays null).
    pub before: Option<&'v Value>,
    /// `value` when it is an own property.
    pub after: Option<&'v Value>,
}

/// `deriveStateProtocolChanges(record)`: zero or one change (C1–C3).
pub fn derive_change(record: &Value) -> Option<Change<'_>> {
    let rec = record.as_object()?;
    let headers = rec.get("headers")?.as_object()?;
    if matches!(headers.get("control"), Some(Value::String(_))) {
        return None;
    }
    let op = Op::from_bytes(headers.get("operation")?.as_str_bytes()?)?;
    let Some(Value::String(entity)) = rec.get("type") else { return None };
    let Some(Value::String(key)) = rec.get("key") else { return None };
    if is_blank(entity.as_bytes()) || is_blank(key.as_bytes()) {
        return None;
    }
    Some(Change { entity, key, op, before: rec.get("old_value"), after: rec.get("value") })
}

/// Strict equality (`===`) of two image fields (P7). Containers are never equal: two JSON
/// objects are distinct objects.
pub fn fields_equal(a: Field<'_>, b: Field<'_>) -> bool {
    match (a, b) {
        (Field::Undefined, Field::Undefined) => true,
        (Field::Value(x), Field::Value(y)) => match (x, y) {
            (Scalar::Null, Scalar::Null) => true,
            (Scalar::Bool(p), Scalar::Bool(q)) => p == q,
            // The same text is the same number (JSON has no NaN); else compare the values.
            (Scalar::Number(p), Scalar::Number(q)) => p == q || number_value(p) == number_value(q),
            (Scalar::String(p), Scalar::String(q)) => {
                (!p.escaped && !q.escaped && p.raw == q.raw) || p.decode() == q.decode()
            }
            _ => false,
        },
        _ => false,
    }
}

/// Whether a JSON number token denotes a finite f64. Without an exponent, fewer than 309
/// digits are always finite (below 1e308); anything else is parsed.
fn is_finite_number(text: &str) -> bool {
    (text.len() <= 300 && !text.bytes().any(|c| c == b'e' || c == b'E')) || number_value(text).is_finite()
}

/// Whether a field can yield a projected-field key: undefined, null, a string, a boolean or
/// a finite number (P7; objects and arrays never do, B6).
pub fn is_projected_field_value(v: Field<'_>) -> bool {
    match v {
        Field::Undefined => true,
        Field::Value(Scalar::Null | Scalar::Bool(_) | Scalar::String(_)) => true,
        Field::Value(Scalar::Number(n)) => is_finite_number(n),
        Field::Value(Scalar::Object | Scalar::Array) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jscompat::json::parse;

    fn change(text: &str) -> Record<'_> {
        read_record(text, true)
    }

    #[test]
    fn a_change_record_yields_its_entity_op_and_images() {
        let t = r#"{"type":"public.posts","key":"1","value":{"id":1,"authorId":42,"t":{"x":[1]}},"old_value":null,"headers":{"operation":"update"}}"#;
        let Record::Change(c) = change(t) else { panic!() };
        assert_eq!(&*c.entity, b"public.posts");
        assert_eq!(c.op, Op::Update);
        assert_eq!(c.before, Image::NotObject);
        assert_eq!(c.after.get(b"authorId"), Some(Field::Value(Scalar::Number("42"))));
        assert_eq!(c.after.get(b"t"), Some(Field::Value(Scalar::Object)));
        assert_eq!(c.after.get(b"missing"), Some(Field::Undefined));
    }

    #[test]
    fn c1_rules() {
        let no = [
            r#"[1]"#,
            r#""x""#,
            r#"{"headers":{"control":"reset"}}"#,
            r#"{"type":"t","key":"k","headers":{"operation":"insert","control":"snapshot-start"}}"#,
            r#"{"type":"t","key":"k","headers":{"operation":"upsert"}}"#,
            r#"{"type":"t","key":"k","headers":[]}"#,
            r#"{"type":"t","key":"k"}"#,
            r#"{"type":" ","key":"k","headers":{"operation":"insert"}}"#,
            r#"{"type":"t","key":"\u3000","headers":{"operation":"insert"}}"#,
            r#"{"type":1,"key":"k","headers":{"operation":"insert"}}"#,
            r#"{"type":"t","key":"k","headers":{"operation":"insert"},"headers":null}"#,
        ];
        for t in no {
            assert_eq!(change(t), Record::NoChange, "{t}");
            assert_eq!(derive_change(&parse(t).unwrap()), None, "{t}");
        }
        let yes = [
            r#"{"type":" t ","key":"k","headers":{"operation":"delete","control":1}}"#,
            r#"{"type":"t","key":"k","headers":{"operation":"\u0069nsert"}}"#,
            r#"{"type":"x","type":"t","key":"k","headers":null,"headers":{"operation":"insert"}}"#,
        ];
        for t in yes {
            assert!(matches!(change(t), Record::Change(_)), "{t}");
            assert!(derive_change(&parse(t).unwrap()).is_some(), "{t}");
        }
        for bad in ["{not json", "", "{\"type\":\"t\"} x", "\u{FEFF}{}"] {
            assert_eq!(change(bad), Record::NotJson, "{bad}");
        }
    }

    #[test]
    fn a_record_with_any_structural_byte_replaced_is_json_exactly_when_json_parse_says_so() {
        let record = r#"{"type":"t","key":"k","headers":{"operation":"update","txid":"1"},"value":{"a":"x","n":-1.5e3,"b":[1,{"c":true}],"z":null},"old_value":{"a":"y","e":{}}}"#;
        let mut checked = 0;
        for (at, c) in record.char_indices() {
            if !matches!(c, ',' | ':' | '{' | '}' | '[' | ']' | '"') {
                continue;
            }
            for with in [",", ":", "}", "]", "{", "[", "\"", ";", " ", ""] {
                let text = format!("{}{with}{}", &record[..at], &record[at + 1..]);
                let json = parse(&text).is_ok();
                for capture in [true, false] {
                    let read = read_record(&text, capture);
                    assert_eq!(read != Record::NotJson, json, "{text} (capture {capture})");
                    let raw = read_record_raw(text.as_bytes(), capture).unwrap();
                    assert_eq!(raw != Record::NotJson, json, "{text} raw (capture {capture})");
                }
                checked += 1;
            }
        }
        assert!(checked > 400, "{checked}");
    }

    #[test]
    fn payloads_that_decode_to_themselves_read_raw_as_decoded() {
        let in_place: [&[u8]; 6] = [
            br#"{"type":"t","key":"k","headers":{"operation":"update"},"value":{"a":"x","b":[1,{"c":2}]},"old_value":{"a":"y"}}"#,
            "{\"type\":\"t\u{e9}\",\"key\":\"k\",\"headers\":{\"operation\":\"insert\"}}".as_bytes(),
            b"{\"type\":\"t\",\"key\":\"k\",\"headers\":{\"operation\":\"insert\"},\"value\":{\"a\":[\"\xc3\xa9\"]}}",
            b"{\"a\":1}\xc2\xa0",
            b"{not json",
            b"",
        ];
        for p in in_place {
            assert_eq!(read_record_raw(p, true), Some(read_record(&decode_payload(p), true)), "{p:?}");
        }
        // Invalid UTF-8 and a leading BOM change in decoding: those are decoded first.
        let decoded: [&[u8]; 3] = [
            b"{\"type\":\"t\xff\",\"key\":\"k\",\"headers\":{\"operation\":\"insert\"}}",
            b"\xEF\xBB\xBF{\"type\":\"t\",\"key\":\"k\",\"headers\":{\"operation\":\"insert\"}}",
            b"{\"type\":\"t\",\"key\":\"k\xed\xa0\x80\",\"headers\":{\"operation\":\"insert\"}}",
        ];
        for p in decoded {
            assert_eq!(read_record_raw(p, true), None, "{p:?}");
        }
    }

    #[test]
    fn own_entries_follow_js_key_order() {
        let t = r#"{"type":"t","key":"k","headers":{"operation":"insert"},"value":{"b":1,"2":2,"a":3,"1":4,"b":5}}"#;
        let Record::Change(c) = change(t) else { panic!() };
        let names: Vec<String> =
            c.after.own_entries().iter().map(|(n, _)| String::from_utf8(n.to_vec()).unwrap()).collect();
        assert_eq!(names, ["1", "2", "b", "a"]);
        assert_eq!(c.after.own_entries()[2].1, Scalar::Number("5"));
    }

    #[test]
    fn equality_and_eligibility() {
        use Field::*;
        let s = |r: &'static str| Value(Scalar::String(RawStr { raw: r.as_bytes(), escaped: r.contains('\\') }));
        assert!(fields_equal(Value(Scalar::Number("0")), Value(Scalar::Number("-0"))));
        assert!(fields_equal(Value(Scalar::Number("1e0")), Value(Scalar::Number("1"))));
        assert!(fields_equal(s("a"), s("\\u0061")));
        assert!(!fields_equal(Undefined, Value(Scalar::Null)));
        assert!(!fields_equal(Value(Scalar::Object), Value(Scalar::Object)));
        assert!(!is_projected_field_value(Value(Scalar::Number("1e400"))));
        assert!(is_projected_field_value(Value(Scalar::Number("1e308"))));
        let long = "9".repeat(400);
        assert!(!is_projected_field_value(Value(Scalar::Number(&long))));
        assert!(is_projected_field_value(Value(Scalar::Number(&long[..300]))));
        assert!(fields_equal(Value(Scalar::Number("1e400")), Value(Scalar::Number("1E500"))));
        assert!(!fields_equal(s("ab"), s("a")));
        assert!(is_projected_field_value(Undefined));
        assert!(!is_projected_field_value(Value(Scalar::Array)));
    }
}
