//! What the demo server received, for tests to inspect.

use parking_lot::Mutex;
use serde_json::Value;

/// One HTTP request as the demo server saw it.
#[derive(Debug, Clone)]
pub struct Received {
    /// `POST`, `GET` or `DELETE`.
    pub http_method: String,
    pub session_id: Option<String>,
    pub protocol_version: Option<String>,
    pub host: Option<String>,
    /// The `Authorization` header it came with, if any.
    pub authorization: Option<String>,
    /// The W3C `traceparent` header it came with, if any.
    pub traceparent: Option<String>,
    /// The `X-Api-Key` header it came with, if any.
    pub api_key: Option<String>,
    /// The JSON body of a POST (when it was JSON).
    pub body: Option<Value>,
    /// The HTTP status the demo server answered.
    pub status: u16,
}

impl Received {
    /// The JSON-RPC method of the body, if it had one.
    pub fn method(&self) -> Option<&str> {
        self.body.as_ref()?.get("method")?.as_str()
    }
}

#[derive(Debug, Default)]
pub struct Journal {
    enabled: bool,
    entries: Mutex<Vec<Received>>,
}

impl Journal {
    pub fn new(enabled: bool) -> Self {
        Journal {
            enabled,
            entries: Mutex::new(Vec::new()),
        }
    }

    pub fn record(&self, entry: Received) {
        if self.enabled {
            self.entries.lock().push(entry);
        }
    }

    pub fn snapshot(&self) -> Vec<Received> {
        self.entries.lock().clone()
    }

    pub fn clear(&self) {
        self.entries.lock().clear();
    }
}
