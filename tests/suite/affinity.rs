//! `stateless.affinity`: which upstream session a stateless (2026-07-28) call runs in, in
//! front of the strict demo server, whose `counter` tool counts calls per upstream
//! session: `isolated` (a session per call, kept until the call's last round), `pinned`
//! (a session per conversation header or per caller), `handles` (SEP-2567's explicit
//! handles: the `session_open` / `session_close` tools and a `session` argument). The
//! `shared` pool is `stateless.rs`'s; real SDK 2.x clients against a real stateful server
//! are in `interop_sdk2.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::affinity::{handles, pinned};
use common::assert::{text_of, tool_names};
use common::*;
use mcp_session_proxy::config::{Affinity, Config, Fallback};
use mcp_session_proxy::rewrite::handles::HandleTools;
use mcp_session_proxy::upstream::PinSettings;
use serde_json::{Value, json};

/// The counter's value: the calls its upstream session has seen.
async fn count(c: &mut StatelessClient) -> String {
    text_of(&c.call_tool("counter", json!({})).await).to_owned()
}

fn deletes(h: &Harness) -> usize {
    h.demo
        .journal()
        .iter()
        .filter(|r| r.http_method == "DELETE")
        .count()
}

// === isolated (the default) ===

#[tokio::test]
async fn isolated_is_the_default_and_gives_every_call_its_own_upstream_session() {
    let h = Harness::start().await;
    let mut a = h.stateless_client();
    let mut b = h.stateless_client();
    for _ in 0..3 {
        assert_eq!(count(&mut a).await, "1");
        assert_eq!(count(&mut b).await, "1");
    }
    assert_eq!(
        h.upstream_saw("initialize").len(),
        6,
        "one handshake per call"
    );
    let sessions: std::collections::HashSet<_> = h
        .upstream_saw("tools/call")
        .into_iter()
        .map(|r| r.session_id)
        .collect();
    assert_eq!(sessions.len(), 6, "no two calls share an upstream session");
    assert!(
        eventually(Duration::from_secs(5), || deletes(&h) == 6).await,
        "each call's session is ended after it: {} DELETEs",
        deletes(&h)
    );
    assert!(eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await);
    // No call asked for logs: nobody asked the upstream for them.
    assert!(h.upstream_saw("logging/setLevel").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn an_isolated_call_keeps_its_session_until_its_last_round() {
    let h = Harness::start().await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    let first = c.call_tool("sample", json!({"prompt": "Say cheese"})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        h.demo.live_sessions(),
        1,
        "the waiting call holds its session"
    );
    assert_eq!(deletes(&h), 0);

    let retry = json!({"name": "sample", "arguments": {"prompt": "Say cheese"},
        "inputResponses": {"sample-1": {"role": "assistant", "content": {"type": "text", "text": "cheese"}, "model": "m"}},
        "requestState": state});
    let done = c.request("tools/call", retry).await.json();
    assert_eq!(text_of(&done), "the client said: cheese");
    let calls = h.upstream_saw("tools/call");
    let answers: Vec<_> = h
        .upstream_posts()
        .into_iter()
        .filter(|r| r.body.as_ref().is_some_and(|b| b["id"] == "sample-1"))
        .collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(
        answers[0].session_id, calls[0].session_id,
        "the answer went to the session that asked"
    );
    assert!(
        eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await,
        "ended after the last round"
    );
    h.stop().await;
}

#[tokio::test]
async fn an_isolated_call_that_wants_logs_asks_the_upstream_for_them() {
    let h = Harness::start().await;
    let mut c = h.stateless_client();
    c.log_level = Some("debug");
    let reply = c
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 10}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let logs = reply
        .events()
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert!(logs > 0, "{}", reply.text);
    assert_eq!(h.upstream_saw("logging/setLevel").len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn isolated_sessions_are_bounded_by_max_pooled() {
    let h = Harness::with_config(|c| c.stateless.max_pooled = 1).await;
    let mut slow = h.stateless_client();
    let busy = tokio::spawn(async move {
        slow.request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 800}}),
        )
        .await
    });
    assert!(
        eventually(Duration::from_secs(5), || h.demo.live_sessions() == 1).await,
        "the slow call holds its session"
    );
    let refused = h
        .stateless_client()
        .request("tools/call", json!({"name": "counter", "arguments": {}}))
        .await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (503, Some(-32603)),
        "{}",
        refused.text
    );
    assert_eq!(busy.await.unwrap().status, 200);
    // Its place is free once its session is ended upstream.
    assert!(eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await);
    let url = h.url();
    let freed = eventually_async(Duration::from_secs(5), || {
        let url = url.clone();
        async move {
            let mut c = StatelessClient::new(url);
            let reply = c
                .request("tools/call", json!({"name": "counter", "arguments": {}}))
                .await;
            reply.status == 200 && text_of(&reply.json()) == "1"
        }
    })
    .await;
    assert!(freed, "the slot was never given back");
    h.stop().await;
}

