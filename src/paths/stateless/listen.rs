//! `subscriptions/listen` (2026-07-28) on top of a legacy server: a dedicated upstream
//! session, its GET stream (or a stdio child's unclaimed messages) and
//! `resources/subscribe` for each requested resource. The stream opens with
//! `notifications/subscriptions/acknowledged` listing what the upstream can deliver; then
//! only the notification types the client opted into pass, each tagged with the
//! subscription id (the listen request's id). Closing the stream ends the upstream
//! session.
//!
//! `taskIds` (2026-07-28 tasks extension, for a client that declared it) name tasks the
//! proxy runs: each of the caller's tasks this replica holds is watched, and every change
//! is told as `notifications/tasks` carrying the whole task (first as it is when the
//! stream opens; changes in between coalesce) until it ends. A stream asking for tasks
//! only opens no upstream session, and ends once its last task has ended.

use opentelemetry::context::FutureExt as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Response};
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::super::cluster::Whereabouts;
use super::super::relay::Relay;
use super::tasks::{Task, Watcher};
use super::{StatelessPath, declares_tasks};
use crate::error::ProxyError;
use crate::jsonrpc::{Envelope, Kind, RawObject, raw_str, string_object, write, write_json_str};
use crate::mcp::Method;
use crate::mcp::headers::SSE;
use crate::mcp::meta::{self, Payload};
use crate::response::{self, ProxyBody};
use crate::rewrite::stateless::tagged_params;
use crate::route::Message;
use crate::stateless::Context;
use crate::upstream::{Delivery, Messages, SessionAddr, UpstreamError};

/// What a client may opt into, and what the upstream honours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Wanted {
    tools: bool,
    prompts: bool,
    resources: bool,
    resource_uris: Vec<String>,
    task_ids: Vec<String>,
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
        for (list, name) in [
            (&self.resource_uris, "resourceSubscriptions"),
            (&self.task_ids, "taskIds"),
        ] {
            if !list.is_empty() {
                members.push((name, strings(list)));
            }
        }
        let borrowed: Vec<(&str, &[u8])> =
            members.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        RawObject::default().write(out, &borrowed);
    }
}

/// A JSON array of strings.
fn strings(items: &[String]) -> Vec<u8> {
    let mut list = b"[".to_vec();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            list.push(b',');
        }
        write_json_str(&mut list, item);
    }
    list.push(b']');
    list
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
    let task_ids = match notifications.get("taskIds") {
        None => Vec::new(),
        Some(list) => serde_json::from_str::<Vec<String>>(list.get()).map_err(|_| invalid())?,
    };
    Ok(Wanted {
        tools: flag(&notifications, "toolsListChanged"),
        prompts: flag(&notifications, "promptsListChanged"),
        resources: flag(&notifications, "resourcesListChanged"),
        resource_uris,
        task_ids,
    })
}

impl Wanted {
    /// Whether anything of it comes from the upstream.
    fn needs_upstream(&self) -> bool {
        self.tools || self.prompts || self.resources || !self.resource_uris.is_empty()
    }
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
        task_ids: Vec::new(),
    }
}

/// The tasks a listen stream watches (`None` once ended and told).
struct Watched {
    tasks: Vec<Option<Arc<Task>>>,
    watcher: Arc<Watcher>,
}

impl Watched {
    fn any(&self) -> bool {
        self.tasks.iter().any(Option::is_some)
    }
}

/// Of the task ids asked for, the caller's tasks held here (at most
/// [`MAX_TASK_SUBSCRIPTIONS`]), each watched from now on; and their ids.
fn watch_tasks(
    path: &StatelessPath,
    message: &Message<'_, '_>,
    context: &Context<'_>,
    ids: &[String],
) -> (Watched, Vec<String>) {
    let mut tasks = Vec::new();
    let mut found = Vec::new();
    if declares_tasks(context.capabilities) {
        for id in ids.iter().take(MAX_TASK_SUBSCRIPTIONS) {
            let Ok(located) = path.tasks.locate(id, message.caller) else {
                continue;
            };
            if path.cluster.whereabouts(Some(&located.owner)) != Whereabouts::Here {
                continue;
            }
            if let Ok(task) = path.tasks.get(&located.key, id)
                && !found.contains(id)
            {
                tasks.push(Some(task));
                found.push(id.clone());
            }
        }
    }
    let watcher = Watcher::new(tasks.len());
    for (index, task) in tasks.iter().flatten().enumerate() {
        task.watch(&watcher, index);
    }
    (Watched { tasks, watcher }, found)
}

