//! The client's token exchanged for one for an upstream (`token_exchange`, RFC 8693):
//! the proxy, a client of the authorization server itself (`client_secret_basic`),
//! presents the caller's verified access token as the `subject_token` and asks for an
//! access token for the upstream (`resource`, RFC 8707, and/or `audience`; `scope`).
//! The upstream sees that token, never the client's.
//!
//! The front asks for the exchange before a request goes on ([`TokenExchange::prepare`],
//! refusing the request when the exchange fails); the upstream transport puts the
//! exchanged token on each request it builds ([`TokenExchange::exchanged`]). Exchanged
//! tokens are kept by a hash of the caller's token: the front exchanges again from
//! shortly before one expires, and the transport uses it until it does (so a request
//! sent later for the same call — a stateless call's answers, a listen stream — still
//! carries it). At most [`MAX_KEPT`] are kept; beyond, the one expiring soonest is
//! forgotten. A refusal is remembered for a few seconds, and so are a failed look-up of
//! the token endpoint and the server being unreachable (a kept token still good serves
//! meanwhile), and at most [`AT_ONCE`] exchanges are asked for at once (one for
//! a caller's token serves the requests that waited for it), so callers do not become a
//! load on the authorization server. Only tokens `[auth]` verified are ever exchanged. The token
//! endpoint is the issuer's (its metadata's `token_endpoint`) unless configured; the
//! client secret is read from its file (or variable) at each exchange, so a rotated
//! secret applies at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::HeaderValue;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::fetch::{Fetcher, TokenAnswer};
use crate::config::{CredentialSource, TokenExchangeConfig};

/// The most exchanged tokens kept.
pub const MAX_KEPT: usize = 10_000;
/// A token is exchanged again from this long before the kept one expires.
const SLACK: Duration = Duration::from_secs(30);
/// How long a token is kept whose answer said no `expires_in`.
const UNSAID_LIFETIME: Duration = Duration::from_secs(60);
/// The longest an exchanged token is kept, whatever the server says.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// The shortest lifetime of an exchanged token taken (a shorter one expires on the way).
const MIN_LIFETIME: Duration = Duration::from_secs(2);
/// How long a refusal, a failed look-up of the token endpoint, or the server being
/// unavailable, is remembered.
const REMEMBER_FAILURE: Duration = Duration::from_secs(5);
/// Exchanges asked for at once, per upstream (more wait their turn, and find the token
/// kept when one for the same caller's token came meanwhile).
const AT_ONCE: usize = 8;
/// The largest client secret file read.
const MAX_SECRET: u64 = 16 * 1024;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Why a caller's token could not be exchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The authorization server would not exchange this token (its `error` code).
    #[error("the authorization server would not exchange the caller's token: {0}")]
    Refused(String),
    /// It no longer takes the caller's token (`invalid_grant`): expired or revoked there.
    #[error("the authorization server no longer takes the caller's token: {0}")]
    SubjectInvalid(String),
    /// It refused the proxy's own client (its `error`): the operator's to fix.
    #[error("the authorization server refused the proxy's own client: {0}")]
    ClientRefused(String),
    /// It could not be asked (unreachable, no token endpoint, an unreadable answer or
    /// secret).
    #[error("the authorization server could not be asked: {0}")]
    Unavailable(String),
}

/// One upstream's token exchange.
#[derive(Debug)]
pub struct TokenExchange {
    config: TokenExchangeConfig,
    fetcher: Fetcher,
    /// The token endpoint, once known.
    endpoint: OnceCell<String>,
    /// When looking the endpoint up last failed, and why.
    endpoint_failed: Mutex<Option<(Instant, String)>>,
    /// When the server could last not be asked, and why.
    unavailable: Mutex<Option<(Instant, String)>>,
    kept: Mutex<HashMap<[u8; 32], Kept>>,
    asking: tokio::sync::Semaphore,
}

#[derive(Debug)]
enum Kept {
    Token {
        /// `Bearer <the exchanged token>`.
        value: HeaderValue,
        /// From then on the front exchanges again.
        renew_at: Instant,
        /// It expires.
        until: Instant,
    },
    /// The server refused to exchange the token (until `until`).
    Refused {
        failure: ExchangeError,
        until: Instant,
    },
}

impl Kept {
    fn until(&self) -> Instant {
        match self {
            Kept::Token { until, .. } | Kept::Refused { until, .. } => *until,
        }
    }
}

