//! What the event stream of an HTTP+SSE session (2024-11-05 "Transports", HTTP with SSE)
//! says, event by event, and where the messages of the session go.
//!
//! "When a client connects, the server MUST send an `endpoint` event containing a URI for
//! the client to use for sending messages. All subsequent client messages MUST be sent as
//! HTTP POST requests to this endpoint. Server messages are sent as SSE `message` events,
//! with the message content encoded as JSON in the event data." An event without a type
//! is a `message` event (HTML Living Standard, "Server-sent events", §9.2.6); comments
//! are keep-alives (FastMCP sends `: ping - <time>` every 15 s), other events are not
//! this transport's and are skipped.
//!
//! The endpoint is a URI reference, resolved against the URL the stream was opened at
//! (RFC 3986 §5.2: the servers met send a path and query, `/messages/?session_id=…` or
//! `/message?sessionId=…`). It must be of the same origin (RFC 6454: scheme, host, port):
//! the proxy sends the client's forwarded credentials with every POST, and an endpoint
//! elsewhere would hand them to whoever the upstream names (the official SDKs' clients
//! refuse such an endpoint too).
//!
//! Pure functions of their input: the decoding is `crate::sse`'s, this only reads it.

use http::Uri;
use http::uri::PathAndQuery;

use crate::sse::Item;

/// One event of an HTTP+SSE session's stream, as the transport reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `endpoint`: where to POST messages, as the server wrote it.
    Endpoint(String),
    /// `message`: one JSON-RPC message.
    Message(String),
}

/// What `item` is to the transport; `None` for a keep-alive, an event of another type,
/// or one without data.
pub fn frame(item: Item) -> Option<Frame> {
    let Item::Event(event) = item else {
        return None;
    };
    let data = event.data.filter(|d| !d.trim().is_empty())?;
    match event.event.as_deref() {
        Some("endpoint") => Some(Frame::Endpoint(data)),
        None | Some("message") => Some(Frame::Message(data)),
        Some(_) => None,
    }
}

/// Why an `endpoint` event cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadEndpoint {
    #[error("the upstream's endpoint event is not a URI reference ({0})")]
    NotAUri(String),
    /// Another scheme, host or port than the stream's: never sent anything.
    #[error("the upstream's endpoint event names another origin than its event stream's")]
    OtherOrigin,
}

/// The request target (origin form) of the endpoint `data` names, resolved against the
/// URL the stream was opened at (`base`); it must be of `base`'s origin.
pub fn resolve_endpoint(base: &Uri, data: &str) -> Result<PathAndQuery, BadEndpoint> {
    let base = url::Url::parse(&base.to_string())
        .map_err(|e| BadEndpoint::NotAUri(format!("the upstream URL: {e}")))?;
    let resolved = base
        .join(data.trim())
        .map_err(|e| BadEndpoint::NotAUri(e.to_string()))?;
    if resolved.origin() != base.origin() || !resolved.origin().is_tuple() {
        return Err(BadEndpoint::OtherOrigin);
    }
    let mut target = resolved.path().to_owned();
    if let Some(query) = resolved.query() {
        target.push('?');
        target.push_str(query);
    }
    PathAndQuery::try_from(target).map_err(|e| BadEndpoint::NotAUri(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::Event;

    fn event(kind: Option<&str>, data: Option<&str>) -> Item {
        Item::Event(Event {
            event: kind.map(str::to_owned),
            data: data.map(str::to_owned),
            ..Event::default()
        })
    }

    #[test]
    fn events_are_endpoints_messages_or_nothing() {
        assert_eq!(
            frame(event(Some("endpoint"), Some("/messages/?session_id=ab"))),
            Some(Frame::Endpoint("/messages/?session_id=ab".into()))
        );
        for kind in [Some("message"), None] {
            assert_eq!(
                frame(event(kind, Some("{}"))),
                Some(Frame::Message("{}".into()))
            );
        }
        assert_eq!(frame(event(Some("ping"), Some("{}"))), None);
        assert_eq!(frame(event(Some("message"), Some("  "))), None);
        assert_eq!(frame(event(Some("endpoint"), None)), None);
        assert_eq!(
            frame(Item::Comment(" ping - 2026-11-25 21:25:04".into())),
            None
        );
    }

    #[test]
    fn endpoints_resolve_against_the_stream_url_and_stay_at_its_origin() {
        let base: Uri = "http://127.0.0.1:8000/sse".parse().unwrap();
        let target = |data: &str| resolve_endpoint(&base, data).map(|t| t.to_string());
        // FastMCP and the everything server.
        assert_eq!(
            target("/messages/?session_id=29f8c4e4").unwrap(),
            "/messages/?session_id=29f8c4e4"
        );
        assert_eq!(
            target("/message?sessionId=ca5665f1-d2e0").unwrap(),
            "/message?sessionId=ca5665f1-d2e0"
        );
        // Relative to the stream's path, absolute at the same origin, a fragment dropped.
        let nested: Uri = "http://127.0.0.1:8000/mcp/sse".parse().unwrap();
        assert_eq!(
            resolve_endpoint(&nested, "messages?s=1").unwrap().as_str(),
            "/mcp/messages?s=1"
        );
        assert_eq!(
            target("http://127.0.0.1:8000/m?s=1#frag").unwrap(),
            "/m?s=1"
        );
        assert_eq!(target("../up/../m").unwrap(), "/m");
        // Anywhere else is refused.
        for elsewhere in [
            "http://evil.example/m",
            "//evil.example/m",
            "https://127.0.0.1:8000/m",
            "http://127.0.0.1:8001/m",
            "http://localhost:8000/m",
            "data:text/plain,hi",
        ] {
            assert_eq!(
                target(elsewhere),
                Err(BadEndpoint::OtherOrigin),
                "{elsewhere}"
            );
        }
        assert!(matches!(
            target("http://[::1"),
            Err(BadEndpoint::NotAUri(_))
        ));
    }
}
