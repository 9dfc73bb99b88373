//! Pinned upstream sessions: one upstream session per pin key, kept while the key is in
//! use (`stateless.affinity = "pinned"`).
//!
//! The key says which conversation a stateless call belongs to (the stateless path builds
//! it from the caller's credentials and, when configured, a request header such as a
//! conversation id); every call with the same key runs in the same upstream session, so a
//! server that keeps state per session keeps it per conversation. Calls of one key may
//! run at once, as requests of one legacy client may. The first call opens the session
//! (concurrent first calls wait for that one opening) with its own capabilities.
//!
//! Bounded and expiring: a pin unused for `idle_ttl` is ended (by [`Pins::reap`]); at
//! `max_pinned` a new key makes room by ending the longest-idle pin no call is using, and
//! is refused only when every pin is in use. A pin whose session the upstream lost is
//! forgotten ([`Pinned::lost`]); the next call of its key opens a new one. Pins are
//! ended through the process's bounded executor (`Endings`): each pin owns its upstream
//! session, which ends itself when the pin and its last call let go of it.
//!
//! A pin keeps the caller's [`Place`] it was opened with (the per-caller limits,
//! `fairness`) until it goes: evicted, reaped, lost or closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::OnceCell;

use super::pool::hear_every_log;
use super::{SessionAddr, Upstream, UpstreamError, UpstreamSession};
use crate::fairness::Place;
use crate::mcp::initialize::Negotiated;

/// Limits of the pinned sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinSettings {
    /// Pins (upstream sessions) kept at once.
    pub max_pinned: usize,
    /// A pin unused this long is ended.
    pub idle_ttl: Duration,
}

/// The pinned sessions of one upstream. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Pins {
    upstream: Upstream,
    settings: PinSettings,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

#[derive(Debug)]
struct Entry {
    /// Opened once, by the first call of the key.
    session: OnceCell<Arc<Held>>,
    /// Calls using the pin now (a pin in use is never evicted or reaped).
    in_use: AtomicUsize,
    last_used: Mutex<Instant>,
    /// The caller's place, given back when the pin goes (the entry is dropped).
    _place: Option<Place>,
}

/// A pin's upstream session, shared by the calls using it; it ends itself when the
/// pin and its last call let go of it.
type Held = UpstreamSession;

/// One call's use of a pinned session; the pin is kept when it drops.
#[derive(Debug)]
pub struct Pinned {
    pins: Arc<Pins>,
    key: String,
    entry: Use,
    held: Arc<Held>,
}

impl Pinned {
    pub fn addr(&self) -> SessionAddr<'_> {
        self.held.addr()
    }

    pub fn negotiated(&self) -> &Arc<Negotiated> {
        self.held.negotiated()
    }

    /// The upstream lost this session (it restarted, or the stdio server died): the pin
    /// is forgotten, and the next call of its key opens a new session.
    pub fn lost(&self) {
        let removed = {
            let mut entries = self.pins.entries.lock();
            match entries.get(&self.key) {
                Some(current) if Arc::ptr_eq(current, &self.entry.0) => entries.remove(&self.key),
                _ => None,
            }
        };
        if removed.is_some() {
            // Its session ends when its last call lets go of it.
            tracing::info!("the upstream lost a pinned session; the next call opens a new one");
        }
    }
}

/// A pin counted as in use (from before its session is known to be open); the count and
/// the time of last use follow when it drops.
#[derive(Debug)]
struct Use(Arc<Entry>);

