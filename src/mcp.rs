//! MCP vocabulary shared by every era the proxy joins: the `_meta` keys, the HTTP header
//! names, the protocol versions, the log levels, what an `initialize` or `server/discover`
//! result tells about an upstream, and what its tools say of themselves.
//!
//! Nothing here does I/O or knows about sessions' storage; it reads and writes the
//! places in a message where MCP keeps its metadata.

pub mod caller;
pub mod client_era;
pub mod discover;
pub mod headers;
pub mod initialize;
pub mod logging;
pub mod meta;
pub mod method;
pub mod tools;
pub mod version;

pub use client_era::ClientEra;
pub use method::Method;
