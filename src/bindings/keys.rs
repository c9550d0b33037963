//! The `keys` namespace: key derivation for JS callers (K1–K18, J3). Conversion only; the
//! rules live in [`crate::keys`].

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use super::napi::{throw, unknown, Js, Out};
use crate::error::Error;
use crate::jscompat::string::JsString;
use crate::keys::{self, ArgValue, Encoding};

fn js<'env>(env: &'env Env, v: &Unknown) -> Js<'env> {
    Js::new(env, v.raw())
}

fn text(env: &Env, v: &Unknown, what: &str) -> napi::Result<JsString> {
    js(env, v).js_string(what).map_err(|e| throw(env, e))
}

/// An array of strings. The key rules have no cap on a tuple's length (nor does the
/// reference), so the length is not checked; each element is read and checked in turn, and
/// the first one refused ends the reading (a sparse array at its first hole).
fn strings(env: &Env, v: &Unknown, what: &str) -> napi::Result<Vec<JsString>> {
    let read = || -> crate::Result<Vec<JsString>> {
        js(env, v).items(what)?.enumerate().map(|(i, s)| s?.js_string(&format!("{what}[{i}]"))).collect()
    };
    read().map_err(|e| throw(env, e))
}

fn template_bits(env: &Env, v: &Unknown) -> napi::Result<u64> {
    let id = js(env, v).string("templateId").map_err(|e| throw(env, e))?;
    keys::template_bits(&id).ok_or_else(|| throw(env, Error::invalid(format!("templateId is not hex: {id:?}"))))
}

/// `tableKeyFor(entity)`: the table's routing key (16 hex chars).
#[napi(namespace = "keys", ts_args_type = "entity: string", ts_return_type = "string")]
pub fn table_key(env: &Env, entity: Unknown) -> napi::Result<String> {
    Ok(keys::hex16(keys::table_key(text(env, &entity, "entity")?.as_bytes())))
}

/// `tableKeyIdFor(entity)`: the table's key id (u32).
#[napi(namespace = "keys", ts_args_type = "entity: string", ts_return_type = "number")]
pub fn table_key_id(env: &Env, entity: Unknown) -> napi::Result<u32> {
    Ok(keys::key_id(keys::table_key(text(env, &entity, "entity")?.as_bytes())))
}

/// `templateIdFor(entity, fieldNamesSorted)`: names must already be canonical
/// (`canonicalizeTemplateFields`).
#[napi(namespace = "keys", ts_args_type = "entity: string, fieldNamesSorted: string[]", ts_return_type = "string")]
pub fn template_id(env: &Env, entity: Unknown, field_names_sorted: Unknown) -> napi::Result<String> {
    let entity = text(env, &entity, "entity")?;
    let names = strings(env, &field_names_sorted, "fieldNamesSorted")?;
    Ok(keys::hex16(keys::template_id(entity.as_bytes(), &names.iter().map(|n| n.as_bytes()).collect::<Vec<_>>())))
}

/// `templateKeyFor(templateId)`.
#[napi(namespace = "keys", ts_args_type = "templateId: string", ts_return_type = "string")]
pub fn template_key(env: &Env, template_id: Unknown) -> napi::Result<String> {
    Ok(keys::hex16(keys::template_key(template_bits(env, &template_id)?)))
}

/// `templateKeyIdFor(templateId)`.
#[napi(namespace = "keys", ts_args_type = "templateId: string", ts_return_type = "number")]
pub fn template_key_id(env: &Env, template_id: Unknown) -> napi::Result<u32> {
    Ok(keys::key_id(keys::template_key(template_bits(env, &template_id)?)))
}

fn args_of(env: &Env, args: &Unknown) -> napi::Result<Vec<Vec<u8>>> {
    Ok(strings(env, args, "encodedArgs")?.into_iter().map(JsString::into_bytes).collect())
}

/// `watchKeyFor(templateId, encodedArgs)`.
#[napi(namespace = "keys", ts_args_type = "templateId: string, encodedArgs: string[]", ts_return_type = "string")]
pub fn watch_key(env: &Env, template_id: Unknown, encoded_args: Unknown) -> napi::Result<String> {
    Ok(keys::hex16(keys::watch_key(template_bits(env, &template_id)?, &args_of(env, &encoded_args)?)))
}

/// `watchKeyIdFor(templateId, encodedArgs)`.
#[napi(namespace = "keys", ts_args_type = "templateId: string, encodedArgs: string[]", ts_return_type = "number")]
pub fn watch_key_id(env: &Env, template_id: Unknown, encoded_args: Unknown) -> napi::Result<u32> {
    Ok(keys::key_id(keys::watch_key(template_bits(env, &template_id)?, &args_of(env, &encoded_args)?)))
}

/// `membershipKeyFor(templateId, encodedArgs)`.
#[napi(namespace = "keys", ts_args_type = "templateId: string, encodedArgs: string[]", ts_return_type = "string")]
pub fn membership_key(env: &Env, template_id: Unknown, encoded_args: Unknown) -> napi::Result<String> {
    Ok(keys::hex16(keys::membership_key(template_bits(env, &template_id)?, &args_of(env, &encoded_args)?)))
}

/// `membershipKeyIdFor(templateId, encodedArgs)`.
#[napi(namespace = "keys", ts_args_type = "templateId: string, encodedArgs: string[]", ts_return_type = "number")]
pub fn membership_key_id(env: &Env, template_id: Unknown, encoded_args: Unknown) -> napi::Result<u32> {
    Ok(keys::key_id(keys::membership_key(template_bits(env, &template_id)?, &args_of(env, &encoded_args)?)))
}

