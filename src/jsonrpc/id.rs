//! Matching a response to its request by id.
//!
//! An upstream parses the client's id and writes it back: a TypeScript server answers
//! request `1.0` with id `1`, a Python one may write `"\u00e9"` back as `"é"`. Comparing
//! raw bytes would then miss the response (no session `_meta` on it, or a stream that
//! seems to end without its answer), so ids are compared by the value they denote.

use serde_json::Number;

/// Whether two raw JSON ids (strings or numbers) denote the same id.
pub fn same_id(a: impl AsRef<[u8]>, b: impl AsRef<[u8]>) -> bool {
    let (a, b) = (a.as_ref(), b.as_ref());
    if a == b {
        return true;
    }
    match (a.first(), b.first()) {
        (Some(b'"'), Some(b'"')) => {
            // Equal bytes were handled above, so only escapes can make them equal.
            (a.contains(&b'\\') || b.contains(&b'\\'))
                && matches!(
                    (serde_json::from_slice::<String>(a), serde_json::from_slice::<String>(b)),
                    (Ok(x), Ok(y)) if x == y
                )
        }
        (Some(b'"'), _) | (_, Some(b'"')) => false,
        _ => match (
            serde_json::from_slice::<Number>(a),
            serde_json::from_slice::<Number>(b),
        ) {
            (Ok(x), Ok(y)) => same_number(&x, &y),
            _ => false,
        },
    }
}

fn same_number(x: &Number, y: &Number) -> bool {
    if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
        return x == y;
    }
    // At least one is written with a fraction or an exponent (`1.0`, `1e0`): compare
    // what a JavaScript or Python peer would have read.
    matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::same_id;

    #[test]
    fn equal_bytes_are_the_same_id() {
        assert!(same_id("7", "7"));
        assert!(same_id(r#""a""#, r#""a""#));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(same_id("1.0", "1"));
        assert!(same_id("1e0", "1"));
        assert!(same_id("-0", "0"));
        assert!(same_id("18446744073709551615", "18446744073709551615"));
        assert!(!same_id("1", "2"));
        assert!(!same_id("1.5", "1"));
        assert!(!same_id("-1", "18446744073709551615"));
    }

    #[test]
    fn strings_compare_after_unescaping() {
        assert!(same_id(r#""\u0041""#, r#""A""#));
        assert!(same_id(r#""\u00e9""#, "\"é\""));
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
    }
}
