//! The live sessions each worker thread remembers between uses, so that a use of a
//! session costs no round trip to Redis — kept true by Redis itself.
//!
//! Each worker has a connection of its own to the server that takes the store's writes
//! ([`tracking`](super::tracking)), on which Redis reports every write of any session
//! record, by any replica (a deletion, a reroute, a reap, an expiry, a flush). A worker
//! reads what has arrived there before it trusts what it remembers: a session deleted
//! (or rerouted) at another replica is forgotten before the next request that names it is
//! served, since Redis has written the report before it answers that replica's next
//! command (a `PING` it sends after a deletion or a reroute), and that replica answers
//! its client only then (unless the network holds the report back longer than the
//! client's round trip through that replica). While that connection is not up — not yet
//! made, broken, or made to a server the link no longer uses (a failover) — nothing is
//! remembered and every use asks Redis, as it always did.
//!
//! A use served from memory is still written to Redis — its renewal (the expiry, the use
//! count) — but behind the answer, batched: [`Cache::lease`] queues it and the store's
//! writer sends what a few milliseconds gathered in one pipeline. The record's own key is not written by a
//! renewal (the store keeps the expiry and the count beside it), so renewals make no
//! reports. A use is served from memory only while the session's last renewal here
//! leaves it more than a margin to live — longer than a queued renewal can take to be
//! written, and the replicas' clocks apart — so that no replica's reaper ends a session
//! whose use is still being written: near its expiry, Redis decides.
//!
//! What a worker learns from Redis (a use that had to ask) it remembers only if nothing
//! was reported for that session between the question and the answer ([`Ticket`]): an
//! answer that crossed a deletion is not kept.

use std::hash::{BuildHasher, Hasher};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;

use super::tracking::{Changed, Tracker};
use crate::minted;
use crate::session::record::{Millis, SessionRecord};
use crate::session::store::Renewal;
use crate::workers::PerWorker;

/// How long uses served from memory are gathered before their renewals are written.
pub const WRITE_BEHIND: Duration = Duration::from_millis(5);
/// How far apart the replicas' clocks, which a reaper compares an expiry with, may be
/// (part of the margin before a session's expiry within which Redis decides).
const CLOCKS_APART: Duration = Duration::from_secs(1);
/// The most renewals a worker queues; past it, uses ask Redis again.
const MAX_QUEUED: usize = 4096;
/// How many groups the ids are counted in (reports for one group do not keep the others
/// from being remembered).
const SHARDS: usize = 64;
/// The first pause before tracking is tried again after it could not be started (or
/// broke soon after), and the longest.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a worker's tracker is sent `PING`: a connection that died without a word
/// (a NAT's idle timeout, a host gone) is found out within this and the store's timeout.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a tracker must have stayed up for its break to count as no failure.
const STABLE: Duration = Duration::from_secs(10);

/// Uses counted by how they were served (`mcp_proxy_session_cache_total`).
#[derive(Debug, Clone, Default)]
pub struct Counted {
    /// From memory.
    pub hit: Counter,
    /// Asked of Redis: not in memory.
    pub miss: Counter,
    /// Asked of Redis: the worker is not told of changes now.
    pub untracked: Counter,
}

/// See the module documentation.
pub struct Cache {
    slots: PerWorker<Mutex<Slot>>,
    counted: Counted,
    /// The most sessions one worker remembers.
    capacity: usize,
    /// How long a tracker may go unheard (no report, no answer to `PING`) before it is
    /// taken for lost.
    stale_after: Duration,
    /// How long before its expiry a session is no longer served from memory.
    margin: Duration,
    /// The records' key prefix, as reports name them.
    prefix: String,
    hasher: minted::Hasher,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// One worker's part.
struct Slot {
    entries: minted::Map<Box<str>, SessionRecord>,
    tracking: Tracking,
    /// Reports seen, by group of ids.
    reported: [u64; SHARDS],
    /// Moves on whenever tracking stops: what was asked before is not remembered.
    epoch: u64,
    /// Uses served from memory whose renewal is not written yet.
    queued: Vec<(Box<str>, Renewal)>,
    /// Whether a writer task runs for this worker.
    writing: bool,
    /// Failed starts of tracking in a row (or breaks soon after a start).
    failures: u32,
    /// Numbers this worker's trackers: a task serves the one it started, and ends when
    /// that one is no longer the worker's.
    serial: u64,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            entries: minted::Map::default(),
            tracking: Tracking::Off { retry_at: None },
            reported: [0; SHARDS],
            epoch: 0,
            queued: Vec::new(),
            writing: false,
            failures: 0,
            serial: 0,
        }
    }
}

