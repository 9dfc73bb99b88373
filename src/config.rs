//! Configuration: built-in defaults < `proxy.toml` (or `--config FILE`) < `MCP_PROXY_*`
//! environment variables < command-line flags, read with figment into raw serde structs
//! (unknown keys refused), then checked into a typed [`Config`] whose errors name the key.

mod raw;
mod read;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};
use http::Uri;
use read::Origin;

pub use crate::paths::{Affinity, Fallback};
pub use crate::upstream::{CommandSpec, Era};

pub use raw::{RawAuth, RawConfig};

/// The health endpoint: the process is alive and serving. The MCP path may not take it.
pub const HEALTH_PATH: &str = "/healthz";

/// The file read when no `--config` is given (skipped if absent).
pub const DEFAULT_FILE: &str = "proxy.toml";
/// Prefix of configuration environment variables; `__` separates nested keys
/// (`MCP_PROXY_SESSION__IDLE_TTL=10m`).
pub const ENV_PREFIX: &str = "MCP_PROXY_";

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Path of the MCP endpoint, e.g. `/mcp`.
    pub path: String,
    pub max_body_bytes: usize,
    /// Extra browser origins allowed besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// How long in-flight requests may take to finish at shutdown.
    pub shutdown_grace: Duration,
    /// Threads serving requests; `None`: one per CPU core.
    pub workers: Option<usize>,
    pub session: SessionConfig,
    pub upstream: UpstreamConfig,
    pub log: LogConfig,
    pub admin: AdminConfig,
    pub stateless: StatelessConfig,
    /// The `[upstreams.NAME]` tables, in name order (their settings are resolved against
    /// `upstream` by [`Config::upstream_set`]).
    pub upstreams: Vec<UpstreamDef>,
    pub cluster: ClusterConfig,
    pub limits: LimitsConfig,
    /// `[auth]`: bearer tokens verified; `None`: callers told apart by their credential
    /// headers, nothing verified.
    pub auth: Option<AuthConfig>,
    pub upgrade: UpgradeConfig,
    pub telemetry: TelemetryConfig,
}

/// `[telemetry]`: where traces go (`telemetry::Settings` adds the OpenTelemetry SDKs'
/// variables for what is not set here).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL.
    pub endpoint: Option<String>,
    pub service_name: Option<String>,
    /// A sampler by `OTEL_TRACES_SAMPLER`'s names, checked.
    pub sampler: Option<String>,
    pub sampler_arg: Option<f64>,
}

/// `[upgrade]`: restarts that drop nothing (`listeners::handover`).
#[derive(Debug, Clone, Default)]
pub struct UpgradeConfig {
    /// The Unix socket a running proxy hands its listeners over on (`upgrade.socket`);
    /// `None`: no hand-over, a new process needs the address free.
    pub socket: Option<PathBuf>,
}

/// `[auth]`: verified bearer JWTs.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Where the keys that verify tokens come from.
    pub keys: AuthKeys,
    pub rules: crate::auth::Rules,
    /// The client's `Authorization` goes on to the upstream.
    pub forward_token: bool,
    /// This server as a protected resource (RFC 9728).
    pub resource: crate::auth::Resource,
    /// `[[auth.rules]]`.
    pub policy: crate::auth::Policy,
    /// `[[auth.limits]]`.
    pub limits: Vec<crate::auth::rates::Limit>,
}

/// Where `[auth]`'s keys come from.
#[derive(Debug, Clone)]
pub enum AuthKeys {
    /// The HS256 secret, or the JWKS file's signing keys (and the keys of the file left
    /// out, and why: logged at start-up).
    Fixed {
        keys: Vec<crate::auth::Key>,
        skipped: Vec<String>,
    },
    /// Fetched from the authorization server, and fetched again after `max_age`.
    Fetched {
        source: crate::auth::keys::Source,
        max_age: Duration,
    },
}

