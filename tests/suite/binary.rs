//! The real `mcp-session-proxy` binary as a child process: configuration layers and their
//! errors (exit code 2 naming the key), precedence, the embedded demo server, SIGTERM,
//! `--help` / `--version`, and the README's curl walkthrough as raw HTTP (tests/docs runs it as
//! written).
//!
//! Every child runs in its own empty working directory (so the repository's `proxy.toml`
//! is read only by the test that wants it), with no inherited `MCP_PROXY_*` or `RUST_LOG`,
//! on 127.0.0.1 only, is killed when dropped, and every test is bounded in time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::future::Future;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::binary::{ProxyProcess, SERVING, WorkDir, catches_sigterm, command, signal};
use common::*;
use futures_util::StreamExt;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// No test may take longer.
const TEST_LIMIT: Duration = Duration::from_secs(10);
/// How long the binary may take to print its start-up line.
const STARTUP_LIMIT: Duration = Duration::from_secs(5);

/// Runs a test body, failing it when it takes longer than [`TEST_LIMIT`].
async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("the test took longer than {TEST_LIMIT:?}"))
}

// === the child process (`common::binary`) ===

/// Runs the binary to its end (it must end within [`STARTUP_LIMIT`]).
async fn run_to_exit(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = command(dir, args, env).spawn().unwrap();
    tokio::time::timeout(STARTUP_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} {env:?} did not exit within {STARTUP_LIMIT:?}"))
        .unwrap()
}

/// Runs the binary with a configuration that must be refused; returns its stderr.
async fn refused(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let output = run_to_exit(dir, args, env).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(2),
        "{args:?} {env:?} should exit with 2; stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains(SERVING),
        "a refused configuration was served:\n{stderr}"
    );
    stderr
}

/// The binary serving in `dir` (its own) with `args` and `env`, JSON logs unless `env`
/// says otherwise; started within [`STARTUP_LIMIT`].
async fn serve(dir: WorkDir, args: &[&str], env: &[(&str, &str)]) -> ProxyProcess {
    ProxyProcess::launch()
        .dir(dir)
        .args(args)
        .env(env)
        .startup_within(STARTUP_LIMIT)
        .start()
        .await
}

/// The binary serving in the repository root (so with the repository's `proxy.toml`),
/// as `cargo run --release` starts it, on a free port.
async fn serve_in_the_repository() -> ProxyProcess {
    ProxyProcess::launch()
        .cwd(Path::new(env!("CARGO_MANIFEST_DIR")))
        .args(&["--listen", "127.0.0.1:0"])
        .startup_within(STARTUP_LIMIT)
        .start()
        .await
}

/// Whether `sessions/create` succeeds at `path` (`false`: 404, not the MCP endpoint).
async fn creates_at(proxy: &ProxyProcess, path: &str) -> bool {
    let reply = proxy
        .post(
            path,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        )
        .await;
    match reply.status {
        200 => {
            assert!(reply.json()["result"]["session"]["sessionId"].is_string());
            true
        }
        404 => false,
        other => panic!("{path} answered {other}: {}", reply.text),
    }
}

/// A loopback port something is listening on (the returned listener holds it).
fn held_port() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

// === 1. a bad value in any layer stops the binary with exit code 2, naming the key ===

#[tokio::test]
async fn bad_values_in_the_file_exit_2_naming_the_key() {
    bounded(async {
        // The default file: ./proxy.toml in the working directory.
        let dir = WorkDir::with_proxy_toml("max_body_bytes = \"big\"\n");
        let stderr = refused(dir.path(), &[], &[]).await;
        assert!(stderr.contains("max_body_bytes"), "{stderr}");

        // A file given with --config.
        let dir = WorkDir::new();
        let file = dir.write("custom.toml", "[session]\nidle_ttl = \"soon\"\n");
        let stderr = refused(dir.path(), &["--config", file.to_str().unwrap()], &[]).await;
        assert!(stderr.contains("session.idle_ttl"), "{stderr}");
        assert!(stderr.contains("soon"), "{stderr}");
    })
    .await;
}

#[tokio::test]
async fn an_unknown_key_in_the_file_exits_2_naming_it() {
    bounded(async {
        let dir = WorkDir::with_proxy_toml("[session]\nidel_ttl = \"5m\"\n");
        let stderr = refused(dir.path(), &[], &[]).await;
        assert!(stderr.contains("idel_ttl"), "{stderr}");
    })
    .await;
}

#[tokio::test]
async fn a_bad_environment_variable_exits_2_naming_the_key() {
    bounded(async {
        let dir = WorkDir::new();
        let stderr = refused(dir.path(), &[], &[("MCP_PROXY_SESSION__IDLE_TTL", "soon")]).await;
        assert!(stderr.contains("session.idle_ttl"), "{stderr}");
    })
    .await;
}

#[tokio::test]
async fn bad_flags_exit_2_naming_the_key() {
    bounded(async {
        let dir = WorkDir::new();
        let stderr = refused(dir.path(), &["--listen", "nowhere"], &[]).await;
        assert!(stderr.contains("listen"), "{stderr}");
        assert!(stderr.contains("nowhere"), "{stderr}");

        let stderr = refused(dir.path(), &["--upstream", "ftp://127.0.0.1/mcp"], &[]).await;
        assert!(stderr.contains("upstream.url"), "{stderr}");
    })
    .await;
}

#[tokio::test]
async fn a_missing_config_file_exits_2() {
    bounded(async {
        let dir = WorkDir::new();
        let stderr = refused(dir.path(), &["--config", "/nonexistent"], &[]).await;
        assert!(stderr.contains("/nonexistent"), "{stderr}");
    })
    .await;
}

#[tokio::test]
async fn problems_in_several_layers_are_all_named() {
    bounded(async {
        let dir = WorkDir::with_proxy_toml("[session]\nidle_ttl = \"soon\"\n");
        let stderr = refused(
            dir.path(),
            &["--listen", "nowhere"],
            &[("MCP_PROXY_SHUTDOWN_GRACE", "never")],
        )
        .await;
        for key in ["session.idle_ttl", "shutdown_grace", "listen"] {
            assert!(stderr.contains(key), "{key} is not named:\n{stderr}");
        }
    })
    .await;
}

