//! A rogue upstream: a Streamable HTTP server that does the 2025-11-25 handshake right
//! (`initialize` with an `Mcp-Session-Id`, `notifications/initialized` → 202) and then
//! answers `tools/call` as the tool's name says — the broken answers real servers give,
//! which the strict demo server never would:
//!
//! | tool | answer (HTTP 200 unless said) |
//! | --- | --- |
//! | `fine` | the response, `{"content":[{"type":"text","text":"fine"}]}` |
//! | `not-json` | `Content-Type: application/json`, body `<html>oops</html>` |
//! | `html` | `Content-Type: text/html`, body `<html>oops</html>` |
//! | `array` | the right response, inside a JSON array (a batch) |
//! | `wrong-id` | a response to the id `"not-<id>"` |
//! | `lose-text` | 400 `text/plain` `Bad Request: No valid session ID provided` (the Python SDK 1.x's answer to a session it does not know, before it moved to 404) |
//!
//! | `hold` | the response, once the `Step::Call` hold is released |
//! | `nag` | an event stream asking the client (`elicitation/create`) every 20 ms, 200 times, never answering the call |
//!
//! It declares `resources.subscribe` and answers `resources/subscribe` with `{}` (counted:
//! [`Rogue::subscribes`]); a GET opens an event stream that stays open and silent.
//!
//! Any other request gets an empty result; DELETE ends the session (200), GET is 405. A
//! POST carrying an `Mcp-Session-Id` this server did not issue gets what
//! server-everything answers (HTTP 400, `{"jsonrpc":"2.0","error":{"code":-32000,
//! "message":"Bad Request: No valid session ID provided"}}`, no `id`).
//!
//! For cancellation tests it can hold each step of the handshake ([`Rogue::hold`]): an
//! `initialize` not yet answered (no session exists upstream), a session issued whose
//! `notifications/initialized` is not yet acknowledged, a `tools/call` of `hold` not yet
//! answered; and it counts the sessions it issued and has not seen ended
//! ([`Rogue::live_sessions`]).

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The body of the broken answers.
pub const HTML: &str = "<html>oops</html>";

/// A running rogue upstream; stopped when dropped.
pub struct Rogue {
    pub addr: SocketAddr,
    sessions: Arc<Issued>,
    task: JoinHandle<()>,
}

/// A step of an upstream session's life the rogue can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `initialize` received, not answered: no session exists upstream yet.
    Initialize,
    /// The session issued; `notifications/initialized` received, not acknowledged.
    Initialized,
    /// A `tools/call` of the tool `hold` received, not answered.
    Call,
}

/// The session ids issued so far, and what is held.
struct Issued {
    /// This server's port, in every id it issues (ids of two rogues never clash).
    port: u16,
    count: AtomicU64,
    /// Issued and not ended by a DELETE.
    ids: Mutex<HashSet<String>>,
    /// The steps held now.
    held: tokio::sync::watch::Sender<Vec<Step>>,
    /// `initialize` requests received so far, and how many of the first are answered
    /// 503 instead of opening a session once their hold is released (their client left
    /// long ago: a session opened for nobody would be this test server's leak, not the
    /// proxy's).
    arrivals: AtomicU64,
    discard_upto: AtomicU64,
    /// `resources/subscribe` requests received.
    subscribes: AtomicU64,
}

impl Issued {
    /// Waits while `step` is held.
    async fn pass(&self, step: Step) {
        let mut held = self.held.subscribe();
        let _ = held.wait_for(|held| !held.contains(&step)).await;
    }
}

/// What server-everything answers to a session it does not know.
pub const NO_VALID_SESSION: &str = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;

