//! Data-layer sessions (the data-layer sessions draft; SEP-1364's dialect; old clients of
//! a stdio server): `sessions/create` opens an upstream session of its own and records
//! it; every message naming the session is relayed on that upstream session with the
//! session `_meta` taken off, and its answer comes back stamped; `sessions/delete`,
//! expiry and shutdown end the upstream session too.
//!
//! A session enters the store only once its upstream handshake succeeded; an upstream
//! session opened for a create that then fails (the store, the client leaving) is ended.
//! An upstream that lost a session makes the proxy forget it — the client hears -32043
//! and starts over — unless the upstream's policy is `on_session_lost = "reinitialize"`:
//! then the client's recorded `initialize` is replayed on a healthy replica, the session
//! keeps its id, and a request that is safe to repeat is sent once more.
//!
//! One `SessionPath` serves one upstream; the store is shared by all of them (a record
//! names its upstream, and is unknown at any other). A session whose upstream session
//! lives in one process (a stdio child, an HTTP+SSE session's stream) names that proxy
//! replica as its owner; its messages landing elsewhere are forwarded there (`cluster`).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;

use dashmap::DashMap;

use super::bridge::{self, Bridge};
use super::cluster::{Cluster, Forward, Whereabouts};
use super::headers;
use super::relay::{Relay, Request};
use crate::config::OnSessionLost;
use crate::error::ProxyError;
use crate::jsonrpc::{Kind, range_in, string_object, write, write_json_str};
use crate::mcp::caller::{Caller, CallerKey};
use crate::mcp::headers::{LAST_EVENT_ID, MCP_SESSION_ID, SSE};
use crate::mcp::logging::LogLevel;
use crate::mcp::tools::ToolHints;
use crate::mcp::{ClientEra, Method, meta};
use crate::metrics::{Metrics, Rejection};
use crate::response::{self, ProxyBody};
use crate::rewrite::to_client::{Stamp, Stamped, stamp_message};
use crate::rewrite::to_legacy::initialize_result;
use crate::rewrite::to_modern::{Frame, framed};
use crate::rewrite::to_upstream::{strip_session, strip_top_level_session};
use crate::route::{Message, SessionRef};
use crate::session::{
    Backing, ClientIdentity, Issued, Lease, NewSession, Reroute, SessionError, SessionRecord,
    Sessions, Slot, log_tag, now_millis, rfc3339, rfc3339_in,
};
use crate::upstream::ids::Outgoing;
use crate::upstream::{
    Ending, LOCAL_REPLICA, Messages, SessionAddr, Upstream, UpstreamError, UpstreamSession,
};
use crate::wire;

/// Idle limit of a session's listen stream (its client ends it by disconnecting).
const LISTEN_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

/// See the module documentation.
#[derive(Debug)]
pub struct SessionPath {
    /// The upstream's name, as records name it.
    name: Arc<str>,
    /// The endpoint path serving it (where a forwarded message goes on its owner).
    path: String,
    upstream: Upstream,
    sessions: Arc<Sessions>,
    metrics: Arc<Metrics>,
    /// An upstream event stream silent this long is ended.
    sse_idle_timeout: Duration,
    on_session_lost: OnSessionLost,
    /// Which tools the upstream called idempotent, and which arguments they mirror into
    /// headers (learned from `tools/list`; shared with the bridge).
    tools: Arc<ToolHints>,
    cluster: Arc<Cluster>,
    /// Sessions whose upstream session lives in this process (stdio children, HTTP+SSE
    /// streams), by its key: their sessionId and last use (ms). Bounded by
    /// `max_children`, or by the session limits.
    local: DashMap<String, Local>,
    /// Old clients' sessions of a modern upstream, bridged here.
    bridge: Bridge,
}

#[derive(Debug, Clone)]
struct Local {
    session_id: String,
    last_use: Arc<AtomicU64>,
}

/// How a session path is set up.
#[derive(Debug)]
pub struct SessionSettings {
    pub name: Arc<str>,
    /// The endpoint path serving the upstream.
    pub path: String,
    pub sse_idle_timeout: Duration,
    pub on_session_lost: OnSessionLost,
    /// How long a bridged call of an old client waits for its answers to the server's
    /// questions (`stateless.request_state_ttl`).
    pub input_wait: Duration,
}

/// The address of the upstream session backing a session.
pub fn addr(backing: &Backing) -> SessionAddr<'_> {
    SessionAddr {
        replica: backing.replica,
        session_id: backing.upstream_session.as_deref(),
        protocol_version: backing.negotiated.protocol_version,
    }
}

