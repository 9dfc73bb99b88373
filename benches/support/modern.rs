//! The fast modern upstream: a minimal but correct modern-only MCP 2026-07-28 server over
//! Streamable HTTP (hyper 1, HTTP/1.1 keep-alive) that answers in microseconds, as
//! `super::upstream` is for 2025-11-25 — what the benchmark's era rows put behind the
//! proxy.
//!
//! - `POST /mcp` `initialize` → 400, -32022 with `data: {supported: ["2026-07-28"],
//!   requested}`: refused as a modern-only server refuses it (the TypeScript SDK 2.x with
//!   `legacy: 'reject'`), whatever headers it came with; no session is ever issued.
//! - Every other request is checked as MCP 2026-07-28 wants (per-request `_meta`, and the
//!   routing headers of its Streamable HTTP transport, SEP-2243), in this order: the
//!   `MCP-Protocol-Version` header (-32020 without it), `_meta`'s protocol version and
//!   client capabilities (-32602 without them), the version equal to the header (-32020)
//!   and `2026-07-28` (-32022), `Mcp-Method` equal to the method (-32020), and for
//!   `tools/call` a string `name` with `Mcp-Name` equal to it (-32020). Refusals are HTTP
//!   400. Header values are compared as sent (the bench's names are plain ASCII; a
//!   `=?base64?…?=` value would be refused, not decoded).
//! - `server/discover` → a `DiscoverResult`: `supportedVersions: ["2026-07-28"]`,
//!   `capabilities: {tools: {}}`, the identity in `_meta`, `resultType: "complete"`.
//! - `tools/call` → `{"resultType":"complete","content":[{"type":"text","text":"ok"}]}`
//!   as JSON, or, for the tool `sse`, as a `text/event-stream` with that one response
//!   event; `tools/list` → the two tools; any other method → -32601 (HTTP 404).
//! - notifications and client responses → 202. `GET` / `DELETE /mcp` → 405 (2026-07-28
//!   has no session to end and listens with a POST).
//! - `GET /stats` → `{"discovers":N,"calls":N}`: the `server/discover` requests and the
//!   `tools/call`s answered so far — the benchmark reads it around each measured window
//!   to show how often the proxy asks a server it already knows for its era.
//!
//! It runs as its own process (the benchmark binary with `MCP_BENCH_ROLE=modern-upstream`),
//! prints `READY <port>` and exits when its standard input closes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::upstream::{empty, error, header, json, listen, parse, reply, result};

/// The one version a modern-only server speaks.
pub const VERSION: &str = "2026-07-28";
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// 2026-07-28's HeaderMismatch, UnsupportedProtocolVersion.
const HEADER_MISMATCH: i32 = -32020;
const UNSUPPORTED_VERSION: i32 = -32022;

#[derive(Default)]
struct Counts {
    discovers: AtomicU64,
    calls: AtomicU64,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "protocolVersion")]
    protocol_version: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default, rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "io.modelcontextprotocol/clientCapabilities")]
    client_capabilities: Option<&'a RawValue>,
}

