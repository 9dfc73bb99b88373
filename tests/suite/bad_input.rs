//! Bad input: each gets its JSON-RPC error and HTTP status (the error reference,
//! `docs/src/reference/errors.md`), none panics the proxy, none touches another session.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use common::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

struct Case {
    name: &'static str,
    body: Vec<u8>,
    content_type: &'static str,
    accept: &'static str,
    status: u16,
    code: i64,
}

fn case(name: &'static str, body: &str, status: u16, code: i64) -> Case {
    Case {
        name,
        body: body.as_bytes().to_vec(),
        content_type: "application/json",
        accept: ACCEPT_BOTH,
        status,
        code,
    }
}

async fn send(h: &Harness, c: &Case) -> Reply {
    let response = h
        .http
        .post(h.url())
        .header("content-type", c.content_type)
        .header("accept", c.accept)
        .body(c.body.clone())
        .send()
        .await
        .unwrap();
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        text: response.text().await.unwrap(),
    }
}

#[tokio::test]
async fn every_bad_input_gets_its_error_and_no_session_is_disturbed() {
    let h = Harness::start().await;
    let mut bystander = h.client();
    bystander.create().await;
    assert_eq!(bystander.tool_text("counter", json!({})).await, "1");

    let cases = [
        case(
            "invalid JSON",
            r#"{"jsonrpc":"2.0","id":1,"method":"#,
            400,
            -32700,
        ),
        case("not JSON at all", "hello", 400, -32700),
        Case {
            body: b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xfe\xff\"}".to_vec(),
            ..case("not UTF-8 (in a member the proxy skips)", "", 400, -32700)
        },
        case(
            "an unpaired surrogate escape in a member name",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"k\udddd":1}}"#,
            400,
            -32700,
        ),
        case(
            "trailing garbage",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#,
            400,
            -32700,
        ),
        case(
            "not JSON-RPC 2.0",
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            400,
            -32600,
        ),
        case(
            "no jsonrpc member",
            r#"{"id":1,"method":"ping"}"#,
            400,
            -32600,
        ),
        case(
            "no method",
            r#"{"jsonrpc":"2.0","id":1,"params":{}}"#,
            400,
            -32600,
        ),
        case(
            "method not a string",
            r#"{"jsonrpc":"2.0","id":1,"method":42}"#,
            400,
            -32600,
        ),
        case(
            "id is an object",
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            400,
            -32600,
        ),
        case(
            "id is null",
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            400,
            -32600,
        ),
        case(
            "id is a boolean",
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            400,
            -32600,
        ),
        case(
            "batch",
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            400,
            -32600,
        ),
        case("empty batch", "[]", 400, -32600),
        case("a bare number", "42", 400, -32600),
        Case {
            content_type: "text/plain",
            ..case(
                "wrong content type",
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                415,
                -32600,
            )
        },
        Case {
            content_type: "application/x-www-form-urlencoded",
            ..case("form content type", "a=1", 415, -32600)
        },
        Case {
            accept: "text/html",
            ..case(
                "accept allows neither JSON nor SSE",
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                406,
                -32600,
            )
        },
        Case {
            accept: "application/json;q=0, text/event-stream;q=0",
            ..case(
                "accept refuses both",
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                406,
                -32600,
            )
        },
    ];
    for c in &cases {
        let reply = send(&h, c).await;
        assert_eq!(reply.status, c.status, "{}: {}", c.name, reply.text);
        assert_eq!(
            reply.header("content-type"),
            Some("application/json"),
            "{}",
            c.name
        );
        let body = reply.json();
        assert_eq!(body["jsonrpc"], "2.0", "{}", c.name);
        assert_eq!(body["error"]["code"], c.code, "{}: {}", c.name, reply.text);
        assert!(
            body["error"]["message"].as_str().unwrap().len() > 10,
            "{}: the message should say what is wrong",
            c.name
        );
        assert_eq!(body["id"], Value::Null, "{}", c.name);
    }
    assert!(
        h.upstream_saw("ping").is_empty(),
        "no bad input reaches the upstream"
    );
    // The bystander's session and upstream session are intact.
    assert_eq!(bystander.tool_text("counter", json!({})).await, "2");
    h.stop().await;
}

