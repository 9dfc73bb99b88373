//! Upstream sessions ended in the background — expired data-layer sessions, creates that
//! failed half-way, pooled sessions evicted or reaped, subscriptions closed, and every
//! session at shutdown — through one bounded executor.
//!
//! At most [`WORKERS`] endings run at once (each holds one upstream connection, or stops
//! one stdio child), and at most [`QUEUE`] wait. When the queue is full:
//! - a caller that can wait ([`Endings::end`]: the session reaper, the pool's close,
//!   shutdown) waits for room — the reaper slows down instead of opening connections
//!   without bound. Such callers hold at most half of the queue between them;
//! - a caller that cannot ([`Endings::end_soon`]: drop guards) so always finds the other
//!   half; only if that is full too is the ending given up: the upstream session is left
//!   to the upstream's own expiry, counted ([`Endings::dropped`]) and logged at a bounded
//!   rate.
//!
//! The owner stops the executor at shutdown ([`Endings::shutdown`]): what is queued is
//! still ended, within a deadline; what is left then is abandoned.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::Upstream;
use super::http::Binding;
use crate::throttle::Throttle;

/// Endings running at once.
pub const WORKERS: usize = 32;
/// Endings waiting for a worker.
pub const QUEUE: usize = 4096;

/// An upstream session to end.
#[derive(Debug, Clone)]
pub struct Ending {
    pub session_id: Arc<str>,
    /// The version negotiated at `initialize` (sent as `MCP-Protocol-Version`).
    pub protocol_version: &'static str,
}

impl Ending {
    /// The ending of an upstream session, if there is one (an upstream that issued no
    /// session id has nothing to end).
    pub fn of(
        session_id: Option<impl Into<Arc<str>>>,
        protocol_version: &'static str,
    ) -> Option<Ending> {
        session_id.map(|id| Ending {
            session_id: id.into(),
            protocol_version,
        })
    }
}

struct Job {
    ending: Ending,
    /// A waiting caller's place in the queue, given back when a worker takes the job.
    room: Option<OwnedSemaphorePermit>,
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
    pub fn start(upstream: Upstream) -> Arc<Endings> {
        Endings::with_limits(upstream, WORKERS, QUEUE)
    }

    /// Starts the executor with `workers` at once and `queue` waiting.
    pub fn with_limits(upstream: Upstream, workers: usize, queue: usize) -> Arc<Endings> {
        let queue = queue.max(2);
        let (tx, rx) = mpsc::channel(queue);
        let (closing, closed) = watch::channel(false);
        let pending = Arc::new(AtomicUsize::new(0));
        let dispatcher = tokio::spawn(dispatch(
            upstream,
            rx,
            closed,
            workers.max(1),
            pending.clone(),
        ));
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
        let Ok(room) = self.waiting_room.clone().acquire_owned().await else {
            return;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            ending,
            room: Some(room),
        };
        if self.tx.send(job).await.is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!("an upstream session was to be ended after shutdown");
        }
    }

    /// Queues `ending` without waiting; gives it up (counted, logged at a bounded rate)
    /// when the queue is full.
    pub fn end_soon(&self, ending: Ending) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let job = Job { ending, room: None };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
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
    upstream: Upstream,
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
        let Some(Job { ending, room }) = job else {
            break;
        };
        drop(room);
        let upstream = upstream.clone();
        let pending = pending.clone();
        let failures = failures.clone();
        running.spawn(async move {
            let binding = Binding {
                session_id: Some(&ending.session_id),
                protocol_version: ending.protocol_version,
            };
            if let Err(e) = upstream.terminate(binding).await
                && let Some(more) = failures.lock().admit()
            {
                tracing::warn!(error = %e, similar_since_last_warning = more, "the upstream did not end a session");
            }
            pending.fetch_sub(1, Ordering::AcqRel);
        });
    }
    while running.join_next().await.is_some() {}
}
