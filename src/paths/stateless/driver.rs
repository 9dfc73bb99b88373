//! One stateless call, from its first request to its last round: a task that holds the
//! call's upstream session (pooled, its own, pinned or a handle's: `affinity`) and reads
//! the upstream's answer message by message.
//!
//! The upstream's own requests (sampling, elicitation, roots — SEP-2322 calls them input
//! requests) are gathered for a moment (a server may send several at once), then the
//! client's call ends with `input_required` and a sealed `requestState`; the task parks,
//! keeping the upstream call open, until the client retries with `inputResponses`. The
//! answers go to the upstream and the call goes on, answering the retry. A request whose
//! capability the client did not declare is answered with an error by the proxy, and the
//! client gets -32021 (MissingRequiredClientCapability) instead of a request it cannot
//! handle.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::super::answer::{Answer, First};
use super::affinity::CallSession;
use super::tasks::{Control, InputRequest, Task};
use super::waiting::WaitingPlace;
use super::{GATHER, MAX_GATHER, StatelessPath, declares};
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, ErrorObject, Kind, code, write};
use crate::mcp::Method;
use crate::mcp::caller::{Caller, CallerKey};
use crate::rewrite::handles::{HandleTools, tools_list};
use crate::rewrite::stateless::{
    complete, error_for_client, input_request, input_required, key_of,
};
use crate::stateless::request_state::StateBinding;
use crate::stateless::{LogLevel, log_passes};
use crate::upstream::{Messages, UpstreamError};

/// The next round of a parked call: the client's retry.
#[derive(Debug)]
pub struct Resume {
    /// The retry's JSON-RPC id (raw).
    pub client_id: Bytes,
    pub provided: Vec<(String, Box<RawValue>)>,
    pub log_level: Option<LogLevel>,
    pub first: oneshot::Sender<First>,
}

/// Everything a call's task needs.
#[derive(Debug)]
pub struct StatelessCall {
    pub path: Arc<StatelessPath>,
    /// Held until the call's last round: given back, ended or kept when the call drops.
    pub session: CallSession,
    pub messages: Messages,
    /// The HTTP status the upstream's answer came with (200 for a stdio child).
    pub status: StatusCode,
    /// The id of the call's first request, as the client wrote it: the upstream's
    /// response to it comes back with it (the upstream itself knows the proxy's id).
    pub first_id: Bytes,
    /// The id of the client request being answered now.
    pub client_id: Bytes,
    pub method: String,
    pub capabilities: Box<RawValue>,
    pub log_level: Option<LogLevel>,
    /// Input responses the client gave before being asked, by key.
    pub provided: HashMap<String, Box<RawValue>>,
    /// Who made the call: the only caller its `requestState` tokens open for.
    pub caller: Caller,
    /// Whom the bound on waiting calls counts it against.
    pub caller_key: Option<CallerKey>,
    /// The canonical params the call's `requestState` tokens are bound to.
    pub bound: String,
    /// `params.uri` of a `resources/read` (for the 2026 not-found error).
    pub uri: Option<String>,
    pub forwarded: HeaderMap,
    /// A `tools/list` in handles mode: its result gains the handle tools.
    pub list: Option<ListWithHandles>,
    /// A `tools/call` that becomes a task if it has not answered within this long (and
    /// asked its client nothing before).
    pub task_after: Option<Duration>,
}

/// How a `tools/list` result is extended with the handle tools.
#[derive(Debug)]
pub struct ListWithHandles {
    pub tools: HandleTools,
    /// The request had no `cursor`: the tools are added to this page.
    pub first_page: bool,
    /// How long an unused session lives, in words.
    pub idle: String,
}

/// An upstream request waiting for the client.
struct Pending {
    key: String,
    upstream_id: Box<RawValue>,
    request: Vec<u8>,
}

