//! The floor: the least a Rust HTTP/1.1 hop on tokio does per call on this machine, as a
//! yardstick beside nginx. It is not a proxy anyone would run: one current-thread runtime
//! (the proxy's `workers = 1`), one upstream connection per client connection, and each
//! request and response copied byte for byte, a whole message at a time (the
//! benchmark's are small) — `httparse` finds the head's end and the body's framing
//! (Content-Length, or chunked), and nothing is rewritten, checked or logged. What it
//! costs per call is what the runtime and the kernel cost for the same reads and writes
//! the proxy makes; what the proxy costs above it is the proxy's own (its HTTP stack,
//! its sessions, its checks).
//!
//! The same hop with heads read and written as the proxy does, and as read ([`fields`]),
//! tells what those cost a hop. The same hop runs on io_uring too — on monoio
//! ([`uring`], which runs it with epoll as well) and on tokio-uring ([`tokio_uring`]) —
//! to tell what io_uring would take off the kernel's part and what the runtime would.
//!
//! It runs as its own process (the benchmark binary with `MCP_BENCH_ROLE=floor`,
//! `floor-fields`, `floor-fields-raw`, `floor-uring`, `floor-monoio` or
//! `floor-tokio-uring`, and `MCP_BENCH_FLOOR_UPSTREAM=host:port`), prints `READY <port>`
//! (or `UNAVAILABLE <why>`, when this machine cannot run it) and exits when its standard
//! input closes.

pub mod fields;
pub mod tokio_uring;
pub mod uring;

use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Runs the floor until standard input closes; never returns.
pub fn run() -> ! {
    let upstream = upstream();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("floor runtime");
    exit_when_stdin_closes();
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("floor bind");
        ready(listener.local_addr().expect("floor addr").port());
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = hop(client, upstream).await;
            });
        }
    });
    std::process::exit(0)
}

/// The upstream the floor forwards to (`MCP_BENCH_FLOOR_UPSTREAM`).
fn upstream() -> SocketAddr {
    std::env::var("MCP_BENCH_FLOOR_UPSTREAM")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("MCP_BENCH_FLOOR_UPSTREAM=host:port")
}

/// Ends the process once standard input closes (the benchmark has gone).
fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
        std::process::exit(0);
    });
}

/// Says why this floor cannot run here (`UNAVAILABLE <why>`, read by
/// `procs::spawn_floor_on`), and exits.
fn unavailable(why: &str) -> ! {
    println!("UNAVAILABLE {why}");
    std::process::exit(0)
}

/// Says the floor listens on `port`.
fn ready(port: u16) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {port}").expect("stdout");
    out.flush().expect("stdout");
}

/// How a message's body ends.
enum Framing {
    Length(usize),
    Chunked,
}

/// The end of a complete message in `buf` (head and body), if it is all there.
pub(super) fn message_end(buf: &[u8], response: bool) -> std::io::Result<Option<usize>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let parsed = if response {
        httparse::Response::new(&mut headers).parse(buf)
    } else {
        httparse::Request::new(&mut headers).parse(buf)
    };
    let head = match parsed.map_err(std::io::Error::other)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let mut framing = Framing::Length(0);
    for h in headers.iter().take_while(|h| !h.name.is_empty()) {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| std::io::Error::other("bad content-length"))?;
            framing = Framing::Length(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
            && h.value.eq_ignore_ascii_case(b"chunked")
        {
            framing = Framing::Chunked;
        }
    }
    Ok(match framing {
        Framing::Length(n) => {
            let end = head
                .checked_add(n)
                .ok_or_else(|| std::io::Error::other("a length larger than memory"))?;
            (buf.len() >= end).then_some(end)
        }
        Framing::Chunked => chunked_end(&buf[head..])?.map(|n| head + n),
    })
}

/// The end of a chunked body at the start of `buf`, if it is all there.
fn chunked_end(buf: &[u8]) -> std::io::Result<Option<usize>> {
    let mut at = 0;
    loop {
        let (line, size) = match httparse::parse_chunk_size(&buf[at..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(std::io::Error::other("bad chunk size")),
        };
        let size = usize::try_from(size).map_err(std::io::Error::other)?;
        // The chunk, its CRLF; the last (empty) chunk is followed by the final CRLF.
        let next = (at + line)
            .checked_add(size)
            .and_then(|n| n.checked_add(2))
            .ok_or_else(|| std::io::Error::other("a chunk larger than memory"))?;
        if buf.len() < next {
            return Ok(None);
        }
        if size == 0 {
            return Ok(Some(next));
        }
        at = next;
    }
}

/// Reads from `from` into `buf` until it holds a complete message; its length.
async fn read_message(
    from: &mut TcpStream,
    buf: &mut Vec<u8>,
    response: bool,
) -> std::io::Result<Option<usize>> {
    loop {
        if let Some(end) = message_end(buf, response)? {
            return Ok(Some(end));
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        if from.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Serves one client connection: each request to the upstream as it came, each answer
/// back as it came, once whole.
async fn hop(mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let mut request = Vec::with_capacity(16 * 1024);
    let mut response = Vec::with_capacity(16 * 1024);
    loop {
        let Some(end) = read_message(&mut client, &mut request, false).await? else {
            return Ok(());
        };
        server.write_all(&request[..end]).await?;
        request.drain(..end);
        let Some(end) = read_message(&mut server, &mut response, true).await? else {
            return Ok(());
        };
        client.write_all(&response[..end]).await?;
        response.drain(..end);
    }
}
