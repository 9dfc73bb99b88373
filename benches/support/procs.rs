//! The processes under test: the fast upstream (this binary, re-executed), the proxy's
//! release binary and nginx. Each is held by a guard that stops it on drop, panics
//! included; a Ctrl-C or SIGTERM to the benchmark stops them too (see `kill_all`).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Every child still running, for the signal handler.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn register(pid: u32) {
    if let Ok(mut live) = LIVE.lock() {
        live.push(pid);
    }
}

fn unregister(pid: u32) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|&p| p != pid);
    }
}

/// Children of `pid` (nginx's workers), from /proc.
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn signal(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// Stops every registered child and its children at once, and removes the scratch
/// directories (from the signal handler).
pub fn kill_all() {
    let pids: Vec<u32> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for pid in pids {
        for child in children(pid) {
            signal(child, Signal::SIGKILL);
        }
        signal(pid, Signal::SIGKILL);
    }
    for name in [
        "proxy",
        "nginx",
        "redis",
        "redis-replica",
        "redis-sentinel",
        "proxy-redis",
        "proxy-redis-sentinel",
        "proxy-sealed",
        "proxy-modern",
    ] {
        let dir = std::env::temp_dir().join(format!("mcp-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A child process, stopped on drop: SIGTERM, then SIGKILL after `grace`; its own
/// children (nginx workers) are killed too if they outlive it.
#[derive(Debug)]
pub struct Guard {
    pub name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    grace: Duration,
    dir: Option<PathBuf>,
}

impl Guard {
    fn new(name: &'static str, mut child: Child, grace: Duration) -> Self {
        register(child.id());
        let stdin = child.stdin.take();
        Guard {
            name,
            child,
            stdin,
            grace,
            dir: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let pid = self.child.id();
        let kids = children(pid);
        drop(self.stdin.take());
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(pid, Signal::SIGTERM);
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for kid in kids {
            signal(kid, Signal::SIGKILL);
        }
        unregister(pid);
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A scratch directory, created fresh.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Waits until `GET path` on `addr` gets any HTTP answer (`ok_status` if given).
fn wait_http(guard: &mut Guard, addr: SocketAddr, path: &str, ok_status: Option<u16>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = String::new();
    while Instant::now() < deadline {
        assert!(guard.alive(), "{} exited during start-up", guard.name);
        match probe(addr, path) {
            Ok(status) if ok_status.is_none_or(|s| s == status) => return,
            Ok(status) => last = format!("HTTP {status}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} did not come up on {addr}{path}: {last}", guard.name);
}

fn probe(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let data = get_raw(addr, path)?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(&data) {
        Ok(_) if response.code.is_some() => Ok(response.code.unwrap_or(0)),
        _ => Err(std::io::Error::other("no HTTP answer")),
    }
}

/// `GET path` on `addr` on a fresh connection: the status and the body (which must have a
/// length).
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let data = get_raw(addr, path)?;
    match super::http::parse(&data) {
        Ok(Some((response, _))) => Ok((response.status, response.body)),
        _ => Err(std::io::Error::other("no complete HTTP answer")),
    }
}

/// The bytes of the answer to `GET path` on `addr` (`Connection: close`, read to the end).
fn get_raw(addr: SocketAddr, path: &str) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut request = Vec::new();
    super::http::get(&mut request, &addr.to_string(), path);
    request.splice(
        request.len() - 2..request.len() - 2,
        *b"Connection: close\r\n",
    );
    stream.write_all(&request)?;
    let mut data = Vec::new();
    let _ = stream.read_to_end(&mut data);
    Ok(data)
}

/// The fast upstream: this binary with `MCP_BENCH_ROLE=upstream`.
pub fn spawn_upstream() -> (Guard, SocketAddr) {
    spawn_role("upstream", "upstream")
}

/// The fast modern-only (2026-07-28) upstream: this binary with
/// `MCP_BENCH_ROLE=modern-upstream` (`super::modern`).
pub fn spawn_modern_upstream() -> (Guard, SocketAddr) {
    spawn_role("modern-upstream", "modern upstream")
}

/// The floor hop (`super::floor`) in front of `upstream`.
pub fn spawn_floor(upstream: SocketAddr) -> (Guard, SocketAddr) {
    spawn_role_with(
        "floor",
        "the floor hop",
        &[("MCP_BENCH_FLOOR_UPSTREAM", &upstream.to_string())],
    )
}

/// A variant of the floor hop as `role` (`floor-fields`, `floor-fields-raw`: heads read
/// and written; `floor-uring`, `floor-tokio-uring`: on io_uring; `floor-monoio`: on
/// monoio with epoll — `super::floor`'s submodules) in front of `upstream`; why not, when
/// it cannot run on this machine.
pub fn spawn_floor_on(
    upstream: SocketAddr,
    role: &'static str,
) -> Result<(Guard, SocketAddr), String> {
    let (guard, line) = start_role(
        role,
        role,
        &[("MCP_BENCH_FLOOR_UPSTREAM", &upstream.to_string())],
    );
    match ready_at(&line) {
        Some(addr) => Ok((guard, addr)),
        None => Err(line
            .trim()
            .strip_prefix("UNAVAILABLE ")
            .unwrap_or("it did not start")
            .to_owned()),
    }
}

/// This binary as the upstream `role`, once it says `READY <port>`.
fn spawn_role(role: &str, name: &'static str) -> (Guard, SocketAddr) {
    spawn_role_with(role, name, &[])
}

/// [`spawn_role`], with `env` set for it.
fn spawn_role_with(role: &str, name: &'static str, env: &[(&str, &str)]) -> (Guard, SocketAddr) {
    let (guard, line) = start_role(role, name, env);
    let addr =
        ready_at(&line).unwrap_or_else(|| panic!("{name} said {line:?} instead of READY <port>"));
    (guard, addr)
}

/// This binary started as `role` with `env`, and the first line it says.
fn start_role(role: &str, name: &'static str, env: &[(&str, &str)]) -> (Guard, String) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .envs(env.iter().copied())
        .env("MCP_BENCH_ROLE", role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the upstream");
    let stdout = child.stdout.take().expect("upstream stdout");
    let guard = Guard::new(name, child, Duration::from_secs(1));
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("upstream READY line");
    (guard, line)
}

/// The loopback address a `READY <port>` line gives.
fn ready_at(line: &str) -> Option<SocketAddr> {
    let port: u16 = line.trim().strip_prefix("READY ")?.parse().ok()?;
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The proxy's `workers` setting in the benchmark: `MCP_BENCH_PROXY_WORKERS`, else 1. On
/// this 2-core machine the upstream and the load generator keep the other core busy; one
/// thread hands no work across cores (measured: less CPU per call than one per core).
pub fn proxy_workers() -> String {
    std::env::var("MCP_BENCH_PROXY_WORKERS").unwrap_or_else(|_| "1".to_owned())
}

/// The proxy's release binary in front of `upstream`, with a fresh working directory (no
/// `proxy.toml` picked up) and no inherited `MCP_PROXY_*` variables.
pub fn spawn_proxy(upstream: SocketAddr) -> (Guard, SocketAddr) {
    spawn_proxy_with(upstream, "proxy", &[])
}

/// The same, with more `MCP_PROXY_*` variables (`name` tells its scratch directory).
pub fn spawn_proxy_with(
    upstream: SocketAddr,
    name: &'static str,
    env: &[(&str, String)],
) -> (Guard, SocketAddr) {
    spawn_proxy_under(upstream, name, env, None)
}

/// [`spawn_proxy_with`] under an open-file limit of `nofile` when given (`prlimit`,
/// which execs the proxy: the pid is the proxy's). `MCP_BENCH_PROXY_BIN=path` runs
/// another build (e.g. an older commit's release binary, to compare).
pub fn spawn_proxy_under(
    upstream: SocketAddr,
    name: &'static str,
    env: &[(&str, String)],
    nofile: Option<u64>,
) -> (Guard, SocketAddr) {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let dir = scratch(name);
    let child = proxy_command(&dir, nofile)
        .args(["--upstream", &format!("http://{upstream}/mcp")])
        .args(["--listen", &addr.to_string()])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the proxy");
    let mut guard = Guard::new(name, child, Duration::from_secs(2));
    guard.dir = Some(dir);
    wait_http(&mut guard, addr, "/healthz", Some(200));
    (guard, addr)
}

/// The sessions every bench proxy may hold: more than the runs make (`sessions/create`
/// at saturation keeps every session it creates — some 30,000 a second on 2 cores — and
/// the memory rows fill a proxy with up to `--sessions`), so no run meets the limit.
pub const MAX_SESSIONS: u32 = 1_000_000;

/// The proxy's release binary (`MCP_BENCH_PROXY_BIN=path`: another build, to compare)
/// in `dir`, under an open-file limit of `nofile` when given (`prlimit`, which execs the
/// proxy: the pid is the proxy's): no inherited `MCP_PROXY_*` or `RUST_LOG`, warnings
/// only, [`proxy_workers`] worker threads, stdin closed. Its arguments and the rest of
/// its environment are the caller's.
pub fn proxy_command(dir: &Path, nofile: Option<u64>) -> Command {
    let binary = std::env::var("MCP_BENCH_PROXY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-session-proxy").to_owned());
    let mut command = match nofile {
        Some(n) => {
            let mut command = Command::new("prlimit");
            command
                .arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(binary);
            command
        }
        None => Command::new(&binary),
    };
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MCP_PROXY_") {
            command.env_remove(key);
        }
    }
    command
        .env("MCP_PROXY_LOG__LEVEL", "warn")
        .env("MCP_PROXY_SESSION__MAX_SESSIONS", MAX_SESSIONS.to_string())
        // One load generator is one caller: the per-caller limits would measure themselves.
        .env("MCP_PROXY_SESSION__MAX_SESSIONS_PER_CALLER", "0")
        .env("MCP_PROXY_SESSION__CREATIONS_PER_CALLER_PER_MINUTE", "0")
        .env("MCP_PROXY_WORKERS", proxy_workers())
        .env_remove("RUST_LOG")
        .current_dir(dir)
        .stdin(Stdio::null());
    command
}

/// A `redis-server` of the benchmark's own: loopback, a free port, no persistence.
/// `None` when it is not installed.
pub fn spawn_redis() -> Option<(Guard, SocketAddr)> {
    spawn_redis_as("redis", &[])
}

/// Redis under Sentinel: a replica of the server at `primary` and one sentinel watching
/// it as `sessions` (the steady state a proxy sees: the primary it names, a replica that
/// acknowledges each creation's `WAIT`). Their guards, and the sentinel's address.
pub fn spawn_sentinel_set(primary: SocketAddr) -> Option<(Vec<Guard>, SocketAddr)> {
    let port = primary.port().to_string();
    let (replica, _) = spawn_redis_as("redis-replica", &["--replicaof", "127.0.0.1", &port])?;
    let sentinel_port = free_port();
    let dir = scratch("redis-sentinel");
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sentinel_port}\nbind 127.0.0.1\ndir {}\nsentinel monitor sessions 127.0.0.1 {port} 1\n",
            dir.display()
        ),
    )
    .ok()?;
    let child = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let mut sentinel = Guard::new("redis-sentinel", child, Duration::from_secs(1));
    sentinel.dir = Some(dir);
    let addr = SocketAddr::from(([127, 0, 0, 1], sentinel_port));
    listening(&mut sentinel, addr);
    Some((vec![replica, sentinel], addr))
}

fn spawn_redis_as(name: &'static str, extra: &[&str]) -> Option<(Guard, SocketAddr)> {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let dir = scratch(name);
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(&dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let mut guard = Guard::new(name, child, Duration::from_secs(1));
    guard.dir = Some(dir);
    listening(&mut guard, addr);
    Some((guard, addr))
}

/// Waits until the `redis-server` of `guard` listens on `addr`.
fn listening(guard: &mut Guard, addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(guard.alive(), "redis-server exited during start-up");
        assert!(
            Instant::now() < deadline,
            "redis-server did not listen within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` `PING` round trips to Redis on one connection, each timed, paced at `rate` per
/// second (as the proxy's own round trips are: each one wakes Redis and its caller).
pub fn redis_round_trips(addr: SocketAddr, n: usize, rate: u64) -> Vec<Duration> {
    let every = Duration::from_secs(1) / u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
    let start = Instant::now();
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return Vec::new();
    };
    let _ = stream.set_nodelay(true);
    let mut reply = [0u8; 7];
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let due = start + every * u32::try_from(i).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let sent = Instant::now();
        if stream.write_all(b"PING\r\n").is_err() || stream.read_exact(&mut reply).is_err() {
            break;
        }
        times.push(sent.elapsed());
    }
    times
}

/// nginx as a plain reverse proxy (keep-alive upstream) in front of `upstream`.
pub fn spawn_nginx(upstream: SocketAddr, workers: usize) -> (Guard, SocketAddr) {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let dir = scratch("nginx");
    let conf = nginx_conf(&dir, upstream, addr, workers);
    std::fs::write(dir.join("nginx.conf"), conf).expect("write nginx.conf");
    let child = Command::new("nginx")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"))
        .args(["-g", "daemon off; master_process on;"])
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nginx (benches/run.sh installs nginx-light)");
    let mut guard = Guard::new("nginx", child, Duration::from_secs(3));
    guard.dir = Some(dir);
    wait_http(&mut guard, addr, "/mcp", None);
    (guard, addr)
}

fn nginx_conf(dir: &Path, upstream: SocketAddr, listen: SocketAddr, workers: usize) -> String {
    let d = dir.display();
    // Its count of requests at /nginx-status, for `benches/instructions.sh --nginx` (which
    // sets MCP_BENCH_NGINX_STATUS): not in the runs that time it, whose nginx is a plain
    // reverse proxy and nothing else.
    let status = match std::env::var_os("MCP_BENCH_NGINX_STATUS") {
        Some(_) => "\n        location = /nginx-status {\n            stub_status;\n        }",
        None => "",
    };
    format!(
        r#"worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy_temp;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    upstream mcp_upstream {{
        server {upstream};
        keepalive 128;
        keepalive_requests 1000000;
    }}
    server {{
        listen {listen} backlog=4096;{status}
        location / {{
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"#
    )
}

/// CPU time (user + system) of a set of processes, in microseconds, from
/// /proc/<pid>/stat (clock ticks; dead threads included).
pub fn cpu_micros(pids: &[u32], ticks_per_sec: u64) -> u64 {
    let (user, system) = cpu_split_micros(pids, ticks_per_sec);
    user + system
}

/// CPU time used so far by `pids`, in µs: in user space and in the kernel (utime, stime).
pub fn cpu_split_micros(pids: &[u32], ticks_per_sec: u64) -> (u64, u64) {
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Fields after the command name, which is in parentheses and may hold spaces.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            // utime and stime are fields 14 and 15; `fields[0]` is field 3.
            let micros = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0)
                    * 1_000_000
                    / ticks_per_sec.max(1)
            };
            (micros(11), micros(12))
        })
        .fold((0, 0), |(u, s), (user, system)| (u + user, s + system))
}

/// CPU time used by processes that are not the benchmark's (not this process nor its
/// descendants, no kernel threads), accumulated between calls, in µs. A process that
/// started since the last call counts from zero; what a process used between the last
/// call and its exit is missed (a detector of other load, not an exact meter).
/// Per-process times are exact (the scheduler's runtime), unlike /proc/stat's tick
/// samples, which a paced load can alias with.
#[derive(Debug)]
pub struct Foreign {
    last: std::cell::RefCell<Option<std::collections::HashMap<u32, u64>>>,
    total: std::cell::Cell<u64>,
    ticks: u64,
}

impl Foreign {
    pub fn new(ticks: u64) -> Self {
        Foreign {
            last: std::cell::RefCell::new(None),
            total: std::cell::Cell::new(0),
            ticks,
        }
    }

    pub fn read(&self) -> u64 {
        const PF_KTHREAD: u64 = 0x0020_0000;
        let mut all = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let f: Vec<u64> = rest
                .split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            // After the state: ppid is field 4, flags 9, utime and stime 14 and 15.
            let at = |field: usize| f.get(field - 4).copied().unwrap_or(0);
            let kernel = at(9) & PF_KTHREAD != 0 || pid == 2 || at(4) == 2;
            let cpu = (at(14) + at(15)) * 1_000_000 / self.ticks.max(1);
            all.push((pid, at(4) as u32, kernel, cpu));
        }
        let mut ours = std::collections::HashSet::from([std::process::id()]);
        loop {
            let before = ours.len();
            for &(pid, ppid, _, _) in &all {
                if ours.contains(&ppid) {
                    ours.insert(pid);
                }
            }
            if ours.len() == before {
                break;
            }
        }
        let now: std::collections::HashMap<u32, u64> = all
            .into_iter()
            .filter(|(pid, _, kernel, _)| !kernel && !ours.contains(pid))
            .map(|(pid, _, _, cpu)| (pid, cpu))
            .collect();
        let mut last = self.last.borrow_mut();
        if let Some(last) = last.as_ref() {
            let delta: u64 = now
                .iter()
                .map(|(pid, cpu)| cpu.saturating_sub(last.get(pid).copied().unwrap_or(0)))
                .sum();
            self.total.set(self.total.get() + delta);
        }
        *last = Some(now);
        self.total.get()
    }
}

/// Machine-wide CPU time from /proc/stat, in µs: (user + nice + system, irq + softirq,
/// steal). Time in interrupts (the loopback network's receive path, mostly) is not
/// charged to any process.
pub fn machine_cpu_micros(ticks_per_sec: u64) -> (u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    let to_micros = |t: u64| t * 1_000_000 / ticks_per_sec.max(1);
    (
        to_micros(at(0) + at(1) + at(2)),
        to_micros(at(5) + at(6)),
        to_micros(at(7)),
    )
}

/// Resident memory of a process, in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// `getconf CLK_TCK` (100 on Linux almost everywhere).
pub fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// `nginx -v`, e.g. `nginx/1.22.1`.
pub fn nginx_version() -> String {
    Command::new("nginx")
        .arg("-v")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .map(|s| s.trim_start_matches("nginx version: ").to_owned())
        .unwrap_or_else(|| "nginx: not found".into())
}
