//! Proxy replicas and what lives in one of them only.
//!
//! A stdio child, an `input_required` call parked for its retry, a stdio session's listen
//! stream: each exists in one process. Whatever names it (a session record, a sealed
//! sessionId, a sealed `requestState`) also names that process, its *owner*:
//! `<advertised URL>#<incarnation>`, the incarnation being random per process start. A
//! message for it that lands on another replica is forwarded there over HTTP, as it came,
//! with a signed [`FORWARDED`] header (`signature`); a replica receiving a forwarded
//! message it does not own does not forward it again (no loops). An owner that does not
//! answer is reported to the client as such (never by its address: that is internal); an
//! owner at this replica's own address but of another incarnation is gone for good (this
//! process restarted), and so is what it held.
//!
//! Forwarded requests travel on one HTTP/2 connection per owner (cleartext, prior
//! knowledge), so however many are in flight they take one place among the owner's
//! client connections, and none of them waits for a connection of its own. What one
//! caller may have in flight on it is capped (`cluster.max_forwarded_per_caller`), so that
//! a caller's hanging calls cannot take every stream; the flow-control windows are sized
//! so that a stream nobody reads stalls only itself (the connection's window holds every
//! stream's in full).
//!
//! With sealed ids, a deleted session is told to the replicas in `cluster.peers`
//! (`peers`).

mod peers;
mod signature;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;

use crate::telemetry::client::{ClientSpan, Peer};

pub use peers::{CLUSTER_PATH, SETTLE};
pub use signature::{FORWARDED, Forged, FromPeer, SKEW, Signed, Signer};

use super::headers;
use crate::error::ProxyError;
use crate::fairness::InFlight;
use crate::mcp::caller::{Caller, CallerKey};
use crate::response::ProxyBody;
use crate::session::{Tombstones, now_millis};
use crate::upstream::UpstreamBody;

/// Streams one connection to another replica carries at once: the owner's (hyper's
/// HTTP/2 server) default.
const STREAMS_PER_CONNECTION: u32 = 200;
/// What one forwarded response may have on its way unread.
const STREAM_WINDOW: u32 = 256 * 1024;

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

/// How this replica is set up among the others.
#[derive(Debug)]
pub struct ClusterSettings<'a> {
    /// The base URL other replicas reach this one at, e.g. `http://10.0.0.5:8080`.
    pub advertise: String,
    /// Bounds a forwarded request's response head.
    pub timeout: Duration,
    /// The state keys every replica shares (the first signs).
    pub keys: &'a [Vec<u8>],
    /// Requests of one caller forwarded at once.
    pub max_forwarded_per_caller: usize,
    /// The other replicas' base URLs.
    pub peers: Vec<String>,
    /// Deleted sealed sessions (with the sealed store), to tell the peers of.
    pub tombstones: Option<Arc<Tombstones>>,
}

/// A request to send on to the replica holding what it names.
#[derive(Debug)]
pub struct Forward<'a> {
    /// `<advertised URL>#<incarnation>`.
    pub owner: &'a str,
    /// The endpoint path at the owner.
    pub path: &'a str,
    pub method: Method,
    /// The client's headers (credentials included: the owner checks them again).
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    /// What it names, for the error (`""` for a `requestState`).
    pub session_id: &'a str,
    /// Whom it is from: its place among the requests in flight is that caller's.
    pub caller: Caller,
    /// The client's address (for a caller without credentials; told to the owner).
    pub client: Option<IpAddr>,
}

/// This replica, as others reach it, and the client that reaches them.
#[derive(Debug)]
pub struct Cluster {
    /// The base URL other replicas reach this one at.
    advertise: String,
    /// `<advertise>#<incarnation>`.
    me: Arc<str>,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
    signer: Signer,
    /// Requests forwarded from here, per caller.
    forwarded: Arc<InFlight>,
    peers: Vec<Arc<peers::Peer>>,
    tombstones: Option<Arc<Tombstones>>,
    /// Signalled whenever a peer has taken tombstones.
    acked: Notify,
}