impl TokenExchange {
    pub fn new(config: TokenExchangeConfig) -> Result<TokenExchange, String> {
        Ok(TokenExchange {
            endpoint: match &config.token_endpoint {
                Some(url) => OnceCell::new_with(Some(url.clone())),
                None => OnceCell::new(),
            },
            config,
            fetcher: Fetcher::new()?,
            endpoint_failed: Mutex::new(None),
            unavailable: Mutex::new(None),
            kept: Mutex::new(HashMap::new()),
            asking: tokio::sync::Semaphore::new(AT_ONCE),
        })
    }

    /// Makes sure a token exchanged for the caller's `presented` `Authorization` is
    /// kept, exchanging it now if none is (or the kept one is about to expire).
    pub async fn prepare(&self, presented: Option<&HeaderValue>) -> Result<(), ExchangeError> {
        let token = presented
            .and_then(|value| super::bearer_token(value).ok())
            .ok_or_else(|| ExchangeError::Refused("the request carries no bearer token".into()))?;
        let key = key_of(token);
        if let Some(known) = self.known(&key) {
            return known;
        }
        // Never closed: the permit comes, or the request is gone.
        let _turn = self
            .asking
            .acquire()
            .await
            .map_err(|_| ExchangeError::Unavailable("the exchange is shutting down".into()))?;
        if let Some(known) = self.known(&key) {
            return known;
        }
        // Boxed: asking the server is the exception (a token is kept), and its request's
        // future would make every request's future larger.
        match Box::pin(self.ask(token, key)).await {
            // The server unavailable while the kept token is still good: it serves.
            Err(ExchangeError::Unavailable(why)) if self.still_good(&key) => {
                tracing::warn!(error = %why, "a kept exchanged token could not be renewed; used until it expires");
                Ok(())
            }
            Err(ExchangeError::Unavailable(why)) => {
                *self.unavailable.lock() = Some((Instant::now(), why.clone()));
                Err(ExchangeError::Unavailable(why))
            }
            asked => asked,
        }
    }

