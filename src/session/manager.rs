//! `Sessions`: the store plus the rules around it (idle TTL, the cap on live sessions and
//! the per-caller limits, `state` tokens, expiry reaping).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::id;
use super::record::{Backing, ClientIdentity, Millis, SessionRecord, now_millis};
use super::state::{StateSigner, Token};
use super::store::{Renewal, Reroute, SessionStore, Store, StoreError};
use crate::fairness::{self, BoundAt, Fairness, Now, Place, Refused};
use crate::mcp::ClientEra;
use crate::mcp::caller::{Caller, CallerKey};
use crate::mcp::initialize::Negotiated;

/// Expired sessions claimed from the store at once by the reaper.
const REAP_BATCH: usize = 1000;

/// Limits and lifetimes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A session unused for this long expires.
    pub idle_ttl: Duration,
    /// At most this many sessions are live (or being opened) at once: in this process
    /// with the memory store, in the shared store with Redis; a sealed store holds none.
    pub max_sessions: usize,
    /// At most this many upstream sessions per caller, as this process counts them
    /// (`fairness`); 0: no cap.
    pub max_sessions_per_caller: usize,
    /// New upstream sessions one caller may open a minute here; 0: no limit.
    pub creations_per_caller_per_minute: u32,
}

/// A session about to be recorded: its upstream session is open.
#[derive(Debug)]
pub struct NewSession {
    pub upstream: Arc<str>,
    pub replica: u64,
    pub upstream_session: Option<Arc<str>>,
    pub negotiated: Arc<Negotiated>,
    pub owner: Option<Arc<str>>,
    /// What the client opening it speaks.
    pub client_era: ClientEra,
    pub client: Option<Arc<ClientIdentity>>,
    /// The caller opening it, which it is bound to.
    pub caller: Caller,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session not found")]
    NotFound,
    /// The session is live but bound to another caller; its client is told it does not
    /// exist (`NotFound`'s answer), so that nobody learns whether someone else's session
    /// is live.
    #[error("the session is bound to another caller")]
    OtherCaller { bound: Caller, caller: Caller },
    #[error("the session state token was not issued by this proxy for this session")]
    BadState,
    #[error("the proxy already holds its maximum of {max} sessions")]
    Full { max: usize },
    #[error("a per-caller limit ({}) refused the session", .0.key())]
    Caller(Refused),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new session, as the client is told about it.
#[derive(Debug, Clone)]
pub struct Issued {
    pub id: String,
    pub state: Token,
    pub expires_at: Millis,
    /// What its upstream connection negotiated.
    pub negotiated: Arc<Negotiated>,
}

/// One use of a session: its record and the state and expiry to hand back.
#[derive(Debug, Clone)]
pub struct Lease {
    pub record: SessionRecord,
    pub state: Token,
    pub expires_at: Millis,
}

/// A place under the `max_sessions` cap and the caller's own limits, taken before the
/// upstream is asked for a connection and given back if the session never comes to be.
#[derive(Debug)]
pub struct Slot<'a> {
    sessions: &'a Sessions,
    admitted: bool,
    /// The caller's place (`fairness`).
    place: Option<Place>,
    /// The upstream and the caller the session will be bound to.
    bound: Option<(Arc<str>, Caller)>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.admitted {
            self.sessions.forget_one();
        }
    }
}

#[derive(Debug)]
pub struct Sessions {
    store: Store,
    signer: StateSigner,
    settings: Settings,
    /// Live sessions plus slots being opened, as this process counts them (the ones it
    /// created and has not seen end); bounded by `max_sessions` with the memory store.
    live: AtomicUsize,
    /// Sessions of one upstream nearly always negotiate the same thing; they share it.
    last_negotiated: Mutex<Option<Arc<Negotiated>>>,
    /// What each caller holds and opens, as this process counts it.
    fairness: Arc<Fairness>,
}

