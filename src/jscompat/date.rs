//! `new Date(string)` and `toISOString()`, for the `datetime` template encoding (K13).
//!
//! The reference runs under Bun, whose `Date` string parser accepts what V8's does (apart from
//! which characters separate tokens, see [`is_white_space`]): first the
//! ES5 ISO form (`[+-yy]yyyy[-MM[-DD]][THH:mm[:ss[.s+]][Z|±hh:mm|±hhmm]]`), and whatever is left
//! goes to the lenient legacy parser (month names, `1/2/2024`, `10:00 pm`, `GMT+0100`,
//! parenthesised comments, KJS two-digit years, …). This module is a port of that algorithm
//! over UTF-16 code units, with one deliberate difference: strings without a zone are read as
//! **UTC** rather than in the process time zone (B17, see docs/deviations.md). Under `TZ=UTC`
//! the result is identical.

const NONE: i32 = i32::MAX;
const MAX_SIGNIFICANT_DIGITS: i32 = 9;
const MAX_TIME_MS: f64 = 8.64e15;
const MAX_TIME_BEFORE_UTC_MS: f64 = 8.64e15 + 864_000_000.0;

/// Parses like `new Date(s).getTime()`, with the local time zone taken as UTC. `None` is an
/// invalid date.
pub fn parse_date_utc16(s: &[u16]) -> Option<f64> {
    let fields = parse_fields(s)?;
    let day = make_day(fields.year as f64, fields.month as f64, fields.day as f64);
    let time = fields.hour as f64 * 3_600_000.0
        + fields.minute as f64 * 60_000.0
        + fields.second as f64 * 1000.0
        + fields.millisecond as f64;
    let mut date = day * 86_400_000.0 + time;
    if !date.is_finite() {
        return None;
    }
    match fields.utc_offset_seconds {
        None => {
            if !(-MAX_TIME_BEFORE_UTC_MS..=MAX_TIME_BEFORE_UTC_MS).contains(&date) {
                return None;
            }
            // Local time = UTC (B17).
        }
        Some(off) => {
            date -= off as f64 * 1000.0;
            if !(-MAX_TIME_MS..=MAX_TIME_MS).contains(&date) {
                return None;
            }
        }
    }
    // TimeClip.
    if date.abs() > MAX_TIME_MS {
        return None;
    }
    Some(date.trunc() + 0.0)
}

/// Parses a Rust string (see [`parse_date_utc16`]).
pub fn parse_date_utc(s: &str) -> Option<f64> {
    let units: Vec<u16> = s.encode_utf16().collect();
    parse_date_utc16(&units)
}

/// `new Date(ms).toISOString()` for a valid time value.
pub fn to_iso_string(ms: f64) -> String {
    let ms = ms as i64;
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss, mss) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
    let year = if (0..=9999).contains(&y) {
        format!("{y:04}")
    } else if y < 0 {
        format!("-{:06}", -y)
    } else {
        format!("+{y:06}")
    };
    format!("{year}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{mss:03}Z")
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// ES MakeDay with V8's year/month range limits; `month` is 0-based.
fn make_day(year: f64, month: f64, date: f64) -> f64 {
    if !((-1_000_000.0..=1_000_000.0).contains(&year) && (-10_000_000.0..=10_000_000.0).contains(&month)) {
        return f64::NAN;
    }
    let mut y = year as i64;
    let mut m = month as i64;
    y += m / 12;
    m %= 12;
    if m < 0 {
        m += 12;
        y -= 1;
    }
    (days_from_civil(y, m + 1, 1) as f64) + date.trunc() - 1.0
}

struct Fields {
    year: i32,
    month: i32, // 0-based
    day: i32,
    hour: i32,
    minute: i32,
    second: i32,
    millisecond: i32,
    utc_offset_seconds: Option<i32>,
}

// ------------------------------------------------------------------ tokenizer

struct Reader<'a> {
    s: &'a [u16],
    index: usize,
    ch: u32,
}