/// The lines of a refusal after its first ("invalid configuration:").
fn problem_lines(stderr: &str) -> Vec<&str> {
    let mut lines = stderr.lines();
    assert_eq!(
        lines.next(),
        Some("mcp-session-proxy: invalid configuration:"),
        "{stderr}"
    );
    lines.map(str::trim_start).collect()
}

#[tokio::test]
async fn a_file_with_several_bad_entries_reports_every_one() {
    bounded(async {
        let dir = WorkDir::with_proxy_toml(
            "max_body_bytes = \"big\"\nshutdown_grace = \"soon\"\n[session]\nidel_ttl = \"5m\"\nreap_interval = -5\n",
        );
        let stderr = refused(dir.path(), &[], &[]).await;
        assert_eq!(
            problem_lines(&stderr),
            [
                "max_body_bytes (in proxy.toml): \"big\" is not a whole number of 0 or more; write e.g. 4194304",
                "session.idel_ttl (in proxy.toml): unknown key; did you mean idle_ttl? The keys of [session] are idle_ttl, max_sessions, max_sessions_per_caller, creations_per_caller_per_minute, reap_interval, state_key, store, redis_url, redis_sentinels, redis_master_name, redis_username, redis_password, redis_db, redis_timeout, redis_wait_replicas, redis_wait_timeout, redis_cache_sessions, sealed_keys and max_tombstones.",
                "session.reap_interval (in proxy.toml): -5 is not a duration; write it in quotes, e.g. \"30s\", \"10m\" or \"1h\"",
                "shutdown_grace (in proxy.toml): \"soon\" is not a duration; write a number and a unit, e.g. \"30s\", \"5m\" or \"1h\"",
            ]
        );
        // `check` says the same.
        assert_eq!(refused(dir.path(), &["check"], &[]).await, stderr);
    })
    .await;
}

