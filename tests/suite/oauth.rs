//! The proxy as an OAuth 2.1 resource server (the MCP authorization specification,
//! 2025-11-25) in front of a real authorization server (`oidc-provider`, issuing JWT
//! access tokens from a JWKS it publishes, `common::oauth`): the official TypeScript SDK
//! client's whole flow — the proxy's 401, its protected resource metadata (RFC 9728),
//! the authorization server's metadata, a token for this resource, the retry — reaches a
//! tool; the keys come from the issuer and rotate with the proxy running; a token for
//! another resource, or without a required scope, is refused; the upstream never sees a
//! client's token.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::binary::ProxyProcess;
use common::oauth::{ADMIN, AuthServer, EXCHANGER, READER, sdk_client};
use common::*;
use mcp_session_proxy::demo::DemoServer;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

/// A port nothing listens on now (for a process that must know its own URL first).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The binary (on a free port: its public URL names it) before `upstream`, a resource
/// server for tokens `issuer` issues, with `extra` lines in `[auth]`.
async fn protected(upstream: &DemoServer, issuer: &str, extra: &str) -> ProxyProcess {
    let port = free_port();
    ProxyProcess::launch()
        .toml(&format!(
            "listen = \"127.0.0.1:{port}\"\n\
             [upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             [auth]\nissuer = \"{issuer}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
             scopes_supported = [\"tools:read\", \"tools:admin\"]\n{extra}",
            upstream.url()
        ))
        .start()
        .await
}

/// An authorization server (key `k1`), a recording demo server, and the binary before
/// it as a resource server for that server's tokens, with `extra` lines in `[auth]`.
async fn protected_demo(extra: &str) -> (AuthServer, DemoServer, ProxyProcess) {
    let auth = AuthServer::start("k1").await;
    let demo = recording_demo().await;
    let proxy = protected(&demo, &auth.issuer(), extra).await;
    (auth, demo, proxy)
}

/// A 2026-07-28 request `method` with `params` to `endpoint`, with `token`.
async fn modern(endpoint: &str, token: &str, method: &str, params: serde_json::Value) -> Reply {
    let client = StatelessClient::new(endpoint.to_owned());
    let params = client.params(params);
    let mut headers = StatelessClient::headers(method, &params);
    headers.extend(bearer(token));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post_json(&client.http, &client.url, &body, &headers).await
}

/// A 2026-07-28 call of `tool` (with a `msg` argument).
async fn call_tool(endpoint: &str, token: &str, tool: &str) -> Reply {
    modern(
        endpoint,
        token,
        "tools/call",
        json!({"name": tool, "arguments": {"msg": "m"}}),
    )
    .await
}

async fn create(proxy: &ProxyProcess, headers: &HeaderMap) -> Reply {
    post_json(
        &http_client(),
        &proxy.url("/mcp"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        headers,
    )
    .await
}

/// The test fixtures' JWKS (`tests/fixtures/jwt`) with only the key `kid`.
fn fixture_jwks(kid: &str) -> String {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
    let jwks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("jwks.json")).unwrap())
            .unwrap();
    let keys: Vec<_> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kid"] == kid)
        .cloned()
        .collect();
    json!({ "keys": keys }).to_string()
}

/// A token of alice for `https://mcp.example.com/mcp` from `https://auth.example.com/`,
/// signed with the fixture key `kid` (`rsa-1` or `ec-1`).
fn fixture_token(kid: &str) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({"iss": "https://auth.example.com/", "aud": "https://mcp.example.com/mcp",
        "sub": "alice", "exp": now + 600});
    let (algorithm, key) = match kid {
        "rsa-1" => (
            Algorithm::RS256,
            EncodingKey::from_rsa_pem(&std::fs::read(fixtures.join("rsa.pem")).unwrap()).unwrap(),
        ),
        _ => (
            Algorithm::ES256,
            EncodingKey::from_ec_pem(&std::fs::read(fixtures.join("ec.pem")).unwrap()).unwrap(),
        ),
    };
    let mut header = Header::new(algorithm);
    header.kid = Some(kid.to_owned());
    encode(&header, &claims, &key).unwrap()
}

