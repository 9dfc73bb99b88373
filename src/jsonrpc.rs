//! JSON-RPC 2.0 as the proxy needs it, and no more.
//!
//! The proxy routes on the envelope (`jsonrpc`, `id`, `method`) and rewrites only `_meta`;
//! `params`, `result` and `error` stay raw JSON borrowed from the body they came in
//! ([`serde_json::value::RawValue`]). This module knows nothing of MCP, HTTP or sessions.

mod envelope;
mod error;
mod id;
mod object;
mod raw;
pub mod write;

pub use envelope::{Envelope, EnvelopeError, KeptObjects, Kind, raw_str};
pub use error::ErrorObject;
pub use id::{IdValue, same_id};
pub use object::{
    RawObject, canonical, range_in, splice, splice_at, spliced, string_object, write_json_str,
};

/// JSON-RPC and MCP error codes the proxy produces, in one place so that the two
/// data-layer session codes (still a draft; see docs/src/contributing/protocol.md) can
/// move together.
pub mod code {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// 2026-07-28: an HTTP header is missing or disagrees with the body.
    pub const HEADER_MISMATCH: i32 = -32020;
    /// 2026-07-28: the request needs a client capability the client did not declare.
    pub const MISSING_CLIENT_CAPABILITY: i32 = -32021;
    /// 2026-07-28: the requested protocol version is not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
    /// 2025-11-25: resource not found (2026-07-28 uses -32602 instead).
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
    /// Data-layer sessions draft: the session is unknown, expired or revoked.
    pub const SESSION_NOT_FOUND: i32 = -32043;
    /// Data-layer sessions draft: the operation needs a session and got none.
    pub const SESSION_REQUIRED: i32 = -32044;
}
