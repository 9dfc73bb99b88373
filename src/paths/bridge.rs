//! Old clients (2025-11-25 and earlier: `initialize`, `Mcp-Session-Id`) in front of a
//! modern (2026-07-28) upstream — the reverse bridge. The proxy answered their
//! `initialize` from the upstream's `server/discover` and keeps their session (a record
//! marked `legacy` whose upstream session is a modern one); this module serves what they
//! send in it:
//!
//! - `ping` is answered here; `logging/setLevel` is kept and sent as the per-request
//!   `logLevel` from then on; `resources/subscribe` / `unsubscribe` change what the
//!   session's GET stream listens for;
//! - every other request goes up as a 2026-07-28 request (the session's identity and
//!   capabilities in `_meta`: `rewrite::to_modern`), and its answer comes back as an old
//!   client takes it (`rewrite::to_legacy`); an `input_required` result becomes real
//!   requests to the client (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`) on the call's event stream, and the call is retried with the answers
//!   for as many rounds as the server needs — the client sees one ordinary call
//!   (`call`);
//! - the client's answers to those requests (JSON-RPC responses it POSTs) go to the call
//!   waiting for them; its `notifications/cancelled` ends the upstream call (2026-07-28
//!   cancels by closing the stream);
//! - the session's GET stream is one `subscriptions/listen` upstream (`listen`).
//!
//! What a bridged session holds lives in this process (a call waiting for the client,
//! the log level, the subscriptions): the session's record names this replica as its
//! owner, and other replicas forward its messages here. Nothing is held upstream: a
//! bridged session ends with nothing to end there.

mod call;
mod listen;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use http::{Response, StatusCode};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use super::headers;
use super::relay::Relay;
use super::stateless::MAX_RESOURCE_SUBSCRIPTIONS;
use crate::error::ProxyError;
use crate::jsonrpc::{IdValue, Kind, raw_str, write};
use crate::mcp::Method;
use crate::mcp::logging::LogLevel;
use crate::mcp::tools::ToolHints;
use crate::metrics::Metrics;
use crate::response::{self, ProxyBody};
use crate::route::Message;
use crate::session::{Lease, now_millis};
use crate::upstream::Upstream;

pub use listen::listen;

/// The bridged sessions of one upstream held in this process.
#[derive(Debug)]
pub struct Bridge {
    upstream: Upstream,
    metrics: Arc<Metrics>,
    /// What the upstream's tools declared (the session path's, learned from the
    /// `tools/list` results of every session).
    tools: Arc<ToolHints>,
    sessions: DashMap<String, Arc<Bridged>>,
    /// How long a call waits for its client's answers to the server's questions.
    input_wait: Duration,
    /// An upstream event stream silent this long is ended.
    sse_idle_timeout: Duration,
}

/// What one bridged session holds here.
#[derive(Debug)]
pub struct Bridged {
    /// `logging/setLevel`'s level; `None`: no log notifications (2026-07-28's reading of
    /// a request without a level), until the client asks for some.
    log_level: Mutex<Option<LogLevel>>,
    /// `resources/subscribe`d URIs; `changed` says when they change (a GET stream then
    /// listens again).
    subscriptions: Mutex<BTreeSet<String>>,
    changed: watch::Sender<u64>,
    /// The proxy's requests to the client waiting for its answers, by their ids (text).
    asked: Mutex<HashMap<String, oneshot::Sender<Bytes>>>,
    /// Calls under way, by the client's request id (its value), to cancel them.
    calls: Mutex<HashMap<IdValue<'static>, oneshot::Sender<()>>>,
    next_id: AtomicU64,
    /// When the session was last used here (ms): idle ones are forgotten.
    last_use: AtomicU64,
}

/// Requests the proxy asks one client at once, at most (a server asking more in one
/// round is answered as far as these go).
const MAX_ASKED: usize = 64;

impl Bridge {
    pub fn new(
        upstream: Upstream,
        metrics: Arc<Metrics>,
        tools: Arc<ToolHints>,
        input_wait: Duration,
        sse_idle_timeout: Duration,
    ) -> Bridge {
        Bridge {
            upstream,
            metrics,
            tools,
            sessions: DashMap::new(),
            input_wait,
            sse_idle_timeout,
        }
    }

