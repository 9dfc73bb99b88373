//! Request ids: the proxy speaks its own ids to the upstream and gives every client its
//! own back, byte for byte — whatever the upstream does to ids (the strict demo server
//! parses them and writes them back its own way: `"\u00e9"` as `"é"`, `1E+2` as
//! `100.0`), on the data-layer session path and the stateless path, in JSON answers and
//! event streams; a client's `notifications/cancelled` reaches the upstream naming the
//! proxy's id; `_meta` a 2025-11-25 server would refuse the message for is the client's
//! error, not the upstream's; old clients passed through keep their ids untouched.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::assert::check_session_meta;
use common::*;
use mcp_session_proxy::demo::DemoOptions;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

/// Valid JSON-RPC ids that a peer parsing and re-writing them changes.
const UNUSUAL_IDS: [&str; 5] = [r#""\u00e9""#, r#""\/x""#, "1E+2", "-0", "1.0"];

/// The ids the upstream received for `tools/call`, in order.
fn upstream_call_ids(h: &Harness) -> Vec<Value> {
    h.upstream_saw("tools/call")
        .iter()
        .map(|r| r.body.as_ref().unwrap()["id"].clone())
        .collect()
}

/// Asserts the reply holds exactly one response, with `raw_id` as it was sent.
fn assert_answered_with(reply: &Reply, raw_id: &str, what: &str) -> Value {
    assert_eq!(reply.status, 200, "{what} {raw_id}: {}", reply.text);
    assert_eq!(
        response_ids(reply),
        vec![raw_id.to_owned()],
        "{what}: the response carries the client's id byte for byte: {}",
        reply.text
    );
    final_message(reply)
}

#[tokio::test]
async fn unusual_ids_come_back_byte_for_byte_in_a_session() {
    for always_sse in [false, true] {
        let h = Harness::start_with(
            DemoOptions {
                always_sse,
                ..DemoOptions::default()
            },
            |_| {},
        )
        .await;
        let mut c = h.client();
        c.create().await;
        let session = c.session_id().to_owned();
        for raw_id in UNUSUAL_IDS {
            // A JSON answer (or one event, `always_sse`), then a stream with progress
            // before the response, then that stream to a client taking only JSON.
            let calls = [
                (
                    json!({"name": "echo", "arguments": {"msg": "x"}}),
                    ACCEPT_BOTH,
                ),
                (
                    json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 1},
                           "_meta": {"progressToken": "p"}}),
                    ACCEPT_BOTH,
                ),
                (
                    json!({"name": "slow", "arguments": {"steps": 1, "interval_ms": 1}}),
                    "application/json",
                ),
            ];
            for (params, accept) in calls {
                let params = in_session(params, &session, c.state.as_deref());
                let mut headers = session_header(&session);
                headers.insert("accept", HeaderValue::from_static(accept));
                let reply = post_raw(
                    &h.http,
                    &h.url(),
                    raw_request(raw_id, "tools/call", &params),
                    &headers,
                )
                .await;
                let what = format!("sse={always_sse} accept={accept}");
                let answer = assert_answered_with(&reply, raw_id, &what);
                assert!(answer.get("result").is_some(), "{what}: {answer}");
                c.state = Some(check_session_meta(&answer, &session));
            }
        }
        // The upstream saw only the proxy's ids: integers, never the same twice.
        let ids = upstream_call_ids(&h);
        assert_eq!(ids.len(), 3 * UNUSUAL_IDS.len());
        assert!(ids.iter().all(Value::is_u64), "{ids:?}");
        let mut distinct = ids.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
        h.stop().await;
    }
}

#[tokio::test]
async fn unusual_ids_come_back_byte_for_byte_to_stateless_clients() {
    let h = Harness::start().await;
    let c = StatelessClient::new(h.url());
    for raw_id in UNUSUAL_IDS {
        for params in [
            json!({"name": "echo", "arguments": {"msg": "x"}}),
            json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 1},
                   "_meta": {"progressToken": 5}}),
        ] {
            let params = c.params(params);
            let headers = StatelessClient::headers("tools/call", &params);
            let reply = post_raw(
                &h.http,
                &h.url(),
                raw_request(raw_id, "tools/call", &params),
                &headers,
            )
            .await;
            let answer = assert_answered_with(&reply, raw_id, "stateless");
            assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
        }
    }
    let ids = upstream_call_ids(&h);
    assert!(ids.iter().all(Value::is_u64), "{ids:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_clients_cancellation_reaches_the_upstream_with_the_proxys_id() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let session = c.session_id().to_owned();
    let raw_id = r#""\u00e9""#;
    let params = in_session(
        json!({"name": "sleep", "arguments": {"ms": 1500}}),
        &session,
        c.state.as_deref(),
    );
    let (url, headers) = (h.url(), session_header(&session));
    let call = post_raw(
        &h.http,
        &url,
        raw_request(raw_id, "tools/call", &params),
        &headers,
    );
    let cancel = async {
        assert!(
            eventually(Duration::from_secs(5), || !upstream_call_ids(&h).is_empty()).await,
            "the call never reached the upstream"
        );
        // The client names its request as it wrote it.
        let body = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{raw_id},"reason":"changed my mind","_meta":{{"{SESSION_KEY}":{{"sessionId":"{session}"}}}}}}}}"#
        );
        post_raw(
            &h.http,
            &h.url(),
            body.into_bytes(),
            &session_header(&session),
        )
        .await
    };
    let (_answer, cancelled) = tokio::join!(call, cancel);
    assert_eq!(cancelled.status, 202, "{}", cancelled.text);
    let proxy_id = upstream_call_ids(&h)[0].clone();
    assert!(proxy_id.is_u64(), "{proxy_id}");
    let seen = h.upstream_saw("notifications/cancelled");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body.as_ref().unwrap()["params"],
        json!({"requestId": proxy_id, "reason": "changed my mind"}),
        "the upstream hears which of its requests is off, by the id it knows"
    );
    h.stop().await;
}