#[tokio::test]
async fn the_sdk_clients_oauth_flow_reaches_a_tool_through_the_proxy() {
    let (auth, demo, proxy) = protected_demo("").await;
    let port = proxy.listen.port();
    let endpoint = proxy.url("/mcp");

    // What the SDK finds on its way: the 401's challenge names the metadata…
    let refused = create(&proxy, &HeaderMap::new()).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        refused.headers["www-authenticate"],
        format!("Bearer resource_metadata=\"{metadata_url}\"").as_str()
    );
    // …which names this endpoint as the resource and the issuer as its server; the
    // root form is the default endpoint's.
    for url in [
        metadata_url.clone(),
        proxy.url("/.well-known/oauth-protected-resource"),
    ] {
        let metadata: serde_json::Value = http_client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            metadata,
            json!({"resource": endpoint, "authorization_servers": [auth.issuer()],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["tools:read", "tools:admin"]}),
            "{url}"
        );
    }
    let unknown = http_client()
        .get(proxy.url("/.well-known/oauth-protected-resource/elsewhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);

    // The official client does the whole dance and calls a tool.
    let report = sdk_client(
        &endpoint,
        READER,
        &auth.issuer(),
        Some(("echo", json!({"msg": "through OAuth"}))),
    )
    .await;
    assert_eq!(report["ok"], true, "{report}");
    assert!(
        report["tools"].as_array().unwrap().contains(&json!("echo")),
        "{report}"
    );
    assert_eq!(
        report["call"]["content"][0]["text"], "through OAuth",
        "{report}"
    );

    // A 2026-07-28 request with a token for this endpoint is served too.
    let token = auth.token(ADMIN, &endpoint, None).await;
    let reply = call_tool(&endpoint, &token, "echo").await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    // A token the same server issued for another resource is not for this one.
    let elsewhere = auth
        .token(READER, "http://127.0.0.1:9/mcp", Some("tools:read"))
        .await;
    let refused = create(&proxy, &bearer(&elsewhere)).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    let challenge = refused.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("error=\"invalid_token\"") && challenge.contains(&endpoint),
        "{challenge}"
    );

    // The upstream never saw a client's token: it was not configured to.
    let journal = demo.journal();
    assert!(!journal.is_empty());
    assert!(
        journal.iter().all(|r| r.authorization.is_none()),
        "{:?}",
        journal.iter().map(|r| &r.authorization).collect::<Vec<_>>()
    );
}

/// The authorization server rotates its key (restarted on its port with a new one):
/// the proxy, still running, fetches the new key the first time a token names it.
#[tokio::test]
async fn keys_rotate_at_the_authorization_server_with_the_proxy_running() {
    let mut auth = AuthServer::start("before").await;
    let demo = recording_demo().await;
    let proxy = protected(&demo, &auth.issuer(), "").await;
    let resource = proxy.url("/mcp");
    let old = auth.token(READER, &resource, None).await;
    let created = create(&proxy, &bearer(&old)).await;
    assert_eq!(created.status, 200, "{}", created.text);

    let as_port = auth.process.port;
    auth.process.kill().await;
    auth = AuthServer::start_on(as_port, "after").await;
    let new = auth.token(READER, &resource, None).await;
    let created = create(&proxy, &bearer(&new)).await;
    assert_eq!(created.status, 200, "{}", created.text);
    // The old key is gone from the server's JWKS, and so from the proxy's keys.
    let refused = create(&proxy, &bearer(&old)).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert_eq!(refused.json()["error"]["data"]["reason"], "unknown_key");
}

/// A scope every token must carry: a token without it is refused with 403
/// `insufficient_scope`, naming the scope.
#[tokio::test]
async fn a_token_without_a_required_scope_is_forbidden() {
    let (auth, _demo, proxy) = protected_demo("required_scopes = [\"tools:admin\"]\n").await;
    let resource = proxy.url("/mcp");
    let reader = auth.token(READER, &resource, None).await;
    let refused = create(&proxy, &bearer(&reader)).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let challenge = refused.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"tools:admin\""),
        "{challenge}"
    );
    let admin = auth.token(ADMIN, &resource, None).await;
    assert_eq!(create(&proxy, &bearer(&admin)).await.status, 200);
}

/// The authorization server down when the proxy starts: requests are told to come
/// back (503, Retry-After) — not that their token is bad — until its keys are fetched.
#[tokio::test]
async fn until_the_keys_can_be_fetched_requests_are_told_to_come_back() {
    let as_port = free_port();
    let issuer = format!("http://127.0.0.1:{as_port}");
    let demo = recording_demo().await;
    let proxy = protected(&demo, &issuer, "").await;
    // Well-formed, but no key can verify it yet.
    let unsigned = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.e30.c2ln";
    let waiting = create(&proxy, &bearer(unsigned)).await;
    assert_eq!(waiting.status, 503, "{}", waiting.text);
    assert!(waiting.headers.contains_key("retry-after"));

    let auth = AuthServer::start_on(as_port, "k1").await;
    let token = auth.token(READER, &proxy.url("/mcp"), None).await;
    assert!(
        eventually_async(Duration::from_secs(20), || {
            let (proxy, token) = (&proxy, &token);
            async move { create(proxy, &bearer(token)).await.status == 200 }
        })
        .await,
        "the keys were never fetched: {}",
        proxy.log()
    );
}

