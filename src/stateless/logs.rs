//! Log notifications for a stateless client: only at or above the level its request
//! asked for (`_meta["io.modelcontextprotocol/logLevel"]`), none when it asked for none
//! (2026-07-28 "Logging").

use crate::jsonrpc::{Envelope, RawObject, raw_str};
pub use crate::mcp::logging::LogLevel;

/// Whether a `notifications/message` may reach a client that asked for `wanted` (none
/// at all when it asked for none).
pub fn log_passes(notification: &Envelope<'_>, wanted: Option<LogLevel>) -> bool {
    let Some(wanted) = wanted else {
        return false;
    };
    let level = notification
        .params
        .and_then(RawObject::parse)
        .and_then(|p| p.get("level"))
        .and_then(raw_str)
        .and_then(|l| LogLevel::parse(&l));
    level.is_some_and(|level| level >= wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_pass_only_at_or_above_the_requested_level() {
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"warning","data":"x"}}"#;
        let env = Envelope::parse(note).unwrap();
        assert!(!log_passes(&env, None));
        assert!(log_passes(&env, Some(LogLevel::Info)));
        assert!(log_passes(&env, Some(LogLevel::Warning)));
        assert!(!log_passes(&env, Some(LogLevel::Error)));
    }
}
