//! The floor's hop on monoio: the same reads, writes and framing as [`super::hop`], on a
//! runtime built for io_uring — with its io_uring driver (`MCP_BENCH_ROLE=floor-uring`),
//! or with its epoll one (`floor-monoio`), so that what io_uring saves is told apart from
//! what the runtime does.

use std::net::SocketAddr;

use monoio::buf::{IoBuf as _, IoBufMut as _};
use monoio::io::{AsyncReadRent as _, AsyncWriteRentExt as _};
use monoio::net::{TcpListener, TcpStream};

/// Which of monoio's drivers the floor runs on.
#[derive(Clone, Copy)]
pub enum Driver {
    IoUring,
    Epoll,
}

/// Runs the floor on monoio with `driver` until standard input closes; never returns.
pub fn run(driver: Driver) -> ! {
    let upstream = super::upstream();
    if let (Driver::IoUring, Err(why)) = (driver, ring_available()) {
        super::unavailable(&why);
    }
    super::exit_when_stdin_closes();
    match driver {
        Driver::IoUring => monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .uring_builder(setup())
            .build()
            .expect("io_uring runtime (is io_uring enabled?)")
            .block_on(serve(upstream)),
        Driver::Epoll => monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .expect("epoll runtime")
            .block_on(serve(upstream)),
    }
    std::process::exit(0)
}

/// Whether the ring is set up plainly (`MCP_BENCH_FLOOR_URING_SETUP=plain`): without
/// cooperative task running and one submitter, which the variants use otherwise —
/// completions are run when the runtime next enters the kernel instead of interrupting
/// it, what a thread-per-core runtime can promise. Plainly, each hop costs the kernel
/// 2–3 µs more than epoll (`benches/README.md`).
fn plain() -> bool {
    std::env::var("MCP_BENCH_FLOOR_URING_SETUP").as_deref() == Ok("plain")
}

/// The setup the floor's rings use, as the report names it.
pub fn setup_named() -> &'static str {
    match plain() {
        true => "no flags (`MCP_BENCH_FLOOR_URING_SETUP=plain`)",
        false => "cooperative task running and one submitter",
    }
}

/// The ring's setup (above).
pub(super) fn setup() -> io_uring::Builder {
    let mut builder = io_uring::IoUring::builder();
    if !plain() {
        builder.setup_coop_taskrun().setup_single_issuer();
    }
    builder
}

/// Whether this machine lets the floor build its ring; why not, if it does not
/// (io_uring turned off, or a kernel without the setup's flags).
pub(super) fn ring_available() -> Result<(), String> {
    // As large as the runtimes' own rings (monoio's 1,024 entries, tokio-uring's 256).
    setup()
        .build(1024)
        .map(drop)
        .map_err(|e| format!("io_uring is not available here ({e})"))
}

async fn serve(upstream: SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("floor bind");
    super::ready(listener.local_addr().expect("floor addr").port());
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        monoio::spawn(async move {
            let _ = hop(client, upstream).await;
        });
    }
}

/// Reads from `from` into the end of `buf` until it holds a complete message; its length,
/// and the buffer (io_uring owns it while a read is in flight).
async fn read_message(
    from: &mut TcpStream,
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
        let (read, tail) = from.read(buf.slice_mut(len..)).await;
        buf = tail.into_inner();
        match read {
            Ok(0) => return (Ok(None), buf),
            Ok(_) => {}
            Err(e) => return (Err(e), buf),
        }
    }
}

/// Writes the first `end` bytes of `buf` to `to` and drops them from `buf`.
async fn write_message(
    to: &mut TcpStream,
    buf: Vec<u8>,
    end: usize,
) -> (std::io::Result<()>, Vec<u8>) {
    let (written, head) = to.write_all(buf.slice(..end)).await;
    let mut buf = head.into_inner();
    buf.drain(..end);
    (written.map(|_| ()), buf)
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
        let (read, buf) = read_message(&mut client, request, false).await;
        let Some(end) = read? else {
            return Ok(());
        };
        let (written, buf) = write_message(&mut server, buf, end).await;
        request = buf;
        written?;
        let (read, buf) = read_message(&mut server, response, true).await;
        let Some(end) = read? else {
            return Ok(());
        };
        let (written, buf) = write_message(&mut client, buf, end).await;
        response = buf;
        written?;
    }
}
