//! One old client's call through the reverse bridge, from its request to its answer: a
//! task that sends it to the modern upstream, passes progress and logs on as they come,
//! and, while the upstream answers `input_required` (SEP-2322), asks the client the
//! questions as real requests on the call's event stream, waits for its answers (POSTed
//! to its session: `super::answered`), and sends the call again with them — for as many
//! rounds as the server needs, at most [`MAX_ROUNDS`]. The client sees one ordinary
//! 2025-11-25 call.
//!
//! The task ends the upstream call (drops its stream: 2026-07-28's cancellation) when the
//! client cancels it (`notifications/cancelled`), when the client's stream is gone, or
//! when its answers do not come within the wait.

use opentelemetry::context::FutureExt as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::super::answer::{Answer, First};
use super::super::framed;
use super::super::session::addr;
use super::{Bridge, Bridged};
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, IdValue, Kind, write};
use crate::mcp::Method;
use crate::mcp::headers::Accepts;
use crate::mcp::tools::ToolHints;
use crate::rewrite::to_legacy::{self, InputRequest, InputRequired};
use crate::rewrite::to_modern::{Frame, framed};
use crate::route::Message;
use crate::session::{Backing, ClientIdentity, Lease};
use crate::upstream::{Upstream, UpstreamError};

/// Rounds of questions one call may ask before it is given up (the specification sets no
/// bound; a server that never stops asking must not hold a call for ever).
pub const MAX_ROUNDS: usize = 16;

/// Everything the task needs.
pub struct Call {
    upstream: Upstream,
    /// What the upstream's tools declared: the `Mcp-Param-*` headers of a `tools/call`,
    /// learned from a `tools/list` answered here.
    tools: Arc<ToolHints>,
    /// The request is a `tools/list`: its answer is learned from.
    lists_tools: bool,
    backing: Backing,
    client: Option<Arc<ClientIdentity>>,
    bridged: Arc<Bridged>,
    /// The client's request as it came (without session metadata): each round sends it
    /// again with the answers so far.
    request: Bytes,
    /// The client's request id (raw).
    id: Bytes,
    accepts: Accepts,
    forwarded: HeaderMap,
}

impl Call {
    pub fn new(
        bridge: &Bridge,
        message: &Message<'_, '_>,
        lease: &Lease,
        bridged: Arc<Bridged>,
        forwarded: HeaderMap,
    ) -> Result<Call, ProxyError> {
        let id = message
            .request_id()
            .map(|id| Bytes::copy_from_slice(id.get().as_bytes()))
            .ok_or(ProxyError::StatelessResponse)?;
        Ok(Call {
            upstream: bridge.upstream.clone(),
            tools: bridge.tools.clone(),
            lists_tools: message.method() == Some(Method::ToolsList),
            backing: lease.record.backing.clone(),
            client: lease.record.client.clone(),
            bridged,
            request: message.body.clone(),
            id,
            accepts: message.accepts,
            forwarded,
        })
    }

    /// Starts the call's task; how the client's answer starts.
    pub async fn start(self, input_wait: Duration) -> Result<First, ProxyError> {
        let (answer, first) = Answer::new();
        let (cancel, cancelled) = oneshot::channel();
        let key = IdValue::of(&self.id).map(IdValue::into_owned);
        if let Some(key) = key.clone() {
            self.bridged.calls.lock().insert(key, cancel);
        }
        let bridged = self.bridged.clone();
        let label = self.upstream.label().clone();
        // The call's later rounds are the request's trace.
        tokio::spawn(
            async move {
                self.run(answer, cancelled, input_wait).await;
                if let Some(key) = key {
                    bridged.calls.lock().remove(&key);
                }
            }
            .with_current_context(),
        );
        first.await.map_err(|_| ProxyError::Upstream {
            upstream: label.to_string(),
            source: UpstreamError::Unreachable("the upstream call ended without an answer".into()),
        })
    }

