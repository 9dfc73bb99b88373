//! The Redis store: session records in a Redis shared by proxy replicas, so a session
//! created on one replica is used and deleted on another, and a restarted proxy carries
//! on every live session.
//!
//! Layout (every key under [`PREFIX`]):
//! - `s:<sessionId>`, a hash: `r` the record (compact JSON), `u` the upstream session id
//!   (compared when a lost one is replaced), `w` the caller the session is bound to (a
//!   hash; compared before a use renews it), and `q`, the uses counted by builds before
//!   the use count moved to `q:`. Its TTL is the idle expiry plus [`REAP_GRACE`], so
//!   Redis drops what no proxy reaped (all of them down) after the grace; a use moves it
//!   only once less than half the grace would be left, because every write of this key is
//!   reported to every replica's [`cache`], which then forgets the session.
//! - `q:<sessionId>`: the session's uses (its sequence: `q` of the hash plus this), with
//!   the record key's TTL; written by every use.
//! - `expiry`, a sorted set of sessionIds by idle expiry (ms). Reapers claim expired
//!   sessions from it in a script, atomically: each expired session is ended upstream by
//!   exactly one replica.
//! - `p:<upstream>:<Mcp-Session-Id>`: the replica an old client's upstream session lives
//!   on (pass-through affinity), with the idle TTL.
//! - `t:<upstream>:<task key>`: an ended task as `tasks/get` shows it (2026-07-28 tasks
//!   extension), written by the replica that ran it, so that any replica answers it; it
//!   expires with the task.
//!
//! Every operation on the request path is one round trip: a Lua script (`EVALSHA`) that
//! reads and renews together (sent once more if its connection turned out to be
//! dropped, when running it twice does the same: `Link::run_repeatable`) — or none, for
//! a session this worker remembers ([`cache`]): then the renewal is written behind the
//! answer, batched with the worker's others. A session's
//! creation and deletion — what a client is told
//! about — also wait for `session.redis_wait_replicas` replicas (`WAIT`, in the same
//! pipeline), so that a failover does not lose them; a renewal does not wait (losing the
//! last renewals to a failover only brings a session's expiry back by as much).
//!
//! How the primary is reached — one server, or the one Redis Sentinel names, found again
//! after a failover — is [`link`]'s. While there is none every operation fails within
//! `session.redis_timeout` with [`StoreError::Unavailable`] (the client hears HTTP 503),
//! and nothing is lost that Redis kept.
//!
//! Not for Redis Cluster: every script touches the one `expiry` index with the session's
//! own hash (and the reaper's builds key names it is not given), so every key would have
//! to share one hash slot — one shard holding everything, which is what a primary and
//! its replicas under Sentinel already are.

mod cache;
mod link;
mod tracking;

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Script, Value};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

pub use self::cache::Counted;
use self::cache::{Cache, Lease, Tracked};
use self::link::{Link, Op};
use self::tracking::Tracker;
use super::id;
use super::record::{Backing, ClientIdentity, Millis, SessionRecord};
use super::store::{Renewal, Reroute, SessionStore, StoreError};
use crate::config::RedisConfig;
use crate::mcp::ClientEra;
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;
use crate::mcp::version;

/// Every key of the proxy starts with this.
pub const PREFIX: &str = "mcp-session-proxy:";
/// How long after its idle expiry an unreaped record stays in Redis.
pub const REAP_GRACE: Duration = Duration::from_secs(600);

const CREATE: &str = r"
if not redis.call('ZSCORE', KEYS[2], ARGV[6])
  and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 0 end
redis.call('HSET', KEYS[1], 'r', ARGV[1], 'q', 0, 'u', ARGV[2])
if ARGV[7] ~= '-' then redis.call('HSET', KEYS[1], 'w', ARGV[7]) end
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
return 1
";

