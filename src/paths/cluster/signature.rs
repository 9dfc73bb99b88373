//! The signature on a request one proxy replica sends another, in its
//! [`FORWARDED`] header: `1;<unix ms>;<client address or ->;<HMAC-SHA256, base64url>`.
//!
//! Replicas treat a request from another replica differently from a client's: it is not
//! forwarded again (no loops), it is counted against the client it came from (its
//! address travels in the header), and the cluster's own endpoints (deleted sealed
//! sessions) answer only such requests. So the header must be one only a replica can
//! write. The MAC is keyed with a key derived from the state keys every replica of a
//! cluster already shares (`session.state_key`, or the sealing keys), and covers the
//! header's own fields, the method, the path, the caller's credential headers (their
//! hash, as [`Caller`] makes it) and the body's SHA-256: a captured signature neither
//! moves to another request nor to another caller. The timestamp bounds replay to
//! [`SKEW`] either way (the replicas' clocks must agree within it).
//!
//! The first key signs; every key verifies, so keys rotate as the state keys do.

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method};
use sha2::{Digest, Sha256};

use crate::mcp::caller::Caller;
use crate::session::{Millis, keyed_hmac};

/// Set, signed, on every request one replica sends another.
pub static FORWARDED: HeaderName = HeaderName::from_static("mcp-proxy-forwarded");

/// How far a signature's timestamp may be from the receiver's clock, either way.
pub const SKEW: Duration = Duration::from_secs(30);

const VERSION: &str = "1";
/// What the MAC is computed in (no other MAC of the proxy's shares it).
const DOMAIN: &[u8] = b"mcp-session-proxy/cluster-request/v1\0";
/// What a state key is turned into a signing key with.
const KEY_DOMAIN: &[u8] = b"mcp-session-proxy/cluster-key/v1";
/// The longest header worth parsing.
const MAX_HEADER: usize = 128;

/// Why a [`FORWARDED`] header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Forged {
    #[error("it is not a replica's signature")]
    Malformed,
    #[error("its timestamp is more than 30 s from this replica's clock")]
    Stale,
    #[error("its signature does not verify with this cluster's keys")]
    BadSignature,
}

/// What a signature covers besides its own fields.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub method: &'a Method,
    /// The request's path (no query: replicas send none).
    pub path: &'a str,
    /// Its headers: the credential headers among them are covered.
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// A request verified as another replica's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FromPeer {
    /// The address of the client the replica received it from (`None`: none, or a
    /// request of the replica's own).
    pub client: Option<IpAddr>,
}

/// Signs and verifies requests between replicas.
#[derive(Clone)]
pub struct Signer {
    /// The first signs; all verify.
    keyed: Vec<Hmac<Sha256>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} key(s), hidden)", self.keyed.len())
    }
}

impl Signer {
    /// A signer with keys derived from the state keys `keys`.
    pub fn new(keys: &[Vec<u8>]) -> Signer {
        let keyed = keys
            .iter()
            .map(|key| {
                let mut mac = keyed_hmac(key);
                mac.update(KEY_DOMAIN);
                keyed_hmac(&mac.finalize().into_bytes())
            })
            .collect();
        Signer { keyed }
    }

    /// The [`FORWARDED`] header for `request`, received from `client`, sent at `now`.
    pub fn sign(&self, request: &Signed<'_>, client: Option<IpAddr>, now: Millis) -> HeaderValue {
        let client = client.map_or_else(|| "-".to_owned(), |ip| ip.to_string());
        let tag = self
            .keyed
            .first()
            .map(|keyed| {
                mac(keyed, request, now, &client)
                    .finalize()
                    .into_bytes()
                    .to_vec()
            })
            .unwrap_or_default();
        let value = format!("{VERSION};{now};{client};{}", URL_SAFE_NO_PAD.encode(tag));
        // Digits, an IP address and base64url: always a valid header value.
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("-"))
    }

    /// Whether `value` signs `request` (within [`SKEW`] of `now`), and whom it is from.
    pub fn verify(
        &self,
        value: &HeaderValue,
        request: &Signed<'_>,
        now: Millis,
    ) -> Result<FromPeer, Forged> {
        let value = value.to_str().map_err(|_| Forged::Malformed)?;
        if value.len() > MAX_HEADER {
            return Err(Forged::Malformed);
        }
        let mut fields = value.split(';');
        let (Some(VERSION), Some(at), Some(client), Some(tag), None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return Err(Forged::Malformed);
        };
        let at: Millis = at.parse().map_err(|_| Forged::Malformed)?;
        let from = match client {
            "-" => None,
            ip => Some(ip.parse::<IpAddr>().map_err(|_| Forged::Malformed)?),
        };
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Forged::Malformed)?;
        if at.abs_diff(now) > SKEW.as_millis() as u64 {
            return Err(Forged::Stale);
        }
        let verified = self
            .keyed
            .iter()
            .any(|keyed| mac(keyed, request, at, client).verify_slice(&tag).is_ok());
        if !verified {
            return Err(Forged::BadSignature);
        }
        Ok(FromPeer { client: from })
    }
}

