//! The response body type of every route: one enum, so no response is boxed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use crate::metrics::StreamGuard;
use crate::rewrite::to_client::StampEvents;
use crate::sse::{MessageStream, RewriteBody, Unchanged};

pin_project! {
    #[project = Projection]
    pub enum ProxyBody {
        /// A body the proxy built (errors, JSON responses after rewriting).
        Full { #[pin] body: Full<Bytes> },
        /// An upstream body passed through untouched (legacy pass-through, GET streams);
        /// counted while open when it is an event stream.
        Stream { #[pin] body: Incoming, open: Option<StreamGuard> },
        /// An upstream event stream, stamped event by event.
        Stamped { #[pin] body: RewriteBody<Incoming, StampEvents>, open: StreamGuard },
        /// A stdio child's messages for a request, as events, the response stamped.
        Messages { #[pin] body: MessageStream<StampEvents>, open: StreamGuard },
        /// A stdio child's messages, as events, untouched.
        Listen { #[pin] body: MessageStream<Unchanged>, open: StreamGuard },
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
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.project() {
            Projection::Full { body } => body.poll_frame(cx).map_err(|never| match never {}),
            Projection::Stream { body, .. } => body.poll_frame(cx),
            Projection::Stamped { body, .. } => body.poll_frame(cx).map_err(|never| match never {}),
            Projection::Messages { body, .. } => {
                body.poll_frame(cx).map_err(|never| match never {})
            }
            Projection::Listen { body, .. } => body.poll_frame(cx).map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full { body } => body.is_end_stream(),
            ProxyBody::Stream { body, .. } => body.is_end_stream(),
            ProxyBody::Stamped { .. } | ProxyBody::Messages { .. } | ProxyBody::Listen { .. } => {
                false
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full { body } => body.size_hint(),
            ProxyBody::Stream { body, .. } => body.size_hint(),
            ProxyBody::Stamped { .. } | ProxyBody::Messages { .. } | ProxyBody::Listen { .. } => {
                SizeHint::default()
            }
        }
    }
}