/// `[auth]` is reloaded on SIGHUP: a JWKS file's new keys apply with no restart; a
/// file that cannot be used, or a reload turning the client's token toward the
/// upstream, is refused with its reason and the running keys kept.
#[tokio::test]
async fn a_reload_applies_new_keys_and_refuses_what_it_cannot() {
    let (rsa, ec) = (fixture_token("rsa-1"), fixture_token("ec-1"));
    let demo = recording_demo().await;
    let file = |forward: bool| {
        format!(
            "[upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             [auth]\njwks_file = \"keys.json\"\nissuer = \"https://auth.example.com/\"\n\
             audience = \"https://mcp.example.com/mcp\"\nforward_token = {forward}\n",
            demo.url()
        )
    };
    let dir = common::binary::WorkDir::new();
    dir.write("keys.json", &fixture_jwks("rsa-1"));
    let proxy = ProxyProcess::launch()
        .dir(dir)
        .toml(&file(false))
        .start()
        .await;
    assert_eq!(create(&proxy, &bearer(&rsa)).await.status, 200);
    assert_eq!(create(&proxy, &bearer(&ec)).await.status, 401);

    // The key rotated in the file: applied on SIGHUP.
    std::fs::write(proxy.dir().join("keys.json"), fixture_jwks("ec-1")).unwrap();
    proxy.signal("HUP");
    assert!(
        proxy
            .eventually_logged("configuration reloaded", Duration::from_secs(10))
            .await,
        "{}",
        proxy.log()
    );
    assert_eq!(create(&proxy, &bearer(&ec)).await.status, 200);
    assert_eq!(create(&proxy, &bearer(&rsa)).await.status, 401);

    // A file with no usable key: refused, the keys kept.
    std::fs::write(proxy.dir().join("keys.json"), "{\"keys\": []}").unwrap();
    proxy.signal("HUP");
    assert!(
        proxy
            .eventually_logged("configuration reload refused", Duration::from_secs(10))
            .await,
        "{}",
        proxy.log()
    );
    assert_eq!(create(&proxy, &bearer(&ec)).await.status, 200);

    // Whether the client's token reaches the upstream is settled at start-up.
    std::fs::write(proxy.dir().join("keys.json"), fixture_jwks("ec-1")).unwrap();
    std::fs::write(proxy.dir().join("proxy.toml"), file(true)).unwrap();
    proxy.signal("HUP");
    assert!(
        eventually(Duration::from_secs(10), || proxy
            .log()
            .contains("auth.forward_token changed"))
        .await,
        "{}",
        proxy.log()
    );
    assert_eq!(create(&proxy, &bearer(&ec)).await.status, 200);
    assert!(
        demo.journal().iter().all(|r| r.authorization.is_none()),
        "the token stayed at the proxy"
    );

    // Keys from an authorization server that cannot be reached: refused (after its
    // fetch is given its time), the running keys kept.
    let closed = free_port();
    std::fs::write(
        proxy.dir().join("proxy.toml"),
        format!(
            "[upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             [auth]\nissuer = \"http://127.0.0.1:{closed}\"\n\
             audience = \"https://mcp.example.com/mcp\"\n",
            demo.url()
        ),
    )
    .unwrap();
    proxy.signal("HUP");
    assert!(
        eventually(Duration::from_secs(20), || proxy
            .log()
            .contains("keys could not be fetched"))
        .await,
        "{}",
        proxy.log()
    );
    assert!(
        proxy
            .eventually_logged("configuration reload refused", Duration::from_secs(20))
            .await,
        "{}",
        proxy.log()
    );
    assert_eq!(create(&proxy, &bearer(&ec)).await.status, 200);
}

/// A proxy in front of two recording demo servers: `keyed`, with credentials of its own
/// (`Authorization` from a file holding `first-key`, `X-Api-Key` from a variable), and
/// `open`, the default, with none; `auth.forward_token` on.
async fn keyed_and_open() -> (DemoServer, DemoServer, ProxyProcess) {
    let keyed = recording_demo().await;
    let open = recording_demo().await;
    let dir = common::binary::WorkDir::new();
    dir.write("keys.json", &fixture_jwks("rsa-1"));
    let secret = dir.write("upstream-token", "first-key\n");
    let proxy = ProxyProcess::launch()
        .dir(dir)
        .toml(&format!(
            "[upstreams.keyed]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             credentials = [{{ header = \"Authorization\", prefix = \"Bearer \", file = {:?} }}, \
             {{ header = \"X-Api-Key\", env = \"KEYED_API_KEY\" }}]\n\
             [upstreams.open]\ndefault = true\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             [auth]\njwks_file = \"keys.json\"\nissuer = \"https://auth.example.com/\"\n\
             audience = \"https://mcp.example.com/mcp\"\nforward_token = true\n",
            keyed.url(),
            secret.display().to_string(),
            open.url()
        ))
        .env(&[("KEYED_API_KEY", "key-from-the-environment")])
        .start()
        .await;
    (keyed, open, proxy)
}