#[tokio::test]
async fn the_proxys_own_cancellation_names_the_proxys_id() {
    // A stateless call waiting for its client's input, abandoned: the proxy tells the
    // upstream, by the id the upstream knows.
    let h = Harness::with_config(|c| c.stateless.request_state_ttl = Duration::from_secs(1)).await;
    let mut c = StatelessClient::new(h.url()).with_capabilities(json!({"sampling": {}}));
    let first = c
        .request(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "late"}}),
        )
        .await
        .json();
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert!(
        eventually(Duration::from_secs(5), || h
            .upstream_saw("notifications/cancelled")
            .len()
            == 1)
        .await,
        "the waiting upstream call was never cancelled"
    );
    let proxy_id = upstream_call_ids(&h)[0].clone();
    let cancelled = &h.upstream_saw("notifications/cancelled")[0];
    assert_eq!(
        cancelled.body.as_ref().unwrap()["params"]["requestId"],
        proxy_id
    );
    h.stop().await;
}

#[tokio::test]
async fn malformed_progress_tokens_are_the_clients_error() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let session = c.session_id().to_owned();
    let stateless = StatelessClient::new(h.url());
    let cases = [
        (json!({"progressToken": null}), "_meta.progressToken"),
        (json!({"progressToken": {"a": 1}}), "_meta.progressToken"),
        (json!({"progressToken": true}), "_meta.progressToken"),
        (
            json!({"io.modelcontextprotocol/related-task": {"taskId": 1}}),
            "_meta.io.modelcontextprotocol/related-task",
        ),
    ];
    for (meta, key) in cases {
        let call = json!({"name": "echo", "arguments": {"msg": "x"}, "_meta": meta});
        let in_session_params = in_session(call.clone(), &session, c.state.as_deref());
        let stateless_params = stateless.params(call);
        let replies = [
            (
                "session",
                post_raw(
                    &h.http,
                    &h.url(),
                    raw_request(r#""m-1""#, "tools/call", &in_session_params),
                    &session_header(&session),
                )
                .await,
            ),
            (
                "stateless",
                post_raw(
                    &h.http,
                    &h.url(),
                    raw_request(r#""m-1""#, "tools/call", &stateless_params),
                    &StatelessClient::headers("tools/call", &stateless_params),
                )
                .await,
            ),
        ];
        for (path, reply) in replies {
            assert_eq!(reply.status, 400, "{path} {meta}: {}", reply.text);
            let error = reply.json();
            assert_eq!(error["error"]["code"], -32602, "{path}: {error}");
            assert_eq!(error["error"]["data"]["key"], key, "{path}: {error}");
            assert!(
                error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(key.trim_start_matches("_meta.")),
                "the message names the key: {error}"
            );
            assert_eq!(response_ids(&reply), vec![r#""m-1""#.to_owned()]);
        }
    }
    assert!(
        upstream_call_ids(&h).is_empty(),
        "nothing malformed reached the upstream"
    );
    h.stop().await;
}

#[tokio::test]
async fn old_clients_ids_pass_through_untouched() {
    let h = Harness::start().await;
    let old = LegacyClient::connect(h.url(), "2025-11-25").await;
    let params = json!({"name": "echo", "arguments": {"msg": "x"}});
    let reply = post_raw(
        &h.http,
        &h.url(),
        raw_request(r#""\u00e9""#, "tools/call", &params),
        &old.headers(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // The upstream got the client's own id, and its answer came back as it wrote it
    // (the demo server writes `"\u00e9"` as `"é"`): the proxy changed nothing.
    assert_eq!(upstream_call_ids(&h), vec![json!("é")]);
    assert_eq!(response_ids(&reply), vec!["\"é\"".to_owned()]);
    h.stop().await;
}
