//! mcp-session-proxy: data-layer sessions, the stateless MCP 2026-07-28 protocol and old
//! clients, in front of MCP servers of every era (2025-11-25 `initialize`, 2026-07-28,
//! HTTP+SSE, stdio), bridging the eras both ways.
//!
//! The module tree follows a request (docs/src/contributing/architecture.md): `front`
//! takes HTTP in and `fleet` names the upstream its path is for; `route` classifies each
//! message; `paths` serve it — `session` keeps sessions (in memory, in Redis, or sealed
//! into their ids), `rewrite` edits messages, `upstream` reaches the legacy server — and
//! `response` is what goes back. `jsonrpc`, `mcp` and `sse` are the vocabulary they share.

pub mod auth;
pub mod config;
pub mod demo;
pub mod error;
pub mod fairness;
pub mod fleet;
pub mod front;
pub mod jsonrpc;
pub mod listeners;
pub mod mcp;
pub mod metrics;
pub mod minted;
pub mod overload;
pub mod paths;
pub mod response;
pub mod rewrite;
pub mod route;
pub mod session;
pub mod sse;
pub mod stateless;
pub mod telemetry;
pub mod throttle;
pub mod upstream;
pub mod wire;
pub mod within;
pub mod workers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::runtime::Handle;

use crate::config::{Config, ConfigError, NamedUpstream, StoreConfig, Target};
use crate::demo::{DemoOptions, DemoServer};
use crate::fleet::{Fleet, ReloadRefused, Reloaded, Shared};
use crate::front::{Admission, ConnectionLimits, Front, Limits, Ops, Phase, Role, Serving, serve};
use crate::listeners::handover::{HandedOver, Upgrades};
use crate::listeners::{AddressLock, Holder, Listeners};
use crate::metrics::Metrics;
use crate::overload::{Overload, Sampler};
use crate::paths::Cluster;
use crate::session::{
    MemoryStore, ReaperHandle, RedisStore, SealedStore, Sessions, StateSigner, Store, Tombstones,
    keyed_hmac, spawn_reaper,
};
use crate::upstream::Endings;
use crate::workers::Workers;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// Something already serves the address: the proxy never shares it
    /// (`listeners::exclusive`).
    #[error("cannot listen on {addr}: address already in use {}", in_use_by(*.holder))]
    InUse { addr: SocketAddr, holder: Holder },
    #[error("cannot start the embedded demo server: {0}")]
    Demo(std::io::Error),
    #[error("the embedded demo server has an unusable address: {0}")]
    DemoUrl(String),
    #[error("cannot set up the session store: {0}")]
    Store(session::StoreError),
    #[error("cannot start the worker threads: {0}")]
    Workers(std::io::Error),
    #[error("[auth]: {0}")]
    Auth(String),
    /// `upgrade.socket`: the running proxy's listeners could not be taken over (it keeps
    /// serving), or the socket could not be created.
    #[error("{detail}")]
    Handover { detail: String },
}

