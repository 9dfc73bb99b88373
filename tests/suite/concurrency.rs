//! Sessions never share an upstream session, also under concurrency.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::collections::HashSet;

use common::*;
use serde_json::json;

#[tokio::test]
async fn two_sessions_never_share_an_upstream_session() {
    let h = Harness::start().await;
    let mut a = h.client();
    a.create().await;
    let mut b = h.client();
    b.create().await;
    for expected in ["1", "2", "3"] {
        assert_eq!(a.tool_text("counter", json!({})).await, expected);
    }
    assert_eq!(b.tool_text("counter", json!({})).await, "1");
    assert_eq!(a.tool_text("counter", json!({})).await, "4");
    assert_ne!(
        a.tool_text("whoami", json!({})).await,
        b.tool_text("whoami", json!({})).await
    );
    assert_eq!(h.demo.live_sessions(), 2);
    h.stop().await;
}

#[tokio::test]
async fn two_hundred_concurrent_sessions_stay_apart() {
    const SESSIONS: usize = 200;
    let h = Harness::start().await;
    let url = h.url();
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut c = SessionClient::new(url);
                c.create().await;
                // Interleave with every other session: each counter must count only its own.
                for expected in 1..=3 {
                    let text = c.tool_text("counter", json!({})).await;
                    assert_eq!(text, expected.to_string(), "session {i}");
                }
                let upstream = c.tool_text("whoami", json!({})).await;
                let echoed = c
                    .tool_text("echo", json!({"msg": format!("from {i}")}))
                    .await;
                assert_eq!(echoed, format!("from {i}"));
                (c, upstream)
            })
        })
        .collect();
    let mut clients = Vec::with_capacity(SESSIONS);
    let mut upstreams = HashSet::new();
    let mut ids = HashSet::new();
    for task in tasks {
        let (c, upstream) = task.await.unwrap();
        ids.insert(c.session_id().to_owned());
        upstreams.insert(upstream);
        clients.push(c);
    }
    assert_eq!(ids.len(), SESSIONS, "every session id is distinct");
    assert_eq!(
        upstreams.len(),
        SESSIONS,
        "every session has its own upstream session"
    );
    assert_eq!(h.demo.live_sessions(), SESSIONS);
    assert_eq!(h.proxy.live_sessions(), SESSIONS);

    let deletes: Vec<_> = clients
        .into_iter()
        .map(|mut c| tokio::spawn(async move { c.delete().await.status }))
        .collect();
    for delete in deletes {
        assert_eq!(delete.await.unwrap(), 200);
    }
    assert_eq!(h.demo.live_sessions(), 0);
    assert_eq!(h.proxy.live_sessions(), 0);
    h.stop().await;
}
