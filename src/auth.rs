//! Who a request is from: the [`Caller`] every session, pooled or pinned upstream
//! session, handle and `requestState` is bound to.
//!
//! - Without `[auth]` the caller is a hash of the credential headers as they come
//!   (`Authorization`, `Cookie`, `X-Api-Key`): the proxy verifies nothing, it only never
//!   lets one set of credentials reach what another opened.
//! - With `[auth]` the proxy is an OAuth 2.1 resource server ([`resource`]): every MCP
//!   request must carry a bearer JWT (RFC 6750) signed by one of the keys ([`keys`]:
//!   configured, or the authorization server's, fetched), from the configured issuer,
//!   for this endpoint (or a configured audience), not expired ([`jwt`]), with the
//!   scopes every token needs; the caller is the token's issuer and subject, so a
//!   refreshed token of the same subject is the same caller. Anything else is refused
//!   with HTTP 401 (403 for a missing scope) and a `WWW-Authenticate: Bearer` challenge
//!   saying what was wrong and where the resource's metadata is.
//!
//! This module decides the caller once per request, in the front, before the body is
//! read; everything below receives it and never looks at credential headers again.
//! Whether the upstream sees the client's token is the upstream's business
//! (`upstream::Settings::withhold_authorization`).

pub mod exchange;
mod fetch;
pub mod jwt;
pub mod keys;
pub mod policy;
pub mod rates;
pub mod resource;

use http::header::{AUTHORIZATION, HeaderValue};
use http::{HeaderMap, StatusCode};

use crate::mcp::caller::Caller;

pub use jwt::{Key, Rules, Verified, Verifier};
pub use keys::Keys;
pub use policy::Policy;
pub use resource::Resource;

/// How callers are told apart.
#[derive(Debug, Default)]
pub enum Auth {
    /// By their credential headers, hashed; nothing is verified.
    #[default]
    Credentials,
    /// By a verified bearer token's subject.
    Jwt(Box<Jwt>),
}

/// `[auth]` on: bearer tokens verified.
#[derive(Debug)]
pub struct Jwt {
    pub verifier: Verifier,
    pub keys: Keys,
    /// This server as a protected resource: its endpoints' identifiers, metadata and
    /// required scopes.
    pub resource: Resource,
    /// Who may use which upstream, tool, prompt and resource.
    pub policy: Policy,
    /// How often each caller may call a tool (kept by a reload that leaves the limits
    /// as they were).
    pub rates: std::sync::Arc<rates::Rates>,
}

/// Why a request was not let in (with `[auth]`): said to the client in words (no quotes
/// or backslashes, so that it fits a challenge's `error_description`), counted by
/// [`AuthError::label`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the request carries no bearer token (Authorization: Bearer <token>)")]
    Missing,
    #[error("the Authorization header is not one bearer token")]
    NotBearer,
    #[error("the bearer token is malformed: {0}")]
    Malformed(String),
    #[error("the token is signed with {alg}, which is not accepted here (accepted: {accepted})")]
    Algorithm { alg: String, accepted: String },
    #[error("the token names a key (kid {0}) this server does not have")]
    UnknownKey(String),
    #[error("the token signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token was not issued by {0}")]
    Issuer(String),
    #[error("the token is not meant for this server (its aud must name {0})")]
    Audience(String),
    #[error("the token claims do not hold: {0}")]
    Claim(String),
    #[error("the token lacks the scope this server requires: {}", .0.join(" "))]
    InsufficientScope(Vec<String>),
    #[error("the authorization server's keys are not available yet; try again shortly")]
    KeysUnavailable,
}

