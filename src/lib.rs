//! mcp-session-proxy: data-layer sessions, the stateless MCP 2026-07-28 protocol, and old
//! clients untouched, in front of MCP servers that only speak the 2025-11-25
//! `initialize` protocol.
//!
//! The module tree follows a request (docs/ARCHITECTURE.md): `front` takes HTTP in;
//! `route` classifies each message; `paths` serve it — `session` keeps sessions,
//! `rewrite` edits messages, `upstream` reaches the legacy server — and `response` is
//! what goes back. `jsonrpc`, `mcp` and `sse` are the vocabulary they share.

pub mod config;
pub mod demo;
pub mod error;
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
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::{Config, Target};
use crate::demo::{DemoOptions, DemoServer};
use crate::front::{Endpoint, Front, Ops, Role, Serving, serve};
use crate::metrics::Metrics;
use crate::paths::{PassThrough, SessionPath, StatelessPath, StatelessSettings};
use crate::route::Rules;
use crate::session::{MemoryStore, ReaperHandle, Sessions, StateSigner, Store, spawn_reaper};
use crate::upstream::{HttpUpstream, StdioSettings, StdioUpstream, Upstream};

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
}

/// A running proxy.
#[derive(Debug)]
pub struct Running {
    serving: Serving,
    operations: Option<Serving>,
    front: Arc<Front>,
    reaper: ReaperHandle,
    deaths: JoinHandle<()>,
    pool_reaper: JoinHandle<()>,
    demo: Option<DemoServer>,
    path: String,
    /// How long ending the upstream sessions may take at shutdown.
    end_within: Duration,
}

/// Starts the proxy: the embedded demo server when no upstream is configured, the
/// session reaper, and the listeners.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let metrics = Arc::new(Metrics::new());
    let (deaths_tx, deaths) = tokio::sync::mpsc::unbounded_channel();
    let u = &config.upstream;
    let (upstream, demo) = match &u.target {
        Target::Stdio(command) => {
            let stdio = StdioUpstream::new(
                StdioSettings {
                    command: command.clone(),
                    timeout: u.timeout,
                    max_message_bytes: u.max_message_bytes,
                    stop_grace: u.stop_grace,
                    pool_size: u.pool_size,
                    max_children: u.max_children,
                },
                deaths_tx,
            );
            (Upstream::Stdio(stdio), None)
        }
        Target::Http(url) => (http_upstream(&config, url.clone(), &metrics), None),
        Target::Embedded => {
            let demo = DemoServer::start(DemoOptions::default())
                .await
                .map_err(StartError::Demo)?;
            let url = demo
                .url()
                .parse()
                .map_err(|e: http::uri::InvalidUri| StartError::DemoUrl(e.to_string()))?;
            (http_upstream(&config, url, &metrics), Some(demo))
        }
    };
    // One key seals session `state` and stateless `requestState` (domain-separated).
    let key = match &config.session.state_key {
        Some(key) => key.0.clone(),
        None => {
            let mut key = vec![0u8; 32];
            rand::fill(key.as_mut_slice());
            key
        }
    };
    let sessions = Arc::new(Sessions::new(
        Store::Memory(MemoryStore::new()),
        StateSigner::new(&key),
        session::Settings {
            idle_ttl: config.session.idle_ttl,
            max_sessions: config.session.max_sessions,
        },
    ));
    let session_path = Arc::new(SessionPath::new(
        upstream.clone(),
        sessions.clone(),
        metrics.clone(),
        u.sse_idle_timeout,
    ));
    let stateless = Arc::new(StatelessPath::new(
        upstream.clone(),
        metrics.clone(),
        &key,
        session_path.clone(),
        &StatelessSettings {
            affinity: config.stateless.affinity.clone(),
            max_pooled: config.stateless.max_pooled,
            max_listens: config.stateless.max_listens,
            pool_idle_ttl: config.stateless.pool_idle_ttl,
            request_state_ttl: config.stateless.request_state_ttl,
            sse_idle_timeout: u.sse_idle_timeout,
        },
    ));
    let front = Arc::new(Front {
        endpoint: Endpoint {
            path: config.path.clone(),
            max_body_bytes: config.max_body_bytes,
            allowed_origins: config.allowed_origins.clone(),
            rules: Rules {
                require_session: u.require_session,
                sessionless_way_in: upstream.has_sessionless_way_in(),
            },
            upstream: upstream.label().clone(),
            session: session_path.clone(),
            stateless: stateless.clone(),
            passthrough: PassThrough::new(upstream.clone(), metrics.clone()),
        },
        ops: Ops {
            session: session_path.clone(),
            metrics: metrics.clone(),
            serve_metrics: config.admin.metrics,
            admin_token: config.admin.token.clone(),
        },
        metrics,
    });
    let reap_after = stateless.shortest_idle_ttl();
    let pool_reaper = spawn_pool_reaper(stateless, reap_after);
    let deaths = spawn_death_watch(session_path.clone(), deaths);
    let reaper = spawn_reaper(sessions, config.session.reap_interval, {
        let session_path = session_path.clone();
        move |id, record| session_path.expired(&id, record)
    });
    let main_role = match config.admin.listen {
        Some(_) => Role::Mcp,
        None => Role::McpAndOperations,
    };
    let serving = listen(config.listen, &front, main_role, config.shutdown_grace).await?;
    let operations = match config.admin.listen {
        Some(addr) => Some(listen(addr, &front, Role::Operations, config.shutdown_grace).await?),
        None => None,
    };
    Ok(Running {
        serving,
        operations,
        front,
        reaper,
        deaths,
        pool_reaper,
        demo,
        path: config.path,
        // A stdio child may need all three steps (stdin, SIGTERM, SIGKILL) to end.
        end_within: Duration::from_secs(5).max(u.stop_grace * 3 + Duration::from_secs(1)),
    })
}