/// One use: the record if the session is live, its sequence moved on and its expiry
/// renewed — never moved back, should a renewal written behind arrive after a later one
/// (unless it is bound to another caller). KEYS: the record, the expiry index, the use
/// count. ARGV: now, the new expiry, the keys' new deadline, the id, the caller, and how
/// long the record's key must have left for its deadline to stay as it is.
const RENEW: &str = r"
local exp = redis.call('ZSCORE', KEYS[2], ARGV[4])
if not exp or tonumber(exp) <= tonumber(ARGV[1]) then return false end
local blob = redis.call('HGET', KEYS[1], 'r')
if not blob then return false end
local before = tonumber(redis.call('HGET', KEYS[1], 'q')) or 0
local w = redis.call('HGET', KEYS[1], 'w')
if w and w ~= ARGV[5] then return {blob, before + (tonumber(redis.call('GET', KEYS[3])) or 0)} end
local seq = before + redis.call('INCR', KEYS[3])
redis.call('PEXPIREAT', KEYS[3], ARGV[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[6]) then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
if tonumber(ARGV[2]) > tonumber(exp) then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4]) end
return {blob, seq}
";

/// Uses served from a worker's memory, written behind: [`RENEW`] without the record, for
/// ARGV[7] uses (the last one's expiry); 1 if renewed, 0 if the session is gone (or bound
/// to another caller).
const TOUCH: &str = r"
local exp = redis.call('ZSCORE', KEYS[2], ARGV[4])
if not exp or tonumber(exp) <= tonumber(ARGV[1]) then return 0 end
local w = redis.call('HGET', KEYS[1], 'w')
if w and w ~= ARGV[5] then return 0 end
if not w and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('INCRBY', KEYS[3], ARGV[7])
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[6]) then redis.call('PEXPIREAT', KEYS[3], ARGV[3]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[6]) then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
if tonumber(ARGV[2]) > tonumber(exp) then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4]) end
return 1
";

const GET: &str = r"
local exp = redis.call('ZSCORE', KEYS[2], ARGV[2])
if not exp or tonumber(exp) <= tonumber(ARGV[1]) then return false end
local v = redis.call('HMGET', KEYS[1], 'r', 'q')
if not v[1] then return false end
return {v[1], (tonumber(v[2]) or 0) + (tonumber(redis.call('GET', KEYS[3])) or 0)}
";

const REMOVE: &str = r"
local v = redis.call('HMGET', KEYS[1], 'r', 'q')
local uses = tonumber(redis.call('GET', KEYS[3])) or 0
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
if not v[1] then return false end
return {v[1], (tonumber(v[2]) or 0) + uses}
";

const REROUTE: &str = r"
if redis.call('HGET', KEYS[1], 'u') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'r', ARGV[2], 'u', ARGV[3])
return 1
";

const TAKE_EXPIRED: &str = r"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local key = ARGV[3] .. id
  local uses = ARGV[4] .. id
  local v = redis.call('HMGET', key, 'r', 'q')
  local n = tonumber(redis.call('GET', uses)) or 0
  redis.call('DEL', key, uses)
  if v[1] then
    table.insert(out, id)
    table.insert(out, v[1])
    table.insert(out, (tonumber(v[2]) or 0) + n)
  end
end
return out
";

/// Sessions in Redis.
pub struct RedisStore {
    link: Arc<Link>,
    /// What each worker remembers of live sessions.
    cache: Arc<Cache>,
    idle_ttl: Duration,
    max_sessions: usize,
    scripts: Scripts,
}

struct Scripts {
    create: Script,
    renew: Script,
    touch: Script,
    get: Script,
    remove: Script,
    reroute: Script,
    take_expired: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisStore")
    }
}

