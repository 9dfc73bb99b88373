//! The stateless protocol (SEP-2575, released as MCP 2026-07-28) in front of a legacy
//! server, as rules and data: what a request must carry, which log notifications a
//! client gets, and the sealed `requestState` of multi-round-trip requests (SEP-2322)
//! with the table of calls waiting for their retry.
//!
//! What 2026-07-28 messages look like (results, `input_required`, `server/discover`) is
//! written by `rewrite::stateless`; the HTTP handling and the upstream conversation are
//! in `paths::stateless`.

pub mod logs;
pub mod request_state;
pub mod rules;

pub use logs::{LogLevel, log_passes};
pub use request_state::{Parked, RequestStateError, Sealer};
pub use rules::{Context, Reject, SUPPORTED_VERSIONS, detect, validate};
