//! The real proxy in front of the FastMCP fixture (`tests/interop/fastmcp_server.py`,
//! official Python SDK 1.x). FastMCP answers 421 to a `Host` that is not its own
//! loopback authority, so every passing call here also proves the proxy sends the
//! upstream its own `Host`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::{Duration, Instant};

use common::assert::{assert_session_not_found, check_progress, check_session_meta};
use common::interop::Interop;
use common::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

#[tokio::test]
async fn echo_and_per_session_counters() {
    let h = Interop::fastmcp(&[]).await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    assert_ne!(a.session_id(), b.session_id());

    let echoed = a.call_tool("echo", json!({"msg": "hi"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "hi", "{echoed}");
    assert_eq!(echoed["result"]["isError"], false, "{echoed}");
    check_session_meta(&echoed, a.session_id());

    for expected in ["1", "2", "3"] {
        assert_eq!(
            a.tool_text("counter", json!({})).await,
            expected,
            "session A"
        );
    }
    assert_eq!(
        b.tool_text("counter", json!({})).await,
        "1",
        "session B has its own counter"
    );
    assert_eq!(
        a.tool_text("counter", json!({})).await,
        "4",
        "session A kept its counter"
    );

    let who_a = a.tool_text("whoami", json!({})).await;
    let who_b = b.tool_text("whoami", json!({})).await;
    assert!(
        who_a.len() == 32 && who_a.chars().all(|c| c.is_ascii_hexdigit()),
        "FastMCP session ids are 32 hex digits: {who_a:?}"
    );
    assert_ne!(
        who_a, who_b,
        "two data-layer sessions share one upstream session"
    );
    assert_ne!(
        who_a,
        a.session_id(),
        "the upstream must see its own session id"
    );
    assert_eq!(
        a.tool_text("whoami", json!({})).await,
        who_a,
        "A stays on one upstream session"
    );
    h.stop().await;
}

#[tokio::test]
async fn upstream_gets_its_own_host_whatever_the_client_sent() {
    let h = Interop::fastmcp(&[]).await;
    let mut c = h.client();
    c.create().await;
    // A client reaching the proxy under a public name. First the premise: sent straight
    // to FastMCP, that Host is refused.
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("mcp.example.com"));
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "interop-test", "version": "0.0.1"},
        },
    });
    let direct = post_json(&c.http, &h.server.url(), &initialize, &headers).await;
    assert_eq!(
        direct.status, 421,
        "FastMCP should refuse a foreign Host: {}",
        direct.text
    );

    // Through the proxy the same Host works: the upstream gets its own authority — on
    // an old client's way through, untouched otherwise (also with `Connection:
    // keep-alive`, as Node's fetch and httpx send it: its fields are taken off the
    // client's, whose `Host` is replaced where it lies), ...
    let mut fetch_like = headers.clone();
    fetch_like.insert("connection", HeaderValue::from_static("keep-alive"));
    fetch_like.insert("user-agent", HeaderValue::from_static("node"));
    for (client, sent) in [("bare", &headers), ("fetch-like", &fetch_like)] {
        let passed = post_json(&c.http, &c.url, &initialize, sent).await;
        assert_eq!(passed.status, 200, "{client}: {}", passed.text);
        // FastMCP's own session id (the proxy's, for an old client it serves itself, is
        // not 32 hex digits): the request went through as it came.
        let issued = passed.header("mcp-session-id").unwrap_or_default();
        assert!(
            issued.len() == 32 && issued.chars().all(|c| c.is_ascii_hexdigit()),
            "the {client} old client's initialize reached FastMCP: {issued:?} {}",
            passed.text
        );
    }
    // ... and in a data-layer session.
    headers.insert(
        "mcp-session-id",
        HeaderValue::from_str(c.session_id()).unwrap(),
    );
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": in_session(json!({"name": "echo", "arguments": {"msg": "host"}}), c.session_id(), None),
    });
    let reply = post_json(&c.http, &c.url, &body, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let message = final_message(&reply);
    assert_eq!(message["result"]["content"][0]["text"], "host", "{message}");
    check_session_meta(&message, c.session_id());
    h.stop().await;
}

#[tokio::test]
async fn delete_ends_the_upstream_session() {
    let h = Interop::fastmcp(&[]).await;
    let mut c = h.client();
    c.create().await;
    let upstream_id = c.tool_text("whoami", json!({})).await;

    let deleted = c.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.json()["result"], json!({}), "{}", deleted.text);

    // Straight to the upstream with the id the proxy used: FastMCP no longer knows it.
    let mut headers = HeaderMap::new();
    headers.insert(
        "mcp-session-id",
        HeaderValue::from_str(&upstream_id).unwrap(),
    );
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    let direct = post_json(
        &c.http,
        &h.server.url(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        &headers,
    )
    .await;
    assert_eq!(
        direct.status, 404,
        "the upstream session outlived sessions/delete: {}",
        direct.text
    );

    let again = c.delete().await;
    assert_eq!(again.error_code(), Some(-32043), "{}", again.text);
    h.stop().await;
}

