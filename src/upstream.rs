//! Reaching a legacy (2025-11-25, `initialize`-based) MCP server: over Streamable HTTP
//! (one shared endpoint, an `Mcp-Session-Id` per upstream session) or over stdio (a child
//! process per upstream session).
//!
//! One interface whatever the transport: [`Upstream::open`] runs the handshake,
//! [`Upstream::exchange`] sends a message in an upstream session and returns the
//! [`Answer`] as a stream of JSON-RPC messages, [`Upstream::terminate`] ends the
//! session. Whether the upstream lost a session is decided here, once
//! ([`UpstreamError::SessionGone`]). Only an old client passed through gets the raw HTTP
//! response ([`Upstream::forward`]), and only an HTTP upstream has that way in.
//!
//! This module knows the legacy transports' rules (headers, the handshake, stdio framing
//! and process lifetimes) and nothing of data-layer sessions: callers hand it an upstream
//! session to speak in (a [`Binding`]), or none.

pub(crate) mod answer;
mod connections;
mod endings;
mod error;
mod handshake;
mod http;
mod ids;
mod lost;
mod pins;
mod pool;
mod read;
mod replicas;
mod stdio;

use std::sync::Arc;
use std::time::Duration;

use ::http::{HeaderMap, Method, Response};
use bytes::Bytes;
use serde_json::value::RawValue;

pub use answer::{Answer, Delivery, Messages};
pub use connections::UpstreamBody;
pub use endings::{Ending, Endings};
pub use error::{ChildError, ChildFailure, ExitStatus, UpstreamError};
pub use handshake::Opened;
pub use http::{Binding, HttpUpstream, Settings};
pub use lost::Probed;
pub use pins::{PinSettings, Pinned, Pins};
pub use pool::{Checkout, Pool, PoolSettings, capabilities_key, hear_every_log};
pub use read::{Media, media_type};
pub use replicas::{LOCAL_REPLICA, Replica, ReplicaId, Replicas, replica_id};
pub use stdio::{CommandSpec, StdioSettings, StdioUpstream};

/// The legacy server behind the proxy.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A Streamable HTTP server, one or more replicas of it.
    Http(Arc<Replicas>),
    Stdio(Arc<StdioUpstream>),
}

/// How many stdio children there are, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Children {
    /// Started and initialized, waiting in the warm pool.
    pub pooled: usize,
    /// Alive, pooled or serving a session.
    pub live: usize,
}

impl Upstream {
    /// How errors, logs and metrics name the upstream.
    pub fn label(&self) -> &Arc<str> {
        match self {
            Upstream::Http(replicas) => replicas.label(),
            Upstream::Stdio(stdio) => stdio.label(),
        }
    }

    /// Time allowed for an answer to begin.
    pub fn timeout(&self) -> Duration {
        match self {
            Upstream::Http(replicas) => replicas.all()[0].http.settings().timeout,
            Upstream::Stdio(stdio) => stdio.settings().timeout,
        }
    }

    /// Largest single message accepted from the upstream.
    pub fn max_message_bytes(&self) -> usize {
        match self {
            Upstream::Http(replicas) => replicas.all()[0].http.settings().max_message_bytes,
            Upstream::Stdio(stdio) => stdio.settings().max_message_bytes,
        }
    }

    /// Whether a message outside any upstream session can reach the upstream (an old
    /// client passed through). A stdio server's sessions are its processes: it has none.
    pub fn has_sessionless_way_in(&self) -> bool {
        matches!(self, Upstream::Http(_))
    }

