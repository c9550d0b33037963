//! Epochs and touch cursors (J1, J3).
//!
//! A journal instance draws a random 64-bit epoch, shown as 16 lowercase hex characters, so a
//! restart (a new journal) makes every cursor handed out before it stale. A cursor is the text
//! `<epoch>:<generation>`; this module owns its parser and formatter (the only ones: the JS
//! `parseTouchCursor` / `formatTouchCursor` call them), with the reference's rules (JavaScript
//! `trim`, split at the first `:`, and an uncapped generation).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The random identity of one journal instance (J1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epoch(pub u64);

impl Epoch {
    /// A fresh random epoch. Not cryptographic: it only has to differ between instances.
    pub fn random() -> Epoch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        Epoch(RandomState::new().hash_one((n, nanos, std::process::id())))
    }

    /// Parses exactly 16 hex characters, either case.
    pub fn from_hex(s: &str) -> Option<Epoch> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(s, 16).ok().map(Epoch)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A parsed cursor. The generation keeps the JavaScript number the reference's parser yields
/// (it is not capped at u32: `…:99999999999999999999` parses, and callers clamp it, W6).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cursor {
    pub epoch: Epoch,
    pub generation: f64,
}

impl Cursor {
    /// The generation clamped to `current` (W6: a cursor ahead of the journal counts as now).
    pub fn generation_at_most(&self, current: u32) -> u32 {
        if self.generation >= current as f64 {
            current
        } else {
            self.generation as u32
        }
    }
}

/// JavaScript's `s.trim()`.
pub fn js_trim(s: &str) -> &str {
    crate::jscompat::string::trim_str(s)
}

/// Parses `<epoch>:<generation>` (J3); `None` for anything else. `now` is not a cursor here.
pub fn parse_cursor(raw: &str) -> Option<Cursor> {
    let s = js_trim(raw);
    let idx = s.find(':')?;
    if idx == 0 {
        return None;
    }
    let (epoch, generation) = (&s[..idx], &s[idx + 1..]);
    let epoch = Epoch::from_hex(epoch)?;
    if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Correctly rounded like JavaScript's Number(); too many digits give Infinity → refused.
    let value: f64 = generation.parse().ok()?;
    if !value.is_finite() {
        return None;
    }
    Some(Cursor { epoch, generation: value.floor() })
}

/// Formats a cursor for a journal generation.
pub fn format_cursor(epoch: Epoch, generation: u32) -> String {
    format!("{epoch}:{generation}")
}

/// `formatTouchCursor(epoch, generation)` for any JavaScript number: the generation is floored
/// and at least 0, and printed as JavaScript prints numbers. `None` for NaN.
pub fn format_cursor_js(epoch: &str, generation: f64) -> Option<String> {
    if generation.is_nan() {
        return None;
    }
    let g = generation.floor().max(0.0) + 0.0; // + 0.0 turns -0 into 0
    Some(format!("{epoch}:{}", js_number(g)))
}

/// JavaScript's `String(n)` for a non-negative integral number.
fn js_number(n: f64) -> String {
    if n.is_infinite() {
        "Infinity".to_string()
    } else if n < 1e21 {
        // Display prints the shortest round-trip digits without an exponent, as JavaScript.
        format!("{n}")
    } else {
        // Shortest round-trip digits, as JavaScript; only the exponent sign differs.
        format!("{n:e}").replace('e', "e+")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(s: &str) -> Option<f64> {
        parse_cursor(s).map(|c| c.generation)
    }

    #[test]
    fn epochs_are_16_lowercase_hex_and_differ() {
        let a = Epoch::random();
        let b = Epoch::random();
        assert_ne!(a, b);
        let s = a.to_string();
        assert_eq!(s.len(), 16);
        assert!(s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_eq!(Epoch::from_hex(&s), Some(a));
        assert_eq!(Epoch(0xab).to_string(), "00000000000000ab");
    }

    #[test]
    fn parser_follows_j3() {
        let c = parse_cursor("  00000000000000AB:42\n").unwrap();
        assert_eq!(c.epoch, Epoch(0xab));
        assert_eq!(c.generation, 42.0);
        assert_eq!(gen("0123456789abcdef:007"), Some(7.0));
        assert_eq!(gen("0123456789abcdef:99999999999999999999"), Some(1e20));
        // Split at the first colon: the rest must be digits.
        assert_eq!(gen("0123456789abcdef:1:2"), None);
        assert_eq!(gen(":1"), None);
        assert_eq!(gen("0123456789abcdef:"), None);
        assert_eq!(gen("0123456789abcdef"), None);
        assert_eq!(gen("0123456789abcde:1"), None);
        assert_eq!(gen("0123456789abcdeg:1"), None);
        assert_eq!(gen("0123456789abcdef0:1"), None);
        assert_eq!(gen("0123456789abcdef:-1"), None);
        assert_eq!(gen("0123456789abcdef:1.5"), None);
        assert_eq!(gen("0123456789abcdef: 1"), None);
        assert_eq!(gen("now"), None);
        assert_eq!(gen(""), None);
        assert_eq!(gen("\u{FEFF}0123456789abcdef:3\u{3000}"), Some(3.0));
        // U+0085 is Unicode whitespace but not JavaScript whitespace.
        assert_eq!(gen("\u{0085}0123456789abcdef:3"), None);
        let huge = format!("0123456789abcdef:{}", "9".repeat(400));
        assert_eq!(gen(&huge), None);
    }

    #[test]
    fn clamping_and_formatting() {
        let c = parse_cursor("0123456789abcdef:99999999999999999999").unwrap();
        assert_eq!(c.generation_at_most(12), 12);
        assert_eq!(parse_cursor("0123456789abcdef:3").unwrap().generation_at_most(12), 3);
        assert_eq!(format_cursor(Epoch(1), 4_294_967_295), "0000000000000001:4294967295");
        assert_eq!(format_cursor_js("e", 3.7).unwrap(), "e:3");
        assert_eq!(format_cursor_js("e", -2.0).unwrap(), "e:0");
        assert_eq!(format_cursor_js("e", 1e21).unwrap(), "e:1e+21");
        assert_eq!(format_cursor_js("e", 123456789012345680000.0).unwrap(), "e:123456789012345680000");
        assert_eq!(format_cursor_js("e", f64::NAN), None);
        assert_eq!(format_cursor_js("e", -0.0).unwrap(), "e:0");
    }
}