/// An upstream that wants credentials of its own gets the proxy's (read from a file,
/// again when it changes) and never the client's token, even with `forward_token`; an
/// upstream configured without any gets the client's token only because
/// `forward_token` says so, and never another upstream's credentials.
#[tokio::test]
async fn an_upstream_gets_its_own_credentials_never_the_clients_token() {
    let (keyed, open, proxy) = keyed_and_open().await;
    let token = fixture_token("rsa-1");
    let mut headers = bearer(&token);
    // The client's own copy of a credential header never passes.
    headers.insert("x-api-key", HeaderValue::from_static("the-clients-guess"));
    let create_at = |path: &'static str| {
        let (proxy, headers) = (&proxy, &headers);
        async move {
            post_json(
                &http_client(),
                &proxy.url(path),
                &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
                headers,
            )
            .await
        }
    };
    assert_eq!(create_at("/mcp/keyed").await.status, 200);
    assert_eq!(create_at("/mcp/open").await.status, 200);
    let seen = |demo: &DemoServer| -> Vec<(Option<String>, Option<String>)> {
        demo.journal()
            .into_iter()
            .map(|r| (r.authorization, r.api_key))
            .collect()
    };
    // Every request, the proxy's own era probe included, carries the upstream's own.
    let at_keyed = seen(&keyed);
    assert!(!at_keyed.is_empty());
    assert!(
        at_keyed
            .iter()
            .all(|(auth, key)| auth.as_deref() == Some("Bearer first-key")
                && key.as_deref() == Some("key-from-the-environment")),
        "{at_keyed:?}"
    );
    // (Its era probe is the proxy's own request: no client's headers.)
    let at_open: Vec<(Option<String>, Option<String>)> = open
        .journal()
        .into_iter()
        .filter(|r| !is_era_probe(r))
        .map(|r| (r.authorization, r.api_key))
        .collect();
    assert!(!at_open.is_empty());
    assert!(
        at_open.iter().all(|(auth, key)| auth.as_deref()
            == Some(format!("Bearer {token}").as_str())
            && key.as_deref() == Some("the-clients-guess")),
        "forward_token passes the client's own headers to an upstream without credentials: {at_open:?}"
    );

    // The token rotated in its file: the next requests carry the new one.
    std::fs::write(proxy.dir().join("upstream-token"), "second-key\n").unwrap();
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            create_at("/mcp/keyed").await;
            keyed
                .journal()
                .last()
                .and_then(|r| r.authorization.clone())
                .as_deref()
                == Some("Bearer second-key")
        })
        .await,
        "{:?}",
        seen(&keyed)
    );
}

/// An old client passed through (its `initialize`, as it came, to a legacy upstream)
/// gets the upstream's own credentials in place of its token and of its own copy of a
/// credential header, as a session's requests do.
#[tokio::test]
async fn an_old_client_passed_through_carries_the_upstreams_credentials() {
    let (keyed, _open, proxy) = keyed_and_open().await;
    let mut headers = bearer(&fixture_token("rsa-1"));
    headers.insert("x-api-key", HeaderValue::from_static("the-clients-guess"));
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let answer = post_json(
        &http_client(),
        &proxy.url("/mcp/keyed"),
        &initialize,
        &headers,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    // Passed through: the session id is the upstream's own, not one the proxy minted.
    let session = answer.headers["mcp-session-id"].to_str().unwrap();
    assert!(!session.starts_with("mcps_"), "{session}");
    let passed: Vec<(Option<String>, Option<String>)> = keyed
        .journal()
        .into_iter()
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["params"]["clientInfo"]["name"] == "old")
        })
        .map(|r| (r.authorization, r.api_key))
        .collect();
    assert_eq!(
        passed,
        [(
            Some("Bearer first-key".to_owned()),
            Some("key-from-the-environment".to_owned())
        )]
    );
}

