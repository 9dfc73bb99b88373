//! What a client speaks: one value, decided once by classification (`route`) from the
//! message alone, carried on the route to the path that serves it, and kept in the record
//! of a session the client opens (where the stores keep it: `session::redis`,
//! `session::sealed`).
//!
//! The upstream's era is another matter (`upstream::Era`, found by probing): a client of
//! any era may stand before an upstream of any other, and the proxy bridges them.
//!
//! It does not know how the era is read off a message (`route`) or what a path does with
//! it; only the eras and their names.

/// The era (and session dialect) a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientEra {
    /// 2025-11-25 and earlier with no data-layer session: `initialize`, then the
    /// transport's `Mcp-Session-Id` (2025-11-25 transport, "Session Management"). When the
    /// proxy is its transport (a stdio, HTTP+SSE or modern upstream), its answers are a
    /// legacy server's: no session `_meta`.
    Legacy,
    /// The data-layer sessions draft: `sessions/create`, the session in
    /// `_meta["io.modelcontextprotocol/session"]`, no per-request protocol version.
    DataLayer,
    /// SEP-1364: a top-level `sessionId` (`null` before a session exists),
    /// `params.capabilities` on `sessions/create`, `initialize` carrying a `sessionId`,
    /// `terminate`. Its answers echo the session at the top.
    Sep1364,
    /// 2026-07-28: every request carries its protocol version in `_meta`; a session it
    /// opens (`sessions/create` after `server/discover` said `sessions: {}`) is in the
    /// data-layer draft's shape, and its results say `resultType: "complete"`.
    Modern,
}

impl ClientEra {
    /// The word a store keeps (and a log shows).
    pub fn name(self) -> &'static str {
        match self {
            ClientEra::Legacy => "legacy",
            ClientEra::DataLayer => "data_layer",
            ClientEra::Sep1364 => "sep1364",
            ClientEra::Modern => "modern",
        }
    }

    /// The era a store's word names; `None` for a word this build does not know.
    pub fn parse(word: &str) -> Option<ClientEra> {
        [
            ClientEra::Legacy,
            ClientEra::DataLayer,
            ClientEra::Sep1364,
            ClientEra::Modern,
        ]
        .into_iter()
        .find(|era| era.name() == word)
    }

    /// The era of a record that kept only whether its client was legacy (one written
    /// before the era was kept whole): any other session was opened in the data-layer
    /// draft's shape, the only one that record told apart.
    pub fn from_legacy_flag(legacy: bool) -> ClientEra {
        match legacy {
            true => ClientEra::Legacy,
            false => ClientEra::DataLayer,
        }
    }

    /// An old client's, answered as a legacy server would answer it.
    pub fn is_legacy(self) -> bool {
        self == ClientEra::Legacy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_era_reads_back_from_its_name() {
        for era in [
            ClientEra::Legacy,
            ClientEra::DataLayer,
            ClientEra::Sep1364,
            ClientEra::Modern,
        ] {
            assert_eq!(ClientEra::parse(era.name()), Some(era));
        }
        assert_eq!(ClientEra::parse("2027"), None);
        assert_eq!(ClientEra::from_legacy_flag(true), ClientEra::Legacy);
        assert_eq!(ClientEra::from_legacy_flag(false), ClientEra::DataLayer);
    }
}