#[tokio::test]
async fn progress_notifications_stream_through_before_the_stamped_result() {
    let h = Interop::fastmcp(&[]).await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();

    let response = c
        .request_streaming(
            "tools/call",
            json!({
                "name": "slow",
                "arguments": {"steps": 3, "delay_ms": 300},
                "_meta": {"progressToken": "slow-1"},
            }),
        )
        .await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let messages = EventReader::new(response).all_timed().await;

    let progress: Vec<&(Instant, Value)> = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(
        progress.len(),
        3,
        "want 3 progress notifications, got {messages:?}"
    );
    check_progress(&progress, "slow-1");

    let final_index = messages
        .iter()
        .position(|(_, m)| m.get("method").is_none() && m.get("id").is_some())
        .unwrap_or_else(|| panic!("no final response in {messages:?}"));
    let (done_at, done) = &messages[final_index];
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
    check_session_meta(done, &id);
    assert!(
        messages[..final_index]
            .iter()
            .filter(|(_, m)| m["method"] == "notifications/progress")
            .count()
            == 3,
        "every progress notification comes before the result"
    );
    let lead = done_at.duration_since(progress[0].0);
    assert!(
        lead >= Duration::from_millis(200),
        "the first progress arrived only {lead:?} before the result: not streamed"
    );
    h.stop().await;
}

#[tokio::test]
async fn json_response_mode() {
    let h = Interop::fastmcp(&["--json-response"]).await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "json"}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let content_type = reply.header("content-type").unwrap_or("");
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}: {}",
        reply.text
    );
    assert_eq!(reply.header("mcp-session-id"), Some(id.as_str()));
    let message = reply.json();
    assert_eq!(message["result"]["content"][0]["text"], "json", "{message}");
    let first_state = check_session_meta(&message, &id);

    let listed = c.request("tools/list", json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let listed = listed.json();
    assert_ne!(
        check_session_meta(&listed, &id),
        first_state,
        "state must change"
    );
    h.stop().await;
}

#[tokio::test]
async fn upstream_forgetting_the_session_is_session_not_found() {
    // The SDK ends a session once no request has been in flight for the idle timeout
    // (the countdown restarts when the last request completes).
    let h = Interop::fastmcp(&["--session-idle-timeout=1"]).await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();
    assert_eq!(c.tool_text("echo", json!({"msg": "alive"})).await, "alive");

    tokio::time::sleep(Duration::from_millis(2500)).await;

    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "late"}}),
        )
        .await;
    assert_session_not_found(&reply, &id);
    // The proxy forgot it too: never silently attached to some new upstream session.
    let reply = c.request("tools/list", json!({})).await;
    assert_session_not_found(&reply, &id);

    let mut fresh = h.client();
    fresh.create().await;
    assert_ne!(fresh.session_id(), id);
    assert_eq!(
        fresh.tool_text("echo", json!({"msg": "again"})).await,
        "again"
    );
    h.stop().await;
}

#[tokio::test]
async fn resource_and_prompt_through_the_session() {
    let h = Interop::fastmcp(&[]).await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();

    let reply = c
        .request("resources/read", json!({"uri": "fixture://hello"}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let read = final_message(&reply);
    assert_eq!(
        read["result"]["contents"][0]["uri"], "fixture://hello",
        "{read}"
    );
    assert_eq!(
        read["result"]["contents"][0]["text"], "hello from fastmcp fixture",
        "{read}"
    );
    check_session_meta(&read, &id);

    let reply = c
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let prompt = final_message(&reply);
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"], "Please greet Ada.",
        "{prompt}"
    );
    check_session_meta(&prompt, &id);
    h.stop().await;
}

#[tokio::test]
async fn an_upstream_that_issues_no_session_id_still_serves_data_layer_sessions() {
    // FastMCP's stateless_http mode answers initialize without Mcp-Session-Id (allowed by
    // 2025-11-25); the proxy then keeps the data-layer session itself and sends no
    // Mcp-Session-Id upstream.
    let h = Interop::fastmcp(&["--stateless-http"]).await;
    let mut a = h.client();
    a.create().await;
    let id = a.session_id().to_owned();
    let echoed = a.call_tool("echo", json!({"msg": "no id"})).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "no id", "{echoed}");
    check_session_meta(&echoed, &id);
    assert_eq!(
        a.tool_text("whoami", json!({})).await,
        "",
        "the upstream saw no Mcp-Session-Id"
    );
    let deleted = a.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    let after = a.request("tools/list", json!({})).await;
    assert_session_not_found(&after, &id);
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_server_loses_its_sessions_and_the_proxy_says_so() {
    // FastMCP (the Python SDK 1.x) answers a session it does not know with HTTP 404.
    let server = common::interop::fastmcp(&[]).await;
    let call = json!({"name": "echo", "arguments": {"msg": "hi"}});
    let server = common::interop::a_restart_loses_sessions(server, call, |port| {
        common::interop::fastmcp_on(port, &[])
    })
    .await;
    drop(server);
}
