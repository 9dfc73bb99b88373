//! `requestState` for multi-round-trip requests (SEP-2322), and the calls parked while
//! their client answers.
//!
//! A retry names the parked call only through its `requestState`, which clients control,
//! so the token is sealed: encrypted and authenticated (XChaCha20-Poly1305, a random
//! 192-bit nonce per token) over a random park id, an expiry, a hash of the caller (the
//! [`Caller`] every session is bound to: its `Authorization`, `Cookie` and `X-Api-Key`
//! headers, or with `[auth]` its token's subject) and a digest of the method and params of
//! the original request. A token that was changed, has expired, comes from another
//! caller, or arrives with another request is refused; a good token can be used once (the
//! parked call is taken out of the table).
//!
//! The parked call lives in one proxy process, which the token also names (its owner,
//! `<advertised URL>#<incarnation>`), so that a retry landing on another replica sharing
//! the key is forwarded there. That is an internal address: it is sealed with the rest,
//! and a client sees only opaque bytes. Several keys open tokens (the first seals), so
//! keys rotate; each is derived from a state key, in a domain of its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::KeyInit;
use chacha20poly1305::XChaCha20Poly1305;
use dashmap::DashMap;
use hmac::Mac;
use sha2::{Digest, Sha256};

use crate::mcp::caller::Caller;
use crate::session::aead::{self, NONCE, TAG};
use crate::session::keyed_hmac;

const VERSION: u8 = 3;
/// Bound to every token as associated data: a sealed session id never opens as one.
const AAD: &[u8] = b"mcp-session-proxy/request-state/v3";
/// What a state key is turned into a token key with.
const KEY_DOMAIN: &[u8] = b"mcp-session-proxy/request-state-key/v3";
/// version · park id · expiry (ms) · caller · request digest · owner length, then the
/// owner.
const FIXED: usize = 1 + 16 + 8 + 8 + 16 + 1;
/// Longest owner a token carries.
const MAX_OWNER: usize = 255;

/// Why a `requestState` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestStateError {
    #[error("the requestState was not issued by this server or was changed")]
    Tampered,
    #[error("the requestState has expired")]
    Expired,
    #[error("the requestState was issued to another caller")]
    OtherCaller,
    #[error("the requestState belongs to another request (method or params differ)")]
    OtherRequest,
    #[error("the requestState was already used, or its call has ended")]
    Unknown,
}

/// Seals and opens `requestState` tokens.
#[derive(Clone)]
pub struct Sealer {
    /// The first seals; all open.
    ciphers: Vec<XChaCha20Poly1305>,
    ttl: Duration,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(<key hidden>)")
    }
}

/// What a token binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBinding<'a> {
    /// Who may use it.
    pub caller: Caller,
    pub method: &'a str,
    /// The request's params, canonical, without `_meta`, `inputResponses` and
    /// `requestState`.
    pub params: &'a str,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// 64 bits naming the caller (a caller without credentials is one caller).
fn caller_digest(caller: Caller) -> [u8; 8] {
    let mut hasher = Sha256::new();
    hasher.update(b"caller\0");
    if let Some(hash) = caller.hash() {
        hasher.update(hash);
    }
    let mut out = [0u8; 8];
    out.copy_from_slice(&hasher.finalize()[..8]);
    out
}

impl Sealer {
    /// A sealer with `key`; tokens live `ttl`.
    pub fn new(key: &[u8], ttl: Duration) -> Self {
        Self::with_keys(&[key.to_vec()], ttl)
    }