#[tokio::test]
async fn environment_problems_name_the_variable_and_suggest_the_right_one() {
    bounded(async {
        let dir = WorkDir::new();
        let stderr = refused(
            dir.path(),
            &["check"],
            &[
                ("MCP_PROXY_IDLE_TTL", "5m"),
                ("MCP_PROXY_UPSTREAM__POOL_SIZE", "many"),
            ],
        )
        .await;
        assert_eq!(
            problem_lines(&stderr),
            [
                "idle_ttl (from the environment variable MCP_PROXY_IDLE_TTL): unknown key; did you mean MCP_PROXY_SESSION__IDLE_TTL? The top-level keys are listen, path, max_body_bytes, allowed_origins, shutdown_grace, workers, session, upstream, log, admin, stateless, upstreams, cluster, limits, auth, upgrade and telemetry.",
                "upstream.pool_size (from the environment variable MCP_PROXY_UPSTREAM__POOL_SIZE): \"many\" is not a whole number of 0 or more; write e.g. MCP_PROXY_UPSTREAM__POOL_SIZE=2",
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn an_environment_value_of_digits_is_text_where_text_is_wanted() {
    bounded(async {
        let dir = WorkDir::new();
        let output = run_to_exit(
            dir.path(),
            &["check"],
            &[("MCP_PROXY_ADMIN__TOKEN", "0012345678901234567")],
        )
        .await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    })
    .await;
}

#[tokio::test]
async fn an_upstream_url_and_a_stdio_command_together_are_refused_by_run_and_check() {
    bounded(async {
        let dir = WorkDir::new();
        let expected = "mcp-session-proxy: invalid configuration:\n  upstream: --upstream \
                        http://127.0.0.1:3001/mcp and the stdio command after `--` (npx -y \
                        server) both name the upstream; give one: --upstream URL for a \
                        Streamable HTTP server, or `-- COMMAND ARGS…` for a stdio server\n";
        for args in [
            &[
                "--upstream",
                "http://127.0.0.1:3001/mcp",
                "--",
                "npx",
                "-y",
                "server",
            ][..],
            &[
                "check",
                "--upstream",
                "http://127.0.0.1:3001/mcp",
                "--",
                "npx",
                "-y",
                "server",
            ],
            &[
                "--upstream",
                "http://127.0.0.1:3001/mcp",
                "check",
                "--",
                "npx",
                "-y",
                "server",
            ],
        ] {
            assert_eq!(refused(dir.path(), args, &[]).await, expected, "{args:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn flags_go_before_or_after_the_subcommand() {
    bounded(async {
        let dir = WorkDir::new();
        for args in [
            &["--listen", "127.0.0.1:9999", "check"][..],
            &["check", "--listen", "127.0.0.1:9999"],
        ] {
            let output = run_to_exit(dir.path(), args, &[]).await;
            assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
            assert_eq!(
                String::from_utf8_lossy(&output.stdout),
                "configuration OK: listen 127.0.0.1:9999/mcp, upstream the embedded demo server\n",
                "{args:?}"
            );
        }
        // A bad value is refused wherever the flag stands.
        let stderr = refused(dir.path(), &["--listen", "nowhere", "check"], &[]).await;
        assert_eq!(
            problem_lines(&stderr),
            ["listen (from --listen): \"nowhere\" is not a socket address; write e.g. \"127.0.0.1:8080\""]
        );
        // The same flag on both sides: neither silently wins.
        let stderr = refused(
            dir.path(),
            &["--listen", "127.0.0.1:1", "check", "--listen", "127.0.0.1:2"],
            &[],
        )
        .await;
        assert_eq!(
            stderr,
            "mcp-session-proxy: --listen is given both before and after the subcommand; give it once\n"
        );
        // The help says where they go.
        let help = run_to_exit(dir.path(), &["--help"], &[]).await;
        assert!(
            String::from_utf8_lossy(&help.stdout).contains(
                "Options go before or after a subcommand: `mcp-session-proxy --listen \
                 0.0.0.0:8080 check` is `mcp-session-proxy check --listen 0.0.0.0:8080`."
            ),
            "{help:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn healthcheck_help_lists_only_what_applies_to_it() {
    bounded(async {
        let dir = WorkDir::new();
        let help = run_to_exit(dir.path(), &["healthcheck", "--help"], &[]).await;
        assert_eq!(help.status.code(), Some(0), "{help:?}");
        let text = String::from_utf8_lossy(&help.stdout);
        let options: Vec<&str> = text
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("--"))
            .map(|line| line.split([' ', '<']).next().unwrap())
            .collect();
        assert_eq!(options, ["url", "listen", "config"], "{text}");
        assert!(!text.contains("COMMAND"), "{text}");
        // A flag that does not apply, given before the subcommand, is refused, not ignored.
        let stderr = refused(
            dir.path(),
            &["--upstream", "http://127.0.0.1:3001/mcp", "healthcheck"],
            &[],
        )
        .await;
        assert_eq!(
            stderr,
            "mcp-session-proxy: --upstream does not apply to healthcheck, which only probes a \
             running proxy's /healthz (its options: --url, --listen, --config)\n"
        );
    })
    .await;
}

#[tokio::test]
async fn healthcheck_against_nothing_says_which_url_and_what_to_check() {
    bounded(async {
        let dir = WorkDir::new();
        let (free, port) = held_port();
        drop(free);
        let url = format!("http://127.0.0.1:{port}/healthz");

        let output = run_to_exit(dir.path(), &["healthcheck", "--url", &url], &[]).await;
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!(
                "mcp-session-proxy healthcheck: cannot reach {url}: connection refused (nothing \
                 listens there)\n  Check the URL given with --url.\n"
            )
        );

        // The configured address, before or after the subcommand.
        let listen = format!("127.0.0.1:{port}");
        for args in [
            &["healthcheck", "--listen", listen.as_str()][..],
            &["--listen", listen.as_str(), "healthcheck"],
        ] {
            let output = run_to_exit(dir.path(), args, &[]).await;
            assert_eq!(output.status.code(), Some(1), "{output:?}");
            assert_eq!(
                String::from_utf8_lossy(&output.stderr),
                format!(
                    "mcp-session-proxy healthcheck: cannot reach {url}: connection refused \
                     (nothing listens there)\n  Is the proxy running, and listening there? \
                     healthcheck probes the configured listen address (--listen, \
                     MCP_PROXY_LISTEN or listen in proxy.toml; admin.listen when set); --url \
                     probes another.\n"
                ),
                "{args:?}"
            );
        }

        // And it succeeds against a proxy that serves.
        let proxy = serve(WorkDir::new(), &["--listen", "127.0.0.1:0"], &[]).await;
        let listen = proxy.listen.to_string();
        let output = run_to_exit(dir.path(), &["healthcheck", "--listen", &listen], &[]).await;
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    })
    .await;
}

// === 2. precedence: file < environment < flags ===

#[tokio::test]
async fn the_environment_beats_the_file_and_the_file_beats_the_defaults() {
    bounded(async {
        let file = "path = \"/from-file\"\n";
        let (from_file, from_env) = tokio::join!(
            serve(
                WorkDir::with_proxy_toml(file),
                &["--listen", "127.0.0.1:0"],
                &[]
            ),
            serve(
                WorkDir::with_proxy_toml(file),
                &["--listen", "127.0.0.1:0"],
                &[("MCP_PROXY_PATH", "/from-env")],
            ),
        );

        assert_eq!(from_file.startup("endpoint"), from_file.url("/from-file"));
        assert!(creates_at(&from_file, "/from-file").await);
        assert!(!creates_at(&from_file, "/mcp").await);

        assert_eq!(from_env.startup("endpoint"), from_env.url("/from-env"));
        assert!(creates_at(&from_env, "/from-env").await);
        assert!(!creates_at(&from_env, "/from-file").await);
    })
    .await;
}

#[tokio::test]
async fn a_config_flag_replaces_the_default_file() {
    bounded(async {
        let dir = WorkDir::with_proxy_toml("path = \"/from-cwd\"\n");
        let other = dir.write("other.toml", "path = \"/from-flag\"\n");
        let other = other.to_str().unwrap().to_owned();
        let proxy = serve(dir, &["--listen", "127.0.0.1:0", "--config", &other], &[]).await;
        assert_eq!(proxy.startup("endpoint"), proxy.url("/from-flag"));
        assert!(creates_at(&proxy, "/from-flag").await);
        assert!(!creates_at(&proxy, "/from-cwd").await);
    })
    .await;
}

#[tokio::test]
async fn the_listen_flag_beats_the_environment_which_beats_the_file() {
    bounded(async {
        // A port already taken: the binary could not start if the losing layer won.
        let (_held, port) = held_port();
        let taken = format!("127.0.0.1:{port}");
        let file = format!("listen = \"{taken}\"\n");
        let env_taken = [("MCP_PROXY_LISTEN", taken.as_str())];
        let (env_over_file, flag_over_env) = tokio::join!(
            serve(
                WorkDir::with_proxy_toml(&file),
                &[],
                &[("MCP_PROXY_LISTEN", "127.0.0.1:0")],
            ),
            serve(WorkDir::new(), &["--listen", "127.0.0.1:0"], &env_taken,),
        );
        for proxy in [&env_over_file, &flag_over_env] {
            assert_ne!(proxy.listen.port(), port);
            assert!(proxy.listen.ip().is_loopback());
            assert_eq!(proxy.get("/healthz").await.0, 200);
        }
    })
    .await;
}

#[tokio::test]
async fn the_upstream_flag_beats_the_environment() {
    bounded(async {
        let demo = serve(WorkDir::new(), &["--listen", "127.0.0.1:0"], &[]).await;
        // Nothing listens there: the proxy could not create a session if it were used.
        let closed = {
            let (listener, port) = held_port();
            drop(listener);
            format!("http://127.0.0.1:{port}/mcp")
        };
        let proxy = serve(
            WorkDir::new(),
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &demo.startup("upstream"),
            ],
            &[("MCP_PROXY_UPSTREAM__URL", closed.as_str())],
        )
        .await;
        assert_eq!(proxy.startup("upstream"), demo.startup("upstream"));
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        assert_eq!(client.tool_text("echo", json!({"msg": "via"})).await, "via");
    })
    .await;
}

// === 3. with no upstream configured, the embedded demo server ===

#[tokio::test]
async fn the_embedded_demo_server_serves_the_whole_session_lifecycle() {
    bounded(async {
        let proxy = serve(WorkDir::new(), &["--listen", "127.0.0.1:0"], &[]).await;
        assert!(proxy.listen.ip().is_loopback());
        assert_eq!(proxy.startup("endpoint"), proxy.url("/mcp"));
        // The start-up line says where to point a client, and that the demo answers.
        assert_eq!(
            proxy.startup("message"),
            format!(
                "mcp-session-proxy is serving {} in front of the embedded demo server",
                proxy.url("/mcp")
            )
        );
        let hint = "no upstream is configured, so the embedded demo server answers (tools \
                    echo, counter, slow, sample, sleep, whoami, announce, change_tools); put the \
                    proxy in front of your own server with --upstream URL, or -- COMMAND ARGS \
                    for a stdio server";
        assert!(
            eventually(Duration::from_secs(2), || proxy.log().contains(hint)).await,
            "{}",
            proxy.log()
        );
        let upstream: http::Uri = proxy.startup("upstream").parse().unwrap();
        assert_eq!(upstream.scheme_str(), Some("http"));
        assert_eq!(upstream.host(), Some("127.0.0.1"));
        assert_eq!(upstream.path(), "/mcp");
        assert_ne!(upstream.port_u16(), Some(proxy.listen.port()));

        let (status, body) = proxy.get("/healthz").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"status": "ok"})
        );
        // /readyz as the book shows it (docs/src/observe/logs.md, the operations endpoints).
        let (status, body) = proxy.get("/readyz").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"status": "ready", "checks": {"config": "ok", "upstream": "ok", "store": "ok"},
                   "store": "memory", "upstream": proxy.startup("upstream"),
                   "upstreams": {"default": {"status": "ok", "default": true, "era": "legacy",
                                             "replicas": {(proxy.startup("upstream")): "ok"},
                                             "eras": {(proxy.startup("upstream")): "legacy"}}}})
        );

        // sessions/create
        let created = proxy
            .post(
                "/mcp",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
            )
            .await;
        assert_eq!(created.status, 200, "{}", created.text);
        let session = created.json()["result"]["session"].clone();
        let id = session["sessionId"].as_str().unwrap().to_owned();
        let state = session["state"].as_str().unwrap().to_owned();
        assert!(!id.is_empty() && !state.is_empty(), "{session}");
        humantime::parse_rfc3339(session["expiresAt"].as_str().unwrap()).unwrap();
        assert_eq!(created.header("mcp-session-id"), Some(id.as_str()));

        // tools/call in the session
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.session_id = Some(id.clone());
        client.state = Some(state);
        let echoed = client.call_tool("echo", json!({"msg": "hi"})).await;
        assert_eq!(echoed["result"]["content"][0]["text"], "hi", "{echoed}");
        let stamped = session_meta(&echoed);
        assert_eq!(stamped["sessionId"], id.as_str(), "{echoed}");
        assert!(stamped["state"].is_string(), "{echoed}");
        assert!(stamped["expiresAt"].is_string(), "{echoed}");

        // sessions/delete, twice
        let deleted = client.delete().await;
        assert_eq!(deleted.status, 200, "{}", deleted.text);
        assert_eq!(deleted.json()["result"], json!({}), "{}", deleted.text);
        let again = client.delete().await;
        assert_eq!(again.status, 404, "{}", again.text);
        assert_eq!(again.error_code(), Some(-32043), "{}", again.text);
    })
    .await;
}

// === 3b. a stdio server that cannot start is reported in its own terms ===

/// The proxy in front of the stdio command `command`, its answer to `sessions/create`
/// (HTTP status and JSON-RPC error) and, after a graceful stop, its log.
async fn create_with_stdio(command: &[&str], env: &[(&str, &str)]) -> (u16, Value, String) {
    let mut args = vec!["--listen", "127.0.0.1:0", "--"];
    args.extend_from_slice(command);
    let mut proxy = serve(WorkDir::new(), &args, env).await;
    let reply = proxy
        .post(
            "/mcp",
            &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        )
        .await;
    proxy.sigterm_handled().await;
    proxy.signal("TERM");
    let status = proxy.exits_within(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    (reply.status, reply.json()["error"].clone(), proxy.log())
}

/// The `error` field of every JSON log line with `message`.
fn logged_errors(log: &str, message: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|entry| entry["fields"]["message"] == message)
        .map(|entry| entry["fields"]["error"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn a_stdio_server_that_exits_is_reported_with_its_status_and_last_stderr_line() {
    bounded(async {
        let (status, error, log) = create_with_stdio(
            &[
                "sh",
                "-c",
                "echo 'starting' >&2; echo 'Error: missing API key' >&2; exit 3",
            ],
            &[],
        )
        .await;
        let said = "the stdio server exited with status 3 before answering initialize; its \
                    last stderr line: \"Error: missing API key\"";
        assert_eq!(status, 502, "{error}");
        assert_eq!(error["code"], -32603, "{error}");
        assert_eq!(
            error["message"],
            format!("Upstream error: {said}"),
            "{error}"
        );
        assert_eq!(error["data"]["exitCode"], 3, "{error}");
        assert_eq!(error["data"]["stderr"], "Error: missing API key", "{error}");
        assert_eq!(error["data"]["detail"], said, "{error}");
        // The log says the same, once for the failing start and once for the request.
        assert_eq!(
            logged_errors(&log, "the stdio server failed to start"),
            [said],
            "{log}"
        );
        assert_eq!(
            logged_errors(&log, "upstream failure"),
            [format!("Upstream error: {said}")],
            "{log}"
        );
        assert!(!log.contains("HTTP 502"), "{log}");
    })
    .await;
}

#[tokio::test]
async fn a_stdio_command_that_does_not_exist_is_reported_as_not_found() {
    bounded(async {
        let (status, error, _) =
            create_with_stdio(&["/nonexistent/mcp-server", "--flag"], &[]).await;
        assert_eq!(status, 502, "{error}");
        assert_eq!(
            error["message"],
            "Upstream error: the stdio server's command \"/nonexistent/mcp-server\" was not \
             found; is it installed, and on the proxy's PATH (or give its full path)?",
            "{error}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_stdio_server_refusing_initialize_is_reported_with_its_error() {
    bounded(async {
        let script = "import sys, json\n\
                      request = json.loads(sys.stdin.readline())\n\
                      print(json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'error': \
                      {'code': -32602, 'message': 'Unsupported protocol version'}}), flush=True)\n\
                      sys.stdin.read()\n";
        let (status, error, _) = create_with_stdio(&["python3", "-c", script], &[]).await;
        assert_eq!(status, 502, "{error}");
        assert_eq!(
            error["message"],
            "Upstream error: the stdio server answered initialize with error -32602: \
             \"Unsupported protocol version\"",
            "{error}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_stdio_server_silent_at_initialize_is_reported_as_timed_out() {
    bounded(async {
        let (status, error, _) = create_with_stdio(
            &["sh", "-c", "echo 'loading the model...' >&2; exec sleep 5"],
            &[("MCP_PROXY_UPSTREAM__TIMEOUT", "500ms")],
        )
        .await;
        assert_eq!(status, 504, "{error}");
        assert_eq!(
            error["message"],
            "Upstream error: the stdio server did not answer initialize within 500ms; its last \
             stderr line: \"loading the model...\"",
            "{error}"
        );
    })
    .await;
}

#[tokio::test]
async fn the_text_log_has_no_colours_when_stderr_is_not_a_terminal() {
    bounded(async {
        let dir = WorkDir::new();
        let (free, port) = held_port();
        drop(free);
        let listen = format!("127.0.0.1:{port}");
        // Text logs, the default; stderr is a pipe here, as under systemd or in a container.
        let mut child = command(dir.path(), &["--listen", &listen], &[])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = String::new();
        let serving = tokio::time::timeout(STARTUP_LIMIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                log.push_str(&line);
                log.push('\n');
                if line.contains(SERVING) {
                    return Some(line);
                }
            }
            None
        })
        .await
        .unwrap_or_else(|_| panic!("no start-up line within {STARTUP_LIMIT:?}: {log}"))
        .unwrap_or_else(|| panic!("the proxy ended before serving: {log}"));
        assert!(
            !log.contains('\x1b'),
            "ANSI escapes in a piped log: {log:?}"
        );
        let message = serving
            .split_once("mcp_session_proxy: ")
            .map(|(_, message)| message)
            .unwrap_or_else(|| panic!("{serving:?}"));
        assert!(
            message.starts_with(&format!(
                "mcp-session-proxy is serving http://{listen}/mcp in front of the embedded demo \
                 server listen={listen} endpoint=http://{listen}/mcp upstream=http://127.0.0.1:"
            )),
            "{serving:?}"
        );
        child.kill().await.unwrap();
    })
    .await;
}

// === 4. SIGTERM ===

/// Once the proxy answers requests, SIGTERM must be a graceful shutdown (exit code 0),
/// never the default disposition (killed by signal 15). Made deterministic by holding the
/// binary at its first stderr write, as a stalled log pipe would: stderr is a pipe the test
/// has filled, so the start-up line cannot be written while the listener already serves.
#[tokio::test]
async fn sigterm_is_graceful_as_soon_as_the_proxy_answers() {
    bounded(async {
        let dir = WorkDir::new();
        let (free, port) = held_port();
        drop(free);
        let listen = format!("127.0.0.1:{port}");

        let (mut stderr, mut writer) = std::io::pipe().unwrap();
        let (filled_tx, filled) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            // 64 KiB: the capacity of a Linux pipe.
            let line = [b"#".repeat(63), b"\n".to_vec()].concat();
            for _ in 0..1024 {
                std::io::Write::write_all(&mut writer, &line).unwrap();
            }
            let _ = filled_tx.send(writer);
        });
        let writer = tokio::time::timeout(Duration::from_secs(2), filled)
            .await
            .expect("could not fill a 64 KiB pipe")
            .unwrap();

        let mut command = command(
            dir.path(),
            &["--listen", &listen],
            &[("MCP_PROXY_LOG__FORMAT", "json")],
        );
        command.stdout(Stdio::null()).stderr(writer);
        let mut child = command.spawn().unwrap();
        drop(command);
        let pid = child.id().unwrap();

        // Serving: the listener answers (the start-up line is still unwritten).
        let http = http_client();
        let deadline = Instant::now() + STARTUP_LIMIT;
        loop {
            let answer = http.get(format!("http://{listen}/healthz")).send().await;
            if answer.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "the proxy exited at start-up"
            );
            assert!(Instant::now() < deadline, "/healthz never answered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let had_handler = catches_sigterm(pid);

        signal(pid, "TERM");
        let (drained_tx, drained) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            let _ = drained_tx.send(text);
        });
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .expect("the proxy did not exit within 5 s of SIGTERM")
            .unwrap();
        let log = drained.await.unwrap_or_default();
        let log = log.trim_start_matches(['#', '\n']);
        assert_eq!(
            status.code(),
            Some(0),
            "SIGTERM while serving ended the proxy with {status:?} (SIGTERM handler installed \
             when /healthz answered: {had_handler}); stderr after the filler:\n{log}"
        );
        assert!(log.contains("shutting down"), "{log}");
    })
    .await;
}

#[tokio::test]
async fn sigterm_ends_an_idle_proxy_with_exit_code_0() {
    bounded(async {
        let mut proxy = serve(WorkDir::new(), &["--listen", "127.0.0.1:0"], &[]).await;
        assert_eq!(proxy.get("/healthz").await.0, 200);
        proxy.sigterm_handled().await;
        proxy.signal("TERM");
        let status = proxy.exits_within(Duration::from_secs(3)).await;
        assert_eq!(status.code(), Some(0), "{status:?}\n{}", proxy.log());
        assert!(proxy.log().contains("shutting down"), "{}", proxy.log());
    })
    .await;
}

#[tokio::test]
async fn sigterm_lets_a_short_request_in_flight_finish() {
    bounded(async {
        let mut proxy = serve(WorkDir::new(), &["--listen", "127.0.0.1:0"], &[]).await;
        proxy.sigterm_handled().await;
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        let call = client.request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 700}}),
        );
        let terminate = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            proxy.signal("TERM");
        };
        let (reply, ()) = tokio::join!(call, terminate);
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(
            final_message(&reply)["result"]["content"][0]["text"],
            "slept 700 ms",
            "{}",
            reply.text
        );
        let status = proxy.exits_within(Duration::from_secs(3)).await;
        assert_eq!(status.code(), Some(0), "{status:?}\n{}", proxy.log());
    })
    .await;
}

/// Once the proxy drains, the next answer on every kept-alive HTTP/1.1 connection says
/// `Connection: close` — on a connection its own loop serves and on one it handed to
/// hyper (a request whose body had not arrived with its head), where the header comes
/// from a different place.
#[tokio::test]
async fn a_draining_proxy_closes_kept_alive_connections_after_their_next_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Bytes up to and with `end`.
    async fn read_to(stream: &mut TcpStream, end: &[u8]) -> String {
        let mut read = Vec::new();
        let mut byte = [0u8; 1];
        while !read.ends_with(end) {
            assert_eq!(
                stream.read(&mut byte).await.unwrap(),
                1,
                "closed mid-answer"
            );
            read.push(byte[0]);
        }
        String::from_utf8(read).unwrap()
    }
    /// One answer's head (lower-cased) after its body is read (by its `Content-Length`,
    /// or chunk by chunk).
    async fn answer(stream: &mut TcpStream) -> String {
        let head = read_to(stream, b"\r\n\r\n").await.to_ascii_lowercase();
        if head.contains("transfer-encoding: chunked") {
            loop {
                let size = read_to(stream, b"\r\n").await;
                let size = usize::from_str_radix(size.trim_end(), 16).unwrap();
                let mut chunk = vec![0u8; size + 2];
                stream.read_exact(&mut chunk).await.unwrap();
                if size == 0 {
                    return head;
                }
            }
        }
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |n| n.trim().parse().unwrap());
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.unwrap();
        head
    }
    const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n";

    bounded(async {
        // Two workers: a SO_REUSEPORT group of two listeners, whatever the machine.
        let mut proxy = serve(
            WorkDir::new(),
            &["--listen", "127.0.0.1:0"],
            &[("MCP_PROXY_WORKERS", "2")],
        )
        .await;
        proxy.sigterm_handled().await;
        // Served by the proxy's own loop.
        let mut lean = TcpStream::connect(proxy.listen).await.unwrap();
        lean.write_all(GET).await.unwrap();
        let first = answer(&mut lean).await;
        assert!(!first.contains("connection: close"), "{first}");
        // Handed to hyper: the body comes after the head.
        let mut hyper = TcpStream::connect(proxy.listen).await.unwrap();
        let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
            ping.len()
        );
        hyper.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        hyper.write_all(ping).await.unwrap();
        let first = answer(&mut hyper).await;
        assert!(!first.contains("connection: close"), "{first}");

        proxy.signal("TERM");
        // Draining once a listener is let go: a new connection fails. The two workers'
        // listeners (a SO_REUSEPORT group) close one after another: a connection queued
        // on the first to close is reset, while the other may still accept; once both
        // are gone, one is refused. Either failure must find every kept-alive connection
        // draining, not only those of the listener that closed.
        let deadline = Instant::now() + Duration::from_secs(2);
        while TcpStream::connect(proxy.listen).await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "still accepting 2 s after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for (stream, served_by) in [(&mut lean, "the proxy's loop"), (&mut hyper, "hyper")] {
            if let Err(e) = stream.write_all(GET).await {
                panic!("{served_by}: {e}\n{}", proxy.log());
            }
            let next = answer(stream).await;
            assert!(
                next.contains("connection: close"),
                "served by {served_by} while draining:\n{next}"
            );
            let mut rest = [0u8; 1];
            assert_eq!(
                stream.read(&mut rest).await.unwrap(),
                0,
                "{served_by} kept it open"
            );
        }
        let status = proxy.exits_within(Duration::from_secs(3)).await;
        assert_eq!(status.code(), Some(0), "{status:?}\n{}", proxy.log());
    })
    .await;
}

