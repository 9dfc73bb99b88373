//! Several proxy processes — the real binary — in front of several upstream replicas, on
//! loopback: sessions shared through a real `redis-server` (cross-replica use, restart
//! survival, expiry claimed once, an outage and its recovery) or through sealed ids
//! (cross-replica use, key rotation, a deleted id), the memory store's limits, forwarding
//! to the replica that holds a stdio child or a waiting `input_required` call, session
//! handles bound to their caller at every replica (and served where their child runs), SIGHUP
//! reload, graceful shutdown with a stream in flight, and real nginx round-robin in front
//! of two replicas.
//!
//! redis-server and nginx come from Debian's packages (`.ci/test.sh` installs them); these
//! tests fail, not skip, when they are missing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::future::Future;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::fleet::{Nginx, ProxyProcess, Redis, Replicas, free_port, scratch_dir};
use common::procs::{Marker, marked};
use common::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

const STATE_KEY: &str = "5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1";
const K1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const K2: &str = "2222222222222222222222222222222222222222222222222222222222222222";
/// No test may take longer.
const LIMIT: Duration = Duration::from_secs(60);

async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test took longer than {LIMIT:?}"))
}

fn urls_toml(urls: &[String]) -> String {
    let quoted: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A proxy configuration: `listen` on loopback, the upstream's replicas, a store.
fn config(port: u16, urls: &[String], session: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\nshutdown_grace = \"5s\"\n\
         [upstream]\nurls = {}\nhealth_interval = \"1h\"\n\
         [session]\n{session}\n",
        urls_toml(urls)
    )
}

fn redis_session(redis: &Redis) -> String {
    format!(
        "store = \"redis\"\nredis_url = \"{}\"\nstate_key = \"{STATE_KEY}\"",
        redis.url()
    )
}

/// Two proxy processes sharing a real Redis, in front of `n` upstream replicas.
struct OnRedis {
    redis: Redis,
    upstream: Replicas,
    a: ProxyProcess,
    b: ProxyProcess,
}

impl OnRedis {
    async fn start(n: usize) -> OnRedis {
        OnRedis::start_with(n, "").await
    }

    /// With `top` (top-level settings) before each proxy's configuration.
    async fn start_with(n: usize, top: &str) -> OnRedis {
        let redis = Redis::start().await;
        let upstream = Replicas::start(n).await;
        let session = redis_session(&redis);
        let toml = || format!("{top}{}", config(0, &upstream.urls(), &session));
        let a = ProxyProcess::start(&toml()).await;
        let b = ProxyProcess::start(&toml()).await;
        OnRedis {
            redis,
            upstream,
            a,
            b,
        }
    }
}

fn sealed_session(keys: &[&str]) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    format!("store = \"sealed\"\nsealed_keys = [{}]", keys.join(", "))
}

fn counter(message: &Value) -> u64 {
    assert::text_of(message).parse().unwrap()
}

/// No trace of `proxy`'s address (its IP and port) in `text`, which a client got.
fn assert_no_address_of(proxy: &ProxyProcess, text: &str) {
    assert!(
        !text.contains(&proxy.listen.to_string())
            && !text.contains(&format!(":{}", proxy.listen.port())),
        "{} is named in what a client got: {text}",
        proxy.listen
    );
}

/// The same session, reached through another proxy.
fn via(client: &SessionClient, url: String) -> SessionClient {
    let mut other = SessionClient::new(url);
    other.session_id = client.session_id.clone();
    other.state = client.state.clone();
    other.extra = client.extra.clone();
    other
}

#[tokio::test]
async fn a_redis_session_is_bound_to_its_caller_at_every_replica() {
    bounded(async {
        let OnRedis {
            redis: _redis,
            upstream: _upstream,
            a,
            b,
        } = OnRedis::start(1).await;
        let mut alice =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer alice");
        alice.create().await;
        assert_eq!(counter(&alice.call_tool("counter", json!({})).await), 1);
        let id = alice.session_id().to_owned();
        for url in [b.url("/mcp"), a.url("/mcp")] {
            let mut bob = via(&alice, url).with_header("authorization", "Bearer bob");
            // With alice's own state too: the binding, not the state, decides.
            let used = bob
                .request("tools/call", json!({"name": "counter", "arguments": {}}))
                .await;
            assert::assert_session_not_found(&used, &id);
            assert::assert_session_not_found(&bob.delete().await, &id);
        }
        // Alice at B carries on: nothing bob sent renewed, used or ended it.
        let mut alice_b = via(&alice, b.url("/mcp"));
        assert_eq!(counter(&alice_b.call_tool("counter", json!({})).await), 2);
        assert_eq!(alice_b.delete().await.status, 200);
    })
    .await;
}

#[tokio::test]
async fn redis_sessions_are_shared_by_replicas_and_survive_a_restart() {
    bounded(async {
        let redis = Redis::start().await;
        let upstream = Replicas::start(2).await;
        let session = redis_session(&redis);
        let port_a = free_port();
        let mut a = ProxyProcess::start(&config(port_a, &upstream.urls(), &session)).await;
        let b = ProxyProcess::start(&config(0, &upstream.urls(), &session)).await;

        // Create on A, use on B, delete on B: A answers -32043.
        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        assert_eq!(counter(&on_a.call_tool("counter", json!({})).await), 1);
        let mut on_b = via(&on_a, b.url("/mcp"));
        assert_eq!(
            counter(&on_b.call_tool("counter", json!({})).await),
            2,
            "the same upstream session"
        );
        assert_eq!(counter(&on_a.call_tool("counter", json!({})).await), 3);
        let deleted = on_b.delete().await;
        assert_eq!(deleted.status, 200, "{}", deleted.text);
        let reply = on_a.request("tools/list", json!({})).await;
        assert::assert_session_not_found(&reply, on_a.session_id());
        assert_eq!(upstream.live(), [0, 0], "ended upstream");

        // A restarted proxy carries on every live session.
        let mut kept = SessionClient::new(a.url("/mcp"));
        kept.create().await;
        assert_eq!(counter(&kept.call_tool("counter", json!({})).await), 1);
        let dir = scratch_dir("proxy");
        // SIGKILL, and the process gone: its port is free for the restart.
        a.kill().await;
        drop(a);
        let a2 = ProxyProcess::start_in(dir, &config(port_a, &upstream.urls(), &session)).await;
        assert_eq!(a2.listen.port(), port_a);
        assert_eq!(
            counter(&kept.call_tool("counter", json!({})).await),
            2,
            "after the restart"
        );

        // An old client's replica is known to every proxy through Redis: no replica
        // answers it 404 when it moves from A to B.
        let old = LegacyClient::connect(a2.url("/mcp"), "2025-11-25").await;
        let moved = LegacyClient {
            url: b.url("/mcp"),
            ..old
        };
        for id in 1..4 {
            let reply = moved
                .post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text);
        }
        let refused: usize = (0..2)
            .map(|i| {
                upstream
                    .server(i)
                    .journal()
                    .iter()
                    .filter(|r| r.status == 404)
                    .count()
            })
            .sum();
        assert_eq!(refused, 0, "no replica was tried in vain");
    })
    .await;
}

