//! Traces (OpenTelemetry) from the real binary to a real OTLP/HTTP receiver
//! (`common::otlp`, decoding with the protocol's own definitions): a data-layer session's
//! create and call, a 2026-07-28 call and one with an `input_required` round each make one
//! trace, parented on the client's `traceparent` (its HTTP header, or its request's
//! `_meta`), with a CLIENT span for what went upstream — and the upstream gets the same
//! trace in its `traceparent`; a retry forwarded between two replicas (on a real Redis)
//! stays in its trace. With no receiver listening, requests are unaffected.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::binary::ProxyProcess;
use common::fleet::{Redis, Replicas};
use common::otlp::{CLIENT, INTERNAL, OtlpReceiver, SERVER};
use common::*;
use mcp_session_proxy::demo::DemoServer;
use mcp_session_proxy::session::log_tag;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

/// A client's trace, and its span that made the request.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

/// The binary before `upstream`, its traces going to `endpoint`.
async fn proxy(upstream: &DemoServer, endpoint: &str) -> ProxyProcess {
    let toml = format!(
        "[upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
         [stateless]\ntask_after = \"300ms\"\n\
         [telemetry]\nendpoint = \"{endpoint}\"\nservice_name = \"proxy-under-test\"\n",
        upstream.url()
    );
    traced(&toml).await
}

/// The binary with `toml`, exporting each batch of spans within 100 ms.
async fn traced(toml: &str) -> ProxyProcess {
    ProxyProcess::launch()
        .toml(toml)
        .env(&[("OTEL_BSP_SCHEDULE_DELAY", "100")])
        .start()
        .await
}

