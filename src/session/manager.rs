//! `Sessions`: the store plus the rules around it (idle TTL, the cap on live sessions,
//! `state` tokens, expiry reaping).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use parking_lot::Mutex;

use super::id;
use super::record::{Millis, SessionRecord, now_millis};
use super::state::StateSigner;
use super::store::{SessionStore, Store, StoreError};
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;

/// Limits and lifetimes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A session unused for this long expires.
    pub idle_ttl: Duration,
    /// At most this many sessions are live (or being opened) at once in this process.
    pub max_sessions: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session not found")]
    NotFound,
    #[error("the session state token was not issued by this proxy for this session")]
    BadState,
    #[error("the proxy already holds its maximum of {max} sessions")]
    Full { max: usize },
    #[error("this caller already holds its maximum of {max} sessions")]
    CallerFull { max: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new session, as the client is told about it.
#[derive(Debug, Clone)]
pub struct Issued {
    pub id: String,
    pub state: String,
    pub expires_at: Millis,
    /// What its upstream connection negotiated.
    pub negotiated: Arc<Negotiated>,
}

/// One use of a session: its record and the state and expiry to hand back.
#[derive(Debug, Clone)]
pub struct Lease {
    pub record: SessionRecord,
    pub state: String,
    pub expires_at: Millis,
}

/// A place under the `max_sessions` cap, taken before the upstream is asked for a
/// connection and given back if the session never comes to be.
#[derive(Debug)]
pub struct Slot<'a> {
    sessions: &'a Sessions,
    admitted: bool,
    /// The caller the session will be bound to (counted against its own cap).
    owner: Option<Caller>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.admitted {
            self.sessions.live.fetch_sub(1, Ordering::AcqRel);
            if let Some(owner) = self.owner {
                self.sessions.disown(owner);
            }
        }
    }
}

#[derive(Debug)]
pub struct Sessions {
    store: Store,
    signer: StateSigner,
    settings: Settings,
    /// Live sessions plus slots being opened; bounded by `max_sessions`.
    live: AtomicUsize,
    /// Sessions of one upstream nearly always negotiate the same thing; they share it.
    last_negotiated: Mutex<Option<Arc<Negotiated>>>,
    /// Live (or reserved) sessions bound to each caller with credentials.
    owned: DashMap<Caller, usize>,
}

impl Sessions {
    pub fn new(store: Store, signer: StateSigner, settings: Settings) -> Self {
        Sessions {
            store,
            signer,
            settings,
            live: AtomicUsize::new(0),
            last_negotiated: Mutex::new(None),
            owned: DashMap::new(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Sessions live or being opened in this process.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Takes a place under the cap, or says the proxy is full.
    pub fn reserve(&self) -> Result<Slot<'_>, SessionError> {
        let max = self.settings.max_sessions;
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| SessionError::Full { max })?;
        Ok(Slot {
            sessions: self,
            admitted: false,
            owner: None,
        })
    }

    /// Takes a place for a session bound to `owner`: under the cap of every session, and
    /// under `per_owner`, the most one caller with credentials may hold at once (a caller
    /// without credentials is bounded by the first cap only: it is nobody in particular).
    pub fn reserve_for(&self, owner: Caller, per_owner: usize) -> Result<Slot<'_>, SessionError> {
        let mut slot = self.reserve()?;
        if !owner.is_anonymous() {
            let mut held = self.owned.entry(owner).or_insert(0);
            if *held >= per_owner {
                return Err(SessionError::CallerFull { max: per_owner });
            }
            *held += 1;
        }
        slot.owner = Some(owner);
        Ok(slot)
    }

    /// Sessions bound to `owner` now (for a caller with credentials).
    pub fn owned_by(&self, owner: Caller) -> usize {
        self.owned.get(&owner).map_or(0, |n| *n)
    }

    fn disown(&self, owner: Caller) {
        if owner.is_anonymous() {
            return;
        }
        self.owned.remove_if_mut(&owner, |_, held| {
            *held = held.saturating_sub(1);
            *held == 0
        });
    }

    /// Records a session whose upstream connection is open (sessions enter the store only
    /// after the upstream handshake succeeded).
    pub async fn admit(
        &self,
        mut slot: Slot<'_>,
        upstream_session: Option<String>,
        negotiated: Negotiated,
        legacy: bool,
    ) -> Result<Issued, SessionError> {
        let now = now_millis();
        let expires_at = self.expiry_from(now);
        let negotiated = self.share(negotiated);
        let record = SessionRecord {
            upstream_session: upstream_session.map(Arc::from),
            negotiated: negotiated.clone(),
            created_at: now,
            expires_at,
            seq: 0,
            legacy,
            owner: slot.owner,
        };
        let id = id::generate();
        self.store.insert(&id, record).await?;
        slot.admitted = true;
        let state = self.signer.issue(&id, 0);
        Ok(Issued {
            id,
            state,
            expires_at,
            negotiated,
        })
    }

