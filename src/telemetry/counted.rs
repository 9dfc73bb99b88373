//! What became of the spans, counted exactly. The SDK's batch processor drops a span
//! when its queue is full and keeps the count to itself; so the processor here keeps its
//! own tally of the spans handed on and not yet through the exporter, and drops (and
//! counts) a span itself before that tally could overflow the SDK's queue. Then every
//! span that ended was exported, refused, dropped here, or is still queued:
//! `ended = exported + failed + dropped + queued`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Spans recorded and ended (`mcp_proxy_spans_ended_total`).
pub static ENDED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans a collector took (`mcp_proxy_spans_exported_total`).
pub static EXPORTED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans whose export failed: the collector refused them or could not be reached
/// (`mcp_proxy_spans_export_failed_total`).
pub static FAILED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans dropped because the queue was full (`mcp_proxy_spans_dropped_total`).
pub static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans handed to the batch processor and not yet through the exporter
/// (`mcp_proxy_spans_queued`).
pub static QUEUED: LazyLock<Gauge> = LazyLock::new(Gauge::default);

/// The spans handed on and not yet exported (or refused), shared by the processor that
/// hands them on and the exporter that sees them go.
#[derive(Debug, Clone)]
pub struct InFlight {
    spans: Arc<AtomicUsize>,
    capacity: usize,
}

impl InFlight {
    /// A tally that admits at most `capacity` spans at once: the SDK queue's size, so it
    /// never fills (what is queued there is at most what is in flight).
    pub fn new(capacity: usize) -> InFlight {
        InFlight {
            spans: Arc::new(AtomicUsize::new(0)),
            capacity,
        }
    }

    /// Takes a place for one span; false when every place is taken.
    fn admit(&self) -> bool {
        let admitted = self
            .spans
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            QUEUED.inc();
        }
        admitted
    }

    /// Gives back the places of `spans` spans that went through the exporter.
    fn release(&self, spans: usize) {
        // Never below zero, whatever the SDK does with a batch.
        let released = self
            .spans
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(spans))
            })
            .map_or(0, |before| before.min(spans));
        QUEUED.dec_by(i64::try_from(released).unwrap_or(i64::MAX));
    }
}

/// A span processor that counts each span ending and hands it on while there is room in
/// the queue; with none, it drops the span and counts it.
#[derive(Debug)]
pub struct Counting<P> {
    inner: P,
    in_flight: InFlight,
}

impl<P> Counting<P> {
    pub fn new(inner: P, in_flight: InFlight) -> Counting<P> {
        Counting { inner, in_flight }
    }
}

impl<P: SpanProcessor> SpanProcessor for Counting<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        ENDED.inc();
        if self.in_flight.admit() {
            self.inner.on_end(span);
        } else {
            DROPPED.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that counts each batch's spans by how its export went, and gives their
/// places in the queue back.
#[derive(Debug)]
pub struct CountingExporter<E> {
    inner: E,
    in_flight: InFlight,
}

impl<E> CountingExporter<E> {
    pub fn new(inner: E, in_flight: InFlight) -> CountingExporter<E> {
        CountingExporter { inner, in_flight }
    }
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let exported = self.inner.export(batch).await;
        match &exported {
            Ok(()) => EXPORTED.inc_by(spans as u64),
            Err(_) => FAILED.inc_by(spans as u64),
        };
        self.in_flight.release(spans);
        exported
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_tally_admits_nothing_until_an_export_gives_places_back() {
        let tally = InFlight::new(2);
        assert!(tally.admit());
        assert!(tally.admit());
        assert!(!tally.admit());
        tally.release(1);
        assert!(tally.admit());
        // More released than held (nothing the SDK does may wrap it round).
        tally.release(5);
        assert_eq!(tally.spans.load(Ordering::Acquire), 0);
        assert!(tally.admit());
    }
}
