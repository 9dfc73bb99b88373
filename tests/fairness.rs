//! Fairness between callers: one caller cannot take every session. Its live upstream
//! sessions are capped (`session.max_sessions_per_caller`) and so are its creations a
//! minute (`session.creations_per_caller_per_minute`): beyond either it hears HTTP 429
//! with `Retry-After` and a JSON-RPC error naming the limit, while other callers — other
//! credentials, or no credentials from another address — carry on. Deletes and expiry
//! give places back. Every way of opening an upstream session for a caller counts:
//! `sessions/create`, SEP-1364's `initialize`, and a stateless client's pinned sessions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::*;
use mcp_session_proxy::config::{Affinity, Fallback};
use mcp_session_proxy::upstream::PinSettings;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

/// `sessions/create` as `who`, with JSON-RPC id `id`.
async fn create(h: &Harness, who: &HeaderMap, id: u64) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create"});
    post_json(&h.http, &h.url(), &body, who).await
}

/// The sessionId of a successful create.
fn created(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()["result"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn delete(h: &Harness, who: &HeaderMap, session_id: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "sessions/delete",
        "params": in_session(json!({}), session_id, None)});
    let reply = post_json(&h.http, &h.url(), &body, who).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// `Retry-After` in seconds.
fn retry_after(reply: &Reply) -> u64 {
    reply
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {reply:?}"))
        .parse()
        .unwrap()
}

/// The refusal of request `id` by the limit `key` of value `max`: HTTP 429, `Retry-After`,
/// and the error saying which limit and its value.
fn assert_refused(reply: &Reply, id: u64, key: &str, max: u64) {
    assert_eq!(reply.status, 429, "{}", reply.text);
    assert!(retry_after(reply) >= 1);
    let body = reply.json();
    assert_eq!(body["id"], id, "the error answers the request: {body}");
    let error = &body["error"];
    assert_eq!(error["code"], -32603);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(key), "{message}");
    assert!(message.contains(&max.to_string()), "{message}");
    assert_eq!(error["data"]["limit"], key);
    assert_eq!(error["data"]["max"], max);
    assert_eq!(error["data"]["retryAfterSeconds"], retry_after(reply));
}

async fn metrics(h: &Harness) -> String {
    let url = format!("http://{}/metrics", h.proxy.local_addr());
    h.http.get(url).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn a_caller_at_its_cap_hears_429_while_others_create_and_a_delete_gives_a_place_back() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 3;
        c.session.creations_per_caller_per_minute = 0;
    })
    .await;
    let (alice, bob) = (bearer("alice"), bearer("bob"));
    let mut hers = Vec::new();
    for id in 1..=3 {
        hers.push(created(&create(&h, &alice, id).await));
    }
    let refused = create(&h, &alice, 4).await;
    assert_refused(&refused, 4, "session.max_sessions_per_caller", 3);
    assert_eq!(
        h.demo.live_sessions(),
        3,
        "no upstream session opened for a refused create"
    );
    // SEP-1364's initialize opens a session too: refused the same way.
    let initialize = json!({"jsonrpc": "2.0", "id": 5, "sessionId": null, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "alice", "version": "1"}}});
    let refused = post_json(&h.http, &h.url(), &initialize, &alice).await;
    assert_refused(&refused, 5, "session.max_sessions_per_caller", 3);

    // Others are not shut out: other credentials, and no credentials (by address).
    for id in 10..13 {
        created(&create(&h, &bob, id).await);
    }
    created(&create(&h, &HeaderMap::new(), 20).await);
    assert_eq!(h.demo.live_sessions(), 7);

    // A delete gives a place back.
    delete(&h, &alice, &hers[0]).await;
    created(&create(&h, &alice, 6).await);
    assert_eq!(create(&h, &alice, 7).await.status, 429);
    let text = metrics(&h).await;
    assert!(
        text.contains("mcp_proxy_caller_refusals_total{limit=\"max_sessions_per_caller\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("mcp_proxy_sessions_rejected_total{reason=\"caller_limit\"} 3"),
        "{text}"
    );
    h.stop().await;
}

