//! Binding an address so that this process alone serves it.
//!
//! The workers accept on sockets of their own, joined into one `SO_REUSEPORT` group so
//! that the kernel spreads new connections over them. The kernel lets any socket with
//! `SO_REUSEPORT` of the same effective user join such a group (socket(7), `SO_REUSEPORT`)
//! — so, left at that, a second proxy started on a running proxy's address binds too, and
//! the kernel splits the connections between two configurations. Two checks keep the
//! group this process's own:
//!
//! - **The address lock**: a Unix socket bound to an abstract name made of the address
//!   (unix(7), "abstract namespace"). The kernel keeps the name taken while the socket is
//!   open and frees it when the process ends, however it ends (SIGKILL included); a second
//!   proxy cannot bind it. Its scope is the network namespace, the port's own.
//! - **The probe**: a plain socket (no `SO_REUSEPORT`) bound to the address before the
//!   group is. The kernel refuses it while anything listens there — another program,
//!   another user's, a proxy of a build without the lock — whatever options that one set.
//!
//! The lock is taken before the probe, so two proxies starting at once cannot both pass
//! it; the group is bound right after the probe is closed (a program that is not a proxy,
//! binding with `SO_REUSEPORT` as the same user within those microseconds, is the one
//! case left). A hand-over (`handover`) passes the sockets and the lock to the next
//! process, which binds nothing.
//!
//! What this module does not know: workers, configuration, the hand-over.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};

/// The backlog of every listener (as `TcpListener::bind`'s).
pub const BACKLOG: i32 = 1024;

/// What holds an address this process could not bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Another mcp-session-proxy (it holds the address lock).
    Proxy,
    /// Something listens there (the probe could not bind).
    Other,
}

/// Why an address could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("address already in use")]
    InUse(Holder),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The lock on one listen address; held while it is open (see the module docs).
#[derive(Debug)]
pub struct AddressLock(UnixDatagram);

// === impl AddressLock ===

impl AddressLock {
    /// Takes the lock on `addr`, unless another process holds it.
    pub fn take(addr: SocketAddr) -> Result<AddressLock, BindError> {
        let name = format!("mcp-session-proxy/listen/{addr}");
        let unix = UnixAddr::from_abstract_name(name.as_bytes())?;
        match UnixDatagram::bind_addr(&unix) {
            Ok(socket) => Ok(AddressLock(socket)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(BindError::InUse(Holder::Proxy)),
            Err(e) => Err(BindError::Io(e)),
        }
    }

    /// The lock another process handed over.
    pub fn adopt(fd: OwnedFd) -> AddressLock {
        AddressLock(UnixDatagram::from(fd))
    }

    /// Another descriptor of the same lock (to hand over).
    pub fn share(&self) -> io::Result<OwnedFd> {
        self.0.as_fd().try_clone_to_owned()
    }
}

/// `count` listening sockets on `addr`, this process's alone (see the module docs) with
/// the lock that keeps them so; with more than one, a `SO_REUSEPORT` group. A port 0 is
/// chosen once, by the probe, and shared by every socket.
pub fn bind_group(
    addr: SocketAddr,
    count: usize,
) -> Result<(Vec<TcpListener>, AddressLock), BindError> {
    let lock = match addr.port() {
        0 => None,
        _ => Some(AddressLock::take(addr)?),
    };
    let addr = probe(addr)?;
    let lock = match lock {
        Some(lock) => lock,
        None => AddressLock::take(addr)?,
    };
    let sockets = (0..count.max(1))
        .map(|_| listener(addr, count > 1))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((sockets, lock))
}

/// One listening socket on `addr`, without `SO_REUSEPORT`: the kernel itself refuses it
/// while anything listens there.
pub fn bind_one(addr: SocketAddr) -> Result<TcpListener, BindError> {
    listener(addr, false)
}

/// Binds a plain socket to `addr` and closes it: the address with its port, when nothing
/// listens there.
fn probe(addr: SocketAddr) -> Result<SocketAddr, BindError> {
    let socket = socket_for(addr)?;
    // Only a listener makes the address taken: connections of an earlier process left in
    // TIME_WAIT do not.
    sockopt::set_socket_reuseaddr(&socket, true).map_err(io::Error::from)?;
    rustix::net::bind(&socket, &addr).map_err(in_use)?;
    let bound = TcpListener::from(socket).local_addr()?;
    Ok(bound)
}

/// A listening socket on `addr`, nonblocking; `shared`: one of a `SO_REUSEPORT` group.
fn listener(addr: SocketAddr, shared: bool) -> Result<TcpListener, BindError> {
    let socket = socket_for(addr)?;
    // As `TcpListener::bind` does: a restarted proxy binds despite TIME_WAIT.
    sockopt::set_socket_reuseaddr(&socket, true).map_err(io::Error::from)?;
    if shared {
        sockopt::set_socket_reuseport(&socket, true).map_err(io::Error::from)?;
    }
    rustix::net::bind(&socket, &addr).map_err(in_use)?;
    rustix::net::listen(&socket, BACKLOG).map_err(io::Error::from)?;
    Ok(TcpListener::from(socket))
}

fn socket_for(addr: SocketAddr) -> io::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    Ok(rustix::net::socket_with(
        family,
        SocketType::STREAM,
        flags,
        None,
    )?)
}

fn in_use(e: Errno) -> BindError {
    match e {
        Errno::ADDRINUSE => BindError::InUse(Holder::Other),
        e => BindError::Io(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    #[test]
    fn a_group_shares_one_port_and_nobody_else_may_join_it() {
        let (sockets, _lock) = bind_group(loopback(), 3).unwrap();
        let addr = sockets[0].local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        assert!(sockets.iter().all(|s| s.local_addr().unwrap() == addr));
        // A second proxy: the lock is taken.
        assert!(matches!(
            bind_group(addr, 3),
            Err(BindError::InUse(Holder::Proxy))
        ));
    }

    #[test]
    fn the_lock_is_exclusive_and_freed_with_its_socket() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 9));
        let lock = AddressLock::take(addr).unwrap();
        assert!(matches!(
            AddressLock::take(addr),
            Err(BindError::InUse(Holder::Proxy))
        ));
        let shared = lock.share().unwrap();
        drop(lock);
        // A descriptor handed over keeps it.
        assert!(AddressLock::take(addr).is_err());
        drop(shared);
        AddressLock::take(addr).unwrap();
    }

    #[test]
    fn a_foreign_reuseport_listener_is_found_by_the_probe() {
        // Another program of the same user, sharing by SO_REUSEPORT: the kernel would let
        // the group join it.
        let foreign = listener(loopback(), true).unwrap();
        let addr = foreign.local_addr().unwrap();
        assert!(
            listener(addr, true).is_ok(),
            "the kernel's own rule lets it join"
        );
        assert!(matches!(
            bind_group(addr, 2),
            Err(BindError::InUse(Holder::Other))
        ));
    }
}
