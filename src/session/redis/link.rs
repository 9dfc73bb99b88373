//! How the Redis store reaches the server that takes its writes. It knows nothing of what
//! is written (the key layout and the scripts are the store's).
//!
//! - One server (`session.redis_url`): a connection manager that reconnects to that
//!   address by itself (resolving its name again: a managed Redis's primary endpoint
//!   follows its failovers). A server that answers that it no longer is the primary
//!   (`READONLY`: demoted without dropping its clients) gets a fresh connection manager,
//!   so that the name is resolved again.
//! - Redis Sentinel (`session.redis_sentinels`): the primary that the sentinels name for
//!   `session.redis_master_name`, confirmed with `ROLE` (the `redis` crate's
//!   `SentinelClient`, which follows the Sentinel client specification). A task of the
//!   link's own looks it up whenever there is none: at start, and after an operation
//!   found it gone — its connection broken or timed out, or the server answering that it
//!   no longer is the primary (`READONLY`, as a demoted primary does; Sentinel also closes
//!   the clients of a server it demotes). Requests never look it up themselves: one that
//!   finds no primary waits for the task until its own deadline, then fails.
//!
//! Each worker thread has connections of its own (and the other threads share one set):
//! a connection's driver task runs on the thread that first used it, so a request's
//! round trip to Redis never wakes another thread. They speak RESP2 whatever the URL
//! says: a RESP3 connection manager reconnects from the thread that made it.
//!
//! Every operation is bounded by `session.redis_timeout` and is one round trip once the
//! primary is known: a command, a pipeline, or a script (`EVALSHA`; loaded first where
//! the server lacks it, as on a freshly promoted replica). A script whose writes must reach
//! replicas before the client hears of them goes in one pipeline with its `WAIT`. `WAIT`
//! holds the connection it is sent on until the replicas answer, so those go on a second
//! connection of their own: the per-call scripts never queue behind one. After a `WAIT`
//! that ran out of time (a replica down or far behind), writes do not wait for
//! [`SKIP_AFTER_SHORT`]: one write a period pays the wait, not every one. A failure is
//! [`StoreError::Unavailable`] (the client hears HTTP 503 and retries). Only what may run
//! twice with the same outcome ([`Link::run_repeatable`]) is sent once more, and only
//! when its connection turned out to be dropped; nothing else is, since a script whose
//! answer was lost may have run.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, FromRedisValue, IntoConnectionInfo,
    Pipeline, ProtocolVersion, RedisConnectionInfo, RedisError, RedisResult, Script,
    ServerErrorKind, Value,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::tracking;
use crate::config::{RedisConfig, RedisServers};
use crate::session::store::StoreError;
use crate::telemetry::client::ClientSpan;
use crate::workers::PerWorker;

/// How long one look-up of the primary may take (the sentinels asked, the primary's
/// `ROLE` checked, a connection opened). Requests do not wait for it: it runs in the
/// background, and a sentinel that does not answer must not stop the others' answers
/// from being heard (the crate gives each one second to connect).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest pause between two look-ups while the sentinels name no usable primary.
const LOOKUP_PAUSE_MAX: Duration = Duration::from_millis(500);
/// The least time between two replacements of every thread's connections to one server
/// (while it refuses them, or answers `READONLY`, every request would ask for one).
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long writes do not wait for replicas after a wait that ran out of time.
const SKIP_AFTER_SHORT: Duration = Duration::from_secs(1);

/// What one round trip sends.
#[derive(Clone, Copy)]
pub enum Op<'a> {
    /// A command.
    Cmd(&'a Cmd),
    /// Commands pipelined.
    Pipeline(&'a Pipeline),
    /// `EVALSHA` of `script` (the command), loading the script first if the server lacks
    /// it.
    Script(&'a Script, &'a Cmd),
    /// As `Script`, and the writes reach `session.redis_wait_replicas` replicas (or the
    /// wait times out) before the answer: the `EVALSHA` and a `WAIT` in one pipeline.
    Replicated(&'a Script, &'a Cmd),
    /// A pipeline of `EVALSHA`s of `script`, loading it first if the server lacks it.
    Scripts(&'a Script, &'a Pipeline),
}

impl Op<'_> {
    /// What it sends, as a trace names it.
    fn name(&self) -> &'static str {
        match self {
            Op::Cmd(_) => "command",
            Op::Pipeline(_) => "pipeline",
            Op::Script(..) => "EVALSHA",
            Op::Replicated(..) => "EVALSHA WAIT",
            Op::Scripts(..) => "EVALSHA pipeline",
        }
    }
}

