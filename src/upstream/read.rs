//! Reading upstream HTTP bodies: their media type, and a whole body when a whole message
//! is what is needed (a JSON response).

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, Limited};

use super::connections::UpstreamBody;
use super::error::UpstreamError;
use crate::mcp::headers::{JSON, SSE};
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
    body: UpstreamBody,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, UpstreamError> {
    let collect = Limited::new(body, limit).collect();
    match within(timeout, collect).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(UpstreamError::Protocol(
            format!("a response body exceeded {limit} bytes"),
        )),
        Ok(Err(e)) => Err(UpstreamError::Unreachable(e.to_string())),
        Err(_) => Err(UpstreamError::Timeout(timeout)),
    }
}
