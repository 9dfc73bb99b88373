//! Legacy pass-through: a message with no data-layer session goes to the upstream as the
//! client sent it, and the answer comes back as the upstream sent it, streamed.
//!
//! Only a Streamable HTTP upstream has a session-less way in; a stdio upstream's sessions
//! are its processes, so there a message that names no session is answered -32044.

use bytes::Bytes;
use http::{HeaderMap, Method, Response};
use http_body_util::Full;

use super::App;
use super::body::ProxyBody;
use super::headers;
use crate::error::ProxyError;
use crate::upstream::media_type;

pub async fn forward(
    app: &App,
    method: Method,
    client_headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<ProxyBody>, ProxyError> {
    let Some(upstream) = app.upstream.http() else {
        return Err(ProxyError::SessionRequired {
            method: method.to_string(),
        });
    };
    let forwarded = headers::to_upstream_passthrough(client_headers);
    let upstream_error = |source| ProxyError::Upstream {
        upstream: upstream.label().to_string(),
        source,
    };
    let request = upstream
        .request(method, None, &forwarded, Full::new(body))
        .map_err(upstream_error)?;
    let response = upstream.send(request, None).await.map_err(upstream_error)?;
    let (mut parts, incoming) = response.into_parts();
    let body = app.untouched(incoming, media_type(&parts.headers));
    parts.headers = headers::to_client_passthrough(&parts.headers);
    Ok(Response::from_parts(parts, body))
}
