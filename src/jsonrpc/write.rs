//! Writing JSON-RPC messages: the one place that spells `{"jsonrpc":"2.0",…}`.
//!
//! Ids, params and results are raw JSON (as read from a message, or written by the
//! caller); they are copied in byte for byte, so an id always goes back exactly as the
//! client wrote it.

use bytes::Bytes;

use super::error::ErrorObject;
use super::object::write_json_str;

const HEAD: &[u8] = br#"{"jsonrpc":"2.0""#;

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`.
pub fn result(id: &[u8], result: &[u8]) -> Bytes {
    result_with(id, &[], result)
}

/// A result response with `extra` top-level members (raw JSON values) before `result`
/// (SEP-1364 echoes the session as a top-level `sessionId`).
pub fn result_with(id: &[u8], extra: &[(&str, &[u8])], result: &[u8]) -> Bytes {
    let extra_len: usize = extra.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(HEAD.len() + id.len() + result.len() + extra_len + 24);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(br#","id":"#);
    out.extend_from_slice(id);
    members(&mut out, extra);
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result);
    out.push(b'}');
    Bytes::from(out)
}

/// `{"jsonrpc":"2.0","id":<id or null>,"error":{…}}`. `None` when the message could not
/// be read far enough to know its id.
pub fn error(id: Option<&[u8]>, error: &ErrorObject) -> Bytes {
    // Serializing a struct of integers, strings and `Value`s cannot fail.
    let object = serde_json::to_vec(error).unwrap_or_else(|_| FALLBACK_ERROR.to_vec());
    let id = id.unwrap_or(b"null");
    let mut out = Vec::with_capacity(HEAD.len() + id.len() + object.len() + 24);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(br#","id":"#);
    out.extend_from_slice(id);
    out.extend_from_slice(br#","error":"#);
    out.extend_from_slice(&object);
    out.push(b'}');
    Bytes::from(out)
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}`.
pub fn request(id: &[u8], method: &str, params: Option<&[u8]>) -> Bytes {
    let mut out = Vec::with_capacity(64 + id.len() + method.len() + params.map_or(0, <[u8]>::len));
    out.extend_from_slice(HEAD);
    out.extend_from_slice(br#","id":"#);
    out.extend_from_slice(id);
    method_and_params(&mut out, method, params);
    Bytes::from(out)
}

/// `{"jsonrpc":"2.0","method":<method>,"params":<params>}`.
pub fn notification(method: &str, params: Option<&[u8]>) -> Bytes {
    let mut out = Vec::with_capacity(48 + method.len() + params.map_or(0, <[u8]>::len));
    out.extend_from_slice(HEAD);
    method_and_params(&mut out, method, params);
    Bytes::from(out)
}

fn method_and_params(out: &mut Vec<u8>, method: &str, params: Option<&[u8]>) {
    out.extend_from_slice(br#","method":"#);
    write_json_str(out, method);
    if let Some(params) = params {
        out.extend_from_slice(br#","params":"#);
        out.extend_from_slice(params);
    }
    out.push(b'}');
}

fn members(out: &mut Vec<u8>, members: &[(&str, &[u8])]) {
    for (key, value) in members {
        out.push(b',');
        write_json_str(out, key);
        out.push(b':');
        out.extend_from_slice(value);
    }
}

const FALLBACK_ERROR: &[u8] = br#"{"code":-32603,"message":"Internal error"}"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{Envelope, Kind};

    fn text(bytes: &Bytes) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn every_message_shape_is_valid_json_rpc() {
        let r = result(br#""a\u0041""#, b"{}");
        assert_eq!(text(&r), r#"{"jsonrpc":"2.0","id":"a\u0041","result":{}}"#);
        assert_eq!(Envelope::parse(&r).unwrap().kind, Kind::Response);

        let r = result_with(b"1", &[("sessionId", br#""s""#)], b"{}");
        assert_eq!(
            text(&r),
            r#"{"jsonrpc":"2.0","id":1,"sessionId":"s","result":{}}"#
        );

        let e = error(
            None,
            &ErrorObject {
                code: -32600,
                message: "bad \"thing\"".into(),
                data: None,
            },
        );
        assert_eq!(
            text(&e),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad \"thing\""}}"#
        );
        assert_eq!(Envelope::parse(&e).unwrap().kind, Kind::Response);

        let q = request(b"7", "tools/call", Some(br#"{"name":"x"}"#));
        assert_eq!(
            text(&q),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#
        );
        assert_eq!(Envelope::parse(&q).unwrap().kind, Kind::Request);

        let n = notification("notifications/initialized", None);
        assert_eq!(
            text(&n),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
        );
        assert_eq!(Envelope::parse(&n).unwrap().kind, Kind::Notification);
    }
}
