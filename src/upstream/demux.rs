//! Matching what an upstream sends in one session to the requests waiting for it, for
//! the transports on which every message of a session arrives on one stream: a stdio
//! child's stdout (2025-11-25 "Transports", stdio) and an HTTP+SSE session's `GET`
//! stream (2024-11-05 "Transports", HTTP with SSE).
//!
//! The proxy gives every request it sends a fresh numeric id ([`Demux::request`]), so
//! requests from different clients (or two with the same id) never collide in the
//! session, and puts the client's id back on the response; a client's
//! `notifications/cancelled` is rewritten to the id the upstream knows
//! ([`Demux::outgoing`]). Each message from the upstream ([`Demux::dispatch`]) goes to:
//! a response, to its request by id; `notifications/progress`, to the request that gave
//! its token (renamed too, as the id is: two clients sharing a session may both call
//! their token `1`; the client's own goes back on its progress); anything else, to the only request in flight, else to the session's listen
//! stream, else to the oldest request. A response is never dropped (a reader still behind
//! a burst of notifications gets it once it has room); a notification for a reader that
//! is slow or gone is (it must not stall the session's other requests).
//!
//! This module knows neither pipes nor HTTP: the transport writes what it is given and
//! feeds what it reads. When the session dies ([`Demux::die`]), every request in flight
//! hears why, in the transport's own terms ([`Failure`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::answer::Delivery;
use super::error::UpstreamError;
use crate::jsonrpc::{Envelope, EnvelopeError, Kind, RawObject, range_in, same_id, splice};
use crate::mcp::Method;
use crate::mcp::meta::Payload;

/// Messages queued for one request (or the listen stream) before its reader takes them.
pub const QUEUE: usize = 64;

/// Why a session died, as its transport tells it.
pub trait Failure: Clone + Send + 'static {
    /// What a request in flight (or a later use) hears.
    fn error(&self) -> UpstreamError;
}

/// See the module documentation.
#[derive(Debug)]
pub struct Demux<F> {
    /// How the log names the session.
    name: String,
    state: Mutex<State<F>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct State<F> {
    pending: HashMap<u64, Pending>,
    /// Proxy ids of requests in flight, oldest first.
    order: VecDeque<u64>,
    listen: Option<mpsc::Sender<Delivery>>,
    /// Why the session is unusable, once it is.
    dead: Option<F>,
}

#[derive(Debug)]
struct Pending {
    /// The client's id, raw JSON.
    original_id: Bytes,
    /// The client's `_meta.progressToken`, raw JSON; the upstream knows it by the proxy
    /// id (a number) instead.
    progress_token: Option<Bytes>,
    tx: mpsc::Sender<Delivery>,
}

/// A request registered in the session, to be sent.
#[derive(Debug)]
pub struct Registered {
    /// The request with the proxy's id in place of the client's.
    pub message: Bytes,
    /// The proxy's id, to [`Demux::forget`] it if it could not be sent.
    pub proxy_id: u64,
    /// Its messages, the last being its response.
    pub rx: mpsc::Receiver<Delivery>,
}

impl<F> State<F> {
    /// Forgets requests whose client stopped waiting (timed out, disconnected): they must
    /// not count as in flight when routing the upstream's messages.
    fn prune(&mut self) {
        let pending = &mut self.pending;
        pending.retain(|_, p| !p.tx.is_closed());
        self.order.retain(|id| pending.contains_key(id));
    }
}

impl<F: Failure> Demux<F> {
    /// A session named `name` in the log.
    pub fn new(name: impl Into<String>) -> Demux<F> {
        Demux {
            name: name.into(),
            state: Mutex::new(State {
                pending: HashMap::new(),
                order: VecDeque::new(),
                listen: None,
                dead: None,
            }),
            next_id: AtomicU64::new(1),
        }
    }

