//! The strict legacy server the other tests lean on (`demo`, in its recording mode) is
//! itself held to the 2025-11-25 rules a real server enforces: if it let a wrong request
//! through, a wrong rewrite by the proxy would pass unnoticed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use common::*;
use mcp_session_proxy::demo::{DemoOptions, DemoServer};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

async fn demo() -> DemoServer {
    DemoServer::start(DemoOptions {
        record: true,
        ..DemoOptions::default()
    })
    .await
    .unwrap()
}

fn headers(session: Option<&str>, version: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(s) = session {
        h.insert("mcp-session-id", HeaderValue::from_str(s).unwrap());
    }
    if let Some(v) = version {
        h.insert("mcp-protocol-version", HeaderValue::from_str(v).unwrap());
    }
    h
}

/// Opens a session with `initialize`; returns its id (not yet initialized) and the
/// `InitializeResult`.
async fn initialize(server: &DemoServer) -> (String, Value) {
    let reply = post_json(
        &http_client(),
        &server.url(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "strict-test", "version": "1"}}}),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let result = reply.json()["result"].clone();
    assert_eq!(result["protocolVersion"], "2025-11-25");
    (reply.header("mcp-session-id").unwrap().to_owned(), result)
}

/// Sends `notifications/initialized` in `session`; the headers its requests carry.
async fn initialized(server: &DemoServer, session: &str) -> HeaderMap {
    let h = headers(Some(session), Some("2025-11-25"));
    let note = post_json(
        &http_client(),
        &server.url(),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &h,
    )
    .await;
    assert_eq!(note.status, 202, "{}", note.text);
    h
}

fn list() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
}

#[tokio::test]
async fn a_request_without_a_session_id_is_400() {
    let server = demo().await;
    let reply = post_json(&http_client(), &server.url(), &list(), &HeaderMap::new()).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.text.contains("Mcp-Session-Id"), "{}", reply.text);
}

#[tokio::test]
async fn an_unknown_session_id_is_404() {
    let server = demo().await;
    let reply = post_json(
        &http_client(),
        &server.url(),
        &list(),
        &headers(Some("no-such-session"), Some("2025-11-25")),
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.text);
}

#[tokio::test]
async fn calls_before_notifications_initialized_are_refused() {
    let server = demo().await;
    let (session, _) = initialize(&server).await;
    let http = http_client();
    let h = headers(Some(&session), Some("2025-11-25"));
    let early = post_json(&http, &server.url(), &list(), &h).await;
    assert_eq!(early.status, 400, "{}", early.text);
    assert!(early.text.contains("initialized"), "{}", early.text);
    let note = post_json(
        &http,
        &server.url(),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &h,
    )
    .await;
    assert_eq!(note.status, 202);
    let late = post_json(&http, &server.url(), &list(), &h).await;
    assert_eq!(late.status, 200, "{}", late.text);
}

#[tokio::test]
async fn a_wrong_protocol_version_header_is_400() {
    let server = demo().await;
    let (session, _) = initialize(&server).await;
    let reply = post_json(
        &http_client(),
        &server.url(),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &headers(Some(&session), Some("2025-06-18")),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
}

#[tokio::test]
async fn session_meta_reaching_the_server_is_refused_and_recorded() {
    let server = demo().await;
    let (session, _) = initialize(&server).await;
    let http = http_client();
    let h = initialized(&server, &session).await;
    let leaked = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
        "params": {"_meta": {SESSION_KEY: {"sessionId": "x"}}}});
    let reply = post_json(&http, &server.url(), &leaked, &h).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let seen = server
        .journal()
        .into_iter()
        .filter(|r| r.method() == Some("tools/list"))
        .count();
    assert_eq!(seen, 1, "the journal records what reached the server");
}

#[tokio::test]
async fn a_second_initialize_on_a_session_is_refused() {
    let server = demo().await;
    let (session, _) = initialize(&server).await;
    let reply = post_json(
        &http_client(),
        &server.url(),
        &json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "again", "version": "1"}}}),
        &headers(Some(&session), Some("2025-11-25")),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
}

/// What the demo declares, it serves: `logging` means `logging/setLevel` works, and the
/// level decides which `notifications/message` the session gets (2025-11-25, "Logging").
#[tokio::test]
async fn logging_set_level_is_served_and_filters_log_messages() {
    let server = demo().await;
    let (session, result) = initialize(&server).await;
    assert!(result["capabilities"]["logging"].is_object(), "{result}");
    let http = http_client();
    let h = initialized(&server, &session).await;
    let set_level = |id: i64, level: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel",
               "params": {"level": level}})
    };
    let slow = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"steps": 2, "interval_ms": 1},
            "_meta": {"progressToken": "t"}}})
    };
    let methods = |reply: &Reply| -> Vec<String> {
        reply
            .events()
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    };

    // Before any setLevel: every level.
    let all = post_json(&http, &server.url(), &slow(2), &h).await;
    assert_eq!(
        methods(&all),
        [
            "notifications/progress",
            "notifications/message",
            "notifications/progress",
            "notifications/message"
        ],
        "{}",
        all.text
    );

    // warning: the info messages stop, progress goes on.
    let set = post_json(&http, &server.url(), &set_level(3, "warning"), &h).await;
    assert_eq!(set.status, 200, "{}", set.text);
    assert_eq!(
        set.json(),
        json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
        "{}",
        set.text
    );
    let quiet = post_json(&http, &server.url(), &slow(4), &h).await;
    assert_eq!(
        methods(&quiet),
        ["notifications/progress", "notifications/progress"],
        "{}",
        quiet.text
    );

    // info again: they are back, at level info.
    post_json(&http, &server.url(), &set_level(5, "info"), &h).await;
    let back = post_json(&http, &server.url(), &slow(6), &h).await;
    let logs: Vec<Value> = back
        .events()
        .into_iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 2, "{}", back.text);
    assert_eq!(logs[0]["params"]["level"], "info", "{}", back.text);
    assert_eq!(logs[0]["params"]["data"], "step 1 of 2", "{}", back.text);

    // An unknown level is invalid params, naming the levels.
    let bad = post_json(&http, &server.url(), &set_level(7, "verbose"), &h).await;
    assert_eq!(bad.error_code(), Some(-32602), "{}", bad.text);
    let message = bad.json()["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        message,
        "Invalid params: level must be one of debug, info, notice, warning, error, critical, \
         alert, emergency"
    );
}
