//! Test harness: the real proxy and the strict demo (legacy) server, both in-process on
//! 127.0.0.1:0, and the clients that speak to the proxy over HTTP the way MCP clients
//! do: a data-layer session client ([`SessionClient`]), an old initialize-based one
//! ([`LegacyClient`]) and a stateless 2026-07-28 one ([`StatelessClient`]).
//!
//! Beside it: [`assert`] (checks of the proxy's answers shared by every suite),
//! [`interop`] (third-party servers as child processes, and the proxy in front of them),
//! [`peers`] (the servers and clients of every protocol era: TypeScript and Python SDK
//! 2.x, HTTP+SSE, the SDK 1.x clients), [`inspector`] (the MCP Inspector's CLI),
//! [`stdio`] (the proxy in front of a stdio command), [`procs`] (processes read from
//! `/proc`: markers, alive, reaped, zombies), [`log`] (the proxy's log captured),
//! [`binary`] (the real binary as a process, for every suite that runs it: its
//! configuration, signals, exit, file descriptors, open-file limit), [`fleet`]
//! (replicas, Redis, nginx) and [`rogue`] (an upstream that answers what the strict demo
//! server never would).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test harness: a failure must stop the test loudly"
)]

pub mod affinity;
pub mod assert;
pub mod binary;
pub mod conformance;
pub mod fleet;
pub mod inspector;
pub mod interop;
pub mod log;
pub mod oauth;
pub mod otlp;
pub mod peers;
pub mod procs;
pub mod rogue;
pub mod stdio;

use std::future::Future;
use std::time::Duration;

use mcp_session_proxy::config::{Config, Target};
use mcp_session_proxy::demo::{DemoOptions, DemoServer, Received};
use mcp_session_proxy::{Running, start};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

pub const SESSION_KEY: &str = "io.modelcontextprotocol/session";
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// A proxy in front of a recording demo server.
pub struct Harness {
    pub proxy: Running,
    pub demo: DemoServer,
    pub http: reqwest::Client,
}

/// The proxy's defaults, listening on a free loopback port, proxying to `upstream`.
pub fn config_for(upstream: &str) -> Config {
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.upstream.target = Target::Http(vec![upstream.parse().unwrap()]);
    // Open event streams hold a graceful shutdown for this long at most, and so does a
    // test client's idle kept-alive connection (the proxy would otherwise give it its
    // `DRAIN_IDLE`, a second, in every test that stops its proxy). A test of the drain
    // itself sets its own.
    config.shutdown_grace = Duration::from_millis(100);
    // A replica probe opens (and ends) an upstream session of its own: hourly, so that
    // no test counting the upstream's sessions meets one (probe tests set their own).
    config.upstream.health_interval = Duration::from_secs(3600);
    config
}

/// Whether the upstream received this as the proxy's probe of what it speaks.
pub fn is_era_probe(received: &Received) -> bool {
    received.method() == Some("server/discover")
        && received
            .body
            .as_ref()
            .is_some_and(|b| b["id"] == "mcp-session-proxy-discover")
}

/// A builder of HTTP clients. The proxy's own HTTPS client (its `[auth]` key fetches)
/// builds reqwest on rustls without a default crypto provider, and features are shared:
/// every client in a test process needs the provider, installed here first.
pub fn http_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// `Authorization: Bearer <token>`.
pub fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

