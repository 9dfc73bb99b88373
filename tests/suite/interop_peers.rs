//! The MCP peers of every protocol era, talked to DIRECTLY (no proxy): what each real
//! server answers and which real clients work with it. This is the baseline the proxy is
//! measured against ("no client is worse off through the proxy than going direct"), and
//! the facts its upstream handling relies on:
//!
//! - modern-only (2026-07-28): the TypeScript SDK 2.x with `legacy: 'reject'` answers
//!   `server/discover` and refuses `initialize` with 400 / -32022 naming its versions
//!   (the 2026-07-28 versioning page: a modern-only server SHOULD name them);
//! - dual: the TypeScript SDK 2.x with `legacy: 'stateless'` (2025 served per request, no
//!   session, no server-to-client requests) and the Python SDK 2.x (2025 with sessions);
//! - stdio, where the first message pins the era;
//! - HTTP+SSE (2024-11-05): FastMCP and everything, `GET /sse` + POSTs to the endpoint;
//! - legacy Streamable HTTP (2025-11-25): FastMCP and everything refuse the 2026 probe
//!   with a 400 that carries no modern error, so a dual client falls back.
//!
//! Also pinned: input_required and its retry (SEP-2322), SEP-2243's `Mcp-Name` and
//! `Mcp-Param-*` checks, and the tasks extension end to end.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::interop::{Interop, Sdk2Client, Sdk2Options, conformance_fixture, everything, fastmcp};
use common::peers::{
    ClientMode, SseSession, StdioLegacy, Ts2Client, Ts2Mode, assert_tasks_settled, everything_sse,
    fastmcp_sse, sdk2_server, sdk2_stdio_command, sse_post, tasks_client, ts2_http,
    ts2_stdio_command,
};
use common::{Reply, StatelessClient, final_message, http_client, post_json};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";
/// What the stream of an HTTP+SSE server must deliver an answer within.
const STREAM_WAIT: Duration = Duration::from_secs(10);

/// `slow`'s arguments on the TypeScript fixture, and on the Python ones.
fn ts2_slow() -> Value {
    json!({"steps": 3, "delayMs": 20})
}

fn python_slow() -> Value {
    json!({"steps": 3, "delay_ms": 20})
}

/// A 2026-07-28 client that declares form elicitation.
fn asking_client(url: &str) -> StatelessClient {
    StatelessClient::new(url.to_owned()).with_capabilities(json!({"elicitation": {"form": {}}}))
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// A 2025-era POST (Accept: JSON and SSE, no 2026 headers unless `extra` has them).
async fn legacy_post(url: &str, body: &Value, extra: &[(&str, &str)]) -> Reply {
    post_json(&http_client(), url, body, &headers(extra)).await
}

fn initialize(id: u64, version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "peers-test", "version": "1"}
    }})
}

/// A 2026-07-28 request from `client` with its `_meta`, the standard headers for
/// `method` except `without`, and `extra` headers.
async fn modern_post(
    client: &StatelessClient,
    method: &str,
    params: Value,
    without: &[&str],
    extra: &[(&str, &str)],
) -> Reply {
    let params = client.params(params);
    let mut sent = StatelessClient::headers(method, &params);
    for name in without {
        sent.remove(*name);
    }
    sent.extend(headers(extra));
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    post_json(&client.http, &client.url, &body, &sent).await
}

/// The JSON-RPC error of a reply that must have `status` and `code`.
fn error_of(reply: &Reply, status: u16, code: i64) -> Value {
    assert_eq!(reply.status, status, "{}", reply.text);
    let message = final_message(reply);
    assert_eq!(message["error"]["code"], code, "{}", reply.text);
    message["error"].clone()
}

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

