//! Finding what an HTTP replica speaks, as MCP 2026-07-28's backward-compatibility
//! sections tell a client to ("Streamable HTTP", "Versioning"):
//!
//! 1. POST `server/discover` as a modern client would. A `DiscoverResult`, or a refusal
//!    only a modern server gives (-32022 naming a modern version, -32020, -32021), means
//!    **modern** — the discover result is kept: it is what the proxy tells old clients at
//!    `initialize` and stamps on their answers.
//! 2. A POST refused with 400, 404 or 405 whose body is not JSON-RPC at all (a plain-text
//!    or HTML error page: no Streamable HTTP endpoint there) → GET the same URL, as a
//!    2024-11-05 client would: an event stream whose first event is `endpoint` means the
//!    **HTTP+SSE** transport.
//! 3. Anything else — a JSON-RPC refusal in a legacy server's words (-32600 "Missing
//!    session ID", -32000 "Server not initialized", -32601, -32602: never keyed to one
//!    code), an answer on an event stream — means **legacy**: `initialize`.
//!
//! A connection that fails is no era at all: the replica is unreachable.

use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Method, StatusCode};

use super::answer::{Answer, Messages};
use super::error::UpstreamError;
use super::http::HttpUpstream;
use super::http_sse::{Frame, frame};
use super::read::{Media, media_type};
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::discover::{self, is_modern_error};
use crate::mcp::headers::{MCP_METHOD, MCP_PROTOCOL_VERSION, SSE};
use crate::mcp::initialize::Negotiated;
use crate::mcp::version;
use crate::sse::{Decoded, ItemSource};

/// What a probe found at a replica.
#[derive(Debug)]
pub enum Found {
    /// 2026-07-28, with what its `server/discover` said (`None`: it answered with a modern
    /// refusal instead).
    Modern(Option<Negotiated>),
    Legacy,
    Sse,
}

/// The longest a GET may take to show the `endpoint` event of an HTTP+SSE server (which
/// sends it at once).
const ENDPOINT_WAIT: Duration = Duration::from_secs(3);

impl HttpUpstream {
    /// Probes the replica (see the module documentation).
    pub async fn discover(&self) -> Result<Found, UpstreamError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            MCP_PROTOCOL_VERSION.clone(),
            HeaderValue::from_static(version::LATEST_MODERN),
        );
        headers.insert(
            MCP_METHOD.clone(),
            HeaderValue::from_static("server/discover"),
        );
        let answer = self
            .post(None, Bytes::from(discover::request_body()), headers)
            .await;
        let refused = match answer {
            Ok(answer) => return Ok(judge(answer, self.settings().timeout).await),
            Err(UpstreamError::Refused { status, .. }) => status,
            Err(e) => return Err(e),
        };
        let maybe_sse = matches!(
            refused,
            StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
        );
        if maybe_sse && self.names_an_endpoint().await? {
            return Ok(Found::Sse);
        }
        Ok(Found::Legacy)
    }

    /// Whether a GET of the URL opens an event stream whose first event is `endpoint`.
    pub(super) async fn names_an_endpoint(&self) -> Result<bool, UpstreamError> {
        let target = self.target().clone();
        let request = self.request_to(target, Method::GET, HeaderMap::new(), Bytes::new());
        let own = self.own_fields().accept(SSE);
        let response = self.send(request, &own).await?;
        if !response.status().is_success() || media_type(response.headers()) != Media::EventStream {
            return Ok(false);
        }
        let mut events = Decoded::new(response.into_body(), self.settings().max_message_bytes);
        let first = async {
            loop {
                match std::future::poll_fn(|cx| events.poll_item(cx)).await {
                    Some(Ok(item)) => match frame(item) {
                        Some(Frame::Endpoint(_)) => return true,
                        Some(Frame::Message(_)) => return false,
                        // Comments (keep-alives) come before the first event of some
                        // servers.
                        None => continue,
                    },
                    None | Some(Err(_)) => return false,
                }
            }
        };
        // Dropping the stream closes it: the session the server opened for it ends.
        Ok(tokio::time::timeout(ENDPOINT_WAIT, first)
            .await
            .unwrap_or(false))
    }
}

/// What an answer to the `server/discover` POST says of the server.
async fn judge(mut answer: Answer, timeout: Duration) -> Found {
    let message = match &mut answer.messages {
        Messages::One(Some(message)) => message.clone(),
        // An event stream: a modern server may answer there too.
        Messages::Events(_) => match answer
            .messages
            .response_to(discover::REQUEST_ID.as_bytes(), timeout)
            .await
        {
            Ok(message) => message,
            Err(_) => return Found::Legacy,
        },
        _ => return Found::Legacy,
    };
    let Ok(envelope) = Envelope::parse(&message) else {
        return Found::Legacy;
    };
    if envelope.kind != Kind::Response {
        return Found::Legacy;
    }
    if let Some(result) = envelope.result
        && discover::is_discover_result(result)
    {
        return match discover::parse_result(result) {
            Ok(negotiated) => Found::Modern(Some(negotiated)),
            // Modern, but in versions the proxy does not speak: its requests will say so.
            Err(_) => Found::Modern(None),
        };
    }
    if let Some(error) = envelope.error
        && let Ok(object) = serde_json::from_str::<ErrorParts<'_>>(error.get())
        && is_modern_error(object.code, object.data)
    {
        return Found::Modern(None);
    }
    Found::Legacy
}

#[derive(serde::Deserialize)]
struct ErrorParts<'a> {
    code: i64,
    #[serde(borrow, default)]
    data: Option<&'a serde_json::value::RawValue>,
}

#[cfg(test)]
mod tests;
