//! Every error the proxy itself answers a client with, and the one place that decides its
//! HTTP status, JSON-RPC code, message and `data` (the tables in
//! docs/src/reference/errors.md; why each, in docs/src/contributing/protocol.md).
//!
//! What a client sent comes back in its error only in part: every value an error echoes
//! (a session id, a header, an origin, an id in `data`) is cut at [`ECHO_LIMIT`] bytes
//! ([`echo`], [`echo_json`]), and a whole message at [`MESSAGE_LIMIT`], so a 4 MB id
//! costs a 4 MB body once, not twice, and never lands whole in a log or a client's UI.
//! (The response's own `id` is the request's, whole: JSON-RPC 2.0 requires it.)

use std::borrow::Cow;
use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use crate::fairness::Refused;
use crate::jsonrpc::{EnvelopeError, ErrorObject, code};
use crate::mcp::meta::MetaError;
use crate::overload::Resource;
use crate::session::StoreError;
use crate::stateless::{Reject, RequestStateError, SUPPORTED_VERSIONS};
use crate::upstream::{ChildFailure, ExitStatus, UpstreamError};

/// The most bytes of one value a client sent that an error echoes back.
pub const ECHO_LIMIT: usize = 256;

/// The most bytes of an error message (its echoed values are cut first).
pub const MESSAGE_LIMIT: usize = 1024;

/// What stands for the part of a value left out.
const ELLIPSIS: &str = "…";

/// `text` as an error echoes it: whole up to [`ECHO_LIMIT`] bytes, else its start, cut
/// at a character boundary, and an ellipsis.
pub fn echo(text: &str) -> Cow<'_, str> {
    if text.len() <= ECHO_LIMIT {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("{}{ELLIPSIS}", head(text, ECHO_LIMIT)))
}

/// A JSON value a client sent (`raw`, e.g. an id) as an error echoes it: the value itself
/// when its text fits in [`ECHO_LIMIT`] bytes; a longer string cut as [`echo`] cuts it;
/// anything else longer (an object, an array) as the start of its JSON text, a string.
pub fn echo_json(raw: &str) -> serde_json::Value {
    let value = serde_json::from_str::<serde_json::Value>(raw).unwrap_or_default();
    if raw.len() <= ECHO_LIMIT {
        return value;
    }
    match &value {
        serde_json::Value::String(text) => json!(echo(text)),
        _ => json!(echo(raw.trim())),
    }
}

/// `message` within [`MESSAGE_LIMIT`] bytes: its start and its end, an ellipsis between
/// (what an error says comes last as often as first: "… differs from …").
fn bounded(message: String) -> String {
    if message.len() <= MESSAGE_LIMIT {
        return message;
    }
    let half = (MESSAGE_LIMIT - ELLIPSIS.len()) / 2;
    format!("{}{ELLIPSIS}{}", head(&message, half), tail(&message, half))
}

