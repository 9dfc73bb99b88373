//! The envelope's members found while the body is checked, in one pass.
//!
//! serde_json reads an envelope through the visitor its derive makes: each member's key
//! read and matched, each value skipped by a reader that checks it and then handed to the
//! `RawValue` visitor. This reader checks the body against JSON's grammar (RFC 8259 §2–7)
//! byte by byte, inside strings eight bytes at a time, and keeps the slices of the
//! envelope's members as it passes them.
//!
//! Asked to ([`Keep`]), it also keeps the members of `params` and of the objects at a path
//! in it (`_meta`, then the session in that), found as it checks them: they are opened on
//! every request, and would otherwise be found by reading the same bytes again, once for
//! each level ([`crate::jsonrpc::RawObject::parse`]).
//!
//! It is stricter than serde_json, never looser. Whatever it does not read plainly — a
//! top-level key with an escape (it could spell a member's name), one of the envelope's
//! members named twice, nesting deeper than [`DEEPEST`], anything that is not JSON — it
//! leaves to serde_json (`None`), whose reading, and whose error, then stands. So a body
//! it reads is read as serde_json reads it: the same members, the same slices. The unit
//! tests hold it to that over every body of the envelope's tests, mutations of them and
//! generated envelopes, and the `envelope` fuzz target over whatever it finds.

use std::borrow::Cow;

use super::{KeptObjects, Wire};
use crate::jsonrpc::RawObject;
use crate::jsonrpc::raw::{known, must_escape, skip_space, string_ends};

/// The deepest nesting this reader follows (the envelope's object is 1): a bound on its
/// own recursion. serde_json skips the values of members with a stack of its own and no
/// limit; a body nested deeper than this is left to it.
const DEEPEST: usize = 64;

/// What [`read`] keeps of `params` besides checking it: the object (level 0), and the
/// object at each step of `path` in it (level 1 the member `path[0]` of `params`, level 2
/// the member `path[1]` of that).
pub(super) struct Keep<'k, 'a> {
    pub path: &'k [&'k str],
    pub kept: &'k mut KeptObjects<'a>,
}

/// The envelope's members of `text`, when `text` is one JSON object with none of them
/// named twice, nothing after it but whitespace, and no escape in its own keys; `None`
/// for anything else, which is serde_json's to read. With `keep`, the objects it asks for
/// are kept as they are passed: each whose keys have no escape (one with an escaped key
/// is left to be opened as before).
pub(super) fn read<'a>(text: &'a str, mut keep: Option<Keep<'_, 'a>>) -> Option<Wire<'a>> {
    let bytes = text.as_bytes();
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let mut wire = Wire::default();
    at = skip_space(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            let (key_end, escaped) = string_end(bytes, at)?;
            if escaped {
                return None;
            }
            let key = bytes.get(at + 1..key_end - 1)?;
            at = skip_space(bytes, key_end);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            let start = skip_space(bytes, at + 1);
            at = match keep.as_mut() {
                Some(keep) if key == b"params" && bytes.get(start) == Some(&b'{') => {
                    kept_object_end(text, start, 1, 0, keep)?
                }
                _ => value_end(bytes, start, 1)?,
            };
            let slot = match key {
                b"jsonrpc" => Some(&mut wire.jsonrpc),
                b"id" => Some(&mut wire.id),
                b"method" => Some(&mut wire.method),
                b"params" => Some(&mut wire.params),
                b"result" => Some(&mut wire.result),
                b"error" => Some(&mut wire.error),
                b"sessionId" => Some(&mut wire.session_id),
                _ => None,
            };
            if let Some(slot) = slot {
                if slot.is_some() {
                    return None;
                }
                *slot = Some(known(text.get(start..at)?)?);
            }
            at = skip_space(bytes, at);
            match bytes.get(at) {
                Some(b',') => at = skip_space(bytes, at + 1),
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_space(bytes, at) == bytes.len()).then_some(wire)
}

/// Where the value starting at `at` ends (just past its last byte), if it is JSON nested
/// at most [`DEEPEST`] deep; `depth` is how many containers hold it.
fn value_end(bytes: &[u8], at: usize, depth: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at).map(|(end, _)| end),
        b'{' if depth < DEEPEST => {
            let mut at = skip_space(bytes, at + 1);
            if bytes.get(at) == Some(&b'}') {
                return Some(at + 1);
            }
            loop {
                at = skip_space(bytes, string_end(bytes, at)?.0);
                if bytes.get(at) != Some(&b':') {
                    return None;
                }
                at = value_end(bytes, skip_space(bytes, at + 1), depth + 1)?;
                at = skip_space(bytes, at);
                match bytes.get(at)? {
                    b',' => at = skip_space(bytes, at + 1),
                    b'}' => return Some(at + 1),
                    _ => return None,
                }
            }
        }
        b'[' if depth < DEEPEST => {
            let mut at = skip_space(bytes, at + 1);
            if bytes.get(at) == Some(&b']') {
                return Some(at + 1);
            }
            loop {
                at = skip_space(bytes, value_end(bytes, at, depth + 1)?);
                match bytes.get(at)? {
                    b',' => at = skip_space(bytes, at + 1),
                    b']' => return Some(at + 1),
                    _ => return None,
                }
            }
        }
        b't' => literal_end(bytes, at, b"true"),
        b'f' => literal_end(bytes, at, b"false"),
        b'n' => literal_end(bytes, at, b"null"),
        b'-' | b'0'..=b'9' => number_end(bytes, at),
        _ => None,
    }
}