/// The way to the server that takes the store's writes.
pub struct Link {
    to: To,
    timeout: Duration,
    wait: Option<Wait>,
    /// Moves on whenever the link stops using a server (its connections replaced, a
    /// primary lost or a new one found): what was learnt from the server before may not
    /// hold for the one used now.
    generation: Arc<AtomicU64>,
}

#[expect(
    clippy::large_enum_variant,
    reason = "one link per process, never moved on the request path"
)]
enum To {
    Server(Server),
    Sentinel(Sentinel),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.to {
            To::Server(_) => "Link::Server",
            To::Sentinel(_) => "Link::Sentinel",
        })
    }
}

// === impl Link ===

impl Link {
    /// A link as `config` says (nothing is connected yet; a sentinel link starts looking
    /// up the primary in a task of its own, which it stops when dropped).
    pub fn new(config: &RedisConfig) -> Result<Link, StoreError> {
        let settings = |info: RedisConnectionInfo| {
            let info = match &config.username {
                Some(user) => info.set_username(user),
                None => info,
            };
            let info = match &config.password {
                Some(password) => info.set_password(String::from_utf8_lossy(&password.0)),
                None => info,
            };
            info.set_protocol(ProtocolVersion::RESP2)
        };
        let waits = config.wait_replicas > 0;
        let generation = Arc::new(AtomicU64::new(0));
        let to = match &config.servers {
            RedisServers::Server { url } => {
                let info = url.as_str().into_connection_info().map_err(unavailable)?;
                let redis = settings(info.redis_settings().clone());
                let client =
                    redis::Client::open(info.set_redis_settings(redis)).map_err(unavailable)?;
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.timeout))
                    .set_response_timeout(Some(config.timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(500));
                To::Server(Server::new(
                    client,
                    manager_config,
                    waits,
                    generation.clone(),
                )?)
            }
            RedisServers::Sentinel {
                sentinels,
                master_name,
            } => {
                let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(
                    settings(RedisConnectionInfo::default().set_db(config.db)),
                );
                let client = SentinelClient::build(
                    sentinels.iter().map(String::as_str).collect(),
                    master_name.clone(),
                    Some(node),
                    SentinelServerType::Master,
                )
                .map_err(unavailable)?;
                let connection = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(config.timeout))
                    .set_response_timeout(Some(config.timeout));
                To::Sentinel(Sentinel::start(
                    client,
                    connection,
                    waits,
                    master_name.clone(),
                    generation.clone(),
                )?)
            }
        };
        Ok(Link {
            to,
            generation,
            timeout: config.timeout,
            wait: waits.then(|| Wait {
                replicas: config.wait_replicas,
                timeout: config.wait_timeout,
                short: AtomicBool::new(false),
                short_at: parking_lot::Mutex::new(None),
            }),
        })
    }

    /// Sends `op` and reads its answer as a `T`.
    pub async fn run<T: FromRedisValue>(&self, op: Op<'_>) -> Result<T, StoreError> {
        self.run_as(op, false).await
    }

    /// As [`Link::run`], for an operation that may run twice with the same outcome (a
    /// read, a renewal, a write of the same value): sent once more, within the same
    /// deadline, when its connection turned out to be dropped. A restarted Redis broke
    /// every thread's connection, and each thread finds out only when it next uses its
    /// own; such an operation need not fail for that.
    pub async fn run_repeatable<T: FromRedisValue>(&self, op: Op<'_>) -> Result<T, StoreError> {
        self.run_as(op, true).await
    }

    /// Which server the link uses now, as a number that moves on whenever it stops using
    /// one (see [`Link::server`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The server the link sends to now — how to reach it and log in — for a connection
    /// of another kind to the same server (`super::tracking`); `None` while there is
    /// none (no primary found yet), or when it is reached over TLS, which that
    /// connection does not speak.
    pub fn server(&self) -> Option<tracking::Server> {
        let client = match &self.to {
            To::Server(server) => server.client.clone(),
            To::Sentinel(sentinel) => sentinel.primary.borrow().as_ref()?.server.clone(),
        };
        let info = client.get_connection_info();
        let addr = match info.addr() {
            ConnectionAddr::Tcp(host, port) => tracking::Addr::Tcp(host.clone(), *port),
            ConnectionAddr::Unix(path) => tracking::Addr::Unix(path.clone()),
            _ => return None,
        };
        let settings = info.redis_settings();
        Some(tracking::Server {
            addr,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
        })
    }

    /// How long one operation may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn run_as<T: FromRedisValue>(
        &self,
        op: Op<'_>,
        repeatable: bool,
    ) -> Result<T, StoreError> {
        let span = ClientSpan::store(op.name());
        let sent = self.send(op, repeatable).await;
        if let Some(span) = span {
            span.sent(
                sent.as_ref()
                    .map(|_| ())
                    .map_err(|e| e as &dyn std::fmt::Display),
            );
        }
        let value = sent?;
        T::from_redis_value(value).map_err(|e| {
            StoreError::Unavailable(format!("Redis answered what the proxy cannot read: {e}"))
        })
    }

    async fn send(&self, op: Op<'_>, repeatable: bool) -> Result<Value, StoreError> {
        let deadline = Instant::now() + self.timeout;
        // Whether this write waits for replicas, and so goes on the waiting connection.
        let wait = match op {
            Op::Replicated(..) => self.wait.as_ref().filter(|wait| wait.due()),
            _ => None,
        };
        match self.attempt(op, wait, deadline).await {
            // Boxed: rare, and a second try held inline would make every store
            // operation's future (and the request's around it) larger.
            Err(Failed::Dropped(_)) if repeatable => Box::pin(self.attempt(op, wait, deadline))
                .await
                .map_err(Failed::into_error),
            answer => answer.map_err(Failed::into_error),
        }
    }

    /// One try of `op`, until `deadline`.
    async fn attempt(
        &self,
        op: Op<'_>,
        wait: Option<&Wait>,
        deadline: Instant,
    ) -> Result<Value, Failed> {
        match &self.to {
            To::Server(server) => {
                let managers = server.managers.load_full();
                let mut connection = managers.threads.here().pick(wait.is_some()).clone();
                let answer = exchange(&mut connection, op, wait);
                match tokio::time::timeout_at(deadline, answer).await {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(e)) if demoted(&e) => {
                        server.renew(&managers, &e);
                        Err(Failed::Other(unavailable(e)))
                    }
                    Ok(Err(e)) if e.is_connection_dropped() => {
                        // The manager would replace this thread's connection by itself;
                        // every other thread's broke too (the server restarted or went
                        // away): they connect anew as well.
                        server.reconnect(&managers);
                        Err(Failed::Dropped(unavailable(e)))
                    }
                    Ok(Err(e)) => Err(Failed::Other(unavailable(e))),
                    Err(_) => Err(Failed::Other(self.timed_out())),
                }
            }
            To::Sentinel(sentinel) => {
                let primary = sentinel.primary(deadline).await.map_err(Failed::Other)?;
                let answer = async {
                    let connections = primary.connections().await?;
                    let mut connection = connections.pick(wait.is_some()).clone();
                    exchange(&mut connection, op, wait).await
                };
                match tokio::time::timeout_at(deadline, answer).await {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(e)) => {
                        if primary_gone(&e) {
                            sentinel.lost(&primary, &e);
                        }
                        Err(if e.is_connection_dropped() {
                            Failed::Dropped(unavailable(e))
                        } else {
                            Failed::Other(unavailable(e))
                        })
                    }
                    Err(_) => {
                        let e = self.timed_out();
                        if primary.connected_here() {
                            sentinel.lost(&primary, &e);
                        }
                        Err(Failed::Other(e))
                    }
                }
            }
        }
    }

    fn timed_out(&self) -> StoreError {
        StoreError::Unavailable(format!(
            "Redis did not answer within {}",
            humantime::format_duration(self.timeout)
        ))
    }
}