impl SessionPath {
    pub fn new(
        settings: SessionSettings,
        upstream: Upstream,
        sessions: Arc<Sessions>,
        metrics: Arc<Metrics>,
        cluster: Arc<Cluster>,
    ) -> Self {
        let tools = Arc::new(ToolHints::default());
        let bridge = Bridge::new(
            upstream.clone(),
            metrics.clone(),
            tools.clone(),
            settings.input_wait,
            settings.sse_idle_timeout,
        );
        SessionPath {
            name: settings.name,
            path: settings.path,
            upstream,
            sessions,
            metrics,
            sse_idle_timeout: settings.sse_idle_timeout,
            on_session_lost: settings.on_session_lost,
            tools,
            cluster,
            local: DashMap::new(),
            bridge,
        }
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The upstream's name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The endpoint path serving this upstream, e.g. `/mcp/files`.
    pub fn path(&self) -> &str {
        &self.path
    }

    // === the routes ===

    /// `sessions/create`: open an upstream session, then record the session. The
    /// client's identity and capabilities come from the request's `_meta` (or, in
    /// SEP-1364's shape, from `params.capabilities`); `era` is what the client speaks.
    pub async fn create(
        &self,
        message: &Message<'_, '_>,
        id: &RawValue,
        era: ClientEra,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let params = message.params();
        let client_info = params.and_then(|p| p.meta(meta::CLIENT_INFO));
        let capabilities = params
            .and_then(|p| p.meta(meta::CLIENT_CAPABILITIES))
            .or_else(|| params.and_then(|p| p.member("capabilities")));
        let issued = self
            .open(Opening::of(message, era, client_info, capabilities))
            .await?;
        let session = string_object(&[
            ("sessionId", &issued.id),
            ("expiresAt", &rfc3339(issued.expires_at)),
            ("state", &issued.state),
        ]);
        let mut result = Vec::with_capacity(session.len() + 96);
        result.push(b'{');
        if era == ClientEra::Sep1364 {
            // SEP-1364 alternative 1 answers `result.sessionId`; the draft's `session` too.
            result.extend_from_slice(br#""sessionId":"#);
            write_json_str(&mut result, &issued.id);
            result.push(b',');
        }
        result.extend_from_slice(br#""session":"#);
        result.extend_from_slice(&session);
        if era == ClientEra::Modern {
            result.extend_from_slice(br#","resultType":"complete""#);
        }
        result.push(b'}');
        let body = self.answer(id, era, &issued.id, &result);
        Ok(ok_in_session(body, &issued.id))
    }

    /// SEP-1364 alternative 2: `initialize` carrying a top-level `sessionId`. `null`
    /// opens a new session (the upstream is initialized with the client's own clientInfo
    /// and capabilities); a known id answers again for that session. The result is the
    /// upstream's `InitializeResult` with `sessions: {required: false}` added.
    pub async fn initialize(
        &self,
        message: &Message<'_, '_>,
        id: &RawValue,
        session: Option<&SessionRef<'_>>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let (session_id, negotiated) = match session {
            None => {
                let issued = self.open_initialized(message, ClientEra::Sep1364).await?;
                (issued.id, issued.negotiated)
            }
            Some(session) => {
                let lease = self.lease(session, message.caller).await?;
                (session.id.to_string(), lease.record.backing.negotiated)
            }
        };
        let requested = requested_version(message);
        let result = initialize_result(&negotiated, requested, Some(br#"{"required":false}"#));
        let body = self.answer(id, ClientEra::Sep1364, &session_id, &result);
        Ok(ok_in_session(body, &session_id))
    }

    /// An old client's `initialize` when the proxy is its transport (a stdio or HTTP+SSE
    /// upstream has no Streamable HTTP of its own): an upstream session is opened with the
    /// client's own clientInfo and capabilities, and the answer is its `InitializeResult`
    /// with the proxy's `Mcp-Session-Id`, as a 2025-11-25 server would give them.
    pub async fn initialize_legacy(
        &self,
        message: &Message<'_, '_>,
        id: &RawValue,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let issued = self.open_initialized(message, ClientEra::Legacy).await?;
        let result = initialize_result(&issued.negotiated, requested_version(message), None);
        let body = write::result(id.get().as_bytes(), &result);
        Ok(ok_in_session(body, &issued.id))
    }

    /// What the upstream's tools declared (learned from `tools/list`).
    pub fn tool_hints(&self) -> &Arc<ToolHints> {
        &self.tools
    }

    /// `sessions/delete` (or SEP-1364's `session/delete` / `terminate`): `{}` once the
    /// session is gone here and upstream.
    pub async fn delete(
        &self,
        message: &Message<'_, '_>,
        id: &RawValue,
        session: &SessionRef<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if let Some(forwarded) = self
            .to_owner(
                &session.id,
                http::Method::POST,
                message.headers,
                message.body,
                (message.caller, message.peer),
            )
            .await
        {
            return forwarded;
        }
        self.end_named(session, message.caller).await?;
        Ok(response::json(
            StatusCode::OK,
            write::result(id.get().as_bytes(), b"{}"),
        ))
    }

    /// HTTP `DELETE` with a data-layer `Mcp-Session-Id`: the transport-level way to end
    /// the same session (2025-11-25 "Session Management"), answered 204.
    pub async fn end_by_header(
        &self,
        client_headers: &HeaderMap,
        (caller, client): (Caller, Option<IpAddr>),
        session: &SessionRef<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if let Some(forwarded) = self
            .to_owner(
                &session.id,
                http::Method::DELETE,
                client_headers,
                &Bytes::new(),
                (caller, client),
            )
            .await
        {
            return forwarded;
        }
        self.end_named(session, caller).await?;
        Ok(response::status(StatusCode::NO_CONTENT))
    }

    /// Any message in a session but the create and the delete: relayed on the session's
    /// upstream session, its answer stamped in the shape of `era`, what the message speaks
    /// (unless an old client opened the session).
    pub async fn forward(
        &self,
        message: &Message<'_, '_>,
        session: &SessionRef<'_>,
        era: ClientEra,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        record_session(&session.id);
        // What a legacy server would refuse the whole message for is refused here, with
        // the key named, before the session is used.
        if let Some(params) = message.params() {
            params.check_typed_meta()?;
        }
        let mut lease = self.lease(session, message.caller).await?;
        let body = message.body;
        let post = http::Method::POST;
        let who = (message.caller, message.peer);
        if let Some(there) = self
            .elsewhere(&mut lease, session, post, message.headers, body, who)
            .await?
        {
            return Ok(there);
        }
        self.used_locally(&lease.record.backing);
        if is_bridged(&lease.record) {
            // Boxed, as the rare paths here are: a bridged session's call is large, and
            // would make every other session call's future as large.
            let answered = Box::pin(self.bridge.forward(message, &lease, &session.id)).await?;
            return Ok(with_session(answered, &session.id));
        }
        // Where the request's id is in what goes upstream, so that it is not read again
        // to be renamed there.
        let (mut upstream_body, mut id_at) = match message.payload {
            Some((raw, payload)) => strip_session(body, raw, payload, message.request_id()),
            None => (
                body.clone(),
                message.request_id().and_then(|id| range_in(body, id)),
            ),
        };
        if era == ClientEra::Sep1364 {
            upstream_body = strip_top_level_session(upstream_body);
            id_at = None;
        }
        let modern = lease.record.backing.negotiated.is_modern();
        if modern {
            // What the session keeps and a 2026-07-28 server has no method for (ping, the
            // log level, subscriptions) is kept here, as for a bridged session.
            if let Some(id) = message.request_id()
                && let Some(result) = self.bridge.answer_session_scoped(message, &session.id)
            {
                let answer = write::result(id.get().as_bytes(), &result?);
                let stamp = self.stamp(message, &lease, session, era);
                let stamped = match stamp.as_ref().map(|s| stamp_message(&answer, s)) {
                    Some(Stamped::Response(Some(stamped))) => Bytes::from(stamped),
                    _ => answer,
                };
                return Ok(ok_in_session(stamped, &session.id));
            }
            // No session upstream: every request carries what the session keeps.
            let log_level = self.bridge.log_level(&session.id);
            upstream_body = framed(upstream_body, frame_of(&lease.record, log_level));
        }
        let forwarded = headers::to_upstream_in_session(message.headers);
        let route = &lease.record.backing;
        let exchanged = if modern {
            let frame = frame_of(&lease.record, self.bridge.log_level(&session.id));
            let body = upstream_body.clone();
            super::framed::exchange(
                &self.upstream,
                &self.tools,
                addr(route),
                body,
                &forwarded,
                frame,
            )
            .await
        } else {
            // The relay below reads a JSON answer once, for the client's id too.
            let outgoing = match id_at {
                Some(id) => Outgoing::request(upstream_body.clone(), id),
                None => Outgoing::from(upstream_body.clone()),
            }
            .restored_by_reader();
            self.upstream
                .exchange(addr(route), outgoing, forwarded)
                .await
        };
        let answer = match exchanged {
            Ok(answer) => answer,
            Err(UpstreamError::SessionGone) => {
                let route =
                    Box::pin(self.lost(&session.id, &lease.record, message.headers)).await?;
                if !self.safe_to_repeat(message) {
                    return Err(ProxyError::NotRetried {
                        upstream: self.upstream.label().to_string(),
                        session_id: session.id.to_string(),
                    });
                }
                tracing::info!(session = %log_tag(&session.id), "request retried on the new upstream session");
                // The headers went with the first try: made again for this rare one.
                let forwarded = headers::to_upstream_in_session(message.headers);
                let retried = self
                    .upstream
                    .exchange(addr(&route), upstream_body, forwarded)
                    .await;
                match retried {
                    Ok(answer) => answer,
                    Err(e) => return Err(Box::pin(self.failed(e, &session.id)).await),
                }
            }
            Err(e) => return Err(Box::pin(self.failed(e, &session.id)).await),
        };
        let envelope = message.envelope;
        let request_id = envelope
            .id
            .filter(|_| envelope.kind == Kind::Request)
            .map(|id| raw_bytes(body, id));
        let stamp = self.stamp(message, &lease, session, era);
        let learn = (message.method() == Some(Method::ToolsList)).then(|| self.tools.clone());
        let relayed = self
            .relay(self.sse_idle_timeout)
            .relay(
                answer,
                Request {
                    id: request_id,
                    accepts: message.accepts,
                    stamp,
                    learn,
                },
            )
            .await?;
        Ok(with_session_sent(relayed, message, &session.id))
    }

    /// How the answer to `message` (from a client of `era`) is stamped with the session.
    /// Sessions that an old
    /// client opened with `initialize` (stdio upstreams) get their answers as a legacy
    /// server would give them: no session `_meta`.
    fn stamp(
        &self,
        message: &Message<'_, '_>,
        lease: &Lease,
        session: &SessionRef<'_>,
        era: ClientEra,
    ) -> Option<Stamp> {
        let id = message
            .request_id()
            .filter(|_| !lease.record.client_era.is_legacy())?;
        let mut stamp = session_stamp(&session.id, lease, raw_bytes(message.body, id));
        stamp.top_level = (era == ClientEra::Sep1364).then(|| json_string(&session.id));
        stamp.complete = era == ClientEra::Modern;
        Some(stamp)
    }

    /// `GET` with a data-layer `Mcp-Session-Id`: the session's upstream stream of server
    /// messages not tied to a client request (the GET stream over HTTP, the unclaimed
    /// messages of a stdio child), passed on as it is.
    pub async fn listen(
        &self,
        client_headers: &HeaderMap,
        (caller, client): (Caller, Option<IpAddr>),
        session: &SessionRef<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let mut lease = self.lease(session, caller).await?;
        let get = http::Method::GET;
        let empty = Bytes::new();
        let who = (caller, client);
        if let Some(there) = self
            .elsewhere(&mut lease, session, get, client_headers, &empty, who)
            .await?
        {
            return Ok(there);
        }
        self.used_locally(&lease.record.backing);
        // A modern upstream has no session stream: one `subscriptions/listen` stands for it.
        if lease.record.backing.negotiated.is_modern() {
            let forwarded = headers::to_upstream_in_session(client_headers);
            let stream = bridge::listen(&self.bridge, &lease, &session.id, forwarded).await?;
            return Ok(with_session(stream, &session.id));
        }
        let mut forwarded = headers::to_upstream_in_session(client_headers);
        if let Some(last) = client_headers.get(&LAST_EVENT_ID) {
            forwarded.insert(LAST_EVENT_ID.clone(), last.clone());
        }
        forwarded.insert(http::header::ACCEPT, HeaderValue::from_static(SSE));
        let listened = self
            .upstream
            .listen(addr(&lease.record.backing), &forwarded)
            .await;
        let answer = match listened {
            Ok(answer) => answer,
            Err(e) => return Err(self.failed(e, &session.id).await),
        };
        let mut response = Response::new(ProxyBody::empty());
        *response.status_mut() = answer.status;
        let mut answered = answer.headers;
        headers::to_client_in_session(&mut answered);
        *response.headers_mut() = answered;
        let body = match answer.messages {
            // Not a stream (the upstream refused, with a JSON error): as it is.
            Messages::One(message) => message.map(ProxyBody::full).unwrap_or_default(),
            Messages::Nothing => ProxyBody::empty(),
            Messages::Opaque(body) => ProxyBody::Untouched {
                body: *body,
                open: None,
            },
            stream @ (Messages::Events(_) | Messages::Channel { .. }) => {
                if matches!(stream, Messages::Channel { .. }) {
                    // A stdio child's stream: the proxy writes the events.
                    response
                        .headers_mut()
                        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static(SSE));
                }
                self.relay(LISTEN_IDLE).stream(stream, None)
            }
        };
        *response.body_mut() = body;
        Ok(with_session(response, &session.id))
    }

    // === what others ask of sessions ===

    /// Ends session `id` here and upstream (the admin API revoking it); its record, or
    /// `None` when there is no such session.
    pub async fn end(&self, id: &str) -> Result<Option<SessionRecord>, ProxyError> {
        let Some(record) = self
            .sessions
            .end(id)
            .await
            .map_err(|e| self.session_error(e, id))?
        else {
            return Ok(None);
        };
        // Waited for, so that when the client hears `{}` the upstream session is gone; a
        // failure is logged, not returned: the mapping is gone either way.
        self.forget_local(&record.backing);
        self.bridge.forget(id);
        if let Err(e) = self.upstream.terminate(addr(&record.backing)).await {
            tracing::warn!(session = %log_tag(id), error = %e, "upstream did not end the session");
        }
        // A sealed id is refused by its tombstone, which the peers get before the client
        // hears the delete answered (those that answer, within a bound).
        self.cluster.settle(super::cluster::SETTLE).await;
        self.metrics.sessions_deleted.inc();
        Ok(Some(record))
    }

    /// The reaper found `record` expired: its upstream session is queued to be ended in
    /// the background (the reaper waits while the queue is full).
    pub async fn expired(&self, id: &str, record: SessionRecord) {
        self.metrics.sessions_expired.inc();
        tracing::info!(session = %log_tag(id), "session expired");
        self.forget_local(&record.backing);
        self.bridge.forget(id);
        self.upstream
            .endings()
            .end(self.ending(&record.backing))
            .await;
    }

    /// A stdio child died on its own, or an HTTP+SSE session's stream ended: the session
    /// it served is forgotten at once (its client gets -32043), not at its next use or
    /// expiry — unless the policy is to reinitialize, which its next use then does.
    pub async fn upstream_session_died(&self, upstream_session: &str) {
        self.upstream.forget(SessionAddr {
            replica: LOCAL_REPLICA,
            session_id: Some(upstream_session),
            protocol_version: "",
        });
        if self.on_session_lost == OnSessionLost::Reinitialize {
            return;
        }
        let Some((_, local)) = self.local.remove(upstream_session) else {
            return;
        };
        if let Ok(Some(_)) = self.sessions.end(&local.session_id).await {
            self.metrics.sessions_lost.inc();
            tracing::info!(session = %log_tag(&local.session_id), "session ended: its upstream session died");
        }
    }

    /// Queues the upstream sessions of `records` (already out of the store) to be ended,
    /// waiting for room (a reload, shutdown); the owner of the endings waits for them.
    pub async fn end_records(&self, records: Vec<SessionRecord>) {
        for record in records {
            self.forget_local(&record.backing);
            self.upstream
                .endings()
                .end(self.ending(&record.backing))
                .await;
        }
    }

    /// Ends the process-local upstream sessions (stdio children, HTTP+SSE streams) of
    /// sessions that ended elsewhere (another replica deleted or reaped the record) or
    /// that nobody used for `session.idle_ttl` (a sealed session's, which nothing else
    /// reaps). Bounded by the upstream sessions held here.
    pub async fn sweep_local(&self) {
        let idle = self.sessions.settings().idle_ttl.as_millis() as u64;
        let now = now_millis();
        let held: Vec<(String, Local)> = self
            .local
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (key, local) in held {
            let stale = now.saturating_sub(local.last_use.load(Ordering::Acquire)) > idle;
            let gone = !stale
                && self.sessions.store().keeps_records()
                && matches!(self.sessions.peek(&local.session_id).await, Ok(None));
            if !(stale || gone) {
                continue;
            }
            self.local.remove(&key);
            tracing::info!(session = %log_tag(&local.session_id), "upstream session ended here: its session ended or went idle");
            let ending = Ending::new(&self.upstream, LOCAL_REPLICA, Some(&key), "");
            self.upstream.endings().end(ending).await;
        }
    }

    /// Forgets what bridged sessions unused for the idle TTL held here (their records
    /// expired, or were deleted, at another replica).
    pub fn sweep_bridged(&self) {
        self.bridge.sweep(self.sessions.settings().idle_ttl);
    }

    /// The sessionIds of the sessions whose upstream session lives in this process.
    pub fn local_sessions(&self) -> Vec<String> {
        self.local
            .iter()
            .map(|e| e.value().session_id.clone())
            .collect()
    }

    // === session handles (the stateless path's `session_open` tool) ===

    /// Opens a session bound to a caller, in the place `slot` holds for it
    /// (`Sessions::reserve_for`): the same machinery as `sessions/create` — the upstream
    /// handshake first, then the record, idle expiry, the reaper, the admin API.
    pub async fn open_bound(
        &self,
        slot: Slot<'_>,
        client_headers: &HeaderMap,
        caller: Caller,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
    ) -> Result<Issued, ProxyError> {
        let opening = Opening {
            client_headers,
            caller,
            counted_as: None,
            client_info,
            capabilities,
            // Handles are the stateless path's: its clients speak 2026-07-28.
            client_era: ClientEra::Modern,
        };
        self.open_in(Reservation::Taken(slot), opening).await
    }

    /// One use of session `id` by `caller` (a handle, or a session whose client the
    /// stateless path runs a call for, presenting `state` if it sent one): renewed, or
    /// -32043 when it is unknown, expired, of another upstream, or bound to another caller
    /// (then it is not renewed); a `state` not issued for it is refused.
    pub async fn lease_as(
        &self,
        id: &str,
        state: Option<&str>,
        caller: Caller,
    ) -> Result<Lease, ProxyError> {
        let lease = self.lease_id(id, state, caller).await?;
        self.used_locally(&lease.record.backing);
        Ok(lease)
    }

    /// Ends session `id` for `caller`: -32043 when it is unknown, of another upstream, or
    /// bound to another caller.
    pub async fn end_as(&self, id: &str, caller: Caller) -> Result<(), ProxyError> {
        self.check_caller(id, caller).await?;
        match self.end(id).await? {
            Some(_) => Ok(()),
            None => Err(ProxyError::SessionNotFound {
                session_id: id.to_owned(),
            }),
        }
    }

    /// The upstream lost the upstream session of handle `id`: the session is forgotten,
    /// whatever `on_session_lost` says (a handle exists to keep state, which a replayed
    /// `initialize` would not bring back; the model opens another).
    pub async fn forget_lost(&self, id: &str) {
        let _ = self.failed(UpstreamError::SessionGone, id).await;
    }

    /// -32043 when session `id` is live but of another upstream or bound to a caller
    /// other than `caller`.
    async fn check_caller(&self, id: &str, caller: Caller) -> Result<(), ProxyError> {
        let record = self
            .sessions
            .peek(id)
            .await
            .map_err(|e| self.session_error(e, id))?;
        match record {
            Some(record) if record.upstream != self.name => Err(ProxyError::SessionNotFound {
                session_id: id.to_owned(),
            }),
            Some(SessionRecord {
                caller: Some(bound),
                ..
            }) if bound != caller => {
                Err(self.session_error(SessionError::OtherCaller { bound, caller }, id))
            }
            _ => Ok(()),
        }
    }

    // === helpers ===

    fn relay(&self, idle_timeout: Duration) -> Relay<'_> {
        Relay {
            upstream: &self.upstream,
            metrics: &self.metrics,
            idle_timeout,
        }
    }

    /// The JSON-RPC response carrying `result`; SEP-1364 echoes the session at the top.
    fn answer(&self, id: &RawValue, era: ClientEra, session_id: &str, result: &[u8]) -> Bytes {
        let id = id.get().as_bytes();
        match era {
            ClientEra::Sep1364 => {
                write::result_with(id, &[("sessionId", &json_string(session_id))], result)
            }
            ClientEra::Legacy | ClientEra::DataLayer | ClientEra::Modern => {
                write::result(id, result)
            }
        }
    }

    /// One use of a session of this upstream by `caller`. A session bound to another
    /// caller is not found (-32043, exactly as if it did not exist, whatever `state` came
    /// with it) and not renewed; nor is a session of another upstream.
    async fn lease(&self, session: &SessionRef<'_>, caller: Caller) -> Result<Lease, ProxyError> {
        self.lease_id(&session.id, session.state.as_deref(), caller)
            .await
    }

    async fn lease_id(
        &self,
        id: &str,
        state: Option<&str>,
        caller: Caller,
    ) -> Result<Lease, ProxyError> {
        let lease = self
            .sessions
            .lease(id, state, caller)
            .await
            .map_err(|e| self.session_error(e, id))?;
        // A session of another upstream: its expiry moved (checking first would cost every
        // session a second store read), which tells a client that knows its id nothing.
        if lease.record.upstream != self.name {
            return Err(ProxyError::SessionNotFound {
                session_id: id.to_owned(),
            });
        }
        Ok(lease)
    }

    /// The client's answer to a session error. A session bound to another caller gets
    /// -32043 like an unknown one — nothing in the answer tells them apart — and is logged
    /// (hashed: the session's tag, the callers' first hash digits) and counted.
    pub(super) fn session_error(&self, error: SessionError, id: &str) -> ProxyError {
        if let SessionError::OtherCaller { bound, caller } = &error {
            self.metrics.sessions_other_caller.inc();
            tracing::info!(
                session = %log_tag(id),
                bound = ?bound,
                caller = ?caller,
                "a request named a session bound to another caller; answered as an unknown session"
            );
        }
        session_error(error, id, self.sessions.store_kind())
    }

    /// A message (a `POST`) naming session `id`, whose process-local part another replica
    /// holds, goes there as it came (`to_owner`). `None`: it is served here.
    pub(super) async fn message_to_owner(
        &self,
        id: &str,
        message: &Message<'_, '_>,
    ) -> Option<Result<Response<ProxyBody>, ProxyError>> {
        // Only sessions whose upstream lives in one process have an owner on the request
        // path (a bridged old client's session is only ever used through its lease).
        if !self.upstream.is_process_local() {
            return None;
        }
        let who = (message.caller, message.peer);
        self.to_owner(id, http::Method::POST, message.headers, message.body, who)
            .await
    }

    /// A request naming a session another replica owns goes there, as it came; `None`:
    /// it is served here. Any session, whatever its upstream: the ends of a session (its
    /// delete) go to the replica that owns it — a stdio child's, an HTTP+SSE
    /// stream's, a bridged old client's calls and subscriptions — so that what it holds
    /// there ends with it. One store read more per delete.
    async fn to_owner(
        &self,
        id: &str,
        method: http::Method,
        client_headers: &HeaderMap,
        body: &Bytes,
        (caller, client): (Caller, Option<IpAddr>),
    ) -> Option<Result<Response<ProxyBody>, ProxyError>> {
        let record = match self.sessions.peek(id).await {
            Ok(Some(record)) if record.upstream == self.name => record,
            Ok(_) => return None,
            Err(e) => return Some(Err(self.session_error(e, id))),
        };
        match self.cluster.whereabouts(record.backing.owner.as_deref()) {
            Whereabouts::There(owner) => Some(
                self.to_replica(owner, id, method, client_headers, body, (caller, client))
                    .await,
            ),
            Whereabouts::Here | Whereabouts::Gone => None,
        }
    }

    /// A leased session whose process-local part another replica holds: the request goes
    /// there, as it came, and its answer is returned. `None`: it is served here — after
    /// reinitializing (or losing) a session whose owner was an earlier run of this replica.
    async fn elsewhere(
        &self,
        lease: &mut Lease,
        session: &SessionRef<'_>,
        method: http::Method,
        client_headers: &HeaderMap,
        body: &Bytes,
        (caller, client): (Caller, Option<IpAddr>),
    ) -> Result<Option<Response<ProxyBody>>, ProxyError> {
        match self
            .cluster
            .whereabouts(lease.record.backing.owner.as_deref())
        {
            Whereabouts::Here => Ok(None),
            Whereabouts::There(owner) => {
                let who = (caller, client);
                self.to_replica(owner, &session.id, method, client_headers, body, who)
                    .await
                    .map(Some)
            }
            Whereabouts::Gone => {
                lease.record.backing =
                    Box::pin(self.lost(&session.id, &lease.record, client_headers)).await?;
                Ok(None)
            }
        }
    }

    /// The request, as it came, to `owner`, the replica holding what session `id` has
    /// in its process; its answer. Boxed: forwarding is rare, and its future large.
    async fn to_replica(
        &self,
        owner: &str,
        id: &str,
        method: http::Method,
        client_headers: &HeaderMap,
        body: &Bytes,
        (caller, client): (Caller, Option<IpAddr>),
    ) -> Result<Response<ProxyBody>, ProxyError> {
        Box::pin(self.cluster.forward(Forward {
            owner,
            path: &self.path,
            method,
            headers: client_headers,
            body: body.clone(),
            session_id: id,
            caller,
            client,
        }))
        .await
    }

    /// Whether a request may be sent again on a new upstream session: a list, read or
    /// get, or a call of a tool the upstream marked `idempotentHint`.
    pub(super) fn safe_to_repeat(&self, message: &Message<'_, '_>) -> bool {
        match message.method() {
            Some(Method::ToolsCall) => self
                .tools
                .idempotent_call(message.payload.map(|(raw, _)| raw)),
            Some(method) => method.is_safe_to_repeat(),
            None => false,
        }
    }

    /// The upstream lost session `id` (`record` is what it was). With the `fail` policy
    /// the session is forgotten and the client hears -32043. With `reinitialize`, the
    /// client's recorded `initialize` is replayed on a healthy replica and the session
    /// pointed at the new upstream session — unless another request did it first, whose
    /// upstream session is then used. Returns the route to use now.
    pub(super) async fn lost(
        &self,
        id: &str,
        record: &SessionRecord,
        client_headers: &HeaderMap,
    ) -> Result<Backing, ProxyError> {
        if self.on_session_lost == OnSessionLost::Fail {
            return Err(self.failed(UpstreamError::SessionGone, id).await);
        }
        self.upstream.forget(addr(&record.backing));
        let client = record.client.as_deref();
        let forwarded = headers::to_upstream_in_session(client_headers);
        // Owned until the record takes it: a request abandoned half-way, or beaten to it
        // by another, ends it.
        let session = self
            .upstream
            .open(
                client.and_then(|c| c.client_info.as_deref()),
                client.and_then(|c| c.capabilities.as_deref()),
                &forwarded,
            )
            .await
            .map_err(|e| upstream_error(&self.upstream, e))?;
        let backing = Backing {
            replica: session.replica(),
            upstream_session: session.id().map(Arc::from),
            negotiated: session.negotiated().clone(),
            owner: self.owner_of(&session),
        };
        let from = record.backing.upstream_session.as_deref();
        match self
            .sessions
            .reroute(id, Reroute { from, to: &backing })
            .await
        {
            Ok(true) => {
                session.keep();
                self.metrics.sessions_reinitialized.inc();
                self.forget_local(&record.backing);
                if let (Some(_), Some(key)) = (&backing.owner, backing.upstream_session.as_deref())
                {
                    self.hold_locally(id, key.to_owned());
                }
                self.upstream.label_session(addr(&backing), || log_tag(id));
                tracing::info!(session = %log_tag(id), replica = backing.replica, "upstream lost the session; reinitialized it with the client's recorded initialize");
                Ok(backing)
            }
            moved => {
                // Another request moved it first (or the store failed): this upstream
                // session is not needed, and ends as it drops.
                drop(session);
                moved.map_err(|e| self.session_error(e, id))?;
                let current = self
                    .sessions
                    .peek(id)
                    .await
                    .map_err(|e| self.session_error(e, id))?;
                current
                    .map(|record| record.backing)
                    .ok_or_else(|| ProxyError::SessionNotFound {
                        session_id: id.to_owned(),
                    })
            }
        }
    }

    /// This replica, when `session` lives in this process (a stdio child, an HTTP+SSE
    /// session's stream).
    fn owner_of(&self, session: &UpstreamSession) -> Option<Arc<str>> {
        session
            .is_process_local()
            .then(|| self.cluster.me().clone())
    }

    /// Notes a use of a session whose upstream session lives here.
    fn used_locally(&self, route: &Backing) {
        if route.owner.is_none() {
            return;
        }
        if let Some(key) = route.upstream_session.as_deref()
            && let Some(local) = self.local.get(key)
        {
            local.last_use.store(now_millis(), Ordering::Release);
        }
    }

    /// Remembers a session whose upstream session (`key`) lives here.
    fn hold_locally(&self, id: &str, key: String) {
        self.local.insert(
            key,
            Local {
                session_id: id.to_owned(),
                last_use: Arc::new(AtomicU64::new(now_millis())),
            },
        );
    }

    fn forget_local(&self, route: &Backing) {
        if route.owner.is_none() {
            return;
        }
        if let Some(key) = route.upstream_session.as_deref() {
            self.local.remove(key);
        }
    }

    /// An upstream failure in session `id`: a lost upstream session makes the proxy
    /// forget the session (-32043 for the client); anything else is the upstream's error.
    async fn failed(&self, error: UpstreamError, id: &str) -> ProxyError {
        match error {
            UpstreamError::SessionGone => {
                self.bridge.forget(id);
                match self.sessions.end(id).await {
                    Ok(Some(record)) => {
                        self.forget_local(&record.backing);
                        self.upstream.forget(addr(&record.backing));
                        self.metrics.sessions_lost.inc();
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "could not forget a session its upstream lost")
                    }
                }
                tracing::info!(session = %log_tag(id), "upstream lost the session; the client must create a new one");
                ProxyError::SessionNotFound {
                    session_id: id.to_owned(),
                }
            }
            source => upstream_error(&self.upstream, source),
        }
    }

    /// Ends the session a client named, checking the `state` it sent; -32043 when there
    /// is no such session (or it is bound to another caller).
    async fn end_named(&self, session: &SessionRef<'_>, caller: Caller) -> Result<(), ProxyError> {
        let id = &session.id;
        // A session of another upstream, or bound to another caller, is not found here.
        self.check_caller(id, caller).await?;
        if let Some(state) = &session.state {
            self.sessions
                .check_state(id, state, caller)
                .await
                .map_err(|e| self.session_error(e, id))?;
        }
        if self.end(id).await?.is_none() {
            return Err(ProxyError::SessionNotFound {
                session_id: id.to_string(),
            });
        }
        tracing::info!(session = %log_tag(id), "session deleted");
        Ok(())
    }

    /// `open` for a client's `initialize` (`era`: an old client's, or SEP-1364's): the
    /// upstream is initialized with the client's own `clientInfo` and `capabilities`.
    async fn open_initialized(
        &self,
        message: &Message<'_, '_>,
        era: ClientEra,
    ) -> Result<Issued, ProxyError> {
        let params = message.params();
        let client_info = params.and_then(|p| p.member("clientInfo"));
        let capabilities = params.and_then(|p| p.member("capabilities"));
        self.open(Opening::of(message, era, client_info, capabilities))
            .await
    }

    /// Opens an upstream session for the caller of the opening, in a place taken now
    /// under the caps (its own and the proxy's), and records a session for it; counts the
    /// outcome.
    async fn open(&self, opening: Opening<'_>) -> Result<Issued, ProxyError> {
        self.open_in(Reservation::For(opening.counted_as), opening)
            .await
    }

    /// `open`, in a place already taken (`Sessions::reserve_for` when the session is bound
    /// to a caller), or one taken now for a caller (`Sessions::reserve`).
    async fn open_in(
        &self,
        place: Reservation<'_>,
        opening: Opening<'_>,
    ) -> Result<Issued, ProxyError> {
        let Opening {
            client_headers,
            caller,
            client_info,
            capabilities,
            client_era,
            ..
        } = opening;
        let opened = async {
            for (key, value) in [
                (meta::CLIENT_INFO, client_info),
                (meta::CLIENT_CAPABILITIES, capabilities),
            ] {
                if value.is_some_and(|v| !v.get().starts_with('{')) {
                    return Err(ProxyError::NotAnObject { key });
                }
            }
            let slot = match place {
                Reservation::Taken(slot) => slot,
                Reservation::For(who) => self
                    .sessions
                    .reserve(who)
                    .map_err(|e| self.session_error(e, ""))?,
            };
            let forwarded = headers::to_upstream_in_session(client_headers);
            // Owned from the moment the upstream has it: until the record takes it, the
            // upstream session is ended if anything goes wrong — including the client
            // leaving, which drops this future.
            let session = self
                .upstream
                .open(client_info, capabilities, &forwarded)
                .await
                .map_err(|e| upstream_error(&self.upstream, e))?;
            // The client's identity is kept where it may be replayed, and where every
            // request carries it (a modern upstream has no session to remember it).
            let keep_identity = self.on_session_lost == OnSessionLost::Reinitialize
                || session.negotiated().is_modern();
            let owner = self.owner_of(&session);
            let client = keep_identity.then(|| {
                Arc::new(ClientIdentity {
                    client_info: client_info.map(ToOwned::to_owned),
                    capabilities: capabilities.map(ToOwned::to_owned),
                })
            });
            let issued = self
                .sessions
                .admit(
                    slot,
                    NewSession {
                        upstream: self.name.clone(),
                        replica: session.replica(),
                        upstream_session: session.id().map(Arc::from),
                        negotiated: session.negotiated().clone(),
                        // A bridged session's calls live here. A data-layer session of a
                        // modern upstream has no owner: the server holds nothing for it,
                        // so any replica serves it (its log level and subscriptions are
                        // kept by the replica that was told them).
                        owner: match client_era.is_legacy() && session.negotiated().is_modern() {
                            true => Some(self.cluster.me().clone()),
                            false => owner.clone(),
                        },
                        client_era,
                        client,
                        caller,
                    },
                )
                .await
                .map_err(|e| self.session_error(e, ""))?;
            // The record holds it now: its delete, expiry or loss ends it.
            self.upstream
                .label_session(session.addr(), || log_tag(&issued.id));
            let kept = session.keep();
            if let (Some(_), Some(key)) = (owner, kept.id) {
                self.hold_locally(&issued.id, key.to_string());
            }
            Ok(issued)
        }
        .await;
        match &opened {
            Ok(issued) => {
                self.metrics.sessions_created.inc();
                record_session(&issued.id);
                tracing::info!("session created");
            }
            Err(e) => {
                self.metrics.rejected(rejection(e));
                if let ProxyError::CallerLimit(refused) = e {
                    self.metrics.caller_refused(refused);
                    tracing::info!(
                        limit = refused.key(),
                        max = refused.max(),
                        "session refused: over a per-caller limit"
                    );
                }
            }
        }
        opened
    }

    /// What ends the upstream session `backing` names.
    fn ending(&self, backing: &Backing) -> Ending {
        Ending::new(
            &self.upstream,
            backing.replica,
            backing.upstream_session.as_deref(),
            backing.negotiated.protocol_version,
        )
    }
}

/// Where a new session's place under the caps comes from.
enum Reservation<'a> {
    /// Taken already.
    Taken(Slot<'a>),
    /// To take, for this caller (`None`: nobody's to count).
    For(Option<CallerKey>),
}

/// What a new session is opened with: the client's request, and who it is bound to.
struct Opening<'a> {
    client_headers: &'a HeaderMap,
    caller: Caller,
    /// Whom the per-caller limits count it against (`None`: nobody's to count).
    counted_as: Option<CallerKey>,
    client_info: Option<&'a RawValue>,
    capabilities: Option<&'a RawValue>,
    /// What the client speaks; an old client's `initialize` ([`ClientEra::Legacy`]): its
    /// answers carry no session `_meta`.
    client_era: ClientEra,
}

impl<'a> Opening<'a> {
    fn of(
        message: &Message<'a, '_>,
        client_era: ClientEra,
        client_info: Option<&'a RawValue>,
        capabilities: Option<&'a RawValue>,
    ) -> Self {
        Opening {
            client_headers: message.headers,
            caller: message.caller,
            counted_as: message.caller_key(),
            client_info,
            capabilities,
            client_era,
        }
    }
}

/// Why a create failed, for `sessions_rejected_total`.
pub fn rejection(error: &ProxyError) -> Rejection {
    match error {
        ProxyError::SessionLimit { .. } => Rejection::Limit,
        ProxyError::CallerLimit(_) => Rejection::CallerLimit,
        ProxyError::Upstream { .. } => Rejection::Upstream,
        ProxyError::Store { .. } => Rejection::Store,
        _ => Rejection::Invalid,
    }
}

fn session_error(error: SessionError, id: &str, store: &'static str) -> ProxyError {
    match error {
        SessionError::NotFound | SessionError::OtherCaller { .. } => ProxyError::SessionNotFound {
            session_id: id.to_owned(),
        },
        SessionError::BadState => ProxyError::BadSessionState {
            session_id: id.to_owned(),
        },
        SessionError::Full { max } => ProxyError::SessionLimit { max },
        SessionError::Caller(refused) => ProxyError::CallerLimit(refused),
        SessionError::Store(source) => ProxyError::Store { store, source },
    }
}

pub fn upstream_error(upstream: &Upstream, source: UpstreamError) -> ProxyError {
    ProxyError::Upstream {
        upstream: upstream.label().to_string(),
        source,
    }
}

/// The protocol version an `initialize` asks for.
fn requested_version<'m>(message: &'m Message<'_, '_>) -> Option<&'m str> {
    let raw = message.params()?.member("protocolVersion")?;
    raw.get().strip_prefix('"')?.strip_suffix('"')
}

