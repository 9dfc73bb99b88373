//! Real third-party MCP servers (tests/interop/README.md) as child processes on
//! loopback, and the real proxy in front of them.
//!
//! `tests/interop/setup.sh` runs once per test process; a failed install or a server that
//! does not come up makes the test fail with the script's or the server's stderr.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mcp_session_proxy::{Running, start};
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::config_for;

/// How long a server may take to say it is ready (see [`ServerProcess::spawn`]).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a server's output is kept for failure messages.
const LOG_TAIL: usize = 16 * 1024;

/// The repository root as `setup.sh` computes it (git top level, else the proxy's crate
/// directory, two above this harness's).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let manifest = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_path_buf());
    std::process::Command::new("git")
        .arg("-C")
        .arg(&manifest)
        .args(["rev-parse", "--show-toplevel"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .filter(|dir| dir.join("tests/interop/setup.sh").is_file())
        .unwrap_or(manifest)
}

/// Where `setup.sh` installs the servers.
pub fn tools_dir() -> PathBuf {
    repo_root().join("target/interop-tools")
}

/// Runs `tests/interop/setup.sh` the first time it is called in this test binary;
/// panics (every time) if it failed.
pub fn ensure_installed() {
    // The test command ran setup.sh once before every test process (.ci/test.sh).
    if std::env::var_os("MCP_PROXY_TEST_TOOLS_READY").is_some() {
        return;
    }
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    let outcome = SETUP.get_or_init(|| {
        let script = repo_root().join("tests/interop/setup.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed ({}); the interop tests need node >= 20 with npm and python3 >= 3.10 \
                 and the npm registry and PyPI (or a warm target/interop-tools).\n\
                 --- stdout ---\n{}\n--- stderr ---\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            ))
        }
    });
    if let Err(message) = outcome {
        panic!("interop setup failed: {message}");
    }
}

/// Runs `command` (a client, a suite) to its end within `limit`; panics with its stdout
/// and stderr unless it exits successfully. Returns its output.
pub async fn run_to_success(
    mut command: Command,
    limit: Duration,
    what: &str,
) -> std::process::Output {
    command.kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{what} could not be started: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The tail of a stream of output, kept for failure messages.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<String>>);

impl Log {
    fn push(&self, line: &str) {
        let mut log = self.0.lock();
        log.push_str(line);
        log.push('\n');
        if log.len() > 2 * LOG_TAIL {
            let mut cut = log.len() - LOG_TAIL;
            while !log.is_char_boundary(cut) {
                cut += 1;
            }
            log.drain(..cut);
        }
    }

    fn text(&self) -> String {
        self.0.lock().clone()
    }
}

/// Copies every line of `pipe` into `log` until the pipe closes (so it never fills up).
fn drain<R: AsyncRead + Unpin + Send + 'static>(
    mut lines: tokio::io::Lines<BufReader<R>>,
    log: Log,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            log.push(&line);
        }
    })
}

/// A third-party MCP server running as a child process; killed when dropped.
pub struct ServerProcess {
    pub name: &'static str,
    pub port: u16,
    /// The endpoint's path: `/mcp`, or `/sse` for an HTTP+SSE (2024-11-05) server.
    path: String,
    child: Child,
    stdout: Log,
    stderr: Log,
    drains: Vec<JoinHandle<()>>,
}

impl ServerProcess {
    /// Spawns `command` (stdout and stderr piped, killed on drop) and waits for the line
    /// on its stdout that says it listens: `READY <port>` (endpoint `/mcp`), `READY <url>`
    /// or a JSON object with a `url` (the endpoint is that URL's path).
    pub async fn spawn(name: &'static str, command: Command) -> ServerProcess {
        ServerProcess::spawn_at(name, command, "/mcp").await
    }