#[tokio::test]
async fn sigterm_during_an_event_stream_exits_0_within_the_grace() {
    bounded(async {
        let grace = Duration::from_secs(1);
        let mut proxy = serve(
            WorkDir::new(),
            &["--listen", "127.0.0.1:0"],
            &[("MCP_PROXY_SHUTDOWN_GRACE", "1s")],
        )
        .await;
        proxy.sigterm_handled().await;
        let mut client = SessionClient::new(proxy.url("/mcp"));
        client.create().await;
        // 50 steps of 100 ms: about 5 s, far longer than the grace.
        let response = client
            .request_streaming(
                "tools/call",
                json!({"name": "slow", "arguments": {"steps": 50, "interval_ms": 100},
                       "_meta": {"progressToken": "drain"}}),
            )
            .await;
        assert_eq!(response.status(), 200);
        let mut body = response.bytes_stream();
        let mut text = String::new();
        while !text.contains("\"progress\":2,") {
            let chunk = body.next().await.expect("the stream ended early").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }

        let signalled = Instant::now();
        proxy.signal("TERM");
        // The stream goes on during the grace, then ends (cleanly or not).
        let mut progress_after_signal = 0;
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else { break };
            let chunk = String::from_utf8_lossy(&chunk);
            progress_after_signal += chunk.matches("notifications/progress").count();
            text.push_str(&chunk);
        }
        let stream_ended = signalled.elapsed();
        let status = proxy.exits_within(grace + Duration::from_secs(3)).await;
        let exited = signalled.elapsed();

        assert_eq!(status.code(), Some(0), "{status:?}\n{}", proxy.log());
        assert!(
            exited < grace + Duration::from_millis(1500),
            "exit took {exited:?} with a grace of {grace:?}\n{}",
            proxy.log()
        );
        assert!(
            stream_ended < grace + Duration::from_millis(1500),
            "the stream stayed open {stream_ended:?} after SIGTERM"
        );
        assert!(
            progress_after_signal > 0,
            "the in-flight stream was cut at once instead of getting the grace:\n{text}"
        );
        assert!(
            !text.contains("done after 50 steps"),
            "the 5 s call finished within a 1 s grace?\n{text}"
        );
        // What the client got is a well-formed event stream up to where it ended.
        assert!(sse_messages(&text).len() >= 2, "{text}");
    })
    .await;
}

