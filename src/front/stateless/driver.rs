//! One stateless call, from its first request to its last round: a task that owns the
//! pooled upstream session and reads the upstream's answer message by message.
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

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::{First, declares, result_message, wants_log};
use crate::front::App;
use crate::jsonrpc::{Envelope, ErrorObject, Kind, RawObject, code, error_response, raw_str};
use crate::stateless::LogLevel;
use crate::stateless::request_state::Binding as StateBinding;
use crate::stateless::results::{
    capability_for, complete, input_request, input_required, key_of, upstream_error,
    upstream_result,
};
use crate::upstream::{Checkout, Messages};

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
pub struct Call {
    pub app: Arc<App>,
    pub checkout: Checkout,
    pub messages: Messages,
    /// The id the upstream knows the call by (the first request's).
    pub upstream_id: Bytes,
    /// The id of the client request being answered now.
    pub client_id: Bytes,
    pub method: String,
    pub capabilities: Box<RawValue>,
    pub log_level: Option<LogLevel>,
    /// Input responses the client gave before being asked, by key.
    pub provided: HashMap<String, Box<RawValue>>,
    pub caller: Vec<u8>,
    /// The canonical params the call's `requestState` tokens are bound to.
    pub bound: String,
    /// `params.uri` of a `resources/read` (for the 2026 not-found error).
    pub uri: Option<String>,
    pub forwarded: HeaderMap,
}

/// Where the client's answer goes now.
enum Out {
    /// Nothing sent yet: the answer may still be JSON with any status.
    Head(oneshot::Sender<First>),
    /// An event stream is open.
    Stream(mpsc::Sender<Bytes>),
    /// No one is listening (answered already, or gone).
    Gone,
}

/// An upstream request waiting for the client.
struct Pending {
    key: String,
    upstream_id: Box<RawValue>,
    request: Vec<u8>,
}

impl Out {
    /// Sends a message that is not the last. `false` when the client has gone.
    async fn emit(&mut self, message: Bytes) -> bool {
        match std::mem::replace(self, Out::Gone) {
            Out::Head(first) => {
                let (tx, rx) = mpsc::channel(64);
                if first.send(First::Stream(message, rx)).is_err() {
                    return false;
                }
                *self = Out::Stream(tx);
                true
            }
            Out::Stream(tx) => {
                let sent = tx.send(message).await.is_ok();
                if sent {
                    *self = Out::Stream(tx);
                }
                sent
            }
            Out::Gone => true,
        }
    }

    /// Sends the last message of this round.
    async fn finish(&mut self, status: StatusCode, message: Bytes) {
        match std::mem::replace(self, Out::Gone) {
            Out::Head(first) => {
                let _ = first.send(First::Json(status, message));
            }
            Out::Stream(tx) => {
                let _ = tx.send(message).await;
            }
            Out::Gone => {}
        }
    }
}

