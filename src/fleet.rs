//! The upstreams the proxy serves, each at `{path}/{name}` (the default one also at
//! `{path}`), with the paths and background tasks of each; and the reload of that list
//! (SIGHUP).
//!
//! One [`Served`] per upstream: its session path, stateless path and pass-through, and
//! the tasks that belong to it (replica probes, the stateless pool's reaper, the stdio
//! death watch and sweep), stopped when it is dropped. The set is swapped whole on a
//! reload: an upstream whose configuration did not change keeps its `Served` (and so its
//! connections, children and pools); a changed one is rebuilt, and its sessions on
//! replicas that remain go on (records name a replica by its URL's hash); sessions of a
//! removed upstream, of a removed replica, or of a stdio upstream whose command changed
//! are ended — those this replica owns, and no others. With the memory store that is
//! every such session; with a shared store (Redis, sealed ids) it is those whose stdio
//! child lives here: the rest belong to the cluster, and replicas not yet reloaded still
//! serve them (each replica ends its own when it reloads; an HTTP upstream's are left to
//! expire). A list that would serve nothing is refused whole, the running one kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::Uri;
use tokio::task::JoinHandle;

use crate::config::{NamedUpstream, OldClients, Target};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::paths::upstream_error;
use crate::paths::{Cluster, PassThrough, SessionPath, SessionSettings, StatelessPath};
use crate::route::RouteRules;
use crate::session::{SessionRecord, Sessions, log_tag};
use crate::upstream::{
    self, Endings, Era, HttpUpstream, Replicas, StdioSettings, StdioUpstream, Upstream,
};

/// What every upstream's paths share.
#[derive(Debug)]
pub struct Shared {
    pub sessions: Arc<Sessions>,
    pub metrics: Arc<Metrics>,
    pub cluster: Arc<Cluster>,
    /// Keys sealing `requestState` (the first seals).
    pub keys: Vec<Vec<u8>>,
    /// The endpoint path, e.g. `/mcp`.
    pub base_path: String,
    /// The embedded demo server's URL, standing in for `Target::Embedded`.
    pub embedded: Option<Uri>,
    /// Ends upstream sessions in the background, bounded, for every upstream.
    pub endings: Arc<Endings>,
    /// An idle upstream connection is closed after this long.
    pub upstream_idle_timeout: Duration,
    /// Idle connections kept open per upstream replica, at most.
    pub upstream_idle_connections: usize,
    /// Clients' `Authorization` headers stay at the proxy (`[auth]` without
    /// `forward_token`).
    pub withhold_authorization: bool,
}

/// One upstream, served.
#[derive(Debug)]
pub struct Served {
    pub name: Arc<str>,
    /// `{path}/{name}`.
    pub path: String,
    pub default: bool,
    /// `upstream.require_session`.
    require_session: bool,
    /// What old clients get in front of a modern upstream.
    old_clients: OldClients,
    /// How logs name the upstream.
    pub label: Arc<str>,
    pub session: Arc<SessionPath>,
    pub stateless: Arc<StatelessPath>,
    pub passthrough: PassThrough,
    /// The client's token exchanged for this upstream's (`token_exchange`).
    pub exchange: Exchange,
    /// What it was built from (a reload compares it).
    config: NamedUpstream,
    tasks: Vec<JoinHandle<()>>,
}

/// Whether an upstream gets the token exchanged for the client's.
#[derive(Debug)]
pub enum Exchange {
    None,
    Configured(Arc<crate::auth::exchange::TokenExchange>),
    /// Configured, and could not be set up: no request goes to the upstream.
    Broken,
}

