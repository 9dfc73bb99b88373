//! The official MCP conformance suite, server side (issue 3), run by `cargo test`:
//! - 2025-11-25 through the proxy gives exactly the results it gives against the fixture
//!   server directly (old clients pass through untouched);
//! - 2026-07-28, the revision's required scenarios (server-stateless, the content
//!   scenarios, caching, the input-required-result set), pass through the proxy although
//!   the fixture behind it speaks only 2025-11-25.
//!
//! `tests/interop/conformance/run.sh` runs the pinned suite on Node 22.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::interop::{Interop, conformance_fixture, ensure_installed, repo_root, tools_dir};

/// Runs the suite; returns its `summary.tsv` (scenario, check, status per line).
async fn run(spec: &str, url: &str, selection: &str, out: &Path, suite: Option<&str>) -> String {
    let script = repo_root().join("tests/interop/conformance/run.sh");
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(script)
        .args([spec, url])
        .arg(out)
        .arg(selection)
        .env("INTEROP_TOOLS", tools_dir())
        .kill_on_drop(true);
    if let Some(suite) = suite {
        command.env("CONFORMANCE_SUITE", suite);
    }
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the conformance suite did not finish within 240 s")
        .expect("run.sh could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "conformance {spec} {selection} against {url} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(out.join("summary.tsv")).expect("no summary.tsv")
}

fn out_dir(name: &str) -> PathBuf {
    let dir = repo_root().join("target/conformance").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_2025_11_25_suite_sees_the_same_server_through_the_proxy() {
    ensure_installed();
    let h = Interop::start(conformance_fixture().await).await;
    // Both suites: 0.1.16, and 0.2.0 at 2025-11-25 (it adds server-session-lifecycle and a
    // JSON-schema check of every message).
    for (suite, name) in [(None, "2025"), (Some("2026"), "2025-on-0.2")] {
        let direct = run(
            "2025-11-25",
            &h.server.url(),
            "all",
            &out_dir(&format!("{name}-direct")),
            suite,
        )
        .await;
        let proxied = run(
            "2025-11-25",
            &h.url(),
            "all",
            &out_dir(&format!("{name}-proxied")),
            suite,
        )
        .await;
        assert!(direct.lines().count() > 30, "too few checks ran: {direct}");
        assert_eq!(
            direct, proxied,
            "the proxy changed what a 2025-11-25 client sees"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn the_2026_07_28_required_scenarios_pass_through_the_proxy() {
    ensure_installed();
    let h = Interop::start(conformance_fixture().await).await;
    let summary = run(
        "2026-07-28",
        &h.url(),
        "required",
        &out_dir("2026-required"),
        None,
    )
    .await;
    for scenario in [
        "server-stateless",
        "tools-call-with-progress",
        "caching",
        "input-required-result-multiple-input-requests",
        "input-required-result-tampered-state",
        "sep-2164-resource-not-found",
    ] {
        let checks: Vec<&str> = summary
            .lines()
            .filter(|l| l.starts_with(&format!("{scenario}\t")))
            .collect();
        assert!(!checks.is_empty(), "{scenario} did not run");
        for check in checks {
            assert!(
                check.ends_with("\tSUCCESS") || check.ends_with("\tSKIPPED"),
                "{check}"
            );
        }
    }
    h.stop().await;
}