pub fn http_client() -> reqwest::Client {
    http_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Another loopback address than the proxy's own clients use (127.0.0.1): a client from
/// there is another client address to the proxy.
pub const OTHER_ADDRESS: [u8; 4] = [127, 0, 0, 2];

/// An HTTP client whose connections come from `address` (a loopback address: Linux
/// routes all of 127.0.0.0/8 to the loopback interface).
pub fn http_client_from(address: [u8; 4]) -> reqwest::Client {
    http_builder()
        .timeout(Duration::from_secs(30))
        .local_address(std::net::IpAddr::from(address))
        .build()
        .unwrap()
}

impl Harness {
    pub async fn start() -> Harness {
        Harness::start_with(DemoOptions::default(), |_| {}).await
    }

    pub async fn with_config(configure: impl FnOnce(&mut Config)) -> Harness {
        Harness::start_with(DemoOptions::default(), configure).await
    }

    pub async fn start_with(demo: DemoOptions, configure: impl FnOnce(&mut Config)) -> Harness {
        let demo = DemoServer::start(DemoOptions {
            record: true,
            ..demo
        })
        .await
        .unwrap();
        let mut config = config_for(&demo.url());
        configure(&mut config);
        let proxy = start(config).await.unwrap();
        Harness {
            proxy,
            demo,
            http: http_client(),
        }
    }

    pub fn url(&self) -> String {
        self.proxy.url()
    }

    /// A `GET` or `DELETE` of the endpoint (no body) with `headers`, accepting an event
    /// stream.
    pub async fn bare(&self, method: reqwest::Method, headers: &HeaderMap) -> reqwest::Response {
        self.http
            .request(method, self.url())
            .headers(headers.clone())
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap()
    }

    pub fn client(&self) -> SessionClient {
        SessionClient::new(self.url())
    }

    /// A 2026-07-28 client of the proxy.
    pub fn stateless_client(&self) -> StatelessClient {
        StatelessClient::new(self.url())
    }

    /// POSTs a JSON value with the headers a 2025-11-25 client sends.
    pub async fn post(&self, body: &Value) -> Reply {
        post_json(&self.http, &self.url(), body, &HeaderMap::new()).await
    }

    /// What the upstream received, JSON-RPC POSTs only.
    /// The POSTs the upstream received for clients: not the proxy's own probe of what
    /// the upstream speaks (`server/discover`, at its first use and at each health
    /// probe).
    pub fn upstream_posts(&self) -> Vec<Received> {
        self.demo
            .journal()
            .into_iter()
            .filter(|r| r.http_method == "POST" && !is_era_probe(r))
            .collect()
    }

    /// The upstream's record of the message with this JSON-RPC method.
    pub fn upstream_saw(&self, method: &str) -> Vec<Received> {
        self.upstream_posts()
            .into_iter()
            .filter(|r| r.method() == Some(method))
            .collect()
    }

    pub async fn stop(self) {
        self.proxy.shutdown().await;
        self.demo.stop().await;
    }
}

/// One HTTP answer, body parsed when it is JSON.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// A whole response, read.
    pub async fn read(response: reqwest::Response) -> Reply {
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            text: response.text().await.unwrap(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC messages of an event-stream body, in order.
    pub fn events(&self) -> Vec<Value> {
        sse_messages(&self.text)
    }

    /// The JSON-RPC error code, if the body is an error.
    pub fn error_code(&self) -> Option<i64> {
        self.json().pointer("/error/code").and_then(Value::as_i64)
    }
}

/// Every `data:` payload of an event stream that is JSON (lines may end in CRLF, as
/// Python servers write them).
pub fn sse_messages(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                return None;
            }
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

/// The messages of a reply exactly as written: the `data:` payloads of an event stream, or
/// the JSON body itself.
pub fn raw_messages(reply: &Reply) -> Vec<String> {
    let is_stream = reply
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !is_stream {
        return vec![reply.text.clone()];
    }
    reply
        .text
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty() && !data.join("").trim().is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// The `id` of a response message (one with `result` or `error`) exactly as written.
pub fn raw_response_id(message: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Response<'a> {
        #[serde(borrow)]
        id: Option<&'a serde_json::value::RawValue>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    let response: Response<'_> = serde_json::from_str(message).ok()?;
    if response.result.is_none() && response.error.is_none() {
        return None;
    }
    response.id.map(|id| id.get().to_owned())
}

/// The ids of the responses in a reply, exactly as written.
pub fn response_ids(reply: &Reply) -> Vec<String> {
    raw_messages(reply)
        .iter()
        .filter_map(|m| raw_response_id(m))
        .collect()
}

/// A JSON-RPC request whose id is `raw_id`, written as it is.
pub fn raw_request(raw_id: &str, method: &str, params: &Value) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"method":"{method}","params":{params}}}"#)
        .into_bytes()
}

pub async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    extra: &HeaderMap,
) -> Reply {
    post_raw(http, url, body.to_string().into_bytes(), extra).await
}

pub async fn post_raw(
    http: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    extra: &HeaderMap,
) -> Reply {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH);
    for (name, value) in extra {
        request = request.header(name, value);
    }
    let response = request.body(body).send().await.unwrap();
    Reply::read(response).await
}

