//! The threads serving requests (`workers`): thread per core. Each worker is a thread
//! running a current-thread runtime, with its own listener on the listen address
//! (`listeners`: a `SO_REUSEPORT` group of this process's own, which the kernel spreads
//! connections over) and its own idle upstream connections (`upstream::connections`), so
//! a request is served from accept to answer on one thread and never hands work to
//! another. The thread that started the proxy
//! keeps the rest (the reaper, the endings, probes, signals, the operations listener
//! when it has its own address), so that neither a blocked log write there nor
//! background work stalls a request.
//!
//! What the workers share is shared state, not work: the session store, the fleet, the
//! metrics and the connection caps are `Sync` and live behind `Arc`s.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// This thread's worker number (1..=n); 0 for any thread that is not a worker.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// How long per-worker tables are: one slot per worker of the proxy with the most in
/// this process, and slot 0 for the other threads.
static MOST: AtomicUsize = AtomicUsize::new(1);

/// The worker running on this thread (0 when it is not a worker thread).
pub fn current() -> usize {
    INDEX.with(Cell::get)
}

/// How many per-worker slots a per-worker table needs.
pub fn slots() -> usize {
    MOST.load(Ordering::Relaxed)
}

/// One `T` per worker thread, and one for the threads that are not workers (slot 0,
/// shared by them): what a worker keeps for itself — idle upstream connections, its
/// Redis connections — so that it never waits for, or wakes, another thread. Sized by
/// [`slots`] when made (after the workers started).
#[derive(Debug)]
pub struct PerWorker<T>(Box<[T]>);

impl<T> PerWorker<T> {
    /// One `make()` per slot.
    pub fn new(mut make: impl FnMut() -> T) -> PerWorker<T> {
        PerWorker((0..slots().max(1)).map(|_| make()).collect())
    }

    /// As [`PerWorker::new`], failing on the first slot `make` fails for.
    pub fn try_new<E>(mut make: impl FnMut() -> Result<T, E>) -> Result<PerWorker<T>, E> {
        Ok(PerWorker(
            (0..slots().max(1))
                .map(|_| make())
                .collect::<Result<_, E>>()?,
        ))
    }

    /// This thread's.
    pub fn here(&self) -> &T {
        &self.0[self.here_index()]
    }

    /// Which slot is this thread's (the same for every call on one thread).
    fn here_index(&self) -> usize {
        current() % self.0.len()
    }

    /// How many slots (never 0).
    pub fn slot_count(&self) -> usize {
        self.0.len()
    }

    /// Every slot's.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }
}

/// How many workers `workers` asks for: 0 is one per core.
pub fn count(workers: Option<usize>) -> usize {
    match workers {
        Some(n) if n > 0 => n,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// The worker threads, numbered 1..=n. They stop when this is dropped.
#[derive(Debug, Default)]
pub struct Workers {
    threads: Vec<Worker>,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    /// Dropping it ends the worker's runtime (and every task still on it).
    _stop: oneshot::Sender<()>,
    _thread: JoinHandle<()>,
}

impl Workers {
    /// Starts `count` worker threads, each running a current-thread runtime; returns once
    /// every one runs (so that it has its name, and is a worker, from then on).
    pub fn start(count: usize) -> io::Result<Workers> {
        MOST.fetch_max(count + 1, Ordering::Relaxed);
        let mut threads = Vec::with_capacity(count);
        let (running, started) = std::sync::mpsc::channel::<()>();
        for index in 1..=count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            let running = running.clone();
            let thread = std::thread::Builder::new()
                .name(format!("mcp-worker-{index}"))
                .spawn(move || {
                    INDEX.with(|i| i.set(index));
                    let _ = running.send(());
                    // The runtime runs its tasks while it waits to be stopped.
                    let _ = runtime.block_on(stopped);
                })?;
            threads.push(Worker {
                handle,
                _stop: stop,
                _thread: thread,
            });
        }
        drop(running);
        // A thread that could not start has dropped its sender: the wait ends.
        for _ in 0..count {
            if started.recv().is_err() {
                break;
            }
        }
        Ok(Workers { threads })
    }

    /// The workers' runtimes, in order.
    pub fn handles(&self) -> impl Iterator<Item = &Handle> {
        self.threads.iter().map(|w| &w.handle)
    }
}
