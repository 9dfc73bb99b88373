//! Proxy replicas and what lives in one of them only.
//!
//! A stdio child, an `input_required` call parked for its retry, a stdio session's listen
//! stream: each exists in one process. Whatever names it (a session record, a sealed
//! sessionId, a `requestState`) also names that process, its *owner*:
//! `<advertised URL>#<incarnation>`, the incarnation being random per process start. A
//! message for it that lands on another replica is forwarded there over HTTP, as it came,
//! with [`FORWARDED`] set; a replica receiving a forwarded message it does not own does
//! not forward it again (no loops). An owner that does not answer is reported to the
//! client as such; an owner at this replica's own address but of another incarnation is
//! gone for good (this process restarted), and so is what it held.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::headers;
use crate::error::ProxyError;
use crate::response::ProxyBody;
use crate::upstream::UpstreamBody;

/// Set on a message one replica forwards to another.
pub static FORWARDED: HeaderName = HeaderName::from_static("mcp-proxy-forwarded");

/// Where a process-local thing is, seen from this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whereabouts<'a> {
    /// Here (or it lives nowhere in particular).
    Here,
    /// Another replica holds it.
    There(&'a str),
    /// It was held by an earlier run of this very replica: it is gone.
    Gone,
}

/// This replica, as others reach it, and the client that reaches them.
#[derive(Debug)]
pub struct Cluster {
    /// The base URL other replicas reach this one at, e.g. `http://10.0.0.5:8080`.
    advertise: String,
    /// `<advertise>#<incarnation>`.
    me: Arc<str>,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Cluster {
    /// This replica at `advertise`; `timeout` bounds a forwarded request's response head.
    pub fn new(advertise: String, timeout: Duration) -> Cluster {
        let mut incarnation = [0u8; 8];
        rand::fill(&mut incarnation);
        let mut me = advertise.clone();
        me.push('#');
        for byte in incarnation {
            me.push_str(&format!("{byte:02x}"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        Cluster {
            advertise,
            me: me.into(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        }
    }

    /// This replica as an owner: `<advertise>#<incarnation>`.
    pub fn me(&self) -> &Arc<str> {
        &self.me
    }

    /// Where the thing `owner` holds is.
    pub fn whereabouts<'a>(&self, owner: Option<&'a str>) -> Whereabouts<'a> {
        let Some(owner) = owner else {
            return Whereabouts::Here;
        };
        if owner == &*self.me {
            return Whereabouts::Here;
        }
        match owner.split_once('#') {
            Some((address, _)) if address == self.advertise => Whereabouts::Gone,
            _ => Whereabouts::There(owner),
        }
    }

    /// Sends a client's request on to the replica `owner` at `path` and returns its answer
    /// as it is (streamed). `session_id` names what is forwarded, for the error.
    pub async fn forward(
        &self,
        owner: &str,
        path: &str,
        method: Method,
        client_headers: &HeaderMap,
        body: Bytes,
        session_id: &str,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let unreachable = |detail: String| ProxyError::OwnerUnreachable {
            session_id: session_id.to_owned(),
            owner: owner.split('#').next().unwrap_or(owner).to_owned(),
            detail,
        };
        if client_headers.contains_key(&FORWARDED) {
            return Err(unreachable(
                "the message was forwarded here by another replica, which believes this one holds it; it does not (the replicas disagree on their addresses)".into(),
            ));
        }
        let base = owner.split('#').next().unwrap_or(owner);
        let uri: Uri = format!("{base}{path}")
            .parse()
            .map_err(|e| unreachable(format!("the owner's address is not a URL: {e}")))?;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers::to_upstream_passthrough(client_headers);
        request
            .headers_mut()
            .insert(FORWARDED.clone(), HeaderValue::from_static("1"));
        tracing::debug!(owner = %base, "forwarding to the replica that holds the session");
        let response = match tokio::time::timeout(self.timeout, self.client.request(request)).await
        {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {} ms",
                    self.timeout.as_millis()
                )));
            }
        };
        let (mut parts, body) = response.into_parts();
        parts.headers = headers::to_client_passthrough(&parts.headers);
        Ok(Response::from_parts(
            parts,
            ProxyBody::Untouched {
                body: UpstreamBody::detached(body),
                open: None,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_here_there_or_gone() {
        let cluster = Cluster::new("http://127.0.0.1:8080".into(), Duration::from_secs(1));
        let me = cluster.me().clone();
        assert_eq!(cluster.whereabouts(None), Whereabouts::Here);
        assert_eq!(cluster.whereabouts(Some(&me)), Whereabouts::Here);
        assert_eq!(
            cluster.whereabouts(Some("http://127.0.0.1:8081#00")),
            Whereabouts::There("http://127.0.0.1:8081#00")
        );
        assert_eq!(
            cluster.whereabouts(Some("http://127.0.0.1:8080#00")),
            Whereabouts::Gone
        );
        let other = Cluster::new("http://127.0.0.1:8080".into(), Duration::from_secs(1));
        assert_ne!(other.me(), cluster.me(), "every start is a new incarnation");
    }
}