/// The value of the proxy's metric `name` (a line without labels).
async fn metric(proxy: &ProxyProcess, name: &str) -> f64 {
    let text = http_client()
        .get(proxy.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// POSTs `body` to `url` as a client in trace `trace` whose span `span` made it.
async fn post_traced(url: &str, body: &serde_json::Value, (trace, span): (&str, &str)) -> Reply {
    post_json(
        &http_client(),
        url,
        body,
        &with_traceparent(&traceparent(trace, span)),
    )
    .await
}

fn with_traceparent(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", HeaderValue::from_str(value).unwrap());
    headers
}

#[tokio::test]
async fn a_sessions_requests_join_the_clients_trace_down_to_the_upstream() {
    let receiver = OtlpReceiver::start().await;
    let demo = recording_demo().await;
    let proxy = proxy(&demo, &receiver.endpoint()).await;
    let http = http_client();
    let url = proxy.url("/mcp");

    // sessions/create: its span, and the handshake it sent upstream as its children.
    let created = post_traced(
        &url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        (TRACE, CLIENT_SPAN),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let session = created.json()["result"]["session"].clone();
    let session_id = session["sessionId"].as_str().unwrap().to_owned();
    let create = receiver.span("sessions/create", TRACE).await;
    assert_eq!(create.kind, SERVER);
    assert_eq!(create.parent_span_id, CLIENT_SPAN, "parented on the client");
    assert_eq!(create.service, "proxy-under-test");
    assert_eq!(create.attribute("mcp.method.name"), "sessions/create");
    assert_eq!(create.attribute("jsonrpc.request.id"), "1");
    assert_eq!(create.attribute("network.transport"), "tcp");
    assert_eq!(create.attribute("client.address"), "127.0.0.1");
    let initialize = receiver.span("initialize", TRACE).await;
    assert_eq!(initialize.kind, CLIENT);
    assert_eq!(initialize.parent_span_id, create.span_id);
    assert_eq!(initialize.attribute("server.address"), "127.0.0.1");
    assert_eq!(
        initialize.attribute("server.port"),
        demo.local_addr().port().to_string()
    );

    // A call in the session, its trace context in the header.
    let call_span = "00f067aa0ba902b7";
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": in_session(json!({"name": "echo", "arguments": {"msg": "hi"}}),
            &session_id, session["state"].as_str())});
    let reply = post_traced(&url, &call, (TRACE, call_span)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let served = receiver.span("tools/call echo", TRACE).await;
    assert_eq!(served.kind, SERVER);
    assert_eq!(served.parent_span_id, call_span);
    assert_eq!(served.attribute("gen_ai.tool.name"), "echo");
    assert_eq!(served.attribute("gen_ai.operation.name"), "execute_tool");
    // The session as the logs name it: a hash, never the id (which is what lets anyone
    // use the session) nor its state.
    assert_eq!(served.attribute("mcp.session.id"), log_tag(&session_id));
    let state = session["state"].as_str().unwrap();
    assert_eq!(served.attribute("http.response.status_code"), "200");
    for span in receiver.spans() {
        assert!(
            !span
                .attributes
                .values()
                .any(|v| v.contains(&session_id) || v.contains(state)),
            "the session's id or state in {span:?}"
        );
    }
    let sent = receiver.children(TRACE, &served.span_id);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (sent[0].kind, sent[0].name.as_str()),
        (CLIENT, "tools/call")
    );
    // The upstream was told the proxy's span as the parent, in the client's trace.
    let seen = demo
        .journal()
        .into_iter()
        .find(|r| r.method() == Some("tools/call"))
        .unwrap();
    assert_eq!(
        seen.traceparent.as_deref(),
        Some(traceparent(TRACE, &sent[0].span_id).as_str())
    );

    // The conventions' duration histogram counts what was served.
    let metrics = http
        .get(proxy.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",outcome="ok"} 1"#
        ),
        "{metrics}"
    );

    // A streamed answer's span lasts as long as its stream: `slow` reports progress for
    // 3 × 200 ms before it answers.
    let slow_span = "00f067aa0ba90444";
    let slow = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": in_session(json!({"name": "slow", "arguments": {"steps": 3, "interval_ms": 200}}),
            &session_id, None)});
    let reply = post_traced(&url, &slow, (TRACE, slow_span)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply
            .header("content-type")
            .unwrap_or("")
            .starts_with("text/event-stream"),
        "a stream"
    );
    let streamed = receiver
        .find("the streamed call's span", |s| {
            s.kind == SERVER && s.parent_span_id == slow_span
        })
        .await;
    assert!(
        streamed.duration >= std::time::Duration::from_millis(600),
        "the span ended before its stream: {:?}",
        streamed.duration
    );

    // Ending the session with DELETE is a span too, parented on its headers.
    let end_span = "00f067aa0ba90333";
    let ended = http
        .delete(&url)
        .header("mcp-session-id", &session_id)
        .header("traceparent", traceparent(TRACE, end_span))
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 204);
    let delete = receiver
        .find("the DELETE's span", |s| {
            s.kind == SERVER && s.name == "DELETE" && s.parent_span_id == end_span
        })
        .await;
    assert_eq!(delete.trace_id, TRACE);
    assert_eq!(delete.attribute("mcp.session.id"), log_tag(&session_id));
    assert_eq!(delete.attribute("http.response.status_code"), "204");
    // …and the upstream session's end, sent while it was served, its child.
    let upstream_delete = receiver
        .find("the upstream DELETE", |s| {
            s.kind == CLIENT && s.parent_span_id == delete.span_id
        })
        .await;
    assert_eq!(upstream_delete.name, "DELETE");

    // What became of the spans: counted.
    assert!(metric(&proxy, "mcp_proxy_spans_ended_total").await > 0.0);
    assert!(
        eventually_async(Duration::from_secs(10), || {
            let proxy = &proxy;
            async move { metric(proxy, "mcp_proxy_spans_exported_total").await > 0.0 }
        })
        .await
    );
    assert_eq!(
        metric(&proxy, "mcp_proxy_spans_export_failed_total").await,
        0.0
    );

    // The request's log lines carry the trace and its span.
    let logged = proxy.logged("INFO", "session created");
    assert_eq!(logged.len(), 1, "{}", proxy.log());
    assert_eq!(logged[0]["span"]["trace_id"], TRACE);
    assert_eq!(logged[0]["span"]["span_id"], create.span_id.as_str());
}