/// Why a try of an operation failed: its connection was dropped (the server restarted,
/// went away, or refused it), or anything else.
enum Failed {
    Dropped(StoreError),
    Other(StoreError),
}

impl Failed {
    fn into_error(self) -> StoreError {
        match self {
            Failed::Dropped(e) | Failed::Other(e) => e,
        }
    }
}

/// One round trip of `op` on `connection` (two when a script must be loaded first); a
/// `Replicated` script waits for replicas when `wait` says so.
async fn exchange<C: ConnectionLike + Send>(
    connection: &mut C,
    op: Op<'_>,
    wait: Option<&Wait>,
) -> RedisResult<Value> {
    match (op, wait) {
        (Op::Cmd(cmd), _) => cmd.query_async(connection).await,
        (Op::Pipeline(pipe), _) => pipe.query_async(connection).await,
        (Op::Scripts(script, pipe), _) => loaded(script, connection, Sent::Pipeline(pipe)).await,
        (Op::Script(script, cmd), _) | (Op::Replicated(script, cmd), None) => {
            loaded(script, connection, Sent::Cmd(cmd)).await
        }
        (Op::Replicated(script, cmd), Some(wait)) => {
            let mut pipe = redis::pipe();
            pipe.add_command(cmd.clone())
                .cmd("WAIT")
                .arg(wait.replicas)
                .arg(wait.timeout.as_millis().max(1) as u64);
            let answers = loaded(script, connection, Sent::Pipeline(&pipe)).await?;
            let (value, acknowledged): (Value, usize) = FromRedisValue::from_redis_value(answers)?;
            wait.acknowledged(acknowledged);
            Ok(value)
        }
    }
}

