//! The sealed store: no store at all. The sessionId itself carries the session's route
//! — upstream, replica, upstream session id, negotiated version, expiry, the proxy
//! replica owning what lives in one process, and the caller a session handle is bound to
//! (a 128-bit hash of its credentials) — encrypted and authenticated with
//! XChaCha20-Poly1305 (a random 192-bit nonce per id, so random nonces never collide in
//! practice). The first configured key seals; every configured key opens, so keys rotate
//! without dropping sessions: add the new key first, keep the old one until the sessions
//! it sealed have expired.
//!
//! Any proxy holding a key serves any session sealed with it; nothing is shared between
//! them. What such an id cannot do:
//! - be forgotten: a deleted session's id still opens, but its upstream session was ended,
//!   so its next use hears -32043 from the upstream's 404;
//! - be renewed: the id's expiry is fixed at creation (`session.idle_ttl` later); the
//!   renewed expiry travels in the `state` token, which a client echoes;
//! - be listed, counted, or reaped: the upstream ends idle sessions itself.
//!
//! The id stays opaque visible ASCII (`mcps_` + base64url) and bounded: an upstream
//! session id longer than [`MAX_UPSTREAM_SESSION`] bytes is refused rather than sealed.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use parking_lot::Mutex;
use serde_json::value::RawValue;

use super::id::PREFIX;
use super::record::{Millis, Route, SessionRecord};
use super::store::{Renewal, SessionStore, StoreError};
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;
use crate::mcp::version;

const VERSION: u8 = 1;
const AAD: &[u8] = b"mcp-session-proxy/sealed-session/v1";
const NONCE: usize = 24;
const TAG: usize = 16;
/// Longest upstream session id a sealed id carries.
pub const MAX_UPSTREAM_SESSION: usize = 512;
/// Longest upstream name and owner address.
const MAX_SHORT: usize = 255;
/// The caller's hash.
const CALLER: usize = 16;
/// Longest id that is worth trying to open.
const MAX_ID: usize =
    PREFIX.len() + (NONCE + TAG + 64 + MAX_UPSTREAM_SESSION + 2 * MAX_SHORT + CALLER) * 4 / 3 + 4;

const LEGACY: u8 = 1;
const HAS_SESSION: u8 = 2;
const HAS_OWNER: u8 = 4;
/// Bound to a caller; with [`CALLER_HASH`], its hash follows the owner replica's address
/// (else the caller sent no credentials).
const BOUND: u8 = 8;
const CALLER_HASH: u8 = 16;

/// Seals and opens session ids.
pub struct SealedStore {
    ciphers: Vec<XChaCha20Poly1305>,
    /// The last `InitializeResult` each upstream gave at a create here (an id carries only
    /// the negotiated version); bounded by the number of upstreams.
    known: Mutex<Vec<(Arc<str>, Arc<Negotiated>)>>,
}

impl std::fmt::Debug for SealedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedStore({} key(s), hidden)", self.ciphers.len())
    }
}

/// Upstreams whose negotiated result is remembered.
const KNOWN: usize = 256;