#[tokio::test]
async fn a_bad_id_is_named_in_the_error_data() {
    let h = Harness::start().await;
    let reply = h
        .post(&json!({"jsonrpc": "2.0", "id": {"nested": true}, "method": "ping"}))
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["data"]["id"], json!({"nested": true}));
    h.stop().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_with_a_json_rpc_error() {
    let h = Harness::with_config(|c| c.max_body_bytes = 2048).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"msg": "x".repeat(4096)}}});
    let reply = h.post(&big).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.error_code(), Some(-32600));
    assert_eq!(reply.json()["error"]["data"]["limit"], 2048);

    // Without a Content-Length (chunked), the limit holds while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..8).map(|_| Ok(vec![b' '; 1024])).collect();
    let response = h
        .http
        .post(h.url())
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH)
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        -32600
    );

    // The default limit is 4 MiB.
    let h2 = Harness::start().await;
    let under = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(1024 * 1024)}});
    assert_ne!(h2.post(&under).await.status, 413);
    let over = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4 * 1024 * 1024)}});
    assert_eq!(h2.post(&over).await.status, 413);
    h.stop().await;
    h2.stop().await;
}

#[tokio::test]
async fn session_ids_outside_visible_ascii_are_not_found() {
    let h = Harness::start().await;
    for id in ["has space", "tab\there", "caf\u{e9}", "", "\u{7f}"] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": in_session(json!({}), id, None)});
        let reply = h.post(&body).await;
        assert_eq!(reply.status, 404, "{id:?}: {}", reply.text);
        assert_eq!(
            reply.json()["error"],
            json!({"code": -32043, "message": "Session not found", "data": {"sessionId": id}}),
            "{id:?}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn an_mcp_session_id_header_outside_visible_ascii_is_invalid_request() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    h.demo.clear_journal();
    let values: [&[u8]; 4] = [b"caf\xc3\xa9", b"\xff\xfe", b"has space", b"tab\there"];
    for value in values {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-session-id", HeaderValue::from_bytes(value).unwrap());
        // An old client's request (no session _meta: it used to pass through), and one
        // naming a live session in _meta.
        for body in [
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
            c.message(json!(8), "tools/list", json!({})),
        ] {
            let reply = post_json(&h.http, &h.url(), &body, &headers).await;
            assert_eq!(reply.status, 400, "{value:?}: {}", reply.text);
            let answer = reply.json();
            assert_eq!(answer["id"], 8, "{value:?}: {answer}");
            assert_eq!(answer["error"]["code"], -32600, "{value:?}: {answer}");
            assert_eq!(
                answer["error"]["data"],
                json!({"header": "Mcp-Session-Id"}),
                "{value:?}"
            );
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Mcp-Session-Id header must be visible ASCII"),
                "{answer}"
            );
        }
        for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
            let response = h.bare(method.clone(), &headers).await;
            assert_eq!(response.status(), 400, "{method} {value:?}");
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer["error"]["code"], -32600, "{method} {value:?}");
            assert_eq!(answer["id"], Value::Null);
        }
    }
    assert!(
        h.demo.journal().is_empty(),
        "nothing reached the upstream: {:?}",
        h.demo.journal()
    );
    // The session named in _meta is untouched.
    assert_eq!(c.tool_text("counter", json!({})).await, "1");
    h.stop().await;
}