fn mac(keyed: &Hmac<Sha256>, request: &Signed<'_>, at: Millis, client: &str) -> Hmac<Sha256> {
    let mut mac = keyed.clone();
    mac.update(DOMAIN);
    for field in [
        VERSION,
        &at.to_string(),
        client,
        request.method.as_str(),
        request.path,
        &Caller::of(request.headers).hex(),
    ] {
        mac.update(field.as_bytes());
        mac.update(b"\0");
    }
    mac.update(&Sha256::digest(request.body));
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;

    fn headers(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(authorization).unwrap(),
        );
        headers
    }

    #[test]
    fn a_signature_verifies_for_its_request_only() {
        let signer = Signer::new(&[vec![1; 32]]);
        let alice = headers("Bearer alice");
        let request = Signed {
            method: &Method::POST,
            path: "/mcp/files",
            headers: &alice,
            body: b"{}",
        };
        let client: IpAddr = "10.0.0.9".parse().unwrap();
        let value = signer.sign(&request, Some(client), NOW);
        assert_eq!(
            signer.verify(&value, &request, NOW + 1_000),
            Ok(FromPeer {
                client: Some(client)
            })
        );
        let bob = headers("Bearer bob");
        for other in [
            Signed {
                path: "/mcp/other",
                ..request
            },
            Signed {
                method: &Method::DELETE,
                ..request
            },
            Signed {
                body: b"{\"x\":1}",
                ..request
            },
            Signed {
                headers: &bob,
                ..request
            },
        ] {
            assert_eq!(
                signer.verify(&value, &other, NOW),
                Err(Forged::BadSignature),
                "{other:?}"
            );
        }
        // Another client address written in: the MAC covers it.
        let moved = value.to_str().unwrap().replace("10.0.0.9", "10.0.0.8");
        assert_eq!(
            signer.verify(&HeaderValue::from_str(&moved).unwrap(), &request, NOW),
            Err(Forged::BadSignature)
        );
    }

    #[test]
    fn old_foreign_or_made_up_signatures_are_refused() {
        let signer = Signer::new(&[vec![1; 32]]);
        let none = HeaderMap::new();
        let request = Signed {
            method: &Method::GET,
            path: "/cluster/tombstones",
            headers: &none,
            body: b"",
        };
        let value = signer.sign(&request, None, NOW);
        let late = NOW + SKEW.as_millis() as u64 + 1;
        assert_eq!(signer.verify(&value, &request, late), Err(Forged::Stale));
        let other = Signer::new(&[vec![2; 32]]);
        assert_eq!(
            other.verify(&value, &request, NOW),
            Err(Forged::BadSignature)
        );
        // Rotation: a signer with the new key first still verifies the old one's.
        let rotated = Signer::new(&[vec![2; 32], vec![1; 32]]);
        assert!(rotated.verify(&value, &request, NOW).is_ok());
        for made_up in ["1", "yes", "1;x;-;AAAA", "2;1;-;AAAA", "1;1;not-an-ip;AAAA"] {
            assert_eq!(
                signer.verify(&HeaderValue::from_static(made_up), &request, NOW),
                Err(Forged::Malformed),
                "{made_up}"
            );
        }
    }
}
