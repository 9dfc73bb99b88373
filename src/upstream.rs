//! Reaching an MCP server of any era: over Streamable HTTP (one shared endpoint, an
//! `Mcp-Session-Id` per legacy upstream session, none for a modern one), over HTTP+SSE
//! (2024-11-05: an event stream per upstream session, held by this process) or over stdio
//! (a child process per upstream session).
//!
//! One interface whatever the transport: [`Upstream::open`] runs the handshake,
//! [`Upstream::exchange`] sends a message in an upstream session and returns the
//! [`Answer`] as a stream of JSON-RPC messages, [`Upstream::terminate`] ends the
//! session. Whether the upstream lost a session is decided here, once
//! ([`UpstreamError::SessionGone`]). Only an old client passed through gets the raw HTTP
//! response ([`Upstream::forward`]), and only an HTTP upstream has that way in.
//!
//! An upstream session is one owned value ([`UpstreamSession`]): whoever opened it holds
//! it, and it ends itself (through the process's [`Endings`]) when dropped, unless its new
//! owner keeps it ([`UpstreamSession::keep`]: a session record, which ends it by its own
//! delete, expiry or loss). So a caller that walks away at any await point — during the
//! handshake, between the handshake and the record, during a call — leaks nothing.
//!
//! An HTTP+SSE session and a stdio child live in this process ([`Upstream::is_process_local`]):
//! both transports carry every message of a session on one stream, and match what comes
//! back to the requests waiting for it in one place (`demux`).
//!
//! This module knows the transports' rules (headers, the handshake, stdio framing and
//! process lifetimes, the HTTP+SSE endpoint) and nothing of data-layer sessions: callers
//! hand it an upstream session to speak in (its [`SessionAddr`]), or none.

pub(crate) mod answer;
mod connections;
pub mod credentials;
mod demux;
mod discover;
mod endings;
mod era;
mod error;
mod handshake;
mod http;
mod http_sse;
pub mod ids;
mod lost;
mod passed;
mod pins;
mod pool;
mod read;
mod replicas;
mod session;
mod stdio;

use std::sync::Arc;
use std::time::Duration;

use ::http::{HeaderMap, Method};
use bytes::Bytes;
use serde_json::value::RawValue;

use crate::mcp::initialize::Negotiated;
use discover::Found;

pub use answer::{Answer, Delivery, Messages};
pub use connections::{UpstreamBody, UpstreamResponse};
pub use endings::{Ending, Endings};
pub use era::Era;
pub use error::{ChildError, ChildFailure, ExitStatus, UpstreamError};
pub use http::{HttpUpstream, SessionAddr, Settings};
pub use http_sse::{BadEndpoint, Frame, SseSessions, frame, resolve_endpoint};
pub use lost::Probed;
pub use passed::Passed;
pub use pins::{PinSettings, Pinned, Pins};
pub use pool::{Checkout, Pool, PoolSettings, capabilities_key, hear_every_log};
pub use read::{Media, media_type};
pub use replicas::{LOCAL_REPLICA, Replica, ReplicaId, Replicas, replica_id};
pub use session::{Kept, UpstreamSession};
pub use stdio::{CommandSpec, StdioSettings, StdioUpstream, is_proxy_setting};

/// The server behind the proxy: how it is reached, and where the upstream sessions it
/// lets go of are ended. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Upstream {
    transport: Transport,
    /// The process's executor ending upstream sessions in the background.
    endings: Arc<Endings>,
}

/// How the server is reached.
#[derive(Debug, Clone)]
enum Transport {
    /// A Streamable HTTP server, one or more replicas of it.
    Http(Arc<Replicas>),
    Stdio(Arc<StdioUpstream>),
}

