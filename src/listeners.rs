//! The process's listening sockets: the MCP listeners (one per worker), the operations
//! listener (`admin.listen`), the lock that keeps the MCP address this process's own,
//! and the upgrade socket (`upgrade.socket`).
//!
//! They come one of two ways:
//! - bound here, for this process alone (`exclusive`): a second proxy, or any program
//!   already listening there, makes start-up fail with "address already in use";
//! - taken over from a running proxy through `upgrade.socket` (`handover`), which passes
//!   its very sockets, so no connection is refused or dropped across the restart.
//!
//! What it does not know: what is served on them (`front`), which thread accepts
//! (`workers`).

mod exclusive;
pub mod handover;
mod upgrade_socket;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::Path;

pub use exclusive::{AddressLock, BACKLOG, BindError, Holder};
pub use upgrade_socket::UpgradeSocket;

use crate::StartError;
use crate::listeners::handover::{Held, Takeover};

/// See the module documentation.
#[derive(Debug)]
pub struct Listeners {
    /// The MCP listeners, all on one address (a `SO_REUSEPORT` group when several).
    pub mcp: Vec<TcpListener>,
    /// The operations listener, when `admin.listen` gives it its own address.
    pub operations: Option<TcpListener>,
    /// Keeps another proxy off the MCP address while it is open.
    pub lock: Option<AddressLock>,
    /// Where the next process asks for these (`upgrade.socket`).
    pub upgrade: Option<UpgradeSocket>,
}

// === impl Listeners ===

impl Listeners {
    /// The listeners of a proxy configured with `listen`, `admin` and `upgrade`: taken
    /// over from the proxy running on `upgrade`, when one does; else `count` MCP
    /// listeners bound for this process alone (and the upgrade socket created).
    pub async fn acquire(
        listen: SocketAddr,
        admin: Option<SocketAddr>,
        upgrade: Option<&Path>,
        count: usize,
    ) -> Result<(Listeners, Option<Takeover>), StartError> {
        if let Some(path) = upgrade
            && let Some(running) = handover::connect(path).await?
        {
            let (listeners, takeover) = Takeover::ask(running, path, listen, admin).await?;
            return Ok((listeners, Some(takeover)));
        }
        let mut listeners = Listeners::bind(listen, admin, count)?;
        if let Some(path) = upgrade {
            let socket = UpgradeSocket::bind(path).map_err(|e| StartError::Handover {
                detail: format!("cannot create upgrade.socket {}: {e}", path.display()),
            })?;
            listeners.upgrade = Some(socket);
        }
        Ok((listeners, None))
    }

    /// `count` MCP listeners on `listen` and the operations listener on `admin`, bound
    /// for this process alone.
    pub fn bind(
        listen: SocketAddr,
        admin: Option<SocketAddr>,
        count: usize,
    ) -> Result<Listeners, StartError> {
        let (mcp, lock) = exclusive::bind_group(listen, count).map_err(|e| failed(listen, e))?;
        let operations = match admin {
            Some(addr) => Some(exclusive::bind_one(addr).map_err(|e| failed(addr, e))?),
            None => None,
        };
        Ok(Listeners {
            mcp,
            operations,
            lock: Some(lock),
            upgrade: None,
        })
    }

    /// The MCP address (with the port the kernel chose for a port 0).
    pub fn local_addr(&self, configured: SocketAddr) -> Result<SocketAddr, StartError> {
        let first = self.mcp.first().map(TcpListener::local_addr);
        first
            .unwrap_or_else(|| Err(std::io::Error::other("no socket was bound")))
            .map_err(|source| StartError::Listen {
                addr: configured,
                source,
            })
    }

    /// Other descriptors of these sockets, to offer to the next process.
    pub fn held(&self, listen: SocketAddr) -> std::io::Result<Held> {
        let share = |listener: &TcpListener| -> std::io::Result<OwnedFd> {
            Ok(OwnedFd::from(listener.try_clone()?))
        };
        let operations = match &self.operations {
            Some(listener) => Some((listener.local_addr()?, share(listener)?)),
            None => None,
        };
        Ok(Held {
            listen,
            mcp: self.mcp.iter().map(share).collect::<Result<_, _>>()?,
            operations,
            lock: self.lock.as_ref().map(AddressLock::share).transpose()?,
        })
    }
}

/// The start-up error for `addr` that could not be bound.
fn failed(addr: SocketAddr, e: BindError) -> StartError {
    match e {
        BindError::InUse(holder) => StartError::InUse { addr, holder },
        BindError::Io(source) => StartError::Listen { addr, source },
    }
}
