//! Data-layer sessions (the data-layer sessions draft; SEP-1364's dialect; old clients of
//! a stdio server): `sessions/create` opens an upstream session of its own and records
//! it; every message naming the session is relayed on that upstream session with the
//! session `_meta` taken off, and its answer comes back stamped; `sessions/delete`,
//! expiry and shutdown end the upstream session too.
//!
//! A session enters the store only once its upstream handshake succeeded; an upstream
//! session opened for a create that then fails (the store, the client leaving) is ended.
//! An upstream that lost a session makes the proxy forget it: the client hears -32043
//! and starts over, never attached to another upstream session behind its back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;

use super::headers;
use super::relay::{Relay, Request};
use crate::error::ProxyError;
use crate::jsonrpc::{Kind, RawObject, range_in, write, write_json_str};
use crate::mcp::caller::Caller;
use crate::mcp::headers::{LAST_EVENT_ID, MCP_SESSION_ID, SSE};
use crate::mcp::initialize::Negotiated;
use crate::mcp::meta;
use crate::metrics::{Metrics, Rejection};
use crate::response::{self, ProxyBody};
use crate::rewrite::to_client::Stamp;
use crate::rewrite::to_upstream::{strip_session, strip_top_level_session};
use crate::route::{Dialect, Message, SessionRef};
use crate::session::{
    Issued, Lease, SessionError, SessionRecord, Sessions, Slot, log_tag, rfc3339,
};
use crate::upstream::{Binding, Messages, Upstream, UpstreamError};

/// Idle limit of a session's listen stream (its client ends it by disconnecting).
const LISTEN_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

/// Upstream sessions ended at once at shutdown.
const ENDING_AT_ONCE: usize = 64;

/// See the module documentation.
#[derive(Debug)]
pub struct SessionPath {
    upstream: Upstream,
    sessions: Arc<Sessions>,
    metrics: Arc<Metrics>,
    /// An upstream event stream silent this long is ended.
    sse_idle_timeout: Duration,
}

/// The upstream session a session record names.
pub fn binding(record: &SessionRecord) -> Binding<'_> {
    Binding {
        session_id: record.upstream_session.as_deref(),
        protocol_version: record.negotiated.protocol_version,
    }
}

