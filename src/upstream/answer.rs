//! What the upstream answered to one message, whatever carried it: the HTTP head it came
//! with (200 for a stdio child) and the answer as a stream of JSON-RPC messages — a JSON
//! body read whole, an event stream decoded as it arrives, or a stdio child's messages.
//! Callers that pass an answer on (the relay) and callers that act on each message (the
//! stateless front, the handshake) read the same [`Messages`].

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, StatusCode};
use tokio::sync::mpsc;

use super::connections::{UpstreamBody, UpstreamResponse};
use super::error::UpstreamError;
use super::ids::Restore;
use super::read::{Media, media_type, read_body};
use crate::jsonrpc::{Envelope, EnvelopeError, Kind, same_id};
use crate::sse::{Decoded, End, Event, Item, ItemSource};

/// One message of a session whose messages all come on one stream (a stdio child's, an
/// HTTP+SSE session's), or why none will come.
pub type Delivery = Result<Bytes, UpstreamError>;

/// See the module documentation.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    /// The upstream's response headers (none for stdio).
    pub headers: HeaderMap,
    pub messages: Messages,
    /// A JSON body (`Messages::One`) whose response may still carry the proxy's id for
    /// the request: its reader puts the client's back ([`Restore::response_read`]). Only
    /// when the sender said it would (`Outgoing::restored_by_reader`).
    pub renamed: Option<Restore>,
}

/// The messages of one answer, in order.
#[derive(Debug)]
pub enum Messages {
    /// One message, read whole (a JSON body); `None` once taken.
    One(Option<Bytes>),
    /// An event stream, decoded as it arrives.
    Events(Box<Events>),
    /// A stdio child's or an HTTP+SSE session's messages for one request (each one event
    /// when streamed), after `first` if a caller already looked at it.
    Channel {
        first: Option<Bytes>,
        rx: mpsc::Receiver<Delivery>,
    },
    /// No message (202, an empty body).
    Nothing,
    /// A successful body that is neither JSON nor an event stream, passed on untouched.
    Opaque(Box<UpstreamBody>),
}

impl Answer {
    /// Reads an HTTP response: a JSON body whole (at most `limit` bytes, within
    /// `timeout`), an event stream as it comes. A failure status without a JSON body is
    /// the upstream refusing the request.
    pub async fn read(
        response: UpstreamResponse,
        limit: usize,
        timeout: Duration,
    ) -> Result<Answer, UpstreamError> {
        let (parts, body) = response.into_parts();
        let status = parts.status;
        let messages = match media_type(&parts.headers) {
            Media::Json => Messages::One(Some(read_body(body, limit, timeout).await?)),
            Media::EventStream if status.is_success() => Messages::Events(Box::new(Events {
                decoded: Decoded::new(body, limit),
                restore: None,
            })),
            _ if status.is_success() => Messages::Opaque(Box::new(body)),
            _ => {
                let detail = read_body(body, 512, timeout)
                    .await
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                return Err(UpstreamError::Refused { status, detail });
            }
        };
        Ok(Answer {
            status,
            headers: parts.headers,
            messages,
            renamed: None,
        })
    }

    /// What is wrong with this answer to request `id` (raw JSON), if anything: a success
    /// whose JSON body is not that request's response, or a success of another media
    /// type. A JSON body answering a request is its one response (2025-11-25, "Sending
    /// Messages to the Server"): not a batch (gone since 2025-06-18), not a notification
    /// or a request, not the response to another id. Event streams and a stdio child's
    /// messages are read as they come, and judged there.
    pub fn unusable_for(&self, id: &[u8]) -> Option<String> {
        if !self.status.is_success() {
            return None;
        }
        match &self.messages {
            Messages::One(Some(message)) => not_the_response(&Envelope::parse(message), id),
            Messages::Opaque(_) => Some(match self.headers.get(CONTENT_TYPE) {
                Some(media) => format!(
                    "a body of type {:?}, neither JSON nor an event stream, instead of the response",
                    String::from_utf8_lossy(media.as_bytes())
                ),
                None => "a body without a Content-Type instead of the response".to_owned(),
            }),
            _ => None,
        }
    }

