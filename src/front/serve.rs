//! Accepting connections and shutting down gracefully.
//!
//! A listener goes through phases (`Phase`): it may wait before accepting (a process
//! taking listeners over accepts only once the old one has stopped), accepts, drains,
//! and closes what is left. Draining drops nothing a client sent: the listener stops
//! accepting (the socket stays open while another process accepts on it, after a
//! hand-over); a connection with a request in flight, and every HTTP/2 connection, is
//! shut down gracefully (HTTP/1.1: no keep-alive after the response; HTTP/2: GOAWAY,
//! RFC 9113 §6.8, so the client resends what the server did not take); an idle HTTP/1.1
//! connection is not closed under a client that may be sending on it: its next response
//! carries `Connection: close` (RFC 9112 §9.6), and it is closed only once it has stayed
//! idle for [`DRAIN_IDLE`] (so is one on which nothing has arrived yet: a client's pool
//! may hold it unused). What is still open when `shutdown_grace` ends is closed.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::admission::{Admission, Admitted};
use super::body::{ClientBody, ClientRequest, ClientResponse};
use super::http1;
use super::watchdog::{Activity, Sending, Tracked, Watched};
use super::{Front, handle};
use crate::response::ProxyBody;
use crate::telemetry::server::Answered;
use crate::throttle::Throttle;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The MCP endpoint and `/healthz` (operations endpoints have their own listener).
    Mcp,
    /// The MCP endpoint and the operations endpoints (`admin.listen` is empty).
    McpAndOperations,
    /// Only the operations endpoints: `/healthz`, `/readyz`, `/metrics`, `/admin/…`.
    Operations,
}

impl Role {
    pub fn serves_mcp(self) -> bool {
        matches!(self, Role::Mcp | Role::McpAndOperations)
    }

    pub fn serves_operations(self) -> bool {
        matches!(self, Role::McpAndOperations | Role::Operations)
    }
}

/// Where a listener is in its life; its connections follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Listening, not accepting yet (another process still accepts on the socket).
    Waiting,
    Accepting,
    /// Not accepting; connections finish what they have in flight.
    Draining,
}

/// Where a listener's connections are: they serve until told to drain (every listener of
/// the process is told before the first stops accepting; at the latest when their own
/// stops), then drain, and close what is left once the grace period is over. One signal,
/// so a connection's task watches one thing besides its connection and its watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Serving,
    Draining,
    Closing,
}

/// A running listener.
#[derive(Debug)]
pub struct Serving {
    local_addr: SocketAddr,
    /// Dropping it stops accepting, as [`Serving::stop_accepting`] does.
    phase: watch::Sender<Phase>,
    /// Its connections' stage (the accept loop holds another sender: it closes them once
    /// the grace period is over).
    stage: watch::Sender<Stage>,
    /// Resolves once the accept loop has let go of the listener.
    accepting: Option<oneshot::Receiver<()>>,
    task: JoinHandle<()>,
}

impl Serving {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts accepting (a listener started [`Phase::Waiting`]).
    pub fn open(&self) {
        self.phase.send_if_modified(|phase| {
            let waiting = *phase == Phase::Waiting;
            if waiting {
                *phase = Phase::Accepting;
            }
            waiting
        });
    }

    /// Its connections drain from now on, those it still accepts too: HTTP/1.1 answers
    /// say `Connection: close`, an HTTP/2 connection or one with a request under way is
    /// shut down gracefully (GOAWAY), an idle one is closed after a second. The
    /// listeners of a SO_REUSEPORT group stop one after another, so each is told this
    /// first: a client that finds one gone finds every connection draining.
    pub fn drain(&self) {
        drain(&self.stage);
    }

    /// Stops accepting; resolves once this process no longer accepts on the socket.
    /// Connections carry on (draining).
    pub async fn stop_accepting(&mut self) {
        self.phase.send_if_modified(|phase| {
            let accepting = *phase < Phase::Draining;
            if accepting {
                *phase = Phase::Draining;
            }
            accepting
        });
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.await;
        }
    }

    /// Stops accepting, lets in-flight requests finish for up to the grace period, then
    /// closes what is left.
    pub async fn shutdown(mut self) {
        self.stop_accepting().await;
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "the accept loop ended abnormally");
        }
    }
}

