//! A tool's timeout (`[[auth.limits]]` `timeout`): the whole answer to a `tools/call` —
//! its head and, when it streams, every event up to the response — within it, on every
//! path. Past it the client gets the proxy's error for its call (504 with -32603 and
//! `data.reason = "tool_timeout"` before the head; the stream's last event after it) and
//! the upstream hears the call is off:
//! - in an upstream session (the client's own, passed through, or one the proxy holds
//!   for the client's session): a `notifications/cancelled` naming the call, sent as the
//!   client would have sent it — the same session, headers and `_meta`, through the
//!   same route, which renames the request id where the proxy renamed the call's — while
//!   the call's answer is still held (the route knows a request in flight only so long);
//! - otherwise (2026-07-28 and the stateless path, where closing a request's stream is
//!   its cancellation): the call's answer is let go.
//!
//! A JSON answer is read whole (at most 16 MiB) before it goes on, so that a body still
//! on its way at the deadline gets the 504 too.
//!
//! A call that became a task (2026-07-28 tasks) answered in time; its task lives by its
//! own `ttlMs`.

use std::net::IpAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Response};
use http_body_util::{BodyExt, Limited};
use tokio::sync::oneshot;

use crate::auth::Auth;
use crate::error::ProxyError;
use crate::fleet::Served;
use crate::jsonrpc::{Envelope, raw_str, write, write_json_str};
use crate::mcp::Method;
use crate::mcp::caller::Caller;
use crate::mcp::headers::{Accepts, MCP_METHOD, MCP_NAME, MCP_SESSION_ID, is_param_header};
use crate::mcp::meta::Payload;
use crate::response::ProxyBody;
use crate::response::timed::Timed;
use crate::route::{self, Message, Route};
use crate::upstream::{Media, UpstreamError, media_type};

/// How long a cancellation that needs the call's answer held may take before the answer
/// is let go anyway (and the client gets its error).
const CANCEL_WITHIN: Duration = Duration::from_secs(1);

/// The most of a JSON answer held to read it whole in time.
const MAX_HELD_BYTES: usize = 16 * 1024 * 1024;

/// The reason a cancellation gives.
const REASON: &str = "the call passed its timeout at the proxy";

/// A call of a tool with a timeout.
pub(super) struct Deadline {
    served: Arc<Served>,
    tool: String,
    after: Duration,
    /// The call's id, raw, as the client wrote it.
    id: Bytes,
    /// In an upstream session, whether the proxy renamed the call there; `None`: in
    /// none (letting the answer go is the cancellation).
    renamed: Option<bool>,
}

/// How the upstream hears that a call is off.
enum Cancel {
    /// A `notifications/cancelled` through the call's route.
    Notify(Box<Notice>),
    /// The call's answer let go.
    Drop,
}

/// A client's `notifications/cancelled` for a call, and what it is sent with.
struct Notice {
    /// The proxy renamed the call upstream: the notice must go while the call's answer
    /// is held (else it is sent on its own).
    renamed: bool,
    served: Arc<Served>,
    headers: HeaderMap,
    body: Bytes,
    caller: Caller,
    peer: Option<IpAddr>,
    accepts: Accepts,
}

impl Deadline {
    /// The deadline of `message` on `route`: `None` unless it is a call of a tool with a
    /// timeout.
    pub(super) fn of(
        auth: &Auth,
        served: &Arc<Served>,
        message: &Message<'_, '_>,
        route: &Route<'_>,
    ) -> Option<Deadline> {
        if message.method() != Some(Method::ToolsCall) {
            return None;
        }
        let id = message.request_id()?;
        let tool = message.params()?.member("name").and_then(raw_str)?;
        let after = auth.tool_timeout(&served.name, &tool)?;
        // In an upstream session: the proxy's (renamed), or the client's own, passed.
        let renamed = match route {
            Route::InSession { .. } => Some(true),
            Route::PassThrough if message.headers.contains_key(&MCP_SESSION_ID) => Some(false),
            _ => None,
        };
        Some(Deadline {
            served: served.clone(),
            tool: tool.into_owned(),
            after,
            id: Bytes::copy_from_slice(id.get().as_bytes()),
            renamed,
        })
    }

    /// How the upstream hears that the call `message` is off (built only when it may
    /// be needed: a call answered in time costs nothing).
    fn cancel(&self, message: &Message<'_, '_>) -> Cancel {
        match self.renamed {
            Some(renamed) => Cancel::Notify(Box::new(Notice::of(
                &self.served,
                message,
                &self.id,
                renamed,
            ))),
            None => Cancel::Drop,
        }
    }

