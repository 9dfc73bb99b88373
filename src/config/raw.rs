//! The configuration as written: every key, its default, nothing checked yet beyond
//! types. Unknown keys are refused so a typo does not silently fall back to a default.
//! `proxy.toml` at the repository root documents each of these keys.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub listen: String,
    pub path: String,
    pub max_body_bytes: u64,
    pub allowed_origins: Vec<String>,
    pub shutdown_grace: String,
    pub workers: u64,
    pub session: RawSession,
    pub upstream: RawUpstream,
    pub log: RawLog,
    pub admin: RawAdmin,
    pub stateless: RawStateless,
    /// Named upstreams, each at `{path}/{name}`.
    pub upstreams: std::collections::BTreeMap<String, RawNamedUpstream>,
    pub cluster: RawCluster,
    pub limits: RawLimits,
    pub auth: RawAuth,
    pub upgrade: RawUpgrade,
    pub telemetry: RawTelemetry,
}

/// `[telemetry]`: traces over OTLP/HTTP, off unless an endpoint is set here or in the
/// OpenTelemetry SDKs' variables.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// The collector's OTLP/HTTP base URL (traces go to `/v1/traces` under it); "": see
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    /// "": `OTEL_SERVICE_NAME`, else `mcp-session-proxy`.
    pub service_name: String,
    /// "": `OTEL_TRACES_SAMPLER`, else `parentbased_always_on`.
    pub sampler: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler_arg: Option<f64>,
}

/// `[upgrade]`: restarts that drop nothing.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpgrade {
    /// The Unix socket a running proxy hands its listeners over on; "": off.
    pub socket: String,
}

/// `[auth]`: off unless `issuer`, `hs256_secret`, `jwks_file` or `jwks_uri` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAuth {
    /// An HS256 shared secret (at least 32 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hs256_secret: Option<String>,
    /// A local JWKS file with RS256 / ES256 public keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_file: Option<String>,
    /// The authorization server's JWKS URL; "" (with no key above): the one its
    /// metadata names.
    pub jwks_uri: String,
    /// How long fetched keys are used before they are fetched again.
    pub jwks_max_age: String,
    /// Where clients reach this proxy (scheme, host, port): each endpoint's resource
    /// identifier and metadata URL start with it.
    pub public_url: String,
    /// Authorization servers named in the resource metadata; empty: the issuer.
    pub authorization_servers: Vec<String>,
    /// Scopes named in the resource metadata.
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry.
    pub required_scopes: Vec<String>,
    /// The `iss` tokens must carry.
    pub issuer: String,
    /// The `aud` tokens must name.
    pub audience: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: String,
    /// Pass the client's `Authorization` on to the upstream.
    pub forward_token: bool,
    /// RFC 9728 protected resource metadata URL, named in `WWW-Authenticate`.
    pub resource_metadata: String,
    /// `[[auth.rules]]`: who may use which upstream, tool, prompt, resource.
    pub rules: Vec<RawRule>,
    /// `[[auth.limits]]`: how often each caller may call a tool, and how long a call
    /// may take.
    pub limits: Vec<RawToolLimit>,
}

/// One `[[auth.limits]]` table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawToolLimit {
    pub upstream: String,
    pub tools: Vec<String>,
    pub rate: u64,
    pub per: String,
    /// How long a call may take; empty: as long as the upstream allows.
    pub timeout: String,
}

impl Default for RawToolLimit {
    fn default() -> Self {
        RawToolLimit {
            upstream: "*".into(),
            tools: Vec::new(),
            rate: 0,
            per: "1m".into(),
            timeout: String::new(),
        }
    }
}

/// One `[[auth.rules]]` table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRule {
    pub upstream: String,
    pub tools: Vec<String>,
    pub prompts: Vec<String>,
    pub resources: Vec<String>,
    pub scopes: Vec<String>,
    pub claims: std::collections::BTreeMap<String, String>,
}

impl Default for RawRule {
    fn default() -> Self {
        RawRule {
            upstream: "*".into(),
            tools: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            scopes: Vec::new(),
            claims: std::collections::BTreeMap::new(),
        }
    }
}

