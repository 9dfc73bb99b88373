//! Building JSON-RPC error responses.

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

/// The `error` member of a JSON-RPC error response.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject {
    pub code: i32,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    /// `null` when the request could not be read far enough to know its id.
    id: Option<&'a RawValue>,
    error: &'a ErrorObject,
}

/// Serializes `{"jsonrpc":"2.0","id":…,"error":{…}}`, echoing the request's raw id.
pub fn error_response(id: Option<&RawValue>, error: &ErrorObject) -> Bytes {
    let response = Response {
        jsonrpc: "2.0",
        id,
        error,
    };
    // Serializing plain structs, strings and `Value`s into a Vec cannot fail.
    serde_json::to_vec(&response)
        .map(Bytes::from)
        .unwrap_or_else(|_| Bytes::from_static(FALLBACK))
}

const FALLBACK: &[u8] =
    br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error"}}"#;
