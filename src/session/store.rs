//! Where session records are kept.
//!
//! The trait is async and fallible because not every store is a map in this process
//! (a shared store for several proxy replicas answers over the network). `Store` is the
//! set of stores the proxy can run with, dispatched without boxing on the request path.

use std::future::Future;

use super::memory::MemoryStore;
use super::record::{Millis, SessionRecord};

/// A store could not answer; the request that needed it fails, the store is not bypassed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("session store unavailable: {0}")]
pub struct StoreError(pub String);

/// Keeps session records by sessionId.
pub trait SessionStore: Send + Sync + 'static {
    /// Adds a new session.
    fn insert(
        &self,
        id: &str,
        record: SessionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// One use of a session: if it exists and has not expired at `now`, moves its expiry to
    /// `expires_at`, bumps its sequence, and returns the updated record.
    fn renew(
        &self,
        id: &str,
        now: Millis,
        expires_at: Millis,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// A live session's record, without using it (no renewal): `None` when the id is
    /// unknown or the session expired at `now`.
    fn get(
        &self,
        id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Forgets a session, returning what it was.
    fn remove(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Removes and returns every session expired at `now`.
    fn take_expired(
        &self,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<(String, SessionRecord)>, StoreError>> + Send;

    /// Every session (for the admin API), at most `limit` of them.
    fn list(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(String, SessionRecord)>, StoreError>> + Send;

    /// How many sessions are kept.
    fn count(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;
}

/// The stores the proxy can run with.
#[derive(Debug)]
pub enum Store {
    Memory(MemoryStore),
}

impl SessionStore for Store {
    async fn insert(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
        match self {
            Store::Memory(s) => s.insert(id, record).await,
        }
    }

    async fn renew(
        &self,
        id: &str,
        now: Millis,
        expires_at: Millis,
    ) -> Result<Option<SessionRecord>, StoreError> {
        match self {
            Store::Memory(s) => s.renew(id, now, expires_at).await,
        }
    }

    async fn get(&self, id: &str, now: Millis) -> Result<Option<SessionRecord>, StoreError> {
        match self {
            Store::Memory(s) => s.get(id, now).await,
        }
    }

    async fn remove(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        match self {
            Store::Memory(s) => s.remove(id).await,
        }
    }

    async fn take_expired(&self, now: Millis) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        match self {
            Store::Memory(s) => s.take_expired(now).await,
        }
    }

    async fn list(&self, limit: usize) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        match self {
            Store::Memory(s) => s.list(limit).await,
        }
    }

    async fn count(&self) -> Result<usize, StoreError> {
        match self {
            Store::Memory(s) => s.count().await,
        }
    }
}
