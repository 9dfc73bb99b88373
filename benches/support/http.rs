//! A minimal HTTP/1.1 client for the load generator: requests are written as bytes,
//! responses parsed with `httparse` (Content-Length or chunked bodies). One parser, two
//! thin connection types (async for closed loops, blocking for paced open loops), so every
//! target sees exactly the same client.

use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A parsed response, body decoded.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub session_id: Option<String>,
    pub content_type: String,
    /// The server will close the connection after this response.
    pub close: bool,
    pub body: Vec<u8>,
}

impl Response {
    pub fn is_sse(&self) -> bool {
        self.content_type.starts_with("text/event-stream")
    }

    pub fn describe(&self) -> String {
        let body = String::from_utf8_lossy(&self.body);
        let body: String = body.chars().take(300).collect();
        format!("HTTP {} ({}): {body}", self.status, self.content_type)
    }
}

/// The fields Node's `fetch` (undici) adds to each request of an SDK client that uses
/// it (the TypeScript SDK's), beyond those the SDK sets: `Connection: keep-alive` among
/// them, which HTTP/1.1 does not need and a hop must take off.
pub const FETCH_FIELDS: [(&str, &str); 5] = [
    ("Connection", "keep-alive"),
    ("Accept-Language", "*"),
    ("Sec-Fetch-Mode", "cors"),
    ("User-Agent", "node"),
    ("Accept-Encoding", "gzip, deflate"),
];

static WITH_FETCH_FIELDS: AtomicBool = AtomicBool::new(false);

/// From now on every POST carries [`FETCH_FIELDS`] too (`--fetch-fields`): each target
/// gets the head a fetch-based client sends.
pub fn send_fetch_fields() {
    WITH_FETCH_FIELDS.store(true, Ordering::Relaxed);
}

/// Appends a POST to `path` with a JSON body.
pub fn post(out: &mut Vec<u8>, host: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(
        b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
    );
    let fetch: &[(&str, &str)] = if WITH_FETCH_FIELDS.load(Ordering::Relaxed) {
        &FETCH_FIELDS
    } else {
        &[]
    };
    for (name, value) in headers.iter().chain(fetch) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Appends a GET.
pub fn get(out: &mut Vec<u8>, host: &str, path: &str) {
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

/// Parses one response from the front of `data`: `Ok(None)` when more bytes are needed,
/// else the response and how many bytes it took.
pub fn parse(data: &[u8]) -> Result<Option<(Response, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut headers);
    let head_len = match head.parse(data) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("bad response head: {e}")),
    };
    let status = head.code.unwrap_or(0);
    let mut length = None;
    let mut chunked = false;
    let mut close = head.version == Some(0);
    let mut session_id = None;
    let mut content_type = String::new();
    for h in head.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_none() {
                return Err("bad Content-Length".into());
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = h.value.eq_ignore_ascii_case(b"close");
        } else if name.eq_ignore_ascii_case("mcp-session-id") {
            session_id = Some(String::from_utf8_lossy(h.value).into_owned());
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        }
    }
    let rest = &data[head_len..];
    let (body, used) = if status == 204 || status == 304 || (100..200).contains(&status) {
        (Vec::new(), 0)
    } else if chunked {
        match dechunk(rest)? {
            Some(done) => done,
            None => return Ok(None),
        }
    } else if let Some(n) = length {
        if rest.len() < n {
            return Ok(None);
        }
        (rest[..n].to_vec(), n)
    } else {
        return Err(format!(
            "HTTP {status} response without a length (read-to-close is not supported)"
        ));
    };
    Ok(Some((
        Response {
            status,
            session_id,
            content_type,
            close,
            body,
        },
        head_len + used,
    )))
}

/// Decodes a chunked body: `Ok(None)` while incomplete.
fn dechunk(data: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = find_crlf(&data[at..]) else {
            return Ok(None);
        };
        let line = &data[at..at + eol];
        let hex = line.split(|&b| b == b';').next().unwrap_or(b"");
        let hex = std::str::from_utf8(hex)
            .map_err(|_| "bad chunk size")?
            .trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| format!("bad chunk size {hex:?}"))?;
        at += eol + 2;
        if size == 0 {
            // Trailers (none expected), then the empty line.
            loop {
                let Some(eol) = find_crlf(&data[at..]) else {
                    return Ok(None);
                };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some((body, at)));
                }
            }
        }
        if data.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[at..at + size]);
        if &data[at + size..at + size + 2] != b"\r\n" {
            return Err("chunk not followed by CRLF".into());
        }
        at += size + 2;
    }
}