/// A record as Redis keeps it.
#[derive(Serialize, Deserialize)]
struct Stored {
    /// upstream name
    u: Arc<str>,
    /// replica
    r: u64,
    /// upstream session id
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<Arc<str>>,
    /// negotiated: version, serverInfo, capabilities, instructions
    v: String,
    i: Box<RawValue>,
    c: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<String>,
    /// owner
    #[serde(default, skip_serializing_if = "Option::is_none")]
    o: Option<Arc<str>>,
    /// created at
    t: Millis,
    /// whether the client is legacy: what builds before `e` read of its era, written on
    /// for them
    #[serde(default)]
    l: bool,
    /// the client's era (`ClientEra::name`); absent from records written before it, whose
    /// era `l` says
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e: Option<String>,
    /// the client's identity (clientInfo, capabilities)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ci: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cc: Option<Box<RawValue>>,
    /// whether a client identity was kept at all
    #[serde(default)]
    k: bool,
    /// the caller the session is bound to: its hash in hex, "" for a caller without
    /// credentials; absent when the session is bound to none
    #[serde(default, skip_serializing_if = "Option::is_none")]
    w: Option<String>,
}

fn encode(
    upstream: &Arc<str>,
    route: &Backing,
    record: Option<&SessionRecord>,
) -> Result<Vec<u8>, StoreError> {
    let n = &route.negotiated;
    let client = record.and_then(|r| r.client.as_deref());
    let stored = Stored {
        u: upstream.clone(),
        r: route.replica,
        s: route.upstream_session.clone(),
        v: n.protocol_version.to_owned(),
        i: n.server_info.clone(),
        c: n.capabilities.clone(),
        n: n.instructions.clone(),
        o: route.owner.clone(),
        t: record.map_or(0, |r| r.created_at),
        l: record.is_some_and(|r| r.client_era.is_legacy()),
        e: record.map(|r| r.client_era.name().to_owned()),
        ci: client.and_then(|c| c.client_info.clone()),
        cc: client.and_then(|c| c.capabilities.clone()),
        k: client.is_some(),
        w: record.and_then(|r| r.caller).map(|caller| caller.hex()),
    };
    serde_json::to_vec(&stored).map_err(|e| StoreError::Unstorable(e.to_string()))
}

fn decode(blob: &[u8], seq: u64, expires_at: Millis) -> Result<SessionRecord, StoreError> {
    let stored: Stored = serde_json::from_slice(blob).map_err(|e| {
        StoreError::Unavailable(format!("a session record in Redis is unreadable: {e}"))
    })?;
    let protocol_version = version::known(&stored.v).unwrap_or(version::LATEST_STATEFUL);
    let caller = match stored.w.as_deref() {
        None => None,
        Some(hex) => Some(Caller::from_hex(hex).ok_or_else(|| {
            StoreError::Unavailable("a session record in Redis names an unreadable caller".into())
        })?),
    };
    Ok(SessionRecord {
        upstream: stored.u,
        backing: Backing {
            replica: stored.r,
            upstream_session: stored.s,
            negotiated: Arc::new(Negotiated {
                protocol_version,
                server_info: stored.i,
                capabilities: stored.c,
                instructions: stored.n,
            }),
            owner: stored.o,
        },
        created_at: stored.t,
        expires_at,
        seq,
        client_era: stored
            .e
            .as_deref()
            .and_then(ClientEra::parse)
            .unwrap_or(ClientEra::from_legacy_flag(stored.l)),
        client: stored.k.then(|| {
            Arc::new(ClientIdentity {
                client_info: stored.ci,
                capabilities: stored.cc,
            })
        }),
        caller,
    })
}

/// `EVALSHA` of `script` with its keys; its arguments follow.
fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

fn session_key(id: &str) -> String {
    format!("{PREFIX}s:{id}")
}

/// The prefix of every record's key (what the cache's reports name).
fn session_prefix() -> String {
    format!("{PREFIX}s:")
}

fn uses_key(id: &str) -> String {
    format!("{PREFIX}q:{id}")
}

/// When Redis may drop a record whose idle expiry is `expires_at`.
fn key_expiry(expires_at: Millis) -> Millis {
    expires_at.saturating_add(REAP_GRACE.as_millis() as Millis)
}

