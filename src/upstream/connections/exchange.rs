//! One HTTP/1.1 exchange on an upstream connection, as the proxy writes and reads it: the
//! request written in one go (head and body; the transport's own fields first, HTTP's
//! and MCP's: [`OwnFields`]), the response's head parsed as `httparse`
//! parses it, its body framed by `Content-Length`, by chunks, or by the connection's end
//! — read as it comes, an event stream event by event.

use std::io;
use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{
    ACCEPT, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName,
    TRANSFER_ENCODING,
};
use http::{HeaderMap, Method, StatusCode, Version};

use crate::mcp::headers::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::upstream::Passed;
use crate::upstream::credentials::Credentials;
use crate::wire::{self, Fields};

/// The most header fields a response head may have (hyper's default).
const MAX_HEADERS: usize = 100;
/// The longest response head read (hyper's default buffer bound, about).
pub const MAX_HEAD: usize = 400 * 1024;
/// The longest trailer section of a chunked body.
const MAX_TRAILERS: usize = 16 * 1024;

/// The fields the proxy's own transport sets on a request to an upstream — HTTP's and
/// the MCP transport's: written by the connection ahead of the request's map, in place of
/// any field of the same name in it, rather than hashed into the map (each `insert`
/// hashes its name, and may grow the map) to be found and written out again. The
/// upstream's `Host` always (its own authority, which DNS-rebinding protections check,
/// never the client's); the others when set. Made only through its methods, so that a
/// session id is never written unchecked.
#[derive(Debug, Clone, Copy)]
pub struct OwnFields<'a> {
    /// `Host`: the upstream's authority.
    host: &'a [u8],
    /// `Content-Type`.
    content_type: Option<&'static str>,
    /// `Accept`.
    accept: Option<&'static str>,
    /// `Mcp-Session-Id`: the upstream session's id, a field value
    /// ([`OwnFields::in_session`]).
    session_id: Option<&'a str>,
    /// `MCP-Protocol-Version`: one of the versions the proxy knows.
    protocol_version: Option<&'static str>,
    /// A client's fields passed through, written after the request's map.
    passed: Option<Through<'a>>,
}

/// A client's fields passed through ([`Passed`]) and what the transport leaves out of
/// them besides its own fields and the request map's: the client's `Authorization` when
/// it is withheld or exchanged, and the names of the upstream's credentials.
#[derive(Debug, Clone, Copy)]
struct Through<'a> {
    fields: &'a Passed<'a>,
    authorization_left_out: bool,
    credentials: &'a Credentials,
}

impl Through<'_> {
    /// Whether the transport leaves the client's field `name` out.
    fn leaves_out(&self, name: &HeaderName) -> bool {
        (self.authorization_left_out && name == AUTHORIZATION) || self.credentials.strips(name)
    }
}

/// An upstream session id that cannot be written as a field value (it holds a control
/// character other than tab).
#[derive(Debug, PartialEq, Eq)]
pub struct NotAFieldValue;

impl<'a> OwnFields<'a> {
    /// `Host` alone.
    pub const fn host(host: &'a [u8]) -> Self {
        OwnFields {
            host,
            content_type: None,
            accept: None,
            session_id: None,
            protocol_version: None,
            passed: None,
        }
    }

    /// With a client's fields passed through, less its `Authorization` when
    /// `authorization_left_out` and any of `credentials`' names.
    pub fn passing(
        self,
        fields: &'a Passed<'a>,
        authorization_left_out: bool,
        credentials: &'a Credentials,
    ) -> Self {
        OwnFields {
            passed: Some(Through {
                fields,
                authorization_left_out,
                credentials,
            }),
            ..self
        }
    }

    /// With `Content-Type: media_type`.
    pub fn content_type(self, media_type: &'static str) -> Self {
        OwnFields {
            content_type: Some(media_type),
            ..self
        }
    }

    /// With `Accept: media_types`.
    pub fn accept(self, media_types: &'static str) -> Self {
        OwnFields {
            accept: Some(media_types),
            ..self
        }
    }