/// `[[auth.rules]]`: two callers with different scopes, in every way a client comes —
/// the official SDK's client (2025-11-25, passed through), a 2026-07-28 call, a
/// data-layer session — get what their rules allow; a call to anything else is
/// refused with 403 and never reaches the upstream; decisions are counted.
#[tokio::test]
async fn rules_allow_each_caller_its_tools_in_every_era() {
    let (auth, demo, proxy) = protected_demo(
        "[[auth.rules]]\ntools = [\"echo\", \"who*\"]\nscopes = [\"tools:read\"]\n\
         [[auth.rules]]\nscopes = [\"tools:admin\"]\n\
         [admin]\ntoken = \"an-admin-token-for-the-metrics\"\n",
    )
    .await;
    let endpoint = proxy.url("/mcp");
    let reader = auth.token(READER, &endpoint, None).await;
    let admin = auth.token(ADMIN, &endpoint, None).await;

    // The SDK's client (an old client, passed through): echo yes, counter no.
    let allowed = sdk_client(
        &endpoint,
        READER,
        &auth.issuer(),
        Some(("echo", json!({"msg": "ok"}))),
    )
    .await;
    assert_eq!(allowed["ok"], true, "{allowed}");
    // Its list shows it what it may call.
    assert_eq!(allowed["tools"], json!(["echo", "whoami"]), "{allowed}");
    let denied = sdk_client(
        &endpoint,
        READER,
        &auth.issuer(),
        Some(("counter", json!({}))),
    )
    .await;
    assert_eq!(denied["ok"], false, "{denied}");
    assert_eq!(denied["stage"], "call", "{denied}");
    assert!(
        denied["error"]
            .as_str()
            .unwrap()
            .contains("may not use the tool")
            && denied["code"] == 403,
        "{denied}"
    );
    let admitted = sdk_client(
        &endpoint,
        ADMIN,
        &auth.issuer(),
        Some(("counter", json!({}))),
    )
    .await;
    assert_eq!(admitted["ok"], true, "{admitted}");
    assert!(
        admitted["tools"].as_array().unwrap().len() > 2,
        "the admin sees every tool: {admitted}"
    );

    // A 2026-07-28 call.
    let refused = call_tool(&endpoint, &reader, "sleep").await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert_eq!(refused.error_code(), Some(-32600));
    assert_eq!(refused.json()["error"]["data"]["tool"], "sleep");
    assert_eq!(refused.json()["error"]["data"]["reason"], "not_allowed");
    assert_eq!(call_tool(&endpoint, &reader, "whoami").await.status, 200);
    let list = modern(&endpoint, &reader, "tools/list", json!({})).await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(
        final_message(&list)["result"]["tools"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{}",
        list.text
    );
    assert_eq!(call_tool(&endpoint, &admin, "sleep").await.status, 200);
    // A header naming another tool than the body (SEP-2243's Mcp-Name) is refused:
    // what was judged is what anything on the way reads.
    let mismatched = {
        let client = StatelessClient::new(endpoint.clone());
        let params = client.params(json!({"name": "echo", "arguments": {"msg": "m"}}));
        let mut headers = StatelessClient::headers("tools/call", &params);
        headers.insert("mcp-name", HeaderValue::from_static("sleep"));
        headers.extend(bearer(&reader));
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
        post_json(&client.http, &client.url, &body, &headers).await
    };
    assert_eq!(mismatched.status, 400, "{}", mismatched.text);
    assert_eq!(mismatched.error_code(), Some(-32020));
    // What the server offers, as each caller may use it: the demo server offers tools
    // (and no prompts or resources, which `rewrite::visible`'s tests take away), and
    // both callers may use some.
    let offers = |reply: Reply| final_message(&reply)["result"]["capabilities"].clone();
    let reader_offers = offers(modern(&endpoint, &reader, "server/discover", json!({})).await);
    let admin_offers = offers(modern(&endpoint, &admin, "server/discover", json!({})).await);
    assert!(reader_offers.get("tools").is_some(), "{reader_offers}");
    assert_eq!(reader_offers, admin_offers);
    // What names a resource or prompt another way is judged by it too: a listen
    // stream's subscriptions, a completion's reference.
    let listen = modern(
        &endpoint,
        &reader,
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": ["demo://secret"]}}),
    )
    .await;
    assert_eq!(listen.status, 403, "{}", listen.text);
    assert_eq!(listen.json()["error"]["data"]["resource"], "demo://secret");
    let completion = modern(
        &endpoint,
        &reader,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "name", "value": "a"}}),
    )
    .await;
    assert_eq!(completion.status, 403, "{}", completion.text);
    assert_eq!(completion.json()["error"]["data"]["prompt"], "greet");

    // A data-layer session.
    let created = create(&proxy, &bearer(&reader)).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let session = created.json()["result"]["session"].clone();
    let in_session = |tool: &str| {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": in_session(json!({"name": tool, "arguments": {"msg": "s"}}),
                session["sessionId"].as_str().unwrap(), session["state"].as_str())})
    };
    let refused = post_json(
        &http_client(),
        &endpoint,
        &in_session("counter"),
        &bearer(&reader),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let served = post_json(
        &http_client(),
        &endpoint,
        &in_session("echo"),
        &bearer(&reader),
    )
    .await;
    assert_eq!(served.status, 200, "{}", served.text);
    let listed = post_json(
        &http_client(),
        &endpoint,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list",
            "params": common::in_session(json!({}), session["sessionId"].as_str().unwrap(),
                session["state"].as_str())}),
        &bearer(&reader),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let names: Vec<String> = final_message(&listed)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["echo", "whoami"], "{}", listed.text);

    // What was refused never reached the upstream.
    let called: Vec<String> = demo
        .journal()
        .into_iter()
        .filter(|r| r.method() == Some("tools/call"))
        .filter_map(|r| r.body?["params"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        called.iter().filter(|n| *n == "counter").count(),
        1,
        "only the admin's counter: {called:?}"
    );
    assert_eq!(
        called.iter().filter(|n| *n == "sleep").count(),
        1,
        "{called:?}"
    );

    // Decisions are counted, refusals logged.
    assert!(
        proxy.log().contains("not allowed by auth.rules"),
        "{}",
        proxy.log()
    );
    let metrics = http_client()
        .get(proxy.url("/metrics"))
        .bearer_auth("an-admin-token-for-the-metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("mcp_proxy_policy_decisions_total{")
                && l.contains("kind=\"tool\"")
                && l.contains("decision=\"denied\"")),
        "{metrics}"
    );
}

