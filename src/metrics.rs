//! Prometheus metrics (OpenMetrics text at `/metrics`).
//!
//! Label values are bounded: methods come from a fixed list (anything else is `other`),
//! so a client cannot grow the registry by inventing method names.

mod served;

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use served::Served;

/// How a request ended, from the client's point of view.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// 1xx–3xx.
    Ok,
    /// The client's request was refused (4xx).
    ClientError,
    /// The upstream failed or timed out (502, 504, -32043 after a lost session).
    UpstreamError,
    /// The proxy could not serve it (503: full, store down; 500).
    ProxyError,
}

/// Why a `sessions/create` was refused.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Rejection {
    /// `max_sessions` reached.
    Limit,
    /// A per-caller limit refused it (`caller_refusals_total` says which).
    CallerLimit,
    /// The upstream handshake failed.
    Upstream,
    /// The request itself was wrong.
    Invalid,
    /// The session store did not answer.
    Store,
    /// The proxy was shedding new work (`overload`).
    Overload,
}

impl Outcome {
    /// Every outcome, in declaration order (`outcome as usize` is its index).
    pub const ALL: [Outcome; 4] = [
        Outcome::Ok,
        Outcome::ClientError,
        Outcome::UpstreamError,
        Outcome::ProxyError,
    ];

    /// The outcome of an answer with this HTTP status.
    pub fn of_status(status: u16) -> Outcome {
        match status {
            502 | 504 => Outcome::UpstreamError,
            500..=599 => Outcome::ProxyError,
            400..=499 => Outcome::ClientError,
            _ => Outcome::Ok,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ClientError => "client_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::ProxyError => "proxy_error",
        }
    }
}

impl Rejection {
    fn as_str(self) -> &'static str {
        match self {
            Rejection::Limit => "limit",
            Rejection::CallerLimit => "caller_limit",
            Rejection::Upstream => "upstream",
            Rejection::Invalid => "invalid",
            Rejection::Store => "store",
            Rejection::Overload => "overload",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        self.as_str().encode(encoder)
    }
}

impl EncodeLabelValue for Rejection {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        self.as_str().encode(encoder)
    }
}

/// Why the proxy closed a client connection itself.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Closed {
    /// Refused at accept: `limits.max_connections` connections were open.
    Limit,
    /// Refused at accept: `limits.max_connections_per_address` from that address.
    AddressLimit,
    /// A request head did not arrive within `limits.header_read_timeout`.
    HeaderTimeout,
    /// Kept alive with no request for `limits.idle_timeout`.
    Idle,
    /// Refused at accept: file descriptors near `limits.max_open_files` (`overload`).
    Overload,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::Limit => "limit",
            Closed::AddressLimit => "address_limit",
            Closed::HeaderTimeout => "header_timeout",
            Closed::Idle => "idle",
            Closed::Overload => "overload",
        }
    }
}

impl EncodeLabelValue for Closed {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        self.as_str().encode(encoder)
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    pub reason: Closed,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: &'static str,
    pub outcome: Outcome,
}

/// The labels of `mcp_server_operation_duration_seconds`, named after the conventions'
/// attributes.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub mcp_method_name: &'static str,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    pub reason: Rejection,
}

/// Which per-caller limit refused an upstream session (its configuration key's last part:
/// a fixed set).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallerLimitLabels {
    pub limit: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub upstream: String,
}

/// One replica of one upstream (only configured names and URLs: bounded).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    pub upstream: String,
    pub replica: String,
}

/// A replica and the era it speaks.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaEraLabels {
    pub upstream: String,
    pub replica: String,
    /// `legacy`, `modern`, `sse` or `unknown`.
    pub era: &'static str,
}

/// Why `[auth]` refused a request: a fixed set (`auth::AuthError::label`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    pub reason: &'static str,
}

