//! The fields that belong to one connection (RFC 9110 §7.6.1): the hop-by-hop ones, and
//! any a `Connection` field lists. Never forwarded, in either direction: the paths'
//! copies of heads leave them out (`paths::headers`), and so does the upstream's
//! connection when it writes a client's fields as they came (`upstream::Passed`).

use http::HeaderMap;
use http::header::{self, HeaderName};

/// The hop-by-hop fields (with `Upgrade`: [`is_hop_by_hop`]).
pub const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Whether `name` is a hop-by-hop field's.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || name == header::UPGRADE
}

/// The names a head's `Connection` fields list (hop-by-hop as well, RFC 9110 §7.6.1):
/// their tokens as written, read once, with no name made of each (a client's
/// `Connection: keep-alive`, the usual one, is one token).
#[derive(Debug)]
pub struct Listed<'a> {
    tokens: Vec<&'a [u8]>,
}

impl<'a> Listed<'a> {
    /// The names `headers`' `Connection` fields list.
    pub fn of(headers: &'a HeaderMap) -> Self {
        // HTTP/1.1 keeps a connection open without it, and many clients send none (most
        // HTTP libraries send `keep-alive` anyway, and pay the look on top of the lookup).
        if !super::holds(headers, &header::CONNECTION) {
            return Listed { tokens: Vec::new() };
        }
        let tokens = headers
            .get_all(header::CONNECTION)
            .iter()
            .flat_map(|value| super::tokens(value.as_bytes()))
            .filter(|token| !token.is_empty())
            .collect();
        Listed { tokens }
    }

    /// Whether `name` is one of them.
    pub fn lists(&self, name: &HeaderName) -> bool {
        // A name is lowercase; a token may be written in any case.
        let name = name.as_str().as_bytes();
        self.tokens
            .iter()
            .any(|token| token.eq_ignore_ascii_case(name))
    }
}