/// Just `Mcp-Session-Id: <session_id>`.
pub fn session_header(session_id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("mcp-session-id", HeaderValue::from_str(session_id).unwrap());
    headers
}

/// The strict demo (legacy) server on its own, recording what it receives.
pub async fn recording_demo() -> DemoServer {
    DemoServer::start(DemoOptions {
        record: true,
        ..DemoOptions::default()
    })
    .await
    .unwrap()
}

/// `params` with the session `_meta` added (keeping any other `_meta`).
pub fn in_session(mut params: Value, session_id: &str, state: Option<&str>) -> Value {
    let mut session = json!({ "sessionId": session_id });
    if let Some(state) = state {
        session["state"] = json!(state);
    }
    if !params.is_object() {
        params = json!({});
    }
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta[SESSION_KEY] = session;
    params
}

/// A data-layer session client: creates a session, keeps its latest `state`, and sends
/// every request with `_meta["io.modelcontextprotocol/session"]` and `Mcp-Session-Id`.
pub struct SessionClient {
    pub url: String,
    pub http: reqwest::Client,
    pub session_id: Option<String>,
    pub state: Option<String>,
    /// Headers sent with every request (credentials: `Authorization`, `Cookie`, …).
    pub extra: HeaderMap,
    next_id: u64,
}

impl SessionClient {
    pub fn new(url: String) -> Self {
        SessionClient {
            url,
            http: http_client(),
            session_id: None,
            state: None,
            extra: HeaderMap::new(),
            next_id: 100,
        }
    }

    /// The same client sending `name: value` with every request (e.g. its credentials).
    pub fn with_header(mut self, name: &'static str, value: &str) -> Self {
        self.extra
            .insert(name, HeaderValue::from_str(value).unwrap());
        self
    }

    /// The same client, connecting from `address` ([`http_client_from`]).
    pub fn calling_from(mut self, address: [u8; 4]) -> Self {
        self.http = http_client_from(address);
        self
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// `sessions/create`; panics unless it succeeds.
    pub async fn create(&mut self) -> Value {
        let id = self.id();
        self.create_from(json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create"}))
            .await
    }

    /// `sessions/create` with `_meta` (e.g. `io.modelcontextprotocol/clientCapabilities`,
    /// `…/clientInfo`); panics unless it succeeds.
    pub async fn create_with(&mut self, meta: Value) -> Value {
        let id = self.id();
        self.create_from(
            json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create",
            "params": {"_meta": meta}}),
        )
        .await
    }

    async fn create_from(&mut self, request: Value) -> Value {
        let reply = post_json(&self.http, &self.url, &request, &self.extra).await;
        assert_eq!(reply.status, 200, "sessions/create failed: {}", reply.text);
        let body = reply.json();
        let session = body["result"]["session"].clone();
        self.session_id = Some(session["sessionId"].as_str().unwrap().to_owned());
        self.state = Some(session["state"].as_str().unwrap().to_owned());
        body
    }

    pub fn session_id(&self) -> &str {
        self.session_id.as_deref().unwrap()
    }

    /// `Mcp-Session-Id` of the session, once there is one.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = match &self.session_id {
            Some(id) => session_header(id),
            None => HeaderMap::new(),
        };
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        headers
    }

    /// A request in the session with an id of the caller's choosing, carrying the
    /// latest state.
    pub fn message(&self, id: Value, method: &str, params: Value) -> Value {
        let params = in_session(params, self.session_id(), self.state.as_deref());
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// POSTs a message as it is, with the session's `Mcp-Session-Id`; adopts no state
    /// (so several can be in flight at once).
    pub async fn post(&self, body: &Value) -> Reply {
        post_json(&self.http, &self.url, body, &self.headers()).await
    }

    /// Opens the session's listen stream (`GET` with its `Mcp-Session-Id`); asserts it
    /// is an event stream.
    pub async fn listen(&self) -> EventReader {
        get_stream(&self.http, &self.url, self.headers()).await
    }

    /// Sends a request in the session; adopts the state of a successful response.
    pub async fn request(&mut self, method: &str, params: Value) -> Reply {
        let id = self.id();
        let body = self.message(json!(id), method, params);
        let reply = self.post(&body).await;
        self.adopt(&reply);
        reply
    }

    /// Sends a notification in the session.
    pub async fn notify(&mut self, method: &str, params: Value) -> Reply {
        let params = in_session(params, self.session_id(), None);
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        post_json(&self.http, &self.url, &body, &self.headers()).await
    }

    /// `tools/call`, returning the final response message (JSON or from the stream).
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        let reply = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        tool_result(name, &reply)
    }

    /// Text of the first content item of a tool result.
    pub async fn tool_text(&mut self, name: &str, arguments: Value) -> String {
        let message = self.call_tool(name, arguments).await;
        assert::text_of(&message).to_owned()
    }

    pub async fn delete(&mut self) -> Reply {
        self.request("sessions/delete", json!({})).await
    }

    fn adopt(&mut self, reply: &Reply) {
        if reply.status != 200 {
            return;
        }
        let message = final_message(reply);
        if let Some(state) = message
            .pointer(&format!(
                "/result/_meta/{}/state",
                SESSION_KEY.replace('/', "~1")
            ))
            .and_then(Value::as_str)
        {
            self.state = Some(state.to_owned());
        }
    }
}