/// The longest start of `text` of at most `max` bytes ending at a character boundary.
pub(crate) fn head(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The longest end of `text` of at most `max` bytes starting at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn describe_reject(reject: &Reject) -> String {
    match reject {
        Reject::HeaderMismatch(why) => format!("Header mismatch: {why}"),
        Reject::MissingMeta(keys) => format!(
            "Invalid params: the request's _meta lacks {} (required on every 2026-07-28 request)",
            keys.join(" and ")
        ),
        Reject::UnsupportedVersion(requested) => format!(
            "Unsupported protocol version {:?}; supported: {}",
            echo(requested),
            SUPPORTED_VERSIONS.join(", ")
        ),
        Reject::MethodNotFound(method) => format!("Method not found: {}", echo(method)),
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

fn describe_waiting(per_caller: bool, max: usize) -> String {
    if per_caller {
        format!(
            "Too many calls waiting for input: this caller already has {max} calls waiting for its answer to input_required (stateless.max_waiting_per_caller = {max}); answer or abandon them, then retry"
        )
    } else {
        format!(
            "Too many calls waiting for input: {max} calls already wait for their clients' input, and the rest of the pooled upstream sessions is kept for calls that run; retry later"
        )
    }
}
/// How long a client shed for overload should wait: a few samples of the resources
/// (`overload::SAMPLE_EVERY`), time for what is in flight to finish.
const OVERLOAD_RETRY_AFTER: Duration = Duration::from_secs(2);

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
    #[error("Forbidden: this caller may not use {}", what.describe())]
    NotAllowed { what: NotAllowed },
    #[error(
        "Too Many Requests: this caller may call the tool {:?} {rate} times per {}; retry after {}s",
        echo(tool),
        humantime::format_duration(*per),
        retry_after.as_secs()
    )]
    ToolRate {
        tool: String,
        rate: u32,
        per: Duration,
        retry_after: Duration,
    },
    #[error(
        "Gateway Timeout: the tool {:?} did not answer within {} (its timeout in auth.limits); the call was cancelled upstream",
        echo(tool),
        humantime::format_duration(*after)
    )]
    ToolTimeout { tool: String, after: Duration },
    /// The caller's token could not be exchanged for one for the upstream.
    #[error("{}", token_exchange_text(upstream, failure))]
    TokenExchange {
        upstream: String,
        failure: crate::auth::exchange::ExchangeError,
    },
    #[error("Forbidden: origin {:?} is not allowed", echo(.origin))]
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
        "Invalid Request: the Mcp-Session-Id header ({:?}) names another session than _meta (\"io.modelcontextprotocol/session\") ({:?})",
        echo(.header),
        echo(.meta)
    )]
    SessionHeaderMismatch { header: String, meta: String },
    #[error(
        "Invalid Request: the Mcp-Session-Id header must be visible ASCII (0x21-0x7E), as every session id is; this one holds a space, a control character or a byte of 0x80 and up"
    )]
    SessionHeaderNotVisibleAscii,
    #[error(
        "Invalid Request: the Mcp-Session-Id header is sent more than once; a request belongs to one session, so send it once"
    )]
    SessionHeaderRepeated,
    #[error(
        "Invalid Request: the top-level sessionId ({:?}) names another session than _meta (\"io.modelcontextprotocol/session\") ({:?})",
        echo(.top_level),
        echo(.meta)
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
    /// A call needing its client's input cannot wait for it: too many calls wait already
    /// (of this caller, or in all on pooled upstream sessions).
    #[error("{}", describe_waiting(*.per_caller, *.max))]
    TooManyWaiting {
        /// The configuration key of the bound.
        limit: &'static str,
        max: usize,
        per_caller: bool,
    },
    /// `logging/setLevel` without a level MCP defines.
    #[error(
        "Invalid params: logging/setLevel needs params.level, one of debug, info, notice, warning, error, critical, alert, emergency"
    )]
    InvalidLogLevel,
    /// `resources/subscribe` or `unsubscribe` without a string `params.uri`.
    #[error(
        "Invalid params: resources/subscribe and resources/unsubscribe need a string params.uri"
    )]
    MissingUri,
    /// `resources/subscribe` of one more resource than a bridged session may hold.
    #[error(
        "Invalid params: this session is subscribed to {max} resources, the most it may be; unsubscribe from one first"
    )]
    TooManySubscriptions { max: usize },
    /// A modern upstream kept asking a bridged call's client questions.
    #[error(
        "Upstream error: the upstream asked this call's client for input more than {max} times; the call was given up"
    )]
    TooManyRounds { max: usize },
    /// A bridged call needs to ask its client questions, which travel on an event stream
    /// the client did not accept.
    #[error(
        "Not Acceptable: the server needs to ask this client for input, which goes on an event stream: send Accept: application/json, text/event-stream"
    )]
    InputNeedsStream,
    /// A bridged call's client did not answer the server's questions in time.
    #[error(
        "Request timeout: the server asked this client for input and got no answer within {} s; the call was given up", .after.as_secs()
    )]
    InputNotAnswered { after: Duration },
    /// New work shed while memory or file descriptors are near their limits.
    #[error(
        "Overloaded: the proxy is near its limit of {} ({}) and takes no new sessions or calls until it has recovered; requests in sessions already open are served; retry after the Retry-After delay",
        .resource.describe(),
        .resource.key()
    )]
    Overloaded { resource: Resource },
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
    /// waiting call) did not answer. Its address is internal: logged, never answered.
    #[error("The proxy replica holding this session is unreachable: {detail}")]
    OwnerUnreachable {
        session_id: String,
        detail: String,
        /// No connection could be made: nothing listens at its address any more.
        down: bool,
    },
    /// A request carried the header replicas sign their forwarded requests with, and no
    /// replica of this cluster signed it (a client passing for a replica).
    #[error("Forbidden: the mcp-proxy-forwarded header is for the proxy's own replicas, and {0}")]
    ForgedForwarding(crate::paths::Forged),
    /// One caller already has its share of the requests this replica forwards to the
    /// others (`cluster.max_forwarded_per_caller`).
    #[error(
        "Too many requests in flight: this caller already has {max} requests on their way to the proxy replica holding its session (cluster.max_forwarded_per_caller = {max}); retry when one has ended"
    )]
    ForwardLimit { max: usize },
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
    /// The tasks extension (2026-07-28, `io.modelcontextprotocol/tasks`): a `tasks/*`
    /// request, or a call of a tool that runs only as a task, from a client that did not
    /// declare the extension.
    #[error(
        "Missing required client capability: {0} needs the io.modelcontextprotocol/tasks extension, which the request's clientCapabilities do not declare"
    )]
    MissingTasksExtension(&'static str),
    /// No task of this caller has this id (never created, another caller's, or forgotten
    /// after its `ttlMs`).
    #[error("Invalid params: no task {task_id:?} (unknown, expired, or another caller's)")]
    UnknownTask { task_id: String },
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
        let message = bounded(self.to_string());
        let (status, code, data, fault) = match self {
            E::Envelope(e) => {
                let data = match e {
                    EnvelopeError::BadId(raw) => Some(json!({ "id": echo_json(raw) })),
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
            E::ToolRate {
                tool, rate, per, ..
            } => (
                StatusCode::TOO_MANY_REQUESTS,
                code::INVALID_REQUEST,
                Some(
                    json!({ "reason": "tool_rate", "tool": echo(tool), "rate": rate,
                    "perSeconds": per.as_secs() }),
                ),
                Fault::Client,
            ),
            E::ToolTimeout { tool, after } => (
                StatusCode::GATEWAY_TIMEOUT,
                code::INTERNAL_ERROR,
                Some(json!({ "reason": "tool_timeout", "tool": echo(tool),
                    "timeoutMs": u64::try_from(after.as_millis()).unwrap_or(u64::MAX) })),
                Fault::Upstream,
            ),
            E::TokenExchange { upstream, failure } => {
                use crate::auth::exchange::ExchangeError as X;
                let (status, code, fault) = match failure {
                    X::Refused(_) => (StatusCode::FORBIDDEN, code::INVALID_REQUEST, Fault::Client),
                    X::SubjectInvalid(_) => (
                        StatusCode::UNAUTHORIZED,
                        code::INVALID_REQUEST,
                        Fault::Client,
                    ),
                    X::ClientRefused(_) => {
                        (StatusCode::BAD_GATEWAY, code::INTERNAL_ERROR, Fault::Proxy)
                    }
                    X::Unavailable(_) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        code::INTERNAL_ERROR,
                        Fault::Upstream,
                    ),
                };
                let mut data = json!({ "reason": "token_exchange", "upstream": echo(upstream) });
                if let X::Refused(error) = failure {
                    data["error"] = json!(echo(error));
                }
                (status, code, Some(data), fault)
            }
            E::NotAllowed { what } => (
                StatusCode::FORBIDDEN,
                code::INVALID_REQUEST,
                Some(what.data()),
                Fault::Client,
            ),
            E::OriginForbidden { origin } => (
                StatusCode::FORBIDDEN,
                code::INVALID_REQUEST,
                Some(json!({ "origin": echo(origin) })),
                Fault::Client,
            ),
            E::Unauthorized { reason, .. } => (
                reason.status(),
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
                Some(json!({ "sessionId": echo(session_id) })),
                Fault::Client,
            ),
            E::SessionHeaderMismatch { header, meta } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Some(json!({ "sessionId": echo(meta), "headerSessionId": echo(header) })),
                Fault::Client,
            ),
            E::SessionHeaderNotVisibleAscii | E::SessionHeaderRepeated => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Some(json!({ "header": "Mcp-Session-Id" })),
                Fault::Client,
            ),
            E::SessionIdMismatch { top_level, meta } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Some(json!({ "sessionId": echo(meta), "topLevelSessionId": echo(top_level) })),
                Fault::Client,
            ),
            E::BadSessionState { session_id } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "sessionId": echo(session_id) })),
                Fault::Client,
            ),
            E::SessionRequired { method } => (
                StatusCode::BAD_REQUEST,
                code::SESSION_REQUIRED,
                Some(
                    json!({ "method": echo(method), "hint": "call sessions/create and send its sessionId in _meta[\"io.modelcontextprotocol/session\"]" }),
                ),
                Fault::Client,
            ),
            E::SessionLimit { max } => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Some(json!({ "maxSessions": max })),
                Fault::Proxy,
            ),
            E::InvalidLogLevel | E::MissingUri => (
                // In-band, as a 2025-11-25 server answers a request in its session.
                StatusCode::OK,
                code::INVALID_PARAMS,
                None,
                Fault::Client,
            ),
            E::TooManySubscriptions { max } => (
                StatusCode::OK,
                code::INVALID_PARAMS,
                Some(json!({ "maxSubscriptions": max })),
                Fault::Client,
            ),
            E::TooManyRounds { max } => (
                StatusCode::BAD_GATEWAY,
                code::INTERNAL_ERROR,
                Some(json!({ "maxRounds": max })),
                Fault::Upstream,
            ),
            E::InputNeedsStream => (
                StatusCode::NOT_ACCEPTABLE,
                code::INVALID_REQUEST,
                None,
                Fault::Client,
            ),
            E::InputNotAnswered { after } => (
                StatusCode::REQUEST_TIMEOUT,
                code::INTERNAL_ERROR,
                Some(json!({ "waitedSeconds": after.as_secs() })),
                Fault::Client,
            ),
            E::TooManyWaiting {
                limit,
                max,
                per_caller,
            } => (
                if *per_caller {
                    StatusCode::TOO_MANY_REQUESTS
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                },
                code::INTERNAL_ERROR,
                Some(json!({ "limit": limit, "max": max })),
                if *per_caller {
                    Fault::Client
                } else {
                    Fault::Proxy
                },
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
            E::Overloaded { resource } => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Some(json!({ "resource": resource.label(), "limit": resource.key() })),
                Fault::Proxy,
            ),
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
                Some(
                    json!({ "upstream": upstream, "sessionId": echo(session_id), "retried": false }),
                ),
                Fault::Upstream,
            ),
            E::OwnerUnreachable {
                session_id, detail, ..
            } => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Some(json!({ "sessionId": echo(session_id), "detail": detail })),
                Fault::Proxy,
            ),
            E::ForgedForwarding(_) => (
                StatusCode::FORBIDDEN,
                code::INVALID_REQUEST,
                Some(json!({ "header": "mcp-proxy-forwarded" })),
                Fault::Client,
            ),
            E::ForwardLimit { max } => (
                StatusCode::TOO_MANY_REQUESTS,
                code::INTERNAL_ERROR,
                Some(json!({ "limit": "cluster.max_forwarded_per_caller", "max": max })),
                Fault::Client,
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
                    Some(json!({ "supported": SUPPORTED_VERSIONS, "requested": echo(requested) })),
                    Fault::Client,
                ),
                Reject::MethodNotFound(method) => (
                    StatusCode::NOT_FOUND,
                    code::METHOD_NOT_FOUND,
                    Some(json!({ "method": echo(method) })),
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
            E::MissingTasksExtension(_) => (
                StatusCode::BAD_REQUEST,
                code::MISSING_CLIENT_CAPABILITY,
                Some(json!({ "requiredCapabilities": {
                    "extensions": { "io.modelcontextprotocol/tasks": {} }
                } })),
                Fault::Client,
            ),
            E::UnknownTask { task_id } => (
                StatusCode::BAD_REQUEST,
                code::INVALID_PARAMS,
                Some(json!({ "key": "taskId", "taskId": echo(task_id) })),
                Fault::Client,
            ),
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
                    "id": echo_json(request_id),
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
            ProxyError::Overloaded { .. } => Some(OVERLOAD_RETRY_AFTER),
            ProxyError::TokenExchange {
                failure: crate::auth::exchange::ExchangeError::Unavailable(_),
                ..
            } => Some(Duration::from_secs(5)),
            ProxyError::SessionLimit { .. }
            | ProxyError::TooManyWaiting { .. }
            | ProxyError::Store { .. }
            | ProxyError::OwnerUnreachable { .. }
            | ProxyError::ForwardLimit { .. } => Some(Duration::from_secs(1)),
            ProxyError::CallerLimit(refused) => Some(refused.retry_after()),
            ProxyError::ToolRate { retry_after, .. } => Some(*retry_after),
            ProxyError::Unauthorized {
                reason: crate::auth::AuthError::KeysUnavailable,
                ..
            } => Some(Duration::from_secs(5)),
            _ => None,
        }
    }
}

