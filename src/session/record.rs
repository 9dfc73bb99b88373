//! What the proxy remembers about one data-layer session.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::mcp::ClientEra;
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;

/// Milliseconds since the Unix epoch (wall clock: `expiresAt` is shown to clients).
pub type Millis = u64;

pub fn now_millis() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// RFC 3339 UTC with second precision, e.g. `2026-03-01T00:00:00Z`.
pub fn rfc3339(at: Millis) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(at);
    humantime::format_rfc3339_seconds(time).to_string()
}

thread_local! {
    /// The last second [`rfc3339_in`] wrote on this thread, its text and the text's
    /// length (0: none yet).
    static LAST: std::cell::Cell<(u64, [u8; 32], usize)> =
        const { std::cell::Cell::new((0, [0; 32], 0)) };
}

/// [`rfc3339`] written into `buffer` (it takes 20 bytes), without an allocation; one
/// that does not fit is spelled by [`rfc3339`].
///
/// The text of a second is kept by the thread that wrote it last: a session call writes
/// the expiry it renewed to, and the calls of one second on one worker write the same.
pub fn rfc3339_in(buffer: &mut [u8; 32], at: Millis) -> Cow<'_, str> {
    use std::io::Write;
    let second = at / 1000;
    let written = match LAST.get() {
        (last, text, n) if last == second && n > 0 => {
            *buffer = text;
            Some(n)
        }
        _ => {
            let time = UNIX_EPOCH + Duration::from_millis(at);
            let mut cursor = std::io::Cursor::new(&mut buffer[..]);
            let n = match write!(cursor, "{}", humantime::format_rfc3339_seconds(time)) {
                Ok(()) => usize::try_from(cursor.position()).ok(),
                Err(_) => None,
            };
            if let Some(n) = n {
                LAST.set((second, *buffer, n));
            }
            n
        }
    };
    match written.and_then(|n| std::str::from_utf8(buffer.get(..n)?).ok()) {
        Some(text) => Cow::Borrowed(text),
        None => Cow::Owned(rfc3339(at)),
    }
}

/// One data-layer session and the upstream connection behind it.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    /// The name of the upstream serving it.
    pub upstream: Arc<str>,
    /// Its upstream session: which replica, which session there.
    pub backing: Backing,
    pub created_at: Millis,
    /// Idle expiry, renewed by every use.
    pub expires_at: Millis,
    /// Bumped by every use and sealed into `state`, so states are ordered.
    pub seq: u64,
    /// What the client that opened it speaks. [`ClientEra::Legacy`]: opened by an old
    /// client's `initialize` (the proxy is its transport, as for a stdio upstream), not by
    /// `sessions/create`: its answers carry no session `_meta`, whatever its messages
    /// look like.
    pub client_era: ClientEra,
    /// The client's `initialize` identity, kept when the upstream's policy is to
    /// replay it on a lost session.
    pub client: Option<Arc<ClientIdentity>>,
    /// Whose session it is: the caller that opened it (its credentials hashed, or with
    /// `[auth]` its token's subject). Only that caller may use or end it; anyone else is
    /// told the session does not exist. Every session the proxy opens is bound; `None`
    /// is a record written before sessions were (served to whoever names it, until it
    /// expires). Every store keeps it (Redis and sealed ids too), so the binding holds at
    /// every proxy replica.
    pub caller: Option<Caller>,
}

impl SessionRecord {
    /// Whether `caller` may use this session.
    pub fn serves(&self, caller: Caller) -> bool {
        self.caller.is_none_or(|bound| bound == caller)
    }
}

/// The upstream session backing a data-layer session: where it is and what it
/// negotiated. Replaced as a whole when a lost one is reinitialized.
#[derive(Debug, Clone)]
pub struct Backing {
    /// The replica holding it (a hash of its URL; 0 for a stdio upstream).
    pub replica: u64,
    /// The upstream's `Mcp-Session-Id`; `None` when the upstream issued none.
    pub upstream_session: Option<Arc<str>>,
    /// What the upstream answered to `initialize` (shared by sessions that got the same).
    pub negotiated: Arc<Negotiated>,
    /// The proxy replica holding what lives in one process only (a stdio child):
    /// `<advertised URL>#<incarnation>`; `None` when any replica can serve it.
    pub owner: Option<Arc<str>>,
}

/// `clientInfo` and `capabilities` as the client gave them (raw JSON objects).
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    pub client_info: Option<Box<serde_json::value::RawValue>>,
    pub capabilities: Option<Box<serde_json::value::RawValue>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_is_written_the_same_in_place_as_in_a_string() {
        let mut buffer = [0; 32];
        // The same second again (kept), another, back, and a buffer that held another
        // text: each as written afresh.
        for at in [
            0,
            1_772_323_200_000,
            1_772_323_200_999,
            1_772_323_201_000,
            1_772_323_200_500,
            253_402_300_799_000,
            999,
        ] {
            buffer[..4].copy_from_slice(b"junk");
            assert_eq!(rfc3339_in(&mut buffer, at), rfc3339(at));
            assert_eq!(LAST.get().0, at / 1000, "the second kept");
        }
        assert_eq!(rfc3339_in(&mut buffer, 0), "1970-01-01T00:00:00Z");
    }
}