/// `[[auth.limits]]`: each caller may call a tool so often; beyond it, 429 with when
/// to come back, and the call never reaches the upstream. Another caller has its own
/// budget, and another tool is not counted.
#[tokio::test]
async fn a_callers_rate_for_a_tool_is_its_own() {
    let (auth, demo, proxy) =
        protected_demo("[[auth.limits]]\ntools = [\"echo\"]\nrate = 2\nper = \"1m\"\n").await;
    let endpoint = proxy.url("/mcp");
    let (reader, admin) = (
        auth.token(READER, &endpoint, None).await,
        auth.token(ADMIN, &endpoint, None).await,
    );
    assert_eq!(call_tool(&endpoint, &reader, "echo").await.status, 200);
    assert_eq!(call_tool(&endpoint, &reader, "echo").await.status, 200);
    let refused = call_tool(&endpoint, &reader, "echo").await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    // When the next call may come: a minute's two calls, one every 30 s.
    let retry: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((28..=30).contains(&retry), "{retry}");
    assert_eq!(refused.json()["error"]["data"]["reason"], "tool_rate");
    assert_eq!(
        call_tool(&endpoint, &reader, "whoami").await.status,
        200,
        "another tool"
    );
    // Limits without rules hide nothing from a list.
    let listed = modern(&endpoint, &reader, "tools/list", json!({})).await;
    assert!(
        final_message(&listed)["result"]["tools"]
            .as_array()
            .unwrap()
            .len()
            > 2,
        "{}",
        listed.text
    );
    assert_eq!(
        call_tool(&endpoint, &admin, "echo").await.status,
        200,
        "another caller"
    );
    let echoes = demo
        .journal()
        .into_iter()
        .filter(|r| r.method() == Some("tools/call"))
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["params"]["name"] == "echo")
        })
        .count();
    assert_eq!(echoes, 3, "the refused call never reached the upstream");
}

/// What a modern server offers (`server/discover`'s capabilities), as each caller may
/// use it: a caller whose rules name tools only is not offered the server's prompts and
/// resources; one whose rules cover the whole upstream is offered everything.
#[tokio::test]
async fn a_server_offers_each_caller_what_it_may_use() {
    let auth = AuthServer::start("k1").await;
    let server = common::peers::ts2_http(common::peers::Ts2Mode::Reject).await;
    let port = free_port();
    let proxy = ProxyProcess::launch()
        .toml(&format!(
            "listen = \"127.0.0.1:{port}\"\n\
             [upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             [auth]\nissuer = \"{}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
             [[auth.rules]]\ntools = [\"echo\"]\nscopes = [\"tools:read\"]\n\
             [[auth.rules]]\nscopes = [\"tools:admin\"]\n",
            server.url(),
            auth.issuer()
        ))
        .start()
        .await;
    let endpoint = proxy.url("/mcp");
    let offers = |reply: Reply| final_message(&reply)["result"]["capabilities"].clone();
    let reader = auth.token(READER, &endpoint, None).await;
    let admin = auth.token(ADMIN, &endpoint, None).await;
    let to_reader = offers(modern(&endpoint, &reader, "server/discover", json!({})).await);
    let to_admin = offers(modern(&endpoint, &admin, "server/discover", json!({})).await);
    for kind in ["prompts", "resources"] {
        assert!(to_admin.get(kind).is_some(), "{kind}: {to_admin}");
        assert!(to_reader.get(kind).is_none(), "{kind}: {to_reader}");
    }
    assert!(to_reader.get("tools").is_some(), "{to_reader}");
}

/// The `tools/call` in `journal` with `arguments`.
fn call_with<'j>(
    journal: &'j [mcp_session_proxy::demo::Received],
    arguments: &serde_json::Value,
) -> Option<&'j mcp_session_proxy::demo::Received> {
    journal.iter().find(|r| {
        r.body
            .as_ref()
            .is_some_and(|b| b["method"] == "tools/call" && b["params"]["arguments"] == *arguments)
    })
}