#[tokio::test]
async fn a_2026_call_is_parented_on_the_trace_in_its_meta() {
    let receiver = OtlpReceiver::start().await;
    let demo = recording_demo().await;
    let proxy = proxy(&demo, &receiver.endpoint()).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "a3ce929d0e0e4736";
    let client = StatelessClient::new(proxy.url("/mcp"));
    let params = client.params(json!({"name": "echo", "arguments": {"msg": "hi"},
        "_meta": {"traceparent": traceparent(trace, parent)}}));
    let headers = StatelessClient::headers("tools/call", &params);
    let body = json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": params});
    let reply = post_json(&client.http, &client.url, &body, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let served = receiver.span("tools/call echo", trace).await;
    assert_eq!(served.parent_span_id, parent);
    assert_eq!(served.attribute("mcp.protocol.version"), "2026-07-28");
    assert_eq!(served.attribute("jsonrpc.request.id"), "call-1");
    // The call's own request upstream is the span's child; the upstream is in the trace.
    let call = receiver.span("tools/call", trace).await;
    assert_eq!(call.kind, CLIENT);
    assert_eq!(call.parent_span_id, served.span_id);
    let seen: Vec<_> = demo
        .journal()
        .into_iter()
        .filter_map(|r| r.traceparent)
        .collect();
    assert!(
        !seen.is_empty() && seen.iter().all(|t| t.contains(trace)),
        "every upstream request of the call is in its trace: {seen:?}"
    );
    let called = demo
        .journal()
        .into_iter()
        .find(|r| r.method() == Some("tools/call"))
        .unwrap();
    assert_eq!(
        called.traceparent.as_deref(),
        Some(traceparent(trace, &call.span_id).as_str()),
        "the upstream's parent is the proxy's CLIENT span"
    );
    // A task runs in the trace of the request that made it: its cancellation, sent
    // upstream by the task's driver long after that request was answered, is a CLIENT
    // span of that request's.
    let mut tasks = StatelessClient::new(proxy.url("/mcp"))
        .with_capabilities(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
    let task_trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let params = tasks.params(json!({"name": "slow",
        "arguments": {"steps": 50, "interval_ms": 200},
        "_meta": {"traceparent": traceparent(task_trace, parent)}}));
    let headers = StatelessClient::headers("tools/call", &params);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let created = post_json(&tasks.http, &tasks.url, &body, &headers).await;
    let message = final_message(&created);
    assert_eq!(message["result"]["resultType"], "task", "{}", created.text);
    let made = receiver.span("tools/call slow", task_trace).await;
    let cancel = json!({"taskId": message["result"]["taskId"]});
    let reply = tasks.request("tasks/cancel", cancel).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let cancelled = receiver.span("notifications/cancelled", task_trace).await;
    assert_eq!(cancelled.kind, CLIENT);
    assert_eq!(cancelled.parent_span_id, made.span_id);
    // A refusal is an error span with the JSON-RPC code.
    let bad = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "echo", "_meta": {"traceparent": traceparent(trace, parent),
            "io.modelcontextprotocol/protocolVersion": "1999-01-01"}}});
    let reply = post_json(&client.http, &client.url, &bad, &headers).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let code = reply.error_code().unwrap().to_string();
    let refused = receiver
        .find("for the refused request", |s| {
            s.trace_id == trace
                && s.attributes.get("jsonrpc.request.id").map(String::as_str) == Some("3")
        })
        .await;
    assert_eq!(refused.attribute("error.type"), code);
    assert_eq!(refused.status_code, 2);
}

