//! Lists as one caller may see them (`[[auth.rules]]`): a response whose result is a
//! list of tools, prompts, resources or resource templates keeps only the items the
//! caller may use (by name, or by URI); every other message — notifications, server
//! requests, other results — passes as it came. Responses are recognised by their
//! shape, not their id: on a request's own stream only its answer comes (whatever id an
//! upstream writes on it), and a session's `GET` stream may replay answers
//! (`Last-Event-ID`). A page keeps its `nextCursor` (a caller may get a page with fewer
//! items, or none, and goes on); a result that declared itself cacheable by anyone
//! (`cacheScope: "public"`) becomes `"private"`: it is this caller's now. What a server
//! says it offers (`capabilities` of `server/discover` or `initialize`) loses `tools`,
//! `prompts` or `resources` when the caller may use nothing of that kind.

use serde_json::Value;

use crate::sse::{End, Event, Rewrite};

/// Which list, and how its items are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl List {
    const ALL: [List; 4] = [
        List::Tools,
        List::Prompts,
        List::Resources,
        List::ResourceTemplates,
    ];

    /// The list `method` answers with, if it is one.
    pub fn of(method: &str) -> Option<List> {
        match method {
            "tools/list" => Some(List::Tools),
            "prompts/list" => Some(List::Prompts),
            "resources/list" => Some(List::Resources),
            "resources/templates/list" => Some(List::ResourceTemplates),
            _ => None,
        }
    }

    /// The result's member holding the items, and the item's member naming it.
    fn members(self) -> (&'static str, &'static str) {
        match self {
            List::Tools => ("tools", "name"),
            List::Prompts => ("prompts", "name"),
            List::Resources => ("resources", "uri"),
            List::ResourceTemplates => ("resourceTemplates", "uriTemplate"),
        }
    }
}

/// Whether the caller may use the item of that list named so.
pub type Allowed = Box<dyn Fn(List, &str) -> bool + Send + Sync>;
/// Whether the caller may use anything of that list's kind.
pub type AnyAllowed = Box<dyn Fn(List) -> bool + Send + Sync>;

/// Lists filtered for one caller.
pub struct Visible {
    allowed: Allowed,
    any: AnyAllowed,
}

impl std::fmt::Debug for Visible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Visible")
    }
}

impl Visible {
    pub fn new(allowed: Allowed, any: AnyAllowed) -> Visible {
        Visible { allowed, any }
    }

    /// `message` as the caller may see it, when it is a list response; `None`: it
    /// passes as it is (not a response, or not a list).
    pub fn message(&self, message: &[u8]) -> Option<Vec<u8>> {
        // Cheap refusals first: most messages are no list.
        let offers = memchr::memmem::find(message, b"capabilities").is_some();
        if !offers
            && !List::ALL.iter().any(|list| {
                let key = list.members().0;
                memchr::memmem::find(message, key.as_bytes()).is_some()
            })
        {
            return None;
        }
        let mut value: Value = serde_json::from_slice(message).ok()?;
        if value.get("method").is_some() {
            return None;
        }
        let result = value.get_mut("result")?.as_object_mut()?;
        let mut listed = false;
        if let Some(capabilities) = result
            .get_mut("capabilities")
            .and_then(Value::as_object_mut)
        {
            for (list, key) in [
                (List::Tools, "tools"),
                (List::Prompts, "prompts"),
                (List::Resources, "resources"),
            ] {
                if capabilities.contains_key(key) && !(self.any)(list) {
                    capabilities.remove(key);
                    listed = true;
                }
            }
        }
        for list in List::ALL {
            let (items, name) = list.members();
            let Some(items) = result.get_mut(items).and_then(Value::as_array_mut) else {
                continue;
            };
            listed = true;
            items.retain(|item| {
                item.get(name)
                    .and_then(Value::as_str)
                    .is_some_and(|named| (self.allowed)(list, named))
            });
        }
        if !listed {
            return None;
        }
        if result.get("cacheScope").and_then(Value::as_str) == Some("public") {
            result.insert("cacheScope".into(), Value::from("private"));
        }
        serde_json::to_vec(&value).ok()
    }
}

impl Rewrite for Visible {
    fn event(&mut self, event: &mut Event) {
        if let Some(data) = &event.data
            && let Some(filtered) = self.message(data.as_bytes())
            && let Ok(text) = String::from_utf8(filtered)
        {
            event.data = Some(text);
        }
    }

    fn end(&mut self, _: End) -> Option<Event> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(names: &'static [&'static str]) -> Visible {
        Visible::new(
            Box::new(move |_, name| names.contains(&name)),
            Box::new(|list| list == List::Tools),
        )
    }

    fn filtered(visible: &Visible, message: &[u8]) -> Value {
        serde_json::from_slice(&visible.message(message).unwrap()).unwrap()
    }

    #[test]
    fn a_list_response_keeps_what_the_caller_may_use_whatever_its_id() {
        let visible = only(&["echo"]);
        let response = br#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"echo"},{"name":"rm"}],"nextCursor":"c","cacheScope":"public"}}"#;
        let out = filtered(&visible, response);
        assert_eq!(
            out["result"]["tools"],
            serde_json::json!([{"name": "echo"}])
        );
        assert_eq!(out["result"]["nextCursor"], "c");
        assert_eq!(out["result"]["cacheScope"], "private");
        // An upstream that wrote another id (a JavaScript server's rounded number).
        let renumbered =
            br#"{"jsonrpc":"2.0","id":9007199254740992,"result":{"tools":[{"name":"rm"}]}}"#;
        assert_eq!(
            filtered(&visible, renumbered)["result"]["tools"],
            serde_json::json!([])
        );
        // An item without a name is never shown to a caller rules restrict.
        let odd = br#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"title":"x"}]}}"#;
        assert_eq!(
            filtered(&visible, odd)["result"]["tools"],
            serde_json::json!([])
        );
        // Notifications, requests, other results: as they came.
        let note = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"tools":[]}}"#;
        assert_eq!(visible.message(note), None);
        let other =
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"tools"}]}}"#;
        assert_eq!(visible.message(other), None);
    }

    #[test]
    fn what_a_server_offers_loses_the_kinds_the_caller_may_use_none_of() {
        let visible = only(&["echo"]);
        let discover = br#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true},"prompts":{},"logging":{}}}}"#;
        let out = filtered(&visible, discover);
        assert_eq!(
            out["result"]["capabilities"],
            serde_json::json!({"tools": {"listChanged": true}, "logging": {}})
        );
        // Nothing to take away: as it came.
        let tools_only = br#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{}}}}"#;
        assert_eq!(visible.message(tools_only), None);
    }

    #[test]
    fn resources_and_templates_are_named_by_their_uri() {
        let visible = Visible::new(
            Box::new(|list, uri| {
                matches!(list, List::Resources | List::ResourceTemplates)
                    && uri.starts_with("repo://public/")
            }),
            Box::new(|_| true),
        );
        let response = br#"{"jsonrpc":"2.0","id":1,"result":{"resources":[{"uri":"repo://public/a"},{"uri":"repo://private/b"}]}}"#;
        assert_eq!(
            filtered(&visible, response)["result"]["resources"],
            serde_json::json!([{"uri": "repo://public/a"}])
        );
        let templates = br#"{"jsonrpc":"2.0","id":1,"result":{"resourceTemplates":[{"uriTemplate":"repo://private/{x}"}]}}"#;
        assert_eq!(
            filtered(&visible, templates)["result"]["resourceTemplates"],
            serde_json::json!([])
        );
    }
}