impl<'a> Reader<'a> {
    fn new(s: &'a [u16]) -> Self {
        let mut r = Reader { s, index: 0, ch: 0 };
        r.next();
        r
    }
    fn next(&mut self) {
        self.ch = if self.index < self.s.len() { self.s[self.index] as u32 } else { 0 };
        self.index += 1;
    }
    fn position(&self) -> usize {
        self.index
    }
    fn is_end(&self) -> bool {
        self.ch == 0
    }
    fn is_digit(&self) -> bool {
        (b'0' as u32..=b'9' as u32).contains(&self.ch)
    }
    fn skip(&mut self, c: u8) -> bool {
        if self.ch == c as u32 {
            self.next();
            true
        } else {
            false
        }
    }
    fn read_unsigned_numeral(&mut self) -> i32 {
        let mut n: i32 = 0;
        let mut i = 0;
        while self.ch == b'0' as u32 {
            self.next();
        }
        while self.is_digit() {
            if i < MAX_SIGNIFICANT_DIGITS {
                n = n * 10 + (self.ch - b'0' as u32) as i32;
            }
            i += 1;
            self.next();
        }
        n
    }
    fn is_word_char(&self) -> bool {
        self.ch >= b'A' as u32 && !is_white_space(self.ch)
    }
    fn read_word(&mut self) -> ([u32; 3], i32) {
        let mut prefix = [0u32; 3];
        let mut len = 0;
        while self.is_word_char() {
            if len < 3 {
                prefix[len as usize] = self.ch | 0x20;
            }
            len += 1;
            self.next();
        }
        (prefix, len)
    }
    fn skip_white_space(&mut self) -> bool {
        if is_white_space(self.ch) {
            self.next();
            true
        } else {
            false
        }
    }
    fn skip_parentheses(&mut self) -> bool {
        if self.ch != b'(' as u32 {
            return false;
        }
        let mut balance = 0;
        loop {
            if self.ch == b')' as u32 {
                balance -= 1;
            } else if self.ch == b'(' as u32 {
                balance += 1;
            }
            self.next();
            if !(balance > 0 && self.ch != 0) {
                break;
            }
        }
        true
    }
}

