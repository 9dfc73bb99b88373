//! Old clients pass through untouched: the official Python and TypeScript SDK
//! clients speak 2025-11-25 (initialize, Mcp-Session-Id, the GET stream, DELETE, server
//! requests) through the proxy to the real "everything" server.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::interop::{Interop, run_to_success, tools_dir};
use serde_json::Value;

/// Runs a client script against `url`; returns the JSON it printed.
async fn run(program: &std::path::Path, args: &[&str], env: &[(&str, String)]) -> Value {
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = run_to_success(command, Duration::from_secs(60), "the client").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// What both SDK clients must have seen through the proxy.
fn check(seen: &Value, echo: &str) {
    assert_eq!(seen["server"], "mcp-servers/everything");
    assert_eq!(seen["protocolVersion"], "2025-11-25");
    let session = seen["sessionId"].as_str().unwrap();
    assert!(
        !session.starts_with("mcps_"),
        "the upstream's own session id, untouched"
    );
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"echo") && tools.contains(&"trigger-long-running-operation"));
    assert_eq!(seen["echo"], echo);
    assert_eq!(
        seen["progress"].as_array().unwrap().len(),
        3,
        "progress arrived: {seen}"
    );
    assert!(seen["longRunning"].as_str().unwrap().contains("completed"));
    assert!(
        seen["sampling"].as_str().unwrap().contains("sampled:"),
        "the server's sampling request reached the client and its answer the server: {seen}"
    );
    assert!(seen["resources"].as_u64().unwrap() > 0);
    assert_eq!(seen["read"]["contents"], 1);
    assert!(seen["prompts"].as_array().unwrap().len() >= 2);
    assert!(seen["prompt"]["messages"].as_u64().unwrap() >= 1);
}

fn script(name: &str) -> String {
    format!(
        "{}/tests/interop/clients/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[tokio::test]
async fn the_python_sdk_client_works_through_the_proxy() {
    let h = Interop::everything().await;
    let python = tools_dir().join("venv/bin/python");
    let seen = run(&python, &[&script("python_client.py"), &h.url()], &[]).await;
    check(&seen, "Echo: from python");
    h.stop().await;
}

#[tokio::test]
async fn the_typescript_sdk_client_works_through_the_proxy() {
    let h = Interop::everything().await;
    let modules = tools_dir().join("sdk/node_modules");
    let seen = run(
        std::path::Path::new("node"),
        &[&script("ts_client.mjs"), &h.url()],
        &[("MCP_SDK_NODE_MODULES", modules.display().to_string())],
    )
    .await;
    check(&seen, "Echo: from typescript");
    h.stop().await;
}

/// 2025-11-25 resumption through the proxy: a client that loses a POST stream picks it up
/// again with GET and `Last-Event-ID`, and gets the rest of it, the response included.
#[tokio::test]
async fn a_dropped_stream_resumes_with_last_event_id() {
    use common::{EventReader, LegacyClient, post_streaming};
    use serde_json::json;

    let h = Interop::everything().await;
    let old = LegacyClient::connect(h.url(), "2025-11-25").await;
    let (http, headers) = (&old.http, old.headers());

    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 4},
        "_meta": {"progressToken": "resume-me"}}});
    let response = post_streaming(http, &h.url(), &call, &headers).await;
    // Read raw events until the first progress notification, noting its event id.
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let last_id = loop {
        use futures_util::StreamExt;
        let chunk = stream.next().await.unwrap().unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        let progress = buffer
            .split("\n\n")
            .find(|event| event.contains("notifications/progress"));
        if let Some(event) = progress {
            let id = event
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .unwrap()
                .trim()
                .to_owned();
            break id;
        }
    };
    drop(stream); // the connection is lost mid-call
    // The server finishes the call meanwhile, keeping its events for a resuming client.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let response = http
        .get(h.url())
        .headers(headers)
        .header("accept", "text/event-stream")
        .header("last-event-id", &last_id)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let mut progress = 0;
    let result = loop {
        let message = reader.next().await.unwrap();
        if message["method"] == "notifications/progress" {
            progress += 1;
        }
        if message["id"] == 7 {
            break message;
        }
    };
    assert!(progress >= 1, "the rest of the progress was replayed");
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("completed")
    );
    h.stop().await;
}