    /// Asks the server for a token exchanged for `token` (whose key is `key`), and keeps
    /// the answer.
    async fn ask(&self, token: &str, key: [u8; 32]) -> Result<(), ExchangeError> {
        if let Some((at, why)) = &*self.unavailable.lock()
            && at.elapsed() < REMEMBER_FAILURE
        {
            return Err(ExchangeError::Unavailable(why.clone()));
        }
        let endpoint = self.endpoint().await?;
        let secret = read_secret(&self.config.client_secret)
            .await
            .map_err(ExchangeError::Unavailable)?;
        let mut form = vec![
            ("grant_type", GRANT_TYPE),
            ("subject_token", token),
            ("subject_token_type", ACCESS_TOKEN),
            ("requested_token_type", ACCESS_TOKEN),
        ];
        let asked = [
            ("resource", &self.config.resource),
            ("audience", &self.config.audience),
            ("scope", &self.config.scope),
        ];
        form.extend(
            asked
                .iter()
                .filter_map(|(name, value)| Some((*name, value.as_deref()?))),
        );
        let answer = self
            .fetcher
            .token(endpoint, (&self.config.client_id, &secret), &form)
            .await
            .map_err(ExchangeError::Unavailable)?;
        let now = Instant::now();
        match answer {
            TokenAnswer::Issued {
                access_token,
                expires_in,
            } => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {access_token}")).map_err(|_| {
                        ExchangeError::Unavailable("it issued a token no header can carry".into())
                    })?;
                value.set_sensitive(true);
                if expires_in.is_some_and(|secs| secs < MIN_LIFETIME.as_secs()) {
                    return Err(ExchangeError::Unavailable(
                        "it issued a token that expires at once".into(),
                    ));
                }
                let lifetime = expires_in
                    .map_or(UNSAID_LIFETIME, Duration::from_secs)
                    .min(MAX_LIFETIME);
                let kept = Kept::Token {
                    value,
                    renew_at: now + lifetime.saturating_sub(SLACK.min(lifetime / 2)),
                    until: now + lifetime,
                };
                self.keep(key, kept);
                Ok(())
            }
            TokenAnswer::Refused { status, error } => {
                let failure = refusal(status, error);
                if !matches!(failure, ExchangeError::Unavailable(_)) {
                    let until = now + REMEMBER_FAILURE;
                    let failure = failure.clone();
                    self.keep(key, Kept::Refused { failure, until });
                }
                Err(failure)
            }
        }
    }

    /// Whether a token kept for `key` has not expired yet (if due for renewal).
    fn still_good(&self, key: &[u8; 32]) -> bool {
        matches!(self.kept.lock().get(key), Some(Kept::Token { until, .. }) if *until > Instant::now())
    }

    /// What is known of the caller's token `key`: a token kept and not yet due for
    /// renewal, or a refusal still remembered.
    fn known(&self, key: &[u8; 32]) -> Option<Result<(), ExchangeError>> {
        let now = Instant::now();
        match self.kept.lock().get(key) {
            Some(Kept::Token { renew_at, .. }) if *renew_at > now => Some(Ok(())),
            Some(Kept::Refused { failure, until }) if *until > now => Some(Err(failure.clone())),
            _ => None,
        }
    }

    /// The token endpoint: configured, or looked up in the issuer's metadata (a failed
    /// look-up is not tried again for a few seconds).
    async fn endpoint(&self) -> Result<&String, ExchangeError> {
        if let Some(endpoint) = self.endpoint.get() {
            return Ok(endpoint);
        }
        if let Some((at, why)) = &*self.endpoint_failed.lock()
            && at.elapsed() < REMEMBER_FAILURE
        {
            return Err(ExchangeError::Unavailable(why.clone()));
        }
        let found = self
            .endpoint
            .get_or_try_init(|| self.fetcher.token_endpoint(&self.config.issuer))
            .await;
        found.map_err(|why| {
            *self.endpoint_failed.lock() = Some((Instant::now(), why.clone()));
            ExchangeError::Unavailable(why)
        })
    }

    /// The token exchanged for the caller's `presented` `Authorization`, until it
    /// expires; `None`: none is kept (the upstream then gets no `Authorization`).
    pub fn exchanged(&self, presented: &HeaderValue) -> Option<HeaderValue> {
        let token = super::bearer_token(presented).ok()?;
        let kept = self.kept.lock();
        match kept.get(&key_of(token)) {
            Some(Kept::Token { value, until, .. }) if *until > Instant::now() => {
                Some(value.clone())
            }
            _ => None,
        }
    }

    fn keep(&self, key: [u8; 32], entry: Kept) {
        let mut kept = self.kept.lock();
        if kept.len() >= MAX_KEPT && !kept.contains_key(&key) {
            let now = Instant::now();
            kept.retain(|_, k| k.until() > now);
            // Still full: the one expiring soonest goes (a token just kept for a
            // request on its way expires last).
            if kept.len() >= MAX_KEPT
                && let Some(soonest) = kept.iter().min_by_key(|(_, k)| k.until()).map(|(k, _)| *k)
            {
                kept.remove(&soonest);
            }
        }
        kept.insert(key, entry);
    }
}

/// What the server's refusal of a token request means (RFC 6749 §5.2, RFC 8693 §2.2.2):
/// the caller's token no longer good (`invalid_grant`), or not to be exchanged for
/// this (`invalid_scope`, `access_denied`, others); the proxy's own client or request
/// refused — the operator's to fix.
fn refusal(status: u16, error: String) -> ExchangeError {
    let code = error.split_whitespace().next().unwrap_or_default();
    match code {
        _ if status == 401 => ExchangeError::ClientRefused(error),
        "invalid_client"
        | "unauthorized_client"
        | "unsupported_grant_type"
        | "invalid_request"
        | "invalid_target" => ExchangeError::ClientRefused(error),
        "invalid_grant" => ExchangeError::SubjectInvalid(code.to_owned()),
        _ => ExchangeError::Refused(code.to_owned()),
    }
}

/// What an exchanged token is kept by: a hash of the caller's token.
fn key_of(token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes()).into()
}