/// One replica as the operations endpoints show it.
#[derive(Debug, Clone)]
pub struct ReplicaState {
    pub id: ReplicaId,
    /// Its URL (the stdio command).
    pub label: Arc<str>,
    /// In rotation for new sessions.
    pub healthy: bool,
    /// Upstream sessions this proxy holds on it.
    pub live: usize,
    /// What it speaks, once found.
    pub era: Option<Era>,
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
        match &self.transport {
            Transport::Http(replicas) => replicas.label(),
            Transport::Stdio(stdio) => stdio.label(),
        }
    }

    /// Time allowed for an answer to begin.
    pub fn timeout(&self) -> Duration {
        match &self.transport {
            Transport::Http(replicas) => replicas.all()[0].http.settings().timeout,
            Transport::Stdio(stdio) => stdio.settings().timeout,
        }
    }

    /// Largest single message accepted from the upstream.
    pub fn max_message_bytes(&self) -> usize {
        match &self.transport {
            Transport::Http(replicas) => replicas.all()[0].http.settings().max_message_bytes,
            Transport::Stdio(stdio) => stdio.settings().max_message_bytes,
        }
    }

    /// The upstream served by `replicas`, its sessions ended through `endings`.
    pub fn http(replicas: Arc<Replicas>, endings: Arc<Endings>) -> Upstream {
        Upstream {
            transport: Transport::Http(replicas),
            endings,
        }
    }

    /// The upstream run as `stdio` children, its sessions ended through `endings`.
    pub fn stdio(stdio: Arc<StdioUpstream>, endings: Arc<Endings>) -> Upstream {
        Upstream {
            transport: Transport::Stdio(stdio),
            endings,
        }
    }

    /// Where this upstream's sessions are ended in the background.
    pub fn endings(&self) -> &Arc<Endings> {
        &self.endings
    }

    /// The HTTP replicas, when the upstream is reached over HTTP.
    pub fn replicas(&self) -> Option<&Arc<Replicas>> {
        match &self.transport {
            Transport::Http(replicas) => Some(replicas),
            Transport::Stdio(_) => None,
        }
    }

    /// The era new work goes to (see [`Replicas::era`]); `None` until it is found.
    pub fn era(&self) -> Option<Era> {
        match &self.transport {
            Transport::Http(replicas) => replicas.era(),
            Transport::Stdio(stdio) => stdio.era(),
        }
    }

    /// The era new work goes to, found now for the replicas in rotation whose era is not
    /// known (all of them at the upstream's first use, concurrently; one found again
    /// after an answer in another era). A replica that cannot be reached leaves rotation
    /// until its probe finds it again, so a replica that is down costs no request a wait.
    pub async fn find_era(&self) -> Result<Era, UpstreamError> {
        let replicas = match &self.transport {
            Transport::Http(replicas) => replicas,
            Transport::Stdio(stdio) => return stdio.find_era().await,
        };
        let unknown: Vec<Arc<Replica>> = replicas
            .all()
            .iter()
            .filter(|r| r.era().is_none() && r.healthy())
            .cloned()
            .collect();
        if unknown.is_empty()
            && let Some(era) = replicas.era()
        {
            return Ok(era);
        }
        let mut last = UpstreamError::Unreachable("no replica of the upstream answered".into());
        let mut probes = tokio::task::JoinSet::new();
        // Every replica whose era is unknown, or (none in rotation) every one.
        let probed = if unknown.is_empty() {
            replicas.all().to_vec()
        } else {
            unknown
        };
        for replica in probed {
            probes.spawn(async move {
                let found = replica.find_era().await;
                if let Err(UpstreamError::Unreachable(why)) = &found {
                    replica.set_healthy(false, why);
                }
                found
            });
        }
        while let Some(done) = probes.join_next().await {
            if let Ok(Err(e)) = done {
                last = e;
            }
        }
        replicas.era().ok_or(last)
    }

    /// Opens an upstream session with the client's identity (or the proxy's own), on the
    /// healthy replica with the fewest live sessions among those speaking the era new
    /// work goes to (a replica refusing the connection is taken out of rotation and the
    /// next one tried): a legacy one by the `initialize` handshake; a modern one holds no
    /// session upstream, and only names the replica and what its `server/discover` said.
    /// The session is owned from the moment the upstream has it: dropped before the
    /// handshake is complete (the caller left, the acknowledgement failed), it is ended.
    /// A replica that refuses `initialize` as only a modern server would is probed again,
    /// and the session opened in the era it speaks now.
    pub async fn open(
        &self,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<UpstreamSession, UpstreamError> {
        let replicas = match &self.transport {
            Transport::Http(replicas) => replicas,
            Transport::Stdio(stdio) => {
                let opened = stdio.open(client_info, capabilities).await?;
                return Ok(UpstreamSession::new(self.clone(), opened));
            }
        };
        let mut retried = false;
        loop {
            let era = self.find_era().await?;
            let opened = replicas
                .first_reachable(Some(era), |replica| async move {
                    self.open_on(
                        replicas,
                        &replica,
                        era,
                        client_info,
                        capabilities,
                        forwarded,
                    )
                    .await
                })
                .await;
            match opened {
                Err(e) if !retried && e.is_modern_refusal() => {
                    // The replica was replaced by a modern server: found again, then
                    // opened in that era.
                    for replica in replicas.all() {
                        if replica.era() == Some(Era::Legacy) {
                            replica.era_in_doubt();
                        }
                    }
                    retried = true;
                }
                opened => return opened.map(|(_, session)| session),
            }
        }
    }

    /// Opens a session of `era` on `replica` (one of `replicas`).
    async fn open_on(
        &self,
        replicas: &Replicas,
        replica: &Arc<Replica>,
        era: Era,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<UpstreamSession, UpstreamError> {
        match era {
            Era::Legacy => {
                let opened = replica
                    .http
                    .initialize(client_info, capabilities, forwarded)
                    .await?;
                replica.session_opened();
                let session = UpstreamSession::new(self.clone(), opened);
                replica
                    .http
                    .initialized(session.addr(), forwarded.clone())
                    .await?;
                Ok(session)
            }
            Era::Modern => {
                let negotiated = replica
                    .discovered()
                    .unwrap_or_else(|| Arc::new(Negotiated::modern_unknown()));
                replica.session_opened();
                Ok(UpstreamSession::stateless(
                    self.clone(),
                    replica.id,
                    negotiated,
                ))
            }
            Era::Sse => {
                let opened = replicas
                    .sse()
                    .open(replica, client_info, capabilities, forwarded)
                    .await;
                let session = UpstreamSession::new(self.clone(), health(replica, opened)?);
                let key = session.id().unwrap_or_default();
                let acked = replicas.sse().initialized(key, forwarded).await;
                health(replica, acked)?;
                Ok(session)
            }
        }
    }

    /// Sends one message in an upstream session; its answer, as messages.
    pub async fn exchange(
        &self,
        binding: SessionAddr<'_>,
        message: impl Into<ids::Outgoing>,
        forwarded: HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let message = message.into();
        match &self.transport {
            Transport::Http(replicas) => {
                let replica = replicas.holding(binding.replica)?;
                let answer = match sse_key(binding) {
                    Some(key) => {
                        let message = message.into_body();
                        replicas.sse().exchange(key, message, &forwarded).await
                    }
                    None => replica.http.exchange(binding, message, forwarded).await,
                };
                health(replica, answer)
            }
            Transport::Stdio(stdio) => {
                let key = binding.session_id.ok_or(UpstreamError::SessionGone)?;
                stdio.exchange(key, message.into_body()).await
            }
        }
    }

    /// Tells the upstream that the request whose answer `messages` holds is off
    /// (2025-11-25 "Cancellation"), naming it by the id the upstream knows (`client_id`
    /// is the id the client gave it). Nothing is sent for a request already answered.
    pub async fn cancel(
        &self,
        binding: SessionAddr<'_>,
        messages: &Messages,
        client_id: &[u8],
        reason: &str,
        forwarded: &HeaderMap,
    ) {
        let sent = match (&self.transport, sse_key(binding)) {
            // An HTTP+SSE session names the request by the client's id until it answers.
            (Transport::Http(replicas), Some(key)) => {
                let cancellation = ids::cancellation(client_id, reason);
                replicas
                    .sse()
                    .exchange(key, cancellation, forwarded)
                    .await
                    .map(drop)
            }
            (Transport::Http(replicas), None) => {
                let Some(ours) = messages.upstream_request_id() else {
                    return;
                };
                let notification = ids::cancellation(ours, reason);
                match replicas.holding(binding.replica) {
                    Ok(replica) => replica
                        .http
                        .post(Some(binding), notification, forwarded.clone())
                        .await
                        .map(drop),
                    Err(e) => Err(e),
                }
            }
            // The child names the request by the client's id until it answers.
            (Transport::Stdio(stdio), _) => match binding.session_id {
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

    /// The upstream session's own stream of server messages (the GET stream over
    /// Streamable HTTP, the messages no request claims of an HTTP+SSE session or a stdio
    /// child).
    pub async fn listen(
        &self,
        binding: SessionAddr<'_>,
        forwarded: &HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        match &self.transport {
            Transport::Http(replicas) => {
                if let Some(key) = sse_key(binding) {
                    return replicas.sse().listen(key);
                }
                let replica = replicas.holding(binding.replica)?;
                health(replica, replica.http.listen(binding, forwarded).await)
            }
            Transport::Stdio(stdio) => {
                let key = binding.session_id.ok_or(UpstreamError::SessionGone)?;
                stdio.listen(key)
            }
        }
    }

    /// Passes an old client's request on as it is (the client's fields that pass,
    /// `passed`) to `replica` and returns the raw response.
    pub async fn forward(
        &self,
        replica: ReplicaId,
        method: Method,
        passed: &Passed<'_>,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        match &self.transport {
            Transport::Http(replicas) => {
                let replica = replicas.holding(replica)?;
                health(replica, replica.http.forward(method, passed, body).await)
            }
            Transport::Stdio(_) => Err(UpstreamError::Protocol(
                "a stdio server has no session-less way in".into(),
            )),
        }
    }

    /// Whether `response` (from [`Upstream::forward`], to an old client's request naming
    /// a session no proxy learned) says the replica does not know that session, in any
    /// of the ways [`lost`] recognises.
    pub async fn probe_answer(&self, response: UpstreamResponse) -> Result<Probed, UpstreamError> {
        lost::probe(response, self.max_message_bytes(), self.timeout()).await
    }

    /// The one replica, when there is exactly one (HTTP).
    pub fn single_replica(&self) -> Option<ReplicaId> {
        match &self.transport {
            Transport::Http(replicas) => match replicas.all() {
                [only] => Some(only.id),
                _ => None,
            },
            Transport::Stdio(_) => None,
        }
    }

    /// The replicas in the order new work would try them (HTTP only): those speaking the
    /// era new work goes to (all of them while no era is known).
    pub fn preference(&self) -> Vec<Arc<Replica>> {
        match &self.transport {
            Transport::Http(replicas) => {
                let era = replicas.era();
                replicas
                    .preference()
                    .into_iter()
                    .filter(|r| era.is_none() || r.era() == era)
                    .collect()
            }
            Transport::Stdio(_) => Vec::new(),
        }
    }

    /// Ends an upstream session.
    pub async fn terminate(&self, binding: SessionAddr<'_>) -> Result<(), UpstreamError> {
        if self.end_at_once(binding) {
            return Ok(());
        }
        match &self.transport {
            Transport::Http(replicas) => {
                let Some(replica) = replicas.get(binding.replica) else {
                    return Ok(());
                };
                replica.session_ended();
                replica.http.terminate(binding).await
            }
            Transport::Stdio(stdio) => {
                if let Some(key) = binding.session_id {
                    stdio.terminate(key).await;
                }
                Ok(())
            }
        }
    }

    /// Forgets an upstream session that ended on its own (a stdio child that died, an
    /// HTTP upstream that lost it).
    pub fn forget(&self, binding: SessionAddr<'_>) {
        if self.end_at_once(binding) {
            return;
        }
        match &self.transport {
            Transport::Http(replicas) => {
                if let Some(replica) = replicas.get(binding.replica) {
                    replica.session_ended();
                }
            }
            Transport::Stdio(stdio) => {
                if let Some(key) = binding.session_id {
                    stdio.forget(key);
                }
            }
        }
    }

    /// Names an upstream session after the data-layer session it serves, where the
    /// upstream logs per session (a stdio child's stderr).
    pub fn label_session(&self, binding: SessionAddr<'_>, label: impl FnOnce() -> String) {
        if let (Transport::Stdio(stdio), Some(key)) = (&self.transport, binding.session_id) {
            stdio.label_session(key, label());
        }
    }

    /// The stdio children, for the metrics; `None` for an HTTP upstream.
    pub fn children(&self) -> Option<Children> {
        match &self.transport {
            Transport::Http(_) => None,
            Transport::Stdio(stdio) => Some(Children {
                pooled: stdio.pooled(),
                live: stdio.live_children(),
            }),
        }
    }

    /// Whether the upstream can take new sessions (for readiness): some replica is in
    /// rotation, or stdio children can be started.
    pub fn reachable(&self) -> bool {
        match &self.transport {
            Transport::Http(replicas) => replicas.any_healthy(),
            Transport::Stdio(stdio) => stdio.healthy(),
        }
    }

    /// Each replica (the stdio command: one), for readiness, metrics and the admin API.
    pub fn replica_states(&self) -> Vec<ReplicaState> {
        match &self.transport {
            Transport::Http(replicas) => replicas
                .all()
                .iter()
                .map(|r| ReplicaState {
                    id: r.id,
                    label: r.label().clone(),
                    healthy: r.healthy(),
                    live: r.live(),
                    era: r.era(),
                })
                .collect(),
            Transport::Stdio(stdio) => vec![ReplicaState {
                id: LOCAL_REPLICA,
                label: stdio.label().clone(),
                healthy: stdio.healthy(),
                live: stdio.live_children(),
                era: self.era(),
            }],
        }
    }

    /// Probes every replica at once (HTTP): its era is found again (`server/discover`, as
    /// a client of every era would find it; a pinned era is kept), and a legacy replica
    /// is asked for a session too — an `initialize` with the proxy's own identity, the
    /// session ended at once. Each verdict moves its replica in or out of rotation. A
    /// stdio upstream is judged by its last start.
    pub async fn probe(&self) {
        let Transport::Http(replicas) = &self.transport else {
            return;
        };
        let mut probes = tokio::task::JoinSet::new();
        for replica in replicas.all() {
            let (replica, upstream) = (replica.clone(), self.clone());
            probes.spawn(async move {
                let verdict = upstream.probe_one(&replica).await;
                match verdict {
                    Ok(()) => replica.set_healthy(true, &"probe succeeded"),
                    Err(e) => replica.set_healthy(false, &e),
                }
            });
        }
        while probes.join_next().await.is_some() {}
    }

    async fn probe_one(&self, replica: &Replica) -> Result<(), UpstreamError> {
        let era = match replica.era().filter(|_| replica.era_is_pinned()) {
            // Pinned, the era is not asked for; whether the replica serves in it is.
            Some(Era::Modern) => {
                return match replica.http.discover().await? {
                    Found::Modern(_) => Ok(()),
                    Found::Legacy | Found::Sse => Err(UpstreamError::Protocol(
                        "the replica does not answer server/discover as a 2026-07-28 server".into(),
                    )),
                };
            }
            Some(Era::Sse) => {
                return match replica.http.names_an_endpoint().await? {
                    true => Ok(()),
                    false => Err(UpstreamError::Protocol(
                        "the replica's event stream names no endpoint".into(),
                    )),
                };
            }
            Some(Era::Legacy) => Era::Legacy,
            None => replica.rediscover().await?,
        };
        if era != Era::Legacy {
            // A modern replica answered `server/discover`, an HTTP+SSE one named its
            // endpoint: both are serving.
            return Ok(());
        }
        let headers = HeaderMap::new();
        let opened = replica.http.initialize(None, None, &headers).await?;
        replica.session_opened();
        // Owned at once: a probe stopped half-way still ends its session.
        let session = UpstreamSession::new(self.clone(), opened);
        let acked = replica.http.initialized(session.addr(), headers).await;
        session.end().await;
        acked
    }

    /// Whether the upstream's sessions may live in this process (stdio children; the
    /// streams of HTTP+SSE sessions, once a replica is found to speak that era or holds
    /// such a session): messages of such a session must reach the proxy replica that
    /// holds them. Which sessions do is [`Upstream::holds_in_process`]'s to say.
    pub fn is_process_local(&self) -> bool {
        match &self.transport {
            Transport::Http(replicas) => {
                !replicas.sse().is_empty()
                    || replicas.all().iter().any(|r| r.era() == Some(Era::Sse))
            }
            Transport::Stdio(_) => true,
        }
    }

    /// Whether the upstream session at `binding` lives in this process (a stdio child, an
    /// HTTP+SSE session's stream).
    pub fn holds_in_process(&self, binding: SessionAddr<'_>) -> bool {
        match &self.transport {
            Transport::Http(_) => sse_key(binding).is_some(),
            Transport::Stdio(_) => true,
        }
    }

    /// Ends the upstream session at `binding` now, if that needs nothing of the upstream
    /// (an HTTP+SSE session: its stream is closed); whether it was such a session.
    pub fn end_at_once(&self, binding: SessionAddr<'_>) -> bool {
        match (&self.transport, sse_key(binding)) {
            (Transport::Http(replicas), Some(key)) => {
                replicas.sse().end(key);
                true
            }
            _ => false,
        }
    }

    /// Stops what the upstream runs for the proxy: stdio children, the streams of
    /// HTTP+SSE sessions.
    pub async fn shutdown(&self) {
        match &self.transport {
            Transport::Http(replicas) => replicas.sse().end_all(),
            Transport::Stdio(stdio) => stdio.shutdown().await,
        }
    }
}

/// The proxy's key of the HTTP+SSE session at `binding`, if it is one.
fn sse_key<'a>(binding: SessionAddr<'a>) -> Option<&'a str> {
    binding.session_id.filter(|id| http_sse::is_key(id))
}

/// A refused connection takes the replica out of rotation.
fn health<T>(replica: &Replica, result: Result<T, UpstreamError>) -> Result<T, UpstreamError> {
    if let Err(UpstreamError::Unreachable(why)) = &result {
        replica.set_healthy(false, why);
    }
    result
}
