//! Every error the proxy itself answers a client with, and the one place that decides its
//! HTTP status, JSON-RPC code, message and `data` (the table in docs/PROTOCOL.md).

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use crate::fairness::Refused;
use crate::jsonrpc::{EnvelopeError, ErrorObject, code};
use crate::mcp::meta::MetaError;
use crate::session::StoreError;
use crate::stateless::{Reject, RequestStateError, SUPPORTED_VERSIONS};
use crate::upstream::{ChildFailure, ExitStatus, UpstreamError};

fn describe_reject(reject: &Reject) -> String {
    match reject {
        Reject::HeaderMismatch(why) => format!("Header mismatch: {why}"),
        Reject::MissingMeta(keys) => format!(
            "Invalid params: the request's _meta lacks {} (required on every 2026-07-28 request)",
            keys.join(" and ")
        ),
        Reject::UnsupportedVersion(requested) => format!(
            "Unsupported protocol version {requested:?}; supported: {}",
            SUPPORTED_VERSIONS.join(", ")
        ),
        Reject::MethodNotFound(method) => format!("Method not found: {method}"),
        Reject::InvalidParams(why) => format!("Invalid params: {why}"),
    }
}

fn describe_caller_limit(refused: &Refused) -> String {
    let (key, max) = (refused.key(), refused.max());
    match refused {
        Refused::Sessions { .. } => format!(
            "Too many sessions: this caller already holds {max}, the most one caller may hold ({key} = {max}); delete sessions it no longer needs, or retry when one has expired"
        ),
        Refused::Rate { .. } => format!(
            "Too many new sessions: this caller may open {max} a minute ({key} = {max}); retry after the Retry-After delay"
        ),
        Refused::Bound { .. } => format!(
            "Too many session handles: this caller already holds {max} at this upstream ({key} = {max}); close one first"
        ),
        Refused::Callers { .. } => format!(
            "Too many callers: the proxy already tracks {max} callers holding sessions; retry later"
        ),
    }
}

