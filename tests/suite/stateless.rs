//! Stateless clients (MCP 2026-07-28, which released SEP-2575 "Make MCP Stateless") in
//! front of the strict legacy (2025-11-25) demo server: validation, `server/discover`,
//! pooled upstream sessions (`stateless.affinity = "shared"`), multi-round-trip requests
//! (SEP-2322), `subscriptions/listen`. The other affinities: `affinity.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::*;
use mcp_session_proxy::config::Affinity;
use mcp_session_proxy::demo::DemoOptions;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

/// The proxy with `stateless.affinity = "shared"`: the pool these tests are about.
async fn shared(configure: impl FnOnce(&mut mcp_session_proxy::config::Config)) -> Harness {
    Harness::with_config(|c| {
        c.stateless.affinity = Affinity::Shared;
        configure(c);
    })
    .await
}

#[tokio::test]
async fn discover_answers_from_the_upstreams_initialize_result() {
    let h = Harness::start().await;
    let reply = h
        .stateless_client()
        .request("server/discover", json!({}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let result = &reply.json()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(
        result["capabilities"]["tools"],
        json!({"listChanged": true})
    );
    assert_eq!(result["capabilities"]["sessions"], json!({}));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    assert!(result["ttlMs"].as_u64().unwrap() > 0);
    assert!(matches!(
        result["cacheScope"].as_str(),
        Some("public" | "private")
    ));
    assert!(result["instructions"].is_string());
    h.stop().await;
}

#[tokio::test]
async fn results_carry_result_type_caching_hints_and_server_info() {
    let h = Harness::start().await;
    let mut c = h.stateless_client();
    let list = c.request("tools/list", json!({})).await.json();
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["ttlMs"], 0);
    assert_eq!(list["result"]["cacheScope"], "private");
    assert!(list["result"]["tools"].as_array().unwrap().len() >= 5);
    let call = c.call_tool("echo", json!({"msg": "hi"})).await;
    assert_eq!(call["result"]["content"][0]["text"], "hi");
    assert_eq!(call["result"]["resultType"], "complete");
    assert!(call["result"].get("ttlMs").is_none());
    assert_eq!(
        call["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-session-proxy-demo"
    );
    // The legacy server never saw 2026 _meta.
    for seen in h.upstream_saw("tools/call") {
        assert!(seen.body.unwrap()["params"].get("_meta").is_none());
    }
    h.stop().await;
}

#[tokio::test]
async fn calls_share_pooled_upstream_sessions_by_capabilities() {
    let h = shared(|_| {}).await;
    let mut plain = h.stateless_client();
    for _ in 0..3 {
        plain.request("tools/list", json!({})).await;
    }
    assert_eq!(
        h.upstream_saw("initialize").len(),
        1,
        "one pooled session serves calls one after another"
    );
    let mut sampler = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    sampler.request("tools/list", json!({})).await;
    let inits = h.upstream_saw("initialize");
    assert_eq!(
        inits.len(),
        2,
        "other capabilities, another upstream session"
    );
    assert_eq!(
        inits[1].body.as_ref().unwrap()["params"]["capabilities"],
        json!({"sampling": {}})
    );
    // The pool asked each session for every log level, to filter per request.
    assert_eq!(h.upstream_saw("logging/setLevel").len(), 2);
    h.stop().await;
}

/// The conformance suite's order: header, _meta, header vs _meta, version, method.
#[tokio::test]
async fn bad_requests_are_refused_with_2026_codes_and_statuses() {
    let h = Harness::start().await;
    let c = h.stateless_client();
    let meta = c.params(json!({}));
    let send = |method: &'static str, params: Value, headers: HeaderMap, id: u64| {
        let (http, url) = (c.http.clone(), c.url.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            post_json(&http, &url, &body, &headers).await
        }
    };
    let std_headers = |method: &'static str| StatelessClient::headers(method, &json!({}));

    let missing = send(
        "server/discover",
        json!({}),
        std_headers("server/discover"),
        101,
    )
    .await;
    assert_eq!(
        (missing.status, missing.error_code()),
        (400, Some(-32602)),
        "{}",
        missing.text
    );
    assert_eq!(missing.json()["id"], 101);

    let mut no_version = std_headers("tools/list");
    no_version.remove("mcp-protocol-version");
    let r = send("tools/list", meta.clone(), no_version, 102).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));

    let mut other = meta.clone();
    other["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let r = send(
        "server/discover",
        other.clone(),
        std_headers("server/discover"),
        302,
    )
    .await;
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some(-32020)),
        "header mismatch comes first"
    );

    let mut v999 = std_headers("server/discover");
    v999.insert("mcp-protocol-version", HeaderValue::from_static("v999.0.0"));
    let r = send("server/discover", other, v999, 301).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32022)));
    assert_eq!(
        r.json()["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "v999.0.0"})
    );
    assert_eq!(r.json()["id"], 301);

    let mut wrong_method = std_headers("tools/list");
    wrong_method.insert("mcp-method", HeaderValue::from_static("prompts/list"));
    let r = send("tools/list", meta.clone(), wrong_method, 5).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));

    let call = c.params(json!({"name": "echo", "arguments": {"msg": "x"}}));
    let mut wrong_name = StatelessClient::headers("tools/call", &call);
    wrong_name.insert("mcp-name", HeaderValue::from_static("other"));
    let r = send("tools/call", call, wrong_name, 6).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));

    for (method, id) in [
        ("initialize", 500u64),
        ("ping", 501),
        ("logging/setLevel", 502),
        ("resources/subscribe", 503),
        ("resources/unsubscribe", 504),
        ("unknown/method", 601),
    ] {
        let r = send(method, meta.clone(), std_headers(method), id).await;
        assert_eq!((r.status, r.error_code()), (404, Some(-32601)), "{method}");
        assert_eq!(r.json()["id"], id);
    }
    assert!(h.upstream_saw("ping").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn log_notifications_follow_the_requests_log_level() {
    let h = Harness::start().await;
    let count_logs = |reply: &Reply| {
        reply
            .events()
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    let mut quiet = h.stateless_client();
    let reply = quiet
        .request("tools/call", json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 20}, "_meta": {"progressToken": "p"}}))
        .await;
    let final_message = final_message(&reply);
    assert_eq!(
        final_message["result"]["content"][0]["text"],
        "done after 2 steps"
    );
    let progress = reply
        .events()
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 2, "progress still flows");
    assert_eq!(count_logs(&reply), 0, "no logLevel, no logs");

    let mut info = h.stateless_client();
    info.log_level = Some("info");
    let reply = info
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 20}}),
        )
        .await;
    assert_eq!(count_logs(&reply), 2, "info logs at level info");

    let mut errors_only = h.stateless_client();
    errors_only.log_level = Some("error");
    let reply = errors_only
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 20}}),
        )
        .await;
    assert_eq!(count_logs(&reply), 0, "info logs are below level error");
    h.stop().await;
}

