//! JSON-RPC 2.0 as the proxy needs it, and no more.
//!
//! The proxy routes on the envelope (`jsonrpc`, `id`, `method`) and rewrites only `_meta`;
//! `params`, `result` and `error` stay raw JSON borrowed from the body they came in
//! ([`serde_json::value::RawValue`]). This module knows nothing of MCP, HTTP or sessions.

mod envelope;
mod error;
mod object;

pub use envelope::{Envelope, EnvelopeError, Kind, raw_str};
pub use error::{ErrorObject, error_response};
pub use object::{RawObject, range_in, splice, write_json_str};

/// JSON-RPC and MCP error codes the proxy produces, in one place so that the two
/// data-layer session codes (still a draft, see PROTOCOL.md §2) can move together.
pub mod code {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Data-layer sessions draft: the session is unknown, expired or revoked.
    pub const SESSION_NOT_FOUND: i32 = -32043;
    /// Data-layer sessions draft: the operation needs a session and got none.
    pub const SESSION_REQUIRED: i32 = -32044;
}