/// Whether `demo` heard, within a few seconds, that the call it received with
/// `arguments` is off: a `notifications/cancelled` in the call's session naming the
/// call's id as the demo received it.
async fn cancelled_upstream(demo: &DemoServer, arguments: serde_json::Value) -> bool {
    eventually(Duration::from_secs(5), || {
        let journal = demo.journal();
        let Some(call) = call_with(&journal, &arguments) else {
            return false;
        };
        let id = &call.body.as_ref().unwrap()["id"];
        journal.iter().any(|r| {
            r.session_id == call.session_id
                && r.body.as_ref().is_some_and(|b| {
                    b["method"] == "notifications/cancelled" && b["params"]["requestId"] == *id
                })
        })
    })
    .await
}

/// Whether `demo` saw, within a few seconds, the session of the call it received with
/// `arguments` ended (`DELETE`).
async fn session_ended_upstream(demo: &DemoServer, arguments: serde_json::Value) -> bool {
    eventually(Duration::from_secs(5), || {
        let journal = demo.journal();
        let Some(call) = call_with(&journal, &arguments) else {
            return false;
        };
        journal
            .iter()
            .any(|r| r.http_method == "DELETE" && r.session_id == call.session_id)
    })
    .await
}

/// `[[auth.limits]]` `timeout`: a call past its tool's timeout is answered with the
/// proxy's error — 504 before its answer comes, the stream's last event once it
/// streams — and the upstream hears that the call is off, in its session, by the id it
/// knows the call by (an old client's call passed through, a data-layer session's call
/// the proxy renamed), or by the end of the upstream session a bridged 2026-07-28 call
/// ran in.
#[tokio::test]
async fn a_call_past_its_tools_timeout_is_cancelled_upstream() {
    let (auth, demo, proxy) =
        protected_demo("[[auth.limits]]\ntools = [\"sleep\", \"slow\"]\ntimeout = \"800ms\"\n")
            .await;
    let endpoint = proxy.url("/mcp");
    let token = auth.token(ADMIN, &endpoint, None).await;
    let expect_timeout = |error: &serde_json::Value, id: serde_json::Value| {
        assert_eq!(error["id"], id, "{error}");
        assert_eq!(error["error"]["code"], -32603, "{error}");
        assert_eq!(error["error"]["data"]["reason"], "tool_timeout", "{error}");
        assert_eq!(error["error"]["data"]["tool"], "sleep", "{error}");
        assert_eq!(error["error"]["data"]["timeoutMs"], 800, "{error}");
    };

    // An old client, passed through: its answer's head comes at once, its body after
    // the sleep.
    let http = http_client();
    let mut headers = bearer(&token);
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let opened = post_json(&http, &endpoint, &initialize, &headers).await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    headers.extend(session_header(opened.header("mcp-session-id").unwrap()));
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post_json(&http, &endpoint, &initialized, &headers)
            .await
            .status,
        202
    );
    let started = std::time::Instant::now();
    let call = json!({"jsonrpc": "2.0", "id": "old-1", "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 30000}}});
    let late = post_json(&http, &endpoint, &call, &headers).await;
    assert_eq!(late.status, 504, "{}", late.text);
    // The timeout, then the cancellation sent (a few milliseconds).
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    expect_timeout(&late.json(), json!("old-1"));
    assert!(
        cancelled_upstream(&demo, json!({"ms": 30000})).await,
        "{:#?}",
        demo.journal()
    );

    // A data-layer session: the call streams (its head at once, its response never in
    // time); the proxy renamed it upstream.
    let mut session = SessionClient::new(endpoint.clone())
        .with_header("authorization", &format!("Bearer {token}"));
    session.create().await;
    let streamed = session
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 100, "interval_ms": 100}}),
        )
        .await;
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    let last = final_message(&streamed);
    assert_eq!(last["error"]["data"]["reason"], "tool_timeout", "{last}");
    assert_eq!(last["error"]["data"]["tool"], "slow", "{last}");
    assert!(
        cancelled_upstream(&demo, json!({"steps": 100, "interval_ms": 100})).await,
        "{:#?}",
        demo.journal()
    );

    // A 2026-07-28 client, bridged to the old server: the call's upstream session, its
    // state now unknown, is ended (2025-11-25: that ends every request in it).
    let bridged = modern(
        &endpoint,
        &token,
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 30001}}),
    )
    .await;
    assert_eq!(bridged.status, 504, "{}", bridged.text);
    expect_timeout(&bridged.json(), json!(1));
    assert!(
        session_ended_upstream(&demo, json!({"ms": 30001})).await,
        "{:#?}",
        demo.journal()
    );
    // Other tools are not held to it.
    let calm = call_tool(&endpoint, &token, "echo").await;
    assert_eq!(calm.status, 200, "{}", calm.text);
}

