//! HTTP header names of the Streamable HTTP transport (2025-11-25 and 2026-07-28), and
//! how 2026-07-28 mirrors a request into headers (SEP-2243): its method and target
//! (`Mcp-Method`, `Mcp-Name`), and the arguments a tool's `inputSchema` marks with
//! `x-mcp-header` (`Mcp-Param-{Name}`, "Custom Headers from Tool Parameters"). What
//! each tool of an upstream declared is remembered elsewhere (`mcp::tools`); the rules
//! for reading a declaration and writing its header are here.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderName;
use http::header::HeaderValue;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::jsonrpc::{RawObject, raw_str};

/// `Mcp-Session-Id`: the transport session (2025-11-25) and, per the data-layer sessions
/// draft ("SEP-2243 HTTP Standardization"), a mirror of the data-layer sessionId.
pub static MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`: sent on every request after `initialize`.
pub static MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`: SSE resumption.
pub static LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The media types of the Streamable HTTP transport.
pub const JSON: &str = "application/json";
pub const SSE: &str = "text/event-stream";
/// What a 2025-11-25 client must send as `Accept` on POST.
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// What a client's `Accept` header allows of the two media types of the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    pub json: bool,
    pub sse: bool,
}

/// Whether `id` may be a session id: non-empty, visible ASCII only (0x21–0x7E), as both
/// the 2025-11-25 transport (`Mcp-Session-Id`) and the data-layer sessions draft
/// (`sessionId`) require.
pub fn is_visible_ascii(id: &str) -> bool {
    is_visible_ascii_bytes(id.as_bytes())
}

/// [`is_visible_ascii`] of `id`'s bytes (a header value's, say).
pub fn is_visible_ascii_bytes(id: &[u8]) -> bool {
    // Looked at whole, without stopping at the first byte that is not (which lets the
    // compiler look at many bytes at once): ids are checked on every call.
    !id.is_empty()
        && id
            .iter()
            .fold(true, |visible, b| visible & (0x21..=0x7e).contains(b))
}

