//! The paths a classified message takes (see `route`), each a narrow handle holding what
//! it uses:
//!
//! - [`SessionPath`]: data-layer sessions (and SEP-1364's dialect, and old clients of a
//!   stdio server, whose transport the proxy is) — create, use, end; every message of a
//!   session goes to that session's own upstream session, and its answer is relayed
//!   back with the session stamped in;
//! - [`StatelessPath`]: 2026-07-28 clients, served on upstream sessions chosen by the
//!   [`Affinity`] (pooled, one per call, pinned, or behind a session handle);
//! - [`PassThrough`]: old clients of an HTTP upstream, untouched.
//!
//! Each path speaks to the upstream through `upstream::Upstream` and answers with a
//! `response`; the one relay ([`relay`]) turns any upstream answer into the client's.
//! What lives in one proxy process only is reached through [`Cluster`], which forwards
//! a message to the replica holding it.

mod answer;
mod bridge;
pub mod cluster;
mod framed;
pub mod headers;
mod passthrough;
mod relay;
mod session;
mod stateless;

pub use cluster::{Cluster, Forged};
pub use passthrough::PassThrough;
pub use session::{SessionPath, SessionSettings, addr, upstream_error};
pub use stateless::{Affinity, Fallback, POOLED_SESSION_MAX_AGE, StatelessPath};
