//! A client that walks away at each step of the upstream handshake, for every kind of
//! call that opens an upstream session: whatever was opened upstream is ended, and no
//! place under a bound is lost.
//!
//! The upstream is the rogue server (`common::rogue`), holding one step of every session:
//! its `initialize` unanswered (nothing exists upstream yet), or its session issued and
//! `notifications/initialized` unacknowledged (the session exists; only the proxy knows
//! it). Three clients give up waiting (their requests time out and their connections
//! close) against a bound of three places; then the hold is released, every session the
//! upstream issued must be ended, and the next call must still find a place.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::rogue::{Rogue, Step};
use common::{StatelessClient, config_for, eventually, http_client};
use http::HeaderMap;
use mcp_session_proxy::config::{Config, OnSessionLost};
use serde_json::{Value, json};

/// The kinds of call that open an upstream session.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `sessions/create` (a data-layer session), under `session.max_sessions`.
    Create,
    /// A 2026-07-28 call on a session of its own (`isolated`), under `max_pooled`.
    Isolated,
    /// A 2026-07-28 call on a pooled session (`shared`), under `max_pooled`.
    Shared,
    /// A 2026-07-28 call on the session pinned to its conversation (`pinned`).
    Pinned,
    /// `subscriptions/listen`, under `stateless.max_listens`.
    Listen,
}

const PLACES: usize = 3;
/// How long a client waits before it walks away.
const PATIENCE: Duration = Duration::from_millis(300);

fn configure(kind: Kind, config: &mut Config) {
    config.session.max_sessions = PLACES;
    config.session.max_sessions_per_caller = 0;
    config.stateless.max_pooled = PLACES;
    config.stateless.max_listens = PLACES;
    match kind {
        Kind::Shared => config.stateless.affinity = mcp_session_proxy::config::Affinity::Shared,
        Kind::Pinned => common::affinity::pinned(Some("x-conversation-id"))(config),
        Kind::Create | Kind::Isolated | Kind::Listen => {}
    }
}

/// The request of `kind` (its body, its headers), the `n`th of its test.
fn request(kind: Kind, n: usize) -> (Value, HeaderMap) {
    let client = StatelessClient::new(String::new());
    let (method, params) = match kind {
        Kind::Create => {
            let body = json!({"jsonrpc": "2.0", "id": n, "method": "sessions/create"});
            return (body, HeaderMap::new());
        }
        Kind::Listen => (
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        ),
        Kind::Isolated | Kind::Shared | Kind::Pinned => {
            ("tools/call", json!({"name": "fine", "arguments": {}}))
        }
    };
    let params = client.params(params);
    let mut headers = StatelessClient::headers(method, &params);
    if let Kind::Pinned = kind {
        // Each walk-away its own conversation: each opens a pin of its own.
        headers.insert("x-conversation-id", n.to_string().parse().unwrap());
    }
    let body = json!({"jsonrpc": "2.0", "id": n, "method": method, "params": params});
    (body, headers)
}

/// Sends the request and gives up after `PATIENCE`, closing the connection.
async fn walk_away(url: &str, (body, headers): (Value, HeaderMap)) {
    let sent = http_client()
        .post(url)
        .headers(headers)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .timeout(PATIENCE)
        .body(body.to_string())
        .send()
        .await;
    assert!(
        sent.is_err(),
        "the upstream holds the handshake: the request cannot have been answered"
    );
}

async fn abandoned_at(kind: Kind, step: Step) {
    let rogue = Rogue::start().await;
    let mut config = config_for(&rogue.url());
    configure(kind, &mut config);
    let proxy = mcp_session_proxy::start(config).await.unwrap();
    let url = proxy.url();

    rogue.hold(step);
    for n in 1..=PLACES {
        walk_away(&url, request(kind, n)).await;
    }
    match step {
        Step::Initialize => {
            assert_eq!(rogue.sessions_opened(), 0, "{kind:?}: nothing opened yet");
            rogue.release_refusing_held();
        }
        _ => rogue.release(),
    }
    assert!(
        eventually(Duration::from_secs(5), || rogue.live_sessions() == 0).await,
        "{kind:?} at {step:?}: every upstream session opened for a client that left is \
         ended ({} left of {} opened)",
        rogue.live_sessions(),
        rogue.sessions_opened()
    );

    // Every place came back: the next call is served (a listen's answer is a stream
    // that stays open, so only its head is read).
    let (body, headers) = request(kind, PLACES + 1);
    let response = http_client()
        .post(&url)
        .headers(headers)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        200,
        "{kind:?} at {step:?}: a call after {PLACES} walked away"
    );
    drop(response);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_create_abandoned_during_the_handshake_leaks_nothing() {
    abandoned_at(Kind::Create, Step::Initialize).await;
    abandoned_at(Kind::Create, Step::Initialized).await;
}

#[tokio::test]
async fn an_isolated_call_abandoned_during_the_handshake_gives_its_place_back() {
    abandoned_at(Kind::Isolated, Step::Initialize).await;
    abandoned_at(Kind::Isolated, Step::Initialized).await;
}

#[tokio::test]
async fn a_shared_call_abandoned_during_the_handshake_gives_its_place_back() {
    abandoned_at(Kind::Shared, Step::Initialize).await;
    abandoned_at(Kind::Shared, Step::Initialized).await;
}

#[tokio::test]
async fn a_pin_abandoned_while_it_opens_leaks_nothing() {
    abandoned_at(Kind::Pinned, Step::Initialize).await;
    abandoned_at(Kind::Pinned, Step::Initialized).await;
}

#[tokio::test]
async fn a_listen_abandoned_during_the_handshake_gives_its_place_back() {
    abandoned_at(Kind::Listen, Step::Initialize).await;
    abandoned_at(Kind::Listen, Step::Initialized).await;
}

/// A session whose upstream lost it is reinitialized by its next request; that request's
/// client walks away while the new upstream session opens.
#[tokio::test]
async fn a_reinitialize_abandoned_half_way_leaks_nothing() {
    for step in [Step::Initialize, Step::Initialized] {
        let rogue = Rogue::start().await;
        let mut config = config_for(&rogue.url());
        config.upstream.on_session_lost = OnSessionLost::Reinitialize;
        let proxy = mcp_session_proxy::start(config).await.unwrap();
        let mut client = common::SessionClient::new(proxy.url());
        client.create().await;
        rogue.forget_sessions();

        rogue.hold(step);
        for n in 1..=PLACES {
            let body = client.message(json!(n), "tools/list", json!({}));
            walk_away(&proxy.url(), (body, client.headers())).await;
        }
        match step {
            Step::Initialize => rogue.release_refusing_held(),
            _ => rogue.release(),
        }
        assert!(
            eventually(Duration::from_secs(5), || rogue.live_sessions() == 0).await,
            "at {step:?}: {} upstream sessions left",
            rogue.live_sessions()
        );
        let reply = client.request("tools/list", json!({})).await;
        assert_eq!(reply.status, 200, "at {step:?}: {}", reply.text);
        assert_eq!(rogue.live_sessions(), 1, "one reinitialized session");
        proxy.shutdown().await;
    }
}
