//! Checks every suite makes of the proxy's answers, whatever is behind it: the session
//! `_meta` of a response, the -32043 of an unknown session, the text of a tool result.

use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::{Reply, SESSION_KEY, session_meta};

/// Checks the session `_meta` of a response message (`sessionId`, a non-empty `state`,
/// an RFC 3339 `expiresAt` in the future) and returns its `state`.
pub fn check_session_meta(message: &Value, session_id: &str) -> String {
    let meta = session_meta(message);
    assert_eq!(meta["sessionId"], session_id, "session _meta of {message}");
    let state = meta["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no state in {message}"));
    assert!(!state.is_empty(), "empty state in {message}");
    let expires = meta["expiresAt"]
        .as_str()
        .unwrap_or_else(|| panic!("no expiresAt in {message}"));
    let at = humantime::parse_rfc3339_weak(expires)
        .unwrap_or_else(|e| panic!("expiresAt {expires:?} is not RFC 3339: {e}"));
    assert!(at > SystemTime::now(), "expiresAt {expires} is in the past");
    state.to_owned()
}

/// Whether a message carries session `_meta` in its params or its result.
pub fn has_session_meta(message: &Value) -> bool {
    ["params", "result"]
        .iter()
        .any(|part| message[part]["_meta"].get(SESSION_KEY).is_some())
}

/// Asserts a reply is the proxy's -32043 "Session not found" for `session_id`, HTTP 404.
pub fn assert_session_not_found(reply: &Reply, session_id: &str) {
    assert_eq!(reply.status, 404, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["error"]["code"], -32043, "{body}");
    assert_eq!(body["error"]["message"], "Session not found", "{body}");
    assert_eq!(body["error"]["data"]["sessionId"], session_id, "{body}");
}

/// The names in a `tools/list` result.
pub fn tool_names(message: &Value) -> Vec<String> {
    message["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {message}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// The text of the first content item of a tool result.
pub fn text_of(message: &Value) -> &str {
    message
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no text in {message}"))
}

/// Checks timed progress notifications: each carries `token`, their `progress` rises,
/// and none carries session `_meta` (only the response to the request is stamped).
pub fn check_progress(progress: &[&(Instant, Value)], token: &str) {
    let mut last = f64::MIN;
    for (_, note) in progress {
        assert_eq!(note["params"]["progressToken"], token, "{note}");
        let value = note["params"]["progress"]
            .as_f64()
            .unwrap_or_else(|| panic!("{note}"));
        assert!(value > last, "progress must increase: {progress:?}");
        last = value;
        assert!(
            !has_session_meta(note),
            "a notification got session _meta: {note}"
        );
    }
}

/// How many `notifications/progress` an event-stream reply carried.
pub fn progress_count(reply: &Reply) -> usize {
    reply
        .events()
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count()
}
