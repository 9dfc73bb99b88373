//! The soak benchmark: `benches/soak.sh` (or `cargo bench --bench soak`). Not a timed
//! test: it shows that what many sessions leave behind is given back. See
//! `benches/README.md`.
//!
//! The proxy's release binary, under `ulimit -n 1024`, with `session.idle_ttl = 4s` and
//! `session.reap_interval = 1s` (the setup of the report that found expiring sessions
//! exhausting file descriptors), in front of the fast legacy upstream (its own process,
//! keeping its connections alive). Concurrent clients create 20,000 sessions, use each
//! (`tools/call`, JSON and an event stream), and delete half of them; the other half are
//! left to expire. Before and after: the proxy's open file descriptors and resident
//! memory, and the upstream's sessions opened, ended and still open (read from the
//! upstream); during: the most descriptors the proxy held.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark harness"
)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::http::{self, AsyncConn};
use support::procs;

const USAGE: &str = "\
usage: benches/soak.sh [OPTIONS]      (= cargo bench --bench soak -- [OPTIONS])

  --quick               2,000 sessions (a smoke run, not for quoting)
  --sessions N          sessions created in all (20000)
  --clients N           concurrent clients, one connection each (32)
  --help                this text
";

/// The report's setup.
const IDLE_TTL: &str = "4s";
const REAP_INTERVAL: &str = "1s";
const NOFILE: u64 = 1024;
/// `limits.upstream_idle_timeout`'s default. The client's pool checks for idle
/// connections once per timeout, so one is closed between one and two timeouts after its
/// last use.
const UPSTREAM_IDLE: Duration = Duration::from_secs(30);

struct Options {
    sessions: usize,
    clients: usize,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options {
            sessions: 20_000,
            clients: 32,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut number = |name: &str| -> usize {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{name} takes a number\n{USAGE}"))
            };
            match arg.as_str() {
                "--quick" => options.sessions = 2_000,
                "--sessions" => options.sessions = number("--sessions"),
                "--clients" => options.clients = number("--clients").max(1),
                "--help" | "-h" => {
                    print!("{USAGE}");
                    std::process::exit(0);
                }
                // `cargo bench` passes `--bench`.
                "--bench" => {}
                other => panic!("unknown option {other}\n{USAGE}"),
            }
        }
        options
    }
}

/// What is measured at one moment.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    fds: usize,
    rss: u64,
    opened: u64,
    ended: u64,
    live: u64,
}

fn main() {
    support::upstream::serve_if_asked();
    let options = Options::parse();
    let runtime = support::runtime();
    let (upstream_guard, upstream) = procs::spawn_upstream();
    let (proxy_guard, proxy) = procs::spawn_proxy_under(
        upstream,
        "proxy",
        &[
            ("MCP_PROXY_SESSION__IDLE_TTL", IDLE_TTL.to_owned()),
            ("MCP_PROXY_SESSION__REAP_INTERVAL", REAP_INTERVAL.to_owned()),
        ],
        Some(NOFILE),
    );
    let pid = proxy_guard.pid();
    let report = runtime.block_on(soak(&options, pid, proxy, upstream));
    drop(proxy_guard);
    drop(upstream_guard);
    println!("\n{report}");
    support::write_report("bench-soak.md", &report);
}

