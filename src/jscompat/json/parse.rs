//! `JSON.parse` into a [`Value`] (iterative: any nesting depth), and the number and payload
//! decoding it shares with the processor.

use super::scanner::*;
use super::value::{Object, Value};
use crate::jscompat::string::JsString;

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
