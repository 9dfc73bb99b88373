//! A fleet on loopback: several upstream replicas (the strict demo server, in-process),
//! named upstreams in a configuration, and — for the tests that need several proxy
//! processes — the real binary (`ProxyProcess`, from `binary.rs`), a real `redis-server`
//! and a real nginx, each started on a free port and stopped when dropped.
//!
//! `redis-server` and `nginx` come from Debian's packages, installed by `.ci/test.sh`
//! (`tests/interop/setup.sh`); a test that needs one fails loudly when it is missing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use mcp_session_proxy::config::{Config, Target, UpstreamDef, UpstreamOverrides};
use mcp_session_proxy::demo::{DemoOptions, DemoServer};
use tokio::process::{Child, Command};

use super::binary::signal;
#[allow(
    unused_imports,
    reason = "the one proxy process, where the fleet's tests have always found it"
)]
pub use super::binary::{ProxyProcess, scratch_dir};
use super::config_for;

/// A free loopback port (nothing listens on it once this returns; a race with another
/// process taking it is possible but unlikely).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Replicas of one upstream: recording demo servers that can be stopped and started
/// again on the same address.
pub struct Replicas {
    pub servers: Vec<Option<DemoServer>>,
    pub addrs: Vec<SocketAddr>,
}

impl Replicas {
    pub async fn start(n: usize) -> Replicas {
        let mut servers = Vec::new();
        let mut addrs = Vec::new();
        for _ in 0..n {
            let server = demo(SocketAddr::from(([127, 0, 0, 1], 0))).await;
            addrs.push(server.local_addr());
            servers.push(Some(server));
        }
        Replicas { servers, addrs }
    }

    pub fn url(&self, i: usize) -> String {
        format!("http://{}/mcp", self.addrs[i])
    }

    pub fn urls(&self) -> Vec<String> {
        (0..self.addrs.len()).map(|i| self.url(i)).collect()
    }

    pub fn server(&self, i: usize) -> &DemoServer {
        self.servers[i].as_ref().expect("replica is running")
    }

    /// Upstream sessions live on each replica.
    pub fn live(&self) -> Vec<usize> {
        self.servers
            .iter()
            .map(|s| s.as_ref().map_or(0, DemoServer::live_sessions))
            .collect()
    }

    /// Stops replica `i` (connections to its port are refused from then on).
    pub async fn stop(&mut self, i: usize) {
        if let Some(server) = self.servers[i].take() {
            server.stop().await;
        }
    }

    /// Starts replica `i` again on its address, with no sessions (a restart).
    pub async fn restart(&mut self, i: usize) {
        self.stop(i).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match DemoServer::start(options(self.addrs[i])).await {
                Ok(server) => {
                    self.servers[i] = Some(server);
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("replica {i} cannot listen on {} again: {e}", self.addrs[i]),
            }
        }
    }

    pub fn target(&self) -> Target {
        Target::Http(self.urls().iter().map(|u| u.parse().unwrap()).collect())
    }
}

fn options(addr: SocketAddr) -> DemoOptions {
    DemoOptions {
        addr,
        record: true,
        ..DemoOptions::default()
    }
}

async fn demo(addr: SocketAddr) -> DemoServer {
    DemoServer::start(options(addr)).await.unwrap()
}

/// An `[upstreams.NAME]` table.
pub fn named(name: &str, default: bool, target: Target) -> UpstreamDef {
    UpstreamDef {
        name: name.to_owned(),
        default,
        target,
        overrides: UpstreamOverrides::default(),
        stateless: None,
    }
}

/// The proxy's defaults on a free loopback port, serving `upstreams` (and not the
/// one-upstream target). Replicas are probed hourly: a probe's short-lived session would
/// show in the replicas' session counts (tests about probes set their own interval).
pub fn fleet_config(upstreams: Vec<UpstreamDef>) -> Config {
    let mut config = config_for("http://unused");
    config.upstream.target = Target::Embedded;
    config.upstream.health_interval = Duration::from_secs(3600);
    config.upstreams = upstreams;
    config
}

// === redis-server ===

/// A `redis-server` of this test alone: loopback, a free port, no persistence.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl Redis {
    pub async fn start() -> Redis {
        let port = free_port();
        let dir = scratch_dir("redis");
        let mut redis = Redis {
            port,
            child: None,
            dir,
        };
        redis.up().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    async fn up(&mut self) {
        let binary = which("redis-server").unwrap_or_else(|| {
            panic!("redis-server is not installed: run .ci/test.sh (or tests/interop/setup.sh), which installs Debian's redis-server")
        });
        let child = Command::new(binary)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops it (SIGKILL: nothing kept, as a crash would).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts it again on its port (empty: no persistence).
    pub async fn restart(&mut self) {
        self.stop().await;
        self.up().await;
    }

    /// Pauses it (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }

    fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .and_then(Child::id)
            .expect("redis-server runs")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(child) = &self.child
            && let Some(pid) = child.id()
        {
            signal(pid, "CONT");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// === nginx ===

/// nginx, round-robin in front of `backends`, on a free loopback port; its own prefix
/// directory, no daemon, stopped on drop.
pub struct Nginx {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    pub async fn start(backends: &[SocketAddr]) -> Nginx {
        let binary = which("nginx").unwrap_or_else(|| {
            panic!("nginx is not installed: run .ci/test.sh (or tests/interop/setup.sh), which installs Debian's nginx-light")
        });
        let port = free_port();
        let dir = scratch_dir("nginx");
        let servers: String = backends
            .iter()
            .map(|b| format!("        server {b};\n"))
            .collect();
        let conf = format!(
            "daemon off;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n    access_log off;\n    client_body_temp_path {dir}/body;\n    proxy_temp_path {dir}/proxy;\n\
             fastcgi_temp_path {dir}/fastcgi;\n    uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n\
             upstream proxies {{\n{servers}    }}\n\
             server {{\n        listen 127.0.0.1:{port};\n        location / {{\n            proxy_pass http://proxies;\n\
             proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n            proxy_buffering off;\n\
             proxy_next_upstream off;\n        }}\n    }}\n}}\n",
            dir = dir.display(),
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(binary)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("nginx starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen within 10 s: {}",
                std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Nginx { port, child, dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The path of `program` in `PATH` (and the sbin directories nginx lives in).
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
