//! Event-stream responses rewritten as they stream: what the upstream sends (progress,
//! logs, its own requests) passes as it comes, the response inside the stream gets the
//! session `_meta` of the data-layer sessions draft, and a stream the upstream cuts or
//! leaves silent ends with an error for the request.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::{Duration, Instant};

use common::*;
use mcp_session_proxy::demo::DemoOptions;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

fn is_notification(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_none()
}

#[tokio::test]
async fn progress_and_logs_arrive_in_order_before_the_stamped_result() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let started = Instant::now();
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 4, "interval_ms": 250}, "_meta": {"progressToken": "tok"}}),
        )
        .await;
    assert_event_stream(&response);
    assert_eq!(response.headers()["mcp-session-id"], c.session_id());
    assert!(response.headers().get("content-length").is_none());
    let messages = EventReader::new(response).all_timed().await;

    let progress: Vec<&(Instant, Value)> = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    let logs = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/message")
        .count();
    assert_eq!(progress.len(), 4);
    assert_eq!(logs, 4);
    for (i, (_, m)) in progress.iter().enumerate() {
        assert_eq!(m["params"]["progress"], i as u64 + 1, "in order");
        assert_eq!(m["params"]["progressToken"], "tok");
    }
    for (_, m) in messages.iter().filter(|(_, m)| is_notification(m)) {
        assert!(
            m["params"].get("_meta").is_none(),
            "notifications carry no session _meta: {m}"
        );
    }
    let (result_at, result) = messages.last().unwrap();
    assert_eq!(result["result"]["content"][0]["text"], "done after 4 steps");
    assert_eq!(session_meta(result)["sessionId"], c.session_id());

    // Streaming, not buffering: the first progress event came about one interval after
    // the call, and well before the result (three more intervals later).
    let first_at = progress[0].0;
    assert!(
        first_at.duration_since(started) < Duration::from_millis(700),
        "first event after {:?}",
        first_at.duration_since(started)
    );
    assert!(
        result_at.duration_since(first_at) >= Duration::from_millis(600),
        "events were held back"
    );
    for pair in progress.windows(2) {
        assert!(
            pair[1].0.duration_since(pair[0].0) >= Duration::from_millis(150),
            "events arrived in a burst"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn the_draft_usage_vector_is_stamped_inside_an_event_stream_too() {
    let h = Harness::start_with(
        DemoOptions {
            always_sse: true,
            ..DemoOptions::default()
        },
        |_| {},
    )
    .await;
    let mut c = h.client();
    c.create().await;
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "hi"}}),
        )
        .await;
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = reply.events();
    assert_eq!(events.len(), 1);
    let message = &events[0];
    assert_eq!(
        message["result"]["content"],
        json!([{"type": "text", "text": "hi"}])
    );
    let meta = session_meta(message);
    assert_eq!(meta["sessionId"], c.session_id());
    assert!(meta["state"].is_string() && meta["expiresAt"].is_string());
    // The event framing of the upstream is kept.
    assert!(reply.text.starts_with("event: message\n"), "{}", reply.text);
    h.stop().await;
}

#[tokio::test]
async fn sampling_requests_reach_the_client_unchanged_and_its_response_reaches_the_upstream() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let upstream_id = c.tool_text("whoami", json!({})).await;
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "Say cheese"}}),
        )
        .await;
    let mut reader = EventReader::new(response);
    let request = reader.next().await.unwrap();
    assert_eq!(
        request,
        json!({"jsonrpc": "2.0", "id": "sample-1", "method": "sampling/createMessage",
            "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "Say cheese"}}], "maxTokens": 100}}),
        "the server-to-client request must arrive exactly as the upstream sent it"
    );
    let ack = c
        .respond(
            request["id"].clone(),
            json!({"role": "assistant", "content": {"type": "text", "text": "cheese"}, "model": "m", "stopReason": "endTurn"}),
        )
        .await;
    assert_eq!(ack.status, 202, "{}", ack.text);
    assert_eq!(ack.header("mcp-session-id"), Some(c.session_id()));
    let result = reader.next().await.unwrap();
    assert_eq!(
        result["result"]["content"][0]["text"],
        "the client said: cheese"
    );
    assert_eq!(session_meta(&result)["sessionId"], c.session_id());
    assert!(reader.next().await.is_none());

    // The upstream got the client's response in the right session, without session _meta.
    let responses: Vec<_> = h
        .upstream_posts()
        .into_iter()
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["id"] == "sample-1" && b.get("result").is_some())
        })
        .collect();
    assert_eq!(responses.len(), 1);
    assert_eq!(
        responses[0].session_id.as_deref(),
        Some(upstream_id.as_str())
    );
    assert!(
        responses[0].body.as_ref().unwrap()["result"]
            .get("_meta")
            .is_none()
    );
    h.stop().await;
}

