//! Connections to one HTTP upstream (HTTP/1.1 keep-alive), each owned by the request
//! using it: no connection task, no channel hop per request. The request's own task
//! writes the request and reads the response's head (`exchange`: the proxy's own
//! HTTP/1.1, without a general-purpose client's dispatcher and body channels), and the
//! response body reads the rest as it is read ([`UpstreamBody`]); a body read to its end
//! gives the connection back to the idle list of the worker it was used on
//! (`crate::workers`), so a call never touches another thread's connection. Idle
//! connections are bounded (`max_idle` in all, shared out over the workers) and closed
//! between one and two `idle_timeout`s after their last use; one the upstream closed
//! while idle is found so before it is used (a read that does not wait), and a request
//! whose connection turns out closed before any of it was written goes on a new one.

mod exchange;
#[cfg(test)]
mod tests;

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes, BytesMut};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

pub use self::exchange::OwnFields;
use self::exchange::{Chunks, Framing, ReadHead, Step};
use crate::wire::Fields;
use crate::workers::PerWorker;

/// What a read starts with room for.
const READ_SIZE: usize = 16 * 1024;

/// One connection, and what was read from it and not yet used.
struct Conn {
    io: TcpStream,
    buf: BytesMut,
    /// The fields of the head being read (kept for the next).
    fields: Fields,
    /// Taken from an idle list (a request it could not take is sent on a new one).
    reused: bool,
}

impl Conn {
    /// Whether an idle connection is still open, without waiting: closed by the
    /// upstream (or sent something unasked) while idle, it is not.
    fn still_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        // A read that does not wait: the runtime answers it without a system call while
        // nothing arrived since the last read found the socket empty.
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        // Pending: nothing; Ready(0): closed; Ready(n): bytes nobody asked for; Err: broken.
        matches!(self.poll_fill(&mut cx), Poll::Pending)
    }

    /// Whether a response head to a `method` request has arrived already (read without
    /// waiting): an answer sent before the request was read whole.
    fn answered_early(&mut self, method: &http::Method) -> bool {
        loop {
            match self.io.try_read_buf(&mut self.buf) {
                Ok(n) if n > 0 => continue,
                _ => break,
            }
        }
        matches!(
            exchange::parse_head(&self.buf, method, &mut self.fields),
            Ok(ReadHead::Head(..) | ReadHead::Interim(_))
        )
    }

    /// Reads more into the buffer; `Ready(Ok(0))`: the upstream closed. Through the
    /// runtime's read, which takes a read that did not fill the buffer as the socket
    /// drained (so the next one waits for news instead of asking the kernel again).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        let read = std::pin::pin!(self.io.read_buf(&mut self.buf));
        read.poll(cx)
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// See the module documentation.
pub struct Connections {
    shared: Arc<Shared>,
}

struct Shared {
    host: String,
    port: u16,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    /// Idle connections, one list per worker.
    idle: PerWorker<Mutex<Vec<Idle>>>,
    /// Whether the task closing idle connections runs.
    sweeping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("host", &self.shared.host)
            .field("port", &self.shared.port)
            .finish_non_exhaustive()
    }
}

