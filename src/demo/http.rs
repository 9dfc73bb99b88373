//! The demo server's Streamable HTTP transport and lifecycle rules (2025-11-25).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use dashmap::DashMap;
use http::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::journal::{Journal, Received};
use super::tools::{self, Outcome};
use crate::mcp::headers::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::mcp::logging::LogLevel;
use crate::mcp::version;

/// How to run the demo server.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where to listen; port 0 picks a free one.
    pub addr: SocketAddr,
    /// Answer every request as an event stream (as Python FastMCP does), not only the
    /// tools that stream.
    pub always_sse: bool,
    /// Keep a journal of every request (tests); off for the embedded default.
    pub record: bool,
    /// Answer GET with 405, as a server without a notification stream may (2025-11-25,
    /// "Listening for Messages from the Server").
    pub no_get_stream: bool,
    /// Answer DELETE with 405 and keep the session, as a server that does not let clients
    /// end sessions may (2025-11-25, "Session Management").
    pub no_delete: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            always_sse: false,
            record: false,
            no_get_stream: false,
            no_delete: false,
        }
    }
}

/// A running demo server.
#[derive(Debug)]
pub struct DemoServer {
    local_addr: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
pub(super) struct State {
    /// Every session's open GET streams, for notifications to all clients.
    pub(super) everyone: Mutex<Vec<mpsc::Sender<Bytes>>>,
    /// The only `Host` accepted (DNS-rebinding protection, as FastMCP does).
    authority: String,
    always_sse: bool,
    no_get_stream: bool,
    no_delete: bool,
    sessions: DashMap<String, Arc<Session>>,
    journal: Journal,
}

/// One upstream (2025-11-25) session.
#[derive(Debug)]
pub(super) struct Session {
    pub id: String,
    protocol_version: &'static str,
    initialized: AtomicBool,
    pub counter: AtomicU64,
    /// Server-to-client requests waiting for the client's response, by raw JSON id.
    pub pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    pub next_request: AtomicU64,
    /// Open GET streams of this session.
    pub listeners: Mutex<Vec<mpsc::Sender<Bytes>>>,
    /// The least severe log level the client wants (`logging/setLevel`), as a
    /// [`LogLevel`]; everything until the client sets one.
    pub log_level: AtomicU8,
}

impl DemoServer {
    /// Binds and starts serving.
    pub async fn start(options: DemoOptions) -> std::io::Result<DemoServer> {
        let listener = TcpListener::bind(options.addr).await?;
        let local_addr = listener.local_addr()?;
        let state = Arc::new(State {
            everyone: Mutex::new(Vec::new()),
            authority: local_addr.to_string(),
            always_sse: options.always_sse,
            no_get_stream: options.no_get_stream,
            no_delete: options.no_delete,
            sessions: DashMap::new(),
            journal: Journal::new(options.record),
        });
        let (stop, mut stopped) = watch::channel(false);
        let serving = state.clone();
        let task = tokio::spawn(async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = stopped.changed() => break,
                };
                let _ = stream.set_nodelay(true);
                let state = serving.clone();
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(state, request).await) }
                });
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                connections.spawn(async move {
                    let _ = connection.await;
                });
            }
            // Dropping the set aborts every connection: a stopped server is gone, as a
            // crashed or restarted one would be.
            connections.abort_all();
        });
        Ok(DemoServer {
            local_addr,
            state,
            stop,
            task,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The MCP endpoint, e.g. `http://127.0.0.1:41234/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.local_addr)
    }

    /// Every request received so far (with `record` on).
    pub fn journal(&self) -> Vec<Received> {
        self.state.journal.snapshot()
    }

    pub fn clear_journal(&self) {
        self.state.journal.clear();
    }

    /// Upstream sessions currently open.
    pub fn live_sessions(&self) -> usize {
        self.state.sessions.len()
    }

    /// Forgets every session, as a restarted server would.
    pub fn forget_sessions(&self) {
        self.state.sessions.clear();
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

// === the response body ===

/// A demo response body: a whole JSON message, or an event stream fed by a task.
pub(super) enum DemoBody {
    Full(Full<Bytes>),
    Channel(mpsc::Receiver<Bytes>),
}

impl Body for DemoBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            DemoBody::Full(full) => Pin::new(full).poll_frame(cx),
            DemoBody::Channel(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }
}

fn reply(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: DemoBody,
) -> Response<DemoBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

fn json_reply(status: StatusCode, value: &Value) -> Response<DemoBody> {
    reply(
        status,
        Some("application/json"),
        DemoBody::Full(Full::new(Bytes::from(value.to_string()))),
    )
}

/// A JSON-RPC error the way the TypeScript SDK's transport words its HTTP-level refusals.
fn transport_error(status: StatusCode, code: i64, message: &str) -> Response<DemoBody> {
    json_reply(
        status,
        &json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": null}),
    )
}

/// One SSE event carrying a JSON-RPC message.
pub(super) fn sse_event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

// === routing ===

async fn handle(state: Arc<State>, request: Request<Incoming>) -> Response<DemoBody> {
    let (parts, body) = request.into_parts();
    let header = |name: &http::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut received = Received {
        http_method: parts.method.to_string(),
        session_id: header(&MCP_SESSION_ID),
        protocol_version: header(&MCP_PROTOCOL_VERSION),
        host: header(&HOST),
        authorization: header(&http::header::AUTHORIZATION),
        traceparent: header(&http::header::HeaderName::from_static("traceparent")),
        api_key: header(&http::header::HeaderName::from_static("x-api-key")),
        body: None,
        status: 0,
    };
    let response = if parts.uri.path() != "/mcp" {
        reply(StatusCode::NOT_FOUND, None, DemoBody::Full(Full::default()))
    } else if received.host.as_deref() != Some(state.authority.as_str()) {
        reply(
            StatusCode::MISDIRECTED_REQUEST,
            Some("text/plain"),
            DemoBody::Full(Full::new(Bytes::from_static(b"Invalid Host header"))),
        )
    } else {
        match parts.method {
            Method::POST => post(&state, &parts.headers, body, &mut received).await,
            Method::GET if !state.no_get_stream => get(&state, &parts.headers),
            Method::DELETE if !state.no_delete => delete(&state, &parts.headers),
            _ => reply(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                DemoBody::Full(Full::default()),
            ),
        }
    };
    received.status = response.status().as_u16();
    state.journal.record(received);
    response
}

fn accepts_both(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    accept.contains("application/json") && accept.contains("text/event-stream")
}

fn has_session_meta(value: &Value) -> bool {
    ["params", "result"].iter().any(|member| {
        value
            .get(member)
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(crate::mcp::meta::SESSION))
            .is_some()
    })
}

/// The session named by the request, or the transport's refusal.
fn session_of(state: &State, headers: &HeaderMap) -> Result<Arc<Session>, Box<Response<DemoBody>>> {
    let Some(id) = headers.get(&MCP_SESSION_ID).and_then(|v| v.to_str().ok()) else {
        return Err(Box::new(transport_error(
            StatusCode::BAD_REQUEST,
            -32000,
            "Bad Request: Mcp-Session-Id header is required",
        )));
    };
    let Some(session) = state.sessions.get(id).map(|s| s.clone()) else {
        return Err(Box::new(transport_error(
            StatusCode::NOT_FOUND,
            -32001,
            "Session not found",
        )));
    };
    let version = headers
        .get(&MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    if version != Some(session.protocol_version) {
        return Err(Box::new(transport_error(
            StatusCode::BAD_REQUEST,
            -32000,
            "Bad Request: MCP-Protocol-Version must be the negotiated version",
        )));
    }
    Ok(session)
}

async fn post(
    state: &Arc<State>,
    headers: &HeaderMap,
    body: Incoming,
    received: &mut Received,
) -> Response<DemoBody> {
    let is_json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return transport_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            -32000,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    if !accepts_both(headers) {
        return transport_error(
            StatusCode::NOT_ACCEPTABLE,
            -32000,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        );
    }
    let Ok(bytes) = Limited::new(body, 4 * 1024 * 1024).collect().await else {
        return transport_error(StatusCode::PAYLOAD_TOO_LARGE, -32000, "Payload too large");
    };
    let Ok(message) = serde_json::from_slice::<Value>(&bytes.to_bytes()) else {
        return transport_error(StatusCode::BAD_REQUEST, -32700, "Parse error");
    };
    received.body = Some(message.clone());
    if message.is_array() {
        return transport_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "Invalid Request: batches are not supported",
        );
    }
    if has_session_meta(&message) {
        return transport_error(
            StatusCode::BAD_REQUEST,
            -32602,
            "Invalid params: data-layer session _meta reached a 2025-11-25 server",
        );
    }
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").cloned();

    if method == Some("initialize") {
        if headers.contains_key(&MCP_SESSION_ID) {
            return transport_error(
                StatusCode::BAD_REQUEST,
                -32600,
                "Invalid Request: Server already initialized",
            );
        }
        return initialize(state, &message, id.unwrap_or(Value::Null));
    }

    let session = match session_of(state, headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    if method == Some("notifications/initialized") {
        session.initialized.store(true, Ordering::Release);
        return reply(StatusCode::ACCEPTED, None, DemoBody::Full(Full::default()));
    }
    if !session.initialized.load(Ordering::Acquire) && method != Some("ping") {
        return transport_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "Invalid Request: notifications/initialized has not been received",
        );
    }
    match (method, id) {
        // A client response to one of our server-to-client requests.
        (None, Some(id)) => {
            let waiting = session.pending.lock().remove(&id.to_string());
            match waiting {
                Some(waiter) => {
                    let _ = waiter.send(message);
                    reply(StatusCode::ACCEPTED, None, DemoBody::Full(Full::default()))
                }
                None => transport_error(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    "Invalid Request: no server request with this id is waiting",
                ),
            }
        }
        (Some(_), None) => reply(StatusCode::ACCEPTED, None, DemoBody::Full(Full::default())),
        (Some(method), Some(id)) => request(state, &session, method, id, &message),
        (None, None) => transport_error(StatusCode::BAD_REQUEST, -32600, "Invalid Request"),
    }
}

fn initialize(state: &State, message: &Value, id: Value) -> Response<DemoBody> {
    let requested = message
        .pointer("/params/protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let protocol_version = version::known_stateful(requested).unwrap_or(version::LATEST_STATEFUL);
    let mut raw = [0u8; 16];
    rand::fill(&mut raw);
    let session_id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    state.sessions.insert(
        session_id.clone(),
        Arc::new(Session {
            id: session_id.clone(),
            protocol_version,
            initialized: AtomicBool::new(false),
            counter: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
            next_request: AtomicU64::new(1),
            listeners: Mutex::new(Vec::new()),
            log_level: AtomicU8::new(LogLevel::Debug as u8),
        }),
    );
    let result = json!({
        "protocolVersion": protocol_version,
        "capabilities": {"tools": {"listChanged": true}, "logging": {}},
        "serverInfo": {"name": "mcp-session-proxy-demo", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    });
    let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut http = if state.always_sse {
        sse_once(&response)
    } else {
        json_reply(StatusCode::OK, &response)
    };
    if let Ok(value) = HeaderValue::from_str(&session_id) {
        http.headers_mut().insert(MCP_SESSION_ID.clone(), value);
    }
    http
}

/// What the demo server tells a client about itself at `initialize`.
const INSTRUCTIONS: &str = "The mcp-session-proxy demo server. Tools: echo, counter, slow, \
    sample, sleep, whoami, announce, change_tools. Log notifications honour logging/setLevel.";

fn sse_once(message: &Value) -> Response<DemoBody> {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(sse_event(message));
    reply(
        StatusCode::OK,
        Some("text/event-stream"),
        DemoBody::Channel(rx),
    )
}

fn request(
    state: &Arc<State>,
    session: &Arc<Session>,
    method: &str,
    id: Value,
    message: &Value,
) -> Response<DemoBody> {
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match tools::dispatch(state, session, method, &params) {
        Outcome::Result(result) => {
            let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
            if state.always_sse {
                sse_once(&response)
            } else {
                json_reply(StatusCode::OK, &response)
            }
        }
        Outcome::Error(code, text) => {
            let response =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text}});
            json_reply(StatusCode::OK, &response)
        }
        Outcome::Delayed(delay, result) => {
            let always_sse = state.always_sse;
            let (tx, rx) = mpsc::channel(1);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
                let bytes = if always_sse {
                    sse_event(&response)
                } else {
                    Bytes::from(response.to_string())
                };
                let _ = tx.send(bytes).await;
            });
            let content_type = if always_sse {
                "text/event-stream"
            } else {
                "application/json"
            };
            reply(StatusCode::OK, Some(content_type), DemoBody::Channel(rx))
        }
        Outcome::Stream(run) => {
            let (tx, rx) = mpsc::channel(16);
            let emitter = tools::Emitter::new(tx.clone());
            tokio::spawn(async move {
                let result = run(emitter).await;
                let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
                let _ = tx.send(sse_event(&response)).await;
            });
            reply(
                StatusCode::OK,
                Some("text/event-stream"),
                DemoBody::Channel(rx),
            )
        }
    }
}

fn get(state: &State, headers: &HeaderMap) -> Response<DemoBody> {
    if !headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
    {
        return transport_error(
            StatusCode::NOT_ACCEPTABLE,
            -32000,
            "Not Acceptable: Client must accept text/event-stream",
        );
    }
    let session = match session_of(state, headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    let (tx, rx) = mpsc::channel(16);
    // A priming event with an id, as 2025-11-25 servers send first.
    let _ = tx.try_send(Bytes::from_static(b"id: 0\ndata: \n\n"));
    session.listeners.lock().push(tx.clone());
    state.everyone.lock().push(tx);
    reply(
        StatusCode::OK,
        Some("text/event-stream"),
        DemoBody::Channel(rx),
    )
}

fn delete(state: &State, headers: &HeaderMap) -> Response<DemoBody> {
    let session = match session_of(state, headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    state.sessions.remove(&session.id);
    reply(StatusCode::OK, None, DemoBody::Full(Full::default()))
}