#[tokio::test]
async fn an_upstream_request_becomes_input_required_and_the_retry_completes_the_call() {
    let h = Harness::start().await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    let first = c
        .request(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "Say cheese"}}),
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    let result = first.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required");
    let request = &result["inputRequests"]["sample-1"];
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"],
        "Say cheese"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    // The upstream call is waiting, not finished.
    assert!(h.upstream_saw("tools/call").len() == 1);

    let retry = json!({"name": "sample", "arguments": {"prompt": "Say cheese"},
        "inputResponses": {"sample-1": {"role": "assistant", "content": {"type": "text", "text": "cheese"}, "model": "m"}},
        "requestState": state});
    let second = c.request("tools/call", retry.clone()).await;
    assert_eq!(second.status, 200, "{}", second.text);
    let done = second.json();
    assert_eq!(done["id"], 2, "the retry's id");
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "the client said: cheese"
    );
    // The upstream got the client's answer as a response to its own request.
    let answers: Vec<_> = h
        .upstream_posts()
        .into_iter()
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["id"] == "sample-1" && b.get("result").is_some())
        })
        .collect();
    assert_eq!(answers.len(), 1);
    // requestState is single-use.
    let again = c.request("tools/call", retry).await;
    assert_eq!((again.status, again.error_code()), (400, Some(-32602)));
    h.stop().await;
}