impl AuthError {
    /// A fixed name for metrics (`auth_refused_total{reason}`).
    pub fn label(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::NotBearer | AuthError::Malformed(_) => "malformed",
            AuthError::Algorithm { .. } => "algorithm",
            AuthError::UnknownKey(_) => "unknown_key",
            AuthError::Signature => "signature",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::Issuer(_) => "issuer",
            AuthError::Audience(_) => "audience",
            AuthError::Claim(_) => "claims",
            AuthError::InsufficientScope(_) => "insufficient_scope",
            AuthError::KeysUnavailable => "keys_unavailable",
        }
    }

    /// The HTTP status of the refusal: 401 (RFC 6750 `invalid_token` or no token), 403
    /// for a token lacking a scope, 503 while no key can verify anything.
    pub fn status(&self) -> StatusCode {
        match self {
            AuthError::InsufficientScope(_) => StatusCode::FORBIDDEN,
            AuthError::KeysUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        }
    }
}

impl Auth {
    /// The caller behind a request's `headers` to the endpoint at `path`; with
    /// `[auth]`, only a request carrying a valid bearer token for it has one.
    pub async fn caller(&self, headers: &HeaderMap, path: &str) -> Result<Caller, AuthError> {
        Ok(self.identify(headers, path).await?.0)
    }

    /// [`Auth::caller`], and with `[auth]` what its token says (for the policy).
    pub async fn identify(
        &self,
        headers: &HeaderMap,
        path: &str,
    ) -> Result<(Caller, Option<Verified>), AuthError> {
        match self {
            Auth::Credentials => Ok((Caller::of(headers), None)),
            Auth::Jwt(jwt) => {
                let verified = jwt.verify(headers, path).await?;
                Ok((verified.caller, Some(verified)))
            }
        }
    }

    /// Whether `[[auth.rules]]` or `[[auth.limits]]` judge requests (else nothing is
    /// checked).
    pub fn has_rules(&self) -> bool {
        matches!(self, Auth::Jwt(jwt) if jwt.policy.is_active() || jwt.rates.is_active())
    }

    /// Whether `who` may use anything of a `kind` (`tool`, `prompt`, `resource`) of
    /// `upstream` (always, without rules).
    pub fn may_use_some(&self, upstream: &str, kind: &str, who: &Verified) -> bool {
        match self {
            Auth::Jwt(jwt) => jwt.policy.may_use_some(upstream, kind, who),
            Auth::Credentials => true,
        }
    }

    /// Whether `[[auth.rules]]` decide what callers may use (and see).
    pub fn has_policy(&self) -> bool {
        matches!(self, Auth::Jwt(jwt) if jwt.policy.is_active())
    }

    /// Takes a call of `tool` at `upstream` by `caller` from its `[[auth.limits]]`
    /// budget (always room without `[auth]` or limits).
    pub fn take_call(
        &self,
        upstream: &str,
        tool: &str,
        caller: &Caller,
    ) -> Result<(), rates::Exceeded> {
        match (self, caller.hash()) {
            (Auth::Jwt(jwt), Some(hash)) if jwt.rates.is_active() => {
                jwt.rates.take(upstream, tool, hash)
            }
            _ => Ok(()),
        }
    }

    /// How long a call of `tool` at `upstream` may take (`[[auth.limits]]`'s `timeout`).
    pub fn tool_timeout(&self, upstream: &str, tool: &str) -> Option<std::time::Duration> {
        match self {
            Auth::Jwt(jwt) => jwt.rates.timeout(upstream, tool),
            Auth::Credentials => None,
        }
    }

    /// Whether `who` may use `item` of the upstream named `upstream` (always, without
    /// `[auth]` or rules).
    pub fn allows(
        &self,
        upstream: &str,
        item: policy::Item<'_>,
        who: Option<&Verified>,
    ) -> Option<bool> {
        let Auth::Jwt(jwt) = self else {
            return None;
        };
        if !jwt.policy.is_active() {
            return None;
        }
        // Rules and no verified token cannot meet (the token is checked first); if
        // they did, nothing would be allowed.
        let Some(who) = who else {
            return Some(false);
        };
        Some(
            jwt.policy.allows(upstream, policy::Item::Upstream, who)
                && jwt.policy.allows(upstream, item, who),
        )
    }

