//! The demo server's methods and tools.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::http::{Session, State, sse_event};
use crate::mcp::logging::LogLevel;

type Running = Pin<Box<dyn Future<Output = Value> + Send>>;

/// How a request is answered.
pub(super) enum Outcome {
    /// At once.
    Result(Value),
    /// A JSON-RPC error.
    Error(i64, String),
    /// After a delay, still as one message.
    Delayed(Duration, Value),
    /// As an event stream: the function sends notifications and server-to-client
    /// requests through the emitter, then returns the result.
    Stream(Box<dyn FnOnce(Emitter) -> Running + Send>),
}

/// Sends messages on a request's event stream.
pub(super) struct Emitter {
    tx: mpsc::Sender<Bytes>,
}

impl Emitter {
    pub fn new(tx: mpsc::Sender<Bytes>) -> Self {
        Emitter { tx }
    }

    async fn send(&self, message: Value) {
        let _ = self.tx.send(sse_event(&message)).await;
    }
}

impl Session {
    /// Whether the client asked for log messages of `level` (`logging/setLevel`).
    fn wants_log(&self, level: LogLevel) -> bool {
        level as u8 >= self.log_level.load(Ordering::Acquire)
    }
}

/// A `notifications/message` from `logger`.
fn log_message(level: LogLevel, logger: &str, data: impl Into<Value>) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": level.name(), "logger": logger, "data": data.into()}})
}

/// `logging/setLevel`: the client's minimum level, for this session's log messages from
/// now on; an unknown level is -32602.
fn set_level(session: &Session, params: &Value) -> Outcome {
    match params
        .get("level")
        .and_then(Value::as_str)
        .and_then(LogLevel::parse)
    {
        Some(level) => {
            session.log_level.store(level as u8, Ordering::Release);
            Outcome::Result(json!({}))
        }
        None => Outcome::Error(
            -32602,
            format!(
                "Invalid params: level must be one of {}",
                LogLevel::ALL.map(LogLevel::name).join(", ")
            ),
        ),
    }
}

fn text(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

fn tool_error(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}], "isError": true})
}

fn tool_list() -> Value {
    let object = |properties: Value| json!({"type": "object", "properties": properties});
    json!({"tools": [
        {"name": "echo", "description": "Returns msg.",
         "inputSchema": {"type": "object", "properties": {"msg": {"type": "string"}}, "required": ["msg"]}},
        {"name": "counter", "description": "Counts calls in this upstream session.", "inputSchema": object(json!({}))},
        {"name": "slow", "description": "Reports progress and logs over an event stream, then answers.",
         "inputSchema": object(json!({"steps": {"type": "integer"}, "interval_ms": {"type": "integer"}}))},
        {"name": "sample", "description": "Asks the client to sample a message (sampling/createMessage).",
         "inputSchema": object(json!({"prompt": {"type": "string"}}))},
        {"name": "sleep", "description": "Answers after ms milliseconds.",
         "inputSchema": object(json!({"ms": {"type": "integer"}}))},
        {"name": "whoami", "description": "The upstream Mcp-Session-Id of this session.", "inputSchema": object(json!({})),
         "annotations": {"readOnlyHint": true, "idempotentHint": true}},
        {"name": "announce", "description": "Sends a log notification on this session's GET streams.",
         "inputSchema": object(json!({"text": {"type": "string"}}))},
        {"name": "change_tools", "description": "Sends notifications/tools/list_changed on every GET stream.",
         "inputSchema": object(json!({}))},
    ]})
}

pub(super) fn dispatch(
    state: &State,
    session: &Arc<Session>,
    method: &str,
    params: &Value,
) -> Outcome {
    match method {
        "ping" => Outcome::Result(json!({})),
        "logging/setLevel" => set_level(session, params),
        "tools/list" => Outcome::Result(tool_list()),
        "tools/call" if params.get("name").and_then(Value::as_str) == Some("change_tools") => {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            let mut everyone = state.everyone.lock();
            everyone.retain(|tx| tx.try_send(sse_event(&note)).is_ok());
            Outcome::Result(text(format!("told {} stream(s)", everyone.len())))
        }
        "tools/call" => call(session, params),
        _ => Outcome::Error(-32601, format!("Method not found: {method}")),
    }
}

