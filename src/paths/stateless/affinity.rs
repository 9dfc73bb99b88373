//! Which upstream session a stateless call runs in (`stateless.affinity`).
//!
//! A legacy server may keep state per session (a browser, a database transaction, a
//! shell); a stateless client (2026-07-28) has no session to keep it in. The affinity
//! decides what a call shares with other calls:
//!
//! - `shared`: a pooled session, reused by the next call of any caller with the same
//!   credentials and capabilities — for servers that keep nothing per session;
//! - `isolated`: a session of its own, opened for the call and ended after its last
//!   round (a multi-round-trip call keeps it until then);
//! - `handles`: sessions the client opens and names explicitly (SEP-2567's explicit
//!   handles: the `session_open` and `session_close` tools and a `session` argument);
//!   calls without a handle run as the fallback says;
//! - `pinned`: one session per pin key — a configured request header such as a
//!   conversation id, or else the caller's credentials; calls without a key run as the
//!   fallback says.
//!
//! Whatever the affinity, callers with different credentials never share an upstream
//! session: every key below includes them.

use std::sync::Arc;

use http::HeaderMap;
use http::header::HeaderName;
use sha2::{Digest, Sha256};

use super::super::session::addr;
use crate::mcp::caller::Caller;
use crate::mcp::initialize::Negotiated;
use crate::rewrite::handles::HandleTools;
use crate::session::Lease;
use crate::upstream::{Checkout, PinSettings, Pinned, SessionAddr};

/// How stateless calls map onto upstream sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Affinity {
    /// A pool of sessions shared by the calls of one caller (same credentials and
    /// capabilities), one call at a time each.
    Shared,
    /// A session per call, ended after the call's last round.
    Isolated,
    /// Explicit session handles, opened and closed by tools.
    Handles {
        tools: HandleTools,
        /// Where a call without a handle runs.
        fallback: Fallback,
        /// Handles one caller with credentials may hold at once.
        max_per_caller: usize,
    },
    /// A session per pin key.
    Pinned {
        /// The request header naming the conversation; `None`: the caller's credentials
        /// are the key.
        header: Option<HeaderName>,
        /// Where a call without a pin key runs.
        fallback: Fallback,
        limits: PinSettings,
    },
}

/// Where a call runs that names no session (no handle, no pin key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    Shared,
    Isolated,
}

impl Affinity {
    /// The configuration word of this affinity.
    pub fn name(&self) -> &'static str {
        match self {
            Affinity::Shared => "shared",
            Affinity::Isolated => "isolated",
            Affinity::Handles { .. } => "handles",
            Affinity::Pinned { .. } => "pinned",
        }
    }

    /// Where a new call runs, before any handle it names is looked at.
    pub fn target(&self, headers: &HeaderMap, caller: Caller) -> CallTarget {
        match self {
            Affinity::Shared => CallTarget::Pooled,
            Affinity::Isolated => CallTarget::Isolated,
            Affinity::Handles { fallback, .. } => fallback.target(),
            Affinity::Pinned {
                header, fallback, ..
            } => pin_key(header.as_ref(), headers, caller)
                .map_or_else(|| fallback.target(), CallTarget::Pin),
        }
    }
}

impl Fallback {
    fn target(self) -> CallTarget {
        match self {
            Fallback::Shared => CallTarget::Pooled,
            Fallback::Isolated => CallTarget::Isolated,
        }
    }
}

/// The pin key of a call: its caller and, when a header is configured, that header's
/// value (hashed, so keys stay short whatever the client sends). `None` when the call
/// has no key: the header is configured but absent or empty, or no header is configured
/// and the call carries no credentials (an anonymous caller is nobody in particular, and
/// pinning all of them together would share one session among strangers).
pub fn pin_key(header: Option<&HeaderName>, headers: &HeaderMap, caller: Caller) -> Option<String> {
    match header {
        Some(name) => {
            let value = headers.get(name).filter(|v| !v.is_empty())?;
            let digest = Sha256::digest(value.as_bytes());
            let mut key = caller.hex();
            key.push(':');
            for byte in &digest[..16] {
                key.push_str(&format!("{byte:02x}"));
            }
            Some(key)
        }
        None if caller.is_anonymous() => None,
        None => Some(caller.hex()),
    }
}

/// Where a new call runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallTarget {
    /// A session of the shared pool.
    Pooled,
    /// A session of its own.
    Isolated,
    /// The session pinned to this key.
    Pin(String),
    /// The session behind this handle.
    Handle(String),
    /// The data-layer session a 2026-07-28 client named (with the `state` it sent back),
    /// whose call the proxy may run as a task. `repeat`: the call may be sent again on a
    /// new upstream session if the upstream lost the session's (as on the session path).
    Session {
        id: String,
        state: Option<String>,
        repeat: bool,
    },
}

/// The upstream session a call holds from its first round to its last.
#[derive(Debug)]
pub enum CallSession {
    /// Of the pool (given back when the call ends), or opened for this call alone (ended
    /// when it ends).
    Pooled(Checkout),
    /// A pinned session (kept when the call ends).
    Pinned(Pinned),
    /// A handle's or a data-layer session's (kept when the call ends; it lives as long
    /// as the session).
    Handle(Lease),
}

