//! stdio upstreams: every upstream session is its own child process (the Agent Client
//! Protocol's session setup describes an MCP server as `command` + `args` + `env`, plus
//! a working directory).
//!
//! Start-up latency is hidden by a warm pool: children started and initialized ahead of
//! time, kept per client identity (clientInfo + capabilities, which a server learns only
//! at `initialize`), refilled in the background after each use. `max_children` bounds
//! every child alive, pooled or in a session.

mod child;
mod environment;
mod launch;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

pub use self::environment::is_proxy_setting;

use self::child::{Child, LiveSlot};
use self::launch::Launcher;
use super::answer::Answer;
use super::era::{Change, Era, EraCell};
use super::error::{ChildError, ChildFailure, UpstreamError};
use super::handshake::Opened;
use super::handshake::read_result;
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::discover;
use crate::mcp::initialize::{self, Negotiated};
use crate::telemetry::client::{ClientSpan, Peer};

/// How to start the server (the Agent Client Protocol's `command`, `args`, `env`, plus
/// `cwd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Variables set for the child (`upstream.env`), over what it inherits.
    pub env: Vec<(String, String)>,
    /// The proxy's variables the child inherits (`upstream.inherit_env`), besides the
    /// base every child gets (`environment::BASE`); nothing else of the proxy's
    /// environment reaches it.
    pub inherit_env: Vec<String>,
    pub cwd: Option<PathBuf>,
}

/// How stdio children are run.
#[derive(Debug, Clone)]
pub struct StdioSettings {
    pub command: CommandSpec,
    /// Time allowed for `initialize`, and for the first message of each answer.
    pub timeout: Duration,
    /// Longest line accepted from a child.
    pub max_message_bytes: usize,
    /// Time between the steps of stopping a child (stdin closed, SIGTERM, SIGKILL).
    pub stop_grace: Duration,
    /// Children kept started and initialized per client identity.
    pub pool_size: usize,
    /// Children alive at once, pooled or not.
    pub max_children: usize,
    /// The era the operator pinned (`upstream.era`); `None`: found by the first child.
    pub era: Option<Era>,
}

/// Identities whose pools are kept; the least recently used beyond this are dropped.
const POOLED_IDENTITIES: usize = 4;

/// The stdio upstream: a command, its children, its warm pool.
#[derive(Debug)]
pub struct StdioUpstream {
    settings: StdioSettings,
    label: Arc<str>,
    /// Children serving a session, by key (the upstream session id the proxy records).
    children: DashMap<String, Warm>,
    /// Started and initialized children waiting for a session, by identity.
    pool: Mutex<Pool>,
    /// Children alive (spawned and not yet reaped), counted from before each starts.
    live: Arc<AtomicUsize>,
    /// Every child ever started that may still run: what shutdown must end, whether it
    /// serves a session, waits in the pool, or is still starting.
    all: DashMap<String, std::sync::Weak<Child>>,
    next_key: AtomicU64,
    deaths: mpsc::UnboundedSender<String>,
    /// How children are started (through `setpriv`, so that they die with the proxy).
    launcher: Launcher,
    /// Whether the last attempt to start a child worked.
    spawn_ok: std::sync::atomic::AtomicBool,
    /// What the command speaks: found by its first child (`server/discover` with a
    /// timeout, then `initialize`), or pinned.
    era: EraCell,
    /// What a modern command's `server/discover` said (its first child's answer; every
    /// child of one command says the same).
    discovered: Mutex<Option<Arc<Negotiated>>>,
    /// One start at a time finds the era.
    finding: tokio::sync::Mutex<()>,
    /// Told when a child found the era (or failed to start).
    era_found: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Pool {
    /// Most recently used identity last.
    identities: VecDeque<String>,
    warm: HashMap<String, Vec<Warm>>,
    /// Refills under way, by identity.
    filling: HashMap<String, usize>,
}

#[derive(Debug, Clone)]
struct Warm {
    child: Arc<Child>,
    negotiated: Arc<Negotiated>,
}

/// The identity a child is initialized with.
#[derive(Debug, Clone)]
struct Identity {
    key: String,
    client_info: Option<Box<RawValue>>,
    capabilities: Option<Box<RawValue>>,
}

impl Identity {
    fn of(client_info: Option<&RawValue>, capabilities: Option<&RawValue>) -> Identity {
        let key = format!(
            "{}|{}",
            client_info.map_or("", RawValue::get),
            capabilities.map_or("{}", RawValue::get)
        );
        Identity {
            key,
            client_info: client_info.map(ToOwned::to_owned),
            capabilities: capabilities.map(ToOwned::to_owned),
        }
    }
}

impl StdioUpstream {
    /// A stdio upstream; `deaths` receives the key of every child that dies on its own.
    pub fn new(settings: StdioSettings, deaths: mpsc::UnboundedSender<String>) -> Arc<Self> {
        let settings_era = settings.era;
        let mut label = format!("stdio:{}", settings.command.program);
        for arg in &settings.command.args {
            label.push(' ');
            label.push_str(arg);
        }
        let upstream = Arc::new(StdioUpstream {
            settings,
            label: label.into(),
            children: DashMap::new(),
            pool: Mutex::new(Pool::default()),
            live: Arc::new(AtomicUsize::new(0)),
            all: DashMap::new(),
            next_key: AtomicU64::new(1),
            deaths,
            launcher: Launcher::detect(),
            spawn_ok: std::sync::atomic::AtomicBool::new(true),
            era: EraCell::new(settings_era),
            discovered: Mutex::new(None),
            finding: tokio::sync::Mutex::new(()),
            era_found: tokio::sync::Notify::new(),
        });
        // The proxy's own identity is what a client without clientInfo/capabilities gets.
        upstream.clone().refill(Identity::of(None, None));
        upstream
    }

    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    pub fn settings(&self) -> &StdioSettings {
        &self.settings
    }