/// Whether a session is an old client's of a modern upstream, served by the bridge.
fn is_bridged(record: &SessionRecord) -> bool {
    record.client_era.is_legacy() && record.backing.negotiated.is_modern()
}

/// What a session knows of its client, for a modern upstream's requests.
fn frame_of(record: &SessionRecord, log_level: Option<LogLevel>) -> Frame<'_> {
    let client = record.client.as_deref();
    Frame {
        client_info: client.and_then(|c| c.client_info.as_deref()),
        capabilities: client.and_then(|c| c.capabilities.as_deref()),
        log_level,
    }
}

/// What the answer to request `request_id` (raw) in session `id` carries: the session as
/// `lease` renewed it (in `_meta`), nothing else.
pub(super) fn session_stamp(id: &str, lease: &Lease, request_id: Bytes) -> Stamp {
    let mut expires = [0; 32];
    let expires = rfc3339_in(&mut expires, lease.expires_at);
    Stamp {
        request_id,
        session: Bytes::from(meta::session_stamp(id, &lease.state, &expires)),
        top_level: None,
        complete: false,
    }
}

/// A 200 JSON answer with the session's `Mcp-Session-Id`.
fn ok_in_session(body: Bytes, id: &str) -> Response<ProxyBody> {
    with_session(response::json(StatusCode::OK, body), id)
}

