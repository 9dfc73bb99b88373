//! How many client connections may be open: `limits.max_connections` in all, and
//! `limits.max_connections_per_address` from one IP address, across every listener.
//!
//! A connection over either cap is closed as soon as it is accepted (the client sees the
//! connection close before any answer): it costs nothing more than the accept, and it
//! leaves the kernel's backlog free for the connections that fit. So is every new
//! connection while file descriptors are near their limit (`overload`): the descriptors
//! left are kept for the connections already open. One address cannot
//! take every place, and the header-read and idle timeouts (`watchdog`) give back the
//! places of clients that hold connections without using them.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

use crate::config::LimitsConfig;
use crate::metrics::{Closed, Metrics};
use crate::overload::Overload;

/// See the module documentation.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    max_per_address: Option<usize>,
    open: AtomicUsize,
    per_address: DashMap<IpAddr, usize>,
    metrics: Arc<Metrics>,
    overload: Arc<Overload>,
}

/// One admitted connection's places; given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    address: IpAddr,
}

impl Admission {
    /// At most `max` connections, and `max_per_address` from one address (`None`: no
    /// cap per address); none while `overload` sheds for file descriptors.
    pub fn new(
        max: usize,
        max_per_address: Option<usize>,
        metrics: Arc<Metrics>,
        overload: Arc<Overload>,
    ) -> Arc<Self> {
        Arc::new(Admission {
            max,
            max_per_address,
            open: AtomicUsize::new(0),
            per_address: DashMap::new(),
            metrics,
            overload,
        })
    }

    /// Takes the places of a connection from `address`, or says which cap it is over
    /// (and counts the refusal).
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, Closed> {
        let opening = self.open.load(Ordering::Acquire).saturating_add(1);
        if let Err(resource) = self.overload.admit_connection(opening) {
            self.overload.shed(resource, "connection");
            self.metrics.connection_closed(Closed::Overload);
            return Err(Closed::Overload);
        }
        let max = self.max;
        if self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            self.metrics.connection_closed(Closed::Limit);
            return Err(Closed::Limit);
        }
        if let Some(max) = self.max_per_address {
            let mut from = self.per_address.entry(address).or_insert(0);
            if *from >= max {
                drop(from);
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.metrics.connection_closed(Closed::AddressLimit);
                return Err(Closed::AddressLimit);
            }
            *from += 1;
        }
        self.metrics.connections_open.inc();
        Ok(Admitted {
            admission: self.clone(),
            address,
        })
    }

    /// Where refusals and open connections are counted.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let admission = &self.admission;
        if admission.max_per_address.is_some() {
            admission
                .per_address
                .remove_if_mut(&self.address, |_, from| {
                    *from = from.saturating_sub(1);
                    *from == 0
                });
        }
        admission.open.fetch_sub(1, Ordering::AcqRel);
        admission.metrics.connections_open.dec();
    }
}

/// File descriptors the proxy needs besides its client connections: listeners, logs,
/// upstream connections (idle and in use), stdio pipes — a margin, not a count.
const OTHER_FILES: u64 = 256;

/// Makes room for `limits.max_connections` under the process's open-file limit: raises
/// the soft limit towards the hard one when it is lower than needed (as servers usually
/// do), and warns when even the hard limit is too low — then accepting fails for lack of
/// descriptors before the connection cap is reached.
pub fn check_open_file_limit(limits: &LimitsConfig) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let needed = (limits.max_connections as u64).saturating_add(OTHER_FILES);
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= needed {
        return;
    }
    let raised = needed.min(hard);
    if raised > soft && setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_ok() {
        tracing::debug!(from = soft, to = raised, "raised the open-file limit");
    }
    let now = getrlimit(Resource::RLIMIT_NOFILE).map_or(soft, |(soft, _)| soft);
    if now < needed {
        tracing::warn!(
            open_file_limit = now,
            max_connections = limits.max_connections,
            "the open-file limit ({now}) is too low for limits.max_connections ({}) plus {OTHER_FILES} \
             other files; raise it (ulimit -n, LimitNOFILE=) or lower limits.max_connections to \
             {} or less",
            limits.max_connections,
            now.saturating_sub(OTHER_FILES).max(1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn admission(max: usize, per_address: Option<usize>) -> Arc<Admission> {
        let metrics = Arc::new(Metrics::new());
        let overload = Overload::with(None, Some(u64::MAX), metrics.clone());
        Admission::new(max, per_address, metrics, overload)
    }

    #[test]
    fn no_connection_is_admitted_while_descriptors_are_short() {
        let metrics = Arc::new(Metrics::new());
        let overload = Overload::with(None, Some(100), metrics.clone());
        let admission = Admission::new(10, None, metrics, overload.clone());
        overload.sample(0, 98, 0, None);
        let first = admission.admit(ip(1)).unwrap();
        assert_eq!(admission.admit(ip(1)).unwrap_err(), Closed::Overload);
        drop(first);
        overload.sample(0, 50, 0, None);
        assert!(admission.admit(ip(1)).is_ok());
    }

    #[test]
    fn both_caps_hold_and_places_come_back() {
        let admission = admission(3, Some(2));
        let a1 = admission.admit(ip(1)).unwrap();
        let a2 = admission.admit(ip(1)).unwrap();
        assert_eq!(admission.admit(ip(1)).unwrap_err(), Closed::AddressLimit);
        let b1 = admission.admit(ip(2)).unwrap();
        assert_eq!(admission.admit(ip(3)).unwrap_err(), Closed::Limit);
        assert_eq!(admission.open(), 3);
        drop(a1);
        let a3 = admission.admit(ip(1)).unwrap();
        drop((a2, a3, b1));
        assert_eq!(admission.open(), 0);
        assert!(
            admission.per_address.is_empty(),
            "no address is remembered once gone"
        );
    }

    #[test]
    fn without_a_cap_per_address_only_the_total_counts() {
        let admission = admission(2, None);
        let _a = admission.admit(ip(1)).unwrap();
        let _b = admission.admit(ip(1)).unwrap();
        assert_eq!(admission.admit(ip(1)).unwrap_err(), Closed::Limit);
    }
}
