//! The sidecar benchmark: `benches/sidecar.sh` (or `cargo bench --bench sidecar` once the
//! tools are installed), one run, one table. See `benches/README.md`.
//!
//! The same stdio server (the official "everything" server, `node … stdio`) behind two
//! gateways that give each HTTP session its own child process: the proxy's release binary
//! (data-layer sessions; with a warm pool of pre-initialized children, and without) and
//! supergateway (`--stateful` Streamable HTTP). Measured in the same run:
//! - opening a session: `sessions/create` (proxy) against `initialize` +
//!   `notifications/initialized` (supergateway), sequential, latency per session;
//! - `tools/call echo` in 8 sessions at once, closed loop: throughput, p50 / p99, and the
//!   gateway process's own CPU time per call (the children are the same on both sides).
//!
//! Every answer is checked (the echo's text; the session `_meta` through the proxy).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark harness"
)]

mod support;

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use support::http::{self, AsyncConn, BlockingConn, Response};
use support::procs;

const SESSION_KEY: &str = "io.modelcontextprotocol/session";
/// Children the warm pool keeps ready.
const WARM_POOL: usize = 4;
/// Sessions (one connection each) of the `tools/call` runs.
const SESSIONS: usize = 8;

struct Options {
    quick: bool,
}

impl Options {
    fn parse() -> Options {
        let mut quick = std::env::var("MCP_BENCH_QUICK").is_ok_and(|v| v == "1");
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "--quick" => quick = true,
                // `cargo bench` passes --bench to every bench binary.
                "--bench" => {}
                "--help" | "-h" => {
                    eprintln!(
                        "usage: benches/sidecar.sh [--quick]   (~1.5 minutes; --quick ~30 s, not for quoting)"
                    );
                    std::process::exit(0);
                }
                other => panic!("unknown option {other:?} (try --help)"),
            }
        }
        Options { quick }
    }

    fn warm_rounds(&self) -> usize {
        if self.quick { 2 } else { 5 }
    }

    fn cold_creates(&self) -> usize {
        if self.quick { 5 } else { 20 }
    }

    fn window(&self) -> Duration {
        Duration::from_secs(if self.quick { 3 } else { 10 })
    }

    fn rounds(&self) -> usize {
        if self.quick { 1 } else { 2 }
    }
}

/// Where the tools are (installed by `benches/sidecar.sh`).
struct Tools {
    everything: PathBuf,
    supergateway: PathBuf,
    preload: PathBuf,
}

impl Tools {
    fn find() -> Tools {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let tools = Tools {
            everything: root.join(
                "target/interop-tools/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            ),
            supergateway: root
                .join("target/bench-tools/supergateway/node_modules/supergateway/dist/index.js"),
            preload: root.join("tests/interop/everything-loopback.cjs"),
        };
        for path in [&tools.everything, &tools.supergateway, &tools.preload] {
            assert!(
                path.is_file(),
                "{} is missing: run benches/sidecar.sh (it installs the tools)",
                path.display()
            );
        }
        tools
    }

    fn stdio_server(&self) -> [String; 3] {
        [
            "node".to_owned(),
            self.everything.display().to_string(),
            "stdio".to_owned(),
        ]
    }
}

/// A gateway process in its own process group, stopped on drop (SIGTERM, then SIGKILL to
/// the whole group after a grace period).
struct Gateway {
    name: String,
    child: Child,
    addr: SocketAddr,
    path: &'static str,
}

impl Gateway {
    fn proxy(tools: &Tools, pool: usize) -> Gateway {
        let port = procs::free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let dir = procs::scratch(&format!("sidecar-proxy-{pool}"));
        let child = procs::proxy_command(&dir, None)
            .args(["--listen", &addr.to_string(), "--"])
            .args(tools.stdio_server())
            .env("MCP_PROXY_UPSTREAM__POOL_SIZE", pool.to_string())
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the proxy");
        let gateway = Gateway {
            name: format!("proxy, warm pool {pool}"),
            child,
            addr,
            path: "/mcp",
        };
        gateway.wait_ready();
        gateway
    }

