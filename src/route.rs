//! Which path a client message takes: a pure function from the message and its headers to
//! a [`Route`]. No I/O, no store: what can be decided from the message alone is decided
//! here, once; what needs the session store or the upstream is decided by the path the
//! route names.
//!
//! # Precedence
//!
//! A `POST` carries one JSON-RPC message. Its session comes from
//! `_meta["io.modelcontextprotocol/session"]`, SEP-1364's top-level `sessionId` (or, for
//! `terminate` and SEP-1364's deletes, `params.sessionId`), or a bare `Mcp-Session-Id`
//! header of the proxy's own `mcps_` shape; when several are given they must agree. Then,
//! first match wins:
//!
//! 1. `sessions/create` (a request) → [`Route::Create`], whatever era the client speaks
//!    (a 2026-07-28 client that saw `sessions: {}` in `server/discover` opens a session
//!    this way). Refused if it names a session.
//! 2. No session named, no `Mcp-Session-Id` header at all, and the message looks like the
//!    stateless protocol (`_meta` protocol version, `server/discover` /
//!    `subscriptions/listen`, or a non-stateful `MCP-Protocol-Version`): in front of a
//!    modern upstream the client and the server speak the same era →
//!    [`Route::PassThrough`], as it came; in front of any other → [`Route::Stateless`],
//!    bridged. An old connection's `Mcp-Session-Id` means legacy semantics, whatever
//!    `_meta` the message carries; a message naming a session never takes the stateless
//!    path.
//! 3. `initialize` in SEP-1364's dialect (a top-level `sessionId`, `null` or an id) →
//!    [`Route::Sep1364Initialize`].
//! 4. `initialize` naming no session, when old clients do not pass to the upstream as
//!    they are (a stdio server, an HTTP+SSE one, a modern one — unless the operator
//!    passes them to a dual server) → [`Route::LegacyInitialize`]: the proxy is the old
//!    client's transport, and its bridge to a modern server.
//! 5. A session is named:
//!    - a request that ends it (`sessions/delete`, `session/delete`, `terminate`) →
//!      [`Route::Delete`];
//!    - `notifications/initialized` → [`Route::InitializedAck`] (the proxy ran the
//!      upstream handshake itself);
//!    - a request of the 2026-07-28 tasks extension from a client speaking 2026-07-28
//!      (`tools/call`, `tasks/get`, `tasks/update`, `tasks/cancel`), in front of an
//!      upstream that is not modern → [`Route::TaskInSession`]: the proxy runs tasks for
//!      it as for a stateless client (a modern upstream runs its own: such a request is
//!      [`Route::InSession`] there, like any other);
//!    - anything else → [`Route::InSession`].
//! 6. No session named:
//!    - a request that would end one → refused (nothing to delete);
//!    - `upstream.require_session`, or an upstream old clients do not pass to →
//!      refused with -32044;
//!    - otherwise → [`Route::PassThrough`] (an old client of a server of its own era,
//!      untouched).
//!
//! The routes that serve a client in a session ([`Route::Create`], [`Route::InSession`])
//! carry what it speaks, a [`ClientEra`] read off the message here, once
//! ([`session_era`]); [`Route::Sep1364Initialize`] and [`Route::LegacyInitialize`] name
//! theirs.
//!
//! The upstream's era is part of the rules ([`RouteRules`]), read once per request (one atomic
//! load: the era is found when the upstream is first used, and again by its probes).
//!
//! `GET` and `DELETE` carry no message ([`classify_bare`]): a data-layer
//! `Mcp-Session-Id` makes them [`BareRoute::Listen`] and [`BareRoute::EndByHeader`];
//! without one they pass through (or are refused as in 6).
//!
//! Before any of this, an `Mcp-Session-Id` header that is not visible ASCII, or that is
//! sent more than once, is refused (-32600): no session, the proxy's or an upstream's,
//! can have such an id, and a request belongs to one session only.

use std::borrow::Cow;
use std::net::IpAddr;

use bytes::Bytes;
use http::HeaderMap;
use http::header::HeaderValue;
use serde_json::value::RawValue;

use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, raw_str};
use crate::mcp::caller::{Caller, CallerKey};
use crate::mcp::headers::{Accepts, MCP_SESSION_ID};
use crate::mcp::meta::{self, MetaError, Payload, SessionMeta};
use crate::mcp::{ClientEra, Method};
use crate::session::is_issued_shape;
use crate::stateless;

