//! The proxy as an edge gateway for a fleet, in one process: named upstreams routed by
//! path, replicas of an upstream (balancing, stickiness, a replica going down and coming
//! back), old clients sticking to the replica that issued their session (also before
//! replicas that answer an unknown session with 400, not 404), both
//! `on_session_lost` policies, readiness and metrics naming every upstream and replica,
//! a named stdio upstream, and upstreams serving their stateless clients in affinities of
//! their own. The upstream replicas are strict demo servers on loopback (and rogue ones,
//! `common::rogue`, for the 400s).
//! Several proxy processes (shared stores, forwarding, reload, shutdown, nginx) are in
//! `replicas.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::fleet::{Replicas, fleet_config, named};
use common::procs::Marker;
use common::stdio::misbehaving;
use common::*;
use mcp_session_proxy::config::{Affinity, Config, Fallback, OnSessionLost, Target};
use mcp_session_proxy::rewrite::handles::HandleTools;
use mcp_session_proxy::start;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

fn counter(message: &Value) -> u64 {
    assert::text_of(message)
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {message}"))
}

/// Two upstreams of one replica each, `alpha` (the default) and `beta`; stateless
/// calls on pooled sessions (`[stateless] affinity = "shared"`).
async fn alpha_and_beta() -> (Replicas, Replicas, Config) {
    let alpha = Replicas::start(1).await;
    let beta = Replicas::start(1).await;
    let mut config = fleet_config(vec![
        named("alpha", true, alpha.target()),
        named("beta", false, beta.target()),
    ]);
    config.stateless.affinity = Affinity::Shared;
    (alpha, beta, config)
}

#[tokio::test]
async fn upstreams_are_routed_by_path_and_the_default_is_also_at_the_bare_path() {
    // Stateless calls on a pooled session, which stays to be counted.
    let (alpha, beta, config) = alpha_and_beta().await;
    let proxy = start(config).await.unwrap();
    let base = proxy.url();

    let mut at_bare = SessionClient::new(base.clone());
    at_bare.create().await;
    let mut at_alpha = SessionClient::new(format!("{base}/alpha"));
    at_alpha.create().await;
    let mut at_beta = SessionClient::new(format!("{base}/beta"));
    at_beta.create().await;
    assert_eq!(alpha.live(), [2], "the bare path and /alpha are alpha");
    assert_eq!(beta.live(), [1]);
    assert_eq!(at_beta.tool_text("echo", json!({"msg": "b"})).await, "b");
    assert_eq!(at_bare.tool_text("echo", json!({"msg": "a"})).await, "a");

    // A session is known only at its own upstream's paths.
    let mut wrong = SessionClient::new(format!("{base}/alpha"));
    wrong.session_id = at_beta.session_id.clone();
    let reply = wrong.request("tools/list", json!({})).await;
    assert::assert_session_not_found(&reply, at_beta.session_id());
    // …and still works there.
    assert_eq!(
        at_beta.tool_text("echo", json!({"msg": "still"})).await,
        "still"
    );

    // Old clients pass through per upstream too.
    let old = LegacyClient::connect(format!("{base}/beta"), "2025-11-25").await;
    let listed = old
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_eq!(beta.live(), [2]);
    // And stateless (2026-07-28) clients, on beta's own pooled upstream sessions.
    let mut stateless = StatelessClient::new(format!("{base}/beta"));
    let called = stateless
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "s"}}),
        )
        .await;
    assert_eq!(called.status, 200, "{}", called.text);
    assert_eq!(called.json()["result"]["content"][0]["text"], "s");
    assert_eq!(beta.live(), [3], "a pooled session on beta");
    assert_eq!(alpha.live(), [2]);

    // An unknown name is no endpoint.
    let reply = post_json(
        &http_client(),
        &format!("{base}/gamma"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.text);
    proxy.shutdown().await;
}

