//! The `upgrade.socket` file: the Unix socket a running proxy listens on for the next
//! process to take its listeners over (`handover`).
//!
//! It is created with mode 0600, so only its user (and root) can connect: the socket is
//! bound under a temporary name, given its mode, then renamed onto the configured path,
//! so it is never reachable with looser permissions, and a file left by a proxy that
//! died is replaced in one step. The process holding the socket last removes the file
//! when it stops, unless the path names another socket by then; a process that handed
//! its socket over leaves it to the next.
//!
//! What it does not know: the hand-over's messages.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The listening socket at `upgrade.socket`.
#[derive(Debug)]
pub struct UpgradeSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The file's device and inode, once this process owns the path (it created the
    /// socket, or a hand-over to it completed): removed on drop if still the same file.
    owned: Option<(u64, u64)>,
}

// === impl UpgradeSocket ===

impl UpgradeSocket {
    /// A new socket at `path` (replacing a file left there), mode 0600.
    pub fn bind(path: &Path) -> io::Result<UpgradeSocket> {
        let temporary = temporary_name(path);
        let _ = std::fs::remove_file(&temporary);
        let listener = UnixListener::bind(&temporary)?;
        let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&temporary, path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
        let owned = identity(path);
        Ok(UpgradeSocket {
            listener,
            path: path.to_owned(),
            owned,
        })
    }

    /// The socket a running proxy handed over, at `path`; the file stays the old
    /// process's to remove until [`UpgradeSocket::own`].
    pub fn adopt(fd: OwnedFd, path: &Path) -> UpgradeSocket {
        UpgradeSocket {
            listener: UnixListener::from(fd),
            path: path.to_owned(),
            owned: None,
        }
    }

    /// The hand-over completed: the file is this process's from now on.
    pub fn own(&mut self) {
        self.owned = identity(&self.path);
    }

    /// Handed over: the file is the next process's.
    pub fn disown(&mut self) {
        self.owned = None;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another descriptor of the socket (to hand over).
    pub fn share(&self) -> io::Result<OwnedFd> {
        self.listener.as_fd().try_clone_to_owned()
    }

    /// The socket, to accept on.
    pub fn listener(&self) -> &UnixListener {
        &self.listener
    }
}

impl Drop for UpgradeSocket {
    fn drop(&mut self) {
        if let Some(owned) = self.owned
            && identity(&self.path) == Some(owned)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `path.<pid>.new`, beside it (a rename stays within one file system).
fn temporary_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.new", std::process::id()));
    PathBuf::from(name)
}

/// The device and inode of the file at `path`.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "mcp-session-proxy-upgrade-socket-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_socket_is_private_replaces_a_stale_file_and_is_removed_by_its_owner() {
        let dir = scratch();
        let path = dir.join("proxy.sock");
        std::fs::write(&path, "left by a proxy that died").unwrap();
        let socket = UpgradeSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        drop(socket);
        assert!(!path.exists(), "the owner removes its file");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_socket_handed_over_is_left_to_the_next_owner() {
        let dir = scratch();
        let path = dir.join("proxy.sock");
        let mut old = UpgradeSocket::bind(&path).unwrap();
        let mut new = UpgradeSocket::adopt(old.share().unwrap(), &path);
        old.disown();
        drop(old);
        assert!(path.exists());
        new.own();
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        drop(new);
        assert!(!path.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_path_that_names_another_socket_by_then_is_not_removed() {
        let dir = scratch();
        let path = dir.join("proxy.sock");
        let first = UpgradeSocket::bind(&path).unwrap();
        let second = UpgradeSocket::bind(&path).unwrap();
        drop(first);
        assert!(path.exists(), "the first removed the second's file");
        drop(second);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