#[tokio::test]
async fn a_repeated_mcp_session_id_header_is_invalid_request() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let ours = c.session_id().to_owned();
    let legacy = LegacyClient::connect(h.url(), "2025-11-25").await;
    h.demo.clear_journal();
    let twice = |first: &str, second: &str| {
        let mut headers = HeaderMap::new();
        headers.append("mcp-session-id", HeaderValue::from_str(first).unwrap());
        headers.append("mcp-session-id", HeaderValue::from_str(second).unwrap());
        headers
    };
    let refused = |answer: &Value, what: &str| {
        assert_eq!(answer["error"]["code"], -32600, "{what}: {answer}");
        assert_eq!(
            answer["error"]["data"],
            json!({"header": "Mcp-Session-Id"}),
            "{what}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("Mcp-Session-Id header is sent more than once"),
            "{what}: {message}"
        );
    };
    let pairs = [
        // Ours checked first, another read after it; the same one twice; an old client's
        // upstream id beside ours, either way round.
        (ours.as_str(), "mcps_someone-elses"),
        (ours.as_str(), ours.as_str()),
        (legacy.session.as_str(), ours.as_str()),
        (ours.as_str(), legacy.session.as_str()),
        (legacy.session.as_str(), legacy.session.as_str()),
    ];
    for (first, second) in pairs {
        let headers = twice(first, second);
        let what = format!("{first} + {second}");
        // An old client's message (no _meta: it would pass through), one naming our
        // session in _meta, and a notification.
        for body in [
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
            c.message(json!(8), "tools/list", json!({})),
        ] {
            let reply = post_json(&h.http, &h.url(), &body, &headers).await;
            assert_eq!(reply.status, 400, "{what}: {}", reply.text);
            assert_eq!(reply.json()["id"], 8, "{what}");
            refused(&reply.json(), &what);
        }
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = post_json(&h.http, &h.url(), &note, &headers).await;
        assert_eq!(reply.status, 400, "{what}: {}", reply.text);
        refused(&reply.json(), &what);
        for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
            let response = h.bare(method.clone(), &headers).await;
            assert_eq!(response.status(), 400, "{method} {what}");
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer["id"], Value::Null, "{method} {what}");
            refused(&answer, &format!("{method} {what}"));
        }
    }
    assert!(
        h.demo.journal().is_empty(),
        "nothing reached the upstream: {:?}",
        h.demo.journal()
    );
    // Both sessions are untouched (the DELETEs ended neither).
    assert_eq!(c.tool_text("counter", json!({})).await, "1");
    let list = legacy
        .post(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
        .await;
    assert_eq!(list.status, 200, "{}", list.text);
    h.stop().await;
}

/// Whether `echoed` is `sent` cut as errors cut what they echo: its first 256 bytes and
/// an ellipsis.
fn cut_from(echoed: &Value, sent: &str) -> bool {
    echoed.as_str().is_some_and(|e| {
        e.len() == 256 + "…".len() && e.ends_with('…') && sent.starts_with(&e[..256])
    })
}

