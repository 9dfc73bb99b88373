use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures_util::FutureExt as _;
use http::StatusCode;
use http_body::Frame;
use http_body_util::{BodyExt as _, Full, StreamBody};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio::sync::mpsc;

use super::*;

/// Answers every request with its method, path and body, as JSON-ish text.
async fn echo(request: ClientRequest) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = format!(
        "{} {} {}",
        parts.method,
        parts.uri,
        String::from_utf8_lossy(&body)
    );
    Response::new(Full::new(Bytes::from(text)))
}

/// An answer as the loop takes it, with nothing kept while it is sent.
type Boxed<B> = (Box<Response<B>>, ());
type Answering<Fut, B> = futures_util::future::Map<Fut, fn(Response<B>) -> Boxed<B>>;

/// `answer` as the loop takes it: boxed, with nothing kept while it is sent.
fn answered<F, Fut, B>(mut answer: F) -> impl FnMut(ClientRequest) -> Answering<Fut, B>
where
    F: FnMut(ClientRequest) -> Fut,
    Fut: Future<Output = Response<B>>,
{
    fn boxed<B>(response: Response<B>) -> Boxed<B> {
        (Box::new(response), ())
    }
    move |request| answer(request).map(boxed as fn(Response<B>) -> Boxed<B>)
}

/// What an answer keeps while it is sent, telling when the loop let it go.
struct Kept(Arc<AtomicBool>);

impl Drop for Kept {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Reads what the loop wrote until it closes or `until` appears; as text, with the
/// `date` lines shown as `date: …`.
async fn read_until(client: &mut DuplexStream, until: &str) -> String {
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&all).contains(until) {
        match tokio::time::timeout(Duration::from_secs(5), client.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => all.extend_from_slice(&chunk[..n]),
            Err(_) => panic!(
                "nothing more, and no {until:?}, in {:?}",
                String::from_utf8_lossy(&all)
            ),
        }
    }
    dated(&String::from_utf8_lossy(&all))
}

fn dated(text: &str) -> String {
    text.split("\r\n")
        .map(|l| {
            if l.starts_with("date: ") {
                "date: …"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

use std::time::Duration;

#[tokio::test]
async fn whole_requests_are_answered_in_order_on_one_connection() {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answered(echo), || false));
    // Two requests in one write (pipelined), then a third.
    client
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\n\r\n{}\
              GET /healthz HTTP/1.1\r\nHost: p\r\n\r\n",
        )
        .await
        .unwrap();
    let text = read_until(&mut client, "GET /healthz ").await;
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\ncontent-length: 12\r\ndate: …\r\n\r\nPOST /mcp {}\
         HTTP/1.1 200 OK\r\ncontent-length: 13\r\ndate: …\r\n\r\nGET /healthz "
    );
    client
        .write_all(b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nConnection: close\r\n\r\nz")
        .await
        .unwrap();
    let text = read_until(&mut client, "POST /x z").await;
    assert!(text.ends_with("\r\n\r\nPOST /x z"), "{text}");
    assert!(
        matches!(served.await.unwrap(), Ended::Closed),
        "closed as asked"
    );
}

#[tokio::test]
async fn what_the_loop_does_not_take_is_handed_over_with_every_byte_read() {
    for (sent, why) in [
        (
            &b"POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"[..],
            "chunked",
        ),
        (
            b"POST /mcp HTTP/1.1\r\nContent-Length: 10\r\n\r\n{\"a\"",
            "a body still coming",
        ),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0", "HTTP/2"),
        (b"GARBAGE\r\n\r\n", "no HTTP"),
        (
            b"POST /mcp HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n",
            "a length past any buffer (hyper answers it)",
        ),
    ] {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve(server, answered(echo), || false));
        client.write_all(sent).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(5), served).await {
            Ok(Ok(Ended::HandOff { read, .. })) => assert_eq!(&read[..], sent, "{why}"),
            other => panic!("{why}: {other:?}"),
        }
    }
}

