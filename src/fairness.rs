//! Fairness between callers: how many upstream sessions one caller may hold at once
//! (`session.max_sessions_per_caller`), how many it may open a minute
//! (`session.creations_per_caller_per_minute`), and — for sessions bound to it at one
//! upstream (session handles) — how many of those (`stateless.max_handles_per_caller`).
//! One table of accounts does all three, so that no caller can take every place under
//! the proxy's own caps and leave the others with nothing.
//!
//! A caller ([`CallerKey`]: a verified subject, else the client's network — never
//! credentials the proxy did not verify, which cost a client nothing to make up) takes a
//! [`Place`] before anything is opened for it; the place
//! goes back when dropped, unless it became a session ([`Place::admitted`]), which is
//! then counted until [`Fairness::ended`] says it ended. Whoever keeps an upstream session
//! for a caller without a session record (a pinned session) keeps the place itself.
//!
//! Counts are this process's: the places it gave and the sessions it admitted, until it
//! sees them end. With the memory store that is exact. With a store shared by proxy
//! replicas (Redis, sealed ids) a session may end at another replica, which this one
//! never hears of, so a session is also let go of once its expiry — as this process last
//! renewed it — passes (`by_expiry`); a caller spreading its sessions over several
//! replicas may hold up to the cap at each, and open up to the rate at each.
//!
//! Memory is bounded: an account lives while its caller holds something here or its
//! bucket is refilling (at most a minute after its last creation); [`Fairness::sweep`]
//! drops the rest. At most `max_callers` accounts exist; a new caller beyond that first
//! makes the sweep run, then forgets callers holding nothing (their buckets start full
//! again), and is refused only if every account still holds a session.
//!
//! Knows nothing of HTTP, stores or upstreams: a session is an id, an upstream a name.

mod in_flight;

pub use in_flight::{Held, InFlight};

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::mcp::caller::CallerKey;
use crate::minted;
use crate::throttle::Throttle;

/// The longest `Retry-After` hinted to a caller at its cap on sessions: a place comes
/// back when the caller deletes a session, which no clock foretells, or when one expires.
const MAX_SESSIONS_HINT: Duration = Duration::from_secs(60);

/// The fewest accounts kept before callers are forgotten (see the module documentation).
pub const MIN_TRACKED_CALLERS: usize = 65_536;

/// The limits, each `0` when off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Upstream sessions one caller may hold at once.
    pub max_sessions: usize,
    /// New upstream sessions one caller may open a minute; as many at once after a quiet
    /// minute.
    pub per_minute: u32,
    /// Callers tracked at once (not off: see [`MIN_TRACKED_CALLERS`]).
    pub max_callers: usize,
}

/// Why a caller was refused a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It holds `max` sessions (`session.max_sessions_per_caller`); `retry_after`: when
    /// its first session would expire if left unused, at most a minute.
    Sessions { max: usize, retry_after: Duration },
    /// It opened its `per_minute` sessions (`session.creations_per_caller_per_minute`);
    /// `retry_after`: when the next may open.
    Rate {
        per_minute: u32,
        retry_after: Duration,
    },
    /// It holds `max` sessions bound to it at this upstream
    /// (`stateless.max_handles_per_caller`).
    Bound { max: usize },
    /// `max` callers hold sessions here already: no account for another.
    Callers { max: usize },
}

impl Refused {
    /// The configuration key of the limit, as errors and metrics name it.
    pub fn key(&self) -> &'static str {
        match self {
            Refused::Sessions { .. } => "session.max_sessions_per_caller",
            Refused::Rate { .. } => "session.creations_per_caller_per_minute",
            Refused::Bound { .. } => "stateless.max_handles_per_caller",
            Refused::Callers { .. } => "tracked_callers",
        }
    }

    /// The limit's value.
    pub fn max(&self) -> u64 {
        match *self {
            Refused::Sessions { max, .. } | Refused::Bound { max } | Refused::Callers { max } => {
                max as u64
            }
            Refused::Rate { per_minute, .. } => u64::from(per_minute),
        }
    }

    /// How long the caller should wait before trying again, in whole seconds (at least 1).
    pub fn retry_after(&self) -> Duration {
        match *self {
            Refused::Sessions { retry_after, .. } | Refused::Rate { retry_after, .. } => {
                retry_after
            }
            Refused::Bound { .. } | Refused::Callers { .. } => Duration::from_secs(1),
        }
    }
}

/// The time, on both clocks the limits read: the monotonic one for rates, and
/// milliseconds since the Unix epoch for expiries (as session records keep them).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub at: Instant,
    pub ms: u64,
}

impl Now {
    /// The monotonic clock now, and `ms` (the wall clock now, as the caller read it).
    pub fn current(ms: u64) -> Now {
        Now {
            at: Instant::now(),
            ms,
        }
    }
}