    /// [`ServerProcess::spawn`] for a server whose `READY <port>` line names no path:
    /// its endpoint is `path` (e.g. `/sse`).
    pub async fn spawn_at(name: &'static str, mut command: Command, path: &str) -> ServerProcess {
        ensure_installed();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {name} server ({command:?}): {e}"));
        let stderr = Log::default();
        let stderr_drain = drain(
            BufReader::new(child.stderr.take().expect("stderr is piped")).lines(),
            stderr.clone(),
        );
        let stdout = Log::default();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();

        let ready = tokio::time::timeout(STARTUP_TIMEOUT, async {
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        stdout.push(&line);
                        if let Some(ready) = ready_line(&line) {
                            break ready;
                        }
                    }
                    Ok(None) => break Err("stdout closed before READY".to_owned()),
                    Err(e) => break Err(format!("reading stdout: {e}")),
                }
            }
        })
        .await
        .unwrap_or_else(|_| Err(format!("no READY line within {STARTUP_TIMEOUT:?}")));

        let (port, path) = match ready {
            Ok((port, named)) if port != 0 => (port, named.unwrap_or_else(|| path.to_owned())),
            failure => {
                let why = failure
                    .err()
                    .unwrap_or_else(|| "it reported port 0".to_owned());
                let _ = child.start_kill();
                let exited = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let status = match exited {
                    Ok(Ok(status)) => status.to_string(),
                    Ok(Err(e)) => format!("unknown ({e})"),
                    Err(_) => "still running after kill".to_owned(),
                };
                let _ = tokio::time::timeout(Duration::from_secs(2), stderr_drain).await;
                panic!(
                    "the {name} server did not start: {why} ({status})\ncommand: {command:?}\n\
                     --- stdout ---\n{}\n--- stderr ---\n{}",
                    stdout.text(),
                    stderr.text(),
                );
            }
        };
        let stdout_drain = drain(lines, stdout.clone());
        ServerProcess {
            name,
            port,
            path,
            child,
            stdout,
            stderr,
            drains: vec![stdout_drain, stderr_drain],
        }
    }

    /// The MCP endpoint, `http://127.0.0.1:<port>/mcp` (an HTTP+SSE server's: its `GET`
    /// stream, `http://127.0.0.1:<port>/sse`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.path)
    }

    /// Kills the server and waits until it is gone (its port is free again).
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    /// What the server printed so far (the last few KiB of each stream).
    pub fn output(&self) -> String {
        format!(
            "--- {} stdout ---\n{}\n--- {} stderr ---\n{}",
            self.name,
            self.stdout.text(),
            self.name,
            self.stderr.text()
        )
    }
}

/// What a server's line on stdout says about where it listens: `READY <port>`, `READY
/// <url>` or `{"url": "<url>", ...}`; `None` for any other line. A URL gives the path too.
fn ready_line(line: &str) -> Option<Result<(u16, Option<String>), String>> {
    let line = line.trim();
    let url = if let Some(rest) = line.strip_prefix("READY ") {
        let rest = rest.trim();
        if let Ok(port) = rest.parse::<u16>() {
            return Some(Ok((port, None)));
        }
        rest.to_owned()
    } else if line.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        value.get("url")?.as_str()?.to_owned()
    } else {
        return None;
    };
    Some(match reqwest::Url::parse(&url) {
        Ok(parsed) => parsed
            .port()
            .map(|port| (port, Some(parsed.path().to_owned())))
            .ok_or_else(|| format!("no port in {url:?}")),
        Err(e) => Err(format!("bad READY line {line:?}: {e}")),
    })
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // kill_on_drop kills the child with the `Child`; this just makes it explicit.
        let _ = self.child.start_kill();
        for drain in &self.drains {
            drain.abort();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.output());
        }
    }
}

