//! The `state` token: opaque to clients, meaningful only to the proxy that issued it.
//!
//! The data-layer sessions draft asks that `state` be echoed byte for byte and, in production, be signed or
//! encrypted. Here it carries a version byte, the session's use sequence and the expiry
//! the use renewed it to, sealed with HMAC-SHA256 over the sessionId, so a token is good
//! only for the session it was issued for and any change to it is detected before the
//! request goes anywhere. The expiry matters to sealed sessionIds, which cannot be
//! renewed themselves. Several keys may verify (the first issues), so keys rotate.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

const VERSION: u8 = 2;
const TAG_LEN: usize = 16;
const TOKEN_LEN: usize = 1 + 8 + 8 + TAG_LEN;
const DOMAIN: &[u8] = b"mcp-session-proxy/state/v2\0";
/// A token's text: [`TOKEN_LEN`] bytes in unpadded base64.
const TOKEN_TEXT: usize = (TOKEN_LEN * 4).div_ceil(3);
// `issue` writes the text into exactly this many bytes.
const _: () = assert!(matches!(
    base64::encoded_len(TOKEN_LEN, false),
    Some(TOKEN_TEXT)
));
/// The longest token text read at all (a token is 44 characters).
const MAX_TOKEN_TEXT: usize = 64;

/// An issued token's text, kept where it is made: a session call issues one, and it is
/// only ever written into the answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token([u8; TOKEN_TEXT]);

impl Token {
    pub fn as_str(&self) -> &str {
        // Base64's alphabet is ASCII: the check cannot fail.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::ops::Deref for Token {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// Issues `state` tokens with one key and checks them with that key and older ones.
#[derive(Clone)]
pub struct StateSigner {
    /// The first issues; all verify.
    keyed: Vec<HmacSha256>,
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
            keyed: vec![keyed_hmac(key)],
        }
    }

    /// A signer issuing with `keys[0]` and verifying with each (at least one).
    pub fn with_keys(keys: &[Vec<u8>]) -> Self {
        match keys.split_first() {
            Some(_) => StateSigner {
                keyed: keys.iter().map(|k| keyed_hmac(k)).collect(),
            },
            None => Self::generate(),
        }
    }

    /// A signer with a fresh random 256-bit key (tokens die with the process).
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::fill(&mut key);
        Self::new(&key)
    }

    /// The token for use number `seq` of `session_id`, which renewed it until
    /// `expires_at` (ms since the epoch).
    pub fn issue(&self, session_id: &str, seq: u64, expires_at: u64) -> Token {
        let mut raw = [0u8; TOKEN_LEN];
        raw[0] = VERSION;
        raw[1..9].copy_from_slice(&seq.to_be_bytes());
        raw[9..17].copy_from_slice(&expires_at.to_be_bytes());
        let tag = mac(&self.keyed[0], session_id, &raw[1..17])
            .finalize()
            .into_bytes();
        raw[17..].copy_from_slice(&tag[..TAG_LEN]);
        let mut text = [0u8; TOKEN_TEXT];
        // The text's length is the encoding's of TOKEN_LEN bytes, exactly.
        let _ = URL_SAFE_NO_PAD.encode_slice(raw, &mut text);
        Token(text)
    }

    /// The sequence and expiry sealed in `token`, if this signer (with any of its keys)
    /// issued it for `session_id`.
    pub fn verify(&self, session_id: &str, token: &str) -> Option<(u64, u64)> {
        if token.len() > MAX_TOKEN_TEXT {
            return None;
        }
        // Decoded where it lies: 64 characters are at most 48 bytes.
        let mut decoded = [0u8; MAX_TOKEN_TEXT / 4 * 3];
        let len = URL_SAFE_NO_PAD.decode_slice(token, &mut decoded).ok()?;
        let raw = decoded.get(..len)?;
        if raw.len() != TOKEN_LEN || raw[0] != VERSION {
            return None;
        }
        let body = &raw[1..17];
        let seq = u64::from_be_bytes(body[..8].try_into().ok()?);
        let expires_at = u64::from_be_bytes(body[8..].try_into().ok()?);
        self.keyed
            .iter()
            .any(|keyed| {
                mac(keyed, session_id, body)
                    .verify_truncated_left(&raw[17..])
                    .is_ok()
            })
            .then_some((seq, expires_at))
    }
}

fn mac(keyed: &HmacSha256, session_id: &str, body: &[u8]) -> HmacSha256 {
    let mut mac = keyed.clone();
    mac.update(DOMAIN);
    mac.update(session_id.as_bytes());
    mac.update(&[0]);
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_for_its_session_only() {
        let signer = StateSigner::generate();
        let token = signer.issue("mcps_a", 7, 99);
        assert_eq!(signer.verify("mcps_a", &token), Some((7, 99)));
        assert_eq!(signer.verify("mcps_b", &token), None);
    }

    #[test]
    fn a_token_is_its_bytes_in_unpadded_base64_whole() {
        let token = StateSigner::generate().issue("mcps_a", 7, 99);
        assert_eq!(token.len(), 44);
        let raw = URL_SAFE_NO_PAD.decode(token.as_str()).unwrap();
        assert_eq!(raw.len(), TOKEN_LEN);
        assert_eq!(raw[0], VERSION);
        assert_eq!(URL_SAFE_NO_PAD.encode(&raw), token.as_str());
        assert_eq!(format!("{token}"), token.as_str());
    }

    #[test]
    fn any_change_to_a_token_is_detected() {
        let signer = StateSigner::generate();
        let token = signer.issue("mcps_a", 1, 2);
        for i in 0..token.len() {
            let mut bytes = token.as_bytes().to_vec();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = String::from_utf8(bytes).unwrap();
            assert_eq!(signer.verify("mcps_a", &tampered), None, "position {i}");
        }
        assert_eq!(signer.verify("mcps_a", ""), None);
        assert_eq!(signer.verify("mcps_a", "not base64!"), None);
    }

    #[test]
    fn another_key_does_not_verify() {
        let token = StateSigner::new(&[1; 32]).issue("mcps_a", 1, 5);
        assert_eq!(StateSigner::new(&[2; 32]).verify("mcps_a", &token), None);
        assert_eq!(
            StateSigner::new(&[1; 32]).verify("mcps_a", &token),
            Some((1, 5))
        );
        // Rotation: a signer whose older key issued it still verifies it.
        let rotated = StateSigner::with_keys(&[vec![2; 32], vec![1; 32]]);
        assert_eq!(rotated.verify("mcps_a", &token), Some((1, 5)));
        assert_eq!(
            rotated.verify("mcps_a", &rotated.issue("mcps_a", 2, 6)),
            Some((2, 6))
        );
    }

    #[test]
    fn keys_follow_rfc_2104_padding_and_hashing() {
        // A short key and the same key zero-padded to the block are the same HMAC key;
        // a long key is the same as its SHA-256 digest.
        let token = StateSigner::new(b"k").issue("s", 3, 0);
        let mut padded = [0u8; 64];
        padded[0] = b'k';
        assert_eq!(StateSigner::new(&padded).verify("s", &token), Some((3, 0)));
        let long = [7u8; 100];
        let token = StateSigner::new(&long).issue("s", 3, 0);
        assert_eq!(
            StateSigner::new(&Sha256::digest(long)).verify("s", &token),
            Some((3, 0))
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