#[tokio::test]
async fn client_notifications_reach_their_upstream_session() {
    let h = Harness::start().await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    let upstream_b = b.tool_text("whoami", json!({})).await;
    let reply = b
        .notify(
            "notifications/cancelled",
            json!({"requestId": 7, "reason": "user"}),
        )
        .await;
    assert_eq!(reply.status, 202);
    assert!(reply.text.is_empty());
    let seen = h.upstream_saw("notifications/cancelled");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].session_id.as_deref(), Some(upstream_b.as_str()));
    assert_eq!(
        seen[0].body.as_ref().unwrap()["params"],
        json!({"requestId": 7, "reason": "user"})
    );

    // A notification with no _meta at all is routed by its Mcp-Session-Id header alone.
    let mut headers = HeaderMap::new();
    headers.insert("mcp-session-id", b.session_id().parse().unwrap());
    let bare =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8}});
    assert_eq!(
        post_json(&h.http, &h.url(), &bare, &headers).await.status,
        202
    );
    let seen = h.upstream_saw("notifications/cancelled");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].session_id.as_deref(), Some(upstream_b.as_str()));
    drop(a);
    h.stop().await;
}

#[tokio::test]
async fn a_client_that_accepts_only_json_gets_the_stamped_result_as_json() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let body = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": in_session(json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 50}}), c.session_id(), None)});
    let response = h
        .http
        .post(h.url())
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["id"], 77);
    assert_eq!(
        message["result"]["content"][0]["text"],
        "done after 2 steps"
    );
    assert_eq!(session_meta(&message)["sessionId"], c.session_id());
    h.stop().await;
}

#[tokio::test]
async fn the_sessions_get_stream_carries_server_notifications() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let response = h
        .http
        .get(h.url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session_id())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["mcp-session-id"], c.session_id());
    let mut reader = EventReader::new(response);
    assert_eq!(
        c.tool_text("announce", json!({"text": "news"})).await,
        "announced to 1 stream(s)"
    );
    let note = reader.next().await.unwrap();
    assert_eq!(note["method"], "notifications/message");
    assert_eq!(note["params"]["data"], "news");
    drop(reader);
    h.stop().await;
}

#[tokio::test]
async fn a_stream_cut_by_the_upstream_ends_with_an_error_for_the_request() {
    let Harness {
        proxy,
        demo,
        http: _,
    } = Harness::start().await;
    let mut c = SessionClient::new(proxy.url());
    c.create().await;
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 50, "interval_ms": 50}}),
        )
        .await;
    let mut reader = EventReader::new(response);
    let first = reader.next().await.unwrap();
    assert_eq!(first["method"], "notifications/message");
    demo.stop().await; // the upstream goes away mid-stream
    let mut last = Value::Null;
    while let Some(message) = reader.next().await {
        last = message;
    }
    assert_eq!(last["error"]["code"], -32603, "{last}");
    assert!(last["id"].is_number());
    assert!(last["error"]["data"]["upstream"].is_string());
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_silent_upstream_stream_is_closed_after_the_idle_timeout() {
    let h =
        Harness::with_config(|c| c.upstream.sse_idle_timeout = Duration::from_millis(300)).await;
    let mut c = h.client();
    c.create().await;
    let started = Instant::now();
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 1, "interval_ms": 3000}}),
        )
        .await;
    let messages = EventReader::new(response).all_timed().await;
    let (at, last) = messages.last().unwrap();
    assert_eq!(last["error"]["code"], -32603);
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sent nothing")
    );
    assert!(at.duration_since(started) < Duration::from_millis(2500));
    h.stop().await;
}