    fn supergateway(tools: &Tools) -> Gateway {
        let stdio = tools.stdio_server().join(" ");
        let mut child = Command::new("node")
            .arg("--require")
            .arg(&tools.preload)
            .arg(&tools.supergateway)
            .args(["--stdio", &stdio])
            .args(["--outputTransport", "streamableHttp", "--stateful"])
            .args(["--port", "0", "--logLevel", "none"])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start supergateway");
        let stdout = child.stdout.take().expect("supergateway stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port: u16 = loop {
            let line = lines
                .next()
                .expect("supergateway exited before listening")
                .expect("supergateway stdout");
            if let Some(port) = line.trim().strip_prefix("READY ") {
                break port.parse().expect("READY <port>");
            }
        };
        // Keep draining its stdout so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let gateway = Gateway {
            name: "supergateway".to_owned(),
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            path: "/mcp",
        };
        gateway.wait_ready();
        gateway
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut conn) = BlockingConn::connect(self.addr) {
                let mut request = Vec::new();
                http::get(&mut request, &self.addr.to_string(), "/healthz");
                if conn.roundtrip(&request).is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} did not come up on {}",
                self.name,
                self.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn host(&self) -> String {
        self.addr.to_string()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The stdio children in the warm pool (the proxy's `/metrics`).
    fn pooled(&self) -> Option<usize> {
        let mut conn = BlockingConn::connect(self.addr).ok()?;
        let mut request = Vec::new();
        http::get(&mut request, &self.host(), "/metrics");
        let response = conn.roundtrip(&request).ok()?;
        String::from_utf8_lossy(&response.body)
            .lines()
            .find_map(|l| l.strip_prefix("mcp_proxy_pool_size{pool=\"stdio\"} "))
            .and_then(|n| n.trim().parse().ok())
    }

    fn wait_pool_full(&self, size: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.pooled() != Some(size) {
            assert!(Instant::now() < deadline, "the warm pool never refilled");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            return;
        };
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(8);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever is left of its group (supergateway leaves its children behind).
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON-RPC messages of a response (one JSON body, or the events of a stream).
fn messages(response: &Response) -> Vec<Value> {
    if response.is_sse() {
        String::from_utf8_lossy(&response.body)
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        serde_json::from_slice(&response.body).into_iter().collect()
    }
}

/// The response to request `id` in `response`.
fn answer(response: &Response, id: u64) -> Option<Value> {
    messages(response).into_iter().find(|m| m["id"] == id)
}

/// One session on one keep-alive connection.
struct Session {
    conn: AsyncConn,
    host: String,
    path: &'static str,
    kind: Kind,
    next_id: u64,
}

enum Kind {
    /// Data-layer session: id and latest state in `_meta`.
    Proxy { id: String, state: String },
    /// Legacy session: `Mcp-Session-Id` header.
    Legacy { id: String, version: String },
}

impl Session {
    /// Opens a session; returns it and how long opening took.
    async fn open(gateway: &Gateway) -> (Session, Duration) {
        let mut conn = AsyncConn::connect(gateway.addr).await.expect("connect");
        let host = gateway.host();
        let is_proxy = gateway.name.starts_with("proxy");
        let mut request = Vec::new();
        let started = Instant::now();
        let kind = if is_proxy {
            http::post(
                &mut request,
                &host,
                gateway.path,
                &[],
                br#"{"jsonrpc":"2.0","id":1,"method":"sessions/create"}"#,
            );
            let response = conn.roundtrip(&request).await.expect("sessions/create");
            let created = answer(&response, 1)
                .unwrap_or_else(|| panic!("sessions/create: {}", response.describe()));
            let session = &created["result"]["session"];
            Kind::Proxy {
                id: session["sessionId"].as_str().expect("sessionId").to_owned(),
                state: session["state"].as_str().expect("state").to_owned(),
            }
        } else {
            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "sidecar-bench", "version": "1"}}});
            http::post(
                &mut request,
                &host,
                gateway.path,
                &[],
                init.to_string().as_bytes(),
            );
            let response = conn.roundtrip(&request).await.expect("initialize");
            let result = answer(&response, 1)
                .unwrap_or_else(|| panic!("initialize: {}", response.describe()));
            let version = result["result"]["protocolVersion"]
                .as_str()
                .expect("protocolVersion")
                .to_owned();
            let id = response.session_id.clone().expect("Mcp-Session-Id");
            request.clear();
            http::post(
                &mut request,
                &host,
                gateway.path,
                &[("Mcp-Session-Id", &id), ("MCP-Protocol-Version", &version)],
                br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            );
            let response = conn.roundtrip(&request).await.expect("initialized");
            assert_eq!(response.status, 202, "initialized: {}", response.describe());
            Kind::Legacy { id, version }
        };
        let took = started.elapsed();
        let session = Session {
            conn,
            host,
            path: gateway.path,
            kind,
            next_id: 1,
        };
        (session, took)
    }

