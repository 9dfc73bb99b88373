//! Sealing under rotating keys with XChaCha20-Poly1305: the first key seals, every key
//! opens (so a key can be replaced without breaking what the old one sealed). A sealed
//! value is `nonce (24 bytes) · ciphertext · tag (16 bytes)`; the nonce is random, and
//! 192 random bits never collide in practice.
//!
//! Shared by sealed session ids (`super::sealed`) and stateless `requestState` tokens
//! (`crate::stateless::request_state`); it knows nothing of what they seal, nor of their
//! encodings (each passes its own associated data, so neither opens the other's).

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Payload};

/// The nonce's length, in bytes.
pub const NONCE: usize = 24;
/// The authentication tag's length, in bytes.
pub const TAG: usize = 16;

/// `plain` sealed with `ciphers[0]`, bound to `aad`; `None` when there is no key (or the
/// message is too long to encrypt: gigabytes).
pub fn seal(ciphers: &[XChaCha20Poly1305], plain: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
    let mut nonce = [0u8; NONCE];
    rand::fill(&mut nonce);
    let sealed = ciphers
        .first()?
        .encrypt(&XNonce::from(nonce), Payload { msg: plain, aad })
        .ok()?;
    let mut raw = Vec::with_capacity(NONCE + sealed.len());
    raw.extend_from_slice(&nonce);
    raw.extend_from_slice(&sealed);
    Some(raw)
}

/// What `raw` seals, if one of `ciphers` opens it with `aad`.
pub fn open(ciphers: &[XChaCha20Poly1305], raw: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
    if raw.len() < NONCE + TAG {
        return None;
    }
    let (nonce, sealed) = raw.split_at(NONCE);
    let nonce = XNonce::try_from(nonce).ok()?;
    ciphers
        .iter()
        .find_map(|cipher| cipher.decrypt(&nonce, Payload { msg: sealed, aad }).ok())
}

#[cfg(test)]
mod tests {
    use chacha20poly1305::KeyInit;

    use super::*;

    fn cipher(byte: u8) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new_from_slice(&[byte; 32]).unwrap()
    }

    #[test]
    fn the_first_key_seals_and_every_key_opens() {
        let sealed = seal(&[cipher(1), cipher(2)], b"plain", b"a").unwrap();
        assert_eq!(sealed.len(), NONCE + 5 + TAG);
        assert_eq!(
            open(&[cipher(3), cipher(1)], &sealed, b"a").as_deref(),
            Some(&b"plain"[..])
        );
        // Another key, other associated data, a flipped bit or a short value open nothing.
        assert!(open(&[cipher(2)], &sealed, b"a").is_none());
        assert!(open(&[cipher(1)], &sealed, b"b").is_none());
        let mut flipped = sealed.clone();
        flipped[NONCE] ^= 1;
        assert!(open(&[cipher(1)], &flipped, b"a").is_none());
        assert!(open(&[cipher(1)], &sealed[..NONCE + TAG - 1], b"a").is_none());
        assert!(seal(&[], b"plain", b"a").is_none());
    }
}
