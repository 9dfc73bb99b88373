//! The 2025-11-25 `initialize` exchange as data: the request the proxy sends upstream and
//! what it keeps of the `InitializeResult`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::version;
use crate::jsonrpc::write_json_str;

/// The JSON-RPC id of the proxy's own `initialize` request to an upstream.
pub const REQUEST_ID: &str = "\"mcp-session-proxy-initialize\"";

/// `notifications/initialized`, sent once the `InitializeResult` has been read.
pub const INITIALIZED: &[u8] = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// What the upstream said about itself: in its `InitializeResult` (a legacy server), or
/// in its `DiscoverResult` (a modern one: `super::discover`).
#[derive(Debug, Clone)]
pub struct Negotiated {
    /// The version spoken with the upstream: one of [`version::STATEFUL`] (chosen by the
    /// upstream at `initialize`) or of [`version::MODERN`] (sent with every request).
    pub protocol_version: &'static str,
    pub server_info: Box<RawValue>,
    pub capabilities: Box<RawValue>,
    pub instructions: Option<String>,
}

impl Negotiated {
    /// Whether the upstream speaks the stateless protocol (per-request `_meta`, no
    /// session) rather than the `initialize` one.
    pub fn is_modern(&self) -> bool {
        version::is_modern(self.protocol_version)
    }

    /// A modern upstream that has not said what it offers (it answered `server/discover`
    /// with a refusal only): the version, and nothing else known.
    pub fn modern_unknown() -> Negotiated {
        Negotiated {
            protocol_version: version::LATEST_MODERN,
            server_info: empty_object(),
            capabilities: empty_object(),
            instructions: None,
        }
    }
}

/// `{}` as a raw value.
pub fn empty_object() -> Box<RawValue> {
    // A literal that is valid JSON: `from_string` cannot fail on it.
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

impl PartialEq for Negotiated {
    fn eq(&self, other: &Self) -> bool {
        self.protocol_version == other.protocol_version
            && self.server_info.get() == other.server_info.get()
            && self.capabilities.get() == other.capabilities.get()
            && self.instructions == other.instructions
    }
}

/// Why an `InitializeResult` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InitializeError {
    #[error("the initialize result is malformed: {0}")]
    Malformed(String),
    #[error("the upstream chose protocol version {0:?}, which the proxy does not speak")]
    UnsupportedVersion(String),
}

/// Builds the body of the proxy's `initialize` request. `client_info` and `capabilities`
/// are the data-layer client's own (from its `sessions/create` `_meta`) when it sent them.
pub fn request_body(client_info: Option<&RawValue>, capabilities: Option<&RawValue>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(REQUEST_ID.as_bytes());
    out.extend_from_slice(br#","method":"initialize","params":{"protocolVersion":"#);
    write_json_str(&mut out, version::LATEST_STATEFUL);
    out.extend_from_slice(br#","capabilities":"#);
    match capabilities {
        Some(caps) => out.extend_from_slice(caps.get().as_bytes()),
        None => out.extend_from_slice(b"{}"),
    }
    out.extend_from_slice(br#","clientInfo":"#);
    match client_info {
        Some(info) => out.extend_from_slice(info.get().as_bytes()),
        None => {
            out.extend_from_slice(br#"{"name":"mcp-session-proxy","version":"#);
            write_json_str(&mut out, env!("CARGO_PKG_VERSION"));
            out.push(b'}');
        }
    }
    out.extend_from_slice(b"}}");
    out
}

#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "protocolVersion")]
    protocol_version: String,
    #[serde(rename = "serverInfo")]
    server_info: Box<RawValue>,
    capabilities: Box<RawValue>,
    #[serde(default)]
    instructions: Option<String>,
}

/// Reads an `InitializeResult`.
pub fn parse_result(result: &RawValue) -> Result<Negotiated, InitializeError> {
    let wire: Wire = serde_json::from_str(result.get())
        .map_err(|e| InitializeError::Malformed(e.to_string()))?;
    if !wire.capabilities.get().starts_with('{') || !wire.server_info.get().starts_with('{') {
        return Err(InitializeError::Malformed(
            "capabilities and serverInfo must be objects".into(),
        ));
    }
    let protocol_version = version::known_stateful(&wire.protocol_version)
        .ok_or(InitializeError::UnsupportedVersion(wire.protocol_version))?;
    Ok(Negotiated {
        protocol_version,
        server_info: wire.server_info,
        capabilities: wire.capabilities,
        instructions: wire.instructions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_uses_the_clients_info_when_given() {
        let info = RawValue::from_string(r#"{"name":"c","version":"1"}"#.into()).unwrap();
        let caps = RawValue::from_string(r#"{"sampling":{}}"#.into()).unwrap();
        let body = request_body(Some(&info), Some(&caps));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["method"], "initialize");
        assert_eq!(v["params"]["protocolVersion"], "2025-11-25");
        assert_eq!(v["params"]["clientInfo"]["name"], "c");
        assert_eq!(
            v["params"]["capabilities"]["sampling"],
            serde_json::json!({})
        );
    }

    #[test]
    fn request_body_defaults_to_the_proxys_identity() {
        let v: serde_json::Value = serde_json::from_slice(&request_body(None, None)).unwrap();
        assert_eq!(v["params"]["clientInfo"]["name"], "mcp-session-proxy");
        assert_eq!(v["params"]["capabilities"], serde_json::json!({}));
    }

    #[test]
    fn parse_result_rejects_unknown_versions() {
        let raw = RawValue::from_string(
            r#"{"protocolVersion":"1999-01-01","serverInfo":{"name":"s","version":"1"},"capabilities":{}}"#.into(),
        )
        .unwrap();
        assert!(
            matches!(parse_result(&raw), Err(InitializeError::UnsupportedVersion(v)) if v == "1999-01-01")
        );
    }

    #[test]
    fn parse_result_keeps_what_the_upstream_said() {
        let raw = RawValue::from_string(
            r#"{"protocolVersion":"2025-06-18","serverInfo":{"name":"s","version":"1"},"capabilities":{"tools":{}},"instructions":"hi"}"#.into(),
        )
        .unwrap();
        let n = parse_result(&raw).unwrap();
        assert_eq!(n.protocol_version, "2025-06-18");
        assert_eq!(n.capabilities.get(), r#"{"tools":{}}"#);
        assert_eq!(n.instructions.as_deref(), Some("hi"));
    }
}