enum Tracking {
    /// Not started, or stopped; the next use (from `retry_at` on) starts it.
    Off { retry_at: Option<Instant> },
    /// The task of tracker `serial` is connecting.
    Starting { serial: u64 },
    /// Redis reports every write of a record to `tracker`, a connection to the server
    /// the link used at `generation`, up `since`, last heard from at `heard`.
    On {
        tracker: Tracker,
        serial: u64,
        generation: u64,
        since: Instant,
        heard: Instant,
    },
}

/// What [`Cache::lease`] found.
pub enum Lease {
    /// The session, from memory: renewed by this use (its renewal queued; `write`: this
    /// worker has no writer running, the caller starts one), or — bound to another
    /// caller — as it is.
    Hit { record: SessionRecord, write: bool },
    /// Not in memory: ask Redis. With a ticket, what Redis answers may be remembered.
    Miss(Option<Ticket>),
}

/// Taken before asking Redis about a session; what it answers is remembered only if no
/// report about the session came between ([`Cache::fill`]).
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    epoch: u64,
    shard: usize,
    reported: u64,
}

/// Whether a worker's memory may be used, as [`Cache::lease`] finds it.
pub enum Tracked {
    /// Reports are up to date: memory may be used.
    Live,
    /// Not tracking; the caller starts a task that connects tracker `serial`
    /// ([`Cache::tracking`] or [`Cache::not_tracking`] when done) and then serves it
    /// ([`Cache::poll_reports`], [`Cache::heartbeat`]).
    Start(u64),
    /// Not tracking (being started, or to be tried again later, or the cache is off).
    Waiting,
}

// === impl Cache ===

impl Cache {
    /// A cache keeping up to `capacity` sessions per worker, of records whose keys start
    /// with `prefix`, trusting a tracker no longer than `timeout` (the store's, for any
    /// one command) after its last `PING` was due.
    pub fn new(capacity: usize, prefix: String, timeout: Duration, counted: Counted) -> Cache {
        Cache {
            slots: PerWorker::new(|| Mutex::new(Slot::default())),
            counted,
            stale_after: HEARTBEAT + timeout,
            // A use queued just after the writer took its batch is written after that
            // batch's write (up to `timeout`), a pause, and its own write.
            margin: CLOCKS_APART + WRITE_BEHIND + timeout * 2,
            capacity,
            prefix,
            hasher: minted::Hasher::default(),
        }
    }

    fn shard(&self, id: &str) -> usize {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(id.as_bytes());
        (hasher.finish() as usize) % SHARDS
    }

    /// A use of session `id` (the store's `renew`), while the link uses the server of
    /// `generation`; and whether this worker's tracking must be started.
    pub fn lease(&self, id: &str, renewal: &Renewal, generation: u64) -> (Lease, Tracked) {
        let mut slot = self.slots.here().lock();
        let tracked = self.sync(&mut slot, generation);
        if !matches!(tracked, Tracked::Live) {
            if self.capacity > 0 {
                self.counted.untracked.inc();
            }
            return (Lease::Miss(None), tracked);
        }
        let shard = self.shard(id);
        let ticket = Ticket {
            epoch: slot.epoch,
            shard,
            reported: slot.reported[shard],
        };
        let queue_full = slot.queued.len() >= MAX_QUEUED;
        let Some(record) = slot.entries.get_mut(id) else {
            self.counted.miss.inc();
            return (Lease::Miss(Some(ticket)), tracked);
        };
        let margin = self.margin.as_millis() as Millis;
        if renewal.now.saturating_add(margin) >= record.expires_at || queue_full {
            slot.entries.remove(id);
            self.counted.miss.inc();
            return (Lease::Miss(Some(ticket)), tracked);
        }
        self.counted.hit.inc();
        if !record.serves(renewal.caller) {
            // Bound to another caller: not renewed, as Redis would not (the caller of the
            // store refuses it).
            return (
                Lease::Hit {
                    record: record.clone(),
                    write: false,
                },
                tracked,
            );
        }
        record.seq += 1;
        record.expires_at = renewal.expires_at;
        let record = record.clone();
        slot.queued.push((id.into(), *renewal));
        let write = !std::mem::replace(&mut slot.writing, true);
        (Lease::Hit { record, write }, tracked)
    }

