//! Tasks in a data-layer session: a 2026-07-28 client that opened a session
//! (`sessions/create`) gets tasks in it as a stateless client does (`route` sends its
//! `tools/call` and `tasks/*` here when the upstream does not run tasks itself).
//!
//! - A `tools/call` that may become a task (the same rules: the client declared the
//!   extension in the request, the tool declared task support or the operator named it)
//!   runs on the session's own upstream session, driven like a stateless call — its
//!   questions are `input_required` rounds before the task, `inputRequests` of the task
//!   after — and its retries come back here. Any other call is relayed by the session
//!   path as it would be without tasks.
//! - `tasks/get`, `tasks/update`, `tasks/cancel` are the stateless path's, on the same
//!   table: a task belongs to its caller, whichever session (or none) asks.
//! - Every answer given here carries the session, renewed, as any answer in it does.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::{Scope, StatelessPath, TaskAnswer};
use crate::error::ProxyError;
use crate::jsonrpc::write;
use crate::mcp::{ClientEra, Method};
use crate::paths::headers;
use crate::paths::session::{raw_bytes, session_stamp, with_session};
use crate::response::{self, ProxyBody};
use crate::rewrite::to_client::{Stamped, stamp_message};
use crate::route::{Message, SessionRef};
use crate::session::Lease;
use crate::stateless::validate;
use crate::upstream::Era;

impl StatelessPath {
    /// Serves a 2026-07-28 `tools/call` or `tasks/*` request in data-layer session
    /// `session` (see the module documentation).
    pub async fn in_session(
        self: &Arc<Self>,
        message: &Message<'_, '_>,
        session: &SessionRef<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let method = message.method();
        let retry = message.params().and_then(|p| p.member("requestState"));
        // What the session path relays: any request when tasks are off, or before a
        // stdio server found modern (it runs its own; an HTTP one never comes here); a
        // notification.
        let (true, false, Some(id)) = (
            self.task_rules.enabled,
            self.upstream.era() == Some(Era::Modern),
            message.request_id(),
        ) else {
            return self.relayed(message, session).await;
        };
        let new_call = method == Some(Method::ToolsCall) && retry.is_none();
        let context = match validate(message.headers, message.envelope.method(), message.params()) {
            Ok(context) => context,
            // A new call that breaks the 2026-07-28 rules was relayed before tasks were
            // run in sessions, and still is; a retry or a request on a task is the
            // proxy's own.
            Err(_) if new_call => return self.relayed(message, session).await,
            Err(reject) => return Err(ProxyError::Stateless(reject)),
        };
        if let Some(params) = message.params() {
            params.check_typed_meta()?;
        }
        let id = raw_bytes(message.body, id);
        let forwarded = headers::to_legacy_for_stateless(message.headers);
        if method != Some(Method::ToolsCall) {
            // The session is checked (and renewed) before anything is done to the task.
            let lease = self
                .session_path
                .lease_as(&session.id, session.state.as_deref(), message.caller)
                .await?;
            let answered = self.task_answer(message, &context).await?;
            return Ok(self.stamped(answered, session, &lease, &id));
        }
        // A session whose stdio server another replica runs is served there (which
        // decides the same way).
        if new_call
            && let Some(forwarded) = self
                .session_path
                .message_to_owner(&session.id, message)
                .await
        {
            return forwarded;
        }
        let task_after = match new_call {
            // The next round of a call that asked its client something.
            false => None,
            true => match self.task_plan(message, &context, &forwarded).await {
                Ok(Some(after)) => Some(after),
                // Not a task, or `Mcp-Param-*` headers a 2026-07-28 server would refuse:
                // the legacy server behind the session takes the call as it always did.
                Ok(None) | Err(ProxyError::Stateless(_)) => {
                    return self.relayed(message, session).await;
                }
                Err(e) => return Err(e),
            },
        };
        let scope = Scope::Session {
            session,
            task_after,
        };
        let answered = self.call(message, &context, id, &forwarded, scope).await?;
        Ok(with_session(answered, &session.id))
    }

    /// The session path's answer, as if tasks were not run in sessions.
    async fn relayed(
        &self,
        message: &Message<'_, '_>,
        session: &SessionRef<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        self.session_path
            .forward(message, session, ClientEra::Modern)
            .await
    }

    /// A task request's answer: the replica holding the task answered it (stamped there,
    /// in the session it named), or this one did, stamped with the session as `lease`
    /// renewed it.
    fn stamped(
        &self,
        answered: TaskAnswer,
        session: &SessionRef<'_>,
        lease: &Lease,
        id: &Bytes,
    ) -> Response<ProxyBody> {
        let result = match answered {
            TaskAnswer::Forwarded(response) => return *response,
            TaskAnswer::Here(result) => result,
        };
        let body = write::result(id, &result);
        let stamp = session_stamp(&session.id, lease, id.clone());
        let body = match stamp_message(&body, &stamp) {
            Stamped::Response(Some(stamped)) => Bytes::from(stamped),
            _ => body,
        };
        with_session(response::json(StatusCode::OK, body), &session.id)
    }
}
