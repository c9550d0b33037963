//! `JSON.parse` as a JS engine does it, and the values it produces.
//!
//! Differences from serde_json that matter for fidelity:
//! - any nesting depth is accepted (JS engines parse iteratively); parsing and dropping are
//!   iterative here too, so deep input cannot overflow the stack;
//! - numbers are f64 (`1e400` is `Infinity`, integers above 2^53 are rounded, `-0` stays);
//! - strings are [`JsString`] (WTF-8): `"\ud800"` is accepted and kept;
//! - duplicate keys: the last value wins, at the position of the first occurrence;
//! - [`Object::keys`] lists own keys in JS order: array indexes ascending, then the rest in
//!   insertion order (P7, C7's "first unknown key").
//!
//! [`Scanner`] exposes the lexer so the processor can validate a record and pick out the
//! few members it needs without building a tree (see [`crate::changes`]).

use std::cell::Cell;
use std::collections::HashMap;

use super::number::format_number;
use super::string::{array_index, push_code_point, JsString};

/// A JS value as `JSON.parse` produces it.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    #[default]
    Null,
    /// `undefined`: never produced by `JSON.parse`, but a JS caller can hand it in.
    Undefined,
    Bool(bool),
    Number(f64),
    String(JsString),
    Array(Vec<Value>),
    Object(Object),
}

/// A plain object: own properties in insertion order, keys unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object {
    entries: Vec<(JsString, Value)>,
    index: Option<HashMap<JsString, usize>>,
}

const INDEX_THRESHOLD: usize = 24;

impl Object {
    pub fn new() -> Object {
        Object::default()
    }

    /// Sets a property: a new key is appended, an existing one keeps its position.
    pub fn insert(&mut self, key: JsString, value: Value) {
        if let Some(i) = self.position(&key) {
            self.entries[i].1 = value;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        } else if self.entries.len() >= INDEX_THRESHOLD {
            let mut index: HashMap<JsString, usize> =
                self.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
            index.insert(key.clone(), self.entries.len());
            self.index = Some(index);
        }
        self.entries.push((key, value));
    }

    fn position(&self, key: &JsString) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k == key),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.get_bytes(key.as_bytes())
    }

    pub fn get_bytes(&self, key: &[u8]) -> Option<&Value> {
        match &self.index {
            Some(index) => index.get(&JsString::from_wtf8(key.to_vec())).map(|&i| &self.entries[i].1),
            None => self.entries.iter().find(|(k, _)| k.as_bytes() == key).map(|(_, v)| v),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in insertion order.
    pub fn entries(&self) -> impl Iterator<Item = (&JsString, &Value)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Own keys in JS order (`Object.keys`): array indexes ascending, then insertion order.
    pub fn keys(&self) -> Vec<&JsString> {
        let mut indexes: Vec<(u32, &JsString)> =
            self.entries.iter().filter_map(|(k, _)| array_index(k.as_bytes()).map(|i| (i, k))).collect();
        indexes.sort_by_key(|(i, _)| *i);
        let mut out: Vec<&JsString> = indexes.into_iter().map(|(_, k)| k).collect();
        out.extend(self.entries.iter().filter(|(k, _)| array_index(k.as_bytes()).is_none()).map(|(k, _)| k));
        out
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        // Drain children iteratively so very deep values do not recurse.
        let mut stack: Vec<Value> = Vec::new();
        take_children(self, &mut stack);
        while let Some(mut v) = stack.pop() {
            take_children(&mut v, &mut stack);
        }
    }
}

fn take_children(v: &mut Value, stack: &mut Vec<Value>) {
    match v {
        Value::Array(items) if !items.is_empty() => stack.append(items),
        Value::Object(o) if !o.entries.is_empty() => {
            o.index = None;
            stack.extend(o.entries.drain(..).map(|(_, v)| v));
        }
        _ => {}
    }
}

impl Value {
    /// `v === undefined || v === null`.
    pub fn is_nullish(&self) -> bool {
        matches!(self, Value::Null | Value::Undefined)
    }

    pub fn is_plain_object(&self) -> bool {
        matches!(self, Value::Object(_))
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_str_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::String(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// JS truthiness (`!!v`).
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null | Value::Undefined => false,
            Value::Bool(b) => *b,
            Value::Number(n) => *n != 0.0 && !n.is_nan(),
            Value::String(s) => !s.is_empty(),
            Value::Array(_) | Value::Object(_) => true,
        }
    }

    /// `Number(v)` (ToNumber, with arrays and objects through their string form).
    pub fn to_number(&self) -> f64 {
        match self {
            Value::Null => 0.0,
            Value::Undefined => f64::NAN,
            Value::Bool(b) => *b as u8 as f64,
            Value::Number(n) => *n,
            Value::String(s) => super::number::string_to_number(s.as_bytes()),
            Value::Array(_) => match self.to_js_string() {
                Some(s) => super::number::string_to_number(s.as_bytes()),
                None => f64::NAN,
            },
            Value::Object(_) => f64::NAN,
        }
    }

    /// `String(v)`; `None` when the value nests too deeply to render.
    pub fn to_js_string(&self) -> Option<JsString> {
        let mut out = Vec::new();
        if write_js_string(self, &mut out, 0) {
            Some(JsString::from_wtf8(out))
        } else {
            None
        }
    }
}

fn write_js_string(v: &Value, out: &mut Vec<u8>, depth: usize) -> bool {
    if depth > 512 {
        return false;
    }
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Undefined => out.extend_from_slice(b"undefined"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(format_number(*n).as_bytes()),
        Value::String(s) => out.extend_from_slice(s.as_bytes()),
        Value::Object(_) => out.extend_from_slice(b"[object Object]"),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Array.prototype.join renders null and undefined elements as "".
                if !matches!(item, Value::Null | Value::Undefined) && !write_js_string(item, out, depth + 1) {
                    return false;
                }
            }
        }
    }
    true
}