    /// Registers a request (`message` must be a JSON-RPC request) under a fresh proxy id:
    /// from now on its messages are routed to it.
    pub fn request(&self, message: &[u8]) -> Result<Registered, UpstreamError> {
        let envelope = Envelope::parse(message)
            .map_err(|e| UpstreamError::Protocol(format!("not a request: {e}")))?;
        let Some(id) = envelope.id else {
            return Err(UpstreamError::Protocol("a request without an id".into()));
        };
        let proxy_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let ours = proxy_id.to_string();
        let token = envelope
            .params
            .and_then(RawObject::parse)
            .and_then(|params| params.get("_meta").and_then(RawObject::parse))
            .and_then(|meta| meta.get("progressToken"));
        // The id and the progress token both become the proxy id.
        let mut parts: Vec<&RawValue> = std::iter::once(id).chain(token).collect();
        parts.sort_by_key(|part| part.get().as_ptr());
        let renamed = splice_all(message, &parts, ours.as_bytes()).ok_or_else(|| {
            UpstreamError::Protocol("the request id could not be rewritten".into())
        })?;
        let progress_token = token.map(|token| Bytes::copy_from_slice(token.get().as_bytes()));
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut state = self.state.lock();
        if let Some(failure) = &state.dead {
            return Err(failure.error());
        }
        state.prune();
        state.pending.insert(
            proxy_id,
            Pending {
                original_id: Bytes::copy_from_slice(id.get().as_bytes()),
                progress_token,
                tx,
            },
        );
        state.order.push_back(proxy_id);
        Ok(Registered {
            message: Bytes::from(renamed),
            proxy_id,
            rx,
        })
    }

    /// Forgets a registered request (it could not be sent).
    pub fn forget(&self, proxy_id: u64) {
        let mut state = self.state.lock();
        state.pending.remove(&proxy_id);
        state.order.retain(|id| *id != proxy_id);
    }

    /// A notification, or a response to one of the upstream's own requests, as it must
    /// be sent: a `notifications/cancelled` names the request by the id the upstream
    /// knows; anything else goes as it is.
    pub fn outgoing(&self, message: Bytes) -> Result<Bytes, UpstreamError> {
        let state = self.state.lock();
        if let Some(failure) = &state.dead {
            return Err(failure.error());
        }
        Ok(rewrite_cancelled(&message, &state.pending).unwrap_or(message))
    }

    /// The session's listen stream: messages no request claims. A new one replaces the
    /// previous one.
    pub fn listen(&self) -> Result<mpsc::Receiver<Delivery>, UpstreamError> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut state = self.state.lock();
        if let Some(failure) = &state.dead {
            return Err(failure.error());
        }
        state.listen = Some(tx);
        Ok(rx)
    }

    /// Whether the session can take messages.
    pub fn is_alive(&self) -> bool {
        self.state.lock().dead.is_none()
    }

    /// Why the session died, once it did.
    pub fn failure(&self) -> Option<F> {
        self.state.lock().dead.clone()
    }

    /// Marks the session unusable and fails every request in flight with `failure`; the
    /// listen stream ends. Whether this call did it (the session was alive).
    pub fn die(&self, failure: F) -> bool {
        let pending = {
            let mut state = self.state.lock();
            if state.dead.is_some() {
                return false;
            }
            state.dead = Some(failure.clone());
            state.listen = None;
            state.order.clear();
            std::mem::take(&mut state.pending)
        };
        for (_, request) in pending {
            let _ = request.tx.try_send(Err(failure.error()));
        }
        true
    }

