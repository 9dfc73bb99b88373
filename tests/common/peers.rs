//! Real third-party MCP peers of every protocol era (tests/interop/README.md), started on
//! loopback for the tests that put the proxy between them, and for `tests/suite/interop_peers.rs`,
//! which records how each behaves when talked to directly.
//!
//! Servers ([`ServerProcess`], each on a free port, killed on drop):
//! - [`ts2_http`]: the TypeScript SDK 2.x, modern-only ([`Ts2Mode::Reject`]: 2026-07-28,
//!   `initialize` refused with -32022) or dual ([`Ts2Mode::Stateless`]: 2025 served too,
//!   statelessly); [`ts2_stdio_command`] the same over stdio.
//! - [`sdk2_server`]: the Python SDK 2.x, dual (2026-07-28 by header, 2025 with sessions);
//!   [`sdk2_stdio_command`] over stdio.
//! - [`fastmcp_sse`], [`everything_sse`]: HTTP+SSE (2024-11-05), `GET /sse` + `POST` to the
//!   endpoint it names.
//! - The legacy Streamable HTTP servers (2025-11-25, `initialize` + `Mcp-Session-Id`) are
//!   [`super::interop::everything`] and [`super::interop::fastmcp`].
//!
//! Clients, each run to its end: [`Ts2Client`] (the TypeScript SDK 2.x `Client` in modern,
//! legacy or auto mode, over Streamable HTTP, HTTP+SSE or stdio), [`tasks_client`] (the
//! tasks extension's requester) and [`sdk1_client`] (the Python and TypeScript SDK 1.x
//! clients, 2025-11-25). The Python SDK 2.x client is
//! [`super::interop::Sdk2Client`], driven one command at a time.
//!
//! It does not know the proxy: a test puts one in front of a server with
//! [`super::interop::Interop::start`].

use std::time::Duration;

use mcp_session_proxy::config::CommandSpec;
use serde_json::Value;
use tokio::process::Command;

use super::interop::{ServerProcess, ensure_installed, repo_root, tools_dir};

/// How long a client run may take in all (it gives up on its own a little earlier).
const CLIENT_LIMIT: Duration = Duration::from_secs(40);

/// The fixtures of the TypeScript SDK 2.x (`tests/interop/ts2/`).
fn ts2_script(name: &str) -> String {
    repo_root()
        .join("tests/interop/ts2")
        .join(name)
        .display()
        .to_string()
}

/// How the TypeScript SDK 2.x server meets 2025 traffic over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ts2Mode {
    /// `createMcpHandler(factory, {legacy: 'reject'})`: modern-only. `initialize` and any
    /// request without the 2026-07-28 envelope get 400 with -32022 and
    /// `data.supported: ["2026-07-28"]`.
    Reject,
    /// `createMcpHandler(factory, {legacy: 'stateless'})`: dual. 2025 requests are served
    /// one by one (no `Mcp-Session-Id`, answers as SSE, no server-to-client requests).
    Stateless,
}

impl Ts2Mode {
    fn arg(self) -> &'static str {
        match self {
            Ts2Mode::Reject => "reject",
            Ts2Mode::Stateless => "stateless",
        }
    }
}

/// `tests/interop/ts2/server.mjs --mode reject|stateless` on a free loopback port
/// (endpoint `/mcp`). Tools `echo`, `ask`, `sample`, `roots`, `slow`, `bump`, `long`
/// (tasks extension), `forecast` (SEP-2243 `x-mcp-header`); see the script's header.
pub async fn ts2_http(mode: Ts2Mode) -> ServerProcess {
    ts2_http_on(mode, 0).await
}

/// [`ts2_http`] on `port` (0: a free one) — e.g. where a killed server of another era
/// listened, as a server replaced in a migration would be.
pub async fn ts2_http_on(mode: Ts2Mode, port: u16) -> ServerProcess {
    let mut command = Command::new("node");
    command
        .env("INTEROP_TOOLS", tools_dir())
        .arg(ts2_script("server.mjs"))
        .args(["--mode", mode.arg(), "--port", &port.to_string()]);
    ServerProcess::spawn(
        match mode {
            Ts2Mode::Reject => "ts2 (reject)",
            Ts2Mode::Stateless => "ts2 (stateless)",
        },
        command,
    )
    .await
}