#[tokio::test]
async fn a_tampered_or_misapplied_request_state_is_refused() {
    let h = Harness::start().await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    let first = c.call_tool("sample", json!({"prompt": "a"})).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"sample-1": {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}});
    let tampered = c
        .request("tools/call", json!({"name": "sample", "arguments": {"prompt": "a"}, "inputResponses": answer, "requestState": format!("{state}-TAMPERED")}))
        .await;
    assert_eq!(
        (tampered.status, tampered.error_code()),
        (400, Some(-32602))
    );
    let other_params = c
        .request("tools/call", json!({"name": "sample", "arguments": {"prompt": "b"}, "inputResponses": answer, "requestState": state}))
        .await;
    assert_eq!(
        (other_params.status, other_params.error_code()),
        (400, Some(-32602))
    );
    // Another caller (Authorization) cannot use it either.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": c.params(json!({"name": "sample", "arguments": {"prompt": "a"}, "inputResponses": answer, "requestState": state}))});
    let mut headers = StatelessClient::headers("tools/call", &body["params"]);
    headers.insert(
        "authorization",
        HeaderValue::from_static("Bearer someone-else"),
    );
    let stolen = post_json(&c.http, &c.url, &body, &headers).await;
    assert_eq!((stolen.status, stolen.error_code()), (400, Some(-32602)));
    // Nor one told apart by its other credentials (the caller every session and pooled
    // session is bound to), not only by its Authorization.
    for (name, value) in [("cookie", "sid=someone-else"), ("x-api-key", "k")] {
        let mut headers = StatelessClient::headers("tools/call", &body["params"]);
        headers.insert(name, HeaderValue::from_static(value));
        let stolen = post_json(&c.http, &c.url, &body, &headers).await;
        assert_eq!(
            (stolen.status, stolen.error_code()),
            (400, Some(-32602)),
            "{name}: {}",
            stolen.text
        );
    }
    // The rightful retry still works: the refusals did not use the state up.
    let ok = c
        .request("tools/call", json!({"name": "sample", "arguments": {"prompt": "a"}, "inputResponses": answer, "requestState": state}))
        .await
        .json();
    assert_eq!(ok["result"]["content"][0]["text"], "the client said: x");
    h.stop().await;
}

#[tokio::test]
async fn an_undeclared_capability_is_refused_upstream_and_reported_as_32021() {
    let h = Harness::start().await;
    let mut c = h.stateless_client();
    let reply = c
        .request(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "a"}}),
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32021);
    assert_eq!(
        error["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // The upstream's request was answered with an error by the proxy.
    let refused = || {
        h.upstream_posts().iter().any(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["id"] == "sample-1" && b.get("error").is_some())
        })
    };
    assert!(eventually(Duration::from_secs(2), refused).await);
    h.stop().await;
}

#[tokio::test]
async fn invalid_input_responses_are_invalid_params() {
    let h = Harness::start().await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    for bad in [json!(12345), json!(null), json!({"k": 5})] {
        let reply = c
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"msg": "x"}, "inputResponses": bad}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, Some(-32602)),
            "{bad}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn input_responses_given_up_front_answer_the_upstream_at_once() {
    let h = Harness::start().await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    let reply = c
        .request("tools/call", json!({"name": "sample", "arguments": {"prompt": "a"},
            "inputResponses": {"sample-1": {"role": "assistant", "content": {"type": "text", "text": "early"}, "model": "m"}, "unused": {"x": 1}}}))
        .await;
    assert_eq!(
        final_message(&reply)["result"]["content"][0]["text"],
        "the client said: early"
    );
    h.stop().await;
}

#[tokio::test]
async fn listen_acknowledges_then_delivers_only_opted_in_notifications_tagged() {
    let h = Harness::start().await;
    let mut listener = h.stateless_client();
    let response = listener
        .send(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut stream = EventReader::new(response);
    let ack = stream.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    // The demo server has tools.listChanged, not prompts: only tools is honoured.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        1
    );
    let mut trigger = h.stateless_client();
    trigger.call_tool("change_tools", json!({})).await;
    let change = stream.next().await.unwrap();
    assert_eq!(change["method"], "notifications/tools/list_changed");
    assert_eq!(
        change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        1
    );

    // A stream that did not opt in gets no tools notification (nor the demo's logs).
    let mut other = h.stateless_client();
    let response = other
        .send(
            "subscriptions/listen",
            json!({"notifications": {"promptsListChanged": true}}),
        )
        .await;
    let mut narrow = EventReader::new(response);
    assert_eq!(
        narrow.next().await.unwrap()["params"]["notifications"],
        json!({})
    );
    trigger.call_tool("change_tools", json!({})).await;
    let leaked = tokio::time::timeout(Duration::from_millis(400), narrow.next()).await;
    assert!(leaked.is_err(), "a tools notification leaked: {leaked:?}");

    // Closing the stream ends its upstream session.
    let before = h.demo.live_sessions();
    drop(stream);
    drop(narrow);
    assert!(
        eventually(Duration::from_secs(3), || h.demo.live_sessions()
            <= before - 2)
        .await
    );
    h.stop().await;
}