type FrameSender = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;
type Frames = Pin<Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send>>;
type Streamed = std::future::Ready<(Box<Response<StreamBody<Frames>>>, Kept)>;

/// Frames to send, whether the answer's [`Kept`] was let go, and an answer that streams
/// them as an event stream (the first request's; a second one finds the stream taken
/// and panics).
fn one_stream() -> (
    FrameSender,
    Arc<AtomicBool>,
    impl FnMut(ClientRequest) -> Streamed,
) {
    let (frames, receiver) = mpsc::channel(4);
    let mut receiver = Some(receiver);
    let let_go = Arc::new(AtomicBool::new(false));
    let kept = let_go.clone();
    let answer = move |_request: ClientRequest| {
        let stream: Frames = Box::pin(tokio_stream_of(receiver.take().expect("one request")));
        let mut response = Response::new(StreamBody::new(stream));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/event-stream"),
        );
        std::future::ready((Box::new(response), Kept(kept.clone())))
    };
    (frames, let_go, answer)
}

#[tokio::test]
async fn a_body_that_streams_is_sent_chunked_frame_by_frame() {
    let (frames, let_go, answer) = one_stream();
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answer, || false));
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let head = read_until(&mut client, "\r\n\r\n").await;
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\ndate: …\r\n\r\n",
        "the head goes before any event"
    );
    frames
        .send(Ok(Frame::data(Bytes::from_static(b"data: 1\n\n"))))
        .await
        .unwrap();
    assert_eq!(
        read_until(&mut client, "\n\n\r\n").await,
        "9\r\ndata: 1\n\n\r\n"
    );
    assert!(
        !let_go.load(Ordering::SeqCst),
        "what the answer keeps is kept while its body is sent"
    );
    drop(frames);
    assert_eq!(read_until(&mut client, "0\r\n\r\n").await, "0\r\n\r\n");
    assert!(
        let_go.load(Ordering::SeqCst),
        "and let go once the body is written"
    );
    drop(client);
    assert!(matches!(served.await.unwrap(), Ended::Closed));
}

/// A connection that counts the writes that took bytes.
struct CountedWrites {
    inner: DuplexStream,
    writes: Arc<AtomicUsize>,
}

impl CountedWrites {
    /// A client's end and the loop's, which counts its writes, of a pipe of `capacity`
    /// bytes; and the count.
    fn pipe(capacity: usize) -> (DuplexStream, CountedWrites, Arc<AtomicUsize>) {
        let (client, server) = tokio::io::duplex(capacity);
        let writes = Arc::new(AtomicUsize::new(0));
        let server = CountedWrites {
            inner: server,
            writes: writes.clone(),
        };
        (client, server, writes)
    }
}

impl tokio::io::AsyncRead for CountedWrites {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for CountedWrites {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn an_answer_that_is_all_there_goes_out_in_one_write() {
    // An event stream whose events and end are ready when its head is: one write, the
    // last chunk with them (as nginx writes it), not a write per frame.
    let answer = |_request: ClientRequest| {
        let frames: Frames = Box::pin(futures_util::stream::iter([
            Ok(Frame::data(Bytes::from_static(b"data: 1\n\n"))),
            Ok(Frame::data(Bytes::from_static(b"data: 2\n\n"))),
        ]));
        let mut response = Response::new(StreamBody::new(frames));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/event-stream"),
        );
        std::future::ready((Box::new(response), ()))
    };
    let (mut client, server, writes) = CountedWrites::pipe(64 * 1024);
    let served = tokio::spawn(serve(server, answer, || false));
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_until(&mut client, "0\r\n\r\n").await,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\ndate: …\r\n\r\n\
         9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    );
    assert_eq!(writes.load(Ordering::SeqCst), 1, "one write for all of it");
    drop(client);
    assert!(matches!(served.await.unwrap(), Ended::Closed));
}