/// Runs a call to its end.
pub async fn run(mut call: StatelessCall, first: oneshot::Sender<First>) {
    let mut out = Answer::Head(first);
    let mut pending: Vec<Pending> = Vec::new();
    let mut missing: Vec<&'static str> = Vec::new();
    let idle = call.path.sse_idle_timeout;
    // Since when the upstream's requests are being gathered (bounded as a whole, so that
    // a server sending one every few milliseconds cannot keep the client waiting).
    let mut gathering: Option<tokio::time::Instant> = None;
    // When the call becomes a task, if it may and has not answered by then.
    let mut decide_at = call
        .task_after
        .map(|after| tokio::time::Instant::now() + after);
    let mut task: Option<Running> = None;
    loop {
        let deciding = !pending.is_empty() || !missing.is_empty();
        let mut wait = match (deciding, gathering) {
            (false, _) => {
                gathering = None;
                match &task {
                    // A task waits for its upstream as long as it lives.
                    Some(running) => running.remaining(),
                    None => idle,
                }
            }
            (true, None) => {
                gathering = Some(tokio::time::Instant::now());
                GATHER
            }
            (true, Some(since)) => GATHER.min(MAX_GATHER.saturating_sub(since.elapsed())),
        };
        if let (None, false, Some(at)) = (&task, deciding, decide_at) {
            wait = wait.min(at.saturating_duration_since(tokio::time::Instant::now()));
        }
        let next = tokio::select! {
            next = tokio::time::timeout(wait, call.messages.next_message()) => next,
            // The client left while its answer was awaited: the upstream call is
            // cancelled and its session, whose state is now unknown, not reused. (A
            // task's client left on purpose: the task goes on.)
            () = out.gone(), if task.is_none() => {
                tracing::debug!("the client left a stateless call; cancelled upstream");
                cancel(&mut call).await;
                break;
            }
            control = heard(&mut task) => {
                match control {
                    Some(Control::Answer { upstream_id, response }) => {
                        let reply = write::result(upstream_id.get().as_bytes(), response.get().as_bytes());
                        answer(&call, reply).await;
                        continue;
                    }
                    Some(Control::Cancel) | None => {
                        tracing::debug!("a task was cancelled; cancelled upstream");
                        cancel(&mut call).await;
                        break;
                    }
                }
            }
        };
        let message = match next {
            Err(_) if !pending.is_empty() => {
                if let Some(running) = &task {
                    running
                        .task
                        .ask(pending.drain(..).map(Pending::into_input).collect());
                    continue;
                }
                if park(&mut call, &mut out, &mut pending).await {
                    decide_at = call
                        .task_after
                        .map(|after| tokio::time::Instant::now() + after);
                    continue;
                }
                break;
            }
            Err(_) if !missing.is_empty() => {
                // Nothing the client can answer: it lacks the capability. The upstream
                // got an error for its request; the call is drained in the background.
                let required = std::mem::take(&mut missing);
                if task.is_none() {
                    missing_capability(&call, &mut out, required).await;
                }
                continue;
            }
            Err(_)
                if task.is_none()
                    && decide_at.is_some_and(|at| at <= tokio::time::Instant::now()) =>
            {
                decide_at = None;
                task = become_task(&call, &mut out).await;
                continue;
            }
            Err(_) => {
                if let Some(running) = &task {
                    if running.remaining() > Duration::ZERO {
                        continue;
                    }
                    running.task.fail(&ErrorObject {
                        code: code::INTERNAL_ERROR,
                        message: "the task ran longer than its ttlMs and was cancelled".into(),
                        data: None,
                    });
                } else {
                    fail(&mut out, &call, UpstreamError::Idle(idle)).await;
                }
                cancel(&mut call).await;
                break;
            }
            Ok(None) => {
                let ended = UpstreamError::Protocol(
                    "the upstream ended its answer without a response".into(),
                );
                fail_call(&mut out, &task, &call, ended).await;
                call.session.discard();
                break;
            }
            Ok(Some(Err(e))) => {
                fail_call(&mut out, &task, &call, e).await;
                call.session.discard();
                break;
            }
            Ok(Some(Ok(message))) => message,
        };
        let Ok(envelope) = Envelope::parse(&message) else {
            continue;
        };
        match envelope.kind {
            Kind::Notification => {
                let forward = match Method::parse(envelope.method()) {
                    Some(Method::LogMessage) => log_passes(&envelope, call.log_level),
                    Some(Method::Progress) => true,
                    // Other notifications belong to subscriptions/listen streams.
                    _ => false,
                };
                if forward && !out.emit(message.clone()).await {
                    cancel(&mut call).await;
                    break;
                }
            }
            Kind::Request => {
                let Some(id) = envelope.id else { continue };
                let method = Method::parse(envelope.method());
                if method == Some(Method::Ping) {
                    answer(&call, write::result(id.get().as_bytes(), b"{}")).await;
                    continue;
                }
                let Some(key) = key_of(&envelope) else {
                    continue;
                };
                if let Some(response) = call.provided.remove(&key) {
                    let reply = write::result(id.get().as_bytes(), response.get().as_bytes());
                    answer(&call, reply).await;
                    continue;
                }
                match method.and_then(Method::client_capability) {
                    Some(capability) if declares(&call.capabilities, capability) => {
                        pending.push(Pending {
                            key,
                            upstream_id: id.to_owned(),
                            request: input_request(&envelope),
                        });
                    }
                    Some(capability) => {
                        let why = format!("the client did not declare the {capability} capability");
                        answer(&call, refusal(id, why)).await;
                        if !missing.contains(&capability) {
                            missing.push(capability);
                        }
                    }
                    None => {
                        let why =
                            "a client of the stateless protocol takes no requests of this kind";
                        answer(&call, refusal(id, why.to_owned())).await;
                    }
                }
            }
            Kind::Response => {
                if envelope.id.map(|id| id.get().as_bytes()) != Some(call.first_id.as_ref()) {
                    continue;
                }
                if let Some(running) = &task {
                    settle(&running.task, &call, &envelope);
                    break;
                }
                if !missing.is_empty() {
                    missing_capability(&call, &mut out, missing).await;
                    break;
                }
                let (status, answer) = final_answer(&call, &envelope);
                out.finish(status, answer).await;
                break;
            }
        }
    }
    // A task that ended is written where every replica finds it (with a shared store)
    // first: its client may already have seen it end here, and this replica may not live
    // through the upstream session's release.
    if let Some(running) = &task {
        call.path.keep_ended(&running.task).await;
    }
    // The client has its answer; now the upstream session goes back to the pool, is
    // ended (its own, or one whose state is unknown), or stays (pinned, a handle's).
    call.session.release().await;
    drop(task);
}