/// Why a text is not JSON (the processor only needs "not JSON").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError;

/// A string token as it appears in the text: the bytes between the quotes, escapes undecoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr<'a> {
    pub raw: &'a [u8],
    pub escaped: bool,
}

impl<'a> RawStr<'a> {
    /// The decoded string as WTF-8 (borrowed when there are no escapes).
    #[inline]
    pub fn decode(&self) -> std::borrow::Cow<'a, [u8]> {
        if !self.escaped {
            return std::borrow::Cow::Borrowed(self.raw);
        }
        std::borrow::Cow::Owned(self.unescape())
    }

    #[inline(never)]
    fn unescape(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.raw.len());
        decode_escaped(self.raw, &mut out);
        out
    }

    /// Whether the decoded string equals `s` (WTF-8).
    #[inline]
    pub fn eq_bytes(&self, s: &[u8]) -> bool {
        if !self.escaped {
            self.raw == s
        } else {
            *self.decode() == *s
        }
    }
}

fn hex_val(c: u8) -> u32 {
    match c {
        b'0'..=b'9' => (c - b'0') as u32,
        b'a'..=b'f' => (c - b'a' + 10) as u32,
        _ => (c - b'A' + 10) as u32,
    }
}

/// Decodes the body of a string token that the scanner validated.
fn decode_escaped(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = raw[i + 1];
        i += 2;
        match e {
            b'"' => out.push(b'"'),
            b'\\' => out.push(b'\\'),
            b'/' => out.push(b'/'),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0C),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            _ => {
                let u = raw[i..i + 4].iter().fold(0u32, |a, &c| a * 16 + hex_val(c));
                i += 4;
                if (0xD800..0xDC00).contains(&u)
                    && raw.len() >= i + 6
                    && raw[i] == b'\\'
                    && raw[i + 1] == b'u'
                    && raw[i + 2..i + 6].iter().all(|c| c.is_ascii_hexdigit())
                {
                    let lo = raw[i + 2..i + 6].iter().fold(0u32, |a, &c| a * 16 + hex_val(c));
                    if (0xDC00..0xE000).contains(&lo) {
                        push_code_point(out, 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00));
                        i += 6;
                        continue;
                    }
                }
                push_code_point(out, u);
            }
        }
    }
}

/// The bytes of `w` (little-endian) that end a run of plain string content — `"`, `\\` and
/// control characters — as the high bit of each flagged byte (SWAR). Bytes above the first
/// flagged one may be flagged spuriously (borrows), so only the lowest flag is meaningful.
#[inline]
fn special_mask(w: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let below_space = w.wrapping_sub(LO * 0x20) & !w & HI;
    zero(w ^ (LO * b'"' as u64)) | zero(w ^ (LO * b'\\' as u64)) | below_space
}

/// The JSON lexer over valid UTF-8 text: a decoded payload, or raw payload bytes that decode
/// to themselves ([`Scanner::indexed_raw`]). Outside string tokens any non-ASCII byte is a
/// syntax error.
pub struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    /// Where the text's `"` bytes and special bytes are ([`index`]), for a scanner made by
    /// [`Scanner::indexed`] or [`Scanner::indexed_raw`].
    index: Option<Index>,
}

/// Two bits per byte of a text, 64 bytes per [`Block`]. The blocks' buffer is reused: a
/// scanner hands it back when dropped ([`SPARE_BLOCKS`]), and the next index on the thread
/// takes it, so indexing a payload neither allocates nor moves blocks around.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Index {
    blocks: Vec<Block>,
    /// No special byte anywhere: every string token ends at the next quote (the usual case,
    /// with a cheaper lookup).
    plain: bool,
    /// Some byte is above 0x7F.
    non_ascii: bool,
}

/// A 64-byte block of a text: bit `i` of `quotes` is set where byte `i` is `"`, of `special`
/// where it is `\\` or below 0x20.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Block {
    quotes: u64,
    special: u64,
}

/// Indexes the quotes and special bytes of `b` (see [`Block`]). A string token whose bytes up
/// to the next quote hold no special byte ends at that quote and is valid as it stands (no
/// escape, no control character); any other is scanned byte by byte ([`Scanner::string`]).
fn index(b: &[u8]) -> Index {
    let mut out = SPARE_BLOCKS.with(Cell::take);
    out.clear();
    out.reserve(b.len().div_ceil(64));
    let mut chunks = b.chunks_exact(64);
    let (mut high, mut special) = (0u64, 0u64);
    // `extend` over an exact-size iterator writes the blocks without a capacity check each.
    out.extend(chunks.by_ref().map(|chunk| {
        let (block, h) = block64(chunk.try_into().unwrap_or(&[0; 64]));
        high |= h;
        special |= block.special;
        block
    }));
    let rest = chunks.remainder().len();
    if rest > 0 {
        // The last 64 bytes, shifted so that only the `rest` not yet seen remain; a text
        // shorter than that is padded with spaces.
        let (block, h) = match b.len().checked_sub(64) {
            Some(start) => {
                // (Bytes seen twice count once in `high`: it only says whether there is one.)
                let (block, h) = block64(b[start..].try_into().unwrap_or(&[0; 64]));
                let shift = 64 - rest;
                (Block { quotes: block.quotes >> shift, special: block.special >> shift }, h)
            }
            None => {
                let mut padded = [b' '; 64];
                padded[..rest].copy_from_slice(b);
                block64(&padded)
            }
        };
        high |= h;
        special |= block.special;
        out.push(block);
    }
    Index { blocks: out, plain: special == 0, non_ascii: high != 0 }
}

