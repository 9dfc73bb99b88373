//! Raw JSON text as the proxy's own readers walk it: whitespace skipped, and a
//! [`RawValue`] made of text that has been checked already.
//!
//! serde_json makes a `RawValue` only by deserializing, which reads its text again.
//! [`known`] hands serde_json's `RawValue` visitor a slice that a reader of the proxy's
//! own has checked (the envelope's one pass, [`super::envelope`]) or found inside text
//! serde_json checked (an object's members, [`super::object`]). If a serde_json release
//! read raw values some other way, [`known`] falls back to reading the slice with
//! serde_json itself, which checks it again: slower, never wrong. A unit test fails in
//! that case, so the slower path is noticed.

use serde::de::value::{BorrowedStrDeserializer, Error, MapDeserializer};
use serde::de::{Deserialize, Deserializer, Visitor};
use serde_json::value::RawValue;

/// `text` (a JSON value, whole, already checked) as a [`RawValue`] borrowing it.
pub(super) fn known(text: &str) -> Option<&RawValue> {
    <&RawValue>::deserialize(Known(text))
        .ok()
        .or_else(|| serde_json::from_str(text).ok())
}

/// The first byte at or after `at` that is not JSON whitespace (RFC 8259 §2).
pub(super) fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Whether a JSON string must escape `byte`: a quote, a backslash or a control character
/// (below 0x20) — the bytes [`string_ends`] finds eight at a time.
pub(super) fn must_escape(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// Of eight bytes of a JSON string (`word`, read little-endian: the first byte is the
/// lowest), those that end a run of plain text — a quote, a backslash or a control
/// character (below 0x20), which a string must escape — as the high bit of each: the
/// lowest bit set names the first such byte, and none is set when there is none (bits
/// above the first may be set by a borrow). `zero(x)` sets the high bit of each byte of
/// `x` that is zero, and `word - SPACES` (masked with `!word`) that of each byte below
/// 0x20; a borrow only ever moves up, into the bytes after the first such byte.
pub(super) fn string_ends(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_le_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_le_bytes([b'\\'; 8]);
    const SPACES: u64 = u64::from_le_bytes([0x20; 8]);
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    (zero(word ^ QUOTES) | zero(word ^ BACKSLASHES) | (word.wrapping_sub(SPACES) & !word)) & HIGH
}

/// A deserializer of one JSON value whose text is already known to be valid.
///
/// serde_json's `&RawValue` asks for a newtype struct and, through it, for a map of one
/// member: a key equal to the struct's name, and the value's text as a borrowed string.
/// This is what its own deserializers hand it once they have read a value. `Known` hands
/// it the same without reading the text again. Anything else asked of it is an error.
struct Known<'a>(&'a str);

impl<'de> Deserializer<'de> for Known<'de> {
    type Error = Error;

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let member = (
            BorrowedStrDeserializer::<Error>::new(name),
            BorrowedStrDeserializer::<Error>::new(self.0),
        );
        visitor.visit_map(MapDeserializer::new(std::iter::once(member)))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(serde::de::Error::custom(
            "only a raw JSON value is read from known text",
        ))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_value_is_made_of_known_text_without_reading_it() {
        // Not JSON at all: only a deserializer that does not read the text returns it.
        // serde_json's would refuse it. The proxy's readers rely on this. If a serde_json
        // release made raw values another way, they would still be right but slower, and
        // this test says so.
        let made = <&RawValue>::deserialize(Known("not json")).expect(
            "serde_json's RawValue no longer takes known text: the proxy's readers fall \
             back to checking every value again",
        );
        assert_eq!(made.get(), "not json");
    }

    #[test]
    fn only_json_whitespace_is_skipped() {
        assert_eq!(skip_space(b" \t\r\n{", 0), 4);
        assert_eq!(skip_space(b"\x0c{", 0), 0);
        assert_eq!(skip_space(b"  ", 1), 2);
        assert_eq!(skip_space(b"", 0), 0);
    }
}