impl SealedStore {
    /// A store sealing with `keys[0]` and opening with each of `keys` (32 bytes each).
    pub fn new(keys: &[Vec<u8>]) -> Result<SealedStore, StoreError> {
        let ciphers = keys
            .iter()
            .map(|key| {
                XChaCha20Poly1305::new_from_slice(key)
                    .map_err(|_| StoreError::Unstorable("a sealing key must be 32 bytes".into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ciphers.is_empty() {
            return Err(StoreError::Unstorable("no sealing key".into()));
        }
        Ok(SealedStore {
            ciphers,
            known: Mutex::new(Vec::new()),
        })
    }

    fn seal(&self, record: &SessionRecord) -> Result<String, StoreError> {
        let route = &record.route;
        let session = route.upstream_session.as_deref().unwrap_or("");
        let owner = route.owner.as_deref().unwrap_or("");
        if session.len() > MAX_UPSTREAM_SESSION {
            return Err(StoreError::Unstorable(format!(
                "the upstream session id is longer than {MAX_UPSTREAM_SESSION} bytes"
            )));
        }
        if record.upstream.len() > MAX_SHORT || owner.len() > MAX_SHORT {
            return Err(StoreError::Unstorable(
                "the upstream name or owner is too long".into(),
            ));
        }
        let version = version::STATEFUL
            .iter()
            .position(|v| *v == route.negotiated.protocol_version)
            .unwrap_or(version::STATEFUL.len() - 1) as u8;
        let mut flags = 0;
        if record.legacy {
            flags |= LEGACY;
        }
        if route.upstream_session.is_some() {
            flags |= HAS_SESSION;
        }
        if route.owner.is_some() {
            flags |= HAS_OWNER;
        }
        let caller = record.caller.map(|caller| caller.hash());
        if let Some(hash) = caller {
            flags |= BOUND;
            if hash.is_some() {
                flags |= CALLER_HASH;
            }
        }
        let mut plain =
            Vec::with_capacity(32 + record.upstream.len() + session.len() + owner.len());
        plain.push(VERSION);
        plain.extend_from_slice(&record.created_at.to_be_bytes());
        plain.extend_from_slice(&record.expires_at.to_be_bytes());
        plain.extend_from_slice(&route.replica.to_be_bytes());
        plain.push(flags);
        plain.push(version);
        plain.push(record.upstream.len() as u8);
        plain.extend_from_slice(record.upstream.as_bytes());
        plain.extend_from_slice(&(session.len() as u16).to_be_bytes());
        plain.extend_from_slice(session.as_bytes());
        plain.push(owner.len() as u8);
        plain.extend_from_slice(owner.as_bytes());
        if let Some(Some(hash)) = caller {
            plain.extend_from_slice(&hash);
        }

        let mut nonce = [0u8; NONCE];
        rand::fill(&mut nonce);
        let sealed = self.ciphers[0]
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: &plain,
                    aad: AAD,
                },
            )
            .map_err(|_| StoreError::Unstorable("sealing failed".into()))?;
        let mut raw = Vec::with_capacity(NONCE + sealed.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        let mut id = String::with_capacity(PREFIX.len() + raw.len() * 4 / 3 + 4);
        id.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(raw, &mut id);
        Ok(id)
    }

    /// The record sealed in `id`, if one of the keys opens it (expiry not checked).
    fn open(&self, id: &str) -> Option<SessionRecord> {
        if id.len() > MAX_ID {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
        if raw.len() < NONCE + TAG {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE);
        let nonce = XNonce::try_from(nonce).ok()?;
        let plain = self.ciphers.iter().find_map(|cipher| {
            cipher
                .decrypt(
                    &nonce,
                    Payload {
                        msg: sealed,
                        aad: AAD,
                    },
                )
                .ok()
        })?;
        self.decode(&plain)
    }

    fn decode(&self, plain: &[u8]) -> Option<SessionRecord> {
        let mut r = Reader(plain);
        if r.u8()? != VERSION {
            return None;
        }
        let created_at = r.u64()?;
        let expires_at = r.u64()?;
        let replica = r.u64()?;
        let flags = r.u8()?;
        let protocol_version = *version::STATEFUL.get(usize::from(r.u8()?))?;
        let len = usize::from(r.u8()?);
        let upstream: Arc<str> = std::str::from_utf8(r.take(len)?).ok()?.into();
        let len = usize::from(u16::from_be_bytes(r.take(2)?.try_into().ok()?));
        let session = std::str::from_utf8(r.take(len)?).ok()?;
        let len = usize::from(r.u8()?);
        let owner = std::str::from_utf8(r.take(len)?).ok()?;
        let caller = match (flags & BOUND != 0, flags & CALLER_HASH != 0) {
            (false, _) => None,
            (true, false) => Some(Caller::ANONYMOUS),
            (true, true) => Some(Caller::from_hash(Some(r.take(CALLER)?.try_into().ok()?))),
        };
        let negotiated = self.negotiated(&upstream, protocol_version);
        Some(SessionRecord {
            upstream,
            route: Route {
                replica,
                upstream_session: (flags & HAS_SESSION != 0).then(|| session.into()),
                negotiated,
                owner: (flags & HAS_OWNER != 0).then(|| owner.into()),
            },
            created_at,
            expires_at,
            seq: 0,
            legacy: flags & LEGACY != 0,
            client: None,
            caller,
        })
    }

    /// What `upstream` last negotiated here at this version, or just the version.
    fn negotiated(&self, upstream: &str, protocol_version: &'static str) -> Arc<Negotiated> {
        let known = self.known.lock();
        if let Some((_, n)) = known
            .iter()
            .find(|(u, n)| &**u == upstream && n.protocol_version == protocol_version)
        {
            return n.clone();
        }
        drop(known);
        let empty = || RawValue::from_string("{}".to_owned()).unwrap_or_default();
        Arc::new(Negotiated {
            protocol_version,
            server_info: empty(),
            capabilities: empty(),
            instructions: None,
        })
    }

    fn learn(&self, upstream: &Arc<str>, negotiated: &Arc<Negotiated>) {
        let mut known = self.known.lock();
        known
            .retain(|(u, n)| !(u == upstream && n.protocol_version == negotiated.protocol_version));
        if known.len() >= KNOWN {
            known.remove(0);
        }
        known.push((upstream.clone(), negotiated.clone()));
    }

    /// The expiry in force: the id's, or a later one from a verified `state`.
    fn live(record: &mut SessionRecord, now: Millis, presented: Option<(u64, Millis)>) -> bool {
        if let Some((_, expiry)) = presented {
            record.expires_at = record.expires_at.max(expiry);
        }
        record.expires_at > now
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

impl SessionStore for SealedStore {
    async fn create(&self, record: SessionRecord) -> Result<String, StoreError> {
        self.learn(&record.upstream, &record.route.negotiated);
        self.seal(&record)
    }

    async fn renew(&self, id: &str, renewal: Renewal) -> Result<Option<SessionRecord>, StoreError> {
        let Some(mut record) = self.open(id) else {
            return Ok(None);
        };
        if !Self::live(&mut record, renewal.now, renewal.presented) {
            return Ok(None);
        }
        record.expires_at = renewal.expires_at;
        record.seq = renewal
            .presented
            .map_or(1, |(seq, _)| seq.saturating_add(1));
        Ok(Some(record))
    }

    async fn get(&self, id: &str, now: Millis) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.open(id).filter(|record| record.expires_at > now))
    }

    async fn remove(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.open(id))
    }

    async fn reroute(&self, _: &str, _: Option<&str>, _: &Route) -> Result<bool, StoreError> {
        // Configuration refuses `reinitialize` with sealed ids: an id cannot be re-pointed.
        Err(StoreError::Unstorable(
            "a sealed session cannot be moved to another upstream session".into(),
        ))
    }

    async fn take_expired(
        &self,
        _: Millis,
        _: usize,
    ) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        Ok(Vec::new())
    }

    async fn list(&self, _: usize) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        Ok(Vec::new())
    }

    async fn count(&self) -> Result<Option<usize>, StoreError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::is_visible_ascii;

    fn record(session: &str, expires_at: Millis) -> SessionRecord {
        SessionRecord {
            upstream: "alpha".into(),
            route: Route {
                replica: 42,
                upstream_session: Some(session.into()),
                negotiated: Arc::new(Negotiated {
                    protocol_version: "2025-06-18",
                    server_info: RawValue::from_string(r#"{"name":"s","version":"1"}"#.into())
                        .unwrap(),
                    capabilities: RawValue::from_string("{}".into()).unwrap(),
                    instructions: None,
                }),
                owner: Some("http://127.0.0.1:9#abc".into()),
            },
            created_at: 1,
            expires_at,
            seq: 0,
            legacy: true,
            client: None,
            caller: None,
        }
    }

    #[tokio::test]
    async fn an_id_carries_its_route_and_opens_with_every_key() {
        let old = [1u8; 32].to_vec();
        let new = [2u8; 32].to_vec();
        let sealer = SealedStore::new(std::slice::from_ref(&old)).unwrap();
        let id = sealer.create(record("up-1", Millis::MAX)).await.unwrap();
        assert!(id.starts_with(PREFIX) && is_visible_ascii(&id), "{id}");
        assert!(id.len() < 200, "{} characters", id.len());

        // Rotation: the new key seals, the old one still opens.
        let rotated = SealedStore::new(&[new.clone(), old]).unwrap();
        let opened = rotated.get(&id, 0).await.unwrap().unwrap();
        assert_eq!(&*opened.upstream, "alpha");
        assert_eq!(opened.route.replica, 42);
        assert_eq!(opened.route.upstream_session.as_deref(), Some("up-1"));
        assert_eq!(
            opened.route.owner.as_deref(),
            Some("http://127.0.0.1:9#abc")
        );
        assert_eq!(opened.route.negotiated.protocol_version, "2025-06-18");
        assert!(opened.legacy);
        // Without the old key, it is nobody's.
        let only_new = SealedStore::new(&[new]).unwrap();
        assert!(only_new.get(&id, 0).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_id_carries_the_caller_it_is_bound_to() {
        let sealer = SealedStore::new(&[[3u8; 32].to_vec()]).unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, "Bearer a".parse().unwrap());
        let alice = Caller::of(&headers);
        for caller in [None, Some(Caller::ANONYMOUS), Some(alice)] {
            let mut bound = record("up-1", Millis::MAX);
            bound.caller = caller;
            let id = sealer.create(bound).await.unwrap();
            let opened = sealer.get(&id, 0).await.unwrap().unwrap();
            assert_eq!(opened.caller, caller);
            assert_eq!(
                opened.route.owner.as_deref(),
                Some("http://127.0.0.1:9#abc")
            );
        }
        // The longest id still opens: the bound is right.
        let mut longest = record(&"s".repeat(MAX_UPSTREAM_SESSION), Millis::MAX);
        longest.upstream = "u".repeat(MAX_SHORT).into();
        longest.route.owner = Some("o".repeat(MAX_SHORT).into());
        longest.caller = Some(alice);
        let id = sealer.create(longest).await.unwrap();
        assert!(id.len() <= MAX_ID, "{} > {MAX_ID}", id.len());
        assert_eq!(
            sealer.get(&id, 0).await.unwrap().unwrap().caller,
            Some(alice)
        );
    }

    #[tokio::test]
    async fn a_changed_or_forged_id_opens_nowhere() {
        let sealer = SealedStore::new(&[[7u8; 32].to_vec()]).unwrap();
        let id = sealer.create(record("up-1", Millis::MAX)).await.unwrap();
        for i in PREFIX.len()..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            assert!(
                sealer.get(&changed, 0).await.unwrap().is_none(),
                "position {i}"
            );
        }
        assert!(sealer.get("mcps_", 0).await.unwrap().is_none());
        assert!(sealer.get(&"A".repeat(10_000), 0).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn expiry_is_the_ids_unless_a_state_renewed_it() {
        let sealer = SealedStore::new(&[[7u8; 32].to_vec()]).unwrap();
        let id = sealer.create(record("up-1", 1_000)).await.unwrap();
        let renewal = |presented| Renewal {
            now: 2_000,
            expires_at: 9_000,
            presented,
            caller: Caller::ANONYMOUS,
        };
        assert!(sealer.renew(&id, renewal(None)).await.unwrap().is_none());
        let renewed = sealer
            .renew(&id, renewal(Some((4, 3_000))))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(renewed.seq, 5);
        assert_eq!(renewed.expires_at, 9_000);
    }

    #[tokio::test]
    async fn overlong_upstream_session_ids_are_refused() {
        let sealer = SealedStore::new(&[[7u8; 32].to_vec()]).unwrap();
        let long = "x".repeat(MAX_UPSTREAM_SESSION + 1);
        assert!(matches!(
            sealer.create(record(&long, 1)).await,
            Err(StoreError::Unstorable(_))
        ));
    }
}
