//! Every row of the book's "How it behaves" (docs/src/reference/behaviour.md: "Case by
//! case", "SEP-1364's dialect") and "Migrating a fleet" (docs/src/migrate/index.md)
//! tables, as the front's pure steps decide it: the header checks, the body limit, the
//! envelope, then `route::classify`. A row whose outcome needs the store or the upstream
//! (an unknown session, a bad `state`, an upstream that lost the session…) is checked for
//! the path it takes; the integration test named in its comment checks the rest.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::Full;
use serde_json::value::RawValue;

use super::checks;
use crate::error::ProxyError;
use crate::jsonrpc::Envelope;
use crate::mcp::headers::Accepts;
use crate::mcp::meta::Payload;
use crate::route::{
    Bare, BareRoute, Message, Route, RouteRules, SessionRef, classify, classify_bare,
};

const S1: &str = "mcps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const S2: &str = "mcps_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
const ACCEPT_BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");
const JSON_TYPE: (&str, &str) = ("content-type", "application/json");

/// A legacy (2025-11-25) HTTP upstream, sessions optional (the default configuration).
const HTTP: RouteRules = RouteRules {
    require_session: false,
    old_clients_pass: true,
    modern_upstream: false,
};
/// `upstream.require_session = true`.
const REQUIRED: RouteRules = RouteRules {
    require_session: true,
    old_clients_pass: true,
    modern_upstream: false,
};
/// A stdio upstream (or an HTTP+SSE one): the proxy is every old client's transport.
const STDIO: RouteRules = RouteRules {
    require_session: false,
    old_clients_pass: false,
    modern_upstream: false,
};
/// A modern (2026-07-28) upstream: stateless clients pass, old clients are bridged.
const MODERN: RouteRules = RouteRules {
    require_session: false,
    old_clients_pass: false,
    modern_upstream: true,
};
/// A dual upstream whose old clients the operator passes through
/// (`upstream.old_clients = "pass_through"`).
const DUAL_PASS: RouteRules = RouteRules {
    require_session: false,
    old_clients_pass: true,
    modern_upstream: true,
};

