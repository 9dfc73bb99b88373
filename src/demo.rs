//! The embedded demo server: a small, strict MCP 2025-11-25 server over Streamable HTTP.
//!
//! It is what `mcp-session-proxy` proxies to when no upstream is configured (so the
//! quickstart works with nothing else installed), and the legacy server the integration
//! tests put behind the proxy. It is strict on purpose: it refuses what a real legacy
//! server refuses (a missing or unknown `Mcp-Session-Id`, calls before
//! `notifications/initialized`, a wrong `MCP-Protocol-Version`, a foreign `Host`), and it
//! refuses data-layer session `_meta` outright, so a proxy that forgets to rewrite fails
//! loudly. With `record` on it keeps a journal of every message it received.
//!
//! Tools: `echo`, `counter` (per upstream session), `slow` (progress and log
//! notifications over SSE), `sample` (asks the client for sampling), `sleep` (answers
//! late), `whoami` (its own session id), `announce` (a notification on the GET stream),
//! `change_tools` (`notifications/tools/list_changed` on every session's GET stream).
//!
//! It declares `tools` (with `listChanged`) and `logging`, and serves both: `tools/list`,
//! `tools/call`, and `logging/setLevel`, whose level decides which log notifications
//! (`slow`, `announce`) the session gets. It declares nothing it does not serve.

mod http;
mod journal;
mod tools;

pub use self::http::{DemoOptions, DemoServer};
pub use journal::Received;