impl Served {
    /// What classification needs to know of this upstream now: its era (found now if it
    /// is not known yet — once, at its first use; then one atomic load) and its settings.
    pub async fn rules(&self) -> Result<RouteRules, ProxyError> {
        let upstream = self.session.upstream();
        if upstream.replicas().is_none() {
            // A stdio server: the proxy is every client's transport whatever its era
            // (each path finds the era with the child it starts).
            return Ok(RouteRules {
                require_session: self.require_session,
                old_clients_pass: false,
                modern_upstream: false,
            });
        }
        let era = match upstream.era() {
            Some(era) => era,
            // Boxed: probing is rare (until the era is known), and large.
            None => Box::pin(upstream.find_era())
                .await
                .map_err(|e| upstream_error(upstream, e))?,
        };
        let old_clients_pass = match era {
            Era::Legacy => true,
            Era::Modern => self.old_clients == OldClients::PassThrough,
            Era::Sse => false,
        };
        Ok(RouteRules {
            require_session: self.require_session,
            old_clients_pass,
            modern_upstream: era == Era::Modern,
        })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The upstreams served now.
#[derive(Debug, Default)]
pub struct Upstreams {
    list: Vec<Arc<Served>>,
    by_path: HashMap<String, Arc<Served>>,
}

impl Upstreams {
    fn new(list: Vec<Arc<Served>>, base_path: &str) -> Upstreams {
        let mut by_path = HashMap::new();
        for served in &list {
            by_path.insert(served.path.clone(), served.clone());
            if served.default {
                by_path.insert(base_path.to_owned(), served.clone());
            }
        }
        Upstreams { list, by_path }
    }

    /// The upstream served at `path`.
    pub fn at(&self, path: &str) -> Option<&Arc<Served>> {
        self.by_path.get(path)
    }

    pub fn named(&self, name: &str) -> Option<&Arc<Served>> {
        self.list.iter().find(|s| &*s.name == name)
    }

    pub fn all(&self) -> &[Arc<Served>] {
        &self.list
    }

    /// The default upstream (served at the bare path).
    pub fn default_upstream(&self) -> Option<&Arc<Served>> {
        self.list.iter().find(|s| s.default)
    }
}

/// The upstream set, swappable.
#[derive(Debug)]
pub struct Fleet {
    shared: Shared,
    current: ArcSwap<Upstreams>,
}

/// Why a reload was refused (the running upstreams are kept).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadRefused {
    #[error("the configuration names no upstream")]
    Nothing,
    #[error(
        "the configuration names no upstream (no upstream.url or upstream.command, no [upstreams.NAME]): it would serve the embedded demo server, which starts only with the proxy; restart to run it"
    )]
    NoDemo,
    #[error("upstream {0:?} has no replica to send requests to")]
    NoReplica(String),
    #[error(
        "[auth] would be turned on or off, or auth.forward_token changed: whether clients' tokens reach the upstreams is settled at start-up; restart to change it"
    )]
    AuthSwitch,
    #[error("{0}")]
    Auth(String),
}

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    pub kept: Vec<String>,
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    /// Sessions ended because their upstream (or replica) went away.
    pub sessions_ended: usize,
}

impl Fleet {
    pub fn new(shared: Shared, upstreams: &[NamedUpstream]) -> Fleet {
        let list = upstreams
            .iter()
            .map(|named| Arc::new(serve(&shared, named)))
            .collect();
        let current = ArcSwap::from_pointee(Upstreams::new(list, &shared.base_path));
        Fleet { shared, current }
    }

