use super::*;
use crate::jsonrpc::range_in;

fn parse(body: &str) -> Result<Envelope<'_>, EnvelopeError> {
    parse_bytes(body.as_bytes())
}

/// `Envelope::parse`, held to serde_json's reading of the same body; and what
/// `parse_keeping` keeps, held to what reading it again finds.
fn parse_bytes(body: &[u8]) -> Result<Envelope<'_>, EnvelopeError> {
    let parsed = Envelope::parse(body);
    assert_eq!(
        read(body, &parsed),
        read(body, &Envelope::parse_by_serde_json(body)),
        "the one pass and serde_json read {:?} differently",
        String::from_utf8_lossy(body)
    );
    // The proxy's path (`_meta`, then the session), and one of the keys the generated
    // bodies have (`_meta`, then `x`).
    for path in [
        &["_meta", "io.modelcontextprotocol/session"],
        &["_meta", "x"],
    ] {
        kept_as_read(body, path, &parsed);
    }
    parsed
}

/// `Envelope::parse_keeping(body, path)` reads `body` as `parse` does (`parsed`), and
/// each object it keeps is a slice of `body` with the members the object reader finds
/// in it, `params` (when kept) the envelope's own.
fn kept_as_read(body: &[u8], path: &[&str], parsed: &Result<Envelope<'_>, EnvelopeError>) {
    let keeping = Envelope::parse_keeping(body, path);
    let envelope = keeping.as_ref().map(|(envelope, _)| envelope.clone());
    assert_eq!(
        read(body, &envelope.map_err(Clone::clone)),
        read(body, parsed),
        "kept and not: {:?} read differently",
        String::from_utf8_lossy(body)
    );
    let Ok((envelope, kept)) = keeping else {
        return;
    };
    for (level, object) in kept.objects.iter().enumerate() {
        let Some(object) = object else {
            continue;
        };
        let raw = crate::jsonrpc::raw::known(object.text());
        assert!(
            raw.is_some_and(|raw| range_in(body, raw).is_some()),
            "not a slice of the body"
        );
        let again = raw.and_then(RawObject::parse);
        assert_eq!(
            format!("{:?}", Some(object)),
            format!("{:?}", again.as_ref()),
            "level {level} of {:?}",
            String::from_utf8_lossy(body)
        );
        // Each value at the same place of the body, not only with the same bytes.
        let places = |object: &RawObject<'_>| -> Vec<_> {
            object
                .entries()
                .map(|(key, value)| (key.to_owned(), range_in(body, value)))
                .collect()
        };
        assert_eq!(Some(places(object)), again.as_ref().map(places));
        if level == 0 {
            assert!(
                envelope
                    .params
                    .is_some_and(|params| object.is_read_from(params))
            );
        }
    }
}

/// What a parse gave, each raw part as its place in `body` and its text.
fn read(body: &[u8], parsed: &Result<Envelope<'_>, EnvelopeError>) -> String {
    let Ok(envelope) = parsed else {
        return format!("{parsed:?}");
    };
    let place = |raw: Option<&RawValue>| raw.map(|raw| (range_in(body, raw), raw.get().to_owned()));
    format!(
        "{:?} id={:?} method={:?} params={:?} result={:?} error={:?} sessionId={:?}",
        envelope.kind,
        place(envelope.id),
        envelope.method,
        place(envelope.params),
        place(envelope.result),
        place(envelope.error),
        place(envelope.session_id),
    )
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
    assert!(matches!(parse_bytes(&body), Err(EnvelopeError::Parse(_))));
    let mut params = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"k":""#.to_vec();
    params.extend_from_slice(&[0xc3]);
    params.extend_from_slice(br#""}}"#);
    assert!(matches!(parse_bytes(&params), Err(EnvelopeError::Parse(_))));
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
            matches!(parse(body), Err(EnvelopeError::Parse(_))),
            "{body}"
        );
    }
    // A pair, an escaped backslash before a `u`, and other escapes are fine.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k\uD83D\uDE00":"\\uDDDD"}}"#,
        r#"{"jsonrpc":"2.0","id":"\u00e9\/x\n","method":"m"}"#,
    ] {
        assert!(parse(body).is_ok(), "{body}");
    }
}