// === pinned ===

#[tokio::test]
async fn pinned_by_a_conversation_header_keeps_state_per_conversation() {
    let h = Harness::with_config(pinned(Some("x-conversation-id"))).await;
    let mut a = h
        .stateless_client()
        .with_header("x-conversation-id", "conversation-a");
    let mut b = h
        .stateless_client()
        .with_header("x-conversation-id", "conversation-b");
    // Strictly interleaved: a shared session would count 1, 2, 3, … across both.
    for expected in ["1", "2", "3"] {
        assert_eq!(count(&mut a).await, expected);
        assert_eq!(count(&mut b).await, expected);
    }
    assert_eq!(
        h.upstream_saw("initialize").len(),
        2,
        "one session per conversation"
    );

    // The same conversation id from another caller is another conversation.
    let mut a_elsewhere = h
        .stateless_client()
        .with_header("x-conversation-id", "conversation-a")
        .with_header("authorization", "Bearer mallory");
    assert_eq!(count(&mut a_elsewhere).await, "1");
    assert_eq!(count(&mut a).await, "4", "a's own state is untouched");

    // Without the header: the fallback, a session of its own per call.
    let mut anonymous = h.stateless_client();
    assert_eq!(count(&mut anonymous).await, "1");
    assert_eq!(count(&mut anonymous).await, "1");
    h.stop().await;
}

#[tokio::test]
async fn pinned_by_credentials_when_no_header_is_configured() {
    let h = Harness::with_config(pinned(None)).await;
    let mut alice = h
        .stateless_client()
        .with_header("authorization", "Bearer alice");
    let mut alice_again = h
        .stateless_client()
        .with_header("authorization", "Bearer alice");
    let mut bob = h.stateless_client().with_header("x-api-key", "bob-key");
    assert_eq!(count(&mut alice).await, "1");
    assert_eq!(count(&mut bob).await, "1");
    assert_eq!(
        count(&mut alice_again).await,
        "2",
        "the same credentials, the same pin"
    );
    assert_eq!(count(&mut bob).await, "2");
    let mut nobody = h.stateless_client();
    assert_eq!(count(&mut nobody).await, "1");
    assert_eq!(
        count(&mut nobody).await,
        "1",
        "no credentials: nothing to pin on"
    );
    h.stop().await;
}

#[tokio::test]
async fn concurrent_calls_of_one_conversation_share_its_session() {
    let h = Harness::with_config(pinned(Some("x-conversation-id"))).await;
    let calls = (0..8).map(|_| {
        let mut c = h
            .stateless_client()
            .with_header("x-conversation-id", "busy");
        async move { count(&mut c).await }
    });
    let mut seen: Vec<u64> = futures_util::future::join_all(calls)
        .await
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=8).collect::<Vec<u64>>());
    assert_eq!(
        h.upstream_saw("initialize").len(),
        1,
        "concurrent first calls wait for one opening"
    );
    h.stop().await;
}