/// Why a request got no response head.
#[derive(Debug)]
pub enum SendError {
    Connect(std::io::Error),
    /// The exchange failed: the connection broke or closed, or the upstream sent what is
    /// not HTTP/1.1.
    Http(std::io::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::error::Error;
        let mut source: Option<&dyn Error> = match self {
            SendError::Connect(e) => {
                write!(f, "cannot connect: {e}")?;
                e.source()
            }
            SendError::Http(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                write!(f, "connection closed before message completed")?;
                None
            }
            SendError::Http(e) => {
                write!(f, "{e}")?;
                e.source()
            }
        };
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl Connections {
    pub fn new(
        host: String,
        port: u16,
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle: usize,
    ) -> Connections {
        let idle = PerWorker::new(|| Mutex::new(Vec::new()));
        // The bound is the configured one in all: shared out over the workers.
        let max_idle = (max_idle / idle.slot_count()).max(max_idle.min(1));
        Connections {
            shared: Arc::new(Shared {
                host,
                port,
                connect_timeout,
                idle_timeout,
                max_idle,
                idle,
                sweeping: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Sends `request` (origin-form URI) with the transport's fields `own` on an idle
    /// connection of this worker, or a new one, and returns the response head; its body
    /// holds the connection until read to its end.
    pub async fn send(
        &self,
        request: UpstreamRequest,
        own: &OwnFields<'_>,
    ) -> Result<UpstreamResponse, SendError> {
        // Read where it lies, in its box (taken out, its parts would be copied into this
        // future).
        let method = request.method();
        let target = request
            .uri()
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        let mut out = Vec::new();
        exchange::encode_request(
            method,
            target,
            own,
            request.headers(),
            request.body(),
            &mut out,
        );
        loop {
            let mut conn = self.checkout().await?;
            let mut sent = 0;
            let mut failed = None;
            while sent < out.len() {
                match conn.io.write(&out[sent..]).await {
                    Ok(0) => return Err(SendError::Http(io::ErrorKind::WriteZero.into())),
                    Ok(n) => sent += n,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Not all of the request written: the connection is not used again.
            let broken = match failed {
                None => false,
                // An idle connection the upstream had just closed: nothing of the
                // request reached it, so it goes on a new connection.
                Some(e) if conn.reused && sent == 0 && gone(&e) => continue,
                // An upstream that answered before it read the whole request (and
                // closed): its answer, if it came whole enough to read.
                Some(_) if conn.answered_early(method) => true,
                Some(e) => return Err(SendError::Http(e)),
            };
            let (head, headers) = loop {
                match exchange::parse_head(&conn.buf, method, &mut conn.fields)
                    .map_err(SendError::Http)?
                {
                    ReadHead::Head(head, len) => {
                        // Its field values are slices of its bytes.
                        let bytes = conn.buf.split_to(len).freeze();
                        break (head, conn.fields.take(&bytes));
                    }
                    ReadHead::Interim(len) => conn.buf.advance(len),
                    ReadHead::Partial => {
                        let read = poll_fn(|cx| conn.poll_fill(cx))
                            .await
                            .map_err(SendError::Http)?;
                        if read == 0 {
                            return Err(SendError::Http(io::ErrorKind::UnexpectedEof.into()));
                        }
                    }
                }
            };
            let mut response = Box::new(Response::new(UpstreamBody::Lean(LeanBody {
                conn: Some(conn),
                state: match head.framing {
                    Framing::Length(0) => Reading::Done,
                    Framing::Length(n) => Reading::Length(n),
                    Framing::Chunked => Reading::Chunked(Chunks::Size),
                    Framing::Close => Reading::ToEnd,
                },
                keep_alive: head.keep_alive && !broken,
                home: Arc::downgrade(&self.shared),
            })));
            *response.status_mut() = head.status;
            *response.version_mut() = head.version;
            *response.headers_mut() = headers;
            if let Some(reason) = head.reason {
                response.extensions_mut().insert(reason);
            }
            if let UpstreamBody::Lean(body) = response.body_mut() {
                body.release_if_done();
            }
            return Ok(response);
        }
    }

    /// An idle connection of this worker that is still open, else a new one.
    async fn checkout(&self) -> Result<Conn, SendError> {
        loop {
            let idle = self.shared.idle.here().lock().pop();
            let Some(Idle { mut conn, .. }) = idle else {
                break;
            };
            if conn.still_open() {
                conn.reused = true;
                return Ok(conn);
            }
        }
        // Boxed: a new connection is the exception, and connecting (the TCP connect, its
        // timeout) would make every request's future larger.
        Box::pin(self.connect()).await
    }

    async fn connect(&self) -> Result<Conn, SendError> {
        let shared = &self.shared;
        let connect = async {
            let mut last = None;
            for addr in tokio::net::lookup_host((shared.host.as_str(), shared.port)).await? {
                match TcpStream::connect(addr).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} resolves to no address", shared.host),
                )
            }))
        };
        let stream = match tokio::time::timeout(shared.connect_timeout, connect).await {
            Ok(stream) => stream.map_err(SendError::Connect)?,
            Err(_) => {
                return Err(SendError::Connect(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no connection within {} ms",
                        shared.connect_timeout.as_millis()
                    ),
                )));
            }
        };
        let _ = stream.set_nodelay(true);
        self.sweep_idle();
        Ok(Conn {
            io: stream,
            buf: BytesMut::new(),
            fields: Fields::default(),
            reused: false,
        })
    }

    /// Starts the task closing idle connections, once (it ends with the connections).
    fn sweep_idle(&self) {
        use std::sync::atomic::Ordering;
        if self.shared.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.shared.sweeping.store(false, Ordering::Release);
            return;
        };
        let home = Arc::downgrade(&self.shared);
        let every = self.shared.idle_timeout.max(Duration::from_millis(10));
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(shared) = home.upgrade() else { return };
                let now = Instant::now();
                for list in shared.idle.iter() {
                    // Dropped outside the lock: closing a socket is a system call.
                    let expired: Vec<Idle> = {
                        let mut list = list.lock();
                        let (keep, expired) = std::mem::take(&mut *list)
                            .into_iter()
                            .partition(|idle| now.duration_since(idle.since) < every);
                        *list = keep;
                        expired
                    };
                    drop(expired);
                }
            }
        });
    }
}