/// What the TypeScript SDK 2.x stdio server does with an `initialize` (`serveStdio`'s
/// `legacy` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdioLegacy {
    /// `initialize` pins the connection to 2025-11-25 (the SDK's default): dual.
    Serve,
    /// `initialize` is refused (-32022): modern-only.
    Reject,
}

/// The command of the TypeScript SDK 2.x server over stdio (`server.mjs --mode stdio
/// --legacy serve|reject`): the first message pins the era. `env` is empty; set it to a
/// test's `Marker::env()` to count the children.
pub fn ts2_stdio_command(legacy: StdioLegacy) -> CommandSpec {
    ensure_installed();
    CommandSpec {
        program: "node".to_owned(),
        args: vec![
            ts2_script("server.mjs"),
            "--mode".to_owned(),
            "stdio".to_owned(),
            "--legacy".to_owned(),
            match legacy {
                StdioLegacy::Serve => "serve",
                StdioLegacy::Reject => "reject",
            }
            .to_owned(),
        ],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
    }
}

/// `tests/interop/sdk2_server.py` (Python SDK 2.x, dual era) on a free loopback port with
/// extra `options` (`--stateless`, `--json-response`). Tools `echo`, `ask`, `sample`,
/// `slow`, `forecast`, `whoami`.
pub async fn sdk2_server(options: &[&str]) -> ServerProcess {
    let mut command = Command::new(tools_dir().join("venv2/bin/python"));
    command
        .arg(repo_root().join("tests/interop/sdk2_server.py"))
        .args(["--port", "0"])
        .args(options);
    ServerProcess::spawn("sdk2", command).await
}

/// The command of the Python SDK 2.x server over stdio (`sdk2_server.py --stdio`): the
/// first request pins the era. `env` is empty.
pub fn sdk2_stdio_command() -> CommandSpec {
    ensure_installed();
    CommandSpec {
        program: tools_dir().join("venv2/bin/python").display().to_string(),
        args: vec![
            repo_root()
                .join("tests/interop/sdk2_server.py")
                .display()
                .to_string(),
            "--stdio".to_owned(),
        ],
        env: Vec::new(),
        inherit_env: Vec::new(),
        cwd: None,
    }
}

/// `tests/interop/sse_server.py`: FastMCP (Python SDK 1.x) on the HTTP+SSE transport
/// (2024-11-05) on a free loopback port; [`ServerProcess::url`] is its `GET /sse`, the
/// endpoint event names `/messages/?session_id=<hex>`. Tools `echo`, `ask`, `sample`,
/// `slow`, `bump`, …; resource `fixture://counter` (subscribable).
pub async fn fastmcp_sse() -> ServerProcess {
    super::interop::sse_fixture_on(0).await
}

/// `@modelcontextprotocol/server-everything` in `sse` mode (HTTP+SSE, 2024-11-05, on the
/// TypeScript SDK 1.x) on a free loopback port; [`ServerProcess::url`] is its `GET /sse`,
/// the endpoint event names `/message?sessionId=<uuid>`. It never answers a POST naming
/// an unknown session (the request hangs): bound every request to it.
pub async fn everything_sse() -> ServerProcess {
    super::interop::everything_sse_on(0).await
}

/// How the TypeScript SDK 2.x client negotiates (`versionNegotiation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMode {
    /// Pinned to 2026-07-28: `server/discover` and the per-request envelope; no fallback.
    Modern,
    /// The 2025-11-25 `initialize` (the SDK's default).
    Legacy,
    /// `server/discover` first, `initialize` when the server is not modern.
    Auto,
}

impl ClientMode {
    fn arg(self) -> &'static str {
        match self {
            ClientMode::Modern => "modern",
            ClientMode::Legacy => "legacy",
            ClientMode::Auto => "auto",
        }
    }
}

/// What a client printed, one JSON object per line, and how it ended.
#[derive(Debug)]
pub struct ClientRun {
    /// Every line: `{"step": "connect" | <tool> | <execution>, "ok": bool, ...}`.
    pub steps: Vec<Value>,
    /// It exited 0: every step passed.
    pub success: bool,
    pub stderr: String,
}