    /// Routes one message from the upstream (see the module documentation). An error
    /// means the message is not JSON-RPC: the upstream broke the protocol.
    pub fn dispatch(&self, message: &[u8]) -> Result<(), EnvelopeError> {
        let envelope = Envelope::parse(message)?;
        let mut state = self.state.lock();
        match envelope.kind {
            Kind::Response => {
                let proxy_id = envelope
                    .id
                    .and_then(|id| id.get().parse::<u64>().ok())
                    .filter(|id| state.pending.contains_key(id));
                let Some(proxy_id) = proxy_id else {
                    tracing::debug!(session = %self.name, "response to no request in flight; dropped");
                    return Ok(());
                };
                state.order.retain(|id| *id != proxy_id);
                let Some(request) = state.pending.remove(&proxy_id) else {
                    return Ok(());
                };
                drop(state);
                let restored = match envelope
                    .id
                    .and_then(|id| splice(message, id, &request.original_id))
                {
                    Some(restored) => Bytes::from(restored),
                    None => Bytes::copy_from_slice(message),
                };
                // The answer itself is never dropped: a reader still behind a burst of
                // notifications gets it once it has room (one task per answer, and
                // answers are bounded by the requests in flight).
                if let Err(mpsc::error::TrySendError::Full(restored)) =
                    request.tx.try_send(Ok(restored))
                {
                    tokio::spawn(async move {
                        let _ = request.tx.send(restored).await;
                    });
                }
            }
            Kind::Request | Kind::Notification => {
                state.prune();
                // Progress names its request by the token the proxy gave it (the proxy
                // id), and goes to the client with the client's own token.
                let progress = (envelope.method() == Method::Progress.as_str())
                    .then(|| {
                        let token = envelope
                            .params
                            .and_then(RawObject::parse)
                            .and_then(|p| p.get("progressToken"))?;
                        let proxy_id = token.get().parse::<u64>().ok()?;
                        let pending = state.pending.get(&proxy_id)?;
                        let original = pending.progress_token.as_ref()?;
                        let restored = splice(message, token, original)?;
                        Some((pending.tx.clone(), Bytes::from(restored)))
                    })
                    .flatten();
                if let Some((tx, restored)) = progress {
                    drop(state);
                    if tx.try_send(Ok(restored)).is_err() {
                        tracing::debug!(session = %self.name, "progress for a slow or gone reader was dropped");
                    }
                    return Ok(());
                }
                let oldest = || {
                    state
                        .order
                        .front()
                        .and_then(|id| state.pending.get(id))
                        .map(|p| p.tx.clone())
                };
                let target = (state.order.len() == 1)
                    .then(oldest)
                    .flatten()
                    .or_else(|| state.listen.clone().filter(|tx| !tx.is_closed()))
                    .or_else(oldest);
                drop(state);
                match target {
                    // A slow reader loses messages rather than stalling the session's
                    // other requests.
                    Some(tx) => {
                        if tx.try_send(Ok(Bytes::copy_from_slice(message))).is_err() {
                            tracing::debug!(session = %self.name, "a message for a slow or gone reader was dropped");
                        }
                    }
                    None => {
                        tracing::debug!(session = %self.name, "a message with nowhere to go was dropped")
                    }
                }
            }
        }
        Ok(())
    }
}

/// `notifications/cancelled` for a request in flight, with `requestId` rewritten to the
/// id the upstream knows; `None` for anything else.
fn rewrite_cancelled(message: &[u8], pending: &HashMap<u64, Pending>) -> Option<Bytes> {
    let envelope = Envelope::parse(message).ok()?;
    if envelope.method() != Method::Cancelled.as_str() {
        return None;
    }
    let params_raw = envelope.params?;
    let params = Payload::open(params_raw).ok()??;
    let request_id = params.member("requestId")?;
    let (proxy_id, _) = pending
        .iter()
        .find(|(_, p)| same_id(&p.original_id, request_id.get()))?;
    let rewritten = params.edited(
        &[],
        &[],
        &[("requestId", proxy_id.to_string().as_bytes())],
        &[],
    );
    splice(message, params_raw, &rewritten).map(Bytes::from)
}

#[cfg(test)]
mod tests;

/// `message` with each of `parts` (raw values inside it, in the order they appear)
/// replaced by `with`; `None` when a part is not inside it.
fn splice_all(message: &[u8], parts: &[&RawValue], with: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(message.len() + parts.len() * with.len());
    let mut at = 0;
    for part in parts {
        let range = range_in(message, part)?;
        out.extend_from_slice(message.get(at..range.start)?);
        out.extend_from_slice(with);
        at = range.end;
    }
    out.extend_from_slice(&message[at..]);
    Some(out)
}