/// The separators Bun's date parser skips: ASCII whitespace without VT (WTF's
/// `isASCIIWhitespace`) plus U+202F, which ICU puts before AM/PM. V8 instead uses the full JS
/// whitespace set; every other non-ASCII character, U+00A0 and U+3000 included, is part of a
/// word under Bun (measured by probing all of U+0000..U+FFFF).
fn is_white_space(c: u32) -> bool {
    matches!(c, 0x09 | 0x0A | 0x0C | 0x0D | 0x20 | 0x202F)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kw {
    Invalid,
    MonthName,
    TimeZoneName,
    TimeSeparator,
    AmPm,
}

#[derive(Clone, Copy, Debug)]
enum Tok {
    Invalid,
    Unknown,
    WhiteSpace,
    Number { value: i32, len: i32 },
    Symbol(u8),
    End,
    Keyword { kind: Kw, value: i32, len: i32 },
}

impl Tok {
    fn is_number(&self) -> bool {
        matches!(self, Tok::Number { .. })
    }
    fn number(&self) -> i32 {
        if let Tok::Number { value, .. } = self {
            *value
        } else {
            0
        }
    }
    fn fixed_number(&self, n: i32) -> bool {
        matches!(self, Tok::Number { len, .. } if *len == n)
    }
    fn is_symbol(&self, c: u8) -> bool {
        matches!(self, Tok::Symbol(s) if *s == c)
    }
    fn is_sign(&self) -> bool {
        self.is_symbol(b'+') || self.is_symbol(b'-')
    }
    fn sign(&self) -> i32 {
        if self.is_symbol(b'-') {
            -1
        } else {
            1
        }
    }
    fn is_end(&self) -> bool {
        matches!(self, Tok::End)
    }
    fn is_keyword_z(&self) -> bool {
        matches!(self, Tok::Keyword { kind: Kw::TimeZoneName, len: 1, value: 0 })
    }
    fn is_kw(&self, k: Kw) -> bool {
        matches!(self, Tok::Keyword { kind, .. } if *kind == k)
    }
}

const KEYWORDS: &[([u8; 3], Kw, i32)] = &[
    (*b"jan", Kw::MonthName, 1),
    (*b"feb", Kw::MonthName, 2),
    (*b"mar", Kw::MonthName, 3),
    (*b"apr", Kw::MonthName, 4),
    (*b"may", Kw::MonthName, 5),
    (*b"jun", Kw::MonthName, 6),
    (*b"jul", Kw::MonthName, 7),
    (*b"aug", Kw::MonthName, 8),
    (*b"sep", Kw::MonthName, 9),
    (*b"oct", Kw::MonthName, 10),
    (*b"nov", Kw::MonthName, 11),
    (*b"dec", Kw::MonthName, 12),
    (*b"am\0", Kw::AmPm, 0),
    (*b"pm\0", Kw::AmPm, 12),
    (*b"ut\0", Kw::TimeZoneName, 0),
    (*b"utc", Kw::TimeZoneName, 0),
    (*b"z\0\0", Kw::TimeZoneName, 0),
    (*b"gmt", Kw::TimeZoneName, 0),
    (*b"cdt", Kw::TimeZoneName, -5),
    (*b"cst", Kw::TimeZoneName, -6),
    (*b"edt", Kw::TimeZoneName, -4),
    (*b"est", Kw::TimeZoneName, -5),
    (*b"mdt", Kw::TimeZoneName, -6),
    (*b"mst", Kw::TimeZoneName, -7),
    (*b"pdt", Kw::TimeZoneName, -7),
    (*b"pst", Kw::TimeZoneName, -8),
    (*b"t\0\0", Kw::TimeSeparator, 0),
];

fn lookup_keyword(prefix: [u32; 3], len: i32) -> (Kw, i32) {
    for (word, kind, value) in KEYWORDS {
        if (0..3).all(|j| prefix[j] == word[j] as u32) && (len <= 3 || *kind == Kw::MonthName) {
            return (*kind, *value);
        }
    }
    (Kw::Invalid, 0)
}

struct Tokenizer<'a> {
    r: Reader<'a>,
    next: Tok,
}

impl<'a> Tokenizer<'a> {
    fn new(s: &'a [u16]) -> Self {
        let mut r = Reader::new(s);
        let next = scan(&mut r);
        Tokenizer { r, next }
    }
    fn next(&mut self) -> Tok {
        let t = self.next;
        self.next = scan(&mut self.r);
        t
    }
    fn peek(&self) -> Tok {
        self.next
    }
    fn skip_symbol(&mut self, c: u8) -> bool {
        if self.next.is_symbol(c) {
            self.next();
            true
        } else {
            false
        }
    }
}

fn scan(r: &mut Reader<'_>) -> Tok {
    let pre = r.position();
    if r.is_end() {
        return Tok::End;
    }
    if r.is_digit() {
        let n = r.read_unsigned_numeral();
        return Tok::Number { value: n, len: (r.position() - pre) as i32 };
    }
    for c in [b':', b'-', b'+', b'.', b')'] {
        if r.skip(c) {
            return Tok::Symbol(c);
        }
    }
    if r.is_word_char() {
        let (prefix, len) = r.read_word();
        let (kind, value) = lookup_keyword(prefix, len);
        return Tok::Keyword { kind, value, len };
    }
    if r.skip_white_space() {
        return Tok::WhiteSpace;
    }
    if r.skip_parentheses() {
        return Tok::Unknown;
    }
    r.next();
    Tok::Unknown
}

// ------------------------------------------------------------------ composers

