//! Session handles for stateless clients (SEP-2567's explicit-handle style), as pure
//! functions of bytes: `tools/list` gains the open and close tools and every tool an
//! optional handle argument; a `tools/call` loses that argument before the upstream sees
//! it; the proxy's own answers to the handle tools are tool results a model can read.

use serde_json::value::RawValue;

use super::stateless::{ROUND_TRIP_MEMBERS, STATELESS_META};
use crate::jsonrpc::{RawObject, raw_str, splice, string_object, write_json_str};
use crate::mcp::meta::Payload;

/// The names a stateless client sees: the two tools and the argument (configurable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleTools {
    /// The tool that opens a session and returns its handle (`session_open`).
    pub open: String,
    /// The tool that closes one (`session_close`).
    pub close: String,
    /// The optional argument of every tool naming the session to run in (`session`).
    pub argument: String,
}

impl Default for HandleTools {
    fn default() -> Self {
        HandleTools {
            open: "session_open".into(),
            close: "session_close".into(),
            argument: "session".into(),
        }
    }
}

/// A `tools/list` result as a stateless client of a handles-mode proxy sees it.
#[derive(Debug)]
pub struct ListedWithHandles {
    pub result: Vec<u8>,
    /// Upstream tools that clash with the handle tools: a tool named like one of them
    /// (left out: the proxy answers that name), or one that already has an argument
    /// named like the handle argument (left as it is: the argument is the proxy's).
    pub clashes: Vec<String>,
}

/// Adds the handle argument to every tool's `inputSchema` and, on the first page (a
/// request without `cursor`), the open and close tools at the end. `idle` says in words
/// how long an unused session lives. `None` when the result has no `tools` array.
pub fn tools_list(
    result: &RawValue,
    names: &HandleTools,
    first_page: bool,
    idle: &str,
) -> Option<ListedWithHandles> {
    let mut members = RawObject::parse(result)?;
    let tools: Vec<&RawValue> = serde_json::from_str(members.remove("tools")?.get()).ok()?;
    let mut clashes = Vec::new();
    let mut list = Vec::with_capacity(result.get().len() + 1024);
    list.push(b'[');
    let mut first = true;
    let mut push = |list: &mut Vec<u8>, tool: &[u8]| {
        if !first {
            list.push(b',');
        }
        first = false;
        list.extend_from_slice(tool);
    };
    for tool in tools {
        let object = RawObject::parse(tool);
        let name = object
            .as_ref()
            .and_then(|t| t.get("name"))
            .and_then(raw_str)
            .map(|n| n.into_owned())
            .unwrap_or_default();
        if name == names.open || name == names.close {
            clashes.push(name);
            continue;
        }
        match object.and_then(|t| with_argument(&t, names, idle)) {
            Some(Ok(rewritten)) => push(&mut list, &rewritten),
            Some(Err(())) => {
                clashes.push(name);
                push(&mut list, tool.get().as_bytes());
            }
            None => push(&mut list, tool.get().as_bytes()),
        }
    }
    if first_page {
        push(&mut list, &open_tool(names, idle));
        push(&mut list, &close_tool(names));
    }
    list.push(b']');
    let mut out = Vec::with_capacity(list.len() + 64);
    members.write(&mut out, &[("tools", &list)]);
    Some(ListedWithHandles {
        result: out,
        clashes,
    })
}

