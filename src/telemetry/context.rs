//! The W3C trace context (`traceparent`, `tracestate`, `baggage`): read from a client's
//! HTTP headers or its request's `_meta` (SEP-414 puts the same three keys there), and
//! written into the headers of a request the proxy sends.

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator,
};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

use crate::mcp::meta::Payload;

/// The three keys, in headers and in `_meta` alike.
const KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

fn propagator() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ])
}

/// The client's context: from `_meta` when it carries a valid `traceparent` (the MCP
/// request's own, SEP-414), else from the HTTP headers; an empty context when neither
/// does. A request another replica forwarded (`from_peer`) is parented on that replica's
/// hop, in its headers.
pub fn from_client(headers: &HeaderMap, params: Option<&Payload<'_>>, from_peer: bool) -> Context {
    let propagator = propagator();
    if from_peer {
        let cx = propagator.extract(&HeaderCarrier(headers));
        if cx.span().span_context().is_valid() {
            return cx;
        }
    }
    if let Some(params) = params {
        let meta = MetaCarrier(params);
        let cx = propagator.extract(&meta);
        if cx.span().span_context().is_valid() {
            return cx;
        }
    }
    propagator.extract(&HeaderCarrier(headers))
}

/// Writes `cx` into `headers` (replacing the client's own, which `cx` descends from).
pub fn into_headers(cx: &Context, headers: &mut HeaderMap) {
    for key in KEYS {
        headers.remove(key);
    }
    propagator().inject_context(cx, &mut HeaderWriter(headers));
}

/// `cx` as the (key, value) pairs it is carried in: `traceparent`, and `tracestate` and
/// `baggage` when there are any.
pub fn into_pairs(cx: &Context) -> Vec<(String, String)> {
    let mut pairs = PairWriter(Vec::with_capacity(3));
    propagator().inject_context(cx, &mut pairs);
    pairs.0
}

struct PairWriter(Vec<(String, String)>);

impl Injector for PairWriter {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

struct HeaderCarrier<'a>(&'a HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        KEYS.to_vec()
    }
}

struct MetaCarrier<'p, 'b>(&'p Payload<'b>);

impl Extractor for MetaCarrier<'_, '_> {
    fn get(&self, key: &str) -> Option<&str> {
        // A string without escapes is the raw value between its quotes; anything else
        // is no trace context.
        let raw = self.0.meta(key)?.get();
        let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
        (!inner.contains('\\')).then_some(inner)
    }

    fn keys(&self) -> Vec<&str> {
        KEYS.to_vec()
    }
}

struct HeaderWriter<'a>(&'a mut HeaderMap);

impl Injector for HeaderWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt;
    use serde_json::value::RawValue;

    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";

    fn traceparent(span: &str) -> String {
        format!("00-{TRACE}-{span}-01")
    }

    #[test]
    fn meta_comes_before_the_headers_and_either_alone_is_the_parent() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            traceparent("1111111111111111").parse().unwrap(),
        );
        let text = format!(r#"{{"_meta":{{"traceparent":"{}"}}}}"#, traceparent(PARENT));
        let raw: Box<RawValue> = serde_json::from_str(&text).unwrap();
        let params = Payload::open(&raw).unwrap().unwrap();
        let cx = from_client(&headers, Some(&params), false);
        let span = cx.span().span_context().clone();
        assert_eq!(span.trace_id().to_string(), TRACE);
        assert_eq!(span.span_id().to_string(), PARENT);
        assert!(span.is_remote());
        let from_headers = from_client(&headers, None, false);
        assert_eq!(
            from_headers.span().span_context().span_id().to_string(),
            "1111111111111111"
        );
        assert!(
            !from_client(&HeaderMap::new(), None, false)
                .span()
                .span_context()
                .is_valid()
        );
    }

    #[test]
    fn the_context_written_replaces_the_clients() {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", "00-garbage".parse().unwrap());
        let cx = from_client(
            &{
                let mut h = HeaderMap::new();
                h.insert("traceparent", traceparent(PARENT).parse().unwrap());
                h
            },
            None,
            false,
        );
        into_headers(&cx, &mut headers);
        assert_eq!(headers["traceparent"], traceparent(PARENT).as_str());
        assert_eq!(headers.get_all("traceparent").iter().count(), 1);
    }
}