/// A `[[auth.rules]]` decision: the upstream (a configured name), what was used
/// (`upstream`, `tool`, `prompt`, `resource`) and `allowed` or `denied`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub upstream: String,
    pub kind: &'static str,
    pub decision: &'static str,
}

/// What was shed for which resource (`overload`): both fixed sets.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShedLabels {
    pub resource: &'static str,
    pub what: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionCacheLabels {
    pub outcome: &'static str,
}

/// Every metric the proxy exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub sessions_active: Gauge,
    pub sessions_created: Counter,
    pub sessions_deleted: Counter,
    /// `tools/call`s the proxy turned into tasks (2026-07-28 tasks extension).
    pub tasks_created: Counter,
    pub sessions_expired: Counter,
    pub sessions_lost: Counter,
    pub sessions_reinitialized: Counter,
    pub sessions_other_caller: Counter,
    /// Uses of Redis sessions, by whether a worker's memory served them.
    pub session_cache: Family<SessionCacheLabels, Counter>,
    pub auth_refused: Family<AuthLabels, Counter>,
    pub policy_decisions: Family<PolicyLabels, Counter>,
    pub replica_healthy: Family<ReplicaLabels, Gauge>,
    pub replica_sessions: Family<ReplicaLabels, Gauge>,
    pub replica_era: Family<ReplicaEraLabels, Gauge>,
    pub sessions_rejected: Family<RejectionLabels, Counter>,
    pub caller_refusals: Family<CallerLimitLabels, Counter>,
    pub requests: Family<RequestLabels, Counter>,
    pub operation_duration: Family<OperationLabels, Histogram>,
    /// The two families' series by place: [`Metrics::served`] finds them without a
    /// lookup.
    by_place: Served,
    pub upstream_latency: Family<UpstreamLabels, Histogram>,
    pub sse_streams_open: Gauge,
    pub pool_size: Family<PoolLabels, Gauge>,
    pub stdio_children: Gauge,
    pub connections_open: Gauge,
    pub connections_closed: Family<ClosedLabels, Counter>,
    pub upstream_endings_pending: Gauge,
    pub upstream_endings_dropped: Counter,
    pub overload_shed: Family<ShedLabels, Counter>,
    pub overload_active: Family<ResourceLabels, Gauge>,
    pub resident_memory_bytes: Gauge,
    pub open_files: Gauge,
    pub sealed_tombstones: Gauge,
    pub sealed_tombstones_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        // The proxy's own metrics under `mcp_proxy_`; the OpenTelemetry MCP conventions'
        // under their own names.
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("mcp_proxy");
        let m = Metrics {
            registry: Registry::default(),
            sessions_active: Gauge::default(),
            sessions_created: Counter::default(),
            sessions_deleted: Counter::default(),
            tasks_created: Counter::default(),
            sessions_expired: Counter::default(),
            sessions_lost: Counter::default(),
            sessions_reinitialized: Counter::default(),
            sessions_other_caller: Counter::default(),
            session_cache: Family::default(),
            auth_refused: Family::default(),
            policy_decisions: Family::default(),
            replica_healthy: Family::default(),
            replica_era: Family::default(),
            replica_sessions: Family::default(),
            sessions_rejected: Family::default(),
            caller_refusals: Family::default(),
            requests: Family::default(),
            operation_duration: Family::new_with_constructor(|| {
                // 50 µs … ~26 s.
                Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
            }),
            by_place: Served::new(),
            upstream_latency: Family::new_with_constructor(|| {
                // 50 µs … ~26 s.
                Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
            }),
            sse_streams_open: Gauge::default(),
            pool_size: Family::default(),
            stdio_children: Gauge::default(),
            connections_open: Gauge::default(),
            connections_closed: Family::default(),
            upstream_endings_pending: Gauge::default(),
            upstream_endings_dropped: Counter::default(),
            overload_shed: Family::default(),
            overload_active: Family::default(),
            resident_memory_bytes: Gauge::default(),
            open_files: Gauge::default(),
            sealed_tombstones: Gauge::default(),
            sealed_tombstones_dropped: Counter::default(),
        };
        registry.register(
            "sessions_active",
            "Data-layer sessions live now",
            m.sessions_active.clone(),
        );
        registry.register(
            "sessions_created",
            "Data-layer sessions created",
            m.sessions_created.clone(),
        );
        registry.register(
            "sessions_deleted",
            "Data-layer sessions deleted by their client",
            m.sessions_deleted.clone(),
        );
        registry.register(
            "tasks_created",
            "tools/call requests the proxy ran as tasks (2026-07-28 tasks extension)",
            m.tasks_created.clone(),
        );
        registry.register(
            "sessions_expired",
            "Data-layer sessions ended by the idle TTL",
            m.sessions_expired.clone(),
        );
        registry.register(
            "sessions_lost",
            "Data-layer sessions dropped because the upstream lost them",
            m.sessions_lost.clone(),
        );
        registry.register(
            "sessions_reinitialized",
            "Data-layer sessions whose lost upstream session was replaced (on_session_lost = reinitialize)",
            m.sessions_reinitialized.clone(),
        );
        registry.register(
            "sessions_other_caller",
            "Requests naming a live session bound to another caller (answered as an unknown session)",
            m.sessions_other_caller.clone(),
        );
        registry.register(
            "session_cache",
            "Uses of sessions kept in Redis: served from a worker's memory (hit), asked of Redis (miss), or asked because the worker is not told of changes now (untracked)",
            m.session_cache.clone(),
        );
        registry.register(
            "auth_refused",
            "Requests refused by [auth] (HTTP 401, 403 insufficient_scope, 503 no keys), by reason",
            m.auth_refused.clone(),
        );
        registry.register(
            "policy_decisions",
            "Requests judged by [[auth.rules]], by upstream, what they use, and decision",
            m.policy_decisions.clone(),
        );
        registry.register(
            "upstream_replica_healthy",
            "1 while an upstream replica is in rotation for new sessions, else 0",
            m.replica_healthy.clone(),
        );
        registry.register(
            "upstream_replica_era",
            "1 for the era each upstream replica speaks (legacy, modern, sse; unknown until found)",
            m.replica_era.clone(),
        );
        registry.register(
            "upstream_replica_sessions",
            "Upstream sessions this proxy holds on each replica",
            m.replica_sessions.clone(),
        );
        registry.register(
            "sessions_rejected",
            "sessions/create requests refused, by reason",
            m.sessions_rejected.clone(),
        );
        registry.register(
            "caller_refusals",
            "Upstream sessions refused to a caller over a per-caller limit, by limit",
            m.caller_refusals.clone(),
        );
        registry.register(
            "requests",
            "Requests served, by MCP method and outcome",
            m.requests.clone(),
        );
        registry.register(
            "upstream_latency_seconds",
            "Time from sending a request upstream to its response head, by upstream",
            m.upstream_latency.clone(),
        );
        registry.register(
            "sse_streams_open",
            "Event streams open to clients",
            m.sse_streams_open.clone(),
        );
        registry.register(
            "pool_size",
            "Idle upstream connections or processes ready in a pool",
            m.pool_size.clone(),
        );
        registry.register(
            "stdio_children",
            "stdio server processes alive, pooled or in a session",
            m.stdio_children.clone(),
        );
        registry.register(
            "connections_open",
            "Client connections open now",
            m.connections_open.clone(),
        );
        registry.register(
            "connections_closed",
            "Client connections the proxy closed itself, by reason (limits)",
            m.connections_closed.clone(),
        );
        registry.register(
            "upstream_endings_pending",
            "Upstream sessions queued or being ended in the background",
            m.upstream_endings_pending.clone(),
        );
        registry.register(
            "upstream_endings_dropped",
            "Upstream sessions left to the upstream's own expiry because the queue of endings was full",
            m.upstream_endings_dropped.clone(),
        );
        registry.register(
            "overload_shed",
            "New connections and new work refused (503) while memory or file descriptors were near their limits, by resource and what",
            m.overload_shed.clone(),
        );
        registry.register(
            "overload_active",
            "1 while new work is shed for a resource (memory, open_files), else 0",
            m.overload_active.clone(),
        );
        registry.register(
            "resident_memory_bytes",
            "Resident memory of the proxy process at the last sample",
            m.resident_memory_bytes.clone(),
        );
        registry.register(
            "open_files",
            "File descriptors open in the proxy process at the last sample",
            m.open_files.clone(),
        );
        registry.register(
            "sealed_tombstones",
            "Deleted sealed sessions refused here until they would have expired (session.max_tombstones)",
            m.sealed_tombstones.clone(),
        );
        registry.register(
            "sealed_tombstones_dropped",
            "Deleted sealed sessions forgotten before their end to stay within session.max_tombstones",
            m.sealed_tombstones_dropped.clone(),
        );
        // Traces (`telemetry::counted`): what became of the spans;
        // ended = exported + export_failed + dropped + queued.
        registry.register(
            "spans_ended",
            "Spans recorded and ended (traces on)",
            crate::telemetry::counted::ENDED.clone(),
        );
        registry.register(
            "spans_exported",
            "Spans the collector took",
            crate::telemetry::counted::EXPORTED.clone(),
        );
        registry.register(
            "spans_export_failed",
            "Spans whose export failed (the collector refused them or was not reached)",
            crate::telemetry::counted::FAILED.clone(),
        );
        registry.register(
            "spans_dropped",
            "Spans dropped because the export queue was full (OTEL_BSP_MAX_QUEUE_SIZE)",
            crate::telemetry::counted::DROPPED.clone(),
        );
        registry.register(
            "spans_queued",
            "Spans ended and not yet through the exporter",
            crate::telemetry::counted::QUEUED.clone(),
        );
        root.register_with_unit(
            "mcp_server_operation_duration",
            "MCP requests served, by method and outcome, from arrival to the start of the answer (the OpenTelemetry MCP conventions' mcp.server.operation.duration)",
            prometheus_client::registry::Unit::Seconds,
            m.operation_duration.clone(),
        );
        Metrics {
            registry: root,
            ..m
        }
    }

    /// Counts one piece of work shed for `resource` (`what`: `connection` or `request`).
    pub fn overload_shed(&self, resource: &'static str, what: &'static str) {
        self.overload_shed
            .get_or_create(&ShedLabels { resource, what })
            .inc();
    }

    /// Whether new work is shed for `resource`.
    pub fn overload_active(&self, resource: &'static str, active: bool) {
        self.overload_active
            .get_or_create(&ResourceLabels { resource })
            .set(i64::from(active));
    }

    /// Counts a client connection the proxy closed itself.
    pub fn connection_closed(&self, reason: Closed) {
        self.connections_closed
            .get_or_create(&ClosedLabels { reason })
            .inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The latency histogram of one upstream.
    pub fn upstream_histogram(&self, upstream: &str) -> Histogram {
        self.upstream_latency.get_or_create_owned(&UpstreamLabels {
            upstream: upstream.to_owned(),
        })
    }

    /// A request of `method` served with `outcome` in `took`: counted
    /// (`mcp_proxy_requests_total`) and its duration observed
    /// (`mcp.server.operation.duration`).
    pub fn served(&self, method: &'static str, outcome: Outcome, took: std::time::Duration) {
        self.by_place.record(
            (&self.requests, &self.operation_duration),
            (method, outcome),
            took.as_secs_f64(),
        );
    }

    /// Notes the era a replica speaks (`None`: not found yet).
    pub fn set_replica_era(&self, replica: ReplicaLabels, era: Option<&'static str>) {
        let labels = ReplicaEraLabels {
            upstream: replica.upstream,
            replica: replica.replica,
            era: era.unwrap_or("unknown"),
        };
        self.replica_era.get_or_create(&labels).set(1);
    }

    /// The counter of Redis session uses with `outcome` (`hit`, `miss`, `untracked`).
    pub fn session_cache(&self, outcome: &'static str) -> Counter {
        self.session_cache
            .get_or_create_owned(&SessionCacheLabels { outcome })
    }

    /// The size gauge of one pool.
    pub fn pool_size(&self, pool: &'static str) -> Gauge {
        self.pool_size.get_or_create_owned(&PoolLabels { pool })
    }

    pub fn rejected(&self, reason: Rejection) {
        self.sessions_rejected
            .get_or_create(&RejectionLabels { reason })
            .inc();
    }

    /// Counts an upstream session refused to a caller by `refused`'s limit.
    pub fn caller_refused(&self, refused: &crate::fairness::Refused) {
        let key = refused.key();
        let limit = key.rsplit('.').next().unwrap_or(key);
        self.caller_refusals
            .get_or_create(&CallerLimitLabels { limit })
            .inc();
    }

    /// A guard counting one open event stream until it is dropped.
    pub fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        self.sse_streams_open.inc();
        StreamGuard(self.clone())
    }
}