    /// Children alive, pooled or in a session.
    pub fn live_children(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Started children waiting in the pool.
    pub fn pooled(&self) -> usize {
        self.pool.lock().warm.values().map(Vec::len).sum()
    }

    /// What the command speaks, once its first child found it (or the operator pinned it).
    pub fn era(&self) -> Option<Era> {
        self.era.get()
    }

    /// The command's era, found now by starting a child if no child found it yet (the
    /// child then waits in the warm pool).
    pub async fn find_era(self: &Arc<Self>) -> Result<Era, UpstreamError> {
        if let Some(era) = self.era() {
            return Ok(era);
        }
        let _finding = self.finding.lock().await;
        // A child the warm pool is starting finds it: wait for that one (so as not to
        // start a second child for nothing).
        let found = self.era_found.notified();
        tokio::pin!(found);
        // Registered before the checks below, so that a child finding it meanwhile wakes
        // it.
        found.as_mut().enable();
        let filling = self.pool.lock().filling.values().sum::<usize>() > 0;
        if let Some(era) = self.era() {
            return Ok(era);
        }
        if filling {
            let _ = tokio::time::timeout(self.settings.timeout, found).await;
            if let Some(era) = self.era() {
                return Ok(era);
            }
        }
        let identity = Identity::of(None, None);
        let warm = self.start(&identity).await?;
        let mut pool = self.pool.lock();
        if pool.identities.contains(&identity.key) {
            pool.warm.entry(identity.key).or_default().push(warm);
        } else {
            drop(pool);
            tokio::spawn(async move { warm.child.stop().await });
        }
        self.era()
            .ok_or_else(|| UpstreamError::Protocol("the stdio server's era is unknown".into()))
    }

    /// Whether children can be started (the last attempt worked).
    pub fn healthy(&self) -> bool {
        self.spawn_ok.load(Ordering::Acquire)
    }

    /// A child for a new session: a warm one of this identity if there is one, else a new
    /// one, started and initialized now.
    pub async fn open(
        self: &Arc<Self>,
        client_info: Option<&RawValue>,
        capabilities: Option<&RawValue>,
    ) -> Result<Opened, UpstreamError> {
        // A modern child learns no identity at start (every request carries its own):
        // every one is like every other.
        let identity = match self.era() {
            Some(Era::Modern) => Identity::of(None, None),
            _ => Identity::of(client_info, capabilities),
        };
        let warm = self.take_warm(&identity.key);
        self.clone().refill(identity.clone());
        let warm = match warm {
            Some(warm) => warm,
            None => self.start(&identity).await?,
        };
        // The child's tag is the upstream session id: a death reported by tag finds it.
        let key = warm.child.tag.clone();
        let negotiated = Negotiated::clone(&warm.negotiated);
        self.children.insert(key.clone(), warm);
        Ok(Opened {
            replica: super::LOCAL_REPLICA,
            session_id: Some(key),
            negotiated,
        })
    }

    /// Sends one message to the child behind `key`: a request gets its messages back,
    /// anything else is just delivered. A child that is gone has lost the session.
    pub async fn exchange(&self, key: &str, message: Bytes) -> Result<Answer, UpstreamError> {
        let child = self.child(key)?;
        let is_request = Envelope::parse(&message).is_ok_and(|e| e.kind == Kind::Request);
        if is_request {
            // A child has no headers: the trace context goes in the message's `_meta`.
            let (span, message) = ClientSpan::start_message(message, Peer::Pipe);
            let sent = child.request(&message).await;
            if let Some(span) = span {
                span.sent(
                    sent.as_ref()
                        .map(|_| ())
                        .map_err(|e| e as &dyn std::fmt::Display),
                );
            }
            Ok(Answer::channel(sent?))
        } else {
            child.send(message).await?;
            Ok(Answer::accepted())
        }
    }

    /// Messages of the child behind `key` that no request claims.
    pub fn listen(&self, key: &str) -> Result<Answer, UpstreamError> {
        Ok(Answer::channel(self.child(key)?.listen()?))
    }

    /// Stops the child behind `key` and waits until it is reaped.
    pub async fn terminate(&self, key: &str) {
        if let Some((_, warm)) = self.children.remove(key) {
            warm.child.stop().await;
        }
    }

    /// Forgets a child that died on its own (its process is already reaped).
    pub fn forget(&self, key: &str) {
        self.children.remove(key);
    }

    /// Names a session's child after the session (its stderr lines carry the name).
    pub fn label_session(&self, key: &str, label: String) {
        if let Some(warm) = self.children.get(key) {
            warm.child.set_label(label);
        }
    }

    /// Stops every child — in a session, pooled, or still starting — all at once, and
    /// returns when they are all gone.
    pub async fn shutdown(&self) {
        self.children.clear();
        {
            let mut pool = self.pool.lock();
            pool.warm.clear();
            pool.identities.clear();
        }
        let mut stopping = tokio::task::JoinSet::new();
        for entry in self.all.iter() {
            if let Some(child) = entry.value().upgrade() {
                stopping.spawn(async move { child.stop().await });
            }
        }
        self.all.clear();
        while stopping.join_next().await.is_some() {}
    }

    fn child(&self, key: &str) -> Result<Arc<Child>, UpstreamError> {
        let child = self
            .children
            .get(key)
            .map(|warm| warm.child.clone())
            .ok_or(UpstreamError::SessionGone)?;
        if child.is_alive() {
            Ok(child)
        } else {
            self.children.remove(key);
            Err(UpstreamError::SessionGone)
        }
    }

    fn take_warm(&self, identity: &str) -> Option<Warm> {
        let mut pool = self.pool.lock();
        pool.identities.retain(|i| i != identity);
        pool.identities.push_back(identity.to_owned());
        let warm = pool.warm.get_mut(identity)?;
        while let Some(candidate) = warm.pop() {
            if candidate.child.is_alive() {
                return Some(candidate);
            }
        }
        None
    }

    /// Tops the pool of `identity` up to `pool_size` in the background; drops the pools
    /// of identities beyond the few most recently used.
    fn refill(self: Arc<Self>, identity: Identity) {
        let size = self.settings.pool_size;
        if size == 0 {
            return;
        }
        let (missing, evicted) = {
            let mut pool = self.pool.lock();
            if !pool.identities.contains(&identity.key) {
                pool.identities.push_back(identity.key.clone());
            }
            let mut evicted = Vec::new();
            while pool.identities.len() > POOLED_IDENTITIES {
                if let Some(old) = pool.identities.pop_front() {
                    evicted.extend(pool.warm.remove(&old).unwrap_or_default());
                    pool.filling.remove(&old);
                }
            }
            let have = pool.warm.get(&identity.key).map_or(0, Vec::len);
            let filling = pool.filling.get(&identity.key).copied().unwrap_or(0);
            let missing = size.saturating_sub(have + filling);
            if missing > 0 {
                *pool.filling.entry(identity.key.clone()).or_default() += missing;
            }
            (missing, evicted)
        };
        for warm in evicted {
            tokio::spawn(async move { warm.child.stop().await });
        }
        for _ in 0..missing {
            let upstream = self.clone();
            let identity = identity.clone();
            tokio::spawn(async move {
                let started = upstream.start(&identity).await;
                let unwanted = {
                    let mut pool = upstream.pool.lock();
                    if let Some(filling) = pool.filling.get_mut(&identity.key) {
                        *filling = filling.saturating_sub(1);
                    }
                    match started {
                        Ok(warm) if pool.identities.contains(&identity.key) => {
                            pool.warm.entry(identity.key).or_default().push(warm);
                            None
                        }
                        Ok(warm) => Some(warm),
                        // After shutdown cleared the identities, a child killed while
                        // starting is expected, not worth a warning.
                        Err(e) if !pool.identities.contains(&identity.key) => {
                            tracing::debug!(error = %e, "a pooled stdio server was no longer wanted");
                            None
                        }
                        // Logged by `start_failed`.
                        Err(_) => None,
                    }
                };
                if let Some(warm) = unwanted {
                    warm.child.stop().await;
                }
            });
        }
    }

    /// Starts a child and readies it for a session: a legacy command's child runs the
    /// 2025-11-25 handshake over its stdio; a modern one's needs none (its first child
    /// asks `server/discover` and its answer stands for all). The first child of a
    /// command whose era is not known yet finds it (see [`ready`]). The place under
    /// `max_children` is taken before the process starts; a start given up half-way
    /// (the client left) stops the child instead of leaving it running.
    async fn start(&self, identity: &Identity) -> Result<Warm, UpstreamError> {
        let max = self.settings.max_children;
        let slot = LiveSlot::reserve(&self.live, max).ok_or_else(|| {
            UpstreamError::Exhausted(format!(
                "{max} stdio server process(es) are running, the configured maximum"
            ))
        })?;
        let tag = format!("child-{}", self.next_key.fetch_add(1, Ordering::Relaxed));
        let child = Child::spawn(
            &self.settings.command,
            &self.launcher,
            tag.clone(),
            self.settings.max_message_bytes,
            self.settings.stop_grace,
            self.deaths.clone(),
            slot,
        )
        .map_err(|e| self.start_failed(while_starting(e)))?;
        self.all.retain(|_, child| child.strong_count() > 0);
        self.all.insert(tag, Arc::downgrade(&child));
        let mut starting = StopUnlessKept(Some(child.clone()));
        let timeout = self.settings.timeout;
        let outcome = match tokio::time::timeout(timeout, self.ready(&child, identity)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(UpstreamError::Timeout(timeout)),
        };
        match outcome {
            Ok(negotiated) => {
                if !self.spawn_ok.swap(true, Ordering::AcqRel) {
                    tracing::info!(command = %self.label, "the stdio server starts again");
                }
                starting.keep();
                child.mark_started();
                Ok(Warm {
                    child,
                    negotiated: Arc::new(negotiated),
                })
            }
            Err(UpstreamError::Timeout(after)) => {
                let stderr = child.last_stderr();
                Err(
                    self.start_failed(while_starting(UpstreamError::Child(ChildError::new(
                        ChildFailure::NoInitializeAnswer { after, stderr },
                    )))),
                )
            }
            Err(e) => Err(self.start_failed(while_starting(e))),
        }
    }
}

impl StdioUpstream {
    /// Readies a started child in the command's era, found now when it is not known:
    /// `server/discover` first (2026-07-28 "stdio", backward compatibility), waiting at
    /// most [`DISCOVER_WAIT`]; a `DiscoverResult` or a modern refusal means modern, and
    /// anything else — an error in a legacy server's words, or silence — means legacy:
    /// the same child is initialized (legacy servers answer an unknown method and stay
    /// usable).
    async fn ready(&self, child: &Child, identity: &Identity) -> Result<Negotiated, UpstreamError> {
        let timeout = self.settings.timeout;
        match self.era() {
            Some(Era::Legacy | Era::Sse) => return handshake(child, identity, timeout).await,
            Some(Era::Modern) => {
                if let Some(known) = self.discovered.lock().clone() {
                    return Ok(Negotiated::clone(&known));
                }
            }
            None => {}
        }
        let wait = DISCOVER_WAIT.min(timeout);
        match discover(child, wait).await? {
            Some(found) => {
                let negotiated = found.unwrap_or_else(Negotiated::modern_unknown);
                *self.discovered.lock() = Some(Arc::new(negotiated.clone()));
                self.found(Era::Modern);
                Ok(negotiated)
            }
            None => {
                self.found(Era::Legacy);
                handshake(child, identity, timeout).await
            }
        }
    }