/// `server/discover`: 200, only modern versions, serverInfo in `_meta` (not in the body).
async fn assert_discover(url: &str, server_name: &str) -> Value {
    let reply = StatelessClient::new(url.to_owned())
        .request("server/discover", json!({}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let result = reply.json()["result"].clone();
    assert_eq!(result["supportedVersions"], json!([MODERN]), "{result}");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        server_name
    );
    assert!(result.get("serverInfo").is_none(), "{result}");
    assert!(result.get("protocolVersion").is_none(), "{result}");
    result
}

/// SEP-2243 on a modern server: `Mcp-Name` is required on `tools/call`, and the
/// `forecast` tool's `x-mcp-header` arguments must be mirrored into `Mcp-Param-Region`
/// (checked after decoding `=?base64?...?=`).
async fn assert_sep2243(url: &str) {
    let c = asking_client(url);
    let call = |region: &str| json!({"name": "forecast", "arguments": {"region": region}});

    let reply = modern_post(&c, "tools/call", call("north"), &[], &[]).await;
    let error = error_of(&reply, 400, -32020);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("Mcp-Param-Region"),
        "{error}"
    );
    let reply = modern_post(
        &c,
        "tools/call",
        call("north"),
        &[],
        &[("mcp-param-region", "south")],
    )
    .await;
    error_of(&reply, 400, -32020);
    let reply = modern_post(
        &c,
        "tools/call",
        call("north"),
        &[],
        &[("mcp-param-region", "north")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(text(&final_message(&reply)).contains("forecast for north"));
    // base64("north"), the form a client uses for values that are not plain ASCII.
    let reply = modern_post(
        &c,
        "tools/call",
        call("north"),
        &[],
        &[("mcp-param-region", "=?base64?bm9ydGg=?=")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let echo = json!({"name": "echo", "arguments": {"msg": "hi"}});
    let reply = modern_post(&c, "tools/call", echo.clone(), &["mcp-name"], &[]).await;
    error_of(&reply, 400, -32020);
    let reply = modern_post(&c, "tools/call", echo, &["mcp-method"], &[]).await;
    error_of(&reply, 400, -32020);
}

/// The TypeScript SDK 2.x's `ask` over 2026-07-28: input_required, then the retry with
/// `inputResponses` and the echoed `requestState` completes; a client without the
/// elicitation capability gets 400 / -32021.
async fn assert_ts2_input_required(url: &str) {
    let mut c = asking_client(url);
    let first = c.call_tool("ask", json!({"question": "Colour?"})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["answer"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        result["inputRequests"]["answer"]["params"]["message"],
        "Colour?"
    );
    assert_eq!(result["requestState"], "ask-round-1");
    let retry = c
        .request(
            "tools/call",
            json!({
                "name": "ask",
                "arguments": {"question": "Colour?"},
                "inputResponses": {"answer": {"action": "accept", "content": {"answer": "blue"}}},
                "requestState": result["requestState"],
            }),
        )
        .await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    let done = final_message(&retry);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(text(&done), "you answered: blue (state=ask-round-1)");

    let reply = modern_post(
        &StatelessClient::new(url.to_owned()),
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
        &[],
        &[],
    )
    .await;
    let error = error_of(&reply, 400, -32021);
    assert!(
        error["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{error}"
    );
}

/// Progress and logs of one 2026 request arrive on its own answer, as an event stream.
async fn assert_progress_on_the_answer(url: &str) {
    let mut c = StatelessClient::new(url.to_owned());
    c.log_level = Some("info");
    let reply = c
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 3, "delayMs": 20},
                   "_meta": {"progressToken": "p1"}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("text/event-stream"),
        "{reply:?}"
    );
    let events = reply.events();
    let progress = events
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    let logs = events
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert_eq!((progress, logs), (3, 3), "{events:?}");
    assert_eq!(text(events.last().unwrap()), "slow done after 3 steps");
}

#[tokio::test]
async fn modern_only_ts2_answers_discover_and_refuses_initialize_naming_its_versions() {
    let server = ts2_http(Ts2Mode::Reject).await;
    let url = server.url();
    let discovered = assert_discover(&url, "ts2-fixture").await;
    assert!(discovered["capabilities"]["extensions"][TASKS].is_object());

    // initialize, with or without the 2025 version header: 400 and -32022 naming the
    // supported versions, never a session.
    for extra in [&[][..], &[("mcp-protocol-version", "2025-11-25")][..]] {
        let reply = legacy_post(&url, &initialize(1, "2025-11-25"), extra).await;
        let error = error_of(&reply, 400, -32022);
        assert_eq!(reply.json()["id"], 1);
        assert_eq!(
            error["data"],
            json!({"supported": [MODERN], "requested": "2025-11-25"})
        );
        assert!(
            reply
                .header("content-type")
                .unwrap()
                .starts_with("application/json")
        );
        assert!(reply.header("mcp-session-id").is_none());
    }
    // Any other request without the 2026 envelope: the same refusal, without `requested`.
    let reply = legacy_post(
        &url,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        &[],
    )
    .await;
    let error = error_of(&reply, 400, -32022);
    assert_eq!(error["data"], json!({"supported": [MODERN]}));
    // A 2025 notification is accepted and dropped.
    let reply = legacy_post(
        &url,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &[],
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    // No GET stream, no DELETE (streamable-http.mdx: a modern-only server answers 405).
    let http = http_client();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = http
            .request(method.clone(), &url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
        assert_eq!(response.headers()["allow"], "POST");
    }

    assert_ts2_input_required(&url).await;
    assert_sep2243(&url).await;
    assert_progress_on_the_answer(&url).await;
}

#[tokio::test]
async fn modern_only_ts2_serves_modern_and_auto_clients_and_refuses_legacy_ones() {
    let server = ts2_http(Ts2Mode::Reject).await;
    let url = server.url();
    let every = [
        "echo", "ask", "sample", "roots", "slow", "forecast", "listen",
    ];
    let (modern, auto, legacy) = tokio::join!(
        Ts2Client::http(&url, ClientMode::Modern)
            .steps(&every)
            .run(),
        Ts2Client::http(&url, ClientMode::Auto).steps(&every).run(),
        Ts2Client::http(&url, ClientMode::Legacy).run(),
    );
    for run in [&modern, &auto] {
        assert!(run.success, "{run}");
        assert_eq!(run.step("connect")["era"], "modern", "{run}");
        assert_eq!(run.step("ask")["elicitations"], 1, "{run}");
    }
    // The SDK reports the 400 as an HTTP failure; the -32022 body is in its data.
    assert!(!legacy.success);
    let connect = legacy.step("connect");
    assert_eq!(connect["ok"], false, "{legacy}");
    assert_eq!(connect["data"]["status"], 400, "{legacy}");
    assert!(
        connect["data"]["text"].as_str().unwrap().contains("-32022"),
        "{legacy}"
    );
    assert_eq!(legacy.passed_steps(), Vec::<String>::new());

    // The Python SDK 2.x client: `auto` adopts 2026-07-28; `legacy` cannot connect.
    let answering = Sdk2Options {
        answer: Some("Bob".to_owned()),
        ..Sdk2Options::default()
    };
    let mut python = Sdk2Client::connect_with(&url, &answering).await;
    assert_eq!(python.protocol_version, MODERN);
    assert_python_steps(&mut python, "you answered: Bob", ts2_slow()).await;
    python.exit().await;
    let refused = Sdk2Client::try_connect(
        &url,
        &Sdk2Options {
            mode: Some("legacy"),
            ..answering
        },
    )
    .await;
    assert!(refused.is_err(), "a legacy Python client connected");
}

/// echo, ask (answered `Bob`, the text must contain `asked`) and slow (`slow`: its
/// arguments; 3 progress notifications expected) through a Python SDK 2.x client.
async fn assert_python_steps(client: &mut Sdk2Client, asked: &str, slow: Value) {
    assert_eq!(client.text("echo", json!({"msg": "hi"})).await, "hi");
    let answer = client.call("ask", json!({"question": "Name?"})).await;
    assert_eq!(answer["isError"], false, "{answer}");
    assert!(answer["text"].as_str().unwrap().contains(asked), "{answer}");
    assert_eq!(answer["elicited"], 1, "{answer}");
    let slow = client.call_with_progress("slow", slow).await;
    assert_eq!(slow["isError"], false, "{slow}");
    assert_eq!(slow["progress"].as_array().unwrap().len(), 3, "{slow}");
}

#[tokio::test]
async fn dual_ts2_serves_2025_statelessly_without_sessions_or_server_requests() {
    let server = ts2_http(Ts2Mode::Stateless).await;
    let url = server.url();
    // Dual, yet discover names only the modern version.
    assert_discover(&url, "ts2-fixture").await;

    let reply = legacy_post(&url, &initialize(1, "2025-11-25"), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert!(reply.header("mcp-session-id").is_none(), "{reply:?}");
    let result = &final_message(&reply)["result"];
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["serverInfo"]["name"], "ts2-fixture");

    // Every 2025 request stands alone: no session, no initialize needed.
    let call = |id: u64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": {"msg": "hi legacy"}}})
    };
    let reply = legacy_post(&url, &call(2, "echo"), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(text(&final_message(&reply)), "hi legacy");
    // ...so a server-to-client request is impossible: the tool answers an error.
    let reply = legacy_post(
        &url,
        &call(3, "ask"),
        &[("mcp-protocol-version", "2025-11-25")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let message = final_message(&reply);
    assert_eq!(message["result"]["isError"], true, "{message}");
    assert!(text(&message).contains("cannot receive server-to-client requests"));
    // A 2025 client must accept both media types here.
    let response = http_client()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(call(4, "echo").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 406);
    let response = http_client()
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);

    assert_ts2_input_required(&url).await;
    assert_sep2243(&url).await;
}

#[tokio::test]
async fn dual_ts2_serves_every_client_but_legacy_ones_get_no_server_requests() {
    let server = ts2_http(Ts2Mode::Stateless).await;
    let url = server.url();
    let steps = ["echo", "ask", "sample", "roots", "slow", "forecast"];
    let (modern, auto, legacy) = tokio::join!(
        Ts2Client::http(&url, ClientMode::Modern)
            .steps(&steps)
            .run(),
        Ts2Client::http(&url, ClientMode::Auto).steps(&steps).run(),
        Ts2Client::http(&url, ClientMode::Legacy)
            .steps(&steps)
            .run(),
    );
    for run in [&modern, &auto] {
        assert!(run.success, "{run}");
        assert_eq!(run.step("connect")["era"], "modern", "{run}");
    }
    let connect = legacy.step("connect");
    assert_eq!(connect["era"], "legacy", "{legacy}");
    assert_eq!(connect["protocolVersion"], "2025-11-25", "{legacy}");
    assert!(connect.get("sessionId").is_none(), "{legacy}");
    assert_eq!(
        legacy.passed_steps(),
        ["connect", "echo", "slow", "forecast"],
        "{legacy}"
    );
    for step in ["ask", "sample", "roots"] {
        assert_eq!(legacy.step(step)["isError"], true, "{legacy}");
    }

    let answering = Sdk2Options {
        answer: Some("Bob".to_owned()),
        ..Sdk2Options::default()
    };
    let mut python = Sdk2Client::connect_with(&url, &answering).await;
    assert_eq!(python.protocol_version, MODERN);
    assert_python_steps(&mut python, "you answered: Bob", ts2_slow()).await;
    python.exit().await;
    let mut python = Sdk2Client::connect_with(
        &url,
        &Sdk2Options {
            mode: Some("legacy"),
            ..answering
        },
    )
    .await;
    assert_eq!(python.protocol_version, "2025-11-25");
    assert_eq!(python.text("echo", json!({"msg": "hi"})).await, "hi");
    let ask = python.call("ask", json!({})).await;
    assert_eq!(ask["isError"], true, "{ask}");
    python.exit().await;
}

#[tokio::test]
async fn ts2_over_stdio_pins_the_era_on_the_first_message() {
    let serve = ts2_stdio_command(StdioLegacy::Serve);
    let reject = ts2_stdio_command(StdioLegacy::Reject);
    let every_legacy = ["echo", "ask", "sample", "roots", "slow"];
    let (modern, legacy, auto, refused, modern_only) = tokio::join!(
        Ts2Client::stdio(&serve, ClientMode::Modern)
            .steps(&["echo", "ask", "slow", "listen"])
            .run(),
        Ts2Client::stdio(&serve, ClientMode::Legacy)
            .steps(&every_legacy)
            .run(),
        Ts2Client::stdio(&serve, ClientMode::Auto).run(),
        Ts2Client::stdio(&reject, ClientMode::Legacy).run(),
        Ts2Client::stdio(&reject, ClientMode::Modern).run(),
    );
    for (run, era) in [
        (&modern, "modern"),
        (&legacy, "legacy"),
        (&auto, "modern"),
        (&modern_only, "modern"),
    ] {
        assert!(run.success, "{run}");
        assert_eq!(run.step("connect")["era"], era, "{run}");
    }
    // On a 2025 stdio connection the SDK turns input_required into real requests.
    for (step, counter) in [
        ("ask", "elicitations"),
        ("sample", "samplings"),
        ("roots", "rootsRequests"),
    ] {
        assert_eq!(legacy.step(step)[counter], 1, "{legacy}");
    }
    // --legacy reject: initialize is answered -32022 with the supported versions.
    let connect = refused.step("connect");
    assert_eq!(connect["ok"], false, "{refused}");
    assert_eq!(connect["code"], -32022, "{refused}");
    assert_eq!(connect["data"]["supported"], json!([MODERN]), "{refused}");
}

#[tokio::test]
async fn ts2_tasks_run_to_completion_with_input_cancel_and_failure() {
    let reject = ts2_http(Ts2Mode::Reject).await;
    let stateless = ts2_http(Ts2Mode::Stateless).await;
    let (reject_url, stateless_url) = (reject.url(), stateless.url());
    let (a, b) = tokio::join!(
        tasks_client(&reject_url, &[]),
        tasks_client(&stateless_url, &[])
    );
    for run in [&a, &b] {
        assert_tasks_settled(run);
    }

    // On the wire: a CreateTaskResult, then tasks/get (Mcp-Name: the task id).
    let url = reject.url();
    let mut tasks =
        StatelessClient::new(url.clone()).with_capabilities(json!({"extensions": {TASKS: {}}}));
    let created = tasks.call_tool("long", json!({"ms": 5000})).await;
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    assert_eq!(result["status"], "working");
    // The SDK adds `content: []` to every CreateTaskResult: resultType tells it apart.
    assert_eq!(result["content"], json!([]));
    let id = result["taskId"].as_str().unwrap().to_owned();
    let get = json!({"taskId": id});
    let reply = modern_post(&tasks, "tasks/get", get.clone(), &[], &[("mcp-name", &id)]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["result"]["status"], "working");
    let reply = modern_post(&tasks, "tasks/get", get.clone(), &["mcp-name"], &[]).await;
    error_of(&reply, 400, -32020);
    let plain = StatelessClient::new(url.clone());
    let reply = modern_post(&plain, "tasks/get", get.clone(), &[], &[("mcp-name", &id)]).await;
    let error = error_of(&reply, 400, -32021);
    assert!(error["data"]["requiredCapabilities"]["extensions"][TASKS].is_object());
    let reply = modern_post(
        &tasks,
        "tasks/cancel",
        get.clone(),
        &[],
        &[("mcp-name", &id)],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reply = modern_post(&tasks, "tasks/get", get, &[], &[("mcp-name", &id)]).await;
    assert_eq!(reply.json()["result"]["status"], "cancelled");
    // Without the extension the same tool answers at once.
    let mut plain = plain;
    let sync = plain.call_tool("long", json!({"ms": 10})).await;
    assert_eq!(sync["result"]["resultType"], "complete", "{sync}");
}

#[tokio::test]
async fn the_tasks_client_runs_long_calls_as_tasks_the_proxy_runs_for_a_legacy_server() {
    // The legacy fixture's `long` declares execution.taskSupport "optional" (2025-11-25)
    // and asks its question as an ordinary elicitation/create: the proxy runs the task.
    let h = Interop::start(conformance_fixture().await).await;
    let url = h.url();
    assert_tasks_settled(&tasks_client(&url, &[]).await);

    // A task belongs to its caller: another one's tasks/get finds nothing.
    let mut mine =
        StatelessClient::new(url.clone()).with_capabilities(json!({"extensions": {TASKS: {}}}));
    let created = mine.call_tool("long", json!({"ms": 5000})).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let get = json!({"taskId": id});
    let reply = modern_post(&mine, "tasks/get", get.clone(), &[], &[("mcp-name", &id)]).await;
    assert_eq!(
        reply.json()["result"]["status"],
        "working",
        "{}",
        reply.text
    );
    let other = [
        ("mcp-name", id.as_str()),
        ("authorization", "Bearer someone-else"),
    ];
    let reply = modern_post(&mine, "tasks/get", get.clone(), &[], &other).await;
    let error = error_of(&reply, 400, -32602);
    assert_eq!(error["data"]["key"], "taskId");
    // Nor does a made-up id.
    let made_up = json!({"taskId": "made-up"});
    let reply = modern_post(&mine, "tasks/get", made_up, &[], &[("mcp-name", "made-up")]).await;
    error_of(&reply, 400, -32602);
    let reply = modern_post(
        &mine,
        "tasks/cancel",
        get.clone(),
        &[],
        &[("mcp-name", &id)],
    )
    .await;
    assert_eq!(reply.json()["result"], json!({"resultType": "complete"}));
    let reply = modern_post(&mine, "tasks/get", get, &[], &[("mcp-name", &id)]).await;
    assert_eq!(
        reply.json()["result"]["status"],
        "cancelled",
        "{}",
        reply.text
    );
    // Without the extension the same tool answers as a plain call.
    let mut plain = StatelessClient::new(url);
    let sync = plain.call_tool("long", json!({"ms": 300})).await;
    assert_eq!(sync["result"]["resultType"], "complete", "{sync}");
    h.stop().await;
}

#[tokio::test]
async fn python_sdk2_server_is_dual_with_sessions_for_2025_and_sealed_request_state() {
    let server = sdk2_server(&[]).await;
    let url = server.url();
    assert_discover(&url, "sdk2-fixture").await;

    // 2025: initialize opens a session (the Python SDK keeps 2025 stateful).
    let reply = legacy_post(&url, &initialize(1, "2025-11-25"), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let session = reply.header("mcp-session-id").unwrap();
    assert_eq!(session.len(), 32, "{session}");
    assert_eq!(
        final_message(&reply)["result"]["protocolVersion"],
        "2025-11-25"
    );
    let reply = legacy_post(
        &url,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        &[],
    )
    .await;
    let error = error_of(&reply, 400, -32600);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("Missing session ID")
    );

    // 2026: ask through the SDK's resolver; the requestState is sealed (v1.<...>).
    let mut c = asking_client(&url);
    let first = c.call_tool("ask", json!({"question": "Colour?"})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let key = "__main__:ask_user";
    assert_eq!(result["inputRequests"][key]["method"], "elicitation/create");
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert!(state.starts_with("v1."), "{state}");
    let retry = |state: &str| {
        json!({
            "name": "ask",
            "arguments": {"question": "Colour?"},
            "inputResponses": {key: {"action": "accept", "content": {"answer": "blue"}}},
            "requestState": state,
        })
    };
    let reply = c.request("tools/call", retry(&state)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(text(&final_message(&reply)), "accept:blue");
    // A state this process did not seal is refused.
    let reply = c.request("tools/call", retry(&format!("{state}x"))).await;
    let error = error_of(&reply, 400, -32602);
    assert_eq!(error["data"]["reason"], "invalid_request_state");

    assert_sep2243(&url).await;
    let response = http_client()
        .get(&url)
        .header("mcp-protocol-version", MODERN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
}

#[tokio::test]
async fn python_sdk2_server_serves_every_client_era_over_http_and_stdio() {
    let server = sdk2_server(&[]).await;
    let url = server.url();
    let stdio = sdk2_stdio_command();
    let steps = ["echo", "ask", "sample", "slow", "forecast"];
    let (modern, legacy, auto, stdio_modern, stdio_legacy, stdio_auto) = tokio::join!(
        Ts2Client::http(&url, ClientMode::Modern)
            .steps(&steps)
            .run(),
        Ts2Client::http(&url, ClientMode::Legacy)
            .steps(&steps)
            .run(),
        Ts2Client::http(&url, ClientMode::Auto).steps(&steps).run(),
        Ts2Client::stdio(&stdio, ClientMode::Modern)
            .steps(&steps)
            .run(),
        Ts2Client::stdio(&stdio, ClientMode::Legacy)
            .steps(&steps)
            .run(),
        Ts2Client::stdio(&stdio, ClientMode::Auto)
            .steps(&steps)
            .run(),
    );
    for (run, era) in [
        (&modern, "modern"),
        (&legacy, "legacy"),
        (&auto, "modern"),
        (&stdio_modern, "modern"),
        (&stdio_legacy, "legacy"),
        (&stdio_auto, "modern"),
    ] {
        assert!(run.success, "{run}");
        assert_eq!(run.step("connect")["era"], era, "{run}");
    }
    assert!(legacy.step("connect")["sessionId"].is_string(), "{legacy}");

    for (mode, version) in [(None, MODERN), (Some("legacy"), "2025-11-25")] {
        let options = Sdk2Options {
            mode,
            answer: Some("Bob".to_owned()),
            ..Sdk2Options::default()
        };
        let mut python = Sdk2Client::connect_with(&url, &options).await;
        assert_eq!(python.protocol_version, version);
        assert_python_steps(&mut python, "accept:Bob", python_slow()).await;
        python.exit().await;
    }
}

#[tokio::test]
async fn fastmcp_over_http_sse_answers_on_the_stream_and_refuses_the_2026_probe() {
    let server = fastmcp_sse().await;
    let url = server.url();
    assert!(url.ends_with("/sse"), "{url}");
    let mut session = SseSession::open(&url).await;
    let hex = session
        .endpoint_event
        .strip_prefix("/messages/?session_id=")
        .unwrap_or_else(|| panic!("endpoint {:?}", session.endpoint_event))
        .to_owned();
    assert!(
        hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{hex}"
    );

    // Every POST is 202 "Accepted"; the answer comes on the stream.
    let reply = session.post(&initialize(1, "2024-11-05")).await;
    assert_eq!((reply.status, reply.text.as_str()), (202, "Accepted"));
    let seen = session.until_response(&json!(1), STREAM_WAIT).await;
    let result = &seen.last().unwrap()["result"];
    assert_eq!(result["protocolVersion"], "2024-11-05");
    assert_eq!(result["capabilities"]["resources"]["subscribe"], true);
    let reply = session
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(reply.status, 202);

    // The server's own request arrives on the stream; its answer is POSTed back.
    let reply = session
        .post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "ask", "arguments": {"question": "Name?"}}}))
        .await;
    assert_eq!(reply.status, 202);
    let asked = session.message(STREAM_WAIT).await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let reply = session
        .post(&json!({"jsonrpc": "2.0", "id": asked["id"],
                      "result": {"action": "accept", "content": {"answer": "Bob"}}}))
        .await;
    assert_eq!(reply.status, 202);
    let seen = session.until_response(&json!(2), STREAM_WAIT).await;
    assert_eq!(text(seen.last().unwrap()), "accept:Bob");

    // resources/subscribe, then a change: notifications/resources/updated on the stream.
    session
        .post(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe",
                      "params": {"uri": "fixture://counter"}}),
        )
        .await;
    session.until_response(&json!(3), STREAM_WAIT).await;
    session
        .post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                      "params": {"name": "bump", "arguments": {}}}))
        .await;
    let seen = session.until_response(&json!(4), STREAM_WAIT).await;
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/resources/updated"
                && m["params"]["uri"] == "fixture://counter"),
        "{seen:?}"
    );

    // What a 2026 (or 2025) client's first POST to the URL meets: 405 on /sse (a 4xx
    // with no modern error: the spec's cue to try GET and HTTP+SSE), 404 on /mcp.
    let http = http_client();
    let probe = StatelessClient::new(url.clone()).params(json!({}));
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": probe});
    let reply = post_json(
        &http,
        &url,
        &discover,
        &StatelessClient::headers("server/discover", &json!({})),
    )
    .await;
    assert_eq!(reply.status, 405, "{}", reply.text);
    let mcp = url.replace("/sse", "/mcp");
    assert_eq!(
        post_json(&http, &mcp, &discover, &HeaderMap::new())
            .await
            .status,
        404
    );
    // A session it does not know: 404.
    let unknown = session
        .endpoint
        .replace(&hex, "0123456789abcdef0123456789abcdef");
    assert_eq!(sse_post(&http, &unknown, &discover).await.status, 404);
}

