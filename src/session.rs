//! Data-layer sessions: records, where they are kept, and the signed `state` token.
//!
//! This module knows what a session is and how long it lives; it knows nothing of HTTP or
//! of how the upstream connection behind a session is reached (`paths` joins the two).
//! Records live in one of three stores (`session.store`): this process's memory, a
//! Redis server shared by proxy replicas, or nowhere — sealed into the sessionId.

pub mod aead;
mod id;
mod manager;
mod memory;
mod record;
mod redis;
mod sealed;
mod state;
mod store;
mod tombstones;

pub use id::{generate as generate_id, is_issued_shape, is_visible_ascii, log_tag};
pub use manager::{
    Issued, Lease, NewSession, ReaperHandle, SessionError, Sessions, Settings, Slot, spawn_reaper,
};
pub use memory::MemoryStore;
pub use record::{Backing, ClientIdentity, Millis, SessionRecord, now_millis, rfc3339, rfc3339_in};
pub use redis::{Counted as CacheCounted, RedisStore};
pub use sealed::SealedStore;
pub use state::{StateSigner, Token, keyed_hmac};
pub use store::{Renewal, Reroute, SessionStore, Store, StoreError};
pub use tombstones::{IdHash, Tombstone, Tombstones};
