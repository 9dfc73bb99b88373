//! The real proxy in front of the real `@modelcontextprotocol/server-everything`
//! (streamableHttp mode: always SSE, each POST stream opens with a priming event).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::{Duration, Instant};

use common::assert::{assert_session_not_found, check_progress, check_session_meta, tool_names};
use common::interop::Interop;
use common::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

#[tokio::test]
async fn tools_list_and_echo_in_a_data_layer_session() {
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();
    let created_state = c.state.clone().unwrap();

    let reply = c.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "tools/list: {}", reply.text);
    assert!(
        reply
            .header("content-type")
            .unwrap_or("")
            .starts_with("text/event-stream"),
        "the everything server answers SSE: {:?}",
        reply.headers
    );
    assert_eq!(
        reply.header("mcp-session-id"),
        Some(id.as_str()),
        "the client sees its own session id"
    );
    let listed = final_message(&reply);
    let list_state = check_session_meta(&listed, &id);
    let tools = tool_names(&listed);
    assert!(tools.iter().any(|t| t == "echo"), "tools: {tools:?}");

    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "hi"}}),
        )
        .await;
    assert_eq!(reply.status, 200, "tools/call echo: {}", reply.text);
    assert_eq!(reply.header("mcp-session-id"), Some(id.as_str()));
    let echoed = final_message(&reply);
    assert_eq!(
        echoed["result"]["content"][0]["text"], "Echo: hi",
        "{echoed}"
    );
    let echo_state = check_session_meta(&echoed, &id);

    assert_ne!(
        created_state, list_state,
        "state must change between responses"
    );
    assert_ne!(
        list_state, echo_state,
        "state must change between responses"
    );
    h.stop().await;
}

#[tokio::test]
async fn progress_notifications_stream_through_before_the_stamped_result() {
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();

    let response = c
        .request_streaming(
            "tools/call",
            json!({
                "name": "trigger-long-running-operation",
                "arguments": {"duration": 1, "steps": 4},
                "_meta": {"progressToken": "progress-1"},
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
    assert!(
        progress.len() >= 3,
        "want >= 3 progress notifications, got {messages:?}"
    );
    check_progress(&progress, "progress-1");

    let (done_at, done) = messages
        .iter()
        .find(|(_, m)| m.get("method").is_none() && m.get("id").is_some())
        .unwrap_or_else(|| panic!("no final response in {messages:?}"));
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Long running operation completed")),
        "{done}"
    );
    check_session_meta(done, &id);
    let (first_at, _) = progress[0];
    let lead = done_at.duration_since(*first_at);
    assert!(
        lead >= Duration::from_millis(200),
        "the first progress arrived only {lead:?} before the result: not streamed"
    );
    let final_index = messages.iter().position(|(_, m)| m == done).unwrap();
    assert!(
        messages[..final_index]
            .iter()
            .filter(|(_, m)| m["method"] == "notifications/progress")
            .count()
            == progress.len(),
        "every progress notification comes before the result"
    );
    h.stop().await;
}

#[tokio::test]
async fn sampling_request_round_trips_through_the_session() {
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create_with(json!({
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "interop-test", "version": "0.0.1"},
    }))
    .await;
    let id = c.session_id().to_owned();

    let listed = final_message(&c.request("tools/list", json!({})).await);
    let tools = tool_names(&listed);
    assert!(
        tools.iter().any(|t| t == "trigger-sampling-request"),
        "the client's sampling capability did not reach the upstream: {tools:?}"
    );

    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "trigger-sampling-request", "arguments": {"prompt": "hello", "maxTokens": 5}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut events = EventReader::new(response);
    let sampling = events.next_request("sampling/createMessage").await;
    let request_id = sampling["id"].clone();
    assert!(
        !request_id.is_null(),
        "sampling/createMessage without an id: {sampling}"
    );

    let answer = c
        .respond(
            request_id,
            json!({
                "role": "assistant",
                "content": {"type": "text", "text": "sampled by the interop test"},
                "model": "test-model",
                "stopReason": "endTurn",
            }),
        )
        .await;
    assert_eq!(
        answer.status, 202,
        "the sampling response was not accepted: {}",
        answer.text
    );

    let rest = events.rest().await;
    let done = rest
        .iter()
        .find(|m| m.get("method").is_none() && m.get("result").is_some())
        .unwrap_or_else(|| panic!("no tool result after sampling: {rest:?}"));
    let text = serde_json::to_string(&done["result"]["content"]).unwrap();
    assert!(text.contains("sampled by the interop test"), "{done}");
    check_session_meta(done, &id);
    h.stop().await;
}

#[tokio::test]
async fn deleted_session_is_gone() {
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create().await;
    let id = c.session_id().to_owned();
    assert_eq!(
        c.tool_text("echo", json!({"message": "before"})).await,
        "Echo: before"
    );

    let deleted = c.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.json()["result"], json!({}), "{}", deleted.text);

    let again = c.delete().await;
    assert_eq!(
        again.error_code(),
        Some(-32043),
        "second delete: {}",
        again.text
    );

    let after = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "after"}}),
        )
        .await;
    assert_session_not_found(&after, &id);
    h.stop().await;
}

