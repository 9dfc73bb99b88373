//! Reaching a legacy (2025-11-25, `initialize`-based) MCP server: over Streamable HTTP
//! (one shared endpoint, an `Mcp-Session-Id` per upstream session) or over stdio (a child
//! process per upstream session).
//!
//! This module knows the legacy transports' rules (headers, the handshake, what a 404 for
//! a session means, stdio framing and process lifetimes) and nothing of data-layer
//! sessions: callers hand it an upstream session to speak in (a [`Binding`]), or none.

mod client;
mod error;
mod handshake;
mod messages;
mod pool;
mod read;
mod stdio;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response};
use hyper::body::Incoming;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

pub use client::{Binding, HttpUpstream, Settings};
pub use error::UpstreamError;
pub use handshake::Opened;
pub use messages::Messages;
pub use pool::{Checkout, Pool, PoolSettings, capabilities_key};
pub use read::{Media, media_type, read_body, read_response_from_sse, says_session_lost};
pub use stdio::{CommandSpec, StdioSettings, StdioUpstream};

use self::stdio::StdioReply;

/// The legacy server behind the proxy.
#[derive(Debug, Clone)]
pub enum Upstream {
    Http(Arc<HttpUpstream>),
    Stdio(Arc<StdioUpstream>),
}

/// What the upstream answered to one message.
#[derive(Debug)]
pub enum Reply {
    /// Streamable HTTP: the response as the upstream sent it (JSON, an event stream, 202).
    Http(Response<Incoming>),
    /// stdio: the messages answering a request, its response last.
    Messages(mpsc::Receiver<Bytes>),
    /// stdio: a notification or response was delivered.
    Delivered,
}

impl Upstream {
    /// How errors, logs and metrics name the upstream.
    pub fn label(&self) -> &Arc<str> {
        match self {
            Upstream::Http(http) => http.label(),
            Upstream::Stdio(stdio) => stdio.label(),
        }
    }

    /// Time allowed for an answer to begin.
    pub fn timeout(&self) -> std::time::Duration {
        match self {
            Upstream::Http(http) => http.settings().timeout,
            Upstream::Stdio(stdio) => stdio.settings().timeout,
        }
    }

    /// Largest single message accepted from the upstream.
    pub fn max_message_bytes(&self) -> usize {
        match self {
            Upstream::Http(http) => http.settings().max_message_bytes,
            Upstream::Stdio(stdio) => stdio.settings().max_message_bytes,
        }
    }

    /// The HTTP upstream, for what only HTTP has (legacy pass-through).
    pub fn http(&self) -> Option<&HttpUpstream> {
        match self {
            Upstream::Http(http) => Some(http),
            Upstream::Stdio(_) => None,
        }
    }

    /// The stdio upstream, for what only stdio has (children, the warm pool).
    pub fn stdio(&self) -> Option<&Arc<StdioUpstream>> {
        match self {
            Upstream::Http(_) => None,
            Upstream::Stdio(stdio) => Some(stdio),
        }
    }

    /// Opens an upstream session with the client's identity (or the proxy's own).
    pub async fn open(
        &self,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<Opened, UpstreamError> {
        match self {
            Upstream::Http(http) => http.open(client_info, capabilities, forwarded).await,
            Upstream::Stdio(stdio) => stdio.open(client_info, capabilities).await,
        }
    }

    /// Sends one message in an upstream session.
    pub async fn exchange(
        &self,
        binding: Binding<'_>,
        message: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<Reply, UpstreamError> {
        match self {
            Upstream::Http(http) => http
                .post(Some(binding), message, forwarded)
                .await
                .map(Reply::Http),
            Upstream::Stdio(stdio) => {
                let key = binding.session_id.ok_or(UpstreamError::SessionGone)?;
                Ok(match stdio.exchange(key, message).await? {
                    StdioReply::Messages(messages) => Reply::Messages(messages),
                    StdioReply::Delivered => Reply::Delivered,
                })
            }
        }
    }

    /// The upstream session's own stream of server messages (the GET stream over HTTP).
    pub async fn listen(
        &self,
        binding: Binding<'_>,
        forwarded: &HeaderMap,
    ) -> Result<Reply, UpstreamError> {
        match self {
            Upstream::Http(http) => {
                let request = http.request(
                    http::Method::GET,
                    Some(binding),
                    forwarded,
                    Default::default(),
                )?;
                http.send(request, Some(binding)).await.map(Reply::Http)
            }
            Upstream::Stdio(stdio) => {
                let key = binding.session_id.ok_or(UpstreamError::SessionGone)?;
                stdio.listen(key).map(Reply::Messages)
            }
        }
    }

    /// Ends an upstream session.
    pub async fn terminate(&self, binding: Binding<'_>) -> Result<(), UpstreamError> {
        match self {
            Upstream::Http(http) => http.terminate(binding).await,
            Upstream::Stdio(stdio) => {
                if let Some(key) = binding.session_id {
                    stdio.terminate(key).await;
                }
                Ok(())
            }
        }
    }

    /// Names an upstream session after the data-layer session it serves, where the
    /// upstream logs per session (a stdio child's stderr).
    pub fn label_session(&self, binding: Binding<'_>, label: String) {
        if let (Upstream::Stdio(stdio), Some(key)) = (self, binding.session_id) {
            stdio.label_session(key, label);
        }
    }

    /// Whether the upstream looks able to serve (for readiness).
    pub async fn reachable(&self) -> bool {
        match self {
            Upstream::Http(http) => http.reachable(std::time::Duration::from_secs(10)).await,
            Upstream::Stdio(stdio) => stdio.healthy(),
        }
    }

    /// Stops what the upstream runs for the proxy (stdio children).
    pub async fn shutdown(&self) {
        if let Upstream::Stdio(stdio) = self {
            stdio.shutdown().await;
        }
    }
}
