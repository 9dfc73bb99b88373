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
        // A stdio server found modern runs its own tasks (an HTTP one never comes here).
        if self.upstream.era() == Some(Era::Modern) {
            return self.relayed(message, session).await;
        }
        let checked = validate(message.headers, message.envelope.method(), message.params());
        let (context, Some(id)) = (checked, message.request_id()) else {
            return self.relayed(message, session).await;
        };
        let context = match (context, method) {
            (Ok(context), _) => context,
            // A call that breaks the 2026-07-28 rules was relayed before tasks were run
            // in sessions, and still is; a request on a task is the extension's.
            (Err(_), Some(Method::ToolsCall)) => return self.relayed(message, session).await,
            (Err(reject), _) => return Err(ProxyError::Stateless(reject)),
        };
        let id = raw_bytes(message.body, id);
        let forwarded = headers::to_legacy_for_stateless(message.headers);
        let (retry, new_call) = (
            message.params().and_then(|p| p.member("requestState")),
            method == Some(Method::ToolsCall),
        );
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
        let task_after = match (retry, new_call) {
            // The next round of a call that asked its client something.
            (Some(_), _) => None,
            (None, true) => match self.task_plan(message, &context, &forwarded).await? {
                Some(after) => Some(after),
                None => return self.relayed(message, session).await,
            },
            (None, false) => {
                let answered = self.task_answer(message, &context).await?;
                return self.stamped(answered, message, session, &id).await;
            }
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
    /// in the session it named), or this one did and the session is renewed and stamped
    /// on it here.
    async fn stamped(
        &self,
        answered: TaskAnswer,
        message: &Message<'_, '_>,
        session: &SessionRef<'_>,
        id: &bytes::Bytes,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let result = match answered {
            TaskAnswer::Forwarded(response) => return Ok(*response),
            TaskAnswer::Here(result) => result,
        };
        let lease = self
            .session_path
            .lease_as(&session.id, session.state.as_deref(), message.caller)
            .await?;
        let body = write::result(id, &result);
        let stamp = session_stamp(&session.id, &lease, id.clone());
        let body = match stamp_message(&body, &stamp) {
            Stamped::Response(Some(stamped)) => bytes::Bytes::from(stamped),
            _ => body,
        };
        Ok(with_session(
            response::json(StatusCode::OK, body),
            &session.id,
        ))
    }
}
