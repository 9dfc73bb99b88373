//! The one relay: an upstream [`Answer`] (JSON, an event stream, a stdio child's
//! messages) becomes the client's response, the response to the client's request stamped
//! on its way ([`Stamp`]), everything else passed as it came, event by event.
//!
//! - A JSON answer is stamped and sent as JSON, with the upstream's status. A success
//!   whose JSON body is not the request's response (not JSON, a batch, another id), or
//!   a success of another media type answering a request, is not passed on: the client
//!   gets a 502 saying what the upstream sent ([`ProxyError::UnusableAnswer`]).
//! - An event stream is written event by event as it arrives; a client that accepts
//!   only JSON gets the stamped response alone once it comes (notifications on the way
//!   are dropped; server requests cannot be answered by such a client anyway).
//! - A stdio child's or an HTTP+SSE session's messages: a response that comes first is
//!   answered as JSON;
//!   otherwise they stream as events (or, for a client that takes only JSON, the
//!   response alone once it comes).
//! - No message (202) passes as it is; so do bodies of other types answering a
//!   notification or a response.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};

use super::headers;
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, same_id, splice_at};
use crate::mcp::headers::{Accepts, JSON, SSE};
use crate::mcp::tools::ToolHints;
use crate::metrics::Metrics;
use crate::response::{EventRewrite, ProxyBody, SseBody};
use crate::rewrite::to_client::{
    Stamp, StampEvents, Stamped, stamp_message, stamp_read, stamp_response,
};
use crate::upstream::{Answer, Messages, Upstream, UpstreamError};

/// What a relay needs besides the answer.
#[derive(Debug, Clone, Copy)]
pub struct Relay<'a> {
    pub upstream: &'a Upstream,
    pub metrics: &'a Arc<Metrics>,
    /// An event stream silent this long is ended.
    pub idle_timeout: Duration,
}

/// The request being answered.
#[derive(Debug)]
pub struct Request {
    /// Its raw id; `None` for a notification or a response.
    pub id: Option<Bytes>,
    pub accepts: Accepts,
    /// What to stamp on its response (`None`: the answer passes unstamped).
    pub stamp: Option<Stamp>,
    /// Where to learn tool annotations from the response (a `tools/list`).
    pub learn: Option<Arc<ToolHints>>,
}

