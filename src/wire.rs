//! HTTP/1.1 heads as both of the proxy's own loops read and write them — the client's
//! (`front::http1`) and the upstream's (`upstream::connections`): header fields kept as
//! slices of the bytes read (no copy per value, as hyper keeps them), a field seldom sent
//! told absent at a glance ([`holds`]), a `Content-Length` read, `Connection` tokens,
//! fields and numbers written without formatting; and a body read whole ([`body`]).

pub mod body;
pub mod hop_by_hop;

use std::ops::Range;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::mcp::headers::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

/// A head's fields as found while it is read: each name, made at once, and where its
/// value lies in the head's bytes — made into a [`HeaderMap`] of slices of those bytes
/// once they are taken out of the read buffer ([`Fields::take`]). Kept by a connection
/// and used again for each head.
#[derive(Debug, Default)]
pub struct Fields {
    /// This head's fields.
    found: Vec<(HeaderName, Range<usize>)>,
    /// The names of the heads read before, by place, as written and as made: a peer
    /// writes the same names in the same order head after head (a client's requests on
    /// a kept-alive connection, an upstream's answers), so a name written again at its
    /// place is taken from here rather than made again. At most [`REMEMBERED`] places,
    /// names of at most [`LONGEST_REMEMBERED`] bytes (a longer one keeps its place,
    /// unremembered).
    names: Vec<(Vec<u8>, HeaderName)>,
}

/// How many of a head's first fields [`Fields`] remembers the names of.
const REMEMBERED: usize = 32;
/// The longest name [`Fields`] remembers.
const LONGEST_REMEMBERED: usize = 64;

impl Fields {
    /// Forgets the last head's fields (not their names).
    pub fn clear(&mut self) {
        self.found.clear();
    }

    /// Adds the field `name: value`, `value` a slice of `head` (the bytes being read),
    /// if the name is valid, and returns it (to be looked at as `http` names compare);
    /// `None` if not (the head is refused, or left to hyper). The value is as httparse
    /// found it: httparse accepts in a value exactly the bytes `http` does (visible
    /// ASCII, spaces, tabs and bytes from 0x80 on; `httparse_takes_the_values_http_does`
    /// holds them to it), so it is not looked at again here — `take` makes it a
    /// [`HeaderValue`], which checks it once more.
    pub fn add(&mut self, head: &[u8], name: &str, value: &[u8]) -> Option<&HeaderName> {
        let place = self.found.len();
        let name = name.as_bytes();
        let made = match self.names.get(place) {
            Some((written, made)) if !written.is_empty() && written[..] == *name => made.clone(),
            _ => {
                let made = field_name(name)?;
                self.remember(place, name, &made);
                made
            }
        };
        self.found.push((made, span(head, value)?));
        self.found.last().map(|(name, _)| name)
    }

    /// Remembers that `name`, written at `place`, is `made`.
    fn remember(&mut self, place: usize, name: &[u8], made: &HeaderName) {
        // A name too long to keep keeps its place with no bytes, which `add` matches to
        // no name.
        let name = if name.len() <= LONGEST_REMEMBERED {
            name
        } else {
            &[]
        };
        let remembered = self.names.len();
        match self.names.get_mut(place) {
            Some((written, known)) => {
                written.clear();
                written.extend_from_slice(name);
                *known = made.clone();
            }
            // The places before it are remembered (each was, when it was read).
            None if place == remembered && place < REMEMBERED => {
                self.names.push((name.to_vec(), made.clone()));
            }
            None => {}
        }
    }

    /// The fields as a map whose values are slices of `head` — the same bytes they were
    /// found in, taken out of the read buffer — in the order they came.
    pub fn take(&mut self, head: &Bytes) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.found.len());
        for (name, at) in self.found.drain(..) {
            // Valid: httparse admitted these very bytes, which `http` admits too.
            if let Ok(value) = HeaderValue::from_maybe_shared(head.slice(at)) {
                map.append(name, value);
            }
        }
        map
    }
}

/// Where `part` lies in `head` (the bytes read), of which it was made a slice — by
/// httparse, or by a parse of the body; `None` if it is not one (refused, not a panic).
pub fn span(head: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(head.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= head.len()).then_some(start..end)
}

/// A field's name: the MCP transport's own without an allocation (as `http` makes the
/// standard ones), any other valid name lowercased.
fn field_name(name: &[u8]) -> Option<HeaderName> {
    for known in [&MCP_SESSION_ID, &MCP_PROTOCOL_VERSION] {
        if name.eq_ignore_ascii_case(known.as_str().as_bytes()) {
            return Some(known.clone());
        }
    }
    HeaderName::from_bytes(name).ok()
}

