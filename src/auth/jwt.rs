//! Bearer JWTs (RFC 7519) verified against a set of keys (`auth::keys`: an HS256 shared
//! secret, the public keys of a JWKS (RFC 7517) read from a file or fetched from the
//! authorization server) — RSA (RS256) and P-256 (ES256).
//!
//! Which algorithm a token may use is decided by the key, never by the token: a key
//! verifies only its own algorithm, so `"alg": "none"`, or HS256 "signed" with an RSA
//! public key, find no key and are refused. `iss`, `aud`, `exp` and `sub` are required;
//! `aud` must name the resource the token is used at (RFC 8707: the endpoint) or a
//! configured audience; `exp` and `nbf` are judged with a small leeway for clock skew.
//! The caller a token names is its issuer and subject ([`Caller::subject`]); its scopes
//! (`scope`, or `scp`) come along for the checks above it.

use std::fmt;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::AuthError;
use crate::mcp::caller::Caller;

/// The longest token looked at; real ones are a few KB at most.
const MAX_TOKEN: usize = 16 * 1024;
/// The most keys a JWKS file may hold (a token without `kid` is tried against each key of
/// its algorithm).
pub const MAX_KEYS: usize = 32;

/// What tokens must say, besides being signed by a configured key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// The only `iss` accepted.
    pub issuer: String,
    /// `aud` must name one of these, or the resource (the endpoint) it is used at.
    pub audience: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
}

/// One verifying key.
#[derive(Clone)]
pub struct Key {
    /// Its `kid`, if it has one.
    pub kid: Option<String>,
    /// The one algorithm it verifies.
    pub algorithm: Algorithm,
    decoding: DecodingKey,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?}, kid {:?})", self.algorithm, self.kid)
    }
}

impl Key {
    /// An HS256 shared secret.
    pub fn hs256(secret: &[u8]) -> Key {
        Key {
            kid: None,
            algorithm: Algorithm::HS256,
            decoding: DecodingKey::from_secret(secret),
        }
    }
}

/// The keys of a JWKS document that verify tokens, and why the others were left out (a
/// JWKS often lists encryption keys, or kinds of key this proxy does not verify).
#[derive(Debug)]
pub struct JwksKeys {
    pub keys: Vec<Key>,
    /// `kid` (or position) and reason, for each key left out.
    pub skipped: Vec<String>,
}

/// Reads a JWKS document (`{"keys": [...]}`): its RS256 and ES256 (P-256) signing keys.
pub fn read_jwks(text: &str) -> Result<JwksKeys, String> {
    let set: JwkSet = serde_json::from_str(text)
        .map_err(|e| format!("is not a JWKS document ({{\"keys\": [...]}}): {e}"))?;
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    if set.keys.len() > MAX_KEYS {
        skipped.push(format!(
            "{} keys beyond the first {MAX_KEYS} (at most {MAX_KEYS} are read)",
            set.keys.len() - MAX_KEYS
        ));
    }
    for (i, jwk) in set.keys.iter().enumerate().take(MAX_KEYS) {
        let name = jwk.common.key_id.clone().unwrap_or_else(|| format!("#{i}"));
        match key_of(jwk) {
            Ok(key) => keys.push(key),
            Err(why) => skipped.push(format!("{name}: {why}")),
        }
    }
    if keys.is_empty() {
        return Err(format!(
            "has no RS256 or ES256 (P-256) signing key{}",
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({})", skipped.join("; "))
            }
        ));
    }
    Ok(JwksKeys { keys, skipped })
}

fn key_of(jwk: &Jwk) -> Result<Key, String> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err("an encryption key (use: enc)".into());
    }
    let algorithm = match (&jwk.algorithm, jwk.common.key_algorithm) {
        (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
        (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
            if ec.curve == EllipticCurve::P256 =>
        {
            Algorithm::ES256
        }
        (AlgorithmParameters::EllipticCurve(ec), _) if ec.curve != EllipticCurve::P256 => {
            return Err(format!("curve {:?} (only P-256 is verified)", ec.curve));
        }
        (AlgorithmParameters::RSA(_) | AlgorithmParameters::EllipticCurve(_), Some(alg)) => {
            return Err(format!(
                "algorithm {alg} (only RS256 and ES256 are verified)"
            ));
        }
        (AlgorithmParameters::OctetKey(_), _) => {
            return Err("a symmetric key (use auth.hs256_secret for HS256)".into());
        }
        _ => return Err("not an RSA or EC key".into()),
    };
    let decoding = DecodingKey::from_jwk(jwk).map_err(|e| format!("unreadable: {e}"))?;
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        algorithm,
        decoding,
    })
}