/// One client message as the paths see it.
#[derive(Debug, Clone, Copy)]
pub struct Message<'m, 'b> {
    pub headers: &'m HeaderMap,
    /// Who sent it (decided by the front: `auth`).
    pub caller: Caller,
    /// The body as received.
    pub body: &'m Bytes,
    pub envelope: &'m Envelope<'b>,
    /// `params` (or a response's `result`), raw and opened; `None` when absent or not an
    /// object.
    pub payload: Option<(&'b RawValue, &'m Payload<'b>)>,
    pub accepts: Accepts,
    /// The address the request came from (`None` when it is not known).
    pub peer: Option<IpAddr>,
}

impl<'m, 'b> Message<'m, 'b> {
    /// Whom the per-caller limits count this message against (`fairness`).
    pub fn caller_key(&self) -> Option<CallerKey> {
        CallerKey::of(self.caller, self.peer)
    }

    /// The opened `params` (or `result`).
    pub fn params(&self) -> Option<&'m Payload<'b>> {
        self.payload.map(|(_, payload)| payload)
    }

    /// The request's id; `None` for notifications and responses.
    pub fn request_id(&self) -> Option<&'b RawValue> {
        self.envelope
            .id
            .filter(|_| self.envelope.kind == Kind::Request)
    }

    /// The method, if the proxy knows it by name.
    pub fn method(&self) -> Option<Method> {
        Method::parse(self.envelope.method())
    }
}

/// The session a message names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRef<'a> {
    pub id: Cow<'a, str>,
    /// The `state` the client sent back, if any.
    pub state: Option<Cow<'a, str>>,
}

/// The path a message takes. See the module documentation for the precedence.
#[derive(Debug, Clone)]
pub enum Route<'a> {
    /// `sessions/create`: the proxy opens an upstream session and answers.
    Create {
        id: &'a RawValue,
        /// What the client speaks ([`session_era`]): never [`ClientEra::Legacy`].
        era: ClientEra,
    },
    /// SEP-1364 alternative 2: `initialize` opening a session (`None`) or naming one (the
    /// client speaks [`ClientEra::Sep1364`]).
    Sep1364Initialize {
        id: &'a RawValue,
        session: Option<SessionRef<'a>>,
    },
    /// An old client's `initialize` where the proxy must be its transport (stdio): the
    /// client speaks [`ClientEra::Legacy`].
    LegacyInitialize { id: &'a RawValue },
    /// The stateless protocol (2026-07-28) in front of an upstream of another era: bridged.
    Stateless,
    /// A request ending the session it names.
    Delete {
        id: &'a RawValue,
        session: SessionRef<'a>,
    },
    /// `notifications/initialized` in a session: already done upstream, answered 202.
    InitializedAck { session: SessionRef<'a> },
    /// A 2026-07-28 `tools/call` or `tasks/*` request in a session of an upstream that
    /// does not run tasks itself: the proxy runs them (a call that does not become a
    /// task is relayed like [`Route::InSession`]).
    TaskInSession { session: SessionRef<'a> },
    /// Any other message in a session, relayed on its upstream session.
    InSession {
        session: SessionRef<'a>,
        /// What the client speaks as far as the message tells ([`session_era`]); the
        /// session's record says whether it is an old client's.
        era: ClientEra,
    },
    /// No session, and the client speaks the upstream's era: passed to it untouched.
    PassThrough,
}

/// The path of a `GET` or `DELETE` of the endpoint (no message, only headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BareRoute<'a> {
    /// `GET` with a data-layer `Mcp-Session-Id`: the session's upstream stream.
    Listen { session: SessionRef<'a> },
    /// `DELETE` with a data-layer `Mcp-Session-Id`: ends the session.
    EndByHeader { session: SessionRef<'a> },
    /// No session: passed to the upstream untouched.
    PassThrough,
}

/// A request of the endpoint that carries no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    Get,
    Delete,
}

/// What classification needs to know of the upstream and the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRules {
    /// `upstream.require_session`: messages without a data-layer session are refused.
    pub require_session: bool,
    /// Old clients' messages reach the upstream as they are: a Streamable HTTP server
    /// that speaks `initialize` (a modern one only when `upstream.old_clients =
    /// "pass_through"`). Otherwise (stdio, HTTP+SSE, modern) the proxy is their
    /// transport.
    pub old_clients_pass: bool,
    /// The UPSTREAM speaks the modern protocol (2026-07-28; `upstream::Era::Modern`) and
    /// is reached over HTTP: stateless clients pass to it as they are. What the client
    /// speaks is the message's ([`ClientEra`]).
    pub modern_upstream: bool,
}

impl RouteRules {
    /// Whether a message naming no session may pass through.
    fn passes_without_session(self) -> bool {
        self.old_clients_pass && !self.require_session
    }
}

/// Decides the route of a message (`POST`). See the module documentation.
pub fn classify<'a>(
    message: &'a Message<'a, 'a>,
    rules: RouteRules,
) -> Result<Route<'a>, ProxyError> {
    classify_message(message, rules)
}

