//! The new process's side of a hand-over: it finds a running proxy on the upgrade
//! socket, takes its listeners, and — once it is ready to serve — waits for the running
//! one to stop accepting before it accepts itself, so that one process accepts at a time.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use tokio::net::UnixStream;

use super::{ANSWER_WITHIN, Channel, Message, VERSION};
use crate::StartError;
use crate::listeners::{AddressLock, Listeners, UpgradeSocket};

/// The running proxy on `path`, if one answers there (a missing file, or one nobody
/// listens on — left by a proxy that died — means none).
pub async fn connect(path: &Path) -> Result<Option<Channel>, StartError> {
    match UnixStream::connect(path).await {
        Ok(stream) => Channel::checked(stream)
            .map(Some)
            .map_err(|e| failed(path, None, e)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(failed(path, None, e)),
    }
}

/// Listeners taken over from a running proxy, which still accepts on them until
/// [`Takeover::ready`].
#[derive(Debug)]
pub struct Takeover {
    channel: Channel,
    path: PathBuf,
    /// The running proxy.
    pub pid: u32,
}

// === impl Takeover ===

impl Takeover {
    /// Asks the running proxy at the other end of `channel` for its listeners; they must
    /// be on `listen` and `admin` (a port 0 in them takes the running one's port).
    pub async fn ask(
        mut channel: Channel,
        path: &Path,
        listen: SocketAddr,
        admin: Option<SocketAddr>,
    ) -> Result<(Listeners, Takeover), StartError> {
        let hello = Message::Hello {
            version: VERSION,
            pid: std::process::id(),
        };
        channel
            .send(&hello, &[])
            .await
            .map_err(|e| failed(path, None, e))?;
        let offer = channel
            .receive(ANSWER_WITHIN)
            .await
            .map_err(|e| failed(path, None, e))?;
        let (pid, offered, mcp, operations, lock) = match offer {
            Message::Offer {
                version: VERSION,
                pid,
                listen,
                mcp,
                operations,
                lock,
            } => (pid, listen, mcp, operations, lock),
            Message::Refused { reason, .. } => {
                return Err(failed(path, None, io::Error::other(reason)));
            }
            other => {
                let e = io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("expected an offer of hand-over version {VERSION}, got {other:?}"),
                );
                return Err(failed(path, None, e));
            }
        };
        let fail = |why: String| failed(path, Some(pid), io::Error::other(why));
        if !same_address(listen, offered) {
            return Err(fail(format!(
                "it listens on {offered}, and this one is configured to listen on {listen}; a \
                 hand-over keeps the addresses, so give both the same `listen`"
            )));
        }
        match (admin, operations) {
            (None, None) => {}
            (Some(wanted), Some(got)) if same_address(wanted, got) => {}
            (wanted, got) => {
                let name = |addr: Option<SocketAddr>| {
                    addr.map_or_else(|| "none".to_owned(), |a| a.to_string())
                };
                return Err(fail(format!(
                    "its admin.listen is {}, this one's {}; a hand-over keeps the addresses, so \
                     give both the same `admin.listen`",
                    name(got),
                    name(wanted)
                )));
            }
        }
        let mut fds = channel.take_received().into_iter();
        let expected = mcp + usize::from(operations.is_some()) + usize::from(lock) + 1;
        if fds.len() != expected || mcp == 0 {
            return Err(fail(format!(
                "it offered {mcp} listeners and passed {} sockets, {expected} expected",
                fds.len()
            )));
        }
        let mut taken = Vec::with_capacity(mcp);
        for fd in fds.by_ref().take(mcp) {
            taken.push(checked(TcpListener::from(fd), offered).map_err(&fail)?);
        }
        let operations = match (operations, fds.next().filter(|_| operations.is_some())) {
            (Some(addr), Some(fd)) => Some(checked(TcpListener::from(fd), addr).map_err(&fail)?),
            _ => None,
        };
        let lock = match lock {
            true => fds.next().map(AddressLock::adopt),
            false => None,
        };
        let upgrade = fds.next().map(|fd| UpgradeSocket::adopt(fd, path));
        let listeners = Listeners {
            mcp: taken,
            operations,
            lock,
            upgrade,
        };
        let takeover = Takeover {
            channel,
            path: path.to_owned(),
            pid,
        };
        Ok((listeners, takeover))
    }

    /// This process is ready to serve: tells the running one, which stops accepting.
    /// `Ok` when this one may accept now: the running one said it stopped, or it is gone;
    /// an error when it still runs without having stopped (it gave up waiting, say):
    /// this process must not serve beside it.
    pub async fn ready(mut self) -> Result<u32, StartError> {
        let pid = self.pid;
        let sent = self.channel.send(&Message::Ready, &[]).await;
        let answer = match sent {
            Ok(()) => self.channel.receive(ANSWER_WITHIN).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(Message::Stopped) => Ok(pid),
            Ok(other) => Err(failed(
                &self.path,
                Some(pid),
                io::Error::other(format!("it answered {other:?} to \"ready\"")),
            )),
            Err(e) if alive(pid) => Err(failed(
                &self.path,
                Some(pid),
                io::Error::other(format!(
                    "it did not stop accepting ({e}), and it still runs; it keeps serving"
                )),
            )),
            Err(e) => {
                tracing::warn!(pid, error = %e, "the running proxy ended before it confirmed the hand-over; serving alone");
                Ok(pid)
            }
        }
    }
}

/// Whether `configured` (which may have a port 0) names `offered`.
fn same_address(configured: SocketAddr, offered: SocketAddr) -> bool {
    configured.ip() == offered.ip()
        && (configured.port() == 0 || configured.port() == offered.port())
}

/// `listener`, nonblocking, when it is listening on `addr`.
fn checked(listener: TcpListener, addr: SocketAddr) -> Result<TcpListener, String> {
    match listener.local_addr() {
        Ok(bound) if bound == addr => Ok(listener),
        Ok(bound) => Err(format!("a socket passed for {addr} is bound to {bound}")),
        Err(e) => Err(format!("a socket passed for {addr} is not usable: {e}")),
    }
}

/// Whether process `pid` still runs.
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0: no signal is sent, only whether the process exists is checked.
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

fn failed(path: &Path, pid: Option<u32>, e: io::Error) -> StartError {
    let running = match pid {
        Some(pid) => format!("the running proxy (pid {pid})"),
        None => "the running proxy".to_owned(),
    };
    StartError::Handover {
        detail: format!(
            "cannot take over from {running} at upgrade.socket {}: {e}",
            path.display()
        ),
    }
}
