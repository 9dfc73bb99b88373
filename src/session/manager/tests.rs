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
        upstream_session: upstream_session.map(str::to_owned),
        negotiated: negotiated(),
        owner: None,
        legacy: false,
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
        },
    )
}

#[tokio::test]
async fn a_lease_renews_and_advances_the_state() {
    let s = sessions(10, Duration::from_secs(60));
    let issued = s
        .admit(s.reserve().unwrap(), new(Some("up-1")))
        .await
        .unwrap();
    let first = s
        .lease(&issued.id, Some(&issued.state), Caller::ANONYMOUS)
        .await
        .unwrap();
    assert_eq!(first.record.seq, 1);
    assert_eq!(first.record.route.upstream_session.as_deref(), Some("up-1"));
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
    let a = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
    let b = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
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
    let a = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
    let b = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
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
    assert!(Arc::ptr_eq(&ra.route.negotiated, &rb.route.negotiated));
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
    let a = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
    let pending = s.reserve().unwrap();
    assert!(matches!(s.reserve(), Err(SessionError::Full { max: 2 })));
    drop(pending);
    let b = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
    assert_eq!(s.live(), 2);
    assert!(s.end(&a.id).await.unwrap().is_some());
    assert!(s.end(&a.id).await.unwrap().is_none());
    assert_eq!(s.live(), 1);
    assert!(s.reserve().is_ok());
    drop(b);
}

#[tokio::test]
async fn expired_sessions_are_not_leased_and_are_reaped() {
    let s = sessions(10, Duration::from_millis(1));
    let a = s
        .admit(s.reserve().unwrap(), new(Some("up")))
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
    s.admit(s.reserve().unwrap(), new(Some("up")))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reaper = spawn_reaper(s.clone(), Duration::from_millis(5), move |_, record| {
        let _ = tx.send(record.route.upstream_session);
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

fn caller(token: &str) -> Caller {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, token.parse().unwrap());
    Caller::of(&headers)
}

fn upstream() -> Arc<str> {
    "default".into()
}

#[tokio::test]
async fn sessions_bound_to_a_caller_are_counted_per_caller_until_they_end() {
    let s = sessions(10, Duration::from_millis(50));
    let up = upstream();
    let (alice, bob) = (caller("Bearer alice"), caller("Bearer bob"));
    let first = s
        .admit(s.reserve_for(&up, alice, 2).unwrap(), new_by(alice))
        .await
        .unwrap();
    assert_eq!(
        s.lease(&first.id, None, alice).await.unwrap().record.caller,
        Some(alice)
    );
    let pending = s.reserve_for(&up, alice, 2).unwrap();
    assert!(matches!(
        s.reserve_for(&up, alice, 2),
        Err(SessionError::CallerFull { max: 2 })
    ));
    assert!(
        s.reserve_for(&up, bob, 2).is_ok(),
        "another caller has its own count"
    );
    drop(pending);
    assert_eq!(
        s.bound_to(&up, alice),
        1,
        "a place never used is given back"
    );
    let second = s
        .admit(s.reserve_for(&up, alice, 2).unwrap(), new_by(alice))
        .await
        .unwrap();
    assert_eq!(s.bound_to(&up, alice), 2);
    s.end(&second.id).await.unwrap();
    assert_eq!(s.bound_to(&up, alice), 1, "ending one frees its place");
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(s.take_expired().await.unwrap().len(), 1);
    assert_eq!(s.bound_to(&up, alice), 0, "expiry frees it too");
    assert_eq!(s.live(), 0);
}

#[tokio::test]
async fn a_caller_is_counted_per_upstream() {
    let s = sessions(10, Duration::from_secs(60));
    let (alpha, beta): (Arc<str>, Arc<str>) = ("alpha".into(), "beta".into());
    let alice = caller("Bearer alice");
    let mut held = Vec::new();
    held.push(s.reserve_for(&alpha, alice, 1).unwrap());
    assert!(matches!(
        s.reserve_for(&alpha, alice, 1),
        Err(SessionError::CallerFull { max: 1 })
    ));
    held.push(
        s.reserve_for(&beta, alice, 1)
            .expect("another upstream has its own cap"),
    );
    assert_eq!(s.bound_to(&alpha, alice), 1);
    assert_eq!(s.bound_to(&beta, alice), 1);
    drop(held);
    assert_eq!(s.bound_to(&alpha, alice) + s.bound_to(&beta, alice), 0);
}

#[tokio::test]
async fn callers_without_credentials_are_bounded_by_the_global_cap_only() {
    let s = sessions(3, Duration::from_secs(60));
    let up = upstream();
    for _ in 0..3 {
        s.admit(s.reserve_for(&up, Caller::ANONYMOUS, 1).unwrap(), new(None))
            .await
            .unwrap();
    }
    assert!(matches!(
        s.reserve_for(&up, Caller::ANONYMOUS, 1),
        Err(SessionError::Full { max: 3 })
    ));
    let plain = s.peek("mcps_unknown").await.unwrap();
    assert!(plain.is_none());
}

#[tokio::test]
async fn every_session_is_bound_to_its_caller_and_another_caller_renews_nothing() {
    let s = sessions(10, Duration::from_secs(60));
    let (alice, bob) = (caller("Bearer alice"), caller("Bearer bob"));
    let a = s.admit(s.reserve().unwrap(), new_by(alice)).await.unwrap();
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
    let anonymous = s.admit(s.reserve().unwrap(), new(None)).await.unwrap();
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
            Store::Sealed(crate::session::SealedStore::new(&keys).unwrap()),
            StateSigner::new(&[5u8; 32]),
            Settings {
                idle_ttl: Duration::from_secs(60),
                max_sessions: 10,
            },
        )
    };
    let (a, b) = (replica(), replica());
    let (alice, bob) = (caller("Bearer alice"), caller("Bearer bob"));
    let issued = a.admit(a.reserve().unwrap(), new_by(alice)).await.unwrap();
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
