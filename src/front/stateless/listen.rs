//! `subscriptions/listen` (2026-07-28) on top of a legacy server: a dedicated upstream
//! session, its GET stream (or a stdio child's unclaimed messages) and
//! `resources/subscribe` for each requested resource. The stream opens with
//! `notifications/subscriptions/acknowledged` listing what the upstream can deliver; then
//! only the notification types the client opted into pass, each tagged with the
//! subscription id (the listen request's id). Closing the stream ends the upstream
//! session.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response};
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::super::App;
use super::super::body::ProxyBody;
use super::super::sessions::Message;
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, RawObject, raw_str, write_json_str};
use crate::mcp::headers::SSE;
use crate::mcp::meta::{self, Payload};
use crate::sse::{MessageStream, Unchanged};
use crate::stateless::Context;
use crate::upstream::{Binding, Messages};

/// What a client may opt into, and what the upstream honours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Wanted {
    tools: bool,
    prompts: bool,
    resources: bool,
    resource_uris: Vec<String>,
}

impl Wanted {
    fn write(&self, out: &mut Vec<u8>) {
        let mut members: Vec<(&str, Vec<u8>)> = Vec::new();
        for (flag, name) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if flag {
                members.push((name, b"true".to_vec()));
            }
        }
        if !self.resource_uris.is_empty() {
            let mut list = b"[".to_vec();
            for (i, uri) in self.resource_uris.iter().enumerate() {
                if i > 0 {
                    list.push(b',');
                }
                write_json_str(&mut list, uri);
            }
            list.push(b']');
            members.push(("resourceSubscriptions", list));
        }
        let borrowed: Vec<(&str, &[u8])> =
            members.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        RawObject::default().write(out, &borrowed);
    }
}

fn flag(object: &RawObject<'_>, key: &str) -> bool {
    object.get(key).is_some_and(|v| v.get() == "true")
}

/// What the client asked for in `params.notifications`.
fn requested(params: Option<&Payload<'_>>) -> Result<Wanted, ProxyError> {
    let invalid = || {
        ProxyError::Stateless(crate::stateless::Reject::InvalidParams(
            "subscriptions/listen needs params.notifications, an object of the notification types to receive".into(),
        ))
    };
    let notifications = params
        .and_then(|p| p.member("notifications"))
        .and_then(RawObject::parse)
        .ok_or_else(invalid)?;
    let resource_uris = match notifications.get("resourceSubscriptions") {
        None => Vec::new(),
        Some(list) => serde_json::from_str::<Vec<String>>(list.get()).map_err(|_| invalid())?,
    };
    Ok(Wanted {
        tools: flag(&notifications, "toolsListChanged"),
        prompts: flag(&notifications, "promptsListChanged"),
        resources: flag(&notifications, "resourcesListChanged"),
        resource_uris,
    })
}

/// What the upstream's capabilities let it deliver of `wanted`.
fn honoured(wanted: &Wanted, capabilities: &RawValue) -> Wanted {
    let caps = RawObject::parse(capabilities).unwrap_or_default();
    let sub = |name: &str, key: &str| {
        caps.get(name)
            .and_then(RawObject::parse)
            .is_some_and(|c| flag(&c, key))
    };
    Wanted {
        tools: wanted.tools && sub("tools", "listChanged"),
        prompts: wanted.prompts && sub("prompts", "listChanged"),
        resources: wanted.resources && sub("resources", "listChanged"),
        resource_uris: if sub("resources", "subscribe") {
            wanted.resource_uris.clone()
        } else {
            Vec::new()
        },
    }
}

