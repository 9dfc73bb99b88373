//! The two rewrites of the data-layer session path, as pure functions of bytes: to the
//! upstream, the session `_meta` comes off; to the client, the response gets it back,
//! with a fresh `state` and `expiresAt`. Nothing here knows HTTP.

pub mod to_client;
pub mod to_upstream;
