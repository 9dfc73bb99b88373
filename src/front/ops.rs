//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`, and the token-protected admin
//! API (`/admin/sessions`). None of them shows a usable sessionId: sessions are named by
//! a 64-bit hash (the same tag the logs use).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::not_allowed;
use crate::config::{HEALTH_PATH, Secret};
use crate::fleet::Fleet;
use crate::metrics::{Metrics, ReplicaLabels};
use crate::response::{self as respond, ProxyBody};
use crate::session::{log_tag as short, now_millis, rfc3339};

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
}

const READY_PATH: &str = "/readyz";
const METRICS_PATH: &str = "/metrics";
const ADMIN_SESSIONS: &str = "/admin/sessions";
/// The `pool` label of the stdio warm pool.
const POOL_STDIO: &str = "stdio";

impl Ops {
    /// Answers an operations request, or `None` when the path is not one of them.
    pub async fn route<B>(&self, request: &Request<B>) -> Option<Response<ProxyBody>> {
        route(self, request).await
    }
}

async fn route<B>(app: &Ops, request: &Request<B>) -> Option<Response<ProxyBody>> {
    let path = request.uri().path();
    let method = request.method();
    let is_read = method == Method::GET || method == Method::HEAD;
    let response = match path {
        HEALTH_PATH if is_read => json(StatusCode::OK, json!({"status": "ok"})),
        READY_PATH if is_read => ready(app).await,
        METRICS_PATH if is_read && app.serve_metrics => metrics(app).await,
        HEALTH_PATH | READY_PATH => not_allowed("GET, HEAD"),
        METRICS_PATH if app.serve_metrics => not_allowed("GET, HEAD"),
        _ if path == ADMIN_SESSIONS || path.starts_with("/admin/sessions/") => {
            admin(app, request).await
        }
        _ => return None,
    };
    Some(response)
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<ProxyBody> {
    respond::json(status, Bytes::from(value.to_string()))
}

/// Ready when the configuration loaded (it did, or the proxy would not run), every
/// upstream has a replica in rotation (or can start stdio children), and the session
/// store answers. Each upstream and replica is named, with its state.
async fn ready(app: &Ops) -> Response<ProxyBody> {
    let upstreams = app.fleet.upstreams();
    let word = |ok: bool| if ok { "ok" } else { "failing" };
    let mut every_upstream = true;
    let mut detail = serde_json::Map::new();
    for served in upstreams.all() {
        let upstream = served.session.upstream();
        let ok = upstream.reachable();
        every_upstream &= ok;
        let replicas: serde_json::Map<String, serde_json::Value> = upstream
            .replica_health()
            .into_iter()
            .map(|(label, healthy, _)| (label.to_string(), json!(word(healthy))))
            .collect();
        detail.insert(
            served.name.to_string(),
            json!({"status": word(ok), "default": served.default, "replicas": replicas}),
        );
    }
    let store = app.fleet.sessions().store_reachable().await;
    let status = if every_upstream && store {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let label = upstreams
        .default_upstream()
        .map(|s| s.label.to_string())
        .unwrap_or_default();
    json(
        status,
        json!({
            "status": if status == StatusCode::OK { "ready" } else { "not ready" },
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
    for served in app.fleet.upstreams().all() {
        let upstream = served.session.upstream();
        if let Some(c) = upstream.children() {
            stdio = true;
            pooled += c.pooled;
            children += c.live;
            continue;
        }
        for (replica, healthy, live) in upstream.replica_health() {
            let labels = ReplicaLabels {
                upstream: served.name.to_string(),
                replica: replica.to_string(),
            };
            app.metrics
                .replica_healthy
                .get_or_create(&labels)
                .set(i64::from(healthy));
            app.metrics
                .replica_sessions
                .get_or_create(&labels)
                .set(live as i64);
        }
    }
    let endings = app.fleet.endings();
    app.metrics
        .upstream_endings_pending
        .set(endings.pending() as i64);
    let dropped = &app.metrics.upstream_endings_dropped;
    dropped.inc_by(endings.dropped().saturating_sub(dropped.get()));
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
                        .replica_health()
                        .into_iter()
                        .zip(s.session.upstream().replica_ids())
                        .find(|(_, id)| *id == record.route.replica)
                        .map(|((label, _, _), _)| label.to_string())
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