fn call(session: &Arc<Session>, params: &Value) -> Outcome {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let args = params.get("arguments").cloned().unwrap_or(json!({}));
    let int = |key: &str, default: u64, max: u64| {
        args.get(key)
            .and_then(Value::as_u64)
            .unwrap_or(default)
            .min(max)
    };
    match name {
        "echo" => match args.get("msg").and_then(Value::as_str) {
            Some(msg) => Outcome::Result(text(msg)),
            None => Outcome::Error(-32602, "echo needs a string argument \"msg\"".into()),
        },
        "counter" => {
            let n = session.counter.fetch_add(1, Ordering::AcqRel) + 1;
            Outcome::Result(text(n.to_string()))
        }
        "whoami" => Outcome::Result(text(session.id.clone())),
        "sleep" => {
            let ms = int("ms", 1000, 600_000);
            Outcome::Delayed(Duration::from_millis(ms), text(format!("slept {ms} ms")))
        }
        "slow" => {
            let steps = int("steps", 3, 100);
            let interval = Duration::from_millis(int("interval_ms", 100, 10_000));
            let token = params.pointer("/_meta/progressToken").cloned();
            let session = session.clone();
            Outcome::Stream(Box::new(move |emitter| {
                Box::pin(slow(emitter, session, steps, interval, token))
            }))
        }
        "sample" => {
            let prompt = args
                .get("prompt")
                .and_then(Value::as_str)
                .unwrap_or("Say hello")
                .to_owned();
            let session = session.clone();
            Outcome::Stream(Box::new(move |emitter| {
                Box::pin(sample(emitter, session, prompt))
            }))
        }
        "announce" => {
            let words = args.get("text").and_then(Value::as_str).unwrap_or("hello");
            if !session.wants_log(LogLevel::Info) {
                return Outcome::Result(text("not announced: below the session's log level"));
            }
            let note = log_message(LogLevel::Info, "announce", words);
            let mut listeners = session.listeners.lock();
            listeners.retain(|tx| tx.try_send(sse_event(&note)).is_ok());
            Outcome::Result(text(format!("announced to {} stream(s)", listeners.len())))
        }
        other => Outcome::Error(-32602, format!("Unknown tool: {other}")),
    }
}

async fn slow(
    emitter: Emitter,
    session: Arc<Session>,
    steps: u64,
    interval: Duration,
    token: Option<Value>,
) -> Value {
    for step in 1..=steps {
        tokio::time::sleep(interval).await;
        if let Some(token) = &token {
            emitter
                .send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": step, "total": steps,
                               "message": format!("step {step} of {steps}")}}))
                .await;
        }
        if session.wants_log(LogLevel::Info) {
            let note = log_message(LogLevel::Info, "slow", format!("step {step} of {steps}"));
            emitter.send(note).await;
        }
    }
    text(format!("done after {steps} steps"))
}

async fn sample(emitter: Emitter, session: Arc<Session>, prompt: String) -> Value {
    let n = session.next_request.fetch_add(1, Ordering::AcqRel);
    let id = json!(format!("sample-{n}"));
    let (tx, rx) = oneshot::channel();
    session.pending.lock().insert(id.to_string(), tx);
    emitter
        .send(
            json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage",
            "params": {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                       "maxTokens": 100}}),
        )
        .await;
    match tokio::time::timeout(Duration::from_secs(30), rx).await {
        Ok(Ok(response)) => match response
            .pointer("/result/content/text")
            .and_then(Value::as_str)
        {
            Some(sampled) => text(format!("the client said: {sampled}")),
            None => tool_error(format!("sampling failed: {response}")),
        },
        _ => {
            session.pending.lock().remove(&id.to_string());
            tool_error("the client did not answer the sampling request within 30 s")
        }
    }
}
