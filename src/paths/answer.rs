//! The client's answer to a call that a task drives (a stateless call, a bridged call of
//! an old client): it starts as nothing, becomes a JSON body if the call's only message
//! is its last, or an event stream as soon as something must go out first (progress, a
//! log, a server request) — decided as the messages come, never by waiting for the end.
//!
//! The request's handler awaits the [`First`] of an [`Answer`] and turns it into the HTTP
//! response; the task writes to the `Answer` and notices when the client has gone.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use tokio::sync::{mpsc, oneshot};

use super::relay::Relay;
use crate::error::ProxyError;
use crate::jsonrpc::write;
use crate::response::{self, ProxyBody};
use crate::rewrite::to_client::{Stamp, Stamped, stamp_message};
use crate::upstream::{Delivery, Messages};

/// Messages queued for the client's event stream before the task waits.
const QUEUE: usize = 64;

/// How the client's HTTP answer starts: a JSON body, or an event stream.
#[derive(Debug)]
pub enum First {
    Json(StatusCode, Bytes),
    /// The proxy's own error, with when to retry (`Retry-After`) where it says.
    Refused {
        status: StatusCode,
        body: Bytes,
        retry_after: Option<Duration>,
    },
    Stream(Bytes, mpsc::Receiver<Delivery>),
}

impl First {
    /// The HTTP response it starts; `stamp`, what the response to the request carries
    /// besides (a data-layer session's `_meta`), if anything.
    pub fn into_response(self, relay: Relay<'_>, stamp: Option<Stamp>) -> Response<ProxyBody> {
        match self {
            First::Json(status, body) => {
                let body = match stamp.as_ref().map(|stamp| stamp_message(&body, stamp)) {
                    Some(Stamped::Response(Some(stamped))) => Bytes::from(stamped),
                    _ => body,
                };
                response::json(status, body)
            }
            First::Refused {
                status,
                body,
                retry_after,
            } => {
                let mut response = response::json(status, body);
                if let Some(after) = retry_after
                    && let Ok(value) = HeaderValue::from_str(&after.as_secs().max(1).to_string())
                {
                    response.headers_mut().insert(RETRY_AFTER, value);
                }
                response
            }
            First::Stream(first, rest) => {
                let messages = Messages::Channel {
                    first: Some(first),
                    rx: rest,
                };
                response::events(relay.stream(messages, stamp))
            }
        }
    }
}

/// Where the client's answer goes now.
#[derive(Debug)]
pub enum Answer {
    /// Nothing sent yet: the answer may still be JSON with any status.
    Head(oneshot::Sender<First>),
    /// An event stream is open.
    Stream(mpsc::Sender<Delivery>),
    /// No one is listening (answered already, or gone).
    Gone,
}

impl Answer {
    /// A new answer, and where its start will arrive.
    pub fn new() -> (Answer, oneshot::Receiver<First>) {
        let (tx, rx) = oneshot::channel();
        (Answer::Head(tx), rx)
    }

    /// Sends a message that is not the last. `false` when the client has gone.
    pub async fn emit(&mut self, message: Bytes) -> bool {
        match std::mem::replace(self, Answer::Gone) {
            Answer::Head(first) => {
                let (tx, rx) = mpsc::channel(QUEUE);
                if first.send(First::Stream(message, rx)).is_err() {
                    return false;
                }
                *self = Answer::Stream(tx);
                true
            }
            Answer::Stream(tx) => {
                let sent = tx.send(Ok(message)).await.is_ok();
                if sent {
                    *self = Answer::Stream(tx);
                }
                sent
            }
            Answer::Gone => true,
        }
    }

    /// Whether the client has stopped listening already (it disconnected).
    pub fn is_closed(&self) -> bool {
        match self {
            Answer::Head(first) => first.is_closed(),
            Answer::Stream(tx) => tx.is_closed(),
            Answer::Gone => false,
        }
    }

    /// Resolves once the client has stopped listening (it disconnected): nothing is
    /// waiting for this answer any more. Never, when nothing was waiting.
    pub async fn gone(&mut self) {
        match self {
            Answer::Head(first) => first.closed().await,
            Answer::Stream(tx) => tx.closed().await,
            Answer::Gone => std::future::pending().await,
        }
    }

    /// Ends the call with the proxy's own error (as its whole answer, with its status
    /// and `Retry-After`; in-band when an event stream is open), the request being `id`
    /// (raw).
    pub async fn fail(&mut self, id: &[u8], error: &ProxyError) {
        let (status, object, _) = error.answer();
        tracing::debug!(error = %error, "a driven call failed");
        let body = write::error(Some(id), &object);
        match std::mem::replace(self, Answer::Gone) {
            Answer::Head(first) => {
                let _ = first.send(First::Refused {
                    status,
                    body,
                    retry_after: error.retry_after(),
                });
            }
            Answer::Stream(tx) => {
                let _ = tx.send(Ok(body)).await;
            }
            Answer::Gone => {}
        }
    }

    /// Sends the last message.
    pub async fn finish(&mut self, status: StatusCode, message: Bytes) {
        match std::mem::replace(self, Answer::Gone) {
            Answer::Head(first) => {
                let _ = first.send(First::Json(status, message));
            }
            Answer::Stream(tx) => {
                let _ = tx.send(Ok(message)).await;
            }
            Answer::Gone => {}
        }
    }
}
