//! What the proxy remembers about one data-layer session.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;

/// Milliseconds since the Unix epoch (wall clock: `expiresAt` is shown to clients).
pub type Millis = u64;

pub fn now_millis() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// RFC 3339 UTC with second precision, e.g. `2026-03-01T00:00:00Z`.
pub fn rfc3339(at: Millis) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(at);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// One data-layer session and the upstream connection behind it.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    /// The upstream's `Mcp-Session-Id`; `None` when the upstream issued none.
    pub upstream_session: Option<Arc<str>>,
    /// What the upstream answered to `initialize` (shared by sessions that got the same).
    pub negotiated: Arc<Negotiated>,
    pub created_at: Millis,
    /// Idle expiry, renewed by every use.
    pub expires_at: Millis,
    /// Bumped by every use and sealed into `state`, so states are ordered.
    pub seq: u64,
    /// Opened by a legacy client's `initialize` (the proxy is its transport, as for a
    /// stdio upstream), not by `sessions/create`: its answers carry no session `_meta`.
    pub legacy: bool,
    /// Whose session it is, when it is bound to a caller (a session handle opened by a
    /// stateless client's `session_open` tool): only requests with the same credentials
    /// may use or end it. `None`: whoever names the session (a data-layer session).
    pub owner: Option<Caller>,
}