// === 5. --help and --version ===

#[tokio::test]
async fn help_and_version() {
    bounded(async {
        let dir = WorkDir::new();
        let help = run_to_exit(dir.path(), &["--help"], &[]).await;
        assert_eq!(help.status.code(), Some(0), "{help:?}");
        let text = String::from_utf8_lossy(&help.stdout);
        for flag in ["--upstream", "--listen", "--config"] {
            assert!(
                text.contains(flag),
                "--help does not mention {flag}:\n{text}"
            );
        }

        let version = run_to_exit(dir.path(), &["--version"], &[]).await;
        assert_eq!(version.status.code(), Some(0), "{version:?}");
        assert_eq!(
            String::from_utf8_lossy(&version.stdout).trim(),
            format!("mcp-session-proxy {}", env!("CARGO_PKG_VERSION"))
        );
    })
    .await;
}

// === 6. the README's curl walkthrough ===

/// What `grep -o 'mcps_[A-Za-z0-9_-]*' | head -1` prints.
fn grep_session_id(text: &str) -> Option<String> {
    let start = text.find("mcps_")?;
    Some(
        text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect(),
    )
}

/// One `curl -s http://…/mcp -H 'Content-Type: application/json'
/// -H 'Accept: application/json, text/event-stream' -d BODY`.
async fn curl(http: &reqwest::Client, url: &str, body: String) -> Reply {
    post_raw(http, url, body.into_bytes(), &HeaderMap::new()).await
}

