//! The CLIENT span of one request the proxy sends upstream while serving a request that
//! has a span: named for the JSON-RPC method it carries (or the HTTP method), with the
//! real server's address, and its context sent along — in the HTTP headers, and in the
//! message's `_meta` for a server that reads it there (a stdio child, a 2026-07-28
//! server) — so the server's own spans join the client's trace.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::context;
use crate::jsonrpc::{Envelope, Kind};
use crate::rewrite::trace_context;

/// What a request to the upstream carries, for its span (a request extension).
#[derive(Debug, Clone)]
pub struct Operation(pub Box<str>);

/// Where a span's request goes.
#[derive(Debug, Clone, Copy)]
pub enum Peer<'a> {
    /// An HTTP server: its host and port.
    Tcp(&'a str, u16),
    /// A stdio child.
    Pipe,
}

/// One upstream request's span.
#[derive(Debug)]
pub struct ClientSpan {
    cx: Context,
}

impl ClientSpan {
    /// The span of `request` to `peer`, child of the span the current task serves; its
    /// context goes into the request's headers. `None` when traces are off or nothing
    /// being served has a span.
    pub fn start<B>(request: &mut Request<B>, peer: Peer<'_>) -> Option<ClientSpan> {
        let operation = request
            .extensions()
            .get::<Operation>()
            .map(|o| super::bounded(&o.0).to_owned());
        let span = ClientSpan::begin(operation, Some(request.method().as_str()), peer)?;
        span.into_headers(request.headers_mut());
        Some(span)
    }

    /// The span of the JSON-RPC request `message` to `peer`, its context written into
    /// the message's `_meta`; anything but a request, or no span to descend from, gets
    /// none and passes as it came.
    pub fn start_message(message: Bytes, peer: Peer<'_>) -> (Option<ClientSpan>, Bytes) {
        if !super::active() {
            return (None, message);
        }
        let method = match Envelope::parse(&message) {
            Ok(envelope) if envelope.kind == Kind::Request => {
                super::bounded(envelope.method()).to_owned()
            }
            _ => return (None, message),
        };
        let Some(span) = ClientSpan::begin(Some(method), None, peer) else {
            return (None, message);
        };
        let message = trace_context::into_meta(message, &context::into_pairs(&span.cx));
        (Some(span), message)
    }

    fn begin(operation: Option<String>, http_method: Option<&str>, peer: Peer<'_>) -> Option<Self> {
        let tracer = super::tracer()?;
        let parent = Context::current();
        if !parent.span().span_context().is_valid() {
            return None;
        }
        let mut attributes = Vec::with_capacity(5);
        if let Some(method) = http_method {
            attributes.push(KeyValue::new("http.request.method", method.to_owned()));
        }
        match peer {
            Peer::Tcp(address, port) => {
                attributes.push(KeyValue::new("network.transport", "tcp"));
                attributes.push(KeyValue::new("server.address", address.to_owned()));
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
            Peer::Pipe => attributes.push(KeyValue::new("network.transport", "pipe")),
        }
        if let Some(method) = &operation {
            attributes.push(KeyValue::new("mcp.method.name", method.clone()));
        }
        let name = operation
            .or_else(|| http_method.map(str::to_owned))
            .unwrap_or_default();
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        Some(ClientSpan {
            cx: parent.with_span(span),
        })
    }

    /// The span of one round trip to the session store (Redis), `operation` naming what
    /// it sends; `None` when traces are off or nothing being served has a span.
    pub fn store(operation: &'static str) -> Option<ClientSpan> {
        let tracer = super::tracer()?;
        let parent = Context::current();
        if !parent.span().span_context().is_valid() {
            return None;
        }
        let span = tracer
            .span_builder(format!("redis {operation}"))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("db.system.name", "redis"),
                KeyValue::new("db.operation.name", operation),
            ])
            .start_with_context(tracer, &parent);
        Some(ClientSpan {
            cx: parent.with_span(span),
        })
    }

    /// Writes the span's context into `headers` (replacing the client's).
    pub fn into_headers(&self, headers: &mut HeaderMap) {
        context::into_headers(&self.cx, headers);
    }

    /// Ends the span: the server's HTTP status, or why there was none.
    pub fn finish(self, outcome: Result<StatusCode, &dyn std::fmt::Display>) {
        let span = self.cx.span();
        match outcome {
            Ok(status) => {
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status.as_u16()),
                ));
                if status.is_server_error() || status.is_client_error() {
                    span.set_attribute(KeyValue::new("error.type", status.as_u16().to_string()));
                    span.set_status(Status::error(format!("HTTP {status}")));
                }
            }
            Err(why) => {
                span.set_attribute(KeyValue::new("error.type", "transport"));
                span.set_status(Status::error(why.to_string()));
            }
        }
        span.end();
    }

    /// Ends the span of a message handed to a stdio child (its answer comes later, on
    /// the child's stream), or of one that could not be.
    pub fn sent(self, outcome: Result<(), &dyn std::fmt::Display>) {
        let span = self.cx.span();
        if let Err(why) = outcome {
            span.set_attribute(KeyValue::new("error.type", "transport"));
            span.set_status(Status::error(why.to_string()));
        }
        span.end();
    }
}