/// A command or a pipeline, sent as it is.
#[derive(Clone, Copy)]
enum Sent<'a> {
    Cmd(&'a Cmd),
    Pipeline(&'a Pipeline),
}

/// Sends `sent`; if the server lacks `script` (`NOSCRIPT`: nothing of it ran), loads it
/// and sends `sent` again.
async fn loaded<C: ConnectionLike + Send>(
    script: &Script,
    connection: &mut C,
    sent: Sent<'_>,
) -> RedisResult<Value> {
    let send = async |connection: &mut C| match sent {
        Sent::Cmd(cmd) => cmd.query_async(connection).await,
        Sent::Pipeline(pipe) => pipe.query_async(connection).await,
    };
    match send(connection).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(connection).await?;
            send(connection).await
        }
        answer => answer,
    }
}

/// Whether `e` says the server no longer is a primary this link can use: the connection
/// broke or timed out, or the server was [`demoted`].
fn primary_gone(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_unrecoverable_error() || demoted(e)
}

/// Whether the server says it is not a primary that takes writes: a replica now
/// (`READONLY`), one that cannot serve yet (`MASTERDOWN`, `LOADING`), or a primary that
/// refuses writes for want of replicas (`NOREPLICAS`: `min-replicas-to-write`, as a
/// primary cut off from its replicas does — another may have been promoted).
fn demoted(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading
        )
    ) || e.code() == Some("NOREPLICAS")
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Two connections to the same server: `main` for everything but the writes that wait
/// for replicas, which go on `waiting` (the same connection when nothing waits).
#[derive(Clone)]
struct Pair<C> {
    main: C,
    waiting: C,
}

// === impl Pair ===

impl<C> Pair<C> {
    fn pick(&self, waits: bool) -> &C {
        if waits { &self.waiting } else { &self.main }
    }
}

/// One server, by its URL.
struct Server {
    client: redis::Client,
    config: ConnectionManagerConfig,
    waits: bool,
    managers: ArcSwap<Managers>,
    /// The link's: moved on when the managers are replaced.
    generation: Arc<AtomicU64>,
}

