//! A modern (2026-07-28) upstream's messages as an old client (2025-11-25 and earlier)
//! takes them, and the old client's answers as the modern upstream wants them — the
//! reverse bridge, as pure functions of bytes:
//!
//! - the `InitializeResult` the proxy answers an old client's `initialize` with, written
//!   from the upstream's `server/discover` (a version the client speaks, the server's
//!   capabilities without what 2025-11-25 does not have, `logging`, which the proxy
//!   serves itself);
//! - a result without the fields 2025-11-25 has not (`resultType`, `ttlMs`,
//!   `cacheScope`);
//! - an `input_required` result (SEP-2322) read into the requests the old client is sent
//!   one by one, and the retry carrying its answers (`inputResponses` under the same
//!   keys, `requestState` echoed);
//! - a notification of a `subscriptions/listen` stream without its subscription tag.
//!
//! (An `InitializeResult` of a legacy upstream is written here too: the session path
//! answers SEP-1364's `initialize` with it.)

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::jsonrpc::{RawObject, splice, write_json_str};
use crate::mcp::initialize::Negotiated;
use crate::mcp::meta::{self, Payload};
use crate::mcp::version;

/// Result members 2025-11-25 does not have (2026-07-28's `resultType` and caching hints).
const MODERN_RESULT_MEMBERS: [&str; 3] = ["resultType", "ttlMs", "cacheScope"];
/// Server capabilities 2025-11-25 does not have.
const MODERN_CAPABILITIES: [&str; 1] = ["extensions"];