fn between(x: i32, lo: i32, hi: i32) -> bool {
    (lo..=hi).contains(&x)
}
fn is_month(x: i32) -> bool {
    between(x, 1, 12)
}
fn is_day(x: i32) -> bool {
    between(x, 1, 31)
}
fn is_hour(x: i32) -> bool {
    between(x, 0, 23)
}
fn is_minute(x: i32) -> bool {
    between(x, 0, 59)
}
fn is_second(x: i32) -> bool {
    between(x, 0, 59)
}
fn is_hour12(x: i32) -> bool {
    between(x, 0, 12)
}
fn is_millisecond(x: i32) -> bool {
    between(x, 0, 999)
}

struct Day {
    comp: [i32; 3],
    index: usize,
    named_month: i32,
    is_iso_date: bool,
}

impl Day {
    fn is_empty(&self) -> bool {
        self.index == 0
    }
    fn add(&mut self, n: i32) -> bool {
        if self.index == 3 {
            return false;
        }
        self.comp[self.index] = n;
        self.index += 1;
        true
    }
    fn write(&mut self) -> Option<(i32, i32, i32)> {
        if self.index < 1 {
            return None;
        }
        while self.index < 3 {
            self.comp[self.index] = 1;
            self.index += 1;
        }
        let mut year = 0;
        let month;
        let day;
        if self.named_month == NONE {
            if self.is_iso_date || (self.index == 3 && !is_day(self.comp[0])) {
                year = self.comp[0];
                month = self.comp[1];
                day = self.comp[2];
            } else {
                month = self.comp[0];
                day = self.comp[1];
                if self.index == 3 {
                    year = self.comp[2];
                }
            }
        } else {
            month = self.named_month;
            if self.index == 1 {
                day = self.comp[0];
            } else if !is_day(self.comp[0]) {
                year = self.comp[0];
                day = self.comp[1];
            } else {
                day = self.comp[0];
                year = self.comp[1];
            }
        }
        if !self.is_iso_date {
            if between(year, 0, 49) {
                year += 2000;
            } else if between(year, 50, 99) {
                year += 1900;
            }
        }
        if !is_month(month) || !is_day(day) {
            return None;
        }
        Some((year, month - 1, day))
    }
}

struct Time {
    comp: [i32; 4],
    index: usize,
    hour_offset: i32,
}