    /// One use of session `id`, presenting `state` if the client sent one. A state that
    /// this proxy did not issue for this session is refused before anything is renewed.
    pub async fn lease(&self, id: &str, state: Option<&str>) -> Result<Lease, SessionError> {
        if !id::is_visible_ascii(id) {
            return Err(SessionError::NotFound);
        }
        if let Some(state) = state {
            self.check_state(id, state).await?;
        }
        let now = now_millis();
        let expires_at = self.expiry_from(now);
        let record = self
            .store
            .renew(id, now, expires_at)
            .await?
            .ok_or(SessionError::NotFound)?;
        let state = self.signer.issue(id, record.seq);
        Ok(Lease {
            record,
            state,
            expires_at,
        })
    }

    /// Whether `state` was issued by this proxy for session `id`. A state that does not
    /// verify for a session this proxy does not know is `NotFound`, not `BadState`: after
    /// a restart with a fresh key, or once the session is gone, the client must hear
    /// -32043 and start over, not be told its state is malformed.
    pub async fn check_state(&self, id: &str, state: &str) -> Result<(), SessionError> {
        if self.signer.verify(id, state).is_some() {
            return Ok(());
        }
        match self.store.get(id, now_millis()).await? {
            Some(_) => Err(SessionError::BadState),
            None => Err(SessionError::NotFound),
        }
    }

    /// Session `id`'s record if it is live, without using it (no renewal).
    pub async fn peek(&self, id: &str) -> Result<Option<SessionRecord>, SessionError> {
        if !id::is_visible_ascii(id) {
            return Ok(None);
        }
        Ok(self.store.get(id, now_millis()).await?)
    }

    /// Forgets session `id`; returns its record if it existed.
    pub async fn end(&self, id: &str) -> Result<Option<SessionRecord>, SessionError> {
        if !id::is_visible_ascii(id) {
            return Ok(None);
        }
        let removed = self.store.remove(id).await?;
        if let Some(record) = &removed {
            self.live.fetch_sub(1, Ordering::AcqRel);
            if let Some(owner) = record.owner {
                self.disown(owner);
            }
        }
        Ok(removed)
    }

    /// Up to `limit` sessions, for the admin API.
    pub async fn list(&self, limit: usize) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        Ok(self.store.list(limit).await?)
    }

    /// Whether the store answers.
    pub async fn store_reachable(&self) -> bool {
        self.store.count().await.is_ok()
    }

    /// Removes every session expired by now.
    pub async fn take_expired(&self) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        self.take_expired_at(now_millis()).await
    }

    /// Removes every session, for a shutdown that ends them all upstream.
    pub async fn take_all(&self) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        self.take_expired_at(Millis::MAX).await
    }

    async fn take_expired_at(
        &self,
        at: Millis,
    ) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        let expired = self.store.take_expired(at).await?;
        if !expired.is_empty() {
            self.live.fetch_sub(expired.len(), Ordering::AcqRel);
        }
        for owner in expired.iter().filter_map(|(_, record)| record.owner) {
            self.disown(owner);
        }
        Ok(expired)
    }

    fn expiry_from(&self, now: Millis) -> Millis {
        now.saturating_add(self.settings.idle_ttl.as_millis() as Millis)
    }

    fn share(&self, negotiated: Negotiated) -> Arc<Negotiated> {
        let mut last = self.last_negotiated.lock();
        match &*last {
            Some(shared) if **shared == negotiated => shared.clone(),
            _ => {
                let shared = Arc::new(negotiated);
                *last = Some(shared.clone());
                shared
            }
        }
    }
}

/// Runs `on_expired` for every session that expires, checking every `every`. The task
/// stops when the returned handle is dropped.
pub fn spawn_reaper<F>(sessions: Arc<Sessions>, every: Duration, on_expired: F) -> ReaperHandle
where
    F: Fn(String, SessionRecord) + Send + 'static,
{
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match sessions.take_expired().await {
                Ok(expired) => {
                    for (id, record) in expired {
                        on_expired(id, record);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "session reaper could not read the store"),
            }
        }
    });
    ReaperHandle(task)
}

/// Owns the reaper task; dropping it stops the task.
#[derive(Debug)]
pub struct ReaperHandle(tokio::task::JoinHandle<()>);

impl Drop for ReaperHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;
