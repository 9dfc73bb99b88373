//! Accepting connections and shutting down gracefully.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::admission::Admission;
use super::watchdog::{Activity, Tracked, Watched};
use super::{Front, handle};
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

/// The address a request's connection came from, in the request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// A running listener.
#[derive(Debug)]
pub struct Serving {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Serving {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets in-flight requests finish for up to the grace period, then
    /// closes what is left.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
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

/// Serves `front` on `listener` (HTTP/1.1 and HTTP/2 cleartext) until shut down.
pub fn serve(
    listener: TcpListener,
    front: Arc<Front>,
    role: Role,
    grace: Duration,
) -> std::io::Result<Serving> {
    let local_addr = listener.local_addr()?;
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let builder = auto::Builder::new(TokioExecutor::new());
        let graceful = GracefulShutdown::new();
        let limits = front.connections.clone();
        let mut backoff = ACCEPT_BACKOFF_MIN;
        let mut warnings = Throttle::every(ACCEPT_WARN_EVERY);
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
                            _ = stopped.changed() => break,
                        }
                        backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                        continue;
                    }
                },
                _ = stopped.changed() => break,
            };
            let admitted = match limits.admission.admit(peer.ip()) {
                Ok(admitted) => admitted,
                Err(reason) => {
                    tracing::debug!(peer = %peer, reason = ?reason, "connection refused: over a limit");
                    drop(stream);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let activity = Activity::new();
            let front = front.clone();
            let service = service_fn({
                let activity = activity.clone();
                move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ClientAddr(peer.ip()));
                    let front = front.clone();
                    let in_flight = activity.request();
                    async move {
                        let response = handle(front, request, role).await;
                        Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
                    }
                }
            });
            let io = TokioIo::new(Watched::new(stream, activity.clone()));
            let connection = builder.serve_connection(io, service);
            let connection = graceful.watch(connection.into_owned());
            let (header_read, idle) = (limits.header_read_timeout, limits.idle_timeout);
            let metrics = limits.admission.metrics().clone();
            tokio::spawn(async move {
                let _admitted = admitted;
                tokio::select! {
                    ended = connection => {
                        if let Err(e) = ended {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    }
                    reason = activity.expired(header_read, idle) => {
                        // Nothing is in flight: closing loses no answer.
                        tracing::debug!(peer = %peer, reason = ?reason, "connection closed");
                        metrics.connection_closed(reason);
                    }
                }
            });
        }
        drop(listener);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = tokio::time::sleep(grace) => {
                tracing::info!("shutdown grace period over; closing the remaining connections");
            }
        }
    });
    Ok(Serving {
        local_addr,
        stop,
        task,
    })
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
