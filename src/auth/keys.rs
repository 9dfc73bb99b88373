//! The keys tokens are verified with: fixed at start-up (an HS256 secret, a JWKS file),
//! or the authorization server's own, fetched and kept fresh so that its keys rotate
//! with no restart here.
//!
//! Fetched keys ([`IssuerKeys`]) come from the `jwks_uri` configured, or else the one the
//! issuer's metadata names. They are fetched at start-up and again every `max_age`
//! (sooner, with a growing pause, while fetching fails: the keys held are kept meanwhile),
//! and at once when a token names a key (`kid`) not held — a key the server just rotated
//! in. That refresh is rate-limited for the whole process ([`FORCED_EVERY`]): made-up
//! `kid`s buy no fetches of their own; and one fetch serves everyone waiting for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::AuthError;
use super::fetch::Fetcher;
use super::jwt::Key;

/// At most one refresh for an unknown `kid` this often.
pub const FORCED_EVERY: Duration = Duration::from_secs(10);
/// The longest pause between failed fetches.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Where the keys come from.
#[derive(Debug, Clone)]
pub enum Keys {
    /// Configured: they change only with the configuration.
    Fixed(Arc<Vec<Key>>),
    /// The authorization server's, fetched.
    Issuer(Arc<IssuerKeys>),
}

impl Keys {
    /// Whether these are the keys of `source`, fetched every `max_age` (a reload that
    /// changes neither keeps them, and their fetching).
    pub fn fetches(&self, source: &Source, max_age: Duration) -> bool {
        match self {
            Keys::Fixed(_) => false,
            Keys::Issuer(issuer) => issuer.source == *source && issuer.max_age == max_age,
        }
    }

    /// The keys to verify a token naming `kid` with. From the issuer, they are
    /// refreshed first when none has that `kid` (or none is held yet) and a refresh is
    /// allowed; refused with [`AuthError::KeysUnavailable`] while none could be fetched.
    pub async fn for_kid(&self, kid: Option<&str>) -> Result<Arc<Vec<Key>>, AuthError> {
        match self {
            Keys::Fixed(keys) => Ok(keys.clone()),
            Keys::Issuer(issuer) => issuer.for_kid(kid).await,
        }
    }
}

/// Where the authorization server's keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The JWKS at this URL.
    Jwks(String),
    /// The JWKS its metadata names.
    Discover { issuer: String },
}

/// The authorization server's keys, kept fresh. See the module documentation.
#[derive(Debug)]
pub struct IssuerKeys {
    fetcher: Fetcher,
    source: Source,
    max_age: Duration,
    keys: ArcSwap<Vec<Key>>,
    /// The `jwks_uri` found by discovery (looked for again when fetching it fails).
    discovered: Mutex<Option<String>>,
    /// A fetch is running (at most one at a time).
    in_flight: AtomicBool,
    /// Counts the fetches that finished (a waiter waits for it to move); the value is
    /// whether the last one succeeded.
    done: watch::Sender<(u64, bool)>,
    /// When a token's unknown `kid` last caused a fetch.
    last_forced: Mutex<Option<Instant>>,
    /// The task that fetches every `max_age`, stopped with the value.
    refresher: Mutex<Option<tokio::task::AbortHandle>>,
}

/// How long a request waits for a fetch running for it before it is answered with the
/// keys held (or 503 with none).
const WAIT: Duration = Duration::from_secs(5);

impl IssuerKeys {
    /// Starts keeping the keys of `source` fresh (the first fetch starts now, in the
    /// background); the task ends when the value is dropped.
    pub fn start(source: Source, max_age: Duration) -> Result<Arc<IssuerKeys>, String> {
        let keys = Arc::new(IssuerKeys {
            fetcher: Fetcher::new()?,
            source,
            max_age,
            keys: ArcSwap::from_pointee(Vec::new()),
            discovered: Mutex::new(None),
            in_flight: AtomicBool::new(false),
            done: watch::channel((0, false)).0,
            last_forced: Mutex::new(None),
            refresher: Mutex::new(None),
        });
        let refresher = tokio::spawn(keep_fresh(Arc::downgrade(&keys)));
        *keys.refresher.lock() = Some(refresher.abort_handle());
        Ok(keys)
    }

    /// Waits (at most `within`) for the first fetch: for a reload, which applies new
    /// keys only once they can be had.
    pub async fn first_fetch(self: &Arc<Self>, within: Duration) -> Result<(), String> {
        let mut done = self.done.subscribe();
        let fetched = tokio::time::timeout(within, async {
            loop {
                let (finished, ok) = *done.borrow_and_update();
                if finished > 0 {
                    return ok;
                }
                if done.changed().await.is_err() {
                    return false;
                }
            }
        })
        .await;
        match fetched {
            Ok(true) => Ok(()),
            Ok(false) => {
                Err("the authorization server's keys could not be fetched (see the log)".into())
            }
            Err(_) => Err(format!(
                "the authorization server's keys could not be fetched within {within:?}"
            )),
        }
    }