    /// Records the command's era, and wakes who waits for it.
    fn found(&self, era: Era) {
        if self.era.set(era) != Change::Same {
            tracing::info!(command = %self.label, era = era.name(), "the stdio server's era found");
        }
        self.era_found.notify_waiters();
    }

    /// Notes that a child could not be started: a warning when children started until
    /// now (once, not once per attempt: a broken command fails every refill of the
    /// pool), a debug line while they keep failing.
    fn start_failed(&self, error: UpstreamError) -> UpstreamError {
        self.era_found.notify_waiters();
        if self.spawn_ok.swap(false, Ordering::AcqRel) {
            tracing::warn!(command = %self.label, error = %error, "the stdio server failed to start");
        } else {
            tracing::debug!(command = %self.label, error = %error, "the stdio server failed to start again");
        }
        error
    }
}

/// Stops a child when dropped, unless kept: a start abandoned half-way (an error, a
/// timeout, or the caller's future dropped) leaves no process behind.
struct StopUnlessKept(Option<Arc<Child>>);

impl StopUnlessKept {
    fn keep(&mut self) {
        self.0 = None;
    }
}

impl Drop for StopUnlessKept {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            tokio::spawn(async move { child.stop().await });
        }
    }
}

/// A failure while a child was being started, in the child's terms.
fn while_starting(error: UpstreamError) -> UpstreamError {
    match error {
        UpstreamError::Child(e) => UpstreamError::Child(e.while_starting()),
        UpstreamError::InitializeFailed { code, message, .. } => UpstreamError::Child(
            ChildError::new(ChildFailure::InitializeFailed { code, message }).while_starting(),
        ),
        other => other,
    }
}

