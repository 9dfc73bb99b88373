//! What tools say about themselves: `annotations.idempotentHint` (2025-11-25, "Tools":
//! "If true, calling the tool repeatedly with the same arguments will have no additional
//! effect on its environment"), learned from `tools/list` results as they pass.
//!
//! The proxy uses it to decide whether a `tools/call` may be sent again after an upstream
//! lost its session. Only what the upstream said is believed; a tool never listed, or
//! listed without the hint, is not idempotent. Bounded: at most [`MAX_TOOLS`] names are
//! kept per upstream (the first ones seen).
//!
//! Also learned: which arguments a tool marks with `x-mcp-header` (2026-07-28,
//! "Custom Headers from Tool Parameters"), for the `Mcp-Param-*` headers of the calls the
//! proxy frames for a modern upstream. How a declaration is read and its header written
//! is `mcp::headers`; here only which tools declared what, for at most
//! [`MAX_HEADER_TOOLS`] tools (each at most `headers::MAX_PARAM_HEADERS`), so an upstream
//! cannot grow the table without bound. A tool listed again without declarations is
//! forgotten.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderName;
use http::header::HeaderValue;
use parking_lot::RwLock;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::headers::{self, ParamHeader};

/// Tool names remembered per upstream.
pub const MAX_TOOLS: usize = 4096;
/// Tools whose `x-mcp-header` declarations are remembered per upstream.
pub const MAX_HEADER_TOOLS: usize = 256;
/// Longest tool name remembered.
const MAX_NAME: usize = 256;

/// What each tool of one upstream declared: its idempotency, its header arguments and
/// whether it may run as a task.
#[derive(Debug, Default)]
pub struct ToolHints {
    idempotent: RwLock<HashMap<Box<str>, bool>>,
    /// Only tools that declare some.
    headers: RwLock<HashMap<Box<str>, Arc<[ParamHeader]>>>,
    /// Only tools that declare `execution.taskSupport` other than `forbidden`.
    tasks: RwLock<HashMap<Box<str>, TaskSupport>>,
    /// When a listing was last learned from (milliseconds of the Unix clock; 0: never).
    learned_at: std::sync::atomic::AtomicU64,
}

/// A tool's `execution.taskSupport` (2025-11-25, "Tools"): whether a call may, or must,
/// run as a task. `forbidden` (the default) is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    Optional,
    Required,
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
    #[serde(rename = "inputSchema", borrow, default)]
    input_schema: Option<&'a RawValue>,
    #[serde(default)]
    execution: Option<Execution<'a>>,
}

