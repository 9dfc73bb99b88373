//! Work that runs after what started it, with nothing else to carry the trace context:
//! an upstream session's ending, queued to the bounded executor. [`Origin::here`] keeps
//! the context where the work was queued — the request's, when serving a request let go
//! of the session — and [`Origin::run`] runs the work in it. Work queued outside any
//! request (the reaper, a pool letting go of an idle session, a reload, shutdown) runs
//! in a root span of its own instead, so what it sends upstream is still one trace.

use std::future::Future;

use opentelemetry::Context;
use opentelemetry::trace::{FutureExt, SpanKind, TraceContextExt, Tracer};

/// Where a piece of background work was started (nothing when traces are off).
#[derive(Debug, Clone, Default)]
pub struct Origin(Option<Context>);

impl Origin {
    /// The context being served here, if it has a span.
    pub fn here() -> Origin {
        if !super::active() {
            return Origin(None);
        }
        let cx = Context::current();
        Origin(cx.span().span_context().is_valid().then_some(cx))
    }

    /// Runs `work` in the context it was started in; started outside any request, in a
    /// root INTERNAL span named `name` lasting the work.
    pub async fn run<F: Future>(self, name: &'static str, work: F) -> F::Output {
        let Some(tracer) = super::tracer() else {
            return work.await;
        };
        if let Some(cx) = self.0 {
            return work.with_context(cx).await;
        }
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .start_with_context(tracer, &Context::new());
        let cx = Context::new().with_span(span);
        let done = work.with_context(cx.clone()).await;
        cx.span().end();
        done
    }
}
