//! The official MCP conformance suite at 2026-07-28 (0.2.0-alpha.12, `--requirements
//! 2026-07-28`: the 37 scored scenarios, and the tasks extension and pending ones beside
//! them) through the proxy in front of a MODERN server, compared check by check with the
//! same suite run against that server directly: the proxy passes at least every check the
//! server passes alone. A 2026-07-28 client meets a modern server through the proxy as
//! it is (the proxy passes its requests through), so nothing the server does well may be
//! lost on the way.
//!
//! The suite's own fixture server is not in its npm package; the servers here are the
//! real SDK 2.x servers of `tests/interop/` (tests/interop/README.md, "Peers of every
//! era"), which pass part of the suite only (their tools are not the fixture's). Both
//! are run: the Python SDK 2.x server (dual) passes the most, the TypeScript SDK 2.x
//! server is modern-only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use common::config_for;
use common::conformance::{Results, run_suite};
use common::interop::ServerProcess;
use common::peers::{Ts2Mode, sdk2_server, ts2_http};
use mcp_session_proxy::start;

/// Runs the suite directly against `server` and through a proxy in front of it, at once;
/// asserts every check that passed directly passed through the proxy. Both results.
async fn no_check_lost(server: &ServerProcess, name: &str) -> (Results, Results) {
    let proxy = start(config_for(&server.url())).await.unwrap();
    let (server_url, proxy_url) = (server.url(), proxy.url());
    let (direct_out, proxied_out) = (format!("{name}-direct"), format!("{name}-proxied"));
    let (direct, proxied) = tokio::join!(
        run_suite("2026-07-28", &server_url, "required", &direct_out),
        run_suite("2026-07-28", &proxy_url, "required", &proxied_out),
    );
    proxy.shutdown().await;
    // Every scenario ran both ways (the 50 of --requirements), and the server passes
    // enough of them for the comparison to mean something.
    assert_eq!(direct.scenarios().len(), 50, "{}", direct.out.display());
    assert_eq!(direct.scenarios(), proxied.scenarios());
    assert!(
        direct.passed().len() >= 100,
        "{}: only {} checks passed directly ({})",
        name,
        direct.passed().len(),
        direct.out.display()
    );
    let lost: Vec<_> = direct
        .passed()
        .difference(&proxied.passed())
        .cloned()
        .collect();
    assert!(
        lost.is_empty(),
        "checks the {name} server passes directly but not through the proxy: {lost:?}\n\
         see {} and {}",
        direct.out.display(),
        proxied.out.display()
    );
    (direct, proxied)
}

#[tokio::test]
async fn the_2026_suite_loses_no_check_through_the_proxy_before_the_python_sdk2_server() {
    let server = sdk2_server(&[]).await;
    no_check_lost(&server, "2026-modern-sdk2").await;
}

#[tokio::test]
async fn the_2026_suite_loses_no_check_through_the_proxy_before_the_modern_only_typescript_server()
{
    let server = ts2_http(Ts2Mode::Reject).await;
    let (direct, proxied) = no_check_lost(&server, "2026-modern-ts2").await;
    // The server itself does not check Host; the proxy does (MCP 2025-11-25 and
    // 2026-07-28, Streamable HTTP "Security Warning": DNS rebinding).
    let rebinding = (
        "dns-rebinding-protection".to_owned(),
        "localhost-host-rebinding-rejected".to_owned(),
    );
    assert!(!direct.passed().contains(&rebinding));
    assert!(proxied.passed().contains(&rebinding));
}
