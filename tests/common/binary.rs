//! The real `mcp-session-proxy` binary as a child process, for what only a process shows:
//! its open file descriptors, its open-file limit, being killed.
//!
//! [`ProxyProcess::start`] writes the given `proxy.toml` into a fresh directory, runs the
//! binary there (optionally under `prlimit --nofile`, which execs it: the pid is the
//! proxy's), with JSON logs, and waits for the start-up line. The process is SIGKILLed
//! when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const BIN: &str = env!("CARGO_BIN_EXE_mcp-session-proxy");
const SERVING: &str = "mcp-session-proxy is serving";

/// A running proxy binary.
pub struct ProxyProcess {
    child: Child,
    pid: u32,
    pub listen: SocketAddr,
    log: Arc<Mutex<String>>,
    dir: PathBuf,
}

impl ProxyProcess {
    /// Runs the binary with `toml` as its `proxy.toml` (`listen` defaults to a free
    /// loopback port), under an open-file limit of `nofile` when given, with `env`.
    pub async fn start(toml: &str, nofile: Option<u64>, env: &[(&str, &str)]) -> ProxyProcess {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mcp-session-proxy-process-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let toml = if toml.contains("listen =") {
            toml.to_owned()
        } else {
            format!("listen = \"127.0.0.1:0\"\n{toml}")
        };
        std::fs::write(dir.join("proxy.toml"), toml).unwrap();
        let mut command = match nofile {
            Some(n) => {
                let mut command = Command::new("prlimit");
                command.arg(format!("--nofile={n}:{n}")).arg("--").arg(BIN);
                command
            }
            None => Command::new(BIN),
        };
        command
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("MCP_PROXY_") || key == "RUST_LOG" {
                command.env_remove(key.as_ref());
            }
        }
        command.env("MCP_PROXY_LOG__FORMAT", "json");
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("the proxy binary starts");
        let pid = child.id().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (lines_tx, mut lines) = mpsc::unbounded_channel();
        let mut reader = BufReader::new(child.stderr.take().unwrap()).lines();
        let collected = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                collected.lock().push_str(&format!("{line}\n"));
                let _ = lines_tx.send(line);
            }
        });
        let started = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(line) = lines.recv().await {
                if let Ok(entry) = serde_json::from_str::<Value>(&line)
                    && entry["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(SERVING))
                {
                    return entry["fields"]["listen"].as_str()?.parse().ok();
                }
            }
            None
        })
        .await;
        let Ok(Some(listen)) = started else {
            panic!("the proxy did not start; its log:\n{}", log.lock());
        };
        ProxyProcess {
            child,
            pid,
            listen,
            log,
            dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `http://<listen><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    /// Everything it logged so far (JSON lines).
    pub fn log(&self) -> String {
        self.log.lock().clone()
    }

    /// Its log lines at `level` whose message contains `text`.
    pub fn logged(&self, level: &str, text: &str) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| entry["level"] == level)
            .filter(|entry| {
                entry["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(text))
            })
            .collect()
    }

    /// Its open file descriptors now.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|dir| dir.count())
            .unwrap_or(0)
    }

    /// Its CPU time so far (user + system).
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        // USER_HZ is 100 on every Linux this runs on.
        Duration::from_millis(ticks * 10)
    }

    /// SIGKILL, as the OOM killer or `kill -9` would; waits for the process to end.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
