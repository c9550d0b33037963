//! `ErrorCode`: every `code` a durable-touch error carries, as a JS enum (typed in
//! `index.d.ts`). The list's one home is [`crate::with_error_codes`]; this only declares it
//! for napi.

use napi_derive::napi;

macro_rules! napi_error_codes {
    ($($name:ident = $code:tt, $doc:tt;)*) => {
        /// The `code` of every error the module throws (`err.code === ErrorCode.Closed`).
        /// The HTTP server adds its own (`durable-touch/server`).
        #[napi(string_enum)]
        pub enum ErrorCode {
            $(#[doc = $doc] #[napi(value = $code)] $name,)*
        }
    };
}

crate::with_error_codes!(napi_error_codes);
