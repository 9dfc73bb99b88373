//! HTTP header names of the Streamable HTTP transport (2025-11-25 and 2026-07-28).

use http::HeaderName;

/// `Mcp-Session-Id`: the transport session (2025-11-25) and, per the data-layer sessions
/// draft ("SEP-2243 HTTP Standardization"), a mirror of the data-layer sessionId.
pub static MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`: sent on every request after `initialize`.
pub static MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`: SSE resumption.
pub static LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The media types of the Streamable HTTP transport.
pub const JSON: &str = "application/json";
pub const SSE: &str = "text/event-stream";
/// What a 2025-11-25 client must send as `Accept` on POST.
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// What a client's `Accept` header allows of the two media types of the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    pub json: bool,
    pub sse: bool,
}

/// Whether `id` may be a session id: non-empty, visible ASCII only (0x21–0x7E), as both
/// the 2025-11-25 transport (`Mcp-Session-Id`) and the data-layer sessions draft
/// (`sessionId`) require.
pub fn is_visible_ascii(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// `Mcp-Method` (SEP-2243, 2026-07-28): the JSON-RPC method of the request.
pub static MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name` (SEP-2243): the tool, prompt or resource a request targets.
pub static MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