impl ClientRun {
    /// The last line of `step` (for the tasks client: its `settled` line); panics with the
    /// whole run when there is none.
    pub fn step(&self, step: &str) -> &Value {
        self.steps
            .iter()
            .rev()
            .find(|line| line["step"] == step)
            .unwrap_or_else(|| panic!("no step {step:?} in {self}"))
    }

    /// The step ran and passed.
    pub fn passed(&self, step: &str) -> bool {
        self.steps
            .iter()
            .rev()
            .find(|line| line["step"] == step)
            .is_some_and(|line| line["ok"] == true)
    }

    /// The names of the steps that passed, in order (`connect` first when it did).
    pub fn passed_steps(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter(|line| line["ok"] == true)
            .filter_map(|line| line["step"].as_str().map(str::to_owned))
            .collect()
    }
}

impl std::fmt::Display for ClientRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "client run (success: {}):", self.success)?;
        for line in &self.steps {
            writeln!(f, "  {line}")?;
        }
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

/// Runs `command` to its end within [`CLIENT_LIMIT`] and reads its JSON lines.
async fn run_client(mut command: Command, what: &str) -> ClientRun {
    ensure_installed();
    command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(CLIENT_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {CLIENT_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("{what} could not be started: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let steps = stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{what} printed {line:?} ({e}); stderr:\n{stderr}"))
        })
        .collect();
    ClientRun {
        steps,
        success: output.status.success(),
        stderr,
    }
}

/// Where a [`Ts2Client`] connects.
#[derive(Debug, Clone)]
enum Ts2Target {
    Http(String),
    Sse(String),
    Stdio(CommandSpec),
}

/// The TypeScript SDK 2.x `Client` (`tests/interop/ts2/client.mjs`), run once: it connects,
/// lists the tools, runs its steps (default `echo`, `ask`, `slow`; also `sample`, `roots`,
/// `forecast`, `listen`) and exits; see the script's header for what each step checks.
#[derive(Debug, Clone)]
pub struct Ts2Client {
    target: Ts2Target,
    mode: ClientMode,
    steps: Vec<String>,
    headers: Vec<String>,
}

impl Ts2Client {
    fn new(target: Ts2Target, mode: ClientMode) -> Ts2Client {
        Ts2Client {
            target,
            mode,
            steps: vec!["echo".to_owned(), "ask".to_owned(), "slow".to_owned()],
            headers: Vec::new(),
        }
    }

    /// Over Streamable HTTP to `url`.
    pub fn http(url: &str, mode: ClientMode) -> Ts2Client {
        Ts2Client::new(Ts2Target::Http(url.to_owned()), mode)
    }

    /// Over HTTP+SSE (2024-11-05): `url` is the server's `GET /sse`.
    pub fn sse(url: &str, mode: ClientMode) -> Ts2Client {
        Ts2Client::new(Ts2Target::Sse(url.to_owned()), mode)
    }

    /// Over stdio to `command`, which the client starts (in `auto` mode the SDK probes
    /// with a short-lived second child first).
    pub fn stdio(command: &CommandSpec, mode: ClientMode) -> Ts2Client {
        Ts2Client::new(Ts2Target::Stdio(command.clone()), mode)
    }