/// What bounds the proxy's resources against many, slow or idle clients and a busy
/// upstream.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// Client connections open at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Client connections open at once from one IP address; `None`: no cap per address.
    pub max_connections_per_address: Option<usize>,
    /// A request head must arrive in full within this (from the connection's opening,
    /// or from its first byte on a kept-alive connection).
    pub header_read_timeout: Duration,
    /// A kept-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// A request body must arrive in full within this after its head.
    pub request_body_timeout: Duration,
    /// An idle connection to the upstream is closed after this long.
    pub upstream_idle_timeout: Duration,
    /// Idle connections to the upstream kept open, at most.
    pub upstream_idle_connections: usize,
    /// Resident memory (bytes) at which new work is shed (`overload`); `None`: 90 % of
    /// the cgroup's memory limit, or not watched without one.
    pub max_memory: Option<u64>,
    /// Open file descriptors at which new connections and work are shed; `None`: 90 % of
    /// the open-file limit.
    pub max_open_files: Option<u64>,
}

/// How proxy replicas reach each other.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The base URL other replicas reach this one at (`cluster.advertise`); `None`:
    /// `http://<listen>` once the listener is bound.
    pub advertise: Option<String>,
    /// The other replicas' base URLs (`cluster.peers`): told of every sealed session
    /// deleted here, and asked for theirs at start-up.
    pub peers: Vec<String>,
    /// Requests of one caller this replica forwards to others at once.
    pub max_forwarded_per_caller: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            advertise: None,
            peers: Vec::new(),
            max_forwarded_per_caller: 16,
        }
    }
}

/// One `[upstreams.NAME]` table.
#[derive(Debug, Clone)]
pub struct UpstreamDef {
    pub name: String,
    /// Also served at the bare endpoint path.
    pub default: bool,
    pub target: Target,
    /// Its own credentials toward the upstream.
    pub credentials: Vec<Credential>,
    /// Its own token exchange.
    pub token_exchange: Option<TokenExchangeConfig>,
    pub overrides: UpstreamOverrides,
    /// Its `[upstreams.NAME.stateless]` table merged over `[stateless]`; `None`: it has
    /// none (the `[stateless]` settings apply).
    pub stateless: Option<StatelessConfig>,
}

/// Per-upstream values of the `[upstream]` settings; `None`: the `[upstream]` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamOverrides {
    pub pool_size: Option<usize>,
    pub max_children: Option<usize>,
    pub stop_grace: Option<Duration>,
    pub require_session: Option<bool>,
    pub connect_timeout: Option<Duration>,
    pub timeout: Option<Duration>,
    pub sse_idle_timeout: Option<Duration>,
    pub max_message_bytes: Option<usize>,
    pub on_session_lost: Option<OnSessionLost>,
    pub health_interval: Option<Duration>,
    pub era: Option<Option<Era>>,
    pub old_clients: Option<OldClients>,
}

/// One upstream as the proxy runs it: its name, whether `/mcp` serves it, its target and
/// its settings, and how its stateless clients are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedUpstream {
    pub name: String,
    pub default: bool,
    pub config: UpstreamConfig,
    pub stateless: StatelessConfig,
}

/// The name of the upstream that `[upstream] url` / `command` (and `--upstream`, `-- cmd`)
/// define.
pub const DEFAULT_UPSTREAM: &str = "default";

/// What happens when an upstream loses a session (it restarted, or its replica died).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSessionLost {
    /// The mapping is dropped; the client hears -32043 and starts anew.
    Fail,
    /// The recorded `initialize` is replayed on a healthy replica, the client keeps its
    /// sessionId, and a request that is safe to repeat is retried once.
    Reinitialize,
}

/// Where session records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// In this process (the default, the fastest).
    Memory,
    /// In Redis, shared by proxy replicas: one server, or the primary Redis Sentinel
    /// names.
    Redis(RedisConfig),
    /// Nowhere: the sessionId itself carries the route, sealed with the first key;
    /// every key opens.
    Sealed { keys: Vec<Secret> },
}

/// `session.redis_*`: the Redis that keeps the sessions, and how much a write waits for
/// its replicas.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub servers: RedisServers,
    /// The user and password of the servers that keep the sessions (`redis_username`,
    /// `redis_password`; with `redis_url` they may be in the URL instead).
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// The database (`redis_db` with sentinels; the URL's path with `redis_url`).
    pub db: i64,
    /// How long one operation may take, connecting included.
    pub timeout: Duration,
    /// Replicas that must have a session's creation or deletion before the client hears
    /// of it (`WAIT`); 0: none are waited for.
    pub wait_replicas: usize,
    /// How long a creation or deletion waits for them at most.
    pub wait_timeout: Duration,
    /// Sessions each worker thread keeps in memory between uses, kept true by Redis
    /// (`session.redis_cache_sessions`; 0: every use asks Redis).
    pub cache_sessions: usize,
}

