//! The client-facing HTTP service: routes, per-request checks, and the choice of path for
//! each message (DESIGN.md, "The way a request travels").
//!
//! Order of work on `POST {path}`, each step refusing before the next costs anything:
//! 1. `Origin` (403), `Content-Type` (415), `Accept` (406) — headers only;
//! 2. the body, capped at `max_body_bytes` (413);
//! 3. the JSON-RPC envelope (-32700 / -32600);
//! 4. the route: `sessions/create`; a message naming a data-layer session (in `_meta` or
//!    by a proxy-issued `Mcp-Session-Id`); or no session, passed through to the upstream
//!    untouched (legacy clients) unless `upstream.require_session` is set.

mod body;
mod checks;
mod headers;
mod ops;
mod passthrough;
mod relay;
mod respond;
mod serve;
mod sessions;
mod stateless;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ALLOW, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tracing::{Instrument, field};

pub use body::ProxyBody;
pub use serve::{Role, Serving, serve};
pub use sessions::short as short_id;

use self::checks::Accepts;
use self::sessions::{Dialect, Message, SessionRef};
use crate::config::{Config, HEALTH_PATH, Secret};
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, raw_str};
use crate::mcp::headers::MCP_SESSION_ID;
use crate::mcp::meta::{self, MetaError, Payload, SessionMeta};
use crate::metrics::{Metrics, Outcome, method_label};
use crate::session::{Sessions, is_issued_shape};
use crate::stateless::Sealer;
use crate::upstream::{Binding, Media, Pool, PoolSettings, Upstream};

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub struct App {
    path: String,
    max_body_bytes: usize,
    allowed_origins: Vec<String>,
    require_session: bool,
    sse_idle_timeout: Duration,
    upstream: Upstream,
    sessions: Arc<Sessions>,
    metrics: Arc<Metrics>,
    serve_metrics: bool,
    admin_token: Option<Secret>,
    calls: stateless::Calls,
}

impl App {
    pub fn new(
        config: &Config,
        upstream: Upstream,
        sessions: Arc<Sessions>,
        metrics: Arc<Metrics>,
        key: &[u8],
    ) -> Self {
        let pool = Pool::new(
            upstream.clone(),
            PoolSettings {
                max_open: config.stateless.max_pooled,
                max_idle_per_key: config.stateless.max_pooled,
                idle_ttl: config.stateless.pool_idle_ttl,
                max_age: stateless::POOLED_SESSION_MAX_AGE,
            },
        );
        let calls = stateless::Calls {
            pool,
            sealer: Sealer::new(key, config.stateless.request_state_ttl),
            parked: Default::default(),
            gather: Duration::from_millis(50),
            listens: Arc::new(tokio::sync::Semaphore::new(config.stateless.max_listens)),
        };
        App {
            path: config.path.clone(),
            max_body_bytes: config.max_body_bytes,
            allowed_origins: config.allowed_origins.clone(),
            require_session: config.upstream.require_session,
            sse_idle_timeout: config.upstream.sse_idle_timeout,
            upstream,
            sessions,
            metrics,
            serve_metrics: config.admin.metrics,
            admin_token: config.admin.token.clone(),
            calls,
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The pool of upstream sessions serving stateless clients.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.calls.pool
    }

    /// An upstream body passed on untouched, counted while open if it is a stream.
    fn untouched(&self, body: Incoming, media: Media) -> ProxyBody {
        let open = (media == Media::EventStream).then(|| self.metrics.stream_opened());
        ProxyBody::Stream { body, open }
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Ends an upstream session in the background (expiry, a failed admission).
    pub fn end_upstream(&self, session_id: Option<Arc<str>>, protocol_version: &'static str) {
        let Some(session_id) = session_id else { return };
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            let binding = Binding {
                session_id: Some(&session_id),
                protocol_version,
            };
            if let Err(e) = upstream.terminate(binding).await {
                tracing::warn!(error = %e, "upstream did not end a session");
            }
        });
    }
}

/// Serves one request on the main listener: the MCP endpoint, `/healthz`, and the
/// operations endpoints when they share this listener.
pub async fn handle(app: Arc<App>, request: Request<Incoming>, role: Role) -> Response<ProxyBody> {
    let path = request.uri().path();
    if role.serves_mcp() && path == app.path {
        return mcp(&app, request).await;
    }
    if (path == HEALTH_PATH || role.serves_operations())
        && let Some(response) = ops::route(&app, &request).await
    {
        return response;
    }
    respond::error(
        &ProxyError::NoSuchPath {
            path: app.path.clone(),
        },
        None,
    )
}