impl Cluster {
    pub fn new(settings: ClusterSettings<'_>) -> Cluster {
        let mut incarnation = [0u8; 8];
        rand::fill(&mut incarnation);
        let mut me = settings.advertise.clone();
        me.push('#');
        for byte in incarnation {
            me.push_str(&format!("{byte:02x}"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .http2_initial_connection_window_size(STREAM_WINDOW * STREAMS_PER_CONNECTION)
            .build(connector);
        let peers = settings
            .peers
            .into_iter()
            .filter(|peer| *peer != settings.advertise)
            .map(|url| Arc::new(peers::Peer::new(url)))
            .collect();
        Cluster {
            advertise: settings.advertise,
            me: me.into(),
            client,
            timeout: settings.timeout,
            signer: Signer::new(settings.keys),
            forwarded: InFlight::new(settings.max_forwarded_per_caller),
            peers,
            tombstones: settings.tombstones,
            acked: Notify::new(),
        }
    }

    /// The deleted sealed sessions refused here (with the sealed store).
    pub fn tombstones(&self) -> Option<&Arc<Tombstones>> {
        self.tombstones.as_ref()
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

    /// Whether a request carries [`FORWARDED`] and, if so, whether another replica of this
    /// cluster signed it: `None` for a client's own request, the replica's word on whom
    /// it came from for a forwarded one, and an error — refused before anything else —
    /// for a header a replica did not write (a client cannot pass for a replica).
    pub fn verify(&self, request: &Signed<'_>) -> Result<Option<FromPeer>, ProxyError> {
        // A client's own request (most) is told at a glance.
        if !crate::wire::holds(request.headers, &FORWARDED) {
            return Ok(None);
        }
        let Some(value) = request.headers.get(&FORWARDED) else {
            return Ok(None);
        };
        match self.signer.verify(value, request, now_millis()) {
            Ok(from) => Ok(Some(from)),
            Err(why) => {
                tracing::info!(reason = %why, "a request carried mcp-proxy-forwarded that no replica of this cluster signed; refused");
                Err(ProxyError::ForgedForwarding(why))
            }
        }
    }

    /// Sends a client's request on to the replica that owns what it names and returns its
    /// answer as it is (streamed); the caller's place among the forwarded requests is held
    /// until the answer ends.
    pub async fn forward(&self, to: Forward<'_>) -> Result<Response<ProxyBody>, ProxyError> {
        let base = to.owner.split('#').next().unwrap_or(to.owner);
        let failed = |detail: String, down: bool| {
            // The owner's address is for the log only: it is internal.
            tracing::warn!(owner = %base, detail = %detail, "the replica holding a session did not answer");
            ProxyError::OwnerUnreachable {
                session_id: to.session_id.to_owned(),
                detail,
                down,
            }
        };
        let unreachable = |detail: String| failed(detail, false);
        if to.headers.contains_key(&FORWARDED) {
            return Err(unreachable(
                "the message was forwarded here by another replica, which believes this one holds it; it does not (the replicas disagree on their addresses: check cluster.advertise)".into(),
            ));
        }
        let who = CallerKey::of(to.caller, to.client);
        let Some(held) = self.forwarded.take(who) else {
            return Err(ProxyError::ForwardLimit {
                max: self.forwarded.max(),
            });
        };
        let uri: Uri = format!("{base}{}", to.path)
            .parse()
            .map_err(|_| unreachable("its advertised address is not a URL".into()))?;
        let body = to.body;
        let mut request = Request::new(Full::new(body.clone()));
        *request.method_mut() = to.method;
        *request.headers_mut() = headers::to_replica_passthrough(to.headers);
        // With traces on, the hop is a span of the request being served, and its context
        // goes to the owner in the headers (signed with them).
        let span = crate::telemetry::active()
            .then(|| {
                let owner = Peer::Tcp(uri.host().unwrap_or_default(), uri.port_u16().unwrap_or(80));
                if let Ok(envelope) = crate::jsonrpc::Envelope::parse(&body) {
                    let method = crate::telemetry::client::Operation(envelope.method().into());
                    request.extensions_mut().insert(method);
                }
                ClientSpan::start(&mut request, owner)
            })
            .flatten();
        *request.uri_mut() = uri;
        let signature = self.signer.sign(
            &Signed {
                method: request.method(),
                path: to.path,
                headers: request.headers(),
                body: &body,
            },
            to.client,
            now_millis(),
        );
        request.headers_mut().insert(FORWARDED.clone(), signature);
        tracing::debug!(owner = %base, "forwarding to the replica that holds the session");
        let sent = tokio::time::timeout(self.timeout, self.client.request(request)).await;
        if let Some(span) = span {
            match &sent {
                Ok(Ok(response)) => span.finish(Ok(response.status())),
                Ok(Err(e)) => span.finish(Err(e)),
                Err(_) => span.finish(Err(&"no answer in time")),
            }
        }
        let response = match sent {
            Ok(Ok(response)) => response,
            // The connection refused: nothing listens at the owner's address any more
            // (a timeout or an unreachable network is no proof of that).
            Ok(Err(e)) => return Err(failed(e.to_string(), refused(&e))),
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {} ms",
                    self.timeout.as_millis()
                )));
            }
        };
        let (mut parts, body) = response.into_parts();
        headers::to_client_passthrough(&mut parts.headers);
        Ok(Response::from_parts(
            parts,
            ProxyBody::Forwarded {
                body: UpstreamBody::detached(body),
                held,
            },
        ))
    }
}

/// Whether `error` is a refused connection.
fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(advertise: &str) -> Cluster {
        Cluster::new(ClusterSettings {
            advertise: advertise.into(),
            timeout: Duration::from_secs(1),
            keys: &[vec![1; 32]],
            max_forwarded_per_caller: 2,
            peers: vec![advertise.into(), "http://127.0.0.1:9".into()],
            tombstones: None,
        })
    }

    #[test]
    fn an_owner_is_here_there_or_gone() {
        let cluster = cluster("http://127.0.0.1:8080");
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
        let other = self::cluster("http://127.0.0.1:8080");
        assert_ne!(other.me(), cluster.me(), "every start is a new incarnation");
        assert_eq!(cluster.peers.len(), 1, "a replica is not its own peer");
    }

    #[test]
    fn a_client_cannot_pass_for_a_replica() {
        let cluster = cluster("http://127.0.0.1:8080");
        fn request(headers: &HeaderMap) -> Signed<'_> {
            Signed {
                method: &Method::POST,
                path: "/mcp",
                headers,
                body: b"{}",
            }
        }
        let mut headers = HeaderMap::new();
        assert_eq!(cluster.verify(&request(&headers)).unwrap(), None);
        headers.insert(&FORWARDED, http::HeaderValue::from_static("1"));
        assert!(matches!(
            cluster.verify(&request(&headers)),
            Err(ProxyError::ForgedForwarding(Forged::Malformed))
        ));
        // Signed by a replica with the same keys: from the client it names.
        let none = HeaderMap::new();
        let signed = cluster.signer.sign(
            &request(&none),
            Some("10.0.0.1".parse().unwrap()),
            now_millis(),
        );
        headers.insert(&FORWARDED, signed);
        assert_eq!(
            cluster.verify(&request(&headers)).unwrap(),
            Some(FromPeer {
                client: Some("10.0.0.1".parse().unwrap())
            })
        );
    }
}