pub(super) fn with_session(mut response: Response<ProxyBody>, id: &str) -> Response<ProxyBody> {
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(MCP_SESSION_ID.clone(), value);
    }
    response
}

/// [`with_session`] for the answer to `message`, which named session `id`: the value is
/// the bytes the client sent the id in (the body's `_meta`, or its own `Mcp-Session-Id`)
/// when `id` is one of them, shared rather than copied. (That keeps the bytes read no
/// longer than the relay does: it holds the request's id, a slice of the same body.)
fn with_session_sent(
    mut response: Response<ProxyBody>,
    message: &Message<'_, '_>,
    id: &str,
) -> Response<ProxyBody> {
    let sent = match wire::span(message.body, id.as_bytes()) {
        Some(range) => HeaderValue::from_maybe_shared(message.body.slice(range)).ok(),
        None => message
            .headers
            .get(&MCP_SESSION_ID)
            .filter(|value| value.as_bytes() == id.as_bytes())
            .cloned(),
    };
    match sent {
        Some(value) => {
            response.headers_mut().insert(MCP_SESSION_ID.clone(), value);
            response
        }
        None => with_session(response, id),
    }
}

/// A string as a JSON string literal.
fn json_string(s: &str) -> Bytes {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_json_str(&mut out, s);
    Bytes::from(out)
}

