//! The stateless protocol (SEP-2575, released as MCP 2026-07-28) in front of a legacy
//! server: what a request must carry, what results must look like, and the multi-round-
//! trip (SEP-2322) bookkeeping that turns a legacy server's own requests (sampling,
//! elicitation, roots) into `input_required` results.
//!
//! Pure rules and data; the HTTP handling and the upstream conversation are in
//! `front::stateless`.

pub mod request_state;
pub mod results;
pub mod rules;

pub use request_state::{Parked, RequestStateError, Sealer};
pub use results::{InputKey, LogLevel};
pub use rules::{Context, Reject, SUPPORTED_VERSIONS, detect, validate};
