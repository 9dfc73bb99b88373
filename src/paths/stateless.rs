//! The stateless path (MCP 2026-07-28): clients with no `initialize` and no session,
//! served by a legacy server.
//!
//! - `server/discover` is answered from what the upstream said at `initialize` (a pooled
//!   upstream session's, whatever the affinity: no call runs on it).
//! - Every other request is checked (`stateless::validate`), its 2026 `_meta` is taken
//!   off, and it runs on an upstream session opened with the client's capabilities —
//!   which one is the affinity's choice (`affinity`: shared pool, one of its own, pinned
//!   to a conversation, or the session behind a handle, `handles`). A task per call
//!   (`driver`) holds that session until the call's last round and reads the upstream's
//!   answer message by message: progress and (level-filtered) log notifications go to the
//!   client, the result gets `resultType` and `serverInfo`, and the upstream's own
//!   requests (sampling, elicitation, roots) end the client's call with an
//!   `input_required` result while the task keeps the upstream call waiting for the retry.
//! - `subscriptions/listen` opens a dedicated upstream session and its GET stream.

mod affinity;
mod driver;
mod handles;
mod in_session;
mod listen;
pub(crate) use listen::MAX_RESOURCE_SUBSCRIPTIONS;
mod tasks;
mod waiting;

pub use affinity::{Affinity, Fallback};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use opentelemetry::context::FutureExt as _;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, oneshot};

use self::affinity::{CallSession, CallTarget};
use self::driver::{ListWithHandles, Resume};
use self::handles::{HandleCall, Intercept};
use self::waiting::Waiting;
use super::cluster::{Cluster, Forward, Whereabouts};
use super::headers;
use super::relay::{self, Relay};
use super::session::{SessionPath, raw_bytes, session_stamp, upstream_error};
use crate::config::StatelessConfig;
use crate::error::ProxyError;
use crate::fairness::{Now, Place};
use crate::jsonrpc::{Kind, RawObject, raw_str, write};
use crate::mcp::Method;
use crate::mcp::caller::{Caller, CallerKey};
use crate::mcp::initialize::Negotiated;
use crate::mcp::tools::TaskSupport;
use crate::metrics::Metrics;
use crate::response::{self, ProxyBody};
use crate::rewrite::handles::HandleTools;
use crate::rewrite::stateless::{bound_params, discover_result, to_upstream};
use crate::route::Message;
use crate::session::now_millis;
use crate::stateless::request_state::StateBinding;
use crate::stateless::{Context, Parked, RequestStateError, Sealer, validate};
use crate::upstream::{Era, Messages, Pins, Pool, PoolSettings, Upstream, UpstreamError};

/// The pool re-initializes its upstream sessions at least this often, so a discovery
/// result is never older than this plus its `ttlMs` (an upstream redeployed with new
/// capabilities is seen within minutes).
pub const POOLED_SESSION_MAX_AGE: Duration = Duration::from_secs(300);

/// After an upstream request, how long to wait for more before asking the client.
const GATHER: Duration = Duration::from_millis(50);
/// The longest the upstream's requests are gathered, from the first, however often more
/// come.
const MAX_GATHER: Duration = Duration::from_millis(250);

/// See the module documentation.
#[derive(Debug)]
pub struct StatelessPath {
    upstream: Upstream,
    affinity: Affinity,
    pool: Arc<Pool>,
    /// Pinned sessions (`affinity = "pinned"`; empty otherwise).
    pins: Arc<Pins>,
    /// A modern stdio server's children, one per caller (empty for any other upstream).
    children: Arc<Pins>,
    /// Data-layer sessions, which session handles are.
    session_path: Arc<SessionPath>,
    /// The server's identity as last seen, for results the proxy answers itself.
    server_info: Mutex<Option<Box<RawValue>>>,
    pool_idle_ttl: Duration,
    sealer: Sealer,
    parked: Parked<oneshot::Sender<Resume>>,
    /// The bounds on calls waiting for their clients' input (and on running tasks).
    waiting: Arc<Waiting>,
    /// The tasks the proxy runs for the upstream's tool calls.
    tasks: tasks::Tasks,
    /// Which calls may become tasks.
    task_rules: TaskRules,
    /// One permit per open `subscriptions/listen` stream.
    listens: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    sse_idle_timeout: Duration,
    cluster: Arc<Cluster>,
    /// The endpoint path serving the upstream (where a retry goes on its owner).
    path: String,
}

