//! Old clients (2025-11-25 and earlier) with no data-layer session: the request goes to
//! the upstream as the client sent it, and the answer comes back as the upstream sent it,
//! streamed. Only a Streamable HTTP upstream has such a session-less way in (the route
//! refuses the rest).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Response};

use super::headers;
use super::session::upstream_error;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::response::ProxyBody;
use crate::upstream::{Media, Upstream, media_type};

/// See the module documentation.
#[derive(Debug)]
pub struct PassThrough {
    upstream: Upstream,
    metrics: Arc<Metrics>,
}

impl PassThrough {
    pub fn new(upstream: Upstream, metrics: Arc<Metrics>) -> Self {
        PassThrough { upstream, metrics }
    }

    /// Forwards one request (`POST` with its body, `GET`, `DELETE`).
    pub async fn forward(
        &self,
        method: Method,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let forwarded = headers::to_upstream_passthrough(client_headers);
        let response = self
            .upstream
            .forward(method, &forwarded, body)
            .await
            .map_err(|e| upstream_error(&self.upstream, e))?;
        let (mut parts, body) = response.into_parts();
        let open = (media_type(&parts.headers) == Media::EventStream)
            .then(|| self.metrics.stream_opened());
        parts.headers = headers::to_client_passthrough(&parts.headers);
        Ok(Response::from_parts(
            parts,
            ProxyBody::Untouched { body, open },
        ))
    }
}
