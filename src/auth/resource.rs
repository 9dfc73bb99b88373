//! This server as an OAuth 2.1 protected resource, as the MCP authorization
//! specification (2025-11-25) has it: each MCP endpoint is a resource whose identifier
//! (RFC 8707) is its public URL — what a client asks its token for, and what the token's
//! `aud` must name — and whose Protected Resource Metadata (RFC 9728) says which
//! authorization servers issue tokens for it and which scopes it knows. The metadata is
//! served at `/.well-known/oauth-protected-resource` followed by the endpoint's path (and,
//! for the default endpoint, without it), and named in every challenge.

use serde_json::json;

/// The well-known path the metadata is served under (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// See the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// Where clients reach this proxy (`https://mcp.example.com`: scheme, host, port);
    /// `None`: not said, so no metadata is served and no audience derived.
    pub public_url: Option<String>,
    /// The metadata URL challenges name, when configured outright (it wins).
    pub metadata_url: Option<String>,
    /// The authorization servers (issuers) that issue tokens for this resource.
    pub authorization_servers: Vec<String>,
    /// The scopes this resource knows, in its metadata.
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry (else 403 `insufficient_scope`).
    pub required_scopes: Vec<String>,
}

impl Resource {
    /// The resource identifier of the endpoint at `path` (`/mcp`).
    pub fn id(&self, path: &str) -> Option<String> {
        let base = self.public_url.as_deref()?;
        Some(format!("{base}{path}"))
    }

    /// The metadata URL a challenge at the endpoint `path` names.
    pub fn metadata_url(&self, path: &str) -> Option<String> {
        if let Some(url) = &self.metadata_url {
            return Some(url.clone());
        }
        let base = self.public_url.as_deref()?;
        Some(format!("{base}{WELL_KNOWN}{path}"))
    }

    /// The metadata document of the endpoint at `path` (RFC 9728 §2).
    pub fn metadata(&self, path: &str) -> Option<serde_json::Value> {
        let resource = self.id(path)?;
        let mut document = json!({
            "resource": resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if !self.scopes_supported.is_empty() {
            document["scopes_supported"] = json!(self.scopes_supported);
        }
        Some(document)
    }

    /// Which of `scopes` lacks one this resource requires, if any.
    pub fn missing_scopes(&self, scopes: &[String]) -> Vec<String> {
        self.required_scopes
            .iter()
            .filter(|required| !scopes.contains(required))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource() -> Resource {
        Resource {
            public_url: Some("https://mcp.example.com".into()),
            metadata_url: None,
            authorization_servers: vec!["https://auth.example.com/".into()],
            scopes_supported: vec!["tools:read".into(), "tools:admin".into()],
            required_scopes: vec!["tools:read".into()],
        }
    }

    #[test]
    fn each_endpoint_is_a_resource_with_its_metadata_under_the_well_known_path() {
        let resource = resource();
        assert_eq!(
            resource.id("/mcp/github").as_deref(),
            Some("https://mcp.example.com/mcp/github")
        );
        assert_eq!(
            resource.metadata_url("/mcp").as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource.metadata("/mcp").unwrap(),
            json!({"resource": "https://mcp.example.com/mcp",
                "authorization_servers": ["https://auth.example.com/"],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["tools:read", "tools:admin"]})
        );
        assert_eq!(
            resource.missing_scopes(&["tools:admin".into()]),
            ["tools:read"]
        );
        assert!(resource.missing_scopes(&["tools:read".into()]).is_empty());
    }

    #[test]
    fn without_a_public_url_there_is_no_metadata_but_a_configured_url_is_named() {
        let resource = Resource {
            metadata_url: Some("https://elsewhere.example.com/prm".into()),
            ..Resource::default()
        };
        assert_eq!(resource.id("/mcp"), None);
        assert_eq!(resource.metadata("/mcp"), None);
        assert_eq!(
            resource.metadata_url("/mcp").as_deref(),
            Some("https://elsewhere.example.com/prm")
        );
    }
}