/// Whether `headers` has a field `name`, told by a look over its names (a head the proxy
/// reads has a handful) instead of a lookup, which hashes `name` first: for the fields
/// most heads do not have and every call asks about. A look that finds the name is paid
/// on top of the lookup that follows, so not for the fields most heads have. (A look at
/// each value rather than each name, `HeaderMap::iter`, costs more than the lookup.)
pub fn holds(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.keys().any(|field| field == name)
}

/// A `Content-Length` value: decimal digits and nothing else.
pub fn length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// A media type field's essence (`Content-Type`, RFC 9110 §8.3.1): up to its first
/// `;` (found by `memchr`: an ASCII byte, so a boundary of the text), trimmed.
pub fn essence(value: &str) -> &str {
    match memchr::memchr(b';', value.as_bytes()) {
        Some(at) => value.get(..at).unwrap_or(value),
        None => value,
    }
    .trim()
}

/// The tokens of a `Connection` (or any comma-separated) value, trimmed.
pub fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// Writes the field `name: value`.
pub fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes `content-length: n`.
pub fn write_length(out: &mut Vec<u8>, n: u64) {
    write_field(
        out,
        b"content-length",
        itoa::Buffer::new().format(n).as_bytes(),
    );
}

/// Writes `n` in hexadecimal, as a chunk's size.
pub fn write_hex(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789ABCDEF"[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_media_type_is_read_up_to_its_parameters() {
        for (value, essence) in [
            ("application/json", "application/json"),
            ("application/json; charset=utf-8", "application/json"),
            (" text/event-stream ;a=b;c=d", "text/event-stream"),
            ("é/x;y", "é/x"),
            (";", ""),
            ("", ""),
        ] {
            assert_eq!(super::essence(value), essence, "{value:?}");
        }
    }

    #[test]
    fn fields_become_slices_of_the_head_in_order() {
        let head = Bytes::from_static(b"X-A: 1\r\nMcp-Session-Id: s\r\nx-a: 2\r\n");
        let mut fields = Fields::default();
        assert_eq!(
            fields.add(&head, "X-A", &head[5..6]),
            Some(&HeaderName::from_static("x-a"))
        );
        assert_eq!(
            fields.add(&head, "Mcp-Session-Id", &head[24..25]),
            Some(&MCP_SESSION_ID)
        );
        assert!(fields.add(&head, "x-a", &head[32..33]).is_some());
        assert!(fields.add(&head, "Bad Name", &head[5..6]).is_none());
        let elsewhere = b"2".to_vec();
        assert!(
            fields.add(&head, "X-B", &elsewhere).is_none(),
            "not a slice of the head"
        );
        let map = fields.take(&head);
        let a: Vec<_> = map.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"]);
        assert_eq!(map[&MCP_SESSION_ID], "s");
        assert_eq!(
            map[&MCP_SESSION_ID].as_bytes().as_ptr(),
            head[24..].as_ptr(),
            "a slice of the head, not a copy"
        );
        assert!(fields.found.is_empty(), "taken, ready for the next head");
    }

    #[test]
    fn a_name_written_again_at_its_place_is_the_one_made_before() {
        let head = Bytes::from_static(b"X-Custom: 1\r\n");
        let value = &head[10..11];
        let mut fields = Fields::default();
        let made = |fields: &mut Fields, name| {
            fields.clear();
            fields.add(&head, name, value).map(|n| n.as_str().as_ptr())
        };
        let first = made(&mut fields, "X-Custom");
        assert!(first.is_some());
        assert_eq!(
            made(&mut fields, "X-Custom"),
            first,
            "taken as made, not made again"
        );
        assert_ne!(
            made(&mut fields, "x-custom"),
            first,
            "another spelling is made anew"
        );
        // A refused name refuses its head; the next head is read as any other.
        assert_eq!(made(&mut fields, "Bad Name"), None);
        assert!(made(&mut fields, "X-Custom").is_some());
    }

    /// A head's names as `fields` makes them, heads read one after the other.
    fn names_made(fields: &mut Fields, names: &[&str]) -> Vec<String> {
        let head = Bytes::from(
            names
                .iter()
                .map(|n| format!("{n}: v\r\n"))
                .collect::<String>(),
        );
        fields.clear();
        let mut at = 0;
        for name in names {
            let value = at + name.len() + 2;
            let made = fields.add(&head, name, &head[value..value + 1]).cloned();
            assert_eq!(made, HeaderName::from_bytes(name.as_bytes()).ok(), "{name}");
            at = value + 3;
        }
        let map = fields.take(&head);
        map.keys().map(|name| name.as_str().to_owned()).collect()
    }

    #[test]
    fn names_written_again_at_their_place_are_taken_as_made_and_never_mistaken() {
        let mut fields = Fields::default();
        let long = format!("x-{}", "a".repeat(LONGEST_REMEMBERED));
        let first = ["Host", "Mcp-Session-Id", "X-A", &long, "Accept"];
        for _ in 0..2 {
            assert_eq!(
                names_made(&mut fields, &first),
                ["host", "mcp-session-id", "x-a", long.as_str(), "accept"]
            );
        }
        // Other names at the same places, other cases, more places, fewer.
        assert_eq!(
            names_made(
                &mut fields,
                &["host", "X-A", "Mcp-Session-Id", &long, "X-B", "x-c"]
            ),
            ["host", "x-a", "mcp-session-id", long.as_str(), "x-b", "x-c"]
        );
        assert_eq!(names_made(&mut fields, &["X-B"]), ["x-b"]);
        assert_eq!(names_made(&mut fields, &["X-B", "X-A"]), ["x-b", "x-a"]);
        // Bounded: a head of many fields leaves as many names as it may.
        let many: Vec<String> = (0..REMEMBERED * 2).map(|i| format!("x-{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(names_made(&mut fields, &many).len(), many.len());
        assert_eq!(fields.names.len(), REMEMBERED);
        assert!(
            fields
                .names
                .iter()
                .all(|(written, _)| written.len() <= LONGEST_REMEMBERED)
        );
    }

    /// `Fields::add` trusts httparse with the values: a byte httparse lets into a value
    /// (in a request or a response, through either of its scans) is one `http` takes,
    /// and one it refuses is one `http` refuses.
    #[test]
    fn httparse_takes_the_values_http_does() {
        for b in (0..=255u8).filter(|b| !matches!(b, b'\r' | b'\n')) {
            // The byte alone, first, last, and inside a value long enough for
            // httparse's vector scan: each of its scans sees it.
            for value in [
                vec![b'a', b],
                vec![b, b'a'],
                vec![b'a', b, b'a'],
                [vec![b'a'; 40], vec![b], vec![b'a'; 40]].concat(),
                [vec![b'a'; 70], vec![b]].concat(),
            ] {
                // httparse leaves out the spaces and tabs around a value (and only those).
                let ows = |c: &u8| matches!(c, b' ' | b'\t');
                let start = value.iter().position(|c| !ows(c)).unwrap_or(value.len());
                let end = value.iter().rposition(|c| !ows(c)).map_or(start, |i| i + 1);
                let http_takes = HeaderValue::from_bytes(&value[start..end]).is_ok();
                for head in [&b"GET / HTTP/1.1\r\n"[..], b"HTTP/1.1 200 OK\r\n"] {
                    let text = [head, b"x: ", &value, b"\r\n\r\n"].concat();
                    let mut slots = [httparse::EMPTY_HEADER; 4];
                    let parsed = if head.starts_with(b"GET") {
                        httparse::Request::new(&mut slots)
                            .parse(&text)
                            .map(|s| s.is_complete())
                    } else {
                        httparse::Response::new(&mut slots)
                            .parse(&text)
                            .map(|s| s.is_complete())
                    };
                    assert_eq!(parsed.is_ok_and(|whole| whole), http_takes, "byte {b:#04x}");
                }
            }
        }
    }

    #[test]
    fn a_field_is_held_when_the_map_finds_it() {
        let mut map = HeaderMap::new();
        let names = [
            http::header::HOST,
            http::header::ORIGIN,
            MCP_SESSION_ID.clone(),
            HeaderName::from_static("x-a"),
        ];
        for name in &names {
            for held in &names {
                assert_eq!(holds(&map, held), map.contains_key(held), "{held}");
            }
            map.append(name.clone(), HeaderValue::from_static("v"));
            map.append(name.clone(), HeaderValue::from_static("w"));
        }
        assert!(names.iter().all(|name| holds(&map, name)));
        assert!(!holds(&map, &http::header::CONNECTION));
    }

    #[test]
    fn lengths_tokens_and_numbers() {
        assert_eq!(length(b"12"), Some(12));
        assert_eq!(length(b" 7 "), Some(7));
        assert_eq!(length(b"007"), Some(7));
        assert_eq!(length(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(length(b"18446744073709551616"), None);
        for bad in [&b""[..], b"+1", b"1,1", b"0x1", b"99999999999999999999999"] {
            assert_eq!(length(bad), None, "{bad:?}");
        }
        let t: Vec<_> = tokens(b"keep-alive , Close").collect();
        assert_eq!(t, [&b"keep-alive"[..], b"Close"]);
        for n in [0usize, 9, 10, 255, 4096, usize::MAX] {
            let mut out = Vec::new();
            write_hex(&mut out, n);
            assert_eq!(out, format!("{n:X}").into_bytes());
        }
        let mut out = Vec::new();
        write_length(&mut out, 42);
        assert_eq!(out, b"content-length: 42\r\n");
    }
}
