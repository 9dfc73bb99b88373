//! The members of an object that is already known to be JSON, read without checking it
//! again.
//!
//! A [`RawValue`] has been validated when it was made: every byte of the body it came
//! from was checked (by the envelope's one pass or by serde_json), or of the text it was
//! made from. The object's members still have to be found when they are opened one level
//! deep (`params`, then its `_meta`, then the session in it). serde_json would check every
//! byte again, once for each level. This reader only follows the structure: it looks for
//! the bytes that end a string, open or close an object or an array, or end a scalar. Keys
//! are decoded as serde_json decodes them, and a key it refuses (an unpaired surrogate
//! escape) makes the object unreadable, as it did before. Each member's value is handed
//! out as a `&RawValue` that borrows the same text ([`super::super::raw`]).

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::jsonrpc::raw::{known, skip_space};

/// The members of `text`, in order. `text` is a [`RawValue`]'s text, starting with `{`.
/// Returns `None` when a key cannot be decoded or `text` is not an object. On text that
/// is not JSON (never a `RawValue`'s) it returns `None` or members of no meaning, and
/// never reads past the end of `text`.
pub(super) fn members(text: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let mut entries = Vec::with_capacity(4);
    let mut at = skip_space(bytes, 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(entries);
    }
    loop {
        let (key_end, escaped) = string_end(bytes, at)?;
        let name = decoded_key(text.get(at..key_end)?, escaped)?;
        at = skip_space(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(bytes, at + 1);
        let end = value_end(bytes, at)?;
        entries.push((name, known(text.get(at..end)?)?));
        at = skip_space(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            Some(b'}') => return Some(entries),
            _ => return None,
        }
    }
}

/// Where the string starting at `at` (its opening quote) ends: just past its closing
/// quote; and whether it holds an escape.
fn string_end(bytes: &[u8], at: usize) -> Option<(usize, bool)> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut from = at + 1;
    let mut escaped = false;
    loop {
        let found = from + memchr::memchr2(b'"', b'\\', bytes.get(from..)?)?;
        if bytes[found] == b'"' {
            return Some((found + 1, escaped));
        }
        escaped = true;
        // An escape: the byte after the backslash is never the closing quote, and the four
        // hex digits of a `\u` escape are neither a quote nor a backslash.
        from = found + 2;
    }
}

/// Where the value starting at `at` ends: just past its last byte.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at).map(|(end, _)| end),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = string_end(bytes, i)?.0;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number, `true`, `false` or `null`: up to what may follow a value (never
        // empty).
        _ => {
            let end = bytes[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .map_or(bytes.len(), |n| at + n);
            (end > at).then_some(end)
        }
    }
}

/// A key as written (quotes included), decoded: borrowed when it has no escape.
fn decoded_key(quoted: &str, escaped: bool) -> Option<Cow<'_, str>> {
    if escaped {
        serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
    } else {
        quoted
            .get(1..quoted.len().checked_sub(1)?)
            .map(Cow::Borrowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_by_structure_and_borrow_the_text() {
        let text = "{ \"a\" : [1, {\"b\": \"]}\\\"\"}] ,\"s\":\"x\\\\\",\"n\":-1.5e3,\"t\":true,\"z\":null,\"o\":{}}";
        let found = members(text).unwrap();
        let read: Vec<(&str, &str)> = found.iter().map(|(k, v)| (k.as_ref(), v.get())).collect();
        assert_eq!(
            read,
            [
                ("a", "[1, {\"b\": \"]}\\\"\"}]"),
                ("s", "\"x\\\\\""),
                ("n", "-1.5e3"),
                ("t", "true"),
                ("z", "null"),
                ("o", "{}"),
            ]
        );
        for (_, value) in &found {
            let start = value.get().as_ptr() as usize - text.as_ptr() as usize;
            assert_eq!(&text[start..start + value.get().len()], value.get());
        }
    }

    #[test]
    fn keys_are_decoded_as_serde_json_decodes_them() {
        let found = members(r#"{"\u006b":1,"é":2,"a\"b":3}"#).unwrap();
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["k", "é", "a\"b"]);
        assert!(matches!(found[1].0, Cow::Borrowed(_)));
        // A key serde_json would not read as text makes the object unreadable.
        assert!(members(r#"{"\ud800":1}"#).is_none());
    }

    #[test]
    fn text_that_is_not_an_object_is_not_read_and_nothing_is_indexed_past_its_end() {
        for text in [
            "",
            "{",
            "{\"a\"",
            "{\"a\":",
            "{\"a\":1",
            "{\"a\":1,",
            "{\"a\" 1}",
            "{\"a\":\"x",
            "{\"a\":[1",
            "[1]",
            "{1:2}",
            "{\"a\":}",
            "{\"a\":,\"b\":1}",
        ] {
            assert!(members(text).is_none(), "{text:?}");
        }
    }
}