#[tokio::test]
async fn pins_are_bounded_and_expire() {
    let h = Harness::with_config(|c| {
        c.stateless.affinity = Affinity::Pinned {
            header: Some(http::HeaderName::from_static("x-conversation-id")),
            fallback: Fallback::Isolated,
            limits: PinSettings {
                max_pinned: 1,
                idle_ttl: Duration::from_secs(1),
            },
        };
    })
    .await;
    let mut a = h.stateless_client().with_header("x-conversation-id", "a");
    let mut b = h.stateless_client().with_header("x-conversation-id", "b");
    assert_eq!(count(&mut a).await, "1");
    assert_eq!(count(&mut a).await, "2");
    assert_eq!(
        count(&mut b).await,
        "1",
        "b made room by ending a's idle pin"
    );
    assert!(eventually(Duration::from_secs(5), || h.demo.live_sessions() == 1).await);
    assert_eq!(count(&mut a).await, "1", "a's state went with its pin");
    // Idle past pin_idle_ttl: ended upstream.
    assert!(
        eventually(Duration::from_secs(6), || h.demo.live_sessions() == 0).await,
        "the idle pin was not ended: {} upstream sessions",
        h.demo.live_sessions()
    );
    assert_eq!(count(&mut a).await, "1");
    h.stop().await;
}

#[tokio::test]
async fn a_pinned_session_the_upstream_lost_is_replaced() {
    let h = Harness::with_config(pinned(Some("x-conversation-id"))).await;
    let mut a = h.stateless_client().with_header("x-conversation-id", "a");
    assert_eq!(count(&mut a).await, "1");
    assert_eq!(count(&mut a).await, "2");
    h.demo.forget_sessions();
    assert_eq!(
        count(&mut a).await,
        "1",
        "a new session, the call retried once"
    );
    assert_eq!(count(&mut a).await, "2");
    h.stop().await;
}

// === handles ===

/// Calls the open tool; returns the handle.
async fn open(c: &mut StatelessClient) -> String {
    let answer = c.call_tool("session_open", json!({})).await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["resultType"], "complete");
    let handle = result["structuredContent"]["session"].as_str().unwrap();
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains(handle),
        "the model reads the handle in the text too"
    );
    assert!(result["structuredContent"]["expiresAt"].is_string());
    handle.to_owned()
}

async fn close(c: &mut StatelessClient, handle: &str) -> Value {
    c.call_tool("session_close", json!({"session": handle}))
        .await
}

