//! How a stdio child is started: so that it dies with the proxy.
//!
//! A child whose parent dies normally sees its stdin close and exits; one that ignores
//! that (or is busy) would outlive a proxy killed with SIGKILL. Linux can send a child a
//! signal when its parent dies (`PR_SET_PDEATHSIG`), but it must be asked for by the
//! child itself, between fork and exec — unsafe code, which this crate forbids. util-linux
//! `setpriv --pdeathsig KILL -- program args…` does exactly that and then execs the
//! program (same pid, same process group), so when `setpriv` works (checked once, at
//! start-up) every child is started through it.
//!
//! Limits, as the kernel defines them: the signal follows the death of the proxy's
//! *thread* that started the child (the runtime's worker threads live as long as the
//! proxy), it reaches the direct child only (what the child starts — `npx`'s `node` — is
//! not signalled, though it sees its stdin close), and it is cleared when the child execs
//! a set-user-ID program.
//!
//! Because `setpriv` would report a missing program only after it started, the program is
//! looked up here first (the `PATH` the child gets, its working directory), so a command
//! that does not exist is still reported as not found.
//!
//! The child's environment is set here too, whole: [`environment`] decides it, and
//! nothing of the proxy's own environment reaches the child beyond that (`setpriv` is
//! given the program's full path, so it needs no `PATH` of its own).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::CommandSpec;
use super::environment;
use crate::upstream::error::ChildFailure;

/// How children are started. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// `setpriv`, when it can set a parent-death signal here.
    setpriv: Option<PathBuf>,
}

impl Launcher {
    /// Starts children through `setpriv --pdeathsig KILL` if that works on this machine;
    /// says once, in the log, when it does not.
    pub fn detect() -> Launcher {
        let setpriv = find_in_path(OsString::from("setpriv").as_ref(), std::env::var_os("PATH"))
            .filter(|setpriv| {
                std::process::Command::new(setpriv)
                    .args(["--pdeathsig", "KILL", "--", "true"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|status| status.success())
            });
        if setpriv.is_none() {
            tracing::warn!(
                "util-linux setpriv (with --pdeathsig) is not available: stdio servers are \
                 started directly, and one that ignores its stdin closing outlives a proxy \
                 killed with SIGKILL; install util-linux to have them killed with the proxy"
            );
        }
        Launcher { setpriv }
    }

    /// The command that starts `spec`'s program in the environment [`environment`] gives
    /// it (its arguments and working directory still to be set by the caller).
    pub fn command(&self, spec: &CommandSpec) -> Result<Command, ChildFailure> {
        let env = environment::for_child(spec, std::env::vars_os());
        let mut command = match &self.setpriv {
            // Looked up in the child's PATH: the standard library does so when the
            // command's environment sets one.
            None => Command::new(&spec.program),
            Some(setpriv) => {
                let program = resolve(spec, environment::path_of(&env))?;
                let mut command = Command::new(setpriv);
                command.args(["--pdeathsig", "KILL", "--"]).arg(program);
                command
            }
        };
        command.env_clear().envs(env);
        Ok(command)
    }
}

/// The program `spec` names, as `execvp` would find it: a path (relative to the child's
/// working directory), or the first executable match in `path` (the child's `PATH`).
fn resolve(spec: &CommandSpec, path: Option<OsString>) -> Result<PathBuf, ChildFailure> {
    let program = Path::new(&spec.program);
    let not_found = || ChildFailure::NotFound {
        program: spec.program.clone(),
    };
    if spec.program.contains('/') {
        let path = match &spec.cwd {
            Some(cwd) if program.is_relative() => cwd.join(program),
            _ => program.to_owned(),
        };
        return match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => Ok(path),
            Ok(_) => Err(ChildFailure::CannotRun {
                program: spec.program.clone(),
                reason: "permission denied (is it executable?)".into(),
            }),
            Err(_) => Err(not_found()),
        };
    }
    match find_in_path(program.as_os_str(), path.clone()) {
        Some(found) => Ok(found),
        // Present but not executable: execvp's EACCES.
        None if find_any(program.as_os_str(), path) => Err(ChildFailure::CannotRun {
            program: spec.program.clone(),
            reason: "permission denied (is it executable?)".into(),
        }),
        None => Err(not_found()),
    }
}

/// The first executable file named `name` in the directories of `path`.
fn find_in_path(name: &std::ffi::OsStr, path: Option<OsString>) -> Option<PathBuf> {
    std::env::split_paths(&path?)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// Whether a file named `name` exists in a directory of `path`, executable or not.
fn find_any(name: &std::ffi::OsStr, path: Option<OsString>) -> bool {
    path.is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str, env: &[(&str, &str)]) -> CommandSpec {
        CommandSpec {
            program: program.to_owned(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            inherit_env: Vec::new(),
            cwd: None,
        }
    }

    /// `resolve` in the PATH a child of `spec` gets.
    fn resolved(spec: &CommandSpec) -> Result<PathBuf, ChildFailure> {
        let env = environment::for_child(spec, std::env::vars_os());
        resolve(spec, environment::path_of(&env))
    }

    #[test]
    fn programs_are_found_as_execvp_would() {
        let sh = resolved(&spec("sh", &[])).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{sh:?}");
        assert_eq!(
            resolved(&spec("/bin/sh", &[])).unwrap(),
            PathBuf::from("/bin/sh")
        );
        assert!(matches!(
            resolved(&spec("no-such-program-anywhere", &[])),
            Err(ChildFailure::NotFound { .. })
        ));
        assert!(matches!(
            resolved(&spec("./no/such/file", &[])),
            Err(ChildFailure::NotFound { .. })
        ));
        // The child's own PATH is the one searched.
        assert!(matches!(
            resolved(&spec("sh", &[("PATH", "/nonexistent")])),
            Err(ChildFailure::NotFound { .. })
        ));
        // A file that is not executable, by path and in PATH.
        let dir = std::env::temp_dir().join(format!("launch-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-executable");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let by_path = resolved(&spec(file.to_str().unwrap(), &[]));
        let path = dir.to_str().unwrap();
        let by_name = resolved(&spec("not-executable", &[("PATH", path)]));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            matches!(by_path, Err(ChildFailure::CannotRun { .. })),
            "{by_path:?}"
        );
        assert!(
            matches!(by_name, Err(ChildFailure::CannotRun { .. })),
            "{by_name:?}"
        );
    }
}
