//! Key derivation (K1–K18): the 64-bit keys (rendered as 16 hex chars, the *routing keys*)
//! and their u32 key ids, template argument encoding and field canonicalisation. (Touch
//! cursors are the journal's: [`crate::journal::cursor`].)
//!
//! All functions are pure. Strings are hashed as `TextEncoder` writes them (K4): callers pass
//! WTF-8 or UTF-8 bytes and lone surrogates hash as U+FFFD.

use std::borrow::Cow;

use xxhash_rust::xxh3::xxh3_64;
use xxhash_rust::xxh32::xxh32;

use crate::jscompat::date::{parse_date_utc16, to_iso_string};
use crate::jscompat::number::{format_number, is_integer};
use crate::jscompat::string::{cmp_js, is_js_whitespace, trim, trim_str, utf16_units, utf8_for_hashing};

/// XXH3-64, seed 0 (K1).
#[inline]
pub fn hash64(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// The 16 lowercase hex chars of a 64-bit key (K2).
pub fn hex16(key: u64) -> String {
    format!("{key:016x}")
}

/// The key id of a 64-bit key: its low 32 bits (K3).
#[inline]
pub fn key_id(key: u64) -> u32 {
    key as u32
}

/// Template encodings (K13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    String,
    Int64,
    Bool,
    Datetime,
    Bytes,
}

