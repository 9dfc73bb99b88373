//! HTTP/1.1 to clients on the proxy's own loop: its one exchange — a request whose head
//! and body have arrived, answered with a head and a body written as it comes — with no
//! general-purpose HTTP stack on the request path (hyper's dispatcher, its body channels
//! and the moves of its futures cost the proxy more than the exchange itself:
//! `benches/README.md`, "The lean exchange").
//!
//! What the loop does not take it hands, with every byte read so far, to hyper, which
//! serves the rest of the connection exactly as it serves any other ([`Ended::HandOff`]):
//! an HTTP/2 preface, a body not all there yet (large, slow, chunked or behind `Expect:
//! 100-continue`), an upgrade, a head it cannot parse or that is too large (hyper
//! answers those with 400 or 431) — see `request`.
//!
//! Like hyper's, the loop:
//! - reads pipelined requests one after the other, never two at once;
//! - while a request is served or its answer written, watches the connection: a client
//!   that closes it ends the exchange (the request's future and the answer's body are
//!   dropped, which cancels what they hold), unless it already sent its next request
//!   (then its end is found when that one is read);
//! - writes the head and a body known whole in one write, and each frame of a body that
//!   streams as it comes (chunked in HTTP/1.1), with whatever else is ready with it;
//! - closes after an answer that says `Connection: close`, after a client that asked
//!   so, after an HTTP/1.0 client that did not ask to keep the connection, and when a
//!   body fails mid-way (the client sees the answer cut).

mod request;
mod response;
mod rewind;

use std::future::Future;
use std::io;

use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use self::request::{Head, Parsed};
use self::response::{Asked, Framing};
pub use self::rewind::Rewind;
use super::body::{ClientBody, ClientRequest};
use crate::wire::Fields;

/// What a read starts with room for.
const READ_SIZE: usize = 16 * 1024;
/// The longest head the loop reads before it leaves the request to hyper (which takes
/// heads up to ~400 KiB and answers 431 beyond).
const MAX_HEAD: usize = 64 * 1024;
/// A frame copied into the write it goes out with when it is no longer than this (a
/// longer one is written from where it lies), and the most body bytes gathered into one
/// write.
const COPY_BODY: usize = 16 * 1024;

/// How a connection left the loop.
#[derive(Debug)]
pub enum Ended<T> {
    /// Closed (by either side), or to be closed.
    Closed,
    /// For hyper to serve: `read` are the bytes read from `io` and not served; `fresh`:
    /// nothing was served on the connection yet (so it may be HTTP/2).
    HandOff { io: T, read: Bytes, fresh: bool },
}

