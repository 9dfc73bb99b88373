//! Deleted sealed sessions: the ids that still open but must not be served.
//!
//! A sealed sessionId is its own record (`sealed`), so deleting it removes nothing: the id
//! opens as before, and an upstream that issued no session id, or that answered `DELETE`
//! with 405 (2025-11-25 "Session Management" lets a server refuse to end a session),
//! would go on serving it. So a delete *buries* the id here: a 128-bit hash of it (never
//! the id, which is a bearer secret) with the time until which it must stay refused. That
//! time is the deletion plus `session.idle_ttl` — the latest expiry any `state` issued
//! before the deletion can carry, since a `state` renews by at most the idle TTL from its
//! issue — plus [`SLACK`] for replicas that hear of it late and clocks that disagree.
//!
//! The set is bounded (`session.max_tombstones`): expired tombstones are swept as new ones
//! come, and at the bound the one closest to its end is dropped (and counted), since it
//! protects the shortest.
//!
//! What this replica buried is also kept in order in a bounded log with a sequence
//! number, so that whoever tells the other replicas (`paths::cluster`) can send each peer
//! what it has not had yet, and the deleting request can wait until the peers have it.
//! Tombstones learned from peers are kept, not logged again (no echo between peers).
//!
//! Knows nothing of the network: peers are `paths::cluster`'s business.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use super::record::Millis;
use crate::throttle::Throttle;

/// How long beyond the idle TTL a tombstone is kept: for replicas that hear of the
/// deletion late (they may have renewed the session meanwhile) and for clocks that differ.
pub const SLACK: Duration = Duration::from_secs(60);

/// A 128-bit hash of a sessionId.
pub type IdHash = [u8; 16];

/// One buried id: its hash, and until when (ms since the epoch) it stays refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tombstone {
    pub id: IdHash,
    pub until: Millis,
}

/// The buried ids of this replica (see the module documentation).
#[derive(Debug)]
pub struct Tombstones {
    inner: Mutex<Inner>,
    /// At most this many tombstones, and as many logged burials.
    max: usize,
    /// How long a buried id stays refused: the idle TTL plus [`SLACK`].
    keep: Duration,
    /// Tombstones dropped at the bound before their end.
    dropped: AtomicU64,
    /// The sequence number of the latest burial here.
    buried: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<IdHash, Millis>,
    /// The same, by end: sweeping and dropping at the bound take the first.
    by_end: BTreeSet<(Millis, IdHash)>,
    /// This replica's own burials, oldest first, with their sequence numbers.
    log: VecDeque<(u64, Tombstone)>,
    next_seq: u64,
    /// One warning per few seconds while tombstones are dropped at the bound.
    warnings: Option<Throttle>,
}

impl Tombstones {
    /// Keeps at most `max` tombstones, each for `idle_ttl` plus [`SLACK`].
    pub fn new(max: usize, idle_ttl: Duration) -> Tombstones {
        Tombstones {
            inner: Mutex::new(Inner {
                next_seq: 1,
                warnings: Some(Throttle::every(Duration::from_secs(5))),
                ..Inner::default()
            }),
            max: max.max(1),
            keep: idle_ttl + SLACK,
            dropped: AtomicU64::new(0),
            buried: watch::Sender::new(0),
        }
    }

    /// The hash naming sessionId `id`.
    pub fn hash(id: &str) -> IdHash {
        let mut hasher = Sha256::new();
        hasher.update(b"mcp-session-proxy/tombstone/v1\0");
        hasher.update(id.as_bytes());
        let mut out = [0u8; 16];
        out.copy_from_slice(&hasher.finalize()[..16]);
        out
    }

    /// Buries `id`, deleted here at `now`: refused until `now` + the idle TTL + [`SLACK`],
    /// and logged for the peers. Its sequence number.
    pub fn bury(&self, id: &str, now: Millis) -> u64 {
        let stone = Tombstone {
            id: Self::hash(id),
            until: now.saturating_add(self.keep.as_millis() as Millis),
        };
        let seq = {
            let mut inner = self.inner.lock();
            self.keep_one(&mut inner, stone, now);
            let seq = inner.next_seq;
            inner.next_seq += 1;
            if inner.log.len() >= self.max {
                inner.log.pop_front();
            }
            inner.log.push_back((seq, stone));
            seq
        };
        self.buried.send_replace(seq);
        seq
    }

    /// Keeps tombstones a peer buried (not logged again: the peer tells the others).
    pub fn learn(&self, stones: &[Tombstone], now: Millis) {
        let mut inner = self.inner.lock();
        for stone in stones {
            if stone.until > now {
                self.keep_one(&mut inner, *stone, now);
            }
        }
    }

    /// Whether `id` is buried at `now`.
    pub fn holds(&self, id: &str, now: Millis) -> bool {
        let hash = Self::hash(id);
        self.inner
            .lock()
            .by_id
            .get(&hash)
            .is_some_and(|until| *until > now)
    }

