//! A Streamable HTTP upstream (2025-11-25 "Transports"): one endpoint behind a pooled
//! client. Every exchange becomes an [`Answer`]; a request made in an upstream session
//! that the upstream no longer knows fails with [`UpstreamError::SessionGone`] (decided
//! by [`super::lost`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::histogram::Histogram;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::answer::{Answer, Messages};
use super::error::UpstreamError;
use super::ids::{self, InFlight};
use super::lost::session_lost;
use super::read::{Media, media_type};
use crate::mcp::headers::{ACCEPT_BOTH, JSON, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

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
    /// Idle pooled connections kept open, at most.
    pub max_idle: usize,
}

/// The upstream session a request is sent in.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The replica holding it.
    pub replica: super::ReplicaId,
    /// The upstream's `Mcp-Session-Id`; `None` for an upstream that issued none.
    pub session_id: Option<&'a str>,
    /// The version negotiated at `initialize`, sent as `MCP-Protocol-Version`.
    pub protocol_version: &'a str,
}

/// One upstream endpoint behind a connection pool.
#[derive(Debug, Clone)]
pub struct HttpUpstream {
    client: Client<HttpConnector, Full<Bytes>>,
    settings: Settings,
    label: Arc<str>,
    id: super::ReplicaId,
    /// Time to response head, observed on every exchange.
    latency: Option<Histogram>,
    /// The proxy's ids of requests in flight, for the clients' cancellations.
    in_flight: Arc<InFlight>,
}

impl HttpUpstream {
    pub fn new(settings: Settings, latency: Option<Histogram>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(settings.connect_timeout));
        connector.set_nodelay(true);
        // The pool closes idle connections only with a timer: without one, an idle
        // connection is dropped when the pool is next used, and after a burst (a reaper
        // ending thousands of sessions) the sockets stay open for good.
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(settings.idle_timeout)
            .pool_max_idle_per_host(settings.max_idle)
            .build(connector);
        let label: Arc<str> = settings.url.to_string().into();
        HttpUpstream {
            client,
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
    /// with the client's; a client's `notifications/cancelled` names the proxy's id.
    pub async fn exchange(
        &self,
        binding: Binding<'_>,
        body: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let (body, restore) = ids::outgoing(body, binding.session_id, &self.in_flight);
        let mut answer = self.post(Some(binding), body, forwarded).await?;
        if let Some(restore) = restore {
            answer.restore_ids(restore);
        }
        Ok(answer)
    }

    /// POSTs one JSON-RPC message, as it is, in `binding`'s upstream session (or in none)
    /// and reads the answer. `forwarded` are the client's end-to-end headers the caller
    /// chose to pass on; the transport's own headers are set here.
    pub async fn post(
        &self,
        binding: Option<Binding<'_>>,
        body: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let mut request = self.request(Method::POST, binding, forwarded, Full::new(body))?;
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_BOTH));
        let response = self.send(request).await?;
        let in_session = binding.is_some_and(|b| b.session_id.is_some());
        if in_session && session_lost(response.status(), None) {
            return Err(UpstreamError::SessionGone);
        }
        let answer = Answer::read(
            response,
            self.settings.max_message_bytes,
            self.settings.timeout,
        )
        .await?;
        if in_session
            && let Messages::One(Some(body)) = &answer.messages
            && session_lost(answer.status, Some(body))
        {
            return Err(UpstreamError::SessionGone);
        }
        Ok(answer)
    }

    /// The upstream session's own stream (GET, 2025-11-25 "Listening for Messages from
    /// the Server"). An answer that is not a stream (405: the upstream has none) is kept
    /// with its status, to be passed on as it is.
    pub async fn listen(
        &self,
        binding: Binding<'_>,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let mut request = self.request(Method::GET, Some(binding), forwarded, Full::default())?;
        request
            .headers_mut()
            .insert(ACCEPT, HeaderValue::from_static(crate::mcp::headers::SSE));
        let response = self.send(request).await?;
        if binding.session_id.is_some() && session_lost(response.status(), None) {
            return Err(UpstreamError::SessionGone);
        }
        if !response.status().is_success() && media_type(response.headers()) != Media::Json {
            let (parts, _) = response.into_parts();
            return Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                messages: Messages::Nothing,
            });
        }
        Answer::read(
            response,
            self.settings.max_message_bytes,
            self.settings.timeout,
        )
        .await
    }

    /// Sends a client's request on as it is (an old client passed through), outside any
    /// session the proxy keeps; the answer comes back as it is.
    pub async fn forward(
        &self,
        method: Method,
        forwarded: &HeaderMap,
        body: Bytes,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let request = self.request(method, None, forwarded, Full::new(body))?;
        self.send(request).await
    }

    /// Sends `DELETE` for an upstream session (2025-11-25: the client ends its session).
    /// The upstream may answer 405 (it does not let clients end sessions) or 404 (already
    /// gone); both mean there is nothing more to do.
    pub async fn terminate(&self, binding: Binding<'_>) -> Result<(), UpstreamError> {
        if binding.session_id.is_none() {
            return Ok(());
        }
        let request = self.request(
            Method::DELETE,
            Some(binding),
            &HeaderMap::new(),
            Full::default(),
        )?;
        match self.send(request).await {
            Ok(response) => match response.status() {
                s if s.is_success() => Ok(()),
                StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => Ok(()),
                status => Err(UpstreamError::Refused {
                    status,
                    detail: "DELETE of the upstream session failed".into(),
                }),
            },
            Err(e) => Err(e),
        }
    }

    /// Sends a request with the timeout applied, observing the latency histogram.
    async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let timeout = self.settings.timeout;
        let sent = Instant::now();
        let response = match tokio::time::timeout(timeout, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(UpstreamError::Unreachable(describe(&e))),
            Err(_) => return Err(UpstreamError::Timeout(timeout)),
        };
        let answered = Instant::now();
        if let Some(latency) = &self.latency {
            latency.observe(answered.duration_since(sent).as_secs_f64());
        }
        Ok(response)
    }

    /// A request to the upstream endpoint with the binding's headers and `forwarded`.
    fn request(
        &self,
        method: Method,
        binding: Option<Binding<'_>>,
        forwarded: &HeaderMap,
        body: Full<Bytes>,
    ) -> Result<Request<Full<Bytes>>, UpstreamError> {
        let mut request = Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = self.settings.url.clone();
        let headers = request.headers_mut();
        headers.reserve(forwarded.len() + 4);
        for (name, value) in forwarded {
            headers.append(name.clone(), value.clone());
        }
        if let Some(binding) = binding {
            if let Some(id) = binding.session_id {
                let value = HeaderValue::from_str(id).map_err(|_| {
                    UpstreamError::Protocol("the upstream session id is not a valid header".into())
                })?;
                headers.insert(MCP_SESSION_ID.clone(), value);
            }
            let version = HeaderValue::from_str(binding.protocol_version).map_err(|_| {
                UpstreamError::Protocol("the negotiated version is not a valid header".into())
            })?;
            headers.insert(MCP_PROTOCOL_VERSION.clone(), version);
        }
        Ok(request)
    }
}

fn describe(e: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error;
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
