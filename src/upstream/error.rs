//! Why a call to the upstream failed. Every variant is the upstream's fault or the
//! network's, never the client's; `crate::error` decides what the client is told.

use std::time::Duration;

use http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the upstream could not be reached: {0}")]
    Unreachable(String),
    #[error("the upstream did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// An answer under way went silent.
    #[error("the upstream sent nothing for {} ms and the stream was closed", .0.as_millis())]
    Idle(Duration),
    /// The upstream answered 404 to a request carrying its `Mcp-Session-Id`: it no longer
    /// knows the session (2025-11-25 transport, "Session Management" §4).
    #[error("the upstream no longer knows this session")]
    SessionGone,
    #[error("the upstream refused the request with HTTP {status}: {detail}")]
    Refused { status: StatusCode, detail: String },
    #[error("the upstream answered something the proxy cannot use: {0}")]
    Protocol(String),
    /// No more upstream connections may be opened (e.g. `max_children` stdio servers).
    #[error("no upstream connection is available: {0}")]
    Exhausted(String),
}