/// The entry point of `@modelcontextprotocol/server-everything` (`node <it> <mode>`).
pub fn everything_script() -> PathBuf {
    tools_dir().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// The FastMCP fixture, run by the venv's python.
pub fn fastmcp_script() -> PathBuf {
    repo_root().join("tests/interop/fastmcp_server.py")
}

/// `@modelcontextprotocol/server-everything` in streamableHttp mode on a free loopback port.
pub async fn everything() -> ServerProcess {
    everything_on(0).await
}

/// The everything server on `port` (0: a free one) — e.g. started again where a killed
/// one listened, as a restarted server would be.
pub async fn everything_on(port: u16) -> ServerProcess {
    ServerProcess::spawn("everything", everything_command(port, "streamableHttp")).await
}

/// The everything server in its `sse` mode (the 2024-11-05 HTTP+SSE transport: `GET
/// /sse`, `POST /message?sessionId=…`) on `port` (0: a free one).
pub async fn everything_sse_on(port: u16) -> ServerProcess {
    ServerProcess::spawn_at("everything (sse)", everything_command(port, "sse"), "/sse").await
}

fn everything_command(port: u16, mode: &str) -> Command {
    let mut command = Command::new("node");
    command
        .env("PORT", port.to_string())
        .env("GZIP_ALLOWED_DOMAINS", "127.0.0.1")
        .arg("--require")
        .arg(repo_root().join("tests/interop/everything-loopback.cjs"))
        .arg(everything_script())
        .arg(mode);
    command
}

/// The HTTP+SSE fixture (`tests/interop/sse_server.py`: FastMCP over the 2024-11-05
/// transport, `GET /sse`, `POST /messages/?session_id=…`) on `port` (0: a free one).
pub async fn sse_fixture_on(port: u16) -> ServerProcess {
    let mut command = Command::new(tools_dir().join("venv/bin/python"));
    command
        .arg(repo_root().join("tests/interop/sse_server.py"))
        .arg(port.to_string());
    ServerProcess::spawn_at("sse fixture", command, "/sse").await
}

/// The FastMCP fixture (`tests/interop/fastmcp_server.py`) on a free loopback port, with
/// extra options such as `--json-response` or `--session-idle-timeout=1`.
pub async fn fastmcp(options: &[&str]) -> ServerProcess {
    fastmcp_on(0, options).await
}

/// The FastMCP fixture on `port` (0: a free one).
pub async fn fastmcp_on(port: u16, options: &[&str]) -> ServerProcess {
    let mut command = Command::new(tools_dir().join("venv/bin/python"));
    command
        .arg(fastmcp_script())
        .arg(port.to_string())
        .args(options);
    ServerProcess::spawn("fastmcp", command).await
}

/// The conformance suite's fixture (`tests/interop/conformance/fixture-server.mjs`, a
/// 2025-11-25 server on the TypeScript SDK) on a free loopback port.
pub async fn conformance_fixture() -> ServerProcess {
    conformance_fixture_with(&[]).await
}

/// The conformance fixture with extra arguments (e.g. `--input-key-hints`).
pub async fn conformance_fixture_with(args: &[&str]) -> ServerProcess {
    let root = repo_root();
    let mut command = Command::new("node");
    command
        .env("INTEROP_TOOLS", tools_dir())
        .arg(root.join("tests/interop/conformance/fixture-server.mjs"))
        .arg("0")
        .args(args);
    ServerProcess::spawn("conformance fixture", command).await
}

/// The real proxy in front of a real third-party server.
pub struct Interop {
    pub proxy: Running,
    pub server: ServerProcess,
}

impl Interop {
    pub async fn start(server: ServerProcess) -> Interop {
        Interop::start_with(server, |_| {}).await
    }

    /// The proxy, configured by `configure`, in front of `server`.
    pub async fn start_with(
        server: ServerProcess,
        configure: impl FnOnce(&mut mcp_session_proxy::config::Config),
    ) -> Interop {
        let mut config = config_for(&server.url());
        configure(&mut config);
        let proxy = start(config)
            .await
            .unwrap_or_else(|e| panic!("cannot start the proxy in front of {}: {e}", server.url()));
        Interop { proxy, server }
    }

    pub async fn everything() -> Interop {
        Interop::start(everything().await).await
    }

    pub async fn fastmcp(options: &[&str]) -> Interop {
        Interop::start(fastmcp(options).await).await
    }

    /// The proxy's client-facing endpoint.
    pub fn url(&self) -> String {
        self.proxy.url()
    }

    pub fn client(&self) -> super::SessionClient {
        super::SessionClient::new(self.url())
    }

    /// Shuts the proxy down (it ends its sessions upstream), then stops the server.
    pub async fn stop(self) {
        self.proxy.shutdown().await;
        drop(self.server);
    }
}

/// A restarted upstream forgets every session. In front of `server`, one proxy with
/// `on_session_lost = "fail"` and one with `"reinitialize"` each hold a session; the
/// server is killed and started again on its port by `restart`. Then the first proxy's
/// session client gets -32043 when it opens its GET stream, and again at its next call
/// (`call`: a `tools/call` of the server's) and after (the session was ended, not
/// renewed); `sessions_lost_total` counts it once; the second proxy's carries on in a new upstream session, `tools/list` retried and
/// `call` working. Returns the server as restarted.
pub async fn a_restart_loses_sessions<F, Fut>(
    server: ServerProcess,
    call: serde_json::Value,
    restart: F,
) -> ServerProcess
where
    F: FnOnce(u16) -> Fut,
    Fut: std::future::Future<Output = ServerProcess>,
{
    use mcp_session_proxy::config::OnSessionLost;
    use serde_json::json;

    use super::assert::{assert_session_not_found, check_session_meta};
    use super::{SessionClient, final_message, gauge};

    let failing = start(config_for(&server.url())).await.unwrap();
    let mut reinitializing = config_for(&server.url());
    reinitializing.upstream.on_session_lost = OnSessionLost::Reinitialize;
    let reinitializing = start(reinitializing).await.unwrap();

    let mut lost = SessionClient::new(failing.url());
    lost.create().await;
    let mut kept = SessionClient::new(reinitializing.url());
    kept.create().await;
    for c in [&mut lost, &mut kept] {
        let reply = c.request("tools/call", call.clone()).await;
        assert_eq!(reply.status, 200, "before the restart: {}", reply.text);
        check_session_meta(&final_message(&reply), c.session_id());
    }

    let mut server = server;
    let port = server.port;
    server.kill().await;
    let server = restart(port).await;

    // The session's GET stream is how the loss shows first (the upstream's answer to a
    // GET of a session it does not know is read the same way as to a POST).
    let lost_id = lost.session_id().to_owned();
    let response = super::http_client()
        .get(failing.url())
        .headers(lost.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let reply = super::Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        text: response.text().await.unwrap(),
    };
    assert_session_not_found(&reply, &lost_id);
    let reply = lost.request("tools/call", call.clone()).await;
    assert_session_not_found(&reply, &lost_id);
    assert_eq!(
        gauge(&failing, "mcp_proxy_sessions_lost_total").await,
        Some(1),
        "the lost session is counted"
    );
    assert_eq!(failing.live_sessions(), 0, "the lost session is ended");
    let reply = lost.request("tools/list", json!({})).await;
    assert_session_not_found(&reply, &lost_id);

    let reply = kept.request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "tools/list is retried: {}", reply.text);
    check_session_meta(&final_message(&reply), kept.session_id());
    let reply = kept.request("tools/call", call).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    check_session_meta(&final_message(&reply), kept.session_id());
    assert_eq!(
        gauge(&reinitializing, "mcp_proxy_sessions_reinitialized_total").await,
        Some(1)
    );
    assert_eq!(
        gauge(&reinitializing, "mcp_proxy_sessions_lost_total").await,
        Some(0)
    );

    failing.shutdown().await;
    reinitializing.shutdown().await;
    server
}

