//! Telling the other replicas (`cluster.peers`) which sealed sessions were deleted here,
//! and asking them for theirs at start-up.
//!
//! A sealed sessionId is its own record, so only a tombstone keeps a deleted one from
//! serving (`session::Tombstones`); a sealed-only cluster shares nothing but its keys, so
//! each replica tells its peers itself, over `POST {peer}/cluster/tombstones`, signed
//! like a forwarded request (`signature`): one task per peer sends it the burials it has
//! not had yet, in order, in batches, retrying with a growing pause (up to 30 s) while it
//! does not answer. A delete waits (at most [`SETTLE`]) until every peer that answered
//! its last push has the tombstone, so that once the client hears its delete answered, the
//! id is refused at every replica that is up. A starting replica asks every peer for the
//! tombstones it holds (`GET`), so a restart forgets nothing a peer remembers.
//!
//! The endpoint answers only requests a replica of this cluster signed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::{Cluster, FORWARDED, Signed};
use crate::error::ProxyError;
use crate::response::{self, ProxyBody};
use crate::session::{IdHash, Tombstone, now_millis};
use crate::throttle::Throttle;

/// Where replicas tell each other of deleted sealed sessions.
pub const CLUSTER_PATH: &str = "/cluster/tombstones";

/// Burials sent to a peer in one request.
const BATCH: usize = 1000;
/// The largest push a replica takes (a batch is far smaller).
const MAX_PUSH_BYTES: usize = 256 * 1024;
/// Bytes per tombstone on the wire, at most (for the size of a whole set).
const WIRE_BYTES: usize = 64;
/// How long one push or one start-up request may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest pause between pushes to a peer that does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a delete waits for the peers to have its tombstone.
pub const SETTLE: Duration = Duration::from_secs(2);

/// One other replica.
#[derive(Debug)]
pub struct Peer {
    /// Its base URL.
    url: String,
    /// The latest of this replica's burials it has.
    acked: AtomicU64,
    /// Whether it answered the last push (a delete waits only for those that did).
    answering: AtomicBool,
}

impl Peer {
    pub fn new(url: String) -> Peer {
        Peer {
            url,
            acked: AtomicU64::new(0),
            answering: AtomicBool::new(true),
        }
    }
}

/// Tombstones on the wire: `{"tombstones": [["<32 hex digits>", <until, ms>], …]}`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Wire {
    tombstones: Vec<(String, u64)>,
}

impl Wire {
    fn of(stones: impl IntoIterator<Item = Tombstone>) -> Wire {
        Wire {
            tombstones: stones
                .into_iter()
                .map(|stone| (hex(&stone.id), stone.until))
                .collect(),
        }
    }

    fn stones(&self) -> Vec<Tombstone> {
        self.tombstones
            .iter()
            .filter_map(|(id, until)| {
                Some(Tombstone {
                    id: unhex(id)?,
                    until: *until,
                })
            })
            .collect()
    }
}