/// Which upstream's bound sessions a place counts against, and the most one caller may
/// hold there.
#[derive(Debug, Clone)]
pub struct BoundAt {
    pub upstream: Arc<str>,
    pub max: usize,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Fairness {
    limits: Limits,
    /// Sessions may end where this process does not see it: let go of them at expiry.
    by_expiry: bool,
    accounts: DashMap<CallerKey, Account>,
    /// Whose each counted session is (to find its account when it ends or is renewed).
    owners: minted::SharedMap<Box<str>, CallerKey>,
}

#[derive(Debug)]
struct Account {
    /// `None` when creations are not limited.
    bucket: Option<Throttle>,
    /// Places taken and not (yet) sessions: sessions being opened, pinned sessions. Each
    /// names the upstream whose bound sessions it counts against, if any.
    held: Vec<Option<Arc<str>>>,
    /// Sessions admitted and counted: their expiry as last seen here, and the upstream
    /// they are bound at, if any.
    live: minted::Map<Box<str>, Live>,
}

#[derive(Debug)]
struct Live {
    expires_at: u64,
    bound_at: Option<Arc<str>>,
}

impl Account {
    fn holds(&self) -> usize {
        self.held.len() + self.live.len()
    }

    fn holds_nothing(&self) -> bool {
        self.held.is_empty() && self.live.is_empty()
    }

    /// Nothing held, bucket full: forgetting it changes nothing.
    fn is_idle(&self, now: Instant) -> bool {
        self.holds_nothing() && self.bucket.as_ref().is_none_or(|b| b.is_full_at(now))
    }

    fn bound_at(&self, upstream: &str) -> usize {
        let held = self.held.iter().flatten().filter(|u| &***u == upstream);
        let live = self.live.values().filter_map(|l| l.bound_at.as_deref());
        held.count() + live.filter(|u| *u == upstream).count()
    }

    /// Lets go of sessions whose expiry passed; returns their ids.
    fn expire(&mut self, now_ms: u64) -> Vec<Box<str>> {
        let gone: Vec<Box<str>> = self
            .live
            .iter()
            .filter(|(_, live)| live.expires_at <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.live.remove(id);
        }
        gone
    }