/// A call running as a task: the task, what its client says to it, and the waiting
/// call's place it holds (it holds an upstream session as long).
struct Running {
    task: Arc<Task>,
    heard: tokio::sync::mpsc::UnboundedReceiver<Control>,
    /// Held, not read: given back when the driver ends.
    _place: WaitingPlace,
}

impl Running {
    /// How long the task may still run.
    fn remaining(&self) -> Duration {
        let left = self
            .task
            .expires_at()
            .saturating_sub(crate::session::now_millis());
        Duration::from_millis(left)
    }
}

/// What the task's client said next; never, when the call is no task.
async fn heard(task: &mut Option<Running>) -> Option<Control> {
    match task {
        Some(running) => running.heard.recv().await,
        None => std::future::pending().await,
    }
}

/// The call has not answered in time: it becomes a task, and its client hears the
/// `CreateTaskResult`. `None` (the call goes on as it is) beyond the bounds on tasks and
/// on calls holding an upstream session while their client is away.
async fn become_task(call: &StatelessCall, out: &mut Answer) -> Option<Running> {
    // A client that left as the window closed would never hear of the task: the call
    // stays plain, and the loop cancels it upstream.
    if out.is_closed() {
        return None;
    }
    let path = &call.path;
    let pooled = matches!(call.session, CallSession::Pooled(_));
    let place = match path.waiting.take(call.caller_key, pooled) {
        Ok(place) => place,
        Err(refused) => {
            tracing::info!(error = %refused, "a call did not become a task");
            return None;
        }
    };
    let (task, heard) = path
        .tasks
        .create(call.caller, call.caller_key, path.cluster.me())?;
    tracing::debug!("a tools/call became a task");
    path.metrics.tasks_created.inc();
    out.finish(
        StatusCode::OK,
        write::result(&call.client_id, &task.created()),
    )
    .await;
    Some(Running {
        task,
        heard,
        _place: place,
    })
}

/// The task's call answered: `completed` with its result (a tool error too), or `failed`
/// with its JSON-RPC error.
fn settle(task: &Task, call: &StatelessCall, envelope: &Envelope<'_>) {
    let server_info = &call.session.negotiated().server_info;
    if let Some(result) = envelope.result {
        let result = complete(result, &call.method, Some(server_info))
            .unwrap_or_else(|| result.get().as_bytes().to_vec());
        task.complete(result);
        return;
    }
    let (_, error) = error_for_client(envelope.error, None);
    task.fail(&error);
}

/// The call failed before answering: its client hears why, or its task ends `failed`.
async fn fail_call(
    out: &mut Answer,
    task: &Option<Running>,
    call: &StatelessCall,
    source: UpstreamError,
) {
    match task {
        Some(running) => running.task.fail(&call.path.error(source).answer().1),
        None => fail(out, call, source).await,
    }
}

impl Pending {
    fn into_input(self) -> InputRequest {
        InputRequest {
            key: self.key,
            upstream_id: self.upstream_id,
            request: self.request,
        }
    }
}

/// The proxy's own error answer to an upstream request the client cannot take.
fn refusal(id: &RawValue, why: String) -> Bytes {
    let error = ErrorObject {
        code: code::METHOD_NOT_FOUND,
        message: why,
        data: None,
    };
    write::error(Some(id.get().as_bytes()), &error)
}

/// Sends a message to the upstream call (an answer to one of its requests).
async fn answer(call: &StatelessCall, message: Bytes) {
    let reply = call
        .path
        .upstream
        .exchange(call.session.addr(), message, call.forwarded.clone())
        .await;
    if let Err(e) = reply {
        tracing::warn!(error = %e, "could not answer an upstream request");
    }
}

