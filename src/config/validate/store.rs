//! `session.store` and the keys each store needs: the Redis servers (one URL, or the
//! sentinels and the name of the primary they watch), their credentials and timeouts,
//! the sealing keys.

use std::time::Duration;

use redis::IntoConnectionInfo;

use super::super::raw::{RawConfig, RawSession};
use super::super::{
    OnSessionLost, RedisConfig, RedisServers, Secret, StoreConfig, Target, UpstreamDef,
    without_password,
};
use super::{Problems, decode_hex};

/// The URL schemes of a Redis server.
const SCHEMES: [&str; 4] = ["redis://", "rediss://", "unix://", "redis+unix://"];

/// `session.store` and what it needs.
pub(super) fn store(
    p: &mut Problems,
    raw: &RawConfig,
    own: &Target,
    on_session_lost: OnSessionLost,
    upstreams: &[UpstreamDef],
) -> StoreConfig {
    let s = &raw.session;
    let store = match s.store.trim() {
        "memory" => StoreConfig::Memory,
        "redis" => redis(p, s).map_or(StoreConfig::Memory, StoreConfig::Redis),
        "sealed" => {
            let mut keys = Vec::new();
            for (i, key) in s.sealed_keys.iter().enumerate() {
                match decode_hex(key.trim()) {
                    Some(bytes) if bytes.len() == 32 => keys.push(Secret(bytes)),
                    _ => p.add(&format!("session.sealed_keys[{i}]"), "must be exactly 64 hexadecimal digits (32 bytes), e.g. the output of `openssl rand -hex 32`"),
                }
            }
            if s.sealed_keys.is_empty() {
                p.add("session.sealed_keys", "session.store = \"sealed\" needs at least one key (64 hex digits; the first seals, every one opens)");
            }
            let own_used = !matches!(own, Target::Embedded) || upstreams.is_empty();
            let reinitializing = own_used && on_session_lost == OnSessionLost::Reinitialize
                || upstreams.iter().any(|u| {
                    u.overrides.on_session_lost.unwrap_or(on_session_lost)
                        == OnSessionLost::Reinitialize
                });
            if reinitializing {
                p.add("session.store", "on_session_lost = \"reinitialize\" needs a store (memory or redis): a sealed sessionId cannot be pointed at a new upstream session");
            }
            StoreConfig::Sealed { keys }
        }
        other => {
            p.add(
                "session.store",
                format!("{other:?} must be \"memory\", \"redis\" or \"sealed\""),
            );
            StoreConfig::Memory
        }
    };
    if s.store.trim() == "redis" && s.state_key.is_none() {
        p.add("session.state_key", "session.store = \"redis\" needs a state_key shared by every proxy replica (64 hex digits), so that each accepts the others' session state");
    }
    store
}

/// The most sessions `session.redis_cache_sessions` lets a worker thread keep in memory.
const MAX_CACHE_SESSIONS: usize = 10_000_000;

