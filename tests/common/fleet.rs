//! A fleet on loopback: several upstream replicas (the strict demo server, in-process),
//! named upstreams in a configuration, and — for the tests that need several proxy
//! processes — the real binary (`ProxyProcess`, from `binary.rs`), a real `redis-server`
//! (alone, a primary with a replica and sentinels, or behind an endpoint that follows the
//! primary) and a real nginx, each started on a free port and stopped when dropped.
//!
//! `redis-server` and `nginx` come from Debian's packages, installed by `.ci/test.sh`
//! (`tests/interop/setup.sh`); a test that needs one fails loudly when it is missing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use mcp_session_proxy::config::{Config, Target, UpstreamDef, UpstreamOverrides};
use mcp_session_proxy::demo::{DemoOptions, DemoServer};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

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
        credentials: Vec::new(),
        token_exchange: None,
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

/// A `redis-server` of this test alone: loopback, a free port, no persistence — a
/// standalone server, a replica of another, or a sentinel.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    role: RedisRole,
}

/// What a [`Redis`] runs as.
#[derive(Clone)]
enum RedisRole {
    Server,
    /// Replicating the server at this port as [`REPLICATOR`].
    ReplicaOf(u16),
    /// Watching the primary at this port as `MASTER_NAME`, with this quorum.
    Sentinel {
        primary: u16,
        quorum: usize,
    },
}

/// The name sentinels know the primary of a [`RedisHa`] by.
pub const MASTER_NAME: &str = "sessions";
/// The user a replica replicates as, on its primary: a test turns it off to keep the
/// replica out.
pub const REPLICATOR: &str = "replicator";
const REPLICATOR_PASSWORD: &str = "replica-secret";

/// Whether a Redis server answers `PING` at `port` (within a second).
async fn answers_ping(port: u16) -> bool {
    let ping = query_at::<String>(port, &["PING"]);
    matches!(
        tokio::time::timeout(Duration::from_secs(1), ping).await,
        Ok(Ok(pong)) if pong == "PONG"
    )
}

// === impl Redis ===

impl Redis {
    pub async fn start() -> Redis {
        Redis::start_as(RedisRole::Server).await
    }

