//! Who is calling: the credentials a request carries (`Authorization`, `Cookie`,
//! `X-Api-Key`), reduced to a hash that is kept instead of them.
//!
//! An upstream may tie a session to the credentials it was opened with, so the proxy
//! never lets callers with different credentials share an upstream session: pooled
//! sessions are keyed by it, pinned sessions are keyed by it, every session (data-layer,
//! SEP-1364, a legacy client's, a handle) is bound to it, and so is a `requestState`.
//!
//! With `[auth]` on, the caller is the verified token's subject instead
//! ([`Caller::subject`]): the same hash shape, so everything keyed by a caller works
//! unchanged, and two tokens of one subject are one caller.
//!
//! [`CallerKey`] is whom the per-caller limits (`fairness`) count against: the
//! caller when it has credentials (or a verified subject), else the network the request
//! came from.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use http::HeaderMap;
use http::header::{AUTHORIZATION, COOKIE, HeaderName};
use sha2::{Digest, Sha256};

/// Headers that say who is calling.
pub const CREDENTIALS: [HeaderName; 3] =
    [AUTHORIZATION, COOKIE, HeaderName::from_static("x-api-key")];

/// A caller: 128 bits of SHA-256 over its credential headers (names and values, in the
/// order received), or anonymous when it sent none. Never the credentials themselves.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller(Option<[u8; 16]>);

impl Caller {
    /// A request without credentials.
    pub const ANONYMOUS: Caller = Caller(None);

    /// The caller behind `headers` (the client's, or those forwarded from them).
    pub fn of(headers: &HeaderMap) -> Caller {
        let mut hasher = Sha256::new();
        let mut any = false;
        for name in &CREDENTIALS {
            for value in headers.get_all(name) {
                any = true;
                hasher.update(name.as_str().as_bytes());
                hasher.update(b"\0");
                hasher.update(value.as_bytes());
                hasher.update(b"\0");
            }
        }
        if !any {
            return Caller::ANONYMOUS;
        }
        let mut hash = [0u8; 16];
        hash.copy_from_slice(&hasher.finalize()[..16]);
        Caller(Some(hash))
    }

    /// The subject `sub` of issuer `iss` (a verified token's): its own hash domain, so a
    /// subject never equals a set of credential headers.
    pub fn subject(issuer: &str, subject: &str) -> Caller {
        let mut hasher = Sha256::new();
        hasher.update(b"mcp-session-proxy/subject\0");
        hasher.update(issuer.as_bytes());
        hasher.update(b"\0");
        hasher.update(subject.as_bytes());
        let mut hash = [0u8; 16];
        hash.copy_from_slice(&hasher.finalize()[..16]);
        Caller(Some(hash))
    }

    /// Whether the request carried no credentials at all.
    pub fn is_anonymous(&self) -> bool {
        self.0.is_none()
    }

    /// The hash (`None` for an anonymous caller), as a store keeps it.
    pub fn hash(&self) -> Option<[u8; 16]> {
        self.0
    }

    /// The caller a store kept as [`Caller::hash`].
    pub fn from_hash(hash: Option<[u8; 16]>) -> Caller {
        Caller(hash)
    }

    /// The caller [`Caller::hex`] wrote; `None` when `hex` is not such a text.
    pub fn from_hex(hex: &str) -> Option<Caller> {
        if hex.is_empty() {
            return Some(Caller::ANONYMOUS);
        }
        if hex.len() != 32 {
            return None;
        }
        let mut hash = [0u8; 16];
        for (i, byte) in hash.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Caller(Some(hash)))
    }

    /// The hash in hex (`""` for an anonymous caller), for keys.
    pub fn hex(&self) -> String {
        let Some(hash) = &self.0 else {
            return String::new();
        };
        let mut out = String::with_capacity(32);
        for byte in hash {
            out.push_str(&format!("{byte:02x}"));
        }
        out
    }
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_anonymous() {
            f.write_str("Caller(anonymous)")
        } else {
            write!(f, "Caller({})", &self.hex()[..8])
        }
    }
}

