//! A collector stand-in for the traces rows: an OTLP/HTTP receiver on loopback, on its
//! own thread, that takes `POST /v1/traces`, decodes each body with the protocol's own
//! definitions (`opentelemetry-proto`) and counts the spans, answering as a collector
//! does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

/// The receiver; it runs until the process ends.
pub struct Sink {
    addr: SocketAddr,
    spans: Arc<AtomicU64>,
}

impl Sink {
    pub fn spawn() -> Sink {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the sink");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("the sink's address");
        let spans = Arc::new(AtomicU64::new(0));
        let counted = spans.clone();
        std::thread::spawn(move || {
            let runtime = super::runtime();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let counted = counted.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                            let counted = counted.clone();
                            async move {
                                let body = request.into_body().collect().await?.to_bytes();
                                if let Ok(export) = ExportTraceServiceRequest::decode(body) {
                                    let n: usize = export
                                        .resource_spans
                                        .iter()
                                        .flat_map(|r| &r.scope_spans)
                                        .map(|s| s.spans.len())
                                        .sum();
                                    counted.fetch_add(n as u64, Ordering::Relaxed);
                                }
                                let answer = ExportTraceServiceResponse::default().encode_to_vec();
                                Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(answer))))
                            }
                        });
                        let _ = auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Sink { addr, spans }
    }

    /// The base URL an exporter is given.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Spans received so far.
    pub fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }
}
