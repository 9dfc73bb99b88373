//! Sending a request the proxy framed as 2026-07-28 for a client that is not (a
//! data-layer session, an old client through the bridge): the `Mcp-Param-*` headers a
//! `tools/call` owes its tool's `x-mcp-header` arguments (2026-07-28, "Custom Headers
//! from Tool Parameters"), from what the upstream's `tools/list` declared (`mcp::tools`).
//! The namespace is the proxy's on these requests: a client's own `Mcp-Param-*` headers
//! do not go up, so no header can stand for an argument the body does not carry.
//!
//! A server that finds them missing or wrong answers -32020 before running the tool. The
//! proxy's knowledge may be missing (no `tools/list` seen yet) or stale (the tools
//! changed), so it then lists the tools itself once (every page, at most [`MAX_PAGES`])
//! and sends the call once more, as the specification's clients do; whatever that
//! answers goes to the client as it came. Which headers a declaration makes is
//! `mcp::headers`; sending is `upstream`.

use bytes::Bytes;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::jsonrpc::{Envelope, Kind, code, write};
use crate::mcp::headers;
use crate::mcp::tools::ToolHints;
use crate::rewrite::to_modern::{Frame, framed};
use crate::upstream::{Answer, Messages, SessionAddr, Upstream, UpstreamError};

/// Pages of `tools/list` the proxy reads when it lists the tools itself.
pub const MAX_PAGES: usize = 8;

/// The request id of the proxy's own `tools/list` (the upstream sees the proxy's
/// renamed id anyway: `upstream::ids`).
const LIST_ID: &[u8] = br#""mcp-session-proxy-tools-list""#;

/// Sends `body` (already framed with `frame`) to the modern upstream in `route`, with the
/// `Mcp-Param-*` headers of a `tools/call`; on -32020, lists the tools and tries once more.
pub async fn exchange(
    upstream: &Upstream,
    tools: &ToolHints,
    route: SessionAddr<'_>,
    body: Bytes,
    forwarded: &HeaderMap,
    frame: Frame<'_>,
) -> Result<Answer, UpstreamError> {
    // Room for what the transport puts in the map (the message's mirrored `Mcp-Method`
    // and `Mcp-Name`, a trace context; its own fields it writes beside the map)
    // without growing it again.
    let mut kept = HeaderMap::with_capacity(forwarded.len() + 6);
    for (name, value) in forwarded {
        if !headers::is_param_header(name) {
            kept.append(name.clone(), value.clone());
        }
    }
    let forwarded = kept;
    let call = Envelope::parse(&body)
        .ok()
        .filter(|e| e.kind == Kind::Request && e.method() == "tools/call")
        .map(|e| e.params.map(ToOwned::to_owned));
    let Some(params) = call else {
        return upstream.exchange(route, body, forwarded).await;
    };
    let with_params = |forwarded: &HeaderMap| {
        let mut sent = forwarded.clone();
        for (name, value) in tools.param_headers(params.as_deref()) {
            sent.insert(name, value);
        }
        sent
    };
    let answer = upstream
        .exchange(route, body.clone(), with_params(&forwarded))
        .await?;
    if !header_mismatch(&answer) {
        return Ok(answer);
    }
    tracing::debug!(
        upstream = %upstream.label(),
        "a tools/call was refused for its headers (-32020): listing the tools and sending it again"
    );
    // Boxed: rare, and it would make every call to a 2026-07-28 server's future larger.
    Box::pin(list_tools(upstream, tools, route, &forwarded, Some(frame))).await;
    upstream
        .exchange(route, body, with_params(&forwarded))
        .await
}

/// Whether an answer is a JSON error body with 2026-07-28's HeaderMismatch (-32020).
fn header_mismatch(answer: &Answer) -> bool {
    #[derive(Deserialize)]
    struct Refusal {
        error: Option<Code>,
    }
    #[derive(Deserialize)]
    struct Code {
        code: i64,
    }
    let Messages::One(Some(body)) = &answer.messages else {
        return false;
    };
    serde_json::from_slice::<Refusal>(body)
        .ok()
        .and_then(|r| r.error)
        .is_some_and(|e| e.code == i64::from(code::HEADER_MISMATCH))
}

/// Lists the upstream's tools (framed as the session's requests are, for a modern
/// upstream; as they are for a legacy one), every page up to [`MAX_PAGES`], learning
/// from each. A failure only ends the listing: the call is sent again with what is
/// known.
pub(super) async fn list_tools(
    upstream: &Upstream,
    tools: &ToolHints,
    route: SessionAddr<'_>,
    forwarded: &HeaderMap,
    frame: Option<Frame<'_>>,
) {
    #[derive(Deserialize)]
    struct Page<'a> {
        #[serde(borrow)]
        result: Option<Next<'a>>,
    }
    #[derive(Deserialize)]
    struct Next<'a> {
        #[serde(rename = "nextCursor", borrow, default)]
        next_cursor: Option<&'a RawValue>,
    }
    let mut cursor: Option<Vec<u8>> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| {
            let mut params = b"{\"cursor\":".to_vec();
            params.extend_from_slice(c);
            params.push(b'}');
            params
        });
        let request = write::request(LIST_ID, "tools/list", params.as_deref());
        let request = match frame {
            Some(frame) => framed(request, frame),
            None => request,
        };
        let answered = match upstream.exchange(route, request, forwarded.clone()).await {
            Ok(mut answer) => {
                answer
                    .messages
                    .response_to(LIST_ID, upstream.timeout())
                    .await
            }
            Err(e) => Err(e),
        };
        let page = match answered {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(upstream = %upstream.label(), error = %e, "listing the tools failed");
                return;
            }
        };
        tools.learn(&page);
        let next = serde_json::from_slice::<Page<'_>>(&page)
            .ok()
            .and_then(|p| p.result?.next_cursor)
            .filter(|c| c.get().starts_with('"'))
            .map(|c| c.get().as_bytes().to_vec());
        match next {
            Some(next) => cursor = Some(next),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;

    fn json_answer(body: &str) -> Answer {
        Answer {
            status: StatusCode::BAD_REQUEST,
            headers: HeaderMap::new(),
            messages: Messages::One(Some(Bytes::from(body.to_owned()))),
            renamed: None,
        }
    }

    #[test]
    fn only_a_header_mismatch_asks_for_a_listing() {
        let refused = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Bad Request"}}"#;
        assert!(header_mismatch(&json_answer(refused)));
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32021,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            "not json",
        ] {
            assert!(!header_mismatch(&json_answer(other)), "{other}");
        }
        assert!(!header_mismatch(&Answer::accepted()));
    }
}