    fn release(&mut self, bound_at: &Option<Arc<str>>) {
        if let Some(i) = self.held.iter().position(|held| held == bound_at) {
            self.held.swap_remove(i);
        }
    }
}

impl Fairness {
    /// `by_expiry`: sessions may end where this process does not see it (a store shared
    /// by replicas).
    pub fn new(limits: Limits, by_expiry: bool) -> Arc<Fairness> {
        Arc::new(Fairness {
            limits,
            by_expiry,
            accounts: DashMap::new(),
            owners: minted::SharedMap::default(),
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether sessions are counted one by one (a cap applies to them).
    fn counts(&self, bound_at: Option<&BoundAt>) -> bool {
        self.limits.max_sessions > 0 || bound_at.is_some()
    }

    /// A place for a new upstream session of `caller` (`None`: nobody's to count), or the
    /// limit it is over. Checked in this order: the caps (nothing is spent on a refusal),
    /// then the rate (a token is spent on every place given, whatever becomes of it).
    pub fn take(
        self: &Arc<Self>,
        caller: Option<CallerKey>,
        bound_at: Option<&BoundAt>,
        now: Now,
    ) -> Result<Place, Refused> {
        let tag = bound_at.map(|b| b.upstream.clone());
        let untracked = Place {
            fairness: self.clone(),
            caller: None,
            bound_at: tag.clone(),
        };
        let Some(caller) = caller else {
            return Ok(untracked);
        };
        if !self.counts(bound_at) && self.limits.per_minute == 0 {
            return Ok(untracked);
        }
        if !self.accounts.contains_key(&caller) && self.accounts.len() >= self.limits.max_callers {
            self.make_room(now);
            if self.accounts.len() >= self.limits.max_callers {
                return Err(Refused::Callers {
                    max: self.limits.max_callers,
                });
            }
        }
        let (taken, expired) = {
            let mut account = self.accounts.entry(caller).or_insert_with(|| Account {
                bucket: (self.limits.per_minute > 0)
                    .then(|| Throttle::per_minute(self.limits.per_minute)),
                held: Vec::new(),
                live: minted::Map::default(),
            });
            let expired = if self.by_expiry {
                account.expire(now.ms)
            } else {
                Vec::new()
            };
            (
                self.take_in(&mut account, bound_at, tag.clone(), now),
                expired,
            )
        };
        for id in expired {
            self.owners.remove(&id);
        }
        match taken {
            Ok(()) => Ok(Place {
                fairness: self.clone(),
                caller: Some(caller),
                bound_at: tag,
            }),
            Err(refused) => {
                self.accounts
                    .remove_if(&caller, |_, account| account.is_idle(now.at));
                Err(refused)
            }
        }
    }

    fn take_in(
        &self,
        account: &mut Account,
        bound_at: Option<&BoundAt>,
        tag: Option<Arc<str>>,
        now: Now,
    ) -> Result<(), Refused> {
        let max = self.limits.max_sessions;
        if max > 0 && account.holds() >= max {
            let first_expiry = account.live.values().map(|l| l.expires_at).min();
            let hint = first_expiry.map_or(MAX_SESSIONS_HINT, |at| {
                Duration::from_millis(at.saturating_sub(now.ms))
            });
            return Err(Refused::Sessions {
                max,
                retry_after: whole_seconds(hint.min(MAX_SESSIONS_HINT)),
            });
        }
        if let Some(bound) = bound_at
            && account.bound_at(&bound.upstream) >= bound.max
        {
            return Err(Refused::Bound { max: bound.max });
        }
        if let Some(bucket) = &mut account.bucket
            && bucket.admit_at(now.at).is_none()
        {
            return Err(Refused::Rate {
                per_minute: self.limits.per_minute,
                retry_after: whole_seconds(bucket.wait_at(now.at)),
            });
        }
        account.held.push(tag);
        Ok(())
    }

    /// Session `id` was used here, and now expires at `expires_at` (ms).
    pub fn renewed(&self, id: &str, expires_at: u64) {
        let Some(caller) = self.owners.get(id).map(|owner| *owner) else {
            return;
        };
        if let Some(mut account) = self.accounts.get_mut(&caller)
            && let Some(live) = account.live.get_mut(id)
        {
            live.expires_at = expires_at;
        }
    }

    /// Session `id` ended: its caller's place is free.
    pub fn ended(&self, id: &str, now: Instant) {
        let Some((_, caller)) = self.owners.remove(id) else {
            return;
        };
        self.accounts.remove_if_mut(&caller, |_, account| {
            account.live.remove(id);
            account.is_idle(now)
        });
    }

    /// Forgets accounts holding nothing whose bucket is full again, and — with a shared
    /// store — sessions whose expiry passed. Run periodically (the session reaper).
    pub fn sweep(&self, now: Now) {
        let mut expired = Vec::new();
        self.accounts.retain(|_, account| {
            if self.by_expiry {
                expired.extend(account.expire(now.ms));
            }
            !account.is_idle(now.at)
        });
        for id in expired {
            self.owners.remove(&id);
        }
    }

    /// The table is full: sweep, then forget callers holding nothing (their buckets too).
    fn make_room(&self, now: Now) {
        self.sweep(now);
        if self.accounts.len() >= self.limits.max_callers {
            self.accounts.retain(|_, account| !account.holds_nothing());
        }
    }

    /// Places and sessions `caller` holds, as this process counts them (all of them, or
    /// those bound at `upstream`).
    pub fn held_by(&self, caller: CallerKey, upstream: Option<&str>) -> usize {
        self.accounts
            .get(&caller)
            .map_or(0, |account| match upstream {
                Some(upstream) => account.bound_at(upstream),
                None => account.holds(),
            })
    }

    /// Callers tracked now.
    pub fn callers(&self) -> usize {
        self.accounts.len()
    }

    /// Sessions counted now, one by one.
    pub fn sessions(&self) -> usize {
        self.owners.len()
    }
}

/// A place taken for one upstream session of a caller; given back when dropped, unless
/// it became a session ([`Place::admitted`]).
#[derive(Debug)]
pub struct Place {
    fairness: Arc<Fairness>,
    /// `None`: not counted (nobody's, or nothing to count).
    caller: Option<CallerKey>,
    bound_at: Option<Arc<str>>,
}

impl Place {
    /// The place became session `id`, expiring at `expires_at` (ms): counted until
    /// [`Fairness::ended`] (or, with a shared store, its expiry).
    pub fn admitted(mut self, id: &str, expires_at: u64) {
        let Some(caller) = self.caller.take() else {
            return;
        };
        let fairness = self.fairness.clone();
        let counts = fairness.limits.max_sessions > 0 || self.bound_at.is_some();
        let Some(mut account) = fairness.accounts.get_mut(&caller) else {
            return;
        };
        account.release(&self.bound_at);
        if !counts {
            // Only its creation counted (the rate).
            drop(account);
            let now = Instant::now();
            fairness
                .accounts
                .remove_if(&caller, |_, account| account.is_idle(now));
            return;
        }
        let live = Live {
            expires_at,
            bound_at: self.bound_at.take(),
        };
        account.live.insert(id.into(), live);
        drop(account);
        fairness.owners.insert(id.into(), caller);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some(caller) = self.caller.take() else {
            return;
        };
        let now = Instant::now();
        let bound_at = &self.bound_at;
        self.fairness.accounts.remove_if_mut(&caller, |_, account| {
            account.release(bound_at);
            account.is_idle(now)
        });
    }
}

/// `d` rounded up to whole seconds, at least one (what `Retry-After` can say).
fn whole_seconds(d: Duration) -> Duration {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    Duration::from_secs(secs.max(1))
}

#[cfg(test)]
mod tests;
