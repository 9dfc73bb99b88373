use std::borrow::Cow;

use http::{HeaderMap, HeaderValue};

use super::*;

const S1: &str = "mcps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

#[test]
fn the_session_a_header_names_needs_the_proxys_shape() {
    let mut headers = HeaderMap::new();
    headers.insert(&MCP_SESSION_ID, HeaderValue::from_static(S1));
    assert_eq!(
        header_session(&headers).map(|s| s.id),
        Some(Cow::Borrowed(S1))
    );
    headers.insert(&MCP_SESSION_ID, HeaderValue::from_static("upstream-own"));
    assert!(header_session(&headers).is_none());
}
