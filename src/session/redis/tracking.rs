//! Redis telling one worker which session records changed (client-side caching, `CLIENT
//! TRACKING` in broadcasting mode): a connection of the worker's own to the server that
//! takes the store's writes, which turns tracking on for itself — every key under the
//! records' prefix, whoever writes it — and subscribes to `__redis__:invalidate`, where
//! RESP2 delivers the invalidations (redirected to itself). A creation, a reroute, a
//! deletion, a reap, an expiry, an eviction or a flush of a record, by any replica,
//! reaches it as the key's name (a flush as nil: everything).
//!
//! It reads what Redis sends and sends only `PING` (which a subscribed connection may,
//! so that a connection that died without a word is found out); it knows nothing of what
//! the keys hold (`super::cache` does). It speaks the few RESP2 replies its handshake
//! and the messages take, by hand: a connection that does nothing else needs no client
//! library. What has arrived is read with a system call of its own (`recv` that does not
//! wait), not from what the runtime last learnt of the socket: a report that arrived is
//! read before the request that follows it, however busy the worker.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{Context, Poll};
use std::time::Duration;

use rustix::buffer::spare_capacity;
use rustix::net::{RecvFlags, SendFlags};
use tokio::io::{AsyncWriteExt as _, Interest};
use tokio::net::{TcpStream, UnixStream};