/// Who holds an address, and what to do about it, for [`StartError::InUse`].
fn in_use_by(holder: Holder) -> &'static str {
    match holder {
        Holder::Proxy => "by another mcp-session-proxy; stop it first, or choose another `listen`",
        Holder::Other => "(another process listens there); stop it, or choose another `listen`",
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Running {
    /// One listener per worker, all on the listen address.
    serving: Vec<Serving>,
    operations: Option<Serving>,
    front: Arc<Front>,
    reaper: ReaperHandle,
    /// Ends upstream sessions in the background, for every upstream; stopped last.
    endings: Arc<Endings>,
    demo: Option<DemoServer>,
    path: String,
    /// How long ending the upstream sessions may take at shutdown.
    end_within: Duration,
    /// The worker threads; stopped last (their runtimes hold the stdio children they
    /// started).
    workers: Workers,
    /// Keeps another proxy off the listen address until this one stops accepting.
    lock: Option<AddressLock>,
    /// Answers the next process on `upgrade.socket`.
    upgrades: Option<Upgrades>,
    /// Samples memory and descriptors for the overload manager (the binary only).
    _sampler: Option<Sampler>,
    /// Telling the peer replicas of deleted sealed sessions; stopped at shutdown.
    peer_tasks: PeerTasks,
}

/// Tasks that tell the peers of deleted sealed sessions; aborted when dropped.
#[derive(Debug)]
struct PeerTasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for PeerTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Starts the proxy: the embedded demo server when no upstream is configured, the
/// session store, every upstream's paths and tasks, the session reaper, and the
/// listeners — with `upgrade.socket`, the listeners of the proxy running there, which
/// stops accepting once this one is ready (`listeners::handover`).
pub async fn start(config: Config) -> Result<Running, StartError> {
    let metrics = Arc::new(Metrics::new());
    // The listeners first: the address other replicas reach this one at may be the port
    // just bound, and an address in use stops the proxy before anything else starts.
    // `workers` unset (a proxy embedded in another program, the tests): the caller's
    // runtime serves; the binary always sets it (src/main.rs).
    let count = config.workers.unwrap_or(1);
    let upgrade = config.upgrade.socket.as_deref();
    let (listeners, takeover) =
        Listeners::acquire(config.listen, config.admin.listen, upgrade, count).await?;
    let local = listeners.local_addr(config.listen)?;
    // What the next process will be offered.
    let held = match &listeners.upgrade {
        Some(_) => Some(listeners.held(local).map_err(|source| StartError::Listen {
            addr: local,
            source,
        })?),
        None => None,
    };
    // The upstream clients keep idle connections per worker.
    let workers = match config.workers {
        Some(n) => Workers::start(n).map_err(StartError::Workers)?,
        None => Workers::default(),
    };
    let advertise = config
        .cluster
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{}", reachable(local)));

    let upstreams = config.upstream_set();
    let demo = if upstreams
        .iter()
        .any(|u| matches!(u.config.target, Target::Embedded))
    {
        Some(
            DemoServer::start(DemoOptions::default())
                .await
                .map_err(StartError::Demo)?,
        )
    } else {
        None
    };
    let embedded = match &demo {
        Some(demo) => Some(
            demo.url()
                .parse()
                .map_err(|e: http::uri::InvalidUri| StartError::DemoUrl(e.to_string()))?,
        ),
        None => None,
    };

    let s = &config.session;
    // The keys sealing `state` and `requestState`: the configured state key, and with
    // sealed ids keys derived from each sealing key (so they rotate together); with
    // neither, a random key per process.
    let sealing: Vec<Vec<u8>> = match &s.store {
        StoreConfig::Sealed { keys } => keys.iter().map(|k| k.0.clone()).collect(),
        _ => Vec::new(),
    };
    let mut keys: Vec<Vec<u8>> = s.state_key.iter().map(|k| k.0.clone()).collect();
    keys.extend(sealing.iter().map(|key| derive_state_key(key)));
    if keys.is_empty() {
        let mut key = vec![0u8; 32];
        rand::fill(key.as_mut_slice());
        keys.push(key);
    }
    let tombstones = matches!(s.store, StoreConfig::Sealed { .. })
        .then(|| Arc::new(Tombstones::new(s.max_tombstones, s.idle_ttl)));
    let store = match (&s.store, &tombstones) {
        (StoreConfig::Redis(redis), _) => {
            let counted = session::CacheCounted {
                hit: metrics.session_cache("hit"),
                miss: metrics.session_cache("miss"),
                untracked: metrics.session_cache("untracked"),
            };
            Store::Redis(
                RedisStore::new(redis, s.idle_ttl, s.max_sessions, counted)
                    .map_err(StartError::Store)?,
            )
        }
        (StoreConfig::Sealed { .. }, Some(tombstones)) => Store::Sealed(
            SealedStore::new(&sealing, tombstones.clone()).map_err(StartError::Store)?,
        ),
        _ => Store::Memory(MemoryStore::new()),
    };
    let cluster = Arc::new(Cluster::new(paths::cluster::ClusterSettings {
        advertise,
        timeout: config.upstream.timeout,
        keys: &keys,
        max_forwarded_per_caller: config.cluster.max_forwarded_per_caller,
        peers: config.cluster.peers.clone(),
        tombstones,
    }));
    let sessions = Arc::new(Sessions::new(
        store,
        StateSigner::with_keys(&keys),
        session::Settings {
            idle_ttl: s.idle_ttl,
            max_sessions: s.max_sessions,
            max_sessions_per_caller: s.max_sessions_per_caller,
            creations_per_caller_per_minute: s.creations_per_caller_per_minute,
        },
    ));
    let endings = Endings::start();
    let fleet = Arc::new(Fleet::new(
        Shared {
            endings: endings.clone(),
            upstream_idle_timeout: config.limits.upstream_idle_timeout,
            upstream_idle_connections: config.limits.upstream_idle_connections,
            withhold_authorization: config.auth.as_ref().is_some_and(|a| !a.forward_token),
            sessions: sessions.clone(),
            metrics: metrics.clone(),
            cluster: cluster.clone(),
            keys,
            base_path: config.path.clone(),
            embedded,
        },
        &upstreams,
    ));
    // Memory and descriptors are the proxy's own to watch only where the proxy is the
    // process (the binary sets `workers`); embedded, they are the host program's too.
    let overload = match config.workers {
        Some(_) => Overload::new(&config.limits, metrics.clone()),
        None => Overload::with(None, Some(u64::MAX), metrics.clone()),
    };
    let admission = Admission::new(
        config.limits.max_connections,
        config.limits.max_connections_per_address,
        metrics.clone(),
        overload.clone(),
    );
    let sampler = config.workers.map(|_| {
        let admission = admission.clone();
        Sampler::start(overload.clone(), move || admission.open())
    });
    let front = Arc::new(Front {
        limits: Limits {
            path: config.path.clone(),
            max_body_bytes: config.max_body_bytes,
            body_timeout: config.limits.request_body_timeout,
            allowed_origins: config.allowed_origins.clone(),
            auth: arc_swap::ArcSwap::from_pointee(auth(&config, None)?),
        },
        fleet: fleet.clone(),
        ops: Ops {
            fleet: fleet.clone(),
            metrics: metrics.clone(),
            serve_metrics: config.admin.metrics,
            admin_token: config.admin.token.clone(),
            guarded: config.auth.is_some(),
        },
        connections: ConnectionLimits {
            admission,
            header_read_timeout: config.limits.header_read_timeout,
            idle_timeout: config.limits.idle_timeout,
        },
        metrics,
        overload,
    });
    let reaper = spawn_reaper(sessions, s.reap_interval, move |id, record| {
        let fleet = fleet.clone();
        async move { fleet.expired(&id, record).await }
    });
    if config.auth.is_some() && config.admin.listen.is_none() && config.admin.token.is_none() {
        tracing::warn!(
            "[auth] guards the client listener, and with neither admin.listen nor admin.token \
             the operations endpoints on it show only /healthz and /readyz's status: set \
             admin.listen (an internal address) or admin.token to read /metrics"
        );
    }
    // Deleted sealed sessions the peers know of, before any request is served here; then
    // the peers are told of those deleted here, as they come.
    let learned = cluster.catch_up().await;
    if learned > 0 {
        tracing::info!(
            learned,
            "deleted sealed sessions learned from the peer replicas"
        );
    }
    let peer_tasks = cluster.spawn_peers();
    let main_role = match config.admin.listen {
        Some(_) => Role::Mcp,
        None => Role::McpAndOperations,
    };
    let Listeners {
        mcp,
        operations,
        lock,
        upgrade,
    } = listeners;
    // Listeners taken over wait until the running proxy has stopped accepting on them.
    let phase = match takeover {
        Some(_) => Phase::Waiting,
        None => Phase::Accepting,
    };
    let runtimes: Vec<Handle> = workers.handles().cloned().collect();
    let mut serving = Vec::with_capacity(mcp.len().max(runtimes.len()));
    for (listener, worker) in
        by_worker(mcp, runtimes.len()).map_err(|source| StartError::Listen {
            addr: local,
            source,
        })?
    {
        // The listener, its accept loop and its connections belong to the worker.
        let _inside = runtimes.get(worker).map(Handle::enter);
        let listener = registered(listener, config.listen)?;
        serving.push(serve_on(
            listener,
            &front,
            main_role,
            config.shutdown_grace,
            phase,
        )?);
    }
    let operations = match operations {
        Some(listener) => Some(serve_on(
            registered(listener, local)?,
            &front,
            Role::Operations,
            config.shutdown_grace,
            phase,
        )?),
        None => None,
    };
    let stop_grace = upstreams
        .iter()
        .map(|u| u.config.stop_grace)
        .max()
        .unwrap_or(config.upstream.stop_grace);
    let mut running = Running {
        serving,
        operations,
        front,
        reaper,
        endings,
        demo,
        path: config.path,
        // A stdio child may need all three steps (stdin, SIGTERM, SIGKILL) to end.
        end_within: Duration::from_secs(5).max(stop_grace * 3 + Duration::from_secs(1)),
        workers,
        lock,
        upgrades: None,
        _sampler: sampler,
        peer_tasks: PeerTasks(peer_tasks),
    };
    let mut upgrade = upgrade;
    if let Some(takeover) = takeover {
        match takeover.ready().await {
            Ok(pid) => {
                running.open();
                if let Some(socket) = &mut upgrade {
                    socket.own();
                }
                tracing::info!(
                    pid,
                    "took over the listeners of the running proxy (pid {pid}), which stopped \
                     accepting and lets its requests finish"
                );
            }
            Err(e) => {
                // Nothing was accepted here; the running proxy keeps serving.
                running.shutdown().await;
                return Err(e);
            }
        }
    }
    if let (Some(socket), Some(held)) = (upgrade, held) {
        let upgrades = Upgrades::start(socket, held).map_err(|e| StartError::Handover {
            detail: format!("cannot answer on upgrade.socket: {e}"),
        })?;
        running.upgrades = Some(upgrades);
    }
    Ok(running)
}

/// Which worker accepts on which listener: every listener has a worker, and every
/// worker a listener (the same socket shared by two workers when there are fewer
/// listeners than workers — after a hand-over from a proxy with fewer workers).
fn by_worker(
    listeners: Vec<std::net::TcpListener>,
    workers: usize,
) -> std::io::Result<Vec<(std::net::TcpListener, usize)>> {
    let workers = workers.max(1);
    let count = listeners.len();
    let mut assigned = Vec::with_capacity(count.max(workers));
    if count >= workers {
        for (i, listener) in listeners.into_iter().enumerate() {
            assigned.push((listener, i % workers));
        }
        return Ok(assigned);
    }
    for worker in 0..workers {
        let Some(listener) = listeners.get(worker % count.max(1)) else {
            break;
        };
        assigned.push((listener.try_clone()?, worker));
    }
    Ok(assigned)
}

/// The key sealing `state` derived from a sealing key (domain-separated from sealing).
fn derive_state_key(sealing_key: &[u8]) -> Vec<u8> {
    use hmac::Mac;
    let mut mac = keyed_hmac(sealing_key);
    mac.update(b"mcp-session-proxy/state-key-from-sealing-key/v1");
    mac.finalize().into_bytes().to_vec()
}

/// `addr` as another process on this host reaches it (an unspecified address: loopback).
fn reachable(mut addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    addr
}

/// A listening socket on the runtime this is called in.
fn registered(
    listener: std::net::TcpListener,
    addr: SocketAddr,
) -> Result<TcpListener, StartError> {
    listener
        .set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(listener))
        .map_err(|source| StartError::Listen { addr, source })
}