fn find_crlf(data: &[u8]) -> Option<usize> {
    memchr::memmem::find(data, b"\r\n")
}

/// Read buffer shared by both connection kinds.
#[derive(Debug, Default)]
struct Buffer {
    data: Vec<u8>,
    filled: usize,
}

impl Buffer {
    fn spare(&mut self) -> &mut [u8] {
        if self.data.len() - self.filled < 4096 {
            let grow = self.data.len().max(16 * 1024);
            self.data.resize(self.data.len() + grow, 0);
        }
        &mut self.data[self.filled..]
    }

    fn take(&mut self) -> Result<Option<Response>, String> {
        match parse(&self.data[..self.filled])? {
            Some((response, used)) => {
                self.data.copy_within(used..self.filled, 0);
                self.filled -= used;
                Ok(Some(response))
            }
            None => Ok(None),
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed mid-response",
    )
}

fn invalid(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A keep-alive connection on the tokio runtime.
#[derive(Debug)]
pub struct AsyncConn {
    stream: tokio::net::TcpStream,
    buf: Buffer,
    /// Connections (re)opened, the first one included.
    pub connects: u64,
    addr: SocketAddr,
    broken: bool,
}

impl AsyncConn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(AsyncConn {
            stream,
            buf: Buffer::default(),
            connects: 1,
            addr,
            broken: false,
        })
    }

    /// Sends one request and reads its response. A connection the server closed is
    /// reopened before the next request.
    pub async fn roundtrip(&mut self, request: &[u8]) -> io::Result<Response> {
        if self.broken {
            self.stream = tokio::net::TcpStream::connect(self.addr).await?;
            self.stream.set_nodelay(true)?;
            self.buf.filled = 0;
            self.connects += 1;
            self.broken = false;
        }
        let result = self.exchange(request).await;
        match &result {
            Ok(response) if !response.close => {}
            _ => self.broken = true,
        }
        result
    }

    async fn exchange(&mut self, request: &[u8]) -> io::Result<Response> {
        self.stream.write_all(request).await?;
        loop {
            if let Some(response) = self.buf.take().map_err(invalid)? {
                return Ok(response);
            }
            let n = self.stream.read(self.buf.spare()).await?;
            if n == 0 {
                return Err(closed());
            }
            self.buf.filled += n;
        }
    }
}

/// A keep-alive connection with blocking I/O on its own thread (the paced open loop:
/// the thread wakes the moment the response arrives).
#[derive(Debug)]
pub struct BlockingConn {
    stream: std::net::TcpStream,
    buf: Buffer,
    pub connects: u64,
    addr: SocketAddr,
    broken: bool,
}

impl BlockingConn {
    pub fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = Self::open(addr)?;
        Ok(BlockingConn {
            stream,
            buf: Buffer::default(),
            connects: 1,
            addr,
            broken: false,
        })
    }

    fn open(addr: SocketAddr) -> io::Result<std::net::TcpStream> {
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(stream)
    }

    pub fn roundtrip(&mut self, request: &[u8]) -> io::Result<Response> {
        if self.broken {
            self.stream = Self::open(self.addr)?;
            self.buf.filled = 0;
            self.connects += 1;
            self.broken = false;
        }
        let result = self.exchange(request);
        match &result {
            Ok(response) if !response.close => {}
            _ => self.broken = true,
        }
        result
    }

    fn exchange(&mut self, request: &[u8]) -> io::Result<Response> {
        self.stream.write_all(request)?;
        loop {
            if let Some(response) = self.buf.take().map_err(invalid)? {
                return Ok(response);
            }
            let n = self.stream.read(self.buf.spare())?;
            if n == 0 {
                return Err(closed());
            }
            self.buf.filled += n;
        }
    }
}