    /// Remembers what Redis answered for session `id`, unless a report about it came
    /// since `ticket` was taken, or tracking stopped or started again since (each moves
    /// the epoch on; a ticket is used on the worker that took it, as the task asking
    /// Redis stays on its worker).
    pub fn fill(&self, id: &str, record: &SessionRecord, ticket: Ticket) {
        if self.capacity == 0 {
            return;
        }
        let mut slot = self.slots.here().lock();
        let tracking = matches!(slot.tracking, Tracking::On { .. });
        if !tracking || slot.epoch != ticket.epoch || slot.reported[ticket.shard] != ticket.reported
        {
            return;
        }
        if slot.entries.len() >= self.capacity
            && !slot.entries.contains_key(id)
            && let Some(evicted) = slot.entries.keys().next().cloned()
        {
            slot.entries.remove(&evicted);
        }
        slot.entries.insert(id.into(), record.clone());
    }

    /// Forgets session `id` on this worker (it was removed, or moved to another
    /// upstream session, here; the other workers hear it from Redis).
    pub fn forget(&self, id: &str) {
        let mut slot = self.slots.here().lock();
        self.forget_in(&mut slot, id);
    }

    /// Forgets the sessions whose renewal could not be written, or that Redis no longer
    /// had (the next use asks).
    pub fn forget_all_of(&self, ids: &[Box<str>]) {
        let mut slot = self.slots.here().lock();
        for id in ids {
            self.forget_in(&mut slot, id);
        }
    }

    /// Forgets session `id` in `slot`, and that it was reported (an answer about it
    /// already on its way is not remembered).
    fn forget_in(&self, slot: &mut Slot, id: &str) {
        let shard = self.shard(id);
        slot.reported[shard] = slot.reported[shard].wrapping_add(1);
        slot.entries.remove(id);
    }

    /// The renewals this worker queued, for its writer to send; `None` when there are
    /// none (the writer stops: the next queued one starts another).
    pub fn take_queued(&self) -> Option<Vec<(Box<str>, Renewal)>> {
        let mut slot = self.slots.here().lock();
        if slot.queued.is_empty() {
            slot.writing = false;
            return None;
        }
        Some(std::mem::take(&mut slot.queued))
    }