/// Serves HTTP/1.1 requests on `io` with `exchange` until the connection ends or a
/// request is one the loop leaves to hyper; an answer whose head is written while
/// `draining()` says so closes the connection (`Connection: close`). `exchange` answers
/// a request with its answer (boxed) and what the answer keeps until it has been sent,
/// held here until its body is written (or the connection ends).
pub async fn serve<T, F, Fut, B, K>(
    mut io: T,
    mut exchange: F,
    draining: impl Fn() -> bool,
) -> Ended<T>
where
    T: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(ClientRequest) -> Fut,
    Fut: Future<Output = (Box<Response<B>>, K)>,
    B: Body<Data = Bytes>,
{
    let mut buf = BytesMut::with_capacity(READ_SIZE);
    let mut out: Vec<u8> = Vec::with_capacity(1024);
    let mut fields = Fields::default();
    let mut first = true;
    loop {
        // A head, whole. (The HTTP/2 preface, RFC 9113 §3.4, is no HTTP/1.x head: it is
        // handed over with the rest.)
        let head = loop {
            match request::parse(&buf, &mut fields) {
                Parsed::Take(head) => break head,
                Parsed::Partial if buf.len() < MAX_HEAD => {}
                Parsed::Partial | Parsed::HandOff => return hand_off(io, buf, first),
            }
            match read_more(&mut io, &mut buf).await {
                Ok(true) => {}
                // Closed before (or in the middle of) a head: nothing to answer.
                Ok(false) | Err(_) => return Ended::Closed,
            }
        };
        first = false;
        // Its body, arrived with it (or arriving at once), else hyper waits for it (and
        // answers a length beyond any buffer).
        let Some(whole) = head.len.checked_add(head.body) else {
            return hand_off(io, buf, false);
        };
        if buf.len() < whole {
            // Read as much as has arrived; enough, or hyper waits for the rest.
            try_read_more(&mut io, &mut buf);
        }
        if buf.len() < whole {
            return hand_off(io, buf, false);
        }
        // The head's bytes taken out of the buffer: its target and field values are
        // slices of them.
        let bytes = buf.split_to(head.len).freeze();
        let Some(uri) = head.target(&bytes) else {
            let mut read = BytesMut::with_capacity(bytes.len() + buf.len());
            read.extend_from_slice(&bytes);
            read.extend_from_slice(&buf);
            return hand_off(io, read, false);
        };
        let headers = fields.take(&bytes);
        drop(bytes);
        let Head {
            method,
            version,
            body,
            keep_alive,
            ..
        } = head;
        let body = buf.split_to(body).freeze();
        let asked_method = method.clone();
        let mut request = Box::new(Request::new(ClientBody::Whole(
            (!body.is_empty()).then_some(body),
        )));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.version_mut() = version;
        *request.headers_mut() = headers;

        // Served, unless the client leaves first.
        let served = exchange(request);
        let mut served = std::pin::pin!(served);
        let mut watching = buf.is_empty();
        let (response, sending) = loop {
            // The connection first, as hyper does: a client that left while its answer
            // became ready gets none (and what its request started is cancelled).
            tokio::select! {
                biased;
                read = io.read_buf(&mut buf), if watching => match read {
                    Ok(0) | Err(_) => return Ended::Closed,
                    // The next request (pipelined): its connection's end is found when
                    // it is read.
                    Ok(_) => watching = false,
                },
                response = &mut served => break response,
            }
        };

        // Answered.
        let (parts, body) = (*response).into_parts();
        out.clear();
        // Draining decided here, once: an answer whose head says the connection stays
        // open keeps that promise (a client may already be reusing it); the next
        // request's answer says `Connection: close`, else the listener's idle limit ends it.
        let asked = Asked {
            method: &asked_method,
            version,
            keep_alive: keep_alive && !draining(),
        };
        // A body at its end already is empty, whatever its size hint.
        let size = match body.is_end_stream() {
            true => http_body::SizeHint::with_exact(0),
            false => body.size_hint(),
        };
        let (framing, keep) = response::head(&parts, &size, asked, &mut out);
        drop(parts);
        let sent = write_body(&mut io, &mut buf, &mut out, body, framing, &mut watching).await;
        drop(sending);
        if sent.is_err() || !keep {
            let _ = io.shutdown().await;
            return Ended::Closed;
        }
    }
}

/// The connection for hyper, with what was read and not served; `fresh`: nothing was
/// served on it yet.
fn hand_off<T>(io: T, buf: BytesMut, fresh: bool) -> Ended<T> {
    Ended::HandOff {
        io,
        read: buf.freeze(),
        fresh,
    }
}

/// Reads into `buf`, waiting; whether anything came (`false`: the connection closed).
async fn read_more<T: AsyncRead + Unpin>(io: &mut T, buf: &mut BytesMut) -> io::Result<bool> {
    if buf.capacity() - buf.len() < READ_SIZE / 4 {
        buf.reserve(READ_SIZE);
    }
    Ok(io.read_buf(buf).await? > 0)
}

/// Reads what has arrived into `buf` without waiting (an end or an error is left for
/// the next read to find).
fn try_read_more<T: AsyncRead + Unpin>(io: &mut T, buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < READ_SIZE / 4 {
        buf.reserve(READ_SIZE);
    }
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let read = std::pin::pin!(io.read_buf(buf));
    let _ = read.poll(&mut cx);
}