/// `Mcp-Method` (SEP-2243, 2026-07-28): the JSON-RPC method of the request.
pub static MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name` (SEP-2243): the tool, prompt or resource a request targets.
pub static MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// The params member a method's `Mcp-Name` mirrors (SEP-2243; the tasks extension adds
/// its `taskId`), if it has one.
pub fn name_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// The headers a 2026-07-28 request carries besides `MCP-Protocol-Version`: `Mcp-Method`,
/// and `Mcp-Name` for the methods that name a target (a string member of `params`).
pub fn mirrored(
    method: &str,
    params: Option<&RawValue>,
) -> Vec<(&'static HeaderName, HeaderValue)> {
    let mut headers = Vec::with_capacity(2);
    headers.push((&MCP_METHOD, encode_header_value(method)));
    let name = name_member(method).and_then(|member| {
        let params = RawObject::parse(params?)?;
        raw_str(params.get(member)?).map(|v| encode_header_value(&v))
    });
    if let Some(name) = name {
        headers.push((&MCP_NAME, name));
    }
    headers
}

/// A value as a mirrored header carries it (SEP-2243): as it is when it is plain
/// header-safe ASCII, else — non-ASCII, control characters, surrounding whitespace, an
/// empty value (which some HTTP stacks drop), or a value that itself looks encoded —
/// `=?base64?{base64 of its UTF-8}?=`.
pub fn encode_header_value(value: &str) -> HeaderValue {
    let printable = value.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = printable && !padded && !looks_encoded && !value.is_empty();
    let encoded;
    let text = if plain {
        value
    } else {
        encoded = format!("=?base64?{}?=", STANDARD.encode(value));
        &encoded
    };
    // Plain visible ASCII and base64 are always valid header values.
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A mirrored header's value, decoded from `=?base64?…?=` when its sender had to encode
/// it.
pub fn decode_header_value(value: &[u8]) -> Cow<'_, str> {
    let text = String::from_utf8_lossy(value);
    let encoded = text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="));
    match encoded.and_then(|b64| STANDARD.decode(b64).ok()) {
        Some(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        None => text,
    }
}

/// The prefix of the headers a `tools/call` mirrors its marked arguments into (SEP-2243,
/// "Custom Headers from Tool Parameters"): `Mcp-Param-{Name}`, `{Name}` the property's
/// `x-mcp-header` value.
pub const MCP_PARAM_PREFIX: &str = "mcp-param-";
/// The schema extension marking an `inputSchema` property as mirrored into a header.
const X_MCP_HEADER: &str = "x-mcp-header";

/// Declarations read from one tool, at most: a tool marking more is refused by the
/// server for the headers past these, and the call's error reaches its client.
pub const MAX_PARAM_HEADERS: usize = 8;
/// Longest `x-mcp-header` value read (the header name is 10 bytes more).
pub const MAX_PARAM_NAME: usize = 64;
/// Deepest property read (2026-07-28: "at any nesting depth"; the proxy stops here).
pub const MAX_PARAM_DEPTH: usize = 4;
/// Longest property name on a declaration's path.
pub const MAX_PARAM_KEY: usize = 64;

/// Whether `name` is in the `Mcp-Param-` namespace, which the proxy fills itself on the
/// requests it frames.
pub fn is_param_header(name: &HeaderName) -> bool {
    name.as_str().starts_with(MCP_PARAM_PREFIX)
}

/// One `x-mcp-header` declaration of a tool: the property's path under `arguments` and
/// the header its value goes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    pub path: Box<[Box<str>]>,
    pub header: HeaderName,
}

/// The declarations of a tool's `inputSchema` (2026-07-28, "Custom Headers from Tool
/// Parameters"): every `x-mcp-header` on a property reached through a chain of
/// `properties` keys alone, whose value is an RFC 9110 token (`1*tchar`), the first of
/// each name compared case-insensitively. One under `items`, a combinator, a condition
/// or a `$ref` is not reachable statically and a server does not check it, so it is not
/// read; nor is one whose property type the specification does not admit — the
/// arguments' own values decide what is sent (`param_headers`). Bounded by the `MAX_*`
/// constants above: what lies past them is not read.
pub fn param_declarations(input_schema: &Value) -> Vec<ParamHeader> {
    let mut found = Vec::new();
    let mut path = Vec::new();
    walk(input_schema, &mut path, &mut found);
    found
}

fn walk<'a>(schema: &'a Value, path: &mut Vec<&'a str>, found: &mut Vec<ParamHeader>) {
    if found.len() >= MAX_PARAM_HEADERS {
        return;
    }
    if !path.is_empty()
        && let Some(name) = schema.get(X_MCP_HEADER).and_then(Value::as_str)
        && let Some(header) = param_header_name(name)
        && !found.iter().any(|d| d.header == header)
    {
        found.push(ParamHeader {
            path: path.iter().map(|&key| Box::from(key)).collect(),
            header,
        });
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    if path.len() >= MAX_PARAM_DEPTH {
        return;
    }
    for (key, property) in properties {
        if key.len() > MAX_PARAM_KEY {
            continue;
        }
        path.push(key);
        walk(property, path, found);
        path.pop();
    }
}

/// `Mcp-Param-{name}` for a declared name, when it is one: a non-empty RFC 9110 token
/// (§5.1: `1*tchar`, so no space, control character or delimiter) of at most
/// [`MAX_PARAM_NAME`] bytes.
fn param_header_name(name: &str) -> Option<HeaderName> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > MAX_PARAM_NAME || !name.bytes().all(tchar) {
        return None;
    }
    HeaderName::from_bytes(format!("{MCP_PARAM_PREFIX}{name}").as_bytes()).ok()
}

/// The `Mcp-Param-*` headers of a `tools/call` with `arguments` to a tool declaring
/// `declared`: one per declared argument present with a primitive value, converted as
/// 2026-07-28 says (a string as it is, a boolean `true`/`false`, a number in decimal)
/// and encoded as every mirrored value is ([`encode_header_value`]). A `null` or absent
/// argument has no header ("the client MUST omit the header"); nor has an object, an
/// array, or an integer past JavaScript's safe range (2^53 − 1), which servers do not
/// compare either.
pub fn param_headers(
    declared: &[ParamHeader],
    arguments: &Value,
) -> Vec<(HeaderName, HeaderValue)> {
    declared
        .iter()
        .filter_map(|declaration| {
            let value = declaration
                .path
                .iter()
                .try_fold(arguments, |node, key| node.get(&**key))?;
            let text = param_value(value)?;
            Some((declaration.header.clone(), encode_header_value(&text)))
        })
        .collect()
}

/// Checks the `Mcp-Param-*` headers a client sent with a `tools/call` to a tool
/// declaring `declared` against its `arguments`, as a 2026-07-28 server must ("Custom
/// Headers from Tool Parameters"): every declared argument with a primitive value has
/// its header, whose value — plain, or `=?base64?…?=` holding strict padded Base64 of
/// UTF-8 — equals the argument's text. `Err` names what is wrong (the server answers 400
/// and -32020 then).
pub fn check_param_headers(
    declared: &[ParamHeader],
    arguments: &Value,
    headers: &http::HeaderMap,
) -> Result<(), String> {
    for declaration in declared {
        let value = declaration
            .path
            .iter()
            .try_fold(arguments, |node, key| node.get(&**key));
        let expected = value.and_then(param_value);
        let sent = headers.get(&declaration.header);
        let name = declaration.header.as_str();
        match (expected, sent) {
            (None, None) => {}
            (Some(_), None) => return Err(format!("the {name} header is missing")),
            (None, Some(_)) => {
                return Err(format!(
                    "the {name} header is sent for an argument the call does not have"
                ));
            }
            (Some(expected), Some(sent)) => {
                let text = strict_header_text(sent.as_bytes())
                    .ok_or_else(|| format!("the {name} header is not valid Base64 of UTF-8"))?;
                if text.trim() != expected {
                    return Err(format!(
                        "the {name} header differs from the argument it mirrors"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A mirrored header's text: decoded when it has the exact `=?base64?…?=` form (strict
/// padded Base64 of UTF-8, `None` otherwise), else as it is.
fn strict_header_text(value: &[u8]) -> Option<Cow<'_, str>> {
    let text = std::str::from_utf8(value).ok()?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = STANDARD.decode(b64).ok()?;
            String::from_utf8(bytes).ok().map(Cow::Owned)
        }
        None => Some(Cow::Borrowed(text)),
    }
}

/// A primitive argument as its header's text; `None` for what has none.
fn param_value(value: &Value) -> Option<String> {
    /// 2^53 − 1: the largest integer every JSON peer reads exactly.
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => {
            if let Some(integer) = number.as_i64() {
                return (integer.unsigned_abs() <= MAX_SAFE as u64).then(|| integer.to_string());
            }
            if number.is_u64() {
                return None;
            }
            let float = number.as_f64().filter(|f| f.is_finite())?;
            if float.fract() == 0.0 && float.abs() > MAX_SAFE {
                return None;
            }
            // Rust writes the shortest decimal that reads back, never an exponent:
            // `1.5`, `42` for `42.0`, `0` for `-0.0` (as JavaScript's `String` does).
            Some(if float == 0.0 {
                "0".to_owned()
            } else {
                float.to_string()
            })
        }
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_visible_ascii_whatever_byte_is_where() {
        for b in 0..=255u8 {
            let visible = (0x21..=0x7e).contains(&b);
            // The byte alone, first, in the middle and last, in ids shorter and longer
            // than an optimised build's vector loop takes at once (up to 128 bytes).
            for len in [1, 2, 15, 16, 17, 31, 32, 33, 45, 64, 65, 127, 128, 129, 300] {
                for at in [0, len / 2, len - 1] {
                    let mut id = vec![b'a'; len];
                    id[at] = b;
                    assert_eq!(
                        is_visible_ascii_bytes(&id),
                        visible,
                        "{b:#04x} at {at} of {len}"
                    );
                    if let Ok(text) = std::str::from_utf8(&id) {
                        assert_eq!(is_visible_ascii(text), visible);
                    }
                }
            }
        }
        assert!(!is_visible_ascii_bytes(b""));
        assert!(!is_visible_ascii(""));
    }

    #[test]
    fn values_are_mirrored_plain_or_encoded_and_decode_back() {
        for (value, plain) in [
            ("echo", true),
            ("file:///tmp/a b.txt", true),
            ("caf\u{e9}", false),
            (" padded", false),
            ("tab\tinside", false),
            ("=?base64?SGVsbG8=?=", false),
        ] {
            let header = encode_header_value(value);
            assert_eq!(header.as_bytes() == value.as_bytes(), plain, "{value:?}");
            assert_eq!(decode_header_value(header.as_bytes()), value, "{value:?}");
        }
    }

    #[test]
    fn a_request_mirrors_its_method_and_target() {
        let params = RawValue::from_string(r#"{"name":"echo","arguments":{}}"#.into()).unwrap();
        let headers = mirrored("tools/call", Some(&params));
        assert_eq!(headers[0].0, &MCP_METHOD);
        assert_eq!(headers[0].1, "tools/call");
        assert_eq!(headers[1].0, &MCP_NAME);
        assert_eq!(headers[1].1, "echo");
        let task = RawValue::from_string(r#"{"taskId":"t-1"}"#.into()).unwrap();
        assert_eq!(mirrored("tasks/get", Some(&task))[1].1, "t-1");
        assert_eq!(mirrored("tools/list", None).len(), 1);
    }

    #[test]
    fn an_empty_value_is_encoded_so_that_it_is_not_lost() {
        let header = encode_header_value("");
        assert_eq!(header, "=?base64??=");
        assert_eq!(decode_header_value(header.as_bytes()), "");
    }

    fn names(declared: &[ParamHeader]) -> Vec<(String, &str)> {
        declared
            .iter()
            .map(|d| (d.path.join("."), d.header.as_str()))
            .collect()
    }

    #[test]
    fn declarations_are_read_through_properties_alone() {
        let schema = serde_json::json!({
            "type": "object",
            "x-mcp-header": "Root",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "days": {"type": "integer", "x-mcp-header": "Days"},
                "nested": {"type": "object", "properties": {
                    "zone": {"type": "string", "x-mcp-header": "Zone"}}},
                "list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}},
                "either": {"anyOf": [{"type": "string", "x-mcp-header": "Either"}]},
                "again": {"type": "string", "x-mcp-header": "REGION"},
                "spaced": {"type": "string", "x-mcp-header": "Has Space"},
                "crlf": {"type": "string", "x-mcp-header": "A\r\nB"},
                "empty": {"type": "string", "x-mcp-header": ""},
                "number": {"type": "string", "x-mcp-header": 5}
            }
        });
        assert_eq!(
            names(&param_declarations(&schema)),
            [
                ("region".to_owned(), "mcp-param-region"),
                ("days".to_owned(), "mcp-param-days"),
                ("nested.zone".to_owned(), "mcp-param-zone"),
            ]
        );
    }

    #[test]
    fn what_a_schema_may_declare_is_bounded() {
        let many: serde_json::Map<String, Value> = (0..3 * MAX_PARAM_HEADERS)
            .map(|i| {
                (
                    format!("p{i}"),
                    serde_json::json!({"x-mcp-header": format!("H{i}")}),
                )
            })
            .collect();
        let schema = serde_json::json!({"properties": many});
        assert_eq!(param_declarations(&schema).len(), MAX_PARAM_HEADERS);

        let long_name = "N".repeat(MAX_PARAM_NAME + 1);
        let long_key = "k".repeat(MAX_PARAM_KEY + 1);
        let schema = serde_json::json!({"properties": {
            "a": {"x-mcp-header": long_name},
            long_key: {"x-mcp-header": "LongKey"},
            "b": {"x-mcp-header": "N".repeat(MAX_PARAM_NAME)},
        }});
        assert_eq!(names(&param_declarations(&schema)).len(), 1);

        // A property deeper than MAX_PARAM_DEPTH is not read.
        let mut deep = serde_json::json!({"type": "string", "x-mcp-header": "Deep"});
        for _ in 0..MAX_PARAM_DEPTH {
            deep = serde_json::json!({"properties": {"d": deep}});
        }
        assert_eq!(param_declarations(&deep).len(), 1);
        let deeper = serde_json::json!({"properties": {"d": deep}});
        assert!(param_declarations(&deeper).is_empty());
    }

    #[test]
    fn arguments_become_headers_as_2026_07_28_converts_them() {
        // Two tools' worth (a tool declares at most MAX_PARAM_HEADERS).
        let sent = serde_json::json!({"properties": {
            "s": {"x-mcp-header": "S"}, "b": {"x-mcp-header": "B"},
            "i": {"x-mcp-header": "I"}, "f": {"x-mcp-header": "F"},
            "whole": {"x-mcp-header": "Whole"}, "neg0": {"x-mcp-header": "Neg0"},
            "n": {"properties": {"t": {"x-mcp-header": "T"}}}
        }});
        let omitted = serde_json::json!({"properties": {
            "u": {"x-mcp-header": "U"}, "big": {"x-mcp-header": "Big"},
            "null": {"x-mcp-header": "Null"}, "obj": {"x-mcp-header": "Obj"},
            "absent": {"x-mcp-header": "Absent"}
        }});
        let mut declared = param_declarations(&sent);
        declared.extend(param_declarations(&omitted));
        assert_eq!(declared.len(), 12);
        let arguments: Value = serde_json::from_str(
            r#"{"s": "caf\u00e9", "b": true, "i": -42, "f": 1.5, "whole": 42.0,
                "neg0": -0.0, "u": 18446744073709551615, "big": 9007199254740993,
                "null": null, "obj": {"x": 1}, "n": {"t": " padded"}}"#,
        )
        .unwrap();
        let headers: Vec<(String, String)> = param_headers(&declared, &arguments)
            .into_iter()
            .map(|(n, v)| {
                let decoded = decode_header_value(v.as_bytes()).into_owned();
                (n.as_str().to_owned(), decoded)
            })
            .collect();
        let expected = [
            ("mcp-param-s", "caf\u{e9}"),
            ("mcp-param-b", "true"),
            ("mcp-param-i", "-42"),
            ("mcp-param-f", "1.5"),
            ("mcp-param-whole", "42"),
            ("mcp-param-neg0", "0"),
            ("mcp-param-t", " padded"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(headers, expected);
        // Non-ASCII and padded values travel encoded.
        let raw = param_headers(&declared, &arguments);
        assert!(raw[0].1.as_bytes().starts_with(b"=?base64?"));
        assert_eq!(raw[1].1, "true");
    }
}
