//! Per-tool limits (`[[auth.limits]]`): how often each verified caller may call a tool
//! — `rate` calls per `per`, a token bucket per caller, limit and tool (a burst of
//! `rate`, then one call each `per / rate`); beyond it the call is refused with 429 and
//! when the next one may come — and how long a call of it may take (`timeout`, every
//! caller's; the front holds the call to it).
//!
//! Memory is bounded: a bucket is keyed by fixed-size hashes (the caller's, the
//! upstream's and tool's names), at most [`PER_CALLER`] per caller (one calling many
//! made-up tool names is refused itself, not everyone), at most [`MAX_BUCKETS`] in all.
//! A full bucket (no call for a whole `per`) holds nothing worth keeping and is swept
//! when the table fills (at most once a second); beyond the bound, a new bucket is
//! refused rather than given a fresh budget (only verified callers are counted).
//! Budgets are this replica's.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::policy::matches;

/// The most buckets kept at once.
pub const MAX_BUCKETS: usize = 100_000;
/// The most buckets one caller holds.
pub const PER_CALLER: usize = 256;

/// One limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The upstream's name, or `*`.
    pub upstream: String,
    /// Names or `prefix*` patterns.
    pub tools: Vec<String>,
    /// Calls allowed per `per` (the burst); 0: the limit counts no calls.
    pub rate: u32,
    pub per: Duration,
    /// How long a call may take, whole answer included.
    pub timeout: Option<Duration>,
}

impl Limit {
    fn covers(&self, upstream: &str, tool: &str) -> bool {
        (self.upstream == "*" || self.upstream == upstream)
            && self.tools.iter().any(|p| matches(p, tool))
    }
}

/// Why a call was refused: the limit, and when the next call may come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    pub rate: u32,
    pub per: Duration,
    pub retry_after: Duration,
}

/// A limit's index, a caller's hash, the upstream's and tool's names hashed.
type BucketKey = (usize, [u8; 16], [u8; 16]);

/// What a bucket counts besides its limit and caller: the upstream and tool, hashed
/// (a client's tool name may be long; the key stays small).
fn counted(upstream: &str, tool: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(upstream.as_bytes())
        .chain_update([0])
        .chain_update(tool.as_bytes())
        .finalize();
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The limits and their buckets.
#[derive(Debug, Default)]
pub struct Rates {
    limits: Vec<Limit>,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    buckets: HashMap<BucketKey, Bucket>,
    /// Buckets held per caller.
    held: HashMap<[u8; 16], usize>,
    /// When the table was last swept.
    swept: Option<Instant>,
}

impl Rates {
    pub fn new(limits: Vec<Limit>) -> Rates {
        Rates {
            limits,
            table: Mutex::new(Table::default()),
        }
    }

    /// Whether any limit counts calls.
    pub fn is_active(&self) -> bool {
        self.limits.iter().any(|l| l.rate > 0)
    }

    /// How long a call of `tool` at `upstream` may take: the shortest `timeout` of the
    /// limits covering it.
    pub fn timeout(&self, upstream: &str, tool: &str) -> Option<Duration> {
        self.limits
            .iter()
            .filter(|l| l.covers(upstream, tool))
            .filter_map(|l| l.timeout)
            .min()
    }

    /// The limits counted.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// Takes a call of `tool` at `upstream` from the caller whose hash is `caller`, or
    /// says when the next may come (every limit covering the tool must have room).
    pub fn take(&self, upstream: &str, tool: &str, caller: [u8; 16]) -> Result<(), Exceeded> {
        self.take_at(upstream, tool, caller, Instant::now())
    }

    fn take_at(
        &self,
        upstream: &str,
        tool: &str,
        caller: [u8; 16],
        now: Instant,
    ) -> Result<(), Exceeded> {
        let covering: Vec<(usize, &Limit)> = self
            .limits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.rate > 0 && l.covers(upstream, tool))
            .collect();
        if covering.is_empty() {
            return Ok(());
        }
        let counted = counted(upstream, tool);
        let mut table = self.table.lock();
        let table = &mut *table;
        if table.buckets.len() + covering.len() > MAX_BUCKETS
            && table
                .swept
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            table.swept = Some(now);
            let limits = &self.limits;
            let held = &mut table.held;
            table.buckets.retain(|(limit, caller, _), bucket| {
                let keep = limits
                    .get(*limit)
                    .is_some_and(|l| now.duration_since(bucket.at) < l.per);
                if !keep && let Some(count) = held.get_mut(caller) {
                    *count = count.saturating_sub(1);
                }
                keep
            });
            held.retain(|_, count| *count > 0);
        }
        // Every covering limit must have a token before any is taken.
        let mut refused: Option<Exceeded> = None;
        let mut new_buckets = 0;
        for (index, limit) in &covering {
            let tokens = match table.buckets.get(&(*index, caller, counted)) {
                Some(bucket) => refill(bucket, limit, now),
                None => {
                    new_buckets += 1;
                    let room = table.buckets.len() + new_buckets <= MAX_BUCKETS
                        && table.held.get(&caller).copied().unwrap_or(0) + new_buckets
                            <= PER_CALLER;
                    if room { f64::from(limit.rate) } else { 0.0 }
                }
            };
            if tokens < 1.0 {
                let each = limit.per.as_secs_f64() / f64::from(limit.rate.max(1));
                // In whole seconds, rounded up: Retry-After says seconds.
                let wait = Duration::from_secs(((1.0 - tokens) * each).max(0.0).ceil() as u64);
                let exceeded = Exceeded {
                    rate: limit.rate,
                    per: limit.per,
                    retry_after: wait.max(Duration::from_secs(1)),
                };
                refused = Some(match refused {
                    Some(r) if r.retry_after >= exceeded.retry_after => r,
                    _ => exceeded,
                });
            }
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        for (index, limit) in covering {
            let key = (index, caller, counted);
            let tokens = match table.buckets.get(&key) {
                Some(bucket) => refill(bucket, limit, now),
                None => {
                    *table.held.entry(caller).or_default() += 1;
                    f64::from(limit.rate)
                }
            };
            table.buckets.insert(
                key,
                Bucket {
                    tokens: tokens - 1.0,
                    at: now,
                },
            );
        }
        Ok(())
    }
}