    /// The steps to run after connecting, instead of `echo`, `ask`, `slow`.
    pub fn steps(mut self, steps: &[&str]) -> Ts2Client {
        self.steps = steps.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// An extra HTTP header (`"Name: value"`) on every request.
    pub fn header(mut self, header: &str) -> Ts2Client {
        self.headers.push(header.to_owned());
        self
    }

    pub async fn run(self) -> ClientRun {
        let mut command = Command::new("node");
        command
            .env("INTEROP_TOOLS", tools_dir())
            .arg(ts2_script("client.mjs"));
        match &self.target {
            Ts2Target::Http(url) => {
                command.arg(url);
            }
            Ts2Target::Sse(url) => {
                command.arg(url).args(["--transport", "sse"]);
            }
            Ts2Target::Stdio(_) => {
                command.arg("stdio");
            }
        }
        command
            .args(["--mode", self.mode.arg()])
            .args(["--steps", &self.steps.join(",")])
            .args(["--timeout-ms", "30000"]);
        for header in &self.headers {
            command.arg("--header").arg(header);
        }
        if let Ts2Target::Stdio(spec) = &self.target {
            command.arg("--").arg(&spec.program).args(&spec.args);
            command.envs(spec.env.iter().map(|(k, v)| (k, v)));
        }
        run_client(command, "the TypeScript SDK 2.x client").await
    }
}

/// [`Ts2Client`] over Streamable HTTP with its default steps (`echo`, `ask`, `slow`).
pub async fn ts2_client(url: &str, mode: ClientMode) -> ClientRun {
    Ts2Client::http(url, mode).run().await
}

/// The tasks extension's requester (`tests/interop/ts2/tasks-client.mjs`, ext-tasks on the
/// TypeScript SDK 2.x client) against `url` (a [`ts2_http`] server, or a proxy in front of
/// one), sending `headers` (`"Name: value"`) too. It drives the server's `long` tool as a
/// task four times; [`ClientRun::step`] of `completed`, `input` (the task asks for input
/// mid-way, answered with `tasks/update`), `cancelled` and `failed` is each one's settled
/// line (`ok`, `status`, `statuses` seen, `result` or `error`).
pub async fn tasks_client(url: &str, headers: &[&str]) -> ClientRun {
    let mut command = Command::new("node");
    command
        .env("INTEROP_TOOLS", tools_dir())
        .arg(ts2_script("tasks-client.mjs"))
        .arg(url);
    for header in headers {
        command.arg("--header").arg(header);
    }
    run_client(command, "the tasks extension client").await
}

/// Every execution of the tasks client settled as it should.
pub fn assert_tasks_settled(run: &ClientRun) {
    assert!(run.success, "{run}");
    let completed = run.step("completed");
    assert_eq!(completed["status"], "completed", "{run}");
    assert!(
        completed["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("long task finished"),
        "{run}"
    );
    let input = run.step("input");
    assert_eq!(
        input["statuses"],
        serde_json::json!(["working", "input_required", "working", "completed"]),
        "{run}"
    );
    assert!(
        run.steps.iter().any(|l| l["step"] == "input"
            && l["phase"] == "input"
            && l["delivery"] == "task-update"),
        "{run}"
    );
    assert_eq!(run.step("cancelled")["status"], "cancelled", "{run}");
    let failed = run.step("failed");
    assert_eq!(failed["status"], "failed", "{run}");
    assert_eq!(failed["error"]["code"], -32603, "{run}");
}

/// Which official 2025-11-25 SDK client [`sdk1_client`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk1 {
    /// The Python SDK 1.x (`mcp` 1.30, `tests/interop/clients/sdk1_steps.py`).
    Python,
    /// The TypeScript SDK 1.x (`@modelcontextprotocol/sdk` 1.32, `sdk1_steps.mjs`).
    TypeScript,
}

/// An official 2025-11-25 SDK client (`initialize`, `Mcp-Session-Id`, answering
/// `elicitation/create`) run once against `url`: it connects, lists the tools and runs
/// `steps` (`echo`, `ask`, `slow`, on the fixture's tools of those names), printing the
/// same lines as [`Ts2Client`].
pub async fn sdk1_client(sdk: Sdk1, url: &str, steps: &[&str]) -> ClientRun {
    let script = |name: &str| repo_root().join("tests/interop/clients").join(name);
    let mut command = match sdk {
        Sdk1::Python => {
            let mut command = Command::new(tools_dir().join("venv/bin/python"));
            command.arg(script("sdk1_steps.py"));
            command
        }
        Sdk1::TypeScript => {
            let mut command = Command::new("node");
            command
                .env("MCP_SDK_NODE_MODULES", tools_dir().join("sdk/node_modules"))
                .arg(script("sdk1_steps.mjs"));
            command
        }
    };
    command.arg(url).args(["--steps", &steps.join(",")]);
    let what = match sdk {
        Sdk1::Python => "the Python SDK 1.x client",
        Sdk1::TypeScript => "the TypeScript SDK 1.x client",
    };
    run_client(command, what).await
}

/// One event of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `message` when the event names none.
    pub event: String,
    pub data: String,
}