/// What a client reads of a failed token exchange: the authorization server's refusal
/// of its token; of anything else, only that it failed (the details, which may name
/// internal addresses or the proxy's client, are logged).
fn token_exchange_text(upstream: &str, failure: &crate::auth::exchange::ExchangeError) -> String {
    use crate::auth::exchange::ExchangeError as X;
    match failure {
        X::Refused(error) => format!(
            "Forbidden: the authorization server would not exchange this caller's token for one for upstream {:?}: {}",
            echo(upstream),
            echo(error)
        ),
        X::SubjectInvalid(_) => format!(
            "Unauthorized: the authorization server no longer takes this caller's token (for upstream {:?}); get a new one",
            echo(upstream)
        ),
        X::ClientRefused(_) => format!(
            "Bad Gateway: the proxy could not exchange tokens for upstream {:?} (the authorization server refused the proxy's own client; see its log)",
            echo(upstream)
        ),
        X::Unavailable(_) => format!(
            "Service Unavailable: the authorization server could not be asked for a token for upstream {:?}; retry later",
            echo(upstream)
        ),
    }
}

/// What `[[auth.rules]]` refused a caller (the upstream, and the tool, prompt or
/// resource), for its 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAllowed {
    pub upstream: String,
    /// `upstream`, `tool`, `prompt` or `resource`.
    pub kind: &'static str,
    /// Its name or URI, as the client wrote it (echoed within bounds).
    pub name: Option<String>,
}

