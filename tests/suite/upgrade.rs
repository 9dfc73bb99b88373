//! Restarts that drop nothing (`upgrade.socket`), with the real binary: a new process
//! takes the running one's listening sockets over a Unix socket, the old one stops
//! accepting, finishes what it has in flight and exits.
//!
//! Under a steady load — plain calls over kept-alive connections, and a long event stream
//! in flight — not one request fails across the upgrade, with each session store:
//! `memory` (its sessions are the old process's: in-flight requests and streams finish
//! there, new connections are served by the new process, and a session opened at the
//! old one is unknown at the new one), `redis` (a real `redis-server`) and `sealed` (the
//! sessions carry on at the new process). A new process that cannot take over leaves
//! the running one serving; the operations listener goes over too, whatever the number
//! of workers on either side; a socket file left by a proxy that died is replaced.
//!
//! Every proxy is the binary as a process (`common::binary`), in front of the demo
//! server in this process, on loopback; every test is bounded in time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::binary::{ProxyProcess, WorkDir, command, scratch_dir};
use common::fleet::{Redis, free_port};
use common::*;
use parking_lot::Mutex;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// No test may take longer.
const TEST_LIMIT: Duration = Duration::from_secs(60);
const STATE_KEY: &str = "5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1";
const SEALED_KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test took longer than {TEST_LIMIT:?}"))
}

/// Where the proxies of one test find each other: a socket path in a directory of its
/// own.
struct Rendezvous {
    dir: WorkDir,
}

impl Rendezvous {
    fn new() -> Rendezvous {
        Rendezvous {
            dir: WorkDir::adopt(scratch_dir("upgrade")),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("upgrade.sock")
    }
}

/// The configuration every process of one test runs with: one address, two workers,
/// `upgrade.socket`, the upstream and a session store.
fn proxy_toml(port: u16, socket: &Path, upstream: &str, session: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\nworkers = 2\nshutdown_grace = \"10s\"\n\
         [upstream]\nurl = \"{upstream}\"\nhealth_interval = \"1h\"\n\
         [session]\n{session}\n\
         [upgrade]\nsocket = \"{}\"\n",
        socket.display()
    )
}

/// What a load saw: every answer that was not the expected one, and how many were.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    /// Answered after the old process had exited (so by the new one).
    ok_after: AtomicUsize,
    failed: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, outcome: Result<(), String>, old_gone: &AtomicBool) {
        match outcome {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                if old_gone.load(Ordering::Acquire) {
                    self.ok_after.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(why) => self.failed.lock().push(why),
        }
    }

    fn assert_none_failed(&self, what: &str) {
        let failed = self.failed.lock();
        assert!(
            failed.is_empty(),
            "{what}: {} of {} requests failed across the upgrade, e.g. {:?}",
            failed.len(),
            failed.len() + self.ok.load(Ordering::Relaxed),
            &failed[..failed.len().min(5)]
        );
        assert!(
            self.ok_after.load(Ordering::Relaxed) > 0,
            "{what}: nothing was answered once the old process had exited"
        );
    }
}

/// POSTs `body` with `headers` over `http` (kept-alive connections); `Ok` when the answer
/// is 200 and its final message the echo of `expected`.
async fn echo_call(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    headers: &HeaderMap,
    expected: &str,
) -> Result<(), String> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH)
        .json(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let reply = Reply {
        status,
        headers: response.headers().clone(),
        text: response.text().await.map_err(|e| format!("{e:?}"))?,
    };
    if status != 200 {
        return Err(format!("HTTP {status}: {}", reply.text));
    }
    let message = final_message(&reply);
    match message
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
    {
        Some(text) if text == expected => Ok(()),
        _ => Err(format!("not the echo of {expected:?}: {message}")),
    }
}

/// Stateless (2026-07-28) `tools/call echo` in a loop until `stop`.
async fn stateless_load(
    url: String,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
) {
    let client = StatelessClient::new(url.clone());
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let msg = format!("stateless {n}");
        let params = client.params(json!({"name": "echo", "arguments": {"msg": msg}}));
        let headers = StatelessClient::headers("tools/call", &params);
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params});
        let outcome = echo_call(&client.http, &url, &body, &headers, &msg).await;
        tally.record(outcome, &gone);
    }
}

