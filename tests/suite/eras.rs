//! The era matrix: every client era through the proxy in front of every upstream era, over
//! Streamable HTTP, with the real peers (tests/interop/README.md, "Peers of every era").
//!
//! | client ↓ · upstream → | legacy (FastMCP, 2025-11-25) | dual (TypeScript SDK 2.x `legacy: 'stateless'`; Python SDK 2.x) | modern-only (TypeScript SDK 2.x `legacy: 'reject'`) |
//! | --- | --- | --- | --- |
//! | data-layer session | a session upstream; questions as requests on the stream | `_meta`-framed 2026-07-28 requests; `input_required` stamped | the same |
//! | 2026-07-28 | the proxy speaks 2026-07-28 for the server (`input_required` from its requests) | passed through as it is | the same |
//! | old (2025-11-25 `initialize`) | passed through as it is | bridged: real `elicitation/create` from `input_required` | the same |
//!
//! Each cell calls `echo`, `slow` (progress) and `ask` (a question for the user: an old
//! client answers a real `elicitation/create`; a 2026-07-28 client and a data-layer
//! session get `input_required` and retry with `inputResponses` and the `requestState`),
//! with the real SDK client of its era where there is one (the TypeScript SDK 2.x client
//! in modern, auto or legacy mode, the Python SDK 2.x client in auto mode, the Python and
//! TypeScript SDK 1.x clients, the Inspector's CLI in its legacy and auto eras) and raw
//! requests where none speaks it (data-layer sessions); and checks the era the proxy found
//! (`/readyz`, `upstream_replica_era`). Every SDK client also runs directly against the
//! server: through the proxy it passes every step, and every step it passed directly —
//! no client is worse off through the proxy, and where going direct fails (a 2026-07-28
//! client of a legacy server, an old client of a modern-only one) the proxy makes it work.
//!
//! Then what the cells do not show: an old client's subscriptions and GET stream, its log
//! level and its cancellations through the bridge; `upstream.old_clients =
//! "pass_through"`; a modern server's own refusals (-32020, -32021, -32022) reaching the
//! client as they are; `upstream.era` pinned; a server replaced by one of another era on
//! the same port.
//!
//! The same cells in front of the TypeScript SDK 2.x server over stdio (`serveStdio`, a
//! child per session: dual, and modern-only), with raw clients and the TypeScript SDK 2.x
//! client through the proxy (a stdio server has no URL to go direct to).
//!
//! HTTP+SSE upstreams are not here (tests/suite/interop_sse.rs).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::assert::check_session_meta;
use common::inspector::Mcpdo;
use common::interop::{Sdk2Client, Sdk2Options, ServerProcess, fastmcp};
use common::peers::{
    ClientMode, ClientRun, Sdk1, StdioLegacy, Ts2Client, Ts2Mode, assert_tasks_settled,
    sdk1_client, sdk2_server, tasks_client, ts2_http, ts2_http_on, ts2_stdio_command,
};
use common::stdio::stdio_config;
use common::{
    EventReader, Harness, LegacyClient, Reply, SessionClient, StatelessClient, assert_event_stream,
    config_for, eventually_async, final_message, get_json, get_text, http_client, is_era_probe,
    listener_url, post_json, post_streaming,
};
use mcp_session_proxy::config::{Config, OldClients};
use mcp_session_proxy::upstream::Era;
use mcp_session_proxy::{Running, start};
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

/// The upstreams of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// FastMCP (Python SDK 1.x): 2025-11-25 only, sessions, real server requests.
    Legacy,
    /// The TypeScript SDK 2.x, `legacy: 'stateless'`: 2026-07-28, and 2025 served per
    /// request (no session, so no server requests).
    DualTs2,
    /// The Python SDK 2.x: 2026-07-28 by header, 2025 with sessions.
    DualPython,
    /// The TypeScript SDK 2.x, `legacy: 'reject'`: 2026-07-28 only.
    ModernOnly,
    /// The TypeScript SDK 2.x over stdio, `initialize` served: dual.
    StdioDual,
    /// The TypeScript SDK 2.x over stdio, `initialize` refused: 2026-07-28 only.
    StdioModernOnly,
}

impl Peer {
    /// The server (none for stdio: the proxy starts its children) and the proxy's
    /// configuration for it.
    async fn start(self) -> (Option<ServerProcess>, Config) {
        let server = match self {
            Peer::Legacy => fastmcp(&[]).await,
            Peer::DualTs2 => ts2_http(Ts2Mode::Stateless).await,
            Peer::DualPython => sdk2_server(&[]).await,
            Peer::ModernOnly => ts2_http(Ts2Mode::Reject).await,
            Peer::StdioDual => return (None, stdio_config(ts2_stdio_command(StdioLegacy::Serve))),
            Peer::StdioModernOnly => {
                return (None, stdio_config(ts2_stdio_command(StdioLegacy::Reject)));
            }
        };
        let config = config_for(&server.url());
        (Some(server), config)
    }

    /// The era the proxy must find.
    fn era(self) -> &'static str {
        match self {
            Peer::Legacy => "legacy",
            Peer::DualTs2
            | Peer::DualPython
            | Peer::ModernOnly
            | Peer::StdioDual
            | Peer::StdioModernOnly => "modern",
        }
    }

    /// `slow`'s arguments: three steps, quickly (the fixtures name the delay differently).
    fn slow(self) -> Value {
        match self {
            Peer::DualTs2 | Peer::ModernOnly | Peer::StdioDual | Peer::StdioModernOnly => {
                json!({"steps": 3, "delayMs": 20})
            }
            Peer::Legacy | Peer::DualPython => json!({"steps": 3, "delay_ms": 20}),
        }
    }

    /// The same for the Inspector's `key:=value` arguments.
    fn slow_args(self) -> [&'static str; 2] {
        match self {
            Peer::DualTs2 | Peer::ModernOnly | Peer::StdioDual | Peer::StdioModernOnly => {
                ["steps:=3", "delayMs:=20"]
            }
            Peer::Legacy | Peer::DualPython => ["steps:=3", "delay_ms:=20"],
        }
    }
}

/// One cell's upstream and the proxy in front of it.
struct Cell {
    peer: Peer,
    /// `None` for a stdio server (the proxy's children).
    server: Option<ServerProcess>,
    proxy: Running,
}

