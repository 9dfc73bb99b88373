//! The real proxy in front of real servers on the HTTP+SSE transport of MCP 2024-11-05
//! (`GET /sse` opens a session and names the endpoint to POST its messages to; every
//! answer comes on the stream): FastMCP's (`tests/interop/sse_server.py`, official Python
//! SDK 1.x) and `@modelcontextprotocol/server-everything`'s `sse` mode (TypeScript SDK).
//!
//! Every kind of client works in front of them — data-layer sessions, old
//! (`initialize`-based) clients, 2026-07-28 stateless clients — with progress, the
//! server's own requests (elicitation, sampling) and its notifications; a server that
//! restarts loses its sessions and the `on_session_lost` policies apply; the proxy
//! ending a session closes its stream, which the server sees.
//!
//! FastMCP refuses a `Host` that is not its own loopback authority (421), so every
//! passing call also proves the GET stream and every POST carry the upstream's `Host`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::{Duration, Instant};

use common::assert::{
    assert_session_not_found, check_progress, check_session_meta, progress_count, text_of,
};
use common::interop::{
    Interop, Sdk2Client, ServerProcess, a_restart_loses_sessions, everything_sse_on, sse_fixture_on,
};
use common::*;
use mcp_session_proxy::config::{Config, OnSessionLost, Secret, StoreConfig};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

async fn fixture() -> Interop {
    Interop::start(sse_fixture_on(0).await).await
}

/// What an elicitation answer looks like.
fn accepted(answer: &str) -> Value {
    json!({"action": "accept", "content": {"answer": answer}})
}

/// What a sampling answer looks like.
fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text},
           "model": "test-model", "stopReason": "endTurn"})
}

/// A direct POST to FastMCP's endpoint of the upstream session `session_id` (as
/// `whoami` names it), as the proxy would send it.
async fn post_upstream_session(server: &ServerProcess, session_id: &str) -> Reply {
    let url = format!(
        "http://127.0.0.1:{}/messages/?session_id={session_id}",
        server.port
    );
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    post_json(&http_client(), &url, &ping, &HeaderMap::new()).await
}

/// The line of `/metrics` for metric `name` whose labels include `label`.
async fn metric_line(proxy: &mcp_session_proxy::Running, name: &str, label: &str) -> String {
    let text = get_text(&listener_url(proxy, "/metrics")).await;
    text.lines()
        .find(|l| l.starts_with(name) && l.contains(label))
        .unwrap_or_else(|| panic!("no {name} with {label} in:\n{text}"))
        .to_owned()
}

// ---------------------------------------------------------------------------------------
// 1. The era.

#[tokio::test]
async fn the_era_of_an_http_sse_server_is_found_as_sse() {
    for server in [sse_fixture_on(0).await, everything_sse_on(0).await] {
        let h = Interop::start(server).await;
        assert_eq!(
            h.proxy.find_eras(Duration::from_secs(10)).await,
            "sse",
            "{}",
            h.server.name
        );
        let ready = get_json(&listener_url(&h.proxy, "/readyz")).await;
        let upstream = &ready["upstreams"]["default"];
        assert_eq!(upstream["era"], "sse", "{ready}");
        assert_eq!(upstream["eras"][h.server.url()], "sse", "{ready}");
        assert_eq!(upstream["status"], "ok", "{ready}");
        let era = metric_line(&h.proxy, "mcp_proxy_upstream_replica_era", "era=\"sse\"").await;
        assert!(era.ends_with(" 1"), "{era}");
        h.stop().await;
    }
}

// ---------------------------------------------------------------------------------------
// 2. Data-layer sessions.