/// A raw value of `body` as a slice of it (no copy when it was parsed from it).
pub fn raw_bytes(body: &Bytes, raw: &RawValue) -> Bytes {
    range_in(body, raw)
        .map(|r| body.slice(r))
        .unwrap_or_else(|| Bytes::copy_from_slice(raw.get().as_bytes()))
}

/// Names session `id` (by its tag) in the request's span — unless the span records
/// nothing (its level is off): the tag is a hash, not worth computing for no one.
fn record_session(id: &str) {
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("session", log_tag(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::Envelope;
    use crate::mcp::headers::Accepts;

    /// The answer's `Mcp-Session-Id` for a message of `body` and `headers` naming `id`.
    fn answered_with(body: &Bytes, headers: &HeaderMap, id: &str) -> Option<HeaderValue> {
        let envelope = Envelope::parse(body).unwrap();
        let message = Message {
            headers,
            caller: Caller::ANONYMOUS,
            body,
            envelope: &envelope,
            payload: None,
            accepts: Accepts {
                json: true,
                sse: false,
            },
            peer: None,
        };
        let response = with_session_sent(response::status(StatusCode::OK), &message, id);
        response.headers().get(&MCP_SESSION_ID).cloned()
    }

    #[test]
    fn the_answer_names_the_session_as_the_client_sent_it_wherever_the_id_came_from() {
        let body = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"mcps_in_body"}}}}"#);
        let at = body.windows(12).position(|w| w == b"mcps_in_body").unwrap();
        let in_body = std::str::from_utf8(&body[at..at + 12]).unwrap();
        let none = HeaderMap::new();
        let answered = answered_with(&body, &none, in_body).unwrap();
        assert_eq!(answered, "mcps_in_body");
        assert_eq!(
            answered.as_bytes().as_ptr(),
            in_body.as_ptr(),
            "the body's bytes"
        );

        let mut sent = HeaderMap::new();
        sent.insert(
            MCP_SESSION_ID.clone(),
            HeaderValue::from_static("mcps_header"),
        );
        let answered = answered_with(&body, &sent, "mcps_header").unwrap();
        assert_eq!(answered, "mcps_header");
        let header = sent[&MCP_SESSION_ID].as_bytes().as_ptr();
        assert_eq!(answered.as_bytes().as_ptr(), header, "the client's header");
        // An id that is neither (a key written with escapes, decoded): made of its text.
        assert_eq!(
            answered_with(&body, &sent, "mcps_other").unwrap(),
            "mcps_other"
        );
        assert_eq!(
            answered_with(&body, &none, "mcps_other").unwrap(),
            "mcps_other"
        );
        // No header value can hold it: no header, as before.
        assert_eq!(answered_with(&body, &none, "bad\nid"), None);
    }
}