impl CallSession {
    pub fn addr(&self) -> SessionAddr<'_> {
        match self {
            CallSession::Pooled(checkout) => checkout.addr(),
            CallSession::Pinned(pinned) => pinned.addr(),
            CallSession::Handle(lease) => addr(&lease.record.backing),
        }
    }

    pub fn negotiated(&self) -> &Arc<Negotiated> {
        match self {
            CallSession::Pooled(checkout) => checkout.negotiated(),
            CallSession::Pinned(pinned) => pinned.negotiated(),
            CallSession::Handle(lease) => &lease.record.backing.negotiated,
        }
    }

    /// The call failed in a way that leaves the session's state unknown (its stream
    /// broke, its client left). A pooled or isolated session is ended rather than handed
    /// to another call; a pinned or handle session belongs to its conversation, which
    /// keeps it (what the failed call did there is the conversation's own state).
    pub fn discard(&mut self) {
        if let CallSession::Pooled(checkout) = self {
            checkout.discard();
        }
    }

    /// A request of the call is under way (`true`) until its answer has begun (`false`):
    /// a pooled session let go of in between (the client left) is ended, not reused.
    pub fn exchanging(&mut self, under_way: bool) {
        if let CallSession::Pooled(checkout) = self {
            checkout.exchanging(under_way);
        }
    }

    /// The call is over: a pooled session goes back, one of its own (or a discarded one)
    /// is ended upstream and waited for, a pinned or handle session stays.
    pub async fn release(self) {
        if let CallSession::Pooled(checkout) = self {
            checkout.release().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::header::AUTHORIZATION;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut out = HeaderMap::new();
        for (name, value) in pairs {
            out.insert(HeaderName::from_static(name), value.parse().unwrap());
        }
        out
    }

    fn pinned(header: Option<&'static str>) -> Affinity {
        Affinity::Pinned {
            header: header.map(HeaderName::from_static),
            fallback: Fallback::Isolated,
            limits: PinSettings {
                max_pinned: 10,
                idle_ttl: Duration::from_secs(60),
            },
        }
    }

    fn target(affinity: &Affinity, h: &HeaderMap) -> CallTarget {
        affinity.target(h, Caller::of(h))
    }

    #[test]
    fn a_conversation_header_pins_and_credentials_always_count() {
        let affinity = pinned(Some("x-conversation-id"));
        let a = headers(&[("x-conversation-id", "a")]);
        let b = headers(&[("x-conversation-id", "b")]);
        let a_alice = headers(&[
            ("x-conversation-id", "a"),
            ("authorization", "Bearer alice"),
        ]);
        let a_bob = headers(&[("x-conversation-id", "a"), ("authorization", "Bearer bob")]);
        let keys: Vec<CallTarget> = [&a, &b, &a_alice, &a_bob]
            .iter()
            .map(|h| target(&affinity, h))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            assert!(matches!(key, CallTarget::Pin(_)), "{key:?}");
            for other in &keys[i + 1..] {
                assert_ne!(key, other);
            }
        }
        assert_eq!(
            target(&affinity, &a),
            keys[0],
            "the same conversation, the same pin"
        );
        if let CallTarget::Pin(key) = &keys[2] {
            assert!(!key.contains("alice") && key.len() < 80);
        }
    }

    #[test]
    fn a_call_without_a_key_takes_the_fallback() {
        let by_header = pinned(Some("x-conversation-id"));
        let alice = headers(&[("authorization", "Bearer alice")]);
        assert_eq!(
            target(&by_header, &alice),
            CallTarget::Isolated,
            "header configured, absent"
        );
        assert_eq!(
            target(&by_header, &headers(&[("x-conversation-id", "")])),
            CallTarget::Isolated,
            "an empty value names nothing"
        );
        let by_caller = pinned(None);
        assert_eq!(target(&by_caller, &HeaderMap::new()), CallTarget::Isolated);
        let CallTarget::Pin(key) = target(&by_caller, &alice) else {
            panic!("credentials pin")
        };
        assert_eq!(key, Caller::of(&alice).hex());
        let mut shared = by_caller.clone();
        if let Affinity::Pinned { fallback, .. } = &mut shared {
            *fallback = Fallback::Shared;
        }
        assert_eq!(target(&shared, &HeaderMap::new()), CallTarget::Pooled);
    }

    #[test]
    fn shared_isolated_and_handles_targets() {
        let h = headers(&[]);
        assert_eq!(target(&Affinity::Shared, &h), CallTarget::Pooled);
        assert_eq!(target(&Affinity::Isolated, &h), CallTarget::Isolated);
        let handles = Affinity::Handles {
            tools: HandleTools::default(),
            fallback: Fallback::Shared,
            max_per_caller: 4,
        };
        assert_eq!(target(&handles, &h), CallTarget::Pooled);
        assert_eq!(handles.name(), "handles");
        let mut auth = HeaderMap::new();
        auth.insert(AUTHORIZATION, "Bearer a".parse().unwrap());
        assert_eq!(target(&Affinity::Isolated, &auth), CallTarget::Isolated);
    }
}
