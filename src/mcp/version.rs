//! Protocol versions.

/// The version the proxy offers upstream in `initialize`.
pub const LATEST_STATEFUL: &str = "2025-11-25";

/// Versions that use the `initialize` handshake, oldest first (MCP 2024-11-05 to 2025-11-25).
pub const STATEFUL: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Returns the static spelling of a known stateful version.
pub fn known_stateful(version: &str) -> Option<&'static str> {
    STATEFUL.iter().copied().find(|v| *v == version)
}
