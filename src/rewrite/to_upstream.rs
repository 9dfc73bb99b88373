//! Client → upstream: remove `_meta["io.modelcontextprotocol/session"]`.
//!
//! A legacy server knows nothing of data-layer sessions; the session travels to it as the
//! `Mcp-Session-Id` of its own connection instead. Everything else in the message is
//! passed on byte for byte.

use std::ops::Range;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::jsonrpc::{RawObject, range_in, splice_at};
use crate::mcp::meta::{self, Payload};

/// `body` without the session key in the `_meta` of `payload` (the `params` of a request
/// or notification, or the `result` of a response, parsed from `body`). `_meta` is dropped
/// when nothing else is left in it. Returns `body` itself when there is nothing to strip.
/// With it, where `id` (another top-level member parsed from `body`: a request's id) is
/// in what it returns.
///
/// The usual `_meta`, the session alone, is cut out of the bytes as they came; any other
/// has the payload written again without the key.
pub fn strip_session(
    body: &Bytes,
    payload_raw: &RawValue,
    payload: &Payload<'_>,
    id: Option<&RawValue>,
) -> (Bytes, Option<Range<usize>>) {
    let id = id.and_then(|id| range_in(body, id));
    // `payload` was opened from `payload_raw`: the cut is a range of its text.
    if let Some(cut) = payload.sole_meta_cut(meta::SESSION)
        && let Some(at) = range_in(body, payload_raw)
    {
        let cut = at.start + cut.start..at.start + cut.end;
        if let Some(out) = splice_at(body, cut.clone(), b"") {
            return (Bytes::from(out), id.map(|id| after_cut(id, &cut)));
        }
    }
    let Some((stripped, replaced)) = payload
        .without_meta(meta::SESSION)
        .zip(range_in(body, payload_raw))
    else {
        return (body.clone(), id);
    };
    let Some(out) = splice_at(body, replaced.clone(), &stripped) else {
        return (body.clone(), id);
    };
    // A member after the payload moved by what the payload lost.
    let moved = |at: usize| at - replaced.len() + stripped.len();
    let id = id.map(|id| match id.start >= replaced.end {
        true => moved(id.start)..moved(id.end),
        false => id,
    });
    (Bytes::from(out), id)
}

/// Where `range`, outside `cut`, is once `cut` is taken out.
fn after_cut(range: Range<usize>, cut: &Range<usize>) -> Range<usize> {
    match range.start >= cut.end {
        true => range.start - cut.len()..range.end - cut.len(),
        false => range,
    }
}

/// `message` without its top-level `sessionId` (SEP-1364's dialect): a 2025-11-25 server
/// knows no such member. Returns `message` itself when it has none.
pub fn strip_top_level_session(message: Bytes) -> Bytes {
    let Ok(raw) = serde_json::from_slice::<&RawValue>(&message) else {
        return message;
    };
    let Some(mut object) = RawObject::parse(raw) else {
        return message;
    };
    if object.remove(SESSION_ID).is_none() {
        return message;
    }
    let mut out = Vec::with_capacity(message.len());
    object.write(&mut out, &[]);
    Bytes::from(out)
}

const SESSION_ID: &str = "sessionId";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::Envelope;

    fn strip(body: &str) -> String {
        let body = Bytes::from(body.to_owned());
        let env = Envelope::parse(&body).unwrap();
        let raw = env.params.or(env.result).unwrap();
        let payload = Payload::open(raw).unwrap().unwrap();
        let (out, id) = strip_session(&body, raw, &payload, env.id);
        let out = String::from_utf8(out.to_vec()).unwrap();
        // Before the payload or after it, the id is where the range says.
        assert_eq!(id.map(|id| &out[id]), env.id.map(RawValue::get));
        out
    }

    #[test]
    fn the_drafts_usage_vector_reaches_the_upstream_without_session_meta() {
        let out = strip(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"hi"},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"sess-abc123","state":"eyJrIjoidiJ9"}}}}"#,
        );
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"hi"}}}"#
        );
    }

    #[test]
    fn other_meta_keys_stay() {
        let out = strip(
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"_meta":{"progressToken":7,"io.modelcontextprotocol/session":{"sessionId":"s"}},"name":"slow"}}"#,
        );
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"slow","_meta":{"progressToken":7}}}"#
        );
    }

    #[test]
    fn an_id_after_the_payload_is_found_where_it_moved() {
        let out = strip(
            r#"{"params":{"name":"echo","_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}}},"method":"tools/call","id":"after","jsonrpc":"2.0"}"#,
        );
        assert_eq!(
            out,
            r#"{"params":{"name":"echo"},"method":"tools/call","id":"after","jsonrpc":"2.0"}"#
        );
    }

    #[test]
    fn a_session_alone_in_meta_is_cut_out_and_the_clients_bytes_kept() {
        // As written, spacing and all, wherever `_meta` is and wherever the id is.
        let out = strip(
            r#"{ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": { "name": "echo", "_meta": { "io.modelcontextprotocol/session": { "sessionId": "s" } } } }"#,
        );
        assert_eq!(
            out,
            r#"{ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": { "name": "echo" } }"#
        );
        let out = strip(
            r#"{"params":{ "_meta" : {"io.modelcontextprotocol/session":{"sessionId":"s"}} , "name":"x" },"id":"later","method":"tools/call","jsonrpc":"2.0"}"#,
        );
        assert_eq!(
            out,
            r#"{"params":{ "name":"x" },"id":"later","method":"tools/call","jsonrpc":"2.0"}"#
        );
        let out = strip(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}}}}"#,
        );
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#
        );
    }

    #[test]
    fn a_meta_key_spelled_with_escapes_is_cut_the_same() {
        // The space before `"name"` stays: the cut was taken (written again, it would go).
        let out = strip(
            r#"{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"_m\u0065ta":{"io.modelcontextprotocol\/session":{"sessionId":"s"}}, "name":"x"}}"#,
        );
        assert_eq!(
            out,
            r#"{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{ "name":"x"}}"#
        );
    }

    #[test]
    fn a_meta_named_twice_is_written_again_without_the_session() {
        // Which `_meta` a reader keeps is the last; both go, and the kept one is written.
        let out = strip(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1},"cursor":"c","_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}}}}"#,
        );
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"c"}}"#
        );
    }

    #[test]
    fn a_message_without_session_meta_is_passed_unchanged() {
        let body = r#"{ "jsonrpc" : "2.0", "id":1, "method":"ping", "params":{"_meta":{"progressToken":1}} }"#;
        assert_eq!(strip(body), body);
    }

    #[test]
    fn sep_1364_top_level_session_ids_are_removed() {
        let out = strip_top_level_session(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"sessionId":"s","method":"tools/list","params":{}}"#,
        ));
        assert_eq!(
            out,
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#[..]
        );
        let plain = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert_eq!(strip_top_level_session(plain.clone()), plain);
    }

    #[test]
    fn a_client_response_loses_its_session_meta() {
        let out = strip(
            r#"{"jsonrpc":"2.0","id":"s-1","result":{"role":"assistant","content":{"type":"text","text":"x"},"_meta":{"io.modelcontextprotocol/session":{"sessionId":"s"}}}}"#,
        );
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":"s-1","result":{"role":"assistant","content":{"type":"text","text":"x"}}}"#
        );
    }
}
