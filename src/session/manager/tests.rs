use super::*;
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;
use crate::session::MemoryStore;
use serde_json::value::RawValue;

fn negotiated() -> Negotiated {
    Negotiated {
        protocol_version: "2025-11-25",
        server_info: RawValue::from_string(r#"{"name":"s","version":"1"}"#.into()).unwrap(),
        capabilities: RawValue::from_string("{}".into()).unwrap(),
        instructions: None,
    }
}

fn new(upstream_session: Option<&str>) -> NewSession {
    NewSession {
        caller: Caller::ANONYMOUS,
        upstream: "default".into(),
        replica: 1,
        upstream_session: upstream_session.map(Arc::from),
        negotiated: Arc::new(negotiated()),
        owner: None,
        client_era: ClientEra::DataLayer,
        client: None,
    }
}

/// A session `caller` opens.
fn new_by(caller: Caller) -> NewSession {
    NewSession {
        caller,
        ..new(None)
    }
}

fn sessions(max: usize, ttl: Duration) -> Sessions {
    Sessions::new(
        Store::Memory(MemoryStore::new()),
        StateSigner::generate(),
        Settings {
            idle_ttl: ttl,
            max_sessions: max,
            max_sessions_per_caller: 0,
            creations_per_caller_per_minute: 0,
        },
    )
}

#[tokio::test]
async fn a_lease_renews_and_advances_the_state() {
    let s = sessions(10, Duration::from_secs(60));
    let issued = s
        .admit(s.reserve(None).unwrap(), new(Some("up-1")))
        .await
        .unwrap();
    let first = s
        .lease(&issued.id, Some(&issued.state), Caller::ANONYMOUS)
        .await
        .unwrap();
    assert_eq!(first.record.seq, 1);
    assert_eq!(
        first.record.backing.upstream_session.as_deref(),
        Some("up-1")
    );
    let second = s
        .lease(&issued.id, Some(&first.state), Caller::ANONYMOUS)
        .await
        .unwrap();
    assert_eq!(second.record.seq, 2);
    assert_ne!(first.state, second.state);
    assert!(second.expires_at >= first.expires_at);
    // An older state of the same session is still good (last write wins, as the data-layer sessions draft says).
    assert!(
        s.lease(&issued.id, Some(&issued.state), Caller::ANONYMOUS)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_state_from_another_session_is_refused_without_renewing() {
    let s = sessions(10, Duration::from_secs(60));
    let a = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    let b = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    assert!(matches!(
        s.lease(&a.id, Some(&b.state), Caller::ANONYMOUS).await,
        Err(SessionError::BadState)
    ));
    assert!(matches!(
        s.lease(&a.id, Some("garbage"), Caller::ANONYMOUS).await,
        Err(SessionError::BadState)
    ));
    // Nothing was renewed by the refused attempts.
    assert_eq!(
        s.lease(&a.id, None, Caller::ANONYMOUS)
            .await
            .unwrap()
            .record
            .seq,
        1
    );
}

#[tokio::test]
async fn sessions_negotiating_the_same_thing_share_it() {
    let s = sessions(10, Duration::from_secs(60));
    let a = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    let b = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    let ra = s
        .lease(&a.id, None, Caller::ANONYMOUS)
        .await
        .unwrap()
        .record;
    let rb = s
        .lease(&b.id, None, Caller::ANONYMOUS)
        .await
        .unwrap()
        .record;
    assert!(Arc::ptr_eq(&ra.backing.negotiated, &rb.backing.negotiated));
}

#[tokio::test]
async fn unknown_and_invisible_ids_are_not_found() {
    let s = sessions(10, Duration::from_secs(60));
    assert!(matches!(
        s.lease("sess-invalid", None, Caller::ANONYMOUS).await,
        Err(SessionError::NotFound)
    ));
    assert!(matches!(
        s.lease("a b", None, Caller::ANONYMOUS).await,
        Err(SessionError::NotFound)
    ));
}

#[tokio::test]
async fn the_cap_counts_reserved_and_live_sessions() {
    let s = sessions(2, Duration::from_secs(60));
    let a = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    let pending = s.reserve(None).unwrap();
    assert!(matches!(
        s.reserve(None),
        Err(SessionError::Full { max: 2 })
    ));
    drop(pending);
    let b = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    assert_eq!(s.live(), 2);
    assert!(s.end(&a.id).await.unwrap().is_some());
    assert!(s.end(&a.id).await.unwrap().is_none());
    assert_eq!(s.live(), 1);
    assert!(s.reserve(None).is_ok());
    drop(b);
}

#[tokio::test]
async fn expired_sessions_are_not_leased_and_are_reaped() {
    let s = sessions(10, Duration::from_millis(1));
    let a = s
        .admit(s.reserve(None).unwrap(), new(Some("up")))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(matches!(
        s.lease(&a.id, None, Caller::ANONYMOUS).await,
        Err(SessionError::NotFound)
    ));
    let reaped = s.take_expired().await.unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].0, a.id);
    assert_eq!(s.live(), 0);
}

#[tokio::test]
async fn the_reaper_reports_expired_sessions_and_stops_when_dropped() {
    let s = Arc::new(sessions(10, Duration::from_millis(1)));
    s.admit(s.reserve(None).unwrap(), new(Some("up")))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reaper = spawn_reaper(s.clone(), Duration::from_millis(5), move |_, record| {
        let _ = tx.send(record.backing.upstream_session);
        std::future::ready(())
    });
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap();
    assert_eq!(got.unwrap().as_deref(), Some("up"));
    drop(reaper);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .unwrap()
            .is_none()
    );
}