    /// The session's state here (made at its first use on this replica).
    fn session(&self, id: &str) -> Arc<Bridged> {
        let bridged = self
            .sessions
            .entry(id.to_owned())
            .or_insert_with(|| {
                Arc::new(Bridged {
                    log_level: Mutex::new(None),
                    subscriptions: Mutex::new(BTreeSet::new()),
                    changed: watch::Sender::new(0),
                    asked: Mutex::new(HashMap::new()),
                    calls: Mutex::new(HashMap::new()),
                    next_id: AtomicU64::new(1),
                    last_use: AtomicU64::new(now_millis()),
                })
            })
            .clone();
        bridged.last_use.store(now_millis(), Ordering::Release);
        bridged
    }

    /// The session ended (deleted, expired, lost): what it held here goes. Its calls end
    /// now — cancelled upstream, their waits for the client's answers given up — rather
    /// than when those waits run out.
    pub fn forget(&self, id: &str) {
        let Some((_, bridged)) = self.sessions.remove(id) else {
            return;
        };
        for (_, cancel) in bridged.calls.lock().drain() {
            let _ = cancel.send(());
        }
        bridged.asked.lock().clear();
    }

    /// Forgets sessions unused here for `idle` (their records expired elsewhere, say).
    pub fn sweep(&self, idle: Duration) {
        let now = now_millis();
        let idle = idle.as_millis() as u64;
        self.sessions
            .retain(|_, s| now.saturating_sub(s.last_use.load(Ordering::Acquire)) <= idle);
    }

    /// The session's log level here (a session of a modern upstream that is not bridged:
    /// its requests are framed with it).
    pub fn log_level(&self, id: &str) -> Option<LogLevel> {
        let bridged = self.sessions.get(id)?;
        // In use: not swept as idle while its requests come.
        bridged.last_use.store(now_millis(), Ordering::Release);
        bridged.log_level()
    }

    /// Answers what a session keeps and a 2026-07-28 server has no method for (`ping`,
    /// `logging/setLevel`, `resources/subscribe` and `unsubscribe`), for the session `id`
    /// of a modern upstream: the result, or `None` for any other message.
    pub fn answer_session_scoped(
        &self,
        message: &Message<'_, '_>,
        id: &str,
    ) -> Option<Result<Vec<u8>, ProxyError>> {
        session_scoped(message, &self.session(id))
    }

    fn relay(&self) -> Relay<'_> {
        Relay {
            upstream: &self.upstream,
            metrics: &self.metrics,
            idle_timeout: self.sse_idle_timeout,
        }
    }

    /// Serves one message of bridged session `id` (leased by the caller).
    pub async fn forward(
        &self,
        message: &Message<'_, '_>,
        lease: &Lease,
        id: &str,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let bridged = self.session(id);
        match message.envelope.kind {
            Kind::Response => {
                answered(&bridged, message);
                Ok(response::status(StatusCode::ACCEPTED))
            }
            Kind::Notification => {
                if message.method() == Some(Method::Cancelled) {
                    cancelled(&bridged, message);
                }
                // Nothing else an old client notifies has a 2026-07-28 counterpart
                // (roots are asked for per call; `initialized` was the proxy's).
                Ok(response::status(StatusCode::ACCEPTED))
            }
            Kind::Request => self.request(message, lease, bridged).await,
        }
    }

    async fn request(
        &self,
        message: &Message<'_, '_>,
        lease: &Lease,
        bridged: Arc<Bridged>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let id = message
            .request_id()
            .map(|id| id.get().as_bytes())
            .unwrap_or(b"null");
        if let Some(result) = session_scoped(message, &bridged) {
            return Ok(response::json(StatusCode::OK, write::result(id, &result?)));
        }
        let forwarded = headers::to_upstream_in_session(message.headers);
        let call = call::Call::new(self, message, lease, bridged, forwarded)?;
        let first = call.start(self.input_wait).await?;
        Ok(first.into_response(self.relay(), None))
    }
}