impl Encoding {
    pub fn parse(s: &str) -> Option<Encoding> {
        Some(match s {
            "string" => Encoding::String,
            "int64" => Encoding::Int64,
            "bool" => Encoding::Bool,
            "datetime" => Encoding::Datetime,
            "bytes" => Encoding::Bytes,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::String => "string",
            Encoding::Int64 => "int64",
            Encoding::Bool => "bool",
            Encoding::Datetime => "datetime",
            Encoding::Bytes => "bytes",
        }
    }
}

/// Table key (K6): hash of `"tbl"` NUL entity.
pub fn table_key(entity: &[u8]) -> u64 {
    let entity = utf8_for_hashing(entity);
    let mut buf = Vec::with_capacity(4 + entity.len());
    buf.extend_from_slice(b"tbl\0");
    buf.extend_from_slice(&entity);
    hash64(&buf)
}

/// Template id (K5): hash of `"tpl"` NUL entity NUL, then the field names joined by NUL.
/// The names must already be in canonical order ([`canonicalize_template_fields`]).
pub fn template_id<S: AsRef<[u8]>>(entity: &[u8], field_names_sorted: &[S]) -> u64 {
    let mut buf = Vec::with_capacity(64);
    buf.extend_from_slice(b"tpl\0");
    buf.extend_from_slice(&utf8_for_hashing(entity));
    buf.push(0);
    for (i, f) in field_names_sorted.iter().enumerate() {
        if i > 0 {
            buf.push(0);
        }
        buf.extend_from_slice(&utf8_for_hashing(f.as_ref()));
    }
    hash64(&buf)
}

/// The 64-bit number a template id denotes, as `BigInt("0x" + id)` reads it (K7): hex digits
/// of either case, any length (the low 64 bits are kept), trailing JS whitespace allowed.
/// `None` where `BigInt` would throw (B16).
pub fn template_bits(template_id: &str) -> Option<u64> {
    let b = template_id.as_bytes();
    // "0x" + id is trimmed as a whole, so only trailing whitespace can go.
    let mut end = b.len();
    while end > 0 {
        let mut s = end - 1;
        while s > 0 && (b[s] & 0xC0) == 0x80 {
            s -= 1;
        }
        let cp = template_id[s..end].chars().next().map(|c| c as u32).unwrap_or(0);
        if !is_js_whitespace(cp) {
            break;
        }
        end = s;
    }
    let digits = &b[..end];
    if digits.is_empty() || !digits.iter().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let tail = &digits[digits.len().saturating_sub(16)..];
    u64::from_str_radix(std::str::from_utf8(tail).ok()?, 16).ok()
}

/// Template key (K8): hash of `"tpl"` NUL tplBytes.
pub fn template_key(tpl: u64) -> u64 {
    let mut buf = [0u8; 12];
    buf[..4].copy_from_slice(b"tpl\0");
    buf[4..].copy_from_slice(&tpl.to_be_bytes());
    hash64(&buf)
}

/// Builds `prefix NUL tplBytes [NUL field] (NUL arg)*` into `buf` and hashes it.
fn keyed_hash<A: AsRef<[u8]>>(buf: &mut Vec<u8>, prefix: &[u8; 3], tpl: u64, field: Option<&[u8]>, args: &[A]) -> u64 {
    buf.clear();
    buf.extend_from_slice(prefix);
    buf.push(0);
    buf.extend_from_slice(&tpl.to_be_bytes());
    if let Some(f) = field {
        buf.push(0);
        buf.extend_from_slice(&utf8_for_hashing(f));
    }
    for a in args {
        buf.push(0);
        buf.extend_from_slice(&utf8_for_hashing(a.as_ref()));
    }
    hash64(buf)
}

/// Watch key (K9): `"key"` NUL tplBytes, then NUL + arg for each arg.
pub fn watch_key<A: AsRef<[u8]>>(tpl: u64, args: &[A]) -> u64 {
    keyed_hash(&mut Vec::with_capacity(64), b"key", tpl, None, args)
}

/// Membership key (K10): `"mem"` NUL tplBytes, then NUL + arg for each arg.
pub fn membership_key<A: AsRef<[u8]>>(tpl: u64, args: &[A]) -> u64 {
    keyed_hash(&mut Vec::with_capacity(64), b"mem", tpl, None, args)
}

/// Projected-field key (K11): `"fld"` NUL tplBytes NUL field, then NUL + arg for each arg.
pub fn projected_field_key<A: AsRef<[u8]>>(tpl: u64, field: &[u8], args: &[A]) -> u64 {
    keyed_hash(&mut Vec::with_capacity(64), b"fld", tpl, Some(field), args)
}

/// The three argument-keyed hashes with a reusable buffer (the processor's hot path).
#[derive(Default)]
pub struct KeyHasher {
    buf: Vec<u8>,
}

impl KeyHasher {
    pub fn watch<A: AsRef<[u8]>>(&mut self, tpl: u64, args: &[A]) -> u64 {
        keyed_hash(&mut self.buf, b"key", tpl, None, args)
    }
    pub fn membership<A: AsRef<[u8]>>(&mut self, tpl: u64, args: &[A]) -> u64 {
        keyed_hash(&mut self.buf, b"mem", tpl, None, args)
    }
    pub fn projected<A: AsRef<[u8]>>(&mut self, tpl: u64, field: &[u8], args: &[A]) -> u64 {
        keyed_hash(&mut self.buf, b"fld", tpl, Some(field), args)
    }
    /// The watch and membership keys of the same args: one buffer, two prefixes.
    pub fn watch_and_membership<A: AsRef<[u8]>>(&mut self, tpl: u64, args: &[A]) -> (u64, u64) {
        let watch = keyed_hash(&mut self.buf, b"key", tpl, None, args);
        self.buf[..3].copy_from_slice(b"mem");
        (watch, hash64(&self.buf))
    }
}

/// `touchKeyIdFromRoutingKey` (K14): trim and lowercase; 16 hex chars give their low 32 bits,
/// anything else its XXH32 (seed 0) of the normalised UTF-8.
pub fn touch_key_id_from_routing_key(key: &str) -> u32 {
    let s = trim_str(key).to_lowercase();
    let b = s.as_bytes();
    if b.len() == 16 && b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return u32::from_str_radix(&s[8..], 16).unwrap_or(0);
    }
    xxh32(b, 0)
}