    async fn run(
        self,
        mut answer: Answer,
        mut cancelled: oneshot::Receiver<()>,
        input_wait: Duration,
    ) {
        let mut responses: Vec<(String, Box<RawValue>)> = Vec::new();
        let mut asked: Option<InputRequired> = None;
        for round in 0..=MAX_ROUNDS {
            let body = match self.body(asked.as_ref(), &responses) {
                Some(body) => body,
                None => {
                    let e = UpstreamError::Protocol("the call could not be retried".into());
                    return self.fail(&mut answer, e).await;
                }
            };
            let sent = framed::exchange(
                &self.upstream,
                &self.tools,
                addr(&self.backing),
                body,
                &self.forwarded,
                self.frame(),
            );
            let exchanged = tokio::select! {
                exchanged = sent => exchanged,
                _ = &mut cancelled => return,
                () = answer.gone() => return,
            };
            let mut reply = match exchanged {
                Ok(reply) => reply,
                Err(e) => return self.fail(&mut answer, e).await,
            };
            // The upstream's messages for this round, until its answer.
            let last = loop {
                let next = tokio::select! {
                    next = reply.messages.next_message() => next,
                    _ = &mut cancelled => return,
                    () = answer.gone() => return,
                };
                let message = match next {
                    Some(Ok(message)) => message,
                    Some(Err(e)) => return self.fail(&mut answer, e).await,
                    None => {
                        let e = UpstreamError::Protocol(
                            "the upstream ended its answer without a response".into(),
                        );
                        return self.fail(&mut answer, e).await;
                    }
                };
                let Ok(envelope) = Envelope::parse(&message) else {
                    continue;
                };
                match envelope.kind {
                    // Progress and logs (at the session's level) go on as they come.
                    Kind::Notification => {
                        if !answer.emit(message.clone()).await {
                            return;
                        }
                    }
                    // A 2026-07-28 server asks nothing on a request's stream.
                    Kind::Request => {}
                    Kind::Response => break message,
                }
            };
            if self.lists_tools {
                self.tools.learn(&last);
            }
            let Ok(envelope) = Envelope::parse(&last) else {
                continue;
            };
            let Some(result) = envelope.result else {
                // An error passes as it came, in-band: an old client reads a 404 in its
                // session as the session gone.
                answer.finish(StatusCode::OK, last.clone()).await;
                return;
            };
            let Some(required) = to_legacy::input_required(result) else {
                let done = to_legacy::result(result)
                    .map(|r| write::result(&self.id, &r))
                    .unwrap_or(last.clone());
                answer.finish(StatusCode::OK, done).await;
                return;
            };
            if round == MAX_ROUNDS {
                let e = ProxyError::TooManyRounds { max: MAX_ROUNDS };
                return finish_with(&mut answer, &self.id, &e).await;
            }
            if !self.accepts.sse && !required.requests.is_empty() {
                return finish_with(&mut answer, &self.id, &ProxyError::InputNeedsStream).await;
            }
            let gathered = tokio::select! {
                gathered = self.ask(&mut answer, &required.requests, input_wait) => gathered,
                _ = &mut cancelled => return,
            };
            match gathered {
                Some(answers) => {
                    // Answers of earlier rounds stay: a server may ask again for more.
                    for (key, value) in answers {
                        responses.retain(|(k, _)| *k != key);
                        responses.push((key, value));
                    }
                }
                None => return,
            }
            asked = Some(required);
        }
    }

    /// The request of this round: the client's, framed for the modern upstream, with the
    /// answers and `requestState` of the rounds before.
    fn body(
        &self,
        asked: Option<&InputRequired>,
        responses: &[(String, Box<RawValue>)],
    ) -> Option<Bytes> {
        let request = match asked {
            None => self.request.clone(),
            Some(asked) => {
                let envelope = Envelope::parse(&self.request).ok()?;
                let params = to_legacy::retried_params(
                    envelope.params,
                    responses,
                    asked.request_state.as_deref(),
                )?;
                Bytes::from(to_legacy::with_params(
                    &self.request,
                    envelope.params,
                    &params,
                )?)
            }
        };
        Some(framed(request, self.frame()))
    }

    /// What the session knows of its client, for its requests to the modern upstream.
    fn frame(&self) -> Frame<'_> {
        let client = self.client.as_deref();
        Frame {
            client_info: client.and_then(|c| c.client_info.as_deref()),
            capabilities: client.and_then(|c| c.capabilities.as_deref()),
            log_level: self.bridged.log_level(),
        }
    }

    /// Sends the client the round's questions and waits (at most `wait`) for every
    /// answer. `None`: the client left, or did not answer in time (the call is over; it
    /// was told so when there was still someone to tell).
    async fn ask(
        &self,
        answer: &mut Answer,
        requests: &[InputRequest],
        wait: Duration,
    ) -> Option<Vec<(String, Box<RawValue>)>> {
        let mut waiting = Vec::with_capacity(requests.len());
        let mut ids = Vec::with_capacity(requests.len());
        for request in requests {
            let id = self.bridged.next_request_id();
            let Some(reply) = self.bridged.ask(&id) else {
                self.bridged.unask(&ids);
                finish_with(
                    answer,
                    &self.id,
                    &ProxyError::TooManyRounds { max: MAX_ROUNDS },
                )
                .await;
                return None;
            };
            let params = request.params.as_deref().map(|p| p.get().as_bytes());
            let asked = write::request(&id, &request.method, params);
            if !answer.emit(asked).await {
                self.bridged.unask(&ids);
                return None;
            }
            ids.push(id);
            waiting.push((request.key.clone(), reply));
        }
        let gathered = async {
            let mut answers = Vec::with_capacity(waiting.len());
            for (key, reply) in waiting {
                let Ok(message) = reply.await else {
                    return None;
                };
                // An error answer (the client refused) leaves the key out: the server
                // decides (it asks again, or fails the call).
                let result = Envelope::parse(&message)
                    .ok()
                    .and_then(|e| e.result.map(ToOwned::to_owned));
                if let Some(result) = result {
                    answers.push((key, result));
                }
            }
            Some(answers)
        };
        let gathered = tokio::select! {
            gathered = tokio::time::timeout(wait, gathered) => gathered.ok().flatten(),
            () = answer.gone() => None,
        };
        self.bridged.unask(&ids);
        if gathered.is_none() {
            finish_with(
                answer,
                &self.id,
                &ProxyError::InputNotAnswered { after: wait },
            )
            .await;
        }
        gathered
    }

    async fn fail(&self, answer: &mut Answer, source: UpstreamError) {
        let error = ProxyError::Upstream {
            upstream: self.upstream.label().to_string(),
            source,
        };
        finish_with(answer, &self.id, &error).await;
    }
}

/// Ends the call with the proxy's own error, in-band when an event stream is open.
async fn finish_with(answer: &mut Answer, id: &[u8], error: &ProxyError) {
    answer.fail(id, error).await;
}