/// A use's `EVALSHA` of `script` ([`RENEW`] or [`TOUCH`]): its keys and arguments.
fn renewal(script: &Script, id: &str, renewal: &Renewal) -> Cmd {
    let mut cmd = evalsha(script, &[&session_key(id), &expiry_key(), &uses_key(id)]);
    // The record's key keeps its deadline while at least half the grace would be left
    // after the new expiry (every write of it is reported to every replica's cache).
    let keep = renewal
        .expires_at
        .saturating_sub(renewal.now)
        .saturating_add(REAP_GRACE.as_millis() as Millis / 2);
    cmd.arg(renewal.now)
        .arg(renewal.expires_at)
        .arg(key_expiry(renewal.expires_at))
        .arg(id)
        .arg(renewal.caller.hex())
        .arg(keep);
    cmd
}

fn expiry_key() -> String {
    format!("{PREFIX}expiry")
}

fn affinity_key(upstream: &str, session: &str) -> String {
    format!("{PREFIX}p:{upstream}:{session}")
}

fn task_key(upstream: &str, task: &str) -> String {
    format!("{PREFIX}t:{upstream}:{task}")
}

impl RedisStore {
    /// A store in the Redis `config` names (connected lazily, reconnected by itself).
    pub fn new(
        config: &RedisConfig,
        idle_ttl: Duration,
        max_sessions: usize,
        counted: Counted,
    ) -> Result<RedisStore, StoreError> {
        Ok(RedisStore {
            link: Arc::new(Link::new(config)?),
            cache: Arc::new(Cache::new(
                config.cache_sessions,
                session_prefix(),
                config.timeout,
                counted,
            )),
            idle_ttl,
            max_sessions,
            scripts: Scripts {
                create: Script::new(CREATE),
                renew: Script::new(RENEW),
                touch: Script::new(TOUCH),
                get: Script::new(GET),
                remove: Script::new(REMOVE),
                reroute: Script::new(REROUTE),
                take_expired: Script::new(TAKE_EXPIRED),
            },
        })
    }

    /// Starts this worker's tracking (`cache`): a task of the worker's that connects
    /// tracker `serial` to the server the link uses, proves that reports reach it (a
    /// probe key written and its report awaited), and then reads its reports whenever the
    /// worker is idle and sends it `PING` every [`cache::HEARTBEAT`], until the connection
    /// is lost or the link moves to another server.
    fn start_tracking(&self, serial: u64) {
        let link = Arc::downgrade(&self.link);
        let cache = Arc::downgrade(&self.cache);
        tokio::spawn(async move {
            {
                let (Some(link), Some(cache)) = (link.upgrade(), cache.upgrade()) else {
                    return;
                };
                let generation = link.generation();
                match track(&link).await {
                    Ok(tracker) => cache.tracking(serial, tracker, generation),
                    Err(e) => {
                        if cache.not_tracking(serial) {
                            tracing::warn!(
                                error = %e,
                                "Redis does not report session changes to this worker; every use asks Redis (tried again later)"
                            );
                        }
                        return;
                    }
                }
            }
            loop {
                let reports = std::future::poll_fn(|cx| match cache.upgrade() {
                    Some(cache) => cache.poll_reports(cx, serial),
                    None => std::task::Poll::Ready(()),
                });
                tokio::select! {
                    () = reports => return,
                    () = tokio::time::sleep(cache::HEARTBEAT) => {}
                }
                let (Some(cache), Some(link)) = (cache.upgrade(), link.upgrade()) else {
                    return;
                };
                if !cache.heartbeat(serial, link.generation()) {
                    return;
                }
            }
        });
    }

    /// Returns once the reports of a change just made through the link are waiting at
    /// every replica.
    ///
    /// Redis writes a change's reports and its answer in the same turn of its event loop,
    /// in no set order: a Redis descheduled between two of those writes would let the
    /// client hear of the change, and reach another replica, before that replica's report
    /// is written. It reads the next command only once every write of that turn is made,
    /// so one more round trip (a `PING`) is enough. The change stands whatever the `PING`
    /// meets: an error is not the change's.
    async fn reported_everywhere(&self) {
        let _ = self
            .link
            .run_repeatable::<()>(Op::Cmd(&redis::cmd("PING")))
            .await;
    }

