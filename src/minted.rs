//! Tables keyed by session ids this proxy minted — `session::id::generate`'s 192 random
//! bits, or a sealed id around a random nonce — hashed with foldhash instead of std's
//! SipHash-1-3.
//!
//! SipHash is std's default so that a peer who chooses a table's keys cannot make them
//! collide (HashDoS). The tables here only ever hold ids the proxy minted: a client may
//! look any id up, but a lookup adds nothing, and an id it makes up is never put in. (The
//! Redis store's reports are counted in 64 groups by the same hash: any id reaches one,
//! nothing is kept per id.) foldhash, seeded at random per table (the hasher `hashbrown`
//! uses by default), is enough for such keys and costs a session call a few hundred
//! instructions less than SipHash did (benches/README.md, "SipHash where a peer chooses
//! the keys only"). Tables whose keys a peer chooses — callers' accounts, connections per
//! address, a client's request ids — keep SipHash.

/// The hasher of the tables below.
pub type Hasher = foldhash::fast::RandomState;

/// A table keyed by minted session ids.
pub type Map<K, V> = std::collections::HashMap<K, V, Hasher>;

/// A concurrent table keyed by minted session ids.
pub type SharedMap<K, V> = dashmap::DashMap<K, V, Hasher>;
