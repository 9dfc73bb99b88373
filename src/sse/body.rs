//! The response body of every event stream the proxy writes: items from an
//! [`ItemSource`], each event rewritten (or not) on its way, re-encoded and sent on at
//! once. Nothing waits for the end of the stream.
//!
//! A stream that fails, stalls past the idle timeout or sends an oversized event is ended
//! cleanly, and the [`Rewrite`] may add a last event saying so (the client then gets a
//! JSON-RPC error instead of a cut connection).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::decoder::{Event, Item};
use super::encoder::{write_event, write_item};
use super::source::{End, ItemSource};

/// What to do with each event of a stream.
pub trait Rewrite: Send + 'static {
    /// Rewrites one event in place (or leaves it as it is).
    fn event(&mut self, event: &mut Event);
    /// The stream ended; the returned event, if any, is the last one the client sees.
    fn end(&mut self, how: End) -> Option<Event>;
}

/// Passes events as they are (a stream no one needs to rewrite).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unchanged;

impl Rewrite for Unchanged {
    fn event(&mut self, _: &mut Event) {}
    fn end(&mut self, _: End) -> Option<Event> {
        None
    }
}

/// Bytes gathered into one frame before it is sent, when many items are ready at once.
const FRAME_BYTES: usize = 64 * 1024;

pin_project! {
    /// See the module documentation.
    pub struct EventBody<S, R> {
        source: S,
        #[pin]
        idle: Sleep,
        idle_timeout: Duration,
        rewrite: R,
        done: bool,
    }
}

impl<S, R> EventBody<S, R> {
    /// Streams `source` rewritten by `rewrite`, ended after `idle_timeout` without an
    /// item.
    pub fn new(source: S, rewrite: R, idle_timeout: Duration) -> Self {
        EventBody {
            source,
            idle: tokio::time::sleep(idle_timeout),
            idle_timeout,
            rewrite,
            done: false,
        }
    }
}

impl<S: ItemSource, R: Rewrite> Body for EventBody<S, R> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let mut out = Vec::new();
        let end = loop {
            match this.source.poll_item(cx) {
                Poll::Ready(Some(Ok(mut item))) => {
                    if let Item::Event(event) = &mut item {
                        this.rewrite.event(event);
                    }
                    write_item(&mut out, &item);
                    let deadline = Instant::now() + *this.idle_timeout;
                    this.idle.as_mut().reset(deadline);
                    if out.len() >= FRAME_BYTES {
                        break None;
                    }
                }
                Poll::Ready(Some(Err(end))) => break Some(end),
                Poll::Ready(None) => break Some(End::Complete),
                Poll::Pending if !out.is_empty() => break None,
                Poll::Pending => match this.idle.as_mut().poll(cx) {
                    Poll::Ready(()) => break Some(End::Idle(*this.idle_timeout)),
                    Poll::Pending => return Poll::Pending,
                },
            }
        };
        if let Some(end) = end {
            *this.done = true;
            if let Some(last) = this.rewrite.end(end) {
                write_event(&mut out, &last);
            }
        }
        if out.is_empty() {
            Poll::Ready(None)
        } else {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
