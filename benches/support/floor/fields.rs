//! The floor with heads read and written (`MCP_BENCH_ROLE=floor-fields`): the same tokio
//! hop as [`super::hop`], but each message is taken out of its read buffer as the proxy's
//! loops take it (shared bytes), and each head is read and written again the way the
//! proxy does — its fields as the proxy's `wire::Fields` find them, made into an
//! `http::HeaderMap` of slices of the bytes read, the request's written on from that map
//! (those `paths::headers::to_upstream_passthrough` passes, the upstream's `Host` in
//! place of the client's), the answer's
//! hop-by-hop fields taken off (`to_client_passthrough`), both written field by field
//! (`wire::write_field`) with the body's length. What it costs above the floor is what
//! the proxy's handling of heads costs a hop, measured end to end.
//!
//! `floor-fields-raw` does the same with no map: each field written on as `httparse`
//! found it unless its name is one the proxy always leaves out (the hop-by-hop
//! names, and on a request `Host`, `Content-Length`, `Origin` and the replicas'
//! signature; names a `Connection` field lists are not looked for: the benchmark sends
//! none) — what a representation of fields of the project's own would cost instead.

use std::mem::MaybeUninit;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderValue};
use mcp_session_proxy::paths::headers;
use mcp_session_proxy::wire::{self, Fields};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The most fields a head may have (the proxy's bound).
const MAX_HEADERS: usize = 100;

/// How the heads' fields are kept between reading and writing.
#[derive(Clone, Copy)]
pub enum Kept {
    /// In `http::HeaderMap`s, as the proxy keeps them.
    Maps,
    /// Not at all: written on as found.
    AsRead,
}

/// Runs the floor with heads read and written until standard input closes; never
/// returns.
pub fn run(kept: Kept) -> ! {
    let upstream = super::upstream();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("floor runtime");
    super::exit_when_stdin_closes();
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("floor bind");
        super::ready(listener.local_addr().expect("floor addr").port());
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = match kept {
                    Kept::Maps => hop(client, upstream).await,
                    Kept::AsRead => hop_as_read(client, upstream).await,
                };
            });
        }
    });
    std::process::exit(0)
}