/// Opens the subscription.
pub async fn open(
    path: &Arc<StatelessPath>,
    message: &Message<'_, '_>,
    context: &Context<'_>,
    id: Bytes,
    forwarded: &HeaderMap,
) -> Result<Response<ProxyBody>, ProxyError> {
    let wanted = requested(message.params())?;
    let permit = path.listens.clone().try_acquire_owned().map_err(|_| {
        path.error(UpstreamError::Exhausted(
            "too many subscriptions/listen streams are open (stateless.max_listens)".into(),
        ))
    })?;
    let (watched, task_ids) = watch_tasks(path, message, context, &wanted.task_ids);
    let upstream = &path.upstream;
    if !wanted.task_ids.is_empty() && !wanted.needs_upstream() {
        let honoured = Wanted {
            task_ids,
            ..Wanted::default()
        };
        let ack = acknowledgement(&honoured, &id);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(
            async move {
                let _permit = permit;
                relay(None, tx, honoured, id, watched).await;
            }
            .with_current_context(),
        );
        return Ok(stream_of(path, ack, rx));
    }
    // The subscription's own upstream session: ended when it drops (the client closed
    // the stream, the upstream ended it, or anything below failed).
    let session = upstream
        .open(context.client_info, Some(context.capabilities), forwarded)
        .await
        .map_err(|e| path.error(e))?;
    let mut honoured = honoured(&wanted, &session.negotiated().capabilities);
    // The stream must be open before the client hears the acknowledgement, so that
    // nothing it triggers right after is missed.
    let mut get = forwarded.clone();
    get.insert(http::header::ACCEPT, HeaderValue::from_static(SSE));
    let stream = match upstream.listen(session.addr(), &get).await {
        Ok(answer) if answer.status.is_success() => answer.messages,
        Ok(_) => Messages::Nothing,
        Err(e) => return Err(path.error(e)),
    };
    let stream = if matches!(
        stream,
        Messages::Nothing | Messages::One(_) | Messages::Opaque(_)
    ) {
        // No GET stream (405, say): the upstream has no way to deliver anything, and the
        // acknowledgement must not promise otherwise.
        honoured = Wanted::default();
        None
    } else {
        Some(stream)
    };
    // Bounded in number and in time as a whole: what was not subscribed is left out of
    // the acknowledgement, which names what the stream will deliver.
    let mut subscribed = Vec::with_capacity(honoured.resource_uris.len());
    let wanted = std::mem::take(&mut honoured.resource_uris);
    let subscribing = async {
        for uri in wanted.into_iter().take(MAX_RESOURCE_SUBSCRIPTIONS) {
            if subscribe(path, session.addr(), forwarded, &uri).await {
                subscribed.push(uri);
            }
        }
    };
    if tokio::time::timeout(upstream.timeout(), subscribing)
        .await
        .is_err()
    {
        tracing::debug!(
            "subscribing a listen stream's resources took too long; the rest are left out"
        );
    }
    honoured.resource_uris = subscribed;
    honoured.task_ids = task_ids;
    let ack = acknowledgement(&honoured, &id);

    let (tx, rx) = mpsc::channel(64);
    // The relay is the listen request's trace (what it sends upstream, its end).
    tokio::spawn(
        async move {
            let _permit = permit;
            // The client closing the stream (or the upstream ending it) unsubscribes:
            // the upstream session ends when `session` drops.
            let _session = session;
            relay(stream, tx, honoured, id, watched).await;
        }
        .with_current_context(),
    );
    Ok(stream_of(path, ack, rx))
}

