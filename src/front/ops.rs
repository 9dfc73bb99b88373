//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`, and the token-protected admin
//! API (`/admin/sessions`). None of them shows a usable sessionId: sessions are named by
//! a 64-bit hash (the same tag the logs use).
//!
//! What they show is internal (upstream URLs, replica health, session counts), so where
//! clients reach them matters. On a listener of their own (`admin.listen`) they answer
//! whoever reaches it. On the client listener they answer everyone as well, unless
//! `[auth]` guards that listener: then so are they — `/metrics` and `/readyz`'s detail
//! need `Authorization: Bearer <admin.token>` (without an admin token they are not
//! served there at all), and `/readyz` without it says only ready or not (what a load
//! balancer needs). `/healthz` answers everyone, everywhere.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::not_allowed;
use super::serve::Role;
use crate::config::{HEALTH_PATH, Secret};
use crate::fleet::Fleet;
use crate::metrics::{Metrics, ReplicaLabels};
use crate::response::{self as respond, ProxyBody};
use crate::session::{log_tag as short, now_millis, rfc3339};
use crate::upstream::Era;

/// What the operations endpoints use.
#[derive(Debug)]
pub struct Ops {
    /// The upstreams to check, and their sessions to list and revoke.
    pub fleet: Arc<Fleet>,
    pub metrics: Arc<Metrics>,
    /// Serve `/metrics`.
    pub serve_metrics: bool,
    /// The admin API's bearer token; `None`: the admin API is off.
    pub admin_token: Option<Secret>,
    /// `[auth]` guards the client listener, and so the operations endpoints on it.
    pub guarded: bool,
}

/// What a request may see of the operations endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Everything (their own listener, an unguarded client listener, the admin token).
    Full,
    /// `/healthz` and whether the proxy is ready: a client of a guarded listener.
    Client,
}

const READY_PATH: &str = "/readyz";
const METRICS_PATH: &str = "/metrics";
const ADMIN_SESSIONS: &str = "/admin/sessions";
/// The `pool` label of the stdio warm pool.
const POOL_STDIO: &str = "stdio";

impl Ops {
    /// Answers an operations request arriving on a listener of `role`, or `None` when the
    /// path is not one of them.
    pub async fn route<B>(&self, request: &Request<B>, role: Role) -> Option<Response<ProxyBody>> {
        route(self, request, role).await
    }

    /// What a request on a listener of `role` may see.
    fn access<B>(&self, request: &Request<B>, role: Role) -> Access {
        let guarded = self.guarded && role.serves_mcp();
        if !guarded || authorized(self, request) == Some(true) {
            Access::Full
        } else {
            Access::Client
        }
    }
}

async fn route<B>(app: &Ops, request: &Request<B>, role: Role) -> Option<Response<ProxyBody>> {
    let path = request.uri().path();
    let method = request.method();
    let is_read = method == Method::GET || method == Method::HEAD;
    let access = app.access(request, role);
    let response = match path {
        HEALTH_PATH if is_read => json(StatusCode::OK, json!({"status": "ok"})),
        READY_PATH if is_read => ready(app, access).await,
        METRICS_PATH if is_read && app.serve_metrics => match access {
            Access::Full => metrics(app).await,
            Access::Client => needs_token(app),
        },
        HEALTH_PATH | READY_PATH => not_allowed("GET, HEAD"),
        METRICS_PATH if app.serve_metrics => not_allowed("GET, HEAD"),
        _ if path == ADMIN_SESSIONS || path.starts_with("/admin/sessions/") => {
            admin(app, request).await
        }
        _ => return None,
    };
    Some(response)
}

/// How the operations endpoints name an era (`unknown` until it is found).
fn era_word(era: Option<Era>) -> &'static str {
    era.map_or("unknown", Era::name)
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<ProxyBody> {
    respond::json(status, Bytes::from(value.to_string()))
}

