//! A JSON object seen one level deep: keys decoded, values left as raw JSON.
//!
//! This is how the proxy edits `params._meta` and `result._meta` without building a
//! `serde_json::Value` of the whole payload: it reads the top-level members, changes one
//! of them, and writes the others back byte for byte.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::value::RawValue;

use super::raw::{must_escape, string_ends};

mod read;

/// The members of a JSON object, in order, values raw.
#[derive(Debug, Clone, Default)]
pub struct RawObject<'a> {
    entries: Vec<(Cow<'a, str>, &'a RawValue)>,
    /// The text the object was read from ([`parse`](Self::parse), or the envelope's
    /// check: [`found`](Self::found)); empty when it was made otherwise: what
    /// [`cut`](Self::cut)'s ranges are in.
    text: &'a str,
}

impl<'a> RawObject<'a> {
    /// Reads `raw` as an object; `None` when it is not one. `raw` is JSON already checked
    /// (a `RawValue` is), so its members are found without checking it again.
    pub fn parse(raw: &'a RawValue) -> Option<Self> {
        let text = raw.get();
        Some(RawObject {
            entries: read::members(text)?,
            text,
        })
    }

    /// An object whose members were found as its text was checked (the envelope's one
    /// pass, which finds them as [`parse`](Self::parse) does).
    pub(super) fn found(text: &'a str, entries: Vec<(Cow<'a, str>, &'a RawValue)>) -> Self {
        RawObject { entries, text }
    }

    /// The text it was read from.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }

    /// Whether this object was read from `raw`: its very text (the same place and
    /// length), not only the same bytes.
    pub(crate) fn is_read_from(&self, raw: &RawValue) -> bool {
        std::ptr::eq(self.text, raw.get())
    }

