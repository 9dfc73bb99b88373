//! `server/discover` (MCP 2026-07-28) as data: the request the proxy sends a server to
//! learn its era and what it offers, what the proxy keeps of the answer, and which
//! refusals still mean "this server speaks the modern protocol" (2026-07-28
//! "Versioning", backward compatibility: a recognised modern error means modern, anything
//! else means legacy — never keyed to one error code).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::initialize::{InitializeError, Negotiated, empty_object};
use super::meta;
use super::version;
use crate::jsonrpc::{code, write_json_str};

/// The JSON-RPC id of the proxy's own `server/discover` request to an upstream.
pub const REQUEST_ID: &str = "\"mcp-session-proxy-discover\"";

/// The body of the proxy's `server/discover`: the version it prefers, its own identity,
/// no capabilities (none are needed to be told what a server offers).
pub fn request_body() -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(REQUEST_ID.as_bytes());
    out.extend_from_slice(br#","method":"server/discover","params":{"_meta":{"#);
    write_json_str(&mut out, meta::PROTOCOL_VERSION);
    out.push(b':');
    write_json_str(&mut out, version::LATEST_MODERN);
    out.push(b',');
    write_json_str(&mut out, meta::CLIENT_INFO);
    out.extend_from_slice(br#":{"name":"mcp-session-proxy","version":"#);
    write_json_str(&mut out, env!("CARGO_PKG_VERSION"));
    out.extend_from_slice(b"},");
    write_json_str(&mut out, meta::CLIENT_CAPABILITIES);
    out.extend_from_slice(b":{}}}}");
    out
}

#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "supportedVersions")]
    supported_versions: Vec<String>,
    capabilities: Box<RawValue>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default, rename = "io.modelcontextprotocol/serverInfo")]
    server_info: Option<Box<RawValue>>,
}

/// Whether a `result` is a `DiscoverResult` (it names the versions the server speaks).
pub fn is_discover_result(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(rename = "supportedVersions")]
        supported_versions: Vec<String>,
    }
    serde_json::from_str::<Probe>(result.get()).is_ok_and(|p| !p.supported_versions.is_empty())
}

/// Reads a `DiscoverResult` into what the proxy keeps of a server: the modern version it
/// will speak (one both sides know), the capabilities, the identity (from `_meta`, where
/// 2026-07-28 puts it; `{}` when the server gives none) and the instructions.
pub fn parse_result(result: &RawValue) -> Result<Negotiated, InitializeError> {
    let wire: Wire = serde_json::from_str(result.get())
        .map_err(|e| InitializeError::Malformed(e.to_string()))?;
    if !wire.capabilities.get().starts_with('{') {
        return Err(InitializeError::Malformed(
            "capabilities must be an object".into(),
        ));
    }
    let protocol_version = wire
        .supported_versions
        .iter()
        .rev()
        .find_map(|v| version::MODERN.iter().copied().find(|m| m == v))
        .ok_or_else(|| InitializeError::UnsupportedVersion(wire.supported_versions.join(", ")))?;
    let server_info = wire
        .meta
        .and_then(|m| m.server_info)
        .filter(|info| info.get().starts_with('{'))
        .unwrap_or_else(empty_object);
    Ok(Negotiated {
        protocol_version,
        server_info,
        capabilities: wire.capabilities,
        instructions: wire.instructions,
    })
}

/// Whether a JSON-RPC error (its code, and its raw `data`) is one only a modern server
/// gives: -32022 with the versions it supports, or -32020 / -32021. A legacy server's
/// refusal of a modern request (-32601, -32602, -32600, -32000, …) is not.
pub fn is_modern_error(error_code: i64, data: Option<&RawValue>) -> bool {
    #[derive(Deserialize)]
    struct Supported {
        supported: Vec<String>,
    }
    let is = |c: i32| error_code == i64::from(c);
    if is(code::HEADER_MISMATCH) || is(code::MISSING_CLIENT_CAPABILITY) {
        return true;
    }
    is(code::UNSUPPORTED_PROTOCOL_VERSION)
        && data
            .and_then(|d| serde_json::from_str::<Supported>(d.get()).ok())
            .is_some_and(|s| s.supported.iter().any(|v| version::is_modern(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn the_request_is_a_valid_modern_request() {
        let v: serde_json::Value = serde_json::from_slice(&request_body()).unwrap();
        assert_eq!(v["method"], "server/discover");
        let meta = &v["params"]["_meta"];
        assert_eq!(meta[meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(meta[meta::CLIENT_CAPABILITIES], serde_json::json!({}));
        assert_eq!(meta[meta::CLIENT_INFO]["name"], "mcp-session-proxy");
    }

    #[test]
    fn a_discover_result_gives_the_version_capabilities_and_identity() {
        // As the TypeScript SDK v2 answers it: serverInfo only in `_meta`.
        let result = raw(
            r#"{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"instructions":"hi","resultType":"complete","ttlMs":0,"cacheScope":"private","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"ts2","version":"2"}}}"#,
        );
        assert!(is_discover_result(&result));
        let n = parse_result(&result).unwrap();
        assert_eq!(n.protocol_version, "2026-07-28");
        assert_eq!(n.capabilities.get(), r#"{"tools":{"listChanged":true}}"#);
        assert_eq!(n.server_info.get(), r#"{"name":"ts2","version":"2"}"#);
        assert_eq!(n.instructions.as_deref(), Some("hi"));
        let without_identity = raw(r#"{"supportedVersions":["2026-07-28"],"capabilities":{}}"#);
        assert_eq!(
            parse_result(&without_identity).unwrap().server_info.get(),
            "{}"
        );
        let future = raw(r#"{"supportedVersions":["2099-01-01"],"capabilities":{}}"#);
        assert!(matches!(
            parse_result(&future),
            Err(InitializeError::UnsupportedVersion(_))
        ));
        assert!(!is_discover_result(&raw(r#"{"tools":[]}"#)));
    }

    #[test]
    fn only_modern_refusals_mean_modern() {
        let supported = raw(r#"{"supported":["2026-07-28"],"requested":"2025-11-25"}"#);
        assert!(is_modern_error(-32022, Some(&supported)));
        assert!(is_modern_error(-32020, None));
        assert!(is_modern_error(-32021, None));
        // A -32022 naming only stateful versions is a legacy server's own refusal.
        let legacy = raw(r#"{"supported":["2025-11-25"]}"#);
        assert!(!is_modern_error(-32022, Some(&legacy)));
        assert!(!is_modern_error(-32022, None));
        for code in [-32601, -32602, -32600, -32000, -32001] {
            assert!(!is_modern_error(code, None), "{code}");
        }
    }
}
