//! stdio upstreams: a child process per data-layer session, started from a warm pool or
//! on demand, capped, stopped and reaped; misbehaving children cost only their own
//! session.
//!
//! Real servers from a registry run as the children: `@modelcontextprotocol/server-everything`
//! in stdio mode and the FastMCP fixture with `--stdio` (both installed by
//! `tests/interop/setup.sh`). `tests/interop/misbehaving_server.py` (standard library
//! only) crashes, hangs, floods, writes garbage, ignores SIGTERM and starts a grandchild
//! on demand, and tells its environment. The proxy in front of them is
//! `common::stdio::StdioProxy`.
//!
//! Processes are counted exactly (`common::procs`): every child a test starts carries a
//! marker unique to that test in its environment, found by reading `/proc`. A process is
//! *reaped* when its `/proc` entry is gone (not even a zombie). Whatever a test leaves
//! behind is SIGKILLed by pid when its `Marker` drops, so a failing test does not leak
//! processes either.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::{Duration, Instant};

use common::assert::{assert_session_not_found, text_of, tool_names};
use common::log::{proxy_log, session_field};
use common::procs::{
    Marker, Proc, alive, assert_nothing_left, no_zombie_children, reaped, stat, this_process,
    zombie_children,
};
use common::stdio::{
    LIVE_CHILDREN, POOLED, StdioProxy, child_of, everything, fastmcp, misbehaving, stdio_config,
};
use common::*;
use mcp_session_proxy::config::{Affinity, Config};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// 1. A real registry server over stdio.

#[tokio::test]
async fn everything_over_stdio_lists_echoes_streams_progress_and_ends_with_delete() {
    let marker = Marker::new("everything");
    let proxy = StdioProxy::start(stdio_config(everything(&marker)), &marker).await;
    assert!(proxy.children().is_empty(), "pool_size 0 starts nothing");
    let mut c = proxy.client();
    c.create().await;
    let children = proxy.children();
    assert_eq!(children.len(), 1, "one child for one session: {children:?}");
    let child = children[0];
    assert_eq!(child.ppid, this_process());

    let listed = final_message(&c.request("tools/list", json!({})).await);
    let tools = tool_names(&listed);
    for tool in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(tools.iter().any(|t| t == tool), "{tool} missing: {tools:?}");
    }
    assert_eq!(session_meta(&listed)["sessionId"], c.session_id());
    assert_eq!(
        c.tool_text("echo", json!({"message": "hello stdio"})).await,
        "Echo: hello stdio"
    );
    assert_eq!(
        c.tool_text("get-sum", json!({"a": 2, "b": 3})).await,
        "The sum of 2 and 3 is 5."
    );

    // Progress arrives as events, as the child sends it, before the stamped result.
    let started = Instant::now();
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "trigger-long-running-operation",
                   "arguments": {"duration": 0.8, "steps": 4},
                   "_meta": {"progressToken": "stdio-progress"}}),
        )
        .await;
    assert_event_stream(&response);
    assert_eq!(response.headers()["mcp-session-id"], c.session_id());
    let messages = EventReader::new(response).all_timed().await;
    let progress: Vec<&(Instant, Value)> = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 4, "{messages:?}");
    for (i, (_, m)) in progress.iter().enumerate() {
        assert_eq!(m["params"]["progressToken"], "stdio-progress");
        assert_eq!(m["params"]["progress"], i as u64 + 1, "in order: {m}");
    }
    let (result_at, result) = messages.last().unwrap();
    assert!(
        text_of(result).contains("Long running operation completed"),
        "{result}"
    );
    assert_eq!(session_meta(result)["sessionId"], c.session_id());
    let first_at = progress[0].0;
    assert!(
        first_at.duration_since(started) < Duration::from_millis(700),
        "the first progress event came after {:?}: held back",
        first_at.duration_since(started)
    );
    assert!(
        result_at.duration_since(first_at) >= Duration::from_millis(400),
        "progress arrived in a burst with the result: not streamed"
    );

    // sessions/delete answers once the child is gone and reaped.
    let deleted = c.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.json()["result"], json!({}));
    assert!(
        reaped(&child),
        "the child still exists after sessions/delete answered: {:?}",
        stat(child.pid)
    );
    assert!(proxy.children().is_empty());
    proxy.shutdown().await;
    assert!(no_zombie_children().await, "{:?}", zombie_children());
}

#[tokio::test]
async fn everything_over_stdio_sampling_round_trip() {
    let marker = Marker::new("sampling");
    let proxy = StdioProxy::start(stdio_config(everything(&marker)), &marker).await;
    let mut c = proxy.client();
    c.create_with(json!({
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "stdio-test", "version": "0.0.1"},
    }))
    .await;
    let tools = tool_names(&final_message(&c.request("tools/list", json!({})).await));
    assert!(
        tools.iter().any(|t| t == "trigger-sampling-request"),
        "the client's sampling capability did not reach the child's initialize: {tools:?}"
    );

    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "trigger-sampling-request", "arguments": {"prompt": "hello", "maxTokens": 5}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut events = EventReader::new(response);
    let sampling = events.next_request("sampling/createMessage").await;
    let request_id = sampling["id"].clone();
    assert!(!request_id.is_null(), "{sampling}");
    assert!(
        sampling["params"]
            .get("_meta")
            .is_none_or(|m| m.get(SESSION_KEY).is_none()),
        "a server-to-client request carries no session _meta: {sampling}"
    );
    let answer = c
        .respond(
            request_id,
            json!({"role": "assistant", "content": {"type": "text", "text": "sampled over stdio"},
                   "model": "test-model", "stopReason": "endTurn"}),
        )
        .await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    let rest = events.rest().await;
    let done = rest
        .iter()
        .find(|m| m.get("method").is_none() && m.get("result").is_some())
        .unwrap_or_else(|| panic!("no tool result after sampling: {rest:?}"));
    let text = serde_json::to_string(&done["result"]["content"]).unwrap();
    assert!(text.contains("sampled over stdio"), "{done}");
    assert_eq!(session_meta(done)["sessionId"], c.session_id());
    assert_eq!(c.delete().await.status, 200);
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn fastmcp_over_stdio_gives_every_session_its_own_server() {
    let marker = Marker::new("fastmcp");
    let proxy = StdioProxy::start(stdio_config(fastmcp(&marker)), &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    assert_eq!(proxy.children().len(), 2);
    assert_eq!(a.tool_text("echo", json!({"msg": "hi"})).await, "hi");
    // The counter lives in the server process: one process per session, so each
    // session counts on its own.
    assert_eq!(a.tool_text("counter", json!({})).await, "1");
    assert_eq!(a.tool_text("counter", json!({})).await, "2");
    assert_eq!(b.tool_text("counter", json!({})).await, "1");
    assert_eq!(a.tool_text("counter", json!({})).await, "3");

    let reply = a
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 3, "delay_ms": 100},
                   "_meta": {"progressToken": 7}}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let events = reply.events();
    let progress: Vec<&Value> = events
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{events:?}");
    assert!(progress.iter().all(|m| m["params"]["progressToken"] == 7));
    let done = events.last().unwrap();
    assert_eq!(text_of(done), "done");
    assert_eq!(session_meta(done)["sessionId"], a.session_id());

    assert_eq!(a.delete().await.status, 200);
    assert_eq!(proxy.children().len(), 1, "only a's server ended");
    assert_eq!(b.tool_text("counter", json!({})).await, "2");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// 2. The warm pool and the cap on children.