/// Which Redis servers keep the sessions.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisServers {
    /// One server at a fixed address (`redis_url`).
    Server { url: String },
    /// The primary that these Redis Sentinels name for `master_name` (`redis_sentinels`,
    /// `redis_master_name`); asked again when it fails or is replaced.
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("servers", &self.servers)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("db", &self.db)
            .field("timeout", &self.timeout)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("cache_sessions", &self.cache_sessions)
            .finish()
    }
}

impl std::fmt::Debug for RedisServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A URL may carry a password: printed without it.
        match self {
            RedisServers::Server { url } => f
                .debug_struct("Server")
                .field("url", &without_password(url))
                .finish(),
            RedisServers::Sentinel {
                sentinels,
                master_name,
            } => f
                .debug_struct("Sentinel")
                .field(
                    "sentinels",
                    &sentinels
                        .iter()
                        .map(|u| without_password(u))
                        .collect::<Vec<_>>(),
                )
                .field("master_name", master_name)
                .finish(),
        }
    }
}

/// `url` with the password of its user information (`redis://user:password@host`)
/// replaced, for logs and `Debug`.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:<hidden>@{}", &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

/// Serving stateless (2026-07-28) clients (`[stateless]`, or an upstream's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatelessConfig {
    /// How their calls map onto upstream sessions (`stateless.affinity` and the keys of
    /// the chosen mode: `fallback`, `pin_header`, `max_pinned`, `pin_idle_ttl`,
    /// `handle_*`, `max_handles_per_caller`).
    pub affinity: Affinity,
    /// Upstream sessions open at once for shared and isolated calls.
    pub max_pooled: usize,
    /// `subscriptions/listen` streams open at once (each holds its own upstream session).
    pub max_listens: usize,
    /// A pooled upstream session idle this long is ended.
    pub pool_idle_ttl: Duration,
    /// How long an `input_required` call waits for its retry (the `requestState` lifetime).
    pub request_state_ttl: Duration,
    /// Calls of one caller waiting for its input at once (0: no bound).
    pub max_waiting_per_caller: usize,
    /// Run the tasks extension for a legacy upstream (2026-07-28, SEP-2663).
    pub tasks: bool,
    /// Tools whose calls become tasks though they declare no `execution.taskSupport`.
    pub task_tools: Vec<String>,
    /// Any call of a client declaring the extension that has not answered within this
    /// long becomes a task (`None`: only tools that declare task support, or are named).
    pub task_after: Option<Duration>,
    /// How long a task lives from its creation (its `ttlMs`), its result kept until then.
    pub task_ttl: Duration,
}

/// Operations endpoints: `/metrics`, `/readyz`, `/admin/sessions`.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// A separate listener for the operations endpoints; `None`: the main listener.
    pub listen: Option<SocketAddr>,
    /// Serve `/metrics`.
    pub metrics: bool,
    /// Bearer token of the admin API; `None`: the admin API is off.
    pub token: Option<Secret>,
}

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub idle_ttl: Duration,
    pub max_sessions: usize,
    /// Upstream sessions one caller may hold at once (per proxy process); 0: no cap.
    pub max_sessions_per_caller: usize,
    /// New upstream sessions one caller may open a minute (per proxy process); 0: no
    /// limit.
    pub creations_per_caller_per_minute: u32,
    pub reap_interval: Duration,
    /// Key of the `state` MAC; `None` means a random key per process.
    pub state_key: Option<Secret>,
    pub store: StoreConfig,
    /// Deleted sealed sessions remembered at once (`session.max_tombstones`).
    pub max_tombstones: usize,
}

/// The legacy server behind the proxy (`upstream.url`, `upstream.command`, or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The embedded demo server, started in-process and proxied to over HTTP (neither
    /// `url` nor `command` set).
    Embedded,
    /// A Streamable HTTP server: one or more replicas of it (never empty).
    Http(Vec<Uri>),
    /// A stdio server: a child process per upstream session.
    Stdio(CommandSpec),
}