    /// One `tools/call echo`, checked; `Err` says what was wrong.
    async fn echo(&mut self, request: &mut Vec<u8>) -> Result<(), String> {
        self.next_id += 1;
        let id = self.next_id;
        request.clear();
        match &self.kind {
            Kind::Proxy { id: session, state } => {
                let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "echo", "arguments": {"message": "bench"},
                    "_meta": {SESSION_KEY: {"sessionId": session, "state": state}}}});
                http::post(
                    request,
                    &self.host,
                    self.path,
                    &[],
                    body.to_string().as_bytes(),
                );
            }
            Kind::Legacy {
                id: session,
                version,
            } => {
                let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "echo", "arguments": {"message": "bench"}}});
                http::post(
                    request,
                    &self.host,
                    self.path,
                    &[
                        ("Mcp-Session-Id", session),
                        ("MCP-Protocol-Version", version),
                    ],
                    body.to_string().as_bytes(),
                );
            }
        }
        let response = self
            .conn
            .roundtrip(request)
            .await
            .map_err(|e| e.to_string())?;
        let message = answer(&response, id).ok_or_else(|| response.describe())?;
        if message["result"]["content"][0]["text"] != "Echo: bench" {
            return Err(format!("wrong answer: {message}"));
        }
        if let Kind::Proxy { state, .. } = &mut self.kind {
            let stamped = message["result"]["_meta"][SESSION_KEY]["state"]
                .as_str()
                .ok_or_else(|| format!("no session _meta: {message}"))?;
            *state = stamped.to_owned();
        }
        Ok(())
    }

    /// Ends the session (and with it the child process).
    async fn close(mut self) {
        let mut request = Vec::new();
        match &self.kind {
            Kind::Proxy { id, state } => {
                let body = json!({"jsonrpc": "2.0", "id": 0, "method": "sessions/delete",
                    "params": {"_meta": {SESSION_KEY: {"sessionId": id, "state": state}}}});
                http::post(
                    &mut request,
                    &self.host,
                    self.path,
                    &[],
                    body.to_string().as_bytes(),
                );
            }
            Kind::Legacy { id, version } => {
                request.extend_from_slice(b"DELETE ");
                request.extend_from_slice(self.path.as_bytes());
                let _ = write!(
                    Wrap(&mut request),
                    " HTTP/1.1\r\nHost: {}\r\nMcp-Session-Id: {id}\r\nMCP-Protocol-Version: {version}\r\nContent-Length: 0\r\n\r\n",
                    self.host
                );
            }
        }
        let _ = self.conn.roundtrip(&request).await;
    }
}

/// `fmt::Write` into a byte buffer.
struct Wrap<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Wrap<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Latencies of opening sessions, in microseconds.
#[derive(Default)]
struct Opens(Vec<u64>);

impl Opens {
    fn add(&mut self, took: Duration) {
        self.0
            .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
    }

    fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted[rank] as f64 / 1000.0
    }

    fn mean(&self) -> f64 {
        self.0.iter().sum::<u64>() as f64 / self.0.len().max(1) as f64 / 1000.0
    }

    fn cell(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} (n={})",
            self.quantile(0.5),
            self.quantile(0.99),
            self.mean(),
            self.0.len()
        )
    }
}

/// `sessions/create` with the pool warm: bursts of `WARM_POOL` creates, each burst
/// started once the pool is full again (so every create finds a started child).
async fn warm_creates(gateway: &Gateway, rounds: usize) -> Opens {
    let mut opens = Opens::default();
    for round in 0..rounds {
        gateway.wait_pool_full(WARM_POOL);
        let mut sessions = Vec::new();
        for _ in 0..WARM_POOL {
            let (session, took) = Session::open(gateway).await;
            opens.add(took);
            sessions.push(session);
        }
        for session in sessions {
            session.close().await;
        }
        eprintln!(
            "[sidecar] {}: warm round {}/{rounds}",
            gateway.name,
            round + 1
        );
    }
    opens
}

/// Sessions opened one after another, each closed before the next.
async fn sequential_opens(gateway: &Gateway, count: usize) -> Opens {
    let mut opens = Opens::default();
    for _ in 0..count {
        let (session, took) = Session::open(gateway).await;
        opens.add(took);
        session.close().await;
    }
    eprintln!("[sidecar] {}: {count} sessions opened", gateway.name);
    opens
}

/// What a closed-loop window measured.
#[derive(Default)]
struct Calls {
    histogram: Option<Histogram<u64>>,
    calls: u64,
    errors: u64,
    first_error: Option<String>,
    seconds: f64,
    gateway_cpu_us: u64,
}

