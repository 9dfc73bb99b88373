use super::*;

fn parse(body: &str) -> Result<Envelope<'_>, EnvelopeError> {
    Envelope::parse(body.as_bytes())
}

#[test]
fn kinds_are_told_apart() {
    assert_eq!(
        parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .unwrap()
            .kind,
        Kind::Request
    );
    assert_eq!(
        parse(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#)
            .unwrap()
            .kind,
        Kind::Notification
    );
    assert_eq!(
        parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#)
            .unwrap()
            .kind,
        Kind::Response
    );
    assert_eq!(
        parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"x"}}"#)
            .unwrap()
            .kind,
        Kind::Response
    );
}

#[test]
fn raw_parts_are_borrowed_as_written() {
    let body = r#"{"jsonrpc":"2.0","id": "x\"y","method":"tools\/call","params":{"a" : [1, 2]}}"#;
    let env = parse(body).unwrap();
    assert_eq!(env.id.unwrap().get(), r#""x\"y""#);
    assert_eq!(env.method(), "tools/call");
    assert_eq!(env.params.unwrap().get(), r#"{"a" : [1, 2]}"#);
}

#[test]
fn not_json_is_a_parse_error() {
    for body in ["", "{", "{\"jsonrpc\":", "nope", "[1,", "{} trailing"] {
        assert!(
            matches!(parse(body), Err(EnvelopeError::Parse(_))),
            "{body:?}"
        );
    }
    assert_eq!(parse("{").unwrap_err().code(), -32700);
}

#[test]
fn batches_are_refused() {
    assert_eq!(
        parse(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).unwrap_err(),
        EnvelopeError::Batch
    );
    assert_eq!(parse("[]").unwrap_err().code(), -32600);
}

#[test]
fn non_objects_and_wrong_versions_are_invalid_requests() {
    assert_eq!(parse("42").unwrap_err(), EnvelopeError::NotObject);
    assert_eq!(parse(r#""x""#).unwrap_err(), EnvelopeError::NotObject);
    assert_eq!(
        parse(r#"{"id":1,"method":"ping"}"#).unwrap_err(),
        EnvelopeError::NotJsonRpc2
    );
    assert_eq!(
        parse(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).unwrap_err(),
        EnvelopeError::NotJsonRpc2
    );
    assert_eq!(
        parse(r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#).unwrap_err(),
        EnvelopeError::NotJsonRpc2
    );
}

#[test]
fn ids_must_be_strings_or_numbers() {
    for id in ["null", "true", "{}", "[1]"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(
            parse(&body).unwrap_err(),
            EnvelopeError::BadId(id.to_owned()),
            "{id}"
        );
    }
    assert!(parse(r#"{"jsonrpc":"2.0","id":-3,"method":"ping"}"#).is_ok());
}

#[test]
fn method_must_be_a_string_and_is_required() {
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
        Err(EnvelopeError::Invalid(_))
    ));
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1}"#),
        Err(EnvelopeError::Invalid(_))
    ));
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0"}"#),
        Err(EnvelopeError::Invalid(_))
    ));
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1,"method":"a","result":{}}"#),
        Err(EnvelopeError::Invalid(_))
    ));
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#),
        Err(EnvelopeError::Invalid(_))
    ));
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":3}"#),
        Err(EnvelopeError::Invalid(_))
    ));
}

#[test]
fn duplicate_members_are_invalid() {
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#),
        Err(EnvelopeError::Invalid(_))
    ));
}

#[test]
fn unknown_members_are_ignored_and_sep_1364_session_id_is_kept() {
    let env = parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":{"deep":[1]},"sessionId":"s"}"#)
        .unwrap();
    assert_eq!(env.session_id.unwrap().get(), r#""s""#);
}

#[test]
fn invalid_utf8_anywhere_is_a_parse_error() {
    // Found by the `envelope` fuzz target: serde_json skips an unknown member without
    // checking its UTF-8, so the message was accepted and passed on as it was.
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","x":"a"#.to_vec();
    body.extend_from_slice(&[0xfe, 0xff]);
    body.extend_from_slice(br#""}"#);
    assert!(matches!(
        Envelope::parse(&body),
        Err(EnvelopeError::Parse(_))
    ));
    let mut params = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"k":""#.to_vec();
    params.extend_from_slice(&[0xc3]);
    params.extend_from_slice(br#""}}"#);
    assert!(matches!(
        Envelope::parse(&params),
        Err(EnvelopeError::Parse(_))
    ));
}

#[test]
fn unpaired_surrogate_escapes_are_a_parse_error() {
    // Found by the `rewrite` fuzz target: a member name holding `\uDDDD` made `params`
    // unreadable as an object, so its session `_meta` was neither found nor taken off.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k\uDDDD":1}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k":"\ud800x"}}"#,
        r#"{"jsonrpc":"2.0","id":"\uD800\u0041","method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","x":"\udc00"}"#,
    ] {
        assert!(
            matches!(
                Envelope::parse(body.as_bytes()),
                Err(EnvelopeError::Parse(_))
            ),
            "{body}"
        );
    }
    // A pair, an escaped backslash before a `u`, and other escapes are fine.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k\uD83D\uDE00":"\\uDDDD"}}"#,
        r#"{"jsonrpc":"2.0","id":"\u00e9\/x\n","method":"m"}"#,
    ] {
        assert!(Envelope::parse(body.as_bytes()).is_ok(), "{body}");
    }
}
