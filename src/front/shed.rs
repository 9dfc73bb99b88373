//! Which requests are new work — the work shed while the proxy is overloaded
//! (`overload`: memory or file descriptors near their limits), with HTTP 503 and
//! `Retry-After` — and which are served whatever the load.
//!
//! New work opens something: a data-layer session (`sessions/create`, SEP-1364's
//! `initialize` without a session, an old client's `initialize` of a stdio server), an
//! upstream session for a stateless (2026-07-28) call, or an old client's exchange
//! outside any upstream session (its `initialize` among them). Requests in sessions
//! already open are served — they hold what they need, and refusing them would break
//! work under way — and so are a task's `tasks/get`, `tasks/update` and `tasks/cancel`, and deletes, which give resources back, and notifications and
//! responses.
//!
//! What it does not know: whether the proxy is overloaded.

use crate::jsonrpc::Kind;
use crate::mcp::Method;
use crate::mcp::headers::MCP_SESSION_ID;
use crate::route::{Message, Route};

/// Whether `message`, classified as `route`, is new work (see the module docs).
pub fn is_new_work(message: &Message<'_, '_>, route: &Route<'_>) -> bool {
    match route {
        Route::Create { .. } | Route::LegacyInitialize { .. } => true,
        // A task's polls, answers and cancels serve work already running.
        Route::Stateless => !matches!(
            message.method(),
            Some(Method::TasksGet | Method::TasksUpdate | Method::TasksCancel)
        ),
        Route::Sep1364Initialize { session, .. } => session.is_none(),
        Route::PassThrough => {
            message.envelope.kind == Kind::Request && !message.headers.contains_key(&MCP_SESSION_ID)
        }
        Route::Delete { .. }
        | Route::InitializedAck { .. }
        | Route::InSession { .. }
        | Route::TaskInSession { .. } => false,
    }
}