/// What the proxy's pure steps make of a request.
enum Req {
    Post {
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    Get(Vec<(&'static str, String)>),
    Delete(Vec<(&'static str, String)>),
}

fn post(body: &str) -> Req {
    post_with(&[], body)
}

fn post_with(extra: &[(&'static str, &str)], body: &str) -> Req {
    let mut headers: Vec<(&'static str, String)> = vec![
        (JSON_TYPE.0, JSON_TYPE.1.into()),
        (ACCEPT_BOTH.0, ACCEPT_BOTH.1.into()),
    ];
    for (name, value) in extra {
        headers.retain(|(n, _)| n != name);
        headers.push((name, (*value).into()));
    }
    Req::Post {
        headers,
        body: body.into(),
    }
}

fn header_map(pairs: &[(&'static str, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_static(name),
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    map
}

/// The message the front makes of a parsed body (its caller from the headers; no peer
/// address).
fn front_message<'m, 'b>(
    headers: &'m HeaderMap,
    body: &'m Bytes,
    envelope: &'m Envelope<'b>,
    payload: Option<(&'b RawValue, &'m Payload<'b>)>,
    accepts: Accepts,
) -> Message<'m, 'b> {
    Message {
        headers,
        caller: crate::mcp::caller::Caller::of(headers),
        body,
        envelope,
        payload,
        accepts,
        peer: None,
    }
}

fn describe_route(route: &Route<'_>) -> String {
    let s = |s: &SessionRef<'_>| s.id.to_string();
    match route {
        Route::Create { era, .. } => format!("Create {era:?}"),
        Route::Sep1364Initialize { session, .. } => format!(
            "Sep1364Initialize {}",
            session.as_ref().map_or("new".to_owned(), s)
        ),
        Route::LegacyInitialize { .. } => "LegacyInitialize".into(),
        Route::Stateless => "Stateless".into(),
        Route::Delete { session, .. } => format!("Delete {}", s(session)),
        Route::InitializedAck { session } => format!("InitializedAck {}", s(session)),
        Route::InSession { session, era } => format!("InSession {} {era:?}", s(session)),
        Route::TaskInSession { session } => format!("TaskInSession {}", s(session)),
        Route::PassThrough => "PassThrough".into(),
    }
}

fn describe_error(e: &ProxyError) -> String {
    let (status, object, _) = e.answer();
    format!("error {} {}", object.code, status.as_u16())
}

fn bare(request: Bare, headers: &[(&'static str, String)], rules: RouteRules) -> String {
    let headers = header_map(headers);
    match classify_bare(request, &headers, rules) {
        Ok(BareRoute::Listen { .. }) => "Listen".into(),
        Ok(BareRoute::EndByHeader { .. }) => "EndByHeader".into(),
        Ok(BareRoute::PassThrough) => "PassThrough".into(),
        Err(e) => describe_error(&e),
    }
}

/// The outcome of the front's pure steps for `req`, as a short text.
async fn outcome(req: Req, rules: RouteRules) -> String {
    const MAX_BODY: usize = 4096;
    match req {
        Req::Get(h) => bare(Bare::Get, &h, rules),
        Req::Delete(h) => bare(Bare::Delete, &h, rules),
        Req::Post { headers, body } => {
            let headers = header_map(&headers);
            let checked = checks::origin(&headers, &[])
                .and_then(|()| checks::content_type(&headers))
                .and_then(|()| checks::accept(&headers));
            let accepts = match checked {
                Ok(accepts) => accepts,
                Err(e) => return describe_error(&e),
            };
            let body = Full::new(Bytes::from(body));
            let body = match checks::read_body(body, MAX_BODY).await {
                Ok(body) => body,
                Err(e) => return describe_error(&e),
            };
            let envelope = match Envelope::parse(&body) {
                Ok(envelope) => envelope,
                Err(e) => return describe_error(&e.into()),
            };
            let raw = envelope.params_or_result();
            let payload = match raw.map(Payload::open).transpose() {
                Ok(payload) => payload.flatten(),
                Err(e) => return describe_error(&e.into()),
            };
            let opened = raw.zip(payload.as_ref());
            let message = front_message(&headers, &body, &envelope, opened, accepts);
            match classify(&message, rules) {
                Ok(route) => describe_route(&route),
                Err(e) => describe_error(&e),
            }
        }
    }
}

fn in_session(method: &str, id: Option<i64>, session: &str, extra_params: &str) -> String {
    let id = id.map(|id| format!(r#""id":{id},"#)).unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0",{id}"method":"{method}","params":{{{extra_params}"_meta":{{"io.modelcontextprotocol/session":{{"sessionId":"{session}"}}}}}}}}"#
    )
}

/// A `sessions/create` in the data-layer sessions draft's shape.
const CREATE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"sessions/create"}"#;

/// An old (2025-11-25) client's `initialize`.
const OLD_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}"#;

const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn rows() -> Vec<(&'static str, Req, RouteRules, String)> {
    let h = |pairs: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        pairs.iter().map(|(n, v)| (*n, (*v).to_owned())).collect()
    };
    let tools_call = in_session("tools/call", Some(2), S1, r#""name":"echo","#);
    // A 2026-07-28 client's request: the version in its headers and in `_meta`.
    let stateless_tools_list = || {
        post_with(
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ],
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{MODERN_META}}}}}"#
            ),
        )
    };
    vec![
        // === docs/src/reference/behaviour.md, "Case by case" ===
        (
            "sessions/create",
            post(CREATE),
            HTTP,
            "Create DataLayer".into(),
        ),
        (
            "sessions/create carrying session _meta → -32602, HTTP 400",
            post(&in_session("sessions/create", Some(1), S1, "")),
            HTTP,
            "error -32602 400".into(),
        ),
        // The store answers -32043 (tests/suite/lifecycle.rs); a sessionId outside 0x21–0x7E
        // is never found either.
        (
            "unknown, expired or deleted session",
            post(&tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "sessionId outside 0x21–0x7E",
            post(&in_session("tools/list", Some(2), "sess ion\u{e9}", "")),
            HTTP,
            "InSession sess ion\u{e9} DataLayer".into(),
        ),
        (
            "Mcp-Session-Id header disagreeing with the _meta sessionId → -32600, HTTP 400",
            post_with(&[("mcp-session-id", S2)], &tools_call),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "Mcp-Session-Id header that is not visible ASCII, on any request → -32600, HTTP 400",
            post_with(
                &[("mcp-session-id", "caf\u{e9}")],
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            ),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "… with session _meta",
            post_with(&[("mcp-session-id", "has space")], &tools_call),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "… on GET",
            Req::Get(vec![("mcp-session-id", "tab\there".into())]),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "… on DELETE",
            Req::Delete(vec![("mcp-session-id", "\u{ff}".into())]),
            HTTP,
            "error -32600 400".into(),
        ),
        // The session path refuses a state not issued for the session (tests/suite/lifecycle.rs).
        (
            "a state changed, or issued for another session",
            post(&in_session("tools/list", Some(2), S1, "").replace(
                r#""sessionId":"mcps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA""#,
                r#""sessionId":"mcps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","state":"forged""#,
            )),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        // The upstream's 404 is decided in `upstream` (tests/suite/lifecycle.rs, interop).
        (
            "the upstream lost the session",
            post(&tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "upstream unreachable / too slow",
            post(&tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        // Forwarding to the replica holding a stdio child, its cap per caller, and the
        // signature a replica puts on what it forwards are `paths::cluster`'s, the last
        // checked once the body is read (tests/suite/replicas.rs).
        (
            "the proxy replica holding a session's stdio server does not answer",
            post(&tools_call),
            STDIO,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "one caller with cluster.max_forwarded_per_caller requests already on their way",
            post(&tools_call),
            STDIO,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "a request carrying mcp-proxy-forwarded that no replica of this cluster signed",
            post_with(&[("mcp-proxy-forwarded", "1")], &tools_call),
            STDIO,
            format!("InSession {S1} DataLayer"),
        ),
        // The relay refuses what is not the response (tests/suite/lifecycle.rs, stateless.rs).
        (
            "upstream success that is not the request's response",
            post(&tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        // The cap is the session store's (tests/suite/lifecycle.rs).
        (
            "max_sessions reached",
            post(CREATE),
            HTTP,
            "Create DataLayer".into(),
        ),
        // The per-caller limits are the session manager's (tests/suite/fairness.rs).
        (
            "a caller over its own limits",
            post(CREATE),
            HTTP,
            "Create DataLayer".into(),
        ),
        (
            "no session and upstream.require_session = true → -32044, HTTP 400",
            post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            REQUIRED,
            "error -32044 400".into(),
        ),
        (
            "no session otherwise → passed through",
            post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            HTTP,
            "PassThrough".into(),
        ),
        (
            "a client notification in a session",
            post(&in_session(
                "notifications/cancelled",
                None,
                S1,
                r#""requestId":3,"#,
            )),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "a client notification naming its session by Mcp-Session-Id only",
            post_with(
                &[("mcp-session-id", S1)],
                r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
            ),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "a response to a server request in a session",
            post_with(
                &[("mcp-session-id", S1)],
                r#"{"jsonrpc":"2.0","id":"srv-1","result":{"role":"assistant","content":{"type":"text","text":"x"}}}"#,
            ),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        // What comes back on the stream is the relay's (tests/suite/streaming.rs).
        (
            "server-to-client requests inside an SSE response",
            post(&tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "GET with a data-layer Mcp-Session-Id",
            Req::Get(h(&[("mcp-session-id", S1)])),
            HTTP,
            "Listen".into(),
        ),
        (
            "DELETE with a data-layer Mcp-Session-Id",
            Req::Delete(h(&[("mcp-session-id", S1)])),
            HTTP,
            "EndByHeader".into(),
        ),
        (
            "a client that accepts only application/json",
            post_with(&[("accept", "application/json")], &tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "invalid JSON → -32700, HTTP 400",
            post(r#"{"jsonrpc":"2.0","id":1,"#),
            HTTP,
            "error -32700 400".into(),
        ),
        (
            "not JSON-RPC 2.0 → -32600",
            post(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "no method → -32600",
            post(r#"{"jsonrpc":"2.0","id":1}"#),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "a bad id → -32600",
            post(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "a batch → -32600",
            post(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            HTTP,
            "error -32600 400".into(),
        ),
        (
            "body over max_body_bytes → 413",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
                "a".repeat(5000)
            )),
            HTTP,
            "error -32600 413".into(),
        ),
        (
            "wrong Content-Type → 415",
            post_with(
                &[("content-type", "text/plain")],
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            ),
            HTTP,
            "error -32600 415".into(),
        ),
        (
            "unacceptable Accept → 406",
            post_with(
                &[("accept", "text/html")],
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            ),
            HTTP,
            "error -32600 406".into(),
        ),
        (
            "foreign Origin → 403",
            post_with(
                &[("origin", "https://evil.example")],
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            ),
            HTTP,
            "error -32600 403".into(),
        ),
        // === docs/src/migrate/index.md, "Migrating a fleet" ===
        (
            "an old client's initialize",
            post(OLD_INITIALIZE),
            HTTP,
            "PassThrough".into(),
        ),
        (
            "an old client's request with the server's own Mcp-Session-Id",
            post_with(
                &[
                    ("mcp-session-id", "upstream-own-id"),
                    ("mcp-protocol-version", "2025-06-18"),
                ],
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            ),
            HTTP,
            "PassThrough".into(),
        ),
        (
            "an old client's GET stream",
            Req::Get(h(&[("mcp-session-id", "upstream-own-id")])),
            HTTP,
            "PassThrough".into(),
        ),
        (
            "an old client's DELETE",
            Req::Delete(h(&[("mcp-session-id", "upstream-own-id")])),
            HTTP,
            "PassThrough".into(),
        ),
        (
            "an old connection's Mcp-Session-Id means legacy semantics, whatever _meta says",
            post_with(
                &[("mcp-session-id", "upstream-own-id")],
                &format!(
                    r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{{MODERN_META}}}}}"#
                ),
            ),
            HTTP,
            "PassThrough".into(),
        ),
        (
            "a data-layer session client: sessions/create, then _meta",
            post(&tools_call),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "a stateless client: _meta protocolVersion on every request",
            stateless_tools_list(),
            HTTP,
            "Stateless".into(),
        ),
        (
            "a stateless client's server/discover, even without _meta",
            post(r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#),
            HTTP,
            "Stateless".into(),
        ),
        (
            "a stateless client's version header alone",
            post_with(
                &[("mcp-protocol-version", "2026-07-28")],
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            ),
            HTTP,
            "Stateless".into(),
        ),
        (
            "a 2026-07-28 client opens a data-layer session the same way",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"sessions/create","params":{{{MODERN_META}}}}}"#
            )),
            HTTP,
            "Create Modern".into(),
        ),
        (
            "a 2026-07-28 client's message in its session is answered as modern",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/session":{{"sessionId":"{S1}"}}}}}}}}"#
            )),
            HTTP,
            format!("InSession {S1} Modern"),
        ),
        (
            "a 2026-07-28 client's tools/call in its session: the proxy may run it as a task",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"slow","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/session":{{"sessionId":"{S1}"}}}}}}}}"#
            )),
            HTTP,
            format!("TaskInSession {S1}"),
        ),
        (
            "… and its tasks/get",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{{"taskId":"t","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/session":{{"sessionId":"{S1}"}}}}}}}}"#
            )),
            STDIO,
            format!("TaskInSession {S1}"),
        ),
        (
            "… but a modern upstream runs its own tasks",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{{"taskId":"t","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/session":{{"sessionId":"{S1}"}}}}}}}}"#
            )),
            MODERN,
            format!("InSession {S1} Modern"),
        ),
        (
            "a data-layer client's tasks/get (2025-11-25 tasks) is the upstream's",
            post(&in_session("tasks/get", Some(3), S1, r#""taskId":"t","#)),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "SEP-1364's shape names the era whatever version the _meta names",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"sessions/create","params":{{"capabilities":{{}},{MODERN_META}}}}}"#
            )),
            HTTP,
            "Create Sep1364".into(),
        ),
        (
            "a message naming a session never takes the stateless path",
            post(&in_session(
                "tools/list",
                Some(2),
                S1,
                &format!("{},", &MODERN_META[9..MODERN_META.len() - 1]),
            )),
            HTTP,
            format!("InSession {S1} DataLayer"),
        ),
        // === docs/src/front/stdio.md, "In front of a stdio server" ===
        (
            "an old client's initialize in front of a stdio server",
            post(OLD_INITIALIZE),
            STDIO,
            "LegacyInitialize".into(),
        ),
        (
            "a message naming no session in front of a stdio server → -32044",
            post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            STDIO,
            "error -32044 400".into(),
        ),
        (
            "a GET naming no session in front of a stdio server → -32044",
            Req::Get(vec![]),
            STDIO,
            "error -32044 400".into(),
        ),
        // === docs/src/front/eras.md, "Every era of upstream" ===
        (
            "a 2026-07-28 request in front of a modern upstream passes as it came",
            stateless_tools_list(),
            MODERN,
            "PassThrough".into(),
        ),
        (
            "server/discover in front of a modern upstream passes as it came",
            post(r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#),
            MODERN,
            "PassThrough".into(),
        ),
        (
            "sessions/create in front of a modern upstream",
            post(CREATE),
            MODERN,
            "Create DataLayer".into(),
        ),
        (
            "a data-layer session's request in front of a modern upstream",
            post(&tools_call),
            MODERN,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "an old client's initialize in front of a modern upstream is bridged",
            post(OLD_INITIALIZE),
            MODERN,
            "LegacyInitialize".into(),
        ),
        (
            "an old client's message naming no session in front of a modern upstream → -32044",
            post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            MODERN,
            "error -32044 400".into(),
        ),
        (
            "an old client in a bridged session in front of a modern upstream",
            post_with(
                &[("mcp-session-id", S1)],
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
            ),
            MODERN,
            format!("InSession {S1} DataLayer"),
        ),
        (
            "an old client's initialize in front of a dual upstream passing old clients",
            post(OLD_INITIALIZE),
            DUAL_PASS,
            "PassThrough".into(),
        ),
        (
            "a GET naming no session in front of a modern upstream → -32044",
            Req::Get(vec![]),
            MODERN,
            "error -32044 400".into(),
        ),
        // === docs/src/reference/behaviour.md, "SEP-1364's dialect" ===
        (
            "initialize with top-level \"sessionId\": null",
            post(
                r#"{"jsonrpc":"2.0","id":1,"sessionId":null,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            ),
            HTTP,
            "Sep1364Initialize new".into(),
        ),
        (
            "initialize with a known sessionId",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":1,"sessionId":"{S1}","method":"initialize","params":{{}}}}"#
            )),
            HTTP,
            format!("Sep1364Initialize {S1}"),
        ),
        (
            "sessions/create with params.capabilities",
            post(
                r#"{"jsonrpc":"2.0","id":1,"method":"sessions/create","params":{"capabilities":{}}}"#,
            ),
            HTTP,
            "Create Sep1364".into(),
        ),
        (
            "any request with top-level sessionId",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":3,"sessionId":"{S1}","method":"tools/list"}}"#
            )),
            HTTP,
            format!("InSession {S1} Sep1364"),
        ),
        (
            "any notification with top-level sessionId",
            post(&format!(
                r#"{{"jsonrpc":"2.0","sessionId":"{S1}","method":"notifications/cancelled","params":{{"requestId":3}}}}"#
            )),
            HTTP,
            format!("InSession {S1} Sep1364"),
        ),
        (
            "top-level sessionId and _meta must agree → -32600",
            post(&in_session("tools/list", Some(2), S1, "").replacen(
                '{',
                &format!(r#"{{"sessionId":"{S2}","#),
                1,
            )),
            HTTP,
            "error -32600 400".into(),
        ),
        // The echo is the relay's (tests/suite/sep1364.rs).
        (
            "the response to such a request echoes the sessionId",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":3,"sessionId":"{S1}","method":"tools/list"}}"#
            )),
            HTTP,
            format!("InSession {S1} Sep1364"),
        ),
        (
            "notifications/initialized in a session → 202",
            post(&format!(
                r#"{{"jsonrpc":"2.0","sessionId":"{S1}","method":"notifications/initialized"}}"#
            )),
            HTTP,
            format!("InitializedAck {S1}"),
        ),
        (
            "terminate with params.sessionId",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"terminate","params":{{"sessionId":"{S1}"}}}}"#
            )),
            HTTP,
            format!("Delete {S1}"),
        ),
        (
            "session/delete with params.sessionId",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"session/delete","params":{{"sessionId":"{S1}"}}}}"#
            )),
            HTTP,
            format!("Delete {S1}"),
        ),
        (
            "sessions/delete with params.sessionId in SEP-1364's dialect",
            post(&format!(
                r#"{{"jsonrpc":"2.0","id":4,"sessionId":"{S1}","method":"sessions/delete","params":{{"sessionId":"{S1}"}}}}"#
            )),
            HTTP,
            format!("Delete {S1}"),
        ),
        (
            "sessions/delete with the session in _meta",
            post(&in_session("sessions/delete", Some(4), S1, "")),
            HTTP,
            format!("Delete {S1}"),
        ),
        (
            "sessions/delete naming no session → -32602",
            post(r#"{"jsonrpc":"2.0","id":4,"method":"sessions/delete"}"#),
            HTTP,
            "error -32602 400".into(),
        ),
    ]
}

