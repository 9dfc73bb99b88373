use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use super::jwt::{self, Key, Rules, Verifier, read_jwks};
use super::*;

const RSA_PEM: &str = include_str!("../../tests/fixtures/jwt/rsa.pem");
const EC_PEM: &str = include_str!("../../tests/fixtures/jwt/ec.pem");
const JWKS: &str = include_str!("../../tests/fixtures/jwt/jwks.json");
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const ISSUER: &str = "https://auth.example.com/";
const AUDIENCE: &str = "https://mcp.example.com/mcp";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn rules() -> Rules {
    Rules {
        issuer: ISSUER.into(),
        audience: vec![AUDIENCE.into()],
        leeway: Duration::from_secs(30),
    }
}

/// Good claims for `sub`, with `changes` merged over them (`null` removes a claim).
fn claims(sub: &str, changes: Value) -> Value {
    let mut claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now() + 600,
        "iat": now()});
    for (name, value) in changes.as_object().unwrap() {
        if value.is_null() {
            claims.as_object_mut().unwrap().remove(name);
        } else {
            claims[name] = value.clone();
        }
    }
    claims
}

fn hs256(claims: &Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

fn rs256(claims: &Value, kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_owned);
    let key = EncodingKey::from_rsa_pem(RSA_PEM.as_bytes()).unwrap();
    encode(&header, claims, &key).unwrap()
}

fn es256(claims: &Value, kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = kid.map(str::to_owned);
    let key = EncodingKey::from_ec_pem(EC_PEM.as_bytes()).unwrap();
    encode(&header, claims, &key).unwrap()
}

/// A verifier and the keys it verifies with.
struct Check {
    verifier: Verifier,
    keys: Vec<Key>,
}

impl Check {
    /// The caller `token` names, at an endpoint with no resource identifier (the
    /// configured audience applies).
    fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        let head = jwt::head(token)?;
        self.verifier
            .verify(token, &head, &self.keys, None)
            .map(|verified| verified.caller)
    }
}

fn shared_secret() -> Check {
    Check {
        verifier: Verifier::new(&rules()),
        keys: vec![Key::hs256(SECRET)],
    }
}

fn jwks() -> Check {
    Check {
        verifier: Verifier::new(&rules()),
        keys: read_jwks(JWKS).unwrap().keys,
    }
}

/// `future`'s output (nothing in these awaits anything).
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

/// `[auth]` with the shared secret and `resource`.
fn with_secret(resource: Resource) -> Auth {
    let check = shared_secret();
    Auth::Jwt(Box::new(Jwt {
        verifier: check.verifier,
        keys: Keys::Fixed(std::sync::Arc::new(check.keys)),
        resource,
        policy: Policy::default(),
        rates: Default::default(),
    }))
}

/// A token with any header and claims, and a signature of `signature`.
fn forged(header: Value, claims: &Value, signature: &[u8]) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.{}",
        part(&header),
        part(claims),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

#[test]
fn an_hs256_token_names_its_issuer_and_subject() {
    let v = shared_secret();
    let alice = v.verify(&hs256(&claims("alice", json!({})))).unwrap();
    assert_eq!(alice, Caller::subject(ISSUER, "alice"));
    // Another token of the same subject is the same caller; another subject is not.
    let again = v
        .verify(&hs256(&claims(
            "alice",
            json!({"iat": now() - 5, "jti": "2"}),
        )))
        .unwrap();
    assert_eq!(again, alice);
    assert_ne!(v.verify(&hs256(&claims("bob", json!({})))).unwrap(), alice);
    // Another secret's token does not verify.
    let other = encode(
        &Header::new(Algorithm::HS256),
        &claims("alice", json!({})),
        &EncodingKey::from_secret(b"another secret, also 32 bytes long"),
    )
    .unwrap();
    assert_eq!(v.verify(&other), Err(AuthError::Signature));
}

#[test]
fn a_jwks_file_verifies_rs256_and_es256_and_skips_what_it_cannot_use() {
    let read = read_jwks(JWKS).unwrap();
    assert_eq!(read.keys.len(), 2, "{:?}", read.keys);
    assert_eq!(read.skipped.len(), 2, "{:?}", read.skipped);
    assert!(read.skipped[0].starts_with("enc-1: an encryption key"));
    let v = jwks();
    let alice = Caller::subject(ISSUER, "alice");
    for token in [
        rs256(&claims("alice", json!({})), Some("rsa-1")),
        rs256(&claims("alice", json!({})), None),
        es256(&claims("alice", json!({})), Some("ec-1")),
        es256(&claims("alice", json!({})), None),
    ] {
        assert_eq!(v.verify(&token), Ok(alice));
    }
    assert_eq!(
        v.verify(&rs256(&claims("alice", json!({})), Some("rotated-away"))),
        Err(AuthError::UnknownKey("rotated-away".into()))
    );
    // A kid naming a key of another algorithm does not make the token verify.
    assert_eq!(
        v.verify(&rs256(&claims("alice", json!({})), Some("ec-1"))),
        Err(AuthError::UnknownKey("ec-1".into()))
    );
    for bad in [
        "",
        "{}",
        r#"{"keys": []}"#,
        r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
    ] {
        assert!(read_jwks(bad).is_err(), "{bad}");
    }
}

