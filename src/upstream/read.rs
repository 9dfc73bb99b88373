//! Reading whole messages out of upstream response bodies, when a whole message is what
//! the caller needs (the `initialize` result, a JSON response to rewrite).

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::error::UpstreamError;
use crate::jsonrpc::{Envelope, Kind, same_id};
use crate::mcp::headers::{JSON, SSE};
use crate::sse::{Decoder, Item};

/// The media type of a Streamable HTTP response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    Json,
    EventStream,
    Other,
}

/// Reads `Content-Type`, ignoring parameters and case.
pub fn media_type(headers: &HeaderMap) -> Media {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return Media::Other;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case(JSON) {
        Media::Json
    } else if essence.eq_ignore_ascii_case(SSE) {
        Media::EventStream
    } else {
        Media::Other
    }
}

/// Collects a body of at most `limit` bytes within `timeout`.
pub async fn read_body(
    body: Incoming,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, UpstreamError> {
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(timeout, collect).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(UpstreamError::Protocol(
            format!("a response body exceeded {limit} bytes"),
        )),
        Ok(Err(e)) => Err(UpstreamError::Unreachable(e.to_string())),
        Err(_) => Err(UpstreamError::Timeout(timeout)),
    }
}

/// Reads an event stream until the response to request `id` (raw JSON), skipping the
/// notifications and requests before it; returns that response's JSON.
pub async fn read_response_from_sse(
    body: Incoming,
    id: &str,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, UpstreamError> {
    match tokio::time::timeout(timeout, find_response(body, id, limit)).await {
        Ok(found) => found,
        Err(_) => Err(UpstreamError::Timeout(timeout)),
    }
}

async fn find_response(mut body: Incoming, id: &str, limit: usize) -> Result<Bytes, UpstreamError> {
    let mut decoder = Decoder::new(limit);
    let mut items = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        decoder
            .feed(&data, &mut items)
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        for item in items.drain(..) {
            let Item::Event(event) = item else { continue };
            let Some(data) = event.data else { continue };
            let is_ours = Envelope::parse(data.as_bytes()).is_ok_and(|env| {
                env.kind == Kind::Response && env.id.is_some_and(|raw| same_id(raw.get(), id))
            });
            if is_ours {
                return Ok(Bytes::from(data));
            }
        }
    }
    Err(UpstreamError::Protocol(
        "the event stream ended without the response".into(),
    ))
}

/// Whether a 400 answer to a request carrying the upstream's own `Mcp-Session-Id` means
/// the upstream no longer knows that session. The 2025-11-25 transport says 404, but the
/// TypeScript SDK's transport answers 400 "Bad Request: No valid session ID provided"
/// (seen with @modelcontextprotocol/server-everything), so its wording counts too.
pub fn says_session_lost(status: http::StatusCode, body: &[u8]) -> bool {
    if status != http::StatusCode::BAD_REQUEST {
        return false;
    }
    let Ok(envelope) = Envelope::parse(body) else {
        return false;
    };
    let Some(error) = envelope.error else {
        return false;
    };
    let message = serde_json::from_str::<serde_json::Value>(error.get())
        .ok()
        .and_then(|e| e.get("message")?.as_str().map(str::to_ascii_lowercase))
        .unwrap_or_default();
    [
        "no valid session",
        "session not found",
        "unknown session",
        "invalid session",
    ]
    .iter()
    .any(|phrase| message.contains(phrase))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn the_typescript_sdks_lost_session_answer_is_recognised() {
        let ts = br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
        assert!(says_session_lost(StatusCode::BAD_REQUEST, ts));
        assert!(!says_session_lost(StatusCode::OK, ts));
        let other =
            br#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":1}"#;
        assert!(!says_session_lost(StatusCode::BAD_REQUEST, other));
        assert!(!says_session_lost(StatusCode::BAD_REQUEST, b"not json"));
    }
}
