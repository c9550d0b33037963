//! JS strings as Rust bytes.
//!
//! A JS string is a sequence of UTF-16 code units and may hold lone surrogates (`"\ud800"` is a
//! valid JSON string). We keep such strings as **WTF-8**: UTF-8 where a lone surrogate is
//! written as its 3-byte generalised UTF-8 form (`ED A0..BF xx`). Equal JS strings give equal
//! bytes, so hashing maps and byte equality behave like JS `===` and `Map` keys.
//!
//! - [`utf8_for_hashing`]: what `TextEncoder` writes (a lone surrogate becomes `EF BF BD`, K4);
//! - [`cmp_js`]: JS `<` order, by UTF-16 code units (K12, P11);
//! - [`trim`] / [`is_js_whitespace`]: `String.prototype.trim` (K13, K14, C1);
//! - [`array_index`]: whether a property key is an array index (JS own-key order, P7).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

/// An owned JS string (WTF-8 bytes).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct JsString(Vec<u8>);

impl JsString {
    /// Wraps bytes that are already WTF-8 (for example produced by [`push_code_point`]).
    pub fn from_wtf8(bytes: Vec<u8>) -> JsString {
        JsString(bytes)
    }

    pub fn from_utf16(units: &[u16]) -> JsString {
        JsString(wtf8_from_utf16(units))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The string as `TextEncoder` would encode it.
    pub fn to_utf8_lossy(&self) -> Cow<'_, str> {
        match utf8_for_hashing(&self.0) {
            Cow::Borrowed(b) => Cow::Borrowed(std::str::from_utf8(b).unwrap_or("")),
            Cow::Owned(b) => Cow::Owned(String::from_utf8(b).unwrap_or_default()),
        }
    }

    pub fn to_utf16(&self) -> Vec<u16> {
        utf16_units(&self.0).collect()
    }
}

impl AsRef<[u8]> for JsString {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for JsString {
    fn from(s: &str) -> Self {
        JsString(s.as_bytes().to_vec())
    }
}

impl From<String> for JsString {
    fn from(s: String) -> Self {
        JsString(s.into_bytes())
    }
}

impl fmt::Debug for JsString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_utf8_lossy())
    }
}

impl fmt::Display for JsString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_utf8_lossy())
    }
}

/// Appends the code point (or lone surrogate) `cp` to `out` as WTF-8.
pub fn push_code_point(out: &mut Vec<u8>, cp: u32) {
    if cp < 0x80 {
        out.push(cp as u8);
    } else if cp < 0x800 {
        out.extend_from_slice(&[0xC0 | (cp >> 6) as u8, 0x80 | (cp & 0x3F) as u8]);
    } else if cp < 0x10000 {
        out.extend_from_slice(&[0xE0 | (cp >> 12) as u8, 0x80 | ((cp >> 6) & 0x3F) as u8, 0x80 | (cp & 0x3F) as u8]);
    } else {
        out.extend_from_slice(&[
            0xF0 | (cp >> 18) as u8,
            0x80 | ((cp >> 12) & 0x3F) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]);
    }
}

/// WTF-8 from UTF-16 code units: pairs combine, lone surrogates stay.
pub fn wtf8_from_utf16(units: &[u16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(units.len());
    let mut i = 0;
    while i < units.len() {
        let u = units[i] as u32;
        if (0xD800..0xDC00).contains(&u) && i + 1 < units.len() && (0xDC00..0xE000).contains(&(units[i + 1] as u32)) {
            let lo = units[i + 1] as u32;
            push_code_point(&mut out, 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00));
            i += 2;
        } else {
            push_code_point(&mut out, u);
            i += 1;
        }
    }
    out
}