impl Cell {
    async fn start(peer: Peer) -> Cell {
        Cell::start_with(peer, |_| {}).await
    }

    async fn start_with(peer: Peer, configure: impl FnOnce(&mut Config)) -> Cell {
        let (server, mut config) = peer.start().await;
        configure(&mut config);
        let proxy = start(config).await.unwrap();
        Cell {
            peer,
            server,
            proxy,
        }
    }

    /// The proxy's endpoint.
    fn url(&self) -> String {
        self.proxy.url()
    }

    /// The server's own endpoint (a client going direct).
    fn direct(&self) -> String {
        self.server
            .as_ref()
            .expect("a server of its own (not stdio)")
            .url()
    }

    /// The proxy found the era of the peer (of a stdio server: on `/readyz`, found by
    /// its first child).
    async fn assert_found_era(&self) {
        match self.server {
            Some(_) => assert_era(&self.proxy, self.peer.era()).await,
            None => {
                let ready = get_json(&listener_url(&self.proxy, "/readyz")).await;
                assert_eq!(
                    ready["upstreams"]["default"]["era"],
                    self.peer.era(),
                    "{ready}"
                );
            }
        }
    }

    async fn stop(self) {
        self.proxy.shutdown().await;
        drop(self.server);
    }
}

// === what the proxy found ===

/// `/readyz` names `era` for the upstream and its one replica, and `/metrics` has
/// `upstream_replica_era{era}` at 1.
async fn assert_era(proxy: &Running, era: &str) {
    let ready = get_json(&listener_url(proxy, "/readyz")).await;
    let upstream = &ready["upstreams"]["default"];
    assert_eq!(upstream["era"], era, "{ready}");
    let eras: Vec<&Value> = upstream["eras"].as_object().unwrap().values().collect();
    assert_eq!(eras, [&json!(era)], "{ready}");
    let metrics = get_text(&listener_url(proxy, "/metrics")).await;
    let gauge = metrics
        .lines()
        .find(|line| {
            line.starts_with("mcp_proxy_upstream_replica_era{")
                && line.contains(&format!("era=\"{era}\""))
        })
        .unwrap_or_else(|| panic!("no upstream_replica_era for {era}:\n{metrics}"));
    assert!(gauge.ends_with(" 1"), "{gauge}");
}

// === answers ===

/// The text of a tool result message.
fn text(message: &Value) -> String {
    message["result"]["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A `tools/call` request of an old client.
fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

/// `slow` with a progress token.
fn slow_call(peer: Peer) -> Value {
    json!({"name": "slow", "arguments": peer.slow(), "_meta": {"progressToken": "p1"}})
}

/// The progress notifications of an answer (three, rising, for `p1`), and its response
/// (not an error).
fn progress_then_result(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text);
    let messages = reply.events();
    let progress: Vec<f64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            assert_eq!(m["params"]["progressToken"], "p1", "{m}");
            m["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0], "{}", reply.text);
    let done = final_message(reply);
    assert!(done["result"]["isError"] != true, "{done}");
    assert!(text(&done).contains("done"), "{done}");
    done
}

/// An `elicitation/create` answered: accepted, every property of its form set to `answer`.
fn accepted(params: &Value, answer: &str) -> Value {
    let content: Map<String, Value> = params["requestedSchema"]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("no form in {params}"))
        .keys()
        .map(|name| (name.clone(), json!(answer)))
        .collect();
    json!({"action": "accept", "content": content})
}

/// The `inputResponses` to an `input_required` result: each question an elicitation,
/// accepted with `answer`.
fn accept_all(result: &Value, answer: &str) -> Value {
    let requests = result["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("no inputRequests in {result}"));
    assert!(!requests.is_empty(), "{result}");
    let responses: Map<String, Value> = requests
        .iter()
        .map(|(key, request)| {
            assert_eq!(request["method"], "elicitation/create", "{result}");
            (key.clone(), accepted(&request["params"], answer))
        })
        .collect();
    Value::Object(responses)
}

// === the raw clients ===

/// A data-layer session (`sessions/create` declaring form elicitation): echo, slow with
/// its progress, and ask — in front of a legacy server the server's `elicitation/create`
/// on the call's stream, answered by a POST in the session; in front of a modern one
/// `input_required`, stamped, and the retry with `inputResponses` and `requestState`.
async fn data_layer_session(cell: &Cell) {
    let mut c = SessionClient::new(cell.url());
    c.create_with(json!({
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "eras-data-layer", "version": "1"},
    }))
    .await;
    let echoed = c.call_tool("echo", json!({"msg": "hi"})).await;
    assert_eq!(text(&echoed), "hi", "{echoed}");
    check_session_meta(&echoed, c.session_id());

    let reply = c.request("tools/call", slow_call(cell.peer)).await;
    let done = progress_then_result(&reply);
    check_session_meta(&done, c.session_id());

    let ask = json!({"name": "ask", "arguments": {"question": "Colour?"}});
    let done = if cell.peer == Peer::Legacy {
        let response = c.request_streaming("tools/call", ask).await;
        let mut reader = EventReader::new(response);
        let asked = reader.next_request("elicitation/create").await;
        assert_eq!(asked["params"]["message"], "Colour?", "{asked}");
        let ack = c
            .respond(asked["id"].clone(), accepted(&asked["params"], "blue"))
            .await;
        assert_eq!(ack.status, 202, "{}", ack.text);
        reader.rest().await.pop().unwrap()
    } else {
        let first = c.call_tool("ask", ask["arguments"].clone()).await;
        let result = &first["result"];
        assert_eq!(result["resultType"], "input_required", "{first}");
        check_session_meta(&first, c.session_id());
        let retry = json!({
            "name": "ask",
            "arguments": {"question": "Colour?"},
            "inputResponses": accept_all(result, "blue"),
            "requestState": result["requestState"],
        });
        let reply = c.request("tools/call", retry).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        final_message(&reply)
    };
    assert!(text(&done).contains("blue"), "{done}");
    assert!(done["result"]["isError"] != true, "{done}");
    check_session_meta(&done, c.session_id());

    let deleted = c.delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
}

/// A raw 2026-07-28 client: discover, echo, slow with its progress, ask — input_required,
/// then the retry with `inputResponses` and `requestState`.
async fn stateless_client(cell: &Cell) {
    let mut c =
        StatelessClient::new(cell.url()).with_capabilities(json!({"elicitation": {"form": {}}}));
    let discovered = c.request("server/discover", json!({})).await;
    assert_eq!(discovered.status, 200, "{}", discovered.text);
    let result = &discovered.json()["result"];
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!(MODERN)),
        "{result}"
    );

    let echoed = c.call_tool("echo", json!({"msg": "hi"})).await;
    assert_eq!(text(&echoed), "hi", "{echoed}");
    assert_eq!(echoed["result"]["resultType"], "complete", "{echoed}");

    let reply = c.request("tools/call", slow_call(cell.peer)).await;
    let done = progress_then_result(&reply);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");

    let first = c.call_tool("ask", json!({"question": "Colour?"})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert!(result["requestState"].is_string(), "{first}");
    let retry = json!({
        "name": "ask",
        "arguments": {"question": "Colour?"},
        "inputResponses": accept_all(result, "blue"),
        "requestState": result["requestState"],
    });
    let reply = c.request("tools/call", retry).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let done = final_message(&reply);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(text(&done).contains("blue"), "{done}");
}