/// A proxy's count of Redis session uses with `outcome` (`hit`, `miss`, `untracked`).
async fn cache_uses(proxy: &ProxyProcess, outcome: &str) -> u64 {
    let (_, metrics) = proxy.get("/metrics").await;
    let sample = format!("mcp_proxy_session_cache_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&sample)?.parse().ok())
        .unwrap_or(0)
}

/// A session created at `proxy` and used until one of its uses was served from memory
/// (one keep-alive connection: one worker remembers it); its count so far.
async fn remembered(proxy: &ProxyProcess) -> (SessionClient, u64) {
    let mut client = SessionClient::new(proxy.url("/mcp"));
    client.create().await;
    let before = cache_uses(proxy, "hit").await;
    let mut calls = 0;
    while cache_uses(proxy, "hit").await == before {
        calls += 1;
        assert_eq!(
            counter(&client.call_tool("counter", json!({})).await),
            calls
        );
        assert!(calls < 50, "no use was served from memory");
    }
    (client, calls)
}

#[tokio::test]
async fn redis_sessions_are_served_from_memory_and_a_change_anywhere_is_heard_before_the_next_use()
{
    bounded(async {
        // One worker each: what A remembered is what serves A's next request (with
        // several, a refusal could come from a worker that never remembered it).
        let on = OnRedis::start_with(1, "workers = 1\n").await;

        // Deleted at B while A remembers it: A refuses it at once.
        let (mut on_a, calls) = remembered(&on.a).await;
        let mut on_b = via(&on_a, on.b.url("/mcp"));
        assert_eq!(
            counter(&on_b.call_tool("counter", json!({})).await),
            calls + 1
        );
        let deleted = on_b.delete().await;
        assert_eq!(deleted.status, 200, "{}", deleted.text);
        let reply = on_a.request("tools/list", json!({})).await;
        assert::assert_session_not_found(&reply, on_a.session_id());

        // Deleted in Redis by hand, or everything flushed: the same. (Then a `PING`, as a
        // deleting replica sends one: Redis writes a change's reports in the same turn as
        // its answer, in no set order, and has written them all once it answers the next.)
        let (mut by_hand, _) = remembered(&on.a).await;
        let key = format!("mcp-session-proxy:s:{}", by_hand.session_id());
        let removed: i64 = on.redis.query(&["DEL", &key]).await.unwrap();
        assert_eq!(removed, 1);
        let _: () = on.redis.query(&["PING"]).await.unwrap();
        let reply = by_hand.request("tools/list", json!({})).await;
        assert::assert_session_not_found(&reply, by_hand.session_id());
        let (mut flushed, _) = remembered(&on.a).await;
        let _: () = on.redis.query(&["FLUSHALL"]).await.unwrap();
        let _: () = on.redis.query(&["PING"]).await.unwrap();
        let reply = flushed.request("tools/list", json!({})).await;
        assert::assert_session_not_found(&reply, flushed.session_id());

        // Its reports connection killed, a worker asks Redis for every use (nothing it
        // remembered can be trusted), then connects again and remembers anew.
        let (mut client, mut calls) = remembered(&on.a).await;
        let killed: i64 = on
            .redis
            .query(&["CLIENT", "KILL", "TYPE", "pubsub"])
            .await
            .unwrap();
        assert!(killed >= 1, "no reports connection to kill");
        let untracked = cache_uses(&on.a, "untracked").await;
        calls += 1;
        assert_eq!(
            counter(&client.call_tool("counter", json!({})).await),
            calls
        );
        assert!(
            cache_uses(&on.a, "untracked").await > untracked,
            "a use was served from memory without reports"
        );
        let hits = cache_uses(&on.a, "hit").await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while cache_uses(&on.a, "hit").await == hits {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the worker never remembered again"
            );
            calls += 1;
            assert_eq!(
                counter(&client.call_tool("counter", json!({})).await),
                calls
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Every use was counted in Redis, those served from memory too.
        let counted = eventually_async(Duration::from_secs(5), || async {
            on.redis.session_uses(client.session_id()).await == calls
        })
        .await;
        assert!(counted, "Redis did not count the {calls} uses");
    })
    .await;
}

#[tokio::test]
async fn expired_redis_sessions_are_ended_upstream_exactly_once() {
    bounded(async {
        let redis = Redis::start().await;
        let upstream = Replicas::start(1).await;
        let session = format!(
            "{}\nidle_ttl = \"1s\"\nreap_interval = \"50ms\"",
            redis_session(&redis)
        );
        let a = ProxyProcess::start(&config(0, &upstream.urls(), &session)).await;
        let b = ProxyProcess::start(&config(0, &upstream.urls(), &session)).await;
        let mut ids = Vec::new();
        for proxy in [&a, &b, &a, &b] {
            let mut client = SessionClient::new(proxy.url("/mcp"));
            client.create().await;
            ids.push(client.tool_text("whoami", json!({})).await);
        }
        let ended = eventually(Duration::from_secs(10), || upstream.live() == [0]).await;
        assert!(
            ended,
            "expired sessions were not ended upstream: {:?}",
            upstream.live()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let journal = upstream.server(0).journal();
        for id in &ids {
            let deletes = journal
                .iter()
                .filter(|r| r.http_method == "DELETE" && r.session_id.as_ref() == Some(id))
                .count();
            assert_eq!(
                deletes, 1,
                "each expired session ended once, by one replica"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_redis_restart_costs_no_request_that_may_run_twice() {
    bounded(async {
        let mut redis = Redis::start().await;
        let upstream = Replicas::start(1).await;
        // One worker: its connection to Redis is the one the restart breaks.
        let proxy = ProxyProcess::start(&format!(
            "workers = 1\n{}",
            config(0, &upstream.urls(), &redis_session(&redis))
        ))
        .await;
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        assert_eq!(counter(&client.call_tool("counter", json!({})).await), 1);

        // Restarted empty: the next use finds its connection dropped and is sent again
        // on a fresh one (a renewal may run twice): the session is gone with Redis's
        // data (-32043), not a 503.
        redis.restart().await;
        let id = client.session_id().to_owned();
        let reply = client
            .request("tools/call", json!({"name": "counter", "arguments": {}}))
            .await;
        assert::assert_session_not_found(&reply, &id);
        // A creation likewise: it works at once.
        let mut fresh = SessionClient::new(proxy.url("/mcp"));
        fresh.create().await;
        assert_eq!(
            fresh.tool_text("echo", json!({"msg": "at once"})).await,
            "at once"
        );
        redis.restart().await;
        let mut again = SessionClient::new(proxy.url("/mcp"));
        again.create().await;
    })
    .await;
}

#[tokio::test]
async fn a_redis_outage_answers_503_and_the_proxy_recovers_by_itself() {
    bounded(async {
        let mut redis = Redis::start().await;
        let upstream = Replicas::start(1).await;
        let proxy = ProxyProcess::start(&config(0, &upstream.urls(), &redis_session(&redis))).await;
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;

        // Redis stops answering. The session's first use needs it (a session no worker
        // remembers yet: `session.redis_cache_sessions`).
        redis.pause();
        let reply = client
            .request("tools/call", json!({"name": "counter", "arguments": {}}))
            .await;
        assert_eq!(reply.status, 503, "{}", reply.text);
        let error = &reply.json()["error"];
        assert_eq!(error["code"], -32603);
        assert_eq!(error["data"]["store"], "redis");
        assert_eq!(reply.header("retry-after"), Some("1"));
        let (status, body) = proxy.get("/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("\"store\":\"failing\""), "{body}");
        // The create path says the same.
        let created = post_json(
            &http_client(),
            &proxy.url("/mcp"),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
            &HeaderMap::new(),
        )
        .await;
        assert_eq!(created.status, 503, "{}", created.text);
        let ended = eventually(Duration::from_secs(5), || upstream.live() == [1]).await;
        assert!(
            ended,
            "the failed create's upstream session was not ended: {:?}",
            upstream.live()
        );

        // Back: nothing Redis kept is lost, and nobody restarted the proxy.
        redis.resume();
        let recovered = eventually_async(Duration::from_secs(10), || async {
            proxy.get("/readyz").await.0 == 200
        })
        .await;
        assert!(recovered, "/readyz did not recover");
        assert_eq!(counter(&client.call_tool("counter", json!({})).await), 1);

        // Redis restarted empty (no persistence): the proxy reconnects; the old session is
        // gone (-32043), new ones work.
        redis.restart().await;
        let probe = via(&client, proxy.url("/mcp"));
        let reconnected = eventually_async(Duration::from_secs(10), || async {
            let body = probe.message(json!(1), "tools/list", json!({}));
            probe.post(&body).await.status == 404
        })
        .await;
        assert!(reconnected, "the proxy did not reconnect to Redis");
        let mut fresh = SessionClient::new(proxy.url("/mcp"));
        fresh.create().await;
        assert_eq!(
            fresh.tool_text("echo", json!({"msg": "again"})).await,
            "again"
        );
    })
    .await;
}

#[tokio::test]
async fn sealed_sessions_cross_replicas_rotate_keys_and_a_deleted_id_is_not_found() {
    bounded(async {
        let upstream = Replicas::start(2).await;
        let a = ProxyProcess::start(&config(0, &upstream.urls(), &sealed_session(&[K1]))).await;
        let port_b = free_port();
        let mut b =
            ProxyProcess::start(&config(port_b, &upstream.urls(), &sealed_session(&[K1]))).await;

        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        let id = on_a.session_id().to_owned();
        assert!(
            id.starts_with("mcps_") && id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "{id}"
        );
        assert!(id.len() < 300, "bounded: {} characters", id.len());
        assert_eq!(counter(&on_a.call_tool("counter", json!({})).await), 1);
        let mut on_b = via(&on_a, b.url("/mcp"));
        assert_eq!(
            counter(&on_b.call_tool("counter", json!({})).await),
            2,
            "B shares only the key"
        );
        // A forged id opens nowhere.
        let mut forged = via(&on_a, b.url("/mcp"));
        let mut bytes = id.clone().into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        forged.session_id = Some(String::from_utf8(bytes).unwrap());
        forged.state = None;
        let reply = forged.request("tools/list", json!({})).await;
        assert_eq!(reply.error_code(), Some(-32043), "{}", reply.text);

        // Rotation: B restarts with a new first key and the old one still opening; the
        // process gone first, so that its port is free for the restart.
        b.kill().await;
        drop(b);
        let b = ProxyProcess::start(&config(
            port_b,
            &upstream.urls(),
            &sealed_session(&[K2, K1]),
        ))
        .await;
        let mut on_b = via(&on_a, b.url("/mcp"));
        assert_eq!(
            counter(&on_b.call_tool("counter", json!({})).await),
            3,
            "sealed with the old key"
        );
        let mut new = SessionClient::new(b.url("/mcp"));
        new.create().await;
        assert_eq!(counter(&new.call_tool("counter", json!({})).await), 1);
        // A has only the old key: the new session is not A's to open.
        let reply = via(&new, a.url("/mcp"))
            .request("tools/list", json!({}))
            .await;
        assert::assert_session_not_found(&reply, new.session_id());

        // Deleted on B, the id still opens on A, but its upstream session was ended.
        assert_eq!(on_b.delete().await.status, 200);
        let reply = on_a.request("tools/list", json!({})).await;
        assert::assert_session_not_found(&reply, &id);
    })
    .await;
}

#[tokio::test]
async fn every_fleet_key_is_settable_through_the_environment() {
    bounded(async {
        let alpha = Replicas::start(2).await;
        let beta = Replicas::start(1).await;
        let alpha_urls = urls_toml(&alpha.urls());
        let env = [
            ("MCP_PROXY_LISTEN", "127.0.0.1:0"),
            ("MCP_PROXY_UPSTREAMS__ALPHA__URLS", alpha_urls.as_str()),
            ("MCP_PROXY_UPSTREAMS__ALPHA__DEFAULT", "true"),
            ("MCP_PROXY_UPSTREAMS__ALPHA__HEALTH_INTERVAL", "300ms"),
            ("MCP_PROXY_UPSTREAMS__BETA__URL", &beta.urls()[0]),
            ("MCP_PROXY_UPSTREAMS__BETA__STATELESS__AFFINITY", "handles"),
            ("MCP_PROXY_SESSION__STORE", "sealed"),
            (
                "MCP_PROXY_SESSION__SEALED_KEYS",
                &format!("[{K2:?}, {K1:?}]"),
            ),
        ];
        let proxy = ProxyProcess::start_with(scratch_dir("proxy"), "", &env).await;
        let (status, ready) = proxy.get("/readyz").await;
        assert_eq!(status, 200, "{ready}");
        let ready: Value = serde_json::from_str(&ready).unwrap();
        assert_eq!(ready["store"], "sealed");
        assert_eq!(ready["upstreams"]["alpha"]["default"], true);
        assert_eq!(
            ready["upstreams"]["alpha"]["replicas"]
                .as_object()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(ready["upstreams"]["beta"]["default"], false);
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        assert!(
            client.session_id().len() > 100,
            "a sealed id: {}",
            client.session_id()
        );
        let mut on_beta = SessionClient::new(proxy.url("/mcp/beta"));
        on_beta.create().await;
        assert_eq!(beta.live(), [1]);
        // beta's own stateless affinity: handles there, not at alpha.
        let tools = |path: &'static str| {
            let url = proxy.url(path);
            async move {
                let reply = StatelessClient::new(url)
                    .request("tools/list", json!({}))
                    .await;
                assert_eq!(reply.status, 200, "{}", reply.text);
                assert::tool_names(&reply.json())
            }
        };
        assert!(
            tools("/mcp/beta")
                .await
                .contains(&"session_open".to_owned())
        );
        assert!(!tools("/mcp").await.contains(&"session_open".to_owned()));
    })
    .await;
}

#[tokio::test]
async fn reinitialize_with_redis_moves_the_session_for_every_replica() {
    bounded(async {
        let redis = Redis::start().await;
        let upstream = Replicas::start(2).await;
        let session = redis_session(&redis);
        let toml = format!(
            "{}
",
            config(0, &upstream.urls(), &session).replace(
                "health_interval = \"1h\"",
                "health_interval = \"1h\"\non_session_lost = \"reinitialize\""
            )
        );
        let a = ProxyProcess::start(&toml).await;
        let b = ProxyProcess::start(&toml).await;
        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        let before = on_a.tool_text("whoami", json!({})).await;
        for i in 0..2 {
            upstream.server(i).forget_sessions();
        }
        // B moves it (tools/list is safe to repeat); A then uses the new upstream session.
        let mut on_b = via(&on_a, b.url("/mcp"));
        let listed = on_b.request("tools/list", json!({})).await;
        assert_eq!(listed.status, 200, "{}", listed.text);
        let after_a = on_a.tool_text("whoami", json!({})).await;
        assert_ne!(after_a, before);
        assert_eq!(
            on_b.tool_text("whoami", json!({})).await,
            after_a,
            "one new upstream session for both"
        );
        assert_eq!(upstream.live().iter().sum::<usize>(), 1);
    })
    .await;
}

#[tokio::test]
async fn memory_store_sessions_belong_to_their_proxy() {
    bounded(async {
        let upstream = Replicas::start(1).await;
        let a = ProxyProcess::start(&config(0, &upstream.urls(), "store = \"memory\"")).await;
        let b = ProxyProcess::start(&config(0, &upstream.urls(), "store = \"memory\"")).await;
        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        let reply = via(&on_a, b.url("/mcp"))
            .request("tools/list", json!({}))
            .await;
        assert::assert_session_not_found(&reply, on_a.session_id());
        assert_eq!(on_a.tool_text("echo", json!({"msg": "mine"})).await, "mine");
    })
    .await;
}

/// A proxy in front of the stdio test server, sharing sessions through Redis.
fn stdio_config(port: u16, redis: &Redis, marker: &Marker) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/misbehaving_server.py"
    );
    let (var, value) = marker.env().pop().unwrap();
    format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [upstream]\ncommand = \"python3\"\nargs = [{script:?}]\npool_size = 0\nstop_grace = \"300ms\"\n\
         [upstream.env]\n{var} = {value:?}\n\
         [session]\n{}\n",
        redis_session(redis)
    )
}

#[tokio::test]
async fn a_stdio_session_arriving_at_the_wrong_replica_is_forwarded_to_its_owner() {
    bounded(async {
        let redis = Redis::start().await;
        let marker = Marker::new("replicas-forward");
        let port_a = free_port();
        let mut a = ProxyProcess::start(&stdio_config(port_a, &redis, &marker)).await;
        let b = ProxyProcess::start(&stdio_config(0, &redis, &marker)).await;
        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        let pid: i32 = on_a.tool_text("pid", json!({})).await.parse().unwrap();
        let children = marked(&marker);
        assert_eq!(children.len(), 1, "{children:?}");
        assert_eq!(children[0].ppid, a.pid() as i32, "A's child");

        // Through B: the same child answers, B starts none.
        let mut on_b = via(&on_a, b.url("/mcp"));
        let through_b: i32 = on_b.tool_text("pid", json!({})).await.parse().unwrap();
        assert_eq!(through_b, pid);
        assert_eq!(marked(&marker).len(), 1);
        assert_eq!(on_b.tool_text("echo", json!({"text": "fwd"})).await, "fwd");

        // A client cannot pass for a replica: the header replicas sign is refused from it
        // (POST, GET, DELETE), before anything is served, and nothing says where A is.
        for value in ["1", "1;1800000000000;-;AAAA"] {
            let mut forged = via(&on_a, b.url("/mcp"));
            forged
                .extra
                .insert("mcp-proxy-forwarded", value.parse().unwrap());
            let reply = forged
                .request("tools/call", json!({"name": "pid", "arguments": {}}))
                .await;
            assert_eq!(
                (reply.status, reply.error_code()),
                (403, Some(-32600)),
                "{}",
                reply.text
            );
            assert_eq!(
                reply.json()["error"]["data"]["header"],
                "mcp-proxy-forwarded"
            );
            assert_no_address_of(&a, &reply.text);
            for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
                let bare = http_client()
                    .request(method.clone(), b.url("/mcp"))
                    .header("mcp-session-id", on_a.session_id())
                    .header("accept", "text/event-stream")
                    .header("mcp-proxy-forwarded", value)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(bare.status(), 403, "{method}");
            }
        }
        // The replicas' own endpoint is not there for clients.
        let (status, _) = b.get("/cluster/tombstones").await;
        assert_eq!(status, 404);
        assert_eq!(marked(&marker).len(), 1, "still A's one child");

        // Deleted through B: A stops its child.
        assert_eq!(on_b.delete().await.status, 200);
        let stopped = eventually(Duration::from_secs(10), || marked(&marker).is_empty()).await;
        assert!(stopped, "the owner's child was not stopped");

        // The owner gone: a clear error, not a child of B's own.
        let mut orphan = SessionClient::new(a.url("/mcp"));
        orphan.create().await;
        // SIGKILL, and the process gone (its port free for the new incarnation below).
        a.kill().await;
        let reply = via(&orphan, b.url("/mcp"))
            .request("tools/call", json!({"name": "pid", "arguments": {}}))
            .await;
        assert_eq!(reply.status, 503, "{}", reply.text);
        let error = &reply.json()["error"];
        assert_eq!(error["code"], -32603);
        assert_eq!(error["data"]["sessionId"], orphan.session_id());
        // The owner's address is internal: logged at B, never answered.
        assert!(error["data"].get("owner").is_none(), "{}", reply.text);
        assert_no_address_of(&a, &reply.text);
        assert!(
            b.eventually_logged(&a.listen.to_string(), Duration::from_secs(5))
                .await,
            "B logs which replica did not answer"
        );
        assert!(
            marked(&marker).iter().all(|p| p.ppid != b.pid() as i32),
            "B started no child"
        );

        // A back at its address is a new incarnation: the child went with the old one, so
        // the session is lost (-32043), wherever the client asks.
        let a2 = ProxyProcess::start(&stdio_config(port_a, &redis, &marker)).await;
        let reply = via(&orphan, b.url("/mcp"))
            .request("tools/call", json!({"name": "pid", "arguments": {}}))
            .await;
        assert::assert_session_not_found(&reply, orphan.session_id());
        let reply = via(&orphan, a2.url("/mcp"))
            .request("tools/list", json!({}))
            .await;
        assert::assert_session_not_found(&reply, orphan.session_id());
    })
    .await;
}

/// A stateless client in handles mode, calling as `who`.
fn caller(url: String, who: &str) -> StatelessClient {
    StatelessClient::new(url).with_header("authorization", &format!("Bearer {who}"))
}

/// Calls tool `name` with `arguments`; the whole answer.
async fn call(client: &mut StatelessClient, name: &str, arguments: Value) -> Value {
    let reply = client
        .request("tools/call", json!({"name": name, "arguments": arguments}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()
}

/// A tool error result saying the handle does not exist (never a protocol error).
fn assert_unknown_handle(answer: &Value) {
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        assert::text_of(answer).contains("does not exist"),
        "{answer}"
    );
}

async fn open_handle(client: &mut StatelessClient) -> String {
    let opened = call(client, "session_open", json!({})).await;
    opened["result"]["structuredContent"]["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_owned()
}

#[tokio::test]
async fn a_session_handle_is_bound_to_its_caller_at_every_replica() {
    bounded(async {
        let redis = Redis::start().await;
        let upstream = Replicas::start(2).await;
        let toml = format!(
            "{}[stateless]\naffinity = \"handles\"\n",
            config(0, &upstream.urls(), &redis_session(&redis))
        );
        let a = ProxyProcess::start(&toml).await;
        let b = ProxyProcess::start(&toml).await;
        let mut alice_a = caller(a.url("/mcp"), "alice");
        let handle = open_handle(&mut alice_a).await;
        let arguments = json!({"session": handle});
        assert_eq!(
            counter(&call(&mut alice_a, "counter", arguments.clone()).await),
            1
        );

        // At B, through Redis: its caller carries on in the same upstream session…
        let mut alice_b = caller(b.url("/mcp"), "alice");
        assert_eq!(
            counter(&call(&mut alice_b, "counter", arguments.clone()).await),
            2
        );
        // …and another caller can neither use nor close it, there or at A.
        for url in [b.url("/mcp"), a.url("/mcp")] {
            let mut bob = caller(url, "bob");
            assert_unknown_handle(&call(&mut bob, "counter", arguments.clone()).await);
            assert_unknown_handle(&call(&mut bob, "session_close", arguments.clone()).await);
        }
        // Nor as a data-layer session.
        let mut bob_headers = HeaderMap::new();
        bob_headers.insert("authorization", "Bearer bob".parse().unwrap());
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": in_session(json!({"name": "counter", "arguments": {}}), &handle, None)});
        let named = post_json(&http_client(), &b.url("/mcp"), &body, &bob_headers).await;
        assert::assert_session_not_found(&named, &handle);
        assert_eq!(
            counter(&call(&mut alice_a, "counter", arguments.clone()).await),
            3,
            "bob touched nothing"
        );

        // Closed by its caller at B: gone at A too, and upstream.
        let closed = call(&mut alice_b, "session_close", arguments.clone()).await;
        assert_eq!(closed["result"]["isError"], false, "{closed}");
        assert_unknown_handle(&call(&mut alice_a, "counter", arguments).await);
        assert!(
            eventually(Duration::from_secs(10), || upstream
                .live()
                .iter()
                .sum::<usize>()
                == 0)
            .await,
            "{:?}",
            upstream.live()
        );
    })
    .await;
}

#[tokio::test]
async fn a_stdio_session_handle_is_served_by_the_replica_running_its_child() {
    bounded(async {
        let redis = Redis::start().await;
        let marker = Marker::new("replicas-handle");
        let toml = |port| {
            format!(
                "{}[stateless]\naffinity = \"handles\"\n",
                stdio_config(port, &redis, &marker)
            )
        };
        let a = ProxyProcess::start(&toml(0)).await;
        let b = ProxyProcess::start(&toml(0)).await;
        let mut alice_a = caller(a.url("/mcp"), "alice");
        let handle = open_handle(&mut alice_a).await;
        let arguments = json!({"session": handle});
        let pid = assert::text_of(&call(&mut alice_a, "pid", arguments.clone()).await).to_owned();
        let children = marked(&marker);
        assert_eq!(children.len(), 1, "{children:?}");
        assert_eq!(
            children[0].ppid,
            a.pid() as i32,
            "A runs the handle's child"
        );

        // At B: forwarded to A, the same child answers; B starts none.
        let mut alice_b = caller(b.url("/mcp"), "alice");
        let through_b = call(&mut alice_b, "pid", arguments.clone()).await;
        assert_eq!(assert::text_of(&through_b), pid, "{through_b}");
        assert!(marked(&marker).iter().all(|p| p.ppid != b.pid() as i32));
        // Another caller at B is refused (by A, which holds it).
        let mut bob_b = caller(b.url("/mcp"), "bob");
        assert_unknown_handle(&call(&mut bob_b, "pid", arguments.clone()).await);

        // Closed through B: A stops its child.
        let closed = call(&mut alice_b, "session_close", arguments.clone()).await;
        assert_eq!(closed["result"]["isError"], false, "{closed}");
        assert!(
            eventually(Duration::from_secs(10), || marked(&marker).is_empty()).await,
            "the owner's child was not stopped"
        );
        assert_unknown_handle(&call(&mut alice_b, "pid", arguments).await);
    })
    .await;
}

#[tokio::test]
async fn an_input_required_retry_at_the_wrong_replica_reaches_the_waiting_call() {
    bounded(async {
        let OnRedis {
            redis: _redis,
            upstream,
            a,
            b,
        } = OnRedis::start(1).await;
        let mut on_a = StatelessClient::new(a.url("/mcp")).with_capabilities(json!({"sampling": {}}));
        let params = json!({"name": "sample", "arguments": {"prompt": "Say cheese"}});
        let first = on_a.request("tools/call", params).await;
        assert_eq!(first.status, 200, "{}", first.text);
        let result = first.json()["result"].clone();
        assert_eq!(result["resultType"], "input_required", "{result}");
        let state = result["requestState"].as_str().unwrap().to_owned();

        // The retry lands on B: B forwards it to A, where the call waits.
        let mut on_b = StatelessClient::new(b.url("/mcp")).with_capabilities(json!({"sampling": {}}));
        let retry = json!({"name": "sample", "arguments": {"prompt": "Say cheese"},
            "inputResponses": {"sample-1": {"role": "assistant", "content": {"type": "text", "text": "cheese"}, "model": "m"}},
            "requestState": state});
        // The token names the replica holding the call, sealed: no client reads it.
        let raw = URL_SAFE_NO_PAD.decode(&state).unwrap();
        for needle in [a.listen.to_string(), a.listen.port().to_string()] {
            assert!(
                !raw.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{needle} is readable in the requestState"
            );
        }
        let done = on_b.request("tools/call", retry.clone()).await;
        assert_eq!(done.status, 200, "{}", done.text);
        let done = done.json();
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], "the client said: cheese");
        assert_eq!(upstream.server(0).journal().iter().filter(|r| r.method() == Some("tools/call")).count(), 1);
        // Used once, wherever it lands.
        let again = on_b.request("tools/call", retry).await;
        assert_eq!((again.status, again.error_code()), (400, Some(-32602)), "{}", again.text);
    })
    .await;
}

#[tokio::test]
async fn a_task_made_at_one_replica_is_polled_and_cancelled_at_the_other_and_outlives_its_owner() {
    bounded(async {
        let redis = Redis::start().await;
        let upstream = Replicas::start(1).await;
        // The demo's tools declare no task support: any call of a client with the tasks
        // extension becomes a task after 200 ms (`slow` streams its answer, so the proxy
        // holds the call from its first byte; one answered by a single JSON body only at
        // its end cannot become a task before it ends).
        let session = format!(
            "{}\n[stateless]\ntask_after = \"200ms\"",
            redis_session(&redis)
        );
        let port_a = free_port();
        let mut a = ProxyProcess::start(&config(port_a, &upstream.urls(), &session)).await;
        let b = ProxyProcess::start(&config(0, &upstream.urls(), &session)).await;
        let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        let mut on_a = StatelessClient::new(a.url("/mcp")).with_capabilities(caps.clone());
        let mut on_b = StatelessClient::new(b.url("/mcp")).with_capabilities(caps);
        let task_of = |reply: &Reply| {
            let result = reply.json()["result"].clone();
            assert_eq!(result["resultType"], "task", "{}", reply.text);
            result["taskId"].as_str().unwrap().to_owned()
        };
        let slow =
            |steps: u64| json!({"name": "slow", "arguments": {"steps": steps, "interval_ms": 300}});
        let id = task_of(&on_a.request("tools/call", slow(5)).await);

        // Polled at B: forwarded to A, which holds the task, until it completes.
        let mut status = Value::Null;
        for _ in 0..50 {
            let got = on_b.request("tasks/get", json!({"taskId": id})).await;
            assert_eq!(got.status, 200, "{}", got.text);
            let result = got.json()["result"].clone();
            status = result["status"].clone();
            if status == "completed" {
                assert_eq!(
                    result["result"]["content"][0]["text"], "done after 5 steps",
                    "{result}"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(status, "completed");

        // Cancelled at B: A's task ends cancelled, and the upstream hears of it.
        let id = task_of(&on_a.request("tools/call", slow(100)).await);
        let ack = on_b.request("tasks/cancel", json!({"taskId": id})).await;
        assert_eq!(
            ack.json()["result"],
            json!({"resultType": "complete"}),
            "{}",
            ack.text
        );
        let got = on_a.request("tasks/get", json!({"taskId": id})).await;
        assert_eq!(got.json()["result"]["status"], "cancelled", "{}", got.text);
        let cancelled = || {
            upstream
                .server(0)
                .journal()
                .iter()
                .any(|r| r.method() == Some("notifications/cancelled"))
        };
        assert!(eventually(Duration::from_secs(10), cancelled).await);

        // The owner dies (SIGKILL) with one task ended and one running. B answers the
        // ended one from Redis, where A wrote it, and the running one as failed, saying
        // its replica stopped; so does A's next incarnation — no hang, no "unknown".
        let ended = task_of(&on_a.request("tools/call", slow(2)).await);
        let running = task_of(&on_a.request("tools/call", slow(1000)).await);
        let mut finished = false;
        for _ in 0..50 {
            let got = on_a.request("tasks/get", json!({"taskId": ended})).await;
            if got.json()["result"]["status"] == "completed" {
                finished = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(finished, "the short task completed at A");
        // Its end is written to Redis just after A shows it: the three ended tasks'.
        let written = || async {
            redis
                .query::<Vec<String>>(&["KEYS", "mcp-session-proxy:t:*"])
                .await
                .is_ok_and(|keys| keys.len() == 3)
        };
        assert!(
            eventually_async(Duration::from_secs(5), written).await,
            "the ended tasks were not written to Redis"
        );
        a.kill().await;
        drop(a);
        answered_after_its_owner(&mut on_b, &ended, &running).await;
        let a = ProxyProcess::start(&config(port_a, &upstream.urls(), &session)).await;
        let mut on_a = StatelessClient::new(a.url("/mcp"))
            .with_capabilities(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
        answered_after_its_owner(&mut on_a, &ended, &running).await;
    })
    .await;
}

/// A replica other than the dead owner of the tasks `ended` (completed) and `running`
/// answers both.
async fn answered_after_its_owner(on: &mut StatelessClient, ended: &str, running: &str) {
    let got = on.request("tasks/get", json!({"taskId": ended})).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let result = &got.json()["result"];
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["result"]["content"][0]["text"], "done after 2 steps");
    let got = on.request("tasks/get", json!({"taskId": running})).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let result = &got.json()["result"];
    assert_eq!(result["status"], "failed", "{result}");
    assert_eq!(result["taskId"], running);
    let why = result["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("stopped"), "{result}");
    let ack = on.request("tasks/cancel", json!({"taskId": running})).await;
    assert_eq!(ack.json()["result"], json!({"resultType": "complete"}));
}

#[tokio::test]
async fn sighup_reloads_the_upstream_list_and_refuses_a_bad_file() {
    bounded(async {
        let alpha = Replicas::start(1).await;
        let beta = Replicas::start(1).await;
        let gamma = Replicas::start(1).await;
        let port = free_port();
        let file = |upstreams: &[(&str, &Replicas)]| {
            let mut toml = format!("listen = \"127.0.0.1:{port}\"\n");
            for (i, (name, replicas)) in upstreams.iter().enumerate() {
                toml.push_str(&format!(
                    "[upstreams.{name}]\nurls = {}\n{}",
                    urls_toml(&replicas.urls()),
                    if i == 0 { "default = true\n" } else { "" }
                ));
            }
            toml
        };
        let proxy = ProxyProcess::start(&file(&[("alpha", &alpha), ("beta", &beta)])).await;
        let mut on_alpha = SessionClient::new(proxy.url("/mcp/alpha"));
        on_alpha.create().await;
        assert_eq!(counter(&on_alpha.call_tool("counter", json!({})).await), 1);
        let mut on_beta = SessionClient::new(proxy.url("/mcp/beta"));
        on_beta.create().await;
        assert_eq!(beta.live(), [1]);

        // beta removed, gamma added.
        std::fs::write(
            proxy.dir().join("proxy.toml"),
            file(&[("alpha", &alpha), ("gamma", &gamma)]),
        )
        .unwrap();
        proxy.signal("HUP");
        assert!(
            proxy
                .eventually_logged("configuration reloaded", Duration::from_secs(10))
                .await,
            "{}",
            proxy.log()
        );
        assert_eq!(
            counter(&on_alpha.call_tool("counter", json!({})).await),
            2,
            "alpha's session kept"
        );
        let ended = eventually(Duration::from_secs(5), || beta.live() == [0]).await;
        assert!(ended, "beta's session was not ended upstream");
        let reply = on_beta.request("tools/list", json!({})).await;
        assert_eq!(reply.status, 404, "/mcp/beta is gone: {}", reply.text);
        let mut on_gamma = SessionClient::new(proxy.url("/mcp/gamma"));
        on_gamma.create().await;
        assert_eq!(on_gamma.tool_text("echo", json!({"msg": "g"})).await, "g");

        // A bad file: refused with its reason, the running configuration kept.
        std::fs::write(
            proxy.dir().join("proxy.toml"),
            "[upstreams.alpha]\nurl = \"ftp://nowhere\"\n",
        )
        .unwrap();
        proxy.signal("HUP");
        assert!(
            proxy
                .eventually_logged("configuration reload refused", Duration::from_secs(10))
                .await,
            "{}",
            proxy.log()
        );
        assert!(
            proxy.log().contains("upstreams.alpha.url"),
            "the reason names the key: {}",
            proxy.log()
        );
        assert_eq!(counter(&on_alpha.call_tool("counter", json!({})).await), 3);
        assert_eq!(
            on_gamma.tool_text("echo", json!({"msg": "still"})).await,
            "still"
        );
    })
    .await;
}

/// A `slow` call streaming in the background: its messages, as they come.
async fn slow_stream(client: &mut SessionClient) -> tokio::task::JoinHandle<Vec<Value>> {
    let response = client
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 5, "interval_ms": 300},
                "_meta": {"progressToken": "p"}}),
        )
        .await;
    assert_event_stream(&response);
    let mut reader = EventReader::new(response);
    let first = reader
        .next()
        .await
        .expect("the first progress notification");
    assert_eq!(first["method"], "notifications/progress");
    tokio::spawn(async move { reader.rest().await })
}

#[tokio::test]
async fn sigterm_finishes_a_stream_in_flight_then_ends_memory_sessions() {
    bounded(async {
        let upstream = Replicas::start(1).await;
        let mut proxy =
            ProxyProcess::start(&config(0, &upstream.urls(), "store = \"memory\"")).await;
        let mut idle = SessionClient::new(proxy.url("/mcp"));
        idle.create().await;
        let mut streaming = SessionClient::new(proxy.url("/mcp"));
        streaming.create().await;
        let stream = slow_stream(&mut streaming).await;
        proxy.signal("TERM");
        // New connections are refused at once…
        let refused = eventually_async(Duration::from_secs(3), || async {
            tokio::net::TcpStream::connect(proxy.listen).await.is_err()
        })
        .await;
        assert!(refused, "still accepting after SIGTERM");
        // …while the stream in flight runs to its response.
        let rest = stream.await.unwrap();
        let last = rest.last().expect("the stream went on");
        assert_eq!(assert::text_of(last), "done after 5 steps", "{rest:?}");
        assert!(proxy.exits_within(Duration::from_secs(10)).await.success());
        assert_eq!(
            upstream.live(),
            [0],
            "memory sessions end with the process, upstream too"
        );
    })
    .await;
}

#[tokio::test]
async fn sigterm_with_redis_leaves_sessions_to_the_other_replicas() {
    bounded(async {
        let OnRedis {
            redis: _redis,
            upstream,
            mut a,
            b,
        } = OnRedis::start(1).await;
        let mut client = SessionClient::new(a.url("/mcp"));
        client.create().await;
        assert_eq!(counter(&client.call_tool("counter", json!({})).await), 1);
        let stream = slow_stream(&mut client).await;
        a.signal("TERM");
        let rest = stream.await.unwrap();
        assert_eq!(assert::text_of(rest.last().unwrap()), "done after 5 steps");
        assert!(a.exits_within(Duration::from_secs(10)).await.success());
        assert_eq!(upstream.live(), [1], "left for the others");
        let mut on_b = via(&client, b.url("/mcp"));
        assert_eq!(counter(&on_b.call_tool("counter", json!({})).await), 2);
    })
    .await;
}

#[tokio::test]
async fn nginx_round_robin_in_front_of_two_replicas_sharing_redis() {
    bounded(async {
        let OnRedis {
            redis: _redis,
            upstream,
            a,
            b,
        } = OnRedis::start(2).await;
        let nginx = Nginx::start(&[a.listen, b.listen]).await;

        let mut clients = Vec::new();
        for _ in 0..4 {
            let mut client = SessionClient::new(nginx.url("/mcp"));
            client.create().await;
            clients.push(client);
        }
        for round in 1..=5u64 {
            for client in &mut clients {
                assert_eq!(
                    counter(&client.call_tool("counter", json!({})).await),
                    round
                );
            }
        }
        // Streams stream through nginx and whichever proxy it picked.
        let rest = slow_stream(&mut clients[0]).await.await.unwrap();
        assert_eq!(assert::text_of(rest.last().unwrap()), "done after 5 steps");
        // Both proxies served (round-robin), and the sessions spread over both replicas.
        for proxy in [&a, &b] {
            let (_, metrics) = proxy.get("/metrics").await;
            let served: f64 = metrics
                .lines()
                .filter(|l| {
                    l.starts_with("mcp_proxy_requests_total{method=\"tools/call\",outcome=\"ok\"}")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            assert!(served >= 5.0, "a proxy served {served} calls:\n{metrics}");
        }
        assert_eq!(upstream.live().iter().sum::<usize>(), 4);
        for client in &mut clients {
            assert_eq!(client.delete().await.status, 200);
        }
        assert_eq!(upstream.live(), [0, 0]);
    })
    .await;
}

/// A client whose connections come from `ip` (every 127.0.0.0/8 address is this host's).
fn from(ip: [u8; 4]) -> reqwest::Client {
    common::http_builder()
        .local_address(std::net::IpAddr::from(ip))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Calls `hang` (never answered) in `session`'s stdio session through `proxy`, once from
/// each of `addresses`: the calls, in flight.
fn hang_through(
    session: &SessionClient,
    proxy: &ProxyProcess,
    addresses: impl IntoIterator<Item = [u8; 4]>,
) -> Vec<tokio::task::JoinHandle<Reply>> {
    addresses
        .into_iter()
        .map(|ip| {
            let mut call = via(session, proxy.url("/mcp"));
            call.http = from(ip);
            tokio::spawn(async move {
                call.request("tools/call", json!({"name": "hang", "arguments": {}}))
                    .await
            })
        })
        .collect()
}

/// What the calls of `hanging` that already ended answered.
async fn ended(hanging: &mut [tokio::task::JoinHandle<Reply>]) -> Vec<String> {
    let mut ended = Vec::new();
    for call in hanging.iter_mut().filter(|call| call.is_finished()) {
        let reply = call.await.unwrap();
        ended.push(format!("{} {}", reply.status, reply.text));
    }
    ended
}

#[tokio::test]
async fn one_callers_hanging_calls_do_not_cut_forwarding_for_the_others() {
    bounded(async {
        let redis = Redis::start().await;
        let marker = Marker::new("replicas-hanging");
        let toml = format!(
            "{}[limits]\nmax_connections_per_address = 10\n",
            stdio_config(0, &redis, &marker)
        );
        let a = ProxyProcess::start(&toml).await;
        let b = ProxyProcess::start(&toml).await;
        // Mallory's session: its child runs at A.
        let mut mallory =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer mallory");
        mallory.http = from([127, 0, 0, 2]);
        mallory.create().await;
        // Twelve calls that never end, through B, each from an address of its own (B's cap
        // per address does not stop them): B forwards every one to A, B's one address there.
        let mut hanging = hang_through(&mallory, &b, (0..12).map(|i| [127, 0, 1, 10 + i]));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            ended(&mut hanging).await,
            Vec::<String>::new(),
            "all still in flight"
        );

        // Another caller's session at A, used through B, is served.
        let mut alice =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer alice");
        alice.http = from([127, 0, 0, 3]);
        alice.create().await;
        let mut alice_b = via(&alice, b.url("/mcp"));
        alice_b.http = from([127, 0, 0, 4]);
        let reply = alice_b
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "through"}}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(assert::text_of(&reply.json()), "through");
        assert_eq!(ended(&mut hanging).await, Vec::<String>::new());
        for call in hanging {
            call.abort();
        }
    })
    .await;
}

#[tokio::test]
async fn a_caller_gets_at_most_its_share_of_the_forwarded_requests() {
    bounded(async {
        let redis = Redis::start().await;
        let marker = Marker::new("replicas-share");
        let toml = format!(
            "{}[cluster]\nmax_forwarded_per_caller = 3\n",
            stdio_config(0, &redis, &marker)
        );
        let a = ProxyProcess::start(&toml).await;
        let b = ProxyProcess::start(&toml).await;
        let mut mallory =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer mallory");
        mallory.create().await;
        let hanging = hang_through(&mallory, &b, [[127, 0, 0, 1]; 3]);
        tokio::time::sleep(Duration::from_millis(1000)).await;

        // A fourth at once is refused to mallory's address (credentials nothing verified
        // are no caller of their own: they share their address's budget)…
        let mut fourth = via(&mallory, b.url("/mcp"));
        let reply = fourth
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "4"}}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (429, Some(-32603)),
            "{}",
            reply.text
        );
        let error = &reply.json()["error"];
        assert_eq!(error["data"]["limit"], "cluster.max_forwarded_per_caller");
        assert_eq!(error["data"]["max"], 3);
        assert!(
            reply.headers.contains_key("retry-after"),
            "{:?}",
            reply.headers
        );
        assert_no_address_of(&a, &reply.text);
        // …but not to anyone else (another address), nor at A itself, where nothing is
        // forwarded.
        let mut alice =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer alice");
        alice.http = from([127, 0, 0, 5]);
        alice.create().await;
        let mut alice_b = via(&alice, b.url("/mcp"));
        alice_b.http = from([127, 0, 0, 5]);
        assert_eq!(alice_b.tool_text("echo", json!({"text": "a"})).await, "a");
        assert_eq!(mallory.tool_text("echo", json!({"text": "m"})).await, "m");

        // Its clients gone, mallory's places come back.
        for call in hanging {
            call.abort();
        }
        let back = eventually_async(Duration::from_secs(10), || async {
            let mut again = via(&mallory, b.url("/mcp"));
            again
                .request(
                    "tools/call",
                    json!({"name": "echo", "arguments": {"text": "5"}}),
                )
                .await
                .status
                == 200
        })
        .await;
        assert!(back, "mallory's places were not given back");
    })
    .await;
}

/// A proxy at `port` with sealed ids, in front of `upstream`, telling `peer` of deletes.
fn sealed_peer(port: u16, upstream: &str, peer: u16) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [upstream]\nurl = {upstream:?}\nhealth_interval = \"1h\"\n\
         [session]\n{}\n\
         [cluster]\npeers = [\"http://127.0.0.1:{peer}\"]\n",
        sealed_session(&[K1])
    )
}