    /// Reads this worker's reports, if it tracks; whether memory is up to date.
    fn sync(&self, slot: &mut Slot, generation: u64) -> Tracked {
        if self.capacity == 0 {
            return Tracked::Waiting;
        }
        let mut changed = Vec::new();
        let drained = match &mut slot.tracking {
            Tracking::On {
                tracker,
                generation: tracked,
                heard,
                ..
            } if *tracked == generation => {
                let now = Instant::now();
                match tracker.drain(&mut |what| changed.push(what)) {
                    Ok(0) if now.duration_since(*heard) > self.stale_after => {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "Redis stopped answering its PING",
                        ))
                    }
                    Ok(0) => Ok(()),
                    Ok(_) => {
                        *heard = now;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Tracking::Starting { .. } => return Tracked::Waiting,
            Tracking::Off { retry_at } if retry_at.is_some_and(|at| Instant::now() < at) => {
                return Tracked::Waiting;
            }
            // Never started, stopped, or tracking a server the link no longer uses (a
            // failover): what this worker remembers may be out of date.
            Tracking::On { .. } | Tracking::Off { .. } => {
                self.stop(slot, None);
                slot.serial = slot.serial.wrapping_add(1);
                slot.tracking = Tracking::Starting {
                    serial: slot.serial,
                };
                return Tracked::Start(slot.serial);
            }
        };
        for what in changed {
            self.apply(slot, what);
        }
        match drained {
            Ok(()) => Tracked::Live,
            Err(e) => {
                self.broke(slot, &e);
                Tracked::Waiting
            }
        }
    }

    /// What Redis reported changed.
    fn apply(&self, slot: &mut Slot, what: Changed) {
        match what {
            Changed::Keys(keys) => {
                for key in keys {
                    let Some(id) = key
                        .strip_prefix(self.prefix.as_bytes())
                        .and_then(|id| std::str::from_utf8(id).ok())
                    else {
                        continue;
                    };
                    self.forget_in(slot, id);
                }
            }
            Changed::All => {
                slot.entries.clear();
                slot.epoch = slot.epoch.wrapping_add(1);
            }
        }
    }

    /// Stops tracking on `slot`: nothing it remembers can be trusted any more; tracking
    /// starts again with the next use (after `retry_at`).
    fn stop(&self, slot: &mut Slot, retry_at: Option<Instant>) {
        slot.tracking = Tracking::Off { retry_at };
        slot.entries.clear();
        slot.epoch = slot.epoch.wrapping_add(1);
    }

    /// `slot`'s tracker broke (`why`): stopped, and started again with the next use — at
    /// once if it had been up a while, else after the pause of a failed start.
    fn broke(&self, slot: &mut Slot, why: &std::io::Error) {
        let stable =
            matches!(slot.tracking, Tracking::On { since, .. } if since.elapsed() >= STABLE);
        tracing::warn!(
            error = %why,
            "the Redis connection reporting session changes broke; every use asks Redis until it is back"
        );
        if stable {
            slot.failures = 0;
            self.stop(slot, None);
        } else {
            let pause = self.pause(slot);
            self.stop(slot, Some(Instant::now() + pause));
        }
    }

    /// The pause before the next start after one more failure in a row.
    fn pause(&self, slot: &mut Slot) -> Duration {
        let pause = RETRY_MIN
            .saturating_mul(1 << slot.failures.min(16))
            .min(RETRY_MAX);
        slot.failures = slot.failures.saturating_add(1);
        pause
    }

    /// This worker's tracker `serial` is connected (at the link's `generation`) and
    /// reports reach it: memory may be used from now on. A tracker the worker no longer
    /// waits for (it moved on meanwhile) is dropped.
    pub fn tracking(&self, serial: u64, tracker: Tracker, generation: u64) {
        let mut slot = self.slots.here().lock();
        if !matches!(slot.tracking, Tracking::Starting { serial: s } if s == serial) {
            return;
        }
        slot.entries.clear();
        slot.epoch = slot.epoch.wrapping_add(1);
        let now = Instant::now();
        slot.tracking = Tracking::On {
            tracker,
            serial,
            generation,
            since: now,
            heard: now,
        };
    }

    /// This worker's tracker `serial` could not be connected: a use tries again after a
    /// pause that doubles with every failure in a row (from [`RETRY_MIN`] to
    /// [`RETRY_MAX`]); whether this is the first failure in a row (to be told).
    pub fn not_tracking(&self, serial: u64) -> bool {
        let mut slot = self.slots.here().lock();
        if !matches!(slot.tracking, Tracking::Starting { serial: s } if s == serial) {
            return false;
        }
        let first = slot.failures == 0;
        let pause = self.pause(&mut slot);
        self.stop(&mut slot, Some(Instant::now() + pause));
        first
    }

    /// Reads this worker's reports as they arrive (so that an idle worker's connection
    /// does not fill up), for tracker `serial`: `Pending` while it tracks, `Ready` once it
    /// no longer does (lost or replaced; a tracker of a server the link left is stopped
    /// by the next use or [`Cache::heartbeat`]).
    pub fn poll_reports(&self, cx: &mut Context<'_>, serial: u64) -> Poll<()> {
        let mut slot = self.slots.here().lock();
        let mut changed = Vec::new();
        let mut replies = 0;
        let polled = match &mut slot.tracking {
            Tracking::On {
                tracker, serial: s, ..
            } if *s == serial => {
                tracker.poll_changes(cx, &mut |what| changed.push(what), &mut replies)
            }
            _ => return Poll::Ready(()),
        };
        if replies > 0
            && let Tracking::On { heard, .. } = &mut slot.tracking
        {
            *heard = Instant::now();
        }
        for what in changed {
            self.apply(&mut slot, what);
        }
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(e) => {
                self.broke(&mut slot, &e);
                Poll::Ready(())
            }
        }
    }

    /// Sends tracker `serial` its `PING` (every [`HEARTBEAT`]); `false` once it no longer
    /// tracks: not this worker's any more, of a server the link left, unheard for too
    /// long, or its connection refusing the `PING` (then stopped).
    pub fn heartbeat(&self, serial: u64, generation: u64) -> bool {
        let mut slot = self.slots.here().lock();
        let pinged = match &slot.tracking {
            Tracking::On {
                tracker,
                serial: s,
                generation: tracked,
                heard,
                ..
            } if *s == serial => {
                if *tracked != generation {
                    self.stop(&mut slot, None);
                    return false;
                }
                if heard.elapsed() > self.stale_after {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "Redis stopped answering its PING",
                    ))
                } else {
                    tracker.ping()
                }
            }
            _ => return false,
        };
        match pinged {
            Ok(()) => true,
            Err(e) => {
                self.broke(&mut slot, &e);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
