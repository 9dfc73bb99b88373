//! mcp-session-proxy: data-layer sessions, the stateless MCP 2026-07-28 protocol, and old
//! clients untouched, in front of MCP servers that only speak the 2025-11-25
//! `initialize` protocol.
//!
//! The module tree follows a request (docs/ARCHITECTURE.md): `front` takes HTTP in and
//! `fleet` names the upstream its path is for; `route` classifies each message; `paths`
//! serve it — `session` keeps sessions (in memory, in Redis, or sealed into their ids),
//! `rewrite` edits messages, `upstream` reaches the legacy server — and `response` is
//! what goes back. `jsonrpc`, `mcp` and `sse` are the vocabulary they share.

pub mod auth;
pub mod config;
pub mod demo;
pub mod error;
pub mod fairness;
pub mod fleet;
pub mod front;
pub mod jsonrpc;
pub mod mcp;
pub mod metrics;
pub mod paths;
pub mod response;
pub mod rewrite;
pub mod route;
pub mod session;
pub mod sse;
pub mod stateless;
pub mod throttle;
pub mod upstream;
pub mod workers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Handle;

use crate::config::{Config, ConfigError, NamedUpstream, StoreConfig, Target};
use crate::demo::{DemoOptions, DemoServer};
use crate::fleet::{Fleet, Reloaded, Shared};
use crate::front::{Admission, ConnectionLimits, Front, Limits, Ops, Role, Serving, serve};
use crate::metrics::Metrics;
use crate::paths::Cluster;
use crate::session::{
    MemoryStore, ReaperHandle, RedisStore, SealedStore, Sessions, StateSigner, Store, keyed_hmac,
    spawn_reaper,
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
    #[error("cannot start the embedded demo server: {0}")]
    Demo(std::io::Error),
    #[error("the embedded demo server has an unusable address: {0}")]
    DemoUrl(String),
    #[error("cannot set up the session store: {0}")]
    Store(session::StoreError),
    #[error("cannot start the worker threads: {0}")]
    Workers(std::io::Error),
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
}

/// Starts the proxy: the embedded demo server when no upstream is configured, the
/// session store, every upstream's paths and tasks, the session reaper, and the
/// listeners.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let metrics = Arc::new(Metrics::new());
    // The workers and their listeners first: the address other replicas reach this one
    // at may be the port just bound, and the upstream clients keep idle connections per
    // worker.
    // `workers` unset (a proxy embedded in another program, the tests): the caller's
    // runtime serves; the binary always sets it (src/main.rs).
    let count = config.workers.unwrap_or(1);
    let workers = match config.workers {
        Some(n) => Workers::start(n).map_err(StartError::Workers)?,
        None => Workers::default(),
    };
    let sockets = workers::bind(config.listen, count)
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?
        .into_iter();
    let operations_listener = match config.admin.listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let bound = sockets.as_slice().first().map(TcpSocket::local_addr);
    let local = bound
        .unwrap_or_else(|| Err(std::io::Error::other("no socket was bound")))
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let advertise = config
        .cluster
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{}", reachable(local)));
    let cluster = Arc::new(Cluster::new(advertise, config.upstream.timeout));

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
    let store = match &s.store {
        StoreConfig::Memory => Store::Memory(MemoryStore::new()),
        StoreConfig::Redis { url } => Store::Redis(
            RedisStore::new(url, s.idle_ttl, s.max_sessions).map_err(StartError::Store)?,
        ),
        StoreConfig::Sealed { .. } => {
            Store::Sealed(SealedStore::new(&sealing).map_err(StartError::Store)?)
        }
    };
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
            cluster,
            keys,
            base_path: config.path.clone(),
            embedded,
        },
        &upstreams,
    ));
    let front = Arc::new(Front {
        limits: Limits {
            path: config.path.clone(),
            max_body_bytes: config.max_body_bytes,
            body_timeout: config.limits.request_body_timeout,
            allowed_origins: config.allowed_origins.clone(),
            auth: auth(&config),
        },
        fleet: fleet.clone(),
        ops: Ops {
            fleet: fleet.clone(),
            metrics: metrics.clone(),
            serve_metrics: config.admin.metrics,
            admin_token: config.admin.token.clone(),
        },
        connections: ConnectionLimits {
            admission: Admission::new(
                config.limits.max_connections,
                config.limits.max_connections_per_address,
                metrics.clone(),
            ),
            header_read_timeout: config.limits.header_read_timeout,
            idle_timeout: config.limits.idle_timeout,
        },
        metrics,
    });
    let reaper = spawn_reaper(sessions, s.reap_interval, move |id, record| {
        let fleet = fleet.clone();
        async move { fleet.expired(&id, record).await }
    });
    let main_role = match config.admin.listen {
        Some(_) => Role::Mcp,
        None => Role::McpAndOperations,
    };
    let mut serving = Vec::with_capacity(count);
    let runtimes: Vec<Handle> = workers.handles().cloned().collect();
    for (i, socket) in sockets.enumerate() {
        // The listener, its accept loop and its connections belong to the worker.
        let _inside = runtimes.get(i).map(Handle::enter);
        let listener = listen(socket, config.listen)?;
        serving.push(serve_on(
            listener,
            &front,
            main_role,
            config.shutdown_grace,
        )?);
    }
    let operations = match operations_listener {
        Some(listener) => Some(serve_on(
            listener,
            &front,
            Role::Operations,
            config.shutdown_grace,
        )?),
        None => None,
    };
    let stop_grace = upstreams
        .iter()
        .map(|u| u.config.stop_grace)
        .max()
        .unwrap_or(config.upstream.stop_grace);
    Ok(Running {
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
    })
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

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })
}