impl Default for RawAuth {
    fn default() -> Self {
        RawAuth {
            hs256_secret: None,
            jwks_file: None,
            jwks_uri: String::new(),
            jwks_max_age: "15m".into(),
            public_url: String::new(),
            authorization_servers: Vec::new(),
            scopes_supported: Vec::new(),
            required_scopes: Vec::new(),
            issuer: String::new(),
            audience: String::new(),
            leeway: "30s".into(),
            forward_token: false,
            resource_metadata: String::new(),
            rules: Vec::new(),
            limits: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLimits {
    pub max_connections: u64,
    pub max_connections_per_address: u64,
    pub header_read_timeout: String,
    pub idle_timeout: String,
    pub request_body_timeout: String,
    pub upstream_idle_timeout: String,
    pub upstream_idle_connections: u64,
    /// Resident memory (bytes) at which new work is shed; 0: 90 % of the cgroup's limit.
    pub max_memory: u64,
    /// Open descriptors at which new work is shed; 0: 90 % of the open-file limit.
    pub max_open_files: u64,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_connections: 4096,
            max_connections_per_address: 512,
            header_read_timeout: "10s".into(),
            idle_timeout: "60s".into(),
            request_body_timeout: "30s".into(),
            upstream_idle_timeout: "30s".into(),
            upstream_idle_connections: 64,
            max_memory: 0,
            max_open_files: 0,
        }
    }
}

/// How proxy replicas reach each other (forwarding to the replica that holds a stdio
/// server or a waiting call; deleted sealed sessions told to the others).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawCluster {
    /// The base URL other replicas reach this one at; "": `http://<listen>`.
    pub advertise: String,
    /// The other replicas' base URLs (their `cluster.advertise`), told of every sealed
    /// session deleted here.
    pub peers: Vec<String>,
    /// Requests of one caller forwarded to other replicas at once, from this replica.
    pub max_forwarded_per_caller: u64,
}

impl Default for RawCluster {
    fn default() -> Self {
        RawCluster {
            advertise: String::new(),
            peers: Vec::new(),
            max_forwarded_per_caller: 16,
        }
    }
}

/// One `[upstreams.NAME]` table: where it is, and overrides of the `[upstream]` settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawNamedUpstream {
    /// Also served at the bare endpoint path.
    pub default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its own credentials (never those of `[upstream]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<RawCredential>,
    /// Its own token exchange (never that of `[upstream]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_exchange: Option<RawTokenExchange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_children: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_grace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_session: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sse_idle_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_message_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_session_lost: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub era: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_clients: Option<String>,
    /// Overrides of the `[stateless]` settings for this upstream's stateless clients.
    #[serde(skip_serializing_if = "RawStatelessOverrides::is_empty")]
    pub stateless: RawStatelessOverrides,
}

/// One `[upstreams.NAME.stateless]` table: values of the `[stateless]` keys for that
/// upstream; a key left out takes the `[stateless]` value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawStatelessOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin_header: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pinned: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin_idle_ttl: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle_open_tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle_close_tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle_argument: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_handles_per_caller: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pooled: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_listens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_idle_ttl: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_state_ttl: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_waiting_per_caller: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_ttl: Option<String>,
}

impl RawStatelessOverrides {
    pub fn is_empty(&self) -> bool {
        *self == RawStatelessOverrides::default()
    }

