//! The data-layer session lifecycle through the proxy, as the data-layer sessions draft
//! ("Data-Layer Sessions for MCP") describes it: create, use, delete, expiry, the cap,
//! `state`, a lost or unreachable upstream, `require_session`, pass-through, and the
//! draft's test vectors verbatim. The strict demo server is the legacy upstream.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::{Duration, SystemTime};

use common::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

fn create_request(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create"})
}

fn header(name: &'static str, value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(name, HeaderValue::from_str(value).unwrap());
    headers
}

// === 1. sessions/create ===

#[tokio::test]
async fn create_answers_the_drafts_shape_and_opens_an_upstream_session() {
    let h = Harness::start().await;
    let reply = h.post(&create_request(1)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    let session = &body["result"]["session"];
    let keys: Vec<&String> = session.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["sessionId", "expiresAt", "state"]);
    assert_eq!(body["result"].as_object().unwrap().len(), 1);

    let id = session["sessionId"].as_str().unwrap();
    assert_eq!(reply.header("mcp-session-id"), Some(id));
    assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
    // At least 128 bits of randomness: 22 base64 characters beyond any fixed prefix.
    assert!(id.len() >= 5 + 22, "{id}");

    let expires = humantime::parse_rfc3339(session["expiresAt"].as_str().unwrap()).unwrap();
    let in_30_min = SystemTime::now() + Duration::from_secs(30 * 60);
    let skew = in_30_min
        .duration_since(expires)
        .unwrap_or_else(|e| e.duration());
    assert!(
        skew < Duration::from_secs(5),
        "expiresAt is not now + 30 min"
    );
    assert!(session["expiresAt"].as_str().unwrap().ends_with('Z'));
    assert!(!session["state"].as_str().unwrap().is_empty());

    let init = h.upstream_saw("initialize");
    assert_eq!(init.len(), 1);
    let params = &init[0].body.as_ref().unwrap()["params"];
    assert_eq!(params["protocolVersion"], "2025-11-25");
    assert_eq!(params["clientInfo"]["name"], "mcp-session-proxy");
    assert_eq!(params["capabilities"], json!({}));
    let initialized = h.upstream_saw("notifications/initialized");
    assert_eq!(initialized.len(), 1);
    assert_eq!(initialized[0].status, 202);
    assert!(initialized[0].session_id.is_some());
    assert_eq!(h.demo.live_sessions(), 1);
    h.stop().await;
}

#[tokio::test]
async fn create_passes_the_clients_info_and_capabilities_to_initialize() {
    let h = Harness::start().await;
    let reply = h
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create", "params": {"_meta": {
            "io.modelcontextprotocol/clientInfo": {"name": "my-client", "version": "9.9"},
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "roots": {"listChanged": true}}
        }}}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let init = h.upstream_saw("initialize");
    let params = &init[0].body.as_ref().unwrap()["params"];
    assert_eq!(
        params["clientInfo"],
        json!({"name": "my-client", "version": "9.9"})
    );
    assert_eq!(
        params["capabilities"],
        json!({"sampling": {}, "roots": {"listChanged": true}})
    );
    h.stop().await;
}

#[tokio::test]
async fn create_carrying_session_meta_is_refused() {
    let h = Harness::start().await;
    let reply = h
        .post(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "sessions/create",
            "params": in_session(json!({}), "sess-abc123", None)}),
        )
        .await;
    assert_eq!(reply.status, 400);
    let body = reply.json();
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32602);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sessions/create")
    );
    assert_eq!(
        body["error"]["data"]["key"],
        "_meta.io.modelcontextprotocol/session"
    );
    assert!(h.upstream_saw("initialize").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn create_with_non_object_client_info_is_refused() {
    let h = Harness::start().await;
    let reply = h
        .post(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create",
            "params": {"_meta": {"io.modelcontextprotocol/clientInfo": "me"}}}),
        )
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), Some(-32602));
    assert!(h.upstream_saw("initialize").is_empty());
    h.stop().await;
}

// === The data-layer sessions draft's test vectors, verbatim ===