/// Ends pooled and pinned upstream sessions that have been idle too long.
fn spawn_pool_reaper(stateless: Arc<StatelessPath>, idle_ttl: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval((idle_ttl / 4).max(Duration::from_millis(250)));
        loop {
            tick.tick().await;
            stateless.reap();
        }
    })
}

fn http_upstream(config: &Config, url: http::Uri, metrics: &Metrics) -> Upstream {
    let latency = metrics.upstream_histogram(&url.to_string());
    Upstream::Http(Arc::new(HttpUpstream::new(
        upstream::Settings {
            url,
            connect_timeout: config.upstream.connect_timeout,
            timeout: config.upstream.timeout,
            max_message_bytes: config.upstream.max_message_bytes,
        },
        Some(latency),
    )))
}

/// A stdio server that dies on its own takes its session with it.
fn spawn_death_watch(
    session_path: Arc<SessionPath>,
    mut deaths: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(key) = deaths.recv().await {
            session_path.upstream_session_died(&key).await;
        }
    })
}

async fn listen(
    addr: SocketAddr,
    front: &Arc<Front>,
    role: Role,
    grace: Duration,
) -> Result<Serving, StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })?;
    serve(listener, front.clone(), role, grace)
        .map_err(|source| StartError::Listen { addr, source })
}

impl Running {
    pub fn local_addr(&self) -> SocketAddr {
        self.serving.local_addr()
    }

    /// The operations listener's address, when `admin.listen` gave it its own.
    pub fn operations_addr(&self) -> Option<SocketAddr> {
        self.operations.as_ref().map(Serving::local_addr)
    }

    /// The client-facing MCP endpoint, e.g. `http://127.0.0.1:8080/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.local_addr(), self.path)
    }

    /// The upstream being proxied to (the embedded demo server's URL when it runs).
    pub fn upstream_url(&self) -> &str {
        &self.front.endpoint.upstream
    }

    /// Sessions live in this proxy.
    pub fn live_sessions(&self) -> usize {
        self.front.endpoint.session.sessions().live()
    }

    /// Stops accepting, drains requests, ends every session upstream (they live in this
    /// process's memory and would be lost anyway), then stops the demo server.
    pub async fn shutdown(self) {
        self.serving.shutdown().await;
        if let Some(operations) = self.operations {
            operations.shutdown().await;
        }
        drop(self.reaper);
        self.deaths.abort();
        self.pool_reaper.abort();
        let endpoint = &self.front.endpoint;
        endpoint.stateless.close().await;
        endpoint.session.end_all(self.end_within).await;
        endpoint.session.upstream().shutdown().await;
        if let Some(demo) = self.demo {
            demo.stop().await;
        }
    }
}

/// Runs until `shutdown` completes, then shuts down gracefully.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let embedded = config.upstream.target == Target::Embedded;
    let in_front_of = match &config.upstream.target {
        Target::Embedded => "the embedded demo server".to_owned(),
        Target::Http(url) => url.to_string(),
        Target::Stdio(_) => "a stdio server, one process per session".to_owned(),
    };
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
    shutdown.await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}
