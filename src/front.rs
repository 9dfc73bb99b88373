//! The client-facing HTTP service: which endpoint a request is for, the checks on it, and
//! handing each MCP message to the path its route names.
//!
//! The phases of one `POST {path}`, each refusing before the next costs anything:
//! 1. headers: `Origin` (403), who the caller is (`auth`: with `[auth]`, a valid bearer
//!    token or 401), `Content-Type` (415), `Accept` (406);
//! 2. the body, capped at `max_body_bytes` (413);
//! 3. a request another proxy replica forwarded (`mcp-proxy-forwarded`): its signature
//!    (403 when no replica of this cluster signed it), and the client it names, whom it
//!    is counted against instead of the forwarding replica's address;
//! 4. the JSON-RPC envelope (-32700 / -32600) and its `params` (or `result`);
//! 5. classify → a [`Route`] (`route::classify`, pure);
//! 6. while the proxy is overloaded (`overload`), new work is refused (503, `shed`);
//! 6. the path: [`SessionPath`], [`StatelessPath`] or [`PassThrough`] of the upstream
//!    the URL path names (`{path}/{name}`; the default upstream also at `{path}`).
//!
//! The replicas' own endpoint (`paths::cluster::CLUSTER_PATH`, deleted sealed sessions)
//! shares the client listener, and answers only what a replica signed.
//!
//! Every MCP request runs in a span (method, session tag, upstream, status, latency) and
//! is counted once, whatever path it took.

mod admission;
mod body;
pub(crate) mod checks;
mod deadline;
mod http1;
mod identity;
mod ops;
mod serve;
mod shed;
mod watchdog;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{ALLOW, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use opentelemetry::context::FutureExt as _;
use tracing::{Instrument, field};

pub use admission::{Admission, Admitted, check_open_file_limit};
pub use body::{ClientBody, ClientRequest, ClientResponse};
use deadline::Deadline;
use identity::Identity;
pub use ops::Ops;
pub use serve::{ConnectionLimits, DRAIN_IDLE, Phase, Role, Serving, serve};

use crate::auth::Auth;
use crate::config::HEALTH_PATH;
use crate::error::ProxyError;
use crate::fleet::{Exchange, Fleet, Served};
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::meta::{self, Payload};
use crate::metrics::{AuthLabels, Metrics, Outcome, Rejection, labels, method_label};
use crate::overload::Overload;
use crate::paths::Cluster;
use crate::paths::cluster::{CLUSTER_PATH, Signed};
use crate::response::{self, ProxyBody};
use crate::route::{self, Bare, BareRoute, Message, Route};
use crate::telemetry::server::ServerSpan;
use crate::within::within;

/// What every MCP endpoint checks before its upstream sees anything.
#[derive(Debug)]
pub struct Limits {
    /// The bare endpoint path, e.g. `/mcp` (for the 404 that names it).
    pub path: String,
    pub max_body_bytes: usize,
    /// A body must arrive in full within this after its head (408 after).
    pub body_timeout: std::time::Duration,
    /// Browser origins allowed besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// Who a request is from (and, with `[auth]`, whether it may come in at all);
    /// replaced whole by a reload.
    pub auth: arc_swap::ArcSwap<Auth>,
}

/// One MCP endpoint: an upstream's paths, and the checks in front of them.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    pub limits: &'a Limits,
    pub served: &'a Arc<Served>,
    /// Whether new work is shed now.
    pub overload: &'a Overload,
    /// Checks what other replicas forward.
    pub cluster: &'a Cluster,
}

/// Everything a listener serves.
#[derive(Debug)]
pub struct Front {
    pub limits: Limits,
    pub fleet: Arc<Fleet>,
    pub ops: Ops,
    pub metrics: Arc<Metrics>,
    /// How client connections are bounded.
    pub connections: ConnectionLimits,
    /// Memory and descriptors, watched: new work is shed near their limits.
    pub overload: Arc<Overload>,
}

