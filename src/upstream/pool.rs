//! A bounded pool of open upstream sessions, keyed by what an upstream learns only at
//! `initialize` — the client's capabilities — and by who is calling.
//!
//! Stateless clients (2026-07-28) send their capabilities with every request; a legacy
//! server needs them once per session. A request checks out an upstream session opened
//! with exactly its capabilities and its caller's credentials (opening one if none is
//! idle), uses it alone, and gives it back. An upstream may tie a session to the
//! credentials it was opened with, so callers with different `Authorization`, `Cookie` or
//! `X-Api-Key` headers never share one. Idle sessions are ended after `idle_ttl`, and every
//! session after `max_age` (so what `server/discover` reports is re-learned). At
//! `max_open`, the longest-idle session of any key makes room; only when every session is
//! busy is a request refused. A session that failed mid-use is ended instead of given
//! back.
//!
//! The same bound covers upstream sessions opened for one call alone
//! ([`Pool::checkout_alone`], `stateless.affinity = "isolated"`): never pooled, ended
//! when the call lets go of them.
//!
//! Every session in the pool is an owned [`UpstreamSession`] held with its [`Place`] under
//! the bound, so nothing is lost when a client walks away half-way (during the
//! handshake, say): the place and the session give themselves back. Sessions leaving the
//! pool are ended through the process's bounded executor ([`Endings`]): evictions and
//! drops without waiting, a call letting go of its session waiting for the end (its place
//! is held until then), a closing pool waiting for room.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Endings, SessionAddr, Upstream, UpstreamError, UpstreamSession};
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;

/// Pool limits.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Upstream sessions open at once (idle and checked out).
    pub max_open: usize,
    /// Idle sessions kept per capability set.
    pub max_idle_per_key: usize,
    /// An idle session unused this long is ended.
    pub idle_ttl: Duration,
    /// A session this old is ended when it is next given back or found idle.
    pub max_age: Duration,
}

/// The pool. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Pool {
    upstream: Upstream,
    settings: PoolSettings,
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    /// Places taken under `max_open`: sessions idle, checked out, being opened or ended.
    open: Arc<AtomicUsize>,
}

/// A place under the pool's bound, taken before a session is opened and given back when
/// this value drops — however the holder goes (an open that failed or was abandoned
/// half-way, a session ended, an idle one evicted).
#[derive(Debug)]
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug)]
struct Idle {
    session: UpstreamSession,
    place: Place,
    opened: Instant,
    since: Instant,
}

/// One upstream session, checked out: used by one request at a time, returned on drop.
#[derive(Debug)]
pub struct Checkout {
    pool: Arc<Pool>,
    key: String,
    session: UpstreamSession,
    /// `None` once given to the idle list.
    place: Option<Place>,
    opened: Instant,
    broken: bool,
    /// A request is on its way in it, unanswered: dropped now (its client left), its
    /// state is unknown and it is ended rather than reused.
    exchanging: bool,
    /// Opened for one call alone: ended when dropped, never pooled.
    alone: bool,
}

impl Checkout {
    pub fn addr(&self) -> SessionAddr<'_> {
        self.session.addr()
    }

    pub fn negotiated(&self) -> &Arc<Negotiated> {
        self.session.negotiated()
    }

    /// The session must not be reused (it failed, or its state is unknown); it is ended
    /// instead of returned.
    pub fn discard(&mut self) {
        self.broken = true;
    }

    /// Marks a request under way in the session (`true`) until its answer has begun
    /// (`false`): a checkout dropped in between is not reused.
    pub fn exchanging(&mut self, under_way: bool) {
        self.exchanging = under_way;
    }

    /// Whether the session goes back to the pool when let go of (neither broken, nor the
    /// call's own, nor too old).
    fn reusable(&self) -> bool {
        !(self.broken
            || self.exchanging
            || self.alone
            || self.opened.elapsed() >= self.pool.settings.max_age)
    }

    /// Lets go of the session: back to the pool, or — opened for one call alone, broken or
    /// too old — ended upstream (through the endings), waited for. Its place under
    /// `max_open` is held until the upstream session is gone, so sessions being ended
    /// count against the bound too. (Dropping a checkout does the same with the end in
    /// the background.)
    pub async fn release(mut self) {
        if !self.reusable() {
            // The place (dropped with `self`) is held until the session is gone.
            self.session.end_in_place().await;
        }
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        // Not reusable: the session ends itself in the background (or `release` ended it
        // already), and the place goes with this value.
        let Some(place) = self.place.take().filter(|_| self.reusable()) else {
            return;
        };
        let session = self.session.take();
        let idle = Idle {
            session,
            place,
            opened: self.opened,
            since: Instant::now(),
        };
        let mut pools = self.pool.idle.lock();
        let list = pools.entry(std::mem::take(&mut self.key)).or_default();
        if list.len() < self.pool.settings.max_idle_per_key {
            list.push(idle);
        }
        // Else `idle` drops: its session is ended, its place given back.
    }
}

