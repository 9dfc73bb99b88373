//! `[auth]` through the proxy: bearer JWTs verified before anything else, refusals with
//! HTTP 401 and a challenge saying why, callers bound by their token's subject (two
//! tokens of one subject are one caller, for sessions and pooled stateless sessions
//! alike), and the client's token kept from the upstream unless `auth.forward_token`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a failure must stop the test loudly"
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Harness, SessionClient, StatelessClient, assert, listener_url, post_json};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use mcp_session_proxy::auth::{Key, Resource, Rules};
use mcp_session_proxy::config::{Affinity, AuthConfig, AuthKeys, Config, Secret};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

const SECRET: &[u8] = b"a shared secret of at least 32 bytes";
const ISSUER: &str = "https://auth.example.com/";
const AUDIENCE: &str = "https://mcp.example.com/mcp";
const METADATA: &str = "https://mcp.example.com/.well-known/oauth-protected-resource";

fn auth_on(forward_token: bool) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.auth = Some(AuthConfig {
            keys: AuthKeys::Fixed {
                keys: vec![Key::hs256(SECRET)],
                skipped: Vec::new(),
            },
            rules: Rules {
                issuer: ISSUER.into(),
                audience: vec![AUDIENCE.into()],
                leeway: Duration::from_secs(5),
            },
            forward_token,
            resource: Resource {
                metadata_url: Some(METADATA.into()),
                ..Resource::default()
            },
            policy: Default::default(),
            limits: Vec::new(),
        });
        c.stateless.affinity = Affinity::Shared;
        c.admin.token = Some(Secret(ADMIN.as_bytes().to_vec()));
    }
}

/// The admin token: with `[auth]`, the operations endpoints on the client listener need it.
const ADMIN: &str = "an-admin-token-nobody-guesses";

/// GET `path` on the proxy's main listener with `authorization` (if any): status, body.
async fn get(h: &Harness, path: &str, authorization: Option<&str>) -> (u16, String) {
    let mut request = h.http.get(listener_url(&h.proxy, path));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A value of `/metrics`, read with the admin token.
async fn admin_gauge(h: &Harness, name: &str) -> Option<i64> {
    let (_, text) = get(h, "/metrics", Some(&bearer(ADMIN))).await;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token for `sub`; `serial` makes tokens of one subject differ (a refreshed token).
fn token(sub: &str, serial: u32) -> String {
    token_with(
        json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now() + 600,
        "jti": format!("{sub}-{serial}")}),
    )
}

fn token_with(claims: Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn session_client(h: &Harness, token: &str) -> SessionClient {
    h.client().with_header("authorization", &bearer(token))
}

async fn count(c: &mut StatelessClient) -> String {
    let reply = c
        .request("tools/call", json!({"name": "counter", "arguments": {}}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert::text_of(&reply.json()).to_owned()
}

#[tokio::test]
async fn every_request_needs_a_valid_token_and_a_refusal_says_why() {
    let h = Harness::with_config(auth_on(false)).await;
    let create = json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"});
    let expired = token_with(json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice",
        "exp": now() - 600}));
    let other_audience = token_with(json!({"iss": ISSUER, "aud": "https://other.example/",
        "sub": "alice", "exp": now() + 600}));
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now() + 600}),
        &EncodingKey::from_secret(b"not the shared secret, but as long"),
    )
    .unwrap();
    let unsigned = format!(
        "eyJhbGciOiJub25lIn0.{}.",
        token("alice", 1).split('.').nth(1).unwrap()
    );
    let cases: [(Option<String>, &str, &str); 6] = [
        (None, "missing", "no bearer token"),
        // Credentials of another scheme are no bearer token at all (no error code).
        (
            Some("Basic YWxpY2U6cHc=".into()),
            "missing",
            "no bearer token",
        ),
        (Some(bearer(&expired)), "expired", "the token has expired"),
        (
            Some(bearer(&other_audience)),
            "audience",
            "not meant for this server",
        ),
        (
            Some(bearer(&forged)),
            "signature",
            "signature does not verify",
        ),
        (Some(bearer(&unsigned)), "algorithm", "signed with none"),
    ];
    for (authorization, reason, says) in &cases {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert("authorization", value.parse().unwrap());
        }
        let reply = post_json(&h.http, &h.url(), &create, &headers).await;
        assert_eq!(reply.status, 401, "{reason}: {}", reply.text);
        let body = reply.json();
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert_eq!(body["error"]["data"]["reason"], *reason, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Unauthorized: ") && message.contains(says),
            "{message}"
        );
        let challenge = reply.header("www-authenticate").unwrap();
        assert!(
            challenge.starts_with(&format!("Bearer resource_metadata=\"{METADATA}\"")),
            "{challenge}"
        );
        // RFC 6750 §3.1: no error code when the request carried no token at all.
        assert_eq!(
            challenge.contains("error=\"invalid_token\""),
            *reason != "missing",
            "{challenge}"
        );
        // GET and DELETE are refused the same way.
        for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
            let response = h.bare(method.clone(), &headers).await;
            assert_eq!(response.status(), 401, "{method} {reason}");
        }
    }
    assert!(
        h.upstream_posts().is_empty(),
        "nothing refused reached the upstream"
    );
    assert_eq!(
        admin_gauge(&h, "mcp_proxy_auth_refused_total{reason=\"expired\"}").await,
        Some(3)
    );
    // A valid token gets in.
    let mut alice = session_client(&h, &token("alice", 1));
    alice.create().await;
    assert_eq!(alice.tool_text("counter", json!({})).await, "1");
    h.stop().await;
}