/// Serves one request, from a client at `peer`: the MCP endpoint, `/healthz`, and the
/// operations endpoints when this listener has them.
pub async fn handle(
    front: Arc<Front>,
    request: ClientRequest,
    role: Role,
    peer: IpAddr,
) -> ClientResponse {
    let path = request.uri().path();
    if role.serves_mcp() {
        let upstreams = front.fleet.upstreams();
        if let Some(served) = upstreams.at(path) {
            let endpoint = Endpoint {
                limits: &front.limits,
                served,
                overload: &front.overload,
                cluster: &front.fleet.shared().cluster,
            };
            return mcp(&front, endpoint, request, peer).await;
        }
        if path == CLUSTER_PATH {
            return Box::new(from_peer(&front, request).await);
        }
        if let Some(endpoint) = path.strip_prefix(crate::auth::resource::WELL_KNOWN)
            && let Some(response) = resource_metadata(&front, &request, endpoint)
        {
            return Box::new(response);
        }
    }
    // Boxed, as the paths are (`dispatch`): the operations endpoints' future is larger
    // than an MCP request's.
    if (path == HEALTH_PATH || role.serves_operations())
        && let Some(response) = boxed_in_place(|| front.ops.route(&request, role)).await
    {
        return Box::new(response);
    }
    boxed_error(
        &ProxyError::NoSuchPath {
            path: front.limits.path.clone(),
        },
        None,
    )
}