/// The walkthrough of README.md ("The session lifecycle with curl"), request for request,
/// against the binary as `cargo run --release` starts it: in the repository root, so with
/// the repository's `proxy.toml` (only the port and the log format are changed).
#[tokio::test]
async fn the_readme_walkthrough() {
    bounded(async {
        let proxy = serve_in_the_repository().await;
        let url = proxy.url("/mcp");
        assert_eq!(proxy.startup("endpoint"), url);
        let http = http_client();

        // 1. Create a session.
        let created = curl(
            &http,
            &url,
            r#"{"jsonrpc":"2.0","id":1,"method":"sessions/create"}"#.to_owned(),
        )
        .await;
        assert_eq!(created.status, 200, "{}", created.text);
        let body = created.json();
        let sid = grep_session_id(&created.text).expect("no mcps_ id in the answer");
        assert_eq!(body["result"]["session"]["sessionId"], sid.as_str(), "{body}");
        assert_eq!(body["id"], 1);
        let session = body["result"]["session"].as_object().unwrap();
        let keys: Vec<&str> = session.keys().map(String::as_str).collect();
        assert_eq!(keys, ["sessionId", "expiresAt", "state"], "{body}");
        let state = session["state"].as_str().unwrap().to_owned();

        // 2. Use it, sending the latest state back.
        let echoed = curl(
            &http,
            &url,
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"msg":"hi"}},"_meta":{{"io.modelcontextprotocol/session":{{"sessionId":"{sid}","state":"{state}"}}}}}}}}"#
            ),
        )
        .await;
        assert_eq!(echoed.status, 200, "{}", echoed.text);
        let echoed = echoed.json();
        assert_eq!(echoed["id"], 2);
        assert_eq!(
            echoed["result"]["content"],
            json!([{"type": "text", "text": "hi"}]),
            "{echoed}"
        );
        let stamp = session_meta(&echoed).as_object().unwrap();
        let keys: Vec<&str> = stamp.keys().map(String::as_str).collect();
        assert_eq!(keys, ["sessionId", "state", "expiresAt"], "{echoed}");
        assert_eq!(stamp["sessionId"], sid.as_str());
        let state = stamp["state"].as_str().unwrap().to_owned();

        // 3. A streaming tool.
        let streamed = curl(
            &http,
            &url,
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"slow","arguments":{{"steps":3}},"_meta":{{"progressToken":"p1","io.modelcontextprotocol/session":{{"sessionId":"{sid}","state":"{state}"}}}}}}}}"#
            ),
        )
        .await;
        assert_eq!(streamed.status, 200, "{}", streamed.text);
        assert!(
            streamed
                .header("content-type")
                .unwrap_or("")
                .starts_with("text/event-stream"),
            "{:?}",
            streamed.headers
        );
        assert!(
            streamed.text.contains("event: message\ndata: {"),
            "{}",
            streamed.text
        );
        let events = streamed.events();
        let progress: Vec<&Value> = events
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        let expected: Vec<Value> = (1..=3)
            .map(|step| {
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": "p1", "progress": step, "total": 3,
                                  "message": format!("step {step} of 3")}})
            })
            .collect();
        assert_eq!(
            progress,
            expected.iter().collect::<Vec<_>>(),
            "{}",
            streamed.text
        );
        let last = events.last().unwrap();
        assert_eq!(last["id"], 3, "{}", streamed.text);
        assert_eq!(
            last["result"]["content"],
            json!([{"type": "text", "text": "done after 3 steps"}]),
            "{last}"
        );
        assert_eq!(session_meta(last)["sessionId"], sid.as_str(), "{last}");
        let first_progress = events
            .iter()
            .position(|m| m["method"] == "notifications/progress")
            .unwrap();
        assert!(first_progress < events.len() - 1, "{}", streamed.text);

        // 4. Delete it; any later use is -32043.
        let deleted = curl(
            &http,
            &url,
            format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"sessions/delete","params":{{"_meta":{{"io.modelcontextprotocol/session":{{"sessionId":"{sid}","state":"{state}"}}}}}}}}"#
            ),
        )
        .await;
        assert_eq!(deleted.status, 200, "{}", deleted.text);
        assert_eq!(deleted.json(), json!({"jsonrpc": "2.0", "id": 4, "result": {}}));

        let gone = curl(
            &http,
            &url,
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/session":{{"sessionId":"{sid}"}}}}}}}}"#
            ),
        )
        .await;
        assert_eq!(
            gone.json(),
            json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32043,
                   "message": "Session not found", "data": {"sessionId": sid}}}),
            "{}",
            gone.text
        );
        assert_eq!(gone.status, 404, "{}", gone.text);
    })
    .await;
}

