//! The SERVER span of one MCP request: named `{mcp.method.name} {target}` (the tool's or
//! the prompt's name), its parent the client's trace context, started when the request
//! arrived and ended when its answer starts.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use http::StatusCode;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::{bounded, context};
use crate::jsonrpc::raw_str;
use crate::mcp::headers::MCP_PROTOCOL_VERSION;
use crate::mcp::{Method, meta};
use crate::route::Message;

/// One request's span, and the context its work runs in (whose spans are its children).
/// Dropped unfinished (the client left), it ends as cancelled.
#[derive(Debug)]
pub struct ServerSpan {
    cx: Context,
    finished: bool,
}

impl ServerSpan {
    /// The span of `message`, which arrived at `received` (read only while traces are
    /// on; from another replica, which forwarded it, when `from_peer`); `None` when
    /// traces are off.
    pub fn start(
        message: &Message<'_, '_>,
        received: Option<SystemTime>,
        from_peer: bool,
    ) -> Option<ServerSpan> {
        let tracer = super::tracer()?;
        let params = message.params();
        let parent = context::from_client(message.headers, params, from_peer);
        // What the client wrote is cut to a bound: the spans wait in a bounded queue,
        // but each span's size is the client's to choose otherwise.
        let method = bounded(message.envelope.method());
        let method = if method.is_empty() {
            "response"
        } else {
            method
        };
        let member = |key| {
            params
                .and_then(|p| p.member(key))
                .and_then(raw_str)
                .map(|s| bounded(&s).to_owned())
        };
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method.to_owned()),
            KeyValue::new("network.transport", "tcp"),
            KeyValue::new("network.protocol.name", "http"),
        ];
        let target = match message.method() {
            Some(Method::ToolsCall) => {
                attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                member("name").inspect(|name| {
                    attributes.push(KeyValue::new("gen_ai.tool.name", name.clone()));
                })
            }
            Some(Method::PromptsGet) => member("name").inspect(|name| {
                attributes.push(KeyValue::new("gen_ai.prompt.name", name.clone()));
            }),
            Some(Method::ResourcesRead) => {
                if let Some(uri) = member("uri") {
                    attributes.push(KeyValue::new("mcp.resource.uri", uri));
                }
                None
            }
            _ => None,
        };
        if let Some(id) = message.request_id() {
            let id = raw_str(id)
                .map_or_else(|| bounded(id.get()).to_owned(), |s| bounded(&s).to_owned());
            attributes.push(KeyValue::new("jsonrpc.request.id", id));
        }
        // The data-layer session, as the logs and the admin API name it: a hash of its
        // id (the id is what lets anyone use the session; a sealed id is its route).
        if let Some(session) = params.and_then(|p| p.session().ok().flatten()) {
            attributes.push(KeyValue::new(
                "mcp.session.id",
                crate::session::log_tag(&session.session_id),
            ));
        }
        let version = params
            .and_then(|p| p.meta(meta::PROTOCOL_VERSION))
            .and_then(raw_str)
            .map(|s| bounded(&s).to_owned())
            .or_else(|| {
                message
                    .headers
                    .get(&MCP_PROTOCOL_VERSION)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| bounded(v).to_owned())
            });
        if let Some(version) = version {
            attributes.push(KeyValue::new("mcp.protocol.version", version));
        }
        if let Some(peer) = message.peer {
            attributes.push(KeyValue::new("client.address", address(peer)));
        }
        let name = match target {
            Some(target) => format!("{method} {target}"),
            None => method.to_owned(),
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(received.unwrap_or_else(SystemTime::now))
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        Some(ServerSpan {
            cx: parent.with_span(span),
            finished: false,
        })
    }

    /// The span of a `GET` (a session's stream) or `DELETE` (a session's end) of the
    /// endpoint, named by its HTTP method, parented on the headers' context, with the
    /// session its `Mcp-Session-Id` names (hashed); `None` when traces are off.
    pub fn start_bare(
        method: &http::Method,
        headers: &http::HeaderMap,
        peer: Option<IpAddr>,
        from_peer: bool,
    ) -> Option<ServerSpan> {
        let tracer = super::tracer()?;
        let parent = context::from_client(headers, None, from_peer);
        let mut attributes = vec![
            KeyValue::new("http.request.method", method.as_str().to_owned()),
            KeyValue::new("network.transport", "tcp"),
            KeyValue::new("network.protocol.name", "http"),
        ];
        if let Some(session) = headers
            .get(&crate::mcp::headers::MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
        {
            attributes.push(KeyValue::new(
                "mcp.session.id",
                crate::session::log_tag(session),
            ));
        }
        if let Some(peer) = peer {
            attributes.push(KeyValue::new("client.address", address(peer)));
        }
        let span = tracer
            .span_builder(method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        Some(ServerSpan {
            cx: parent.with_span(span),
            finished: false,
        })
    }

    /// The context the request's work runs in.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// The trace's and the span's ids, as the log line carries them.
    pub fn ids(&self) -> (String, String) {
        let span = self.cx.span();
        let context = span.span_context();
        (
            context.trace_id().to_string(),
            context.span_id().to_string(),
        )
    }

    /// Records the answer's HTTP status and, when the proxy answered with a JSON-RPC
    /// error of its own, that error's code; the span ends with its body
    /// ([`Answered`]: when the last byte went out, or the client left).
    pub fn finish(mut self, status: StatusCode, error: Option<i32>) -> Answered {
        self.finished = true;
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
        match error {
            Some(code) => {
                span.set_attribute(KeyValue::new("error.type", code.to_string()));
                span.set_attribute(KeyValue::new("rpc.response.status_code", code.to_string()));
                span.set_status(Status::error(format!("JSON-RPC error {code}")));
            }
            None if status.is_server_error() || status.is_client_error() => {
                span.set_attribute(KeyValue::new("error.type", status.as_u16().to_string()));
                span.set_status(Status::error(format!("HTTP {status}")));
            }
            None => {}
        }
        Answered(Arc::new(self))
    }
}

impl Drop for ServerSpan {
    fn drop(&mut self) {
        let span = self.cx.span();
        if !self.finished {
            span.set_attribute(KeyValue::new("error.type", "cancelled"));
            span.set_status(Status::error("the client left before its answer"));
        }
        span.end();
    }
}

/// A request's span once answered: it ends when the last of it is dropped — kept in the
/// response (an extension, which the front moves into what it keeps until the answer is
/// sent), so that a streamed answer's span lasts as long as its stream.
#[derive(Debug, Clone)]
pub struct Answered(
    #[expect(
        dead_code,
        reason = "held for its drop: the span ends with the last copy"
    )]
    Arc<ServerSpan>,
);

/// A client address as the conventions write it (an IPv4-mapped IPv6 one as IPv4).
fn address(peer: IpAddr) -> String {
    match peer {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or_else(|| v6.to_string(), |v4| v4.to_string()),
        IpAddr::V4(v4) => v4.to_string(),
    }
}