/// A value as `encodeTemplateArg` sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue<'a> {
    Undefined,
    Null,
    Bool(bool),
    Number(f64),
    /// A JS bigint, as its decimal string (JSON never yields one; the JS API may).
    BigInt(&'a str),
    /// A string as WTF-8.
    String(&'a [u8]),
    /// An object, array, function or symbol.
    Other,
}

/// `encodeTemplateArg(value, encoding)` (K13): the encoded arg, or `None` when this template
/// makes no key for the value. Datetimes are read as UTC when they carry no zone (B17).
pub fn encode_template_arg<'a>(value: ArgValue<'a>, encoding: Encoding) -> Option<Cow<'a, [u8]>> {
    match (value, encoding) {
        (ArgValue::Undefined | ArgValue::Null, _) => None,
        (ArgValue::String(s), Encoding::String | Encoding::Bytes) => Some(Cow::Borrowed(s)),
        (ArgValue::Number(n), Encoding::String) if n.is_finite() => Some(Cow::Owned(format_number(n).into_bytes())),
        (ArgValue::Bool(b), Encoding::String) => Some(Cow::Borrowed(if b { b"true" } else { b"false" })),
        (ArgValue::BigInt(s), Encoding::Int64) => Some(Cow::Borrowed(s.as_bytes())),
        (ArgValue::Number(n), Encoding::Int64) if is_integer(n) => Some(Cow::Owned(format_number(n).into_bytes())),
        (ArgValue::String(s), Encoding::Int64) => {
            let t = trim(s);
            is_int64_text(t).then_some(Cow::Borrowed(t))
        }
        (ArgValue::Bool(b), Encoding::Bool) => Some(Cow::Borrowed(if b { b"1" } else { b"0" })),
        (ArgValue::String(s), Encoding::Datetime) => {
            let units: Vec<u16> = utf16_units(s).collect();
            parse_date_utc16(&units).map(|ms| Cow::Owned(to_iso_string(ms).into_bytes()))
        }
        _ => None,
    }
}

