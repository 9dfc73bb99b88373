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