/// The draft's valid creation response, with this proxy's values in place of the example's.
#[tokio::test]
async fn draft_vector_session_creation() {
    let h = Harness::start().await;
    let reply = post_raw(
        &h.http,
        &h.url(),
        br#"{"jsonrpc":"2.0","id":1,"method":"sessions/create"}"#.to_vec(),
        &HeaderMap::new(),
    )
    .await;
    let session = &reply.json()["result"]["session"];
    let expected = r#"{"jsonrpc":"2.0","id":1,"result":{"session":{"sessionId":"sess-abc123","expiresAt":"2026-03-01T00:00:00Z","state":"eyJrIjoidiJ9"}}}"#
        .replace("sess-abc123", session["sessionId"].as_str().unwrap())
        .replace("2026-03-01T00:00:00Z", session["expiresAt"].as_str().unwrap())
        .replace("eyJrIjoidiJ9", session["state"].as_str().unwrap());
    assert_eq!(reply.text, expected);
    h.stop().await;
}

#[tokio::test]
async fn draft_vector_session_usage() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let (id, state) = (c.session_id().to_owned(), c.state.clone().unwrap());
    let request = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"hi"},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-abc123","state":"eyJrIjoidiJ9"}}}}"#
        .replace("sess-abc123", &id)
        .replace("eyJrIjoidiJ9", &state);
    let reply = post_raw(&h.http, &h.url(), request.into_bytes(), &HeaderMap::new()).await;
    assert_eq!(reply.status, 200);
    let meta = session_meta(&reply.json()).clone();
    let new_state = meta["state"].as_str().unwrap();
    assert_ne!(new_state, state, "the state must be updated");
    let expected = r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-abc123","state":"eyJrIjoidjIifQ==","expiresAt":"2026-03-01T00:00:00Z"}}}}"#
        .replace("sess-abc123", &id)
        .replace("eyJrIjoidjIifQ==", new_state)
        .replace("2026-03-01T00:00:00Z", meta["expiresAt"].as_str().unwrap());
    assert_eq!(reply.text, expected);
    // What the legacy server got: the same request without the session, under the
    // proxy's own request id.
    let call = h.upstream_saw("tools/call");
    let mut got = call[0].body.clone().unwrap();
    assert!(got["id"].is_u64(), "the proxy's id: {got}");
    got["id"] = json!(2);
    assert_eq!(
        got,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"hi"}}})
    );
    h.stop().await;
}

#[tokio::test]
async fn draft_vector_session_not_found() {
    let h = Harness::start().await;
    let reply = post_raw(
        &h.http,
        &h.url(),
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-invalid"}}}}"#.to_vec(),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.text,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32043,"message":"Session not found","data":{"sessionId":"sess-invalid"}}}"#
    );
    assert!(h.upstream_saw("tools/call").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn draft_vector_session_deletion() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let request = r#"{"jsonrpc":"2.0","id":2,"method":"sessions/delete","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-a1b2c3d4e5f6"}}}}"#
        .replace("sess-a1b2c3d4e5f6", c.session_id());
    let reply = post_raw(&h.http, &h.url(), request.into_bytes(), &HeaderMap::new()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text, r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
    h.stop().await;
}

// === 2. Using a session ===

#[tokio::test]
async fn requests_reach_their_upstream_session_without_session_meta() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let upstream_id = c.tool_text("whoami", json!({})).await;
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "x"}, "_meta": {"progressToken": "keep-me"}}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let calls = h.upstream_saw("tools/call");
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.session_id.as_deref(), Some(upstream_id.as_str()));
        assert_eq!(call.protocol_version.as_deref(), Some("2025-11-25"));
        assert_eq!(
            call.host.as_deref(),
            Some(h.demo.local_addr().to_string().as_str())
        );
        assert_eq!(call.status, 200);
    }
    // The session key is gone; other _meta stays; an emptied _meta is dropped.
    assert_eq!(calls[0].body.as_ref().unwrap()["params"].get("_meta"), None);
    assert_eq!(
        calls[1].body.as_ref().unwrap()["params"]["_meta"],
        json!({"progressToken": "keep-me"})
    );
    h.stop().await;
}

