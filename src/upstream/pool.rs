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
//! Every session leaving the pool is ended through the process's bounded executor
//! ([`Endings`]): evictions and drops without waiting, a call letting go of its session
//! waiting for the end (its place is held until then), a closing pool waiting for room.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Binding, Ending, Endings, Opened, Upstream, UpstreamError};
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
    /// Where sessions leaving the pool are ended (in the background, bounded).
    endings: Arc<Endings>,
    settings: PoolSettings,
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    open: AtomicUsize,
}

#[derive(Debug)]
struct Idle {
    replica: super::ReplicaId,
    session_id: Option<String>,
    negotiated: Arc<Negotiated>,
    opened: Instant,
    since: Instant,
}

impl Idle {
    fn ending(&self, upstream: &Upstream) -> Ending {
        Ending::new(
            upstream,
            self.replica,
            self.session_id.as_deref(),
            self.negotiated.protocol_version,
        )
    }
}

/// One upstream session, checked out: used by one request at a time, returned on drop.
#[derive(Debug)]
pub struct Checkout {
    pool: Arc<Pool>,
    key: String,
    replica: super::ReplicaId,
    session_id: Option<String>,
    negotiated: Arc<Negotiated>,
    opened: Instant,
    broken: bool,
    /// Opened for one call alone: ended when dropped, never pooled.
    alone: bool,
    /// Already ended upstream (`release`): dropping it only gives its place back.
    ended: bool,
}

impl Checkout {
    pub fn binding(&self) -> Binding<'_> {
        Binding {
            replica: self.replica,
            session_id: self.session_id.as_deref(),
            protocol_version: self.negotiated.protocol_version,
        }
    }

    pub fn negotiated(&self) -> &Arc<Negotiated> {
        &self.negotiated
    }

    /// The session must not be reused (it failed, or its state is unknown); it is ended
    /// instead of returned.
    pub fn discard(&mut self) {
        self.broken = true;
    }

    /// Lets go of the session: back to the pool, or — opened for one call alone, broken or
    /// too old — ended upstream (through the endings), waited for. Its place under
    /// `max_open` is held until the upstream session is gone, so sessions being ended
    /// count against the bound too. (Dropping a checkout does the same with the end in
    /// the background.)
    pub async fn release(mut self) {
        if !(self.broken || self.alone || self.opened.elapsed() >= self.pool.settings.max_age) {
            return;
        }
        let ending = Ending::new(
            &self.pool.upstream,
            self.replica,
            self.session_id.as_deref(),
            self.negotiated.protocol_version,
        );
        self.pool.endings.end_and_wait(ending).await;
        self.ended = true;
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if self.ended {
            self.pool.open.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let idle = Idle {
            replica: self.replica,
            session_id: self.session_id.take(),
            negotiated: self.negotiated.clone(),
            opened: self.opened,
            since: Instant::now(),
        };
        if self.broken || self.alone || self.opened.elapsed() >= self.pool.settings.max_age {
            self.pool.end(idle);
            return;
        }
        let mut pools = self.pool.idle.lock();
        let list = pools.entry(std::mem::take(&mut self.key)).or_default();
        if list.len() < self.pool.settings.max_idle_per_key {
            list.push(idle);
        } else {
            drop(pools);
            self.pool.end(idle);
        }
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
    pub fn new(upstream: Upstream, settings: PoolSettings, endings: Arc<Endings>) -> Arc<Self> {
        Arc::new(Pool {
            upstream,
            endings,
            settings,
            idle: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
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
        if let Some(idle) = reused {
            if idle.opened.elapsed() < self.settings.max_age {
                return Ok(Checkout {
                    pool: self.clone(),
                    key,
                    replica: idle.replica,
                    session_id: idle.session_id,
                    negotiated: idle.negotiated,
                    opened: idle.opened,
                    broken: false,
                    alone: false,
                    ended: false,
                });
            }
            self.end(idle);
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

    async fn open_new(
        self: &Arc<Self>,
        key: String,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
        logs: bool,
        alone: bool,
    ) -> Result<Checkout, UpstreamError> {
        self.take_slot()?;
        match self.upstream.open(None, capabilities, forwarded).await {
            Ok(Opened {
                replica,
                session_id,
                negotiated,
            }) => {
                let checkout = Checkout {
                    pool: self.clone(),
                    key,
                    replica,
                    session_id,
                    negotiated: Arc::new(negotiated),
                    opened: Instant::now(),
                    broken: false,
                    alone,
                    ended: false,
                };
                // From here the checkout owns the session: dropped half-way (the client
                // left), it is ended or pooled like any other.
                if logs {
                    hear_every_log(
                        &self.upstream,
                        &checkout.negotiated,
                        checkout.binding(),
                        forwarded,
                    )
                    .await;
                }
                Ok(checkout)
            }
            Err(e) => {
                self.open.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    /// Counts one more open session, making room by ending the longest-idle session of
    /// any key when the pool is full. `Exhausted` when every session is in use.
    fn take_slot(&self) -> Result<(), UpstreamError> {
        let max = self.settings.max_open;
        loop {
            if self
                .open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok()
            {
                return Ok(());
            }
            match self.take_longest_idle() {
                // Its slot is freed by `end`; the next turn of the loop takes it (or
                // another request did, and the loop evicts again or gives up).
                Some(idle) => self.end(idle),
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
        for idle in expired {
            self.end(idle);
        }
    }

    /// Hands every idle session to the endings (shutdown), waiting for room.
    pub async fn close(&self) {
        let all: Vec<Idle> = self
            .idle
            .lock()
            .drain()
            .flat_map(|(_, list)| list)
            .collect();
        for idle in all {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.endings.end(idle.ending(&self.upstream)).await;
        }
    }

    /// Where this pool's sessions are ended (the process's executor); others that hold
    /// an upstream session of the same upstream (a subscription) end theirs there too.
    pub fn endings(&self) -> &Arc<Endings> {
        &self.endings
    }

    fn end(&self, idle: Idle) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.endings.end_soon(idle.ending(&self.upstream));
    }
}

/// Upstream sessions that serve requests with different log levels (pooled, pinned, a
/// handle's) ask the upstream for everything (`logging/setLevel debug`); the stateless
/// path filters per request. Nothing is asked of an upstream without `logging`.
pub async fn hear_every_log(
    upstream: &Upstream,
    negotiated: &Negotiated,
    binding: Binding<'_>,
    forwarded: &HeaderMap,
) {
    let has_logging = crate::jsonrpc::RawObject::parse(&negotiated.capabilities)
        .is_some_and(|caps| caps.get("logging").is_some());
    if !has_logging {
        return;
    }
    let request = crate::jsonrpc::write::request(
        br#""mcp-session-proxy-log-level""#,
        crate::mcp::Method::LoggingSetLevel.as_str(),
        Some(br#"{"level":"debug"}"#),
    );
    let answer = upstream.exchange(binding, request, forwarded).await;
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
