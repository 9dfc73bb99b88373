//! One stdio MCP server process, owned by a set of tasks (2025-11-25 "Transports",
//! stdio): newline-delimited JSON-RPC on stdin/stdout, free-form logging on stderr.
//!
//! Requests are renamed to the proxy's ids and the child's messages routed back to them
//! by the shared [`Demux`] (a response by its id, `notifications/progress` by its token,
//! anything else to the only request still awaited, else to the session's listen
//! stream); this file owns the process and its pipes.
//!
//! Ending a child: close stdin, wait `grace`, SIGTERM its process group, wait `grace`,
//! SIGKILL. Whenever the child itself exits, whatever is left of its process group (what
//! it started) is sent SIGTERM and, after `grace`, SIGKILL: no orphans. A child that
//! exits, or writes a line that is not JSON-RPC, or a line longer than the limit, is dead:
//! its in-flight requests get a JSON-RPC error, later use is refused, and the process is
//! stopped and reaped.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use parking_lot::Mutex;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use super::CommandSpec;
use super::launch::Launcher;
use crate::throttle::Throttle;
use crate::upstream::UpstreamError;
use crate::upstream::answer::Delivery;
use crate::upstream::demux::{Demux, Failure, QUEUE};
use crate::upstream::error::{ChildError, ChildFailure, ExitStatus};
/// Longest stderr line logged whole; longer ones are cut (and reading goes on).
const STDERR_LINE: usize = 16 * 1024;
/// stderr lines of one child logged at once after a quiet spell, then per second; the
/// rest are read and dropped (a flooding child must not fill the log).
const STDERR_BURST: u32 = 200;
const STDERR_PER_SECOND: u32 = 50;
/// How often, at most, the count of dropped stderr lines is logged.
const STDERR_DROPS_EVERY: Duration = Duration::from_secs(5);
/// Longest stderr line quoted in an error (the log has it whole).
const STDERR_QUOTE: usize = 500;
/// How long an exited child's last stderr lines may take to be read before its death is
/// reported (its stderr usually closes with it; a grandchild may hold it open).
const STDERR_SETTLE: Duration = Duration::from_millis(200);
/// How long a child that closed its stdout may take to exit before that alone counts as
/// its death.
const EXIT_AFTER_EOF: Duration = Duration::from_secs(1);

/// A place under `max_children`, held from before the process starts until it has exited
/// and been reaped.
#[derive(Debug)]
pub struct LiveSlot(Arc<AtomicUsize>);

impl LiveSlot {
    /// Takes a place if fewer than `max` are taken.
    pub fn reserve(live: &Arc<AtomicUsize>, max: usize) -> Option<LiveSlot> {
        live.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| LiveSlot(live.clone()))
    }
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One child process and the state of its conversation.
#[derive(Debug)]
pub struct Child {
    /// The upstream session id the proxy records for it (`child-N`).
    pub tag: String,
    /// How its stderr lines name it: the session's log tag once it has one.
    label: Mutex<String>,
    pid: Option<u32>,
    stdin: mpsc::Sender<Bytes>,
    /// Tells the stdin writer to close the pipe.
    close_stdin: watch::Sender<bool>,
    /// Its conversation: requests in flight and where its messages go.
    demux: Demux<ChildFailure>,
    /// Set once the process and what is left of its group are gone.
    exited: watch::Receiver<bool>,
    /// Time between the steps of stopping the child.
    grace: Duration,
    /// Where to report that the child died on its own (crashed, broke the protocol).
    deaths: mpsc::UnboundedSender<String>,
    /// Initialized and handed out: its death is news worth a warning (a child that fails
    /// while starting is reported by whoever started it).
    started: AtomicBool,
    /// The last non-empty line it wrote on stderr (cut to [`STDERR_QUOTE`]).
    last_stderr: Mutex<Option<String>>,
}

impl Failure for ChildFailure {
    fn error(&self) -> UpstreamError {
        UpstreamError::Child(ChildError::new(self.clone()))
    }
}