/// Runs a call to its end.
pub async fn run(mut call: Call, first: oneshot::Sender<First>) {
    let mut out = Out::Head(first);
    let mut pending: Vec<Pending> = Vec::new();
    let mut missing: Vec<&'static str> = Vec::new();
    let idle = call.app.sse_idle_timeout;
    let gather = call.app.calls.gather;
    loop {
        let deciding = !pending.is_empty() || !missing.is_empty();
        let next =
            tokio::time::timeout(if deciding { gather } else { idle }, call.messages.next()).await;
        let message = match next {
            Err(_) if !pending.is_empty() => {
                if park(&mut call, &mut out, &mut pending).await {
                    continue;
                }
                break;
            }
            Err(_) if !missing.is_empty() => {
                // Nothing the client can answer: it lacks the capability. The upstream
                // got an error for its request; the call is drained in the background.
                let error = missing_capability(&call.client_id, &missing);
                out.finish(StatusCode::BAD_REQUEST, error).await;
                missing.clear();
                continue;
            }
            Err(_) => {
                fail(&mut out, &call, "the upstream sent nothing for too long").await;
                cancel(&mut call).await;
                break;
            }
            Ok(None) => {
                fail(
                    &mut out,
                    &call,
                    "the upstream ended its answer without a response",
                )
                .await;
                call.checkout.discard();
                break;
            }
            Ok(Some(Err(e))) => {
                fail(&mut out, &call, &e.to_string()).await;
                call.checkout.discard();
                break;
            }
            Ok(Some(Ok(message))) => message,
        };
        let Ok(envelope) = Envelope::parse(&message) else {
            continue;
        };
        match envelope.kind {
            Kind::Notification => {
                let forward = match envelope.method() {
                    "notifications/message" => wants_log(call.log_level, &envelope),
                    "notifications/progress" => true,
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
                let method = envelope.method();
                if method == "ping" {
                    let pong = upstream_result(id, &empty_object());
                    answer(&call, pong).await;
                    continue;
                }
                let Some(key) = key_of(&envelope) else {
                    continue;
                };
                if let Some(response) = call.provided.remove(&key) {
                    answer(&call, upstream_result(id, &response)).await;
                    continue;
                }
                match capability_for(method) {
                    Some(capability) if declares(&call.capabilities, capability) => {
                        pending.push(Pending {
                            key,
                            upstream_id: id.to_owned(),
                            request: input_request(&envelope),
                        });
                    }
                    Some(capability) => {
                        let refusal = upstream_error(
                            id,
                            code::METHOD_NOT_FOUND,
                            &format!("the client did not declare the {capability} capability"),
                        );
                        answer(&call, refusal).await;
                        if !missing.contains(&capability) {
                            missing.push(capability);
                        }
                    }
                    None => {
                        let refusal = upstream_error(
                            id,
                            code::METHOD_NOT_FOUND,
                            "a client of the stateless protocol takes no requests of this kind",
                        );
                        answer(&call, refusal).await;
                    }
                }
            }
            Kind::Response => {
                if envelope.id.map(|id| id.get().as_bytes()) != Some(call.upstream_id.as_ref()) {
                    continue;
                }
                if !missing.is_empty() {
                    let error = missing_capability(&call.client_id, &missing);
                    out.finish(StatusCode::BAD_REQUEST, error).await;
                    break;
                }
                let (status, answer) = final_answer(&call, &envelope);
                out.finish(status, answer).await;
                break;
            }
        }
    }
    // Dropping the call gives its upstream session back to the pool (or ends it).
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| Box::<RawValue>::default())
}

/// Sends a message to the upstream call (an answer to one of its requests).
async fn answer(call: &Call, message: Vec<u8>) {
    let reply = call
        .app
        .upstream
        .exchange(
            call.checkout.binding(),
            Bytes::from(message),
            &call.forwarded,
        )
        .await;
    if let Err(e) = reply {
        tracing::warn!(error = %e, "could not answer an upstream request");
    }
}

/// Ends the client's round with `input_required` and waits for the retry. `true` when
/// the call goes on.
async fn park(call: &mut Call, out: &mut Out, pending: &mut Vec<Pending>) -> bool {
    let (resume_tx, resume_rx) = oneshot::channel();
    let calls = &call.app.calls;
    let park_id = calls.parked.park(resume_tx);
    let token = calls.sealer.seal(
        park_id,
        StateBinding {
            caller: &call.caller,
            method: &call.method,
            params: &call.bound,
        },
    );
    let requests: Vec<(String, Vec<u8>)> = pending
        .iter()
        .map(|p| (p.key.clone(), p.request.clone()))
        .collect();
    let server_info = call.checkout.negotiated().server_info.clone();
    let result = input_required(&requests, &token, &server_info);
    out.finish(StatusCode::OK, result_message(&call.client_id, &result))
        .await;
    let resumed = tokio::time::timeout(calls.sealer.ttl(), resume_rx).await;
    let resume = match resumed {
        Ok(Ok(resume)) => resume,
        _ => {
            calls.parked.take(&park_id);
            cancel(call).await;
            return false;
        }
    };
    call.client_id = resume.client_id;
    call.log_level = resume.log_level;
    *out = Out::Head(resume.first);
    call.provided.extend(resume.provided);
    let mut still = Vec::new();
    for request in pending.drain(..) {
        match call.provided.remove(&request.key) {
            Some(response) => answer(call, upstream_result(&request.upstream_id, &response)).await,
            None => still.push(request),
        }
    }
    // Anything left unanswered is asked for again at the next pause.
    *pending = still;
    true
}