/// `projectedFieldKeyFor(templateId, fieldName, encodedArgs)`.
#[napi(
    namespace = "keys",
    ts_args_type = "templateId: string, fieldName: string, encodedArgs: string[]",
    ts_return_type = "string"
)]
pub fn projected_field_key(
    env: &Env,
    template_id: Unknown,
    field_name: Unknown,
    encoded_args: Unknown,
) -> napi::Result<String> {
    let tpl = template_bits(env, &template_id)?;
    let field = text(env, &field_name, "fieldName")?;
    Ok(keys::hex16(keys::projected_field_key(tpl, field.as_bytes(), &args_of(env, &encoded_args)?)))
}

/// `projectedFieldKeyIdFor(templateId, fieldName, encodedArgs)`.
#[napi(
    namespace = "keys",
    ts_args_type = "templateId: string, fieldName: string, encodedArgs: string[]",
    ts_return_type = "number"
)]
pub fn projected_field_key_id(
    env: &Env,
    template_id: Unknown,
    field_name: Unknown,
    encoded_args: Unknown,
) -> napi::Result<u32> {
    let tpl = template_bits(env, &template_id)?;
    let field = text(env, &field_name, "fieldName")?;
    Ok(keys::key_id(keys::projected_field_key(tpl, field.as_bytes(), &args_of(env, &encoded_args)?)))
}

/// `touchKeyIdFromRoutingKey(key)` (K14).
#[napi(namespace = "keys", ts_args_type = "key: string", ts_return_type = "number")]
pub fn touch_key_id_from_routing_key(env: &Env, key: Unknown) -> napi::Result<u32> {
    // Read as UTF-16 so a lone surrogate becomes U+FFFD under every runtime (K4).
    let key = text(env, &key, "key")?;
    Ok(keys::touch_key_id_from_routing_key(&key.to_utf8_lossy()))
}

/// `encodeTemplateArg(value, encoding)` (K13): the encoded arg, or null. An unknown encoding
/// throws `ERR_INVALID_ARGUMENT`.
#[napi(namespace = "keys", ts_args_type = "value: unknown, encoding: string", ts_return_type = "string | null")]
pub fn encode_template_arg<'env>(env: &'env Env, value: Unknown, encoding: Unknown) -> napi::Result<Unknown<'env>> {
    let name = js(env, &encoding).string("encoding").map_err(|e| throw(env, e))?;
    let enc = Encoding::parse(&name)
        .ok_or_else(|| throw(env, Error::invalid("encoding must be string|int64|bool|datetime|bytes")))?;
    let v = js(env, &value);
    let out = Out::new(env);
    let owned;
    let bigint;
    let arg = match v.type_of() {
        sys::ValueType::napi_undefined => ArgValue::Undefined,
        sys::ValueType::napi_null => ArgValue::Null,
        sys::ValueType::napi_boolean => ArgValue::Bool(v.boolean("value").map_err(|e| throw(env, e))?),
        sys::ValueType::napi_number => ArgValue::Number(v.number("value").map_err(|e| throw(env, e))?),
        sys::ValueType::napi_string => {
            owned = v.js_string("value").map_err(|e| throw(env, e))?;
            ArgValue::String(owned.as_bytes())
        }
        sys::ValueType::napi_bigint => {
            bigint = v.coerce_to_string("value").map_err(|e| throw(env, e))?;
            ArgValue::BigInt(&bigint)
        }
        _ => ArgValue::Other,
    };
    let raw = match keys::encode_template_arg(arg, enc) {
        Some(encoded) => out.js_str(&encoded)?,
        None => out.null()?,
    };
    Ok(unknown(env, raw))
}

/// `canonicalizeTemplateFields(fields)` (K12): copies `{name, encoding}` sorted by name in JS
/// order (stable).
#[napi(
    namespace = "keys",
    ts_args_type = "fields: Array<{ name: string; encoding: string }>",
    ts_return_type = "Array<{ name: string; encoding: string }>"
)]
pub fn canonicalize_template_fields<'env>(env: &'env Env, fields: Unknown) -> napi::Result<Unknown<'env>> {
    // No cap (as in the reference); each element is checked as it is read.
    let items = js(env, &fields).items("fields").map_err(|e| throw(env, e))?;
    let mut parsed = Vec::new();
    for (i, f) in items.enumerate() {
        let what = format!("fields[{i}]");
        let f = f.and_then(|f| f.object(&what)).map_err(|e| throw(env, e))?;
        let name_js = f.get("name").map_err(|e| throw(env, e))?;
        let name = match name_js {
            Some(n) => n.js_string(&format!("{what}.name")).map_err(|e| throw(env, e))?,
            None => return Err(throw(env, Error::invalid(format!("{what}.name must be a string")))),
        };
        let encoding = f.get("encoding").map_err(|e| throw(env, e))?;
        parsed.push((name, (name_js, encoding)));
    }
    keys::canonicalize_template_fields(&mut parsed);
    let out = Out::new(env);
    let mut result = Vec::with_capacity(parsed.len());
    for (_, (name, encoding)) in parsed {
        let o = out.object()?;
        out.set(o, "name", name.map(|n| n.raw()).unwrap_or(out.undefined()?))?;
        out.set(o, "encoding", encoding.map(|e| e.raw()).unwrap_or(out.undefined()?))?;
        result.push(o);
    }
    Ok(unknown(env, out.array(result)?))
}
