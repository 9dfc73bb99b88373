//! Whether an answer means "the upstream no longer knows this session": the one place
//! that decides it, for every transport.
//!
//! The 2025-11-25 transport ("Session Management") says a server answers 404 to a request
//! carrying an `Mcp-Session-Id` it does not know (anymore). Deployed servers do not all
//! say it that way; the ones met in the field answer 400 instead, and are recognised by
//! their wording:
//!
//! | server | answer to an unknown session |
//! | --- | --- |
//! | the TypeScript SDK 1.x's own examples, and `@modelcontextprotocol/server-everything` built on them | 400 `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}` — no `id` at all (the request body was never parsed), or `"id":null` |
//! | a TypeScript SDK 1.x server that hands an unknown session's request to a fresh `StreamableHTTPServerTransport` | 400 `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}` |
//! | the Python SDK `mcp` 1.x's `StreamableHTTPSessionManager` before it moved to 404 | 400, plain text (no JSON at all): `Bad Request: No valid session ID provided` |
//! | the TypeScript SDK 1.x transport; the Python SDK `mcp` 1.x from then on | 404 with `"Session not found"`, `"Not Found: Invalid or expired session ID"` or `"Not Found: Session has been terminated"` |
//!
//! The 400 answers are read leniently — a JSON-RPC error with or without an `id`, any JSON
//! object with an `error.message` (or a string `error`), or a body that is not JSON at all,
//! read as text —
//! because none of them is a response to the request: the server refused it before
//! reading it. A 400 that says anything else (a parse error, an unsupported protocol
//! version, a missing header) is the upstream refusing the request, not losing the
//! session, even without an `id`. A stdio child's session is its process: a child that is
//! gone has lost it (decided where children are kept).

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use super::answer::{Answer, Messages};
use super::connections::UpstreamResponse;
use super::error::UpstreamError;
use super::read::read_body;

/// How much of a refusal's body is read to tell why (the known answers are far shorter).
pub const READ_LIMIT: usize = 512;

/// What the known servers say when they do not know the session, lowercased.
const LOST_PHRASES: [&str; 7] = [
    // The TypeScript SDK's examples, server-everything, the Python SDK before 404.
    "no valid session",
    // The TypeScript SDK's transport (-32001) and the Python SDK (404s).
    "session not found",
    "invalid or expired session",
    "session has been terminated",
    // The TypeScript SDK's transport, given a request of a session it never initialized.
    "server not initialized",
    // Wordings of hand-written servers.
    "unknown session",
    "invalid session",
];

/// Whether an HTTP answer to a request that carried the upstream's own session id says
/// the session is gone. `body` is the answer's body (JSON or text), when it was read;
/// [`needs_body`] says when it must be.
pub fn session_lost(status: StatusCode, body: Option<&[u8]>) -> bool {
    match status {
        StatusCode::NOT_FOUND => true,
        StatusCode::BAD_REQUEST => body.is_some_and(says_session_lost),
        _ => false,
    }
}

/// Whether the status alone cannot tell, and the body must be read to know.
pub fn needs_body(status: StatusCode) -> bool {
    status == StatusCode::BAD_REQUEST
}

/// Whether an answer read by [`Answer::read`] (a JSON body whole, or a refusal with the
/// start of its body) says the session is gone.
pub fn in_answer(read: &Result<Answer, UpstreamError>) -> bool {
    match read {
        Ok(Answer {
            status,
            messages: Messages::One(Some(body)),
            ..
        }) => session_lost(*status, Some(body)),
        Ok(answer) => session_lost(answer.status, None),
        Err(UpstreamError::Refused { status, detail }) => {
            session_lost(*status, Some(detail.as_bytes()))
        }
        Err(_) => false,
    }
}

/// An old client's answer from a replica that may not hold its session (an id no proxy
/// learned, tried on each replica in turn).
#[derive(Debug)]
pub enum Probed {
    /// The replica does not know the session (404, or a 400 saying so): try the next.
    Unknown,
    /// Its answer, untouched.
    Answer(UpstreamResponse),
    /// Its answer, whose body had to be read (whole, at most `limit` bytes) to tell: the
    /// head and the body, to be passed on as they came.
    Read(http::response::Parts, Bytes),
}

