//! The official MCP Inspector's connection CLI, `mcpdo` (`@modelcontextprotocol/inspector`
//! 2.12.0, pinned in `tests/interop/inspector/`), run on Node 22 with a private daemon and
//! a home of its own per test: [`Mcpdo`] (`connect`, any command on a connection, JSON
//! answers, answering a parked elicitation), [`Tail`] (`logging/tail` in the background).
//! The daemon is stopped by [`Mcpdo::stop`], and killed (by its environment marker) when a
//! test fails first.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::interop::{ensure_installed, tools_dir};
use super::procs::Marker;

/// One `mcpdo` command may take this long (node starting, a connect, a tool call).
pub const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// The Inspector's CLI with a private daemon and a home of its own.
pub struct Mcpdo {
    home: PathBuf,
    env: Vec<(String, String)>,
    // Dropped last: kills whatever of this test's Inspector processes is left.
    _marker: Marker,
}

impl Mcpdo {
    pub async fn new(test: &str) -> Mcpdo {
        ensure_installed();
        let marker = Marker::new(test);
        let home = std::env::temp_dir().join(format!("mcp-session-proxy-inspector-{}", &*marker));
        std::fs::create_dir_all(&home).unwrap();
        let mut env = marker.env();
        env.push(("HOME".into(), home.display().to_string()));
        // No OS keychain on a test machine; say so instead of letting it probe.
        env.push(("MCP_INSPECTOR_SECRET_STORE".into(), "file".into()));
        let mut mcpdo = Mcpdo {
            home,
            env,
            _marker: marker,
        };
        // `mcpdo private` prints `export NAME='value'` lines for a daemon of our own.
        let exports = mcpdo.output(&["private"]).await;
        for line in exports.lines() {
            let Some((name, value)) = line
                .strip_prefix("export ")
                .and_then(|rest| rest.split_once('='))
            else {
                continue;
            };
            let value = value.trim_matches('\'').to_owned();
            mcpdo.env.push((name.to_owned(), value));
        }
        assert!(
            mcpdo
                .env
                .iter()
                .any(|(name, _)| name == "MCP_INSPECTOR_DAEMON_DIR"),
            "`mcpdo private` printed no daemon directory:\n{exports}"
        );
        mcpdo
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let tools = tools_dir();
        let mut command = Command::new(tools.join("node22/node_modules/node/bin/node"));
        command
            .arg(tools.join(
                "inspector/node_modules/@modelcontextprotocol/inspector/clients/mcpdo/build/mcp-bin.js",
            ))
            .args(args)
            .current_dir(&self.home)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs `mcpdo args…`; its stdout, or a panic with everything it printed.
    pub async fn output(&self, args: &[&str]) -> String {
        let output = tokio::time::timeout(COMMAND_LIMIT, self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("mcpdo {args:?} took longer than {COMMAND_LIMIT:?}"))
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "mcpdo {args:?} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// Runs `mcpdo --format json args…`; its JSON answer.
    pub async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--format", "json"];
        all.extend_from_slice(args);
        let stdout = self.output(&all).await;
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("mcpdo {args:?} printed no JSON ({e}):\n{stdout}"))
    }

    /// `mcpdo --format json --connection <connection> args…`.
    pub async fn on(&self, connection: &str, args: &[&str]) -> Value {
        let mut all = vec!["--connection", connection];
        all.extend_from_slice(args);
        self.json(&all).await
    }

    /// `mcpdo logging/tail` on `connection`, running in the background.
    pub fn tail(&self, connection: &str) -> Tail {
        let mut child = self
            .command(&[
                "--format",
                "json",
                "--connection",
                connection,
                "logging/tail",
            ])
            .spawn()
            .unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let collected = text.clone();
        tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        Tail {
            _child: child,
            text,
        }
    }

    pub async fn stop(self) {
        self.output(&["daemon", "stop"]).await;
    }
}

impl Drop for Mcpdo {
    /// Removes the home and the private daemon's directory (its socket, lock and log).
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        if let Some((_, dir)) = self
            .env
            .iter()
            .find(|(name, _)| name == "MCP_INSPECTOR_DAEMON_DIR")
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What `mcpdo logging/tail` printed so far: one JSON entry per log notification.
pub struct Tail {
    _child: Child,
    text: Arc<Mutex<String>>,
}

impl Tail {
    /// The `data` of every complete `notifications/message` printed so far.
    pub fn logs(&self) -> Vec<(String, String)> {
        let text = self.text.lock().clone();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .filter(|entry| entry["message"]["method"] == "notifications/message")
            .map(|entry| {
                let params = &entry["message"]["params"];
                (
                    params["level"].as_str().unwrap_or("").to_owned(),
                    params["data"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// Waits until a log with `data` was printed; every log up to then.
    pub async fn until(&self, data: &str) -> Vec<(String, String)> {
        let deadline = tokio::time::Instant::now() + COMMAND_LIMIT;
        loop {
            let logs = self.logs();
            if logs.iter().any(|(_, d)| d == data) {
                return logs;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "logging/tail never printed {data:?}; it printed:\n{}",
                self.text.lock()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
