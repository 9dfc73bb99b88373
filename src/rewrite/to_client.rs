//! Upstream → client: put the session back into the response.
//!
//! Seed 000, "Using Sessions": successful responses MUST include
//! `_meta["io.modelcontextprotocol/session"]`, with the sessionId exactly as the request
//! had it. Only the response to the client's own request is stamped; notifications and
//! server-to-client requests on the same stream pass unchanged (notifications carry no
//! session metadata).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;

use crate::jsonrpc::{Envelope, ErrorObject, Kind, code, error_response, same_id, splice};
use crate::mcp::meta::{self, Payload};
use crate::sse::{End, Event, Rewrite};

/// What to stamp, and on which response.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The raw JSON id of the client's request.
    pub request_id: Bytes,
    /// `{"sessionId":…,"state":…,"expiresAt":…}`.
    pub session: Bytes,
    /// SEP-1364's dialect: the sessionId (a JSON string) to echo as a top-level member
    /// of the response.
    pub top_level: Option<Bytes>,
    /// The request came from a 2026-07-28 client (it carried the per-request protocol
    /// version): the result also gets `resultType: "complete"`.
    pub complete: bool,
}

/// What [`stamp_message`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Stamped {
    /// The response to the request, rewritten (or `None`: an error response, or a result
    /// that is not an object, passes as it is).
    Response(Option<Vec<u8>>),
    /// Anything else: a notification, a server-to-client request, another id, not JSON.
    Other,
}

/// Stamps `message` if it is the response to `stamp.request_id`.
pub fn stamp_message(message: &[u8], stamp: &Stamp) -> Stamped {
    let Ok(envelope) = Envelope::parse(message) else {
        return Stamped::Other;
    };
    let ours = envelope.kind == Kind::Response
        && envelope
            .id
            .is_some_and(|id| same_id(id.get().as_bytes(), &stamp.request_id));
    if !ours {
        return Stamped::Other;
    }
    let stamped = envelope.result.and_then(|result| {
        let payload = Payload::open(result).ok()??;
        let rewritten = if stamp.complete {
            payload.edited(
                &[],
                &[],
                &[("resultType", br#""complete""#)],
                &[(meta::SESSION, &stamp.session)],
            )
        } else {
            payload.with_meta(meta::SESSION, &stamp.session)
        };
        splice(message, result, &rewritten)
    });
    match &stamp.top_level {
        Some(id) => {
            let message = stamped.as_deref().unwrap_or(message);
            Stamped::Response(with_top_level_session(message, id))
        }
        None => Stamped::Response(stamped),
    }
}

/// `message` with `"sessionId":<id>` as its first member (SEP-1364: responses carry the
/// session at the top level).
fn with_top_level_session(message: &[u8], id: &[u8]) -> Option<Vec<u8>> {
    let open = message.iter().position(|&b| b == b'{')?;
    let mut out = Vec::with_capacity(message.len() + id.len() + 16);
    out.extend_from_slice(&message[..=open]);
    out.extend_from_slice(br#""sessionId":"#);
    out.extend_from_slice(id);
    out.push(b',');
    out.extend_from_slice(&message[open + 1..]);
    Some(out)
}

/// Stamps the response inside an event stream, event by event.
#[derive(Debug)]
pub struct StampEvents {
    stamp: Stamp,
    upstream: Arc<str>,
    responded: bool,
}

impl StampEvents {
    pub fn new(stamp: Stamp, upstream: Arc<str>) -> Self {
        StampEvents {
            stamp,
            upstream,
            responded: false,
        }
    }
}

impl Rewrite for StampEvents {
    fn event(&mut self, event: &mut Event) {
        let Some(data) = &event.data else { return };
        if let Stamped::Response(rewritten) = stamp_message(data.as_bytes(), &self.stamp) {
            self.responded = true;
            if let Some(bytes) = rewritten {
                event.data = Some(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
    }

    fn end(&mut self, how: End) -> Option<Event> {
        if self.responded {
            return None;
        }
        let reason = match how {
            End::Complete => {
                "the upstream ended the event stream before sending the response".to_owned()
            }
            End::Failed(e) => format!("the upstream connection failed mid-stream: {e}"),
            End::Idle(after) => format!(
                "the upstream sent nothing for {} ms and the stream was closed",
                after.as_millis()
            ),
            End::TooLarge(limit) => format!("the upstream sent an event larger than {limit} bytes"),
        };
        Some(stream_error(&self.stamp.request_id, &self.upstream, reason))
    }
}

/// The event that ends a stream whose response never came.
fn stream_error(request_id: &[u8], upstream: &str, reason: String) -> Event {
    let id = std::str::from_utf8(request_id)
        .ok()
        .and_then(|s| serde_json::value::RawValue::from_string(s.to_owned()).ok());
    let error = ErrorObject {
        code: code::INTERNAL_ERROR,
        message: reason,
        data: Some(json!({ "upstream": upstream })),
    };
    let body = error_response(id.as_deref(), &error);
    Event {
        data: Some(String::from_utf8_lossy(&body).into_owned()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests;
