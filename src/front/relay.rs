//! Messages in a session: stripped of the session, sent on the session's own upstream
//! connection, and the answer passed back with the response stamped — as JSON, or as an
//! event stream rewritten event by event.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::App;
use super::body::ProxyBody;
use super::checks::Accepts;
use super::headers;
use super::respond;
use super::sessions::{Dialect, Message, SessionRef, binding, short};
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, range_in, same_id, write_json_str};
use crate::mcp::headers::{JSON, LAST_EVENT_ID, MCP_SESSION_ID, SSE};
use crate::mcp::meta;
use crate::rewrite::to_client::{Stamp, StampEvents, Stamped, stamp_message};
use crate::rewrite::to_upstream::{strip_session, strip_top_level_session};
use crate::session::rfc3339;
use crate::sse::{MessageStream, RewriteBody, Unchanged};
use crate::upstream::{
    Media, Reply, UpstreamError, media_type, read_body, read_response_from_sse, says_session_lost,
};

/// Any message in a session but `sessions/create` and `sessions/delete`.
pub async fn forward(
    app: &App,
    message: &Message<'_, '_>,
    session: &SessionRef<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let Message {
        headers: client_headers,
        body,
        envelope,
        payload,
        dialect,
        accepts,
    } = *message;
    tracing::Span::current().record("session", short(&session.id));
    let lease = app.lease(session).await?;
    let mut upstream_body = match payload {
        Some((raw, payload)) => strip_session(body, raw, payload),
        None => body.clone(),
    };
    if dialect == Dialect::Sep1364 {
        upstream_body = strip_top_level_session(upstream_body);
    }
    let forwarded = headers::to_upstream_in_session(client_headers);
    let reply = match app
        .upstream
        .exchange(binding(&lease), upstream_body, &forwarded)
        .await
    {
        Ok(reply) => reply,
        Err(UpstreamError::SessionGone) => return Err(app.upstream_lost(&session.id).await),
        Err(e) => return Err(app.upstream_error(e)),
    };
    // Sessions that a legacy client opened with `initialize` (stdio upstreams) get their
    // answers as a legacy server would give them: no session `_meta`.
    let stamp = match (envelope.kind, envelope.id, lease.record.legacy) {
        (Kind::Request, Some(id), false) => Some(Stamp {
            request_id: range_in(body, id)
                .map(|r| body.slice(r))
                .unwrap_or_else(|| Bytes::copy_from_slice(id.get().as_bytes())),
            session: Bytes::from(meta::session_stamp(
                &session.id,
                &lease.state,
                &rfc3339(lease.expires_at),
            )),
            top_level: (dialect == Dialect::Sep1364).then(|| {
                let mut id = Vec::with_capacity(session.id.len() + 2);
                write_json_str(&mut id, &session.id);
                Bytes::from(id)
            }),
            complete: payload.is_some_and(|(_, p)| p.meta(meta::PROTOCOL_VERSION).is_some()),
        }),
        _ => None,
    };
    let request_id = envelope.id.map(|id| id.get().to_owned());
    let to = Destination {
        session_id: &session.id,
        accepts,
        in_upstream_session: lease.record.upstream_session.is_some(),
    };
    match reply {
        Reply::Http(response) => relay(app, response, stamp, to).await,
        Reply::Messages(messages) => relay_messages(app, messages, stamp, request_id, to).await,
        Reply::Delivered => Ok(with_session(
            respond::status(StatusCode::ACCEPTED),
            &session.id,
        )),
    }
}

/// Where an answer goes.
#[derive(Debug, Clone, Copy)]
struct Destination<'a> {
    session_id: &'a str,
    accepts: Accepts,
    /// The request carried an upstream `Mcp-Session-Id` (a 400 may then mean it is lost).
    in_upstream_session: bool,
}

fn with_session(mut response: Response<ProxyBody>, session_id: &str) -> Response<ProxyBody> {
    if let Ok(value) = HeaderValue::from_str(session_id) {
        response.headers_mut().insert(MCP_SESSION_ID.clone(), value);
    }
    response
}

/// A Streamable HTTP upstream's answer.
async fn relay(
    app: &App,
    response: Response<Incoming>,
    stamp: Option<Stamp>,
    to: Destination<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let (mut parts, incoming) = response.into_parts();
    let limit = app.upstream.max_message_bytes();
    let timeout = app.upstream.timeout();
    let media = media_type(&parts.headers);
    parts.headers = headers::to_client_in_session(&parts.headers);
    if let Ok(value) = HeaderValue::from_str(to.session_id) {
        parts.headers.insert(MCP_SESSION_ID.clone(), value);
    }
    let body = match (media, stamp) {
        (Media::EventStream, Some(stamp)) if to.accepts.sse => ProxyBody::Stamped {
            body: RewriteBody::new(
                incoming,
                StampEvents::new(stamp, app.upstream.label().clone()),
                limit,
                app.sse_idle_timeout,
            ),
            open: app.metrics.stream_opened(),
        },
        (Media::EventStream, Some(stamp)) => {
            // The client takes JSON only: wait for the response and send just that.
            // Notifications on the way are dropped; server-to-client requests cannot be
            // answered by such a client anyway.
            let request_id = String::from_utf8_lossy(&stamp.request_id).into_owned();
            let message = read_response_from_sse(incoming, &request_id, limit, timeout)
                .await
                .map_err(|e| app.upstream_error(e))?;
            parts
                .headers
                .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
            ProxyBody::full(stamped(message, &stamp))
        }
        (Media::EventStream, None) => app.untouched(incoming, media),
        (Media::Json, stamp) => {
            let message = read_body(incoming, limit, timeout)
                .await
                .map_err(|e| app.upstream_error(e))?;
            if to.in_upstream_session && says_session_lost(parts.status, &message) {
                return Err(app.upstream_lost(to.session_id).await);
            }
            match stamp {
                Some(stamp) => ProxyBody::full(stamped(message, &stamp)),
                None => ProxyBody::full(message),
            }
        }
        (Media::Other, _) if parts.status.is_success() => app.untouched(incoming, media),
        (Media::Other, _) => {
            let status = parts.status;
            let detail = read_body(incoming, 512, timeout)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return Err(app.upstream_error(UpstreamError::Refused { status, detail }));
        }
    };
    Ok(Response::from_parts(parts, body))
}

