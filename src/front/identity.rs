//! Who a request is from and what `[auth]` lets it do: [`Identity`] judges a message
//! by `[[auth.rules]]` (the upstream, and the tool, prompt or resource it names) and
//! `[[auth.limits]]` before it is routed, and shows the caller only what it may use of
//! the lists (and capabilities) in the answer on its way out.

use std::borrow::Cow;
use std::sync::Arc;

use http::Response;
use http_body_util::BodyExt;

use super::ClientResponse;
use crate::auth::policy::Item;
use crate::auth::{Auth, Verified};
use crate::error::ProxyError;
use crate::jsonrpc::{RawObject, raw_str};
use crate::mcp::caller::Caller;
use crate::mcp::method::Method as Mcp;
use crate::metrics::Metrics;
use crate::response::ProxyBody;
use crate::rewrite::visible::{List, Visible};
use crate::route::Message;

/// How a name becomes what the rules judge.
type Make = for<'a> fn(&'a str) -> Item<'a>;

fn tool(name: &str) -> Item<'_> {
    Item::Tool(name)
}

fn prompt(name: &str) -> Item<'_> {
    Item::Prompt(name)
}

fn resource(uri: &str) -> Item<'_> {
    Item::Resource(uri)
}

/// What the items of `list` are, to the rules.
fn listed(list: List) -> Make {
    match list {
        List::Tools => tool,
        List::Prompts => prompt,
        List::Resources | List::ResourceTemplates => resource,
    }
}

/// The largest list response (or list event) read to show a caller what it may use.
const MAX_LIST_BYTES: usize = 16 * 1024 * 1024;

/// Who a request is from, and (with `[auth]`) what its token says, as the `[auth]` that
/// judged it (a reload meanwhile does not change it half-way).
pub(super) struct Identity {
    pub(super) caller: Caller,
    pub(super) verified: Option<Verified>,
    pub(super) auth: Arc<Auth>,
}

