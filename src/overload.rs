//! Shedding new work before the operating system refuses it, and recovering by itself
//! (as Envoy's overload manager does).
//!
//! Two resources are watched: resident memory (`limits.max_memory`; by default 90 % of the
//! memory limit of the proxy's cgroup, when it has one) and open file descriptors
//! (`limits.max_open_files`; by default 90 % of the open-file limit, `RLIMIT_NOFILE`). A
//! background task samples both every [`SAMPLE_EVERY`]: one read of `/proc/self/statm`,
//! one count of `/proc/self/fd`. Between samples, the accept path adds the connections
//! accepted since the last sample to the sampled descriptor count, so a burst of
//! connections is seen at once; nothing on the request path makes a system call (a
//! request reads one atomic).
//!
//! A resource at or over its threshold turns shedding on; it turns off once the resource
//! is below [`RECOVERY`] of its threshold again (hysteresis: a resource hovering at its
//! threshold does not flap). What is shed is decided by the callers: new connections
//! while descriptors are short (closed at accept, `front::admission`), and new work —
//! new sessions, stateless calls, `initialize` — with HTTP 503 and `Retry-After`
//! (`front::shed`). Requests in sessions already open are served.
//!
//! A proxy embedded in another program (`workers` unset) watches nothing: the process's
//! memory and descriptors are not its own.
//!
//! What it does not know: HTTP, sessions, which request is new work.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::config::LimitsConfig;
use crate::metrics::Metrics;

/// How often memory and descriptors are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Shedding stops below this share of the threshold (90 %).
pub const RECOVERY: (u64, u64) = (9, 10);

/// The share of a limit (the cgroup's memory, `RLIMIT_NOFILE`) a threshold left at 0 is
/// set to (90 %).
pub const AUTOMATIC: (u64, u64) = (9, 10);

/// What runs short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Memory,
    OpenFiles,
}

