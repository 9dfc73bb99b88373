//! Requests one caller has in flight at once somewhere a few callers share: a cap per
//! caller, so that one caller's hanging requests cannot take every place of a shared
//! channel (requests forwarded to another proxy replica, which all travel on the one
//! connection between the two).
//!
//! A caller takes a [`Held`] per request and gives it back by dropping it, whenever the
//! request ends — answered, failed, or its client gone. The table holds only callers with
//! something in flight, so it is bounded by the requests in flight.

use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::mcp::caller::CallerKey;

/// Requests in flight, per caller, each caller at most `max`.
#[derive(Debug)]
pub struct InFlight {
    held: DashMap<CallerKey, usize>,
    max: usize,
}

/// One request in flight for a caller; dropping it gives the place back.
#[derive(Debug)]
pub struct Held {
    table: Arc<InFlight>,
    /// `None`: a request that is nobody's to count.
    key: Option<CallerKey>,
}

impl InFlight {
    pub fn new(max: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            held: DashMap::new(),
            max: max.max(1),
        })
    }

    /// The cap per caller.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for one more request of `key` (`None`: nobody's to count, always given),
    /// or `None` when the caller already has `max` in flight.
    pub fn take(self: &Arc<Self>, key: Option<CallerKey>) -> Option<Held> {
        if let Some(key) = key {
            let mut count = self.held.entry(key).or_insert(0);
            if *count >= self.max {
                return None;
            }
            *count += 1;
        }
        Some(Held {
            table: self.clone(),
            key,
        })
    }

    /// Requests of `key` in flight now.
    pub fn of(&self, key: CallerKey) -> usize {
        self.held.get(&key).map_or(0, |count| *count)
    }

    /// Callers with something in flight.
    pub fn callers(&self) -> usize {
        self.held.len()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(key) = self.key else {
            return;
        };
        if let Entry::Occupied(mut entry) = self.table.held.entry(key) {
            *entry.get_mut() = entry.get().saturating_sub(1);
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn caller(n: u8) -> Option<CallerKey> {
        Some(CallerKey::Network(IpAddr::from([10, 0, 0, n])))
    }

    #[test]
    fn one_caller_takes_at_most_its_share_and_gets_it_back() {
        let table = InFlight::new(2);
        let a1 = table.take(caller(1)).unwrap();
        let _a2 = table.take(caller(1)).unwrap();
        assert!(table.take(caller(1)).is_none(), "a third is refused");
        assert!(table.take(caller(2)).is_some(), "another caller is not");
        assert!(
            table.take(None).is_some(),
            "nobody's requests are not counted"
        );
        drop(a1);
        let _a3 = table.take(caller(1)).unwrap();
        assert_eq!(table.of(caller(1).unwrap()), 2);
    }

    #[test]
    fn a_caller_holding_nothing_is_forgotten() {
        let table = InFlight::new(3);
        let held: Vec<Held> = (0..3).map(|_| table.take(caller(7)).unwrap()).collect();
        assert_eq!(table.callers(), 1);
        drop(held);
        assert_eq!(table.callers(), 0);
    }
}
