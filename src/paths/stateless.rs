//! The stateless path (MCP 2026-07-28): clients with no `initialize` and no session,
//! served by a legacy server through pooled upstream sessions.
//!
//! - `server/discover` is answered from what the upstream said at `initialize`.
//! - Every other request is checked (`stateless::validate`), its 2026 `_meta` is taken
//!   off, and it runs on an upstream session opened with the client's capabilities,
//!   checked out of the pool for the call. A task per call (`driver`) reads the upstream's
//!   answer message by message: progress and (level-filtered) log notifications go to the
//!   client, the result gets `resultType` and `serverInfo`, and the upstream's own
//!   requests (sampling, elicitation, roots) end the client's call with an
//!   `input_required` result while the task keeps the upstream call waiting for the retry.
//! - `subscriptions/listen` opens a dedicated upstream session and its GET stream.

mod driver;
mod listen;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, oneshot};

use self::driver::{First, Resume};
use super::cluster::{Cluster, Whereabouts};
use super::headers;
use super::relay::Relay;
use super::session::{raw_bytes, upstream_error};
use crate::error::ProxyError;
use crate::jsonrpc::{Kind, RawObject, raw_str, write};
use crate::mcp::Method;
use crate::metrics::Metrics;
use crate::response::{self, ProxyBody};
use crate::rewrite::stateless::{bound_params, discover_result, to_upstream};
use crate::route::Message;
use crate::stateless::request_state::Binding as StateBinding;
use crate::stateless::{Context, Parked, RequestStateError, Sealer, validate};
use crate::upstream::{Checkout, Messages, Pool, PoolSettings, Upstream, UpstreamError};

/// The pool re-initializes its upstream sessions at least this often, so a discovery
/// result is never older than this plus its `ttlMs` (an upstream redeployed with new
/// capabilities is seen within minutes).
pub const POOLED_SESSION_MAX_AGE: Duration = Duration::from_secs(300);

/// After an upstream request, how long to wait for more before asking the client.
const GATHER: Duration = Duration::from_millis(50);

/// What the stateless path is configured with.
#[derive(Debug, Clone)]
pub struct StatelessSettings {
    /// Upstream sessions pooled at once.
    pub max_pooled: usize,
    /// `subscriptions/listen` streams open at once.
    pub max_listens: usize,
    /// A pooled upstream session idle this long is ended.
    pub pool_idle_ttl: Duration,
    /// How long an `input_required` call waits for its retry.
    pub request_state_ttl: Duration,
    /// An upstream event stream silent this long is ended.
    pub sse_idle_timeout: Duration,
}

/// See the module documentation.
#[derive(Debug)]
pub struct StatelessPath {
    upstream: Upstream,
    pool: Arc<Pool>,
    sealer: Sealer,
    parked: Parked<oneshot::Sender<Resume>>,
    /// One permit per open `subscriptions/listen` stream.
    listens: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    sse_idle_timeout: Duration,
    cluster: Arc<Cluster>,
    /// The endpoint path serving the upstream (where a retry goes on its owner).
    path: String,
}

impl StatelessPath {
    /// `keys` seal `requestState` (the first seals, all open; domain-separated from the
    /// session `state` they also seal).
    pub fn new(
        upstream: Upstream,
        metrics: Arc<Metrics>,
        keys: &[Vec<u8>],
        settings: &StatelessSettings,
        cluster: Arc<Cluster>,
        path: String,
    ) -> Self {
        let pool = Pool::new(
            upstream.clone(),
            PoolSettings {
                max_open: settings.max_pooled,
                max_idle_per_key: settings.max_pooled,
                idle_ttl: settings.pool_idle_ttl,
                max_age: POOLED_SESSION_MAX_AGE,
            },
        );
        StatelessPath {
            upstream,
            pool,
            sealer: Sealer::with_keys(keys, settings.request_state_ttl),
            parked: Parked::default(),
            listens: Arc::new(Semaphore::new(settings.max_listens)),
            metrics,
            sse_idle_timeout: settings.sse_idle_timeout,
            cluster,
            path,
        }
    }

    /// The pool of upstream sessions (reaped and closed by its owner).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Serves one stateless message.
    pub async fn handle(
        self: &Arc<Self>,
        message: &Message<'_, '_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let envelope = message.envelope;
        match envelope.kind {
            // Over HTTP a stateless client cancels by closing the stream; a notification
            // has nothing to reach.
            Kind::Notification => return Ok(response::status(StatusCode::ACCEPTED)),
            Kind::Response => return Err(ProxyError::StatelessResponse),
            Kind::Request => {}
        }
        let context = validate(message.headers, envelope.method(), message.params())
            .map_err(ProxyError::Stateless)?;
        let Some(id) = envelope.id else {
            return Err(ProxyError::StatelessResponse);
        };
        let id = raw_bytes(message.body, id);
        let forwarded = headers::to_upstream_in_session(message.headers);
        match message.method() {
            Some(Method::ServerDiscover) => self.discover(&context, &id, &forwarded).await,
            Some(Method::SubscriptionsListen) => {
                listen::open(self, message, &context, id, &forwarded).await
            }
            _ => self.call(message, &context, id, &forwarded).await,
        }
    }

    /// `server/discover`, from the upstream's `InitializeResult`.
    async fn discover(
        &self,
        context: &Context<'_>,
        id: &[u8],
        forwarded: &HeaderMap,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let negotiated = {
            let checkout = self
                .pool
                .checkout(Some(context.capabilities), forwarded)
                .await
                .map_err(|e| self.error(e))?;
            checkout.negotiated().clone()
        };
        Ok(response::json(
            StatusCode::OK,
            write::result(id, &discover_result(&negotiated)),
        ))
    }