thread_local! {
    /// The blocks' buffer of the last indexed scanner dropped on this thread (empty when none).
    static SPARE_BLOCKS: Cell<Vec<Block>> = const { Cell::new(Vec::new()) };
}

/// The largest blocks' buffer kept for reuse: 1 MiB of text.
const SPARE_BLOCKS_MAX: usize = 16 * 1024;

impl Drop for Scanner<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            if index.blocks.capacity() <= SPARE_BLOCKS_MAX {
                SPARE_BLOCKS.with(|spare| spare.set(index.blocks));
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
use block64_bytewise as block64;

/// The [`Block`] of 64 bytes, and a word that is non-zero when one of them is above 0x7F.
#[cfg(target_arch = "x86_64")]
#[inline]
fn block64(block: &[u8; 64]) -> (Block, u64) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; the loads are unaligned and in bounds.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let below_space = _mm_set1_epi8(0x1F);
        let (mut q, mut special, mut high) = (0u64, 0u64, _mm_setzero_si128());
        for i in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * i) as *const __m128i);
            // v <= 0x1F (unsigned) exactly when min(v, 0x1F) == v.
            let control = _mm_cmpeq_epi8(_mm_min_epu8(v, below_space), v);
            let s = _mm_or_si128(_mm_cmpeq_epi8(v, backslash), control);
            q |= (_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) as u16 as u64) << (16 * i);
            special |= (_mm_movemask_epi8(s) as u16 as u64) << (16 * i);
            high = _mm_or_si128(high, v);
        }
        (Block { quotes: q, special }, _mm_movemask_epi8(high) as u64)
    }
}

/// [`block64`] one byte at a time: the definition, and the code on other targets.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn block64_bytewise(block: &[u8; 64]) -> (Block, u64) {
    let (mut q, mut special, mut high) = (0u64, 0u64, 0u64);
    for (i, &c) in block.iter().enumerate() {
        q |= ((c == b'"') as u64) << i;
        special |= ((c == b'\\' || c < 0x20) as u64) << i;
        high |= ((c >= 0x80) as u64) << i;
    }
    (Block { quotes: q, special }, high)
}

impl<'a> Scanner<'a> {
    pub fn new(text: &'a [u8]) -> Self {
        Scanner { b: text, pos: 0, index: None }
    }

    /// A scanner over `text` that indexes it first ([`index`]), so that most string tokens
    /// end without a look at their bytes. Reads exactly what [`Scanner::new`] reads.
    pub fn indexed(text: &'a str) -> Self {
        Scanner { b: text.as_bytes(), pos: 0, index: Some(index(text.as_bytes())) }
    }

    /// [`Scanner::indexed`] over raw payload bytes that decode to themselves — all ASCII, or
    /// valid UTF-8 without a leading byte order mark (P4's `TextDecoder` drops one) — so the
    /// payload is read in place with one index; `None` for any other (decode it first).
    pub fn indexed_raw(bytes: &'a [u8]) -> Option<Self> {
        let sc = Scanner { b: bytes, pos: 0, index: Some(index(bytes)) };
        let non_ascii = sc.index.as_ref().is_some_and(|i| i.non_ascii);
        if non_ascii && (bytes.starts_with(b"\xEF\xBB\xBF") || std::str::from_utf8(bytes).is_err()) {
            return None;
        }
        Some(sc)
    }