#[tokio::test]
async fn errors_echo_at_most_a_few_hundred_bytes_of_what_the_client_sent() {
    let h = Harness::start().await;
    // A session id of a megabyte in _meta (the body may be 4 MiB): -32043 names it cut.
    let huge = format!("mcps_{}", "a".repeat(1024 * 1024));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": in_session(json!({}), &huge, None)});
    let reply = h.post(&body).await;
    assert_eq!(reply.status, 404);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32043);
    assert!(cut_from(&error["data"]["sessionId"], &huge), "{error}");
    assert!(reply.text.len() < 2048, "{} bytes", reply.text.len());

    // In the header (hyper takes heads of up to ~400 KB): alone, it names the session;
    // beside another in _meta, both are named, cut.
    let header = format!("mcps_{}", "b".repeat(200 * 1024));
    let reply = post_json(
        &h.http,
        &h.url(),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        &session_header(&header),
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.text);
    assert!(cut_from(
        &reply.json()["error"]["data"]["sessionId"],
        &header
    ));
    assert!(reply.text.len() < 2048, "{} bytes", reply.text.len());
    let reply = post_json(&h.http, &h.url(), &body, &session_header(&header)).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32600);
    assert!(cut_from(&error["data"]["sessionId"], &huge), "{error}");
    assert!(
        cut_from(&error["data"]["headerSessionId"], &header),
        "{error}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.len() <= 1024, "{} bytes", message.len());
    assert!(
        message.contains("names another session than _meta"),
        "{message}"
    );

    // A request id that is not a string or a number, of a megabyte: named cut.
    let bad_id = json!({"pad": "c".repeat(1024 * 1024)});
    let reply = h
        .post(&json!({"jsonrpc": "2.0", "id": bad_id, "method": "ping"}))
        .await;
    assert_eq!(reply.status, 400);
    assert!(cut_from(
        &reply.json()["error"]["data"]["id"],
        &bad_id.to_string()
    ));
    assert!(reply.text.len() < 2048, "{} bytes", reply.text.len());

    // A valid id of a megabyte is the response's id, whole (JSON-RPC 2.0), and only there.
    let long_id = "d".repeat(1024 * 1024);
    let reply = h
        .post(
            &json!({"jsonrpc": "2.0", "id": long_id, "method": "tools/list",
            "params": in_session(json!({}), &huge, None)}),
        )
        .await;
    assert_eq!(reply.json()["id"], long_id.as_str());
    assert!(
        reply.text.len() < long_id.len() + 2048,
        "{} bytes",
        reply.text.len()
    );
    h.stop().await;
}

#[tokio::test]
async fn malformed_session_metadata_is_invalid_params() {
    let h = Harness::start().await;
    for session in [
        json!("just-a-string"),
        json!({"sessionId": 42}),
        json!({"state": "x"}),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
            "params": {"_meta": {SESSION_KEY: session}}});
        let reply = h.post(&body).await;
        assert_eq!(reply.status, 400, "{session}");
        assert_eq!(reply.error_code(), Some(-32602), "{session}");
        assert_eq!(reply.json()["id"], 3);
    }
    let reply = h
        .post(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": 5}}))
        .await;
    assert_eq!(reply.error_code(), Some(-32602));
    h.stop().await;
}

#[tokio::test]
async fn wrong_paths_methods_and_origins_are_refused() {
    let h = Harness::start().await;
    let base = format!("http://{}", h.proxy.local_addr());
    let response = h
        .http
        .post(format!("{base}/other"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        -32600
    );
    let response = h.http.put(h.url()).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET, POST, DELETE");

    let mut evil = HeaderMap::new();
    evil.insert("origin", HeaderValue::from_static("https://evil.example"));
    let reply = post_json(
        &h.http,
        &h.url(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        &evil,
    )
    .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.error_code(), Some(-32600));
    assert!(h.upstream_saw("initialize").is_empty());
    let mut local = HeaderMap::new();
    local.insert("origin", HeaderValue::from_static("http://localhost:3000"));
    let reply = post_json(
        &h.http,
        &h.url(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        &local,
    )
    .await;
    assert_eq!(reply.status, 200);
    h.stop().await;
}

#[tokio::test]
async fn a_flood_of_garbage_leaves_the_proxy_serving() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let mut rng_state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300 {
        // xorshift: deterministic pseudo-random bytes, some of them JSON-looking.
        let len = (rng_state % 64) as usize;
        let mut body = Vec::with_capacity(len);
        for _ in 0..len {
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            body.push(b"{}[]\":,0123456789abcjsonrpcidmethod \n\\\xff"[(rng_state % 38) as usize]);
        }
        let reply = post_raw(&h.http, &h.url(), body, &HeaderMap::new()).await;
        assert!(
            reply.status >= 400 || reply.status == 200 || reply.status == 202,
            "{}",
            reply.status
        );
    }
    assert_eq!(c.tool_text("echo", json!({"msg": "alive"})).await, "alive");
    h.stop().await;
}