#[tokio::test]
async fn a_data_layer_session_echoes_streams_progress_and_answers_the_servers_requests() {
    let h = fixture().await;
    let mut c = h.client();
    c.create_with(json!({
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "interop-sse", "version": "1"},
    }))
    .await;
    let id = c.session_id().to_owned();
    let echoed = c.call_tool("echo", json!({"msg": "over sse"})).await;
    assert_eq!(text_of(&echoed), "over sse", "{echoed}");
    check_session_meta(&echoed, &id);
    let sessions = metric_line(&h.proxy, "mcp_proxy_upstream_replica_sessions", "").await;
    assert!(sessions.ends_with(" 1"), "one upstream session: {sessions}");

    // Progress comes on the call's own stream, before the stamped result.
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 3, "delay_ms": 150},
                   "_meta": {"progressToken": "sse-1"}}),
        )
        .await;
    assert_event_stream(&response);
    let messages = EventReader::new(response).all_timed().await;
    let progress: Vec<&(Instant, Value)> = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{messages:?}");
    check_progress(&progress, "sse-1");
    let (_, last) = messages.last().unwrap();
    assert_eq!(text_of(last), "done");
    check_session_meta(last, &id);

    // Elicitation: the server's request comes on the call's stream, the client answers
    // it in the session, and the result follows.
    for (tool, method, answer, expected) in [
        (
            "ask",
            "elicitation/create",
            accepted("Bob"),
            "accept:Bob".to_owned(),
        ),
        (
            "sample",
            "sampling/createMessage",
            sampled("hello back"),
            "sampled:hello back".to_owned(),
        ),
    ] {
        let response = c
            .request_streaming(
                "tools/call",
                json!({"name": tool, "arguments": {"question": "Name?", "prompt": "hi"}}),
            )
            .await;
        assert_event_stream(&response);
        let mut events = EventReader::new(response);
        let request = events.next_request(method).await;
        let reply = c.respond(request["id"].clone(), answer).await;
        assert_eq!(reply.status, 202, "{tool}: {}", reply.text);
        let rest = events.rest().await;
        let result = rest.last().unwrap_or_else(|| panic!("{tool}: no result"));
        assert_eq!(text_of(result), expected, "{tool}: {rest:?}");
        check_session_meta(result, &id);
    }
    h.stop().await;
}

#[tokio::test]
async fn the_listen_stream_carries_what_no_request_claims() {
    let h = fixture().await;
    let mut c = h.client();
    c.create().await;
    let mut stream = c.listen().await;
    let scheduled = c
        .tool_text(
            "notify_later",
            json!({"text": "unsolicited", "delay_ms": 300}),
        )
        .await;
    assert_eq!(scheduled, "scheduled");
    let message = stream.expect_within(Duration::from_secs(10)).await;
    assert_eq!(message["method"], "notifications/message", "{message}");
    assert_eq!(message["params"]["data"], "unsolicited", "{message}");
    drop(stream);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 3. Ending sessions: the stream closes, and the server sees it.

#[tokio::test]
async fn delete_closes_the_upstream_stream_and_the_server_forgets_the_session() {
    let h = fixture().await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    let upstream_a = a.tool_text("whoami", json!({})).await;
    assert_eq!(upstream_a.len(), 32, "FastMCP's session id: {upstream_a:?}");
    assert_ne!(upstream_a, b.tool_text("whoami", json!({})).await);
    assert_eq!(b.tool_text("live", json!({})).await, "2");
    // Before: the server knows the session (a direct POST is accepted).
    assert_eq!(
        post_upstream_session(&h.server, &upstream_a).await.status,
        202
    );

    let deleted = a.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.json()["result"], json!({}));
    // The server sees the stream close (its table of sessions shrinks) ...
    let mut live = String::new();
    for _ in 0..50 {
        live = b.tool_text("live", json!({})).await;
        if live == "1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        live, "1",
        "the server still holds the deleted session's stream"
    );
    // ... and no longer knows the session.
    let after = post_upstream_session(&h.server, &upstream_a).await;
    assert_eq!(after.status, 404, "{}", after.text);
    assert!(
        after.text.contains("Could not find session"),
        "{}",
        after.text
    );
    let sessions = metric_line(&h.proxy, "mcp_proxy_upstream_replica_sessions", "").await;
    assert!(sessions.ends_with(" 1"), "{sessions}");
    h.stop().await;
}

