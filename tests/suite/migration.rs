//! One proxy, one endpoint, every kind of client at once (the book, docs/src/migrate/index.md):
//! old initialize-based clients at each stateful protocol version, a data-layer session
//! client, and a stateless (2026-07-28) client, interleaved, each getting its own
//! semantics and none disturbing another.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use common::*;
use serde_json::json;

/// `tools/call counter` from an old client: passed through untouched, its text.
async fn counter(client: &LegacyClient) -> String {
    let reply = client
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "counter", "arguments": {}}}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let message = final_message(&reply);
    assert!(
        message["result"].get("_meta").is_none(),
        "passed through untouched: {message}"
    );
    assert!(message["result"].get("resultType").is_none());
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn one_endpoint_serves_old_session_and_stateless_clients_together() {
    let h = Harness::start().await;
    let mut old = Vec::new();
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        old.push(LegacyClient::connect(h.url(), version).await);
    }
    let mut session = h.client();
    session.create().await;
    let mut stateless = StatelessClient::new(h.url());

    // Interleaved rounds: every per-session counter counts only its own calls.
    for round in 1..=3 {
        for client in &old {
            assert_eq!(
                counter(client).await,
                round.to_string(),
                "{}",
                client.version
            );
        }
        assert_eq!(
            session.tool_text("counter", json!({})).await,
            round.to_string()
        );
        let reply = stateless
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"msg": "s"}}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let result = &final_message(&reply)["result"];
        assert_eq!(result["resultType"], "complete");
        assert_eq!(result["content"][0]["text"], "s");
        assert!(result["_meta"].get(SESSION_KEY).is_none());
    }

    // The old clients reached the upstream with their own session ids and versions.
    for client in &old {
        let theirs: Vec<_> = h
            .upstream_saw("tools/call")
            .into_iter()
            .filter(|r| r.session_id.as_deref() == Some(client.session.as_str()))
            .collect();
        assert_eq!(theirs.len(), 3, "{}", client.version);
        assert!(
            theirs
                .iter()
                .all(|r| r.protocol_version.as_deref() == Some(client.version))
        );
    }
    // Ending one kind leaves the others working.
    let ended = old[0].delete().await;
    assert!(ended.status().is_success(), "{}", ended.status());
    session.delete().await;
    assert_eq!(counter(&old[1]).await, "4");
    let reply = stateless.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    h.stop().await;
}

#[tokio::test]
async fn an_old_clients_stream_and_get_stream_pass_through_as_they_happen() {
    let h = Harness::start().await;
    let old = LegacyClient::connect(h.url(), "2025-11-25").await;

    // Its GET stream (the upstream's own, through the proxy).
    let get = h
        .http
        .get(h.url())
        .header("accept", "text/event-stream")
        .headers(old.headers())
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let mut notes = EventReader::new(get);

    // A streamed call: each progress event must arrive when the upstream sends it.
    let started = std::time::Instant::now();
    let response = post_streaming(
        &h.http,
        &h.url(),
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"steps": 3, "interval_ms": 300},
            "_meta": {"progressToken": "old"}}}),
        &old.headers(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let messages = EventReader::new(response).all_timed().await;
    let progress: Vec<_> = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{messages:?}");
    let (done_at, result) = messages.last().unwrap();
    assert_eq!(result["id"], 8);
    assert!(
        result["result"].get("_meta").is_none(),
        "untouched: {result}"
    );
    let first_at = progress[0].0;
    assert!(
        *done_at - first_at >= std::time::Duration::from_millis(450),
        "the first progress came {:?} before the result: buffered, not streamed",
        *done_at - first_at
    );
    assert!(first_at - started < std::time::Duration::from_millis(1000));

    // A server notification on the old client's GET stream.
    let announced = old
        .post(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "announce", "arguments": {"text": "to the old client"}}}))
        .await;
    assert_eq!(announced.status, 200, "{}", announced.text);
    let note = notes.next().await.unwrap();
    assert_eq!(note["method"], "notifications/message");
    assert_eq!(note["params"]["data"], "to the old client");
    drop(notes);
    h.stop().await;
}

#[tokio::test]
async fn an_old_connections_session_id_means_legacy_semantics_whatever_the_meta() {
    let h = Harness::start().await;
    let old = LegacyClient::connect(h.url(), "2025-11-25").await;
    let reply = old
        .post(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "counter", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let message = final_message(&reply);
    assert_eq!(message["result"]["content"][0]["text"], "1", "{message}");
    assert!(
        message["result"].get("resultType").is_none(),
        "not stateless"
    );
    let calls = h.upstream_saw("tools/call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].session_id.as_deref(), Some(old.session.as_str()));
    h.stop().await;
}
