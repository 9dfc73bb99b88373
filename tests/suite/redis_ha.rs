//! The Redis session store under Redis Sentinel, failing over for real on loopback: a
//! primary, its replica and three sentinels (Debian's `redis-server`, the sentinels in
//! its `--sentinel` mode), two proxy processes (the real binary) sharing them. The
//! primary is killed (SIGKILL, as a crash) and the sentinels promote the replica:
//! sessions created before are served after, each by its own caller only; a deletion
//! stays deleted; requests meanwhile get HTTP 503 with `data.store` and `Retry-After`,
//! and the proxies recover by themselves; a session's creation waits for the replica
//! (`WAIT`), so one created while the replica was catching up outlives the failover; a
//! tool call is still one command in Redis. And one URL whose name follows the primary
//! (a managed Redis's endpoint, played by a relay): a server demoted without dropping
//! its clients is left for the new primary.
//!
//! The sentinels decide fast (down after 500 ms, failover timeout 2 s), so each test
//! takes seconds; none may take longer than [`LIMIT`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use common::fleet::{Endpoint, MASTER_NAME, ProxyProcess, Redis, RedisHa, Replicas};
use common::*;
use serde_json::{Value, json};

const STATE_KEY: &str = "5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1";
/// No test may take longer.
const LIMIT: Duration = Duration::from_secs(90);
/// How long the sentinels may take to promote the replica.
const FAILOVER: Duration = Duration::from_secs(30);

async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test took longer than {LIMIT:?}"))
}

/// A proxy on a free port in front of `upstream`, its sessions in the primary the
/// sentinels of `ha` name; `extra` adds `[session]` keys.
fn config(upstream: &Replicas, ha: &RedisHa, extra: &str) -> String {
    let urls: Vec<String> = upstream.urls().iter().map(|u| format!("{u:?}")).collect();
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\
         [upstream]\nurls = [{}]\nhealth_interval = \"1h\"\n\
         [session]\nstore = \"redis\"\nstate_key = \"{STATE_KEY}\"\nreap_interval = \"1h\"\n\
         redis_sentinels = {}\nredis_master_name = \"{MASTER_NAME}\"\n{extra}\n",
        urls.join(", "),
        ha.sentinels_toml(),
    )
}

/// A proxy on a free port in front of `upstream`, its sessions in the one Redis at `url`.
fn config_one(upstream: &Replicas, url: &str) -> String {
    let urls: Vec<String> = upstream.urls().iter().map(|u| format!("{u:?}")).collect();
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\
         [upstream]\nurls = [{}]\nhealth_interval = \"1h\"\n\
         [session]\nstore = \"redis\"\nstate_key = \"{STATE_KEY}\"\nreap_interval = \"1h\"\n\
         redis_url = \"{url}\"\n",
        urls.join(", "),
    )
}

fn counter(message: &Value) -> u64 {
    assert::text_of(message).parse().unwrap()
}

/// The same session, reached through another proxy, by another caller maybe.
fn via(client: &SessionClient, url: String) -> SessionClient {
    let mut other = SessionClient::new(url);
    other.session_id = client.session_id.clone();
    other.state = client.state.clone();
    other.extra = client.extra.clone();
    other
}

