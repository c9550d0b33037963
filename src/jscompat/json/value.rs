//! The values `JSON.parse` produces ([`Value`], [`Object`] with JS key order) and
//! `JSON.stringify` of them.

use std::collections::HashMap;

use crate::jscompat::number::format_number;
use crate::jscompat::string::{array_index, JsString};

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
            Value::String(s) => crate::jscompat::number::string_to_number(s.as_bytes()),
            Value::Array(_) => match self.to_js_string() {
                Some(s) => crate::jscompat::number::string_to_number(s.as_bytes()),
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
    for cp in crate::jscompat::string::code_points(s.as_bytes()) {
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
