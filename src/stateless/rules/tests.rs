use super::*;
use http::HeaderValue;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn check(h: &HeaderMap, method: &str, params: &str) -> Result<(), Reject> {
    let raw = raw(params);
    let payload = Payload::open(&raw).unwrap();
    validate(h, method, payload.as_ref()).map(|_| ())
}

fn good(method: &str) -> HeaderMap {
    headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ])
}

#[test]
fn a_complete_request_passes() {
    assert_eq!(
        check(&good("tools/list"), "tools/list", &format!("{{{META}}}")),
        Ok(())
    );
}

#[test]
fn the_checks_come_in_the_reference_order() {
    // No version header: -32020 before anything else.
    let no_header = headers(&[("mcp-method", "tools/list")]);
    assert!(matches!(
        check(&no_header, "tools/list", "{}"),
        Err(Reject::HeaderMismatch(_))
    ));
    // Missing _meta keys: -32602.
    assert_eq!(
        check(&good("server/discover"), "server/discover", "{}"),
        Err(Reject::MissingMeta(vec![
            meta::PROTOCOL_VERSION,
            meta::CLIENT_CAPABILITIES
        ]))
    );
    // _meta and header disagree: -32020, even when the _meta version is unknown.
    let params = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}"#;
    assert!(matches!(
        check(&good("server/discover"), "server/discover", params),
        Err(Reject::HeaderMismatch(_))
    ));
    // Both unknown: -32022.
    let both = headers(&[
        ("mcp-protocol-version", "v999.0.0"),
        ("mcp-method", "server/discover"),
    ]);
    assert_eq!(
        check(&both, "server/discover", params),
        Err(Reject::UnsupportedVersion("v999.0.0".into()))
    );
}

#[test]
fn removed_and_unknown_methods_are_not_found() {
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "unknown/method",
    ] {
        let result = check(&good(method), method, &format!("{{{META}}}"));
        assert_eq!(
            result,
            Err(Reject::MethodNotFound(method.into())),
            "{method}"
        );
    }
}

#[test]
fn method_and_name_headers_must_match() {
    let wrong = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ]);
    assert!(matches!(
        check(&wrong, "prompts/list", &format!("{{{META}}}")),
        Err(Reject::HeaderMismatch(_))
    ));
    let call = format!(r#"{{"name":"echo",{META}}}"#);
    let named = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ]);
    assert_eq!(check(&named, "tools/call", &call), Ok(()));
    let misnamed = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "other"),
    ]);
    assert!(matches!(
        check(&misnamed, "tools/call", &call),
        Err(Reject::HeaderMismatch(_))
    ));
    // Base64-encoded values (for names that are not header-safe).
    let encoded = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "=?base64?ZWNobw==?="),
    ]);
    assert_eq!(check(&encoded, "tools/call", &call), Ok(()));
}

#[test]
fn detection() {
    let none = HeaderMap::new();
    assert!(detect(&none, "server/discover", None));
    assert!(!detect(&none, "tools/list", None));
    assert!(detect(
        &headers(&[("mcp-protocol-version", "2026-07-28")]),
        "tools/list",
        None
    ));
    assert!(!detect(
        &headers(&[("mcp-protocol-version", "2025-11-25")]),
        "tools/list",
        None
    ));
    let raw = raw(&format!("{{{META}}}"));
    let payload = Payload::open(&raw).unwrap();
    assert!(detect(&none, "tools/list", payload.as_ref()));
}

#[test]
fn log_levels_are_read() {
    let params = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"warning"}}"#;
    let raw = raw(params);
    let payload = Payload::open(&raw).unwrap();
    let context = validate(&good("tools/list"), "tools/list", payload.as_ref()).unwrap();
    assert_eq!(context.log_level, Some(LogLevel::Warning));
}