/// `subscriptions/listen` with `taskIds` (2026-07-28 tasks extension): the caller's
/// tasks are told as `notifications/tasks` (the whole task, first as it is), until the
/// last one ends — then a stream that asked for nothing else ends too.
#[tokio::test]
async fn listen_tells_a_tasks_changes_until_it_ends() {
    let h =
        Harness::with_config(|c| c.stateless.task_after = Some(Duration::from_millis(200))).await;
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mut caller = h.stateless_client().with_capabilities(caps.clone());
    let created = caller
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 3, "interval_ms": 300}}),
        )
        .await;
    let result = &created.json()["result"];
    assert_eq!(result["resultType"], "task", "{}", created.text);
    let id = result["taskId"].as_str().unwrap().to_owned();

    let mut listener = h.stateless_client().with_capabilities(caps);
    let response = listener
        .send(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [id, "made-up"]}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut stream = EventReader::new(response);
    let ack = stream.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"taskIds": [id]}),
        "only the caller's own, known task"
    );
    let mut statuses = Vec::new();
    loop {
        let Some(told) = stream.next().await else {
            break;
        };
        assert_eq!(told["method"], "notifications/tasks", "{told}");
        let params = &told["params"];
        assert_eq!(params["taskId"], id.as_str());
        assert_eq!(params["_meta"]["io.modelcontextprotocol/subscriptionId"], 1);
        assert!(params.get("resultType").is_none(), "{told}");
        statuses.push(params["status"].as_str().unwrap().to_owned());
        if params["status"] == "completed" {
            assert_eq!(params["result"]["content"][0]["text"], "done after 3 steps");
        }
    }
    assert_eq!(statuses.first().map(String::as_str), Some("working"));
    assert_eq!(statuses.last().map(String::as_str), Some("completed"));

    // A client without the extension watches nothing: its stream says so and ends.
    let response = h
        .stateless_client()
        .send(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [id]}}),
        )
        .await;
    let mut stream = EventReader::new(response);
    assert_eq!(
        stream.next().await.unwrap()["params"]["notifications"],
        json!({})
    );
    assert_eq!(stream.next().await, None);
    h.stop().await;
}

