//! Operations: metrics, readiness, the admin API, a separate admin listener.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::time::Duration;

use common::*;
use mcp_session_proxy::config::Secret;
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef-admin";

/// The value of the first sample whose line starts with `prefix`.
fn sample(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix}:\n{metrics}"))
}

async fn get(h: &Harness, path: &str) -> (u16, String) {
    let url = format!("http://{}{path}", h.proxy.local_addr());
    let response = h.http.get(url).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn metrics_count_sessions_requests_streams_and_upstream_latency() {
    let h = Harness::with_config(|c| c.session.max_sessions = 2).await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    assert_eq!(
        h.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}))
            .await
            .status,
        503
    );
    a.tool_text("echo", json!({"msg": "x"})).await;
    a.tool_text("slow", json!({"steps": 1, "interval_ms": 10}))
        .await;
    b.delete().await;
    let (status, text) = get(&h, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(sample(&text, "mcp_proxy_sessions_active "), 1.0);
    assert_eq!(sample(&text, "mcp_proxy_sessions_created_total "), 2.0);
    assert_eq!(sample(&text, "mcp_proxy_sessions_deleted_total "), 1.0);
    assert_eq!(
        sample(
            &text,
            "mcp_proxy_sessions_rejected_total{reason=\"limit\"} "
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "mcp_proxy_requests_total{method=\"tools/call\",outcome=\"ok\"} "
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            "mcp_proxy_requests_total{method=\"sessions/create\",outcome=\"proxy_error\"} "
        ),
        1.0
    );
    // Both streams have ended.
    assert_eq!(sample(&text, "mcp_proxy_sse_streams_open "), 0.0);
    let upstream = h.demo.url();
    let count = sample(
        &text,
        &format!("mcp_proxy_upstream_latency_seconds_count{{upstream=\"{upstream}\"}} "),
    );
    // 2 creates × (initialize + initialized) + 2 calls + 1 DELETE.
    assert!(count >= 7.0, "{count}");
    h.stop().await;
}

#[tokio::test]
async fn an_open_stream_is_counted_until_it_ends() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    let response = c
        .request_streaming(
            "tools/call",
            json!({"name": "slow", "arguments": {"steps": 3, "interval_ms": 200}}),
        )
        .await;
    let mut reader = EventReader::new(response);
    reader.next().await.unwrap();
    assert_eq!(
        sample(&get(&h, "/metrics").await.1, "mcp_proxy_sse_streams_open "),
        1.0
    );
    while reader.next().await.is_some() {}
    let mut open = 1.0;
    for _ in 0..50 {
        open = sample(&get(&h, "/metrics").await.1, "mcp_proxy_sse_streams_open ");
        if open == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open, 0.0);
    h.stop().await;
}

#[tokio::test]
async fn unknown_methods_do_not_grow_the_metrics() {
    let h = Harness::start().await;
    let mut c = h.client();
    c.create().await;
    for i in 0..20 {
        c.request(&format!("x/invented-{i}"), json!({})).await;
    }
    let text = get(&h, "/metrics").await.1;
    assert!(!text.contains("invented"));
    assert_eq!(
        sample(
            &text,
            "mcp_proxy_requests_total{method=\"other\",outcome=\"ok\"} "
        ),
        20.0
    );
    h.stop().await;
}

#[tokio::test]
async fn readiness_follows_the_upstream() {
    // Replicas are judged by their probes (an `initialize` every health_interval).
    let Harness { proxy, demo, http } =
        Harness::with_config(|c| c.upstream.health_interval = Duration::from_millis(100)).await;
    let url = format!("http://{}/readyz", proxy.local_addr());
    let ready = http.get(&url).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(
        body["checks"],
        json!({"config": "ok", "upstream": "ok", "store": "ok"})
    );
    assert_eq!(body["upstreams"]["default"]["replicas"][demo.url()], "ok");
    demo.stop().await;
    let failing = eventually_async(Duration::from_secs(10), || async {
        http.get(&url).send().await.unwrap().status() == 503
    })
    .await;
    assert!(
        failing,
        "/readyz still ready 10 s after the upstream stopped"
    );
    let not_ready = http.get(&url).send().await.unwrap();
    let body: Value = not_ready.json().await.unwrap();
    assert_eq!(body["checks"]["upstream"], "failing");
    // Alive all the same.
    let health = http
        .get(format!("http://{}/healthz", proxy.local_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_admin_api_is_off_without_a_token() {
    let h = Harness::start().await;
    assert_eq!(get(&h, "/admin/sessions").await.0, 404);
    h.stop().await;
}

#[tokio::test]
async fn the_admin_api_lists_hashed_sessions_and_revokes_one() {
    let h = Harness::with_config(|c| c.admin.token = Some(Secret(TOKEN.as_bytes().to_vec()))).await;
    let mut a = h.client();
    a.create().await;
    a.tool_text("counter", json!({})).await;
    let mut b = h.client();
    b.create().await;
    let url = format!("http://{}/admin/sessions", h.proxy.local_addr());

    let refused = h.http.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["www-authenticate"], "Bearer");
    let wrong = h
        .http
        .get(&url)
        .bearer_auth("not-the-token-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    let listing = h.http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(listing.status(), 200);
    let text = listing.text().await.unwrap();
    assert!(
        !text.contains(a.session_id()) && !text.contains(b.session_id()),
        "raw ids leaked: {text}"
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["total"], 2);
    let rows = body["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row["id"].as_str().unwrap().len(), 16);
        assert_eq!(row["upstream"], h.demo.url());
        assert!(row["ageSeconds"].is_u64() && row["idleSeconds"].is_u64());
        assert!(row["expiresAt"].is_string());
    }
    let a_row = rows.iter().find(|r| r["uses"] == 1).unwrap();
    let tag = a_row["id"].as_str().unwrap();

    let revoked = h
        .http
        .delete(format!("{url}/{tag}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    let reply = a.request("tools/list", json!({})).await;
    assert_eq!(reply.error_code(), Some(-32043));
    assert_eq!(h.demo.live_sessions(), 1, "the upstream session was ended");
    assert_eq!(b.tool_text("echo", json!({"msg": "b"})).await, "b");
    let again = h
        .http
        .delete(format!("{url}/{tag}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    h.stop().await;
}

#[tokio::test]
async fn a_separate_admin_listener_takes_the_operations_endpoints() {
    let h = Harness::with_config(|c| {
        c.admin.listen = Some("127.0.0.1:0".parse().unwrap());
        c.admin.token = Some(Secret(TOKEN.as_bytes().to_vec()));
    })
    .await;
    let ops = h.proxy.operations_addr().unwrap();
    let main = h.proxy.local_addr();
    for path in ["/metrics", "/readyz", "/admin/sessions"] {
        let on_main = h
            .http
            .get(format!("http://{main}{path}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(
            on_main.status(),
            404,
            "{path} must not be on the main listener"
        );
        let on_ops = h
            .http
            .get(format!("http://{ops}{path}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(on_ops.status(), 200, "{path} on the admin listener");
    }
    // Both answer /healthz; only the main listener serves MCP.
    assert_eq!(
        h.http
            .get(format!("http://{main}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        h.http
            .get(format!("http://{ops}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let mcp_on_ops = post_json(
        &h.http,
        &format!("http://{ops}/mcp"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}),
        &Default::default(),
    )
    .await;
    assert_eq!(mcp_on_ops.status, 404);
    h.stop().await;
}