/// The claims of a JWT, unverified.
fn claims(token: &str) -> serde_json::Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// `token_exchange` (RFC 8693): an upstream gets a token the authorization server issued
/// for it in exchange for the caller's — the caller's subject, the proxy acting for it,
/// the upstream its audience, the scope asked for — never the caller's own; one exchange
/// serves a caller's requests while the token is good, in every era. A caller whose
/// token holds none of the scope asked for is refused (403, the server's reason) before
/// anything reaches the upstream.
#[tokio::test]
async fn an_upstream_gets_a_token_exchanged_for_the_callers_never_the_callers() {
    let auth = AuthServer::start("k1").await;
    let demo = recording_demo().await;
    let dir = common::binary::WorkDir::new();
    let secret = dir.write("exchange-secret", &format!("{}\n", EXCHANGER.1));
    let port = free_port();
    let proxy = ProxyProcess::launch()
        .dir(dir)
        .toml(&format!(
            "listen = \"127.0.0.1:{port}\"\n\
             [upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             token_exchange = {{ resource = \"https://tools.internal/mcp\", scope = \"tools:admin\", \
             client_id = \"{}\", client_secret_file = {:?} }}\n\
             [auth]\nissuer = \"{}\"\npublic_url = \"http://127.0.0.1:{port}\"\n",
            demo.url(),
            EXCHANGER.0,
            secret.display().to_string(),
            auth.issuer()
        ))
        .start()
        .await;
    let endpoint = proxy.url("/mcp");
    let admin = auth.token(ADMIN, &endpoint, None).await;
    for _ in 0..3 {
        let called = call_tool(&endpoint, &admin, "echo").await;
        assert_eq!(called.status, 200, "{}", called.text);
    }
    let mut session = SessionClient::new(endpoint.clone())
        .with_header("authorization", &format!("Bearer {admin}"));
    session.create().await;
    session
        .call_tool("echo", json!({"msg": "in a session"}))
        .await;

    let calls: Vec<Option<String>> = demo
        .journal()
        .into_iter()
        .filter(|r| r.body.as_ref().is_some_and(|b| b["method"] == "tools/call"))
        .map(|r| r.authorization)
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    let exchanged = calls[0].clone().expect("the upstream gets a token");
    assert!(
        calls.iter().all(|a| a.as_ref() == Some(&exchanged)),
        "one exchange serves the caller's requests: {calls:?}"
    );
    // Every request made for the caller carries it (the proxy's own — its era probe, the
    // DELETE ending an upstream session — carry none).
    let seen: Vec<Option<String>> = demo
        .journal()
        .into_iter()
        .filter(|r| !is_era_probe(r) && r.http_method != "DELETE")
        .map(|r| r.authorization)
        .collect();
    assert!(
        seen.iter().all(|a| a.as_ref() == Some(&exchanged)),
        "the exchanged token on every request, never the caller's own: {seen:?}"
    );
    let claims = claims(exchanged.strip_prefix("Bearer ").unwrap());
    assert_eq!(claims["iss"], auth.issuer(), "{claims}");
    assert_eq!(claims["sub"], ADMIN.0, "{claims}");
    assert_eq!(claims["aud"], "https://tools.internal/mcp", "{claims}");
    assert_eq!(claims["act"]["sub"], EXCHANGER.0, "{claims}");
    assert_eq!(claims["scope"], "tools:admin", "{claims}");

    // A token holding none of the scope asked for: the server refuses to exchange it.
    let reader = auth.token(READER, &endpoint, None).await;
    let before = demo.journal().len();
    let refused = call_tool(&endpoint, &reader, "echo").await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let error = refused.json();
    assert_eq!(
        error["error"]["data"]["reason"], "token_exchange",
        "{error}"
    );
    assert!(
        error["error"]["data"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid_scope")),
        "{error}"
    );
    assert_eq!(demo.journal().len(), before, "nothing reached the upstream");
}
