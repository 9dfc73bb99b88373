//! Old clients (2025-11-25 and earlier) with no data-layer session: the request goes to
//! the upstream as the client sent it, and the answer comes back as the upstream sent it,
//! streamed. Only a Streamable HTTP upstream has such a session-less way in (the route
//! refuses the rest).
//!
//! With several replicas, an old client must keep talking to the replica that issued its
//! `Mcp-Session-Id`. The proxy learns which one from the answer that carries a new id
//! (the `initialize` response passing through) and keeps it in a bounded table, renewed
//! by use and forgotten after `session.idle_ttl` unused (and in Redis too, when the
//! session store is Redis, so every proxy replica and a restarted one know it). A message
//! naming an id nobody learned (a proxy restarted with the memory or sealed store, or
//! another proxy replica without Redis) is tried on each replica in turn until one does
//! not say it does not know the session (404, or a 400 in its own words:
//! `upstream::lost`), and that one is learned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use http::{HeaderMap, Method, Response};

use super::headers;
use super::session::upstream_error;
use crate::error::ProxyError;
use crate::mcp::headers::MCP_SESSION_ID;
use crate::metrics::Metrics;
use crate::response::ProxyBody;
use crate::session::Sessions;
use crate::upstream::{
    Media, Probed, ReplicaId, Upstream, UpstreamBody, UpstreamError, UpstreamResponse, media_type,
};

/// See the module documentation.
#[derive(Debug)]
pub struct PassThrough {
    name: Arc<str>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    issuers: Issuers,
    /// The session store, for its Redis (shared affinity).
    sessions: Arc<Sessions>,
}

/// Which replica issued each old client's `Mcp-Session-Id`.
#[derive(Debug)]
struct Issuers {
    table: DashMap<Box<str>, (ReplicaId, Instant)>,
    capacity: usize,
    ttl: Duration,
}

impl Issuers {
    fn get(&self, session: &str) -> Option<ReplicaId> {
        let mut entry = self.table.get_mut(session)?;
        if entry.1.elapsed() > self.ttl {
            drop(entry);
            self.table.remove(session);
            return None;
        }
        entry.1 = Instant::now();
        Some(entry.0)
    }

    fn learn(&self, session: &str, replica: ReplicaId) {
        if self.table.len() >= self.capacity {
            let ttl = self.ttl;
            self.table.retain(|_, (_, used)| used.elapsed() <= ttl);
            if self.table.len() >= self.capacity {
                // Full of live entries: this one is found again by trying replicas.
                return;
            }
        }
        self.table.insert(session.into(), (replica, Instant::now()));
    }
}

impl PassThrough {
    pub fn new(
        name: Arc<str>,
        upstream: Upstream,
        metrics: Arc<Metrics>,
        sessions: Arc<Sessions>,
    ) -> Self {
        let settings = sessions.settings();
        let issuers = Issuers {
            table: DashMap::new(),
            capacity: settings.max_sessions,
            ttl: settings.idle_ttl,
        };
        PassThrough {
            name,
            upstream,
            metrics,
            issuers,
            sessions,
        }
    }

    /// Forwards one request (`POST` with its body, `GET`, `DELETE`).
    pub async fn forward(
        &self,
        method: Method,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let passed = headers::to_upstream_passthrough(client_headers);
        if let Some(only) = self.upstream.single_replica() {
            // Nothing to choose or learn.
            let response = self
                .upstream
                .forward(only, method, &passed, body)
                .await
                .map_err(|e| upstream_error(&self.upstream, e))?;
            return Ok(self.answer(response));
        }
        let session = client_headers
            .get(&MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok());
        let known = match session {
            Some(session) => self.known_replica(session).await,
            None => None,
        };
        let candidates: Vec<ReplicaId> = match known {
            Some(replica) => vec![replica],
            None => self.upstream.preference().iter().map(|r| r.id).collect(),
        };
        let last = candidates.len().saturating_sub(1);
        let mut failure = UpstreamError::Unreachable("the upstream has no replicas".into());
        for (i, replica) in candidates.into_iter().enumerate() {
            let sent = self
                .upstream
                .forward(replica, method.clone(), &passed, body.clone())
                .await;
            let mut response = match sent {
                Ok(response) => response,
                // A new session may go to another replica; a known one cannot.
                Err(e @ UpstreamError::Unreachable(_)) if session.is_none() && i < last => {
                    failure = e;
                    continue;
                }
                Err(e) => return Err(upstream_error(&self.upstream, e)),
            };
            // An id nobody learned: is it this replica's?
            if let (Some(_), None, true) = (session, known, i < last) {
                let probed = self.upstream.probe_answer(response).await;
                match probed.map_err(|e| upstream_error(&self.upstream, e))? {
                    Probed::Unknown => continue,
                    Probed::Answer(answer) => response = answer,
                    // A refusal other than "unknown session" (nothing to learn from it).
                    Probed::Read(mut parts, body) => {
                        headers::to_client_passthrough(&mut parts.headers);
                        return Ok(Response::from_parts(parts, ProxyBody::full(body)));
                    }
                }
            }
            self.learn(session, known, &method, replica, &response)
                .await;
            return Ok(self.answer(response));
        }
        Err(upstream_error(&self.upstream, failure))
    }

    /// The replica that issued `session`, if this proxy (or, with Redis, any) learned it.
    async fn known_replica(&self, session: &str) -> Option<ReplicaId> {
        if let Some(replica) = self.issuers.get(session) {
            return Some(replica);
        }
        let redis = self.sessions.store().redis()?;
        match redis.affinity(&self.name, session).await {
            Ok(Some(replica)) => {
                self.issuers.learn(session, replica);
                Some(replica)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "could not read an old client's replica from Redis");
                None
            }
        }
    }

    /// Learns from an answer which replica holds which old client's session.
    async fn learn(
        &self,
        sent: Option<&str>,
        known: Option<ReplicaId>,
        method: &Method,
        replica: ReplicaId,
        response: &Response<UpstreamBody>,
    ) {
        let redis = self.sessions.store().redis();
        if *method == Method::DELETE && response.status().is_success() {
            if let Some(session) = sent {
                self.issuers.table.remove(session);
                if let Some(redis) = redis {
                    let _ = redis.forget_affinity(&self.name, session).await;
                }
            }
            return;
        }
        let issued = response
            .headers()
            .get(&MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .or(sent);
        let Some(issued) = issued.filter(|_| response.status().is_success()) else {
            return;
        };
        if known == Some(replica) && sent == Some(issued) {
            return;
        }
        self.issuers.learn(issued, replica);
        if let Some(redis) = redis
            && let Err(e) = redis.set_affinity(&self.name, issued, replica).await
        {
            tracing::warn!(error = %e, "could not record an old client's replica in Redis");
        }
    }

    fn answer(&self, response: UpstreamResponse) -> Response<ProxyBody> {
        let (mut parts, body) = response.into_parts();
        let open = (media_type(&parts.headers) == Media::EventStream)
            .then(|| self.metrics.stream_opened());
        headers::to_client_passthrough(&mut parts.headers);
        Response::from_parts(parts, ProxyBody::Untouched { body, open })
    }
}