/// A raw old client declaring elicitation: `initialize`, echo, slow with its progress, and
/// ask — a real `elicitation/create` on the call's stream, answered by a POST. Returns
/// the client (its session id: the server's own when passed through, the proxy's
/// `mcps_…` when bridged).
async fn old_client(cell: &Cell) -> LegacyClient {
    let old = LegacyClient::connect_with(cell.url(), LEGACY, json!({"elicitation": {}})).await;
    let reply = old.post(call(1, "echo", json!({"msg": "hi"}))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(text(&final_message(&reply)), "hi", "{}", reply.text);

    let mut slow = call(2, "slow", json!({}));
    slow["params"] = slow_call(cell.peer);
    let reply = old.post(slow).await;
    let done = progress_then_result(&reply);
    assert!(done["result"].get("resultType").is_none(), "{done}");

    let response = post_streaming(
        &old.http,
        &old.url,
        &call(3, "ask", json!({"question": "Colour?"})),
        &old.headers(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let asked = reader.next_request("elicitation/create").await;
    assert_eq!(asked["params"]["message"], "Colour?", "{asked}");
    let ack = old
        .post(json!({"jsonrpc": "2.0", "id": asked["id"],
                     "result": accepted(&asked["params"], "blue")}))
        .await;
    assert_eq!(ack.status, 202, "{}", ack.text);
    let done = reader.rest().await.pop().unwrap();
    assert_eq!(done["id"], 3, "{done}");
    assert!(text(&done).contains("blue"), "{done}");
    assert!(done["result"].get("resultType").is_none(), "{done}");
    old
}

// === the SDK clients ===

/// Through the proxy every step passes, and every step that passed going direct too.
fn assert_no_worse_off(direct: &ClientRun, proxied: &ClientRun) {
    assert!(proxied.success, "through the proxy: {proxied}");
    for step in direct.passed_steps() {
        assert!(
            proxied.passed(&step),
            "{step} passed going direct, not through the proxy\ndirect: {direct}\nproxied: {proxied}"
        );
    }
}

/// The TypeScript SDK 2.x client in `mode` (echo, ask, slow), direct and through the
/// proxy at once; no worse off. Both runs.
async fn ts2_both(cell: &Cell, mode: ClientMode) -> (ClientRun, ClientRun) {
    let (direct, proxied) = tokio::join!(
        Ts2Client::http(&cell.direct(), mode).run(),
        Ts2Client::http(&cell.url(), mode).run(),
    );
    assert_no_worse_off(&direct, &proxied);
    (direct, proxied)
}

/// An SDK 1.x client (echo, ask, slow), direct and through the proxy; no worse off.
async fn sdk1_both(cell: &Cell, sdk: Sdk1) -> (ClientRun, ClientRun) {
    let steps = ["echo", "ask", "slow"];
    let (direct_url, proxy_url) = (cell.direct(), cell.url());
    let (direct, proxied) = tokio::join!(
        sdk1_client(sdk, &direct_url, &steps),
        sdk1_client(sdk, &proxy_url, &steps),
    );
    assert_no_worse_off(&direct, &proxied);
    (direct, proxied)
}

/// The Python SDK 2.x client in auto mode, answering questions with "Bob": what it
/// negotiated, and whether echo, ask (one elicitation) and slow (three progress
/// notifications) passed.
async fn python_auto(url: &str) -> (String, Vec<&'static str>) {
    let answering = Sdk2Options {
        answer: Some("Bob".to_owned()),
        ..Sdk2Options::default()
    };
    let mut python = Sdk2Client::connect_with(url, &answering).await;
    let mut passed = Vec::new();
    let echo = python.call("echo", json!({"msg": "hi"})).await;
    if echo["isError"] == false && echo["text"] == "hi" {
        passed.push("echo");
    }
    let ask = python.call("ask", json!({"question": "Name?"})).await;
    if ask["isError"] == false
        && ask["text"].as_str().is_some_and(|t| t.contains("Bob"))
        && ask["elicited"] == 1
    {
        passed.push("ask");
    }
    let slow = python.call_with_progress("slow", json!({"steps": 3})).await;
    if slow["isError"] == false && slow["progress"].as_array().is_some_and(|p| p.len() == 3) {
        passed.push("slow");
    }
    let version = python.protocol_version.clone();
    python.exit().await;
    (version, passed)
}

/// The Python SDK 2.x client, direct and through the proxy: 2026-07-28 through the proxy,
/// every step passing; every step that passed direct.
async fn python_both(cell: &Cell) -> (String, String) {
    let (direct_url, proxy_url) = (cell.direct(), cell.url());
    let ((direct_version, direct), (proxied_version, proxied)) =
        tokio::join!(python_auto(&direct_url), python_auto(&proxy_url));
    assert_eq!(proxied_version, MODERN);
    assert_eq!(proxied, ["echo", "ask", "slow"], "through the proxy");
    for step in direct {
        assert!(proxied.contains(&step), "{step}: direct {direct_version}");
    }
    (direct_version, proxied_version)
}

/// Which era the Inspector connects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InspectorEra {
    /// Its default: `initialize` (and `logging/setLevel` when the server declares logging).
    Legacy,
    /// `--era auto`: `server/discover`, then 2026-07-28.
    Auto,
}

/// The Inspector's CLI through the proxy: it connects in `era`, lists echo, ask and slow,
/// echoes, runs slow, and answers ask's question (`elicitation/respond`).
async fn inspector(cell: &Cell, era: InspectorEra, test: &str) {
    let url = cell.url();
    let mcpdo = Mcpdo::new(test).await;
    let mut connect = vec!["connect"];
    if era == InspectorEra::Auto {
        connect.extend(["--era", "auto"]);
    }
    connect.extend(["--transport", "http", &url]);
    let connected = mcpdo.json(&connect).await;
    let expected = match era {
        InspectorEra::Legacy => "legacy",
        InspectorEra::Auto => "modern",
    };
    assert_eq!(connected["protocolEra"], expected, "{connected}");

    let listed = mcpdo.on(&url, &["tools/list"]).await;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["echo", "ask", "slow"] {
        assert!(names.contains(&tool), "{tool}: {listed}");
    }
    let echoed = mcpdo.on(&url, &["tools/call", "echo", "msg:=hi"]).await;
    assert_eq!(echoed["content"][0]["text"], "hi", "{echoed}");
    let [steps, delay] = cell.peer.slow_args();
    let slow = mcpdo.on(&url, &["tools/call", "slow", steps, delay]).await;
    assert!(
        slow["isError"] != true && slow["content"].is_array(),
        "{slow}"
    );
    let pending = mcpdo
        .on(&url, &["tools/call", "ask", "question:=Colour?"])
        .await;
    let id = pending["elicitationPending"]["elicitationId"]
        .as_str()
        .unwrap_or_else(|| panic!("no question reached the Inspector: {pending}"));
    assert_eq!(
        pending["elicitationPending"]["message"], "Colour?",
        "{pending}"
    );
    let answered = mcpdo
        .on(&url, &["elicitation/respond", id, "answer:=blue"])
        .await;
    assert!(answered["isError"] != true, "{answered}");
    assert!(
        answered["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("blue")),
        "{answered}"
    );
    mcpdo.stop().await;
}

// === the cells: data-layer sessions ===

#[tokio::test]
async fn data_layer_session_before_a_legacy_server() {
    let cell = Cell::start(Peer::Legacy).await;
    data_layer_session(&cell).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn data_layer_session_before_a_dual_typescript_server() {
    let cell = Cell::start(Peer::DualTs2).await;
    data_layer_session(&cell).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn data_layer_session_before_a_dual_python_server() {
    let cell = Cell::start(Peer::DualPython).await;
    data_layer_session(&cell).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn data_layer_session_before_a_modern_only_server() {
    let cell = Cell::start(Peer::ModernOnly).await;
    data_layer_session(&cell).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

// === the cells: 2026-07-28 clients ===

/// What every 2026-07-28 client does through the proxy in front of `peer`; the runs of
/// the TypeScript SDK 2.x client going direct, (modern, auto).
async fn modern_clients(cell: &Cell, test: &str) -> (ClientRun, ClientRun) {
    stateless_client(cell).await;
    let ((modern_direct, modern), (auto_direct, auto), _, ()) = tokio::join!(
        ts2_both(cell, ClientMode::Modern),
        ts2_both(cell, ClientMode::Auto),
        python_both(cell),
        inspector(cell, InspectorEra::Auto, test),
    );
    for run in [&modern, &auto] {
        let connect = run.step("connect");
        assert_eq!(connect["era"], "modern", "{run}");
        assert_eq!(connect["protocolVersion"], MODERN, "{run}");
        assert_eq!(run.step("ask")["elicitations"], 1, "{run}");
    }
    (modern_direct, auto_direct)
}

#[tokio::test]
async fn a_2026_client_before_a_legacy_server() {
    let cell = Cell::start(Peer::Legacy).await;
    let (modern_direct, auto_direct) = modern_clients(&cell, "eras-2026-legacy").await;
    // Going direct, a client pinned to 2026-07-28 cannot connect, and an auto one falls
    // back to 2025-11-25: the proxy makes them both 2026-07-28 clients.
    assert!(!modern_direct.passed("connect"), "{modern_direct}");
    assert_eq!(
        modern_direct.step("connect")["code"],
        "ERA_NEGOTIATION_FAILED",
        "{modern_direct}"
    );
    assert_eq!(
        auto_direct.step("connect")["era"],
        "legacy",
        "{auto_direct}"
    );
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn a_2026_client_before_a_dual_typescript_server() {
    let cell = Cell::start(Peer::DualTs2).await;
    modern_clients(&cell, "eras-2026-dual-ts2").await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn a_2026_client_before_a_dual_python_server() {
    let cell = Cell::start(Peer::DualPython).await;
    modern_clients(&cell, "eras-2026-dual-python").await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn a_2026_client_before_a_modern_only_server() {
    let cell = Cell::start(Peer::ModernOnly).await;
    modern_clients(&cell, "eras-2026-modern").await;
    cell.assert_found_era().await;
    cell.stop().await;
}

/// A modern server that runs the tasks extension itself (the TypeScript SDK 2.x with
/// ext-tasks, modern-only and dual): its tasks pass through the proxy natively — the
/// official tasks client settles every task through the proxy as it does direct, and
/// the proxy runs none of its own.
#[tokio::test]
async fn tasks_of_a_modern_server_pass_through_natively() {
    let (modern, dual) = tokio::join!(Cell::start(Peer::ModernOnly), Cell::start(Peer::DualTs2));
    let urls = [modern.url(), modern.direct(), dual.url(), dual.direct()];
    let (a, b, c, d) = tokio::join!(
        tasks_client(&urls[0], &[]),
        tasks_client(&urls[1], &[]),
        tasks_client(&urls[2], &[]),
        tasks_client(&urls[3], &[]),
    );
    for run in [&a, &b, &c, &d] {
        assert_tasks_settled(run);
    }
    for cell in [&modern, &dual] {
        let metrics = get_text(&listener_url(&cell.proxy, "/metrics")).await;
        let created = metrics
            .lines()
            .find(|l| l.starts_with("mcp_proxy_tasks_created_total"));
        assert_eq!(
            created,
            Some("mcp_proxy_tasks_created_total 0"),
            "the proxy ran no task itself"
        );
    }
    modern.stop().await;
    dual.stop().await;
}

// === the cells: old clients ===

/// What every old client does through the proxy in front of `peer`; the direct runs of
/// the TypeScript SDK 2.x client (legacy mode) and of the Python SDK 1.x client. Every
/// client's session id is `bridged` (the proxy's `mcps_…`) or the server's own.
async fn old_clients(cell: &Cell, test: &str, bridged: bool) -> (ClientRun, ClientRun) {
    let raw = old_client(cell).await;
    assert_eq!(raw.session.starts_with("mcps_"), bridged, "{}", raw.session);
    let ((ts2_direct, ts2), (python_direct, python), (_, typescript), ()) = tokio::join!(
        ts2_both(cell, ClientMode::Legacy),
        sdk1_both(cell, Sdk1::Python),
        sdk1_both(cell, Sdk1::TypeScript),
        inspector(cell, InspectorEra::Legacy, test),
    );
    for run in [&ts2, &python, &typescript] {
        let connect = run.step("connect");
        assert_eq!(connect["era"], "legacy", "{run}");
        assert_eq!(connect["protocolVersion"], LEGACY, "{run}");
        let session = connect["sessionId"].as_str().unwrap_or_default();
        assert_eq!(session.starts_with("mcps_"), bridged, "{run}");
        assert_eq!(run.step("ask")["elicitations"], 1, "{run}");
    }
    (ts2_direct, python_direct)
}

#[tokio::test]
async fn an_old_client_before_a_legacy_server() {
    let cell = Cell::start(Peer::Legacy).await;
    old_clients(&cell, "eras-old-legacy", false).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn an_old_client_before_a_dual_typescript_server() {
    let cell = Cell::start(Peer::DualTs2).await;
    let (ts2_direct, python_direct) = old_clients(&cell, "eras-old-dual-ts2", true).await;
    // Going direct, the server's own legacy leg has no session to ask in: ask fails.
    // Through the bridge the question reaches the client.
    for run in [&ts2_direct, &python_direct] {
        assert!(run.passed("echo"), "{run}");
        assert!(!run.passed("ask"), "{run}");
    }
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn an_old_client_before_a_dual_python_server() {
    let cell = Cell::start(Peer::DualPython).await;
    old_clients(&cell, "eras-old-dual-python", true).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn an_old_client_before_a_modern_only_server() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let (ts2_direct, python_direct) = old_clients(&cell, "eras-old-modern", true).await;
    // Going direct, no old client can even connect.
    for run in [&ts2_direct, &python_direct] {
        assert!(!run.passed("connect"), "{run}");
    }
    cell.assert_found_era().await;
    cell.stop().await;
}

// === the bridge, beyond the cells ===

/// The old client's GET stream, open.
async fn get_stream(old: &LegacyClient) -> EventReader {
    let response = old
        .http
        .get(&old.url)
        .headers(old.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_event_stream(&response);
    EventReader::new(response)
}

/// Bumps `demo://counter` (through `old`) and waits a little for its
/// `notifications/resources/updated` on `stream`: whether it came.
async fn bump_heard(old: &LegacyClient, stream: &mut EventReader, id: u64) -> bool {
    let reply = old.post(call(id, "bump", json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        text(&final_message(&reply)).starts_with("counter="),
        "{}",
        reply.text
    );
    let deadline = tokio::time::Instant::now() + Duration::from_millis(400);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match stream.next_within(left).await {
            Some(Some(message)) => {
                assert!(message.get("id").is_none(), "{message}");
                if message["method"] == "notifications/resources/updated" {
                    assert_eq!(message["params"]["uri"], "demo://counter", "{message}");
                    // The subscription tag of 2026-07-28 stays with the proxy.
                    assert!(message["params"].get("_meta").is_none(), "{message}");
                    return true;
                }
            }
            Some(None) => panic!("the GET stream ended"),
            None => return false,
        }
    }
}

#[tokio::test]
async fn an_old_client_of_a_modern_server_hears_what_it_subscribed_to_on_its_get_stream() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    let initialized = final_message(&old.initialized);
    assert_eq!(
        initialized["result"]["capabilities"]["resources"]["subscribe"], true,
        "{initialized}"
    );
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                           "params": {"uri": "demo://counter"}});
    let reply = old.post(subscribe).await;
    assert_eq!(final_message(&reply)["result"], json!({}), "{}", reply.text);

    let mut stream = get_stream(&old).await;
    // The upstream listen opens in the background: bump until the first update arrives.
    let mut heard = false;
    for id in 10..30 {
        if bump_heard(&old, &mut stream, id).await {
            heard = true;
            break;
        }
    }
    assert!(
        heard,
        "no notifications/resources/updated on the GET stream"
    );
    assert!(bump_heard(&old, &mut stream, 30).await, "a second bump");

    // Unsubscribed, the updates stop (once the listen is opened again without it).
    let unsubscribe = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/unsubscribe",
                             "params": {"uri": "demo://counter"}});
    let reply = old.post(unsubscribe).await;
    assert_eq!(final_message(&reply)["result"], json!({}), "{}", reply.text);
    let mut quiet = false;
    for id in 40..50 {
        if !bump_heard(&old, &mut stream, id).await {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "updates kept coming after resources/unsubscribe");
    cell.stop().await;
}

/// An old client of a modern server subscribes to at most 64 resources (every one goes
/// into the one `subscriptions/listen` the bridge holds upstream): the 65th is refused
/// in-band, naming the bound; one already held may be subscribed again, and
/// unsubscribing makes room.
#[tokio::test]
async fn an_old_client_of_a_modern_server_subscribes_to_a_bounded_number_of_resources() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    let subscribe = |id: u64, method: &str, uri: String| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"uri": uri}});
    for n in 0..64 {
        let reply = old
            .post(subscribe(n, "resources/subscribe", format!("demo://r/{n}")))
            .await;
        assert_eq!(final_message(&reply)["result"], json!({}), "{}", reply.text);
    }
    let reply = old
        .post(subscribe(100, "resources/subscribe", "demo://r/64".into()))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let refused = final_message(&reply);
    assert_eq!(refused["id"], 100, "{refused}");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["data"]["maxSubscriptions"], 64,
        "{refused}"
    );
    let again = old
        .post(subscribe(101, "resources/subscribe", "demo://r/3".into()))
        .await;
    assert_eq!(final_message(&again)["result"], json!({}), "{}", again.text);
    let gone = old
        .post(subscribe(102, "resources/unsubscribe", "demo://r/0".into()))
        .await;
    assert_eq!(final_message(&gone)["result"], json!({}), "{}", gone.text);
    let room = old
        .post(subscribe(103, "resources/subscribe", "demo://r/64".into()))
        .await;
    assert_eq!(final_message(&room)["result"], json!({}), "{}", room.text);
    cell.stop().await;
}

/// The `notifications/message` of an old client's `slow` call (three steps: info, info,
/// warning) through the bridge: (level, data) of each.
async fn logs_of_slow(old: &LegacyClient, id: u64) -> Vec<(String, String)> {
    let reply = old
        .post(call(id, "slow", json!({"steps": 3, "delayMs": 10})))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let messages = reply.events();
    assert_eq!(
        text(&final_message(&reply)),
        "slow done after 3 steps",
        "{}",
        reply.text
    );
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| {
            (
                m["params"]["level"].as_str().unwrap().to_owned(),
                m["params"]["data"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_log_level_an_old_client_sets_decides_the_logs_it_hears_through_the_bridge() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    // The proxy serves logging for the server (2026-07-28 asks for logs per request).
    let initialized = final_message(&old.initialized);
    assert!(
        initialized["result"]["capabilities"]["logging"].is_object(),
        "{initialized}"
    );
    assert_eq!(
        logs_of_slow(&old, 1).await,
        [],
        "no level set: no logs (2026-07-28's reading of a request without one)"
    );
    let set = |id: u64, level: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel",
               "params": {"level": level}})
    };
    let reply = old.post(set(2, "warning")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(final_message(&reply)["result"], json!({}), "{}", reply.text);
    let warning = || ("warning".to_owned(), "slow step 3".to_owned());
    assert_eq!(logs_of_slow(&old, 3).await, [warning()]);
    old.post(set(4, "info")).await;
    let info = |n: u32| ("info".to_owned(), format!("slow step {n}"));
    assert_eq!(logs_of_slow(&old, 5).await, [info(1), info(2), warning()]);
    // A level 2025-11-25 does not have: -32602, in the session as a server answers it.
    let reply = old.post(set(6, "loud")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["error"]["code"], -32602, "{}", reply.text);
    assert_eq!(reply.json()["id"], 6);
    cell.stop().await;
}

#[tokio::test]
async fn an_old_clients_cancellation_ends_its_bridged_call() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    // 40 steps of 100 ms: four seconds, unless cancelled.
    let mut long = call(7, "slow", json!({}));
    long["params"] = json!({"name": "slow", "arguments": {"steps": 40, "delayMs": 100},
                            "_meta": {"progressToken": "long"}});
    let response = post_streaming(&old.http, &old.url, &long, &old.headers()).await;
    assert_event_stream(&response);
    let mut reader = EventReader::new(response);
    let first = reader.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let cancelled = std::time::Instant::now();
    let reply = old
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 7, "reason": "the user gave up"}}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    // The call's stream ends soon, without a response (2025-11-25: a cancelled request
    // gets none), and well before the tool would have finished.
    let mut after = Vec::new();
    loop {
        match reader.next_within(Duration::from_secs(3)).await {
            Some(Some(message)) => after.push(message),
            Some(None) => break,
            None => panic!("the cancelled call's stream is still open: {after:?}"),
        }
    }
    assert!(
        cancelled.elapsed() < Duration::from_secs(3),
        "{:?}",
        cancelled.elapsed()
    );
    assert!(
        after.iter().all(|m| m.get("id").is_none()),
        "a response after the cancellation: {after:?}"
    );
    assert!(after.len() < 10, "{after:?}");
    // The session carries on.
    let reply = old
        .post(call(8, "echo", json!({"msg": "still here"})))
        .await;
    assert_eq!(text(&final_message(&reply)), "still here", "{}", reply.text);
    cell.stop().await;
}

#[tokio::test]
async fn old_clients_pass_through_to_a_dual_server_when_configured_so() {
    let cell = Cell::start_with(Peer::DualTs2, |c| {
        c.upstream.old_clients = OldClients::PassThrough;
    })
    .await;
    // The server's own legacy leg answers, as it would going direct: no session, and so
    // no question can reach the client (ask is a tool error), whatever the client.
    let (direct, proxied) = tokio::join!(
        Ts2Client::http(&cell.direct(), ClientMode::Legacy).run(),
        Ts2Client::http(&cell.url(), ClientMode::Legacy).run(),
    );
    assert_eq!(
        direct.passed_steps(),
        ["connect", "echo", "slow"],
        "{direct}"
    );
    assert_eq!(proxied.passed_steps(), direct.passed_steps(), "{proxied}");
    assert_eq!(proxied.step("ask")["isError"], true, "{proxied}");
    assert!(
        proxied.step("connect").get("sessionId").is_none(),
        "{proxied}"
    );

    let http = http_client();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "eras-old", "version": "1"}}});
    let reply = post_json(&http, &cell.url(), &initialize, &HeaderMap::new()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.header("mcp-session-id").is_none(), "{reply:?}");
    let result = &final_message(&reply)["result"];
    assert_eq!(
        result["serverInfo"]["name"], "ts2-fixture",
        "the server's own: {result}"
    );
    let reply = post_json(
        &http,
        &cell.url(),
        &call(2, "ask", json!({"question": "Colour?"})),
        &HeaderMap::new(),
    )
    .await;
    let asked = final_message(&reply);
    assert_eq!(asked["result"]["isError"], true, "{}", reply.text);
    // 2026-07-28 clients still pass through natively.
    stateless_client(&cell).await;
    cell.assert_found_era().await;
    cell.stop().await;
}