/// Connection managers to one server: each thread's, each connecting when that thread
/// first uses it.
struct Managers {
    /// Each thread's.
    threads: PerWorker<Pair<ConnectionManager>>,
    /// When they were made: they are not replaced again within [`RECONNECT_PAUSE`].
    made: Instant,
}

// === impl Server ===

impl Server {
    fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
        waits: bool,
        generation: Arc<AtomicU64>,
    ) -> Result<Server, StoreError> {
        let managers = Server::managers(&client, &config, waits)?;
        Ok(Server {
            client,
            config,
            waits,
            managers: ArcSwap::from_pointee(managers),
            generation,
        })
    }

    /// Connection managers for every thread, each connecting when first used (on the
    /// thread that uses it).
    fn managers(
        client: &redis::Client,
        config: &ConnectionManagerConfig,
        waits: bool,
    ) -> Result<Managers, StoreError> {
        let manager = || {
            ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                .map_err(unavailable)
        };
        let threads = PerWorker::try_new(|| {
            let main = manager()?;
            let waiting = if waits { manager()? } else { main.clone() };
            Ok(Pair { main, waiting })
        })?;
        Ok(Managers {
            threads,
            made: Instant::now(),
        })
    }

    /// `managers` reached a demoted server: the next operation connects anew (unless
    /// another request did it first).
    fn renew(&self, managers: &Arc<Managers>, why: &RedisError) {
        if self.replace(managers) {
            tracing::warn!(
                server = %self.client.get_connection_info().addr(),
                error = %why,
                "the Redis server no longer takes writes; connecting to its address anew"
            );
        }
    }

    /// A connection of `managers` broke: every thread connects anew when it next uses
    /// the server — at most once per [`RECONNECT_PAUSE`].
    fn reconnect(&self, managers: &Arc<Managers>) {
        if self.replace(managers) {
            tracing::debug!(
                server = %self.client.get_connection_info().addr(),
                "a connection to the Redis server broke; every thread connects anew"
            );
        }
    }

    /// Puts fresh managers in place of `managers`, unless another request did first or
    /// they were made less than [`RECONNECT_PAUSE`] ago; whether this one did.
    fn replace(&self, managers: &Arc<Managers>) -> bool {
        if managers.made.elapsed() < RECONNECT_PAUSE
            || !Arc::ptr_eq(&self.managers.load(), managers)
        {
            // Too soon, or already replaced: nothing to make and throw away.
            return false;
        }
        let Ok(fresh) = Server::managers(&self.client, &self.config, self.waits) else {
            return false;
        };
        let previous = self.managers.compare_and_swap(managers, Arc::new(fresh));
        let replaced = Arc::ptr_eq(&previous, managers);
        if replaced {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        replaced
    }
}

/// `WAIT` after the writes a client is told about (`session.redis_wait_replicas`).
struct Wait {
    replicas: usize,
    timeout: Duration,
    /// Whether the last wait ended with fewer replicas than asked (logged once when it
    /// starts and once when it ends, not at every write).
    short: AtomicBool,
    /// When the last wait that ran out of time ended.
    short_at: parking_lot::Mutex<Option<Instant>>,
}

// === impl Wait ===

impl Wait {
    /// Whether a write waits now: unless a wait ran out of time less than
    /// [`SKIP_AFTER_SHORT`] ago.
    fn due(&self) -> bool {
        if !self.short.load(Ordering::Relaxed) {
            return true;
        }
        let mut short_at = self.short_at.lock();
        match *short_at {
            Some(at) if at.elapsed() < SKIP_AFTER_SHORT => false,
            // This write tries again; the others carry on while it waits.
            _ => {
                *short_at = Some(Instant::now());
                true
            }
        }
    }

    fn acknowledged(&self, replicas: usize) {
        let short = replicas < self.replicas;
        if short {
            *self.short_at.lock() = Some(Instant::now());
        }
        if self.short.swap(short, Ordering::Relaxed) == short {
            return;
        }
        if short {
            tracing::warn!(
                wanted = self.replicas,
                acknowledged = replicas,
                wait_timeout = %humantime::format_duration(self.timeout),
                "Redis replicas did not acknowledge a session's creation or deletion in time; \
                 carrying on without them (a failover now could lose such writes)"
            );
        } else {
            tracing::info!(
                replicas,
                "Redis replicas acknowledge sessions' creations and deletions again"
            );
        }
    }
}

