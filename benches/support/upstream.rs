//! The fast legacy upstream: a minimal but correct 2025-11-25 Streamable HTTP server
//! (hyper 1, HTTP/1.1 keep-alive) that answers in microseconds, so that what the
//! benchmark measures is the hop in front of it.
//!
//! - `POST /mcp` `initialize` → an `InitializeResult` and a fresh `Mcp-Session-Id`;
//!   every later message must carry a known one (404 otherwise, 400 without one).
//! - notifications and client responses → 202.
//! - `tools/call` → `{"content":[{"type":"text","text":"ok"}]}` as JSON, or, for the tool
//!   `sse`, as a `text/event-stream` with that one response event.
//! - `DELETE /mcp` ends the session; `GET /mcp` → 405 (no listen stream offered).
//! - `GET /stats` → `{"opened":N,"ended":N,"live":N}`: sessions opened by `initialize`,
//!   ended by `DELETE`, open now (what the soak benchmark reads).
//! - A message whose `params._meta` still holds `io.modelcontextprotocol/session` is
//!   refused with 400: that key must never reach a legacy server, so every successful
//!   call through the proxy proves the proxy stripped it.
//!
//! It runs as its own process (the benchmark binary with `MCP_BENCH_ROLE=upstream`),
//! prints `READY <port>` and exits when its standard input closes (its parent died).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufRead as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use dashmap::DashMap;
use http::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;

const PROTOCOL_VERSION: &str = "2025-11-25";
const KNOWN_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
const SESSION_KEY: &str = "io.modelcontextprotocol/session";
const MCP_SESSION_ID: &str = "mcp-session-id";
const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";

struct State {
    sessions: DashMap<Box<str>, ()>,
    next: AtomicU64,
    /// Sessions ended by `DELETE`.
    ended: AtomicU64,
    salt: u64,
}

/// A JSON-RPC message as both bench upstreams read it.
#[derive(Deserialize)]
pub(super) struct Envelope<'a> {
    #[serde(borrow)]
    pub(super) jsonrpc: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<HashMap<Cow<'a, str>, &'a RawValue>>,
}

/// Runs an upstream instead of the benchmark when this binary was started as one
/// (`MCP_BENCH_ROLE=upstream`: this one; `modern-upstream`: `super::modern`'s; `floor`:
/// the floor hop, `super::floor`; `floor-fields`, `floor-fields-raw`, `floor-uring`,
/// `floor-monoio`, `floor-tokio-uring`: its variants, `super::floor`'s submodules; by
/// `procs::spawn_upstream`, `procs::spawn_modern_upstream`, `procs::spawn_floor`,
/// `procs::spawn_floor_on`); returns otherwise.
pub fn serve_if_asked() {
    match std::env::var("MCP_BENCH_ROLE").as_deref() {
        Ok("upstream") => run(serve()),
        Ok("modern-upstream") => run(super::modern::serve()),
        Ok("floor") => super::floor::run(),
        Ok("floor-fields") => super::floor::fields::run(super::floor::fields::Kept::Maps),
        Ok("floor-fields-raw") => super::floor::fields::run(super::floor::fields::Kept::AsRead),
        Ok("floor-uring") => super::floor::uring::run(super::floor::uring::Driver::IoUring),
        Ok("floor-monoio") => super::floor::uring::run(super::floor::uring::Driver::Epoll),
        Ok("floor-tokio-uring") => super::floor::tokio_uring::run(),
        _ => {}
    }
}

