//! Handing the listening sockets over to a new process: a restart that drops nothing
//! (the hot restart of Envoy, the graceful upgrade of Pingora).
//!
//! With `upgrade.socket` set, a running proxy listens on that Unix socket
//! (`upgrade_socket`). A new proxy started with the same setting finds it there, and the
//! two exchange one JSON object per line:
//!
//! 1. new → old: `{"message":"hello","version":1,"pid":…}`;
//! 2. old → new: `{"message":"offer","version":1,"pid":…,"listen":…,"mcp":N,
//!    "operations":…,"lock":true}` with the sockets themselves attached (`SCM_RIGHTS`,
//!    unix(7)): the N MCP listeners, the operations listener, the address lock and the
//!    upgrade socket — or `{"message":"refused","version":1,"reason":…}`;
//! 3. the new process starts on those sockets (both processes accept from the same
//!    sockets meanwhile, so no connection waits or is refused), then new → old:
//!    `{"message":"ready"}`;
//! 4. the old one stops accepting, answers `{"message":"stopped"}`, lets its requests and
//!    streams finish within `shutdown_grace` and exits, as on SIGTERM.
//!
//! Until the old process reads "ready" it serves as if nothing happened: a new process
//! that is refused, fails to start, dies or does not answer in time is simply gone, and
//! its copies of the sockets close with it. Every wait is bounded ([`ANSWER_WITHIN`],
//! [`START_WITHIN`]). Only the same user may take over: the socket file is private to its
//! user (mode 0600), and each side checks that the other runs as its own effective user
//! (`SO_PEERCRED`). A version neither side knows is refused with the reason, before any
//! socket is passed.
//!
//! What it does not know: what the sockets serve; which process starts when (the
//! `give` and `take` sides).

mod give;
mod take;

pub use give::{HandedOver, Held, Upgrades};
pub use take::{Takeover, connect};

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// The hand-over protocol this build speaks.
pub const VERSION: u32 = 1;

/// How long either side waits for the other's next message (but "ready").
pub const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// How long the running proxy waits for the new one to start ("ready").
pub const START_WITHIN: Duration = Duration::from_secs(30);

/// The most sockets one offer carries: the kernel passes at most 253 descriptors per
/// message (`SCM_MAX_FD`), and an offer is one message.
pub const MAX_SOCKETS: usize = 253;

/// The longest line either side sends.
const MAX_LINE: usize = 16 * 1024;

/// One message of the hand-over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "message", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    Hello {
        version: u32,
        pid: u32,
    },
    /// The sockets follow, attached to this line, in this order: the `mcp` MCP listeners,
    /// the operations listener (when `operations` names one), the address lock (when
    /// `lock`), the upgrade socket.
    Offer {
        version: u32,
        pid: u32,
        listen: SocketAddr,
        mcp: usize,
        operations: Option<SocketAddr>,
        lock: bool,
    },
    Refused {
        version: u32,
        reason: String,
    },
    Ready,
    Stopped,
}

/// One side's end of the upgrade socket: whole lines out, whole lines in, and the
/// descriptors that came with them.
#[derive(Debug)]
pub struct Channel {
    stream: UnixStream,
    /// Bytes received past the last line read.
    pending: Vec<u8>,
    /// Descriptors received, in order.
    received: Vec<OwnedFd>,
}

// === impl Channel ===

