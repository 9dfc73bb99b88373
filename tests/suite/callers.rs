//! Every session is bound to the caller that opened it: a data-layer session
//! (`sessions/create`), SEP-1364's `initialize` with a `sessionId`, an old client's
//! session of a stdio server (the proxy is its transport). Another caller —
//! other credentials, or none — gets exactly the answer an unknown session gets, for
//! every way of naming it (a request, a notification, `GET`, `DELETE`,
//! `sessions/delete`), with the memory store and with sealed ids; nothing it sends
//! reaches the session's upstream session.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a failure must stop the test loudly"
)]

use common::{Harness, Reply, SessionClient, assert, gauge, in_session, post_json};
use mcp_session_proxy::config::{Secret, StoreConfig};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// The stores whose binding is checked in-process (Redis: `tests/suite/replicas.rs`).
fn stores() -> [(&'static str, StoreConfig); 2] {
    [
        ("memory", StoreConfig::Memory),
        (
            "sealed",
            StoreConfig::Sealed {
                keys: vec![Secret(vec![7; 32])],
            },
        ),
    ]
}

/// `reply`, with the session id it names replaced, as text: two answers that differ only
/// by the session they name are the same answer.
fn shape(reply: &Reply, session_id: &str) -> (u16, String) {
    (reply.status, reply.text.replace(session_id, "SESSION"))
}

/// A session id of the same shape that no proxy issued.
fn unknown_like(session_id: &str) -> String {
    let mut unknown = session_id.to_owned();
    let last = if unknown.ends_with('A') { "B" } else { "A" };
    unknown.replace_range(unknown.len() - 1.., last);
    unknown
}

/// Everything `stranger` can do with a session id: the answers, in order.
async fn try_everything(h: &Harness, stranger: &SessionClient, state: Option<&str>) -> Vec<Reply> {
    let id = stranger.session_id();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": in_session(json!({"name": "counter", "arguments": {}}), id, state)});
    let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list",
        "params": in_session(json!({}), id, state)});
    let delete = json!({"jsonrpc": "2.0", "id": 9, "method": "sessions/delete",
        "params": in_session(json!({}), id, state)});
    let sep1364 = json!({"jsonrpc": "2.0", "id": 10, "method": "initialize", "sessionId": id,
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
    let mut replies = Vec::new();
    for body in [&call, &list, &delete, &sep1364] {
        replies.push(post_json(&h.http, &h.url(), body, &stranger.headers()).await);
    }
    let get = h
        .http
        .get(h.url())
        .headers(stranger.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    replies.push(Reply::read(get).await);
    let delete = h
        .http
        .delete(h.url())
        .headers(stranger.headers())
        .send()
        .await
        .unwrap();
    replies.push(Reply::read(delete).await);
    replies
}

/// `who`, naming `session_id` (and its state).
fn naming(
    h: &Harness,
    who: Option<(&'static str, &str)>,
    session_id: &str,
    state: Option<&str>,
) -> SessionClient {
    let mut client = h.client();
    if let Some((name, value)) = who {
        client = client.with_header(name, value);
    }
    client.session_id = Some(session_id.to_owned());
    client.state = state.map(str::to_owned);
    client
}

#[tokio::test]
async fn a_session_serves_only_its_caller_and_strangers_hear_it_does_not_exist() {
    for (store, config) in stores() {
        let h = Harness::with_config(|c| c.session.store = config).await;
        let mut alice = h.client().with_header("authorization", "Bearer alice");
        alice.create().await;
        assert_eq!(alice.tool_text("counter", json!({})).await, "1", "{store}");
        let id = alice.session_id().to_owned();
        let state = alice.state.clone();
        let upstream_before = h.upstream_posts().len();

        // What a session id that never existed gets, asked every way.
        let unknown = unknown_like(&id);
        let nobody = try_everything(
            &h,
            &naming(&h, Some(("authorization", "Bearer bob")), &unknown, None),
            None,
        )
        .await;
        for reply in &nobody {
            if reply.status != 204 {
                assert::assert_session_not_found(reply, &unknown);
            }
        }

        let strangers = [
            Some(("authorization", "Bearer bob")),
            None,
            Some(("cookie", "sid=alice")),
            Some(("x-api-key", "alice")),
        ];
        for who in strangers {
            // With alice's own latest state, with a forged one, and with none.
            for state in [state.as_deref(), Some("AQAAAAAAAAAAforged"), None] {
                let stranger = naming(&h, who, &id, state);
                let replies = try_everything(&h, &stranger, state).await;
                let unknown_ones =
                    try_everything(&h, &naming(&h, who, &unknown, state), state).await;
                for (i, (reply, expected)) in replies.iter().zip(&unknown_ones).enumerate() {
                    assert_eq!(
                        shape(reply, &id),
                        shape(expected, &unknown),
                        "{store}: {who:?} with state {state:?}, attempt {i}: not the unknown session's answer"
                    );
                    assert_eq!(
                        reply.status, 404,
                        "{store}: {who:?}, attempt {i}: {}",
                        reply.text
                    );
                }
            }
        }
        assert_eq!(
            h.upstream_posts().len(),
            upstream_before,
            "{store}: nothing a stranger sent reached the upstream"
        );
        // Refusals are counted (each stranger, state and way: 4 × 3 × 6).
        assert_eq!(
            gauge(&h.proxy, "mcp_proxy_sessions_other_caller_total").await,
            Some(72),
            "{store}"
        );

        // Alice's session carries on where it was; nobody else used it.
        assert_eq!(alice.tool_text("counter", json!({})).await, "2", "{store}");
        // Her refreshed-but-identical credentials are her; she ends it.
        assert_eq!(alice.delete().await.status, 200, "{store}");
        h.stop().await;
    }
}

#[tokio::test]
async fn a_session_opened_without_credentials_is_not_anyones() {
    for (store, config) in stores() {
        let h = Harness::with_config(|c| c.session.store = config).await;
        let mut anonymous = h.client();
        anonymous.create().await;
        assert_eq!(anonymous.tool_text("counter", json!({})).await, "1");
        let id = anonymous.session_id().to_owned();
        let alice = naming(&h, Some(("authorization", "Bearer alice")), &id, None);
        for reply in try_everything(&h, &alice, None).await {
            assert::assert_session_not_found(&reply, &id);
        }
        assert_eq!(
            anonymous.tool_text("counter", json!({})).await,
            "2",
            "{store}"
        );
        h.stop().await;
    }
}

#[tokio::test]
async fn a_stranger_never_reaches_the_upstream_session_with_its_own_credentials() {
    let h = Harness::start().await;
    let mut alice = h.client().with_header("authorization", "Bearer alice");
    alice.create().await;
    alice.tool_text("counter", json!({})).await;
    let bob = naming(
        &h,
        Some(("authorization", "Bearer bob")),
        alice.session_id(),
        None,
    );
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": in_session(json!({"name": "counter", "arguments": {}}), bob.session_id(), None)});
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": in_session(json!({"progressToken": "p", "progress": 1}), bob.session_id(), None)});
    for body in [&call, &notification] {
        let reply = post_json(&h.http, &h.url(), body, &bob.headers()).await;
        assert_eq!(reply.status, 404, "{}", reply.text);
    }
    let seen: Vec<Option<String>> = h
        .upstream_posts()
        .into_iter()
        .filter(|r| r.session_id.is_some())
        .map(|r| r.authorization)
        .collect();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|a| a.as_deref() == Some("Bearer alice")),
        "the upstream session saw only alice's credentials: {seen:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn sep1364_sessions_are_bound_too() {
    let h = Harness::start().await;
    let open = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "sessionId": null,
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
    let mut alice_headers = HeaderMap::new();
    alice_headers.insert("authorization", "Bearer alice".parse().unwrap());
    let opened = post_json(&h.http, &h.url(), &open, &alice_headers).await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    let id = opened.json()["sessionId"].as_str().unwrap().to_owned();
    let call = |session: &str| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "sessionId": session,
            "params": {"name": "counter", "arguments": {}}})
    };
    let mine = post_json(&h.http, &h.url(), &call(&id), &alice_headers).await;
    assert_eq!(mine.status, 200, "{}", mine.text);
    let mut bob_headers = HeaderMap::new();
    bob_headers.insert("authorization", "Bearer bob".parse().unwrap());
    let again: Value = json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "sessionId": id,
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
    for body in [
        call(&id),
        again,
        json!({"jsonrpc": "2.0", "id": 4, "method": "terminate", "sessionId": id}),
    ] {
        let reply = post_json(&h.http, &h.url(), &body, &bob_headers).await;
        assert::assert_session_not_found(&reply, &id);
    }
    let still = post_json(&h.http, &h.url(), &call(&id), &alice_headers).await;
    assert_eq!(
        common::final_message(&still)["result"]["content"][0]["text"],
        "2"
    );
    h.stop().await;
}

