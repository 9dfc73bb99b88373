//! The benchmark's parts: the fast upstream, the processes under test, the HTTP client
//! and the load generator.

pub mod http;
pub mod load;
pub mod procs;
pub mod upstream;
