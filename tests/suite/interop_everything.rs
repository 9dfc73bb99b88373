//! The real proxy in front of the real `@modelcontextprotocol/server-everything`
//! (streamableHttp mode: always SSE, each POST stream opens with a priming event).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

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

/// Valid JSON-RPC ids that the TypeScript server parses and writes back its own way
/// (`"\u00e9"` as `"é"`, `"\/x"` as `"/x"`, `1E+2` as `100`, `-0` as `0`, `1.0` as `1`).
const UNUSUAL_IDS: [&str; 5] = [r#""\u00e9""#, r#""\/x""#, "1E+2", "-0", "1.0"];

#[tokio::test]
async fn unusual_ids_come_back_byte_for_byte_in_a_session() {
    // The proxy speaks its own ids to the server and puts the client's back on the
    // response, in the server's event stream, so the client reads its own bytes and the
    // response is stamped — not an error for a stream that "never answered".
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create().await;
    let session_id = c.session_id().to_owned();
    let http = http_client();
    for raw_id in UNUSUAL_IDS {
        let params = in_session(
            json!({"name": "echo", "arguments": {"message": "id"}}),
            &session_id,
            c.state.as_deref(),
        );
        let reply = post_raw(
            &http,
            &h.url(),
            raw_request(raw_id, "tools/call", &params),
            &HeaderMap::new(),
        )
        .await;
        assert_eq!(reply.status, 200, "{raw_id}: {}", reply.text);
        assert_eq!(
            response_ids(&reply),
            vec![raw_id.to_owned()],
            "{raw_id}: one answer, with the client's id byte for byte: {}",
            reply.text
        );
        let answer = final_message(&reply);
        assert_eq!(answer["result"]["content"][0]["text"], "Echo: id");
        c.state = Some(check_session_meta(&answer, &session_id));
    }
    h.stop().await;
}

#[tokio::test]
async fn unusual_ids_come_back_byte_for_byte_to_stateless_clients() {
    // Before, the stateless path looked for the response by the client's bytes, missed
    // it, and answered 502 — after the tool had run.
    let h = Interop::everything().await;
    let c = StatelessClient::new(h.url());
    let http = http_client();
    for raw_id in UNUSUAL_IDS {
        let params = c.params(json!({"name": "echo", "arguments": {"message": "id"}}));
        let headers = StatelessClient::headers("tools/call", &params);
        let reply = post_raw(
            &http,
            &h.url(),
            raw_request(raw_id, "tools/call", &params),
            &headers,
        )
        .await;
        assert_eq!(reply.status, 200, "{raw_id}: {}", reply.text);
        assert_eq!(
            response_ids(&reply),
            vec![raw_id.to_owned()],
            "{raw_id}: {}",
            reply.text
        );
        let answer = final_message(&reply);
        assert_eq!(
            answer["result"]["content"][0]["text"], "Echo: id",
            "{answer}"
        );
        assert_eq!(answer["result"]["resultType"], "complete");
    }
    h.stop().await;
}

#[tokio::test]
async fn malformed_meta_is_the_clients_error_not_a_bad_gateway() {
    let h = Interop::everything().await;
    let mut c = h.client();
    c.create().await;
    let session_id = c.session_id().to_owned();
    let stateless = StatelessClient::new(h.url());
    let http = http_client();
    // The proxy refuses what the 2025-11-25 schema forbids, naming the key; a token the
    // schema allows but this server refuses (a fractional number) gets the server's own
    // error — as the answer to the client's request, with its id and a 4xx.
    let cases = [
        (json!(null), Some("_meta.progressToken")),
        (json!({"nested": 1}), Some("_meta.progressToken")),
        (json!(1.5), None),
    ];
    for (token, key) in cases {
        let call = json!({"name": "echo", "arguments": {"message": "m"},
                          "_meta": {"progressToken": token}});
        let session_params = in_session(call.clone(), &session_id, c.state.as_deref());
        let stateless_params = stateless.params(call);
        let replies = [
            (
                "session",
                post_raw(
                    &http,
                    &h.url(),
                    raw_request(r#""p-1""#, "tools/call", &session_params),
                    &HeaderMap::new(),
                )
                .await,
            ),
            (
                "stateless",
                post_raw(
                    &http,
                    &h.url(),
                    raw_request(r#""p-1""#, "tools/call", &stateless_params),
                    &StatelessClient::headers("tools/call", &stateless_params),
                )
                .await,
            ),
        ];
        for (path, reply) in replies {
            assert_eq!(reply.status, 400, "{path}, {token}: {}", reply.text);
            assert_eq!(
                response_ids(&reply),
                vec![r#""p-1""#.to_owned()],
                "{path}, {token}: the error answers the client's request: {}",
                reply.text
            );
            let error = final_message(&reply);
            match key {
                Some(key) => {
                    assert_eq!(error["error"]["code"], -32602, "{path}: {error}");
                    assert_eq!(error["error"]["data"]["key"], key, "{path}: {error}");
                }
                None => assert!(error["error"]["code"].is_i64(), "{path}: {error}"),
            }
        }
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