#[tokio::test]
async fn new_sessions_go_to_the_least_loaded_replica_and_stay_there() {
    let replicas = Replicas::start(3).await;
    let proxy = start(fleet_config(vec![named("api", true, replicas.target())]))
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..6 {
        let mut client = SessionClient::new(proxy.url());
        client.create().await;
        clients.push(client);
    }
    assert_eq!(replicas.live(), [2, 2, 2], "balanced by live sessions");
    // Each session's calls reach the one upstream session behind it: its counter counts
    // 1, 2, 3 whatever the other sessions do in between.
    for round in 1..=3u64 {
        for client in &mut clients {
            let count = counter(&client.call_tool("counter", json!({})).await);
            assert_eq!(count, round, "a session's calls all reach its own replica");
        }
    }
    // Ending sessions frees their replica: the next session goes where there is room.
    let mut first = clients.remove(0);
    let freed = first.call_tool("whoami", json!({})).await;
    let freed_replica = (0..3)
        .find(|&i| {
            replicas
                .server(i)
                .journal()
                .iter()
                .any(|r| r.session_id.as_deref() == Some(assert::text_of(&freed)))
        })
        .unwrap();
    first.delete().await;
    let mut next = SessionClient::new(proxy.url());
    next.create().await;
    assert_eq!(replicas.live()[freed_replica], 2);
    assert_eq!(replicas.live().iter().sum::<usize>(), 6);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_replica_that_goes_down_leaves_rotation_and_returns_when_it_recovers() {
    let mut replicas = Replicas::start(2).await;
    let mut config = fleet_config(vec![named("api", true, replicas.target())]);
    config.upstream.health_interval = Duration::from_millis(200);
    let proxy = start(config).await.unwrap();
    let ready = listener_url(&proxy, "/readyz");
    let http = http_client();

    replicas.stop(1).await;
    // New sessions still open, all on the replica that answers (a refused connection is
    // tried elsewhere and takes the replica out of rotation).
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut client = SessionClient::new(proxy.url());
        client.create().await;
        clients.push(client);
    }
    // Probes hold a session for a moment: counts are read once they are over.
    let settled = eventually(Duration::from_secs(5), || replicas.live() == [4, 0]).await;
    assert!(settled, "{:?}", replicas.live());
    let body = get_json(&ready).await;
    assert_eq!(
        body["checks"]["upstream"], "ok",
        "one replica is enough: {body}"
    );
    assert_eq!(
        body["upstreams"]["api"]["replicas"][replicas.url(1)],
        "failing",
        "{body}"
    );
    assert_eq!(
        body["upstreams"]["api"]["replicas"][replicas.url(0)],
        "ok",
        "{body}"
    );
    let text = get_text(&listener_url(&proxy, "/metrics")).await;
    let healthy = |url: &str| {
        format!("mcp_proxy_upstream_replica_healthy{{upstream=\"api\",replica=\"{url}\"}} ")
    };
    assert!(
        text.contains(&format!("{}0", healthy(&replicas.url(1)))),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}1", healthy(&replicas.url(0)))),
        "{text}"
    );

    // Back: its probe (every 200 ms here) puts it back in rotation, and being the least
    // loaded it takes the next sessions.
    replicas.restart(1).await;
    let back = eventually_async(Duration::from_secs(10), || async {
        let body = get_json(&ready).await;
        body["upstreams"]["api"]["replicas"][replicas.url(1)] == "ok"
    })
    .await;
    assert!(back, "the replica did not return to rotation");
    for _ in 0..2 {
        let mut client = SessionClient::new(proxy.url());
        client.create().await;
        clients.push(client);
    }
    let settled = eventually(Duration::from_secs(5), || replicas.live() == [4, 2]).await;
    assert!(settled, "{:?}", replicas.live());
    // The sessions on the surviving replica never noticed.
    for client in &mut clients {
        assert_eq!(client.tool_text("echo", json!({"msg": "ok"})).await, "ok");
    }

    // Every replica down: not ready.
    replicas.stop(0).await;
    replicas.stop(1).await;
    let failing = eventually_async(Duration::from_secs(10), || async {
        http.get(&ready).send().await.unwrap().status() == 503
    })
    .await;
    assert!(failing, "readiness did not fail with every replica down");
    proxy.shutdown().await;
}

