//! Fairness between callers: one caller cannot take every session. Its live upstream
//! sessions are capped (`session.max_sessions_per_caller`) and so are its creations a
//! minute (`session.creations_per_caller_per_minute`): beyond either it hears HTTP 429
//! with `Retry-After` and a JSON-RPC error naming the limit, while other callers carry
//! on. Deletes and expiry give places back. Every way of opening an upstream session for
//! a caller counts: `sessions/create`, SEP-1364's `initialize`, and a stateless client's
//! pinned sessions and handles.
//!
//! A caller is a verified subject (`[auth]`), else the client's address: credentials the
//! proxy does not verify (`Authorization`, `Cookie`, `X-Api-Key` without `[auth]`) cost
//! nothing to make up, so they share their address's budget, however many there are,
//! while still binding the sessions they open. "Another caller" below is therefore
//! another client address (`OTHER_ADDRESS`, 127.0.0.2) or another verified subject.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::*;
use mcp_session_proxy::config::{Affinity, Fallback};
use mcp_session_proxy::upstream::PinSettings;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

/// A client from another address than the harness's own clients (a caller of its own).
fn elsewhere() -> reqwest::Client {
    http_client_from(OTHER_ADDRESS)
}

/// An `X-Api-Key` nobody issued: new for every call.
fn made_up_key() -> HeaderMap {
    let mut key = [0u8; 16];
    rand::fill(&mut key);
    let value: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", HeaderValue::from_str(&value).unwrap());
    headers
}

/// `sessions/create` as `who`, with JSON-RPC id `id`.
async fn create(h: &Harness, who: &HeaderMap, id: u64) -> Reply {
    create_with(&h.http, h, who, id).await
}

/// `sessions/create` as `who` through `http` (from its address), with JSON-RPC id `id`.
async fn create_with(http: &reqwest::Client, h: &Harness, who: &HeaderMap, id: u64) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create"});
    post_json(http, &h.url(), &body, who).await
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

    // Others are not shut out: another address has a budget of its own, which whoever
    // calls from there shares, whatever credentials they send (none verified them).
    let there = elsewhere();
    created(&create_with(&there, &h, &bob, 10).await);
    created(&create_with(&there, &h, &bob, 11).await);
    created(&create_with(&there, &h, &HeaderMap::new(), 12).await);
    let carol = create_with(&there, &h, &bearer("carol"), 13).await;
    assert_refused(&carol, 13, "session.max_sessions_per_caller", 3);
    assert_eq!(h.demo.live_sessions(), 6);

    // A delete gives a place back.
    delete(&h, &alice, &hers[0]).await;
    created(&create(&h, &alice, 6).await);
    assert_eq!(create(&h, &alice, 7).await.status, 429);
    let text = metrics(&h).await;
    assert!(
        text.contains("mcp_proxy_caller_refusals_total{limit=\"max_sessions_per_caller\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("mcp_proxy_sessions_rejected_total{reason=\"caller_limit\"} 4"),
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
    // Another caller (another address) has its own minute.
    created(&create_with(&elsewhere(), &h, &bearer("bob"), 4).await);
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
        if who == "Bearer bob" {
            client = client.calling_from(OTHER_ADDRESS);
        }
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
    // Bob's conversations (from another address) are his own.
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
        if who == "Bearer bob" {
            client = client.calling_from(OTHER_ADDRESS);
        }
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

#[tokio::test]
async fn made_up_credentials_share_their_addresses_cap_and_keep_their_binding() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 10;
        c.session.creations_per_caller_per_minute = 0;
    })
    .await;
    // Fifty creates from one address, each with an X-Api-Key nobody issued: one caller's
    // ten places, no more.
    let mut served = Vec::new();
    for id in 1..=50 {
        let key = made_up_key();
        let reply = create(&h, &key, id).await;
        if reply.status == 200 {
            served.push((key, created(&reply)));
        } else {
            assert_refused(&reply, id, "session.max_sessions_per_caller", 10);
        }
    }
    assert_eq!(served.len(), 10, "one address, one caller's cap");
    assert_eq!(h.demo.live_sessions(), 10);
    assert_eq!(
        h.proxy.tracked_callers(),
        1,
        "made-up credentials add no account"
    );

    // The budget is the address's; the binding is still the exact credentials'.
    let (key, session) = &served[0];
    let list = json!({"jsonrpc": "2.0", "id": 90, "method": "tools/list",
        "params": in_session(json!({}), session, None)});
    let theirs = post_json(&h.http, &h.url(), &list, key).await;
    assert_eq!(theirs.status, 200, "{}", theirs.text);
    let other = post_json(&h.http, &h.url(), &list, &made_up_key()).await;
    assert_eq!(other.error_code(), Some(-32043), "{}", other.text);

    // Another address is not affected.
    for id in 60..70 {
        created(&create_with(&elsewhere(), &h, &made_up_key(), id).await);
    }
    assert_eq!(h.proxy.tracked_callers(), 2);

    // A delete, by the credentials that opened the session, gives the address a place.
    delete(&h, key, session).await;
    created(&create(&h, &made_up_key(), 80).await);
    assert_eq!(create(&h, &made_up_key(), 81).await.status, 429);
    h.stop().await;
}