    /// The upstreams served now.
    pub fn upstreams(&self) -> Arc<Upstreams> {
        self.current.load_full()
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.shared.sessions
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The executor ending upstream sessions in the background.
    pub fn endings(&self) -> &Endings {
        &self.shared.endings
    }

    /// The reaper found `record` expired: its upstream session is queued to end (the
    /// reaper waits while the queue is full).
    pub async fn expired(&self, id: &str, record: SessionRecord) {
        let served = self.current.load().named(&record.upstream).cloned();
        match served {
            Some(served) => served.session.expired(id, record).await,
            None => {
                tracing::info!(session = %log_tag(id), upstream = %record.upstream, "an expired session's upstream is no longer configured")
            }
        }
    }

    /// Serves `upstreams` from now on (see the module documentation), unless they would
    /// serve nothing: then nothing changes.
    pub async fn reload(&self, upstreams: &[NamedUpstream]) -> Result<Reloaded, ReloadRefused> {
        if upstreams.is_empty() {
            return Err(ReloadRefused::Nothing);
        }
        for named in upstreams {
            match &named.config.target {
                Target::Embedded if self.shared.embedded.is_none() => {
                    return Err(ReloadRefused::NoDemo);
                }
                Target::Http(urls) if urls.is_empty() => {
                    return Err(ReloadRefused::NoReplica(named.name.clone()));
                }
                _ => {}
            }
        }
        let old = self.current.load_full();
        let mut report = Reloaded::default();
        let mut list = Vec::with_capacity(upstreams.len());
        for named in upstreams {
            match old.named(&named.name) {
                Some(served) if served.config == *named => {
                    report.kept.push(named.name.clone());
                    list.push(served.clone());
                }
                Some(_) => {
                    report.changed.push(named.name.clone());
                    list.push(Arc::new(serve(&self.shared, named)));
                }
                None => {
                    report.added.push(named.name.clone());
                    list.push(Arc::new(serve(&self.shared, named)));
                }
            }
        }
        let next = Arc::new(Upstreams::new(list, &self.shared.base_path));
        self.current.store(next.clone());
        // What went away: removed upstreams, and what changed under the same name.
        let mut retired = Vec::new();
        for served in old.all() {
            match next.named(&served.name) {
                None => {
                    report.removed.push(served.name.to_string());
                    retired.push((served.clone(), None));
                }
                Some(now) if !Arc::ptr_eq(now, served) => {
                    retired.push((served.clone(), Some(now.clone())))
                }
                Some(_) => {}
            }
        }
        if !retired.is_empty() {
            report.sessions_ended = self.retire(retired).await;
        }
        Ok(report)
    }

    /// Ends the sessions the retired upstreams leave behind that this replica owns (see
    /// the module documentation), then what they run.
    async fn retire(&self, retired: Vec<(Arc<Served>, Option<Arc<Served>>)>) -> usize {
        let sessions = &self.shared.sessions;
        // The memory store is this process's own; a shared one is the whole cluster's,
        // which this replica lists only to end what lives here.
        let shared = sessions.store().is_shared();
        let all = if shared {
            Vec::new()
        } else {
            match sessions.list(usize::MAX).await {
                Ok(all) => all,
                Err(e) => {
                    tracing::warn!(error = %e, "could not list sessions to end those of removed upstreams");
                    Vec::new()
                }
            }
        };
        let mut ended = 0;
        for (old, replacement) in retired {
            // Sessions go with their upstream, unless it was replaced by HTTP replicas and
            // theirs remains (a stdio upstream's children lived in the old one).
            let goes = |record: &SessionRecord| {
                let now = replacement
                    .as_ref()
                    .map(|n| n.session.upstream().replicas());
                match now {
                    Some(Some(replicas)) if old.session.upstream().replicas().is_some() => {
                        replicas.get(record.backing.replica).is_none()
                    }
                    _ => true,
                }
            };
            let mut records = Vec::new();
            let owned: Vec<String> = if shared {
                old.session.local_sessions()
            } else {
                all.iter()
                    .filter(|(_, r)| r.upstream == old.name)
                    .map(|(id, _)| id.clone())
                    .collect()
            };
            for id in owned {
                let Ok(Some(record)) = sessions.peek(&id).await else {
                    continue;
                };
                if record.upstream == old.name
                    && goes(&record)
                    && let Ok(Some(record)) = sessions.end(&id).await
                {
                    records.push(record);
                }
            }
            ended += records.len();
            old.session.end_records(records).await;
            old.stateless.close().await;
            // Stops what it ran (stdio children); nothing for HTTP.
            old.session.upstream().shutdown().await;
        }
        ended
    }

    /// At shutdown: every pooled upstream session is ended; with the memory store every
    /// session is ended upstream (they die with this process anyway); with a shared
    /// store, sessions are left to the other replicas, but the ones whose stdio child
    /// lives here are ended (nothing else can serve them). All of it goes through
    /// `endings`, which get until `deadline` to finish. Then stdio children stop.
    pub async fn shutdown(&self, deadline: tokio::time::Instant, endings: &Endings) {
        let upstreams = self.upstreams();
        let sessions = &self.shared.sessions;
        let ending = async {
            for served in upstreams.all() {
                served.stateless.close().await;
            }
            let records: Vec<(String, SessionRecord)> = if sessions.store().is_shared() {
                let mut local = Vec::new();
                for served in upstreams.all() {
                    for id in served.session.local_sessions() {
                        if let Ok(Some(record)) = sessions.end(&id).await {
                            local.push((id, record));
                        }
                    }
                }
                local
            } else {
                sessions.take_all().await.unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "could not read sessions at shutdown");
                    Vec::new()
                })
            };
            let mut by_upstream: HashMap<Arc<str>, Vec<SessionRecord>> = HashMap::new();
            for (_, record) in records {
                by_upstream
                    .entry(record.upstream.clone())
                    .or_default()
                    .push(record);
            }
            for (name, records) in by_upstream {
                if let Some(served) = upstreams.named(&name) {
                    served.session.end_records(records).await;
                }
            }
        };
        if tokio::time::timeout_at(deadline, ending).await.is_err() {
            tracing::warn!("not every upstream session could be queued to end at shutdown");
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        endings.shutdown(left).await;
        for served in upstreams.all() {
            served.session.upstream().shutdown().await;
        }
    }
}