/// A stdio upstream's answer: messages, the response last. A response that comes first
/// is answered as JSON; otherwise the messages stream as events (or, for a client that
/// takes only JSON, the response alone once it comes).
async fn relay_messages(
    app: &App,
    mut messages: mpsc::Receiver<Bytes>,
    stamp: Option<Stamp>,
    request_id: Option<String>,
    to: Destination<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let timeout = app.upstream.timeout();
    let is_response = |message: &[u8]| {
        Envelope::parse(message).is_ok_and(|e| {
            e.kind == Kind::Response
                && e.id
                    .zip(request_id.as_deref())
                    .is_some_and(|(id, ours)| same_id(id.get(), ours))
        })
    };
    let first = match tokio::time::timeout(timeout, messages.recv()).await {
        Ok(Some(first)) => first,
        Ok(None) => {
            return Err(app.upstream_error(UpstreamError::Unreachable(
                "the stdio server stopped before answering".into(),
            )));
        }
        Err(_) => return Err(app.upstream_error(UpstreamError::Timeout(timeout))),
    };
    let json_reply = |message: Bytes| {
        let body = match &stamp {
            Some(stamp) => stamped(message, stamp),
            None => message,
        };
        with_session(respond::json(StatusCode::OK, body), to.session_id)
    };
    if is_response(&first) {
        return Ok(json_reply(first));
    }
    if !to.accepts.sse {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, messages.recv()).await {
                Ok(Some(message)) if is_response(&message) => return Ok(json_reply(message)),
                Ok(Some(_)) => continue,
                Ok(None) => {
                    return Err(app.upstream_error(UpstreamError::Unreachable(
                        "the stdio server stopped before answering".into(),
                    )));
                }
                Err(_) => return Err(app.upstream_error(UpstreamError::Timeout(timeout))),
            }
        }
    }
    let body = match stamp {
        Some(stamp) => ProxyBody::Messages {
            body: MessageStream::new(
                Some(first),
                messages,
                StampEvents::new(stamp, app.upstream.label().clone()),
                app.sse_idle_timeout,
            ),
            open: app.metrics.stream_opened(),
        },
        None => ProxyBody::Listen {
            body: MessageStream::new(Some(first), messages, Unchanged, app.sse_idle_timeout),
            open: app.metrics.stream_opened(),
        },
    };
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
    Ok(with_session(response, to.session_id))
}

fn stamped(message: Bytes, stamp: &Stamp) -> Bytes {
    match stamp_message(&message, stamp) {
        Stamped::Response(Some(rewritten)) => Bytes::from(rewritten),
        Stamped::Response(None) | Stamped::Other => message,
    }
}

/// `GET` with a data-layer `Mcp-Session-Id`: the session's upstream stream of server
/// messages not tied to a client request (the GET stream over HTTP, the unclaimed
/// messages of a stdio child), passed through as it is.
pub async fn listen(
    app: &App,
    client_headers: &HeaderMap,
    session: &SessionRef<'_>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let lease = app.lease(session).await?;
    let mut forwarded = headers::to_upstream_in_session(client_headers);
    if let Some(last) = client_headers.get(&LAST_EVENT_ID) {
        forwarded.insert(LAST_EVENT_ID.clone(), last.clone());
    }
    forwarded.insert(http::header::ACCEPT, HeaderValue::from_static(SSE));
    let reply = match app.upstream.listen(binding(&lease), &forwarded).await {
        Ok(reply) => reply,
        Err(UpstreamError::SessionGone) => return Err(app.upstream_lost(&session.id).await),
        Err(e) => return Err(app.upstream_error(e)),
    };
    let response = match reply {
        Reply::Http(response) => {
            let (mut parts, incoming) = response.into_parts();
            let body = app.untouched(incoming, media_type(&parts.headers));
            parts.headers = headers::to_client_in_session(&parts.headers);
            Response::from_parts(parts, body)
        }
        Reply::Messages(messages) => {
            let mut response = Response::new(ProxyBody::Listen {
                // A listen stream is quiet for long stretches: it is not cut for idling.
                body: MessageStream::new(None, messages, Unchanged, LISTEN_IDLE),
                open: app.metrics.stream_opened(),
            });
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
            response
        }
        Reply::Delivered => respond::status(StatusCode::ACCEPTED),
    };
    Ok(with_session(response, &session.id))
}

/// Idle limit of a stdio session's listen stream (its client ends it by disconnecting).
const LISTEN_IDLE: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);
