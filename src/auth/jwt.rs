//! Bearer JWTs (RFC 7519) verified against keys the operator configured: an HS256 shared
//! secret, or the public keys of a local JWKS file (RFC 7517) — RSA (RS256) and P-256
//! (ES256).
//!
//! Which algorithm a token may use is decided by the key, never by the token: a key
//! verifies only its own algorithm, so `"alg": "none"`, or HS256 "signed" with an RSA
//! public key, find no key and are refused. `iss`, `aud`, `exp` and `sub` are required;
//! `exp` and `nbf` are judged with a small leeway for clock skew. The caller a token
//! names is its issuer and subject ([`Caller::subject`]).

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
    /// `aud` must name one of these.
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
    if set.keys.len() > MAX_KEYS {
        return Err(format!(
            "holds {} keys; at most {MAX_KEYS} are read",
            set.keys.len()
        ));
    }
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for (i, jwk) in set.keys.iter().enumerate() {
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

/// Verifies bearer tokens.
#[derive(Clone)]
pub struct Verifier {
    keys: Vec<(Key, Validation)>,
    issuer: String,
    audience: String,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&Key> = self.keys.iter().map(|(key, _)| key).collect();
        f.debug_struct("Verifier")
            .field("keys", &keys)
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// The claims the proxy reads (the rest are not its business).
/// Both are required (the validation says which is missing, so they may be absent here).
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    sub: Option<String>,
}

/// The part of a token's header that chooses the key.
#[derive(Deserialize)]
struct Head {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

impl Verifier {
    pub fn new(keys: Vec<Key>, rules: &Rules) -> Verifier {
        let keys = keys
            .into_iter()
            .map(|key| {
                let mut validation = Validation::new(key.algorithm);
                validation.set_issuer(&[&rules.issuer]);
                validation.set_audience(&rules.audience);
                validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                validation.validate_nbf = true;
                validation.leeway = rules.leeway.as_secs();
                (key, validation)
            })
            .collect();
        Verifier {
            keys,
            issuer: rules.issuer.clone(),
            audience: rules.audience.join(" or "),
        }
    }

    /// The caller `token` names, if a configured key signed it and its claims hold.
    pub fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        if token.len() > MAX_TOKEN {
            return Err(AuthError::Malformed("it is longer than 16 KiB".into()));
        }
        let head = head(token)?;
        let of_algorithm: Vec<&(Key, Validation)> = self
            .keys
            .iter()
            .filter(|(key, _)| name(key.algorithm) == head.alg)
            .collect();
        if of_algorithm.is_empty() {
            let accepted: Vec<&str> = self.accepted();
            return Err(AuthError::Algorithm {
                alg: head.alg.chars().take(32).collect(),
                accepted: accepted.join(", "),
            });
        }
        let candidates: Vec<&(Key, Validation)> = of_algorithm
            .into_iter()
            .filter(|(key, _)| match (&head.kid, &key.kid) {
                (Some(wanted), Some(kid)) => wanted == kid,
                _ => true,
            })
            .collect();
        if candidates.is_empty() {
            let kid = head.kid.unwrap_or_default();
            return Err(AuthError::UnknownKey(kid.chars().take(64).collect()));
        }
        for (key, validation) in candidates {
            match jsonwebtoken::decode::<Claims>(token, &key.decoding, validation) {
                Ok(data) => {
                    let (Some(iss), Some(sub)) = (data.claims.iss, data.claims.sub) else {
                        return Err(AuthError::Claim("it has no iss or no sub claim".into()));
                    };
                    if sub.is_empty() {
                        return Err(AuthError::Claim("its sub claim is empty".into()));
                    }
                    return Ok(Caller::subject(&iss, &sub));
                }
                Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => continue,
                Err(e) => return Err(self.refusal(e.kind())),
            }
        }
        Err(AuthError::Signature)
    }

    fn accepted(&self) -> Vec<&'static str> {
        let mut accepted: Vec<&'static str> = self
            .keys
            .iter()
            .map(|(key, _)| name(key.algorithm))
            .collect();
        accepted.sort_unstable();
        accepted.dedup();
        accepted
    }

    fn refusal(&self, kind: &ErrorKind) -> AuthError {
        match kind {
            ErrorKind::ExpiredSignature => AuthError::Expired,
            ErrorKind::ImmatureSignature => AuthError::NotYetValid,
            ErrorKind::InvalidIssuer => AuthError::Issuer(self.issuer.clone()),
            ErrorKind::InvalidAudience => AuthError::Audience(self.audience.clone()),
            ErrorKind::MissingRequiredClaim(claim) => {
                AuthError::Claim(format!("it has no {claim} claim"))
            }
            ErrorKind::InvalidClaimFormat(claim) => {
                AuthError::Claim(format!("its {claim} claim is not valid"))
            }
            ErrorKind::Json(_) => {
                AuthError::Claim("its claims are not readable (iss and sub must be strings)".into())
            }
            ErrorKind::InvalidSignature
            | ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidRsaKey(_)
            | ErrorKind::InvalidKeyFormat => AuthError::Signature,
            ErrorKind::InvalidAlgorithm | ErrorKind::UnsupportedAlgorithm => AuthError::Algorithm {
                alg: "?".into(),
                accepted: self.accepted().join(", "),
            },
            _ => AuthError::Malformed("it is not a signed JWT".into()),
        }
    }
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
fn head(token: &str) -> Result<Head, AuthError> {
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
