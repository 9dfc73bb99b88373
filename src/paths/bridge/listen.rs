//! An old client's GET stream (2025-11-25: the server's own messages, not tied to a
//! request) in front of a modern upstream: one `subscriptions/listen` upstream (2026-07-28)
//! for the list changes the server can announce and the resources the client
//! subscribed to (`resources/subscribe`, kept by the bridge). Its notifications reach the
//! client without their subscription tag; when the client subscribes or unsubscribes,
//! the upstream listen is opened again with the new set, on the same client stream.

use opentelemetry::context::FutureExt as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use tokio::sync::mpsc;

use super::super::session::addr;
use super::{Bridge, Bridged};
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, RawObject, write, write_json_str};
use crate::mcp::Method;
use crate::mcp::headers::SSE;
use crate::mcp::initialize::Negotiated;
use crate::response::{self, ProxyBody};
use crate::rewrite::to_legacy;
use crate::rewrite::to_modern::{Frame, framed};
use crate::session::{Backing, ClientIdentity, Lease};
use crate::upstream::{Delivery, Messages, Upstream};

/// The proxy's id of its `subscriptions/listen` requests.
const LISTEN_ID: &[u8] = br#""mcp-session-proxy-listen""#;
/// A listen stream is quiet for long stretches; its client ends it by disconnecting.
const LISTEN_IDLE: Duration = Duration::from_secs(24 * 60 * 60);
/// How long to wait before listening again after the upstream ended a listen.
const RELISTEN: Duration = Duration::from_secs(1);

/// The session's GET stream.
pub async fn listen(
    bridge: &Bridge,
    lease: &Lease,
    id: &str,
    forwarded: HeaderMap,
) -> Result<Response<ProxyBody>, ProxyError> {
    let bridged = bridge.session(id);
    let listener = Listener {
        upstream: bridge.upstream.clone(),
        backing: lease.record.backing.clone(),
        client: lease.record.client.clone(),
        bridged,
        forwarded,
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(listener.run(tx).with_current_context());
    let relay = super::super::relay::Relay {
        upstream: &bridge.upstream,
        metrics: &bridge.metrics,
        idle_timeout: LISTEN_IDLE,
    };
    let mut response = response::events(relay.stream(Messages::Channel { first: None, rx }, None));
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
    Ok(response)
}

struct Listener {
    upstream: Upstream,
    backing: Backing,
    client: Option<Arc<ClientIdentity>>,
    bridged: Arc<Bridged>,
    forwarded: HeaderMap,
}

impl Listener {
    /// Listens upstream until the client goes, again whenever its subscriptions change.
    async fn run(self, tx: mpsc::Sender<Delivery>) {
        let mut changed = self.bridged.changed.subscribe();
        loop {
            changed.mark_unchanged();
            let Some(request) = self.request() else {
                // Nothing the server can announce: wait for a subscription.
                tokio::select! {
                    _ = changed.changed() => continue,
                    () = tx.closed() => return,
                }
            };
            let listened = tokio::select! {
                listened = self.upstream.exchange(addr(&self.backing), request, self.forwarded.clone()) => listened,
                () = tx.closed() => return,
            };
            let mut stream = match listened {
                Ok(answer) => answer.messages,
                Err(e) => {
                    tracing::debug!(error = %e, "a bridged session's listen failed; listening again");
                    Messages::Nothing
                }
            };
            loop {
                let next = tokio::select! {
                    next = stream.next_message() => next,
                    _ = changed.changed() => break,
                    () = tx.closed() => return,
                };
                let Some(Ok(message)) = next else {
                    // Ended by the upstream (or failed): listen again after a pause.
                    tokio::select! {
                        () = tokio::time::sleep(RELISTEN) => break,
                        () = tx.closed() => return,
                    }
                };
                if let Some(notification) = passed(&message)
                    && tx.send(Ok(notification)).await.is_err()
                {
                    return;
                }
            }
        }
    }

    /// The `subscriptions/listen` request: every change the server can announce, and the
    /// session's resources; `None` when there is nothing to listen for.
    fn request(&self) -> Option<Bytes> {
        let mut notifications = Vec::with_capacity(128);
        if !filter(&self.backing.negotiated, &self.bridged, &mut notifications) {
            return None;
        }
        let mut params = Vec::with_capacity(notifications.len() + 20);
        params.extend_from_slice(br#"{"notifications":"#);
        params.extend_from_slice(&notifications);
        params.push(b'}');
        let request = write::request(
            LISTEN_ID,
            Method::SubscriptionsListen.as_str(),
            Some(&params),
        );
        let client = self.client.as_deref();
        let frame = Frame {
            client_info: client.and_then(|c| c.client_info.as_deref()),
            capabilities: client.and_then(|c| c.capabilities.as_deref()),
            log_level: None,
        };
        Some(framed(request, frame))
    }
}

/// What the client gets of a listen stream's message: its notifications, untagged (not
/// the acknowledgement, nor the listen's own end).
fn passed(message: &[u8]) -> Option<Bytes> {
    let envelope = Envelope::parse(message).ok()?;
    if envelope.kind != Kind::Notification
        || envelope.method() == Method::SubscriptionsAcknowledged.as_str()
    {
        return None;
    }
    let params = envelope
        .params
        .and_then(to_legacy::untagged)
        .map(|p| write::notification(envelope.method(), Some(&p)));
    Some(params.unwrap_or_else(|| Bytes::copy_from_slice(message)))
}

/// The filter of the session's listen: list changes the server announces, and the
/// subscribed resources when it takes subscriptions. Whether there is anything in it.
fn filter(negotiated: &Negotiated, bridged: &Bridged, out: &mut Vec<u8>) -> bool {
    let caps = RawObject::parse(&negotiated.capabilities).unwrap_or_default();
    let flag = |name: &str, key: &str| {
        caps.get(name)
            .and_then(RawObject::parse)
            .is_some_and(|c| c.get(key).is_some_and(|v| v.get() == "true"))
    };
    let mut members: Vec<(&str, Vec<u8>)> = Vec::new();
    for (capability, member) in [
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ] {
        if flag(capability, "listChanged") {
            members.push((member, b"true".to_vec()));
        }
    }
    let uris = bridged.subscriptions.lock().clone();
    if flag("resources", "subscribe") && !uris.is_empty() {
        let mut list = b"[".to_vec();
        for (i, uri) in uris.iter().enumerate() {
            if i > 0 {
                list.push(b',');
            }
            write_json_str(&mut list, uri);
        }
        list.push(b']');
        members.push(("resourceSubscriptions", list));
    }
    let borrowed: Vec<(&str, &[u8])> = members.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    RawObject::default().write(out, &borrowed);
    !members.is_empty()
}
