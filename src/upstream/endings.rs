//! Upstream sessions ended in the background — expired data-layer sessions, creates that
//! failed half-way, pooled, pinned and isolated sessions let go of, subscriptions closed,
//! sessions of upstreams a reload removed, and every session at shutdown — through one
//! bounded executor, shared by every upstream of the process.
//!
//! Each [`Ending`] carries what it needs to reach its upstream session: the upstream
//! (every replica of it), the replica holding the session, its id and the version it
//! negotiated — and the trace it belongs to (the request being served when it was
//! queued; else its own). An upstream session without an id (an HTTP upstream that issued none)
//! has nothing to end upstream, and an HTTP+SSE session is ended by closing a stream this
//! process holds: both are let go of at once, without the queue.
//!
//! At most [`WORKERS`] endings run at once (each holds one upstream connection, or stops
//! one stdio child), and at most [`QUEUE`] wait. When the queue is full:
//! - a caller that can wait ([`Endings::end`]: the session reaper, closing pools and pins,
//!   a reload, shutdown; [`Endings::end_and_wait`]: an isolated call giving its place
//!   back) waits for room — the reaper slows down instead of opening connections without
//!   bound. Such callers hold at most half of the queue between them;
//! - a caller that cannot ([`Endings::end_soon`]: drop guards, evictions) so always finds
//!   the other half; only if that is full too is the ending given up: the upstream
//!   session is left to the upstream's own expiry, counted ([`Endings::dropped`]) and
//!   logged at a bounded rate.
//!
//! The owner stops the executor at shutdown ([`Endings::shutdown`]), after everything
//! else that may queue endings: what is queued is still ended, within a deadline; what
//! is left then is abandoned.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::http::SessionAddr;
use super::{ReplicaId, Upstream};
use crate::telemetry::background::Origin;
use crate::throttle::Throttle;

/// Endings running at once.
pub const WORKERS: usize = 32;
/// Endings waiting for a worker.
pub const QUEUE: usize = 4096;

/// An upstream session to end, with what reaches it.
#[derive(Debug, Clone)]
pub struct Ending {
    upstream: Upstream,
    replica: ReplicaId,
    session_id: Option<Arc<str>>,
    /// The version negotiated at `initialize` (sent as `MCP-Protocol-Version`).
    protocol_version: &'static str,
    /// Where it was queued: the request being served then, if any (its trace).
    origin: Origin,
}

impl Ending {
    /// The ending of the upstream session `session_id` that `replica` of `upstream`
    /// holds (`None`: the upstream issued no session id).
    pub fn new(
        upstream: &Upstream,
        replica: ReplicaId,
        session_id: Option<&str>,
        protocol_version: &'static str,
    ) -> Ending {
        Ending {
            upstream: upstream.clone(),
            replica,
            session_id: session_id.map(Arc::from),
            protocol_version,
            origin: Origin::here(),
        }
    }

    fn addr(&self) -> SessionAddr<'_> {
        SessionAddr {
            replica: self.replica,
            session_id: self.session_id.as_deref(),
            protocol_version: self.protocol_version,
        }
    }

    /// An upstream session without an id has nothing to end upstream: it is let go of
    /// at once (the replica's count of live sessions); nor has an HTTP+SSE session,
    /// whose stream this process closes at once. Whether that was the case.
    fn settled_at_once(&self) -> bool {
        if self.upstream.end_at_once(self.addr()) {
            return true;
        }
        if self.session_id.is_some() {
            return false;
        }
        self.upstream.forget(self.addr());
        true
    }
}

struct Job {
    ending: Ending,
    /// A waiting caller's place in the queue, given back when a worker takes the job.
    room: Option<OwnedSemaphorePermit>,
    /// Told when the ending is done (or given up), for a caller that waits for it.
    done: Option<oneshot::Sender<()>>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Endings {
    tx: mpsc::Sender<Job>,
    /// Places in the queue for callers that wait: half of it.
    waiting_room: Arc<Semaphore>,
    closing: watch::Sender<bool>,
    dispatcher: Mutex<Option<JoinHandle<()>>>,
    /// Queued or running.
    pending: Arc<AtomicUsize>,
    dropped: AtomicU64,
    dropped_log: Mutex<Throttle>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("ending", &self.ending).finish()
    }
}

impl Endings {
    /// Starts the executor with [`WORKERS`] and [`QUEUE`].
    pub fn start() -> Arc<Endings> {
        Endings::with_limits(WORKERS, QUEUE)
    }