#[tokio::test]
async fn every_response_carries_the_same_session_id_and_a_fresh_state() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let mut states = vec![c.state.clone().unwrap()];
    for _ in 0..3 {
        let message = c.call_tool("counter", json!({})).await;
        let meta = session_meta(&message);
        assert_eq!(meta["sessionId"], c.session_id());
        humantime::parse_rfc3339(meta["expiresAt"].as_str().unwrap()).unwrap();
        states.push(meta["state"].as_str().unwrap().to_owned());
    }
    let distinct: std::collections::HashSet<_> = states.iter().collect();
    assert_eq!(distinct.len(), states.len(), "{states:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_header_that_disagrees_with_meta_is_refused() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": in_session(json!({"name": "echo", "arguments": {"msg": "x"}}), c.session_id(), None)});
    let reply = post_json(
        &h.http,
        &h.url(),
        &body,
        &header("mcp-session-id", "mcps_someone-else"),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), Some(-32600));
    assert_eq!(reply.json()["id"], 5);
    assert!(h.upstream_saw("tools/call").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn the_header_alone_names_the_session() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let upstream_id = c.tool_text("whoami", json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"msg": "by header"}}});
    let reply = post_json(
        &h.http,
        &h.url(),
        &body,
        &header("mcp-session-id", c.session_id()),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let message = reply.json();
    assert_eq!(message["result"]["content"][0]["text"], "by header");
    assert_eq!(session_meta(&message)["sessionId"], c.session_id());
    let calls = h.upstream_saw("tools/call");
    assert_eq!(
        calls.last().unwrap().session_id.as_deref(),
        Some(upstream_id.as_str())
    );
    h.stop().await;
}

#[tokio::test]
async fn an_unknown_proxy_shaped_header_is_not_found() {
    let h = Harness::start().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let reply = post_json(
        &h.http,
        &h.url(),
        &body,
        &header("mcp-session-id", "mcps_nope"),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.json()["error"],
        json!({"code": -32043, "message": "Session not found", "data": {"sessionId": "mcps_nope"}})
    );
    h.stop().await;
}

// === 5. sessions/delete ===

#[tokio::test]
async fn delete_ends_the_upstream_session_and_every_later_use_is_not_found() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let upstream_id = c.tool_text("whoami", json!({})).await;
    assert_eq!(h.demo.live_sessions(), 1);

    let reply = c.delete().await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["result"], json!({}));
    assert_eq!(
        h.demo.live_sessions(),
        0,
        "the upstream session must be ended"
    );
    let deletes: Vec<_> = h
        .demo
        .journal()
        .into_iter()
        .filter(|r| r.http_method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].session_id.as_deref(), Some(upstream_id.as_str()));
    assert_eq!(deletes[0].status, 200);
    assert_eq!(h.proxy.live_sessions(), 0);

    for method in ["sessions/delete", "tools/list"] {
        let reply = c.request(method, json!({})).await;
        assert_eq!(reply.status, 404, "{method}");
        assert_eq!(reply.json()["error"]["code"], -32043, "{method}");
        assert_eq!(reply.json()["error"]["data"]["sessionId"], c.session_id());
    }
    h.stop().await;
}

#[tokio::test]
async fn http_delete_with_the_session_header_ends_the_session() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let response = h
        .http
        .delete(h.url())
        .header("mcp-session-id", c.session_id())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(h.demo.live_sessions(), 0);
    let reply = c.request("tools/list", json!({})).await;
    assert_eq!(reply.error_code(), Some(-32043));
    h.stop().await;
}

#[tokio::test]
async fn delete_without_a_session_is_invalid_params() {
    let h = Harness::start().await;
    let reply = h
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/delete"}))
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), Some(-32602));
    h.stop().await;
}

// === 6. Expiry ===