#[tokio::test]
async fn an_expired_session_gives_its_place_back() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 1;
        c.session.creations_per_caller_per_minute = 0;
        c.session.idle_ttl = Duration::from_secs(1);
        c.session.reap_interval = Duration::from_millis(100);
    })
    .await;
    let alice = bearer("alice");
    created(&create(&h, &alice, 1).await);
    let refused = create(&h, &alice, 2).await;
    assert_refused(&refused, 2, "session.max_sessions_per_caller", 1);
    assert!(
        retry_after(&refused) <= 1,
        "the hint is when its session expires"
    );
    // Unused, the session expires and is reaped: the place is free again.
    let back = eventually_async(Duration::from_secs(10), || async {
        create(&h, &alice, 3).await.status == 200
    })
    .await;
    assert!(back, "the expired session never gave its place back");
    h.stop().await;
}

#[tokio::test]
async fn creations_beyond_the_rate_hear_when_the_next_may_open() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 0;
        c.session.creations_per_caller_per_minute = 2;
    })
    .await;
    let alice = bearer("alice");
    // Deleting does not give a creation back: the rate counts openings.
    for id in 1..=2 {
        let session = created(&create(&h, &alice, id).await);
        delete(&h, &alice, &session).await;
    }
    let refused = create(&h, &alice, 3).await;
    assert_refused(&refused, 3, "session.creations_per_caller_per_minute", 2);
    // Two a minute: the next one 30 s after the last.
    let wait = retry_after(&refused);
    assert!((29..=30).contains(&wait), "Retry-After: {wait}");
    assert_eq!(h.demo.live_sessions(), 0);
    // Another caller has its own minute.
    created(&create(&h, &bearer("bob"), 4).await);
    let text = metrics(&h).await;
    assert!(
        text.contains(
            "mcp_proxy_caller_refusals_total{limit=\"creations_per_caller_per_minute\"} 1"
        ),
        "{text}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_stateless_callers_pinned_sessions_count_against_its_cap() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 2;
        c.session.creations_per_caller_per_minute = 0;
        c.stateless.affinity = Affinity::Pinned {
            header: Some(http::HeaderName::from_static("x-conversation-id")),
            fallback: Fallback::Isolated,
            limits: PinSettings {
                max_pinned: 100,
                idle_ttl: Duration::from_secs(60),
            },
        };
    })
    .await;
    let call = |who: &'static str, conversation: &str| {
        let mut client = StatelessClient::new(h.url())
            .with_header("authorization", who)
            .with_header("x-conversation-id", conversation);
        async move {
            client
                .request("tools/call", json!({"name": "counter", "arguments": {}}))
                .await
        }
    };
    // One data-layer session and one pin fill alice's two places.
    created(&create(&h, &bearer("alice"), 1).await);
    let first = call("Bearer alice", "c1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    // The same conversation opens nothing new: served.
    assert_eq!(call("Bearer alice", "c1").await.status, 200);
    let refused = call("Bearer alice", "c2").await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert!(retry_after(&refused) >= 1);
    let error: Value = refused.json()["error"].clone();
    assert_eq!(error["data"]["limit"], "session.max_sessions_per_caller");
    // Bob's conversations are his own.
    assert_eq!(call("Bearer bob", "c2").await.status, 200);
    h.stop().await;
}

#[tokio::test]
async fn a_handle_beyond_the_callers_cap_is_a_tool_error_naming_the_limit() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 1;
        c.session.creations_per_caller_per_minute = 0;
        c.stateless.affinity = Affinity::Handles {
            tools: mcp_session_proxy::rewrite::handles::HandleTools::default(),
            fallback: Fallback::Isolated,
            max_per_caller: 16,
        };
    })
    .await;
    let open = |who: &'static str| {
        let mut client = StatelessClient::new(h.url()).with_header("authorization", who);
        async move {
            let reply = client
                .request(
                    "tools/call",
                    json!({"name": "session_open", "arguments": {}}),
                )
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            reply.json()
        }
    };
    // Alice's one place is taken by a data-layer session: her handle is refused, as a
    // result the model can read.
    created(&create(&h, &bearer("alice"), 1).await);
    let refused = open("Bearer alice").await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let text = common::assert::text_of(&refused);
    assert!(text.contains("session.max_sessions_per_caller"), "{text}");
    assert_eq!(h.proxy.live_sessions(), 1);
    let opened = open("Bearer bob").await;
    assert_eq!(opened["result"]["isError"], false, "{opened}");
    h.stop().await;
}