/// How long one command of an SDK 2.x client may take (a connect includes starting Python
/// and importing the SDK).
const SDK2_TIMEOUT: Duration = Duration::from_secs(30);

/// A real MCP 2026-07-28 client: the official Python SDK 2.x (`Client(url,
/// mode="auto")`, `tests/interop/clients/sdk2_client.py`) in its own process, driven one
/// command at a time so that a test decides exactly how several of them interleave.
pub struct Sdk2Client {
    child: Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: Log,
    drain: JoinHandle<()>,
    /// What the client negotiated (`2026-07-28` through the proxy).
    pub protocol_version: String,
}

/// How an [`Sdk2Client`] connects.
#[derive(Debug, Clone, Default)]
pub struct Sdk2Options {
    /// `Client(mode=...)`: `None` is the SDK's default, `"auto"` (server/discover, then
    /// `initialize` on a legacy server); `"legacy"`; `"2026-07-28"` (no probe).
    pub mode: Option<&'static str>,
    /// The 2024-11-05 HTTP+SSE transport (the URL is the server's `GET /sse`) instead of
    /// Streamable HTTP.
    pub sse: bool,
    /// Answer the server's questions (elicitation accepted with every property set to
    /// this, sampling answered `sampled:<this>`); `None`: the client declares neither
    /// capability.
    pub answer: Option<String>,
    /// Extra HTTP headers (`"Name: value"`) on every request.
    pub headers: Vec<String>,
}

impl Sdk2Client {
    /// Starts a client of `url` sending `headers` (`"Name: value"`) with every request,
    /// and waits until it has connected.
    pub async fn connect(url: &str, headers: &[&str]) -> Sdk2Client {
        let options = Sdk2Options {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            ..Sdk2Options::default()
        };
        Sdk2Client::connect_with(url, &options).await
    }