impl Calls {
    fn merge(&mut self, other: Calls) {
        match (&mut self.histogram, other.histogram) {
            (Some(mine), Some(theirs)) => mine.add(theirs).expect("same histogram bounds"),
            (mine @ None, theirs) => *mine = theirs,
            _ => {}
        }
        self.calls += other.calls;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.seconds += other.seconds;
        self.gateway_cpu_us += other.gateway_cpu_us;
    }

    fn rate(&self) -> f64 {
        self.calls as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }

    fn p(&self, q: f64) -> f64 {
        self.histogram
            .as_ref()
            .map_or(f64::NAN, |h| h.value_at_quantile(q) as f64 / 1000.0)
    }

    fn cpu_per_call(&self) -> f64 {
        self.gateway_cpu_us as f64 / self.calls.max(1) as f64
    }
}

/// `SESSIONS` sessions calling `echo` in a closed loop: a warm-up, then `window`.
async fn closed_loop(gateway: &Gateway, window: Duration) -> Calls {
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(Session::open(gateway).await.0);
    }
    let ticks = procs::clock_ticks();
    let warmup = Duration::from_secs(1);
    let start = Instant::now() + warmup;
    let end = start + window;
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|mut session| {
            tokio::spawn(async move {
                let mut histogram =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
                let mut out = Calls::default();
                let mut request = Vec::with_capacity(512);
                loop {
                    let began = Instant::now();
                    if began >= end {
                        break;
                    }
                    let outcome = session.echo(&mut request).await;
                    if began < start {
                        continue;
                    }
                    match outcome {
                        Ok(()) => {
                            out.calls += 1;
                            let micros =
                                u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                            let _ = histogram.record(micros.max(1));
                        }
                        Err(e) => {
                            out.errors += 1;
                            out.first_error.get_or_insert(e);
                        }
                    }
                }
                out.histogram = Some(histogram);
                session.close().await;
                out
            })
        })
        .collect();
    tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
    let pid = gateway.pid();
    let cpu_before = procs::cpu_micros(&[pid], ticks);
    tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
    let cpu_after = procs::cpu_micros(&[pid], ticks);
    let mut total = Calls::default();
    for task in tasks {
        total.merge(task.await.expect("a load task panicked"));
    }
    total.seconds = window.as_secs_f64();
    total.gateway_cpu_us = cpu_after.saturating_sub(cpu_before);
    eprintln!(
        "[sidecar] {}: {:.0} calls/s, p50 {:.2} ms, p99 {:.2} ms, errors {}",
        gateway.name,
        total.rate(),
        total.p(0.5),
        total.p(0.99),
        total.errors
    );
    total
}

/// Processes still running the stdio server (none may be left at the end).
fn stdio_children(tools: &Tools) -> usize {
    let needle = tools.everything.display().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .count()
}

