//! Who a request is from: the [`Caller`] every session, pooled or pinned upstream
//! session, handle and `requestState` is bound to.
//!
//! - Without `[auth]` the caller is a hash of the credential headers as they come
//!   (`Authorization`, `Cookie`, `X-Api-Key`): the proxy verifies nothing, it only never
//!   lets one set of credentials reach what another opened.
//! - With `[auth]` every MCP request must carry a bearer JWT (RFC 6750) that a configured
//!   key signed, for the configured issuer and audience, not expired ([`jwt`]); the
//!   caller is the token's issuer and subject, so a refreshed token of the same subject
//!   is the same caller. Anything else is refused with HTTP 401 and a
//!   `WWW-Authenticate: Bearer` challenge saying what was wrong.
//!
//! This module decides the caller once per request, in the front, before the body is
//! read; everything below receives it and never looks at credential headers again.
//! Whether the upstream sees the client's token is the upstream's business
//! (`upstream::Settings::withhold_authorization`).

pub mod jwt;

use http::HeaderMap;
use http::header::{AUTHORIZATION, HeaderValue};

use crate::mcp::caller::Caller;

pub use jwt::{Key, Rules, Verifier};

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
    /// The protected resource metadata URL (RFC 9728) named in every challenge, so that
    /// an MCP client can find the authorization server.
    pub resource_metadata: Option<String>,
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
        }
    }
}

impl Auth {
    /// The caller behind a request's `headers`; with `[auth]`, only a request carrying a
    /// valid bearer token has one.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, AuthError> {
        match self {
            Auth::Credentials => Ok(Caller::of(headers)),
            Auth::Jwt(jwt) => jwt.verifier.verify(bearer(headers)?),
        }
    }

    /// The `WWW-Authenticate` value refusing a request for `error` (RFC 6750 §3): no
    /// error code when the request carried no token at all, `invalid_token` with a
    /// description otherwise.
    pub fn challenge(&self, error: &AuthError) -> HeaderValue {
        let mut challenge = String::from("Bearer");
        let mut params = Vec::new();
        if let Auth::Jwt(jwt) = self
            && let Some(url) = &jwt.resource_metadata
        {
            params.push(format!("resource_metadata=\"{}\"", quotable(url)));
        }
        if *error != AuthError::Missing {
            params.push("error=\"invalid_token\"".to_owned());
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
    let value = value.to_str().map_err(|_| AuthError::NotBearer)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(AuthError::NotBearer)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
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