/// The response message of a reply: the JSON body, or the last message of a stream.
pub fn final_message(reply: &Reply) -> Value {
    let content_type = reply.header("content-type").unwrap_or("");
    if content_type.starts_with("text/event-stream") {
        reply
            .events()
            .into_iter()
            .rfind(|m| m.get("id").is_some() && m.get("method").is_none())
            .unwrap_or(Value::Null)
    } else if reply.text.is_empty() {
        Value::Null
    } else {
        reply.json()
    }
}

/// The session `_meta` of a response message.
pub fn session_meta(message: &Value) -> &Value {
    &message["result"]["_meta"][SESSION_KEY]
}

/// Polls `check` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// Polls an asynchronous `check` (e.g. one reading `/metrics`) until it holds or
/// `within` passes.
pub async fn eventually_async<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check().await
}

/// `http://<the proxy's main listener><path>` (`/metrics`, `/readyz`…).
pub fn listener_url(proxy: &Running, path: &str) -> String {
    format!("http://{}{path}", proxy.local_addr())
}

/// GET `url`: the body, whatever the status.
pub async fn get_text(url: &str) -> String {
    let response = http_client().get(url).send().await.unwrap();
    response.text().await.unwrap()
}

/// GET `url`: the body as JSON, whatever the status.
pub async fn get_json(url: &str) -> Value {
    serde_json::from_str(&get_text(url).await).unwrap()
}