    /// `global` with these values over it, and the names of the keys they set.
    pub fn over(&self, global: &RawStateless) -> (RawStateless, Vec<&'static str>) {
        let mut set = Vec::new();
        let mut merged = global.clone();
        macro_rules! take {
            ($($key:ident),*) => {$(
                if let Some(value) = &self.$key {
                    merged.$key = value.clone();
                    set.push(stringify!($key));
                }
            )*};
        }
        take!(
            affinity,
            fallback,
            pin_header,
            max_pinned,
            pin_idle_ttl,
            handle_open_tool,
            handle_close_tool,
            handle_argument,
            max_handles_per_caller,
            max_pooled,
            max_listens,
            pool_idle_ttl,
            request_state_ttl,
            max_waiting_per_caller,
            tasks,
            task_tools,
            task_after,
            task_ttl
        );
        (merged, set)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawStateless {
    pub affinity: String,
    pub fallback: String,
    pub pin_header: String,
    pub max_pinned: u64,
    pub pin_idle_ttl: String,
    pub handle_open_tool: String,
    pub handle_close_tool: String,
    pub handle_argument: String,
    pub max_handles_per_caller: u64,
    pub max_pooled: u64,
    pub max_listens: u64,
    pub pool_idle_ttl: String,
    pub request_state_ttl: String,
    pub max_waiting_per_caller: u64,
    pub tasks: bool,
    pub task_tools: Vec<String>,
    pub task_after: String,
    pub task_ttl: String,
}

impl Default for RawStateless {
    fn default() -> Self {
        RawStateless {
            affinity: "isolated".into(),
            fallback: "isolated".into(),
            pin_header: String::new(),
            max_pinned: 1000,
            pin_idle_ttl: "30m".into(),
            handle_open_tool: "session_open".into(),
            handle_close_tool: "session_close".into(),
            handle_argument: "session".into(),
            max_handles_per_caller: 16,
            max_pooled: 100,
            max_listens: 100,
            pool_idle_ttl: "5m".into(),
            request_state_ttl: "5m".into(),
            max_waiting_per_caller: 10,
            tasks: true,
            task_tools: Vec::new(),
            task_after: String::new(),
            task_ttl: "1h".into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawSession {
    pub idle_ttl: String,
    pub max_sessions: u64,
    /// Absent: a tenth of `max_sessions`; 0: no cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sessions_per_caller: Option<u64>,
    /// 0: no limit.
    pub creations_per_caller_per_minute: u64,
    pub reap_interval: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_key: Option<String>,
    /// `memory`, `redis` or `sealed`.
    pub store: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// Redis Sentinel addresses, instead of `redis_url`.
    pub redis_sentinels: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_master_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_username: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_password: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_db: Option<u64>,
    pub redis_timeout: String,
    /// Absent: 1 with sentinels, else 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_wait_replicas: Option<u64>,
    pub redis_wait_timeout: String,
    /// Sessions each worker thread keeps in memory between uses (0: every use asks Redis).
    pub redis_cache_sessions: u64,
    pub sealed_keys: Vec<String>,
    /// Deleted sealed sessions remembered at once (their ids still open).
    pub max_tombstones: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpstream {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub urls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: std::collections::BTreeMap<String, String>,
    /// Names of the proxy's environment variables a stdio child inherits, besides the
    /// base every child gets.
    pub inherit_env: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub pool_size: u64,
    pub max_children: u64,
    pub stop_grace: String,
    pub require_session: bool,
    pub connect_timeout: String,
    pub timeout: String,
    pub sse_idle_timeout: String,
    pub max_message_bytes: u64,
    /// `fail` or `reinitialize`.
    pub on_session_lost: String,
    /// How often each replica is probed (its era found again; a legacy one asked for a
    /// session).
    pub health_interval: String,
    /// `auto` (found by probing), `legacy`, `modern` or `sse`.
    pub era: String,
    /// Old clients in front of a modern upstream: `bridge` (the proxy terminates their
    /// `initialize` sessions) or `pass_through`.
    pub old_clients: String,
    /// Headers the proxy adds to every request to this upstream (its own credentials).
    pub credentials: Vec<RawCredential>,
    /// The client's token exchanged for one for this upstream (RFC 8693).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_exchange: Option<RawTokenExchange>,
}

/// `token_exchange`: the client's verified token exchanged at the authorization server
/// (RFC 8693) for one for the upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTokenExchange {
    /// RFC 8707 resource indicator of the upstream (the token's `aud`).
    pub resource: String,
    /// RFC 8693 `audience`, the upstream by a name the authorization server knows.
    pub audience: String,
    /// The scope asked for.
    pub scope: String,
    /// The proxy's own client at the authorization server.
    pub client_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// Empty: the `token_endpoint` of `auth.issuer`'s metadata.
    pub token_endpoint: String,
}

/// One header of the proxy's own credentials toward an upstream, its value read from a
/// file (again when it changes) or an environment variable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawCredential {
    pub header: String,
    /// Put before the value read, e.g. `"Bearer "`.
    pub prefix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdmin {
    pub listen: String,
    pub metrics: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    pub level: String,
    pub format: String,
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            listen: "127.0.0.1:8080".into(),
            path: "/mcp".into(),
            max_body_bytes: 4 * 1024 * 1024,
            allowed_origins: Vec::new(),
            shutdown_grace: "10s".into(),
            workers: 0,
            session: RawSession::default(),
            upstream: RawUpstream::default(),
            log: RawLog::default(),
            admin: RawAdmin::default(),
            stateless: RawStateless::default(),
            upstreams: std::collections::BTreeMap::new(),
            cluster: RawCluster::default(),
            limits: RawLimits::default(),
            auth: RawAuth::default(),
            upgrade: RawUpgrade::default(),
            telemetry: RawTelemetry::default(),
        }
    }
}

impl Default for RawSession {
    fn default() -> Self {
        RawSession {
            idle_ttl: "30m".into(),
            max_sessions: 10_000,
            max_sessions_per_caller: None,
            creations_per_caller_per_minute: 300,
            reap_interval: "30s".into(),
            state_key: None,
            store: "memory".into(),
            redis_url: None,
            redis_sentinels: Vec::new(),
            redis_master_name: None,
            redis_username: None,
            redis_password: None,
            redis_db: None,
            redis_timeout: "1s".into(),
            redis_wait_replicas: None,
            redis_wait_timeout: "100ms".into(),
            redis_cache_sessions: 10_000,
            sealed_keys: Vec::new(),
            max_tombstones: 100_000,
        }
    }
}

impl Default for RawUpstream {
    fn default() -> Self {
        RawUpstream {
            url: None,
            urls: Vec::new(),
            command: None,
            args: Vec::new(),
            env: std::collections::BTreeMap::new(),
            inherit_env: Vec::new(),
            cwd: None,
            pool_size: 2,
            max_children: 1000,
            stop_grace: "2s".into(),
            require_session: false,
            connect_timeout: "5s".into(),
            timeout: "60s".into(),
            sse_idle_timeout: "5m".into(),
            max_message_bytes: 16 * 1024 * 1024,
            on_session_lost: "fail".into(),
            health_interval: "10s".into(),
            era: "auto".into(),
            old_clients: "bridge".into(),
            credentials: Vec::new(),
            token_exchange: None,
        }
    }
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            listen: String::new(),
            metrics: true,
            token: None,
        }
    }
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            level: "info".into(),
            format: "text".into(),
        }
    }
}
