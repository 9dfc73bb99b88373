//! The replicas of one Streamable HTTP upstream: which one a new upstream session goes
//! to, and whether each is in rotation.
//!
//! A new upstream session goes to the healthy replica with the fewest live sessions (as
//! this proxy counts them: the ones it opened there and has not seen end); every later
//! message of that session goes to the replica that holds it, named in its [`Binding`]
//! by a [`ReplicaId`] — a hash of the replica's URL, so it means the same replica to
//! every proxy replica sharing the configuration, and after a reload that kept the URL.
//!
//! A replica leaves rotation for new sessions when a connection to it is refused or its
//! periodic probe (an `initialize`, then the probe's session ended) fails, and returns
//! when a probe succeeds. Sessions it already holds keep going to it: they live nowhere
//! else. With every replica out of rotation, new sessions still try them all, least
//! loaded first, rather than refusing outright.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use http::HeaderMap;
use sha2::{Digest, Sha256};

use super::error::UpstreamError;
use super::http::HttpUpstream;

/// A replica, named by the first 64 bits of the SHA-256 of its URL.
pub type ReplicaId = u64;

/// The id of the one "replica" of a stdio upstream (its children are in this process).
pub const LOCAL_REPLICA: ReplicaId = 0;

/// The id of the replica at `url`.
pub fn replica_id(url: &str) -> ReplicaId {
    let digest = Sha256::digest(url.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    // 0 is the stdio upstream's; a URL hashing to it is nudged (never in practice).
    u64::from_be_bytes(id).max(1)
}

/// One replica: its endpoint, its health, and the sessions this proxy holds on it.
#[derive(Debug)]
pub struct Replica {
    pub id: ReplicaId,
    pub http: HttpUpstream,
    healthy: AtomicBool,
    live: AtomicUsize,
}

impl Replica {
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Sessions this proxy opened on the replica and has not seen end.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// How logs, errors and metrics name it: its URL.
    pub fn label(&self) -> &Arc<str> {
        self.http.label()
    }

    /// Records a health verdict; logs a change.
    pub fn set_healthy(&self, healthy: bool, why: &dyn std::fmt::Display) {
        let was = self.healthy.swap(healthy, Ordering::AcqRel);
        match (was, healthy) {
            (true, false) => {
                tracing::warn!(replica = %self.label(), reason = %why, "upstream replica out of rotation")
            }
            (false, true) => {
                tracing::info!(replica = %self.label(), "upstream replica back in rotation")
            }
            _ => {}
        }
    }

    pub fn session_opened(&self) {
        self.live.fetch_add(1, Ordering::AcqRel);
    }

    pub fn session_ended(&self) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// The replicas of one upstream, in configuration order.
#[derive(Debug)]
pub struct Replicas {
    replicas: Vec<Arc<Replica>>,
    label: Arc<str>,
}

impl Replicas {
    pub fn new(endpoints: Vec<HttpUpstream>) -> Replicas {
        let label = endpoints
            .iter()
            .map(|e| e.label().as_ref())
            .collect::<Vec<_>>()
            .join(", ")
            .into();
        let replicas = endpoints
            .into_iter()
            .map(|http| {
                Arc::new(Replica {
                    id: replica_id(http.label()),
                    http,
                    healthy: AtomicBool::new(true),
                    live: AtomicUsize::new(0),
                })
            })
            .collect();
        Replicas { replicas, label }
    }

    /// Every replica's URL, comma-separated (one replica: its URL).
    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    pub fn all(&self) -> &[Arc<Replica>] {
        &self.replicas
    }

    /// The replica with this id, if it is configured.
    pub fn get(&self, id: ReplicaId) -> Option<&Arc<Replica>> {
        self.replicas.iter().find(|r| r.id == id)
    }

    /// The replica that holds a session, or the session is gone (its replica was removed
    /// from the configuration).
    pub fn holding(&self, id: ReplicaId) -> Result<&Arc<Replica>, UpstreamError> {
        self.get(id).ok_or(UpstreamError::SessionGone)
    }

    /// The order in which to try replicas for a new session: healthy ones by fewest live
    /// sessions (configuration order breaks ties), then the others the same way.
    pub fn preference(&self) -> Vec<Arc<Replica>> {
        let mut order: Vec<Arc<Replica>> = self.replicas.clone();
        order.sort_by_key(|r| (!r.healthy(), r.live()));
        order
    }

    /// Whether some replica is in rotation.
    pub fn any_healthy(&self) -> bool {
        self.replicas.iter().any(|r| r.healthy())
    }

    /// The first answer of `attempt` on each replica in [`Self::preference`] order that
    /// is not a refused connection; a refused replica is taken out of rotation.
    pub async fn first_reachable<T, F, Fut>(
        &self,
        mut attempt: F,
    ) -> Result<(ReplicaId, T), UpstreamError>
    where
        F: FnMut(Arc<Replica>) -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let mut last = UpstreamError::Unreachable("the upstream has no replicas".into());
        for replica in self.preference() {
            match attempt(replica.clone()).await {
                Ok(value) => return Ok((replica.id, value)),
                Err(UpstreamError::Unreachable(why)) => {
                    replica.set_healthy(false, &why);
                    last = UpstreamError::Unreachable(why);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Probes every replica at once: an `initialize` with the proxy's own identity, then
    /// the probe's session ended. Each verdict moves its replica in or out of rotation.
    pub async fn probe(&self) {
        let mut probes = tokio::task::JoinSet::new();
        for replica in &self.replicas {
            let replica = replica.clone();
            probes.spawn(async move {
                match replica.http.open(None, None, &HeaderMap::new()).await {
                    Ok(opened) => {
                        let binding = super::Binding {
                            replica: replica.id,
                            session_id: opened.session_id.as_deref(),
                            protocol_version: opened.negotiated.protocol_version,
                        };
                        let _ = replica.http.terminate(binding).await;
                        replica.set_healthy(true, &"probe succeeded");
                    }
                    Err(e) => replica.set_healthy(false, &e),
                }
            });
        }
        while probes.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Settings;
    use std::time::Duration;

    fn replicas(urls: &[&str]) -> Replicas {
        Replicas::new(
            urls.iter()
                .map(|url| {
                    HttpUpstream::new(
                        Settings {
                            url: url.parse().unwrap(),
                            connect_timeout: Duration::from_secs(1),
                            timeout: Duration::from_secs(1),
                            max_message_bytes: 1024,
                            idle_timeout: Duration::from_secs(30),
                            max_idle: 8,
                            withhold_authorization: false,
                        },
                        None,
                    )
                })
                .collect(),
        )
    }

    #[tokio::test]
    async fn new_sessions_prefer_healthy_replicas_with_fewer_sessions() {
        let r = replicas(&[
            "http://127.0.0.1:1/a",
            "http://127.0.0.1:1/b",
            "http://127.0.0.1:1/c",
        ]);
        let [a, b, c] = [&r.all()[0], &r.all()[1], &r.all()[2]];
        a.session_opened();
        a.session_opened();
        b.session_opened();
        let ids = |v: Vec<Arc<Replica>>| v.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(r.preference()), [c.id, b.id, a.id]);
        c.set_healthy(false, &"test");
        assert_eq!(ids(r.preference()), [b.id, a.id, c.id]);
        b.session_ended();
        b.session_ended(); // never below zero
        assert_eq!(b.live(), 0);
        assert!(r.any_healthy());
    }

    #[test]
    fn replica_ids_are_stable_per_url_and_never_the_local_one() {
        assert_eq!(replica_id("http://a/mcp"), replica_id("http://a/mcp"));
        assert_ne!(replica_id("http://a/mcp"), replica_id("http://b/mcp"));
        assert_ne!(replica_id("http://a/mcp"), LOCAL_REPLICA);
    }
}