/// A raw client of the HTTP+SSE transport (2024-11-05): the `GET` stream, whose first
/// event names the endpoint, and POSTs to that endpoint, whose answers (and the server's
/// own requests) arrive on the stream. Every wait is bounded.
pub struct SseSession {
    /// The endpoint as the server named it (`/messages/?session_id=...`).
    pub endpoint_event: String,
    /// That endpoint, resolved against the stream's URL.
    pub endpoint: String,
    http: reqwest::Client,
    stream: reqwest::Response,
    buffer: String,
}

/// How long a POST to an HTTP+SSE endpoint may take (everything's never ends when the
/// session is unknown).
const SSE_POST_LIMIT: Duration = Duration::from_secs(10);

impl SseSession {
    /// `GET url` (must be 200 and an event stream whose first event is `endpoint`).
    pub async fn open(url: &str) -> SseSession {
        // No overall timeout on this client: the stream lives as long as the session.
        let http = super::http_builder().build().unwrap();
        let stream = tokio::time::timeout(
            Duration::from_secs(10),
            http.get(url).header("accept", "text/event-stream").send(),
        )
        .await
        .unwrap_or_else(|_| panic!("GET {url}: no answer within 10 s"))
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert_eq!(stream.status(), 200, "GET {url}");
        let content_type = stream
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "GET {url}: {content_type}"
        );
        let mut session = SseSession {
            endpoint_event: String::new(),
            endpoint: String::new(),
            http,
            stream,
            buffer: String::new(),
        };
        let first = session
            .next_event(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("GET {url}: no first event within 5 s"));
        assert_eq!(
            first.event, "endpoint",
            "the first event of {url}: {first:?}"
        );
        session.endpoint = reqwest::Url::parse(url)
            .and_then(|base| base.join(&first.data))
            .unwrap_or_else(|e| panic!("endpoint {:?}: {e}", first.data))
            .to_string();
        session.endpoint_event = first.data;
        session
    }

    /// The next event (comments skipped), or `None` when the stream ends or nothing
    /// comes `within`.
    pub async fn next_event(&mut self, within: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(event) = self.take_event() {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.chunk())
                .await
                .ok()?
                .ok()??;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            // FastMCP ends its lines with CRLF, everything with LF.
            self.buffer = self.buffer.replace("\r\n", "\n");
        }
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        loop {
            let end = self.buffer.find("\n\n")?;
            let block: String = self.buffer.drain(..end + 2).collect();
            let mut event = None;
            let mut data: Vec<&str> = Vec::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = Some(name.trim().to_owned());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.strip_prefix(' ').unwrap_or(d));
                }
            }
            if event.is_some() || !data.is_empty() {
                return Some(SseEvent {
                    event: event.unwrap_or_else(|| "message".to_owned()),
                    data: data.join("\n"),
                });
            }
        }
    }

    /// The next `message` event's JSON-RPC message, within `within`; panics otherwise.
    pub async fn message(&mut self, within: Duration) -> Value {
        loop {
            let event = self
                .next_event(within)
                .await
                .unwrap_or_else(|| panic!("no message on the stream within {within:?}"));
            if event.event == "message" {
                return serde_json::from_str(&event.data)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", event.data));
            }
        }
    }

    /// The messages on the stream up to the response whose id is `id` (that response
    /// last), within `within` in all.
    pub async fn until_response(&mut self, id: &Value, within: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self.message(left).await;
            let done = message.get("method").is_none() && message.get("id") == Some(id);
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    /// POSTs `body` to the endpoint (`Content-Type: application/json`); the answer.
    pub async fn post(&self, body: &Value) -> super::Reply {
        sse_post(&self.http, &self.endpoint, body).await
    }
}

/// POSTs `body` to `url` as an HTTP+SSE client does, bounded by [`SSE_POST_LIMIT`].
pub async fn sse_post(http: &reqwest::Client, url: &str, body: &Value) -> super::Reply {
    let request = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send();
    let response = tokio::time::timeout(SSE_POST_LIMIT, request)
        .await
        .unwrap_or_else(|_| panic!("POST {url}: no answer within {SSE_POST_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    super::Reply::read(response).await
}