impl Target {
    /// The HTTP upstream's (first) URL, if the target is one.
    pub fn url(&self) -> Option<&Uri> {
        match self {
            Target::Http(urls) => urls.first(),
            _ => None,
        }
    }

    /// The stdio server's command, if the target is one.
    pub fn command(&self) -> Option<&CommandSpec> {
        match self {
            Target::Stdio(command) => Some(command),
            _ => None,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Embedded => f.write_str("the embedded demo server"),
            Target::Http(urls) => {
                for (i, url) in urls.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{url}")?;
                }
                Ok(())
            }
            Target::Stdio(command) => write!(f, "stdio: {}", command.program),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    pub target: Target,
    /// Started and initialized stdio children kept ready, per client identity.
    pub pool_size: usize,
    /// stdio children alive at once.
    pub max_children: usize,
    /// Time between the steps of stopping a stdio child.
    pub stop_grace: Duration,
    /// Requests without a data-layer session get -32044 instead of being passed through.
    pub require_session: bool,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub sse_idle_timeout: Duration,
    pub max_message_bytes: usize,
    pub on_session_lost: OnSessionLost,
    /// How often each replica is probed (its era found again; a legacy one asked for a
    /// session, ended at once).
    pub health_interval: Duration,
    /// The era the operator pinned (`upstream.era`); `None`: found by probing.
    pub era: Option<Era>,
    /// What old clients (`initialize`) get in front of a modern upstream.
    pub old_clients: OldClients,
    /// Headers the proxy adds to every request to this (HTTP) upstream: its own
    /// credentials, never another upstream's.
    pub credentials: Vec<Credential>,
    /// The client's token exchanged for one for this (HTTP) upstream, never another's.
    pub token_exchange: Option<TokenExchangeConfig>,
}

/// `token_exchange`: what the proxy asks the authorization server for (RFC 8693), for
/// one upstream, and how it authenticates itself there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenExchangeConfig {
    /// `auth.issuer`: whose metadata names the token endpoint.
    pub issuer: String,
    /// `None`: the issuer's metadata's `token_endpoint`.
    pub token_endpoint: Option<String>,
    pub resource: Option<String>,
    pub audience: Option<String>,
    pub scope: Option<String>,
    pub client_id: String,
    pub client_secret: CredentialSource,
}

/// One header of the proxy's credentials toward an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub header: http::HeaderName,
    /// Put before the value read (`"Bearer "`).
    pub prefix: String,
    pub source: CredentialSource,
}

/// Where a credential's value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// A file, read again whenever it changes (a rotated token).
    File(PathBuf),
    /// An environment variable of the proxy.
    Env(String),
}

/// What old clients (2025-11-25 `initialize`) get in front of an upstream that speaks the
/// modern protocol (`upstream.old_clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldClients {
    /// The proxy answers their `initialize`, keeps their session and sends each request
    /// in the modern protocol, turning the upstream's `input_required` into the requests
    /// an old client takes (a dual server's own legacy leg cannot ask the client
    /// anything).
    Bridge,
    /// Their requests go to the upstream as they are (for a dual server whose own
    /// legacy leg serves them well enough).
    PassThrough,
}

impl UpstreamConfig {
    /// These settings with `overrides` applied, for `target` reached with `credentials`
    /// and `token_exchange` (its own: an upstream never inherits another's).
    pub fn with(
        &self,
        target: Target,
        credentials: &[Credential],
        token_exchange: Option<&TokenExchangeConfig>,
        o: &UpstreamOverrides,
    ) -> UpstreamConfig {
        UpstreamConfig {
            target,
            credentials: credentials.to_vec(),
            token_exchange: token_exchange.cloned(),
            pool_size: o.pool_size.unwrap_or(self.pool_size),
            max_children: o.max_children.unwrap_or(self.max_children),
            stop_grace: o.stop_grace.unwrap_or(self.stop_grace),
            require_session: o.require_session.unwrap_or(self.require_session),
            connect_timeout: o.connect_timeout.unwrap_or(self.connect_timeout),
            timeout: o.timeout.unwrap_or(self.timeout),
            sse_idle_timeout: o.sse_idle_timeout.unwrap_or(self.sse_idle_timeout),
            max_message_bytes: o.max_message_bytes.unwrap_or(self.max_message_bytes),
            on_session_lost: o.on_session_lost.unwrap_or(self.on_session_lost),
            health_interval: o.health_interval.unwrap_or(self.health_interval),
            era: o.era.unwrap_or(self.era),
            old_clients: o.old_clients.unwrap_or(self.old_clients),
        }
    }
}