#[tokio::test]
async fn an_expired_session_closes_its_upstream_stream() {
    let server = sse_fixture_on(0).await;
    let h = Interop::start_with(server, |c: &mut Config| {
        c.session.idle_ttl = Duration::from_secs(1);
        c.session.reap_interval = Duration::from_millis(50);
    })
    .await;
    let mut c = h.client();
    c.create().await;
    let upstream = c.tool_text("whoami", json!({})).await;
    let (server, upstream) = (&h.server, upstream.as_str());
    assert!(
        eventually_async(Duration::from_secs(10), move || async move {
            post_upstream_session(server, upstream).await.status == 404
        })
        .await,
        "the expired session's stream was not closed"
    );
    // The stream can close first: the owner's sweep ends a stream idle for the TTL on
    // its own clock, the reaper takes the record on its own tick.
    assert!(
        eventually(Duration::from_secs(5), || h.proxy.live_sessions() == 0).await,
        "the expired session is still counted live"
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 4. The stream lives in one proxy replica: the one that opened it.

/// Two proxies sharing sealed sessions (the sessionId carries the route, its owner
/// included) in front of `server`; sessions idle `idle_ttl` at most.
async fn sealed_pair(
    server: &ServerProcess,
    idle_ttl: Duration,
) -> (mcp_session_proxy::Running, mcp_session_proxy::Running) {
    let config = || {
        let mut config = config_for(&server.url());
        config.session.store = StoreConfig::Sealed {
            keys: vec![Secret(vec![7; 32])],
        };
        config.session.idle_ttl = idle_ttl;
        config
    };
    let a = mcp_session_proxy::start(config()).await.unwrap();
    let b = mcp_session_proxy::start(config()).await.unwrap();
    (a, b)
}

#[tokio::test]
async fn a_session_reaching_another_proxy_replica_is_served_by_the_one_holding_its_stream() {
    let server = sse_fixture_on(0).await;
    let (a, b) = sealed_pair(&server, Duration::from_secs(600)).await;
    let mut on_a = SessionClient::new(a.url());
    on_a.create().await;
    let upstream = on_a.tool_text("whoami", json!({})).await;
    // Through B: forwarded to A, the same upstream session answers; B opens no stream.
    let mut on_b = SessionClient::new(b.url());
    on_b.session_id = on_a.session_id.clone();
    on_b.state = on_a.state.clone();
    assert_eq!(on_b.tool_text("whoami", json!({})).await, upstream);
    assert_eq!(on_b.tool_text("live", json!({})).await, "1");
    // Deleted through B: A closes the stream.
    assert_eq!(on_b.delete().await.status, 200);
    let upstream = upstream.as_str();
    let server = &server;
    assert!(
        eventually_async(Duration::from_secs(5), move || async move {
            post_upstream_session(server, upstream).await.status == 404
        })
        .await,
        "the owner did not close the deleted session's stream"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn the_stream_of_a_sealed_session_nobody_uses_is_closed_by_its_owner() {
    // A sealed session has no record to expire: its owner ends what it holds for it
    // once the session has been idle for `session.idle_ttl`.
    let server = sse_fixture_on(0).await;
    let (a, b) = sealed_pair(&server, Duration::from_secs(1)).await;
    let mut c = SessionClient::new(a.url());
    c.create().await;
    let upstream = c.tool_text("whoami", json!({})).await;
    let (server, upstream) = (&server, upstream.as_str());
    assert!(
        eventually_async(Duration::from_secs(10), move || async move {
            post_upstream_session(server, upstream).await.status == 404
        })
        .await,
        "the idle session's stream is still open"
    );
    a.shutdown().await;
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 5. Old clients: the proxy is their Streamable HTTP transport.

#[tokio::test]
async fn an_old_client_initializes_calls_answers_listens_and_deletes() {
    let h = fixture().await;
    let old = LegacyClient::connect(h.url(), "2025-11-25").await;
    let body = old.initialized.json();
    assert_eq!(
        body["result"]["serverInfo"]["name"], "sse-fixture",
        "{body}"
    );
    assert!(
        body["result"]["capabilities"]["tools"].is_object(),
        "{body}"
    );

    let message = old.call(1, "echo", json!({"msg": "old client"})).await;
    assert_eq!(text_of(&message), "old client");

    // Progress.
    let progress = old
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "slow", "arguments": {"steps": 2, "delay_ms": 100},
                                "_meta": {"progressToken": 7}}}))
        .await;
    let events = progress.events();
    assert_eq!(progress_count(&progress), 2, "{}", progress.text);
    assert_eq!(text_of(events.last().unwrap()), "done");

    // The server's request, answered by the old client in its session.
    let response = post_streaming(
        &old.http,
        &old.url,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "ask", "arguments": {"question": "Name?"}}}),
        &old.headers(),
    )
    .await;
    let mut events = EventReader::new(response);
    let ask = events.next_request("elicitation/create").await;
    let answered = old
        .post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": accepted("Ada")}))
        .await;
    assert_eq!(answered.status, 202, "{}", answered.text);
    let result = events.rest().await.pop().unwrap();
    assert_eq!(result["id"], 3);
    assert_eq!(text_of(&result), "accept:Ada");

    // Its GET stream.
    let mut stream = old.listen().await;
    old.post(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "notify_later", "arguments": {"text": "to old", "delay_ms": 300}}}))
        .await;
    let note = stream.expect_within(Duration::from_secs(10)).await;
    assert_eq!(note["params"]["data"], "to old", "{note}");
    drop(stream);

    // DELETE ends the upstream session too.
    let deleted = old.delete().await;
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let after = old
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        .await;
    assert_eq!(after.status, 404, "{}", after.text);
    assert_eq!(h.proxy.live_sessions(), 0);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 6. Stateless (2026-07-28) clients.

