//! The CLIENT span of one HTTP request the proxy sends upstream while serving a request
//! that has a span: named for the JSON-RPC method it carries (or the HTTP method), with
//! the real server's address, and its context sent in the request's headers, so the
//! server's own spans join the client's trace.

use http::{Request, StatusCode};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::context;

/// What a request to the upstream carries, for its span (a request extension).
#[derive(Debug, Clone)]
pub struct Operation(pub Box<str>);

/// One upstream request's span.
#[derive(Debug)]
pub struct ClientSpan {
    cx: Context,
}

impl ClientSpan {
    /// The span of `request` to the server at `address`:`port` (the upstream URL's),
    /// child of the span the current task serves; its context goes into the request's
    /// headers. `None` when traces are off or nothing being served has a span.
    pub fn start<B>(request: &mut Request<B>, (address, port): (&str, u16)) -> Option<ClientSpan> {
        let tracer = super::tracer()?;
        let parent = Context::current();
        if !parent.span().span_context().is_valid() {
            return None;
        }
        let operation = request
            .extensions()
            .get::<Operation>()
            .map(|o| super::bounded(&o.0).to_owned());
        let mut attributes = vec![
            KeyValue::new("http.request.method", request.method().as_str().to_owned()),
            KeyValue::new("network.transport", "tcp"),
            KeyValue::new("server.address", address.to_owned()),
            KeyValue::new("server.port", i64::from(port)),
        ];
        if let Some(method) = &operation {
            attributes.push(KeyValue::new("mcp.method.name", method.clone()));
        }
        let name = operation.unwrap_or_else(|| request.method().as_str().to_owned());
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        let cx = parent.with_span(span);
        context::into_headers(&cx, request.headers_mut());
        Some(ClientSpan { cx })
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
}
