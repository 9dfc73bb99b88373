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
//! - be forgotten: a deleted session's id still opens. So a delete buries it
//!   ([`Tombstones`]): this replica refuses it (-32043) until it would have expired,
//!   whatever its upstream does (one that issued no session id, or answered the `DELETE`
//!   with 405, would serve it on); the other replicas refuse it once they are told
//!   (`cluster.peers`, `paths::cluster`);
//! - be renewed: the id's expiry is fixed at creation (`session.idle_ttl` later); the
//!   renewed expiry travels in the `state` token, which a client echoes;
//! - be listed, counted, or reaped: the upstream ends idle sessions itself.
//!
//! The id stays opaque visible ASCII (`mcps_` + base64url) and bounded: an upstream
//! session id longer than [`MAX_UPSTREAM_SESSION`] bytes is refused rather than sealed.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::KeyInit;
use chacha20poly1305::XChaCha20Poly1305;
use parking_lot::Mutex;
use serde_json::value::RawValue;

use super::aead::{self, NONCE, TAG};
use super::id::PREFIX;
use super::record::{Backing, ClientIdentity, Millis, SessionRecord, now_millis};
use super::store::{Renewal, Reroute, SessionStore, StoreError};
use super::tombstones::Tombstones;
use crate::mcp::ClientEra;
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;
use crate::mcp::version;

const VERSION: u8 = 1;
const AAD: &[u8] = b"mcp-session-proxy/sealed-session/v1";
/// Longest upstream session id a sealed id carries.
pub const MAX_UPSTREAM_SESSION: usize = 512;
/// Longest upstream name and owner address.
const MAX_SHORT: usize = 255;
/// The caller's hash.
const CALLER: usize = 16;
/// Longest client identity (clientInfo and capabilities together) a sealed id carries:
/// a session of a modern upstream sends it with every request.
pub const MAX_CLIENT: usize = 2048;
/// Longest id that is worth trying to open.
const MAX_ID: usize = PREFIX.len()
    + (NONCE + TAG + 64 + MAX_UPSTREAM_SESSION + 2 * MAX_SHORT + CALLER + MAX_CLIENT + 4) * 4 / 3
    + 4;

/// The client is legacy ([`ClientEra::Legacy`]): the one bit of its era every build reads.
const LEGACY: u8 = 1;
const HAS_SESSION: u8 = 2;
const HAS_OWNER: u8 = 4;
/// Bound to a caller; with [`CALLER_HASH`], its hash follows the owner replica's address
/// (else the caller sent no credentials).
const BOUND: u8 = 8;
const CALLER_HASH: u8 = 16;
/// The client's identity (clientInfo, capabilities) follows the caller's hash.
const HAS_CLIENT: u8 = 32;
/// The rest of the client's era ([`ClientEra::Sep1364`], [`ClientEra::Modern`]; neither:
/// the data-layer draft's). An id sealed before these were written has neither, and a build
/// before them reads only [`LEGACY`], so ids pass both ways between builds.
const SEP1364: u8 = 64;
const MODERN: u8 = 128;
/// Where the flags are in the sealed record: after the format version, the creation and
/// expiry times and the replica.
const FLAGS_AT: usize = 1 + 8 + 8 + 8;

/// Seals and opens session ids.
pub struct SealedStore {
    ciphers: Vec<XChaCha20Poly1305>,
    /// The last `InitializeResult` each upstream gave at a create here (an id carries only
    /// the negotiated version); bounded by the number of upstreams.
    known: Mutex<Vec<(Arc<str>, Arc<Negotiated>)>>,
    /// Deleted ids, refused although they open.
    tombstones: Arc<Tombstones>,
}

impl std::fmt::Debug for SealedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedStore({} key(s), hidden)", self.ciphers.len())
    }
}

/// Upstreams whose negotiated result is remembered.
const KNOWN: usize = 256;