// === thread per core: every worker serves, sessions are shared ===

#[tokio::test]
async fn each_worker_has_its_own_thread_and_serves_the_shared_sessions() {
    bounded(async {
        let proxy = serve(
            WorkDir::new(),
            &["--listen", "127.0.0.1:0"],
            &[("MCP_PROXY_WORKERS", "3")],
        )
        .await;
        // Three worker threads, each named for its worker.
        let pid = proxy.pid();
        let mut workers: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| name.starts_with("mcp-worker-"))
            .collect();
        workers.sort();
        assert_eq!(workers, ["mcp-worker-1", "mcp-worker-2", "mcp-worker-3"]);

        // One session, used over many new connections: whichever worker's listener the
        // kernel hands a connection to, the session is there.
        let created = proxy
            .post(
                "/mcp",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
            )
            .await;
        assert_eq!(created.status, 200, "{}", created.text);
        let session = created.json()["result"]["session"].clone();
        let id = session["sessionId"].as_str().unwrap().to_owned();
        let mut state = session["state"].as_str().unwrap().to_owned();
        for i in 0..12 {
            let mut client = SessionClient::new(proxy.url("/mcp"));
            client.session_id = Some(id.clone());
            client.state = Some(state.clone());
            let echoed = client
                .call_tool("echo", json!({"msg": i.to_string()}))
                .await;
            assert_eq!(
                echoed["result"]["content"][0]["text"],
                i.to_string(),
                "{echoed}"
            );
            state = session_meta(&echoed)["state"].as_str().unwrap().to_owned();
        }
    })
    .await;
}