#[tokio::test]
async fn every_row_of_the_readme_tables_takes_its_path() {
    let mut failures = Vec::new();
    for (row, req, rules, expected) in rows() {
        let got = outcome(req, rules).await;
        if got != expected {
            failures.push(format!("{row}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// One message for `front::shed`: its headers besides the usual ones, its body, the
/// upstream's rules, and whether it is new work.
struct ShedCase {
    case: &'static str,
    session_header: Option<&'static str>,
    body: String,
    rules: RouteRules,
    new_work: bool,
}

/// Whether the message of `case` is new work, which the proxy sheds while overloaded
/// (`front::shed`).
fn is_new_work(case: &ShedCase) -> bool {
    let pairs: Vec<(&'static str, String)> = case
        .session_header
        .map(|id| ("mcp-session-id", id.to_owned()))
        .into_iter()
        .collect();
    let headers = header_map(&pairs);
    let body = Bytes::from(case.body.clone());
    let envelope = Envelope::parse(&body).unwrap();
    let raw = envelope.params_or_result();
    let payload = raw.map(Payload::open).transpose().unwrap().flatten();
    let accepts = checks::accept(&header_map(&[(ACCEPT_BOTH.0, ACCEPT_BOTH.1.into())])).unwrap();
    let opened = raw.zip(payload.as_ref());
    let message = front_message(&headers, &body, &envelope, opened, accepts);
    let route = classify(&message, case.rules).unwrap();
    super::shed::is_new_work(&message, &route)
}

#[test]
fn overload_sheds_new_work_and_never_requests_in_open_sessions() {
    let case = |case, body: String, rules, new_work| ShedCase {
        case,
        session_header: None,
        body,
        rules,
        new_work,
    };
    let cases = vec![
        case("sessions/create", CREATE.into(), HTTP, true),
        case("SEP-1364 initialize opening a session", r#"{"jsonrpc":"2.0","id":1,"sessionId":null,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#.into(), HTTP, true),
        case("an old client's initialize of a stdio server", OLD_INITIALIZE.into(), STDIO, true),
        case("a stateless call", format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo",{MODERN_META}}}}}"#), HTTP, true),
        case("an old client's initialize, passed through", OLD_INITIALIZE.into(), HTTP, true),
        case("a call in a data-layer session", in_session("tools/call", Some(2), S1, r#""name":"echo","#), HTTP, false),
        case("SEP-1364 initialize naming its session", format!(r#"{{"jsonrpc":"2.0","id":1,"sessionId":"{S1}","method":"initialize","params":{{}}}}"#), HTTP, false),
        case("sessions/delete", in_session("sessions/delete", Some(4), S1, ""), HTTP, false),
        case("notifications/initialized in a session", format!(r#"{{"jsonrpc":"2.0","sessionId":"{S1}","method":"notifications/initialized"}}"#), HTTP, false),
        ShedCase {
            session_header: Some("upstream-7"),
            ..case("an old client's request in its upstream session", r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.into(), HTTP, false)
        },
        case("an old client's notification", r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(), HTTP, false),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter(|c| is_new_work(c) != c.new_work)
        .map(|c| format!("{}: expected new work = {}", c.case, c.new_work))
        .collect();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}