fn hex(id: &IdHash) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<IdHash> {
    let mut out = [0u8; 16];
    if text.len() != 32 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Cluster {
    /// One task per peer telling it of this replica's burials (none without the sealed
    /// store or without peers). They stop when their handles are aborted.
    pub fn spawn_peers(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        if self.tombstones.is_none() {
            return Vec::new();
        }
        self.peers
            .iter()
            .map(|peer| {
                let cluster = self.clone();
                let peer = peer.clone();
                tokio::spawn(async move { cluster.tell(&peer).await })
            })
            .collect()
    }

    /// Sends `peer` every burial it has not had, as they come.
    async fn tell(&self, peer: &Peer) {
        let Some(stones) = &self.tombstones else {
            return;
        };
        let mut latest = stones.latest();
        let mut backoff = Duration::from_millis(100);
        let mut warnings = Throttle::every(Duration::from_secs(30));
        loop {
            latest.borrow_and_update();
            let batch = stones.buried_after(peer.acked.load(Ordering::Acquire), BATCH);
            let Some(&(last, _)) = batch.last() else {
                if latest.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let wire = Wire::of(batch.into_iter().map(|(_, stone)| stone));
            match self.push(peer, &wire).await {
                Ok(()) => {
                    peer.acked.store(last, Ordering::Release);
                    peer.answering.store(true, Ordering::Release);
                    backoff = Duration::from_millis(100);
                    self.acked.notify_waiters();
                }
                Err(e) => {
                    peer.answering.store(false, Ordering::Release);
                    self.acked.notify_waiters();
                    if let Some(more) = warnings.admit() {
                        tracing::warn!(
                            peer = %peer.url,
                            error = %e,
                            retry_in_ms = backoff.as_millis() as u64,
                            similar_since_last_warning = more,
                            "a peer replica was not told of deleted sealed sessions; retrying \
                             (until it is, it serves them)"
                        );
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    async fn push(&self, peer: &Peer, wire: &Wire) -> Result<(), String> {
        let body = Bytes::from(serde_json::to_vec(wire).map_err(|e| e.to_string())?);
        let response = self.to_peer(peer, Method::POST, body).await?;
        match response.status() {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(()),
            status => Err(format!("it answered HTTP {status}")),
        }
    }

    /// A signed request of this replica's own to `peer`'s cluster endpoint.
    async fn to_peer(
        &self,
        peer: &Peer,
        method: Method,
        body: Bytes,
    ) -> Result<Response<hyper::body::Incoming>, String> {
        let uri: Uri = format!("{}{CLUSTER_PATH}", peer.url)
            .parse()
            .map_err(|e| format!("not a URL: {e}"))?;
        let mut headers = HeaderMap::new();
        let signature = self.signer.sign(
            &Signed {
                method: &method,
                path: CLUSTER_PATH,
                headers: &headers,
                body: &body,
            },
            None,
            now_millis(),
        );
        headers.insert(FORWARDED.clone(), signature);
        if !body.is_empty() {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
        }
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        match tokio::time::timeout(PEER_TIMEOUT, self.client.request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", PEER_TIMEOUT.as_millis())),
        }
    }

    /// Waits (at most `within`) until every peer that answers has this replica's latest
    /// burial: a delete answered after it is refused at each of them.
    pub async fn settle(&self, within: Duration) {
        let Some(stones) = &self.tombstones else {
            return;
        };
        if self.peers.is_empty() {
            return;
        }
        let target = *stones.latest().borrow();
        let settled = async {
            loop {
                let acked = self.acked.notified();
                tokio::pin!(acked);
                acked.as_mut().enable();
                let pending = self.peers.iter().any(|peer| {
                    peer.answering.load(Ordering::Acquire)
                        && peer.acked.load(Ordering::Acquire) < target
                });
                if !pending {
                    return;
                }
                acked.await;
            }
        };
        if tokio::time::timeout(within, settled).await.is_err() {
            tracing::debug!("a delete did not wait any longer for the peers to have it");
        }
    }

    /// At start-up: asks every peer (at once, each for at most 2 s) for the tombstones it
    /// holds, and keeps them. How many were learned.
    pub async fn catch_up(self: &Arc<Self>) -> usize {
        let Some(stones) = &self.tombstones else {
            return 0;
        };
        let mut asks = tokio::task::JoinSet::new();
        for peer in &self.peers {
            let (cluster, peer) = (self.clone(), peer.clone());
            asks.spawn(async move { cluster.ask(&peer).await });
        }
        let mut learned = 0;
        while let Some(told) = asks.join_next().await {
            let told = told.unwrap_or_default();
            learned += told.len();
            stones.learn(&told, now_millis());
        }
        learned
    }

    /// The tombstones `peer` holds (none when it does not answer, which is logged).
    async fn ask(&self, peer: &Peer) -> Vec<Tombstone> {
        let limit = self
            .tombstones
            .as_ref()
            .map_or(0, |stones| stones.capacity().saturating_mul(WIRE_BYTES))
            + 1024;
        let answered = async {
            let response = self.to_peer(peer, Method::GET, Bytes::new()).await?;
            if response.status() != StatusCode::OK {
                return Err(format!("it answered HTTP {}", response.status()));
            }
            let body = tokio::time::timeout(
                PEER_TIMEOUT,
                Limited::new(response.into_body(), limit).collect(),
            )
            .await
            .map_err(|_| "its answer did not arrive in time".to_owned())?
            .map_err(|e| e.to_string())?
            .to_bytes();
            serde_json::from_slice::<Wire>(&body).map_err(|e| e.to_string())
        };
        match answered.await {
            Ok(wire) => wire.stones(),
            Err(e) => {
                tracing::warn!(peer = %peer.url, error = %e, "a peer replica could not be asked for its deleted sealed sessions");
                Vec::new()
            }
        }
    }

    /// `{CLUSTER_PATH}`: a peer telling of its deleted sealed sessions (`POST`) or asking
    /// for this replica's (`GET`). Only for requests a replica of this cluster signed;
    /// there is nothing here without the sealed store.
    pub fn serve_peer(
        &self,
        method: &Method,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Response<ProxyBody> {
        let signed = Signed {
            method,
            path: CLUSTER_PATH,
            headers,
            body,
        };
        match self.verify(&signed) {
            Ok(Some(_)) => {}
            Ok(None) => {
                // Nothing here for anyone else: as if the path did not exist.
                return response::error(
                    &ProxyError::NoSuchPath {
                        path: CLUSTER_PATH.to_owned(),
                    },
                    None,
                );
            }
            Err(e) => return response::error(&e, None),
        }
        let Some(stones) = &self.tombstones else {
            return response::status(StatusCode::NOT_FOUND);
        };
        match *method {
            Method::POST => match serde_json::from_slice::<Wire>(body) {
                Ok(wire) => {
                    stones.learn(&wire.stones(), now_millis());
                    response::status(StatusCode::NO_CONTENT)
                }
                Err(_) => response::status(StatusCode::BAD_REQUEST),
            },
            Method::GET => {
                let wire = Wire::of(stones.live(now_millis()));
                let body = serde_json::to_vec(&wire).unwrap_or_default();
                response::json(StatusCode::OK, Bytes::from(body))
            }
            _ => response::status(StatusCode::METHOD_NOT_ALLOWED),
        }
    }

    /// The largest body a peer may send (a push; a batch is far smaller).
    pub fn max_push_bytes(&self) -> usize {
        MAX_PUSH_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_cross_the_wire_and_nothing_else_does() {
        let stone = Tombstone {
            id: crate::session::Tombstones::hash("mcps_x"),
            until: 42,
        };
        let text = serde_json::to_string(&Wire::of([stone])).unwrap();
        assert!(
            !text.contains("mcps_x"),
            "the id itself never travels: {text}"
        );
        let back: Wire = serde_json::from_str(&text).unwrap();
        assert_eq!(back.stones(), [stone]);
        let junk: Wire =
            serde_json::from_str(r#"{"tombstones":[["zz",1],["00",2],["0011",3]]}"#).unwrap();
        assert!(junk.stones().is_empty());
    }
}
