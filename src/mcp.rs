//! MCP vocabulary shared by every era the proxy joins: the `_meta` keys, the HTTP header
//! names, the protocol versions, and what an `initialize` result tells about an upstream.
//!
//! Nothing here does I/O or knows about sessions' storage; it reads and writes the
//! places in a message where MCP keeps its metadata.

pub mod caller;
pub mod headers;
pub mod initialize;
pub mod meta;
pub mod method;
pub mod version;

pub use method::Method;