/// The MCP endpoint, observed: one span per request (method, session tag, upstream,
/// status, latency) and the request counter.
async fn mcp(app: &Arc<App>, request: Request<Incoming>) -> Response<ProxyBody> {
    let started = Instant::now();
    let span = tracing::info_span!(
        "request",
        method = field::Empty,
        session = field::Empty,
        upstream = %app.upstream.label(),
        status = field::Empty,
        latency_us = field::Empty,
    );
    let (response, method) = async {
        match *request.method() {
            Method::POST => post(app, request).await,
            Method::GET => (
                get(app, request)
                    .await
                    .unwrap_or_else(|e| respond::error(&e, None)),
                "GET",
            ),
            Method::DELETE => (
                delete(app, request)
                    .await
                    .unwrap_or_else(|e| respond::error(&e, None)),
                "DELETE",
            ),
            _ => (not_allowed("GET, POST, DELETE"), "other"),
        }
    }
    .instrument(span.clone())
    .await;
    let status = response.status().as_u16();
    span.record("method", method);
    span.record("status", status);
    span.record("latency_us", started.elapsed().as_micros() as u64);
    app.metrics.request(method, Outcome::of_status(status));
    span.in_scope(|| tracing::debug!("request served"));
    response
}

fn not_allowed(allow: &'static str) -> Response<ProxyBody> {
    let mut response = respond::status(StatusCode::METHOD_NOT_ALLOWED);
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

/// A POST: one JSON-RPC message. Returns the answer and the method's metric label.
async fn post(app: &Arc<App>, request: Request<Incoming>) -> (Response<ProxyBody>, &'static str) {
    let (parts, body) = request.into_parts();
    let checked = checks::origin(&parts.headers, &app.allowed_origins)
        .and_then(|()| checks::content_type(&parts.headers))
        .and_then(|()| checks::accept(&parts.headers));
    let accepts = match checked {
        Ok(accepts) => accepts,
        Err(e) => return (respond::error(&e, None), "other"),
    };
    let body = match checks::read_body(body, &parts.headers, app.max_body_bytes).await {
        Ok(body) => body,
        Err(e) => return (respond::error(&e, None), "other"),
    };
    let envelope = match Envelope::parse(&body) {
        Ok(envelope) => envelope,
        Err(e) => return (respond::error(&e.into(), None), "other"),
    };
    let method = match envelope.kind {
        Kind::Response => "response",
        Kind::Request | Kind::Notification => method_label(envelope.method()),
    };
    let response = match dispatch(app, &parts.headers, &body, &envelope, accepts).await {
        Ok(response) => response,
        // Only a request has an id to answer; a failed notification or response gets the
        // error with a null id.
        Err(e) => respond::error(&e, envelope.id.filter(|_| envelope.kind == Kind::Request)),
    };
    (response, method)
}

async fn dispatch(
    app: &Arc<App>,
    headers: &HeaderMap,
    body: &Bytes,
    envelope: &Envelope<'_>,
    accepts: Accepts,
) -> Result<Response<ProxyBody>, ProxyError> {
    let payload_raw = match envelope.kind {
        Kind::Response => envelope.result,
        Kind::Request | Kind::Notification => envelope.params,
    };
    let payload = match payload_raw {
        Some(raw) => Payload::open(raw)?.map(|payload| (raw, payload)),
        None => None,
    };
    let params = payload.as_ref().map(|(_, p)| p);
    let named = match params {
        Some(payload) => payload.session()?,
        None => None,
    };
    // SEP-1364: a top-level `sessionId` (`null` before a session exists).
    let (dialect, top_level) = match envelope.session_id {
        None => (Dialect::DataLayer, None),
        Some(raw) if raw.get() == "null" => (Dialect::Sep1364, None),
        Some(raw) => match raw_str(raw) {
            Some(id) => (Dialect::Sep1364, Some(id)),
            None => return Err(ProxyError::Meta(MetaError::MalformedSession)),
        },
    };
    let request_id = envelope.id.filter(|_| envelope.kind == Kind::Request);
    let method = envelope.method();
    // SEP-1364 names the session to end in `params.sessionId`.
    let ending = matches!(method, "sessions/delete" | "session/delete" | "terminate");
    let in_params = if (ending && dialect == Dialect::Sep1364) || method == "terminate" {
        params.and_then(|p| p.member("sessionId")).and_then(raw_str)
    } else {
        None
    };
    let session = session_ref(named, top_level.or(in_params), headers.get(&MCP_SESSION_ID))?;
    // `sessions/create` is the proxy's own, whichever era the client speaks: a 2026-07-28
    // client that saw `sessions: {}` in `server/discover` opens a session this way.
    if let (Some(id), "sessions/create") = (request_id, method) {
        let dialect = match params.and_then(|p| p.member("capabilities")) {
            Some(_) => Dialect::Sep1364,
            None => dialect,
        };
        let modern = params.is_some_and(|p| p.meta(meta::PROTOCOL_VERSION).is_some());
        return sessions::create(app, headers, id, params, dialect, modern).await;
    }
    // An `Mcp-Session-Id` of an old connection means legacy semantics, whatever `_meta`
    // the message carries.
    if session.is_none()
        && !headers.contains_key(&MCP_SESSION_ID)
        && crate::stateless::detect(headers, method, params)
    {
        let message = Message {
            headers,
            body,
            envelope,
            payload: payload.as_ref().map(|(raw, p)| (*raw, p)),
            dialect,
            accepts,
        };
        return stateless::handle(app, &message).await;
    }
    match (request_id, method) {
        (Some(id), "initialize") if dialect == Dialect::Sep1364 => {
            return sessions::initialize(app, headers, id, params, session.as_ref()).await;
        }
        // A legacy client in front of a stdio server: the proxy is its transport.
        (Some(id), "initialize") if session.is_none() && app.upstream.http().is_none() => {
            return sessions::initialize_legacy(app, headers, id, params).await;
        }
        _ => {}
    }
    match (session, request_id) {
        (Some(session), Some(id)) if ending => sessions::delete(app, id, &session).await,
        // The proxy initialized the upstream connection itself.
        (Some(_), None) if method == "notifications/initialized" => {
            Ok(respond::status(StatusCode::ACCEPTED))
        }
        (Some(session), _) => {
            let message = Message {
                headers,
                body,
                envelope,
                payload: payload.as_ref().map(|(raw, p)| (*raw, p)),
                dialect,
                accepts,
            };
            relay::forward(app, &message, &session).await
        }
        (None, Some(_)) if ending => Err(ProxyError::DeleteWithoutSession),
        (None, _) if app.require_session => Err(ProxyError::SessionRequired {
            method: method.to_owned(),
        }),
        (None, _) => passthrough::forward(app, Method::POST, headers, body.clone()).await,
    }
}

/// The session a message names. `_meta` (or SEP-1364's top-level `sessionId`) is
/// authoritative; when both are given they must agree, and an `Mcp-Session-Id` header must
/// agree with them. A header alone names a data-layer session only when it has the shape
/// of a proxy-issued id (any other is an upstream's own id from a legacy client).
fn session_ref<'a>(
    named: Option<SessionMeta<'a>>,
    top_level: Option<Cow<'a, str>>,
    header: Option<&'a HeaderValue>,
) -> Result<Option<SessionRef<'a>>, ProxyError> {
    let session = match (named, top_level) {
        (Some(meta), Some(top)) if meta.session_id != top => {
            return Err(ProxyError::SessionHeaderMismatch {
                header: top.into_owned(),
                meta: meta.session_id.into_owned(),
            });
        }
        (Some(meta), _) => Some(SessionRef {
            id: meta.session_id,
            state: meta.state,
        }),
        (None, Some(top)) => Some(SessionRef {
            id: top,
            state: None,
        }),
        (None, None) => None,
    };
    match (session, header) {
        (Some(session), Some(header)) if header.as_bytes() != session.id.as_bytes() => {
            Err(ProxyError::SessionHeaderMismatch {
                header: String::from_utf8_lossy(header.as_bytes()).into_owned(),
                meta: session.id.into_owned(),
            })
        }
        (Some(session), _) => Ok(Some(session)),
        (None, Some(header)) => {
            Ok(header
                .to_str()
                .ok()
                .filter(|id| is_issued_shape(id))
                .map(|id| SessionRef {
                    id: Cow::Borrowed(id),
                    state: None,
                }))
        }
        (None, None) => Ok(None),
    }
}

/// The data-layer session a bare `Mcp-Session-Id` names, if it names one.
fn header_session(headers: &HeaderMap) -> Option<SessionRef<'_>> {
    session_ref(None, None, headers.get(&MCP_SESSION_ID))
        .ok()
        .flatten()
}

async fn get(app: &App, request: Request<Incoming>) -> Result<Response<ProxyBody>, ProxyError> {
    let headers = request.headers();
    checks::origin(headers, &app.allowed_origins)?;
    match header_session(headers) {
        Some(session) => relay::listen(app, headers, &session).await,
        None if app.require_session => Err(ProxyError::SessionRequired {
            method: "GET".into(),
        }),
        None => passthrough::forward(app, Method::GET, headers, Bytes::new()).await,
    }
}

async fn delete(app: &App, request: Request<Incoming>) -> Result<Response<ProxyBody>, ProxyError> {
    let headers = request.headers();
    checks::origin(headers, &app.allowed_origins)?;
    match header_session(headers) {
        Some(session) => sessions::delete_by_header(app, &session).await,
        None if app.require_session => Err(ProxyError::SessionRequired {
            method: "DELETE".into(),
        }),
        None => passthrough::forward(app, Method::DELETE, headers, Bytes::new()).await,
    }
}