#[tokio::test]
async fn deleting_one_session_leaves_the_other_working() {
    let h = Interop::everything().await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    assert_ne!(a.session_id(), b.session_id());
    assert_eq!(
        a.tool_text("echo", json!({"message": "a"})).await,
        "Echo: a"
    );
    assert_eq!(
        b.tool_text("echo", json!({"message": "b"})).await,
        "Echo: b"
    );

    let deleted = a.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);

    // B's upstream session must be another one than A's, which is now ended upstream.
    let message = b.call_tool("echo", json!({"message": "still here"})).await;
    assert_eq!(
        message["result"]["content"][0]["text"], "Echo: still here",
        "{message}"
    );
    check_session_meta(&message, b.session_id());
    let reply = b.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let gone = a
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "a"}}),
        )
        .await;
    assert_eq!(gone.error_code(), Some(-32043), "{}", gone.text);
    h.stop().await;
}

#[tokio::test]
async fn ids_the_upstream_rewrites_still_get_their_session_meta() {
    // The TypeScript server parses the id and writes it back its own way: `1.0` comes back
    // as `1`, `"\u0041b"` as `"Ab"`. The proxy must still recognise its response, stamp
    // it, and not invent an error for a stream that "never answered".
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create().await;
    let session_id = c.session_id().to_owned();
    let http = http_client();
    for (raw_id, read_back) in [("1.0", json!(1)), (r#""\u0041b""#, json!("Ab"))] {
        let params = in_session(
            json!({"name": "echo", "arguments": {"message": "id"}}),
            &session_id,
            c.state.as_deref(),
        );
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"tools/call","params":{params}}}"#);
        let reply = post_raw(&http, &h.url(), body.into_bytes(), &HeaderMap::new()).await;
        assert_eq!(reply.status, 200, "{raw_id}: {}", reply.text);
        let messages = reply.events();
        let responses: Vec<&Value> = messages
            .iter()
            .filter(|m| m.get("result").is_some() || m.get("error").is_some())
            .collect();
        assert_eq!(responses.len(), 1, "{raw_id}: one answer: {}", reply.text);
        let answer = responses[0];
        assert_eq!(answer["id"], read_back, "{raw_id}: {answer}");
        assert_eq!(answer["result"]["content"][0]["text"], "Echo: id");
        c.state = Some(check_session_meta(answer, &session_id));
    }
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_server_loses_its_sessions_and_the_proxy_says_so() {
    // The everything server answers a session it does not know with HTTP 400 and an
    // error without an id ("Bad Request: No valid session ID provided").
    let server = common::interop::everything().await;
    let call = json!({"name": "echo", "arguments": {"message": "hi"}});
    let server =
        common::interop::a_restart_loses_sessions(server, call, common::interop::everything_on)
            .await;
    drop(server);
}