impl Rogue {
    pub async fn start() -> Rogue {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sessions = Arc::new(Issued {
            port: addr.port(),
            count: AtomicU64::new(0),
            ids: Mutex::new(HashSet::new()),
            held: tokio::sync::watch::Sender::new(Vec::new()),
            arrivals: AtomicU64::new(0),
            discard_upto: AtomicU64::new(0),
            subscribes: AtomicU64::new(0),
        });
        let counter = sessions.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let counter = counter.clone();
                        async move { Ok::<_, Infallible>(answer(request, &counter).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Rogue {
            addr,
            sessions,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// How many upstream sessions were opened (`initialize` answered).
    pub fn sessions_opened(&self) -> u64 {
        self.sessions.count.load(Ordering::SeqCst)
    }

    /// `resources/subscribe` requests received.
    pub fn subscribes(&self) -> u64 {
        self.sessions.subscribes.load(Ordering::SeqCst)
    }

    /// Sessions issued and not ended (by a DELETE).
    pub fn live_sessions(&self) -> usize {
        self.sessions.ids.lock().len()
    }

    /// Holds `step` of every session from now on, until released.
    pub fn hold(&self, step: Step) {
        self.sessions.held.send_modify(|held| held.push(step));
    }

    /// Lets every held step go on.
    pub fn release(&self) {
        self.sessions.held.send_modify(Vec::clear);
    }

    /// Lets every held step go on, but the `initialize` requests held now are refused
    /// (503) instead of opening sessions.
    pub fn release_refusing_held(&self) {
        let arrived = self.sessions.arrivals.load(Ordering::SeqCst);
        self.sessions.discard_upto.store(arrived, Ordering::SeqCst);
        self.release();
    }

    /// Forgets every session it issued, as a restarted server would.
    pub fn forget_sessions(&self) {
        self.sessions.ids.lock().clear();
    }
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn respond(status: StatusCode, content_type: Option<&str>, body: String) -> Response<Body> {
    let mut response = Response::builder().status(status);
    if let Some(content_type) = content_type {
        response = response.header("content-type", content_type);
    }
    response.body(Full::new(Bytes::from(body)).boxed()).unwrap()
}

fn json_body(status: StatusCode, body: &Value) -> Response<Body> {
    respond(status, Some("application/json"), body.to_string())
}

/// An event stream of `events` (JSON-RPC messages), one every `every`, then held open
/// until the client goes.
fn event_stream(events: Vec<Value>, every: std::time::Duration) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<hyper::body::Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        for event in events {
            let frame = format!("event: message\ndata: {event}\n\n");
            if tx
                .send(Ok(hyper::body::Frame::data(Bytes::from(frame))))
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(every).await;
        }
        tx.closed().await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

async fn answer(request: Request<Incoming>, sessions: &Issued) -> Response<Body> {
    let session = request
        .headers()
        .get("mcp-session-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    match *request.method() {
        Method::POST => {}
        Method::DELETE => {
            if let Some(session) = &session {
                sessions.ids.lock().remove(session);
            }
            return respond(StatusCode::OK, None, String::new());
        }
        // The session's own stream: open, silent.
        Method::GET => return event_stream(Vec::new(), std::time::Duration::ZERO),
        _ => return respond(StatusCode::METHOD_NOT_ALLOWED, None, String::new()),
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&body).unwrap_or_default();
    if let Some(session) = session
        && !sessions.ids.lock().contains(&session)
    {
        return respond(
            StatusCode::BAD_REQUEST,
            Some("application/json; charset=utf-8"),
            NO_VALID_SESSION.into(),
        );
    }
    let method = message["method"].as_str().unwrap_or("");
    let Some(id) = message.get("id").cloned() else {
        if method == "notifications/initialized" {
            sessions.pass(Step::Initialized).await;
        }
        return respond(StatusCode::ACCEPTED, None, String::new());
    };
    if method == "initialize" {
        let arrival = sessions.arrivals.fetch_add(1, Ordering::SeqCst) + 1;
        sessions.pass(Step::Initialize).await;
        if arrival <= sessions.discard_upto.load(Ordering::SeqCst) {
            return respond(StatusCode::SERVICE_UNAVAILABLE, None, String::new());
        }
        let n = sessions.count.fetch_add(1, Ordering::SeqCst) + 1;
        let session_id = format!("rogue-{}-{n}", sessions.port);
        let mut response = json_body(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}, "resources": {"subscribe": true}},
                "serverInfo": {"name": "rogue", "version": "1"},
            }}),
        );
        response
            .headers_mut()
            .insert("mcp-session-id", session_id.parse().unwrap());
        sessions.ids.lock().insert(session_id);
        return response;
    }
    let result = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    if method == "resources/subscribe" {
        sessions.subscribes.fetch_add(1, Ordering::SeqCst);
        return json_body(StatusCode::OK, &result(json!({})));
    }
    let tool = (method == "tools/call").then(|| message["params"]["name"].as_str().unwrap_or(""));
    match tool {
        Some("hold") => {
            sessions.pass(Step::Call).await;
            json_body(
                StatusCode::OK,
                &result(json!({"content": [{"type": "text", "text": "held"}]})),
            )
        }
        Some("nag") => {
            let asks = (0..200)
                .map(|n| {
                    json!({"jsonrpc": "2.0", "id": format!("nag-{n}"), "method": "elicitation/create",
                           "params": {"message": format!("question {n}"), "requestedSchema": {"type": "object", "properties": {}}}})
                })
                .collect();
            event_stream(asks, std::time::Duration::from_millis(20))
        }
        Some("fine") => json_body(
            StatusCode::OK,
            &result(json!({"content": [{"type": "text", "text": "fine"}]})),
        ),
        Some("not-json") => respond(StatusCode::OK, Some("application/json"), HTML.into()),
        Some("html") => respond(StatusCode::OK, Some("text/html"), HTML.into()),
        Some("array") => json_body(StatusCode::OK, &json!([result(json!({"content": []}))])),
        Some("wrong-id") => json_body(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": format!("not-{id}"), "result": {"content": []}}),
        ),
        Some("lose-text") => respond(
            StatusCode::BAD_REQUEST,
            Some("text/plain; charset=utf-8"),
            "Bad Request: No valid session ID provided".into(),
        ),
        _ => json_body(StatusCode::OK, &result(json!({"tools": []}))),
    }
}