    /// A replica of `primary`, replicating as [`REPLICATOR`] (made there), once it has
    /// synchronised with it.
    pub async fn start_replica_of(primary: &Redis) -> Redis {
        let _: () = primary
            .query(&[
                "ACL",
                "SETUSER",
                REPLICATOR,
                "on",
                &format!(">{REPLICATOR_PASSWORD}"),
                "+@all",
                "~*",
                "&*",
            ])
            .await
            .unwrap();
        let replica = Redis::start_as(RedisRole::ReplicaOf(primary.port)).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = replica.query(&["INFO", "replication"]).await.unwrap();
            if info.contains("master_link_status:up") {
                return replica;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not synchronise with its primary within 10 s: {info}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A sentinel watching the primary at `primary` (as [`MASTER_NAME`]) that fails it
    /// over fast: down after 500 ms unanswered, a failover given 2 s.
    pub async fn start_sentinel(primary: u16, quorum: usize) -> Redis {
        Redis::start_as(RedisRole::Sentinel { primary, quorum }).await
    }

    async fn start_as(role: RedisRole) -> Redis {
        let dir = scratch_dir("redis");
        let mut redis = Redis {
            port: free_port(),
            child: None,
            dir,
            role,
        };
        // A free port is free when it is picked, not when the server binds it: a process
        // of another test may take it in between (its own port 0 landing there), and
        // the server then exits. Another port is tried.
        for _ in 0..5 {
            if redis.try_up().await {
                return redis;
            }
            redis.port = free_port();
        }
        panic!("redis-server found no free port in 5 tries");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts the server again on its port (the clients' configuration names it).
    async fn up(&mut self) {
        assert!(
            self.try_up().await,
            "redis-server could not listen on port {} again: another process has it",
            self.port
        );
    }

    /// Starts the server on its port and waits until it answers there; `false` when it
    /// exits first (the port was taken).
    async fn try_up(&mut self) -> bool {
        let binary = which("redis-server").unwrap_or_else(|| {
            panic!("redis-server is not installed: run .ci/test.sh (or tests/interop/setup.sh), which installs Debian's redis-server")
        });
        let mut command = Command::new(binary);
        match &self.role {
            RedisRole::Server | RedisRole::ReplicaOf(_) => {
                command
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
                    .arg(&self.dir);
                if let RedisRole::ReplicaOf(primary) = self.role {
                    command
                        .args(["--replicaof", "127.0.0.1", &primary.to_string()])
                        .args([
                            "--masteruser",
                            REPLICATOR,
                            "--masterauth",
                            REPLICATOR_PASSWORD,
                        ]);
                }
            }
            // A sentinel rewrites its configuration file: one of its own, in its directory.
            RedisRole::Sentinel { primary, quorum } => {
                let conf = self.dir.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} {quorum}\n\
                         sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                         sentinel failover-timeout {MASTER_NAME} 2000\n\
                         sentinel parallel-syncs {MASTER_NAME} 1\n",
                        port = self.port,
                        dir = self.dir.display(),
                    ),
                )
                .unwrap();
                command.arg(&conf).arg("--sentinel");
            }
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        let child = self.child.insert(child);
        // Listening is not enough: whatever took the port listens too. The server is up
        // when a PING there is answered with PONG.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if answers_ping(self.port).await {
                return true;
            }
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer a PING within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends one command (its words) and reads the answer.
    pub async fn query<T: redis::FromRedisValue>(&self, words: &[&str]) -> redis::RedisResult<T> {
        query_at(self.port, words).await
    }

    /// The uses of session `id` this server has counted (the proxy's `q:<id>` key; 0 while
    /// there is none or it cannot be read).
    pub async fn session_uses(&self, id: &str) -> u64 {
        let key = format!("mcp-session-proxy:q:{id}");
        self.query::<Option<u64>>(&["GET", &key])
            .await
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Keeps its replicas out: their links dropped, their user turned off (they try
    /// again every second, and fail until [`Redis::let_replicas_in`]): what it takes
    /// meanwhile waits in its memory for them.
    pub async fn shut_out_replicas(&self) {
        let _: () = self
            .query(&["ACL", "SETUSER", REPLICATOR, "off"])
            .await
            .unwrap();
        let dropped: u64 = self
            .query(&["CLIENT", "KILL", "TYPE", "replica"])
            .await
            .unwrap();
        assert!(dropped > 0, "no replica was connected");
    }

    /// Lets the replicas of the server at `port` in again, after `delay` (they catch up
    /// on what they missed); `false` if it did not answer.
    pub async fn let_replicas_in(port: u16, delay: Duration) -> bool {
        tokio::time::sleep(delay).await;
        query_at::<()>(port, &["ACL", "SETUSER", REPLICATOR, "on"])
            .await
            .is_ok()
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

/// Sends one command (its words) to the Redis listening on `port` and reads the answer.
pub async fn query_at<T: redis::FromRedisValue>(
    port: u16,
    words: &[&str],
) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    command.query_async(&mut connection).await
}

/// Redis as operators run it for failover: a primary, a replica of it, and three
/// sentinels watching them (quorum 2), every one a [`Redis`] of the test's own.
pub struct RedisHa {
    /// The first primary, then its replica.
    pub servers: Vec<Redis>,
    pub sentinels: Vec<Redis>,
}

// === impl RedisHa ===

impl RedisHa {
    /// Everything started, once the sentinels know the replica and each other (so that
    /// a failover can start as soon as the primary is down).
    pub async fn start() -> RedisHa {
        let primary = Redis::start().await;
        let replica = Redis::start_replica_of(&primary).await;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(Redis::start_sentinel(primary.port, 2).await);
        }
        let ha = RedisHa {
            servers: vec![primary, replica],
            sentinels,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        for sentinel in &ha.sentinels {
            loop {
                let replicas: Vec<std::collections::HashMap<String, String>> = sentinel
                    .query(&["SENTINEL", "REPLICAS", MASTER_NAME])
                    .await
                    .unwrap_or_default();
                let others: Vec<std::collections::HashMap<String, String>> = sentinel
                    .query(&["SENTINEL", "SENTINELS", MASTER_NAME])
                    .await
                    .unwrap_or_default();
                let replica_seen = replicas.iter().any(|r| {
                    r.get("flags").is_some_and(|f| f == "slave")
                        && r.get("master-link-status").is_some_and(|s| s == "ok")
                });
                if replica_seen && others.len() == 2 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the sentinels did not find the replica and each other within 20 s: {replicas:?} {others:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        ha
    }

    /// The sentinels' URLs, as `session.redis_sentinels` lists them (TOML).
    pub fn sentinels_toml(&self) -> String {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("\"redis://127.0.0.1:{}\"", s.port))
            .collect();
        format!("[{}]", urls.join(", "))
    }

    /// The port of the server a sentinel names the primary now.
    pub async fn primary_port(&self) -> Option<u16> {
        for sentinel in &self.sentinels {
            let named: redis::RedisResult<Option<(String, u16)>> = sentinel
                .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                .await;
            if let Ok(Some((_, port))) = named {
                return Some(port);
            }
        }
        None
    }

    /// The server listening on `port`.
    pub fn server(&self, port: u16) -> &Redis {
        self.servers
            .iter()
            .find(|s| s.port == port)
            .expect("one of the servers")
    }

    /// Waits until every sentinel names a primary other than the one at `old` and that
    /// server says it is one; its port.
    pub async fn failed_over_from(&self, old: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            let mut named = Vec::new();
            for sentinel in &self.sentinels {
                let answer: redis::RedisResult<Option<(String, u16)>> = sentinel
                    .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                    .await;
                named.push(answer.ok().flatten().map(|(_, port)| port));
            }
            if let Some(Some(new)) = named.first().copied()
                && new != old
                && named.iter().all(|n| *n == Some(new))
            {
                let role: redis::RedisResult<Vec<redis::Value>> =
                    self.server(new).query(&["ROLE"]).await;
                if let Ok(role) = role
                    && redis::from_redis_value_ref::<String>(&role[0]).is_ok_and(|r| r == "master")
                {
                    return new;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no failover from port {old} within {within:?}: the sentinels name {named:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A TCP address that follows the primary, as a managed Redis's primary endpoint (a name
/// moved at failover) does: each new connection is relayed to the server it points at
/// then; connections already open stay where they are.
pub struct Endpoint {
    pub port: u16,
    target: Arc<AtomicU16>,
    relays: JoinHandle<()>,
}

// === impl Endpoint ===

impl Endpoint {
    pub async fn start(target: u16) -> Endpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let to = target.clone();
        // The relays live in the task's set: aborting the task ends them all.
        let relays = tokio::spawn(async move {
            let mut relays = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                while relays.try_join_next().is_some() {}
                let port = to.load(Ordering::SeqCst);
                relays.spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Endpoint {
            port,
            target,
            relays,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// New connections go to the server at `port` from now on.
    pub fn point_to(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.relays.abort();
    }
}

// === nginx ===

/// nginx, round-robin in front of `backends`, on a free loopback port; its own prefix
/// directory, no daemon, stopped on drop with its workers.
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
        // A process group of its own: its workers stop with it (a worker outliving its
        // master would keep every descriptor the test inherited open).
        let child = Command::new(binary)
            .process_group(0)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: its worker outlives a killed master otherwise,
            // holding the port and whatever descriptors it inherited.
            .process_group(0)
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
        // The master and its worker together.
        if let Some(pid) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
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