impl Config {
    /// The upstreams, for a person: `name (target)`, the default one marked.
    pub fn upstreams_summary(&self) -> String {
        let set = self.upstream_set();
        if let [only] = set.as_slice() {
            return only.config.target.to_string();
        }
        set.iter()
            .map(|u| {
                let mark = if u.default { ", default" } else { "" };
                format!("{} ({}{mark})", u.name, u.config.target)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Every upstream the proxy serves, settings resolved: the `[upstreams.NAME]` tables,
    /// and the one `[upstream]` (or `--upstream`, `-- cmd`) defines, named
    /// [`DEFAULT_UPSTREAM`]; with none at all, the embedded demo server. Exactly one is
    /// the default (validation made sure of it).
    pub fn upstream_set(&self) -> Vec<NamedUpstream> {
        let mut set: Vec<NamedUpstream> = self
            .upstreams
            .iter()
            .map(|def| NamedUpstream {
                name: def.name.clone(),
                default: def.default || self.upstreams.len() == 1,
                config: self.upstream.with(
                    def.target.clone(),
                    &def.credentials,
                    def.token_exchange.as_ref(),
                    &def.overrides,
                ),
                stateless: def
                    .stateless
                    .clone()
                    .unwrap_or_else(|| self.stateless.clone()),
            })
            .collect();
        let own = !matches!(self.upstream.target, Target::Embedded) || set.is_empty();
        if own {
            if !set.is_empty() {
                for named in &mut set {
                    named.default = false;
                }
            }
            set.insert(
                0,
                NamedUpstream {
                    name: DEFAULT_UPSTREAM.to_owned(),
                    default: true,
                    config: self.upstream.clone(),
                    stateless: self.stateless.clone(),
                },
            );
        }
        set
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A `tracing` filter directive, e.g. `info` or `mcp_session_proxy=debug`.
    pub level: String,
    pub format: LogFormat,
}

/// Bytes that must not be printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

/// Values given on the command line; they win over every other layer.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub listen: Option<String>,
    pub upstream: Option<String>,
    /// `text` or `json`.
    pub log_format: Option<String>,
    /// A stdio server to run: program, then its arguments.
    pub command: Vec<String>,
}

/// Why the configuration cannot be used. Each line names the key and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .problems.join("\n  "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl ConfigError {
    fn one(problem: String) -> Self {
        ConfigError {
            problems: vec![problem],
        }
    }

    /// The problems in the order of their keys, whichever check found them.
    fn from_problems(mut problems: Vec<Problem>) -> Self {
        problems.sort_by(|a, b| a.key.cmp(&b.key));
        ConfigError {
            problems: problems.iter().map(Problem::to_string).collect(),
        }
    }
}

/// One thing wrong with the configuration: its key, where its value came from, and what
/// is wrong with it (in words that say what to write instead).
#[derive(Debug, Clone)]
struct Problem {
    key: String,
    why: String,
    origin: Option<Origin>,
}

impl Problem {
    fn new(key: &str, why: impl std::fmt::Display) -> Problem {
        Problem {
            key: key.to_owned(),
            why: why.to_string(),
            origin: None,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A many-line reason (a TOML syntax error with its excerpt) stays under its key.
        let why = self.why.trim_end().replace('\n', "\n    ");
        match &self.origin {
            Some(origin) => write!(f, "{} ({origin}): {why}", self.key),
            None => write!(f, "{}: {why}", self.key),
        }
    }
}

/// A value given by a command-line flag, as a configuration layer that says which flag
/// set it.
struct Flag {
    name: &'static str,
    key: &'static str,
    value: figment::value::Value,
}

impl Flag {
    fn new(name: &'static str, key: &'static str, value: impl serde::Serialize) -> Flag {
        let value = figment::value::Value::serialize(value)
            .unwrap_or_else(|_| figment::value::Value::from(String::new()));
        Flag { name, key, value }
    }
}

impl Provider for Flag {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Serialized::default(self.key, &self.value).data()
    }
}

impl Config {
    /// The built-in defaults (what an empty `proxy.toml` gives).
    pub fn defaults() -> Config {
        match validate::check(RawConfig::default()) {
            Ok(config) => config,
            Err(problems) => unreachable_defaults(&ConfigError::from_problems(problems)),
        }
    }
}

#[expect(
    clippy::panic,
    reason = "the built-in defaults are valid; a unit test proves it"
)]
fn unreachable_defaults(e: &ConfigError) -> Config {
    panic!("built-in defaults are invalid: {e}")
}