    /// Starts this worker's writer: a task that sends the renewals of uses served from
    /// memory, what was queued in each [`cache::WRITE_BEHIND`] in one pipeline, until none is
    /// left.
    fn start_writer(&self) {
        let link = Arc::downgrade(&self.link);
        let cache = Arc::downgrade(&self.cache);
        let touch = self.scripts.touch.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(cache::WRITE_BEHIND).await;
                let (Some(link), Some(cache)) = (link.upgrade(), cache.upgrade()) else {
                    return;
                };
                let Some(queued) = cache.take_queued() else {
                    return;
                };
                write_behind(&link, &cache, &touch, queued).await;
            }
        });
    }

    /// Remembers which replica serves an old client's upstream session.
    pub async fn set_affinity(
        &self,
        upstream: &str,
        session: &str,
        replica: u64,
    ) -> Result<(), StoreError> {
        let ttl = self.idle_ttl.as_millis() as u64;
        let mut cmd = redis::cmd("SET");
        cmd.arg(affinity_key(upstream, session))
            .arg(replica)
            .arg("PX")
            .arg(ttl.max(1));
        self.link.run_repeatable(Op::Cmd(&cmd)).await
    }

    /// The replica an old client's upstream session lives on, if a proxy learned it.
    pub async fn affinity(&self, upstream: &str, session: &str) -> Result<Option<u64>, StoreError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(affinity_key(upstream, session));
        self.link.run_repeatable(Op::Cmd(&cmd)).await
    }

    /// Keeps an ended task's `tasks/get` result `view` until `expires_at`, when the task
    /// is forgotten. Written once, when the task ends.
    pub async fn keep_task(
        &self,
        upstream: &str,
        task: &str,
        view: &[u8],
        expires_at: Millis,
    ) -> Result<(), StoreError> {
        let left = expires_at.saturating_sub(super::now_millis());
        if left == 0 {
            return Ok(());
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(task_key(upstream, task))
            .arg(view)
            .arg("PX")
            .arg(left);
        self.link.run_repeatable(Op::Cmd(&cmd)).await
    }

    /// The ended task `task` as kept by the replica that ran it, if it was.
    pub async fn kept_task(
        &self,
        upstream: &str,
        task: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(task_key(upstream, task));
        self.link.run_repeatable(Op::Cmd(&cmd)).await
    }

    /// Forgets an old client's upstream session (it ended).
    pub async fn forget_affinity(&self, upstream: &str, session: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(affinity_key(upstream, session));
        self.link.run_repeatable(Op::Cmd(&cmd)).await
    }
}

/// A tracker connected to the server `link` uses, reports proven to reach it: a probe key
/// under the records' prefix (no record: it expires by itself) is written through the
/// link, and its report awaited.
async fn track(link: &Link) -> Result<Tracker, String> {
    let Some(server) = link.server() else {
        return Err(
            "no server to ask (none found yet, or one reached over TLS, \
                    which reports are not read over)"
                .to_owned(),
        );
    };
    let mut tracker = Tracker::start(&server, &session_prefix(), link.timeout())
        .await
        .map_err(|e| e.to_string())?;
    let probe = format!("{}probe:{}", session_prefix(), id::generate());
    let mut cmd = redis::cmd("SET");
    cmd.arg(&probe).arg(1).arg("PX").arg(10_000);
    link.run::<()>(Op::Cmd(&cmd))
        .await
        .map_err(|e| e.to_string())?;
    tracker
        .until_reported(probe.as_bytes(), link.timeout())
        .await
        .map_err(|e| e.to_string())?;
    Ok(tracker)
}

