//! stdio upstreams: every upstream session is its own child process (the Agent Client
//! Protocol's session setup describes an MCP server as `command` + `args` + `env`, plus
//! a working directory).
//!
//! Start-up latency is hidden by a warm pool: children started and initialized ahead of
//! time, kept per client identity (clientInfo + capabilities, which a server learns only
//! at `initialize`), refilled in the background after each use. `max_children` bounds
//! every child alive, pooled or in a session.

mod child;
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

use self::child::{Child, LiveSlot};
use self::launch::Launcher;
use super::Opened;
use super::answer::Answer;
use super::error::{ChildError, ChildFailure, UpstreamError};
use super::handshake::read_result;
use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::initialize::{self, Negotiated};

/// How to start the server (the Agent Client Protocol's `command`, `args`, `env`, plus
/// `cwd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
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
        let identity = Identity::of(client_info, capabilities);
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
            Ok(Answer::channel(child.request(&message).await?))
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

    /// Starts a child and runs the 2025-11-25 handshake over its stdio. The place under
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
        let outcome =
            match tokio::time::timeout(timeout, handshake(&child, identity, timeout)).await {
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
    /// Notes that a child could not be started: a warning when children started until
    /// now (once, not once per attempt: a broken command fails every refill of the
    /// pool), a debug line while they keep failing.
    fn start_failed(&self, error: UpstreamError) -> UpstreamError {
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
        UpstreamError::InitializeFailed { code, message } => UpstreamError::Child(
            ChildError::new(ChildFailure::InitializeFailed { code, message }).while_starting(),
        ),
        other => other,
    }
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