/// A 2026-07-28 call with an `input_required` round, bridged to the legacy demo server
/// (its `sample` tool asks the client's model): the client sends both rounds in its
/// trace, each from a span of its own; the proxy's SERVER span of each round is parented
/// on that span, and every request the upstream gets for the call — the call itself, and
/// the answer to its `sampling/createMessage` sent during the retry — carries the trace.
#[tokio::test]
async fn a_2026_call_with_an_input_required_round_is_one_trace() {
    let receiver = OtlpReceiver::start().await;
    let demo = recording_demo().await;
    let proxy = proxy(&demo, &receiver.endpoint()).await;
    let trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    let (first_span, retry_span) = ("1111111111111111", "2222222222222222");
    let client = StatelessClient::new(proxy.url("/mcp")).with_capabilities(json!({"sampling": {}}));
    let round = |id: u32, span: &str, answer: serde_json::Value| {
        let mut params = json!({"name": "sample", "arguments": {"prompt": "Say cheese"},
            "_meta": {"traceparent": traceparent(trace, span)}});
        if let (Some(params), Some(answer)) = (params.as_object_mut(), answer.as_object()) {
            params.extend(answer.clone());
        }
        let params = client.params(params);
        let headers = StatelessClient::headers("tools/call", &params);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        (body, headers)
    };
    let (body, headers) = round(1, first_span, json!({}));
    let first = post_json(&client.http, &client.url, &body, &headers).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let result = final_message(&first)["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{}", first.text);
    let answer = json!({
        "inputResponses": {"sample-1": {"role": "assistant",
            "content": {"type": "text", "text": "cheese"}, "model": "m"}},
        "requestState": result["requestState"],
    });
    let (body, headers) = round(2, retry_span, answer);
    let retry = post_json(&client.http, &client.url, &body, &headers).await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    let done = final_message(&retry);
    assert_eq!(assert::text_of(&done), "the client said: cheese", "{done}");

    // Each round is a SERVER span of the client's trace, under the span that sent it.
    for (id, parent) in [("1", first_span), ("2", retry_span)] {
        let served = receiver
            .find("the round's SERVER span", |s| {
                s.kind == SERVER
                    && s.trace_id == trace
                    && s.attributes.get("jsonrpc.request.id").map(String::as_str) == Some(id)
            })
            .await;
        assert_eq!(served.name, "tools/call sample");
        assert_eq!(served.parent_span_id, parent, "round {id}");
    }
    // The upstream saw the call and the answer to its question, all in that trace.
    let journal = demo.journal();
    let answered = journal
        .iter()
        .find(|r| r.body.as_ref().is_some_and(|b| b["id"] == "sample-1"))
        .unwrap_or_else(|| panic!("the sampling answer never reached the upstream"));
    assert!(
        answered
            .traceparent
            .as_deref()
            .is_some_and(|t| t.contains(trace)),
        "the answer went upstream in the call's trace: {:?}",
        answered.traceparent
    );
    let calls: Vec<_> = journal
        .iter()
        .filter(|r| r.method() == Some("tools/call"))
        .collect();
    assert_eq!(calls.len(), 1, "one call upstream for both rounds");
    assert!(
        calls[0]
            .traceparent
            .as_deref()
            .is_some_and(|t| t.contains(trace)),
        "{:?}",
        calls[0].traceparent
    );
}

