//! The HTTP+SSE transport (MCP 2024-11-05 "Transports", HTTP with SSE), of the replicas
//! whose era is [`super::Era::Sse`]: an upstream session is one `GET` event stream held
//! open by the proxy; the stream's first event names the endpoint to POST the session's
//! messages to; every POST is answered `202 Accepted`, and every response, notification
//! and server request (sampling, elicitation, roots) comes on the stream. The handshake
//! is the legacy one (`initialize`, its result on the stream, `notifications/initialized`).
//!
//! Such a session lives in this process, as a stdio child does: its stream is a
//! connection this process holds. So it is kept here, in a table, by a key the proxy
//! issues ([`is_key`]; what a session record keeps as its upstream session), and the
//! records of such sessions name this proxy replica as their owner (other replicas
//! forward their messages here). Requests are renamed and answers routed back by the
//! shared [`super::demux`], exactly as for a stdio child.
//!
//! A session ends when the proxy ends it (dropping its stream: 2024-11-05 has no
//! `DELETE`) or when the upstream does — its stream ends (the server restarted) or a
//! POST is refused as of an unknown session. Then the session is lost
//! ([`UpstreamError::SessionGone`]: the `on_session_lost` policies apply), and a stream
//! that ended on its own is reported on the upstream's deaths channel, as a stdio child
//! that died is.

mod framing;
mod stream;

pub use framing::{BadEndpoint, Frame, frame, resolve_endpoint};
pub use stream::Lost;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use dashmap::DashMap;
use http::HeaderMap;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use self::stream::SseSession;
use super::answer::Answer;
use super::error::UpstreamError;
use super::handshake::{Opened, read_result};
use super::replicas::Replica;
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::initialize;

/// How the proxy's keys for HTTP+SSE sessions begin (an upstream's own session ids are
/// never looked up here).
const KEY_PREFIX: &str = "proxy-sse-";

/// Whether an upstream session id is the proxy's key of an HTTP+SSE session.
pub fn is_key(id: &str) -> bool {
    id.starts_with(KEY_PREFIX)
}

/// The HTTP+SSE sessions this process holds for one upstream (every replica of it).
#[derive(Debug, Default)]
pub struct SseSessions {
    table: Arc<Table>,
}

/// The sessions by key; what their reading tasks tell when a stream ends.
#[derive(Debug, Default)]
struct Table {
    sessions: DashMap<Arc<str>, Arc<SseSession>>,
    next_key: AtomicU64,
    /// Where a session whose stream ended on its own is reported (the session path
    /// forgets its record).
    deaths: OnceLock<mpsc::UnboundedSender<String>>,
}

impl Table {
    /// Removes the session `key` and ends it with `why`; whether it was held. Its
    /// replica counts it no more.
    fn remove(&self, key: &str, why: Lost) -> bool {
        let Some((_, session)) = self.sessions.remove(key) else {
            return false;
        };
        session.close(why);
        session.replica.session_ended();
        true
    }

    /// The stream of session `key` ended on its own (`why`).
    fn lost(&self, key: &str, why: Lost) {
        if !self.remove(key, why.clone()) {
            return;
        }
        tracing::warn!(upstream_session = %key, reason = %why, "an HTTP+SSE upstream session was lost");
        if let Some(deaths) = self.deaths.get() {
            let _ = deaths.send(key.to_owned());
        }
    }
}

impl SseSessions {
    /// Reports every session whose stream ends on its own on `deaths` (once set).
    pub fn report_deaths(&self, deaths: mpsc::UnboundedSender<String>) {
        let _ = self.table.deaths.set(deaths);
    }

    /// Sessions held.
    pub fn len(&self) -> usize {
        self.table.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.sessions.is_empty()
    }

    /// Opens a session on `replica`: its stream (with the client's `forwarded` headers),
    /// then `initialize` with `client_info` and `capabilities` (the proxy's own when
    /// `None`). Held from then on under the returned key: the caller owns it
    /// ([`super::UpstreamSession`]) before it sends [`SseSessions::initialized`].
    /// Abandoned half-way, the stream is closed.
    pub async fn open(
        &self,
        replica: &Arc<Replica>,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<Opened, UpstreamError> {
        let n = self.table.next_key.fetch_add(1, Ordering::Relaxed) + 1;
        let key: Arc<str> = format!("{KEY_PREFIX}{n}").into();
        let weak = Arc::downgrade(&self.table);
        let session = SseSession::connect(replica.clone(), key.clone(), forwarded, weak).await?;
        let body = initialize::request_body(client_info, capabilities);
        let registered = session.demux.request(&body)?;
        session.post(registered.message, forwarded).await?;
        let mut answer = Answer::channel(registered.rx);
        let timeout = replica.http.settings().timeout;
        let negotiated = read_result(&mut answer.messages, answer.status, timeout).await?;
        replica.session_opened();
        self.table.sessions.insert(key.clone(), Arc::new(session));
        Ok(Opened {
            replica: replica.id,
            session_id: Some(key.to_string()),
            negotiated,
        })
    }

    /// Sends `notifications/initialized` in the session `open` opened.
    pub async fn initialized(&self, key: &str, forwarded: &HeaderMap) -> Result<(), UpstreamError> {
        let message = Bytes::from_static(initialize::INITIALIZED);
        self.exchange(key, message, forwarded).await.map(drop)
    }

    /// Sends one message in session `key`: a request gets its messages back (from the
    /// stream), anything else is just delivered.
    pub async fn exchange(
        &self,
        key: &str,
        message: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let session = self.get(key)?;
        let is_request = Envelope::parse(&message).is_ok_and(|e| e.kind == Kind::Request);
        if is_request {
            let registered = session.demux.request(&message)?;
            if let Err(e) = session.post(registered.message, forwarded).await {
                session.demux.forget(registered.proxy_id);
                return Err(self.refused(key, e));
            }
            Ok(Answer::channel(registered.rx))
        } else {
            let message = session.demux.outgoing(message)?;
            session
                .post(message, forwarded)
                .await
                .map_err(|e| self.refused(key, e))?;
            Ok(Answer::accepted())
        }
    }

    /// Messages of session `key` that no request claims.
    pub fn listen(&self, key: &str) -> Result<Answer, UpstreamError> {
        Ok(Answer::channel(self.get(key)?.demux.listen()?))
    }

    /// Ends session `key` (its stream is closed); nothing when it is not held.
    pub fn end(&self, key: &str) {
        self.table.remove(key, Lost::Ended);
    }

    /// Ends every session (the proxy stops).
    pub fn end_all(&self) {
        let keys: Vec<Arc<str>> = self
            .table
            .sessions
            .iter()
            .map(|e| e.key().clone())
            .collect();
        for key in keys {
            self.end(&key);
        }
    }

    fn get(&self, key: &str) -> Result<Arc<SseSession>, UpstreamError> {
        self.table
            .sessions
            .get(key)
            .map(|session| session.clone())
            .filter(|session| session.demux.is_alive())
            .ok_or(UpstreamError::SessionGone)
    }

    /// A POST in session `key` failed with `error`: one refused as of an unknown session
    /// loses the session.
    fn refused(&self, key: &str, error: UpstreamError) -> UpstreamError {
        if matches!(error, UpstreamError::SessionGone) {
            self.table.remove(key, Lost::Unknown);
        }
        error
    }
}
