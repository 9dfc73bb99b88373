//! The probe against listeners answering as the servers of each era do (their answers
//! as captured from the real SDK servers; the interop suites probe the real ones).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Found;
use crate::upstream::{HttpUpstream, Settings};

/// A listener answering each POST with `post` and each GET with `get` (whole HTTP
/// responses), one request per connection.
async fn server(post: &'static str, get: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = if head.starts_with(b"POST") { post } else { get };
                let _ = stream.write_all(answer.as_bytes()).await;
                // Streams stay open, as a server's would.
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    url
}

fn upstream(url: &str) -> HttpUpstream {
    HttpUpstream::new(
        Settings {
            url: url.parse().unwrap(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            max_message_bytes: 1 << 20,
            idle_timeout: Duration::from_secs(5),
            max_idle: 4,
            withhold_authorization: false,
            credentials: Default::default(),
            exchange: None,
        },
        None,
    )
}

fn json(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn found(post: String, get: &'static str) -> Found {
    let url = server(Box::leak(post.into_boxed_str()), get).await;
    upstream(&url).discover().await.unwrap()
}

const NOT_FOUND: &str = "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 9\r\nconnection: close\r\n\r\nNot Found";

#[tokio::test]
async fn a_discover_result_is_a_modern_server() {
    let body = r#"{"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"resultType":"complete","ttlMs":0,"cacheScope":"private","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"ts2","version":"2"}}},"jsonrpc":"2.0","id":"mcp-session-proxy-discover"}"#;
    let Found::Modern(Some(negotiated)) = found(json("200 OK", body), NOT_FOUND).await else {
        panic!("modern expected");
    };
    assert_eq!(negotiated.protocol_version, "2026-07-28");
    assert_eq!(
        negotiated.server_info.get(),
        r#"{"name":"ts2","version":"2"}"#
    );
}

#[tokio::test]
async fn a_modern_refusal_is_a_modern_server() {
    let body = r#"{"jsonrpc":"2.0","error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"2025-11-25"}},"id":"mcp-session-proxy-discover"}"#;
    assert!(matches!(
        found(json("400 Bad Request", body), NOT_FOUND).await,
        Found::Modern(None)
    ));
}

#[tokio::test]
async fn a_legacy_servers_refusals_in_their_own_words_are_legacy() {
    // FastMCP 1.x, stateful and stateless; server-everything; the TypeScript SDK 1.x.
    for body in [
        r#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}"#,
        r#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Unsupported protocol version: 2026-07-28. Supported versions: 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25"}}"#,
        r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#,
        r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
    ] {
        // A JSON-RPC refusal is never followed by a GET: the endpoint speaks Streamable
        // HTTP (a GET here would hang on a silent stream).
        let get = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        assert!(
            matches!(
                found(json("400 Bad Request", body), get).await,
                Found::Legacy
            ),
            "{body}"
        );
    }
    // A legacy server answering inside an event stream, with -32601.
    let sse = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"mcp-session-proxy-discover\",\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}\n\n";
    assert!(matches!(
        found(sse.to_owned(), NOT_FOUND).await,
        Found::Legacy
    ));
}

#[tokio::test]
async fn a_refused_post_and_an_endpoint_event_are_an_http_sse_server() {
    // FastMCP 1.x's `transport="sse"` at /sse: 405 to a POST, the endpoint event on GET.
    let post = "HTTP/1.1 405 Method Not Allowed\r\nallow: GET, HEAD\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 18\r\nconnection: close\r\n\r\nMethod Not Allowed".to_owned();
    let get = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nconnection: close\r\n\r\nevent: endpoint\r\ndata: /messages/?session_id=29f8c4e4f07a48b48fced13f823ab394\r\n\r\n";
    assert!(matches!(found(post, get).await, Found::Sse));
    // server-everything's sse mode: 404 HTML to a POST of /sse.
    let post = "HTTP/1.1 404 Not Found\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: 30\r\nconnection: close\r\n\r\n<pre>Cannot POST /sse</pre>\r\n".to_owned();
    let get = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\nevent: endpoint\ndata: /message?sessionId=ca5665f1-d2e0-40f0-8801-2ae453f14058\n\n";
    assert!(matches!(found(post, get).await, Found::Sse));
    // A refused POST and a GET without the endpoint event: nothing newer than legacy.
    let post = NOT_FOUND.to_owned();
    assert!(matches!(found(post, NOT_FOUND).await, Found::Legacy));
}

#[tokio::test]
async fn an_unreachable_replica_has_no_era() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    assert!(matches!(
        upstream(&url).discover().await,
        Err(crate::upstream::UpstreamError::Unreachable(_))
    ));
}
