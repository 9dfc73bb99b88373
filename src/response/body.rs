//! The response body of every route: one enum, so no response is boxed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

use super::timed::Timed;
use crate::error::ProxyError;
use crate::fairness::Held;
use crate::jsonrpc::write;
use crate::mcp::tools::ToolHints;
use crate::metrics::StreamGuard;
use crate::rewrite::to_client::StampEvents;
use crate::rewrite::visible::Visible;
use crate::sse::{Decoded, End, Event, EventBody, Rewrite, Unchanged};
use crate::upstream::{Messages, UpstreamBody, UpstreamError};

/// An event stream of upstream messages, as the proxy writes it.
pub type SseBody = EventBody<Messages, EventRewrite>;

/// What happens to the events of a stream on their way to the client.
#[derive(Debug)]
pub enum EventRewrite {
    /// The response to the client's request gets the session stamped into it; a stream
    /// that ends without it ends with an error for the request instead.
    Stamp {
        stamp: StampEvents,
        /// How errors name the upstream.
        upstream: Arc<str>,
        /// Learns tool annotations from the response (a `tools/list`).
        learn: Option<Arc<ToolHints>>,
    },
    /// Passed as they are.
    Unchanged,
}

impl Rewrite for EventRewrite {
    fn event(&mut self, event: &mut Event) {
        match self {
            EventRewrite::Stamp { stamp, learn, .. } => {
                let before = stamp.responded();
                stamp.event(event);
                if let (Some(hints), false, true, Some(data)) =
                    (learn, before, stamp.responded(), &event.data)
                {
                    hints.learn(data.as_bytes());
                }
            }
            EventRewrite::Unchanged => Unchanged.event(event),
        }
    }

    fn end(&mut self, how: End) -> Option<Event> {
        match self {
            EventRewrite::Stamp { stamp, .. } if stamp.responded() => None,
            EventRewrite::Stamp {
                stamp, upstream, ..
            } => {
                let error = ProxyError::Upstream {
                    upstream: upstream.to_string(),
                    source: UpstreamError::from(how),
                };
                let (_, object, _) = error.answer();
                tracing::warn!(error = %error, "an upstream event stream ended without the response");
                let message = write::error(Some(stamp.request_id()), &object);
                Some(Event {
                    data: Some(String::from_utf8_lossy(&message).into_owned()),
                    ..Event::default()
                })
            }
            EventRewrite::Unchanged => Unchanged.end(how),
        }
    }
}

pin_project! {
    #[project = Projection]
    pub enum ProxyBody {
        /// A body the proxy built (errors, JSON responses after rewriting).
        Full { #[pin] body: Full<Bytes> },
        /// An upstream body passed on untouched (old clients passed through); counted
        /// while open when it is an event stream.
        Untouched { #[pin] body: UpstreamBody, open: Option<StreamGuard> },
        /// An event stream of JSON-RPC messages, written event by event as they come
        /// (boxed: the largest body, it would make every response as large).
        Events { body: Pin<Box<SseBody>>, open: StreamGuard },
        /// Another proxy replica's answer to a request forwarded there, passed on as it
        /// comes; its caller's place among the requests in flight is held until it ends.
        Forwarded { #[pin] body: UpstreamBody, held: Held },
        /// Another body's event stream, its list response shown as one caller may see
        /// it (`rewrite::visible`), event by event.
        Visible { body: Pin<Box<VisibleEvents>> },
        /// Another body's event stream, ended at a tool's deadline (`super::timed`).
        Timed { body: Pin<Box<Timed<ProxyBody>>> },
    }
}

/// An event stream whose list response is filtered for its caller.
pub type VisibleEvents = EventBody<Decoded<Pin<Box<ProxyBody>>>, Visible>;

impl Default for ProxyBody {
    fn default() -> Self {
        ProxyBody::empty()
    }
}

impl ProxyBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        ProxyBody::Full {
            body: Full::new(bytes.into()),
        }
    }

    pub fn empty() -> Self {
        ProxyBody::Full {
            body: Full::default(),
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.project() {
            Projection::Full { body } => body.poll_frame(cx).map_err(|never| match never {}),
            Projection::Untouched { body, .. } => body.poll_frame(cx),
            Projection::Events { body, .. } => {
                body.as_mut().poll_frame(cx).map_err(|never| match never {})
            }
            Projection::Forwarded { body, .. } => body.poll_frame(cx),
            Projection::Visible { body } => {
                body.as_mut().poll_frame(cx).map_err(|never| match never {})
            }
            Projection::Timed { body } => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full { body } => body.is_end_stream(),
            ProxyBody::Untouched { body, .. } => body.is_end_stream(),
            ProxyBody::Events { body, .. } => body.is_end_stream(),
            ProxyBody::Forwarded { body, .. } => body.is_end_stream(),
            ProxyBody::Visible { body } => body.is_end_stream(),
            ProxyBody::Timed { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full { body } => body.size_hint(),
            ProxyBody::Untouched { body, .. } => body.size_hint(),
            ProxyBody::Events { .. } | ProxyBody::Visible { .. } | ProxyBody::Timed { .. } => {
                SizeHint::default()
            }
            ProxyBody::Forwarded { body, .. } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::meta;
    use crate::rewrite::to_client::Stamp;

    fn stamping() -> EventRewrite {
        EventRewrite::Stamp {
            stamp: StampEvents::new(Stamp {
                request_id: Bytes::from_static(b"2"),
                session: Bytes::from(meta::session_stamp("s", "st", "2026-03-01T00:00:00Z")),
                top_level: None,
                complete: false,
            }),
            upstream: Arc::from("http://up/mcp"),
            learn: None,
        }
    }

    #[test]
    fn an_event_stream_that_ends_without_the_response_gets_an_error() {
        let mut events = stamping();
        let last = events.end(End::Complete).unwrap();
        let v: serde_json::Value = serde_json::from_str(last.data.as_deref().unwrap()).unwrap();
        assert_eq!(v["id"], 2);
        assert_eq!(v["error"]["code"], -32603);
        assert_eq!(v["error"]["data"]["upstream"], "http://up/mcp");
    }

    #[test]
    fn an_answered_stream_ends_quietly() {
        let mut events = stamping();
        let mut response = Event {
            data: Some(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#.into()),
            ..Event::default()
        };
        events.event(&mut response);
        assert!(events.end(End::Complete).is_none());
    }
}
