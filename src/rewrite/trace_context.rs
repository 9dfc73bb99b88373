//! The trace context into a request's `_meta` (SEP-414: `traceparent`, `tracestate`,
//! `baggage`), for an upstream that reads it there — a stdio child, which has no
//! headers, and a 2026-07-28 server. Keys the request already has are replaced: the
//! context given descends from them.

use bytes::Bytes;

use crate::jsonrpc::{Envelope, Kind, splice, write_json_str};
use crate::mcp::meta::{self, Payload};

/// `message` with `pairs` (key, value) in its `_meta`; a request only (anything else, or
/// a request whose `params` is not an object, is returned as it came).
pub fn into_meta(message: Bytes, pairs: &[(String, String)]) -> Bytes {
    if pairs.is_empty() {
        return message;
    }
    let Ok(envelope) = Envelope::parse(&message) else {
        return message;
    };
    if envelope.kind != Kind::Request {
        return message;
    }
    let values: Vec<(&str, Vec<u8>)> = pairs
        .iter()
        .map(|(key, value)| {
            let mut quoted = Vec::with_capacity(value.len() + 2);
            write_json_str(&mut quoted, value);
            (key.as_str(), quoted)
        })
        .collect();
    let add: Vec<(&str, &[u8])> = values.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    match envelope.params {
        Some(raw) => {
            let Ok(Some(params)) = Payload::open(raw) else {
                return message;
            };
            let params = params.edited(&[], &[], &[], &add);
            splice(&message, raw, &params).map_or(message, Bytes::from)
        }
        None => meta::with_params_of_meta(&message, &add).map_or(message, Bytes::from),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pairs() -> Vec<(String, String)> {
        vec![(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        )]
    }

    #[test]
    fn a_requests_meta_gets_the_context_and_keeps_the_rest() {
        let message = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":1,"traceparent":"00-old"}}}"#,
        );
        let out: Value = serde_json::from_slice(&into_meta(message, &pairs())).unwrap();
        assert_eq!(out["params"]["name"], "t");
        assert_eq!(out["params"]["_meta"]["progressToken"], 1);
        assert_eq!(out["params"]["_meta"]["traceparent"], json!(pairs()[0].1));
        let bare = Bytes::from_static(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        let out: Value = serde_json::from_slice(&into_meta(bare, &pairs())).unwrap();
        assert_eq!(out["params"]["_meta"]["traceparent"], json!(pairs()[0].1));
        assert_eq!(out["method"], "tools/list");
    }

    #[test]
    fn anything_but_a_request_passes_as_it_came() {
        for message in [
            &br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
            b"not json",
        ] {
            let message = Bytes::copy_from_slice(message);
            assert_eq!(into_meta(message.clone(), &pairs()), message);
        }
    }
}