    /// The value of `key` (the last one, as JavaScript's `JSON.parse` would keep).
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    }

    /// Removes every member named `key`; returns the value that [`get`](Self::get) saw.
    pub fn remove(&mut self, key: &str) -> Option<&'a RawValue> {
        let found = self.get(key);
        if found.is_some() {
            self.entries.retain(|(k, _)| k != key);
        }
        found
    }

    /// Where to cut the text this object was read from to drop its member `key` as it
    /// was written, with the comma that separates it from another: what is left is the
    /// object without `key`, every other byte as it came. `None` when `key` is not a
    /// member once (absent, or named twice), or when the object was not read from a text.
    pub fn cut(&self, key: &str) -> Option<Range<usize>> {
        let mut named = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, (k, _))| k == key);
        let (at, (_, value)) = named.next()?;
        if named.next().is_some() {
            return None;
        }
        let text = self.text.as_bytes();
        let end = range_in(text, value)?.end;
        match at.checked_sub(1) {
            // From the end of the member before: `, "key": value`.
            Some(before) => Some(range_in(text, self.entries[before].1)?.end..end),
            // The first member: from the brace up to and with the comma after it, or up
            // to the end of the value when it is the only one (`{}` stays, spaced as
            // written).
            None if text.first() != Some(&b'{') => None,
            None if self.entries.len() == 1 => Some(1..end),
            None => {
                let comma = end + text.get(end..)?.iter().position(|&b| b == b',')?;
                Some(1..comma + 1)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The members, in order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &'a RawValue)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    /// Writes the object, then `extra` members (key, raw JSON value) at its end.
    pub fn write(&self, out: &mut Vec<u8>, extra: &[(&str, &[u8])]) {
        out.push(b'{');
        let mut first = true;
        let members = self
            .entries
            .iter()
            .map(|(k, v)| (k.as_ref(), v.get().as_bytes()))
            .chain(extra.iter().copied());
        for (key, value) in members {
            if !first {
                out.push(b',');
            }
            first = false;
            write_json_str(out, key);
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.push(b'}');
    }
}

/// A JSON object of string members, in the order given: `{"key":"value",…}`.
pub fn string_object(members: &[(&str, &str)]) -> Vec<u8> {
    // `"key":"value"` each, the commas between them and the braces: exactly the size of
    // an object whose strings need no escape, which a `Bytes` made of it then keeps
    // without allocating again.
    let size: usize = members.iter().map(|(k, v)| k.len() + v.len() + 5).sum();
    let mut out = Vec::with_capacity(size + members.len().saturating_sub(1) + 2);
    out.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_str(&mut out, key);
        out.push(b':');
        write_json_str(&mut out, value);
    }
    out.push(b'}');
    out
}

/// Appends `s` as a JSON string literal.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    // Most strings (ids, tokens, timestamps) need no escape: told at a glance, then
    // copied whole.
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether `bytes` holds a byte a JSON string must escape: eight bytes at a time, the
/// last eight read whole too (overlapping those before them) rather than byte by byte.
fn needs_escape(bytes: &[u8]) -> bool {
    let Some(last) = bytes.last_chunk::<8>() else {
        return bytes.iter().copied().any(must_escape);
    };
    let (eights, _) = bytes.as_chunks::<8>();
    eights
        .iter()
        .chain(std::iter::once(last))
        .any(|eight| string_ends(u64::from_le_bytes(*eight)) != 0)
}

/// `value` with object keys sorted at every depth: one spelling for JSON values that
/// differ only in member order (pool keys, what a `requestState` is bound to).
pub fn canonical(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

/// Where `part` (a slice of `whole`, e.g. a `RawValue` parsed from it) sits in `whole`.
pub fn range_in(whole: &[u8], part: &RawValue) -> Option<Range<usize>> {
    let start = (part.get().as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.get().len())?;
    (end <= whole.len()).then_some(start..end)
}

/// `whole` with the bytes of `part` replaced by `replacement`. `None` when `part` was not
/// parsed from `whole`.
pub fn splice(whole: &[u8], part: &RawValue, replacement: &[u8]) -> Option<Vec<u8>> {
    splice_at(whole, range_in(whole, part)?, replacement)
}

/// `whole` with the bytes at `range` replaced by `replacement`. `None` when `range` is
/// not within `whole`.
pub fn splice_at(whole: &[u8], range: Range<usize>, replacement: &[u8]) -> Option<Vec<u8>> {
    let (before, after) = (whole.get(..range.start)?, whole.get(range.end..)?);
    let mut out = Vec::with_capacity(before.len() + replacement.len() + after.len());
    out.extend_from_slice(before);
    out.extend_from_slice(replacement);
    out.extend_from_slice(after);
    Some(out)
}

/// `whole` with each of `edits` applied in one write: the bytes at its range replaced by
/// its pieces, in order (an empty range inserts them). `None` when a range is reversed,
/// not within `whole`, or overlaps another.
pub fn spliced(whole: &[u8], edits: &mut [(Range<usize>, &[&[u8]])]) -> Option<Vec<u8>> {
    edits.sort_unstable_by_key(|(range, _)| (range.start, range.end));
    let added: usize = edits
        .iter()
        .flat_map(|(_, pieces)| pieces.iter().map(|piece| piece.len()))
        .sum();
    let replaced = edits
        .iter()
        .fold(0usize, |sum, (range, _)| sum.saturating_add(range.len()));
    // Exactly the room the result takes (for valid edits): a `Bytes` made of it then
    // keeps the buffer as it is, where a spare capacity costs it an allocation.
    let mut out = Vec::with_capacity((whole.len() + added).saturating_sub(replaced));
    let mut at = 0;
    for (range, pieces) in edits.iter() {
        if range.end < range.start {
            return None;
        }
        out.extend_from_slice(whole.get(at..range.start)?);
        for piece in pieces.iter() {
            out.extend_from_slice(piece);
        }
        at = range.end;
    }
    out.extend_from_slice(whole.get(at..)?);
    Some(out)
}

#[cfg(test)]
mod tests;
