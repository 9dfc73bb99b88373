//! SEP-1364's dialect ("Elevating MCP Sessions"): a top-level `sessionId` on requests,
//! notifications and responses; `initialize` carrying a `sessionId`; `sessions/create`
//! with `params.capabilities`; `terminate`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use common::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

async fn post(h: &Harness, body: Value) -> Reply {
    post_json(&h.http, &h.url(), &body, &HeaderMap::new()).await
}

#[tokio::test]
async fn initialize_with_a_null_session_id_opens_a_session() {
    let h = Harness::start().await;
    let reply = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "sessionId": null, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"roots": {}},
            "clientInfo": {"name": "sep1364-client", "version": "0.1"}}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    let id = body["sessionId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("mcps_"));
    assert_eq!(reply.header("mcp-session-id"), Some(id.as_str()));
    assert_eq!(
        body["result"]["capabilities"]["sessions"],
        json!({"required": false})
    );
    assert_eq!(
        body["result"]["capabilities"]["tools"],
        json!({"listChanged": true})
    );
    assert_eq!(
        body["result"]["serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
    let init = &h.upstream_saw("initialize")[0];
    let params = &init.body.as_ref().unwrap()["params"];
    assert_eq!(params["clientInfo"]["name"], "sep1364-client");
    assert_eq!(params["capabilities"], json!({"roots": {}}));

    // The client's own notifications/initialized is not sent twice upstream.
    let ack = post(
        &h,
        json!({"jsonrpc": "2.0", "sessionId": id, "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(ack.status, 202);
    assert_eq!(h.upstream_saw("notifications/initialized").len(), 1);

    // Requests name the session at the top level and get it back there.
    let call = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 2, "sessionId": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"msg": "top"}}}),
    )
    .await;
    assert_eq!(call.status, 200, "{}", call.text);
    let message = call.json();
    assert_eq!(message["sessionId"], id);
    assert_eq!(message["result"]["content"][0]["text"], "top");
    let upstream = h.upstream_saw("tools/call");
    assert!(
        upstream[0]
            .body
            .as_ref()
            .unwrap()
            .get("sessionId")
            .is_none(),
        "the legacy server must not see it"
    );

    // initialize again with the id: the same session, the same answer.
    let again = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 3, "sessionId": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}),
    )
    .await;
    assert_eq!(again.json()["sessionId"], id);
    assert_eq!(again.json()["result"], body["result"]);
    assert_eq!(h.upstream_saw("initialize").len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn initialize_with_an_unknown_session_id_is_not_found() {
    let h = Harness::start().await;
    let reply = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "sessionId": "mcps_unknown", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.error_code(), Some(-32043));
    assert!(h.upstream_saw("initialize").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn sessions_create_with_capabilities_and_terminate() {
    let h = Harness::start().await;
    let reply = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create",
            "params": {"capabilities": {"sampling": {}}}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    let id = body["result"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(body["sessionId"], id);
    assert_eq!(body["result"]["session"]["sessionId"], id);
    let init = &h.upstream_saw("initialize")[0];
    assert_eq!(
        init.body.as_ref().unwrap()["params"]["capabilities"],
        json!({"sampling": {}})
    );

    let count = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 2, "sessionId": id, "method": "tools/call",
            "params": {"name": "counter", "arguments": {}}}),
    )
    .await;
    assert_eq!(count.json()["result"]["content"][0]["text"], "1");

    let ended = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 3, "method": "terminate", "params": {"sessionId": id}}),
    )
    .await;
    assert_eq!(ended.status, 200, "{}", ended.text);
    assert_eq!(ended.json()["result"], json!({}));
    assert_eq!(h.demo.live_sessions(), 0);
    let after = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 4, "sessionId": id, "method": "tools/list"}),
    )
    .await;
    assert_eq!(after.error_code(), Some(-32043));
    h.stop().await;
}

#[tokio::test]
async fn a_top_level_id_must_agree_with_meta_and_be_a_string() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let mismatch = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "sessionId": "mcps_other", "method": "tools/list",
            "params": in_session(json!({}), c.session_id(), None)}),
    )
    .await;
    assert_eq!(mismatch.status, 400);
    assert_eq!(mismatch.error_code(), Some(-32600));
    let wrong_type = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "sessionId": 5, "method": "tools/list"}),
    )
    .await;
    assert_eq!(wrong_type.status, 400);
    assert_eq!(wrong_type.error_code(), Some(-32602));
    h.stop().await;
}

#[tokio::test]
async fn the_top_level_session_id_is_echoed_inside_streams_and_on_errors() {
    let h = Harness::start().await;
    let created = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create",
            "params": {"capabilities": {}}}),
    )
    .await;
    let id = created.json()["sessionId"].as_str().unwrap().to_owned();

    let streamed = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 2, "sessionId": id, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"steps": 2, "interval_ms": 20},
                       "_meta": {"progressToken": 1}}}),
    )
    .await;
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    let events = streamed.events();
    let (last, notes) = events.split_last().unwrap();
    assert_eq!(last["id"], 2);
    assert_eq!(last["sessionId"], id.as_str(), "the response in the stream");
    assert!(!notes.is_empty());
    assert!(
        notes.iter().all(|n| n.get("sessionId").is_none()),
        "notifications carry no session: {notes:?}"
    );

    let failed = post(
        &h,
        json!({"jsonrpc": "2.0", "id": 3, "sessionId": id, "method": "no/such/method"}),
    )
    .await;
    let body = failed.json();
    assert!(body.get("error").is_some(), "{body}");
    assert_eq!(body["sessionId"], id.as_str(), "an error response too");
    h.stop().await;
}