    /// A tool call, prompt, read, list or completion: a new call on a pooled upstream
    /// session, or (with a `requestState`) the next round of a parked one.
    async fn call(
        self: &Arc<Self>,
        message: &Message<'_, '_>,
        context: &Context<'_>,
        id: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let method = message.envelope.method();
        let params = message.params();
        let provided = input_responses(params)?;
        let caller = message
            .headers
            .get(AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec())
            .unwrap_or_default();
        let bound = bound_params(params);
        let binding = StateBinding {
            caller: &caller,
            method,
            params: &bound,
        };
        let (first_tx, first_rx) = oneshot::channel();
        let request_state = params
            .and_then(|p| p.member("requestState"))
            .map(|raw| raw_str(raw).map(|s| s.into_owned()).unwrap_or_default());
        if let Some(token) = request_state {
            let (park, owner) = self.sealer.open(&token, binding)?;
            match self.cluster.whereabouts(Some(&owner)) {
                Whereabouts::Here => {}
                // The call waits on another replica: the retry goes there, as it came.
                Whereabouts::There(owner) => {
                    return self
                        .cluster
                        .forward(
                            owner,
                            &self.path,
                            http::Method::POST,
                            message.headers,
                            message.body.clone(),
                            "",
                        )
                        .await;
                }
                // This replica restarted since the call was parked: it is gone.
                Whereabouts::Gone => return Err(RequestStateError::Unknown.into()),
            }
            let resume = self.parked.take(&park).ok_or(RequestStateError::Unknown)?;
            let next = Resume {
                client_id: id,
                provided,
                log_level: context.log_level,
                first: first_tx,
            };
            if resume.send(next).is_err() {
                return Err(RequestStateError::Unknown.into());
            }
        } else {
            let upstream_body = match message.payload {
                Some((raw, payload)) => to_upstream(message.body, raw, payload)
                    .map(Bytes::from)
                    .unwrap_or_else(|| message.body.clone()),
                None => message.body.clone(),
            };
            let (checkout, messages) = self.start(context, upstream_body, forwarded).await?;
            let call = driver::Call {
                path: self.clone(),
                checkout,
                messages,
                upstream_id: id.clone(),
                client_id: id,
                method: method.to_owned(),
                capabilities: context.capabilities.to_owned(),
                log_level: context.log_level,
                provided: provided.into_iter().collect(),
                caller,
                bound,
                uri: (message.method() == Some(Method::ResourcesRead))
                    .then(|| params.and_then(|p| p.member("uri")).and_then(raw_str))
                    .flatten()
                    .map(|uri| uri.into_owned()),
                forwarded: forwarded.clone(),
            };
            tokio::spawn(driver::run(call, first_tx));
        }
        let first = first_rx.await.map_err(|_| {
            self.error(UpstreamError::Unreachable(
                "the upstream call ended without an answer".into(),
            ))
        })?;
        Ok(match first {
            First::Json(status, body) => response::json(status, body),
            First::Stream(first, rest) => {
                let relay = Relay {
                    upstream: &self.upstream,
                    metrics: &self.metrics,
                    idle_timeout: self.sse_idle_timeout,
                };
                let messages = Messages::Channel {
                    first: Some(first),
                    rx: rest,
                };
                response::events(relay.stream(messages, None))
            }
        })
    }

    /// Sends the request on a pooled upstream session. A pooled session the upstream has
    /// lost (it restarted) is ended and the request tried once more on a new one:
    /// stateless clients have no session to lose.
    async fn start(
        &self,
        context: &Context<'_>,
        body: Bytes,
        forwarded: &HeaderMap,
    ) -> Result<(Checkout, Messages), ProxyError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut checkout = self
                .pool
                .checkout(Some(context.capabilities), forwarded)
                .await
                .map_err(|e| self.error(e))?;
            match self
                .upstream
                .exchange(checkout.binding(), body.clone(), forwarded)
                .await
            {
                Ok(answer) => return Ok((checkout, answer.messages)),
                Err(UpstreamError::SessionGone) if attempt < 2 => checkout.discard(),
                Err(e) => {
                    checkout.discard();
                    return Err(self.error(e));
                }
            }
        }
    }

    fn error(&self, source: UpstreamError) -> ProxyError {
        upstream_error(&self.upstream, source)
    }
}

/// `inputResponses`: an object whose values are objects (SEP-2322). Returns the entries.
fn input_responses(
    params: Option<&crate::mcp::meta::Payload<'_>>,
) -> Result<Vec<(String, Box<RawValue>)>, ProxyError> {
    let Some(raw) = params.and_then(|p| p.member("inputResponses")) else {
        return Ok(Vec::new());
    };
    let object = RawObject::parse(raw).ok_or(ProxyError::InvalidInputResponses(
        "inputResponses must be an object mapping each input request's key to its response",
    ))?;
    let mut out = Vec::new();
    for (key, value) in object.entries() {
        if !value.get().starts_with('{') {
            return Err(ProxyError::InvalidInputResponses(
                "each inputResponses entry must be an object (the response to that input request)",
            ));
        }
        out.push((key.to_string(), value.to_owned()));
    }
    Ok(out)
}

/// Whether `capabilities` (a client's, raw) declares `capability`.
fn declares(capabilities: &RawValue, capability: &str) -> bool {
    RawObject::parse(capabilities).is_some_and(|caps| caps.get(capability).is_some())
}
