//! A request head as the lean loop takes it: parsed from the bytes read so far, or left
//! to hyper.
//!
//! The loop takes only what it understands whole: an HTTP/1.0 or 1.1 request in origin
//! form whose body, if any, is announced by one `Content-Length`. Everything else — a
//! head `httparse` refuses or one with more than [`MAX_HEADERS`] fields, a chunked body,
//! `Expect`, `Upgrade`, several lengths, a method or field the `http` types refuse, an
//! absolute or authority target — is [`Parsed::HandOff`]: hyper reads the same bytes
//! again and answers as it always did (400, 431, 100 Continue, a chunked body…).

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::{Method, Uri, Version};

use crate::wire::{self, Fields};

/// The most header fields a head may have (hyper's own default).
pub const MAX_HEADERS: usize = 100;

/// What the bytes read so far hold.
#[derive(Debug)]
pub enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// A head the loop serves (its fields in the caller's [`Fields`]).
    Take(Head),
    /// A head (or bytes) the loop leaves to hyper.
    HandOff,
}

/// A request head the loop serves, as found in the bytes read; its target and fields
/// are made from those bytes once they are taken out of the read buffer.
#[derive(Debug)]
pub struct Head {
    pub method: Method,
    /// Where the request target lies in the head.
    target: Range<usize>,
    pub version: Version,
    /// The head's length in bytes (its body starts there).
    pub len: usize,
    /// The body's, from `Content-Length` (0 without one).
    pub body: usize,
    /// Whether the client keeps the connection after this exchange: HTTP/1.1 unless it
    /// says `Connection: close`, HTTP/1.0 only when it says `keep-alive`.
    pub keep_alive: bool,
}

impl Head {
    /// The request target, from the head's own bytes (`head`, its first [`Head::len`]
    /// bytes taken out of the read buffer); `None` when it is no URI (hyper answers it).
    pub fn target(&self, head: &Bytes) -> Option<Uri> {
        Uri::from_maybe_shared(head.slice(self.target.clone())).ok()
    }
}

/// Reads a request head from the start of `buf`, its fields into `fields`.
pub fn parse(buf: &[u8], fields: &mut Fields) -> Parsed {
    fields.clear();
    // Filled by the parse, not set beforehand (100 fields, 3.2 KB written per head).
    let mut found = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut found) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::HandOff,
    };
    let (Some(method), Some(path), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Parsed::HandOff;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::HandOff;
    };
    if method == Method::CONNECT || !path.starts_with('/') {
        return Parsed::HandOff;
    }
    let Some(target) = wire::span(buf, path.as_bytes()) else {
        return Parsed::HandOff;
    };
    let version = match minor {
        0 => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let mut body: Option<usize> = None;
    let mut close = false;
    let mut keep = false;
    for field in request.headers.iter() {
        let Some(name) = fields.add(buf, field.name, field.value) else {
            return Parsed::HandOff;
        };
        if name == TRANSFER_ENCODING || name == EXPECT || name == UPGRADE {
            return Parsed::HandOff;
        }
        if name == CONTENT_LENGTH {
            let Some(length) = wire::length(field.value).and_then(|n| usize::try_from(n).ok())
            else {
                return Parsed::HandOff;
            };
            if body.is_some_and(|seen| seen != length) {
                return Parsed::HandOff;
            }
            body = Some(length);
        } else if name == CONNECTION {
            for token in wire::tokens(field.value) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let keep_alive = match version {
        Version::HTTP_10 => keep && !close,
        _ => !close,
    };
    Parsed::Take(Head {
        method,
        target,
        version,
        len,
        body: body.unwrap_or(0),
        keep_alive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of `text`, its target and its fields.
    fn take(text: &str) -> (Head, Uri, http::HeaderMap) {
        let mut fields = Fields::default();
        match parse(text.as_bytes(), &mut fields) {
            Parsed::Take(head) => {
                let bytes = Bytes::copy_from_slice(&text.as_bytes()[..head.len]);
                let uri = head.target(&bytes).expect("a target");
                let map = fields.take(&bytes);
                (head, uri, map)
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }

    fn parsed(text: &[u8]) -> Parsed {
        parse(text, &mut Fields::default())
    }

    fn handed_off(text: &str) -> bool {
        matches!(parsed(text.as_bytes()), Parsed::HandOff)
    }

    #[test]
    fn a_post_with_a_length_is_taken_with_its_fields() {
        let text = "POST /mcp?x=1 HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n\
                    X-A: 1\r\nx-a: 2\r\nContent-Length: 12\r\n\r\n{\"jsonrpc\":1}";
        let (head, uri, headers) = take(text);
        assert_eq!(head.method, Method::POST);
        assert_eq!(uri.path(), "/mcp");
        assert_eq!(uri.query(), Some("x=1"));
        assert_eq!(head.version, Version::HTTP_11);
        assert_eq!(head.body, 12);
        assert_eq!(&text[head.len..], "{\"jsonrpc\":1}");
        assert!(head.keep_alive);
        assert_eq!(headers.len(), 5);
        assert_eq!(headers[http::header::CONTENT_TYPE], "application/json");
        let a: Vec<_> = headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"], "repeated fields kept, in order");
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        let keep_alive = |text| take(text).0.keep_alive;
        assert!(!keep_alive("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
        assert!(!keep_alive("GET / HTTP/1.0\r\n\r\n"));
        assert!(keep_alive(
            "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
        ));
        assert!(!keep_alive(
            "GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n"
        ));
    }

    #[test]
    fn a_head_not_yet_whole_is_partial_wherever_it_is_cut() {
        let text = "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
        for cut in 0..text.len() {
            assert!(
                matches!(parsed(&text.as_bytes()[..cut]), Parsed::Partial),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn what_hyper_answers_differently_is_handed_to_it() {
        for text in [
            "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: \r\n\r\n",
            "CONNECT p:443 HTTP/1.1\r\n\r\n",
            "GET http://p/mcp HTTP/1.1\r\n\r\n",
            "GET * HTTP/1.1\r\n\r\n",
            "BAD REQUEST\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ] {
            assert!(handed_off(text), "{text:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(handed_off(&format!("GET / HTTP/1.1\r\n{many}\r\n")));
        // The same length twice is one length.
        assert_eq!(
            take("POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n")
                .0
                .body,
            2
        );
    }
}
