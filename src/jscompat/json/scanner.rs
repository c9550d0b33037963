//! The JSON lexer: [`Scanner`] walks tokens without building a tree; `Scanner::indexed` first
//! indexes the text, 64 bytes per SSE2 pass (where its quotes and special bytes are).

use std::cell::Cell;

use crate::jscompat::string::push_code_point;

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
    pub(super) pos: usize,
    /// Where the text's `"` bytes and special bytes are ([`index`]), for a scanner made by
    /// [`Scanner::indexed`] or [`Scanner::indexed_raw`].
    index: Option<Index>,
}

/// Two bits per byte of a text, 64 bytes per [`Block`]. The blocks' buffer is reused: a
/// scanner hands it back when dropped ([`SPARE_BLOCKS`]), and the next index on the thread
/// takes it, so indexing a payload neither allocates nor moves blocks around.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Index {
    pub(super) blocks: Vec<Block>,
    /// No special byte anywhere: every string token ends at the next quote (the usual case,
    /// with a cheaper lookup).
    pub(super) plain: bool,
    /// Some byte is above 0x7F.
    pub(super) non_ascii: bool,
}

/// A 64-byte block of a text: bit `i` of `quotes` is set where byte `i` is `"`, of `special`
/// where it is `\\` or below 0x20.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Block {
    pub(super) quotes: u64,
    pub(super) special: u64,
}

/// Indexes the quotes and special bytes of `b` (see [`Block`]). A string token whose bytes up
/// to the next quote hold no special byte ends at that quote and is valid as it stands (no
/// escape, no control character); any other is scanned byte by byte ([`Scanner::string`]).
pub(super) fn index(b: &[u8]) -> Index {
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
pub(super) use block64_bytewise as block64;

/// The [`Block`] of 64 bytes, and a word that is non-zero when one of them is above 0x7F.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(super) fn block64(block: &[u8; 64]) -> (Block, u64) {
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
pub(super) fn block64_bytewise(block: &[u8; 64]) -> (Block, u64) {
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

    pub(super) fn literal(&mut self, word: &[u8]) -> Result<(), SyntaxError> {
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