    /// [`Self::unusable_for`] for a JSON body its caller read already: `read` is the
    /// body's parse, `status` the answer's.
    pub fn unusable_as_read(
        status: StatusCode,
        read: &Result<Envelope<'_>, EnvelopeError>,
        id: &[u8],
    ) -> Option<String> {
        if !status.is_success() {
            return None;
        }
        not_the_response(read, id)
    }

    /// A stdio child's messages for a request.
    pub fn channel(rx: mpsc::Receiver<Delivery>) -> Answer {
        Answer {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            messages: Messages::Channel { first: None, rx },
            renamed: None,
        }
    }

    /// Puts the client's id back on the response to a request the proxy renamed
    /// (`ids::outgoing`): in a JSON body now (or, `by_reader`, where its reader reads
    /// it: [`Answer::renamed`]), in an event stream as the response goes by.
    pub(super) fn restore_ids(&mut self, mut restore: Restore, by_reader: bool) {
        match &mut self.messages {
            Messages::One(Some(_)) if by_reader => self.renamed = Some(restore),
            Messages::One(Some(message)) => {
                if let Some(restored) = restore.response(message, true) {
                    *message = Bytes::from(restored);
                }
            }
            Messages::Events(events) => events.restore = Some(restore),
            Messages::One(None)
            | Messages::Channel { .. }
            | Messages::Nothing
            | Messages::Opaque(_) => {}
        }
    }

    /// A notification or response delivered, with nothing to answer.
    pub fn accepted() -> Answer {
        Answer {
            status: StatusCode::ACCEPTED,
            headers: HeaderMap::new(),
            messages: Messages::Nothing,
            renamed: None,
        }
    }
}

impl Messages {
    /// The id the upstream knows the request by while its response has not come, when
    /// the proxy renamed it (an HTTP upstream's event stream); `None` otherwise.
    pub fn upstream_request_id(&self) -> Option<&[u8]> {
        match self {
            Messages::Events(events) => events.restore.as_ref()?.upstream_id(),
            _ => None,
        }
    }

    /// The next JSON-RPC message (an event's data); `None` at the end.
    pub async fn next_message(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        // A child's messages come as they are, and why it failed as the child said it.
        if let Messages::Channel { first, rx } = self {
            return match first.take() {
                Some(message) => Some(Ok(message)),
                None => rx.recv().await,
            };
        }
        loop {
            match poll_fn(|cx| self.poll_item(cx)).await? {
                Ok(Item::Event(Event {
                    data: Some(data), ..
                })) if !data.trim().is_empty() => return Some(Ok(Bytes::from(data))),
                Ok(_) => continue,
                Err(end) => return Some(Err(UpstreamError::from(end))),
            }
        }
    }

    /// Reads on until the response to request `id` (raw JSON), skipping what comes
    /// before it, within `timeout`.
    pub async fn response_to(
        &mut self,
        id: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, UpstreamError> {
        let find = async {
            while let Some(message) = self.next_message().await {
                let message = message?;
                let ours = Envelope::parse(&message).is_ok_and(|env| {
                    env.kind == Kind::Response && env.id.is_some_and(|raw| same_id(raw.get(), id))
                });
                if ours {
                    return Ok(message);
                }
            }
            Err(UpstreamError::Protocol(
                "the upstream ended its answer without the response".into(),
            ))
        };
        tokio::time::timeout(timeout, find)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(timeout)))
    }

    /// The first message of a stdio child's answer, within `timeout`, kept to be read
    /// again. `None` when the answer is not a child's, or it ended.
    pub async fn peek_first(&mut self, timeout: Duration) -> Result<Option<&Bytes>, UpstreamError> {
        let Messages::Channel { first, rx } = self else {
            return Ok(None);
        };
        if first.is_none() {
            match tokio::time::timeout(timeout, rx.recv()).await {
                Ok(Some(delivery)) => *first = Some(delivery?),
                Ok(None) => {}
                Err(_) => return Err(UpstreamError::Timeout(timeout)),
            }
        }
        Ok(first.as_ref())
    }
}

