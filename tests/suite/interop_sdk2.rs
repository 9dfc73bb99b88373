//! Real MCP 2026-07-28 clients — the official Python SDK 2.x, `Client(url, mode="auto")`,
//! each in its own process — through the proxy in front of a real stateful legacy server:
//! the FastMCP fixture (Python SDK 1.x, Streamable HTTP), whose `counter` tool counts the
//! calls of each upstream session and whose `whoami` tool names it. Two conversations run
//! at once and their calls are strictly interleaved, so a session shared between them
//! would show: with `shared`, one caller's conversations count 1, 3, 5 and 2, 4, 6; with
//! `isolated`, `pinned` and `handles` each keeps its own state. The same affinities
//! before the fixture run as a stdio child per session.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::collections::HashSet;
use std::time::Duration;

use common::affinity::{handles, pinned};
use common::eventually;
use common::interop::{Interop, Sdk2Client, fastmcp};
use common::procs::Marker;
use common::stdio::{StdioProxy, fastmcp as fastmcp_stdio, stdio_config};
use mcp_session_proxy::config::Affinity;
use serde_json::{Value, json};

/// Opens a handle for `client` (`session_open`): its tool result names it, in its
/// structured content and in its text.
async fn open_handle(client: &mut Sdk2Client) -> String {
    let opened = client.call("session_open", json!({})).await;
    assert_eq!(opened["isError"], false, "{opened}");
    let handle = opened["structured"]["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_owned();
    assert!(
        opened["text"].as_str().unwrap().contains(&handle),
        "{opened}"
    );
    handle
}

/// `a` and `b` each open a handle and count on it, their calls strictly interleaved:
/// each sees its own calls only. Their handles.
async fn each_counts_on_its_own_handle(a: &mut Sdk2Client, b: &mut Sdk2Client) -> (String, String) {
    let handle_a = open_handle(a).await;
    let handle_b = open_handle(b).await;
    let (seen_a, seen_b) = interleaved(
        a,
        b,
        3,
        (json!({"session": handle_a}), json!({"session": handle_b})),
    )
    .await;
    assert_eq!(seen_a, ["1", "2", "3"]);
    assert_eq!(seen_b, ["1", "2", "3"]);
    (handle_a, handle_b)
}

/// `rounds` counter calls of `a` and `b`, strictly alternating (a, b, a, b, …); what
/// each saw.
async fn interleaved(
    a: &mut Sdk2Client,
    b: &mut Sdk2Client,
    rounds: usize,
    arguments: (Value, Value),
) -> (Vec<String>, Vec<String>) {
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        seen_a.push(a.text("counter", arguments.0.clone()).await);
        seen_b.push(b.text("counter", arguments.1.clone()).await);
    }
    (seen_a, seen_b)
}

#[tokio::test]
async fn shared_lets_one_callers_conversations_share_state_but_never_another_callers() {
    let i = Interop::start_with(fastmcp(&[]).await, |c| {
        c.stateless.affinity = Affinity::Shared
    })
    .await;
    let mut a = Sdk2Client::connect(&i.url(), &[]).await;
    let mut b = Sdk2Client::connect(&i.url(), &[]).await;
    assert_eq!(
        a.protocol_version, "2026-07-28",
        "the SDK took the stateless protocol"
    );
    // What the issue reported: two conversations without credentials on one pooled
    // upstream session. This is what "shared" means, and why it is not the default.
    let (seen_a, seen_b) = interleaved(&mut a, &mut b, 3, (json!({}), json!({}))).await;
    assert_eq!(seen_a, ["1", "3", "5"]);
    assert_eq!(seen_b, ["2", "4", "6"]);

    // Callers with different credentials never share, whatever the affinity.
    let mut alice = Sdk2Client::connect(&i.url(), &["Authorization: Bearer alice"]).await;
    let mut bob = Sdk2Client::connect(&i.url(), &["Authorization: Bearer bob"]).await;
    let (seen_alice, seen_bob) = interleaved(&mut alice, &mut bob, 3, (json!({}), json!({}))).await;
    assert_eq!(seen_alice, ["1", "2", "3"]);
    assert_eq!(seen_bob, ["1", "2", "3"]);
    for client in [a, b, alice, bob] {
        client.exit().await;
    }
    i.stop().await;
}