    /// Starts a client of `url` as `options` say and waits until it has connected.
    pub async fn connect_with(url: &str, options: &Sdk2Options) -> Sdk2Client {
        Sdk2Client::try_connect(url, options)
            .await
            .unwrap_or_else(|e| panic!("the SDK 2.x client could not connect to {url}: {e}"))
    }

    /// Starts a client of `url`; `Err` with what the SDK raised (and the client's stderr)
    /// when it cannot connect.
    pub async fn try_connect(url: &str, options: &Sdk2Options) -> Result<Sdk2Client, String> {
        ensure_installed();
        let mut command = Command::new(tools_dir().join("venv2/bin/python"));
        command
            .arg(repo_root().join("tests/interop/clients/sdk2_client.py"))
            .arg(url);
        for header in &options.headers {
            command.arg("--header").arg(header);
        }
        if let Some(mode) = options.mode {
            command.arg("--mode").arg(mode);
        }
        if options.sse {
            command.arg("--transport").arg("sse");
        }
        if let Some(answer) = &options.answer {
            command.arg("--answer").arg(answer);
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the SDK 2.x client: {e}"));
        let stderr = Log::default();
        let drain = self::drain(
            BufReader::new(child.stderr.take().expect("stderr is piped")).lines(),
            stderr.clone(),
        );
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        let mut client = Sdk2Client {
            child,
            stdin,
            stdout,
            stderr,
            drain,
            protocol_version: String::new(),
        };
        let ready = client.read().await;
        if ready["ready"] != true {
            return Err(format!("{ready}; its stderr:\n{}", client.stderr.text()));
        }
        client.protocol_version = ready["protocolVersion"].as_str().unwrap_or("").to_owned();
        Ok(client)
    }

    async fn read(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(SDK2_TIMEOUT, self.stdout.next_line()).await;
        match line {
            Ok(Ok(Some(line))) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the SDK 2.x client wrote {line:?} ({e})")),
            other => panic!(
                "the SDK 2.x client gave no answer ({other:?}); its stderr:\n{}",
                self.stderr.text()
            ),
        }
    }

    async fn command(&mut self, command: serde_json::Value) -> serde_json::Value {
        use tokio::io::AsyncWriteExt;
        let mut line = command.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("the SDK 2.x client is gone ({e}): {}", self.stderr.text()));
        self.read().await
    }

    /// `client.call_tool(name, arguments)`: `{isError, text, structured, elicited,
    /// sampled}`, or `{error}` when the SDK raised.
    pub async fn call(&mut self, name: &str, arguments: serde_json::Value) -> serde_json::Value {
        self.command(serde_json::json!({"op": "call", "name": name, "arguments": arguments}))
            .await
    }

    /// `client.call_tool(name, arguments, progress_callback=...)`: as [`Sdk2Client::call`],
    /// with the progress notifications received (`progress`: `[[progress, total,
    /// message], ...]`) and how many questions the server asked (`elicited`, `sampled`).
    pub async fn call_with_progress(
        &mut self,
        name: &str,
        arguments: serde_json::Value,
    ) -> serde_json::Value {
        self.command(serde_json::json!({
            "op": "call", "name": name, "arguments": arguments, "progress": true
        }))
        .await
    }

    /// A call that must succeed; its text.
    pub async fn text(&mut self, name: &str, arguments: serde_json::Value) -> String {
        let answer = self.call(name, arguments).await;
        assert_eq!(answer["isError"], false, "{name}: {answer}");
        answer["text"].as_str().unwrap_or_default().to_owned()
    }

    /// `client.list_tools()`: each tool's name, argument names and required ones.
    pub async fn list(&mut self) -> serde_json::Value {
        self.command(serde_json::json!({"op": "list"})).await
    }

    /// Ends the client (it closes its transport) and waits for it.
    pub async fn exit(mut self) {
        use tokio::io::AsyncWriteExt;
        let _ = self.stdin.write_all(b"{\"op\":\"exit\"}\n").await;
        let status = tokio::time::timeout(SDK2_TIMEOUT, self.child.wait()).await;
        assert!(
            matches!(status, Ok(Ok(s)) if s.success()),
            "the SDK 2.x client did not exit cleanly ({status:?}): {}",
            self.stderr.text()
        );
    }
}

impl Drop for Sdk2Client {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        self.drain.abort();
        if std::thread::panicking() {
            eprintln!("--- SDK 2.x client stderr ---\n{}", self.stderr.text());
        }
    }
}