async fn soak(options: &Options, pid: u32, proxy: SocketAddr, upstream: SocketAddr) -> String {
    // A first session, so that what the proxy allocates once is in the baseline.
    let mut warm = AsyncConn::connect(proxy).await.unwrap();
    let (id, state) = create(&mut warm, proxy).await.unwrap();
    call(&mut warm, proxy, &id, &state, "ok").await.unwrap();
    delete(&mut warm, proxy, &id, &state).await.unwrap();
    drop(warm);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = snapshot(pid, upstream).await;
    eprintln!("soak: before {before:?}");

    let peak_fds = Arc::new(AtomicUsize::new(before.fds));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak_fds.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(open_fds(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let next = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..options.clients {
        let (next, failures, requests) = (next.clone(), failures.clone(), requests.clone());
        let total = options.sessions;
        clients.spawn(async move {
            let mut conn = AsyncConn::connect(proxy).await.unwrap();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let used = async {
                    let (id, state) = create(&mut conn, proxy).await?;
                    call(&mut conn, proxy, &id, &state, "ok").await?;
                    call(&mut conn, proxy, &id, &state, "sse").await?;
                    // Half are deleted, half left to expire.
                    if n % 2 == 0 {
                        delete(&mut conn, proxy, &id, &state).await?;
                        Ok::<u64, String>(4)
                    } else {
                        Ok(3)
                    }
                }
                .await;
                match used {
                    Ok(n) => {
                        requests.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if failures.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("soak: a session failed: {e}");
                        }
                    }
                }
            }
            conn
        });
    }
    let mut connections = Vec::new();
    while let Some(conn) = clients.join_next().await {
        connections.push(conn.unwrap());
    }
    let used_for = started.elapsed();
    eprintln!(
        "soak: {} sessions used in {used_for:.1?} ({} requests, {} failed)",
        options.sessions,
        requests.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed)
    );
    // Every session expired (idle TTL + a reap) and ended upstream.
    let expiry = Instant::now();
    let deadline = expiry + Duration::from_secs(120);
    let mut probe = AsyncConn::connect(proxy).await.unwrap();
    let mut ended_after = None;
    while Instant::now() < deadline {
        let active = gauge(&mut probe, proxy, "mcp_proxy_sessions_active").await;
        let stats = upstream_stats(upstream).await;
        if active == Some(0) && stats["live"].as_u64() == Some(0) {
            ended_after = Some(expiry.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = text(&mut probe, proxy, "/metrics").await;
    drop(probe);
    let at_end = snapshot(pid, upstream).await;
    eprintln!("soak: every session ended: {at_end:?}; now idle for the upstream idle timeout");
    // The clients leave; idle upstream connections close within two idle timeouts.
    drop(connections);
    let leaving = Instant::now();
    let mut settled_after = None;
    while leaving.elapsed() < UPSTREAM_IDLE * 2 + Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if open_fds(pid) <= before.fds {
            settled_after = Some(leaving.elapsed());
            break;
        }
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let after = snapshot(pid, upstream).await;
    eprintln!("soak: after {after:?}");

    render(
        options,
        &Run {
            before,
            at_end,
            after,
            peak_fds: peak_fds.load(Ordering::Relaxed),
            used_for,
            requests: requests.load(Ordering::Relaxed),
            failures: failures.load(Ordering::Relaxed),
            ended_after,
            settled_after,
            dropped: metric(&metrics, "mcp_proxy_upstream_endings_dropped_total"),
            expired: metric(&metrics, "mcp_proxy_sessions_expired_total"),
            deleted: metric(&metrics, "mcp_proxy_sessions_deleted_total"),
        },
    )
}

struct Run {
    before: Snapshot,
    at_end: Snapshot,
    after: Snapshot,
    peak_fds: usize,
    used_for: Duration,
    requests: u64,
    failures: u64,
    ended_after: Option<Duration>,
    settled_after: Option<Duration>,
    dropped: Option<i64>,
    expired: Option<i64>,
    deleted: Option<i64>,
}

fn render(options: &Options, run: &Run) -> String {
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0));
    let (b, e, a) = (run.before, run.at_end, run.after);
    let sessions = options.sessions as u64 + 1;
    let all_ended = a.opened == a.ended && a.live == 0;
    let mut out = String::new();
    out.push_str(&format!(
        "Soak: {} sessions (+1 warm-up), {} clients, half deleted and half left to expire \
         (session.idle_ttl = {IDLE_TTL}, session.reap_interval = {REAP_INTERVAL}), the proxy \
         under `ulimit -n {NOFILE}`; {} requests in {:.1} s, {} sessions failed.\n\n",
        options.sessions,
        options.clients,
        run.requests,
        run.used_for.as_secs_f64(),
        run.failures,
    ));
    out.push_str("| | before | every session ended | after the clients left |\n");
    out.push_str("| --- | ---: | ---: | ---: |\n");
    out.push_str(&format!(
        "| proxy: open file descriptors | {} | {} | {} (peak during the run: {}) |\n",
        b.fds, e.fds, a.fds, run.peak_fds
    ));
    out.push_str(&format!(
        "| proxy: resident memory | {} | {} | {} |\n",
        mib(b.rss),
        mib(e.rss),
        mib(a.rss)
    ));
    out.push_str(&format!(
        "| upstream: sessions opened / ended / open | {} / {} / {} | {} / {} / {} | {} / {} / {} |\n",
        b.opened, b.ended, b.live, e.opened, e.ended, e.live, a.opened, a.ended, a.live
    ));
    let show = |v: Option<i64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
    out.push_str(&format!(
        "\nEvery upstream session ended: **{}** ({} opened for {sessions} sessions, {} ended); \
         the proxy counted {} deleted, {} expired, {} endings given up; the last expired \
         session was ended upstream {} after the clients finished. File descriptors back to \
         the baseline ({}): {} (idle upstream connections close between one and two \
         `limits.upstream_idle_timeout`s, 30 s, after their last use).\n",
        if all_ended { "yes" } else { "NO" },
        a.opened,
        a.ended,
        show(run.deleted),
        show(run.expired),
        show(run.dropped),
        run.ended_after.map_or_else(
            || "not within 120 s".to_owned(),
            |d| format!("{:.1} s", d.as_secs_f64())
        ),
        b.fds,
        run.settled_after.map_or_else(
            || format!(
                "NO, {} after {} s",
                a.fds,
                (UPSTREAM_IDLE * 2).as_secs() + 5
            ),
            |d| format!("yes, {:.0} s after the clients left", d.as_secs_f64())
        ),
    ));
    out
}