impl Sessions {
    pub fn new(store: Store, signer: StateSigner, settings: Settings) -> Self {
        let fairness = Fairness::new(
            fairness::Limits {
                max_sessions: settings.max_sessions_per_caller,
                per_minute: settings.creations_per_caller_per_minute,
                max_callers: settings.max_sessions.max(fairness::MIN_TRACKED_CALLERS),
            },
            store.is_shared(),
        );
        Sessions {
            store,
            signer,
            settings,
            live: AtomicUsize::new(0),
            last_negotiated: Mutex::new(None),
            fairness,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The per-caller limits, for upstream sessions kept without a record (pinned ones).
    pub fn fairness(&self) -> &Arc<Fairness> {
        &self.fairness
    }

    /// Sessions live or being opened, as this process counts them (see `live`).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Sessions live: in the store when it can count them, else as this process counts.
    pub async fn count(&self) -> Result<usize, SessionError> {
        Ok(self.store.count().await?.unwrap_or_else(|| self.live()))
    }

    fn forget_one(&self) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Takes a place for a session of `who` (`None`: nobody's to count) under the cap of
    /// every session, then under the caller's own limits; or says which one refused. Only
    /// the memory store is capped here: Redis counts every replica's sessions when one is
    /// created, and sealed sessions cost this process nothing.
    pub fn reserve(&self, who: Option<CallerKey>) -> Result<Slot<'_>, SessionError> {
        self.reserve_in(who, None)
    }

    /// Takes a place for a session of `upstream` bound to `caller` (a handle): as
    /// [`Sessions::reserve`], and under `per_upstream`, the most sessions one caller may
    /// hold bound to it there.
    pub fn reserve_for(
        &self,
        upstream: &Arc<str>,
        caller: Caller,
        who: Option<CallerKey>,
        per_upstream: usize,
    ) -> Result<Slot<'_>, SessionError> {
        let bound_at = BoundAt {
            upstream: upstream.clone(),
            max: per_upstream,
        };
        let mut slot = self.reserve_in(who, Some(&bound_at))?;
        slot.bound = Some((upstream.clone(), caller));
        Ok(slot)
    }

    fn reserve_in(
        &self,
        who: Option<CallerKey>,
        bound_at: Option<&BoundAt>,
    ) -> Result<Slot<'_>, SessionError> {
        let max = self.settings.max_sessions;
        let capped = matches!(self.store, Store::Memory(_));
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (!capped || n < max).then_some(n + 1)
            })
            .map_err(|_| SessionError::Full { max })?;
        let mut slot = Slot {
            sessions: self,
            admitted: false,
            place: None,
            bound: None,
        };
        let now = Now::current(now_millis());
        slot.place = Some(
            self.fairness
                .take(who, bound_at, now)
                .map_err(SessionError::Caller)?,
        );
        Ok(slot)
    }

    /// Records a session whose upstream connection is open (sessions enter the store only
    /// after the upstream handshake succeeded).
    pub async fn admit(&self, mut slot: Slot<'_>, new: NewSession) -> Result<Issued, SessionError> {
        let now = now_millis();
        let expires_at = self.expiry_from(now);
        let negotiated = self.share(new.negotiated);
        let record = SessionRecord {
            upstream: new.upstream,
            backing: Backing {
                replica: new.replica,
                upstream_session: new.upstream_session,
                negotiated: negotiated.clone(),
                owner: new.owner,
            },
            created_at: now,
            expires_at,
            seq: 0,
            client_era: new.client_era,
            client: new.client,
            caller: Some(new.caller),
        };
        let id = self.store.create(record).await.map_err(|e| match e {
            StoreError::Full { max } => SessionError::Full { max },
            e => SessionError::Store(e),
        })?;
        slot.admitted = true;
        if let Some(place) = slot.place.take() {
            place.admitted(&id, expires_at);
        }
        let state = self.signer.issue(&id, 0, expires_at);
        Ok(Issued {
            id,
            state,
            expires_at,
            negotiated,
        })
    }

    /// One use of session `id` by `caller`, presenting `state` if the client sent one. A
    /// state that this proxy did not issue for this session is refused before anything
    /// is renewed; so is a session bound to another caller (`OtherCaller`, whatever the
    /// state), which is not renewed either.
    pub async fn lease(
        &self,
        id: &str,
        state: Option<&str>,
        caller: Caller,
    ) -> Result<Lease, SessionError> {
        if !id::is_visible_ascii(id) {
            return Err(SessionError::NotFound);
        }
        let presented = match state {
            Some(state) => Some(self.check_state(id, state, caller).await?),
            None => None,
        };
        let now = now_millis();
        let expires_at = self.expiry_from(now);
        let renewal = Renewal {
            now,
            expires_at,
            presented,
            caller,
        };
        let record = self
            .store
            .renew(id, renewal)
            .await?
            .ok_or(SessionError::NotFound)?;
        if let (false, Some(bound)) = (record.serves(caller), record.caller) {
            return Err(SessionError::OtherCaller { bound, caller });
        }
        self.fairness.renewed(id, expires_at);
        let state = self.signer.issue(id, record.seq, expires_at);
        Ok(Lease {
            record,
            state,
            expires_at,
        })
    }

    /// Whether `state` was issued by this proxy for session `id`. A state that does not
    /// verify for a session this proxy does not know is `NotFound`, not `BadState`: after
    /// a restart with a fresh key, or once the session is gone, the client must hear
    /// -32043 and start over, not be told its state is malformed. Nor is it `BadState` for
    /// a session bound to another caller than `caller` (that would tell it the session
    /// exists): `OtherCaller`.
    pub async fn check_state(
        &self,
        id: &str,
        state: &str,
        caller: Caller,
    ) -> Result<(u64, Millis), SessionError> {
        if let Some(presented) = self.signer.verify(id, state) {
            return Ok(presented);
        }
        match self.store.get(id, now_millis()).await? {
            Some(record) => match (record.serves(caller), record.caller) {
                (false, Some(bound)) => Err(SessionError::OtherCaller { bound, caller }),
                _ => Err(SessionError::BadState),
            },
            None => Err(SessionError::NotFound),
        }
    }

    /// Forgets session `id`; returns its record if it existed.
    pub async fn end(&self, id: &str) -> Result<Option<SessionRecord>, SessionError> {
        if !id::is_visible_ascii(id) {
            return Ok(None);
        }
        let removed = self.store.remove(id).await?;
        if removed.is_some() {
            self.forget_one();
            self.fairness.ended(id, Instant::now());
        }
        Ok(removed)
    }

    /// Points session `id` at a new upstream session if it still names `change.from`;
    /// whether it did (another request may have replaced it first).
    pub async fn reroute(&self, id: &str, change: Reroute<'_>) -> Result<bool, SessionError> {
        Ok(self.store.reroute(id, change).await?)
    }

    /// The record of a live session without using it.
    pub async fn peek(&self, id: &str) -> Result<Option<SessionRecord>, SessionError> {
        if !id::is_visible_ascii(id) {
            return Ok(None);
        }
        Ok(self.store.get(id, now_millis()).await?)
    }

    /// Up to `limit` sessions, for the admin API.
    pub async fn list(&self, limit: usize) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        Ok(self.store.list(limit).await?)
    }

    /// Whether the store answers.
    pub async fn store_reachable(&self) -> bool {
        self.store.count().await.is_ok()
    }

    /// The store's kind, as errors and readiness name it.
    pub fn store_kind(&self) -> &'static str {
        self.store.kind()
    }

    /// Removes (claims) sessions expired by now.
    pub async fn take_expired(&self) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        self.take_expired_at(now_millis(), REAP_BATCH).await
    }

    /// Removes every session, for a shutdown that ends them all upstream (memory store).
    pub async fn take_all(&self) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        self.take_expired_at(Millis::MAX, usize::MAX).await
    }

    async fn take_expired_at(
        &self,
        at: Millis,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord)>, SessionError> {
        let expired = self.store.take_expired(at, limit).await?;
        let now = Now::current(at.min(now_millis()));
        for (id, _) in &expired {
            self.forget_one();
            self.fairness.ended(id, now.at);
        }
        // Callers holding nothing are forgotten; with a shared store, sessions that ended
        // at another replica are let go of by their expiry.
        self.fairness.sweep(now);
        Ok(expired)
    }

    fn expiry_from(&self, now: Millis) -> Millis {
        now.saturating_add(self.settings.idle_ttl.as_millis() as Millis)
    }

    fn share(&self, negotiated: Arc<Negotiated>) -> Arc<Negotiated> {
        let mut last = self.last_negotiated.lock();
        match &*last {
            Some(shared) if **shared == *negotiated => shared.clone(),
            _ => {
                *last = Some(negotiated.clone());
                negotiated
            }
        }
    }
}

/// Runs `on_expired` for every session that expires, one after the other, checking every
/// `every`. `on_expired` may wait (for room to end the upstream session): the reaper
/// slows down rather than piling up work. The task stops when the returned handle is
/// dropped.
pub fn spawn_reaper<F, Fut>(sessions: Arc<Sessions>, every: Duration, on_expired: F) -> ReaperHandle
where
    F: Fn(String, SessionRecord) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match sessions.take_expired().await {
                Ok(expired) => {
                    for (id, record) in expired {
                        on_expired(id, record).await;
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
