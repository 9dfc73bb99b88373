//! A Streamable HTTP upstream (2025-11-25 "Transports"): one endpoint behind its
//! connections (`super::connections`: per worker, each owned by the request using it). Every exchange becomes an [`Answer`]; a request made in an upstream session
//! that the upstream no longer knows fails with [`UpstreamError::SessionGone`] (decided
//! by [`super::lost`]).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode, Uri};

use super::answer::{Answer, Messages};
use super::connections::{Connections, OwnFields, UpstreamRequest, UpstreamResponse};
use super::error::UpstreamError;
use super::ids::{self, RenamedRequests};
use super::lost::{self, session_lost};
use super::passed::Passed;
use super::read::{Media, media_type, read_body};
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::headers::{self, ACCEPT_BOTH, JSON, MCP_PROTOCOL_VERSION};
use crate::mcp::version;
use crate::telemetry::client::{ClientSpan, Operation, Peer};

/// How to reach the upstream.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The upstream's MCP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    pub url: Uri,
    pub connect_timeout: Duration,
    /// Time allowed for the response head (and for a whole JSON body).
    pub timeout: Duration,
    /// Largest single message (JSON body or SSE event) read from the upstream.
    pub max_message_bytes: usize,
    /// An idle pooled connection is closed after this long.
    pub idle_timeout: Duration,
    /// Idle connections kept open, at most (shared out over the workers).
    pub max_idle: usize,
    /// The client's `Authorization` never goes upstream (`[auth]` verified it, and
    /// `auth.forward_token` is off): the token was for the proxy.
    pub withhold_authorization: bool,
    /// The proxy's own headers for this upstream (every replica shares them); the
    /// client's of the same names never pass.
    pub credentials: Arc<super::credentials::Credentials>,
    /// The client's token exchanged for this upstream's (`token_exchange`): in place of
    /// the client's `Authorization`, never beside it.
    pub exchange: Option<Arc<crate::auth::exchange::TokenExchange>>,
}

/// The address of the upstream session a request is sent in.
#[derive(Debug, Clone, Copy)]
pub struct SessionAddr<'a> {
    /// The replica holding it.
    pub replica: super::ReplicaId,
    /// The upstream's `Mcp-Session-Id`; `None` for an upstream that issued none.
    pub session_id: Option<&'a str>,
    /// The version negotiated at `initialize`, sent as `MCP-Protocol-Version` (one of
    /// the versions the proxy knows: `mcp::version`).
    pub protocol_version: &'static str,
}

/// One upstream endpoint behind its connections.
#[derive(Debug, Clone)]
pub struct HttpUpstream {
    connections: Arc<Connections>,
    /// The request target every request is sent to (origin form) and its `Host`.
    target: Uri,
    host: HeaderValue,
    /// The server's host and port, as traces name it (never the URL's credentials).
    server: (Arc<str>, u16),
    settings: Settings,
    label: Arc<str>,
    id: super::ReplicaId,
    /// Time to response head, observed on every exchange.
    latency: Option<Histogram>,
    /// The proxy's ids of requests in flight, for the clients' cancellations.
    in_flight: Arc<RenamedRequests>,
}