/// Whose fault an error is: decides its log level and whether it counts against the
/// upstream's or the proxy's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Client,
    Upstream,
    Proxy,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error("Not Found: the MCP endpoint of this proxy is {path}")]
    NoSuchPath { path: String },
    #[error("Unsupported Media Type: POST bodies must be application/json")]
    UnsupportedMediaType,
    #[error("Not Acceptable: the Accept header must allow application/json or text/event-stream")]
    NotAcceptable,
    #[error("Request body too large: the limit is {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("Forbidden: origin {origin:?} is not allowed")]
    OriginForbidden { origin: String },
    /// `[auth]` refused the request; `challenge` is its `WWW-Authenticate`.
    #[error("Unauthorized: {reason}")]
    Unauthorized {
        reason: crate::auth::AuthError,
        challenge: http::HeaderValue,
    },
    #[error(
        "Request Timeout: the request body did not arrive in full within {}",
        humantime::format_duration(*.after)
    )]
    BodyTimeout { after: Duration },
    #[error("Invalid params: {0}")]
    Meta(#[from] MetaError),
    #[error("Invalid params: _meta[{key:?}] must be an object")]
    NotAnObject { key: &'static str },
    #[error(
        "Invalid params: sessions/delete needs the session to delete in _meta[\"io.modelcontextprotocol/session\"]"
    )]
    DeleteWithoutSession,
    #[error("Session not found")]
    SessionNotFound { session_id: String },
    #[error(
        "Invalid Request: the Mcp-Session-Id header ({header:?}) names another session than _meta (\"io.modelcontextprotocol/session\") ({meta:?})"
    )]
    SessionHeaderMismatch { header: String, meta: String },
    #[error(
        "Invalid Request: the Mcp-Session-Id header must be visible ASCII (0x21-0x7E), as every session id is; this one holds a space, a control character or a byte of 0x80 and up"
    )]
    SessionHeaderNotVisibleAscii,
    #[error(
        "Invalid Request: the top-level sessionId ({top_level:?}) names another session than _meta (\"io.modelcontextprotocol/session\") ({meta:?})"
    )]
    SessionIdMismatch { top_level: String, meta: String },
    #[error(
        "Invalid params: the session state was not issued by this proxy for this session (it was changed, or belongs to another session); send the state from the session's latest response"
    )]
    BadSessionState { session_id: String },
    #[error(
        "Invalid params: sessions/create must not carry _meta[\"io.modelcontextprotocol/session\"]; it creates a new session"
    )]
    CreateInSession,
    #[error("Session required")]
    SessionRequired { method: String },
    #[error(
        "Session limit reached: the proxy already holds its maximum of {max} sessions; delete unused sessions or retry later"
    )]
    SessionLimit { max: usize },
    /// A per-caller limit (`fairness`): one caller may not take what the others need.
    #[error("{}", describe_caller_limit(.0))]
    CallerLimit(Refused),
    #[error("Session store unavailable: {source}")]
    Store {
        /// `memory`, `redis` or `sealed`.
        store: &'static str,
        source: StoreError,
    },
    /// The upstream lost the session and a new upstream session was opened for it
    /// (`on_session_lost = "reinitialize"`), but the request is not known to be safe to
    /// send twice, so it was not retried.
    #[error(
        "Upstream error: the upstream lost this session's state and the proxy opened a new upstream session for it; the request was not retried because it may not be safe to repeat: send it again if it is"
    )]
    NotRetried {
        upstream: String,
        session_id: String,
    },
    /// The proxy replica holding a session's process-local part (a stdio server, a
    /// waiting call) did not answer.
    #[error("The proxy replica holding this session is unreachable: {detail}")]
    OwnerUnreachable {
        session_id: String,
        owner: String,
        detail: String,
    },
    /// A stateless (2026-07-28) request refused by its rules.
    #[error("{}", describe_reject(.0))]
    Stateless(Reject),
    #[error("Invalid params: {0}")]
    RequestState(#[from] RequestStateError),
    #[error("Invalid params: {0}")]
    InvalidInputResponses(&'static str),
    #[error("Invalid Request: a client of the stateless protocol does not send responses")]
    StatelessResponse,
    /// SEP-2575 / 2026-07-28: the upstream asked for something the client did not declare
    /// it can give (sampling, elicitation, roots).
    #[error(
        "Missing required client capability: the server needs {} to serve this request",
        .required.join(", ")
    )]
    MissingClientCapability { required: Vec<&'static str> },
    /// The upstream answered a session client's request with a success status and a body
    /// that is not the request's response (not JSON, a batch, another id, a body of
    /// another type): passing it on would hand the client something it cannot read.
    #[error("Upstream error: {upstream} answered HTTP {status} with {problem}")]
    UnusableAnswer {
        upstream: String,
        status: StatusCode,
        problem: String,
        /// The client's request id (raw JSON).
        request_id: String,
    },
    #[error("Upstream error: {source}")]
    Upstream {
        upstream: String,
        source: UpstreamError,
    },
}