/// The proxy's client secret, read now (a file off the async threads).
async fn read_secret(source: &CredentialSource) -> Result<String, String> {
    let text = match source {
        CredentialSource::Env(name) => {
            std::env::var(name).map_err(|_| format!("the variable {name} is not set"))?
        }
        CredentialSource::File(path) => {
            let path = path.clone();
            let read = tokio::task::spawn_blocking(move || {
                if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_SECRET) {
                    return Err("the client secret file is too large".to_owned());
                }
                std::fs::read_to_string(&path)
                    .map_err(|e| format!("the client secret file cannot be read: {e}"))
            });
            read.await
                .map_err(|_| "the client secret file could not be read".to_owned())??
        }
    };
    let secret = text.trim();
    if secret.is_empty() {
        return Err("the client secret is empty".into());
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange() -> TokenExchange {
        TokenExchange::new(TokenExchangeConfig {
            issuer: "http://127.0.0.1:9".into(),
            token_endpoint: Some("http://127.0.0.1:9/token".into()),
            resource: Some("http://up/mcp".into()),
            audience: None,
            scope: None,
            client_id: "proxy".into(),
            client_secret: CredentialSource::Env("MCP_PROXY_TEST_NO_SUCH_VARIABLE".into()),
        })
        .unwrap()
    }

    #[test]
    fn a_kept_token_serves_its_client_only_until_shortly_before_it_expires() {
        let exchange = exchange();
        let alice = HeaderValue::from_static("Bearer alice");
        let bob = HeaderValue::from_static("bearer  bob");
        let now = Instant::now();
        let (soon, later) = (now + Duration::from_secs(30), now + Duration::from_secs(60));
        exchange.keep(key_of("alice"), token(soon, later));
        assert_eq!(exchange.exchanged(&alice).unwrap(), "Bearer for-upstream");
        assert!(exchange.exchanged(&bob).is_none(), "another client's token");
        // Due for renewal at the front, still good for the transport.
        exchange.keep(key_of("bob"), token(now, now + Duration::from_secs(10)));
        assert!(exchange.exchanged(&bob).is_some(), "any case, any spacing");
        assert!(
            exchange.known(&key_of("bob")).is_none(),
            "the front renews it"
        );
        assert!(exchange.still_good(&key_of("bob")));
        assert!(
            matches!(exchange.known(&key_of("alice")), Some(Ok(()))),
            "not yet due"
        );
        exchange.keep(key_of("bob"), token(now, now));
        assert!(exchange.exchanged(&bob).is_none(), "expired");
        assert!(!exchange.still_good(&key_of("bob")));
    }

    fn token(renew_at: Instant, until: Instant) -> Kept {
        Kept::Token {
            value: HeaderValue::from_static("Bearer for-upstream"),
            renew_at,
            until,
        }
    }

    #[test]
    fn refusals_blame_the_caller_only_for_its_token() {
        let of = |status, error: &str| refusal(status, error.to_owned());
        assert!(
            matches!(of(400, "invalid_scope (the subject holds none)"), ExchangeError::Refused(code) if code == "invalid_scope")
        );
        assert!(matches!(
            of(400, "invalid_grant"),
            ExchangeError::SubjectInvalid(_)
        ));
        for theirs in [
            "invalid_client",
            "unauthorized_client",
            "unsupported_grant_type",
            "invalid_target (x)",
        ] {
            assert!(
                matches!(of(400, theirs), ExchangeError::ClientRefused(_)),
                "{theirs}"
            );
        }
        assert!(matches!(
            of(401, "whatever"),
            ExchangeError::ClientRefused(_)
        ));
    }

    #[test]
    fn no_more_than_the_bound_are_kept() {
        let exchange = exchange();
        let now = Instant::now();
        for i in 0..MAX_KEPT + 5 {
            let until = now + Duration::from_secs(60 + i as u64);
            exchange.keep(key_of(&format!("t{i}")), token(now, until));
        }
        assert_eq!(exchange.kept.lock().len(), MAX_KEPT);
        let last = HeaderValue::from_str(&format!("Bearer t{}", MAX_KEPT + 4)).unwrap();
        assert!(exchange.exchanged(&last).is_some(), "the newest is kept");
        let first = HeaderValue::from_static("Bearer t0");
        assert!(
            exchange.exchanged(&first).is_none(),
            "the soonest to expire went"
        );
    }

    #[tokio::test]
    async fn a_secret_that_cannot_be_read_is_the_servers_unavailability_not_the_callers_fault() {
        let exchange = exchange();
        let refused = exchange
            .prepare(Some(&HeaderValue::from_static("Bearer t")))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ExchangeError::Unavailable(why) if why.contains("not set")),
            "{refused:?}"
        );
        let none = exchange.prepare(None).await.unwrap_err();
        assert!(matches!(none, ExchangeError::Refused(_)), "{none:?}");
    }
}