impl Identity {
    /// Whether `[[auth.rules]]` let this caller send `message` to `upstream`.
    pub(super) fn permits(
        &self,
        upstream: &str,
        message: &Message<'_, '_>,
        metrics: &Metrics,
    ) -> Result<(), ProxyError> {
        if !self.auth.has_rules() {
            return Ok(());
        }
        let params = message.params();
        let member = |key| params.and_then(|p| p.member(key));
        let text = |key| member(key).and_then(raw_str);
        // What a request names, as the upstream will read it; a name that is missing or
        // not a string names nothing a rule covers (only a whole-upstream rule allows it).
        let named = |key| text(key).unwrap_or_default();
        let judged: Vec<(Make, Cow<'_, str>)> = match message.method() {
            Some(Mcp::ToolsCall) => vec![(tool as Make, named("name"))],
            Some(Mcp::PromptsGet) => vec![(prompt as Make, named("name"))],
            Some(Mcp::ResourcesRead | Mcp::ResourcesSubscribe | Mcp::ResourcesUnsubscribe) => {
                vec![(resource as Make, named("uri"))]
            }
            // Completions of a prompt's arguments or a resource template's.
            Some(Mcp::CompletionComplete) => {
                let reference = member("ref").and_then(RawObject::parse);
                let field = |key| -> Cow<'_, str> {
                    reference
                        .as_ref()
                        .and_then(|r| r.get(key))
                        .and_then(raw_str)
                        .map(|v| Cow::Owned(v.into_owned()))
                        .unwrap_or_default()
                };
                match &*field("type") {
                    "ref/prompt" => vec![(prompt as Make, field("name"))],
                    _ => vec![(resource as Make, field("uri"))],
                }
            }
            // Each resource a listen stream subscribes to.
            Some(Mcp::SubscriptionsListen) => member("notifications")
                .and_then(RawObject::parse)
                .and_then(|n| {
                    n.get("resourceSubscriptions")
                        .and_then(|list| serde_json::from_str::<Vec<String>>(list.get()).ok())
                })
                .unwrap_or_default()
                .into_iter()
                .map(|uri| (resource as Make, Cow::Owned(uri)))
                .collect(),
            _ => Vec::new(),
        };
        self.judge(upstream, Item::Upstream, metrics)?;
        // What is judged is what the body names; a header naming another is refused.
        crate::stateless::rules::name_header_agrees(
            message.headers,
            message.envelope.method(),
            params,
        )
        .map_err(ProxyError::Stateless)?;
        for (make, name) in &judged {
            self.judge(upstream, make(name), metrics)?;
        }
        let called = match (message.method(), judged.first()) {
            (Some(Mcp::ToolsCall), Some((_, tool))) => Some(tool),
            _ => None,
        };
        // Then its budget: a refused call takes none.
        if let Some(tool) = called
            && let Err(exceeded) = self.auth.take_call(upstream, tool, &self.caller)
        {
            tracing::info!(caller = ?self.caller, upstream, tool = crate::error::head(tool, 256), "over a tool's rate (auth.limits)");
            return Err(ProxyError::ToolRate {
                tool: crate::error::head(tool, 256).to_owned(),
                rate: exceeded.rate,
                per: exceeded.per,
                retry_after: exceeded.retry_after,
            });
        }
        Ok(())
    }

    /// `response` to a list request (`tools/list`, `prompts/list`, `resources/list`,
    /// `resources/templates/list`) as this caller may see it under `[[auth.rules]]`.
    /// Any other response, or with no rules, as it is.
    pub(super) async fn visible(
        &self,
        upstream: &str,
        message: &Message<'_, '_>,
        response: ClientResponse,
    ) -> Result<ClientResponse, ProxyError> {
        let method = message.envelope.method();
        let offers = matches!(method, "server/discover" | "initialize");
        let (true, true, Some(id)) = (
            self.auth.has_policy(),
            offers || List::of(method).is_some(),
            message.request_id(),
        ) else {
            return Ok(response);
        };
        // Boxed: only a list answer (or what offers the lists) under rules is read, and
        // its reading would make every request's future kilobytes larger.
        Box::pin(self.filtered(upstream, *response, id.get()))
            .await
            .map(Box::new)
    }

    /// `response` with the lists in it (a list answer; a stream's events) showing only
    /// what this caller may use — an event stream event by event, a JSON body read whole
    /// (at most [`MAX_LIST_BYTES`]); a compressed one cannot be read, and is refused.
    /// `request_id` names the request in errors (`null` for a `GET` stream).
    pub(super) async fn filtered(
        &self,
        upstream: &str,
        response: Response<ProxyBody>,
        request_id: &str,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let Some(verified) = self.verified.clone() else {
            return Ok(response);
        };
        let unusable = |status, problem: &str| ProxyError::UnusableAnswer {
            upstream: upstream.to_owned(),
            status,
            problem: problem.to_owned(),
            request_id: request_id.to_owned(),
        };
        let (auth, name) = (self.auth.clone(), upstream.to_owned());
        let (any_auth, any_name, any_who) = (auth.clone(), name.clone(), verified.clone());
        let visible = Visible::new(
            Box::new(move |list, item| {
                auth.allows(&name, listed(list)(item), Some(&verified)) == Some(true)
            }),
            Box::new(move |list| {
                any_auth.may_use_some(&any_name, listed(list)("").kind(), &any_who)
            }),
        );
        let (mut parts, body) = response.into_parts();
        if parts
            .headers
            .get(http::header::CONTENT_ENCODING)
            .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
        {
            return Err(unusable(
                parts.status,
                "its answer is compressed, and the proxy shows each caller only what it may use",
            ));
        }
        // What the caller sees is its own now: no length, no validator of the whole.
        parts.headers.remove(http::header::CONTENT_LENGTH);
        parts.headers.remove(http::header::ETAG);
        let events =
            crate::upstream::media_type(&parts.headers) == crate::upstream::Media::EventStream;
        let body = if events {
            ProxyBody::Visible {
                body: Box::pin(crate::sse::EventBody::new(
                    crate::sse::Decoded::new(Box::pin(body), MAX_LIST_BYTES),
                    visible,
                    // The stream's own bound applies within.
                    std::time::Duration::from_secs(24 * 3600),
                )),
            }
        } else {
            let read = http_body_util::Limited::new(body, MAX_LIST_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    unusable(
                        parts.status,
                        &format!("its list could not be read whole to filter it: {e}"),
                    )
                })?
                .to_bytes();
            match visible.message(&read) {
                Some(filtered) => ProxyBody::full(filtered),
                None => ProxyBody::full(read),
            }
        };
        Ok(Response::from_parts(parts, body))
    }

    /// Whether this caller may use `item` of `upstream`: counted; a refusal logged with
    /// the subject (its hash) and what it asked for.
    pub(super) fn judge(
        &self,
        upstream: &str,
        item: Item<'_>,
        metrics: &Metrics,
    ) -> Result<(), ProxyError> {
        let Some(allowed) = self.auth.allows(upstream, item, self.verified.as_ref()) else {
            return Ok(());
        };
        metrics
            .policy_decisions
            .get_or_create(&crate::metrics::PolicyLabels {
                upstream: upstream.to_owned(),
                kind: item.kind(),
                decision: if allowed { "allowed" } else { "denied" },
            })
            .inc();
        if allowed {
            return Ok(());
        }
        let name = match item {
            Item::Upstream => None,
            Item::Tool(name) | Item::Prompt(name) | Item::Resource(name) => {
                Some(crate::error::head(name, 256).to_owned())
            }
        };
        tracing::info!(
            caller = ?self.caller,
            upstream,
            kind = item.kind(),
            name = name.as_deref().unwrap_or(""),
            "not allowed by auth.rules"
        );
        Err(ProxyError::NotAllowed {
            what: crate::error::NotAllowed {
                upstream: upstream.to_owned(),
                kind: item.kind(),
                name,
            },
        })
    }
}
