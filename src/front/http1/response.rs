//! A response head as the lean loop writes it, and how its body is framed — as hyper
//! writes them: the status line in the request's version, the fields as the response
//! has them (lowercase names), `date` when it has none, `content-length` when the body's
//! length is known and `transfer-encoding: chunked` when it is not (HTTP/1.0: the body
//! ends with the connection), no body at all for `HEAD`, 1xx, 204 and 304.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{Method, StatusCode, Version};
use http_body::SizeHint;

use crate::wire;

/// How a response's body is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// None is sent (`HEAD`, 1xx, 204, 304), whatever the body holds.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// In chunks, ended by a last empty one.
    Chunked,
    /// As it comes; the connection's end ends it (HTTP/1.0 without a known length).
    Close,
}

/// What the request said that the response's head depends on.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub method: &'a Method,
    pub version: Version,
    /// Whether the connection may stay open after this exchange: the client asked for
    /// it and the listener is not draining.
    pub keep_alive: bool,
}

/// The head of a response (`parts`) to a request `asked`, with a body of `size`: its
/// bytes, how its body goes, and whether the connection stays open after it
/// (`Connection: close` in the response ends it; so does a body that only the
/// connection's end can end, and a 101).
pub fn head(
    parts: &http::response::Parts,
    size: &SizeHint,
    asked: Asked<'_>,
    out: &mut Vec<u8>,
) -> (Framing, bool) {
    let headers = &parts.headers;
    let mut keep_alive = asked.keep_alive;
    let mut status = parts.status;
    // As hyper does: no 1xx but 101 is an answer of its own (a 500 instead, and the
    // connection closed), and after a 101 the connection is no longer HTTP.
    if status.is_informational() {
        keep_alive = false;
        if status != StatusCode::SWITCHING_PROTOCOLS {
            status = StatusCode::INTERNAL_SERVER_ERROR;
        }
    }
    // The response's version when it is the older (an HTTP/1.0 upstream's, passed on).
    let version = match (asked.version, parts.version) {
        (Version::HTTP_10, _) | (_, Version::HTTP_10) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let reason = parts
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .filter(|_| status == parts.status)
        .map(|reason| reason.as_bytes());
    out.reserve(64 + headers.len() * 32);
    match (version, status, reason) {
        (Version::HTTP_11, StatusCode::OK, None) => out.extend_from_slice(b"HTTP/1.1 200 OK\r\n"),
        _ => {
            out.extend_from_slice(match version {
                Version::HTTP_10 => b"HTTP/1.0 ",
                _ => b"HTTP/1.1 ",
            });
            out.extend_from_slice(status.as_str().as_bytes());
            out.push(b' ');
            match reason {
                Some(reason) => out.extend_from_slice(reason),
                None => {
                    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes())
                }
            }
            out.extend_from_slice(b"\r\n");
        }
    }
    let bodiless = *asked.method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    // A status that never has a body has no length either (hyper drops one).
    let lengthless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let mut announced: Option<u64> = None;
    let mut dated = false;
    let mut said_close = false;
    let mut said_keep_alive = false;
    if status == parts.status {
        for (name, value) in headers {
            if name == TRANSFER_ENCODING {
                // The framing is the loop's to choose.
                continue;
            }
            if name == CONTENT_LENGTH {
                match wire::length(value.as_bytes()) {
                    Some(length) if announced.is_none() && !lengthless => announced = Some(length),
                    // A second or unreadable length: the body's own decides.
                    _ => continue,
                }
            } else if name == CONNECTION {
                for token in wire::tokens(value.as_bytes()) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                        said_close = true;
                    }
                    said_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name == DATE {
                dated = true;
            }
            wire::write_field(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    let framing = match (announced, size.exact()) {
        _ if bodiless => {
            // A HEAD's answer says the length a GET's would have (none when it is 0).
            if announced.is_none()
                && *asked.method == Method::HEAD
                && !lengthless
                && let Some(length) = size.exact().filter(|&n| n > 0)
            {
                wire::write_length(out, length);
            }
            Framing::Empty
        }
        (Some(length), _) => Framing::Length(length),
        (None, Some(length)) => {
            wire::write_length(out, length);
            Framing::Length(length)
        }
        (None, None) if version == Version::HTTP_10 => {
            keep_alive = false;
            Framing::Close
        }
        (None, None) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            Framing::Chunked
        }
    };
    match version {
        Version::HTTP_10 if keep_alive && !said_keep_alive => {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
        // The client asked to close: the answer says so too (as hyper's does).
        Version::HTTP_11 if !asked.keep_alive && !said_close => {
            out.extend_from_slice(b"connection: close\r\n");
        }
        _ => {}
    }
    if !dated {
        DATE_NOW.with(|date| {
            let mut date = date.borrow_mut();
            out.extend_from_slice(b"date: ");
            out.extend_from_slice(date.now());
            out.extend_from_slice(b"\r\n");
        });
    }
    out.extend_from_slice(b"\r\n");
    (framing, keep_alive)
}

/// The start of a chunk of `len` bytes.
pub fn chunk_head(len: usize, out: &mut Vec<u8>) {
    wire::write_hex(out, len);
    out.extend_from_slice(b"\r\n");
}

/// After the last chunk.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

thread_local! {
    /// The `date` value, made once a second per thread.
    static DATE_NOW: RefCell<CachedDate> = RefCell::new(CachedDate::default());
}

#[derive(Default)]
struct CachedDate {
    /// The second it is for.
    second: u64,
    text: Vec<u8>,
}

impl CachedDate {
    fn now(&mut self) -> &[u8] {
        let now = SystemTime::now();
        let second = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        if second != self.second || self.text.is_empty() {
            self.second = second;
            self.text = httpdate::fmt_http_date(now).into_bytes();
        }
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn written(
        status: StatusCode,
        headers: &[(&str, &str)],
        size: SizeHint,
        method: Method,
        version: Version,
        keep_alive: bool,
    ) -> (String, Framing, bool) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let mut out = Vec::new();
        let asked = Asked {
            method: &method,
            version,
            keep_alive,
        };
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = status;
        parts.headers = map;
        let (framing, keep) = head(&parts, &size, asked, &mut out);
        let text = String::from_utf8(out).unwrap();
        // The date changes: shown as `date: …`.
        let text = text
            .lines()
            .map(|l| {
                if l.starts_with("date: ") {
                    "date: …"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        (text, framing, keep)
    }

    #[test]
    fn a_known_length_is_announced_an_unknown_one_chunked() {
        let (text, framing, keep) = written(
            StatusCode::OK,
            &[("content-type", "application/json")],
            SizeHint::with_exact(12),
            Method::POST,
            Version::HTTP_11,
            true,
        );
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\ncontent-type: application/json\ncontent-length: 12\ndate: …\n"
        );
        assert_eq!((framing, keep), (Framing::Length(12), true));
        let (text, framing, _) = written(
            StatusCode::OK,
            &[("content-type", "text/event-stream")],
            SizeHint::new(),
            Method::POST,
            Version::HTTP_11,
            true,
        );
        assert!(text.contains("transfer-encoding: chunked\n"), "{text}");
        assert_eq!(framing, Framing::Chunked);
    }

    #[test]
    fn the_responses_own_length_and_connection_are_kept_its_encoding_is_not() {
        let (text, framing, keep) = written(
            StatusCode::NOT_FOUND,
            &[
                ("content-length", "3"),
                ("transfer-encoding", "chunked"),
                ("connection", "close"),
            ],
            SizeHint::new(),
            Method::GET,
            Version::HTTP_11,
            true,
        );
        assert_eq!(
            text,
            "HTTP/1.1 404 Not Found\ncontent-length: 3\nconnection: close\ndate: …\n"
        );
        assert_eq!((framing, keep), (Framing::Length(3), false));
    }

    #[test]
    fn bodiless_answers_and_http_1_0() {
        let (text, framing, _) = written(
            StatusCode::NO_CONTENT,
            &[],
            SizeHint::with_exact(0),
            Method::DELETE,
            Version::HTTP_11,
            true,
        );
        assert_eq!(text, "HTTP/1.1 204 No Content\ndate: …\n");
        assert_eq!(framing, Framing::Empty);
        let (text, _, _) = written(
            StatusCode::NOT_MODIFIED,
            &[("content-length", "3")],
            SizeHint::with_exact(0),
            Method::GET,
            Version::HTTP_11,
            true,
        );
        assert_eq!(text, "HTTP/1.1 304 Not Modified\ndate: …\n", "no length");
        let (text, _, _) = written(
            StatusCode::OK,
            &[],
            SizeHint::with_exact(0),
            Method::HEAD,
            Version::HTTP_11,
            true,
        );
        assert_eq!(
            text, "HTTP/1.1 200 OK\ndate: …\n",
            "a HEAD of nothing says no length"
        );
        let (text, framing, _) = written(
            StatusCode::OK,
            &[],
            SizeHint::with_exact(5),
            Method::HEAD,
            Version::HTTP_11,
            true,
        );
        assert!(text.contains("content-length: 5\n"), "{text}");
        assert_eq!(framing, Framing::Empty);
        let (text, framing, keep) = written(
            StatusCode::OK,
            &[],
            SizeHint::new(),
            Method::POST,
            Version::HTTP_10,
            true,
        );
        assert!(text.starts_with("HTTP/1.0 200 OK\n"), "{text}");
        assert_eq!((framing, keep), (Framing::Close, false));
        let (text, _, keep) = written(
            StatusCode::OK,
            &[],
            SizeHint::with_exact(1),
            Method::POST,
            Version::HTTP_10,
            true,
        );
        assert!(text.contains("connection: keep-alive\n") && keep, "{text}");
    }

    #[test]
    fn an_asked_close_is_said_and_1xx_are_not_answers() {
        let (text, _, keep) = written(
            StatusCode::OK,
            &[],
            SizeHint::with_exact(0),
            Method::POST,
            Version::HTTP_11,
            false,
        );
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\ncontent-length: 0\nconnection: close\ndate: …\n"
        );
        assert!(!keep);
        let (text, framing, keep) = written(
            StatusCode::CONTINUE,
            &[("x", "y")],
            SizeHint::with_exact(0),
            Method::POST,
            Version::HTTP_11,
            true,
        );
        assert_eq!(
            text,
            "HTTP/1.1 500 Internal Server Error\ncontent-length: 0\ndate: …\n"
        );
        assert_eq!((framing, keep), (Framing::Length(0), false));
        let (_, _, keep) = written(
            StatusCode::SWITCHING_PROTOCOLS,
            &[],
            SizeHint::with_exact(0),
            Method::GET,
            Version::HTTP_11,
            true,
        );
        assert!(!keep, "no HTTP after a 101");
    }

    #[test]
    fn chunks_are_framed_in_hex() {
        let mut out = Vec::new();
        chunk_head(255, &mut out);
        assert_eq!(out, b"FF\r\n");
    }
}