impl HttpUpstream {
    pub fn new(settings: Settings, latency: Option<Histogram>) -> Self {
        let url = &settings.url;
        let port = url.port_u16().unwrap_or(match url.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        // Idle connections are closed on a timer: after a burst (a reaper ending
        // thousands of sessions) the sockets do not stay open for good.
        let server_host: Arc<str> = url
            .host()
            .unwrap_or("localhost")
            .trim_matches(['[', ']'])
            .into();
        let connections = Connections::new(
            server_host.to_string(),
            port,
            settings.connect_timeout,
            settings.idle_timeout,
            settings.max_idle,
        );
        let target = url.path_and_query().map_or_else(
            || Uri::from_static("/"),
            |p| Uri::try_from(p.as_str()).unwrap_or_else(|_| Uri::from_static("/")),
        );
        let host = url
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .unwrap_or_else(|| HeaderValue::from_static("localhost"));
        let label: Arc<str> = settings.url.to_string().into();
        HttpUpstream {
            connections: Arc::new(connections),
            target,
            host,
            server: (server_host, port),
            settings,
            id: super::replica_id(&label),
            label,
            latency,
            in_flight: Arc::default(),
        }
    }

    /// How errors and logs name this upstream: its URL.
    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Its id as a replica of its upstream.
    pub fn id(&self) -> super::ReplicaId {
        self.id
    }

    /// Sends a client's message in `binding`'s upstream session, in the proxy's own
    /// request ids (`ids`): a request goes with a fresh id and its response comes back
    /// with the client's (a JSON body's left to its reader, when the sender asked:
    /// `Answer::renamed`); a client's `notifications/cancelled` names the proxy's id.
    pub async fn exchange(
        &self,
        binding: SessionAddr<'_>,
        body: ids::Outgoing,
        forwarded: HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let by_reader = body.is_restored_by_reader();
        let (body, restore) = ids::outgoing(body, binding.session_id, &self.in_flight);
        let mut answer = self.post(Some(binding), body, forwarded).await?;
        if let Some(restore) = restore {
            answer.restore_ids(restore, by_reader);
        }
        Ok(answer)
    }

    /// POSTs one JSON-RPC message, as it is, in `binding`'s upstream session (or in none)
    /// and reads the answer. `forwarded` are the client's end-to-end headers the caller
    /// chose to pass on (the request's own map; the transport's own fields are written
    /// beside it by the connection, in place of any of their names: [`OwnFields`]).
    pub async fn post(
        &self,
        binding: Option<SessionAddr<'_>>,
        body: Bytes,
        forwarded: HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        // A modern (2026-07-28) request mirrors its method and target into headers
        // (SEP-2243); the version header comes with the address.
        let mirrored = binding
            .filter(|addr| version::is_modern(addr.protocol_version))
            .and_then(|_| Envelope::parse(&body).ok())
            .filter(|envelope| envelope.kind == Kind::Request)
            .map(|envelope| headers::mirrored(envelope.method(), envelope.params));
        let modern = binding.is_some_and(|addr| version::is_modern(addr.protocol_version));
        let own = self
            .own_fields_in(binding)?
            .content_type(JSON)
            .accept(ACCEPT_BOTH);
        let (span, body, operation) = self.span_for(body, modern);
        let mut request = self.request(Method::POST, forwarded, body);
        if let Some(operation) = operation {
            request.extensions_mut().insert(operation);
        }
        if let Some(mirrored) = mirrored {
            let headers = request.headers_mut();
            for (name, value) in mirrored {
                headers.insert(name.clone(), value);
            }
        }
        let response = self.send_spanned(request, span, &own).await?;
        let in_session = binding.is_some_and(|b| b.session_id.is_some());
        if in_session && session_lost(response.status(), None) {
            return Err(UpstreamError::SessionGone);
        }
        let answer = Answer::read(
            response,
            self.settings.max_message_bytes,
            self.settings.timeout,
        )
        .await;
        if in_session && lost::in_answer(&answer) {
            return Err(UpstreamError::SessionGone);
        }
        answer
    }

    /// The upstream session's own stream (GET, 2025-11-25 "Listening for Messages from
    /// the Server"). An answer that is not a stream (405: the upstream has none) is kept
    /// with its status, to be passed on as it is.
    pub async fn listen(
        &self,
        binding: SessionAddr<'_>,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let own = self
            .own_fields_in(Some(binding))?
            .accept(crate::mcp::headers::SSE);
        let request = self.request(Method::GET, forwarded.clone(), Bytes::new());
        let response = self.send(request, &own).await?;
        let in_session = binding.session_id.is_some();
        if in_session && session_lost(response.status(), None) {
            return Err(UpstreamError::SessionGone);
        }
        if !response.status().is_success() && media_type(response.headers()) != Media::Json {
            let (parts, body) = response.into_parts();
            if in_session && lost::needs_body(parts.status) {
                let body = read_body(body, lost::READ_LIMIT, self.settings.timeout)
                    .await
                    .unwrap_or_default();
                if session_lost(parts.status, Some(&body)) {
                    return Err(UpstreamError::SessionGone);
                }
            }
            return Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                messages: Messages::Nothing,
                renamed: None,
            });
        }
        let answer = Answer::read(
            response,
            self.settings.max_message_bytes,
            self.settings.timeout,
        )
        .await;
        if in_session && lost::in_answer(&answer) {
            return Err(UpstreamError::SessionGone);
        }
        answer
    }

    /// Sends a client's request on as it is (an old client passed through), outside any
    /// session the proxy keeps; the answer comes back as it is. The client's fields that
    /// pass are written from its own map ([`Passed`]); the request's map holds only what
    /// the transport puts in place of some of them (an exchanged token, the upstream's
    /// credentials, a trace context).
    pub async fn forward(
        &self,
        method: Method,
        passed: &Passed<'_>,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        // A POST's span is named for what it carries; a 2026-07-28 request's context
        // goes in its `_meta` as well.
        let (span, body, operation) = match method == Method::POST && crate::telemetry::active() {
            true => {
                let modern = passed
                    .get(&MCP_PROTOCOL_VERSION)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(version::is_modern);
                self.span_for(body, modern)
            }
            false => (None, body, None),
        };
        // The client's `Authorization` and the credentials' names are left out as its
        // fields are written (`OwnFields::passing`); what goes in their place, here.
        let left_out = self.leaves_out_authorization();
        let mut added = HeaderMap::new();
        // Looked up only when it is left out (an exchange needs it).
        let presented = if left_out {
            passed.get(&AUTHORIZATION)
        } else {
            None
        };
        self.put_credentials(presented, &mut added);
        let mut request = new_request(self.target.clone(), method, added, body);
        if let Some(operation) = operation {
            request.extensions_mut().insert(operation);
        }
        let own = self
            .own_fields()
            .passing(passed, left_out, &self.settings.credentials);
        self.send_spanned(request, span, &own).await
    }

    /// Sends `DELETE` for an upstream session (2025-11-25: the client ends its session).
    /// The upstream may answer 405 (it does not let clients end sessions) or say the
    /// session is already gone (404, or a 400 in its own words: [`super::lost`]); all
    /// mean there is nothing more to do.
    pub async fn terminate(&self, binding: SessionAddr<'_>) -> Result<(), UpstreamError> {
        if binding.session_id.is_none() {
            return Ok(());
        }
        let own = self.own_fields_in(Some(binding))?;
        let request = self.request(Method::DELETE, HeaderMap::new(), Bytes::new());
        let response = self.send(request, &own).await?;
        let status = response.status();
        if status.is_success() || status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        let body = if lost::needs_body(status) {
            read_body(
                response.into_body(),
                lost::READ_LIMIT,
                self.settings.timeout,
            )
            .await
            .unwrap_or_default()
        } else {
            Bytes::new()
        };
        // Already gone (in the upstream's own words): nothing left to end.
        if session_lost(status, Some(&body)) {
            return Ok(());
        }
        Err(UpstreamError::Refused {
            status,
            detail: "DELETE of the upstream session failed".into(),
        })
    }

    /// The request target every request is sent to (origin form).
    pub(super) fn target(&self) -> &Uri {
        &self.target
    }

    /// A request to `target` (origin form, at the upstream's origin) with the client's
    /// headers `forwarded`, adjusted where they lie (no copy): the client's
    /// `Authorization` left out when it was for the proxy, or replaced by the token
    /// exchanged for it; the client's headers of the credentials' names replaced by the
    /// proxy's own. (The upstream's own `Host` is the connection's to write, in place of
    /// any the client sent: [`OwnFields`].)
    pub(super) fn request_to(
        &self,
        target: Uri,
        method: Method,
        mut forwarded: HeaderMap,
        body: Bytes,
    ) -> UpstreamRequest {
        // No room reserved here: the transport's own fields are not put in the map
        // (`OwnFields`), and what may be (credentials, a trace context) grows it only
        // when it is there.
        let presented = match self.leaves_out_authorization() {
            false => None,
            true => forwarded.remove(AUTHORIZATION),
        };
        self.settings.credentials.strip(&mut forwarded);
        self.put_credentials(presented.as_ref(), &mut forwarded);
        new_request(target, method, forwarded, body)
    }

    /// Whether a client's `Authorization` is kept from the upstream: it was for the
    /// proxy (`auth.forward_token` off), or is exchanged for one for the upstream.
    fn leaves_out_authorization(&self) -> bool {
        self.settings.exchange.is_some() || self.settings.withhold_authorization
    }

    /// Puts in `headers` what the transport sends in place of the client's: the token
    /// exchanged for the client's `presented` one (when it was left out and an exchange
    /// knows it), then the credentials' values.
    fn put_credentials(&self, presented: Option<&HeaderValue>, headers: &mut HeaderMap) {
        if let (Some(exchange), Some(presented)) = (&self.settings.exchange, presented)
            && let Some(exchanged) = exchange.exchanged(presented)
        {
            headers.insert(AUTHORIZATION, exchanged);
        }
        self.settings.credentials.apply(headers);
    }

    /// With traces on, what a POST of `body` is traced as. A 2026-07-28 server
    /// (`modern`) reads the trace context in `_meta` too (SEP-414): its span starts here
    /// and the span's context replaces the client's in the body. For anything else, the
    /// JSON-RPC method the body carries names the span [`Self::send_spanned`] starts.
    fn span_for(
        &self,
        body: Bytes,
        modern: bool,
    ) -> (Option<ClientSpan>, Bytes, Option<Operation>) {
        if !crate::telemetry::active() {
            return (None, body, None);
        }
        let body = match modern {
            true => match ClientSpan::start_message(body, Peer::Tcp(&self.server.0, self.server.1))
            {
                (Some(span), body) => return (Some(span), body, None),
                // Not a request (a notification still gets its span, by its name).
                (None, body) => body,
            },
            false => body,
        };
        let operation = Envelope::parse(&body)
            .ok()
            .filter(|envelope| envelope.kind != Kind::Response)
            .map(|envelope| Operation(envelope.method().into()));
        (None, body, operation)
    }

    /// Sends a request with the timeout applied, observing the latency histogram.
    /// With a span of its own (and its trace context in its headers) when the request
    /// being served has one.
    pub(super) async fn send(
        &self,
        request: UpstreamRequest,
        own: &OwnFields<'_>,
    ) -> Result<UpstreamResponse, UpstreamError> {
        self.send_spanned(request, None, own).await
    }

    /// [`Self::send`], in the span `preset` when the caller started it already (its
    /// context also went into the body).
    async fn send_spanned(
        &self,
        mut request: UpstreamRequest,
        preset: Option<ClientSpan>,
        own: &OwnFields<'_>,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let timeout = self.settings.timeout;
        let span = match preset {
            Some(span) => {
                span.into_headers(request.headers_mut());
                Some(span)
            }
            None => ClientSpan::start(&mut request, Peer::Tcp(&self.server.0, self.server.1)),
        };
        // One clock read for the deadline and the latency.
        let sent = tokio::time::Instant::now();
        let sending =
            tokio::time::timeout_at(sent + timeout, self.connections.send(request, own)).await;
        let answered = match sending {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(UpstreamError::Unreachable(e.to_string())),
            Err(_) => Err(UpstreamError::Timeout(timeout)),
        };
        if let Some(span) = span {
            match &answered {
                Ok(response) => span.finish(Ok(response.status())),
                Err(e) => span.finish(Err(e)),
            }
        }
        let response = answered?;
        if let Some(latency) = &self.latency {
            latency.observe(sent.elapsed().as_secs_f64());
        }
        Ok(response)
    }

    /// A request to the upstream endpoint with `forwarded`.
    fn request(&self, method: Method, forwarded: HeaderMap, body: Bytes) -> UpstreamRequest {
        self.request_to(self.target.clone(), method, forwarded, body)
    }

    /// The transport's fields of every request to this upstream: its `Host`.
    pub(super) fn own_fields(&self) -> OwnFields<'_> {
        OwnFields::host(self.host.as_bytes())
    }

    /// [`Self::own_fields`] of a request in `binding`'s upstream session (or in none):
    /// with the session's id and protocol version.
    fn own_fields_in<'a>(
        &'a self,
        binding: Option<SessionAddr<'a>>,
    ) -> Result<OwnFields<'a>, UpstreamError> {
        let own = self.own_fields();
        let Some(binding) = binding else {
            return Ok(own);
        };
        own.in_session(binding.session_id, binding.protocol_version)
            .map_err(|_| {
                UpstreamError::Protocol("the upstream session id is not a valid header".into())
            })
    }
}

/// A request of `method` to `target` with `headers` and `body`.
fn new_request(target: Uri, method: Method, headers: HeaderMap, body: Bytes) -> UpstreamRequest {
    let mut request = Box::new(Request::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = target;
    *request.headers_mut() = headers;
    request
}
