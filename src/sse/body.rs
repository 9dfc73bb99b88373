//! A response body that rewrites an upstream event stream event by event.
//!
//! Each upstream frame is decoded, its complete events rewritten and re-encoded, and the
//! result sent on at once: nothing waits for the end of the stream, and at most one
//! unfinished event is held. A stream that fails, stalls past the idle timeout or sends an
//! oversized event is ended cleanly, and the [`Rewrite`] may add a last event saying so
//! (the client then gets a JSON-RPC error instead of a cut connection).

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::decoder::{Decoder, Event, Item};
use super::encoder::{write_event, write_item};

/// Why a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The upstream finished the stream.
    Complete,
    /// The upstream connection failed mid-stream.
    Failed(String),
    /// Nothing arrived for this long.
    Idle(Duration),
    /// An event was larger than this many bytes.
    TooLarge(usize),
}

/// What to do with each event of a stream.
pub trait Rewrite: Send + 'static {
    /// Rewrites one event in place (or leaves it as it is).
    fn event(&mut self, event: &mut Event);
    /// The stream ended; the returned event, if any, is the last one the client sees.
    fn end(&mut self, how: End) -> Option<Event>;
}

pin_project! {
    /// See the module documentation.
    pub struct RewriteBody<B, R> {
        #[pin]
        inner: B,
        #[pin]
        idle: Sleep,
        idle_timeout: Duration,
        decoder: Decoder,
        rewrite: R,
        items: Vec<Item>,
        done: bool,
    }
}

impl<B, R> RewriteBody<B, R> {
    /// Rewrites `inner` with `rewrite`, refusing events over `max_event_bytes` and ending
    /// the stream after `idle_timeout` without a frame.
    pub fn new(inner: B, rewrite: R, max_event_bytes: usize, idle_timeout: Duration) -> Self {
        RewriteBody {
            inner,
            idle: tokio::time::sleep(idle_timeout),
            idle_timeout,
            decoder: Decoder::new(max_event_bytes),
            rewrite,
            items: Vec::new(),
            done: false,
        }
    }
}

impl<B, R> Body for RewriteBody<B, R>
where
    B: Body<Data = Bytes>,
    B::Error: Display,
    R: Rewrite,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let mut this = self.project();
        loop {
            if *this.done {
                return Poll::Ready(None);
            }
            let end = match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let data = match frame.into_data() {
                        Ok(data) => data,
                        // Trailers pass through untouched.
                        Err(frame) => return Poll::Ready(Some(Ok(frame))),
                    };
                    let deadline = Instant::now() + *this.idle_timeout;
                    this.idle.as_mut().reset(deadline);
                    let fed = this.decoder.feed(&data, this.items);
                    let mut out = Vec::with_capacity(data.len() + 128);
                    for mut item in this.items.drain(..) {
                        if let Item::Event(event) = &mut item {
                            this.rewrite.event(event);
                        }
                        write_item(&mut out, &item);
                    }
                    if let Err(too_large) = fed {
                        *this.done = true;
                        this.decoder.finish();
                        if let Some(last) = this.rewrite.end(End::TooLarge(too_large.limit)) {
                            write_event(&mut out, &last);
                        }
                    }
                    if out.is_empty() {
                        continue;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Poll::Ready(Some(Err(e))) => End::Failed(e.to_string()),
                Poll::Ready(None) => End::Complete,
                Poll::Pending => match this.idle.as_mut().poll(cx) {
                    Poll::Ready(()) => End::Idle(*this.idle_timeout),
                    Poll::Pending => return Poll::Pending,
                },
            };
            *this.done = true;
            this.decoder.finish();
            return match this.rewrite.end(end) {
                Some(last) => {
                    let mut out = Vec::with_capacity(256);
                    write_event(&mut out, &last);
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
                }
                None => Poll::Ready(None),
            };
        }
    }
}
