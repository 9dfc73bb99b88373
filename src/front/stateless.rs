//! The stateless front (MCP 2026-07-28): clients with no `initialize` and no session,
//! served by a legacy server through pooled upstream sessions.
//!
//! - `server/discover` is answered from what the upstream said at `initialize`.
//! - Every other request is checked (`stateless::validate`), its 2026 `_meta` is taken
//!   off, and it runs on an upstream session opened with the client's capabilities,
//!   checked out of the pool for the call. A task per call (`driver`) reads the upstream's
//!   answer message by message: progress and (level-filtered) log notifications go to the
//!   client, the result gets `resultType` and `serverInfo`, and the upstream's own
//!   requests (sampling, elicitation, roots) end the client's call with an
//!   `input_required` result while the task keeps the upstream call waiting for the retry.
//! - `subscriptions/listen` opens a dedicated upstream session and its GET stream.

mod driver;
mod listen;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::App;
use super::body::ProxyBody;
use super::headers;
use super::respond;
use super::sessions::Message;
use crate::error::ProxyError;
use crate::jsonrpc::{Kind, RawObject, range_in, raw_str, write_json_str};
use crate::mcp::headers::SSE;
use crate::mcp::initialize::Negotiated;
use crate::mcp::meta::{self, Payload};
use crate::sse::{MessageStream, Unchanged};
use crate::stateless::request_state::Binding as StateBinding;
use crate::stateless::{Context, LogLevel, Parked, Sealer, validate};
use crate::upstream::{Messages, Pool, UpstreamError, capabilities_key, says_session_lost};

pub use driver::Resume;

/// The stateless front's shared state.
#[derive(Debug)]
pub struct Calls {
    pub pool: Arc<Pool>,
    pub sealer: Sealer,
    pub parked: Parked<oneshot::Sender<Resume>>,
    /// After an upstream request, how long to wait for more before asking the client.
    pub gather: Duration,
    /// One permit per open `subscriptions/listen` stream (`stateless.max_listens`).
    pub listens: Arc<tokio::sync::Semaphore>,
}

/// How the client's HTTP answer starts: a JSON body, or an event stream.
#[derive(Debug)]
pub enum First {
    Json(StatusCode, Bytes),
    Stream(Bytes, mpsc::Receiver<Bytes>),
}

/// `_meta` keys of the stateless protocol, which a legacy server does not know.
const STATELESS_META: [&str; 4] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_INFO,
    meta::CLIENT_CAPABILITIES,
    meta::LOG_LEVEL,
];

/// Serves one stateless message.
pub async fn handle(
    app: &Arc<App>,
    message: &Message<'_, '_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let envelope = message.envelope;
    match envelope.kind {
        // Over HTTP a stateless client cancels by closing the stream; a notification has
        // nothing to reach.
        Kind::Notification => return Ok(respond::status(StatusCode::ACCEPTED)),
        Kind::Response => return Err(ProxyError::StatelessResponse),
        Kind::Request => {}
    }
    let method = envelope.method();
    let params = message.payload.map(|(_, p)| p);
    let context = validate(message.headers, method, params).map_err(ProxyError::Stateless)?;
    let Some(id) = envelope.id else {
        return Err(ProxyError::StatelessResponse);
    };
    let id = owned_raw(message.body, id);
    let forwarded = headers::to_upstream_in_session(message.headers);
    match method {
        "server/discover" => discover(app, &context, &id, &forwarded).await,
        "subscriptions/listen" => listen::open(app, message, &context, id, &forwarded).await,
        _ => call(app, message, &context, id, &forwarded).await,
    }
}

fn owned_raw(body: &Bytes, raw: &RawValue) -> Bytes {
    range_in(body, raw)
        .map(|r| body.slice(r))
        .unwrap_or_else(|| Bytes::copy_from_slice(raw.get().as_bytes()))
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn result_message(id: &[u8], result: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(id.len() + result.len() + 32);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id);
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result);
    out.push(b'}');
    Bytes::from(out)
}

