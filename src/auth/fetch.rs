//! What the proxy reads from the authorization server: its metadata (RFC 8414, or OpenID
//! Connect Discovery), which names its `jwks_uri`, and the JWKS there. Every fetch is
//! bounded in time and size, follows at most a few redirects, and never steps down from
//! HTTPS to plain HTTP.

use std::time::Duration;

use serde::Deserialize;

use super::jwt::{self, JwksKeys};

/// How long one fetch may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest metadata document or JWKS read.
const MAX_BODY: usize = 256 * 1024;

/// The HTTP client the key fetches share.
#[derive(Debug, Clone)]
pub struct Fetcher {
    http: reqwest::Client,
    /// For token requests: no redirect is followed (the form carries a caller's token
    /// and the proxy's secret; a 307 would send them on).
    tokens: reqwest::Client,
}

/// The part of an authorization server's metadata read here.
#[derive(Deserialize)]
struct Metadata {
    issuer: Option<String>,
    jwks_uri: Option<String>,
    token_endpoint: Option<String>,
}

/// What the authorization server answered a token request (RFC 6749 §5).
#[derive(Debug)]
pub enum TokenAnswer {
    /// 200: the access token, and for how long it is good (when said).
    Issued {
        access_token: String,
        expires_in: Option<u64>,
    },
    /// 400 or 401: its `error` code and description.
    Refused { status: u16, error: String },
}

#[derive(Deserialize)]
struct Issued {
    access_token: String,
    expires_in: Option<u64>,
}

#[derive(Deserialize, Default)]
struct Refusal {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: String,
}

impl Fetcher {
    pub fn new() -> Result<Fetcher, String> {
        // The process's TLS provider (ring); set once, whoever is first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = client(reqwest::redirect::Policy::custom(|attempt| {
            let downgrade = attempt.url().scheme() != "https"
                && attempt.previous().iter().any(|url| url.scheme() == "https");
            if downgrade {
                attempt.error("a redirect from https to plain http")
            } else if attempt.previous().len() > 3 {
                attempt.error("more than 3 redirects")
            } else {
                attempt.follow()
            }
        }))?;
        let tokens = client(reqwest::redirect::Policy::none())?;
        Ok(Fetcher { http, tokens })
    }

    /// The `jwks_uri` of `issuer`, from its metadata: RFC 8414's
    /// `/.well-known/oauth-authorization-server` first, then OpenID Connect's
    /// `/.well-known/openid-configuration`. The metadata must name the same issuer.
    pub async fn discover(&self, issuer: &str) -> Result<String, String> {
        let metadata = self.metadata_of(issuer).await?;
        let jwks_uri = metadata
            .jwks_uri
            .ok_or_else(|| format!("the metadata of {issuer} names no jwks_uri"))?;
        check_url(&jwks_uri, issuer.starts_with("https://"))?;
        Ok(jwks_uri)
    }

    /// The `token_endpoint` of `issuer`, from its metadata (as [`Self::discover`]).
    pub async fn token_endpoint(&self, issuer: &str) -> Result<String, String> {
        let metadata = self.metadata_of(issuer).await?;
        let endpoint = metadata
            .token_endpoint
            .ok_or_else(|| format!("the metadata of {issuer} names no token_endpoint"))?;
        check_url(&endpoint, issuer.starts_with("https://"))?;
        Ok(endpoint)
    }

    /// `issuer`'s metadata, from the first place it is found.
    async fn metadata_of(&self, issuer: &str) -> Result<Metadata, String> {
        let mut tried = Vec::new();
        for url in metadata_urls(issuer)? {
            match self.metadata(&url, issuer).await {
                Ok(metadata) => return Ok(metadata),
                Err(why) => tried.push(format!("{url}: {why}")),
            }
        }
        Err(format!(
            "no authorization server metadata for {issuer} ({})",
            tried.join("; ")
        ))
    }

    /// A token request: `form` POSTed to `endpoint` with the client's id and secret
    /// (`client_secret_basic`). `Err`: no answer the proxy can read.
    pub async fn token(
        &self,
        endpoint: &str,
        (client_id, secret): (&str, &str),
        form: &[(&str, &str)],
    ) -> Result<TokenAnswer, String> {
        let response = self
            .tokens
            .post(endpoint)
            .basic_auth(form_encoded(client_id), Some(form_encoded(secret)))
            .header(http::header::ACCEPT, "application/json")
            .form(form)
            .send()
            .await
            .map_err(|e| format!("unreachable ({})", without_url(&e)))?;
        let status = response.status().as_u16();
        let body = read_capped(response).await?;
        match status {
            200 => {
                let issued: Issued = serde_json::from_slice(&body)
                    .map_err(|e| format!("its token answer could not be read: {e}"))?;
                Ok(TokenAnswer::Issued {
                    access_token: issued.access_token,
                    expires_in: issued.expires_in,
                })
            }
            400 | 401 => {
                let refusal: Refusal = serde_json::from_slice(&body).unwrap_or_default();
                if refusal.error.is_empty() {
                    // Not the server's OAuth error (a gateway's page?): no one's refusal.
                    return Err(format!("answered HTTP {status} without an OAuth error"));
                }
                let mut error = refusal.error;
                if !refusal.error_description.is_empty() {
                    error = format!("{error} ({})", refusal.error_description);
                }
                Ok(TokenAnswer::Refused {
                    status,
                    error: crate::error::head(&error, 256).to_owned(),
                })
            }
            other => Err(format!("answered HTTP {other}")),
        }
    }

    async fn metadata(&self, url: &str, issuer: &str) -> Result<Metadata, String> {
        let body = self.get(url).await?;
        let metadata: Metadata =
            serde_json::from_slice(&body).map_err(|e| format!("not a metadata document: {e}"))?;
        // Identical (RFC 8414 §3.3): tokens' iss is compared exactly too.
        let named = metadata.issuer.clone().unwrap_or_default();
        if named != issuer {
            return Err(format!(
                "it names the issuer {named:?}, not {issuer:?} (auth.issuer must be written exactly as the server names itself)"
            ));
        }
        Ok(metadata)
    }

    /// The signing keys of the JWKS at `url`.
    pub async fn jwks(&self, url: &str) -> Result<JwksKeys, String> {
        let body = self.get(url).await?;
        let text = std::str::from_utf8(&body).map_err(|_| "the JWKS is not UTF-8".to_owned())?;
        jwt::read_jwks(text).map_err(|why| format!("the JWKS at {url} {why}"))
    }

    /// The body of a `200` answer to `GET url`, at most [`MAX_BODY`].
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("unreachable ({})", without_url(&e)))?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!("answered HTTP {}", response.status().as_u16()));
        }
        read_capped(response).await
    }
}

