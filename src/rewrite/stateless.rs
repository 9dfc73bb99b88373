//! The stateless rewrites (MCP 2026-07-28 in front of a 2025-11-25 server), as pure
//! functions of bytes: the request loses the per-request `_meta` a legacy server does not
//! know; results gain `resultType`, caching hints and the server's identity; the legacy
//! server's own requests become input requests of an `input_required` result (SEP-2322);
//! `server/discover` is written from the `InitializeResult`; notifications of a
//! `subscriptions/listen` stream are tagged with its id; the upstream's errors get
//! 2026-07-28's codes and statuses.

use http::StatusCode;
use serde_json::json;
use serde_json::value::RawValue;

use crate::jsonrpc::{
    Envelope, ErrorObject, RawObject, canonical, code, raw_str, splice, write_json_str,
};
use crate::mcp::Method;
use crate::mcp::initialize::Negotiated;
use crate::mcp::meta::{self, Payload};
use crate::stateless::SUPPORTED_VERSIONS;

/// `_meta` keys of the stateless protocol, which a legacy server does not know.
pub(crate) const STATELESS_META: [&str; 4] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_INFO,
    meta::CLIENT_CAPABILITIES,
    meta::LOG_LEVEL,
];

/// Members of a retried request that belong to the multi-round-trip exchange (SEP-2322),
/// not to the request itself.
pub(crate) const ROUND_TRIP_MEMBERS: [&str; 2] = ["inputResponses", "requestState"];
/// What `to_upstream` takes off `params`: the round trip's members, and a 2025-11-25
/// `task` (the proxy runs tasks itself; SDK 1.x servers refuse a `task` for a tool that
/// does not support one).
const NOT_UPSTREAM: [&str; 3] = ["inputResponses", "requestState", "task"];

/// What `to_upstream` takes off `_meta`: the stateless keys, and the data-layer session a
/// 2026-07-28 client in a session names (the session path's rewrite takes it off
/// its other messages; the legacy server knows the session by its own id).
const NOT_UPSTREAM_META: [&str; 5] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_INFO,
    meta::CLIENT_CAPABILITIES,
    meta::LOG_LEVEL,
    meta::SESSION,
];

/// The request as a legacy server takes it: `params` without the stateless `_meta` keys
/// (and a session's), `inputResponses` and `requestState`. `None` when there is nothing
/// to take off.
pub fn to_upstream(body: &[u8], params_raw: &RawValue, params: &Payload<'_>) -> Option<Vec<u8>> {
    let stripped = params.edited(&NOT_UPSTREAM, &NOT_UPSTREAM_META, &[], &[]);
    splice(body, params_raw, &stripped)
}

/// The canonical params a `requestState` is bound to: without `_meta`, `inputResponses`
/// and `requestState`, object keys sorted.
pub fn bound_params(params: Option<&Payload<'_>>) -> String {
    let Some(params) = params else {
        return "{}".to_owned();
    };
    // `_meta` changes from round to round (a session's `state`, a log level) and is no
    // part of what was asked.
    let stripped = params.edited(&["inputResponses", "requestState"], &[], &[], &[]);
    serde_json::from_slice::<serde_json::Value>(&stripped)
        .map(|mut value| {
            if let Some(members) = value.as_object_mut() {
                members.remove("_meta");
            }
            canonical(value).to_string()
        })
        .unwrap_or_default()
}

/// Results that must carry `ttlMs` and `cacheScope` (SEP-2549).
pub fn is_cacheable(method: &str) -> bool {
    matches!(
        Method::parse(method),
        Some(
            Method::ToolsList
                | Method::PromptsList
                | Method::ResourcesList
                | Method::ResourcesTemplatesList
                | Method::ResourcesRead
        )
    )
}