    /// Skips JSON whitespace (space, tab, LF, CR only).
    #[inline]
    pub fn ws(&mut self) {
        self.pos = skip_ws(self.b, self.pos);
    }

    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    #[inline]
    pub fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub fn expect(&mut self, c: u8) -> Result<(), SyntaxError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(SyntaxError)
        }
    }

    /// True when only whitespace remains.
    pub fn at_end(&mut self) -> bool {
        self.ws();
        self.pos == self.b.len()
    }

    /// A string token (the opening quote is next).
    #[inline(always)]
    pub fn string(&mut self) -> Result<RawStr<'a>, SyntaxError> {
        self.expect(b'"')?;
        let (s, end) = self.string_at(self.pos)?;
        self.pos = end;
        Ok(s)
    }

    /// Where the string token whose body starts at `start` ends, when the index shows that its
    /// body holds no special byte; `None` without an index, or for a body to scan.
    #[inline(always)]
    fn plain_string_end(&self, start: usize) -> Option<usize> {
        let index = self.index.as_ref()?;
        let mut w = start / 64;
        let from = !0u64 << (start % 64);
        if index.plain {
            let mut quotes = index.blocks.get(w)?.quotes & from;
            while quotes == 0 {
                w += 1;
                quotes = index.blocks.get(w)?.quotes;
            }
            return Some(w * 64 + quotes.trailing_zeros() as usize);
        }
        let block = index.blocks.get(w)?;
        let (mut quotes, mut special) = (block.quotes & from, block.special & from);
        while quotes == 0 {
            if special != 0 {
                return None;
            }
            w += 1;
            let block = index.blocks.get(w)?;
            (quotes, special) = (block.quotes, block.special);
        }
        // Special bytes before the closing quote (the bits below its lowest set bit).
        if special & (quotes & quotes.wrapping_neg()).wrapping_sub(1) != 0 {
            return None;
        }
        Some(w * 64 + quotes.trailing_zeros() as usize)
    }

    /// A number token, checked against the JSON grammar; returns its text.
    pub fn number(&mut self) -> Result<&'a str, SyntaxError> {
        let start = self.pos;
        let end = number_end(self.b, start)?;
        self.pos = end;
        // The grammar is ASCII only, so the token is always text.
        Ok(std::str::from_utf8(&self.b[start..end]).unwrap_or("0"))
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), SyntaxError> {
        self.pos = literal_end(self.b, self.pos, word)?;
        Ok(())
    }

    /// Reads a scalar or notes a container; containers are skipped (validated) whole.
    pub fn scalar(&mut self) -> Result<Scalar<'a>, SyntaxError> {
        self.ws();
        let (value, end) = self.scalar_at(self.pos)?;
        self.pos = end;
        Ok(value)
    }

    /// Reads the object at the scanner (`{` is next): calls `f` with each member's name and
    /// value in order, containers skipped whole ([`Scanner::scalar`]'s values), and moves
    /// past the object. Works on a local position, as [`Scanner::skip_value`] does.
    pub fn members(&mut self, mut f: impl FnMut(RawStr<'a>, Scalar<'a>)) -> Result<(), SyntaxError> {
        let b = self.b;
        let at = |j: usize| b.get(j).copied().unwrap_or(0);
        if at(self.pos) != b'{' {
            return Err(SyntaxError);
        }
        let mut i = skip_ws(b, self.pos + 1);
        if at(i) == b'}' {
            self.pos = i + 1;
            return Ok(());
        }
        loop {
            let (name, after) = self.member_name_str(skip_ws(b, i))?;
            let (value, after) = self.scalar_at(skip_ws(b, after))?;
            f(name, value);
            i = skip_ws(b, after);
            match at(i) {
                b',' => i += 1,
                b'}' => {
                    self.pos = i + 1;
                    return Ok(());
                }
                _ => return Err(SyntaxError),
            }
        }
    }

    /// `"name"` then `:` at `i`: the name, and where its value may start.
    #[inline(always)]
    fn member_name_str(&self, i: usize) -> Result<(RawStr<'a>, usize), SyntaxError> {
        if self.b.get(i) != Some(&b'"') {
            return Err(SyntaxError);
        }
        let (name, after) = self.string_at(i + 1)?;
        let i = skip_ws(self.b, after);
        if self.b.get(i) != Some(&b':') {
            return Err(SyntaxError);
        }
        Ok((name, i + 1))
    }

    /// The string token whose body starts at `start`, and the position after it.
    #[inline(always)]
    fn string_at(&self, start: usize) -> Result<(RawStr<'a>, usize), SyntaxError> {
        let (end, escaped) = match self.plain_string_end(start) {
            Some(end) => (end, false),
            None => string_body(self.b, start)?,
        };
        Ok((RawStr { raw: &self.b[start..end], escaped }, end + 1))
    }

    /// The value at `i` (no whitespace before it) as [`Scalar`], and the position after it.
    #[inline(always)]
    fn scalar_at(&self, i: usize) -> Result<(Scalar<'a>, usize), SyntaxError> {
        let b = self.b;
        match b.get(i).copied().unwrap_or(0) {
            b'"' => self.string_at(i + 1).map(|(s, end)| (Scalar::String(s), end)),
            b't' => literal_end(b, i, b"true").map(|end| (Scalar::Bool(true), end)),
            b'f' => literal_end(b, i, b"false").map(|end| (Scalar::Bool(false), end)),
            b'n' => literal_end(b, i, b"null").map(|end| (Scalar::Null, end)),
            b'{' => self.skip_from(i).map(|end| (Scalar::Object, end)),
            b'[' => self.skip_from(i).map(|end| (Scalar::Array, end)),
            b'-' | b'0'..=b'9' => {
                let end = number_end(b, i)?;
                // The grammar is ASCII only, so the token is always text.
                Ok((Scalar::Number(std::str::from_utf8(&b[i..end]).unwrap_or("0")), end))
            }
            _ => Err(SyntaxError),
        }
    }

    /// Skips one value of any depth, validating it.
    ///
    /// Works on a local position and keeps the open containers as bits ([`Nesting`]); a
    /// whitespace check costs one compare where a structural byte is expected, and strings
    /// end through the index when there is one. Reads exactly what a token-by-token walk
    /// reads (`tests::skip_value_stepwise`, the definition the tests hold it to).
    pub fn skip_value(&mut self) -> Result<(), SyntaxError> {
        self.pos = self.skip_from(self.pos)?;
        Ok(())
    }

    fn skip_from(&self, mut i: usize) -> Result<usize, SyntaxError> {
        let b = self.b;
        // The byte at `j`, or NUL past the end (NUL is never valid outside a string).
        let at = |j: usize| b.get(j).copied().unwrap_or(0);
        let mut open = Nesting::default();
        loop {
            // A value is expected here.
            i = skip_ws(b, i);
            match at(i) {
                b'{' => {
                    i = skip_ws(b, i + 1);
                    if at(i) == b'}' {
                        i += 1;
                    } else {
                        open.push(true);
                        i = self.member_name(i)?;
                        continue;
                    }
                }
                b'[' => {
                    i = skip_ws(b, i + 1);
                    if at(i) == b']' {
                        i += 1;
                    } else {
                        open.push(false);
                        continue;
                    }
                }
                b'"' => i = self.string_close(i + 1)? + 1,
                b't' => i = literal_end(b, i, b"true")?,
                b'f' => i = literal_end(b, i, b"false")?,
                b'n' => i = literal_end(b, i, b"null")?,
                b'-' | b'0'..=b'9' => i = number_end(b, i)?,
                _ => return Err(SyntaxError),
            }
            // After a value: close containers or move to the next member.
            loop {
                let Some(object) = open.top() else { return Ok(i) };
                i = skip_ws(b, i);
                let c = at(i);
                if c == b',' {
                    i += 1;
                    if object {
                        i = self.member_name(skip_ws(b, i))?;
                    }
                    break;
                }
                if c != if object { b'}' } else { b']' } {
                    return Err(SyntaxError);
                }
                i += 1;
                open.pop();
            }
        }
    }

    /// `"name"` then `:` (with whitespace around the colon) at `i`; where the value may start.
    /// ([`Scanner::member_name_str`] without the name, whose escape flag `skip_value` would
    /// pay for on every member.)
    #[inline(always)]
    fn member_name(&self, i: usize) -> Result<usize, SyntaxError> {
        if self.b.get(i) != Some(&b'"') {
            return Err(SyntaxError);
        }
        let i = skip_ws(self.b, self.string_close(i + 1)? + 1);
        if self.b.get(i) != Some(&b':') {
            return Err(SyntaxError);
        }
        Ok(i + 1)
    }

    /// Where the closing quote of the string token whose body starts at `start` is.
    #[inline(always)]
    fn string_close(&self, start: usize) -> Result<usize, SyntaxError> {
        match self.plain_string_end(start) {
            Some(end) => Ok(end),
            None => string_body(self.b, start).map(|(end, _)| end),
        }
    }

    pub fn position(&self) -> usize {
        self.pos
    }
}