/// A verified caller (a token's subject): one that has a budget of its own.
fn caller(subject: &str) -> Caller {
    Caller::subject("https://idp.example/", subject)
}

/// The fairness key of a verified caller (wherever it calls from).
fn key(caller: Caller) -> Option<CallerKey> {
    CallerKey::of(caller, None)
}

fn upstream() -> Arc<str> {
    "default".into()
}

#[tokio::test]
async fn sessions_bound_to_a_caller_are_counted_per_caller_until_they_end() {
    let s = sessions(10, Duration::from_millis(50));
    let up = upstream();
    let (alice, bob) = (caller("Bearer alice"), caller("Bearer bob"));
    let bound = |c: Caller| s.reserve_for(&up, c, key(c), 2);
    let first = s.admit(bound(alice).unwrap(), new_by(alice)).await.unwrap();
    assert_eq!(
        s.lease(&first.id, None, alice).await.unwrap().record.caller,
        Some(alice)
    );
    let pending = bound(alice).unwrap();
    assert!(matches!(
        bound(alice),
        Err(SessionError::Caller(Refused::Bound { max: 2 }))
    ));
    assert!(bound(bob).is_ok(), "another caller has its own count");
    drop(pending);
    let held = |c: Caller| s.fairness().held_by(key(c).unwrap(), Some("default"));
    assert_eq!(held(alice), 1, "a place never used is given back");
    let second = s.admit(bound(alice).unwrap(), new_by(alice)).await.unwrap();
    assert_eq!(held(alice), 2);
    s.end(&second.id).await.unwrap();
    assert_eq!(held(alice), 1, "ending one frees its place");
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(s.take_expired().await.unwrap().len(), 1);
    assert_eq!(held(alice), 0, "expiry frees it too");
    assert_eq!(s.live(), 0);
}

#[tokio::test]
async fn a_caller_is_counted_per_upstream() {
    let s = sessions(10, Duration::from_secs(60));
    let (alpha, beta): (Arc<str>, Arc<str>) = ("alpha".into(), "beta".into());
    let alice = caller("Bearer alice");
    let mut held = Vec::new();
    held.push(s.reserve_for(&alpha, alice, key(alice), 1).unwrap());
    assert!(matches!(
        s.reserve_for(&alpha, alice, key(alice), 1),
        Err(SessionError::Caller(Refused::Bound { max: 1 }))
    ));
    held.push(
        s.reserve_for(&beta, alice, key(alice), 1)
            .expect("another upstream has its own cap"),
    );
    let fair = s.fairness();
    assert_eq!(fair.held_by(key(alice).unwrap(), Some("alpha")), 1);
    assert_eq!(fair.held_by(key(alice).unwrap(), Some("beta")), 1);
    drop(held);
    assert_eq!(fair.callers(), 0);
}

#[tokio::test]
async fn callers_without_credentials_are_counted_by_their_network() {
    let s = sessions(3, Duration::from_secs(60));
    let up = upstream();
    let from = |ip: [u8; 4]| CallerKey::of(Caller::ANONYMOUS, Some(ip.into()));
    for _ in 0..2 {
        s.admit(
            s.reserve_for(&up, Caller::ANONYMOUS, from([192, 0, 2, 1]), 2)
                .unwrap(),
            new(None),
        )
        .await
        .unwrap();
    }
    assert!(matches!(
        s.reserve_for(&up, Caller::ANONYMOUS, from([192, 0, 2, 1]), 2),
        Err(SessionError::Caller(Refused::Bound { max: 2 }))
    ));
    let other = s.reserve_for(&up, Caller::ANONYMOUS, from([192, 0, 2, 2]), 2);
    let other = s.admit(other.unwrap(), new(None)).await.unwrap();
    assert!(matches!(
        s.reserve_for(&up, Caller::ANONYMOUS, from([192, 0, 2, 3]), 2),
        Err(SessionError::Full { max: 3 })
    ));
    assert!(s.end(&other.id).await.unwrap().is_some());
}

fn fair_sessions(max: usize, per_caller: usize, per_minute: u32) -> Sessions {
    Sessions::new(
        Store::Memory(MemoryStore::new()),
        StateSigner::generate(),
        Settings {
            idle_ttl: Duration::from_millis(50),
            max_sessions: max,
            max_sessions_per_caller: per_caller,
            creations_per_caller_per_minute: per_minute,
        },
    )
}