    /// With the upstream session's id (when it issued one) and protocol version: refused
    /// if the id is not a field value (RFC 9110 §5.5: no control character but tab; the
    /// bytes `http`'s `HeaderValue` takes) — an id is the upstream's, or a record's in a
    /// shared store, never trusted to be one.
    pub fn in_session(
        self,
        session_id: Option<&'a str>,
        protocol_version: &'static str,
    ) -> Result<Self, NotAFieldValue> {
        if let Some(id) = session_id
            && !id.bytes().all(|b| b == b'\t' || (b >= b' ' && b != 0x7f))
        {
            return Err(NotAFieldValue);
        }
        Ok(OwnFields {
            session_id,
            protocol_version: Some(protocol_version),
            ..self
        })
    }

    /// Whether `name` is one of the fields set here (so the map's is left out).
    fn sets(&self, name: &HeaderName) -> bool {
        name == HOST
            || (self.content_type.is_some() && name == CONTENT_TYPE)
            || (self.accept.is_some() && name == ACCEPT)
            || (self.session_id.is_some() && name == MCP_SESSION_ID)
            || (self.protocol_version.is_some() && name == MCP_PROTOCOL_VERSION)
    }

    /// How many bytes [`Self::write`] writes (a field is its name, `: `, its value and
    /// CRLF).
    fn written_len(&self) -> usize {
        let line =
            |name: &str, value: Option<&str>| value.map_or(0, |value| name.len() + value.len() + 4);
        "host".len()
            + self.host.len()
            + 4
            + line(CONTENT_TYPE.as_str(), self.content_type)
            + line(ACCEPT.as_str(), self.accept)
            + line(MCP_SESSION_ID.as_str(), self.session_id)
            + line(MCP_PROTOCOL_VERSION.as_str(), self.protocol_version)
    }

    fn write(&self, out: &mut Vec<u8>) {
        wire::write_field(out, b"host", self.host);
        if let Some(value) = self.content_type {
            wire::write_field(out, CONTENT_TYPE.as_str().as_bytes(), value.as_bytes());
        }
        if let Some(value) = self.accept {
            wire::write_field(out, ACCEPT.as_str().as_bytes(), value.as_bytes());
        }
        if let Some(value) = self.session_id {
            wire::write_field(out, MCP_SESSION_ID.as_str().as_bytes(), value.as_bytes());
        }
        if let Some(value) = self.protocol_version {
            wire::write_field(
                out,
                MCP_PROTOCOL_VERSION.as_str().as_bytes(),
                value.as_bytes(),
            );
        }
    }
}

