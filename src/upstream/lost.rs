//! Whether an answer means "the upstream no longer knows this session": the one place
//! that decides it, for every transport.
//!
//! The 2025-11-25 transport says 404 to a request carrying an unknown or ended
//! `Mcp-Session-Id`; some servers answer 400 instead (the TypeScript SDK's transport says
//! "Bad Request: No valid session ID provided", seen with
//! `@modelcontextprotocol/server-everything`), so their wording counts too. A stdio
//! child's session is its process: a child that is gone has lost it.

use http::StatusCode;

use crate::jsonrpc::Envelope;

/// Whether an HTTP answer to a request that carried the upstream's own session id says
/// the session is gone. `body` is the answer's JSON body, when it had one.
pub fn session_lost(status: StatusCode, body: Option<&[u8]>) -> bool {
    match status {
        StatusCode::NOT_FOUND => true,
        StatusCode::BAD_REQUEST => body.is_some_and(says_session_lost),
        _ => false,
    }
}

/// A JSON-RPC error whose message says the session is unknown.
fn says_session_lost(body: &[u8]) -> bool {
    let Ok(envelope) = Envelope::parse(body) else {
        return false;
    };
    let Some(error) = envelope.error else {
        return false;
    };
    let message = serde_json::from_str::<serde_json::Value>(error.get())
        .ok()
        .and_then(|e| e.get("message")?.as_str().map(str::to_ascii_lowercase))
        .unwrap_or_default();
    [
        "no valid session",
        "session not found",
        "unknown session",
        "invalid session",
    ]
    .iter()
    .any(|phrase| message.contains(phrase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typescript_sdks_lost_session_answer_is_recognised() {
        let ts = br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
        assert!(session_lost(StatusCode::BAD_REQUEST, Some(ts)));
        assert!(!session_lost(StatusCode::OK, Some(ts)));
        let other =
            br#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":1}"#;
        assert!(!session_lost(StatusCode::BAD_REQUEST, Some(other)));
        assert!(!session_lost(StatusCode::BAD_REQUEST, Some(b"not json")));
        assert!(!session_lost(StatusCode::BAD_REQUEST, None));
    }

    #[test]
    fn a_404_is_always_a_lost_session() {
        assert!(session_lost(StatusCode::NOT_FOUND, None));
        assert!(session_lost(StatusCode::NOT_FOUND, Some(b"{}")));
    }
}