/// A gauge of the proxy's `/metrics` (on its main listener), e.g.
/// `mcp_proxy_stdio_children`; `None` if it cannot be read.
pub async fn gauge(proxy: &Running, name: &str) -> Option<i64> {
    let text = http_client()
        .get(listener_url(proxy, "/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
}

/// Reads an event-stream response message by message, as it arrives.
pub struct EventReader {
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl EventReader {
    pub fn new(response: reqwest::Response) -> Self {
        EventReader {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next JSON-RPC message, or `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Value> {
        self.read(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("no event within 20 s"))
    }

    /// The next JSON-RPC message within `within`: `Some(None)` at the end of the stream,
    /// `None` when nothing came in time (the stream stays readable).
    pub async fn next_within(&mut self, within: Duration) -> Option<Option<Value>> {
        self.read(within).await
    }

    async fn read(&mut self, within: Duration) -> Option<Option<Value>> {
        use futures_util::StreamExt;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let normalized = self.buffer.replace("\r\n", "\n");
            if let Some(end) = normalized.find("\n\n") {
                let event = normalized[..end].to_owned();
                self.buffer = normalized[end + 2..].to_owned();
                if let Some(message) = sse_messages(&format!("{event}\n\n")).into_iter().next() {
                    return Some(Some(message));
                }
                continue;
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Some(Err(e))) => panic!("stream failed: {e}"),
                Ok(None) => return Some(None),
                Err(_) => return None,
            }
        }
    }

    /// The next message, which must come within `within` (the stream must not end
    /// first).
    pub async fn expect_within(&mut self, within: Duration) -> Value {
        tokio::time::timeout(within, self.next())
            .await
            .unwrap_or_else(|_| panic!("nothing on the stream within {within:?}"))
            .expect("the stream ended")
    }

    /// Reads up to the server-to-client request `method` (e.g. `sampling/createMessage`)
    /// and returns it; asserts the stream neither ended nor answered before it.
    pub async fn next_request(&mut self, method: &str) -> Value {
        loop {
            let message = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the stream ended before {method}"));
            if message["method"] == method {
                return message;
            }
            assert!(
                message.get("result").is_none(),
                "a result came before {method}: {message}"
            );
        }
    }

    /// Every remaining message.
    pub async fn rest(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(message) = self.next().await {
            out.push(message);
        }
        out
    }

    /// Every remaining message with the time it arrived.
    pub async fn all_timed(mut self) -> Vec<(std::time::Instant, Value)> {
        let mut out = Vec::new();
        while let Some(message) = self.next().await {
            out.push((std::time::Instant::now(), message));
        }
        out
    }
}

/// POSTs a JSON-RPC message and returns the response unread (for streaming).
pub async fn post_streaming(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    extra: &HeaderMap,
) -> reqwest::Response {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH);
    for (name, value) in extra {
        request = request.header(name, value);
    }
    request.body(body.to_string()).send().await.unwrap()
}

impl SessionClient {
    /// Sends a request in the session and returns the response unread.
    pub async fn request_streaming(&mut self, method: &str, params: Value) -> reqwest::Response {
        let id = self.id();
        let body = self.message(json!(id), method, params);
        post_streaming(&self.http, &self.url, &body, &self.headers()).await
    }

    /// POSTs a JSON-RPC response (to a server-to-client request) in the session.
    pub async fn respond(&mut self, id: Value, result: Value) -> Reply {
        let result = in_session(result, self.session_id(), None);
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        post_json(&self.http, &self.url, &body, &self.headers()).await
    }
}

/// An old, initialize-based client (2025-11-25, 2025-06-18, 2025-03-26): its own
/// `initialize` and `notifications/initialized`, then the server's `Mcp-Session-Id` and
/// the negotiated `MCP-Protocol-Version` on every message.
pub struct LegacyClient {
    pub url: String,
    pub http: reqwest::Client,
    pub version: &'static str,
    /// The session id the server issued at `initialize`.
    pub session: String,
    /// The answer to its `initialize` (id 0).
    pub initialized: Reply,
}

impl LegacyClient {
    /// `initialize` (id 0) asking for `version`, then `notifications/initialized`.
    /// Asserts the server accepted both, negotiated `version`, issued a session id and
    /// put no data-layer session `_meta` in its result.
    pub async fn connect(url: String, version: &'static str) -> LegacyClient {
        LegacyClient::connect_with(url, version, json!({})).await
    }

    /// [`LegacyClient::connect`] declaring `capabilities` (e.g. `{"elicitation": {}}`).
    pub async fn connect_with(
        url: String,
        version: &'static str,
        capabilities: Value,
    ) -> LegacyClient {
        let http = http_client();
        let reply = post_json(
            &http,
            &url,
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": capabilities,
                "clientInfo": {"name": format!("legacy-{version}"), "version": "1"}}}),
            &HeaderMap::new(),
        )
        .await;
        assert_eq!(reply.status, 200, "{version}: {}", reply.text);
        let result = &final_message(&reply)["result"];
        assert_eq!(result["protocolVersion"], version, "negotiated as asked");
        assert!(
            result
                .get("_meta")
                .and_then(|m| m.get(SESSION_KEY))
                .is_none(),
            "an old client never sees data-layer session _meta"
        );
        let session = reply
            .header("mcp-session-id")
            .expect("an Mcp-Session-Id for the old client")
            .to_owned();
        let client = LegacyClient {
            url,
            http,
            version,
            session,
            initialized: reply,
        };
        let note = client
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(note.status, 202, "{}", note.text);
        client
    }

    /// `Mcp-Session-Id` and `MCP-Protocol-Version`.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = session_header(&self.session);
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static(self.version),
        );
        headers
    }

    /// POSTs a message in the session.
    pub async fn post(&self, body: Value) -> Reply {
        post_json(&self.http, &self.url, &body, &self.headers()).await
    }

    /// `tools/call` `name` with request id `id`: asserts it is answered 200 with that id
    /// and no data-layer session `_meta` (an old client never sees one); the response.
    pub async fn call(&self, id: u64, name: &str, arguments: Value) -> Value {
        let called = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}}))
            .await;
        assert_eq!(called.status, 200, "{}", called.text);
        let message = final_message(&called);
        assert_eq!(message["id"], id, "{message}");
        assert!(
            message["result"]
                .get("_meta")
                .is_none_or(|m| m.get(SESSION_KEY).is_none()),
            "an old client's result carries no session _meta: {message}"
        );
        message
    }

    /// Opens the session's GET stream; asserts it is an event stream.
    pub async fn listen(&self) -> EventReader {
        get_stream(&self.http, &self.url, self.headers()).await
    }

    /// Ends the session: `DELETE` with its headers.
    pub async fn delete(&self) -> reqwest::Response {
        self.http
            .delete(&self.url)
            .headers(self.headers())
            .send()
            .await
            .unwrap()
    }
}

/// A client of the stateless protocol (2026-07-28): per-request `_meta` and headers.
pub struct StatelessClient {
    pub url: String,
    pub http: reqwest::Client,
    pub capabilities: Value,
    pub log_level: Option<&'static str>,
    /// Sent with every request besides the 2026-07-28 ones (credentials, a conversation
    /// id).
    pub extra_headers: HeaderMap,
    next_id: u64,
}

pub const STATELESS_VERSION: &str = "2026-07-28";

impl StatelessClient {
    pub fn new(url: String) -> Self {
        StatelessClient {
            url,
            http: http_client(),
            capabilities: json!({}),
            log_level: None,
            extra_headers: HeaderMap::new(),
            next_id: 0,
        }
    }

    /// Sends `name: value` with every request.
    pub fn with_header(mut self, name: &'static str, value: &str) -> Self {
        self.extra_headers
            .insert(name, HeaderValue::from_str(value).unwrap());
        self
    }

    /// Connects from `address` ([`http_client_from`]).
    pub fn calling_from(mut self, address: [u8; 4]) -> Self {
        self.http = http_client_from(address);
        self
    }

    pub fn with_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// `params` with the per-request `_meta` a stateless client sends.
    pub fn params(&self, mut params: Value) -> Value {
        if !params.is_object() {
            params = json!({});
        }
        let meta = params
            .as_object_mut()
            .unwrap()
            .entry("_meta")
            .or_insert_with(|| json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!(STATELESS_VERSION);
        meta["io.modelcontextprotocol/clientInfo"] =
            json!({"name": "stateless-test", "version": "1"});
        meta["io.modelcontextprotocol/clientCapabilities"] = self.capabilities.clone();
        if let Some(level) = self.log_level {
            meta["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        params
    }

    /// The headers 2026-07-28 requires for `method` with `params`.
    pub fn headers(method: &str, params: &Value) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_static(STATELESS_VERSION),
        );
        headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
        let name = match method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
            _ => None,
        };
        if let Some(name) = name.and_then(Value::as_str) {
            headers.insert("mcp-name", HeaderValue::from_str(name).unwrap());
        }
        headers
    }

    /// Sends a request with complete `_meta` and headers; returns the response unread.
    pub async fn send(&mut self, method: &str, params: Value) -> reqwest::Response {
        self.next_id += 1;
        let params = self.params(params);
        let mut headers = Self::headers(method, &params);
        headers.extend(self.extra_headers.clone());
        let body =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        post_streaming(&self.http, &self.url, &body, &headers).await
    }

    /// Sends a request and reads the whole answer.
    pub async fn request(&mut self, method: &str, params: Value) -> Reply {
        let response = self.send(method, params).await;
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            text: response.text().await.unwrap(),
        }
    }

    /// `tools/call`, which must be answered 200; the final response message (JSON or
    /// from the stream).
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        let reply = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        tool_result(name, &reply)
    }
}

/// The final response message of the answer to `tools/call` `name`, which must be 200.
fn tool_result(name: &str, reply: &Reply) -> Value {
    assert_eq!(
        reply.status, 200,
        "tools/call {name} failed: {}",
        reply.text
    );
    final_message(reply)
}

/// `GET url` with `headers`, asking for an event stream; asserts it is one.
pub async fn get_stream(http: &reqwest::Client, url: &str, headers: HeaderMap) -> EventReader {
    let response = http
        .get(url)
        .headers(headers)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_event_stream(&response);
    EventReader::new(response)
}

/// A 200 answer whose body is an event stream.
pub fn assert_event_stream(response: &reqwest::Response) {
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("text/event-stream"),
        "not an event stream: {content_type}"
    );
}
