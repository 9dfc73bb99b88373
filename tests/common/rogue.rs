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
//! Any other request gets an empty result; DELETE is 200, GET 405. A POST carrying an
//! `Mcp-Session-Id` this server did not issue gets what server-everything answers (HTTP
//! 400, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session
//! ID provided"}}`, no `id`).

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
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

/// The session ids issued so far.
struct Issued {
    /// This server's port, in every id it issues (ids of two rogues never clash).
    port: u16,
    count: AtomicU64,
    ids: Mutex<HashSet<String>>,
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
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn respond(status: StatusCode, content_type: Option<&str>, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::builder().status(status);
    if let Some(content_type) = content_type {
        response = response.header("content-type", content_type);
    }
    response.body(Full::new(Bytes::from(body))).unwrap()
}

fn json_body(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    respond(status, Some("application/json"), body.to_string())
}

async fn answer(request: Request<Incoming>, sessions: &Issued) -> Response<Full<Bytes>> {
    match *request.method() {
        Method::POST => {}
        Method::DELETE => return respond(StatusCode::OK, None, String::new()),
        _ => return respond(StatusCode::METHOD_NOT_ALLOWED, None, String::new()),
    }
    let session = request
        .headers()
        .get("mcp-session-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
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
    let Some(id) = message.get("id").cloned() else {
        return respond(StatusCode::ACCEPTED, None, String::new());
    };
    let method = message["method"].as_str().unwrap_or("");
    if method == "initialize" {
        let n = sessions.count.fetch_add(1, Ordering::SeqCst) + 1;
        let session_id = format!("rogue-{}-{n}", sessions.port);
        let mut response = json_body(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
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
    let tool = (method == "tools/call").then(|| message["params"]["name"].as_str().unwrap_or(""));
    match tool {
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