    /// A sealer sealing with `keys[0]` and opening with each of `keys`.
    pub fn with_keys(keys: &[Vec<u8>], ttl: Duration) -> Self {
        let ciphers = keys
            .iter()
            .filter_map(|key| {
                let mut mac = keyed_hmac(key);
                mac.update(KEY_DOMAIN);
                XChaCha20Poly1305::new_from_slice(&mac.finalize().into_bytes()).ok()
            })
            .collect();
        Sealer { ciphers, ttl }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A token for park `id` held by `owner`, bound to `binding`.
    pub fn seal(&self, id: [u8; 16], owner: &str, binding: StateBinding<'_>) -> String {
        let expires_at = now_ms() + self.ttl.as_millis() as u64;
        self.seal_until(id, owner, binding, expires_at)
    }

    /// [`Sealer::seal`], the token expiring at `expires_at` (Unix milliseconds).
    pub fn seal_until(
        &self,
        id: [u8; 16],
        owner: &str,
        binding: StateBinding<'_>,
        expires_at: u64,
    ) -> String {
        let owner = owner
            .as_bytes()
            .get(..MAX_OWNER)
            .unwrap_or(owner.as_bytes());
        let mut plain = Vec::with_capacity(FIXED + owner.len());
        plain.push(VERSION);
        plain.extend_from_slice(&id);
        plain.extend_from_slice(&expires_at.to_be_bytes());
        plain.extend_from_slice(&caller_digest(binding.caller));
        plain.extend_from_slice(&request_digest(binding));
        plain.push(owner.len() as u8);
        plain.extend_from_slice(owner);
        // Encryption fails only for messages of gigabytes; a token that cannot be sealed
        // is one nobody can open, which the retry then hears as tampered.
        let raw = aead::seal(&self.ciphers, &plain, AAD).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The park id in `token` and the replica holding it, if the token is intact,
    /// current, and bound to `binding`.
    pub fn open(
        &self,
        token: &str,
        binding: StateBinding<'_>,
    ) -> Result<([u8; 16], String), RequestStateError> {
        self.open_until(token, binding)
            .map(|(id, owner, _)| (id, owner))
    }

    /// [`Sealer::open`], with when the token expires (Unix milliseconds).
    pub fn open_until(
        &self,
        token: &str,
        binding: StateBinding<'_>,
    ) -> Result<([u8; 16], String, u64), RequestStateError> {
        if token.len() > 4 * (NONCE + FIXED + MAX_OWNER + TAG) / 3 + 4 {
            return Err(RequestStateError::Tampered);
        }
        let raw = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| RequestStateError::Tampered)?;
        if raw.len() < NONCE + FIXED + TAG {
            return Err(RequestStateError::Tampered);
        }
        let body = aead::open(&self.ciphers, &raw, AAD).ok_or(RequestStateError::Tampered)?;
        if body.len() < FIXED
            || body[0] != VERSION
            || body.len() != FIXED + usize::from(body[FIXED - 1])
        {
            return Err(RequestStateError::Tampered);
        }
        let owner = String::from_utf8_lossy(&body[FIXED..]).into_owned();
        let mut id = [0u8; 16];
        id.copy_from_slice(&body[1..17]);
        let mut expiry = [0u8; 8];
        expiry.copy_from_slice(&body[17..25]);
        let expires_at = u64::from_be_bytes(expiry);
        if expires_at < now_ms() {
            return Err(RequestStateError::Expired);
        }
        if body[25..33] != caller_digest(binding.caller) {
            return Err(RequestStateError::OtherCaller);
        }
        if body[33..49] != request_digest(binding) {
            return Err(RequestStateError::OtherRequest);
        }
        Ok((id, owner, expires_at))
    }
}

fn request_digest(binding: StateBinding<'_>) -> [u8; 16] {
    let mut hasher = Sha256::new();
    hasher.update(binding.method.as_bytes());
    hasher.update([0]);
    hasher.update(binding.params.as_bytes());
    let digest = hasher.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// Calls waiting for their client's answers, by park id. Taking one out is how a token
/// is used up.
#[derive(Debug)]
pub struct Parked<T> {
    calls: DashMap<[u8; 16], T>,
}

impl<T> Default for Parked<T> {
    fn default() -> Self {
        Parked {
            calls: DashMap::new(),
        }
    }
}

impl<T> Parked<T> {
    /// Parks `call`; returns its fresh random id.
    pub fn park(&self, call: T) -> [u8; 16] {
        let mut id = [0u8; 16];
        rand::fill(&mut id);
        self.calls.insert(id, call);
        id
    }

    /// Takes the call out (once).
    pub fn take(&self, id: &[u8; 16]) -> Option<T> {
        self.calls.remove(id).map(|(_, call)| call)
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding<'a>(credentials: &[u8], params: &'a str) -> StateBinding<'a> {
        let mut headers = http::HeaderMap::new();
        if !credentials.is_empty() {
            let value = http::HeaderValue::from_bytes(credentials).unwrap();
            headers.insert(http::header::AUTHORIZATION, value);
        }
        StateBinding {
            caller: Caller::of(&headers),
            method: "tools/call",
            params,
        }
    }

    fn by(caller: Caller) -> StateBinding<'static> {
        StateBinding {
            caller,
            method: "tools/call",
            params: "{}",
        }
    }