/// What a session keeps and a 2026-07-28 server has no method for, answered here: the
/// result, or `None` for any other message.
fn session_scoped(
    message: &Message<'_, '_>,
    bridged: &Bridged,
) -> Option<Result<Vec<u8>, ProxyError>> {
    let method = message.method()?;
    matches!(
        method,
        Method::Ping
            | Method::LoggingSetLevel
            | Method::ResourcesSubscribe
            | Method::ResourcesUnsubscribe
    )
    .then(|| keep_in_session(message, bridged, method))
}

/// [`session_scoped`] for one of its methods.
fn keep_in_session(
    message: &Message<'_, '_>,
    bridged: &Bridged,
    method: Method,
) -> Result<Vec<u8>, ProxyError> {
    match method {
        // 2026-07-28 has no ping: the proxy, standing for the server, answers it.
        Method::Ping => Ok(b"{}".to_vec()),
        Method::LoggingSetLevel => {
            let level = message
                .params()
                .and_then(|p| p.member("level"))
                .and_then(raw_str)
                .and_then(|l| LogLevel::parse(&l))
                .ok_or(ProxyError::InvalidLogLevel)?;
            *bridged.log_level.lock() = Some(level);
            Ok(b"{}".to_vec())
        }
        Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            let uri = message
                .params()
                .and_then(|p| p.member("uri"))
                .and_then(raw_str)
                .ok_or(ProxyError::MissingUri)?;
            let changed = {
                let mut subscriptions = bridged.subscriptions.lock();
                match method {
                    Method::ResourcesSubscribe => {
                        // Every URI goes into the one `subscriptions/listen` upstream.
                        if subscriptions.len() >= MAX_RESOURCE_SUBSCRIPTIONS
                            && !subscriptions.contains(uri.as_ref())
                        {
                            return Err(ProxyError::TooManySubscriptions {
                                max: MAX_RESOURCE_SUBSCRIPTIONS,
                            });
                        }
                        subscriptions.insert(uri.into_owned())
                    }
                    _ => subscriptions.remove(uri.as_ref()),
                }
            };
            if changed {
                bridged.changed.send_modify(|n| *n += 1);
            }
            Ok(b"{}".to_vec())
        }
        _ => Ok(b"{}".to_vec()),
    }
}

/// A client's answer to one of the proxy's requests goes to the call waiting for it.
fn answered(bridged: &Bridged, message: &Message<'_, '_>) {
    let Some(id) = message.envelope.id else {
        return;
    };
    let waiter = bridged.asked.lock().remove(id.get());
    match waiter {
        Some(waiter) => {
            let _ = waiter.send(message.body.clone());
        }
        None => tracing::debug!("a client answered a request nothing waits for"),
    }
}

/// A client's `notifications/cancelled` ends its call (2026-07-28 cancels by closing
/// the request's stream, which the call then does).
fn cancelled(bridged: &Bridged, message: &Message<'_, '_>) {
    let Some(request) = message.params().and_then(|p| p.member("requestId")) else {
        return;
    };
    let Some(request) = IdValue::of(request.get().as_bytes()).map(IdValue::into_owned) else {
        return;
    };
    if let Some(cancel) = bridged.calls.lock().remove(&request) {
        let _ = cancel.send(());
    }
}

impl Bridged {
    fn log_level(&self) -> Option<LogLevel> {
        *self.log_level.lock()
    }

    /// A fresh id for a request of the proxy's to the client.
    fn next_request_id(&self) -> Bytes {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        Bytes::from(format!("\"mcp-session-proxy-input-{n}\""))
    }

    /// Waits for the client's answer to request `id` (raw JSON), registered now.
    fn ask(&self, id: &Bytes) -> Option<oneshot::Receiver<Bytes>> {
        let mut asked = self.asked.lock();
        if asked.len() >= MAX_ASKED {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        asked.insert(String::from_utf8_lossy(id).into_owned(), tx);
        Some(rx)
    }

    /// Stops waiting for the answers to `ids`.
    fn unask(&self, ids: &[Bytes]) {
        let mut asked = self.asked.lock();
        for id in ids {
            asked.remove(String::from_utf8_lossy(id).as_ref());
        }
    }
}