/// `notifications/subscriptions/acknowledged`: what the stream will deliver.
fn acknowledgement(honoured: &Wanted, id: &[u8]) -> Bytes {
    let mut params = Vec::with_capacity(128);
    params.extend_from_slice(br#"{"notifications":"#);
    honoured.write(&mut params);
    params.extend_from_slice(br#","_meta":{"#);
    write_json_str(&mut params, meta::SUBSCRIPTION_ID);
    params.push(b':');
    params.extend_from_slice(id);
    params.extend_from_slice(b"}}");
    write::notification(Method::SubscriptionsAcknowledged.as_str(), Some(&params))
}

/// The client's event stream: the acknowledgement, then what `rx` delivers.
fn stream_of(
    path: &StatelessPath,
    ack: Bytes,
    rx: mpsc::Receiver<Delivery>,
) -> Response<ProxyBody> {
    let relay = Relay {
        upstream: &path.upstream,
        metrics: &path.metrics,
        idle_timeout: LISTEN_IDLE,
    };
    let messages = Messages::Channel {
        first: Some(ack),
        rx,
    };
    response::events(relay.stream(messages, None))
}

/// `resources/subscribe` for `uri`; whether the upstream accepted it (answered a result,
/// not an error).
async fn subscribe(
    path: &StatelessPath,
    addr: SessionAddr<'_>,
    forwarded: &HeaderMap,
    uri: &str,
) -> bool {
    let params = string_object(&[("uri", uri)]);
    let request = write::request(
        br#""mcp-session-proxy-subscribe""#,
        Method::ResourcesSubscribe.as_str(),
        Some(&params),
    );
    let Ok(mut answer) = path
        .upstream
        .exchange(addr, request, forwarded.clone())
        .await
    else {
        return false;
    };
    let read = async {
        while let Some(Ok(message)) = answer.messages.next_message().await {
            if let Ok(envelope) = Envelope::parse(&message)
                && envelope.kind == Kind::Response
            {
                return envelope.result.is_some();
            }
        }
        false
    };
    tokio::time::timeout(path.upstream.timeout(), read)
        .await
        .unwrap_or(false)
}

/// Resources one listen stream subscribes to, at most (each costs a round trip); also
/// what one bridged old client's session may subscribe to.
pub(crate) const MAX_RESOURCE_SUBSCRIPTIONS: usize = 64;
/// Tasks one listen stream watches, at most.
const MAX_TASK_SUBSCRIPTIONS: usize = 64;

/// A listen stream is quiet for long stretches; its client ends it by disconnecting.
const LISTEN_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

/// Passes the opted-in notifications, tagged, and tells the watched tasks' changes,
/// until the client leaves, the upstream's stream ends, or — without one — no task is
/// left to tell.
async fn relay(
    mut stream: Option<Messages>,
    tx: mpsc::Sender<Delivery>,
    wanted: Wanted,
    id: Bytes,
    mut watched: Watched,
) {
    loop {
        if stream.is_none() && !watched.any() {
            return;
        }
        let watching = watched.any();
        let message = tokio::select! {
            message = next(&mut stream) => message,
            changed = watched.watcher.changes(), if watching => {
                for index in changed {
                    let Some(task) = watched.tasks.get_mut(index).and_then(Option::take) else {
                        continue;
                    };
                    let (params, ended) = task.status_params();
                    if tx.send(Ok(task_changed(params, &id))).await.is_err() {
                        return;
                    }
                    // An ended task changes no more: it is let go.
                    if !ended {
                        watched.tasks[index] = Some(task);
                    }
                }
                continue;
            }
            () = tx.closed() => return,
        };
        // The upstream ended its stream: so does the subscription (its client opens
        // another).
        let Some(Ok(message)) = message else { return };
        let Ok(envelope) = Envelope::parse(&message) else {
            continue;
        };
        if envelope.kind != Kind::Notification || !passes(&envelope, &wanted) {
            continue;
        }
        let tagged = tag(&envelope, &id);
        if tx.send(Ok(tagged)).await.is_err() {
            return;
        }
    }
}

/// The upstream's next message; never, without a stream.
async fn next(stream: &mut Option<Messages>) -> Option<Result<Bytes, UpstreamError>> {
    match stream {
        Some(stream) => stream.next_message().await,
        None => std::future::pending().await,
    }
}

/// `notifications/tasks` with `params` (the whole task), tagged with the subscription id.
fn task_changed(params: Vec<u8>, id: &[u8]) -> Bytes {
    let params = String::from_utf8(params).ok();
    let raw = params.and_then(|text| RawValue::from_string(text).ok());
    write::notification(
        Method::TaskChanged.as_str(),
        Some(&tagged_params(raw.as_deref(), id)),
    )
}

fn passes(envelope: &Envelope<'_>, wanted: &Wanted) -> bool {
    match Method::parse(envelope.method()) {
        Some(Method::ToolsListChanged) => wanted.tools,
        Some(Method::PromptsListChanged) => wanted.prompts,
        Some(Method::ResourcesListChanged) => wanted.resources,
        Some(Method::ResourcesUpdated) => envelope
            .params
            .and_then(RawObject::parse)
            .and_then(|p| p.get("uri").and_then(raw_str).map(|u| u.into_owned()))
            .is_some_and(|uri| wanted.resource_uris.contains(&uri)),
        _ => false,
    }
}

/// The notification with `_meta["io.modelcontextprotocol/subscriptionId"]` set.
fn tag(envelope: &Envelope<'_>, id: &[u8]) -> Bytes {
    write::notification(envelope.method(), Some(&tagged_params(envelope.params, id)))
}