/// Whether `response`, to an old client's request carrying an `Mcp-Session-Id`, says the
/// replica does not know that session. A 400's body is read to tell; one over `limit`
/// bytes, or that does not arrive within `timeout`, is the upstream failing.
pub async fn probe(
    response: UpstreamResponse,
    limit: usize,
    timeout: Duration,
) -> Result<Probed, UpstreamError> {
    let status = response.status();
    if !needs_body(status) {
        return Ok(if session_lost(status, None) {
            Probed::Unknown
        } else {
            Probed::Answer(response)
        });
    }
    let (parts, body) = response.into_parts();
    let body = read_body(body, limit, timeout).await?;
    Ok(if session_lost(status, Some(&body)) {
        Probed::Unknown
    } else {
        Probed::Read(parts, body)
    })
}

/// Whether a refusal's body says the session is unknown: the `error.message` (or a string
/// `error`) of a JSON body, whatever else it holds or lacks, or the body itself when it is
/// not JSON.
fn says_session_lost(body: &[u8]) -> bool {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(json) => match json.get("error") {
            Some(Value::String(message)) => Cow::Owned(message.clone()),
            Some(error) => match error.get("message").and_then(Value::as_str) {
                Some(message) => Cow::Owned(message.to_owned()),
                None => return false,
            },
            // JSON that is no error: nothing says the session is gone.
            None => return false,
        },
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(READ_LIMIT)]),
    };
    let text = text.to_ascii_lowercase();
    LOST_PHRASES.iter().any(|phrase| text.contains(phrase))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAD: StatusCode = StatusCode::BAD_REQUEST;

    fn lost_400(body: &str) -> bool {
        session_lost(BAD, Some(body.as_bytes()))
    }

    #[test]
    fn a_404_is_always_a_lost_session() {
        assert!(session_lost(StatusCode::NOT_FOUND, None));
        assert!(session_lost(StatusCode::NOT_FOUND, Some(b"{}")));
        assert!(!needs_body(StatusCode::NOT_FOUND));
    }

    #[test]
    fn server_everything_without_an_id() {
        // server-everything's streamableHttp transport, verbatim: express drops the
        // `id: undefined` member.
        assert!(needs_body(BAD));
        assert!(lost_400(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#
        ));
    }

    #[test]
    fn the_typescript_sdk_examples_with_a_null_id() {
        assert!(lost_400(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#
        ));
    }

    #[test]
    fn the_typescript_sdk_transport_not_initialized() {
        assert!(lost_400(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#
        ));
    }

    #[test]
    fn the_python_sdk_plain_text() {
        assert!(lost_400("Bad Request: No valid session ID provided"));
    }

    #[test]
    fn a_hand_written_string_error() {
        assert!(lost_400(r#"{"error":"Unknown session"}"#));
    }

    #[test]
    fn the_python_and_typescript_sdk_404s() {
        for body in [
            r#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Session not found"}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}"#,
            r#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Not Found: Invalid or expired session ID"}}"#,
        ] {
            assert!(session_lost(StatusCode::NOT_FOUND, Some(body.as_bytes())));
            // The same words on a 400 mean the same.
            assert!(lost_400(body), "{body}");
        }
    }

    #[test]
    fn other_refusals_are_not_a_lost_session() {
        for body in [
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Unsupported protocol version: 2099-01-01"}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Mcp-Session-Id header is required"},"id":null}"#,
            // JSON that names no error, even if its other members mention a session.
            r#"{"detail":"session not found"}"#,
            r#"{"error":{"code":-32000}}"#,
            r#"["session not found"]"#,
            "not json, and nothing about sessions",
            "",
        ] {
            assert!(!lost_400(body), "{body}");
        }
        assert!(!session_lost(BAD, None));
    }

    #[test]
    fn other_statuses_never_are() {
        let ts = br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
        for status in [
            StatusCode::OK,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::FORBIDDEN,
        ] {
            assert!(!session_lost(status, Some(ts)), "{status}");
            assert!(!needs_body(status));
        }
    }

    #[test]
    fn answers_as_read() {
        let answer = |status, body: &'static [u8]| {
            Ok(Answer {
                status,
                headers: http::HeaderMap::new(),
                messages: Messages::One(Some(bytes::Bytes::from_static(body))),
                renamed: None,
            })
        };
        assert!(in_answer(&answer(
            BAD,
            br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#
        )));
        assert!(!in_answer(&answer(
            StatusCode::OK,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#
        )));
        let refused = Err(UpstreamError::Refused {
            status: BAD,
            detail: "Bad Request: No valid session ID provided".into(),
        });
        assert!(in_answer(&refused));
        assert!(!in_answer(&Err(UpstreamError::Timeout(
            std::time::Duration::from_secs(1)
        ))));
    }
}
