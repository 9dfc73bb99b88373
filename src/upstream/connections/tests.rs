//! When a connection is used again, and when a request or body dropped halfway leaves it
//! closed: against a loopback server that counts the connections it accepted.

use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;

/// The transport's fields of every request here.
const OWN: OwnFields<'static> = OwnFields::host(b"127.0.0.1");

/// A server answering each request by its path: `/ok` a whole body, `/half` half of
/// the body its length announces (the rest never comes), `/close` a whole body and
/// `Connection: close`, `/hang` nothing. Counts the connections it accepted.
async fn server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let path = head.split(' ').nth(1).unwrap_or("");
                    let answer: &[u8] = match path {
                        "/ok" => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                        "/half" => b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello",
                        "/close" => {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                        }
                        _ => b"",
                    };
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, accepted)
}

fn connections(port: u16) -> Connections {
    Connections::new(
        "127.0.0.1".into(),
        port,
        Duration::from_secs(5),
        Duration::from_secs(60),
        8,
    )
}

fn get(path: &str) -> UpstreamRequest {
    let request = Request::get(path).body(Bytes::new()).unwrap();
    Box::new(request)
}

/// Sends `GET path` and reads its body to its end.
async fn whole_exchange(connections: &Connections, path: &str) -> Bytes {
    let response = connections.send(get(path), &OWN).await.unwrap();
    response.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn a_body_read_to_its_end_leaves_its_connection_for_the_next_request() {
    let (port, accepted) = server().await;
    let connections = connections(port);
    for _ in 0..3 {
        assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_dropped_halfway_closes_its_connection() {
    let (port, accepted) = server().await;
    let connections = connections(port);
    let response = connections.send(get("/half"), &OWN).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "hello");
    drop(body);
    // The rest of that answer would be read as this one's: a new connection serves it.
    assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_dropped_while_its_answer_is_awaited_closes_its_connection() {
    let (port, accepted) = server().await;
    let connections = connections(port);
    assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    // The client walks away while the upstream is still to answer.
    let waiting = tokio::time::timeout(
        Duration::from_millis(100),
        connections.send(get("/hang"), &OWN),
    );
    assert!(waiting.await.is_err(), "the upstream never answers /hang");
    assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the abandoned connection was used again"
    );
}

#[tokio::test]
async fn an_answer_that_closes_is_not_followed_on_its_connection() {
    let (port, accepted) = server().await;
    let connections = connections(port);
    assert_eq!(whole_exchange(&connections, "/close").await, "ok");
    assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_replaced_without_a_failure() {
    let (port, accepted) = server().await;
    let connections = connections(port);
    // `/close`'s connection ends at the server once answered; had it been kept, the
    // next request would find it closed. Here: a kept one the server then closes.
    assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    let idle = connections.shared.idle.here().lock().pop();
    let Some(Idle { conn, .. }) = idle else {
        panic!("the connection was not kept");
    };
    let std = conn.io.into_std().unwrap();
    std.shutdown(std::net::Shutdown::Both).unwrap();
    let conn = Conn {
        io: TcpStream::from_std(std).unwrap(),
        ..conn
    };
    connections.shared.idle.here().lock().push(Idle {
        conn,
        since: Instant::now(),
    });
    assert_eq!(whole_exchange(&connections, "/ok").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