/// Decodes one code point of WTF-8 at `i`; returns it and the next index.
#[inline]
pub fn decode_at(b: &[u8], i: usize) -> (u32, usize) {
    let c = b[i];
    if c < 0x80 {
        (c as u32, i + 1)
    } else if c < 0xE0 {
        (((c as u32 & 0x1F) << 6) | (b.get(i + 1).copied().unwrap_or(0x80) as u32 & 0x3F), i + 2)
    } else if c < 0xF0 {
        let b1 = b.get(i + 1).copied().unwrap_or(0x80) as u32 & 0x3F;
        let b2 = b.get(i + 2).copied().unwrap_or(0x80) as u32 & 0x3F;
        (((c as u32 & 0x0F) << 12) | (b1 << 6) | b2, i + 3)
    } else {
        let b1 = b.get(i + 1).copied().unwrap_or(0x80) as u32 & 0x3F;
        let b2 = b.get(i + 2).copied().unwrap_or(0x80) as u32 & 0x3F;
        let b3 = b.get(i + 3).copied().unwrap_or(0x80) as u32 & 0x3F;
        (((c as u32 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3, i + 4)
    }
}

/// Code points (lone surrogates included) of a WTF-8 string.
pub fn code_points(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= b.len() {
            return None;
        }
        let (cp, next) = decode_at(b, i);
        i = next;
        Some(cp)
    })
}

/// UTF-16 code units of a WTF-8 string.
pub fn utf16_units(b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    code_points(b).flat_map(|cp| {
        if cp >= 0x10000 {
            let v = cp - 0x10000;
            [Some(0xD800 + (v >> 10) as u16), Some(0xDC00 + (v & 0x3FF) as u16)]
        } else {
            [Some(cp as u16), None]
        }
        .into_iter()
        .flatten()
    })
}

/// Whether a WTF-8 string holds a lone surrogate (`ED A0..BF`).
#[inline]
pub fn has_lone_surrogate(b: &[u8]) -> bool {
    b.windows(2).any(|w| w[0] == 0xED && w[1] >= 0xA0)
}

/// The bytes `TextEncoder` produces for this string: lone surrogates become U+FFFD (K4).
pub fn utf8_for_hashing(b: &[u8]) -> Cow<'_, [u8]> {
    if !b.contains(&0xED) || !has_lone_surrogate(b) {
        return Cow::Borrowed(b);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == 0xED && i + 1 < b.len() && b[i + 1] >= 0xA0 {
            out.extend_from_slice("\u{FFFD}".as_bytes());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Cow::Owned(out)
}

/// JS string order (`a < b`): by UTF-16 code units, not by code points or UTF-8 bytes.
pub fn cmp_js(a: &[u8], b: &[u8]) -> Ordering {
    // Byte order equals code point order; the two differ from UTF-16 order only after the
    // first differing code point, so skip the common prefix cheaply.
    let mut i = 0;
    let n = a.len().min(b.len());
    while i < n && a[i] == b[i] {
        i += 1;
    }
    if i == a.len() || i == b.len() {
        return a.len().cmp(&b.len());
    }
    // Back up to the start of the code point containing byte i.
    while i > 0 && (a[i] & 0xC0) == 0x80 {
        i -= 1;
    }
    utf16_units(&a[i..]).cmp(utf16_units(&b[i..]))
}

/// JS `WhiteSpace` and `LineTerminator` code points (what `trim()` removes).
pub fn is_js_whitespace(cp: u32) -> bool {
    matches!(
        cp,
        0x09 | 0x0A | 0x0B | 0x0C | 0x0D | 0x20 | 0xA0 | 0x1680 | 0x2000
            ..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000 | 0xFEFF
    )
}

/// An ASCII byte that is not JavaScript whitespace: text that starts and ends with one has
/// nothing to trim (every non-ASCII code point is encoded with bytes >= 0x80).
#[inline]
fn ascii_non_ws(b: u8) -> bool {
    b < 0x80 && !matches!(b, 0x09..=0x0D | 0x20)
}

/// `String.prototype.trim` on WTF-8 (or UTF-8) bytes.
#[inline]
pub fn trim(b: &[u8]) -> &[u8] {
    // Most text (keys, cursors, entity names) has nothing to trim: one test per end.
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) if ascii_non_ws(first) && ascii_non_ws(last) => b,
        (None, _) => b,
        _ => trim_code_points(b),
    }
}

