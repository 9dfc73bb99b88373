//! mcp-session-proxy: data-layer sessions (and old clients, untouched) in front of MCP
//! servers that only speak the 2025-11-25 `initialize` protocol.
//!
//! The module tree follows a request (docs/ARCHITECTURE.md): `front` takes HTTP in and
//! chooses the path; `session` keeps sessions; `rewrite` edits messages; `upstream`
//! reaches the legacy server; `jsonrpc`, `mcp` and `sse` are the vocabulary they share.

pub mod config;
pub mod demo;
pub mod error;
pub mod front;
pub mod jsonrpc;
pub mod mcp;
pub mod metrics;
pub mod rewrite;
pub mod session;
pub mod sse;
pub mod stateless;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::demo::{DemoOptions, DemoServer};
use crate::front::{App, Role, Serving, serve, short_id};
use crate::metrics::Metrics;
use crate::session::{
    MemoryStore, ReaperHandle, SessionRecord, Sessions, StateSigner, Store, spawn_reaper,
};
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
    app: Arc<App>,
    reaper: ReaperHandle,
    deaths: tokio::task::JoinHandle<()>,
    pool_reaper: tokio::task::JoinHandle<()>,
    demo: Option<DemoServer>,
    path: String,
    /// How long ending the upstream sessions may take at shutdown.
    end_within: Duration,
}

/// Starts the proxy: the embedded demo server when no upstream is configured, the
/// session reaper, and the listener.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let metrics = Arc::new(Metrics::new());
    let (deaths_tx, deaths) = tokio::sync::mpsc::unbounded_channel();
    let (upstream, demo) = match (&config.upstream.url, &config.upstream.command) {
        (_, Some(command)) => {
            let stdio = StdioUpstream::new(
                StdioSettings {
                    command: command.clone(),
                    timeout: config.upstream.timeout,
                    max_message_bytes: config.upstream.max_message_bytes,
                    stop_grace: config.upstream.stop_grace,
                    pool_size: config.upstream.pool_size,
                    max_children: config.upstream.max_children,
                },
                deaths_tx,
            );
            (Upstream::Stdio(stdio), None)
        }
        (Some(url), None) => (http_upstream(&config, url.clone(), &metrics), None),
        (None, None) => {
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
    let signer = StateSigner::new(&key);
    let sessions = Arc::new(Sessions::new(
        Store::Memory(MemoryStore::new()),
        signer,
        session::Settings {
            idle_ttl: config.session.idle_ttl,
            max_sessions: config.session.max_sessions,
        },
    ));
    let app = Arc::new(App::new(&config, upstream, sessions.clone(), metrics, &key));
    let pool_reaper = spawn_pool_reaper(app.clone(), config.stateless.pool_idle_ttl);
    let deaths = spawn_death_watch(app.clone(), deaths);
    let reaper = spawn_reaper(sessions, config.session.reap_interval, {
        let app = app.clone();
        move |id, record| {
            app.metrics().sessions_expired.inc();
            tracing::info!(session = %short_id(&id), "session expired");
            app.end_upstream(record.upstream_session, record.negotiated.protocol_version);
        }
    });
    let main_role = match config.admin.listen {
        Some(_) => Role::Mcp,
        None => Role::McpAndOperations,
    };
    let serving = listen(config.listen, &app, main_role, config.shutdown_grace).await?;
    let operations = match config.admin.listen {
        Some(addr) => Some(listen(addr, &app, Role::Operations, config.shutdown_grace).await?),
        None => None,
    };
    Ok(Running {
        serving,
        operations,
        app,
        reaper,
        deaths,
        pool_reaper,
        demo,
        path: config.path,
        // A stdio child may need all three steps (stdin, SIGTERM, SIGKILL) to end.
        end_within: Duration::from_secs(5)
            .max(config.upstream.stop_grace * 3 + Duration::from_secs(1)),
    })
}

/// Ends pooled upstream sessions that have been idle too long.
fn spawn_pool_reaper(app: Arc<App>, idle_ttl: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval((idle_ttl / 4).max(Duration::from_millis(250)));
        loop {
            tick.tick().await;
            app.pool().reap();
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

/// A stdio server that dies on its own takes its session with it: the session is
/// forgotten at once (its client gets -32043), not at its next use or expiry.
fn spawn_death_watch(
    app: Arc<App>,
    mut deaths: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(key) = deaths.recv().await {
            if let Some(stdio) = app.upstream().stdio() {
                stdio.forget(&key);
            }
            let sessions = match app.sessions().list(usize::MAX).await {
                Ok(sessions) => sessions,
                Err(e) => {
                    tracing::warn!(error = %e, "could not look up the session of a dead stdio server");
                    continue;
                }
            };
            let owner = sessions
                .into_iter()
                .find(|(_, record)| record.upstream_session.as_deref() == Some(key.as_str()));
            if let Some((id, _)) = owner
                && let Ok(Some(_)) = app.sessions().end(&id).await
            {
                app.metrics().sessions_lost.inc();
                tracing::info!(session = %short_id(&id), "session ended: its stdio server died");
            }
        }
    })
}

async fn listen(
    addr: SocketAddr,
    app: &Arc<App>,
    role: Role,
    grace: Duration,
) -> Result<Serving, StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })?;
    serve(listener, app.clone(), role, grace).map_err(|source| StartError::Listen { addr, source })
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
        self.app.upstream().label()
    }

    /// Sessions live in this proxy.
    pub fn live_sessions(&self) -> usize {
        self.app.sessions().live()
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
        self.app.pool().close().await;
        match self.app.sessions().take_all().await {
            Ok(all) => {
                let ended = end_all_upstream(self.app.upstream(), all);
                if tokio::time::timeout(self.end_within, ended).await.is_err() {
                    tracing::warn!("not every upstream session could be ended at shutdown");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read sessions at shutdown"),
        }
        self.app.upstream().shutdown().await;
        if let Some(demo) = self.demo {
            demo.stop().await;
        }
    }
}

/// Ends every session's upstream connection, 64 at a time.
async fn end_all_upstream(upstream: &Upstream, sessions: Vec<(String, SessionRecord)>) {
    let mut ending = tokio::task::JoinSet::new();
    for (_, record) in sessions {
        if ending.len() >= 64 {
            ending.join_next().await;
        }
        let upstream = upstream.clone();
        ending.spawn(async move {
            let binding = upstream::Binding {
                session_id: record.upstream_session.as_deref(),
                protocol_version: record.negotiated.protocol_version,
            };
            let _ = upstream.terminate(binding).await;
        });
    }
    while ending.join_next().await.is_some() {}
}

/// Runs until `shutdown` completes, then shuts down gracefully.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let running = start(config).await?;
    tracing::info!(
        listen = %running.local_addr(),
        endpoint = %running.url(),
        upstream = %running.upstream_url(),
        "mcp-session-proxy is serving"
    );
    shutdown.await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}