/// How long the first child of a command may take to answer `server/discover` before its
/// silence counts as a legacy server's.
pub const DISCOVER_WAIT: Duration = Duration::from_secs(3);

/// Asks a child `server/discover`: `Some` when it speaks the modern protocol (with what it
/// said, when it said it in a `DiscoverResult`), `None` when it does not (another error,
/// or no answer within `wait`).
async fn discover(
    child: &Child,
    wait: Duration,
) -> Result<Option<Option<Negotiated>>, UpstreamError> {
    let mut answer = Answer::channel(child.request(&discover::request_body()).await?);
    let Ok(Ok(message)) = tokio::time::timeout(
        wait,
        answer
            .messages
            .response_to(discover::REQUEST_ID.as_bytes(), wait),
    )
    .await
    else {
        return Ok(None);
    };
    let Ok(envelope) = Envelope::parse(&message) else {
        return Ok(None);
    };
    if let Some(result) = envelope.result.filter(|r| discover::is_discover_result(r)) {
        return Ok(Some(discover::parse_result(result).ok()));
    }
    #[derive(serde::Deserialize)]
    struct Parts<'a> {
        code: i64,
        #[serde(borrow, default)]
        data: Option<&'a RawValue>,
    }
    let modern = envelope
        .error
        .and_then(|e| serde_json::from_str::<Parts<'_>>(e.get()).ok())
        .is_some_and(|e| discover::is_modern_error(e.code, e.data));
    Ok(modern.then_some(None))
}

/// `initialize`, then `notifications/initialized`.
async fn handshake(
    child: &Child,
    identity: &Identity,
    timeout: Duration,
) -> Result<Negotiated, UpstreamError> {
    let body = initialize::request_body(
        identity.client_info.as_deref(),
        identity.capabilities.as_deref(),
    );
    let mut answer = Answer::channel(child.request(&body).await?);
    let negotiated = read_result(&mut answer.messages, answer.status, timeout)
        .await
        .map_err(|e| match e {
            // The channel closed with no word of why: the child's stdout ended.
            UpstreamError::Protocol(why) if why.contains("without the response") => {
                UpstreamError::Child(ChildError::new(ChildFailure::ClosedStdout {
                    stderr: child.last_stderr(),
                }))
            }
            other => other,
        })?;
    child
        .send(Bytes::from_static(initialize::INITIALIZED))
        .await?;
    Ok(negotiated)
}
