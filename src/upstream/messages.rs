//! An upstream answer read as a sequence of JSON-RPC messages, whatever carried it: a
//! JSON body, an event stream, or a stdio child's channel. For callers that act on each
//! message (the stateless front) rather than pass a body through.

use std::collections::VecDeque;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::read::{Media, media_type, read_body};
use super::{Reply, UpstreamError};
use crate::sse::{Decoder, Item};

/// See the module documentation.
#[derive(Debug)]
pub enum Messages {
    /// A single message (a JSON body), then the end.
    One(Option<Bytes>),
    /// An event stream, decoded as it arrives.
    Events {
        body: Incoming,
        decoder: Decoder,
        ready: VecDeque<Bytes>,
    },
    /// A stdio child's messages.
    Channel(mpsc::Receiver<Bytes>),
    /// Nothing (a 202, or an answer with no body).
    Nothing,
}

impl Messages {
    /// Reads `reply` as messages, with the HTTP status it came with (200 for stdio). A
    /// non-2xx answer whose body is JSON is one message (a JSON-RPC error); any other
    /// failure status is an error.
    pub async fn of(
        reply: Reply,
        limit: usize,
        timeout: std::time::Duration,
    ) -> Result<(http::StatusCode, Messages), UpstreamError> {
        let response = match reply {
            Reply::Http(response) => response,
            Reply::Messages(messages) => {
                return Ok((http::StatusCode::OK, Messages::Channel(messages)));
            }
            Reply::Delivered => return Ok((http::StatusCode::ACCEPTED, Messages::Nothing)),
        };
        let status = response.status();
        let media = media_type(response.headers());
        let body = response.into_body();
        let messages = match media {
            Media::EventStream if status.is_success() => Messages::Events {
                body,
                decoder: Decoder::new(limit),
                ready: VecDeque::new(),
            },
            Media::Json => Messages::One(Some(read_body(body, limit, timeout).await?)),
            _ if status.is_success() => Messages::Nothing,
            _ => {
                let detail = read_body(body, 512, timeout)
                    .await
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                return Err(UpstreamError::Refused { status, detail });
            }
        };
        Ok((status, messages))
    }

    /// The next message; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        match self {
            Messages::One(message) => message.take().map(Ok),
            Messages::Nothing => None,
            Messages::Channel(messages) => messages.recv().await.map(Ok),
            Messages::Events {
                body,
                decoder,
                ready,
            } => loop {
                if let Some(message) = ready.pop_front() {
                    return Some(Ok(message));
                }
                let frame = match body.frame().await? {
                    Ok(frame) => frame,
                    Err(e) => return Some(Err(UpstreamError::Unreachable(e.to_string()))),
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let mut items = Vec::new();
                if let Err(e) = decoder.feed(&data, &mut items) {
                    return Some(Err(UpstreamError::Protocol(e.to_string())));
                }
                for item in items {
                    if let Item::Event(event) = item
                        && let Some(data) = event.data
                        && !data.trim().is_empty()
                    {
                        ready.push_back(Bytes::from(data));
                    }
                }
            },
        }
    }
}
