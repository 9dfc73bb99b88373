//! A token bucket that counts what it turned away: the log lines of something that may
//! flood (accept errors, a stdio child's stderr, endings that found no room) stay at a
//! bounded rate, and the next line that passes says how many were dropped; the sessions
//! one caller may open a minute (`fairness`), with how long until the next may open.
//!
//! Knows nothing of what it throttles; the caller decides what to do with a refusal.

use std::time::{Duration, Instant};

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Throttle {
    /// Most events passed at once after a quiet spell.
    burst: f64,
    /// Events passed per second, sustained.
    per_second: f64,
    tokens: f64,
    refilled: Instant,
    /// Refused since the last event that passed.
    dropped: u64,
}

impl Throttle {
    /// Passes `burst` events at once, then `per_second` a second.
    pub fn new(burst: u32, per_second: u32) -> Self {
        Throttle {
            burst: f64::from(burst.max(1)),
            per_second: f64::from(per_second),
            tokens: f64::from(burst.max(1)),
            refilled: Instant::now(),
            dropped: 0,
        }
    }

    /// At most one event every `every` (a log line that repeats).
    pub fn every(every: Duration) -> Self {
        let mut throttle = Throttle::new(1, 0);
        throttle.per_second = 1.0 / every.as_secs_f64().max(1e-3);
        throttle
    }

    /// Passes `per_minute` events at once, then `per_minute` a minute, one at a time as
    /// the tokens come back.
    pub fn per_minute(per_minute: u32) -> Self {
        let mut throttle = Throttle::new(per_minute, 0);
        throttle.per_second = f64::from(per_minute) / 60.0;
        throttle
    }

    /// Tokens in the bucket at `now`.
    fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        (self.tokens + elapsed * self.per_second).min(self.burst)
    }

    /// How long after `now` an event would pass (zero: at once; `Duration::MAX` if never).
    pub fn wait_at(&self, now: Instant) -> Duration {
        let missing = 1.0 - self.tokens_at(now);
        if missing <= 0.0 {
            Duration::ZERO
        } else if self.per_second <= 0.0 {
            Duration::MAX
        } else {
            Duration::try_from_secs_f64(missing / self.per_second).unwrap_or(Duration::MAX)
        }
    }

    /// Whether the bucket is full again at `now` (forgetting it then changes nothing).
    pub fn is_full_at(&self, now: Instant) -> bool {
        self.tokens_at(now) >= self.burst
    }

    /// One event now: `Some(n)` when it passes (`n` events were refused since the last
    /// one that passed), `None` when it is refused (and counted).
    pub fn admit(&mut self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    /// [`Throttle::admit`] at a given time (tests).
    pub fn admit_at(&mut self, now: Instant) -> Option<u64> {
        self.tokens = self.tokens_at(now);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.dropped))
        } else {
            self.dropped += 1;
            None
        }
    }

    /// Events refused since the last one that passed.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Takes the count of refused events (to report them when nothing else will pass).
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds_and_refusals_are_counted() {
        let start = Instant::now();
        let mut t = Throttle::new(3, 2);
        for _ in 0..3 {
            assert_eq!(t.admit_at(start), Some(0));
        }
        assert_eq!(t.admit_at(start), None);
        assert_eq!(t.admit_at(start), None);
        assert_eq!(t.dropped(), 2);
        // Half a second later one more token has come back; the refusals are reported.
        assert_eq!(t.admit_at(start + Duration::from_millis(500)), Some(2));
        assert_eq!(t.admit_at(start + Duration::from_millis(500)), None);
        // A long quiet spell refills up to the burst, no more.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(t.admit_at(later).is_some());
        }
        assert_eq!(t.admit_at(later), None);
    }

    #[test]
    fn per_minute_says_how_long_until_the_next_token_and_when_it_is_full() {
        let start = Instant::now();
        let mut t = Throttle::per_minute(6);
        assert!(t.is_full_at(start));
        assert_eq!(t.wait_at(start), Duration::ZERO);
        for _ in 0..6 {
            assert!(t.admit_at(start).is_some());
        }
        assert!(t.admit_at(start).is_none());
        assert!(!t.is_full_at(start));
        // Six a minute: a token every 10 s.
        assert_eq!(t.wait_at(start).as_secs_f64().round(), 10.0);
        let later = start + Duration::from_secs(4);
        assert_eq!(t.wait_at(later).as_secs_f64().round(), 6.0);
        assert!(t.admit_at(start + Duration::from_secs(10)).is_some());
        assert!(!t.is_full_at(start + Duration::from_secs(59)));
        assert!(t.is_full_at(start + Duration::from_secs(70)));
    }

    #[test]
    fn every_passes_one_event_per_interval() {
        let start = Instant::now();
        let mut t = Throttle::every(Duration::from_secs(5));
        assert_eq!(t.admit_at(start), Some(0));
        for i in 1..50 {
            assert_eq!(t.admit_at(start + Duration::from_millis(i * 50)), None);
        }
        assert_eq!(t.admit_at(start + Duration::from_secs(5)), Some(49));
    }
}