/// Ready when the configuration loaded (it did, or the proxy would not run), every
/// upstream has a replica in rotation (or can start stdio children), and the session
/// store answers. Each upstream and replica is named, with its state — unless `access`
/// is a client's: then only the status.
async fn ready(app: &Ops, access: Access) -> Response<ProxyBody> {
    let upstreams = app.fleet.upstreams();
    let word = |ok: bool| if ok { "ok" } else { "failing" };
    let mut every_upstream = true;
    let mut detail = serde_json::Map::new();
    for served in upstreams.all() {
        let upstream = served.session.upstream();
        let ok = upstream.reachable();
        every_upstream &= ok;
        let states = upstream.replica_states();
        let replicas: serde_json::Map<String, serde_json::Value> = states
            .iter()
            .map(|r| (r.label.to_string(), json!(word(r.healthy))))
            .collect();
        let eras: serde_json::Map<String, serde_json::Value> = states
            .iter()
            .map(|r| (r.label.to_string(), json!(era_word(r.era))))
            .collect();
        detail.insert(
            served.name.to_string(),
            json!({"status": word(ok), "default": served.default, "era": era_word(upstream.era()),
                   "replicas": replicas, "eras": eras}),
        );
    }
    let store = app.fleet.sessions().store_reachable().await;
    let status = if every_upstream && store {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let readiness = if status == StatusCode::OK {
        "ready"
    } else {
        "not ready"
    };
    if access == Access::Client {
        return json(status, json!({ "status": readiness }));
    }
    let label = upstreams
        .default_upstream()
        .map(|s| s.label.to_string())
        .unwrap_or_default();
    json(
        status,
        json!({
            "status": readiness,
            "checks": {
                "config": "ok",
                "upstream": word(every_upstream),
                "store": word(store),
            },
            "store": app.fleet.sessions().store_kind(),
            "upstream": label,
            "upstreams": detail,
        }),
    )
}

async fn metrics(app: &Ops) -> Response<ProxyBody> {
    let sessions = app.fleet.sessions();
    let active = sessions.count().await.unwrap_or_else(|_| sessions.live());
    app.metrics.sessions_active.set(active as i64);
    let (mut pooled, mut children, mut stdio) = (0, 0, false);
    // Only configured upstreams and replicas are labels: a reload drops the others.
    app.metrics.replica_healthy.clear();
    app.metrics.replica_sessions.clear();
    app.metrics.replica_era.clear();
    for served in app.fleet.upstreams().all() {
        let upstream = served.session.upstream();
        if let Some(c) = upstream.children() {
            stdio = true;
            pooled += c.pooled;
            children += c.live;
            continue;
        }
        for state in upstream.replica_states() {
            let labels = ReplicaLabels {
                upstream: served.name.to_string(),
                replica: state.label.to_string(),
            };
            app.metrics
                .replica_healthy
                .get_or_create(&labels)
                .set(i64::from(state.healthy));
            app.metrics
                .replica_sessions
                .get_or_create(&labels)
                .set(state.live as i64);
            app.metrics
                .set_replica_era(labels, state.era.map(Era::name));
        }
    }
    let endings = app.fleet.endings();
    app.metrics
        .upstream_endings_pending
        .set(endings.pending() as i64);
    let dropped = &app.metrics.upstream_endings_dropped;
    dropped.inc_by(endings.dropped().saturating_sub(dropped.get()));
    if let Some(stones) = app.fleet.shared().cluster.tombstones() {
        app.metrics.sealed_tombstones.set(stones.len() as i64);
        let dropped = &app.metrics.sealed_tombstones_dropped;
        dropped.inc_by(stones.dropped().saturating_sub(dropped.get()));
    }
    if stdio {
        app.metrics.pool_size(POOL_STDIO).set(pooled as i64);
        app.metrics.stdio_children.set(children as i64);
    }
    let mut response = Response::new(ProxyBody::full(app.metrics.encode()));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// Whether the request carries `Authorization: Bearer <admin token>` (compared in
/// constant time).
fn authorized<B>(app: &Ops, request: &Request<B>) -> Option<bool> {
    let token = app.admin_token.as_ref()?;
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .as_bytes();
    let expected = token.0.as_slice();
    let same_length = presented.len() == expected.len();
    let difference = presented
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    Some(same_length && difference == 0)
}

/// `/metrics` asked for on a guarded client listener without the admin token: 401 (or,
/// with no admin token to give, as if it were not there).
fn needs_token(app: &Ops) -> Response<ProxyBody> {
    if app.admin_token.is_none() {
        return json(StatusCode::NOT_FOUND, json!({"error": "not found"}));
    }
    let mut response = json(
        StatusCode::UNAUTHORIZED,
        json!({"error": "with [auth] on, /metrics needs Authorization: Bearer <admin.token> (or admin.listen)"}),
    );
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

async fn admin<B>(app: &Ops, request: &Request<B>) -> Response<ProxyBody> {
    match authorized(app, request) {
        // The admin API is off: it does not exist.
        None => return json(StatusCode::NOT_FOUND, json!({"error": "not found"})),
        Some(false) => {
            let mut response = json(
                StatusCode::UNAUTHORIZED,
                json!({"error": "the admin API needs Authorization: Bearer <admin.token>"}),
            );
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
        Some(true) => {}
    }
    let path = request.uri().path();
    match (request.method(), path.strip_prefix("/admin/sessions/")) {
        (&Method::GET, None) => list(app, request.uri().query()).await,
        (&Method::DELETE, Some(tag)) if !tag.is_empty() => revoke(app, tag).await,
        (_, None) => not_allowed("GET"),
        (_, Some(_)) => not_allowed("DELETE"),
    }
}

/// `GET /admin/sessions[?limit=N]`: hashed id, upstream, age, idle time, expiry.
async fn list(app: &Ops, query: Option<&str>) -> Response<ProxyBody> {
    let limit = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("limit="))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1000);
    let sessions = match app.fleet.sessions().list(limit).await {
        Ok(sessions) => sessions,
        Err(e) => {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": e.to_string()}),
            );
        }
    };
    let now = now_millis();
    let ttl = app.fleet.sessions().settings().idle_ttl.as_millis() as u64;
    let upstreams = app.fleet.upstreams();
    let rows: Vec<_> = sessions
        .iter()
        .map(|(id, record)| {
            let last_use = record.expires_at.saturating_sub(ttl);
            let replica = upstreams
                .named(&record.upstream)
                .and_then(|s| {
                    s.session
                        .upstream()
                        .replica_states()
                        .into_iter()
                        .find(|r| r.id == record.backing.replica)
                        .map(|r| r.label.to_string())
                })
                .unwrap_or_default();
            json!({
                "id": short(id),
                "upstreamName": record.upstream.as_ref(),
                "upstream": replica,
                "ageSeconds": now.saturating_sub(record.created_at) / 1000,
                "idleSeconds": now.saturating_sub(last_use) / 1000,
                "expiresAt": rfc3339(record.expires_at),
                "uses": record.seq,
            })
        })
        .collect();
    let total = app.fleet.sessions().count().await.unwrap_or(rows.len());
    json(StatusCode::OK, json!({"total": total, "sessions": rows}))
}

/// `DELETE /admin/sessions/<hash>`: ends that session here and upstream; its client
/// gets -32043 from then on.
async fn revoke(app: &Ops, tag: &str) -> Response<ProxyBody> {
    let sessions = match app.fleet.sessions().list(usize::MAX).await {
        Ok(sessions) => sessions,
        Err(e) => {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": e.to_string()}),
            );
        }
    };
    let Some((id, record)) = sessions.into_iter().find(|(id, _)| short(id) == tag) else {
        return json(
            StatusCode::NOT_FOUND,
            json!({"error": "no session with this id hash"}),
        );
    };
    let Some(served) = app.fleet.upstreams().named(&record.upstream).cloned() else {
        return json(
            StatusCode::NOT_FOUND,
            json!({"error": "the session's upstream is no longer configured"}),
        );
    };
    match served.session.end(&id).await {
        Ok(Some(_)) => {
            tracing::info!(session = %tag, "session revoked by the admin API");
            respond::status(StatusCode::NO_CONTENT)
        }
        Ok(None) => json(
            StatusCode::NOT_FOUND,
            json!({"error": "no session with this id hash"}),
        ),
        Err(e) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": e.to_string()}),
        ),
    }
}