#[tokio::test]
async fn isolated_gives_every_call_a_fresh_upstream_session() {
    // The default affinity.
    let i = Interop::start(fastmcp(&[]).await).await;
    let mut a = Sdk2Client::connect(&i.url(), &[]).await;
    let mut b = Sdk2Client::connect(&i.url(), &[]).await;
    let (seen_a, seen_b) = interleaved(&mut a, &mut b, 3, (json!({}), json!({}))).await;
    assert_eq!(seen_a, ["1", "1", "1"]);
    assert_eq!(seen_b, ["1", "1", "1"]);
    let mut upstream_sessions = HashSet::new();
    for _ in 0..3 {
        upstream_sessions.insert(a.text("whoami", json!({})).await);
        upstream_sessions.insert(b.text("whoami", json!({})).await);
    }
    assert_eq!(upstream_sessions.len(), 6, "{upstream_sessions:?}");
    a.exit().await;
    b.exit().await;
    i.stop().await;
}

#[tokio::test]
async fn pinned_keeps_one_upstream_session_per_conversation() {
    let i = Interop::start_with(fastmcp(&[]).await, pinned(Some("x-conversation-id"))).await;
    let mut a = Sdk2Client::connect(&i.url(), &["X-Conversation-Id: conversation-a"]).await;
    let mut b = Sdk2Client::connect(&i.url(), &["X-Conversation-Id: conversation-b"]).await;
    let (seen_a, seen_b) = interleaved(&mut a, &mut b, 3, (json!({}), json!({}))).await;
    assert_eq!(seen_a, ["1", "2", "3"]);
    assert_eq!(seen_b, ["1", "2", "3"]);
    let who_a = a.text("whoami", json!({})).await;
    assert_eq!(
        a.text("whoami", json!({})).await,
        who_a,
        "one session all along"
    );
    assert_ne!(b.text("whoami", json!({})).await, who_a);

    // The same conversation id with other credentials is another conversation; a client
    // reconnecting with the same id and credentials finds its state again.
    let mut intruder = Sdk2Client::connect(
        &i.url(),
        &[
            "X-Conversation-Id: conversation-a",
            "Authorization: Bearer mallory",
        ],
    )
    .await;
    assert_eq!(intruder.text("counter", json!({})).await, "1");
    a.exit().await;
    let mut a_again = Sdk2Client::connect(&i.url(), &["X-Conversation-Id: conversation-a"]).await;
    assert_eq!(a_again.text("counter", json!({})).await, "4");
    for client in [a_again, b, intruder] {
        client.exit().await;
    }
    i.stop().await;
}