/// [`value_end`] of the object at `at` (its `{`, `depth` containers deep), kept at
/// `level` of `keep.kept` with the members the object reader finds
/// (`RawObject::parse`: keys decoded, values as written) unless a key has an escape;
/// the object a member named `keep.path[level]` holds is kept at the next level.
fn kept_object_end<'a>(
    text: &'a str,
    at: usize,
    depth: usize,
    level: usize,
    keep: &mut Keep<'_, 'a>,
) -> Option<usize> {
    if depth >= DEEPEST {
        return None;
    }
    let bytes = text.as_bytes();
    let open = at;
    let mut members = Vec::with_capacity(4);
    let mut plain = true;
    let mut at = skip_space(bytes, at + 1);
    if bytes.get(at) != Some(&b'}') {
        loop {
            let (key_end, escaped) = string_end(bytes, at)?;
            plain &= !escaped;
            let key = text.get(at + 1..key_end - 1)?;
            at = skip_space(bytes, key_end);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            let start = skip_space(bytes, at + 1);
            at = match keep.path.get(level) {
                Some(next) if !escaped && key == *next && bytes.get(start) == Some(&b'{') => {
                    kept_object_end(text, start, depth + 1, level + 1, keep)?
                }
                _ => value_end(bytes, start, depth + 1)?,
            };
            if plain {
                members.push((Cow::Borrowed(key), known(text.get(start..at)?)?));
            }
            at = skip_space(bytes, at);
            match bytes.get(at)? {
                b',' => at = skip_space(bytes, at + 1),
                b'}' => break,
                _ => return None,
            }
        }
    }
    let end = at + 1;
    if plain {
        keep.kept
            .keep(level, RawObject::found(text.get(open..end)?, members));
    }
    Some(end)
}

/// Where the string starting at `at` (its opening quote) ends: just past its closing
/// quote; and whether it holds an escape. `None` if it holds a control character or an
/// escape JSON does not have, or does not end. (The object reader's `string_end` skips
/// a string of text already checked, without checking it.)
fn string_end(bytes: &[u8], at: usize) -> Option<(usize, bool)> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    let mut escaped = false;
    loop {
        at = plain_end(bytes, at);
        match *bytes.get(at)? {
            b'"' => return Some((at + 1, escaped)),
            b'\\' => {
                escaped = true;
                at = match *bytes.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at + 2,
                    b'u' if bytes.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit) => at + 6,
                    _ => return None,
                };
            }
            // A control character (U+0000 to U+001F), which a string must escape.
            _ => return None,
        }
    }
}

/// The first byte at or after `at` that is a quote, a backslash or a control character,
/// or the end: eight bytes at a time, then byte by byte in the last seven.
fn plain_end(bytes: &[u8], mut at: usize) -> usize {
    while let Some(eight) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let ends = string_ends(u64::from_le_bytes(*eight));
        if ends != 0 {
            return at + (ends.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while bytes.get(at).is_some_and(|&byte| !must_escape(byte)) {
        at += 1;
    }
    at
}

/// Where `literal` (`true`, `false` or `null`) written at `at` ends.
fn literal_end(bytes: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    let end = at + literal.len();
    (bytes.get(at..end)? == literal).then_some(end)
}

/// Where the number starting at `at` ends: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]?
/// [0-9]+)?` (RFC 8259 §6). A leading zero followed by a digit ends the number at the
/// zero, and what follows it then is not what may follow a value.
fn number_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut at = at;
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    at = match *bytes.get(at)? {
        b'0' => at + 1,
        b'1'..=b'9' => digits_end(bytes, at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let end = digits_end(bytes, at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits_end(bytes, at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

/// The first byte at or after `at` that is not an ASCII digit, or the end.
fn digits_end(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_run_ends_at_the_first_quote_backslash_or_control_character() {
        // Each ending byte at each place of runs of every length up to 48, among bytes
        // next to the endings' values (0x1f/0x20, 0x21/0x23 around the quote, 0x5b/0x5d
        // around the backslash) and bytes from 0x80 on; and from each start.
        let plain = [b'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xc3, 0xff];
        for len in 0..48 {
            for ending in [None, Some(b'"'), Some(b'\\'), Some(0x00), Some(0x1f)] {
                for place in 0..len.max(1) {
                    let mut bytes: Vec<u8> = (0..len).map(|i| plain[i % plain.len()]).collect();
                    if let (Some(ending), true) = (ending, place < len) {
                        bytes[place] = ending;
                    }
                    for start in 0..=len {
                        let expected = (start..len)
                            .find(|&i| matches!(bytes[i], b'"' | b'\\' | 0x00..=0x1f))
                            .unwrap_or(len);
                        assert_eq!(plain_end(&bytes, start), expected, "{bytes:?} from {start}");
                    }
                }
            }
        }
        assert_eq!(plain_end(b"ab", 5), 5);
    }
}
