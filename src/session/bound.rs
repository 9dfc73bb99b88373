//! Sessions bound to a caller (session handles), counted per upstream and caller so that
//! one caller cannot hold more than its share (`stateless.max_handles_per_caller`).
//!
//! The count is this process's, like `Sessions::live`: the places it reserved, and the
//! sessions it admitted until it sees them end (ended here, reaped here). With the memory
//! store that is exact: every end passes here. With a store shared by proxy replicas
//! (Redis, sealed ids) a session may end at another replica, which this one never hears
//! of: there the count also lets go of a session once its expiry — as this process last
//! renewed it — passes, at most `session.idle_ttl` after its last use here, so a caller is
//! never shut out by sessions that ended elsewhere; and a caller spreading its handles over
//! several replicas may hold up to the cap at each. Callers without credentials are nobody in
//! particular: they are not counted (the cap on every session bounds them).

use std::sync::Arc;

use dashmap::DashMap;

use super::record::Millis;
use crate::mcp::caller::Caller;

type Key = (Arc<str>, Caller);

/// See the module documentation.
#[derive(Debug)]
pub struct Bound {
    held: DashMap<Key, Held>,
    /// Sessions may end elsewhere (a shared store): let go of them at their expiry.
    by_expiry: bool,
}

#[derive(Debug, Default)]
struct Held {
    /// Places taken for sessions being opened.
    reserved: usize,
    /// Sessions admitted here: their id and the expiry this process last gave them.
    /// At most the cap of the upstream's callers.
    live: Vec<(Box<str>, Millis)>,
}

impl Held {
    fn count(&mut self, now: Option<Millis>) -> usize {
        if let Some(now) = now {
            self.live.retain(|(_, expires_at)| *expires_at > now);
        }
        self.reserved + self.live.len()
    }

    fn is_empty(&self) -> bool {
        self.reserved == 0 && self.live.is_empty()
    }
}

impl Bound {
    /// `by_expiry`: sessions may end where this process does not see it (a store shared
    /// by replicas).
    pub fn new(by_expiry: bool) -> Bound {
        Bound {
            held: DashMap::new(),
            by_expiry,
        }
    }

    /// The time expiries are judged at, when they are.
    fn judged(&self, now: Millis) -> Option<Millis> {
        self.by_expiry.then_some(now)
    }

    /// Takes a place for `caller` at `upstream` if it holds fewer than `max` there.
    pub fn reserve(&self, upstream: &Arc<str>, caller: Caller, max: usize, now: Millis) -> bool {
        if caller.is_anonymous() {
            return true;
        }
        let key = (upstream.clone(), caller);
        let taken = {
            let mut held = self.held.entry(key.clone()).or_default();
            let room = held.count(self.judged(now)) < max;
            if room {
                held.reserved += 1;
            }
            room
        };
        if !taken {
            self.held.remove_if(&key, |_, held| held.is_empty());
        }
        taken
    }

    /// A place reserved for a session that never came to be.
    pub fn unreserve(&self, upstream: &Arc<str>, caller: Caller) {
        if caller.is_anonymous() {
            return;
        }
        self.held
            .remove_if_mut(&(upstream.clone(), caller), |_, held| {
                held.reserved = held.reserved.saturating_sub(1);
                held.is_empty()
            });
    }

    /// The reserved place became session `id`, expiring at `expires_at`.
    pub fn admitted(&self, upstream: &Arc<str>, caller: Caller, id: &str, expires_at: Millis) {
        if caller.is_anonymous() {
            return;
        }
        let mut held = self.held.entry((upstream.clone(), caller)).or_default();
        held.reserved = held.reserved.saturating_sub(1);
        held.live.push((id.into(), expires_at));
    }

    /// Session `id` was used here: its expiry moves (a session admitted at another
    /// replica is not counted here).
    pub fn renewed(&self, upstream: &Arc<str>, caller: Caller, id: &str, expires_at: Millis) {
        if caller.is_anonymous() {
            return;
        }
        if let Some(mut held) = self.held.get_mut(&(upstream.clone(), caller))
            && let Some(entry) = held.live.iter_mut().find(|(held, _)| &**held == id)
        {
            entry.1 = expires_at;
        }
    }

    /// Session `id` ended.
    pub fn ended(&self, upstream: &Arc<str>, caller: Caller, id: &str) {
        if caller.is_anonymous() {
            return;
        }
        self.held
            .remove_if_mut(&(upstream.clone(), caller), |_, held| {
                held.live.retain(|(held, _)| &**held != id);
                held.is_empty()
            });
    }

    /// Lets go of sessions whose expiry passed (those that ended elsewhere), with a shared
    /// store.
    pub fn prune(&self, now: Millis) {
        if !self.by_expiry {
            return;
        }
        self.held.retain(|_, held| {
            held.count(Some(now));
            !held.is_empty()
        });
    }

    /// Sessions `caller` holds at `upstream`, as this process counts them.
    pub fn count(&self, upstream: &Arc<str>, caller: Caller, now: Millis) -> usize {
        self.held
            .get_mut(&(upstream.clone(), caller))
            .map_or(0, |mut held| held.count(self.judged(now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(token: &str) -> Caller {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, token.parse().unwrap());
        Caller::of(&headers)
    }

    #[test]
    fn with_a_shared_store_a_session_ended_elsewhere_is_let_go_of_at_its_expiry() {
        let bound = Bound::new(true);
        let up: Arc<str> = "alpha".into();
        let alice = caller("Bearer alice");
        assert!(bound.reserve(&up, alice, 1, 0));
        bound.admitted(&up, alice, "s1", 1_000);
        // Another replica ended it: nothing here hears of it.
        assert!(
            !bound.reserve(&up, alice, 1, 999),
            "counted until its expiry"
        );
        // Renewed here: counted longer.
        bound.renewed(&up, alice, "s1", 2_000);
        assert!(!bound.reserve(&up, alice, 1, 1_500));
        assert_eq!(bound.count(&up, alice, 1_999), 1);
        assert_eq!(bound.count(&up, alice, 2_000), 0);
        assert!(
            bound.reserve(&up, alice, 1, 2_000),
            "its place is free again"
        );
        bound.unreserve(&up, alice);
        // The reaper's prune forgets callers holding nothing.
        bound.admitted(&up, caller("Bearer bob"), "s2", 3_000);
        bound.prune(3_000);
        assert!(bound.held.is_empty());
    }

    #[test]
    fn with_the_memory_store_only_what_ends_here_frees_a_place() {
        let bound = Bound::new(false);
        let up: Arc<str> = "alpha".into();
        let alice = caller("Bearer alice");
        assert!(bound.reserve(&up, alice, 1, 0));
        bound.admitted(&up, alice, "s1", 1_000);
        // Expired, not yet reaped: still held (the reaper ends it, and says so).
        bound.prune(5_000);
        assert!(!bound.reserve(&up, alice, 1, 5_000));
        bound.ended(&up, alice, "s1");
        assert!(bound.reserve(&up, alice, 1, 5_000));
        bound.unreserve(&up, alice);
        assert!(bound.held.is_empty());
    }

    #[test]
    fn callers_without_credentials_are_not_counted() {
        let bound = Bound::new(true);
        let up: Arc<str> = "alpha".into();
        for _ in 0..3 {
            assert!(bound.reserve(&up, Caller::ANONYMOUS, 1, 0));
        }
        assert!(bound.held.is_empty());
    }
}
