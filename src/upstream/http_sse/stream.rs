//! One HTTP+SSE session (2024-11-05 "Transports", HTTP with SSE): the `GET` event stream
//! that is the session upstream, read by a task of its own, and the POSTs of its messages
//! to the endpoint the stream named.
//!
//! The stream is opened with the opening client's forwarded headers and held on a
//! connection of its own (an event stream never ends while the session lives, so its
//! connection never goes back to the idle list; dropped, it is closed). Every message
//! the stream carries goes through the session's [`Demux`]. A POST is answered `202
//! Accepted` before the server reads it — the answer comes on the stream — and is bounded
//! by the upstream timeout like any request: a server may never answer a POST for a
//! session it does not know (`@modelcontextprotocol/server-everything` does not). A 404
//! (FastMCP's "Could not find session") means the session is gone.
//!
//! When the stream ends, fails, or carries what is not JSON-RPC, the session is lost:
//! requests in flight hear it ([`Lost`]), and the table that holds the session
//! (`super::Table`) forgets it. Dropping the session closes its stream (2024-11-05 has no
//! other way to end a session).

use std::future::poll_fn;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};

use super::Table;
use super::framing::{Frame, frame, resolve_endpoint};
use crate::mcp::headers::{JSON, SSE};
use crate::sse::{Decoded, End, ItemSource};
use crate::upstream::connections::UpstreamBody;
use crate::upstream::demux::{Demux, Failure};
use crate::upstream::error::UpstreamError;
use crate::upstream::lost::{self, session_lost};
use crate::upstream::read::{Media, media_type, read_body};
use crate::upstream::replicas::Replica;

/// Why an HTTP+SSE session was lost. Whatever it was, a request in flight hears that the
/// upstream no longer knows the session ([`UpstreamError::SessionGone`]): the restart
/// policies (`on_session_lost`) apply to it at its next use; the reason is logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error("the upstream closed the session's event stream")]
    Closed,
    #[error("the session's event stream failed: {0}")]
    Failed(String),
    #[error("the upstream broke the HTTP+SSE transport: {0}")]
    BrokeProtocol(String),
    #[error("the upstream no longer knows the session (it refused a POST in it)")]
    Unknown,
    /// The proxy ended it (its session was deleted or expired, or the proxy stops).
    #[error("the session was ended")]
    Ended,
}

