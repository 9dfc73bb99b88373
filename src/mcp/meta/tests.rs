use super::*;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

#[test]
fn reads_the_session_named_in_meta() {
    let value = raw(
        r#"{"name":"echo","_meta":{"io.modelcontextprotocol/session":{"sessionId":"s-1","state":"st"}}}"#,
    );
    let payload = Payload::open(&value).unwrap().unwrap();
    assert_eq!(
        payload.session().unwrap(),
        Some(SessionMeta {
            session_id: "s-1".into(),
            state: Some("st".into())
        })
    );
}

#[test]
fn a_payload_without_meta_names_no_session() {
    let value = raw(r#"{"name":"echo"}"#);
    assert_eq!(
        Payload::open(&value).unwrap().unwrap().session().unwrap(),
        None
    );
    let value = raw(r#"[1,2]"#);
    assert!(Payload::open(&value).unwrap().is_none());
}

#[test]
fn malformed_session_metadata_is_refused() {
    for session in [
        r#""s""#,
        r#"{}"#,
        r#"{"sessionId":7}"#,
        r#"{"sessionId":"s","state":1}"#,
    ] {
        let value = raw(&format!(
            r#"{{"_meta":{{"io.modelcontextprotocol/session":{session}}}}}"#
        ));
        let payload = Payload::open(&value).unwrap().unwrap();
        assert_eq!(
            payload.session(),
            Err(MetaError::MalformedSession),
            "{session}"
        );
    }
    let value = raw(r#"{"_meta":[1]}"#);
    assert_eq!(Payload::open(&value).unwrap_err(), MetaError::MetaNotObject);
}

#[test]
fn a_null_state_is_no_state() {
    let value =
        raw(r#"{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s","state":null}}}"#);
    let session = Payload::open(&value)
        .unwrap()
        .unwrap()
        .session()
        .unwrap()
        .unwrap();
    assert_eq!(session.state, None);
}

#[test]
fn without_meta_drops_an_emptied_meta() {
    let value =
        raw(r#"{"a":1,"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}},"b":2}"#);
    let payload = Payload::open(&value).unwrap().unwrap();
    assert_eq!(payload.without_meta(SESSION).unwrap(), br#"{"a":1,"b":2}"#);
    assert!(payload.without_meta("other").is_none());
}

#[test]
fn with_meta_adds_or_replaces_the_key() {
    let value = raw(r#"{"content":[]}"#);
    let payload = Payload::open(&value).unwrap().unwrap();
    assert_eq!(
        payload.with_meta(SESSION, br#"{"sessionId":"s"}"#),
        br#"{"content":[],"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}}}"#
    );
    let value = raw(
        r#"{"_meta":{"x":1,"io.modelcontextprotocol/session":{"sessionId":"old"}},"content":[]}"#,
    );
    let payload = Payload::open(&value).unwrap().unwrap();
    assert_eq!(
        payload.with_meta(SESSION, br#"{"sessionId":"s"}"#),
        br#"{"content":[],"_meta":{"x":1,"io.modelcontextprotocol/session":{"sessionId":"s"}}}"#
    );
}

#[test]
fn the_stamp_has_the_drafts_shape() {
    let stamp = session_stamp("sess-abc123", "eyJrIjoidjIifQ==", "2026-03-01T00:00:00Z");
    assert_eq!(
        stamp,
        br#"{"sessionId":"sess-abc123","state":"eyJrIjoidjIifQ==","expiresAt":"2026-03-01T00:00:00Z"}"#
    );
}

#[test]
fn the_stamp_is_the_string_object_of_its_members_in_a_buffer_of_its_size() {
    for (id, state, expires) in [
        ("mcps_1", "AQID", "2026-03-01T00:00:00Z"),
        ("", "", ""),
        // Escaped as any string is (the proxy's own values never need it).
        ("a\"b", "x\\y", "t\n\u{1}"),
    ] {
        let stamp = session_stamp(id, state, expires);
        let object = crate::jsonrpc::string_object(&[
            ("sessionId", id),
            ("state", state),
            ("expiresAt", expires),
        ]);
        assert_eq!(stamp, object, "{id:?} {state:?} {expires:?}");
    }
    let stamp = session_stamp("mcps_1", "AQID", "2026-03-01T00:00:00Z");
    assert_eq!(stamp.capacity(), stamp.len());
}

#[test]
fn typed_meta_keys_are_checked() {
    let check = |params: &str| {
        let value = raw(params);
        Payload::open(&value).unwrap().unwrap().check_typed_meta()
    };
    for good in [
        r#"{"_meta":{"progressToken":"p"}}"#,
        r#"{"_meta":{"progressToken":7}}"#,
        r#"{"_meta":{"progressToken":-1.5}}"#,
        r#"{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"}}}"#,
        r#"{"_meta":{"other":null}}"#,
        r#"{"name":"x"}"#,
    ] {
        assert_eq!(check(good), Ok(()), "{good}");
    }
    for (bad, key) in [
        (r#"{"_meta":{"progressToken":null}}"#, PROGRESS_TOKEN),
        (r#"{"_meta":{"progressToken":{"a":1}}}"#, PROGRESS_TOKEN),
        (r#"{"_meta":{"progressToken":[1]}}"#, PROGRESS_TOKEN),
        (r#"{"_meta":{"progressToken":true}}"#, PROGRESS_TOKEN),
        (
            r#"{"_meta":{"io.modelcontextprotocol/related-task":"t"}}"#,
            RELATED_TASK,
        ),
        (
            r#"{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":1}}}"#,
            RELATED_TASK,
        ),
    ] {
        match check(bad) {
            Err(MetaError::Malformed { key: found, .. }) => assert_eq!(found, key, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn members_are_appended_only_to_an_object_that_cannot_have_them() {
    let point = |text: &str, keys: &[&str]| {
        let raw = RawValue::from_string(text.to_owned()).unwrap();
        append_point(&raw, keys)
    };
    assert_eq!(point("{}", &[]), Some((1, false)));
    assert_eq!(point("{ \n }", &[]), Some((4, false)));
    assert_eq!(point(r#"{"a":1}"#, &[]), Some((6, true)));
    assert_eq!(point(r#"{"a":1}"#, &["b"]), Some((6, true)));
    // Named, or perhaps named (escapes), anywhere in its text: to be opened.
    assert_eq!(point(r#"{"a":1,"_meta":{}}"#, &[]), None);
    assert_eq!(point(r#"{"a":"_meta"}"#, &[]), None);
    assert_eq!(point(r#"{"\u005fmeta":{}}"#, &[]), None);
    assert_eq!(point(r#"{"a":"\u00e9"}"#, &[]), None);
    assert_eq!(point(r#"{"resultType":"task"}"#, &["resultType"]), None);
    // Not an object.
    assert_eq!(point("[1]", &[]), None);
    assert_eq!(point(r#""{}""#, &[]), None);
}

/// `params` opened from what the envelope's check kept (`OPENED`) and by reading it again
/// give the same payload: the same session, `_meta` and members written back, or the
/// same refusal.
#[test]
fn what_the_envelope_kept_opens_as_reading_again_does() {
    use crate::jsonrpc::Envelope;
    const SESSION_OBJECT: &str =
        r#"{"io.modelcontextprotocol/session":{"sessionId":"s-1","state":"st"},"progressToken":7}"#;
    let bodies = [
        // Kept whole: `params`, its `_meta` and the session.
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"e","arguments":{{"_meta":1}},"_meta":{SESSION_OBJECT}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params": {{ "_meta" : {SESSION_OBJECT} , "x":[{{}}] }} }}"#),
        // An escape in a key at each level: that object is read again, the others kept.
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"n\u0061me":"e","_meta":{SESSION_OBJECT}}}}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"},"k\u0065y":1}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionI\u0064":"s"}}}}"#.to_owned(),
        // An escaped key that spells the path, and `_meta` twice (the last is read).
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"a":1},"\u005fmeta":{"b":2}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"a"}},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"b"}}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"a"},"io.modelcontextprotocol/session":"b"}}}"#.to_owned(),
        // `_meta` that holds the session alone (cut out whole), and a last `_meta` that
        // is no object after one that is.
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1, "_meta" :{"io.modelcontextprotocol/session":{"sessionId":"s"}} }}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}},"_meta":1}}"#.to_owned(),
        // Shapes refused, or with nothing to open.
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":[1]}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"state":null}}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s","state":null}}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[{"_meta":{}}]}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{}}"#.to_owned(),
    ];
    for body in &bodies {
        let (envelope, mut kept) = Envelope::parse_keeping(body.as_bytes(), &OPENED).unwrap();
        let params = envelope.params.unwrap();
        let (from_kept, read_again) =
            (Payload::open_kept(params, &mut kept), Payload::open(params));
        assert_eq!(
            from_kept.as_ref().map(Option::is_some),
            read_again.as_ref().map(Option::is_some),
            "{body}"
        );
        let (Ok(Some(from_kept)), Ok(Some(read_again))) = (from_kept, read_again) else {
            continue;
        };
        assert_eq!(from_kept.session(), read_again.session(), "{body}");
        assert_eq!(
            from_kept.check_typed_meta(),
            read_again.check_typed_meta(),
            "{body}"
        );
        assert_eq!(
            from_kept.with_meta(SESSION, br#"{"sessionId":"t"}"#),
            read_again.with_meta(SESSION, br#"{"sessionId":"t"}"#),
            "{body}"
        );
        assert_eq!(
            from_kept.without_meta(SESSION),
            read_again.without_meta(SESSION),
            "{body}"
        );
        assert_eq!(
            from_kept.sole_meta_cut(SESSION),
            read_again.sole_meta_cut(SESSION),
            "{body}"
        );
    }
    // The first body's three objects are kept, and its payload is opened from them.
    let (envelope, mut kept) = Envelope::parse_keeping(bodies[0].as_bytes(), &OPENED).unwrap();
    let params = envelope.params.unwrap();
    let members = kept.take(0, params).expect("params kept");
    let meta = kept
        .take(1, members.get(META).unwrap())
        .expect("_meta kept");
    assert!(
        kept.take(2, meta.get(SESSION).unwrap()).is_some(),
        "the session kept"
    );
    let (_, mut kept) = Envelope::parse_keeping(bodies[0].as_bytes(), &OPENED).unwrap();
    let payload = Payload::open_kept(params, &mut kept).unwrap().unwrap();
    assert!(
        payload.session.is_some(),
        "the session's object taken from what was kept"
    );
}