/// Runs an upstream's `serve` until standard input closes. Never returns.
pub(super) fn run(serve: impl std::future::Future<Output = ()>) -> ! {
    let threads = std::env::var("MCP_BENCH_UPSTREAM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("upstream runtime");
    // The parent holds our stdin; when it goes away (even killed), so do we.
    std::thread::spawn(|| {
        let mut line = String::new();
        let stdin = std::io::stdin();
        while stdin
            .lock()
            .read_line(&mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            line.clear();
        }
        std::process::exit(0);
    });
    runtime.block_on(serve);
    std::process::exit(0)
}

/// A loopback listener on a free port, announced to the parent as `READY <port>`.
pub(super) async fn listen() -> tokio::net::TcpListener {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("upstream bind");
    let port = listener.local_addr().expect("upstream addr").port();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {port}").expect("stdout");
    out.flush().expect("stdout");
    listener
}

async fn serve() {
    let listener = listen().await;
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);
    let state = Arc::new(State {
        sessions: DashMap::new(),
        next: AtomicU64::new(1),
        ended: AtomicU64::new(0),
        salt,
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&state, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

pub(super) fn reply(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Some(ct) = content_type {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    response
}

pub(super) fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    reply(status, None, Bytes::new())
}

/// A JSON-RPC error response (`id` raw, `null` when unknown).
pub(super) fn error(
    status: StatusCode,
    id: Option<&RawValue>,
    code: i32,
    message: &str,
) -> Response<Full<Bytes>> {
    let mut body = Vec::with_capacity(96 + message.len());
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.map_or("null", |id| id.get()).as_bytes());
    body.extend_from_slice(br#","error":{"code":"#);
    body.extend_from_slice(code.to_string().as_bytes());
    body.extend_from_slice(br#","message":"#);
    body.extend_from_slice(
        serde_json::to_string(message)
            .unwrap_or_default()
            .as_bytes(),
    );
    body.extend_from_slice(b"}}");
    reply(status, Some("application/json"), Bytes::from(body))
}

pub(super) fn result(id: &RawValue, result: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(40 + result.len());
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.get().as_bytes());
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(result);
    body.push(b'}');
    body
}

/// What a bench upstream answers.
type Reply = Response<Full<Bytes>>;

/// A message and its params as `P`, read from a request's `body`; or the 400 that refuses
/// it (-32700 not JSON, -32600 not JSON-RPC 2.0, -32602 params of another shape).
pub(super) fn parse<'b, P: Deserialize<'b>>(
    body: &'b [u8],
) -> Result<(Envelope<'b>, Option<P>), Box<Reply>> {
    let refuse = |id, code, message| Box::new(error(StatusCode::BAD_REQUEST, id, code, message));
    let Ok(message) = serde_json::from_slice::<Envelope<'_>>(body) else {
        return Err(refuse(None, -32700, "Parse error"));
    };
    if message.jsonrpc != "2.0" {
        return Err(refuse(message.id, -32600, "Invalid Request"));
    }
    let params = match message
        .params
        .map(|raw| serde_json::from_str::<P>(raw.get()))
    {
        None => None,
        Some(Ok(params)) => Some(params),
        Some(Err(_)) => return Err(refuse(message.id, -32602, "Invalid params")),
    };
    Ok((message, params))
}

pub(super) fn json(body: Vec<u8>) -> Response<Full<Bytes>> {
    reply(StatusCode::OK, Some("application/json"), Bytes::from(body))
}

pub(super) fn header<'r>(request: &'r Request<Incoming>, name: &str) -> Option<&'r str> {
    request.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn handle(state: &State, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() == Method::GET && request.uri().path() == "/stats" {
        let opened = state.next.load(Ordering::Relaxed) - 1;
        let ended = state.ended.load(Ordering::Relaxed);
        let live = state.sessions.len();
        let body = format!(r#"{{"opened":{opened},"ended":{ended},"live":{live}}}"#);
        return json(body.into_bytes());
    }
    if request.uri().path() != "/mcp" {
        return empty(StatusCode::NOT_FOUND);
    }
    if let Some(version) = header(&request, MCP_PROTOCOL_VERSION)
        && !KNOWN_VERSIONS.contains(&version)
    {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            -32600,
            "Unsupported MCP-Protocol-Version",
        );
    }
    match *request.method() {
        Method::POST => post(state, request).await,
        Method::DELETE => match header(&request, MCP_SESSION_ID) {
            None => error(
                StatusCode::BAD_REQUEST,
                None,
                -32600,
                "Bad Request: No valid session ID provided",
            ),
            Some(id) if state.sessions.remove(id).is_some() => {
                state.ended.fetch_add(1, Ordering::Relaxed);
                empty(StatusCode::OK)
            }
            Some(_) => error(StatusCode::NOT_FOUND, None, -32001, "Session not found"),
        },
        _ => {
            let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
            response
        }
    }
}

async fn post(state: &State, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let is_json = header(&request, CONTENT_TYPE.as_str())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            -32600,
            "Content-Type must be application/json",
        );
    }
    let accept = request
        .headers()
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        return error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            -32600,
            "Accept must list application/json and text/event-stream",
        );
    }
    let session = header(&request, MCP_SESSION_ID).map(str::to_owned);
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return empty(StatusCode::BAD_REQUEST),
    };
    let (message, params) = match parse::<Params<'_>>(&body) {
        Ok(parsed) => parsed,
        Err(refused) => return *refused,
    };
    if params
        .as_ref()
        .and_then(|p| p.meta.as_ref())
        .is_some_and(|meta| meta.contains_key(SESSION_KEY))
    {
        return error(
            StatusCode::BAD_REQUEST,
            message.id,
            -32602,
            "a data-layer session _meta reached the legacy upstream",
        );
    }
    let method = message.method.as_deref();
    if method == Some("initialize") {
        let Some(id) = message.id else {
            return error(
                StatusCode::BAD_REQUEST,
                None,
                -32600,
                "initialize must be a request",
            );
        };
        if session.is_some() {
            return error(
                StatusCode::BAD_REQUEST,
                Some(id),
                -32600,
                "initialize inside a session",
            );
        }
        let n = state.next.fetch_add(1, Ordering::Relaxed);
        let session_id = format!("{:016x}{n:016x}", state.salt);
        let mut response = json(result(
            id,
            br#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"bench-upstream","version":"1.0.0"}}"#,
        ));
        if let Ok(value) = HeaderValue::from_str(&session_id) {
            response.headers_mut().insert(MCP_SESSION_ID, value);
        }
        state.sessions.insert(session_id.into_boxed_str(), ());
        return response;
    }
    match session {
        None => {
            return error(
                StatusCode::BAD_REQUEST,
                message.id,
                -32600,
                "Bad Request: No valid session ID provided",
            );
        }
        Some(id) if !state.sessions.contains_key(id.as_str()) => {
            return error(
                StatusCode::NOT_FOUND,
                message.id,
                -32001,
                "Session not found",
            );
        }
        Some(_) => {}
    }
    let (Some(method), Some(id)) = (method, message.id) else {
        // A notification, or a response to a request of ours.
        return if message.method.is_some() || message.result.is_some() || message.error.is_some() {
            empty(StatusCode::ACCEPTED)
        } else {
            error(
                StatusCode::BAD_REQUEST,
                message.id,
                -32600,
                "Invalid Request",
            )
        };
    };
    match method {
        "tools/call" => match params.as_ref().and_then(|p| p.name.as_deref()) {
            Some("ok") => json(result(id, br#"{"content":[{"type":"text","text":"ok"}]}"#)),
            Some("sse") => {
                let message = result(id, br#"{"content":[{"type":"text","text":"ok"}]}"#);
                let mut event = Vec::with_capacity(message.len() + 24);
                event.extend_from_slice(b"event: message\ndata: ");
                event.extend_from_slice(&message);
                event.extend_from_slice(b"\n\n");
                reply(StatusCode::OK, Some("text/event-stream"), Bytes::from(event))
            }
            _ => error(StatusCode::OK, Some(id), -32602, "Unknown tool"),
        },
        "tools/list" => json(result(
            id,
            br#"{"tools":[{"name":"ok","inputSchema":{"type":"object"}},{"name":"sse","inputSchema":{"type":"object"}}]}"#,
        )),
        "ping" => json(result(id, b"{}")),
        _ => error(StatusCode::OK, Some(id), -32601, "Method not found"),
    }
}

/// The protocol version this upstream speaks (for the benchmark's direct client).
pub const VERSION: &str = PROTOCOL_VERSION;