impl NotAllowed {
    fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!(
                "the {} {:?} of upstream {:?}",
                self.kind,
                echo(name),
                self.upstream
            ),
            None => format!("upstream {:?}", self.upstream),
        }
    }

    fn data(&self) -> serde_json::Value {
        let mut data = json!({ "reason": "not_allowed", "upstream": self.upstream });
        if let Some(name) = &self.name {
            data[self.kind] = json!(echo(name));
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echo_is_cut_at_a_character_boundary_with_an_ellipsis() {
        assert_eq!(echo("short"), "short");
        let exact = "a".repeat(ECHO_LIMIT);
        assert_eq!(echo(&exact), exact);
        let long = "a".repeat(ECHO_LIMIT + 1);
        assert_eq!(echo(&long), format!("{}…", "a".repeat(ECHO_LIMIT)));
        // "é" is two bytes: a cut inside one keeps the character out.
        let accents = format!("a{}", "é".repeat(ECHO_LIMIT));
        let cut = echo(&accents);
        assert!(cut.ends_with("é…"), "{cut}");
        assert_eq!(cut.len(), ECHO_LIMIT - 1 + "…".len());
    }

    #[test]
    fn an_echoed_id_is_itself_when_short_and_a_cut_text_when_long() {
        assert_eq!(echo_json("{\"nested\":true}"), json!({"nested": true}));
        assert_eq!(echo_json("12"), json!(12));
        let long_string = json!("x".repeat(10_000)).to_string();
        assert_eq!(
            echo_json(&long_string),
            json!(format!("{}…", "x".repeat(ECHO_LIMIT)))
        );
        let long_object = json!({"pad": "y".repeat(10_000)}).to_string();
        let echoed = echo_json(&long_object);
        let text = echoed.as_str().unwrap();
        assert!(
            text.starts_with("{\"pad\":\"yyy") && text.ends_with('…'),
            "{text}"
        );
    }

    #[test]
    fn a_long_message_keeps_its_start_and_its_end() {
        let message = format!("start {} end", "m".repeat(10 * MESSAGE_LIMIT));
        let bounded = bounded(message);
        assert!(bounded.len() <= MESSAGE_LIMIT, "{}", bounded.len());
        assert!(bounded.starts_with("start mmm") && bounded.ends_with("mmm end"));
        assert!(bounded.contains('…'));
    }

    #[test]
    fn no_error_echoes_more_than_its_limits_of_what_a_client_sent() {
        let huge = "h".repeat(4 * 1024 * 1024);
        let huge_id = json!({"pad": huge}).to_string();
        let errors = [
            ProxyError::Envelope(EnvelopeError::BadId(huge_id.clone())),
            ProxyError::OriginForbidden {
                origin: huge.clone(),
            },
            ProxyError::SessionNotFound {
                session_id: huge.clone(),
            },
            ProxyError::SessionHeaderMismatch {
                header: huge.clone(),
                meta: huge.clone(),
            },
            ProxyError::SessionIdMismatch {
                top_level: huge.clone(),
                meta: huge.clone(),
            },
            ProxyError::BadSessionState {
                session_id: huge.clone(),
            },
            ProxyError::SessionRequired {
                method: huge.clone(),
            },
            ProxyError::NotRetried {
                upstream: "u".into(),
                session_id: huge.clone(),
            },
            ProxyError::OwnerUnreachable {
                session_id: huge.clone(),
                detail: "d".into(),
                down: false,
            },
            ProxyError::Stateless(Reject::UnsupportedVersion(huge.clone())),
            ProxyError::Stateless(Reject::MethodNotFound(huge.clone())),
            ProxyError::Stateless(Reject::HeaderMismatch(format!(
                "the Mcp-Method header ({huge:?}) differs from the method (\"tools/call\")"
            ))),
            ProxyError::UnusableAnswer {
                upstream: "u".into(),
                status: StatusCode::OK,
                problem: "p".into(),
                request_id: json!(huge).to_string(),
            },
        ];
        for error in errors {
            let (_, object, _) = error.answer();
            assert!(object.message.len() <= MESSAGE_LIMIT, "{error:?}");
            let data = serde_json::to_string(&object.data).unwrap();
            assert!(data.len() <= 3 * ECHO_LIMIT, "{} bytes: {data}", data.len());
        }
    }
}
