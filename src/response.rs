//! What every route answers with: one body type ([`ProxyBody`]) and the few ways to build
//! a response — a JSON body, a bare status, an event stream, or a [`ProxyError`] as its
//! JSON-RPC error with the HTTP status the error decides.

mod body;
pub mod timed;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

pub use body::{EventRewrite, ProxyBody, SseBody};

use crate::error::{Fault, ProxyError};
use crate::jsonrpc::write;
use crate::mcp::headers::{JSON, SSE};

/// The JSON-RPC error response for `error`, answering the request with raw `id`.
pub fn error(error: &ProxyError, id: Option<&[u8]>) -> Response<ProxyBody> {
    let (status, object, fault) = error.answer();
    // The answer's message, not the error's own text: what it echoes is cut.
    let error_text = &object.message;
    match fault {
        Fault::Client => {
            tracing::debug!(status = status.as_u16(), code = object.code, error = %error_text, "request refused")
        }
        Fault::Upstream => {
            tracing::warn!(status = status.as_u16(), code = object.code, error = %error_text, "upstream failure")
        }
        Fault::Proxy => {
            tracing::warn!(status = status.as_u16(), code = object.code, error = %error_text, "proxy could not serve the request")
        }
    }
    let mut response = json(status, write::error(id, &object));
    if let Some(challenge) = error.challenge() {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, challenge.clone());
    }
    if let Some(after) = error.retry_after() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(after.as_secs().max(1)));
    }
    response
}

/// A JSON body with `status`.
pub fn json(status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// A bare status, no body.
pub fn status(status: StatusCode) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::empty());
    *response.status_mut() = status;
    response
}

/// An event stream (200, `text/event-stream`).
pub fn events(body: ProxyBody) -> Response<ProxyBody> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
    response
}