#[tokio::test]
async fn a_caller_at_its_cap_is_refused_while_others_create_and_ends_give_places_back() {
    let s = fair_sessions(10, 2, 0);
    let (alice, bob) = (key(caller("Bearer alice")), key(caller("Bearer bob")));
    let a1 = s.admit(s.reserve(alice).unwrap(), new(None)).await.unwrap();
    let _a2 = s.admit(s.reserve(alice).unwrap(), new(None)).await.unwrap();
    assert!(matches!(
        s.reserve(alice),
        Err(SessionError::Caller(Refused::Sessions { max: 2, .. }))
    ));
    assert_eq!(
        s.live(),
        2,
        "the refused place went back under max_sessions"
    );
    s.admit(s.reserve(bob).unwrap(), new(None)).await.unwrap();
    // A delete gives a place back; so does expiry, once reaped.
    s.end(&a1.id).await.unwrap();
    let _a3 = s.admit(s.reserve(alice).unwrap(), new(None)).await.unwrap();
    assert!(s.reserve(alice).is_err());
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(s.take_expired().await.unwrap().len(), 3);
    assert!(s.reserve(alice).is_ok());
    // Nobody's sessions (no key) are bounded by max_sessions only.
    assert!(s.reserve(None).is_ok());
}

#[tokio::test]
async fn creations_beyond_the_rate_are_refused_with_the_wait() {
    let s = fair_sessions(10, 0, 2);
    let alice = key(caller("Bearer alice"));
    for _ in 0..2 {
        let issued = s.admit(s.reserve(alice).unwrap(), new(None)).await.unwrap();
        s.end(&issued.id).await.unwrap();
    }
    match s.reserve(alice) {
        Err(SessionError::Caller(Refused::Rate {
            per_minute: 2,
            retry_after,
        })) => assert!(
            (Duration::from_secs(29)..=Duration::from_secs(30)).contains(&retry_after),
            "{retry_after:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.live(), 0);
}

#[tokio::test]
async fn every_session_is_bound_to_its_caller_and_another_caller_renews_nothing() {
    let s = sessions(10, Duration::from_secs(60));
    let (alice, bob) = (caller("Bearer alice"), caller("Bearer bob"));
    let a = s
        .admit(s.reserve(None).unwrap(), new_by(alice))
        .await
        .unwrap();
    let first = s.lease(&a.id, Some(&a.state), alice).await.unwrap();
    assert_eq!(first.record.caller, Some(alice));
    for (caller, state) in [
        (bob, Some(a.state.as_str())),
        (bob, Some("garbage")),
        (bob, None),
        (Caller::ANONYMOUS, None),
    ] {
        assert!(
            matches!(
                s.lease(&a.id, state, caller).await,
                Err(SessionError::OtherCaller { bound, caller: c }) if bound == alice && c == caller
            ),
            "{caller:?} with {state:?}"
        );
    }
    // Nothing was renewed by the refused uses; alice carries on.
    assert_eq!(s.lease(&a.id, None, alice).await.unwrap().record.seq, 2);
    // A session opened without credentials is bound too: to callers without any.
    let anonymous = s.admit(s.reserve(None).unwrap(), new(None)).await.unwrap();
    assert!(matches!(
        s.lease(&anonymous.id, None, alice).await,
        Err(SessionError::OtherCaller { .. })
    ));
    assert!(
        s.lease(&anonymous.id, None, Caller::ANONYMOUS)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_sealed_id_is_bound_to_its_caller_at_every_replica() {
    let keys = [[9u8; 32].to_vec()];
    let replica = || {
        Sessions::new(
            Store::Sealed(
                crate::session::SealedStore::new(
                    &keys,
                    std::sync::Arc::new(crate::session::Tombstones::new(
                        100,
                        Duration::from_secs(60),
                    )),
                )
                .unwrap(),
            ),
            StateSigner::new(&[5u8; 32]),
            Settings {
                idle_ttl: Duration::from_secs(60),
                max_sessions: 10,
                max_sessions_per_caller: 0,
                creations_per_caller_per_minute: 0,
            },
        )
    };
    let (a, b) = (replica(), replica());
    let (alice, bob) = (caller("Bearer alice"), caller("Bearer bob"));
    let issued = a
        .admit(a.reserve(None).unwrap(), new_by(alice))
        .await
        .unwrap();
    // Another replica sharing only the keys knows whose it is.
    assert!(
        b.lease(&issued.id, Some(&issued.state), alice)
            .await
            .is_ok()
    );
    for replica in [&a, &b] {
        assert!(matches!(
            replica.lease(&issued.id, Some(&issued.state), bob).await,
            Err(SessionError::OtherCaller { .. })
        ));
        assert!(matches!(
            replica.check_state(&issued.id, "garbage", bob).await,
            Err(SessionError::OtherCaller { .. })
        ));
        assert!(matches!(
            replica.check_state(&issued.id, "garbage", alice).await,
            Err(SessionError::BadState)
        ));
    }
}
