use std::net::IpAddr;

use super::*;

fn caller(n: u8) -> CallerKey {
    CallerKey::Network(IpAddr::from([192, 0, 2, n]))
}

fn limits(max_sessions: usize, per_minute: u32) -> Limits {
    Limits {
        max_sessions,
        per_minute,
        max_callers: 1000,
    }
}

/// A clock the test moves: `t(s)` is `s` seconds after the start, on both clocks.
struct Clock {
    start: Instant,
    start_ms: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start: Instant::now(),
            start_ms: 1_000_000,
        }
    }

    fn t(&self, secs: f64) -> Now {
        let d = Duration::from_secs_f64(secs);
        Now {
            at: self.start + d,
            ms: self.start_ms + d.as_millis() as u64,
        }
    }

    fn ms(&self, secs: u64) -> u64 {
        self.start_ms + secs * 1000
    }
}

#[test]
fn the_rate_passes_a_minute_at_once_then_says_when_the_next_may_open() {
    let clock = Clock::new();
    let f = Fairness::new(limits(0, 3), false);
    for i in 0..3 {
        // Places dropped at once (a create that failed) still spent their token.
        assert!(f.take(Some(caller(1)), None, clock.t(0.0)).is_ok(), "{i}");
    }
    let refused = f.take(Some(caller(1)), None, clock.t(0.0)).unwrap_err();
    assert_eq!(
        refused,
        Refused::Rate {
            per_minute: 3,
            retry_after: Duration::from_secs(20)
        },
        "three a minute: one every 20 s"
    );
    assert_eq!(refused.key(), "session.creations_per_caller_per_minute");
    assert_eq!(refused.max(), 3);
    // 15.5 s later the next token is 4.5 s away: 5 s, rounded up.
    assert_eq!(
        f.take(Some(caller(1)), None, clock.t(15.5))
            .unwrap_err()
            .retry_after(),
        Duration::from_secs(5)
    );
    // Another caller has its own bucket.
    assert!(f.take(Some(caller(2)), None, clock.t(0.0)).is_ok());
    assert!(f.take(Some(caller(1)), None, clock.t(20.1)).is_ok());
    assert!(f.take(Some(caller(1)), None, clock.t(20.1)).is_err());
}

#[test]
fn the_cap_counts_sessions_until_they_end_and_spends_no_token_on_a_refusal() {
    let clock = Clock::new();
    let f = Fairness::new(limits(2, 4), false);
    let alice = Some(caller(1));
    f.take(alice, None, clock.t(0.0))
        .unwrap()
        .admitted("a1", clock.ms(600));
    let pending = f.take(alice, None, clock.t(0.0)).unwrap();
    let refused = f.take(alice, None, clock.t(1.0)).unwrap_err();
    assert_eq!(
        refused,
        Refused::Sessions {
            max: 2,
            retry_after: MAX_SESSIONS_HINT
        },
        "a1 expires in 599 s: the hint is at most a minute"
    );
    assert_eq!(refused.key(), "session.max_sessions_per_caller");
    assert!(
        f.take(Some(caller(2)), None, clock.t(1.0)).is_ok(),
        "another caller is not counted against alice"
    );
    // A place being opened is given back when its create fails.
    drop(pending);
    f.take(alice, None, clock.t(1.0))
        .unwrap()
        .admitted("a2", clock.ms(30));
    // The hint follows the first expiry.
    assert_eq!(
        f.take(alice, None, clock.t(2.0)).unwrap_err().retry_after(),
        Duration::from_secs(28)
    );
    assert_eq!(f.held_by(caller(1), None), 2);
    // Expired but not ended (the memory store's reaper ends it, and says so): held.
    f.renewed("a2", clock.ms(1));
    f.sweep(clock.t(2.0));
    assert_eq!(
        f.take(alice, None, clock.t(2.0)).unwrap_err().retry_after(),
        Duration::from_secs(1)
    );
    f.ended("a2", clock.t(2.0).at);
    // Four a minute: three spent on places; the refusals by the cap spent none.
    assert!(f.take(alice, None, clock.t(2.0)).is_ok());
    assert!(matches!(
        f.take(alice, None, clock.t(2.0)),
        Err(Refused::Rate { per_minute: 4, .. })
    ));
}

#[test]
fn renewals_move_the_hint_and_with_a_shared_store_expiry_frees_a_place() {
    let clock = Clock::new();
    let f = Fairness::new(limits(1, 0), true);
    let alice = Some(caller(1));
    f.take(alice, None, clock.t(0.0))
        .unwrap()
        .admitted("s1", clock.ms(10));
    assert_eq!(
        f.take(alice, None, clock.t(4.0)).unwrap_err().retry_after(),
        Duration::from_secs(6)
    );
    // Used here: counted longer.
    f.renewed("s1", clock.ms(20));
    assert!(f.take(alice, None, clock.t(15.0)).is_err());
    // Another replica ended it; nothing here hears of it: its expiry frees the place.
    assert!(f.take(alice, None, clock.t(20.0)).is_ok());
    assert_eq!(f.sessions(), 0, "its id is forgotten too");
}