/// Writes the renewals of uses a worker served from memory — each session's once, with
/// its last use's expiry and the number of its uses — in one pipeline; a session Redis no
/// longer has, or whose renewal could not be written, is forgotten (its next use asks
/// Redis, which says what became of it).
async fn write_behind(
    link: &Link,
    cache: &Cache,
    touch: &Script,
    queued: Vec<(Box<str>, Renewal)>,
) {
    let mut last: std::collections::HashMap<&str, (&Renewal, u64)> =
        std::collections::HashMap::with_capacity(queued.len());
    for (id, renewal) in &queued {
        let uses = last.get(&**id).map_or(0, |(_, uses)| *uses);
        last.insert(id, (renewal, uses + 1));
    }
    let mut pipe = redis::pipe();
    let mut ids: Vec<Box<str>> = Vec::with_capacity(last.len());
    for (id, (renewal, uses)) in last {
        let mut cmd = self::renewal(touch, id, renewal);
        cmd.arg(uses);
        pipe.add_command(cmd);
        ids.push(id.into());
    }
    // Sent once: each adds its uses to the session's count, so running it twice (a retry
    // after a dropped connection that had run it) would count them twice. If it fails,
    // the sessions are forgotten and their next use renews them in Redis.
    match link.run::<Vec<i64>>(Op::Scripts(touch, &pipe)).await {
        Ok(done) => {
            let gone: Vec<Box<str>> = ids
                .into_iter()
                .zip(done)
                .filter(|(_, done)| *done == 0)
                .map(|(id, _)| id)
                .collect();
            if !gone.is_empty() {
                cache.forget_all_of(&gone);
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, sessions = ids.len(), "renewals of sessions used from memory could not be written; their next use asks Redis");
            cache.forget_all_of(&ids);
        }
    }
}

impl SessionStore for RedisStore {
    async fn create(&self, record: SessionRecord) -> Result<String, StoreError> {
        let id = id::generate();
        let blob = encode(&record.upstream, &record.backing, Some(&record))?;
        let script = &self.scripts.create;
        let mut cmd = evalsha(script, &[&session_key(&id), &expiry_key()]);
        cmd.arg(blob)
            .arg(record.backing.upstream_session.as_deref().unwrap_or(""))
            .arg(record.expires_at)
            .arg(key_expiry(record.expires_at))
            .arg(self.max_sessions)
            .arg(&id)
            .arg(
                record
                    .caller
                    .map_or_else(|| "-".to_owned(), |caller| caller.hex()),
            );
        // The client is told of its session only once replicas have it. Run twice, the
        // script keeps the same record under the same id.
        let created: i64 = self
            .link
            .run_repeatable(Op::Replicated(script, &cmd))
            .await?;
        if created == 0 {
            return Err(StoreError::Full {
                max: self.max_sessions,
            });
        }
        Ok(id)
    }

    async fn renew(&self, id: &str, renewal: Renewal) -> Result<Option<SessionRecord>, StoreError> {
        let (lease, tracked) = self.cache.lease(id, &renewal, self.link.generation());
        if let Tracked::Start(serial) = tracked {
            self.start_tracking(serial);
        }
        let ticket = match lease {
            Lease::Hit { record, write } => {
                if write {
                    self.start_writer();
                }
                return Ok(Some(record));
            }
            Lease::Miss(ticket) => ticket,
        };
        let script = &self.scripts.renew;
        let cmd = self::renewal(script, id, &renewal);
        // Run twice, a use renews to the same expiry (its sequence moves on by one more).
        let renewed: Option<(Vec<u8>, u64)> =
            self.link.run_repeatable(Op::Script(script, &cmd)).await?;
        let record = renewed
            .map(|(blob, seq)| decode(&blob, seq, renewal.expires_at))
            .transpose()?;
        // Remembered only as renewed: a record bound to another caller was not.
        if let (Some(record), Some(ticket)) = (&record, ticket)
            && record.serves(renewal.caller)
        {
            self.cache.fill(id, record, ticket);
        }
        Ok(record)
    }