/// Counts an open event stream; dropping it (the stream ended or the client left)
/// uncounts it.
#[derive(Debug)]
pub struct StreamGuard(Arc<Metrics>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.sse_streams_open.dec();
    }
}

/// The `method` labels of what is not a known MCP method ([`method_label`] gives a known
/// one its name): the whole set with the known names, which `served` keeps a place for.
pub mod labels {
    /// A JSON-RPC response a client sent.
    pub const RESPONSE: &str = "response";
    /// Any other message, and a request refused before its method was read.
    pub const OTHER: &str = "other";
    /// The transport's GET (an event stream opened).
    pub const GET: &str = "GET";
    /// The transport's DELETE (a session ended).
    pub const DELETE: &str = "DELETE";
}

/// The method label for `method`: itself when it is a known MCP method, else `other`.
pub fn method_label(method: &str) -> &'static str {
    crate::mcp::Method::parse(method).map_or(labels::OTHER, crate::mcp::Method::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x/made-up-1"), "other");
        assert_eq!(method_label("x/made-up-2"), "other");
    }

    #[test]
    fn the_exposition_names_every_metric() {
        let m = Arc::new(Metrics::new());
        // Twice: the second through the series the first kept.
        m.served("tools/call", Outcome::Ok, std::time::Duration::ZERO);
        m.served("tools/call", Outcome::Ok, std::time::Duration::ZERO);
        m.rejected(Rejection::Limit);
        m.caller_refused(&crate::fairness::Refused::Rate {
            per_minute: 1,
            retry_after: std::time::Duration::from_secs(1),
        });
        m.upstream_histogram("http://u/mcp").observe(0.001);
        let guard = m.stream_opened();
        let text = m.encode();
        for name in [
            "mcp_proxy_sessions_active",
            "mcp_proxy_sessions_created_total",
            "mcp_proxy_sessions_deleted_total",
            "mcp_proxy_sessions_expired_total",
            "mcp_proxy_sessions_rejected_total{reason=\"limit\"} 1",
            "mcp_proxy_caller_refusals_total{limit=\"creations_per_caller_per_minute\"} 1",
            "mcp_proxy_requests_total{method=\"tools/call\",outcome=\"ok\"} 2",
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",outcome=\"ok\"} 2",
            "mcp_proxy_upstream_latency_seconds_bucket{le=\"0.00005\",upstream=\"http://u/mcp\"}",
            "mcp_proxy_sse_streams_open 1",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        drop(guard);
        assert!(m.encode().contains("mcp_proxy_sse_streams_open 0"));
    }
}