// === a modern server's own refusals ===

/// The status and JSON-RPC error of a refusal, which must not be the proxy's 502.
fn refusal(reply: &Reply) -> (u16, Value) {
    assert_ne!(reply.status, 502, "{}", reply.text);
    let message = final_message(reply);
    assert!(message["error"].is_object(), "not an error: {}", reply.text);
    (reply.status, message["error"].clone())
}

/// A raw 2026-07-28 request (`method`, `params`) with its `_meta` and the standard
/// headers, claiming `version` in both.
async fn modern_request(url: &str, method: &str, params: Value, version: &str) -> Reply {
    let client = StatelessClient::new(url.to_owned());
    let mut params = client.params(params);
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(version);
    let mut sent = StatelessClient::headers(method, &params);
    sent.insert(
        "mcp-protocol-version",
        reqwest::header::HeaderValue::from_str(version).unwrap(),
    );
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    post_json(&client.http, url, &body, &sent).await
}

#[tokio::test]
async fn a_modern_servers_refusals_reach_every_client_as_they_are() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let ask = json!({"name": "ask", "arguments": {"question": "Colour?"}});
    let forecast = json!({"name": "forecast", "arguments": {"region": "north"}});

    // A 2026-07-28 client: exactly the server's answers, going direct or not. A client
    // that did not declare elicitation (-32021), a routing header missing (-32020), a
    // version the server does not speak (-32022).
    let cases = [
        (ask.clone(), MODERN, -32021),
        (forecast.clone(), MODERN, -32020),
        (ask.clone(), "2099-01-01", -32022),
    ];
    for (params, version, code) in cases {
        let direct = modern_request(&cell.direct(), "tools/call", params.clone(), version).await;
        let proxied = modern_request(&cell.url(), "tools/call", params, version).await;
        let (status, error) = refusal(&direct);
        assert_eq!(error["code"], code, "{}", direct.text);
        assert_eq!(refusal(&proxied), (status, error), "{}", proxied.text);
    }

    // A data-layer session that declared no elicitation: the server's -32021, stamped
    // into nothing (an error), not a 502.
    let mut session = SessionClient::new(cell.url());
    session.create().await;
    let reply = session.request("tools/call", ask.clone()).await;
    let (_, error) = refusal(&reply);
    assert_eq!(error["code"], -32021, "{}", reply.text);
    assert!(
        error["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{}",
        reply.text
    );
    // The routing header its call needs (SEP-2243's `Mcp-Param-Region`) the proxy
    // mirrors itself; a -32020 that persists reaches it as it came (tests/suite/param_headers.rs).
    let reply = session.request("tools/call", forecast.clone()).await;
    assert_eq!(
        text(&final_message(&reply)),
        "forecast for north: sunny for 1 day(s)",
        "{}",
        reply.text
    );

    // An old client that declared no elicitation, through the bridge: the same code.
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    let reply = old
        .post(call(1, "ask", json!({"question": "Colour?"})))
        .await;
    let (_, error) = refusal(&reply);
    assert_eq!(error["code"], -32021, "{}", reply.text);
    assert_eq!(final_message(&reply)["id"], 1, "{}", reply.text);
    cell.stop().await;
}