/// How client connections are bounded (`[limits]`), shared by every listener.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub admission: Arc<Admission>,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// First wait after an accept failed for lack of resources; it doubles up to
/// [`ACCEPT_BACKOFF_MAX`] while the failures last.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one warning this often while accepting fails.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(5);
/// While draining, an idle HTTP/1.1 connection is closed once it has been idle this long
/// (a client still using it sends its next request sooner, and gets `Connection: close`).
pub const DRAIN_IDLE: Duration = Duration::from_secs(1);
/// After the grace period, how long connections get to close.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// Serves `front` on `listener` (HTTP/1.1 and HTTP/2 cleartext) until shut down,
/// accepting from `start` on ([`Phase::Waiting`]: once [`Serving::open`]).
pub fn serve(
    listener: TcpListener,
    front: Arc<Front>,
    role: Role,
    grace: Duration,
    start: Phase,
) -> std::io::Result<Serving> {
    let local_addr = listener.local_addr()?;
    let (phase, phases) = watch::channel(start);
    // The accept loop gets the receiver made with the channel, not a `subscribe()`d one:
    // its clones, one per connection, have seen no value yet, so a connection accepted
    // after the listener was told to drain still sees the change.
    let (stage, staged) = watch::channel(Stage::Serving);
    let (let_go, accepting) = oneshot::channel();
    let task = tokio::spawn(accept_loop(
        listener,
        front,
        role,
        grace,
        phases,
        let_go,
        (stage.clone(), staged),
    ));
    Ok(Serving {
        local_addr,
        phase,
        stage,
        accepting: Some(accepting),
        task,
    })
}

async fn accept_loop(
    listener: TcpListener,
    front: Arc<Front>,
    role: Role,
    grace: Duration,
    mut stopped: watch::Receiver<Phase>,
    let_go: oneshot::Sender<()>,
    (stage, staged): (watch::Sender<Stage>, watch::Receiver<Stage>),
) {
    // Every connection task holds a sender; all are gone once every connection ended.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    let connections = Connections {
        builders: Builders::new(),
        front,
        role,
        stage: staged,
        open,
    };
    let opened = stopped
        .wait_for(|phase| *phase != Phase::Waiting)
        .await
        .map(|phase| *phase);
    if matches!(opened, Ok(Phase::Accepting)) {
        accept(&listener, &connections, &mut stopped).await;
    }
    // Before the listener is let go (already so when every listener was told to drain
    // first): a connection's next answer says `Connection: close` once stopping to
    // accept has returned.
    drain(&stage);
    drop(listener);
    let _ = let_go.send(());
    drop(connections);
    let drained = tokio::time::timeout(grace, all_closed.recv()).await;
    if drained.is_err() {
        tracing::info!("shutdown grace period over; closing the remaining connections");
        stage.send_replace(Stage::Closing);
        let _ = tokio::time::timeout(CLOSE_WITHIN, all_closed.recv()).await;
    }
}

/// Accepts connections on `listener` until the phase is past accepting.
async fn accept(
    listener: &TcpListener,
    connections: &Connections,
    stopped: &mut watch::Receiver<Phase>,
) {
    let admission = &connections.front.connections.admission;
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut warnings = Throttle::every(ACCEPT_WARN_EVERY);
    let mut backing_off = stopped.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    accepted
                }
                Err(e) if is_per_connection(&e) => {
                    tracing::debug!(error = %e, "a connection failed while being accepted");
                    continue;
                }
                Err(e) => {
                    // Out of file descriptors (EMFILE, ENFILE) or memory: waiting is the
                    // only cure; retrying at once would spin and flood the log.
                    if let Some(more) = warnings.admit() {
                        tracing::warn!(
                            error = %e,
                            retry_in_ms = backoff.as_millis() as u64,
                            similar_since_last_warning = more,
                            "cannot accept connections; backing off (limits.max_connections \
                             below the open-file limit keeps this from happening)"
                        );
                    }
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = reached(&mut backing_off, |phase| *phase >= Phase::Draining) => return,
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            },
            _ = reached(stopped, |phase| *phase >= Phase::Draining) => return,
        };
        match admission.admit(peer.ip()) {
            Ok(admitted) => connections.spawn(stream, peer, admitted),
            Err(reason) => {
                tracing::debug!(peer = %peer, reason = ?reason, "connection refused: over a limit");
                drop(stream);
            }
        }
    }
}