#[tokio::test]
async fn a_wildcard_listen_sharing_sessions_needs_the_address_other_replicas_reach() {
    bounded(async {
        let key = "7".repeat(64);
        let dir = WorkDir::with_proxy_toml(&format!(
            "[session]\nstore = \"sealed\"\nsealed_keys = [\"{key}\"]\n"
        ));
        // As the Docker image sets it: every interface.
        let wildcard = [("MCP_PROXY_LISTEN", "0.0.0.0:0")];
        let stderr = refused(dir.path(), &[], &wildcard).await;
        let problems = problem_lines(&stderr);
        assert!(
            problems.len() == 1
                && problems[0].starts_with("cluster.advertise")
                && problems[0].contains("wildcard address (0.0.0.0:0)")
                && problems[0].contains("other proxy replicas cannot reach this one at 127.0.0.1"),
            "{stderr}"
        );
        assert_eq!(refused(dir.path(), &["check"], &wildcard).await, stderr);
        // Told where others reach it, it starts.
        let output = run_to_exit(
            dir.path(),
            &["check"],
            &[
                ("MCP_PROXY_LISTEN", "0.0.0.0:0"),
                ("MCP_PROXY_CLUSTER__ADVERTISE", "http://10.0.0.5:8080"),
            ],
        )
        .await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    })
    .await;
}

/// The container image's build stage copies what cargo reads of the workspace: with
/// only the files its `COPY` lines put in its `WORKDIR`, where they put them, the
/// manifests load (the workspace's members included) and name the binary the stage
/// builds. No Docker here: `cargo metadata --no-deps` reads the manifests as `cargo
/// build` does first. `COPY` is modelled as Docker reads it: sources and a destination,
/// flags left out; a directory's contents go to the destination, a file into it when it
/// ends in `/` (or there are several sources), else to it; a source `.dockerignore`
/// leaves out, or the whole context, fails the test.
#[tokio::test]
async fn the_container_build_copies_every_manifest_cargo_reads() {
    bounded(async {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dockerfile = std::fs::read_to_string(repo.join("Dockerfile")).unwrap();
        let ignored: Vec<String> = std::fs::read_to_string(repo.join(".dockerignore"))
            .unwrap_or_default()
            .lines()
            .map(|line| line.trim().trim_end_matches('/').to_owned())
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .collect();
        let build_stage: Vec<&str> = dockerfile
            .lines()
            .skip_while(|line| !(line.starts_with("FROM ") && line.ends_with(" AS build")))
            .skip(1)
            .take_while(|line| !line.starts_with("FROM "))
            .collect();
        let mut workdir = "/".to_owned();
        let context = WorkDir::new();
        let mut copies = 0;
        for line in &build_stage {
            if let Some(dir) = line.strip_prefix("WORKDIR ") {
                workdir = dir.trim().to_owned();
            }
            let Some(copy) = line.strip_prefix("COPY ") else {
                continue;
            };
            let words: Vec<&str> = copy
                .split_whitespace()
                .filter(|word| !word.starts_with("--"))
                .collect();
            let (destination, sources) = words.split_last().unwrap();
            let into = Path::new(&workdir).join(destination);
            let into = into.strip_prefix("/").unwrap();
            let into_a_directory = destination.ends_with('/') || sources.len() > 1;
            for source in sources {
                assert!(
                    *source != "." && !ignored.iter().any(|i| Path::new(source).starts_with(i)),
                    "COPY {source}: the whole context, or what .dockerignore leaves out"
                );
                let from = repo.join(source);
                let mut to = context.path().join(into);
                let status = if from.is_dir() {
                    // `cp -r DIR/. TO`: the directory's contents, into TO.
                    std::fs::create_dir_all(&to).unwrap();
                    tokio::process::Command::new("cp")
                        .arg("-r")
                        .arg(format!("{}/.", from.display()))
                        .arg(&to)
                        .status()
                        .await
                        .unwrap()
                } else {
                    if into_a_directory {
                        to.push(Path::new(source).file_name().unwrap());
                    }
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    tokio::process::Command::new("cp")
                        .arg(&from)
                        .arg(&to)
                        .status()
                        .await
                        .unwrap()
                };
                assert!(status.success(), "cp {source}");
                copies += 1;
            }
        }
        assert!(copies > 0, "no COPY in the stage `AS build`");
        let root = context
            .path()
            .join(Path::new(&workdir).strip_prefix("/").unwrap());
        // Cargo as the test's build ran it (its own variable at run time, when set).
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let metadata = tokio::process::Command::new(cargo)
            .args([
                "metadata",
                "--no-deps",
                "--offline",
                "--format-version",
                "1",
            ])
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&metadata.stderr);
        assert!(metadata.status.success(), "{stderr}");
        let metadata: Value = serde_json::from_slice(&metadata.stdout).unwrap();
        let binaries: Vec<&str> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|package| package["targets"].as_array().unwrap())
            .filter(|target| target["kind"] == json!(["bin"]))
            .filter_map(|target| target["name"].as_str())
            .collect();
        assert_eq!(binaries, ["mcp-session-proxy"], "{metadata}");
    })
    .await;
}