/// The tokens `bucket` holds at `now`.
fn refill(bucket: &Bucket, limit: &Limit, now: Instant) -> f64 {
    let per_second = f64::from(limit.rate) / limit.per.as_secs_f64().max(f64::EPSILON);
    let elapsed = now.duration_since(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * per_second).min(f64::from(limit.rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_naming_tool_after_tool_is_refused_itself_not_everyone() {
        let rates = Rates::new(vec![Limit {
            upstream: "*".into(),
            tools: vec!["*".into()],
            rate: 5,
            per: Duration::from_secs(60),
            timeout: None,
        }]);
        let now = Instant::now();
        for i in 0..PER_CALLER {
            assert!(
                rates
                    .take_at("u", &format!("made-up-{i}"), [9; 16], now)
                    .is_ok()
            );
        }
        assert!(rates.take_at("u", "one-more", [9; 16], now).is_err());
        assert!(
            rates.take_at("u", "one-more", [8; 16], now).is_ok(),
            "another caller"
        );
    }

    #[test]
    fn a_caller_gets_its_burst_then_one_call_per_interval_and_others_their_own() {
        let rates = Rates::new(vec![Limit {
            upstream: "*".into(),
            tools: vec!["search".into(), "get_*".into()],
            rate: 2,
            per: Duration::from_secs(60),
            timeout: None,
        }]);
        let (alice, bob) = ([1; 16], [2; 16]);
        let start = Instant::now();
        assert!(rates.take_at("gh", "search", alice, start).is_ok());
        assert!(rates.take_at("gh", "search", alice, start).is_ok());
        let refused = rates.take_at("gh", "search", alice, start).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(30));
        // Another tool, another caller, a tool no limit covers: their own budgets.
        assert!(rates.take_at("gh", "get_issue", alice, start).is_ok());
        assert!(rates.take_at("gh", "search", bob, start).is_ok());
        assert!(rates.take_at("gh", "delete", alice, start).is_ok());
        // Half a minute later, one more.
        let later = start + Duration::from_secs(30);
        assert!(rates.take_at("gh", "search", alice, later).is_ok());
        assert!(rates.take_at("gh", "search", alice, later).is_err());
    }

    #[test]
    fn a_call_gets_the_shortest_timeout_covering_it_and_a_timeout_alone_counts_nothing() {
        let limit = |upstream: &str, tools: &[&str], rate, secs: Option<u64>| Limit {
            upstream: upstream.into(),
            tools: tools.iter().map(|t| t.to_string()).collect(),
            rate,
            per: Duration::from_secs(60),
            timeout: secs.map(Duration::from_secs),
        };
        let rates = Rates::new(vec![
            limit("*", &["slow_*"], 0, Some(30)),
            limit("gh", &["slow_build"], 0, Some(5)),
            limit("gh", &["search"], 1, None),
        ]);
        assert_eq!(
            rates.timeout("gh", "slow_build"),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            rates.timeout("other", "slow_build"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(rates.timeout("gh", "search"), None);
        let now = Instant::now();
        for _ in 0..10 {
            assert!(rates.take_at("gh", "slow_build", [1; 16], now).is_ok());
        }
        assert!(rates.take_at("gh", "search", [1; 16], now).is_ok());
        assert!(rates.take_at("gh", "search", [1; 16], now).is_err());
        let timeouts_only = Rates::new(vec![limit("*", &["*"], 0, Some(1))]);
        assert!(!timeouts_only.is_active());
    }
}