#[tokio::test]
async fn a_deleted_sealed_session_is_refused_at_every_replica_whatever_the_upstream_does() {
    bounded(async {
        // An upstream that refuses DELETE (405) and keeps the session: only the proxy can
        // stop the id from serving.
        let upstream =
            mcp_session_proxy::demo::DemoServer::start(mcp_session_proxy::demo::DemoOptions {
                record: true,
                no_delete: true,
                ..Default::default()
            })
            .await
            .unwrap();
        let (port_a, port_b) = (free_port(), free_port());
        let a = ProxyProcess::start(&sealed_peer(port_a, &upstream.url(), port_b)).await;
        let mut b = ProxyProcess::start(&sealed_peer(port_b, &upstream.url(), port_a)).await;
        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        assert_eq!(counter(&on_a.call_tool("counter", json!({})).await), 1);
        let mut on_b = via(&on_a, b.url("/mcp"));
        assert_eq!(counter(&on_b.call_tool("counter", json!({})).await), 2);
        let calls = || {
            upstream
                .journal()
                .iter()
                .filter(|r| r.method() == Some("tools/call"))
                .count()
        };

        // Deleted at A: the upstream keeps its session (405)…
        let deleted = on_a.delete().await;
        assert_eq!(deleted.status, 200, "{}", deleted.text);
        assert_eq!(
            upstream.live_sessions(),
            1,
            "the upstream refused to end it"
        );
        // …and yet, once the delete is answered, no replica serves the id, with or without
        // its latest state, and nothing more reaches the upstream.
        for url in [b.url("/mcp"), a.url("/mcp")] {
            let mut again = via(&on_b, url.clone());
            let reply = again
                .request("tools/call", json!({"name": "counter", "arguments": {}}))
                .await;
            assert::assert_session_not_found(&reply, on_a.session_id());
            again.state = None;
            assert::assert_session_not_found(&again.delete().await, on_a.session_id());
        }
        assert_eq!(calls(), 2);

        // A restarted B asks A, and still refuses it.
        b.kill().await;
        drop(b);
        let b = ProxyProcess::start(&sealed_peer(port_b, &upstream.url(), port_a)).await;
        let reply = via(&on_b, b.url("/mcp"))
            .request("tools/call", json!({"name": "counter", "arguments": {}}))
            .await;
        assert::assert_session_not_found(&reply, on_a.session_id());
        assert_eq!(calls(), 2);
        let (_, metrics) = b.get("/metrics").await;
        assert!(
            metrics
                .lines()
                .any(|l| l == "mcp_proxy_sealed_tombstones 1"),
            "{metrics}"
        );

        // Other sessions are untouched, wherever they are used.
        let mut other = SessionClient::new(b.url("/mcp"));
        other.create().await;
        assert_eq!(counter(&other.call_tool("counter", json!({})).await), 1);
        assert_eq!(
            counter(
                &via(&other, a.url("/mcp"))
                    .call_tool("counter", json!({}))
                    .await
            ),
            2
        );
    })
    .await;
}

