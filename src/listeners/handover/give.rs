//! The running proxy's side of a hand-over: it answers on the upgrade socket, offers its
//! listeners to a new process of its user, and tells its owner when that one is ready
//! to serve. A hand-over that fails at any step leaves this proxy serving as before.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{ANSWER_WITHIN, Channel, MAX_SOCKETS, Message, START_WITHIN, VERSION};
use crate::listeners::UpgradeSocket;

/// Descriptors of this process's listening sockets, to offer (each another descriptor of
/// a socket the workers accept on; dropping them closes nothing the workers use).
#[derive(Debug)]
pub struct Held {
    /// The MCP address.
    pub listen: SocketAddr,
    pub mcp: Vec<OwnedFd>,
    pub operations: Option<(SocketAddr, OwnedFd)>,
    pub lock: Option<OwnedFd>,
}

/// A new process has the listeners and is ready to serve; this one must stop accepting,
/// then say so with [`HandedOver::stopped`].
#[derive(Debug)]
pub struct HandedOver {
    /// The new process.
    pub pid: u32,
    channel: Channel,
}

impl HandedOver {
    /// Tells the new process that this one accepts no more (it starts accepting then).
    pub async fn stopped(self) {
        if let Err(e) = self.channel.send(&Message::Stopped, &[]).await {
            tracing::warn!(pid = self.pid, error = %e, "could not tell the new process that this one stopped accepting; it finds out by itself");
        }
    }
}

/// The task answering on the upgrade socket; stopped when dropped.
#[derive(Debug)]
pub struct Upgrades {
    task: Option<JoinHandle<()>>,
    handed_over: Option<oneshot::Receiver<HandedOver>>,
}

// === impl Upgrades ===

impl Upgrades {
    /// Answers on `socket` (on the runtime this is called in), offering `held`.
    pub fn start(socket: UpgradeSocket, held: Held) -> io::Result<Upgrades> {
        let listener = socket.listener().try_clone()?;
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        let (done, handed_over) = oneshot::channel();
        let task = tokio::spawn(answer(socket, listener, held, done));
        Ok(Upgrades {
            task: Some(task),
            handed_over: Some(handed_over),
        })
    }

    /// Stops answering; resolves once the offered descriptors are closed.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Resolves when a new process is ready to take over (once).
    pub fn handed_over(&mut self) -> Option<oneshot::Receiver<HandedOver>> {
        self.handed_over.take()
    }
}

impl Drop for Upgrades {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// After a failed accept (out of descriptors), the next one waits this long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(500);

async fn answer(
    mut socket: UpgradeSocket,
    listener: UnixListener,
    held: Held,
    done: oneshot::Sender<HandedOver>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept on upgrade.socket");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // One hand-over at a time: another new process waits meanwhile (and gives up
        // after its own bounded wait).
        match offer(stream, &held, &socket).await {
            Ok(handed) => {
                // The file is the new process's now.
                socket.disown();
                let _ = done.send(handed);
                return;
            }
            Err(e) => tracing::warn!(
                error = %e,
                "a hand-over of the listeners failed; this proxy keeps serving"
            ),
        }
    }
}

/// One hand-over, up to the new process being ready.
async fn offer(
    stream: tokio::net::UnixStream,
    held: &Held,
    socket: &UpgradeSocket,
) -> io::Result<HandedOver> {
    let mut channel = Channel::checked(stream)?;
    let pid = match channel.receive(ANSWER_WITHIN).await? {
        Message::Hello { version, pid } if version == VERSION => pid,
        Message::Hello { version, pid } => {
            let reason = format!(
                "the running proxy speaks hand-over version {VERSION}, this one version \
                 {version}; stop the running one and start this one instead"
            );
            channel
                .send(
                    &Message::Refused {
                        version: VERSION,
                        reason: reason.clone(),
                    },
                    &[],
                )
                .await?;
            return Err(io::Error::other(format!("refused pid {pid}: {reason}")));
        }
        other => return Err(unexpected("hello", &other)),
    };
    tracing::info!(
        pid,
        "a new process asks for the listeners (upgrade.socket); offering them"
    );
    let upgrade = socket.share()?;
    let mut sockets: Vec<BorrowedFd<'_>> = held.mcp.iter().map(AsFd::as_fd).collect();
    sockets.extend(held.operations.iter().map(|(_, fd)| fd.as_fd()));
    sockets.extend(held.lock.iter().map(AsFd::as_fd));
    sockets.push(upgrade.as_fd());
    if sockets.len() > MAX_SOCKETS {
        let reason = format!(
            "this proxy has {} listening sockets, more than one hand-over carries \
             ({MAX_SOCKETS}); give it fewer workers",
            sockets.len()
        );
        let refused = Message::Refused {
            version: VERSION,
            reason: reason.clone(),
        };
        channel.send(&refused, &[]).await?;
        return Err(io::Error::other(reason));
    }
    let offer = Message::Offer {
        version: VERSION,
        pid: std::process::id(),
        listen: held.listen,
        mcp: held.mcp.len(),
        operations: held.operations.as_ref().map(|(addr, _)| *addr),
        lock: held.lock.is_some(),
    };
    channel.send(&offer, &sockets).await?;
    drop(sockets);
    drop(upgrade);
    match channel.receive(START_WITHIN).await {
        Ok(Message::Ready) => Ok(HandedOver { pid, channel }),
        Ok(other) => Err(unexpected("ready", &other)),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("the new process (pid {pid}) did not start: {e}"),
        )),
    }
}

fn unexpected(wanted: &str, got: &Message) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("expected the {wanted:?} message, got {got:?}"),
    )
}
