//! The floor's hop on tokio-uring (`MCP_BENCH_ROLE=floor-tokio-uring`): io_uring under a
//! tokio current-thread runtime (the ring's completions read when tokio's epoll says its
//! descriptor is ready), the way a tokio program would take io_uring up piece by piece.

use std::net::SocketAddr;

use tokio_uring::buf::BoundedBuf as _;
use tokio_uring::net::{TcpListener, TcpStream};

/// Runs the floor on tokio-uring until standard input closes; never returns.
pub fn run() -> ! {
    let upstream = super::upstream();
    if let Err(why) = super::uring::ring_available() {
        super::unavailable(&why);
    }
    super::exit_when_stdin_closes();
    tokio_uring::builder()
        .uring_builder(&super::uring::setup())
        .start(serve(upstream));
    std::process::exit(0)
}

async fn serve(upstream: SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0".parse().expect("address")).expect("floor bind");
    super::ready(listener.local_addr().expect("floor addr").port());
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        tokio_uring::spawn(async move {
            let _ = hop(client, upstream).await;
        });
    }
}

/// Reads from `from` into the end of `buf` until it holds a complete message.
async fn read_message(
    from: &TcpStream,
    mut buf: Vec<u8>,
    response: bool,
) -> (std::io::Result<Option<usize>>, Vec<u8>) {
    loop {
        match super::message_end(&buf, response) {
            Ok(Some(end)) => return (Ok(Some(end)), buf),
            Ok(None) => {}
            Err(e) => return (Err(e), buf),
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        let len = buf.len();
        let (read, tail) = from.read(buf.slice(len..)).await;
        buf = tail.into_inner();
        match read {
            Ok(0) => return (Ok(None), buf),
            Ok(_) => {}
            Err(e) => return (Err(e), buf),
        }
    }
}

/// Writes the first `end` bytes of `buf` to `to` and drops them from `buf`.
async fn write_message(to: &TcpStream, buf: Vec<u8>, end: usize) -> (std::io::Result<()>, Vec<u8>) {
    let (written, head) = to.write_all(buf.slice(..end)).await;
    let mut buf = head.into_inner();
    buf.drain(..end);
    (written, buf)
}

async fn hop(client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let mut request = Vec::with_capacity(16 * 1024);
    let mut response = Vec::with_capacity(16 * 1024);
    loop {
        let (read, buf) = read_message(&client, request, false).await;
        let Some(end) = read? else {
            return Ok(());
        };
        let (written, buf) = write_message(&server, buf, end).await;
        request = buf;
        written?;
        let (read, buf) = read_message(&server, response, true).await;
        let Some(end) = read? else {
            return Ok(());
        };
        let (written, buf) = write_message(&client, buf, end).await;
        response = buf;
        written?;
    }
}
