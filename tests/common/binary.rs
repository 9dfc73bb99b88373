//! The real `mcp-session-proxy` binary as a child process, for what only a process shows:
//! its exit code, signals, its open file descriptors, its open-file limit, being killed.
//!
//! [`ProxyProcess`] is the one way the tests run a serving binary: [`ProxyProcess::launch`]
//! says where (a fresh directory of its own by default), with which `proxy.toml`
//! (`listen` defaulting to a free loopback port), flags, environment and open-file limit
//! (`prlimit --nofile`, which execs the binary: the pid is the proxy's); the process logs
//! JSON, is waited for until it prints its start-up line, and is SIGKILLed when dropped.
//! [`command`] is the same child for a test that runs the binary to its end or watches
//! its start-up itself.
//!
//! Every child runs with nothing of the test's own configuration environment
//! (`MCP_PROXY_*`, `RUST_LOG`), so only what a test gives it configures it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Reply, http_client, post_json};

/// The proxy binary under test. This harness is a crate of its own, which cargo's
/// compile-time `CARGO_BIN_EXE_*` does not reach: the path comes from the run's
/// environment when the runner gives it (nextest's `NEXTEST_BIN_EXE_*`, or cargo's own
/// variable at run time), else from where cargo builds it, the profile's directory
/// (`target/debug/`), one above the `deps/` that holds the running test binary.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let named = [
            "NEXTEST_BIN_EXE_mcp-session-proxy",
            "CARGO_BIN_EXE_mcp-session-proxy",
        ]
        .into_iter()
        .find_map(std::env::var_os);
        if let Some(bin) = named {
            return PathBuf::from(bin);
        }
        let test = std::env::current_exe().expect("the test binary's path");
        let profile = test
            .parent()
            .and_then(Path::parent)
            .expect("the test binary is in target/<profile>/deps/");
        let bin = profile.join("mcp-session-proxy");
        assert!(bin.is_file(), "{} is missing", bin.display());
        bin
    })
}
/// How the start-up line's message begins.
pub const SERVING: &str = "mcp-session-proxy is serving";

/// A directory of this test alone, under the system's temporary directory (empty; the
/// caller removes it).
pub fn scratch_dir(what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mcp-session-proxy-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A working directory of this test alone, removed on drop.
pub struct WorkDir(PathBuf);

// === impl WorkDir ===

impl WorkDir {
    /// A fresh, empty one.
    #[allow(
        clippy::new_without_default,
        reason = "each makes a directory: a default would hide that"
    )]
    pub fn new() -> WorkDir {
        WorkDir(scratch_dir("work"))
    }

    /// `dir` (made by [`scratch_dir`], say), removed on drop from now on.
    pub fn adopt(dir: PathBuf) -> WorkDir {
        WorkDir(dir)
    }

    /// A fresh one holding `proxy.toml` with `contents` (which the binary reads by default).
    pub fn with_proxy_toml(contents: &str) -> WorkDir {
        let dir = WorkDir::new();
        dir.write("proxy.toml", contents);
        dir
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes the file `name` in it; its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary in `dir` with `args` and `env`, and nothing of the test's own configuration
/// environment: stdin closed, stdout and stderr piped, killed when dropped.
pub fn command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    prepare(&mut command, dir, env);
    command
}

/// Clears the configuration environment, sets `env`, runs in `dir`, and pipes stdout and
/// stderr.
fn prepare(command: &mut Command, dir: &Path, env: &[(&str, &str)]) {
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    without_proxy_settings(command);
    command.envs(env.iter().copied());
}

/// `command` without the test process's own `MCP_PROXY_*` and `RUST_LOG`.
pub fn without_proxy_settings(command: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("MCP_PROXY_") || key == "RUST_LOG" {
            command.env_remove(key.as_ref());
        }
    }
    command
}

/// Sends the signal `name` (`TERM`, `HUP`, `KILL`, `STOP`…) to `pid`.
pub fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}: {status}");
}

/// Whether process `pid` has a SIGTERM handler (`SigCgt` of /proc/PID/status).
pub fn catches_sigterm(pid: u32) -> bool {
    const SIGTERM: u32 = 15;
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (SIGTERM - 1)) != 0)
}

/// Where a [`ProxyProcess`] runs.
enum Dir {
    /// Its own, removed when the process is dropped.
    Own(WorkDir),
    /// One that outlives it (the repository root, say).
    Kept(PathBuf),
}