#[test]
fn wrong_issuer_audience_or_subject_are_refused_and_said() {
    let v = shared_secret();
    let cases = [
        (
            json!({"iss": "https://evil.example/"}),
            AuthError::Issuer(ISSUER.into()),
        ),
        (
            json!({"aud": "https://other.example/mcp"}),
            AuthError::Audience(AUDIENCE.into()),
        ),
        (
            json!({"aud": ["https://other.example/mcp"]}),
            AuthError::Audience(AUDIENCE.into()),
        ),
        (
            json!({"iss": null}),
            AuthError::Claim("it has no iss claim".into()),
        ),
        (
            json!({"aud": null}),
            AuthError::Claim("it has no aud claim".into()),
        ),
        (
            json!({"sub": null}),
            AuthError::Claim("it has no sub claim".into()),
        ),
        (
            json!({"exp": null}),
            AuthError::Claim("it has no exp claim".into()),
        ),
        (
            json!({"sub": ""}),
            AuthError::Claim("its sub claim is empty".into()),
        ),
    ];
    for (changes, expected) in cases {
        let token = hs256(&claims("alice", changes.clone()));
        assert_eq!(v.verify(&token), Err(expected), "{changes}");
    }
    // An audience list naming this server is fine.
    let listed = hs256(&claims("alice", json!({"aud": ["x", AUDIENCE]})));
    assert!(v.verify(&listed).is_ok());
}

#[test]
fn expiry_and_not_before_allow_a_small_leeway_only() {
    let v = shared_secret();
    let at = |exp: u64| hs256(&claims("alice", json!({"exp": exp})));
    assert!(v.verify(&at(now() - 10)).is_ok(), "within the 30 s leeway");
    assert_eq!(v.verify(&at(now() - 120)), Err(AuthError::Expired));
    let early = hs256(&claims("alice", json!({"nbf": now() + 600})));
    assert_eq!(v.verify(&early), Err(AuthError::NotYetValid));
    let soon = hs256(&claims("alice", json!({"nbf": now() + 10})));
    assert!(v.verify(&soon).is_ok());
}

#[test]
fn the_key_decides_the_algorithm_never_the_token() {
    let v = jwks();
    let good = claims("alice", json!({}));
    // alg none, unsigned.
    let none = forged(json!({"alg": "none", "typ": "JWT"}), &good, b"");
    assert_eq!(
        v.verify(&none),
        Err(AuthError::Algorithm {
            alg: "none".into(),
            accepted: "ES256, RS256".into()
        })
    );
    // HS256 "signed" with the RSA public key as the secret (the classic confusion).
    let public = read_jwks(JWKS).unwrap();
    assert!(public.keys.iter().any(|k| k.algorithm == Algorithm::RS256));
    let confused = encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(RSA_PEM.as_bytes()),
    )
    .unwrap();
    assert!(matches!(
        v.verify(&confused),
        Err(AuthError::Algorithm { alg, .. }) if alg == "HS256"
    ));
    // And the other way round: a shared-secret server takes no RS256 token.
    assert!(matches!(
        shared_secret().verify(&rs256(&good, None)),
        Err(AuthError::Algorithm { alg, .. }) if alg == "RS256"
    ));
    // A token whose signature was cut off or changed.
    let token = rs256(&good, Some("rsa-1"));
    let (signed, signature) = token.rsplit_once('.').unwrap();
    assert_eq!(v.verify(&format!("{signed}.")), Err(AuthError::Signature));
    let mut changed = signature.to_owned().into_bytes();
    changed[3] = if changed[3] == b'A' { b'B' } else { b'A' };
    let changed = format!("{signed}.{}", String::from_utf8(changed).unwrap());
    assert_eq!(v.verify(&changed), Err(AuthError::Signature));
    // Claims changed after signing.
    let (head, rest) = token.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let elevated = URL_SAFE_NO_PAD.encode(claims("admin", json!({})).to_string());
    assert_eq!(
        v.verify(&format!("{head}.{elevated}.{signature}")),
        Err(AuthError::Signature)
    );
}

#[test]
fn garbage_is_malformed_and_never_panics() {
    let v = jwks();
    for token in [
        "x",
        "a.b",
        "a.b.c.d",
        "!!!.???.***",
        "e30.e30.e30",
        &forged(json!({"typ": "JWT"}), &json!({}), b"x"),
        &forged(json!({"alg": 5}), &json!({}), b"x"),
        &format!("{}.e30.", URL_SAFE_NO_PAD.encode("[1,2]")),
        &"A".repeat(20_000),
    ] {
        let refused = v.verify(token).unwrap_err();
        assert_eq!(refused.label(), "malformed", "{token:.40}: {refused}");
    }
    // Claims that are not the right shapes.
    let odd = rs256(&claims("alice", json!({"sub": 42})), None);
    assert!(
        matches!(v.verify(&odd), Err(AuthError::Claim(_))),
        "{:?}",
        v.verify(&odd)
    );
}