/// A 2026-07-28 client in a data-layer session gets tasks in it as a stateless client
/// does: its long call becomes a task on the session's own upstream session, a question
/// asked at once is an `input_required` round, and every answer carries the session.
#[tokio::test]
async fn a_client_in_a_data_layer_session_gets_tasks_in_it() {
    let h =
        Harness::with_config(|c| c.stateless.task_after = Some(Duration::from_millis(200))).await;
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "sampling": {}});
    let mut c = h.stateless_client().with_capabilities(caps);
    let created = c.request("sessions/create", json!({})).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let session = &created.json()["result"]["session"];
    let session_id = session["sessionId"].as_str().unwrap().to_owned();
    let mut state = session["state"].as_str().unwrap().to_owned();
    // Every answer carries the session, renewed; returns the message and takes the state.
    let mut ask = async |c: &mut StatelessClient, method: &str, params: Value| {
        let reply = c
            .request(method, in_session(params, &session_id, Some(&state)))
            .await;
        let message = final_message(&reply);
        if reply.status == 200 {
            let meta = session_meta(&message);
            assert_eq!(meta["sessionId"], session_id.as_str(), "{}", reply.text);
            state = meta["state"].as_str().unwrap().to_owned();
        }
        (reply.status, message)
    };

    // A call that answers at once is answered directly, in the session.
    let (status, message) = ask(&mut c, "tools/call", json!({"name": "counter"})).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["result"]["content"][0]["text"], "1");
    assert_eq!(message["result"]["resultType"], "complete");

    // A long one becomes a task, polled in the session to its end.
    let slow = json!({"name": "slow", "arguments": {"steps": 3, "interval_ms": 300}});
    let (status, message) = ask(&mut c, "tools/call", slow).await;
    assert_eq!(status, 200, "{message}");
    let task = &message["result"];
    assert_eq!(task["resultType"], "task", "{message}");
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    let get = json!({"taskId": task_id});
    let done = loop {
        let (status, message) = ask(&mut c, "tasks/get", get.clone()).await;
        assert_eq!(status, 200, "{message}");
        match message["result"]["status"].as_str() {
            Some("working") => tokio::time::sleep(Duration::from_millis(100)).await,
            _ => break message,
        }
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["content"][0]["text"],
        "done after 3 steps"
    );
    // It ran on the session's upstream session: the one a request the session path
    // relays (tools/list) uses.
    let (status, _) = ask(&mut c, "tools/list", json!({})).await;
    assert_eq!(status, 200);
    let session_of = |method: &str| -> Vec<Option<String>> {
        h.upstream_saw(method)
            .into_iter()
            .map(|r| r.session_id)
            .collect()
    };
    let listed = session_of("tools/list");
    let relayed = listed.last().cloned().flatten();
    assert!(relayed.is_some(), "{listed:?}");
    let calls = session_of("tools/call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls.iter().all(|s| *s == relayed),
        "{calls:?} vs {relayed:?}"
    );
    let (_, message) = ask(&mut c, "tools/call", json!({"name": "counter"})).await;
    assert_eq!(message["result"]["content"][0]["text"], "2");

    // A running task: the session is checked before the task is touched — a cancel with
    // a state not issued for it is refused, and the task goes on — then it is cancelled
    // in the session.
    let long = json!({"name": "slow", "arguments": {"steps": 50, "interval_ms": 200}});
    let (_, message) = ask(&mut c, "tools/call", long).await;
    let running = json!({"taskId": message["result"]["taskId"]});
    assert_eq!(message["result"]["resultType"], "task", "{message}");
    let forged = c
        .request(
            "tasks/cancel",
            in_session(running.clone(), &session_id, Some("forged")),
        )
        .await;
    assert_eq!(forged.status, 400, "{}", forged.text);
    let (_, message) = ask(&mut c, "tasks/get", running.clone()).await;
    assert_eq!(message["result"]["status"], "working", "{message}");
    let (status, message) = ask(&mut c, "tasks/cancel", running.clone()).await;
    assert_eq!(status, 200, "{message}");
    let (_, message) = ask(&mut c, "tasks/get", running).await;
    assert_eq!(message["result"]["status"], "cancelled", "{message}");

    // A question the tool asks at once is a round before any task, retried in the session.
    let sample = json!({"name": "sample", "arguments": {"prompt": "Say cheese"}});
    let (status, message) = ask(&mut c, "tools/call", sample.clone()).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        message["result"]["resultType"], "input_required",
        "{message}"
    );
    let mut retry = sample;
    retry["inputResponses"] = json!({"sample-1": {"role": "assistant",
        "content": {"type": "text", "text": "cheese"}, "model": "m"}});
    retry["requestState"] = message["result"]["requestState"].clone();
    let (status, message) = ask(&mut c, "tools/call", retry).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        message["result"]["content"][0]["text"],
        "the client said: cheese"
    );

    // The task is its caller's: another caller, in a session of its own, does not find it.
    let mut other = h
        .stateless_client()
        .with_header("authorization", "Bearer someone-else")
        .with_capabilities(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
    let theirs = other.request("sessions/create", json!({})).await;
    let their_id = theirs.json()["result"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = other
        .request("tasks/get", in_session(get.clone(), &their_id, None))
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, Some(-32602)));

    // A client in a session that did not declare the extension gets no task, and no
    // task requests.
    let mut plain = h.stateless_client();
    let plain_session = plain.request("sessions/create", json!({})).await;
    let plain_id = plain_session.json()["result"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let slow = json!({"name": "slow", "arguments": {"steps": 2, "interval_ms": 200}});
    let reply = plain
        .request("tools/call", in_session(slow, &plain_id, None))
        .await;
    let message = final_message(&reply);
    assert_eq!(
        message["result"]["content"][0]["text"],
        "done after 2 steps"
    );
    assert_eq!(session_meta(&message)["sessionId"], plain_id.as_str());
    let reply = plain
        .request("tasks/get", in_session(get, &plain_id, None))
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, Some(-32021)));
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_upstream_is_invisible_to_stateless_clients() {
    let h = shared(|_| {}).await;
    let mut c = h.stateless_client();
    assert_eq!(c.request("tools/list", json!({})).await.status, 200);
    h.demo.forget_sessions();
    let reply = c
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"msg": "again"}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["result"]["content"][0]["text"], "again");
    h.stop().await;
}