    /// Starts the executor with `workers` at once and `queue` waiting.
    pub fn with_limits(workers: usize, queue: usize) -> Arc<Endings> {
        let queue = queue.max(2);
        let (tx, rx) = mpsc::channel(queue);
        let (closing, closed) = watch::channel(false);
        let pending = Arc::new(AtomicUsize::new(0));
        let dispatcher = tokio::spawn(dispatch(rx, closed, workers.max(1), pending.clone()));
        Arc::new(Endings {
            tx,
            waiting_room: Arc::new(Semaphore::new(queue / 2)),
            closing,
            dispatcher: Mutex::new(Some(dispatcher)),
            pending,
            dropped: AtomicU64::new(0),
            dropped_log: Mutex::new(Throttle::every(Duration::from_secs(10))),
        })
    }

    /// Queues `ending`, waiting while this caller's half of the queue is full.
    pub async fn end(&self, ending: Ending) {
        self.queue(ending, None).await;
    }

    /// Queues `ending` like [`Endings::end`] and waits until it is done: for a caller
    /// whose place (under a pool's bound) is held until the upstream session is gone.
    pub async fn end_and_wait(&self, ending: Ending) {
        let (done, finished) = oneshot::channel();
        if self.queue(ending, Some(done)).await {
            // An error only when the executor stopped with the ending still queued.
            let _ = finished.await;
        }
    }

    /// Whether `ending` was queued.
    async fn queue(&self, ending: Ending, done: Option<oneshot::Sender<()>>) -> bool {
        if ending.settled_at_once() {
            return false;
        }
        let Ok(room) = self.waiting_room.clone().acquire_owned().await else {
            tracing::debug!("an upstream session was to be ended after shutdown");
            return false;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            ending,
            room: Some(room),
            done,
        };
        if self.tx.send(job).await.is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!("an upstream session was to be ended after shutdown");
            return false;
        }
        true
    }

    /// Queues `ending` without waiting; gives it up (counted, logged at a bounded rate)
    /// when the queue is full.
    pub fn end_soon(&self, ending: Ending) {
        if ending.settled_at_once() {
            return;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            ending,
            room: None,
            done: None,
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job)) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                // Given up: an HTTP replica no longer counts it as live (a stdio child
                // stays, counted under `max_children`, until it dies or shutdown).
                if !job.ending.upstream.holds_in_process(job.ending.addr()) {
                    job.ending.upstream.forget(job.ending.addr());
                }
                let total = self.dropped.fetch_add(1, Ordering::AcqRel) + 1;
                if let Some(more) = self.dropped_log.lock().admit() {
                    tracing::warn!(
                        dropped_total = total,
                        since_last_warning = more + 1,
                        "the queue of upstream sessions to end is full ({QUEUE}); an upstream \
                         session is left to the upstream's own expiry"
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                tracing::debug!("an upstream session was to be ended after shutdown");
            }
        }
    }

    /// Endings queued or running.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Endings given up because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// Stops taking endings, ends what is queued, and returns when done or after
    /// `within` (then what is left is abandoned, and said so).
    pub async fn shutdown(&self, within: Duration) {
        let _ = self.closing.send(true);
        self.waiting_room.close();
        let Some(mut dispatcher) = self.dispatcher.lock().take() else {
            return;
        };
        if tokio::time::timeout(within, &mut dispatcher).await.is_err() {
            dispatcher.abort();
            tracing::warn!(
                left = self.pending(),
                "not every upstream session could be ended at shutdown"
            );
        }
    }
}

impl Drop for Endings {
    fn drop(&mut self) {
        if let Some(dispatcher) = self.dispatcher.lock().take() {
            dispatcher.abort();
        }
    }
}

/// Takes jobs one at a time, each once a worker is free; after `closing`, ends what is
/// queued and returns.
async fn dispatch(
    mut rx: mpsc::Receiver<Job>,
    mut closing: watch::Receiver<bool>,
    workers: usize,
    pending: Arc<AtomicUsize>,
) {
    let mut running = JoinSet::new();
    let failures = Arc::new(Mutex::new(Throttle::every(Duration::from_secs(10))));
    let mut closed = false;
    loop {
        while running.try_join_next().is_some() {}
        // While every worker is busy the queue fills, and callers wait.
        while running.len() >= workers {
            running.join_next().await;
        }
        let job = tokio::select! {
            job = rx.recv() => job,
            _ = closing.wait_for(|closing| *closing), if !closed => {
                // No more jobs come in; those already queued are still ended.
                closed = true;
                rx.close();
                continue;
            }
        };
        let Some(Job { ending, room, done }) = job else {
            break;
        };
        drop(room);
        let pending = pending.clone();
        let failures = failures.clone();
        let origin = ending.origin.clone();
        running.spawn(origin.run("end upstream session", async move {
            if let Err(e) = ending.upstream.terminate(ending.addr()).await
                && let Some(more) = failures.lock().admit()
            {
                tracing::warn!(
                    upstream = %ending.upstream.label(),
                    error = %e,
                    similar_since_last_warning = more,
                    "the upstream did not end a session"
                );
            }
            pending.fetch_sub(1, Ordering::AcqRel);
            if let Some(done) = done {
                let _ = done.send(());
            }
        }));
    }
    while running.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests;
