//! Reading upstream HTTP bodies: their media type, and a whole body when a whole message
//! is what is needed (a JSON response).

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_TYPE;

use super::connections::UpstreamBody;
use super::error::UpstreamError;
use crate::mcp::headers::{JSON, SSE};
use crate::wire::{
    self,
    body::{Unread, whole},
};
use crate::within::within;

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
    let essence = wire::essence(value);
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
    body: UpstreamBody,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, UpstreamError> {
    match within(timeout, whole(body, limit)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(Unread::TooLarge)) => Err(UpstreamError::Protocol(format!(
            "a response body exceeded {limit} bytes"
        ))),
        Ok(Err(Unread::Failed(e))) => Err(UpstreamError::Unreachable(e.to_string())),
        Err(_) => Err(UpstreamError::Timeout(timeout)),
    }
}