impl Shared {
    /// A connection whose response was read to its end goes back to the idle list of
    /// the worker it was used on, when there is room.
    fn give_back(&self, conn: Conn) {
        let mut list = self.idle.here().lock();
        if list.len() < self.max_idle {
            list.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }
}

/// Whether `e` says the connection was gone before anything was written on it.
fn gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

/// A request to the upstream, boxed where it is made: the levels it is sent through
/// (the span, the timeout, the connection) then move a pointer, not its 256 bytes.
pub type UpstreamRequest = Box<Request<Bytes>>;

/// An upstream's answer, boxed where it is made: the levels it comes back through (the
/// connection, the timeout, the span, the path that reads it) then move a pointer, not
/// its 248 bytes.
pub type UpstreamResponse = Box<Response<UpstreamBody>>;

/// An upstream response body. Read to its end (or dropped once at its end), its
/// connection is reused; dropped before, the connection is closed.
#[derive(Debug)]
pub enum UpstreamBody {
    /// Read from an upstream connection of this worker's, as it arrives.
    Lean(LeanBody),
    /// A body that comes with no connection to drive (another replica's, over HTTP/2).
    Detached(Incoming),
}

/// See [`UpstreamBody::Lean`].
pub struct LeanBody {
    /// `None` once given back (or lost).
    conn: Option<Conn>,
    state: Reading,
    /// Whether the connection may carry another exchange once the body is read.
    keep_alive: bool,
    home: Weak<Shared>,
}

impl std::fmt::Debug for LeanBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeanBody")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Where a body's reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// This many bytes more.
    Length(u64),
    /// Chunks.
    Chunked(Chunks),
    /// Until the connection's end.
    ToEnd,
    /// Read to its end.
    Done,
}

impl LeanBody {
    /// At the end: the connection goes back to its worker's idle list (if it may carry
    /// another exchange and nothing else came on it).
    fn release_if_done(&mut self) {
        if self.state != Reading::Done {
            return;
        }
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.buf.is_empty()
            && let Some(home) = self.home.upgrade()
        {
            home.give_back(conn);
        }
    }

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match &mut self.state {
                Reading::Done => return Poll::Ready(None),
                Reading::Length(left) => {
                    if !conn.buf.is_empty() {
                        let n = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(conn.buf.len());
                        let data = conn.buf.split_to(n).freeze();
                        *left -= n as u64;
                        if *left == 0 {
                            self.state = Reading::Done;
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Reading::Chunked(chunks) => match chunks.step(&mut conn.buf) {
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(data))),
                    Ok(Step::End) => {
                        self.state = Reading::Done;
                        return Poll::Ready(None);
                    }
                    Ok(Step::More) => {}
                    Err(e) => return Poll::Ready(Some(Err(e))),
                },
                Reading::ToEnd => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
            }
            match std::task::ready!(conn.poll_fill(cx)) {
                Ok(0) if self.state == Reading::ToEnd => {
                    self.state = Reading::Done;
                    self.keep_alive = false;
                    return Poll::Ready(None);
                }
                Ok(0) => return Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into()))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }
}

impl UpstreamBody {
    /// A body that comes with no connection to drive (another client's).
    pub fn detached(body: Incoming) -> UpstreamBody {
        UpstreamBody::Detached(body)
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            UpstreamBody::Lean(body) => {
                let polled = body.poll_data(cx);
                match &polled {
                    Poll::Ready(Some(Err(_))) => body.conn = None,
                    Poll::Ready(_) => body.release_if_done(),
                    Poll::Pending => {}
                }
                polled.map(|data| data.map(|data| data.map(Frame::data)))
            }
            UpstreamBody::Detached(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(io::Error::other))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Lean(body) => body.state == Reading::Done,
            UpstreamBody::Detached(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Lean(body) => match body.state {
                Reading::Length(n) => SizeHint::with_exact(n),
                Reading::Done => SizeHint::with_exact(0),
                Reading::Chunked(_) | Reading::ToEnd => SizeHint::new(),
            },
            UpstreamBody::Detached(body) => body.size_hint(),
        }
    }
}
