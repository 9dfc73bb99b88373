//! Session handles (`stateless.affinity = "handles"`): the SEP-2567 way for a stateless
//! client to keep state on a legacy server. State lives in handles passed as tool
//! arguments and checked on every call.
//!
//! - `tools/list` gains the open and close tools (first page only) and every tool an
//!   optional handle argument (`rewrite::handles::tools_list`, applied by the call's task).
//! - The open tool opens a session through the same machinery as `sessions/create` (an
//!   upstream session first, then the record; idle expiry, the reaper, the cap, the admin
//!   API), bound to the caller's credentials, and answers its id as the handle.
//! - A call passing a handle runs in that session; the argument is taken off first.
//! - The close tool ends the session.
//! - An unknown, expired or foreign handle is a tool error result the model can read
//!   (`isError: true`), never a protocol error: the model can open another session, or
//!   call without one.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;

use super::super::session::addr;
use super::StatelessPath;
use crate::error::ProxyError;
use crate::fairness::Refused;
use crate::jsonrpc::{raw_str, write};
use crate::mcp::Method;
use crate::mcp::initialize::Negotiated;
use crate::response::{self, ProxyBody};
use crate::rewrite::handles::{
    HandleArgument, HandleTools, close_argument, opened, take_argument, tool_result,
};
use crate::rewrite::stateless::complete;
use crate::route::Message;
use crate::session::{SessionError, log_tag, rfc3339};
use crate::stateless::Context;
use crate::upstream::hear_every_log;

/// What the handles mode makes of a new stateless call.
pub(super) enum Intercept {
    /// The proxy answered it (a handle tool, or a bad handle argument).
    Answered(Box<Response<ProxyBody>>),
    /// A `tools/call` naming a handle: the body without the argument.
    Handle(String, Option<Vec<u8>>),
    /// A `tools/list`: its result gains the handle tools.
    ListTools { first_page: bool },
    /// Anything else (a `tools/call` without a handle: its body, if anything came off).
    Nothing(Option<Vec<u8>>),
}

/// A handle as it may be shown back in a message (a client sent it: bounded).
fn shown(handle: &str) -> String {
    let mut shown: String = handle.chars().take(64).collect();
    if shown.len() < handle.len() {
        shown.push('…');
    }
    shown
}

/// A new stateless call in handles mode, and what the handle tools answer it with.
#[derive(Clone, Copy)]
pub(super) struct HandleCall<'a> {
    pub path: &'a Arc<StatelessPath>,
    pub message: &'a Message<'a, 'a>,
    pub context: &'a Context<'a>,
    /// The call's JSON-RPC id.
    pub id: &'a Bytes,
    /// The client's headers that cross to the upstream.
    pub forwarded: &'a HeaderMap,
    pub tools: &'a HandleTools,
    /// `stateless.max_handles_per_caller`.
    pub max_per_caller: usize,
}

/// Looks at a new call in handles mode.
pub(super) async fn intercept(call: HandleCall<'_>) -> Result<Intercept, ProxyError> {
    let (path, message, id, tools) = (call.path, call.message, call.id, call.tools);
    let params = message.params();
    match message.method() {
        Some(Method::ToolsList) => Ok(Intercept::ListTools {
            first_page: params
                .and_then(|p| p.member("cursor"))
                .is_none_or(|cursor| cursor.get() == "null"),
        }),
        Some(Method::ToolsCall) => {
            let (Some((raw, payload)), Some(name)) = (
                message.payload,
                params.and_then(|p| p.member("name")).and_then(raw_str),
            ) else {
                return Ok(Intercept::Nothing(None));
            };
            if name == tools.open {
                return open(call)
                    .await
                    .map(|answer| Intercept::Answered(Box::new(answer)));
            }
            if name == tools.close {
                let handle = close_argument(payload, &tools.argument);
                return close(call, handle.as_deref())
                    .await
                    .map(|answer| Intercept::Answered(Box::new(answer)));
            }
            let (body, argument) = take_argument(message.body, raw, payload, &tools.argument);
            Ok(match argument {
                HandleArgument::Absent => Intercept::Nothing(body),
                HandleArgument::Handle(handle) => Intercept::Handle(handle, body),
                HandleArgument::Invalid => {
                    let text = format!(
                        "The \"{argument}\" argument must be a session handle returned by \
                         {open} (a string). Leave it out to run the call on its own.",
                        argument = tools.argument,
                        open = tools.open,
                    );
                    Intercept::Answered(Box::new(path.tool_answer(id, &text, None, true, None)))
                }
            })
        }
        _ => Ok(Intercept::Nothing(None)),
    }
}

