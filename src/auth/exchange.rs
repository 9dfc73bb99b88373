//! The client's token exchanged for one for an upstream (`token_exchange`, RFC 8693):
//! the proxy, a client of the authorization server itself (`client_secret_basic`),
//! presents the caller's verified access token as the `subject_token` and asks for an
//! access token for the upstream (`resource`, RFC 8707, and/or `audience`; `scope`).
//! The upstream sees that token, never the client's.
//!
//! The front asks for the exchange before a request goes on ([`TokenExchange::prepare`],
//! refusing the request when the exchange fails); the upstream transport puts the
//! exchanged token on each request it builds ([`TokenExchange::exchanged`]). Exchanged
//! tokens are kept until shortly before they expire, by a hash of the client's
//! `Authorization` (at most [`MAX_KEPT`]; beyond, one is forgotten and exchanged again
//! when needed), so a caller's requests cost one exchange per token lifetime. Only
//! tokens `[auth]` verified are ever exchanged. The token endpoint is the issuer's
//! (its metadata's `token_endpoint`) unless configured; the client secret is read
//! from its file (or variable) at each exchange, so a rotated secret applies at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::HeaderValue;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::fetch::{Fetcher, TokenAnswer};
use crate::config::{CredentialSource, TokenExchangeConfig};

/// The most exchanged tokens kept.
pub const MAX_KEPT: usize = 10_000;
/// An exchanged token is used until this long before it expires.
const SLACK: Duration = Duration::from_secs(30);
/// How long a token is kept whose answer said no `expires_in`.
const UNSAID_LIFETIME: Duration = Duration::from_secs(60);
/// The largest client secret file read.
const MAX_SECRET: u64 = 16 * 1024;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Why a caller's token could not be exchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The authorization server would not exchange this token (its `error`).
    #[error("the authorization server would not exchange the caller's token: {0}")]
    Refused(String),
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
    kept: Mutex<HashMap<[u8; 32], Kept>>,
}

#[derive(Debug)]
struct Kept {
    /// `Bearer <the exchanged token>`.
    value: HeaderValue,
    until: Instant,
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
            kept: Mutex::new(HashMap::new()),
        })
    }

    /// Makes sure a token exchanged for the client's `presented` `Authorization` is
    /// kept, exchanging it now if not.
    pub async fn prepare(&self, presented: Option<&HeaderValue>) -> Result<(), ExchangeError> {
        let presented = presented.ok_or_else(|| {
            ExchangeError::Refused("the request carries no token to exchange".into())
        })?;
        let key = key_of(presented);
        if self.kept_for(&key).is_some() {
            return Ok(());
        }
        let token = presented
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| ExchangeError::Refused("the token is not a bearer token".into()))?;
        let endpoint = self
            .endpoint
            .get_or_try_init(|| self.fetcher.token_endpoint(&self.config.issuer))
            .await
            .map_err(ExchangeError::Unavailable)?;
        let secret = read_secret(&self.config.client_secret).map_err(ExchangeError::Unavailable)?;
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
                let lifetime = expires_in.map_or(UNSAID_LIFETIME, Duration::from_secs);
                let until = Instant::now() + lifetime.saturating_sub(SLACK.min(lifetime / 2));
                self.keep(key, Kept { value, until });
                Ok(())
            }
            TokenAnswer::Refused { status, error } => {
                if status == 401 || error.starts_with("invalid_client") {
                    Err(ExchangeError::ClientRefused(error))
                } else {
                    Err(ExchangeError::Refused(error))
                }
            }
        }
    }

    /// The token exchanged for the client's `presented` `Authorization`, while it is
    /// good; `None`: none is kept (the upstream then gets no `Authorization`).
    pub fn exchanged(&self, presented: &HeaderValue) -> Option<HeaderValue> {
        self.kept_for(&key_of(presented))
    }

    fn kept_for(&self, key: &[u8; 32]) -> Option<HeaderValue> {
        let kept = self.kept.lock();
        kept.get(key)
            .filter(|k| k.until > Instant::now())
            .map(|k| k.value.clone())
    }

    fn keep(&self, key: [u8; 32], token: Kept) {
        let mut kept = self.kept.lock();
        if kept.len() >= MAX_KEPT && !kept.contains_key(&key) {
            let now = Instant::now();
            kept.retain(|_, k| k.until > now);
            if kept.len() >= MAX_KEPT
                && let Some(any) = kept.keys().next().copied()
            {
                kept.remove(&any);
            }
        }
        kept.insert(key, token);
    }
}

/// What an exchanged token is kept by: a hash of the client's `Authorization`.
fn key_of(presented: &HeaderValue) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(presented.as_bytes()).into()
}

/// The proxy's client secret, read now.
fn read_secret(source: &CredentialSource) -> Result<String, String> {
    let text = match source {
        CredentialSource::Env(name) => {
            std::env::var(name).map_err(|_| format!("the variable {name} is not set"))?
        }
        CredentialSource::File(path) => {
            let too_large = std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_SECRET);
            if too_large {
                return Err("the client secret file is too large".into());
            }
            std::fs::read_to_string(path)
                .map_err(|e| format!("the client secret file cannot be read: {e}"))?
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
        let bob = HeaderValue::from_static("Bearer bob");
        exchange.keep(
            key_of(&alice),
            Kept {
                value: HeaderValue::from_static("Bearer for-upstream"),
                until: Instant::now() + Duration::from_secs(60),
            },
        );
        assert_eq!(exchange.exchanged(&alice).unwrap(), "Bearer for-upstream");
        assert!(exchange.exchanged(&bob).is_none(), "another client's token");
        exchange.keep(
            key_of(&bob),
            Kept {
                value: HeaderValue::from_static("Bearer old"),
                until: Instant::now(),
            },
        );
        assert!(exchange.exchanged(&bob).is_none(), "expired");
    }

    #[test]
    fn no_more_than_the_bound_are_kept() {
        let exchange = exchange();
        for i in 0..MAX_KEPT + 5 {
            let presented = HeaderValue::from_str(&format!("Bearer t{i}")).unwrap();
            exchange.keep(
                key_of(&presented),
                Kept {
                    value: HeaderValue::from_static("Bearer x"),
                    until: Instant::now() + Duration::from_secs(60),
                },
            );
        }
        assert_eq!(exchange.kept.lock().len(), MAX_KEPT);
        let last = HeaderValue::from_str(&format!("Bearer t{}", MAX_KEPT + 4)).unwrap();
        assert!(exchange.exchanged(&last).is_some(), "the newest is kept");
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
