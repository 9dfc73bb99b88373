//! The official MCP Inspector (`@modelcontextprotocol/inspector` 2.12.0, pinned in
//! `tests/interop/inspector/`) through its connection CLI, `mcpdo`, connected to the proxy
//! in front of the embedded demo server — what a new user does right after
//! `cargo run --release`:
//!
//!     mcpdo connect --transport http http://127.0.0.1:8080/mcp
//!
//! In its default legacy era the Inspector runs `initialize` and, because the demo
//! declares `logging`, `logging/setLevel` (a server that declares it and does not serve it
//! cannot be connected to at all); in its auto era it finds the 2026-07-28 protocol with
//! `server/discover` and asks for logs per request. Either way, tools, progress and log
//! notifications must work.
//!
//! Each test runs its own proxy and its own private `mcpdo` daemon (`mcpdo private`), with
//! a fresh `HOME` for the Inspector's catalog and secrets; the daemon is stopped at the
//! end, and killed (by its environment marker) if the test fails first.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::interop::{ensure_installed, tools_dir};
use common::procs::Marker;
use mcp_session_proxy::config::{Config, Target};
use mcp_session_proxy::{Running, start};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

/// One `mcpdo` command may take this long (node starting, a connect, a tool call).
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// The proxy as `cargo run --release` starts it (no upstream: the embedded demo server),
/// on a free loopback port.
async fn proxy_in_front_of_the_demo() -> Running {
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.shutdown_grace = Duration::from_secs(1);
    assert_eq!(config.upstream.target, Target::Embedded);
    start(config).await.unwrap()
}

/// The Inspector's CLI with a private daemon and a home of its own.
struct Mcpdo {
    home: PathBuf,
    env: Vec<(String, String)>,
    // Dropped last: kills whatever of this test's Inspector processes is left.
    _marker: Marker,
}

impl Mcpdo {
    async fn new(test: &str) -> Mcpdo {
        ensure_installed();
        let marker = Marker::new(test);
        let home = std::env::temp_dir().join(format!("mcp-session-proxy-inspector-{}", &*marker));
        std::fs::create_dir_all(&home).unwrap();
        let mut env = marker.env();
        env.push(("HOME".into(), home.display().to_string()));
        // No OS keychain on a test machine; say so instead of letting it probe.
        env.push(("MCP_INSPECTOR_SECRET_STORE".into(), "file".into()));
        let mut mcpdo = Mcpdo {
            home,
            env,
            _marker: marker,
        };
        // `mcpdo private` prints `export NAME='value'` lines for a daemon of our own.
        let exports = mcpdo.output(&["private"]).await;
        for line in exports.lines() {
            let Some((name, value)) = line
                .strip_prefix("export ")
                .and_then(|rest| rest.split_once('='))
            else {
                continue;
            };
            let value = value.trim_matches('\'').to_owned();
            mcpdo.env.push((name.to_owned(), value));
        }
        assert!(
            mcpdo
                .env
                .iter()
                .any(|(name, _)| name == "MCP_INSPECTOR_DAEMON_DIR"),
            "`mcpdo private` printed no daemon directory:\n{exports}"
        );
        mcpdo
    }

    fn command(&self, args: &[&str]) -> Command {
        let tools = tools_dir();
        let mut command = Command::new(tools.join("node22/node_modules/node/bin/node"));
        command
            .arg(tools.join(
                "inspector/node_modules/@modelcontextprotocol/inspector/clients/mcpdo/build/mcp-bin.js",
            ))
            .args(args)
            .current_dir(&self.home)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs `mcpdo args…`; its stdout, or a panic with everything it printed.
    async fn output(&self, args: &[&str]) -> String {
        let output = tokio::time::timeout(COMMAND_LIMIT, self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("mcpdo {args:?} took longer than {COMMAND_LIMIT:?}"))
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "mcpdo {args:?} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// Runs `mcpdo --format json args…`; its JSON answer.
    async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--format", "json"];
        all.extend_from_slice(args);
        let stdout = self.output(&all).await;
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("mcpdo {args:?} printed no JSON ({e}):\n{stdout}"))
    }

    /// `mcpdo --format json --connection <connection> args…`.
    async fn on(&self, connection: &str, args: &[&str]) -> Value {
        let mut all = vec!["--connection", connection];
        all.extend_from_slice(args);
        self.json(&all).await
    }

    /// `mcpdo logging/tail` on `connection`, running in the background.
    fn tail(&self, connection: &str) -> Tail {
        let mut child = self
            .command(&[
                "--format",
                "json",
                "--connection",
                connection,
                "logging/tail",
            ])
            .spawn()
            .unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let collected = text.clone();
        tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        Tail {
            _child: child,
            text,
        }
    }

    async fn stop(self) {
        self.output(&["daemon", "stop"]).await;
    }
}

