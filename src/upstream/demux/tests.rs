#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use super::*;

#[derive(Debug, Clone)]
struct Gone;

impl Failure for Gone {
    fn error(&self) -> UpstreamError {
        UpstreamError::SessionGone
    }
}

fn demux() -> Demux<Gone> {
    Demux::new("test")
}

fn text(delivery: Option<Delivery>) -> String {
    String::from_utf8(delivery.expect("a message").expect("not an error").to_vec()).unwrap()
}

/// The id the upstream saw on a registered request.
fn sent_id(registered: &Registered) -> u64 {
    let envelope = Envelope::parse(&registered.message).unwrap();
    envelope.id.unwrap().get().parse().unwrap()
}

/// The progress token the upstream sees on a registered request.
fn sent_token(registered: &Registered) -> String {
    let value: serde_json::Value = serde_json::from_slice(&registered.message).unwrap();
    value["params"]["_meta"]["progressToken"].to_string()
}

fn request(id: &str, meta: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"x"{meta}}}}}"#)
        .into_bytes()
}

fn notification(method: &str, params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#).into_bytes()
}

fn response(id: u64, text: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"text":"{text}"}}}}"#).into_bytes()
}

#[tokio::test]
async fn requests_with_the_same_id_are_renamed_and_answered_with_their_own_id() {
    let d = demux();
    let mut a = d.request(&request("7", "")).unwrap();
    let mut b = d.request(&request("7", "")).unwrap();
    assert_ne!(sent_id(&a), sent_id(&b), "the upstream sees two ids");
    // Answered in the other order: each reaches its own request, with the client's id.
    d.dispatch(&response(sent_id(&b), "b")).unwrap();
    d.dispatch(&response(sent_id(&a), "a")).unwrap();
    assert_eq!(
        text(a.rx.recv().await),
        r#"{"jsonrpc":"2.0","id":7,"result":{"text":"a"}}"#
    );
    assert_eq!(
        text(b.rx.recv().await),
        r#"{"jsonrpc":"2.0","id":7,"result":{"text":"b"}}"#
    );
    // A response to nothing in flight (answered already, or never asked) goes nowhere.
    d.dispatch(&response(sent_id(&a), "again")).unwrap();
    d.dispatch(&response(999, "unknown")).unwrap();
    assert!(a.rx.try_recv().is_err());
}

