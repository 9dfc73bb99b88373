use super::*;

fn stamp() -> Stamp {
    Stamp {
        request_id: Bytes::from_static(b"2"),
        session: Bytes::from(meta::session_stamp(
            "sess-abc123",
            "eyJrIjoidjIifQ==",
            "2026-03-01T00:00:00Z",
        )),
        top_level: None,
        complete: false,
    }
}

#[test]
fn a_modern_request_gets_result_type_complete() {
    let s = Stamp {
        complete: true,
        ..stamp()
    };
    let Stamped::Response(Some(out)) =
        stamp_message(br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#, &s)
    else {
        panic!("not stamped")
    };
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(v["result"]["tools"], serde_json::json!([]));
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"],
        "sess-abc123"
    );
}

#[test]
fn the_sep_1364_dialect_gets_the_session_at_the_top_level_too() {
    let s = Stamp {
        top_level: Some(Bytes::from_static(br#""sess-abc123""#)),
        ..stamp()
    };
    let Stamped::Response(Some(out)) =
        stamp_message(br#"{"jsonrpc":"2.0","id":2,"result":{}}"#, &s)
    else {
        panic!("not stamped")
    };
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["sessionId"], "sess-abc123");
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"],
        "sess-abc123"
    );
    let Stamped::Response(Some(out)) = stamp_message(
        br#"{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"x"}}"#,
        &s,
    ) else {
        panic!("errors are echoed too")
    };
    assert!(out.starts_with(br#"{"sessionId":"sess-abc123","jsonrpc""#));
}

#[test]
fn the_drafts_usage_vector_comes_back_with_the_session() {
    let upstream =
        br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}]}}"#;
    let Stamped::Response(Some(out)) = stamp_message(upstream, &stamp()) else {
        panic!("not stamped")
    };
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-abc123","state":"eyJrIjoidjIifQ==","expiresAt":"2026-03-01T00:00:00Z"}}}}"#
    );
}

#[test]
fn only_the_response_to_the_request_is_stamped() {
    let s = stamp();
    let notification =
        br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
    assert_eq!(stamp_message(notification, &s), Stamped::Other);
    let server_request =
        br#"{"jsonrpc":"2.0","id":2,"method":"sampling/createMessage","params":{}}"#;
    assert_eq!(stamp_message(server_request, &s), Stamped::Other);
    let other_id = br#"{"jsonrpc":"2.0","id":"2","result":{}}"#;
    assert_eq!(stamp_message(other_id, &s), Stamped::Other);
    let error = br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no"}}"#;
    assert_eq!(stamp_message(error, &s), Stamped::Response(None));
    assert_eq!(stamp_message(b"not json", &s), Stamped::Other);
}