/// `/^-?(0|[1-9][0-9]*)$/`.
fn is_int64_text(t: &[u8]) -> bool {
    let d = t.strip_prefix(b"-").unwrap_or(t);
    match d {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// `canonicalizeTemplateFields` (K12): a stable sort by name in JS (UTF-16) order.
pub fn canonicalize_template_fields<N: AsRef<[u8]>, E>(fields: &mut [(N, E)]) {
    fields.sort_by(|a, b| cmp_js(a.0.as_ref(), b.0.as_ref()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg<'a>(v: ArgValue<'a>, e: Encoding) -> Option<String> {
        encode_template_arg(v, e).map(|c| String::from_utf8(c.into_owned()).unwrap())
    }

    #[test]
    fn pinned_hashes() {
        // K1.
        assert_eq!(hex16(hash64(b"")), "2d06800538d394c2");
        assert_eq!(hex16(hash64(b"abc")), "78af5f94892f3950");
        assert_eq!(xxh32(b"abc", 0), 0x32d153ff);
        assert_eq!(xxh32(b"", 0), 0x02cc5d05);
        assert_eq!(hex16(table_key(b"public.e0")), "04cf753b9011a661");
    }

    #[test]
    fn worked_examples_k16_k17() {
        let t = table_key(b"public.posts");
        assert_eq!(hex16(t), "0266aa40b9d08dc8");
        assert_eq!(key_id(t), 3117452744);
        assert_eq!(touch_key_id_from_routing_key(&hex16(t)), 3117452744);

        let mut fields = vec![("status", Encoding::String), ("authorId", Encoding::Int64)];
        canonicalize_template_fields(&mut fields);
        assert_eq!(fields, vec![("authorId", Encoding::Int64), ("status", Encoding::String)]);
        let names: Vec<&str> = fields.iter().map(|f| f.0).collect();
        let id = template_id(b"public.posts", &names);
        assert_eq!(hex16(id), "87e41f4a8d440298");
        let tpl = template_bits(&hex16(id)).unwrap();
        assert_eq!(hex16(template_key(tpl)), "86a0a70a077ee4d0");
        assert_eq!(key_id(template_key(tpl)), 125756624);
        let args42 = ["42", "published"];
        assert_eq!(hex16(watch_key(tpl, &args42)), "47fdf51496b95b3e");
        assert_eq!(key_id(watch_key(tpl, &args42)), 2528729918);
        assert_eq!(hex16(membership_key(tpl, &args42)), "9e2bc17e3e27224e");
        assert_eq!(key_id(membership_key(tpl, &args42)), 1042752078);
        assert_eq!(hex16(projected_field_key(tpl, b"title", &args42)), "033f9c07606c38ad");
        let args43 = ["43", "published"];
        assert_eq!(hex16(watch_key(tpl, &args43)), "374aecbcd3fd733f");
        assert_eq!(hex16(membership_key(tpl, &args43)), "724726ba85029064");
        assert_eq!(hex16(projected_field_key(tpl, b"id", &args43)), "738e13f9a4288ecd");
        assert_eq!(hex16(projected_field_key(tpl, b"title", &args43)), "d5c2be51fb9df3a6");
        assert_eq!(touch_key_id_from_routing_key("  47FDF51496B95B3E "), 2528729918);
    }

    #[test]
    fn worked_examples_k18() {
        let id = template_id(b"User", &["id"]);
        assert_eq!(hex16(id), "dae191d85eddccdf");
        let seven = arg(ArgValue::Number(7.0), Encoding::String).unwrap();
        assert_eq!(seven, "7");
        let w = watch_key(id, &[seven.as_str()]);
        assert_eq!((hex16(w), key_id(w)), ("234b77fd82233390".to_string(), 2183345040));
        let m = membership_key(id, &[seven.as_str()]);
        assert_eq!((hex16(m), key_id(m)), ("c59db0b894330496".to_string(), 2486371478));
        assert_eq!(touch_key_id_from_routing_key("  User:42 "), 4132429719);
        assert_eq!(touch_key_id_from_routing_key("0123456789abcdeg"), 2820782558);
    }

    #[test]
    fn one_buffer_gives_both_keys() {
        let mut h = KeyHasher::default();
        for args in [&["42", "published"][..], &["\u{FFFD}x"], &["a\0b", "", "c"]] {
            assert_eq!(h.watch_and_membership(7, args), (watch_key(7, args), membership_key(7, args)));
        }
    }

    #[test]
    fn template_bits_follow_bigint() {
        assert_eq!(template_bits("abc"), Some(0xabc));
        assert_eq!(template_bits("ABC"), Some(0xabc));
        assert_eq!(template_bits("abc \n"), Some(0xabc));
        assert_eq!(template_bits("1ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(template_bits(" abc"), None);
        assert_eq!(template_bits(""), None);
        assert_eq!(template_bits("xyz"), None);
    }

    #[test]
    fn encode_template_arg_rules() {
        use ArgValue as V;
        use Encoding as E;
        assert_eq!(arg(V::Null, E::String), None);
        assert_eq!(arg(V::Undefined, E::Bool), None);
        assert_eq!(arg(V::String(b" x "), E::String).as_deref(), Some(" x "));
        assert_eq!(arg(V::Number(1e21), E::String).as_deref(), Some("1e+21"));
        assert_eq!(arg(V::Number(-0.0), E::String).as_deref(), Some("0"));
        assert_eq!(arg(V::Number(f64::INFINITY), E::String), None);
        assert_eq!(arg(V::Bool(true), E::String).as_deref(), Some("true"));
        assert_eq!(arg(V::Other, E::String), None);
        assert_eq!(arg(V::Number(1e21), E::Int64).as_deref(), Some("1e+21"));
        assert_eq!(arg(V::Number(3.5), E::Int64), None);
        assert_eq!(arg(V::String(b" -12 "), E::Int64).as_deref(), Some("-12"));
        assert_eq!(arg(V::String(b"007"), E::Int64), None);
        assert_eq!(arg(V::String(b"-0"), E::Int64).as_deref(), Some("-0"));
        assert_eq!(arg(V::BigInt("123456789012345678901"), E::Int64).as_deref(), Some("123456789012345678901"));
        assert_eq!(arg(V::Bool(false), E::Bool).as_deref(), Some("0"));
        assert_eq!(arg(V::Number(1.0), E::Bool), None);
        assert_eq!(arg(V::String(b"true"), E::Bool), None);
        assert_eq!(
            arg(V::String(b"2024-01-02T03:04:05+01:00"), E::Datetime).as_deref(),
            Some("2024-01-02T02:04:05.000Z")
        );
        assert_eq!(arg(V::String(b"1"), E::Datetime).as_deref(), Some("2001-01-01T00:00:00.000Z"));
        assert_eq!(arg(V::String(b"nope"), E::Datetime), None);
        assert_eq!(arg(V::Number(0.0), E::Datetime), None);
        assert_eq!(arg(V::String(b"\x00"), E::Bytes).as_deref(), Some("\0"));
        assert_eq!(arg(V::Number(1.0), E::Bytes), None);
    }
}