/// The primary as the sentinels name it, and the task that looks it up.
struct Sentinel {
    /// The primary in use; `None` while it is being looked up.
    primary: Arc<watch::Sender<Option<Arc<Primary>>>>,
    task: JoinHandle<()>,
    /// The link's: moved on when the primary is lost, and when one is found.
    generation: Arc<AtomicU64>,
}

/// Connections to the primary.
struct Primary {
    server: redis::Client,
    config: AsyncConnectionConfig,
    waits: bool,
    /// Each thread's, connected when that thread first uses them (the look-up's own
    /// are its thread's).
    connections: PerWorker<tokio::sync::OnceCell<Pair<MultiplexedConnection>>>,
    /// `host:port`, for logs.
    address: String,
}

// === impl Primary ===

impl Primary {
    /// This thread's connections to the primary. When there are none yet, a task of
    /// this thread's makes them, which a request that stops waiting does not cancel: the
    /// next request finds them made, and making them has its own connect timeout, not
    /// what is left of one request's.
    async fn connections(self: &Arc<Self>) -> RedisResult<Pair<MultiplexedConnection>> {
        if let Some(made) = self.connections.here().get() {
            return Ok(made.clone());
        }
        let primary = self.clone();
        let making = tokio::spawn(async move {
            primary
                .connections
                .here()
                .get_or_try_init(|| connect(&primary.server, &primary.config, primary.waits))
                .await
                .cloned()
        });
        making
            .await
            .map_err(|e| RedisError::from(std::io::Error::other(e.to_string())))?
    }

    /// Whether this thread has its connections: a request that ran out of time before
    /// they were made says nothing about the primary.
    fn connected_here(&self) -> bool {
        self.connections.here().initialized()
    }
}

/// Connections to `server`: two when writes wait for replicas.
async fn connect(
    server: &redis::Client,
    config: &AsyncConnectionConfig,
    waits: bool,
) -> RedisResult<Pair<MultiplexedConnection>> {
    let one = || server.get_multiplexed_async_connection_with_config(config);
    if !waits {
        let main = one().await?;
        return Ok(Pair {
            waiting: main.clone(),
            main,
        });
    }
    let (main, waiting) = tokio::try_join!(one(), one())?;
    Ok(Pair { main, waiting })
}

// === impl Sentinel ===

