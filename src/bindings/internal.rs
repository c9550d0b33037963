//! `_setHelpers(helpers)`: `lib/internal/native.js` hands the native module the JavaScript
//! functions of `lib/internal/helpers.js` once per environment (see [`super::napi::helpers`]).

use napi::bindgen_prelude::{JsValue, Unknown};
use napi::Env;
use napi_derive::napi;

use super::napi::{helpers, throw, Js};

#[napi(js_name = "_setHelpers", skip_typescript)]
pub fn set_helpers(env: &Env, helpers: Unknown) -> napi::Result<()> {
    helpers::install(env, Js::new(env, helpers.raw())).map_err(|e| throw(env, e))
}
