//! The one error type of durable-touch.
//!
//! Every fallible operation in the pure cores returns [`Result`]. The binding layer turns an
//! [`Error`] into a JavaScript `Error` whose `code` property is [`Error::code`] (stable strings
//! such as `ERR_SEQ_MISMATCH`) and whose extra properties carry the structured details
//! (`expectedNext`, `sqliteCode`, …). Nothing else crosses into JavaScript as an error.

use std::fmt;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, as seen by a caller.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The stream does not exist (or was deleted).
    #[error("stream not found: {stream}")]
    StreamNotFound { stream: String },

    /// A stream with this name exists with an incompatible definition.
    #[error("stream already exists with a different definition: {stream} ({detail})")]
    StreamExists { stream: String, detail: String },

    /// An append carried `expectedOffset` that is not the stream's next offset (S8).
    #[error("sequence mismatch on stream {stream}: expected offset {expected}, stream is at {expected_next}")]
    SeqMismatch { stream: String, expected: i64, expected_next: i64 },

    /// The stream has expired (its `expires_at_ms` lies in the past).
    #[error("stream expired: {stream}")]
    StreamExpired { stream: String },

    /// A caller passed a value of the wrong type or outside its allowed range.
    #[error("{0}")]
    InvalidArgument(String),

    /// A payload or a request exceeded a configured size limit.
    #[error("{0}")]
    PayloadTooLarge(String),

    /// A touch configuration failed validation; the message is the reference's message.
    #[error("{0}")]
    InvalidTouchConfig(String),

    /// A touch cursor could not be parsed.
    #[error("invalid touch cursor: {0}")]
    InvalidCursor(String),

    /// Touch processing is not enabled for the stream or profile.
    #[error("{0}")]
    TouchNotEnabled(String),

    /// A batch failed while deriving touches (for example `onMissingBefore: "error"`).
    #[error("{0}")]
    Processing(String),

    /// The object was closed; no further calls are accepted.
    #[error("{0} is closed")]
    Closed(&'static str),

    /// The operation was aborted by its caller.
    #[error("operation aborted")]
    Aborted,

    /// SQLite reported a failure. `code` is the primary result code name (`SQLITE_BUSY`).
    #[error("sqlite error {code} ({extended_code}): {message}")]
    Storage { code: String, extended_code: i32, message: String },

    /// The fan-out (NATS JetStream) failed: no broker, a thread that would not start. (A
    /// message that cannot be read is dropped and counted: [`crate::fanout::wire::DecodeError`].)
    #[error("{0}")]
    Fanout(String),

    /// An edge was asked for what only the writer does (appends, activations): the message
    /// names the writer's URL (`writer`).
    #[error("this edge serves waits and meta only; send this to the writer at {writer}")]
    EdgeReadOnly { writer: String },

    /// The wait listener could not listen where it was asked to (a port in use, no such host).
    #[error("cannot listen on {0}")]
    Listen(String),

    /// A bug: a panic or a broken invariant inside the native code.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Calls `$then!` with every error code: its name, its `code` string and what it means. The
/// one list behind [`ErrorCode`] here and the `ErrorCode` enum the napi layer exports (typed
/// in `index.d.ts`).
#[macro_export]
macro_rules! with_error_codes {
    ($then:ident) => {
        $then! {
            StreamNotFound = "ERR_STREAM_NOT_FOUND", " The stream does not exist (or was deleted).";
            StreamExists = "ERR_STREAM_EXISTS", " A stream of that name exists with another definition.";
            SeqMismatch = "ERR_SEQ_MISMATCH", " An append's expected offset is not the stream's next (`expectedNext`).";
            StreamExpired = "ERR_STREAM_EXPIRED", " The stream has expired.";
            InvalidArgument = "ERR_INVALID_ARGUMENT", " A value of the wrong type or outside its bounds.";
            PayloadTooLarge = "ERR_PAYLOAD_TOO_LARGE", " An append or a request over a size limit (`Store.limits`).";
            InvalidTouchConfig = "ERR_INVALID_TOUCH_CONFIG", " A touch config the reference would refuse (its message).";
            InvalidCursor = "ERR_INVALID_CURSOR", " A touch cursor that cannot be parsed.";
            TouchNotEnabled = "ERR_TOUCH_NOT_ENABLED", " Touch processing is not enabled for the stream.";
            Processing = "ERR_PROCESSING", " A batch failed while deriving touches.";
            Closed = "ERR_CLOSED", " The object was closed.";
            Aborted = "ERR_ABORTED", " The caller aborted the operation (its `AbortSignal`).";
            Storage = "ERR_STORAGE", " SQLite failed (`sqliteCode`, e.g. `SQLITE_BUSY`).";
            Fanout = "ERR_FANOUT", " The fan-out over NATS JetStream failed (no broker, bad options).";
            EdgeReadOnly = "ERR_EDGE_READ_ONLY", " An edge was asked for what only its writer does (`writer`).";
            Listen = "ERR_LISTEN", " The wait listener could not listen (a port in use, no such host).";
            Internal = "ERR_INTERNAL", " A bug: a panic or a broken invariant in the native code.";
        }
    };
}

macro_rules! error_code_enum {
    ($($name:ident = $code:tt, $doc:tt;)*) => {
        /// The stable `code` of an [`Error`], as JavaScript sees it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ErrorCode {
            $(#[doc = $doc] $name,)*
        }

        impl ErrorCode {
            /// Every code, in the order of [`with_error_codes`].
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// `ERR_…`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $code,)*
                }
            }
        }
    };
}

