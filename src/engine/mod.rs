//! The touch engine: the native form of the reference's `TouchProcessorManager`. It joins the
//! store, the processor and the journals into what a server calls (issue 5).
//!
//! - [`hot`]: hot interest from active waits (M19);
//! - [`policy`]: per-stream policy state (M5–M7, M11, M13, M16, M17);
//! - [`templates`]: the live templates registry (T1–T12);
//! - [`profile`]: stored profiles and touch state (C5, C6, S14, M22);
//! - [`wait`]: the wait request, its keys and its reply (W1–W6).

pub mod hot;
pub mod policy;
pub mod profile;
pub mod templates;
pub mod wait;