/// The `session.redis_*` keys, for `store = "redis"`.
fn redis(p: &mut Problems, s: &RawSession) -> Option<RedisConfig> {
    let url = s
        .redis_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    let master_name = s
        .redis_master_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    let username = s.redis_username.clone().filter(|u| !u.is_empty());
    let password = s.redis_password.clone().filter(|p| !p.is_empty());
    let servers = match (url, s.redis_sentinels.is_empty()) {
        (Some(_), false) => {
            p.add("session.redis_sentinels", "give either session.redis_url (one Redis server) or session.redis_sentinels (the sentinels watching a primary and its replicas), not both");
            None
        }
        (None, true) => {
            p.add("session.redis_url", "session.store = \"redis\" needs the server's URL, e.g. \"redis://127.0.0.1:6379/0\", or session.redis_sentinels and session.redis_master_name for a primary that Redis Sentinel watches");
            None
        }
        (Some(url), true) => {
            let info = connection_info(p, "session.redis_url", url);
            if let Some(info) = info.as_ref().map(redis::ConnectionInfo::redis_settings) {
                if info.username().is_some() && username.is_some() {
                    p.add(
                        "session.redis_username",
                        "the user is already in session.redis_url; give it once",
                    );
                }
                if info.password().is_some() && password.is_some() {
                    p.add(
                        "session.redis_password",
                        "a password is already in session.redis_url; give it once",
                    );
                }
            }
            if s.redis_db.is_some() {
                p.add("session.redis_db", "with session.redis_url the database is the URL's path (redis://host:6379/2); session.redis_db is for sentinels");
            }
            if master_name.is_some() {
                p.add("session.redis_master_name", "names the primary that session.redis_sentinels watch; with session.redis_url there are none");
            }
            Some(RedisServers::Server {
                url: url.to_owned(),
            })
        }
        (None, false) => {
            let mut sentinels = Vec::new();
            for (i, sentinel) in s.redis_sentinels.iter().enumerate() {
                let key = format!("session.redis_sentinels[{i}]");
                let sentinel = sentinel.trim();
                if let Some(info) = connection_info(p, &key, sentinel) {
                    if info.redis_settings().db() != 0 {
                        p.add(&key, "a sentinel has no databases: drop the URL's path (session.redis_db chooses the primary's)");
                    }
                    sentinels.push(sentinel.to_owned());
                }
            }
            if master_name.is_none() {
                p.add("session.redis_master_name", "session.redis_sentinels needs the name the sentinels know the primary by (their `sentinel monitor NAME …` line), e.g. \"mymaster\"");
            }
            Some(RedisServers::Sentinel {
                sentinels,
                master_name: master_name.unwrap_or_default().to_owned(),
            })
        }
    };
    let sentinels = matches!(servers, Some(RedisServers::Sentinel { .. }));
    let db = match s.redis_db {
        None => 0,
        Some(db) => i64::try_from(db).unwrap_or_else(|_| {
            p.add("session.redis_db", format!("{db} is not a database number"));
            0
        }),
    };
    let timeout = p.duration(
        "session.redis_timeout",
        &s.redis_timeout,
        Duration::from_millis(10),
    );
    let wait_replicas = match s.redis_wait_replicas {
        None => usize::from(sentinels),
        Some(n) if n > 64 => {
            p.add(
                "session.redis_wait_replicas",
                format!("{n} is too many; at most 64 (0: writes do not wait for replicas)"),
            );
            0
        }
        Some(n) => usize::try_from(n).unwrap_or(0),
    };
    // `WAIT n 0` would block forever: at least a millisecond.
    let wait_timeout = p.duration(
        "session.redis_wait_timeout",
        &s.redis_wait_timeout,
        Duration::from_millis(1),
    );
    if wait_replicas > 0 && wait_timeout >= timeout {
        p.add(
            "session.redis_wait_timeout",
            format!(
                "{} must be shorter than session.redis_timeout ({}): a write that waits for its replicas is one operation",
                humantime::format_duration(wait_timeout),
                humantime::format_duration(timeout)
            ),
        );
    }
    let cache_sessions = match usize::try_from(s.redis_cache_sessions) {
        Ok(n) if n <= MAX_CACHE_SESSIONS => n,
        _ => {
            p.add(
                "session.redis_cache_sessions",
                format!(
                    "{} is too many; at most {MAX_CACHE_SESSIONS} per worker thread (0: every use asks Redis)",
                    s.redis_cache_sessions
                ),
            );
            0
        }
    };
    Some(RedisConfig {
        servers: servers?,
        cache_sessions,
        username,
        password: password.map(|p| Secret(p.into_bytes())),
        db,
        timeout,
        wait_replicas,
        wait_timeout,
    })
}

/// `url` read as the Redis client will read it, or a problem with `key`.
fn connection_info(p: &mut Problems, key: &str, url: &str) -> Option<redis::ConnectionInfo> {
    let shown = without_password(url);
    if !SCHEMES.iter().any(|s| url.starts_with(s)) {
        p.add(
            key,
            format!("{shown:?} must be a Redis URL such as \"redis://127.0.0.1:6379/0\""),
        );
        return None;
    }
    match url.into_connection_info() {
        Ok(info) => Some(info),
        Err(e) => {
            p.add(
                key,
                format!("{shown:?} is not a Redis URL this proxy can use ({e}); write e.g. \"redis://127.0.0.1:6379/0\""),
            );
            None
        }
    }
}