/// How to start a [`ProxyProcess`]; made by [`ProxyProcess::launch`].
pub struct Launch {
    dir: Option<Dir>,
    toml: Option<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    nofile: Option<u64>,
    startup: Duration,
}

// === impl Launch ===

impl Launch {
    /// Writes `toml` as the `proxy.toml` of its directory; a top-level `listen` defaults
    /// to a free loopback port.
    pub fn toml(mut self, toml: &str) -> Launch {
        self.toml = Some(toml.to_owned());
        self
    }

    /// Runs it in `dir`, removed when the process is dropped (a fresh one by default).
    pub fn dir(mut self, dir: WorkDir) -> Launch {
        self.dir = Some(Dir::Own(dir));
        self
    }

    /// Runs it in `dir`, which it leaves as it is (give no [`Launch::toml`] then).
    pub fn cwd(mut self, dir: &Path) -> Launch {
        self.dir = Some(Dir::Kept(dir.to_owned()));
        self
    }

    /// Its command-line arguments.
    pub fn args(mut self, args: &[&str]) -> Launch {
        self.args = args.iter().map(|&a| a.to_owned()).collect();
        self
    }

    /// Environment variables (`MCP_PROXY_*`), after `MCP_PROXY_LOG__FORMAT=json`.
    pub fn env(mut self, env: &[(&str, &str)]) -> Launch {
        self.env = env
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        self
    }

    /// Runs it under an open-file limit of `nofile` (soft and hard).
    pub fn nofile(mut self, nofile: u64) -> Launch {
        self.nofile = Some(nofile);
        self
    }

    /// How long it may take to print its start-up line (10 s by default).
    pub fn startup_within(mut self, within: Duration) -> Launch {
        self.startup = within;
        self
    }

    /// Starts it and waits for its start-up line.
    pub async fn start(self) -> ProxyProcess {
        let dir = self.dir.unwrap_or_else(|| Dir::Own(WorkDir::new()));
        let cwd = match &dir {
            Dir::Own(own) => own.path().to_owned(),
            Dir::Kept(path) => path.clone(),
        };
        if let Some(toml) = &self.toml {
            assert!(
                matches!(dir, Dir::Own(_)),
                "a proxy.toml is written only into a directory of the test's own"
            );
            let toml = if has_top_level_listen(toml) {
                toml.clone()
            } else {
                format!("listen = \"127.0.0.1:0\"\n{toml}")
            };
            std::fs::write(cwd.join("proxy.toml"), toml).unwrap();
        }
        let mut command = match self.nofile {
            Some(n) => {
                let mut command = Command::new("prlimit");
                command
                    .arg(format!("--nofile={n}:{n}"))
                    .arg("--")
                    .arg(bin());
                command
            }
            None => Command::new(bin()),
        };
        command.args(&self.args);
        let mut env = vec![("MCP_PROXY_LOG__FORMAT", "json")];
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prepare(&mut command, &cwd, &env);
        command.stdout(Stdio::null());
        let mut child = command.spawn().expect("the proxy binary starts");
        let pid = child.id().unwrap();

        let log = Arc::new(Mutex::new(String::new()));
        let (lines_tx, mut lines) = mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let collected = log.clone();
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                collected.lock().push_str(&format!("{line}\n"));
                let _ = lines_tx.send(line);
            }
        });
        let started = tokio::time::timeout(self.startup, async {
            while let Some(line) = lines.recv().await {
                if let Ok(entry) = serde_json::from_str::<Value>(&line)
                    && entry["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(SERVING))
                {
                    return Some(entry["fields"].clone());
                }
            }
            None
        })
        .await;
        let what = format!("{:?} {:?}", self.args, self.env);
        let startup = match started {
            Ok(Some(fields)) => fields,
            Ok(None) => {
                let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                panic!(
                    "the proxy ({what}) exited before serving ({status:?}); its log:\n{}",
                    log.lock()
                )
            }
            Err(_) => panic!(
                "the proxy ({what}) printed no start-up line within {:?}; its log:\n{}",
                self.startup,
                log.lock()
            ),
        };
        let listen = startup["listen"]
            .as_str()
            .and_then(|listen| listen.parse().ok())
            .unwrap_or_else(|| panic!("no listen address in the start-up line {startup}"));
        ProxyProcess {
            child,
            pid,
            listen,
            startup,
            log,
            reader: Some(reader),
            http: http_client(),
            dir,
        }
    }
}

