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

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::discover::Found;
use super::era::{Change, Era, EraCell};
use super::error::UpstreamError;
use super::http::HttpUpstream;
use super::http_sse::SseSessions;
use crate::mcp::initialize::Negotiated;

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

/// One replica: its endpoint, its era, its health, and the sessions this proxy holds on
/// it.
#[derive(Debug)]
pub struct Replica {
    pub id: ReplicaId,
    pub http: HttpUpstream,
    healthy: AtomicBool,
    live: AtomicUsize,
    era: EraCell,
    /// What a modern replica's `server/discover` said (`None` until then, or when it
    /// answered with a refusal only).
    discovered: Mutex<Option<Arc<Negotiated>>>,
    /// One probe at a time finds the era.
    probing: tokio::sync::Mutex<()>,
}

impl Replica {
    /// What the replica speaks, if known.
    pub fn era(&self) -> Option<Era> {
        self.era.get()
    }

    /// Whether the operator pinned the replica's era (it is never probed for).
    pub fn era_is_pinned(&self) -> bool {
        self.era.is_pinned()
    }

    /// What a modern replica said of itself at `server/discover`.
    pub fn discovered(&self) -> Option<Arc<Negotiated>> {
        self.discovered.lock().clone()
    }

    /// The replica's era, probed for now if it is not known (one probe at a time; the
    /// others wait for its answer).
    pub async fn find_era(&self) -> Result<Era, UpstreamError> {
        if let Some(era) = self.era() {
            return Ok(era);
        }
        let _probing = self.probing.lock().await;
        if let Some(era) = self.era() {
            return Ok(era);
        }
        let found = self.http.discover().await?;
        Ok(self.learn(found))
    }

    /// Probes the replica's era again (a health probe), whatever was known.
    pub async fn rediscover(&self) -> Result<Era, UpstreamError> {
        let _probing = self.probing.lock().await;
        let found = self.http.discover().await?;
        Ok(self.learn(found))
    }

    /// Records what a probe found; a change of era is logged (the server was replaced).
    fn learn(&self, found: Found) -> Era {
        let era = match found {
            Found::Modern(negotiated) => {
                if let Some(negotiated) = negotiated {
                    *self.discovered.lock() = Some(Arc::new(negotiated));
                }
                Era::Modern
            }
            Found::Legacy => Era::Legacy,
            Found::Sse => Era::Sse,
        };
        if self.era.is_pinned() {
            return self.era.get().unwrap_or(era);
        }
        match self.era.set(era) {
            Change::Found => {
                tracing::info!(replica = %self.label(), era = era.name(), "upstream replica's era found")
            }
            Change::Changed { from } => {
                tracing::warn!(replica = %self.label(), era = era.name(), was = from.name(), "upstream replica now speaks another era (it was replaced); new sessions follow it")
            }
            Change::Same => {}
        }
        era
    }

    /// An answer said the replica is not what it was (a modern server answering like a
    /// legacy one, or the reverse): its era is found again at the next use.
    pub fn era_in_doubt(&self) {
        if self.era.get().is_some() && !self.era.is_pinned() {
            tracing::info!(replica = %self.label(), "an answer in another era: the upstream replica's era is probed again");
            self.era.forget();
        }
    }

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

/// The replicas of one upstream, in configuration order, and the HTTP+SSE sessions
/// this process holds on them.
#[derive(Debug)]
pub struct Replicas {
    replicas: Vec<Arc<Replica>>,
    label: Arc<str>,
    sse: SseSessions,
}

impl Replicas {
    /// The replicas at `endpoints`; `pinned`: the era the operator set for them (else each
    /// one's is found).
    pub fn new(endpoints: Vec<HttpUpstream>, pinned: Option<Era>) -> Replicas {
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
                    era: EraCell::new(pinned),
                    discovered: Mutex::new(None),
                    probing: tokio::sync::Mutex::new(()),
                })
            })
            .collect();
        Replicas {
            replicas,
            label,
            sse: SseSessions::default(),
        }
    }

    /// The replicas, reporting on `deaths` the key of every HTTP+SSE session whose stream
    /// ends on its own (as a stdio upstream reports its children that die).
    pub fn reporting_deaths(self, deaths: tokio::sync::mpsc::UnboundedSender<String>) -> Self {
        self.sse.report_deaths(deaths);
        self
    }

    /// The HTTP+SSE sessions this process holds on the replicas.
    pub fn sse(&self) -> &SseSessions {
        &self.sse
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

    /// The era new work goes to: the newest one a healthy replica is known to speak (a
    /// fleet in migration moves forward as its replicas do); with none healthy, the newest
    /// one any replica is known to speak. `None` until some replica's era is found.
    pub fn era(&self) -> Option<Era> {
        let newest = |healthy_only: bool| {
            self.replicas
                .iter()
                .filter(|r| !healthy_only || r.healthy())
                .filter_map(|r| r.era())
                .max_by_key(|era| era.preference())
        };
        newest(true).or_else(|| newest(false))
    }

    /// Whether some replica is in rotation.
    pub fn any_healthy(&self) -> bool {
        self.replicas.iter().any(|r| r.healthy())
    }

    /// The first answer of `attempt` on each replica (of `era`, when given) in
    /// [`Self::preference`] order that is not a refused connection; a refused replica is
    /// taken out of rotation.
    pub async fn first_reachable<T, F, Fut>(
        &self,
        era: Option<Era>,
        mut attempt: F,
    ) -> Result<(ReplicaId, T), UpstreamError>
    where
        F: FnMut(Arc<Replica>) -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let mut last = UpstreamError::Unreachable("the upstream has no replicas".into());
        let speaking = |r: &Arc<Replica>| era.is_none() || r.era() == era;
        for replica in self.preference().into_iter().filter(speaking) {
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
                            credentials: Default::default(),
                            exchange: None,
                        },
                        None,
                    )
                })
                .collect(),
            None,
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
        // New work follows the newest era a healthy replica speaks.
        assert_eq!(r.era(), None);
        a.learn(Found::Legacy);
        c.learn(Found::Modern(None));
        assert_eq!(r.era(), Some(Era::Legacy), "c is out of rotation");
        c.set_healthy(true, &"test");
        assert_eq!(r.era(), Some(Era::Modern), "a migration moves forward");
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
