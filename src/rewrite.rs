//! The rewrites, as pure functions of bytes. On the session path: to the upstream, the
//! session `_meta` comes off; to the client, the response gets it back, with a fresh
//! `state` and `expiresAt`. On the stateless path: the 2026-07-28 `_meta` comes off, and
//! results, errors and the upstream's own requests take 2026-07-28's shapes, and (with
//! session handles) `tools/list` and `tools/call` gain and lose the handle tools and
//! argument. To a modern upstream, a session's requests gain the per-request `_meta`
//! the session keeps (`to_modern`); from it, an old client gets 2025-11-25's shapes
//! (`to_legacy`). Nothing here knows HTTP.

pub mod handles;
pub mod stateless;
pub mod tasks;
pub mod to_client;
pub mod to_legacy;
pub mod to_modern;
pub mod to_upstream;
pub mod trace_context;
pub mod visible;