/// Two upstreams, `alpha` (the default) and `beta`, behind a proxy at `port` sharing
/// sessions through `redis`.
fn two_upstreams(port: u16, redis: &Redis, alpha: &Replicas, beta: Option<&Replicas>) -> String {
    let mut toml = format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [session]\n{}\n\
         [upstreams.alpha]\ndefault = true\nurls = {}\nhealth_interval = \"1h\"\n",
        redis_session(redis),
        urls_toml(&alpha.urls())
    );
    if let Some(beta) = beta {
        toml.push_str(&format!(
            "[upstreams.beta]\nurls = {}\nhealth_interval = \"1h\"\n",
            urls_toml(&beta.urls())
        ));
    }
    toml
}

#[tokio::test]
async fn a_reload_ends_only_what_its_replica_owns_and_refuses_to_serve_nothing() {
    bounded(async {
        let redis = Redis::start().await;
        let alpha = Replicas::start(1).await;
        let beta = Replicas::start(1).await;
        let port_a = free_port();
        let a = ProxyProcess::start(&two_upstreams(port_a, &redis, &alpha, Some(&beta))).await;
        let b = ProxyProcess::start(&two_upstreams(0, &redis, &alpha, Some(&beta))).await;
        // Sessions of beta, opened at A and at B; one of alpha.
        let mut beta_a = SessionClient::new(a.url("/mcp/beta"));
        beta_a.create().await;
        let mut beta_b = SessionClient::new(b.url("/mcp/beta"));
        beta_b.create().await;
        let mut on_alpha = SessionClient::new(a.url("/mcp/alpha"));
        on_alpha.create().await;
        assert_eq!(counter(&on_alpha.call_tool("counter", json!({})).await), 1);
        assert_eq!(beta.live(), [2]);

        // A drops beta; B, not reloaded yet, still serves it — every beta session.
        std::fs::write(
            a.dir().join("proxy.toml"),
            two_upstreams(port_a, &redis, &alpha, None),
        )
        .unwrap();
        a.signal("HUP");
        assert!(
            a.eventually_logged("configuration reloaded", Duration::from_secs(10))
                .await,
            "{}",
            a.log()
        );
        assert_eq!(beta.live(), [2], "nothing ended upstream");
        for session in [&beta_b, &beta_a] {
            let mut at_b = via(session, b.url("/mcp/beta"));
            assert_eq!(counter(&at_b.call_tool("counter", json!({})).await), 1);
        }
        let gone = beta_a.request("tools/list", json!({})).await;
        assert_eq!(gone.status, 404, "A serves no beta any more: {}", gone.text);

        // A file naming no upstream would serve nothing: refused, the running one kept.
        std::fs::write(
            a.dir().join("proxy.toml"),
            format!("listen = \"127.0.0.1:{port_a}\"\n"),
        )
        .unwrap();
        a.signal("HUP");
        assert!(
            a.eventually_logged("configuration reload refused", Duration::from_secs(10))
                .await,
            "{}",
            a.log()
        );
        assert!(a.log().contains("names no upstream"), "{}", a.log());
        assert_eq!(counter(&on_alpha.call_tool("counter", json!({})).await), 2);
        assert_eq!(alpha.live(), [1]);
    })
    .await;
}