#[tokio::test]
async fn callers_are_their_subjects_not_their_tokens() {
    let h = Harness::with_config(auth_on(false)).await;
    // A data-layer session: alice's refreshed token carries on in it, bob's does not.
    let mut alice = session_client(&h, &token("alice", 1));
    alice.create().await;
    assert_eq!(alice.tool_text("counter", json!({})).await, "1");
    let mut refreshed = session_client(&h, &token("alice", 2));
    refreshed.session_id = alice.session_id.clone();
    refreshed.state = alice.state.clone();
    assert_eq!(refreshed.tool_text("counter", json!({})).await, "2");
    let mut bob = session_client(&h, &token("bob", 1));
    bob.session_id = alice.session_id.clone();
    let stolen = bob
        .request("tools/call", json!({"name": "counter", "arguments": {}}))
        .await;
    assert::assert_session_not_found(&stolen, alice.session_id());
    assert_eq!(bob.delete().await.status, 404);
    assert_eq!(refreshed.delete().await.status, 200);

    // The shared pool of stateless sessions: one subject's tokens share a pooled upstream
    // session, another subject gets its own.
    let stateless = |sub: &str, serial: u32| {
        StatelessClient::new(h.url()).with_header("authorization", &bearer(&token(sub, serial)))
    };
    assert_eq!(count(&mut stateless("carol", 1)).await, "1");
    assert_eq!(count(&mut stateless("carol", 2)).await, "2");
    assert_eq!(count(&mut stateless("dave", 1)).await, "1");
    assert_eq!(count(&mut stateless("carol", 3)).await, "3");
    h.stop().await;
}

/// What the upstream received with each request: its `Authorization`, if any.
fn upstream_authorizations(h: &Harness) -> Vec<Option<String>> {
    h.demo
        .journal()
        .into_iter()
        .map(|r| r.authorization)
        .collect()
}

/// A data-layer session, a stateless call and an old client: every path to the upstream.
async fn every_path(h: &Harness, token: &str) {
    let mut alice = session_client(h, token);
    alice.create().await;
    alice.tool_text("counter", json!({})).await;
    alice.delete().await;
    let mut stateless = StatelessClient::new(h.url()).with_header("authorization", &bearer(token));
    count(&mut stateless).await;
    let mut headers = HeaderMap::new();
    headers.insert("authorization", bearer(token).parse().unwrap());
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let old = post_json(&h.http, &h.url(), &initialize, &headers).await;
    assert_eq!(old.status, 200, "{}", old.text);
}

#[tokio::test]
async fn the_upstream_never_sees_the_token_unless_forward_token() {
    let alice = token("alice", 1);
    let h = Harness::with_config(auth_on(false)).await;
    every_path(&h, &alice).await;
    let seen = upstream_authorizations(&h);
    assert!(seen.len() >= 6, "{seen:?}");
    assert!(
        seen.iter().all(Option::is_none),
        "the token stayed at the proxy: {seen:?}"
    );
    h.stop().await;

    let h = Harness::with_config(auth_on(true)).await;
    every_path(&h, &alice).await;
    let seen = upstream_authorizations(&h);
    let clients: Vec<&Option<String>> = seen.iter().filter(|a| a.is_some()).collect();
    assert!(clients.len() >= 4, "{seen:?}");
    assert!(
        clients
            .iter()
            .all(|a| a.as_deref() == Some(bearer(&alice).as_str())),
        "forward_token passes the client's token on: {seen:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn with_auth_the_operations_endpoints_show_clients_nothing_internal() {
    let h = Harness::with_config(auth_on(false)).await;
    let client = bearer(&token("alice", 1));
    // Health: everyone, as a load balancer needs.
    assert_eq!(get(&h, "/healthz", None).await.0, 200);
    // Readiness: its status, to anyone, and nothing more — not to a client with a valid
    // token either.
    for authorization in [None, Some(client.as_str())] {
        let (status, body) = get(&h, "/readyz", authorization).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"status": "ready"})
        );
        assert!(!body.contains(&h.demo.url()), "{body}");
    }
    // Metrics: only with the admin token.
    for authorization in [
        None,
        Some(client.as_str()),
        Some("Bearer not-the-admin-token"),
    ] {
        let (status, body) = get(&h, "/metrics", authorization).await;
        assert_eq!(status, 401, "{authorization:?}: {body}");
        assert!(!body.contains("mcp_proxy_"), "{body}");
    }
    let (status, metrics) = get(&h, "/metrics", Some(&bearer(ADMIN))).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("mcp_proxy_sessions_active"), "{metrics}");
    // The admin token shows readiness in full.
    let (status, body) = get(&h, "/readyz", Some(&bearer(ADMIN))).await;
    assert_eq!(status, 200);
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["upstream"], h.demo.url(), "{ready}");
    assert_eq!(ready["checks"]["store"], "ok");
    h.stop().await;

    // Without an admin token there is no way in on the client listener: not served.
    let h = Harness::with_config(|c| {
        auth_on(false)(c);
        c.admin.token = None;
    })
    .await;
    assert_eq!(get(&h, "/metrics", Some(&client)).await.0, 404);
    assert_eq!(get(&h, "/readyz", None).await.1, r#"{"status":"ready"}"#);
    assert_eq!(get(&h, "/healthz", None).await.0, 200);
    h.stop().await;
}