impl StatelessPath {
    /// `keys` seal `requestState` (the first seals, all open; domain-separated from the
    /// session `state` they also seal); `session_path` (the same upstream's) opens, finds
    /// and ends the sessions behind handles; upstream sessions let go of (pooled, pinned,
    /// isolated, subscriptions) end themselves through the upstream's endings.
    pub fn new(
        upstream: Upstream,
        metrics: Arc<Metrics>,
        keys: &[Vec<u8>],
        session_path: Arc<SessionPath>,
        settings: &StatelessConfig,
        sse_idle_timeout: Duration,
        cluster: Arc<Cluster>,
    ) -> Self {
        let path = session_path.path().to_owned();
        let tasks = tasks::Tasks::new(session_path.name().clone(), keys, settings.task_ttl);
        let pin_limits = match &settings.affinity {
            Affinity::Pinned { limits, .. } => limits.clone(),
            _ => crate::upstream::PinSettings {
                max_pinned: 0,
                idle_ttl: settings.pool_idle_ttl,
            },
        };
        let pool = Pool::new(
            upstream.clone(),
            PoolSettings {
                max_open: settings.max_pooled,
                max_idle_per_key: settings.max_pooled,
                idle_ttl: settings.pool_idle_ttl,
                max_age: POOLED_SESSION_MAX_AGE,
            },
        );
        StatelessPath {
            pins: Pins::new(upstream.clone(), pin_limits),
            children: Pins::new(
                upstream.clone(),
                crate::upstream::PinSettings {
                    max_pinned: settings.max_pooled,
                    idle_ttl: settings.pool_idle_ttl,
                },
            ),
            upstream,
            affinity: settings.affinity.clone(),
            pool,
            session_path,
            server_info: Mutex::new(None),
            pool_idle_ttl: settings.pool_idle_ttl,
            sealer: Sealer::with_keys(keys, settings.request_state_ttl),
            parked: Parked::default(),
            waiting: Waiting::new(settings.max_waiting_per_caller, settings.max_pooled),
            tasks,
            task_rules: TaskRules {
                enabled: settings.tasks,
                tools: settings.task_tools.clone(),
                after: settings.task_after,
            },
            listens: Arc::new(Semaphore::new(settings.max_listens)),
            metrics,
            sse_idle_timeout,
            cluster,
            path,
        }
    }

    /// The pool of upstream sessions.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The affinity calls are served with.
    pub fn affinity(&self) -> &Affinity {
        &self.affinity
    }

    /// Pinned sessions kept now.
    pub fn pinned(&self) -> usize {
        self.pins.len()
    }

    /// The shortest idle lifetime of what `reap` ends: the reaper looks this often (or
    /// a few times as often).
    pub fn shortest_idle_ttl(&self) -> Duration {
        match &self.affinity {
            Affinity::Pinned { limits, .. } => self.pool_idle_ttl.min(limits.idle_ttl),
            _ => self.pool_idle_ttl,
        }
    }

    /// Ends pooled and pinned upstream sessions idle too long (called periodically).
    pub fn reap(&self) {
        self.tasks.sweep();
        self.pool.reap();
        self.pins.reap();
        self.children.reap();
    }

    /// Ends every idle pooled session and every pinned one (shutdown).
    pub async fn close(&self) {
        self.pool.close().await;
        self.pins.close().await;
        self.children.close().await;
    }