/// What the connections of one listener share.
struct Connections {
    builders: Builders,
    front: Arc<Front>,
    role: Role,
    /// Draining connections finish and close; closing ones close.
    stage: watch::Receiver<Stage>,
    /// Held by every connection's task (the listener waits for all to end).
    open: mpsc::Sender<()>,
}

impl Connections {
    /// Serves one accepted connection in a task of its own: HTTP/1.1 on the proxy's own
    /// loop (`super::http1`) until a request it leaves to hyper, which then serves the
    /// rest of the connection (HTTP/2 from the start).
    fn spawn(&self, stream: TcpStream, peer: SocketAddr, admitted: Admitted) {
        let _ = stream.set_nodelay(true);
        let activity = Activity::new();
        let exchange = Exchange {
            front: self.front.clone(),
            role: self.role,
            stage: self.stage.clone(),
            activity: activity.clone(),
            peer: peer.ip(),
        };
        let io = Watched::new(stream, activity.clone());
        let builders = self.builders.clone();
        let limits = &self.front.connections;
        let (header_read, idle) = (limits.header_read_timeout, limits.idle_timeout);
        let metrics = limits.admission.metrics().clone();
        let mut stage = self.stage.clone();
        let open = self.open.clone();
        tokio::spawn(async move {
            let _admitted = admitted;
            let _open = open;
            let lean = {
                let exchange = exchange.clone();
                let stage = exchange.stage.clone();
                http1::serve(
                    io,
                    move |request| exchange.call(request),
                    move || *stage.borrow() >= Stage::Draining,
                )
            };
            let mut connection = Connection::Lean(Box::pin(lean));
            let mut draining = false;
            loop {
                let idle = if draining { idle.min(DRAIN_IDLE) } else { idle };
                // The connection first: it is what wakes the task, nearly every time.
                tokio::select! {
                    biased;
                    () = std::future::poll_fn(|cx| connection.poll(cx, &builders, &exchange)) => break,
                    reason = activity.expired(header_read, idle) => {
                        // Nothing is in flight: closing loses no answer.
                        tracing::debug!(peer = %peer, reason = ?reason, draining, "connection closed");
                        if !draining {
                            metrics.connection_closed(reason);
                        }
                        break;
                    }
                    // A stop; the grace period's end, or the listener gone.
                    changed = stage.changed() => match changed.map(|()| *stage.borrow_and_update()) {
                        Ok(Stage::Serving) => {}
                        Ok(Stage::Draining) => {
                            draining = true;
                            // HTTP/2 says GOAWAY; hyper's HTTP/1.1 with a response under
                            // way sends no keep-alive after it. The proxy's loop keeps what
                            // a response head written already promised; every head written
                            // from now on says `Connection: close`. An idle HTTP/1.1
                            // connection is left to its next response's `Connection:
                            // close`, or to DRAIN_IDLE.
                            if activity.is_http2() || activity.in_flight() {
                                connection.graceful_shutdown();
                            }
                        }
                        Ok(Stage::Closing) | Err(_) => break,
                    },
                }
            }
        });
    }
}

/// What serves one request of a connection: the front, as this listener serves it, with
/// who the client is.
#[derive(Clone)]
struct Exchange {
    front: Arc<Front>,
    role: Role,
    /// The listener's connections': a draining listener's last answer on a connection
    /// says `Connection: close`.
    stage: watch::Receiver<Stage>,
    activity: Arc<Activity>,
    peer: IpAddr,
}

impl Exchange {
    /// The answer to `request`, and what it keeps until it has been sent.
    fn call(
        &self,
        request: ClientRequest,
    ) -> impl Future<Output = (ClientResponse, Sending)> + Send + use<> {
        let http1 = request.version() < http::Version::HTTP_2;
        if !http1 {
            self.activity.http2();
        }
        let front = self.front.clone();
        let in_flight = self.activity.request();
        let (role, peer) = (self.role, self.peer);
        async move {
            let mut response = handle(front, request, role, peer).await;
            // A traced request's span ends with its body.
            let span = response.extensions_mut().remove::<Answered>();
            (response, Sending::new(in_flight, span))
        }
    }
}

