//! Upstream → client: put the session back into the response.
//!
//! The data-layer sessions draft, "Using Sessions": successful responses MUST include
//! `_meta["io.modelcontextprotocol/session"]`, with the sessionId exactly as the request
//! had it. Only the response to the client's own request is stamped; notifications and
//! server-to-client requests on the same stream pass unchanged (notifications carry no
//! session metadata).

use std::ops::Range;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::jsonrpc::{Envelope, Kind, RawObject, range_in, same_id, spliced};
use crate::mcp::meta::{self, Payload};
use crate::rewrite::to_upstream::strip_top_level_session;
use crate::sse::Event;

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
    match Envelope::parse(message) {
        Ok(envelope) => stamp_read(message, &envelope, stamp),
        Err(_) => Stamped::Other,
    }
}

/// [`stamp_message`] for a message its caller parsed already (`envelope`, read from
/// `message`).
pub fn stamp_read(message: &[u8], envelope: &Envelope<'_>, stamp: &Stamp) -> Stamped {
    let ours = envelope.kind == Kind::Response
        && envelope
            .id
            .is_some_and(|id| same_id(id.get().as_bytes(), &stamp.request_id));
    if !ours {
        return Stamped::Other;
    }
    stamp_response(message, envelope, stamp, None)
}

/// The response to the request (`message`, read as `envelope`; its caller knows it is
/// the response) stamped — in the same write, with the client's id put back at
/// `renamed` when the upstream knew the request by another id (`ids::Restore`).
pub fn stamp_response(
    message: &[u8],
    envelope: &Envelope<'_>,
    stamp: &Stamp,
    renamed: Option<(Range<usize>, &[u8])>,
) -> Stamped {
    // What the edits write, made before them (they borrow it).
    let client: [&[u8]; 1] = [renamed.as_ref().map_or(&[][..], |(_, client)| *client)];
    let keys: &[&str] = if stamp.complete { &[COMPLETE.0] } else { &[] };
    let result = envelope
        .result
        .and_then(|result| Some((result, range_in(message, result)?)));
    // A result with neither `_meta` nor the member a 2026-07-28 client gets gains them
    // at its end, as they are written, without being opened; any other object is opened
    // and written again.
    let appended = result.clone().and_then(|(result, range)| {
        let (close, comma) = meta::append_point(result, keys)?;
        Some((range.start + close, comma))
    });
    let rewritten = match (&result, appended) {
        (Some((result, _)), None) => stamped_result(result, stamp),
        _ => None,
    };
    let comma: &[u8] = match appended {
        Some((_, true)) => b",",
        _ => b"",
    };
    let complete: [&[u8]; 5] = match stamp.complete {
        true => [b"\"", COMPLETE.0.as_bytes(), b"\":", COMPLETE.1, b","],
        false => [b""; 5],
    };
    let [c0, c1, c2, c3, c4] = complete;
    let added: [&[u8]; 11] = [
        comma,
        c0,
        c1,
        c2,
        c3,
        c4,
        br#""_meta":{""#,
        meta::SESSION.as_bytes(),
        br#"":"#,
        &stamp.session[..],
        b"}",
    ];
    let written: [&[u8]; 1] = [rewritten.as_deref().unwrap_or_default()];
    let mut edits = Edits::default();
    if let Some((at, _)) = &renamed {
        edits.push(at.clone(), &client);
    }
    match (appended, result) {
        (Some((at, _)), _) => edits.push(at..at, &added),
        (None, Some((_, range))) if rewritten.is_some() => edits.push(range, &written),
        _ => {}
    }
    let stamped = edits.applied(message);
    match &stamp.top_level {
        Some(id) => {
            let message = stamped.as_deref().unwrap_or(message);
            // A legacy upstream knows no top-level sessionId: one it sent is not the
            // session's, and a second member of that name would make the message invalid.
            let message = strip_top_level_session(Bytes::copy_from_slice(message));
            Stamped::Response(with_top_level_session(&message, id))
        }
        None => Stamped::Response(stamped),
    }
}

/// At most two edits of one message (its id, its result), made in one write.
#[derive(Default)]
struct Edits<'a> {
    edits: [(Range<usize>, &'a [&'a [u8]]); 2],
    count: usize,
}

impl<'a> Edits<'a> {
    fn push(&mut self, range: Range<usize>, pieces: &'a [&'a [u8]]) {
        debug_assert!(self.count < self.edits.len(), "a third edit");
        if let Some(slot) = self.edits.get_mut(self.count) {
            *slot = (range, pieces);
            self.count += 1;
        }
    }

    /// `message` edited; `None` when there was nothing to edit (or an edit did not fit).
    fn applied(mut self, message: &[u8]) -> Option<Vec<u8>> {
        let edited = match self.count {
            0 => return None,
            n => spliced(message, &mut self.edits[..n]),
        };
        // Ranges read from the message's own envelope always fit it.
        debug_assert!(edited.is_some(), "an edit outside the message");
        edited
    }
}

/// `result` opened and written again with the session stamped; `None` when it is not an
/// object (an error response has none), which passes as it is.
fn stamped_result(result: &RawValue, stamp: &Stamp) -> Option<Vec<u8>> {
    match Payload::open(result) {
        Ok(Some(payload)) => Some(stamped_payload(&payload, stamp)),
        Ok(None) => None,
        // The upstream's `_meta` is not an object, which MCP requires: nothing in it can
        // be kept, and the client must still get its session. It is replaced.
        Err(_) => {
            let mut members = RawObject::parse(result)?;
            members.remove("_meta");
            let mut cleaned = Vec::with_capacity(result.get().len());
            members.write(&mut cleaned, &[]);
            let cleaned: &RawValue = serde_json::from_slice(&cleaned).ok()?;
            Some(stamped_payload(&Payload::open(cleaned).ok()??, stamp))
        }
    }
}

/// What a 2026-07-28 client's result gains besides the session: the member and its
/// value (raw JSON).
const COMPLETE: (&str, &[u8]) = ("resultType", br#""complete""#);

/// The result with the session in its `_meta` (and `resultType` for a 2026-07-28 client).
fn stamped_payload(payload: &Payload<'_>, stamp: &Stamp) -> Vec<u8> {
    if stamp.complete {
        payload.edited(&[], &[], &[COMPLETE], &[(meta::SESSION, &stamp.session)])
    } else {
        payload.with_meta(meta::SESSION, &stamp.session)
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

/// Stamps the response inside an event stream, event by event, and remembers whether it
/// came (a stream that ends without it gets an error from the relay).
#[derive(Debug)]
pub struct StampEvents {
    stamp: Stamp,
    responded: bool,
}

impl StampEvents {
    pub fn new(stamp: Stamp) -> Self {
        StampEvents {
            stamp,
            responded: false,
        }
    }

    /// Stamps `event` if it carries the response.
    pub fn event(&mut self, event: &mut Event) {
        let Some(data) = &event.data else { return };
        if let Stamped::Response(rewritten) = stamp_message(data.as_bytes(), &self.stamp) {
            self.responded = true;
            if let Some(bytes) = rewritten {
                event.data = Some(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
    }

    /// Whether the response went by.
    pub fn responded(&self) -> bool {
        self.responded
    }

    /// The raw id of the request being answered.
    pub fn request_id(&self) -> &[u8] {
        &self.stamp.request_id
    }
}

#[cfg(test)]
mod tests;