/// Decides the route of a `GET` or `DELETE` of the endpoint.
pub fn classify_bare(
    request: Bare,
    headers: &HeaderMap,
    rules: RouteRules,
) -> Result<BareRoute<'_>, ProxyError> {
    let (session, method) = (header_session(headers)?, request.as_str());
    match (session, request) {
        (Some(session), Bare::Get) => Ok(BareRoute::Listen { session }),
        (Some(session), Bare::Delete) => Ok(BareRoute::EndByHeader { session }),
        (None, _) => without_session(method, rules).map(|()| BareRoute::PassThrough),
    }
}

impl Bare {
    fn as_str(self) -> &'static str {
        match self {
            Bare::Get => "GET",
            Bare::Delete => "DELETE",
        }
    }
}

/// A message naming no session: it passes through, or is refused with -32044.
fn without_session(method: &str, rules: RouteRules) -> Result<(), ProxyError> {
    if rules.passes_without_session() {
        Ok(())
    } else {
        Err(ProxyError::SessionRequired {
            method: method.to_owned(),
        })
    }
}

fn classify_message<'a>(
    message: &'a Message<'a, 'a>,
    rules: RouteRules,
) -> Result<Route<'a>, ProxyError> {
    let envelope = message.envelope;
    let params = message.params();
    let method = message.method();
    let request_id = message.request_id();
    // SEP-1364: a top-level `sessionId` (`null` before a session exists).
    let (sep1364, top_level) = match envelope.session_id {
        None => (false, None),
        Some(raw) if raw.get() == "null" => (true, None),
        Some(raw) => match raw_str(raw) {
            Some(id) => (true, Some(id)),
            None => return Err(ProxyError::Meta(MetaError::MalformedSession)),
        },
    };
    let named = match params {
        Some(payload) => payload.session()?,
        None => None,
    };
    let ending = method.is_some_and(Method::ends_session);
    // SEP-1364 names the session to end in `params.sessionId`: always for its own
    // `session/delete` and `terminate`, and for `sessions/delete` in its dialect.
    let sep1364_end = matches!(method, Some(Method::SessionDelete | Method::Terminate));
    let in_params = if sep1364_end || (ending && sep1364) {
        params.and_then(|p| p.member("sessionId")).and_then(raw_str)
    } else {
        None
    };
    let header = session_header(message.headers)?;
    let session = session_ref(named, top_level.or(in_params), header)?;

    if let (Some(id), Some(Method::SessionsCreate)) = (request_id, method) {
        if params.and_then(|p| p.meta(meta::SESSION)).is_some() {
            return Err(ProxyError::CreateInSession);
        }
        // SEP-1364 alternative 1 passes the client's capabilities as `params.capabilities`.
        let sep1364 = sep1364 || params.and_then(|p| p.member("capabilities")).is_some();
        return Ok(Route::Create {
            id,
            era: session_era(sep1364, params),
        });
    }
    if session.is_none()
        && header.is_none()
        && stateless::detect(message.headers, envelope.method(), params)
    {
        return Ok(match rules.modern_upstream {
            true => Route::PassThrough,
            false => Route::Stateless,
        });
    }
    if let (Some(id), Some(Method::Initialize)) = (request_id, method) {
        if sep1364 {
            return Ok(Route::Sep1364Initialize { id, session });
        }
        if session.is_none() && !rules.old_clients_pass {
            return Ok(Route::LegacyInitialize { id });
        }
    }
    match (session, request_id) {
        (Some(session), Some(id)) if ending => Ok(Route::Delete { id, session }),
        (Some(session), None)
            if envelope.kind == Kind::Notification && method == Some(Method::Initialized) =>
        {
            Ok(Route::InitializedAck { session })
        }
        (Some(session), Some(_))
            if !rules.modern_upstream
                && session_era(sep1364, params) == ClientEra::Modern
                && method.is_some_and(Method::concerns_tasks) =>
        {
            Ok(Route::TaskInSession { session })
        }
        (Some(session), _) => Ok(Route::InSession {
            session,
            era: session_era(sep1364, params),
        }),
        (None, Some(_)) if ending => Err(ProxyError::DeleteWithoutSession),
        (None, _) => without_session(envelope.method(), rules).map(|()| Route::PassThrough),
    }
}