/// Serves until the process exits (see `super::upstream::run`).
pub async fn serve() {
    let listener = listen().await;
    let counts = Arc::new(Counts::default());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let counts = counts.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let counts = counts.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&counts, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A JSON-RPC error with `data` (raw JSON), HTTP 400.
fn refusal(id: Option<&RawValue>, code: i32, message: &str, data: &str) -> Response<Full<Bytes>> {
    let mut body = Vec::with_capacity(128 + message.len() + data.len());
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
    body.extend_from_slice(br#","data":"#);
    body.extend_from_slice(data.as_bytes());
    body.extend_from_slice(b"}}");
    reply(
        StatusCode::BAD_REQUEST,
        Some("application/json"),
        Bytes::from(body),
    )
}

/// The -32022 of a modern-only server: the versions it speaks, the one it was asked for.
fn unsupported(id: Option<&RawValue>, requested: Option<&RawValue>) -> Response<Full<Bytes>> {
    let requested = requested.map_or("null", |r| r.get());
    refusal(
        id,
        UNSUPPORTED_VERSION,
        "Unsupported protocol version",
        &format!(r#"{{"supported":["{VERSION}"],"requested":{requested}}}"#),
    )
}

fn mismatch(id: Option<&RawValue>, message: &str) -> Response<Full<Bytes>> {
    error(StatusCode::BAD_REQUEST, id, HEADER_MISMATCH, message)
}

/// A JSON string's value, if `raw` is one without escapes (all the bench sends).
fn plain_str(raw: &RawValue) -> Option<&str> {
    let s = raw.get().strip_prefix('"')?.strip_suffix('"')?;
    (!s.contains('\\')).then_some(s)
}

async fn handle(counts: &Counts, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() == Method::GET && request.uri().path() == "/stats" {
        let body = format!(
            r#"{{"discovers":{},"calls":{}}}"#,
            counts.discovers.load(Ordering::Relaxed),
            counts.calls.load(Ordering::Relaxed)
        );
        return json(body.into_bytes());
    }
    if request.uri().path() != "/mcp" {
        return empty(StatusCode::NOT_FOUND);
    }
    if request.method() != Method::POST {
        let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
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
    let accept = header(&request, ACCEPT.as_str()).unwrap_or("");
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        return error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            -32600,
            "Accept must list application/json and text/event-stream",
        );
    }
    let version_header = header(&request, "mcp-protocol-version").map(str::to_owned);
    let method_header = header(&request, "mcp-method").map(str::to_owned);
    let name_header = header(&request, "mcp-name").map(str::to_owned);
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return empty(StatusCode::BAD_REQUEST),
    };
    let (message, params) = match parse::<Params<'_>>(&body) {
        Ok(parsed) => parsed,
        Err(refused) => return *refused,
    };
    let (Some(method), Some(id)) = (message.method.as_deref(), message.id) else {
        // A notification, or a response: nothing to answer.
        return empty(StatusCode::ACCEPTED);
    };
    if method == "initialize" {
        // Modern-only: the 2025 handshake is refused, naming what is spoken instead.
        return unsupported(Some(id), params.as_ref().and_then(|p| p.protocol_version));
    }
    let Some(version_header) = version_header else {
        return mismatch(Some(id), "MCP-Protocol-Version header required");
    };
    let meta = params.as_ref().and_then(|p| p.meta.as_ref());
    let (Some(version), Some(capabilities)) = (
        meta.and_then(|m| m.protocol_version),
        meta.and_then(|m| m.client_capabilities),
    ) else {
        return refusal(
            Some(id),
            -32602,
            "Missing required _meta",
            &format!(r#"{{"missing":["{PROTOCOL_VERSION_KEY}","{CLIENT_CAPABILITIES_KEY}"]}}"#),
        );
    };
    let Some(version_text) = plain_str(version) else {
        return error(
            StatusCode::BAD_REQUEST,
            Some(id),
            -32602,
            "protocolVersion must be a string",
        );
    };
    if version_text != version_header {
        return mismatch(
            Some(id),
            "MCP-Protocol-Version header differs from _meta's protocolVersion",
        );
    }
    if version_text != VERSION {
        return unsupported(Some(id), Some(version));
    }
    if !capabilities.get().starts_with('{') {
        return error(
            StatusCode::BAD_REQUEST,
            Some(id),
            -32602,
            "clientCapabilities must be an object",
        );
    }
    if method_header.as_deref() != Some(method) {
        return mismatch(Some(id), "Mcp-Method header missing or not the method");
    }
    match method {
        "server/discover" => {
            counts.discovers.fetch_add(1, Ordering::Relaxed);
            json(result(
                id,
                br#"{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"bench-modern-upstream","version":"1.0.0"}}}"#,
            ))
        }
        "tools/call" => {
            let Some(name) = params.as_ref().and_then(|p| p.name).and_then(plain_str) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    Some(id),
                    -32602,
                    "tools/call needs a string name",
                );
            };
            if name_header.as_deref() != Some(name) {
                return mismatch(Some(id), "Mcp-Name header missing or not the tool's name");
            }
            counts.calls.fetch_add(1, Ordering::Relaxed);
            let answer = || {
                result(
                    id,
                    br#"{"resultType":"complete","content":[{"type":"text","text":"ok"}]}"#,
                )
            };
            match name {
                "ok" => json(answer()),
                "sse" => {
                    let message = answer();
                    let mut event = Vec::with_capacity(message.len() + 24);
                    event.extend_from_slice(b"event: message\ndata: ");
                    event.extend_from_slice(&message);
                    event.extend_from_slice(b"\n\n");
                    reply(StatusCode::OK, Some("text/event-stream"), Bytes::from(event))
                }
                _ => error(StatusCode::OK, Some(id), -32602, "Unknown tool"),
            }
        }
        "tools/list" => json(result(
            id,
            br#"{"resultType":"complete","tools":[{"name":"ok","inputSchema":{"type":"object"}},{"name":"sse","inputSchema":{"type":"object"}}]}"#,
        )),
        _ => error(StatusCode::NOT_FOUND, Some(id), -32601, "Method not found"),
    }
}

/// What the modern upstream at `addr` answered so far: (`server/discover`s, `tools/call`s),
/// from its `GET /stats`; `None` when it does not say.
pub fn stats(addr: std::net::SocketAddr) -> Option<(u64, u64)> {
    let (status, body) = super::procs::get(addr, "/stats").ok()?;
    let number = |key: &str| -> Option<u64> {
        let body = std::str::from_utf8(&body).ok()?;
        let at = body.find(key)? + key.len();
        let digits: String = body[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    (status == 200).then_some(())?;
    Some((number(r#""discovers":"#)?, number(r#""calls":"#)?))
}