impl Drop for Mcpdo {
    /// Removes the home and the private daemon's directory (its socket, lock and log).
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        if let Some((_, dir)) = self
            .env
            .iter()
            .find(|(name, _)| name == "MCP_INSPECTOR_DAEMON_DIR")
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What `mcpdo logging/tail` printed so far: one JSON entry per log notification.
struct Tail {
    _child: Child,
    text: Arc<Mutex<String>>,
}

impl Tail {
    /// The `data` of every complete `notifications/message` printed so far.
    fn logs(&self) -> Vec<(String, String)> {
        let text = self.text.lock().clone();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .filter(|entry| entry["message"]["method"] == "notifications/message")
            .map(|entry| {
                let params = &entry["message"]["params"];
                (
                    params["level"].as_str().unwrap_or("").to_owned(),
                    params["data"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// Waits until a log with `data` was printed; every log up to then.
    async fn until(&self, data: &str) -> Vec<(String, String)> {
        let deadline = tokio::time::Instant::now() + COMMAND_LIMIT;
        loop {
            let logs = self.logs();
            if logs.iter().any(|(_, d)| d == data) {
                return logs;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "logging/tail never printed {data:?}; it printed:\n{}",
                self.text.lock()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
}

fn tool_names(list: &Value) -> Vec<&str> {
    list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {list}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect()
}

const DEMO_TOOLS: [&str; 8] = [
    "echo",
    "counter",
    "slow",
    "sample",
    "sleep",
    "whoami",
    "announce",
    "change_tools",
];

/// What the Inspector connected to `url` shows in either era: the demo server by name,
/// its tools, an echo. The connection as `connections/show` tells it, and the echo.
async fn sees_the_demo(mcpdo: &Mcpdo, url: &str) -> (Value, Value) {
    let shown = mcpdo.on(url, &["connections/show"]).await;
    assert_eq!(
        shown["serverInfo"]["name"], "mcp-session-proxy-demo",
        "{shown}"
    );
    assert_eq!(
        tool_names(&mcpdo.on(url, &["tools/list"]).await),
        DEMO_TOOLS
    );
    let echoed = mcpdo.on(url, &["tools/call", "echo", "msg:=hi"]).await;
    assert_eq!(text_of(&echoed), "hi", "{echoed}");
    (shown, echoed)
}

#[tokio::test]
async fn the_inspector_connects_in_its_legacy_era_and_sets_the_log_level() {
    let proxy = proxy_in_front_of_the_demo().await;
    let url = proxy.url();
    let mcpdo = Mcpdo::new("inspector-legacy").await;

    // Exactly the command a user types (the default era is legacy).
    let connected = mcpdo.json(&["connect", "--transport", "http", &url]).await;
    assert_eq!(connected["protocolEra"], "legacy", "{connected}");
    let (shown, _) = sees_the_demo(&mcpdo, &url).await;
    assert_eq!(shown["protocolVersion"], "2025-11-25", "{shown}");
    assert!(shown["capabilities"]["logging"].is_object(), "{shown}");
    assert_eq!(
        text_of(&mcpdo.on(&url, &["tools/call", "counter"]).await),
        "1"
    );
    assert_eq!(
        text_of(&mcpdo.on(&url, &["tools/call", "counter"]).await),
        "2",
        "the Inspector's calls share one upstream session"
    );

    // The log level decides which log notifications reach the Inspector.
    let tail = mcpdo.tail(&url);
    // The tail is listening once a log of a one-step run arrives.
    let mut ready = false;
    for _ in 0..20 {
        mcpdo.on(&url, &["tools/call", "slow", "steps:=1"]).await;
        if tail.logs().iter().any(|(_, d)| d == "step 1 of 1") {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ready, "logging/tail printed nothing: {:?}", tail.logs());
    assert_eq!(
        mcpdo.on(&url, &["logging/setLevel", "warning"]).await,
        serde_json::json!({})
    );
    let quiet = mcpdo
        .on(&url, &["tools/call", "slow", "steps:=2", "interval_ms:=1"])
        .await;
    assert_eq!(text_of(&quiet), "done after 2 steps", "{quiet}");
    mcpdo.on(&url, &["logging/setLevel", "info"]).await;
    mcpdo
        .on(&url, &["tools/call", "slow", "steps:=3", "interval_ms:=1"])
        .await;
    let logs = tail.until("step 3 of 3").await;
    assert!(
        !logs.iter().any(|(_, data)| data.ends_with("of 2")),
        "info logs passed while the level was warning: {logs:?}"
    );
    let last_three: Vec<&(String, String)> = logs.iter().rev().take(3).rev().collect();
    assert_eq!(
        last_three,
        [
            &("info".to_owned(), "step 1 of 3".to_owned()),
            &("info".to_owned(), "step 2 of 3".to_owned()),
            &("info".to_owned(), "step 3 of 3".to_owned()),
        ]
    );

    let disconnected = mcpdo.json(&["disconnect", &url]).await;
    assert!(disconnected.is_object(), "{disconnected}");
    mcpdo.stop().await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_inspector_connects_in_its_auto_era_as_a_2026_client() {
    let proxy = proxy_in_front_of_the_demo().await;
    let url = proxy.url();
    let mcpdo = Mcpdo::new("inspector-auto").await;

    let connected = mcpdo
        .json(&["connect", "--era", "auto", "--transport", "http", &url])
        .await;
    assert_eq!(connected["protocolEra"], "modern", "{connected}");
    let (shown, echoed) = sees_the_demo(&mcpdo, &url).await;
    assert_eq!(shown["protocolVersion"], "2026-07-28", "{shown}");
    assert_eq!(
        shown["supportedVersions"],
        serde_json::json!(["2026-07-28"])
    );
    assert_eq!(
        echoed["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcp-session-proxy-demo",
        "{echoed}"
    );

    // Logs arrive per request (the Inspector asks for debug and up in each request's
    // _meta), on the request's own stream.
    let tail = mcpdo.tail(&url);
    let mut seen = false;
    for _ in 0..20 {
        let done = mcpdo
            .on(&url, &["tools/call", "slow", "steps:=2", "interval_ms:=1"])
            .await;
        assert_eq!(text_of(&done), "done after 2 steps", "{done}");
        if tail.logs().iter().any(|(_, d)| d == "step 2 of 2") {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen, "no log reached logging/tail: {:?}", tail.logs());

    mcpdo.stop().await;
    proxy.shutdown().await;
}