/// Bodies the mutation test starts from: the shapes the proxy reads, and JSON's corners.
const SEEDS: [&str; 8] = [
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"mcps_x","state":"AbC-_9"}}}}"#,
    r#"{"jsonrpc":"2.0","id":"a\"b","result":{"content":[{"type":"text","text":"hi\u00e9\n"}],"isError":false}}"#,
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x","data":[1.5e-3,-0,true,null]}}"#,
    r#" { "jsonrpc" : "2.0" , "method" : "notifications/cancelled" , "params" : [ 1 , { } , [ ] ] } "#,
    r#"{"jsonrpc":"2.0","id":7,"method":"m","sessionId":"s","params":{"a":{"b":{"c":[0.25E+2]}}}}"#,
    r#"{"jsonrpc":"2.0","id":-12.5e7,"method":"ping","x":"\ud83d\ude00","y":"\/\b\f\r\t"}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k\u0041":1},"\u0069d":2}"#,
    r#"{}"#,
];

/// Bytes put at each place of a seed: JSON's structure, its escapes and numbers, and
/// bytes it refuses.
const MUTATIONS: &[u8] = b"\"\\{}[],: \t\r\n\x0b\x0c0159-+.eEutfnlx/\x00\x1f\x7f";

#[test]
fn the_one_pass_reads_every_body_as_serde_json_does() {
    // Each seed, and each seed with one byte replaced, inserted or taken out, or cut
    // short, at every place: `parse_bytes` holds the two readings equal (the result,
    // each raw part's place and text, or the error).
    let mut bodies = 0;
    for seed in SEEDS {
        let seed = seed.as_bytes();
        for at in 0..=seed.len() {
            let _ = parse_bytes(&seed[..at]);
            bodies += 1;
            if at < seed.len() {
                let mut without = seed.to_vec();
                without.remove(at);
                let _ = parse_bytes(&without);
                bodies += 1;
            }
            for &byte in MUTATIONS {
                let mut with = seed.to_vec();
                with.insert(at, byte);
                let _ = parse_bytes(&with);
                if at < seed.len() {
                    with.remove(at);
                    with[at] = byte;
                    let _ = parse_bytes(&with);
                    bodies += 2;
                }
            }
        }
    }
    assert!(bodies > 10_000, "{bodies}");
}

#[test]
fn the_one_pass_reads_what_the_proxy_is_sent_and_leaves_the_rest_to_serde_json() {
    // What the proxy is sent is read by the one pass (else it would only cost time).
    for body in &SEEDS[..6] {
        assert!(one_pass::read(body, None).is_some(), "{body}");
    }
    // An escaped top-level key (it could spell a member's name), a member named twice,
    // nesting deeper than the pass follows, and JSON it refuses go to serde_json.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}1{}}}"#,
        "[".repeat(70),
        "]".repeat(70)
    );
    for body in [
        SEEDS[6],
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        deep.as_str(),
        r#"{"jsonrpc":"2.0","id":01,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"} x"#,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"x\":\"\t\"}",
    ] {
        assert!(one_pass::read(body, None).is_none(), "{body}");
    }
    // As deep as it follows (63 arrays in the envelope's object), and one deeper, which
    // serde_json reads.
    let nested = |depth: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}1{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    assert!(one_pass::read(&nested(63), None).is_some());
    assert!(one_pass::read(&nested(64), None).is_none());
    assert!(parse(&nested(64)).is_ok());
    assert!(parse(&deep).is_ok());
}

