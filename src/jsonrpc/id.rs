//! What a JSON-RPC id denotes.
//!
//! A peer parses an id and may write it back its own way: a TypeScript server answers
//! request `1.0` with id `1`, a Python one may write `"\u00e9"` back as `"é"`. The proxy
//! never relies on a peer echoing its bytes (it speaks its own ids to an upstream and puts
//! the client's back, byte for byte); where it has to find a message by an id someone
//! else wrote (a client's `notifications/cancelled` naming its request), ids are compared
//! by the value they denote: `1.0` = `1e0` = `1`, `-0` = `0`, strings after unescaping, a
//! string never equal to a number.

use std::borrow::Cow;

use serde_json::Number;

/// The value a raw JSON id (a string or a number) denotes; equal values are the same id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IdValue<'a> {
    Str(Cow<'a, str>),
    /// A number with an integral value (`1`, `1.0`, `1E+2`, `-0`).
    Int(i128),
    /// Any other number, by the bits of the `f64` a JavaScript or Python peer reads.
    Float(u64),
}

impl<'a> IdValue<'a> {
    /// The same value, owning its text (a key that outlives the message).
    pub fn into_owned(self) -> IdValue<'static> {
        match self {
            IdValue::Str(s) => IdValue::Str(Cow::Owned(s.into_owned())),
            IdValue::Int(i) => IdValue::Int(i),
            IdValue::Float(f) => IdValue::Float(f),
        }
    }

    /// The value of `raw`; `None` for anything but a string or a number JSON can carry.
    pub fn of(raw: &'a [u8]) -> Option<IdValue<'a>> {
        match raw.first()? {
            b'"' => {
                let inner = raw.get(1..raw.len().checked_sub(1)?)?;
                if raw.len() < 2 || raw.last() != Some(&b'"') {
                    return None;
                }
                if inner.contains(&b'\\') {
                    serde_json::from_slice::<String>(raw)
                        .ok()
                        .map(|s| IdValue::Str(Cow::Owned(s)))
                } else {
                    let text = std::str::from_utf8(inner).ok()?;
                    Some(IdValue::Str(Cow::Borrowed(text)))
                }
            }
            _ => number(raw),
        }
    }
}

fn number<'a>(raw: &[u8]) -> Option<IdValue<'a>> {
    // The usual id, a small integer written plainly, without serde.
    if raw.len() <= 18 && raw.iter().all(u8::is_ascii_digit) && !raw.is_empty() {
        let text = std::str::from_utf8(raw).ok()?;
        return text.parse::<i128>().ok().map(IdValue::Int);
    }
    let n = serde_json::from_slice::<Number>(raw).ok()?;
    if let Some(i) = n.as_i64() {
        return Some(IdValue::Int(i128::from(i)));
    }
    if let Some(u) = n.as_u64() {
        return Some(IdValue::Int(i128::from(u)));
    }
    let f = n.as_f64()?;
    // Integral values within the exactly representable range read as integers (`1.0`,
    // `1E+2`, `-0.0`); the rest by their bits.
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        return Some(IdValue::Int(f as i128));
    }
    Some(IdValue::Float(f.to_bits()))
}

/// Whether two raw JSON ids (strings or numbers) denote the same id.
pub fn same_id(a: impl AsRef<[u8]>, b: impl AsRef<[u8]>) -> bool {
    let (a, b) = (a.as_ref(), b.as_ref());
    if a == b {
        return true;
    }
    match (IdValue::of(a), IdValue::of(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{IdValue, same_id};

    #[test]
    fn equal_bytes_are_the_same_id() {
        assert!(same_id("7", "7"));
        assert!(same_id(r#""a""#, r#""a""#));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(same_id("1.0", "1"));
        assert!(same_id("1e0", "1"));
        assert!(same_id("1E+2", "100"));
        assert!(same_id("-0", "0"));
        assert!(same_id("-0.0", "0"));
        assert!(same_id("18446744073709551615", "18446744073709551615"));
        assert!(!same_id("1", "2"));
        assert!(!same_id("1.5", "1"));
        assert!(same_id("1.5", "15e-1"));
        assert!(!same_id("-1", "18446744073709551615"));
    }

    #[test]
    fn strings_compare_after_unescaping() {
        assert!(same_id(r#""\u0041""#, r#""A""#));
        assert!(same_id(r#""\u00e9""#, "\"é\""));
        assert!(same_id(r#""\/x""#, r#""/x""#));
        assert!(!same_id(r#""\u0041""#, r#""B""#));
    }

    #[test]
    fn a_string_never_matches_a_number() {
        assert!(!same_id(r#""1""#, "1"));
        assert!(!same_id("1", r#""1""#));
    }

    #[test]
    fn garbage_matches_nothing_but_itself() {
        assert!(!same_id("1x", "1"));
        assert!(!same_id(r#""\x""#, r#""x""#));
        assert_eq!(IdValue::of(b"null"), None);
        assert_eq!(IdValue::of(b""), None);
    }

    #[test]
    fn values_hash_alike_when_equal() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let hash = |raw: &str| hasher.hash_one(IdValue::of(raw.as_bytes()).unwrap());
        assert_eq!(hash("1.0"), hash("1"));
        assert_eq!(hash(r#""\u00e9""#), hash("\"é\""));
        assert_ne!(hash("1"), hash(r#""1""#));
    }
}