#[tokio::test]
async fn a_2026_client_opens_uses_and_ends_a_data_layer_session() {
    // `server/discover` advertises `sessions: {}`; a 2026-07-28 client that takes it up
    // sends `sessions/create` with its per-request `_meta`, then works inside the session.
    let h = Harness::start().await;
    let mut c = h.stateless_client();
    let created = c.request("sessions/create", json!({})).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let result = &created.json()["result"];
    assert_eq!(result["resultType"], "complete");
    let session_id = result["session"]["sessionId"].as_str().unwrap().to_owned();
    let mut state = result["session"]["state"].as_str().unwrap().to_owned();
    assert_eq!(created.header("mcp-session-id"), Some(session_id.as_str()));
    let init = h.upstream_saw("initialize");
    assert_eq!(init.len(), 1);
    assert_eq!(
        init[0].body.as_ref().unwrap()["params"]["clientInfo"]["name"],
        "stateless-test",
        "the upstream learns the client from the create's _meta"
    );

    // The counter proves one upstream session, not the stateless pool.
    for expected in ["1", "2"] {
        let reply = c
            .request(
                "tools/call",
                in_session(
                    json!({"name": "counter", "arguments": {}}),
                    &session_id,
                    Some(&state),
                ),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let message = final_message(&reply);
        assert_eq!(
            message["result"]["content"][0]["text"], expected,
            "{message}"
        );
        assert_eq!(message["result"]["resultType"], "complete");
        let meta = session_meta(&message);
        assert_eq!(meta["sessionId"], session_id.as_str());
        state = meta["state"].as_str().unwrap().to_owned();
    }
    assert_eq!(
        h.upstream_saw("initialize").len(),
        1,
        "no pooled connection"
    );

    let deleted = c
        .request(
            "sessions/delete",
            in_session(json!({}), &session_id, Some(&state)),
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(h.proxy.live_sessions(), 0);
    h.stop().await;
}

/// A stateless `tools/list` with an `Authorization` header; returns the answer.
async fn list_as(h: &Harness, c: &StatelessClient, authorization: &str) -> Reply {
    let params = c.params(json!({}));
    let mut headers = StatelessClient::headers("tools/list", &params);
    headers.insert(
        "authorization",
        HeaderValue::from_str(authorization).unwrap(),
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
    post_json(&c.http, &h.url(), &body, &headers).await
}

#[tokio::test]
async fn pooled_upstream_sessions_are_never_shared_between_callers() {
    let h = shared(|_| {}).await;
    let c = h.stateless_client();
    for who in ["Bearer alice", "Bearer bob", "Bearer alice"] {
        let reply = list_as(&h, &c, who).await;
        assert_eq!(reply.status, 200, "{who}: {}", reply.text);
    }
    assert_eq!(
        h.upstream_saw("initialize").len(),
        2,
        "one upstream session per caller"
    );
    let used: Vec<Option<String>> = h
        .upstream_saw("tools/list")
        .into_iter()
        .map(|r| r.session_id)
        .collect();
    assert_eq!(used.len(), 3);
    assert_eq!(used[0], used[2], "alice's calls share her pooled session");
    assert_ne!(used[0], used[1], "bob never gets alice's session");
    h.stop().await;
}

#[tokio::test]
async fn a_full_pool_makes_room_by_ending_its_longest_idle_session() {
    let h = shared(|c| c.stateless.max_pooled = 1).await;
    let mut plain = h.stateless_client();
    let mut sampler = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    for round in 0..2 {
        for c in [&mut plain, &mut sampler] {
            let reply = c.request("tools/list", json!({})).await;
            assert_eq!(reply.status, 200, "round {round}: {}", reply.text);
        }
    }
    assert_eq!(
        h.upstream_saw("initialize").len(),
        4,
        "each call had to evict the other capability set's session"
    );
    assert!(
        eventually(Duration::from_secs(3), || h.demo.live_sessions() == 1).await,
        "never more than max_pooled upstream sessions: {} open",
        h.demo.live_sessions()
    );
    h.stop().await;
}

#[tokio::test]
async fn idle_pooled_sessions_are_ended_upstream() {
    let h = shared(|c| c.stateless.pool_idle_ttl = Duration::from_secs(1)).await;
    let reply = h.stateless_client().request("tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(h.demo.live_sessions(), 1);
    assert!(
        eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await,
        "the idle pooled session was not ended"
    );
    assert_eq!(
        h.upstream_saw("initialize").len(),
        1,
        "nothing reopened it meanwhile"
    );
    h.stop().await;
}

#[tokio::test]
async fn listen_promises_nothing_when_the_upstream_has_no_notification_stream() {
    let h = Harness::start_with(
        DemoOptions {
            no_get_stream: true,
            ..DemoOptions::default()
        },
        |_| {},
    )
    .await;
    let response = h
        .stateless_client()
        .send(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut stream = EventReader::new(response);
    let ack = stream.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({}),
        "the upstream answered GET 405: it cannot deliver list changes"
    );
    h.stop().await;
}

#[tokio::test]
async fn listen_streams_are_capped() {
    let h = Harness::with_config(|c| c.stateless.max_listens = 1).await;
    let params = json!({"notifications": {"toolsListChanged": true}});
    let first = h
        .stateless_client()
        .send("subscriptions/listen", params.clone())
        .await;
    assert_eq!(first.status(), 200);
    let mut first = EventReader::new(first);
    first.next().await.unwrap();
    let second = h
        .stateless_client()
        .request("subscriptions/listen", params.clone())
        .await;
    assert_eq!(second.status, 503, "{}", second.text);
    assert_eq!(second.error_code(), Some(-32603));
    assert!(second.text.contains("max_listens"), "{}", second.text);
    // Closing the first stream frees its place.
    drop(first);
    let mut freed = false;
    for _ in 0..30 {
        let again = h
            .stateless_client()
            .send("subscriptions/listen", params.clone())
            .await;
        if again.status() == 200 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "the closed stream's place was never freed");
    h.stop().await;
}

#[tokio::test]
async fn an_expired_request_state_is_refused_and_the_waiting_upstream_call_is_cancelled() {
    let h = Harness::with_config(|c| c.stateless.request_state_ttl = Duration::from_secs(1)).await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    let first = c.call_tool("sample", json!({"prompt": "late"})).await;
    assert_eq!(first["result"]["resultType"], "input_required");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert_eq!(h.demo.live_sessions(), 1);

    // Nobody came back in time: the upstream hears the call is off and its session ends.
    assert!(
        eventually(Duration::from_secs(5), || h
            .upstream_saw("notifications/cancelled")
            .len()
            == 1)
        .await,
        "the waiting upstream call was never cancelled"
    );
    assert!(
        eventually(Duration::from_secs(5), || h.demo.live_sessions() == 0).await,
        "the pooled session held by the call was not ended"
    );

    let answer = json!({"sample-1": {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}});
    let late = c
        .request(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "late"}, "inputResponses": answer, "requestState": state}),
        )
        .await;
    assert_eq!(
        (late.status, late.error_code()),
        (400, Some(-32602)),
        "{}",
        late.text
    );
    assert!(late.text.contains("expired"), "{}", late.text);
    assert_eq!(late.json()["error"]["data"]["key"], "requestState");
    h.stop().await;
}

#[tokio::test]
async fn an_upstream_answering_what_is_not_the_response_is_a_clear_502() {
    let rogue = common::rogue::Rogue::start().await;
    let proxy = mcp_session_proxy::start(config_for(&rogue.url()))
        .await
        .unwrap();
    let mut c = StatelessClient::new(proxy.url());
    for (n, (tool, says)) in [
        ("not-json", "a body that is not JSON"),
        ("html", "a body of type \"text/html\""),
        ("array", "a JSON array (a batch)"),
        ("wrong-id", "the response to id \"not-"),
    ]
    .into_iter()
    .enumerate()
    {
        let reply = c
            .request("tools/call", json!({"name": tool, "arguments": {}}))
            .await;
        assert_eq!(reply.status, 502, "{tool}: {}", reply.text);
        let answer = reply.json();
        assert_eq!(answer["id"], n + 1, "{tool}: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], -32603, "{tool}: {answer}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&rogue.url()), "{tool}: {message}");
        assert!(message.contains(says), "{tool}: {message}");
        assert_eq!(error["data"]["id"], n + 1, "{tool}: {answer}");
    }
    let reply = c
        .request("tools/call", json!({"name": "fine", "arguments": {}}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["result"]["content"][0]["text"], "fine");
    proxy.shutdown().await;
}

// === what one stateless client can hold ===

/// Calls `sample`, which asks the client's model: the call waits for the answer.
async fn ask(c: &mut StatelessClient) -> Reply {
    c.request(
        "tools/call",
        json!({"name": "sample", "arguments": {"prompt": "?"}}),
    )
    .await
}

/// A proxy with the waiting bounds `max_per_caller` and `max_pooled`, and one caller with
/// `n` calls parked on `input_required`.
async fn parked(max_per_caller: usize, max_pooled: usize, n: usize) -> (Harness, StatelessClient) {
    let h = Harness::with_config(|c| {
        c.stateless.max_waiting_per_caller = max_per_caller;
        c.stateless.max_pooled = max_pooled;
    })
    .await;
    let mut c = h
        .stateless_client()
        .with_capabilities(json!({"sampling": {}}));
    for _ in 0..n {
        let reply = ask(&mut c).await;
        assert_eq!(
            reply.json()["result"]["resultType"],
            "input_required",
            "{}",
            reply.text
        );
    }
    (h, c)
}

/// Calls waiting for their client's input hold an upstream session for minutes: one
/// caller may have `stateless.max_waiting_per_caller` of them, and the pool's last
/// quarter never waits.
#[tokio::test]
async fn calls_waiting_for_input_are_bounded_per_caller_and_leave_the_pool_room() {
    // Per caller.
    let (h, mut c) = parked(2, 8, 2).await;
    let refused = ask(&mut c).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(
        refused.json()["error"]["data"]["limit"],
        "stateless.max_waiting_per_caller"
    );
    assert!(refused.headers.contains_key("retry-after"));
    h.stop().await;

    // In all: a pool of 4 lets 3 wait, and keeps the fourth place for a call that runs.
    let (h, mut c) = parked(0, 4, 3).await;
    let refused = ask(&mut c).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(
        refused.json()["error"]["data"]["limit"],
        "stateless.max_pooled"
    );
    // The refused call gives its place back as its session ends: a call that runs is
    // served.
    let served = eventually_async(Duration::from_secs(3), || {
        let mut c = h.stateless_client();
        async move {
            let reply = c
                .request(
                    "tools/call",
                    json!({"name": "echo", "arguments": {"msg": "hi"}}),
                )
                .await;
            reply.status == 200
        }
    })
    .await;
    assert!(served, "the pool's last place serves a call that runs");
    h.stop().await;
}

/// A stateless call whose client leaves before the (JSON) answer: its upstream session is
/// ended at once (a 2025-11-25 server stops the session's work), not held until the
/// upstream answers — and a pooled one is never handed to the next call.
#[tokio::test]
async fn a_client_leaving_before_its_answer_ends_the_calls_upstream_session() {
    for shared in [false, true] {
        let h = Harness::with_config(|c| {
            if shared {
                c.stateless.affinity = Affinity::Shared;
            }
        })
        .await;
        let c = h.stateless_client();
        let params = c.params(json!({"name": "sleep", "arguments": {"ms": 10_000}}));
        let mut headers = StatelessClient::headers("tools/call", &params);
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert(
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let gave_up = http_client()
            .post(h.url())
            .headers(headers)
            .timeout(Duration::from_millis(300))
            .body(body.to_string())
            .send()
            .await;
        assert!(gave_up.is_err(), "the call answers after 10 s");
        assert!(
            eventually(Duration::from_secs(3), || h.demo.live_sessions() == 0).await,
            "shared {shared}: the call's upstream session was ended"
        );
        h.stop().await;
    }
}

/// An upstream asking the client something every few milliseconds cannot keep it waiting:
/// the questions gathered into one `input_required` are gathered within a bound.
#[tokio::test]
async fn the_questions_are_gathered_within_a_bound_however_often_they_come() {
    let rogue = common::rogue::Rogue::start().await;
    let proxy = mcp_session_proxy::start(config_for(&rogue.url()))
        .await
        .unwrap();
    let mut c =
        common::StatelessClient::new(proxy.url()).with_capabilities(json!({"elicitation": {}}));
    let asked = std::time::Instant::now();
    let reply = c
        .request("tools/call", json!({"name": "nag", "arguments": {}}))
        .await;
    let took = asked.elapsed();
    let result = &reply.json()["result"];
    assert_eq!(result["resultType"], "input_required", "{}", reply.text);
    assert!(
        took < Duration::from_millis(1500),
        "questions came every 20 ms for 4 s; the client waited {took:?}"
    );
    let asked = result["inputRequests"].as_object().unwrap().len();
    assert!((1..200).contains(&asked), "{asked} questions");
    proxy.shutdown().await;
}

/// A `subscriptions/listen` naming many resources subscribes to a bounded number of them
/// (each is a round trip upstream), and its acknowledgement names only those.
#[tokio::test]
async fn a_listen_subscribes_to_a_bounded_number_of_resources() {
    let rogue = common::rogue::Rogue::start().await;
    let proxy = mcp_session_proxy::start(config_for(&rogue.url()))
        .await
        .unwrap();
    let uris: Vec<String> = (0..500).map(|n| format!("demo://r/{n}")).collect();
    let mut listener = common::StatelessClient::new(proxy.url());
    let response = listener
        .send(
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": uris}}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut stream = EventReader::new(response);
    let ack = stream.next().await.unwrap();
    let honoured = ack["params"]["notifications"]["resourceSubscriptions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(honoured, 64, "{ack}");
    assert_eq!(rogue.subscribes(), 64);
    drop(stream);
    proxy.shutdown().await;
}