    async fn get(&self, id: &str, now: Millis) -> Result<Option<SessionRecord>, StoreError> {
        let script = &self.scripts.get;
        let mut cmd = evalsha(script, &[&session_key(id), &expiry_key(), &uses_key(id)]);
        cmd.arg(now).arg(id);
        let found: Option<(Vec<u8>, u64)> =
            self.link.run_repeatable(Op::Script(script, &cmd)).await?;
        // The exact expiry is not needed by `get`'s callers; "live" is.
        found
            .map(|(blob, seq)| decode(&blob, seq, now.saturating_add(1)))
            .transpose()
    }

    async fn remove(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let script = &self.scripts.remove;
        let mut cmd = evalsha(script, &[&session_key(id), &expiry_key(), &uses_key(id)]);
        cmd.arg(id);
        // A deletion the client was told of must not come back with a failover. Not
        // repeated: run twice, it would say the session never existed.
        let removed = self.link.run(Op::Replicated(script, &cmd)).await;
        // Whatever the answer: the other workers hear of it from Redis, if it happened.
        self.cache.forget(id);
        let removed: Option<(Vec<u8>, u64)> = removed?;
        if removed.is_some() {
            self.reported_everywhere().await;
        }
        removed.map(|(blob, seq)| decode(&blob, seq, 0)).transpose()
    }

    async fn reroute(&self, id: &str, change: Reroute<'_>) -> Result<bool, StoreError> {
        let Reroute { from, to } = change;
        // The record's other fields come along: read it, then swap it in one script.
        let Some(current) = self.get(id, 0).await? else {
            return Ok(false);
        };
        let blob = encode(&current.upstream, to, Some(&current))?;
        let script = &self.scripts.reroute;
        let mut cmd = evalsha(script, &[&session_key(id)]);
        cmd.arg(from.unwrap_or(""))
            .arg(blob)
            .arg(to.upstream_session.as_deref().unwrap_or(""));
        // Not repeated: a compare-and-swap run twice says another did it.
        let done = self.link.run(Op::Script(script, &cmd)).await;
        self.cache.forget(id);
        let done: i64 = done?;
        if done == 1 {
            self.reported_everywhere().await;
        }
        Ok(done == 1)
    }

    async fn take_expired(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        let script = &self.scripts.take_expired;
        let mut cmd = evalsha(script, &[&expiry_key()]);
        cmd.arg(now)
            .arg(limit)
            .arg(session_prefix())
            .arg(format!("{PREFIX}q:"));
        // Not repeated: what a lost answer claimed would never be ended.
        let flat: Vec<redis::Value> = self.link.run(Op::Script(script, &cmd)).await?;
        let mut out = Vec::with_capacity(flat.len() / 3);
        for triple in flat.chunks_exact(3) {
            let unreadable = |e: redis::ParsingError| StoreError::Unavailable(e.to_string());
            let id: String = redis::from_redis_value_ref(&triple[0]).map_err(unreadable)?;
            let blob: Vec<u8> = redis::from_redis_value_ref(&triple[1]).map_err(unreadable)?;
            let seq: u64 = redis::from_redis_value_ref(&triple[2]).unwrap_or(0);
            match decode(&blob, seq, now) {
                Ok(record) => out.push((id, record)),
                Err(e) => tracing::warn!(error = %e, "an expired session record could not be read"),
            }
        }
        Ok(out)
    }