/// Verifies bearer tokens against a set of keys (which may change: keys fetched from
/// the authorization server rotate), for an audience.
#[derive(Clone)]
pub struct Verifier {
    /// One validation per algorithm a key may have (the issuer, the time claims).
    validations: [(Algorithm, Validation); 3],
    issuer: String,
    /// Accepted at every endpoint (`auth.audience`).
    audience: Vec<String>,
    /// Claims kept of each token, for the policy.
    keep: Vec<String>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// What a verified token says of its bearer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub caller: Caller,
    /// Its scopes (`scope`, space-separated, or `scp`), at most [`MAX_SCOPES`].
    pub scopes: Vec<String>,
    /// The claims the policy reads (`Verifier::keeping`), each as its string values (a
    /// string claim, or a list claim's strings; at most [`MAX_SCOPES`]).
    pub claims: Vec<(String, Vec<String>)>,
}

/// The most scopes read from a token.
pub const MAX_SCOPES: usize = 64;

/// The claims the proxy reads (the rest are not its business). Those required may be
/// absent here: the validation says which is missing.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    aud: Option<OneOrMany>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<OneOrMany>,
}

/// A claim that may be one string or a list of them (`aud`, `scp`).
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            OneOrMany::One(one) => (Some(one.as_str()), &[][..]),
            OneOrMany::Many(many) => (None, many.as_slice()),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }
}

/// The part of a token's header that chooses the key.
#[derive(Debug, Deserialize)]
pub struct Head {
    pub alg: String,
    #[serde(default)]
    pub kid: Option<String>,
}

impl Verifier {
    pub fn new(rules: &Rules) -> Verifier {
        let validation = |algorithm| {
            let mut validation = Validation::new(algorithm);
            validation.set_issuer(&[&rules.issuer]);
            // The audience is checked here, against the endpoint's resource too.
            validation.validate_aud = false;
            validation.set_required_spec_claims(&["exp", "iss", "sub"]);
            validation.validate_nbf = true;
            validation.leeway = rules.leeway.as_secs();
            (algorithm, validation)
        };
        Verifier {
            validations: [
                validation(Algorithm::HS256),
                validation(Algorithm::RS256),
                validation(Algorithm::ES256),
            ],
            issuer: rules.issuer.clone(),
            audience: rules.audience.clone(),
            keep: Vec::new(),
        }
    }

    /// This verifier, keeping the claims named `claims` of each token (the policy's).
    pub fn keeping(mut self, claims: Vec<String>) -> Verifier {
        self.keep = claims;
        self
    }

    /// Who `token` (whose header is `head`) is from, if one of `keys` signed it, its
    /// claims hold, and its `aud` names `resource` (this endpoint) or one of the
    /// configured audiences.
    pub fn verify(
        &self,
        token: &str,
        head: &Head,
        keys: &[Key],
        resource: Option<&str>,
    ) -> Result<Verified, AuthError> {
        let of_algorithm: Vec<&Key> = keys
            .iter()
            .filter(|key| name(key.algorithm) == head.alg)
            .collect();
        if of_algorithm.is_empty() {
            return Err(AuthError::Algorithm {
                alg: head.alg.chars().take(32).collect(),
                accepted: accepted(keys).join(", "),
            });
        }
        let candidates: Vec<&Key> = of_algorithm
            .into_iter()
            .filter(|key| match (&head.kid, &key.kid) {
                (Some(wanted), Some(kid)) => wanted == kid,
                _ => true,
            })
            .collect();
        if candidates.is_empty() {
            let kid = head.kid.clone().unwrap_or_default();
            return Err(AuthError::UnknownKey(kid.chars().take(64).collect()));
        }
        for key in candidates {
            let Some((_, validation)) = self
                .validations
                .iter()
                .find(|(algorithm, _)| *algorithm == key.algorithm)
            else {
                continue;
            };
            match jsonwebtoken::decode::<Claims>(token, &key.decoding, validation) {
                Ok(data) => {
                    let mut verified = self.read(data.claims, resource, keys)?;
                    verified.claims = self.kept(token);
                    return Ok(verified);
                }
                Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => continue,
                Err(e) => return Err(self.refusal(e.kind(), keys, resource)),
            }
        }
        Err(AuthError::Signature)
    }

