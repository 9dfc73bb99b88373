//! A real OAuth 2.1 authorization server for the resource-server tests: `oidc-provider`
//! (`tests/interop/oauth/server.mjs`), issuing RFC 9068 JWT access tokens by the
//! client_credentials grant, signed with a key it publishes in its JWKS; and the official
//! TypeScript SDK 1.x client doing its whole OAuth flow (`clients/oauth_client.mjs`).

use std::time::Duration;

use tokio::process::Command;

use super::interop::{ServerProcess, repo_root, run_to_success, tools_dir};

/// The clients the authorization server knows: id, secret, the scopes it may have.
pub const READER: (&str, &str) = ("reader", "reader-secret");
pub const ADMIN: (&str, &str) = ("admin", "admin-secret");
/// The proxy's own client, which may exchange tokens (RFC 8693).
pub const EXCHANGER: (&str, &str) = ("proxy", "proxy-secret");

/// The authorization server, running.
pub struct AuthServer {
    pub process: ServerProcess,
}

impl AuthServer {
    /// Starts on a free port, signing with a new key named `kid`.
    pub async fn start(kid: &str) -> AuthServer {
        AuthServer::start_on(0, kid).await
    }

    /// Starts on `port` (0: a free one) with a new key named `kid`: on the port of one
    /// stopped, the same issuer with its key rotated.
    pub async fn start_on(port: u16, kid: &str) -> AuthServer {
        let mut command = Command::new("node");
        command
            .env("INTEROP_TOOLS", tools_dir())
            .arg(repo_root().join("tests/interop/oauth/server.mjs"))
            .args(["--port", &port.to_string(), "--key-id", kid])
            .args(["--client", "reader:reader-secret:tools:read"])
            .args(["--client", "admin:admin-secret:tools:read,tools:admin"])
            .args(["--exchanger", "proxy:proxy-secret"]);
        AuthServer {
            process: ServerProcess::spawn("authorization server", command).await,
        }
    }

    /// `http://127.0.0.1:<port>`: the issuer, as its tokens' `iss` says.
    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.process.port)
    }

    /// An access token for `client`, for `resource` (its `aud`), with `scope` (all the
    /// client's scopes when `None`).
    pub async fn token(
        &self,
        (id, secret): (&str, &str),
        resource: &str,
        scope: Option<&str>,
    ) -> String {
        let mut form = vec![("grant_type", "client_credentials"), ("resource", resource)];
        if let Some(scope) = scope {
            form.push(("scope", scope));
        }
        let body: String = form
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let response = super::http_builder()
            .build()
            .unwrap()
            .post(format!("{}/token", self.issuer()))
            .basic_auth(id, Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let answer: serde_json::Value = response.json().await.unwrap();
        assert_eq!(status, 200, "token request refused: {answer}");
        answer["access_token"].as_str().unwrap().to_owned()
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs the SDK 1.x client against `url` as `client`, trusting only `issuer`, calling
/// `call` (a tool and its arguments) after listing the tools; its one-line report.
pub async fn sdk_client(
    url: &str,
    (id, secret): (&str, &str),
    issuer: &str,
    call: Option<(&str, serde_json::Value)>,
) -> serde_json::Value {
    let mut command = Command::new("node");
    command
        .env("INTEROP_TOOLS", tools_dir())
        .arg(repo_root().join("tests/interop/clients/oauth_client.mjs"))
        .args(["--url", url, "--client-id", id, "--client-secret", secret])
        .args(["--issuer", issuer]);
    if let Some((tool, arguments)) = call {
        command.args(["--call", tool, "--args", &arguments.to_string()]);
    }
    let output = run_to_success(command, Duration::from_secs(60), "the SDK's OAuth client").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "the SDK client's report {line:?}: {e}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
