//! `Mcp-Param-*` headers (MCP 2026-07-28, "Custom Headers from Tool Parameters",
//! SEP-2243) on the requests the proxy frames as 2026-07-28 for clients that are not: a
//! tool whose `inputSchema` marks an argument with `x-mcp-header` is refused (400, -32020)
//! by a modern server unless the call mirrors that argument into `Mcp-Param-{Name}`.
//!
//! - Before the TypeScript SDK 2.x server, modern-only (its `forecast` tool marks
//!   `region` and `days`; the SDK checks the headers before the tool runs): a data-layer
//!   session and an old client through the bridge call it — before any `tools/list` (the
//!   proxy lists the tools itself on the first refusal) and after one passed through
//!   (learned from it) — with plain and base64-encoded values; a client's own
//!   `Mcp-Param-*` header does not reach the server, the body decides.
//! - Before a recording server that refuses every call with -32020: the proxy lists the
//!   tools once and sends the call once more, then passes the refusal on as it came (not a
//!   502), and does so again for every call — never a loop.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use common::assert::text_of;
use common::peers::{Ts2Mode, ts2_http};
use common::{LegacyClient, SessionClient, config_for, final_message, post_json};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mcp_session_proxy::start;
use mcp_session_proxy::upstream::Era;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const LEGACY: &str = "2025-11-25";

fn forecast(region: &str, days: u64) -> Value {
    json!({"region": region, "days": days})
}

fn said(region: &str, days: u64) -> String {
    format!("forecast for {region}: sunny for {days} day(s)")
}

#[tokio::test]
async fn a_data_layer_session_calls_a_tool_with_header_arguments_on_a_modern_server() {
    let server = ts2_http(Ts2Mode::Reject).await;
    let proxy = start(config_for(&server.url())).await.unwrap();
    let mut c = SessionClient::new(proxy.url());
    c.create().await;

    // No tools/list yet: refused for the missing header, listed, sent again.
    let done = c.call_tool("forecast", forecast("north", 3)).await;
    assert_eq!(text_of(&done), said("north", 3), "{done}");
    // A value that travels base64-encoded (non-ASCII), and one with a space.
    let done = c.call_tool("forecast", forecast("Zürich", 2)).await;
    assert_eq!(text_of(&done), said("Zürich", 2), "{done}");
    let done = c.call_tool("forecast", forecast("north east", 1)).await;
    assert_eq!(text_of(&done), said("north east", 1), "{done}");

    // The client's own header disagrees with its body: the proxy's, from the body, goes.
    let mut headers = c.headers();
    headers.insert("mcp-param-region", "south".parse().unwrap());
    let params = json!({"name": "forecast", "arguments": forecast("west", 4)});
    let body = c.message(json!(7), "tools/call", params);
    let reply = post_json(&c.http, &c.url, &body, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(text_of(&final_message(&reply)), said("west", 4));

    // A second session learns nothing new: a tools/list through it is read as it passes.
    let mut other = SessionClient::new(proxy.url());
    other.create().await;
    let listed = other.request("tools/list", json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let done = other.call_tool("forecast", forecast("east", 5)).await;
    assert_eq!(text_of(&done), said("east", 5), "{done}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_old_client_calls_a_tool_with_header_arguments_through_the_bridge() {
    let server = ts2_http(Ts2Mode::Reject).await;
    let proxy = start(config_for(&server.url())).await.unwrap();
    let old = LegacyClient::connect(proxy.url(), LEGACY).await;
    assert!(old.session.starts_with("mcps_"), "bridged: {}", old.session);

    // Before any tools/list.
    let done = old.call(1, "forecast", forecast("north", 3)).await;
    assert_eq!(text_of(&done), said("north", 3), "{done}");
    // After one, through the bridge (learned from its answer), with an encoded value.
    let listed = old
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await;
    let tools = final_message(&listed)["result"]["tools"].clone();
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "forecast"),
        "{}",
        listed.text
    );
    let done = old.call(3, "forecast", forecast("Zürich", 2)).await;
    assert_eq!(text_of(&done), said("Zürich", 2), "{done}");
    proxy.shutdown().await;
}

// === a server that refuses every call ===

/// What the recording server received: each request's method and its `Mcp-Param-Region`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A 2026-07-28 server whose one tool marks `region` with `x-mcp-header`, and that refuses
/// every `tools/call` with 400 -32020, as a server does whose tools changed under the
/// proxy's feet. Stopped when the test's runtime ends.
async fn refusing_server() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = Seen::default();
    let recorded = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let recorded = recorded.clone();
                    async move { Ok::<_, Infallible>(refuse(request, &recorded).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, seen)
}

async fn refuse(request: Request<hyper::body::Incoming>, seen: &Seen) -> Response<Full<Bytes>> {
    let region = request
        .headers()
        .get("mcp-param-region")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let method = message["method"].as_str().unwrap_or("").to_owned();
    seen.lock().push((method.clone(), region));
    let id = message["id"].clone();
    let (status, answer) = match method.as_str() {
        "tools/list" => (
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete", "tools": [
                {"name": "forecast", "inputSchema": {"type": "object", "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"}}}}]}}),
        ),
        "tools/call" => (
            StatusCode::BAD_REQUEST,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32020,
                "message": "Bad Request: the request headers and body disagree"}}),
        ),
        _ => (
            StatusCode::BAD_REQUEST,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
        ),
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(answer.to_string())))
        .unwrap()
}

#[tokio::test]
async fn a_refusal_that_persists_is_retried_once_and_reaches_the_client_as_it_came() {
    let (url, seen) = refusing_server().await;
    let mut config = config_for(&url);
    config.upstream.era = Some(Era::Modern);
    let proxy = start(config).await.unwrap();
    let mut c = SessionClient::new(proxy.url());
    c.create().await;
    for round in 0..2 {
        seen.lock().clear();
        let reply = c
            .request(
                "tools/call",
                json!({"name": "forecast", "arguments": {"region": "north"}}),
            )
            .await;
        assert_eq!(reply.status, 400, "{}", reply.text);
        let error = &final_message(&reply)["error"];
        assert_eq!(error["code"], -32020, "{}", reply.text);
        let seen = seen.lock().clone();
        let region = Some("north".to_owned());
        let expected = [
            // Before the first listing the proxy knows nothing of the tool.
            ("tools/call", if round == 0 { None } else { region.clone() }),
            ("tools/list", None),
            ("tools/call", region.clone()),
        ];
        let expected: Vec<(String, Option<String>)> = expected
            .into_iter()
            .map(|(m, r)| (m.to_owned(), r))
            .collect();
        assert_eq!(seen, expected, "round {round}");
    }
    proxy.shutdown().await;
}