#[tokio::test]
async fn old_clients_stick_to_the_replica_that_issued_their_session() {
    let replicas = Replicas::start(2).await;
    let upstreams = vec![named("api", true, replicas.target())];
    let proxy = start(fleet_config(upstreams.clone())).await.unwrap();
    // One old client on the first replica; a data-layer session loads it, so the next
    // old client's initialize goes to the second.
    let first = LegacyClient::connect(proxy.url(), "2025-11-25").await;
    let mut loader = SessionClient::new(proxy.url());
    loader.create().await;
    let second = LegacyClient::connect(proxy.url(), "2025-06-18").await;
    assert_eq!(replicas.live(), [2, 1]);
    assert!(
        replicas
            .server(1)
            .journal()
            .iter()
            .any(|r| r.session_id.as_deref() == Some(second.session.as_str()))
    );
    // The strict demo server answers 404 to an id it did not issue: every call below
    // succeeding means each reached the replica that issued its id.
    for round in 0..3 {
        for (client, id) in [(&first, 10), (&second, 20)] {
            let reply = client
                .post(
                    json!({"jsonrpc": "2.0", "id": id + round, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"msg": "hi"}}}),
                )
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text);
        }
    }

    // A second proxy never saw these initialize responses (another replica of the proxy,
    // or this one restarted): it finds each id by trying the replicas.
    let other = start(fleet_config(upstreams)).await.unwrap();
    let moved = LegacyClient {
        url: other.url(),
        ..second
    };
    for id in 30..33 {
        let reply = moved
            .post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let deleted = moved.delete().await;
    assert!(deleted.status().is_success(), "{}", deleted.status());
    assert_eq!(replicas.live(), [2, 0]);
    other.shutdown().await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_lost_upstream_session_fails_by_default() {
    let replicas = Replicas::start(2).await;
    let proxy = start(fleet_config(vec![named("api", true, replicas.target())]))
        .await
        .unwrap();
    let mut client = SessionClient::new(proxy.url());
    client.create().await;
    // The replica holding it restarts (it forgets its sessions).
    for i in 0..2 {
        replicas.server(i).forget_sessions();
    }
    let reply = client.request("tools/list", json!({})).await;
    assert::assert_session_not_found(&reply, client.session_id());
    assert_eq!(proxy.live_sessions(), 0, "the mapping is dropped");
    proxy.shutdown().await;
}

#[tokio::test]
async fn reinitialize_replays_the_initialize_keeps_the_session_and_retries_what_is_safe() {
    let replicas = Replicas::start(2).await;
    let mut api = named("api", true, replicas.target());
    api.overrides.on_session_lost = Some(OnSessionLost::Reinitialize);
    let proxy = start(fleet_config(vec![api])).await.unwrap();
    let mut client = SessionClient::new(proxy.url());
    client
        .create_with(json!({
            "io.modelcontextprotocol/clientInfo": {"name": "replayed-client", "version": "7"},
            "io.modelcontextprotocol/clientCapabilities": {"roots": {}}
        }))
        .await;
    let session = client.session_id().to_owned();
    // tools/list teaches the proxy which tools are idempotent (whoami says so).
    assert!(
        assert::tool_names(&final_message(
            &client.request("tools/list", json!({})).await
        ))
        .contains(&"whoami".to_owned())
    );
    let before = assert::text_of(&client.call_tool("whoami", json!({})).await).to_owned();
    assert_eq!(counter(&client.call_tool("counter", json!({})).await), 1);

    // Every replica restarts: the upstream session is gone.
    for i in 0..2 {
        replicas.server(i).forget_sessions();
    }
    // An idempotent call is retried on a new upstream session, the sessionId kept.
    let message = client.call_tool("whoami", json!({})).await;
    let after = assert::text_of(&message).to_owned();
    assert_ne!(after, before, "a new upstream session");
    assert_eq!(session_meta(&message)["sessionId"], session);
    // The replayed initialize carried the client's own identity.
    let replayed = (0..2)
        .flat_map(|i| replicas.server(i).journal())
        .filter(|r| r.method() == Some("initialize"))
        .filter(|r| r.body.as_ref().unwrap()["params"]["clientInfo"]["name"] == "replayed-client")
        .count();
    assert_eq!(replayed, 2, "the first initialize and its replay");

    // A call that is not known to be safe is not retried: the client hears so, keeps its
    // session, and its next call runs on the new upstream session (a fresh counter).
    for i in 0..2 {
        replicas.server(i).forget_sessions();
    }
    let reply = client
        .request("tools/call", json!({"name": "counter", "arguments": {}}))
        .await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32603);
    assert_eq!(error["data"]["retried"], false);
    assert_eq!(error["data"]["sessionId"], session);
    assert_eq!(counter(&client.call_tool("counter", json!({})).await), 1);
    // A list is always safe.
    for i in 0..2 {
        replicas.server(i).forget_sessions();
    }
    let reply = client.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(proxy.live_sessions(), 1);
    let metrics = get_text(&listener_url(&proxy, "/metrics")).await;
    assert!(
        metrics.contains("mcp_proxy_sessions_reinitialized_total 3"),
        "{metrics}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_stdio_upstream_is_served_by_name_beside_an_http_one() {
    let marker = Marker::new("gateway-stdio");
    let http = Replicas::start(1).await;
    let mut tool = named("tool", false, Target::Stdio(misbehaving(&marker, &[])));
    tool.overrides.pool_size = Some(0);
    let proxy = start(fleet_config(vec![named("web", true, http.target()), tool]))
        .await
        .unwrap();
    let mut client = SessionClient::new(format!("{}/tool", proxy.url()));
    client.create().await;
    let pid = client.tool_text("pid", json!({})).await;
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    assert_eq!(client.tool_text("echo", json!({"text": "x"})).await, "x");
    let mut web = SessionClient::new(proxy.url());
    web.create().await;
    assert_eq!(web.tool_text("echo", json!({"msg": "w"})).await, "w");
    let body = get_json(&listener_url(&proxy, "/readyz")).await;
    assert_eq!(body["upstreams"]["tool"]["status"], "ok", "{body}");
    assert_eq!(body["upstreams"]["web"]["default"], true, "{body}");
    client.delete().await;
    proxy.shutdown().await;
    procs::assert_nothing_left(&marker);
}

#[tokio::test]
async fn each_upstream_serves_its_stateless_clients_in_its_own_affinity() {
    // [stateless] says shared; alpha's own [upstreams.alpha.stateless] says handles, at
    // most one per caller.
    let (alpha, beta, mut config) = alpha_and_beta().await;
    let mut own = config.stateless.clone();
    own.affinity = Affinity::Handles {
        tools: HandleTools::default(),
        fallback: Fallback::Isolated,
        max_per_caller: 1,
    };
    config.upstreams[0].stateless = Some(own);
    let proxy = start(config).await.unwrap();
    let base = proxy.url();
    let client = |path: &str| {
        StatelessClient::new(format!("{base}{path}")).with_header("authorization", "Bearer alice")
    };
    let (mut on_alpha, mut on_beta) = (client("/alpha"), client("/beta"));
    let list = |reply: Reply| {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert::tool_names(&reply.json())
    };
    assert!(
        list(on_alpha.request("tools/list", json!({})).await).contains(&"session_open".to_owned())
    );
    assert!(
        !list(on_beta.request("tools/list", json!({})).await).contains(&"session_open".to_owned())
    );

    // alpha: a handle keeps its own upstream session; calls without one are isolated.
    let opened = on_alpha.call_tool("session_open", json!({})).await;
    let handle = opened["result"]["structuredContent"]["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_owned();
    for expected in 1..=2u64 {
        let called = on_alpha
            .call_tool("counter", json!({"session": handle}))
            .await;
        assert_eq!(counter(&called), expected, "{called}");
    }
    for _ in 0..2 {
        let called = on_alpha.call_tool("counter", json!({})).await;
        assert_eq!(counter(&called), 1, "isolated: {called}");
    }
    // The cap is alpha's own.
    let second = on_alpha.call_tool("session_open", json!({})).await;
    assert_eq!(second["result"]["isError"], true, "{second}");
    assert!(
        assert::text_of(&second).contains("already have 1 sessions open"),
        "{second}"
    );

    // beta: the shared pool, one caller's calls on one upstream session.
    for expected in 1..=3u64 {
        let called = on_beta.call_tool("counter", json!({})).await;
        assert_eq!(counter(&called), expected, "shared: {called}");
    }
    assert_eq!(beta.live(), [1], "one pooled session on beta");

    // alpha's handle is alpha's session: unknown at beta, even to its caller.
    let mut headers = HeaderMap::new();
    headers.insert("authorization", "Bearer alice".parse().unwrap());
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": in_session(json!({"name": "counter", "arguments": {}}), &handle, None)});
    let at_beta = post_json(&http_client(), &format!("{base}/beta"), &body, &headers).await;
    assert_eq!(at_beta.error_code(), Some(-32043), "{}", at_beta.text);
    let at_alpha = post_json(&http_client(), &format!("{base}/alpha"), &body, &headers).await;
    assert_eq!(at_alpha.status, 200, "{}", at_alpha.text);
    assert_eq!(
        counter(&at_alpha.json()),
        3,
        "the handle's own upstream session"
    );

    let closed = on_alpha
        .call_tool("session_close", json!({"session": handle}))
        .await;
    assert_eq!(closed["result"]["isError"], false, "{closed}");
    assert!(
        eventually(Duration::from_secs(10), || alpha.live() == [0]).await,
        "alpha's handle and isolated sessions are all ended: {:?}",
        alpha.live()
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn old_clients_are_found_on_replicas_that_answer_400_to_unknown_sessions() {
    // server-everything (and the TypeScript SDK's examples) answer an id they did not
    // issue with 400 and their own words, not 404: still "not this replica".
    let (a, b) = (
        common::rogue::Rogue::start().await,
        common::rogue::Rogue::start().await,
    );
    let target = Target::Http(vec![a.url().parse().unwrap(), b.url().parse().unwrap()]);
    let proxy = start(fleet_config(vec![named("api", true, target)]))
        .await
        .unwrap();
    // Each old client opened its session on a replica directly; the proxy never saw
    // either id, so it tries the replicas in turn — one of the two ids is on the replica
    // tried second.
    for replica in [&a, &b] {
        let direct = LegacyClient::connect(replica.url(), "2025-11-25").await;
        let through = LegacyClient {
            url: proxy.url(),
            ..direct
        };
        let reply = through
            .post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "fine", "arguments": {}}}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(
            final_message(&reply)["result"]["content"][0]["text"],
            "fine"
        );
    }
    // An id no replica issued gets the last replica's answer, as it came.
    let stranger = LegacyClient {
        url: proxy.url(),
        session: "nobody-issued-this".into(),
        ..LegacyClient::connect(a.url(), "2025-11-25").await
    };
    let reply = stranger
        .post(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}))
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.text, common::rogue::NO_VALID_SESSION);
    proxy.shutdown().await;
}