impl Drop for Use {
    fn drop(&mut self) {
        *self.0.last_used.lock() = Instant::now();
        self.0.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pins {
    pub fn new(upstream: Upstream, settings: PinSettings) -> Arc<Self> {
        Arc::new(Pins {
            upstream,
            settings,
            entries: Mutex::new(HashMap::new()),
        })
    }

    /// Pins kept now.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` has a pin (a call of it would open nothing new).
    pub fn holds(&self, key: &str) -> bool {
        self.entries.lock().contains_key(key)
    }

    /// The upstream session pinned to `key`, opened now (with `capabilities`) if the key
    /// has none; a new pin keeps `place` (given back at once otherwise).
    pub async fn checkout(
        self: &Arc<Self>,
        key: &str,
        capabilities: Option<&RawValue>,
        forwarded: &HeaderMap,
        place: Option<Place>,
    ) -> Result<Pinned, UpstreamError> {
        let entry = Use(self.entry(key, place)?);
        let opened = entry
            .0
            .session
            .get_or_try_init(|| async {
                // Owned from the moment it opens: abandoned half-way, it is ended.
                let held = self.upstream.open(None, capabilities, forwarded).await?;
                hear_every_log(&self.upstream, held.negotiated(), held.addr(), forwarded).await;
                Ok::<_, UpstreamError>(Arc::new(held))
            })
            .await;
        match opened {
            Ok(held) => {
                let held = held.clone();
                Ok(Pinned {
                    pins: self.clone(),
                    key: key.to_owned(),
                    entry,
                    held,
                })
            }
            Err(e) => {
                // Nothing was opened: the key's entry goes, unless another call is opening
                // it (that call keeps it; an entry left empty is reaped like an idle one).
                let mut entries = self.entries.lock();
                if let Some(current) = entries.get(key)
                    && Arc::ptr_eq(current, &entry.0)
                    && entry.0.session.get().is_none()
                    && entry.0.in_use.load(Ordering::Acquire) == 1
                {
                    entries.remove(key);
                }
                Err(e)
            }
        }
    }

    /// The entry of `key`, counted as in use; a new one (making room if the pins are
    /// full) when the key has none.
    fn entry(&self, key: &str, place: Option<Place>) -> Result<Arc<Entry>, UpstreamError> {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get(key) {
            entry.in_use.fetch_add(1, Ordering::AcqRel);
            return Ok(entry.clone());
        }
        if entries.len() >= self.settings.max_pinned {
            let idlest = entries
                .iter()
                .filter(|(_, e)| e.in_use.load(Ordering::Acquire) == 0)
                .min_by_key(|(_, e)| *e.last_used.lock())
                .map(|(k, _)| k.clone());
            let Some(evicted) = idlest.and_then(|k| entries.remove(&k)) else {
                return Err(UpstreamError::Exhausted(format!(
                    "all {} pinned upstream sessions are in use (stateless.max_pinned)",
                    self.settings.max_pinned
                )));
            };
            tracing::info!("pinned sessions are full: the longest-idle one is ended");
            // No call uses it: its session ends as it drops.
            drop(evicted);
        }
        let entry = Arc::new(Entry {
            session: OnceCell::new(),
            in_use: AtomicUsize::new(1),
            last_used: Mutex::new(Instant::now()),
            _place: place,
        });
        entries.insert(key.to_owned(), entry.clone());
        Ok(entry)
    }

    /// Ends pins unused for `idle_ttl`.
    pub fn reap(&self) {
        let ttl = self.settings.idle_ttl;
        let expired: Vec<Arc<Entry>> = {
            let mut entries = self.entries.lock();
            let keys: Vec<String> = entries
                .iter()
                .filter(|(_, e)| {
                    e.in_use.load(Ordering::Acquire) == 0 && e.last_used.lock().elapsed() >= ttl
                })
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| entries.remove(k)).collect()
        };
        // Unused: each session ends as its entry drops.
        drop(expired);
    }

    /// Ends every pin (shutdown, a reload), waiting for room in the queue; a pin a call
    /// still uses ends when that call lets go of it.
    pub async fn close(&self) {
        let all: Vec<Arc<Entry>> = self.entries.lock().drain().map(|(_, e)| e).collect();
        for entry in all {
            let Ok(mut entry) = Arc::try_unwrap(entry) else {
                continue;
            };
            if let Some(held) = entry.session.take().and_then(|h| Arc::try_unwrap(h).ok()) {
                held.end().await;
            }
        }
    }
}