fn trim_code_points(b: &[u8]) -> &[u8] {
    let mut start = 0;
    while start < b.len() {
        let (cp, next) = decode_at(b, start);
        if !is_js_whitespace(cp) {
            break;
        }
        start = next;
    }
    let mut end = b.len();
    while end > start {
        let mut s = end - 1;
        while s > start && (b[s] & 0xC0) == 0x80 {
            s -= 1;
        }
        let (cp, _) = decode_at(b, s);
        if !is_js_whitespace(cp) {
            break;
        }
        end = s;
    }
    &b[start..end]
}

/// `s.trim() === ""`.
#[inline]
pub fn is_blank(b: &[u8]) -> bool {
    // A first byte that is printable ASCII other than space is not whitespace.
    if let Some(0x21..=0x7E) = b.first() {
        return false;
    }
    trim(b).is_empty()
}

/// `trim()` on a Rust string.
pub fn trim_str(s: &str) -> &str {
    let t = trim(s.as_bytes());
    if t.len() == s.len() {
        return s;
    }
    // Trimming whole code points of valid UTF-8 keeps it valid UTF-8.
    std::str::from_utf8(t).unwrap_or("")
}

/// The array index a property key denotes (a canonical decimal integer below 2^32 − 1), which
/// JS lists before all other keys, in ascending order.
pub fn array_index(key: &[u8]) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || (key[0] == b'0' && key.len() > 1) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in key {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u64;
    }
    if v < u32::MAX as u64 {
        Some(v as u32)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn js_order_is_utf16_order() {
        // K12: `！` (U+FF01) sorts after `😀` in UTF-16 although its UTF-8 bytes sort first.
        let mut names = vec!["！", "😀", "B", "a"];
        names.sort_by(|a, b| cmp_js(a.as_bytes(), b.as_bytes()));
        assert_eq!(names, vec!["B", "a", "😀", "！"]);
        assert_eq!(cmp_js(b"ab", b"abc"), Ordering::Less);
        assert_eq!(cmp_js(b"", b""), Ordering::Equal);
        assert_eq!(cmp_js("é".as_bytes(), "e".as_bytes()), Ordering::Greater);
    }

    #[test]
    fn lone_surrogates_round_trip_and_hash_as_replacement() {
        let s = JsString::from_utf16(&[0x61, 0xD800, 0x62, 0xD83D, 0xDE00]);
        assert_eq!(s.to_utf16(), vec![0x61, 0xD800, 0x62, 0xD83D, 0xDE00]);
        assert_eq!(&*utf8_for_hashing(s.as_bytes()), "a\u{FFFD}b😀".as_bytes());
        // A lone high surrogate against a pair that starts with it.
        let lone = JsString::from_utf16(&[0xD83D, 0x41]);
        let pair = JsString::from("😀");
        assert_eq!(cmp_js(lone.as_bytes(), pair.as_bytes()), Ordering::Less);
    }

    #[test]
    fn trim_uses_the_js_whitespace_set() {
        assert_eq!(trim_str("\u{FEFF}\u{3000} a b \n\u{2029}"), "a b");
        assert_eq!(trim_str("\u{180E}x"), "\u{180E}x");
        // The one-test-per-end shortcut and the code-point path agree.
        for t in ["", " ", "a", " a", "a ", "\u{b}a\u{c}", "\u{85}a", "é", "aé", "é\u{3000}", "\u{a0}", "x\u{2028}"]
        {
            assert_eq!(trim(t.as_bytes()), trim_code_points(t.as_bytes()), "{t:?}");
            assert_eq!(trim_str(t).as_bytes(), trim_code_points(t.as_bytes()), "{t:?}");
        }
        assert_eq!(trim_str("\u{85}a"), "\u{85}a");
        assert_eq!(trim_str("\u{b}a\u{c}"), "a");
        assert!(is_blank("\t\u{A0}".as_bytes()));
        assert!(!is_blank("\u{200B}".as_bytes()));
    }

    #[test]
    fn array_indexes() {
        assert_eq!(array_index(b"0"), Some(0));
        assert_eq!(array_index(b"4294967294"), Some(4294967294));
        assert_eq!(array_index(b"4294967295"), None);
        assert_eq!(array_index(b"01"), None);
        assert_eq!(array_index(b"-1"), None);
        assert_eq!(array_index(b""), None);
    }
}
