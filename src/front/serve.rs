//! Accepting connections and shutting down gracefully.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Front, handle};

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
        loop {
            let (stream, _peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stopped.changed() => break,
            };
            let _ = stream.set_nodelay(true);
            let front = front.clone();
            let service = service_fn(move |request| {
                let front = front.clone();
                async move { Ok::<_, Infallible>(handle(front, request, role).await) }
            });
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let connection = graceful.watch(connection.into_owned());
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "connection ended with an error");
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
