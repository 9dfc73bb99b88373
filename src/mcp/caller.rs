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
//! [`CallerKey`] is whom the per-caller limits (`fairness`) count against: a verified
//! subject, else the network the request came from. Credentials the proxy did not verify
//! bind sessions but buy no budget: anyone can make up a new `X-Api-Key` per request.

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
///
/// Two callers are the same when their hashes are: whether the proxy verified the
/// identity ([`Caller::is_verified`]) is how it came to know it, not part of it (a
/// caller read back from a store is the same caller, and a subject's hash has a domain of
/// its own, so it never equals a set of credential headers).
#[derive(Clone, Copy)]
pub struct Caller {
    hash: Option<[u8; 16]>,
    /// A verified token's subject (`[auth]`), not headers as the client sent them.
    verified: bool,
}

impl PartialEq for Caller {
    fn eq(&self, other: &Caller) -> bool {
        self.hash == other.hash
    }
}

impl Eq for Caller {}

impl std::hash::Hash for Caller {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
    }
}

impl Caller {
    /// A request without credentials.
    pub const ANONYMOUS: Caller = Caller {
        hash: None,
        verified: false,
    };

    /// The caller behind `headers` (the client's, or those forwarded from them): not
    /// verified.
    pub fn of(headers: &HeaderMap) -> Caller {
        // A request without credentials (every one, where none are used) is told so by
        // one look at its few names instead of a lookup by name for each of the three;
        // one with credentials pays that look on top.
        if !headers.keys().any(|name| CREDENTIALS.contains(name)) {
            return Caller::ANONYMOUS;
        }
        let mut hasher = Sha256::new();
        for name in &CREDENTIALS {
            for value in headers.get_all(name) {
                hasher.update(name.as_str().as_bytes());
                hasher.update(b"\0");
                hasher.update(value.as_bytes());
                hasher.update(b"\0");
            }
        }
        let mut hash = [0u8; 16];
        hash.copy_from_slice(&hasher.finalize()[..16]);
        Caller::from_hash(Some(hash))
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
        Caller {
            hash: Some(hash),
            verified: true,
        }
    }

    /// Whether the request carried no credentials at all.
    pub fn is_anonymous(&self) -> bool {
        self.hash.is_none()
    }

    /// Whether the proxy verified who this is (a token's subject, `[auth]`), rather than
    /// hashing what the client sent.
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    /// The hash (`None` for an anonymous caller), as a store keeps it.
    pub fn hash(&self) -> Option<[u8; 16]> {
        self.hash
    }

    /// The caller a store kept as [`Caller::hash`] (to compare with a request's).
    pub fn from_hash(hash: Option<[u8; 16]>) -> Caller {
        Caller {
            hash,
            verified: false,
        }
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
        Some(Caller::from_hash(Some(hash)))
    }

    /// The hash in hex (`""` for an anonymous caller), for keys.
    pub fn hex(&self) -> String {
        let Some(hash) = &self.hash else {
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

/// Whom the per-caller limits count a request against: a verified identity (a token's
/// subject, `[auth]`) when there is one, else the network the request came from — an
/// IPv4 address, or an IPv6 address's /64 (a host is commonly given a whole /64, so its
/// single addresses would be as many callers).
///
/// Credentials the proxy did not verify (`Authorization`, `Cookie`, `X-Api-Key` without
/// `[auth]`) still bind what a caller opens ([`Caller`]), but they do not make a key of
/// their own: a client could send new ones with every request, and each would be a
/// caller with a full budget, and one more account to keep. So every unverified request
/// from one network, whatever its credentials, shares that network's budget.
///
/// Copy and small (at most 17 bytes of key), so a table of them stays cheap.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallerKey {
    /// A verified subject's hash ([`Caller::subject`]).
    Subject([u8; 16]),
    /// Anyone else: the client's network.
    Network(IpAddr),
}

impl CallerKey {
    /// The key of a request from `caller`, received from `peer` (the client's address;
    /// `None` when unknown). `None`: the request is nobody's to count.
    pub fn of(caller: Caller, peer: Option<IpAddr>) -> Option<CallerKey> {
        if caller.is_verified()
            && let Some(hash) = caller.hash()
        {
            return Some(CallerKey::Subject(hash));
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
            CallerKey::Subject(hash) => {
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
    fn credentials_among_other_headers_make_the_same_caller() {
        let alone = Caller::of(&with(AUTHORIZATION, "Bearer alice"));
        let mut among = HeaderMap::new();
        among.insert(http::header::HOST, "proxy".parse().unwrap());
        among.insert(http::header::ACCEPT, "*/*".parse().unwrap());
        among.insert(AUTHORIZATION, "Bearer alice".parse().unwrap());
        among.insert(
            HeaderName::from_static("mcp-session-id"),
            "s".parse().unwrap(),
        );
        assert_eq!(Caller::of(&among), alone);
        among.remove(AUTHORIZATION);
        assert!(Caller::of(&among).is_anonymous());
        // Every credential header makes a caller, first, among the others or last; the
        // others none.
        for name in &CREDENTIALS {
            for at in 0..=among.len() {
                let mut headers = HeaderMap::new();
                let mut others = among.iter();
                for _ in 0..at {
                    let (n, v) = others.next().unwrap();
                    headers.insert(n.clone(), v.clone());
                }
                headers.insert(name.clone(), "k".parse().unwrap());
                for (n, v) in others {
                    headers.insert(n.clone(), v.clone());
                }
                assert_eq!(headers.keys().position(|n| n == name), Some(at));
                assert!(!Caller::of(&headers).is_anonymous(), "{name} at {at}");
            }
        }
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
    fn a_caller_key_is_the_verified_subject_else_the_network() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let alice = Caller::subject("https://idp", "alice");
        assert!(alice.is_verified());
        assert_eq!(
            CallerKey::of(alice, Some(v4)),
            CallerKey::of(alice, Some("198.51.100.1".parse().unwrap())),
            "a subject counts wherever it comes from"
        );
        assert_eq!(
            CallerKey::of(alice, None),
            Some(CallerKey::Subject(alice.hash().unwrap()))
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

    #[test]
    fn unverified_credentials_share_their_networks_key() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let network = Some(CallerKey::Network(v4));
        for (name, value) in [
            (AUTHORIZATION, "Bearer made-up-1"),
            (AUTHORIZATION, "Bearer made-up-2"),
            (COOKIE, "sid=x"),
            (HeaderName::from_static("x-api-key"), "random"),
        ] {
            let caller = Caller::of(&with(name, value));
            assert!(!caller.is_verified() && !caller.is_anonymous());
            assert_eq!(CallerKey::of(caller, Some(v4)), network, "{value}");
            assert_eq!(CallerKey::of(caller, None), None);
        }
    }

    #[test]
    fn a_caller_read_back_from_a_store_is_the_same_caller() {
        let alice = Caller::subject("https://idp", "alice");
        let stored = Caller::from_hash(alice.hash());
        assert!(!stored.is_verified());
        assert_eq!(
            stored, alice,
            "verification is how it was known, not who it is"
        );
        let mut set = std::collections::HashSet::new();
        set.insert(alice);
        assert!(set.contains(&stored));
    }
}