impl SealedStore {
    /// A store sealing with `keys[0]` and opening with each of `keys` (32 bytes each),
    /// refusing the ids buried in `tombstones` (and burying those it removes).
    pub fn new(keys: &[Vec<u8>], tombstones: Arc<Tombstones>) -> Result<SealedStore, StoreError> {
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
            tombstones,
        })
    }

    fn seal(&self, record: &SessionRecord) -> Result<String, StoreError> {
        let route = &record.backing;
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
        let version = version::ALL
            .iter()
            .position(|v| *v == route.negotiated.protocol_version)
            .unwrap_or(version::STATEFUL.len() - 1) as u8;
        let mut flags = era_flags(record.client_era);
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
        if let Some(client) = &record.client {
            let info = client.client_info.as_deref().map_or("", RawValue::get);
            let capabilities = client.capabilities.as_deref().map_or("", RawValue::get);
            if info.len() + capabilities.len() > MAX_CLIENT {
                return Err(StoreError::Unstorable(format!(
                    "the client's clientInfo and capabilities take more than {MAX_CLIENT} bytes"
                )));
            }
            plain[FLAGS_AT] |= HAS_CLIENT;
            for part in [info, capabilities] {
                plain.extend_from_slice(&(part.len() as u16).to_be_bytes());
                plain.extend_from_slice(part.as_bytes());
            }
        }

        let raw = aead::seal(&self.ciphers, &plain, AAD)
            .ok_or_else(|| StoreError::Unstorable("sealing failed".into()))?;
        let mut id = String::with_capacity(PREFIX.len() + raw.len() * 4 / 3 + 4);
        id.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(raw, &mut id);
        Ok(id)
    }

    /// The deleted ids this store refuses.
    pub fn tombstones(&self) -> &Arc<Tombstones> {
        &self.tombstones
    }

    /// The record sealed in `id`, if one of the keys opens it and it was not deleted
    /// (expiry not checked).
    fn open_live(&self, id: &str, now: Millis) -> Option<SessionRecord> {
        if self.tombstones.holds(id, now) {
            return None;
        }
        self.open(id)
    }

    /// The record sealed in `id`, if one of the keys opens it (expiry not checked).
    fn open(&self, id: &str) -> Option<SessionRecord> {
        if id.len() > MAX_ID {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
        let plain = aead::open(&self.ciphers, &raw, AAD)?;
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
        let protocol_version = *version::ALL.get(usize::from(r.u8()?))?;
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
        let client = match flags & HAS_CLIENT != 0 {
            false => None,
            true => {
                let mut part = || -> Option<Option<Box<RawValue>>> {
                    let len = usize::from(u16::from_be_bytes(r.take(2)?.try_into().ok()?));
                    let text = std::str::from_utf8(r.take(len)?).ok()?;
                    if text.is_empty() {
                        return Some(None);
                    }
                    RawValue::from_string(text.to_owned()).ok().map(Some)
                };
                let client_info = part()?;
                let capabilities = part()?;
                Some(Arc::new(ClientIdentity {
                    client_info,
                    capabilities,
                }))
            }
        };
        let negotiated = self.negotiated(&upstream, protocol_version);
        Some(SessionRecord {
            upstream,
            backing: Backing {
                replica,
                upstream_session: (flags & HAS_SESSION != 0).then(|| session.into()),
                negotiated,
                owner: (flags & HAS_OWNER != 0).then(|| owner.into()),
            },
            created_at,
            expires_at,
            seq: 0,
            client_era: era_of_flags(flags),
            client,
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
        self.learn(&record.upstream, &record.backing.negotiated);
        self.seal(&record)
    }

    async fn renew(&self, id: &str, renewal: Renewal) -> Result<Option<SessionRecord>, StoreError> {
        let Some(mut record) = self.open_live(id, renewal.now) else {
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
        Ok(self
            .open_live(id, now)
            .filter(|record| record.expires_at > now))
    }

    async fn remove(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let now = now_millis();
        let record = self.open_live(id, now);
        if record.is_some() {
            self.tombstones.bury(id, now);
        }
        Ok(record)
    }

    async fn reroute(&self, _: &str, _: Reroute<'_>) -> Result<bool, StoreError> {
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

/// The flags that keep a client's era.
fn era_flags(era: ClientEra) -> u8 {
    match era {
        ClientEra::Legacy => LEGACY,
        ClientEra::DataLayer => 0,
        ClientEra::Sep1364 => SEP1364,
        ClientEra::Modern => MODERN,
    }
}

/// The client's era its flags keep (see [`SEP1364`]).
fn era_of_flags(flags: u8) -> ClientEra {
    if flags & LEGACY != 0 {
        ClientEra::Legacy
    } else if flags & SEP1364 != 0 {
        ClientEra::Sep1364
    } else if flags & MODERN != 0 {
        ClientEra::Modern
    } else {
        ClientEra::DataLayer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::is_visible_ascii;

    fn stones() -> Arc<Tombstones> {
        Arc::new(Tombstones::new(100, std::time::Duration::from_secs(60)))
    }

    fn record(session: &str, expires_at: Millis) -> SessionRecord {
        SessionRecord {
            upstream: "alpha".into(),
            backing: Backing {
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
            client_era: ClientEra::Legacy,
            client: None,
            caller: None,
        }
    }

    #[tokio::test]
    async fn an_id_carries_its_route_and_opens_with_every_key() {
        let old = [1u8; 32].to_vec();
        let new = [2u8; 32].to_vec();
        let sealer = SealedStore::new(std::slice::from_ref(&old), stones()).unwrap();
        let id = sealer.create(record("up-1", Millis::MAX)).await.unwrap();
        assert!(id.starts_with(PREFIX) && is_visible_ascii(&id), "{id}");
        assert!(id.len() < 200, "{} characters", id.len());

        // Rotation: the new key seals, the old one still opens.
        let rotated = SealedStore::new(&[new.clone(), old], stones()).unwrap();
        let opened = rotated.get(&id, 0).await.unwrap().unwrap();
        assert_eq!(&*opened.upstream, "alpha");
        assert_eq!(opened.backing.replica, 42);
        assert_eq!(opened.backing.upstream_session.as_deref(), Some("up-1"));
        assert_eq!(
            opened.backing.owner.as_deref(),
            Some("http://127.0.0.1:9#abc")
        );
        assert_eq!(opened.backing.negotiated.protocol_version, "2025-06-18");
        assert_eq!(opened.client_era, ClientEra::Legacy);
        // Without the old key, it is nobody's.
        let only_new = SealedStore::new(&[new], stones()).unwrap();
        assert!(only_new.get(&id, 0).await.unwrap().is_none());
    }

    /// The plain text of an id as builds before the whole era was kept sealed it: the
    /// format's version 1, one bit of the era ([`LEGACY`]).
    fn plain_v1(flags: u8) -> Vec<u8> {
        let mut plain = vec![VERSION];
        plain.extend_from_slice(&1u64.to_be_bytes());
        plain.extend_from_slice(&u64::MAX.to_be_bytes());
        plain.extend_from_slice(&42u64.to_be_bytes());
        plain.push(flags | HAS_SESSION);
        plain.push(0);
        plain.push(5);
        plain.extend_from_slice(b"alpha");
        plain.extend_from_slice(&4u16.to_be_bytes());
        plain.extend_from_slice(b"up-1");
        plain.push(0);
        plain
    }

    #[tokio::test]
    async fn an_id_keeps_the_clients_era_and_reads_the_ids_of_earlier_builds() {
        let sealer = SealedStore::new(&[[4u8; 32].to_vec()], stones()).unwrap();
        for era in [
            ClientEra::Legacy,
            ClientEra::DataLayer,
            ClientEra::Sep1364,
            ClientEra::Modern,
        ] {
            let id = sealer
                .create(SessionRecord {
                    client_era: era,
                    ..record("up-1", Millis::MAX)
                })
                .await
                .unwrap();
            let opened = sealer.get(&id, 0).await.unwrap().unwrap();
            assert_eq!(opened.client_era, era);
            // What an earlier build reads of it: the legacy bit, set for old clients only.
            assert_eq!(
                era_flags(era) & LEGACY != 0,
                era == ClientEra::Legacy,
                "{era:?}"
            );
        }
        // An id sealed by an earlier build says only whether its client was legacy.
        let old_legacy = sealer.decode(&plain_v1(LEGACY)).unwrap();
        assert_eq!(old_legacy.client_era, ClientEra::Legacy);
        assert_eq!(old_legacy.backing.upstream_session.as_deref(), Some("up-1"));
        let old_session = sealer.decode(&plain_v1(0)).unwrap();
        assert_eq!(old_session.client_era, ClientEra::DataLayer);
    }

    #[tokio::test]
    async fn an_id_carries_the_caller_it_is_bound_to() {
        let sealer = SealedStore::new(&[[3u8; 32].to_vec()], stones()).unwrap();
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
                opened.backing.owner.as_deref(),
                Some("http://127.0.0.1:9#abc")
            );
        }
        // The longest id still opens: the bound is right.
        let mut longest = record(&"s".repeat(MAX_UPSTREAM_SESSION), Millis::MAX);
        longest.upstream = "u".repeat(MAX_SHORT).into();
        longest.backing.owner = Some("o".repeat(MAX_SHORT).into());
        longest.caller = Some(alice);
        let info = format!(r#"{{"name":"{}"}}"#, "n".repeat(MAX_CLIENT / 2 - 11));
        let capabilities = format!(r#"{{"x":"{}"}}"#, "c".repeat(MAX_CLIENT / 2 - 8));
        longest.client = Some(Arc::new(ClientIdentity {
            client_info: Some(RawValue::from_string(info.clone()).unwrap()),
            capabilities: Some(RawValue::from_string(capabilities.clone()).unwrap()),
        }));
        let id = sealer.create(longest.clone()).await.unwrap();
        assert!(id.len() <= MAX_ID, "{} > {MAX_ID}", id.len());
        let opened = sealer.get(&id, 0).await.unwrap().unwrap();
        assert_eq!(opened.caller, Some(alice));
        let client = opened
            .client
            .expect("the client's identity travels in the id");
        assert_eq!(
            client.client_info.as_deref().map(RawValue::get),
            Some(&*info)
        );
        assert_eq!(
            client.capabilities.as_deref().map(RawValue::get),
            Some(&*capabilities)
        );
        // One byte more is refused at the create, not sealed into an id too long to open.
        let mut over = longest;
        let longer = format!(r#"{{"name":"{}"}}"#, "n".repeat(MAX_CLIENT / 2 - 10));
        over.client = Some(Arc::new(ClientIdentity {
            client_info: Some(RawValue::from_string(longer).unwrap()),
            capabilities: Some(RawValue::from_string(capabilities).unwrap()),
        }));
        assert!(matches!(
            sealer.create(over).await,
            Err(StoreError::Unstorable(_))
        ));
    }

    #[tokio::test]
    async fn a_changed_or_forged_id_opens_nowhere() {
        let sealer = SealedStore::new(&[[7u8; 32].to_vec()], stones()).unwrap();
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
        let sealer = SealedStore::new(&[[7u8; 32].to_vec()], stones()).unwrap();
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
    async fn a_removed_id_opens_no_more_here_nor_where_its_tombstone_is_learned() {
        let key = [9u8; 32].to_vec();
        let a = SealedStore::new(std::slice::from_ref(&key), stones()).unwrap();
        let b = SealedStore::new(std::slice::from_ref(&key), stones()).unwrap();
        let id = a.create(record("up-1", Millis::MAX)).await.unwrap();
        assert!(a.remove(&id).await.unwrap().is_some());
        // Removed once: it neither opens nor renews here, and a second delete finds nothing.
        assert!(a.get(&id, 0).await.unwrap().is_none());
        let renewal = Renewal {
            now: now_millis(),
            expires_at: Millis::MAX,
            presented: Some((3, Millis::MAX)),
            caller: Caller::ANONYMOUS,
        };
        assert!(a.renew(&id, renewal).await.unwrap().is_none());
        assert!(a.remove(&id).await.unwrap().is_none());
        // B still opens it until it learns the tombstone.
        assert!(b.get(&id, 0).await.unwrap().is_some());
        let told: Vec<_> = a
            .tombstones()
            .buried_after(0, 10)
            .iter()
            .map(|(_, t)| *t)
            .collect();
        b.tombstones().learn(&told, now_millis());
        assert!(b.get(&id, 0).await.unwrap().is_none());
        assert!(b.renew(&id, renewal).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn overlong_upstream_session_ids_are_refused() {
        let sealer = SealedStore::new(&[[7u8; 32].to_vec()], stones()).unwrap();
        let long = "x".repeat(MAX_UPSTREAM_SESSION + 1);
        assert!(matches!(
            sealer.create(record(&long, 1)).await,
            Err(StoreError::Unstorable(_))
        ));
    }
}