/// Ends the client's round with `input_required` and waits for the retry. `true` when
/// the call goes on.
async fn park(call: &mut StatelessCall, out: &mut Answer, pending: &mut Vec<Pending>) -> bool {
    let path = call.path.clone();
    // Waiting holds an upstream session for minutes: within the caller's bound, and
    // never with the pool's last places; beyond them the call ends here.
    let pooled = matches!(call.session, CallSession::Pooled(_));
    let _place = match path.waiting.take(call.caller_key, pooled) {
        Ok(place) => place,
        Err(refused) => {
            tracing::info!(error = %refused, "a call needing its client's input could not wait");
            finish_with(out, call, &refused).await;
            cancel(call).await;
            return false;
        }
    };
    let (resume_tx, resume_rx) = oneshot::channel();
    let park_id = path.parked.park(resume_tx);
    let token = path.sealer.seal(
        park_id,
        path.cluster.me(),
        StateBinding {
            caller: call.caller,
            method: &call.method,
            params: &call.bound,
        },
    );
    let requests: Vec<(String, Vec<u8>)> = pending
        .iter()
        .map(|p| (p.key.clone(), p.request.clone()))
        .collect();
    let server_info = call.session.negotiated().server_info.clone();
    let result = input_required(&requests, &token, &server_info);
    out.finish(StatusCode::OK, write::result(&call.client_id, &result))
        .await;
    let resumed = tokio::time::timeout(path.sealer.ttl(), resume_rx).await;
    let resume = match resumed {
        Ok(Ok(resume)) => resume,
        _ => {
            path.parked.take(&park_id);
            cancel(call).await;
            return false;
        }
    };
    call.client_id = resume.client_id;
    call.log_level = resume.log_level;
    *out = Answer::Head(resume.first);
    call.provided.extend(resume.provided);
    let mut still = Vec::new();
    for request in pending.drain(..) {
        match call.provided.remove(&request.key) {
            Some(response) => {
                let id = request.upstream_id.get().as_bytes();
                answer(call, write::result(id, response.get().as_bytes())).await
            }
            None => still.push(request),
        }
    }
    // Anything left unanswered is asked for again at the next pause.
    *pending = still;
    true
}

/// Tells the upstream the call is off (the client left, or never came back) and ends
/// the session: what else it was doing for the call is unknown.
async fn cancel(call: &mut StatelessCall) {
    call.path
        .upstream
        .cancel(
            call.session.addr(),
            &call.messages,
            &call.first_id,
            "the client went away",
            &call.forwarded,
        )
        .await;
    call.session.discard();
}

/// Ends the client's round with the proxy's own error.
async fn finish_with(out: &mut Answer, call: &StatelessCall, error: &ProxyError) {
    out.fail(&call.client_id, error).await;
}

async fn fail(out: &mut Answer, call: &StatelessCall, source: UpstreamError) {
    finish_with(out, call, &call.path.error(source)).await;
}

/// The client lacks what the upstream asked for: -32021 with `requiredCapabilities`.
async fn missing_capability(call: &StatelessCall, out: &mut Answer, required: Vec<&'static str>) {
    finish_with(out, call, &ProxyError::MissingClientCapability { required }).await;
}

/// The upstream's response as the client's: a 2026-07-28 result, or the error with
/// 2026's codes and statuses.
fn final_answer(call: &StatelessCall, envelope: &Envelope<'_>) -> (StatusCode, Bytes) {
    let server_info = &call.session.negotiated().server_info;
    if let Some(result) = envelope.result {
        if call.method == "tools/list" {
            // What the tools declare (task support, header arguments), for later calls.
            call.path.session_path.tool_hints().learn_result(result);
        }
        let listed = call
            .list
            .as_ref()
            .and_then(|list| tools_list(result, &list.tools, list.first_page, &list.idle));
        let listed = listed.and_then(|listed| {
            for name in &listed.clashes {
                tracing::warn!(
                    tool = %name,
                    "an upstream tool clashes with the session handle tools (stateless.handle_*):                      a tool of that name is the proxy's, an argument of that name is taken off"
                );
            }
            String::from_utf8(listed.result)
                .ok()
                .and_then(|text| RawValue::from_string(text).ok())
        });
        let result = listed.as_deref().unwrap_or(result);
        let rewritten = complete(result, &call.method, Some(server_info))
            .unwrap_or_else(|| result.get().as_bytes().to_vec());
        return (StatusCode::OK, write::result(&call.client_id, &rewritten));
    }
    let (mut status, object) = error_for_client(envelope.error, call.uri.as_deref());
    // An upstream that refused the request itself (a 4xx with its error, e.g. a message
    // its schema rejects) said it was the client's: so does the proxy.
    if status == StatusCode::OK && call.status.is_client_error() {
        status = call.status;
    }
    (status, write::error(Some(&call.client_id), &object))
}
