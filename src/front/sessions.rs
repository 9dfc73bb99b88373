//! The data-layer session routes (seed 000): `sessions/create`, `sessions/delete`, and
//! every message that names a session, relayed to that session's own upstream connection.

use std::borrow::Cow;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;

use super::App;
use super::body::ProxyBody;
use super::checks::Accepts;
use super::headers;
use super::respond;
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, RawObject, write_json_str};
use crate::mcp::headers::MCP_SESSION_ID;
use crate::mcp::initialize::Negotiated;
use crate::mcp::meta::{self, Payload};
use crate::metrics::Rejection;
use crate::session::{Issued, Lease, SessionError, rfc3339};
use crate::upstream::{Binding, UpstreamError};

/// The session a message names, from `_meta` or from the `Mcp-Session-Id` header.
#[derive(Debug, Clone)]
pub struct SessionRef<'a> {
    pub id: Cow<'a, str>,
    pub state: Option<Cow<'a, str>>,
}

impl App {
    fn session_error(&self, error: SessionError, id: &str) -> ProxyError {
        match error {
            SessionError::NotFound => ProxyError::SessionNotFound {
                session_id: id.to_owned(),
            },
            SessionError::BadState => ProxyError::BadSessionState {
                session_id: id.to_owned(),
            },
            SessionError::Full { max } => ProxyError::SessionLimit { max },
            SessionError::Store(e) => ProxyError::Store(e),
        }
    }

    pub(super) fn upstream_error(&self, source: UpstreamError) -> ProxyError {
        ProxyError::Upstream {
            upstream: self.upstream.label().to_string(),
            source,
        }
    }

    pub(super) async fn lease(&self, session: &SessionRef<'_>) -> Result<Lease, ProxyError> {
        self.sessions
            .lease(&session.id, session.state.as_deref())
            .await
            .map_err(|e| self.session_error(e, &session.id))
    }

    /// A lease's upstream connection is gone: forget the session so the client is told
    /// -32043 and starts a new one, never attached to some other upstream session.
    pub(super) async fn upstream_lost(&self, id: &str) -> ProxyError {
        match self.sessions.end(id).await {
            Ok(Some(_)) => {
                self.metrics.sessions_lost.inc();
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not forget a session its upstream lost"),
        }
        tracing::info!(session = %short(id), "upstream lost the session; the client must create a new one");
        ProxyError::SessionNotFound {
            session_id: id.to_owned(),
        }
    }
}

pub(super) fn binding(lease: &Lease) -> Binding<'_> {
    Binding {
        session_id: lease.record.upstream_session.as_deref(),
        protocol_version: lease.record.negotiated.protocol_version,
    }
}