#[tokio::test]
async fn frames_ready_together_are_gathered_within_the_bound() {
    // Three ready frames of 10 KiB: gathering two would pass COPY_BODY, so each goes
    // out with what was gathered before it reached the bound — three writes, none
    // holding more than one frame's body.
    let frame = Bytes::from(vec![b'x'; 10 * 1024]);
    let frames = [frame.clone(), frame.clone(), frame];
    let answer = move |_request: ClientRequest| {
        let frames: Frames = Box::pin(futures_util::stream::iter(
            frames.clone().map(|data| Ok(Frame::data(data))),
        ));
        std::future::ready((Box::new(Response::new(StreamBody::new(frames))), ()))
    };
    let (mut client, server, writes) = CountedWrites::pipe(256 * 1024);
    let served = tokio::spawn(serve(server, answer, || false));
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let text = read_until(&mut client, "\r\n0\r\n\r\n").await;
    assert_eq!(text.matches(&"x".repeat(10 * 1024)).count(), 3);
    assert_eq!(writes.load(Ordering::SeqCst), 3);
    drop(client);
    assert!(matches!(served.await.unwrap(), Ended::Closed));
}

/// A stream of `receiver`'s items.
fn tokio_stream_of<T>(mut receiver: mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[tokio::test]
async fn a_client_that_leaves_cancels_its_request_and_its_stream() {
    // Dropped futures and bodies count themselves.
    #[derive(Clone, Default)]
    struct Dropped(Arc<AtomicUsize>);
    struct Guard(Dropped);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Dropped::default();
    let waiting = {
        let dropped = dropped.clone();
        move |_request: ClientRequest| {
            let guard = Guard(dropped.clone());
            async move {
                let _guard = guard;
                std::future::pending::<Response<Full<Bytes>>>().await
            }
        }
    };
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answered(waiting), || false));
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(client);
    assert!(matches!(served.await.unwrap(), Ended::Closed));
    assert_eq!(
        dropped.0.load(Ordering::SeqCst),
        1,
        "the request's future was dropped"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_ends_the_stream() {
    let (frames, let_go, answer) = one_stream();
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answer, || false));
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    frames
        .send(Ok(Frame::data(Bytes::from_static(b"data: 1\n\n"))))
        .await
        .unwrap();
    read_until(&mut client, "data: 1").await;
    // The client leaves while the stream is open and quiet: the loop sees it go and
    // drops the stream (its sender finds no receiver).
    drop(client);
    let ended = tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the loop did not see its client leave");
    assert!(matches!(ended.unwrap(), Ended::Closed));
    assert!(frames.is_closed(), "the stream outlived its client");
    assert!(
        let_go.load(Ordering::SeqCst),
        "what the answer kept outlived its client"
    );
}

#[tokio::test]
async fn http_1_0_and_bodiless_answers() {
    let answer = |request: ClientRequest| async move {
        let status = if request.method() == http::Method::DELETE {
            StatusCode::NO_CONTENT
        } else {
            StatusCode::OK
        };
        let mut response = Response::new(Full::new(Bytes::from_static(b"hello")));
        *response.status_mut() = status;
        response
    };
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answered(answer), || false));
    client
        .write_all(b"HEAD / HTTP/1.1\r\n\r\nDELETE / HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let text = read_until(&mut client, "hello").await;
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: …\r\n\r\n\
         HTTP/1.1 204 No Content\r\ndate: …\r\n\r\n\
         HTTP/1.0 200 OK\r\ncontent-length: 5\r\ndate: …\r\n\r\nhello"
    );
    assert!(
        matches!(served.await.unwrap(), Ended::Closed),
        "an HTTP/1.0 client that did not ask to keep the connection"
    );
}

/// An answer of `body` whose head says it is `length` bytes long.
fn said_length(body: &'static [u8], length: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body)));
    response.headers_mut().insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from_static(length),
    );
    response
}

