//! Session identifiers.
//!
//! The data-layer sessions draft: a sessionId "SHOULD be globally unique and cryptographically secure" and
//! "MUST only contain visible ASCII characters (ranging from 0x21 to 0x7E)".

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Every id this proxy issues starts with this, which lets a bare `Mcp-Session-Id` header
/// be told apart from an upstream's own (legacy pass-through) session id.
pub const PREFIX: &str = "mcps_";

/// 192 bits from the thread-local CSPRNG (ChaCha12, reseeded from the OS).
pub fn generate() -> String {
    let mut bytes = [0u8; 24];
    rand::fill(&mut bytes);
    let mut id = String::with_capacity(PREFIX.len() + 32);
    id.push_str(PREFIX);
    URL_SAFE_NO_PAD.encode_string(bytes, &mut id);
    id
}

pub use crate::mcp::headers::is_visible_ascii;

/// Whether `id` has the shape of an id this proxy issues (it may still be unknown).
pub fn is_issued_shape(id: &str) -> bool {
    id.starts_with(PREFIX)
}

/// A short, non-reversible tag of a sessionId for logs and the admin API (neither may
/// show a usable sessionId): 64 bits of its SHA-256, in hex.
pub fn log_tag(id: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(id.as_bytes());
    let mut out = String::with_capacity(16);
    for b in &digest[..8] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_visible_ascii_long_and_distinct() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(is_visible_ascii(&a) && is_issued_shape(&a));
        // 24 random bytes = 192 bits, base64 without padding = 32 characters.
        assert_eq!(a.len(), PREFIX.len() + 32);
    }

    #[test]
    fn visible_ascii_excludes_space_controls_and_non_ascii() {
        assert!(is_visible_ascii("sess-abc123"));
        assert!(!is_visible_ascii(""));
        assert!(!is_visible_ascii("a b"));
        assert!(!is_visible_ascii("a\tb"));
        assert!(!is_visible_ascii("caf\u{e9}"));
        assert!(!is_visible_ascii("a\u{7f}"));
    }
}
