//! Why a call to the upstream failed. Every variant is the upstream's fault or the
//! network's, never the client's; `crate::error` decides what the client is told.

use std::time::Duration;

use http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the upstream could not be reached: {0}")]
    Unreachable(String),
    #[error("the upstream did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// An answer under way went silent.
    #[error("the upstream sent nothing for {} ms and the stream was closed", .0.as_millis())]
    Idle(Duration),
    /// The upstream answered 404 to a request carrying its `Mcp-Session-Id`: it no longer
    /// knows the session (2025-11-25 transport, "Session Management" §4).
    #[error("the upstream no longer knows this session")]
    SessionGone,
    #[error("the upstream refused the request with HTTP {status}: {detail}")]
    Refused { status: StatusCode, detail: String },
    /// The upstream answered the proxy's `initialize` with a JSON-RPC error; `modern`: one
    /// only a modern (2026-07-28) server gives (-32022 naming the versions it speaks).
    #[error("the upstream answered initialize with error {code}: {message:?}")]
    InitializeFailed {
        code: i64,
        message: String,
        modern: bool,
    },
    #[error("the upstream answered something the proxy cannot use: {0}")]
    Protocol(String),
    /// No more upstream connections may be opened (e.g. `max_children` stdio servers).
    #[error("no upstream connection is available: {0}")]
    Exhausted(String),
    /// A stdio server (a child process) could not serve, in the child's terms.
    #[error("{0}")]
    Child(ChildError),
}

impl UpstreamError {
    /// Whether the upstream refused a legacy request as only a modern server would: it
    /// is not what it was (replaced by a 2026-07-28 server).
    pub fn is_modern_refusal(&self) -> bool {
        matches!(self, UpstreamError::InitializeFailed { modern: true, .. })
    }
}

/// What went wrong with a stdio server's process, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildError {
    pub failure: ChildFailure,
    /// While the proxy was starting it (before it answered `initialize`).
    pub starting: bool,
}

/// What a stdio server's process did (or could not do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildFailure {
    /// The program does not exist (or is not on the proxy's `PATH`).
    NotFound { program: String },
    /// The program exists but could not be run (e.g. permission denied).
    CannotRun { program: String, reason: String },
    /// The process ended on its own.
    Exited {
        status: ExitStatus,
        stderr: Option<String>,
    },
    /// It closed its stdout and kept running.
    ClosedStdout { stderr: Option<String> },
    /// It broke the stdio framing: a line that is not JSON-RPC, or one too long.
    BrokeProtocol { why: String },
    /// The proxy stopped it (its session ended) while a request was waiting.
    Stopped,
    /// It answered nothing to `initialize` within the timeout.
    NoInitializeAnswer {
        after: Duration,
        stderr: Option<String>,
    },
    /// It answered `initialize` with a JSON-RPC error.
    InitializeFailed { code: i64, message: String },
}

/// How a process ended: its exit code, or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// Neither is known.
    Unknown,
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(signal)) => ExitStatus::Signal(signal),
            (None, None) => ExitStatus::Unknown,
        }
    }
}

impl ChildError {
    pub fn new(failure: ChildFailure) -> ChildError {
        ChildError {
            failure,
            starting: false,
        }
    }

    /// The same failure, as it happened while the child was being started.
    pub fn while_starting(mut self) -> ChildError {
        self.starting = true;
        self
    }

    /// The last line the child wrote on stderr before it failed, if any.
    pub fn stderr(&self) -> Option<&str> {
        self.failure.stderr()
    }

    /// Whether the failure is the child not answering in time (a gateway timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self.failure, ChildFailure::NoInitializeAnswer { .. })
    }
}

impl std::fmt::Display for ChildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let before = if self.starting {
            " before answering initialize"
        } else {
            " before answering"
        };
        self.failure.describe(f, before)
    }
}

/// The failure on its own (a child that died between requests), for the log.
impl std::fmt::Display for ChildFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.describe(f, "")
    }
}

impl ChildFailure {
    fn stderr(&self) -> Option<&str> {
        match self {
            ChildFailure::Exited { stderr, .. }
            | ChildFailure::ClosedStdout { stderr }
            | ChildFailure::NoInitializeAnswer { stderr, .. } => stderr.as_deref(),
            _ => None,
        }
    }

    /// What happened, `before` what (" before answering", or nothing), and the child's
    /// last stderr line when it ended or went silent: usually the reason.
    fn describe(&self, f: &mut std::fmt::Formatter<'_>, before: &str) -> std::fmt::Result {
        match self {
            ChildFailure::NotFound { program } => write!(
                f,
                "the stdio server's command {program:?} was not found; is it installed, and on \
                 the proxy's PATH (or give its full path)?"
            ),
            ChildFailure::CannotRun { program, reason } => {
                write!(
                    f,
                    "the stdio server's command {program:?} could not be run: {reason}"
                )
            }
            ChildFailure::Exited { status, .. } => {
                f.write_str("the stdio server ")?;
                match status {
                    ExitStatus::Code(code) => write!(f, "exited with status {code}")?,
                    ExitStatus::Signal(signal) => write!(f, "was killed by signal {signal}")?,
                    ExitStatus::Unknown => f.write_str("exited")?,
                }
                f.write_str(before)
            }
            ChildFailure::ClosedStdout { .. } => {
                write!(f, "the stdio server closed its stdout{before}")
            }
            ChildFailure::BrokeProtocol { why } => write!(f, "the stdio server {why}"),
            ChildFailure::Stopped => {
                write!(
                    f,
                    "the stdio server was stopped (its session ended){before}"
                )
            }
            ChildFailure::NoInitializeAnswer { after, .. } => write!(
                f,
                "the stdio server did not answer initialize within {}",
                humantime::format_duration(*after)
            ),
            ChildFailure::InitializeFailed { code, message } => write!(
                f,
                "the stdio server answered initialize with error {code}: {message:?}"
            ),
        }?;
        match (self, self.stderr()) {
            (_, Some(line)) => write!(f, "; its last stderr line: {line:?}"),
            (
                ChildFailure::Exited { .. }
                | ChildFailure::ClosedStdout { .. }
                | ChildFailure::NoInitializeAnswer { .. },
                None,
            ) => f.write_str("; it wrote nothing on stderr"),
            _ => Ok(()),
        }
    }
}