impl ProxyError {
    /// The HTTP status, JSON-RPC error object and fault of this error. One exhaustive
    /// match: a new variant does not compile until it is given its answer here.
    pub fn answer(&self) -> (StatusCode, ErrorObject, Fault) {
        use ProxyError as E;
        let message = self.to_string();
        let (status, code, data, fault) = match self {
            E::Envelope(e) => {
                let data = match e {
                    EnvelopeError::BadId(raw) => Some(json!({
                        "id": serde_json::from_str::<serde_json::Value>(raw).unwrap_or_default()
                    })),
                    _ => None,
                };
                (StatusCode::BAD_REQUEST, e.code(), data, Fault::Client)
            }
            E::NoSuchPath { path } => (
                StatusCode::NOT_FOUND,
                code::INVALID_REQUEST,
                Some(json!({ "path": path })),
                Fault::Client,
            ),
            E::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code::INVALID_REQUEST,
                None,
                Fault::Client,
            ),
            E::NotAcceptable => (
                StatusCode::NOT_ACCEPTABLE,
                code::INVALID_REQUEST,
                None,
                Fault::Client,
            ),
            E::PayloadTooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                code::INVALID_REQUEST,
                Some(json!({ "limit": limit })),
                Fault::Client,
            ),
            E::BodyTimeout { after } => (
                StatusCode::REQUEST_TIMEOUT,
                code::INVALID_REQUEST,
                Some(json!({ "timeoutMs": after.as_millis() as u64 })),
                Fault::Client,
            ),
            E::OriginForbidden { origin } => (
                StatusCode::FORBIDDEN,
                code::INVALID_REQUEST,
                Some(json!({ "origin": origin })),
                Fault::Client,
            ),
            E::Unauthorized { reason, .. } => (
                StatusCode::UNAUTHORIZED,
                code::INVALID_REQUEST,
                Some(json!({ "reason": reason.label() })),
                Fault::Client,
            ),
            E::Meta(MetaError::MetaNotObject) => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "key": "_meta" })),
                Fault::Client,
            ),
            E::Meta(MetaError::MalformedSession) | E::DeleteWithoutSession | E::CreateInSession => {
                (
                    StatusCode::BAD_REQUEST,
                    code::INVALID_PARAMS,
                    Some(json!({ "key": format!("_meta.{}", crate::mcp::meta::SESSION) })),
                    Fault::Client,
                )
            }
            E::Meta(MetaError::Malformed { key, .. }) => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "key": format!("_meta.{key}") })),
                Fault::Client,
            ),
            E::NotAnObject { key } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "key": key })),
                Fault::Client,
            ),
            // The data-layer sessions draft, "Errors": exactly `{code: -32043, message: "Session not found",
            // data: {sessionId}}`.
            E::SessionNotFound { session_id } => (
                StatusCode::NOT_FOUND,
                code::SESSION_NOT_FOUND,
                Some(json!({ "sessionId": session_id })),
                Fault::Client,
            ),
            E::SessionHeaderMismatch { header, meta } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Some(json!({ "sessionId": meta, "headerSessionId": header })),
                Fault::Client,
            ),
            E::SessionHeaderNotVisibleAscii => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Some(json!({ "header": "Mcp-Session-Id" })),
                Fault::Client,
            ),
            E::SessionIdMismatch { top_level, meta } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Some(json!({ "sessionId": meta, "topLevelSessionId": top_level })),
                Fault::Client,
            ),
            E::BadSessionState { session_id } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "sessionId": session_id })),
                Fault::Client,
            ),
            E::SessionRequired { method } => (
                StatusCode::BAD_REQUEST,
                code::SESSION_REQUIRED,
                Some(
                    json!({ "method": method, "hint": "call sessions/create and send its sessionId in _meta[\"io.modelcontextprotocol/session\"]" }),
                ),
                Fault::Client,
            ),
            E::SessionLimit { max } => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Some(json!({ "maxSessions": max })),
                Fault::Proxy,
            ),
            E::CallerLimit(refused) => {
                let data = json!({
                    "limit": refused.key(),
                    "max": refused.max(),
                    "retryAfterSeconds": refused.retry_after().as_secs(),
                });
                match refused {
                    // The proxy is out of room for callers, not this caller over its share.
                    Refused::Callers { .. } => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        code::INTERNAL_ERROR,
                        Some(data),
                        Fault::Proxy,
                    ),
                    Refused::Sessions { .. } | Refused::Rate { .. } | Refused::Bound { .. } => (
                        StatusCode::TOO_MANY_REQUESTS,
                        code::INTERNAL_ERROR,
                        Some(data),
                        Fault::Client,
                    ),
                }
            }
            E::Store { store, source } => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Some(json!({ "store": store, "detail": source.to_string() })),
                Fault::Proxy,
            ),
            E::NotRetried {
                upstream,
                session_id,
            } => (
                StatusCode::BAD_GATEWAY,
                code::INTERNAL_ERROR,
                Some(json!({ "upstream": upstream, "sessionId": session_id, "retried": false })),
                Fault::Upstream,
            ),
            E::OwnerUnreachable {
                session_id,
                owner,
                detail,
            } => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Some(json!({ "sessionId": session_id, "owner": owner, "detail": detail })),
                Fault::Proxy,
            ),
            E::Stateless(reject) => match reject {
                Reject::HeaderMismatch(_) => (
                    StatusCode::BAD_REQUEST,
                    code::HEADER_MISMATCH,
                    None,
                    Fault::Client,
                ),
                Reject::MissingMeta(keys) => (
                    StatusCode::BAD_REQUEST,
                    code::INVALID_PARAMS,
                    Some(json!({ "missing": keys })),
                    Fault::Client,
                ),
                Reject::UnsupportedVersion(requested) => (
                    StatusCode::BAD_REQUEST,
                    code::UNSUPPORTED_PROTOCOL_VERSION,
                    Some(json!({ "supported": SUPPORTED_VERSIONS, "requested": requested })),
                    Fault::Client,
                ),
                Reject::MethodNotFound(method) => (
                    StatusCode::NOT_FOUND,
                    code::METHOD_NOT_FOUND,
                    Some(json!({ "method": method })),
                    Fault::Client,
                ),
                Reject::InvalidParams(_) => (
                    StatusCode::BAD_REQUEST,
                    code::INVALID_PARAMS,
                    None,
                    Fault::Client,
                ),
            },
            E::RequestState(_) => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "key": "requestState" })),
                Fault::Client,
            ),
            E::InvalidInputResponses(_) => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "key": "inputResponses" })),
                Fault::Client,
            ),
            E::StatelessResponse => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                None,
                Fault::Client,
            ),
            E::MissingClientCapability { required } => {
                let required: serde_json::Map<String, serde_json::Value> = required
                    .iter()
                    .map(|c| ((*c).to_owned(), json!({})))
                    .collect();
                (
                    StatusCode::BAD_REQUEST,
                    code::MISSING_CLIENT_CAPABILITY,
                    Some(json!({ "requiredCapabilities": required })),
                    Fault::Client,
                )
            }
            E::UnusableAnswer {
                upstream,
                status,
                problem,
                request_id,
            } => (
                StatusCode::BAD_GATEWAY,
                code::INTERNAL_ERROR,
                Some(json!({
                    "upstream": upstream,
                    "status": status.as_u16(),
                    "detail": problem,
                    "id": serde_json::from_str::<serde_json::Value>(request_id).unwrap_or_default(),
                })),
                Fault::Upstream,
            ),
            E::Upstream { upstream, source } => {
                let status = match source {
                    UpstreamError::Timeout(_) | UpstreamError::Idle(_) => {
                        StatusCode::GATEWAY_TIMEOUT
                    }
                    UpstreamError::Child(child) if child.is_timeout() => {
                        StatusCode::GATEWAY_TIMEOUT
                    }
                    UpstreamError::Exhausted(_) => StatusCode::SERVICE_UNAVAILABLE,
                    UpstreamError::Unreachable(_)
                    | UpstreamError::SessionGone
                    | UpstreamError::Refused { .. }
                    | UpstreamError::InitializeFailed { .. }
                    | UpstreamError::Child(_)
                    | UpstreamError::Protocol(_) => StatusCode::BAD_GATEWAY,
                };
                let mut data = json!({ "upstream": upstream, "detail": source.to_string() });
                if let UpstreamError::Child(child) = source {
                    // What the child did, for clients that show it.
                    if let ChildFailure::Exited { status, .. } = &child.failure {
                        match status {
                            ExitStatus::Code(code) => data["exitCode"] = json!(code),
                            ExitStatus::Signal(signal) => data["signal"] = json!(signal),
                            ExitStatus::Unknown => {}
                        }
                    }
                    if let Some(line) = child.stderr() {
                        data["stderr"] = json!(line);
                    }
                }
                (status, code::INTERNAL_ERROR, Some(data), Fault::Upstream)
            }
        };
        let error = ErrorObject {
            code,
            message,
            data,
        };
        (status, error, fault)
    }

    /// The `WWW-Authenticate` challenge of a 401.
    pub fn challenge(&self) -> Option<&http::HeaderValue> {
        match self {
            ProxyError::Unauthorized { challenge, .. } => Some(challenge),
            _ => None,
        }
    }

    /// How long a client should wait before retrying, for errors that pass.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProxyError::SessionLimit { .. }
            | ProxyError::Store { .. }
            | ProxyError::OwnerUnreachable { .. } => Some(Duration::from_secs(1)),
            ProxyError::CallerLimit(refused) => Some(refused.retry_after()),
            _ => None,
        }
    }
}
