//! Where session records are kept.
//!
//! The trait is async and fallible because not every store is a map in this process: a
//! Redis server shared by proxy replicas answers over the network, and the sealed store
//! keeps nothing at all (the sessionId carries the record, sealed). The store chooses a
//! new session's id for that reason. `Store` is the set of stores the proxy can run with,
//! dispatched without boxing on the request path.

use std::future::Future;

use super::memory::MemoryStore;
use super::record::{Backing, Millis, SessionRecord};
use super::redis::RedisStore;
use super::sealed::SealedStore;
use crate::mcp::caller::Caller;

/// A store could not do what was asked; the request that needed it fails, the store is
/// never bypassed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer (Redis down or too slow).
    #[error("session store unavailable: {0}")]
    Unavailable(String),
    /// The store holds its maximum of sessions.
    #[error("the session store holds its maximum of {max} sessions")]
    Full { max: usize },
    /// The record cannot be kept by this store (e.g. too large to seal).
    #[error("the session cannot be stored: {0}")]
    Unstorable(String),
}

/// One use of a session: the new expiry, and what a verified `state` said (the sealed
/// store keeps no sequence or renewed expiry of its own; the client's `state` carries
/// them).
#[derive(Debug, Clone, Copy)]
pub struct Renewal {
    pub now: Millis,
    pub expires_at: Millis,
    /// The sequence and expiry sealed in the `state` the client presented, if verified.
    pub presented: Option<(u64, Millis)>,
    /// Who is using it. A session bound to another caller is not renewed (another
    /// caller's use must not keep it alive); the store returns its record as it is, and
    /// the caller of the store refuses it.
    pub caller: Caller,
}

/// A session's move to a new upstream session (a lost one reinitialized): made only if
/// the session still names `from`, a compare-and-swap.
#[derive(Debug, Clone, Copy)]
pub struct Reroute<'a> {
    /// The upstream session it names now.
    pub from: Option<&'a str>,
    /// What it is to name.
    pub to: &'a Backing,
}

/// Keeps session records by sessionId.
pub trait SessionStore: Send + Sync + 'static {
    /// Keeps a new session and returns the id it chose for it.
    fn create(
        &self,
        record: SessionRecord,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// One use of a session: if it exists and has not expired, moves its expiry to
    /// `renewal.expires_at`, bumps its sequence, and returns the updated record — unless
    /// it is bound to a caller other than `renewal.caller`: then its record comes back
    /// unchanged (stores that keep nothing, sealed ids, have nothing to leave unchanged).
    fn renew(
        &self,
        id: &str,
        renewal: Renewal,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// A live session's record, without using it (no renewal): `None` when the id is
    /// unknown or the session expired at `now`.
    fn get(
        &self,
        id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Forgets a session, returning what it was (the caller ends its upstream session).
    fn remove(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Points a session at a new upstream session, if it still names the one it names
    /// now (another request may have done it first). Whether it did.
    fn reroute(
        &self,
        id: &str,
        change: Reroute<'_>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Removes and returns up to `limit` sessions expired at `now`. Among replicas sharing
    /// a store, each expired session is returned to exactly one of them.
    fn take_expired(
        &self,
        now: Millis,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(String, SessionRecord)>, StoreError>> + Send;

    /// Sessions (for the admin API and reloads), at most `limit` of them.
    fn list(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(String, SessionRecord)>, StoreError>> + Send;

    /// How many sessions are kept; `None` when the store cannot know (sealed). An error
    /// means the store does not answer.
    fn count(&self) -> impl Future<Output = Result<Option<usize>, StoreError>> + Send;
}

/// The stores the proxy can run with.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one Store per process, never moved on the request path"
)]
pub enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
    Sealed(SealedStore),
}

impl Store {
    /// How metrics, logs and errors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
            Store::Sealed(_) => "sealed",
        }
    }

    /// Whether sessions outlive this process (other replicas or a restart carry them
    /// on): the store is shared, or the ids carry them.
    pub fn is_shared(&self) -> bool {
        !matches!(self, Store::Memory(_))
    }

    /// Whether a removed session is gone from the store (a sealed id still opens).
    pub fn keeps_records(&self) -> bool {
        !matches!(self, Store::Sealed(_))
    }

    /// Whether a use renews a session by itself. A sealed id's expiry is fixed in it; only
    /// the `state` a client echoes carries a later one (a session handle's calls bring
    /// none).
    pub fn renews_by_use(&self) -> bool {
        !matches!(self, Store::Sealed(_))
    }

    /// The Redis store, for what it keeps besides sessions.
    pub fn redis(&self) -> Option<&RedisStore> {
        match self {
            Store::Redis(redis) => Some(redis),
            _ => None,
        }
    }
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Memory($s) => $e,
            Store::Redis($s) => $e,
            Store::Sealed($s) => $e,
        }
    };
}

impl SessionStore for Store {
    async fn create(&self, record: SessionRecord) -> Result<String, StoreError> {
        each!(self, s => s.create(record).await)
    }

    async fn renew(&self, id: &str, renewal: Renewal) -> Result<Option<SessionRecord>, StoreError> {
        each!(self, s => s.renew(id, renewal).await)
    }

    async fn get(&self, id: &str, now: Millis) -> Result<Option<SessionRecord>, StoreError> {
        each!(self, s => s.get(id, now).await)
    }

    async fn remove(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        each!(self, s => s.remove(id).await)
    }

    async fn reroute(&self, id: &str, change: Reroute<'_>) -> Result<bool, StoreError> {
        each!(self, s => s.reroute(id, change).await)
    }

    async fn take_expired(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        each!(self, s => s.take_expired(now, limit).await)
    }

    async fn list(&self, limit: usize) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        each!(self, s => s.list(limit).await)
    }

    async fn count(&self) -> Result<Option<usize>, StoreError> {
        each!(self, s => s.count().await)
    }
}
