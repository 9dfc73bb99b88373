use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;

use super::*;
use crate::mcp::caller::Caller;

const PREFIX: &str = "p:s:";
const NOW: Millis = 1_000_000;
const TTL: Millis = 60_000;

fn record(caller: Caller) -> SessionRecord {
    SessionRecord {
        expires_at: NOW + TTL,
        seq: 1,
        ..super::super::tests::record(Some(caller))
    }
}

fn alice() -> Caller {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, "Bearer alice".parse().unwrap());
    Caller::of(&headers)
}

fn use_at(now: Millis, caller: Caller) -> Renewal {
    Renewal {
        now,
        expires_at: now + TTL,
        presented: None,
        caller,
    }
}

/// Redis's end of a worker's tracking connection.
struct Redis {
    end: UnixStream,
}

impl Redis {
    /// Reports that `keys` changed.
    async fn report(&mut self, keys: &[&str]) {
        let mut message = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n".to_vec();
        message.extend_from_slice(format!("*{}\r\n", keys.len()).as_bytes());
        for key in keys {
            message.extend_from_slice(format!("${}\r\n{key}\r\n", key.len()).as_bytes());
        }
        self.send(&message).await;
    }

    async fn flush(&mut self) {
        self.send(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n")
            .await;
    }

    /// Writes `bytes` to the tracker: delivered when this returns (a Unix socket pair),
    /// though the runtime has not yet polled for it — the cache reads its reports with a
    /// system call of its own, whatever the runtime knows.
    async fn send(&mut self, bytes: &[u8]) {
        self.end.write_all(bytes).await.unwrap();
    }
}

/// A cache of `capacity` whose worker tracks at generation 1.
fn tracked(capacity: usize) -> (Cache, Redis) {
    let cache = Cache::new(
        capacity,
        PREFIX.into(),
        Duration::from_secs(1),
        Counted::default(),
    );
    let (tracker, end) = UnixStream::pair().unwrap();
    // The first use finds tracking off and asks for it to be started.
    let (lease, tracked) = cache.lease("x", &use_at(NOW, alice()), 1);
    let (Lease::Miss(None), Tracked::Start(serial)) = (lease, tracked) else {
        panic!("tracking is started by the first use");
    };
    cache.tracking(serial, Tracker::over(tracker), 1);
    (cache, Redis { end })
}

/// Asks about `id` (a miss) and remembers what "Redis" answered.
fn learn(cache: &Cache, id: &str, record: &SessionRecord) {
    match cache.lease(id, &use_at(NOW, alice()), 1) {
        (Lease::Miss(Some(ticket)), Tracked::Live) => cache.fill(id, record, ticket),
        _ => panic!("expected a miss with a ticket"),
    }
}

fn hit(cache: &Cache, id: &str, renewal: &Renewal) -> Option<(SessionRecord, bool)> {
    match cache.lease(id, renewal, 1) {
        (Lease::Hit { record, write }, Tracked::Live) => Some((record, write)),
        (Lease::Miss(_), _) => None,
        _ => panic!("the cache stopped tracking"),
    }
}

#[tokio::test]
async fn a_session_redis_answered_for_is_served_from_memory_renewed_and_its_renewal_queued() {
    let (cache, _redis) = tracked(10);
    learn(&cache, "a", &record(alice()));
    let later = use_at(NOW + 10, alice());
    let (served, write) = hit(&cache, "a", &later).expect("from memory");
    assert_eq!(served.seq, 2, "its sequence moves on");
    assert_eq!(served.expires_at, later.expires_at, "renewed by this use");
    assert!(write, "the first queued renewal starts the writer");
    let (served, write) = hit(&cache, "a", &use_at(NOW + 20, alice())).unwrap();
    assert_eq!(served.seq, 3);
    assert!(!write, "the writer runs already");
    let queued = cache.take_queued().expect("two renewals");
    assert_eq!(queued.len(), 2);
    assert_eq!(queued[1].1.now, NOW + 20);
    assert!(
        cache.take_queued().is_none(),
        "the writer stops when none is left"
    );
}

#[tokio::test]
async fn a_report_of_a_change_makes_the_next_use_ask_redis() {
    let (cache, mut redis) = tracked(10);
    learn(&cache, "a", &record(alice()));
    learn(&cache, "b", &record(alice()));
    redis.report(&["p:s:a", "other:s:b"]).await;
    assert!(
        hit(&cache, "a", &use_at(NOW + 1, alice())).is_none(),
        "forgotten"
    );
    assert!(
        hit(&cache, "b", &use_at(NOW + 1, alice())).is_some(),
        "a key outside the prefix names no session"
    );
    redis.flush().await;
    assert!(
        hit(&cache, "b", &use_at(NOW + 2, alice())).is_none(),
        "a flush forgets all"
    );
}

#[tokio::test]
async fn an_answer_that_crossed_a_report_is_not_remembered() {
    let (cache, mut redis) = tracked(10);
    let (Lease::Miss(Some(ticket)), _) = cache.lease("a", &use_at(NOW, alice()), 1) else {
        panic!("a miss");
    };
    // Redis answered, then reported a write of the session (a deletion at another
    // replica) before the answer was remembered.
    redis.report(&["p:s:a"]).await;
    let (Lease::Miss(Some(_)), _) = cache.lease("zzz", &use_at(NOW, alice()), 1) else {
        panic!("a miss");
    };
    cache.fill("a", &record(alice()), ticket);
    assert!(hit(&cache, "a", &use_at(NOW + 1, alice())).is_none());
    // Nor one that crossed a flush, or this worker's own removal.
    let (Lease::Miss(Some(ticket)), _) = cache.lease("a", &use_at(NOW, alice()), 1) else {
        panic!("a miss");
    };
    cache.forget("a");
    cache.fill("a", &record(alice()), ticket);
    assert!(hit(&cache, "a", &use_at(NOW + 1, alice())).is_none());
    let (Lease::Miss(Some(ticket)), _) = cache.lease("a", &use_at(NOW, alice()), 1) else {
        panic!("a miss");
    };
    redis.flush().await;
    let _ = cache.lease("zzz", &use_at(NOW, alice()), 1);
    cache.fill("a", &record(alice()), ticket);
    assert!(hit(&cache, "a", &use_at(NOW + 1, alice())).is_none());
}

#[tokio::test]
async fn a_lost_tracking_connection_stops_memory_until_tracking_is_back() {
    let (cache, redis) = tracked(10);
    learn(&cache, "a", &record(alice()));
    drop(redis);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (lease, tracked) = cache.lease("a", &use_at(NOW + 1, alice()), 1);
    assert!(matches!(lease, Lease::Miss(None)), "not from memory");
    assert!(matches!(tracked, Tracked::Waiting));
    // A tracker that broke soon after it started is tried again after a pause; nothing
    // remembered before comes back.
    let (_, tracked) = cache.lease("a", &use_at(NOW + 2, alice()), 1);
    assert!(matches!(tracked, Tracked::Waiting), "not at once");
    tokio::time::sleep(RETRY_MIN).await;
    let (_, tracked) = cache.lease("a", &use_at(NOW + 2, alice()), 1);
    let Tracked::Start(serial) = tracked else {
        panic!("started again after the pause");
    };
    let (tracker, _end) = UnixStream::pair().unwrap();
    // A task of an earlier tracker that connects late is not taken.
    let (stale, _stale_end) = UnixStream::pair().unwrap();
    cache.tracking(serial - 1, Tracker::over(stale), 1);
    let (_, tracked) = cache.lease("a", &use_at(NOW + 3, alice()), 1);
    assert!(
        matches!(tracked, Tracked::Waiting),
        "a stale tracker was taken"
    );
    cache.tracking(serial, Tracker::over(tracker), 1);
    let (lease, tracked) = cache.lease("a", &use_at(NOW + 3, alice()), 1);
    assert!(
        matches!(tracked, Tracked::Live),
        "the current tracker was not taken"
    );
    assert!(
        matches!(lease, Lease::Miss(_)),
        "remembered from before the break"
    );
}

#[tokio::test]
async fn tracking_a_server_the_link_no_longer_uses_is_started_anew() {
    let (cache, _redis) = tracked(10);
    learn(&cache, "a", &record(alice()));
    let (lease, tracked) = cache.lease("a", &use_at(NOW + 1, alice()), 2);
    let (Lease::Miss(None), Tracked::Start(serial)) = (lease, tracked) else {
        panic!("tracking is started anew");
    };
    let (_, tracked) = cache.lease("a", &use_at(NOW + 1, alice()), 2);
    assert!(matches!(tracked, Tracked::Waiting), "started once");
    // A failed start is tried again only after a pause.
    assert!(cache.not_tracking(serial), "the first failure is told");
    let (_, tracked) = cache.lease("a", &use_at(NOW + 1, alice()), 2);
    assert!(matches!(tracked, Tracked::Waiting));
}

#[tokio::test]
async fn near_its_expiry_or_for_another_caller_memory_does_not_renew() {
    let (cache, _redis) = tracked(10);
    learn(&cache, "a", &record(alice()));
    // Another caller gets the record as it is, unrenewed and not queued (the store's
    // caller refuses it).
    let (served, write) = hit(&cache, "a", &use_at(NOW + 1, Caller::ANONYMOUS)).unwrap();
    assert_eq!((served.seq, served.expires_at), (1, NOW + TTL));
    assert!(!write);
    assert!(cache.take_queued().is_none());
    // Within the margin of its expiry, Redis decides: the margin outlasts a renewal's
    // way to Redis (a pause and two of the store's timeouts) and allows for clocks apart.
    assert_eq!(cache.margin, Duration::from_millis(1000 + 5 + 2 * 1000));
    let late = NOW + TTL - cache.margin.as_millis() as Millis;
    assert!(hit(&cache, "a", &use_at(late, alice())).is_none());
    learn(&cache, "a", &record(alice()));
    assert!(hit(&cache, "a", &use_at(late - 1, alice())).is_some());
}

#[tokio::test]
async fn a_worker_remembers_at_most_its_capacity_and_nothing_when_off() {
    let (cache, _redis) = tracked(2);
    for id in ["a", "b", "c"] {
        learn(&cache, id, &record(alice()));
    }
    let remembered = ["a", "b", "c"]
        .iter()
        .filter(|id| hit(&cache, id, &use_at(NOW + 1, alice())).is_some())
        .count();
    assert_eq!(remembered, 2);

    let off = Cache::new(0, PREFIX.into(), Duration::from_secs(1), Counted::default());
    let (lease, tracked) = off.lease("a", &use_at(NOW, alice()), 1);
    assert!(matches!(lease, Lease::Miss(None)) && matches!(tracked, Tracked::Waiting));
}