/// A tool error result (not a protocol error), whose text says `needle`.
fn assert_tool_error(answer: &Value, needle: &str) {
    assert!(answer.get("error").is_none(), "a protocol error: {answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["resultType"], "complete");
    let text = text_of(answer);
    assert!(text.contains(needle), "{needle:?} not in {text:?}");
}

#[tokio::test]
async fn tools_list_gains_the_handle_tools_and_argument_in_handles_mode_only() {
    let h = Harness::with_config(handles).await;
    let mut c = h.stateless_client();
    let list = c.request("tools/list", json!({})).await.json();
    let names = tool_names(&list);
    assert_eq!(&names[names.len() - 2..], ["session_open", "session_close"]);
    for tool in list["result"]["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap();
        let properties = &tool["inputSchema"]["properties"];
        if name == "session_open" {
            assert_eq!(properties, &json!({}));
            continue;
        }
        assert_eq!(properties["session"]["type"], "string", "{name}");
        let required = tool["inputSchema"]["required"].as_array();
        let required_handle = required.is_some_and(|r| r.contains(&json!("session")));
        assert_eq!(required_handle, name == "session_close", "{name}");
    }
    // A later page (the request has a cursor) does not list the tools again.
    let page = c
        .request("tools/list", json!({"cursor": "page-2"}))
        .await
        .json();
    let names = tool_names(&page);
    assert!(
        !names.iter().any(|n| n.starts_with("session_")),
        "{names:?}"
    );
    let null_cursor = c
        .request("tools/list", json!({"cursor": null}))
        .await
        .json();
    assert!(
        tool_names(&null_cursor).contains(&"session_open".to_owned()),
        "a null cursor is the first page"
    );
    assert_eq!(
        page["result"]["tools"][0]["inputSchema"]["properties"]["session"]["type"],
        "string"
    );
    // The cursor went to the upstream as it was.
    let asked = h.upstream_saw("tools/list");
    assert_eq!(
        asked[1].body.as_ref().unwrap()["params"]["cursor"],
        "page-2"
    );
    assert_eq!(asked.len(), 3);

    // A data-layer session client through the same proxy sees the upstream's tools as
    // they are.
    let mut session = h.client();
    session.create().await;
    let listed = final_message(&session.request("tools/list", json!({})).await);
    let names = tool_names(&listed);
    assert!(
        !names.iter().any(|n| n.starts_with("session_")),
        "{names:?}"
    );
    for tool in listed["result"]["tools"].as_array().unwrap() {
        assert!(tool["inputSchema"]["properties"].get("session").is_none());
    }
    h.stop().await;

    // Other affinities leave the list alone.
    let h = Harness::start().await;
    let plain = h
        .stateless_client()
        .request("tools/list", json!({}))
        .await
        .json();
    assert!(!tool_names(&plain).iter().any(|n| n.starts_with("session_")));
    h.stop().await;
}

#[tokio::test]
async fn a_handle_keeps_state_across_calls_and_never_reaches_the_upstream() {
    let h = Harness::with_config(handles).await;
    let mut a = h.stateless_client();
    let mut b = h.stateless_client();
    let handle_a = open(&mut a).await;
    let handle_b = open(&mut b).await;
    assert_ne!(handle_a, handle_b);
    assert!(handle_a.starts_with("mcps_"), "a data-layer sessionId");
    for expected in ["1", "2", "3"] {
        let got = a.call_tool("counter", json!({"session": handle_a})).await;
        assert_eq!(text_of(&got), expected, "{got}");
        assert_eq!(got["result"]["resultType"], "complete");
        let got = b.call_tool("counter", json!({"session": handle_b})).await;
        assert_eq!(text_of(&got), expected);
    }
    // Without a handle: the fallback, a session of its own.
    assert_eq!(text_of(&a.call_tool("counter", json!({})).await), "1");
    for call in h.upstream_saw("tools/call") {
        let arguments = &call.body.unwrap()["params"]["arguments"];
        assert!(arguments.get("session").is_none(), "{arguments}");
    }
    // The handle's upstream session is the one the counter ran in, every time.
    let by_session = |session: &Option<String>| {
        h.upstream_saw("tools/call")
            .iter()
            .filter(|r| &r.session_id == session)
            .count()
    };
    let first = h.upstream_saw("tools/call")[0].session_id.clone();
    assert_eq!(by_session(&first), 3);
    assert_eq!(h.proxy.live_sessions(), 2, "handles are sessions");
    h.stop().await;
}

#[tokio::test]
async fn a_handle_is_refused_to_another_caller_closes_and_then_is_unknown() {
    let h = Harness::with_config(handles).await;
    let mut alice = h
        .stateless_client()
        .with_header("authorization", "Bearer alice");
    let mut bob = h
        .stateless_client()
        .with_header("authorization", "Bearer bob");
    let handle = open(&mut alice).await;
    assert_eq!(
        text_of(&alice.call_tool("counter", json!({"session": handle})).await),
        "1"
    );

    let stolen = bob.call_tool("counter", json!({"session": handle})).await;
    assert_tool_error(&stolen, "does not exist");
    assert_tool_error(&stolen, "session_open");
    assert_tool_error(&close(&mut bob, &handle).await, "does not exist");
    assert_eq!(
        text_of(&alice.call_tool("counter", json!({"session": handle})).await),
        "2",
        "bob neither used nor closed it"
    );
    // Not through the data-layer path either.
    let mut bob_headers = reqwest::header::HeaderMap::new();
    bob_headers.insert("authorization", "Bearer bob".parse().unwrap());
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": in_session(json!({"name": "counter", "arguments": {}}), &handle, None)});
    let named = post_json(&h.http, &h.url(), &body, &bob_headers).await;
    assert_eq!(named.error_code(), Some(-32043), "{}", named.text);

    let closed = close(&mut alice, &handle).await;
    assert_eq!(closed["result"]["isError"], false, "{closed}");
    assert!(
        eventually(Duration::from_secs(5), || deletes(&h) >= 1).await,
        "the handle's upstream session is ended"
    );
    assert_tool_error(
        &alice.call_tool("counter", json!({"session": handle})).await,
        "does not exist",
    );
    assert_tool_error(&close(&mut alice, &handle).await, "does not exist");
    assert_eq!(h.proxy.live_sessions(), 0);
    h.stop().await;
}

#[tokio::test]
async fn its_caller_may_also_name_a_handle_as_a_data_layer_session() {
    let h = Harness::with_config(handles).await;
    let mut alice = h
        .stateless_client()
        .with_header("authorization", "Bearer alice");
    let handle = open(&mut alice).await;
    assert_eq!(
        text_of(&alice.call_tool("counter", json!({"session": handle})).await),
        "1"
    );
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", "Bearer alice".parse().unwrap());
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": in_session(json!({"name": "counter", "arguments": {}}), &handle, None)});
    let reply = post_json(&h.http, &h.url(), &body, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(text_of(&final_message(&reply)), "2");
    // And nobody else may end it with sessions/delete.
    let delete = json!({"jsonrpc": "2.0", "id": 10, "method": "sessions/delete",
        "params": in_session(json!({}), &handle, None)});
    let refused = h.post(&delete).await;
    assert_eq!(refused.error_code(), Some(-32043), "{}", refused.text);
    assert_eq!(
        text_of(&alice.call_tool("counter", json!({"session": handle})).await),
        "3"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_handle_expires_like_a_session() {
    let h = Harness::with_config(|c| {
        handles(c);
        c.session.idle_ttl = Duration::from_secs(1);
        c.session.reap_interval = Duration::from_millis(100);
    })
    .await;
    let mut c = h.stateless_client();
    let handle = open(&mut c).await;
    // Use renews it.
    for expected in ["1", "2", "3"] {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            text_of(&c.call_tool("counter", json!({"session": handle})).await),
            expected
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || h.proxy.live_sessions() == 0).await,
        "the idle handle did not expire"
    );
    assert!(
        eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await,
        "its upstream session was not ended"
    );
    let expired = c.call_tool("counter", json!({"session": handle})).await;
    assert_tool_error(&expired, "does not exist");
    assert_tool_error(&expired, "1s without use");
    let again = open(&mut c).await;
    assert_eq!(
        text_of(&c.call_tool("counter", json!({"session": again})).await),
        "1"
    );
    h.stop().await;
}

#[tokio::test]
async fn bad_handle_arguments_are_tool_errors() {
    let h = Harness::with_config(handles).await;
    let mut c = h.stateless_client();
    assert_tool_error(
        &c.call_tool("counter", json!({"session": 42})).await,
        "must be a session handle",
    );
    assert_tool_error(
        &c.call_tool("counter", json!({"session": "mcps_never-issued"}))
            .await,
        "does not exist",
    );
    let long = "x".repeat(10_000);
    let answer = c.call_tool("counter", json!({"session": long})).await;
    assert_tool_error(&answer, "does not exist");
    assert!(
        text_of(&answer).len() < 1000,
        "the handle is not echoed whole"
    );
    let missing = c.call_tool("session_close", json!({})).await;
    assert_tool_error(&missing, "needs the \"session\" argument");
    // `null` is no handle: the call runs on its own.
    assert_eq!(
        text_of(&c.call_tool("counter", json!({"session": null})).await),
        "1"
    );
    assert!(h.upstream_saw("tools/call").len() == 1);
    h.stop().await;
}

#[tokio::test]
async fn a_caller_holds_a_bounded_number_of_handles() {
    let h = Harness::with_config(|c| {
        c.stateless.affinity = Affinity::Handles {
            tools: HandleTools::default(),
            fallback: Fallback::Isolated,
            max_per_caller: 2,
        };
    })
    .await;
    let mut alice = h
        .stateless_client()
        .with_header("authorization", "Bearer alice");
    let first = open(&mut alice).await;
    open(&mut alice).await;
    let third = alice.call_tool("session_open", json!({})).await;
    assert_tool_error(&third, "2 sessions open");
    // Another caller: another address (unverified credentials share their address's
    // count, whatever they are).
    let mut bob = h
        .stateless_client()
        .with_header("authorization", "Bearer bob")
        .calling_from(OTHER_ADDRESS);
    open(&mut bob).await;
    let mut also_here = h
        .stateless_client()
        .with_header("authorization", "Bearer carol");
    let refused = also_here.call_tool("session_open", json!({})).await;
    assert_tool_error(&refused, "2 sessions open");
    close(&mut alice, &first).await;
    open(&mut alice).await;
    assert_eq!(h.proxy.live_sessions(), 3);
    h.stop().await;
}

#[tokio::test]
async fn a_handle_the_upstream_lost_is_a_tool_error_and_is_forgotten() {
    let h = Harness::with_config(handles).await;
    let mut c = h.stateless_client();
    let handle = open(&mut c).await;
    assert_eq!(
        text_of(&c.call_tool("counter", json!({"session": handle})).await),
        "1"
    );
    h.demo.forget_sessions();
    let lost = c.call_tool("counter", json!({"session": handle})).await;
    assert_tool_error(&lost, "the server lost it");
    assert_eq!(h.proxy.live_sessions(), 0, "the handle is forgotten");
    h.stop().await;
}

#[tokio::test]
async fn other_affinities_pass_the_handle_tools_to_the_upstream() {
    // Without handles mode the names mean nothing to the proxy: the upstream answers.
    let h = Harness::start().await;
    let reply = h
        .stateless_client()
        .request(
            "tools/call",
            json!({"name": "session_open", "arguments": {}}),
        )
        .await;
    assert_eq!(h.upstream_saw("tools/call").len(), 1, "{}", reply.text);
    h.stop().await;
}

#[tokio::test]
async fn tools_list_changed_still_reaches_listeners_in_handles_mode() {
    let h = Harness::with_config(handles).await;
    let mut listener = h.stateless_client();
    let response = listener
        .send(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    let mut stream = EventReader::new(response);
    let ack = stream.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    let mut trigger = h.stateless_client();
    trigger.call_tool("change_tools", json!({})).await;
    let change = stream.next().await.unwrap();
    assert_eq!(change["method"], "notifications/tools/list_changed");
    // Listing again after the change still shows the handle tools.
    let list = trigger.request("tools/list", json!({})).await.json();
    assert!(tool_names(&list).contains(&"session_open".to_owned()));
    h.stop().await;
}

#[tokio::test]
async fn discover_announces_data_layer_sessions_whatever_the_affinity() {
    type Configure = Box<dyn FnOnce(&mut Config)>;
    let modes: [Configure; 4] = [
        Box::new(|c: &mut Config| c.stateless.affinity = Affinity::Shared),
        Box::new(|c: &mut Config| c.stateless.affinity = Affinity::Isolated),
        Box::new(handles),
        Box::new(pinned(Some("x-conversation-id"))),
    ];
    for configure in modes {
        let h = Harness::with_config(configure).await;
        let reply = h
            .stateless_client()
            .request("server/discover", json!({}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(
            reply.json()["result"]["capabilities"]["sessions"],
            json!({})
        );
        h.stop().await;
    }
}