/// Tells the upstream the call is off (the client left, or never came back) and ends
/// the session: what else it was doing for the call is unknown.
async fn cancel(call: &mut Call) {
    let mut message = Vec::with_capacity(128);
    message.extend_from_slice(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"#,
    );
    message.extend_from_slice(&call.upstream_id);
    message.extend_from_slice(br#","reason":"the client went away"}}"#);
    answer(call, message).await;
    call.checkout.discard();
}

async fn fail(out: &mut Out, call: &Call, why: &str) {
    let id = std::str::from_utf8(&call.client_id)
        .ok()
        .and_then(|s| RawValue::from_string(s.to_owned()).ok());
    let error = ErrorObject {
        code: code::INTERNAL_ERROR,
        message: format!("Upstream error: {why}"),
        data: Some(json!({ "upstream": call.app.upstream.label().as_ref() })),
    };
    out.finish(
        StatusCode::BAD_GATEWAY,
        error_response(id.as_deref(), &error),
    )
    .await;
}

fn missing_capability(client_id: &[u8], missing: &[&'static str]) -> Bytes {
    let id = std::str::from_utf8(client_id)
        .ok()
        .and_then(|s| RawValue::from_string(s.to_owned()).ok());
    let required: serde_json::Map<String, serde_json::Value> = missing
        .iter()
        .map(|c| ((*c).to_owned(), json!({})))
        .collect();
    let error = ErrorObject {
        code: code::MISSING_CLIENT_CAPABILITY,
        message: format!(
            "Missing required client capability: the server needs {} to serve this request",
            missing.join(", ")
        ),
        data: Some(json!({ "requiredCapabilities": required })),
    };
    error_response(id.as_deref(), &error)
}

/// The upstream's response as the client's: a 2026-07-28 result, or the error with
/// 2026's codes and statuses.
fn final_answer(call: &Call, envelope: &Envelope<'_>) -> (StatusCode, Bytes) {
    let server_info = &call.checkout.negotiated().server_info;
    if let Some(result) = envelope.result {
        let rewritten = complete(result, &call.method, server_info)
            .unwrap_or_else(|| result.get().as_bytes().to_vec());
        return (StatusCode::OK, result_message(&call.client_id, &rewritten));
    }
    let error = envelope.error.and_then(RawObject::parse);
    let error_code = error
        .as_ref()
        .and_then(|e| e.get("code"))
        .and_then(|c| c.get().parse::<i32>().ok());
    let message = error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(raw_str)
        .map(|m| m.into_owned())
        .unwrap_or_else(|| "error".to_owned());
    let data = error
        .as_ref()
        .and_then(|e| e.get("data"))
        .and_then(|d| serde_json::from_str::<serde_json::Value>(d.get()).ok());
    let (status, object) = match error_code {
        // 2025-11-25's "resource not found" is -32602 with the URI in 2026-07-28.
        Some(code::RESOURCE_NOT_FOUND) => (
            StatusCode::OK,
            ErrorObject {
                code: code::INVALID_PARAMS,
                message,
                data: Some(json!({ "uri": call.uri })),
            },
        ),
        Some(code::METHOD_NOT_FOUND) => (
            StatusCode::NOT_FOUND,
            ErrorObject {
                code: code::METHOD_NOT_FOUND,
                message,
                data,
            },
        ),
        Some(code::INVALID_PARAMS) if call.uri.is_some() => (
            StatusCode::OK,
            ErrorObject {
                code: code::INVALID_PARAMS,
                message,
                data: Some(match data {
                    Some(serde_json::Value::Object(mut map)) => {
                        map.entry("uri").or_insert_with(|| json!(call.uri));
                        serde_json::Value::Object(map)
                    }
                    _ => json!({ "uri": call.uri }),
                }),
            },
        ),
        other => (
            StatusCode::OK,
            ErrorObject {
                code: other.unwrap_or(code::INTERNAL_ERROR),
                message,
                data,
            },
        ),
    };
    let id = std::str::from_utf8(&call.client_id)
        .ok()
        .and_then(|s| RawValue::from_string(s.to_owned()).ok());
    (status, error_response(id.as_deref(), &object))
}