/// Whether `toml` sets `listen` before its first table.
fn has_top_level_listen(toml: &str) -> bool {
    toml.lines()
        .map(str::trim_start)
        .take_while(|line| !line.starts_with('['))
        .any(|line| {
            line.strip_prefix("listen")
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
}

/// A running proxy binary; SIGKILLed when dropped (and its own directory removed).
pub struct ProxyProcess {
    // Declared first: killed before its working directory is removed.
    child: Child,
    pid: u32,
    /// The address it listens on, from its start-up line.
    pub listen: SocketAddr,
    /// The start-up line's fields.
    startup: Value,
    log: Arc<Mutex<String>>,
    /// Collects its stderr; ends when the process closes it.
    reader: Option<JoinHandle<()>>,
    http: reqwest::Client,
    dir: Dir,
}

// === impl ProxyProcess ===

impl ProxyProcess {
    /// How to start one: `ProxyProcess::launch().toml(…).env(…).start().await`.
    pub fn launch() -> Launch {
        Launch {
            dir: None,
            toml: None,
            args: Vec::new(),
            env: Vec::new(),
            nofile: None,
            startup: Duration::from_secs(10),
        }
    }

    /// Runs the binary with `toml` as its `proxy.toml` (`listen` defaults to a free
    /// loopback port), in a directory of its own.
    pub async fn start(toml: &str) -> ProxyProcess {
        ProxyProcess::launch().toml(toml).start().await
    }

    /// Runs the binary in `dir` (removed when it is dropped), whose `proxy.toml` is
    /// written from `toml`.
    pub async fn start_in(dir: PathBuf, toml: &str) -> ProxyProcess {
        ProxyProcess::start_with(dir, toml, &[]).await
    }

    /// [`ProxyProcess::start_in`] with the `MCP_PROXY_*` variables `env`.
    pub async fn start_with(dir: PathBuf, toml: &str, env: &[(&str, &str)]) -> ProxyProcess {
        ProxyProcess::launch()
            .dir(WorkDir::adopt(dir))
            .toml(toml)
            .env(env)
            .start()
            .await
    }

    /// [`ProxyProcess::start`] under an open-file limit of `nofile` when given, with `env`.
    pub async fn start_with_nofile(
        toml: &str,
        nofile: Option<u64>,
        env: &[(&str, &str)],
    ) -> ProxyProcess {
        let launch = ProxyProcess::launch().toml(toml).env(env);
        match nofile {
            Some(n) => launch.nofile(n),
            None => launch,
        }
        .start()
        .await
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its working directory.
    pub fn dir(&self) -> &Path {
        match &self.dir {
            Dir::Own(own) => own.path(),
            Dir::Kept(path) => path,
        }
    }

    /// `http://<listen><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    /// The field `name` of its start-up line (`message`, `listen`, `endpoint`, `upstream`).
    pub fn startup(&self, name: &str) -> String {
        self.startup[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} in the start-up line {}", self.startup))
            .to_owned()
    }

    /// Everything it logged so far (JSON lines, unless its environment chose text).
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

    /// Waits until its log has a line containing `needle`; whether it came within `within`.
    pub async fn eventually_logged(&self, needle: &str, within: Duration) -> bool {
        super::eventually(within, || self.log().contains(needle)).await
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

    /// Sends it a signal by name (`TERM`, `HUP`, `KILL`); it must still run.
    pub fn signal(&self, name: &str) {
        signal(self.child.id().expect("the proxy runs"), name);
    }

    /// Waits until it has its SIGTERM handler installed.
    ///
    /// The binary installs it only after printing its start-up line; a test about what a
    /// graceful shutdown does waits for it so that it tests only that.
    pub async fn sigterm_handled(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !catches_sigterm(self.pid) {
            assert!(
                Instant::now() < deadline,
                "no SIGTERM handler 2 s after the start-up line"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits for it to end (and its stderr to be read); panics after `within`.
    pub async fn exits_within(&mut self, within: Duration) -> ExitStatus {
        let status = match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!(
                "the proxy still runs {within:?} later; its log:\n{}",
                self.log()
            ),
        };
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        }
        status
    }

    /// SIGKILL, as the OOM killer or `kill -9` would; waits for the process to end.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    /// GET `path` on it: status and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// POST the JSON `body` to `path` on it.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        post_json(&self.http, &self.url(path), body, &HeaderMap::new()).await
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