/// A small deterministic generator (xorshift64*), so the generated bodies are the same
/// on every run.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }

    fn space(&mut self, out: &mut String) {
        if self.below(4) == 0 {
            out.push_str(self.pick(&[" ", "\t", "\r\n", "  \n "]));
        }
    }

    /// A JSON value.
    fn value(&mut self, out: &mut String, depth: usize) {
        let kind = if depth > 4 {
            self.below(3)
        } else {
            self.below(5)
        };
        match kind {
            0 => {
                out.push('"');
                for _ in 0..self.below(12) {
                    out.push_str(self.pick(&[
                        "a",
                        "Z",
                        "0",
                        " ",
                        "é",
                        "😀",
                        "\\\"",
                        "\\\\",
                        "\\/",
                        "\\n",
                        "\\t",
                        "\\u00e9",
                        "\\uD83D\\uDE00",
                        "\\u001f",
                        "{",
                        "]",
                        ",",
                        ":",
                    ]));
                }
                out.push('"');
            }
            1 => out.push_str(self.pick(&[
                "0",
                "-0",
                "7",
                "-12",
                "3.25",
                "1e9",
                "1E+2",
                "-4.5e-7",
                "0.0",
                "123456789012345678901234567890",
            ])),
            2 => out.push_str(self.pick(&["true", "false", "null"])),
            3 => {
                out.push('[');
                for i in 0..self.below(4) {
                    if i > 0 {
                        out.push(',');
                    }
                    self.space(out);
                    self.value(out, depth + 1);
                    self.space(out);
                }
                out.push(']');
            }
            _ => self.object(out, depth + 1, false),
        }
    }

    /// An object; an envelope's members among its keys when `envelope`.
    fn object(&mut self, out: &mut String, depth: usize, envelope: bool) {
        const KEYS: [&str; 11] = [
            "jsonrpc",
            "id",
            "method",
            "params",
            "result",
            "error",
            "sessionId",
            "_meta",
            "x",
            "",
            "\\u0069d",
        ];
        out.push('{');
        let members = if envelope {
            2 + self.below(5)
        } else {
            self.below(4)
        };
        for i in 0..members {
            if i > 0 {
                out.push(',');
            }
            self.space(out);
            let key = if envelope && i < 3 {
                ["jsonrpc", "id", "method"][i]
            } else if envelope && i == 3 && self.below(2) == 0 {
                "params"
            } else if !envelope && self.below(2) == 0 {
                // The keys of the path the proxy keeps objects at, often.
                self.pick(&["_meta", "x"])
            } else {
                self.pick(&KEYS)
            };
            out.push('"');
            out.push_str(key);
            out.push('"');
            self.space(out);
            out.push(':');
            self.space(out);
            match key {
                "jsonrpc" if self.below(8) > 0 => out.push_str("\"2.0\""),
                "method" if self.below(8) > 0 => out.push_str("\"tools/call\""),
                // Objects where the proxy opens them (`params`, `_meta` in it, and
                // the `x` the kept path names in that).
                "params" | "_meta" | "x" if self.below(4) > 0 => self.object(out, depth + 1, false),
                _ => self.value(out, depth),
            }
            self.space(out);
        }
        out.push('}');
    }
}

#[test]
fn the_one_pass_reads_generated_bodies_as_serde_json_does() {
    // Envelopes of random shape (`jsonrpc`, `id` and `method` first, then members of
    // any name, the envelope's own among them — so named twice — and an escaped one;
    // `params` often, with objects in it at the keys of the path kept; nested values of
    // every kind, escapes, numbers and whitespace), half of them broken by one to three
    // bytes put in, replaced or taken out: `parse_bytes` holds the two readings equal on
    // each, and what `parse_keeping` kept to what reading it again finds.
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    let (mut by_one_pass, mut accepted) = (0, 0);
    let mut kept_at = [0; KEPT_LEVELS];
    for _ in 0..20_000 {
        let mut body = String::new();
        draw.object(&mut body, 1, true);
        let mut body = body.into_bytes();
        if draw.below(2) == 0 {
            for _ in 0..1 + draw.below(3) {
                let at = draw.below(body.len() + 1);
                let byte = MUTATIONS[draw.below(MUTATIONS.len())];
                match draw.below(3) {
                    0 => body.insert(at, byte),
                    1 if at < body.len() => body[at] = byte,
                    _ if at < body.len() => {
                        body.remove(at);
                    }
                    _ => {}
                }
            }
        }
        if std::str::from_utf8(&body).is_ok_and(|text| one_pass::read(text, None).is_some()) {
            by_one_pass += 1;
        }
        if let Ok((_, kept)) = Envelope::parse_keeping(&body, &["_meta", "x"]) {
            for (level, object) in kept.objects.iter().enumerate() {
                kept_at[level] += usize::from(object.is_some());
            }
        }
        if parse_bytes(&body).is_ok() {
            accepted += 1;
        }
    }
    // Enough of them read by the one pass, and accepted, for the comparison to mean
    // something.
    assert!(
        by_one_pass > 5_000 && accepted > 1_000,
        "{by_one_pass} {accepted}"
    );
    // And enough objects kept at each level (`params`, its `_meta`, the `x` in that)
    // for `kept_as_read` to have held something to what reading it again finds.
    let [params, meta, x] = kept_at;
    assert!(params > 200 && meta > 50 && x > 20, "{kept_at:?}");
}