#[tokio::test]
async fn the_pool_prestarts_children_and_makes_create_fast() {
    let warm_marker = Marker::new("pool-warm");
    let mut config = stdio_config(everything(&warm_marker));
    config.upstream.pool_size = 2;
    let warm = StdioProxy::start(config, &warm_marker).await;
    assert!(
        eventually(Duration::from_secs(10), || warm.children().len() == 2).await,
        "2 pooled children before any session: {:?}",
        warm.children()
    );
    let pooled = warm.children();
    // Started *and* initialized: the pool gauge counts only children ready for a session.
    assert!(
        warm.pooled_becomes(2).await,
        "the pool never held 2 initialized children: {:?}",
        warm.gauge(POOLED).await
    );
    let mut c = warm.client();
    let started = Instant::now();
    c.create().await;
    let warm_create = started.elapsed();
    assert_eq!(
        c.tool_text("echo", json!({"message": "warm"})).await,
        "Echo: warm"
    );
    // The pool refills: the session's child plus 2 pooled again.
    assert!(
        warm.pooled_becomes(2).await,
        "the pool did not refill: {:?}",
        warm.gauge(POOLED).await
    );
    assert_eq!(warm.children().len(), 3, "{:?}", warm.children());
    assert!(
        pooled.iter().all(alive),
        "a pre-started child was thrown away instead of serving a session or waiting"
    );

    let cold_marker = Marker::new("pool-cold");
    let cold = StdioProxy::start(stdio_config(everything(&cold_marker)), &cold_marker).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cold.children().is_empty());
    let mut d = cold.client();
    let started = Instant::now();
    d.create().await;
    let cold_create = started.elapsed();
    assert_eq!(cold.children().len(), 1);

    eprintln!("sessions/create: warm {warm_create:?}, cold {cold_create:?}");
    assert!(
        warm_create < cold_create / 2,
        "a warm create ({warm_create:?}) should be far faster than a cold one ({cold_create:?})"
    );
    warm.shutdown().await;
    cold.shutdown().await;
    assert_nothing_left(&warm_marker);
    assert_nothing_left(&cold_marker);
}