/// Calls `counter` in `client`'s session until it is served, checking that every answer
/// meanwhile is the store's 503; the count it reached, and how many 503s came first.
async fn counter_once_served(client: &mut SessionClient) -> (u64, usize) {
    let deadline = Instant::now() + FAILOVER;
    let mut refused = 0;
    loop {
        let reply = client
            .request("tools/call", json!({"name": "counter", "arguments": {}}))
            .await;
        match reply.status {
            200 => return (counter(&final_message(&reply)), refused),
            503 => {
                let error = &reply.json()["error"];
                assert_eq!(error["code"], -32603, "{}", reply.text);
                assert_eq!(error["data"]["store"], "redis", "{}", reply.text);
                assert_eq!(reply.header("retry-after"), Some("1"), "{}", reply.text);
                // Neither the sentinels' nor the servers' addresses reach the client.
                assert!(!reply.text.contains("127.0.0.1"), "{}", reply.text);
                refused += 1;
            }
            other => panic!("during the failover a session got {other}: {}", reply.text),
        }
        assert!(
            Instant::now() < deadline,
            "the session was not served again within {FAILOVER:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a server is sent, as `MONITOR` shows it: each command a client sent (not those a
/// script ran), by name, but those the sentinels send (`PING`, `INFO`, `PUBLISH`) and
/// the monitor's own.
struct Monitor {
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    reader: tokio::task::JoinHandle<()>,
}

impl Monitor {
    async fn start(port: u16) -> Monitor {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        stream.write_all(b"MONITOR\r\n").await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = sender.send(line);
            }
        });
        Monitor {
            lines: receiver,
            reader,
        }
    }

    /// The commands seen so far, by name.
    async fn commands(&mut self) -> HashMap<String, u64> {
        // The monitor's lines may trail the answers a little.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut seen = HashMap::new();
        while let Ok(line) = self.lines.try_recv() {
            // +1700000000.000000 [0 127.0.0.1:5555] "evalsha" "…" …
            let Some((source, rest)) = line.split_once(" [").and_then(|(_, r)| r.split_once("] "))
            else {
                continue;
            };
            let name = rest.split('"').nth(1).unwrap_or("").to_ascii_lowercase();
            if source.ends_with(" lua") || ["ping", "info", "publish"].contains(&name.as_str()) {
                continue;
            }
            *seen.entry(name).or_insert(0) += 1;
        }
        seen
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[tokio::test]
async fn sessions_outlive_a_sentinel_failover_bound_to_their_callers() {
    bounded(async {
        let mut ha = RedisHa::start().await;
        let upstream = Replicas::start(1).await;
        let a = ProxyProcess::start(&config(&upstream, &ha, "")).await;
        let b = ProxyProcess::start(&config(&upstream, &ha, "")).await;
        let first = ha.primary_port().await.unwrap();
        assert_eq!(first, ha.servers[0].port);

        // Sessions of two callers, made at either proxy and used once; one more deleted.
        let mut alice =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer alice");
        alice.create().await;
        assert_eq!(counter(&alice.call_tool("counter", json!({})).await), 1);
        let mut bob = SessionClient::new(b.url("/mcp")).with_header("authorization", "Bearer bob");
        bob.create().await;
        assert_eq!(counter(&bob.call_tool("counter", json!({})).await), 1);
        let mut deleted =
            SessionClient::new(a.url("/mcp")).with_header("authorization", "Bearer alice");
        deleted.create().await;
        assert_eq!(deleted.delete().await.status, 200);
        let deleted_id = deleted.session_id().to_owned();
        let (pid_a, pid_b) = (a.pid(), b.pid());

        // The primary crashes; the sentinels promote its replica.
        ha.servers[0].stop().await;
        let (count, refused) = counter_once_served(&mut alice).await;
        assert_eq!(count, 2, "alice's session is the one it was");
        assert!(
            refused > 0,
            "no request met the failover: the test did not test it"
        );
        let promoted = ha.failed_over_from(first, FAILOVER).await;
        assert_eq!(
            promoted, ha.servers[1].port,
            "the replica is the primary now"
        );
        let (count, _) = counter_once_served(&mut bob).await;
        assert_eq!(count, 2, "bob's session is the one it was");

        // Each session is its caller's, at either proxy; the other's name finds nothing.
        let mut alice_at_b = via(&alice, b.url("/mcp"));
        assert_eq!(
            counter(&alice_at_b.call_tool("counter", json!({})).await),
            3
        );
        let mut bob_with_alices =
            via(&alice, a.url("/mcp")).with_header("authorization", "Bearer bob");
        let taken = bob_with_alices
            .request("tools/call", json!({"name": "counter", "arguments": {}}))
            .await;
        assert::assert_session_not_found(&taken, alice.session_id());
        // What was deleted before the failover stays deleted.
        let mut revived = via(&deleted, b.url("/mcp"));
        let revived = revived.request("tools/list", json!({})).await;
        assert::assert_session_not_found(&revived, &deleted_id);
        // New sessions work (the promoted server is given the scripts it lacks).
        let mut fresh = SessionClient::new(b.url("/mcp"));
        fresh.create().await;
        assert_eq!(
            fresh.tool_text("echo", json!({"msg": "after"})).await,
            "after"
        );
        assert_eq!(fresh.delete().await.status, 200);
        // Nobody restarted the proxies: they found the new primary themselves.
        assert_eq!((a.pid(), b.pid()), (pid_a, pid_b));
        for proxy in [&a, &b] {
            let (status, body) = proxy.get("/readyz").await;
            assert_eq!(status, 200, "{body}");
        }
    })
    .await;
}

#[tokio::test]
async fn a_session_is_on_the_replica_before_its_creator_hears_of_it() {
    bounded(async {
        let mut ha = RedisHa::start().await;
        let upstream = Replicas::start(1).await;
        // The replica comes back within about two seconds: the creation may wait 4 s.
        let proxy = ProxyProcess::start(&config(
            &upstream,
            &ha,
            "redis_timeout = \"5s\"\nredis_wait_timeout = \"4s\"",
        ))
        .await;
        let primary = ha.servers[0].port;

        // The replica is kept out for a second: what the primary takes meanwhile waits
        // in its memory for the replica to come back and catch up.
        ha.servers[0].shut_out_replicas().await;
        let readmit = tokio::spawn(Redis::let_replicas_in(primary, Duration::from_secs(1)));
        let started = Instant::now();
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        let took = started.elapsed();
        // The creator has heard of it: the primary crashes at once, with whatever it had
        // not passed on.
        ha.servers[0].stop().await;
        readmit.abort();

        ha.failed_over_from(primary, FAILOVER).await;
        let (count, _) = counter_once_served(&mut client).await;
        assert_eq!(count, 1, "the session made it to the replica");
        // It waited for the replica (not for the whole wait_timeout).
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "the creation took {took:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_tool_call_is_one_command_in_redis_under_sentinel() {
    bounded(async {
        let ha = RedisHa::start().await;
        let upstream = Replicas::start(1).await;
        let proxy = ProxyProcess::start(&config(&upstream, &ha, "")).await;
        let primary = ha.primary_port().await.unwrap();

        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        // The first uses load the scripts (once per server): the renewal asked of Redis
        // while the worker does not remember the session, and the one written behind a use
        // served from memory (`session.redis_cache_sessions`); then both are known.
        let mut calls = 0;
        while hits(&proxy).await < 2 {
            calls += 1;
            assert_eq!(
                counter(&client.call_tool("counter", json!({})).await),
                calls
            );
            assert!(calls < 50, "no use was served from memory");
        }
        // Every use written (the last ones behind their answers): both scripts loaded.
        let written = eventually_async(Duration::from_secs(5), || async {
            ha.server(primary).session_uses(client.session_id()).await == calls
        })
        .await;
        assert!(written, "Redis did not count the first {calls} uses");
        let mut monitor = Monitor::start(primary).await;
        for _ in 0..20 {
            calls += 1;
            assert_eq!(
                counter(&client.call_tool("counter", json!({})).await),
                calls
            );
        }
        let sent = monitor.commands().await;
        // At most one `EVALSHA` (a use's renewal, written behind the answer) per call;
        // nothing else.
        let evalsha = sent.get("evalsha").copied().unwrap_or(0);
        assert!((1..=20).contains(&evalsha), "{sent:?}");
        assert_eq!(sent.len(), 1, "{sent:?}");
        // And every use is counted (renewals written together count each use).
        let counted = eventually_async(Duration::from_secs(5), || async {
            ha.server(primary).session_uses(client.session_id()).await == calls
        })
        .await;
        assert!(counted, "Redis did not count the {calls} uses");
    })
    .await;
}

/// Uses of a session served from a worker's memory, as the proxy counts them.
async fn hits(proxy: &ProxyProcess) -> u64 {
    let (_, metrics) = proxy.get("/metrics").await;
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("mcp_proxy_session_cache_total{outcome=\"hit\"} ")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn one_url_that_follows_the_primary_leaves_a_demoted_server_for_the_new_one() {
    bounded(async {
        // Every use asking Redis: a request meets the demoted server (and is refused).
        demoted_then_followed("redis_cache_sessions = 0", true).await;
        // Uses served from memory: the renewal written behind one meets it, and the link
        // moves on all the same; no client need be refused for it.
        demoted_then_followed("", false).await;
    })
    .await;
}

/// A managed Redis's failover under a proxy configured with `extra` `[session]` keys: the
/// session carries on, on the server the endpoint's name moved to.
async fn demoted_then_followed(extra: &str, refused_first: bool) {
    let first = Redis::start().await;
    let second = Redis::start_replica_of(&first).await;
    let endpoint = Endpoint::start(first.port).await;
    let upstream = Replicas::start(1).await;
    let config = format!("{}{extra}\n", config_one(&upstream, &endpoint.url()));
    let proxy = ProxyProcess::start(&config).await;
    let mut client = SessionClient::new(proxy.url("/mcp"));
    client.create().await;
    // Used until it is served from memory, when the proxy keeps sessions there.
    let mut calls = 0;
    loop {
        calls += 1;
        assert_eq!(
            counter(&client.call_tool("counter", json!({})).await),
            calls
        );
        if refused_first || hits(&proxy).await > 0 {
            break;
        }
        assert!(calls < 50, "no use was served from memory");
    }
    let replicated = eventually_async(Duration::from_secs(10), || async {
        second.session_uses(client.session_id()).await == calls
    })
    .await;
    assert!(replicated, "the replica never had the session's use");

    // The failover a managed Redis makes: the replica promoted, the old primary made
    // its replica (keeping its clients), the endpoint's name moved.
    let _: () = second.query(&["REPLICAOF", "NO", "ONE"]).await.unwrap();
    let port = second.port.to_string();
    let _: () = first
        .query(&["REPLICAOF", "127.0.0.1", &port])
        .await
        .unwrap();
    endpoint.point_to(second.port);

    let (count, refused) = counter_once_served(&mut client).await;
    if refused_first {
        assert!(
            refused > 0,
            "no request met the demoted server: the test did not test it"
        );
    }
    assert_eq!(count, calls + 1, "the session is the one it was");
    let moved = eventually(Duration::from_secs(5), || {
        proxy.log().contains("no longer takes writes")
    })
    .await;
    assert!(moved, "{}", proxy.log());
    // From then on the uses go to the new primary.
    let (count, _) = counter_once_served(&mut client).await;
    assert_eq!(count, calls + 2);
    let written = eventually_async(Duration::from_secs(5), || async {
        second.session_uses(client.session_id()).await > calls
    })
    .await;
    assert!(written, "the new primary never had the session's uses");
}