    /// Every tombstone still in force at `now` (for a peer that starts).
    pub fn live(&self, now: Millis) -> Vec<Tombstone> {
        let inner = self.inner.lock();
        inner
            .by_id
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(id, until)| Tombstone {
                id: *id,
                until: *until,
            })
            .collect()
    }

    /// Up to `limit` of this replica's burials after sequence number `after`, oldest
    /// first, each with its sequence number. Burials pushed out of the log at its bound
    /// are not in it any more.
    pub fn buried_after(&self, after: u64, limit: usize) -> Vec<(u64, Tombstone)> {
        let inner = self.inner.lock();
        inner
            .log
            .iter()
            .filter(|(seq, _)| *seq > after)
            .take(limit)
            .copied()
            .collect()
    }

    /// The sequence number of the latest burial here, changing with each (0: none yet).
    pub fn latest(&self) -> watch::Receiver<u64> {
        self.buried.subscribe()
    }

    /// The most tombstones kept at once (`session.max_tombstones`).
    pub fn capacity(&self) -> usize {
        self.max
    }

    /// How many tombstones are kept.
    pub fn len(&self) -> usize {
        self.inner.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tombstones dropped at the bound before their end, so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Adds (or extends) one tombstone, after sweeping the ended ones and making room.
    fn keep_one(&self, inner: &mut Inner, stone: Tombstone, now: Millis) {
        while let Some(&(until, id)) = inner.by_end.first() {
            if until > now {
                break;
            }
            inner.by_end.pop_first();
            inner.by_id.remove(&id);
        }
        if let Some(until) = inner.by_id.get(&stone.id).copied() {
            if until >= stone.until {
                return;
            }
            inner.by_end.remove(&(until, stone.id));
        } else if inner.by_id.len() >= self.max
            && let Some((_, id)) = inner.by_end.pop_first()
        {
            inner.by_id.remove(&id);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(more) = inner.warnings.as_mut().and_then(Throttle::admit) {
                tracing::warn!(
                    max = self.max,
                    similar_since_last_warning = more,
                    "a deleted sealed session was forgotten before its end to make room \
                     (session.max_tombstones): its id serves again until it expires"
                );
            }
        }
        inner.by_id.insert(stone.id, stone.until);
        inner.by_end.insert((stone.until, stone.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn a_buried_id_is_refused_until_the_idle_ttl_and_the_slack_have_passed() {
        let stones = Tombstones::new(10, TTL);
        let end = 1_000 + (TTL + SLACK).as_millis() as u64;
        assert_eq!(stones.bury("mcps_a", 1_000), 1);
        assert!(stones.holds("mcps_a", 1_000));
        assert!(stones.holds("mcps_a", end - 1));
        assert!(!stones.holds("mcps_a", end));
        assert!(!stones.holds("mcps_b", 1_000));
        // Swept as new ones come.
        stones.bury("mcps_b", end);
        assert_eq!(stones.len(), 1);
    }

    #[test]
    fn the_set_is_bounded_and_drops_the_one_closest_to_its_end() {
        let stones = Tombstones::new(2, TTL);
        stones.bury("mcps_a", 1);
        stones.bury("mcps_b", 2);
        stones.bury("mcps_c", 3);
        assert_eq!(stones.len(), 2);
        assert_eq!(stones.dropped(), 1);
        assert!(!stones.holds("mcps_a", 3), "the oldest went");
        assert!(stones.holds("mcps_b", 3) && stones.holds("mcps_c", 3));
        // The log is bounded the same way.
        let logged: Vec<u64> = stones.buried_after(0, 10).iter().map(|(s, _)| *s).collect();
        assert_eq!(logged, [2, 3]);
    }

    #[test]
    fn learned_tombstones_are_kept_but_not_logged_again() {
        let here = Tombstones::new(10, TTL);
        let there = Tombstones::new(10, TTL);
        there.bury("mcps_x", 5);
        let told: Vec<Tombstone> = there.buried_after(0, 10).iter().map(|(_, t)| *t).collect();
        here.learn(&told, 5);
        assert!(here.holds("mcps_x", 6));
        assert!(here.buried_after(0, 10).is_empty());
        assert_eq!(*here.latest().borrow(), 0);
        // Ended ones are not learned; a later end extends.
        here.learn(
            &[Tombstone {
                id: Tombstones::hash("mcps_y"),
                until: 4,
            }],
            5,
        );
        assert!(!here.holds("mcps_y", 5));
        assert_eq!(here.live(5).len(), 1);
    }

    #[test]
    fn burials_are_numbered_in_order() {
        let stones = Tombstones::new(10, TTL);
        let latest = stones.latest();
        let (a, b) = (stones.bury("mcps_a", 1), stones.bury("mcps_b", 1));
        assert!(a < b);
        assert_eq!(*latest.borrow(), b);
        let after_a: Vec<u64> = stones.buried_after(a, 10).iter().map(|(s, _)| *s).collect();
        assert_eq!(after_a, [b]);
    }
}