/// The open containers of [`Scanner::skip_value`], innermost last: one bit each (set for an
/// object), 64 to a word; the words below the current one spill to a vector, which only
/// nesting deeper than 64 allocates.
#[derive(Default)]
struct Nesting {
    bits: u64,
    depth: usize,
    spilled: Vec<u64>,
}

impl Nesting {
    #[inline(always)]
    fn push(&mut self, object: bool) {
        if self.depth.is_multiple_of(64) && self.depth > 0 {
            self.spilled.push(self.bits);
            self.bits = 0;
        }
        self.bits = (self.bits << 1) | object as u64;
        self.depth += 1;
    }

    #[inline(always)]
    fn pop(&mut self) {
        self.bits >>= 1;
        self.depth -= 1;
        if self.depth.is_multiple_of(64) && self.depth > 0 {
            self.bits = self.spilled.pop().unwrap_or(0);
        }
    }

    /// Whether the innermost open container is an object; `None` when none is open.
    #[inline(always)]
    fn top(&self) -> Option<bool> {
        (self.depth > 0).then_some(self.bits & 1 == 1)
    }
}

/// The first position at or after `i` that is not JSON whitespace (space, tab, LF, CR).
#[inline(always)]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(&c) = b.get(i) {
        if c > b' ' || !(c == b' ' || c == b'\n' || c == b'\r' || c == b'\t') {
            break;
        }
        i += 1;
    }
    i
}

/// The end of `word` (`true`, `false`, `null`) at `i`.
#[inline(always)]
fn literal_end(b: &[u8], i: usize, word: &[u8]) -> Result<usize, SyntaxError> {
    if b.get(i..).is_some_and(|rest| rest.starts_with(word)) {
        Ok(i + word.len())
    } else {
        Err(SyntaxError)
    }
}

/// The end of the number token at `start`, checked against the JSON grammar.
fn number_end(b: &[u8], start: usize) -> Result<usize, SyntaxError> {
    let digits = |mut i: usize| {
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        i
    };
    let mut i = start;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(i + 1),
        _ => return Err(SyntaxError),
    }
    if b.get(i) == Some(&b'.') {
        if !matches!(b.get(i + 1), Some(b'0'..=b'9')) {
            return Err(SyntaxError);
        }
        i = digits(i + 1);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !matches!(b.get(i), Some(b'0'..=b'9')) {
            return Err(SyntaxError);
        }
        i = digits(i);
    }
    Ok(i)
}

/// The body of a string token from `start` (after its opening quote), byte by byte: where its
/// closing quote is, and whether it holds an escape.
#[inline(never)]
fn string_body(b: &[u8], start: usize) -> Result<(usize, bool), SyntaxError> {
    let mut escaped = false;
    let mut i = start;
    loop {
        // Find the next special byte 8 bytes at a time; the last word is padded with NULs,
        // which stop the search at the end of the text.
        loop {
            let w = match b.get(i..i + 8) {
                Some(word) => u64::from_le_bytes(word.try_into().unwrap_or([0; 8])),
                None => {
                    let mut word = [0u8; 8];
                    let rest = b.get(i..).unwrap_or_default();
                    word[..rest.len()].copy_from_slice(rest);
                    u64::from_le_bytes(word)
                }
            };
            let m = special_mask(w);
            if m != 0 {
                i += (m.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        let Some(&c) = b.get(i) else { return Err(SyntaxError) };
        match c {
            b'"' => break,
            b'\\' => {
                escaped = true;
                match b.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        if b.len() < i + 6 || !b[i + 2..i + 6].iter().all(|c| c.is_ascii_hexdigit()) {
                            return Err(SyntaxError);
                        }
                        i += 6;
                    }
                    _ => return Err(SyntaxError),
                }
            }
            0..=0x1F => return Err(SyntaxError),
            _ => i += 1,
        }
    }
    Ok((i, escaped))
}

/// A member value seen by the shallow record reader.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    /// The number's JSON text (parse with [`number_value`]).
    Number(&'a str),
    String(RawStr<'a>),
    Object,
    Array,
}

/// The f64 `JSON.parse` gives for a number token (correctly rounded; may be ±Infinity).
pub fn number_value(text: &str) -> f64 {
    text.parse::<f64>().unwrap_or(f64::NAN)
}

/// Decodes a payload as `TextDecoder` does (lossy UTF-8, one leading BOM dropped) (P4).
pub fn decode_text(payload: &[u8]) -> std::borrow::Cow<'_, str> {
    let payload = payload.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(payload);
    match std::str::from_utf8(payload) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(payload),
    }
}