    /// Opens an upstream session with the client's identity (or the proxy's own), on the
    /// healthy replica with the fewest live sessions (a replica refusing the connection is
    /// taken out of rotation and the next one tried).
    pub async fn open(
        &self,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<Opened, UpstreamError> {
        match self {
            Upstream::Http(replicas) => {
                let (_, opened) = replicas
                    .first_reachable(|replica| async move {
                        let opened = replica
                            .http
                            .open(client_info, capabilities, forwarded)
                            .await?;
                        replica.session_opened();
                        Ok(opened)
                    })
                    .await?;
                Ok(opened)
            }
            Upstream::Stdio(stdio) => stdio.open(client_info, capabilities).await,
        }
    }

    /// Sends one message in an upstream session; its answer, as messages.
    pub async fn exchange(
        &self,
        binding: Binding<'_>,
        message: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        match self {
            Upstream::Http(replicas) => {
                let replica = replicas.holding(binding.replica)?;
                let answer = replica.http.exchange(binding, message, forwarded).await;
                health(replica, answer)
            }
            Upstream::Stdio(stdio) => {
                let key = binding.session_id.ok_or(UpstreamError::SessionGone)?;
                stdio.exchange(key, message).await
            }
        }
    }

    /// Tells the upstream that the request whose answer `messages` holds is off
    /// (2025-11-25 "Cancellation"), naming it by the id the upstream knows (`client_id`
    /// is the id the client gave it). Nothing is sent for a request already answered.
    pub async fn cancel(
        &self,
        binding: Binding<'_>,
        messages: &Messages,
        client_id: &[u8],
        reason: &str,
        forwarded: &HeaderMap,
    ) {
        let sent = match self {
            Upstream::Http(replicas) => {
                let Some(ours) = messages.upstream_request_id() else {
                    return;
                };
                let notification = ids::cancellation(ours, reason);
                match replicas.holding(binding.replica) {
                    Ok(replica) => replica
                        .http
                        .post(Some(binding), notification, forwarded)
                        .await
                        .map(drop),
                    Err(e) => Err(e),
                }
            }
            // The child names the request by the client's id until it answers.
            Upstream::Stdio(stdio) => match binding.session_id {
                Some(key) => stdio
                    .exchange(key, ids::cancellation(client_id, reason))
                    .await
                    .map(drop),
                None => Ok(()),
            },
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "could not cancel an upstream request");
        }
    }