/// Reads every layer, with environment variables from the process.
pub fn load(overrides: &Overrides) -> Result<Config, ConfigError> {
    load_from(overrides, Env::prefixed(ENV_PREFIX).split("__"))
}

/// Reads every layer with the given environment provider (tests pass their own). Every
/// problem of every layer is reported at once, each naming its key and where it was set.
pub fn load_from(overrides: &Overrides, env: Env) -> Result<Config, ConfigError> {
    let file = match &overrides.config_file {
        Some(path) if !path.is_file() => {
            return Err(ConfigError::one(format!(
                "--config: cannot read {}: no such file",
                path.display()
            )));
        }
        Some(path) => Some(path.clone()),
        // The default file is read from the working directory only (figment's
        // `Toml::file` would also search its parents, which surprises operators).
        None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.is_file()),
    };
    let mut problems = Vec::new();
    if let Some(url) = &overrides.upstream
        && !overrides.command.is_empty()
    {
        let command = overrides.command.join(" ");
        problems.push(Problem::new(
            "upstream",
            format!(
                "--upstream {url} and the stdio command after `--` ({command}) both name the \
                 upstream; give one: --upstream URL for a Streamable HTTP server, or `-- COMMAND \
                 ARGS…` for a stdio server"
            ),
        ));
    }
    let mut figment = Figment::from(Serialized::defaults(RawConfig::default()));
    if let Some(path) = file {
        figment = figment.merge(Toml::file_exact(path));
    }
    let env_text: std::collections::HashMap<String, String> = env
        .iter()
        .map(|(key, value)| (key.as_str().to_owned(), value))
        .collect();
    figment = figment.merge(env);
    if let Some(listen) = &overrides.listen {
        figment = figment.merge(Flag::new("--listen", "listen", listen));
    }
    // An upstream given on the command line replaces the configured one, whichever kind
    // it was (an empty url or command counts as unset).
    if let Some(url) = &overrides.upstream {
        figment = figment
            .merge(Flag::new("--upstream", "upstream.url", url))
            .merge(Flag::new("--upstream", "upstream.command", ""))
            .merge(Flag::new(
                "--upstream",
                "upstream.args",
                Vec::<String>::new(),
            ));
    }
    if let Some((program, args)) = overrides.command.split_first() {
        let flag = "the command after `--`";
        figment = figment
            .merge(Flag::new(flag, "upstream.url", ""))
            .merge(Flag::new(flag, "upstream.command", program))
            .merge(Flag::new(flag, "upstream.args", args));
    }
    if let Some(format) = &overrides.log_format {
        figment = figment.merge(Flag::new("--log-format", "log.format", format));
    }
    let (raw, unreadable) = match read::read(&figment, &env_text) {
        Ok(read) => read,
        Err(unreadable) => {
            problems.extend(unreadable);
            return Err(ConfigError::from_problems(problems));
        }
    };
    problems.extend(unreadable);
    match validate::check(raw) {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(ConfigError::from_problems(problems)),
        Err(invalid) => {
            // A key that could not be read was checked at its default: nothing more to say.
            let unread: Vec<String> = problems.iter().map(|p| p.key.clone()).collect();
            problems.extend(
                invalid
                    .into_iter()
                    .filter(|p| !unread.contains(&p.key))
                    .map(|p| Problem {
                        origin: Origin::of_key(&figment, &p.key),
                        ..p
                    }),
            );
            Err(ConfigError::from_problems(problems))
        }
    }
}

#[cfg(test)]
mod tests;
