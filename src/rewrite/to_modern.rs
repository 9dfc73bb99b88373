//! Client → a modern (2026-07-28) upstream: a request of a client that keeps a session
//! with the proxy (a data-layer session, or an old client whose `initialize` the proxy
//! answered) as the stateless protocol wants every request — its `params._meta` carrying
//! the protocol version, the client's capabilities (`{}` for none) and, when known, its
//! identity and log level ("Basic", per-request `_meta`). The session keeps them; the
//! request gets them. Keys the client sent itself (a 2026-07-28 client in a session)
//! stay as they are. Notifications and responses need none and pass unchanged.

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::jsonrpc::{Envelope, Kind, splice, write_json_str};
use crate::mcp::logging::LogLevel;
use crate::mcp::meta::{self, Payload};
use crate::mcp::version;

/// What a session knows of its client, for the requests made in it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Frame<'a> {
    pub client_info: Option<&'a RawValue>,
    pub capabilities: Option<&'a RawValue>,
    /// The level `logging/setLevel` chose (an old client's); `None`: no log
    /// notifications, as 2026-07-28 reads a request without one.
    pub log_level: Option<LogLevel>,
}

/// `message` framed for a modern upstream (see the module documentation); unchanged when
/// it is not a request, or carries every key already.
pub fn framed(message: Bytes, frame: Frame<'_>) -> Bytes {
    let Ok(envelope) = Envelope::parse(&message) else {
        return message;
    };
    if envelope.kind != Kind::Request {
        return message;
    }
    let level = frame.log_level.map(|level| {
        let mut quoted = Vec::with_capacity(12);
        write_json_str(&mut quoted, level.name());
        quoted
    });
    let mut version = Vec::with_capacity(14);
    write_json_str(&mut version, version::LATEST_MODERN);
    let wanted: [(&str, Option<&[u8]>); 4] = [
        (meta::PROTOCOL_VERSION, Some(&version)),
        (
            meta::CLIENT_CAPABILITIES,
            Some(
                frame
                    .capabilities
                    .map_or(&b"{}"[..], |c| c.get().as_bytes()),
            ),
        ),
        (
            meta::CLIENT_INFO,
            frame.client_info.map(|i| i.get().as_bytes()),
        ),
        (meta::LOG_LEVEL, level.as_deref()),
    ];
    match envelope.params {
        Some(raw) => {
            let Ok(Some(params)) = Payload::open(raw) else {
                return message;
            };
            let add: Vec<(&str, &[u8])> = wanted
                .iter()
                .filter_map(|(key, value)| Some((*key, (*value)?)))
                .filter(|(key, _)| params.meta(key).is_none())
                .collect();
            if add.is_empty() {
                return message;
            }
            let params = params.edited(&[], &[], &[], &add);
            splice(&message, raw, &params).map_or(message, Bytes::from)
        }
        None => {
            // No params at all: `{"_meta": …}` becomes them.
            let add: Vec<(&str, &[u8])> = wanted
                .iter()
                .filter_map(|(key, value)| Some((*key, (*value)?)))
                .collect();
            meta::with_params_of_meta(&message, &add).map_or(message, Bytes::from)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn framed_json(message: Value, frame: Frame<'_>) -> Value {
        let out = framed(Bytes::from(message.to_string()), frame);
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn a_request_gets_the_sessions_identity_and_keeps_everything_else() {
        let info = raw(r#"{"name":"old","version":"1"}"#);
        let caps = raw(r#"{"elicitation":{}}"#);
        let frame = Frame {
            client_info: Some(&info),
            capabilities: Some(&caps),
            log_level: Some(LogLevel::Warning),
        };
        let out = framed_json(
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"a": 1}, "_meta": {"progressToken": "p"}}}),
            frame,
        );
        let meta = &out["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({"elicitation": {}})
        );
        assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "old");
        assert_eq!(meta["io.modelcontextprotocol/logLevel"], "warning");
        assert_eq!(meta["progressToken"], "p");
        assert_eq!(out["params"]["arguments"], json!({"a": 1}));
        assert_eq!(out["id"], 7);
    }

    #[test]
    fn without_params_the_frame_becomes_them_and_no_identity_means_none_claimed() {
        let out = framed_json(
            json!({"jsonrpc": "2.0", "id": "x", "method": "tools/list"}),
            Frame::default(),
        );
        let meta = &out["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({})
        );
        assert!(meta.get("io.modelcontextprotocol/clientInfo").is_none());
        assert!(meta.get("io.modelcontextprotocol/logLevel").is_none());
    }

    #[test]
    fn a_modern_clients_own_keys_stay_and_notifications_pass() {
        let caps = raw(r#"{"sampling":{}}"#);
        let frame = Frame {
            capabilities: Some(&caps),
            ..Frame::default()
        };
        let own = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"roots": {}}}}});
        let out = framed_json(own.clone(), frame);
        assert_eq!(out, own);
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
        assert_eq!(framed_json(notification.clone(), frame), notification);
    }
}
