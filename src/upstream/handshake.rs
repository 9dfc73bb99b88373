//! Opening an upstream session: the 2025-11-25 lifecycle ("Lifecycle",
//! "Initialization"): `initialize`, then `notifications/initialized`. The same exchange
//! over HTTP and over a stdio child's pipes; what the `InitializeResult` says is read in
//! one place.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;

use super::answer::Messages;
use super::error::UpstreamError;
use super::http::{HttpUpstream, SessionAddr};
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::discover::is_modern_error;
use crate::mcp::headers::{MCP_SESSION_ID, is_visible_ascii};
use crate::mcp::initialize::{self, Negotiated};

/// An upstream session the upstream just opened, not yet owned by anyone.
#[derive(Debug)]
pub struct Opened {
    /// The replica that holds it.
    pub replica: super::ReplicaId,
    /// The upstream's session id (`Mcp-Session-Id`, or the proxy's key for a stdio
    /// child); `None` when the upstream issued none.
    pub session_id: Option<String>,
    pub negotiated: Negotiated,
}

impl HttpUpstream {
    /// Sends `initialize`: the upstream's session id (if it issued one) and what it
    /// negotiated. `client_info` and `capabilities` go into `initialize` when given (else
    /// the proxy's own); `forwarded` are client headers to pass on (e.g. credentials).
    /// From its answer on the upstream holds a session: the caller owns it
    /// ([`super::UpstreamSession`]) before it sends [`HttpUpstream::initialized`].
    pub async fn initialize(
        &self,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<Opened, UpstreamError> {
        let body = Bytes::from(initialize::request_body(client_info, capabilities));
        let mut answer = self.post(None, body, forwarded.clone()).await?;
        let session_id = match answer.headers.get(&MCP_SESSION_ID) {
            None => None,
            Some(value) => match value.to_str() {
                Ok(id) if is_visible_ascii(id) => Some(id.to_owned()),
                _ => {
                    return Err(UpstreamError::Protocol(
                        "the upstream's Mcp-Session-Id is not visible ASCII".into(),
                    ));
                }
            },
        };
        let negotiated =
            read_result(&mut answer.messages, answer.status, self.settings().timeout).await?;
        Ok(Opened {
            replica: self.id(),
            session_id,
            negotiated,
        })
    }

    /// Sends `notifications/initialized` in the session `initialize` opened.
    pub async fn initialized(
        &self,
        addr: SessionAddr<'_>,
        forwarded: HeaderMap,
    ) -> Result<(), UpstreamError> {
        let ack = self
            .post(
                Some(addr),
                Bytes::from_static(initialize::INITIALIZED),
                forwarded,
            )
            .await?;
        if !ack.status.is_success() {
            return Err(UpstreamError::Refused {
                status: ack.status,
                detail: "notifications/initialized was refused".into(),
            });
        }
        Ok(())
    }
}

/// Reads the answer to the proxy's `initialize` (`status` is the HTTP status it came
/// with, 200 for a stdio child) and what it negotiated.
pub async fn read_result(
    messages: &mut Messages,
    status: StatusCode,
    timeout: std::time::Duration,
) -> Result<Negotiated, UpstreamError> {
    // A JSON body is the answer, whatever id it carries (a refusal may name none).
    let message = match messages {
        Messages::One(one) => one
            .take()
            .ok_or_else(|| UpstreamError::Protocol("initialize returned nothing".into()))?,
        _ => {
            messages
                .response_to(initialize::REQUEST_ID.as_bytes(), timeout)
                .await?
        }
    };
    let envelope = Envelope::parse(&message).map_err(|_| {
        if status.is_success() {
            UpstreamError::Protocol("the initialize response is not JSON-RPC".into())
        } else {
            UpstreamError::Refused {
                status,
                detail: String::from_utf8_lossy(&message[..message.len().min(200)]).into_owned(),
            }
        }
    })?;
    if envelope.kind != Kind::Response {
        return Err(UpstreamError::Protocol(
            "the initialize response is not a JSON-RPC response".into(),
        ));
    }
    if let Some(error) = envelope.error {
        #[derive(serde::Deserialize)]
        struct Refusal<'a> {
            code: i64,
            message: String,
            #[serde(borrow, default)]
            data: Option<&'a RawValue>,
        }
        return Err(match serde_json::from_str::<Refusal<'_>>(error.get()) {
            Ok(Refusal {
                code,
                message,
                data,
            }) => UpstreamError::InitializeFailed {
                code,
                message,
                modern: is_modern_error(code, data),
            },
            Err(_) => UpstreamError::Refused {
                status,
                detail: format!("initialize failed: {}", error.get()),
            },
        });
    }
    let result = envelope
        .result
        .ok_or_else(|| UpstreamError::Protocol("initialize returned no result".into()))?;
    initialize::parse_result(result).map_err(|e| UpstreamError::Protocol(e.to_string()))
}