#[test]
fn the_bearer_token_comes_from_one_authorization_header() {
    let auth = with_secret(Resource {
        metadata_url: Some("https://mcp.example.com/.well-known/oauth-protected-resource".into()),
        ..Resource::default()
    });
    let token = hs256(&claims("alice", json!({})));
    let with = |values: &[&str]| {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    };
    let alice = Caller::subject(ISSUER, "alice");
    assert_eq!(
        ready(auth.caller(&with(&[&format!("Bearer {token}")]), "/mcp")),
        Ok(alice)
    );
    assert_eq!(
        ready(auth.caller(&with(&[&format!("bearer  {token} ")]), "/mcp")),
        Ok(alice)
    );
    assert_eq!(
        ready(auth.caller(&with(&[]), "/mcp")),
        Err(AuthError::Missing)
    );
    // Credentials of another scheme are no bearer token at all.
    assert_eq!(
        ready(auth.caller(&with(&[&format!("Basic {token}")]), "/mcp")),
        Err(AuthError::Missing)
    );
    for refused in [
        vec!["Bearer".to_owned()],
        vec![format!("Bearer {token}"), format!("Bearer {token}")],
    ] {
        let refs: Vec<&str> = refused.iter().map(String::as_str).collect();
        assert_eq!(
            ready(auth.caller(&with(&refs), "/mcp")),
            Err(AuthError::NotBearer)
        );
    }
    // Credential headers besides the token do not change who it is.
    let mut extra = with(&[&format!("Bearer {token}")]);
    extra.insert("cookie", HeaderValue::from_static("sid=1"));
    assert_eq!(ready(auth.caller(&extra, "/mcp")), Ok(alice));

    // The challenges: none for a missing token, invalid_token with a description otherwise.
    assert_eq!(
        auth.challenge(&AuthError::Missing, "/mcp"),
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource\""
    );
    let expired = auth.challenge(&AuthError::Expired, "/mcp");
    assert_eq!(
        expired,
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource\", error=\"invalid_token\", error_description=\"the token has expired\""
    );
    // What a token said cannot break out of the quoted string.
    let hostile = auth.challenge(&AuthError::UnknownKey("a\"b\\c\u{e9}".into()), "/mcp");
    let text = hostile.to_str().unwrap();
    assert!(
        text.ends_with("(kid a'b'c?) this server does not have\""),
        "{text}"
    );
    assert_eq!(
        Auth::Credentials.challenge(&AuthError::Signature, "/mcp"),
        "Bearer error=\"invalid_token\", error_description=\"the token signature does not verify\""
    );
}

#[test]
fn without_auth_the_caller_is_the_credential_headers() {
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer anything"));
    assert_eq!(
        ready(Auth::Credentials.caller(&headers, "/mcp")),
        Ok(Caller::of(&headers))
    );
    assert_eq!(
        ready(Auth::Credentials.caller(&HeaderMap::new(), "/mcp")),
        Ok(Caller::ANONYMOUS)
    );
}

#[test]
fn at_an_endpoint_the_token_must_be_for_exactly_its_resource() {
    let check = shared_secret();
    let resource = "https://mcp.example.com/mcp/github";
    let verify = |aud: Value| {
        let token = hs256(&claims("alice", json!({ "aud": aud })));
        let head = jwt::head(&token).unwrap();
        check
            .verifier
            .verify(&token, &head, &check.keys, Some(resource))
            .map(|verified| verified.caller)
    };
    let alice = Caller::subject(ISSUER, "alice");
    assert_eq!(verify(json!(resource)), Ok(alice));
    assert_eq!(
        verify(json!(["https://other.example/mcp", resource])),
        Ok(alice)
    );
    // The configured audience is accepted at every endpoint too.
    assert_eq!(verify(json!(AUDIENCE)), Ok(alice));
    // (AUDIENCE, https://mcp.example.com/mcp, is accepted everywhere: above.)
    for near in [
        "https://mcp.example.com/mcp/github/",
        "https://mcp.example.com/mcp/githubx",
        "https://mcp.example.com",
        "https://MCP.example.com/mcp/github",
    ] {
        assert!(
            matches!(verify(json!(near)), Err(AuthError::Audience(_))),
            "{near}"
        );
    }
}

#[test]
fn scopes_come_from_scope_or_scp_and_are_bounded() {
    let check = shared_secret();
    let scopes = |extra: Value| {
        let token = hs256(&claims("alice", extra));
        let head = jwt::head(&token).unwrap();
        check
            .verifier
            .verify(&token, &head, &check.keys, None)
            .unwrap()
            .scopes
    };
    assert_eq!(scopes(json!({"scope": "a  b"})), ["a", "b"]);
    assert_eq!(scopes(json!({"scp": ["x", "y"]})), ["x", "y"]);
    assert_eq!(scopes(json!({"scp": "z"})), ["z"]);
    assert!(scopes(json!({})).is_empty());
    let many: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
    assert_eq!(
        scopes(json!({"scope": many.join(" ")})).len(),
        jwt::MAX_SCOPES
    );
}