async fn snapshot(pid: u32, upstream: SocketAddr) -> Snapshot {
    let stats = upstream_stats(upstream).await;
    Snapshot {
        fds: open_fds(pid),
        rss: procs::rss_bytes(pid),
        opened: stats["opened"].as_u64().unwrap_or(0),
        ended: stats["ended"].as_u64().unwrap_or(0),
        live: stats["live"].as_u64().unwrap_or(0),
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

async fn upstream_stats(upstream: SocketAddr) -> Value {
    let mut conn = AsyncConn::connect(upstream).await.unwrap();
    serde_json::from_str(&text(&mut conn, upstream, "/stats").await).unwrap_or(Value::Null)
}

async fn text(conn: &mut AsyncConn, addr: SocketAddr, path: &str) -> String {
    let mut request = Vec::new();
    http::get(&mut request, &addr.to_string(), path);
    let response = conn.roundtrip(&request).await.unwrap();
    String::from_utf8_lossy(&response.body).into_owned()
}

async fn gauge(conn: &mut AsyncConn, addr: SocketAddr, name: &str) -> Option<i64> {
    metric(&text(conn, addr, "/metrics").await, name)
}

fn metric(metrics: &str, name: &str) -> Option<i64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        value.trim().parse::<f64>().ok().map(|v| v as i64)
    })
}

async fn post(
    conn: &mut AsyncConn,
    addr: SocketAddr,
    body: &Value,
) -> Result<http::Response, String> {
    let mut request = Vec::new();
    http::post(
        &mut request,
        &addr.to_string(),
        "/mcp",
        &[],
        body.to_string().as_bytes(),
    );
    let response = conn.roundtrip(&request).await.map_err(|e| e.to_string())?;
    if response.status != 200 {
        return Err(response.describe());
    }
    Ok(response)
}

async fn create(conn: &mut AsyncConn, addr: SocketAddr) -> Result<(String, String), String> {
    let response = post(
        conn,
        addr,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
    )
    .await?;
    let body: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let session = &body["result"]["session"];
    match (session["sessionId"].as_str(), session["state"].as_str()) {
        (Some(id), Some(state)) => Ok((id.to_owned(), state.to_owned())),
        _ => Err(response.describe()),
    }
}

fn session_meta(id: &str, state: &str) -> Value {
    json!({"io.modelcontextprotocol/session": {"sessionId": id, "state": state}})
}

async fn call(
    conn: &mut AsyncConn,
    addr: SocketAddr,
    id: &str,
    state: &str,
    tool: &str,
) -> Result<(), String> {
    let response = post(
        conn,
        addr,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": session_meta(id, state)}}),
    )
    .await?;
    let body = String::from_utf8_lossy(&response.body);
    if body.contains("\"result\"") && body.contains(id) {
        Ok(())
    } else {
        Err(response.describe())
    }
}

async fn delete(
    conn: &mut AsyncConn,
    addr: SocketAddr,
    id: &str,
    state: &str,
) -> Result<(), String> {
    post(
        conn,
        addr,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "sessions/delete",
            "params": {"_meta": session_meta(id, state)}}),
    )
    .await
    .map(|_| ())
}