impl Resource {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::OpenFiles => "open_files",
        }
    }

    /// The configuration key of its threshold.
    pub fn key(self) -> &'static str {
        match self {
            Resource::Memory => "limits.max_memory",
            Resource::OpenFiles => "limits.max_open_files",
        }
    }

    /// How a person names it.
    pub fn describe(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::OpenFiles => "file descriptors",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Resource::Memory => 1,
            Resource::OpenFiles => 2,
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct Overload {
    /// Resident memory at which shedding starts, in bytes; `None`: not watched.
    memory: Option<u64>,
    /// Descriptors at which shedding starts; `None`: the automatic share of the
    /// open-file limit, read at every sample.
    files_configured: Option<u64>,
    /// The descriptor threshold in effect.
    files_threshold: AtomicU64,
    /// Which resources are being shed for (bits of [`Resource::bit`]).
    shedding: AtomicU8,
    /// Descriptors open at the last sample, and client connections open then.
    files_sampled: AtomicU64,
    connections_sampled: AtomicUsize,
    metrics: Arc<Metrics>,
}

// === impl Overload ===

impl Overload {
    /// The thresholds of `limits` (a memory threshold left at 0 is the automatic share
    /// of the cgroup's memory limit, if any).
    pub fn new(limits: &LimitsConfig, metrics: Arc<Metrics>) -> Arc<Overload> {
        let memory = limits
            .max_memory
            .or_else(|| cgroup_memory_limit().map(|limit| limit / AUTOMATIC.1 * AUTOMATIC.0));
        Overload::with(memory, limits.max_open_files, metrics)
    }

    /// Explicit thresholds (`files`: `None` is the automatic share of the open-file
    /// limit).
    pub fn with(memory: Option<u64>, files: Option<u64>, metrics: Arc<Metrics>) -> Arc<Overload> {
        let overload = Overload {
            memory,
            files_configured: files,
            files_threshold: AtomicU64::new(u64::MAX),
            shedding: AtomicU8::new(0),
            files_sampled: AtomicU64::new(0),
            connections_sampled: AtomicUsize::new(0),
            metrics,
        };
        if let Some(limit) = open_file_limit() {
            overload
                .files_threshold
                .store(overload.files_threshold_for(limit), Ordering::Relaxed);
        }
        Arc::new(overload)
    }

    /// The resource new work is shed for now, if any (one atomic read).
    pub fn shedding(&self) -> Option<Resource> {
        let shedding = self.shedding.load(Ordering::Acquire);
        [Resource::OpenFiles, Resource::Memory]
            .into_iter()
            .find(|r| shedding & r.bit() != 0)
    }

    /// Whether a connection may be accepted now that `connections` are open (this one
    /// included): not while descriptors are short, counting the connections accepted
    /// since the last sample.
    pub fn admit_connection(&self, connections: usize) -> Result<(), Resource> {
        let since = connections.saturating_sub(self.connections_sampled.load(Ordering::Acquire));
        let estimate = self
            .files_sampled
            .load(Ordering::Acquire)
            .saturating_add(since as u64);
        let threshold = self.files_threshold.load(Ordering::Acquire);
        if estimate >= threshold {
            self.turn_on(Resource::OpenFiles, estimate, threshold);
        }
        match self.shedding.load(Ordering::Acquire) & Resource::OpenFiles.bit() {
            0 => Ok(()),
            _ => Err(Resource::OpenFiles),
        }
    }

    /// Counts one piece of work shed (`what`: `connection` or `request`).
    pub fn shed(&self, resource: Resource, what: &'static str) {
        self.metrics.overload_shed(resource.label(), what);
    }

    /// Takes one sample: `resident` bytes of memory, `files` descriptors open while
    /// `connections` client connections were, under an open-file limit of `file_limit`.
    pub fn sample(&self, resident: u64, files: u64, connections: usize, file_limit: Option<u64>) {
        self.files_sampled.store(files, Ordering::Release);
        self.connections_sampled
            .store(connections, Ordering::Release);
        if let Some(limit) = file_limit {
            self.files_threshold
                .store(self.files_threshold_for(limit), Ordering::Release);
        }
        let threshold = self.files_threshold.load(Ordering::Acquire);
        self.judge(Resource::OpenFiles, files, threshold);
        if let Some(threshold) = self.memory {
            self.judge(Resource::Memory, resident, threshold);
        }
        self.metrics.resident_memory_bytes.set(to_gauge(resident));
        self.metrics.open_files.set(to_gauge(files));
    }

    /// Whether resident memory is above the recovery mark (shedding, or about to).
    pub fn memory_is_high(&self, resident: u64) -> bool {
        self.memory
            .is_some_and(|threshold| resident >= threshold / RECOVERY.1 * RECOVERY.0)
    }

    fn files_threshold_for(&self, limit: u64) -> u64 {
        self.files_configured
            .unwrap_or(limit / AUTOMATIC.1 * AUTOMATIC.0)
            .max(1)
    }

    /// Shedding on at the threshold, off below the recovery mark.
    fn judge(&self, resource: Resource, used: u64, threshold: u64) {
        if used >= threshold {
            self.turn_on(resource, used, threshold);
        } else if used < threshold / RECOVERY.1 * RECOVERY.0 {
            let before = self.shedding.fetch_and(!resource.bit(), Ordering::AcqRel);
            if before & resource.bit() != 0 {
                self.metrics.overload_active(resource.label(), false);
                tracing::info!(
                    resource = resource.label(),
                    used,
                    threshold,
                    "{} back below {}% of {}: taking new work again",
                    resource.describe(),
                    RECOVERY.0 * 100 / RECOVERY.1,
                    resource.key()
                );
            }
        }
    }

    fn turn_on(&self, resource: Resource, used: u64, threshold: u64) {
        let before = self.shedding.fetch_or(resource.bit(), Ordering::AcqRel);
        if before & resource.bit() == 0 {
            self.metrics.overload_active(resource.label(), true);
            tracing::warn!(
                resource = resource.label(),
                used,
                threshold,
                "{} at {used} of {} = {threshold}: shedding new connections and new work \
                 (503) until below {}%; requests in open sessions are served",
                resource.describe(),
                resource.key(),
                RECOVERY.0 * 100 / RECOVERY.1
            );
        }
    }
}

fn to_gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Samples memory and descriptors every [`SAMPLE_EVERY`] on the runtime it is started on;
/// stopped when dropped.
#[derive(Debug)]
pub struct Sampler(tokio::task::JoinHandle<()>);

impl Sampler {
    /// Samples for `overload`; `connections` says how many client connections are open.
    pub fn start(
        overload: Arc<Overload>,
        connections: impl Fn() -> usize + Send + 'static,
    ) -> Sampler {
        Sampler(tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let open = connections();
                let files = open_files().unwrap_or(0);
                let resident = resident_memory().unwrap_or(0);
                overload.sample(resident, files, open, open_file_limit());
                if overload.memory_is_high(resident) {
                    release_freed_memory();
                }
            }
        }))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The size of the block [`release_freed_memory`] allocates: larger than the allocator's
/// small and medium pages, so that it takes a page of its own and frees it.
const RELEASE_BLOCK: usize = 8 * 1024 * 1024;

/// Lets the allocator give memory freed since back to the system. mimalloc keeps freed
/// pages committed until a purge, which runs when a page is freed and its purge delay
/// (1 s) has passed — so after a burst, a quiet proxy keeps its peak resident memory and
/// would shed for ever. Freeing a page of our own each sample while memory is high runs
/// that purge (Envoy's overload manager has the same action, "shrink heap", calling
/// tcmalloc); the block is never touched, so it costs no resident memory.
fn release_freed_memory() {
    let block: Vec<u8> = Vec::with_capacity(RELEASE_BLOCK);
    drop(std::hint::black_box(block));
}

/// This process's resident memory, in bytes (`/proc/self/statm`'s second field, in
/// pages: proc(5)).
pub fn resident_memory() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(rustix::param::page_size() as u64))
}

/// This process's open file descriptors (the one reading the directory not counted).
pub fn open_files() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(entries.saturating_sub(1))
}