/// How hyper serves the connections the proxy's loop hands it.
#[derive(Clone)]
struct Builders {
    /// HTTP/1.1 or HTTP/2, as the connection's first bytes say.
    any: auto::Builder<TokioExecutor>,
    /// HTTP/1.1 (a connection the loop served requests on already).
    http1: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new() -> Builders {
        let any = auto::Builder::new(TokioExecutor::new());
        Builders {
            http1: any.clone().http1_only(),
            any,
        }
    }
}

type Io = Watched<TcpStream>;
type LeanLoop = Pin<Box<dyn Future<Output = http1::Ended<Io>> + Send>>;
type HyperConnection =
    Pin<Box<auto::Connection<'static, TokioIo<http1::Rewind<Io>>, ByHyper, TokioExecutor>>>;
type Served =
    Pin<Box<dyn Future<Output = Result<Response<Tracked<ProxyBody>>, Infallible>> + Send>>;

/// The exchange as hyper's service: what the proxy's loop handed over.
#[derive(Clone)]
struct ByHyper(Exchange);

impl hyper::service::Service<Request<Incoming>> for ByHyper {
    type Response = Response<Tracked<ProxyBody>>;
    type Error = Infallible;
    type Future = Served;

    fn call(&self, request: Request<Incoming>) -> Served {
        let http1 = request.version() < http::Version::HTTP_2;
        let stage = self.0.stage.clone();
        let answer = self.0.call(Box::new(request.map(ClientBody::Hyper)));
        Box::pin(async move {
            let (response, sending) = answer.await;
            let mut response = (*response).map(|body| Tracked::new(body, sending));
            // Draining: this connection's last response (the client opens a new
            // connection, which another process accepts after a hand-over). The proxy's
            // own loop decides this where it writes a head (its `draining`); hyper's
            // HTTP/1.1 is told by the header; HTTP/2 by GOAWAY.
            if http1 && *stage.borrow() >= Stage::Draining {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response)
        })
    }
}

/// One connection as it is served: by the proxy's loop, then (if it hands the
/// connection over) by hyper.
enum Connection {
    Lean(LeanLoop),
    Hyper(HyperConnection),
}

impl Connection {
    /// Serves the connection; `Ready` once it is over (not to be polled again).
    fn poll(&mut self, cx: &mut Context<'_>, builders: &Builders, exchange: &Exchange) -> Poll<()> {
        loop {
            match self {
                Connection::Lean(lean) => match lean.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(http1::Ended::Closed) => return Poll::Ready(()),
                    Poll::Ready(http1::Ended::HandOff { io, read, fresh }) => {
                        let io = TokioIo::new(http1::Rewind::new(read, io));
                        // HTTP/2 only from a connection's start, as hyper's detection.
                        let builder = if fresh {
                            &builders.any
                        } else {
                            &builders.http1
                        };
                        let connection = builder
                            .serve_connection(io, ByHyper(exchange.clone()))
                            .into_owned();
                        *self = Connection::Hyper(Box::pin(connection));
                    }
                },
                Connection::Hyper(connection) => match connection.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(ended) => {
                        if let Err(e) = ended {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        return Poll::Ready(());
                    }
                },
            }
        }
    }

    /// No more requests after the one in flight (hyper: HTTP/1.1 without keep-alive,
    /// HTTP/2 GOAWAY). The proxy's loop needs no call: every response head it writes
    /// while draining says `Connection: close`.
    fn graceful_shutdown(&mut self) {
        if let Connection::Hyper(connection) = self {
            connection.as_mut().graceful_shutdown();
        }
    }
}

/// Serving → Draining, once: never back from Closing, and one change, so each
/// connection's task wakes once.
fn drain(stage: &watch::Sender<Stage>) {
    stage.send_if_modified(|stage| {
        let serving = *stage == Stage::Serving;
        if serving {
            *stage = Stage::Draining;
        }
        serving
    });
}

/// Resolves when `watched` holds a value that is `done`, or its sender is gone (a
/// listener dropped is a stopped one).
async fn reached<T: Copy>(watched: &mut watch::Receiver<T>, done: impl Fn(&T) -> bool) {
    let _ = watched.wait_for(done).await.map(|value| *value);
}

/// An accept error that concerns only the connection being accepted (it was reset or
/// aborted before the accept): the next accept may work at once.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
    )
}