/// An `InitializeResult` for a client that asked for `requested`, from what the upstream
/// said of itself, with `sessions` (when given) set in its capabilities. A modern
/// upstream is answered for in a version the client speaks (the one it asked for, when
/// the proxy knows it; else the latest stateful one), with the capabilities an old
/// client knows and `logging` (the proxy answers `logging/setLevel` itself).
pub fn initialize_result(
    negotiated: &Negotiated,
    requested: Option<&str>,
    sessions: Option<&[u8]>,
) -> Vec<u8> {
    let modern = negotiated.is_modern();
    let protocol_version = match modern {
        true => requested
            .and_then(version::known_stateful)
            .unwrap_or(version::LATEST_STATEFUL),
        false => negotiated.protocol_version,
    };
    let mut capabilities = Vec::with_capacity(negotiated.capabilities.get().len() + 32);
    match RawObject::parse(&negotiated.capabilities) {
        Some(mut object) => {
            let mut extra: Vec<(&str, &[u8])> = Vec::new();
            if modern {
                for member in MODERN_CAPABILITIES {
                    object.remove(member);
                }
                object.remove("logging");
                extra.push(("logging", b"{}"));
            }
            if let Some(sessions) = sessions {
                object.remove("sessions");
                extra.push(("sessions", sessions));
            }
            object.write(&mut capabilities, &extra);
        }
        None => capabilities.extend_from_slice(negotiated.capabilities.get().as_bytes()),
    }
    let mut out = Vec::with_capacity(capabilities.len() + 256);
    out.extend_from_slice(br#"{"protocolVersion":"#);
    write_json_str(&mut out, protocol_version);
    out.extend_from_slice(br#","capabilities":"#);
    out.extend_from_slice(&capabilities);
    out.extend_from_slice(br#","serverInfo":"#);
    out.extend_from_slice(negotiated.server_info.get().as_bytes());
    if let Some(instructions) = &negotiated.instructions {
        out.extend_from_slice(br#","instructions":"#);
        write_json_str(&mut out, instructions);
    }
    out.push(b'}');
    out
}

/// A modern result without the members 2025-11-25 does not have; `None` when it has
/// none of them (or is not an object).
pub fn result(result: &RawValue) -> Option<Vec<u8>> {
    let payload = Payload::open(result).ok()??;
    MODERN_RESULT_MEMBERS
        .iter()
        .any(|member| payload.member(member).is_some())
        .then(|| payload.edited(&MODERN_RESULT_MEMBERS, &[], &[], &[]))
}

/// What an `input_required` result asks of the client (SEP-2322).
#[derive(Debug)]
pub struct InputRequired {
    /// Each input request: its key, method and raw params (none for `roots/list`).
    pub requests: Vec<InputRequest>,
    /// To echo on the retry, as it came (`None`: the server gave none).
    pub request_state: Option<Box<RawValue>>,
}

/// One input request of an `input_required` result.
#[derive(Debug)]
pub struct InputRequest {
    pub key: String,
    pub method: String,
    pub params: Option<Box<RawValue>>,
}

/// The input requests of `result`, if it is an `input_required` result.
pub fn input_required(result: &RawValue) -> Option<InputRequired> {
    #[derive(Deserialize)]
    struct Wire<'a> {
        #[serde(rename = "resultType")]
        result_type: Option<&'a str>,
        #[serde(default, borrow, rename = "inputRequests")]
        input_requests: Option<&'a RawValue>,
        #[serde(default, rename = "requestState")]
        request_state: Option<Box<RawValue>>,
    }
    #[derive(Deserialize)]
    struct Request {
        method: String,
        #[serde(default)]
        params: Option<Box<RawValue>>,
    }
    let wire: Wire<'_> = serde_json::from_str(result.get()).ok()?;
    if wire.result_type != Some("input_required") {
        return None;
    }
    let mut requests = Vec::new();
    if let Some(raw) = wire.input_requests {
        for (key, value) in RawObject::parse(raw)?.entries() {
            let request: Request = serde_json::from_str(value.get()).ok()?;
            requests.push(InputRequest {
                key: key.to_owned(),
                method: request.method,
                params: request.params,
            });
        }
    }
    Some(InputRequired {
        requests,
        request_state: wire.request_state,
    })
}

/// The params of a request retried with the client's answers: the original params,
/// `inputResponses` (each answer under its key) and the `requestState` echoed, in place
/// of any the params carried.
pub fn retried_params(
    params: Option<&RawValue>,
    responses: &[(String, Box<RawValue>)],
    request_state: Option<&RawValue>,
) -> Option<Vec<u8>> {
    let mut answers = Vec::with_capacity(64);
    answers.push(b'{');
    for (i, (key, response)) in responses.iter().enumerate() {
        if i > 0 {
            answers.push(b',');
        }
        write_json_str(&mut answers, key);
        answers.push(b':');
        answers.extend_from_slice(response.get().as_bytes());
    }
    answers.push(b'}');
    let mut add: Vec<(&str, &[u8])> = vec![("inputResponses", &answers)];
    if let Some(state) = request_state {
        add.push(("requestState", state.get().as_bytes()));
    }
    let dropped = ["inputResponses", "requestState"];
    match params {
        Some(raw) => Some(Payload::open(raw).ok()??.edited(&dropped, &[], &add, &[])),
        None => {
            let mut out = Vec::with_capacity(answers.len() + 64);
            RawObject::default().write(&mut out, &add);
            Some(out)
        }
    }
}

/// A request `message` (its whole JSON text, `params` at `params_raw`) with new params.
pub fn with_params(
    message: &[u8],
    params_raw: Option<&RawValue>,
    params: &[u8],
) -> Option<Vec<u8>> {
    match params_raw {
        Some(raw) => splice(message, raw, params),
        None => {
            let top = serde_json::from_slice::<&RawValue>(message).ok()?;
            let object = RawObject::parse(top)?;
            let mut out = Vec::with_capacity(message.len() + params.len() + 12);
            object.write(&mut out, &[("params", params)]);
            Some(out)
        }
    }
}

/// A listen stream's notification params without `_meta`'s subscription tag (an old
/// client's GET stream has no subscriptions); `None` when there is none to take off.
pub fn untagged(params: &RawValue) -> Option<Vec<u8>> {
    let payload = Payload::open(params).ok()??;
    payload.without_meta(meta::SUBSCRIPTION_ID)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    fn modern() -> Negotiated {
        crate::mcp::discover::parse_result(&raw(json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true},
                             "logging": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
            "instructions": "be kind",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "ts2", "version": "2"}},
        })))
        .unwrap()
    }

    #[test]
    fn an_old_client_is_answered_in_its_own_version_with_what_it_knows() {
        let out: Value =
            serde_json::from_slice(&initialize_result(&modern(), Some("2025-06-18"), None))
                .unwrap();
        assert_eq!(out["protocolVersion"], "2025-06-18");
        assert_eq!(out["serverInfo"]["name"], "ts2");
        assert_eq!(out["instructions"], "be kind");
        let caps = &out["capabilities"];
        assert!(caps.get("extensions").is_none(), "{caps}");
        assert_eq!(caps["logging"], json!({}));
        assert_eq!(caps["resources"]["subscribe"], true);
        let unknown: Value =
            serde_json::from_slice(&initialize_result(&modern(), Some("2099-01-01"), None))
                .unwrap();
        assert_eq!(unknown["protocolVersion"], "2025-11-25");
        // SEP-1364's sessions capability, for either era.
        let with: Value = serde_json::from_slice(&initialize_result(
            &modern(),
            None,
            Some(br#"{"required":false}"#),
        ))
        .unwrap();
        assert_eq!(with["capabilities"]["sessions"]["required"], false);
    }

    #[test]
    fn results_lose_what_2025_has_not() {
        let out = result(&raw(
            json!({"content": [], "resultType": "complete", "ttlMs": 0,
                                     "cacheScope": "private", "_meta": {"x": 1}}),
        ))
        .unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out, json!({"content": [], "_meta": {"x": 1}}));
        assert!(result(&raw(json!({"content": []}))).is_none());
    }

    #[test]
    fn an_input_required_result_is_read_and_answered() {
        let asked = raw(
            json!({"resultType": "input_required", "requestState": "s-1",
            "inputRequests": {
                "answer": {"method": "elicitation/create", "params": {"message": "Colour?"}},
                "roots": {"method": "roots/list"},
            }}),
        );
        let read = input_required(&asked).unwrap();
        assert_eq!(read.requests.len(), 2);
        assert_eq!(read.requests[0].key, "answer");
        assert_eq!(read.requests[0].method, "elicitation/create");
        assert!(read.requests[1].params.is_none());
        assert_eq!(
            read.request_state.as_deref().map(RawValue::get),
            Some(r#""s-1""#)
        );
        assert!(input_required(&raw(json!({"content": []}))).is_none());

        let params = raw(json!({"name": "ask", "arguments": {"q": 1}, "requestState": "old"}));
        let responses = vec![("answer".to_owned(), raw(json!({"action": "accept"})))];
        let retried = retried_params(Some(&params), &responses, read.request_state.as_deref());
        let retried: Value = serde_json::from_slice(&retried.unwrap()).unwrap();
        assert_eq!(retried["inputResponses"]["answer"]["action"], "accept");
        assert_eq!(retried["requestState"], "s-1");
        assert_eq!(retried["arguments"], json!({"q": 1}));
    }

    #[test]
    fn a_listen_notification_loses_its_tag() {
        let out = untagged(&raw(json!({"uri": "demo://a",
            "_meta": {"io.modelcontextprotocol/subscriptionId": 7}})))
        .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap(),
            json!({"uri": "demo://a"})
        );
    }
}
