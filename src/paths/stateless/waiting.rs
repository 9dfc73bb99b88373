//! Calls waiting for their client's input (`input_required`, SEP-2322) hold an upstream
//! session each until the client retries or `stateless.request_state_ttl` passes — minutes
//! in which that session serves nobody else. So waiting is bounded twice:
//!
//! - per caller (`stateless.max_waiting_per_caller`): one client asking many questions at
//!   once waits for its own answers, not with everyone's places;
//! - in all, for calls on pooled upstream sessions (`shared`, `isolated`): at most three
//!   quarters of `stateless.max_pooled` may wait, so the last places of the pool always
//!   go to calls that run. (Pinned and handle sessions are bounded per caller already.)
//!
//! A call that would wait beyond a bound is ended instead: its upstream call is cancelled
//! and its client hears why (429 for its own bound, 503 for the pool's), with
//! `Retry-After`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::ProxyError;
use crate::mcp::caller::CallerKey;

/// The bounds and what waits now. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Waiting {
    max_per_caller: usize,
    /// Calls on pooled upstream sessions that may wait at once.
    max_pooled: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    pooled: usize,
    /// Callers with calls waiting, and how many (a caller leaves the map at zero, so it
    /// is bounded by the calls waiting).
    by_caller: HashMap<CallerKey, usize>,
}

/// One waiting call's place under the bounds, given back when it drops (the client
/// retried, never came back, or the call ended).
#[derive(Debug)]
pub struct WaitingPlace {
    waiting: Arc<Waiting>,
    caller: Option<CallerKey>,
    pooled: bool,
}

impl Waiting {
    /// Bounds for a pool of `max_pooled` upstream sessions; 0 per caller: no bound.
    pub fn new(max_per_caller: usize, max_pooled: usize) -> Arc<Waiting> {
        Arc::new(Waiting {
            max_per_caller,
            max_pooled: max_pooled.saturating_sub((max_pooled / 4).max(1)),
            counts: Mutex::new(Counts::default()),
        })
    }

    /// A place for a call of `caller` to wait in; `pooled`: it holds a pooled upstream
    /// session. Refused (the call must end) beyond a bound.
    pub fn take(
        self: &Arc<Self>,
        caller: Option<CallerKey>,
        pooled: bool,
    ) -> Result<WaitingPlace, ProxyError> {
        let mut counts = self.counts.lock();
        if pooled && counts.pooled >= self.max_pooled {
            return Err(ProxyError::TooManyWaiting {
                limit: "stateless.max_pooled",
                max: self.max_pooled,
                per_caller: false,
            });
        }
        if let Some(key) = caller {
            let held = counts.by_caller.get(&key).copied().unwrap_or(0);
            if self.max_per_caller > 0 && held >= self.max_per_caller {
                return Err(ProxyError::TooManyWaiting {
                    limit: "stateless.max_waiting_per_caller",
                    max: self.max_per_caller,
                    per_caller: true,
                });
            }
            counts.by_caller.insert(key, held + 1);
        }
        if pooled {
            counts.pooled += 1;
        }
        Ok(WaitingPlace {
            waiting: self.clone(),
            caller,
            pooled,
        })
    }

    /// Calls waiting now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.counts.lock().by_caller.values().sum()
    }
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        let mut counts = self.waiting.counts.lock();
        if self.pooled {
            counts.pooled = counts.pooled.saturating_sub(1);
        }
        if let Some(key) = self.caller
            && let Some(held) = counts.by_caller.get_mut(&key)
        {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.by_caller.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::mcp::caller::Caller;

    fn key(last: u8) -> Option<CallerKey> {
        CallerKey::of(
            Caller::ANONYMOUS,
            Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))),
        )
    }

    #[test]
    fn a_caller_waits_up_to_its_bound_and_others_still_wait() {
        let waiting = Waiting::new(2, 100);
        let a1 = waiting.take(key(1), true).unwrap();
        let _a2 = waiting.take(key(1), true).unwrap();
        let refused = waiting.take(key(1), true).unwrap_err();
        assert!(matches!(
            refused,
            ProxyError::TooManyWaiting {
                per_caller: true,
                max: 2,
                ..
            }
        ));
        let _b = waiting.take(key(2), false).unwrap();
        drop(a1);
        let _a3 = waiting.take(key(1), true).unwrap();
        assert_eq!(waiting.waiting(), 3);
    }

    #[test]
    fn the_last_quarter_of_the_pool_never_waits() {
        let waiting = Waiting::new(0, 8);
        let held: Vec<_> = (0..6)
            .map(|n| waiting.take(key(n), true).unwrap())
            .collect();
        assert!(matches!(
            waiting.take(key(9), true),
            Err(ProxyError::TooManyWaiting {
                per_caller: false,
                max: 6,
                ..
            })
        ));
        // A call on a pin or a handle's session takes no pool place.
        let _pinned = waiting.take(key(9), false).unwrap();
        drop(held);
        assert!(waiting.take(key(9), true).is_ok());
        assert_eq!(Waiting::new(0, 1).max_pooled, 0, "a pool of one keeps it");
    }
}
