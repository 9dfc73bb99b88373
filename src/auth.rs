//! Who a request is from: the [`Caller`] every session, pooled or pinned upstream
//! session, handle and `requestState` is bound to.
//!
//! Without `[auth]` the caller is a hash of the credential headers as they come
//! (`Authorization`, `Cookie`, `X-Api-Key`): the proxy checks nothing, it only never
//! lets one set of credentials reach what another opened.
//!
//! This module decides the caller once per request, in the front, before the body is
//! read; everything below receives it and never looks at credential headers again.

use http::HeaderMap;

use crate::mcp::caller::Caller;

/// How callers are told apart.
#[derive(Debug, Default)]
pub enum Auth {
    /// By their credential headers, hashed; nothing is verified.
    #[default]
    Credentials,
}

/// Why a request was not let in (with `[auth]`): said to the client in words, counted by
/// [`AuthError::label`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {}

impl Auth {
    /// The caller behind a request's `headers`.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, AuthError> {
        match self {
            Auth::Credentials => Ok(Caller::of(headers)),
        }
    }
}
