//! The real binary's limits (`[limits]`), as an attacker or a failing network meets them:
//! expiring sessions under a low open-file limit (every upstream session ended, the file
//! descriptors given back), an accept loop out of descriptors (it backs off, its log
//! stays bounded), slowloris heads, idle kept-alive connections, slow bodies, and the
//! caps on connections (in all and per client address).
//!
//! Every test runs the binary as a process (`common::binary`), on loopback, with short
//! configured timeouts; the legacy upstream is the demo server, in this process.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::binary::ProxyProcess;
use common::*;
use mcp_session_proxy::demo::{DemoOptions, DemoServer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A TCP connection to `to` from the loopback address `from` (127.0.0.x: another client
/// address on the same machine).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::from(from), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// Whether the server closes `stream` within `within` (a read ends, or fails).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // An answer (a 408, say) before the close.
            Ok(Ok(_)) => continue,
        }
    }
}

/// One `GET /healthz` on `stream`, keeping it open; the status line.
async fn healthz_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("{\"status\":\"ok\"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer to GET /healthz")
            .unwrap();
        assert!(
            n > 0,
            "closed before answering: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Whether `GET /healthz` answers 200 within `within`, each try given up after `each`.
async fn healthz_within(proxy: &ProxyProcess, within: Duration, each: Duration) -> bool {
    eventually_async(within, || async {
        let http = common::http_builder().timeout(each).build().unwrap();
        http.get(proxy.url("/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await
}

async fn create_session(http: &reqwest::Client, url: &str) -> bool {
    let reply = post_json(
        http,
        url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        &Default::default(),
    )
    .await;
    reply.status == 200
}

// === 1. expiring sessions: bounded background work ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_sessions_are_all_ended_upstream_and_give_their_file_descriptors_back() {
    const SESSIONS: usize = 800;
    // An upstream that keeps its connections alive, and a proxy with few descriptors:
    // ending every expired session at once would need one upstream connection each. One
    // client opens them all: no limit on its creations a minute.
    let demo = DemoServer::start(DemoOptions::default()).await.unwrap();
    let proxy = ProxyProcess::launch()
        .toml(&format!(
            "[upstream]\nurl = \"{}\"\n[session]\nidle_ttl = \"3s\"\nreap_interval = \"1s\"\n\
             creations_per_caller_per_minute = 0\n\
             [limits]\nupstream_idle_timeout = \"1s\"\n",
            demo.url()
        ))
        .nofile(128)
        .start()
        .await;
    let baseline = proxy.open_fds();
    let url = proxy.url("/mcp");
    let http = http_client();
    let mut creating = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let (http, url) = (http.clone(), url.clone());
        creating.spawn(async move {
            let mut created = 0;
            for _ in (worker..SESSIONS).step_by(16) {
                created += usize::from(create_session(&http, &url).await);
            }
            created
        });
    }
    let mut created = 0;
    while let Some(n) = creating.join_next().await {
        created += n.unwrap();
    }
    assert_eq!(created, SESSIONS, "every create succeeded");
    // On a loaded machine the first sessions may expire before the last are created:
    // what matters is that every one of them is ended upstream, below.
    assert!(demo.live_sessions() > 0, "no session outlived its creation");
    // The client goes away; the sessions expire and the reaper ends them upstream.
    drop(http);
    let all_ended = eventually(Duration::from_secs(20), || demo.live_sessions() == 0).await;
    assert!(
        all_ended,
        "{} of {SESSIONS} upstream sessions were never ended; the proxy's log:\n{}",
        demo.live_sessions(),
        tail(&proxy.log(), 20)
    );
    let healthy = healthz_within(&proxy, Duration::from_secs(5), Duration::from_secs(1)).await;
    assert!(healthy, "/healthz does not answer");
    // Idle upstream connections close after limits.upstream_idle_timeout; the client's
    // are gone: the descriptors come back to what the proxy had at start.
    let recovered = eventually(Duration::from_secs(10), || proxy.open_fds() <= baseline + 4).await;
    assert!(
        recovered,
        "the proxy holds {} file descriptors, {baseline} at start",
        proxy.open_fds()
    );
    assert!(
        proxy.logged("WARN", "Too many open files").is_empty()
            && proxy.logged("WARN", "cannot accept").is_empty(),
        "the proxy ran out of file descriptors:\n{}",
        tail(&proxy.log(), 20)
    );
}

fn tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_accept_loop_backs_off_and_logs_at_a_bounded_rate() {
    // The overload threshold above the limit: otherwise the proxy sheds connections
    // before the kernel refuses any (tests/suite/overload.rs), and accepting never fails.
    let proxy = ProxyProcess::launch()
        .toml("[limits]\nheader_read_timeout = \"30s\"\nmax_open_files = 100000\n")
        .nofile(64)
        .start()
        .await;
    // Told at start-up: the cap on connections does not fit under this limit.
    let told = proxy.logged("WARN", "open-file limit (64) is too low");
    assert_eq!(told.len(), 1, "{}", tail(&proxy.log(), 5));
    // More connections than descriptors: accepting fails with EMFILE while they stay.
    let mut held = Vec::new();
    for _ in 0..80 {
        held.push(TcpStream::connect(proxy.listen).await.unwrap());
    }
    let cpu_before = proxy.cpu_time();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = proxy.cpu_time() - cpu_before;
    let warnings: Vec<_> = proxy
        .log()
        .lines()
        .filter(|line| line.contains("\"WARN\"") && line.contains("accept"))
        .map(str::to_owned)
        .collect();
    assert!(
        !warnings.is_empty(),
        "accepting never failed (is the limit applied?):\n{}",
        tail(&proxy.log(), 10)
    );
    assert!(
        warnings.len() <= 2,
        "{} warnings in 3 s of failing accepts:\n{}",
        warnings.len(),
        warnings.join("\n")
    );
    assert!(
        cpu < Duration::from_millis(500),
        "the accept loop spun: {cpu:?} of CPU in 3 s"
    );
    // Once descriptors are free again, the proxy serves within its longest back-off.
    drop(held);
    let started = Instant::now();
    let answered = healthz_within(&proxy, Duration::from_secs(5), Duration::from_millis(500)).await;
    assert!(
        answered,
        "/healthz never answered after the descriptors came back"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

// === 2. slowloris: header-read and idle timeouts ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_slow_to_send_a_head_are_closed_at_the_header_read_timeout() {
    let proxy =
        ProxyProcess::start("[limits]\nheader_read_timeout = \"1s\"\nidle_timeout = \"30s\"\n")
            .await;
    // Writes `start`, then one more byte of `then` (round and round) every 200 ms, for
    // up to 6 s.
    let dribble = |start: &'static [u8], then: &'static [u8]| {
        let to = proxy.listen;
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(to).await.unwrap();
            let opened = Instant::now();
            let _ = stream.write_all(start).await;
            let mut next = then.iter().cycle();
            while opened.elapsed() < Duration::from_secs(6) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let byte = *next.next().unwrap();
                if stream.write_all(&[byte]).await.is_err() {
                    break;
                }
                let mut buf = [0u8; 1024];
                let read = tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buf));
                if let Ok(Ok(0) | Err(_)) = read.await {
                    break;
                }
            }
            let closed = closed_within(&mut stream, Duration::from_millis(100)).await;
            (closed, opened.elapsed())
        })
    };
    let http1 = dribble(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\nX-Slow: ", b"x");
    // The HTTP/2 preface, dribbled: before the protocol is even known.
    let http2 = dribble(b"P", b"RI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let silent = {
        let to = proxy.listen;
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(to).await.unwrap();
            let opened = Instant::now();
            let closed = closed_within(&mut stream, Duration::from_secs(6)).await;
            (closed, opened.elapsed())
        })
    };
    for (name, case) in [
        ("HTTP/1.1 head", http1),
        ("HTTP/2 preface", http2),
        ("nothing", silent),
    ] {
        let (closed, after) = case.await.unwrap();
        assert!(
            closed && after < Duration::from_secs(4),
            "a connection sending {name} slowly was not closed at the 1 s header-read timeout \
             (closed: {closed}, after {after:?})"
        );
    }
    // Others are served all along.
    assert_eq!(proxy.get("/healthz").await.0, 200);
    let (_, metrics) = proxy.get("/metrics").await;
    assert!(
        metrics.contains("mcp_proxy_connections_closed_total{reason=\"header_timeout\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_but_a_long_request_is_not() {
    let proxy =
        ProxyProcess::start("[limits]\nheader_read_timeout = \"1s\"\nidle_timeout = \"1s\"\n")
            .await;
    let mut stream = TcpStream::connect(proxy.listen).await.unwrap();
    assert!(healthz_on(&mut stream).await.contains("200"));
    let idle = Instant::now();
    assert!(
        closed_within(&mut stream, Duration::from_secs(5)).await,
        "an idle kept-alive connection stayed open"
    );
    let after = idle.elapsed();
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(3),
        "closed after {after:?}, the idle timeout is 1 s"
    );
    // A request in flight longer than both timeouts (a slow tool, then an event stream
    // longer than both) is not cut.
    let mut client = SessionClient::new(proxy.url("/mcp"));
    client.create().await;
    let slept = client.tool_text("sleep", json!({"ms": 2500})).await;
    assert_eq!(slept, "slept 2500 ms");
    let streamed = client
        .tool_text("slow", json!({"steps": 3, "interval_ms": 900}))
        .await;
    assert_eq!(streamed, "done after 3 steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_the_body_timeout_gets_408() {
    let proxy = ProxyProcess::start("[limits]\nrequest_body_timeout = \"1s\"\n").await;
    let mut stream = TcpStream::connect(proxy.listen).await.unwrap();
    stream
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n\
              Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") || !got.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer within the body timeout")
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("\"code\":-32600") && text.contains("Request Timeout"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

// === 2. caps on connections ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_caps_are_closed_and_other_clients_are_still_served() {
    let proxy = ProxyProcess::start(
        "[limits]\nmax_connections = 6\nmax_connections_per_address = 3\n\
         header_read_timeout = \"30s\"\nidle_timeout = \"30s\"\n",
    )
    .await;
    let to = proxy.listen;
    // One address holds its 3 places; its 4th connection is closed at once.
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(connect_from([127, 0, 0, 1], to).await);
    }
    for held in &mut first {
        assert!(healthz_on(held).await.contains("200"));
    }
    let mut over = connect_from([127, 0, 0, 1], to).await;
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "a 4th connection from one address was kept"
    );
    // Another address is served meanwhile, up to the total cap.
    let mut second = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from([127, 0, 0, 2], to).await;
        assert!(healthz_on(&mut stream).await.contains("200"));
        second.push(stream);
    }
    let mut beyond = connect_from([127, 0, 0, 3], to).await;
    assert!(
        closed_within(&mut beyond, Duration::from_secs(2)).await,
        "a 7th connection was kept with max_connections = 6"
    );
    // A place given back is taken again.
    drop(first.pop());
    let served = eventually_async(Duration::from_secs(3), || async {
        let mut stream = connect_from([127, 0, 0, 3], to).await;
        let answered = tokio::time::timeout(Duration::from_millis(500), async {
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut text = String::new();
            stream.read_to_string(&mut text).await.ok()?;
            Some(text)
        })
        .await;
        match answered {
            Ok(Some(text)) if text.starts_with("HTTP/1.1 200") => {
                // The 7th connection, and maybe a try here before the place came back.
                let refused = |reason: &str| {
                    let prefix =
                        format!("mcp_proxy_connections_closed_total{{reason=\"{reason}\"}} ");
                    text.lines()
                        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse::<u64>().ok())
                        .unwrap_or(0)
                };
                assert!(refused("limit") >= 1, "{text}");
                assert_eq!(refused("address_limit"), 1, "{text}");
                true
            }
            _ => false,
        }
    })
    .await;
    assert!(served, "the place given back was not taken again");
}
