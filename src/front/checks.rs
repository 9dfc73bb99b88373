//! HTTP-level checks on a POST before its body is read as JSON-RPC.

use bytes::Bytes;
use http::HeaderMap;
use http::header::{ACCEPT, CONTENT_TYPE, ORIGIN};

use crate::error::ProxyError;
use crate::mcp::headers::ACCEPT_BOTH;
pub use crate::mcp::headers::Accepts;
use crate::wire::{self, body::Unread};

/// `Content-Type` must be `application/json` (parameters such as `charset` allowed).
pub fn content_type(headers: &HeaderMap) -> Result<(), ProxyError> {
    let essence = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(wire::essence);
    match essence {
        Some(t) if t.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ProxyError::UnsupportedMediaType),
    }
}

/// Reads `Accept` (RFC 9110 §12.5.1). No header means anything is acceptable; a header
/// that allows neither JSON nor an event stream is refused.
pub fn accept(headers: &HeaderMap) -> Result<Accepts, ProxyError> {
    const BOTH: Accepts = Accepts {
        json: true,
        sse: true,
    };
    let values = headers.get_all(ACCEPT);
    let mut first_two = values.iter();
    match (first_two.next(), first_two.next()) {
        (None, _) => return Ok(BOTH),
        // What the Streamable HTTP transport asks every client to send, as they send it:
        // read at a glance.
        (Some(only), None) if only.as_bytes() == ACCEPT_BOTH.as_bytes() => return Ok(BOTH),
        _ => {}
    }
    let mut accepts = Accepts {
        json: false,
        sse: false,
    };
    // A value that is not visible ASCII is left out; the others are split as bytes
    // (their only spaces are spaces and tabs, which `trim_ascii` takes off).
    for range in values
        .iter()
        .filter(|v| v.to_str().is_ok())
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
    {
        let mut parts = range.split(|&b| b == b';');
        let media = parts.next().unwrap_or_default().trim_ascii();
        let refused = parts.any(|p| {
            p.trim_ascii()
                .strip_prefix(b"q=")
                .and_then(|q| std::str::from_utf8(q).ok())
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if refused {
            continue;
        }
        // Media types are case-insensitive (RFC 9110 §8.3.1): compared as such, with
        // no lowercased copy per range.
        let is = |name: &str| media.eq_ignore_ascii_case(name.as_bytes());
        if is("*/*") {
            accepts.json = true;
            accepts.sse = true;
        } else if is("application/*") || is("application/json") {
            accepts.json = true;
        } else if is("text/*") || is("text/event-stream") {
            accepts.sse = true;
        }
    }
    if accepts.json || accepts.sse {
        Ok(accepts)
    } else {
        Err(ProxyError::NotAcceptable)
    }
}

/// Browsers send `Origin`; the 2025-11-25 transport says servers must validate it against
/// DNS rebinding. Loopback origins and the configured ones pass; requests without
/// `Origin` (non-browser clients) pass.
pub fn origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), ProxyError> {
    // Most requests have none (a browser sends one).
    if !wire::holds(headers, &ORIGIN) {
        return Ok(());
    }
    let Some(value) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin = value.to_str().unwrap_or("");
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(origin)) || is_loopback_origin(origin) {
        Ok(())
    } else {
        Err(ProxyError::OriginForbidden {
            origin: origin.to_owned(),
        })
    }
}

fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => rest.split(':').next().unwrap_or(""),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// Reads the whole request body, refusing more than `limit` bytes (early, before any of
/// it is read, when the client announced its length: the body's size hint says it —
/// hyper's from `Content-Length`, the front's own loop's from the body it read whole —
/// without a lookup of the field).
pub async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, ProxyError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(ProxyError::PayloadTooLarge { limit });
    }
    match wire::body::whole(body, limit).await {
        Ok(body) => Ok(body),
        Err(Unread::TooLarge) => Err(ProxyError::PayloadTooLarge { limit }),
        Err(Unread::Failed(e)) => Err(ProxyError::Envelope(crate::jsonrpc::EnvelopeError::Parse(
            format!("the request body could not be read: {e}"),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(name: http::header::HeaderName, value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn accept_ranges() {
        let a = |v| accept(&with(ACCEPT, v));
        assert_eq!(
            a("application/json, text/event-stream").unwrap(),
            Accepts {
                json: true,
                sse: true
            }
        );
        assert_eq!(
            a("application/json").unwrap(),
            Accepts {
                json: true,
                sse: false
            }
        );
        assert_eq!(
            a("text/*").unwrap(),
            Accepts {
                json: false,
                sse: true
            }
        );
        assert_eq!(
            a("*/*;q=0.5").unwrap(),
            Accepts {
                json: true,
                sse: true
            }
        );
        assert_eq!(
            a("Application/JSON , TEXT/Event-Stream;q=0.9").unwrap(),
            Accepts {
                json: true,
                sse: true
            },
            "media types are case-insensitive"
        );
        assert!(a("text/html").is_err());
        assert!(a("application/json;q=0, text/html").is_err());
        assert!(accept(&HeaderMap::new()).is_ok());
        assert_eq!(
            a("\tapplication/json\t;\tq= 0 ,\ttext/event-stream\t").unwrap(),
            Accepts {
                json: false,
                sse: true
            },
            "spaces and tabs around ranges, parameters and weights"
        );
        // Every `Accept` field counts; one that is not visible ASCII is left out whole.
        let mut fields = HeaderMap::new();
        fields.append(
            ACCEPT,
            HeaderValue::from_bytes(b"application/json, caf\xc3\xa9/x").unwrap(),
        );
        fields.append(ACCEPT, HeaderValue::from_static("text/event-stream"));
        assert_eq!(
            accept(&fields).unwrap(),
            Accepts {
                json: false,
                sse: true
            }
        );
        // The transport's own value is read at a glance alone, and the long way in
        // company: the same answer either way.
        let mut fields = HeaderMap::new();
        fields.append(ACCEPT, HeaderValue::from_static(ACCEPT_BOTH));
        fields.append(ACCEPT, HeaderValue::from_static("text/html"));
        assert_eq!(accept(&fields).unwrap(), a(ACCEPT_BOTH).unwrap());
    }

    #[test]
    fn content_types() {
        assert!(content_type(&with(CONTENT_TYPE, "application/json")).is_ok());
        assert!(content_type(&with(CONTENT_TYPE, "Application/JSON; charset=utf-8")).is_ok());
        assert!(content_type(&with(CONTENT_TYPE, "text/plain")).is_err());
        assert!(content_type(&HeaderMap::new()).is_err());
    }

    #[test]
    fn origins() {
        let allowed = vec!["https://app.example.com".to_owned()];
        assert!(origin(&HeaderMap::new(), &allowed).is_ok());
        assert!(origin(&with(ORIGIN, "http://localhost:5173"), &allowed).is_ok());
        assert!(origin(&with(ORIGIN, "http://[::1]:80"), &allowed).is_ok());
        assert!(origin(&with(ORIGIN, "https://app.example.com"), &allowed).is_ok());
        assert!(origin(&with(ORIGIN, "https://evil.example"), &allowed).is_err());
        assert!(origin(&with(ORIGIN, "http://localhost.evil.example"), &allowed).is_err());
        assert!(origin(&with(ORIGIN, "null"), &allowed).is_err());
    }

    /// A body that announces `len` bytes and never sends one.
    struct Announced(u64);

    impl http_body::Body for Announced {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
            std::task::Poll::Pending
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.0)
        }
    }

    #[tokio::test]
    async fn a_body_announced_over_the_limit_is_refused_before_it_is_read() {
        // Refused at once: nothing of it is waited for.
        let refused = read_body(Announced(4097), 4096).await;
        assert!(matches!(
            refused,
            Err(ProxyError::PayloadTooLarge { limit: 4096 })
        ));
        // At the limit it is read (and here waits for bytes that never come).
        let waiting = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            read_body(Announced(4096), 4096),
        );
        assert!(waiting.await.is_err());
        // Read whole: its bytes decide.
        let body = http_body_util::Full::new(Bytes::from_static(b"{}"));
        assert_eq!(
            read_body(body, 2).await.ok(),
            Some(Bytes::from_static(b"{}"))
        );
        let body = http_body_util::Full::new(Bytes::from_static(b"{}"));
        assert!(matches!(
            read_body(body, 1).await,
            Err(ProxyError::PayloadTooLarge { limit: 1 })
        ));
    }
}