/// An old client bridged to a modern-only server (the TypeScript SDK 2.x, `legacy:
/// 'reject'`) whose session is deleted through another replica: the replica that holds
/// the bridged session's calls ends them — a call waiting for the client's answer ends
/// at once rather than when its wait runs out.
#[tokio::test]
async fn a_bridged_session_deleted_at_another_replica_ends_at_its_owner() {
    bounded(async {
        let redis = Redis::start().await;
        let server = common::peers::ts2_http(common::peers::Ts2Mode::Reject).await;
        let urls = [server.url()];
        let a = ProxyProcess::start(&config(0, &urls, &redis_session(&redis))).await;
        let b = ProxyProcess::start(&config(0, &urls, &redis_session(&redis))).await;
        let old =
            LegacyClient::connect_with(a.url("/mcp"), "2025-11-25", json!({"elicitation": {}}))
                .await;
        assert!(old.session.starts_with("mcps_"), "bridged: {}", old.session);
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": "ask", "arguments": {"question": "Colour?"}}});
        let response = post_streaming(&old.http, &old.url, &call, &old.headers()).await;
        assert_eq!(response.status(), 200);
        let mut reader = EventReader::new(response);
        let asked = reader.next_request("elicitation/create").await;
        assert_eq!(asked["params"]["message"], "Colour?", "{asked}");

        // Deleted through B, which holds nothing of it.
        let deleted = http_client()
            .delete(b.url("/mcp"))
            .header("mcp-session-id", &old.session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 204);

        // A's call waiting for the answer ends now (its wait would be minutes).
        let ended = tokio::time::timeout(Duration::from_secs(10), reader.rest()).await;
        assert!(
            ended.is_ok(),
            "the owner kept the deleted session's call waiting"
        );
        let reply = old
            .post(json!({"jsonrpc": "2.0", "id": 8, "method": "ping"}))
            .await;
        assert_eq!(reply.status, 404, "{}", reply.text);
    })
    .await;
}

/// A data-layer session of a modern server (the TypeScript SDK 2.x, `legacy: 'reject'`)
/// outlives the proxy replica that opened it: the server holds nothing for it, so the
/// next request at another replica is served there, not refused as a lost session.
#[tokio::test]
async fn a_data_layer_session_of_a_modern_server_outlives_its_replica() {
    bounded(async {
        let redis = Redis::start().await;
        let server = common::peers::ts2_http(common::peers::Ts2Mode::Reject).await;
        let urls = [server.url()];
        let mut a = ProxyProcess::start(&config(0, &urls, &redis_session(&redis))).await;
        let b = ProxyProcess::start(&config(0, &urls, &redis_session(&redis))).await;
        let mut on_a = SessionClient::new(a.url("/mcp"));
        on_a.create().await;
        let echoed = on_a.call_tool("echo", json!({"msg": "a"})).await;
        assert!(echoed.get("error").is_none(), "{echoed}");
        a.kill().await;
        let mut on_b = via(&on_a, b.url("/mcp"));
        let echoed = on_b.call_tool("echo", json!({"msg": "b"})).await;
        assert!(echoed.get("error").is_none(), "{echoed}");
        assert::check_session_meta(&echoed, on_a.session_id());
    })
    .await;
}