impl Relay<'_> {
    /// The client's response to `answer`. Its headers are the upstream's, less what the
    /// rewrite made stale; the caller adds its own.
    pub async fn relay(
        &self,
        answer: Answer,
        request: Request,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        // A JSON body is read once, below, for this check and the stamp.
        if let Some(id) = request.id.as_deref()
            && !matches!(answer.messages, Messages::One(Some(_)))
            && let Some(problem) = answer.unusable_for(id)
        {
            return Err(unusable(self.upstream, answer.status, problem, id));
        }
        let Answer {
            status,
            headers: mut answered,
            mut messages,
            mut renamed,
        } = answer;
        let mut response = Response::new(ProxyBody::empty());
        *response.status_mut() = status;
        headers::to_client_in_session(&mut answered);
        *response.headers_mut() = answered;
        let timeout = self.upstream.timeout();
        let body = match &mut messages {
            Messages::One(message) => match message.take() {
                Some(message) => {
                    let read = Envelope::parse(&message);
                    // The response still carries the proxy's id for the request: the
                    // client's goes back in the same write as the stamp.
                    let restored = match (&mut renamed, &read) {
                        (Some(restore), Ok(envelope)) => restore
                            .response_read(&message, envelope)
                            .map(|at| (at, restore.client_id())),
                        _ => None,
                    };
                    if restored.is_none()
                        && let Some(id) = request.id.as_deref()
                        && let Some(problem) = Answer::unusable_as_read(status, &read, id)
                    {
                        return Err(unusable(self.upstream, status, problem, id));
                    }
                    learn(&request, &message);
                    let stamped = match (request.stamp.as_ref(), &read, restored) {
                        (Some(stamp), Ok(envelope), Some(restored)) => {
                            stamp_response(&message, envelope, stamp, Some(restored))
                        }
                        (Some(stamp), Ok(envelope), None) => stamp_read(&message, envelope, stamp),
                        (None, _, Some((at, client))) => {
                            Stamped::Response(splice_at(&message, at, client))
                        }
                        _ => Stamped::Other,
                    };
                    ProxyBody::full(applied(message, stamped))
                }
                None => ProxyBody::empty(),
            },
            Messages::Events(_) if request.accepts.sse || request.stamp.is_none() => {
                self.stream_learning(messages, request.stamp, request.learn)
            }
            Messages::Events(_) => {
                let id = request.id.as_deref().unwrap_or(b"null");
                let message = messages
                    .response_to(id, timeout)
                    .await
                    .map_err(|e| self.error(e))?;
                json_content(&mut response);
                learn(&request, &message);
                ProxyBody::full(stamped(message, request.stamp.as_ref()))
            }
            Messages::Channel { .. } => {
                let first = messages
                    .peek_first(timeout)
                    .await
                    .map_err(|e| self.error(e))?
                    .ok_or_else(|| self.error(stopped()))?;
                *response.status_mut() = StatusCode::OK;
                let is_answer = |message: &[u8]| is_response_to(message, request.id.as_deref());
                if is_answer(first) || !request.accepts.sse {
                    let message = match request.id.as_deref() {
                        Some(id) => messages
                            .response_to(id, timeout)
                            .await
                            .map_err(|e| self.error(stopped_if_ended(e)))?,
                        None => return Err(self.error(stopped())),
                    };
                    json_content(&mut response);
                    learn(&request, &message);
                    ProxyBody::full(stamped(message, request.stamp.as_ref()))
                } else {
                    response
                        .headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
                    self.stream_learning(messages, request.stamp, request.learn)
                }
            }
            Messages::Nothing => ProxyBody::empty(),
            Messages::Opaque(_) => {
                let Messages::Opaque(body) = messages else {
                    return Err(self.error(stopped()));
                };
                ProxyBody::Untouched {
                    body: *body,
                    open: None,
                }
            }
        };
        *response.body_mut() = body;
        Ok(response)
    }

    /// An answer streamed as events, stamped or as it is.
    pub fn stream(&self, messages: Messages, stamp: Option<Stamp>) -> ProxyBody {
        self.stream_learning(messages, stamp, None)
    }

    fn stream_learning(
        &self,
        messages: Messages,
        stamp: Option<Stamp>,
        learn: Option<Arc<ToolHints>>,
    ) -> ProxyBody {
        let rewrite = match stamp {
            Some(stamp) => EventRewrite::Stamp {
                stamp: StampEvents::new(stamp),
                upstream: self.upstream.label().clone(),
                learn,
            },
            None => EventRewrite::Unchanged,
        };
        ProxyBody::Events {
            body: Box::pin(SseBody::new(messages, rewrite, self.idle_timeout)),
            open: self.metrics.stream_opened(),
        }
    }

    fn error(&self, source: UpstreamError) -> ProxyError {
        ProxyError::Upstream {
            upstream: self.upstream.label().to_string(),
            source,
        }
    }
}

/// The upstream's answer to request `id` cannot be passed on ([`Answer::unusable_for`]):
/// the client gets a 502 naming the upstream and what was wrong instead.
pub fn unusable(upstream: &Upstream, status: StatusCode, problem: String, id: &[u8]) -> ProxyError {
    tracing::warn!(upstream = %upstream.label(), status = status.as_u16(), problem = %problem, "the upstream's answer is not the request's response");
    ProxyError::UnusableAnswer {
        upstream: upstream.label().to_string(),
        status,
        problem,
        request_id: String::from_utf8_lossy(id).into_owned(),
    }
}

/// Learns tool annotations from the response to a `tools/list`.
fn learn(request: &Request, message: &[u8]) {
    if let Some(hints) = &request.learn {
        hints.learn(message);
    }
}

fn json_content(response: &mut Response<ProxyBody>) {
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
}

fn stopped() -> UpstreamError {
    UpstreamError::Unreachable("the upstream session ended before answering".into())
}

/// A child's (or an HTTP+SSE session's) answer that ended before its response: the
/// session stopped.
fn stopped_if_ended(e: UpstreamError) -> UpstreamError {
    match e {
        UpstreamError::Protocol(_) => stopped(),
        other => other,
    }
}

fn is_response_to(message: &[u8], id: Option<&[u8]>) -> bool {
    Envelope::parse(message).is_ok_and(|e| {
        e.kind == Kind::Response
            && e.id
                .zip(id)
                .is_some_and(|(theirs, ours)| same_id(theirs.get(), ours))
    })
}

/// `message` with the stamp applied if it is the response the stamp is for.
pub fn stamped(message: Bytes, stamp: Option<&Stamp>) -> Bytes {
    let Some(stamp) = stamp else {
        return message;
    };
    let stamping = stamp_message(&message, stamp);
    applied(message, stamping)
}

/// `message` as `stamping` left it.
fn applied(message: Bytes, stamping: Stamped) -> Bytes {
    match stamping {
        Stamped::Response(Some(rewritten)) => Bytes::from(rewritten),
        Stamped::Response(None) | Stamped::Other => message,
    }
}