#[test]
fn only_the_response_event_of_a_stream_is_stamped() {
    let mut events = StampEvents::new(stamp());
    let mut progress = Event {
        data: Some(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#.into()),
        ..Event::default()
    };
    let before = progress.clone();
    events.event(&mut progress);
    assert_eq!(progress, before);
    assert!(!events.responded());
    let mut response = Event {
        id: Some("ev-9".into()),
        data: Some(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#.into()),
        ..Event::default()
    };
    events.event(&mut response);
    assert_eq!(response.id.as_deref(), Some("ev-9"));
    assert!(response.data.unwrap().contains("sess-abc123"));
    assert!(events.responded());
}

#[test]
fn a_meta_that_is_not_an_object_is_replaced_by_the_session() {
    // Found by the `rewrite` fuzz target: the response went to the client unstamped, so
    // the client lost its session's state and expiry.
    let Stamped::Response(Some(out)) = stamp_message(
        br#"{"jsonrpc":"2.0","id":2,"result":{"_meta":"x","content":[1]}}"#,
        &stamp(),
    ) else {
        panic!("not stamped")
    };
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["result"]["content"], serde_json::json!([1]));
    assert_eq!(
        v["result"]["_meta"],
        serde_json::json!({"io.modelcontextprotocol/session": {
            "sessionId": "sess-abc123",
            "state": "eyJrIjoidjIifQ==",
            "expiresAt": "2026-03-01T00:00:00Z",
        }})
    );
}

#[test]
fn a_top_level_session_id_from_the_upstream_is_replaced_not_duplicated() {
    // Found by the `rewrite` fuzz target: the message had two `sessionId` members.
    let s = Stamp {
        top_level: Some(Bytes::from_static(br#""sess-abc123""#)),
        ..stamp()
    };
    let Stamped::Response(Some(out)) = stamp_message(
        br#"{"jsonrpc":"2.0","id":2,"sessionId":"upstream's","result":{}}"#,
        &s,
    ) else {
        panic!("not stamped")
    };
    let envelope = Envelope::parse(&out).expect("valid JSON-RPC");
    assert_eq!(envelope.session_id.unwrap().get(), r#""sess-abc123""#);
    assert!(!String::from_utf8_lossy(&out).contains("upstream's"));
}

/// What the stamp writes when the result is opened and written again: the reference the
/// appended form must equal, member for member.
fn opened_and_written(message: &[u8], stamp: &Stamp) -> Vec<u8> {
    let envelope = Envelope::parse(message).unwrap();
    let result = envelope.result.unwrap();
    let rewritten = stamped_result(result, stamp).unwrap();
    crate::jsonrpc::splice(message, result, &rewritten).unwrap()
}

fn value(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

#[test]
fn a_result_without_meta_gets_it_appended_as_written_and_equal_to_one_opened() {
    let modern = Stamp {
        complete: true,
        ..stamp()
    };
    for message in [
        &br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}]}}"#[..],
        br#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
        br#"{"jsonrpc":"2.0","id":2,"result":{ }}"#,
        br#"{"result":{"content": [ ], "isError" : false },"jsonrpc":"2.0","id":2}"#,
    ] {
        for s in [&stamp(), &modern] {
            let Stamped::Response(Some(out)) = stamp_message(message, s) else {
                panic!("not stamped: {}", String::from_utf8_lossy(message))
            };
            let text = String::from_utf8_lossy(&out);
            let opened = opened_and_written(message, s);
            assert_eq!(value(&out), value(&opened), "{text}");
            // Without spacing in the result, byte for byte the same (members in order).
            if !envelope_result_is_spaced(message) {
                assert_eq!(text, String::from_utf8_lossy(&opened));
            }
            // The upstream's own bytes are kept, spacing and all.
            let envelope = Envelope::parse(message).unwrap();
            let inner = envelope.result.unwrap().get().trim_end_matches('}');
            assert!(text.contains(inner), "{text}");
        }
    }
}

fn envelope_result_is_spaced(message: &[u8]) -> bool {
    let envelope = Envelope::parse(message).unwrap();
    envelope.result.unwrap().get().contains(' ')
}

#[test]
fn a_result_that_may_name_meta_is_opened() {
    // A `_meta` of its own is merged; one spelled with escapes, and the text `_meta`
    // anywhere (here in a string), make the result be opened too — all to the same
    // members as the opened form.
    for message in [
        &br#"{"jsonrpc":"2.0","id":2,"result":{"x":1,"_meta":{"trace":"t"}}}"#[..],
        br#"{"jsonrpc":"2.0","id":2,"result":{"x":1,"\u005fmeta":{"trace":"t"}}}"#,
        br#"{"jsonrpc":"2.0","id":2,"result":{"text":"see _meta"}}"#,
        br#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"task"}}"#,
    ] {
        let s = Stamp {
            complete: true,
            ..stamp()
        };
        let Stamped::Response(Some(out)) = stamp_message(message, &s) else {
            panic!("not stamped")
        };
        // Opened: byte for byte what opening writes (appending would keep a second
        // `_meta` or `resultType`, or the escaped key, in the text).
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&opened_and_written(message, &s))
        );
        let v = value(&out);
        assert_eq!(v["result"]["resultType"], "complete");
        assert_eq!(
            v["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"],
            "sess-abc123"
        );
    }
    let Stamped::Response(Some(merged)) = stamp_message(
        br#"{"jsonrpc":"2.0","id":2,"result":{"x":1,"_meta":{"trace":"t"}}}"#,
        &stamp(),
    ) else {
        panic!("not stamped")
    };
    let merged = value(&merged);
    assert_eq!(merged["result"]["_meta"]["trace"], "t");
    assert_eq!(
        merged["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"],
        "sess-abc123"
    );
}

#[test]
fn the_clients_id_goes_back_in_the_same_write_as_the_stamp() {
    for message in [
        &br#"{"jsonrpc":"2.0","id":917,"result":{"tools":[]}}"#[..],
        br#"{"result":{"tools":[]},"jsonrpc":"2.0","id":917}"#,
        br#"{"jsonrpc":"2.0","id":917,"result":{"tools":[],"_meta":{"a":1}}}"#,
        br#"{"jsonrpc":"2.0","id":917,"error":{"code":-32601,"message":"no"}}"#,
    ] {
        let envelope = Envelope::parse(message).unwrap();
        let at = crate::jsonrpc::range_in(message, envelope.id.unwrap()).unwrap();
        let client = br#""the client's""#;
        let Stamped::Response(Some(out)) =
            stamp_response(message, &envelope, &stamp(), Some((at, &client[..])))
        else {
            panic!("not written")
        };
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "the client's", "{}", String::from_utf8_lossy(&out));
        if v.get("result").is_some() {
            assert_eq!(
                v["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"],
                "sess-abc123"
            );
        } else {
            assert_eq!(v["error"]["code"], -32601);
        }
    }
}

#[test]
fn the_clients_id_and_the_sep_1364_session_go_back_together() {
    let s = Stamp {
        top_level: Some(Bytes::from_static(br#""sess-abc123""#)),
        ..stamp()
    };
    let message = br#"{"jsonrpc":"2.0","id":917,"result":{"tools":[]},"sessionId":"theirs"}"#;
    let envelope = Envelope::parse(message).unwrap();
    let at = crate::jsonrpc::range_in(message, envelope.id.unwrap()).unwrap();
    let Stamped::Response(Some(out)) = stamp_response(message, &envelope, &s, Some((at, b"2")))
    else {
        panic!("not written")
    };
    assert!(out.starts_with(br#"{"sessionId":"sess-abc123","jsonrpc":"2.0","id":2,"#));
    let v = value(&out);
    assert_eq!(v["id"], 2);
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"],
        "sess-abc123"
    );
}