/// Whom the per-caller limits count a request against: its credentials' hash when it
/// carries any ([`Caller`]), else the network it came from — an IPv4 address, or an IPv6
/// address's /64 (a host is commonly given a whole /64, so its single addresses would be
/// as many callers). A verified identity, such as a token's subject, would be one more
/// kind here, taking precedence over both.
///
/// Copy and small (at most 17 bytes of key), so a table of them stays cheap.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallerKey {
    /// The hash of the credential headers.
    Credentials([u8; 16]),
    /// No credentials: the client's network.
    Network(IpAddr),
}

impl CallerKey {
    /// The key of a request from `caller`, received from `peer` (the client's address;
    /// `None` when unknown). `None`: the request is nobody's to count.
    pub fn of(caller: Caller, peer: Option<IpAddr>) -> Option<CallerKey> {
        if let Some(hash) = caller.hash() {
            return Some(CallerKey::Credentials(hash));
        }
        peer.map(|ip| CallerKey::Network(network(ip)))
    }
}

/// An IPv4 address as it is; an IPv6 address's /64 (IPv4-mapped ones as IPv4).
fn network(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

impl fmt::Debug for CallerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallerKey::Credentials(hash) => {
                write!(f, "CallerKey({:?})", Caller::from_hash(Some(*hash)))
            }
            CallerKey::Network(ip) => write!(f, "CallerKey({ip})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: HeaderName, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, value.parse().unwrap());
        headers
    }

    #[test]
    fn callers_with_other_credentials_differ() {
        let callers = [
            Caller::of(&HeaderMap::new()),
            Caller::of(&with(AUTHORIZATION, "Bearer alice")),
            Caller::of(&with(AUTHORIZATION, "Bearer bob")),
            Caller::of(&with(COOKIE, "Bearer alice")),
            Caller::of(&with(HeaderName::from_static("x-api-key"), "k")),
        ];
        for (i, a) in callers.iter().enumerate() {
            for b in &callers[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert!(callers[0].is_anonymous());
        assert_eq!(callers[0].hex(), "");
        assert_eq!(
            Caller::of(&with(AUTHORIZATION, "Bearer alice")),
            callers[1],
            "the same credentials, the same caller"
        );
        assert!(!format!("{:?}", callers[1]).contains("alice"));
        assert_eq!(callers[1].hex().len(), 32);
    }

    #[test]
    fn a_caller_comes_back_from_what_a_store_keeps() {
        for caller in [
            Caller::ANONYMOUS,
            Caller::of(&with(AUTHORIZATION, "Bearer alice")),
        ] {
            assert_eq!(Caller::from_hex(&caller.hex()), Some(caller));
            assert_eq!(Caller::from_hash(caller.hash()), caller);
        }
        for bad in ["0", "zz".repeat(16).as_str(), "é".repeat(16).as_str()] {
            assert_eq!(Caller::from_hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_subject_is_its_issuer_and_name_and_nothing_else() {
        let alice = Caller::subject("https://idp", "alice");
        assert_eq!(alice, Caller::subject("https://idp", "alice"));
        assert_ne!(alice, Caller::subject("https://idp", "bob"));
        assert_ne!(alice, Caller::subject("https://other", "alice"));
        assert_ne!(alice, Caller::subject("https://idpa", "lice"));
        assert_ne!(alice, Caller::of(&with(AUTHORIZATION, "alice")));
        assert!(!alice.is_anonymous());
    }

    #[test]
    fn other_headers_do_not_make_a_caller() {
        let headers = with(HeaderName::from_static("x-conversation-id"), "c1");
        assert!(Caller::of(&headers).is_anonymous());
    }

    #[test]
    fn a_caller_key_is_the_credentials_else_the_network() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let alice = Caller::of(&with(AUTHORIZATION, "Bearer alice"));
        assert_eq!(
            CallerKey::of(alice, Some(v4)),
            CallerKey::of(alice, Some("198.51.100.1".parse().unwrap())),
            "credentials count wherever they come from"
        );
        assert_eq!(
            CallerKey::of(Caller::ANONYMOUS, Some(v4)),
            Some(CallerKey::Network(v4))
        );
        assert_eq!(CallerKey::of(Caller::ANONYMOUS, None), None);
        // One IPv6 host's addresses (its /64) are one caller; another /64 is another.
        let key = |ip: &str| CallerKey::of(Caller::ANONYMOUS, Some(ip.parse().unwrap()));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), Some(CallerKey::Network(v4)));
        assert!(!format!("{:?}", CallerKey::of(alice, None)).contains("alice"));
    }
}
