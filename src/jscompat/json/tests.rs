use super::scanner::*;
use super::*;
use crate::jscompat::string::JsString;

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