#[tokio::test]
async fn idle_sessions_expire_and_the_reaper_ends_them_upstream() {
    let h = Harness::with_config(|c| {
        c.session.idle_ttl = Duration::from_secs(1);
        c.session.reap_interval = Duration::from_millis(50);
    })
    .await;
    let mut c = h.client();
    let created = c.create().await;
    let expires =
        humantime::parse_rfc3339(created["result"]["session"]["expiresAt"].as_str().unwrap())
            .unwrap();
    assert!(expires <= SystemTime::now() + Duration::from_secs(2));
    assert_eq!(h.demo.live_sessions(), 1);
    assert!(
        eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await,
        "the reaper did not end the upstream session"
    );
    assert_eq!(h.proxy.live_sessions(), 0);
    let reply = c.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.error_code(), Some(-32043));
    h.stop().await;
}

#[tokio::test]
async fn use_renews_the_idle_expiry() {
    let h = Harness::with_config(|c| {
        c.session.idle_ttl = Duration::from_secs(1);
        c.session.reap_interval = Duration::from_millis(50);
    })
    .await;
    let mut c = h.client();
    c.create().await;
    // 2.4 s of use, never idle for more than 0.4 s: the session outlives its TTL.
    for i in 1..=6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(c.tool_text("counter", json!({})).await, i.to_string());
    }
    h.stop().await;
}

#[tokio::test]
async fn the_session_cap_answers_503_until_a_session_ends() {
    let h = Harness::with_config(|c| c.session.max_sessions = 2).await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    let reply = h.post(&create_request(3)).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.error_code(), Some(-32603));
    assert!(reply.header("retry-after").is_some());
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit")
    );
    assert_eq!(
        h.demo.live_sessions(),
        2,
        "no upstream connection for a refused create"
    );
    a.delete().await;
    assert_eq!(h.post(&create_request(4)).await.status, 200);
    h.stop().await;
}

// === 7. state ===

#[tokio::test]
async fn a_tampered_state_is_refused_and_never_reaches_the_upstream() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let state = c.state.clone().unwrap();
    let mut tampered = state.into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": in_session(json!({"name": "echo", "arguments": {"msg": "x"}}), c.session_id(), Some(&tampered))});
    let reply = h.post(&body).await;
    assert_eq!(reply.status, 400);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32602);
    assert_eq!(error["data"]["sessionId"], c.session_id());
    assert!(error["message"].as_str().unwrap().contains("state"));
    assert!(h.upstream_saw("tools/call").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_state_issued_for_another_session_is_refused() {
    let h = Harness::start().await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    let body = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call",
        "params": in_session(json!({"name": "echo", "arguments": {"msg": "x"}}), a.session_id(), b.state.as_deref())});
    let reply = h.post(&body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), Some(-32602));
    assert!(h.upstream_saw("tools/call").is_empty());
    // Session A itself is unharmed.
    assert_eq!(
        a.tool_text("echo", json!({"msg": "still here"})).await,
        "still here"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_session_unknown_here_is_not_found_whatever_state_it_carries() {
    // As after a restart with a fresh state key: the session and its state come from
    // another proxy. The client must hear -32043 (start over), not "bad state".
    let elsewhere = Harness::start().await;
    let mut c = elsewhere.client();
    c.create().await;
    let h = Harness::start().await;
    for (id, method, params) in [
        (
            13,
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "x"}}),
        ),
        (14, "sessions/delete", json!({})),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method,
            "params": in_session(params, c.session_id(), c.state.as_deref())});
        let reply = h.post(&body).await;
        assert_eq!(reply.status, 404, "{method}: {}", reply.text);
        assert_eq!(reply.error_code(), Some(-32043), "{method}");
        assert_eq!(reply.json()["error"]["data"]["sessionId"], c.session_id());
    }
    assert!(h.upstream_saw("tools/call").is_empty());
    h.stop().await;
    elsewhere.stop().await;
}

// === 8. The upstream loses the session ===