impl Sentinel {
    fn start(
        client: SentinelClient,
        connection: AsyncConnectionConfig,
        waits: bool,
        master_name: String,
        generation: Arc<AtomicU64>,
    ) -> Result<Sentinel, StoreError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            StoreError::Unavailable(format!("the sentinel look-up needs a runtime: {e}"))
        })?;
        let primary = Arc::new(watch::Sender::new(None));
        let lookup = LookUp {
            client,
            connection,
            waits,
            master_name,
            generation: generation.clone(),
        };
        let task = runtime.spawn(lookup.run(primary.clone()));
        Ok(Sentinel {
            primary,
            task,
            generation,
        })
    }

    /// The primary, waiting for the look-up until `deadline` if there is none.
    async fn primary(&self, deadline: Instant) -> Result<Arc<Primary>, StoreError> {
        if let Some(primary) = self.primary.borrow().clone() {
            return Ok(primary);
        }
        let mut found = self.primary.subscribe();
        match tokio::time::timeout_at(deadline, found.wait_for(Option::is_some)).await {
            Ok(Ok(primary)) => primary.clone().ok_or_else(no_primary),
            _ => Err(no_primary()),
        }
    }

    /// `primary` failed with `why`: looked up again, unless another request did it first.
    fn lost(&self, primary: &Arc<Primary>, why: &dyn Display) {
        let cleared = self.primary.send_if_modified(|current| match current {
            Some(p) if Arc::ptr_eq(p, primary) => {
                *current = None;
                true
            }
            _ => false,
        });
        if cleared {
            self.generation.fetch_add(1, Ordering::AcqRel);
            tracing::warn!(
                primary = %primary.address,
                error = %why,
                "the Redis primary failed; asking the sentinels which server is the primary now"
            );
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn no_primary() -> StoreError {
    StoreError::Unavailable(
        "no Redis primary: the sentinels name none that answers (a failover may be under way)"
            .into(),
    )
}

/// What looks up the primary.
struct LookUp {
    client: SentinelClient,
    connection: AsyncConnectionConfig,
    /// Whether writes wait for replicas (a second connection).
    waits: bool,
    master_name: String,
    /// The link's: moved on when a primary is found.
    generation: Arc<AtomicU64>,
}

// === impl LookUp ===

impl LookUp {
    /// Looks up the primary whenever there is none, until the link is dropped.
    async fn run(mut self, primary: Arc<watch::Sender<Option<Arc<Primary>>>>) {
        let mut none = primary.subscribe();
        loop {
            if none.wait_for(Option::is_none).await.is_err() {
                return;
            }
            let mut failures: u32 = 0;
            loop {
                let why = match tokio::time::timeout(LOOKUP_TIMEOUT, self.once()).await {
                    Ok(Ok(found)) => {
                        tracing::info!(
                            primary = %found.address,
                            master_name = %self.master_name,
                            lookups = failures + 1,
                            "the sentinels name the Redis primary"
                        );
                        primary.send_replace(Some(Arc::new(found)));
                        self.generation.fetch_add(1, Ordering::AcqRel);
                        break;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!(
                        "no answer within {}",
                        humantime::format_duration(LOOKUP_TIMEOUT)
                    ),
                };
                if failures == 0 {
                    tracing::warn!(
                        master_name = %self.master_name,
                        error = %why,
                        "the sentinels name no Redis primary that answers; asking again"
                    );
                } else {
                    tracing::debug!(
                        master_name = %self.master_name,
                        error = %why,
                        failures,
                        "still no Redis primary"
                    );
                }
                failures = failures.saturating_add(1);
                let pause = Duration::from_millis(50)
                    .saturating_mul(1 << failures.min(5))
                    .min(LOOKUP_PAUSE_MAX);
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// One look-up: the primary the sentinels name, `ROLE` checked, connected to.
    async fn once(&mut self) -> RedisResult<Primary> {
        let server = self.client.async_get_client().await?;
        let address = server.get_connection_info().addr().to_string();
        // Connected here: a primary that does not take connections is not the one.
        let mine = connect(&server, &self.connection, self.waits).await?;
        let connections = PerWorker::new(tokio::sync::OnceCell::new);
        // Nothing else holds the cells yet.
        let _ = connections.here().set(mine);
        Ok(Primary {
            server,
            config: self.connection.clone(),
            waits: self.waits,
            connections,
            address,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait() -> Wait {
        Wait {
            replicas: 1,
            timeout: Duration::from_millis(100),
            short: AtomicBool::new(false),
            short_at: parking_lot::Mutex::new(None),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_wait_runs_out_writes_skip_it_for_a_while_then_one_tries_again() {
        let wait = wait();
        assert!(wait.due() && wait.due());
        wait.acknowledged(0);
        assert!(!wait.due(), "a replica down costs every write the wait");
        tokio::time::advance(SKIP_AFTER_SHORT).await;
        assert!(wait.due(), "one write tries the replicas again");
        assert!(!wait.due(), "the others do not queue behind it");
        wait.acknowledged(0);
        assert!(!wait.due());
        tokio::time::advance(SKIP_AFTER_SHORT).await;
        assert!(wait.due());
        wait.acknowledged(1);
        assert!(wait.due() && wait.due(), "back: every write waits");
    }

    #[test]
    fn what_says_the_primary_is_gone() {
        let readonly = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let script = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "user_script:1: Script attempted to access nonexistent global variable",
        ));
        assert!(demoted(&readonly) && primary_gone(&readonly));
        assert!(!demoted(&io) && primary_gone(&io));
        assert!(!primary_gone(&script));
    }
}