/// A child that writes its answer right behind a burst of notifications, more than the
/// proxy queues for a reader: notifications past the queue may be dropped (a slow reader
/// loses them rather than stalling the child), the answer never is.
#[tokio::test]
async fn an_answer_behind_a_burst_of_notifications_is_never_dropped() {
    let marker = Marker::new("burst");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut client = proxy.client();
    client.create().await;
    for _ in 0..3 {
        let params = json!({
            "name": "burst",
            "arguments": {"count": 500},
            "_meta": {"progressToken": "p"},
        });
        let reply = client.request("tools/call", params).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let last = common::final_message(&reply);
        assert_eq!(
            last["result"]["content"][0]["text"], "after 500",
            "the answer arrives: {}",
            reply.text
        );
    }
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn creates_beyond_max_children_get_503_naming_the_limit() {
    let marker = Marker::new("cap");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.upstream.max_children = 2;
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    let refused = post_json(
        &a.http,
        &proxy.url(),
        &json!({"jsonrpc": "2.0", "id": 9, "method": "sessions/create"}),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    let body = refused.json();
    assert_eq!(body["id"], 9, "{body}");
    assert_eq!(body["error"]["code"], -32603, "{body}");
    let said = body["error"].to_string();
    assert!(
        said.contains("2 stdio server process") && said.contains("maximum"),
        "the error should name the reason: {body}"
    );
    assert_eq!(proxy.children().len(), 2, "no third child was started");

    // A child ended frees its place.
    assert_eq!(a.delete().await.status, 200);
    let mut c = proxy.client();
    c.create().await;
    assert_eq!(c.tool_text("echo", json!({"text": "again"})).await, "again");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn max_children_holds_under_concurrent_creates() {
    let marker = Marker::new("cap-race");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.upstream.max_children = 2;
    let proxy = StdioProxy::start(config, &marker).await;
    let url = proxy.url();
    let http = http_client();
    let creates = (0..32).map(|i| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            post_json(
                &http,
                &url,
                &json!({"jsonrpc": "2.0", "id": i, "method": "sessions/create"}),
                &HeaderMap::new(),
            )
            .await
            .status
        })
    });
    let mut statuses = Vec::new();
    for create in creates.collect::<Vec<_>>() {
        statuses.push(create.await.unwrap());
    }
    let created = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    let children = proxy.children();
    assert!(
        created <= 2 && children.len() <= 2,
        "max_children = 2, yet {created} sessions were created and {} children run: {statuses:?}",
        children.len()
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// 3. Ids: the same JSON-RPC id twice at once.

#[tokio::test]
async fn requests_with_the_same_id_at_once_never_collide_on_a_child() {
    let marker = Marker::new("same-id");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    async fn call(c: &SessionClient, id: Value, tag: &str) -> Reply {
        let arguments = json!({"tag": tag, "delay_ms": 400});
        c.post(&c.message(
            id,
            "tools/call",
            json!({"name": "same_id_check", "arguments": arguments}),
        ))
        .await
    }
    let started = Instant::now();
    // Two requests with id 1 (and one with "1") in flight at once on a's child, one with
    // id 1 on b's.
    let (first, second, string_id, other) = tokio::join!(
        call(&a, json!(1), "a-first"),
        call(&a, json!(1), "a-second"),
        call(&a, json!("1"), "a-string"),
        call(&b, json!(1), "b"),
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1100),
        "the calls were not in flight at once ({elapsed:?})"
    );
    let mut received = Vec::new();
    for (reply, tag, id) in [
        (&first, "a-first", json!(1)),
        (&second, "a-second", json!(1)),
        (&string_id, "a-string", json!("1")),
        (&other, "b", json!(1)),
    ] {
        assert_eq!(reply.status, 200, "{}", reply.text);
        let message = final_message(reply);
        assert_eq!(
            message["id"], id,
            "the client's own id, type and all: {message}"
        );
        let seen: Value = serde_json::from_str(text_of(&message)).unwrap();
        assert_eq!(
            seen["tag"], tag,
            "each request gets its own answer: {message}"
        );
        received.push((tag, seen["received_id"].clone()));
    }
    let on_a: Vec<&Value> = received[..3].iter().map(|(_, id)| id).collect();
    assert!(
        on_a[0] != on_a[1] && on_a[0] != on_a[2] && on_a[1] != on_a[2],
        "the child saw colliding ids: {received:?}"
    );
    assert_eq!(
        session_meta(&final_message(&other))["sessionId"],
        b.session_id()
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn a_cancellation_names_the_request_as_the_child_knows_it() {
    let marker = Marker::new("cancel");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let request = c.message(
        json!("cancel-me"),
        "tools/call",
        json!({"name": "cancellable", "arguments": {"ms": 2000}}),
    );
    let call = c.post(&request);
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": in_session(json!({"requestId": "cancel-me", "reason": "test"}), c.session_id(), None)});
        c.post(&body).await
    };
    let (answer, cancelled) = tokio::join!(call, cancel);
    assert_eq!(cancelled.status, 202, "{}", cancelled.text);
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = final_message(&answer);
    assert_eq!(message["id"], "cancel-me");
    assert_eq!(
        text_of(&message),
        "cancelled",
        "the child never learnt that its request was cancelled: notifications/cancelled \
         reached it with the client's id, not the id the proxy gave the request"
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// 4. Ending children: delete, expiry, shutdown.

#[tokio::test]
async fn an_expired_session_ends_its_child() {
    let marker = Marker::new("expiry");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.session.idle_ttl = Duration::from_secs(1);
    config.session.reap_interval = Duration::from_millis(50);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let child = child_of(&mut c).await;
    let mut d = proxy.client();
    d.create().await;
    let kept = child_of(&mut d).await;
    // d stays in use, c idles.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert_eq!(d.tool_text("echo", json!({"text": "busy"})).await, "busy");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        eventually(Duration::from_secs(3), || reaped(&child)).await,
        "the expired session's child still exists: {:?}",
        stat(child.pid)
    );
    assert!(alive(&kept), "the session in use keeps its child");
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_session_not_found(&reply, c.session_id());
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

/// How long `sessions/delete` takes for a child started with `flags`.
async fn time_delete(test: &str, flags: &[&str], grace: Duration) -> (Duration, Proc) {
    let marker = Marker::new(test);
    let mut config = stdio_config(misbehaving(&marker, flags));
    config.upstream.stop_grace = grace;
    let proxy = StdioProxy::start(config, &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let child = child_of(&mut c).await;
    let started = Instant::now();
    let deleted = c.delete().await;
    let took = started.elapsed();
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert!(
        reaped(&child),
        "{flags:?}: the child outlived sessions/delete: {:?}",
        stat(child.pid)
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
    (took, child)
}

#[tokio::test]
async fn delete_closes_stdin_then_sends_sigterm_then_sigkill() {
    let grace = Duration::from_millis(600);
    let ((polite, _), (lingering, _), (stubborn, _)) = tokio::join!(
        time_delete("ladder-eof", &[], grace),
        time_delete("ladder-term", &["--linger"], grace),
        time_delete("ladder-kill", &["--linger", "--ignore-sigterm"], grace),
    );
    eprintln!("delete: exits at EOF {polite:?}, at SIGTERM {lingering:?}, at SIGKILL {stubborn:?}");
    assert!(
        polite < grace,
        "a child that exits when stdin closes took {polite:?}"
    );
    assert!(
        lingering >= grace && lingering < grace * 2,
        "a child that exits at SIGTERM took {lingering:?} (grace {grace:?})"
    );
    assert!(
        stubborn >= grace * 2 && stubborn < grace * 3,
        "a child that ignores SIGTERM took {stubborn:?} (grace {grace:?})"
    );
}

#[tokio::test]
async fn shutdown_ends_every_child_pooled_or_in_a_session() {
    let marker = Marker::new("shutdown-all");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.upstream.pool_size = 2;
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    let in_sessions = [child_of(&mut a).await, child_of(&mut b).await];
    assert!(
        proxy.pooled_becomes(2).await,
        "the pool did not refill: {:?}",
        proxy.gauge(POOLED).await
    );
    let all = proxy.children();
    assert_eq!(all.len(), 4, "2 in sessions + 2 pooled: {all:?}");
    assert!(in_sessions.iter().all(|p| all.contains(p)));
    proxy.shutdown().await;
    for p in &all {
        assert!(reaped(p), "{p:?} outlived shutdown: {:?}", stat(p.pid));
    }
    assert_nothing_left(&marker);
    assert!(no_zombie_children().await, "{:?}", zombie_children());
}

#[tokio::test]
async fn shutdown_kills_a_child_that_ignores_sigterm_and_its_grandchild() {
    let marker = Marker::new("sigterm");
    let grace = Duration::from_millis(400);
    let mut config = stdio_config(misbehaving(
        &marker,
        &["--ignore-sigterm", "--linger", "--spawn-grandchild"],
    ));
    config.upstream.stop_grace = grace;
    let proxy = StdioProxy::start(config, &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let child = child_of(&mut c).await;
    let grandchild_pid: i32 = c.tool_text("grandchild", json!({})).await.parse().unwrap();
    let grandchild = stat(grandchild_pid).unwrap();
    assert_eq!(grandchild.ppid, child.pid);
    assert_eq!(proxy.children().len(), 2, "the child and its `sleep 300`");

    let took = proxy.shutdown().await;
    assert!(
        reaped(&child),
        "the SIGTERM-proof child outlived shutdown: {:?}",
        stat(child.pid)
    );
    assert!(
        eventually(Duration::from_secs(2), || !alive(&grandchild)).await,
        "the grandchild was orphaned: {:?}",
        stat(grandchild.pid)
    );
    // stdin closed, grace, SIGTERM (ignored), grace, SIGKILL.
    assert!(
        took >= grace * 2 - Duration::from_millis(50),
        "shutdown took only {took:?}: the child was not given its grace"
    );
    assert!(
        took < grace * 2 + Duration::from_millis(1500),
        "shutdown took {took:?} for one child with stop_grace {grace:?}"
    );
    assert_nothing_left(&marker);
    assert!(no_zombie_children().await, "{:?}", zombie_children());
}

#[tokio::test]
async fn shutdown_with_several_sigterm_proof_children_kills_them_all_within_the_grace() {
    let marker = Marker::new("sigterm-many");
    let grace = Duration::from_secs(1);
    let mut config = stdio_config(misbehaving(&marker, &["--ignore-sigterm", "--linger"]));
    config.upstream.stop_grace = grace;
    let proxy = StdioProxy::start(config, &marker).await;
    let mut clients = Vec::new();
    let mut children = Vec::new();
    for _ in 0..3 {
        let mut c = proxy.client();
        c.create().await;
        children.push(child_of(&mut c).await);
        clients.push(c);
    }
    let took = proxy.shutdown().await;
    let survivors: Vec<&Proc> = children.iter().filter(|p| !reaped(p)).collect();
    assert!(
        survivors.is_empty(),
        "children outlived Running::shutdown() (took {took:?}): {survivors:?}"
    );
    assert!(
        took < grace * 2 + Duration::from_millis(1500),
        "shutdown took {took:?} for 3 children with stop_grace {grace:?}: they are stopped \
         one after another, not together"
    );
}

#[tokio::test]
async fn shutdown_kills_a_sigterm_proof_child_whatever_the_stop_grace() {
    // stdin closed at 0 s, SIGTERM at 3 s, SIGKILL due at 6 s: longer than the 5 s that
    // Running::shutdown allows for ending sessions.
    let marker = Marker::new("sigterm-long-grace");
    let mut config = stdio_config(misbehaving(&marker, &["--ignore-sigterm", "--linger"]));
    config.upstream.stop_grace = Duration::from_secs(3);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let child = child_of(&mut c).await;
    let took = proxy.shutdown().await;
    assert!(
        reaped(&child),
        "the child outlived Running::shutdown() (took {took:?}): {:?}",
        stat(child.pid)
    );
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn shutdown_also_ends_a_pooled_child_still_starting() {
    let marker = Marker::new("shutdown-starting");
    let mut config = stdio_config(misbehaving(&marker, &["--slow-start=2000"]));
    config.upstream.pool_size = 1;
    let proxy = StdioProxy::start(config, &marker).await;
    // The child the proxy spawned, from the reading that found it: while it starts,
    // `python3` may still be a wrapper (a pyenv shim) that execs and forks helpers of its
    // own, so its marked processes come and go, but the spawned one keeps its pid.
    let mut spawned = None;
    assert!(
        eventually(Duration::from_secs(5), || {
            let own: Vec<Proc> = proxy
                .children()
                .into_iter()
                .filter(|p| p.ppid == this_process())
                .collect();
            spawned = (own.len() == 1).then(|| own[0]);
            spawned.is_some()
        })
        .await,
        "the pool starts a child"
    );
    let starting = spawned.expect("found by the reading above");
    assert_eq!(proxy.gauge(POOLED).await, Some(0), "still initializing");
    proxy.shutdown().await;
    assert!(
        reaped(&starting),
        "a child still starting when the proxy shut down outlived Running::shutdown(): {:?}",
        stat(starting.pid)
    );
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn a_client_giving_up_on_create_leaves_no_child_behind() {
    let marker = Marker::new("create-abandoned");
    let mut config = stdio_config(misbehaving(&marker, &["--slow-start=1500"]));
    config.upstream.max_children = 1;
    let proxy = StdioProxy::start(config, &marker).await;
    let impatient = common::http_builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(proxy.url())
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH)
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}).to_string())
        .send()
        .await;
    assert!(
        gave_up.is_err(),
        "the create should still be starting its child"
    );
    assert_eq!(
        proxy.children().len(),
        1,
        "the child of the abandoned create"
    );
    // The child belongs to no session: once its start-up is over, it must not be kept.
    assert!(
        eventually(Duration::from_secs(4), || proxy.children().is_empty()).await,
        "the abandoned create's child is still running: {:?}",
        proxy.children()
    );
    // ... and does not hold one of the max_children places. Gone from /proc is not yet
    // given back: the proxy releases the place once its waiter has reaped the child and
    // ended what is left of its process group, a moment later. So wait until the proxy
    // counts no live child, then take the place with a new session.
    assert!(
        proxy.gauge_becomes(LIVE_CHILDREN, 0).await,
        "the abandoned create's child still holds a max_children place: {LIVE_CHILDREN} = {:?}",
        proxy.gauge(LIVE_CHILDREN).await
    );
    let mut c = proxy.client();
    c.create().await;
    assert_eq!(c.tool_text("echo", json!({"text": "ok"})).await, "ok");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn no_orphan_grandchildren_after_delete_or_crash() {
    let marker = Marker::new("grandchild");
    let mut config = stdio_config(misbehaving(&marker, &["--spawn-grandchild"]));
    config.upstream.stop_grace = Duration::from_millis(300);
    let proxy = StdioProxy::start(config, &marker).await;

    // A well-behaved child exits as soon as its stdin closes; what it started must not
    // outlive it.
    let mut deleted = proxy.client();
    deleted.create().await;
    let child = child_of(&mut deleted).await;
    let grandchild = stat(
        deleted
            .tool_text("grandchild", json!({}))
            .await
            .parse()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(deleted.delete().await.status, 200);
    assert!(reaped(&child));

    let mut crashed = proxy.client();
    crashed.create().await;
    let crashed_child = child_of(&mut crashed).await;
    let crashed_grandchild = stat(
        crashed
            .tool_text("grandchild", json!({}))
            .await
            .parse()
            .unwrap(),
    )
    .unwrap();
    let _ = crashed
        .request("tools/call", json!({"name": "crash", "arguments": {}}))
        .await;
    assert!(eventually(Duration::from_secs(3), || reaped(&crashed_child)).await);

    let after_delete = eventually(Duration::from_secs(2), || !alive(&grandchild)).await;
    let after_crash = eventually(Duration::from_secs(2), || !alive(&crashed_grandchild)).await;
    assert!(
        after_delete && after_crash,
        "grandchildren outlived their child's end: after delete {:?} (running: {}), after \
         crash {:?} (running: {})",
        stat(grandchild.pid),
        !after_delete,
        stat(crashed_grandchild.pid),
        !after_crash,
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn a_child_ignoring_stdin_eof_dies_with_a_proxy_killed_by_sigkill() {
    // The real binary, so that it can be SIGKILLed: no shutdown, no drop guard runs.
    let marker = Marker::new("pdeathsig");
    let script = common::interop::repo_root().join("tests/interop/misbehaving_server.py");
    let toml = format!(
        "[upstream]\ncommand = \"python3\"\nargs = [{:?}, \"--linger\"]\npool_size = 1\n\
         [upstream.env]\n{} = {:?}\n",
        script.display().to_string(),
        common::procs::MARKER_VAR,
        marker.to_string(),
    );
    let mut proxy = common::binary::ProxyProcess::start(&toml).await;
    assert!(
        eventually(Duration::from_secs(10), || marker_children(&marker).len()
            == 1)
        .await,
        "the pooled child never started: {:?}",
        marker_children(&marker)
    );
    let child = marker_children(&marker)[0];
    assert_eq!(
        child.ppid as u32,
        proxy.pid(),
        "the child is the proxy's own"
    );
    // Started and initialized (a child killed half-way through its handshake would die
    // of writing to a closed pipe anyway).
    let http = http_client();
    let pooled = eventually_async(Duration::from_secs(10), || async {
        let metrics = http.get(proxy.url("/metrics")).send().await.unwrap();
        let text = metrics.text().await.unwrap();
        text.contains(&format!("{POOLED} 1"))
    })
    .await;
    assert!(pooled, "the child was never initialized");
    proxy.kill().await;
    assert!(
        eventually(Duration::from_secs(3), || !alive(&child)).await,
        "a child that ignores its stdin closing outlived the proxy killed by SIGKILL"
    );
    assert_nothing_left(&marker);
}

fn marker_children(marker: &Marker) -> Vec<Proc> {
    common::procs::marked(marker)
}

// ---------------------------------------------------------------------------------------
// 5. Children that crash, write garbage, flood, hang.

/// Calls `tool` in session a (whose child then misbehaves) with session b beside it:
/// a's request gets -32603 naming `why`, a's session then answers -32043, a's child is
/// reaped, b keeps working.
async fn misbehaviour_costs_only_its_own_session(
    test: &str,
    tool: &str,
    arguments: Value,
    why: &str,
    configure: impl FnOnce(&mut Config),
) {
    let marker = Marker::new(test);
    let mut config = stdio_config(misbehaving(&marker, &[]));
    configure(&mut config);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    let a_child = child_of(&mut a).await;
    let b_child = child_of(&mut b).await;
    let mut a_listening = a.listen().await;

    let reply = a
        .request("tools/call", json!({"name": tool, "arguments": arguments}))
        .await;
    assert!(
        reply.status == 200 || reply.status == 502,
        "{tool}: HTTP {} {}",
        reply.status,
        reply.text
    );
    let message = final_message(&reply);
    assert_eq!(message["error"]["code"], -32603, "{tool}: {message}");
    assert!(
        !message["id"].is_null(),
        "{tool}: the error answers the request: {message}"
    );
    let said = message["error"].to_string();
    assert!(
        said.contains(why),
        "{tool}: the error should say why ({why:?}): {message}"
    );

    let again = a
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_session_not_found(&again, a.session_id());
    let ended = tokio::time::timeout(Duration::from_secs(5), a_listening.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "{tool}: the dead session's listen stream should end: {ended:?}"
    );
    assert!(
        eventually(Duration::from_secs(5), || reaped(&a_child)).await,
        "{tool}: the child was not stopped and reaped: {:?}",
        stat(a_child.pid)
    );

    assert!(
        alive(&b_child),
        "{tool}: the other session's child was touched"
    );
    assert_eq!(b.tool_text("echo", json!({"text": "fine"})).await, "fine");
    let mut c = proxy.client();
    c.create().await;
    assert_eq!(c.tool_text("echo", json!({"text": "new"})).await, "new");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
    assert!(no_zombie_children().await, "{:?}", zombie_children());
}

#[tokio::test]
async fn a_crashing_child_costs_only_its_own_session() {
    misbehaviour_costs_only_its_own_session(
        "crash",
        "crash",
        json!({}),
        // In the child's terms: its exit status and its last words on stderr (as they
        // appear inside the JSON error object).
        r#"the stdio server exited with status 1 before answering; its last stderr line: \"misbehaving: crashing on purpose\""#,
        |_| {},
    )
    .await;
}

#[tokio::test]
async fn a_child_writing_garbage_costs_only_its_own_session() {
    misbehaviour_costs_only_its_own_session(
        "garbage",
        "garbage",
        json!({}),
        "the stdio server wrote a line that is not JSON-RPC",
        |_| {},
    )
    .await;
}

#[tokio::test]
async fn a_child_flooding_stdout_costs_only_its_own_session() {
    misbehaviour_costs_only_its_own_session(
        "flood",
        "flood",
        json!({"bytes": 2 * 1024 * 1024}),
        "the stdio server wrote a line longer than 1048576 bytes",
        |config| config.upstream.max_message_bytes = 1024 * 1024,
    )
    .await;
}

#[tokio::test]
async fn a_hanging_request_times_out_and_nothing_else_notices() {
    let marker = Marker::new("hang");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.upstream.timeout = Duration::from_millis(500);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    let a_child = child_of(&mut a).await;

    let started = Instant::now();
    let hung = b_while(
        a.request("tools/call", json!({"name": "hang", "arguments": {}})),
        &mut b,
    )
    .await;
    let took = started.elapsed();
    assert_eq!(hung.status, 504, "{}", hung.text);
    let body = hung.json();
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert!(
        body["error"].to_string().contains("within 500 ms"),
        "the error should say it timed out: {body}"
    );
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(3),
        "timed out after {took:?}"
    );
    // The session and its child carry on.
    assert!(alive(&a_child));
    assert_eq!(
        a.tool_text("echo", json!({"text": "still here"})).await,
        "still here"
    );
    assert_eq!(b.tool_text("echo", json!({"text": "b"})).await, "b");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

/// Runs `hung` while session `b` is used meanwhile (it must not wait for `hung`).
async fn b_while(hung: impl std::future::Future<Output = Reply>, b: &mut SessionClient) -> Reply {
    let mut hung = std::pin::pin!(hung);
    tokio::select! {
        reply = &mut hung => panic!("the hanging call answered before the other session was used: {reply:?}"),
        text = b.tool_text("echo", json!({"text": "meanwhile"})) => assert_eq!(text, "meanwhile"),
    }
    hung.await
}

#[tokio::test]
async fn after_a_timed_out_request_notifications_still_reach_the_next_request() {
    let marker = Marker::new("hang-then-log");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.upstream.timeout = Duration::from_millis(500);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut a = proxy.client();
    a.create().await;

    // Before: the child's log notification rides on the request it came with.
    let before = a
        .request(
            "tools/call",
            json!({"name": "log_then_echo", "arguments": {"text": "first"}}),
        )
        .await;
    let logs = |reply: &Reply| {
        reply
            .events()
            .into_iter()
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    assert_eq!(logs(&before), 1, "{}", before.text);

    let hung = a
        .request("tools/call", json!({"name": "hang", "arguments": {}}))
        .await;
    assert_eq!(hung.status, 504, "{}", hung.text);

    // After: the timed-out request is no longer in flight; the next one is the only one.
    let after = a
        .request(
            "tools/call",
            json!({"name": "log_then_echo", "arguments": {"text": "second"}}),
        )
        .await;
    assert_eq!(after.status, 200, "{}", after.text);
    assert_eq!(text_of(&final_message(&after)), "second");
    assert_eq!(
        logs(&after),
        1,
        "the log notification of the only request in flight was lost (sent to the \
         timed-out request?): {}",
        after.text
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// 6. The child's stderr in the proxy's log.

#[tokio::test]
async fn child_stderr_reaches_the_proxy_log_tagged_with_its_session() {
    let log = proxy_log();
    let marker = Marker::new("stderr");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut a = proxy.client();
    a.create().await;
    let mut b = proxy.client();
    b.create().await;
    let line_a = format!("stderr-line-from-a-{}", &*marker);
    let line_b = format!("stderr-line-from-b-{}", &*marker);
    assert_eq!(
        a.tool_text("stderr", json!({"text": line_a})).await,
        "logged"
    );
    assert_eq!(
        b.tool_text("stderr", json!({"text": line_b})).await,
        "logged"
    );

    let find = |needle: &str| {
        String::from_utf8_lossy(&log.lock())
            .lines()
            .find(|l| l.contains(needle))
            .map(str::to_owned)
    };
    assert!(
        eventually(Duration::from_secs(3), || find(&line_a).is_some()
            && find(&line_b).is_some())
        .await,
        "the children's stderr lines are not in the proxy's log"
    );
    let (logged_a, logged_b) = (find(&line_a).unwrap(), find(&line_b).unwrap());
    let (tag_a, tag_b) = (session_field(&logged_a), session_field(&logged_b));
    assert!(
        tag_a.is_some() && tag_b.is_some(),
        "no session= tag: {logged_a:?} / {logged_b:?}"
    );
    assert_ne!(tag_a, tag_b, "each session's lines carry their own tag");
    assert!(logged_a.contains("INFO"), "{logged_a}");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn child_stderr_names_the_session_the_way_the_rest_of_the_log_does() {
    let log = proxy_log();
    let marker = Marker::new("stderr-tag");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let line = format!("stderr-tag-line-{}", &*marker);
    assert_eq!(c.tool_text("stderr", json!({"text": line})).await, "logged");
    let text = || String::from_utf8_lossy(&log.lock()).into_owned();
    assert!(eventually(Duration::from_secs(3), || text().contains(&line)).await);
    let logged = text()
        .lines()
        .find(|l| l.contains(&line))
        .unwrap()
        .to_owned();
    let tag = session_field(&logged).unwrap().trim_matches('"').to_owned();
    // Every other line about this session names it by its short tag (`session created`,
    // `session deleted`, each request's span). The child's stderr must be traceable to it.
    let short = mcp_session_proxy::session::log_tag(c.session_id());
    let traceable = tag == short
        || text()
            .lines()
            .any(|l| l.contains(&short) && l.contains(&format!("={tag}")));
    assert!(
        traceable,
        "the child's stderr is tagged session={tag}, but the session is {short} everywhere \
         else in the log and no line ties the two together: {logged}"
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn a_long_stderr_line_does_not_cut_the_childs_stderr() {
    let log = proxy_log();
    let marker = Marker::new("stderr-long");
    let mut config = stdio_config(misbehaving(&marker, &[]));
    config.upstream.timeout = Duration::from_secs(2);
    let proxy = StdioProxy::start(config, &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let child = child_of(&mut c).await;
    let after = format!("after-the-long-line-{}", &*marker);
    // 100 kB: longer than the proxy's stderr line limit, and than a pipe's buffer.
    let reply = c
        .request(
            "tools/call",
            json!({"name": "stderr_long", "arguments": {"bytes": 100_000, "then": after}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        text_of(&final_message(&reply)),
        "logged",
        "the child could not write its stderr after a long line"
    );
    assert!(alive(&child));
    assert!(
        eventually(Duration::from_secs(3), || String::from_utf8_lossy(
            &log.lock()
        )
        .contains(&after))
        .await,
        "stderr after a long line never reached the proxy's log"
    );
    assert_eq!(c.tool_text("echo", json!({"text": "ok"})).await, "ok");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn a_child_flooding_stderr_is_rate_limited_in_the_log_with_a_count_of_what_was_dropped() {
    const LINES: usize = 5_000;
    let log = proxy_log();
    let marker = Marker::new("stderr-flood");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let text = format!("flood-{}", &*marker);
    let started = Instant::now();
    assert_eq!(
        c.tool_text("stderr_flood", json!({"lines": LINES, "text": text}))
            .await,
        "logged"
    );
    // The child exits with its session: the last count of dropped lines is logged then.
    assert_eq!(c.delete().await.status, 200);
    let flooded = started.elapsed();
    let lines = || -> Vec<String> {
        String::from_utf8_lossy(&log.lock())
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let tag = {
        // `… upstream::stderr: <text> 0 session=<tag>`
        let first = format!("{text} 0 ");
        assert!(
            eventually(Duration::from_secs(3), || lines()
                .iter()
                .any(|l| l.contains(&first)))
            .await,
            "the flood never reached the log"
        );
        let line = lines().into_iter().find(|l| l.contains(&first)).unwrap();
        session_field(&line).unwrap().to_owned()
    };
    let dropped_of = |lines: &[String]| -> usize {
        lines
            .iter()
            .filter(|l| l.contains("stderr lines of this stdio server were not logged"))
            .filter(|l| session_field(l) == Some(tag.as_str()))
            .filter_map(|l| {
                let start = l.find("dropped=")? + "dropped=".len();
                l[start..].split_whitespace().next()?.parse::<usize>().ok()
            })
            .sum()
    };
    let logged_of = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.contains(&format!("{text} ")))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            let lines = lines();
            logged_of(&lines) + dropped_of(&lines) == LINES
        })
        .await,
        "every line is either logged or counted as dropped: {} logged, {} dropped of {LINES}",
        logged_of(&lines()),
        dropped_of(&lines())
    );
    let logged = logged_of(&lines());
    // A burst of 200, then 50 a second while the flood lasted.
    let allowed = 200 + (flooded.as_secs_f64() * 50.0).ceil() as usize + 1;
    assert!(
        logged <= allowed,
        "{logged} of {LINES} stderr lines logged in {flooded:?} (at most {allowed})"
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// 7. Old (initialize-based) clients.

#[tokio::test]
async fn a_legacy_client_initializes_calls_and_deletes_over_stdio() {
    let marker = Marker::new("legacy");
    let proxy = StdioProxy::start(stdio_config(everything(&marker)), &marker).await;
    let old = LegacyClient::connect(proxy.url(), "2025-11-25").await;
    let body = old.initialized.json();
    assert_eq!(body["id"], 0);
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25", "{body}");
    assert_eq!(
        body["result"]["serverInfo"]["name"],
        "mcp-servers/everything"
    );
    assert!(
        body["result"]["capabilities"]["tools"].is_object(),
        "{body}"
    );
    let children = proxy.children();
    assert_eq!(children.len(), 1, "{children:?}");

    let message = old.call(1, "echo", json!({"message": "old client"})).await;
    assert_eq!(text_of(&message), "Echo: old client");

    let deleted = old.delete().await;
    assert!(
        deleted.status().is_success(),
        "DELETE: {}",
        deleted.status()
    );
    assert!(
        reaped(&children[0]),
        "the child outlived DELETE: {:?}",
        stat(children[0].pid)
    );
    let after = old
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await;
    assert_eq!(after.status, 404, "{}", after.text);
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// 8. Where the child's own messages go.

#[tokio::test]
async fn unsolicited_notifications_reach_the_listen_stream_and_request_ones_their_request() {
    let marker = Marker::new("listen");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut c = proxy.client();
    c.create().await;
    let mut stream = c.listen().await;

    // During a request, the child's log notification rides on that request's stream.
    let during = c
        .request(
            "tools/call",
            json!({"name": "log_then_echo", "arguments": {"text": "in-request"}}),
        )
        .await;
    assert_eq!(during.status, 200, "{}", during.text);
    let events = during.events();
    assert_eq!(events.len(), 2, "{}", during.text);
    assert_eq!(events[0]["method"], "notifications/message");
    assert_eq!(events[0]["params"]["data"], "in-request");
    assert_eq!(text_of(&events[1]), "in-request");

    // With nothing in flight, it goes to the listen stream.
    let scheduled = c
        .tool_text(
            "notify_later",
            json!({"text": "unsolicited", "delay_ms": 300}),
        )
        .await;
    assert_eq!(scheduled, "scheduled");
    let message = stream.expect_within(Duration::from_secs(5)).await;
    assert_eq!(message["method"], "notifications/message", "{message}");
    assert_eq!(
        message["params"]["data"], "unsolicited",
        "the in-request notification must not also reach the listen stream: {message}"
    );
    drop(stream);
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// Stateless clients (2026-07-28) are served by stdio children too.

#[tokio::test]
async fn stateless_clients_are_served_from_pooled_children() {
    let marker = Marker::new("stateless");
    let mut config = stdio_config(everything(&marker));
    config.stateless.affinity = Affinity::Shared;
    let proxy = StdioProxy::start(config, &marker).await;
    let mut c = StatelessClient::new(proxy.url());
    let discovered = c.request("server/discover", json!({})).await;
    assert_eq!(discovered.status, 200, "{}", discovered.text);
    assert_eq!(
        discovered.json()["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
    let echo = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "stateless"}}),
        )
        .await
        .json();
    assert_eq!(echo["result"]["content"][0]["text"], "Echo: stateless");
    assert_eq!(echo["result"]["resultType"], "complete");
    let progress = c
        .request(
            "tools/call",
            json!({"name": "trigger-long-running-operation", "arguments": {"duration": 0.3, "steps": 3},
                   "_meta": {"progressToken": "p"}}),
        )
        .await;
    let events = progress.events();
    assert_eq!(
        events
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .count(),
        3
    );
    assert_eq!(events.last().unwrap()["result"]["resultType"], "complete");
    // Calls one after another share one pooled child (the one that found the era is
    // stopped by a task of its own).
    assert!(
        eventually(Duration::from_secs(5), || proxy.children().len() == 1).await,
        "{:?}",
        proxy.children()
    );
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

#[tokio::test]
async fn isolated_stateless_calls_each_get_a_child_of_their_own() {
    // The default affinity: a child per call, stopped once the call is over.
    let marker = Marker::new("isolated");
    let proxy = StdioProxy::start(stdio_config(misbehaving(&marker, &[])), &marker).await;
    let mut c = StatelessClient::new(proxy.url());
    let mut pids = Vec::new();
    for _ in 0..3 {
        let answer = c
            .request("tools/call", json!({"name": "pid", "arguments": {}}))
            .await
            .json();
        let pid: i32 = text_of(&answer).parse().unwrap();
        assert!(
            eventually(Duration::from_secs(10), || stat(pid).is_none()).await,
            "the call's child {pid} was not stopped after the call"
        );
        pids.push(pid);
    }
    pids.dedup();
    assert_eq!(pids.len(), 3, "a child per call: {pids:?}");
    proxy.shutdown().await;
    assert_nothing_left(&marker);
}

// ---------------------------------------------------------------------------------------
// What a child inherits of the proxy's environment.

#[tokio::test]
async fn a_child_gets_its_configured_environment_and_none_of_the_proxys_secrets() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};

    // The real binary, with its secrets in the configuration file and in MCP_PROXY_*
    // variables, and a secret of another name in its environment.
    let marker = Marker::new("environ");
    let script = common::interop::repo_root().join("tests/interop/misbehaving_server.py");
    let sealed_key = "5e".repeat(32);
    let state_key = "57".repeat(32);
    let hs256_secret = "an hs256 secret of the proxy, 32 bytes or more";
    let admin_token = "admin-token-from-the-environment";
    let redis_password = "redis-password-in-a-url";
    let other_secret = "a database password the proxy was started with";
    // The interpreter itself, not a version manager's shim (which sets variables of its
    // own before running it).
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8(python.stdout).unwrap().trim().to_owned();
    let toml = format!(
        "[session]\nstore = \"sealed\"\nsealed_keys = [\"{sealed_key}\"]\n\
         state_key = \"{state_key}\"\n\
         [auth]\nhs256_secret = \"{hs256_secret}\"\nissuer = \"https://idp.test/\"\n\
         audience = \"https://proxy.test/mcp\"\n\
         [upstream]\ncommand = {python:?}\nargs = [{:?}]\npool_size = 0\n\
         inherit_env = [\"PASSED_ON_PURPOSE\"]\n\
         [upstream.env]\n{} = {:?}\nGIVEN_BY_THE_CONFIGURATION = \"yes\"\n",
        script.display().to_string(),
        common::procs::MARKER_VAR,
        marker.to_string(),
    );
    let redis_url = format!("redis://:{redis_password}@127.0.0.1:1/0");
    let proxy = common::binary::ProxyProcess::launch()
        .toml(&toml)
        .env(&[
            ("MCP_PROXY_ADMIN__TOKEN", admin_token),
            ("MCP_PROXY_SESSION__REDIS_URL", &redis_url),
            ("DATABASE_PASSWORD", other_secret),
            ("PASSED_ON_PURPOSE", "passed"),
            ("TZ", "Europe/Paris"),
        ])
        .start()
        .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": "https://idp.test/", "aud": "https://proxy.test/mcp", "sub": "alice",
            "exp": now + 600}),
        &EncodingKey::from_secret(hs256_secret.as_bytes()),
    )
    .unwrap();
    let mut client = SessionClient::new(proxy.url("/mcp"))
        .with_header("authorization", &format!("Bearer {token}"));
    client.create().await;
    let answer = client.call_tool("environ", json!({})).await;
    let env: std::collections::HashMap<String, String> =
        serde_json::from_str(text_of(&answer)).unwrap();

    let leaked: Vec<&String> = env
        .keys()
        .filter(|name| name.to_ascii_uppercase().starts_with("MCP_PROXY_"))
        .collect();
    assert!(
        leaked.is_empty(),
        "the proxy's settings reached the child: {leaked:?}"
    );
    for secret in [
        sealed_key.as_str(),
        &state_key,
        hs256_secret,
        admin_token,
        redis_password,
        other_secret,
    ] {
        let holders: Vec<&String> = env
            .iter()
            .filter(|(name, value)| name.contains(secret) || value.contains(secret))
            .map(|(name, _)| name)
            .collect();
        assert!(
            holders.is_empty(),
            "{secret:?} reached the child in {holders:?}"
        );
    }
    assert_eq!(env.get("DATABASE_PASSWORD"), None);
    // What the configuration gives, what it asks to pass on, and the base.
    assert_eq!(env["GIVEN_BY_THE_CONFIGURATION"], "yes");
    assert_eq!(env[common::procs::MARKER_VAR], marker.to_string());
    assert_eq!(env["PASSED_ON_PURPOSE"], "passed");
    assert_eq!(env["TZ"], "Europe/Paris");
    assert_eq!(
        env.get("PATH").map(String::as_str),
        std::env::var("PATH").ok().as_deref(),
        "the child finds its tools where the proxy does"
    );
    let mut names: Vec<&str> = env.keys().map(String::as_str).collect();
    names.sort_unstable();
    let allowed = [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "GIVEN_BY_THE_CONFIGURATION",
        "PASSED_ON_PURPOSE",
        common::procs::MARKER_VAR,
    ];
    let unexpected: Vec<&&str> = names
        .iter()
        .filter(|name| !allowed.contains(name) && !name.starts_with("LC_"))
        .collect();
    // Python itself may set a few of its own (e.g. LC_CTYPE coercion) — only those.
    assert!(
        unexpected.is_empty(),
        "the child got variables nobody gave it: {unexpected:?} (all: {names:?})"
    );
    drop(proxy);
    assert!(
        eventually(Duration::from_secs(5), || common::procs::marked(&marker)
            .is_empty())
        .await,
        "the child outlived its proxy"
    );
}
