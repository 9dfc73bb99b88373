//! What became of the spans: counted around the SDK's batch processor, whose own count
//! of the spans it dropped (its queue full) stays private. Every span recorded is
//! counted as it ends; every span the exporter took, by how its export went. What ended
//! and was neither exported nor refused was dropped, or is still queued (at most the
//! queue's 2,048).

use std::sync::LazyLock;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;

/// Spans recorded and ended (`mcp_proxy_spans_ended_total`).
pub static ENDED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans a collector took (`mcp_proxy_spans_exported_total`).
pub static EXPORTED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans whose export failed: the collector refused them or could not be reached
/// (`mcp_proxy_spans_export_failed_total`).
pub static FAILED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// A span processor that counts each span ending, then hands it on.
#[derive(Debug)]
pub struct Counting<P>(pub P);

impl<P: SpanProcessor> SpanProcessor for Counting<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        ENDED.inc();
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// An exporter that counts each batch's spans by how its export went.
#[derive(Debug)]
pub struct CountingExporter<E>(pub E);

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let exported = self.0.export(batch).await;
        match &exported {
            Ok(()) => EXPORTED.inc_by(spans),
            Err(_) => FAILED.inc_by(spans),
        };
        exported
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}