/// The protected resource metadata (RFC 9728) of the MCP endpoint at `endpoint` (the
/// default one when empty), with `[auth]` and its public URL; `None`: not served here.
/// Public, and read by browser clients too.
fn resource_metadata(
    front: &Front,
    request: &Request<ClientBody>,
    endpoint: &str,
) -> Option<Response<ProxyBody>> {
    let endpoint = match endpoint {
        "" | "/" => front.limits.path.as_str(),
        path => path,
    };
    front.fleet.upstreams().at(endpoint)?;
    let document = front.limits.auth.load().metadata(endpoint)?;
    let mut response = match *request.method() {
        Method::GET | Method::HEAD => {
            response::json(StatusCode::OK, Bytes::from(document.to_string()))
        }
        Method::OPTIONS => response::status(StatusCode::NO_CONTENT),
        _ => {
            let mut refused = response::status(StatusCode::METHOD_NOT_ALLOWED);
            refused
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD, OPTIONS"));
            return Some(refused);
        }
    };
    let headers = response.headers_mut();
    headers.insert(
        http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    // A browser client's preflight: the SDKs send their protocol version along.
    headers.insert(
        http::header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, OPTIONS"),
    );
    headers.insert(
        http::header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("mcp-protocol-version"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    Some(response)
}

/// The MCP endpoint, observed: one span per request and the request counter.
async fn mcp(
    front: &Front,
    endpoint: Endpoint<'_>,
    request: ClientRequest,
    peer: IpAddr,
) -> ClientResponse {
    let started = Instant::now();
    let span = tracing::info_span!(
        "request",
        method = field::Empty,
        session = field::Empty,
        upstream = %endpoint.served.label,
        status = field::Empty,
        latency_us = field::Empty,
        trace_id = field::Empty,
        span_id = field::Empty,
    );
    let (response, method) = async {
        match *request.method() {
            // Boxed, and made in its box (`boxed_in_place`): the POST's future (kilobytes)
            // is then never moved — every level it would be awaited through copied it
            // into place.
            Method::POST => boxed_in_place(|| endpoint.post(request, peer, &front.metrics)).await,
            Method::GET | Method::DELETE => {
                let named = if request.method() == Method::GET {
                    labels::GET
                } else {
                    labels::DELETE
                };
                // Boxed: a GET (a stream opened) or DELETE is rarer than a POST, and its
                // future larger.
                let response = boxed_in_place(|| endpoint.bare(request, peer, &front.metrics))
                    .await
                    .unwrap_or_else(|e| response::error(&e, None));
                (Box::new(response), named)
            }
            _ => (Box::new(not_allowed("GET, POST, DELETE")), labels::OTHER),
        }
    }
    .instrument(span.clone())
    .await;
    let status = response.status().as_u16();
    span.record("method", method);
    span.record("status", status);
    let latency = started.elapsed();
    span.record("latency_us", latency.as_micros() as u64);
    let outcome = Outcome::of_status(status);
    front.metrics.served(method, outcome, latency);
    span.in_scope(|| tracing::debug!("request served"));
    response
}

/// A request on the replicas' own endpoint: its body read (capped, in time), then the
/// cluster answers it — if a replica signed it.
async fn from_peer(front: &Front, request: ClientRequest) -> Response<ProxyBody> {
    let cluster = &front.fleet.shared().cluster;
    let (parts, body) = request.into_parts();
    let limit = cluster.max_push_bytes();
    let read = checks::read_body(body, limit);
    match tokio::time::timeout(front.limits.body_timeout, read).await {
        Ok(Ok(body)) => cluster.serve_peer(&parts.method, &parts.headers, &body),
        Ok(Err(e)) => response::error(&e, None),
        Err(_) => response::error(
            &ProxyError::BodyTimeout {
                after: front.limits.body_timeout,
            },
            None,
        ),
    }
}

/// The error's answer, boxed as every answer the front hands on is.
fn boxed_error(error: &ProxyError, id: Option<&[u8]>) -> ClientResponse {
    Box::new(response::error(error, id))
}

fn not_allowed(allow: &'static str) -> Response<ProxyBody> {
    let mut response = response::status(StatusCode::METHOD_NOT_ALLOWED);
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

impl Endpoint<'_> {
    /// A POST: one JSON-RPC message. Returns the answer and the method's metric label.
    async fn post(
        self,
        request: ClientRequest,
        client: IpAddr,
        metrics: &Metrics,
    ) -> (ClientResponse, &'static str) {
        // When the request arrived: its span (traces on) starts then, once its message
        // is known.
        let received = crate::telemetry::active().then(std::time::SystemTime::now);
        let (parts, body) = request.into_parts();
        let checked = match checks::origin(&parts.headers, &self.limits.allowed_origins) {
            Ok(()) => self
                .caller(&parts.headers, parts.uri.path(), metrics)
                .await
                .and_then(|caller| {
                    checks::content_type(&parts.headers)?;
                    Ok((caller, checks::accept(&parts.headers)?))
                }),
            Err(e) => Err(e),
        };
        let (identity, accepts) = match checked {
            Ok(checked) => checked,
            Err(e) => return (boxed_error(&e, None), labels::OTHER),
        };
        let read = checks::read_body(body, self.limits.max_body_bytes);
        let body = match within(self.limits.body_timeout, read).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return (boxed_error(&e, None), labels::OTHER),
            Err(_) => {
                let e = ProxyError::BodyTimeout {
                    after: self.limits.body_timeout,
                };
                return (boxed_error(&e, None), labels::OTHER);
            }
        };
        // Forwarded by another replica: signed by it, or refused before anything else.
        let forwarded = self.cluster.verify(&Signed {
            method: &parts.method,
            path: parts.uri.path(),
            headers: &parts.headers,
            body: &body,
        });
        let (peer, from_peer) = match forwarded {
            Ok(None) => (Some(client), false),
            Ok(Some(from)) => (from.client, true),
            Err(e) => return (boxed_error(&e, None), labels::OTHER),
        };
        // What every message's `params` is opened to (its `_meta` and the session in
        // it) is kept as the envelope is checked, not read again below.
        let (envelope, mut kept) = match Envelope::parse_keeping(&body, &meta::OPENED) {
            Ok(parsed) => parsed,
            Err(e) => return (boxed_error(&e.into(), None), labels::OTHER),
        };
        let label = match envelope.kind {
            Kind::Response => labels::RESPONSE,
            Kind::Request | Kind::Notification => method_label(envelope.method()),
        };
        // Only a request has an id to answer; a failed notification or response gets the
        // error with a null id.
        let answer_id = envelope
            .id
            .filter(|_| envelope.kind == Kind::Request)
            .map(|id| id.get().as_bytes());
        let raw = envelope.params_or_result();
        let payload = match raw
            .map(|raw| Payload::open_kept(raw, &mut kept))
            .transpose()
        {
            Ok(payload) => payload.flatten(),
            Err(e) => return (boxed_error(&e.into(), answer_id), label),
        };
        let message = Message {
            headers: &parts.headers,
            caller: identity.caller,
            body: &body,
            envelope: &envelope,
            payload: raw.zip(payload.as_ref()),
            accepts,
            peer,
        };
        let traced = ServerSpan::start(&message, received, from_peer);
        // A tool's timeout is kept where the client's request came in: a replica it was
        // forwarded to has it kept already.
        let deadlines = (!from_peer).then_some(&*identity.auth);
        let permitted = match identity.permits(&self.served.name, &message, metrics) {
            Ok(()) => {
                self.exchange(&parts.headers, parts.uri.path(), &identity.auth)
                    .await
            }
            refused => refused,
        };
        let answered = match &traced {
            _ if let Err(refused) = permitted => Err(refused),
            Some(span) => {
                let (trace_id, span_id) = span.ids();
                let current = tracing::Span::current();
                current.record("trace_id", trace_id);
                current.record("span_id", span_id);
                self.answer(&message, deadlines, metrics)
                    .with_context(span.context().clone())
                    .await
            }
            None => self.answer(&message, deadlines, metrics).await,
        };
        let answered = match answered {
            Ok(response) => {
                identity
                    .visible(&self.served.name, &message, response)
                    .await
            }
            refused => refused,
        };
        let (mut response, code) = match answered {
            Ok(response) => (response, None),
            Err(e) => (boxed_error(&e, answer_id), Some(e.answer().1.code)),
        };
        if let Some(span) = traced {
            let answered = span.finish(response.status(), code);
            response.extensions_mut().insert(answered);
        }
        (response, label)
    }

    /// A parsed message: classified, then served by its path (a call of a tool with a
    /// timeout held to it); the answer boxed as it comes from the path.
    async fn answer(
        self,
        message: &Message<'_, '_>,
        deadlines: Option<&Auth>,
        metrics: &Metrics,
    ) -> Result<ClientResponse, ProxyError> {
        let rules = self.served.rules().await?;
        match route::classify(message, rules) {
            Ok(route) => match self.overload.shedding() {
                Some(resource) if shed::is_new_work(message, &route) => {
                    self.overload.shed(resource, "request");
                    if matches!(route, Route::Create { .. }) {
                        metrics.rejected(Rejection::Overload);
                    }
                    Err(ProxyError::Overloaded { resource })
                }
                _ => match deadlines
                    .and_then(|auth| Deadline::of(auth, self.served, message, &route))
                {
                    Some(deadline) => {
                        // Boxed: a timed call is rare, and its deadline's future large.
                        boxed_in_place(|| {
                            deadline.run(message, dispatch(self.served, message, route))
                        })
                        .await
                        .map(Box::new)
                    }
                    None => dispatch(self.served, message, route).await.map(Box::new),
                },
            },
            Err(e) => {
                if message.method() == Some(crate::mcp::Method::SessionsCreate) {
                    metrics.rejected(Rejection::Invalid);
                }
                Err(e)
            }
        }
    }

    /// `GET` or `DELETE` of the endpoint: no message, only headers.
    async fn bare(
        self,
        request: ClientRequest,
        client: IpAddr,
        metrics: &Metrics,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let headers = request.headers();
        checks::origin(headers, &self.limits.allowed_origins)?;
        let identity = self.caller(headers, request.uri().path(), metrics).await?;
        identity.judge(
            &self.served.name,
            crate::auth::policy::Item::Upstream,
            metrics,
        )?;
        self.exchange(headers, request.uri().path(), &identity.auth)
            .await?;
        let caller = identity.caller;
        let forwarded = self.cluster.verify(&Signed {
            method: request.method(),
            path: request.uri().path(),
            headers,
            body: &[],
        })?;
        let peer = match forwarded {
            None => Some(client),
            Some(from) => from.client,
        };
        let who = (caller, peer);
        let bare = if request.method() == Method::GET {
            Bare::Get
        } else {
            Bare::Delete
        };
        let traced = ServerSpan::start_bare(request.method(), headers, peer, forwarded.is_some());
        let answered = match &traced {
            Some(span) => {
                self.bare_answer(bare, headers, who)
                    .with_context(span.context().clone())
                    .await
            }
            None => self.bare_answer(bare, headers, who).await,
        };
        // A session's stream may carry list answers too (replayed with `Last-Event-ID`):
        // shown as this caller may see them.
        let answered = match answered {
            Ok(response) if bare == Bare::Get && identity.auth.has_policy() => {
                identity.filtered(&self.served.name, response, "null").await
            }
            answered => answered,
        };
        let Some(span) = traced else {
            return answered;
        };
        match answered {
            Ok(mut response) => {
                let answered = span.finish(response.status(), None);
                response.extensions_mut().insert(answered);
                Ok(response)
            }
            Err(e) => {
                let (status, object, _) = e.answer();
                drop(span.finish(status, Some(object.code)));
                Err(e)
            }
        }
    }

    /// A `GET` or `DELETE`, classified, then served by its path.
    async fn bare_answer(
        self,
        bare: Bare,
        headers: &http::HeaderMap,
        who: (crate::mcp::caller::Caller, Option<std::net::IpAddr>),
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let served = self.served;
        match route::classify_bare(bare, headers, served.rules().await?)? {
            BareRoute::Listen { session } => served.session.listen(headers, who, &session).await,
            BareRoute::EndByHeader { session } => {
                served.session.end_by_header(headers, who, &session).await
            }
            BareRoute::PassThrough => {
                let method = match bare {
                    Bare::Get => Method::GET,
                    Bare::Delete => Method::DELETE,
                };
                served
                    .passthrough
                    .forward(method, headers, Bytes::new())
                    .await
            }
        }
    }
}

/// Hands a classified message to its path.
///
/// Each path's future is boxed: they differ in size by kilobytes (a stateless call's,
/// with its driver and task, is the largest), and an unboxed `match` would make every
/// request's future — moved into place level by level, and by hyper into its own box —
/// as large as the largest path's. Each is made in its box ([`boxed_in_place`]).
async fn dispatch(
    served: &Served,
    message: &Message<'_, '_>,
    route: Route<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    match route {
        Route::Create { id, era } => {
            boxed_in_place(|| served.session.create(message, id, era)).await
        }
        Route::Sep1364Initialize { id, session } => {
            boxed_in_place(|| served.session.initialize(message, id, session.as_ref())).await
        }
        Route::LegacyInitialize { id } => {
            boxed_in_place(|| served.session.initialize_legacy(message, id)).await
        }
        Route::Delete { id, session } => {
            boxed_in_place(|| served.session.delete(message, id, &session)).await
        }
        Route::Stateless => boxed_in_place(|| served.stateless.handle(message)).await,
        Route::InitializedAck { .. } => Ok(response::status(StatusCode::ACCEPTED)),
        Route::InSession { session, era } => {
            boxed_in_place(|| served.session.forward(message, &session, era)).await
        }
        Route::TaskInSession { session } => {
            boxed_in_place(|| served.stateless.in_session(message, &session)).await
        }
        Route::PassThrough => {
            // Cloned before: a call `make` makes (here the body's count) has the future
            // built on the stack again.
            let body = message.body.clone();
            boxed_in_place(|| {
                served
                    .passthrough
                    .forward(Method::POST, message.headers, body)
            })
            .await
        }
    }
}

/// The future `make` returns, in a box allocated before it is made, so that the compiler
/// can build it where it is kept instead of on the stack, copied into the box whole (a
/// future not yet polled is as large as its largest await, kilobytes for a session's
/// call). The release build does (checked in its machine code) when `make` only moves
/// its arguments in; a call inside `make` has the future built on the stack again.
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    let place = Box::new_uninit();
    Box::into_pin(Box::write(place, make()))
}

impl Endpoint<'_> {
    /// With `token_exchange`, the caller's token exchanged for one for the upstream
    /// (kept for the transport, which sends it in place of the client's), or the request
    /// refused (told as `auth`, the request's view of `[auth]`, would tell it).
    async fn exchange(
        self,
        headers: &http::HeaderMap,
        path: &str,
        auth: &Auth,
    ) -> Result<(), ProxyError> {
        use crate::auth::exchange::ExchangeError;
        let exchange = match &self.served.exchange {
            Exchange::None => return Ok(()),
            Exchange::Configured(exchange) => exchange,
            Exchange::Broken => {
                return Err(ProxyError::TokenExchange {
                    upstream: self.served.name.to_string(),
                    failure: ExchangeError::Unavailable("it could not be set up".into()),
                });
            }
        };
        exchange
            .prepare(headers.get(http::header::AUTHORIZATION))
            .await
            .map_err(|failure| {
                tracing::warn!(upstream = %self.served.name, error = %failure, "a caller's token was not exchanged");
                if let ExchangeError::SubjectInvalid(_) = failure {
                    // Gone at the server while good here (within the leeway, or
                    // revoked): a client refreshes its token on a 401.
                    let reason = crate::auth::AuthError::Expired;
                    let challenge = auth.challenge(&reason, path);
                    return ProxyError::Unauthorized { reason, challenge };
                }
                ProxyError::TokenExchange {
                    upstream: self.served.name.to_string(),
                    failure,
                }
            })
    }

    /// Who the request to the endpoint at `path` is from; with `[auth]`, a request
    /// without a valid token for it goes no further (401, or 403 for a missing scope;
    /// counted by reason).
    async fn caller(
        self,
        headers: &http::HeaderMap,
        path: &str,
        metrics: &Metrics,
    ) -> Result<Identity, ProxyError> {
        // This request's view: a reload meanwhile does not change it half-way.
        let auth = self.limits.auth.load_full();
        let identified = auth.identify(headers, path).await;
        identified
            .map(|(caller, verified)| Identity {
                caller,
                verified,
                auth: auth.clone(),
            })
            .map_err(|reason| {
                metrics
                    .auth_refused
                    .get_or_create(&AuthLabels {
                        reason: reason.label(),
                    })
                    .inc();
                ProxyError::Unauthorized {
                    challenge: auth.challenge(&reason, path),
                    reason,
                }
            })
    }
}

#[cfg(test)]
mod tests;