    async fn list(&self, limit: usize) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        let last = isize::try_from(limit)
            .unwrap_or(isize::MAX)
            .saturating_sub(1);
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(expiry_key()).arg(0).arg(last).arg("WITHSCORES");
        let ids: Vec<(String, u64)> = self.link.run_repeatable(Op::Cmd(&cmd)).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, _) in &ids {
            pipe.cmd("HMGET").arg(session_key(id)).arg("r").arg("q");
            pipe.cmd("GET").arg(uses_key(id));
        }
        let rows: Vec<Value> = self.link.run_repeatable(Op::Pipeline(&pipe)).await?;
        Ok(ids
            .into_iter()
            .zip(rows.chunks_exact(2))
            .filter_map(|((id, expires_at), row)| {
                let (blob, before): (Option<Vec<u8>>, Option<u64>) =
                    redis::from_redis_value_ref(&row[0]).ok()?;
                let uses: Option<u64> = redis::from_redis_value_ref(&row[1]).ok()?;
                let seq = before.unwrap_or(0) + uses.unwrap_or(0);
                let record = decode(&blob?, seq, expires_at).ok()?;
                Some((id, record))
            })
            .collect())
    }

    async fn count(&self) -> Result<Option<usize>, StoreError> {
        let mut cmd = redis::cmd("ZCARD");
        cmd.arg(expiry_key());
        self.link.run_repeatable(Op::Cmd(&cmd)).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of upstream `alpha` with `caller` (also the cache's tests').
    pub(super) fn record(caller: Option<Caller>) -> SessionRecord {
        SessionRecord {
            upstream: "alpha".into(),
            backing: Backing {
                replica: 7,
                upstream_session: Some("up-1".into()),
                negotiated: Arc::new(Negotiated {
                    protocol_version: "2025-11-25",
                    server_info: RawValue::from_string(r#"{"name":"s"}"#.into()).unwrap(),
                    capabilities: RawValue::from_string("{}".into()).unwrap(),
                    instructions: None,
                }),
                owner: None,
            },
            created_at: 1,
            expires_at: 2,
            seq: 0,
            client_era: ClientEra::DataLayer,
            client: None,
            caller,
        }
    }

    #[test]
    fn a_record_keeps_the_clients_era_and_reads_the_records_of_earlier_builds() {
        for era in [
            ClientEra::Legacy,
            ClientEra::DataLayer,
            ClientEra::Sep1364,
            ClientEra::Modern,
        ] {
            let r = SessionRecord {
                client_era: era,
                ..record(None)
            };
            let blob = encode(&r.upstream, &r.backing, Some(&r)).unwrap();
            assert_eq!(decode(&blob, 3, 9).unwrap().client_era, era);
            // An earlier build reads `l` alone: still true for an old client's session.
            let text: serde_json::Value = serde_json::from_slice(&blob).unwrap();
            assert_eq!(text["l"], era == ClientEra::Legacy, "{text}");
        }
        // Records an earlier build wrote: `l` only, or nothing (not legacy).
        let old = |l: &str| {
            format!(
                r#"{{"u":"alpha","r":7,"s":"up-1","v":"2025-11-25","i":{{"name":"s"}},"c":{{}},"t":1{l}}}"#
            )
        };
        let legacy = decode(old(r#","l":true"#).as_bytes(), 0, 2).unwrap();
        assert_eq!(legacy.client_era, ClientEra::Legacy);
        assert_eq!(legacy.backing.upstream_session.as_deref(), Some("up-1"));
        for l in [r#","l":false"#, ""] {
            let record = decode(old(l).as_bytes(), 0, 2).unwrap();
            assert_eq!(record.client_era, ClientEra::DataLayer, "{l}");
        }
        // A word a later build writes falls back to what `l` says.
        let later = decode(old(r#","l":true,"e":"2027""#).as_bytes(), 0, 2).unwrap();
        assert_eq!(later.client_era, ClientEra::Legacy);
    }

    #[test]
    fn a_record_keeps_the_caller_it_is_bound_to() {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, "Bearer a".parse().unwrap());
        for caller in [None, Some(Caller::ANONYMOUS), Some(Caller::of(&headers))] {
            let r = record(caller);
            let blob = encode(&r.upstream, &r.backing, Some(&r)).unwrap();
            assert_eq!(decode(&blob, 3, 9).unwrap().caller, caller);
        }
        // Redis keeps the hash, never the credentials.
        let bound = record(Some(Caller::of(&headers)));
        let blob = encode(&bound.upstream, &bound.backing, Some(&bound)).unwrap();
        let text = String::from_utf8(blob).unwrap();
        assert!(!text.contains("Bearer"), "{text}");
    }
}
