//! The `state` token: opaque to clients, meaningful only to the proxy that issued it.
//!
//! The data-layer sessions draft asks that `state` be echoed byte for byte and, in production, be signed or
//! encrypted. Here it carries a version byte and the session's use sequence, sealed with
//! HMAC-SHA256 over the sessionId, so a token is good only for the session it was issued
//! for and any change to it is detected before the request goes anywhere.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

const VERSION: u8 = 1;
const TAG_LEN: usize = 16;
const TOKEN_LEN: usize = 1 + 8 + TAG_LEN;
const DOMAIN: &[u8] = b"mcp-session-proxy/state/v1\0";

/// HMAC-SHA256 keyed with `key`. RFC 2104 §2: a key longer than the hash block is hashed
/// first, a shorter one is padded with zeros; doing that here keeps construction
/// infallible.
pub fn keyed_hmac(key: &[u8]) -> Hmac<Sha256> {
    let mut block = hmac::digest::Key::<HmacSha256>::default();
    if key.len() <= block.len() {
        block[..key.len()].copy_from_slice(key);
    } else {
        let digest = Sha256::digest(key);
        block[..digest.len()].copy_from_slice(&digest);
    }
    HmacSha256::new(&block)
}

/// Issues and checks `state` tokens with one key.
#[derive(Clone)]
pub struct StateSigner {
    keyed: HmacSha256,
}

impl fmt::Debug for StateSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StateSigner(<key hidden>)")
    }
}

impl StateSigner {
    /// A signer with `key` (any length; configuration asks for at least 32 bytes).
    pub fn new(key: &[u8]) -> Self {
        StateSigner {
            keyed: keyed_hmac(key),
        }
    }

    /// A signer with a fresh random 256-bit key (tokens die with the process).
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::fill(&mut key);
        Self::new(&key)
    }

    /// The token for use number `seq` of `session_id`.
    pub fn issue(&self, session_id: &str, seq: u64) -> String {
        let mut raw = [0u8; TOKEN_LEN];
        raw[0] = VERSION;
        raw[1..9].copy_from_slice(&seq.to_be_bytes());
        let tag = self.mac(session_id, seq).finalize().into_bytes();
        raw[9..].copy_from_slice(&tag[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The sequence sealed in `token`, if this signer issued it for `session_id`.
    pub fn verify(&self, session_id: &str, token: &str) -> Option<u64> {
        if token.len() > 64 {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        if raw.len() != TOKEN_LEN || raw[0] != VERSION {
            return None;
        }
        let seq = u64::from_be_bytes(raw[1..9].try_into().ok()?);
        self.mac(session_id, seq)
            .verify_truncated_left(&raw[9..])
            .ok()
            .map(|()| seq)
    }

    fn mac(&self, session_id: &str, seq: u64) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(DOMAIN);
        mac.update(session_id.as_bytes());
        mac.update(&[0]);
        mac.update(&seq.to_be_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_for_its_session_only() {
        let signer = StateSigner::generate();
        let token = signer.issue("mcps_a", 7);
        assert_eq!(signer.verify("mcps_a", &token), Some(7));
        assert_eq!(signer.verify("mcps_b", &token), None);
    }

    #[test]
    fn any_change_to_a_token_is_detected() {
        let signer = StateSigner::generate();
        let token = signer.issue("mcps_a", 1);
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = String::from_utf8(bytes).unwrap();
            assert_eq!(signer.verify("mcps_a", &tampered), None, "position {i}");
        }
        assert_eq!(signer.verify("mcps_a", ""), None);
        assert_eq!(signer.verify("mcps_a", "not base64!"), None);
    }

    #[test]
    fn another_key_does_not_verify() {
        let token = StateSigner::new(&[1; 32]).issue("mcps_a", 1);
        assert_eq!(StateSigner::new(&[2; 32]).verify("mcps_a", &token), None);
        assert_eq!(StateSigner::new(&[1; 32]).verify("mcps_a", &token), Some(1));
    }

    #[test]
    fn keys_follow_rfc_2104_padding_and_hashing() {
        // A short key and the same key zero-padded to the block are the same HMAC key;
        // a long key is the same as its SHA-256 digest.
        let token = StateSigner::new(b"k").issue("s", 3);
        let mut padded = [0u8; 64];
        padded[0] = b'k';
        assert_eq!(StateSigner::new(&padded).verify("s", &token), Some(3));
        let long = [7u8; 100];
        let token = StateSigner::new(&long).issue("s", 3);
        assert_eq!(
            StateSigner::new(&Sha256::digest(long)).verify("s", &token),
            Some(3)
        );
    }

    #[test]
    fn debug_hides_the_key() {
        assert_eq!(
            format!("{:?}", StateSigner::new(b"secret")),
            "StateSigner(<key hidden>)"
        );
    }
}