/// `server/discover`, from the upstream's `InitializeResult`.
async fn discover(
    app: &Arc<App>,
    context: &Context<'_>,
    id: &[u8],
    forwarded: &HeaderMap,
) -> Result<Response<ProxyBody>, ProxyError> {
    let negotiated = {
        let checkout = app
            .calls
            .pool
            .checkout(Some(context.capabilities), forwarded)
            .await
            .map_err(|e| app.upstream_error(e))?;
        checkout.negotiated().clone()
    };
    let result = discover_result(&negotiated);
    Ok(respond::json(StatusCode::OK, result_message(id, &result)))
}

/// How long a client may keep the discovery result.
const DISCOVER_TTL_MS: u64 = 60_000;

/// The pool re-initializes its upstream sessions at least this often, so a discovery
/// result is never older than this plus [`DISCOVER_TTL_MS`] (an upstream redeployed with
/// new capabilities is seen within minutes).
pub const POOLED_SESSION_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);

fn discover_result(negotiated: &Negotiated) -> Vec<u8> {
    let mut capabilities = Vec::with_capacity(negotiated.capabilities.get().len() + 32);
    match RawObject::parse(&negotiated.capabilities) {
        Some(mut object) => {
            // Tasks are not carried through the proxy; data-layer sessions are offered.
            object.remove("tasks");
            object.remove("sessions");
            object.write(&mut capabilities, &[("sessions", b"{}")]);
        }
        None => capabilities.extend_from_slice(b"{\"sessions\":{}}"),
    }
    let mut out = Vec::with_capacity(capabilities.len() + 256);
    out.extend_from_slice(br#"{"resultType":"complete","supportedVersions":["#);
    for (i, version) in crate::stateless::SUPPORTED_VERSIONS.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_str(&mut out, version);
    }
    out.extend_from_slice(br#"],"capabilities":"#);
    out.extend_from_slice(&capabilities);
    if let Some(instructions) = &negotiated.instructions {
        out.extend_from_slice(br#","instructions":"#);
        write_json_str(&mut out, instructions);
    }
    out.extend_from_slice(br#","ttlMs":"#);
    out.extend_from_slice(DISCOVER_TTL_MS.to_string().as_bytes());
    out.extend_from_slice(br#","cacheScope":"public","_meta":{"#);
    write_json_str(&mut out, meta::SERVER_INFO);
    out.push(b':');
    out.extend_from_slice(negotiated.server_info.get().as_bytes());
    out.extend_from_slice(b"}}");
    out
}

/// The canonical params a `requestState` is bound to: without `_meta`, `inputResponses`
/// and `requestState`.
fn bound_params(params: Option<&Payload<'_>>) -> String {
    let Some(params) = params else {
        return "{}".to_owned();
    };
    let stripped = params.edited(&["_meta", "inputResponses", "requestState"], &[], &[], &[]);
    let raw = String::from_utf8_lossy(&stripped).into_owned();
    RawValue::from_string(raw)
        .map(|raw| capabilities_key(Some(&raw)))
        .unwrap_or_default()
}

/// `inputResponses`: an object whose values are objects (SEP-2322). Returns the entries.
fn input_responses(
    params: Option<&Payload<'_>>,
) -> Result<Vec<(String, Box<RawValue>)>, ProxyError> {
    let Some(raw) = params.and_then(|p| p.member("inputResponses")) else {
        return Ok(Vec::new());
    };
    let object = RawObject::parse(raw).ok_or(ProxyError::InvalidInputResponses(
        "inputResponses must be an object mapping each input request's key to its response",
    ))?;
    let mut out = Vec::new();
    for (key, value) in object.entries() {
        if !value.get().starts_with('{') {
            return Err(ProxyError::InvalidInputResponses(
                "each inputResponses entry must be an object (the response to that input request)",
            ));
        }
        out.push((key.to_string(), value.to_owned()));
    }
    Ok(out)
}

/// A tool call, prompt, read, list or completion: a new call on a pooled upstream
/// session, or (with a `requestState`) the next round of a parked one.
async fn call(
    app: &Arc<App>,
    message: &Message<'_, '_>,
    context: &Context<'_>,
    id: Bytes,
    forwarded: &HeaderMap,
) -> Result<Response<ProxyBody>, ProxyError> {
    let method = message.envelope.method();
    let params = message.payload.map(|(_, p)| p);
    let provided = input_responses(params)?;
    let caller = message
        .headers
        .get(AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    let bound = bound_params(params);
    let binding = StateBinding {
        caller: &caller,
        method,
        params: &bound,
    };
    let (first_tx, first_rx) = oneshot::channel();
    let request_state = params
        .and_then(|p| p.member("requestState"))
        .map(|raw| raw_str(raw).map(|s| s.into_owned()).unwrap_or_default());
    if let Some(token) = request_state {
        let park = app.calls.sealer.open(&token, binding)?;
        let resume = app
            .calls
            .parked
            .take(&park)
            .ok_or(crate::stateless::RequestStateError::Unknown)?;
        let next = Resume {
            client_id: id,
            provided,
            log_level: context.log_level,
            first: first_tx,
        };
        if resume.send(next).is_err() {
            return Err(crate::stateless::RequestStateError::Unknown.into());
        }
    } else {
        let upstream_body = match message.payload {
            Some((raw, payload)) => {
                let stripped = payload.edited(
                    &["inputResponses", "requestState"],
                    &STATELESS_META,
                    &[],
                    &[],
                );
                crate::jsonrpc::splice(message.body, raw, &stripped)
                    .map(Bytes::from)
                    .unwrap_or_else(|| message.body.clone())
            }
            None => message.body.clone(),
        };
        let (checkout, messages) = start(app, context, upstream_body, forwarded).await?;
        let call = driver::Call {
            app: app.clone(),
            checkout,
            messages,
            upstream_id: id.clone(),
            client_id: id,
            method: method.to_owned(),
            capabilities: context.capabilities.to_owned(),
            log_level: context.log_level,
            provided: provided.into_iter().collect(),
            caller,
            bound,
            uri: (method == "resources/read")
                .then(|| params.and_then(|p| p.member("uri")).and_then(raw_str))
                .flatten()
                .map(|uri| uri.into_owned()),
            forwarded: forwarded.clone(),
        };
        tokio::spawn(driver::run(call, first_tx));
    }
    let first = first_rx.await.map_err(|_| {
        app.upstream_error(UpstreamError::Unreachable(
            "the upstream call ended without an answer".into(),
        ))
    })?;
    Ok(match first {
        First::Json(status, body) => respond::json(status, body),
        First::Stream(first, rest) => {
            let mut response = Response::new(ProxyBody::Listen {
                body: MessageStream::new(Some(first), rest, Unchanged, app.sse_idle_timeout),
                open: app.metrics.stream_opened(),
            });
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
            response
        }
    })
}

/// Sends the request on a pooled upstream session. A pooled session the upstream has
/// lost (it restarted) is ended and the request tried once more on a new one: stateless
/// clients have no session to lose.
async fn start(
    app: &Arc<App>,
    context: &Context<'_>,
    body: Bytes,
    forwarded: &HeaderMap,
) -> Result<(crate::upstream::Checkout, Messages), ProxyError> {
    let limit = app.upstream.max_message_bytes();
    let timeout = app.upstream.timeout();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut checkout = app
            .calls
            .pool
            .checkout(Some(context.capabilities), forwarded)
            .await
            .map_err(|e| app.upstream_error(e))?;
        let reply = app
            .upstream
            .exchange(checkout.binding(), body.clone(), forwarded)
            .await;
        let lost = match reply {
            Ok(reply) => match Messages::of(reply, limit, timeout).await {
                Ok((status, Messages::One(Some(message))))
                    if says_session_lost(status, &message) =>
                {
                    true
                }
                Ok((_, messages)) => return Ok((checkout, messages)),
                Err(e) => {
                    checkout.discard();
                    return Err(app.upstream_error(e));
                }
            },
            Err(UpstreamError::SessionGone) => true,
            Err(e) => {
                checkout.discard();
                return Err(app.upstream_error(e));
            }
        };
        checkout.discard();
        if !lost || attempt >= 2 {
            return Err(app.upstream_error(UpstreamError::SessionGone));
        }
    }
}

/// Whether `capabilities` (a client's, raw) declares `capability`.
pub fn declares(capabilities: &RawValue, capability: &str) -> bool {
    RawObject::parse(capabilities).is_some_and(|caps| caps.get(capability).is_some())
}

/// Filters log notifications for a client.
pub fn wants_log(level: Option<LogLevel>, notification: &crate::jsonrpc::Envelope<'_>) -> bool {
    crate::stateless::results::log_passes(notification, level)
}