#[tokio::test]
async fn http_sse_servers_work_for_clients_that_choose_the_sse_transport_only() {
    let fastmcp = fastmcp_sse().await;
    let everything = everything_sse().await;
    let (f, e) = (fastmcp.url(), everything.url());
    let steps = ["echo", "ask", "sample", "slow"];
    let (legacy, auto, modern, streamable, ev_auto) = tokio::join!(
        Ts2Client::sse(&f, ClientMode::Legacy).steps(&steps).run(),
        Ts2Client::sse(&f, ClientMode::Auto).steps(&steps).run(),
        Ts2Client::sse(&f, ClientMode::Modern).run(),
        Ts2Client::http(&f, ClientMode::Auto).run(),
        Ts2Client::sse(&e, ClientMode::Auto).steps(&["echo"]).run(),
    );
    for run in [&legacy, &auto, &ev_auto] {
        assert!(run.success, "{run}");
        assert_eq!(run.step("connect")["era"], "legacy", "{run}");
        assert_eq!(
            run.step("connect")["protocolVersion"],
            "2025-11-25",
            "{run}"
        );
    }
    // Pinned to 2026-07-28 there is no way in; and neither TypeScript client falls
    // back from Streamable HTTP to HTTP+SSE on its own (POST /sse: 405).
    assert_eq!(
        modern.step("connect")["code"],
        "ERA_NEGOTIATION_FAILED",
        "{modern}"
    );
    assert_eq!(
        streamable.step("connect")["data"]["status"],
        405,
        "{streamable}"
    );

    // The Python SDK 2.x client: `auto` over its SSE transport falls back to initialize.
    let answering = Sdk2Options {
        sse: true,
        answer: Some("Bob".to_owned()),
        ..Sdk2Options::default()
    };
    let mut python = Sdk2Client::connect_with(&f, &answering).await;
    assert_eq!(python.protocol_version, "2025-11-25");
    assert_python_steps(&mut python, "accept:Bob", python_slow()).await;
    python.exit().await;
    let mut python = Sdk2Client::connect_with(&e, &answering).await;
    assert_eq!(python.protocol_version, "2025-11-25");
    assert_eq!(
        python.text("echo", json!({"message": "hi"})).await,
        "Echo: hi"
    );
    python.exit().await;
    let refused = Sdk2Client::try_connect(&f, &Sdk2Options::default()).await;
    assert!(refused.is_err(), "Streamable HTTP connected to /sse");
}