/// What keeps a message (`read`: its parse) from being the response to request `id`,
/// if anything.
fn not_the_response(read: &Result<Envelope<'_>, EnvelopeError>, id: &[u8]) -> Option<String> {
    let envelope = match read {
        Ok(envelope) => envelope,
        Err(EnvelopeError::Parse(why)) => {
            return Some(format!(
                "a body that is not JSON ({why}) instead of the response"
            ));
        }
        Err(EnvelopeError::Batch) => {
            return Some("a JSON array (a batch) instead of the one response".to_owned());
        }
        Err(e) => return Some(format!("a body that is not one JSON-RPC 2.0 message ({e})")),
    };
    let theirs = match (envelope.kind, envelope.id) {
        (Kind::Response, Some(theirs)) => theirs,
        (Kind::Request, _) => {
            return Some(format!(
                "a request ({}) instead of the response",
                envelope.method()
            ));
        }
        (Kind::Notification, _) | (Kind::Response, None) => {
            return Some(format!(
                "a notification ({}) instead of the response",
                envelope.method()
            ));
        }
    };
    if same_id(theirs.get(), id) {
        return None;
    }
    Some(format!(
        "the response to id {}, not to the request's id {}",
        shortened(theirs.get().as_bytes()),
        shortened(id)
    ))
}

/// An id as an error message shows it: at most 64 characters.
fn shortened(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

/// An upstream event stream, decoded as it arrives; the response to the proxy's request
/// gets its client's id back on its way.
#[derive(Debug)]
pub struct Events {
    decoded: Decoded<UpstreamBody>,
    restore: Option<Restore>,
}

impl ItemSource for Events {
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Item, End>>> {
        let mut polled = self.decoded.poll_item(cx);
        if let (Some(restore), Poll::Ready(Some(Ok(Item::Event(event))))) =
            (&mut self.restore, &mut polled)
            && let Some(data) = &mut event.data
            && let Some(restored) = restore.response(data.as_bytes(), false)
        {
            *data = String::from_utf8(restored)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        }
        polled
    }
}

/// A message on its own, as the event that carries it in a stream.
fn message_event(data: &[u8]) -> Item {
    Item::Event(Event {
        event: Some("message".into()),
        data: Some(String::from_utf8_lossy(data).into_owned()),
        ..Event::default()
    })
}

impl ItemSource for Messages {
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Item, End>>> {
        match self {
            Messages::One(message) => Poll::Ready(message.take().map(|m| Ok(message_event(&m)))),
            Messages::Events(events) => events.poll_item(cx),
            Messages::Channel { first, rx } => match first.take() {
                Some(message) => Poll::Ready(Some(Ok(message_event(&message)))),
                None => rx.poll_recv(cx).map(|delivery| {
                    delivery.map(|d| d.map(|m| message_event(&m)).map_err(End::from))
                }),
            },
            Messages::Nothing | Messages::Opaque(_) => Poll::Ready(None),
        }
    }
}

impl From<UpstreamError> for End {
    fn from(error: UpstreamError) -> Self {
        match error {
            UpstreamError::Unreachable(why) => End::Failed(why),
            UpstreamError::Timeout(after) | UpstreamError::Idle(after) => End::Idle(after),
            other => End::Failed(other.to_string()),
        }
    }
}

impl From<End> for UpstreamError {
    fn from(end: End) -> Self {
        match end {
            End::Complete => {
                UpstreamError::Protocol("the upstream ended its answer without a response".into())
            }
            End::Failed(e) => UpstreamError::Unreachable(e),
            End::Idle(after) => UpstreamError::Idle(after),
            End::TooLarge(limit) => {
                UpstreamError::Protocol(format!("an event-stream event exceeded {limit} bytes"))
            }
        }
    }
}
