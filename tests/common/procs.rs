//! Processes as `/proc` describes them, counted exactly.
//!
//! Every process a test starts carries a marker unique to that test in its environment
//! ([`MARKER_VAR`], inherited by grandchildren) and is found by reading `/proc`. A process
//! is *alive* while it runs (a zombie is not) and *reaped* once its `/proc` entry is gone
//! (not even a zombie). Whatever a test leaves behind is SIGKILLed by pid when its
//! [`Marker`] drops, so a failing test does not leak processes either.
//!
//! Linux only; knows nothing of the proxy.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::eventually;

/// The environment variable carrying a test's [`Marker`].
pub const MARKER_VAR: &str = "MCP_STDIO_TEST_MARKER";

/// One process as `/proc/<pid>/stat` describes it; the same process whatever its state.
#[derive(Debug, Clone, Copy)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    /// Start time in clock ticks after boot: tells a reused pid apart.
    pub start: u64,
}

impl PartialEq for Proc {
    fn eq(&self, other: &Proc) -> bool {
        self.pid == other.pid && self.start == other.start
    }
}

/// The process `pid` now, if there is one (zombies included).
pub fn stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: parse after the last.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Proc {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// This test process's pid, as `/proc` gives it.
pub fn this_process() -> i32 {
    std::process::id() as i32
}

/// Running processes (not zombies: their environment is gone) carrying `marker`.
pub fn marked(marker: &str) -> Vec<Proc> {
    let needle = format!("{MARKER_VAR}={marker}");
    all_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        })
        .filter_map(stat)
        .filter(|p| p.state != 'Z' && p.state != 'X')
        .collect()
}

/// Still running (a zombie is not).
pub fn alive(p: &Proc) -> bool {
    stat(p.pid).is_some_and(|now| now.start == p.start && now.state != 'Z' && now.state != 'X')
}

/// Gone for good: exited and reaped by its parent (no zombie left).
pub fn reaped(p: &Proc) -> bool {
    stat(p.pid).is_none_or(|now| now.start != p.start)
}

/// Children of this test process that are zombies (exited, never waited for).
pub fn zombie_children() -> Vec<Proc> {
    let me = this_process();
    all_pids()
        .into_iter()
        .filter_map(stat)
        .filter(|p| p.ppid == me && p.state == 'Z')
        .collect()
}

/// Whether this test process has no zombie children, within 3 s.
pub async fn no_zombie_children() -> bool {
    eventually(Duration::from_secs(3), || zombie_children().is_empty()).await
}

/// Asserts no process with `marker` runs any more.
pub fn assert_nothing_left(marker: &str) {
    let left = marked(marker);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// A marker unique to one test (and one run). Dropped at the end of the test, passed or
/// failed, it SIGKILLs (by pid) whatever still carries it.
pub struct Marker(String);

impl Marker {
    pub fn new(test: &str) -> Marker {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Marker(format!("{test}-{}-{nanos}", std::process::id()))
    }

    /// The environment that marks a process started with it.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![(MARKER_VAR.to_owned(), self.0.clone())]
    }
}

impl std::ops::Deref for Marker {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for p in marked(&self.0) {
            kill(p.pid);
        }
    }
}

fn kill(pid: i32) {
    use nix::sys::signal::{Signal, kill};
    let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
}
