use super::*;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

#[test]
fn members_are_read_and_written_back_in_order() {
    let value = raw(r#"{"b": [1, 2], "a": {"x": "y"}, "c\"d": null}"#);
    let object = RawObject::parse(&value).unwrap();
    assert_eq!(object.get("a").unwrap().get(), r#"{"x": "y"}"#);
    assert_eq!(object.get("c\"d").unwrap().get(), "null");
    let mut out = Vec::new();
    object.write(&mut out, &[("z", b"1")]);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"b":[1, 2],"a":{"x": "y"},"c\"d":null,"z":1}"#
    );
}

#[test]
fn the_last_duplicate_wins_and_remove_takes_all() {
    let value = raw(r#"{"k":1,"j":0,"k":2}"#);
    let mut object = RawObject::parse(&value).unwrap();
    assert_eq!(object.get("k").unwrap().get(), "2");
    assert_eq!(object.remove("k").unwrap().get(), "2");
    assert!(object.get("k").is_none());
    let mut out = Vec::new();
    object.write(&mut out, &[]);
    assert_eq!(out, br#"{"j":0}"#);
}

/// `text` (as parsed) with `key` cut out as [`RawObject::cut`] says.
fn cut(text: &str, key: &str) -> Option<String> {
    let value = raw(text);
    let text = value.get();
    let object = RawObject::parse(&value).unwrap();
    let range = object.cut(key)?;
    Some(format!("{}{}", &text[..range.start], &text[range.end..]))
}

#[test]
fn a_member_is_cut_with_its_comma_wherever_it_is_and_the_rest_kept_as_written() {
    assert_eq!(
        cut(r#"{"a":1,"k":{"x":[1,2]},"b":2}"#, "k").unwrap(),
        r#"{"a":1,"b":2}"#
    );
    assert_eq!(cut(r#"{"k":{"x":1},"a":1}"#, "k").unwrap(), r#"{"a":1}"#);
    assert_eq!(cut(r#"{"a":1,"k":"v"}"#, "k").unwrap(), r#"{"a":1}"#);
    assert_eq!(cut(r#"{"k":"v"}"#, "k").unwrap(), "{}");
    // Spacing, and the others' spelling, as written; the result still parses the same.
    assert_eq!(
        cut("{ \"a\" : 1 ,\n \"k\" : { } , \"b\":\t2 }", "k").unwrap(),
        "{ \"a\" : 1 , \"b\":\t2 }"
    );
    assert_eq!(
        cut("{ \"k\" : [ ] ,  \"a\" : 1 }", "k").unwrap(),
        "{  \"a\" : 1 }"
    );
    assert_eq!(cut("{ \"k\" : null }", "k").unwrap(), "{ }");
    // A key is matched as decoded: an escaped spelling is the same member.
    assert_eq!(cut(r#"{"a":1,"\u006b":2}"#, "k").unwrap(), r#"{"a":1}"#);
    // What is left reads as the object without the member.
    for text in [
        r#"{"a":1,"k":{"x":",}"},"b":"{,"}"#,
        r#"{"k":{"x":1}, "a":[1,{"k":2}]}"#,
        r#"{"a":1,"k":"v"}"#,
        r#"{"k":[]}"#,
    ] {
        let out = cut(text, "k").unwrap();
        let mut expected: serde_json::Value = serde_json::from_str(text).unwrap();
        expected.as_object_mut().unwrap().remove("k");
        let read: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(read, expected, "{text} → {out}");
    }
}

#[test]
fn a_member_absent_or_named_twice_is_not_cut() {
    assert_eq!(cut(r#"{"a":1,"b":{"k":1}}"#, "k"), None);
    assert_eq!(cut(r#"{"k":1,"a":2,"k":3}"#, "k"), None);
    assert_eq!(cut("{}", "k"), None);
    // An object not read from a text has no text of its own to cut.
    let value = raw("1");
    let orphan = RawObject {
        entries: vec![(Cow::Borrowed("k"), &*value)],
        text: "",
    };
    assert_eq!(orphan.cut("k"), None);
}

#[test]
fn non_objects_are_not_parsed() {
    assert!(RawObject::parse(&raw("[1]")).is_none());
    assert!(RawObject::parse(&raw("\"{\"")).is_none());
    assert!(RawObject::parse(&raw("{}")).unwrap().is_empty());
}

#[test]
fn json_strings_are_escaped() {
    let mut out = Vec::new();
    write_json_str(&mut out, "a\"b\\c\nd\u{1}é");
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    assert_eq!(
        serde_json::from_str::<String>(&text).unwrap(),
        "a\"b\\c\nd\u{1}é"
    );
}

#[test]
fn json_strings_are_escaped_at_every_place() {
    // Each character that needs an escape at each place of strings of every length up
    // to 40 (shorter and longer than the eight bytes looked at together), among
    // characters next to them and beyond ASCII.
    let plain = ['a', ' ', '!', '#', '[', ']', '\u{7f}', 'é', '€'];
    let specials = ['"', '\\', '\n', '\r', '\t', '\u{0}', '\u{8}', '\u{1f}'];
    for len in 0..40 {
        for special in std::iter::once(None).chain(specials.map(Some)) {
            for place in 0..len.max(1) {
                let text: String = (0..len)
                    .map(|i| match special {
                        Some(c) if i == place => c,
                        _ => plain[i % plain.len()],
                    })
                    .collect();
                let mut expected = String::from("\"");
                for c in text.chars() {
                    match c {
                        '"' => expected.push_str("\\\""),
                        '\\' => expected.push_str("\\\\"),
                        '\n' => expected.push_str("\\n"),
                        '\r' => expected.push_str("\\r"),
                        '\t' => expected.push_str("\\t"),
                        c if u32::from(c) < 0x20 => {
                            expected.push_str(&format!("\\u{:04x}", u32::from(c)));
                        }
                        c => expected.push(c),
                    }
                }
                expected.push('"');
                let mut out = Vec::new();
                write_json_str(&mut out, &text);
                assert_eq!(String::from_utf8(out).unwrap(), expected, "{text:?}");
            }
        }
    }
}

#[test]
fn splice_replaces_exactly_the_raw_slice() {
    let whole = br#"{"id":1,"params":{"a":1},"tail":true}"#;
    #[derive(serde::Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        params: &'a RawValue,
    }
    let p: P = serde_json::from_slice(whole).unwrap();
    let out = splice(whole, p.params, b"{}").unwrap();
    assert_eq!(out, br#"{"id":1,"params":{},"tail":true}"#);
    let elsewhere = raw("{}");
    assert!(splice(whole, &elsewhere, b"x").is_none());
}

#[test]
fn string_objects_keep_their_order_and_escape_keys_and_values() {
    assert_eq!(string_object(&[]), b"{}");
    let written = string_object(&[("sessionId", "a\"b"), ("expiresAt", "x\ny")]);
    assert_eq!(
        String::from_utf8(written.clone()).unwrap(),
        r#"{"sessionId":"a\"b","expiresAt":"x\ny"}"#
    );
    let parsed: serde_json::Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(
        parsed,
        serde_json::json!({"sessionId": "a\"b", "expiresAt": "x\ny"})
    );
}

#[test]
fn edits_are_made_in_one_write_in_either_order() {
    let whole = b"0123456789";
    let mut edits: [(Range<usize>, &[&[u8]]); 2] = [(7..9, &[b"x", b"y"]), (1..2, &[b"A"])];
    assert_eq!(spliced(whole, &mut edits).unwrap(), b"0A23456xy9");
    // An empty range inserts.
    let mut edits: [(Range<usize>, &[&[u8]]); 2] = [(10..10, &[b"!"]), (0..0, &[b"<"])];
    assert_eq!(spliced(whole, &mut edits).unwrap(), b"<0123456789!");
    // Overlapping, reversed or outside: refused.
    let mut edits: [(Range<usize>, &[&[u8]]); 2] = [(1..5, &[]), (4..6, &[])];
    assert_eq!(spliced(whole, &mut edits), None);
    let reversed = Range { start: 5, end: 3 };
    let mut edits: [(Range<usize>, &[&[u8]]); 1] = [(reversed, &[])];
    assert_eq!(spliced(whole, &mut edits), None);
    let mut edits: [(Range<usize>, &[&[u8]]); 1] = [(9..11, &[])];
    assert_eq!(spliced(whole, &mut edits), None);
}

#[test]
fn edits_are_written_in_one_buffer_of_exactly_their_size() {
    let whole = br#"{"id":"up-7","result":{}}"#;
    let id = 6..12; // "up-7"
    assert_eq!(&whole[id.clone()], br#""up-7""#);
    let at = whole.len() - 2;
    let mut edits: [(Range<usize>, &[&[u8]]); 2] = [(at..at, &[br#""k":1"#]), (id, &[b"1", b"2"])];
    let out = spliced(whole, &mut edits).expect("valid edits");
    assert_eq!(out, br#"{"id":12,"result":{"k":1}}"#);
    // No spare room: `Bytes::from` keeps such a buffer without allocating.
    assert_eq!(out.capacity(), out.len());
    let (start, end) = (3, 1);
    let mut reversed: [(Range<usize>, &[&[u8]]); 1] = [(start..end, &[b""])];
    assert_eq!(spliced(whole, &mut reversed), None, "a reversed range");
    // More replaced than there is: overlapping, past the end.
    let mut overlapping: [(Range<usize>, &[&[u8]]); 2] = [(0..20, &[]), (0..20, &[])];
    assert_eq!(spliced(whole, &mut overlapping), None);
    let mut past: [(Range<usize>, &[&[u8]]); 2] = [(0..usize::MAX, &[]), (0..usize::MAX, &[])];
    assert_eq!(spliced(whole, &mut past), None);
}

#[test]
fn a_string_object_fills_its_buffer_exactly() {
    for members in [
        &[][..],
        &[("sessionId", "mcps_1")][..],
        &[
            ("sessionId", "mcps_1"),
            ("state", "s.t"),
            ("expiresAt", "2026"),
        ][..],
    ] {
        let out = string_object(members);
        assert_eq!(out.capacity(), out.len(), "{members:?}");
    }
    let escaped = string_object(&[("k", "a\"b")]);
    assert_eq!(escaped, br#"{"k":"a\"b"}"#);
}