#[tokio::test]
async fn an_upstream_that_lost_the_session_yields_not_found_never_another_session() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    assert_eq!(c.tool_text("counter", json!({})).await, "1");
    h.demo.forget_sessions(); // as if the upstream restarted
    let reply = c
        .request("tools/call", json!({"name": "counter", "arguments": {}}))
        .await;
    assert_eq!(reply.status, 404, "{}", reply.text);
    assert_eq!(reply.json()["error"]["code"], -32043);
    assert_eq!(reply.json()["error"]["data"]["sessionId"], c.session_id());
    assert_eq!(h.proxy.live_sessions(), 0, "the mapping must be dropped");
    // Still not found: the proxy did not quietly open a new upstream session.
    let again = c
        .request("tools/call", json!({"name": "counter", "arguments": {}}))
        .await;
    assert_eq!(again.error_code(), Some(-32043));
    assert!(h.upstream_saw("initialize").len() == 1);
    // A new session starts from scratch.
    let mut fresh = h.client();
    fresh.create().await;
    assert_eq!(fresh.tool_text("counter", json!({})).await, "1");
    h.stop().await;
}

#[tokio::test]
async fn a_lost_session_said_in_plain_text_is_not_found() {
    // The Python SDK 1.x's words, before it answered 404: a 400 that is not even JSON.
    let rogue = common::rogue::Rogue::start().await;
    let proxy = mcp_session_proxy::start(config_for(&rogue.url()))
        .await
        .unwrap();
    let mut c = SessionClient::new(proxy.url());
    c.create().await;
    let reply = c
        .request("tools/call", json!({"name": "lose-text", "arguments": {}}))
        .await;
    common::assert::assert_session_not_found(&reply, c.session_id());
    assert_eq!(proxy.live_sessions(), 0, "the lost session is ended");
    assert_eq!(
        gauge(&proxy, "mcp_proxy_sessions_lost_total").await,
        Some(1)
    );
    proxy.shutdown().await;
}

// === 9. Upstream unreachable or too slow ===

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_naming_it() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let mut config = config_for(&url);
    config.upstream.connect_timeout = Duration::from_secs(2);
    let proxy = mcp_session_proxy::start(config).await.unwrap();
    let reply = post_json(
        &http_client(),
        &proxy.url(),
        &create_request(1),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(reply.status, 502);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32603);
    assert_eq!(error["data"]["upstream"], url);
    assert_eq!(reply.json()["id"], 1);
    assert_eq!(
        proxy.live_sessions(),
        0,
        "a failed create must give its slot back"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_slow_upstream_is_a_504_and_other_sessions_keep_working() {
    let h = Harness::with_config(|c| c.upstream.timeout = Duration::from_millis(1500)).await;
    let mut slow = h.client();
    slow.create().await;
    let mut quick = h.client();
    quick.create().await;
    let stuck = tokio::spawn(async move {
        let reply = slow
            .request(
                "tools/call",
                json!({"name": "sleep", "arguments": {"ms": 3000}}),
            )
            .await;
        (reply, slow)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    assert_eq!(
        quick.tool_text("echo", json!({"msg": "fine"})).await,
        "fine"
    );
    // Answered while the slow call still waits for its 1.5 s timeout (a wide margin for
    // a loaded machine: the point is that it does not queue behind the slow one).
    assert!(started.elapsed() < Duration::from_millis(1000));
    let (reply, mut slow) = stuck.await.unwrap();
    assert_eq!(reply.status, 504);
    assert_eq!(reply.error_code(), Some(-32603));
    assert_eq!(reply.json()["error"]["data"]["upstream"], h.demo.url());
    // The session survives a timeout.
    assert_eq!(
        slow.tool_text("echo", json!({"msg": "later"})).await,
        "later"
    );
    h.stop().await;
}

// === 9b. An upstream answering what its client cannot read ===

#[tokio::test]
async fn a_success_that_is_not_the_response_is_a_502_naming_the_upstream() {
    let rogue = common::rogue::Rogue::start().await;
    let proxy = mcp_session_proxy::start(config_for(&rogue.url()))
        .await
        .unwrap();
    let mut c = SessionClient::new(proxy.url());
    c.create().await;
    for (tool, says) in [
        ("not-json", "a body that is not JSON"),
        ("html", "a body of type \"text/html\""),
        ("array", "a JSON array (a batch)"),
        ("wrong-id", "the response to id \"not-"),
    ] {
        let id = format!("call-{tool}");
        let body = c.message(
            json!(id),
            "tools/call",
            json!({"name": tool, "arguments": {}}),
        );
        let reply = c.post(&body).await;
        assert_eq!(reply.status, 502, "{tool}: {}", reply.text);
        assert!(
            reply
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{tool}: {:?}",
            reply.headers
        );
        let answer = reply.json();
        assert_eq!(answer["id"], json!(id), "{tool}: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], -32603, "{tool}: {answer}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&rogue.url()), "{tool}: {message}");
        assert!(message.contains(says), "{tool}: {message}");
        assert_eq!(error["data"]["upstream"], rogue.url(), "{tool}: {answer}");
        assert_eq!(error["data"]["id"], json!(id), "{tool}: {answer}");
        assert_eq!(error["data"]["status"], 200, "{tool}: {answer}");
        assert!(
            !reply.text.contains(common::rogue::HTML),
            "{tool}: {answer}"
        );
    }
    // The session itself is fine: its next call is answered and stamped.
    let fine = c.call_tool("fine", json!({})).await;
    assert_eq!(fine["result"]["content"][0]["text"], "fine", "{fine}");
    assert_eq!(proxy.live_sessions(), 1);
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_old_client_gets_the_upstreams_answer_byte_for_byte() {
    let rogue = common::rogue::Rogue::start().await;
    let proxy = mcp_session_proxy::start(config_for(&rogue.url()))
        .await
        .unwrap();
    let old = LegacyClient::connect(proxy.url(), "2025-11-25").await;
    for (tool, content_type) in [("not-json", "application/json"), ("html", "text/html")] {
        let reply = old
            .post(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool, "arguments": {}}}))
            .await;
        assert_eq!(reply.status, 200, "{tool}");
        assert_eq!(reply.text, common::rogue::HTML, "{tool}");
        assert_eq!(reply.header("content-type"), Some(content_type), "{tool}");
    }
    proxy.shutdown().await;
}