#[tokio::test]
async fn made_up_credentials_share_their_addresses_creations_a_minute() {
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 0;
        c.session.creations_per_caller_per_minute = 5;
    })
    .await;
    let mut served = 0;
    for id in 1..=50 {
        let reply = create(&h, &made_up_key(), id).await;
        if reply.status == 200 {
            served += 1;
        } else {
            assert_refused(&reply, id, "session.creations_per_caller_per_minute", 5);
        }
    }
    assert_eq!(served, 5, "one address, one caller's minute");
    assert_eq!(h.proxy.tracked_callers(), 1);
    created(&create_with(&elsewhere(), &h, &made_up_key(), 60).await);
    h.stop().await;
}

#[tokio::test]
async fn made_up_credentials_share_their_addresses_handles_and_pins() {
    // Handles: at most two per caller at the upstream, whatever key each open carries.
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 0;
        c.session.creations_per_caller_per_minute = 0;
        c.stateless.affinity = Affinity::Handles {
            tools: mcp_session_proxy::rewrite::handles::HandleTools::default(),
            fallback: Fallback::Isolated,
            max_per_caller: 2,
        };
    })
    .await;
    let open = |address: [u8; 4]| {
        let mut key = [0u8; 16];
        rand::fill(&mut key);
        let key: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let mut client = StatelessClient::new(h.url())
            .with_header("x-api-key", &key)
            .calling_from(address);
        async move { client.call_tool("session_open", json!({})).await }
    };
    let here = [127, 0, 0, 1];
    for _ in 0..2 {
        let opened = open(here).await;
        assert_eq!(opened["result"]["isError"], false, "{opened}");
    }
    let refused = open(here).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        common::assert::text_of(&refused).contains("2 sessions open"),
        "{refused}"
    );
    let opened = open(OTHER_ADDRESS).await;
    assert_eq!(opened["result"]["isError"], false, "{opened}");
    assert_eq!(h.proxy.live_sessions(), 3);
    h.stop().await;

    // Pins per caller (no conversation header): a made-up key per call would be a pin
    // per call, each an upstream session; they count against the address's cap.
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 3;
        c.session.creations_per_caller_per_minute = 0;
        c.stateless.affinity = Affinity::Pinned {
            header: None,
            fallback: Fallback::Isolated,
            limits: PinSettings {
                max_pinned: 100,
                idle_ttl: Duration::from_secs(60),
            },
        };
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let mut client = StatelessClient::new(h.url())
            .with_header("x-api-key", made_up_key()["x-api-key"].to_str().unwrap());
        let reply = client
            .request("tools/call", json!({"name": "counter", "arguments": {}}))
            .await;
        statuses.push(reply.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429, 429],
        "pins: {statuses:?}"
    );
    assert_eq!(h.demo.live_sessions(), 3);
    h.stop().await;
}

#[tokio::test]
async fn verified_callers_keep_budgets_of_their_own_on_one_address() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use mcp_session_proxy::auth::{Key, Rules};
    use mcp_session_proxy::config::AuthConfig;

    const SECRET: &[u8] = b"a shared secret of at least 32 bytes";
    let h = Harness::with_config(|c| {
        c.session.max_sessions_per_caller = 3;
        c.session.creations_per_caller_per_minute = 0;
        c.auth = Some(AuthConfig {
            keys: mcp_session_proxy::config::AuthKeys::Fixed {
                keys: vec![Key::hs256(SECRET)],
                skipped: Vec::new(),
            },
            rules: Rules {
                issuer: "https://idp.test/".into(),
                audience: vec!["https://proxy.test/mcp".into()],
                leeway: Duration::from_secs(5),
            },
            forward_token: false,
            resource: mcp_session_proxy::auth::Resource::default(),
            policy: Default::default(),
            limits: Vec::new(),
        });
    })
    .await;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    // A token for `sub`; `serial` makes two tokens of one subject differ.
    let token = |sub: &str, serial: u32| {
        let claims = json!({"iss": "https://idp.test/", "aud": "https://proxy.test/mcp",
            "sub": sub, "exp": exp, "jti": format!("{sub}-{serial}")});
        let token = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        bearer(&token)
    };
    // Alice and Bob call from one address, each with a cap of their own.
    for (who, first_id) in [("alice", 1), ("bob", 10)] {
        for id in first_id..first_id + 3 {
            created(&create(&h, &token(who, id as u32), id).await);
        }
        let refused = create(&h, &token(who, 99), first_id + 3).await;
        assert_refused(&refused, first_id + 3, "session.max_sessions_per_caller", 3);
    }
    assert_eq!(h.demo.live_sessions(), 6);
    assert_eq!(h.proxy.tracked_callers(), 2);
    h.stop().await;
}