/// Reads from `from` into `buf` until it holds a complete message; the message, taken
/// out of the buffer (its bytes shared, not copied, as the proxy's loops take them).
async fn read_message(
    from: &mut TcpStream,
    buf: &mut BytesMut,
    response: bool,
) -> std::io::Result<Option<Bytes>> {
    loop {
        if let Some(end) = super::message_end(buf, response)? {
            return Ok(Some(buf.split_to(end).freeze()));
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        if from.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// A request's method and target (where they end in its line), its fields as a map, and
/// its body.
fn read_request(message: &Bytes, fields: &mut Fields) -> Option<(usize, HeaderMap, Bytes)> {
    fields.clear();
    let mut found = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(message, &mut found) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return None,
    };
    for field in request.headers.iter() {
        fields.add(message, field.name, field.value)?;
    }
    let line = wire::span(message, request.path?.as_bytes())?.end;
    Some((line, fields.take(message), message.slice(len..)))
}

/// A response's status line, its fields as a map, and its body.
fn read_response(message: &Bytes, fields: &mut Fields) -> Option<(u16, HeaderMap, Bytes)> {
    fields.clear();
    let mut found = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsing = httparse::ParserConfig::default();
    let len = match parsing.parse_response_with_uninit_headers(&mut response, message, &mut found) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return None,
    };
    for field in response.headers.iter() {
        fields.add(message, field.name, field.value)?;
    }
    Some((response.code?, fields.take(message), message.slice(len..)))
}

/// Writes `fields` (all but a length), then [`write_body`].
fn write_rest(out: &mut Vec<u8>, fields: &HeaderMap, body: &[u8]) {
    for (name, value) in fields {
        if name != CONTENT_LENGTH {
            wire::write_field(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    write_body(out, body);
}

/// Writes `body`'s length, the head's end and the body.
fn write_body(out: &mut Vec<u8>, body: &[u8]) {
    wire::write_length(out, body.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Writes the status line of an answer of `status`, with its canonical reason.
fn write_status(out: &mut Vec<u8>, status: u16) -> std::io::Result<()> {
    let status = http::StatusCode::from_u16(status).map_err(std::io::Error::other)?;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    Ok(())
}

async fn hop(mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let host = HeaderValue::from_str(&upstream.to_string()).map_err(std::io::Error::other)?;
    let mut fields = Fields::default();
    let mut request = BytesMut::with_capacity(16 * 1024);
    let mut response = BytesMut::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        let Some(message) = read_message(&mut client, &mut request, false).await? else {
            return Ok(());
        };
        let (line, client_fields, body) = read_request(&message, &mut fields)
            .ok_or_else(|| std::io::Error::other("a request the floor does not read"))?;
        let passed = headers::to_upstream_passthrough(&client_fields);
        out.clear();
        out.extend_from_slice(&message[..line]);
        out.extend_from_slice(b" HTTP/1.1\r\n");
        wire::write_field(&mut out, b"host", host.as_bytes());
        for (name, value) in passed.iter() {
            if name != HOST && name != CONTENT_LENGTH {
                wire::write_field(&mut out, name.as_str().as_bytes(), value.as_bytes());
            }
        }
        write_body(&mut out, &body);
        drop(passed);
        server.write_all(&out).await?;
        drop((message, client_fields));

        let Some(message) = read_message(&mut server, &mut response, true).await? else {
            return Ok(());
        };
        out.clear();
        match read_response(&message, &mut fields) {
            // A length-framed answer, its head written from its fields.
            Some((status, mut answer, body)) if answer.contains_key(CONTENT_LENGTH) => {
                headers::to_client_passthrough(&mut answer);
                write_status(&mut out, status)?;
                write_rest(&mut out, &answer, &body);
            }
            // Anything else (a chunked stream, a head it does not read) as it came.
            _ => out.extend_from_slice(&message),
        }
        client.write_all(&out).await?;
    }
}

/// The hop-by-hop fields, which the proxy leaves out both ways.
const HOP_BY_HOP: [&[u8]; 9] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether `name` is one of `names`, as names compare.
fn among(name: &str, names: &[&[u8]]) -> bool {
    names
        .iter()
        .any(|n| name.as_bytes().eq_ignore_ascii_case(n))
}

/// [`hop`] with each field written on as it was read: no map.
async fn hop_as_read(mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let host = upstream.to_string();
    let mut request = BytesMut::with_capacity(16 * 1024);
    let mut response = BytesMut::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        let Some(message) = read_message(&mut client, &mut request, false).await? else {
            return Ok(());
        };
        out.clear();
        request_as_read(&message, &host, &mut out)?;
        server.write_all(&out).await?;
        drop(message);

        let Some(message) = read_message(&mut server, &mut response, true).await? else {
            return Ok(());
        };
        out.clear();
        answer_as_read(&message, &mut out)?;
        client.write_all(&out).await?;
    }
}

fn unread() -> std::io::Error {
    std::io::Error::other("a head the floor does not read")
}

/// Writes the request `message` for the upstream at `host`: its fields as read, but
/// those `to_upstream_passthrough` leaves out.
fn request_as_read(message: &[u8], host: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    let signature = mcp_session_proxy::paths::cluster::FORWARDED
        .as_str()
        .as_bytes();
    let own: [&[u8]; 4] = [b"host", b"content-length", b"origin", signature];
    let mut found = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut head = httparse::Request::new(&mut []);
    let Ok(httparse::Status::Complete(len)) = head.parse_with_uninit_headers(message, &mut found)
    else {
        return Err(unread());
    };
    let line = wire::span(message, head.path.ok_or_else(unread)?.as_bytes())
        .ok_or_else(unread)?
        .end;
    out.extend_from_slice(&message[..line]);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for field in head.headers.iter() {
        if !among(field.name, &HOP_BY_HOP) && !among(field.name, &own) {
            wire::write_field(out, field.name.as_bytes(), field.value);
        }
    }
    wire::write_field(out, b"host", host.as_bytes());
    write_body(out, &message[len..]);
    Ok(())
}

/// Writes the answer `message` for the client: a length-framed one with its fields as
/// read but the hop-by-hop ones, anything else as it came.
fn answer_as_read(message: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    let mut found = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut head = httparse::Response::new(&mut []);
    let parsing = httparse::ParserConfig::default();
    let Ok(httparse::Status::Complete(len)) =
        parsing.parse_response_with_uninit_headers(&mut head, message, &mut found)
    else {
        return Err(unread());
    };
    let length: &[&[u8]] = &[b"content-length"];
    if !head.headers.iter().any(|f| among(f.name, length)) {
        out.extend_from_slice(message);
        return Ok(());
    }
    write_status(out, head.code.ok_or_else(unread)?)?;
    for field in head.headers.iter() {
        // Not its length either: written with the body.
        if !among(field.name, &HOP_BY_HOP) && !among(field.name, length) {
            wire::write_field(out, field.name.as_bytes(), field.value);
        }
    }
    write_body(out, &message[len..]);
    Ok(())
}