// === 10. require_session ===

#[tokio::test]
async fn require_session_refuses_requests_without_a_session() {
    let h = Harness::with_config(|c| c.upstream.require_session = true).await;
    let reply = h
        .post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .await;
    assert_eq!(reply.status, 400);
    let body = reply.json();
    assert_eq!(body["id"], 4);
    assert_eq!(body["error"]["code"], -32044);
    assert_eq!(body["error"]["message"], "Session required");
    let legacy = h
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}}))
        .await;
    assert_eq!(legacy.error_code(), Some(-32044));
    assert!(
        h.upstream_posts().is_empty(),
        "nothing may reach the upstream"
    );
    // Sessions still work.
    let mut c = h.client();
    c.create().await;
    assert_eq!(c.tool_text("echo", json!({"msg": "ok"})).await, "ok");
    h.stop().await;
}

#[tokio::test]
async fn without_require_session_a_legacy_client_passes_through() {
    let h = Harness::start().await;
    let init = h
        .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}}))
        .await;
    assert_eq!(init.status, 200, "{}", init.text);
    let upstream_id = init.header("mcp-session-id").unwrap().to_owned();
    assert!(
        !upstream_id.starts_with("mcps_"),
        "the upstream's own id reaches a legacy client"
    );
    let mut headers = header("mcp-session-id", &upstream_id);
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    let ack = post_json(
        &h.http,
        &h.url(),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &headers,
    )
    .await;
    assert_eq!(ack.status, 202);
    let call = post_json(
        &h.http,
        &h.url(),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"msg": "old"}}}),
        &headers,
    )
    .await;
    assert_eq!(call.json()["result"]["content"][0]["text"], "old");
    assert!(call.json()["result"].get("_meta").is_none());
    h.stop().await;
}

#[tokio::test]
async fn healthz_answers_ok() {
    let h = Harness::start().await;
    let url = format!("http://{}/healthz", h.proxy.local_addr());
    let response = h.http.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"status": "ok"})
    );
    h.stop().await;
}