#[tokio::test]
async fn stateless_clients_discover_call_stream_and_answer_through_input_required() {
    let h = fixture().await;
    let mut c =
        StatelessClient::new(h.url()).with_capabilities(json!({"elicitation": {}, "sampling": {}}));
    let discovered = c.request("server/discover", json!({})).await;
    assert_eq!(discovered.status, 200, "{}", discovered.text);
    let result = &discovered.json()["result"];
    assert_eq!(
        result["supportedVersions"],
        json!(["2026-07-28"]),
        "{result}"
    );
    assert!(result["capabilities"]["tools"].is_object(), "{result}");

    let echoed = c.call_tool("echo", json!({"msg": "stateless"})).await;
    assert_eq!(text_of(&echoed), "stateless");
    assert_eq!(echoed["result"]["resultType"], "complete");

    let progress = c
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 2, "delay_ms": 100},
                   "_meta": {"progressToken": "p"}}),
        )
        .await;
    let events = progress.events();
    assert_eq!(progress_count(&progress), 2, "{}", progress.text);
    assert_eq!(events.last().unwrap()["result"]["resultType"], "complete");

    for (tool, method, answer, expected) in [
        ("ask", "elicitation/create", accepted("Eve"), "accept:Eve"),
        (
            "sample",
            "sampling/createMessage",
            sampled("from the client"),
            "sampled:from the client",
        ),
    ] {
        let arguments = json!({"question": "Name?", "prompt": "hi"});
        let first = c
            .request(
                "tools/call",
                json!({"name": tool, "arguments": arguments.clone()}),
            )
            .await;
        assert_eq!(first.status, 200, "{tool}: {}", first.text);
        let result = final_message(&first)["result"].clone();
        assert_eq!(result["resultType"], "input_required", "{tool}: {result}");
        let requests = result["inputRequests"].as_object().unwrap();
        assert_eq!(requests.len(), 1, "{result}");
        let (key, request) = requests.iter().next().unwrap();
        assert_eq!(request["method"], method, "{result}");
        let retry = json!({"name": tool, "arguments": arguments,
            "inputResponses": {key: answer}, "requestState": result["requestState"]});
        let second = c.request("tools/call", retry).await;
        assert_eq!(second.status, 200, "{tool}: {}", second.text);
        let done = final_message(&second);
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        assert_eq!(text_of(&done), expected, "{done}");
    }

    // A real 2026-07-28 client: the official Python SDK 2.x.
    let mut sdk = Sdk2Client::connect(&h.url(), &[]).await;
    assert_eq!(sdk.protocol_version, "2026-07-28");
    // What `server/discover` is answered from: a pooled upstream session per set of
    // client capabilities.
    let pooled = metric_line(&h.proxy, "mcp_proxy_upstream_replica_sessions", "").await;
    assert_eq!(sdk.text("echo", json!({"msg": "sdk2"})).await, "sdk2");
    assert_eq!(
        sdk.text("slow", json!({"steps": 2, "delay_ms": 50})).await,
        "done"
    );
    sdk.exit().await;
    // The isolated calls' own upstream sessions are all ended.
    let (proxy, pooled) = (&h.proxy, pooled.as_str());
    assert!(
        eventually_async(Duration::from_secs(5), move || async move {
            metric_line(proxy, "mcp_proxy_upstream_replica_sessions", "").await == pooled
        })
        .await,
        "{}",
        metric_line(&h.proxy, "mcp_proxy_upstream_replica_sessions", "").await
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 7. The everything server's `sse` mode.

#[tokio::test]
async fn the_everything_server_in_sse_mode_serves_every_kind_of_client() {
    let h = Interop::start(everything_sse_on(0).await).await;
    let mut c = h.client();
    c.create_with(json!({
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "interop-sse", "version": "1"},
    }))
    .await;
    assert_eq!(
        c.tool_text("echo", json!({"message": "hi"})).await,
        "Echo: hi"
    );
    let progress = c
        .request(
            "tools/call",
            json!({"name": "trigger-long-running-operation", "arguments": {"duration": 0.3, "steps": 3},
                   "_meta": {"progressToken": "e"}}),
        )
        .await;
    assert_eq!(progress_count(&progress), 3, "{}", progress.text);
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "trigger-sampling-request", "arguments": {"prompt": "hello", "maxTokens": 5}}),
        )
        .await;
    let mut events = EventReader::new(response);
    let sampling = events.next_request("sampling/createMessage").await;
    assert_eq!(
        c.respond(sampling["id"].clone(), sampled("sampled over sse"))
            .await
            .status,
        202
    );
    let rest = events.rest().await;
    let done = serde_json::to_string(&rest.last().unwrap()["result"]).unwrap();
    assert!(done.contains("sampled over sse"), "{rest:?}");

    let old = LegacyClient::connect(h.url(), "2025-11-25").await;
    let called = old.call(1, "echo", json!({"message": "old"})).await;
    assert_eq!(text_of(&called), "Echo: old");
    assert!(old.delete().await.status().is_success());

    let mut stateless = StatelessClient::new(h.url());
    let echoed = stateless.call_tool("echo", json!({"message": "new"})).await;
    assert_eq!(text_of(&echoed), "Echo: new");
    assert_eq!(echoed["result"]["resultType"], "complete");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------
