//! What tools say about themselves: `annotations.idempotentHint` (2025-11-25, "Tools":
//! "If true, calling the tool repeatedly with the same arguments will have no additional
//! effect on its environment"), learned from `tools/list` results as they pass.
//!
//! The proxy uses it to decide whether a `tools/call` may be sent again after an upstream
//! lost its session. Only what the upstream said is believed; a tool never listed, or
//! listed without the hint, is not idempotent. Bounded: at most [`MAX_TOOLS`] names are
//! kept per upstream (the first ones seen).

use std::collections::HashMap;

use parking_lot::RwLock;
use serde::Deserialize;
use serde_json::value::RawValue;

/// Tool names remembered per upstream.
pub const MAX_TOOLS: usize = 4096;
/// Longest tool name remembered.
const MAX_NAME: usize = 256;

/// The idempotency each tool of one upstream declared.
#[derive(Debug, Default)]
pub struct ToolHints {
    idempotent: RwLock<HashMap<Box<str>, bool>>,
}

#[derive(Deserialize)]
struct ListMessage<'a> {
    #[serde(borrow)]
    result: Option<ListResult<'a>>,
}

#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow, default)]
    tools: Vec<Tool<'a>>,
}

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(default)]
    annotations: Option<Annotations>,
}

#[derive(Deserialize)]
struct Annotations {
    #[serde(rename = "idempotentHint", default)]
    idempotent_hint: Option<bool>,
}

impl ToolHints {
    /// Learns from a `tools/list` response message (raw JSON-RPC); anything else is
    /// ignored.
    pub fn learn(&self, message: &[u8]) {
        let Ok(ListMessage { result: Some(list) }) =
            serde_json::from_slice::<ListMessage<'_>>(message)
        else {
            return;
        };
        let mut map = self.idempotent.write();
        for tool in list.tools {
            if tool.name.len() > MAX_NAME {
                continue;
            }
            let hint = tool
                .annotations
                .and_then(|a| a.idempotent_hint)
                .unwrap_or(false);
            if let Some(known) = map.get_mut(&*tool.name) {
                *known = hint;
            } else if map.len() < MAX_TOOLS {
                map.insert(tool.name.as_ref().into(), hint);
            }
        }
    }

    /// Whether the tool named in `tools/call` params declared itself idempotent.
    pub fn idempotent_call(&self, params: Option<&RawValue>) -> bool {
        #[derive(Deserialize)]
        struct Call<'a> {
            #[serde(borrow)]
            name: std::borrow::Cow<'a, str>,
        }
        params
            .and_then(|raw| serde_json::from_str::<Call<'_>>(raw.get()).ok())
            .is_some_and(|call| self.idempotent.read().get(&*call.name) == Some(&true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tools_that_say_so_are_idempotent() {
        let hints = ToolHints::default();
        hints.learn(
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"name":"get","inputSchema":{},"annotations":{"idempotentHint":true}},
            {"name":"put","inputSchema":{},"annotations":{"idempotentHint":false}},
            {"name":"plain","inputSchema":{}}]}}"#,
        );
        let call = |name: &str| {
            RawValue::from_string(format!(r#"{{"name":"{name}","arguments":{{}}}}"#)).unwrap()
        };
        assert!(hints.idempotent_call(Some(&call("get"))));
        assert!(!hints.idempotent_call(Some(&call("put"))));
        assert!(!hints.idempotent_call(Some(&call("plain"))));
        assert!(!hints.idempotent_call(Some(&call("never-listed"))));
        assert!(!hints.idempotent_call(None));
        // A later listing that withdraws the hint is believed.
        hints.learn(
            br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"get","inputSchema":{}}]}}"#,
        );
        assert!(!hints.idempotent_call(Some(&call("get"))));
        // Errors and other results teach nothing.
        hints.learn(br#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#);
    }
}