// === the era, pinned or found again ===

/// `whoami` on the Python SDK 2.x server: the protocol version and session it saw.
async fn python_whoami_of_a_2026_client(url: &str) -> String {
    let mut c = StatelessClient::new(url.to_owned());
    text(&c.call_tool("whoami", json!({})).await)
}

#[tokio::test]
async fn a_pinned_era_is_never_probed_for() {
    // Pinned legacy in front of a dual server: nothing asks it what it speaks, and every
    // client is served by its 2025-11-25 leg — old clients passed to it, 2026-07-28
    // clients through the proxy's own sessions there.
    let cell = Cell::start_with(Peer::DualPython, |c| c.upstream.era = Some(Era::Legacy)).await;
    assert_era(&cell.proxy, "legacy").await;
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    assert!(
        !old.session.starts_with("mcps_"),
        "the server's own session"
    );
    let reply = old.post(call(1, "whoami", json!({}))).await;
    assert_eq!(
        text(&final_message(&reply)),
        format!("version={LEGACY} session={}", old.session)
    );
    let seen = python_whoami_of_a_2026_client(&cell.url()).await;
    assert!(
        seen.starts_with(&format!("version={LEGACY} session=")),
        "{seen}"
    );
    assert!(!seen.ends_with("None"), "{seen}");
    cell.stop().await;
    // Unpinned, the same server is found modern: 2026-07-28 requests reach it as they are.
    let cell = Cell::start(Peer::DualPython).await;
    let seen = python_whoami_of_a_2026_client(&cell.url()).await;
    assert_eq!(seen, format!("version={MODERN} session=None"));
    cell.assert_found_era().await;
    cell.stop().await;

    // Pinned modern in front of a modern-only server: known before any request, and old
    // clients are bridged from the first.
    let cell = Cell::start_with(Peer::ModernOnly, |c| c.upstream.era = Some(Era::Modern)).await;
    cell.assert_found_era().await;
    let old = LegacyClient::connect(cell.url(), LEGACY).await;
    assert!(old.session.starts_with("mcps_"), "{}", old.session);
    let reply = old.post(call(1, "echo", json!({"msg": "pinned"}))).await;
    assert_eq!(text(&final_message(&reply)), "pinned", "{}", reply.text);
    cell.stop().await;

    // The recording demo server shows what reaches it: no `server/discover` at all when
    // pinned; one probe when not.
    for (pinned, probes) in [(Some(Era::Legacy), 0), (None, 1)] {
        let h = Harness::with_config(|c| c.upstream.era = pinned).await;
        let mut session = h.client();
        session.create().await;
        session.call_tool("echo", json!({"msg": "hi"})).await;
        h.stateless_client()
            .call_tool("echo", json!({"msg": "hi"}))
            .await;
        let seen = h.demo.journal().iter().filter(|r| is_era_probe(r)).count();
        assert_eq!(seen, probes, "pinned: {pinned:?}");
        assert_era(&h.proxy, "legacy").await;
        h.stop().await;
    }
}