// 8. Lost sessions.

#[tokio::test]
async fn a_restarted_server_loses_its_sessions_under_both_policies() {
    let server = sse_fixture_on(0).await;
    let server = a_restart_loses_sessions(
        server,
        json!({"name": "echo", "arguments": {"msg": "x"}}),
        sse_fixture_on,
    )
    .await;
    drop(server);
    let server = everything_sse_on(0).await;
    let server = a_restart_loses_sessions(
        server,
        json!({"name": "echo", "arguments": {"message": "x"}}),
        everything_sse_on,
    )
    .await;
    drop(server);
}

#[tokio::test]
async fn a_stream_that_ends_takes_its_session_with_it_at_once() {
    let h = fixture().await;
    let mut c = h.client();
    c.create().await;
    assert_eq!(c.tool_text("echo", json!({"msg": "x"})).await, "x");
    let Interop { proxy, mut server } = h;
    server.kill().await;
    // No request needed: the proxy forgets the session as the stream ends (as it does
    // a stdio session whose child died).
    assert!(
        eventually(Duration::from_secs(5), || proxy.live_sessions() == 0).await,
        "the session outlived its upstream stream"
    );
    assert_eq!(
        gauge(&proxy, "mcp_proxy_sessions_lost_total").await,
        Some(1)
    );
    let sessions = metric_line(&proxy, "mcp_proxy_upstream_replica_sessions", "").await;
    assert!(sessions.ends_with(" 0"), "{sessions}");
    proxy.shutdown().await;
}

