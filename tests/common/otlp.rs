//! A real OTLP/HTTP traces receiver on loopback: it takes `POST /v1/traces` bodies
//! (protobuf), decodes them with the OpenTelemetry protocol's own definitions
//! (`opentelemetry-proto`) and keeps every span, as a collector would.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use parking_lot::Mutex;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as the receiver got it: ids in lowercase hex, attributes as strings.
#[derive(Debug, Clone)]
pub struct Span {
    pub service: String,
    pub name: String,
    /// `SPAN_KIND_SERVER` = 2, `SPAN_KIND_CLIENT` = 3.
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    /// `STATUS_CODE_ERROR` = 2.
    pub status_code: i32,
    /// How long it lasted.
    pub duration: Duration,
}

pub const INTERNAL: i32 = 1;
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;

impl Span {
    /// Attribute `key`, which must be there.
    pub fn attribute(&self, key: &str) -> &str {
        self.attributes
            .get(key)
            .unwrap_or_else(|| panic!("span {:?} has no {key}: {:?}", self.name, self.attributes))
    }
}

/// See the module documentation.
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    task: JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let kept = spans.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let kept = kept.clone();
                        async move { Ok::<_, Infallible>(receive(request, &kept).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OtlpReceiver { addr, spans, task }
    }

    /// The base URL an exporter is given (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().clone()
    }

    /// Waits until a span named `name` of trace `trace_id` has come; it, or a panic
    /// listing what came.
    pub async fn span(&self, name: &str, trace_id: &str) -> Span {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let found = self
                .spans()
                .into_iter()
                .find(|s| s.name == name && s.trace_id == trace_id);
            if let Some(span) = found {
                return span;
            }
            if tokio::time::Instant::now() > deadline {
                let came: Vec<(String, String)> = self
                    .spans()
                    .into_iter()
                    .map(|s| (s.name, s.trace_id))
                    .collect();
                panic!("no span {name:?} in trace {trace_id}; came: {came:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until a span for which `wanted` holds has come; it, or a panic saying
    /// `what` did not come.
    pub async fn find(&self, what: &str, wanted: impl Fn(&Span) -> bool) -> Span {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(span) = self.spans().into_iter().find(|s| wanted(s)) {
                return span;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {what}; came: {:?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The spans of trace `trace_id` whose parent is `parent`.
    pub fn children(&self, trace_id: &str, parent: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id && s.parent_span_id == parent)
            .collect()
    }
}

async fn receive(
    request: Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Span>>,
) -> Response<Full<Bytes>> {
    let path_ok = request.uri().path() == "/v1/traces";
    let protobuf = request
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
    let Ok(body) = request.into_body().collect().await else {
        return status(StatusCode::BAD_REQUEST);
    };
    if !path_ok || !protobuf {
        return status(StatusCode::NOT_FOUND);
    }
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let mut spans = Vec::new();
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .and_then(|mut a| a.remove("service.name"))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(Span {
                    service: service.clone(),
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    status_code: span.status.map_or(0, |s| s.code),
                    duration: Duration::from_nanos(
                        span.end_time_unix_nano
                            .saturating_sub(span.start_time_unix_nano),
                    ),
                });
            }
        }
    }
    kept.lock().extend(spans);
    let mut response = Response::new(Full::new(Bytes::from(
        ExportTraceServiceResponse::default().encode_to_vec(),
    )));
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

fn status(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