/// The tool with the handle argument in its `inputSchema.properties` (not required).
/// `None` when the tool has no object `inputSchema` to extend; `Err` when it already has
/// an argument of that name.
fn with_argument(
    tool: &RawObject<'_>,
    names: &HandleTools,
    idle: &str,
) -> Option<Result<Vec<u8>, ()>> {
    let mut tool = tool.clone();
    let mut schema = RawObject::parse(tool.remove("inputSchema")?)?;
    let properties = match schema.remove("properties") {
        Some(raw) => RawObject::parse(raw)?,
        None => RawObject::default(),
    };
    if properties.get(&names.argument).is_some() {
        return Some(Err(()));
    }
    let mut property = Vec::with_capacity(512);
    property.extend_from_slice(br#"{"type":"string","description":"#);
    write_json_str(
        &mut property,
        &format!(
            "Optional. A session handle returned by {open}: the call runs in that session, so \
             it sees and keeps the state that earlier calls in the same session left on the \
             server. Leave it out to run the call on its own. A session ends after {idle} \
             without use, or when {close} closes it.",
            open = names.open,
            close = names.close,
        ),
    );
    property.push(b'}');
    let mut properties_bytes = Vec::with_capacity(256 + property.len());
    properties.write(&mut properties_bytes, &[(&names.argument, &property)]);
    let mut schema_bytes = Vec::with_capacity(properties_bytes.len() + 128);
    schema.write(&mut schema_bytes, &[("properties", &properties_bytes)]);
    let mut out = Vec::with_capacity(schema_bytes.len() + 256);
    tool.write(&mut out, &[("inputSchema", &schema_bytes)]);
    Some(Ok(out))
}

/// The open tool's definition.
fn open_tool(names: &HandleTools, idle: &str) -> Vec<u8> {
    let description = format!(
        "Opens a session on the server and returns its handle. Pass the handle as the \
         \"{argument}\" argument of other tools to run them in that session: the server keeps \
         its state between those calls (for example an open page, a transaction or a working \
         directory), and no other session sees it. Calls without the argument run on their \
         own. A session ends after {idle} without use, or when you call {close}.",
        argument = names.argument,
        close = names.close,
    );
    let mut out = tool_head(&names.open, "Open a session", &description);
    out.extend_from_slice(
        br#","inputSchema":{"type":"object","properties":{}},"outputSchema":{"type":"object","properties":{"session":{"type":"string","description":"The session handle."},"expiresAt":{"type":"string","description":"When the session ends if it is not used again (RFC 3339); every use moves it."}},"required":["session","expiresAt"]},"annotations":{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false}}"#,
    );
    out
}

/// The start of a tool's definition, `{"name":…,"title":…,"description":…`; the rest
/// is the caller's to write.
fn tool_head(name: &str, title: &str, description: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(br#"{"name":"#);
    write_json_str(&mut out, name);
    out.extend_from_slice(br#","title":"#);
    write_json_str(&mut out, title);
    out.extend_from_slice(br#","description":"#);
    write_json_str(&mut out, description);
    out
}

/// The close tool's definition.
fn close_tool(names: &HandleTools) -> Vec<u8> {
    let description = format!(
        "Closes a session opened with {open}. The server forgets the session's state, and \
         later calls passing its handle fail.",
        open = names.open,
    );
    let mut out = tool_head(&names.close, "Close a session", &description);
    out.extend_from_slice(br#","inputSchema":{"type":"object","properties":{"#);
    write_json_str(&mut out, &names.argument);
    out.extend_from_slice(br#":{"type":"string","description":"#);
    write_json_str(&mut out, &format!("The handle {} returned.", names.open));
    out.extend_from_slice(br#"}},"required":["#);
    write_json_str(&mut out, &names.argument);
    out.extend_from_slice(
        br#"]},"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":true,"openWorldHint":false}}"#,
    );
    out
}

/// What a `tools/call` said in the handle argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleArgument {
    /// Not given (or `null`).
    Absent,
    /// A handle to run the call in.
    Handle(String),
    /// Given, but not a non-empty string.
    Invalid,
}

/// The `tools/call` request as the upstream takes it — without the stateless `_meta`
/// keys, the round-trip members and `arguments[argument]` — and what that argument was.
/// The body is `None` when nothing had to come off.
pub fn take_argument(
    body: &[u8],
    params_raw: &RawValue,
    params: &Payload<'_>,
    argument: &str,
) -> (Option<Vec<u8>>, HandleArgument) {
    let arguments = params.member("arguments").and_then(RawObject::parse);
    let Some(mut arguments) = arguments else {
        return (
            super::stateless::to_upstream(body, params_raw, params),
            HandleArgument::Absent,
        );
    };
    let Some(value) = arguments.remove(argument) else {
        return (
            super::stateless::to_upstream(body, params_raw, params),
            HandleArgument::Absent,
        );
    };
    let handle = match raw_str(value) {
        Some(handle) if !handle.is_empty() => HandleArgument::Handle(handle.into_owned()),
        None if value.get() == "null" => HandleArgument::Absent,
        _ => HandleArgument::Invalid,
    };
    let mut rest = Vec::with_capacity(params_raw.get().len());
    arguments.write(&mut rest, &[]);
    let mut drop_members: Vec<&str> = ROUND_TRIP_MEMBERS.to_vec();
    drop_members.push("arguments");
    let stripped = params.edited(&drop_members, &STATELESS_META, &[("arguments", &rest)], &[]);
    (splice(body, params_raw, &stripped), handle)
}

/// The handle argument of a call to the close tool, if it is a string.
pub fn close_argument(params: &Payload<'_>, argument: &str) -> Option<String> {
    params
        .member("arguments")
        .and_then(RawObject::parse)
        .and_then(|args| args.get(argument).and_then(raw_str).map(|s| s.into_owned()))
}

/// A tool result with one text block; `structured` (raw JSON) as `structuredContent`.
pub fn tool_result(text: &str, structured: Option<&[u8]>, is_error: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 128);
    out.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    write_json_str(&mut out, text);
    out.extend_from_slice(b"}]");
    if let Some(structured) = structured {
        out.extend_from_slice(br#","structuredContent":"#);
        out.extend_from_slice(structured);
    }
    out.extend_from_slice(if is_error {
        br#","isError":true}"#
    } else {
        br#","isError":false}"#
    });
    out
}

/// `{"session":…,"expiresAt":…}`, the open tool's structured result.
pub fn opened(handle: &str, expires_at: &str) -> Vec<u8> {
    string_object(&[("session", handle), ("expiresAt", expires_at)])
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::jsonrpc::Envelope;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn list(result: &str, first_page: bool) -> (Value, Vec<String>) {
        let listed = tools_list(&raw(result), &HandleTools::default(), first_page, "30m").unwrap();
        (
            serde_json::from_slice(&listed.result).unwrap(),
            listed.clashes,
        )
    }

    #[test]
    fn every_tool_gains_an_optional_session_argument_and_the_first_page_the_two_tools() {
        let (v, clashes) = list(
            r#"{"tools":[{"name":"echo","inputSchema":{"type":"object","properties":{"msg":{"type":"string"}},"required":["msg"]}},{"name":"counter","inputSchema":{"type":"object"}}],"nextCursor":"c2"}"#,
            true,
        );
        assert!(clashes.is_empty());
        assert_eq!(v["nextCursor"], "c2");
        let tools = v["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["echo", "counter", "session_open", "session_close"]);
        let echo = &tools[0]["inputSchema"];
        assert_eq!(echo["properties"]["msg"], json!({"type": "string"}));
        assert_eq!(
            echo["required"],
            json!(["msg"]),
            "the handle is never required"
        );
        assert_eq!(echo["properties"]["session"]["type"], "string");
        let description = echo["properties"]["session"]["description"]
            .as_str()
            .unwrap();
        assert!(description.contains("session_open") && description.contains("30m"));
        assert_eq!(
            tools[1]["inputSchema"]["properties"]["session"]["type"], "string",
            "a schema without properties gets them"
        );
        let open = &tools[2];
        assert_eq!(
            open["inputSchema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            open["outputSchema"]["required"],
            json!(["session", "expiresAt"])
        );
        assert!(
            open["description"]
                .as_str()
                .unwrap()
                .contains("\"session\" argument")
        );
        let close = &tools[3];
        assert_eq!(close["inputSchema"]["required"], json!(["session"]));
        assert_eq!(close["annotations"]["destructiveHint"], true);
    }

    #[test]
    fn later_pages_get_the_argument_but_not_the_tools_again() {
        let (v, _) = list(
            r#"{"tools":[{"name":"echo","inputSchema":{"type":"object","properties":{}}}]}"#,
            false,
        );
        let tools = v["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(
            tools[0]["inputSchema"]["properties"]["session"]["type"],
            "string"
        );
    }

    #[test]
    fn clashing_upstream_tools_are_reported() {
        let (v, clashes) = list(
            r#"{"tools":[{"name":"session_open","inputSchema":{"type":"object"}},{"name":"login","inputSchema":{"type":"object","properties":{"session":{"type":"integer"}}}}]}"#,
            true,
        );
        assert_eq!(clashes, ["session_open", "login"]);
        let tools = v["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["login", "session_open", "session_close"]);
        assert_eq!(
            tools[0]["inputSchema"]["properties"]["session"]["type"], "integer",
            "the upstream's own argument is left as it was"
        );
        assert!(
            tools[1].get("outputSchema").is_some(),
            "the proxy's tool, not the upstream's"
        );
    }

    #[test]
    fn configured_names_are_used() {
        let names = HandleTools {
            open: "begin".into(),
            close: "end".into(),
            argument: "ctx".into(),
        };
        let listed = tools_list(
            &raw(r#"{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}"#),
            &names,
            true,
            "5m",
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&listed.result).unwrap();
        assert_eq!(
            v["tools"][0]["inputSchema"]["properties"]["ctx"]["type"],
            "string"
        );
        assert_eq!(v["tools"][1]["name"], "begin");
        assert_eq!(v["tools"][2]["name"], "end");
        assert_eq!(v["tools"][2]["inputSchema"]["required"], json!(["ctx"]));
        assert!(tools_list(&raw(r#"{"prompts":[]}"#), &names, true, "5m").is_none());
    }

    fn take(body: &str) -> (Value, HandleArgument) {
        let envelope = Envelope::parse(body.as_bytes()).unwrap();
        let params = envelope.params.unwrap();
        let payload = Payload::open(params).unwrap().unwrap();
        let (out, argument) = take_argument(body.as_bytes(), params, &payload, "session");
        let out = out.unwrap_or_else(|| body.as_bytes().to_vec());
        (serde_json::from_slice(&out).unwrap(), argument)
    }

    #[test]
    fn the_handle_argument_never_reaches_the_upstream() {
        let (v, argument) = take(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"counter","arguments":{"session":"mcps_abc","n":2},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"p"}}}"#,
        );
        assert_eq!(argument, HandleArgument::Handle("mcps_abc".into()));
        assert_eq!(
            v["params"],
            json!({"name": "counter", "arguments": {"n": 2}, "_meta": {"progressToken": "p"}})
        );

        let (v, argument) = take(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        );
        assert_eq!(argument, HandleArgument::Absent);
        assert_eq!(
            v["params"],
            json!({"name": "echo", "arguments": {"msg": "hi"}})
        );

        let (v, argument) = take(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"session":null}}}"#,
        );
        assert_eq!(argument, HandleArgument::Absent);
        assert_eq!(v["params"]["arguments"], json!({}));

        for bad in [r#"42"#, r#""""#, r#"{"id":"x"}"#] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"session":{bad},"msg":"x"}}}}}}"#
            );
            let (v, argument) = take(&body);
            assert_eq!(argument, HandleArgument::Invalid, "{bad}");
            assert_eq!(v["params"]["arguments"], json!({"msg": "x"}));
        }
    }

    #[test]
    fn tool_results_are_what_a_model_reads() {
        let v: Value = serde_json::from_slice(&tool_result("no such session", None, true)).unwrap();
        assert_eq!(
            v,
            json!({"content": [{"type": "text", "text": "no such session"}], "isError": true})
        );
        let structured = opened("mcps_x", "2026-01-01T00:00:00Z");
        let v: Value =
            serde_json::from_slice(&tool_result("opened", Some(&structured), false)).unwrap();
        assert_eq!(v["structuredContent"]["session"], "mcps_x");
        assert_eq!(v["isError"], false);
    }
}