/// Writes `method target` with `own`'s fields, then the other fields of `headers`, then
/// those of a client's passed through that neither set (`own`'s), and `body` into `out`.
/// The body's length is the proxy's to say: a `Content-Length` or `Transfer-Encoding`
/// among the fields is left out.
pub fn encode_request(
    method: &Method,
    target: &str,
    own: &OwnFields<'_>,
    headers: &HeaderMap,
    body: &[u8],
    out: &mut Vec<u8>,
) {
    let passed = own.passed.map_or(0, |through| through.fields.sent());
    out.reserve(64 + target.len() + own.written_len() + (headers.len() + passed) * 32 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    own.write(out);
    for (name, value) in headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || own.sets(name) {
            continue;
        }
        wire::write_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(through) = &own.passed {
        // `Transfer-Encoding` is hop-by-hop: it does not pass.
        for (name, value) in through.fields.iter() {
            if name == CONTENT_LENGTH
                || own.sets(name)
                || through.leaves_out(name)
                || (!headers.is_empty() && headers.contains_key(name))
            {
                continue;
            }
            wire::write_field(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    // As hyper says it: a body's length, none for an empty body.
    if !body.is_empty() {
        wire::write_length(out, body.len() as u64);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// A response head (its fields in the caller's [`Fields`], made into a map once the
/// head's bytes are taken out of the read buffer).
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    /// The reason phrase, when it is not the status's own.
    pub reason: Option<hyper::ext::ReasonPhrase>,
    pub version: Version,
    /// How its body ends.
    pub framing: Framing,
    /// Whether the connection may carry another exchange after this one.
    pub keep_alive: bool,
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// After this many more bytes.
    Length(u64),
    /// After its last chunk (and trailers).
    Chunked,
    /// With the connection.
    Close,
}

/// What the bytes read so far hold of a response head.
pub enum ReadHead {
    /// Not all of it.
    Partial,
    /// An informational (1xx) answer of this length: skipped.
    Interim(usize),
    /// The head, and its length.
    Head(Head, usize),
}

/// Reads a response head to a `method` request from the start of `buf`, its fields into
/// `fields`.
pub fn parse_head(buf: &[u8], method: &Method, fields: &mut Fields) -> io::Result<ReadHead> {
    fields.clear();
    // Filled by the parse, not set beforehand (100 fields, 3.2 KB written per head).
    let mut found = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsing = httparse::ParserConfig::default();
    let len = match parsing.parse_response_with_uninit_headers(&mut response, buf, &mut found) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(invalid("a response head larger than the proxy reads"));
        }
        Ok(httparse::Status::Partial) => return Ok(ReadHead::Partial),
        Err(e) => return Err(invalid(&format!("an unreadable response head ({e})"))),
    };
    let code = response.code.unwrap_or(0);
    let status =
        StatusCode::from_u16(code).map_err(|_| invalid("a response status out of range"))?;
    if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(ReadHead::Interim(len));
    }
    let version = match response.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let reason = response
        .reason
        .filter(|reason| Some(*reason) != status.canonical_reason())
        .and_then(|reason| hyper::ext::ReasonPhrase::try_from(reason.as_bytes()).ok());
    let mut length: Option<u64> = None;
    let mut coded = false;
    let mut chunked = false;
    let mut close = version == Version::HTTP_10;
    let mut said_close = false;
    for field in response.headers.iter() {
        let Some(name) = fields.add(buf, field.name, field.value) else {
            return Err(invalid("a response field that is not one"));
        };
        if name == CONTENT_LENGTH {
            // One length, or the same one several times (`5, 5`), as hyper takes it.
            for part in wire::tokens(field.value) {
                let n = wire::length(part)
                    .ok_or_else(|| invalid("a response Content-Length that is not a number"))?;
                if length.is_some_and(|seen| seen != n) {
                    return Err(invalid("a response with two Content-Lengths"));
                }
                length = Some(n);
            }
        } else if name == TRANSFER_ENCODING {
            if version == Version::HTTP_10 {
                return Err(invalid("Transfer-Encoding in an HTTP/1.0 response"));
            }
            // Chunked must be the last coding (RFC 9112 §6.3): anything else is read to
            // the connection's end, whatever length is said.
            coded = true;
            chunked = field
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == CONNECTION {
            for token in wire::tokens(field.value) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                    said_close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive")
                    && version == Version::HTTP_10
                    && !said_close
                {
                    close = false;
                }
            }
        }
    }
    // After a 101 the connection is no longer HTTP: never used again.
    if status == StatusCode::SWITCHING_PROTOCOLS {
        close = true;
    }
    let bodiless = *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || status == StatusCode::SWITCHING_PROTOCOLS;
    let framing = match (bodiless, coded, chunked, length) {
        (true, ..) => Framing::Length(0),
        (false, true, true, _) => Framing::Chunked,
        (false, false, _, Some(n)) => Framing::Length(n),
        (false, ..) => {
            close = true;
            Framing::Close
        }
    };
    Ok(ReadHead::Head(
        Head {
            status,
            reason,
            version,
            framing,
            keep_alive: !close,
        },
        len,
    ))
}

/// Where a chunked body's reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunks {
    /// At a chunk's size line.
    Size,
    /// In a chunk, with this many bytes left.
    Data(u64),
    /// At the CRLF after a chunk's data.
    DataEnd,
    /// In the trailer section, this many bytes into it.
    Trailers(usize),
    /// Past the end.
    Done,
}

/// What a step of reading a chunked body gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Some of the body.
    Data(Bytes),
    /// More bytes must be read first.
    More,
    /// The body is over.
    End,
}