/// A legacy result as a 2026-07-28 complete result: `resultType: "complete"`, caching
/// hints for cacheable methods (a legacy server gives none, so: not cacheable, private),
/// and the server's identity in `_meta` (when known).
pub fn complete(
    result: &RawValue,
    method: &str,
    server_info: Option<&RawValue>,
) -> Option<Vec<u8>> {
    let payload = Payload::open(result).ok()??;
    let mut members: Vec<(&str, &[u8])> = vec![("resultType", br#""complete""#)];
    if is_cacheable(method) {
        members.push(("ttlMs", b"0"));
        members.push(("cacheScope", br#""private""#));
    }
    let info = server_info.map(|info| (meta::SERVER_INFO, info.get().as_bytes()));
    Some(payload.edited(&[], &[], &members, info.as_slice()))
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

/// How long a client may keep the discovery result.
pub const DISCOVER_TTL_MS: u64 = 60_000;

/// The `server/discover` result, from the upstream's `InitializeResult`: its
/// capabilities (without the 2025-11-25 `tasks`, which the proxy does not carry) plus
/// `sessions: {}` (the proxy offers data-layer sessions) and, with `tasks`, the tasks
/// extension the proxy runs (`extensions["io.modelcontextprotocol/tasks"]`, beside any
/// extension the server declared), its instructions and identity.
pub fn discover_result(negotiated: &Negotiated, tasks: bool) -> Vec<u8> {
    let mut capabilities = Vec::with_capacity(negotiated.capabilities.get().len() + 64);
    match RawObject::parse(&negotiated.capabilities) {
        Some(mut object) => {
            object.remove("tasks");
            object.remove("sessions");
            let mut added: Vec<(&str, &[u8])> = vec![("sessions", b"{}")];
            let extensions = tasks.then(|| with_tasks_extension(object.get("extensions")));
            if let Some(extensions) = &extensions {
                object.remove("extensions");
                added.push(("extensions", extensions));
            }
            object.write(&mut capabilities, &added);
        }
        None if tasks => capabilities.extend_from_slice(
            br#"{"sessions":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}"#,
        ),
        None => capabilities.extend_from_slice(b"{\"sessions\":{}}"),
    }
    let mut out = Vec::with_capacity(capabilities.len() + 256);
    out.extend_from_slice(br#"{"resultType":"complete","supportedVersions":["#);
    for (i, version) in SUPPORTED_VERSIONS.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_str(&mut out, version);
    }
    out.extend_from_slice(br#"],"capabilities":"#);
    out.extend_from_slice(&capabilities);
    if let Some(instructions) = &negotiated.instructions {
        out.extend_from_slice(br#","instructions":"#);
        write_json_str(&mut out, instructions);
    }
    out.extend_from_slice(br#","ttlMs":"#);
    out.extend_from_slice(DISCOVER_TTL_MS.to_string().as_bytes());
    out.extend_from_slice(br#","cacheScope":"public","_meta":{"#);
    write_json_str(&mut out, meta::SERVER_INFO);
    out.push(b':');
    out.extend_from_slice(negotiated.server_info.get().as_bytes());
    out.extend_from_slice(b"}}");
    out
}

/// `extensions` (the server's, raw, if any) with the tasks extension added.
fn with_tasks_extension(extensions: Option<&RawValue>) -> Vec<u8> {
    let mut map = extensions
        .and_then(|raw| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(raw.get()).ok()
        })
        .unwrap_or_default();
    map.insert(
        meta::TASKS_EXTENSION.to_owned(),
        serde_json::Value::Object(serde_json::Map::new()),
    );
    serde_json::to_vec(&map).unwrap_or_else(|_| b"{}".to_vec())
}

/// The `params` of a notification on a `subscriptions/listen` stream, with
/// `_meta["io.modelcontextprotocol/subscriptionId"]` set to the listen request's id.
pub fn tagged_params(params: Option<&RawValue>, subscription_id: &[u8]) -> Vec<u8> {
    let payload = params.and_then(|p| Payload::open(p).ok().flatten());
    match &payload {
        Some(payload) => payload.edited(&[], &[], &[], &[(meta::SUBSCRIPTION_ID, subscription_id)]),
        None => {
            let mut out = Vec::with_capacity(96);
            out.extend_from_slice(br#"{"_meta":{"#);
            write_json_str(&mut out, meta::SUBSCRIPTION_ID);
            out.push(b':');
            out.extend_from_slice(subscription_id);
            out.extend_from_slice(b"}}");
            out
        }
    }
}

/// The upstream's error response to a call, as a 2026-07-28 client gets it: its status
/// and error object. 2025-11-25's "resource not found" (-32002) becomes -32602 with the
/// URI in `data`; "method not found" is HTTP 404; other codes pass as they are.
pub fn error_for_client(error: Option<&RawValue>, uri: Option<&str>) -> (StatusCode, ErrorObject) {
    let error = error.and_then(RawObject::parse);
    let error_code = error
        .as_ref()
        .and_then(|e| e.get("code"))
        .and_then(|c| c.get().parse::<i32>().ok());
    let message = error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(raw_str)
        .map(|m| m.into_owned())
        .unwrap_or_else(|| "error".to_owned());
    let data = error
        .as_ref()
        .and_then(|e| e.get("data"))
        .and_then(|d| serde_json::from_str::<serde_json::Value>(d.get()).ok());
    match error_code {
        Some(code::RESOURCE_NOT_FOUND) => (
            StatusCode::OK,
            ErrorObject {
                code: code::INVALID_PARAMS,
                message,
                data: Some(json!({ "uri": uri })),
            },
        ),
        Some(code::METHOD_NOT_FOUND) => (
            StatusCode::NOT_FOUND,
            ErrorObject {
                code: code::METHOD_NOT_FOUND,
                message,
                data,
            },
        ),
        Some(code::INVALID_PARAMS) if uri.is_some() => (
            StatusCode::OK,
            ErrorObject {
                code: code::INVALID_PARAMS,
                message,
                data: Some(match data {
                    Some(serde_json::Value::Object(mut map)) => {
                        map.entry("uri").or_insert_with(|| json!(uri));
                        serde_json::Value::Object(map)
                    }
                    _ => json!({ "uri": uri }),
                }),
            },
        ),
        other => (
            StatusCode::OK,
            ErrorObject {
                code: other.unwrap_or(code::INTERNAL_ERROR),
                message,
                data,
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_state_is_bound_to_the_params_without_their_meta() {
        let open = |text: &'static str| {
            let raw: &'static RawValue = serde_json::from_str(text).unwrap();
            Payload::open(raw).unwrap().unwrap()
        };
        let first = open(
            r#"{"name":"t","arguments":{"b":1,"a":2},"_meta":{"io.modelcontextprotocol/session":{"state":"1"}}}"#,
        );
        let retry = open(
            r#"{"arguments":{"a":2,"b":1},"name":"t","requestState":"x","inputResponses":{},"_meta":{"io.modelcontextprotocol/session":{"state":"2"}}}"#,
        );
        assert_eq!(bound_params(Some(&first)), bound_params(Some(&retry)));
        assert_eq!(
            bound_params(Some(&first)),
            r#"{"arguments":{"a":2,"b":1},"name":"t"}"#
        );
    }

    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn results_gain_result_type_hints_and_server_info() {
        let info = raw(r#"{"name":"s","version":"1"}"#);
        let out = complete(&raw(r#"{"tools":[]}"#), "tools/list", Some(&info)).unwrap();
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
            Some(&info),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v.get("ttlMs").is_none());
        assert_eq!(v["_meta"]["x"], 1);
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

    #[test]
    fn the_stateless_meta_and_round_trip_members_do_not_reach_the_upstream() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","requestState":"s","inputResponses":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":3}}}"#;
        let env = Envelope::parse(body).unwrap();
        let params = env.params.unwrap();
        let payload = Payload::open(params).unwrap().unwrap();
        let out = to_upstream(body, params, &payload).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":3}}}"#
        );
    }

    #[test]
    fn upstream_errors_get_2026_codes() {
        let (status, e) = error_for_client(
            Some(&raw(r#"{"code":-32002,"message":"gone"}"#)),
            Some("file:///x"),
        );
        assert_eq!((status, e.code), (StatusCode::OK, -32602));
        assert_eq!(e.data.unwrap()["uri"], "file:///x");
        let (status, e) = error_for_client(Some(&raw(r#"{"code":-32601,"message":"no"}"#)), None);
        assert_eq!((status, e.code), (StatusCode::NOT_FOUND, -32601));
    }
}