impl Failure for Lost {
    fn error(&self) -> UpstreamError {
        UpstreamError::SessionGone
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct SseSession {
    pub replica: Arc<Replica>,
    /// Where its messages are POSTed (origin form).
    endpoint: Uri,
    pub demux: Arc<Demux<Lost>>,
    /// The task reading the stream: aborted, it drops the stream, which closes it.
    reader: tokio::task::AbortHandle,
}

impl SseSession {
    /// Opens the session's stream on `replica` with `forwarded` and waits (within the
    /// upstream timeout) for its `endpoint` event; from then on a task reads the stream.
    /// `table` is told when the stream ends on its own.
    pub async fn connect(
        replica: Arc<Replica>,
        key: Arc<str>,
        forwarded: &HeaderMap,
        table: Weak<Table>,
    ) -> Result<SseSession, UpstreamError> {
        let http = &replica.http;
        let settings = http.settings();
        let request = http.request_to(
            http.target().clone(),
            Method::GET,
            forwarded.clone(),
            Bytes::new(),
        );
        let own = http.own_fields().accept(SSE);
        let response = http.send(request, &own).await?;
        let status = response.status();
        if !status.is_success() {
            let detail = read_body(response.into_body(), lost::READ_LIMIT, settings.timeout)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return Err(UpstreamError::Refused { status, detail });
        }
        if media_type(response.headers()) != Media::EventStream {
            return Err(UpstreamError::Protocol(
                "the upstream answered the GET of an HTTP+SSE session with something else than an event stream".into(),
            ));
        }
        let mut events = Decoded::new(response.into_body(), settings.max_message_bytes);
        let named = tokio::time::timeout(settings.timeout, endpoint(&mut events))
            .await
            .map_err(|_| UpstreamError::Timeout(settings.timeout))??;
        let endpoint = resolve_endpoint(&settings.url, &named)
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let demux = Arc::new(Demux::new(key.to_string()));
        let reader = tokio::spawn(read(events, demux.clone(), key.clone(), table)).abort_handle();
        Ok(SseSession {
            replica,
            endpoint: Uri::from(endpoint),
            demux,
            reader,
        })
    }

    /// POSTs one message to the session's endpoint, within the upstream timeout.
    pub async fn post(&self, message: Bytes, forwarded: &HeaderMap) -> Result<(), UpstreamError> {
        let http = &self.replica.http;
        let timeout = http.settings().timeout;
        let request = http.request_to(
            self.endpoint.clone(),
            Method::POST,
            forwarded.clone(),
            message,
        );
        let own = http.own_fields().content_type(JSON);
        let response = http.send(request, &own).await?;
        let status = response.status();
        // Read to its end (`Accepted`), so that the connection is used again.
        let body = read_body(response.into_body(), lost::READ_LIMIT, timeout).await;
        if status.is_success() {
            return Ok(());
        }
        let body = body.unwrap_or_default();
        if session_lost(status, Some(&body)) {
            return Err(UpstreamError::SessionGone);
        }
        Err(UpstreamError::Refused {
            status,
            detail: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    /// Ends the session here: requests in flight hear `why`, and the stream is closed.
    pub fn close(&self, why: Lost) {
        self.demux.die(why);
        self.reader.abort();
    }
}

impl Drop for SseSession {
    fn drop(&mut self) {
        // A session dropped before any table held it (an open abandoned half-way).
        self.reader.abort();
    }
}

/// Reads up to the stream's first event, which must be `endpoint`; its data.
async fn endpoint(events: &mut Decoded<UpstreamBody>) -> Result<String, UpstreamError> {
    loop {
        match poll_fn(|cx| events.poll_item(cx)).await {
            Some(Ok(item)) => match frame(item) {
                Some(Frame::Endpoint(data)) => return Ok(data),
                Some(Frame::Message(_)) => {
                    return Err(UpstreamError::Protocol(
                        "the upstream's event stream did not begin with an endpoint event".into(),
                    ));
                }
                // A keep-alive may come first.
                None => continue,
            },
            Some(Err(end)) => return Err(UpstreamError::from(end)),
            None => {
                return Err(UpstreamError::Protocol(
                    "the upstream ended its event stream before naming an endpoint".into(),
                ));
            }
        }
    }
}

/// Reads the stream until it ends, routing every message; then the session is lost.
async fn read(
    mut events: Decoded<UpstreamBody>,
    demux: Arc<Demux<Lost>>,
    key: Arc<str>,
    table: Weak<Table>,
) {
    let why = loop {
        match poll_fn(|cx| events.poll_item(cx)).await {
            Some(Ok(item)) => match frame(item) {
                Some(Frame::Message(data)) => {
                    if let Err(e) = demux.dispatch(data.as_bytes()) {
                        break Lost::BrokeProtocol(format!(
                            "it sent a message that is not JSON-RPC ({e})"
                        ));
                    }
                }
                Some(Frame::Endpoint(_)) => {
                    // Messages keep going where the first one said: an endpoint that
                    // moves mid-session is not followed.
                    tracing::debug!(session = %key, "a second endpoint event was ignored");
                }
                None => {}
            },
            None | Some(Err(End::Complete | End::Idle(_))) => break Lost::Closed,
            Some(Err(End::Failed(e))) => break Lost::Failed(e),
            Some(Err(End::TooLarge(limit))) => {
                break Lost::BrokeProtocol(format!("it sent an event larger than {limit} bytes"));
            }
        }
    };
    demux.die(why.clone());
    // Gone from its table (if one holds it yet), which says so.
    if let Some(table) = table.upgrade() {
        table.lost(&key, why);
    }
}