    /// The `WWW-Authenticate` value refusing a request to the endpoint at `path` for
    /// `error` (RFC 6750 §3, RFC 9728 §5.1): where the resource's metadata is, the
    /// scopes it requires; no error code when the request carried no token at all,
    /// `insufficient_scope` for a missing scope, `invalid_token` with a description
    /// otherwise.
    pub fn challenge(&self, error: &AuthError, path: &str) -> HeaderValue {
        let mut challenge = String::from("Bearer");
        let mut params = Vec::new();
        if let Auth::Jwt(jwt) = self {
            if let Some(url) = jwt.resource.metadata_url(path) {
                params.push(format!("resource_metadata=\"{}\"", quotable(&url)));
            }
            if !jwt.resource.required_scopes.is_empty() {
                params.push(format!(
                    "scope=\"{}\"",
                    quotable(&jwt.resource.required_scopes.join(" "))
                ));
            }
        }
        match error {
            AuthError::Missing | AuthError::KeysUnavailable => {}
            AuthError::InsufficientScope(_) => {
                params.push("error=\"insufficient_scope\"".to_owned());
            }
            _ => params.push("error=\"invalid_token\"".to_owned()),
        }
        if !matches!(error, AuthError::Missing) {
            params.push(format!(
                "error_description=\"{}\"",
                quotable(&error.to_string())
            ));
        }
        if !params.is_empty() {
            challenge.push(' ');
            challenge.push_str(&params.join(", "));
        }
        HeaderValue::from_str(&challenge).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    /// The keys fetched from an authorization server that `running` does not share
    /// (they were started for this value), if any.
    pub fn fresh_keys(&self, running: &Auth) -> Option<std::sync::Arc<keys::IssuerKeys>> {
        let Auth::Jwt(jwt) = self else {
            return None;
        };
        let Keys::Issuer(fresh) = &jwt.keys else {
            return None;
        };
        match running {
            Auth::Jwt(old) if matches!(&old.keys, Keys::Issuer(kept) if std::sync::Arc::ptr_eq(kept, fresh)) => {
                None
            }
            _ => Some(fresh.clone()),
        }
    }

    /// The protected resource metadata of the endpoint at `path`, when `[auth]` has a
    /// public URL to name it by.
    pub fn metadata(&self, path: &str) -> Option<serde_json::Value> {
        match self {
            Auth::Credentials => None,
            Auth::Jwt(jwt) => jwt.resource.metadata(path),
        }
    }
}

impl Jwt {
    /// The verified token of `headers`, used at the endpoint at `path`.
    pub async fn verify(&self, headers: &HeaderMap, path: &str) -> Result<Verified, AuthError> {
        let token = bearer(headers)?;
        let head = jwt::head(token)?;
        let keys = self.keys.for_kid(head.kid.as_deref()).await?;
        let resource = self.resource.id(path);
        let verified = self
            .verifier
            .verify(token, &head, &keys, resource.as_deref())?;
        let missing = self.resource.missing_scopes(&verified.scopes);
        if !missing.is_empty() {
            return Err(AuthError::InsufficientScope(missing));
        }
        Ok(verified)
    }
}

/// The bearer token of `headers`: exactly one `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(match headers.contains_key(AUTHORIZATION) {
            true => AuthError::NotBearer,
            false => AuthError::Missing,
        });
    };
    bearer_token(value)
}

/// The token of one `Authorization` value, `Bearer <token>` (the scheme in any case).
pub(crate) fn bearer_token(value: &HeaderValue) -> Result<&str, AuthError> {
    let value = value.to_str().map_err(|_| AuthError::NotBearer)?;
    let (scheme, token) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
    // Credentials of another scheme are no bearer token at all (RFC 6750 §3.1: the
    // challenge then carries no error code).
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Missing);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::NotBearer);
    }
    Ok(token)
}

/// `text` as it may stand in a quoted-string of a challenge (RFC 6750 §3: no `"` or `\`,
/// visible ASCII and spaces).
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests;
