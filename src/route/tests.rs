use std::borrow::Cow;

use http::{HeaderMap, HeaderValue};

use super::*;

const S1: &str = "mcps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

#[test]
fn the_session_a_header_names_needs_the_proxys_shape() {
    let mut headers = HeaderMap::new();
    headers.insert(&MCP_SESSION_ID, HeaderValue::from_static(S1));
    assert_eq!(
        header_session(&headers).unwrap().map(|s| s.id),
        Some(Cow::Borrowed(S1))
    );
    headers.insert(&MCP_SESSION_ID, HeaderValue::from_static("upstream-own"));
    assert!(header_session(&headers).unwrap().is_none());
    // An empty value names none, as servers read it.
    headers.insert(&MCP_SESSION_ID, HeaderValue::from_static(""));
    assert!(header_session(&headers).unwrap().is_none());
}

#[test]
fn the_header_is_none_when_absent_its_value_when_sent_once_and_refused_when_repeated() {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("x/y"));
    assert!(session_header(&headers).unwrap().is_none());
    headers.append(&MCP_SESSION_ID, HeaderValue::from_static(S1));
    assert_eq!(
        session_header(&headers).unwrap().map(HeaderValue::as_bytes),
        Some(S1.as_bytes())
    );
    headers.append(&MCP_SESSION_ID, HeaderValue::from_static(S1));
    assert!(matches!(
        session_header(&headers),
        Err(ProxyError::SessionHeaderRepeated)
    ));
}

#[test]
fn a_header_outside_visible_ascii_is_refused_whatever_the_route() {
    let rules = RouteRules {
        require_session: false,
        old_clients_pass: true,
        modern_upstream: false,
    };
    for value in [
        &b"caf\xc3\xa9"[..],
        b"\xff",
        b"has space",
        b"tab\there",
        b"mcps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\x80",
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(&MCP_SESSION_ID, HeaderValue::from_bytes(value).unwrap());
        for bare in [Bare::Get, Bare::Delete] {
            assert!(
                matches!(
                    classify_bare(bare, &headers, rules),
                    Err(ProxyError::SessionHeaderNotVisibleAscii)
                ),
                "{value:?}"
            );
        }
        assert!(matches!(
            session_header(&headers),
            Err(ProxyError::SessionHeaderNotVisibleAscii)
        ));
    }
}