    async fn for_kid(self: &Arc<Self>, kid: Option<&str>) -> Result<Arc<Vec<Key>>, AuthError> {
        let keys = self.keys.load_full();
        // The same rule as the verifier's: a key without a kid may verify any token.
        let known = match kid {
            Some(kid) => keys
                .iter()
                .any(|key| key.kid.as_deref().is_none_or(|held| held == kid)),
            None => !keys.is_empty(),
        };
        if known {
            return Ok(keys);
        }
        let mut done = self.done.subscribe();
        if self.may_force() {
            self.begin();
        }
        // The fetch runs on its own: a request leaving while it waits stops nothing.
        if self.in_flight.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(WAIT, done.changed()).await;
        }
        let keys = self.keys.load_full();
        if keys.is_empty() {
            return Err(AuthError::KeysUnavailable);
        }
        Ok(keys)
    }

    /// Whether a token's unknown `kid` may cause a fetch now (and if so, it counts).
    fn may_force(&self) -> bool {
        let mut last = self.last_forced.lock();
        let now = Instant::now();
        match *last {
            Some(at) if now.duration_since(at) < FORCED_EVERY => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }

    /// Starts a fetch in a task of its own, unless one is running.
    fn begin(self: &Arc<Self>) {
        if self.in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        let keys = self.clone();
        tokio::spawn(async move {
            let fetched = keys.fetch().await;
            if let Err(why) = &fetched {
                tracing::warn!(%why, "the authorization server's keys could not be fetched");
            }
            keys.in_flight.store(false, Ordering::Release);
            keys.done
                .send_modify(|(finished, ok)| (*finished, *ok) = (*finished + 1, fetched.is_ok()));
        });
    }

    /// Fetches the keys (one fetch at a time: [`Self::begin`]).
    async fn fetch(&self) -> Result<(), String> {
        let url = match &self.source {
            Source::Jwks(url) => url.clone(),
            Source::Discover { issuer } => {
                let known = self.discovered.lock().clone();
                match known {
                    Some(url) => url,
                    None => {
                        let url = self.fetcher.discover(issuer).await?;
                        *self.discovered.lock() = Some(url.clone());
                        url
                    }
                }
            }
        };
        let read = match self.fetcher.jwks(&url).await {
            Ok(read) => read,
            Err(why) => {
                // The metadata may have moved the keys: look again next time.
                *self.discovered.lock() = None;
                return Err(why);
            }
        };
        for skipped in &read.skipped {
            tracing::debug!(key = %skipped, "a key of the authorization server's JWKS is not used");
        }
        tracing::info!(keys = read.keys.len(), jwks = %url, "the authorization server's keys fetched");
        self.keys.store(Arc::new(read.keys));
        Ok(())
    }
}

/// Fetches the keys now and every `max_age`; after a failure, again after a pause that
/// doubles up to [`MAX_BACKOFF`] (never longer than `max_age`).
async fn keep_fresh(keys: Weak<IssuerKeys>) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let Some(held) = keys.upgrade() else {
            return;
        };
        let mut done = held.done.subscribe();
        done.borrow_and_update();
        held.begin();
        // This fetch, or the one already running.
        let ok = match done.changed().await {
            Ok(()) => done.borrow().1,
            Err(_) => return,
        };
        let pause = if ok {
            backoff = Duration::from_secs(1);
            held.max_age
        } else {
            let pause = backoff.min(held.max_age);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            pause
        };
        drop(held);
        tokio::time::sleep(pause).await;
    }
}

impl Drop for IssuerKeys {
    fn drop(&mut self) {
        if let Some(refresher) = self.refresher.lock().take() {
            refresher.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A JWKS server on loopback answering every request after `delay`; how many it got.
    async fn jwks_server(delay: Duration) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        let body = include_str!("../../tests/fixtures/jwt/jwks.json");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::AcqRel);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    tokio::time::sleep(delay).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(body.as_bytes()).await;
                });
            }
        });
        (url, served)
    }

    #[tokio::test]
    async fn made_up_kids_cost_one_fetch_and_a_request_leaving_stops_none() {
        let (url, served) = jwks_server(Duration::from_millis(200)).await;
        let keys = IssuerKeys::start(Source::Jwks(url), Duration::from_secs(3600)).unwrap();
        keys.first_fetch(Duration::from_secs(5)).await.unwrap();
        assert_eq!(served.load(Ordering::Acquire), 1);
        let held = keys.for_kid(Some("rsa-1")).await.unwrap();
        assert_eq!(held.len(), 2, "no fetch for a kid held");
        assert_eq!(served.load(Ordering::Acquire), 1);

        // Fifty tokens naming keys no one has: one fetch, then the keys held.
        for i in 0..50 {
            let answered = keys.for_kid(Some(&format!("made-up-{i}"))).await;
            assert_eq!(answered.unwrap().len(), 2);
        }
        assert_eq!(served.load(Ordering::Acquire), 2);

        // A request that caused a fetch leaves while it runs: the fetch runs to its end.
        *keys.last_forced.lock() = None;
        let mut done = keys.done.subscribe();
        let before = done.borrow_and_update().0;
        let waiting = tokio::spawn({
            let keys = keys.clone();
            async move { keys.for_kid(Some("rotated-in")).await.map(|k| k.len()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        waiting.abort();
        tokio::time::timeout(Duration::from_secs(5), done.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*done.borrow(), (before + 1, true));
        assert_eq!(served.load(Ordering::Acquire), 3);
    }

    #[tokio::test]
    async fn with_no_server_a_request_waits_a_bounded_while_and_is_told_to_come_back() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/jwks", closed.local_addr().unwrap());
        drop(closed);
        let keys = IssuerKeys::start(Source::Jwks(url), Duration::from_secs(3600)).unwrap();
        assert!(keys.first_fetch(Duration::from_secs(5)).await.is_err());
        let started = Instant::now();
        assert_eq!(
            keys.for_kid(Some("k1")).await.unwrap_err(),
            AuthError::KeysUnavailable
        );
        assert!(started.elapsed() <= WAIT + Duration::from_secs(1));
    }
}