impl Channel {
    /// `stream`, unless its peer runs as another user.
    pub fn checked(stream: UnixStream) -> io::Result<Channel> {
        let peer = rustix::net::sockopt::socket_peercred(&stream)?;
        let own = rustix::process::geteuid();
        if peer.uid != own {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the process at the other end (pid {}) runs as uid {}, this one as uid {}; only \
                     the same user may hand listeners over",
                    peer.pid.as_raw_nonzero(),
                    peer.uid.as_raw(),
                    own.as_raw()
                ),
            ));
        }
        Ok(Channel {
            stream,
            pending: Vec::new(),
            received: Vec::new(),
        })
    }

    /// Sends `message`, with `sockets` attached to its first byte.
    pub async fn send(&self, message: &Message, sockets: &[BorrowedFd<'_>]) -> io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut sent = 0;
        while sent < line.len() {
            let attach = if sent == 0 { sockets } else { &[] };
            sent += self
                .stream
                .async_io(Interest::WRITABLE, || {
                    send_with(&self.stream, &line[sent..], attach)
                })
                .await?;
        }
        Ok(())
    }

    /// The next message, within `within`.
    pub async fn receive(&mut self, within: Duration) -> io::Result<Message> {
        tokio::time::timeout(within, self.next_line())
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {}", humantime::format_duration(within)),
                )
            })?
    }

    async fn next_line(&mut self) -> io::Result<Message> {
        loop {
            if let Some(end) = memchr::memchr(b'\n', &self.pending) {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return serde_json::from_slice(&line).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("not a hand-over message: {e}"),
                    )
                });
            }
            if self.pending.len() > MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a line longer than a hand-over message",
                ));
            }
            let mut chunk = [0u8; 4096];
            let (n, fds) = self
                .stream
                .async_io(Interest::READABLE, || {
                    receive_with(&self.stream, &mut chunk)
                })
                .await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the other process closed the connection",
                ));
            }
            self.pending.extend_from_slice(&chunk[..n]);
            self.received.extend(fds);
        }
    }

    /// The descriptors received so far, in order.
    pub fn take_received(&mut self) -> Vec<OwnedFd> {
        std::mem::take(&mut self.received)
    }
}

/// One `sendmsg`: `bytes`, with `sockets` attached.
fn send_with(stream: &UnixStream, bytes: &[u8], sockets: &[BorrowedFd<'_>]) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !sockets.is_empty() && !control.push(SendAncillaryMessage::ScmRights(sockets)) {
        return Err(io::Error::other("too many sockets for one message"));
    }
    let sent = rustix::net::sendmsg(
        stream.as_fd(),
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(sent)
}

/// One `recvmsg` into `chunk`: the bytes read and the descriptors that came with them.
fn receive_with(stream: &UnixStream, chunk: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        stream.as_fd(),
        &mut [IoSliceMut::new(chunk)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(passed) = message {
            fds.extend(passed);
        }
    }
    if received.flags.contains(ReturnFlags::CTRUNC) {
        // The kernel dropped descriptors it could not give (the open-file limit): what
        // came is incomplete.
        return Err(io::Error::other(
            "the sockets passed did not all arrive (is the open-file limit too low?)",
        ));
    }
    Ok((received.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_json_object_each_named_by_its_message_member() {
        let offer = Message::Offer {
            version: VERSION,
            pid: 7,
            listen: "127.0.0.1:8080".parse().unwrap(),
            mcp: 2,
            operations: None,
            lock: true,
        };
        let text = serde_json::to_string(&offer).unwrap();
        assert_eq!(
            text,
            r#"{"message":"offer","version":1,"pid":7,"listen":"127.0.0.1:8080","mcp":2,"operations":null,"lock":true}"#
        );
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), offer);
        assert_eq!(
            serde_json::to_string(&Message::Ready).unwrap(),
            r#"{"message":"ready"}"#
        );
        assert!(serde_json::from_str::<Message>(r#"{"message":"hello","version":2}"#).is_err());
    }

    #[tokio::test]
    async fn sockets_travel_with_their_line_and_stay_open() {
        let (a, b) = UnixStream::pair().unwrap();
        // Not `checked`: a pair has no peer process to ask about, it is this one.
        let a = Channel {
            stream: a,
            pending: Vec::new(),
            received: Vec::new(),
        };
        let mut b = Channel {
            stream: b,
            pending: Vec::new(),
            received: Vec::new(),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        a.send(&Message::Ready, &[listener.as_fd()]).await.unwrap();
        a.send(&Message::Stopped, &[]).await.unwrap();
        drop(listener);
        assert_eq!(b.receive(ANSWER_WITHIN).await.unwrap(), Message::Ready);
        assert_eq!(b.receive(ANSWER_WITHIN).await.unwrap(), Message::Stopped);
        let mut fds = b.take_received();
        assert_eq!(fds.len(), 1);
        let passed = std::net::TcpListener::from(fds.remove(0));
        assert_eq!(passed.local_addr().unwrap(), addr);
        let _client = std::net::TcpStream::connect(addr).unwrap();
        passed.accept().unwrap();
    }
}