impl SessionPath {
    pub fn new(
        upstream: Upstream,
        sessions: Arc<Sessions>,
        metrics: Arc<Metrics>,
        sse_idle_timeout: Duration,
    ) -> Self {
        SessionPath {
            upstream,
            sessions,
            metrics,
            sse_idle_timeout,
        }
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    // === the routes ===

    /// `sessions/create`: open an upstream session, then record the session. The
    /// client's identity and capabilities come from the request's `_meta` (or, in
    /// SEP-1364's shape, from `params.capabilities`).
    pub async fn create(
        &self,
        message: &Message<'_, '_>,
        id: &RawValue,
        dialect: Dialect,
        modern: bool,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let params = message.params();
        let client_info = params.and_then(|p| p.meta(meta::CLIENT_INFO));
        let capabilities = params
            .and_then(|p| p.meta(meta::CLIENT_CAPABILITIES))
            .or_else(|| params.and_then(|p| p.member("capabilities")));
        let issued = self
            .open(message.headers, client_info, capabilities, false)
            .await?;
        let mut session = Vec::with_capacity(256);
        session.extend_from_slice(br#"{"sessionId":"#);
        write_json_str(&mut session, &issued.id);
        session.extend_from_slice(br#","expiresAt":"#);
        write_json_str(&mut session, &rfc3339(issued.expires_at));
        session.extend_from_slice(br#","state":"#);
        write_json_str(&mut session, &issued.state);
        session.push(b'}');
        let mut result = Vec::with_capacity(session.len() + 96);
        result.push(b'{');
        if dialect == Dialect::Sep1364 {
            // SEP-1364 alternative 1 answers `result.sessionId`; the draft's `session` too.
            result.extend_from_slice(br#""sessionId":"#);
            write_json_str(&mut result, &issued.id);
            result.push(b',');
        }
        result.extend_from_slice(br#""session":"#);
        result.extend_from_slice(&session);
        if modern {
            result.extend_from_slice(br#","resultType":"complete""#);
        }
        result.push(b'}');
        let body = self.answer(id, dialect, &issued.id, &result);
        Ok(with_session(
            response::json(StatusCode::OK, body),
            &issued.id,
        ))
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
        let params = message.params();
        let (session_id, negotiated) = match session {
            None => {
                let client_info = params.and_then(|p| p.member("clientInfo"));
                let capabilities = params.and_then(|p| p.member("capabilities"));
                let issued = self
                    .open(message.headers, client_info, capabilities, false)
                    .await?;
                (issued.id, issued.negotiated)
            }
            Some(session) => {
                let lease = self.lease(session, message.headers).await?;
                (session.id.to_string(), lease.record.negotiated)
            }
        };
        let result = initialize_result(&negotiated, Some(br#"{"required":false}"#));
        let body = self.answer(id, Dialect::Sep1364, &session_id, &result);
        Ok(with_session(
            response::json(StatusCode::OK, body),
            &session_id,
        ))
    }

    /// An old client's `initialize` when the proxy is its transport (a stdio upstream
    /// has no Streamable HTTP of its own): an upstream session is opened with the
    /// client's own clientInfo and capabilities, and the answer is its `InitializeResult`
    /// with the proxy's `Mcp-Session-Id`, as a 2025-11-25 server would give them.
    pub async fn initialize_legacy(
        &self,
        message: &Message<'_, '_>,
        id: &RawValue,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let params = message.params();
        let client_info = params.and_then(|p| p.member("clientInfo"));
        let capabilities = params.and_then(|p| p.member("capabilities"));
        let issued = self
            .open(message.headers, client_info, capabilities, true)
            .await?;
        let result = initialize_result(&issued.negotiated, None);
        let body = write::result(id.get().as_bytes(), &result);
        Ok(with_session(
            response::json(StatusCode::OK, body),
            &issued.id,
        ))
    }

    /// `sessions/delete` (or SEP-1364's `session/delete` / `terminate`): `{}` once the
    /// session is gone here and upstream.
    pub async fn delete(
        &self,
        id: &RawValue,
        session: &SessionRef<'_>,
        client_headers: &HeaderMap,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        self.end_named(session, client_headers).await?;
        Ok(response::json(
            StatusCode::OK,
            write::result(id.get().as_bytes(), b"{}"),
        ))
    }

    /// HTTP `DELETE` with a data-layer `Mcp-Session-Id`: the transport-level way to end
    /// the same session (2025-11-25 "Session Management"), answered 204.
    pub async fn end_by_header(
        &self,
        session: &SessionRef<'_>,
        client_headers: &HeaderMap,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        self.end_named(session, client_headers).await?;
        Ok(response::status(StatusCode::NO_CONTENT))
    }

    /// Any message in a session but the create and the delete: relayed on the session's
    /// upstream session, its answer stamped.
    pub async fn forward(
        &self,
        message: &Message<'_, '_>,
        session: &SessionRef<'_>,
        dialect: Dialect,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        tracing::Span::current().record("session", log_tag(&session.id));
        let lease = self.lease(session, message.headers).await?;
        let body = message.body;
        let mut upstream_body = match message.payload {
            Some((raw, payload)) => strip_session(body, raw, payload),
            None => body.clone(),
        };
        if dialect == Dialect::Sep1364 {
            upstream_body = strip_top_level_session(upstream_body);
        }
        let forwarded = headers::to_upstream_in_session(message.headers);
        let exchanged = self
            .upstream
            .exchange(binding(&lease.record), upstream_body, &forwarded)
            .await;
        let answer = match exchanged {
            Ok(answer) => answer,
            Err(e) => return Err(self.failed(e, &session.id).await),
        };
        let envelope = message.envelope;
        let request_id = envelope
            .id
            .filter(|_| envelope.kind == Kind::Request)
            .map(|id| raw_bytes(body, id));
        // Sessions that an old client opened with `initialize` (stdio upstreams) get
        // their answers as a legacy server would give them: no session `_meta`.
        let stamp = match (&request_id, lease.record.legacy) {
            (Some(id), false) => Some(Stamp {
                request_id: id.clone(),
                session: Bytes::from(meta::session_stamp(
                    &session.id,
                    &lease.state,
                    &rfc3339(lease.expires_at),
                )),
                top_level: (dialect == Dialect::Sep1364).then(|| json_string(&session.id)),
                complete: message
                    .params()
                    .is_some_and(|p| p.meta(meta::PROTOCOL_VERSION).is_some()),
            }),
            _ => None,
        };
        let relayed = self
            .relay(self.sse_idle_timeout)
            .relay(
                answer,
                Request {
                    id: request_id,
                    accepts: message.accepts,
                    stamp,
                },
            )
            .await?;
        Ok(with_session(relayed, &session.id))
    }

    /// `GET` with a data-layer `Mcp-Session-Id`: the session's upstream stream of server
    /// messages not tied to a client request (the GET stream over HTTP, the unclaimed
    /// messages of a stdio child), passed on as it is.
    pub async fn listen(
        &self,
        client_headers: &HeaderMap,
        session: &SessionRef<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let lease = self.lease(session, client_headers).await?;
        let mut forwarded = headers::to_upstream_in_session(client_headers);
        if let Some(last) = client_headers.get(&LAST_EVENT_ID) {
            forwarded.insert(LAST_EVENT_ID.clone(), last.clone());
        }
        forwarded.insert(http::header::ACCEPT, HeaderValue::from_static(SSE));
        let listened = self
            .upstream
            .listen(binding(&lease.record), &forwarded)
            .await;
        let answer = match listened {
            Ok(answer) => answer,
            Err(e) => return Err(self.failed(e, &session.id).await),
        };
        let mut response = Response::new(ProxyBody::empty());
        *response.status_mut() = answer.status;
        *response.headers_mut() = headers::to_client_in_session(&answer.headers);
        let body = match answer.messages {
            // Not a stream (the upstream refused, with a JSON error): as it is.
            Messages::One(message) => message.map(ProxyBody::full).unwrap_or_default(),
            Messages::Nothing => ProxyBody::empty(),
            Messages::Opaque(body) => ProxyBody::Untouched { body, open: None },
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
            .map_err(|e| session_error(e, id))?
        else {
            return Ok(None);
        };
        // Waited for, so that when the client hears `{}` the upstream session is gone; a
        // failure is logged, not returned: the mapping is gone either way.
        if let Err(e) = self.upstream.terminate(binding(&record)).await {
            tracing::warn!(session = %log_tag(id), error = %e, "upstream did not end the session");
        }
        self.metrics.sessions_deleted.inc();
        Ok(Some(record))
    }

    /// The reaper found `record` expired: its upstream session is ended in the
    /// background.
    pub fn expired(&self, id: &str, record: SessionRecord) {
        self.metrics.sessions_expired.inc();
        tracing::info!(session = %log_tag(id), "session expired");
        self.end_upstream(record.upstream_session, record.negotiated.protocol_version);
    }

    /// A stdio child died on its own: the session it served is forgotten at once (its
    /// client gets -32043), not at its next use or expiry.
    pub async fn upstream_session_died(&self, upstream_session: &str) {
        self.upstream.forget(upstream_session);
        let sessions = match self.sessions.list(usize::MAX).await {
            Ok(sessions) => sessions,
            Err(e) => {
                tracing::warn!(error = %e, "could not look up the session of a dead stdio server");
                return;
            }
        };
        let owner = sessions
            .into_iter()
            .find(|(_, record)| record.upstream_session.as_deref() == Some(upstream_session));
        if let Some((id, _)) = owner
            && let Ok(Some(_)) = self.sessions.end(&id).await
        {
            self.metrics.sessions_lost.inc();
            tracing::info!(session = %log_tag(&id), "session ended: its stdio server died");
        }
    }

    /// Ends every session's upstream session (shutdown: sessions live in this process's
    /// memory and would be lost anyway), `ENDING_AT_ONCE` at a time, within `within`.
    pub async fn end_all(&self, within: Duration) {
        let all = match self.sessions.take_all().await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(error = %e, "could not read sessions at shutdown");
                return;
            }
        };
        let upstream = self.upstream.clone();
        let ending = async move {
            let mut ending = tokio::task::JoinSet::new();
            for (_, record) in all {
                if ending.len() >= ENDING_AT_ONCE {
                    ending.join_next().await;
                }
                let upstream = upstream.clone();
                ending.spawn(async move {
                    let _ = upstream.terminate(binding(&record)).await;
                });
            }
            while ending.join_next().await.is_some() {}
        };
        if tokio::time::timeout(within, ending).await.is_err() {
            tracing::warn!("not every upstream session could be ended at shutdown");
        }
    }

    // === session handles (the stateless path's `session_open` tool) ===

    /// Opens a session bound to a caller, in the place `slot` holds for it
    /// (`Sessions::reserve_for`): the same machinery as `sessions/create` — the upstream
    /// handshake first, then the record, idle expiry, the reaper, the admin API.
    pub async fn open_bound(
        &self,
        slot: Slot<'_>,
        client_headers: &HeaderMap,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
    ) -> Result<Issued, ProxyError> {
        self.open_in(Some(slot), client_headers, client_info, capabilities, false)
            .await
    }

    /// One use of session `id` by `caller`: renewed, or -32043 when it is unknown,
    /// expired, or bound to another caller (then it is not renewed).
    pub async fn lease_as(&self, id: &str, caller: Caller) -> Result<Lease, ProxyError> {
        self.check_owner(id, caller).await?;
        self.sessions
            .lease(id, None)
            .await
            .map_err(|e| session_error(e, id))
    }

    /// Ends session `id` for `caller`: -32043 when it is unknown or bound to another caller.
    pub async fn end_as(&self, id: &str, caller: Caller) -> Result<(), ProxyError> {
        self.check_owner(id, caller).await?;
        match self.end(id).await? {
            Some(_) => Ok(()),
            None => Err(ProxyError::SessionNotFound {
                session_id: id.to_owned(),
            }),
        }
    }

    /// The upstream lost session `id`'s upstream session: the session is forgotten.
    pub async fn lost(&self, id: &str) {
        let _ = self.failed(UpstreamError::SessionGone, id).await;
    }

    /// -32043 when session `id` is live but bound to a caller other than `caller`.
    async fn check_owner(&self, id: &str, caller: Caller) -> Result<(), ProxyError> {
        let record = self
            .sessions
            .peek(id)
            .await
            .map_err(|e| session_error(e, id))?;
        match record.and_then(|r| r.owner) {
            Some(owner) if owner != caller => Err(ProxyError::SessionNotFound {
                session_id: id.to_owned(),
            }),
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
    fn answer(&self, id: &RawValue, dialect: Dialect, session_id: &str, result: &[u8]) -> Bytes {
        let id = id.get().as_bytes();
        match dialect {
            Dialect::Sep1364 => {
                write::result_with(id, &[("sessionId", &json_string(session_id))], result)
            }
            Dialect::DataLayer => write::result(id, result),
        }
    }

    /// One use of the session a client named. A session bound to a caller (a handle) is
    /// unknown to anyone else: -32043, as if it did not exist (its expiry is renewed all
    /// the same — checking first would cost every session a second store read — which
    /// gives a caller that knows another's id nothing but that).
    async fn lease(
        &self,
        session: &SessionRef<'_>,
        client_headers: &HeaderMap,
    ) -> Result<Lease, ProxyError> {
        let lease = self
            .sessions
            .lease(&session.id, session.state.as_deref())
            .await
            .map_err(|e| session_error(e, &session.id))?;
        match lease.record.owner {
            Some(owner) if owner != Caller::of(client_headers) => {
                Err(ProxyError::SessionNotFound {
                    session_id: session.id.to_string(),
                })
            }
            _ => Ok(lease),
        }
    }

    /// An upstream failure in session `id`: a lost upstream session makes the proxy
    /// forget the session (-32043 for the client); anything else is the upstream's error.
    async fn failed(&self, error: UpstreamError, id: &str) -> ProxyError {
        match error {
            UpstreamError::SessionGone => {
                match self.sessions.end(id).await {
                    Ok(Some(_)) => {
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
    /// is no such session.
    async fn end_named(
        &self,
        session: &SessionRef<'_>,
        client_headers: &HeaderMap,
    ) -> Result<(), ProxyError> {
        let id = &session.id;
        self.check_owner(id, Caller::of(client_headers)).await?;
        if let Some(state) = &session.state {
            self.sessions
                .check_state(id, state)
                .await
                .map_err(|e| session_error(e, id))?;
        }
        if self.end(id).await?.is_none() {
            return Err(ProxyError::SessionNotFound {
                session_id: id.to_string(),
            });
        }
        tracing::info!(session = %log_tag(id), "session deleted");
        Ok(())
    }

    /// Opens an upstream session and records a session for it; counts the outcome.
    async fn open(
        &self,
        client_headers: &HeaderMap,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        legacy: bool,
    ) -> Result<Issued, ProxyError> {
        self.open_in(None, client_headers, client_info, capabilities, legacy)
            .await
    }

    /// `open`, in a place already taken (`Sessions::reserve_for` when the session is bound
    /// to a caller), or one taken now.
    async fn open_in(
        &self,
        slot: Option<Slot<'_>>,
        client_headers: &HeaderMap,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        legacy: bool,
    ) -> Result<Issued, ProxyError> {
        let opened = async {
            for (key, value) in [
                (meta::CLIENT_INFO, client_info),
                (meta::CLIENT_CAPABILITIES, capabilities),
            ] {
                if value.is_some_and(|v| !v.get().starts_with('{')) {
                    return Err(ProxyError::NotAnObject { key });
                }
            }
            let slot = match slot {
                Some(slot) => slot,
                None => self.sessions.reserve().map_err(|e| session_error(e, ""))?,
            };
            let forwarded = headers::to_upstream_in_session(client_headers);
            let opened = self
                .upstream
                .open(client_info, capabilities, &forwarded)
                .await
                .map_err(|e| upstream_error(&self.upstream, e))?;
            // Until the session is recorded, the upstream session is ended if anything goes
            // wrong — including the client leaving, which drops this future.
            let mut unadmitted = EndUnlessAdmitted {
                path: self,
                session_id: opened.session_id.clone(),
                protocol_version: opened.negotiated.protocol_version,
            };
            let issued = self
                .sessions
                .admit(slot, opened.session_id, opened.negotiated, legacy)
                .await
                .map_err(|e| session_error(e, ""))?;
            let session_id = unadmitted.session_id.take();
            self.upstream.label_session(
                Binding {
                    session_id: session_id.as_deref(),
                    protocol_version: unadmitted.protocol_version,
                },
                log_tag(&issued.id),
            );
            Ok(issued)
        }
        .await;
        match &opened {
            Ok(issued) => {
                self.metrics.sessions_created.inc();
                tracing::Span::current().record("session", log_tag(&issued.id));
                tracing::info!("session created");
            }
            Err(e) => self.metrics.rejected(rejection(e)),
        }
        opened
    }

    /// Ends an upstream session in the background.
    fn end_upstream(&self, session_id: Option<Arc<str>>, protocol_version: &'static str) {
        let Some(session_id) = session_id else { return };
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            let binding = Binding {
                session_id: Some(&session_id),
                protocol_version,
            };
            if let Err(e) = upstream.terminate(binding).await {
                tracing::warn!(error = %e, "upstream did not end a session");
            }
        });
    }
}

/// Ends an upstream session on drop unless a session took it.
struct EndUnlessAdmitted<'a> {
    path: &'a SessionPath,
    session_id: Option<String>,
    protocol_version: &'static str,
}

impl Drop for EndUnlessAdmitted<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.session_id.take() {
            self.path
                .end_upstream(Some(id.into()), self.protocol_version);
        }
    }
}

/// Why a create failed, for `sessions_rejected_total`.
pub fn rejection(error: &ProxyError) -> Rejection {
    match error {
        ProxyError::SessionLimit { .. } => Rejection::Limit,
        ProxyError::Upstream { .. } => Rejection::Upstream,
        ProxyError::Store(_) => Rejection::Store,
        _ => Rejection::Invalid,
    }
}

pub(super) fn session_error(error: SessionError, id: &str) -> ProxyError {
    match error {
        SessionError::NotFound => ProxyError::SessionNotFound {
            session_id: id.to_owned(),
        },
        SessionError::BadState => ProxyError::BadSessionState {
            session_id: id.to_owned(),
        },
        SessionError::Full { max } | SessionError::CallerFull { max } => {
            ProxyError::SessionLimit { max }
        }
        SessionError::Store(e) => ProxyError::Store(e),
    }
}

pub fn upstream_error(upstream: &Upstream, source: UpstreamError) -> ProxyError {
    ProxyError::Upstream {
        upstream: upstream.label().to_string(),
        source,
    }
}

fn with_session(mut response: Response<ProxyBody>, id: &str) -> Response<ProxyBody> {
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(MCP_SESSION_ID.clone(), value);
    }
    response
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

/// An `InitializeResult` from what the upstream negotiated, with `sessions` (when given)
/// set in its capabilities.
fn initialize_result(negotiated: &Negotiated, sessions: Option<&[u8]>) -> Vec<u8> {
    let mut capabilities = Vec::with_capacity(negotiated.capabilities.get().len() + 32);
    match (sessions, RawObject::parse(&negotiated.capabilities)) {
        (Some(sessions), Some(mut object)) => {
            object.remove("sessions");
            object.write(&mut capabilities, &[("sessions", sessions)]);
        }
        _ => capabilities.extend_from_slice(negotiated.capabilities.get().as_bytes()),
    }
    let mut out = Vec::with_capacity(capabilities.len() + 256);
    out.extend_from_slice(br#"{"protocolVersion":"#);
    write_json_str(&mut out, negotiated.protocol_version);
    out.extend_from_slice(br#","capabilities":"#);
    out.extend_from_slice(&capabilities);
    out.extend_from_slice(br#","serverInfo":"#);
    out.extend_from_slice(negotiated.server_info.get().as_bytes());
    if let Some(instructions) = &negotiated.instructions {
        out.extend_from_slice(br#","instructions":"#);
        write_json_str(&mut out, instructions);
    }
    out.push(b'}');
    out
}