    #[test]
    fn a_token_opens_only_for_its_caller_and_request() {
        let sealer = Sealer::new(b"k", Duration::from_secs(60));
        let id = [7u8; 16];
        let token = sealer.seal(id, "http://a#1", binding(b"Bearer a", r#"{"name":"x"}"#));
        assert_eq!(
            sealer.open(&token, binding(b"Bearer a", r#"{"name":"x"}"#)),
            Ok((id, "http://a#1".to_owned()))
        );
        let rotated = Sealer::with_keys(&[b"new".to_vec(), b"k".to_vec()], Duration::from_secs(60));
        assert!(
            rotated
                .open(&token, binding(b"Bearer a", r#"{"name":"x"}"#))
                .is_ok()
        );
        assert_eq!(
            sealer.open(&token, binding(b"Bearer b", r#"{"name":"x"}"#)),
            Err(RequestStateError::OtherCaller)
        );
        assert_eq!(
            sealer.open(&token, binding(b"Bearer a", r#"{"name":"y"}"#)),
            Err(RequestStateError::OtherRequest)
        );
        let tampered = format!("{token}-TAMPERED");
        assert_eq!(
            sealer.open(&tampered, binding(b"Bearer a", r#"{"name":"x"}"#)),
            Err(RequestStateError::Tampered)
        );
        let other_key = Sealer::new(b"other", Duration::from_secs(60));
        assert_eq!(
            other_key.open(&token, binding(b"Bearer a", r#"{"name":"x"}"#)),
            Err(RequestStateError::Tampered)
        );
    }

    #[test]
    fn a_token_is_bound_to_the_whole_caller_not_only_its_authorization() {
        let sealer = Sealer::new(b"k", Duration::from_secs(60));
        let with = |name: &'static str, value: &'static str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(name, http::HeaderValue::from_static(value));
            Caller::of(&headers)
        };
        let (alice, bob) = (with("cookie", "sid=alice"), with("cookie", "sid=bob"));
        let token = sealer.seal([3; 16], "", by(alice));
        assert!(sealer.open(&token, by(alice)).is_ok());
        for other in [
            bob,
            with("x-api-key", "k"),
            Caller::ANONYMOUS,
            Caller::subject("iss", "alice"),
        ] {
            assert_eq!(
                sealer.open(&token, by(other)),
                Err(RequestStateError::OtherCaller),
                "{other:?}"
            );
        }
        let anonymous = sealer.seal([4; 16], "", by(Caller::ANONYMOUS));
        assert!(sealer.open(&anonymous, by(Caller::ANONYMOUS)).is_ok());
        assert_eq!(
            sealer.open(&anonymous, by(alice)),
            Err(RequestStateError::OtherCaller)
        );
    }

    #[test]
    fn a_token_shows_nothing_of_the_replica_holding_the_call() {
        let sealer = Sealer::new(b"k", Duration::from_secs(60));
        let owner = "http://10.1.2.3:8080#0123456789abcdef";
        let token = sealer.seal([5; 16], owner, binding(b"", "{}"));
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for needle in [&b"10.1.2.3"[..], b"8080", b"http://", b"0123456789abcdef"] {
            assert!(
                !raw.windows(needle.len()).any(|w| w == needle),
                "{:?} is readable in the token",
                String::from_utf8_lossy(needle)
            );
        }
        assert_eq!(
            sealer.open(&token, binding(b"", "{}")),
            Ok(([5; 16], owner.to_owned()))
        );
        // Each token is sealed with a nonce of its own.
        assert_ne!(token, sealer.seal([5; 16], owner, binding(b"", "{}")));
    }

    #[test]
    fn an_expired_token_is_refused() {
        let sealer = Sealer::new(b"k", Duration::ZERO);
        let token = sealer.seal([1; 16], "", binding(b"", "{}"));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            sealer.open(&token, binding(b"", "{}")),
            Err(RequestStateError::Expired)
        );
    }

    #[test]
    fn a_parked_call_is_taken_once() {
        let parked = Parked::default();
        let id = parked.park("call");
        assert_eq!(parked.take(&id), Some("call"));
        assert_eq!(parked.take(&id), None);
    }
}