impl Chunks {
    /// Reads what `buf` holds of the body (consuming it), up to the next data or the end.
    pub fn step(&mut self, buf: &mut BytesMut) -> io::Result<Step> {
        loop {
            match *self {
                Chunks::Size if buf.first().is_some_and(|b| !b.is_ascii_hexdigit()) => {
                    return Err(invalid("a chunk size that is not hexadecimal"));
                }
                Chunks::Size
                    if memchr::memchr(b'\n', buf)
                        .is_some_and(|lf| lf == 0 || buf[lf - 1] != b'\r') =>
                {
                    return Err(invalid("a chunk size line not ended by CRLF"));
                }
                Chunks::Size => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((used, 0))) => {
                        buf.advance(used);
                        *self = Chunks::Trailers(0);
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        buf.advance(used);
                        *self = Chunks::Data(size);
                    }
                    Ok(httparse::Status::Partial) if buf.len() > 1024 => {
                        return Err(invalid("a chunk size line too long"));
                    }
                    Ok(httparse::Status::Partial) => return Ok(Step::More),
                    Err(_) => return Err(invalid("an unreadable chunk size")),
                },
                Chunks::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    *self = if left == 0 {
                        Chunks::DataEnd
                    } else {
                        Chunks::Data(left)
                    };
                    return Ok(Step::Data(data));
                }
                Chunks::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(invalid("a chunk not ended by CRLF"));
                    }
                    buf.advance(2);
                    *self = Chunks::Size;
                }
                Chunks::Trailers(seen) => {
                    let Some(end) = memchr::memmem::find(buf, b"\r\n") else {
                        if seen + buf.len() > MAX_TRAILERS {
                            return Err(invalid("trailers longer than the proxy reads"));
                        }
                        return Ok(Step::More);
                    };
                    if seen + end + 2 > MAX_TRAILERS {
                        return Err(invalid("trailers longer than the proxy reads"));
                    }
                    buf.advance(end + 2);
                    if end == 0 {
                        *self = Chunks::Done;
                        return Ok(Step::End);
                    }
                    // A trailer field: not passed on.
                    *self = Chunks::Trailers(seen + end + 2);
                }
                Chunks::Done => return Ok(Step::End),
            }
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the upstream sent {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// A map of these fields, in this order.
    fn map(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_request_is_written_with_the_length_of_its_body() {
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("1"));
        headers.insert("content-length", HeaderValue::from_static("999"));
        let mut out = Vec::new();
        let own = OwnFields::host(b"u:1");
        encode_request(&Method::POST, "/mcp?a", &own, &headers, b"{}", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /mcp?a HTTP/1.1\r\nhost: u:1\r\nx-a: 1\r\ncontent-length: 2\r\n\r\n{}"
        );
        let mut out = Vec::new();
        encode_request(
            &Method::DELETE,
            "/mcp",
            &own,
            &HeaderMap::new(),
            b"",
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "DELETE /mcp HTTP/1.1\r\nhost: u:1\r\n\r\n"
        );
        let mut out = Vec::new();
        encode_request(&Method::POST, "/", &own, &HeaderMap::new(), b"", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST / HTTP/1.1\r\nhost: u:1\r\n\r\n",
            "no length for none"
        );
    }

    /// The transport's fields are the only ones of their names: a client's `Host` (all
    /// of them), and its fields of the names the transport set, are left out; its others
    /// pass in the order they came, after the transport's.
    #[test]
    fn the_transports_fields_replace_the_clients_of_their_names() {
        let headers = map(&[
            ("host", "evil.example"),
            ("x-a", "1"),
            ("host", "evil.example:2"),
            ("accept", "text/html"),
            ("mcp-session-id", "client's"),
            ("content-type", "text/plain"),
            ("x-b", "2"),
            ("mcp-protocol-version", "1999-01-01"),
        ]);
        let own = OwnFields::host(b"127.0.0.1:9")
            .content_type("application/json")
            .accept("application/json, text/event-stream")
            .in_session(Some("s-1"), "2025-11-25")
            .unwrap();
        let mut out = Vec::new();
        encode_request(&Method::POST, "/mcp", &own, &headers, b"{}", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /mcp HTTP/1.1\r\n\
             host: 127.0.0.1:9\r\n\
             content-type: application/json\r\n\
             accept: application/json, text/event-stream\r\n\
             mcp-session-id: s-1\r\n\
             mcp-protocol-version: 2025-11-25\r\n\
             x-a: 1\r\n\
             x-b: 2\r\n\
             content-length: 2\r\n\r\n{}"
        );

        // What the transport does not set passes: a client's `Accept` on a request
        // whose `Accept` the transport leaves alone.
        let own = OwnFields::host(b"u");
        let mut out = Vec::new();
        encode_request(&Method::GET, "/", &own, &headers, b"", &mut out);
        let written = String::from_utf8(out).unwrap();
        assert!(written.contains("accept: text/html\r\n"), "{written}");
        assert!(
            written.contains("mcp-session-id: client's\r\n"),
            "{written}"
        );
        assert!(
            written.contains("mcp-protocol-version: 1999-01-01\r\n"),
            "{written}"
        );
        assert!(!written.contains("evil"), "{written}");
    }

    /// A client's fields passed through are written from its own map after the
    /// transport's and the request map's, in the map's order, less what either
    /// sets, what is hop-by-hop or checked by the path, the body's length, and what the
    /// transport leaves out (a withheld `Authorization`, the credentials' names).
    #[test]
    fn a_clients_fields_passed_through_are_written_less_what_the_transport_sets() {
        use crate::config::{Credential, CredentialSource};
        let client = map(&[
            ("host", "proxy:8080"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("x-b", "2"),
            ("authorization", "Bearer c"),
            ("origin", "http://o"),
            ("traceparent", "client's"),
            ("x-api-key", "client's"),
            ("content-length", "2"),
            ("x-b", "3"),
        ]);
        static CHECKED: [&HeaderName; 1] = [&http::header::ORIGIN];
        let passed = Passed::new(&client, &CHECKED);
        let mut added = HeaderMap::new();
        added.insert("traceparent", HeaderValue::from_static("proxy's"));
        let credentials = Credentials::start(&[Credential {
            header: HeaderName::from_static("x-api-key"),
            prefix: String::new(),
            source: CredentialSource::Env("MCP_PROXY_TEST_NO_SUCH_VARIABLE".into()),
        }]);
        let write = |left_out: bool| {
            let own = OwnFields::host(b"u:1").passing(&passed, left_out, &credentials);
            let mut out = Vec::new();
            encode_request(&Method::POST, "/mcp", &own, &added, b"{}", &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(false),
            "POST /mcp HTTP/1.1\r\n\
             host: u:1\r\n\
             traceparent: proxy's\r\n\
             x-b: 2\r\n\
             x-b: 3\r\n\
             authorization: Bearer c\r\n\
             content-length: 2\r\n\r\n{}"
        );
        let withheld = write(true);
        assert!(!withheld.contains("authorization"), "{withheld}");
        assert!(withheld.contains("x-b: 2\r\nx-b: 3\r\n"), "{withheld}");
    }

    /// An upstream session id that is not a field value (a record in a shared store
    /// says what it likes) is refused, not written: no field can be smuggled in.
    #[test]
    fn a_session_id_that_is_no_field_value_is_refused() {
        let own = OwnFields::host(b"u");
        for bad in ["a\r\nx-injected: 1", "a\nb", "nul\0", "del\u{7f}"] {
            assert_eq!(
                own.in_session(Some(bad), "2025-11-25").err(),
                Some(NotAFieldValue),
                "{bad:?}"
            );
        }
        for good in ["9f1c-…", "with space\tand tab", ""] {
            let own = own.in_session(Some(good), "2025-11-25").unwrap();
            assert_eq!(own.session_id, Some(good));
        }
        // Byte by byte, what `http` takes in a value and nothing else (the bytes from
        // 0x80 on as parts of UTF-8 text, which an id is).
        for byte in 0..=0x7fu8 {
            let id = format!("a{}b", char::from(byte));
            assert_eq!(
                own.in_session(Some(&id), "2025-11-25").is_ok(),
                HeaderValue::from_str(&id).is_ok(),
                "byte {byte:#04x}"
            );
        }
        let none = own.in_session(None, "2025-11-25").unwrap();
        assert_eq!(
            (none.session_id, none.protocol_version),
            (None, Some("2025-11-25"))
        );
    }

    fn parsed(text: &[u8], method: &Method) -> io::Result<ReadHead> {
        parse_head(text, method, &mut Fields::default())
    }

    fn head(text: &str, method: Method) -> (Head, usize) {
        match parsed(text.as_bytes(), &method).unwrap() {
            ReadHead::Head(head, len) => (head, len),
            _ => panic!("{text:?}: no head"),
        }
    }

    #[test]
    fn a_response_heads_fields_are_slices_of_it() {
        let text = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                    Mcp-Session-Id: s1\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n";
        let mut fields = Fields::default();
        let Ok(ReadHead::Head(_, len)) = parse_head(text.as_bytes(), &Method::POST, &mut fields)
        else {
            panic!("a head");
        };
        let bytes = bytes::Bytes::copy_from_slice(&text.as_bytes()[..len]);
        let headers = fields.take(&bytes);
        assert_eq!(headers.len(), 5);
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["mcp-session-id"], "s1");
        let at = text.find("s1\r\n").unwrap();
        assert_eq!(
            headers["mcp-session-id"].as_bytes().as_ptr(),
            bytes[at..].as_ptr(),
            "a slice of the head, not a copy"
        );
        let a: Vec<_> = headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"], "repeated fields kept, in order");
    }

    #[test]
    fn a_response_heads_framing_and_keep_alive() {
        let (h, len) = head(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello",
            Method::POST,
        );
        assert_eq!(
            (h.status, h.framing, h.keep_alive),
            (StatusCode::OK, Framing::Length(5), true)
        );
        assert_eq!(len, 70);
        let (h, _) = head(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            Method::POST,
        );
        assert_eq!(h.framing, Framing::Chunked, "chunked wins over a length");
        let (h, _) = head("HTTP/1.1 200 OK\r\n\r\n", Method::GET);
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let (h, _) = head(
            "HTTP/1.1 202 Accepted\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Method::POST,
        );
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(0), false));
        let (h, _) = head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Method::POST);
        assert!(!h.keep_alive);
        let (h, _) = head("HTTP/1.1 204 No Content\r\n\r\n", Method::DELETE);
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(0), true));
        assert!(matches!(
            parsed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", &Method::POST).unwrap(),
            ReadHead::Interim(25)
        ));
        let (h, _) = head(
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            Method::POST,
        );
        assert_eq!(h.framing, Framing::Length(5));
        let (h, _) = head(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n",
            Method::POST,
        );
        assert_eq!(
            (h.framing, h.keep_alive),
            (Framing::Close, false),
            "a coding not chunked"
        );
        let (h, _) = head(
            "HTTP/1.0 200 OK\r\nConnection: close, keep-alive\r\nContent-Length: 0\r\n\r\n",
            Method::POST,
        );
        assert!(!h.keep_alive, "close holds");
        let (h, _) = head(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
            Method::GET,
        );
        assert!(!h.keep_alive, "no HTTP after a 101");
        let (h, _) = head(
            "HTTP/1.1 200 Fine\r\nContent-Length: 0\r\n\r\n",
            Method::POST,
        );
        assert_eq!(h.reason.as_ref().map(|r| r.as_bytes()), Some(&b"Fine"[..]));
        let (h, _) = head("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", Method::POST);
        assert!(h.reason.is_none(), "the status's own reason");
        for bad in [
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX-A: \x7f\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(parsed(bad.as_bytes(), &Method::POST).is_err(), "{bad:?}");
        }
    }

    /// The data of `body` read with `Chunks`, fed `split` bytes at a time.
    fn dechunk(body: &[u8], split: usize) -> io::Result<Vec<u8>> {
        let mut chunks = Chunks::Size;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            match chunks.step(&mut buf)? {
                Step::Data(data) => out.extend_from_slice(&data),
                Step::End => return Ok(out),
                Step::More => {
                    if fed == body.len() {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    let next = (fed + split).min(body.len());
                    buf.extend_from_slice(&body[fed..next]);
                    fed = next;
                }
            }
        }
    }

    #[test]
    fn a_chunked_body_reads_the_same_however_it_arrives() {
        let body = b"5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n";
        for split in 1..=body.len() {
            assert_eq!(
                dechunk(body, split).unwrap(),
                b"hello 0123456789",
                "split {split}"
            );
        }
        assert!(
            dechunk(b"5\r\nhelloXX0\r\n\r\n", 100).is_err(),
            "data not ended by CRLF"
        );
        assert!(dechunk(b"zz\r\n", 100).is_err());
        assert!(
            dechunk(b"\r\n\r\n", 100).is_err(),
            "an empty size is no last chunk"
        );
        assert!(
            dechunk(b"5;a\nb\r\nhello\r\n0\r\n\r\n", 100).is_err(),
            "a bare LF"
        );
        let endless: Vec<u8> = b"0\r\n"
            .iter()
            .copied()
            .chain(std::iter::repeat_n(b"X: y\r\n".iter().copied(), 4000).flatten())
            .collect();
        // Refused at the bound, not merely at the input's end.
        assert_eq!(
            dechunk(&endless, 64).unwrap_err().kind(),
            io::ErrorKind::InvalidData,
            "trailers without end"
        );
        assert_eq!(
            dechunk(b"5\r\nhel", 100).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