with_error_codes!(error_code_enum);

impl Error {
    /// What kind of error this is, by its stable code.
    pub fn kind(&self) -> ErrorCode {
        match self {
            Error::StreamNotFound { .. } => ErrorCode::StreamNotFound,
            Error::StreamExists { .. } => ErrorCode::StreamExists,
            Error::SeqMismatch { .. } => ErrorCode::SeqMismatch,
            Error::StreamExpired { .. } => ErrorCode::StreamExpired,
            Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            Error::InvalidTouchConfig(_) => ErrorCode::InvalidTouchConfig,
            Error::InvalidCursor(_) => ErrorCode::InvalidCursor,
            Error::TouchNotEnabled(_) => ErrorCode::TouchNotEnabled,
            Error::Processing(_) => ErrorCode::Processing,
            Error::Closed(_) => ErrorCode::Closed,
            Error::Aborted => ErrorCode::Aborted,
            Error::Storage { .. } => ErrorCode::Storage,
            Error::Fanout(_) => ErrorCode::Fanout,
            Error::EdgeReadOnly { .. } => ErrorCode::EdgeReadOnly,
            Error::Listen(_) => ErrorCode::Listen,
            Error::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The stable code a JavaScript caller can switch on (`ERR_…`).
    pub fn code(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Error::InvalidArgument(msg.to_string())
    }

    /// Turns a caught panic payload into [`Error::Internal`].
    pub fn from_panic(payload: Box<dyn std::any::Any + Send>) -> Self {
        let msg = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "panic".to_string()
        };
        Error::Internal(format!("panic: {msg}"))
    }
}

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Self {
        match &err {
            rusqlite::Error::SqliteFailure(e, msg) => Error::Storage {
                code: sqlite_code_name(e.code).to_string(),
                extended_code: e.extended_code,
                message: msg.clone().unwrap_or_else(|| e.to_string()),
            },
            other => {
                Error::Storage { code: "SQLITE_MISUSE".to_string(), extended_code: 21, message: other.to_string() }
            }
        }
    }
}

/// Runs `f`, turning a panic into [`Error::Internal`] so it never unwinds across a thread or
/// FFI boundary.
pub fn catch_panic<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(Error::from_panic(payload)),
    }
}

fn sqlite_code_name(code: rusqlite::ErrorCode) -> &'static str {
    use rusqlite::ErrorCode as C;
    match code {
        C::InternalMalfunction => "SQLITE_INTERNAL",
        C::PermissionDenied => "SQLITE_PERM",
        C::OperationAborted => "SQLITE_ABORT",
        C::DatabaseBusy => "SQLITE_BUSY",
        C::DatabaseLocked => "SQLITE_LOCKED",
        C::OutOfMemory => "SQLITE_NOMEM",
        C::ReadOnly => "SQLITE_READONLY",
        C::OperationInterrupted => "SQLITE_INTERRUPT",
        C::SystemIoFailure => "SQLITE_IOERR",
        C::DatabaseCorrupt => "SQLITE_CORRUPT",
        C::NotFound => "SQLITE_NOTFOUND",
        C::DiskFull => "SQLITE_FULL",
        C::CannotOpen => "SQLITE_CANTOPEN",
        C::FileLockingProtocolFailed => "SQLITE_PROTOCOL",
        C::SchemaChanged => "SQLITE_SCHEMA",
        C::TooBig => "SQLITE_TOOBIG",
        C::ConstraintViolation => "SQLITE_CONSTRAINT",
        C::TypeMismatch => "SQLITE_MISMATCH",
        C::ApiMisuse => "SQLITE_MISUSE",
        C::NoLargeFileSupport => "SQLITE_NOLFS",
        C::AuthorizationForStatementDenied => "SQLITE_AUTH",
        C::ParameterOutOfRange => "SQLITE_RANGE",
        C::NotADatabase => "SQLITE_NOTADB",
        _ => "SQLITE_ERROR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_distinct_and_named_err() {
        let codes: std::collections::HashSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
        assert!(codes.iter().all(|c| c.starts_with("ERR_") && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')));
    }

    #[test]
    fn codes_are_stable() {
        assert_eq!(Error::Aborted.code(), "ERR_ABORTED");
        assert_eq!(Error::Closed("Store").code(), "ERR_CLOSED");
        assert_eq!(Error::SeqMismatch { stream: "s".into(), expected: 1, expected_next: 2 }.code(), "ERR_SEQ_MISMATCH");
    }

    #[test]
    fn sqlite_errors_keep_their_code() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let err: Error = conn.execute("INSERT INTO nope VALUES (1)", []).unwrap_err().into();
        match err {
            Error::Storage { code, .. } => assert_eq!(code, "SQLITE_ERROR"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn panics_become_internal_errors() {
        let r: Result<()> = catch_panic(|| panic!("boom"));
        assert_eq!(r.unwrap_err(), Error::Internal("panic: boom".into()));
    }
}
