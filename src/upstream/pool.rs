//! A bounded pool of open upstream sessions, keyed by what an upstream learns only at
//! `initialize`: the client's capabilities.
//!
//! Stateless clients (2026-07-28) send their capabilities with every request; a legacy
//! server needs them once per session. A request checks out an upstream session opened
//! with exactly its capabilities (opening one if none is idle), uses it alone, and gives
//! it back; idle sessions are ended after `idle_ttl`. A session that failed mid-use is
//! ended instead of given back.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Binding, Opened, Upstream, UpstreamError};
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
}

/// The pool. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Pool {
    upstream: Upstream,
    settings: PoolSettings,
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    open: AtomicUsize,
}

#[derive(Debug)]
struct Idle {
    session_id: Option<String>,
    negotiated: Arc<Negotiated>,
    since: Instant,
}

/// One upstream session, checked out: used by one request at a time, returned on drop.
#[derive(Debug)]
pub struct Checkout {
    pool: Arc<Pool>,
    key: String,
    session_id: Option<String>,
    negotiated: Arc<Negotiated>,
    broken: bool,
}

impl Checkout {
    pub fn binding(&self) -> Binding<'_> {
        Binding {
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
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let idle = Idle {
            session_id: self.session_id.take(),
            negotiated: self.negotiated.clone(),
            since: Instant::now(),
        };
        if self.broken {
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

/// The pool key of a capability set: its JSON with object keys sorted, so that the same
/// capabilities written in another order share upstream sessions.
pub fn capabilities_key(capabilities: Option<&RawValue>) -> String {
    fn sort(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(String, Value)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k, sort(v))).collect())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sort).collect()),
            other => other,
        }
    }
    capabilities
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .map(|value| sort(value).to_string())
        .unwrap_or_else(|| "{}".to_owned())
}

impl Pool {
    pub fn new(upstream: Upstream, settings: PoolSettings) -> Arc<Self> {
        Arc::new(Pool {
            upstream,
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

    /// An upstream session opened with `capabilities`: an idle one, or a new one.
    pub async fn checkout(
        self: &Arc<Self>,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
    ) -> Result<Checkout, UpstreamError> {
        let key = capabilities_key(capabilities);
        let reused = {
            let mut pools = self.idle.lock();
            pools.get_mut(&key).and_then(Vec::pop)
        };
        if let Some(idle) = reused {
            return Ok(Checkout {
                pool: self.clone(),
                key,
                session_id: idle.session_id,
                negotiated: idle.negotiated,
                broken: false,
            });
        }
        let max = self.settings.max_open;
        if self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            return Err(UpstreamError::Exhausted(format!(
                "{max} pooled upstream sessions are open, the configured maximum"
            )));
        }
        match self.upstream.open(None, capabilities, forwarded).await {
            Ok(Opened {
                session_id,
                negotiated,
            }) => {
                let checkout = Checkout {
                    pool: self.clone(),
                    key,
                    session_id,
                    negotiated: Arc::new(negotiated),
                    broken: false,
                };
                self.hear_every_log(&checkout, forwarded).await;
                Ok(checkout)
            }
            Err(e) => {
                self.open.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    /// Pooled sessions serve requests with different log levels; the pool asks the
    /// upstream for everything (`logging/setLevel debug`) and the caller filters.
    async fn hear_every_log(&self, checkout: &Checkout, forwarded: &HeaderMap) {
        let has_logging = crate::jsonrpc::RawObject::parse(&checkout.negotiated.capabilities)
            .is_some_and(|caps| caps.get("logging").is_some());
        if !has_logging {
            return;
        }
        let request = bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":"mcp-session-proxy-log-level","method":"logging/setLevel","params":{"level":"debug"}}"#,
        );
        if let Ok(reply) = self
            .upstream
            .exchange(checkout.binding(), request, forwarded)
            .await
            && let Ok((_, mut messages)) =
                super::Messages::of(reply, 64 * 1024, Duration::from_secs(5)).await
        {
            while let Some(Ok(_)) = messages.next().await {}
        }
    }

    /// Ends idle sessions older than `idle_ttl`.
    pub fn reap(self: &Arc<Self>) {
        let ttl = self.settings.idle_ttl;
        let expired: Vec<Idle> = {
            let mut pools = self.idle.lock();
            let mut expired = Vec::new();
            for list in pools.values_mut() {
                let (old, fresh): (Vec<Idle>, Vec<Idle>) =
                    list.drain(..).partition(|idle| idle.since.elapsed() >= ttl);
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

    /// Ends every idle session (shutdown).
    pub async fn close(&self) {
        let all: Vec<Idle> = self
            .idle
            .lock()
            .drain()
            .flat_map(|(_, list)| list)
            .collect();
        for idle in all {
            let binding = Binding {
                session_id: idle.session_id.as_deref(),
                protocol_version: idle.negotiated.protocol_version,
            };
            let _ = self.upstream.terminate(binding).await;
            self.open.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn end(&self, idle: Idle) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            let binding = Binding {
                session_id: idle.session_id.as_deref(),
                protocol_version: idle.negotiated.protocol_version,
            };
            if let Err(e) = upstream.terminate(binding).await {
                tracing::debug!(error = %e, "a pooled upstream session did not end cleanly");
            }
        });
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
}