    /// The upstream session's own stream of server messages (the GET stream over HTTP,
    /// the messages no request claims of a stdio child).
    pub async fn listen(
        &self,
        binding: Binding<'_>,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        match self {
            Upstream::Http(replicas) => {
                let replica = replicas.holding(binding.replica)?;
                health(replica, replica.http.listen(binding, forwarded).await)
            }
            Upstream::Stdio(stdio) => {
                let key = binding.session_id.ok_or(UpstreamError::SessionGone)?;
                stdio.listen(key)
            }
        }
    }

    /// Passes an old client's request on as it is to `replica` and returns the raw
    /// response.
    pub async fn forward(
        &self,
        replica: ReplicaId,
        method: Method,
        forwarded: &HeaderMap,
        body: Bytes,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        match self {
            Upstream::Http(replicas) => {
                let replica = replicas.holding(replica)?;
                health(replica, replica.http.forward(method, forwarded, body).await)
            }
            Upstream::Stdio(_) => Err(UpstreamError::Protocol(
                "a stdio server has no session-less way in".into(),
            )),
        }
    }

    /// Whether `response` (from [`Upstream::forward`], to an old client's request naming
    /// a session no proxy learned) says the replica does not know that session, in any
    /// of the ways [`lost`] recognises.
    pub async fn probe_answer(
        &self,
        response: Response<UpstreamBody>,
    ) -> Result<Probed, UpstreamError> {
        lost::probe(response, self.max_message_bytes(), self.timeout()).await
    }

    /// The one replica, when there is exactly one (HTTP).
    pub fn single_replica(&self) -> Option<ReplicaId> {
        match self {
            Upstream::Http(replicas) => match replicas.all() {
                [only] => Some(only.id),
                _ => None,
            },
            Upstream::Stdio(_) => None,
        }
    }

    /// The replicas in the order a new session would try them (HTTP only).
    pub fn preference(&self) -> Vec<Arc<Replica>> {
        match self {
            Upstream::Http(replicas) => replicas.preference(),
            Upstream::Stdio(_) => Vec::new(),
        }
    }

    /// Ends an upstream session.
    pub async fn terminate(&self, binding: Binding<'_>) -> Result<(), UpstreamError> {
        match self {
            Upstream::Http(replicas) => {
                let Some(replica) = replicas.get(binding.replica) else {
                    return Ok(());
                };
                replica.session_ended();
                replica.http.terminate(binding).await
            }
            Upstream::Stdio(stdio) => {
                if let Some(key) = binding.session_id {
                    stdio.terminate(key).await;
                }
                Ok(())
            }
        }
    }

    /// Forgets an upstream session that ended on its own (a stdio child that died, an
    /// HTTP upstream that lost it).
    pub fn forget(&self, binding: Binding<'_>) {
        match self {
            Upstream::Http(replicas) => {
                if let Some(replica) = replicas.get(binding.replica) {
                    replica.session_ended();
                }
            }
            Upstream::Stdio(stdio) => {
                if let Some(key) = binding.session_id {
                    stdio.forget(key);
                }
            }
        }
    }

    /// Names an upstream session after the data-layer session it serves, where the
    /// upstream logs per session (a stdio child's stderr).
    pub fn label_session(&self, binding: Binding<'_>, label: String) {
        if let (Upstream::Stdio(stdio), Some(key)) = (self, binding.session_id) {
            stdio.label_session(key, label);
        }
    }

    /// The stdio children, for the metrics; `None` for an HTTP upstream.
    pub fn children(&self) -> Option<Children> {
        match self {
            Upstream::Http(_) => None,
            Upstream::Stdio(stdio) => Some(Children {
                pooled: stdio.pooled(),
                live: stdio.live_children(),
            }),
        }
    }

    /// Whether the upstream can take new sessions (for readiness): some replica is in
    /// rotation, or stdio children can be started.
    pub fn reachable(&self) -> bool {
        match self {
            Upstream::Http(replicas) => replicas.any_healthy(),
            Upstream::Stdio(stdio) => stdio.healthy(),
        }
    }

    /// Each replica's URL and whether it is in rotation (HTTP), for readiness and metrics.
    pub fn replica_health(&self) -> Vec<(Arc<str>, bool, usize)> {
        match self {
            Upstream::Http(replicas) => replicas
                .all()
                .iter()
                .map(|r| (r.label().clone(), r.healthy(), r.live()))
                .collect(),
            Upstream::Stdio(stdio) => vec![(
                stdio.label().clone(),
                stdio.healthy(),
                stdio.live_children(),
            )],
        }
    }

    /// The replicas' ids, in the order of [`Self::replica_health`].
    pub fn replica_ids(&self) -> Vec<ReplicaId> {
        match self {
            Upstream::Http(replicas) => replicas.all().iter().map(|r| r.id).collect(),
            Upstream::Stdio(_) => vec![LOCAL_REPLICA],
        }
    }

    /// Probes every replica (HTTP); a stdio upstream is judged by its last start.
    pub async fn probe(&self) {
        if let Upstream::Http(replicas) = self {
            replicas.probe().await;
        }
    }

    /// Whether the upstream's sessions live in this process (stdio children): messages of
    /// such a session must reach the proxy replica that holds them.
    pub fn is_process_local(&self) -> bool {
        matches!(self, Upstream::Stdio(_))
    }

    /// Stops what the upstream runs for the proxy (stdio children).
    pub async fn shutdown(&self) {
        if let Upstream::Stdio(stdio) = self {
            stdio.shutdown().await;
        }
    }
}

/// A refused connection takes the replica out of rotation.
fn health<T>(replica: &Replica, result: Result<T, UpstreamError>) -> Result<T, UpstreamError> {
    if let Err(UpstreamError::Unreachable(why)) = &result {
        replica.set_healthy(false, why);
    }
    result
}
