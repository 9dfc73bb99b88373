//! Which era of MCP an upstream speaks, found rather than configured.
//!
//! A fleet in migration holds servers of every era at once: legacy (2025-11-25:
//! `initialize`, `Mcp-Session-Id`), modern (2026-07-28: per-request `_meta`, no session —
//! the SDK 2.x servers that also take old traffic, and the modern-only ones), and the
//! 2024-11-05 HTTP+SSE transport. The proxy finds out what each replica (each stdio
//! command) speaks the way the specification's backward-compatibility sections tell
//! clients to (`super::discover`), keeps the answer here, and finds out again after a
//! probe or an answer says the server changed. An operator may pin it (`upstream.era`);
//! a pinned era is never probed for.
//!
//! Reading the era costs one atomic load: classification asks for it on every request.

use std::sync::atomic::{AtomicU8, Ordering};

/// What an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2025-11-25 and earlier over Streamable HTTP or stdio: `initialize`, then a session.
    Legacy,
    /// 2026-07-28: every request carries its version, identity and capabilities.
    Modern,
    /// 2024-11-05's HTTP+SSE transport: a `GET` stream per session, messages POSTed to the
    /// endpoint it names; `initialize` as legacy.
    Sse,
}

impl Era {
    /// The configuration word (and metric label) of the era.
    pub fn name(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
            Era::Sse => "sse",
        }
    }

    /// Parses a configuration word.
    pub fn parse(word: &str) -> Option<Era> {
        match word {
            "legacy" => Some(Era::Legacy),
            "modern" => Some(Era::Modern),
            "sse" => Some(Era::Sse),
            _ => None,
        }
    }

    /// Which era new work goes to when replicas differ (a migration under way): the newest
    /// one some healthy replica speaks.
    pub fn preference(self) -> u8 {
        match self {
            Era::Modern => 3,
            Era::Legacy => 2,
            Era::Sse => 1,
        }
    }

    fn code(self) -> u8 {
        match self {
            Era::Legacy => 1,
            Era::Modern => 2,
            Era::Sse => 3,
        }
    }

    fn from_code(code: u8) -> Option<Era> {
        match code {
            1 => Some(Era::Legacy),
            2 => Some(Era::Modern),
            3 => Some(Era::Sse),
            _ => None,
        }
    }
}

/// The era of one replica (or stdio command): unknown until found, or pinned.
#[derive(Debug)]
pub struct EraCell {
    found: AtomicU8,
    pinned: bool,
}

/// What became of the era when it was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Found for the first time.
    Found,
    /// The same as before.
    Same,
    /// Another era than before: the server was replaced.
    Changed { from: Era },
}

impl EraCell {
    /// An era to be found; `pinned`: the operator's, never probed for.
    pub fn new(pinned: Option<Era>) -> EraCell {
        EraCell {
            found: AtomicU8::new(pinned.map_or(0, Era::code)),
            pinned: pinned.is_some(),
        }
    }

    /// The era, if known.
    pub fn get(&self) -> Option<Era> {
        Era::from_code(self.found.load(Ordering::Acquire))
    }

    /// Whether the operator pinned it.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Records what a probe found (a pinned era stays).
    pub fn set(&self, era: Era) -> Change {
        if self.pinned {
            return Change::Same;
        }
        match Era::from_code(self.found.swap(era.code(), Ordering::AcqRel)) {
            None => Change::Found,
            Some(was) if was == era => Change::Same,
            Some(from) => Change::Changed { from },
        }
    }

    /// Forgets the era (an answer said the server is not what it was): the next use finds
    /// it again. A pinned era stays.
    pub fn forget(&self) {
        if !self.pinned {
            self.found.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_era_is_found_changed_forgotten_or_pinned() {
        let cell = EraCell::new(None);
        assert_eq!(cell.get(), None);
        assert_eq!(cell.set(Era::Legacy), Change::Found);
        assert_eq!(cell.set(Era::Legacy), Change::Same);
        assert_eq!(cell.set(Era::Modern), Change::Changed { from: Era::Legacy });
        cell.forget();
        assert_eq!(cell.get(), None);

        let pinned = EraCell::new(Some(Era::Sse));
        assert!(pinned.is_pinned());
        assert_eq!(pinned.set(Era::Modern), Change::Same);
        pinned.forget();
        assert_eq!(pinned.get(), Some(Era::Sse));
        for era in [Era::Legacy, Era::Modern, Era::Sse] {
            assert_eq!(Era::parse(era.name()), Some(era));
        }
        assert!(Era::Modern.preference() > Era::Legacy.preference());
        assert!(Era::Legacy.preference() > Era::Sse.preference());
    }
}
