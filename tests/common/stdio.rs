//! The real proxy in front of a stdio command, and the commands the tests run as its
//! children.
//!
//! Every child carries the test's [`Marker`] in its environment, so [`StdioProxy::children`]
//! counts exactly the processes this proxy started (and what they started). The
//! commands: `@modelcontextprotocol/server-everything` in stdio mode and the FastMCP
//! fixture with `--stdio` (both installed by `tests/interop/setup.sh`), and
//! `tests/interop/misbehaving_server.py` (standard library only), which crashes, hangs,
//! floods, writes garbage, ignores SIGTERM and starts a grandchild on demand.

use std::time::{Duration, Instant};

use mcp_session_proxy::config::{CommandSpec, Config, Target};
use mcp_session_proxy::{Running, start};
use serde_json::json;

use super::interop::{ensure_installed, everything_script, fastmcp_script, repo_root, tools_dir};
use super::procs::{Marker, Proc, marked, stat, this_process};
use super::{SessionClient, config_for, eventually_async, gauge};

/// Children started, initialized and waiting for a session.
pub const POOLED: &str = "mcp_proxy_pool_size{pool=\"stdio\"}";
/// Children alive, pooled or in a session: what `upstream.max_children` bounds.
pub const LIVE_CHILDREN: &str = "mcp_proxy_stdio_children";

/// `tests/interop/misbehaving_server.py` with `flags`.
pub fn misbehaving(marker: &Marker, flags: &[&str]) -> CommandSpec {
    let mut args = vec![
        repo_root()
            .join("tests/interop/misbehaving_server.py")
            .display()
            .to_string(),
    ];
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    CommandSpec {
        program: "python3".to_owned(),
        args,
        env: marker.env(),
        inherit_env: Vec::new(),
        cwd: None,
    }
}

/// `@modelcontextprotocol/server-everything` in stdio mode.
pub fn everything(marker: &Marker) -> CommandSpec {
    ensure_installed();
    CommandSpec {
        program: "node".to_owned(),
        args: vec![
            everything_script().display().to_string(),
            "stdio".to_owned(),
        ],
        env: marker.env(),
        inherit_env: Vec::new(),
        cwd: None,
    }
}

/// The FastMCP fixture (official Python SDK) with `--stdio`.
pub fn fastmcp(marker: &Marker) -> CommandSpec {
    ensure_installed();
    CommandSpec {
        program: tools_dir().join("venv/bin/python").display().to_string(),
        args: vec![fastmcp_script().display().to_string(), "--stdio".to_owned()],
        env: marker.env(),
        inherit_env: Vec::new(),
        cwd: None,
    }
}

/// A proxy in front of `command`: no pool, a short stop grace, a generous timeout.
pub fn stdio_config(command: CommandSpec) -> Config {
    let mut config = config_for("http://unused");
    config.upstream.target = Target::Stdio(command);
    config.upstream.pool_size = 0;
    config.upstream.stop_grace = Duration::from_millis(500);
    config.upstream.timeout = Duration::from_secs(10);
    config
}

/// A running proxy whose children carry a test's marker.
pub struct StdioProxy {
    pub proxy: Running,
    marker: String,
}

impl StdioProxy {
    pub async fn start(config: Config, marker: &Marker) -> StdioProxy {
        let proxy = start(config).await.expect("the proxy starts");
        StdioProxy {
            proxy,
            marker: marker.to_string(),
        }
    }

    pub fn url(&self) -> String {
        self.proxy.url()
    }

    pub fn client(&self) -> SessionClient {
        SessionClient::new(self.url())
    }

    /// The processes running with this proxy's marker: its children and theirs.
    pub fn children(&self) -> Vec<Proc> {
        marked(&self.marker)
    }

    /// A gauge of the proxy's `/metrics`, e.g. [`POOLED`].
    pub async fn gauge(&self, name: &str) -> Option<i64> {
        gauge(&self.proxy, name).await
    }

    /// Polls the gauge `name` until it reads `n` (10 s at most).
    pub async fn gauge_becomes(&self, name: &str, n: i64) -> bool {
        eventually_async(Duration::from_secs(10), move || async move {
            self.gauge(name).await == Some(n)
        })
        .await
    }

    /// Polls the pool gauge until it reads `n` (10 s at most).
    pub async fn pooled_becomes(&self, n: i64) -> bool {
        self.gauge_becomes(POOLED, n).await
    }

    /// `Running::shutdown`, timed.
    pub async fn shutdown(self) -> Duration {
        let started = Instant::now();
        self.proxy.shutdown().await;
        started.elapsed()
    }
}

/// The misbehaving child serving `c`'s session (its `pid` tool); asserts the child is
/// the proxy's own, i.e. this test process's.
pub async fn child_of(c: &mut SessionClient) -> Proc {
    let pid: i32 = c.tool_text("pid", json!({})).await.parse().unwrap();
    let child = stat(pid).unwrap_or_else(|| panic!("no process {pid}"));
    assert_eq!(
        child.ppid,
        this_process(),
        "the child is the proxy's (this test process's) own"
    );
    child
}