#[derive(Deserialize)]
struct Execution<'a> {
    #[serde(rename = "taskSupport", borrow, default)]
    task_support: Option<std::borrow::Cow<'a, str>>,
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
        self.learn_list(list);
    }

    /// Learns from a `tools/list` result (raw), as [`ToolHints::learn`] from its message.
    pub fn learn_result(&self, result: &RawValue) {
        if let Ok(list) = serde_json::from_str::<ListResult<'_>>(result.get()) {
            self.learn_list(list);
        }
    }

    fn learn_list(&self, list: ListResult<'_>) {
        let tools: Vec<Tool<'_>> = list
            .tools
            .into_iter()
            .filter(|tool| tool.name.len() <= MAX_NAME)
            .collect();
        self.learn_headers(&tools);
        self.learn_tasks(&tools);
        self.learned_at.store(
            crate::session::now_millis(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut map = self.idempotent.write();
        for tool in tools {
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

    /// Remembers the `x-mcp-header` declarations of listed tools (their schemas read
    /// before the table is locked).
    fn learn_headers(&self, tools: &[Tool<'_>]) {
        let declared: Vec<(&str, Vec<ParamHeader>)> = tools
            .iter()
            .map(|tool| {
                // Most schemas declare nothing: only those that name the extension are
                // read whole.
                let declarations = tool
                    .input_schema
                    .filter(|raw| raw.get().contains("x-mcp-header"))
                    .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
                    .map(|schema| headers::param_declarations(&schema))
                    .unwrap_or_default();
                (&*tool.name, declarations)
            })
            .collect();
        let mut map = self.headers.write();
        for (name, declarations) in declared {
            if declarations.is_empty() {
                map.remove(name);
            } else if let Some(known) = map.get_mut(name) {
                *known = declarations.into();
            } else if map.len() < MAX_HEADER_TOOLS {
                map.insert(name.into(), declarations.into());
            }
        }
    }

    /// Remembers which listed tools may run as tasks.
    fn learn_tasks(&self, tools: &[Tool<'_>]) {
        let mut map = self.tasks.write();
        for tool in tools {
            let support = match tool
                .execution
                .as_ref()
                .and_then(|e| e.task_support.as_deref())
            {
                Some("optional") => Some(TaskSupport::Optional),
                Some("required") => Some(TaskSupport::Required),
                _ => None,
            };
            match support {
                None => {
                    map.remove(&*tool.name);
                }
                Some(support) => {
                    if let Some(known) = map.get_mut(&*tool.name) {
                        *known = support;
                    } else if map.len() < MAX_TOOLS {
                        map.insert(tool.name.as_ref().into(), support);
                    }
                }
            }
        }
    }

    /// When a `tools/list` was last learned from (Unix milliseconds), if ever.
    pub fn learned_at(&self) -> Option<u64> {
        match self.learned_at.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            at => Some(at),
        }
    }

    /// Whether the tool `name` was listed (among the first [`MAX_TOOLS`]).
    pub fn knows(&self, name: &str) -> bool {
        self.idempotent.read().contains_key(name)
    }

    /// Whether the tool `name` declared it may (or must) run as a task.
    pub fn task_support(&self, name: &str) -> Option<TaskSupport> {
        self.tasks.read().get(name).copied()
    }

    /// The `x-mcp-header` declarations of the tool `name`, if it has any.
    pub fn declared_headers(&self, name: &str) -> Option<Arc<[ParamHeader]>> {
        self.headers.read().get(name).cloned()
    }

    /// The `Mcp-Param-*` headers of a `tools/call` (its params), from what its tool
    /// declared; none for a tool never listed or declaring none.
    pub fn param_headers(&self, params: Option<&RawValue>) -> Vec<(HeaderName, HeaderValue)> {
        #[derive(Deserialize)]
        struct Call<'a> {
            #[serde(borrow)]
            name: std::borrow::Cow<'a, str>,
            #[serde(borrow, default)]
            arguments: Option<&'a RawValue>,
        }
        let Some(call) = params.and_then(|raw| serde_json::from_str::<Call<'_>>(raw.get()).ok())
        else {
            return Vec::new();
        };
        let Some(declared) = self.headers.read().get(&*call.name).cloned() else {
            return Vec::new();
        };
        let arguments = call
            .arguments
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .unwrap_or(Value::Null);
        headers::param_headers(&declared, &arguments)
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

    fn listing(tools: &str) -> Vec<u8> {
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{tools}]}}}}"#).into_bytes()
    }

    fn forecast(name: &str, header: &str) -> String {
        format!(
            r#"{{"name":"{name}","inputSchema":{{"type":"object","properties":{{
            "region":{{"type":"string","x-mcp-header":"{header}"}},"days":{{"type":"integer"}}}}}}}}"#
        )
    }

    fn call(name: &str, arguments: &str) -> Box<RawValue> {
        RawValue::from_string(format!(r#"{{"name":"{name}","arguments":{arguments}}}"#)).unwrap()
    }

    fn sent(hints: &ToolHints, name: &str, arguments: &str) -> Vec<(String, String)> {
        hints
            .param_headers(Some(&call(name, arguments)))
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn header_arguments_are_learned_relearned_and_forgotten() {
        let hints = ToolHints::default();
        let args = r#"{"region":"north","days":3}"#;
        assert!(sent(&hints, "forecast", args).is_empty(), "never listed");
        hints.learn(&listing(&forecast("forecast", "Region")));
        let region = vec![("mcp-param-region".to_owned(), "north".to_owned())];
        assert_eq!(sent(&hints, "forecast", args), region);
        assert!(sent(&hints, "forecast", r#"{"days":3}"#).is_empty());
        assert!(sent(&hints, "echo", args).is_empty());
        // The tool changed its header: the new one is sent.
        hints.learn(&listing(&forecast("forecast", "Area")));
        let area = vec![("mcp-param-area".to_owned(), "north".to_owned())];
        assert_eq!(sent(&hints, "forecast", args), area);
        // Listed again without one: nothing is sent.
        hints.learn(&listing(
            r#"{"name":"forecast","inputSchema":{"type":"object"}}"#,
        ));
        assert!(sent(&hints, "forecast", args).is_empty());
        assert!(hints.headers.read().is_empty());
    }

    #[test]
    fn an_upstream_cannot_grow_the_header_table_without_bound() {
        let hints = ToolHints::default();
        let tools: Vec<String> = (0..MAX_HEADER_TOOLS + 10)
            .map(|i| forecast(&format!("t{i}"), "Region"))
            .collect();
        hints.learn(&listing(&tools.join(",")));
        assert_eq!(hints.headers.read().len(), MAX_HEADER_TOOLS);
        let args = r#"{"region":"north"}"#;
        assert_eq!(sent(&hints, "t0", args).len(), 1);
        assert!(sent(&hints, &format!("t{MAX_HEADER_TOOLS}"), args).is_empty());
        // A known tool is still updated when the table is full.
        hints.learn(&listing(&forecast("t0", "Area")));
        assert_eq!(sent(&hints, "t0", args)[0].0, "mcp-param-area");
        // Names past the longest remembered are not kept.
        let long = "x".repeat(MAX_NAME + 1);
        let fresh = ToolHints::default();
        fresh.learn(&listing(&forecast(&long, "Region")));
        assert!(fresh.headers.read().is_empty());
    }
}
