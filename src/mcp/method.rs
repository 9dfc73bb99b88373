//! The MCP methods the proxy knows by name, of every era: the ones it acts on (the
//! session methods, the handshake, the stateless protocol's own, the server requests it
//! turns into input requests…) and the rest of the standard set, so that metric labels
//! stay bounded. Anything else is just a string the proxy passes on.

macro_rules! methods {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// See the module documentation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Method {
            $($(#[$doc])* $variant,)*
        }

        impl Method {
            /// Every known method.
            pub const ALL: &'static [Method] = &[$(Method::$variant,)*];

            /// The method named `name`, if it is one the proxy knows.
            pub fn parse(name: &str) -> Option<Method> {
                match name {
                    $($name => Some(Method::$variant),)*
                    _ => None,
                }
            }

            /// Its name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Method::$variant => $name,)*
                }
            }
        }
    };
}

methods! {
    /// Data-layer sessions draft (and SEP-1364 alternative 1): open a session.
    SessionsCreate = "sessions/create",
    /// Data-layer sessions draft: end a session.
    SessionsDelete = "sessions/delete",
    /// SEP-1364's spelling of `sessions/delete`.
    SessionDelete = "session/delete",
    /// SEP-1364: end the session named in `params.sessionId`.
    Terminate = "terminate",
    /// 2025-11-25 handshake (SEP-1364 alternative 2 when it carries a `sessionId`).
    Initialize = "initialize",
    Initialized = "notifications/initialized",
    Ping = "ping",
    /// 2026-07-28: what the server is, without a handshake.
    ServerDiscover = "server/discover",
    /// 2026-07-28: a stream of list-changed and resource notifications.
    SubscriptionsListen = "subscriptions/listen",
    SubscriptionsAcknowledged = "notifications/subscriptions/acknowledged",
    ToolsList = "tools/list",
    ToolsCall = "tools/call",
    ResourcesList = "resources/list",
    ResourcesTemplatesList = "resources/templates/list",
    ResourcesRead = "resources/read",
    ResourcesSubscribe = "resources/subscribe",
    ResourcesUnsubscribe = "resources/unsubscribe",
    PromptsList = "prompts/list",
    PromptsGet = "prompts/get",
    CompletionComplete = "completion/complete",
    LoggingSetLevel = "logging/setLevel",
    TasksGet = "tasks/get",
    TasksResult = "tasks/result",
    TasksList = "tasks/list",
    TasksCancel = "tasks/cancel",
    TasksUpdate = "tasks/update",
    /// Server → client: questions a 2026-07-28 client answers as input requests.
    SamplingCreateMessage = "sampling/createMessage",
    ElicitationCreate = "elicitation/create",
    RootsList = "roots/list",
    Cancelled = "notifications/cancelled",
    Progress = "notifications/progress",
    LogMessage = "notifications/message",
    RootsListChanged = "notifications/roots/list_changed",
    ToolsListChanged = "notifications/tools/list_changed",
    PromptsListChanged = "notifications/prompts/list_changed",
    ResourcesListChanged = "notifications/resources/list_changed",
    ResourcesUpdated = "notifications/resources/updated",
    /// 2026-07-28 tasks extension: a task changed (on `subscriptions/listen`).
    TaskChanged = "notifications/tasks",
}

impl Method {
    /// Whether the method ends a session (`sessions/delete`, SEP-1364's `session/delete`
    /// and `terminate`).
    pub fn ends_session(self) -> bool {
        matches!(
            self,
            Method::SessionsDelete | Method::SessionDelete | Method::Terminate
        )
    }

    /// Whether a request is one the 2026-07-28 tasks extension concerns: a `tools/call`
    /// (which may become a task) and the requests on a task.
    pub fn concerns_tasks(self) -> bool {
        matches!(
            self,
            Method::ToolsCall | Method::TasksGet | Method::TasksUpdate | Method::TasksCancel
        )
    }

    /// Whether sending the request twice changes nothing: the list, read and get methods
    /// (and `ping`). A `tools/call` is safe only for a tool that says so (`mcp::tools`).
    pub fn is_safe_to_repeat(self) -> bool {
        matches!(
            self,
            Method::Ping
                | Method::ToolsList
                | Method::ResourcesList
                | Method::ResourcesTemplatesList
                | Method::ResourcesRead
                | Method::PromptsList
                | Method::PromptsGet
        )
    }

    /// The client capability a server request needs (2025-11-25 "Client Features").
    pub fn client_capability(self) -> Option<&'static str> {
        match self {
            Method::SamplingCreateMessage => Some("sampling"),
            Method::ElicitationCreate => Some("elicitation"),
            Method::RootsList => Some("roots"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Method;

    #[test]
    fn every_name_parses_back_to_its_method() {
        for method in Method::ALL {
            assert_eq!(Method::parse(method.as_str()), Some(*method));
        }
        assert_eq!(Method::parse("tools/CALL"), None);
        assert_eq!(Method::parse(""), None);
    }
}