/// The open tool: a session bound to the caller, its id as the handle.
async fn open(call: HandleCall<'_>) -> Result<Response<ProxyBody>, ProxyError> {
    let HandleCall {
        path,
        message,
        context,
        id,
        forwarded,
        tools,
        max_per_caller,
    } = call;
    let sessions = path.session_path.sessions();
    let upstream = path.session_path.name();
    let reserved = sessions.reserve_for(
        upstream,
        message.caller,
        message.caller_key(),
        max_per_caller,
    );
    let slot = match reserved {
        Ok(slot) => slot,
        // Refusals are tool results the model can read and act on, like a bad handle.
        Err(SessionError::Caller(refused)) => {
            path.metrics.caller_refused(&refused);
            let close = &tools.close;
            let text = match refused {
                Refused::Bound { max } => format!(
                    "You already have {max} sessions open, the most one caller may hold. Close \
                     one you no longer need with {close}, then open a new one."
                ),
                Refused::Sessions { max, .. } => format!(
                    "You already hold {max} sessions on this server, the most one caller may \
                     hold (session.max_sessions_per_caller). Close one you no longer need with \
                     {close}, then open a new one."
                ),
                Refused::Rate {
                    per_minute,
                    retry_after,
                } => format!(
                    "You may open {per_minute} sessions a minute \
                     (session.creations_per_caller_per_minute) and opened them all. Try again \
                     in {} seconds, or call without a session.",
                    retry_after.as_secs()
                ),
                Refused::Callers { .. } => "The server cannot open another session now. Try \
                     again later, or call without a session."
                    .to_owned(),
            };
            return Ok(path.tool_answer(id, &text, None, true, None));
        }
        Err(SessionError::Full { max }) => {
            let text = format!(
                "The server holds its maximum of {max} sessions and cannot open another now. \
                 Close a session you no longer need, or try again later."
            );
            return Ok(path.tool_answer(id, &text, None, true, None));
        }
        Err(e) => return Err(path.session_path.session_error(e, "")),
    };
    let issued = path
        .session_path
        .open_bound(
            slot,
            message.headers,
            message.caller,
            context.client_info,
            Some(context.capabilities),
        )
        .await?;
    // A handle's session serves calls with different log levels: it hears them all, and
    // each call filters.
    if let Ok(Some(record)) = sessions.peek(&issued.id).await {
        let route = &record.backing;
        hear_every_log(&path.upstream, &route.negotiated, addr(route), forwarded).await;
    }
    tracing::info!(handle = %log_tag(&issued.id), "session handle opened");
    let expires_at = rfc3339(issued.expires_at);
    // A sealed id cannot be renewed by a call that brings no `state` back (a handle's
    // never does): its end is fixed when it opens.
    let ends = if sessions.store().renews_by_use() {
        format!(
            "It ends after {idle} without use (next: {expires_at})",
            idle = path.idle_text()
        )
    } else {
        format!("It ends at {expires_at}, used or not")
    };
    let text = format!(
        "Session opened. Its handle is {handle}\nPass \"{handle}\" as the \"{argument}\" \
         argument of other tools to run them in this session; the server keeps its state \
         between those calls. {ends}, or when you call {close}.",
        handle = issued.id,
        argument = tools.argument,
        close = tools.close,
    );
    let structured = opened(&issued.id, &expires_at);
    Ok(path.tool_answer(
        id,
        &text,
        Some(&structured),
        false,
        Some(&issued.negotiated),
    ))
}

/// The close tool: ends the caller's session (at the replica running its stdio server,
/// when another one does).
async fn close(
    call: HandleCall<'_>,
    handle: Option<&str>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let (path, message, id, tools) = (call.path, call.message, call.id, call.tools);
    let Some(handle) = handle.filter(|h| !h.is_empty()) else {
        let text = format!(
            "{close} needs the \"{argument}\" argument: the handle {open} returned.",
            close = tools.close,
            argument = tools.argument,
            open = tools.open,
        );
        return Ok(path.tool_answer(id, &text, None, true, None));
    };
    if let Some(forwarded) = path.session_path.message_to_owner(handle, message).await {
        return forwarded;
    }
    match path.session_path.end_as(handle, message.caller).await {
        Ok(()) => {
            tracing::info!(handle = %log_tag(handle), "session handle closed");
            let text = format!("Session {} closed.", shown(handle));
            Ok(path.tool_answer(id, &text, None, false, None))
        }
        Err(ProxyError::SessionNotFound { .. }) => Ok(unknown(path, id, handle)),
        Err(e) => Err(e),
    }
}

/// The answer to a call naming a handle that does not exist (never opened, closed,
/// expired, lost by the upstream) or belongs to another caller — one message for all, so
/// that it tells nothing of other callers' handles.
pub(super) fn unknown(path: &StatelessPath, id: &Bytes, handle: &str) -> Response<ProxyBody> {
    let (open, argument) = path
        .handle_tools()
        .map_or(("", ""), |t| (t.open.as_str(), t.argument.as_str()));
    let text = format!(
        "The session \"{handle}\" does not exist: it was closed, it ended after {idle} \
         without use, the server lost it, or it is not yours. Call {open} to open a new \
         session, or leave out the \"{argument}\" argument to run the call on its own.",
        handle = shown(handle),
        idle = path.idle_text(),
    );
    path.tool_answer(id, &text, None, true, None)
}

impl StatelessPath {
    /// A tool result the proxy answers itself, as a 2026-07-28 result: `resultType`, and
    /// the server's identity (`negotiated`'s, or the last one the upstream gave).
    pub(super) fn tool_answer(
        &self,
        id: &[u8],
        text: &str,
        structured: Option<&[u8]>,
        is_error: bool,
        negotiated: Option<&Arc<Negotiated>>,
    ) -> Response<ProxyBody> {
        let result = tool_result(text, structured, is_error);
        let server_info = negotiated
            .map(|n| n.server_info.clone())
            .or_else(|| self.last_server_info());
        let finished = String::from_utf8(result.clone())
            .ok()
            .and_then(|text| RawValue::from_string(text).ok())
            .and_then(|raw| complete(&raw, Method::ToolsCall.as_str(), server_info.as_deref()))
            .unwrap_or(result);
        response::json(StatusCode::OK, write::result(id, &finished))
    }
}
