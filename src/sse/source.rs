//! Where the events of a stream come from: anything that yields SSE items one at a time
//! ([`ItemSource`]) — an HTTP body decoded as it arrives ([`Decoded`]), or JSON-RPC
//! messages produced one by one (a stdio child's), each wrapped as an event.

use std::collections::VecDeque;
use std::fmt::Display;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body;

use super::decoder::{Decoder, Item};

/// Why a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The source finished the stream.
    Complete,
    /// The source's connection failed mid-stream.
    Failed(String),
    /// Nothing arrived for this long.
    Idle(Duration),
    /// An event was larger than this many bytes.
    TooLarge(usize),
}

/// A stream of SSE items. `Err` ends the stream early (`End::Failed` or
/// `End::TooLarge`); `None` is its normal end.
pub trait ItemSource: Send + Unpin {
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Item, End>>>;
}

/// An HTTP body read as an event stream, decoded frame by frame: at most one
/// unfinished event is held (capped by the decoder's limit).
#[derive(Debug)]
pub struct Decoded<B> {
    body: B,
    decoder: Decoder,
    ready: VecDeque<Item>,
    scratch: Vec<Item>,
    /// How the stream ended, once the items before it have been taken.
    ended: Option<Option<End>>,
}

impl<B> Decoded<B> {
    /// Decodes `body`, refusing events larger than `limit` bytes.
    pub fn new(body: B, limit: usize) -> Self {
        Decoded {
            body,
            decoder: Decoder::new(limit),
            ready: VecDeque::new(),
            scratch: Vec::new(),
            ended: None,
        }
    }
}

impl<B> ItemSource for Decoded<B>
where
    B: Body<Data = Bytes> + Send + Unpin,
    B::Error: Display,
{
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Item, End>>> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(item)));
            }
            if let Some(ended) = &mut self.ended {
                return Poll::Ready(ended.take().map(Err));
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry no events.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let fed = self.decoder.feed(&data, &mut self.scratch);
                    self.ready.extend(self.scratch.drain(..));
                    if let Err(too_large) = fed {
                        self.decoder.finish();
                        self.ended = Some(Some(End::TooLarge(too_large.limit)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.decoder.finish();
                    self.ended = Some(Some(End::Failed(e.to_string())));
                }
                Poll::Ready(None) => {
                    self.decoder.finish();
                    self.ended = Some(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