#[tokio::test]
async fn an_old_clients_session_of_a_stdio_server_is_bound_too() {
    use common::procs::{Marker, assert_nothing_left};
    use common::stdio::{StdioProxy, misbehaving, stdio_config};
    let marker = Marker::new("callers-legacy");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let http = common::http_client();
    let mut alice = HeaderMap::new();
    alice.insert("authorization", "Bearer alice".parse().unwrap());
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let opened = post_json(&http, &proxy.url(), &initialize, &alice).await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    let id = opened.header("mcp-session-id").unwrap().to_owned();
    alice.insert("mcp-session-id", id.parse().unwrap());
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "mine"}}});
    let mine = post_json(&http, &proxy.url(), &call, &alice).await;
    assert_eq!(
        common::final_message(&mine)["result"]["content"][0]["text"],
        "mine"
    );
    let mut bob = alice.clone();
    bob.insert("authorization", "Bearer bob".parse().unwrap());
    let mut nobody = alice.clone();
    nobody.remove("authorization");
    for stranger in [&bob, &nobody] {
        assert::assert_session_not_found(
            &post_json(&http, &proxy.url(), &call, stranger).await,
            &id,
        );
        let ended = http
            .delete(proxy.url())
            .headers(stranger.clone())
            .send()
            .await
            .unwrap();
        assert::assert_session_not_found(&Reply::read(ended).await, &id);
    }
    let still = post_json(&http, &proxy.url(), &call, &alice).await;
    assert_eq!(
        common::final_message(&still)["result"]["content"][0]["text"],
        "mine"
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}