/// Opens the subscription.
pub async fn open(
    app: &Arc<App>,
    message: &Message<'_, '_>,
    context: &Context<'_>,
    id: Bytes,
    forwarded: &HeaderMap,
) -> Result<Response<ProxyBody>, ProxyError> {
    let wanted = requested(message.payload.map(|(_, p)| p))?;
    let permit = app.calls.listens.clone().try_acquire_owned().map_err(|_| {
        app.upstream_error(crate::upstream::UpstreamError::Exhausted(
            "too many subscriptions/listen streams are open (stateless.max_listens)".into(),
        ))
    })?;
    let opened = app
        .upstream
        .open(context.client_info, Some(context.capabilities), forwarded)
        .await
        .map_err(|e| app.upstream_error(e))?;
    let session_id = opened.session_id;
    let version = opened.negotiated.protocol_version;
    let mut honoured = honoured(&wanted, &opened.negotiated.capabilities);
    let binding = Binding {
        session_id: session_id.as_deref(),
        protocol_version: version,
    };
    let end = |app: &Arc<App>| {
        app.end_upstream(session_id.clone().map(Into::into), version);
    };
    // The stream must be open before the client hears the acknowledgement, so that
    // nothing it triggers right after is missed.
    let mut get = forwarded.clone();
    get.insert(http::header::ACCEPT, HeaderValue::from_static(SSE));
    let stream = match app.upstream.listen(binding, &get).await {
        Ok(reply) => Messages::of(
            reply,
            app.upstream.max_message_bytes(),
            app.upstream.timeout(),
        )
        .await
        .map(|(_, messages)| messages)
        .unwrap_or(Messages::Nothing),
        Err(e) => {
            end(app);
            return Err(app.upstream_error(e));
        }
    };
    if matches!(stream, Messages::Nothing) {
        // No GET stream (405, say): the upstream has no way to deliver anything, and the
        // acknowledgement must not promise otherwise.
        honoured = Wanted::default();
    }
    let mut subscribed = Vec::with_capacity(honoured.resource_uris.len());
    for uri in std::mem::take(&mut honoured.resource_uris) {
        if subscribe(app, binding, forwarded, &uri).await {
            subscribed.push(uri);
        }
    }
    honoured.resource_uris = subscribed;
    let mut ack = Vec::with_capacity(256);
    ack.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":"#);
    honoured.write(&mut ack);
    ack.extend_from_slice(br#","_meta":{"#);
    write_json_str(&mut ack, meta::SUBSCRIPTION_ID);
    ack.push(b':');
    ack.extend_from_slice(&id);
    ack.extend_from_slice(b"}}}");

    let (tx, rx) = mpsc::channel(64);
    let task_app = app.clone();
    let task_session = session_id.clone();
    tokio::spawn(async move {
        let _permit = permit;
        relay(stream, tx, honoured, id).await;
        // The client closed the stream (or the upstream ended it): unsubscribe by
        // ending the upstream session.
        task_app.end_upstream(task_session.map(Into::into), version);
    });
    let mut response = Response::new(ProxyBody::Listen {
        body: MessageStream::new(Some(Bytes::from(ack)), rx, Unchanged, LISTEN_IDLE),
        open: app.metrics.stream_opened(),
    });
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
    Ok(response)
}

/// `resources/subscribe` for `uri`; whether the upstream accepted it (answered a result,
/// not an error).
async fn subscribe(app: &Arc<App>, binding: Binding<'_>, forwarded: &HeaderMap, uri: &str) -> bool {
    let mut request = Vec::with_capacity(uri.len() + 96);
    request.extend_from_slice(br#"{"jsonrpc":"2.0","id":"mcp-session-proxy-subscribe","method":"resources/subscribe","params":{"uri":"#);
    write_json_str(&mut request, uri);
    request.extend_from_slice(b"}}");
    let Ok(reply) = app
        .upstream
        .exchange(binding, Bytes::from(request), forwarded)
        .await
    else {
        return false;
    };
    let Ok((_, mut answer)) = Messages::of(reply, 64 * 1024, app.upstream.timeout()).await else {
        return false;
    };
    let mut accepted = false;
    while let Some(Ok(message)) = answer.next().await {
        if let Ok(envelope) = Envelope::parse(&message)
            && envelope.kind == Kind::Response
        {
            accepted = envelope.result.is_some();
            break;
        }
    }
    accepted
}

/// A listen stream is quiet for long stretches; its client ends it by disconnecting.
const LISTEN_IDLE: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Passes the opted-in notifications, tagged, until either side ends.
async fn relay(mut stream: Messages, tx: mpsc::Sender<Bytes>, wanted: Wanted, id: Bytes) {
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            () = tx.closed() => return,
        };
        let Some(Ok(message)) = message else { return };
        let Ok(envelope) = Envelope::parse(&message) else {
            continue;
        };
        if envelope.kind != Kind::Notification || !passes(&envelope, &wanted) {
            continue;
        }
        let tagged = tag(&message, &envelope, &id);
        if tx.send(tagged).await.is_err() {
            return;
        }
    }
}

fn passes(envelope: &Envelope<'_>, wanted: &Wanted) -> bool {
    match envelope.method() {
        "notifications/tools/list_changed" => wanted.tools,
        "notifications/prompts/list_changed" => wanted.prompts,
        "notifications/resources/list_changed" => wanted.resources,
        "notifications/resources/updated" => envelope
            .params
            .and_then(RawObject::parse)
            .and_then(|p| p.get("uri").and_then(raw_str).map(|u| u.into_owned()))
            .is_some_and(|uri| wanted.resource_uris.contains(&uri)),
        _ => false,
    }
}

/// The notification with `_meta["io.modelcontextprotocol/subscriptionId"]` set.
fn tag(message: &Bytes, envelope: &Envelope<'_>, id: &[u8]) -> Bytes {
    let payload = envelope
        .params
        .and_then(|p| Payload::open(p).ok().flatten());
    let params = match &payload {
        Some(payload) => payload.edited(&[], &[], &[], &[(meta::SUBSCRIPTION_ID, id)]),
        None => {
            let mut out = Vec::with_capacity(96);
            out.extend_from_slice(br#"{"_meta":{"#);
            write_json_str(&mut out, meta::SUBSCRIPTION_ID);
            out.push(b':');
            out.extend_from_slice(id);
            out.extend_from_slice(b"}}");
            out
        }
    };
    let mut out = Vec::with_capacity(message.len() + 96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    write_json_str(&mut out, envelope.method());
    out.extend_from_slice(br#","params":"#);
    out.extend_from_slice(&params);
    out.push(b'}');
    Bytes::from(out)
}