impl Child {
    /// Starts the process and the tasks that own its pipes. `slot` is released when the
    /// process has exited.
    pub fn spawn(
        spec: &CommandSpec,
        launcher: &Launcher,
        tag: String,
        max_line: usize,
        grace: Duration,
        deaths: mpsc::UnboundedSender<String>,
        slot: LiveSlot,
    ) -> Result<Arc<Child>, UpstreamError> {
        let mut command = launcher
            .command(spec)
            .map_err(|failure| UpstreamError::Child(ChildError::new(failure)))?;
        command
            .args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that stopping it also stops what it started
            // (`npx` runs the server as a grandchild).
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        let program = spec.program.clone();
        let mut process = command.spawn().map_err(|e| {
            let failure = match e.kind() {
                std::io::ErrorKind::NotFound => ChildFailure::NotFound { program },
                std::io::ErrorKind::PermissionDenied => ChildFailure::CannotRun {
                    program,
                    reason: "permission denied (is it executable?)".into(),
                },
                _ => ChildFailure::CannotRun {
                    program,
                    reason: e.to_string(),
                },
            };
            UpstreamError::Child(ChildError::new(failure))
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            return Err(UpstreamError::Child(ChildError::new(
                ChildFailure::CannotRun {
                    program: spec.program.clone(),
                    reason: "its stdin, stdout and stderr could not be piped".into(),
                },
            )));
        };
        let pid = process.id();
        let (stdin_tx, mut stdin_rx) = mpsc::channel::<Bytes>(QUEUE);
        let (close_stdin, mut closing) = watch::channel(false);
        let (exited_tx, exited) = watch::channel(false);
        // Set once the process has exited (before what it started is ended).
        let (process_gone_tx, process_gone) = watch::channel(false);
        // Set once its stderr is read to the end.
        let (stderr_done_tx, mut stderr_done) = watch::channel(false);
        let child = Arc::new(Child {
            label: Mutex::new(tag.clone()),
            demux: Demux::new(tag.as_str()),
            tag,
            pid,
            stdin: stdin_tx,
            close_stdin,
            exited,
            grace,
            deaths,
            started: AtomicBool::new(false),
            last_stderr: Mutex::new(None),
        });

        // stdin: one writer; the pipe closes when the writer ends.
        tokio::spawn(async move {
            let mut stdin = stdin;
            loop {
                let line = tokio::select! {
                    line = stdin_rx.recv() => line,
                    _ = closing.wait_for(|close| *close) => None,
                };
                let Some(line) = line else { break };
                if stdin.write_all(&line).await.is_err()
                    || stdin.write_all(b"\n").await.is_err()
                    || stdin.flush().await.is_err()
                {
                    break;
                }
            }
        });

        // stdout: every line is one message.
        let reader = child.clone();
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout);
            let mut line = Vec::new();
            let why = loop {
                match read_line(&mut stdout, &mut line, max_line).await {
                    Ok(true) => {
                        if line.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        if let Err(e) = reader.demux.dispatch(&line) {
                            break format!("wrote a line that is not JSON-RPC ({e})");
                        }
                    }
                    Ok(false) => {
                        // Usually the process is exiting: its exit status (reported by the
                        // waiter) says more than the closed pipe.
                        let mut gone = process_gone.clone();
                        let exited =
                            tokio::time::timeout(EXIT_AFTER_EOF, gone.wait_for(|gone| *gone))
                                .await
                                .is_ok_and(|r| r.is_ok());
                        if !exited {
                            let stderr = reader.last_stderr();
                            reader.die(ChildFailure::ClosedStdout { stderr }, true);
                        }
                        return;
                    }
                    Err(why) => break why,
                }
            };
            // A broken protocol: the child cannot be trusted with another message.
            reader.die(ChildFailure::BrokeProtocol { why }, true);
            reader.stop().await;
        });

        // stderr: free-form logging, tagged with the session; long lines are cut, never
        // the pipe (a server writing to a closed stderr may die of it), and a flood is
        // rate-limited: every line is read, at most STDERR_PER_SECOND are logged, and how
        // many were not is logged every STDERR_DROPS_EVERY.
        let logger = child.clone();
        tokio::spawn(async move {
            let mut stderr = BufReader::new(stderr);
            let mut line = Vec::new();
            let mut lines = Throttle::new(STDERR_BURST, STDERR_PER_SECOND);
            let mut reports = Throttle::every(STDERR_DROPS_EVERY);
            let mut unreported = 0u64;
            while let Ok(true) = read_line_cut(&mut stderr, &mut line, STDERR_LINE).await {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                if !text.trim().is_empty() {
                    *logger.last_stderr.lock() = Some(quote(text));
                }
                let logged = lines.admit().is_some();
                if !logged {
                    unreported += 1;
                }
                if unreported > 0 && reports.admit().is_some() {
                    logger.stderr_dropped(std::mem::take(&mut unreported));
                }
                if logged {
                    let session = logger.label.lock().clone();
                    tracing::info!(target: "upstream::stderr", session = %session, "{text}");
                }
            }
            if unreported > 0 {
                logger.stderr_dropped(unreported);
            }
            let _ = stderr_done_tx.send(true);
        });

        // The process itself: reaped as soon as it exits, whatever the reason; then
        // whatever it started is ended too.
        let waiter = child.clone();
        tokio::spawn(async move {
            let status = process.wait().await;
            let _ = process_gone_tx.send(true);
            // Its last words on stderr are usually why it exited.
            let _ = tokio::time::timeout(STDERR_SETTLE, stderr_done.wait_for(|done| *done)).await;
            let status = match status {
                Ok(status) => ExitStatus::from(status),
                Err(_) => ExitStatus::Unknown,
            };
            let stderr = waiter.last_stderr();
            waiter.die(ChildFailure::Exited { status, stderr }, true);
            waiter.end_group().await;
            drop(slot);
            let _ = exited_tx.send(true);
        });
        Ok(child)
    }

    /// Says how many stderr lines were read and not logged.
    fn stderr_dropped(&self, dropped: u64) {
        let session = self.label.lock().clone();
        tracing::warn!(
            target: "upstream::stderr",
            session = %session,
            dropped,
            "{dropped} stderr lines of this stdio server were not logged (more than \
             {STDERR_PER_SECOND} a second)"
        );
    }

    /// Names the child's stderr lines after the session it serves.
    pub fn set_label(&self, label: String) {
        *self.label.lock() = label;
    }

    /// Whether the child can take messages.
    pub fn is_alive(&self) -> bool {
        self.demux.is_alive()
    }

    /// Marks the child as initialized and handed out: from now on its death is logged
    /// as a warning.
    pub fn mark_started(&self) {
        self.started.store(true, Ordering::Release);
    }

    /// The last non-empty line the child wrote on stderr.
    pub fn last_stderr(&self) -> Option<String> {
        self.last_stderr.lock().clone()
    }

    /// Why the child cannot take a message: how it died, or (not dead yet, but its
    /// stdin is gone) that.
    fn gone(&self) -> UpstreamError {
        let failure = self.demux.failure();
        UpstreamError::Child(ChildError::new(failure.unwrap_or_else(|| {
            ChildFailure::BrokeProtocol {
                why: "closed its stdin".into(),
            }
        })))
    }

    /// Sends a request; its messages (the last being the response) arrive on the returned
    /// channel. `message` must be a JSON-RPC request.
    pub async fn request(&self, message: &[u8]) -> Result<mpsc::Receiver<Delivery>, UpstreamError> {
        let registered = self.demux.request(message)?;
        if self.stdin.send(registered.message).await.is_err() {
            self.demux.forget(registered.proxy_id);
            return Err(self.gone());
        }
        Ok(registered.rx)
    }

    /// Sends a notification, or a response to one of the child's own requests. A
    /// `notifications/cancelled` names the request by the id the child knows.
    pub async fn send(&self, message: Bytes) -> Result<(), UpstreamError> {
        let message = self.demux.outgoing(message)?;
        self.stdin.send(message).await.map_err(|_| self.gone())
    }

    /// The session's listen stream: messages no request claims. A new one replaces the
    /// previous one.
    pub fn listen(&self) -> Result<mpsc::Receiver<Delivery>, UpstreamError> {
        self.demux.listen()
    }

    /// Ends the process: stdin closed, then SIGTERM, then SIGKILL, `grace` apart. Returns
    /// once it (and what it started) is gone and reaped.
    pub async fn stop(&self) {
        self.die(ChildFailure::Stopped, false);
        let mut exited = self.exited.clone();
        // Closing stdin is how a stdio client asks its server to exit.
        let _ = self.close_stdin.send(true);
        if wait_exit(&mut exited, self.grace).await {
            return;
        }
        self.signal(Signal::SIGTERM);
        if wait_exit(&mut exited, self.grace).await {
            return;
        }
        self.signal(Signal::SIGKILL);
        // The waiter still ends what is left of the group, up to `grace` more.
        let _ = wait_exit(&mut exited, self.grace * 2).await;
    }

    fn signal(&self, signal: Signal) -> bool {
        match self.pid.and_then(|p| i32::try_from(p).ok()) {
            // The child leads its own process group (see `spawn`).
            Some(pid) => killpg(Pid::from_raw(pid), signal).is_ok(),
            None => false,
        }
    }

    /// After the child exited: SIGTERM to what is left of its group, SIGKILL after
    /// `grace` if anything is still there.
    async fn end_group(&self) {
        if !self.signal(Signal::SIGTERM) {
            return; // the group is empty
        }
        let deadline = tokio::time::Instant::now() + self.grace;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if !self.signal_probe() {
                return;
            }
        }
        self.signal(Signal::SIGKILL);
    }

    /// Whether any process of the group is left.
    fn signal_probe(&self) -> bool {
        match self.pid.and_then(|p| i32::try_from(p).ok()) {
            Some(pid) => killpg(Pid::from_raw(pid), None).is_ok(),
            None => false,
        }
    }

    /// Marks the child unusable and fails every request in flight; `report`s a death
    /// the proxy did not ask for.
    fn die(&self, failure: ChildFailure, report: bool) {
        if !self.demux.die(failure.clone()) || !report {
            return;
        }
        let session = self.label.lock().clone();
        if self.started.load(Ordering::Acquire) {
            tracing::warn!(session = %session, reason = %failure, "stdio server died");
        } else {
            // Whoever was starting it reports the failure, once.
            tracing::debug!(session = %session, reason = %failure, "stdio server died while starting");
        }
        let _ = self.deaths.send(self.tag.clone());
    }
}

