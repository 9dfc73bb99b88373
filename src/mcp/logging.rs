//! Log levels: MCP's `LoggingLevel` (2025-11-25 and 2026-07-28, "Logging"), RFC 5424's
//! severities, least severe first, so that `>=` reads "at least as severe as".

/// One log level, ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

// === impl LogLevel ===

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// Its name on the wire (`"warning"`).
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level named `name`; `None` for a name MCP does not define.
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|level| level.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::LogLevel;

    #[test]
    fn names_parse_back_and_order_by_severity() {
        for level in LogLevel::ALL {
            assert_eq!(LogLevel::parse(level.name()), Some(level));
        }
        assert!(LogLevel::ALL.is_sorted());
        assert_eq!(LogLevel::parse("Warning"), None);
        assert_eq!(LogLevel::parse("warn"), None);
    }
}
