//! Protocol versions.

/// The version the proxy offers upstream in `initialize`.
pub const LATEST_STATEFUL: &str = "2025-11-25";

/// Versions that use the `initialize` handshake, oldest first (MCP 2024-11-05 to 2025-11-25).
pub const STATEFUL: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Versions of the stateless protocol (SEP-2575): no `initialize`, every request carries
/// its version, identity and capabilities in `_meta`.
pub const MODERN: [&str; 1] = ["2026-07-28"];

/// The stateless version the proxy speaks to a modern upstream.
pub const LATEST_MODERN: &str = "2026-07-28";

/// Returns the static spelling of a known stateful version.
pub fn known_stateful(version: &str) -> Option<&'static str> {
    STATEFUL.iter().copied().find(|v| *v == version)
}

/// Returns the static spelling of any version the proxy knows, stateful or modern.
pub fn known(version: &str) -> Option<&'static str> {
    known_stateful(version).or_else(|| MODERN.iter().copied().find(|v| *v == version))
}

/// Whether `version` is one of the stateless protocol's.
pub fn is_modern(version: &str) -> bool {
    MODERN.contains(&version)
}

/// Every version the proxy knows, stateful ones first (their positions never change:
/// sealed session ids name a version by its index here).
pub const ALL: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_the_stateful_versions_then_the_modern_ones() {
        let joined: Vec<&str> = STATEFUL.iter().chain(MODERN.iter()).copied().collect();
        assert_eq!(joined, ALL);
        assert_eq!(known("2026-07-28"), Some("2026-07-28"));
        assert_eq!(known_stateful("2026-07-28"), None);
        assert!(is_modern(LATEST_MODERN) && !is_modern(LATEST_STATEFUL));
    }
}