impl Time {
    fn is_empty(&self) -> bool {
        self.index == 0
    }
    fn is_expecting(&self, n: i32) -> bool {
        (self.index == 1 && is_minute(n)) || (self.index == 2 && is_second(n)) || (self.index == 3 && is_millisecond(n))
    }
    fn add(&mut self, n: i32) -> bool {
        if self.index < 4 {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }
    fn add_final(&mut self, n: i32) -> bool {
        if !self.add(n) {
            return false;
        }
        while self.index < 4 {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        true
    }
    fn write(&mut self) -> Option<[i32; 4]> {
        while self.index < 4 {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        let [mut hour, minute, second, millisecond] = self.comp;
        if self.hour_offset != NONE {
            if !is_hour12(hour) {
                return None;
            }
            hour %= 12;
            hour += self.hour_offset;
        }
        if (!is_hour(hour) || !is_minute(minute) || !is_second(second) || !is_millisecond(millisecond))
            && (hour != 24 || minute != 0 || second != 0 || millisecond != 0)
        {
            return None;
        }
        Some([hour, minute, second, millisecond])
    }
}

struct Zone {
    sign: i32,
    hour: i32,
    minute: i32,
}

impl Zone {
    fn set(&mut self, offset_hours: i32) {
        self.sign = if offset_hours < 0 { -1 } else { 1 };
        self.hour = offset_hours * self.sign;
        self.minute = 0;
    }
    fn set_sign(&mut self, sign: i32) {
        self.sign = if sign < 0 { -1 } else { 1 };
    }
    fn is_expecting(&self, n: i32) -> bool {
        self.hour != NONE && self.minute == NONE && is_minute(n)
    }
    fn is_utc(&self) -> bool {
        self.hour == 0 && self.minute == 0
    }
    fn is_empty(&self) -> bool {
        self.hour == NONE
    }
    fn write(&mut self) -> Option<Option<i32>> {
        if self.sign == NONE {
            return Some(None);
        }
        if self.hour == NONE {
            self.hour = 0;
        }
        if self.minute == NONE {
            self.minute = 0;
        }
        let total = (self.hour as u32).wrapping_mul(3600).wrapping_add((self.minute as u32).wrapping_mul(60));
        if total > (1u32 << 30) - 1 {
            return None;
        }
        let total = total as i32;
        Some(Some(if self.sign < 0 { -total } else { total }))
    }
}

fn read_milliseconds(tok: Tok) -> i32 {
    let (mut number, mut length) = match tok {
        Tok::Number { value, len } => (value, len),
        _ => (0, 0),
    };
    if length < 3 {
        if length == 1 {
            number *= 100;
        } else if length == 2 {
            number *= 10;
        }
    } else if length > 3 {
        if length > MAX_SIGNIFICANT_DIGITS {
            length = MAX_SIGNIFICANT_DIGITS;
        }
        let mut factor = 1;
        loop {
            factor *= 10;
            length -= 1;
            if length <= 3 {
                break;
            }
        }
        number /= factor;
    }
    number
}

/// The ES5 ISO part. Returns the first token the legacy parser must look at, `End` on a
/// complete ISO string, or `Invalid`.
fn parse_es5(sc: &mut Tokenizer<'_>, day: &mut Day, time: &mut Time, tz: &mut Zone) -> Tok {
    if sc.peek().is_sign() {
        let sign_token = sc.next();
        if !sc.peek().fixed_number(6) {
            return sign_token;
        }
        let sign = sign_token.sign();
        let year = sc.next().number();
        if sign < 0 && year == 0 {
            return sign_token;
        }
        day.add(sign * year);
    } else if sc.peek().fixed_number(4) {
        day.add(sc.next().number());
    } else {
        return sc.next();
    }
    if sc.skip_symbol(b'-') {
        if !sc.peek().fixed_number(2) || !is_month(sc.peek().number()) {
            return sc.next();
        }
        day.add(sc.next().number());
        if sc.skip_symbol(b'-') {
            if !sc.peek().fixed_number(2) || !is_day(sc.peek().number()) {
                return sc.next();
            }
            day.add(sc.next().number());
        }
    }
    if !sc.peek().is_kw(Kw::TimeSeparator) {
        if !sc.peek().is_end() {
            return sc.next();
        }
    } else {
        sc.next();
        if !sc.peek().fixed_number(2) || !between(sc.peek().number(), 0, 24) {
            return Tok::Invalid;
        }
        let hour_is_24 = sc.peek().number() == 24;
        time.add(sc.next().number());
        if !sc.skip_symbol(b':') {
            return Tok::Invalid;
        }
        if !sc.peek().fixed_number(2) || !is_minute(sc.peek().number()) || (hour_is_24 && sc.peek().number() > 0) {
            return Tok::Invalid;
        }
        time.add(sc.next().number());
        if sc.skip_symbol(b':') {
            if !sc.peek().fixed_number(2) || !is_second(sc.peek().number()) || (hour_is_24 && sc.peek().number() > 0) {
                return Tok::Invalid;
            }
            time.add(sc.next().number());
            if sc.skip_symbol(b'.') {
                if !sc.peek().is_number() || (hour_is_24 && sc.peek().number() > 0) {
                    return Tok::Invalid;
                }
                time.add(read_milliseconds(sc.next()));
            }
        }
        if sc.peek().is_keyword_z() {
            sc.next();
            tz.set(0);
        } else if sc.peek().is_sign() {
            tz.set_sign(sc.next().sign());
            if sc.peek().fixed_number(4) {
                let hourmin = sc.next().number();
                let (hour, min) = (hourmin / 100, hourmin % 100);
                if !is_hour(hour) || !is_minute(min) {
                    return Tok::Invalid;
                }
                tz.hour = hour;
                tz.minute = min;
            } else {
                if !sc.peek().fixed_number(2) || !is_hour(sc.peek().number()) {
                    return Tok::Invalid;
                }
                tz.hour = sc.next().number();
                if !sc.skip_symbol(b':') {
                    return Tok::Invalid;
                }
                if !sc.peek().fixed_number(2) || !is_minute(sc.peek().number()) {
                    return Tok::Invalid;
                }
                tz.minute = sc.next().number();
            }
        }
        if !sc.peek().is_end() {
            return Tok::Invalid;
        }
    }
    // Date-only forms without a zone are UTC; date-time forms are local time.
    if tz.is_empty() && time.is_empty() {
        tz.set(0);
    }
    day.is_iso_date = true;
    Tok::End
}

fn parse_fields(s: &[u16]) -> Option<Fields> {
    let mut sc = Tokenizer::new(s);
    let mut day = Day { comp: [0; 3], index: 0, named_month: NONE, is_iso_date: false };
    let mut time = Time { comp: [0; 4], index: 0, hour_offset: NONE };
    let mut tz = Zone { sign: NONE, hour: NONE, minute: NONE };

    let first = parse_es5(&mut sc, &mut day, &mut time, &mut tz);
    if matches!(first, Tok::Invalid) {
        return None;
    }
    let mut has_read_number = !day.is_empty();
    let mut token = first;
    while !token.is_end() {
        match token {
            Tok::Number { value: n, .. } => {
                has_read_number = true;
                if sc.skip_symbol(b':') {
                    if sc.skip_symbol(b':') {
                        if !time.is_empty() {
                            return None;
                        }
                        time.add(n);
                        time.add(0);
                    } else {
                        if !time.add(n) {
                            return None;
                        }
                        if sc.peek().is_symbol(b'.') {
                            sc.next();
                        }
                    }
                } else if sc.skip_symbol(b'.') && time.is_expecting(n) {
                    time.add(n);
                    if !sc.peek().is_number() {
                        return None;
                    }
                    let ms = read_milliseconds(sc.next());
                    if ms < 0 {
                        return None;
                    }
                    time.add_final(ms);
                } else if tz.is_expecting(n) {
                    tz.minute = n;
                } else if time.is_expecting(n) {
                    time.add_final(n);
                    let peek = sc.peek();
                    if !peek.is_end() && !matches!(peek, Tok::WhiteSpace) && !peek.is_keyword_z() && !peek.is_sign() {
                        return None;
                    }
                } else {
                    if !day.add(n) {
                        return None;
                    }
                    sc.skip_symbol(b'-');
                }
            }
            Tok::Keyword { kind, value, .. } => {
                if kind == Kw::AmPm && !time.is_empty() {
                    time.hour_offset = value;
                } else if kind == Kw::MonthName {
                    day.named_month = value;
                    sc.skip_symbol(b'-');
                } else if kind == Kw::TimeZoneName && has_read_number {
                    tz.set(value);
                } else {
                    if has_read_number {
                        return None;
                    }
                    if sc.peek().is_number() {
                        return None;
                    }
                }
            }
            t if t.is_sign() && (tz.is_utc() || !time.is_empty()) => {
                tz.set_sign(t.sign());
                let mut n = 0;
                let mut length = 0;
                if sc.peek().is_number() {
                    if let Tok::Number { value, len } = sc.next() {
                        n = value;
                        length = len;
                    }
                }
                has_read_number = true;
                if sc.peek().is_symbol(b':') {
                    tz.hour = n;
                    tz.minute = NONE;
                } else if length == 2 || length == 1 {
                    tz.hour = n;
                    tz.minute = 0;
                } else if length == 4 || length == 3 {
                    tz.hour = n / 100;
                    tz.minute = n % 100;
                } else {
                    return None;
                }
            }
            t if (t.is_sign() || t.is_symbol(b')')) && has_read_number => return None,
            _ => {}
        }
        token = sc.next();
    }
    let (year, month, d) = day.write()?;
    let [hour, minute, second, millisecond] = time.write()?;
    let utc_offset_seconds = tz.write()?;
    Some(Fields { year, month, day: d, hour, minute, second, millisecond, utc_offset_seconds })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iso(s: &str) -> String {
        parse_date_utc(s).map(to_iso_string).unwrap_or_else(|| "invalid".into())
    }

    #[test]
    fn parses_the_forms_bun_accepts() {
        // Values observed under Bun 1.3.6 with TZ=UTC.
        let cases = [
            ("1", "2001-01-01T00:00:00.000Z"),
            ("12", "2001-12-01T00:00:00.000Z"),
            ("2024-01-02", "2024-01-02T00:00:00.000Z"),
            ("2024-01-02T03:04:05", "2024-01-02T03:04:05.000Z"),
            ("2024-01-02T03:04:05+01:00", "2024-01-02T02:04:05.000Z"),
            ("Jan 2 2024", "2024-01-02T00:00:00.000Z"),
            ("2024/01/02", "2024-01-02T00:00:00.000Z"),
            ("1/2/2024", "2024-01-02T00:00:00.000Z"),
            ("Tue, 02 Jan 2024 03:04:05 GMT", "2024-01-02T03:04:05.000Z"),
            ("2024-1-2", "2024-01-02T00:00:00.000Z"),
            ("  2024-01-02  ", "2024-01-02T00:00:00.000Z"),
            ("2024", "2024-01-01T00:00:00.000Z"),
            ("99", "1999-01-01T00:00:00.000Z"),
            ("100", "0100-01-01T00:00:00.000Z"),
            ("2024-01-02T03:04:05.123456Z", "2024-01-02T03:04:05.123Z"),
            ("+002024-01-02T00:00:00Z", "2024-01-02T00:00:00.000Z"),
            ("-000001-01-01T00:00:00Z", "-000001-01-01T00:00:00.000Z"),
            ("2024-01-02 03:04:05", "2024-01-02T03:04:05.000Z"),
            ("2024-01-02T24:00:00Z", "2024-01-03T00:00:00.000Z"),
            ("abc", "invalid"),
            ("12:30", "invalid"),
            ("Jan", "invalid"),
            ("2024-13-01", "invalid"),
            ("2024-02-30", "2024-03-01T00:00:00.000Z"),
            ("0", "2000-01-01T00:00:00.000Z"),
            ("50", "1950-01-01T00:00:00.000Z"),
            ("Mon Jan 01 2024", "2024-01-01T00:00:00.000Z"),
            ("2024-01-02T03:04Z", "2024-01-02T03:04:00.000Z"),
            ("2024-01-02T03Z", "invalid"),
            ("20240102", "invalid"),
            ("1 2 3", "2003-01-02T00:00:00.000Z"),
            ("june 5, 2001 10:00 pm", "2001-06-05T22:00:00.000Z"),
            ("5 june 2001", "2001-06-05T00:00:00.000Z"),
            ("2001-06-05 10:00 PM EST", "2001-06-06T03:00:00.000Z"),
            ("Thu Jan 01 1970 00:00:00 GMT+0100", "1969-12-31T23:00:00.000Z"),
            ("2024-01-02T03:04:05.1Z", "2024-01-02T03:04:05.100Z"),
            ("2024-01-02T03:04:05,123Z", "invalid"),
            ("T10:00", "invalid"),
        ];
        for (input, want) in cases {
            assert_eq!(iso(input), want, "{input:?}");
        }
    }

    #[test]
    fn iso_strings_of_extreme_years() {
        assert_eq!(to_iso_string(8.64e15), "+275760-09-13T00:00:00.000Z");
        assert_eq!(to_iso_string(-8.64e15), "-271821-04-20T00:00:00.000Z");
        assert_eq!(iso("+275760-09-13T00:00:00.001Z"), "invalid");
    }
}