    /// Serves one stateless message.
    pub async fn handle(
        self: &Arc<Self>,
        message: &Message<'_, '_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let envelope = message.envelope;
        // A stdio server whose era no child has found yet is asked now (its first child
        // then waits for a session); an HTTP one's was found before classification.
        let era = match self.upstream.era() {
            Some(era) => era,
            None => self.upstream.find_era().await.map_err(|e| self.error(e))?,
        };
        if era == Era::Modern {
            return self.native(message).await;
        }
        match envelope.kind {
            // Over HTTP a stateless client cancels by closing the stream; a notification
            // has nothing to reach.
            Kind::Notification => return Ok(response::status(StatusCode::ACCEPTED)),
            Kind::Response => return Err(ProxyError::StatelessResponse),
            Kind::Request => {}
        }
        let context = validate(message.headers, envelope.method(), message.params())
            .map_err(ProxyError::Stateless)?;
        if let Some(params) = message.params() {
            params.check_typed_meta()?;
        }
        let Some(id) = envelope.id else {
            return Err(ProxyError::StatelessResponse);
        };
        let id = raw_bytes(message.body, id);
        let forwarded = headers::to_legacy_for_stateless(message.headers);
        match message.method() {
            Some(Method::ServerDiscover) => {
                self.discover(&context, message.caller, &id, &forwarded)
                    .await
            }
            Some(Method::SubscriptionsListen) => {
                listen::open(self, message, &context, id, &forwarded).await
            }
            Some(Method::TasksGet | Method::TasksUpdate | Method::TasksCancel) => {
                Ok(match self.task_answer(message, &context).await? {
                    TaskAnswer::Here(result) => {
                        response::json(StatusCode::OK, write::result(&id, &result))
                    }
                    TaskAnswer::Forwarded(response) => *response,
                })
            }
            _ => {
                self.call(message, &context, id, &forwarded, Scope::Stateless)
                    .await
            }
        }
    }