#[tokio::test]
async fn handles_keep_state_survive_calls_are_refused_to_others_close_and_expire() {
    let i = Interop::start_with(fastmcp(&[]).await, |c| {
        handles(c);
        c.session.idle_ttl = Duration::from_secs(3);
        c.session.reap_interval = Duration::from_millis(100);
    })
    .await;
    let mut a = Sdk2Client::connect(&i.url(), &["Authorization: Bearer alice"]).await;
    let mut b = Sdk2Client::connect(&i.url(), &["Authorization: Bearer bob"]).await;

    // What the SDK sees: the two tools, and an optional `session` on every tool.
    let listed = a.list().await;
    let tools = listed["tools"].as_array().unwrap();
    let find = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    assert_eq!(find("session_open")["properties"], json!([]));
    assert_eq!(find("session_close")["required"], json!(["session"]));
    let counter = find("counter");
    assert_eq!(counter["properties"], json!(["session"]));
    assert_eq!(counter["required"], json!([]));
    assert_eq!(find("echo")["required"], json!(["msg"]));

    let (handle_a, handle_b) = each_counts_on_its_own_handle(&mut a, &mut b).await;
    // Without a handle the call runs on its own; the handle's state survives it.
    assert_eq!(a.text("counter", json!({})).await, "1");
    assert_eq!(a.text("counter", json!({"session": handle_a})).await, "4");

    // Bob cannot use or close Alice's handle: a tool error result, not an exception.
    let stolen = b.call("counter", json!({"session": handle_a})).await;
    assert_eq!(stolen["isError"], true, "{stolen}");
    assert!(
        stolen["text"].as_str().unwrap().contains("does not exist"),
        "{stolen}"
    );
    let closed_by_bob = b.call("session_close", json!({"session": handle_a})).await;
    assert_eq!(closed_by_bob["isError"], true, "{closed_by_bob}");
    assert_eq!(a.text("counter", json!({"session": handle_a})).await, "5");

    // Alice closes hers; it is gone.
    a.text("session_close", json!({"session": handle_a})).await;
    let after = a.call("counter", json!({"session": handle_a})).await;
    assert_eq!(after["isError"], true, "{after}");

    // Bob's, left alone, expires like a session (session.idle_ttl).
    assert!(
        eventually(Duration::from_secs(10), || i.proxy.live_sessions() == 0).await,
        "the idle handle did not expire"
    );
    let expired = b.call("counter", json!({"session": handle_b})).await;
    assert_eq!(expired["isError"], true, "{expired}");
    assert!(expired["text"].as_str().unwrap().contains("session_open"));
    a.exit().await;
    b.exit().await;
    i.stop().await;
}

#[tokio::test]
async fn stdio_upstreams_get_a_child_per_call_pin_and_handle() {
    let marker = Marker::new("sdk2-stdio");
    let children = |proxy: &StdioProxy| proxy.children().len();

    // Pinned: a child per conversation (plus the one server/discover reads, pooled).
    let mut config = stdio_config(fastmcp_stdio(&marker));
    pinned(Some("x-conversation-id"))(&mut config);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = Sdk2Client::connect(&proxy.url(), &["X-Conversation-Id: a"]).await;
    let mut b = Sdk2Client::connect(&proxy.url(), &["X-Conversation-Id: b"]).await;
    let (seen_a, seen_b) = interleaved(&mut a, &mut b, 3, (json!({}), json!({}))).await;
    assert_eq!(seen_a, ["1", "2", "3"]);
    assert_eq!(seen_b, ["1", "2", "3"]);
    assert_eq!(
        children(&proxy),
        3,
        "two pins and the pooled discovery session"
    );
    a.exit().await;
    b.exit().await;
    proxy.shutdown().await;
    assert!(eventually(Duration::from_secs(10), || marker_gone(&marker)).await);

    // Handles: a child per handle, stopped when it closes; isolated calls beside them.
    let mut config = stdio_config(fastmcp_stdio(&marker));
    handles(&mut config);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = Sdk2Client::connect(&proxy.url(), &[]).await;
    let mut b = Sdk2Client::connect(&proxy.url(), &[]).await;
    let (handle_a, handle_b) = each_counts_on_its_own_handle(&mut a, &mut b).await;
    // Without a handle, a child of its own per call.
    assert_eq!(a.text("counter", json!({})).await, "1");
    assert_eq!(a.text("counter", json!({})).await, "1");
    assert!(
        eventually(Duration::from_secs(10), || children(&proxy) == 3).await,
        "two handles and the pooled discovery session: {} children",
        children(&proxy)
    );
    a.text("session_close", json!({"session": handle_a})).await;
    assert!(
        eventually(Duration::from_secs(10), || children(&proxy) == 2).await,
        "the closed handle's child was not stopped: {} children",
        children(&proxy)
    );
    assert_eq!(b.text("counter", json!({"session": handle_b})).await, "4");
    a.exit().await;
    b.exit().await;
    proxy.shutdown().await;
    assert!(eventually(Duration::from_secs(10), || marker_gone(&marker)).await);
}

fn marker_gone(marker: &Marker) -> bool {
    common::procs::marked(marker).is_empty()
}
