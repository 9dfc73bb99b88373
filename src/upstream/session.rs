//! One upstream session as one owned value: the upstream that holds it, where (the
//! replica, the session's id there) and what was negotiated when it opened.
//!
//! Whoever holds an [`UpstreamSession`] owns the session: dropping it ends the session
//! upstream, in the background and bounded (the process's [`Endings`]: it never waits, and
//! a full queue leaves the session to the upstream's own expiry, counted). So every holder
//! — a pooled or isolated stateless call, a pin, a subscription, a session being created —
//! cleans up on every way out, including a client that walks away at an await point. An
//! owner that keeps the session beyond the value's life (a data-layer session record,
//! which ends it on delete, expiry or loss) takes its parts with [`UpstreamSession::keep`];
//! an owner that can wait ends it with [`UpstreamSession::end`].
//!
//! This type knows nothing of why a session is held: the pool, pins, subscriptions and
//! the session path hold it.

use std::sync::Arc;

use super::handshake::Opened;
use super::{Ending, ReplicaId, SessionAddr, Upstream};
use crate::mcp::initialize::Negotiated;

/// See the module documentation.
#[derive(Debug)]
pub struct UpstreamSession {
    upstream: Upstream,
    replica: ReplicaId,
    /// The upstream's id for it (`Mcp-Session-Id`, a stdio child's key); `None` when the
    /// upstream issued none.
    id: Option<Arc<str>>,
    negotiated: Arc<Negotiated>,
    /// Ended on drop: until kept or ended.
    armed: bool,
}

/// An upstream session's parts, once its owner keeps it beyond the value's life (a
/// session record): nothing ends it on drop any more.
#[derive(Debug, Clone)]
pub struct Kept {
    pub replica: ReplicaId,
    pub id: Option<Arc<str>>,
    pub negotiated: Arc<Negotiated>,
}

impl UpstreamSession {
    /// A session `upstream` just opened, owned from now on.
    pub(super) fn new(upstream: Upstream, opened: Opened) -> UpstreamSession {
        UpstreamSession {
            upstream,
            replica: opened.replica,
            id: opened.session_id.map(Arc::from),
            negotiated: Arc::new(opened.negotiated),
            armed: true,
        }
    }

    /// A session of a modern (2026-07-28) upstream on `replica`: nothing is held upstream
    /// (every request carries what a session would), so there is nothing to end.
    pub(super) fn stateless(
        upstream: Upstream,
        replica: ReplicaId,
        negotiated: Arc<Negotiated>,
    ) -> UpstreamSession {
        UpstreamSession {
            upstream,
            replica,
            id: None,
            negotiated,
            armed: true,
        }
    }

    /// Where requests in this session go.
    pub fn addr(&self) -> SessionAddr<'_> {
        SessionAddr {
            replica: self.replica,
            session_id: self.id.as_deref(),
            protocol_version: self.negotiated.protocol_version,
        }
    }

    pub fn negotiated(&self) -> &Arc<Negotiated> {
        &self.negotiated
    }

    pub fn replica(&self) -> ReplicaId {
        self.replica
    }

    /// The upstream's id for the session, if it issued one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Whether the session lives in this process (a stdio child, an HTTP+SSE session's
    /// stream): whoever records it names this proxy replica as its owner.
    pub fn is_process_local(&self) -> bool {
        self.upstream.holds_in_process(self.addr())
    }

    /// Kept by an owner that ends it itself later: nothing is ended when this value goes.
    pub fn keep(mut self) -> Kept {
        self.armed = false;
        Kept {
            replica: self.replica,
            id: self.id.take(),
            negotiated: self.negotiated.clone(),
        }
    }

    /// Ends the session upstream and waits until it is done (or given up at shutdown):
    /// for an owner whose place under a bound is held until the session is gone, or that
    /// waits for room in the queue rather than giving an ending up (closing a pool).
    /// Abandoned half-way, the session still ends (in the background).
    pub async fn end(mut self) {
        self.end_in_place().await;
    }

    /// [`UpstreamSession::end`] for an owner that keeps the value: afterwards it holds
    /// nothing (dropping it ends nothing).
    pub async fn end_in_place(&mut self) {
        if !self.armed {
            return;
        }
        let ending = self.ending();
        self.upstream.endings().end_and_wait(ending).await;
        // Disarmed only now: a drop while waiting still ends it (at worst twice, and the
        // upstream answers the second as an unknown session).
        self.armed = false;
    }

    /// Moves the session out, leaving in its place a value that holds nothing (the same
    /// address and negotiation, no id, nothing ended on drop): for an owner that hands
    /// the session on from its own `Drop`.
    pub(super) fn take(&mut self) -> UpstreamSession {
        let taken = UpstreamSession {
            upstream: self.upstream.clone(),
            replica: self.replica,
            id: self.id.take(),
            negotiated: self.negotiated.clone(),
            armed: self.armed,
        };
        self.armed = false;
        taken
    }

    fn ending(&self) -> Ending {
        Ending::new(
            &self.upstream,
            self.replica,
            self.id.as_deref(),
            self.negotiated.protocol_version,
        )
    }
}

impl Drop for UpstreamSession {
    fn drop(&mut self) {
        if self.armed {
            self.upstream.endings().end_soon(self.ending());
        }
    }
}
