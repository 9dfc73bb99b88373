//! The `error` member of a JSON-RPC error response.

use serde::Serialize;

/// `{code, message, data?}`; written into a response by [`super::write::error`].
#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject {
    pub code: i32,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}