#[tokio::test]
async fn everything_over_http_sse_names_its_endpoint_and_answers_on_the_stream() {
    let server = everything_sse().await;
    let url = server.url();
    let mut session = SseSession::open(&url).await;
    let uuid = session
        .endpoint_event
        .strip_prefix("/message?sessionId=")
        .unwrap_or_else(|| panic!("endpoint {:?}", session.endpoint_event))
        .to_owned();
    assert_eq!(uuid.len(), 36, "{uuid}");
    let reply = session.post(&initialize(1, "2025-11-25")).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let seen = session.until_response(&json!(1), STREAM_WAIT).await;
    assert_eq!(
        seen.last().unwrap()["result"]["protocolVersion"],
        "2025-11-25"
    );
    session
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    session
        .post(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "hi"}}}))
        .await;
    let seen = session.until_response(&json!(2), STREAM_WAIT).await;
    assert_eq!(text(seen.last().unwrap()), "Echo: hi");
    // The 2026 probe inside the session: -32601 on the stream.
    let discover = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover",
                          "params": StatelessClient::new(url.clone()).params(json!({}))});
    assert_eq!(session.post(&discover).await.status, 202);
    let seen = session.until_response(&json!(3), STREAM_WAIT).await;
    assert_eq!(seen.last().unwrap()["error"]["code"], -32601);
    // A POST to the URL itself: Express's 404, not 405.
    let reply = post_json(&http_client(), &url, &discover, &HeaderMap::new()).await;
    assert_eq!(reply.status, 404, "{}", reply.text);
}

