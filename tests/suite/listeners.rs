//! Who owns the listen address, with the real binary: a proxy never shares its address
//! with another process — a second proxy started on it, or any program listening there
//! (even one that shares by `SO_REUSEPORT` as the same user), makes start-up fail with
//! "address already in use" and exit code 1, and the first keeps every connection.
//!
//! Every test runs the binary as a process (`common::binary`) on loopback, in front of
//! the demo server in this process, and is bounded in time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::future::Future;
use std::net::SocketAddr;
use std::process::Output;
use std::time::Duration;

use common::binary::{ProxyProcess, WorkDir, command};
use common::*;
use serde_json::json;

/// No test may take longer.
const TEST_LIMIT: Duration = Duration::from_secs(30);

async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test took longer than {TEST_LIMIT:?}"))
}

/// The binary with `--listen listen`, two workers (a `SO_REUSEPORT` group of two
/// sockets, whatever the machine's cores) in front of `upstream`, run to its end: it
/// must end within 10 s.
async fn run_on(listen: SocketAddr, upstream: &str) -> Output {
    let dir = WorkDir::new();
    let listen = listen.to_string();
    let child = command(
        dir.path(),
        &["--listen", &listen, "--upstream", upstream],
        &[("MCP_PROXY_WORKERS", "2")],
    )
    .spawn()
    .unwrap();
    tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("a proxy started on {listen}, which is in use, did not exit: it serves there")
        })
        .unwrap()
}

/// A client whose every request opens a connection of its own (nothing pooled), so
/// that the kernel chooses a listener for each.
fn unpooled() -> reqwest::Client {
    common::http_builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_second_proxy_on_a_served_address_exits_and_the_first_keeps_every_connection() {
    bounded(async {
        let upstream = recording_demo().await;
        let first = ProxyProcess::start(&format!(
            "workers = 2\n[upstream]\nurl = \"{}\"\n",
            upstream.url()
        ))
        .await;
        let mut client = SessionClient::new(first.url("/mcp"));
        client.create().await;

        let second = run_on(first.listen, &upstream.url()).await;
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert_eq!(second.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "mcp-session-proxy: cannot listen on {}: address already in use by another \
                 mcp-session-proxy; stop it first",
                first.listen
            )),
            "{stderr}"
        );

        // Every new connection still reaches the first proxy: the session it holds is
        // known on each (a second one sharing the port would answer -32043 to some).
        client.http = unpooled();
        for i in 0..40 {
            let text = client
                .tool_text("echo", json!({"msg": format!("call {i}")}))
                .await;
            assert_eq!(text, format!("call {i}"));
        }
        assert_eq!(
            upstream.live_sessions(),
            1,
            "the second opened nothing upstream"
        );
    })
    .await;
}

#[tokio::test]
async fn an_address_another_program_shares_by_reuseport_is_refused_too() {
    bounded(async {
        // Another program of the same user listening with SO_REUSEPORT: the kernel would
        // let the proxy's own group join it and split the connections.
        let foreign = tokio::net::TcpSocket::new_v4().unwrap();
        foreign.set_reuseaddr(true).unwrap();
        foreign.set_reuseport(true).unwrap();
        foreign.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let foreign = foreign.listen(16).unwrap();
        let addr = foreign.local_addr().unwrap();
        let upstream = recording_demo().await;

        let proxy = run_on(addr, &upstream.url()).await;
        let stderr = String::from_utf8_lossy(&proxy.stderr);
        assert_eq!(proxy.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "mcp-session-proxy: cannot listen on {addr}: address already in use (another \
                 process listens there)"
            )),
            "{stderr}"
        );
        // The program keeps its connections.
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(Duration::from_secs(2), foreign.accept())
            .await
            .expect("the program still accepts")
            .unwrap();
    })
    .await;
}
