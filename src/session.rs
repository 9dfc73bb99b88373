//! Data-layer sessions: records, where they are kept, and the signed `state` token.
//!
//! This module knows what a session is and how long it lives; it knows nothing of HTTP or
//! of how the upstream connection behind a session is reached (`front` joins the two).

mod id;
mod manager;
mod memory;
mod record;
mod state;
mod store;

pub use id::{generate as generate_id, is_issued_shape, is_visible_ascii, log_tag};
pub use manager::{
    Issued, Lease, ReaperHandle, SessionError, Sessions, Settings, Slot, spawn_reaper,
};
pub use memory::MemoryStore;
pub use record::{Millis, SessionRecord, now_millis, rfc3339};
pub use state::{StateSigner, keyed_hmac};
pub use store::{SessionStore, Store, StoreError};
