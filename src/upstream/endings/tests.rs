//! The executor against a real HTTP listener that answers every `DELETE` slowly and
//! counts how many it is answering at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Ending, Endings};
use crate::upstream::{HttpUpstream, Replicas, Settings, Upstream, replica_id};

/// DELETEs answered, and the most answered at once.
#[derive(Default)]
struct Seen {
    now: AtomicUsize,
    most: AtomicUsize,
    done: AtomicUsize,
}

/// A listener answering each request `204` after `delay`.
async fn slow_server(delay: Duration) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let counted = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let seen = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                seen.now.fetch_sub(1, Ordering::SeqCst);
                seen.done.fetch_add(1, Ordering::SeqCst);
                let _ = stream
                    .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (url, seen)
}

/// The upstream the endings reach (its own executor is not the one under test).
fn upstream(url: &str) -> Upstream {
    let replicas = Replicas::new(
        vec![HttpUpstream::new(
            Settings {
                url: url.parse().unwrap(),
                connect_timeout: Duration::from_secs(1),
                timeout: Duration::from_secs(5),
                max_message_bytes: 1024,
                idle_timeout: Duration::from_secs(5),
                max_idle: 64,
                withhold_authorization: false,
                credentials: Default::default(),
                exchange: None,
            },
            None,
        )],
        None,
    );
    Upstream::http(Arc::new(replicas), Endings::with_limits(1, 2))
}

fn ending(upstream: &Upstream, url: &str, n: usize) -> Ending {
    Ending::new(
        upstream,
        replica_id(url),
        Some(&format!("s{n}")),
        "2025-11-25",
    )
}

#[tokio::test]
async fn at_most_the_workers_run_at_once_and_everything_queued_is_ended() {
    let (url, seen) = slow_server(Duration::from_millis(50)).await;
    let upstream = upstream(&url);
    let endings = Endings::with_limits(3, 64);
    for n in 0..20 {
        endings.end(ending(&upstream, &url, n)).await;
    }
    endings.shutdown(Duration::from_secs(10)).await;
    assert_eq!(seen.done.load(Ordering::SeqCst), 20);
    assert_eq!(seen.most.load(Ordering::SeqCst), 3);
    assert_eq!(endings.pending(), 0);
    assert_eq!(endings.dropped(), 0);
}

#[tokio::test]
async fn when_the_queue_is_full_an_ending_that_cannot_wait_is_given_up_and_counted() {
    let (url, seen) = slow_server(Duration::from_millis(300)).await;
    let upstream = upstream(&url);
    // One worker, four places: two for callers that wait, two for those that don't.
    let endings = Endings::with_limits(1, 4);
    for n in 0..10 {
        endings.end_soon(ending(&upstream, &url, n));
    }
    assert!(endings.dropped() > 0, "nothing was given up");
    let queued = 10 - endings.dropped() as usize;
    endings.shutdown(Duration::from_secs(10)).await;
    assert_eq!(seen.done.load(Ordering::SeqCst), queued);
    assert_eq!(seen.most.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_session_without_an_id_is_let_go_of_without_a_request() {
    let (url, seen) = slow_server(Duration::ZERO).await;
    let upstream = upstream(&url);
    let endings = Endings::with_limits(2, 8);
    endings
        .end_and_wait(Ending::new(&upstream, replica_id(&url), None, "2025-11-25"))
        .await;
    endings.shutdown(Duration::from_secs(5)).await;
    assert_eq!(seen.done.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn after_shutdown_nothing_more_is_taken() {
    let (url, seen) = slow_server(Duration::ZERO).await;
    let upstream = upstream(&url);
    let endings = Endings::with_limits(2, 8);
    endings.shutdown(Duration::from_secs(5)).await;
    endings.end(ending(&upstream, &url, 1)).await;
    endings.end_soon(ending(&upstream, &url, 2));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.done.load(Ordering::SeqCst), 0);
    assert_eq!(endings.pending(), 0);
}