/// A bound socket listening, on the runtime this is called in.
fn listen(socket: TcpSocket, addr: SocketAddr) -> Result<TcpListener, StartError> {
    socket
        .listen(workers::BACKLOG)
        .map_err(|source| StartError::Listen { addr, source })
}

fn serve_on(
    listener: TcpListener,
    front: &Arc<Front>,
    role: Role,
    grace: Duration,
) -> Result<Serving, StartError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    serve(listener, front.clone(), role, grace)
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

    /// Sessions live in this proxy.
    pub fn live_sessions(&self) -> usize {
        self.front.fleet.sessions().live()
    }

    /// Serves the upstream list of `config` from now on (the rest of `config` is not
    /// applied: it needs a restart).
    pub async fn reload(&self, config: &Config) -> Reloaded {
        self.front.fleet.reload(&config.upstream_set()).await
    }

    /// Stops accepting, drains requests and streams (up to `shutdown_grace`), then ends
    /// what this process holds: with the memory store every session upstream; with
    /// Redis or sealed ids only the sessions whose stdio child lives here (the others
    /// carry on at the other replicas). Then stops the demo server.
    pub async fn shutdown(self) {
        // Every worker stops accepting at once, then each drains within the grace period.
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
    let running = start(config).await?;
    // The line a person reads first: where to point a client, and at what.
    tracing::info!(
        listen = %running.local_addr(),
        endpoint = %running.url(),
        upstream = %running.upstream_url(),
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
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(()) = next_hangup(&mut hangups) => match reload() {
                Ok(config) => {
                    let report = running.reload(&config).await;
                    tracing::info!(
                        kept = ?report.kept,
                        added = ?report.added,
                        changed = ?report.changed,
                        removed = ?report.removed,
                        sessions_ended = report.sessions_ended,
                        "configuration reloaded: upstreams applied (other settings need a restart)"
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

/// Who requests are from: `[auth]`'s verifier, or the credential headers' hash.
fn auth(config: &Config) -> crate::auth::Auth {
    use crate::auth::{Auth, Jwt, Verifier};
    let Some(auth) = &config.auth else {
        return Auth::Credentials;
    };
    for skipped in &auth.skipped {
        tracing::warn!("auth.jwks_file: key {skipped} is not used");
    }
    Auth::Jwt(Box::new(Jwt {
        verifier: Verifier::new(auth.keys.clone(), &auth.rules),
        resource_metadata: auth.resource_metadata.clone(),
    }))
}
