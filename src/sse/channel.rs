//! A response body that turns a channel of JSON-RPC messages into an event stream, each
//! message one `event: message` event, rewritten on the way (stdio upstreams produce
//! messages, not HTTP bodies).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use super::body::{End, Rewrite};
use super::decoder::Event;
use super::encoder::write_event;

pin_project! {
    /// See the module documentation.
    pub struct MessageStream<R> {
        first: Option<Bytes>,
        messages: mpsc::Receiver<Bytes>,
        #[pin]
        idle: Sleep,
        idle_timeout: Duration,
        rewrite: R,
        done: bool,
    }
}

impl<R> MessageStream<R> {
    /// Streams `first` (a message already received) and then `messages`; ends the stream
    /// after `idle_timeout` without a message.
    pub fn new(
        first: Option<Bytes>,
        messages: mpsc::Receiver<Bytes>,
        rewrite: R,
        idle_timeout: Duration,
    ) -> Self {
        MessageStream {
            first,
            messages,
            idle: tokio::time::sleep(idle_timeout),
            idle_timeout,
            rewrite,
            done: false,
        }
    }
}

/// A message as one event.
fn event(message: &[u8]) -> Event {
    Event {
        event: Some("message".into()),
        data: Some(String::from_utf8_lossy(message).into_owned()),
        ..Event::default()
    }
}

impl<R: Rewrite> Body for MessageStream<R> {
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
        if let Some(first) = this.first.take() {
            let mut e = event(&first);
            this.rewrite.event(&mut e);
            write_event(&mut out, &e);
        }
        let end = loop {
            match this.messages.poll_recv(cx) {
                Poll::Ready(Some(message)) => {
                    let mut e = event(&message);
                    this.rewrite.event(&mut e);
                    write_event(&mut out, &e);
                    let deadline = Instant::now() + *this.idle_timeout;
                    this.idle.as_mut().reset(deadline);
                }
                Poll::Ready(None) => break Some(End::Complete),
                Poll::Pending => match this.idle.as_mut().poll(cx) {
                    Poll::Ready(()) => break Some(End::Idle(*this.idle_timeout)),
                    Poll::Pending => break None,
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
            if *this.done {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        } else {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
        }
    }
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