#[tokio::test]
async fn a_body_longer_than_its_length_is_cut_there_and_the_connection_serves_on() {
    let answer = |_request: ClientRequest| std::future::ready(said_length(b"hello world", "5"));
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let _served = tokio::spawn(serve(server, answered(answer), || false));
    client
        .write_all(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let text = read_until(&mut client, "hello").await;
    let text = if text.matches("hello").count() < 2 {
        text + &read_until(&mut client, "hello").await
    } else {
        text
    };
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: …\r\n\r\nhello\
         HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: …\r\n\r\nhello"
    );
}

#[tokio::test]
async fn a_body_that_ends_short_or_fails_sends_what_came_and_no_head_alone() {
    // Shorter than its length: the data that came, then the connection's end (the
    // client sees the answer cut).
    let short = |_request: ClientRequest| std::future::ready(said_length(b"hello", "10"));
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answered(short), || false));
    client.write_all(b"GET /a HTTP/1.1\r\n\r\n").await.unwrap();
    assert_eq!(
        read_until(&mut client, "never written").await,
        "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ndate: …\r\n\r\nhello"
    );
    assert!(matches!(served.await.unwrap(), Ended::Closed));

    // Failing before any data, to an HTTP/1.0 client whose answer the connection's close
    // delimits: nothing, not a head that would pass for a whole empty answer.
    let failing = |_request: ClientRequest| {
        let frames = futures_util::stream::iter([Err::<Frame<Bytes>, std::io::Error>(
            std::io::Error::other("the upstream went away"),
        )]);
        std::future::ready((Box::new(Response::new(StreamBody::new(frames))), ()))
    };
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, failing, || false));
    client.write_all(b"GET /a HTTP/1.0\r\n\r\n").await.unwrap();
    assert_eq!(read_until(&mut client, "never written").await, "");
    assert!(matches!(served.await.unwrap(), Ended::Closed));
}

#[tokio::test]
async fn a_draining_connection_closes_after_its_answer() {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(serve(server, answered(echo), || true));
    client
        .write_all(b"POST /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nxPOST /b HTTP/1.1\r\nContent-Length: 1\r\n\r\ny")
        .await
        .unwrap();
    let text = read_until(&mut client, "never").await;
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\ndate: …\r\n\r\nPOST /a x"
    );
    assert!(matches!(served.await.unwrap(), Ended::Closed));
}

/// A body that, once asked for its frame, has the listener start draining.
struct DrainsWhenSent {
    draining: Arc<AtomicBool>,
    data: Option<Bytes>,
}

impl Body for DrainsWhenSent {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.draining.store(true, Ordering::SeqCst);
        Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
    }
}

#[tokio::test]
async fn an_answer_that_said_keep_alive_before_draining_began_keeps_its_promise() {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let draining = Arc::new(AtomicBool::new(false));
    let exchange = {
        let draining = draining.clone();
        move |_request: ClientRequest| {
            let draining = draining.clone();
            async move {
                Response::new(DrainsWhenSent {
                    draining,
                    data: Some(Bytes::from_static(b"ok")),
                })
            }
        }
    };
    let served = tokio::spawn(serve(server, answered(exchange), {
        let draining = draining.clone();
        move || draining.load(Ordering::SeqCst)
    }));
    // The first answer's head is written before its body starts the draining: it says
    // nothing of closing, so the connection takes the next request...
    client.write_all(b"GET /a HTTP/1.1\r\n\r\n").await.unwrap();
    let first = read_until(&mut client, "ok").await;
    assert_eq!(
        first,
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: …\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    );
    assert!(
        !served.is_finished(),
        "closed after an answer that said keep-alive"
    );
    // ... whose answer says it closes, and does.
    client.write_all(b"GET /b HTTP/1.1\r\n\r\n").await.unwrap();
    let second = read_until(&mut client, "never").await;
    assert!(second.contains("connection: close\r\n"), "{second}");
    assert!(matches!(served.await.unwrap(), Ended::Closed));
}