/// The pool key: the capabilities and the caller (its credentials hashed, never kept;
/// with `[auth]`, its token's subject).
pub fn pool_key(capabilities: Option<&RawValue>, caller: Caller) -> String {
    let mut key = capabilities_key(capabilities);
    if !caller.is_anonymous() {
        key.push('\n');
        key.push_str(&caller.hex());
    }
    key
}

/// The capabilities part of a pool key: their JSON with object keys sorted, so that the
/// same capabilities written in another order share upstream sessions.
pub fn capabilities_key(capabilities: Option<&RawValue>) -> String {
    capabilities
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .map(|value| crate::jsonrpc::canonical(value).to_string())
        .unwrap_or_else(|| "{}".to_owned())
}

impl Pool {
    pub fn new(upstream: Upstream, settings: PoolSettings) -> Arc<Self> {
        Arc::new(Pool {
            upstream,
            settings,
            idle: Mutex::new(HashMap::new()),
            open: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Upstream sessions open (idle and checked out).
    pub fn open_sessions(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Idle upstream sessions.
    pub fn idle_sessions(&self) -> usize {
        self.idle.lock().values().map(Vec::len).sum()
    }

    /// An upstream session of `caller`'s opened with `capabilities`: an idle one, or a
    /// new one.
    pub async fn checkout(
        self: &Arc<Self>,
        capabilities: Option<&RawValue>,
        caller: Caller,
        forwarded: &HeaderMap,
    ) -> Result<Checkout, UpstreamError> {
        let key = pool_key(capabilities, caller);
        let reused = {
            let mut pools = self.idle.lock();
            pools.get_mut(&key).and_then(Vec::pop)
        };
        // One too old drops here, ended in the background.
        if let Some(idle) = reused.filter(|idle| idle.opened.elapsed() < self.settings.max_age) {
            return Ok(Checkout {
                pool: self.clone(),
                key,
                session: idle.session,
                place: Some(idle.place),
                opened: idle.opened,
                broken: false,
                exchanging: false,
                alone: false,
            });
        }
        self.open_new(key, capabilities, forwarded, true, false)
            .await
    }

    /// An upstream session for one call alone (`stateless.affinity = "isolated"`): opened
    /// now under the pool's bound, ended when the checkout drops — after the call's last
    /// round. `logs`: whether the call wants log notifications (only then is the upstream
    /// asked for them, which costs a round trip).
    pub async fn checkout_alone(
        self: &Arc<Self>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
        logs: bool,
    ) -> Result<Checkout, UpstreamError> {
        self.open_new(String::new(), capabilities, forwarded, logs, true)
            .await
    }

    /// Opens a session in a place taken first. Every await below may be the last (the
    /// client leaves): the place and the session are owned values that give themselves
    /// back when dropped.
    async fn open_new(
        self: &Arc<Self>,
        key: String,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
        logs: bool,
        alone: bool,
    ) -> Result<Checkout, UpstreamError> {
        let place = self.take_place()?;
        let session = self.upstream.open(None, capabilities, forwarded).await?;
        let checkout = Checkout {
            pool: self.clone(),
            key,
            session,
            place: Some(place),
            opened: Instant::now(),
            broken: false,
            exchanging: false,
            alone,
        };
        if logs {
            hear_every_log(
                &self.upstream,
                checkout.negotiated(),
                checkout.addr(),
                forwarded,
            )
            .await;
        }
        Ok(checkout)
    }

    /// A place under `max_open`, making room by ending the longest-idle session of any
    /// key when the pool is full. `Exhausted` when every session is in use.
    fn take_place(&self) -> Result<Place, UpstreamError> {
        let max = self.settings.max_open;
        loop {
            if self
                .open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok()
            {
                return Ok(Place(self.open.clone()));
            }
            match self.take_longest_idle() {
                // Dropped: its session is ended and its place freed; the next turn of the
                // loop takes it (or another request did, and the loop evicts again or
                // gives up).
                Some(idle) => drop(idle),
                None => {
                    return Err(UpstreamError::Exhausted(format!(
                        "all {max} pooled upstream sessions are busy (stateless.max_pooled)"
                    )));
                }
            }
        }
    }

    fn take_longest_idle(&self) -> Option<Idle> {
        let mut pools = self.idle.lock();
        let (key, index) = pools
            .iter()
            .flat_map(|(key, list)| list.iter().enumerate().map(move |(i, idle)| (key, i, idle)))
            .min_by_key(|(_, _, idle)| idle.since)
            .map(|(key, i, _)| (key.clone(), i))?;
        let list = pools.get_mut(&key)?;
        let idle = list.remove(index);
        if list.is_empty() {
            pools.remove(&key);
        }
        Some(idle)
    }

    /// Ends idle sessions unused for `idle_ttl` or older than `max_age`.
    pub fn reap(self: &Arc<Self>) {
        let ttl = self.settings.idle_ttl;
        let max_age = self.settings.max_age;
        let expired: Vec<Idle> = {
            let mut pools = self.idle.lock();
            let mut expired = Vec::new();
            for list in pools.values_mut() {
                let (old, fresh): (Vec<Idle>, Vec<Idle>) = list.drain(..).partition(|idle| {
                    idle.since.elapsed() >= ttl || idle.opened.elapsed() >= max_age
                });
                *list = fresh;
                expired.extend(old);
            }
            pools.retain(|_, list| !list.is_empty());
            expired
        };
        // Each ends itself, in the background.
        drop(expired);
    }

    /// Ends every idle session (shutdown, a reload), waiting for room in the queue.
    pub async fn close(&self) {
        let all: Vec<Idle> = self
            .idle
            .lock()
            .drain()
            .flat_map(|(_, list)| list)
            .collect();
        for idle in all {
            idle.session.end().await;
        }
    }

    /// Where this pool's sessions are ended (the process's executor).
    pub fn endings(&self) -> &Arc<Endings> {
        self.upstream.endings()
    }
}

/// Upstream sessions that serve requests with different log levels (pooled, pinned, a
/// handle's) ask the upstream for everything (`logging/setLevel debug`); the stateless
/// path filters per request. Nothing is asked of an upstream without `logging`, nor of a
/// modern one.
pub async fn hear_every_log(
    upstream: &Upstream,
    negotiated: &Negotiated,
    addr: SessionAddr<'_>,
    forwarded: &HeaderMap,
) {
    let has_logging = crate::jsonrpc::RawObject::parse(&negotiated.capabilities)
        .is_some_and(|caps| caps.get("logging").is_some());
    // A modern server takes the level with each request (and a 2026-07-28 stdio server
    // would read a `logging/setLevel` opening as a legacy client's).
    if !has_logging || negotiated.is_modern() {
        return;
    }
    let request = crate::jsonrpc::write::request(
        br#""mcp-session-proxy-log-level""#,
        crate::mcp::Method::LoggingSetLevel.as_str(),
        Some(br#"{"level":"debug"}"#),
    );
    let answer = upstream.exchange(addr, request, forwarded.clone()).await;
    if let Ok(mut answer) = answer {
        let drain = async { while let Some(Ok(_)) = answer.messages.next_message().await {} };
        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_capabilities_in_another_order_share_a_key() {
        let a = RawValue::from_string(r#"{"sampling":{},"roots":{"listChanged":true}}"#.into())
            .unwrap();
        let b =
            RawValue::from_string(r#"{ "roots": {"listChanged": true}, "sampling": {} }"#.into())
                .unwrap();
        assert_eq!(capabilities_key(Some(&a)), capabilities_key(Some(&b)));
        assert_eq!(capabilities_key(None), "{}");
        let c = RawValue::from_string(r#"{"sampling":{}}"#.into()).unwrap();
        assert_ne!(capabilities_key(Some(&a)), capabilities_key(Some(&c)));
    }

    #[test]
    fn callers_with_other_credentials_get_other_keys() {
        use http::header::AUTHORIZATION;
        let none = HeaderMap::new();
        let mut alice = HeaderMap::new();
        alice.insert(AUTHORIZATION, "Bearer alice".parse().unwrap());
        let mut bob = HeaderMap::new();
        bob.insert(AUTHORIZATION, "Bearer bob".parse().unwrap());
        let keys = [
            pool_key(None, Caller::of(&none)),
            pool_key(None, Caller::of(&alice)),
            pool_key(None, Caller::of(&bob)),
        ];
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[1], keys[2]);
        assert_eq!(
            keys[0], "{}",
            "an anonymous caller's key is its capabilities"
        );
        assert!(!keys[1].contains("alice"), "credentials are hashed");
    }
}
