//! The official MCP Inspector (`@modelcontextprotocol/inspector` 2.12.0, pinned in
//! `tests/interop/inspector/`) through its connection CLI, `mcpdo`, connected to the proxy
//! in front of the embedded demo server — what a new user does right after
//! `cargo run --release`:
//!
//!     mcpdo connect --transport http http://127.0.0.1:8080/mcp
//!
//! In its default legacy era the Inspector runs `initialize` and, because the demo
//! declares `logging`, `logging/setLevel` (a server that declares it and does not serve it
//! cannot be connected to at all); in its auto era it finds the 2026-07-28 protocol with
//! `server/discover` and asks for logs per request. Either way, tools, progress and log
//! notifications must work.
//!
//! Each test runs its own proxy and its own private `mcpdo` daemon (`mcpdo private`), with
//! a fresh `HOME` for the Inspector's catalog and secrets; the daemon is stopped at the
//! end, and killed (by its environment marker) if the test fails first.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::inspector::Mcpdo;
use mcp_session_proxy::config::{Config, Target};
use mcp_session_proxy::{Running, start};
use serde_json::Value;

/// The proxy as `cargo run --release` starts it (no upstream: the embedded demo server),
/// on a free loopback port.
async fn proxy_in_front_of_the_demo() -> Running {
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.shutdown_grace = Duration::from_secs(1);
    assert_eq!(config.upstream.target, Target::Embedded);
    start(config).await.unwrap()
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
}

fn tool_names(list: &Value) -> Vec<&str> {
    list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {list}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect()
}

const DEMO_TOOLS: [&str; 8] = [
    "echo",
    "counter",
    "slow",
    "sample",
    "sleep",
    "whoami",
    "announce",
    "change_tools",
];

/// What the Inspector connected to `url` shows in either era: the demo server by name,
/// its tools, an echo. The connection as `connections/show` tells it, and the echo.
async fn sees_the_demo(mcpdo: &Mcpdo, url: &str) -> (Value, Value) {
    let shown = mcpdo.on(url, &["connections/show"]).await;
    assert_eq!(
        shown["serverInfo"]["name"], "mcp-session-proxy-demo",
        "{shown}"
    );
    assert_eq!(
        tool_names(&mcpdo.on(url, &["tools/list"]).await),
        DEMO_TOOLS
    );
    let echoed = mcpdo.on(url, &["tools/call", "echo", "msg:=hi"]).await;
    assert_eq!(text_of(&echoed), "hi", "{echoed}");
    (shown, echoed)
}

#[tokio::test]
async fn the_inspector_connects_in_its_legacy_era_and_sets_the_log_level() {
    let proxy = proxy_in_front_of_the_demo().await;
    let url = proxy.url();
    let mcpdo = Mcpdo::new("inspector-legacy").await;

    // Exactly the command a user types (the default era is legacy).
    let connected = mcpdo.json(&["connect", "--transport", "http", &url]).await;
    assert_eq!(connected["protocolEra"], "legacy", "{connected}");
    let (shown, _) = sees_the_demo(&mcpdo, &url).await;
    assert_eq!(shown["protocolVersion"], "2025-11-25", "{shown}");
    assert!(shown["capabilities"]["logging"].is_object(), "{shown}");
    assert_eq!(
        text_of(&mcpdo.on(&url, &["tools/call", "counter"]).await),
        "1"
    );
    assert_eq!(
        text_of(&mcpdo.on(&url, &["tools/call", "counter"]).await),
        "2",
        "the Inspector's calls share one upstream session"
    );

    // The log level decides which log notifications reach the Inspector.
    let tail = mcpdo.tail(&url);
    // The tail is listening once a log of a one-step run arrives.
    let mut ready = false;
    for _ in 0..20 {
        mcpdo.on(&url, &["tools/call", "slow", "steps:=1"]).await;
        if tail.logs().iter().any(|(_, d)| d == "step 1 of 1") {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ready, "logging/tail printed nothing: {:?}", tail.logs());
    assert_eq!(
        mcpdo.on(&url, &["logging/setLevel", "warning"]).await,
        serde_json::json!({})
    );
    let quiet = mcpdo
        .on(&url, &["tools/call", "slow", "steps:=2", "interval_ms:=1"])
        .await;
    assert_eq!(text_of(&quiet), "done after 2 steps", "{quiet}");
    mcpdo.on(&url, &["logging/setLevel", "info"]).await;
    mcpdo
        .on(&url, &["tools/call", "slow", "steps:=3", "interval_ms:=1"])
        .await;
    let logs = tail.until("step 3 of 3").await;
    assert!(
        !logs.iter().any(|(_, data)| data.ends_with("of 2")),
        "info logs passed while the level was warning: {logs:?}"
    );
    let last_three: Vec<&(String, String)> = logs.iter().rev().take(3).rev().collect();
    assert_eq!(
        last_three,
        [
            &("info".to_owned(), "step 1 of 3".to_owned()),
            &("info".to_owned(), "step 2 of 3".to_owned()),
            &("info".to_owned(), "step 3 of 3".to_owned()),
        ]
    );

    let disconnected = mcpdo.json(&["disconnect", &url]).await;
    assert!(disconnected.is_object(), "{disconnected}");
    mcpdo.stop().await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_inspector_connects_in_its_auto_era_as_a_2026_client() {
    let proxy = proxy_in_front_of_the_demo().await;
    let url = proxy.url();
    let mcpdo = Mcpdo::new("inspector-auto").await;

    let connected = mcpdo
        .json(&["connect", "--era", "auto", "--transport", "http", &url])
        .await;
    assert_eq!(connected["protocolEra"], "modern", "{connected}");
    let (shown, echoed) = sees_the_demo(&mcpdo, &url).await;
    assert_eq!(shown["protocolVersion"], "2026-07-28", "{shown}");
    assert_eq!(
        shown["supportedVersions"],
        serde_json::json!(["2026-07-28"])
    );
    assert_eq!(
        echoed["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcp-session-proxy-demo",
        "{echoed}"
    );

    // Logs arrive per request (the Inspector asks for debug and up in each request's
    // _meta), on the request's own stream.
    let tail = mcpdo.tail(&url);
    let mut seen = false;
    for _ in 0..20 {
        let done = mcpdo
            .on(&url, &["tools/call", "slow", "steps:=2", "interval_ms:=1"])
            .await;
        assert_eq!(text_of(&done), "done after 2 steps", "{done}");
        if tail.logs().iter().any(|(_, d)| d == "step 2 of 2") {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen, "no log reached logging/tail: {:?}", tail.logs());

    mcpdo.stop().await;
    proxy.shutdown().await;
}