fn serve_on(
    listener: TcpListener,
    front: &Arc<Front>,
    role: Role,
    grace: Duration,
    phase: Phase,
) -> Result<Serving, StartError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    serve(listener, front.clone(), role, grace, phase)
        .map_err(|source| StartError::Listen { addr, source })
}

impl Running {
    pub fn local_addr(&self) -> SocketAddr {
        self.serving
            .first()
            .map_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)), Serving::local_addr)
    }

    /// The operations listener's address, when `admin.listen` gave it its own.
    pub fn operations_addr(&self) -> Option<SocketAddr> {
        self.operations.as_ref().map(Serving::local_addr)
    }

    /// The client-facing MCP endpoint of the default upstream, e.g.
    /// `http://127.0.0.1:8080/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.local_addr(), self.path)
    }

    /// The default upstream (the embedded demo server's URL when it runs).
    pub fn upstream_url(&self) -> String {
        self.front
            .fleet
            .upstreams()
            .default_upstream()
            .map(|s| s.label.to_string())
            .unwrap_or_default()
    }

    /// What each upstream speaks, found now where it is not known yet (each probe within
    /// `within`): `legacy`, `modern` or `sse` for one upstream, `name=era, …` for several;
    /// `unknown` for an upstream that did not answer (it is probed again at its first use
    /// and by its health probes).
    pub async fn find_eras(&self, within: Duration) -> String {
        let upstreams = self.front.fleet.upstreams();
        let mut found = Vec::new();
        for served in upstreams.all() {
            let upstream = served.session.upstream();
            let era = match tokio::time::timeout(within, upstream.find_era()).await {
                Ok(Ok(era)) => era.name(),
                _ => "unknown",
            };
            found.push((served.name.clone(), era));
        }
        match found.as_slice() {
            [(_, era)] => (*era).to_owned(),
            all => all
                .iter()
                .map(|(name, era)| format!("{name}={era}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Sessions live in this proxy.
    pub fn live_sessions(&self) -> usize {
        self.front.fleet.sessions().live()
    }

    /// Callers the per-caller limits keep an account for now (`fairness`).
    pub fn tracked_callers(&self) -> usize {
        self.front.fleet.sessions().fairness().callers()
    }

    /// Serves the upstream list and `[auth]` of `config` from now on (the rest of
    /// `config` is not applied: it needs a restart), unless it would serve nothing or
    /// turn `[auth]` on or off (or change whether the client's token goes upstream):
    /// then nothing is applied.
    pub async fn reload(&self, config: &Config) -> Result<Reloaded, ReloadRefused> {
        let withhold = config.auth.as_ref().is_some_and(|a| !a.forward_token);
        let running = self.front.limits.auth.load_full();
        if config.auth.is_some() != matches!(*running, crate::auth::Auth::Jwt(_))
            || withhold != self.front.fleet.shared().withhold_authorization
        {
            return Err(ReloadRefused::AuthSwitch);
        }
        let auth = auth(config, Some(&running)).map_err(|e| ReloadRefused::Auth(e.to_string()))?;
        // New keys from an authorization server apply once they are had: a reload
        // naming one that cannot be reached is refused, the running keys kept.
        if let Some(fresh) = auth.fresh_keys(&running) {
            fresh
                .first_fetch(RELOAD_KEYS_WITHIN)
                .await
                .map_err(ReloadRefused::Auth)?;
        }
        let reloaded = self.front.fleet.reload(&config.upstream_set()).await?;
        self.front.limits.auth.store(Arc::new(auth));
        Ok(reloaded)
    }

    /// Starts accepting on listeners taken over.
    fn open(&self) {
        self.serving
            .iter()
            .chain(self.operations.iter())
            .for_each(Serving::open);
    }

    /// Resolves when a new process has taken the listeners over through
    /// `upgrade.socket` and is ready (once): then [`Running::stop_accepting`], tell it
    /// with [`HandedOver::stopped`], and [`Running::shutdown`].
    pub fn handed_over(&mut self) -> Option<tokio::sync::oneshot::Receiver<HandedOver>> {
        self.upgrades.as_mut()?.handed_over()
    }

    /// Stops accepting everywhere (connections carry on), and lets go of the address
    /// lock and of `upgrade.socket`: another proxy may start on the address from now on.
    pub async fn stop_accepting(&mut self) {
        if let Some(upgrades) = self.upgrades.take() {
            upgrades.stop().await;
        }
        // Every listener's connections drain before the first listener is let go: the
        // listeners of a SO_REUSEPORT group close one after another, and a client that
        // finds one gone (refused, or reset in its accept queue) must find every kept-alive
        // connection answering `Connection: close`, not only that listener's.
        self.serving
            .iter()
            .chain(self.operations.iter())
            .for_each(Serving::drain);
        for serving in self.serving.iter_mut().chain(self.operations.iter_mut()) {
            serving.stop_accepting().await;
        }
        self.lock = None;
    }

    /// Stops accepting, drains requests and streams (up to `shutdown_grace`), then ends
    /// what this process holds: with the memory store every session upstream; with
    /// Redis or sealed ids only the sessions whose stdio child lives here (the others
    /// carry on at the other replicas). Then stops the demo server.
    pub async fn shutdown(mut self) {
        self.stop_accepting().await;
        // Every worker drains within the grace period, at once.
        let draining: Vec<_> = self
            .serving
            .into_iter()
            .map(|serving| tokio::spawn(serving.shutdown()))
            .collect();
        for drained in draining {
            let _ = drained.await;
        }
        if let Some(operations) = self.operations {
            operations.shutdown().await;
        }
        drop(self.reaper);
        // Every upstream session still open is queued to be ended, and the endings get
        // until the deadline to finish.
        let deadline = tokio::time::Instant::now() + self.end_within;
        self.front.fleet.shutdown(deadline, &self.endings).await;
        drop(self.peer_tasks);
        if let Some(demo) = self.demo {
            demo.stop().await;
        }
        drop(self.workers);
    }
}

/// Runs until `shutdown` completes, then shuts down gracefully. On SIGHUP, `reload` reads
/// the configuration again and its upstream list is applied; a configuration that does
/// not load is refused, the reason logged, and the running one kept.
pub async fn run<R>(
    config: Config,
    shutdown: impl Future<Output = ()>,
    mut reload: R,
) -> Result<(), StartError>
where
    R: FnMut() -> Result<Config, ConfigError>,
{
    let mut hangups = hangups();
    let upstreams = config.upstream_set();
    let embedded = upstreams
        .iter()
        .any(|u| matches!(u.config.target, Target::Embedded));
    let in_front_of = in_front_of(&config, &upstreams);
    // The process's own limit, so only where the proxy is the process (not embedded).
    front::check_open_file_limit(&config.limits);
    let probe_within = config.upstream.connect_timeout.min(Duration::from_secs(3));
    let mut running = start(config).await?;
    // What each upstream speaks, found before the first client asks (a server not up yet
    // is found at its first use).
    let era = running.find_eras(probe_within).await;
    // The line a person reads first: where to point a client, and at what.
    tracing::info!(
        listen = %running.local_addr(),
        endpoint = %running.url(),
        upstream = %running.upstream_url(),
        era = %era,
        "mcp-session-proxy is serving {} in front of {in_front_of}",
        running.url(),
    );
    if embedded {
        tracing::info!(
            "no upstream is configured, so the embedded demo server answers (tools echo, \
             counter, slow, sample, sleep, whoami, announce, change_tools); put the proxy in \
             front of your own server with --upstream URL, or -- COMMAND ARGS for a stdio server"
        );
    }
    tokio::pin!(shutdown);
    let mut handed_over = running.handed_over();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            handed = next_handover(&mut handed_over) => match handed {
                Some(handed) => {
                    tracing::info!(
                        pid = handed.pid,
                        "the new process (pid {}) has the listeners and is ready; this one stops \
                         accepting and lets its requests and streams finish",
                        handed.pid
                    );
                    running.stop_accepting().await;
                    handed.stopped().await;
                    break;
                }
                None => handed_over = None,
            },
            Some(()) = next_hangup(&mut hangups) => match reload() {
                Ok(config) => {
                    let report = match running.reload(&config).await {
                        Ok(report) => report,
                        Err(e) => {
                            tracing::error!(error = %e, "configuration reload refused; the running configuration is kept");
                            continue;
                        }
                    };
                    tracing::info!(
                        kept = ?report.kept,
                        added = ?report.added,
                        changed = ?report.changed,
                        removed = ?report.removed,
                        sessions_ended = report.sessions_ended,
                        "configuration reloaded: upstreams and [auth] applied (other settings need a restart)"
                    );
                }
                Err(e) => tracing::error!(error = %e, "configuration reload refused; the running configuration is kept"),
            },
        }
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// What the proxy stands in front of, for the start-up line: the one upstream in a few
/// words, or each upstream by name with the path serving it.
fn in_front_of(config: &Config, upstreams: &[NamedUpstream]) -> String {
    let describe = |target: &Target| match target {
        Target::Embedded => "the embedded demo server".to_owned(),
        Target::Http(_) => target.to_string(),
        Target::Stdio(_) => "a stdio server, one process per session".to_owned(),
    };
    if let [only] = upstreams {
        return describe(&only.config.target);
    }
    let each: Vec<String> = upstreams
        .iter()
        .map(|u| {
            let also = if u.default {
                format!(" and {}", config.path)
            } else {
                String::new()
            };
            format!(
                "{} at {}/{}{also} ({})",
                u.name,
                config.path,
                u.name,
                describe(&u.config.target)
            )
        })
        .collect();
    format!("{} upstreams: {}", upstreams.len(), each.join("; "))
}

/// The next hand-over (`None` when there will be none).
async fn next_handover(
    handed_over: &mut Option<tokio::sync::oneshot::Receiver<HandedOver>>,
) -> Option<HandedOver> {
    match handed_over {
        Some(receiver) => receiver.await.ok(),
        None => std::future::pending().await,
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

#[cfg(unix)]
fn hangups() -> Hangups {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reloading is off");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Hangups {}

#[cfg(unix)]
async fn next_hangup(hangups: &mut Hangups) -> Option<()> {
    match hangups {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangups) -> Option<()> {
    std::future::pending().await
}

/// How long a reload waits for the keys of a new authorization server.
const RELOAD_KEYS_WITHIN: Duration = Duration::from_secs(10);

/// Who requests are from: `[auth]`'s verifier, or the credential headers' hash. Keys
/// fetched from the authorization server start being fetched now — unless `running`
/// (what a reload replaces) fetches the same ones already: they are kept.
fn auth(
    config: &Config,
    running: Option<&crate::auth::Auth>,
) -> Result<crate::auth::Auth, StartError> {
    use crate::auth::keys::IssuerKeys;
    use crate::auth::{Auth, Jwt, Keys, Verifier};
    use crate::config::AuthKeys;
    let Some(auth) = &config.auth else {
        return Ok(Auth::Credentials);
    };
    let keys = match &auth.keys {
        AuthKeys::Fixed { keys, skipped } => {
            for skipped in skipped {
                tracing::warn!("auth.jwks_file: key {skipped} is not used");
            }
            Keys::Fixed(Arc::new(keys.clone()))
        }
        AuthKeys::Fetched { source, max_age } => match running {
            Some(Auth::Jwt(jwt)) if jwt.keys.fetches(source, *max_age) => jwt.keys.clone(),
            _ => {
                Keys::Issuer(IssuerKeys::start(source.clone(), *max_age).map_err(StartError::Auth)?)
            }
        },
    };
    Ok(Auth::Jwt(Box::new(Jwt {
        verifier: Verifier::new(&auth.rules).keeping(auth.policy.claim_names()),
        policy: auth.policy.clone(),
        rates: match running {
            Some(Auth::Jwt(jwt)) if jwt.rates.limits() == auth.limits.as_slice() => {
                jwt.rates.clone()
            }
            _ => Arc::new(crate::auth::rates::Rates::new(auth.limits.clone())),
        },
        keys,
        resource: auth.resource.clone(),
    })))
}
