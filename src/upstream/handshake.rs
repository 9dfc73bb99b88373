//! Opening and ending an upstream session: the 2025-11-25 lifecycle ("Lifecycle",
//! "Initialization"): `initialize`, then `notifications/initialized`.

use bytes::Bytes;
use http::HeaderMap;
use serde_json::value::RawValue;

use super::client::{Binding, HttpUpstream};
use super::error::UpstreamError;
use super::read::{Media, media_type, read_body, read_response_from_sse};
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::headers::{MCP_SESSION_ID, is_visible_ascii};
use crate::mcp::initialize::{self, Negotiated};

/// An open upstream session.
#[derive(Debug)]
pub struct Opened {
    /// The `Mcp-Session-Id` the upstream issued, if it issued one.
    pub session_id: Option<String>,
    pub negotiated: Negotiated,
}

impl HttpUpstream {
    /// Runs the handshake. `client_info` and `capabilities` go into `initialize` when given
    /// (else the proxy's own); `forwarded` are client headers to pass on (e.g. credentials).
    pub async fn open(
        &self,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<Opened, UpstreamError> {
        let timeout = self.settings().timeout;
        let limit = self.settings().max_message_bytes;
        let body = Bytes::from(initialize::request_body(client_info, capabilities));
        let response = self.post(None, body, forwarded).await?;
        let status = response.status();
        let session_id = match response.headers().get(&MCP_SESSION_ID) {
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
        let media = media_type(response.headers());
        let body = response.into_body();
        let message = match media {
            Media::EventStream if status.is_success() => {
                read_response_from_sse(body, initialize::REQUEST_ID, limit, timeout).await?
            }
            _ => read_body(body, limit, timeout).await?,
        };
        let envelope = Envelope::parse(&message).map_err(|_| {
            if status.is_success() {
                UpstreamError::Protocol("the initialize response is not JSON-RPC".into())
            } else {
                UpstreamError::Refused {
                    status,
                    detail: String::from_utf8_lossy(&message[..message.len().min(200)])
                        .into_owned(),
                }
            }
        })?;
        if envelope.kind != Kind::Response {
            return Err(UpstreamError::Protocol(
                "the initialize response is not a JSON-RPC response".into(),
            ));
        }
        if let Some(error) = envelope.error {
            return Err(UpstreamError::Refused {
                status,
                detail: format!("initialize failed: {}", error.get()),
            });
        }
        let result = envelope
            .result
            .ok_or_else(|| UpstreamError::Protocol("initialize returned no result".into()))?;
        let negotiated =
            initialize::parse_result(result).map_err(|e| UpstreamError::Protocol(e.to_string()))?;

        let binding = Binding {
            session_id: session_id.as_deref(),
            protocol_version: negotiated.protocol_version,
        };
        let ack = self
            .post(
                Some(binding),
                Bytes::from_static(initialize::INITIALIZED),
                forwarded,
            )
            .await?;
        if !ack.status().is_success() {
            return Err(UpstreamError::Refused {
                status: ack.status(),
                detail: "notifications/initialized was refused".into(),
            });
        }
        Ok(Opened {
            session_id,
            negotiated,
        })
    }
}