/// Writes the head in `out` and `body` as `framing` says; a client that closes the
/// connection meanwhile (found while `watching`, see [`serve`]) or a body that fails
/// ends it with an error.
///
/// What is ready goes out together: the head, the frames the body has at once and its
/// end gather in `out` (at most [`COPY_BODY`] of body bytes) and are written when the
/// body has no more ready — before waiting for the next frame, never after. An answer
/// that is all there (a JSON body; an event stream whose last event came with its end)
/// is one write, as nginx's is, and a stream's event still goes out as soon as it comes.
/// A body that fails or ends short still sends the data that came before (the client
/// sees the answer cut, as when each frame was written at once), but not a head alone
/// that no data followed.
async fn write_body<T, B>(
    io: &mut T,
    buf: &mut BytesMut,
    out: &mut Vec<u8>,
    body: B,
    framing: Framing,
    watching: &mut bool,
) -> io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin,
    B: Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    if framing == Framing::Empty || framing == Framing::Length(0) {
        return write_watching(io, buf, out, watching).await;
    }
    let chunked = framing == Framing::Chunked;
    let mut written: u64 = 0;
    // Body bytes in `out`, not yet written.
    let mut gathered = 0;
    loop {
        // The next frame as soon as it is ready; what is gathered is written before
        // waiting for one that is not.
        let frame = match poll_now(body.as_mut().frame()) {
            Some(frame) => frame,
            None => {
                if !out.is_empty() {
                    write_watching(io, buf, out, watching).await?;
                    out.clear();
                    gathered = 0;
                }
                next_frame(io, buf, body.as_mut(), watching).await?
            }
        };
        let data = match frame {
            None => break,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                // Trailers are not sent.
                Err(_) => continue,
            },
            Some(Err(_)) => {
                write_cut(io, buf, out, gathered, watching).await?;
                return Err(io::Error::other("the response body failed"));
            }
        };
        if data.is_empty() {
            continue;
        }
        let mut data = data;
        let mut full = false;
        if let Framing::Length(length) = framing {
            // As hyper does: what goes past the announced length is not sent, and the
            // body is not read further.
            let left = length - written;
            if data.len() as u64 >= left {
                data.truncate(usize::try_from(left).unwrap_or(usize::MAX));
                full = true;
            }
            written += data.len() as u64;
        }
        if data.len() <= COPY_BODY {
            // What is gathered goes first if this frame would take it past the bound.
            if gathered > 0 && gathered + data.len() > COPY_BODY {
                write_watching(io, buf, out, watching).await?;
                out.clear();
                gathered = 0;
            }
            if chunked {
                response::chunk_head(data.len(), out);
            }
            out.extend_from_slice(&data);
            if chunked {
                out.extend_from_slice(b"\r\n");
            }
            gathered += data.len();
        } else {
            // A large frame is written from where it lies, after what was gathered.
            if chunked {
                response::chunk_head(data.len(), out);
            }
            write_watching(io, buf, out, watching).await?;
            write_watching(io, buf, &data, watching).await?;
            out.clear();
            gathered = 0;
            if chunked {
                out.extend_from_slice(b"\r\n");
            }
        }
        if full {
            break;
        }
    }
    match framing {
        Framing::Chunked => out.extend_from_slice(response::LAST_CHUNK),
        Framing::Length(length) if written < length => {
            write_cut(io, buf, out, gathered, watching).await?;
            return Err(io::Error::other(
                "the response body is shorter than it said",
            ));
        }
        _ => {}
    }
    if !out.is_empty() {
        write_watching(io, buf, out, watching).await?;
        out.clear();
    }
    Ok(())
}

/// Writes what was gathered of a body that failed or ended short, if it holds any of
/// the body: the client gets the data that came (and sees the answer cut), not a head
/// alone that would pass for a whole empty answer on a connection its close delimits.
async fn write_cut<T: AsyncRead + AsyncWrite + Unpin>(
    io: &mut T,
    buf: &mut BytesMut,
    out: &[u8],
    gathered: usize,
    watching: &mut bool,
) -> io::Result<()> {
    if gathered > 0 {
        write_watching(io, buf, out, watching).await?;
    }
    Ok(())
}

/// Writes `data` whole; while the connection takes no more, watches it as [`serve`]
/// does (a client that closed it ends the write with an error, as hyper's does).
async fn write_watching<T: AsyncRead + AsyncWrite + Unpin>(
    io: &mut T,
    buf: &mut BytesMut,
    data: &[u8],
    watching: &mut bool,
) -> io::Result<()> {
    let mut written = 0;
    std::future::poll_fn(|cx| {
        while written < data.len() {
            match Pin::new(&mut *io).poll_write(cx, &data[written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if *watching {
                        let mut probe = [0u8; 1024];
                        let mut read = ReadBuf::new(&mut probe);
                        match Pin::new(&mut *io).poll_read(cx, &mut read) {
                            Poll::Ready(Ok(())) if read.filled().is_empty() => {
                                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                            }
                            Poll::Ready(Ok(())) => {
                                buf.extend_from_slice(read.filled());
                                *watching = false;
                            }
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => {}
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    })
    .await
}

/// The body's next frame, waiting for it while watching the connection.
async fn next_frame<T, B>(
    io: &mut T,
    buf: &mut BytesMut,
    mut body: std::pin::Pin<&mut B>,
    watching: &mut bool,
) -> io::Result<Option<Result<http_body::Frame<Bytes>, B::Error>>>
where
    T: AsyncRead + Unpin,
    B: Body<Data = Bytes>,
{
    loop {
        let mut next = body.as_mut();
        tokio::select! {
            biased;
            read = io.read_buf(buf), if *watching => match read {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Err(e) => return Err(e),
                Ok(_) => *watching = false,
            },
            frame = next.frame() => return Ok(frame),
        }
    }
}

/// `future`'s output if it is ready at once.
fn poll_now<F: Future>(future: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let future = std::pin::pin!(future);
    match future.poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests;