#[test]
fn bound_sessions_are_capped_per_upstream_and_count_towards_the_caller_cap() {
    let clock = Clock::new();
    let f = Fairness::new(limits(3, 0), false);
    let alice = Some(caller(1));
    let alpha = BoundAt {
        upstream: "alpha".into(),
        max: 2,
    };
    let beta = BoundAt {
        upstream: "beta".into(),
        max: 2,
    };
    f.take(alice, Some(&alpha), clock.t(0.0))
        .unwrap()
        .admitted("h1", clock.ms(60));
    let h2 = f.take(alice, Some(&alpha), clock.t(0.0)).unwrap();
    assert_eq!(
        f.take(alice, Some(&alpha), clock.t(0.0)).unwrap_err(),
        Refused::Bound { max: 2 }
    );
    assert_eq!(f.held_by(caller(1), Some("alpha")), 2);
    // At beta alice has room of its own, up to its cap on every session.
    f.take(alice, Some(&beta), clock.t(0.0))
        .unwrap()
        .admitted("h3", clock.ms(60));
    assert!(matches!(
        f.take(alice, Some(&beta), clock.t(0.0)),
        Err(Refused::Sessions { max: 3, .. })
    ));
    drop(h2);
    assert_eq!(f.held_by(caller(1), Some("alpha")), 1);
    f.ended("h1", clock.t(0.0).at);
    f.ended("h3", clock.t(0.0).at);
    assert_eq!(f.callers(), 0, "nothing held, no rate: forgotten at once");
}

#[test]
fn nobody_and_limits_that_are_off_are_not_counted() {
    let clock = Clock::new();
    let off = Fairness::new(limits(0, 0), false);
    for i in 0..100 {
        off.take(Some(caller(1)), None, clock.t(0.0))
            .unwrap()
            .admitted(&format!("s{i}"), clock.ms(60));
    }
    assert_eq!((off.callers(), off.sessions()), (0, 0));
    let on = Fairness::new(limits(1, 1), false);
    for _ in 0..3 {
        let _kept = on.take(None, None, clock.t(0.0)).unwrap();
    }
    assert_eq!(on.callers(), 0);
    // Only the rate: sessions are not counted one by one.
    let rate = Fairness::new(limits(0, 5), false);
    rate.take(Some(caller(1)), None, clock.t(0.0))
        .unwrap()
        .admitted("s", clock.ms(60));
    assert_eq!(rate.sessions(), 0);
}

#[test]
fn the_table_forgets_callers_with_nothing_held_and_stays_bounded() {
    let clock = Clock::new();
    let f = Fairness::new(
        Limits {
            max_sessions: 10,
            per_minute: 10,
            max_callers: 4,
        },
        false,
    );
    // A caller that opened and closed a session is kept while its bucket refills.
    f.take(Some(caller(1)), None, clock.t(0.0))
        .unwrap()
        .admitted("s1", clock.ms(60));
    f.ended("s1", clock.t(1.0).at);
    assert_eq!(f.callers(), 1);
    f.sweep(clock.t(3.0));
    assert_eq!(
        f.callers(),
        1,
        "ten a minute: its token comes back after 6 s"
    );
    f.sweep(clock.t(6.5));
    assert_eq!(f.callers(), 0, "full again: forgotten");

    // Four callers hold sessions; two more only refilling buckets.
    for n in 1..=2 {
        f.take(Some(caller(n)), None, clock.t(100.0))
            .unwrap()
            .admitted(&format!("live{n}"), clock.ms(1000));
    }
    for n in 3..=4 {
        drop(f.take(Some(caller(n)), None, clock.t(100.0)).unwrap());
    }
    assert_eq!(f.callers(), 4);
    // A fifth caller: those holding nothing make room (their buckets forgotten).
    let fifth = f.take(Some(caller(5)), None, clock.t(100.0)).unwrap();
    assert_eq!(f.callers(), 3);
    let sixth = f.take(Some(caller(6)), None, clock.t(100.0)).unwrap();
    assert_eq!(f.callers(), 4);
    // Every account holds something: a seventh is refused, the others carry on.
    assert_eq!(
        f.take(Some(caller(7)), None, clock.t(100.0)).unwrap_err(),
        Refused::Callers { max: 4 }
    );
    assert!(f.take(Some(caller(1)), None, clock.t(100.0)).is_ok());
    drop((fifth, sixth));
    assert!(f.take(Some(caller(7)), None, clock.t(100.0)).is_ok());
}

#[test]
fn many_callers_opening_and_closing_leave_nothing_behind() {
    let clock = Clock::new();
    let f = Fairness::new(limits(5, 100), false);
    for n in 0..=255u8 {
        for i in 0..5 {
            f.take(Some(caller(n)), None, clock.t(0.0))
                .unwrap()
                .admitted(&format!("{n}-{i}"), clock.ms(60));
        }
    }
    assert_eq!((f.callers(), f.sessions()), (256, 1280));
    for n in 0..=255u8 {
        for i in 0..5 {
            f.ended(&format!("{n}-{i}"), clock.t(1.0).at);
        }
    }
    assert_eq!(f.sessions(), 0);
    f.sweep(clock.t(60.0));
    assert_eq!(f.callers(), 0);
}