/// Builds the paths and tasks of one upstream.
fn serve(shared: &Shared, named: &NamedUpstream) -> Served {
    let u = &named.config;
    let name: Arc<str> = named.name.as_str().into();
    let path = format!("{}/{}", shared.base_path, named.name);
    let metrics = &shared.metrics;
    let mut tasks = Vec::new();
    // A process-local upstream session that ends on its own (a stdio child dies, an
    // HTTP+SSE session's stream ends) is reported here.
    let (deaths_tx, mut deaths) = tokio::sync::mpsc::unbounded_channel();
    let exchange = u.token_exchange.clone().and_then(|config| {
        match crate::auth::exchange::TokenExchange::new(config) {
            Ok(exchange) => Some(Arc::new(exchange)),
            Err(e) => {
                // Without its exchange, the upstream would get no token: every request
                // to it is refused instead (see `Served::exchange`).
                tracing::error!(upstream = %name, error = %e, "the token exchange could not be set up");
                None
            }
        }
    });
    let exchange_broken = u.token_exchange.is_some() && exchange.is_none();
    // Broken, the exchange fails closed: no client token reaches the upstream either.
    let withhold = shared.withhold_authorization || exchange_broken;
    let upstream = match &u.target {
        Target::Stdio(command) => {
            let stdio = StdioUpstream::new(
                StdioSettings {
                    command: command.clone(),
                    timeout: u.timeout,
                    max_message_bytes: u.max_message_bytes,
                    stop_grace: u.stop_grace,
                    pool_size: u.pool_size,
                    max_children: u.max_children,
                    era: u.era,
                },
                deaths_tx,
            );
            Upstream::stdio(stdio, shared.endings.clone())
        }
        Target::Http(urls) => http(shared, u, urls, (exchange.clone(), withhold), deaths_tx),
        Target::Embedded => {
            let urls: Vec<Uri> = shared.embedded.iter().cloned().collect();
            http(shared, u, &urls, (exchange.clone(), withhold), deaths_tx)
        }
    };
    let session = Arc::new(SessionPath::new(
        SessionSettings {
            name: name.clone(),
            path: path.clone(),
            sse_idle_timeout: u.sse_idle_timeout,
            on_session_lost: u.on_session_lost,
            input_wait: named.stateless.request_state_ttl,
        },
        upstream.clone(),
        shared.sessions.clone(),
        metrics.clone(),
        shared.cluster.clone(),
    ));
    // Its stateless clients' own settings; handles are this upstream's sessions.
    let stateless = Arc::new(StatelessPath::new(
        upstream.clone(),
        metrics.clone(),
        &shared.keys,
        session.clone(),
        &named.stateless,
        u.sse_idle_timeout,
        shared.cluster.clone(),
    ));
    // Pooled and pinned upstream sessions idle too long are ended.
    tasks.push({
        let stateless = stateless.clone();
        let every = (stateless.shortest_idle_ttl() / 4).max(Duration::from_millis(250));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                stateless.reap();
            }
        })
    });
    // What bridged sessions (old clients of a modern upstream) held here goes when they
    // go quiet.
    tasks.push({
        let session = session.clone();
        let every = (shared.sessions.settings().idle_ttl / 4)
            .clamp(Duration::from_millis(200), Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                session.sweep_bridged();
            }
        })
    });
    {
        // A stdio server that dies on its own, or an HTTP+SSE stream that ends, takes its
        // session with it.
        let watched = session.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(key) = deaths.recv().await {
                watched.upstream_session_died(&key).await;
            }
        }));
        // Process-local upstream sessions (children, streams) of sessions ended
        // elsewhere, or idle, are ended.
        let session = session.clone();
        let every = (shared.sessions.settings().idle_ttl / 4)
            .clamp(Duration::from_millis(200), Duration::from_secs(30));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                session.sweep_local().await;
            }
        }));
    }
    if upstream.replicas().is_some() {
        // Replicas leave and rejoin rotation by their probes.
        let probed = upstream.clone();
        let every = u.health_interval;
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                probed.probe().await;
            }
        }));
    }
    Served {
        exchange: match exchange {
            Some(exchange) => Exchange::Configured(exchange),
            None if exchange_broken => Exchange::Broken,
            None => Exchange::None,
        },
        label: upstream.label().clone(),
        require_session: u.require_session,
        old_clients: u.old_clients,
        passthrough: PassThrough::new(
            name.clone(),
            upstream.clone(),
            metrics.clone(),
            shared.sessions.clone(),
        ),
        name,
        path,
        default: named.default,
        session,
        stateless,
        config: named.clone(),
        tasks,
    }
}

fn http(
    shared: &Shared,
    u: &crate::config::UpstreamConfig,
    urls: &[Uri],
    (exchange, withhold): (Option<Arc<crate::auth::exchange::TokenExchange>>, bool),
    deaths: tokio::sync::mpsc::UnboundedSender<String>,
) -> Upstream {
    // One set for every replica: the same credentials, read (and watched) once.
    let credentials = upstream::credentials::Credentials::start(&u.credentials);
    let replicas = urls
        .iter()
        .map(|url| {
            let latency = shared.metrics.upstream_histogram(&url.to_string());
            HttpUpstream::new(
                upstream::Settings {
                    url: url.clone(),
                    connect_timeout: u.connect_timeout,
                    timeout: u.timeout,
                    max_message_bytes: u.max_message_bytes,
                    idle_timeout: shared.upstream_idle_timeout,
                    max_idle: shared.upstream_idle_connections,
                    withhold_authorization: withhold,
                    credentials: credentials.clone(),
                    exchange: exchange.clone(),
                },
                Some(latency),
            )
        })
        .collect();
    Upstream::http(
        Arc::new(Replicas::new(replicas, u.era).reporting_deaths(deaths)),
        shared.endings.clone(),
    )
}