/// `JSON.parse(text)`.
pub fn parse(text: &str) -> Result<Value, SyntaxError> {
    enum Frame {
        Array(Vec<Value>),
        Object(Object, JsString),
    }
    let mut sc = Scanner::new(text.as_bytes());
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        sc.ws();
        let mut value = match sc.peek() {
            Some(b'{') => {
                sc.pos += 1;
                sc.ws();
                if sc.eat(b'}') {
                    Value::Object(Object::new())
                } else {
                    let key = JsString::from_wtf8(sc.string()?.decode().into_owned());
                    sc.ws();
                    sc.expect(b':')?;
                    stack.push(Frame::Object(Object::new(), key));
                    continue;
                }
            }
            Some(b'[') => {
                sc.pos += 1;
                sc.ws();
                if sc.eat(b']') {
                    Value::Array(Vec::new())
                } else {
                    stack.push(Frame::Array(Vec::new()));
                    continue;
                }
            }
            Some(b'"') => Value::String(JsString::from_wtf8(sc.string()?.decode().into_owned())),
            Some(b't') => {
                sc.literal(b"true")?;
                Value::Bool(true)
            }
            Some(b'f') => {
                sc.literal(b"false")?;
                Value::Bool(false)
            }
            Some(b'n') => {
                sc.literal(b"null")?;
                Value::Null
            }
            Some(b'-' | b'0'..=b'9') => Value::Number(number_value(sc.number()?)),
            _ => return Err(SyntaxError),
        };
        // Attach the value to its parent, closing finished containers.
        loop {
            let Some(frame) = stack.last_mut() else {
                return if sc.at_end() { Ok(value) } else { Err(SyntaxError) };
            };
            sc.ws();
            match frame {
                Frame::Array(items) => {
                    items.push(value);
                    if sc.eat(b',') {
                        break;
                    }
                    sc.expect(b']')?;
                    let Some(Frame::Array(items)) = stack.pop() else { unreachable!() };
                    value = Value::Array(items);
                }
                Frame::Object(obj, key) => {
                    obj.insert(std::mem::take(key), value);
                    if sc.eat(b',') {
                        sc.ws();
                        *key = JsString::from_wtf8(sc.string()?.decode().into_owned());
                        sc.ws();
                        sc.expect(b':')?;
                        break;
                    }
                    sc.expect(b'}')?;
                    let Some(Frame::Object(obj, _)) = stack.pop() else { unreachable!() };
                    value = Value::Object(obj);
                }
            }
        }
    }
}

/// Renders a value as `JSON.stringify` would (for tests and diagnostics).
pub fn stringify(v: &Value) -> String {
    let mut out = String::new();
    write_json(v, &mut out);
    out
}

fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Null | Value::Undefined => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_finite() {
                out.push_str(&format_number(*n))
            } else {
                out.push_str("null")
            }
        }
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, k) in o.keys().into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(k, out);
                out.push(':');
                write_json(o.get_bytes(k.as_bytes()).unwrap_or(&Value::Null), out);
            }
            out.push('}');
        }
    }
}

