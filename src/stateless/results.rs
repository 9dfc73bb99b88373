//! What 2026-07-28 clients get back, built from what a legacy server said: results with
//! `resultType` (and caching hints where the schema requires them) and the server's
//! identity in `_meta`; `input_required` results standing for the legacy server's own
//! requests; log notifications filtered by the request's level.

use serde_json::value::RawValue;

use crate::jsonrpc::{Envelope, RawObject, raw_str, write_json_str};
use crate::mcp::meta::{self, Payload};

/// Log severity (RFC 5424 order, as MCP's `LoggingLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub fn parse(level: &str) -> Option<LogLevel> {
        Some(match level {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            _ => return None,
        })
    }
}

/// Whether a `notifications/message` may reach a client that asked for `wanted` (none
/// at all when it asked for none).
pub fn log_passes(notification: &Envelope<'_>, wanted: Option<LogLevel>) -> bool {
    let Some(wanted) = wanted else {
        return false;
    };
    let level = notification
        .params
        .and_then(RawObject::parse)
        .and_then(|p| p.get("level"))
        .and_then(raw_str)
        .and_then(|l| LogLevel::parse(&l));
    level.is_some_and(|level| level >= wanted)
}

/// Results that must carry `ttlMs` and `cacheScope` (SEP-2549).
pub fn is_cacheable(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// A legacy result as a 2026-07-28 complete result: `resultType: "complete"`, caching
/// hints for cacheable methods (a legacy server gives none, so: not cacheable, private),
/// and the server's identity in `_meta`.
pub fn complete(result: &RawValue, method: &str, server_info: &RawValue) -> Option<Vec<u8>> {
    let payload = Payload::open(result).ok()??;
    let mut members: Vec<(&str, &[u8])> = vec![("resultType", br#""complete""#)];
    if is_cacheable(method) {
        members.push(("ttlMs", b"0"));
        members.push(("cacheScope", br#""private""#));
    }
    Some(payload.edited(
        &[],
        &[],
        &members,
        &[(meta::SERVER_INFO, server_info.get().as_bytes())],
    ))
}

/// The key of an input request, as the client sees it.
pub type InputKey = String;

/// A legacy server that wants its input requests shown under stable keys names them in
/// `params._meta["mcp-session-proxy/inputKey"]` (the proxy's own, namespaced extension;
/// the key is removed before the client sees the request).
pub const INPUT_KEY: &str = "mcp-session-proxy/inputKey";

/// The key under which a legacy server's request is shown to the client: its
/// `inputKey` hint when it gave one, else its request id as text.
pub fn key_of(request: &Envelope<'_>) -> Option<InputKey> {
    let hint = request
        .params
        .and_then(|p| Payload::open(p).ok().flatten())
        .and_then(|p| p.meta(INPUT_KEY))
        .and_then(raw_str)
        .filter(|key| !key.is_empty() && key.len() <= 128)
        .map(|key| key.into_owned());
    let id = request.id?;
    Some(
        hint.unwrap_or_else(|| raw_str(id).map_or_else(|| id.get().to_owned(), |s| s.into_owned())),
    )
}

/// The capability a client must have declared to answer a server request.
pub fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// `{"resultType":"input_required","inputRequests":{key:{method,params}},"requestState":…}`.
pub fn input_required(
    requests: &[(InputKey, Vec<u8>)],
    request_state: &str,
    server_info: &RawValue,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"resultType":"input_required","inputRequests":{"#);
    for (i, (key, request)) in requests.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_str(&mut out, key);
        out.push(b':');
        out.extend_from_slice(request);
    }
    out.extend_from_slice(br#"},"requestState":"#);
    write_json_str(&mut out, request_state);
    out.extend_from_slice(br#","_meta":{"#);
    write_json_str(&mut out, meta::SERVER_INFO);
    out.push(b':');
    out.extend_from_slice(server_info.get().as_bytes());
    out.extend_from_slice(b"}}");
    out
}

/// An input request as the client sees it: `{"method":…,"params":…}` of the legacy
/// server's request (without the proxy's `inputKey` hint).
pub fn input_request(request: &Envelope<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(br#"{"method":"#);
    write_json_str(&mut out, request.method());
    if let Some(params) = request.params {
        out.extend_from_slice(br#","params":"#);
        match Payload::open(params) {
            Ok(Some(payload)) if payload.meta(INPUT_KEY).is_some() => {
                out.extend_from_slice(&payload.edited(&[], &[INPUT_KEY], &[], &[]));
            }
            _ => out.extend_from_slice(params.get().as_bytes()),
        }
    }
    out.push(b'}');
    out
}

/// The response a legacy server gets for its request `id`.
pub fn upstream_result(id: &RawValue, result: &RawValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + result.get().len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.get().as_bytes());
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result.get().as_bytes());
    out.push(b'}');
    out
}

/// The error a legacy server gets for a request the proxy answers itself.
pub fn upstream_error(id: &RawValue, code: i32, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.get().as_bytes());
    out.extend_from_slice(br#","error":{"code":"#);
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(br#","message":"#);
    write_json_str(&mut out, message);
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn results_gain_result_type_hints_and_server_info() {
        let info = raw(r#"{"name":"s","version":"1"}"#);
        let out = complete(&raw(r#"{"tools":[]}"#), "tools/list", &info).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["resultType"], "complete");
        assert_eq!(v["ttlMs"], 0);
        assert_eq!(v["cacheScope"], "private");
        assert_eq!(
            v["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "s"
        );
        let out = complete(
            &raw(r#"{"content":[],"_meta":{"x":1}}"#),
            "tools/call",
            &info,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v.get("ttlMs").is_none());
        assert_eq!(v["_meta"]["x"], 1);
    }

    #[test]
    fn logs_pass_only_at_or_above_the_requested_level() {
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"warning","data":"x"}}"#;
        let env = Envelope::parse(note).unwrap();
        assert!(!log_passes(&env, None));
        assert!(log_passes(&env, Some(LogLevel::Info)));
        assert!(log_passes(&env, Some(LogLevel::Warning)));
        assert!(!log_passes(&env, Some(LogLevel::Error)));
    }

    #[test]
    fn input_requests_are_keyed_by_hint_or_request_id() {
        let by_id = br#"{"jsonrpc":"2.0","id":7,"method":"roots/list"}"#;
        assert_eq!(key_of(&Envelope::parse(by_id).unwrap()).unwrap(), "7");
        let hinted = br#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"?","_meta":{"mcp-session-proxy/inputKey":"user_name"}}}"#;
        let env = Envelope::parse(hinted).unwrap();
        assert_eq!(key_of(&env).unwrap(), "user_name");
        let shown: serde_json::Value = serde_json::from_slice(&input_request(&env)).unwrap();
        assert_eq!(
            shown,
            serde_json::json!({"method": "elicitation/create", "params": {"message": "?"}})
        );
        let request = br#"{"jsonrpc":"2.0","id":"user_name","method":"elicitation/create","params":{"message":"?"}}"#;
        let env = Envelope::parse(request).unwrap();
        let out = input_required(
            &[(key_of(&env).unwrap(), input_request(&env))],
            "st",
            &raw("{}"),
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(
            v["inputRequests"]["user_name"]["method"],
            "elicitation/create"
        );
        assert_eq!(v["requestState"], "st");
    }
}