fn supergateway_version() -> String {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/sidecar/package-lock.json");
    std::fs::read_to_string(lock)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|v| {
            v["packages"]["node_modules/supergateway"]["version"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "?".to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let options = Options::parse();
    let tools = Tools::find();
    let began = Instant::now();
    let leftover_before = stdio_children(&tools);

    eprintln!("[sidecar] opening sessions");
    let (warm, cold, sg_opens) = {
        let warm_proxy = Gateway::proxy(&tools, WARM_POOL);
        let warm = warm_creates(&warm_proxy, options.warm_rounds()).await;
        drop(warm_proxy);
        let cold_proxy = Gateway::proxy(&tools, 0);
        let cold = sequential_opens(&cold_proxy, options.cold_creates()).await;
        drop(cold_proxy);
        let sg = Gateway::supergateway(&tools);
        let sg_opens = sequential_opens(&sg, options.cold_creates()).await;
        drop(sg);
        (warm, cold, sg_opens)
    };

    eprintln!("[sidecar] tools/call, {SESSIONS} sessions, closed loop");
    let proxy = Gateway::proxy(&tools, SESSIONS);
    proxy.wait_pool_full(SESSIONS);
    let sg = Gateway::supergateway(&tools);
    let mut proxy_calls = Calls::default();
    let mut sg_calls = Calls::default();
    for round in 0..options.rounds() {
        // Interleaved, the order alternating, so drift hits both alike.
        if round % 2 == 0 {
            proxy_calls.merge(closed_loop(&proxy, options.window()).await);
            sg_calls.merge(closed_loop(&sg, options.window()).await);
        } else {
            sg_calls.merge(closed_loop(&sg, options.window()).await);
            proxy_calls.merge(closed_loop(&proxy, options.window()).await);
        }
    }
    drop(proxy);
    drop(sg);
    std::thread::sleep(Duration::from_millis(500));
    let leftover = stdio_children(&tools).saturating_sub(leftover_before);

    let table = render(
        &options,
        &Results {
            warm,
            cold,
            sg_opens,
            proxy_calls,
            sg_calls,
            leftover,
        },
        began.elapsed(),
    );
    println!("{table}");
    support::write_report("bench-sidecar.md", &table);
}

struct Results {
    warm: Opens,
    cold: Opens,
    sg_opens: Opens,
    proxy_calls: Calls,
    sg_calls: Calls,
    leftover: usize,
}

fn yes(met: bool) -> &'static str {
    if met { "yes" } else { "**NO**" }
}

fn render(options: &Options, r: &Results, took: Duration) -> String {
    let mut out = String::new();
    let sg_version = supergateway_version();
    let _ = writeln!(
        out,
        "### Sidecar: mcp-session-proxy vs supergateway {sg_version}\n"
    );
    let _ = writeln!(
        out,
        "| scenario | proxy, warm pool | proxy, no pool | supergateway | sidecar wins? |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | --- |");
    let warm_ratio = r.sg_opens.quantile(0.5) / r.warm.quantile(0.5);
    let cold_ratio = r.sg_opens.quantile(0.5) / r.cold.quantile(0.5);
    let _ = writeln!(
        out,
        "| opening a session, ms p50 / p99 / mean (proxy: `sessions/create`; supergateway: `initialize` + `initialized`) | {} | {} | {} | warm pool {warm_ratio:.0}× faster at p50: {}; without a pool {cold_ratio:.2}×: {} |",
        r.warm.cell(),
        r.cold.cell(),
        r.sg_opens.cell(),
        yes(warm_ratio > 1.0),
        yes(cold_ratio > 1.0),
    );
    let (p, s) = (&r.proxy_calls, &r.sg_calls);
    let _ = writeln!(
        out,
        "| `tools/call echo`, {SESSIONS} sessions, closed loop: calls/s | {:.0} | — | {:.0} | {:.2}×: {} |",
        p.rate(),
        s.rate(),
        p.rate() / s.rate(),
        yes(p.rate() > s.rate()),
    );
    let _ = writeln!(
        out,
        "| … latency p50 / p99 (ms) | {:.2} / {:.2} | — | {:.2} / {:.2} | {} |",
        p.p(0.5),
        p.p(0.99),
        s.p(0.5),
        s.p(0.99),
        yes(p.p(0.5) < s.p(0.5) && p.p(0.99) < s.p(0.99)),
    );
    let _ = writeln!(
        out,
        "| … the gateway process's CPU per call (µs; the children are the same) | {:.1} | — | {:.1} | {:.1}× less |",
        p.cpu_per_call(),
        s.cpu_per_call(),
        s.cpu_per_call() / p.cpu_per_call().max(f64::MIN_POSITIVE),
    );
    let _ = writeln!(out, "\nNotes:\n");
    let _ = writeln!(
        out,
        "- Both gateways run the same stdio server, the official \"everything\" server (`node …/server-everything/dist/index.js stdio`), one child process per session. The proxy: the release binary, `upstream.pool_size` {WARM_POOL} (warm) or 0, `workers = {}`. supergateway: `--stdio … --outputTransport streamableHttp --stateful`.",
        procs::proxy_workers()
    );
    let _ = writeln!(
        out,
        "- Opening: sequential, one keep-alive connection. Warm pool: bursts of {WARM_POOL} creates, each burst started once `/metrics` showed the pool full again, so every create took a started, initialized child ({} rounds). No pool, and supergateway: every session starts its process and initializes it; each session is ended before the next.",
        options.warm_rounds()
    );
    let _ = writeln!(
        out,
        "- `tools/call`: {SESSIONS} sessions, one connection each, closed loop, {} round(s) of {} s per gateway (1 s warm-up), interleaved; every answer checked (`Echo: bench`; through the proxy also the session `_meta`, whose latest `state` the next call sends back). Errors: proxy {}, supergateway {}{}.",
        options.rounds(),
        options.window().as_secs(),
        p.errors,
        s.errors,
        p.first_error
            .as_ref()
            .or(s.first_error.as_ref())
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "- After the run, stdio server processes left behind by either gateway: {}.",
        r.leftover
    );
    let _ = writeln!(
        out,
        "\nRun: `benches/sidecar.sh{}` at proxy {}, {} s in all, load generator, gateways and children on the same 2-core machine, loopback.",
        if options.quick { " --quick" } else { "" },
        git_head(),
        took.as_secs()
    );
    out
}

fn git_head() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "?".to_owned())
}