#[tokio::test]
async fn a_server_replaced_by_one_of_another_era_is_found_again() {
    // A legacy server; the proxy finds it legacy and serves every client.
    let legacy = fastmcp(&[]).await;
    let port = legacy.port;
    let proxy = start(config_for(&legacy.url())).await.unwrap();
    let url = proxy.url();
    let mut before = SessionClient::new(url.clone());
    before.create().await;
    assert_eq!(
        text(&before.call_tool("echo", json!({"msg": "hi"})).await),
        "hi"
    );
    let old = LegacyClient::connect(url.clone(), LEGACY).await;
    assert!(
        !old.session.starts_with("mcps_"),
        "passed through: {}",
        old.session
    );
    let mut c = StatelessClient::new(url.clone());
    let echoed = c.call_tool("echo", json!({"msg": "hi"})).await;
    assert_eq!(text(&echoed), "hi", "{echoed}");
    assert_era(&proxy, "legacy").await;

    // Replaced on its port by a modern-only server (a migration's cut-over).
    let mut legacy = legacy;
    legacy.kill().await;
    let modern = ts2_http_on(Ts2Mode::Reject, port).await;
    assert_eq!(modern.port, port);

    // New sessions follow: the refusal of the proxy's `initialize` has the era found
    // again, and the session is opened in the new one.
    let mut after = SessionClient::new(url.clone());
    after.create().await;
    assert_eq!(
        text(&after.call_tool("echo", json!({"msg": "hi"})).await),
        "hi"
    );
    assert_era(&proxy, "modern").await;
    // So do new old clients (bridged now) and 2026-07-28 clients (passed through).
    let old = LegacyClient::connect(url.clone(), LEGACY).await;
    assert!(old.session.starts_with("mcps_"), "bridged: {}", old.session);
    let reply = old.post(call(1, "echo", json!({"msg": "hi"}))).await;
    assert_eq!(text(&final_message(&reply)), "hi", "{}", reply.text);
    let echoed = c.call_tool("echo", json!({"msg": "hi"})).await;
    assert_eq!(
        echoed["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "ts2-fixture",
        "{echoed}"
    );
    proxy.shutdown().await;
}

// === the cells: stdio servers of the modern era ===

/// Every client era through the proxy in front of the TypeScript SDK 2.x server over
/// stdio: a data-layer session, a raw 2026-07-28 client, a raw old client (bridged: the
/// proxy's `mcps_…` session), and the TypeScript SDK 2.x client in each of its modes —
/// each asked a question it answers.
async fn every_client_before_a_stdio_server(peer: Peer) {
    let cell = Cell::start(peer).await;
    data_layer_session(&cell).await;
    stateless_client(&cell).await;
    let old = old_client(&cell).await;
    assert!(old.session.starts_with("mcps_"), "{}", old.session);
    let url = cell.url();
    let (modern, auto, legacy) = tokio::join!(
        Ts2Client::http(&url, ClientMode::Modern).run(),
        Ts2Client::http(&url, ClientMode::Auto).run(),
        Ts2Client::http(&url, ClientMode::Legacy).run(),
    );
    for (run, era, version) in [
        (&modern, "modern", MODERN),
        (&auto, "modern", MODERN),
        (&legacy, "legacy", LEGACY),
    ] {
        assert!(run.success, "{run}");
        let connect = run.step("connect");
        assert_eq!(connect["era"], era, "{run}");
        assert_eq!(connect["protocolVersion"], version, "{run}");
        assert_eq!(run.step("ask")["elicitations"], 1, "{run}");
    }
    cell.assert_found_era().await;
    cell.stop().await;
}

#[tokio::test]
async fn every_client_before_a_modern_only_stdio_server() {
    every_client_before_a_stdio_server(Peer::StdioModernOnly).await;
}

#[tokio::test]
async fn every_client_before_a_dual_stdio_server() {
    every_client_before_a_stdio_server(Peer::StdioDual).await;
}

/// A replica pinned to the modern era is still checked by its health probe — pinned, its
/// era is not asked for, but whether it serves is (`server/discover`): one that went
/// away is out of rotation until it answers again.
#[tokio::test]
async fn a_replica_pinned_modern_is_out_of_rotation_while_it_does_not_answer() {
    let server = ts2_http(Ts2Mode::Reject).await;
    let (url, port) = (server.url(), server.port);
    let mut config = config_for(&url);
    config.upstream.era = Some(Era::Modern);
    config.upstream.health_interval = Duration::from_millis(200);
    let proxy = start(config).await.unwrap();
    let ready = listener_url(&proxy, "/readyz");
    let state =
        || async { get_json(&ready).await["upstreams"]["default"]["replicas"][&url].clone() };
    assert_eq!(state().await, "ok");

    drop(server);
    let out = eventually_async(Duration::from_secs(10), || async {
        state().await == "failing"
    })
    .await;
    assert!(
        out,
        "a pinned replica that went away stayed in rotation: {}",
        state().await
    );
    // It stays out: nothing puts it back but an answer.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(state().await, "failing");

    let _server = ts2_http_on(Ts2Mode::Reject, port).await;
    let back = eventually_async(Duration::from_secs(10), || async { state().await == "ok" }).await;
    assert!(back, "the replica did not return to rotation");
    proxy.shutdown().await;
}

/// A data-layer session in front of a modern server: what the session keeps and a
/// 2026-07-28 server has no method for — `ping`, `logging/setLevel`,
/// `resources/subscribe` — is answered by the proxy, stamped; the level decides the logs
/// the session's calls hear; and its GET stream (one `subscriptions/listen` upstream)
/// carries the updates of what it subscribed to.
#[tokio::test]
async fn a_data_layer_session_of_a_modern_server_keeps_its_level_subscriptions_and_stream() {
    let cell = Cell::start(Peer::ModernOnly).await;
    let mut c = SessionClient::new(cell.url());
    c.create().await;
    for (method, params) in [
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "warning"})),
        ("resources/subscribe", json!({"uri": "demo://counter"})),
    ] {
        let reply = c.request(method, params).await;
        assert_eq!(reply.status, 200, "{method}: {}", reply.text);
        let answer = final_message(&reply);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        check_session_meta(&answer, c.session_id());
    }
    // `slow` logs info, info, warning: at "warning" only the last is heard.
    let reply = c.request("tools/call", slow_call(Peer::ModernOnly)).await;
    let logs: Vec<String> = reply
        .events()
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| m["params"]["level"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(logs, ["warning"], "{}", reply.text);

    let response = http_client()
        .get(cell.url())
        .header("mcp-session-id", c.session_id())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = EventReader::new(response);
    let mut heard = false;
    for _ in 0..20 {
        c.call_tool("bump", json!({})).await;
        if let Some(Some(update)) = stream.next_within(Duration::from_millis(500)).await {
            assert_eq!(
                update["method"], "notifications/resources/updated",
                "{update}"
            );
            heard = true;
            break;
        }
    }
    assert!(
        heard,
        "no notifications/resources/updated on the session's GET stream"
    );
    cell.stop().await;
}
