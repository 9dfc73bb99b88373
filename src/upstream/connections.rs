//! Connections to one HTTP upstream (HTTP/1.1 keep-alive), each owned by the request
//! using it: no connection task, no channel hop per request. The request's own task
//! drives the connection (hyper's `client::conn::http1`) while it waits for the head,
//! and the response body drives it while it is read ([`UpstreamBody`]); a body read to
//! its end gives the connection back to the idle list of the worker it was used on
//! (`crate::workers`), so a call never touches another thread's connection. Idle
//! connections are bounded (`max_idle` in all, shared out over the workers) and closed
//! between one and two `idle_timeout`s after their last use.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use crate::workers::PerWorker;

type Driver = Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// One connection: the handle requests are sent on, and the state machine that does
/// the reading and writing (polled by whoever holds the connection).
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    driver: Driver,
    /// The driver finished: the connection is closed.
    closed: bool,
    /// Taken from an idle list (a failure before the request was written is retried).
    reused: bool,
}

impl Conn {
    /// Lets the connection read and write; notes when it closed.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if !self.closed && Pin::new(&mut self.driver).poll(cx).is_ready() {
            self.closed = true;
        }
    }

    /// Ready for a request (driving it until it is); an error when it closed.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.drive(cx);
        self.sender.poll_ready(cx)
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
    Http(hyper::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::error::Error;
        let mut source: Option<&dyn Error> = match self {
            SendError::Connect(e) => {
                write!(f, "cannot connect: {e}")?;
                e.source()
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

    /// Sends `request` (origin-form URI, `Host` set) on an idle connection of this
    /// worker, or a new one, and returns the response head; its body holds the
    /// connection until read to its end.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let mut request = request;
        loop {
            let mut conn = self.checkout().await?;
            let sent = conn.sender.try_send_request(request);
            let mut sent = std::pin::pin!(sent);
            let result = poll_fn(|cx| {
                conn.drive(cx);
                sent.as_mut().poll(cx)
            })
            .await;
            match result {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = UpstreamBody {
                        body,
                        conn: Some(conn),
                        home: Arc::downgrade(&self.shared),
                        ended: false,
                    };
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut e) => match e.take_message() {
                    // An idle connection the upstream had just closed: the request was
                    // not written, so it goes on a new connection.
                    Some(unsent) if conn.reused => request = unsent,
                    _ => return Err(SendError::Http(e.into_error())),
                },
            }
        }
    }

    /// An idle connection of this worker that is still open, else a new one.
    async fn checkout(&self) -> Result<Conn, SendError> {
        loop {
            let idle = self.shared.idle.here().lock().pop();
            let Some(Idle { mut conn, .. }) = idle else {
                break;
            };
            if poll_fn(|cx| conn.poll_ready(cx)).await.is_ok() && !conn.closed {
                conn.reused = true;
                return Ok(conn);
            }
        }
        // Boxed: a new connection is the exception, and connecting (the TCP connect, the
        // handshake, their timeouts) would make every request's future larger.
        let mut conn = Box::pin(self.connect()).await?;
        poll_fn(|cx| conn.poll_ready(cx))
            .await
            .map_err(SendError::Http)?;
        Ok(conn)
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
        let (sender, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(SendError::Http)?;
        self.sweep_idle();
        Ok(Conn {
            sender,
            driver,
            closed: false,
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
        if conn.closed || conn.sender.is_closed() {
            return;
        }
        let mut list = self.idle.here().lock();
        if list.len() < self.max_idle {
            list.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }
}

/// An upstream response body. While it is read it drives its connection; read to its
/// end (or dropped once at its end), the connection is reused; dropped before, the
/// connection is closed.
pub struct UpstreamBody {
    body: Incoming,
    conn: Option<Conn>,
    home: Weak<Shared>,
    ended: bool,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    /// A body that comes with no connection to drive (another client's).
    pub fn detached(body: Incoming) -> UpstreamBody {
        UpstreamBody {
            body,
            conn: None,
            home: Weak::new(),
            ended: false,
        }
    }

    fn release(&mut self) {
        if let Some(conn) = self.conn.take()
            && let Some(home) = self.home.upgrade()
        {
            home.give_back(conn);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(conn) = this.conn.as_mut() {
            conn.drive(cx);
        }
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &frame {
            None => this.ended = true,
            Some(Ok(_)) if this.body.is_end_stream() => this.ended = true,
            Some(Ok(_)) => {}
            Some(Err(_)) => {
                this.conn = None;
            }
        }
        if this.ended {
            this.release();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if self.ended || self.body.is_end_stream() {
            self.release();
        }
    }
}
