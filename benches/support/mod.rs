//! The benchmark's parts: the fast upstreams (2025-11-25 and 2026-07-28), the floor hop, the processes under test, the HTTP client
//! and the load generator; and what every benchmark's `main` does first and last
//! ([`runtime`], [`write_report`]).

#![allow(
    dead_code,
    reason = "each benchmark uses a different part of its support"
)]

pub mod floor;
pub mod http;
pub mod load;
pub mod modern;
pub mod otlp_sink;
pub mod procs;
pub mod upstream;

use std::path::{Path, PathBuf};

/// The benchmark's own runtime: one thread, so that its CPU time stays apart from the
/// processes it measures.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Writes a benchmark's report to `name` in the target directory (`CARGO_TARGET_DIR`, or
/// `target/`), saying where on stderr; a report that cannot be written is said too.
pub fn write_report(name: &str, report: &str) {
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let path = target_dir.join(name);
    match std::fs::write(&path, report) {
        Ok(()) => eprintln!("written to {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