    /// A 2026-07-28 message for a modern server the proxy runs (a stdio command; a modern
    /// HTTP server takes such messages as they are, without this path): sent as it came
    /// to the child held for its caller — one per caller, as a client would start its own
    /// server, so that the retry of an `input_required` round reaches the process that
    /// asked — and its answer passed back as it is. The server validates the message
    /// itself.
    async fn native(
        self: &Arc<Self>,
        message: &Message<'_, '_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let forwarded = headers::to_upstream_in_session(message.headers);
        let peer = message
            .caller_key()
            .map(|key| format!("{key:?}"))
            .unwrap_or_default();
        let key = format!("{}|{peer}", message.caller.hex());
        let place = if self.children.holds(&key) {
            None
        } else {
            Some(self.place_for(message.caller_key())?)
        };
        let child = self
            .children
            .checkout(&key, None, &forwarded, place)
            .await
            .map_err(|e| self.error(e))?;
        let answer = self
            .upstream
            .exchange(child.addr(), message.body.clone(), forwarded)
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                if matches!(e, UpstreamError::SessionGone) {
                    child.lost();
                }
                return Err(self.error(e));
            }
        };
        let request = relay::Request {
            id: message.request_id().map(|id| raw_bytes(message.body, id)),
            accepts: message.accepts,
            stamp: None,
            learn: None,
        };
        let relay = Relay {
            upstream: &self.upstream,
            metrics: &self.metrics,
            idle_timeout: self.sse_idle_timeout,
        };
        relay.relay(answer, request).await
    }

    /// `server/discover`, from the upstream's `InitializeResult` as a pooled session
    /// holds it, whatever the affinity: no call runs on it.
    async fn discover(
        &self,
        context: &Context<'_>,
        caller: Caller,
        id: &[u8],
        forwarded: &HeaderMap,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let negotiated = {
            let checkout = self
                .pool
                .checkout(Some(context.capabilities), caller, forwarded)
                .await
                .map_err(|e| self.error(e))?;
            checkout.negotiated().clone()
        };
        self.saw(&negotiated);
        Ok(response::json(
            StatusCode::OK,
            write::result(id, &discover_result(&negotiated, self.task_rules.enabled)),
        ))
    }

    /// A tool call, prompt, read, list or completion: a new call on the upstream session
    /// the affinity chooses (in handles mode, the open and close tools are answered
    /// here) or, in a data-layer session, on the session's; or (with a `requestState`)
    /// the next round of a parked one.
    async fn call(
        self: &Arc<Self>,
        message: &Message<'_, '_>,
        context: &Context<'_>,
        id: Bytes,
        forwarded: &HeaderMap,
        scope: Scope<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let method = message.envelope.method();
        let params = message.params();
        let provided = input_responses(params)?;
        let caller = message.caller;
        let mut bound = bound_params(params);
        // A round asked in a session is answered in that session only.
        let log_level = match scope {
            Scope::Stateless => context.log_level,
            Scope::Session { session, .. } => {
                bound.push_str(" in session ");
                bound.push_str(&session.id);
                // The session's own level (`logging/setLevel`) is the upstream's filter
                // already, unless the request names one.
                context
                    .log_level
                    .or(Some(crate::mcp::logging::LogLevel::Debug))
            }
        };
        let binding = StateBinding {
            caller,
            method,
            params: &bound,
        };
        let (first_tx, first_rx) = oneshot::channel();
        // In a session, the answer carries the session as this use renewed it.
        let mut stamp = None;
        let request_state = params
            .and_then(|p| p.member("requestState"))
            .map(|raw| raw_str(raw).map(|s| s.into_owned()).unwrap_or_default());
        if let Some(token) = request_state {
            let (park, owner) = self.sealer.open(&token, binding)?;
            match self.cluster.whereabouts(Some(&owner)) {
                Whereabouts::Here => {}
                // The call waits on another replica: the retry goes there, as it came.
                Whereabouts::There(owner) => return self.to_replica(owner, message).await,
                // This replica restarted since the call was parked: it is gone.
                Whereabouts::Gone => return Err(RequestStateError::Unknown.into()),
            }
            if let Scope::Session { session, .. } = scope {
                let lease = self
                    .session_path
                    .lease_as(&session.id, session.state.as_deref(), caller)
                    .await?;
                stamp = Some(session_stamp(&session.id, &lease, id.clone()));
            }
            let resume = self.parked.take(&park).ok_or(RequestStateError::Unknown)?;
            let next = Resume {
                client_id: id,
                provided,
                log_level,
                first: first_tx,
            };
            if resume.send(next).is_err() {
                return Err(RequestStateError::Unknown.into());
            }
        } else {
            let who = message.caller;
            let (task_after, mut target) = match scope {
                Scope::Stateless => (
                    self.task_plan(message, context, forwarded).await?,
                    self.affinity.target(message.headers, who),
                ),
                Scope::Session {
                    session,
                    task_after,
                } => (
                    task_after,
                    CallTarget::Session {
                        id: session.id.to_string(),
                        state: session.state.as_deref().map(str::to_owned),
                        repeat: self.session_path.safe_to_repeat(message),
                    },
                ),
            };
            let mut stripped = None;
            let mut list = None;
            if let (
                Affinity::Handles {
                    tools,
                    max_per_caller,
                    ..
                },
                Scope::Stateless,
            ) = (&self.affinity, scope)
            {
                let seen = handles::intercept(HandleCall {
                    path: self,
                    message,
                    context,
                    id: &id,
                    forwarded,
                    tools,
                    max_per_caller: *max_per_caller,
                })
                .await?;
                match seen {
                    Intercept::Answered(response) => return Ok(*response),
                    Intercept::Handle(handle, body) => {
                        // A handle whose stdio server another replica runs is served
                        // there: the call goes on as it came.
                        if let Some(forwarded) =
                            self.session_path.message_to_owner(&handle, message).await
                        {
                            return forwarded;
                        }
                        target = CallTarget::Handle(handle);
                        stripped = body;
                    }
                    Intercept::ListTools { first_page } => {
                        list = Some(ListWithHandles {
                            tools: tools.clone(),
                            first_page,
                            idle: self.idle_text(),
                        })
                    }
                    Intercept::Nothing(body) => stripped = body,
                }
            }
            let upstream_body = match (stripped, message.payload) {
                (Some(body), _) => Bytes::from(body),
                (None, Some((raw, payload))) => to_upstream(message.body, raw, payload)
                    .map(Bytes::from)
                    .unwrap_or_else(|| message.body.clone()),
                (None, None) => message.body.clone(),
            };
            let started = self
                .start(
                    context,
                    (&id, upstream_body),
                    forwarded,
                    &target,
                    (who, message.caller_key()),
                )
                .await;
            let (session, (status, messages)) = match (started, &target) {
                (Ok(started), _) => started,
                (Err(ProxyError::SessionNotFound { .. }), CallTarget::Handle(handle)) => {
                    return Ok(handles::unknown(self, &id, handle));
                }
                (Err(e), _) => return Err(e),
            };
            if let (CallSession::Handle(lease), CallTarget::Session { id: session_id, .. }) =
                (&session, &target)
            {
                stamp = Some(session_stamp(session_id, lease, id.clone()));
            }
            let call = driver::StatelessCall {
                path: self.clone(),
                session,
                messages,
                status,
                first_id: id.clone(),
                client_id: id,
                method: method.to_owned(),
                capabilities: context.capabilities.to_owned(),
                log_level,
                provided: provided.into_iter().collect(),
                caller,
                caller_key: message.caller_key(),
                bound,
                uri: (message.method() == Some(Method::ResourcesRead))
                    .then(|| params.and_then(|p| p.member("uri")).and_then(raw_str))
                    .flatten()
                    .map(|uri| uri.into_owned()),
                forwarded: forwarded.clone(),
                list,
                task_after,
            };
            // The call's later rounds (and a task's whole life) are the request's trace.
            tokio::spawn(driver::run(call, first_tx).with_current_context());
        }
        let first = first_rx.await.map_err(|_| {
            self.error(UpstreamError::Unreachable(
                "the upstream call ended without an answer".into(),
            ))
        })?;
        let relay = Relay {
            upstream: &self.upstream,
            metrics: &self.metrics,
            idle_timeout: self.sse_idle_timeout,
        };
        Ok(first.into_response(relay, stamp))
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel` (2026-07-28 tasks extension): for a
    /// client that declared the extension, on a task of its own — held here, or on the
    /// replica its id names (the request goes there as it came). A task whose replica
    /// stopped is answered from the shared store if it ended and was kept there, and
    /// otherwise as `failed`, saying its replica stopped: never a hang, never "unknown"
    /// for a task that existed.
    async fn task_answer(
        &self,
        message: &Message<'_, '_>,
        context: &Context<'_>,
    ) -> Result<TaskAnswer, ProxyError> {
        let method = message.method().unwrap_or(Method::TasksGet);
        if !declares_tasks(context.capabilities) {
            return Err(ProxyError::MissingTasksExtension(method.as_str()));
        }
        let params = message.params();
        // The headers were checked: `Mcp-Name` equals a string `params.taskId`.
        let task_id = params
            .and_then(|p| p.member("taskId"))
            .and_then(raw_str)
            .map(|s| s.into_owned())
            .unwrap_or_default();
        let located = self.tasks.locate(&task_id, message.caller)?;
        let held = match self.cluster.whereabouts(Some(&located.owner)) {
            Whereabouts::Here => Some(self.tasks.get(&located.key, &task_id)?),
            Whereabouts::There(owner) => match self.to_replica(owner, message).await {
                Err(ProxyError::OwnerUnreachable { down: true, .. }) => None,
                answered => return answered.map(|r| TaskAnswer::Forwarded(Box::new(r))),
            },
            // This replica restarted since: the task was lost with it, unless it ended.
            Whereabouts::Gone => None,
        };
        let ack = || crate::rewrite::tasks::ACK.to_vec();
        let result = match (held, method) {
            (Some(task), Method::TasksGet) => task.detailed(),
            (Some(task), Method::TasksUpdate) => {
                task.update(input_responses(params)?);
                ack()
            }
            (Some(task), _) => {
                task.cancel();
                ack()
            }
            (None, Method::TasksGet) => self.unheld_task(&located, &task_id).await?,
            // An ended task takes no answers (unknown keys are ignored) and acknowledges
            // a cancel.
            (None, Method::TasksUpdate) => {
                input_responses(params)?;
                ack()
            }
            (None, _) => ack(),
        };
        Ok(TaskAnswer::Here(result))
    }

    /// A task no live replica holds: as its replica kept it in the shared store when it
    /// ended, or `failed` because its replica stopped first.
    async fn unheld_task(
        &self,
        located: &tasks::Located,
        task_id: &str,
    ) -> Result<Vec<u8>, ProxyError> {
        if let Some(redis) = self.session_path.sessions().store().redis() {
            let kept = redis
                .kept_task(self.session_path.name(), &located.key_hex())
                .await
                .map_err(|source| ProxyError::Store {
                    store: "redis",
                    source,
                })?;
            if let Some(view) = kept {
                return Ok(view);
            }
        }
        Ok(self.tasks.orphaned(task_id, located.created_at))
    }

    /// Writes an ended task to the shared store (Redis), so that every replica answers
    /// it until it is forgotten, also once this one is gone.
    async fn keep_ended(&self, task: &tasks::Task) {
        if !task.is_terminal() {
            return;
        }
        let Some(redis) = self.session_path.sessions().store().redis() else {
            return;
        };
        let kept = redis
            .keep_task(
                self.session_path.name(),
                &task.key_hex(),
                &task.detailed(),
                task.expires_at(),
            )
            .await;
        if let Err(e) = kept {
            tracing::warn!(error = %e, "an ended task was not written to the session store: only this replica answers it");
        }
    }

    /// `message` as it came, to the replica `owner` that holds what it names (a parked
    /// call, a task).
    async fn to_replica(
        &self,
        owner: &str,
        message: &Message<'_, '_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        self.cluster
            .forward(Forward {
                owner,
                path: &self.path,
                method: http::Method::POST,
                headers: message.headers,
                body: message.body.clone(),
                session_id: "",
                caller: message.caller,
                client: message.peer,
            })
            .await
    }

    /// For a `tools/call`: checks the `Mcp-Param-*` headers its tool declared (as a
    /// 2026-07-28 server would), refuses a tool that runs only as a task to a client
    /// without the tasks extension, and says after how long the call becomes a task
    /// (`None`: never). What the tool declared comes from the upstream's `tools/list`,
    /// asked for when the tool is not known yet.
    async fn task_plan(
        &self,
        message: &Message<'_, '_>,
        context: &Context<'_>,
        forwarded: &HeaderMap,
    ) -> Result<Option<Duration>, ProxyError> {
        if message.method() != Some(Method::ToolsCall) {
            return Ok(None);
        }
        let params = message.params();
        let Some(name) = params.and_then(|p| p.member("name")).and_then(raw_str) else {
            return Ok(None);
        };
        let hints = self.session_path.tool_hints();
        let asks_tasks = declares_tasks(context.capabilities);
        // Only a client that may get a task, or sends `Mcp-Param-*` headers, makes the
        // proxy list the tools for a tool it does not know (a `tools/list` passing
        // through teaches the same).
        let wanted = (asks_tasks && self.task_rules.enabled)
            || message
                .headers
                .keys()
                .any(crate::mcp::headers::is_param_header);
        if wanted
            && hints.learned_at().is_none_or(|at| {
                !hints.knows(&name)
                    && now_millis().saturating_sub(at) > RELIST_AFTER.as_millis() as u64
            })
        {
            self.learn_tools(context, message.caller, forwarded).await;
        }
        if let Some(declared) = hints.declared_headers(&name) {
            let arguments = params
                .and_then(|p| p.member("arguments"))
                .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
                .unwrap_or(serde_json::Value::Null);
            crate::mcp::headers::check_param_headers(&declared, &arguments, message.headers)
                .map_err(|why| {
                    ProxyError::Stateless(crate::stateless::Reject::HeaderMismatch(why))
                })?;
        }
        let rules = &self.task_rules;
        if !rules.enabled {
            return Ok(None);
        }
        let support = hints.task_support(&name);
        if support == Some(TaskSupport::Required) && !asks_tasks {
            return Err(ProxyError::MissingTasksExtension("this tool"));
        }
        if !asks_tasks {
            return Ok(None);
        }
        if support.is_some() || rules.tools.iter().any(|tool| *tool == name) {
            return Ok(Some(TASK_DECISION));
        }
        Ok(rules.after)
    }

    /// Learns what the upstream's tools declare from its `tools/list` (on a pooled
    /// session); a failure leaves what was known.
    async fn learn_tools(&self, context: &Context<'_>, caller: Caller, forwarded: &HeaderMap) {
        let checkout = self
            .pool
            .checkout(Some(context.capabilities), caller, forwarded)
            .await;
        let Ok(mut checkout) = checkout else {
            return;
        };
        // Dropped mid-listing (the client left), the session is not given back with an
        // answer still on its way.
        checkout.exchanging(true);
        super::framed::list_tools(
            &self.upstream,
            self.session_path.tool_hints(),
            checkout.addr(),
            forwarded,
            None,
        )
        .await;
        checkout.exchanging(false);
    }

    /// Sends the request on the upstream session `target` names. A session the upstream
    /// has lost (it restarted) is replaced and the request tried once more — a pooled,
    /// isolated or pinned one: the client named no session, so it has none to lose. A
    /// handle's is forgotten, and the call hears that the handle does not exist
    /// (-32043 here; the caller makes it a tool result).
    async fn start(
        &self,
        context: &Context<'_>,
        (id, body): (&[u8], Bytes),
        forwarded: &HeaderMap,
        target: &CallTarget,
        caller: (Caller, Option<CallerKey>),
    ) -> Result<(CallSession, (StatusCode, Messages)), ProxyError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut session = self.session_for(target, context, forwarded, caller).await?;
            self.saw(session.negotiated());
            session.exchanging(true);
            let exchanged = self
                .upstream
                .exchange(session.addr(), body.clone(), forwarded.clone())
                .await;
            session.exchanging(false);
            if let Ok(answer) = &exchanged
                && let Some(problem) = answer.unusable_for(id)
            {
                // What else the upstream session holds is unknown: it is not reused.
                session.discard();
                return Err(relay::unusable(&self.upstream, answer.status, problem, id));
            }
            match (exchanged, &mut session) {
                (Ok(answer), _) => return Ok((session, (answer.status, answer.messages))),
                (Err(UpstreamError::SessionGone), CallSession::Handle(lease)) => match target {
                    CallTarget::Handle(handle) => {
                        self.session_path.forget_lost(handle).await;
                        return Err(ProxyError::SessionNotFound {
                            session_id: handle.clone(),
                        });
                    }
                    // As the session path does: the session is forgotten or (by the
                    // upstream's policy) given a new upstream session, and a call safe
                    // to repeat is sent there once more.
                    CallTarget::Session { id, repeat, .. } => {
                        self.session_path.lost(id, &lease.record, forwarded).await?;
                        if !*repeat || attempt >= 2 {
                            return Err(ProxyError::NotRetried {
                                upstream: self.upstream.label().to_string(),
                                session_id: id.clone(),
                            });
                        }
                    }
                    _ => return Err(self.error(UpstreamError::SessionGone)),
                },
                (Err(UpstreamError::SessionGone), CallSession::Pinned(pinned)) if attempt < 2 => {
                    pinned.lost()
                }
                (Err(UpstreamError::SessionGone), CallSession::Pooled(checkout)) if attempt < 2 => {
                    checkout.discard()
                }
                (Err(e), session) => {
                    session.discard();
                    if let (UpstreamError::SessionGone, CallSession::Pinned(pinned)) =
                        (&e, &*session)
                    {
                        pinned.lost();
                    }
                    return Err(self.error(e));
                }
            }
        }
    }

    /// The upstream session a new call runs in. `caller`: its credentials (which a
    /// handle is bound to) and whom the per-caller limits count a new pin against.
    async fn session_for(
        &self,
        target: &CallTarget,
        context: &Context<'_>,
        forwarded: &HeaderMap,
        (caller, key): (Caller, Option<CallerKey>),
    ) -> Result<CallSession, ProxyError> {
        let capabilities = Some(context.capabilities);
        let session = match target {
            CallTarget::Pooled => self
                .pool
                .checkout(capabilities, caller, forwarded)
                .await
                .map(CallSession::Pooled),
            CallTarget::Isolated => self
                .pool
                .checkout_alone(capabilities, forwarded, context.log_level.is_some())
                .await
                .map(CallSession::Pooled),
            CallTarget::Pin(pin) => {
                // A new pin opens an upstream session for the caller: counted like a
                // data-layer session (held until the pin ends).
                let place = if self.pins.holds(pin) {
                    None
                } else {
                    Some(self.place_for(key)?)
                };
                self.pins
                    .checkout(pin, capabilities, forwarded, place)
                    .await
                    .map(CallSession::Pinned)
            }
            CallTarget::Handle(handle) => {
                return self
                    .session_path
                    .lease_as(handle, None, caller)
                    .await
                    .map(CallSession::Handle);
            }
            CallTarget::Session { id, state, .. } => {
                return self
                    .session_path
                    .lease_as(id, state.as_deref(), caller)
                    .await
                    .map(CallSession::Handle);
            }
        };
        session.map_err(|e| self.error(e))
    }

    /// A place under the per-caller limits for an upstream session kept for `key`.
    fn place_for(&self, key: Option<CallerKey>) -> Result<Place, ProxyError> {
        let fairness = self.session_path.sessions().fairness();
        fairness
            .take(key, None, Now::current(now_millis()))
            .map_err(|refused| {
                self.metrics.caller_refused(&refused);
                tracing::info!(
                    limit = refused.key(),
                    max = refused.max(),
                    "pinned session refused: over a per-caller limit"
                );
                ProxyError::CallerLimit(refused)
            })
    }

    /// Remembers the server's identity, for the results the proxy answers itself.
    fn saw(&self, negotiated: &Negotiated) {
        let mut last = self.server_info.lock();
        if last.as_deref().map(RawValue::get) != Some(negotiated.server_info.get()) {
            *last = Some(negotiated.server_info.clone());
        }
    }

    fn last_server_info(&self) -> Option<Box<RawValue>> {
        self.server_info.lock().clone()
    }

    /// The handle tools' names, in handles mode.
    fn handle_tools(&self) -> Option<&HandleTools> {
        match &self.affinity {
            Affinity::Handles { tools, .. } => Some(tools),
            _ => None,
        }
    }

    /// How long an unused session (a handle) lives, in words.
    fn idle_text(&self) -> String {
        humantime::format_duration(self.session_path.sessions().settings().idle_ttl).to_string()
    }

    fn error(&self, source: UpstreamError) -> ProxyError {
        upstream_error(&self.upstream, source)
    }
}

/// `inputResponses`: an object whose values are objects (SEP-2322). Returns the entries.
fn input_responses(
    params: Option<&crate::mcp::meta::Payload<'_>>,
) -> Result<Vec<(String, Box<RawValue>)>, ProxyError> {
    let Some(raw) = params.and_then(|p| p.member("inputResponses")) else {
        return Ok(Vec::new());
    };
    let object = RawObject::parse(raw).ok_or(ProxyError::InvalidInputResponses(
        "inputResponses must be an object mapping each input request's key to its response",
    ))?;
    let mut out = Vec::new();
    for (key, value) in object.entries() {
        if !value.get().starts_with('{') {
            return Err(ProxyError::InvalidInputResponses(
                "each inputResponses entry must be an object (the response to that input request)",
            ));
        }
        out.push((key.to_string(), value.to_owned()));
    }
    Ok(out)
}

/// Whether `capabilities` (a client's, raw) declare the tasks extension.
fn declares_tasks(capabilities: &RawValue) -> bool {
    RawObject::parse(capabilities)
        .and_then(|caps| caps.get("extensions"))
        .and_then(RawObject::parse)
        .is_some_and(|extensions| extensions.get(crate::mcp::meta::TASKS_EXTENSION).is_some())
}

/// The answer to a request on a task.
enum TaskAnswer {
    /// This replica's: the result.
    Here(Vec<u8>),
    /// The replica holding the task answered (the request went there as it came).
    Forwarded(Box<Response<ProxyBody>>),
}

/// Whose call a new one is.
#[derive(Debug, Clone, Copy)]
enum Scope<'s> {
    /// A stateless client's: the affinity chooses its upstream session, and whether it
    /// may become a task is decided with it.
    Stateless,
    /// A 2026-07-28 client's in a data-layer session: the session's upstream session,
    /// planned already (`in_session`).
    Session {
        session: &'s crate::route::SessionRef<'s>,
        task_after: Option<Duration>,
    },
}

/// Which calls may become tasks (`stateless.tasks`, `task_tools`, `task_after`).
#[derive(Debug, Clone)]
struct TaskRules {
    enabled: bool,
    /// Tools the operator runs as tasks though they declare no task support.
    tools: Vec<String>,
    /// Any other call of a client that declared the extension becomes a task after
    /// this long.
    after: Option<Duration>,
}

/// How long a call of a tool declaring task support may take before it becomes a task:
/// one that answers within it is answered directly, and a question it asks within it is
/// an `input_required` round before any task.
const TASK_DECISION: Duration = Duration::from_millis(250);
/// A tool named in a call but unknown is looked for in a new `tools/list` at most this
/// often.
const RELIST_AFTER: Duration = Duration::from_secs(30);

/// Whether `capabilities` (a client's, raw) declares `capability`.
fn declares(capabilities: &RawValue, capability: &str) -> bool {
    RawObject::parse(capabilities).is_some_and(|caps| caps.get(capability).is_some())
}