    /// `answer` to `message`, held to the deadline.
    pub(super) async fn run(
        self,
        message: &Message<'_, '_>,
        answer: impl Future<Output = Result<Response<ProxyBody>, ProxyError>>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let deadline = tokio::time::Instant::now() + self.after;
        // Past the deadline, the answer is held, not polled, while the cancellation goes.
        let mut answer = pin!(answer);
        let response = match tokio::time::timeout_at(deadline, answer.as_mut()).await {
            Ok(answered) => answered?,
            Err(_) => {
                let cancel = self.cancel(message);
                return Err(self.expire(cancel).await);
            }
        };
        if media_type(response.headers()) != Media::EventStream {
            // One JSON message (passed through, its body may still be on its way): read
            // whole in time, or the call is answered with the timeout.
            let (parts, body) = response.into_parts();
            let mut read = pin!(Limited::new(body, MAX_HELD_BYTES).collect());
            return match tokio::time::timeout_at(deadline, read.as_mut()).await {
                Ok(Ok(whole)) => Ok(Response::from_parts(
                    parts,
                    ProxyBody::full(whole.to_bytes()),
                )),
                Ok(Err(e)) => Err(ProxyError::Upstream {
                    upstream: self.served.label.to_string(),
                    source: UpstreamError::Protocol(format!(
                        "its answer to a call with a timeout could not be read whole (at most {MAX_HELD_BYTES} bytes): {e}"
                    )),
                }),
                Err(_) => {
                    let cancel = self.cancel(message);
                    Err(self.expire(cancel).await)
                }
            };
        }
        let last = self.last_event();
        let cancel = self.cancel(message);
        let (expired, rest) = oneshot::channel();
        let Deadline { tool, after, .. } = self;
        if let Cancel::Notify(_) = cancel {
            tokio::spawn(async move {
                if let Ok(rest) = rest.await {
                    tracing::info!(tool = crate::error::head(&tool, 256), timeout = ?after, "a tool's call passed its timeout; cancelled upstream");
                    cancel.send().await;
                    drop(rest);
                }
            });
        }
        // Without a notice to send, the rest is dropped as the deadline hands it over.
        let sleep = Box::pin(tokio::time::sleep_until(deadline));
        Ok(response.map(|body| ProxyBody::Timed {
            body: Box::pin(Timed::new(body, sleep, last, expired)),
        }))
    }

    /// The call is off: the upstream told, the client's error.
    async fn expire(self, cancel: Cancel) -> ProxyError {
        let error = self.error();
        tracing::info!(tool = crate::error::head(&self.tool, 256), timeout = ?self.after, "a tool's call passed its timeout; cancelled upstream");
        match cancel {
            // Named as the client named it: it goes on its own, whoever leaves.
            Cancel::Notify(notice) if !notice.renamed => {
                tokio::spawn(notice.send());
            }
            cancel => cancel.send().await,
        }
        error
    }

    fn error(&self) -> ProxyError {
        ProxyError::ToolTimeout {
            tool: crate::error::head(&self.tool, 256).to_owned(),
            after: self.after,
        }
    }

    /// The error answering the call, as an event.
    fn last_event(&self) -> Bytes {
        let (_, object, _) = self.error().answer();
        let message = write::error(Some(&self.id), &object);
        let mut event = Vec::with_capacity(message.len() + 8);
        crate::sse::write_event(
            &mut event,
            &crate::sse::Event {
                data: Some(String::from_utf8_lossy(&message).into_owned()),
                ..crate::sse::Event::default()
            },
        );
        Bytes::from(event)
    }
}

impl Cancel {
    async fn send(self) {
        if let Cancel::Notify(notice) = self {
            notice.send().await;
        }
    }
}

impl Notice {
    /// The cancellation a client would send for the call `message` (with id `id`): the
    /// same session (headers, `_meta`, SEP-1364's `sessionId`), the same caller.
    fn of(served: &Arc<Served>, message: &Message<'_, '_>, id: &[u8], renamed: bool) -> Notice {
        let mut params = Vec::with_capacity(id.len() + REASON.len() + 64);
        params.extend_from_slice(br#"{"requestId":"#);
        params.extend_from_slice(id);
        params.extend_from_slice(br#","reason":"#);
        write_json_str(&mut params, REASON);
        if let Some(meta) = message.params().and_then(|p| p.member("_meta")) {
            params.extend_from_slice(br#","_meta":"#);
            params.extend_from_slice(meta.get().as_bytes());
        }
        params.push(b'}');
        let mut body = Vec::with_capacity(params.len() + 96);
        body.extend_from_slice(br#"{"jsonrpc":"2.0","method":""#);
        body.extend_from_slice(Method::Cancelled.as_str().as_bytes());
        body.extend_from_slice(br#"","params":"#);
        body.extend_from_slice(&params);
        if let Some(session) = message.envelope.session_id {
            body.extend_from_slice(br#","sessionId":"#);
            body.extend_from_slice(session.get().as_bytes());
        }
        body.push(b'}');
        // The call's own headers, but what described its body.
        let mut headers = message.headers.clone();
        headers.remove(CONTENT_LENGTH);
        headers.remove(&MCP_METHOD);
        headers.remove(&MCP_NAME);
        let params_headers: Vec<_> = headers
            .keys()
            .filter(|name| is_param_header(name))
            .cloned()
            .collect();
        for name in params_headers {
            headers.remove(name);
        }
        Notice {
            renamed,
            served: served.clone(),
            headers,
            body: Bytes::from(body),
            caller: message.caller,
            peer: message.peer,
            accepts: message.accepts,
        }
    }

    /// Sends the cancellation through the route a client's would take.
    async fn send(self) {
        let Ok(envelope) = Envelope::parse(&self.body) else {
            return;
        };
        let raw = envelope.params_or_result();
        let Ok(payload) = raw.map(Payload::open).transpose() else {
            return;
        };
        let payload = payload.flatten();
        let message = Message {
            headers: &self.headers,
            caller: self.caller,
            body: &self.body,
            envelope: &envelope,
            payload: raw.zip(payload.as_ref()),
            accepts: self.accepts,
            peer: self.peer,
        };
        let sent = async {
            let rules = self.served.rules().await?;
            let route = route::classify(&message, rules)?;
            super::dispatch(&self.served, &message, route).await
        };
        match tokio::time::timeout(CANCEL_WITHIN, sent).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "could not cancel a call past its timeout"),
            Err(_) => tracing::debug!("cancelling a call past its timeout took too long"),
        }
    }
}