/// What the client of a data-layer session speaks, as far as its message tells: SEP-1364's
/// shape first (2026-07-28 has no top-level `sessionId`, so a message carrying one speaks
/// SEP-1364's dialect whatever version it names, and is answered in it), then a `_meta`
/// protocol version (2026-07-28 puts one on every request), else the data-layer draft.
/// `initialize` without a session is [`ClientEra::Legacy`], and never comes here.
fn session_era(sep1364: bool, params: Option<&Payload<'_>>) -> ClientEra {
    if sep1364 {
        ClientEra::Sep1364
    } else if params.is_some_and(|p| p.meta(meta::PROTOCOL_VERSION).is_some()) {
        ClientEra::Modern
    } else {
        ClientEra::DataLayer
    }
}

/// The session a message names. `_meta` (or SEP-1364's top-level `sessionId`) is
/// authoritative; when both are given they must agree, and an `Mcp-Session-Id` header must
/// agree with them. A header alone names a data-layer session only when it has the shape
/// of a proxy-issued id (any other is an upstream's own id from an old client).
fn session_ref<'a>(
    named: Option<SessionMeta<'a>>,
    top_level: Option<Cow<'a, str>>,
    header: Option<&'a HeaderValue>,
) -> Result<Option<SessionRef<'a>>, ProxyError> {
    let session = match (named, top_level) {
        (Some(meta), Some(top)) if meta.session_id != top => {
            return Err(ProxyError::SessionIdMismatch {
                top_level: top.into_owned(),
                meta: meta.session_id.into_owned(),
            });
        }
        (Some(meta), _) => Some(SessionRef {
            id: meta.session_id,
            state: meta.state,
        }),
        (None, Some(top)) => Some(SessionRef {
            id: top,
            state: None,
        }),
        (None, None) => None,
    };
    match (session, header) {
        (Some(session), Some(header)) if header.as_bytes() != session.id.as_bytes() => {
            Err(ProxyError::SessionHeaderMismatch {
                header: String::from_utf8_lossy(header.as_bytes()).into_owned(),
                meta: session.id.into_owned(),
            })
        }
        (Some(session), _) => Ok(Some(session)),
        (None, Some(header)) => Ok(issued(header)),
        (None, None) => Ok(None),
    }
}

/// The data-layer session a bare `Mcp-Session-Id` names, if it names one.
fn header_session(headers: &HeaderMap) -> Result<Option<SessionRef<'_>>, ProxyError> {
    Ok(session_header(headers)?.and_then(issued))
}

/// The `Mcp-Session-Id` header, if any. Both worlds require a session id to be visible
/// ASCII (0x21–0x7E: the 2025-11-25 transport, "Session Management"; the data-layer
/// sessions draft): a value with anything else in it (a space, a tab, bytes of 0x80 and
/// up) names no session anyone could have issued, and is refused before it reaches a
/// session or an upstream. An empty value is left alone: some clients send one before
/// they have a session, and servers read it as none.
///
/// A request belongs to one session, so the header comes once: with several, the one
/// checked here (against `_meta`, the caller's binding) need not be the one an upstream
/// or another hop reads, so such a request is refused whole.
fn session_header(headers: &HeaderMap) -> Result<Option<&HeaderValue>, ProxyError> {
    let mut values = headers.get_all(&MCP_SESSION_ID).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(ProxyError::SessionHeaderRepeated);
    }
    match first {
        Some(value)
            if !value.is_empty()
                && !crate::mcp::headers::is_visible_ascii_bytes(value.as_bytes()) =>
        {
            Err(ProxyError::SessionHeaderNotVisibleAscii)
        }
        header => Ok(header),
    }
}

fn issued(header: &HeaderValue) -> Option<SessionRef<'_>> {
    header
        .to_str()
        .ok()
        .filter(|id| is_issued_shape(id))
        .map(|id| SessionRef {
            id: Cow::Borrowed(id),
            state: None,
        })
}

#[cfg(test)]
mod tests;