/// The soft open-file limit (`RLIMIT_NOFILE`), unless unlimited.
fn open_file_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
        .filter(|&soft| soft != nix::sys::resource::RLIM_INFINITY)
}

/// The memory limit of this process's cgroup (v2 `memory.max`, v1
/// `memory.limit_in_bytes`), when it has one.
fn cgroup_memory_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    memory_limit_of(&cgroups, |path| std::fs::read_to_string(path).ok())
}

/// Above this, a v1 limit means "none" (the kernel writes the largest page multiple).
const NO_LIMIT: u64 = 1 << 60;

/// The cgroup memory limit named by `/proc/self/cgroup`'s `cgroups`, with `read` reading
/// a file: in the process's own cgroup directory, else at the root of the hierarchy
/// (where a container's cgroup namespace puts its own).
fn memory_limit_of(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/');
        let files = if id == "0" && controllers.is_empty() {
            [
                format!("/sys/fs/cgroup{path}/memory.max"),
                "/sys/fs/cgroup/memory.max".to_owned(),
            ]
        } else if controllers.split(',').any(|c| c == "memory") {
            [
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"),
                "/sys/fs/cgroup/memory/memory.limit_in_bytes".to_owned(),
            ]
        } else {
            continue;
        };
        let limit = files
            .iter()
            .find_map(|file| read(file))
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|&limit| limit < NO_LIMIT);
        if limit.is_some() {
            return limit;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn overload(memory: Option<u64>, files: u64) -> Arc<Overload> {
        Overload::with(memory, Some(files), Arc::new(Metrics::new()))
    }

    #[test]
    fn shedding_starts_at_the_threshold_and_stops_below_ninety_percent_of_it() {
        let o = overload(Some(100 * MIB), 1000);
        o.sample(99 * MIB, 10, 0, None);
        assert_eq!(o.shedding(), None);
        o.sample(100 * MIB, 10, 0, None);
        assert_eq!(o.shedding(), Some(Resource::Memory));
        // Hysteresis: under the threshold, not yet under 90 % of it.
        o.sample(91 * MIB, 10, 0, None);
        assert_eq!(o.shedding(), Some(Resource::Memory));
        o.sample(89 * MIB, 10, 0, None);
        assert_eq!(o.shedding(), None);
    }

    #[test]
    fn connections_accepted_since_the_last_sample_count_at_once() {
        let o = overload(None, 100);
        // 60 descriptors while 10 connections were open.
        o.sample(0, 60, 10, None);
        assert!(o.admit_connection(49).is_ok());
        // 40 more connections since: 100 descriptors.
        assert_eq!(o.admit_connection(50), Err(Resource::OpenFiles));
        assert_eq!(o.shedding(), Some(Resource::OpenFiles));
        // Closing some is not enough until a sample sees fewer than 90.
        assert!(o.admit_connection(20).is_err());
        o.sample(0, 89, 20, None);
        assert!(o.admit_connection(21).is_ok());
        assert_eq!(o.shedding(), None);
    }

    #[test]
    fn the_automatic_file_threshold_follows_the_open_file_limit() {
        let o = Overload::with(None, None, Arc::new(Metrics::new()));
        o.sample(0, 900, 0, Some(1000));
        assert_eq!(o.shedding(), Some(Resource::OpenFiles));
        o.sample(0, 900, 0, Some(2000));
        assert_eq!(o.shedding(), None);
        // Memory is not watched without a threshold.
        o.sample(u64::MAX, 0, 0, Some(2000));
        assert_eq!(o.shedding(), None);
    }

    #[test]
    fn the_cgroup_memory_limit_is_read_for_v2_and_v1_and_none_means_none() {
        let files = |wanted: &'static [(&'static str, &'static str)]| {
            move |path: &str| {
                wanted
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, text)| (*text).to_owned())
            }
        };
        assert_eq!(
            memory_limit_of(
                "0::/system.slice/proxy.service\n",
                files(&[(
                    "/sys/fs/cgroup/system.slice/proxy.service/memory.max",
                    "536870912\n"
                )])
            ),
            Some(536_870_912)
        );
        // A container's namespace: its own cgroup at the root.
        assert_eq!(
            memory_limit_of(
                "0::/\n",
                files(&[("/sys/fs/cgroup/memory.max", "1073741824\n")])
            ),
            Some(1_073_741_824)
        );
        assert_eq!(
            memory_limit_of("0::/\n", files(&[("/sys/fs/cgroup/memory.max", "max\n")])),
            None
        );
        assert_eq!(
            memory_limit_of(
                "4:memory:/docker/abc\n0::/\n",
                files(&[("/sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n")])
            ),
            Some(268_435_456)
        );
        assert_eq!(
            memory_limit_of(
                "4:memory:/\n",
                files(&[(
                    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                    "9223372036854771712\n"
                )])
            ),
            None
        );
    }

    #[test]
    fn this_process_can_be_sampled() {
        assert!(resident_memory().is_some_and(|bytes| bytes > 0));
        assert!(open_files().is_some_and(|files| files >= 3));
    }
}