/// An HTTP client for the authorization server, bounded in time, following redirects
/// as `redirect` says.
fn client(redirect: reqwest::redirect::Policy) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .redirect(redirect)
        .user_agent(concat!("mcp-session-proxy/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("the HTTP client for the authorization server: {e}"))
}

/// A response's body, at most [`MAX_BODY`].
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the answer broke off ({})", without_url(&e)))?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("the answer is larger than {} KiB", MAX_BODY / 1024));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A client id or secret as `client_secret_basic` sends it: form-encoded first (RFC
/// 6749 §2.3.1).
fn form_encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A reqwest error in words, without the URL it repeats.
fn without_url(error: &reqwest::Error) -> String {
    let mut error = error.to_string();
    if let Some(at) = error.find(" for url (") {
        error.truncate(at);
    }
    error
}

/// Where `issuer`'s metadata may be, in the order the MCP authorization specification
/// (2025-11-25) tries them: RFC 8414 §3.1 puts the well-known path between the host and
/// the issuer's path; for an issuer with a path, OpenID Connect's is tried inserted the
/// same way, then appended (OpenID Connect Discovery 1.0).
fn metadata_urls(issuer: &str) -> Result<Vec<String>, String> {
    let url = url::Url::parse(issuer).map_err(|_| format!("{issuer:?} is not a URL"))?;
    let path = url.path().trim_end_matches('/');
    let origin = url.origin().ascii_serialization();
    let mut urls = vec![format!(
        "{origin}/.well-known/oauth-authorization-server{path}"
    )];
    if !path.is_empty() {
        urls.push(format!("{origin}/.well-known/openid-configuration{path}"));
    }
    urls.push(format!("{origin}{path}/.well-known/openid-configuration"));
    Ok(urls)
}

/// Whether `url` may be fetched: `https`, or plain `http` only when the issuer's own
/// URL is (a loopback or in-cluster authorization server).
fn check_url(url: &str, https_only: bool) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|_| format!("{url:?} is not a URL"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if !https_only => Ok(()),
        _ => Err(format!(
            "{url:?} is not an https URL (the issuer's keys must come as securely as its metadata)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_of_an_issuer_with_a_path_is_looked_for_both_ways() {
        assert_eq!(
            metadata_urls("https://auth.example.com/tenant/").unwrap(),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant",
                "https://auth.example.com/.well-known/openid-configuration/tenant",
                "https://auth.example.com/tenant/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("http://127.0.0.1:8080").unwrap(),
            [
                "http://127.0.0.1:8080/.well-known/oauth-authorization-server",
                "http://127.0.0.1:8080/.well-known/openid-configuration",
            ]
        );
        assert!(metadata_urls("not a url").is_err());
    }

    #[test]
    fn keys_of_an_https_issuer_never_come_over_plain_http() {
        assert!(check_url("https://auth.example.com/jwks", true).is_ok());
        assert!(check_url("http://auth.example.com/jwks", true).is_err());
        assert!(check_url("http://127.0.0.1:9/jwks", false).is_ok());
        assert!(check_url("file:///etc/passwd", false).is_err());
    }
}