#[tokio::test]
async fn legacy_streamable_servers_refuse_the_2026_probe_without_a_modern_error() {
    let fastmcp = fastmcp(&[]).await;
    let everything = everything().await;
    for (server, code, message) in [
        (&fastmcp, -32600, "Missing session ID"),
        (&everything, -32000, "Server not initialized"),
    ] {
        let url = server.url();
        let reply = StatelessClient::new(url.clone())
            .request("server/discover", json!({}))
            .await;
        // 400 with a JSON-RPC error that is none of -32020..-32022: a dual client's cue
        // to fall back to initialize (streamable-http.mdx, Backward Compatibility).
        let error = error_of(&reply, 400, code);
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{}: {error}",
            server.name
        );
        assert!(
            reply
                .header("content-type")
                .unwrap()
                .starts_with("application/json")
        );
    }
    let (f, e) = (fastmcp.url(), everything.url());
    let (f_modern, f_auto, f_legacy, e_modern, e_auto) = tokio::join!(
        Ts2Client::http(&f, ClientMode::Modern)
            .steps(&["echo"])
            .run(),
        Ts2Client::http(&f, ClientMode::Auto)
            .steps(&["echo", "slow"])
            .run(),
        Ts2Client::http(&f, ClientMode::Legacy)
            .steps(&["echo", "slow"])
            .run(),
        Ts2Client::http(&e, ClientMode::Modern)
            .steps(&["echo"])
            .run(),
        Ts2Client::http(&e, ClientMode::Auto).steps(&["echo"]).run(),
    );
    for run in [&f_modern, &e_modern] {
        assert_eq!(
            run.step("connect")["code"],
            "ERA_NEGOTIATION_FAILED",
            "{run}"
        );
    }
    for run in [&f_auto, &f_legacy, &e_auto] {
        assert!(run.success, "{run}");
        let connect = run.step("connect");
        assert_eq!(connect["era"], "legacy", "{run}");
        assert_eq!(connect["protocolVersion"], "2025-11-25", "{run}");
        assert!(connect["sessionId"].is_string(), "{run}");
    }

    for (url, echo, answer) in [
        (&f, json!({"msg": "hi"}), "hi"),
        (&e, json!({"message": "hi"}), "Echo: hi"),
    ] {
        let mut python = Sdk2Client::connect_with(url, &Sdk2Options::default()).await;
        assert_eq!(python.protocol_version, "2025-11-25", "{url}");
        assert_eq!(python.text("echo", echo).await, answer);
        python.exit().await;
    }
}