    /// The bearer of verified `claims`, if they are meant for this server.
    fn read(
        &self,
        claims: Claims,
        resource: Option<&str>,
        keys: &[Key],
    ) -> Result<Verified, AuthError> {
        let (Some(iss), Some(sub)) = (claims.iss, claims.sub) else {
            return Err(AuthError::Claim("it has no iss or no sub claim".into()));
        };
        if sub.is_empty() {
            return Err(AuthError::Claim("its sub claim is empty".into()));
        }
        let Some(aud) = claims.aud else {
            return Err(self.refusal(
                &ErrorKind::MissingRequiredClaim("aud".into()),
                keys,
                resource,
            ));
        };
        let meant_here = aud.iter().any(|aud| {
            resource == Some(aud) || self.audience.iter().any(|accepted| accepted == aud)
        });
        if !meant_here {
            return Err(AuthError::Audience(self.audiences(resource)));
        }
        let scopes = match (claims.scope, claims.scp) {
            (Some(scope), _) => scope
                .split_ascii_whitespace()
                .take(MAX_SCOPES)
                .map(str::to_owned)
                .collect(),
            (None, Some(scp)) => scp.iter().take(MAX_SCOPES).map(str::to_owned).collect(),
            (None, None) => Vec::new(),
        };
        Ok(Verified {
            caller: Caller::subject(&iss, &sub),
            scopes,
            claims: Vec::new(),
        })
    }

    /// The claims kept of a verified `token` (read again from its payload: only when the
    /// policy names some).
    fn kept(&self, token: &str) -> Vec<(String, Vec<String>)> {
        if self.keep.is_empty() {
            return Vec::new();
        }
        let Some(payload) = token
            .split('.')
            .nth(1)
            .and_then(|part| URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok())
        else {
            return Vec::new();
        };
        let Ok(claims) =
            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&payload)
        else {
            return Vec::new();
        };
        self.keep
            .iter()
            .filter_map(|name| {
                let values: Vec<String> = match claims.get(name)? {
                    serde_json::Value::String(one) => vec![one.clone()],
                    serde_json::Value::Array(many) => many
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .take(MAX_SCOPES)
                        .collect(),
                    serde_json::Value::Bool(b) => vec![b.to_string()],
                    serde_json::Value::Number(n) => vec![n.to_string()],
                    _ => return None,
                };
                Some((name.clone(), values))
            })
            .collect()
    }

    /// The audiences a token here may name, in words.
    fn audiences(&self, resource: Option<&str>) -> String {
        let names: Vec<&str> = resource
            .into_iter()
            .chain(self.audience.iter().map(String::as_str))
            .collect();
        names.join(" or ")
    }

    fn refusal(&self, kind: &ErrorKind, keys: &[Key], resource: Option<&str>) -> AuthError {
        match kind {
            ErrorKind::ExpiredSignature => AuthError::Expired,
            ErrorKind::ImmatureSignature => AuthError::NotYetValid,
            ErrorKind::InvalidIssuer => AuthError::Issuer(self.issuer.clone()),
            ErrorKind::InvalidAudience => AuthError::Audience(self.audiences(resource)),
            ErrorKind::MissingRequiredClaim(claim) => {
                AuthError::Claim(format!("it has no {claim} claim"))
            }
            ErrorKind::InvalidClaimFormat(claim) => {
                AuthError::Claim(format!("its {claim} claim is not valid"))
            }
            ErrorKind::Json(_) => AuthError::Claim(
                "its claims are not readable (iss and sub must be strings, aud a string or a list)"
                    .into(),
            ),
            ErrorKind::InvalidSignature
            | ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidRsaKey(_)
            | ErrorKind::InvalidKeyFormat => AuthError::Signature,
            ErrorKind::InvalidAlgorithm | ErrorKind::UnsupportedAlgorithm => AuthError::Algorithm {
                alg: "?".into(),
                accepted: accepted(keys).join(", "),
            },
            _ => AuthError::Malformed("it is not a signed JWT".into()),
        }
    }
}

/// The algorithms `keys` verify, by name.
fn accepted(keys: &[Key]) -> Vec<&'static str> {
    let mut accepted: Vec<&'static str> = keys.iter().map(|key| name(key.algorithm)).collect();
    accepted.sort_unstable();
    accepted.dedup();
    accepted
}

/// An algorithm's name in a token header (only those a key here may have).
fn name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::HS256 => "HS256",
        Algorithm::RS256 => "RS256",
        Algorithm::ES256 => "ES256",
        _ => "?",
    }
}

/// The algorithm and key id a token names, read without trusting anything else in it.
pub fn head(token: &str) -> Result<Head, AuthError> {
    if token.len() > MAX_TOKEN {
        return Err(AuthError::Malformed("it is longer than 16 KiB".into()));
    }
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed(
            "it is not a JWT (three base64url parts separated by dots)".into(),
        ));
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .map_err(|_| AuthError::Malformed("its header is not base64url".into()))?;
    serde_json::from_slice(&bytes)
        .map_err(|_| AuthError::Malformed("its header is not a JSON object with an alg".into()))
}
