//! Which requests are stateless, and what a stateless request must carry (2026-07-28,
//! "Basic": per-request `_meta`; "Transports": the `MCP-Protocol-Version`, `Mcp-Method`
//! and `Mcp-Name` headers). The order of the checks follows the conformance suite's
//! reference server: header present, `_meta` complete, header equal to `_meta`, version
//! supported, then the method.

use http::HeaderMap;
use serde_json::value::RawValue;

use super::logs::LogLevel;
use crate::jsonrpc::raw_str;
use crate::mcp::headers::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, decode_header_value};
use crate::mcp::meta::{self, Payload};
use crate::mcp::version;

/// The stateless versions the proxy speaks to clients.
pub const SUPPORTED_VERSIONS: [&str; 1] = ["2026-07-28"];

/// Methods a 2026-07-28 server implements here; everything else is -32601 / 404
/// (including what 2026-07-28 removed: `initialize`, `ping`, `logging/setLevel`,
/// `resources/subscribe`, `resources/unsubscribe`).
const METHODS: [&str; 13] = [
    "server/discover",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// Whether a message is meant for the stateless protocol: it carries the per-request
/// protocol version in `_meta`, or announces a version that is not one of the stateful
/// ones, or calls a method only the stateless protocol has.
pub fn detect(headers: &HeaderMap, method: &str, params: Option<&Payload<'_>>) -> bool {
    if params.is_some_and(|p| p.meta(meta::PROTOCOL_VERSION).is_some()) {
        return true;
    }
    if matches!(method, "server/discover" | "subscriptions/listen") {
        return true;
    }
    headers
        .get(&MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| version::known_stateful(v).is_none())
}

/// A stateless request that is refused before it goes anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reject {
    /// -32020: a header is missing or disagrees with the body.
    HeaderMismatch(String),
    /// -32602: required `_meta` keys are missing.
    MissingMeta(Vec<&'static str>),
    /// -32022: the requested version is not spoken here.
    UnsupportedVersion(String),
    /// -32601 / 404: no such method (unknown, or removed in 2026-07-28).
    MethodNotFound(String),
    /// -32602: `params` or `_meta` have the wrong shape.
    InvalidParams(String),
}

/// What a valid stateless request told about its client.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub version: &'static str,
    /// `io.modelcontextprotocol/clientCapabilities` (raw; `{}` = none).
    pub capabilities: &'a RawValue,
    pub client_info: Option<&'a RawValue>,
    /// `io.modelcontextprotocol/logLevel`; `None`: no log notifications at all.
    pub log_level: Option<LogLevel>,
}

/// Checks one stateless request.
pub fn validate<'a>(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Payload<'a>>,
) -> Result<Context<'a>, Reject> {
    let header_version = headers
        .get(&MCP_PROTOCOL_VERSION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .ok_or_else(|| {
            Reject::HeaderMismatch("the MCP-Protocol-Version header is missing".into())
        })?;
    let meta_version = params.and_then(|p| p.meta(meta::PROTOCOL_VERSION));
    let capabilities = params.and_then(|p| p.meta(meta::CLIENT_CAPABILITIES));
    let mut missing = Vec::new();
    if meta_version.is_none() {
        missing.push(meta::PROTOCOL_VERSION);
    }
    if capabilities.is_none() {
        missing.push(meta::CLIENT_CAPABILITIES);
    }
    let (Some(meta_version), Some(capabilities)) = (meta_version, capabilities) else {
        return Err(Reject::MissingMeta(missing));
    };
    let meta_version = raw_str(meta_version).ok_or_else(|| {
        Reject::InvalidParams(format!(
            "_meta[\"{}\"] must be a string",
            meta::PROTOCOL_VERSION
        ))
    })?;
    if meta_version != header_version {
        return Err(Reject::HeaderMismatch(format!(
            "the MCP-Protocol-Version header ({header_version:?}) differs from _meta[\"{}\"] ({meta_version:?})",
            meta::PROTOCOL_VERSION
        )));
    }
    let Some(version) = SUPPORTED_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == meta_version)
    else {
        return Err(Reject::UnsupportedVersion(meta_version.into_owned()));
    };
    if !capabilities.get().starts_with('{') {
        return Err(Reject::InvalidParams(format!(
            "_meta[\"{}\"] must be an object",
            meta::CLIENT_CAPABILITIES
        )));
    }
    let client_info = params.and_then(|p| p.meta(meta::CLIENT_INFO));
    let log_level = match params.and_then(|p| p.meta(meta::LOG_LEVEL)) {
        None => None,
        Some(raw) => Some(
            raw_str(raw)
                .and_then(|l| LogLevel::parse(&l))
                .ok_or_else(|| {
                    Reject::InvalidParams(format!(
                        "_meta[\"{}\"] is not a log level",
                        meta::LOG_LEVEL
                    ))
                })?,
        ),
    };
    check_method_headers(headers, method, params)?;
    if !METHODS.contains(&method) {
        return Err(Reject::MethodNotFound(method.to_owned()));
    }
    Ok(Context {
        version,
        capabilities,
        client_info,
        log_level,
    })
}

/// `Mcp-Method` must name the method; `Mcp-Name` the tool, prompt or resource of
/// `tools/call`, `prompts/get` and `resources/read` (SEP-2243).
fn check_method_headers(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Payload<'_>>,
) -> Result<(), Reject> {
    match headers
        .get(&MCP_METHOD)
        .map(|v| decode_header_value(v.as_bytes()))
    {
        None => {
            return Err(Reject::HeaderMismatch(
                "the Mcp-Method header is missing".into(),
            ));
        }
        Some(value) if value != method => {
            return Err(Reject::HeaderMismatch(format!(
                "the Mcp-Method header ({value:?}) differs from the method ({method:?})"
            )));
        }
        Some(_) => {}
    }
    let Some(member) = crate::mcp::headers::name_member(method) else {
        return Ok(());
    };
    if params
        .and_then(|p| p.member(member))
        .and_then(raw_str)
        .is_none()
    {
        return Err(Reject::InvalidParams(format!(
            "{method} needs a string params.{member}"
        )));
    }
    if headers.get(&MCP_NAME).is_none() {
        return Err(Reject::HeaderMismatch(
            "the Mcp-Name header is missing".into(),
        ));
    }
    name_header_agrees(headers, method, params)
}

/// When a request carries `Mcp-Name` (SEP-2243), it names what the body does (the
/// tool, prompt or resource of `tools/call`, `prompts/get`, `resources/read`): for the
/// proxy's own judgement of a request it passes on (`[[auth.rules]]`), so that a router
/// or server reading the header can never be told of another than the one judged.
pub fn name_header_agrees(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Payload<'_>>,
) -> Result<(), Reject> {
    let Some(member) = crate::mcp::headers::name_member(method) else {
        return Ok(());
    };
    let Some(header) = headers.get(&MCP_NAME) else {
        return Ok(());
    };
    let Some(name) = params.and_then(|p| p.member(member)).and_then(raw_str) else {
        return Err(Reject::InvalidParams(format!(
            "{method} needs a string params.{member}"
        )));
    };
    let value = decode_header_value(header.as_bytes());
    if value != name {
        return Err(Reject::HeaderMismatch(format!(
            "the Mcp-Name header ({value:?}) differs from params.{member} ({name:?})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