/// `tools/call echo` in the session of `client` in a loop until `stop`.
async fn session_load(
    client: SessionClient,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let msg = format!("in session {n}");
        let body = client.message(
            json!(n),
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": msg}}),
        );
        let outcome = echo_call(&client.http, &client.url, &body, &client.headers(), &msg).await;
        tally.record(outcome, &gone);
    }
}

/// Which sessions outlive the process that opened them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sessions {
    Local,
    Shared,
}

/// Starts a proxy with `session`, puts it under load, upgrades it to a new process, and
/// checks that nothing failed.
async fn nothing_fails_across_an_upgrade(session: &str, sessions: Sessions) {
    let upstream = recording_demo().await;
    let rendezvous = Rendezvous::new();
    let toml = proxy_toml(free_port(), &rendezvous.socket(), &upstream.url(), session);
    let mut old = ProxyProcess::start(&toml).await;
    let url = old.url("/mcp");

    let tally = Arc::new(Tally::default());
    let in_sessions = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let gone = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..3 {
        load.push(tokio::spawn(stateless_load(
            url.clone(),
            tally.clone(),
            stop.clone(),
            gone.clone(),
        )));
    }
    if sessions == Sessions::Shared {
        for _ in 0..2 {
            let mut client = SessionClient::new(url.clone());
            client.create().await;
            load.push(tokio::spawn(session_load(
                client,
                in_sessions.clone(),
                stop.clone(),
                gone.clone(),
            )));
        }
    }
    // A long event stream, in flight across the upgrade (3 s of progress).
    let mut streaming = SessionClient::new(url.clone());
    streaming.create().await;
    let response = streaming
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 30, "interval_ms": 100},
                   "_meta": {"progressToken": "upgrade"}}),
        )
        .await;
    assert_event_stream(&response);
    let stream = tokio::spawn(EventReader::new(response).all_timed());
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The upgrade: the same configuration, a new process.
    let new = ProxyProcess::start(&toml).await;
    let took_over = Instant::now();
    assert!(
        new.log().contains(&format!(
            "took over the listeners of the running proxy (pid {})",
            old.pid()
        )),
        "{}",
        new.log()
    );
    let status = old.exits_within(Duration::from_secs(20)).await;
    gone.store(true, Ordering::Release);
    assert!(status.success(), "the old process: {status}\n{}", old.log());
    assert!(
        old.log()
            .contains("has the listeners and is ready; this one stops accepting"),
        "{}",
        old.log()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    for task in load {
        task.await.unwrap();
    }

    // The stream ran to its end at the old process, after the new one had taken over.
    let messages = stream.await.unwrap();
    let progress = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .count();
    let (answered, last) = messages.last().expect("the stream carried messages");
    assert_eq!(progress, 30, "{messages:?}");
    assert_eq!(assert::text_of(last), "done after 30 steps", "{last}");
    assert!(*answered > took_over, "the stream ended before the upgrade");

    tally.assert_none_failed("stateless calls");
    if sessions == Sessions::Shared {
        in_sessions.assert_none_failed("calls in sessions opened before the upgrade");
    }
    // The session the stream ran in: carried on by the new process, or (memory) gone
    // with the old one.
    streaming.http = http_client();
    let reply = streaming
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "after"}}),
        )
        .await;
    match sessions {
        Sessions::Shared => assert_eq!(reply.status, 200, "{}", reply.text),
        Sessions::Local => assert_eq!(reply.error_code(), Some(-32043), "{}", reply.text),
    }
    // The new process serves on, and answers the next upgrade.
    assert!(rendezvous.socket().exists());
    let (status, _) = new.get("/healthz").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_fails_across_an_upgrade_with_the_memory_store() {
    bounded(nothing_fails_across_an_upgrade(
        "store = \"memory\"",
        Sessions::Local,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_fails_across_an_upgrade_with_the_redis_store() {
    bounded(async {
        let redis = Redis::start().await;
        let session = format!(
            "store = \"redis\"\nredis_url = \"{}\"\nstate_key = \"{STATE_KEY}\"",
            redis.url()
        );
        nothing_fails_across_an_upgrade(&session, Sessions::Shared).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_fails_across_an_upgrade_with_sealed_sessions() {
    let session = format!("store = \"sealed\"\nsealed_keys = [\"{SEALED_KEY}\"]");
    bounded(nothing_fails_across_an_upgrade(&session, Sessions::Shared)).await;
}

#[tokio::test]
async fn a_new_process_that_cannot_take_over_leaves_the_running_one_serving() {
    bounded(async {
        let upstream = recording_demo().await;
        let rendezvous = Rendezvous::new();
        let socket = rendezvous.socket();
        let port = free_port();
        let toml = proxy_toml(port, &socket, &upstream.url(), "store = \"memory\"");
        let mut old = ProxyProcess::start(&toml).await;
        let mut client = SessionClient::new(old.url("/mcp"));
        client.create().await;

        // Configured for another address: refused after the offer, before "ready".
        let elsewhere = free_port();
        let dir = WorkDir::with_proxy_toml(&proxy_toml(
            elsewhere,
            &socket,
            &upstream.url(),
            "store = \"memory\"",
        ));
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            command(dir.path(), &[], &[]).output(),
        )
        .await
        .expect("the refused process exits")
        .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "mcp-session-proxy: cannot take over from the running proxy (pid {}) at \
                 upgrade.socket {}: it listens on 127.0.0.1:{port}, and this one is configured \
                 to listen on 127.0.0.1:{elsewhere}",
                old.pid(),
                socket.display()
            )),
            "{stderr}"
        );
        // The running proxy noticed, and serves on: its session, new connections.
        assert!(
            old.eventually_logged(
                "a hand-over of the listeners failed",
                Duration::from_secs(5)
            )
            .await,
            "{}",
            old.log()
        );
        assert_eq!(
            client.tool_text("echo", json!({"msg": "still"})).await,
            "still"
        );
        client.http = http_client();
        assert_eq!(
            client.tool_text("echo", json!({"msg": "again"})).await,
            "again"
        );

        // A process configured alike takes over.
        let new = ProxyProcess::start(&toml).await;
        assert!(old.exits_within(Duration::from_secs(20)).await.success());
        let (status, _) = new.get("/healthz").await;
        assert_eq!(status, 200);
    })
    .await;
}

#[tokio::test]
async fn a_socket_file_left_by_a_proxy_that_died_is_replaced() {
    bounded(async {
        let upstream = recording_demo().await;
        let rendezvous = Rendezvous::new();
        let toml = proxy_toml(
            0,
            &rendezvous.socket(),
            &upstream.url(),
            "store = \"memory\"",
        );
        let mut dead = ProxyProcess::start(&toml).await;
        dead.kill().await;
        assert!(rendezvous.socket().exists(), "SIGKILL leaves the file");

        let fresh = ProxyProcess::start(&toml).await;
        assert!(!fresh.log().contains("took over"), "{}", fresh.log());
        let mut client = SessionClient::new(fresh.url("/mcp"));
        client.create().await;
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(rendezvous.socket())
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "only its user may connect");
    })
    .await;
}

#[tokio::test]
async fn the_operations_listener_goes_over_too_whatever_the_workers() {
    bounded(async {
        let upstream = recording_demo().await;
        let rendezvous = Rendezvous::new();
        let (port, admin) = (free_port(), free_port());
        // One worker: a single socket, without SO_REUSEPORT. The next process has three
        // workers, which share it.
        let toml = |workers: usize| {
            proxy_toml(
                port,
                &rendezvous.socket(),
                &upstream.url(),
                "store = \"memory\"",
            )
            .replace("workers = 2", &format!("workers = {workers}"))
                + &format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n")
        };
        let mut old = ProxyProcess::start(&toml(1)).await;
        let new = ProxyProcess::start(&toml(3)).await;
        assert!(old.exits_within(Duration::from_secs(20)).await.success());

        let metrics = common::http_client()
            .get(format!("http://127.0.0.1:{admin}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(metrics.status(), 200);
        let mut client = SessionClient::new(new.url("/mcp"));
        client.http = common::http_builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        client.create().await;
        for i in 0..30 {
            let text = client
                .tool_text("echo", json!({"msg": format!("{i}")}))
                .await;
            assert_eq!(text, i.to_string());
        }
    })
    .await;
}
