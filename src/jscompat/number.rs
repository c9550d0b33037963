//! JS number semantics: `String(n)` (Number::toString), `Number(string)` and `Math.max`.
//!
//! `String(n)` matters for template args (K13: `1.5`, `1e+21`, `-0` → `0`); `Number(s)` for the
//! touch config's coercion (C7, B21); `Math.max` for the processor's window and budget
//! normalisation (P1), where a NaN must stay NaN.

use super::string::trim;

/// `String(v)` for a JS number.
pub fn format_number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v == 0.0 {
        return "0".into(); // both +0 and -0
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let mut out = String::new();
    if v < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` prints the shortest digits that round-trip, as ECMAScript requires:
    // "d[.ddd]e<exp>".
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let e: i32 = exp.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = e + 1; // value = 0.digits × 10^n
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

/// `Math.max(a, b)`: NaN if either is NaN, and +0 beats -0.
pub fn js_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if a == b {
        return if a == 0.0 && (a.is_sign_positive() || b.is_sign_positive()) { 0.0 } else { a };
    }
    if a > b {
        a
    } else {
        b
    }
}

/// `Number(s)` for a string (StringToNumber): trimmed; empty → 0; `Infinity`; `0x`/`0o`/`0b`
/// integers; decimal literals; anything else → NaN.
pub fn string_to_number(s: &[u8]) -> f64 {
    let t = trim(s);
    if t.is_empty() {
        return 0.0;
    }
    let Ok(t) = std::str::from_utf8(t) else { return f64::NAN };
    match t {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    let b = t.as_bytes();
    if b.len() > 2 && b[0] == b'0' {
        let radix = match b[1] {
            b'x' | b'X' => 16,
            b'o' | b'O' => 8,
            b'b' | b'B' => 2,
            _ => 0,
        };
        if radix != 0 {
            return radix_integer(&t[2..], radix);
        }
    }
    if !is_decimal_literal(b) {
        return f64::NAN;
    }
    t.parse::<f64>().unwrap_or(f64::NAN)
}

fn radix_integer(digits: &str, radix: u32) -> f64 {
    let mut acc: u128 = 0;
    let mut overflow = false;
    let mut value = 0f64;
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else { return f64::NAN };
        if !overflow {
            match acc.checked_mul(radix as u128).and_then(|v| v.checked_add(d as u128)) {
                Some(v) => acc = v,
                None => {
                    overflow = true;
                    value = acc as f64;
                }
            }
        }
        if overflow {
            value = value * radix as f64 + d as f64;
        }
    }
    if overflow {
        value
    } else {
        acc as f64
    }
}

/// StrDecimalLiteral: `[+-]? (digits [. digits?] | . digits) ([eE] [+-]? digits)?`.
fn is_decimal_literal(b: &[u8]) -> bool {
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let f = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - f;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let e = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == e {
            return false;
        }
    }
    i == b.len()
}

/// `Number.isInteger(v)`.
pub fn is_integer(v: f64) -> bool {
    v.is_finite() && v.trunc() == v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_number_to_string() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.5, "1.5"),
            (42.0, "42"),
            (-7.25, "-7.25"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (123e-20, "1.23e-18"),
            (0.000001, "0.000001"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740993.0, "9007199254740992"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456789012345680000.0, "123456789012345680000"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (v, s) in cases {
            assert_eq!(format_number(*v), *s, "{v}");
        }
    }

    #[test]
    fn string_to_number_follows_the_spec() {
        assert_eq!(string_to_number(b" 100 "), 100.0);
        assert_eq!(string_to_number(b""), 0.0);
        assert_eq!(string_to_number(b"0x10"), 16.0);
        assert!(string_to_number(b"-0x10").is_nan());
        assert_eq!(string_to_number(b"1e3"), 1000.0);
        assert_eq!(string_to_number(b".5"), 0.5);
        assert_eq!(string_to_number(b"5."), 5.0);
        assert_eq!(string_to_number(b"-Infinity"), f64::NEG_INFINITY);
        assert!(string_to_number(b"inf").is_nan());
        assert!(string_to_number(b"1_000").is_nan());
        assert!(string_to_number(b"1e").is_nan());
        assert!(string_to_number(b"NaN").is_nan());
        assert!(string_to_number(b".").is_nan());
    }

    #[test]
    fn math_max_keeps_nan() {
        assert!(js_max(1.0, f64::NAN).is_nan());
        assert_eq!(js_max(1.0, -5.0), 1.0);
        assert!(js_max(0.0, -0.0).is_sign_positive());
        assert!(js_max(-0.0, 0.0).is_sign_positive());
    }
}