/// The channel Redis sends invalidations on (RESP2, redirected tracking).
const CHANNEL: &[u8] = b"__redis__:invalidate";
/// The longest message the tracker takes: a record key is short, and Redis sends one
/// message per event-loop turn with every key written in it; a turn that wrote more than
/// this (tens of thousands of records) breaks the connection, which forgets everything.
const MAX_MESSAGE: usize = 1024 * 1024;
/// `PING`, as a subscribed connection sends it.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// Where the server is and how to log in.
#[derive(Clone)]
pub struct Server {
    pub addr: Addr,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Tcp(String, u16),
    Unix(std::path::PathBuf),
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Tcp(host, port) => write!(f, "{host}:{port}"),
            Addr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What an invalidation says changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed {
    /// These keys.
    Keys(Vec<Vec<u8>>),
    /// Everything (a flush).
    All,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// A connection Redis sends the invalidations of every key under a prefix on.
pub struct Tracker {
    stream: Stream,
    /// What was read; `buf[start..]` is not parsed yet.
    buf: Vec<u8>,
    start: usize,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tracker")
    }
}

// === impl Tracker ===

impl Tracker {
    /// Connects to `server` and turns tracking on for every key under `prefix`, within
    /// `timeout`. Once this returns, every later write of such a key is sent to it.
    pub async fn start(server: &Server, prefix: &str, timeout: Duration) -> io::Result<Tracker> {
        tokio::time::timeout(timeout, Tracker::handshake(server, prefix))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))?
    }

    async fn handshake(server: &Server, prefix: &str) -> io::Result<Tracker> {
        let stream = match &server.addr {
            Addr::Tcp(host, port) => {
                let stream = TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            Addr::Unix(path) => Stream::Unix(UnixStream::connect(path).await?),
        };
        let mut tracker = Tracker {
            stream,
            buf: Vec::with_capacity(4096),
            start: 0,
        };
        if let Some(password) = &server.password {
            let auth = match &server.username {
                Some(user) => command(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => command(&[b"AUTH", password.as_bytes()]),
            };
            tracker.send(&auth).await?;
            tracker.expect_ok().await?;
        }
        tracker.send(&command(&[b"CLIENT", b"ID"])).await?;
        let id = match tracker.next_reply().await? {
            Reply::Int(id) => id.to_string(),
            other => return Err(unexpected("CLIENT ID", &other)),
        };
        let on = command(&[
            b"CLIENT",
            b"TRACKING",
            b"ON",
            b"REDIRECT",
            id.as_bytes(),
            b"BCAST",
            b"PREFIX",
            prefix.as_bytes(),
        ]);
        tracker.send(&on).await?;
        tracker.expect_ok().await?;
        tracker.send(&command(&[b"SUBSCRIBE", CHANNEL])).await?;
        match tracker.next_reply().await? {
            Reply::Array(Some(items))
                if items.first() == Some(&Reply::Bulk(Some(b"subscribe".to_vec()))) => {}
            other => return Err(unexpected("SUBSCRIBE", &other)),
        }
        Ok(tracker)
    }

    /// Waits until Redis reports a write of `key` (made after this tracker started),
    /// within `timeout`: proof that reports reach it. Whatever else is reported meanwhile
    /// is dropped (nothing is remembered yet).
    pub async fn until_reported(&mut self, key: &[u8], timeout: Duration) -> io::Result<()> {
        let wait = async {
            loop {
                let reply = self.next_reply().await?;
                match invalidation(reply)? {
                    Some(Changed::Keys(keys)) if keys.iter().any(|k| k == key) => return Ok(()),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "a write of a record was not reported in time (is the server a Redis that \
                 sends client-side caching invalidations?)",
            )
        })?
    }

    /// A tracker reading what the other end of `stream` writes, as if the handshake were
    /// done (tests play Redis).
    #[cfg(test)]
    pub fn over(stream: UnixStream) -> Tracker {
        Tracker {
            stream: Stream::Unix(stream),
            buf: Vec::new(),
            start: 0,
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.stream {
            Stream::Tcp(s) => s.write_all(bytes).await,
            Stream::Unix(s) => s.write_all(bytes).await,
        }
    }

    /// Sends `PING` without waiting; its answer arrives among the reports. An error: the
    /// connection is lost (or so full that it is as good as lost).
    pub fn ping(&self) -> io::Result<()> {
        match rustix::net::send(
            self.stream.fd(),
            PING,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        ) {
            Ok(n) if n == PING.len() => Ok(()),
            Ok(_) | Err(rustix::io::Errno::AGAIN) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the connection takes no more",
            )),
            Err(e) => Err(e.into()),
        }
    }

    async fn expect_ok(&mut self) -> io::Result<()> {
        match self.next_reply().await? {
            Reply::Simple(ok) if ok == b"OK" => Ok(()),
            other => Err(unexpected("the command", &other)),
        }
    }

    /// The next reply, waiting for it.
    async fn next_reply(&mut self) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.parse()? {
                return Ok(reply);
            }
            let read = std::future::poll_fn(|cx| self.poll_fill(cx)).await?;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    fn parse(&mut self) -> io::Result<Option<Reply>> {
        let unread = &self.buf[self.start..];
        match Reply::parse(unread)? {
            Some((reply, used)) => {
                self.start += used;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                Ok(Some(reply))
            }
            None if unread.len() > MAX_MESSAGE => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a message longer than the tracker takes",
            )),
            None => Ok(None),
        }
    }

    /// Reads what has arrived into the buffer, without waiting: `Ok(None)` when nothing
    /// has, `Ok(Some(0))` when the server closed. A system call every time, whatever the
    /// runtime last learnt of the socket.
    fn recv_now(&mut self) -> io::Result<Option<usize>> {
        recv_into(self.stream.fd(), &mut self.buf, &mut self.start)
    }

    /// Reads what has arrived, or waits (registering `cx`) until something does.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Tracker { stream, buf, start } = self;
        loop {
            let ready = match stream {
                Stream::Tcp(s) => s.poll_read_ready(cx),
                Stream::Unix(s) => s.poll_read_ready(cx),
            };
            std::task::ready!(ready)?;
            // Through the runtime, so that it forgets the readiness once nothing is left
            // (the request path's reads bypass it, and may have left it set).
            let mut read = |fd| match recv_into(fd, buf, start) {
                Ok(Some(n)) => Ok(n),
                Ok(None) => Err(io::Error::from(io::ErrorKind::WouldBlock)),
                Err(e) => Err(e),
            };
            let read = match stream {
                Stream::Tcp(s) => s.try_io(Interest::READABLE, || read(s.as_fd())),
                Stream::Unix(s) => s.try_io(Interest::READABLE, || read(s.as_fd())),
            };
            match read {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Every reply that has arrived so far, without waiting and without taking the place
    /// of whoever waits for the next ([`Tracker::poll_changes`]): what changed is passed to
    /// `changed`, in order; how many replies came (a `PING`'s answer is one). An error: the
    /// connection is lost (closed, broken, or Redis sent what a tracker does not expect)
    /// and what changed since is unknown.
    pub fn drain(&mut self, changed: &mut impl FnMut(Changed)) -> io::Result<usize> {
        let mut heard = 0;
        loop {
            heard += self.take_parsed(changed)?;
            match self.recv_now()? {
                Some(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Some(_) => {}
                None => return Ok(heard),
            }
        }
    }

    /// As [`Tracker::drain`], then waits (registering `cx`) for more: `Pending` once
    /// everything that arrived was passed on, `Ready(Err)` when the connection is lost.
    /// `heard` counts the replies.
    pub fn poll_changes(
        &mut self,
        cx: &mut Context<'_>,
        changed: &mut impl FnMut(Changed),
        heard: &mut usize,
    ) -> Poll<io::Error> {
        loop {
            match self.take_parsed(changed) {
                Ok(n) => *heard += n,
                Err(e) => return Poll::Ready(e),
            }
            match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(io::ErrorKind::UnexpectedEof.into()),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(e),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn take_parsed(&mut self, changed: &mut impl FnMut(Changed)) -> io::Result<usize> {
        let mut replies = 0;
        while let Some(reply) = self.parse()? {
            replies += 1;
            if let Some(what) = invalidation(reply)? {
                changed(what);
            }
        }
        Ok(replies)
    }
}

/// Reads what has arrived on `fd` into `buf` (whose `buf[start..]` is not parsed yet),
/// without waiting: `Ok(None)` when nothing has, `Ok(Some(0))` when the peer closed.
fn recv_into(
    fd: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    start: &mut usize,
) -> io::Result<Option<usize>> {
    if *start > 0 && *start * 2 >= buf.len() {
        buf.drain(..*start);
        *start = 0;
    }
    // Room for at least as much again as is waiting to be parsed: a long message is read
    // in a few doubling reads, not many small ones (each parse starts over).
    let pending = buf.len() - *start;
    buf.reserve(pending.max(4096));
    match rustix::net::recv(fd, spare_capacity(buf), RecvFlags::DONTWAIT) {
        Ok((_, n)) => Ok(Some(n)),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What an invalidation message says changed; `None` for another message on the
/// channel's connection (none is expected: it subscribes to nothing else).
fn invalidation(reply: Reply) -> io::Result<Option<Changed>> {
    let Reply::Array(Some(mut items)) = reply else {
        return Err(unexpected("an invalidation", &reply));
    };
    if items.len() != 3 || items[0] != Reply::Bulk(Some(b"message".to_vec())) {
        return Ok(None);
    }
    if items[1] != Reply::Bulk(Some(CHANNEL.to_vec())) {
        return Ok(None);
    }
    match items.pop() {
        Some(Reply::Bulk(None) | Reply::Array(None)) => Ok(Some(Changed::All)),
        Some(Reply::Array(Some(keys))) => {
            let keys = keys
                .into_iter()
                .filter_map(|key| match key {
                    Reply::Bulk(Some(key)) => Some(key),
                    _ => None,
                })
                .collect();
            Ok(Some(Changed::Keys(keys)))
        }
        Some(Reply::Bulk(Some(key))) => Ok(Some(Changed::Keys(vec![key]))),
        other => Err(unexpected(
            "an invalidation's keys",
            &other.unwrap_or(Reply::Array(None)),
        )),
    }
}

fn unexpected(what: &str, reply: &Reply) -> io::Error {
    let said = match reply {
        Reply::Error(e) => String::from_utf8_lossy(e).into_owned(),
        _ => "an unexpected reply".into(),
    };
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("Redis refused {what}: {said}"),
    )
}

/// A command as RESP2 sends it: an array of bulk strings.
fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// How deep arrays may nest (an invalidation is two levels).
const MAX_DEPTH: usize = 4;
/// The most elements an array may claim.
const MAX_ELEMENTS: i64 = 1 << 20;

impl Reply {
    /// One reply from the start of `buf` and the bytes it took; `None` if it is not all
    /// there yet.
    fn parse(buf: &[u8]) -> io::Result<Option<(Reply, usize)>> {
        Reply::parse_at(buf, 0)
    }

    fn parse_at(buf: &[u8], depth: usize) -> io::Result<Option<(Reply, usize)>> {
        let Some(end) = memchr::memmem::find(buf, b"\r\n") else {
            return Ok(None);
        };
        // A reply is its kind's byte, then its line: one that starts with CRLF is none.
        let (Some(&kind), Some(line)) = (buf.first(), buf.get(1..end)) else {
            return Err(invalid("a reply without a kind"));
        };
        let after = end + 2;
        let number = || -> io::Result<i64> {
            std::str::from_utf8(line)
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| invalid("a length that is not a number"))
        };
        match kind {
            b'+' => Ok(Some((Reply::Simple(line.to_vec()), after))),
            b'-' => Ok(Some((Reply::Error(line.to_vec()), after))),
            b':' => Ok(Some((Reply::Int(number()?), after))),
            b'$' => match number()? {
                -1 => Ok(Some((Reply::Bulk(None), after))),
                len if (0..=MAX_MESSAGE as i64).contains(&len) => {
                    let len = len as usize;
                    if buf.len() < after + len + 2 {
                        return Ok(None);
                    }
                    if &buf[after + len..after + len + 2] != b"\r\n" {
                        return Err(invalid("a bulk string not ended by CRLF"));
                    }
                    Ok(Some((
                        Reply::Bulk(Some(buf[after..after + len].to_vec())),
                        after + len + 2,
                    )))
                }
                _ => Err(invalid("a bulk string of an impossible length")),
            },
            b'*' => match number()? {
                -1 => Ok(Some((Reply::Array(None), after))),
                n if (0..=MAX_ELEMENTS).contains(&n) && depth < MAX_DEPTH => {
                    let mut items = Vec::with_capacity((n as usize).min(64));
                    let mut at = after;
                    for _ in 0..n {
                        match Reply::parse_at(&buf[at..], depth + 1)? {
                            Some((item, used)) => {
                                items.push(item);
                                at += used;
                            }
                            None => return Ok(None),
                        }
                    }
                    Ok(Some((Reply::Array(Some(items)), at)))
                }
                _ => Err(invalid("an array too long or too deep")),
            },
            _ => Err(invalid("a reply of an unknown kind")),
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("Redis sent {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*2\r\n$7\r\np:s:abc\r\n$5\r\np:s:e\r\n";

    #[test]
    fn an_invalidation_is_read_whole_wherever_it_is_split() {
        let whole = Reply::parse(MESSAGE).unwrap().unwrap();
        assert_eq!(whole.1, MESSAGE.len());
        assert_eq!(
            invalidation(whole.0).unwrap(),
            Some(Changed::Keys(vec![b"p:s:abc".to_vec(), b"p:s:e".to_vec()]))
        );
        for cut in 0..MESSAGE.len() {
            assert_eq!(Reply::parse(&MESSAGE[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_flush_changes_everything() {
        let flush = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n";
        let (reply, _) = Reply::parse(flush).unwrap().unwrap();
        assert_eq!(invalidation(reply).unwrap(), Some(Changed::All));
    }

    #[test]
    fn what_is_not_resp_is_refused_not_waited_for() {
        for bad in [
            &b"\r\n"[..],
            b"?what\r\n",
            b"$abc\r\n",
            b"$3\r\nabcXY",
            b"*-7\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(
                Reply::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            command(&[b"CLIENT", b"ID"]),
            b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n".to_vec()
        );
    }
}