/// A stderr line short enough to quote in an error.
fn quote(line: &str) -> String {
    match line.char_indices().nth(STDERR_QUOTE) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

async fn wait_exit(exited: &mut watch::Receiver<bool>, within: Duration) -> bool {
    tokio::time::timeout(within, exited.wait_for(|gone| *gone))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Reads one line (without its `\n`) of at most `max` bytes. `Ok(false)` at the end of
/// the stream; an error for a line that is too long or a failed read.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> Result<bool, String> {
    line.clear();
    loop {
        let available = reader
            .fill_buf()
            .await
            .map_err(|e| format!("could not be read from: {e}"))?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        match memchr::memchr(b'\n', available) {
            Some(end) => {
                line.extend_from_slice(&available[..end]);
                reader.consume(end + 1);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return if line.len() > max {
                    Err(format!("wrote a line longer than {max} bytes"))
                } else {
                    Ok(true)
                };
            }
            None => {
                let n = available.len();
                line.extend_from_slice(available);
                reader.consume(n);
                if line.len() > max {
                    return Err(format!("wrote a line longer than {max} bytes"));
                }
            }
        }
    }
}

/// Like [`read_line`], but a line longer than `max` is cut to `max` bytes (the rest is
/// read and dropped) instead of being an error.
async fn read_line_cut<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let (take, done) = match memchr::memchr(b'\n', available) {
            Some(end) => (end, Some(end + 1)),
            None => (available.len(), None),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&available[..take.min(room)]);
        reader.consume(done.unwrap_or(take));
        if done.is_some() {
            return Ok(true);
        }
    }
}