/// A TCP relay to a server that keeps holding the client's side of an event stream
/// after the server's side ended (a middlebox, or a half-open connection): the proxy
/// cannot tell that its session's stream is gone, and must find out from its POSTs.
struct HoldingRelay {
    port: u16,
    accept: JoinHandle<()>,
}

impl HoldingRelay {
    async fn to(upstream: u16) -> HoldingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream));
            }
        });
        HoldingRelay { port, accept }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/sse", self.port)
    }
}

impl Drop for HoldingRelay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, upstream: u16) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut stream = false;
    let mut buffer = vec![0u8; 16 * 1024];
    while let Ok(n) = server_read.read(&mut buffer).await {
        if n == 0 || client_write.write_all(&buffer[..n]).await.is_err() {
            break;
        }
        stream |= String::from_utf8_lossy(&buffer[..n]).contains("text/event-stream");
    }
    if stream {
        // The server's side ended; the client's stays open and silent until it leaves.
        let _ = up.await;
    }
}

/// The proxy in front of `relay`, with `timeout`.
async fn behind(relay: &HoldingRelay, timeout: Duration) -> mcp_session_proxy::Running {
    let mut config = config_for(&relay.url());
    config.upstream.timeout = timeout;
    config.upstream.on_session_lost = OnSessionLost::Fail;
    mcp_session_proxy::start(config).await.unwrap()
}

#[tokio::test]
async fn a_post_refused_as_of_an_unknown_session_loses_the_session() {
    let mut server = sse_fixture_on(0).await;
    let relay = HoldingRelay::to(server.port).await;
    let proxy = behind(&relay, Duration::from_secs(5)).await;
    let mut c = SessionClient::new(proxy.url());
    c.create().await;
    assert_eq!(
        c.tool_text("echo", json!({"msg": "before"})).await,
        "before"
    );

    let port = server.port;
    server.kill().await;
    let restarted = sse_fixture_on(port).await;
    // The proxy's stream is held open by the relay: only the POST tells it that the
    // server does not know the session (FastMCP: 404 "Could not find session").
    let id = c.session_id().to_owned();
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "after"}}),
        )
        .await;
    assert_session_not_found(&reply, &id);
    assert_eq!(
        gauge(&proxy, "mcp_proxy_sessions_lost_total").await,
        Some(1)
    );
    assert_eq!(proxy.live_sessions(), 0);
    // A new session works on the restarted server.
    let mut again = SessionClient::new(proxy.url());
    again.create().await;
    assert_eq!(again.tool_text("echo", json!({"msg": "new"})).await, "new");
    proxy.shutdown().await;
    drop(restarted);
}

#[tokio::test]
async fn a_post_the_server_never_answers_is_bounded_by_the_upstream_timeout() {
    // The everything server never answers a POST for a session it does not know.
    let mut server = everything_sse_on(0).await;
    let relay = HoldingRelay::to(server.port).await;
    let timeout = Duration::from_secs(2);
    let proxy = behind(&relay, timeout).await;
    let mut c = SessionClient::new(proxy.url());
    c.create().await;
    assert_eq!(
        c.tool_text("echo", json!({"message": "before"})).await,
        "Echo: before"
    );
    let port = server.port;
    server.kill().await;
    let restarted = everything_sse_on(port).await;

    let started = Instant::now();
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "after"}}),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(reply.status, 504, "{}", reply.text);
    assert_eq!(reply.error_code(), Some(-32603), "{}", reply.text);
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(3),
        "the hanging POST took {took:?} (upstream timeout {timeout:?})"
    );
    proxy.shutdown().await;
    drop(restarted);
}