#[tokio::test]
async fn messages_go_by_token_then_to_the_only_request_then_to_listen_then_to_the_oldest() {
    let d = demux();
    let mut first = d
        .request(&request("1", r#","_meta":{"progressToken":"p1"}"#))
        .unwrap();
    // One request in flight: anything unclaimed is its.
    d.dispatch(&notification("notifications/message", r#"{"data":"only"}"#))
        .unwrap();
    assert!(text(first.rx.recv().await).contains("only"));

    let mut second = d
        .request(&request("2", r#","_meta":{"progressToken":"p2"}"#))
        .unwrap();
    // Progress follows its token, whichever request is older; the upstream knows the
    // token by the proxy's name for it, the client gets its own back.
    let token = sent_token(&second);
    assert_ne!(token, r#""p2""#);
    d.dispatch(&notification(
        "notifications/progress",
        &format!(r#"{{"progressToken":{token},"progress":1}}"#),
    ))
    .unwrap();
    assert_eq!(
        text(second.rx.recv().await),
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p2","progress":1}}"#
    );
    assert!(first.rx.try_recv().is_err());

    // Two in flight, no listen stream: the oldest.
    d.dispatch(&notification("notifications/message", r#"{"data":"two"}"#))
        .unwrap();
    assert!(text(first.rx.recv().await).contains("two"));

    // Two in flight and a listen stream: the listen stream.
    let mut listen = d.listen().unwrap();
    d.dispatch(&notification(
        "notifications/message",
        r#"{"data":"listen"}"#,
    ))
    .unwrap();
    assert!(text(listen.recv().await).contains("listen"));
    assert!(first.rx.try_recv().is_err() && second.rx.try_recv().is_err());

    // A server request with one request in flight rides on that request.
    d.dispatch(&response(sent_id(&first), "done")).unwrap();
    let server_request = br#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{}}"#;
    d.dispatch(server_request).unwrap();
    let _ = first.rx.recv().await;
    assert!(text(second.rx.recv().await).contains("elicitation/create"));
}

#[tokio::test]
async fn a_request_whose_client_left_no_longer_counts_as_in_flight() {
    let d = demux();
    let gone = d.request(&request("1", "")).unwrap();
    let mut kept = d.request(&request("2", "")).unwrap();
    drop(gone.rx);
    // Without pruning, the oldest (gone) would get it.
    d.dispatch(&notification("notifications/message", r#"{"data":"x"}"#))
        .unwrap();
    assert!(text(kept.rx.recv().await).contains(r#""x""#));
}

#[tokio::test]
async fn an_answer_behind_a_full_queue_is_never_dropped_but_notifications_are() {
    let d = demux();
    let mut r = d.request(&request("1", "")).unwrap();
    for i in 0..QUEUE + 10 {
        let params = format!(r#"{{"data":{i}}}"#);
        d.dispatch(&notification("notifications/message", &params))
            .unwrap();
    }
    d.dispatch(&response(sent_id(&r), "answer")).unwrap();
    let mut seen = Vec::new();
    while let Some(delivery) = r.rx.recv().await {
        let message = String::from_utf8(delivery.unwrap().to_vec()).unwrap();
        let last = message.contains("answer");
        seen.push(message);
        if last {
            break;
        }
    }
    assert_eq!(seen.len(), QUEUE + 1, "the queue's worth, then the answer");
    assert!(seen.last().unwrap().contains(r#""id":1"#));
}

#[tokio::test]
async fn a_cancellation_names_the_request_by_the_proxy_id() {
    let d = demux();
    let r = d.request(&request(r#""abc""#, "")).unwrap();
    let cancel = notification(
        "notifications/cancelled",
        r#"{"requestId":"abc","reason":"bye"}"#,
    );
    let out = d.outgoing(Bytes::from(cancel)).unwrap();
    let envelope = Envelope::parse(&out).unwrap();
    let params = RawObject::parse(envelope.params.unwrap()).unwrap();
    assert_eq!(
        params.get("requestId").unwrap().get(),
        sent_id(&r).to_string()
    );
    assert_eq!(params.get("reason").unwrap().get(), r#""bye""#);
    // Of a request not in flight, and anything else: as it is.
    let other = Bytes::from(notification(
        "notifications/cancelled",
        r#"{"requestId":"zzz"}"#,
    ));
    assert_eq!(d.outgoing(other.clone()).unwrap(), other);
    let answer = Bytes::from_static(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
    assert_eq!(d.outgoing(answer.clone()).unwrap(), answer);
}

#[tokio::test]
async fn a_dead_session_fails_what_is_in_flight_and_refuses_the_rest() {
    let d = demux();
    let mut r = d.request(&request("1", "")).unwrap();
    let mut listen = d.listen().unwrap();
    assert!(d.is_alive());
    assert!(d.die(Gone));
    assert!(!d.die(Gone), "only the first death counts");
    assert!(matches!(
        r.rx.recv().await,
        Some(Err(UpstreamError::SessionGone))
    ));
    assert!(listen.recv().await.is_none(), "the listen stream ends");
    assert!(matches!(
        d.request(&request("2", "")),
        Err(UpstreamError::SessionGone)
    ));
    assert!(d.listen().is_err());
    assert!(d.outgoing(Bytes::from_static(b"{}")).is_err());
    assert!(d.failure().is_some());
}

#[test]
fn what_is_not_json_rpc_is_refused() {
    let d = demux();
    assert!(d.dispatch(b"not json").is_err());
    assert!(d.dispatch(b"[1,2]").is_err());
    assert!(matches!(
        d.request(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#),
        Err(UpstreamError::Protocol(_))
    ));
}

/// Two clients sharing one session may give the same progress token: each hears its
/// own progress only, with its own token.
#[tokio::test]
async fn two_requests_with_the_same_progress_token_each_hear_their_own_progress() {
    let d = demux();
    let meta = r#","_meta":{"progressToken":1}"#;
    let mut a = d.request(&request("1", meta)).unwrap();
    let mut b = d.request(&request("1", meta)).unwrap();
    let (token_a, token_b) = (sent_token(&a), sent_token(&b));
    assert_ne!(token_a, token_b, "the upstream sees two tokens");
    for (token, n) in [(&token_b, 1), (&token_a, 2), (&token_b, 3)] {
        d.dispatch(&notification(
            "notifications/progress",
            &format!(r#"{{"progressToken":{token},"progress":{n}}}"#),
        ))
        .unwrap();
    }
    let progress = |n: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":1,"progress":{n}}}}}"#
        )
    };
    assert_eq!(text(b.rx.recv().await), progress(1));
    assert_eq!(text(a.rx.recv().await), progress(2));
    assert_eq!(text(b.rx.recv().await), progress(3));
    assert!(a.rx.try_recv().is_err());
    // The id and the token are both renamed in the request, nothing else.
    let sent = String::from_utf8(a.message.to_vec()).unwrap();
    assert_eq!(
        sent,
        format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"x","_meta":{{"progressToken":{token_a}}}}}}}"#,
            sent_id(&a)
        )
    );
}
