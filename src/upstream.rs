//! Reaching a legacy (2025-11-25, `initialize`-based) MCP server over Streamable HTTP.
//!
//! This module knows the legacy transport's rules (headers, the handshake, what a 404 for
//! a session means) and nothing of data-layer sessions: callers hand it an upstream
//! session to speak in, or none.

mod client;
mod error;
mod handshake;
mod read;

pub use client::{Binding, HttpUpstream, Settings};
pub use error::UpstreamError;
pub use handshake::Opened;
pub use read::{Media, media_type, read_body, read_response_from_sse, says_session_lost};