fn write_json_string(s: &JsString, out: &mut String) {
    out.push('"');
    for cp in super::string::code_points(s.as_bytes()) {
        match cp {
            0x22 => out.push_str("\\\""),
            0x5C => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0C => out.push_str("\\f"),
            0x0A => out.push_str("\\n"),
            0x0D => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0..=0x1F | 0xD800..=0xDFFF => out.push_str(&format!("\\u{cp:04x}")),
            _ => out.push(char::from_u32(cp).unwrap_or('\u{FFFD}')),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a scanner reads from `text` as one value: the string bodies it decoded (a
    /// top-level string, or none: skip_value validates containers whole) and where it ended,
    /// or the error.
    fn tokens(sc: Scanner<'_>) -> Result<(Vec<Vec<u8>>, usize), SyntaxError> {
        tokens_skipping(sc, |sc| sc.skip_value())
    }

    /// [`tokens`] with `skip` for containers.
    fn tokens_skipping(
        mut sc: Scanner<'_>,
        skip: fn(&mut Scanner<'_>) -> Result<(), SyntaxError>,
    ) -> Result<(Vec<Vec<u8>>, usize), SyntaxError> {
        let mut strings = Vec::new();
        sc.ws();
        if sc.peek() == Some(b'"') {
            strings.push(sc.string()?.decode().into_owned());
        } else {
            skip(&mut sc)?;
        }
        if !sc.at_end() {
            return Err(SyntaxError);
        }
        Ok((strings, sc.position()))
    }

    /// The definition of [`Scanner::skip_value`]: a walk token by token, with the open
    /// containers on a byte stack (the scanner's code before it kept a local position).
    fn skip_value_stepwise(sc: &mut Scanner<'_>) -> Result<(), SyntaxError> {
        let mut stack = Vec::new();
        loop {
            sc.ws();
            match sc.peek() {
                Some(b'{') => {
                    sc.pos += 1;
                    sc.ws();
                    if !sc.eat(b'}') {
                        stack.push(b'{');
                        sc.ws();
                        sc.string()?;
                        sc.ws();
                        sc.expect(b':')?;
                        continue;
                    }
                }
                Some(b'[') => {
                    sc.pos += 1;
                    sc.ws();
                    if !sc.eat(b']') {
                        stack.push(b'[');
                        continue;
                    }
                }
                Some(b'"') => {
                    sc.string()?;
                }
                Some(b't') => sc.literal(b"true")?,
                Some(b'f') => sc.literal(b"false")?,
                Some(b'n') => sc.literal(b"null")?,
                Some(b'-' | b'0'..=b'9') => {
                    sc.number()?;
                }
                _ => return Err(SyntaxError),
            }
            loop {
                let Some(&top) = stack.last() else { return Ok(()) };
                sc.ws();
                if sc.eat(b',') {
                    if top == b'{' {
                        sc.ws();
                        sc.string()?;
                        sc.ws();
                        sc.expect(b':')?;
                    }
                    break;
                }
                sc.expect(if top == b'{' { b'}' } else { b']' })?;
                stack.pop();
            }
        }
    }

    /// The indexed scanners read `text` exactly as the plain one does, and all of them as
    /// the stepwise definition does.
    fn scanners_agree(text: &str) {
        let plain = tokens(Scanner::new(text.as_bytes()));
        assert_eq!(tokens_skipping(Scanner::new(text.as_bytes()), skip_value_stepwise), plain, "stepwise: {text:?}");
        assert_eq!(tokens(Scanner::indexed(text)), plain, "{text:?}");
        match Scanner::indexed_raw(text.as_bytes()) {
            Some(sc) => assert_eq!(tokens(sc), plain, "{text:?}"),
            None => assert!(text.starts_with('\u{FEFF}'), "{text:?}"),
        }
    }

    /// A small deterministic generator (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    #[test]
    fn block64_flags_each_byte_as_its_definition_does() {
        for c in 0..=255u8 {
            for at in [0, 15, 16, 31, 32, 47, 48, 63] {
                let mut block = [b'a'; 64];
                block[at] = c;
                let ((got, high), (want, want_high)) = (block64(&block), block64_bytewise(&block));
                assert_eq!((got, high != 0), (want, want_high != 0), "byte {c:#x} at {at}");
            }
        }
    }

    #[test]
    fn the_index_has_each_byte_at_its_place() {
        assert_eq!(index(b""), Index { blocks: Default::default(), plain: true, non_ascii: false });
        assert!(index("\"\u{e9}\"".as_bytes()).non_ascii);
        // Raw bytes are read in place only when they decode to themselves.
        assert!(Scanner::indexed_raw(b"\"abc\"").is_some());
        assert!(Scanner::indexed_raw("\"\u{e9}\"".as_bytes()).is_some());
        assert!(Scanner::indexed_raw(b"\"\xc3\"").is_none());
        assert!(Scanner::indexed_raw(b"\xEF\xBB\xBF\"a\"").is_none());
        // Wherever a byte sits, in a full block or in the overlapped last one.
        for len in [1, 63, 64, 65, 130] {
            for at in 0..len {
                for (c, quote, special) in
                    [(b'"', true, false), (b'\\', false, true), (b'\n', false, true), (0x80, false, false)]
                {
                    let mut text = vec![b'a'; len];
                    text[at] = c;
                    let Index { blocks, plain, non_ascii } = index(&text);
                    assert_eq!(non_ascii, c >= 0x80);
                    assert_eq!(plain, !special);
                    assert_eq!(blocks.len(), len.div_ceil(64));
                    let bit = |w: u64| w >> (at % 64) & 1 == 1;
                    let count = |f: fn(&Block) -> u64| blocks.iter().map(|b| f(b).count_ones()).sum::<u32>();
                    assert_eq!(
                        (bit(blocks[at / 64].quotes), count(|b| b.quotes)),
                        (quote, quote as u32),
                        "{c:#x} at {at} of {len}"
                    );
                    assert_eq!(
                        (bit(blocks[at / 64].special), count(|b| b.special)),
                        (special, special as u32),
                        "{c:#x} at {at} of {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn indexed_strings_end_where_scanned_strings_end() {
        // String tokens of every length around the 64-byte block edges, opened at every phase,
        // plain or with one escape, control character or non-ASCII character somewhere.
        let odd = ["", "\\\"", "\\\\", "\\n", "\\u00e9", "\\ud800", "\\x", "\\", "\t", "\u{e9}", "\u{1F600}"];
        for pad in 0..70 {
            for len in [0, 1, 2, 7, 8, 62, 63, 64, 65, 127, 128, 129, 200] {
                for (k, odd) in odd.iter().enumerate() {
                    let cut = (len * k / odd.len().max(1)).min(len);
                    let body = format!("{}{odd}{}", "x".repeat(cut), "y".repeat(len - cut));
                    let spaces = if pad % 3 == 0 { "\n".repeat(pad) } else { " ".repeat(pad) };
                    scanners_agree(&format!("{spaces}\"{body}\""));
                    scanners_agree(&format!("{spaces}[\"{body}\",\"{body}\"] "));
                    scanners_agree(&format!("{spaces}{{\"{body}\":\"y\",\"z\":\"{body}\"}}"));
                    // Unterminated, and a quote too many: errors on both.
                    scanners_agree(&format!("{spaces}\"{body}"));
                    scanners_agree(&format!("{spaces}[\"{body}\"\"]"));
                }
            }
        }
    }

    #[test]
    fn indexed_scanners_read_soup_as_the_plain_one_does() {
        // Quotes and backslashes are frequent so that strings open, close and escape often.
        let alphabet: Vec<char> = "\"\"\"\"\\\\{}[]:,ab 01-.eE+truefalsnu\n\t\u{1}\u{e9}\u{1F600}".chars().collect();
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut valid = 0;
        for _ in 0..50_000 {
            let len = rng.below(160);
            let text: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            scanners_agree(&text);
            valid += tokens(Scanner::new(text.as_bytes())).is_ok() as u32;
        }
        // Records cut at every length and with one byte changed: mostly errors, some valid.
        let record = r#"{"type":"public.e0","key":"1","value":{"id":"1","t":"a \"q\" \u00e9 é","n":[1,-2.5e3,true,null,{}]},"headers":{"operation":"insert"}}"#;
        for cut in 0..=record.len() {
            if let Some(text) = record.get(..cut) {
                scanners_agree(text);
            }
            for c in ['"', '\\', 'x', '\n', '}'] {
                let mut text = record.to_string();
                if text.is_char_boundary(cut) && cut < text.len() {
                    text.insert(cut, c);
                    scanners_agree(&text);
                    valid += tokens(Scanner::new(text.as_bytes())).is_ok() as u32;
                }
            }
        }
        assert!(valid > 100, "the soup and the mutations should hold some valid texts ({valid})");
    }

    #[test]
    fn parses_like_json_parse() {
        let v = parse(r#" {"b":1,"2":1,"a":[true,false,null],"1":-0,"b":2,"s":"\u00e9\ud83d\ude00\ud800"} "#).unwrap();
        let o = v.as_object().unwrap();
        let keys: Vec<String> = o.keys().iter().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["1", "2", "b", "a", "s"]);
        assert_eq!(o.get("b"), Some(&Value::Number(2.0)));
        let Some(Value::Number(z)) = o.get("1") else { panic!() };
        assert!(z.is_sign_negative());
        let s = o.get("s").unwrap().as_str_bytes().unwrap();
        assert_eq!(JsString::from_wtf8(s.to_vec()).to_utf16(), vec![0xE9, 0xD83D, 0xDE00, 0xD800]);
        assert_eq!(parse("1e400").unwrap(), Value::Number(f64::INFINITY));
        assert_eq!(parse("9007199254740993").unwrap(), Value::Number(9007199254740992.0));
    }

    #[test]
    fn rejects_what_json_parse_rejects() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "+1",
            "-",
            "1e",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\t\"",
            "\"\\u12\"",
            "{a:1}",
            "[1 2]",
            "1 2",
            "NaN",
            "Infinity",
            "'a'",
            "\u{FEFF}1",
            "[\"a\":1]",
            "{\"a\" 1}",
        ] {
            assert_eq!(parse(bad), Err(SyntaxError), "{bad:?}");
        }
        for good in ["0", "-0", "1E+2", "[]", "{}", "\"\"", " [ { } , [ ] ] ", "\"\u{7F}\u{2028}\""] {
            assert!(parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn deep_nesting_neither_overflows_nor_fails() {
        let depth = 200_000;
        let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let v = parse(&text).unwrap();
        drop(v);
        let mut sc = Scanner::new(text.as_bytes());
        sc.skip_value().unwrap();
        assert!(sc.at_end());
        let text = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        assert!(parse(&text).is_ok());
        assert!(parse(&text[..text.len() - 1]).is_err());
    }

    #[test]
    fn skipping_tracks_objects_and_arrays_past_64_levels() {
        // Containers of both kinds in a pattern that is not periodic in 64, so that every
        // word of skip_value's nesting bits holds a different mix; each one closed right, and
        // with one close of the wrong kind at depths around the word edges.
        let kinds: Vec<bool> = (0..200).map(|i| (i * 7 / 3) % 2 == 0 || i % 5 == 0).collect();
        let close = |object: bool| if object { '}' } else { ']' };
        for depth in [1, 63, 64, 65, 127, 128, 129, 200] {
            let open: String = kinds[..depth].iter().map(|&o| if o { "{\"k\": " } else { "[0, " }).collect();
            let closes: Vec<char> = kinds[..depth].iter().rev().map(|&o| close(o)).collect();
            let good = format!("{open}true{}", closes.iter().collect::<String>());
            scanners_agree(&good);
            assert!(tokens(Scanner::new(good.as_bytes())).is_ok(), "depth {depth}");
            for wrong in [0, depth / 2, depth - 1] {
                let mut bad = closes.clone();
                bad[wrong] = close(!kinds[depth - 1 - wrong]);
                let bad = format!("{open}true{}", bad.iter().collect::<String>());
                scanners_agree(&bad);
                assert!(tokens(Scanner::new(bad.as_bytes())).is_err(), "depth {depth}, wrong close {wrong}");
            }
        }
    }

    #[test]
    fn to_number_and_strings() {
        assert_eq!(parse("\" 12 \"").unwrap().to_number(), 12.0);
        assert_eq!(parse("[5]").unwrap().to_number(), 5.0);
        assert_eq!(parse("[]").unwrap().to_number(), 0.0);
        assert_eq!(parse("[null]").unwrap().to_number(), 0.0);
        assert!(parse("[1,2]").unwrap().to_number().is_nan());
        assert!(parse("{}").unwrap().to_number().is_nan());
        assert_eq!(parse("true").unwrap().to_number(), 1.0);
        assert_eq!(parse("null").unwrap().to_number(), 0.0);
        assert_eq!(parse("[1,[2,3],null,\"x\"]").unwrap().to_js_string().unwrap().to_string(), "1,2,3,,x");
        assert_eq!(stringify(&parse(r#"{"b":[1,"\n"],"0":null}"#).unwrap()), r#"{"0":null,"b":[1,"\n"]}"#);
    }

    #[test]
    fn decodes_like_text_decoder() {
        assert_eq!(decode_text(b"\xEF\xBB\xBF\xEF\xBB\xBFA\xFF\xC3"), "\u{FEFF}A\u{FFFD}\u{FFFD}");
        assert_eq!(decode_text(b"{}"), "{}");
    }
}