#[tokio::test]
async fn with_no_receiver_listening_requests_are_unaffected() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let demo = recording_demo().await;
    let proxy = proxy(&demo, &endpoint).await;
    assert!(
        proxy.log().contains("exporting traces over OTLP/HTTP"),
        "traces are on: {}",
        proxy.log()
    );
    let http = http_client();
    for id in 0..20 {
        let reply = post_traced(
            &proxy.url("/mcp"),
            &json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create"}),
            (TRACE, CLIENT_SPAN),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    // The spans that could not go anywhere are counted, none as exported.
    assert!(
        eventually_async(Duration::from_secs(10), || {
            let proxy = &proxy;
            async move { metric(proxy, "mcp_proxy_spans_export_failed_total").await > 0.0 }
        })
        .await,
        "no failed export counted"
    );
    assert_eq!(metric(&proxy, "mcp_proxy_spans_exported_total").await, 0.0);
    // And it still serves once the exporter has failed a few times.
    let reply = post_json(
        &http,
        &proxy.url("/mcp"),
        &json!({"jsonrpc": "2.0", "id": 99, "method": "sessions/create"}),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// A session the reaper ends (idle too long) was started by no request still served:
/// its upstream session's ending is a trace of its own — a root span, with the DELETE
/// it sent upstream its CLIENT child, and that span the upstream's parent.
#[tokio::test]
async fn a_session_the_reaper_ends_is_a_trace_of_its_own() {
    let receiver = OtlpReceiver::start().await;
    let demo = recording_demo().await;
    let proxy = traced(&format!(
        "[upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
         [session]\nidle_ttl = \"1s\"\nreap_interval = \"200ms\"\n\
         [telemetry]\nendpoint = \"{}\"\n",
        demo.url(),
        receiver.endpoint()
    ))
    .await;
    let created = post_traced(
        &proxy.url("/mcp"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        (TRACE, CLIENT_SPAN),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let ending = receiver
        .find("the ending's own span", |s| {
            s.name == "end upstream session"
        })
        .await;
    assert_eq!(ending.kind, INTERNAL);
    assert_eq!(ending.parent_span_id, "", "a root span");
    assert_ne!(ending.trace_id, TRACE, "not the creating client's trace");
    let delete = receiver
        .find("the upstream DELETE", |s| {
            s.kind == CLIENT && s.parent_span_id == ending.span_id
        })
        .await;
    assert_eq!(delete.name, "DELETE");
    assert_eq!(delete.trace_id, ending.trace_id);
    let seen = demo
        .journal()
        .into_iter()
        .find(|r| r.http_method == "DELETE")
        .expect("the upstream session was ended");
    assert_eq!(
        seen.traceparent.as_deref(),
        Some(traceparent(&delete.trace_id, &delete.span_id).as_str())
    );
}

/// A collector that takes the connection and never answers: the first batch waits on
/// it (up to the exporter's timeout), the queue (4 here) fills, and every span beyond it
/// is dropped and counted — exactly: each span that ended is exported, failed, dropped
/// or still queued. Requests do not wait for any of it.
#[tokio::test]
async fn spans_beyond_a_full_queue_are_dropped_and_counted_exactly() {
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hanging.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((socket, _)) = hanging.accept().await {
            connections.push(socket);
        }
    });
    let demo = recording_demo().await;
    let proxy = ProxyProcess::launch()
        .toml(&format!(
            "[upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
             [telemetry]\nendpoint = \"{endpoint}\"\n",
            demo.url()
        ))
        .env(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
        ])
        .start()
        .await;
    let started = std::time::Instant::now();
    for id in 0..30 {
        let reply = post_traced(
            &proxy.url("/mcp"),
            &json!({"jsonrpc": "2.0", "id": id, "method": "sessions/create"}),
            (TRACE, CLIENT_SPAN),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "requests waited for the collector: {:?}",
        started.elapsed()
    );
    let tally = |text: &str| {
        let value = |name: &str| {
            text.lines()
                .find_map(|line| {
                    line.strip_prefix(name)?
                        .strip_prefix(' ')?
                        .parse::<f64>()
                        .ok()
                })
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        (
            value("mcp_proxy_spans_ended_total"),
            value("mcp_proxy_spans_exported_total")
                + value("mcp_proxy_spans_export_failed_total")
                + value("mcp_proxy_spans_dropped_total")
                + value("mcp_proxy_spans_queued"),
            value("mcp_proxy_spans_dropped_total"),
        )
    };
    let scrape = || async {
        http_client()
            .get(proxy.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    // The last answers' spans end as their bodies do: wait until the books balance.
    assert!(
        eventually_async(Duration::from_secs(5), || async {
            let (ended, accounted, _) = tally(&scrape().await);
            ended == accounted
        })
        .await,
        "the spans do not add up: {}",
        scrape().await
    );
    let (ended, _, dropped) = tally(&scrape().await);
    assert!(ended >= 30.0, "{ended} spans ended");
    // At most the queue's 4 wait on the collector; the rest were dropped.
    assert!(dropped >= ended - 4.0, "{dropped} of {ended} dropped");
    held.abort();
}

/// A retry landing at the replica that does not hold its call is forwarded to the one
/// that does: one trace — the retry's span at B, B's hop as its CLIENT span, and A's span
/// of the forwarded request under that hop.
#[tokio::test]
async fn a_retry_forwarded_to_the_replica_holding_its_call_is_one_trace() {
    let receiver = OtlpReceiver::start().await;
    let redis = Redis::start().await;
    let upstream = Replicas::start(1).await;
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n[upstream]\nurls = [\"{}\"]\nhealth_interval = \"1h\"\n\
         [session]\nstore = \"redis\"\nredis_url = \"{}\"\nstate_key = \"{}\"\n\
         [telemetry]\nendpoint = \"{}\"\n",
        upstream.url(0),
        redis.url(),
        "5ea1ed".repeat(10) + "5ea1",
        receiver.endpoint()
    );
    let a = traced(&toml).await;
    let b = traced(&toml).await;
    let trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    let (first_span, retry_span) = ("1000000000000001", "2000000000000002");
    let ask = async |url: String, params: serde_json::Value, span: &str| {
        let client = StatelessClient::new(url).with_capabilities(json!({"sampling": {}}));
        let params = client.params(params);
        let mut headers = StatelessClient::headers("tools/call", &params);
        headers.insert(
            "traceparent",
            HeaderValue::from_str(&traceparent(trace, span)).unwrap(),
        );
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        post_json(&client.http, &client.url, &body, &headers).await
    };
    let sample = json!({"name": "sample", "arguments": {"prompt": "Say cheese"}});
    let first = ask(a.url("/mcp"), sample.clone(), first_span).await;
    let result = first.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{}", first.text);
    let mut retry = sample;
    retry["inputResponses"] = json!({"sample-1": {"role": "assistant",
        "content": {"type": "text", "text": "cheese"}, "model": "m"}});
    retry["requestState"] = result["requestState"].clone();
    let done = ask(b.url("/mcp"), retry, retry_span).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(
        done.json()["result"]["content"][0]["text"],
        "the client said: cheese"
    );

    let at_b = receiver
        .find("B's span of the retry", |s| {
            s.trace_id == trace && s.kind == SERVER && s.parent_span_id == retry_span
        })
        .await;
    let hop = receiver
        .find("B's hop to A", |s| {
            s.kind == CLIENT && s.parent_span_id == at_b.span_id
        })
        .await;
    assert_eq!(hop.trace_id, trace);
    assert_eq!(hop.attribute("server.port"), a.listen.port().to_string());
    assert_eq!(hop.attribute("mcp.method.name"), "tools/call");
    let at_a = receiver
        .find("A's span of the forwarded retry", |s| {
            s.kind == SERVER && s.parent_span_id == hop.span_id
        })
        .await;
    assert_eq!(at_a.trace_id, trace);
    assert_eq!(at_a.attribute("gen_ai.tool.name"), "sample");

    // The session store's round trips are spans of the request that made them.
    let created = post_traced(
        &a.url("/mcp"),
        &json!({"jsonrpc": "2.0", "id": 9, "method": "sessions/create"}),
        (trace, "3000000000000003"),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let create = receiver
        .find("A's span of sessions/create", |s| {
            s.name == "sessions/create" && s.parent_span_id == "3000000000000003"
        })
        .await;
    let stored = receiver
        .find("a Redis round trip of the create", |s| {
            s.parent_span_id == create.span_id
                && s.attributes.get("db.system.name").map(String::as_str) == Some("redis")
        })
        .await;
    assert_eq!(stored.kind, CLIENT);
}

/// In front of a stdio server — the official Python SDK's FastMCP, a child per session —
/// the trace context has no headers to go in: it goes in the request's `_meta`, and the
/// server sees the proxy's CLIENT span (`network.transport = "pipe"`) as its parent.
#[tokio::test]
async fn a_stdio_server_gets_the_trace_in_meta() {
    common::interop::ensure_installed();
    let receiver = OtlpReceiver::start().await;
    let tools = common::interop::tools_dir();
    let toml = format!(
        "[upstream]\ncommand = {:?}\nargs = [{:?}, \"--stdio\"]\npool_size = 0\n\
         [telemetry]\nendpoint = \"{}\"\n",
        tools.join("venv/bin/python").display().to_string(),
        common::interop::fastmcp_script().display().to_string(),
        receiver.endpoint()
    );
    let proxy = traced(&toml).await;
    let http = http_client();
    let url = proxy.url("/mcp");
    let created = post_json(
        &http,
        &url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        &HeaderMap::new(),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let session_id = created.json()["result"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let trace = "7bf92f3577b34da6a3ce929d0e0e4736";
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": in_session(json!({"name": "traceparent", "arguments": {}}), &session_id, None)});
    let reply = post_traced(&url, &call, (trace, CLIENT_SPAN)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let seen: serde_json::Value =
        serde_json::from_str(assert::text_of(&final_message(&reply))).unwrap();
    let served = receiver.span("tools/call traceparent", trace).await;
    assert_eq!(served.parent_span_id, CLIENT_SPAN);
    let sent = receiver
        .find("the request to the child", |s| {
            s.kind == CLIENT && s.parent_span_id == served.span_id
        })
        .await;
    assert_eq!(sent.attribute("network.transport"), "pipe");
    assert_eq!(sent.name, "tools/call");
    assert_eq!(seen["meta"], traceparent(trace, &sent.span_id).as_str());
    assert_eq!(seen["header"], serde_json::Value::Null);
}

/// A 2026-07-28 server on the official TypeScript SDK 2.x (modern-only) reads the trace
/// context in the request's `_meta` (SEP-414): through the proxy, that is the proxy's
/// CLIENT span in the client's trace, not the client's own span.
#[tokio::test]
async fn a_modern_sdk_server_gets_the_proxys_span_in_meta() {
    let receiver = OtlpReceiver::start().await;
    let server = common::peers::ts2_http(common::peers::Ts2Mode::Reject).await;
    let proxy = traced(&format!(
        "[upstream]\nurl = \"{}\"\nhealth_interval = \"1h\"\n\
         [telemetry]\nendpoint = \"{}\"\n",
        server.url(),
        receiver.endpoint()
    ))
    .await;
    let trace = "8bf92f3577b34da6a3ce929d0e0e4736";
    let client = StatelessClient::new(proxy.url("/mcp"));
    let params = client.params(json!({"name": "traceparent", "arguments": {},
        "_meta": {"traceparent": traceparent(trace, CLIENT_SPAN)}}));
    let headers = StatelessClient::headers("tools/call", &params);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let reply = post_json(&client.http, &client.url, &body, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let served = receiver.span("tools/call traceparent", trace).await;
    assert_eq!(served.parent_span_id, CLIENT_SPAN);
    let sent = receiver
        .find("the request to the server", |s| {
            s.kind == CLIENT && s.parent_span_id == served.span_id
        })
        .await;
    assert_eq!(sent.name, "tools/call");
    assert_eq!(
        assert::text_of(&final_message(&reply)),
        traceparent(trace, &sent.span_id)
    );
}