/// A short, non-reversible tag of a sessionId for logs and the admin API (neither may
/// show a usable sessionId): 64 bits of its SHA-256, in hex.
pub fn short(id: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(id.as_bytes());
    let mut out = String::with_capacity(16);
    for b in &digest[..8] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// One client message as the routes see it.
#[derive(Debug, Clone, Copy)]
pub struct Message<'m, 'b> {
    pub headers: &'m HeaderMap,
    /// The body as received.
    pub body: &'m Bytes,
    pub envelope: &'m Envelope<'b>,
    /// `params` (or a response's `result`), raw and opened.
    pub payload: Option<(&'b RawValue, &'m Payload<'b>)>,
    pub dialect: Dialect,
    pub accepts: Accepts,
}

/// How a client asked for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Seed 000: `sessions/create`, session in `_meta`.
    DataLayer,
    /// SEP-1364: a top-level `sessionId`, `params.capabilities` on `sessions/create`,
    /// `initialize` carrying a `sessionId`, `terminate`.
    Sep1364,
}

/// `sessions/create`: open an upstream connection, then record the session. The
/// client's identity and capabilities come from the request's `_meta` (or, in SEP-1364's
/// shape, from `params.capabilities`).
pub async fn create(
    app: &App,
    client_headers: &HeaderMap,
    id: &RawValue,
    payload: Option<&Payload<'_>>,
    dialect: Dialect,
    modern: bool,
) -> Result<Response<ProxyBody>, ProxyError> {
    if payload.and_then(|p| p.meta(meta::SESSION)).is_some() {
        app.metrics.rejected(Rejection::Invalid);
        return Err(ProxyError::CreateInSession);
    }
    let client_info = payload.and_then(|p| p.meta(meta::CLIENT_INFO));
    let capabilities = payload
        .and_then(|p| p.meta(meta::CLIENT_CAPABILITIES))
        .or_else(|| payload.and_then(|p| p.member("capabilities")));
    let issued = open_session(app, client_headers, client_info, capabilities, false).await?;

    let mut body = Vec::with_capacity(256);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.get().as_bytes());
    if dialect == Dialect::Sep1364 {
        body.extend_from_slice(br#","sessionId":"#);
        write_json_str(&mut body, &issued.id);
        body.extend_from_slice(br#","result":{"sessionId":"#);
        write_json_str(&mut body, &issued.id);
        body.extend_from_slice(br#","session":{"sessionId":"#);
    } else {
        body.extend_from_slice(br#","result":{"session":{"sessionId":"#);
    }
    write_json_str(&mut body, &issued.id);
    body.extend_from_slice(br#","expiresAt":"#);
    write_json_str(&mut body, &rfc3339(issued.expires_at));
    body.extend_from_slice(br#","state":"#);
    write_json_str(&mut body, &issued.state);
    body.extend_from_slice(b"}");
    if modern {
        body.extend_from_slice(br#","resultType":"complete""#);
    }
    body.extend_from_slice(b"}}");
    Ok(with_session_header(
        respond::json(StatusCode::OK, Bytes::from(body)),
        &issued.id,
    ))
}

/// SEP-1364 alternative 2: `initialize` carrying a top-level `sessionId`. `null` opens a
/// new session (the upstream is initialized with the client's own clientInfo and
/// capabilities); a known id answers again for that session. The result is the
/// upstream's `InitializeResult` with `sessions: {required: false}` added.
pub async fn initialize(
    app: &App,
    client_headers: &HeaderMap,
    id: &RawValue,
    params: Option<&Payload<'_>>,
    session: Option<&SessionRef<'_>>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let (session_id, negotiated) = match session {
        None => {
            let client_info = params.and_then(|p| p.member("clientInfo"));
            let capabilities = params.and_then(|p| p.member("capabilities"));
            let issued =
                open_session(app, client_headers, client_info, capabilities, false).await?;
            (issued.id, issued.negotiated)
        }
        Some(session) => {
            let lease = app.lease(session).await?;
            (session.id.to_string(), lease.record.negotiated)
        }
    };
    let mut body = Vec::with_capacity(512);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.get().as_bytes());
    body.extend_from_slice(br#","sessionId":"#);
    write_json_str(&mut body, &session_id);
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(&initialize_result(
        &negotiated,
        Some(br#"{"required":false}"#),
    ));
    body.push(b'}');
    Ok(with_session_header(
        respond::json(StatusCode::OK, Bytes::from(body)),
        &session_id,
    ))
}

/// A legacy client's `initialize` when the proxy is its transport (a stdio upstream has
/// no Streamable HTTP of its own): a child is opened with the client's own clientInfo and
/// capabilities, and the answer is the child's `InitializeResult` with the proxy's
/// `Mcp-Session-Id`, as a 2025-11-25 server would give them.
pub async fn initialize_legacy(
    app: &App,
    client_headers: &HeaderMap,
    id: &RawValue,
    params: Option<&Payload<'_>>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let client_info = params.and_then(|p| p.member("clientInfo"));
    let capabilities = params.and_then(|p| p.member("capabilities"));
    let issued = open_session(app, client_headers, client_info, capabilities, true).await?;
    let mut body = Vec::with_capacity(512);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.get().as_bytes());
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(&initialize_result(&issued.negotiated, None));
    body.push(b'}');
    Ok(with_session_header(
        respond::json(StatusCode::OK, Bytes::from(body)),
        &issued.id,
    ))
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

fn with_session_header(mut response: Response<ProxyBody>, id: &str) -> Response<ProxyBody> {
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(MCP_SESSION_ID.clone(), value);
    }
    response
}

/// Opens an upstream connection and records a session for it; counts the outcome.
async fn open_session(
    app: &App,
    client_headers: &HeaderMap,
    client_info: Option<&RawValue>,
    capabilities: Option<&RawValue>,
    legacy: bool,
) -> Result<Issued, ProxyError> {
    let opened = admit_new(app, client_headers, client_info, capabilities, legacy).await;
    match &opened {
        Ok(issued) => {
            app.metrics.sessions_created.inc();
            tracing::Span::current().record("session", short(&issued.id));
            tracing::info!("session created");
        }
        Err(e) => app.metrics.rejected(match e {
            ProxyError::SessionLimit { .. } => Rejection::Limit,
            ProxyError::Upstream { .. } => Rejection::Upstream,
            ProxyError::Store(_) => Rejection::Store,
            _ => Rejection::Invalid,
        }),
    }
    opened
}

async fn admit_new(
    app: &App,
    client_headers: &HeaderMap,
    client_info: Option<&RawValue>,
    capabilities: Option<&RawValue>,
    legacy: bool,
) -> Result<Issued, ProxyError> {
    for (key, value) in [
        (meta::CLIENT_INFO, client_info),
        (meta::CLIENT_CAPABILITIES, capabilities),
    ] {
        if value.is_some_and(|v| !v.get().starts_with('{')) {
            return Err(ProxyError::NotAnObject { key });
        }
    }
    let slot = app
        .sessions
        .reserve()
        .map_err(|e| app.session_error(e, ""))?;
    let forwarded = headers::to_upstream_in_session(client_headers);
    let opened = app
        .upstream
        .open(client_info, capabilities, &forwarded)
        .await
        .map_err(|e| app.upstream_error(e))?;
    // Until the session is recorded, the upstream connection is ended if anything goes
    // wrong — including the client leaving, which drops this future.
    let mut unadmitted = EndUnlessAdmitted {
        app,
        session_id: opened.session_id.clone(),
        protocol_version: opened.negotiated.protocol_version,
    };
    let issued = app
        .sessions
        .admit(slot, opened.session_id, opened.negotiated, legacy)
        .await
        .map_err(|e| app.session_error(e, ""))?;
    let session_id = unadmitted.session_id.take();
    app.upstream.label_session(
        Binding {
            session_id: session_id.as_deref(),
            protocol_version: unadmitted.protocol_version,
        },
        short(&issued.id),
    );
    Ok(issued)
}

/// Ends an upstream connection on drop unless a session took it.
struct EndUnlessAdmitted<'a> {
    app: &'a App,
    session_id: Option<String>,
    protocol_version: &'static str,
}

impl Drop for EndUnlessAdmitted<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.session_id.take() {
            self.app
                .end_upstream(Some(id.into()), self.protocol_version);
        }
    }
}

/// Ends a session here and upstream; -32043 when there is no such session.
async fn end(app: &App, session: &SessionRef<'_>) -> Result<(), ProxyError> {
    let id = &session.id;
    if let Some(state) = &session.state {
        app.sessions
            .check_state(id, state)
            .await
            .map_err(|e| app.session_error(e, id))?;
    }
    let record = app
        .sessions
        .end(id)
        .await
        .map_err(|e| app.session_error(e, id))?
        .ok_or_else(|| ProxyError::SessionNotFound {
            session_id: id.to_string(),
        })?;
    let binding = Binding {
        session_id: record.upstream_session.as_deref(),
        protocol_version: record.negotiated.protocol_version,
    };
    // Waited for, so that when the client hears `{}` the upstream session is gone; a
    // failure is logged, not returned: the mapping is gone either way.
    if let Err(e) = app.upstream.terminate(binding).await {
        tracing::warn!(session = %short(id), error = %e, "upstream did not end the session");
    }
    app.metrics.sessions_deleted.inc();
    tracing::info!(session = %short(id), "session deleted");
    Ok(())
}

/// `sessions/delete`: `{}` once the session is gone here and upstream.
pub async fn delete(
    app: &App,
    id: &RawValue,
    session: &SessionRef<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    end(app, session).await?;
    let mut body = Vec::with_capacity(64);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.get().as_bytes());
    body.extend_from_slice(br#","result":{}}"#);
    Ok(respond::json(StatusCode::OK, Bytes::from(body)))
}

/// HTTP `DELETE` with a data-layer `Mcp-Session-Id`: the transport-level way to end the
/// same session (2025-11-25 "Session Management" §5), answered 204.
pub async fn delete_by_header(
    app: &App,
    session: &SessionRef<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    end(app, session).await?;
    Ok(respond::status(StatusCode::NO_CONTENT))
}
